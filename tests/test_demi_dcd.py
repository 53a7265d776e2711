"""DEMI-DCD agrees with 1-DCD, and never leaks processes or shared memory."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_run import CLI
from small_fit import fit

from demidcd.api import SequenceTagger


def _children(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _run(args, env=None):
    return subprocess.Popen([*CLI, "train", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def _worker_pid_from_log(path, timeout=60):
    """The pid in the first 'worker K pid N' line of a run log (as operators find it)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = re.search(r"worker \d+ pid (\d+)", path.read_text() if path.exists() else "")
        if m:
            return int(m.group(1))
        time.sleep(0.1)
    raise AssertionError("the log names no worker pid")


def _gone(procs, timeout=5.0):
    """True when every process in ``procs`` has exited within ``timeout`` seconds."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        alive = [k for k in procs if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    print("still running:", [(k.pid, k.cmdline()) for k in alive])
    return False


def _wait_for_worker(proc, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        kids = _children(proc.pid)
        if kids:
            return kids
        time.sleep(0.1)
    raise AssertionError("no worker started")


BASE = ["--threads", "2", "--algorithm", "demi-dcd", "--learners", "1", "--time-limit", "30",
        "--tol", "1e-9"]


def test_sigint_saves_partial_model_and_leaves_nothing(tmp_path, shm_guard):
    model = tmp_path / "m.npz"
    p = _run([*BASE, "--model", str(model)])
    kids = _wait_for_worker(p)
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 130, err
    assert model.exists()
    assert _gone(kids)
    from demidcd.io.model import load_model
    _, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == "interrupted"


def test_killed_worker_is_restarted(tmp_path, shm_guard):
    model, logf = tmp_path / "m.npz", tmp_path / "log.txt"
    with open(logf, "w") as f:
        p = subprocess.Popen([*CLI, "train", "--threads", "2",
                              "--algorithm", "demi-dcd", "--learners", "1",
                              "--time-limit", "8", "--tol", "1e-9",
                              "--model", str(model)], stdout=f, stderr=subprocess.STDOUT)
        pid = _worker_pid_from_log(logf)
        kids = _children(p.pid)
        time.sleep(1.5)
        os.kill(pid, signal.SIGKILL)
        p.wait(timeout=60)
    out = logf.read_text()
    assert p.returncode == 0, out
    assert f"pid {pid}) died (signal 9); restarting" in out
    assert model.exists()
    assert _gone(kids)


def test_worker_exception_is_reported_in_one_line(tmp_path, shm_guard):
    """A worker that keeps raising past the restart limit stops training with one line and
    exit 1; the partial model is kept, marked unfinished (issue 21)."""
    from demidcd.io.model import load_model

    p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("faults.py")), "3",
                          "train", *BASE, "--model", str(tmp_path / "m.npz")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "injected fault" in lines[0] and "worker 1" in lines[0]
    assert "partial model written to" in lines[0]
    assert "Traceback" not in err
    _, _, meta = load_model(tmp_path / "m.npz")
    assert meta["finished"] is False and meta["stop_reason"] == "worker-failed"


def test_engine_counts_are_consistent(small, shm_guard):
    est, _ = fit(small, algorithm="demi-dcd", threads=2, learners=1)
    ex = est.result_.extra
    # the learner's own inferences (its first epoch, then its inference share) admit
    # structures without a ring; in the first epoch it infers at most every example once
    n = len(small[0])
    first = est.result_.history[0]["learner_inferences"]
    assert 0 < first <= n and ex["learner_inferences"] >= first
    assert ex["pushed"] + ex["learner_inferences"] >= ex["admitted"] + ex["duplicates"]
    assert ex["learner_inferences"] < est.result_.history[-1]["inferences"] \
        <= ex["inferences"] + ex["learner_inferences"]
    np.testing.assert_array_less(0, ex["updates"])


def test_sp_ipm_one_shard_equals_sequential_perceptron(small, shm_guard):
    from demidcd.solvers.sp_ipm import perceptron_epochs
    X, Y = small
    est = SequenceTagger(algorithm="sp-ipm", threads=2, max_epochs=3, min_count=1,
                         perceptron_epochs_per_round=2).fit(X, Y)
    task = est.training_task(X, Y)
    w = np.zeros(task.dim)
    mistakes = perceptron_epochs(task, w, np.arange(task.n_examples), 6)
    assert est.result_.extra["updates"] == mistakes > 0
    np.testing.assert_array_equal(est.coef_, w)


def test_sp_ipm_mixing_variants_run(small, shm_guard):
    X, Y = small
    for kw in ({"mixing": "mistakes"}, {"averaged": True}):
        est = SequenceTagger(algorithm="sp-ipm", threads=3, max_epochs=2, min_count=1,
                             perceptron_epochs_per_round=1, **kw).fit(X, Y)
        assert est.score(X, Y) > 0.5


@pytest.mark.parametrize("alg", ["ms-dcd", "sp-ipm"])
def test_baselines_stop_cleanly_on_sigint(tmp_path, alg, shm_guard):
    model = tmp_path / "m.npz"
    p = _run(["--threads", "2", "--algorithm", alg, "--time-limit", "30", "--tol", "1e-9",
              "--max-epochs", "100000", "--model", str(model)])
    kids = _wait_for_worker(p)
    time.sleep(2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 130, err
    assert model.exists() and _gone(kids)


WARM_UP_PROBE = """
import numpy as np
from demidcd.api import SequenceTagger
from demidcd.synthetic import generate
from demidcd.solvers import warm_up
from demidcd.tasks.features import SequenceFeaturizer
from demidcd.solvers import kernels as K
from demidcd.tasks import sequence as S
from demidcd.primitives import ring, seqlock
c = generate(n_sentences=20, n_tags=4, vocab_size=50, seed=1)
est = SequenceTagger(min_count=1)
est.classes_ = sorted({t for s in c.tags for t in s})
est.featurizer_ = SequenceFeaturizer(1, 0).fit(c.tokens)
task = est.training_task(c.tokens, c.tags)
kernels = [K.update_examples, K.insert_records, K.compact_pool, K.dual_terms,
           S.loss_augmented_kernel, ring._push_kernel, ring._pop_copy, seqlock._copy_lines]
before = sum(len(k.signatures) for k in kernels)
warm_up(task, "demi-dcd", 2)
print(before, min(len(k.signatures) for k in kernels))
"""


def test_warm_up_compiles_every_kernel_before_the_clock():
    """In a fresh process nothing is compiled; after warm_up every kernel a DEMI-DCD learner and
    its worker call is (so compilation never lands on the solver's clock, and forked workers
    inherit it)."""
    out = subprocess.run([sys.executable, "-c", WARM_UP_PROBE], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split())
    assert before == 0 and after >= 1
