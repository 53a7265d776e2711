"""The entity-relation ILP (:mod:`.ilp`) solved by the CBC binary bundled with PuLP.

CBC runs as a subprocess that we start and watch ourselves (not PuLP's solve()):

* its own session (start_new_session): a Ctrl-C in the terminal reaches our process group
  only, never CBC; the learner decides what a signal means;
* PR_SET_PDEATHSIG = SIGKILL (Linux): CBC dies with the thread that started it, so a killed
  worker never leaves a CBC behind; the thread that starts CBC waits for it, so "thread"
  and "process" coincide here. Set by ``setpriv --pdeathsig KILL`` exec'ing CBC (keeps
  Python's vfork: see _pdeathsig_prefix) or else by a ctypes prctl in a preexec_fn, which
  also exits if the parent already died; through setpriv a parent dying in the
  microseconds between the spawn and setpriv's prctl leaves CBC to finish on its own;
* polled every ≤ 20 ms: once ``should_stop()`` is true CBC is killed and
  InferenceInterrupted raised;
* the model is written as MPS text from a per-size template (only the objective changes
  between sentences) into one private temporary directory per process,
  ``<tmp>/demidcd-cbc-<pid>-*``; a solve's files are removed in ``finally``, the directory
  at exit (atexit), and directories of dead processes (workers, whose os._exit skips
  atexit, and killed processes) when the process that chose the solver (:func:`cbc_solver`,
  in the workers' parent) exits, by the next process that starts a CBC solve, and at every
  command's start (:func:`demidcd.io.stale.sweep_cbc_dirs`: a SIGKILLed run runs no atexit).
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from demidcd.errors import OptionError
from demidcd.io.stale import CBC_DIR, sweep_dead
from demidcd.tasks.entity_relation.ilp import (
    N_REL_LABELS,
    RELATION_ARGS,
    ILPResult,
    StopCheck,
    from_entities,
    ordered_pairs,
    score_arrays,
    solve_bounded,
)

_TMP_PREFIX = "demidcd-cbc-"
_tmp_state: tuple[int, str] | None = None  # (pid, directory) of this process
_tmp_counter = itertools.count()
_MPS_CACHE: dict[int, tuple[str, str]] = {}
_prctl_fn: Any = None
PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.02


def _wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    """``proc.wait(timeout)`` that returns the moment the process exits: poll(2) on a pidfd.
    ``Popen.wait(timeout)`` sleeps in doubling steps (0.5, 1, 2, … ms), which left a core idle
    for a large part of each short CBC solve (figures: benchmarks/README.md, "Evidence behind
    the defaults and design choices"). Falls back to ``Popen.wait`` where pidfds are missing."""
    import select

    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(timeout * 1000.0):
            raise subprocess.TimeoutExpired(proc.args, timeout)
        return proc.wait()
    finally:
        os.close(fd)


def _cbc_path() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import pulp

        path = pulp.PULP_CBC_CMD().path
    if not path or not os.path.exists(path):
        raise OptionError("--ilp-solver cbc needs PuLP's bundled CBC binary (pip install pulp)")
    return path


_CBC: list[str] = []


def _cbc() -> str:
    if not _CBC:
        _CBC.append(_cbc_path())
    return _CBC[0]


def _sweep_stale_dirs(tmp: str) -> list[str]:
    """Remove ``demidcd-cbc-<pid>-*`` directories whose process is gone (or whose pid now
    belongs to a process started after the directory was made). Returns the paths removed."""
    return sweep_dead(tmp, CBC_DIR)


def _remove_dir(pid: int, path: str) -> None:
    if os.getpid() == pid:  # an inherited atexit handler in a forked child does nothing
        shutil.rmtree(path, ignore_errors=True)


_SWEEP_REGISTERED: list[int] = []


def _sweep_at_exit() -> None:
    """At this process's exit, remove the CBC directories of dead processes: its workers leave
    theirs (they end with os._exit, which skips atexit) and are gone by then."""
    if os.getpid() in _SWEEP_REGISTERED:
        return
    _SWEEP_REGISTERED.append(os.getpid())
    pid = os.getpid()

    def sweep() -> None:
        if os.getpid() == pid:  # never in a forked child that inherited the handler
            _sweep_stale_dirs(tempfile.gettempdir())

    atexit.register(sweep)


def _private_dir() -> str:
    """This process's temporary directory for CBC files (made on first use)."""
    global _tmp_state
    pid = os.getpid()
    if _tmp_state is None or _tmp_state[0] != pid or not os.path.isdir(_tmp_state[1]):
        tmp = tempfile.gettempdir()
        _sweep_stale_dirs(tmp)
        path = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{pid}-", dir=tmp)
        _tmp_state = (pid, path)
        atexit.register(_remove_dir, pid, path)
    return _tmp_state[1]


_SETPRIV: list[list[str]] = []


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` when util-linux's setpriv can (≥ 2.33), else [].

    Popen with a preexec_fn must fork, several times slower than the vfork Python uses
    without one for a process as large as a worker, and slower than a typical CBC solve; so
    the prctl goes through setpriv's exec when it can and through preexec_fn otherwise
    (figures: benchmarks/README.md, "Evidence behind the defaults and design choices").
    """
    if not _SETPRIV:
        path = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        ok = False
        if path:
            try:
                out = subprocess.run([path, "--help"], capture_output=True, text=True,
                                     timeout=10)
                ok = "--pdeathsig" in out.stdout
            except (OSError, subprocess.SubprocessError):
                ok = False
        _SETPRIV.append([path, "--pdeathsig", "KILL", "--"] if ok else [])
    return _SETPRIV[0]


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when its parent dies (Linux prctl)."""
    global _prctl_fn
    if not sys.platform.startswith("linux"):
        return None
    if _prctl_fn is None:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.prctl
        fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                       ctypes.c_ulong]
        fn.restype = ctypes.c_int
        _prctl_fn = fn
    prctl, parent = _prctl_fn, os.getpid()

    def preexec() -> None:  # runs in the child between fork and exec: no allocation-heavy work
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def _mps_template(n: int) -> tuple[str, str]:
    """(COLUMNS body with one ``{}`` per column for its objective coefficient, the rest of the
    file) for n entities; the model is ``min −score`` over binary x, z (module docstring)."""
    got = _MPS_CACHE.get(n)
    if got is not None:
        return got
    pairs = ordered_pairs(n)
    m = len(pairs)
    ncol = 4 * n + 6 * m
    entries: list[list[str]] = [[] for _ in range(ncol)]
    rows = ["NAME ER", "ROWS", " N OBJ"]
    rhs = []
    for a in range(n):  # Σ_e x_{a,e} = 1
        rows.append(f" E X{a}")
        rhs.append(f"    RHS X{a} 1")
        for e in range(4):
            entries[4 * a + e].append(f" X{a} 1")
    zoff = 4 * n
    q = 0
    for k, (a, b) in enumerate(pairs):
        rows.append(f" E Z{k}")  # Σ_r z_{k,r} = 1
        rhs.append(f"    RHS Z{k} 1")
        for r in range(N_REL_LABELS):
            entries[zoff + 6 * k + r].append(f" Z{k} 1")
        for r in range(1, N_REL_LABELS):  # z_{k,r} − x_{arg,type} ≤ 0
            for arg in (4 * a + int(RELATION_ARGS[r, 0]), 4 * b + int(RELATION_ARGS[r, 1])):
                rows.append(f" L L{q}")
                entries[zoff + 6 * k + r].append(f" L{q} 1")
                entries[arg].append(f" L{q} -1")
                q += 1
    body = ["    M1 'MARKER' 'INTORG'"]
    for j in range(ncol):
        # one line per entry ({{}} survives as the objective's placeholder)
        body.append(f"    C{j} OBJ {{}}")
        body.extend(f"    C{j}{x}" for x in entries[j])
    body.append("    M2 'MARKER' 'INTEND'")
    head = "\n".join(rows) + "\nCOLUMNS\n" + "\n".join(body) + "\n"
    tail = ("RHS\n" + "\n".join(rhs) + "\nBOUNDS\n"
            + "\n".join(f" UP BND C{j} 1" for j in range(ncol)) + "\nENDATA\n")
    got = (head, tail)
    _MPS_CACHE[n] = got
    return got


def write_mps(path: str, U: np.ndarray, P: np.ndarray) -> None:
    """Write the ILP for scores U, P (minimising −score) as an MPS file."""
    head, tail = _mps_template(U.shape[0])
    cost = np.concatenate([U.ravel(), P.ravel()])
    with open(path, "w") as f:
        f.write(head.format(*(-cost).tolist()))
        f.write(tail)


def _read_cbc_solution(path: str, n: int) -> tuple[str, np.ndarray | None]:
    """(CBC's status line, entity labels or None) from a ``-solution`` file."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return "", None
    if not lines:
        return "", None
    status = lines[0].strip()
    x = np.zeros((n, 4))
    for line in lines[1:]:
        tok = line.split()
        if tok and tok[0] == "**":
            tok = tok[1:]
        if len(tok) >= 3 and tok[1].startswith("C"):
            j = int(tok[1][1:])
            if j < 4 * n:
                x[j // 4, j % 4] = float(tok[2])
    if "no integer solution" in status or status.startswith(("Infeasible", "Integer infeas")):
        return status, None
    return status, np.argmax(x, axis=1).astype(np.int64)


def solve_cbc(U: np.ndarray, P: np.ndarray, *, time_limit: float | None = None,
              should_stop: StopCheck | None = None) -> ILPResult:
    """The 0-1 ILP with the CBC binary bundled with PuLP, run in a watched subprocess.

    Exact (``-ratio 0``) unless ``time_limit`` (seconds of CBC's CPU time, so that a busy
    machine does not cap small instances; the wall clock is bounded by the kill at
    1.5·cap + 1 s) stops the search first:
    then CBC's best feasible structure is returned with ``proven=False``. Without a feasible
    one (or if CBC overruns the cap by more than half of it plus a second and is killed):
    :func:`solve_bounded`, i.e. the branch-and-bound optimum (proven) when it takes at most
    :data:`FALLBACK_NODES` nodes (~0.1 s), else its best structure (not proven).
    ``should_stop`` is polled every 20 ms: when true, CBC is killed and
    :class:`InferenceInterrupted` raised.
    """
    from demidcd.tasks.base import InferenceInterrupted

    U, P = score_arrays(U, P)
    n = U.shape[0]
    if n == 0:
        return ILPResult(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, True)
    stop = should_stop or (lambda: False)
    d = _private_dir()
    k = next(_tmp_counter)
    mps, sol = os.path.join(d, f"{k}.mps"), os.path.join(d, f"{k}.sol")
    wrap = _pdeathsig_prefix()
    cmd = [*wrap, _cbc(), mps, "-ratio", "0", "-timeMode", "cpu"]
    if time_limit is not None:
        cmd += ["-sec", repr(float(time_limit))]
    cmd += ["-solve", "-printingOptions", "all", "-solution", sol]
    hard = None if time_limit is None else 1.5 * float(time_limit) + 1.0
    try:
        write_mps(mps, U, P)
        if stop():
            raise InferenceInterrupted("stop requested before CBC started")
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True,
                                preexec_fn=None if wrap else _die_with_parent())
        try:
            while True:
                try:
                    rc = _wait_exit(proc, POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    if stop():
                        raise InferenceInterrupted("stop requested while CBC ran") from None
                    if hard is not None and time.monotonic() - t0 > hard:
                        rc = None
                        break
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
        if rc is None:  # overran its own cap
            return solve_bounded(U, P)
        status, ent = _read_cbc_solution(sol, n)
        if status.startswith("Optimal") and ent is not None:
            return from_entities(U, P, ent, True)
        if time_limit is not None:  # "Stopped on time", or (seen once when the cap struck
            # during preprocessing) "Integer infeasible": the ILP is always feasible, so any
            # other status under a cap means the cap stopped CBC
            if ent is None:  # no feasible structure within the cap
                return solve_bounded(U, P)
            return from_entities(U, P, ent, False)
        raise RuntimeError(f"CBC did not solve the entity-relation ILP (exit {rc}): "
                           f"{status or 'no solution file'}")
    finally:
        for f in (mps, sol):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass


def cbc_solver() -> Callable[..., ILPResult]:
    """:func:`solve_cbc`, after checking that the CBC binary is there (OptionError if not) and
    arranging that this process's exit sweeps the CBC directories its workers leave."""
    _cbc()
    _sweep_at_exit()
    return solve_cbc
