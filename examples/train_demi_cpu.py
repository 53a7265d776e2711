"""Train a tagger with DEMI-DCD through the library API and plot its CPU timeline.

    python examples/train_demi_cpu.py                       # the synthetic default corpus
    python examples/train_demi_cpu.py --train en_ewt-ud-train.conllu --test en_ewt-ud-test.conllu \
        --column xpos --threads 2 --time-limit 60 --out cpu.png

DEMI-DCD runs one learner process and ``threads − 1`` inference workers; ``cpu_log`` asks the
CPU monitor (psutil, every 0.5 s) to write the timeline as CSV (seconds, total, one column per
process). The plot shows each process and their sum, as ``top`` reports it (p busy processes
give p × 100%), with the 2-second moving average of the total. Needs matplotlib for the plot.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile

from demidcd.api import SequenceTagger


def load_data(args):
    """((X, Y) of the training data, (X, Y) of the test data or None)."""
    if args.train:
        from demidcd.datasets import load_tagged

        col = args.column if args.column in (None, "upos", "xpos") else int(args.column)
        train = load_tagged(args.train, column=col)
        return train, (load_tagged(args.test, column=col) if args.test else None)
    from demidcd.synthetic import generate_splits

    train, _, test = generate_splits(seed=0, n_sentences=args.sentences)
    return (train.tokens, train.tags), (test.tokens, test.tags)


def read_cpu_log(path: str) -> tuple[list[float], dict[str, list[float]]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    seconds = [float(r["seconds"]) for r in rows]
    cols = [k for k in (rows[0].keys() if rows else []) if k != "seconds"]
    return seconds, {k: [float(r[k]) for r in rows] for k in cols}


def moving_average(t: list[float], v: list[float], window: float = 2.0) -> list[float]:
    out, lo, s = [], 0, 0.0
    for k, x in enumerate(v):
        s += x
        while t[lo] <= t[k] - window:
            s -= v[lo]
            lo += 1
        out.append(s / (k + 1 - lo))
    return out


def plot(seconds, cols, threads: int, title: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, vals in cols.items():
        if name != "total":
            ax.plot(seconds, vals, lw=0.8, alpha=0.7, label=name)
    total = cols.get("total", [])
    ax.plot(seconds, total, color="k", lw=0.8, alpha=0.5, label="total (samples)")
    ax.plot(seconds, moving_average(seconds, total), color="tab:red", lw=2,
            label="total, 2 s moving average")
    ax.axhline(100 * threads, color="k", ls=":", lw=0.8, label=f"{threads} cores")
    ax.set_ylim(0, 100 * threads * 1.15)
    ax.set_xlabel("seconds since training started")
    ax.set_ylabel("CPU use (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", help="training file (default: the synthetic corpus)")
    ap.add_argument("--test")
    ap.add_argument("--column", default=None, help="upos|xpos for CoNLL-U, N for columns")
    ap.add_argument("--sentences", type=int, default=2000, help="synthetic corpus size")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--cpu-log", help="CSV to keep (default: a temporary file)")
    ap.add_argument("--out", default="demi_dcd_cpu.png", help="PNG of the CPU timeline")
    args = ap.parse_args(argv)

    train, test = load_data(args)
    cpu_log = args.cpu_log or os.path.join(tempfile.mkdtemp(prefix="demidcd-example-"),
                                           "cpu.csv")
    tagger = SequenceTagger(C=0.1, algorithm="demi-dcd", threads=args.threads, learners=1,
                            time_limit=args.time_limit, cpu_log=cpu_log)
    tagger.fit(*train)
    res = tagger.result_
    print(f"stopped: {res.stop_reason} after {res.seconds:.1f}s; "
          f"{res.extra.get('cpu_line', '')}")
    if test is not None:
        print(f"test accuracy: {100 * tagger.score(*test):.2f}%")
    seconds, cols = read_cpu_log(cpu_log)
    print(f"CPU timeline: {len(seconds)} samples in {cpu_log}")
    try:
        plot(seconds, cols, args.threads,
             f"DEMI-DCD, {args.threads} processes: {res.extra.get('cpu_line', '')}", args.out)
    except ImportError:
        print("matplotlib is not installed (pip install matplotlib): no plot", file=sys.stderr)
        return 0
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
