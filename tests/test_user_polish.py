"""Issue 21: the estimators are scikit-learn estimators, defaults have one source, and outputs
never surprise (paths checked before training, symlinks followed, devices and fifos written
through, the input's encoding, one set of permissions, early Ctrl-C, counts in evaluate)."""

from __future__ import annotations

import math
import os
import re
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
from cli_run import run, train_model

from demidcd.api import ChunkTagger, EntityRelationExtractor, NamedEntityTagger, SequenceTagger
from demidcd.errors import DemidcdError, InputTypeError, NotFittedError, OptionError
from demidcd.estimators import DependencyParser
from demidcd.io.model import atomic_write
from demidcd.solvers.common import SolverConfig
from demidcd.synthetic import generate

ESTIMATORS = (SequenceTagger, ChunkTagger, NamedEntityTagger, EntityRelationExtractor,
              DependencyParser)
X = [["the", "cat", "sat"], ["a", "dog", "ran"], ["the", "dog", "sat"], ["a", "cat", "ran"]] * 5
Y = [["D", "N", "V"]] * 20


@pytest.fixture(scope="module")
def model(corpus: Path) -> Path:
    return train_model(corpus, max_epochs=3)


# ================================================================== scikit-learn conventions
def test_clone_gridsearch_cross_val_and_pipeline_work():
    sklearn = pytest.importorskip("sklearn")
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV, cross_val_score
    from sklearn.pipeline import make_pipeline

    t = SequenceTagger(C=0.5, threads=1, max_epochs=20)
    c = clone(t)
    assert c is not t and c.get_params() == t.get_params() and c.get_params()["C"] == 0.5
    g = GridSearchCV(SequenceTagger(threads=1, max_epochs=20, min_count=1),
                     {"C": [0.1, 1.0]}, cv=2).fit(X, Y)
    assert g.best_params_["C"] in (0.1, 1.0) and g.best_score_ > 0.9
    assert g.best_estimator_.predict([["the", "cat", "ran"]]) == [["D", "N", "V"]]
    scores = cross_val_score(SequenceTagger(threads=1, max_epochs=20, min_count=1), X, Y, cv=2)
    assert scores.shape == (2,) and (scores > 0.9).all()
    pipe = make_pipeline(SequenceTagger(threads=1, max_epochs=20, min_count=1)).fit(X, Y)
    assert pipe.score(X, Y) > 0.9
    pipe.set_params(sequencetagger__C=2.0)
    assert pipe.steps[-1][1].C == 2.0
    assert sklearn.base.is_classifier(t) is False  # plain K-fold splits: Y is not a 1-D target


def test_estimator_checks_that_apply_to_structured_inputs():
    """The checks of ``sklearn.utils.estimator_checks`` that do not feed numeric arrays.

    Not applicable, and why: every check that fits or predicts on the generated numeric data
    (``check_fit2d_*``, ``check_estimators_dtypes``, ``check_estimators_nan_inf``,
    ``check_estimators_pickle``, ``check_dont_overwrite_parameters``, ``check_fit_idempotent``,
    ``check_n_features_in*``, ``check_methods_*_invariance``, ``check_supervised_y_*``, the
    classifier/regressor/transformer checks, sample weights, sparse and array-API input ...):
    these estimators take sentences (lists of token strings, or ERSentence records) with one
    label sequence per sentence, not an (n_samples, n_features) array with one label per row,
    so a numeric matrix is rightly rejected as bad input rather than fitted.
    """
    pytest.importorskip("sklearn")
    from sklearn.utils import estimator_checks as ec

    applicable = [ec.check_no_attributes_set_in_init, ec.check_parameters_default_constructible,
                  ec.check_get_params_invariance, ec.check_set_params,
                  ec.check_estimator_cloneable, ec.check_estimator_repr,
                  ec.check_estimator_tags_renamed, ec.check_valid_tag_types,
                  ec.check_do_not_raise_errors_in_init_or_set_params,
                  ec.check_estimators_unfitted, ec.check_mixin_order]
    for cls in ESTIMATORS:
        for check in applicable:
            check(cls.__name__, cls())


def test_get_params_returns_constructor_arguments_unchanged_without_sklearn():
    """The protocol holds without scikit-learn: arguments stored as given (even bad ones),
    get_params/set_params round-trip, unknown names rejected, validation happens in fit."""
    for cls in ESTIMATORS:
        names = cls._get_param_names()
        assert {"C", "threads", "tol", "batch", "skip", "sweeps", "learners"} <= set(names)
        est = cls(C="not a number", threads=-3)  # stored, not validated
        assert est.get_params()["C"] == "not a number" and est.get_params()["threads"] == -3
        assert est.set_params(C=0.25, tol=1e-3) is est
        assert est.get_params()["C"] == 0.25 and est.tol == 1e-3
        with pytest.raises(ValueError, match="Invalid parameter 'time_limt'"):
            est.set_params(time_limt=5)
        assert cls().get_params()["C"] is None  # the option table's default: its rule
        assert not [k for k in vars(cls()) if k.endswith("_")]
    with pytest.raises(OptionError, match="^C must be"):
        SequenceTagger(C="abc").fit(X, Y)
    with pytest.raises(OptionError, match="^threads must be"):
        SequenceTagger(threads=0).fit(X, Y)


def test_misspelt_keyword_is_a_type_error():
    for cls in ESTIMATORS:
        with pytest.raises(TypeError):
            cls(time_limt=5)
    with pytest.raises(TypeError):
        SequenceTagger(0.1)  # keyword-only: no silent positional mix-up


def test_predict_before_fit_raises_not_fitted_error():
    for cls in ESTIMATORS:
        with pytest.raises(NotFittedError) as e:
            cls().predict([["a"]])
        assert isinstance(e.value, ValueError) and isinstance(e.value, AttributeError)
        assert "featurizer_" not in str(e.value)
    with pytest.raises(NotFittedError):
        SequenceTagger().score([["a"]], [["X"]])
    with pytest.raises(NotFittedError):
        SequenceTagger().save("never.npz")
    try:
        from sklearn.exceptions import NotFittedError as SkNotFitted
        from sklearn.utils.validation import check_is_fitted
    except ImportError:
        return
    with pytest.raises(SkNotFitted):
        SequenceTagger().predict([["a"]])
    with pytest.raises(SkNotFitted):
        check_is_fitted(SequenceTagger())


def test_a_string_where_a_token_list_is_expected_is_an_error():
    est = SequenceTagger(threads=1, max_epochs=5, min_count=1).fit(X, Y)
    with pytest.raises(InputTypeError, match=r"X\[0\] is a string"):
        est.predict(["The cat sat"])
    with pytest.raises(TypeError):
        est.predict("The cat sat")
    with pytest.raises(InputTypeError):
        SequenceTagger().fit(["the cat sat"], [["D", "N", "V"]])
    with pytest.raises(InputTypeError):
        SequenceTagger().fit(X, ["DNV"] * len(X))
    with pytest.raises(OptionError, match="3 tokens but 2 tags"):
        SequenceTagger().fit([["a", "b", "c"]], [["X", "Y"]])
    with pytest.raises(InputTypeError):
        EntityRelationExtractor().fit(["John lives in London"])
    assert est.predict([["The", "cat", "sat"]])[0].__len__() == 3


# ================================================================== outputs and paths
@pytest.mark.parametrize("where", ["missing dir", "a directory", "unwritable"])
def test_bad_output_paths_fail_before_training(tmp_path, corpus, where, cli):
    bad = {"missing dir": tmp_path / "nodir" / "sub" / "m.npz",
           "a directory": tmp_path,
           "unwritable": "/proc/m.npz"}[where]
    for opt in ("--model", "--log-json", "--cpu-log"):
        code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1", opt, bad)
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"demidcd: error: {opt}"), err
        assert "data:" not in out, "the data was read before the path was checked"
    r = run("train", "--train", str(corpus / "train.txt"), "--model", str(bad))  # the real CLI
    assert r.returncode == 2 and "data:" not in r.stdout and r.stderr.count("\n") == 1, r.stderr


def test_predict_checks_out_before_reading(tmp_path, corpus, model, cli):
    code, _, err = cli("predict", "--model", model, "--data", corpus / "test.txt",
                       "--out", tmp_path / "no" / "p.txt")
    assert code == 2 and err.count("\n") == 1 and "--out" in err


def test_atomic_write_follows_symlinks_and_writes_through_fifos_and_devices(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write(link, lambda f: f.write(b"new"))
    assert link.is_symlink() and real.read_bytes() == b"new"
    chain = tmp_path / "chain.txt"
    chain.symlink_to(link)
    atomic_write(chain, lambda f: f.write("newer"), mode="w")
    assert chain.is_symlink() and link.is_symlink() and real.read_text() == "newer"

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    atomic_write(fifo, lambda f: f.write(b"through"))
    reader.join(10)
    assert got == [b"through"] and stat.S_ISFIFO(os.stat(fifo).st_mode)

    null = tmp_path / "null"  # a private copy of /dev/null and /dev/full (root only)
    full = tmp_path / "full"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except (PermissionError, OSError):
        return
    atomic_write(null, lambda f: f.write(b"x" * 100))
    assert stat.S_ISCHR(os.stat(null).st_mode)
    with pytest.raises(DemidcdError, match="No space left"):
        atomic_write(full, lambda f: f.write(b"x" * 100))
    assert stat.S_ISCHR(os.stat(full).st_mode)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_predict_through_a_symlink_keeps_the_link(tmp_path, corpus, model, cli):
    real = tmp_path / "real.txt"
    real.write_text("")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    code, _, err = cli("predict", "--model", model, "--data", corpus / "test.txt", "--out", link)
    assert code == 0, err
    assert link.is_symlink() and real.stat().st_size > 0


def test_predict_writes_in_the_input_encoding(tmp_path, model, cli):
    data = tmp_path / "in.txt"
    data.write_bytes("España NOUN\nestá VERB\n\n".encode("latin-1"))
    out = tmp_path / "out.txt"
    code, _, err = cli("predict", "--model", model, "--data", data, "--out", out,
                       "--encoding", "latin-1")
    assert code == 0, err
    raw = out.read_bytes()
    assert b"Espa\xf1a" in raw and b"est\xe1" in raw
    assert raw.decode("latin-1").splitlines()[0].startswith("España ")


@pytest.mark.parametrize("fraction", ["1.5", "nan", "0", "1", "-0.2", "inf"])
def test_split_rejects_a_fraction_outside_0_1(tmp_path, fraction, cli):
    from test_entity_relation import SAMPLE

    corp = tmp_path / "s.corp"
    corp.write_text(SAMPLE * 4)
    code, _, err = cli("split", corp, "--out-dir", tmp_path / "sp",
                       f"--test-fraction={fraction}")
    assert code == 2, err
    assert err.count("\n") == 1 and "--test-fraction" in err
    assert not (tmp_path / "sp").exists()
    if fraction == "nan":  # the real CLI: once is enough
        r = run("split", str(corp), "--out-dir", str(tmp_path / "sp"), "--test-fraction", "nan")
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert not (tmp_path / "sp").exists()


def test_C_inf_is_rejected_like_nan(corpus, cli):
    for value in ("inf", "nan", "-inf"):
        code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                             f"--C={value}")
        assert code == 2 and "--C" in err and err.count("\n") == 1, err
        assert "data:" not in out
    with pytest.raises(OptionError, match="^C must be"):
        SolverConfig(C=math.inf).validate()
    with pytest.raises(OptionError, match="^C must be"):
        SequenceTagger(C=float("inf")).fit(X, Y)


def test_evaluate_prints_token_and_sentence_counts(corpus, model, cli):
    code, out, err = cli("evaluate", "--model", model, "--data", corpus / "test.txt")
    assert code == 0, err
    m = re.fullmatch(r"accuracy: [0-9.]+% \(([0-9,]+) tokens, ([0-9,]+) sentences\)\n", out)
    assert m, out
    text = (corpus / "test.txt").read_text()
    sentences = [s for s in text.split("\n\n") if s.strip()]
    assert int(m.group(2).replace(",", "")) == len(sentences)
    assert int(m.group(1).replace(",", "")) == sum(len(s.splitlines()) for s in sentences)


def test_an_unconverged_run_says_why(corpus, cli):
    code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                         "--max-epochs", "1", "--tol", "1e-6")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("stopped:"))
    assert "not converged (largest projected gradient" in line and "--max-epochs" in line


def test_default_1dcd_runs_until_converged():
    """The DCD learners' default is to run until converged (the default `demidcd train` on the
    synthetic corpus with one core used to stop at 100 epochs, "partial: max-epochs", max_pg
    0.019; it now converges after 184, 11.8 s on the 2-core EPYC). Here a small problem that
    needs ~200 epochs at tol 1e-5, in about a second."""
    c = generate(n_sentences=100, n_tags=5, vocab_size=200, seed=3)
    est = SequenceTagger(threads=1, tol=1e-5, delta=1e-5, C=1.0, min_count=1)
    res = est.fit(c.tokens, c.tags).result_
    assert res.stop_reason == "converged" and res.finished, (res.stop_reason, res.epochs)
    assert res.epochs > 100


def test_output_files_get_the_same_permissions(tmp_path, corpus, cli):
    old = os.umask(0o022)
    try:
        m, log, pred = tmp_path / "m.npz", tmp_path / "log.jsonl", tmp_path / "p.txt"
        code, _, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                           "--max-epochs", "1", "--model", m, "--log-json", log, "--quiet")
        assert code == 0, err
        code, _, err = cli("predict", "--model", m, "--data", corpus / "test.txt", "--out", pred)
        assert code == 0, err
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (m, log, pred)}
        assert set(modes.values()) == {0o644}, modes
        os.chmod(m, 0o640)  # replacing a file keeps its permissions
        code, _, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                           "--max-epochs", "1", "--model", m, "--quiet")
        assert code == 0 and stat.S_IMODE(m.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_slow_kernel_compilation_is_announced(monkeypatch):
    """Announced when a kernel really compiles (numba's compile event), not after a delay:
    issue 56 (tests/test_compile_notice.py has the warm-but-slow case)."""
    import numba

    import demidcd.solvers as solvers

    @numba.njit
    def fresh(x):  # a function numba has never compiled
        return x + 1

    def compiling_warm_up(*a, **k):
        fresh(1)

    lines: list[str] = []
    monkeypatch.setattr(solvers, "warm_up", compiling_warm_up)
    c = generate(n_sentences=30, n_tags=3, vocab_size=50, seed=1)
    SequenceTagger(threads=1, max_epochs=1, min_count=1, log=lines.append).fit(c.tokens, c.tags)
    assert any("compiling kernels, once per install" in ln for ln in lines), lines
    assert any(ln.startswith("kernels ready after") for ln in lines)
    lines.clear()
    monkeypatch.setattr(solvers, "warm_up", lambda *a, **k: None)
    SequenceTagger(threads=1, max_epochs=1, min_count=1, log=lines.append).fit(c.tokens, c.tags)
    assert not any("compiling" in ln for ln in lines)
    readme = Path(__file__).resolve().parents[1] / "README.md"
    assert "compiling kernels, once per install" in readme.read_text()


def test_hyper_parameters_round_trip_through_a_model_file(tmp_path):
    est = SequenceTagger(threads=1, max_epochs=2, min_count=1, skip=0.5, sweeps=2,
                         batch=4).fit(X, Y)
    est.save(tmp_path / "m.npz")
    back = SequenceTagger.load(tmp_path / "m.npz")
    assert back.hyper_parameters() == est.hyper_parameters()
    assert back.get_params()["skip"] == 0.5 and back.get_params()["sweeps"] == 2
    np.testing.assert_array_equal(back.coef_, est.coef_)
