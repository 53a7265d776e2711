"""Test metric against training time for every registered learner on one corpus.

Each learner trains through the CLI with the same budget, threads and weight snapshots
(``--snapshot-every``), its run summary read from ``--summary-json``; then
``demidcd evaluate-snapshots`` scores every (thinned, log-spaced) snapshot on the test file.
Results: ``benchmarks/results/NAME.json`` (machine, commands, summaries, curves) and
``NAME.png`` (test metric against seconds, one line per learner), plus a markdown table on
stdout (final metric, time to reach ``--target``).

    python benchmarks/learners.py --corpus ewt --budget 60         # EWT XPOS, accuracy
    python benchmarks/learners.py --corpus conll2000 --budget 40   # CoNLL-2000, chunk F1
    python benchmarks/learners.py --corpus conll2002 --algorithms demi-dcd --budget 240  # NER

CRFsuite's averaged perceptron (``ap``) and L-BFGS train on the same observation features in
the same run (``--no-crfsuite`` skips them); the table gives each learner's time to reach
each peer's final test metric. Sequential learners run on one process, the others on
``--threads``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    DATA,
    EWT,
    RESULTS,
    crfsuite_peer,
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
    time_to_stay,
    write_json,
)

ALL = ("dcd", "demi-dcd", "perceptron", "mira", "pegasos", "adagrad", "sdm-hinge",
       "sdm-ramp", "sp-ipm", "ms-dcd")
SEQUENTIAL = ("dcd", "dcd-light", "perceptron", "mira", "sdm-hinge", "sdm-ramp")


def run(alg: str, args, work: Path, rep: int = 0) -> dict:
    d = work / (alg if rep == 0 else f"{alg}-{rep}")
    rmtree(d)
    d.mkdir(parents=True)
    threads = 1 if alg in SEQUENTIAL else args.threads
    opts = ["--format", args.format] + (["--column", args.column] if args.column else [])
    opts += (["--task", args.task] if args.task else []) + (
        ["--feature-columns", args.feature_columns] if args.feature_columns else [])
    cmd = ["train", "--algorithm", alg, "--threads", str(threads), "--train", args.train, *opts,
           "--time-limit", str(args.budget), "--snapshot-every", str(args.snapshot_every),
           "--snapshot-dir", str(d / "snap"), "--model", str(d / "model.npz"),
           "--summary-json", str(d / "summary.json"), "--seed", str(args.seed + rep)]
    if alg == "demi-dcd" and args.learners:
        cmd += ["--learners", args.learners]
    say(f"{alg}: training {args.budget:g}s on {threads} process(es)", args.quiet)
    _, wall = run_cli(cmd, d / "train.log", timeout=args.budget * 3 + 600)
    kept, total = thin_snapshots(d / "snap", args.min_step, args.rel_step)
    say(f"{alg}: evaluating {kept} of {total} snapshots", args.quiet)
    run_cli(["evaluate-snapshots", str(d / "snap"), "--train", args.train, "--test", args.test,
             *opts, "--out", str(d / "snapshots.csv"), "--quiet"], d / "evaluate.log")
    rows = read_snapshot_csv(d / "snapshots.csv")
    curve = [(r["seconds"], r["metric"]) for r in rows]
    return {"algorithm": alg, "threads": threads, "wall_seconds_incl_loading": wall,
            "command": "demidcd " + " ".join(cmd).replace(str(work), "WORK"),
            "summary": read_summary(d / "summary.json"), "curve": curve,
            "final_metric": curve[-1][1] if curve else None,
            "time_to_target": time_to_metric(curve, args.target) if curve else None,
            "time_to_stay": time_to_stay(curve, args.target) if curve else None}


CORPORA = {  # --corpus presets: data, options, the metric's target
    "ewt": {"train": str(EWT / "en_ewt-ud-train.conllu"),
            "test": str(EWT / "en_ewt-ud-test.conllu"),
            "format": "conllu", "column": "xpos", "task": None, "feature_columns": None,
            "target": 0.9418, "metric": "accuracy", "name": "learners_ewt"},
    "conll2000": {"train": str(DATA / "conll2000" / "train.txt"),
                  "test": str(DATA / "conll2000" / "test.txt"), "format": "columns",
                  "column": None, "task": "chunking", "feature_columns": "2", "target": 0.9333,
                  "metric": "chunk-f1", "name": "learners_conll2000"},
    "conll2002": {"train": str(DATA / "conll2002" / "esp.train"),  # Spanish NER, esp.testb
                  "test": str(DATA / "conll2002" / "esp.testb"), "format": "columns",
                  "column": None, "task": "ner", "feature_columns": "2", "target": 0.80,
                  "metric": "chunk-f1", "name": "learners_conll2002", "template": "ner",
                  "min_count": 1},
}


def peers(args, work: Path) -> dict:
    """CRFsuite's averaged perceptron and L-BFGS on the same observation features."""
    out = {}
    col = args.column if args.column in (None, "upos", "xpos") else int(args.column)
    fc = tuple(int(c) for c in args.feature_columns.split(",")) if args.feature_columns else ()
    for alg, iters in (("ap", args.ap_iterations), ("lbfgs", args.crf_iterations)):
        r = crfsuite_peer(args.train, args.test, fmt=args.format, column=col, algorithm=alg,
                          iterations=iters, feature_columns=fc, metric=args.metric,
                          template=getattr(args, "template", "base"),
                          min_count=getattr(args, "min_count", None),
                          work=work, note=lambda m: say(m, args.quiet),
                          done=lambda m: say(m, args.quiet))
        if r is None:
            say("CRFsuite peers skipped: python-crfsuite is not installed", args.quiet)
            return {}
        out[alg] = r
    return out


def median_seconds(times: list[float | None]) -> float | None:
    """Median of first-crossing times, a run that never crossed counting as infinitely slow
    (None when the median run did not cross)."""
    t = sorted(np.inf if x is None else x for x in times)
    m = float(np.median(t))
    return None if not np.isfinite(m) else m


def merge(reps: list[dict], crf: dict) -> dict:
    """One learner's repeated runs: per-run crossing times, their medians for the table, and
    the first run's curve for the plot."""
    for r in reps:
        r["time_to_crfsuite"] = {a: time_to_metric(r["curve"], c["test_metric"])
                                 if r["curve"] else None for a, c in crf.items()}
    if len(reps) == 1:
        return reps[0]
    finals = [r["final_metric"] for r in reps if r["final_metric"] is not None]
    return {**reps[0], "repeats": reps,
            "final_metric": float(np.median(finals)) if finals else None,
            "time_to_target": median_seconds([r["time_to_target"] for r in reps]),
            "time_to_stay": median_seconds([r["time_to_stay"] for r in reps]),
            "time_to_crfsuite": {a: median_seconds([r["time_to_crfsuite"][a] for r in reps])
                                 for a in crf}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", choices=tuple(CORPORA), default="ewt",
                    help="preset data, options and target (the options below override it)")
    for key in ("train", "test", "format", "column", "task", "feature_columns", "name"):
        ap.add_argument("--" + key.replace("_", "-"), default=None)
    ap.add_argument("--algorithms", default=",".join(ALL))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--snapshot-every", type=float, default=2.0)
    ap.add_argument("--target", type=float, default=None,
                    help="metric whose first crossing is reported (default: the preset's, "
                         "CRFsuite's averaged perceptron on EWT XPOS, 94.18%%)")
    ap.add_argument("--learners", default=None, metavar="K|auto",
                    help="demi-dcd's --learners (default: the CLI's)")
    ap.add_argument("--no-crfsuite", action="store_true")
    ap.add_argument("--ap-iterations", type=int, default=50)
    ap.add_argument("--crf-iterations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per learner, interleaved (seeds seed, seed+1, ...): the table "
                         "gives median times and final metrics, the JSON every run")
    ap.add_argument("--min-step", type=float, default=1.0,
                    help="seconds between scored snapshots before they thin out log-spaced")
    ap.add_argument("--rel-step", type=float, default=0.15,
                    help="scored snapshots at least this share of their time apart (0: every "
                         "snapshot after --min-step spacing)")
    ap.add_argument("--work", default="/tmp/demidcd-learners")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    preset = CORPORA[args.corpus] if args.train is None else {  # own data: plain defaults
        "format": "conllu", "target": 0.9418, "name": "learners",
        "metric": "chunk-f1" if args.task in ("chunking", "ner") else "accuracy"}
    for key, val in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, val)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    say(machine_line(info), args.quiet)
    crf = {} if args.no_crfsuite else peers(args, work)
    algs = args.algorithms.split(",")
    reps = [[run(a, args, work, i) for a in algs] for i in range(args.repeats)]  # interleaved
    runs = [merge([rep[j] for rep in reps], crf) for j in range(len(algs))]
    out = {"machine": info, "args": vars(args), "crfsuite": crf, "runs": runs}
    head = ["learner", "processes", f"final test {args.metric}", f"time to {100 * args.target:.2f}",
            "stays from"]
    head += [f"time to CRFsuite {a} ({100 * c['test_metric']:.2f})" for a, c in crf.items()]
    rows = [(r["algorithm"], r["threads"],
             "—" if r["final_metric"] is None else f"{100 * r['final_metric']:.2f}",
             fmt_s(r["time_to_target"]), fmt_s(r["time_to_stay"]),
             *(fmt_s(r["time_to_crfsuite"][a]) for a in crf))
            for r in runs]
    rows += [(f"CRFsuite {a} ({c['iterations_run']} it.)", 1, f"{100 * c['test_metric']:.2f}",
              "", "", *(fmt_s(c["train_wall_seconds"]) if b == a else "" for b in crf))
             for a, c in crf.items()]
    table = markdown_table(head, rows)
    out["table_markdown"] = table
    path = write_json(Path(args.out_dir) / f"{args.name}.json", out)
    print(table)
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 5))
        for r in runs:
            if r["curve"]:
                t, m = zip(*r["curve"], strict=True)
                ax.plot(t, [100 * x for x in m], label=r["algorithm"])
        ax.axhline(100 * args.target, color="grey", lw=0.8, ls="--")
        for a, c in crf.items():
            ax.plot([c["train_wall_seconds"]], [100 * c["test_metric"]], "k*" if a == "lbfgs"
                    else "kx", label=f"CRFsuite {a}")
        ax.set_xlabel("training seconds")
        ax.set_ylabel(f"test {args.metric} (%)")
        ax.set_title(f"{Path(args.train).name}, p = {args.threads}")
        ax.legend(fontsize=8)
        save_figure(fig, Path(args.out_dir) / f"{args.name}.png")
    say(f"results: {path}", args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
