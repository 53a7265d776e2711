"""K learner processes over one shared float64 w: process management, commands, supervision.

Used by :class:`~.coordinator.Coordinator` (several learners, PASSCoDe-style; the algorithm
is :mod:`demidcd.solvers.multi_dcd`). The caller (the *coordinator*) owns every shared-memory
segment in one :class:`~.shm.SharedArena` and forks K processes (``multiprocess`` "fork"
context, as :mod:`.engine` does: the bound task and its compiled kernels are inherited,
nothing is pickled). Each runs ``body(group, k)`` on its part
``parts[k]`` of the examples and writes nothing shared but w (the learners' own business: plain
or atomic adds) and its own row of ``stats``/``fstats``.

Commands (one writer, the coordinator): it stores the command code in ``ctrl[CMD]``, then the
new generation in ``ctrl[GEN]`` (release, :func:`~.seqlock.store_word`); a learner polls
``GEN`` between blocks of work (:meth:`LearnerGroup.poll_command`, acquire), runs the command
and acknowledges by storing the generation in its row's ``ACK`` (release, after its results).
The coordinator waits for every live learner's acknowledgement before it reads their results or
issues the next command, so a learner never sees two commands at once. ``PAUSE`` leaves the
learners waiting for the next command; ``RESUME`` lets them go on; the schedule defines the
rest. ``ctrl[URGENT]`` asks a learner to abandon an expensive inference at once (the task's
``should_stop``); ``ctrl[STOP]`` makes every learner exit.

Supervision (:meth:`LearnerGroup.dead`): a learner that died (signal or exception, reported with
its traceback under ``--debug``) is found by the coordinator, which decides what its loss means
(the schedule rebuilds w from the live learners) and restarts it on the same part with
:meth:`LearnerGroup.respawn` (paused: it waits for the next command); after ``max_restarts``
restarts of one learner training stops with a one-line error. A learner that stopped running
(SIGSTOP, a debugger, a frozen cgroup) is a dead one: every wait for an answer has a deadline
(:meth:`LearnerGroup.command`), and a learner that owes one and gets no CPU time for
:data:`STALL_SECONDS` is killed (SIGKILL ends a stopped process too) and reported; once the run
must stop (the time limit or Ctrl-C), so is a stopped one at once, one without CPU time for
``STOP_GRACE[0]`` s and one that has not answered ``STOP_GRACE[1]`` s after the stop (a
learner that only waits for a core gets that grace). A learner lost once the run is stopping is
not restarted; its α is then missing from a rebuild, so the coordinator keeps the w from before
that rebuild (:class:`~.coordinator.Coordinator`).
Learners exit by themselves when ``STOP`` is set or their parent dies.
:meth:`LearnerGroup.close` joins with a timeout (a stopped process is killed at once), then
terminates and kills, then unlinks every segment; it runs in ``finally`` on every exit path.

Start-up (:meth:`LearnerGroup.start`) is the transport's (:mod:`.engine`): the coordinator's
clock is already running, the learners are forked behind a :class:`~.engine.StartGate` and
begin together once the last is forked; once the time limit runs out no more are forked
(:attr:`LearnerGroup.incomplete`) and those forked are told to stop. With more learners than
cores they run at a lower priority than the coordinator (nice +10), which keeps the time
limit, the rebuilds and the commands on time.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable

import numpy as np

from ..primitives.monitor import CpuMonitor
from ..primitives.seqlock import load_word, store_word
from ..primitives.shm import SharedArena, require_space, segment_bytes
from .engine import WORKER_NICE, balanced_shards
from .supervisor import ProcessGroup, StartGate, cpu_seconds
from .transport import start_figures

# ctrl words
STOP, GEN, CMD, URGENT = 0, 1, 2, 3
# commands every schedule understands (schedules add their own codes from 16 on)
PAUSE, RESUME = 1, 2
# per-learner int64 stats columns (a row of 16 words, its own cache lines)
ACK, ERROR, EPOCHS, CANDIDATE, UPDATES, INFER, ADMITTED, VIOLATORS, STEPS, ACTIVE = range(10)
ROW = 16
F_STARTED = ROW - 1  # fstats column: time.perf_counter() at which the learner began work
ERR_BYTES = 8192
POLL = 0.0005  # seconds between polls of a waiting learner or coordinator
STALL_SECONDS = 5.0  # a learner that owes an answer and got no CPU time for this long is killed
STOP_GRACE = (3.0, 3.0)  # once the run must stop: no CPU time for 3 s, or no answer 3 s after
# the stop (the learners abandon inferences then: a running one answers within milliseconds; one
# that only waits for a core on a loaded machine is not lost: 0.5 s killed such learners, whose α
# the model then lacked). A stopped one (SIGSTOP) is given up at once
LIVENESS_EVERY = 0.05  # seconds between the liveness checks of a waiting coordinator


class Stopped(Exception):
    """Raised in a learner when STOP is set or its parent died: the learner exits."""


class LearnerGroup(ProcessGroup):
    noun = "learner"
    error_column = ERROR
    caller_threads = 0  # the coordinator is not one of the --threads K learners

    """K learner processes, each owning ``parts[k]``, around a shared ``w`` (float64[dim]).

    ``arrays``: further shared arrays ``{key: (shape, dtype)}`` for the schedule.
    """

    def __init__(self, n_examples: int, costs: np.ndarray, dim: int, k: int,
                 body: Callable[[LearnerGroup, int], None], seed: int = 0,
                 log: Callable[[str], None] | None = None, debug: bool = False,
                 max_restarts: int = 3, monitor_interval: float = 0.5,
                 arrays: dict[str, tuple[tuple[int, ...], type]] | None = None):
        self.k, self.body, self.seed = int(k), body, seed
        self.log, self.debug, self.max_restarts = log or (lambda s: None), debug, max_restarts
        require_space(sum(segment_bytes(shape, dt) for shape, dt in (
            ((dim,), np.float64), ((16,), np.int64), ((self.k, ROW), np.int64),
            ((self.k, ROW), np.float64), ((self.k, ERR_BYTES), np.uint8),
            *(arrays or {}).values())), self.k)
        self.arena = SharedArena()
        try:
            self.w = self.arena.create("w", (dim,), np.float64)
            self.ctrl = self.arena.create("ctrl", (16,), np.int64)
            self.stats = self.arena.create("stats", (self.k, ROW), np.int64)
            self.fstats = self.arena.create("fstats", (self.k, ROW), np.float64)
            self.err = self.arena.create("err", (self.k, ERR_BYTES), np.uint8)
            self.arrays = {key: self.arena.create(key, shape, dt)
                           for key, (shape, dt) in (arrays or {}).items()}
        except BaseException:
            self.arena.close()
            raise
        self.parts = balanced_shards(costs, self.k, seed) if self.k > 1 else \
            [np.arange(n_examples, dtype=np.int64)]
        self.procs: list = [None] * self.k
        self.restarts = [0] * self.k
        self.parent_pid = os.getpid()
        self.monitor = CpuMonitor({"coordinator": os.getpid()}, interval=monitor_interval)
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        # one core per learner when they fit (the coordinator mostly sleeps and floats);
        # otherwise the learners yield to the coordinator (its clock, rebuilds, commands)
        self.cores = cpus if len(cpus) >= self.k > 1 else []
        self.oversubscribed = self.k > max(len(cpus), 1)
        self._gate: StartGate | None = None
        self.incomplete = False  # the time limit ran out before every learner was forked
        self.spawn_began, self.spawn_seconds = float("nan"), 0.0
        self._closed = False
        self.seen = 0  # in a learner: the last command generation it ran
        self.start_paused = False
        self.expired: Callable[[], bool] = lambda: False  # the run must stop (start's clock)
        self._stalled: dict[int, str] = {}  # learners killed for not running: why
        import multiprocess as mp

        self._ctx = mp.get_context("fork")

    # ------------------------------------------------------------------ coordinator side
    def start(self, expired: Callable[[], bool] | None = None) -> LearnerGroup:
        """Fork the learners behind a :class:`~.supervisor.StartGate`, then let them all go;
        ``expired`` (the coordinator's clock, already running): once true no more are
        forked (:attr:`incomplete`) and the forked ones are told to stop."""
        self.log(f"coordinator pid {os.getpid()}")
        if expired is not None:
            self.expired = expired

        def told_to_stop() -> None:
            self.incomplete = True
            store_word(self.ctrl, STOP, 1)

        self._fork_all(self.k, expired, lambda j: self._spawn(j, paused=False), told_to_stop)
        return self

    def start_figures(self, t0: float) -> dict[str, float | None]:
        """How starting the learners went, on the coordinator's clock
        (:func:`~.transport.start_figures`)."""
        return start_figures(t0, self.spawn_began, self.spawn_seconds,
                             self.fstats[:, F_STARTED].copy())

    def _spawn(self, j: int, paused: bool) -> None:
        self.stats[j, ERROR] = 0
        self.stats[j, CANDIDATE] = 0
        self.stats[j, VIOLATORS] = -1  # none counted since this (re)start
        self.err[j] = 0
        self.start_paused = paused
        self.seen = load_word(self.ctrl, GEN)
        store_word(self.stats[j], ACK, self.seen)
        self._start(j, self._main, f"learner process {j + 1}: infers and learns on a part of "
                    f"{len(self.parts[j]):,} examples")

    def dead(self) -> list[int]:
        """Learners that died since they were (re)started; reports each (a traceback under
        ``--debug``) and raises :class:`~demidcd.errors.WorkerError` once one died too
        often."""
        out = []
        for j, p in enumerate(self.procs):
            if p is None or p.is_alive():
                continue
            what = self._failure(j, self._stalled.pop(j, None))
            if self.expired():
                self.log(f"learner process {j + 1} (pid {p.pid}) {what}; the run is stopping: "
                         "its α is lost, so the model keeps the last w with every learner's "
                         "updates, not one rebuilt without them")
            else:
                self.log(f"learner process {j + 1} (pid {p.pid}) {what}; its α is lost: w is "
                         "rebuilt from the other learner processes' and it restarts on the "
                         "same part")
            self.monitor.remove(f"learner {j + 1}")
            self.procs[j] = None
            out.append(j)
        return out

    def respawn(self, j: int) -> None:
        """Restart learner j on its part, paused until the next command."""
        self.restarts[j] += 1
        self._spawn(j, paused=True)

    def missing(self) -> list[int]:
        return [j for j, p in enumerate(self.procs) if p is None]

    def command(self, cmd: int) -> list[int]:
        """Issue ``cmd`` and wait until every live learner acknowledged it. Returns the learners
        that died meanwhile (see :meth:`dead`; they are not restarted here), those killed for
        not running included (:meth:`_not_running`): the wait always ends."""
        store_word(self.ctrl, CMD, cmd)
        g = load_word(self.ctrl, GEN) + 1
        store_word(self.ctrl, GEN, g)
        died: list[int] = []
        cpu: dict[int, tuple[float, float]] = {}  # learner: (CPU seconds, when they last grew)
        stop_at, next_check = None, time.perf_counter() + LIVENESS_EVERY
        while True:
            waiting = [j for j, p in enumerate(self.procs)
                       if p is not None and load_word(self.stats[j], ACK) < g]
            if not waiting:
                return died
            if any(not self.procs[j].is_alive() for j in waiting):
                died += self.dead()
                continue
            now = time.perf_counter()
            if now >= next_check:
                next_check = now + LIVENESS_EVERY
                if stop_at is None and self.expired():
                    stop_at = now
                    store_word(self.ctrl, URGENT, 1)  # abandon inferences: answer now
                stalled = self._not_running(waiting, cpu, now, stop_at)
                if stalled:
                    self._kill(stalled)
                    died += self.dead()
                    continue
            time.sleep(POLL)

    def _not_running(self, waiting: list[int], cpu: dict[int, tuple[float, float]], now: float,
                     stop_at: float | None) -> dict[int, str]:
        """Of the learners ``waiting`` (that owe an answer), those to give up, with why: no CPU
        time for :data:`STALL_SECONDS`; once the run must stop (since ``stop_at``), a stopped
        one (state T) at once, one with no CPU time for ``STOP_GRACE[0]`` s, and one with no
        answer ``STOP_GRACE[1]`` s after the stop. ``cpu`` keeps each one's CPU seconds and
        when they last grew, across calls of one wait."""
        out = {}
        for j in waiting:
            used, state = cpu_seconds(self.procs[j].pid)
            if j not in cpu or used != cpu[j][0]:
                cpu[j] = (used, now)
            idle = now - cpu[j][1]
            stopped = state in ("T", "t")  # SIGSTOP, a debugger: at a stop, no grace
            if idle >= STALL_SECONDS or (stop_at is not None and (
                    stopped or idle >= STOP_GRACE[0])):
                out[j] = ("was stopped (SIGSTOP, a debugger)" if stopped and idle < 1.0 else
                          f"got no CPU time for {idle:.1f} s") + " while it owed an answer: killed"
            elif stop_at is not None and now - stop_at >= STOP_GRACE[1]:
                out[j] = f"did not answer within {now - stop_at:.1f} s of the stop: killed"
        return out

    def _kill(self, why: dict[int, str]) -> None:
        """SIGKILL the learners of ``why`` (a stopped process too) and reap them; :meth:`dead`
        then reports each with its reason."""
        for j in why:
            self.procs[j].kill()
        for j in why:
            self.procs[j].join(1.0)
            self._stalled[j] = why[j]

    def close(self, timeout: float = 2.0) -> None:
        """Stop every learner (join, then terminate, then kill) and unlink all shared memory."""

        def tell_stop() -> None:
            store_word(self.ctrl, URGENT, 1)
            store_word(self.ctrl, STOP, 1)

        self._stop_all(timeout, tell_stop)

    def __enter__(self) -> LearnerGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ learner side
    def stopped(self) -> bool:
        """STOP was set or the coordinator died (in a learner)."""
        return bool(load_word(self.ctrl, STOP)) or os.getppid() != self.parent_pid

    def urgent(self) -> bool:
        """Abandon the current inference now (the task's ``should_stop`` in a learner)."""
        return bool(load_word(self.ctrl, URGENT)) or self.stopped()

    def poll_command(self, j: int, run: Callable[[int], None], wait: bool = False) -> bool:
        """In learner j, between blocks of work: run every command issued since the last poll
        (``run(code)`` for schedule codes), waiting while paused, until a ``RESUME``; with
        ``wait`` (a restarted learner, paused) wait for one first. Returns True when any
        command ran (w may have been rebuilt). Raises :class:`Stopped`."""
        if not wait and load_word(self.ctrl, GEN) == self.seen:
            if self.stopped():
                raise Stopped
            return False
        st = self.stats[j]
        while True:
            g = load_word(self.ctrl, GEN)
            if g != self.seen:
                code = load_word(self.ctrl, CMD)
                self.seen = g
                if code not in (PAUSE, RESUME):
                    run(code)
                store_word(st, ACK, g)  # after the command's results
                if code == RESUME:
                    return True
            elif self.stopped():
                raise Stopped
            else:
                time.sleep(POLL)

    def _main(self, j: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator handles Ctrl-C
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # the CLI's stop-with-parent is not ours
        code = 0
        try:
            self.monitor = None  # the parent's sampling thread does not exist here
            if self.cores:
                os.sched_setaffinity(0, {self.cores[j % len(self.cores)]})
            if self.oversubscribed:
                os.nice(WORKER_NICE)
            if self._gate is not None:
                self._gate.wait()  # until every learner is forked
            if self.stopped():
                raise Stopped
            if self.fstats[j, F_STARTED] == 0.0:  # the first start (not a restart)
                self.fstats[j, F_STARTED] = time.perf_counter()
            self.body(self, j)
        except Stopped:
            pass
        except BaseException:  # noqa: BLE001 - reported to the coordinator, never swallowed
            tb = traceback.format_exc().encode()[-(ERR_BYTES - 1):]
            self.err[j, :len(tb)] = np.frombuffer(tb, np.uint8)
            self.stats[j, ERROR] = 1
            code = 1
        os._exit(code)
