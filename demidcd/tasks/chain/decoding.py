"""Decoding kernels for the first-order chain: k-best Viterbi and constrained decoding, and the
label-scheme constraints (max-marginals and confidence scores over the same arrays:
:mod:`.confidence`).

A sentence of n tokens over K tags is given as flat arrays, laid out as in
:mod:`demidcd.tasks.chain.kernels`:

    em[t·K + k]   emission score of tag k at token t              (float32 or float64)
    tr[a·K + b]   transition score w(a → b)                         (em's dtype)
    start[b]      w(START → b),   end[a]   w(a → END)               (em's dtype)
    pos_tr[m, K·K], pos_index[t]   optional per-position matrices: trans_t = pos_tr[pos_index[t]]
                  where pos_index[t] ≥ 0, else tr (label-bigram "B" features; pos_index[0] is
                  not read, since position 0 has no predecessor)

The score of a label sequence y is

    s(y) = start[y_0] + Σ_{t<n} em[t, y_t] + Σ_{1≤t<n} trans_t(y_{t−1}, y_t) + end[y_{n−1}].

Constraints (every one optional: pass an empty array for "none", see :func:`no_constraints`):

    fixed[t]              −1 (free) or the tag token t must take
    allowed[a·K + b]      False forbids a → b; allowed_start[b] / allowed_end[a] likewise
                          (label-scheme rules, see :func:`scheme_transitions`)

act as −∞ on the forbidden emissions and transitions: the kernels read them while scoring and
never modify the caller's arrays. A sequence of score −∞ (forbidden, or −∞ in the caller's
scores) is *inadmissible*: it is never returned and has no max-marginal.

Kernels (numba, ``cache=True, nogil=True``, flat arrays, scratch allocated once per call):

* :func:`kbest_chain` / :func:`kbest_batch` – the k best admissible sequences (k-best Viterbi
  with top-k lists per (t, tag), merged by a heap of the k best list heads), in the total
  order *score descending, then reversed-lexicographic ascending* (compare y_{n−1} first, then
  y_{n−2}, …). This is the tie rule of ``kernels._backtrack`` (the first index wins, from the
  last token back), so rank 0 is exactly the plain Viterbi argmax, with the same floating-point
  score. From ``pruned_viterbi.PRUNE_FROM_LABELS`` tags, k = 1 prunes the max over predecessors
  (``pruned_viterbi.relax_pruned``: the same table, value for value); k > 1 keeps the dense step.

Arithmetic: the k-best kernel accumulates in em's dtype with the same additions, in the same
order, as ``kernels._forward``/``_backtrack``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from ...errors import OptionError
from .chunks import split_label
from .kernels import max_plus
from .pruned_viterbi import PRUNE_FROM_LABELS, column_max, relax_pruned

_NEG = -np.inf


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------
def no_constraints() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                              np.ndarray]:
    """Empty ``(pos_tr, pos_index, fixed, allowed, allowed_start, allowed_end)`` in the
    canonical dtypes (float64 2-D, int32, int32, bool, bool, bool): no per-position matrices, no
    forced labels, every transition allowed. Any of them may be replaced by a real one."""
    return (np.zeros((0, 0), np.float64), np.zeros(0, np.int32), np.zeros(0, np.int32),
            np.zeros(0, np.bool_), np.zeros(0, np.bool_), np.zeros(0, np.bool_))


@nb.njit(cache=True, nogil=True)
def check_chain(em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed, allowed_start,
           allowed_end):
    """Raise ValueError on arrays too short for (n, K) or forced tags / matrix rows out of
    range; return (has_pos, has_fixed, has_allowed, has_start, has_end)."""
    if n < 0 or K < 0 or em.size < n * K:
        raise ValueError("em must hold n*K scores")
    if tr.size < K * K or start.size < K or end.size < K:
        raise ValueError("tr must hold K*K scores, start and end K each")
    has_pos = pos_index.size > 0
    has_fixed = fixed.size > 0
    has_allowed = allowed.size > 0
    has_start = allowed_start.size > 0
    has_end = allowed_end.size > 0
    if has_pos:
        if pos_index.size < n:
            raise ValueError("pos_index must be empty or hold n entries")
        for t in range(1, n):
            p = pos_index[t]
            if p >= pos_tr.shape[0] or (p >= 0 and pos_tr.shape[1] < K * K):
                raise ValueError("pos_index names a row missing from pos_tr[m, K*K]")
    if has_fixed:
        if fixed.size < n:
            raise ValueError("fixed must be empty or hold n entries")
        for t in range(n):
            if fixed[t] >= K or fixed[t] < -1:
                raise ValueError("fixed[t] must be -1 (free) or a tag id in [0, K)")
    if (has_allowed and allowed.size < K * K) or (has_start and allowed_start.size < K) \
            or (has_end and allowed_end.size < K):
        raise ValueError("allowed must be empty or K*K long, allowed_start/end empty or K long")
    return has_pos, has_fixed, has_allowed, has_start, has_end


# ---------------------------------------------------------------------------------------------
# k-best Viterbi
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def kbest_workspace(n_max, K, k, em):
    """Scratch for :func:`kbest_chain` on sentences of up to ``n_max`` tokens (``em``: any array
    of the emission dtype). A tuple (S, P, C, TT, T, col, hv, ha, hr, fa, fr):

        S[(t·K + b)·k + j]  score of the j-th best prefix y_0..y_t with y_t = b   (em's dtype)
        P[(t·K + b)·k + j]  its back pointer a·k + r: prefix r of (t−1, a)       (int32)
        C[t·K + b]          number of admissible prefixes kept for (t, b), ≤ k     (int32)
        TT[b·K + a]         tr transposed (k = 1: not transposed), −∞ where a → b is forbidden
        T                   pos_tr[pos_index[t]] in em's dtype, masked and laid out as TT
        col                 4K: the heads S[(t−1, a), 0] and their sums with a column of TT
                            (k = 1: the two running-max buffers of the forward pass, then
                            the sorted heads and column maxima of the pruned one)
        hv, ha, hr          the merge heap (value, tag, rank), max(K, k) long (k = 1: the
                            heap of the pruned forward pass in hv, ha and its order in hr)
        fa, fr              final (tag, rank) of each returned sequence, k long
    """
    n_max = max(n_max, 1)
    h = max(K, k)
    return (np.empty(n_max * K * k, em.dtype), np.empty(n_max * K * k, np.int32),
            np.empty(n_max * K, np.int32), np.empty(K * K, em.dtype),
            np.empty(K * K, em.dtype), np.empty(4 * K, em.dtype),
            np.empty(h, em.dtype), np.empty(h, np.int32), np.empty(h, np.int32),
            np.empty(k, np.int32), np.empty(k, np.int32))


@nb.njit(cache=True, nogil=True, inline="always")
def _before(v1, a1, v2, a2):
    """Heap order of two list heads (distinct tags): higher value first, then smaller tag."""
    return v1 > v2 or (v1 == v2 and a1 < a2)


@nb.njit(cache=True, nogil=True)
def _sift_down(hv, ha, hr, i, m):
    while True:
        c = 2 * i + 1
        if c >= m:
            return
        r = c + 1
        if r < m and _before(hv[r], ha[r], hv[c], ha[c]):
            c = r
        if not _before(hv[c], ha[c], hv[i], ha[i]):
            return
        hv[i], hv[c] = hv[c], hv[i]
        ha[i], ha[c] = ha[c], ha[i]
        hr[i], hr[c] = hr[c], hr[i]
        i = c


@nb.njit(cache=True, nogil=True)
def _heapify(hv, ha, hr, m):
    for i in range(m // 2 - 1, -1, -1):
        _sift_down(hv, ha, hr, i, m)


@nb.njit(cache=True, nogil=True)
def _pop_or_advance(hv, ha, hr, m, nxt):
    """Replace the heap's top by the next entry of its list (value ``nxt``; −∞ = exhausted) or
    drop it; return the new heap size."""
    if nxt > _NEG:
        hv[0] = nxt
        hr[0] += 1
    else:
        m -= 1
        hv[0] = hv[m]
        ha[0] = ha[m]
        hr[0] = hr[m]
    _sift_down(hv, ha, hr, 0, m)
    return m


@nb.njit(cache=True, nogil=True)
def _copy_masked(src, allowed, has_allowed, K, out):
    """out[a·K + b] = src[a·K + b] in out's dtype, −∞ where a → b is not allowed."""
    for q in range(K * K):
        out[q] = src[q] if not has_allowed or allowed[q] else _NEG


@nb.njit(cache=True, nogil=True)
def _viterbi_forward(t, K, em, trv, S, dbl, f):
    """k = 1 at position t ≥ 1: S[t, b] = em[t, b] + max_a S[t−1, a] + trv[a·K + b] (−∞ off a
    forced tag), exactly as ``kernels._forward`` (:func:`~.kernels.max_plus` over the rows of trv,
    in ``dbl``, 2K long)."""
    src = max_plus(S[(t - 1) * K:t * K], K, trv, dbl)
    crow = S[t * K:(t + 1) * K]
    erow = em[t * K:(t + 1) * K]
    for b in range(K):
        crow[b] = erow[b] + src[b]
    if f >= 0:
        for b in range(K):
            if b != f:
                crow[b] = _NEG


@nb.njit(cache=True, nogil=True)
def _viterbi_forward_pruned(t, K, em, trv, S, f, tmax, hv, hi, sv, si, acc):
    """:func:`_viterbi_forward` by ``pruned_viterbi.relax_pruned`` (tmax: column maxima of trv): the
    same S[t, ·], value for value. A forced tag f ≥ 0 needs only column f, scanned whole."""
    prow = S[(t - 1) * K:t * K]
    crow = S[t * K:(t + 1) * K]
    erow = em[t * K:(t + 1) * K]
    if f >= 0:
        for b in range(K):
            crow[b] = _NEG
        m = prow[0] + trv[f]
        for a in range(1, K):
            v = prow[a] + trv[a * K + f]
            m = v if v > m else m
        crow[f] = erow[f] + m
        return
    for b in range(K):
        crow[b] = erow[b]
    relax_pruned(prow, crow, K, trv, tmax, hv, hi, sv, si, acc)


@nb.njit(cache=True, nogil=True)
def _viterbi_chain(em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed, allowed_start,
                   allowed_end, flags, y, S, Tm, T, dbl, pruned, hv, hi, si):
    """k = 1: the best admissible sequence into y[:n] and its score (−∞ and y untouched if none).

    Forward max-plus pass over S[t·K + b] (em's dtype; −∞ = inadmissible), then the argmax is
    recovered by recomputing each max over the predecessor a (first index wins), as
    ``kernels._forward`` / ``_backtrack`` do, so the result is theirs bit for bit. Forbidden
    transitions use Tm, a copy of tr with −∞ at the forbidden entries (made once per call), and
    per-position matrices T, pos_tr[pos_index[t]] cast to em's dtype and masked likewise.
    ``pruned``: positions with the shared (masked) matrix take :func:`_viterbi_forward_pruned`
    (the same table; dbl 4K long: the running maxima, the sorted heads, the column maxima;
    hv K of em's dtype, hi and si K int32), those with their own matrix the dense step.
    """
    has_pos, has_fixed, has_allowed, has_start, has_end = flags
    f0 = fixed[0] if has_fixed else -1
    for b in range(K):
        ok = (f0 < 0 or b == f0) and (not has_start or allowed_start[b])
        S[b] = em[b] + start[b] if ok else _NEG
    if has_allowed:
        _copy_masked(tr, allowed, has_allowed, K, Tm)
    acc = dbl[0:2 * K]  # the pruned step's best sums so far (the dense step's buffers)
    sv = dbl[2 * K:3 * K]
    tmax = dbl[3 * K:4 * K]
    if pruned and n > 1:
        if has_allowed:
            column_max(Tm, K, tmax)
        else:
            column_max(tr, K, tmax)
    for t in range(1, n):
        p = pos_index[t] if has_pos else -1
        f = fixed[t] if has_fixed else -1
        if p >= 0:
            _copy_masked(pos_tr[p], allowed, has_allowed, K, T)
            _viterbi_forward(t, K, em, T, S, dbl, f)
        elif has_allowed:
            if pruned:
                _viterbi_forward_pruned(t, K, em, Tm, S, f, tmax, hv, hi, sv, si, acc)
            else:
                _viterbi_forward(t, K, em, Tm, S, dbl, f)
        elif pruned:
            _viterbi_forward_pruned(t, K, em, tr, S, f, tmax, hv, hi, sv, si, acc)
        else:
            _viterbi_forward(t, K, em, tr, S, dbl, f)
    row = (n - 1) * K
    best = _NEG
    arg = -1
    for a in range(K):
        if not has_end or allowed_end[a]:
            v = S[row + a] + end[a]
            if v > best:
                best = v
                arg = a
    if arg < 0:
        return best
    y[n - 1] = arg
    cell = dbl[0:1]  # rounds a per-position weight to em's dtype, as T does in the forward pass
    for t in range(n - 1, 0, -1):
        prev = (t - 1) * K
        b = y[t]
        p = pos_index[t] if has_pos else -1
        m = _NEG
        arg = 0
        for a in range(K):
            if has_allowed and not allowed[a * K + b]:
                continue
            if p >= 0:
                cell[0] = pos_tr[p, a * K + b]
                v = S[prev + a] + cell[0]
            else:
                v = S[prev + a] + tr[a * K + b]
            if v > m:
                m = v
                arg = a
        y[t - 1] = arg
    return best


@nb.njit(cache=True, nogil=True)
def _transpose_masked(src, allowed, has_allowed, K, out):
    """out[b·K + a] = src[a·K + b] in out's dtype, −∞ where a → b is not allowed."""
    for a in range(K):
        for b in range(K):
            out[b * K + a] = src[a * K + b] if not has_allowed or allowed[a * K + b] else _NEG


@nb.njit(cache=True, nogil=True)
def _kbest_step(t, K, k, em, trT, S, P, C, col, hv, ha, hr, f):
    """k > 1 at position t ≥ 1: fill S, P, C from position t − 1, with trT[b·K + a] =
    trans_t(a, b) (−∞ where forbidden).

    For each tag b the candidates are (a, r) ↦ S[(t−1, a), r] + trans_t(a, b), over the sorted
    lists of every predecessor a. The k best in the order (value desc, a asc, r asc) lie in the
    lists whose heads are among the k best heads (a list whose head is not has k heads, hence
    k candidates, before all of its entries): those heads are picked by insertion into a
    sorted buffer (one comparison rejects a head once the buffer is full), which, sorted, is
    already a heap; k pops, each replaced by the next entry of its list, give the k best, and
    em[t, b] is added. Cost O(K² + K·k log k) per position, plus the insertions (O(k) each,
    about k·(1 + ln(K/k)) per tag on random scores). Values are rounded to em's dtype before
    they are compared; the additions are those of ``kernels._forward``.
    """
    prev = (t - 1) * K
    heads = col[0:K]
    cand = col[K:2 * K]
    for a in range(K):
        heads[a] = S[(prev + a) * k] if C[prev + a] > 0 else _NEG
    for b in range(K):
        i = t * K + b
        e = em[i]
        if (f >= 0 and b != f) or not e > _NEG:
            C[i] = 0
            continue
        tcol = trT[b * K:(b + 1) * K]
        for a in range(K):
            cand[a] = heads[a] + tcol[a]
        m = 0
        thr = _NEG
        for a in range(K):
            v = cand[a]
            if not v > thr:  # ties keep the smaller a (seen first) ahead
                continue
            if m < k:
                j = m
                m += 1
            else:
                j = k - 1
            while j > 0 and hv[j - 1] < v:
                hv[j] = hv[j - 1]
                ha[j] = ha[j - 1]
                j -= 1
            hv[j] = v
            ha[j] = a
            if m == k:
                thr = hv[k - 1]
        for j in range(m):
            hr[j] = 0
        cnt = 0
        while cnt < k and m > 0:
            a = ha[0]
            r = hr[0]
            S[i * k + cnt] = e + hv[0]
            P[i * k + cnt] = a * k + r
            cnt += 1
            nxt = _NEG
            if r + 1 < C[prev + a]:
                hv[0] = S[(prev + a) * k + r + 1] + tcol[a]  # rounded to em's dtype
                nxt = hv[0]
            m = _pop_or_advance(hv, ha, hr, m, nxt)
        C[i] = cnt


@nb.njit(cache=True, nogil=True)
def kbest_chain(em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed, allowed_start,
                allowed_end, k, ys, scores, ws, prune_from=PRUNE_FROM_LABELS):
    """The k best admissible label sequences of one sentence; returns their number c ≤ k.

    Writes sequence j (j < c) to ys[j·n:(j+1)·n] (int32) and its score s(y) to scores[j]
    (float64, computed in em's dtype), in non-increasing score order, ties in reversed-
    lexicographic order (smaller y_{n−1} first, then smaller y_{n−2}, …). c < k when fewer than k
    sequences are admissible (K^n < k, or constraints); c = 0 when none is (e.g. a forced tag
    with every transition into it forbidden). n = 0: one empty sequence of score 0.

    Algorithm: S[t, b] keeps the k best prefixes ending in tag b at t in that order. Any of the
    global k best sequences has its prefix among them: were k better prefixes ending at (t, b),
    each would complete with the same suffix into a sequence ranked before it (score no lower,
    and on a tie the suffixes are equal so the order is decided by the prefixes). Rank 0 equals
    ``kernels._forward`` + ``_backtrack`` exactly (same additions, first index wins).
    Cost O(n·K·(K + k log k)) (see :func:`_kbest_step`); k = 1 is a plain Viterbi pass
    (:func:`_viterbi_chain`), pruned from ``prune_from`` tags when tr has em's dtype (same
    result; ``pruned_viterbi.relax_pruned``); k > 1 keeps the dense O(K²) step per position.
    ``ws`` = :func:`kbest_workspace` (n_max ≥ n, same K and k).
    """
    has_pos, has_fixed, has_allowed, has_start, has_end = check_chain(
        em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed, allowed_start, allowed_end)
    S, P, C, TT, T, col, hv, ha, hr, fa, fr = ws
    if (k < 1 or fa.size < k or S.size < n * K * k or T.size < K * K or TT.size < K * K
            or hv.size < max(K, k) or col.size < 4 * K):
        raise ValueError("k must be >= 1 and ws a kbest_workspace(n_max >= n, K, k)")
    if ys.size < k * n or scores.size < k:
        raise ValueError("ys must hold k*n tags and scores k values")
    if n == 0:
        scores[0] = 0.0
        return 1
    if k == 1:
        pruned = K >= max(prune_from, 1) and tr.itemsize == em.itemsize
        best = _viterbi_chain(em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed,
                              allowed_start, allowed_end, (has_pos, has_fixed, has_allowed,
                                                           has_start, has_end),
                              ys, S, TT, T, col, pruned, hv, ha, hr)
        scores[0] = best
        return 1 if best > _NEG else 0
    f0 = fixed[0] if has_fixed else -1
    for b in range(K):
        S[b * k] = em[b] + start[b]
        ok = (f0 < 0 or b == f0) and (not has_start or allowed_start[b])
        C[b] = 1 if ok and S[b * k] > _NEG else 0
    if n > 1:
        _transpose_masked(tr, allowed, has_allowed, K, TT)
    for t in range(1, n):
        p = pos_index[t] if has_pos else -1
        f = fixed[t] if has_fixed else -1
        if p < 0:
            _kbest_step(t, K, k, em, TT, S, P, C, col, hv, ha, hr, f)
        else:
            _transpose_masked(pos_tr[p], allowed, has_allowed, K, T)
            _kbest_step(t, K, k, em, T, S, P, C, col, hv, ha, hr, f)
    last = (n - 1) * K
    m = 0
    for a in range(K):
        if C[last + a] > 0 and (not has_end or allowed_end[a]):
            hv[m] = S[(last + a) * k] + end[a]
            if hv[m] > _NEG:
                ha[m] = a
                hr[m] = 0
                m += 1
    _heapify(hv, ha, hr, m)
    cnt = 0
    while cnt < k and m > 0:
        a = ha[0]
        r = hr[0]
        scores[cnt] = hv[0]
        fa[cnt] = a
        fr[cnt] = r
        cnt += 1
        nxt = _NEG
        if r + 1 < C[last + a]:
            hv[0] = S[(last + a) * k + r + 1] + end[a]
            nxt = hv[0]
        m = _pop_or_advance(hv, ha, hr, m, nxt)
    for j in range(cnt):
        a = fa[j]
        r = fr[j]
        y = ys[j * n:(j + 1) * n]
        for t in range(n - 1, -1, -1):
            y[t] = a
            if t > 0:
                q = P[(t * K + a) * k + r]
                a = q // k
                r = q - a * k
    return cnt


@nb.njit(cache=True, nogil=True)
def kbest_batch(em, sent_ptr, K, tr, start, end, pos_tr, pos_index, fixed, allowed,
                allowed_start, allowed_end, k, prune_from=PRUNE_FROM_LABELS):
    """:func:`kbest_chain` over sentences e = tokens sent_ptr[e]..sent_ptr[e+1] of the flat
    emission table em[token·K + tag] (pos_index and fixed, when not empty, are indexed by token
    too). Returns (tags, scores, counts):

        tags[k·sent_ptr[e] + j·n_e + t]   tag of token t in the j-th best sequence of e (int32;
                                          −1 for j ≥ counts[e]), n_e = sent_ptr[e+1] − sent_ptr[e]
        scores[e·k + j]                   its score (float64; −∞ for j ≥ counts[e])
        counts[e]                         number of sequences found (int32)
    """
    n_s = sent_ptr.shape[0] - 1
    n_max = 0
    for e in range(n_s):
        n_max = max(n_max, sent_ptr[e + 1] - sent_ptr[e])
    n_tok = sent_ptr[n_s] if n_s >= 0 else 0
    ws = kbest_workspace(n_max, K, k, em)
    tags = np.full(k * n_tok, -1, np.int32)
    scores = np.full(max(n_s, 0) * k, _NEG)
    counts = np.zeros(max(n_s, 0), np.int32)
    for e in range(n_s):
        a0 = sent_ptr[e]
        n = sent_ptr[e + 1] - a0
        pi = pos_index[a0:a0 + n] if pos_index.size > 0 else pos_index
        fx = fixed[a0:a0 + n] if fixed.size > 0 else fixed
        counts[e] = kbest_chain(em[a0 * K:(a0 + n) * K], n, K, tr, start, end, pos_tr, pi, fx,
                                allowed, allowed_start, allowed_end, k,
                                tags[k * a0:k * (a0 + n)], scores[e * k:(e + 1) * k], ws,
                                prune_from)
    return tags, scores, counts


# ---------------------------------------------------------------------------------------------
# Python conveniences (one sentence, 2-D arrays) and label-scheme constraints
# ---------------------------------------------------------------------------------------------
def chain_args(em: np.ndarray, tr: np.ndarray, start: np.ndarray, end: np.ndarray,
               pos_tr: np.ndarray | None, pos_index: np.ndarray | None,
               fixed: np.ndarray | None, allowed: np.ndarray | None,
               allowed_start: np.ndarray | None, allowed_end: np.ndarray | None
               ) -> tuple[int, int, list[np.ndarray]]:
    """One sentence's arrays as the chain kernels take them: ``(n, K, arrays)``, arrays being
    em, tr, start, end flattened (float32 when em is float32, else float64), then pos_tr,
    pos_index, fixed, allowed, allowed_start, allowed_end, each the empty constraint of
    :func:`no_constraints` when None."""
    em = np.asarray(em)
    dt = np.float32 if em.dtype == np.float32 else np.float64
    if em.ndim != 2:
        raise ValueError(f"em must be a 2-D (n, K) array, got shape {em.shape}")
    n, K = em.shape
    empty = no_constraints()
    arrays = [np.ascontiguousarray(em, dt).reshape(-1),
              np.ascontiguousarray(tr, dt).reshape(-1),
              np.ascontiguousarray(start, dt).reshape(-1),
              np.ascontiguousarray(end, dt).reshape(-1)]
    given = (pos_tr, pos_index, fixed, allowed, allowed_start, allowed_end)
    for j, (v, e) in enumerate(zip(given, empty, strict=True)):
        if v is None:
            arrays.append(e)
        elif j == 0:
            arrays.append(np.ascontiguousarray(v, np.float64).reshape(len(v), -1))
        else:
            arrays.append(np.ascontiguousarray(v, e.dtype).reshape(-1))
    return n, K, arrays


def kbest(em: np.ndarray, tr: np.ndarray, start: np.ndarray, end: np.ndarray, k: int, *,
          pos_tr: np.ndarray | None = None, pos_index: np.ndarray | None = None,
          fixed: np.ndarray | None = None, allowed: np.ndarray | None = None,
          allowed_start: np.ndarray | None = None, allowed_end: np.ndarray | None = None,
          ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kbest_chain` for one sentence given as em (n, K), tr (K, K), start (K), end (K):
    (int32 sequences (c, n), float64 scores (c,)), best first, c ≤ k."""
    n, K, a = chain_args(em, tr, start, end, pos_tr, pos_index, fixed, allowed,
                          allowed_start, allowed_end)
    k = int(k)
    ys = np.empty(k * n, np.int32)
    scores = np.empty(k, np.float64)
    c = kbest_chain(a[0], n, K, *a[1:], k, ys, scores, kbest_workspace(n, K, k, a[0]))
    return ys[:c * n].reshape(c, n), scores[:c]


SCHEMES = ("iob1", "iob2", "bio", "bioes", "iobes")


def scheme_transitions(labels: list[str], scheme: str) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """(allowed K×K, allowed_start K, allowed_end K) boolean arrays of a label scheme over the
    tag set ``labels`` (``P-T`` = chunk tag P, type T, split as conlleval does; ``O`` = outside).

    * ``iob2``/``bio``: I-X may follow only B-X or I-X, and no sentence starts with I-X.
    * ``bioes``/``iobes``: B-X → I-X | E-X and I-X → I-X | E-X (an open chunk continues with
      its own type), while E-X, S-X and O → B-* | S-* | O; a sentence starts with B, S or O and
      ends with E, S or O.
    * ``iob1``: everything allowed. In IOB1 a chunk starts with I-X, and B-X appears only to
      separate two adjacent chunks of type X, so I-X after O or after I-Y (Y ≠ X) is the normal
      way to open a chunk; and conlleval (what scores IOB1 data) reads a B-X anywhere as a
      chunk start, so no tag sequence is ill-formed.

    A label whose tag is not part of the scheme raises OptionError (like --label-scheme).
    """
    key = scheme.lower()
    key = {"bio": "iob2", "iobes": "bioes"}.get(key, key)
    if key not in ("iob1", "iob2", "bioes"):
        raise OptionError(f"unknown label scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    tags = {"iob1": ("O", "B", "I"), "iob2": ("O", "B", "I"),
            "bioes": ("O", "B", "I", "E", "S")}[key]
    parts = [split_label(lab) for lab in labels]
    for lab, (p, _) in zip(labels, parts, strict=True):
        if p not in tags:
            raise OptionError(f"label {lab!r} is not part of the {scheme.upper()} scheme "
                              f"(tags {', '.join(tags)})")
    K = len(labels)
    allowed = np.ones((K, K), np.bool_)
    first = np.ones(K, np.bool_)
    last = np.ones(K, np.bool_)
    if key == "iob2":
        for b, (pb, tb) in enumerate(parts):
            if pb == "I":
                first[b] = False
                for a, (pa, ta) in enumerate(parts):
                    allowed[a, b] = pa in ("B", "I") and ta == tb
    elif key == "bioes":
        for a, (pa, ta) in enumerate(parts):
            open_chunk = pa in ("B", "I")
            last[a] = not open_chunk
            for b, (pb, tb) in enumerate(parts):
                inside = pb in ("I", "E")
                allowed[a, b] = (inside and ta == tb) if open_chunk else not inside
            first[a] = pa not in ("I", "E")
    return allowed, first, last


def training_scheme(tag_sequences, label_scheme: str = "auto") -> str | None:
    """The scheme whose rules (:func:`scheme_transitions`) decoding may enforce for a model
    trained on ``tag_sequences`` read with ``label_scheme``: ``"iob2"``, ``"bioes"``, or None
    when no tag sequence is ill-formed (IOB1, or tags outside B/I/O).

    An explicit ``iob2``/``bio``/``bioes``/``iobes`` is taken as given, ``iob1`` is None;
    ``auto`` and ``conlleval`` resolve as :func:`~demidcd.tasks.chain.chunks.resolve_scheme` does
    (BIOES when S- tags occur), and IOB data is IOB2 unless chunks open with I-X (after O,
    after another type, or first in a sentence) in more than 1% of its chunks: IOB1 opens
    nearly every chunk so, while IOB2 corpora have a few such slips (CoNLL-2002 Spanish
    esp.train: 1 of about 18,800 entities).
    """
    from .chunks import resolve_scheme

    key = label_scheme.lower()
    key = {"bio": "iob2", "iobes": "bioes"}.get(key, key)
    if key in ("iob2", "bioes"):
        return key
    if key == "iob1":
        return None
    tag_sequences = [list(s) for s in tag_sequences]
    labels = {t for s in tag_sequences for t in s if isinstance(t, str)}
    labels.update(x for s in tag_sequences for t in s if t is not None
                  and not isinstance(t, str) for x in t)  # (partial labels: sets' members)
    if resolve_scheme(labels, key) == "bioes":
        return "bioes"
    if any(split_label(t)[0] not in ("O", "B", "I") for t in labels):
        return None
    chunks = opened_by_i = 0
    for s in tag_sequences:
        prev = ("O", "")
        for lab in s:
            if not isinstance(lab, str):  # an unknown or set cell: anything may follow
                prev = ("?", "")
                continue
            cur = split_label(lab)
            if prev[0] == "?" and cur[0] == "I":
                prev = cur
                continue
            if cur[0] == "B":
                chunks += 1
            elif cur[0] == "I" and not (prev[0] in ("B", "I") and prev[1] == cur[1]):
                chunks += 1
                opened_by_i += 1
            prev = cur
    return "iob2" if 100 * opened_by_i <= chunks else None
