"""The batched numba kernels of chain labelling over a whole array of example indices per call:
loss-augmented (or plain, or loss-diminished) Viterbi and its records (φ, Δ, margin, hash),
decoding, the score tables of :mod:`.decoding`, φ of one given tagging, and the seen
(feature, label) pairs.

A record's φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) (the layout of w and Φ: :mod:`.kernels`)
is built as unmerged ±entries (keys 2·idx + side), then radix-sorted and summed by
:func:`~demidcd.tasks.phi.phi_merge` into sorted unique indices without zeros, together with
the margin w·φ; Δ is the Hamming distance and the hash the FNV-1a of the tag ids
(:func:`~.kernels.hash_tags`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ..phi import grow, key_bits, phi_merge
from .features import EncodedSequences
from .kernels import (
    b_transitions,
    chain_viterbi,
    hash_tags,
    pair_index,
    pruning,
    token_emissions,
    transitions,
    viterbi_emissions,
)
from .pruned_viterbi import PRUNE_FROM_LABELS, PRUNE_FROM_LABELS_AUGMENTED


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
                    jg = pair_index(X.u_off, X.u_lab, feat_idx[q], g)
                    jp = pair_index(X.u_off, X.u_lab, feat_idx[q], p)
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
    """Scratch for :func:`~.kernels.chain_viterbi` and φ over ``examples``: (max_keys, em,
    scratch, y, trb, slots), max_keys bounding the unmerged φ entries of one example."""
    max_n, max_keys = max_sizes(X.sent_ptr, X.feat_ptr, examples)
    max_bpos, max_bnnz = b_sizes(X.sent_ptr, X.bfeat_ptr, examples)
    em = np.empty(max(max_n, 1) * K, w.dtype)
    scratch = np.empty(4 * K, w.dtype)  # 2K dense relax, 2K more for the pruned one
    y = np.empty(max(max_n, 1), np.int32)
    trb = np.empty(max_bpos * K * K, w.dtype)
    slots = np.empty(max(max_n, 1), np.int32)
    return max_keys + 2 * max_bnnz, em, scratch, y, trb, slots


@nb.njit(cache=True, nogil=True)
def _phi_buffers(max_keys, X):
    """Scratch of one example's φ (:func:`_phi_keys`, :func:`~.phi.phi_merge`): (keys, tmp,
    vals, vtmp, counts) for ``max_keys`` unmerged entries (vals empty for binary features)."""
    keys = np.empty(max(max_keys, 1), np.int64)
    tmp = np.empty(max(max_keys, 1), np.int64)
    vals = np.empty(max(max_keys, 1) if _valued(X) else 0, np.float64)
    vtmp = np.empty(vals.shape[0], np.float64)
    return keys, tmp, vals, vtmp, np.empty(256, np.int64)


@nb.njit(cache=True, nogil=True)
def _record_buffers(n_ex, max_keys):
    """The records of ``n_ex`` examples at most: (ex, hash, delta, margin, ptr, cap, idx,
    val), the φ arrays of ``cap`` entries (grown by :func:`grow`)."""
    cap = max(1024, 2 * max_keys)
    return (np.empty(n_ex, np.int64), np.empty(n_ex, np.uint64), np.empty(n_ex, np.float64),
            np.empty(n_ex, np.float64), np.zeros(n_ex + 1, np.int64), cap,
            np.empty(cap, np.int32), np.empty(cap, np.float64))


@nb.njit(cache=True, nogil=True)
def _trimmed(nrec, pos, r_ex, r_hash, r_delta, r_margin, r_ptr, out_idx, out_val):
    """The ``nrec`` records found, their φ's ``pos`` entries (copies of the used parts)."""
    return (r_ex[:nrec].copy(), r_hash[:nrec].copy(), r_delta[:nrec].copy(),
            r_margin[:nrec].copy(), r_ptr[:nrec + 1].copy(), out_idx[:pos].copy(),
            out_val[:pos].copy())


@nb.njit(cache=True, nogil=True)
def loss_augmented_kernel(w, F, K, G, X, gold, examples, augment=1.0, prune_from=-1):
    """Loss-augmented Viterbi + record construction for every example in ``examples`` of the
    :class:`~.kernels.Chain` X (``augment`` scales Δ in the argmax: 0.0 plain Viterbi, records
    for the examples it gets wrong; −1.0 the loss-diminished argmax). From ``prune_from`` tags the
    forward pass is the pruned one (``relax_pruned``; same argmax and records); −1:
    PRUNE_FROM_LABELS for augment 0, else PRUNE_FROM_LABELS_AUGMENTED.

    Returns (ex, hash as uint64, delta, margin, ptr, idx, val) trimmed to the records found;
    the φ arrays grow by doubling (at most O(log nnz) reallocations per call).
    """
    return _records_kernel(w, F, K, G, X, gold, np.zeros(0, np.int64), np.zeros(0, np.int32),
                           examples, augment, prune_from)


@nb.njit(cache=True, nogil=True)
def _augment_sets(K, allowed_ptr, allowed_idx, a, n, em, scale, keep):
    """Loss augmentation of partially labelled data: em[t·K + k] += scale for every label k
    that token a+t does not admit, exactly (admitted entries kept); a token with an empty range
    (unknown) admits every label and is left as it is. ``keep``: scratch of K."""
    for t in range(n):
        p0, p1 = allowed_ptr[a + t], allowed_ptr[a + t + 1]
        if p1 == p0:
            continue
        row = em[t * K:(t + 1) * K]
        for j in range(p0, p1):
            keep[j - p0] = row[allowed_idx[j]]
        for k in range(K):
            row[k] += scale
        for j in range(p0, p1):
            row[allowed_idx[j]] = keep[j - p0]


@nb.njit(cache=True, nogil=True)
def set_loss(allowed_ptr, allowed_idx, a, n, y):
    """Δ of a tagging y of tokens a..a+n-1 against a partial annotation: the tokens whose
    (non-empty) admitted set does not hold y_t; an unknown token (empty range) costs 0."""
    loss = 0
    for t in range(n):
        p0, p1 = allowed_ptr[a + t], allowed_ptr[a + t + 1]
        if p1 == p0:
            continue
        hit = False
        for j in range(p0, p1):
            if allowed_idx[j] == y[t]:
                hit = True
                break
        if not hit:
            loss += 1
    return loss


@nb.njit(cache=True, nogil=True)
def partial_augmented_kernel(w, F, K, G, X, target, allowed_ptr, allowed_idx, examples,
                             augment=1.0, prune_from=-1):
    """:func:`loss_augmented_kernel` for partially labelled data (the latent SSVM's convex
    step): argmax_y w·Φ(x_i, y) + augment·Δ(y) with Δ(y) = :func:`set_loss` (the annotation's
    loss, which does not depend on the imputed target), and the record's φ = Φ(x_i, ŷ_i) −
    Φ(x_i, y) against the imputed complete tagging ŷ = ``target`` (consistent: Δ(ŷ) = 0). A
    record is made for every example whose argmax differs from ŷ, Δ = 0 included (y may differ
    from ŷ on unknown tokens only: the constraint w·Φ(ŷ) ≥ w·Φ(y) − ξ_i). Same outputs."""
    return _records_kernel(w, F, K, G, X, target, allowed_ptr, allowed_idx, examples, augment,
                           prune_from)


@nb.njit(cache=True, nogil=True)
def _records_kernel(w, F, K, G, X, gold, allowed_ptr, allowed_idx, examples, augment,
                    prune_from):
    """The loop of :func:`loss_augmented_kernel` (``allowed_ptr`` empty: Δ the Hamming loss
    against ``gold``, fused into Viterbi) and :func:`partial_augmented_kernel` (Δ the
    annotation's :func:`set_loss`, added to the emissions first; φ against ``gold``, the
    imputed targets)."""
    partial = allowed_ptr.shape[0] > 0
    n_ex = examples.shape[0]
    max_keys, em, scratch, y, trb, slots = _workspace(w, K, X, examples)
    tr, trT, start, end = transitions(w, F, K)
    prune = prune_from
    if prune < 0:
        prune = PRUNE_FROM_LABELS if augment == 0 else PRUNE_FROM_LABELS_AUGMENTED
    tmax, order = pruning(tr, K, prune)
    keys, tmp, vals, vtmp, counts = _phi_buffers(max_keys, X)
    keep = np.empty(K, em.dtype)
    nbits = key_bits(F * K + (K + 1) * (K + 1) + G * K * K)
    r_ex, r_hash, r_delta, r_margin, r_ptr, cap, out_idx, out_val = _record_buffers(n_ex,
                                                                                   max_keys)
    nrec = 0
    pos = 0
    for e in range(n_ex):
        i = examples[e]
        a = X.sent_ptr[i]
        n = X.sent_ptr[i + 1] - a
        if n == 0:
            continue
        if partial:
            token_emissions(w, K, X, a, n, em)
            if augment != 0:
                _augment_sets(K, allowed_ptr, allowed_idx, a, n, em, augment, keep)
            viterbi_emissions(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots,
                              y, tmax, order)
        else:
            chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y,
                          gold, augment, tmax, order)
        m, ham = _phi_keys(F, K, X, gold, a, n, y, keys, vals)
        if ham == 0:
            continue
        out_idx, out_val, cap = grow(out_idx, out_val, pos, m, cap)
        pos, margin = phi_merge(keys, vals, tmp, vtmp, counts, m, nbits, w, out_idx, out_val,
                                 pos)
        r_ex[nrec] = i
        r_hash[nrec] = hash_tags(y, n)
        r_delta[nrec] = set_loss(allowed_ptr, allowed_idx, a, n, y) if partial else ham
        r_margin[nrec] = margin
        nrec += 1
        r_ptr[nrec] = pos
    return _trimmed(nrec, pos, r_ex, r_hash, r_delta, r_margin, r_ptr, out_idx, out_val)


def inference_parts(w, F, K, G, X, gold) -> list:
    """The two large callees of :func:`loss_augmented_kernel` (Viterbi; φ's keys, merge and
    hash) as warm-up jobs (name, function, rough compile seconds): each calls them once, from
    Python, with the argument types the kernel passes them, so that another process can
    compile them into numba's cache while this one compiles something else; the kernel's own
    compile then loads them from the cache (:func:`demidcd.solvers.warm_up_jobs`). A type
    that differed would only cost the time: the kernel compiles what it does not find."""
    ex = np.zeros(1, np.int64)

    def viterbi() -> None:
        _, em, scratch, y, trb, slots = _workspace(w, K, X, ex)
        tr, trT, start, end = transitions(w, F, K)
        tmax, order = pruning(tr, K, PRUNE_FROM_LABELS_AUGMENTED)
        a, n = X.sent_ptr[0], X.sent_ptr[1] - X.sent_ptr[0]
        chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots, y, gold,
                      1.0, tmax, order)

    def phi() -> None:
        max_keys, _, _, y, _, _ = _workspace(w, K, X, ex)
        y[:] = 0
        a, n = X.sent_ptr[0], X.sent_ptr[1] - X.sent_ptr[0]
        keys, tmp, vals, vtmp, counts = _phi_buffers(max_keys, X)
        nbits = key_bits(F * K + (K + 1) * (K + 1) + G * K * K)
        cap = max(1024, 2 * max_keys)
        out_idx = np.empty(cap, np.int32)
        out_val = np.empty(cap, np.float64)
        m, _ = _phi_keys(F, K, X, gold, a, n, y, keys, vals)
        zero = nb.types.literal(0)  # the kernel's first position, typed as the literal 0
        grow.compile((*map(nb.typeof, (out_idx, out_val)), zero, nb.int64, nb.int64))
        phi_merge.compile((*map(nb.typeof, (keys, vals, tmp, vtmp, counts, m, nbits, w,
                                            out_idx, out_val)), zero))
        hash_tags(y, n)

    return [("viterbi", viterbi, 15.0), ("records", phi, 10.0)]


@nb.njit(cache=True, nogil=True)
def token_ptr(sent_ptr, examples):
    """ptr[e]..ptr[e+1]: where example ``examples[e]``'s tokens lie in a flat per-token array
    of the given examples (int64, n + 1)."""
    ptr = np.zeros(examples.shape[0] + 1, np.int64)
    for e in range(examples.shape[0]):
        i = examples[e]
        ptr[e + 1] = ptr[e] + sent_ptr[i + 1] - sent_ptr[i]
    return ptr


@nb.njit(cache=True, nogil=True)
def decode_kernel(w, F, K, X, examples, prune_from=PRUNE_FROM_LABELS):
    """Viterbi for every example: (flat int32 tags, int64 ptr) with ptr[e]..ptr[e+1] per example
    (the pruned forward pass from ``prune_from`` tags, same tags)."""
    n_ex = examples.shape[0]
    sent_ptr = X.sent_ptr
    ptr = token_ptr(sent_ptr, examples)
    _, em, scratch, _, trb, slots = _workspace(w, K, X, examples)
    tr, trT, start, end = transitions(w, F, K)
    tmax, order = pruning(tr, K, prune_from)
    tags = np.empty(ptr[n_ex], np.int32)
    dummy = np.empty(0, np.int32)
    for e in range(n_ex):
        i = examples[e]
        a = sent_ptr[i]
        n = sent_ptr[i + 1] - a
        if n > 0:
            chain_viterbi(w, F, K, X, a, n, tr, trT, start, end, em, scratch, trb, slots,
                           tags[ptr[e]:ptr[e + 1]], dummy, 0.0, tmax, order)
    return tags, ptr


@nb.njit(cache=True, nogil=True)
def chain_scores_kernel(w, F, K, X, examples):
    """The scores of every example as the kernels of :mod:`.decoding` take them:
    (em, ptr, tr, start, end, pos_tr, pos_index) with

        em[(ptr[e] + t)·K + k]   s_t(k) of token t of example e (:func:`~.kernels.emissions`)
        tr, start, end           the shared transitions (:func:`~.kernels.transitions`)
        pos_tr[m, K²]            M_t of every position t ≥ 1 where B features fire
                                 (:func:`~.kernels.b_transitions`), pos_index[ptr[e] + t]
                                 = its row, −1 elsewhere; both empty without B features

    computed by the functions Viterbi uses, so a decoder reading them scores exactly as
    :func:`~.kernels.chain_viterbi` does."""
    n_ex = examples.shape[0]
    sent_ptr = X.sent_ptr
    ptr = token_ptr(sent_ptr, examples)
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
        token_emissions(w, K, X, a, n, em[ptr[e] * K:ptr[e + 1] * K])
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
    feature f's labels sorted in lab[off[f]:off[f+1]] (``pairs`` of
    :class:`~.task.SequenceTask`)."""
    Y = np.ascontiguousarray(Y, np.int32)
    if Y.size and Y.min() < 0:
        raise ValueError("gold tags include unknown tags (-1): cannot list seen pairs")
    return _seen_pairs_kernel(np.ascontiguousarray(X.feat_ptr, np.int64),
                              np.ascontiguousarray(X.feat_idx, np.int32), Y, int(n_obs),
                              int(n_tags))


def seen_pairs_rows(feat_ptr: np.ndarray, feat_idx: np.ndarray, labels: np.ndarray,
                    n_obs: int, n_tags: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`seen_pairs` of rows of features (row r: feat_idx[feat_ptr[r]:feat_ptr[r+1]])
    each seen with the label ``labels[r]`` (≥ 0), e.g. one row per label a partially
    labelled token admits (:mod:`.partial`)."""
    return _seen_pairs_kernel(np.ascontiguousarray(feat_ptr, np.int64),
                              np.ascontiguousarray(feat_idx, np.int32),
                              np.ascontiguousarray(labels, np.int32), int(n_obs), int(n_tags))


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
