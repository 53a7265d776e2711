"""The per-sentence numba kernels of first-order chain labelling (POS tagging, chunking, NER):
emissions, transitions, the max-plus forward pass and backtrack of Viterbi (dense, with B
features, pruned), and the tag-sequence hash. The batched kernels that build records are in
:mod:`.records`, the :class:`~.task.SequenceTask` over them in :mod:`.task`.

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
Seen pairs (``weights="seen"``, :func:`~.records.seen_pairs`): U holds weights only for the
(f, k) seen together in training, as CRFsuite and CRF++ keep them: for feature f the sorted
labels lab[off[f]:off[f+1]] with the weight of (f, lab[j]) at w[j]; any other (f, k) has no weight
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
and merge) is done by numba kernels: those of this module per sentence, those of :mod:`.records`
over a whole array of example indices per call, with the encoding as one :class:`Chain`. Absent
values and absent B features are empty arrays, tested once per feature (values) and once per
sentence (B: without them :func:`_forward` and :func:`_backtrack` run as before B features
existed); records of binary features without B are bit-identical to those of the kernels
before values and B features (tests/test_chain_features.py checks unit values and ignored B
features against them).
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from ..phi import FNV_OFFSET, FNV_PRIME
from .pruned_viterbi import column_max, relax_pruned


class Chain(NamedTuple):
    """The encoded sentences as the kernels take them (one argument instead of seven).

    An empty ``feat_val`` / ``bfeat_val`` means every value is 1 (binary features, the fast
    path); an empty ``bfeat_ptr`` means no B features (the shared transitions everywhere); an
    empty ``u_off`` means the dense U block (w[f·K + k]), otherwise the seen-pairs U block
    (:func:`~.records.seen_pairs`): the weight of (f, u_lab[j]) is w[j], u_off[f] ≤ j < u_off[f+1].
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


@nb.njit(cache=True, nogil=True, inline="always")
def feature_kinds(X):
    """(whether the observation features carry values, whether X has label-bigram (B)
    features, whether those carry values): the three branches of the chain kernels."""
    return X.feat_val.shape[0] > 0, X.bfeat_ptr.shape[0] > 0, X.bfeat_val.shape[0] > 0


@nb.njit(cache=True, nogil=True, inline="always")
def sentence_span(X, i):
    """(first token, length) of sentence i of X."""
    a = X.sent_ptr[i]
    return a, X.sent_ptr[i + 1] - a


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
def token_emissions(w, K, X, a, n, em):
    """The emissions of tokens a..a+n-1 of X in either U layout (dense or seen pairs)."""
    if X.u_off.shape[0] > 0:
        _emissions_seen(w, K, X, a, n, em)
    else:
        emissions(w, K, X.feat_ptr, X.feat_idx, X.feat_val, a, n, em)


@nb.njit(cache=True, nogil=True, inline="always")
def token_scatter(K, X, tok, m, scale, out, squared=False):
    """The adjoint of :func:`token_emissions` for one token: out[U(f, k)] += scale·u_{tok,f}·m[k]
    for every feature f of token ``tok`` and every label k with a weight for f (all K in the
    dense U block, f's seen labels in the seen-pairs block); m: K values per label.
    ``squared``: u_{tok,f}² in place of u_{tok,f} (a Hessian's diagonal)."""
    valued = X.feat_val.shape[0] > 0
    seen = X.u_off.shape[0] > 0
    for q in range(X.feat_ptr[tok], X.feat_ptr[tok + 1]):
        f = X.feat_idx[q]
        u = X.feat_val[q] if valued else 1.0
        c = scale * (u * u if squared else u)
        if seen:
            for j in range(X.u_off[f], X.u_off[f + 1]):
                out[j] += c * m[X.u_lab[j]]
        else:
            base = np.int64(f) * K
            row = out[base:base + K]  # a slice: packed SIMD (see :func:`emissions`)
            for k in range(K):
                row[k] += c * m[k]


@nb.njit(cache=True, nogil=True, inline="always")
def pair_index(off, lab, f, k):
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
def max_plus(prow, K, tr, scratch):
    """m[b] = max_a (prow[a] + tr[a·K + b]) in one half of ``scratch`` (2K long), returned.

    K-major: for each predecessor a, an element-wise max over the contiguous row tr[a·K:(a+1)·K]
    (vectorises; a reduction over a for each b does not). The running max alternates between
    the two halves of ``scratch``: written in place, ``m[b] = v if v > m[b] else m[b]``
    compiles to a masked store (vmaskmovpd), which is microcoded on AMD Zen; a store to the
    other buffer is a plain vmaxpd + store (benchmarks/README.md has the forward pass's
    speed-up). Inlined by numba into each caller.
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
    return src


@nb.njit(cache=True, nogil=True, fastmath=True, inline="always")
def _relax(prow, crow, K, tr, scratch):
    """crow[b] += max_a (prow[a] + tr[a·K + b]): one max-plus step of the forward pass
    (:func:`max_plus`). Inlined by numba into each caller."""
    src = max_plus(prow, K, tr, scratch)
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
def chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y, gold,
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
    token_emissions(w, K, X, a, n, em)
    if augment != 0:
        _augment(K, gold, a, n, em, augment)
    return viterbi_emissions(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y,
                             tmax, order)


@nb.njit(cache=True, nogil=True)
def viterbi_emissions(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y, tmax,
                      order):
    """The Viterbi pass of :func:`chain_viterbi` (n ≥ 1) over emissions em[t·K + k] already
    computed (and augmented by the caller: the loss of partially labelled data, :mod:`.records`);
    writes the argmax to y[:n] and returns its score."""
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
    """:func:`chain_viterbi` for binary features given as (feat_ptr, feat_idx), no B
    features, dense forward pass (benchmarks/foundation.py times this one)."""
    X = Chain(feat_ptr[:0], feat_ptr, feat_idx, em[:0], feat_ptr[:0], feat_idx[:0], em[:0],
              feat_ptr[:0], feat_idx[:0])
    return chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, tr[:0], y[:0],
                          y, gold, augment, tr[:0], y[:0])


@nb.njit(cache=True, nogil=True)
def pruning(tr, K, prune_from):
    """(tmax, order) for :func:`chain_viterbi`: the pruned pass when K ≥ prune_from (≥ 1),
    else empty arrays (the dense pass)."""
    if K < max(prune_from, 1):
        return tr[:0], np.empty(0, np.int32)
    tmax = np.empty(K, tr.dtype)
    column_max(tr, K, tmax)
    return tmax, np.empty(2 * K, np.int32)


@nb.njit(cache=True, nogil=True)
def hash_tags(y, n):
    """64-bit FNV-1a over the tag ids (one step per tag)."""
    h = FNV_OFFSET
    for t in range(n):
        h = (h ^ np.uint64(y[t])) * FNV_PRIME
    return h
