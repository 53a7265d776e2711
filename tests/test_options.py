"""Every default exists once, in the option table (demidcd/options.py): the CLI's help, the
estimators' parameters, SolverConfig and the learners' own keyword defaults agree with it."""

from __future__ import annotations

import inspect
import re
from dataclasses import fields

import pytest
from cli_run import run

from demidcd import options as T
from demidcd.api import (
    ChunkTagger,
    DependencyParser,
    EntityRelationExtractor,
    NamedEntityTagger,
    SequenceTagger,
)
from demidcd.cli import build_parser
from demidcd.solvers import LEARNERS
from demidcd.solvers.common import SolverConfig

ESTIMATORS = (SequenceTagger, ChunkTagger, NamedEntityTagger, DependencyParser,
              EntityRelationExtractor)


def _help(*args: str) -> str:
    p = run("train", *args)
    assert p.returncode == 0, p.stderr
    return " ".join(p.stdout.split())


def test_help_shows_the_basic_tier_and_help_all_every_option():
    short, full = _help("--help"), _help("--help-all")
    basic = {o.flag for o in T.options_for(None, "train", T.BASIC)}
    every = {o.flag for o in T.options_for(None, "train")}
    shown = set(re.findall(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9-]*)", short))
    assert basic <= shown and not (every - basic) & shown
    assert every <= set(re.findall(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9-]*)", full))
    assert len(basic) <= 30


def test_help_shows_each_default_from_the_table():
    full = _help("--help-all")
    for o in T.options_for(None, "train"):
        if o.type is bool and o.default is False:
            continue  # a switch
        if o.name == "max_sentence_length":  # each task's own default, from the task registry
            from demidcd.tasks import get_task, task_names

            assert all(f"{get_task(n).max_sentence_length:,}" in full for n in task_names())
            continue
        shown = o.default_text().replace("%", "%")
        assert f"(default: {' '.join(shown.split())})" in full, o.flag


def test_estimator_parameters_default_to_the_table():
    for est in ESTIMATORS:
        params = est().get_params()
        for name, value in params.items():
            if name in T.BY_NAME:
                assert value == T.default(name), (est.__name__, name)
    # every learner option of the table is an estimator parameter
    names = set(SequenceTagger().get_params())
    assert {o.name for o in T.learner_params()} <= names


def test_solver_config_defaults_are_the_table():
    cfg = SolverConfig()
    for f in fields(SolverConfig):
        if f.name not in ("loss", "C"):  # their defaults are rules (l1 for chunking and ner,
            assert getattr(cfg, f.name) == T.default(f.name), f.name  # ...; C by features)
    assert T.option("loss").rule and T.option("C").rule
    assert T.default("C") is None and cfg.C == T.default_C() == T.C_DEFAULT


def test_c_default_is_the_rule_by_feature_kind():
    """C=None: 0.1 for words, tuples and templates, C_DICTS for feature dicts, resolved in
    solver_config (the one place) and recorded; a given C is kept."""
    X = [["the", "dog"], ["a", "cat", "runs"]] * 3
    Y = [["D", "N"], ["D", "N", "V"]] * 3
    D = [[{"w": w, "len": float(len(w))} for w in s] for s in X]
    fit = {"algorithm": "dcd", "threads": 1, "max_epochs": 2}
    words, dicts = SequenceTagger(**fit).fit(X, Y), SequenceTagger(**fit).fit(D, Y)
    assert words.C is None and dicts.C is None
    assert words.solver_config().C == T.C_DEFAULT and dicts.solver_config().C == T.C_DICTS
    assert words.hyper_parameters()["C"] == T.C_DEFAULT
    assert dicts.hyper_parameters()["C"] == T.C_DICTS != T.C_DEFAULT
    assert SequenceTagger(C=0.7, **fit).fit(D, Y).solver_config().C == 0.7
    assert ChunkTagger().solver_config().C == T.C_DEFAULT  # before fit: the general rule


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_learners_own_defaults_are_the_table(name):
    learner = LEARNERS[name]
    sig = inspect.signature(learner.function())
    for opt in learner.options:
        if opt in T.BY_NAME and opt in sig.parameters:
            d = sig.parameters[opt].default
            table = T.default(opt)
            if table is not None and d is not inspect.Parameter.empty and opt != "averaged":
                assert d == table, (name, opt)
        assert opt in T.BY_NAME or opt in ("debug",), f"{name}: {opt} is not in the table"


def test_cli_parses_to_none_unless_given():
    """Only what is given reaches the estimators (whose defaults are the table's)."""
    args = build_parser().parse_args(["train"])
    for o in T.learner_params():
        assert getattr(args, o.name) in (None, False), o.name
    assert build_parser().parse_args(["train", "--skip", "0.5"]).skip == 0.5


def test_learners_command_lists_them_and_their_own_options():
    p = run("learners")
    assert p.returncode == 0 and all(n in p.stdout for n in LEARNERS)
    p = run("learners", "demi-dcd")
    assert p.returncode == 0 and "--learners" in p.stdout and "--mixing" not in p.stdout
    p = run("learners", "sp-ipm")
    assert "--mixing" in p.stdout and "(default: uniform)" in p.stdout
    p = run("learners", "nope")
    assert p.returncode == 2 and "unknown --algorithm" in p.stderr


def test_removed_options_are_refused():
    for flag in ("--update-mode", "--rho", "--rho-worker", "--publish-interval"):
        p = run("train", flag, "1")
        assert p.returncode == 2 and flag in p.stderr


def _given(o: T.Option) -> list[str]:
    """Option ``o`` on the command line with a value it accepts."""
    if o.type is bool:
        return [o.flag]
    return [o.flag, o.choices[-1] if o.choices else "chunking" if o.name == "template" else "2"]


_TASK_NAMES = ("sequence", "chunking", "ner", "dependency", "entity-relation")
_FOREIGN = [(o, task) for o in T.options_for(None, "train")  # task-owned: not --save-state,
            if o.group != T.LEARNER and set(o.owners) & set(_TASK_NAMES)  # which learners own
            for task in _TASK_NAMES if task not in o.owners]


@pytest.mark.parametrize("o, task", _FOREIGN, ids=[f"{o.flag}-{t}" for o, t in _FOREIGN])
def test_train_refuses_the_options_of_other_tasks(cli, tmp_path, o, task):
    # --template with --task dependency was ignored without a word: every option the table
    # gives to other tasks is refused in one line naming it, before any data is read
    model = tmp_path / "m.npz"
    code, out, err = cli("train", "--task", task, *_given(o), "--train", tmp_path / "none.txt",
                         "--model", model, "--quiet")
    owners = list(o.owners)
    who = ", ".join(owners[:-1]) + " and " + owners[-1] if len(owners) > 1 else owners[0]
    assert (code, err.splitlines()) == (2, [f"demidcd: error: {o.flag} is not available for "
                                            f"{task} models (only for {who})"])
    assert not model.exists()
