"""Max-marginals and margins (confidence scores) of first-order chains, under the scores,
layout and constraints of :mod:`.decoding`:

    M[t, k] = max_{y: y_t = k} s(y)

by a forward and a backward max-plus pass (float64, −∞ for the inadmissible), then per-token
margins M[t, ŷ_t] − max_{k≠ŷ_t} M[t, k] of a tagging ŷ and its sentence margin (their
minimum). For the best tagging every margin is ≥ 0 and the sentence margin is the best score
minus the second best.

* :func:`max_marginals_chain` – M of one sentence; :func:`confidence_batch` – the margins of a
  batch of sentences; :func:`token_margins` / :func:`margins` – margins from M.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .decoding import check_chain

_NEG = -np.inf
_POS = np.inf
# fastmath for the max-plus loops without "ninf" (−∞ is a real value here): no NaNs, signed
# zeros and reassociation let LLVM vectorise the max reductions
_MAXPLUS_FLAGS = {"nnan", "nsz", "reassoc"}


@nb.njit(cache=True, nogil=True, fastmath=_MAXPLUS_FLAGS)
def _maxplus_forward(prev, trv, allowed, has_allowed, K, out):
    """out[b] = max_a prev[a] + trans(a, b) (−∞ where a → b is forbidden), row-major over a."""
    for b in range(K):
        out[b] = _NEG
    for a in range(K):
        pa = prev[a]
        if not pa > _NEG:
            continue
        tra = trv[a * K:(a + 1) * K]
        if has_allowed:
            al = allowed[a * K:(a + 1) * K]
            for b in range(K):
                v = pa + tra[b] if al[b] else _NEG
                o = out[b]
                out[b] = v if v > o else o
        else:
            for b in range(K):
                v = pa + tra[b]
                o = out[b]
                out[b] = v if v > o else o


@nb.njit(cache=True, nogil=True, fastmath=_MAXPLUS_FLAGS)
def _maxplus_backward(g, trv, allowed, has_allowed, K, out):
    """out[a] = max_b trans(a, b) + g[b] (−∞ where a → b is forbidden), a reduction per row."""
    for a in range(K):
        tra = trv[a * K:(a + 1) * K]
        m = _NEG
        if has_allowed:
            al = allowed[a * K:(a + 1) * K]
            for b in range(K):
                v = tra[b] + g[b] if al[b] else _NEG
                m = v if v > m else m
        else:
            for b in range(K):
                v = tra[b] + g[b]
                m = v if v > m else m
        out[a] = m


@nb.njit(cache=True, nogil=True)
def _masked_emissions(em, t, K, f, out):
    """out[b] = em[t, b] as float64, −∞ for b ≠ f when token t is forced to f ≥ 0."""
    for b in range(K):
        out[b] = em[t * K + b] if (f < 0 or b == f) else _NEG


@nb.njit(cache=True, nogil=True)
def max_marginals_chain(em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed,
                        allowed_start, allowed_end, M, scratch):
    """Max-marginals of one sentence: M[t·K + k] = max_{y admissible, y_t = k} s(y) (float64,
    −∞ when no admissible sequence has y_t = k); returns max_y s(y) (−∞ if none; 0 if n = 0).

    With the masked scores ẽm (−∞ off a forced tag), trans̃_t, start̃, end̃ (−∞ where forbidden):

        α[0, b] = ẽm[0, b] + start̃[b],   α[t, b] = ẽm[t, b] + max_a α[t−1, a] + trans̃_t(a, b)
        β[n−1, a] = end̃[a],   β[t, a] = max_b trans̃_{t+1}(a, b) + ẽm[t+1, b] + β[t+1, b]
        M[t, k] = α[t, k] + β[t, k]

    (α: best prefix ending in k at t, β: best suffix after it). β is built in M from the end,
    then α is carried in two rows and added. ``scratch``: float64, ≥ 3K. Cost 2·n·K².
    """
    has_pos, has_fixed, has_allowed, has_start, has_end = check_chain(
        em, n, K, tr, start, end, pos_tr, pos_index, fixed, allowed, allowed_start, allowed_end)
    if M.size < n * K or scratch.size < 3 * K:
        raise ValueError("M must hold n*K values and scratch 3*K")
    if n == 0:
        return 0.0
    g = scratch[0:K]
    cur = scratch[K:2 * K]
    prv = scratch[2 * K:3 * K]
    last = (n - 1) * K
    for a in range(K):
        M[last + a] = end[a] if (not has_end or allowed_end[a]) else _NEG
    for t in range(n - 2, -1, -1):
        _masked_emissions(em, t + 1, K, fixed[t + 1] if has_fixed else -1, g)
        nxt_row = (t + 1) * K
        for b in range(K):
            g[b] += M[nxt_row + b]
        p = pos_index[t + 1] if has_pos else -1
        if p < 0:
            _maxplus_backward(g, tr, allowed, has_allowed, K, M[t * K:(t + 1) * K])
        else:
            _maxplus_backward(g, pos_tr[p], allowed, has_allowed, K, M[t * K:(t + 1) * K])
    _masked_emissions(em, 0, K, fixed[0] if has_fixed else -1, prv)
    for b in range(K):
        prv[b] += start[b] if (not has_start or allowed_start[b]) else _NEG
        M[b] += prv[b]
    for t in range(1, n):
        p = pos_index[t] if has_pos else -1
        if p < 0:
            _maxplus_forward(prv, tr, allowed, has_allowed, K, cur)
        else:
            _maxplus_forward(prv, pos_tr[p], allowed, has_allowed, K, cur)
        _masked_emissions(em, t, K, fixed[t] if has_fixed else -1, g)
        row = M[t * K:(t + 1) * K]
        for b in range(K):
            cur[b] += g[b]
            row[b] += cur[b]
        prv, cur = cur, prv
    best = _NEG
    for b in range(K):
        best = max(best, M[b])
    return best


@nb.njit(cache=True, nogil=True)
def token_margins(M, n, K, y, margins):
    """margins[t] = M[t, y_t] − max_{k≠y_t} M[t, k]; returns the sentence margin min_t margins[t].

    +∞ where no other tag is admissible at t (K = 1, a forced token), −∞ where y_t is not
    admissible (or y_t = −1). For y the (constrained) Viterbi path, margins[t] ≥ 0 and is 0
    exactly when another sequence with a different tag at t ties the best; the sentence margin
    then equals best − second-best score (the second best differs from ŷ at some t, where its
    score is at most max_{k≠ŷ_t} M[t, k], and each such max is the score of a sequence ≠ ŷ),
    +∞ when ŷ is the only admissible sequence (or n = 0). Exact in exact arithmetic; in floating
    point, ties that hold exactly (e.g. integer weights) give exactly 0, and otherwise the
    margin is accurate to a few ulps of the scores.
    """
    sm = _POS
    for t in range(n):
        yt = y[t]
        row = M[t * K:(t + 1) * K]
        own = row[yt] if 0 <= yt < K else _NEG
        other = _NEG
        for k in range(K):
            if k != yt and row[k] > other:
                other = row[k]
        if not own > _NEG:
            mt = _NEG
        elif not other > _NEG:
            mt = _POS
        else:
            mt = own - other
        margins[t] = mt
        sm = min(sm, mt)
    return sm


@nb.njit(cache=True, nogil=True)
def confidence_batch(em, sent_ptr, K, tr, start, end, pos_tr, pos_index, fixed, allowed,
                     allowed_start, allowed_end, y, keep_table):
    """Max-marginals and margins of decoded tags ``y`` (int32 per token) for every sentence of
    the flat emission table (layout of :func:`kbest_batch`). Returns (margins, sentence_margins,
    M): margins[token] and sentence_margins[e] as :func:`token_margins` (float64), and
    M[token·K + k] (float64) when ``keep_table`` (else an empty array)."""
    n_s = sent_ptr.shape[0] - 1
    n_max = 0
    for e in range(n_s):
        n_max = max(n_max, sent_ptr[e + 1] - sent_ptr[e])
    n_tok = sent_ptr[n_s] if n_s >= 0 else 0
    margins = np.empty(n_tok, np.float64)
    sent = np.empty(max(n_s, 0), np.float64)
    table = np.empty(n_tok * K if keep_table else 0, np.float64)
    buf = np.empty(n_max * K, np.float64)
    scratch = np.empty(3 * K, np.float64)
    for e in range(n_s):
        a0 = sent_ptr[e]
        n = sent_ptr[e + 1] - a0
        M = table[a0 * K:(a0 + n) * K] if keep_table else buf[:n * K]
        pi = pos_index[a0:a0 + n] if pos_index.size > 0 else pos_index
        fx = fixed[a0:a0 + n] if fixed.size > 0 else fixed
        max_marginals_chain(em[a0 * K:(a0 + n) * K], n, K, tr, start, end, pos_tr, pi, fx,
                            allowed, allowed_start, allowed_end, M, scratch)
        sent[e] = token_margins(M, n, K, y[a0:a0 + n], margins[a0:a0 + n])
    return margins, sent, table


def margins(M: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """:func:`token_margins` of tags y under max-marginals M (n, K): (per-token, sentence)."""
    M = np.ascontiguousarray(M, np.float64)
    n, K = M.shape
    out = np.empty(n, np.float64)
    s = token_margins(M.reshape(-1), n, K, np.ascontiguousarray(y, np.int32).reshape(-1), out)
    return out, float(s)
