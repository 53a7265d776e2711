"""The memory that training's set-up leaves in the process that trains (issue 43).

``demidcd train`` reads the corpus, builds the feature dictionary and encodes the sentences in a
short-lived child process (``demidcd.cli.setup``), which hands back arrays: the process that
trains, and the learner processes forked from it, then hold no Python object per token or per
feature string. Measured here as the bytes of Python objects (tracemalloc's domain 0: not numpy's
arrays) that fitting allocated and that are still alive when the learner reports its first
iteration, per training token. Fitting in-process on lists (``fit(X, Y)``, what the command
did before) keeps the dictionary's strings, dicts and per-type tables alive: about 190 bytes a
token here. The prepared fit keeps about 4.
"""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from cli_run import run

from demidcd.cli import main
from demidcd.cli.setup import run_in_child
from demidcd.estimators.sequence import SequenceTagger
from demidcd.synthetic import generator_model, sample

BYTES_PER_TOKEN = 16  # Python objects left alive per training token (prepared ~4, fit(X, Y) ~190)


@pytest.fixture(scope="module")
def corpus():
    m = generator_model(n_tags=12, vocab_size=3000, mean_length=18, max_length=60, seed=3)
    c = sample(m, 1500, seed=1)
    return c.tokens, c.tags


def _tagger(cb=None) -> SequenceTagger:
    return SequenceTagger(algorithm="dcd", threads=1, max_epochs=1, callback=cb)


def _python_bytes_alive(fit) -> int:
    """Bytes of Python objects allocated by ``fit(tagger)`` and alive at the first record."""
    seen: list[int] = []

    def cb(rec: dict, w: np.ndarray) -> None:
        if not seen:
            snap = tracemalloc.take_snapshot()
            seen.append(sum(t.size for t in snap.filter_traces(
                [tracemalloc.DomainFilter(True, 0)]).traces))

    est = _tagger(cb)
    tracemalloc.start()
    try:
        fit(est)
    finally:
        tracemalloc.stop()
    assert seen, "the learner reported no iteration"
    return seen[0]


def test_the_training_process_keeps_no_python_objects_per_token(corpus):
    X, Y = corpus
    n_tokens = sum(map(len, X))
    _tagger().fit(X[:50], Y[:50])  # the kernels compiled or loaded, outside the measurement
    done, prepared = run_in_child(lambda: _tagger().prepare_fit(X, Y))
    assert done
    after = _python_bytes_alive(lambda est: est.fit_prepared(prepared)) / n_tokens
    before = _python_bytes_alive(lambda est: est.fit(X, Y)) / n_tokens
    assert after < BYTES_PER_TOKEN, (after, before)
    assert before > BYTES_PER_TOKEN, (after, before)  # what the bound tells apart


def test_prepared_fit_is_the_fit(corpus):
    """The model of a prepared fit (the strings packed until first use) is the model of
    ``fit`` to the last bit, and predicts the same."""
    X, Y = corpus
    a = _tagger().fit(X, Y)
    b = _tagger()
    done, prepared = run_in_child(lambda: _tagger().prepare_fit(X, Y, X[:20], Y[:20]))
    assert done
    b.fit_prepared(prepared)
    assert "_features" in vars(b.featurizer_) and b.featurizer_._packed is not None
    assert np.array_equal(a.coef_, b.coef_)
    assert b.n_features_ == a.n_features_ and b.classes_ == a.classes_
    assert b.featurizer_.state()[0]["feature_strings"].tobytes() == \
        a.featurizer_.state()[0]["feature_strings"].tobytes()
    assert b.predict(X[:30]) == a.predict(X[:30])
    assert b.featurizer_.features == a.featurizer_.features


def test_an_error_in_the_child_is_raised_here():
    def fail():
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        run_in_child(fail)


def test_ctrl_c_while_the_child_prepares_stops_both():
    """Ctrl-C in the parent while the set-up child works: KeyboardInterrupt here, the child
    killed and reaped (no process lingers), nothing returned."""
    import signal
    import threading
    import time

    import psutil

    def slow():
        time.sleep(60)

    before = {c.pid for c in psutil.Process().children()}
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # (Python's Ctrl-C, whatever
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))  # the runner set)
    timer.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_in_child(slow)
    finally:
        timer.join()
        signal.signal(signal.SIGINT, old)
    assert time.monotonic() - t0 < 10
    assert {c.pid for c in psutil.Process().children()} == before


def test_the_command_line_set_up_in_a_child_trains_the_same_model(tmp_path):
    """``demidcd train`` as a process of its own prepares in a child; called in-process it
    fits on the lists: the same model file, array for array."""
    assert main(["generate", "--out-dir", str(tmp_path), "--sentences", "300", "--quiet"]) == 0
    args = ["train", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "dev.txt"),
            "--algorithm", "dcd", "--threads", "1", "--max-epochs", "2", "--quiet"]
    child = run(*args, "--model", str(tmp_path / "child.npz"))
    assert child.returncode == 0, child.stderr
    assert main([*args, "--model", str(tmp_path / "inproc.npz")]) == 0
    with np.load(tmp_path / "child.npz") as a, np.load(tmp_path / "inproc.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            if not k.startswith("meta"):
                assert np.array_equal(a[k], b[k]), k
