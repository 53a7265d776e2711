"""The record format every learner, transport and ring shares: a batch of (i, h, Δ, φ, m) in
flat arrays (see :mod:`demidcd.tasks.base` for what a record means)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INDEX_DTYPE = np.int32  # feature indices inside φ (w has < 2**31 entries)
VALUE_DTYPE = np.float64  # feature values inside φ, and w


@dataclass
class RecordBatch:
    """Records (i, h, Δ, φ, m) for ``n`` structures, φ stored CSR-like.

    ex[k], hash[k], delta[k], margin[k] (= w·φ_k for the w used by inference);
    φ_k = (idx[ptr[k]:ptr[k+1]], val[ptr[k]:ptr[k+1]]), indices sorted and unique.
    """

    ex: np.ndarray  # int64[n]
    hash: np.ndarray  # int64[n]
    delta: np.ndarray  # float64[n]
    margin: np.ndarray  # float64[n]
    ptr: np.ndarray  # int64[n+1]
    idx: np.ndarray  # int32[nnz]
    val: np.ndarray  # float64[nnz]

    def __len__(self) -> int:
        return int(self.ex.shape[0])

    @staticmethod
    def empty() -> RecordBatch:
        return RecordBatch(
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64),
            np.zeros(0, np.float64), np.zeros(1, np.int64), np.zeros(0, INDEX_DTYPE),
            np.zeros(0, VALUE_DTYPE),
        )

    def take(self, rows: np.ndarray) -> RecordBatch:
        """The records at positions ``rows`` (a boolean mask or indices), as a new batch."""
        rows = np.flatnonzero(rows) if rows.dtype == np.bool_ else np.asarray(rows, np.int64)
        lens = (self.ptr[1:] - self.ptr[:-1])[rows]
        ptr = np.zeros(rows.shape[0] + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        gather = np.repeat(self.ptr[rows] - ptr[:-1], lens) + np.arange(ptr[-1])
        return RecordBatch(self.ex[rows], self.hash[rows], self.delta[rows], self.margin[rows],
                           ptr, self.idx[gather], self.val[gather])

    def violation(self, alpha_sum: np.ndarray, C: float) -> np.ndarray:
        """−∇_{i,y} D = Δ − w·φ − Σ_y' α_{i,y'} / (2C) for each record (Eq. 9/11)."""
        return self.delta - self.margin - alpha_sum[self.ex] / (2.0 * C)
