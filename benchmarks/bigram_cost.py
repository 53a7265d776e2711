"""What label-bigram (B) observation features cost per token: CoNLL-2000 chunking, one core.

    python benchmarks/bigram_cost.py [--fit-seconds 20] [--reps 7] [--out-dir benchmarks/results]

Two templates with the same U features: ``plain`` (``benchmarks/chunk_crfpp.template``: words,
POS window, bigrams and trigrams, a bare ``B``, i.e. no B features; named acceptance in results
written before it was kept here) and ``star`` (the same with every POS line also a label-bigram
feature, Wapiti's ``*``; see :func:`templates.star_template`). For each, a ``ChunkTagger`` fit
on the training set (one thread, ``--fit-seconds``) gives a realistic w; then, on one pinned
core, over every training sentence with that w (best of ``--reps``, the medians beside): plain
Viterbi (``decode_flat``) and loss-augmented inference with the φ records (``loss_augmented``,
DEMI-DCD Eq. 5; what a worker does per example). The ratio star / plain is the cost of the B
features, read against the B features per token (each adds K² = 22² scores to its position's
transition matrix, on top of the K = 22 per U feature).

Writes ``<name>.json`` to ``--out-dir`` and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, RESULTS, machine_info, machine_line, say, write_json  # noqa: E402
from foundation import best_of, one_core  # noqa: E402
from templates import PLAIN_TEMPLATE, star_template  # noqa: E402

from demidcd.api import ChunkTagger  # noqa: E402
from demidcd.datasets import load_tagged  # noqa: E402


def measure(template: str, X, Y, fit_seconds: float, reps: int) -> dict:
    """Fit, then time decode and loss-augmented inference over all of X on one core."""
    est = ChunkTagger(template=template, threads=1, time_limit=fit_seconds).fit(X, Y)
    task = est.training_task(X, Y)
    w = np.ascontiguousarray(est.coef_, np.float64)
    w_inf = w.astype(task.inference_dtype)  # what a worker searches with
    ex = np.arange(task.n_examples, dtype=np.int64)
    n_tok = int(task.sent_ptr[-1])
    task.decode_flat(w, ex[:8])  # compiled before the clock
    task.loss_augmented(w_inf, ex[:8])
    out = {"template": template, "tokens": n_tok, "sentences": task.n_examples, "tags": task.K,
           "u_features": task.F, "b_features": task.G, "dim": task.dim,
           "u_per_token": float(np.diff(task.feat_ptr).mean()),
           "b_per_token": (float(np.diff(task.bfeat_ptr).mean())
                           if task.bfeat_ptr is not None else 0.0),
           "fit_seconds": est.result_.seconds, "stop_reason": est.result_.stop_reason}
    for name, fn in (("decode", lambda: task.decode_flat(w, ex)),
                     ("loss_augmented", lambda: task.loss_augmented(w_inf, ex))):
        best, times = best_of(fn, reps)
        out[name] = {"best_seconds": best, "median_seconds": float(np.median(times)),
                     "ns_per_token": 1e9 * best / n_tok, "tokens_per_s": n_tok / best}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default=str(DATA / "conll2000" / "train.txt"))
    ap.add_argument("--fit-seconds", type=float, default=20.0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name", default="bigram_cost_conll2000")
    args = ap.parse_args(argv)
    train = Path(args.train)
    if not train.exists():
        print(f"bigram_cost: {train} not found (see ../shared/data/README.md)", file=sys.stderr)
        return 2
    X, Y = load_tagged(train, format="columns", all_columns=True)  # (word, POS) tokens
    work = Path(args.out_dir)
    work.mkdir(parents=True, exist_ok=True)
    star = work / "star.template"
    star.write_text(star_template(PLAIN_TEMPLATE.read_text())[0])
    info = machine_info()
    t0 = time.time()
    rows = {}
    for config, template in (("plain", str(PLAIN_TEMPLATE)), ("star", str(star))):
        with one_core():
            rows[config] = measure(template, X, Y, args.fit_seconds, args.reps)
    star.unlink()
    a, s = rows["plain"], rows["star"]
    ratios = {k: s[k]["best_seconds"] / a[k]["best_seconds"] for k in ("decode", "loss_augmented")}
    write_json(work / f"{args.name}.json",
               {"benchmark": "bigram_cost", "machine": info, "command": " ".join(sys.argv),
                "wall_seconds": time.time() - t0, "rows": rows, "star_over_plain": ratios})
    say(f"machine: {machine_line(info)}")
    say("| template | U / B features per token | decode ns/token | loss-augmented ns/token |")
    say("|---|---|---|---|")
    for config, r in rows.items():
        say(f"| {config} | {r['u_per_token']:.1f} / {r['b_per_token']:.1f} | "
            f"{r['decode']['ns_per_token']:.0f} | {r['loss_augmented']['ns_per_token']:.0f} |")
    say(f"star / plain: decode {ratios['decode']:.2f}x, loss-augmented "
        f"{ratios['loss_augmented']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
