"""Resume (a saved dual state) and warm start (a prior w₀) of the DCD learners."""

from __future__ import annotations

import numpy as np
import pytest
from small_fit import C, fit
from toy_task import ToyTask

from demidcd.api import SequenceTagger
from demidcd.cli import main
from demidcd.errors import ModelFileError, OptionError
from demidcd.io.model import load_state, save_state, state_path
from demidcd.solvers import train
from demidcd.solvers.activeset import ActiveSets
from demidcd.solvers.common import SolverConfig, primal_objective
from demidcd.solvers.state import DualState, Start, StateMismatch, fingerprint, merge_parts
from demidcd.synthetic import generate

TOL = dict(C=C, tol=1e-3, delta=1e-3)


@pytest.fixture(scope="module")
def tiny():
    """60 sentences, 5 tags, 200 words: (tokens, tags)."""
    c = generate(n_sentences=60, n_tags=5, vocab_size=200, seed=3)
    return c.tokens, c.tags


@pytest.fixture(scope="module")
def task(tiny):
    est = SequenceTagger(C=C, min_count=1, max_epochs=1).fit(*tiny)
    return est.training_task(*tiny)


@pytest.fixture(scope="module")
def optimum(tiny):
    """The uninterrupted 1-DCD run on the tiny problem and its primal."""
    return fit(tiny)


# -- the active sets' state ------------------------------------------------------------------
def _toy_sets(C: float = 0.5, seed: int = 3) -> tuple[ToyTask, ActiveSets]:
    task = ToyTask(seed=seed)
    act = ActiveSets(task.n_examples, task.dim, C, delta=0.0, max_active=64)
    act.insert(task.all_structures(), admit=-np.inf)
    for _ in range(5):
        act.update(np.arange(task.n_examples, dtype=np.int64), shrink=False)
    return task, act


def test_state_round_trip_rebuilds_w_and_the_dual():
    task, act = _toy_sets()
    back = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.0, max_active=4)
    assert back.restore(act.state()) == act.size
    np.testing.assert_allclose(back.w, act.w, atol=1e-12)
    assert back.dual_objective() == pytest.approx(act.dual_objective(), abs=1e-12)
    assert back.slots.shape[1] >= act.count.max()  # widened past max_active
    assert np.array_equal(back.count, act.count)
    np.testing.assert_array_equal(back.ex_pg, act.ex_pg)
    # the restored sets go on as the original: the same next update
    order = np.arange(task.n_examples, dtype=np.int64)
    a, b = act.update(order, shrink=False), back.update(order, shrink=False)
    assert a.updates == b.updates and a.max_pg == pytest.approx(b.max_pg, abs=1e-12)
    np.testing.assert_allclose(back.w, act.w, atol=1e-12)


def test_parts_merge_into_the_whole_state():
    task, act = _toy_sets()
    n = task.n_examples
    odd, even = np.arange(1, n, 2), np.arange(0, n, 2)
    merged = merge_parts(n, [(odd, act.state(odd)), (even, act.state(even))])
    whole = act.state()
    for k, v in whole.items():
        np.testing.assert_array_equal(merged[k], v, err_msg=k)


def test_state_file_round_trip_and_damage(tmp_path):
    _, act = _toy_sets()
    meta = {"epoch": 7, "fingerprint": {"C": 0.5}, "rng": {"state": {"state": 2**100}}}
    p = tmp_path / "m.state.npz"
    save_state(p, act.state(), meta)
    arrays, back = load_state(p)
    assert back["epoch"] == 7 and back["rng"]["state"]["state"] == 2**100
    for k, v in act.state().items():
        np.testing.assert_array_equal(arrays[k], v)
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(ModelFileError, match="corrupt or truncated state"):
        load_state(p)
    with pytest.raises(ModelFileError, match="no saved state"):
        load_state(tmp_path / "none.state.npz")
    assert state_path("dir/r.npz") == "dir/r.state.npz" and state_path("r") == "r.state.npz"


# -- resume --------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm,threads,engine", [
    ("dcd", 1, {}), ("demi-dcd", 2, {"learners": 1}), ("demi-dcd", 2, {"learners": 2}),
    ("ms-dcd", 2, {})])
def test_resumed_run_reaches_the_uninterrupted_optimum(task, optimum, algorithm, threads,
                                                       engine, shm_guard):
    _, p_star = optimum
    first = train(task, algorithm, SolverConfig(**TOL, max_epochs=2), threads,
                  start=Start(keep_state=True), **engine)
    assert first.stop_reason == "max-epochs" and first.state.n_structures > 0
    p_first, _ = primal_objective(task, first.w, C)
    assert p_first > p_star * 1.01  # stopped well short of the optimum
    res = train(task, algorithm, SolverConfig(**TOL, time_limit=60), threads,
                start=Start(state=first.state), **engine)
    assert res.stop_reason == "converged"
    assert res.epochs > first.epochs  # the epoch count goes on
    p, _ = primal_objective(task, res.w, C)
    assert abs(p - p_star) / p_star < 1e-3


def test_one_dcd_resumes_exactly(task):
    """1-DCD stopped at an epoch's end goes on with the same shuffles and sweep plan: the same
    iterations and w (up to the rounding of w = Σ α φ) as one run."""
    one = train(task, "dcd", SolverConfig(**TOL, max_epochs=12))
    half = train(task, "dcd", SolverConfig(**TOL, max_epochs=5), start=Start(keep_state=True))
    rest = train(task, "dcd", SolverConfig(**TOL, max_epochs=7), start=Start(state=half.state))
    assert rest.epochs == one.epochs == 12
    np.testing.assert_allclose(rest.w, one.w, atol=1e-9)


def test_estimator_resume_and_refusals(tiny, tmp_path, optimum):
    X, Y = tiny
    _, p_star = optimum
    kw = dict(**TOL, min_count=1)
    a = SequenceTagger(**kw, max_epochs=2, save_state=True).fit(X, Y)
    a.save(tmp_path / "a.npz")
    a.write_state(state_path(tmp_path / "a.npz"))
    b = SequenceTagger(**kw, resume=str(tmp_path / "a.npz")).fit(X, Y)
    assert b.result_.stop_reason == "converged"
    p, _ = primal_objective(b.training_task(X, Y), b.coef_, C)
    assert abs(p - p_star) / p_star < 1e-3
    other = generate(n_sentences=len(X), n_tags=5, vocab_size=200, seed=4)
    with pytest.raises(StateMismatch, match="training data differ"):
        SequenceTagger(**kw, resume=str(tmp_path / "a.npz")).fit(other.tokens, other.tags)
    with pytest.raises(StateMismatch, match="C is 0.1 in the saved state, 0.5"):
        SequenceTagger(**{**kw, "C": 0.5}, resume=str(tmp_path / "a.npz")).fit(X, Y)
    with pytest.raises(StateMismatch, match="50 in this run"):
        SequenceTagger(**kw, resume=str(tmp_path / "a.npz")).fit(X[:50], Y[:50])
    with pytest.raises(OptionError, match="perceptron has no dual state"):
        SequenceTagger(resume=str(tmp_path / "a.npz"), algorithm="perceptron").fit(X, Y)


def test_fingerprint_is_of_the_data_not_of_the_run(task):
    before = fingerprint(task, C, "l2", None)
    train(task, "dcd", SolverConfig(**TOL, max_epochs=2))
    assert fingerprint(task, C, "l2", None) == before
    assert fingerprint(task, C, "l1", None) != before
    state = DualState({}, {"fingerprint": before})
    with pytest.raises(StateMismatch, match="loss is l2 in the saved state, l1"):
        state.check(fingerprint(task, C, "l1", None))


# -- warm start ----------------------------------------------------------------------------
def test_zero_prior_is_plain_training(tiny, optimum, tmp_path):
    est, _ = optimum
    zero = SequenceTagger(**TOL, min_count=1, max_epochs=1).fit(*tiny)
    zero.coef_ = np.zeros_like(zero.coef_)
    zero.save(tmp_path / "z.npz")
    warm = SequenceTagger(**TOL, min_count=1, init=str(tmp_path / "z.npz")).fit(*tiny)
    assert warm.classes_ == est.classes_ and warm.n_features_ == est.n_features_
    np.testing.assert_allclose(warm.coef_, est.coef_, atol=1e-6)


@pytest.mark.parametrize("algorithm,threads", [("dcd", 1), ("demi-dcd", 2)])
def test_prior_from_the_optimum_needs_fewer_updates(tiny, optimum, algorithm, threads,
                                                    shm_guard):
    est, _ = optimum
    kw = dict(**TOL, min_count=1, algorithm=algorithm, threads=threads, learners=1)
    cold = est if algorithm == "dcd" else SequenceTagger(**kw).fit(*tiny)
    warm = SequenceTagger(**kw, init=est).fit(*tiny)
    assert warm.result_.stop_reason == "converged"
    assert warm.result_.extra["updates"] < 0.5 * cold.result_.extra["updates"]
    t = warm.training_task(*tiny)
    ob = warm.objective(t)  # ½‖w − w₀‖² + C Σ ξ², far below the plain primal at w
    assert 0 <= ob["gap"] < 1e-2 and ob["primal"] < 0.5 * primal_objective(t, warm.coef_, C)[0]


def test_warm_start_extends_features_and_labels(tiny, optimum):
    """New data with new words and two new tags: the old features and tags keep their ids,
    the prior scores every old sentence as the old model does (new rows are zero)."""
    est, _ = optimum
    new = generate(n_sentences=60, n_tags=7, vocab_size=400, seed=5)
    warm = SequenceTagger(**TOL, min_count=1, init=est, max_epochs=1).fit(new.tokens, new.tags)
    assert warm.classes_[:len(est.classes_)] == est.classes_
    assert len(warm.classes_) > len(est.classes_)
    assert warm.featurizer_.features[:est.n_features_] == est.featurizer_.features
    assert warm.n_features_ > est.n_features_
    prior = SequenceTagger(min_count=1)
    prior.classes_, prior.featurizer_ = warm.classes_, warm.featurizer_
    prior.n_features_, prior.coef_ = warm.n_features_, warm.prior_
    X = tiny[0][:40]
    assert prior.predict(X) == est.predict(X)


# -- the command line ----------------------------------------------------------------------
def test_cli_save_state_resume_and_refusals(corpus, tmp_path, capsys):
    train_file = str(corpus / "train.txt")
    m, r = str(tmp_path / "m.npz"), str(tmp_path / "r.npz")
    base = ["train", "--train", train_file, "--threads", "1", "--algorithm", "dcd",
            "--quiet"]
    assert main([*base, "--max-epochs", "2", "--save-state", "--model", m]) == 0
    assert (tmp_path / "m.state.npz").is_file()
    assert main([*base, "--resume", m, "--max-epochs", "3", "--model", r]) == 0
    assert SequenceTagger.load(r).result_.epochs == 5  # the epoch count goes on
    capsys.readouterr()
    for extra, message in (
            (["--save-state"], "--save-state keeps the dual state beside the model"),
            (["--resume", r], f"no saved state {tmp_path / 'r.state.npz'}"),
            (["--resume", m, "--init", m, "--model", r], "give one of them"),
            (["--init", m, "--algorithm", "mira", "--model", r], "--init: --algorithm mira"),
            (["--resume", m, "--C", "1", "--model", r], "--C is 0.1 in the saved state")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_benchmark_splits_by_document(tmp_path):
    """benchmarks/resume.py's halves: whole documents, in order, A about half the sentences."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    resume = importlib.import_module("resume")
    sent = "# sent_id = {}\n1\tw\tw\tX\tX\t_\t0\troot\t_\t_"
    docs = [3, 1, 4, 2]  # sentences per document
    text, k = "", 0
    for d in docs:
        for j in range(d):
            text += ("# newdoc id = d\n" if j == 0 else "") + sent.format(k) + "\n\n"
            k += 1
    src = tmp_path / "x.conllu"
    src.write_text(text)
    counts = resume.split_by_document(src, tmp_path / "a.conllu", tmp_path / "b.conllu")
    assert counts == {"documents_a": 2, "documents_b": 2, "sentences_a": 4, "sentences_b": 6}
    a = (tmp_path / "a.conllu").read_text()
    b = (tmp_path / "b.conllu").read_text()
    assert a.count("# newdoc") == 2 and b.count("# newdoc") == 2
    assert "sent_id = 3\n" in a and "sent_id = 4\n" in b and a + b == text


def test_one_dcd_resumes_inside_an_inference_pass(task, monkeypatch):
    """Stopped inside an epoch's inference pass (a time limit, Ctrl-C), 1-DCD finishes that
    pass first when resumed: the same iterations and w as one run."""
    from demidcd.solvers import common

    cfg = dict(**TOL, batch=4)
    one = train(task, "dcd", SolverConfig(**cfg, max_epochs=6))
    two = train(task, "dcd", SolverConfig(**cfg, max_epochs=2), start=Start(keep_state=True))
    polls = [0]

    def poll(self, w):  # the clock runs out after the 6th chunk of the third epoch's pass
        polls[0] += 1
        return polls[0] >= 6

    with monkeypatch.context() as m:
        m.setattr(common.Clock, "poll", poll)
        cut = train(task, "dcd", SolverConfig(**cfg, max_epochs=1),
                    start=Start(state=two.state, keep_state=True))
    assert cut.state.epoch == 3  # (max-epochs here: the patched poll, not the clock)
    assert cut.state.meta["pending"]["at"] == 24
    assert cut.history[-1]["violators"] >= 1  # an unfinished pass certifies nothing
    rest = train(task, "dcd", SolverConfig(**cfg, max_epochs=3), start=Start(state=cut.state))
    assert rest.epochs == one.epochs == 6
    np.testing.assert_allclose(rest.w, one.w, atol=1e-9)
