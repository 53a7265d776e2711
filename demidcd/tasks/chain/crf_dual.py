"""The dual of the chain CRF for stochastic dual coordinate ascent (Le Priol, Piché and
Lacoste-Julien, UAI 2018; prox-SDCA of Shalev-Shwartz and Zhang for c1 > 0): the dual variables,
their entropy, the oracle step of an example and its update.

The primal is CRFsuite's P(w) = Σ_i ℓ_i(w) + c2‖w‖² + c1‖w‖₁ with ℓ_i(w) = log Z_i(w) −
w·Φ(x_i, y_i). Writing log Z_i(w) = max_q w·E_q Φ + H(q), its dual is

    D(μ) = Σ_i H(μ_i) − g*(v),   v = Σ_i Φ(x_i, y_i) − E_{μ_i}Φ,   w = ∇g*(v),
    g*(v) = Σ_j max(|v_j| − c1, 0)² / (4 c2),   ∇g*(v)_j = sign(v_j) max(|v_j| − c1, 0) / (2 c2),

where μ_i are the chain marginals of a distribution over example i's taggings and H(μ_i) the
chain (tree) entropy from them: Σ_{t=1}^{n−1} H(μ_{t−1,t}) − Σ_{t=1}^{n−2} H(μ_t) (H(μ_0) for
one token), the entropy of the Markov chain with those marginals. With w = ∇g*(v) the duality
gap is P(w) − D(μ) = Σ_i KL(μ_i ‖ p_w(·|x_i)) (g(w) + g*(v) = w·v, Fenchel's equality).

Storage (:class:`DualArrays`): per token its unary marginal (K values) in ``mu_u`` at
(token)·K, per position t ≥ 1 of a sentence its pairwise marginal (K² values) in ``mu_p`` at
(pair_ptr[i] + t − 1)·K², both of the dtype the caller picks (float32 halves the memory; the
kernels compute in float64): (K + K²·(n−1)/n)·itemsize bytes per token, K + K² in practice
(CoNLL-2000's 23 chunk tags in float32: 2.2 kB per token). An empty sentence has no dual
variable (its ℓ_i is 0 whatever w).

A step on example i (:func:`propose_kernel`, then :func:`apply_kernel`): β_i = p_w(·|x_i) by
forward-backward, the direction d = β_i − μ_i, Δv = E_{μ_i}Φ − E_{β_i}Φ (aggregated over the
sentence's distinct features), and γ ∈ [0, 1] maximising h(γ) − [g*(v + γΔv) − g*(v)] with
h(γ) = H(μ_i + γd) − H(μ_i) concave (safeguarded Newton on the derivative). The proposal is
computed against a snapshot of v (in the multi-core trainer a stale one); the update re-reads v
and takes the γ' ∈ [0, γ] maximising the lower bound (γ'/γ)·h(γ) − [g*(v + γ'Δv) − g*(v)]
(the chord under the concave h), so the dual never decreases however stale the proposal, and
γ' = γ when v did not move. A per-example version counter tells the update that μ_i changed
since the proposal read it (the proposal is then dropped).
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from ...primitives.vectors import dot
from .kernels import feature_kinds, sentence_span, token_scatter
from .marginals import (
    chain_tables,
    fb_workspace,
    pairwise_marginals,
    position_matrix,
    scaled_forward_backward,
    sentence_scores,
)

_FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}
TINY = 1e-300  # the floor of a marginal inside a logarithm (a point mass has zeros)
NEWTON_STEPS = 6  # derivative evaluations of the line search after the two endpoints, at most
STEP_TOL = 1e-3  # the line search stops at a Newton step below this share of γ
REFRESH = 0.5  # the update searches again when the stale proposal's safe step is below this share


class DualArrays(NamedTuple):
    """The dual variables (module docstring): ``pair_ptr`` int64[n_sent+1], ``mu_u``
    [n_tok·K], ``mu_p`` [n_pairs·K²] (float32 or float64), ``version`` int64[n_sent] (the
    updates example i received)."""

    pair_ptr: np.ndarray
    mu_u: np.ndarray
    mu_p: np.ndarray
    version: np.ndarray


class Batch(NamedTuple):
    """One batch of proposals (:func:`propose_kernel`), allocated once and reused: the examples
    and the version of μ_i each read, β (unary, pairwise) and Δv (``dv_idx``, ``dv_val`` at
    dv_ptr[e]:dv_ptr[e+1]) of each in batch order, the proposed γ, h(γ) and the gap estimate
    KL(μ_i ‖ p_w) of each (w as the proposal read it)."""

    ex: np.ndarray
    ver: np.ndarray
    beta_u: np.ndarray
    beta_p: np.ndarray
    dv_idx: np.ndarray
    dv_val: np.ndarray
    dv_ptr: np.ndarray
    gamma: np.ndarray
    hgain: np.ndarray
    gap: np.ndarray


class Workspace(NamedTuple):
    """One thread's scratch for :func:`propose_kernel`: the forward-backward arrays and the
    feature → slot maps (all −1 between calls) that aggregate Δv."""

    em: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    trb: np.ndarray
    Eb: np.ndarray
    bmax: np.ndarray
    slots: np.ndarray
    u: np.ndarray
    v: np.ndarray
    pair: np.ndarray
    fslot: np.ndarray
    gslot: np.ndarray
    v0: np.ndarray
    xs: np.ndarray
    bits: np.ndarray
    lg: np.ndarray
    P: np.ndarray
    c: np.ndarray


@nb.njit(cache=True, nogil=True)
def pair_pointers(sent_ptr):
    """pair_ptr[i] = Σ_{s<i} max(n_s − 1, 0): where sentence i's pairwise marginals start."""
    n = sent_ptr.shape[0] - 1
    p = np.zeros(n + 1, np.int64)
    for i in range(n):
        p[i + 1] = p[i] + max(sent_ptr[i + 1] - sent_ptr[i] - 1, 0)
    return p


@nb.njit(cache=True, nogil=True)
def dv_sizes(F, K, X, examples):
    """An upper bound on the Δv entries of each example: nnz·K + K² + 2K + B-nnz·K²."""
    out = np.zeros(examples.shape[0], np.int64)
    has_b = X.bfeat_ptr.shape[0] > 0
    for e in range(examples.shape[0]):
        i = examples[e]
        a = X.sent_ptr[i]
        b = X.sent_ptr[i + 1]
        m = (X.feat_ptr[b] - X.feat_ptr[a]) * K + K * K + 2 * K
        if has_b and b > a:
            m += (X.bfeat_ptr[b] - X.bfeat_ptr[a + 1]) * K * K
        out[e] = m
    return out


@nb.njit(cache=True, nogil=True)
def init_gold(K, sent_ptr, gold, D):
    """μ_i = the point mass on the gold tagging (then v = 0)."""
    KK = K * K
    D.mu_u[:] = 0.0
    D.mu_p[:] = 0.0
    for i in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[i]
        n = sent_ptr[i + 1] - a
        for t in range(n):
            D.mu_u[(a + t) * K + gold[a + t]] = 1.0
        for t in range(1, n):
            D.mu_p[(D.pair_ptr[i] + t - 1) * KK + gold[a + t - 1] * K + gold[a + t]] = 1.0


@nb.njit(cache=True, nogil=True)
def add_expected_features(F, K, X, D, examples, scale, out):
    """out += scale · Σ_e E_{μ_e}Φ(x_e, ·) over the non-empty ``examples`` (float64, len dim)."""
    K1 = K + 1
    KK = K * K
    tbase = F * K
    bbase = tbase + K1 * K1
    _, has_b, bvalued = feature_kinds(X)
    for e in range(examples.shape[0]):
        i = examples[e]
        a, n = sentence_span(X, i)
        if n == 0:
            continue
        for t in range(n):
            o = (a + t) * K
            token_scatter(K, X, a + t, D.mu_u[o:o + K], scale, out)
        for k in range(K):
            out[tbase + K * K1 + k] += scale * D.mu_u[a * K + k]
            out[tbase + k * K1 + K] += scale * D.mu_u[(a + n - 1) * K + k]
        for t in range(1, n):
            p = (D.pair_ptr[i] + t - 1) * KK
            for j in range(K):
                for k in range(K):
                    out[tbase + j * K1 + k] += scale * D.mu_p[p + j * K + k]
            if has_b:
                for q in range(X.bfeat_ptr[a + t], X.bfeat_ptr[a + t + 1]):
                    base = bbase + np.int64(X.bfeat_idx[q]) * KK
                    c = scale * (X.bfeat_val[q] if bvalued else 1.0)
                    for jk in range(KK):
                        out[base + jk] += c * D.mu_p[p + jk]


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _neg_xlogx(x, m):
    """−Σ x log x over x[:m] (0 log 0 = 0)."""
    s = 0.0
    for j in range(m):
        z = np.float64(x[j])
        if z > 0.0:
            s -= z * np.log(z)
    return s


@nb.njit(cache=True, nogil=True)
def chain_entropy(K, sent_ptr, D, examples):
    """Σ_e H(μ_e), the chain entropy of each example from its stored marginals."""
    KK = K * K
    total = 0.0
    for e in range(examples.shape[0]):
        i = examples[e]
        a = sent_ptr[i]
        n = sent_ptr[i + 1] - a
        if n == 1:
            total += _neg_xlogx(D.mu_u[a * K:(a + 1) * K], K)
        for t in range(1, n):
            p = (D.pair_ptr[i] + t - 1) * KK
            total += _neg_xlogx(D.mu_p[p:p + KK], KK)
            if t < n - 1:
                total -= _neg_xlogx(D.mu_u[(a + t) * K:(a + t + 1) * K], K)
    return total


@nb.njit(cache=True, nogil=True)
def log_partition_kernel(w, F, K, X, examples):
    """Σ_e log Z_e(w) over the non-empty ``examples``."""
    tr, start, end, Etr, trmax = chain_tables(w, F, K)
    em, alpha, beta, trb, Eb, bmax, slots, u, v, _, P, c = fb_workspace(w, K, X, examples)
    nofix = np.empty(0, np.int32)
    no_sum = np.empty(0)  # (no pairwise sums wanted)
    total = 0.0
    for e in range(examples.shape[0]):
        i = examples[e]
        a, n = sentence_span(X, i)
        if n > 0:
            has_b = sentence_scores(w, F, K, X, a, n, tr, em, trb, Eb, bmax, slots, nofix, 0)
            total += scaled_forward_backward(em, n, K, start, end, Etr, trmax, Eb, bmax, slots,
                                             has_b, alpha, beta, P, c, u, v, no_sum)
    return total


@nb.njit(cache=True, nogil=True, inline="always")
def prox(z, c1, c2):
    """∇g*(z) = sign(z) max(|z| − c1, 0) / (2 c2)."""
    if z > c1:
        return (z - c1) / (2.0 * c2)
    if z < -c1:
        return (z + c1) / (2.0 * c2)
    return 0.0


@nb.njit(cache=True, nogil=True, inline="always")
def _gstar(z, c1):
    """(2 c2) g*(z) = max(|z| − c1, 0)² / 2 (the caller divides by 2 c2)."""
    r = abs(z) - c1
    return 0.5 * r * r if r > 0.0 else 0.0


_NO_IDX = np.zeros(0, np.int64)  # _g_terms' idx when the values are v's own entries


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _g_terms(v, idx, dv, q0, q1, g, c1, c2):
    """(g*(v0 + g·dv) − g*(v0), its first and second derivatives in g) over the entries
    q0..q1 of dv, with v0[q] = v[idx[q]] read now, or v[q] when ``idx`` is empty."""
    val = 0.0
    d1 = 0.0
    d2 = 0.0
    gather = idx.shape[0] > 0
    for q in range(q0, q1):
        z0 = v[idx[q]] if gather else v[q]
        z = z0 + g * dv[q]
        val += _gstar(z, c1) - _gstar(z0, c1)
        if z > c1:
            d1 += dv[q] * (z - c1)
            d2 += dv[q] * dv[q]
        elif z < -c1:
            d1 += dv[q] * (z + c1)
            d2 += dv[q] * dv[q]
    s = 1.0 / (2.0 * c2)
    return val * s, d1 * s, d2 * s


_LN2 = 0.6931471805599453
_SQRT2 = 1.4142135623730951


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def log_block(xs, bits, out, m):
    """out[j] = log xs[j] for the m positive normal numbers xs[:m], without a libm call (the
    line search's K² logarithms per position dominate its cost): xs = 2^e·y, y ∈ [1/√2, √2),
    log y = 2 atanh s with s = (y − 1)/(y + 1), |s| ≤ 0.172, by its odd series to s^17
    (relative error below 1e-14); loops numba can vectorise. ``bits``: int64 scratch."""
    xi = xs.view(np.int64)
    for j in range(m):
        b = xi[j]
        out[j] = np.float64((b >> 52) - 1023)
        bits[j] = (b & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000
    ys = bits.view(np.float64)
    for j in range(m):
        y = ys[j]
        e = out[j]
        if y > _SQRT2:
            y *= 0.5
            e += 1.0
        sv = (y - 1.0) / (y + 1.0)
        z = sv * sv
        p = 2.0 / 17.0
        p = p * z + 2.0 / 15.0
        p = p * z + 2.0 / 13.0
        p = p * z + 2.0 / 11.0
        p = p * z + 2.0 / 9.0
        p = p * z + 2.0 / 7.0
        p = p * z + 2.0 / 5.0
        p = p * z + 2.0 / 3.0
        p = p * z + 2.0
        out[j] = e * _LN2 + sv * p


@nb.njit(cache=True, nogil=True, fastmath=_FAST)
def _block(mu, mo, b, bo, m, g, xs, bits, lg):
    """(−Σ x log x, −Σ d log x, −Σ d²/x) over the m entries x = μ + g·d, d = β − μ (x floored
    at TINY inside the logarithm and the quotient; 0 log 0 = 0). xs, bits, lg: m scratch."""
    for j in range(m):
        x0 = np.float64(mu[mo + j])
        x = x0 + g * (b[bo + j] - x0)
        xs[j] = x if x > TINY else TINY
    log_block(xs, bits, lg, m)
    h = 0.0
    h1 = 0.0
    h2 = 0.0
    for j in range(m):
        x0 = np.float64(mu[mo + j])
        d = b[bo + j] - x0
        x = x0 + g * d
        if x > 0.0:
            h -= x * lg[j]
        h1 -= d * lg[j]
        h2 -= d * d / xs[j]
    return h, h1, h2


@nb.njit(cache=True, nogil=True)
def _entropy_line(K, n, a, p0, D, beta_u, bu, beta_p, bp, g, xs, bits, lg):
    """(H, dH/dg, d²H/dg²) of the chain entropy of μ_i + g(β_i − μ_i) (tokens a..a+n−1 of μ,
    pairs from p0; β_i's unary at bu·K, pairwise at bp·K² of the batch)."""
    KK = K * K
    if n == 1:
        return _block(D.mu_u, a * K, beta_u, bu * K, K, g, xs, bits, lg)
    h = 0.0
    h1 = 0.0
    h2 = 0.0
    for t in range(1, n):
        x, x1, x2 = _block(D.mu_p, (p0 + t - 1) * KK, beta_p, (bp + t - 1) * KK, KK, g, xs,
                           bits, lg)
        h += x
        h1 += x1
        h2 += x2
        if t < n - 1:
            x, x1, x2 = _block(D.mu_u, (a + t) * K, beta_u, (bu + t) * K, K, g, xs, bits,
                               lg)
            h -= x
            h1 -= x1
            h2 -= x2
    return h, h1, h2


@nb.njit(cache=True, nogil=True)
def _line_search(K, n, a, p0, D, beta_u, bu, beta_p, bp, v0, dv, m, c1, c2, xs, bits, lg):
    """(γ, h(γ), h(1)): the safeguarded Newton maximiser over [0, 1] of f(γ) = h(γ) −
    [g*(v0 + γ dv) − g*(v0)] (module docstring), to a relative step of STEP_TOL, h(γ) =
    H(μ + γd) − H(μ) at that γ, and h(1) (for the gap estimate)."""
    H0, d0, _ = _entropy_line(K, n, a, p0, D, beta_u, bu, beta_p, bp, 0.0, xs, bits, lg)
    H1, d1, _ = _entropy_line(K, n, a, p0, D, beta_u, bu, beta_p, bp, 1.0, xs, bits, lg)
    _, G1, _ = _g_terms(v0, _NO_IDX, dv, 0, m, 1.0, c1, c2)
    f1 = d1 - G1
    if f1 >= 0.0:
        return 1.0, H1 - H0, H1 - H0
    _, G0, _ = _g_terms(v0, _NO_IDX, dv, 0, m, 0.0, c1, c2)
    f0 = d0 - G0
    if f0 <= 0.0:
        return 0.0, 0.0, H1 - H0
    lo = 0.0
    hi = 1.0
    g = min(max(f0 / (f0 - f1), 1e-3), 1.0 - 1e-3)  # the secant of the derivative
    hg = 0.0
    best = 0.0
    for _ in range(NEWTON_STEPS):
        Hg, dg, ddg = _entropy_line(K, n, a, p0, D, beta_u, bu, beta_p, bp, g, xs, bits, lg)
        _, Gg, GGg = _g_terms(v0, _NO_IDX, dv, 0, m, g, c1, c2)
        fp = dg - Gg
        fpp = ddg - GGg
        hg = Hg - H0
        best = g
        if fp > 0.0:
            lo = g
        else:
            hi = g
        nxt = g - fp / fpp if fpp < 0.0 else 0.5 * (lo + hi)
        if not (lo < nxt < hi):
            nxt = 0.5 * (lo + hi)
        if abs(nxt - g) <= STEP_TOL * g:
            break
        g = nxt
    return best, hg, H1 - H0


@nb.njit(cache=True, nogil=True, inline="always")
def _open_slot(slot, f, q, base, width, idx, val):
    """The position of feature f's ``width`` entries in (idx, val): where ``slot[f]`` put them,
    or opened at q (indices base.., values 0) and recorded there. Returns (position, next q)."""
    s = slot[f]
    if s < 0:
        s = q
        slot[f] = q
        for k in range(width):
            idx[q + k] = base + k
            val[q + k] = 0.0
        q += width
    return s, q


@nb.njit(cache=True, nogil=True)
def propose_kernel(w, v, c1, c2, F, K, X, D, examples, count, B, ws, keep_t):
    """Fill the batch B with the proposals of ``examples[:count]`` (module docstring) under w
    and a snapshot of v; returns the entries of Δv written. ``keep_t`` ((K+1)² of 1.0 or 0.0)
    multiplies the transition block's entries of Δv: 0.0 holds a transition without a weight
    (``all_possible_transitions=False``) at 0."""
    K1 = K + 1
    KK = K * K
    tbase = F * K
    bbase = tbase + K1 * K1
    tr, start, end, Etr, trmax = chain_tables(w, F, K)
    nofix = np.empty(0, np.int32)
    valued, has_b, bvalued = feature_kinds(X)
    seen = X.u_off.shape[0] > 0
    no_sum = np.empty(0)  # (no pairwise sums wanted)
    bu = 0
    bp = 0
    q0 = 0
    B.dv_ptr[0] = 0
    for e in range(count):
        i = examples[e]
        B.ex[e] = i
        B.ver[e] = D.version[i]
        a, n = sentence_span(X, i)
        B.gamma[e] = 0.0
        B.hgain[e] = 0.0
        B.gap[e] = 0.0
        if n == 0:
            B.dv_ptr[e + 1] = q0
            continue
        p0 = D.pair_ptr[i]
        sentence_scores(w, F, K, X, a, n, tr, ws.em, ws.trb, ws.Eb, ws.bmax, ws.slots, nofix, 0)
        scaled_forward_backward(ws.em, n, K, start, end, Etr, trmax, ws.Eb, ws.bmax, ws.slots,
                                has_b, ws.alpha, ws.beta, ws.P, ws.c, ws.u, ws.v, no_sum)
        A, Bs = ws.alpha, ws.beta  # scaled: p(y_t = k) = A·B (scaled_forward_backward)
        for t in range(n):
            for k in range(K):
                B.beta_u[(bu + t) * K + k] = A[t * K + k] * Bs[t * K + k]
        for t in range(1, n):
            E, _ = position_matrix(t, ws.slots, has_b, Etr, trmax, ws.Eb, ws.bmax, KK)
            pairwise_marginals(t, K, E, A, Bs, ws.P, ws.c, ws.v,
                               B.beta_p[(bp + t - 1) * KK:(bp + t) * KK])
        # Δv = E_μΦ − E_βΦ = −Σ d·Φ, aggregated per distinct feature (fslot / gslot maps)
        q = q0
        for t in range(n):
            o = (a + t) * K
            ob = (bu + t) * K
            for r in range(X.feat_ptr[a + t], X.feat_ptr[a + t + 1]):
                f = X.feat_idx[r]
                c = X.feat_val[r] if valued else 1.0
                if seen:  # the seen pairs of f: their labels' entries only
                    lo = X.u_off[f]
                    s, q = _open_slot(ws.fslot, f, q, lo, X.u_off[f + 1] - lo, B.dv_idx,
                                      B.dv_val)
                    for j in range(lo, X.u_off[f + 1]):
                        k = X.u_lab[j]
                        B.dv_val[s + j - lo] -= c * (B.beta_u[ob + k] - D.mu_u[o + k])
                    continue
                s, q = _open_slot(ws.fslot, f, q, np.int64(f) * K, K, B.dv_idx, B.dv_val)
                for k in range(K):
                    B.dv_val[s + k] -= c * (B.beta_u[ob + k] - D.mu_u[o + k])
        for r in range(X.feat_ptr[a], X.feat_ptr[a + n]):  # reset the slot map
            ws.fslot[X.feat_idx[r]] = -1
        for k in range(K):
            B.dv_idx[q + k] = tbase + K * K1 + k  # START → k
            B.dv_val[q + k] = -(B.beta_u[bu * K + k] - D.mu_u[a * K + k])
            B.dv_idx[q + K + k] = tbase + k * K1 + K  # k → END
            B.dv_val[q + K + k] = -(B.beta_u[(bu + n - 1) * K + k] - D.mu_u[(a + n - 1) * K + k])
        q += 2 * K
        qt = q
        for jk in range(KK):
            B.dv_idx[q + jk] = tbase + (jk // K) * K1 + jk % K
            B.dv_val[q + jk] = 0.0
        q += KK
        qb = q
        for t in range(1, n):
            o = (p0 + t - 1) * KK
            ob = (bp + t - 1) * KK
            for jk in range(KK):
                B.dv_val[qt + jk] -= B.beta_p[ob + jk] - D.mu_p[o + jk]
            if has_b:
                for r in range(X.bfeat_ptr[a + t], X.bfeat_ptr[a + t + 1]):
                    gf = X.bfeat_idx[r]
                    s, q = _open_slot(ws.gslot, gf, q, bbase + np.int64(gf) * KK, KK,
                                      B.dv_idx, B.dv_val)
                    c = X.bfeat_val[r] if bvalued else 1.0
                    for jk in range(KK):
                        B.dv_val[s + jk] -= c * (B.beta_p[ob + jk] - D.mu_p[o + jk])
        for r in range(qb, q, KK):
            ws.gslot[(B.dv_idx[r] - bbase) // KK] = -1
        for r in range(qt - 2 * K, qb):  # the START/END and transition entries
            B.dv_val[r] *= keep_t[B.dv_idx[r] - tbase]
        m = q - q0
        wdv = 0.0
        for r in range(m):
            ws.v0[r] = v[B.dv_idx[q0 + r]]
            wdv += w[B.dv_idx[q0 + r]] * B.dv_val[q0 + r]
        g, hg, h1 = _line_search(K, n, a, p0, D, B.beta_u, bu, B.beta_p, bp, ws.v0,
                                 B.dv_val[q0:q], m, c1, c2, ws.xs, ws.bits, ws.lg)
        B.gamma[e] = g
        B.hgain[e] = hg
        B.gap[e] = h1 - wdv  # KL(μ_i ‖ p_w) = H(β) − H(μ) − w·Δv
        B.dv_ptr[e + 1] = q
        q0 = q
        bu += n
        bp += n - 1
    return q0


@nb.njit(cache=True, nogil=True)
def _safe_step(v, idx, dv, q0, q1, gw, hw, c1, c2):
    """(γ', its lower-bound gain): the maximiser over [0, gw] of (γ/gw)·hw − [g*(v + γdv) −
    g*(v)] (the chord under h; v read now)."""
    slope = hw / gw
    Gw, G1, _ = _g_terms(v, idx, dv, q0, q1, gw, c1, c2)
    if slope - G1 >= 0.0:
        return gw, hw - Gw
    _, G0, _ = _g_terms(v, idx, dv, q0, q1, 0.0, c1, c2)
    if slope - G0 <= 0.0:
        return 0.0, 0.0
    lo = 0.0
    hi = gw
    g = 0.5 * gw
    for _ in range(30):
        _, G1, G2 = _g_terms(v, idx, dv, q0, q1, g, c1, c2)
        fp = slope - G1
        if fp > 0.0:
            lo = g
        else:
            hi = g
        nxt = g + fp / G2 if G2 > 0.0 else 0.5 * (lo + hi)
        if not (lo < nxt < hi):
            nxt = 0.5 * (lo + hi)
        if hi - lo < 1e-9 * gw or abs(nxt - g) < 1e-12 * gw:
            break
        g = nxt
    val, _, _ = _g_terms(v, idx, dv, q0, q1, g, c1, c2)
    if g * slope - val < 0.0:  # past the bound's zero: lo, below its maximiser, gains ≥ 0
        g = lo
        val, _, _ = _g_terms(v, idx, dv, q0, q1, g, c1, c2)
    return g, g * slope - val


@nb.njit(cache=True, nogil=True)
def apply_kernel(w, v, c1, c2, K, sent_ptr, D, count, B, stats, ws):
    """Apply the proposals of batch B (module docstring) to μ, v and w in place; where the
    safe step of a stale proposal is below REFRESH of its γ, the line search runs again on the
    current v (exact; ws: this thread's scratch). stats[0] += updates, stats[1] += proposals
    dropped (μ_i changed since), stats[2] += the dual increase guaranteed, stats[3] += the gap
    estimates of the batch, stats[4] += the line searches run again."""
    KK = K * K
    bu = 0
    bp = 0
    for e in range(count):
        i = B.ex[e]
        a = sent_ptr[i]
        n = sent_ptr[i + 1] - a
        if n == 0:
            continue
        stats[3] += B.gap[e]
        g0 = B.gamma[e]
        if D.version[i] != B.ver[e]:
            stats[1] += 1.0
        elif g0 > 0.0:
            q0 = B.dv_ptr[e]
            q1 = B.dv_ptr[e + 1]
            g, gain = _safe_step(v, B.dv_idx, B.dv_val, q0, q1, g0, B.hgain[e], c1, c2)
            if g < REFRESH * g0:
                m = q1 - q0
                for r in range(m):
                    ws.v0[r] = v[B.dv_idx[q0 + r]]
                g, hg, _ = _line_search(K, n, a, D.pair_ptr[i], D, B.beta_u, bu, B.beta_p,
                                        bp, ws.v0, B.dv_val[q0:q1], m, c1, c2, ws.xs,
                                        ws.bits, ws.lg)
                gain = hg - _g_terms(ws.v0, _NO_IDX, B.dv_val[q0:q1], 0, m, g, c1, c2)[0]
                stats[4] += 1.0
            if g > 0.0:
                for t in range(n):
                    o = (a + t) * K
                    ob = (bu + t) * K
                    for k in range(K):
                        x = np.float64(D.mu_u[o + k])
                        D.mu_u[o + k] = x + g * (B.beta_u[ob + k] - x)
                for t in range(1, n):
                    o = (D.pair_ptr[i] + t - 1) * KK
                    ob = (bp + t - 1) * KK
                    for jk in range(KK):
                        x = np.float64(D.mu_p[o + jk])
                        D.mu_p[o + jk] = x + g * (B.beta_p[ob + jk] - x)
                for q in range(q0, q1):
                    j = B.dv_idx[q]
                    z = v[j] + g * B.dv_val[q]
                    v[j] = z
                    w[j] = prox(z, c1, c2)
                D.version[i] += 1
                stats[0] += 1.0
                stats[2] += gain
        bu += n
        bp += n - 1


class ChainDual:
    """The SDCA state of a chain CRF on a :class:`~.task.SequenceTask` (module docstring): the
    dual variables μ (``dtype``: float32 or float64), v and w = ∇g*(v) (float64, updated in
    place), and Φ* = Σ_i Φ(x_i, y_i). ``init``: ``"gold"``, μ_i the point mass on the gold
    tagging (v = 0, w = 0), or ``"uniform"``, μ_i the marginals of the uniform distribution
    over taggings. ``batch``: the most examples a :class:`Batch` holds."""

    def __init__(self, task, c1: float, c2: float, dtype: type = np.float32,
                 init: str = "gold", batch: int = 32):
        if init not in ("gold", "uniform"):
            raise ValueError(f"init must be gold or uniform, got {init!r}")
        self.task, self.c1, self.c2 = task, float(c1), float(c2)
        self.F, self.K, self.X = task.u_rows, task.K, task.chain  # U's rows (F, or the
        # seen pairs' ⌈pairs / K⌉): where the transition block starts
        lengths = np.diff(task.sent_ptr)
        self.examples = np.flatnonzero(lengths > 0).astype(np.int64)
        pair_ptr = pair_pointers(task.sent_ptr)
        K = self.K
        self.D = DualArrays(pair_ptr, np.zeros(int(task.sent_ptr[-1]) * K, dtype),
                            np.zeros(int(pair_ptr[-1]) * K * K, dtype),
                            np.zeros(task.n_examples, np.int64))
        init_gold(K, task.sent_ptr, np.ascontiguousarray(task.Y, np.int32), self.D)
        self.gold_phi = np.zeros(task.dim)
        add_expected_features(self.F, K, self.X, self.D, self.examples, 1.0, self.gold_phi)
        self.v = np.zeros(task.dim)
        self.w = np.zeros(task.dim)
        self.keep_t = np.ones((K + 1) ** 2)  # 0.0: a transition held at 0 (:meth:`freeze`)
        if init == "uniform":
            self.D.mu_u[:] = 1.0 / K
            self.D.mu_p[:] = 1.0 / (K * K)
            self.resync()
        self.batch = max(1, int(batch))
        sizes = dv_sizes(self.F, K, self.X, self.examples)
        longest = int(lengths.max()) if lengths.size else 0
        most = int(sizes.max()) if sizes.size else 1
        # any ``batch`` examples, repeats included (gap sampling draws with replacement)
        self._caps = (self.batch * longest, self.batch * max(longest - 1, 0),
                      self.batch * most, most)

    @property
    def nbytes(self) -> int:
        """The bytes of the dual variables μ (v, w and Φ* are 3·dim float64 more)."""
        return self.D.mu_u.nbytes + self.D.mu_p.nbytes

    def bytes_per_token(self) -> float:
        return self.nbytes / max(1, int(self.task.sent_ptr[-1]))

    def workspace(self) -> Workspace:
        """One thread's scratch for :meth:`propose` (allocated once per thread)."""
        fb = fb_workspace(self.w, self.K, self.X, self.examples)
        return Workspace(*fb[:10], np.full(max(self.task.F, 1), -1, np.int32),
                         np.full(max(self.task.G, 1), -1, np.int32),
                         np.zeros(max(self._caps[3], 1)), np.zeros(self.K * self.K),
                         np.zeros(self.K * self.K, np.int64), np.zeros(self.K * self.K),
                         *fb[10:])

    def new_batch(self) -> Batch:
        """A batch buffer large enough for any ``batch`` examples, the same one repeated too
        (allocated once, reused)."""
        n_tok, n_pair, n_dv, _ = self._caps
        K, b = self.K, self.batch
        return Batch(np.zeros(b, np.int64), np.zeros(b, np.int64), np.zeros(max(n_tok, 1) * K),
                     np.zeros(max(n_pair, 1) * K * K), np.zeros(max(n_dv, 1), np.int64),
                     np.zeros(max(n_dv, 1)), np.zeros(b + 1, np.int64), np.zeros(b),
                     np.zeros(b), np.zeros(b))

    def propose(self, examples: np.ndarray, B: Batch, ws: Workspace) -> None:
        """The proposals of ``examples`` (at most ``batch``) into B, under the current w and v
        (read without a lock: a concurrent update makes them stale, never wrong)."""
        if examples.shape[0] > self.batch:
            raise ValueError(f"{examples.shape[0]} examples for a batch of {self.batch}")
        propose_kernel(self.w, self.v, self.c1, self.c2, self.F, self.K, self.X, self.D,
                       examples, examples.shape[0], B, ws, self.keep_t)

    def apply(self, B: Batch, count: int, stats: np.ndarray, ws: Workspace) -> None:
        """Apply the first ``count`` proposals of B (:func:`apply_kernel`; one thread at a
        time, ``ws`` its scratch; ``stats``: 5 counters)."""
        apply_kernel(self.w, self.v, self.c1, self.c2, self.K, self.task.sent_ptr, self.D,
                     count, B, stats, ws)

    def freeze(self, frozen: np.ndarray) -> None:
        """Hold the weights ``frozen`` (indices into w, in the transition block) at 0: those
        features are removed from the problem (v and w stay 0 there)."""
        tbase = self.F * self.K
        self.keep_t[np.asarray(frozen, np.int64) - tbase] = 0.0
        self.resync()

    def resync(self) -> None:
        """v = Φ* − Σ_i E_{μ_i}Φ and w = ∇g*(v) recomputed from the stored μ (in place)."""
        self.v[:] = self.gold_phi
        add_expected_features(self.F, self.K, self.X, self.D, self.examples, -1.0, self.v)
        tbase = self.F * self.K
        self.v[tbase:tbase + self.keep_t.shape[0]] *= self.keep_t
        self.w[:] = np.sign(self.v) * np.maximum(np.abs(self.v) - self.c1, 0.0) / (2 * self.c2)

    def log_partition(self, examples: np.ndarray) -> float:
        """Σ log Z_i(w) over ``examples`` (the primal's expensive part; shard it)."""
        return float(log_partition_kernel(self.w, self.F, self.K, self.X, examples))

    def entropy(self, examples: np.ndarray) -> float:
        """Σ H(μ_i) over ``examples`` (the dual's expensive part; shard it)."""
        return float(chain_entropy(self.K, self.task.sent_ptr, self.D, examples))

    def primal(self, log_z: float) -> float:
        """P(w) = Σ log Z_i − w·Φ* + c2‖w‖² + c1‖w‖₁ given Σ log Z_i at w."""
        w = self.w
        return float(log_z - dot(w, self.gold_phi) + self.c2 * dot(w, w)
                     + self.c1 * np.abs(w).sum())

    def dual(self, entropy: float) -> float:
        """D(μ) = Σ H(μ_i) − g*(v) given Σ H(μ_i)."""
        r = np.maximum(np.abs(self.v) - self.c1, 0.0)
        return float(entropy - dot(r, r) / (4.0 * self.c2))
