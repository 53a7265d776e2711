"""Optimisation theory of the DCD learner on an enumerable toy task."""

import numpy as np
import pytest
from toy_task import ToyTask

from demidcd.solvers.activeset import ActiveSets
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_update_does_not_increase_dual(seed):
    task = ToyTask(seed=seed)
    act = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.0, max_active=64)
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


@pytest.mark.parametrize("light", [False, True])
def test_dcd_reaches_reference_optimum_and_primal_ge_dual(light):
    task = ToyTask(seed=3)
    C = 0.5
    ref = reference_optimum(task, C)
    p_star, _ = primal_objective(task, ref.w, C)
    assert abs(p_star - ref.dual_objective()) / p_star < 1e-8  # strong duality at the optimum
    gaps = []

    def check(rec, w):
        ob = objective(task, w, C, None)
        gaps.append(ob.primal)

    res = train_dcd(task, SolverConfig(C=C, tol=1e-5, delta=1e-5, max_epochs=3000),
                    callback=check, light=light)
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


def test_invalid_config_rejected():
    from demidcd.errors import OptionError
    with pytest.raises(OptionError, match="--C"):
        SolverConfig(C=0).validate()
