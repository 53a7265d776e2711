"""The active sets' φ pool on Brown (issue 43): bytes per stored structure and the update rate.

    python benchmarks/phi_pool.py [--sentences 20000] [--epochs 2] [--passes 15]

1-DCD-Light epochs (inference, admission, update per block of 256, seed 0) on the first
``--sentences`` sentences of Brown train (universal tags, built-in features), then ``--passes``
timed update passes without shrinking over the frozen active sets. Prints and writes
``results/phi_pool_brown.json``: structures, live pool bytes per structure, the fastest and the
median pass rate (updates/s), and a digest of w, which is the same for every pool encoding that
gives the same updates (run it on two commits to compare them; rates are load-sensitive, so
run the two back to back and compare ratios).
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np
from common import DATA, RESULTS, machine_info, write_json

from demidcd.estimators.sequence import SequenceTagger
from demidcd.io.tagged import read_tagged
from demidcd.solvers.activeset import ActiveSets
from demidcd.tasks.chain.features import SequenceFeaturizer


def brown_task(sentences: int):
    """The training task of the first ``sentences`` sentences of Brown train: universal tags,
    the built-in features (min count 2)."""
    d = read_tagged(str(DATA / "brown" / "brown-train.txt"), fmt="columns")
    X, Y = d.tokens[:sentences], d.tags[:sentences]
    est = SequenceTagger()
    est.classes_ = sorted({t for s in Y for t in s})
    est.featurizer_ = SequenceFeaturizer(2, 0).fit(X)
    return est.training_task(X, Y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument("--out", default=str(RESULTS / "phi_pool_brown.json"))
    a = ap.parse_args()
    task = brown_task(a.sentences)
    n = task.n_examples
    act = ActiveSets(n, task.dim, 0.1)
    rng = np.random.default_rng(0)
    for _ in range(a.epochs):
        order = rng.permutation(n).astype(np.int64)
        for s in range(0, n, 256):
            chunk = order[s:s + 256]
            act.insert(task.loss_augmented(act.w, chunk), 0.01)
            act.update(chunk)
    live_words = int(act.meta[1] - act.meta[2])
    shared = np.shares_memory(act.p_idx, act.p_val)  # one pool, or index + value arrays
    word_bytes = act.p_idx.itemsize + (0 if shared else act.p_val.itemsize)
    order = np.arange(n, dtype=np.int64)
    act.update(order, shrink=False)  # every page of w and the pool touched once
    times, updates = [], 0
    for _ in range(a.passes):
        t = time.perf_counter()
        updates = act.update(order, shrink=False).updates
        times.append(time.perf_counter() - t)
    res = {"sentences": n, "dim": int(task.dim), "structures": int(act.size),
           "pool_bytes_per_structure": live_words * word_bytes / act.size,
           "updates_per_pass": updates, "fastest_pass_rate": updates / min(times),
           "median_pass_rate": updates / float(np.median(times)),
           "w_sha1": hashlib.sha1(act.w.tobytes()).hexdigest(),
           "dual": act.dual_objective(), "machine": machine_info()}
    print({k: v for k, v in res.items() if k != "machine"})
    write_json(a.out, res)


if __name__ == "__main__":
    main()
