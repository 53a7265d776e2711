"""The CRF on the seen-pairs U block (``weights="seen"``, the crf learner's default: CRFsuite's
objective keeps a weight only for the (feature, label) pairs seen in training): forward-backward,
the gradient and the SDCA dual equal the dense model's with every unseen pair's weight held at
0, and SDCA and L-BFGS reach the same optimum on it."""

from __future__ import annotations

import numpy as np
import pytest
from test_chain_features import random_chain

from demidcd.solvers.common import SolverConfig
from demidcd.solvers.crf import CrfObjective, minimize_lbfgs
from demidcd.solvers.crf_sdca import train_crf_sdca
from demidcd.tasks.chain.crf_dual import ChainDual
from demidcd.tasks.chain.marginals import marginals_kernel, nll_gradient_kernel
from demidcd.tasks.chain.records import seen_pairs
from demidcd.tasks.chain.task import SequenceTask


def _pair(seed: int, valued: bool, G: int, n_sent: int = 8):
    """(dense task, seen-pairs task of the same data, the map from the seen layout's weights to
    the dense layout's: dense[to_dense[j]] = seen[j])."""
    rng = np.random.default_rng(seed)
    K = 3
    X, Y, F, _ = random_chain(rng, n_sent, K, 4, valued, max_len=4, G=G)
    dense = SequenceTask(X, Y, K, F, n_bigram_obs=G)
    off, lab = seen_pairs(X, Y, F, K)
    seen = SequenceTask(X, Y, K, F, n_bigram_obs=G, pairs=(off, lab))
    assert seen.dim < dense.dim
    to_dense = np.full(seen.dim, -1, np.int64)
    for f in range(F):
        for j in range(off[f], off[f + 1]):
            to_dense[j] = f * K + lab[j]
    rest = dense.dim - F * K  # the transition and B blocks, laid out alike after U
    to_dense[seen.u_rows * K:] = F * K + np.arange(rest)
    return dense, seen, to_dense


def _expand(w_seen, to_dense, dim):
    w = np.zeros(dim)
    keep = to_dense >= 0
    w[to_dense[keep]] = w_seen[keep]
    return w


@pytest.mark.parametrize("valued,G", [(False, 0), (True, 2)])
def test_marginals_and_gradient_equal_the_dense_model_restricted(valued, G):
    dense, seen, to_dense = _pair(3 + G, valued, G)
    rng = np.random.default_rng(G)
    w = rng.normal(size=seen.dim)
    w[to_dense < 0] = 0.0  # the padding
    wd = _expand(w, to_dense, dense.dim)
    ex = np.arange(seen.n_examples)
    none = np.zeros(0, np.int32)
    m_s, _, z_s = marginals_kernel(w, seen.u_rows, seen.K, seen.chain, ex, none)
    m_d, _, z_d = marginals_kernel(wd, dense.F, dense.K, dense.chain, ex, none)
    np.testing.assert_allclose(z_s, z_d, rtol=1e-12)
    np.testing.assert_allclose(m_s, m_d, atol=1e-12)
    g_s, g_d = np.zeros(seen.dim), np.zeros(dense.dim)
    f_s = nll_gradient_kernel(w, seen.u_rows, seen.K, seen.chain, seen.Y, ex, g_s,
                              np.zeros(3, np.int64))
    f_d = nll_gradient_kernel(wd, dense.F, dense.K, dense.chain, dense.Y, ex, g_d,
                              np.zeros(3, np.int64))
    assert f_s == pytest.approx(f_d, rel=1e-12)
    keep = to_dense >= 0
    np.testing.assert_allclose(g_s[keep], g_d[to_dense[keep]], atol=1e-10)
    assert not np.any(g_s[~keep])


def test_the_dual_state_is_the_dense_ones_restricted():
    dense, seen, to_dense = _pair(5, True, 2)
    a, b = ChainDual(seen, 0.0, 0.5, np.float64), ChainDual(dense, 0.0, 0.5, np.float64)
    keep = to_dense >= 0
    np.testing.assert_allclose(a.gold_phi[keep], b.gold_phi[to_dense[keep]], atol=1e-12)
    ws, B, stats = a.workspace(), a.new_batch(), np.zeros(5)
    a.propose(a.examples[:4], B, ws)  # Δv entries address the seen layout only
    idx = B.dv_idx[:B.dv_ptr[4]]
    assert idx.min() >= 0 and idx.max() < seen.dim and np.all(to_dense[idx] >= 0)
    a.apply(B, 4, stats, ws)
    v = a.v.copy()
    a.resync()  # v rebuilt from μ equals v updated step by step
    np.testing.assert_allclose(a.v, v, atol=1e-10)


def test_sdca_reaches_the_lbfgs_optimum_on_seen_pairs():
    """(c1 > 0 changes only the per-coordinate prox, tested on the dense layout in
    test_crf_sdca; OWL-QN to 1e-10 on this problem takes 15 s.)"""
    c1 = 0.0
    _, seen, _ = _pair(11, True, 2, n_sent=60)
    c2 = 0.3
    res = train_crf_sdca(seen, SolverConfig(), threads=2, c1=c1, c2=c2, epsilon=1e-8,
                         max_iterations=400, dual_dtype=np.float64)
    assert res.stop_reason == "converged"
    ref = minimize_lbfgs(CrfObjective(seen, c2=c2), np.zeros(seen.dim), c1=c1, epsilon=1e-10,
                         period=10, delta=0.0, max_iterations=5000)
    assert res.extra["objective"] == pytest.approx(ref.f, rel=1e-7)


def test_the_crf_estimator_keeps_the_seen_pairs_by_default():
    from demidcd.api import SequenceTagger

    X = [["a", "b", "a", "c"], ["b", "a"], ["c", "c", "a"]] * 5
    Y = [["N", "V", "N", "D"], ["V", "N"], ["D", "D", "N"]] * 5
    crf = SequenceTagger(algorithm="crf", min_count=1, max_iterations=50).fit(X, Y)
    assert crf.seen_pairs_ is not None
    full = SequenceTagger(algorithm="crf", min_count=1, max_iterations=50,
                          weights="all").fit(X, Y)
    assert full.seen_pairs_ is None
    assert crf.coef_.shape[0] < full.coef_.shape[0]
    assert crf.predict(X) == Y
    for sent in crf.predict_marginals(X[:3]):
        for tok in sent:
            assert sum(tok.values()) == pytest.approx(1.0)


def test_crf_log_lines_show_only_what_was_measured():
    """An SDCA epoch without a certificate has no max_pg, shrinking or admissions: its line
    shows none (they were printed as zeros), the certified epochs show the gap, and the stop
    line names the CRF's own rule (--epsilon), not the SVM's --tol."""
    from demidcd.progress import format_iteration, stop_line

    _, seen, _ = _pair(11, True, 2, n_sent=60)
    res = train_crf_sdca(seen, SolverConfig(), threads=1, c1=0.1, c2=0.3, epsilon=1e-12,
                         max_iterations=3, dual_dtype=np.float64)
    lines = [format_iteration(r) for r in res.history]
    assert all("max_pg" not in ln and "shrunk" not in ln and "admitted" not in ln
               for ln in lines)
    assert all("gap estimate" in ln for ln in lines)
    assert "primal" in lines[0] and "primal" in lines[-1]
    stop = stop_line(res, tol=0.01, loss=None, name=lambda k: "--" + k.replace("_", "-"))
    assert "relative duality gap" in stop and "--epsilon 1e-12" in stop and "--tol" not in stop
    assert "raise --max-iterations or --epsilon" in stop


def test_unseen_transitions_are_those_no_gold_tagging_takes():
    from demidcd.tasks.chain.marginals import unseen_transitions

    dense, _, _ = _pair(4, False, 0, n_sent=12)
    K, K1 = dense.K, dense.K + 1
    seen = set()
    for i in range(dense.n_examples):
        y = [K, *dense.Y[dense.sent_ptr[i]:dense.sent_ptr[i + 1]].tolist(), K]
        seen.update(zip(y[:-1], y[1:], strict=True))
    want = [dense.F * K + a * K1 + b for a in range(K1) for b in range(K1)
            if (a, b) not in seen]
    assert unseen_transitions(dense).tolist() == want


def test_without_all_possible_transitions_both_methods_hold_them_at_zero():
    """all_possible_transitions=False (CRFsuite's default): the unseen transitions keep weight
    0, and SDCA and L-BFGS reach the same optimum of that smaller model, above the full one's."""
    from demidcd.solvers.crf import train_crf
    from demidcd.tasks.chain.marginals import unseen_transitions

    rng = np.random.default_rng(9)
    X, Y, F, _ = random_chain(rng, 20, 4, 4, True, max_len=4)
    Y = np.where(Y == 3, 2, Y).astype(np.int32)  # label 3 never occurs: its transitions
    # (and others, by chance) are unseen
    task = SequenceTask(X, Y, 4, F)
    frozen = unseen_transitions(task)
    assert frozen.size > 0
    kw = dict(c1=0.0, c2=0.3, epsilon=1e-8, all_possible_transitions=False)
    sd = train_crf(task, SolverConfig(), threads=2, max_iterations=500, crf_method="sdca",
                   **kw)
    lb = train_crf(task, SolverConfig(), crf_method="lbfgs", max_iterations=3000,
                   stop_delta=0.0, stop_window=0, **kw)
    assert sd.stop_reason == "converged"
    assert not np.any(sd.w[frozen]) and not np.any(lb.w[frozen])
    assert sd.extra["objective"] == pytest.approx(lb.extra["objective"], rel=1e-6)
    full = train_crf(task, SolverConfig(), crf_method="lbfgs", max_iterations=3000,
                     stop_delta=0.0, stop_window=0, c1=0.0, c2=0.3, epsilon=1e-8)
    assert np.any(full.w[frozen])
    assert full.extra["objective"] < lb.extra["objective"]


@pytest.mark.parametrize("valued,G,threads", [(False, 0, 1), (True, 2, 3)])
def test_the_objectives_dense_view_gives_the_seen_pairs_objective(monkeypatch, valued, G,
                                                                  threads):
    """CrfObjective on a dense copy of the seen pairs' weights (``dense_view``) returns the
    value and gradient of the seen-pairs kernels, the padding's gradient its L2 term."""
    import demidcd.solvers.crf as crf

    _, seen, to_dense = _pair(5 + G, valued, G, n_sent=30)
    rng = np.random.default_rng(1)
    w = rng.normal(size=seen.dim)  # the padding too: its gradient is 2·c2·w there
    monkeypatch.setattr(crf, "DENSE_VIEW_FILL", 2.0)  # never
    assert not crf.dense_view(seen)
    f_lists, g_lists = CrfObjective(seen, c2=0.2, threads=threads)(w)
    monkeypatch.setattr(crf, "DENSE_VIEW_FILL", 0.0)  # always
    assert crf.dense_view(seen)
    obj = CrfObjective(seen, c2=0.2, threads=threads)
    assert obj.dense_at is not None
    np.testing.assert_array_equal(seen.dense_layout()[1], to_dense)  # the test's own map
    for _ in range(2):  # the second call on the buffers the first one left
        f_view, g_view = obj(w)
        assert f_view == pytest.approx(f_lists, rel=1e-12)
        np.testing.assert_allclose(g_view, g_lists, atol=1e-10)
    pad = to_dense < 0
    assert pad.any() or G  # (the first case has padding: 2 entries)
    np.testing.assert_allclose(g_view[pad], 0.4 * w[pad], rtol=1e-12)
