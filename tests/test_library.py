"""Issue 33: the library as sklearn-crfsuite's users use it: loaders that return X, y
(demidcd.datasets), parameter errors that are ValueErrors naming the parameter, load giving back
the parameters as given and the training summary, and EntityRelationExtractor.fit(X, y)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA

from demidcd.api import (
    ChunkTagger,
    EntityRelationExtractor,
    NamedEntityTagger,
    SequenceTagger,
    load_estimator,
)
from demidcd.cli import main
from demidcd.datasets import conll04_labels, load_conll04, load_dependency, load_tagged
from demidcd.errors import InputError, InputTypeError, OptionError
from demidcd.estimators import DependencyParser
from demidcd.io.model import load_model, save_model
from demidcd.solvers.common import TrainResult

COLUMNS = ("-DOCSTART- -X- O\n\n"
           "He PRP B-NP\nreckons VBZ B-VP\nthe DT B-NP\ndeficit NN I-NP\n\n"
           "The DT B-NP\ncat NN I-NP\nsat VBD B-VP\n\n")
CONLLU = ("# sent_id = 1\n"
          "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
          "2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n"
          "3-4\tsat.\t_\t_\t_\t_\t_\t_\t_\t_\n"
          "3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n"
          "4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n"
          "1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n"
          "2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n\n")
CONLL04 = ("7\tPeop\t0\tO\tNNP/NNP\tJohn/Smith\tO\tO\tO\n"
           "7\tO\t1\tO\tVBZ\tlives\tO\tO\tO\n"
           "7\tO\t2\tO\tIN\tin\tO\tO\tO\n"
           "7\tLoc\t3\tO\tNNP\tLondon\tO\tO\tO\n\n"
           "0\t3\tLive_In\n\n"
           "8\tOrg\t0\tO\tNNP\tIBM\tO\tO\tO\n"
           "8\tO\t1\tO\tIN\tin\tO\tO\tO\n"
           "8\tLoc\t2\tO\tNNP\tParis\tO\tO\tO\n\n"
           "0\t2\tOrgBased_In\n\n"
           "9\tPeop\t0\tO\tNNP\tMary\tO\tO\tO\n"
           "9\tO\t1\tO\tVBD\tsaw\tO\tO\tO\n"
           "9\tOther\t2\tO\tNNP\tEaster\tO\tO\tO\n\n\n")
FAST = {"max_epochs": 3, "min_count": 1, "threads": 1}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ====================================================================== 15. demidcd.datasets
def test_load_tagged_columns_gives_what_the_chunker_takes(tmp_path):
    p = _write(tmp_path, "c.txt", COLUMNS)
    X, y = load_tagged(p)
    assert X == [["He", "reckons", "the", "deficit"], ["The", "cat", "sat"]]
    assert y == [["B-NP", "B-VP", "B-NP", "I-NP"], ["B-NP", "I-NP", "B-VP"]]
    X2, y2 = load_tagged(p, feature_columns=2)
    assert X2[1] == [("The", "DT"), ("cat", "NN"), ("sat", "VBD")] and y2 == y
    assert load_tagged(p, feature_columns=[2])[0] == X2
    Xp, yp = load_tagged(p, column=2)
    assert yp[0] == ["PRP", "VBZ", "DT", "NN"]
    assert load_tagged(p, labelled=False) == (X, None)
    chunker = ChunkTagger(**FAST).fit(X2, y2)
    pred = chunker.predict(X2)
    assert [len(s) for s in pred] == [4, 3]
    assert 0.0 <= chunker.score(X2, y2) <= 1.0
    # the loader reads the file exactly as `demidcd train --task chunking` does
    assert main(["train", "--task", "chunking", "--train", str(p), "--feature-columns", "2",
                 "--max-epochs", "3", "--min-count", "1", "--threads", "1", "--quiet",
                 "--model", str(tmp_path / "m.npz")]) == 0
    cli_model = ChunkTagger.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(cli_model.coef_, chunker.coef_)


def test_load_tagged_conllu(tmp_path):
    p = _write(tmp_path, "s.conllu", CONLLU)
    X, y = load_tagged(p)  # format from the name, UPOS labels by default
    assert X == [["The", "cat", "sat", "."], ["Dogs", "bark"]]
    assert y == [["DET", "NOUN", "VERB", "PUNCT"], ["NOUN", "VERB"]]
    X, y = load_tagged(p, column="xpos", feature_columns="upos")
    assert X[1] == [("Dogs", "NOUN"), ("bark", "VERB")] and y[1] == ["NNS", "VBP"]
    tagger = SequenceTagger(**FAST).fit(X, y)
    assert [len(s) for s in tagger.predict(X)] == [4, 2]
    X, y = load_tagged(p, format="conllu", labelled=False)
    assert y is None and X[1] == ["Dogs", "bark"]


def test_load_tagged_errors_name_the_file_line_or_parameter(tmp_path):
    bad = _write(tmp_path, "bad.txt", "a B\nb C D\n")
    with pytest.raises(InputError, match=r"bad.txt:2: expected 2 columns"):
        load_tagged(bad)
    p = _write(tmp_path, "c.txt", COLUMNS)
    with pytest.raises(ValueError, match="max_sentence_length must be >= 1") as e:
        load_tagged(p, max_sentence_length=0)
    assert "--" not in str(e.value)
    with pytest.raises(ValueError, match="feature column 3 is the label column"):
        load_tagged(p, feature_columns=3)


def test_load_dependency(tmp_path):
    p = _write(tmp_path, "d.conllu", CONLLU)
    X, heads = load_dependency(p)  # both POS columns filled: (word, UPOS, XPOS)
    assert X[0] == [("The", "DET", "DT"), ("cat", "NOUN", "NN"), ("sat", "VERB", "VBD"),
                    (".", "PUNCT", ".")]
    assert heads == [[(2, "det"), (3, "nsubj"), (0, "root"), (3, "punct")],
                     [(2, "nsubj"), (0, "root")]]
    X1, _ = load_dependency(p, pos_column="xpos", second_pos=False)
    assert X1[1] == [("Dogs", "NNS"), ("bark", "VBP")]
    assert load_dependency(p, labelled=False)[1] is None
    conllx = _write(tmp_path, "d.conll", CONLLU.replace("3-4\tsat.\t_\t_\t_\t_\t_\t_\t_\t_\n",
                                                        ""))
    assert load_dependency(conllx) == (X, heads)  # not .conllu: read as CoNLL-X
    no_xpos = _write(tmp_path, "n.conllu", CONLLU.replace("\tNN\t", "\t_\t"))
    assert len(load_dependency(no_xpos)[0][0][0]) == 2
    with pytest.raises(InputError, match="leaves the second one empty"):
        load_dependency(no_xpos, second_pos=True)
    parser = DependencyParser(**{k: v for k, v in FAST.items() if k != "min_count"})
    parser.fit(X, heads)
    pred = parser.predict(X)
    assert [len(h) for h in pred] == [4, 2] and 0.0 <= parser.score(X, heads) <= 1.0


def test_load_conll04_and_fit_with_y(tmp_path):
    p = _write(tmp_path, "s.corp", CONLL04)
    X, y = load_conll04(p)
    assert y == [(["Peop", "Loc"], {(0, 1): "Live_In"}), (["Org", "Loc"], {(0, 1): "OrgBased_In"}),
                 (["Peop", "Other"], {})]
    assert conll04_labels(X) == y
    er = EntityRelationExtractor(threads=1, max_epochs=30).fit(X, y)
    assert er.predict(X) == y and er.score(X, y) == 1.0
    assert er.score(X) == er.score(X, y)  # without y: the labels inside X, as before


# ============================================================ 16. errors, load, ER fit(X, y)
def test_parameter_errors_are_value_errors_naming_the_parameter(tmp_path):
    cases = {"C": -1.0, "tol": 0, "max_epochs": 0, "max_active": 0, "skip": 1.5,
             "threads": 0, "time_limit": -2}
    for name, value in cases.items():
        with pytest.raises(ValueError) as e:
            SequenceTagger(**{name: value}).fit([["a", "b"]], [["X", "Y"]])
        assert isinstance(e.value, OptionError)
        text = str(e.value)
        assert text.startswith(f"{name} must be") and "--" not in text, text
    with pytest.raises(ValueError, match=r"^C must be a finite number > 0, got -1.0$"):
        SequenceTagger(C=-1.0).fit([["a", "b"]], [["X", "Y"]])
    with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
        SequenceTagger(algorithm="nope").fit([["a", "b"]], [["X", "Y"]])
    X, y = load_conll04(_write(tmp_path, "s.corp", CONLL04))
    with pytest.raises(ValueError, match="^relation_loss_weight must be"):
        EntityRelationExtractor(relation_loss_weight=-1).fit(X, y)


def test_option_error_speaks_flags_on_the_command_line_and_parameters_in_python(tmp_path,
                                                                               capsys):
    e = OptionError("--max-active-per-example must be >= 1, got 0; see --lambda and "
                    "--min-count/--hashing, not '--x'")
    assert str(e) == ("max_active must be >= 1, got 0; see lam and min_count/hashing, not "
                      "'--x'")
    assert e.cli_text() == ("--max-active-per-example must be >= 1, got 0; see --lambda and "
                            "--min-count/--hashing, not '--x'")
    p = _write(tmp_path, "c.txt", COLUMNS)
    for flag, value in (("--C", "-1"), ("--max-active-per-example", "0")):
        capsys.readouterr()
        assert main(["train", "--train", str(p), "--threads", "1", flag, value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"demidcd: error: {flag} must be"), err


def _fitted(tmp_path, **kw):
    X, y = load_tagged(_write(tmp_path, "c.txt", COLUMNS), feature_columns=2)
    return X, y, NamedEntityTagger(**{**FAST, **kw}).fit(X, y)


def test_load_gives_back_the_parameters_as_given_and_the_training_summary(tmp_path):
    lines: list[str] = []
    X, y, est = _fitted(tmp_path, C=np.float64(0.5), tol=1, time_limit=math.inf,
                        log=lines.append, snapshot_dir=None)
    est.save(tmp_path / "m.npz")
    for back in (NamedEntityTagger.load(tmp_path / "m.npz"), load_estimator(tmp_path / "m.npz")):
        given = back.get_params()
        assert given == {**est.get_params(), "log": None}
        assert given["min_count"] == 1 and given["label_scheme"] == "auto"  # the table default
        assert given["time_limit"] == math.inf and type(given["tol"]) is int
        assert given["algorithm"] is None and given["loss"] is None  # not the resolved values
        r = back.result_
        assert isinstance(r, TrainResult)
        assert (r.finished, r.stop_reason, r.epochs) == (est.result_.finished,
                                                         est.result_.stop_reason, 3)
        assert r.seconds is None and r.history == []  # not saved: seeded models are identical
        assert r.dual == pytest.approx(est.result_.dual)
        assert back.objective(back.training_task(X, y))["gap"] is not None
        assert back.predict(X) == est.predict(X)


def test_models_without_saved_parameters_load_as_before(tmp_path):
    X, y, est = _fitted(tmp_path, C=0.5)
    est.save(tmp_path / "m.npz")
    w, arrays, meta = load_model(tmp_path / "m.npz")
    for key in ("parameters", "dual"):
        del meta[key]
    save_model(tmp_path / "old.npz", w, arrays, meta)
    back = NamedEntityTagger.load(tmp_path / "old.npz")
    assert back.get_params()["C"] == 0.5 and back.get_params()["tol"] == 0.01  # resolved
    assert back.result_.epochs == 3 and back.result_.seconds is None
    assert back.result_.stop_reason == est.result_.stop_reason


def test_dependency_parser_load_keeps_given_parameters(tmp_path):
    X, heads = load_dependency(_write(tmp_path, "d.conllu", CONLLU))
    parser = DependencyParser(threads=1, max_epochs=2, decoder="cle").fit(X, heads)
    parser.save(tmp_path / "d.npz")
    back = DependencyParser.load(tmp_path / "d.npz")
    assert back.get_params() == parser.get_params() and back.hashing is None
    assert back.result_.epochs == 2 and back.predict(X) == parser.predict(X)
    # a model whose hashing was the default of its time keeps that value when the default
    # has moved on
    w, arrays, meta = load_model(tmp_path / "d.npz")
    meta["hyper_parameters"]["hashing"] = 1 << 10
    meta["featurizer"]["hashing"] = 1 << 10
    save_model(tmp_path / "h.npz", np.zeros(1 << 10), arrays, {**meta, "dim": 1 << 10})
    assert DependencyParser.load(tmp_path / "h.npz").hashing == 1 << 10


@pytest.mark.parametrize("bad", [[1], {"C": [1]}, {"C": {"float": "x"}}, "x"])
def test_bad_saved_parameters_are_a_model_file_error(tmp_path, bad):
    from demidcd.errors import ModelFileError

    _, _, est = _fitted(tmp_path)
    est.save(tmp_path / "m.npz")
    w, arrays, meta = load_model(tmp_path / "m.npz")
    save_model(tmp_path / "b.npz", w, arrays, {**meta, "parameters": bad})
    with pytest.raises(ModelFileError, match="bad 'parameters'"):
        NamedEntityTagger.load(tmp_path / "b.npz")
    json.dumps(meta)  # the saved metadata is plain JSON


def test_entity_relation_fit_uses_y(tmp_path):
    X, y = load_conll04(_write(tmp_path, "s.corp", CONLL04))
    # y other than the labels inside X: every entity a person, no relation
    people = [(["Peop"] * s.n_entities, {}) for s in X]
    er = EntityRelationExtractor(threads=1, max_epochs=30).fit(X, people)
    assert er.predict(X) == people
    assert er.metrics(X, people)["entity_f1"] == 1.0 and er.metrics(X, y)["entity_f1"] < 1.0
    assert X[0].ent_label == ["Peop", "Loc"]  # X is not changed
    er.fit(X, y, X_dev=X, Y_dev=people)
    assert er.predict(X) == y
    with pytest.raises(ValueError, match="X has 3 sentences but Y has 1"):
        er.fit(X, y[:1])
    with pytest.raises(ValueError, match="sentence 0 has 2 entities but Y.0. has 1 labels"):
        er.fit(X, [(["Peop"], {})] + y[1:])
    with pytest.raises(ValueError, match="unknown entity label 'Person'"):
        er.fit(X, [(["Person", "Loc"], {})] + y[1:])
    with pytest.raises(ValueError, match=r"relation key \(0, 5\)"):
        er.fit(X, [(["Peop", "Loc"], {(0, 5): "Live_In"})] + y[1:])
    with pytest.raises(InputTypeError):
        er.fit(X, ["Peop Loc"] * 3)


# ====================================================================== the real corpora
CORPORA = [
    ("conll2000/test.txt", dict(feature_columns=2), 2012, 47377, ("B-NP", "O")),
    ("conll2002/esp.testb", dict(feature_columns=2), None, None, ("B-PER", "O")),
    ("ud_english_ewt/en_ewt-ud-dev.conllu", dict(column="xpos"), 2001, 25147, ("NN", "DT")),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,kw,n_sent,n_tok,labels", CORPORA)
def test_load_tagged_on_the_real_corpora(name, kw, n_sent, n_tok, labels):
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"../shared/data/{name} not available")
    X, y = load_tagged(path, **kw)
    assert len(X) == len(y) and [len(s) for s in X] == [len(t) for t in y]
    if n_sent is not None:
        assert (len(X), sum(map(len, X))) == (n_sent, n_tok)
    assert set(labels) <= {t for s in y for t in s}
    if "feature_columns" in kw:
        assert all(isinstance(t, tuple) and len(t) == 2 for t in X[0])


@pytest.mark.slow
def test_load_dependency_and_conll04_on_the_real_corpora():
    ewt, corp = DATA / "ud_english_ewt/en_ewt-ud-dev.conllu", DATA / "conll04/conll04.corp"
    if not (ewt.is_file() and corp.is_file()):
        pytest.skip("../shared/data not available")
    X, y = load_dependency(ewt)
    assert len(X) == 2001 and sum(map(len, y)) == 25147 and len(X[0][0]) == 3
    assert all([h for h, _ in t].count(0) == 1 for t in y)  # UD: one root word per tree
    assert all(r == "root" for t in y for h, r in t if h == 0)
    X, y = load_conll04(corp)
    assert len(X) == 5516 and sum(len(labels) for labels, _ in y) == 14177
    assert sum(len(r) for _, r in y) == 2048


# ============================================================ 17. 1-DCD's stop with any r
def _dcd_fit(small, r: int) -> float:
    """1-DCD with r inner passes on ``small``, stopped converged at a certified optimum (its
    primal returned)."""
    from demidcd.solvers.common import primal_objective

    X, Y = small
    est = SequenceTagger(algorithm="dcd", threads=1, inner_passes=r, max_epochs=300,
                         min_count=1, time_limit=60).fit(X, Y)
    assert est.result_.stop_reason == "converged", (r, est.result_.epochs)
    assert est.result_.history[-1]["max_pg"] < 0.01
    primal, _ = primal_objective(est.training_task(X, Y), est.coef_, 0.1)
    gap = est.objective(est.training_task(X, Y))["gap"]
    assert 0 <= gap < 1e-3, (r, gap)
    return primal


@pytest.fixture(scope="module")
def r5_primal(small) -> float:
    """The reference run's primal (r = 5), fitted once for both cases below."""
    return _dcd_fit(small, 5)


@pytest.mark.parametrize("inner_passes", [4, 10])
def test_dcd_with_an_even_number_of_inner_passes_stops_converged(small, r5_primal,
                                                                 inner_passes):
    """The sweep plan's full passes alternate with skipping ones near convergence, so with an
    even r the last inner pass of an epoch was never a full one and 1-DCD never certified
    (max-epochs); the inference pass, which visits every example, certifies as well. It stops
    at the optimum r = 5 reaches."""
    assert _dcd_fit(small, inner_passes) == pytest.approx(r5_primal, rel=1e-3)
