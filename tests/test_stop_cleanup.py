"""Stopping and cleaning up (issue 34: one module): signals (SIGINT, a second SIGINT, SIGTERM,
SIGKILL of the parent), killed and raising workers, the janitor and the stale-segment sweep.

Every fault must end with no process left and no shared-memory segment of the run left in
/dev/shm. Leaks are looked for by owner: segments are named ``demidcd-<parent pid>-…`` and
processes are the run's descendants, so other runs on the machine do not disturb the checks.
One set of helpers: :func:`_children` (a run's processes), :func:`_alive`, :func:`_until_gone`
and :func:`_gone` (waiting for them and the run's segments to go), :func:`_wait_for` (log
polling).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_run import CLI, Spawned, run, spawn

from demidcd.io.model import load_model
from demidcd.primitives.shm import list_segments

ROOT = Path(__file__).resolve().parents[1]


# ===================================== faults injected into DEMI-DCD runs (from test_reliability)
DEMI = ["train", "--threads", "2", "--algorithm", "demi-dcd", "--learners", "1", "--time-limit",
        "60", "--tol", "1e-9"]


def _start(args: list[str], log: Path) -> Spawned:
    with open(log, "w") as f:
        return spawn(*args, stdout=f, stderr=subprocess.STDOUT)


def _wait_for(log: Path, proc: Spawned, pattern: str, timeout: float = 120) -> re.Match:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        m = re.search(pattern, log.read_text(), re.M)
        if m:
            return m
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-2000:]}"
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in the log: {log.read_text()[-2000:]}")


def _children(pid: int) -> list[psutil.Process]:
    """Every live descendant of ``pid`` (none once it has exited)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _until_gone(procs: list[psutil.Process], pid: int, timeout: float) -> tuple[list, list]:
    """Wait until no process of ``procs`` runs and no segment of ``pid`` is in /dev/shm."""
    t0 = time.monotonic()
    while True:
        alive, segs = _alive(procs), list_segments(pid=pid)
        if (not alive and not segs) or time.monotonic() - t0 > timeout:
            return alive, segs
        time.sleep(0.05)


def _gone(procs: list[psutil.Process], timeout: float = 5.0) -> bool:
    """True when every process in ``procs`` has exited within ``timeout`` seconds."""
    alive = _until_gone(procs, -1, timeout)[0]
    if alive:
        print("still running:", [(k.pid, k.name()) for k in alive])
    return not alive


def _kill_all(procs: list[psutil.Process]) -> None:
    for p in _alive(procs):  # only on a failing test: never leave our own processes behind
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _started(tmp_path: Path) -> tuple[Spawned, Path, Path, list[psutil.Process], int]:
    """A DEMI-DCD run on the synthetic default, in its training loop; the log names its pids."""
    model, log = tmp_path / "out" / "m.npz", tmp_path / "log.txt"
    model.parent.mkdir()
    p = _start([*DEMI, "--model", str(model)], log)
    learner = int(_wait_for(log, p, r"^learner pid (\d+)").group(1))
    worker = int(_wait_for(log, p, r"^worker 1 pid (\d+)").group(1))
    _wait_for(log, p, r"^iter +2 ")
    assert learner == p.pid
    family = _children(p.pid)
    assert worker in {k.pid for k in family}
    return p, model, log, family, worker


def _stop_with(p: Spawned, log: Path, family: list[psutil.Process], sig: int,
               before: Callable[[], None] | None = None) -> tuple[float, list, list, str]:
    """Send ``sig`` to the run (after ``before()``) and wait for it to exit 130 without a
    traceback: (seconds from ``sig`` to the exit, processes and segments left, the log)."""
    try:
        if before is not None:
            before()
        t0 = time.monotonic()
        p.send_signal(sig)
        p.wait(timeout=30)
        stopped = time.monotonic() - t0
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        _kill_all(family)
    out = log.read_text()
    assert p.returncode == 130, out[-2000:]
    assert "Traceback" not in out
    return stopped, alive, segs, out


def test_sigterm_stops_gracefully_within_2s_with_a_partial_model(tmp_path: Path) -> None:
    p, model, log, family, _ = _started(tmp_path)
    stopped, alive, segs, out = _stop_with(p, log, family, signal.SIGTERM)
    # under 2 s on a quiet machine; a loaded one stretches the shutdown, so the bound only
    # says the signal was honoured long before the 60 s limit would have ended the run
    assert stopped < 15.0, f"SIGTERM took {stopped:.2f}s to stop"
    w, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == "interrupted"
    assert np.abs(w).sum() > 0
    assert "(partial: interrupted)" in out
    assert os.listdir(model.parent) == ["m.npz"]  # no temporary file
    assert not alive and not segs


def test_second_sigint_stops_at_once(tmp_path: Path) -> None:
    """The worker is stopped (SIGSTOP), so the first Ctrl-C's graceful shutdown would wait 2 s
    for it before terminating it; a second Ctrl-C must cut that wait short."""
    p, model, log, family, worker = _started(tmp_path)

    def first_sigint() -> None:
        os.kill(worker, signal.SIGSTOP)
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)

    stopped, alive, segs, out = _stop_with(p, log, family, signal.SIGINT, before=first_sigint)
    assert stopped < 1.8, f"exit {stopped:.2f}s after the second SIGINT"
    assert not alive, f"left running: {[(k.pid, k.name()) for k in alive]}"
    assert not segs
    assert not [n for n in os.listdir(model.parent) if n.endswith(".tmp")]


def test_sigkill_of_the_parent_leaves_no_worker_and_no_shared_memory(tmp_path: Path) -> None:
    p, model, log, family, worker = _started(tmp_path)
    assert list_segments(pid=p.pid), "the run has no shared-memory segment to leak"
    try:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        t0 = time.monotonic()
        w = psutil.Process(worker)
        try:
            w.wait(timeout=30)  # workers watch their parent (generous: a loaded machine)
        except psutil.TimeoutExpired:
            pass
        worker_gone = time.monotonic() - t0
        alive, segs = _until_gone(family, p.pid, 10.0)
    finally:
        _kill_all(family)
    assert p.returncode == -signal.SIGKILL
    assert worker_gone < 30.0, "the orphaned worker kept running"
    assert not alive, f"left running: {[(k.pid, k.name()) for k in alive]}"
    assert not segs, f"segments of the killed parent left in /dev/shm: {segs}"
    assert not model.exists()


def test_fault_helpers_detect_a_leak() -> None:
    """The leak checks above can fail: a live process and a live segment are reported."""
    from demidcd.primitives.shm import SharedArena

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    proc = psutil.Process(sleeper.pid)
    arena = SharedArena()
    try:
        arena.create("x", (4,), np.float64)
        alive, segs = _until_gone([proc], os.getpid(), 0.2)
        assert [k.pid for k in alive] == [sleeper.pid] and len(segs) == 1
    finally:
        sleeper.kill()
        sleeper.wait()
        arena.close()
    assert _until_gone([proc], os.getpid(), 0.0) == ([], [])


def _janitor(pid: int) -> psutil.Process:
    """The shared-memory janitor of the run with parent ``pid`` (demidcd.primitives.shm)."""
    for k in _children(pid):
        try:
            cmd = k.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "-S" in cmd and "-c" in cmd and str(pid) in cmd and "owner, fd, shm" in " ".join(cmd):
            return k
    raise AssertionError(f"no janitor among {[k.cmdline() for k in _children(pid)]}")


def test_killing_the_janitor_prints_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    """Killing the process that cleans up after a SIGKILLed parent (formerly the multiprocess
    resource tracker: a relaunch warning and one KeyError traceback per segment) is silent,
    and the run still unlinks its segments on the way out."""
    p, model, log, family, _ = _started(tmp_path)
    try:
        jan = _janitor(p.pid)
        jan.kill()
        assert _until_gone([jan], -1, 5.0)[0] == []  # dead (a zombie until its parent exits)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        _kill_all(family)
    out = log.read_text()
    assert p.returncode == 130, out[-2000:]
    assert "Traceback" not in out and "KeyError" not in out, out[-2000:]
    assert "warn" not in out.lower() and "leak" not in out.lower(), out[-2000:]
    assert not alive and not segs


def test_parent_and_janitor_killed_then_sweep_stale_removes_the_segments(tmp_path: Path) -> None:
    """With the parent SIGKILLed the janitor unlinks the segments (the test above with the
    parent: test_sigkill_of_the_parent_...); with the janitor killed first nothing can, and the
    next run's sweep_stale (WorkerPool calls it at start) removes them."""
    from demidcd.primitives.shm import sweep_stale

    p, model, log, family, _ = _started(tmp_path)
    try:
        jan = _janitor(p.pid)
        jan.kill()
        assert _until_gone([jan], -1, 5.0)[0] == []  # dead (a zombie until its parent exits)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        alive, _ = _until_gone(family, -1, 10.0)  # processes only: any demidcd run on the
        segs = list_segments(pid=p.pid)  # machine sweeps stale segments when it starts
    finally:
        _kill_all(family)
    assert not alive, f"left running: {[(k.pid, k.name()) for k in alive]}"
    assert segs, "nothing left to sweep: the scenario did not happen"
    removed = sweep_stale()
    assert sorted(s for s in removed if f"-{p.pid}-" in s) == sorted(segs)
    assert list_segments(pid=p.pid) == []


def test_a_one_process_run_sweeps_the_segments_of_dead_runs(corpus: Path) -> None:
    """Segments left by a run whose parent and janitor were both killed (named
    ``demidcd-<dead pid>-<n>-<key>``) are swept by the next run, whatever its --threads: a
    one-process run creates no segment of its own but sweeps too."""
    from demidcd.primitives.shm import SHM_DIR

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that has exited
    assert not psutil.pid_exists(gone.pid)
    made = [Path(SHM_DIR) / f"demidcd-{gone.pid}-0-w", Path(SHM_DIR) / f"demidcd-{gone.pid}-1-ctrl"]
    for f in made:
        f.write_bytes(b"\0" * 4096)
    try:
        r = run("train", "--train", str(corpus / "train.txt"), "--threads", "1",
                "--max-epochs", "1", "--min-count", "1", "--quiet")
        assert r.returncode == 0, r.stderr
        assert [f.name for f in made if f.exists()] == []
    finally:
        for f in made:
            f.unlink(missing_ok=True)


# ==================================== SIGINT, killed and raising workers (from test_demi_dcd)
def _run(args, tmp_path):
    """``demidcd train *args`` with its output in ``tmp_path/run.log`` (read by
    :func:`_wait_for_worker`)."""
    return _start(["train", *args], tmp_path / "run.log")


def _wait_for_worker(proc, tmp_path, timeout=60):
    """The run's processes once its first worker has started. Waiting for the logged
    ``worker K pid N`` line, not for any child: the first child is the short-lived set-up
    process, and a signal sent while it runs stops the command before any model exists."""
    _wait_for(tmp_path / "run.log", proc, r"worker \d+ pid \d+", timeout)
    return _children(proc.pid)


BASE = ["--threads", "2", "--algorithm", "demi-dcd", "--learners", "1", "--time-limit", "30",
        "--tol", "1e-9"]


def test_sigint_saves_partial_model_and_leaves_nothing(tmp_path, shm_guard):
    model = tmp_path / "m.npz"
    p = _run([*BASE, "--model", str(model)], tmp_path)
    kids = _wait_for_worker(p, tmp_path)
    time.sleep(0.7)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=20)
    assert p.returncode == 130, (tmp_path / "run.log").read_text()[-2000:]
    assert model.exists()
    assert _gone(kids)
    from demidcd.io.model import load_model
    _, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == "interrupted"


def test_killed_worker_is_restarted(tmp_path, shm_guard):
    model, logf = tmp_path / "m.npz", tmp_path / "log.txt"
    with open(logf, "w") as f:
        p = spawn("train", "--threads", "2", "--algorithm", "demi-dcd", "--learners", "1",
                  "--time-limit", "3", "--tol", "1e-9", "--model", str(model), stdout=f,
                  stderr=subprocess.STDOUT)
        pid = int(_wait_for(logf, p, r"worker \d+ pid (\d+)").group(1))
        kids = _children(p.pid)
        time.sleep(0.7)
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
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "injected fault" in lines[0] and "worker 1" in lines[0]
    assert "partial model written to" in lines[0]
    assert "Traceback" not in err
    _, _, meta = load_model(tmp_path / "m.npz")
    assert meta["finished"] is False and meta["stop_reason"] == "worker-failed"




@pytest.mark.parametrize("alg", ["ms-dcd", "sp-ipm"])
def test_baselines_stop_cleanly_on_sigint(tmp_path, alg, shm_guard):
    model = tmp_path / "m.npz"
    p = _run(["--threads", "2", "--algorithm", alg, "--time-limit", "30", "--tol", "1e-9",
              "--max-epochs", "100000", "--model", str(model)], tmp_path)
    kids = _wait_for_worker(p, tmp_path)
    time.sleep(0.7)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=20)
    assert p.returncode == 130, (tmp_path / "run.log").read_text()[-2000:]
    assert model.exists() and _gone(kids)


# ============================================================ (from test_multi_dcd)
def test_cli_sigint_with_two_learners_saves_and_leaves_nothing(tmp_path, shm_guard):
    model, logf = tmp_path / "m.npz", tmp_path / "log.txt"
    with open(logf, "w") as f:
        p = spawn("train", "--threads", "2", "--algorithm", "demi-dcd", "--learners", "2",
                  "--time-limit", "30", "--tol", "1e-9", "--model", str(model), stdout=f,
                  stderr=subprocess.STDOUT)
        t0 = time.time()
        while "worker 2 pid" not in logf.read_text() and time.time() - t0 < 60:
            time.sleep(0.1)
        kids = _children(p.pid)
        assert len(kids) >= 2, logf.read_text()[-2000:]
        time.sleep(0.7)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    out = logf.read_text()
    assert p.returncode == 130, out
    assert "multi-learner: 2 learners (atomic)" in out  # the default update mode
    assert _gone(kids)
    _, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == "interrupted"


@pytest.mark.parametrize("stop", ["time-limit", "ctrl-c"])
def test_a_stopped_learner_does_not_hold_the_run(tmp_path, stop, shm_guard):
    """Issue 45, defect 13: one of two learners SIGSTOPped (a debugger, a frozen cgroup) left the
    coordinator waiting for its answer for ever: past --time-limit, and deaf to Ctrl-C. It is
    now treated as a dead learner (killed): the run ends at its time limit, or at once on
    Ctrl-C, with the model of the live learner saved, no process and no segment left."""
    limit = 3 if stop == "time-limit" else 60
    model, logf = tmp_path / "m.npz", tmp_path / "log.txt"
    p = _start(["train", "--threads", "2", "--algorithm", "demi-dcd", "--learners", "2",
                "--time-limit", str(limit), "--tol", "1e-9", "--model", str(model)], logf)
    family: list[psutil.Process] = []
    try:
        learner = int(_wait_for(logf, p, r"^worker 1 pid (\d+)").group(1))
        _wait_for(logf, p, r"^worker 2 pid")
        family = _children(p.pid)
        time.sleep(0.5)
        os.kill(learner, signal.SIGSTOP)
        t0 = time.monotonic()
        if stop == "ctrl-c":
            time.sleep(0.5)
            t0 = time.monotonic()
            p.send_signal(signal.SIGINT)
        p.wait(timeout=30)  # before: for ever (the test killed it)
        ended = time.monotonic() - t0
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        for k in _alive(family):
            k.send_signal(signal.SIGCONT)
        _kill_all(family)
        if p.poll() is None:
            p.kill()
    out = logf.read_text()
    assert p.returncode == (0 if stop == "time-limit" else 130), out[-2000:]
    assert f"learner process 1 (pid {learner}) was stopped (SIGSTOP, a debugger) while it " \
           "owed an answer: killed" in out or \
        f"learner process 1 (pid {learner}) got no CPU time" in out, out
    # issue 56, defect 10: lost at the stop, its updates stay in the model (no rebuild without)
    assert "the model keeps the last w with every learner's updates" in out, out
    seconds = float(re.search(r"^stopped: \S+ after \d+ iterations, ([\d.]+)s", out, re.M)[1])
    if stop == "time-limit":
        assert seconds < limit + 2.0, out  # the solver's clock: the limit held
    else:
        assert ended < 10.0, f"{ended:.1f} s from Ctrl-C to the exit"  # ~1 s on an idle box
    _, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == stop.replace("ctrl-c",
                                                                             "interrupted")
    assert not alive, f"left running: {[(k.pid, k.name(), k.status()) for k in alive]}"
    assert not segs


def test_ctrl_c_again_within_half_a_second_is_the_same_request(monkeypatch):
    """Issue 45, item 17: the handler's rule. Two or three Ctrl-C in a row are one request
    (before, the second raised KeyboardInterrupt wherever the run was, the saving of the
    model included); a later one still hurries the run; while a file is written
    (``holding``) signals are only counted, and reported once it is written."""
    from demidcd.solvers.common import REPEAT_SECONDS, StopRequest

    monkeypatch.setattr(StopRequest, "requested", False)
    monkeypatch.setattr(StopRequest, "active", True)
    StopRequest.handler(signal.SIGINT, None)
    StopRequest.handler(signal.SIGINT, None)  # 0 ms later: the same request
    StopRequest.handler(signal.SIGINT, None)
    assert StopRequest.requested
    monkeypatch.setattr(StopRequest, "first", time.monotonic() - REPEAT_SECONDS - 0.1)
    with pytest.raises(KeyboardInterrupt):  # later: the user insists
        StopRequest.handler(signal.SIGINT, None)
    written = []
    with pytest.raises(KeyboardInterrupt):
        with StopRequest.holding():
            for _ in range(3):
                StopRequest.handler(signal.SIGINT, None)
            written.append(True)
    assert written and StopRequest.held == -1
    with StopRequest.holding():  # no signal: nothing raised
        pass


def test_a_ctrl_c_while_saving_waits_for_the_model_and_says_so(cli, corpus, tmp_path,
                                                                monkeypatch):
    """Issue 45, item 17: Ctrl-C pressed twice while the model is written (beyond the repeat
    window) no longer interrupts the writing: the model is written, then the run ends with
    one line saying where; an interrupt the run could not absorb (here: in fit) says that
    the model was not written."""
    from demidcd.estimators.sequence import SequenceTagger
    from demidcd.solvers.common import StopRequest

    save = SequenceTagger.save

    def save_under_ctrl_c(self, path):
        for _ in range(2):
            StopRequest.first = time.monotonic() - 10.0  # the user insists
            StopRequest.handler(signal.SIGINT, None)
        save(self, path)

    monkeypatch.setattr(SequenceTagger, "save", save_under_ctrl_c)
    model = tmp_path / "m.npz"
    args = ["train", "--train", corpus / "train.txt", "--threads", "1", "--max-epochs", "2",
            "--min-count", "1", "--model", model]
    code, out, err = cli(*args)
    assert code == 130 and model.exists(), err
    assert err.strip().splitlines()[-1] == f"demidcd: interrupted; the model was written to " \
                                           f"{model} (finished: false)", err

    def fit_interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(SequenceTagger, "fit", fit_interrupted)
    model.unlink()
    code, out, err = cli(*args)
    assert code == 130 and not model.exists()
    assert err.strip().splitlines() == [f"demidcd: interrupted; {model} not written"], err


def test_three_quick_ctrl_c_keep_the_model(tmp_path, shm_guard):
    """Issue 45, item 17: three SIGINTs 20 ms apart end the run with the partial model written
    and said so, exit 130. Before, the second landed after the learner had stopped (one
    process: 3 runs of 3 with 10-50 ms between the signals) and the run ended with 'demidcd:
    interrupted' and no model. (Two learners: test_multi_dcd's mid-rebuild test.)"""
    model, logf = tmp_path / "m.npz", tmp_path / "log.txt"
    p = _start(["train", "--threads", "1", "--time-limit", "60", "--tol", "1e-9", "--model",
                str(model)], logf)
    family: list[psutil.Process] = []
    try:
        _wait_for(logf, p, r"^iter +1 ")
        family = _children(p.pid)
        time.sleep(0.5)
        for _ in range(3):
            p.send_signal(signal.SIGINT)
            time.sleep(0.02)
        p.wait(timeout=30)
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        _kill_all(family)
        if p.poll() is None:
            p.kill()
    out = logf.read_text()
    assert p.returncode == 130, out[-2000:]
    assert "Traceback" not in out
    assert f"model written to {model} (partial: interrupted)" in out, out[-2000:]
    _, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == "interrupted"
    assert not alive and not segs


# ======================================== Ctrl-C at start-up, restart limit (test_user_polish)
def test_a_worker_past_the_restart_limit_leaves_the_partial_model(tmp_path, shm_guard,
                                                                  monkeypatch):
    """In the library too: fit raises the WorkerError, the estimator keeps the partial model,
    and save() marks it unfinished."""
    from faults import inject_worker_faults

    from demidcd.api import SequenceTagger
    from demidcd.errors import WorkerError
    from demidcd.synthetic import generate

    c = generate(n_sentences=150, n_tags=5, vocab_size=300, seed=3)
    inject_worker_faults(2, monkeypatch)  # in each forked worker, its second inference raises
    est = SequenceTagger(threads=2, algorithm="demi-dcd", min_count=1, tol=1e-9, time_limit=30)
    with pytest.raises(WorkerError, match="gave up after"):
        est.fit(c.tokens, c.tags)
    assert est.result_.finished is False and est.result_.stop_reason == "worker-failed"
    assert est.coef_.shape[0] == est.training_task(c.tokens, c.tags).dim
    est.save(tmp_path / "partial.npz")
    _, _, meta = load_model(tmp_path / "partial.npz")
    assert meta["finished"] is False and meta["stop_reason"] == "worker-failed"


@pytest.mark.parametrize("delay", [1.5, 4.0])
def test_ctrl_c_while_numba_compiles_exits_130(tmp_path, delay):
    """A cold numba cache (a fresh install): Ctrl-C while the kernels compile exits 130 with
    one line. Before, the KeyboardInterrupt unwound through LLVM: SIGSEGV, "double free
    detected", or "Exception ignored ... Traceback"."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cold")}
    p = subprocess.Popen([*CLI, "train", "--threads", "1",
                          "--max-epochs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    if p.returncode == 0:
        pytest.skip("the run ended before the signal")
    assert p.returncode == 130, (p.returncode, err)
    assert err.strip().splitlines() == ["demidcd: interrupted"], err


@pytest.mark.parametrize("delay", [0.15, 0.3, 0.6])
def test_early_ctrl_c_exits_130_without_traceback(tmp_path, delay):
    """While modules load (numpy, numba: the first second) Ctrl-C exits 130 with at most one
    line. ``python -m demidcd`` is the console script's entry (:mod:`demidcd.__main__`). A
    signal during the interpreter's own start-up (its site or runpy import, before any demidcd
    code runs) is Python's to report, and is skipped."""
    p = subprocess.Popen([*CLI, "train", "--threads", "1",
                          "--max-epochs", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    if p.returncode == 0:
        pytest.skip("the run ended before the signal")
    if "init_import_site" in err or "Could not import runpy" in err:
        pytest.skip("the signal landed in Python's own start-up")
    assert "Traceback" not in err, err
    assert p.returncode in (130, -signal.SIGINT), (p.returncode, err)  # -2: before Python ran
    assert len(err.strip().splitlines()) <= 1


def test_ctrl_c_during_the_final_dev_scoring_stops_at_once(corpus, tmp_path, monkeypatch):
    """Issue 56, defect 17: a Ctrl-C while train scored --dev after writing the model only set
    the training's stop flag, which nothing polled any more: the scoring went on (11.8 s) and
    the command exited 0. It now ends the command at once with 130, the model kept."""
    import threading

    import demidcd.cli as cli
    from demidcd.solvers.common import StopRequest

    monkeypatch.setattr(StopRequest, "requested", False)  # this process's flags come back
    monkeypatch.setattr(StopRequest, "active", False)
    release, calls = threading.Event(), []

    def slow_report(spec, est, data, name, quiet=False):  # a long scoring, Ctrl-C meanwhile
        calls.append(name)
        os.kill(os.getpid(), signal.SIGINT)
        release.wait(30)

    monkeypatch.setattr(cli, "_report", slow_report)
    model = tmp_path / "m.npz"
    try:
        code = cli.main(["train", "--train", str(corpus / "train.txt"), "--dev",
                         str(corpus / "dev.txt"), "--test", str(corpus / "test.txt"),
                         "--threads", "1", "--max-epochs", "2", "--model", str(model)])
    finally:
        release.set()
    assert code == 130 and calls == ["dev "]  # before: 0, after scoring dev and test
    assert model.exists()


# end to end (processes, signals, Ray, benchmarks): deselected by default, CI's second step
# (python -m pytest -q -m slow)
pytestmark = pytest.mark.slow
