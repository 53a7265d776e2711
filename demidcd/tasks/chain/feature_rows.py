"""Numba helpers that build tokens' feature-id rows (CSR: ``feat_ptr``, ``feat_idx``), shared by
the built-in featurizer (:mod:`~demidcd.tasks.chain.features`) and the per-type tables
(:mod:`~demidcd.tasks.chain.type_tables`)."""

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def feature_rows(tok_type, type_ptr, extra: int):
    """CSR arrays for the tokens' feature ids: ``feat_ptr`` (zeros, one per token + 1) and
    ``feat_idx`` with room for each token's type ids plus ``extra``."""
    cap = 0
    for t in range(tok_type.shape[0]):
        ty = tok_type[t]
        cap += type_ptr[ty + 1] - type_ptr[ty] + extra
    return np.zeros(tok_type.shape[0] + 1, np.int64), np.empty(cap, np.int32)


@nb.njit(cache=True, nogil=True)
def add_ids(feat_idx, pos, ids) -> int:
    """Append the ids ≥ 0 of ``ids`` to ``feat_idx`` at ``pos``; returns the new end."""
    for v in ids:
        if v >= 0:
            feat_idx[pos] = v
            pos += 1
    return pos


@nb.njit(cache=True, nogil=True)
def add_context_ids(feat_idx, pos, t, a, b, tok_type, ctx, bos, eos) -> int:
    """Append token t's context features (the words at offsets −2, −1, +1, +2 of its
    sentence ``[a, b)``: ``ctx[type, j]``, or ``bos[j]`` / ``eos[j]`` past its ends; −1 = none)
    to ``feat_idx`` at ``pos``; returns the new end."""
    for j in range(4):
        u = t + (j - 2 if j < 2 else j - 1)
        if u < a:
            v = bos[j]
        elif u >= b:
            v = eos[j]
        else:
            v = ctx[tok_type[u], j]
        if v >= 0:
            feat_idx[pos] = v
            pos += 1
    return pos


@nb.njit(cache=True, nogil=True)
def add_word_ids(feat_idx, pos, t, a, b, tok_type, type_ptr, type_ids, ctx, bos, eos) -> int:
    """Append token t's own-word ids (``type_ids[type_ptr[k]:type_ptr[k+1]]`` for its type k)
    and its context ids (:func:`add_context_ids`); returns the new end."""
    ty = tok_type[t]
    pos = add_ids(feat_idx, pos, type_ids[type_ptr[ty]:type_ptr[ty + 1]])
    return add_context_ids(feat_idx, pos, t, a, b, tok_type, ctx, bos, eos)


@nb.njit(cache=True, nogil=True)
def sort_unique(a: np.ndarray, start: int, stop: int) -> int:
    """Sort ``a[start:stop]`` in place (insertion sort: a token's slice is short) and drop
    repeats; returns the new end of the slice."""
    for i in range(start + 1, stop):
        x = a[i]
        k = i - 1
        while k >= start and a[k] > x:
            a[k + 1] = a[k]
            k -= 1
        a[k + 1] = x
    if stop <= start:
        return stop
    m = start + 1
    for i in range(start + 1, stop):
        if a[i] != a[m - 1]:
            a[m] = a[i]
            m += 1
    return m
