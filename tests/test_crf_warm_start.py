"""The L-BFGS CRF's warm start (Hogwild SGD epochs, :mod:`demidcd.solvers.crf_sgd`), its
guided runs of sentences and its memory rule."""

from __future__ import annotations

import numpy as np
import pytest
from test_chain_features import random_chain
from test_crf import _chain
from test_crf_seen_pairs import _pair

import demidcd.solvers.crf_sgd as crf_sgd
from demidcd.solvers.common import SolverConfig
from demidcd.solvers.crf import (
    MEMORY,
    MEMORY_BYTES,
    MEMORY_MAX,
    SMALLEST_RUN,
    CrfObjective,
    guided_runs,
    lbfgs_memory,
    train_crf,
)
from demidcd.tasks.chain.marginals import unseen_transitions
from demidcd.tasks.chain.task import SequenceTask


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_guided_runs_cover_the_sentences_in_order_largest_first(threads):
    rng = np.random.default_rng(threads)
    lengths = rng.integers(0, 40, 3000)
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    runs = guided_runs(ptr, threads)
    np.testing.assert_array_equal(np.concatenate(runs), np.arange(3000))
    assert all(r.size for r in runs)
    tokens = [int(ptr[r[-1] + 1] - ptr[r[0]]) for r in runs]
    if threads == 1:
        assert len(runs) == 1
        return
    assert tokens[0] >= tokens[-1] and len(runs) >= 2 * threads
    smallest = ptr[-1] * SMALLEST_RUN / threads
    assert max(tokens[-3:]) <= 4 * smallest + 40  # the last runs are the small ones


def test_lbfgs_memory_keeps_the_pairs_within_their_bytes():
    assert lbfgs_memory(1000) == MEMORY_MAX
    assert lbfgs_memory(10**9) == MEMORY
    m = lbfgs_memory(450_000)
    assert MEMORY < m < MEMORY_MAX and 16 * m * 450_000 <= MEMORY_BYTES


@pytest.mark.parametrize("seen", [False, True])
def test_sgd_epochs_lower_the_objective_from_zero(seen):
    dense, seen_task, _ = _pair(3, True, 2, n_sent=60)
    task = seen_task if seen else dense
    obj = CrfObjective(task, c2=0.1)
    f = [obj(np.zeros(task.dim))[0]]
    for epochs in (1, 3):  # (the same seed: the same calibration and first epoch)
        w = np.zeros(task.dim)
        eta, ran = crf_sgd.sgd_epochs(obj, w, epochs)
        assert eta in crf_sgd.CANDIDATES and ran == epochs
        assert not obj.buffers.any()  # the gradient scratch is left zero
        f.append(obj(w)[0])
    assert f[2] < f[1] < 0.95 * f[0]


def test_sgd_steps_are_the_gradient_of_the_sentence():
    """One step on one sentence: w ← w − η (∇[−log p(y_i | x_i)] + (2 c2 / N) w) on the
    coordinates the sentence touches (its gradient's support), nothing else moves."""
    from demidcd.tasks.chain.marginals import NO_PARTIAL, nll_gradient_kernel

    task, w, _, _ = _chain(4, True, 2, n_sent=10)
    i = np.array([3], np.int64)
    g = np.zeros(task.dim)
    nll_gradient_kernel(w, task.u_rows, task.K, task.chain, task.Y, i, g, np.zeros(3, np.int64))
    lam, eta = 0.02, 0.1
    w1 = w.copy()
    crf_sgd.sgd_run(w1, np.zeros(task.dim), task.u_rows, task.K, task.chain, task.Y,
                     NO_PARTIAL, i, eta, lam, np.zeros(0, np.int64), np.zeros(3, np.int64))
    moved = w1 != w
    assert moved.any()
    np.testing.assert_allclose(w1[moved], (w - eta * (g + lam * w))[moved], rtol=1e-12)
    assert not np.any(g[~moved][: task.u_rows * task.K])  # untouched U weights: no gradient


def test_diverging_steps_leave_zero_weights(monkeypatch):
    task, _, _, _ = _chain(5, False, 0, n_sent=30)
    monkeypatch.setattr(crf_sgd, "CANDIDATES", (1e300,))
    w = np.zeros(task.dim)
    crf_sgd.sgd_epochs(CrfObjective(task, c2=0.1), w, 2)
    assert not w.any()


def test_warm_started_lbfgs_reaches_the_cold_optimum_and_keeps_frozen_transitions_zero():
    rng = np.random.default_rng(9)
    X, Y, F, _ = random_chain(rng, 60, 4, 4, True, max_len=5)
    Y = np.where(Y == 3, 2, Y).astype(np.int32)
    task = SequenceTask(X, Y, 4, F)
    frozen = unseen_transitions(task)
    kw = dict(c1=0.2, c2=0.3, epsilon=1e-9, stop_delta=0.0, stop_window=0,
              max_iterations=3000,
              all_possible_transitions=False)
    cold = train_crf(task, SolverConfig(), warm_epochs=0, **kw)
    warm = train_crf(task, SolverConfig(), threads=2, warm_epochs=3, num_memories=9, **kw)
    assert not np.any(warm.w[frozen])
    assert warm.extra["objective"] == pytest.approx(cold.extra["objective"], rel=1e-7)
    assert warm.history[0]["objective"] < cold.history[0]["objective"]


def test_bad_warm_start_options_are_refused_in_one_line():
    from demidcd.errors import OptionError

    task, _, _, _ = _chain(5, False, 0)
    with pytest.raises(OptionError, match="warm.epochs"):
        train_crf(task, SolverConfig(), warm_epochs=-1)
    with pytest.raises(OptionError, match="num.memories"):
        train_crf(task, SolverConfig(), num_memories=0)


@pytest.mark.parametrize("seen", [False, True])
def test_hessian_diagonal_is_exact_on_one_token_sentences(seen):
    """One-token sentences have no covariance between positions: the kernel's diagonal equals
    the finite differences of the gradient (unigram weights, with values, and START / END)."""
    from demidcd.tasks.chain.marginals import hessian_diagonal_kernel
    from demidcd.tasks.chain.records import seen_pairs

    rng = np.random.default_rng(11)
    X, Y, F, _ = random_chain(rng, 30, 3, 4, True, max_len=1)
    task = SequenceTask(X, Y, 3, F, pairs=seen_pairs(X, Y, F, 3) if seen else None)
    one = np.flatnonzero(np.diff(np.asarray(task.sent_ptr)) == 1).astype(np.int64)
    assert one.size >= 10
    w = rng.normal(scale=0.5, size=task.dim)
    h = np.zeros(task.dim)
    hessian_diagonal_kernel(w, task.u_rows, task.K, task.chain, one, h, np.zeros(3, np.int64))

    def grad(v):
        from demidcd.tasks.chain.marginals import nll_gradient_kernel

        g = np.zeros(task.dim)
        nll_gradient_kernel(v, task.u_rows, task.K, task.chain, task.Y, one, g,
                            np.zeros(3, np.int64))
        return g

    for j in np.flatnonzero(grad(w) != 0.0):
        e = np.zeros(task.dim)
        e[j] = 1e-5
        fd = (grad(w + e)[j] - grad(w - e)[j]) / 2e-5
        assert h[j] == pytest.approx(fd, rel=1e-5, abs=1e-8)


def test_the_diagonal_preconditioner_reaches_the_same_optimum():
    """L-BFGS / OWL-QN with H₀ = γ·diag(1 / (h + 2 c2)) and with H₀ = γ·I: one optimum."""
    from demidcd.solvers.crf import minimize_lbfgs

    task, _, _, _ = _chain(12, True, 2, n_sent=40)
    obj = CrfObjective(task, c2=0.3, threads=2)
    h0 = 1.0 / (obj.hessian_diagonal(np.zeros(task.dim)) + 0.6)
    assert np.all(h0 > 0) and not obj.buffers.any()
    kw = dict(c1=0.2, epsilon=1e-9, period=10, delta=0.0, max_iterations=3000)
    plain = minimize_lbfgs(obj, np.zeros(task.dim), **kw)
    diag = minimize_lbfgs(obj, np.zeros(task.dim), h0=h0, **kw)
    assert diag.f == pytest.approx(plain.f, rel=1e-8)
