"""Resume (``--save-state`` / ``--resume``) and warm start (``--init``), through the CLI.

    python benchmarks/resume.py                       # EWT XPOS, demi-dcd, p = 2
    python benchmarks/resume.py --budget 600 --interrupt 10 --threads 2

1. **Resume overhead.** On the training file (default EWT train, XPOS), one uninterrupted run
   to the certified optimum (``stopped: converged``) against a run stopped by
   ``--time-limit INTERRUPT`` with ``--save-state`` and then ``--resume``d to the certified
   optimum. Reports the solver seconds of each run (the summary's ``seconds``), the wall time of
   each process (data loading, featurizing, saving and loading the state included), the
   overhead ratios (interrupted + resumed over uninterrupted), the state file's size and the
   test accuracy of both final models (both certify the same optimum within ``--tol``).
2. **Warm start.** The training file split in two halves by document (``# newdoc`` in CoNLL-U;
   without them, by sentence): a model trained on half A, then half B trained from it
   (``--init``) against half B from zero. Reports each run's solver seconds, iterations, stop
   reason and test accuracy (A alone, B from zero, B warm-started from A).

Every run is a ``demidcd train`` process of its own, one after the other, each with the time
limit ``--budget``. Writes ``benchmarks/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    EWT,
    RESULTS,
    machine_info,
    machine_line,
    parse_metrics,
    parse_stopped,
    read_summary,
    rmtree,
    run_cli,
    say,
    write_json,
)


def split_by_document(path: str | os.PathLike[str], out_a: Path, out_b: Path,
                      encoding: str = "utf-8") -> dict[str, int]:
    """Write the sentences of ``path`` (blank-line separated blocks) to ``out_a`` and ``out_b``:
    whole documents (a block with a ``# newdoc`` comment starts one; a file without them has a
    document per sentence) in order, A until it holds half the sentences. Returns the counts."""
    text = Path(path).read_text(encoding=encoding)
    blocks = [b for b in text.replace("\r\n", "\n").split("\n\n") if b.strip()]
    docs: list[list[str]] = []
    has_docs = any("# newdoc" in b for b in blocks)
    for b in blocks:
        if not docs or not has_docs or any(line.startswith("# newdoc")
                                           for line in b.splitlines()):
            docs.append([])
        docs[-1].append(b.strip("\n"))
    half, a, b_ = len(blocks) / 2, [], []
    for d in docs:  # A takes documents while its middle stays within the first half
        (a if not b_ and (not a or sum(map(len, a)) + len(d) / 2 <= half) else b_).append(d)
    for out, part in ((out_a, a), (out_b, b_)):
        out.write_text("\n\n".join(s for d in part for s in d) + "\n\n", encoding=encoding)
    return {"documents_a": len(a), "documents_b": len(b_),
            "sentences_a": sum(map(len, a)), "sentences_b": sum(map(len, b_))}


def _run(name: str, args: list[str], work: Path, quiet: bool) -> dict:
    """One ``demidcd train`` run: its summary, wall seconds, test accuracy and log lines."""
    summary = work / f"{name}.summary.json"
    text, wall = run_cli(["train", *args, "--summary-json", summary], work / f"{name}.log")
    s = read_summary(summary) or {}
    stopped = parse_stopped(text) or {}
    out = {"stop_reason": s.get("stop_reason"), "converged": s.get("stop_reason") ==
           "converged", "iterations": s.get("epochs"), "solver_seconds": s.get("seconds"),
           "wall_seconds": round(wall, 3),
           "test_accuracy": parse_metrics(text).get("accuracy"),
           "updates": (s.get("extra") or {}).get("updates"),
           "stopped_line": stopped}
    resumed = [ln for ln in text.splitlines() if ln.startswith("resuming ")]
    if resumed:
        out["resuming_line"] = resumed[-1]
    say(f"  {name}: {out['stop_reason']} after {out['iterations']} iterations, "
        f"{(out['solver_seconds'] or 0):.1f} s solver, {wall:.1f} s wall, test accuracy "
        f"{100 * (out['test_accuracy'] or 0):.2f}%", quiet)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=str(EWT / "en_ewt-ud-train.conllu"))
    ap.add_argument("--test", default=str(EWT / "en_ewt-ud-test.conllu"))
    ap.add_argument("--format", default="conllu", choices=("conllu", "columns"))
    ap.add_argument("--column", default="xpos")
    ap.add_argument("--algorithm", default="demi-dcd")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=900.0,
                    help="time limit of every run (seconds)")
    ap.add_argument("--interrupt", type=float, default=10.0,
                    help="time limit of the interrupted run (seconds)")
    ap.add_argument("--parts", default="resume,warm", help="resume, warm or both")
    ap.add_argument("--extra", default="", help="more train options, space separated")
    ap.add_argument("--work", default=None, help="directory for models and logs (kept)")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name", default="resume")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="demidcd-resume-"))
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    say(machine_line(info), args.quiet)
    data = ["--format", args.format, "--column", args.column]
    solver = ["--algorithm", args.algorithm, "--threads", str(args.threads),
              *args.extra.split()]
    res: dict = {"machine": info, "settings": {k: v for k, v in vars(args).items()
                                              if k not in ("quiet", "out_dir")}}
    try:
        if "resume" in parts:
            say(f"resume: {args.train}, {args.algorithm} p = {args.threads}", args.quiet)
            base = ["--train", args.train, "--test", args.test, *data, *solver]
            u = _run("uninterrupted", [*base, "--time-limit", str(args.budget),
                                       "--model", str(work / "u.npz")], work, args.quiet)
            first = _run("interrupted", [*base, "--time-limit", str(args.interrupt),
                                         "--save-state", "--model", str(work / "i.npz")],
                         work, args.quiet)
            state = work / "i.state.npz"
            r = _run("resumed", [*base, "--resume", str(work / "i.npz"), "--time-limit",
                                 str(args.budget), "--model", str(work / "r.npz")],
                     work, args.quiet)
            both_s = (first["solver_seconds"] or 0) + (r["solver_seconds"] or 0)
            both_w = first["wall_seconds"] + r["wall_seconds"]
            res["resume"] = {
                "uninterrupted": u, "interrupted": first, "resumed": r,
                "state_file_bytes": state.stat().st_size if state.is_file() else None,
                "solver_seconds_interrupted_plus_resumed": round(both_s, 3),
                "solver_overhead": _ratio(both_s, u["solver_seconds"]),
                "wall_overhead": _ratio(both_w, u["wall_seconds"]),
                "accuracy_difference_points": None if u["test_accuracy"] is None or
                r["test_accuracy"] is None else round(100 * (r["test_accuracy"]
                                                             - u["test_accuracy"]), 3)}
            R = res["resume"]
            say(f"  to the certified optimum: interrupted + resumed {both_s:.1f} s solver "
                f"({R['solver_overhead']}x), {both_w:.1f} s wall ({R['wall_overhead']}x); "
                f"state {(R['state_file_bytes'] or 0) / 2**20:.1f} MiB", args.quiet)
        if "warm" in parts:
            say(f"warm start: {args.train} in two halves by document", args.quiet)
            suffix = Path(args.train).suffix
            a, b = work / f"half_a{suffix}", work / f"half_b{suffix}"
            split = split_by_document(args.train, a, b)
            say(f"  A: {split['sentences_a']:,} sentences ({split['documents_a']} documents), "
                f"B: {split['sentences_b']:,} ({split['documents_b']})", args.quiet)
            common = ["--test", args.test, *data, *solver, "--time-limit", str(args.budget)]
            ra = _run("half_a", ["--train", str(a), *common, "--model", str(work / "a.npz")],
                      work, args.quiet)
            cold = _run("half_b_from_zero", ["--train", str(b), *common, "--model",
                                             str(work / "b0.npz")], work, args.quiet)
            warm = _run("half_b_init_a", ["--train", str(b), *common, "--init",
                                          str(work / "a.npz"), "--model",
                                          str(work / "b1.npz")], work, args.quiet)
            res["warm"] = {"split": split, "half_a": ra, "half_b_from_zero": cold,
                           "half_b_init_a": warm,
                           "solver_speedup": _ratio(cold["solver_seconds"],
                                                    warm["solver_seconds"])}
    finally:
        if not args.work:
            rmtree(work)
    path = write_json(Path(args.out_dir) / f"{args.name}.json", res)
    say(f"wrote {path}", args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
