"""Shared φ kernels of the tasks: a feature vector φ(x, y) is built as unsorted signed keys
``2·index + [sign > 0]`` (with optional real values), radix-sorted and merged into sorted
(index, value) pairs, and a structure is hashed by FNV-1a over its labels. The chain, dependency
and entity-relation tasks all build their φ this way."""

from __future__ import annotations

import numba as nb
import numpy as np

FNV_OFFSET = np.uint64(14695981039346656037)
"""FNV-1a 64-bit offset basis (structure hashes)."""
FNV_PRIME = np.uint64(1099511628211)
"""FNV-1a 64-bit prime."""


@nb.njit(cache=True, nogil=True)
def sort_entries(keys, tmp, counts, m, nbits, vals, vtmp):
    """Sort the non-negative int64 keys[:m] (all < 2**nbits); returns (sorted keys, their vals),
    both buffers among the ones passed.

    Insertion sort for short inputs, otherwise an LSD radix sort with 8-bit digits ping-ponging
    between ``keys`` and ``tmp`` (both ≥ m long; ``counts`` is an int64[256] scratch): branch-free
    and about 4x faster than quicksort on the few hundred keys of a typical record.
    vals[:m] (scratch ``vtmp``, both ≥ m long) move with their keys (the sort is stable); pass
    None for both to sort keys alone: numba then compiles the key-only sort (a None argument
    prunes the ``vals is not None`` branches at compile time).
    """
    if m <= 48:
        for i in range(1, m):
            x = keys[i]
            if vals is not None:
                xv = vals[i]
            k = i - 1
            while k >= 0 and keys[k] > x:
                keys[k + 1] = keys[k]
                if vals is not None:
                    vals[k + 1] = vals[k]
                k -= 1
            keys[k + 1] = x
            if vals is not None:
                vals[k + 1] = xv
        return keys, vals
    src = keys
    dst = tmp
    vsrc = vals
    vdst = vtmp
    for shift in range(0, nbits, 8):
        counts[:] = 0
        for i in range(m):
            counts[(src[i] >> shift) & 255] += 1
        if counts[(src[0] >> shift) & 255] == m:
            continue  # all keys share this digit
        total = 0
        for d in range(256):
            c = counts[d]
            counts[d] = total
            total += c
        for i in range(m):
            x = src[i]
            d = (x >> shift) & 255
            dst[counts[d]] = x
            if vals is not None:
                vdst[counts[d]] = vsrc[i]
            counts[d] += 1
        src, dst = dst, src
        vsrc, vdst = vdst, vsrc
    return src, vsrc


@nb.njit(cache=True, nogil=True)
def sort_keys(keys, tmp, counts, m, nbits):
    """Sort keys[:m] (:func:`sort_entries` without values); returns the sorted buffer."""
    return sort_entries(keys, tmp, counts, m, nbits, None, None)[0]


@nb.njit(cache=True, nogil=True)
def merge(ks, m, w, out_idx, out_val, pos, vs=None):
    """Sum the entries of the sorted keys ks[:m] per index, drop exact zeros, append at pos.

    An entry's value is ±1 from its key's low bit, or ``vs[i]`` when ``vs`` is given (summed in
    entry order: the sort is stable; None compiles the binary version). Returns (new pos, w·φ);
    w may be empty (margin 0), e.g. when only φ is wanted.
    """
    has_w = w.shape[0] > 0
    margin = 0.0
    i = 0
    while i < m:
        idx = ks[i] >> 1
        s = 0.0
        while i < m and (ks[i] >> 1) == idx:
            if vs is None:
                s += 1.0 if (ks[i] & 1) == 1 else -1.0
            else:
                s += vs[i]
            i += 1
        if s != 0.0:
            out_idx[pos] = idx
            out_val[pos] = s
            if has_w:
                margin += s * w[idx]
            pos += 1
    return pos, margin


@nb.njit(cache=True, nogil=True)
def key_bits(dim):
    """Number of bits of the largest key 2·(dim − 1) + 1."""
    top = 2 * dim
    nbits = 1
    while (np.int64(1) << nbits) <= top:
        nbits += 1
    return nbits


@nb.njit(cache=True, nogil=True)
def phi_merge(keys, vals, tmp, vtmp, counts, m, nbits, w, out_idx, out_val, pos):
    """φ from the unmerged entries of :func:`_phi_keys` (binary, or with ``vals``), appended to
    (out_idx, out_val) at pos; returns (new pos, w·φ)."""
    if vals.shape[0] > 0:
        ks, vs = sort_entries(keys, tmp, counts, m, nbits, vals, vtmp)
        return merge(ks, m, w, out_idx, out_val, pos, vs)
    ks = sort_keys(keys, tmp, counts, m, nbits)
    return merge(ks, m, w, out_idx, out_val, pos)


@nb.njit(cache=True, nogil=True)
def grow(out_idx, out_val, pos, need, cap):
    """Room for ``need`` more φ entries after the first ``pos`` of (out_idx int32, out_val
    float64), whose capacity is ``cap``: the same arrays when they fit, else copies of the
    first ``pos`` entries in arrays of the capacity doubled until they do. Returns
    (out_idx, out_val, cap)."""
    if pos + need <= cap:
        return out_idx, out_val, cap
    while pos + need > cap:
        cap *= 2
    ni = np.empty(cap, np.int32)
    nv = np.empty(cap, np.float64)
    ni[:pos] = out_idx[:pos]
    nv[:pos] = out_val[:pos]
    return ni, nv, cap
