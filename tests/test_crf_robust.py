"""The L-BFGS CRF under stress (issue 56): log Z and the marginals of a long sentence, or of
weights large enough to underflow the scaled recursion, equal the log-space reference; a
non-finite objective is never accepted nor reported as converged; a stop request ends an
evaluation within a few sentences per thread however many labels there are; the default stop
is Wapiti's error window; the iteration line speaks the CRF's words."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from demidcd.progress import format_iteration, stop_line
from demidcd.solvers import crf
from demidcd.solvers.common import SolverConfig, StopRequest
from demidcd.solvers.crf import CrfObjective, ObjectiveNotFinite, minimize_lbfgs, train_crf
from demidcd.tasks.base import InferenceInterrupted
from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.kernels import token_emissions, transitions
from demidcd.tasks.chain.marginals import marginals_kernel, nll_gradient_kernel
from demidcd.tasks.chain.task import SequenceTask


def _one_long_sentence(n: int, K: int, F: int, seed: int) -> SequenceTask:
    rng = np.random.default_rng(seed)
    X = EncodedSequences(np.array([0, n], np.int64), np.arange(n + 1, dtype=np.int64),
                         rng.integers(0, F, size=n).astype(np.int32), None, None, None, None)
    return SequenceTask(X, rng.integers(0, K, size=n).astype(np.int32), K, F)


def _log_space_reference(task: SequenceTask, w: np.ndarray):
    """(log Z, token marginals (n, K), Σ_t pairwise marginals (K, K)) by the textbook
    recursions in log space (numpy, no scaling)."""
    K, n = task.K, int(task.sent_ptr[-1])
    em = np.empty(n * K)
    token_emissions(w, K, task.chain, 0, n, em)
    em = em.reshape(n, K)
    tr, _, start, end = transitions(w, task.F, K)
    tr = tr.reshape(K, K)
    la, lb = np.empty((n, K)), np.empty((n, K))
    la[0] = start + em[0]
    for t in range(1, n):
        la[t] = np.logaddexp.reduce(la[t - 1][:, None] + tr, axis=0) + em[t]
    lb[n - 1] = end
    for t in range(n - 1, 0, -1):
        lb[t - 1] = np.logaddexp.reduce(tr + (em[t] + lb[t])[None, :], axis=1)
    logz = np.logaddexp.reduce(la[n - 1] + end)
    pairs = np.zeros((K, K))
    for t in range(1, n):
        pairs += np.exp(la[t - 1][:, None] + tr + (em[t] + lb[t])[None, :] - logz)
    return logz, np.exp(la + lb - logz), pairs


@pytest.mark.parametrize("n,scale", [(20_000, 1.0), (300, 400.0), (3_000, 60.0)])
def test_log_z_and_marginals_of_a_long_or_steep_sentence_equal_the_log_space_reference(n, scale):
    """A 20,000-token sentence at ordinary weights, and weights in the hundreds (every
    transition but one more than ~745 below the largest: the scaled recursion's product
    underflows to 0 and used to give log Z = −inf, an objective of −inf, "converged")."""
    K = 4
    task = _one_long_sentence(n, K, 6, seed=n)
    w = np.random.default_rng(1).normal(scale=scale, size=task.dim)
    marg, _, logz = marginals_kernel(w, task.F, K, task.chain, np.array([0]),
                                     np.zeros(0, np.int32))
    ref_z, ref_m, ref_pairs = _log_space_reference(task, w)
    assert np.isfinite(logz[0]) and logz[0] == pytest.approx(ref_z, rel=1e-12)
    np.testing.assert_allclose(marg.reshape(n, K), ref_m, atol=1e-9)
    g = np.zeros(task.dim)
    nll = nll_gradient_kernel(w, task.F, K, task.chain, task.Y, np.array([0]), g,
                              np.zeros(3, np.int64))
    y = task.Y
    gold = sum(w[f * K + k] for f, k in zip(task.chain.feat_idx, y, strict=True))
    K1, base = K + 1, task.F * K
    gold += w[base + K * K1 + y[0]] + w[base + y[-1] * K1 + K]
    gold += sum(w[base + a * K1 + b] for a, b in zip(y[:-1], y[1:], strict=True))
    assert math.isfinite(nll) and nll == pytest.approx(ref_z - gold, rel=1e-9, abs=1e-6)
    T = g[base:base + K1 * K1].reshape(K1, K1)[:K, :K]
    gold_pairs = np.zeros((K, K))
    np.add.at(gold_pairs, (y[:-1], y[1:]), 1.0)
    np.testing.assert_allclose(T, ref_pairs - gold_pairs, atol=1e-6 * n)


def test_a_non_finite_objective_is_refused_never_converged():
    """Trials whose objective is −inf or NaN are refused as steps without decrease (−inf was
    accepted: −inf ≤ anything, then "converged"); a start, or a direction along which nothing
    is finite however short the step, raises."""
    bad = []

    def fun(x):  # a quadratic with its minimum at (1, 1), −inf or NaN past 1.1
        f = float((x[0] - 1.0) ** 2 + 10.0 * (x[1] - 1.0) ** 2)
        g = np.array([2.0 * (x[0] - 1.0), 20.0 * (x[1] - 1.0)])
        if x[0] > 1.1 or x[1] > 1.1:
            bad.append(x.copy())
            return (-math.inf if x[0] > 1.1 else math.nan), g
        return f, g

    res = minimize_lbfgs(fun, np.array([-40.0, -3.0]), epsilon=1e-10, max_iterations=200)
    assert bad and math.isfinite(res.f) and res.reason == "converged"
    np.testing.assert_allclose(res.w, [1.0, 1.0], atol=1e-6)
    with pytest.raises(ObjectiveNotFinite):
        minimize_lbfgs(lambda x: (math.inf, np.zeros(1)), np.zeros(1))
    with pytest.raises(ObjectiveNotFinite):  # finite at the start, then nowhere along the way
        minimize_lbfgs(lambda x: (1.0 if x[0] == 0.0 else math.nan, np.array([-1.0])),
                       np.zeros(1))


def _many_labels(K: int = 300, n_sent: int = 600, seed: int = 0) -> SequenceTask:
    rng = np.random.default_rng(seed)
    n = 3 * n_sent
    X = EncodedSequences(np.arange(0, n + 1, 3, dtype=np.int64),
                         np.arange(n + 1, dtype=np.int64),
                         rng.integers(0, 50, size=n).astype(np.int32), None, None, None, None)
    return SequenceTask(X, rng.integers(0, K, size=n).astype(np.int32), K, 50)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_stop_request_ends_an_evaluation_within_a_sentence_per_thread(threads):
    """Many labels (each sentence costs K² per position): the kernels check the stop flag
    between sentences, so after the request each thread finishes at most the sentence it is
    in (counted in sentences, not seconds), and the call raises instead of returning a
    partial objective. (20,000 sentences: an evaluation then outlasts the main thread's first
    look at the request, :data:`~demidcd.solvers.crf.POLL`, on any machine.)"""
    task = _many_labels(n_sent=20_000)
    obj = CrfObjective(task, c2=0.1, threads=threads)
    asked = {}

    def should_stop() -> bool:
        if obj.work >= 40:
            asked.setdefault("work", obj.work)
            return True
        return False

    obj.should_stop = should_stop
    with pytest.raises(InferenceInterrupted):
        obj(np.zeros(task.dim))
    assert asked and obj.work - asked["work"] <= 2 * threads
    assert obj.work < task.n_examples
    with pytest.raises(InferenceInterrupted):  # and nothing runs once asked
        obj.hessian_diagonal(np.zeros(task.dim))
    obj.close()


@pytest.mark.parametrize("where", [0, 1000, 2000])
def test_sigint_mid_evaluation_stops_train_crf_as_interrupted_within_an_evaluation(
        monkeypatch, where):
    """SIGINT to this process, through the command line's handler (StopRequest.handler), once
    the kernels have done ``where`` sentences: in the warm start's step-size calibration (0:
    6 candidates × 100 sentences), in its SGD epochs (1000: 3 × 300 more) or in an L-BFGS
    evaluation (2000: past the Hessian's diagonal, 300 more). The handler sets the
    kernels' stop flag as soon as the main thread runs it, so each thread ends the sentence it
    is in and the run ends "interrupted", well inside the evaluation, with finite, non-zero
    weights (counted in sentences, not seconds; the per-sentence bound of a stop request is
    test_a_stop_request_ends_an_evaluation_within_a_sentence_per_thread's)."""
    import os
    import signal

    task = _many_labels(K=400, n_sent=300)
    made: list[CrfObjective] = []

    class Watched(CrfObjective):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(crf, "CrfObjective", Watched)
    for name, value in (("requested", False), ("active", False), ("held", -1),
                        ("listeners", [])):
        monkeypatch.setattr(StopRequest, name, value)
    at = {}

    def watch() -> None:
        while not made or made[0].work < where + 1:
            time.sleep(0.0005)
        at["work"] = made[0].work
        os.kill(os.getpid(), signal.SIGINT)

    old = signal.signal(signal.SIGINT, StopRequest.handler)
    try:
        t = threading.Thread(target=watch, daemon=True)
        t.start()
        res = train_crf(task, SolverConfig(), threads=2, warm_epochs=3)
        t.join(5)
    finally:
        signal.signal(signal.SIGINT, old)
    assert res.stop_reason == "interrupted" and np.isfinite(res.w).all()
    assert np.any(res.w)  # (cut in the calibration: its best candidate's SGD iterate)
    # the handler runs when the main thread next gets the GIL: a few sentences per thread on a
    # quiet machine, tens under contention (30 seen alone once); an ignored signal runs the rest
    # of the evaluation's 300 sentences and the epochs after it
    assert made[0].work - at["work"] <= 100, (made[0].work, at)
    assert (made[0].evaluations > 0) == (where > 1800)
    assert not StopRequest.listeners


def test_the_crf_iteration_line_speaks_its_own_words():
    rec = {"epoch": 7, "seconds": 1.5, "objective": 123.4, "gnorm": 0.02, "improvement": 1e-3,
           "train_error": 0.25, "nonzero": 1234, "evaluations": 9, "dev": 0.9, "dev_metric":
           "chunk F1"}
    line = format_iteration(rec)
    for word in ("objective 123.4", "|g|/max(1,|w|) 0.02", "improvement 0.001",
                 "train error 0.25%", "nonzero 1,234", "evaluations 9", "dev chunk F1 90.00"):
        assert word in line
    for svm_word in ("updates", "active", "max_pg"):
        assert svm_word not in line


def test_the_error_window_stops_and_max_iterations_is_named():
    """Wapiti's window: the training error within --stop-eps points over --stop-window
    iterations stops the run as converged (the rule logged); a run cut by --max-iterations
    says so, not max-epochs."""
    rng = np.random.default_rng(3)
    n = 3 * 200
    X = EncodedSequences(np.arange(0, n + 1, 3, dtype=np.int64),
                         np.arange(n + 1, dtype=np.int64),
                         rng.integers(0, 40, size=n).astype(np.int32), None, None, None, None)
    task = SequenceTask(X, rng.integers(0, 5, size=n).astype(np.int32), 5, 40)
    lines: list[str] = []
    kw = dict(epsilon=0.0, stop_delta=0.0, warm_epochs=0)
    res = train_crf(task, SolverConfig(), log=lines.append, stop_window=3, stop_eps=100.0,
                    **kw)
    assert res.stop_reason == "converged" and res.epochs == 3
    assert any("training error changed by less than" in ln for ln in lines)
    errs = [r["train_error"] for r in res.history]
    assert all(0.0 <= e <= 100.0 for e in errs) and "max_pg" not in res.history[-1]
    capped = train_crf(task, SolverConfig(), stop_window=0, max_iterations=4, **kw)
    assert capped.stop_reason == "max-iterations" and capped.epochs == 4
    line = stop_line(capped, 0.1, None, lambda o: "--" + o.replace("_", "-"))
    assert "stopped: max-iterations after 4 iterations" in line and "--max-iterations" in line
