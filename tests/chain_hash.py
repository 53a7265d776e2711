"""The record hash of a tag sequence as the tests compute it (an oracle over the kernel of
:mod:`demidcd.tasks.chain.kernels`)."""

from __future__ import annotations

import numpy as np

from demidcd.tasks.chain.kernels import hash_tags as hash_kernel


def hash_tags(y: np.ndarray) -> int:
    """The record hash of a tag sequence (FNV-1a over the tag ids, as a signed int64)."""
    y = np.ascontiguousarray(y, np.int32).reshape(-1)
    return int(np.array([hash_kernel(y, y.shape[0])], np.uint64).view(np.int64)[0])
