"""A million tokens and hundreds of labels (issue 43): Brown with both tag sets against
python-crfsuite, and the synthetic series at 0.25, 1 and 4 M tokens.

    python benchmarks/million_tokens.py brown [--budget 300] [--tagsets universal:3,brown:2]
        [--methods demi-dcd:2,dcd:1,ms-dcd:2] [--peers lbfgs,ap|none] [--peers-from FILE]
        [--quick] [--name NAME] [--out-dir benchmarks/results] [--quiet]
    python benchmarks/million_tokens.py synthetic [--sizes 12500,55000,220000]
        [--time-limit 120] [--threads 2] [--quick] [--name NAME]

``brown``: for each tag set (``../shared/data/brown``, ``--format columns``, column 3 the 12
universal tags, column 2 the Brown tags), DEMI-DCD (p = 2), 1-DCD (p = 1) and MS-DCD (p = 2),
one after the other, each ``demidcd train --time-limit BUDGET --snapshot-every S`` through the
CLI, then ``demidcd evaluate-snapshots`` on a log-spaced subset of the snapshots (the primal on
train, the accuracy on test), then ``demidcd evaluate`` of the final model on
``brown-test.txt``. Per run: time to a 1% relative primal gap against f* = the lowest primal
any of the methods reached (interpolated in log gap, as the acceptance check's ttg.py), test
accuracy at the end, peak memory (the log's ``peak memory: N MiB``, PSS of all processes),
average CPU (the log's line), set-up time (the CLI's wall time minus the summary's solver
``seconds``: interpreter start, reading, features, encoding, worker start and writing the
model, as the acceptance check counts it), the last logged ``active`` and ``max_pg`` and the
number of iteration lines after the first that print ``active 0`` or ``max_pg 0.0000`` while
unconverged. Peers, on the SAME observation features (demidcd's ``SequenceFeaturizer``
strings per token, dumped to a file by ``common.write_feature_items``): python-crfsuite
``lbfgs`` (c1 = c2 = 0.1, 100 iterations; by default on the universal tags only: with 453
labels it would take hours) and ``ap`` (averaged perceptron, 10 epochs), the settings of the
issue's peer figures, each in its own process: its
training time (wall and CPU), test accuracy and peak RSS (its ``VmHWM``). ``--peers-from
FILE`` reuses the peers of an earlier results file (ap on the Brown tags takes about 36
minutes). Wapiti runs only when a ``wapiti`` binary is on PATH, with demidcd's shipped ``pos``
template (an approximation of the built-in features, see that file); otherwise the results
say it was not installed. With each peer: the time each demidcd method needed to reach the
peer's test accuracy (from the snapshot curve) as a fraction of the peer's training time.

``synthetic``: ``generator_model(n_tags=45, vocab_size=200_000, mean_length=18,
max_length=80, seed=7)``, ``sample(model, n, seed=n)`` for each n of ``--sizes`` (12,500 /
55,000 / 220,000 sentences: about 0.25, 1 and 4 M tokens), written as columns to a temporary
folder, each ``demidcd train --threads P --time-limit T``: peak memory, bytes per token (peak
PSS over tokens) and the growth between sizes (bytes per added token), seconds per iteration
(the summary's ``seconds`` / ``epochs``) and per data pass (``seconds`` over inferences /
sentences: every learner's pass over the data, whatever it calls an iteration), set-up time and
the phases the log prints.

Both first run an untimed 2-second training (``--no-warm`` skips it) so that no measured run
pays for compiling the kernels. ``--quick`` (both): small inputs and budgets of a few seconds
(Brown: ``brown-dev.txt`` for training, 5 s per method, lbfgs 2 iterations, ap 1 epoch;
synthetic: 500 and 1,000 sentences, 3 s) for checking the script, not for figures.

Results: ``benchmarks/results/million_tokens_{brown,synthetic}_NAME.json`` and a markdown table
on stdout (also in the JSON as ``table_markdown``) to paste into benchmarks/README.md. Run it
alone on the machine: other processes skew every time it reports (the load they put on it is
recorded per run).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    DATA,
    RESULTS,
    LoadSampler,
    Progress,
    fmt_s,
    fmt_x,
    fstar_of,
    machine_info,
    machine_line,
    markdown_table,
    parse_cpu_line,
    parse_metrics,
    read_feature_items,
    read_snapshot_csv,
    read_summary,
    rmtree,
    run_cli,
    thin_snapshots,
    time_to_gap,
    time_to_metric,
    write_feature_items,
    write_json,
)
from setup_speed import parse_log  # noqa: E402
from templates import run_measured  # noqa: E402

BROWN = DATA / "brown"
NAMES = {"dcd": "1-DCD", "demi-dcd": "DEMI-DCD", "ms-dcd": "MS-DCD"}
PEER_ITERATIONS = {"lbfgs": 100, "ap": 10}  # the anchors' settings (brown_peers.env)
# the anchors' peer per tag set: L-BFGS with 453 labels would take hours (ap alone ~36 min)
DEFAULT_PEERS = {"universal": "lbfgs,ap", "brown": "ap"}
SYNTHETIC_MODEL = {"n_tags": 45, "vocab_size": 200_000, "mean_length": 18, "max_length": 80,
                   "seed": 7}
_DATA_LINE = re.compile(r"data: .*?: ([\d,]+) sentences, ([\d,]+) tokens")
_PEAK = re.compile(r"peak memory: ([\d,]+) MiB")
_ITER = re.compile(r"^iter +\d")


# --------------------------------------------------------------------------- log figures

def _common_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options both sub-commands take: warm-up, work folder, results file and quiet."""
    ap.add_argument("--no-warm", action="store_true",
                    help="skip the untimed 2-second run that fills the kernel cache first")
    ap.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name", default=None)
    ap.add_argument("--quiet", action="store_true")
    return ap

def log_figures(text: str) -> dict[str, Any]:
    """From a ``demidcd train`` log: sentences and tokens read, peak memory (MiB, the last
    ``peak memory:`` line), average CPU, the set-up phases it prints, and how many iteration
    lines after the first print ``active 0`` or ``max_pg 0.0000`` in an unconverged run (the
    issue's zero rows)."""
    d = _DATA_LINE.search(text)
    peaks = _PEAK.findall(text)
    rows = [ln for ln in text.splitlines() if _ITER.match(ln)]
    converged = re.search(r"^stopped: converged", text, re.M) is not None
    zero = [ln for ln in rows[1:] if re.search(r"active +0\b", ln)
            or re.search(r"max_pg 0\.0+\b", ln)]
    phases = parse_log(text)
    return {"sentences": int(d.group(1).replace(",", "")) if d else None,
            "tokens": int(d.group(2).replace(",", "")) if d else None,
            "peak_memory_mib": float(peaks[-1].replace(",", "")) if peaks else None,
            "cpu": parse_cpu_line(text), "read_s": phases["read_s"],
            "features_s": phases["features_s"], "encoding_s": phases["encoding_s"],
            "iteration_lines": len(rows), "zero_rows": 0 if converged else len(zero)}


def train_run(cmd: list[str], d: Path, timeout: float) -> dict[str, Any]:
    """``demidcd train CMD --summary-json d/summary.json``: the log's figures, the summary's
    stop reason, iterations, solver seconds, inferences and last record, set-up seconds."""
    summary = d / "summary.json"
    text, wall = run_cli(["train", *cmd, "--summary-json", str(summary)], d / "train.log",
                         timeout=timeout)
    s = read_summary(summary) or {}
    secs = float(s.get("seconds") or 0.0)
    last, extra = s.get("last_record") or {}, s.get("extra") or {}
    out = log_figures(text)
    out.update({"wall_seconds": round(wall, 2), "solver_seconds": round(secs, 2),
                "setup_seconds": round(wall - secs, 2), "stop_reason": s.get("stop_reason"),
                "iterations": s.get("epochs"), "inferences": extra.get("inferences"),
                "peak_pss_bytes": extra.get("peak_pss"),
                "last_active": last.get("active"), "last_max_pg": last.get("max_pg"),
                "weights": s.get("dim")})
    return out


def warm_kernels(train: str, opts: list[str], threads: int, work: Path) -> None:
    """A 2-second ``demidcd train`` whose figures are thrown away, so that no measured run pays
    for compiling the kernels (numba caches them once per install), as the acceptance check
    does before its runs."""
    d = work / "warm"
    d.mkdir(parents=True, exist_ok=True)
    run_cli(["train", "--train", train, *opts, "--threads", str(threads), "--time-limit", "2",
             "--quiet"], d / "warm.log", timeout=1800)


# --------------------------------------------------------------------------- Brown
def brown_method(alg: str, threads: int, tag: dict, args, work: Path, load: LoadSampler,
                 prog: Progress) -> dict[str, Any]:
    """One demidcd learner on one tag set: train with snapshots, evaluate the snapshots and
    the final model."""
    d = work / f"{tag['name']}-{alg}"
    rmtree(d)
    d.mkdir(parents=True)
    snap = d / "snapshots"
    opts = ["--format", "columns", "--column", str(tag["column"])]
    cmd = ["--algorithm", alg, "--threads", str(threads), "--train", args.train, *opts,
           "--time-limit", str(args.budget), "--snapshot-every", str(args.snapshot_every),
           "--snapshot-dir", str(snap), "--model", str(d / "model.npz"), "--seed", "0"]
    prog.note(f"{tag['name']} {NAMES[alg]}: training {args.budget:g}s on {threads} process(es)")
    with load.span(f"{tag['name']} {alg}"):
        run = train_run(cmd, d, timeout=args.budget * 3 + 900)
    kept, total = thin_snapshots(snap, args.min_step, args.rel_step)
    prog.note(f"{tag['name']} {NAMES[alg]}: evaluating {kept} of {total} snapshots")
    _, ev_wall = run_cli(["evaluate-snapshots", str(snap), "--train", args.train, "--test",
                          args.test, *opts, "--out", str(d / "snapshots.csv"), "--quiet"],
                         d / "evaluate.log", timeout=7200)
    curve = read_snapshot_csv(d / "snapshots.csv")
    final, _ = run_cli(["evaluate", "--model", str(d / "model.npz"), "--data", args.test, *opts],
                       d / "final.log", timeout=3600)
    if not args.keep_snapshots:
        rmtree(snap)
    acc = parse_metrics(final).get("accuracy")
    run.update({"algorithm": alg, "name": NAMES[alg], "threads": threads,
                "command": "demidcd train " + " ".join(cmd).replace(str(work), "WORK"),
                "test_accuracy": acc, "snapshots": {"taken": total, "evaluated": kept,
                                                    "evaluate_wall_seconds": round(ev_wall, 1)},
                "curve": [{"seconds": r["seconds"], "primal": r["primal"],
                           "test_accuracy": r["metric"]} for r in curve]})
    prog.step(f"{tag['name']} {NAMES[alg]}: {run['stop_reason']}, test "
              f"{100 * (acc or 0):.2f}%, peak {run['peak_memory_mib']} MiB")
    return run


def peak_rss_of_self() -> float | None:
    """This process's peak RSS in MiB (``VmHWM`` of /proc/self/status: since its exec, unlike
    ``ru_maxrss``, which keeps the parent's high-water mark across fork and exec); None where
    there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def crfsuite_child(argv: list[str]) -> int:
    """In its own process (so that its peak memory is CRFsuite's): train on a
    ``write_feature_items`` file streamed sentence by sentence, tag the test file, print the
    figures as JSON."""
    ap = argparse.ArgumentParser(prog="million_tokens.py crfsuite-child")
    ap.add_argument("train_items")
    ap.add_argument("test_items")
    ap.add_argument("model")
    ap.add_argument("--algorithm", choices=("lbfgs", "ap"), required=True)
    ap.add_argument("--iterations", type=int, required=True)
    a = ap.parse_args(argv)
    import pycrfsuite

    t0 = time.perf_counter()
    trainer = pycrfsuite.Trainer(algorithm=a.algorithm, verbose=False)
    for xs, ys in read_feature_items(a.train_items):
        trainer.append(xs, ys)
    params: dict[str, Any] = {"max_iterations": a.iterations}
    if a.algorithm == "lbfgs":
        params.update({"c1": 0.1, "c2": 0.1})
    trainer.set_params(params)
    load_s = time.perf_counter() - t0
    hwm_before = peak_rss_of_self()
    c0, t0 = time.process_time(), time.perf_counter()
    trainer.train(a.model)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tagger = pycrfsuite.Tagger()
    tagger.open(a.model)
    right = total = 0
    for xs, ys in read_feature_items(a.test_items):
        pred = tagger.tag(xs)
        right += sum(p == g for p, g in zip(pred, ys, strict=True))
        total += len(ys)
    print(json.dumps({
        "algorithm": a.algorithm, "max_iterations": a.iterations,
        "iterations_run": len(trainer.logparser.iterations), "train_wall_seconds": wall,
        "train_cpu_seconds": cpu, "load_items_seconds": load_s,
        "test_accuracy": right / max(total, 1), "test_tokens": total,
        "peak_rss_before_training_mib": hwm_before, "peak_rss_mib": peak_rss_of_self(),
        "pycrfsuite": getattr(pycrfsuite, "__version__", None),
        **({"c1": 0.1, "c2": 0.1} if a.algorithm == "lbfgs" else {})}))
    return 0


def crfsuite_peer_run(alg: str, iterations: int, items: dict, d: Path, args) -> dict | None:
    """python-crfsuite ``alg`` in a child process on the dumped features; None when
    python-crfsuite is not installed."""
    try:
        import pycrfsuite  # noqa: F401
    except ImportError:
        return None
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "crfsuite-child", items["train_items"],
           items["test_items"], str(d / f"crfsuite_{alg}.model"), "--algorithm", alg,
           "--iterations", str(iterations)]
    with open(d / f"crfsuite_{alg}.json", "w") as out:
        rc, wall, peak = run_measured(cmd, stdout=out, timeout=4 * 3600)
    if rc != 0:
        raise RuntimeError(f"python-crfsuite {alg} exited {rc} ({d / f'crfsuite_{alg}.json'})")
    res = json.loads((d / f"crfsuite_{alg}.json").read_text())
    if res.get("peak_rss_mib") is None:  # no /proc: the parent's polling
        res["peak_rss_mib"] = peak
    res.update({"peer": f"python-crfsuite {alg}", "peak_rss_polled_mib": round(peak, 1),
                "wall_seconds_incl_loading": round(wall, 2),
                "features": "demidcd's SequenceFeaturizer strings (common.write_feature_items)"})
    return res


def wapiti_peer_run(train: str, test: str, column: int, d: Path, iterations: int
                    ) -> dict[str, Any]:
    """Wapiti L-BFGS (c1 = c2 = 0.1 as -1/-2, one thread) with demidcd's shipped ``pos``
    template on (word, label) files, when a ``wapiti`` binary is on PATH."""
    exe = shutil.which("wapiti")
    if exe is None:
        return {"peer": "wapiti", "skipped": "not installed: no wapiti binary on PATH"}
    from importlib import resources

    d.mkdir(parents=True, exist_ok=True)
    tpl = d / "pos.template"
    tpl.write_text(resources.files("demidcd").joinpath("templates", "pos.template")
                   .read_text(encoding="utf-8"))
    files = {}
    for part, src in (("train", train), ("test", test)):
        files[part] = d / f"{part}.wapiti"
        with open(src, encoding="utf-8") as f, open(files[part], "w", encoding="utf-8") as g:
            for line in f:
                cols = line.split()
                g.write(f"{cols[0]}\t{cols[column - 1]}\n" if cols else "\n")
    model, out = d / "wapiti.model", d / "test.out"
    rc, wall, peak = run_measured([exe, "train", "-a", "l-bfgs", "-1", "0.1", "-2", "0.1", "-i",
                                   str(iterations), "-t", "1", "-p", str(tpl),
                                   str(files["train"]), str(model)], timeout=4 * 3600)
    res: dict[str, Any] = {"peer": "wapiti l-bfgs", "binary": exe, "exit_status": rc,
                           "train_wall_seconds": round(wall, 2), "peak_rss_mib": round(peak, 1),
                           "max_iterations": iterations, "template": "demidcd pos.template"}
    if rc == 0:
        rc2, _, _ = run_measured([exe, "label", "-m", str(model), str(files["test"]),
                                  str(out)], timeout=3600)
        right = total = 0
        if rc2 == 0:
            for line in out.read_text(encoding="utf-8").splitlines():
                cols = line.split()
                if len(cols) >= 3:  # word, gold, predicted
                    right += cols[-1] == cols[-2]
                    total += 1
        res["test_accuracy"] = right / total if total else None
    return res


def peers_for(tag: dict, args, work: Path, saved: dict, prog: Progress) -> dict[str, Any]:
    """The peers of one tag set: reused from ``--peers-from`` where there, else run."""
    spec = args.peers or DEFAULT_PEERS.get(tag["name"], "lbfgs,ap")
    wanted = [p for p in spec.split(",") if p and p != "none"]
    out: dict[str, Any] = {}
    todo = []
    for p in wanted:
        if p in saved.get(tag["name"], {}):
            out[p] = {**saved[tag["name"]][p], "reused_from": args.peers_from}
        elif p in PEER_ITERATIONS or p == "wapiti":
            todo.append(p)
        else:
            raise SystemExit(f"million_tokens: unknown peer {p!r} (lbfgs, ap, wapiti)")
    if any(p in PEER_ITERATIONS for p in todo):
        prog.note(f"{tag['name']}: dumping demidcd's features for python-crfsuite")
        items = write_feature_items(args.train, args.test, work / f"{tag['name']}-items",
                                    fmt="columns", column=tag["column"])
        for p in todo:
            if p not in PEER_ITERATIONS:
                continue
            n = args.lbfgs_iterations if p == "lbfgs" else args.ap_iterations
            prog.note(f"{tag['name']}: python-crfsuite {p}, {n} iterations")
            r = crfsuite_peer_run(p, n, items, work / f"{tag['name']}-peers", args)
            out[p] = r if r is not None else {"skipped": "python-crfsuite not installed"}
            if r is not None:
                out[p]["feature_dump_seconds"] = items["seconds"]
                out[p]["observation_features"] = items["observation_features"]
            prog.step(f"{tag['name']}: python-crfsuite {p}: "
                      f"{100 * out[p].get('test_accuracy', 0):.2f}%")
        rmtree(work / f"{tag['name']}-items")
    if wanted and "wapiti" not in out:  # a record either way: run, or not installed
        out["wapiti"] = wapiti_peer_run(args.train, args.test, tag["column"],
                                        work / f"{tag['name']}-wapiti", args.lbfgs_iterations)
    return out


def brown_analysis(runs: dict[str, dict], peers: dict[str, Any]) -> dict[str, Any]:
    """f*, each method's time to 1% and the DEMI-DCD ratios; each method's time to each peer's
    test accuracy and its fraction of the peer's training time."""
    pts = {a: [(r["seconds"], r["primal"]) for r in run["curve"] if r["primal"] is not None]
           for a, run in runs.items()}
    out: dict[str, Any] = {}
    if not any(pts.values()):
        return out
    fstar = fstar_of(pts)
    out["fstar"] = fstar
    out["fstar_from"] = min((a for a in pts if pts[a]), key=lambda a: min(p for _, p in pts[a]))
    for a, run in runs.items():
        run["time_to_1pct"] = time_to_gap(pts[a], fstar, 0.01)
        run["final_relative_gap"] = ((pts[a][-1][1] - fstar) / fstar) if pts[a] else None
        for p, peer in peers.items():
            acc, secs = peer.get("test_accuracy"), peer.get("train_wall_seconds")
            if acc is None or not secs:
                continue
            t = time_to_metric([(r["seconds"], r["test_accuracy"]) for r in run["curve"]],
                               acc)
            run.setdefault("time_to_peer_accuracy", {})[p] = {
                "seconds": t, "fraction_of_peer_training": t / secs if math.isfinite(t)
                else math.inf}
    if "demi-dcd" in runs:
        t = runs["demi-dcd"]["time_to_1pct"]
        for other in ("dcd", "ms-dcd"):
            if other in runs:
                o = runs[other]["time_to_1pct"]
                out[f"{other}_over_demi_time_to_1pct"] = (o / t if math.isfinite(t) and t > 0
                                                          else math.nan)
    return out


def brown_table(res: dict) -> str:
    rows = []
    for tname, t in res["tagsets"].items():
        for a, r in t["runs"].items():
            cpu = r["cpu"]
            peer = "; ".join(f"{p} {fmt_x(v['fraction_of_peer_training'])}"
                             for p, v in (r.get("time_to_peer_accuracy") or {}).items())
            rows.append([tname, f"{NAMES[a]} (p={r['threads']})", fmt_s(r.get("time_to_1pct")),
                         f"{100 * r['test_accuracy']:.2f}" if r["test_accuracy"] else "n/a",
                         f"{r['peak_memory_mib']:,.0f}" if r["peak_memory_mib"] else "n/a",
                         f"{cpu['average']:.0f}% of {cpu['of']:.0f}%" if cpu else "n/a",
                         fmt_s(r["setup_seconds"]), r["stop_reason"], peer or "—"])
        for p, v in t["peers"].items():
            if "skipped" in v:
                rows.append([tname, p, "—", v["skipped"], "", "", "", "", ""])
                continue
            acc = v.get("test_accuracy")
            rows.append([tname, v.get("peer", p) + (" (reused)" if "reused_from" in v else ""),
                         "—", f"{100 * acc:.2f}" if acc is not None else "n/a",
                         f"{v['peak_rss_mib']:,.0f} (RSS)", "1 thread",
                         f"trains {v.get('train_wall_seconds', 0):.1f}s", "", ""])
    return markdown_table(["tags", "method", "time to 1%", "test acc %", "peak MiB", "CPU",
                           "set-up", "stopped", "time to peer's acc / peer's time"], rows)


def cmd_brown(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="million_tokens.py brown",
                                 description="Brown, both tag sets, demidcd against peers")
    ap.add_argument("--train", default=None, help="default: brown-train.txt (--quick: dev)")
    ap.add_argument("--test", default=None, help="default: brown-test.txt")
    ap.add_argument("--tagsets", default="universal:3,brown:2", help="NAME:COLUMN,...")
    ap.add_argument("--methods", default="demi-dcd:2,dcd:1,ms-dcd:2", help="ALG:THREADS,...")
    ap.add_argument("--budget", type=float, default=None, help="seconds per run (300; quick 5)")
    ap.add_argument("--snapshot-every", type=float, default=None, help="seconds (10; quick 1)")
    ap.add_argument("--min-step", type=float, default=None,
                    help="evaluate snapshots at least this many seconds apart (10; quick 1)")
    ap.add_argument("--rel-step", type=float, default=0.15,
                    help="... and this share of their time apart (log-spaced)")
    ap.add_argument("--keep-snapshots", action="store_true")
    ap.add_argument("--peers", default=None,
                    help="lbfgs,ap[,wapiti] or none (default: universal lbfgs,ap; brown ap, "
                         "as the anchors; other tag sets lbfgs,ap)")
    ap.add_argument("--peers-from", default=None, help="reuse the peers of this results file")
    ap.add_argument("--lbfgs-iterations", type=int, default=None, help="100 (quick 2)")
    ap.add_argument("--ap-iterations", type=int, default=None, help="10 (quick 1)")
    ap.add_argument("--quick", action="store_true", help="brown-dev.txt, a few seconds each")
    a = _common_arguments(ap).parse_args(argv)
    q = a.quick
    a.train = str(Path(a.train or BROWN / ("brown-dev.txt" if q else "brown-train.txt"))
                  .resolve())
    a.test = str(Path(a.test or BROWN / "brown-test.txt").resolve())
    for k, full, quick in (("budget", 300.0, 5.0), ("snapshot_every", 10.0, 1.0),
                           ("min_step", 10.0, 1.0), ("lbfgs_iterations", 100, 2),
                           ("ap_iterations", 10, 1)):
        if getattr(a, k) is None:
            setattr(a, k, quick if q else full)
    for p in (a.train, a.test):
        if not Path(p).is_file():
            print(f"million_tokens: no such file: {p} (../shared/data/brown)", file=sys.stderr)
            return 2
    tagsets = [{"name": n, "column": int(c)} for n, c in
               (x.split(":") for x in a.tagsets.split(","))]
    methods = [(m, int(p)) for m, p in (x.split(":") for x in a.methods.split(","))]
    saved: dict = {}
    if a.peers_from:
        old = json.loads(Path(a.peers_from).read_text())
        saved = {n: t.get("peers", {}) for n, t in old.get("tagsets", {}).items()}
    name = a.name or ("quick" if q else "default")
    info = machine_info()
    load = LoadSampler().start()
    prog = Progress(len(tagsets) * (len(methods) + 2), "million tokens: brown", a.quiet)
    res: dict[str, Any] = {
        "machine": info, "train": a.train, "test": a.test, "budget_seconds": a.budget,
        "snapshot_every": a.snapshot_every, "quick": q, "tagsets": {},
        "definitions": {
            "time_to_1pct": "seconds since the solver started until (P - f*)/f* <= 0.01, "
                            "interpolated in log gap between snapshots; f* the lowest primal "
                            "of the methods of that tag set",
            "peak_memory_mib": "the train log's 'peak memory' (PSS of all processes)",
            "setup_seconds": "CLI wall time minus the summary's solver seconds",
            "peers": "python-crfsuite in its own process on demidcd's observation features; "
                     "peak_rss_mib its VmHWM (peak_rss_polled_mib: polled every 0.1 s)"}}
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="million-tokens-"))
    try:
        for tag in tagsets:
            if not a.no_warm:  # on the test file: the tag set's kernels, in seconds
                prog.note(f"{tag['name']}: warming the kernel cache")
                warm_kernels(a.test, ["--format", "columns", "--column", str(tag["column"])],
                             max(t for _, t in methods), work)
            runs = {alg: brown_method(alg, th, tag, a, work, load, prog) for alg, th in methods}
            with load.span(f"{tag['name']} peers"):
                peers = peers_for(tag, a, work, saved, prog)
            analysis = brown_analysis(runs, peers)
            res["tagsets"][tag["name"]] = {"column": tag["column"], "runs": runs,
                                           "peers": peers, "analysis": analysis}
            out = Path(a.out_dir) / f"million_tokens_brown_{name}.json"
            write_json(out, res)  # after each tag set: a long run keeps what it measured
    finally:
        prog.close()
        if not a.work:
            rmtree(work)
    load.stop()
    res["load"] = load.summary()
    res["table_markdown"] = brown_table(res)
    out = write_json(Path(a.out_dir) / f"million_tokens_brown_{name}.json", res)
    if not a.quiet:
        print(machine_line(info))
        print(res["table_markdown"])
        for tname, t in res["tagsets"].items():
            an = t["analysis"]
            print(f"{tname}: f* {an.get('fstar')} ({an.get('fstar_from')}); 1-DCD / DEMI-DCD "
                  f"time to 1%: {fmt_x(an.get('dcd_over_demi_time_to_1pct'))}; MS-DCD / "
                  f"DEMI-DCD: {fmt_x(an.get('ms-dcd_over_demi_time_to_1pct'))}")
        print(f"load from other processes: {load.summary_line()}")
        print(f"results: {out}")
    return 0


# --------------------------------------------------------------------------- synthetic
def write_synthetic(model: Any, n: int, path: Path) -> dict[str, int]:
    """``sample(model, n, seed=n)`` as a ``word<TAB>tag`` columns file; its sentences and
    tokens."""
    from demidcd.synthetic import sample

    c = sample(model, n, seed=n)
    tokens = 0
    with open(path, "w", encoding="utf-8") as f:
        for toks, tags in zip(c.tokens, c.tags, strict=True):
            tokens += len(toks)
            f.write("".join(f"{w}\t{t}\n" for w, t in zip(toks, tags, strict=True)) + "\n")
    return {"sentences": n, "tokens": tokens}


def synthetic_table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        cpu = r["cpu"]
        out.append([f"{r['sentences']:,}", f"{r['tokens']:,}",
                    f"{r['peak_memory_mib']:,.0f}" if r["peak_memory_mib"] else "n/a",
                    f"{r['bytes_per_token']:,.0f}" if r.get("bytes_per_token") else "n/a",
                    f"{r['growth_bytes_per_token']:,.0f}" if r.get("growth_bytes_per_token")
                    is not None else "—",
                    f"{r['seconds_per_iteration']:.2f}" if r.get("seconds_per_iteration")
                    else "n/a",
                    f"{r['seconds_per_pass']:.2f}" if r.get("seconds_per_pass") else "n/a",
                    f"{r['setup_seconds']:.1f}",
                    f"{cpu['average']:.0f}% of {cpu['of']:.0f}%" if cpu else "n/a",
                    r["stop_reason"]])
    return markdown_table(["sentences", "tokens", "peak MiB (PSS)", "bytes/token",
                           "growth bytes/added token", "s/iteration", "s/data pass",
                           "set-up s", "CPU", "stopped"], out)


def cmd_synthetic(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="million_tokens.py synthetic",
                                 description="the synthetic series: memory and time per size")
    ap.add_argument("--sizes", default=None, help="sentences, comma-separated "
                                                  "(12500,55000,220000; quick 500,1000)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds (120; quick 3)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab-size", type=int, default=SYNTHETIC_MODEL["vocab_size"],
                    help="the generator's vocabulary (the issue's: 200,000)")
    ap.add_argument("--quick", action="store_true")
    a = _common_arguments(ap).parse_args(argv)
    sizes = [int(x) for x in (a.sizes or ("500,1000" if a.quick else "12500,55000,220000"))
             .split(",")]
    limit = a.time_limit if a.time_limit is not None else (3.0 if a.quick else 120.0)
    name = a.name or ("quick" if a.quick else "default")
    from demidcd.synthetic import generator_model

    spec = {**SYNTHETIC_MODEL, "vocab_size": a.vocab_size}
    model = generator_model(**spec)
    info = machine_info()
    load = LoadSampler().start()
    prog = Progress(len(sizes), "million tokens: synthetic", a.quiet)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="million-tokens-syn-"))
    rows: list[dict] = []
    try:
        if not a.no_warm:
            prog.note("warming the kernel cache")
            (work / "warm").mkdir(parents=True, exist_ok=True)
            write_synthetic(model, min(200, min(sizes)), work / "warm" / "train.txt")
            warm_kernels(str(work / "warm" / "train.txt"), ["--format", "columns"], a.threads,
                         work)
        for n in sizes:
            d = work / f"n{n}"
            rmtree(d)
            d.mkdir(parents=True)
            prog.note(f"sampling {n:,} sentences")
            t0 = time.perf_counter()
            data = write_synthetic(model, n, d / "train.txt")
            gen = time.perf_counter() - t0
            cmd = ["--train", str(d / "train.txt"), "--format", "columns", "--threads",
                   str(a.threads), "--time-limit", str(limit), "--seed", "0"]
            prog.note(f"{data['tokens']:,} tokens: demidcd train {limit:g}s")
            with load.span(f"n={n}"):
                r = train_run(cmd, d, timeout=limit * 3 + 1800)
            r.update(data)
            r["generate_seconds"] = round(gen, 1)
            r["command"] = "demidcd train " + " ".join(cmd).replace(str(work), "WORK")
            peak = r["peak_pss_bytes"] or ((r["peak_memory_mib"] or 0) * 2**20) or None
            r["bytes_per_token"] = peak / data["tokens"] if peak else None
            secs, it = r["solver_seconds"], r["iterations"]
            r["seconds_per_iteration"] = secs / it if it else None
            passes = (r["inferences"] or 0) / n
            r["data_passes"] = round(passes, 2)
            r["seconds_per_pass"] = secs / passes if passes else None
            if rows and peak and rows[-1].get("peak_bytes"):
                dt = data["tokens"] - rows[-1]["tokens"]
                r["growth_bytes_per_token"] = (peak - rows[-1]["peak_bytes"]) / dt if dt else None
            r["peak_bytes"] = peak
            rows.append(r)
            rmtree(d / "train.txt")
            prog.step(f"{data['tokens']:,} tokens: peak {r['peak_memory_mib']} MiB, "
                      f"{r['stop_reason']}")
    finally:
        prog.close()
        if not a.work:
            rmtree(work)
    load.stop()
    res = {"machine": info, "generator": spec, "sample": "sample(model, n, seed=n)",
           "time_limit": limit, "threads": a.threads, "quick": a.quick, "runs": rows,
           "load": load.summary(),
           "definitions": {
               "bytes_per_token": "peak PSS of all processes / training tokens",
               "growth_bytes_per_token": "(peak - previous size's peak) / added tokens",
               "seconds_per_iteration": "summary seconds / summary epochs (the learner's "
                                        "outer iterations)",
               "seconds_per_pass": "summary seconds / (inferences / sentences)",
               "setup_seconds": "CLI wall time minus the summary's solver seconds"}}
    res["table_markdown"] = synthetic_table(rows)
    out = write_json(Path(a.out_dir) / f"million_tokens_synthetic_{name}.json", res)
    if not a.quiet:
        print(machine_line(info))
        print(res["table_markdown"])
        print(f"load from other processes: {load.summary_line()}")
        print(f"results: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmds = {"brown": cmd_brown, "synthetic": cmd_synthetic, "crfsuite-child": crfsuite_child}
    if not argv or argv[0] not in cmds:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        print("million_tokens: give a sub-command: brown or synthetic", file=sys.stderr)
        return 2
    return cmds[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
