"""Batch kernels of the dependency task (numba): decode a batch, build its records, score one
structure, and the two reference score tables the tests check the cached arc sums against.

Loss: Δ(y_i, y) = Σ_d [y_d ≠ y_{i,d}] + 0.5·[y_d = y_{i,d}, l_d ≠ l_{i,d}]: 1 per wrong head,
0.5 per right head with a wrong label (a word costs at most 1, as in the unlabelled parser,
so C keeps its scale; a head error costs twice a label error). It factors over labelled arcs, so
loss-augmented inference (DEMI-DCD Eq. 5) adds Δ(h, d, l) to s(h, d, l) before the max over
labels and decodes the same way (:func:`parse_kernel`). A record (:func:`records_kernel`) holds
φ = Φ(x, y_i, l_i) − Φ(x, y, l) (only the words with a wrong head or label contribute:
+F(y_{i,d}, d) − F(y_d, d) for a wrong head, +G(y_{i,d}, d)⊗l_{i,d} − G(y_d, d)⊗l_d) with
sorted unique indices (the shared φ sort and merge of :mod:`demidcd.tasks.phi`), Δ, w·φ and an
FNV-1a hash of (y, l).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ..phi import FNV_OFFSET, FNV_PRIME, grow, key_bits, merge, sort_keys
from .decoding import CLE, EISNER, decode_tree, max_len, workspace
from .features import (
    MAX_LABEL_KEYS,
    arc_features,
    arc_loss,
    arc_score,
    label_keys,
    max_features,
    score_arcs,
)


@nb.njit(cache=True, nogil=True)
def _scratch(maxN, n_pos):
    """Scratch of the feature kernels for sentences of up to maxN positions: arc feature ids
    (:func:`max_features`), label-template bases and the between-POS stamps (all unset)."""
    return (np.empty(max_features(maxN), np.int64), np.empty(MAX_LABEL_KEYS, np.int64),
            np.full(max(n_pos, 1), -1, np.int64))


@nb.njit(cache=True, nogil=True)
def parse_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, gold, glab,
                 examples, augment, decoder, fhead, flab):
    """Heads and labels of every example, flat: example e's positions 0..n at
    out_ptr[e]:out_ptr[e+1] (ROOT's entries −1; labels −1 when unlabelled, L = 0), and per
    example 1 where Eisner fell back to Chu-Liu-Edmonds (else 0).
    ``augment``: argmax of w·Φ + Δ (Δ added per arc and label, see :func:`arc_loss`).
    ``fhead``, ``flab``: given heads and labels per position (−1 free; empty arrays: none),
    kept by masking the arc scores (:func:`score_arcs`); the caller checks with
    :func:`fixed_heads_check` that some single-root tree keeps them. When no *projective* one
    does (given arcs that cross, or that the root arc must cross), the best projective tree
    Eisner finds uses a masked arc (score ≤ −1e300 against a finite score for any tree of
    unmasked arcs); that sentence is decoded again with Chu-Liu-Edmonds, which finds the best
    non-projective tree keeping them. Scratch is allocated once per call, for the longest
    sentence."""
    n_ex = examples.shape[0]
    out_ptr = np.zeros(n_ex + 1, np.int64)
    for e in range(n_ex):
        i = examples[e]
        out_ptr[e + 1] = out_ptr[e] + tok_ptr[i + 1] - tok_ptr[i]
    out = np.empty(out_ptr[n_ex], np.int32)
    out_lab = np.empty(out_ptr[n_ex], np.int32)
    maxN = max_len(tok_ptr, examples)
    L = lab_arcs.shape[0]
    S = np.empty(maxN * maxN)
    Lab = np.empty(maxN * maxN, np.int32)
    LD = np.empty(maxN * L)
    LH = np.empty(2 * maxN * L)
    acc = np.empty(L)
    fbuf, kbuf, stamp = _scratch(maxN, n_pos)
    wf, wi, wb = workspace(maxN, decoder)
    fixing = fhead.shape[0] > 0
    cf, ci, cb = workspace(maxN if fixing and decoder == EISNER else 0, CLE)
    fell = np.zeros(n_ex, np.int8)
    mark = np.int64(0)
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        mark = score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf,
                          lab_arcs, gold, glab, augment, S, Lab, LD, LH, acc, kbuf, fhead,
                          flab)
        y = out[out_ptr[e]:out_ptr[e + 1]]
        fell[e] = decode_tree(S, N, y, decoder, fhead, a, wf, wi, wb, cf, ci, cb)
        lab = out_lab[out_ptr[e]:out_ptr[e + 1]]
        lab[0] = -1
        for d in range(1, N):
            lab[d] = Lab[y[d] * N + d]
    return out, out_lab, out_ptr, fell


@nb.njit(cache=True, nogil=True)
def _push_arc_keys(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf, keys, m,
                   sign):
    """Append the signed keys 2·f + sign of the arc features F(h, d); returns the new m."""
    c = arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
    for q in range(c):
        keys[m] = 2 * fbuf[q] + sign
        m += 1
    return m


@nb.njit(cache=True, nogil=True)
def _push_label_keys(h, d, lab, a, N, word, pos, cpos, D, L, kbuf, keys, m, sign):
    """Append the signed keys 2·(base(k) + lab) + sign of the label features of (h, d, lab);
    returns the new m."""
    c = label_keys(h, d, a, N, word, pos, cpos, D, L, kbuf)
    for q in range(c):
        keys[m] = 2 * (kbuf[q] + lab) + sign
        m += 1
    return m


@nb.njit(cache=True, nogil=True)
def records_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, gold,
                   glab, examples, heads, labs, hptr, keep_all):
    """Records (i, FNV hash, Δ, w·φ, φ CSR) of the head and label vectors ``heads``, ``labs``
    (flat, as returned by :func:`parse_kernel`), for the examples where Δ > 0 (all of them with
    ``keep_all``). Only words with a wrong head or label contribute to φ:
    +F(g, d) − F(y_d, d) when the head is wrong, +G(g, d)⊗gl − G(y_d, d)⊗l_d (labelled)."""
    n_ex = examples.shape[0]
    L = lab_arcs.shape[0]
    maxN = max_len(tok_ptr, examples)
    fbuf, kbuf, stamp = _scratch(maxN, n_pos)
    mark = np.int64(0)
    nbits = key_bits(D)
    r_ex = np.empty(n_ex, np.int64)
    r_hash = np.empty(n_ex, np.uint64)
    r_delta = np.empty(n_ex, np.float64)
    r_margin = np.empty(n_ex, np.float64)
    r_ptr = np.zeros(n_ex + 1, np.int64)
    kcap = 2 * maxN * (max_features(maxN) + MAX_LABEL_KEYS)
    keys = np.empty(kcap, np.int64)
    tmp = np.empty(kcap, np.int64)
    counts = np.empty(256, np.int64)
    cap = 4096
    out_idx = np.empty(cap, np.int32)
    out_val = np.empty(cap, np.float64)
    pos_ = 0
    nrec = 0
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        y = heads[hptr[e]:hptr[e + 1]]
        yl = labs[hptr[e]:hptr[e + 1]]
        m = 0
        delta = 0.0
        h_ = FNV_OFFSET
        for d in range(1, N):
            h_ = (h_ ^ np.uint64(y[d])) * FNV_PRIME
            if L > 0:
                h_ = (h_ ^ np.uint64(yl[d] + 1)) * FNV_PRIME
            g = gold[a + d]
            p = y[d]
            gl = glab[a + d] if L > 0 else -1
            pl = yl[d] if L > 0 else -1
            loss = arc_loss(p, pl, g, gl)
            if loss == 0.0:
                continue
            delta += loss
            if g != p:
                m = _push_arc_keys(g, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark,
                                   fbuf, keys, m, 1)
                m = _push_arc_keys(p, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp,
                                   mark + 1, fbuf, keys, m, 0)
                mark += 2
            if L > 0:
                if gl >= 0:
                    m = _push_label_keys(g, d, gl, a, N, word, pos, cpos, D, L, kbuf, keys, m, 1)
                m = _push_label_keys(p, d, pl, a, N, word, pos, cpos, D, L, kbuf, keys, m, 0)
        if delta == 0.0 and not keep_all:
            continue
        out_idx, out_val, cap = grow(out_idx, out_val, pos_, m, cap)
        ks = sort_keys(keys, tmp, counts, m, nbits)
        pos_, margin = merge(ks, m, w, out_idx, out_val, pos_)
        r_ex[nrec] = i
        r_hash[nrec] = h_
        r_delta[nrec] = delta
        r_margin[nrec] = margin
        nrec += 1
        r_ptr[nrec] = pos_
    return (r_ex[:nrec].copy(), r_hash[:nrec].copy(), r_delta[:nrec].copy(),
            r_margin[:nrec].copy(), r_ptr[:nrec + 1].copy(), out_idx[:pos_].copy(),
            out_val[:pos_].copy())


@nb.njit(cache=True, nogil=True)
def score_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, i, y, yl):
    """w·Φ(x_i, y) = Σ_d s(y_d, d, l_d) for one head vector y and label vector yl (positions
    0..n, entry 0 ignored; yl unused when unlabelled)."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    L = lab_arcs.shape[0]
    fbuf, kbuf, stamp = _scratch(N, n_pos)
    total = 0.0
    for d in range(1, N):
        c = arc_features(y[d], d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, d, fbuf)
        for q in range(c):
            total += w[fbuf[q]]
        if L > 0:
            c = label_keys(y[d], d, a, N, word, pos, cpos, D, L, kbuf)
            for q in range(c):
                total += w[kbuf[q] + yl[d]]
    return total


@nb.njit(cache=True, nogil=True)
def arc_scores_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, i):
    """The flat N×N matrices max_l s(h, d, l) (−1e300 for impossible arcs) and argmax l of
    example i, through the decomposed path of :func:`score_arcs`."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    L = lab_arcs.shape[0]
    S = np.empty(N * N)
    Lab = np.empty(N * N, np.int32)
    fbuf, kbuf, stamp = _scratch(N, n_pos)
    none = np.zeros(0, np.int32)
    score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, np.int64(0), fbuf,
               lab_arcs, none, none, False, S, Lab, np.empty(N * L), np.empty(2 * N * L),
               np.empty(L), kbuf, none, none)
    return S, Lab


@nb.njit(cache=True, nogil=True)
def label_scores_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, i):
    """The flat N×N×L tensor s(h, d, l) of example i straight from F and G (no caching):
    −inf for impossible arcs and for labels not allowed on the arc."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    L = lab_arcs.shape[0]
    T = np.full(N * N * L, -np.inf)
    fbuf, kbuf, stamp = _scratch(N, n_pos)
    mark = np.int64(0)
    for h in range(N):
        for d in range(1, N):
            if h == d:
                continue
            s = arc_score(w, h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            c = label_keys(h, d, a, N, word, pos, cpos, D, L, kbuf)
            need = 1 if h == 0 else 2
            for lab in range(L):
                if lab_arcs[lab] & need == 0:
                    continue
                v = s
                for q in range(c):
                    v += w[kbuf[q] + lab]
                T[(h * N + d) * L + lab] = v
    return T
