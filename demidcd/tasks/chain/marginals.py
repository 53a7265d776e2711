"""Forward-backward over the chain scores of :mod:`.kernels`: log Z, per-token and pairwise
marginals, and the gradient of the negative log-likelihood of a linear-chain CRF.

The scores are exactly those Viterbi reads (:func:`~.kernels.emissions`,
:func:`~.kernels.transitions`, :func:`~.kernels.b_transitions`): the emission s_t(k), the
START → y_0 and y_{n-1} → END transitions, and M_t[j, k] = T[j, k] + Σ_g b_{t,g} w_B[g, j, k] at
t ≥ 1. With them

    p(y | x) = exp(w·Φ(x, y)) / Z(x),   log Z(x) = logsumexp_y w·Φ(x, y)

and, for a sentence with gold tags y*, −log p(y* | x) = log Z − w·Φ(x, y*) has the gradient
E_p[Φ(x, y)] − Φ(x, y*): the unigram block gets Σ_t u_{t,f} (p_t(k) − [k = y*_t]), the
transitions the pairwise marginals p_t(j, k) (and p_0(k) from START, p_{n-1}(k) into END)
minus the gold ones, and each B feature b_{t,g} (p_t(j, k) − [j, k = y*_{t-1}, y*_t]).

The recursions are scaled (Rabiner 1989, :func:`scaled_forward_backward`): the emissions
exp(s_t − max s_t), K exps per token, and the K² inner products run on E = exp(M − max M),
computed once per call for the shared T and once per position for the B matrices; the forward
vector is renormalised to sum 1 at every position and log Z collects the logarithms of those
sums and the shifts: one logarithm per position, no overflow whatever the scale of w. Where
the scaled recursion underflows all the same (a position whose every admissible transition lies
more than ~745 below the largest entry of its matrix: weights in the hundreds, or a sentence so
long that the shifts drift), the sentence is done again in log space
(:func:`log_forward_backward`, K² exps per position), so log Z and the marginals stay those of
the exact recursion; −inf only when no tagging is admissible. Forced
labels (``fixed``, one tag id or −1 per token) set the other tags' emissions to −inf (their
exp 0): the marginals and log Z are then those of the taggings that keep them (constrained
marginals).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from .kernels import (
    b_transitions,
    feature_kinds,
    sentence_span,
    token_emissions,
    token_scatter,
    transitions,
)
from .partial import partial_labels
from .records import b_sizes, max_sizes

_NEG_INF = -np.inf
_FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}  # fastmath without nnan/ninf: forced
# labels and constraints put −inf in the scores, which must stay exact; reassociation lets the
# K-long sums vectorise


@nb.njit(cache=True, nogil=True)
def exp_shifted(m, E, KK):
    """E[:KK] = exp(m[:KK] − max m); returns max m."""
    mx = m[0]
    for j in range(1, KK):
        if m[j] > mx:
            mx = m[j]
    for j in range(KK):
        E[j] = np.exp(m[j] - mx)
    return mx


@nb.njit(cache=True, nogil=True)
def _shifted_row(x, off, K, out, o):
    """out[o + k] = exp(x[off + k] − c), k < K, with c = max_k x[off + k]; returns c (−inf: all
    −inf, those entries of out 0)."""
    c = x[off]
    for k in range(1, K):
        if x[off + k] > c:
            c = x[off + k]
    if c == _NEG_INF:
        for k in range(K):
            out[o + k] = 0.0
        return c
    for k in range(K):
        out[o + k] = np.exp(x[off + k] - c)
    return c


@nb.njit(cache=True, nogil=True)
def _force(em, n, K, fixed, f0):
    """em[t·K + k] = −inf for every k ≠ fixed[f0 + t] where fixed[f0 + t] ≥ 0."""
    if fixed.shape[0] == 0:
        return
    for t in range(n):
        y = fixed[f0 + t]
        if y >= 0:
            for k in range(K):
                if k != y:
                    em[t * K + k] = _NEG_INF


@nb.njit(cache=True, nogil=True)
def position_matrix(t, slots, has_b, Etr, trmax, Eb, bmax, KK):
    """(E, max) of the transition matrix into position t: the shared exp(T − max T), or the
    B-feature matrix of t when B features fire there."""
    if has_b:
        s = slots[t]
        if s >= 0:
            return Eb[s * KK:(s + 1) * KK], bmax[s]
    return Etr, trmax


@nb.njit(cache=True, nogil=True)
def fb_workspace(w, K, X, examples):
    """(em, A, B, trb, Eb, bmax, slots, u, v, pair, P, c) scratch for the examples
    (:func:`scaled_forward_backward`'s A, B, P: n·K, c: n)."""
    max_n, _ = max_sizes(X.sent_ptr, X.feat_ptr, examples)
    max_bpos, _ = b_sizes(X.sent_ptr, X.bfeat_ptr, examples)
    m = max(max_n, 1) * K
    return (np.empty(m), np.empty(m), np.empty(m), np.empty(max_bpos * K * K),
            np.empty(max_bpos * K * K), np.empty(max(max_bpos, 1)),
            np.empty(max(max_n, 1), np.int32), np.empty(K), np.empty(K), np.empty(K * K),
            np.empty(m), np.empty(max(max_n, 1)))


@nb.njit(cache=True, nogil=True, inline="always")
def block_offsets(F, K):
    """(K + 1, K², where T starts in w (F·K), where B starts in w (F·K + (K + 1)²))."""
    K1 = K + 1
    return K1, K * K, F * K, F * K + K1 * K1


@nb.njit(cache=True, nogil=True)
def chain_tables(w, F, K):
    """(tr, start, end, Etr, trmax) of w: the transitions (:func:`~.kernels.transitions`)
    and E = exp(T − max T) with its shift."""
    KK = K * K
    tr, _, start, end = transitions(w, F, K)
    Etr = np.empty(KK)
    trmax = exp_shifted(tr, Etr, KK)
    return tr, start, end, Etr, trmax


@nb.njit(cache=True, nogil=True)
def sentence_scores(w, F, K, X, a, n, tr, em, trb, Eb, bmax, slots, fixed, f0):
    """Emissions (forced labels applied) and the B matrices with their exps of tokens
    a..a+n−1; returns whether X has B features."""
    KK = K * K
    token_emissions(w, K, X, a, n, em)
    _force(em, n, K, fixed, f0)
    has_b = X.bfeat_ptr.shape[0] > 0
    if has_b:
        nbp = b_transitions(w, K, F * K + (K + 1) * (K + 1), X, a, n, tr, trb, slots)
        for s in range(nbp):
            bmax[s] = exp_shifted(trb[s * KK:(s + 1) * KK], Eb[s * KK:(s + 1) * KK], KK)
    return has_b


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def scaled_forward_backward(em, n, K, start, end, Etr, trmax, Eb, bmax, slots, has_b, A, B, P,
                            c, u, v, O):
    """Forward-backward with scaling (Rabiner 1989) instead of log space: P[t·K + k] =
    exp(s_t(k) − max_k s_t), A[t] the forward vector normalised to sum 1 by c[t], B the backward
    vector scaled so that p(y_t = k | x) = A[t, k]·B[t, k] and p(y_{t−1} = j, y_t = k | x) =
    A[t−1, j]·E_t[j, k]·P[t, k]·B[t, k] / c[t] (E_t = exp(M_t − max M_t)). K exps per token
    and one logarithm per position, against about 5K exps and 2K logarithms in log space.
    With a non-empty ``O`` (K², and no B features: E_t = E for every t) the backward pass
    also adds Σ_{t≥1} A[t−1, j]·P[t, k]·B[t, k] / c[t] to O[j·K + k], so that E ∘ O sums the
    pairwise marginals of every position (one pass instead of a second one per position).
    Returns log Z (−inf when no tagging is admissible; A, B are then undefined)."""
    KK = K * K
    logz = 0.0
    for t in range(n):  # P[t] = exp(s_t − max s_t)
        m = _shifted_row(em, t * K, K, P, t * K)
        if m == _NEG_INF:
            return _NEG_INF
        logz += m
    ms = _shifted_row(start, 0, K, u, 0)
    if ms == _NEG_INF:
        return _NEG_INF
    tot = 0.0
    for k in range(K):
        x = u[k] * P[k]
        A[k] = x
        tot += x
    if not tot > 0.0:
        return _NEG_INF
    c[0] = tot
    inv = 1.0 / tot
    for k in range(K):
        A[k] *= inv
    logz += ms
    scale = tot  # Π c[t], folded into logz before it leaves [1e-250, 1e250]
    for t in range(1, n):
        if has_b and slots[t] >= 0:  # (two calls, so that without B features E is Etr alone)
            s = slots[t]
            tot = _forward_step(A, P, c, v, Eb, s * KK, t, K)
            logz += bmax[s]
        else:
            tot = _forward_step(A, P, c, v, Etr, 0, t, K)
            logz += trmax
        if not tot > 0.0:
            return _NEG_INF
        if tot < 1e-50:  # (the product could leave the normal range in one step)
            logz += np.log(tot)
        else:
            scale *= tot
        if not 1e-250 < scale < 1e250:
            logz += np.log(scale)
            scale = 1.0
    me = _shifted_row(end, 0, K, u, 0)
    if me == _NEG_INF:
        return _NEG_INF
    d = 0.0
    o = (n - 1) * K
    for k in range(K):
        d += A[o + k] * u[k]
    if not d > 0.0:
        return _NEG_INF
    logz += me + np.log(scale) + np.log(d)
    inv = 1.0 / d
    for k in range(K):
        B[o + k] = u[k] * inv
    if not has_b:  # (two loops, so that without B features E is Etr alone)
        for t in range(n - 1, 0, -1):
            _backward_step(A, B, P, c, v, Etr, 0, t, K, O)
    else:
        none = O[:0]  # (the sums need E_t = Etr everywhere)
        for t in range(n - 1, 0, -1):
            s = slots[t]
            if s >= 0:
                _backward_step(A, B, P, c, v, Eb, s * KK, t, K, none)
            else:
                _backward_step(A, B, P, c, v, Etr, 0, t, K, none)
    return logz


@nb.njit(cache=True, nogil=True)
def _matrix_entry(t, slots, has_b, tr, trb, KK):
    """Offset and array of M_t (the B matrix of t when B features fire there, else T)."""
    if has_b:
        s = slots[t]
        if s >= 0:
            return trb, s * KK
    return tr, 0


@nb.njit(cache=True, nogil=True)
def log_forward_backward(em, n, K, start, end, tr, trb, slots, has_b, A, B, u):
    """Forward-backward in log space (the fallback of :func:`forward_backward`): A[t·K + k] =
    log α_t(k) = s_t(k) + logsumexp_j (log α_{t−1}(j) + M_t[j, k]) (α_0 = START + s_0),
    B[t·K + k] = log β_t(k) (β_{n−1} = END, log β_{t−1}(j) = logsumexp_k (M_t[j, k] + s_t(k) +
    log β_t(k))), so that p(y_t = k) = exp(A + B − log Z) and p(y_{t−1} = j, y_t = k) =
    exp(A[t−1, j] + M_t[j, k] + s_t(k) + B[t, k] − log Z). Returns log Z = logsumexp_k
    (log α_{n−1}(k) + END(k)) (−inf when no tagging is admissible). K² exps per position."""
    KK = K * K
    for k in range(K):
        A[k] = start[k] + em[k]
    for t in range(1, n):
        M, m0 = _matrix_entry(t, slots, has_b, tr, trb, KK)
        pa, o = (t - 1) * K, t * K
        for k in range(K):
            mx = _NEG_INF
            for j in range(K):
                x = A[pa + j] + M[m0 + j * K + k]
                if x > mx:
                    mx = x
            if mx == _NEG_INF:
                A[o + k] = _NEG_INF
                continue
            acc = 0.0
            for j in range(K):
                acc += np.exp(A[pa + j] + M[m0 + j * K + k] - mx)
            A[o + k] = em[o + k] + mx + np.log(acc)
    o = (n - 1) * K
    mx = _NEG_INF
    for k in range(K):
        B[o + k] = end[k]
        x = A[o + k] + end[k]
        if x > mx:
            mx = x
    if mx == _NEG_INF or mx != mx:
        return _NEG_INF
    acc = 0.0
    for k in range(K):
        acc += np.exp(A[o + k] + end[k] - mx)
    logz = mx + np.log(acc)
    for t in range(n - 1, 0, -1):
        M, m0 = _matrix_entry(t, slots, has_b, tr, trb, KK)
        o, pa = t * K, (t - 1) * K
        for k in range(K):
            u[k] = em[o + k] + B[o + k]
        for j in range(K):
            r = m0 + j * K
            mx = _NEG_INF
            for k in range(K):
                x = M[r + k] + u[k]
                if x > mx:
                    mx = x
            if mx == _NEG_INF:
                B[pa + j] = _NEG_INF
                continue
            acc = 0.0
            for k in range(K):
                acc += np.exp(M[r + k] + u[k] - mx)
            B[pa + j] = mx + np.log(acc)
    return logz


@nb.njit(cache=True, nogil=True)
def forward_backward(em, n, K, start, end, tr, Etr, trmax, trb, Eb, bmax, slots, has_b, A, B,
                     P, c, u, v, O):
    """(log Z, in_log_space): :func:`scaled_forward_backward`, and where it underflows (it
    returns −inf though a tagging may be admissible) :func:`log_forward_backward`, whose
    tables are then in log space (read them through :func:`token_marginals` and
    :func:`pair_marginals`, which take the flag). ``O`` is added to only by the scaled pass."""
    logz = scaled_forward_backward(em, n, K, start, end, Etr, trmax, Eb, bmax, slots, has_b,
                                   A, B, P, c, u, v, O)
    if logz != _NEG_INF:
        return logz, False
    logz = log_forward_backward(em, n, K, start, end, tr, trb, slots, has_b, A, B, u)
    return logz, True


@nb.njit(cache=True, nogil=True, inline="always")
def token_marginals(A, B, t, K, logz, logspace, out):
    """out[k] = p(y_t = k | x) from :func:`forward_backward`'s tables."""
    o = t * K
    if logspace:
        for k in range(K):
            out[k] = np.exp(A[o + k] + B[o + k] - logz)
    else:
        for k in range(K):
            out[k] = A[o + k] * B[o + k]


@nb.njit(cache=True, nogil=True)
def pair_marginals(t, K, slots, has_b, tr, trb, Etr, Eb, bmax, em, A, B, P, c, v, logz,
                   logspace, out):
    """out[j·K + k] = p(y_{t−1} = j, y_t = k | x), t ≥ 1, from :func:`forward_backward`'s
    tables (:func:`pairwise_marginals` on the scaled ones)."""
    KK = K * K
    if not logspace:
        E, _ = position_matrix(t, slots, has_b, Etr, 0.0, Eb, bmax, KK)
        pairwise_marginals(t, K, E, A, B, P, c, v, out)
        return
    M, m0 = _matrix_entry(t, slots, has_b, tr, trb, KK)
    o, pa = t * K, (t - 1) * K
    for k in range(K):
        v[k] = em[o + k] + B[o + k] - logz
    for j in range(K):
        aj = A[pa + j]
        for k in range(K):
            out[j * K + k] = np.exp(aj + M[m0 + j * K + k] + v[k])



@nb.njit(cache=True, nogil=True, fastmath=_FAST, inline="always")
def _forward_step(A, P, c, v, E, e0, t, K):
    """A[t] = (A[t−1] E)·P[t] normalised to sum 1 (E: the K×K matrix at E[e0:]); c[t] = the
    sum before normalising, returned (not > 0: no admissible tagging)."""
    for k in range(K):
        v[k] = 0.0
    pa = (t - 1) * K
    for j in range(K):
        aj = A[pa + j]
        if aj == 0.0:
            continue
        r = e0 + j * K
        for k in range(K):
            v[k] += aj * E[r + k]
    tot = 0.0
    o = t * K
    for k in range(K):
        x = v[k] * P[o + k]
        A[o + k] = x
        tot += x
    if tot > 0.0:
        c[t] = tot
        inv = 1.0 / tot
        for k in range(K):
            A[o + k] *= inv
    return tot


@nb.njit(cache=True, nogil=True, fastmath=_FAST, inline="always")
def _backward_step(A, B, P, c, v, E, e0, t, K, O):
    """B[t−1] = E (P[t]·B[t] / c[t]); with a non-empty O also O[j·K + k] += A[t−1, j]·v[k]."""
    inv = 1.0 / c[t]
    o = t * K
    for k in range(K):
        v[k] = P[o + k] * B[o + k] * inv
    pa = (t - 1) * K
    for j in range(K):
        r = e0 + j * K
        acc = 0.0
        for k in range(K):
            acc += E[r + k] * v[k]
        B[pa + j] = acc
    if O.shape[0] > 0:
        for j in range(K):
            aj = A[pa + j]
            for k in range(K):
                O[j * K + k] += aj * v[k]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def pairwise_marginals(t, K, E, A, B, P, c, v, out):
    """out[j·K + k] = p(y_{t−1} = j, y_t = k | x) = A[t−1, j]·E[j, k]·P[t, k]·B[t, k] / c[t]
    for t ≥ 1, from :func:`scaled_forward_backward`'s tables (E: position t's exp-shifted
    transition matrix; v: K scratch)."""
    inv = 1.0 / c[t]
    for k in range(K):
        v[k] = P[t * K + k] * B[t * K + k] * inv
    for j in range(K):
        aj = A[(t - 1) * K + j]
        for k in range(K):
            out[j * K + k] = aj * E[j * K + k] * v[k]


@nb.njit(cache=True, nogil=True, inline="always")
def _add_scaled(dst, src, v, m):
    """dst[j] += v · src[j], j < m (a feature's value v, 1.0 for binary features)."""
    for j in range(m):
        dst[j] += v * src[j]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nll_gradient_kernel(w, F, K, X, gold, examples, grad, ctl):
    """Σ_i −log p(y*_i | x_i) over ``examples`` (gold tags ``gold``, one per token), with its
    gradient Σ_i E_p[Φ(x_i, y)] − Φ(x_i, y*_i) added to ``grad`` (float64, len(w)); the
    marginals by :func:`forward_backward`. ``ctl`` (int64, 3): ctl[0] ≠ 0 asks the kernel to
    stop before its next sentence (a stop request: the sum and gradient are then partial);
    ctl[1] counts the sentences done, ctl[2] the tokens whose most probable label (the
    marginals' argmax) is not the gold one."""
    return nll_gradient_into(w, F, K, X, gold, NO_PARTIAL, examples, grad, ctl,
                             gradient_workspace(F, K, X, examples))


NO_PARTIAL = partial_labels(None, None)
"""Every token labelled (the kernels' fully labelled path)."""


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def partial_nll_gradient_kernel(w, F, K, X, gold, part, examples, grad, ctl):
    """:func:`nll_gradient_kernel` on partially labelled data (``part``, a
    :class:`~.partial.PartialLabels`): a sentence whose every token has one label as there; a
    sentence with unknown or set cells adds the partial-label loss (Tsuboi et al. 2008)

        −log Σ_{y ∈ Y(a)} p(y | x) = log Z(x) − log Z_a(x),

    Z_a summing exp(w·Φ(x, y)) over the taggings y consistent with the annotation a (y_t in
    the labels token t admits, and, under a label scheme, obeying its rules), and its gradient
    E_p[Φ(x, y)] − E_{p(·|x, y ∈ Y(a))}[Φ(x, y)]: a free and a constrained forward-backward
    (the constrained one over the emissions with −inf outside the admitted labels and the
    scheme's forbidden transitions at −inf). With every token labelled Y(a) = {y*} and this
    is −log p(y* | x), computed as :func:`nll_gradient_kernel` does."""
    return nll_gradient_into(w, F, K, X, gold, part, examples, grad, ctl,
                             gradient_workspace(F, K, X, examples))


@nb.njit(cache=True, nogil=True)
def gradient_workspace(F, K, X, examples):
    """The scratch of :func:`nll_gradient_into` for ``examples`` (or any of their subsets):
    the chain tables (tr, start, end, Etr: K², K, K, K²), the sums (gT, O: K², gS, gE: K) and
    :func:`fb_workspace`'s arrays, allocated once (per sentence they would cost more than the
    sentence itself at thousands of labels: K² each)."""
    KK = K * K
    return (np.empty(KK), np.empty(K), np.empty(K), np.empty(KK), np.empty(KK), np.empty(KK),
            np.empty(K), np.empty(K)) + fb_workspace(np.empty(0), K, X, examples) + (
        np.empty(KK), np.empty(K), np.empty(K), np.empty(KK))  # the constrained tables


@nb.njit(cache=True, nogil=True)
def _chain_tables_into(w, F, K, tr, start, end, Etr):
    """:func:`chain_tables` into the given arrays; returns the shift max T."""
    base, K1 = F * K, K + 1
    for a in range(K):
        for b in range(K):
            tr[a * K + b] = w[base + a * K1 + b]
        end[a] = w[base + a * K1 + K]
        start[a] = w[base + K * K1 + a]
    return exp_shifted(tr, Etr, K * K)


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def nll_gradient_into(w, F, K, X, gold, part, examples, grad, ctl, ws):
    """:func:`partial_nll_gradient_kernel` (``part`` empty: :func:`nll_gradient_kernel`) in
    the scratch ``ws`` of :func:`gradient_workspace`."""
    K1, KK, tbase, bbase = block_offsets(F, K)
    tr, start, end, Etr, gT, O, gS, gE, em, A, B, trb, Eb, bmax, slots, u, v, pair, P, c, \
        trc, startc, endc, Etrc = ws
    if ctl[0] != 0:
        return 0.0
    trmax = _chain_tables_into(w, F, K, tr, start, end, Etr)
    partial = part.ptr.shape[0] > 0
    if partial:
        _masked_tables(part, tr, start, end, Etr, K, trc, startc, endc, Etrc)
    gT[:] = 0.0  # the pairwise marginals of every inner position, added to T at the end
    O[:] = 0.0  # without B features: Σ_t A[t−1, j]·P[t, k]·B[t, k] / c[t] (E ∘ O)
    gS[:] = 0.0
    gE[:] = 0.0
    nofix = np.empty(0, np.int32)
    _, has_b, bvalued = feature_kinds(X)
    total = 0.0
    for e in range(examples.shape[0]):
        if ctl[0] != 0:
            break
        i = examples[e]
        a, n = sentence_span(X, i)
        if n == 0:
            ctl[1] += 1
            continue
        sentence_scores(w, F, K, X, a, n, tr, em, trb, Eb, bmax, slots, nofix, 0)
        if partial and _is_partial(part, a, n):
            total += _partial_sentence(K, X, gold, part, a, n, grad, ctl, tr, start, end, Etr,
                                       trmax, trc, startc, endc, Etrc, gT, O, gS, gE, em, A, B,
                                       trb, Eb, bmax, slots, u, v, pair, P, c, has_b, bvalued,
                                       bbase)
            ctl[1] += 1
            continue
        logz, logspace = forward_backward(em, n, K, start, end, tr, Etr, trmax, trb, Eb, bmax,
                                          slots, has_b, A, B, P, c, u, v, O)
        # the gold score, from the same tables
        y0 = gold[a]
        gscore = start[y0] + em[y0] + end[gold[a + n - 1]]
        for t in range(1, n):
            j = gold[a + t - 1]
            k = gold[a + t]
            gscore += em[t * K + k]
            s = slots[t] if has_b else -1
            gscore += trb[s * KK + j * K + k] if s >= 0 else tr[j * K + k]
        total += logz - gscore
        # unigram block: Σ_t u_{t,f} (p_t(k) − [k = y*_t])
        for t in range(n):
            token_marginals(A, B, t, K, logz, logspace, u)
            best = 0
            for k in range(1, K):
                if u[k] > u[best]:
                    best = k
            if best != gold[a + t]:
                ctl[2] += 1
            if t == 0:
                for k in range(K):
                    gS[k] += u[k]
            if t == n - 1:
                for k in range(K):
                    gE[k] += u[k]
            u[gold[a + t]] -= 1.0
            token_scatter(K, X, a + t, u, 1.0, grad)
        gS[y0] -= 1.0
        gE[gold[a + n - 1]] -= 1.0
        ctl[1] += 1
        # transitions and B features: the pairwise marginals minus the gold pair (without B
        # features and in the scaled tables their sum E ∘ O is added once, at the end)
        if not has_b and not logspace:
            for t in range(1, n):
                gT[gold[a + t - 1] * K + gold[a + t]] -= 1.0
            continue
        for t in range(1, n):
            pair_marginals(t, K, slots, has_b, tr, trb, Etr, Eb, bmax, em, A, B, P, c, v, logz,
                           logspace, pair)
            pair[gold[a + t - 1] * K + gold[a + t]] -= 1.0
            for j in range(KK):
                gT[j] += pair[j]
            if has_b and slots[t] >= 0:
                for q in range(X.bfeat_ptr[a + t], X.bfeat_ptr[a + t + 1]):
                    base = bbase + np.int64(X.bfeat_idx[q]) * KK
                    _add_scaled(grad[base:base + KK], pair, X.bfeat_val[q] if bvalued else 1.0,
                                KK)
    for j in range(K):
        for k in range(K):
            e = Etr[j * K + k]  # (0 where exp underflowed: O may be huge there, never used)
            grad[tbase + j * K1 + k] += gT[j * K + k] + (e * O[j * K + k] if e > 0.0 else 0.0)
        grad[tbase + j * K1 + K] += gE[j]
        grad[tbase + K * K1 + j] += gS[j]
    return total


@nb.njit(cache=True, nogil=True)
def _is_partial(part, a, n):
    """Whether a token of a..a+n−1 has no single label (unknown, or a set)."""
    for q in range(a, a + n):
        if part.ptr[q + 1] - part.ptr[q] != 1:
            return True
    return False


@nb.njit(cache=True, nogil=True)
def _masked_tables(part, tr, start, end, Etr, K, trc, startc, endc, Etrc):
    """The transitions, START and END scores and exp-shifted transitions with −inf (exp: 0)
    where the label scheme's rules (``part.allowed``, ``first``, ``last``; empty: none)
    forbid them: the tables of the constrained forward-backward."""
    rules = part.allowed.shape[0] > 0
    for j in range(K * K):
        ok = not rules or part.allowed[j]
        trc[j] = tr[j] if ok else _NEG_INF
        Etrc[j] = Etr[j] if ok else 0.0
    for k in range(K):
        startc[k] = start[k] if not rules or part.first[k] else _NEG_INF
        endc[k] = end[k] if not rules or part.last[k] else _NEG_INF


@nb.njit(cache=True, nogil=True)
def _mask_sentence(part, a, n, K, em, has_b, slots, trb, Eb):
    """em[t·K + k] = −inf for every label k that token a+t does not admit (an empty range:
    every label admitted); the B matrices' forbidden transitions −inf (exp: 0)."""
    for t in range(n):
        lo, hi = part.ptr[a + t], part.ptr[a + t + 1]
        if hi == lo:
            continue
        p = lo  # (the admitted labels are sorted)
        for k in range(K):
            if p < hi and part.idx[p] == k:
                p += 1
            else:
                em[t * K + k] = _NEG_INF
    if has_b and part.allowed.shape[0] > 0:
        KK = K * K
        for t in range(1, n):
            s = slots[t]
            if s >= 0:
                for j in range(KK):
                    if not part.allowed[j]:
                        trb[s * KK + j] = _NEG_INF
                        Eb[s * KK + j] = 0.0


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _add_expectations(sign, K, X, gold, a, n, grad, ctl, tr, Etr, gT, gS, gE, em, A, B, trb,
                      Eb, bmax, slots, u, v, pair, P, c, has_b, bvalued, bbase, logz, logspace,
                      pairs):
    """sign · E[Φ(x, y)] of a forward-backward's tables into the gradient: the token
    marginals into U (and START / END), the pairwise ones into gT and the B block (``pairs``
    False: the scaled pass summed them into O already). With sign > 0 ctl[2] counts the
    tokens with one gold label whose most probable label is another."""
    KK = K * K
    for t in range(n):
        token_marginals(A, B, t, K, logz, logspace, u)
        if sign > 0 and gold[a + t] >= 0:
            best = 0
            for k in range(1, K):
                if u[k] > u[best]:
                    best = k
            if best != gold[a + t]:
                ctl[2] += 1
        if t == 0:
            for k in range(K):
                gS[k] += sign * u[k]
        if t == n - 1:
            for k in range(K):
                gE[k] += sign * u[k]
        token_scatter(K, X, a + t, u, sign, grad)
    if not pairs:
        return
    for t in range(1, n):
        pair_marginals(t, K, slots, has_b, tr, trb, Etr, Eb, bmax, em, A, B, P, c, v, logz,
                       logspace, pair)
        for j in range(KK):
            gT[j] += sign * pair[j]
        if has_b and slots[t] >= 0:
            for q in range(X.bfeat_ptr[a + t], X.bfeat_ptr[a + t + 1]):
                base = bbase + np.int64(X.bfeat_idx[q]) * KK
                _add_scaled(grad[base:base + KK], pair,
                            sign * (X.bfeat_val[q] if bvalued else 1.0), KK)


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _partial_sentence(K, X, gold, part, a, n, grad, ctl, tr, start, end, Etr, trmax, trc,
                      startc, endc, Etrc, gT, O, gS, gE, em, A, B, trb, Eb, bmax, slots, u, v,
                      pair, P, c, has_b, bvalued, bbase):
    """log Z − log Z_a of one partially labelled sentence (its scores in em, trb, Eb), its
    gradient E_p[Φ] − E_{p(·|Y(a))}[Φ] added (:func:`partial_nll_gradient_kernel`); +inf
    when no consistent tagging is admissible."""
    logz, logspace = forward_backward(em, n, K, start, end, tr, Etr, trmax, trb, Eb, bmax,
                                      slots, has_b, A, B, P, c, u, v, O)
    pairs = has_b or logspace  # (else the scaled pass summed them into O)
    _add_expectations(1.0, K, X, gold, a, n, grad, ctl, tr, Etr, gT, gS, gE, em, A, B, trb,
                      Eb, bmax, slots, u, v, pair, P, c, has_b, bvalued, bbase, logz, logspace,
                      pairs)
    _mask_sentence(part, a, n, K, em, has_b, slots, trb, Eb)
    logza, logspace = forward_backward(em, n, K, startc, endc, trc, Etrc, trmax, trb, Eb,
                                       bmax, slots, has_b, A, B, P, c, u, v, O[:0])
    if logza == _NEG_INF:
        return np.inf
    _add_expectations(-1.0, K, X, gold, a, n, grad, ctl, trc, Etrc, gT, gS, gE, em, A, B,
                      trb, Eb, bmax, slots, u, v, pair, P, c, has_b, bvalued, bbase, logza,
                      logspace, True)
    return logz - logza


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def hessian_diagonal_kernel(w, F, K, X, examples, h, ctl):
    """Adds to ``h`` (float64, len(w)) the diagonal of the Hessian of Σ_i −log p(y_i | x_i)
    over ``examples`` without the covariances between positions: Σ_t u_{t,f}² p_t(k)(1 − p_t(k))
    for the unigram weight (f, k), Σ_t p_t(j, k)(1 − p_t(j, k)) for the transition j → k (START
    and END from p_0, p_{n−1}), Σ_t b_{t,g}² p_t(j, k)(1 − p_t(j, k)) for the B weight (g, j, k)
    (exact for one-token sentences; the diagonal preconditioner of L-BFGS in
    :mod:`demidcd.solvers.crf`). ``ctl`` as :func:`nll_gradient_kernel`'s (its ctl[2] unused)."""
    K1, KK, tbase, bbase = block_offsets(F, K)
    tr, start, end, Etr, trmax = chain_tables(w, F, K)
    em, A, B, trb, Eb, bmax, slots, u, v, pair, P, c = fb_workspace(w, K, X, examples)
    nofix = np.empty(0, np.int32)
    no_sum = np.empty(0)
    _, has_b, bvalued = feature_kinds(X)
    for e in range(examples.shape[0]):
        if ctl[0] != 0:
            break
        ctl[1] += 1
        a, n = sentence_span(X, examples[e])
        if n == 0:
            continue
        sentence_scores(w, F, K, X, a, n, tr, em, trb, Eb, bmax, slots, nofix, 0)
        logz, logspace = forward_backward(em, n, K, start, end, tr, Etr, trmax, trb, Eb, bmax,
                                          slots, has_b, A, B, P, c, u, v, no_sum)
        if logz == _NEG_INF:
            continue
        for t in range(n):
            token_marginals(A, B, t, K, logz, logspace, u)
            for k in range(K):
                u[k] = u[k] * (1.0 - u[k])
            if t == 0:
                for k in range(K):
                    h[tbase + K * K1 + k] += u[k]
            if t == n - 1:
                for k in range(K):
                    h[tbase + k * K1 + K] += u[k]
            token_scatter(K, X, a + t, u, 1.0, h, True)
        for t in range(1, n):
            pair_marginals(t, K, slots, has_b, tr, trb, Etr, Eb, bmax, em, A, B, P, c, v, logz,
                           logspace, pair)
            for j in range(KK):
                pair[j] *= 1.0 - pair[j]
            for j in range(K):
                for k in range(K):
                    h[tbase + j * K1 + k] += pair[j * K + k]
            if has_b and slots[t] >= 0:
                for q in range(X.bfeat_ptr[a + t], X.bfeat_ptr[a + t + 1]):
                    base = bbase + np.int64(X.bfeat_idx[q]) * KK
                    x = X.bfeat_val[q] * X.bfeat_val[q] if bvalued else 1.0
                    _add_scaled(h[base:base + KK], pair, x, KK)


@nb.njit(cache=True, nogil=True)
def marginals_kernel(w, F, K, X, examples, fixed):
    """Per-token marginals and log Z of ``examples``: (marg float64[n_tok·K] with
    marg[(ptr[e] + t)·K + k] = p(y_t = k | x), ptr int64[n_ex+1], logz float64[n_ex]).
    ``fixed``: one tag id (−1: free) per token of the examples in order, or empty; an empty
    sentence has log Z = w(START → END)."""
    n_ex = examples.shape[0]
    ptr = np.zeros(n_ex + 1, np.int64)
    for e in range(n_ex):
        i = examples[e]
        ptr[e + 1] = ptr[e] + X.sent_ptr[i + 1] - X.sent_ptr[i]
    tr, start, end, Etr, trmax = chain_tables(w, F, K)
    em, A, B, trb, Eb, bmax, slots, u, v, _, P, c = fb_workspace(w, K, X, examples)
    marg = np.zeros(ptr[n_ex] * K)
    logz = np.empty(n_ex)
    no_sum = np.empty(0)  # (no pairwise sums wanted)
    for e in range(n_ex):
        i = examples[e]
        a, n = sentence_span(X, i)
        if n == 0:
            logz[e] = w[F * K + K * (K + 1) + K]
            continue
        has_b = sentence_scores(w, F, K, X, a, n, tr, em, trb, Eb, bmax, slots, fixed, ptr[e])
        lz, logspace = forward_backward(em, n, K, start, end, tr, Etr, trmax, trb, Eb, bmax,
                                        slots, has_b, A, B, P, c, u, v, no_sum)
        logz[e] = lz
        if lz == _NEG_INF:
            continue
        for t in range(n):
            o = (ptr[e] + t) * K
            token_marginals(A, B, t, K, lz, logspace, u)
            for k in range(K):
                marg[o + k] = u[k]
    return marg, ptr, logz


def masked_weights(w: np.ndarray, F: int, K: int, constraints: tuple | None) -> np.ndarray:
    """w with −inf on the transitions (START → k, j → k, k → END) that ``constraints``
    ((allowed K·K, allowed_start K, allowed_end K) booleans, or None: w itself) forbid, so that
    forward-backward sums over the admissible taggings only."""
    if constraints is None:
        return w
    allowed, first, last = (np.asarray(c, np.bool_).reshape(-1) for c in constraints)
    w = np.array(w, np.float64)
    K1 = K + 1
    T = w[F * K:F * K + K1 * K1].reshape(K1, K1)
    T[:K, :K][~allowed.reshape(K, K)] = -np.inf
    T[K, :K][~first] = -np.inf
    T[:K, K][~last] = -np.inf
    return w


def chain_marginals(task, w: np.ndarray, examples: np.ndarray, fixed: np.ndarray | None = None,
                    constraints: tuple | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token marginals and log Z of ``examples`` of a :class:`~.kernels.SequenceTask` under w:
    (float64 (n_tok, K), int64 ptr, float64 log Z per example), over the taggings that keep the
    ``fixed`` tags (one id or −1 per token of the examples in order) and obey ``constraints``;
    where the fixed tags leave no tagging that obeys the constraints, that example's marginals
    are taken without the constraints (the fixed tags win, as in decoding)."""
    ex = np.ascontiguousarray(examples, np.int64)
    fx = np.zeros(0, np.int32) if fixed is None else np.ascontiguousarray(fixed, np.int32)
    w = np.ascontiguousarray(w, np.float64)
    F = task.u_rows  # the rows of U (the seen pairs' when the model keeps only those)
    wm = masked_weights(w, F, task.K, constraints)
    marg, ptr, logz = marginals_kernel(wm, F, task.K, task.chain, ex, fx)
    bad = np.flatnonzero(logz == -np.inf)
    for e in bad.tolist():  # the fixed tags break the constraints: without them
        f1 = fx[ptr[e]:ptr[e + 1]] if fx.size else fx
        m1, _, z1 = marginals_kernel(w, F, task.K, task.chain, ex[e:e + 1], f1)
        marg[ptr[e] * task.K:ptr[e + 1] * task.K] = m1
        logz[e] = z1[0]
    return marg.reshape(-1, task.K), ptr, logz


def unseen_transitions(task) -> np.ndarray:
    """The indices into w of the transitions (START → k, j → k, k → END) that no gold tagging
    of ``task`` takes: the weights CRFsuite does not create without
    ``feature.possible_transitions`` (sklearn-crfsuite's ``all_possible_transitions=False``).
    START → END (an empty sentence's) is among them unless the data has an empty sentence.
    Partially labelled data: a token that is not fully known takes each label it admits
    (every label when unknown), so every transition a consistent tagging may take is kept."""
    K = task.K
    K1 = K + 1
    seen = np.zeros((K1 + 1, K1 + 1), np.bool_)  # (the last row and column: partial tokens)
    ptr = np.asarray(task.sent_ptr, np.int64)
    y = np.asarray(task.Y, np.int64)
    if getattr(task, "allowed_ptr", None) is not None:
        _partial_transitions(task, seen)
        y = np.where(y < 0, K1, y)
    first, last = ptr[:-1], ptr[1:] - 1
    full = last >= first
    seen[K, y[first[full]]] = True
    seen[y[last[full]], K] = True
    seen[K, K] = bool(np.any(~full))
    inner = np.ones(y.shape[0], np.bool_)
    inner[first[full]] = False  # a token whose predecessor is in the same sentence
    t = np.flatnonzero(inner)
    seen[y[t - 1], y[t]] = True
    return task.u_rows * K + np.flatnonzero(~seen[:K1, :K1].reshape(-1))


def _partial_transitions(task, seen: np.ndarray) -> None:
    """Mark in ``seen`` ((K+1)², START / END last) every transition into or out of a token
    that is not fully known, over the labels it admits (:func:`unseen_transitions`)."""
    K, ap, ai = task.K, task.allowed_ptr, task.allowed_idx
    ptr = np.asarray(task.sent_ptr, np.int64)
    y = np.asarray(task.Y, np.int64)
    starts = set(ptr[:-1].tolist())
    ends = set((ptr[1:] - 1).tolist())

    def labels(q: int) -> np.ndarray:
        if y[q] >= 0:
            return y[q:q + 1]
        got = ai[ap[q]:ap[q + 1]]
        return np.arange(K) if got.shape[0] == 0 else got.astype(np.int64)

    for q in np.flatnonzero(y < 0).tolist():
        here = labels(q)
        if q in starts:
            seen[K, here] = True
        else:
            seen[np.ix_(labels(q - 1), here)] = True
        if q in ends:
            seen[here, K] = True
        else:
            seen[np.ix_(here, labels(q + 1))] = True
