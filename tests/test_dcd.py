"""Optimisation theory of the DCD learner on an enumerable toy task."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_task import ToyTask

from demidcd.primitives.seqlock import LINE_SHIFT, mark_array
from demidcd.solvers import kernels as K
from demidcd.solvers.activeset import FULL_EVERY, ActiveSets, SweepPlan
from demidcd.solvers.common import SolverConfig, objective, primal_objective
from demidcd.solvers.dcd import train_dcd


def reference_optimum(task, C, passes=3000):
    """All structures in the active sets, no shrinking: cyclic DCD on the full dual (Eq. 2)."""
    act = ActiveSets(task.n_examples, task.dim, C, delta=0.0, max_active=64)
    act.insert(task.all_structures(), admit=-np.inf)
    order = np.arange(task.n_examples, dtype=np.int64)
    for _ in range(passes):
        if act.update(order, shrink=False).max_pg < 1e-10:
            break
    return act


@pytest.mark.parametrize("seed,sweeps", [(0, 1), (1, 1), (2, 1), (0, 4), (1, 4)])
def test_each_update_does_not_increase_dual(seed, sweeps):
    task = ToyTask(seed=seed)
    act = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.0, max_active=64, sweeps=sweeps)
    act.insert(task.all_structures(), admit=-np.inf)
    prev = act.dual_objective()  # −D(α): must never decrease
    rng = np.random.default_rng(seed)
    for _ in range(200):
        i = np.array([rng.integers(task.n_examples)], np.int64)
        act.update(i, shrink=False)
        cur = act.dual_objective()
        assert cur >= prev - 1e-12
        prev = cur
    np.testing.assert_allclose(act.w, act.rebuilt_w(), atol=1e-10)


@pytest.mark.parametrize("tol", [1e-3])
def test_a_tolerance_below_delta_still_certifies(tol):
    """--tol below the shrinking threshold --delta (0.01 by default): the structures whose
    violation lies between them must be stepped, not shrunk unstepped at every visit (the run
    then never certified, its largest |PG| stuck near δ: 0.0078 after 3,000 epochs here)."""
    from test_partial_svm import random_data

    from demidcd.tasks.chain.task import SequenceTask

    X, Y = random_data(np.random.default_rng(11), 120, 4, 30, lens=(2, 7))
    task = SequenceTask(X, Y, 4, 30)
    C = 0.5
    ref = train_dcd(task, SolverConfig(C=C, tol=1e-5, delta=1e-5, max_epochs=3000))
    res = train_dcd(task, SolverConfig(C=C, tol=tol, max_epochs=3000))
    assert SolverConfig().delta > tol and res.stop_reason == "converged"
    p, p_ref = primal_objective(task, res.w, C)[0], primal_objective(task, ref.w, C)[0]
    assert ref.stop_reason == "converged" and abs(p - p_ref) / p_ref <= 10 * tol


@pytest.mark.parametrize("light,skip,sweeps", [(False, 0.0, 1), (True, 0.0, 1),
                                               (False, 0.75, 1), (False, 0.9, 3)])
def test_dcd_reaches_reference_optimum_and_primal_ge_dual(light, skip, sweeps):
    task = ToyTask(seed=3)
    C = 0.5
    ref = reference_optimum(task, C)
    p_star, _ = primal_objective(task, ref.w, C)
    assert abs(p_star - ref.dual_objective()) / p_star < 1e-8  # strong duality at the optimum
    gaps = []

    def check(rec, w):
        ob = objective(task, w, C, None)
        gaps.append(ob.primal)

    res = train_dcd(task, SolverConfig(C=C, tol=1e-5, delta=1e-5, max_epochs=3000, skip=skip,
                                       sweeps=sweeps), callback=check, light=light)
    assert res.stop_reason == "converged"
    p, _ = primal_objective(task, res.w, C)
    assert p >= res.dual - 1e-9  # weak duality
    assert (p - res.dual) / p <= 1e-3
    assert abs(p - p_star) / p_star <= 1e-3
    assert all(g >= p_star - 1e-9 for g in gaps)


def test_primal_ge_dual_along_the_way():
    task = ToyTask(seed=5, n=40)
    C = 0.2
    seen = []
    act_dual = []

    def cb(rec, w):
        seen.append(primal_objective(task, w, C)[0])

    res = train_dcd(task, SolverConfig(C=C, max_epochs=30, tol=1e-8, delta=0.0,
                                       eval_every=0.0), callback=cb)
    for rec in res.history:
        assert rec["primal"] >= rec["dual"] - 1e-9
        act_dual.append(rec["dual"])
    assert all(b >= a - 1e-9 for a, b in zip(act_dual, act_dual[1:], strict=False))
    assert res.history[-1]["gap"] < res.history[0]["gap"]  # the gap closes


def test_eviction_keeps_w_consistent():
    task = ToyTask(seed=7, m=10)
    act = ActiveSets(task.n_examples, task.dim, 1.0, delta=0.0, max_active=3)
    act.insert(task.all_structures(), admit=-np.inf)
    order = np.arange(task.n_examples, dtype=np.int64)
    for _ in range(5):
        act.update(order, shrink=False)
    st = act.insert(task.all_structures(), admit=-np.inf)
    assert act.count.max() <= 3
    assert st.duplicates > 0
    np.testing.assert_allclose(act.w, act.rebuilt_w(), atol=1e-10)
    for i in range(task.n_examples):
        assert abs(act.alpha_sum[i] - act.s_f[act.slots[i, :act.count[i]], 0].sum()) < 1e-10


def test_a_full_active_set_aggregates_without_changing_the_dual():
    """Freeing a slot when every α > 0 folds the two smallest α into one column: w, A_i and the
    dual (Eq. 2) are unchanged, the stored ‖φ‖² is the merged vector's, and the merged φ stays
    sorted by index."""
    task = ToyTask(seed=7, m=10)
    act = ActiveSets(task.n_examples, task.dim, 1.0, delta=0.0, max_active=3)
    allr = task.all_structures()
    act.insert(allr, admit=-np.inf)
    order = np.arange(task.n_examples, dtype=np.int64)
    for _ in range(20):
        act.update(order, shrink=False)
    assert (act.s_f[act.slots[:, :3], 0] > 0).any(axis=1).any()
    w0, d0, a0 = act.w.copy(), act.dual_objective(), act.alpha_sum.copy()
    full = [i for i in range(task.n_examples)
            if act.count[i] == 3 and (act.s_f[act.slots[i, :3], 0] > 0).all()]
    assert full, "the toy instance must fill some active sets with α > 0"
    hashes = {int(h) for i in full for h in act.s_hash[act.slots[i, :3]]}
    keep = np.array([k for k in range(len(allr)) if allr.ex[k] in full
                     and int(allr.hash[k]) not in hashes])
    st = act.insert(allr.take(keep), admit=-np.inf)
    assert st.evicted > 0 and (act.s_hash == K.MERGED_HASH).any()
    np.testing.assert_allclose(act.w, w0, atol=1e-12)
    np.testing.assert_allclose(act.alpha_sum, a0, atol=1e-12)
    assert act.dual_objective() == pytest.approx(d0, abs=1e-10)
    np.testing.assert_allclose(act.w, act.rebuilt_w(), atol=1e-10)
    for i in range(task.n_examples):
        for s in act.slots[i, :act.count[i]]:
            idx, val = act.phi(s)
            assert (np.diff(idx.astype(np.int64)) > 0).all()
            assert act.s_f[s, 2] == pytest.approx(float(val @ val))


def test_a_small_active_set_cap_reaches_the_same_optimum(monkeypatch):
    """With |A_i| capped at 4 of the 10 structures per example (aggregation when full), 1-DCD
    still stops with a certificate and reaches the uncapped optimum."""
    task = ToyTask(seed=3, m=10)
    C = 0.5
    ref = reference_optimum(task, C)
    p_star, _ = primal_objective(task, ref.w, C)
    evicted = []
    insert = ActiveSets.insert

    def counting_insert(self, batch, admit=None):
        st = insert(self, batch, admit)
        evicted.append(st.evicted)
        return st

    monkeypatch.setattr(ActiveSets, "insert", counting_insert)
    res = train_dcd(task, SolverConfig(C=C, tol=1e-5, delta=1e-5, max_epochs=20000,
                                       max_active=4))
    assert res.stop_reason == "converged"
    assert sum(evicted) > 0  # the cap was hit
    p, _ = primal_objective(task, res.w, C)
    assert abs(p - p_star) / p_star <= 1e-4


def test_sweep_plan_skips_small_gradients_and_only_full_passes_certify():
    task = ToyTask(seed=4, n=40)
    act = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.0, max_active=64)
    act.insert(task.all_structures(), admit=-np.inf)
    assert np.isinf(act.ex_pg).all()  # admitted structures: every example is due
    plan = SweepPlan(act, skip=0.5)
    order = np.arange(task.n_examples, dtype=np.int64)
    assert plan.threshold() == -1.0 and plan.full  # the first pass is full
    st = act.update(order, skip_below=-1.0)
    assert st.skipped == 0 and np.isfinite(act.ex_pg).all()
    assert st.max_pg == pytest.approx(act.ex_pg.max())
    thr = plan.threshold()
    assert not plan.full
    assert thr == pytest.approx(np.sort(act.ex_pg)[task.n_examples // 2])
    before_alpha, before_pg = act.s_f[:, 0].copy(), act.ex_pg.copy()
    st = act.update(order, skip_below=thr)
    skipped = before_pg < thr
    assert st.skipped == skipped.sum() > 0
    for i in np.flatnonzero(skipped):  # a skipped example is left exactly as it was
        s = act.slots[i, :act.count[i]]
        np.testing.assert_array_equal(act.s_f[s, 0], before_alpha[s])
        assert act.ex_pg[i] == before_pg[i]
    assert not plan.certifies(0.0, 1e-3)  # a skipping pass proves nothing ...
    assert plan.threshold() == -1.0 and plan.full  # ... and makes the next pass full
    assert plan.certifies(0.0, 1e-3)
    for _ in range(FULL_EVERY - 1):
        plan.threshold()
    assert plan.threshold() == -1.0  # every FULL_EVERY-th pass is full
    i = int(np.argmin(act.ex_pg))  # a re-found (duplicate) structure makes its example due
    act.insert(task.all_structures(), admit=-np.inf)
    assert np.isinf(act.ex_pg[i])
    assert SweepPlan(act, skip=0.0).threshold() == -1.0


def test_more_sweeps_per_visit_close_the_gap_no_slower_per_pass():
    task = ToyTask(seed=6, n=30)
    gaps = {}
    for sweeps in (1, 3):
        act = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.0, max_active=64, sweeps=sweeps)
        act.insert(task.all_structures(), admit=-np.inf)
        act.update(np.arange(task.n_examples, dtype=np.int64), shrink=False)
        gaps[sweeps] = primal_objective(task, act.w, 0.5)[0] - act.dual_objective()
    assert gaps[3] <= gaps[1] + 1e-12


def test_invalid_config_rejected():
    from demidcd.errors import OptionError
    with pytest.raises(OptionError, match="^C must be"):
        SolverConfig(C=0).validate()
    with pytest.raises(OptionError, match="^skip must be"):
        SolverConfig(skip=1.0).validate()
    with pytest.raises(OptionError, match="^sweeps must be"):
        SolverConfig(sweeps=0).validate()


@given(st.integers(0, 40), st.integers(0, 40), st.floats(-2, 2), st.integers(0, 2**31 - 1))
@settings(max_examples=200, deadline=None)
def test_sparse_kernels_match_numpy(n, start, d, seed):
    """The unrolled, unsigned-index w·φ and w += dφ agree with numpy on every slice length
    (tails of 0–3 after the blocks of four)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=200)
    idx = np.sort(rng.choice(200, n, replace=False)).astype(np.int32)
    val = rng.normal(size=n)
    start = min(start, n)
    assert K.sparse_dot(w, idx, val, start, n) == pytest.approx(w[idx[start:]] @ val[start:],
                                                                abs=1e-12)
    got = w.copy()
    K.axpy(got, d, idx, val, start, n)
    want = w.copy()
    want[idx[start:]] += d * val[start:]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_marked_lines_cover_every_change_of_w(seed):
    """With tracking on, the lines marked at admission cover every entry of w that inserts,
    evictions, updates and shrinking make non-zero, and only lines of offered φ: copying the
    marked lines publishes w exactly (demidcd.primitives.seqlock.publish_lines)."""
    task = ToyTask(seed=seed, m=6)
    recs = task.all_structures()
    rng = np.random.default_rng(seed)
    act = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.05, max_active=3,
                     track_changes=True)
    offered: set[int] = set()
    for step in range(60):
        if rng.random() < 0.4:
            batch = recs.take(rng.random(len(recs)) < 0.3)
            offered |= set((batch.idx >> LINE_SHIFT).tolist())
            act.insert(batch, admit=0.01)
        else:
            act.update(rng.permutation(task.n_examples).astype(np.int64), shrink=step % 3 == 0)
        marked = set(np.flatnonzero(act.mark).tolist())
        assert set((np.flatnonzero(act.w) >> LINE_SHIFT).tolist()) <= marked <= offered
        published = np.zeros(task.dim)
        for ln in marked:
            part = slice(ln << LINE_SHIFT, (ln + 1) << LINE_SHIFT)
            published[part] = act.w[part]
        np.testing.assert_array_equal(published, act.w)
    assert act.w.any() and marked
    untracked = ActiveSets(task.n_examples, task.dim, 0.5)
    untracked.insert(recs, admit=0.01)
    assert untracked.mark.shape[0] == mark_array(0).shape[0] and not untracked.mark.any()


@pytest.mark.parametrize("limit", [None, 0.4])
def test_the_first_epochs_max_pg_is_the_inference_passes(limit):
    """DCD-SSVM's first epoch runs its r update passes over empty active sets (|PG| 0), then
    the inference pass admits structures and updates them: the epoch's record (and the stop
    line built from it) showed max_pg 0, whether the epoch ended (max_epochs 1) or a time limit
    cut its inference pass (Brown, one thread: the first pass takes minutes)."""
    from toy_task import SlowToyTask

    from demidcd.progress import stop_line

    task = ToyTask(n=40, seed=4) if limit is None else SlowToyTask(0.02, n=40, seed=4)
    cfg = SolverConfig(C=0.1, tol=1e-6, delta=1e-6, batch=2, max_epochs=1, time_limit=limit)
    res = train_dcd(task, cfg)
    rec = res.history[-1]
    assert res.stop_reason == ("max-epochs" if limit is None else "time-limit")
    assert rec["epoch"] == 1 and rec["active"] > 0 and rec["max_pg"] > cfg.tol, rec
    assert "largest projected gradient 0," not in stop_line(res, cfg.tol, "l2")
