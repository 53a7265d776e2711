"""What the machine allows a run to start (issue 45, defects 14, 16 and 17): a small /dev/shm,
a worker that outlives its killed parent and the model lock it kept, a limit on processes, and
a model and its saved state written apart by an interrupted run.

Each failure must end in one line and exit 2 (or succeed), with no process and no
shared-memory segment left.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_run import CLI, run
from test_stop_cleanup import DEMI, _children, _kill_all, _until_gone, _wait_for

from demidcd.io.model import ModelLock
from demidcd.primitives.shm import SharedArena, list_segments


def _start_logged(argv: list[str], log: Path) -> subprocess.Popen:
    """``argv`` started with stdout and stderr to ``log``."""
    with open(log, "w") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)


def _stop_worker_then_kill(p: subprocess.Popen, log: Path
                           ) -> tuple[list[psutil.Process], int, int]:
    """Once training runs (``iter 2``): SIGSTOP worker 1, then SIGKILL ``p`` and reap it;
    (p's descendants as they were before, the worker's pid, the pid of p's first child)."""
    worker = int(_wait_for(log, p, r"^worker 1 pid (\d+)").group(1))
    _wait_for(log, p, r"^iter +2 ")
    family = _children(p.pid)
    child = next(k.pid for k in family if k.ppid() == p.pid)
    os.kill(worker, signal.SIGSTOP)
    p.kill()
    p.wait(timeout=10)
    return family, worker, child


# ============================== defect 16: orphaned workers and the model lock they kept
def test_a_stopped_worker_dies_with_its_killed_parent_and_frees_the_model(tmp_path: Path) -> None:
    """The worker is stopped (SIGSTOP), so it cannot notice that its parent is gone; the
    parent is SIGKILLed. The worker must die anyway, its segments must go, and the next
    training of the same model must not be refused by the lock. The run is started in this
    test's process group (as by a script, not as a job of an interactive shell, whose group
    the kernel would send SIGHUP once orphaned with a stopped member)."""
    model, log = tmp_path / "m.npz", tmp_path / "log.txt"
    p = _start_logged([*CLI, *DEMI, "--model", str(model)], log)
    family: list[psutil.Process] = []
    try:
        family, worker, _ = _stop_worker_then_kill(p, log)
        assert worker in {k.pid for k in family}
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        p.kill()
        _kill_all(family)
    assert not alive, f"left running: {[(k.pid, k.status()) for k in alive]}"
    assert not segs, f"segments of the killed parent left in /dev/shm: {segs}"
    r = run("train", "--threads", "1", "--max-epochs", "2", "--model", str(model), "--quiet")
    assert r.returncode == 0, r.stderr
    assert model.exists()


@pytest.mark.parametrize("keep", [False, True], ids=["stops", "nohup"])
def test_a_run_whose_launcher_is_killed_stops_and_frees_the_model(tmp_path: Path,
                                                                   keep: bool) -> None:
    """The process that started the run (``timeout``, a job runner) is SIGKILLed while a
    worker is stopped: the run stops as on SIGTERM, saves its model (marked partial), leaves
    no process and no segment, and the next training of the model is not refused; started
    under nohup (SIGHUP ignored) it goes on. Before, it went on detached for its whole time
    limit, holding the model's lock."""
    model, log = tmp_path / "m.npz", tmp_path / "log.txt"
    cmd = " ".join([*(["nohup"] if keep else []), *CLI, *DEMI, "--model", str(model)])
    launcher = _start_logged(["sh", "-c", f"{cmd}; exit 0"], log)
    family: list[psutil.Process] = []
    try:
        family, worker, run_pid = _stop_worker_then_kill(launcher, log)
        if keep:
            time.sleep(2.0)
            assert psutil.pid_exists(run_pid), "a nohup run stopped with its launcher"
            os.kill(worker, signal.SIGCONT)
            return
        alive, segs = _until_gone(family, run_pid, 30.0)
    finally:
        _kill_all(family)
    assert not alive, f"left running: {[(k.pid, k.status()) for k in alive]}"
    assert not segs, f"segments left in /dev/shm: {segs}"
    assert "model written" in log.read_text() and model.exists()
    r = run("train", "--threads", "1", "--max-epochs", "2", "--model", str(model), "--quiet")
    assert r.returncode == 0, r.stderr


def test_a_forked_child_does_not_keep_the_model_lock(tmp_path: Path) -> None:
    """A lock whose owner died is free, even while a child the owner forked still runs."""
    model = tmp_path / "m.npz"
    r, w = os.pipe()
    owner = os.fork()
    if owner == 0:  # takes the lock, forks a child that sleeps, dies without releasing
        try:
            ModelLock(model).acquire()
            child = os.fork()
            if child == 0:
                time.sleep(10)
                os._exit(0)
            os.write(w, f"{child}\n".encode())
        finally:
            os._exit(0)
    os.close(w)
    child = int(os.read(r, 64) or 0)
    os.close(r)
    os.waitpid(owner, 0)
    try:
        assert child and psutil.pid_exists(child)
        ModelLock(model).acquire().release()  # refused while the child kept the lock
    finally:
        if child:
            os.kill(child, signal.SIGKILL)


# ============================== defect 17: a limit on processes
def test_a_refused_fork_is_one_line_and_leaves_nothing(cli, corpus: Path, tmp_path: Path,
                                                       monkeypatch, shm_guard) -> None:
    """The system refuses the third fork (EAGAIN, as under ``ulimit -u``): one line naming
    what fits, exit 2, no model, no process and no segment left."""
    import multiprocess

    real_fork, forks = os.fork, []

    def fork() -> int:
        forks.append(1)
        if len(forks) == 3:
            raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return real_fork()

    monkeypatch.setattr(os, "fork", fork)
    model = tmp_path / "m.npz"
    code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "4",
                         "--learners", "1", "--max-epochs", "3", "--model", model)
    assert code == 2, err
    lines = [x for x in err.splitlines() if not x.startswith("demidcd: warning:")]
    assert len(lines) == 1 and lines[0].startswith("demidcd: error:"), err
    assert "cannot start 4 processes" in err and "ulimit -u" in err, err
    assert "try --threads 3 or fewer" in err, err
    assert not model.exists() and not list(tmp_path.iterdir())
    t0 = time.monotonic()
    while multiprocess.active_children() and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not multiprocess.active_children()


def test_an_arena_is_made_when_no_janitor_can_start() -> None:
    """Starting the janitor is refused (EAGAIN): the arena is still made, and unlinked on
    close (in a forked child, whose janitor is its own)."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            import subprocess as sp

            def refused(*args, **kw):
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))

            sp.Popen = refused
            arena = SharedArena()
            arena.create("x", (4,), np.float64)[:] = 1.0
            names = arena.names()
            arena.close()
            code = 0 if names and not list_segments(pid=os.getpid()) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ============================== defect 14: a small /dev/shm
def _small_shm(*argv: str, size: str = "1m", cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    """``argv`` in a mount namespace of its own whose /dev/shm is a tmpfs of ``size`` (as a
    container's: Docker's default is 64m); skips where this process may not make one."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    mount = f"mount -t tmpfs -o size={size} tmpfs /dev/shm"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", mount],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot mount a tmpfs in a new mount namespace (not root?)")
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           f'{mount} && exec "$@"', "sh", *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_training_with_a_small_dev_shm_says_so_in_one_line(corpus: Path, tmp_path: Path) -> None:
    """Two processes on a 256 KiB /dev/shm, less than w̄ alone: one line naming shared
    memory, what the run needs and how to get it, exit 2, no model (it died of SIGBUS with
    nothing on stderr)."""
    model = tmp_path / "m.npz"
    r = _small_shm(*CLI, "train", "--train", str(corpus / "train.txt"), "--threads", "2",
                   "--learners", "1", "--max-epochs", "3", "--model", str(model), "--quiet",
                   size="256k")
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "shared memory" in lines[0] and "/dev/shm" in lines[0], lines[0]
    assert "--shm-size" in lines[0] and "--threads 1" in lines[0], lines[0]
    assert not model.exists() and not list(tmp_path.iterdir())


def test_a_segment_the_dev_shm_cannot_back_fails_at_creation(tmp_path: Path) -> None:
    """Past the check (the tmpfs filled meanwhile), a segment larger than the space left
    fails when it is created, not with SIGBUS at its first write; nothing is left."""
    code = (
        "import numpy as np\n"
        "from demidcd.primitives.shm import SharedArena, SharedMemoryFull, list_segments\n"
        "arena = SharedArena()\n"
        "try:\n"
        "    arena.create('w', (1 << 20,), np.float64)[:] = 1.0\n"  # 8 MiB
        "except SharedMemoryFull as e:\n"
        "    print(e)\n"
        "arena.close()\n"
        "print(list_segments())\n")
    r = _small_shm(sys.executable, "-c", code, cwd=tmp_path)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    out = r.stdout.splitlines()
    assert out[0].startswith("shared memory: cannot back a segment of 8.0 MiB"), r.stdout
    assert out[1] == "[]"


# ============================== defect 17: a model and a state written apart
def test_resume_refuses_a_state_that_is_not_the_models(cli, corpus: Path, tmp_path: Path) -> None:
    """A run stopped between writing its model and its state leaves the new model beside the
    old state: a resume must refuse the pair in one line (it restarted from the old state
    without a word); a pair written together resumes."""
    model, state = tmp_path / "m.npz", tmp_path / "m.state.npz"
    train = ["train", "--train", corpus / "train.txt", "--threads", "1", "--quiet",
             "--save-state", "--model", model]
    assert cli(*train, "--max-epochs", "2")[0] == 0
    first = state.read_bytes()
    code, _, err = cli(*train, "--max-epochs", "4", "--resume", model)
    assert code == 0, err  # the pair of the first run resumes
    state.write_bytes(first)  # the second run "stopped" after its model, before its state
    code, out, err = cli(*train, "--max-epochs", "6", "--resume", model)
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and "is not the state of this model" in err, err


# end to end (processes, signals, Ray, benchmarks): deselected by default, CI's second step
# (python -m pytest -q -m slow)
pytestmark = pytest.mark.slow
