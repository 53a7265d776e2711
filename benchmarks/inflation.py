"""Work inflation of K learner processes (issue 53, "every loss explained"), counted on any
machine: K processes time-sharing the cores change the time, not the work.

    python benchmarks/inflation.py [--corpora ewt,brown_universal] [--K 2,4,8,16]
        [--epochs ewt=20,brown_universal=16] [--budget 600] [--data-dir ../shared/data]
        [--name inflation_2core] [--quick]

For each corpus: 1-DCD on one process, then ``--algorithm demi-dcd --learners K --threads K``
for each K, all with snapshots (``work.csv`` counts the updates and inferences at every
snapshot, :mod:`demidcd.io.snapshots`), then ``demidcd evaluate-snapshots``. f* is the lowest
primal of the corpus's runs. For each run, at the first crossing of 1% relative primal gap
(interpolated in log(gap) between the snapshots on either side, as
:func:`common.time_to_gap`):

* W = updates + inferences done by then (interpolated the same way);
* work inflation I(K) = W(K) / W(1-DCD) (also for updates and inferences alone).

The speed-up decomposes exactly (:func:`decompose`): with T the time to 1% and p processes,

    S = T(1)/T(p) = p · R(p) / I(p),   R(p) = (W(p)/T(p)) / (p · W(1)/T(1)),

R the per-process throughput against a lone 1-DCD process (updates + inferences per second).
On a machine with fewer cores than K the times (and R) measure a time-shared machine; the
work (I) does not depend on it, which is why it is reported from a 2-core machine.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    machine_info,
    machine_line,
    markdown_table,
    read_snapshot_csv,
    read_summary,
    run_cli,
    say,
    thin_snapshots,
    write_json,
)

GAP = 0.01
LOOSER = (0.05, 0.02)
"""Gaps the inflation is also reported at."""

CORPORA: dict[str, dict] = {
    "ewt": {"what": "EWT XPOS", "train": "ud_english_ewt/en_ewt-ud-train.conllu",
            "test": "ud_english_ewt/en_ewt-ud-dev.conllu",
            "opts": ["--format", "conllu", "--column", "xpos"]},
    "brown_universal": {"what": "Brown, universal tags (12)", "train": "brown/brown-train.txt",
                        "test": "brown/brown-dev.txt",
                        "opts": ["--format", "columns", "--column", "3"]},
    "brown_tags": {"what": "Brown, Brown tags (472)", "train": "brown/brown-train.txt",
                   "test": "brown/brown-dev.txt", "opts": ["--format", "columns", "--column", "2"]},
}
"""The real corpora (paths under ``--data-dir``, its README's layout)."""
EPOCHS = {"ewt": 20, "brown_universal": 16, "synthetic_quick": 15}
"""Epochs of every run (1-DCD's, and each learner's over its part): past 1-DCD's 1% gap with
room for an inflation of 1.5x or so; the same work on a loaded machine as on an idle one."""


# --------------------------------------------------------------------------- arithmetic
def work_to_gap(rows: list[dict], fstar: float, gap: float = GAP) -> dict | None:
    """Time and work at the first crossing of relative primal gap ``gap`` in ``rows`` (dicts
    with seconds, primal, updates, inferences; the work may be None where not counted): the
    crossing is interpolated linearly in log(gap) between the snapshots around it, and the
    counts linearly in the same fraction. None if never reached (or not counted there)."""
    prev = None
    for r in sorted(rows, key=lambda r: r["seconds"]):
        p = r.get("primal")
        if p is None or not math.isfinite(p):
            continue
        g = (p - fstar) / abs(fstar)
        if g <= gap:
            if prev is None or prev[1] <= 0 or g <= 0:
                frac, a = 1.0, r
            else:
                a, g0 = prev
                frac = (math.log(g0) - math.log(gap)) / (math.log(g0) - math.log(g))
            out = {"seconds": a["seconds"] + frac * (r["seconds"] - a["seconds"])}
            for k in ("updates", "inferences"):
                x0, x1 = a.get(k), r.get(k)
                if x0 is None or x1 is None:
                    return None if k == "updates" else {**out, k: None}
                out[k] = x0 + frac * (x1 - x0)
            out["work"] = out["updates"] + out["inferences"]
            return out
        prev = (r, g)
    return None


def decompose(p: int, t1: float, w1: float, tp: float, wp: float) -> dict[str, float]:
    """Speed-up S = t1/tp of p processes against 1-DCD, and its factors: R, the per-process
    throughput (wp/tp)/(p·w1/t1) against a lone 1-DCD process, and I = wp/w1, the work
    inflation; S = p·R/I exactly (module docstring). NaN where a time or work is missing."""
    bad = any(not (isinstance(x, int | float) and math.isfinite(x) and x > 0)
              for x in (t1, w1, tp, wp))
    if bad or p < 1:
        return {"speedup": math.nan, "throughput": math.nan, "inflation": math.nan}
    return {"speedup": t1 / tp, "throughput": (wp / tp) / (p * w1 / t1), "inflation": wp / w1}


# --------------------------------------------------------------------------- runs
def train_run(train: str, opts: list[str], work: Path, label: str, threads: int,
              algorithm: str | None, learners: str | None, budget: float, every: float,
              seed: int = 0, extra: list[str] | None = None, max_epochs: int | None = None,
              update_mode: str | None = None) -> dict:
    """``demidcd train`` with snapshots (``algorithm`` None: the default one at ``threads``,
    ``learners`` None: the default layout); returns the command's wall seconds, the solver's
    seconds, the set-up (wall less solver: reading, features, encoding, starting the
    processes, saving), the average CPU and the snapshot directory (evaluated by
    :func:`evaluate_run`). ``update_mode``: the several learners' experimental update mode
    (:mod:`demidcd.parallel.experimental`; None: the default)."""
    d = work / label
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    snap = d / "snapshots"
    cmd = ["train", "--threads", str(threads), "--train", train, *opts, "--time-limit",
           str(budget), "--snapshot-every", str(every), "--snapshot-dir", str(snap),
           "--model", str(d / "model.npz"), "--summary-json", str(d / "summary.json"),
           "--seed", str(seed), *(extra or [])]
    if algorithm:
        cmd += ["--algorithm", algorithm]
    if learners:
        cmd += ["--learners", str(learners)]
    if max_epochs:  # the same work whatever the load: each learner's epochs over its part
        cmd += ["--max-epochs", str(max_epochs)]
    text, wall = run_cli(cmd, d / "train.log", timeout=budget * 4 + 900,
                         experimental={"update_mode": update_mode} if update_mode else None)
    summ = read_summary(d / "summary.json") or {}
    x = summ.get("extra", {})
    solver = float(summ.get("seconds") or math.nan)
    layout = next((ln for ln in text.splitlines() if "learner process" in ln and "because" in ln),
                  None)
    return {"label": label, "threads": threads, "algorithm": algorithm or "default",
            "learners": learners, "update_mode": update_mode, "wall": wall,
            "solver_seconds": solver,
            "setup": wall - solver if math.isfinite(solver) else None,
            "cpu_percent": x.get("cpu_average"), "cpu_of_percent": 100 * threads,
            "stop_reason": summ.get("stop_reason"), "learner_processes": x.get("learners"),
            "layout_line": layout, "snapshots": str(snap), "dir": str(d), "rows": []}


def evaluate_run(run: dict, train: str, test: str | None, opts: list[str],
                 min_step: float = 1.0, cap: int | None = None) -> dict:
    """``evaluate-snapshots`` of a :func:`train_run` (thinned to log-spaced snapshots, at most
    ``cap`` of them: each costs an inference pass over the training data): fills
    ``run["rows"]`` (seconds, primal, metric, updates, inferences) and removes the
    snapshots."""
    snap, d = Path(run["snapshots"]), Path(run["dir"])
    rel = 0.08
    while thin_snapshots(snap, min_step, rel)[0] > (cap or 10**9):
        rel *= 1.5
    ev = ["evaluate-snapshots", str(snap), "--train", train, *opts, "--out",
          str(d / "snapshots.csv"), "--quiet"]
    if test:
        ev += ["--test", test]
    run_cli(ev, d / "evaluate.log", timeout=3600)
    run["rows"] = read_snapshot_csv(d / "snapshots.csv")
    shutil.rmtree(snap, ignore_errors=True)
    return run


def evaluate_all(runs: list[dict], train: str, test: str | None, opts: list[str],
                 parallel: int, min_step: float = 1.0, cap: int | None = None) -> None:
    """:func:`evaluate_run` on every run, ``parallel`` at a time (after the timed runs: the
    evaluation's time is not measured)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, parallel)) as pool:
        for f in [pool.submit(evaluate_run, r, train, test, opts, min_step, cap)
                  for r in runs]:
            f.result()


def corpus_paths(name: str, data_dir: Path) -> tuple[str, str, list[str]] | None:
    """(train, test, options) of a corpus of :data:`CORPORA` under ``data_dir``; None if its
    files are absent."""
    c = CORPORA[name]
    tr, te = data_dir / c["train"], data_dir / c["test"]
    if not tr.is_file():
        return None
    return str(tr), str(te) if te.is_file() else None, list(c["opts"])


def measure_inflation(train: str, test: str | None, opts: list[str], ks: list[int],
                      budget: float, every: float, work: Path, quiet: bool,
                      epochs: int | None = None, one_learner: list[int] | None = None,
                      update_mode: str | None = None) -> dict:
    """1-DCD and K learners for each K in ``ks`` on one corpus, each stopped after ``epochs``
    epochs (each learner's, over its part: the same work whatever the machine's load) or
    ``budget`` seconds; the counts at 1% gap and the work inflation of each K (module
    docstring). ``update_mode``: the K learners' experimental update mode (None: default)."""
    runs = {"1": train_run(train, opts, work, "dcd", 1, "dcd", None, budget, every,
                           max_epochs=epochs)}
    say(f"  1-DCD: {runs['1']['stop_reason']} after {runs['1']['solver_seconds']:.1f} s", quiet)
    for k in ks:
        runs[str(k)] = r = train_run(train, opts, work, f"K{k}", k, "demi-dcd", str(k), budget,
                                     every, max_epochs=epochs, update_mode=update_mode)
        say(f"  K={k}: {r['stop_reason']} after {r['solver_seconds']:.1f} s, CPU "
            f"{r['cpu_percent']}% of {100 * k}%", quiet)
    for p in one_learner or ():  # DEMI-DCD's one learner and p − 1 workers ("1L" + p)
        runs[f"1L{p}"] = r = train_run(train, opts, work, f"1L{p}", p, "demi-dcd", "1", budget,
                                       every, max_epochs=epochs)
        say(f"  one learner, p={p}: {r['stop_reason']} after {r['solver_seconds']:.1f} s", quiet)
    evaluate_all(list(runs.values()), train, test, opts, 2, min(1.0, 2 * every))
    return summarise(runs)


def summarise(runs: dict[str, dict]) -> dict:
    """f* (the lowest primal of ``runs``), each run's time and work at 1% gap and its
    inflation against run "1" (1-DCD); ``inflation_at`` gives the inflation at the looser
    gaps :data:`LOOSER` too (less sensitive to how close the runs came to f*)."""
    fstar = min(r["primal"] for run in runs.values() for r in run["rows"]
                if r.get("primal") is not None and math.isfinite(r["primal"]))
    at = {k: work_to_gap(run["rows"], fstar) for k, run in runs.items()}
    base = at.get("1")
    out: dict = {"fstar": fstar, "gap": GAP, "K": {}}
    looser = {g: {k: work_to_gap(run["rows"], fstar, g) for k, run in runs.items()}
              for g in LOOSER}
    for k, run in runs.items():
        a = at[k]
        row = {"time_to_1pct": a["seconds"] if a else None,
               "updates_to_1pct": a["updates"] if a else None,
               "inferences_to_1pct": a["inferences"] if a else None,
               "work_to_1pct": a.get("work") if a else None,
               "wall": run["wall"], "solver_seconds": run["solver_seconds"],
               "setup": run["setup"], "cpu_percent": run["cpu_percent"],
               "stop_reason": run["stop_reason"], "learner_processes": run["learner_processes"],
               "snapshots_evaluated": len(run["rows"])}
        if a and base and a.get("work") and base.get("work"):
            row["inflation"] = a["work"] / base["work"]
            row["inflation_updates"] = a["updates"] / base["updates"]
            row["inflation_inferences"] = (a["inferences"] / base["inferences"]
                                           if base["inferences"] else None)
            d = decompose(int(k.split("L")[-1]), base["seconds"], base["work"], a["seconds"],
                          a["work"])
            row["throughput_time_shared"] = d["throughput"]
        else:
            row["inflation"] = None
        row["inflation_at"] = {
            f"{g:g}": (w[k]["work"] / w["1"]["work"] if w.get(k) and w.get("1") and
                       w[k].get("work") and w["1"].get("work") else None)
            for g, w in looser.items()}
        last = run["rows"][-1] if run["rows"] else {}
        row["work_done"] = ((last.get("updates") or 0) + (last.get("inferences") or 0)) \
            if last else None  # the whole run's: a lower bound where 1% was not reached
        out["K"][k] = row
    return out


def load_runs(corpus_dir: Path) -> dict[str, dict]:
    """The runs a ``--work-dir`` kept for one corpus (``dcd``, ``K2``, …: their snapshots.csv
    and summary.json), as :func:`summarise` takes them (``--summarise-only``)."""
    runs = {}
    for d in sorted(corpus_dir.iterdir()):
        if not (d / "snapshots.csv").is_file():
            continue
        summ = read_summary(d / "summary.json") or {}
        x = summ.get("extra", {})
        runs["1" if d.name == "dcd" else d.name.removeprefix("K")] = {
            "rows": read_snapshot_csv(d / "snapshots.csv"), "wall": None,
            "solver_seconds": summ.get("seconds"), "setup": None,
            "cpu_percent": x.get("cpu_average"), "stop_reason": summ.get("stop_reason"),
            "learner_processes": x.get("learners")}
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="ewt,brown_universal")
    ap.add_argument("--K", default="2,4,8,16", help="learner process counts")
    ap.add_argument("--one-learner", default="",
                    help="process counts p at which to run DEMI-DCD's one learner and p - 1 "
                         "workers too (its inflation: stale w̄), e.g. 2")
    ap.add_argument("--budget", type=float, default=600.0,
                    help="seconds per run, at most (a safety net: --epochs stops the runs)")
    ap.add_argument("--epochs", default=",".join(f"{k}={v}" for k, v in EPOCHS.items()),
                    help="epochs per run, per corpus (CORPUS=E,...; 0: the time limit only)")
    ap.add_argument("--snapshot-every", type=float, default=1.0)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared"
                                                / "data"))
    ap.add_argument("--name", default="inflation_2core")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--work-dir")
    ap.add_argument("--quick", action="store_true",
                    help="a dry run: a synthetic corpus of 3,000 sentences, K = 2, 4, 15 epochs, "
                         "results named NAME_quick")
    ap.add_argument("--summarise-only", metavar="WORK_DIR",
                    help="no runs: summarise the runs a --work-dir kept (one folder per corpus)")
    ap.add_argument("--update-mode", choices=("plain", "atomic", "hot"),
                    help="the K learners' experimental update mode (default: the engine's)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    ks = sorted({int(x) for x in a.K.split(",") if x.strip()})
    epochs = {k: int(v) for k, v in (x.split("=") for x in a.epochs.split(",") if x.strip())}
    info = machine_info()
    say(f"machine: {machine_line(info)}", a.quiet)
    work = Path(a.work_dir) if a.work_dir else Path(tempfile.mkdtemp(prefix="demidcd-infl-"))
    res: dict = {"benchmark": "work inflation of K learners (issue 53)", "machine": info,
                 "command": "python benchmarks/inflation.py " + " ".join(
                     argv if argv is not None else sys.argv[1:]),
                 "budget_seconds": a.budget, "epochs": a.epochs, "K": ks, "corpora": {},
                 "update_mode": a.update_mode,
                 "skipped": {},
                 "note": ("K learner processes time-share this machine's cores: the work "
                          "(updates + inferences to 1% gap) is what is measured; times, CPU "
                          "and throughput are of a time-shared (and, here, shared) machine")}
    try:
        if a.summarise_only:
            name, todo = a.name, {}
            for d in sorted(Path(a.summarise_only).iterdir()):
                runs = load_runs(d) if d.is_dir() else {}
                if "1" in runs:
                    res["corpora"][d.name] = summarise(runs)
            res["summarised_from"] = a.summarise_only
        elif a.quick:
            ks, a.budget, name = [2, 4], min(a.budget, 60.0), a.name + "_quick"
            run_cli(["generate", "--out-dir", str(work / "syn"), "--sentences", "3000",
                     "--quiet"], work / "generate.log")
            todo = {"synthetic_quick": (str(work / "syn" / "train.txt"),
                                        str(work / "syn" / "dev.txt"), [])}
        else:
            name, todo = a.name, {}
            for c in (x.strip() for x in a.corpora.split(",") if x.strip()):
                if c not in CORPORA:
                    ap.error(f"--corpora: unknown corpus {c!r} ({', '.join(CORPORA)})")
                paths = corpus_paths(c, Path(a.data_dir))
                if paths is None:
                    msg = f"{Path(a.data_dir) / CORPORA[c]['train']} not found: skipped"
                    say(f"{c}: {msg}", a.quiet)
                    res["skipped"][c] = msg
                else:
                    todo[c] = paths
        for c, (tr, te, opts) in todo.items():
            say(f"{c}: 1-DCD and K = {ks}, {a.budget:g} s each", a.quiet)
            say(f"  {epochs.get(c) or 'no'} epoch limit", a.quiet)
            res["corpora"][c] = measure_inflation(
                tr, te, opts, ks, a.budget, a.snapshot_every, work / c, a.quiet,
                epochs.get(c) or None, [int(x) for x in a.one_learner.split(",") if x.strip()],
                a.update_mode)
            res["corpora"][c]["epochs"] = epochs.get(c)
    finally:
        if not a.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    for c, r in res["corpora"].items():
        r.setdefault("epochs", epochs.get(c))
    rows = []
    for c, r in res["corpora"].items():
        for k, x in sorted(r["K"].items(), key=lambda kv: ("L" in kv[0], kv[0].zfill(4))):
            rows.append([c, "1-DCD" if k == "1" else f"one learner, p = {k[2:]}" if "L" in k
                         else f"K = {k}",
                         f"{x['time_to_1pct']:.1f} s" if x["time_to_1pct"] else "not reached",
                         f"{x['work_to_1pct']:,.0f}" if x["work_to_1pct"] else "n/a",
                         f"{x['inflation']:.2f}x" if x.get("inflation") else "n/a",
                         f"{x['inflation_updates']:.2f}x" if x.get("inflation") else "n/a",
                         f"{x['inflation_inferences']:.2f}x" if x.get("inflation_inferences")
                         else "n/a", f"{x['inflation_at']['0.05']:.2f}x"
                         if (x.get("inflation_at") or {}).get("0.05") else "n/a"])
    res["table_markdown"] = markdown_table(
        ["corpus", "run", "time to 1% (time-shared, loaded)", "updates + inferences to 1%",
         "work inflation at 1%", "updates alone", "inferences alone", "inflation at 5%"], rows)
    out = write_json(Path(a.out_dir) / f"{name}.json", res)
    say(res["table_markdown"], a.quiet)
    say(f"wrote {out}", a.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
