"""Several learners on one shared w (``--learners``) against 1-DCD and single-learner DEMI-DCD.

    python benchmarks/multi_learner.py                      # EWT XPOS and CoNLL04, p = 2, 90 s
    python benchmarks/multi_learner.py --task sequence --budget 30

For each data set, one after the other on the same machine, through the CLI with snapshots every
``--snapshot-every`` seconds (evaluated afterwards, so evaluation never steals CPU): 1-DCD,
DEMI-DCD with one learner (``--learners 1``), and K = p learners with atomic adds and with plain
stores. Reports the time to 1% (and 2%) relative primal difference (f* the lowest primal of any
run), the speed-ups over 1-DCD, the final test metric, and the lost updates of the plain run
(w entries whose rebuilt value differed: the drift measured at every rebuild).

The projection to p = 4..32 is a model, not a measurement: with c the measured per-process
slow-down at p = 2 (1-DCD's inferences per second over one learner's at K = 2 with plain stores,
the default, minus 1: the cost of sharing w's hot lines and the coordinator), p learners are
modelled as
S(p) = S(2) · [p / (1 + (p − 1) c)] / [2 / (1 + c)] (contention growing with the number of other
writers), and lost updates of plain stores as growing ∝ p − 1; single-learner DEMI-DCD as
flat at its measured speed-up (learner-bound, as ``benchmarks/scaling.py`` projects).
Writes ``benchmarks/results/multi_learner_<task>.json``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    CONLL04,
    EWT,
    RESULTS,
    fstar_of,
    machine_info,
    machine_line,
    parse_metrics,
    read_jsonl,
    read_snapshot_csv,
    rmtree,
    run_cli,
    say,
    time_to_gap,
    write_json,
)

METHODS = {  # name: (algorithm, learners); several learners use plain stores (atomic adds
    # and the hybrid were measured slower and are no longer options: CHANGELOG.md)
    "1-DCD": ("dcd", None),
    "DEMI-DCD (1 learner)": ("demi-dcd", "1"),
    "K=p learners, plain": ("demi-dcd", "p"),
}
_MULTI = re.compile(r"multi-learner: (\d+) learners \((\w+)\), ([\d,]+) updates, ([\d,]+) "
                    r"inferences, (\d+) rebuilds \([0-9.]+ s; largest drift ‖w − Σαφ‖ "
                    r"([0-9.e+-]+), "
                    r"([\d,]+) entries with")


def _data(task: str, work: Path) -> dict:
    if task == "entity-relation":
        run_cli(["split", str(CONLL04), "--out-dir", str(work / "split"), "--seed", "0"],
                work / "split.log")
        return {"train": str(work / "split" / "train.corp"),
                "test": str(work / "split" / "test.corp"),
                "opts": ["--task", "entity-relation"], "eval": ["--ilp-solver", "exact"]}
    return {"train": str(EWT / "en_ewt-ud-train.conllu"),
            "test": str(EWT / "en_ewt-ud-test.conllu"),
            "opts": ["--format", "conllu", "--column", "xpos"], "eval": []}


def run(name: str, args, data: dict, work: Path) -> dict:
    alg, learners = METHODS[name]
    threads = 1 if alg == "dcd" else args.threads
    d = work / re.sub(r"\W+", "_", name)
    rmtree(d)
    d.mkdir(parents=True)
    cmd = ["train", "--algorithm", alg, "--threads", str(threads), "--train", data["train"],
           *data["opts"], "--time-limit", str(args.budget), "--snapshot-every",
           str(args.snapshot_every), "--snapshot-dir", str(d / "snap"), "--model",
           str(d / "m.npz"), "--log-json", str(d / "log.jsonl"), "--max-epochs", str(10**9)]
    if learners is not None:
        cmd += ["--learners", str(threads) if learners == "p" else learners]
    say(f"{name}: training {args.budget:g} s", args.quiet)
    text, _ = run_cli(cmd, d / "train.log", timeout=args.budget * 3 + 600)
    run_cli(["evaluate-snapshots", str(d / "snap"), "--train", data["train"], "--test",
             data["test"], *data["opts"], *data["eval"], "--out", str(d / "snap.csv"),
             "--quiet"], d / "evaluate.log")
    rows = read_snapshot_csv(d / "snap.csv")
    final, _ = run_cli(["evaluate", "--model", str(d / "m.npz"), "--data", data["test"],
                        *data["opts"], *data["eval"]], d / "final.log")
    recs = read_jsonl(d / "log.jsonl")
    last = recs[-1] if recs else {}
    out = {"command": "demidcd " + " ".join(cmd).replace(str(work), "WORK"),
           "threads": threads, "curve": [(r["seconds"], r["primal"]) for r in rows],
           "final": parse_metrics(final), "inferences": last.get("inferences"),
           "seconds": last.get("seconds")}
    m = _MULTI.search(text)
    if m:
        out["multi"] = {"learners": int(m[1]), "mode": m[2],
                        "updates": int(m[3].replace(",", "")),
                        "inferences": int(m[4].replace(",", "")), "rebuilds": int(m[5]),
                        "largest_drift": float(m[6]),
                        "entries_with_lost_updates": int(m[7].replace(",", ""))}
    auto = re.search(r"learners auto: .*", text)
    out["auto_choice"] = auto[0] if auto else None
    if not args.keep:
        rmtree(d / "snap")
    return out


def projection(res: dict, p: int) -> dict:
    """The model of the module docstring (a projection from measured costs, not a run)."""
    runs = res["runs"]
    one, k2 = runs["1-DCD"], runs["K=p learners, plain"]  # plain: the default
    rate1 = (one["inferences"] or 0) / max(one["seconds"] or 1, 1e-9)
    ratek = (k2["inferences"] or 0) / max((k2["seconds"] or 1) * k2["threads"], 1e-9)
    c = max(rate1 / ratek - 1.0, 0.0) if ratek > 0 else math.inf
    s2 = res["speedup_1pct"].get("K=p learners, plain")
    demi = res["speedup_1pct"].get("DEMI-DCD (1 learner)")
    multi = k2.get("multi") or {}
    lost = multi.get("entries_with_lost_updates", 0) / max(multi.get("updates", 1), 1)
    out = {"label": "projection from measured costs (not a measurement)",
           "slowdown_per_process_c": c, "lost_update_entries_per_update_at_2": lost, "rows": []}
    for q in (4, 8, 16, 32):
        sk = (s2 * (q / (1 + (q - 1) * c)) / (2 / (1 + c))
              if s2 and math.isfinite(s2) and math.isfinite(c) else None)
        out["rows"].append({"p": q, "K=p learners": sk, "DEMI-DCD (1 learner)": demi,
                            "lost_update_entries_per_update": lost * (q - 1)})
    return out


def bench(task: str, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="multi_learner_"))
    try:
        data = _data(task, work)
        runs = {name: run(name, args, data, work) for name in METHODS}
    finally:
        if not args.keep:
            rmtree(work)
    fstar = fstar_of({k: v["curve"] for k, v in runs.items()})
    res = {"task": task, "machine": machine_info(), "budget": args.budget,
           "threads": args.threads, "fstar": fstar, "runs": runs,
           "time_to_1pct": {k: time_to_gap(v["curve"], fstar, 0.01) for k, v in runs.items()},
           "time_to_2pct": {k: time_to_gap(v["curve"], fstar, 0.02) for k, v in runs.items()}}
    t1 = res["time_to_1pct"]["1-DCD"]
    res["speedup_1pct"] = {k: (t1 / t if t and math.isfinite(t) else None)
                           for k, t in res["time_to_1pct"].items()}
    res["projection"] = projection(res, args.threads)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=("sequence", "entity-relation", "both"), default="both")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=90.0, help="seconds per training run")
    ap.add_argument("--snapshot-every", type=float, default=2.0)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    tasks = ("sequence", "entity-relation") if args.task == "both" else (args.task,)
    for task in tasks:
        if not (EWT if task == "sequence" else CONLL04).exists():
            say(f"skipping {task}: data not found", args.quiet)
            continue
        res = bench(task, args)
        path = write_json(RESULTS / f"multi_learner_{task}.json", res)
        say(machine_line(res["machine"]), args.quiet)
        for k in METHODS:
            r = res["runs"][k]
            say(f"{task} {k}: 1% at {res['time_to_1pct'][k]:.1f}s, 2% at "
                f"{res['time_to_2pct'][k]:.1f}s, speed-up {res['speedup_1pct'][k] or 0:.2f}x, "
                f"final {r['final']}" + (f", {r['multi']}" if r.get("multi") else ""),
                args.quiet)
        for row in res["projection"]["rows"]:
            say(f"projection p={row['p']}: K=p {row['K=p learners'] or 0:.2f}x, one learner "
                f"{row['DEMI-DCD (1 learner)'] or 0:.2f}x (c = "
                f"{res['projection']['slowdown_per_process_c']:.2f})", args.quiet)
        say(f"wrote {path}", args.quiet)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
