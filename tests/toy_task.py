"""A tiny task with an enumerable structure space, for testing learners without any real task.

Example i has m candidate structures y = 0..m-1 (0 is gold) with random sparse Φ(x_i, y) in
R^dim and Δ(0, y) ∈ {1, 2, 3} for y > 0; loss-augmented inference enumerates.
"""

from __future__ import annotations

import numpy as np

from demidcd.tasks.base import INDEX_DTYPE, RecordBatch, Task


def records(recs: list) -> RecordBatch:
    """A RecordBatch from (i, h, Δ, margin, idx, val) tuples."""
    if not recs:
        return RecordBatch.empty()
    ptr = np.zeros(len(recs) + 1, np.int64)
    ptr[1:] = np.cumsum([len(r[4]) for r in recs])
    return RecordBatch(
        np.array([r[0] for r in recs], np.int64), np.array([r[1] for r in recs], np.int64),
        np.array([r[2] for r in recs]), np.array([r[3] for r in recs]), ptr,
        np.concatenate([r[4] for r in recs]).astype(INDEX_DTYPE),
        np.concatenate([r[5] for r in recs]))


class ToyTask(Task):
    name = "toy"

    def __init__(self, n: int = 30, m: int = 6, dim: int = 20, density: float = 0.3, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.Phi = rng.normal(size=(n, m, dim)) * (rng.random((n, m, dim)) < density)
        self.Delta = np.concatenate([np.zeros((n, 1)), rng.integers(1, 4, (n, m - 1))], 1)
        self._n, self._m, self._dim = n, m, dim

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def n_examples(self) -> int:
        return self._n

    def costs(self) -> np.ndarray:
        return np.ones(self._n)

    def phi_delta(self, i, y):
        phi = self.Phi[i, 0] - self.Phi[i, y]
        idx = np.nonzero(phi)[0].astype(INDEX_DTYPE)
        return idx, phi[idx], float(self.Delta[i, y])

    def loss_augmented(self, w, examples):
        recs = []
        for i in examples:
            scores = self.Phi[i] @ w + self.Delta[i]
            y = int(np.argmax(scores))
            if y != 0 and scores[y] > scores[0]:
                idx, val, d = self.phi_delta(i, y)
                recs.append((i, y, d, float(val @ w[idx]), idx, val))
        return records(recs)

    def all_structures(self) -> RecordBatch:
        """Every non-gold structure of every example as a record (margin for w = 0)."""
        recs = [(i, y) for i in range(self._n) for y in range(1, self._m)]
        parts = [self.phi_delta(i, y) for i, y in recs]
        ptr = np.zeros(len(recs) + 1, np.int64)
        ptr[1:] = np.cumsum([len(p[0]) for p in parts])
        return RecordBatch(np.array([r[0] for r in recs], np.int64),
                           np.array([r[1] for r in recs], np.int64),
                           np.array([p[2] for p in parts]), np.zeros(len(recs)), ptr,
                           np.concatenate([p[0] for p in parts]).astype(INDEX_DTYPE),
                           np.concatenate([p[1] for p in parts]))

    def decode(self, w, examples):
        return [int(np.argmax(self.Phi[i] @ w)) for i in examples]

    def gold(self, examples):
        return [0 for _ in examples]

    def metric(self, gold, predicted):
        acc = float(np.mean([g == p for g, p in zip(gold, predicted, strict=True)]))
        return {"score": acc, "accuracy": acc}


class SlowToyTask(ToyTask):
    """:class:`ToyTask` whose every inference costs ``seconds`` (sleeping, like a solver
    subprocess: the CPU is free meanwhile), for the expensive-inference regime."""

    name = "slow-toy"

    def __init__(self, seconds: float = 0.05, **kw):
        super().__init__(**kw)
        self.seconds = float(seconds)

    def loss_augmented(self, w, examples):
        import time

        time.sleep(self.seconds * len(examples))
        return super().loss_augmented(w, examples)

    def argmax_records(self, w, examples):
        """Records of the plain argmax (no Δ), one per example whose argmax is not gold."""
        import time

        time.sleep(self.seconds * len(examples))
        recs = []
        for i in examples:
            scores = self.Phi[i] @ w
            scores[0] -= 1e-12  # a tie with gold is a mistake (else w = 0 never moves)
            y = int(np.argmax(scores))
            if y != 0:
                idx, val, d = self.phi_delta(i, y)
                recs.append((i, y, d, float(val @ w[idx]), idx, val))
        return records(recs)
