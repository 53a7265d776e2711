"""Dense versus pruned Viterbi for many labels (issue 43): ns per token of plain decoding and of
loss-augmented inference with a trained tagger's w, on one core.

    python benchmarks/many_labels.py --model brown453.npz
        --data ../shared/data/brown/brown-train.txt --format columns --column 2
        [--sentences 2000] [--reps 5] [--name brown453] [--out-dir benchmarks/results]
        [--quiet]

The model is any ``demidcd train`` sequence model; the first ``--sentences`` sentences of
``--data`` (training data: loss-augmented inference needs every gold tag known) are encoded
with its features. Timed on one pinned core, dense and pruned alternating in each of ``--reps``
rounds (best and median of each, thread CPU time; wall time beside it): ``decode_kernel`` on
float64 w (what predict runs) and ``loss_augmented_kernel`` on float32 w (Eq. 5 + the φ
records: what a worker runs), each with ``prune_from`` forcing the dense scan or the pruned one
(``pruned_viterbi.relax_pruned``), whatever the default thresholds (``PRUNE_FROM_LABELS``,
``PRUNE_FROM_LABELS_AUGMENTED``) would pick. The two must give the same tags and records; the
script checks that before timing.

Writes ``many_labels_<name>.json`` to ``--out-dir`` and a markdown row to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, machine_info, machine_line, say, write_json  # noqa: E402
from foundation import one_core  # noqa: E402

from demidcd.api import SequenceTagger  # noqa: E402
from demidcd.datasets import load_tagged  # noqa: E402
from demidcd.tasks.chain import pruned_viterbi as pv  # noqa: E402
from demidcd.tasks.chain import records as sq  # noqa: E402

DENSE = 1 << 30
PRUNED = 0


def interleaved(fns: dict, reps: int) -> tuple[dict, dict]:
    """({name: CPU seconds per rep}, {name: wall seconds per rep}) of every fn, run in turn in
    each rep (load drifts hit all). CPU time (this thread's) is what the figures use: on a
    machine shared with other jobs the wall clock also counts the time others hold the core."""
    cpu = {name: [] for name in fns}
    wall = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            c0, t0 = time.thread_time(), time.perf_counter()
            fn()
            cpu[name].append(time.thread_time() - c0)
            wall[name].append(time.perf_counter() - t0)
    return cpu, wall


def measure(task, w: np.ndarray, reps: int) -> dict:
    """Checks dense == pruned, then times both for decode and loss-augmented inference."""
    F, K, G, chain = task.F, task.K, task.G, task.chain
    gold = task._gold_array()
    ex = np.arange(task.n_examples, dtype=np.int64)
    w64 = np.ascontiguousarray(w, np.float64)
    w32 = w64.astype(task.inference_dtype)
    n_tok = int(task.sent_ptr[ex[-1] + 1] - task.sent_ptr[ex[0]])

    def decode(p):
        return sq.decode_kernel(w64, F, K, chain, ex, p)

    def loss_aug(p):
        return sq.loss_augmented_kernel(w32, F, K, G, chain, gold, ex, 1.0, p)

    for fn in (decode, loss_aug):  # compiled (or loaded) before the clock; identical results
        for a, b in zip(fn(DENSE), fn(PRUNED), strict=True):
            if not np.array_equal(a, b):
                raise SystemExit("many_labels: pruned and dense Viterbi differ")
    cpu, wall = interleaved({"decode_dense": lambda: decode(DENSE),
                         "decode_pruned": lambda: decode(PRUNED),
                         "loss_augmented_dense": lambda: loss_aug(DENSE),
                         "loss_augmented_pruned": lambda: loss_aug(PRUNED)}, reps)
    out = {"tokens": n_tok, "sentences": int(ex.size), "tags": K,
           "default_decode": "pruned" if K >= pv.PRUNE_FROM_LABELS else "dense",
           "default_loss_augmented": ("pruned" if K >= pv.PRUNE_FROM_LABELS_AUGMENTED
                                      else "dense"),
           "prune_from_labels": pv.PRUNE_FROM_LABELS,
           "prune_from_labels_augmented": pv.PRUNE_FROM_LABELS_AUGMENTED, "reps": reps}
    for name, t in cpu.items():
        best = min(t)
        out[name] = {"best_seconds": best, "median_seconds": float(np.median(t)),
                     "ns_per_token": 1e9 * best / n_tok,
                     "median_ns_per_token": 1e9 * float(np.median(t)) / n_tok,
                     "wall_best_seconds": min(wall[name]),
                     "wall_median_seconds": float(np.median(wall[name]))}
    for kind in ("decode", "loss_augmented"):
        out[f"{kind}_dense_over_pruned"] = (out[f"{kind}_dense"]["best_seconds"]
                                            / out[f"{kind}_pruned"]["best_seconds"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a sequence model (.npz) of demidcd train")
    ap.add_argument("--data", required=True, help="its training data (gold tags known)")
    ap.add_argument("--format", default="auto")
    ap.add_argument("--column", default=None)
    ap.add_argument("--sentences", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--name", default="brown453")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--quiet", action="store_true", help="no summary")
    args = ap.parse_args(argv)
    for path in (args.model, args.data):
        if not Path(path).exists():
            print(f"many_labels: {path} not found", file=sys.stderr)
            return 2
    column = int(args.column) if args.column and args.column.isdigit() else args.column
    tagger = SequenceTagger.load(args.model)
    X, Y = load_tagged(args.data, format=args.format, column=column)
    task = tagger.training_task(X[:args.sentences], Y[:args.sentences])
    info = machine_info()
    t0 = time.time()
    with one_core():
        row = measure(task, tagger.coef_, args.reps)
    row.update(model=args.model, data=args.data, column=args.column,
               features_per_token=float(np.diff(task.feat_ptr).mean()))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"many_labels_{args.name}.json",
               {"benchmark": "many_labels", "machine": info, "command": " ".join(sys.argv),
                "wall_seconds": time.time() - t0, "result": row})
    q = args.quiet
    say(f"machine: {machine_line(info)}", q)
    say("| data | tags | tokens | decode ns/token dense / pruned (x) | "
        "loss-augmented ns/token dense / pruned (x) |", q)
    say("|---|---|---|---|---|", q)
    d = [row[f"decode_{m}"]["ns_per_token"] for m in ("dense", "pruned")]
    la = [row[f"loss_augmented_{m}"]["ns_per_token"] for m in ("dense", "pruned")]
    say(f"| {args.name} | {row['tags']} | {row['tokens']:,} | {d[0]:,.0f} / {d[1]:,.0f} "
        f"({row['decode_dense_over_pruned']:.2f}x) | {la[0]:,.0f} / {la[1]:,.0f} "
        f"({row['loss_augmented_dense_over_pruned']:.2f}x) |", q)
    return 0


if __name__ == "__main__":
    sys.exit(main())
