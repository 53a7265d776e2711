"""The process supervisor the worker pool (:mod:`.engine`) and the learner group (:mod:`.multi`)
share: fork a group of processes behind a start gate under a running clock, tell why one died
and restart it or give up, and stop them all at once."""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Callable

from ..errors import DemidcdError, WorkerError
from ..primitives.monitor import timed_step
from ..primitives.pages import release_library_pages

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (None off Linux), looked up once in the parent, before any fork."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


prctl = _prctl()  # libc's prctl, for forked children and the CLI's own process


def die_with_parent(parent: int) -> None:
    """In a forked child: have the kernel SIGKILL this process when its parent dies (Linux's
    ``PR_SET_PDEATHSIG``; a stopped child is killed too), then leave at once if the parent
    died before that took effect. Polling ``getppid`` alone left a worker that was stopped
    (SIGSTOP) when its parent was SIGKILLed running for ever, holding its shared memory."""
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> tuple[float, str]:
    """(CPU seconds ``pid`` used, its state letter: ``T`` stopped, ``t`` traced, ...) from
    ``/proc/<pid>/stat``; (nan, "") where it cannot be read (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return (int(fields[11]) + int(fields[12])) / _TICK, fields[0].decode()
    except (OSError, IndexError, ValueError):
        return float("nan"), ""


def fork_refused(e: OSError, wanted: int, started: int, noun: str, j: int,
                 threads: int) -> DemidcdError:
    """The one-line error for a fork the system refused (``e``: EAGAIN, a limit on processes,
    or ENOMEM) while starting ``wanted`` processes of which ``started`` run (this one
    included), at ``noun`` ``j`` (1-based); ``threads``: the --threads that fits."""
    why = e.strerror or str(e)
    if e.errno == errno.EAGAIN:
        why += ": a limit on processes was reached, ulimit -u or a container's pids limit"
    return DemidcdError(f"cannot start {wanted} processes: the system refused to start "
                        f"{noun} {j} with {started} running ({why}); try --threads "
                        f"{max(threads, 1)}{' or fewer' if threads > 1 else ''}")


def end_processes(procs: list, timeout: float, hurry: list[bool]) -> None:
    """Wait up to ``timeout`` s for the processes (told to stop) to exit by themselves, then
    SIGTERM every one left at once and wait up to 0.5 s, then SIGKILL the rest; ``hurry[0]``
    (a second Ctrl-C) skips to SIGKILL. All at once, not one by one: joining late workers one
    after another adds a timeout per worker to the close."""
    live = [p for p in procs if p is not None]
    for p in live:  # a stopped process (SIGSTOP) cannot exit by itself: only SIGKILL ends it
        if p.pid is not None and cpu_seconds(p.pid)[1] in ("T", "t"):
            p.kill()
    for signal_them, wait in ((None, timeout), ("terminate", 0.5), ("kill", 1.0)):
        if signal_them is not None:
            if signal_them == "terminate" and hurry[0]:
                continue
            for p in live:
                getattr(p, signal_them)()
        deadline = time.perf_counter() + wait
        while True:
            live = [p for p in live if p.is_alive()]  # is_alive reaps the exited
            if not live or time.perf_counter() >= deadline or \
                    (signal_them is None and hurry[0]):
                break
            time.sleep(0.01)
        if not live:
            return


class StartGate:
    """Holds forked processes until :meth:`open`: a pipe whose write end only the parent keeps
    (each child closes its inherited copy first), so a child's :meth:`wait` blocks in ``read``
    without using CPU and returns at end-of-file: when the parent opens the gate, or dies. A
    process forked after :meth:`open` passes at once."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def wait(self) -> None:
        """In a forked child: block until the gate opens (or the parent is gone)."""
        if self.w is None:
            return
        os.close(self.w)  # this child's copy: the parent's alone keeps the pipe open
        try:
            while True:
                try:
                    if not os.read(self.r, 1):
                        break
                except InterruptedError:
                    continue
        finally:
            os.close(self.r)

    def open(self) -> None:
        """In the parent: let every waiting child go (idempotent)."""
        if self.w is not None:
            os.close(self.w)
            os.close(self.r)
            self.r = self.w = None


class ProcessGroup:
    """Mixin: a group of forked processes ``procs`` (None where none runs) watched by the
    parent. The subclass provides ``procs``, ``stats`` (its ``error_column`` set by a process
    that raised), ``err`` (the traceback bytes), ``restarts``, ``max_restarts``, ``debug``,
    ``log``, ``monitor``, ``arena``, ``_ctx`` (a fork context) and ``_spawn(j)``; ``noun``
    names a process in the log."""

    noun = "worker"
    error_column = 0
    caller_threads = 1  # how many of --threads the forking process is (the learner: 1)

    def _fork_all(self, n: int, expired: Callable[[], bool] | None,
                  spawn: Callable[[int], None], on_expired: Callable[[], None]) -> None:
        """Fork ``n`` processes behind a :class:`StartGate` and then let them all go; once
        ``expired()`` (the clock, already running) no more are forked and ``on_expired`` tells
        the forked ones to stop."""
        self.spawn_began = time.perf_counter()
        release_library_pages()  # the kernels are loaded: the compiler's pages are not needed
        self._gate = StartGate()
        try:
            with timed_step(self.log, f"spawning {n} {self.noun}s"):
                for j in range(n):
                    if expired is not None and expired():
                        on_expired()
                        self.log(f"the time limit ran out while spawning {self.noun}s: {j} "
                                 f"of {n} started, told to stop")
                        break
                    try:
                        spawn(j)
                    except OSError as e:  # the fork itself: nothing else in spawn raises it
                        raise fork_refused(e, n + 1, j + 1, self.noun, j + 1,
                                           j + self.caller_threads) from None
        finally:
            self._gate.open()
            self.spawn_seconds = time.perf_counter() - self.spawn_began
        self.monitor.start()

    def _start(self, j: int, target: Callable[[int], None], what: str) -> None:
        """Fork process j (a daemon running ``target(j)``), keep it in ``procs``, let the
        monitor watch it and log its pid with ``what`` it does."""
        parent = os.getpid()

        def main(j: int) -> None:
            die_with_parent(parent)
            target(j)

        p = self._ctx.Process(target=main, args=(j,), daemon=True,
                              name=f"demidcd-{self.noun}-{j + 1}")
        p.start()
        self.procs[j] = p
        self.monitor.add(f"{self.noun} {j + 1}", p.pid, fresh=True)
        self.log(f"worker {j + 1} pid {p.pid} ({what})")

    def _failure(self, j: int, why: str | None = None) -> str:
        """Why process j (no longer alive) ended, in a few words (``why``: the supervisor
        killed it, for that reason), with its traceback under ``--debug``; raises
        :class:`WorkerError` once it ended more often than restarts allow."""
        p = self.procs[j]
        code = p.exitcode
        detail = bytes(self.err[j]).rstrip(b"\0").decode(errors="replace")
        if why is not None:
            what = why
        elif self.stats[j, self.error_column]:
            last = detail.strip().splitlines()[-1] if detail.strip() else "unknown error"
            what = f"raised {last}"
        else:
            what = f"died ({'signal ' + str(-code) if code and code < 0 else f'exit {code}'})"
        if self.debug and detail:
            self.log(f"{self.noun} {j + 1} traceback:\n{detail}")
        if self.restarts[j] >= self.max_restarts:
            raise WorkerError(f"{self.noun} {j + 1} (pid {p.pid}) {what}; gave up after "
                              f"{self.restarts[j]} restarts", detail)
        return what

    def _stop_all(self, timeout: float, tell_stop: Callable[[], None],
                  release: Callable[[], None] | None = None) -> None:
        """Stop every process (``tell_stop`` sets the stop flags; then join, terminate, kill:
        :func:`end_processes`; a Ctrl-C meanwhile hurries it) after the monitor's last memory
        reading, and unlink the shared memory. ``release`` (idempotent) gives the cores back
        first and again at the end. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        hurry = [False]
        old = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, lambda *_: hurry.__setitem__(0, True))
        except ValueError:  # not the main thread
            old = None
        try:
            if release is not None:
                release()
            with timed_step(self.log, "reading the memory of the processes (PSS)"):
                self.monitor.stop()  # its last memory reading while the processes still run
            tell_stop()
            with timed_step(self.log, f"stopping {len(self.procs)} {self.noun}s"):
                end_processes(self.procs, timeout, hurry)
        finally:
            self.arena.close()
            if release is not None:
                release()
            if old is not None:
                signal.signal(signal.SIGINT, old)
