"""First-order chain sequence labelling (POS tagging, chunking, NER) as a :class:`Task`.

Design note. The DEMI-DCD paper's joint feature map Φ(x, y), whose differences
φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) are the records every learner consumes, is here, for a
sentence x of n tokens and tags y_t ∈ {0..K-1} (START = END = K, y_{-1} = START, y_n = END):

    Φ(x, y) =   Σ_{t=0}^{n-1} Σ_{f ∈ O(x_t)} u_{t,f} e_U(f, y_t)                  (U, unigram)
              + Σ_{t=0}^{n}   e_T(y_{t-1}, y_t)                                    (T, transitions)
              + Σ_{t=1}^{n-1} Σ_{g ∈ B(x_t)} b_{t,g} e_B(g, y_{t-1}, y_t)          (B, bigram obs.)

O(x_t) ⊆ {0..F-1} are the observation features of token t with real values u_{t,f}, B(x_t) ⊆
{0..G-1} its bigram observation features (CRF++ ``B01:%x[0,1]``, Wapiti ``B``/``*`` with an
observation) with values b_{t,g}; binary features have value 1 and store no values. w (float64,
dim = F·K + (K+1)² + G·K²) holds the three blocks in this order (G = 0: the layout of every
model without B features):

    U (f, k):              w[f·K + k]
    T (a → b):             w[F·K + a·(K+1) + b]                 (a, b ∈ {0..K}, K = START/END)
    B (g, j → k):          w[F·K + (K+1)² + g·K² + j·K + k]     (j, k ∈ {0..K-1})

so the score of tag k at token t is s_t(k) = Σ_f u_{t,f} w_U[f, k] and the score of the
transition j → k into position t ≥ 1 is M_t[j, k] = T[j, k] + Σ_{g ∈ B(x_t)} b_{t,g} w_B[g, j, k].
Seen pairs (``weights="seen"``, :func:`seen_pairs`): U holds weights only for the (f, k) seen
together in training, as CRFsuite and CRF++ keep them: for feature f the sorted labels
lab[off[f]:off[f+1]] with the weight of (f, lab[j]) at w[j]; any other (f, k) has no weight
(it scores 0 and never enters φ). The U block is padded with unused zeros to a multiple of K,
F' = ⌈pairs / K⌉ rows, and the kernels take F' for F, so T and B sit at F'·K as above; memory
then grows with what was seen, not with F·K (Brown, 453 tags: 161 M dense weights).

A bare CRF++ ``B`` line (no observation) is T itself, not a B feature; B features of a
sentence's first token are ignored (no label precedes it; START → y_0 is T), as in CRF++.

Viterbi is max-plus over s_t and M_t: M_t is built (K² per B feature, into a per-sentence
scratch) only at positions where B features fire, the shared T is read everywhere else, and
the backward pass reads the same stored M_t, so forward and backtrack agree exactly. With many
tags (decoding from PRUNE_FROM_LABELS = 64, loss-augmented inference from 256) the forward max
over predecessors at positions without B features is pruned by upper bounds
(``relax_pruned``): exactly the dense table, at a fraction of its K² cost when emissions
dominate transitions.
Δ(y_i, y) is the Hamming distance (unnormalised). Loss-augmented inference (DEMI-DCD Eq. 5)
adds 1 to every s_t(k) with k ≠ y_{i,t}. A record holds φ with sorted unique indices and no zero
entries (unmerged ±entries radix-sorted and summed: ±1 from the key's sign bit when no feature
has values, the carried values otherwise), Δ, the margin w·φ and an FNV-1a hash of the tag ids
(the structure is the tag sequence whatever the features).

All per-sentence work (emission scoring from sparse features, the M_t, Viterbi, φ construction
and merge) is done by numba kernels that take a whole array of example indices per call and the
encoding as one :class:`Chain`. Absent values and absent B features are empty arrays, tested
once per feature (values) and once per sentence (B: without them :func:`_forward` and
:func:`_backtrack` run as before B features existed); records of binary features without B are
bit-identical to those of the kernels before values and B features (tests/test_chain_features.py
checks unit values and ignored B features against them).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, NamedTuple

import numba as nb
import numpy as np

from ..options import DataOptions, OutputOptions
from . import TaskSpec
from .base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from .features import EncodedSequences
from .phi import FNV_OFFSET, FNV_PRIME, key_bits, phi_merge
from .pruned_viterbi import (
    PRUNE_FROM_LABELS,
    PRUNE_FROM_LABELS_AUGMENTED,
    column_max,
    relax_pruned,
)


class Chain(NamedTuple):
    """The encoded sentences as the kernels take them (one argument instead of seven).

    An empty ``feat_val`` / ``bfeat_val`` means every value is 1 (binary features, the fast
    path); an empty ``bfeat_ptr`` means no B features (the shared transitions everywhere); an
    empty ``u_off`` means the dense U block (w[f·K + k]), otherwise the seen-pairs U block
    (:func:`seen_pairs`): the weight of (f, u_lab[j]) is w[j], u_off[f] ≤ j < u_off[f+1].
    """

    sent_ptr: np.ndarray  # int64[n_sent+1]
    feat_ptr: np.ndarray  # int64[n_tok+1]
    feat_idx: np.ndarray  # int32[nnz]
    feat_val: np.ndarray  # float64[nnz], or float64[0]: all 1
    bfeat_ptr: np.ndarray  # int64[n_tok+1], or int64[0]: no B features
    bfeat_idx: np.ndarray  # int32[bnnz]
    bfeat_val: np.ndarray  # float64[bnnz], or float64[0]: all 1
    u_off: np.ndarray = np.zeros(0, np.int64)  # int64[F+1]: the seen-pairs U block, or empty
    u_lab: np.ndarray = np.zeros(0, np.int32)  # int32[pairs]: labels of f at u_off[f]:u_off[f+1]


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def transitions(w, F, K):
    """(tr, trT, start, end) copied out of w as contiguous blocks:

    tr[a·K + b] = trT[b·K + a] = w(a → b), start[b] = w(START → b), end[a] = w(a → END).
    """
    base = F * K
    K1 = K + 1
    tr = np.empty(K * K, w.dtype)
    trT = np.empty(K * K, w.dtype)
    start = np.empty(K, w.dtype)
    end = np.empty(K, w.dtype)
    for a in range(K):
        for b in range(K):
            v = w[base + a * K1 + b]
            tr[a * K + b] = v
            trT[b * K + a] = v
        end[a] = w[base + a * K1 + K]
        start[a] = w[base + K * K1 + a]
    return tr, trT, start, end


@nb.njit(cache=True, nogil=True, fastmath=True)
def emissions(w, K, feat_ptr, feat_idx, feat_val, a, n, em):
    """em[t·K + k] = Σ_{q} v_q · w[f_q·K + k] over the features f_q = feat_idx[q] of token a+t,
    t < n (contiguous rows of w); v_q = feat_val[q], or 1 when ``feat_val`` is empty.

    Rows are taken as slices so that the inner loop over k has provably non-negative indices
    and compiles to packed SIMD loads (no wrap-around handling, no gathers). A value is cast to
    w's dtype first, so float32 w stays float32 arithmetic.
    """
    valued = feat_val.shape[0] > 0
    for t in range(n):
        row = em[t * K:(t + 1) * K]
        for k in range(K):
            row[k] = 0.0
        for q in range(feat_ptr[a + t], feat_ptr[a + t + 1]):
            base = np.int64(feat_idx[q]) * K
            wr = w[base:base + K]
            if valued:
                v = w.dtype.type(feat_val[q])
                for k in range(K):
                    row[k] += v * wr[k]
            else:
                for k in range(K):
                    row[k] += wr[k]


@nb.njit(cache=True, nogil=True, fastmath=True)
def _emissions_seen(w, K, X, a, n, em):
    """:func:`emissions` over the seen-pairs U block of X: em[t·K + u_lab[j]] += v_q · w[j]
    for the entries j of the label list of each feature f_q of token a+t (labels not in the
    list get nothing from f_q); costs the list's length per feature instead of K."""
    valued = X.feat_val.shape[0] > 0
    off = X.u_off
    lab = X.u_lab
    for t in range(n):
        row = em[t * K:(t + 1) * K]
        for k in range(K):
            row[k] = 0.0
        for q in range(X.feat_ptr[a + t], X.feat_ptr[a + t + 1]):
            f = X.feat_idx[q]
            if valued:
                v = w.dtype.type(X.feat_val[q])
                for j in range(off[f], off[f + 1]):
                    row[lab[j]] += v * w[j]
            else:
                for j in range(off[f], off[f + 1]):
                    row[lab[j]] += w[j]


@nb.njit(cache=True, nogil=True)
def _token_emissions(w, K, X, a, n, em):
    """The emissions of tokens a..a+n-1 of X in either U layout (dense or seen pairs)."""
    if X.u_off.shape[0] > 0:
        _emissions_seen(w, K, X, a, n, em)
    else:
        emissions(w, K, X.feat_ptr, X.feat_idx, X.feat_val, a, n, em)


@nb.njit(cache=True, nogil=True, inline="always")
def _pair_index(off, lab, f, k):
    """The weight index of the seen pair (f, k): j with lab[j] = k in off[f] ≤ j < off[f+1]
    (binary search in f's sorted labels), or −1 when (f, k) has no weight."""
    lo = off[f]
    hi = off[f + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if lab[mid] < k:
            lo = mid + 1
        else:
            hi = mid
    if lo < off[f + 1] and lab[lo] == k:
        return lo
    return -1


@nb.njit(cache=True, nogil=True)
def _augment(K, gold, a, n, em, scale):
    """Hamming loss augmentation: em[t·K + k] += scale for every k ≠ gold tag (gold entry
    exact); scale 1 is Eq. 5, −1 the loss-diminished argmax of the ramp loss."""
    for t in range(n):
        row = em[t * K:(t + 1) * K]
        g = gold[a + t]
        keep = row[g]
        for k in range(K):
            row[k] += scale
        row[g] = keep


@nb.njit(cache=True, nogil=True, fastmath=True)
def b_transitions(w, K, bbase, X, a, n, tr, trb, slots):
    """The transition matrices of the positions t = 1..n-1 of tokens a..a+n-1 where B features
    fire: trb[s·K² + j·K + k] = tr[j·K + k] + Σ_{q} v_q · w[bbase + g_q·K² + j·K + k] over the
    B features g_q = bfeat_idx[q] of token a+t (v_q = bfeat_val[q], or 1), with slots[t] = s
    (s = 0, 1, … in order); slots[t] = −1 where none fires (the shared tr), and slots[0] = −1.

    Only firing positions cost anything (K² per feature); the forward and backward passes read
    the stored matrices, so both see exactly the same scores.
    """
    KK = K * K
    bfeat_ptr = X.bfeat_ptr
    bfeat_idx = X.bfeat_idx
    bfeat_val = X.bfeat_val
    valued = bfeat_val.shape[0] > 0
    slots[0] = -1
    s = 0
    for t in range(1, n):
        q0 = bfeat_ptr[a + t]
        q1 = bfeat_ptr[a + t + 1]
        if q1 == q0:
            slots[t] = -1
            continue
        mat = trb[s * KK:(s + 1) * KK]
        for j in range(KK):
            mat[j] = tr[j]
        for q in range(q0, q1):
            base = bbase + np.int64(bfeat_idx[q]) * KK
            wr = w[base:base + KK]
            if valued:
                v = w.dtype.type(bfeat_val[q])
                for j in range(KK):
                    mat[j] += v * wr[j]
            else:
                for j in range(KK):
                    mat[j] += wr[j]
        slots[t] = s
        s += 1
    return s


@nb.njit(cache=True, nogil=True, fastmath=True, inline="always")
def _relax(prow, crow, K, tr, scratch):
    """crow[b] += max_a (prow[a] + tr[a·K + b]): one max-plus step of the forward pass.

    K-major: for each predecessor a, an element-wise max over the contiguous row tr[a·K:(a+1)·K]
    (vectorises; a reduction over a for each b does not). The running max alternates between
    the two halves of ``scratch`` (2K long): written in place, ``m[b] = v if v > m[b] else m[b]``
    compiles to a masked store (vmaskmovpd), which is microcoded on AMD Zen; a store to the
    other buffer is a plain vmaxpd + store, and made the forward pass 2.2x faster (EWT XPOS,
    K = 49). Inlined by numba into each caller.
    """
    src = scratch[0:K]
    dst = scratch[K:2 * K]
    pa = prow[0]
    r = tr[0:K]
    for b in range(K):
        src[b] = pa + r[b]
    for a in range(1, K):
        pa = prow[a]
        r = tr[a * K:(a + 1) * K]
        for b in range(K):
            v = pa + r[b]
            o = src[b]
            dst[b] = v if v > o else o
        src, dst = dst, src
    for b in range(K):
        crow[b] += src[b]


@nb.njit(cache=True, nogil=True, fastmath=True)
def _forward(em, n, K, tr, start, scratch):
    """In place: em[t·K + b] ← em[t·K + b] + max_a (em[(t−1)·K + a] + w(a → b)) with the shared
    transitions tr (:func:`_relax`)."""
    for k in range(K):
        em[k] += start[k]
    for t in range(1, n):
        _relax(em[(t - 1) * K:t * K], em[t * K:(t + 1) * K], K, tr, scratch)


@nb.njit(cache=True, nogil=True, fastmath=True)
def _forward_b(em, n, K, tr, start, scratch, trb, slots):
    """:func:`_forward` with w_t(a → b) = trb[slots[t]·K² + a·K + b] where slots[t] ≥ 0 (B
    features fire at t) and the shared tr elsewhere.

    A function of its own (as :func:`_backtrack_b`): the same loop with a per-position choice
    of matrix made the forward pass without B features 8-9% slower at K = 49 (float64, 2,000
    synthetic sentences of 25 tokens, min of 30 interleaved runs); apart, it is as fast as
    before B features existed.
    """
    for k in range(K):
        em[k] += start[k]
    KK = K * K
    for t in range(1, n):
        prow = em[(t - 1) * K:t * K]
        crow = em[t * K:(t + 1) * K]
        s = slots[t]
        if s < 0:
            _relax(prow, crow, K, tr, scratch)
        else:
            _relax(prow, crow, K, trb[s * KK:(s + 1) * KK], scratch)



@nb.njit(cache=True, nogil=True)
def _forward_pruned(em, n, K, tr, start, scratch, trb, slots, tmax, order):
    """:func:`_forward` (``slots`` empty) or :func:`_forward_b` (``slots`` as there) with the
    shared transitions relaxed by ``relax_pruned``; the same table, value for value.
    Positions with B features keep the dense :func:`_relax` (their matrix cost K² to build,
    and its column maxima would cost as much again). ``scratch``: 4K of em's dtype,
    ``order``: 2K int32, tmax = ``column_max`` of tr."""
    for k in range(K):
        em[k] += start[k]
    KK = K * K
    has_b = slots.shape[0] > 0
    hv = scratch[2 * K:3 * K]
    sv = scratch[3 * K:4 * K]
    acc = scratch[0:2 * K]  # free: the dense relax uses it only at positions with B features
    hi = order[0:K]
    si = order[K:2 * K]
    for t in range(1, n):
        prow = em[(t - 1) * K:t * K]
        crow = em[t * K:(t + 1) * K]
        s = slots[t] if has_b else -1
        if s < 0:
            relax_pruned(prow, crow, K, tr, tmax, hv, hi, sv, si, acc)
        else:
            _relax(prow, crow, K, trb[s * KK:(s + 1) * KK], scratch)


@nb.njit(cache=True, nogil=True, inline="always")
def _best_predecessor(x, xo, K, tab, off, step):
    """(argmax_a, max_a) of x[xo + a] + tab[off + a·step] over a < K (first index wins)."""
    m = x[xo] + tab[off]
    arg = 0
    for a in range(1, K):
        v = x[xo + a] + tab[off + a * step]
        if v > m:
            m = v
            arg = a
    return arg, m


@nb.njit(cache=True, nogil=True)
def _backtrack(em, n, K, trT, end, y):
    """Recover the argmax path from the forward table (first index wins ties); return its score.

    Recomputes each argmax over the predecessor a with the same additions as the forward pass,
    so no back-pointer table is needed (w(a → b) from row b of trT).
    """
    y[n - 1], best = _best_predecessor(em, (n - 1) * K, K, end, 0, 1)
    for t in range(n - 1, 0, -1):
        y[t - 1] = _best_predecessor(em, (t - 1) * K, K, trT, y[t] * K, 1)[0]
    return best


@nb.njit(cache=True, nogil=True)
def _backtrack_b(em, n, K, trT, end, y, trb, slots):
    """:func:`_backtrack` after :func:`_forward_b`: at a position with B features w(a → b)
    comes from column b of its matrix in trb, the same stored values the forward pass read."""
    y[n - 1], best = _best_predecessor(em, (n - 1) * K, K, end, 0, 1)
    for t in range(n - 1, 0, -1):
        s = slots[t]
        if s < 0:
            y[t - 1] = _best_predecessor(em, (t - 1) * K, K, trT, y[t] * K, 1)[0]
        else:
            y[t - 1] = _best_predecessor(em, (t - 1) * K, K, trb, s * K * K + y[t], K)[0]
    return best


@nb.njit(cache=True, nogil=True)
def _chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y, gold,
                   augment, tmax, order):
    """argmax_y w·Φ(x, y) + augment·Δ(gold, y) for tokens a..a+n-1 of the :class:`Chain` X,
    written to y[:n]; returns its score (``augment`` is the loss scale: 0 plain Viterbi,
    1 loss-augmented, −1 loss-diminished). ``trb`` (w's dtype, K² per position with B
    features) and ``slots`` (int32, ≥ n) are scratch for :func:`b_transitions`. ``tmax``
    (``column_max`` of tr) not empty: the pruned forward pass (:func:`_forward_pruned`,
    ``scratch`` 4K, ``order`` 2K), with exactly the dense pass's result; empty: the dense one
    (``scratch`` 2K)."""
    if n == 0:
        return w[F * K + K * (K + 1) + K]
    _token_emissions(w, K, X, a, n, em)
    if augment != 0:
        _augment(K, gold, a, n, em, augment)
    pruned = tmax.shape[0] > 0
    if X.bfeat_ptr.shape[0] == 0:
        if pruned:
            _forward_pruned(em, n, K, tr, start, scratch, trb, slots[:0], tmax, order)
        else:
            _forward(em, n, K, tr, start, scratch)
        return _backtrack(em, n, K, trT, end, y)
    b_transitions(w, K, F * K + (K + 1) * (K + 1), X, a, n, tr, trb, slots)
    if pruned:
        _forward_pruned(em, n, K, tr, start, scratch, trb, slots, tmax, order)
    else:
        _forward_b(em, n, K, tr, start, scratch, trb, slots)
    return _backtrack_b(em, n, K, trT, end, y, trb, slots)


@nb.njit(cache=True, nogil=True)
def _viterbi(w, F, K, feat_ptr, feat_idx, a, n, tr, trT, start, end, em, scratch, y, gold,
             augment):
    """:func:`_chain_viterbi` for binary features given as (feat_ptr, feat_idx), no B
    features, dense forward pass (benchmarks/foundation.py times this one)."""
    X = Chain(feat_ptr[:0], feat_ptr, feat_idx, em[:0], feat_ptr[:0], feat_idx[:0], em[:0],
              feat_ptr[:0], feat_idx[:0])
    return _chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, tr[:0], y[:0],
                          y, gold, augment, tr[:0], y[:0])


@nb.njit(cache=True, nogil=True)
def _pruning(tr, K, prune_from):
    """(tmax, order) for :func:`_chain_viterbi`: the pruned pass when K ≥ prune_from (≥ 1),
    else empty arrays (the dense pass)."""
    if K < max(prune_from, 1):
        return tr[:0], np.empty(0, np.int32)
    tmax = np.empty(K, tr.dtype)
    column_max(tr, K, tmax)
    return tmax, np.empty(2 * K, np.int32)


@nb.njit(cache=True, nogil=True)
def _hash_tags(y, n):
    """64-bit FNV-1a over the tag ids (one step per tag)."""
    h = FNV_OFFSET
    for t in range(n):
        h = (h ^ np.uint64(y[t])) * FNV_PRIME
    return h


@nb.njit(cache=True, nogil=True)
def _phi_keys(F, K, X, gold, a, n, y, keys, vals):
    """Unmerged entries of Φ(x, gold) − Φ(x, y) as keys 2·idx + (1 for the gold side, 0 for
    y's side); when ``vals`` is not empty, vals[j] is entry j's signed value (+v / −v with v the
    feature's value, ±1 for transitions), otherwise every entry is ±1 by its key's low bit.

    Returns (number of keys, Hamming distance).
    """
    valued = vals.shape[0] > 0
    uval = X.feat_val.shape[0] > 0
    feat_ptr = X.feat_ptr
    feat_idx = X.feat_idx
    seen = X.u_off.shape[0] > 0
    m = 0
    ham = 0
    for t in range(n):
        g = gold[a + t]
        p = y[t]
        if g != p:
            ham += 1
            for q in range(feat_ptr[a + t], feat_ptr[a + t + 1]):
                if seen:  # a pair without a weight has no entry
                    jg = _pair_index(X.u_off, X.u_lab, feat_idx[q], g)
                    jp = _pair_index(X.u_off, X.u_lab, feat_idx[q], p)
                else:
                    base = np.int64(feat_idx[q]) * K
                    jg = base + g
                    jp = base + p
                v = (X.feat_val[q] if uval else 1.0) if valued else 1.0
                if jg >= 0:
                    keys[m] = 2 * jg + 1
                    if valued:
                        vals[m] = v
                    m += 1
                if jp >= 0:
                    keys[m] = 2 * jp
                    if valued:
                        vals[m] = -v
                    m += 1
    tbase = F * K
    K1 = K + 1
    bbase = tbase + K1 * K1
    KK = K * K
    has_b = X.bfeat_ptr.shape[0] > 0
    bval = X.bfeat_val.shape[0] > 0
    for t in range(n + 1):
        gp = K if t == 0 else gold[a + t - 1]
        gc = K if t == n else gold[a + t]
        pp = K if t == 0 else y[t - 1]
        pc = K if t == n else y[t]
        if gp != pp or gc != pc:
            keys[m] = 2 * (tbase + gp * K1 + gc) + 1
            keys[m + 1] = 2 * (tbase + pp * K1 + pc)
            if valued:
                vals[m] = 1.0
                vals[m + 1] = -1.0
            m += 2
            if has_b and 0 < t < n:  # B features of token t score (y_{t-1} → y_t)
                for q in range(X.bfeat_ptr[a + t], X.bfeat_ptr[a + t + 1]):
                    base = bbase + np.int64(X.bfeat_idx[q]) * KK
                    keys[m] = 2 * (base + gp * K + gc) + 1
                    keys[m + 1] = 2 * (base + pp * K + pc)
                    if valued:
                        v = X.bfeat_val[q] if bval else 1.0
                        vals[m] = v
                        vals[m + 1] = -v
                    m += 2
    return m, ham



@nb.njit(cache=True, nogil=True)
def max_sizes(sent_ptr, feat_ptr, examples):
    """(longest sentence, largest unmerged φ) over the given examples."""
    max_n = 0
    max_keys = 0
    for e in range(examples.shape[0]):
        i = examples[e]
        a = sent_ptr[i]
        b = sent_ptr[i + 1]
        n = b - a
        if n > max_n:
            max_n = n
        mk = 2 * (feat_ptr[b] - feat_ptr[a]) + 2 * (n + 1)
        if mk > max_keys:
            max_keys = mk
    return max_n, max_keys


@nb.njit(cache=True, nogil=True)
def _valued(X):
    """Whether φ needs real values (some feature of X carries a value array)."""
    return X.feat_val.shape[0] > 0 or X.bfeat_val.shape[0] > 0


@nb.njit(cache=True, nogil=True)
def b_sizes(sent_ptr, bfeat_ptr, examples):
    """(most positions with B features, most B entries) in one of the given examples, counting
    tokens 1..n-1 of each sentence (B features of a first token are ignored); (0, 0) without
    B features."""
    max_pos = 0
    max_nnz = 0
    if bfeat_ptr.shape[0] == 0:
        return max_pos, max_nnz
    for e in range(examples.shape[0]):
        i = examples[e]
        a = sent_ptr[i]
        b = sent_ptr[i + 1]
        if b - a < 2:
            continue
        npos = 0
        for t in range(a + 1, b):
            if bfeat_ptr[t + 1] > bfeat_ptr[t]:
                npos += 1
        max_pos = max(max_pos, npos)
        max_nnz = max(max_nnz, bfeat_ptr[b] - bfeat_ptr[a + 1])
    return max_pos, max_nnz


@nb.njit(cache=True, nogil=True)
def _workspace(w, K, X, examples):
    """Scratch for :func:`_chain_viterbi` and φ over ``examples``: (max_keys, em, scratch, y,
    trb, slots), max_keys bounding the unmerged φ entries of one example."""
    max_n, max_keys = max_sizes(X.sent_ptr, X.feat_ptr, examples)
    max_bpos, max_bnnz = b_sizes(X.sent_ptr, X.bfeat_ptr, examples)
    em = np.empty(max(max_n, 1) * K, w.dtype)
    scratch = np.empty(4 * K, w.dtype)  # 2K dense relax, 2K more for the pruned one
    y = np.empty(max(max_n, 1), np.int32)
    trb = np.empty(max_bpos * K * K, w.dtype)
    slots = np.empty(max(max_n, 1), np.int32)
    return max_keys + 2 * max_bnnz, em, scratch, y, trb, slots


@nb.njit(cache=True, nogil=True)
def loss_augmented_kernel(w, F, K, G, X, gold, examples, augment=1.0, prune_from=-1):
    """Loss-augmented Viterbi + record construction for every example in ``examples`` of the
    :class:`Chain` X (``augment`` scales Δ in the argmax: 0.0 plain Viterbi, records for the
    examples it gets wrong; −1.0 the loss-diminished argmax). From ``prune_from`` tags the
    forward pass is the pruned one (``relax_pruned``; same argmax and records); −1:
    PRUNE_FROM_LABELS for augment 0, else PRUNE_FROM_LABELS_AUGMENTED.

    Returns (ex, hash as uint64, delta, margin, ptr, idx, val) trimmed to the records found;
    the φ arrays grow by doubling (at most O(log nnz) reallocations per call).
    """
    n_ex = examples.shape[0]
    max_keys, em, scratch, y, trb, slots = _workspace(w, K, X, examples)
    tr, trT, start, end = transitions(w, F, K)
    prune = prune_from
    if prune < 0:
        prune = PRUNE_FROM_LABELS if augment == 0 else PRUNE_FROM_LABELS_AUGMENTED
    tmax, order = _pruning(tr, K, prune)
    keys = np.empty(max(max_keys, 1), np.int64)
    tmp = np.empty(max(max_keys, 1), np.int64)
    vals = np.empty(max(max_keys, 1) if _valued(X) else 0, np.float64)
    vtmp = np.empty(vals.shape[0], np.float64)
    counts = np.empty(256, np.int64)
    nbits = key_bits(F * K + (K + 1) * (K + 1) + G * K * K)
    r_ex = np.empty(n_ex, np.int64)
    r_hash = np.empty(n_ex, np.uint64)
    r_delta = np.empty(n_ex, np.float64)
    r_margin = np.empty(n_ex, np.float64)
    r_ptr = np.zeros(n_ex + 1, np.int64)
    cap = max(1024, 2 * max_keys)
    out_idx = np.empty(cap, np.int32)
    out_val = np.empty(cap, np.float64)
    nrec = 0
    pos = 0
    for e in range(n_ex):
        i = examples[e]
        a = X.sent_ptr[i]
        n = X.sent_ptr[i + 1] - a
        if n == 0:
            continue
        _chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y, gold,
                       augment, tmax, order)
        m, ham = _phi_keys(F, K, X, gold, a, n, y, keys, vals)
        if ham == 0:
            continue
        if pos + m > cap:
            while pos + m > cap:
                cap *= 2
            ni = np.empty(cap, np.int32)
            nv = np.empty(cap, np.float64)
            ni[:pos] = out_idx[:pos]
            nv[:pos] = out_val[:pos]
            out_idx = ni
            out_val = nv
        pos, margin = phi_merge(keys, vals, tmp, vtmp, counts, m, nbits, w, out_idx, out_val,
                                 pos)
        r_ex[nrec] = i
        r_hash[nrec] = _hash_tags(y, n)
        r_delta[nrec] = ham
        r_margin[nrec] = margin
        nrec += 1
        r_ptr[nrec] = pos
    return (r_ex[:nrec].copy(), r_hash[:nrec].copy(), r_delta[:nrec].copy(),
            r_margin[:nrec].copy(), r_ptr[:nrec + 1].copy(), out_idx[:pos].copy(),
            out_val[:pos].copy())


@nb.njit(cache=True, nogil=True)
def decode_kernel(w, F, K, X, examples, prune_from=PRUNE_FROM_LABELS):
    """Viterbi for every example: (flat int32 tags, int64 ptr) with ptr[e]..ptr[e+1] per example
    (the pruned forward pass from ``prune_from`` tags, same tags)."""
    n_ex = examples.shape[0]
    sent_ptr = X.sent_ptr
    ptr = np.zeros(n_ex + 1, np.int64)
    for e in range(n_ex):
        i = examples[e]
        ptr[e + 1] = ptr[e] + sent_ptr[i + 1] - sent_ptr[i]
    _, em, scratch, _, trb, slots = _workspace(w, K, X, examples)
    tr, trT, start, end = transitions(w, F, K)
    tmax, order = _pruning(tr, K, prune_from)
    tags = np.empty(ptr[n_ex], np.int32)
    dummy = np.empty(0, np.int32)
    for e in range(n_ex):
        i = examples[e]
        a = sent_ptr[i]
        n = sent_ptr[i + 1] - a
        if n > 0:
            _chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots,
                           tags[ptr[e]:ptr[e + 1]], dummy, 0.0, tmax, order)
    return tags, ptr


@nb.njit(cache=True, nogil=True)
def chain_scores_kernel(w, F, K, X, examples):
    """The scores of every example as the kernels of :mod:`.chain_decoding` take them:
    (em, ptr, tr, start, end, pos_tr, pos_index) with

        em[(ptr[e] + t)·K + k]   s_t(k) of token t of example e (:func:`emissions`)
        tr, start, end           the shared transitions (:func:`transitions`)
        pos_tr[m, K²]            M_t of every position t ≥ 1 where B features fire
                                 (:func:`b_transitions`), pos_index[ptr[e] + t] = its row, −1
                                 elsewhere; both empty without B features

    computed by the functions Viterbi uses, so a decoder reading them scores exactly as
    :func:`_chain_viterbi` does."""
    n_ex = examples.shape[0]
    sent_ptr = X.sent_ptr
    ptr = np.zeros(n_ex + 1, np.int64)
    for e in range(n_ex):
        i = examples[e]
        ptr[e + 1] = ptr[e] + sent_ptr[i + 1] - sent_ptr[i]
    n_tok = ptr[n_ex]
    tr, _, start, end = transitions(w, F, K)
    KK = K * K
    has_b = X.bfeat_ptr.shape[0] > 0
    m = 0
    if has_b:
        for e in range(n_ex):
            a = sent_ptr[examples[e]]
            for t in range(a + 1, a + ptr[e + 1] - ptr[e]):
                if X.bfeat_ptr[t + 1] > X.bfeat_ptr[t]:
                    m += 1
    em = np.empty(n_tok * K, w.dtype)
    flat = np.empty(m * KK, w.dtype)
    pos_index = np.full(n_tok if has_b else 0, -1, np.int32)
    bbase = F * K + (K + 1) * (K + 1)
    s0 = 0
    for e in range(n_ex):
        a = sent_ptr[examples[e]]
        n = ptr[e + 1] - ptr[e]
        if n == 0:
            continue
        _token_emissions(w, K, X, a, n, em[ptr[e] * K:ptr[e + 1] * K])
        if has_b:
            slots = pos_index[ptr[e]:ptr[e + 1]]
            s = b_transitions(w, K, bbase, X, a, n, tr, flat[s0 * KK:], slots)
            for t in range(n):
                if slots[t] >= 0:
                    slots[t] += s0
            s0 += s
    return em, ptr, tr, start, end, flat.reshape((m, KK)), pos_index


@nb.njit(cache=True, nogil=True)
def phi_kernel(w, F, K, G, X, gold, i, y):
    """(idx, val, Δ, w·φ) of φ(y, y_i, x_i) for one tag sequence y (w may be empty: margin 0)."""
    one = np.array([i], np.int64)
    _, mk = max_sizes(X.sent_ptr, X.feat_ptr, one)
    mk += 2 * b_sizes(X.sent_ptr, X.bfeat_ptr, one)[1]
    keys = np.empty(mk, np.int64)
    tmp = np.empty(mk, np.int64)
    vals = np.empty(mk if _valued(X) else 0, np.float64)
    vtmp = np.empty(vals.shape[0], np.float64)
    counts = np.empty(256, np.int64)
    a = X.sent_ptr[i]
    n = X.sent_ptr[i + 1] - a
    m, ham = _phi_keys(F, K, X, gold, a, n, y, keys, vals)
    idx = np.empty(m, np.int32)
    val = np.empty(m, np.float64)
    pos, margin = phi_merge(keys, vals, tmp, vtmp, counts, m,
                             key_bits(F * K + (K + 1) * (K + 1) + G * K * K), w, idx, val, 0)
    return idx[:pos].copy(), val[:pos].copy(), ham, margin


@nb.njit(cache=True, nogil=True)
def _seen_pairs_kernel(feat_ptr, feat_idx, Y, F, K):
    """(off, lab) of the (feature, label) pairs that occur on some token (see
    :func:`seen_pairs`): marked in a bitmap of F·K bits, then listed row by row."""
    bits = np.zeros((F * K + 7) // 8, np.uint8)
    for t in range(Y.shape[0]):
        k = Y[t]
        for q in range(feat_ptr[t], feat_ptr[t + 1]):
            i = np.int64(feat_idx[q]) * K + k
            bits[i >> 3] |= np.uint8(1 << (i & 7))
    off = np.zeros(F + 1, np.int64)
    for f in range(F):
        c = 0
        for k in range(K):
            i = np.int64(f) * K + k
            if bits[i >> 3] & (1 << (i & 7)):
                c += 1
        off[f + 1] = off[f] + c
    lab = np.empty(off[F], np.int32)
    j = 0
    for f in range(F):
        for k in range(K):
            i = np.int64(f) * K + k
            if bits[i >> 3] & (1 << (i & 7)):
                lab[j] = k
                j += 1
    return off, lab


def seen_pairs(X: EncodedSequences, Y: np.ndarray, n_obs: int, n_tags: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """The (observation feature, label) pairs seen together on a token of the training data X
    with gold tags Y, as CRFsuite and CRF++ keep them: (off int64[F+1], lab int32[pairs]),
    feature f's labels sorted in lab[off[f]:off[f+1]] (``pairs`` of :class:`SequenceTask`)."""
    Y = np.ascontiguousarray(Y, np.int32)
    if Y.size and Y.min() < 0:
        raise ValueError("gold tags include unknown tags (-1): cannot list seen pairs")
    return _seen_pairs_kernel(np.ascontiguousarray(X.feat_ptr, np.int64),
                              np.ascontiguousarray(X.feat_idx, np.int32), Y, int(n_obs),
                              int(n_tags))


def check_pairs(pairs: tuple | None, F: int, K: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``pairs`` as (int64 off, int32 lab) checked: off[0] = 0, non-decreasing, F + 1 long and
    ending at len(lab); labels in [0, K) and increasing within each feature's list."""
    if pairs is None:
        return None
    off = np.ascontiguousarray(pairs[0], np.int64)
    lab = np.ascontiguousarray(pairs[1], np.int32)
    if off.shape != (F + 1,) or off[0] != 0 or off[-1] != lab.shape[0] \
            or np.any(np.diff(off) < 0):
        raise ValueError(f"pairs: off must have F + 1 = {F + 1} non-decreasing entries from 0 "
                         "to len(lab)")
    if lab.size and (lab.min() < 0 or lab.max() >= K):
        raise ValueError(f"pairs: labels must be in [0, {K})")
    up = np.ones(lab.shape[0], np.bool_)
    up[off[1:-1][off[1:-1] < lab.shape[0]]] = False  # each list's first entry starts afresh
    if lab.size > 1 and np.any((np.diff(lab) <= 0) & up[1:]):
        raise ValueError("pairs: each feature's labels must be sorted and unique")
    return off, lab


# ---------------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------------
_EMPTY = np.zeros(0, np.float64)


class ChainScores(NamedTuple):
    """The scores of a batch of sentences in the layout of :mod:`.chain_decoding`
    (:func:`chain_scores_kernel`)."""

    em: np.ndarray  # float64[n_tok·K]
    sent_ptr: np.ndarray  # int64[n_sent+1], tokens of the batch
    tr: np.ndarray  # float64[K·K]
    start: np.ndarray  # float64[K]
    end: np.ndarray  # float64[K]
    pos_tr: np.ndarray  # float64[m, K·K], m = 0 without B features
    pos_index: np.ndarray  # int32[n_tok] (−1: tr), or int32[0] without B features


def _constraint_arrays(constraints: tuple | None, K: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(allowed K·K, allowed_start K, allowed_end K) as flat bool arrays; empty for None."""
    if constraints is None:
        return np.zeros(0, np.bool_), np.zeros(0, np.bool_), np.zeros(0, np.bool_)
    allowed, first, last = (np.ascontiguousarray(a, np.bool_).reshape(-1) for a in constraints)
    if allowed.shape[0] != K * K or first.shape[0] != K or last.shape[0] != K:
        raise ValueError(f"constraints must be (K*K, K, K) booleans with K = {K}")
    return allowed, first, last


def _or_empty(a: np.ndarray | None, dtype: type) -> np.ndarray:
    """``a``, or an empty array of ``dtype`` (the kernels' "absent") when it is None."""
    return np.zeros(0, dtype) if a is None else a


def _csr(ptr: np.ndarray, idx: np.ndarray | None, n: int,
         name: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ptr, int32 ids) checked: ptr starts at 0, never decreases and ends at len(ids);
    every id is in [0, n)."""
    if idx is None:
        raise ValueError(f"{name}_ptr given without {name}_idx")
    ptr = np.ascontiguousarray(ptr, np.int64)
    idx = np.ascontiguousarray(idx, np.int32)
    if ptr.ndim != 1 or ptr.shape[0] < 1 or ptr[0] != 0 or ptr[-1] != idx.shape[0] \
            or np.any(np.diff(ptr) < 0):
        raise ValueError(f"{name}_ptr is inconsistent with {name}_idx")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"{name}_idx ids must be in [0, {n})")
    return ptr, idx


def _values(val: np.ndarray | None, idx: np.ndarray, name: str) -> np.ndarray | None:
    """``val`` as contiguous finite float64 with one value per entry of ``idx`` (or None)."""
    if val is None:
        return None
    val = np.ascontiguousarray(val, np.float64)
    if val.shape != idx.shape:
        raise ValueError(f"{name} must have one value per feature ({idx.shape[0]}), "
                         f"got shape {val.shape}")
    if not np.all(np.isfinite(val)):
        raise ValueError(f"{name} has non-finite values")
    return val


class SequenceTask(Task):
    """First-order chain labelling over :class:`EncodedSequences` with ``n_tags`` tags.

    ``Y``: int32 gold tag id per token (None for unlabelled data; −1 = a tag unseen in training,
    allowed for evaluation only). ``n_obs``: F, the number of (unigram) observation features;
    ``n_bigram_obs``: G, the number of bigram observation (B) features (X.bfeat_*).
    ``pairs``: None for the dense U block (F·K weights), or (off, lab) of :func:`seen_pairs`:
    weights only for those (feature, label) pairs (``weights="seen"``; module docstring).
    """

    name = "sequence"
    inference_dtype = np.float32  # loss-augmented inference over float32 w̄: 1.29x faster per
    # sentence than float64 on EWT XPOS (emissions and the max-plus forward pass 1.45x: half
    # the bytes, twice the SIMD lanes; building φ is unchanged)

    def __init__(self, X: EncodedSequences, Y: np.ndarray | None, n_tags: int, n_obs: int,
                 n_bigram_obs: int = 0, pairs: tuple[np.ndarray, np.ndarray] | None = None):
        self.sent_ptr = np.ascontiguousarray(X.sent_ptr, np.int64)
        self.K = int(n_tags)
        self.F = int(n_obs)
        self.G = int(n_bigram_obs)
        if self.K < 1 or self.F < 0 or self.G < 0:
            raise ValueError("need n_tags >= 1, n_obs >= 0 and n_bigram_obs >= 0")
        self.feat_ptr, self.feat_idx = _csr(X.feat_ptr, X.feat_idx, self.F, "feat")
        self.pairs = check_pairs(pairs, self.F, self.K)
        # the U block's rows as the kernels address it: F, or ⌈pairs / K⌉ (padded)
        self.u_rows = self.F if self.pairs is None else -(-self.pairs[1].shape[0] // self.K)
        n_tok = self.feat_ptr.shape[0] - 1
        sp = self.sent_ptr
        if sp[0] != 0 or sp[-1] != n_tok or np.any(np.diff(sp) < 0):
            raise ValueError("sent_ptr is inconsistent with feat_ptr")
        self.feat_val = _values(X.feat_val, self.feat_idx, "feat_val")
        # B features: None when the data has none (the kernels then take the shared T alone)
        self.bfeat_ptr = self.bfeat_idx = self.bfeat_val = None
        if X.bfeat_ptr is not None:
            bp, bi = _csr(X.bfeat_ptr, X.bfeat_idx, self.G, "bfeat")
            if bp.shape[0] != n_tok + 1:
                raise ValueError(f"bfeat_ptr must have one entry per token + 1 ({n_tok + 1}), "
                                 f"got {bp.shape[0]}")
            if bi.size:
                self.bfeat_ptr, self.bfeat_idx = bp, bi
                self.bfeat_val = _values(X.bfeat_val, bi, "bfeat_val")
        elif X.bfeat_idx is not None or X.bfeat_val is not None:
            raise ValueError("bfeat_idx / bfeat_val given without bfeat_ptr")
        self.chain = Chain(self.sent_ptr, self.feat_ptr, self.feat_idx,
                           _or_empty(self.feat_val, np.float64),
                           _or_empty(self.bfeat_ptr, np.int64),
                           _or_empty(self.bfeat_idx, np.int32),
                           _or_empty(self.bfeat_val, np.float64),
                           *(self.pairs or (np.zeros(0, np.int64), np.zeros(0, np.int32))))
        if Y is None:
            self.Y = None
        else:
            self.Y = np.ascontiguousarray(Y, np.int32)
            if self.Y.shape != (n_tok,):
                raise ValueError(f"Y must have one tag per token ({n_tok}), got {self.Y.shape}")
            if self.Y.size and (self.Y.min() < -1 or self.Y.max() >= self.K):
                raise ValueError(f"tag ids must be in [0, {self.K}) (or -1 for an unknown tag)")
        # −1 marks a gold tag unseen in training: fine for decode/metric (always wrong), but
        # loss-augmented inference and φ need every gold tag to have weights.
        self._unknown_gold = bool(self.Y is not None and self.Y.size and self.Y.min() < 0)
        if self.dim >= 2**31:
            raise ValueError("weight vector too large for int32 indices (reduce features)")

    # -- sizes --------------------------------------------------------------------------------
    @staticmethod
    def dimension(n_obs: int, n_tags: int, n_bigram_obs: int = 0,
                  n_pairs: int | None = None) -> int:
        """Length of w for F observation features, K tags and G bigram observation features:
        F·K + (K+1)² + G·K², laid out as [emissions U: w[f·K + k] | transitions T incl. START
        and END: w[F·K + a·(K+1) + b] | B: w[F·K + (K+1)² + g·K² + j·K + k]] (the module
        docstring has the maths); G = 0 is the layout of models without B features. With
        ``n_pairs`` (seen pairs) U holds those weights padded to ⌈n_pairs / K⌉·K in place of
        F·K."""
        F, K, G = int(n_obs), int(n_tags), int(n_bigram_obs)
        if n_pairs is not None:
            F = -(-int(n_pairs) // K)
        return F * K + (K + 1) ** 2 + G * K * K

    @property
    def dim(self) -> int:
        """U + (K+1)² + G·K² (U: F·K, or the seen pairs padded to a multiple of K)."""
        return self.dimension(self.u_rows, self.K, self.G)

    @property
    def bigram_base(self) -> int:
        """Offset of the B block in w: U + (K+1)²."""
        return self.u_rows * self.K + (self.K + 1) ** 2

    @property
    def n_examples(self) -> int:
        return int(self.sent_ptr.shape[0] - 1)

    def costs(self) -> np.ndarray:
        """Tokens per sentence (float64)."""
        return np.diff(self.sent_ptr).astype(np.float64)

    # -- helpers ------------------------------------------------------------------------------
    def _w(self, w: np.ndarray, float32_ok: bool = False) -> np.ndarray:
        keep = float32_ok and w.dtype == np.float32
        w = np.ascontiguousarray(w, np.float32 if keep else np.float64)
        if w.shape != (self.dim,):
            raise ValueError(f"w must have shape ({self.dim},), got {w.shape}")
        return w

    def _gold_array(self, training: bool = True) -> np.ndarray:
        if self.Y is None:
            raise ValueError("this data set has no gold tags")
        if training and self._unknown_gold:
            raise ValueError("gold tags include unknown tags (-1): cannot train on this data")
        return self.Y

    @staticmethod
    def _examples(examples: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(examples, np.int64).reshape(-1)

    # -- inference ----------------------------------------------------------------------------
    def loss_augmented(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + Δ(y_i, y) per example; one record per example with Δ > 0."""
        return self._records(w, examples, 1.0)

    def argmax_records(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Records of the plain Viterbi argmax for the examples it gets wrong."""
        return self._records(w, examples, 0.0)

    def loss_scaled(self, w: np.ndarray, examples: np.ndarray, scale: float) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + scale·Δ(y_i, y), one record per example with Δ > 0."""
        return self._records(w, examples, float(scale))

    def weights_read(self, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Blocks of w inference on ``examples`` reads: K emission weights per observation
        feature of each token (repeats allowed), all transitions, and K² weights per B feature
        of each token but a sentence's first."""
        ex = self._examples(examples)
        sp, fp = self.sent_ptr, self.feat_ptr
        parts = [self.feat_idx[fp[sp[i]]:fp[sp[i + 1]]] for i in ex]
        f = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        g = np.zeros(0, np.int32)
        if self.bfeat_ptr is not None:
            bp = self.bfeat_ptr
            bparts = [self.bfeat_idx[bp[sp[i] + 1]:bp[sp[i + 1]]] for i in ex
                      if sp[i + 1] - sp[i] > 1]
            g = np.concatenate(bparts) if bparts else g
        K = self.K
        if self.pairs is None:
            ustarts, ulens = f.astype(np.int64) * K, np.full(f.shape[0], K, np.int64)
        else:
            ustarts = self.pairs[0][f]
            ulens = self.pairs[0][f.astype(np.int64) + 1] - ustarts
        starts = np.concatenate([ustarts, [self.u_rows * K],
                                 self.bigram_base + g.astype(np.int64) * (K * K)])
        lens = np.full(starts.shape[0], K, np.int64)
        lens[:f.shape[0]] = ulens
        lens[f.shape[0]] = (K + 1) ** 2
        lens[f.shape[0] + 1:] = K * K
        return starts, lens

    def _records(self, w: np.ndarray, examples: np.ndarray, augment: float) -> RecordBatch:
        ex, h, delta, margin, ptr, idx, val = loss_augmented_kernel(
            self._w(w, float32_ok=True), self.u_rows, self.K, self.G, self.chain,
            self._gold_array(),
            self._examples(examples), augment)
        return RecordBatch(ex, h.view(np.int64), delta, margin, ptr,
                           idx.astype(INDEX_DTYPE, copy=False), val.astype(VALUE_DTYPE, copy=False))

    def decode(self, w: np.ndarray, examples: np.ndarray) -> list[np.ndarray]:
        """Viterbi argmax_y w·Φ(x_i, y): one int32 array of tag ids per example."""
        tags, ptr = decode_kernel(self._w(w), self.u_rows, self.K, self.chain,
                                  self._examples(examples))
        return [tags[ptr[e]:ptr[e + 1]] for e in range(ptr.shape[0] - 1)]

    def decode_flat(self, w: np.ndarray, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`decode` but returns (flat int32 tags, int64 ptr) without a Python list."""
        return decode_kernel(self._w(w), self.u_rows, self.K, self.chain,
                             self._examples(examples))

    def gold(self, examples: np.ndarray) -> list[np.ndarray]:
        Y = self._gold_array(training=False)
        sp = self.sent_ptr
        return [Y[sp[i]:sp[i + 1]] for i in self._examples(examples)]

    def metric(self, gold: list[Any], predicted: list[Any]) -> dict[str, float]:
        """Token accuracy = (# tokens with predicted tag = gold tag) / (# tokens)."""
        if len(gold) != len(predicted):
            raise ValueError("gold and predicted differ in number of sentences")
        n = 0
        correct = 0
        for g, p in zip(gold, predicted, strict=True):
            g = np.asarray(g)
            p = np.asarray(p)
            if g.shape != p.shape:
                raise ValueError("gold and predicted sentences differ in length")
            n += g.shape[0]
            correct += int(np.count_nonzero(g == p))
        acc = correct / n if n else 0.0
        return {"score": acc, "accuracy": acc, "tokens": float(n)}

    # -- records ------------------------------------------------------------------------------
    def _y(self, i: int, y: Any) -> np.ndarray:
        y = np.ascontiguousarray(y, np.int32).reshape(-1)
        n = int(self.sent_ptr[i + 1] - self.sent_ptr[i])
        if y.shape[0] != n:
            raise ValueError(f"example {i} has {n} tokens, got {y.shape[0]} tags")
        if n and (y.min() < 0 or y.max() >= self.K):
            raise ValueError(f"tag ids must be in [0, {self.K})")
        return y

    def phi_delta(self, i: int, y: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) (sorted unique, no zeros) and Hamming Δ."""
        i = int(i)
        idx, val, ham, _ = phi_kernel(_EMPTY, self.u_rows, self.K, self.G, self.chain,
                                      self._gold_array(), i, self._y(i, y))
        return idx.astype(INDEX_DTYPE, copy=False), val, float(ham)

    def score(self, w: np.ndarray, i: int, y: Any) -> float:
        """w·Φ(x_i, y) (valued emissions, START/inner/END transitions and the B features of
        tokens 1..n-1 on their transitions), computed directly."""
        w = self._w(w)
        i = int(i)
        y = self._y(i, y)
        F, K = self.u_rows, self.K
        a = int(self.sent_ptr[i])
        s = 0.0
        for t, tag in enumerate(y):
            q = slice(self.feat_ptr[a + t], self.feat_ptr[a + t + 1])
            f = self.feat_idx[q].astype(np.int64)
            v = np.ones(f.shape[0]) if self.feat_val is None else self.feat_val[q]
            if self.pairs is None:
                s += float((v * w[f * K + tag]).sum())
            else:  # pairs without a weight score 0
                j = np.array([_pair_index(*self.pairs, fi, tag) for fi in f], np.int64)
                s += float((v[j >= 0] * w[j[j >= 0]]).sum())
        path = [K, *(int(v) for v in y), K]
        for p, c in zip(path[:-1], path[1:], strict=True):
            s += float(w[F * K + p * (K + 1) + c])
        if self.bfeat_ptr is not None:
            for t in range(1, len(y)):
                q = slice(self.bfeat_ptr[a + t], self.bfeat_ptr[a + t + 1])
                g = self.bfeat_idx[q].astype(np.int64)
                v = 1.0 if self.bfeat_val is None else self.bfeat_val[q]
                s += float((v * w[self.bigram_base + g * K * K + y[t - 1] * K + y[t]]).sum())
        return s

    @staticmethod
    def hash_tags(y: np.ndarray) -> int:
        """The record hash of a tag sequence (FNV-1a, as a signed int64)."""
        y = np.ascontiguousarray(y, np.int32).reshape(-1)
        return int(np.array([_hash_tags(y, y.shape[0])], np.uint64).view(np.int64)[0])

    # -- k best, constrained decoding, confidence (the kernels of .chain_decoding) -------------
    def chain_scores(self, w: np.ndarray, examples: np.ndarray) -> ChainScores:
        """The emissions, transitions and B-feature matrices of ``examples`` under w
        (float64), laid out for :mod:`demidcd.tasks.chain_decoding`."""
        return ChainScores(*chain_scores_kernel(self._w(w), self.u_rows, self.K, self.chain,
                                                self._examples(examples)))

    def _scored_batches(self, w: np.ndarray, examples: np.ndarray, fixed: np.ndarray | None,
                        max_tokens: int = 1 << 16):
        """(first example, ChainScores, fixed tags of its tokens) over consecutive batches of
        ``examples`` of at most ``max_tokens`` tokens (one longer sentence alone), so that the
        score tables stay small whatever the input's size. ``fixed`` holds one tag id (−1:
        free) per token of the examples in order, or is None."""
        ex = self._examples(examples)
        lens = self.sent_ptr[ex + 1] - self.sent_ptr[ex]
        if fixed is not None:
            fixed = np.ascontiguousarray(fixed, np.int32).reshape(-1)
            if fixed.shape[0] != int(lens.sum()):
                raise ValueError(f"fixed must hold one tag per token ({int(lens.sum())}), got "
                                 f"{fixed.shape[0]}")
            if fixed.size and (fixed.min() < -1 or fixed.max() >= self.K):
                raise ValueError(f"fixed tags must be -1 (free) or in [0, {self.K})")
        ends = np.cumsum(lens)
        e0, tok0 = 0, 0
        while e0 < ex.shape[0]:
            e1 = max(int(np.searchsorted(ends, tok0 + max_tokens, side="right")), e0 + 1)
            sc = self.chain_scores(w, ex[e0:e1])
            n = int(sc.sent_ptr[-1])
            fx = fixed[tok0:tok0 + n] if fixed is not None else np.zeros(0, np.int32)
            yield e0, sc, fx
            e0, tok0 = e1, tok0 + n

    def _empty_score(self, w: np.ndarray) -> float:
        """w·Φ of an empty sentence: the START → END transition."""
        K = self.K
        return float(self._w(w)[self.u_rows * K + K * (K + 1) + K])

    def kbest(self, w: np.ndarray, examples: np.ndarray, k: int,
              fixed: np.ndarray | None = None, constraints: tuple | None = None
              ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The k best tag sequences y of each example by s(y) = w·Φ(x_i, y)
        (:func:`~demidcd.tasks.chain_decoding.kbest_batch`): per example (int32 (c, n) tags,
        float64 (c,) scores), best first, ties in reversed-lexicographic order, c ≤ k (c < k
        when fewer sequences are admissible). Rank 0 is :meth:`decode`'s tagging with the same
        score. ``fixed``: one tag id per token of the examples in order, −1 = free (Wapiti's
        forced labels); ``constraints``: (allowed K·K, allowed_start K, allowed_end K) booleans
        (:func:`~demidcd.tasks.chain_decoding.scheme_transitions`), or None. Where the fixed tags
        leave no tagging that obeys the constraints, the fixed tags win: that example's list is
        taken without the constraints."""
        from .chain_decoding import kbest_batch

        k = int(k)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        allowed, first, last = _constraint_arrays(constraints, self.K)
        free = _constraint_arrays(None, self.K)
        out = []
        for _, sc, fx in self._scored_batches(w, examples, fixed):
            tags, scores, counts = kbest_batch(
                sc.em, sc.sent_ptr, self.K, sc.tr, sc.start, sc.end, sc.pos_tr, sc.pos_index,
                fx, allowed, first, last, k)
            sp = sc.sent_ptr
            for e in range(sp.shape[0] - 1):
                n, c = int(sp[e + 1] - sp[e]), int(counts[e])
                if c == 0 and allowed.size + first.size + last.size:
                    # the fixed tags break the constraints: they win (a batch of one sentence)
                    one = np.array([0, n], np.int64)
                    fe = fx[sp[e]:sp[e + 1]] if fx.size else fx
                    pi = sc.pos_index[sp[e]:sp[e + 1]] if sc.pos_index.size else sc.pos_index
                    t1, s1, c1 = kbest_batch(sc.em[sp[e] * self.K:sp[e + 1] * self.K], one,
                                             self.K, sc.tr, sc.start, sc.end, sc.pos_tr, pi, fe,
                                             *free, k)
                    c = int(c1[0])
                    out.append((t1[:c * n].reshape(c, n), s1[:c].copy()))
                    continue
                ys = tags[k * sp[e]:k * sp[e] + c * n].reshape(c, n)
                sco = scores[e * k:e * k + c].copy()
                if n == 0:
                    sco[:] = self._empty_score(w)
                out.append((ys, sco))
        return out

    def decode_constrained(self, w: np.ndarray, examples: np.ndarray,
                           fixed: np.ndarray | None = None, constraints: tuple | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """argmax_y w·Φ(x_i, y) over the taggings that keep the ``fixed`` tags and obey the
        ``constraints`` (arguments, and the fixed tags winning over the constraints, as
        :meth:`kbest`): (flat int32 tags, int64 ptr, float64 scores), as :meth:`decode_flat`
        plus the scores. Without either it equals :meth:`decode_flat` tag for tag."""
        ex = self._examples(examples)
        best = self.kbest(w, ex, 1, fixed, constraints)
        ptr = np.zeros(ex.shape[0] + 1, np.int64)
        ptr[1:] = np.cumsum(self.sent_ptr[ex + 1] - self.sent_ptr[ex])
        tags = np.empty(int(ptr[-1]), np.int32)
        scores = np.empty(ex.shape[0], np.float64)
        for e, (ys, sco) in enumerate(best):
            tags[ptr[e]:ptr[e + 1]] = ys[0]
            scores[e] = sco[0]
        return tags, ptr, scores

    def confidence(self, w: np.ndarray, examples: np.ndarray, tags: np.ndarray,
                   fixed: np.ndarray | None = None, constraints: tuple | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Max-marginal margins of the taggings ``tags`` (flat int32, the layout of
        :meth:`decode_constrained`) under the same ``fixed`` / ``constraints``
        (:func:`~demidcd.tasks.chain_decoding.confidence_batch`): (per-token margins
        M_t(y_t) − max_{k≠y_t} M_t(k), per-example minima), float64, with
        M_t(k) = max {w·Φ(x, y') : y' admissible, y'_t = k}. For the best tagging every margin
        is ≥ 0 and an example's minimum is its best score minus its second best (+∞ where no
        other tagging is admissible, e.g. a token whose tag is fixed). A tagging that breaks the
        constraints (its fixed tags won, see :meth:`kbest`) is measured without them."""
        from .chain_decoding import confidence_batch

        allowed, first, last = _constraint_arrays(constraints, self.K)
        free = _constraint_arrays(None, self.K)
        tags = np.ascontiguousarray(tags, np.int32).reshape(-1)
        margins, sent = [], []
        tok0 = 0
        for _, sc, fx in self._scored_batches(w, examples, fixed):
            n = int(sc.sent_ptr[-1])
            y = tags[tok0:tok0 + n]
            m, s, _ = confidence_batch(sc.em, sc.sent_ptr, self.K, sc.tr, sc.start, sc.end,
                                       sc.pos_tr, sc.pos_index, fx, allowed, first, last, y,
                                       False)
            if allowed.size + first.size + last.size and np.any(s == -np.inf):
                # taggings that break the constraints (fixed tags won, see kbest): without them
                m0, s0, _ = confidence_batch(sc.em, sc.sent_ptr, self.K, sc.tr, sc.start,
                                             sc.end, sc.pos_tr, sc.pos_index, fx, *free, y,
                                             False)
                bad = s == -np.inf
                s[bad] = s0[bad]
                tok = np.repeat(bad, np.diff(sc.sent_ptr))
                m[tok] = m0[tok]
            margins.append(m)
            sent.append(s)
            tok0 += n
        if tok0 != tags.shape[0]:
            raise ValueError(f"tags must hold one tag per token ({tok0}), got {tags.shape[0]}")
        cat = np.concatenate
        return (cat(margins) if margins else np.zeros(0), cat(sent) if sent else np.zeros(0))


# ---------------------------------------------------------------------------------------------
# the registry entry (demidcd.tasks): reading, writing and reporting for the CLI
# ---------------------------------------------------------------------------------------------

def _parse_column(c: str | int | None) -> str | int | None:
    """``--column``: None, ``upos`` / ``xpos``, or a 1-based column number."""
    if c is None or isinstance(c, int) or c in ("upos", "xpos"):
        return c
    try:
        return int(c)
    except ValueError:
        from ..errors import OptionError

        raise OptionError(f"--column must be upos, xpos or a column number, got {c!r}") from None


def _parse_feature_columns(c: str | list | None) -> tuple[str | int, ...]:
    """``--feature-columns 2`` or ``2,3`` (1-based; ``upos``/``xpos`` in CoNLL-U)."""
    if c is None or c == "":
        return ()
    if isinstance(c, list | tuple):
        return tuple(c)
    out = []
    for x in str(c).split(","):
        x = x.strip()
        if x in ("upos", "xpos"):
            out.append(x)
        elif x.isdigit():
            out.append(int(x))
        elif x:
            from ..errors import OptionError

            raise OptionError(f"--feature-columns takes 1-based column numbers such as 2 or 2,3 "
                              f"(upos/xpos in CoNLL-U), got {c!r}")
    return tuple(out)


def _named_format(opts: dict) -> str | None:
    """The training format of a model that did not record it: CoNLL-U when a remembered column
    is named (upos / xpos), else unknown."""
    named = [opts.get("column"), *(opts.get("feature_columns") or ())]
    return "conllu" if any(c in ("upos", "xpos") for c in named) else None


class SequenceSpec(TaskSpec):
    """First-order chain labelling of CoNLL-U or whitespace-column files, token accuracy.

    What :meth:`configure` derives from a loaded model (``options.derived``):
    ``column_given`` / ``feature_columns_given`` (whether --column / --feature-columns were
    given, or are the model's), ``model_format`` (the format the model was trained on),
    ``templated`` (the tokens are every column but the label: a template model, or
    ``all_columns`` of :func:`~demidcd.datasets.load_tagged`) and ``template_width`` (a
    template model's number of columns)."""

    name = "sequence"
    help = "sequence labelling (POS tagging), scored by token accuracy"
    estimator = "demidcd.estimators.sequence:SequenceTagger"
    max_sentence_length = 10_000  # Viterbi is linear in n: a limit only for files without breaks
    length_cost = "Viterbi is linear in n; a file without blank lines reads as one sentence"

    def _format(self, path: str, options: DataOptions) -> str:
        """``--format``; auto: by the file name, or for ``-`` (standard input) by content."""
        from ..io.tagged import resolve_format

        return resolve_format(path, options.format or "auto")

    def read(self, path: str, options: DataOptions, labelled: bool = True) -> Any:
        from ..io.tagged import read_tagged, token_columns

        fmt, column, features, templated = self.read_plan(path, options, labelled)
        # the original lines are for writing predictions (unlabelled reads) and for the
        # feature and template columns; a labelled corpus without them keeps only the tokens
        data = read_tagged(path, fmt=fmt, column=column, encoding=options.encoding,
                           max_sentence_length=options.max_sentence_length, labelled=labelled,
                           keep_raw=not labelled or bool(features) or templated,
                           feature_columns=features)
        if templated:
            data.columns = token_columns(data, options.derived.get("template_width"))
        return data

    def read_plan(self, path: str, options: DataOptions, labelled: bool = True
                  ) -> tuple[str, str | int | None, tuple[str | int, ...], bool]:
        """How :meth:`read` reads ``path``: (format, label column, feature columns, whether
        the tokens are a template's columns)."""
        fmt = self._format(path, options)
        column, features = self._columns(fmt, path, options, labelled)
        if not labelled and fmt == "columns" and not options.derived.get("column_given", False):
            column = None  # predict on columns: the labels go into a new last column
        templated = bool(options.derived.get("templated", options.template is not None))
        if templated and features:
            from ..errors import OptionError

            raise OptionError("--feature-columns is for the built-in features; with --template "
                              "every column but the label is a token column")
        return fmt, column, features, templated

    def _columns(self, fmt: str, path: str, options: DataOptions, labelled: bool
                 ) -> tuple[str | int | None, tuple[str | int, ...]]:
        """The label column and feature columns to read ``path`` (format ``fmt``) with: the
        options given, else the model's, mapped to ``fmt`` when the model was trained on the
        other format. CoNLL-U model on a columns file: the label is the last column; a columns
        model on CoNLL-U: UPOS when it took the last column (a warning names --column xpos),
        else ambiguous (an error asks for --column); remembered feature columns never map (an
        error asks for --feature-columns)."""
        import warnings

        from ..errors import InputWarning, OptionError
        from ..io.text_source import source_name

        column = _parse_column(options.column)
        features = _parse_feature_columns(options.feature_columns)
        trained = options.derived.get("model_format")  # from configure (evaluate / predict)
        if trained is None or trained == fmt:
            return column, features
        name = source_name(path)
        kind = {"conllu": "CoNLL-U", "columns": "a columns file"}
        if features and not options.derived.get("feature_columns_given", True):
            use = "upos or xpos (or 3..10)" if fmt == "conllu" else "N (1-based numbers)"
            raise OptionError(
                f"the model was trained on {kind[trained]} with feature columns "
                f"{','.join(map(str, features))}; {name} is {kind[fmt]}: give "
                f"--feature-columns {use}")
        if options.derived.get("column_given", True):
            return column, features
        if trained == "conllu":  # None: CoNLL-U's default label column, UPOS
            was = {None: "UPOS", "upos": "UPOS", "xpos": "XPOS"}.get(column, f"column {column}")
        else:
            was = "the last column" if column is None else f"column {column}"
        if fmt == "columns":  # the label (or the prediction) is the last column
            if labelled:
                warnings.warn(InputWarning(
                    f"the model was trained on CoNLL-U (labels in {was}); {name} is a columns "
                    "file: its last column is read as the labels (give --column N for "
                    "another)"), stacklevel=2)
            return None, features
        if column is None:
            warnings.warn(InputWarning(
                f"the model was trained on a columns file (labels in the last column); {name} "
                f"is CoNLL-U: {'reading labels from' if labelled else 'writing predictions to'} "
                "UPOS (give --column xpos for XPOS)"), stacklevel=2)
            return "upos", features
        raise OptionError(f"the model was trained on a columns file (labels in {was}); {name} "
                          "is CoNLL-U: give --column upos or xpos")

    def xy(self, data):
        X = data.tokens
        if getattr(data, "columns", None) is not None:
            X = data.columns
        elif data.attributes is not None:
            X = [[(w, *a) for w, a in zip(ws, at, strict=True)]
                 for ws, at in zip(data.tokens, data.attributes, strict=True)]
        return X, data.tags

    def describe(self, data) -> str:
        return f"{len(data):,} sentences, {data.n_tokens:,} tokens"

    def default_data(self, options: DataOptions, seed: int) -> tuple[Any, Any, Any]:
        from ..synthetic import generate_splits

        return generate_splits(seed=seed)

    def make_estimator(self, options: DataOptions, common: dict[str, Any]) -> Any:
        """The tagger; ``--template`` is resolved here, once (a template that does not parse
        fails now, naming its file and line): the estimator holds the :class:`Template`."""
        from .template import resolve_template

        cls = self.estimator_class()
        template = resolve_template(options.template)  # errors: file:line, now
        min_count = options.min_count if options.min_count is not None else \
            None if template is not None else cls._default_min_count
        return cls(min_count=min_count, hashing=options.hashing, template=template,
                   weights=options.weights or "all",
                   **self.estimator_params(options), **common)

    def estimator_params(self, options: DataOptions) -> dict[str, Any]:
        """The estimator's keyword arguments of this task's own options (chunking, ner)."""
        return {}

    def data_options(self, est: Any, options: DataOptions) -> dict[str, Any]:
        train = options.train
        return {"column": _parse_column(options.column),
                "feature_columns": list(_parse_feature_columns(options.feature_columns)),
                "format": self._format(train, options) if train else None,
                "template": getattr(getattr(est, "template", None), "path", None)}

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        """The model's label and feature columns when none are given; ``derived``: what the
        model says about its input (see the class docstring)."""
        from dataclasses import replace

        opts = getattr(est, "data_options_", {}) or {}
        derived = {**options.derived, **self._template_derived(est, options),
                   "column_given": options.column is not None,
                   "feature_columns_given": options.feature_columns is not None,
                   "model_format": opts.get("format") or _named_format(opts)}
        return replace(
            options,
            column=opts.get("column") if options.column is None else options.column,
            feature_columns=(opts.get("feature_columns") or None
                             if options.feature_columns is None else options.feature_columns),
            derived=MappingProxyType(derived))

    @staticmethod
    def _template_derived(est: Any, options: DataOptions) -> dict[str, Any]:
        """A template model reads every column but the label (``templated``; its number of
        columns: ``template_width``); a --template given must be the model's."""
        from ..errors import OptionError
        from .template import TemplateFeaturizer, resolve_template

        f = getattr(est, "featurizer_", None)
        model = f.template if isinstance(f, TemplateFeaturizer) else None
        given = resolve_template(options.template)
        if given is not None and (model is None or given.text != model.text):
            had = f"the template {model.path}" if model is not None else "the built-in features"
            raise OptionError(f"--template {given.path}: the model was trained with {had}; "
                              "drop --template (the model's is used)")
        return {"templated": model is not None,
                "template_width": f.n_columns if model is not None else None}

    def label_counts(self, data) -> dict[str, int] | None:
        from collections import Counter

        if not data.labelled:
            return None
        counts: Counter[str] = Counter()
        for tags in data.tags:
            counts.update(tags)
        return dict(counts)

    def check(self, est, data) -> list[str]:
        if not data.labelled:
            return []
        unknown = est.unknown_labels(data.tags)
        if not unknown:
            return []
        n = sum(unknown.values())
        names = ", ".join(sorted(unknown, key=lambda t: (-unknown[t], t))[:5])
        more = ", ..." if len(unknown) > 5 else ""
        return [f"{n:,} tokens of {data.path or 'the data'} have labels the model does not know "
                f"({len(unknown)} labels: {names}{more}); they count as errors (check --column)"]

    def report(self, est, data, prefix: str = "") -> list[str]:
        X, Y = self.xy(data)
        m = est.metrics(X, Y)
        return [f"{prefix}accuracy: {100 * m['score']:.2f}% ({m['tokens']:,} tokens, "
                f"{len(data):,} sentences)"]

    def write(self, path: str, data: Any, predicted: Any, options: DataOptions) -> None:
        from ..io.tagged_writer import write_tagged

        write_tagged(path, data, predicted, column=self.write_column(data.fmt, options),
                     encoding=options.encoding)

    @staticmethod
    def write_column(fmt: str, options: DataOptions) -> str | int | None:
        """The column :meth:`write` puts the labels in (None: the one read, or a new last
        column of a columns file)."""
        column = _parse_column(options.column)
        if fmt == "columns" and not options.derived.get("column_given", False):
            column = None
        return column

    def predict_stream(self, est: Any, options: DataOptions, output: OutputOptions,
                       threads: int, run: Any = None) -> int:
        """``predict``: read ``options.data`` in blocks of sentences, tag them and write them
        to ``output.out`` in order (constant memory; ``threads`` blocks at once); returns the
        number of sentences (:mod:`~demidcd.tasks.chain_stream`)."""
        from .chain_stream import predict_stream

        return predict_stream(self, est, options, output, threads, run)

    # -- predict: n best, forced labels, confidences ----------------------------------------
    def check_options(self, est: Any, options: DataOptions, output: OutputOptions) -> None:
        """The options of other tasks (:meth:`TaskSpec.check_options`: ``--constraints`` is
        for chunking and ner, which have a label scheme); ``--nbest K`` (K >= 1, not with
        ``--scores``). A model fitted on feature dicts cannot read a file: its features are
        the user's dicts."""
        from ..errors import OptionError
        from .template import DictFeaturizer

        super().check_options(est, options, output)
        if isinstance(getattr(est, "featurizer_", None), DictFeaturizer):
            raise OptionError(f"{output.model or 'the model'}: this model was fitted on "
                              "feature dicts in Python, which a file cannot give; tag with "
                              "its predict() on dicts made the same way")
        nbest = output.nbest
        if nbest is not None and nbest < 1:
            raise OptionError(f"--nbest must be >= 1, got {nbest}")
        if nbest is not None and output.scores:
            raise OptionError("--nbest and --scores cannot be combined (the margins are those "
                              "of the best tagging)")
        if output.marginals:
            if nbest is not None or output.scores:
                raise OptionError("--marginals cannot be combined with --nbest or --scores")
            est._check_probabilistic("--marginals")

    def _given_column(self, data: Any, options: DataOptions) -> str | int | None:
        """The column ``--force`` reads the given labels from: the model's (or --column's)
        label column; for a columns file without one, the last column."""
        column = _parse_column(options.column)
        if data.fmt == "columns":
            return column if isinstance(column, int) else None
        return column

    def predict(self, est: Any, data: Any, options: DataOptions, output: OutputOptions) -> Any:
        """Tags per sentence, or :class:`~demidcd.io.tagged_writer.Blocks` for ``--nbest`` (a
        ``# RANK SCORE`` line before each of the K best taggings, as CRF++'s ``crf_test -n``)
        and ``--scores`` (a ``# SCORE MARGIN`` line before each sentence, a margin field after
        each label); ``--force`` keeps the given labels the model knows (Wapiti)."""
        from ..io.tagged import column_values
        from ..io.tagged_writer import Blocks

        X = self.xy(data)[0]
        fixed = None
        if output.force:
            known = set(est.classes_)
            feats = _parse_feature_columns(options.feature_columns)
            given = column_values(data, self._given_column(data, options), exclude=feats)
            fixed = [[t if t in known else None for t in s] for s in given]
        nbest = output.nbest
        if nbest is not None:
            order, tags, heads = [], [], []
            for s, best in enumerate(est.predict_nbest(X, nbest, fixed)):
                for j, (y, score) in enumerate(best):
                    order.append(s)
                    tags.append(y)
                    heads.append(f"# {j} {score:.6f}")
            return Blocks(tags, order, heads)
        if output.scores:
            rows = est.predict_scores(X, fixed)
            return Blocks([r[0] for r in rows], list(range(len(rows))),
                          [f"# {r[1]:.6f} {r[2]:.6f}" for r in rows],
                          [[f"{m:.6f}" for m in r[3]] for r in rows])
        if output.marginals:
            marg, tags, logp = est.predict_marginals_logp(X, fixed)
            key = "Prob=" if data.fmt == "conllu" else ""  # CoNLL-U: a MISC attribute
            return Blocks(tags, list(range(len(tags))), [f"# {p:.6f}" for p in np.exp(logp)],
                          [[f"{key}{m[t]:.6f}" for t, m in zip(ts, ms, strict=True)]
                           for ts, ms in zip(tags, marg, strict=True)])
        return est.predict(X, fixed=fixed)


SPEC = SequenceSpec()
