"""The numba kernels of :class:`~demidcd.tasks.chain.template.TemplateFeaturizer`: the per-token
value ids of a macro, dense numbering of a line's keys, and sorted, deduplicated CSR rows of
ids."""

from __future__ import annotations

import numba as nb
import numpy as np

__all__ = ["csr_sorted", "dense_ids", "gather"]


@nb.njit(cache=True, nogil=True)
def gather(sent_ptr, tok_type, valmap, row, n_types, n_off):
    """out[t] = valmap[type of column value at t + row], for positions outside the sentence the
    boundary types n_types + k − 1 (``_B-k``) and n_types + n_off + k − 1 (``_B+k``)."""
    out = np.empty(tok_type.shape[0], np.int64)
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            u = t + row
            if u < a:
                out[t] = valmap[n_types + (a - u) - 1]
            elif u >= b:
                out[t] = valmap[n_types + n_off + (u - b)]
            else:
                out[t] = valmap[tok_type[u]]
    return out


@nb.njit(cache=True, nogil=True)
def dense_ids(key):
    """(first, inverse) of an int64 array: the distinct keys numbered in order of first
    occurrence, inverse[t] = the number of key[t], first[d] = the first t holding key d
    (open-addressing hash table, linear probing)."""
    n = key.shape[0]
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    slot_key = np.empty(1 << bits, np.int64)
    slot_id = np.full(1 << bits, -1, np.int64)
    inverse = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    m = 0
    for t in range(n):
        k = key[t]
        h = np.int64((np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
        while slot_id[h] >= 0 and slot_key[h] != k:
            h = (h + 1) & mask
        if slot_id[h] < 0:
            slot_key[h] = k
            slot_id[h] = m
            first[m] = t
            m += 1
        inverse[t] = slot_id[h]
    return first[:m].copy(), inverse


@nb.njit(cache=True, nogil=True)
def _sort_slice(idx, val, a, b, weighted):
    """Sort idx[a:b] ascending (val alongside when weighted)."""
    if b - a <= 32:
        for i in range(a + 1, b):
            x = idx[i]
            y = val[i] if weighted else 0.0
            k = i - 1
            while k >= a and idx[k] > x:
                idx[k + 1] = idx[k]
                if weighted:
                    val[k + 1] = val[k]
                k -= 1
            idx[k + 1] = x
            if weighted:
                val[k + 1] = y
    else:
        order = np.argsort(idx[a:b], kind="mergesort")
        si = idx[a:b][order]
        idx[a:b] = si
        if weighted:
            sv = val[a:b][order]
            val[a:b] = sv


@nb.njit(cache=True, nogil=True)
def csr_sorted(ptr, ids, vals, weighted):
    """Per row r, ids[ptr[r]:ptr[r+1]] without −1 (and, weighted, without value 0), sorted,
    equal ids merged (values summed, zero sums dropped; unweighted: kept once).

    Returns (out_ptr int64, out_idx int32, out_val float64 — empty unless weighted)."""
    n = ptr.shape[0] - 1
    out_ptr = np.zeros(n + 1, np.int64)
    out_idx = np.empty(ids.shape[0], np.int32)
    out_val = np.empty(ids.shape[0] if weighted else 0, np.float64)
    pos = 0
    for r in range(n):
        start = pos
        for q in range(ptr[r], ptr[r + 1]):
            f = ids[q]
            if f < 0:
                continue
            if weighted:
                if vals[q] == 0.0:
                    continue
                out_val[pos] = vals[q]
            out_idx[pos] = f
            pos += 1
        _sort_slice(out_idx, out_val, start, pos, weighted)
        m = start
        i = start
        while i < pos:
            f = out_idx[i]
            v = 0.0
            while i < pos and out_idx[i] == f:
                if weighted:
                    v += out_val[i]
                i += 1
            if weighted:
                if v == 0.0:
                    continue
                out_val[m] = v
            out_idx[m] = f
            m += 1
        pos = m
        out_ptr[r + 1] = pos
    return out_ptr, out_idx[:pos].copy(), out_val[:pos if weighted else 0].copy()
