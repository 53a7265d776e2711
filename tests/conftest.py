import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from small_fit import small_corpus  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
_SEG = re.compile(r"^demidcd-(\d+)-")


def _segments():
    try:
        return {f for f in os.listdir("/dev/shm") if _SEG.match(f)}
    except FileNotFoundError:
        return set()


@pytest.fixture
def shm_guard():
    """Fails the test if it leaves a demidcd shared-memory segment in /dev/shm.

    A new segment counts as leaked when its owner (the pid in its name) is this process or has
    exited, and it is still there 3 s later (the resource tracker unlinks the segments of a
    SIGKILLed owner within about a second). Segments of other live processes (another run on
    the same machine) are not this test's.
    """
    before = _segments()
    yield
    me = os.getpid()

    def leaked():
        out = []
        for f in _segments() - before:
            pid = int(_SEG.match(f).group(1))
            if pid == me or not psutil.pid_exists(pid):
                out.append(f)
        return out

    t0 = time.time()
    while leaked() and time.time() - t0 < 3:
        time.sleep(0.1)
    left = leaked()
    assert not left, f"leaked shared memory: {sorted(left)[:3]}"


@pytest.fixture
def schedule_keywords(monkeypatch):
    """Let solvers.train pass the multi-learner schedule's own keywords (``update_mode``,
    ``check``, ``rebuild_every``: for experiments and tests, not user options) through to it."""
    import dataclasses

    from demidcd.solvers import LEARNERS

    learner = LEARNERS["demi-dcd"]
    monkeypatch.setitem(LEARNERS, "demi-dcd", dataclasses.replace(
        learner, options=(*learner.options, "update_mode", "check", "rebuild_every")))


@pytest.fixture(scope="module")
def small():
    """The small synthetic tagging problem of :mod:`small_fit`: (tokens, tags)."""
    return small_corpus()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A directory with ``demidcd generate``'s synthetic train/dev/test files (200 training
    sentences)."""
    from demidcd.cli import main

    d = tmp_path_factory.mktemp("synth")
    assert main(["generate", "--out-dir", str(d), "--sentences", "200", "--quiet"]) == 0
    return d
