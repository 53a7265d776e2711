"""The one scaling command of issue 53: ``python benchmarks/scaling.py`` (no single-run options).

    PYTHONPATH=. python benchmarks/scaling.py [--corpora ewt,brown_universal,brown_tags,
        synthetic_4m] [--threads 1,2,4,8,16] [--crf spanish,conll2000] [--data-dir DIR]
        [--commit HASH] [--machine TEXT] [--out benchmarks/results/scaling16.json]
        [--budget-scale 1.0] [--quick]

For each corpus and each p: ``demidcd train`` (p = 1: 1-DCD, ``--algorithm dcd``; p ≥ 2: the
default algorithm and layout, what a user gets) with snapshots and their work counts, timed
one after the other; then every snapshot evaluated (``evaluate-snapshots``, several at a time:
not timed). f* is the lowest primal of the corpus's runs. Reported per p, in the issue's
schema: ``speedup`` (time to 1% gap of 1-DCD at p = 1 over p's), ``time_to_1pct``, ``wall``
(the whole command, set-up included), ``setup`` (wall less the solver's clock), ``cpu`` (the
run's average CPU %), and the decomposition speed-up = p × ``throughput`` / ``inflation``
(:func:`inflation.decompose`: per-process updates + inferences per second against the lone
1-DCD process, and updates + inferences to 1% against 1-DCD's). Then the CRF's seconds per
L-BFGS iteration at each p: the Spanish CoNLL-2002 dicts (sklearn-crfsuite's tutorial features,
through the library) and CoNLL-2000 with ``benchmarks/chunk_crfpp.template`` (the CLI).

Needs only the repository, numpy, numba and psutil (matplotlib for the plot, skipped without
it); runs as ``PYTHONPATH=. python benchmarks/scaling.py`` from a copy of the working tree. A
corpus whose files are absent under ``--data-dir`` is skipped and the JSON says so. The run
merges into an existing output file of the same commit, so the suite can be run in parts
(``--corpora ewt,brown_universal --crf ''`` in one command, the rest in another), each under
the device's 10 minutes. ``--quick``: a dry run for a small machine (p = 1, 2, tiny budgets,
the first :data:`QUICK_SENTENCES` sentences of every corpus, 4 CRF iterations), written as
``scaling_quick.json``; the suite
refuses to write ``scaling16.json`` from a machine with fewer than 16 cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
if importlib.util.find_spec("demidcd") is None:  # a copy of the tree, nothing installed
    sys.path.append(str(Path(__file__).resolve().parents[1]))

from common import (  # noqa: E402
    RESULTS,
    ROOT,
    machine_info,
    machine_line,
    pyplot,
    read_jsonl,
    run_cli,
    save_figure,
    say,
    write_json,
)
from inflation import CORPORA, decompose, evaluate_all, train_run, work_to_gap  # noqa: E402

SYNTHETIC_SENTENCES = 267_000
"""Training sentences of ``synthetic_4m`` (mean length 15: about 4 M tokens)."""
BUDGET = {"ewt": 24.0, "brown_universal": 36.0, "brown_tags": 150.0, "synthetic_4m": 120.0}
"""1-DCD's time limit at p = 1 per corpus (seconds; 1% gap at 11.8 s on EWT and 17.3 s on
Brown universal on the 16-core Xeon); p gets BUDGET × :data:`BUDGET_SHARE` [p]."""
BUDGET_SHARE = {1: 1.0, 2: 0.7, 4: 0.5, 8: 0.4, 16: 0.35}
SNAPSHOT_CAP = {"brown_tags": 14, "synthetic_4m": 20}
"""At most this many snapshots evaluated per run where a primal costs a long inference pass
(Brown's 472 tags: ~30 s on one core)."""
CRF_ITERATIONS = 12
WARM_SENTENCES = 200
QUICK_SENTENCES = 1500
"""``--quick``: training sentences of every corpus (the first ones; the synthetic one made so)."""
SUITE_CORPORA = ("ewt", "brown_universal", "brown_tags", "synthetic_4m")
KEYS = ("speedup", "time_to_1pct", "wall", "setup", "cpu", "throughput", "inflation")


def git_commit() -> str | None:
    """HEAD's hash when this is a git checkout (a copy of the working tree may not be)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def head_sentences(src: Path, dst: Path, n: int) -> Path:
    """The first ``n`` blank-line-separated sentences of ``src`` written to ``dst`` (the quick
    mode's small copies)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as g:
        k, inside = 0, False
        for line in f:
            if line.strip():
                inside = True
            elif inside:
                inside, k = False, k + 1
                if k >= n:
                    g.write(line)
                    break
            g.write(line)
    return dst


def budget_of(corpus: str, p: int, scale: float) -> float:
    """Time limit of p's run on ``corpus`` (:data:`BUDGET`, :data:`BUDGET_SHARE`)."""
    return max(3.0, BUDGET.get(corpus, 30.0) * BUDGET_SHARE.get(p, 0.35) * scale)


def corpus_table(runs: dict[int, dict], modes: dict[str, dict[int, dict]] | None = None
                 ) -> dict:
    """The issue's per-corpus figures from the runs (p → :func:`inflation.train_run` with its
    rows evaluated): f* the lowest primal of all; per p (as a string key) speed-up, time to
    1%, wall, set-up, CPU, throughput and inflation (None where 1% was not reached).
    ``modes``: runs with another update mode of the several learners (mode → p → run), whose
    figures go to ``update_modes[mode]`` in the same form, against the same f* and p = 1."""
    every = [*runs.values(), *(r for m in (modes or {}).values() for r in m.values())]
    fstar = min(r["primal"] for run in every for r in run["rows"]
                if r.get("primal") is not None and math.isfinite(r["primal"]))
    base = work_to_gap(runs[1]["rows"], fstar) if 1 in runs else None
    out = _figures(runs, fstar, base)
    out["fstar"] = fstar
    if base is None:
        out["note"] = ("1-DCD at p = 1 did not reach 1% of f* within its budget: no speed-up "
                       "(raise --budget-scale)")
    if modes:
        out["update_modes"] = {m: _figures(r, fstar, base) for m, r in modes.items()}
    return out


def _figures(runs: dict[int, dict], fstar: float, base: dict | None) -> dict:
    """:func:`corpus_table`'s figures of ``runs`` (p → run) against f* and p = 1's crossing
    ``base`` (:func:`inflation.work_to_gap`)."""
    at = {p: work_to_gap(run["rows"], fstar) for p, run in runs.items()}
    out: dict = {k: {} for k in KEYS}
    for p, run in sorted(runs.items()):
        a, key = at[p], str(p)
        out["time_to_1pct"][key] = a["seconds"] if a else None
        out["wall"][key] = run["wall"]
        out["setup"][key] = run["setup"]
        out["cpu"][key] = run["cpu_percent"]
        d = decompose(p, base["seconds"], base.get("work") or math.nan, a["seconds"],
                      a.get("work") or math.nan) if a and base else None
        t = (base["seconds"] / a["seconds"]) if a and base and a["seconds"] > 0 else None
        out["speedup"][key] = t
        out["throughput"][key] = d["throughput"] if d and math.isfinite(d["throughput"]) \
            else None
        out["inflation"][key] = d["inflation"] if d and math.isfinite(d["inflation"]) else None
    out["runs"] = {str(p): {k: run.get(k) for k in (
        "algorithm", "learners", "learner_processes", "layout_line", "solver_seconds",
        "stop_reason", "cpu_of_percent", "update_mode")} | {"work_at_1pct": at[p]}
        for p, run in runs.items()}
    return out


def warm_up(train: str, opts: list[str], work: Path) -> float:
    """Compile (or load) every kernel the timed runs use on this corpus's shape, untimed: 1-DCD,
    one learner with a worker, two learners, each for an epoch on the first
    :data:`WARM_SENTENCES` sentences (a fresh copy of the tree has an empty numba cache, and
    the first timed run would pay for it). Returns the seconds it took."""
    t0 = time.perf_counter()
    small = head_sentences(Path(train), work / "warm" / "train", WARM_SENTENCES)
    for extra in (["--algorithm", "dcd", "--threads", "1"],
                  ["--algorithm", "demi-dcd", "--threads", "2", "--learners", "1"],
                  ["--algorithm", "demi-dcd", "--threads", "2", "--learners", "2"]):
        run_cli(["train", "--train", str(small), *opts, *extra, "--max-epochs", "1",
                 "--model", str(work / "warm" / "m.npz"), "--quiet"], work / "warm" / "log",
                timeout=900)
    return time.perf_counter() - t0


def run_corpus(name: str, train: str, test: str | None, opts: list[str], threads: list[int],
               scale: float, work: Path, every: float, quiet: bool,
               modes: tuple[list[str], list[int]] = ([], [])) -> dict:
    """The runs of one corpus at each p, evaluated; ``modes``: (update modes, the p at which
    each also runs with ``--learners p``: :func:`corpus_table`'s ``update_modes``)."""
    warm = warm_up(train, opts, work / name)
    say(f"{name}: warm-up (kernels compiled or loaded, untimed) {warm:.0f} s", quiet)
    runs: dict[int, dict] = {}
    for p in threads:
        b = budget_of(name, p, scale)
        say(f"{name}: p = {p}, {b:.0f} s", quiet)
        runs[p] = train_run(train, opts, work / name, f"p{p}", p, "dcd" if p == 1 else None,
                            None, b, every)
        r = runs[p]
        say(f"  {r['stop_reason']} after {r['solver_seconds']:.1f} s of {r['wall']:.1f} s; CPU "
            f"{r['cpu_percent']}% of {100 * p}%" + (f"; {r['layout_line']}" if r["layout_line"]
                                                   else ""), quiet)
    extra: dict[str, dict[int, dict]] = {}
    for mode in modes[0]:
        for p in (q for q in modes[1] if q >= 2):
            b = budget_of(name, p, scale)
            say(f"{name}: p = {p} learners, update mode {mode}, {b:.0f} s", quiet)
            r = train_run(train, opts, work / name, f"p{p}-{mode}", p, "demi-dcd", str(p), b,
                          every, update_mode=mode)
            extra.setdefault(mode, {})[p] = r
            say(f"  {r['stop_reason']} after {r['solver_seconds']:.1f} s", quiet)
    say(f"{name}: evaluating the snapshots", quiet)
    evaluate_all([*runs.values(), *(r for m in extra.values() for r in m.values())], train,
                 test, opts, max(1, (os.cpu_count() or 2) // 2), min(1.0, 2 * every),
                 SNAPSHOT_CAP.get(name))
    out = corpus_table(runs, extra)
    out["warm_up_seconds"] = warm
    return out


def crf_spanish(data: Path, threads: list[int], iterations: int, quiet: bool,
                sentences: int | None = None) -> dict:
    """Seconds per L-BFGS iteration at each p on CoNLL-2002 Spanish with the tutorial's dict
    features (the library: the features reach ``fit`` as dicts), from the callback's clock;
    the fit's wall (set-up included) beside it."""
    from crf_scaling import read_conll2002, word2features

    from demidcd.api import NamedEntityTagger

    tr = read_conll2002(str(data / "esp.train"))[:sentences]
    X = [[word2features(s, i) for i in range(len(s))] for s in tr]
    Y = [[t[-1] for t in s] for s in tr]
    out: dict = {"s_per_iteration": {}, "wall": {}, "iterations": {}}
    for p in (1, 2):  # warm-up, untimed: the kernels compiled or loaded
        NamedEntityTagger(algorithm="crf", crf_method="lbfgs", threads=p,
                          max_iterations=2).fit(X[:WARM_SENTENCES], Y[:WARM_SENTENCES])
    for p in threads:
        times: list[tuple[float, int]] = []
        t0 = time.perf_counter()
        est = NamedEntityTagger(algorithm="crf", crf_method="lbfgs", c1=0.1, c2=0.1, threads=p,
                                max_iterations=iterations,
                                callback=lambda rec, w, t=times: t.append(
                                    (time.perf_counter(), int(rec["epoch"]))))
        est.fit(X, Y)
        wall = time.perf_counter() - t0
        spi = ((times[-1][0] - times[0][0]) / (times[-1][1] - times[0][1])
               if len(times) >= 2 and times[-1][1] > times[0][1] else None)
        out["s_per_iteration"][str(p)], out["wall"][str(p)] = spi, wall
        out["iterations"][str(p)] = times[-1][1] if times else 0
        say(f"crf spanish p = {p}: {spi if spi is None else round(spi, 4)} s/iteration, "
            f"fit {wall:.1f} s", quiet)
    return out


def crf_conll2000(data: Path, threads: list[int], iterations: int, work: Path,
                  quiet: bool, sentences: int | None = None) -> dict:
    """Seconds per L-BFGS iteration at each p on CoNLL-2000 with the CRF++ template
    (``benchmarks/chunk_crfpp.template``), from the log records' clock; the command's wall."""
    tpl = Path(__file__).resolve().parent / "chunk_crfpp.template"
    out: dict = {"s_per_iteration": {}, "wall": {}, "iterations": {}}
    train = data / "train.txt"
    if sentences:
        train = head_sentences(train, work / "crf-train.txt", sentences)
    warm = head_sentences(train, work / "crf-warm.txt", WARM_SENTENCES)
    for p in [("warm", 1), ("warm", 2), *threads]:  # the first two untimed: the kernels
        d = work / (f"crf-warm{p[1]}" if isinstance(p, tuple) else f"crf{p}")
        d.mkdir(parents=True, exist_ok=True)
        if isinstance(p, tuple):
            run_cli(["train", "--task", "chunking", "--template", str(tpl), "--format",
                     "columns", "--train", str(warm), "--algorithm", "crf", "--crf-method",
                     "lbfgs", "--max-iterations", "2", "--threads", str(p[1]), "--model",
                     str(d / "m.npz"), "--quiet"], d / "train.log", timeout=900)
            continue
        _, wall = run_cli(["train", "--task", "chunking", "--template", str(tpl), "--format",
                           "columns", "--train", str(train), "--algorithm", "crf",
                           "--crf-method", "lbfgs", "--max-iterations", str(iterations),
                           "--threads", str(p), "--log-json", str(d / "log.jsonl"), "--model",
                           str(d / "m.npz")], d / "train.log", timeout=1800)
        recs = [r for r in read_jsonl(d / "log.jsonl") if "seconds" in r]
        spi = ((recs[-1]["seconds"] - recs[0]["seconds"]) / (recs[-1]["epoch"] - recs[0]["epoch"])
               if len(recs) >= 2 and recs[-1]["epoch"] > recs[0]["epoch"] else None)
        out["s_per_iteration"][str(p)], out["wall"][str(p)] = spi, wall
        out["iterations"][str(p)] = recs[-1]["epoch"] if recs else 0
        say(f"crf conll2000 p = {p}: {spi if spi is None else round(spi, 4)} s/iteration, "
            f"command {wall:.1f} s", quiet)
    return out


def plot(res: dict, path: Path) -> Path | None:
    """Speed-up against p per corpus (and the CRF's per-iteration), with the ideal line."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.8))
    top = 1
    for name, c in res["corpora"].items():
        s = {int(p): v for p, v in c.get("speedup", {}).items() if v}
        if s:
            ax.plot(sorted(s), [s[p] for p in sorted(s)], "o-", label=name)
            top = max(top, *s)
    for name, c in res.get("crf", {}).items():
        s = c.get("s_per_iteration", {})
        if s.get("1"):
            ps = sorted(int(p) for p, v in s.items() if v)
            ax.plot(ps, [s["1"] / s[str(p)] for p in ps], "s--", label=f"CRF {name} (per it.)")
            top = max(top, *ps)
    ax.plot([1, top], [1, top], "k:", lw=0.8, label="ideal")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("processes p")
    ax.set_ylabel("speed-up over 1-DCD at p = 1 (time to 1% gap)")
    ax.set_title(f"{res['machine']}, {str(res['commit'])[:9]}", fontsize=8)
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scaling.py", description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default=",".join(SUITE_CORPORA))
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--crf", default="spanish,conll2000", help="CRF data sets ('' for none)")
    ap.add_argument("--crf-iterations", type=int, default=CRF_ITERATIONS)
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--budget-scale", type=float, default=1.0)
    ap.add_argument("--snapshot-every", type=float, default=0.25)
    ap.add_argument("--commit", help="the git hash measured (default: git rev-parse HEAD)")
    ap.add_argument("--machine", help="the machine, in words (default: CPU model and cores)")
    ap.add_argument("--out", help="default benchmarks/results/scaling16.json "
                    "(--quick: scaling_quick.json)")
    ap.add_argument("--no-merge", action="store_true",
                    help="replace the output file instead of merging into it (same commit)")
    ap.add_argument("--quick", action="store_true", help="dry run: p = 1, 2, tiny budgets")
    ap.add_argument("--modes", default="",
                    help="the several learners' experimental update modes (plain, atomic, hot) "
                         "to run too, with --learners p, at each p of --modes-at")
    ap.add_argument("--modes-at", default="", help="the p of --modes (default: the largest p)")
    ap.add_argument("--work-dir")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    import json

    info = machine_info()
    cores = int(info.get("nproc") or os.cpu_count() or 1)
    threads = sorted({int(x) for x in a.threads.split(",") if x.strip()} | {1})
    if a.quick:
        threads = [p for p in threads if p <= 2] or [1, 2]
        a.budget_scale = min(a.budget_scale, 0.3)
        a.crf_iterations = min(a.crf_iterations, 4)
    modes = ([m.strip() for m in a.modes.split(",") if m.strip()],
             [int(x) for x in a.modes_at.split(",") if x.strip()] or [max(threads)])
    out = Path(a.out) if a.out else RESULTS / ("scaling_quick.json" if a.quick
                                               else "scaling16.json")
    if out.name == "scaling16.json" and cores < 16:
        ap.error(f"this machine has {cores} cores: scaling16.json is for >= 16 (use --quick "
                 "or --out)")
    data = Path(a.data_dir)
    commit = a.commit or git_commit() or "unknown"
    say(f"machine: {machine_line(info)}; commit {commit}", a.quiet)
    res: dict = {"commit": commit, "cores": cores, "machine": a.machine or
                 f"{info.get('cpu')}, {cores} cores", "corpora": {}, "crf": {}}
    if out.is_file() and not a.no_merge:
        old = json.loads(out.read_text())
        if old.get("commit") == commit and old.get("cores") == cores:
            res["corpora"].update(old.get("corpora", {}))
            res["crf"].update(old.get("crf", {}))
    res.update({"threads": threads, "budget_scale": a.budget_scale, "quick": a.quick,
                "machine_info": info, "command": "python benchmarks/scaling.py " + " ".join(
                    argv if argv is not None else sys.argv[1:])})
    work = Path(a.work_dir) if a.work_dir else Path(tempfile.mkdtemp(prefix="demidcd-s16-"))
    t_all = time.perf_counter()
    try:
        for name in (x.strip() for x in a.corpora.split(",") if x.strip()):
            if name == "synthetic_4m":
                n = QUICK_SENTENCES if a.quick else SYNTHETIC_SENTENCES
                run_cli(["generate", "--out-dir", str(work / "syn"), "--sentences", str(n),
                         "--quiet"], work / "generate.log", timeout=1800)
                paths = (str(work / "syn" / "train.txt"), str(work / "syn" / "dev.txt"), [])
            elif name in CORPORA:
                c = CORPORA[name]
                tr, te = data / c["train"], data / c["test"]
                if a.quick and tr.is_file():  # small copies
                    tr = head_sentences(tr, work / name / "train", QUICK_SENTENCES)
                    te = head_sentences(te, work / name / "test", QUICK_SENTENCES // 4) \
                        if te.is_file() else te
                paths = (str(tr), str(te) if te.is_file() else None, list(c["opts"])) \
                    if tr.is_file() else None
            else:
                ap.error(f"--corpora: unknown corpus {name!r} ({', '.join(SUITE_CORPORA)})")
            if paths is None:
                msg = f"skipped: {data / CORPORA[name]['train']} not found (--data-dir)"
                say(f"{name}: {msg}", a.quiet)
                res["corpora"][name] = {"skipped": msg, **{k: {} for k in KEYS}}
                continue
            res["corpora"][name] = run_corpus(name, *paths, threads, a.budget_scale,
                                              work, a.snapshot_every, a.quiet, modes)
            write_json(out, res)  # what is measured so far survives a later failure
        for name in (x.strip() for x in a.crf.split(",") if x.strip()):
            src = {"spanish": data / "conll2002", "conll2000": data / "conll2000"}.get(name)
            if src is None:
                ap.error(f"--crf: unknown data set {name!r} (spanish, conll2000)")
            need = src / ("esp.train" if name == "spanish" else "train.txt")
            if not need.is_file():
                res["crf"][name] = {"skipped": f"{need} not found (--data-dir)",
                                    "s_per_iteration": {}}
                say(f"crf {name}: {res['crf'][name]['skipped']}", a.quiet)
                continue
            cut = QUICK_SENTENCES if a.quick else None
            res["crf"][name] = (crf_spanish(src, threads, a.crf_iterations, a.quiet, cut)
                                if name == "spanish" else
                                crf_conll2000(src, threads, a.crf_iterations, work, a.quiet, cut))
            write_json(out, res)
    finally:
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    res["suite_seconds"] = time.perf_counter() - t_all
    png = plot(res, out.with_suffix(".png"))
    res["plot"] = png.name if png else None
    write_json(out, res)
    for name, c in res["corpora"].items():
        if "skipped" in c:
            say(f"{name}: {c['skipped']}", a.quiet)
            continue
        say(f"{name}: " + "; ".join(
            f"p={p} {c['speedup'].get(p) or math.nan:.2f}x = {p} x "
            f"{c['throughput'].get(p) or math.nan:.2f} / {c['inflation'].get(p) or math.nan:.2f}"
            f" (wall {c['wall'][p]:.1f} s, set-up {c['setup'][p] or math.nan:.1f} s)"
            for p in c["wall"]), a.quiet)
    say(f"wrote {out}" + (f" and {png}" if png else " (no matplotlib: no plot)") +
        f" in {res['suite_seconds']:.0f} s", a.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
