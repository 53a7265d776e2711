"""The training plan (issue 42): an estimator's ``plan()`` resolves every learner default once
and checks every learner option once (demidcd.solvers.plan.make_plan); ``fit`` runs that plan
and nothing checks it again; ``learners="auto"`` is decided before training, logged and saved."""

from __future__ import annotations

import json

import numpy as np
import pytest
from toy_task import ToyTask

from demidcd.api import ChunkTagger, SequenceTagger
from demidcd.errors import OptionError
from demidcd.estimators import base
from demidcd.solvers import get_learner, train
from demidcd.solvers import plan as P
from demidcd.solvers.common import SolverConfig
from demidcd.synthetic import generate

X = [["the", "cat", "sat"], ["a", "dog", "ran"], ["the", "dog", "sat"], ["a", "cat", "ran"]] * 5
Y = [["D", "N", "V"]] * 20


def test_plan_resolves_each_default():
    one = SequenceTagger().plan()
    assert (one.algorithm, one.threads, one.learners, one.note) == ("dcd", 1, None, "")
    assert one.config.loss == "l2" and one.config.C == 0.1
    two = SequenceTagger(threads=2).plan()  # demi-dcd on several threads, learners measured
    assert two.algorithm == "demi-dcd" and two.threads == 2
    assert two.learners == "auto" if P.auto_fits_cores(2) else two.learners == 1
    assert SequenceTagger(threads=2, learners=2).plan().learners == 2
    assert ChunkTagger().plan().config.loss == "l1"  # the task's loss for the DCD learners
    seq = SequenceTagger(algorithm="perceptron", threads=4).plan()  # sequential: one process
    assert seq.threads == 1 and seq.asked_threads == 4
    assert seq.note == "perceptron is sequential: it runs on one process (--threads 4)"
    assert "loss" not in seq.hyper_parameters() and seq.learners is None
    assert seq.lines()[0].startswith("algorithm perceptron, 1 process, C 0.1, tol")


@pytest.mark.parametrize("kw,library,cli", [
    ({"threads": 0}, "threads must be >= 1, got 0", "--threads must be >= 1, got 0"),
    ({"threads": "x"}, "threads must be an integer, got 'x'",
     "--threads must be an integer, got 'x'"),
    ({"algorithm": "nope"}, "unknown algorithm 'nope'", "unknown --algorithm 'nope'"),
    ({"algorithm": "demi-dcd"}, "algorithm demi-dcd needs threads >= 2",
     "--algorithm demi-dcd needs --threads >= 2"),
    ({"algorithm": "perceptron", "loss": "l1"}, "loss is an option of the DCD learners",
     "--loss is an option of the DCD learners"),
    ({"resume": "a.npz", "init": "b.npz"}, "resume and init: a resumed run",
     "--resume and --init: a resumed run"),
    ({"algorithm": "mira", "save_state": True}, "save_state: algorithm mira has no dual state",
     "--save-state: --algorithm mira has no dual state"),
    ({"C": -1.0}, "C must be a finite number > 0, got -1.0",
     "--C must be a finite number > 0, got -1.0"),
    ({"threads": 2, "learners": 0}, "learners must be >= 1, got 0",
     "--learners must be >= 1, got 0"),
    ({"algorithm": "dcd", "c1": 0.5}, "c1 is an option of crf; algorithm dcd does not read it",
     "--c1 is an option of crf; --algorithm dcd does not read it"),
    ({"algorithm": "crf", "eta": 0.5}, "eta is an option of adagrad; algorithm crf does not",
     "--eta is an option of adagrad; --algorithm crf does not"),
])
def test_each_bad_value_is_one_error_naming_the_parameter(kw, library, cli):
    """One check, one message: the library's names the parameter, the CLI's text the flag."""
    with pytest.raises(OptionError) as e:
        SequenceTagger(**kw).plan()
    assert str(e.value).startswith(library) and e.value.cli_text().startswith(cli)
    with pytest.raises(OptionError) as f:  # fit fails the same way, before any work
        SequenceTagger(**kw).fit(X, Y)
    assert str(f.value) == str(e.value)


def test_fit_checks_the_options_once(monkeypatch):
    """fit builds its plan once (one make_plan, one SolverConfig.validate); the solvers run it
    without checking again."""
    calls = {"plan": 0, "validate": 0}
    make_plan, validate = P.make_plan, SolverConfig.validate

    def counted_plan(*a, **k):
        calls["plan"] += 1
        return make_plan(*a, **k)

    def counted_validate(self):
        calls["validate"] += 1
        return validate(self)

    monkeypatch.setattr(base, "make_plan", counted_plan)
    monkeypatch.setattr(SolverConfig, "validate", counted_validate)
    est = SequenceTagger(max_epochs=2, min_count=1).fit(X, Y)
    assert calls == {"plan": 1, "validate": 1}
    assert est.hyper_parameters()["algorithm"] == "dcd" and calls["plan"] == 1  # the fit's


def test_learners_auto_is_decided_before_training_logged_and_saved(tmp_path):
    c = generate(n_sentences=60, n_tags=4, vocab_size=100, seed=3)
    lines: list[str] = []
    est = SequenceTagger(threads=2, learners="auto", max_epochs=2, min_count=1,
                         log=lines.append).fit(c.tokens, c.tags)
    k = est.plan_.learners
    assert k in (1, 2) and est.hyper_parameters()["learners"] == k
    because = [s for s in lines
               if s.startswith(f"{k} learner process{'es' * (k > 1)}: because ")]
    assert len(because) == 1, lines
    est.save(tmp_path / "m.npz")
    meta = _meta(tmp_path / "m.npz")
    assert meta["hyper_parameters"]["learners"] == k
    assert meta["learners_reason"] == est.plan_.learners_reason
    back = SequenceTagger.load(tmp_path / "m.npz")
    assert back.hyper_parameters() == est.hyper_parameters()


def _meta(path) -> dict:
    with np.load(path, allow_pickle=False) as z:
        return json.loads(bytes(z["meta.json"]).decode())


def test_an_unknown_option_is_an_error_not_dropped():
    task = ToyTask()
    with pytest.raises(TypeError, match="unknown training option 'bogus'"):
        train(task, "dcd", SolverConfig(max_epochs=1), bogus=1)
    schedule = get_learner("perceptron").function()
    with pytest.raises(TypeError, match="bogus"):
        schedule(task, SolverConfig(max_epochs=1), 1, None, bogus=1)
    plan = P.make_plan("dcd", SolverConfig(max_epochs=1))
    with pytest.raises(TypeError, match="takes a TrainingPlan alone"):
        train(task, plan, SolverConfig())
    assert train(task, plan).epochs >= 1


@pytest.mark.parametrize("flags,message", [
    (["--threads", "0"], "--threads must be >= 1, got 0"),
    (["--algorithm", "demi-dcd", "--threads", "1"], "--algorithm demi-dcd needs --threads >= 2"),
    (["--algorithm", "perceptron", "--loss", "l1"], "--loss is an option of the DCD learners"),
    (["--resume", "a.npz", "--init", "b.npz"], "--resume and --init: a resumed run"),
    (["--C", "-1"], "--C must be a finite number > 0, got -1.0"),
    (["--threads", "2", "--learners", "0"], "--learners must be >= 1, got 0"),
    (["--threads", "2", "--ray-address", "h:1"], "--ray-address needs --backend ray"),
    (["--algorithm", "dcd", "--c2", "0.5"], "--c2 is an option of crf; --algorithm dcd does"),
])
def test_the_cli_runs_the_same_check_once(cli, monkeypatch, flags, message):
    """A bad learner option given on the command line meets the plan's one check: one
    make_plan call, one error line naming the flag (the library's check, not a copy of it in
    the CLI), exit 2, before any data is read."""
    calls = []
    make_plan = P.make_plan

    def counted(*a, **k):
        calls.append(1)
        return make_plan(*a, **k)

    monkeypatch.setattr(base, "make_plan", counted)
    code, out, err = cli("train", "--time-limit", "1", *flags)
    assert code == 2 and len(calls) == 1, (code, calls, err)
    lines = [x for x in err.splitlines() if x.startswith("demidcd: error:")]
    assert len(lines) == 1 and lines[0].startswith(f"demidcd: error: {message}"), err
    assert "data:" not in out  # refused before the data is read
