"""SDCA for the CRF (``crf_method="sdca"``): the chain entropy from marginals against
enumeration, the dual never decreasing, P ≥ D with P − D = Σ_i KL(μ_i ‖ p_w) by enumeration,
the gap closing, the optimum equal to L-BFGS's (c1 = 0 and c1 > 0), and the same optimum on two
threads as on one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_chain_features import naive_phi
from test_crf import _chain

from demidcd.solvers.common import SolverConfig
from demidcd.solvers.crf import CrfObjective, minimize_lbfgs, train_crf
from demidcd.solvers.crf_sdca import train_crf_sdca
from demidcd.tasks.chain.crf_dual import ChainDual


def _serial(task, c1, c2, epochs, dtype=np.float64, init="gold", batch=4, seed=0,
            each_batch=None):
    """SDCA on one thread, batch by batch; returns the dual and (P, D) after each epoch."""
    dual = ChainDual(task, c1, c2, dtype, init, batch)
    ws, B, stats = dual.workspace(), dual.new_batch(), np.zeros(5)
    rng = np.random.default_rng(seed)
    figures = []
    for _ in range(epochs):
        perm = rng.permutation(dual.examples)
        for s in range(0, perm.size, batch):
            ex = perm[s:s + batch]
            dual.propose(ex, B, ws)
            dual.apply(B, ex.size, stats, ws)
            if each_batch is not None:
                each_batch(dual)
        figures.append((dual.primal(dual.log_partition(dual.examples)),
                        dual.dual(dual.entropy(dual.examples))))
    return dual, figures


def _taggings(task, tokens, i):
    """(taggings, their Φ) of sentence i by enumeration."""
    a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
    ys = list(itertools.product(range(task.K), repeat=b - a))
    return ys, np.array([naive_phi(task.F, task.K, task.G, tokens[a:b], y) for y in ys])


def _chain_probability(dual, i, ys):
    """q_μ(y) of the Markov chain with sentence i's stored marginals, for each tagging."""
    D, K = dual.D, dual.K
    a = int(dual.task.sent_ptr[i])
    p0 = int(D.pair_ptr[i])
    out = []
    for y in ys:
        n = len(y)
        if n == 1:
            out.append(float(D.mu_u[a * K + y[0]]))
            continue
        q = 1.0
        for t in range(1, n):
            q *= float(D.mu_p[(p0 + t - 1) * K * K + y[t - 1] * K + y[t]])
            if t < n - 1:
                q /= max(float(D.mu_u[(a + t) * K + y[t]]), 1e-300)
        out.append(q)
    return np.array(out)


def test_chain_entropy_equals_enumeration():
    """H(μ) from the marginals is the entropy of the chain p_w whose marginals they are."""
    task, w, tokens, _ = _chain(11, True, 2, n_sent=8)
    dual = ChainDual(task, 0.0, 1.0, np.float64)
    # one full step (γ = 1) from any μ puts β = p_w's marginals in μ: propose, then copy
    ws, B = dual.workspace(), dual.new_batch()
    dual.w[:] = w
    for i in dual.examples:
        ex = np.array([i])
        dual.propose(ex, B, ws)
        n = int(task.sent_ptr[i + 1] - task.sent_ptr[i])
        a, p0, K = int(task.sent_ptr[i]), int(dual.D.pair_ptr[i]), task.K
        dual.D.mu_u[a * K:(a + n) * K] = B.beta_u[:n * K]
        dual.D.mu_p[p0 * K * K:(p0 + n - 1) * K * K] = B.beta_p[:(n - 1) * K * K]
        ys, phis = _taggings(task, tokens, i)
        s = phis @ w
        p = np.exp(s - np.logaddexp.reduce(s))
        assert dual.entropy(ex) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-10, abs=1e-12)
        np.testing.assert_allclose(_chain_probability(dual, i, ys), p, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("c1", [0.0, 0.3])
def test_dual_never_decreases_and_gap_is_the_sum_of_kls(c1):
    task, _, tokens, _ = _chain(12, True, 2, n_sent=12)
    seen = []

    def each_batch(dual):
        seen.append(dual.dual(dual.entropy(dual.examples)))

    dual, figures = _serial(task, c1, 0.4, 3, each_batch=each_batch)
    assert all(b >= a - 1e-12 for a, b in zip(seen, seen[1:], strict=False))
    assert seen[-1] > seen[0]
    P, D = figures[-1]
    assert P >= D
    kl = 0.0
    for i in dual.examples:
        ys, phis = _taggings(task, tokens, int(i))
        s = phis @ dual.w
        logp = s - np.logaddexp.reduce(s)
        q = _chain_probability(dual, int(i), ys)
        assert q.sum() == pytest.approx(1.0, abs=1e-9)
        m = q > 0
        kl += float((q[m] * (np.log(q[m]) - logp[m])).sum())
    assert P - D == pytest.approx(kl, rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("c1,init", [(0.0, "gold"), (0.5, "gold"), (0.0, "uniform")])
def test_gap_closes_at_the_lbfgs_optimum(c1, init):
    task, _, _, _ = _chain(8, True, 2, n_sent=30)
    c2 = 0.5
    _, figures = _serial(task, c1, c2, 40, init=init)
    P, D = figures[-1]
    assert (P - D) / P < 1e-9
    assert figures[5][0] - figures[5][1] < figures[0][0] - figures[0][1]
    res = minimize_lbfgs(CrfObjective(task, c2=c2), np.zeros(task.dim), c1=c1, epsilon=1e-10,
                         period=10, delta=0.0, max_iterations=3000)
    assert P == pytest.approx(res.f, rel=1e-6)


def test_float32_marginals_reach_the_optimum():
    task, _, _, _ = _chain(8, True, 2, n_sent=30)
    dual, figures = _serial(task, 0.1, 0.5, 30, dtype=np.float32)
    assert dual.D.mu_p.dtype == np.float32
    assert dual.bytes_per_token() < (task.K + task.K ** 2) * 4 + 1e-9
    ref, _ = _serial(task, 0.1, 0.5, 30)
    P = figures[-1][0]
    assert P == pytest.approx(ref.primal(ref.log_partition(ref.examples)), rel=1e-6)


@pytest.mark.parametrize("threads,sampling", [(1, "gap"), (2, "gap"), (2, "uniform")])
def test_threads_reach_the_same_optimum(threads, sampling):
    """p = 2 (a proposal thread, stale proposals, some dropped) reaches p = 1's optimum, which
    is L-BFGS's; float64 marginals: the certified gap is ≥ 0 to rounding."""
    task, _, _, _ = _chain(21, True, 2, n_sent=300, max_len=5)
    c1, c2 = 0.1, 0.3
    res = train_crf_sdca(task, SolverConfig(), threads=threads, c1=c1, c2=c2, epsilon=1e-10,
                         max_iterations=400, dual_dtype=np.float64, sampling=sampling)
    assert res.stop_reason == "converged"
    assert all(r["gap"] >= -1e-12 * r["primal"] for r in res.history if "gap" in r)
    ref = minimize_lbfgs(CrfObjective(task, c2=c2), np.zeros(task.dim), c1=c1, epsilon=1e-10,
                         period=10, delta=0.0, max_iterations=5000)
    assert res.extra["objective"] == pytest.approx(ref.f, rel=1e-8)
    obj = CrfObjective(task, c2=c2)(res.w)[0] + c1 * np.abs(res.w).sum()
    assert obj == pytest.approx(ref.f, rel=1e-8)


def test_train_crf_sdca_float32_on_two_threads():
    """SDCA's default storage (float32 marginals): the optimum to 1e-6, the gap certified to
    the rounding of the stored marginals."""
    task, _, _, _ = _chain(21, True, 2, n_sent=300, max_len=5)
    res = train_crf(task, SolverConfig(), threads=2, c1=0.1, c2=0.3, epsilon=1e-7,
                    crf_method="sdca")
    assert res.stop_reason == "converged"
    assert res.history[-1]["gap"] >= -1e-7 * res.history[-1]["primal"]
    ref = minimize_lbfgs(CrfObjective(task, c2=0.3), np.zeros(task.dim), c1=0.1,
                         epsilon=1e-10, period=10, delta=0.0, max_iterations=5000)
    assert res.extra["objective"] == pytest.approx(ref.f, rel=1e-6)


def test_lbfgs_is_the_default_and_sdca_reaches_its_optimum():
    task, _, _, _ = _chain(8, True, 2, n_sent=30)
    res = train_crf(task, SolverConfig(), c2=0.5, stop_window=0)  # (to CRFsuite's tests)
    assert "evaluations" in res.extra
    sd = train_crf(task, SolverConfig(), c2=0.5, epsilon=1e-8, crf_method="sdca")
    assert "dual_bytes" in sd.extra
    assert sd.extra["objective"] == pytest.approx(res.extra["objective"], rel=1e-5)


def test_a_stop_request_is_interrupted_not_time_limit(monkeypatch):
    """Issue 56, defect 17: a Ctrl-C (the stop flag) during an SDCA epoch, with no time limit,
    ended the run as "time-limit" (and the CLI exited 0); it is "interrupted", as with every
    other learner."""
    from demidcd.solvers.common import StopRequest

    monkeypatch.setattr(StopRequest, "requested", False)
    monkeypatch.setattr(StopRequest, "active", False)
    task, _, _, _ = _chain(21, True, 2, n_sent=300, max_len=5)

    def ctrl_c(seconds, w):  # the snapshot tick, between batches of an epoch
        StopRequest.requested = True

    res = train_crf_sdca(task, SolverConfig(), threads=1, c2=0.3, epsilon=1e-15, tick=ctrl_c)
    assert StopRequest.requested
    assert res.stop_reason == "interrupted"
