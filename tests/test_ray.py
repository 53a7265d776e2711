"""The Ray transport on a local Ray instance (2 actors on this machine): the same optimum as
shared memory, a killed actor survived, nothing left behind. Skipped when Ray is not installed
(``pip install 'demidcd[ray]'``)."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_run import CLI

ray = pytest.importorskip("ray")

import small_fit  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[1])
PID = re.compile(r"worker (\d+) pid (\d+)")


def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_ctrl_c_leaves_no_ray_process(tmp_path):
    """Runs first, before this module starts its own Ray instance: a CLI run starts a local Ray
    instance (its processes share the run's process group); SIGINT to the group, as Ctrl-C on a
    terminal, stops it with the model written and every Ray process gone."""
    logf, model = tmp_path / "log.txt", tmp_path / "m.npz"
    env = {**os.environ, "PYTHONPATH": ROOT}
    with open(logf, "w") as f:
        p = subprocess.Popen([*CLI, "train", "--threads", "2",
                              "--backend", "ray", "--time-limit", "120", "--tol", "1e-9",
                              "--model", str(model)], stdout=f, stderr=subprocess.STDOUT,
                             env=env, cwd=ROOT, start_new_session=True)
        t0, seen = time.time(), {}
        while time.time() - t0 < 120 and not PID.search(logf.read_text()):
            for q in _descendants(p.pid):
                seen[q.pid] = q
            time.sleep(0.2)
        assert PID.search(logf.read_text()), logf.read_text()[-2000:]
        time.sleep(2)
        for q in _descendants(p.pid):
            seen[q.pid] = q
        assert any("raylet" in " ".join(q.cmdline()) for q in seen.values()
                   if q.is_running())
        os.killpg(p.pid, signal.SIGINT)  # as Ctrl-C on a terminal: the whole process group
        p.wait(timeout=60)
    out = logf.read_text()
    assert p.returncode == 130, out[-2000:]
    assert model.exists()
    t0 = time.time()
    while time.time() - t0 < 10 and any(q.is_running() and q.status() != "zombie"
                                        for q in seen.values()):
        time.sleep(0.2)
    left = [q.pid for q in seen.values() if q.is_running() and q.status() != "zombie"]
    assert not left, f"Ray processes left: {left}"


@pytest.fixture(scope="module")
def local_ray():
    """One Ray instance for the tests below (start-up takes seconds); its workers import this
    checkout's demidcd."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + old if old else "")
    ray.init(num_cpus=3, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    yield ray
    ray.shutdown()
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


def fit(small, **kw):
    return small_fit.fit(small, **{"threads": 3, **kw})


@pytest.mark.parametrize("algorithm", ["demi-dcd", "ms-dcd"])
def test_ray_reaches_the_shared_memory_optimum(local_ray, small, algorithm):
    shm, p1 = fit(small, algorithm=algorithm)
    lines = []
    over, p2 = fit(small, algorithm=algorithm, backend="ray", log=lines.append)
    assert shm.result_.stop_reason == over.result_.stop_reason == "converged"
    assert abs(p2 - p1) / p1 <= 1e-3
    assert over.result_.extra["inferences"] > 0
    pids = {int(m.group(2)) for m in map(PID.search, lines) if m}
    assert len(pids) == 2 and os.getpid() not in pids  # two actors, in other processes


def test_sp_ipm_over_ray_equals_shared_memory(local_ray, small):
    shm, _ = fit(small, algorithm="sp-ipm", max_epochs=3, perceptron_epochs_per_round=2)
    over, _ = fit(small, algorithm="sp-ipm", max_epochs=3, perceptron_epochs_per_round=2,
                  backend="ray")
    assert np.abs(shm.coef_).sum() > 0
    assert np.array_equal(shm.coef_, over.coef_)  # same shards, mappers and mixing


@pytest.fixture(scope="module")
def shm_primal(small):
    return fit(small, algorithm="demi-dcd")[1]


@pytest.mark.parametrize("algorithm", ["demi-dcd", "ms-dcd"])
def test_killed_actor_is_survived(local_ray, small, shm_primal, algorithm):
    lines, killed = [], []

    def kill_one(rec, w):
        if not killed and rec["seconds"] > 0.3:
            pid = next(int(m.group(2)) for m in map(PID.search, lines) if m)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    p1 = shm_primal
    est, p2 = fit(small, algorithm=algorithm, backend="ray", log=lines.append,
                  callback=kill_one, tol=1e-4, delta=1e-4)
    assert killed
    assert any(f"(pid {killed[0]}) died" in s and "restarting" in s for s in lines), lines
    assert est.result_.stop_reason == "converged"
    assert p2 <= p1 * (1 + 1e-3)
