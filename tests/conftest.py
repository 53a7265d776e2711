import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_sessionstart(session) -> None:
    """Byte-compile the package once: the suite starts a few hundred interpreters, and where
    PYTHONDONTWRITEBYTECODE is set each of them would compile every module it imports again."""
    import compileall

    import demidcd

    compileall.compile_dir(os.path.dirname(demidcd.__file__), quiet=1)


def pytest_collection_finish(session) -> None:
    """Once every test module is imported: collect, then move what survives (the modules the
    tests import, numpy's, numba's, hypothesis' and the package's: most of this process's
    objects) out of the cyclic collector's reach (``gc.freeze``). A full collection in this
    large interpreter (an automatic one, the package's own in cluster nodes and large fits,
    one in a forked worker, which also copies every page it touches) then visits only what the
    tests made since; nothing the tests make is kept from collection."""
    import gc

    gc.collect()
    gc.freeze()


from small_fit import conll04_task, small_corpus, tiny_sequence_task  # noqa: E402

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
def experimental(monkeypatch):
    """``experimental(**settings)``: set fields of the process engine's one experimental hook,
    :data:`demidcd.parallel.experimental.EXPERIMENTAL` (``update_mode``, ``rebuild_every``,
    ``check_rebuild``, ``transport``: not user options), for this test only."""
    from demidcd.parallel.experimental import EXPERIMENTAL

    def configure(**settings) -> None:
        for name, value in settings.items():
            assert hasattr(EXPERIMENTAL, name), f"no experimental setting {name!r}"
            monkeypatch.setattr(EXPERIMENTAL, name, value)
    return configure


@pytest.fixture
def cli(capsys):
    """``cli(*args) -> (status, stdout, stderr)``: the command line in this process (fast)."""
    from demidcd.cli import main

    def call(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err
    return call


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


OPT_C = 0.1  # the C of every cached optimum (:func:`optimum`)
OPT_CFG = {"C": OPT_C, "tol": 1e-4, "delta": 1e-4, "max_epochs": 100000, "time_limit": 120}
_TASKS = {"sequence": tiny_sequence_task, "entity-relation": lambda: conll04_task(6, "exact")}


@pytest.fixture(scope="session")
def optimum():
    """``optimum(task, loss)`` → (task, P*, w*): the problem ``task`` ("sequence": 60 synthetic
    sentences; "entity-relation": 6 CoNLL04 sentences, exact solver) and the primal P* of
    1-DCD at tol 1e-4 with ``loss`` ("l2" squared hinge, "l1" hinge), C = OPT_C; computed once
    per (task, loss) for the whole session and shared by every test that compares with it."""
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig, primal_objective

    tasks: dict = {}
    cache: dict = {}

    def get(name: str, loss: str):
        if name not in tasks:
            tasks[name] = _TASKS[name]()
        task = tasks[name]
        if (name, loss) not in cache:
            r = train(task, "dcd", SolverConfig(**OPT_CFG, loss=loss), threads=1)
            assert r.stop_reason == "converged", r.stop_reason
            p = primal_objective(task, r.w, OPT_C, loss=loss)[0]
            assert r.dual <= p + 1e-9 and (p - r.dual) / p <= 1e-3  # duality gap closed
            cache[name, loss] = p, r.w
        return (task, *cache[name, loss])

    return get


@pytest.fixture(scope="session")
def local_ray():
    """One Ray instance for the tests below (start-up takes seconds); its workers import this
    checkout's demidcd (here, where tests/test_ray.py and tests/test_convergence.py both find
    it)."""
    ray = pytest.importorskip("ray")
    old = os.environ.get("PYTHONPATH")
    root = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = root + (os.pathsep + old if old else "")
    ray.init(num_cpus=3, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    yield ray
    ray.shutdown()
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old
