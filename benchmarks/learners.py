"""Test metric against training time for every registered learner on one corpus.

Each learner trains through the CLI with the same budget, threads and weight snapshots
(``--snapshot-every``), its run summary read from ``--summary-json``; then
``demidcd evaluate-snapshots`` scores every (thinned, log-spaced) snapshot on the test file.
Results: ``benchmarks/results/NAME.json`` (machine, commands, summaries, curves) and
``NAME.png`` (test metric against seconds, one line per learner), plus a markdown table on
stdout (final metric, time to reach ``--target``).

    python benchmarks/learners.py --budget 120 --threads 2 --name learners_ewt
    python benchmarks/learners.py --train train.txt --test test.txt --format columns \\
        --name learners_conll2000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    EWT,
    RESULTS,
    fmt_s,
    machine_info,
    machine_line,
    markdown_table,
    pyplot,
    read_snapshot_csv,
    read_summary,
    rmtree,
    run_cli,
    save_figure,
    say,
    thin_snapshots,
    time_to_metric,
    write_json,
)

ALL = ("dcd", "demi-dcd", "perceptron", "mira", "pegasos", "adagrad", "sdm-hinge",
       "sdm-ramp", "sp-ipm", "ms-dcd")
SEQUENTIAL = ("dcd", "dcd-light", "perceptron", "mira", "sdm-hinge", "sdm-ramp")


def run(alg: str, args, work: Path) -> dict:
    d = work / alg
    rmtree(d)
    d.mkdir(parents=True)
    threads = 1 if alg in SEQUENTIAL else args.threads
    opts = ["--format", args.format] + (["--column", args.column] if args.column else [])
    cmd = ["train", "--algorithm", alg, "--threads", str(threads), "--train", args.train, *opts,
           "--time-limit", str(args.budget), "--snapshot-every", str(args.snapshot_every),
           "--snapshot-dir", str(d / "snap"), "--model", str(d / "model.npz"),
           "--summary-json", str(d / "summary.json"), "--seed", str(args.seed)]
    say(f"{alg}: training {args.budget:g}s on {threads} process(es)", args.quiet)
    _, wall = run_cli(cmd, d / "train.log", timeout=args.budget * 3 + 600)
    kept, total = thin_snapshots(d / "snap", 1.0, 0.15)
    say(f"{alg}: evaluating {kept} of {total} snapshots", args.quiet)
    run_cli(["evaluate-snapshots", str(d / "snap"), "--train", args.train, "--test", args.test,
             *opts, "--out", str(d / "snapshots.csv"), "--quiet"], d / "evaluate.log")
    rows = read_snapshot_csv(d / "snapshots.csv")
    curve = [(r["seconds"], r["metric"]) for r in rows]
    return {"algorithm": alg, "threads": threads, "wall_seconds_incl_loading": wall,
            "command": "demidcd " + " ".join(cmd).replace(str(work), "WORK"),
            "summary": read_summary(d / "summary.json"), "curve": curve,
            "final_metric": curve[-1][1] if curve else None,
            "time_to_target": time_to_metric(curve, args.target) if curve else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default=str(EWT / "en_ewt-ud-train.conllu"))
    ap.add_argument("--test", default=str(EWT / "en_ewt-ud-test.conllu"))
    ap.add_argument("--format", default="conllu")
    ap.add_argument("--column", default="xpos")
    ap.add_argument("--algorithms", default=",".join(ALL))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--snapshot-every", type=float, default=2.0)
    ap.add_argument("--target", type=float, default=0.9418,
                    help="metric whose first crossing is reported (CRFsuite's averaged "
                         "perceptron on EWT XPOS)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="learners_ewt")
    ap.add_argument("--work", default="/tmp/demidcd-learners")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.work)
    info = machine_info()
    say(machine_line(info), args.quiet)
    runs = [run(a, args, work) for a in args.algorithms.split(",")]
    out = {"machine": info, "args": vars(args), "runs": runs}
    path = write_json(RESULTS / f"{args.name}.json", out)
    print(markdown_table(["learner", "threads", "final test metric", f"time to {args.target}"],
                         [(r["algorithm"], r["threads"],
                           "—" if r["final_metric"] is None else f"{100 * r['final_metric']:.2f}%",
                           fmt_s(r["time_to_target"])) for r in runs]))
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 5))
        for r in runs:
            if r["curve"]:
                t, m = zip(*r["curve"], strict=True)
                ax.plot(t, [100 * x for x in m], label=r["algorithm"])
        ax.axhline(100 * args.target, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("training seconds")
        ax.set_ylabel("test metric (%)")
        ax.set_title(f"{Path(args.train).name}, p = {args.threads}")
        ax.legend(fontsize=8)
        save_figure(fig, RESULTS / f"{args.name}.png")
    say(f"results: {path}", args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
