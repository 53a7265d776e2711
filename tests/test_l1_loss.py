"""The L1-loss (hinge) variant of the DCD learners (``--loss l1``): 1-DCD, DEMI-DCD and MS-DCD
run the SDM's SMO on their active sets and reach the hinge-loss optimum sdm-hinge reaches; the
SMO never increases the dual; the log, the summary and the CLI report and take the loss."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_run import run
from small_fit import conll04_task
from toy_task import ToyTask

from demidcd.errors import OptionError
from demidcd.solvers import train
from demidcd.solvers.activeset import ActiveSets
from demidcd.solvers.common import SolverConfig, primal_objective
from demidcd.solvers.online import hinge_objective
from demidcd.solvers.recorder import summary

C = 1.0


def _cfg(**kw) -> SolverConfig:
    return SolverConfig(**{"C": C, "tol": 1e-4, "delta": 1e-4, "time_limit": 60, **kw})


@pytest.fixture(scope="module")
def toy() -> ToyTask:
    """30 examples of 6 structures with a planted direction that favours the gold structure:
    learnable but not separable (the hinge and the squared hinge disagree on it)."""
    task = ToyTask(n=30, m=6, dim=12, density=0.5, seed=3)
    u = np.random.default_rng(9).normal(size=task.dim)
    task.Phi[:, 0] += u / np.linalg.norm(u)
    return task


@pytest.fixture(scope="module")
def dcd_l1(toy):
    res = train(toy, "dcd", _cfg(loss="l1", eval_every=0.0), threads=1)
    assert res.stop_reason == "converged"
    return res


def _hinge(task, w) -> float:
    return hinge_objective(task, w, C)["primal"]


# ----------------------------------------------------------------------------- (a) the optimum
def test_one_dcd_l1_reaches_the_hinge_optimum_of_sdm(toy, dcd_l1):
    """1-DCD with --loss l1 and sdm-hinge minimise the same objective: the same primal, the
    gap closed; the L2-loss solution is measurably worse on it (the test is not vacuous)."""
    p1 = _hinge(toy, dcd_l1.w)
    assert dcd_l1.dual <= p1 + 1e-9
    assert (p1 - dcd_l1.dual) / p1 <= 1e-3
    sdm = train(toy, "sdm-hinge", _cfg(max_epochs=300, eval_every=None), threads=1)
    p_sdm = _hinge(toy, sdm.w)
    assert abs(p1 - p_sdm) / p_sdm <= 1e-3, (p1, p_sdm)
    assert sdm.dual <= p1 + 1e-9 and dcd_l1.dual <= p_sdm + 1e-9  # weak duality, both ways
    l2 = train(toy, "dcd", _cfg(eval_every=None), threads=1)
    assert _hinge(toy, l2.w) > p1 * (1 + 1e-2)
    light = train(toy, "dcd-light", _cfg(loss="l1", eval_every=None), threads=1)
    assert light.stop_reason == "converged"
    assert abs(_hinge(toy, light.w) - p1) / p1 <= 1e-3


# ----------------------------------------------------------------------------- (b) SMO descent
def test_every_smo_visit_never_increases_the_l1_dual() -> None:
    """Every non-gold structure of every example in its active set (up to 5), then SMO visits in
    random order: D(λ) = ½‖Σ λ φ‖² − Σ λ Δ never increases, λ stays feasible (λ ≥ 0,
    Σ_y λ_{i,y} ≤ C) and w = Σ λ φ."""
    task = ToyTask(n=12, m=6, dim=8, density=0.6, seed=7)
    cap = 1.0
    act = ActiveSets(task.n_examples, task.dim, cap, 0.0, 8, loss="l1", tol=1e-6)
    act.insert(task.all_structures(), -np.inf)
    assert act.size == task.n_examples * 5
    rng = np.random.default_rng(0)
    D = -act.dual_objective()
    assert D == 0.0
    steps = 0
    for i in rng.integers(0, task.n_examples, 200):
        st = act.update(np.array([i], np.int64), shrink=bool(rng.integers(2)))
        steps += st.updates
        after = -act.dual_objective()
        assert after <= D + 1e-12 * max(1.0, abs(D)), (i, D, after)
        D = after
        assert (act.alpha_sum <= cap * (1 + 1e-12)).all()
        live = act.s_f[[s for e in range(act.n) for s in act.slots[e, :act.count[e]]], 0]
        assert (live >= 0).all()
    assert steps > 0 and D < 0
    np.testing.assert_allclose(act.w, act.rebuilt_w(), atol=1e-10)
    # a visit takes at most sweeps · |A_i| pair steps; given enough, it ends with the example's
    # KKT gap within tolerance: a second visit finds it there
    for i in range(task.n_examples):
        size = int(act.count[i])
        assert act.update(np.array([i], np.int64)).updates <= max(size, 1)
        act.update(np.array([i], np.int64), sweeps=100)
        again = act.update(np.array([i], np.int64))
        assert again.max_pg <= act.tau and again.updates == 0


# ----------------------------------------------------------------------------- (c) reports
def test_l1_log_and_summary_report_the_hinge_primal(toy, dcd_l1):
    last = dcd_l1.history[-1]
    assert last["primal"] == pytest.approx(_hinge(toy, dcd_l1.w), rel=1e-12)
    assert last["primal"] != pytest.approx(primal_objective(toy, dcd_l1.w, C)[0], rel=1e-6)
    assert summary(dcd_l1)["last_record"]["primal"] == last["primal"]


@pytest.mark.parametrize("mode", ["plain", "atomic"])
def test_two_l1_learners_reach_the_1dcd_l1_optimum(toy, dcd_l1, mode, shm_guard,
                                                   experimental):
    """Several learners on one w (multi_dcd) with the SMO update: a certified stop at the
    hinge optimum, the dual a lower bound of it."""
    p1 = _hinge(toy, dcd_l1.w)
    experimental(update_mode=mode)
    res = train(toy, "demi-dcd", _cfg(loss="l1"), threads=2, learners=2)
    assert res.stop_reason == "converged"
    p = _hinge(toy, res.w)
    assert abs(p - p1) / p1 <= 1e-3, (p, p1)
    assert res.dual <= p + 1e-9 and (p - res.dual) / p <= 1e-3


def test_loss_option_is_validated_and_only_for_the_dcd_learners(toy) -> None:
    assert SolverConfig.from_options(loss="l1").loss == "l1"
    assert SolverConfig.from_options(loss=None).loss == "l2"
    with pytest.raises(OptionError, match="^loss must be one of l1, l2, got 'l3'"):
        SolverConfig.from_options(loss="l3").validate()
    with pytest.raises(OptionError, match="^loss must be a string"):
        SolverConfig.from_options(loss=1)
    with pytest.raises(OptionError, match="^loss is an option of the DCD learners"):
        train(toy, "pegasos", _cfg(loss="l1", max_epochs=1), threads=1)
    from demidcd.api import SequenceTagger

    with pytest.raises(OptionError, match="^loss is an option"):
        SequenceTagger(algorithm="sdm-hinge", loss="l1").fit([["a"]], [["X"]])


# ----------------------------------------------------------------------------- (d) CLI
_cli = run  # the one CLI launcher (tests/cli_run.py)


def test_cli_trains_with_loss_l1_and_rejects_l3(tmp_path) -> None:
    """On the built-in synthetic corpus (no data arguments); the summary names the loss and its
    last record carries the hinge primal (``--eval-every 0``), which the model's weights give."""
    out, model = tmp_path / "summary.json", tmp_path / "m.npz"
    r = _cli("train", "--loss", "l1", "--algorithm", "dcd", "--threads", "1", "--max-epochs",
             "3", "--eval-every", "0", "--summary-json", str(out), "--model", str(model))
    assert r.returncode == 0, r.stderr
    assert "loss l1" in r.stdout + r.stderr and "test accuracy:" in r.stdout
    s = json.loads(out.read_text())
    assert s["loss"] == "l1" and 0 < s["last_record"]["dual"] <= s["last_record"]["primal"]
    from demidcd.api import SequenceTagger
    from demidcd.synthetic import generate_splits

    est = SequenceTagger.load(model)
    assert est.loss == "l1" and est.solver_config().loss == "l1"
    train_split = generate_splits(seed=0)[0]
    task = est.training_task(train_split.tokens, train_split.tags)
    assert s["last_record"]["primal"] == pytest.approx(
        hinge_objective(task, est.coef_, 0.1)["primal"], rel=1e-9)
    r = _cli("train", "--loss", "l3", "--algorithm", "dcd", "--threads", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("demidcd: error: argument --loss")
    assert "'l3'" in lines[0] and "'l1', 'l2'" in lines[0]
    assert "--loss {l1,l2}" in _cli("train", "--help-all").stdout


# ----------------------------------------------------------------------------- (e) expensive
@pytest.mark.slow  # ~5 s of ILP solves; DEMI-DCD L1 on this problem (exact solver): the
# convergence matrix; ILP inference in a worker: test_learners_with_cbc_inference[pegasos]
def test_entity_relation_with_an_ilp_solver_trains_with_demi_dcd_l1(optimum, shm_guard) -> None:
    """Expensive inference (an ILP solver per example): DEMI-DCD with the L1 loss converges to
    the optimum 1-DCD L1 reaches with the exact solver (the same ILP, so the same SSVM): the
    cached entity-relation L1 optimum of conftest.py (6 CoNLL04 sentences, C 0.1)."""
    import importlib.util

    from conftest import OPT_C

    solver = "highs" if importlib.util.find_spec("highspy") is not None else "cbc"
    exact, p_ref, _ = optimum("entity-relation", "l1")
    res = train(conll04_task(6, solver), "demi-dcd", _cfg(C=OPT_C, loss="l1"), threads=2,
                learners="auto")
    assert res.stop_reason == "converged"
    p = hinge_objective(exact, res.w, OPT_C)["primal"]
    assert abs(p - p_ref) / p_ref <= 1e-3, (p, p_ref)
    assert res.dual <= p + 1e-9


def test_chunk_scored_tasks_default_to_the_hinge_loss():
    from demidcd.api import ChunkTagger, NamedEntityTagger, SequenceTagger

    assert ChunkTagger().solver_config().loss == "l1"
    assert NamedEntityTagger(threads=2).solver_config().loss == "l1"  # DEMI-DCD
    assert ChunkTagger(loss="l2").solver_config().loss == "l2"
    assert SequenceTagger(threads=2).solver_config().loss == "l2"
    # a learner with an objective of its own gets no loss at all
    assert "loss" not in ChunkTagger(algorithm="perceptron").hyper_parameters()
    assert ChunkTagger(algorithm="ms-dcd", threads=2).hyper_parameters()["loss"] == "l1"
