"""CPU-utilisation monitor for the learner and worker processes (psutil, like ``top``).

Every ``interval`` seconds a daemon thread measures, for each monitored process, its CPU share
over the last interval (100 % = one fully busy core, so p busy processes give ~p·100 %) and
the sum. A process's share includes the solver subprocesses it starts (e.g. one CBC process
per ILP solve):

    cpu(R) = user + system of R itself
           + children_user + children_system of R (descendants that exited and were waited
             for; the kernel adds them when the parent reaps a child)
           + Σ over live descendants d of R, not themselves monitored and not below a monitored
             process: user + system + children_user + children_system of d,

and the share of an interval is Δcpu(R) / Δt. Every CPU second is in exactly one of the three
terms (a running child in the third, after it is reaped in the second), so nothing is counted
twice as a child moves from live to exited. Between its exit and its reaping a child is in
neither term; cpu(R) is therefore kept monotonic (a reading below the previous one counts as
no progress, and the next reading catches up). A monitored process that is a child of another
monitored one (workers are forked by the learner) lands in its parent's children times when it
is reaped; the last reading of it is subtracted from the parent then (exact when it was seen
as a zombie, else off by at most one interval of its CPU, once per worker exit). Descendants
that exit without being waited for (orphans) are lost. A process that has died (or cannot be
read) counts 0 and is never an error.

Memory: the peak of the processes' proportional set size summed over the same processes (PSS,
``/proc/<pid>/smaps_rollup``: each resident page divided by the number of processes mapping
it), so the pages the forked workers share with the learner (the interpreter, numba's code, the
task's arrays, the shared segments) count once in all; their summed resident sizes counted
them once per process, many times the real use with many workers. Reading PSS walks each
process's page tables (milliseconds per process, on the learner's core), so the readings take
at most ``PSS_BUDGET`` of the time (the first one waits as if each process cost
``PSS_GUESS``; the next ones are spaced by the measured cost), and one more is taken when the
monitor stops (while the workers still run; memory peaks late, as the active sets grow). The
resident sum is still read every sample (``peak_rss``).
"""

from __future__ import annotations

import csv
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

__all__ = ["CpuMonitor", "RunPeak", "usable_cores", "timed_step"]

PSS_BUDGET = 0.02  # share of one core the PSS readings may take (see the module docstring)
PSS_GUESS = 0.01  # seconds per process of a PSS reading, until one is measured
STEP_LOG_AFTER = 1.0  # seconds: a preparation step that takes longer gets a log line


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; the CPU count elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


PROGRESS_EVERY = 30.0  # seconds between the progress lines of a long set-up step


@contextmanager
def timed_step(log: Callable[[str], None] | None, what: str,
               after: float = STEP_LOG_AFTER, every: float | None = None) -> Iterator[None]:
    """Log ``"<what> ... (12.3 s)"`` when the block took ``after`` seconds or more (a
    preparation step: building features, clustering, encoding, spawning workers); a quicker
    step, or one without ``log``, says nothing. ``every`` (seconds; :data:`PROGRESS_EVERY` for
    the set-up steps whose length grows with the data, never around a fork): while the block
    runs, ``"<what> ... still running after N s"`` every so many seconds, from a thread, so
    that a long set-up (a 600-entity sentence's pairs, a 1,000-line template) is not silence.
    """
    t0 = time.perf_counter()
    stop = threading.Event()
    beat = None
    if log is not None and every:
        def progress() -> None:
            while not stop.wait(every):
                log(f"{what} ... still running after {time.perf_counter() - t0:.0f} s")

        beat = threading.Thread(target=progress, name="demidcd-progress", daemon=True)
        beat.start()
    try:
        yield
    finally:
        if beat is not None:
            stop.set()
            beat.join()
    dt = time.perf_counter() - t0
    if log is not None and dt >= after:
        log(f"{what} ... ({dt:.1f} s)")


def _times(p: psutil.Process) -> float:
    """user + system + waited-for children's user + system, in seconds."""
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class _Role:
    """One monitored process: its psutil handle, last cumulative CPU reading and its time."""

    __slots__ = ("proc", "cum", "t", "last_own", "gone", "ppid")

    def __init__(self, proc: psutil.Process | None):
        self.proc = proc
        self.cum = 0.0  # monotonic cumulative CPU seconds (own + children + live descendants)
        self.t = time.monotonic()
        self.last_own = 0.0  # last own+children reading (what its parent gains when reaping it)
        self.gone = proc is None
        self.ppid: int | None = None  # parent pid seen at the last sample


class CpuMonitor:
    """Samples the CPU % of named processes (solver subprocesses included) in a thread.

    >>> mon = CpuMonitor({"learner": os.getpid(), "worker 1": pid1}, interval=0.5)
    >>> mon.start(); ...; mon.stop()
    >>> mon.summary_line(2)            # 'average CPU: 187% of 200%'
    >>> mon.write_csv("cpu.csv")       # seconds,total,learner,worker 1

    ``samples`` is a list of ``(seconds since start, total %, {role: %})``.
    """

    def __init__(self, pids: dict[str, int], interval: float = 0.5):
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = float(interval)
        self.samples: list[tuple[float, float, dict[str, float]]] = []
        self._procs: dict[str, _Role] = {}
        self._retired: list[_Role] = []  # replaced/removed roles whose process may be reaped
        self._credit: dict[int, float] = {}  # pid → CPU seconds to subtract (reaped monitored
        #                                      children already counted under their own role)
        self._roles: list[str] = []  # every role ever seen, in order (CSV columns)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._t_stop: float | None = None
        self.peak_rss = 0  # bytes: the largest sum of resident sizes over all processes
        self.peak_pss = 0  # bytes: the largest sum of proportional set sizes (module docstring)
        self._pss_due = 0.0  # time.monotonic() of the next PSS reading
        self._run_peak_paused = False  # whether start() paused the RunPeaks (stop resumes)
        for role, pid in pids.items():
            self.add(role, pid)

    @staticmethod
    def _open(pid: int) -> psutil.Process | None:
        try:
            p = psutil.Process(int(pid))
            p.cpu_times()
            return p
        except (psutil.Error, OSError, ValueError):
            return None

    def add(self, role: str, pid: int, fresh: bool = False) -> None:
        """Monitor ``pid`` under ``role`` (replaces the pid of an existing role, e.g. a
        restarted worker). ``fresh``: a process just forked, without descendants yet, whose
        baseline needs no scan of every process (milliseconds per process)."""
        r = _Role(self._open(pid))
        with self._lock:
            monitored = set() if fresh else self._monitored_pids()
            ppids = {} if fresh else _ppid_map()
            self._reading(r, monitored, ppids)  # baseline: CPU before now is not this run's
            old = self._procs.get(role)
            if old is not None and old.proc is not None:
                self._retired.append(old)
            self._procs[role] = r
            if role not in self._roles:
                self._roles.append(role)

    def remove(self, role: str) -> None:
        """Stop monitoring ``role`` (its CSV column reads 0 afterwards)."""
        with self._lock:
            old = self._procs.pop(role, None)
            if old is not None and old.proc is not None:
                self._retired.append(old)

    @property
    def roles(self) -> list[str]:
        with self._lock:
            return list(self._roles)

    # -- measuring -------------------------------------------------------------------------
    def _monitored_pids(self) -> set[int]:
        return {r.proc.pid for r in list(self._procs.values()) + self._retired
                if r.proc is not None}

    def _reading(self, r: _Role, monitored: set[int], ppids: dict[int, list[int]]
                 ) -> list[psutil.Process]:
        """Update ``r.cum`` (monotonic) from a fresh reading; returns the live processes it
        counts (the process and its counted descendants; none once it is gone), whose memory
        :meth:`sample` sums."""
        now = time.monotonic()
        p = r.proc
        if p is None or r.gone:
            r.t = now
            return []
        try:
            own = _times(p)
            zombie = p.status() == psutil.STATUS_ZOMBIE
        except (psutil.Error, OSError):  # died: `sample` marks it gone once it is reaped
            r.t = now
            return []
        r.last_own = own
        total = own - self._credit.get(p.pid, 0.0)
        live = [] if zombie else [p]
        stack = [c for c in ppids.get(p.pid, ()) if c not in monitored]
        while stack:  # live descendants, pruned at monitored processes
            c = stack.pop()
            try:
                cp = psutil.Process(c)
                total += _times(cp)
                if cp.status() != psutil.STATUS_ZOMBIE:
                    live.append(cp)
            except (psutil.Error, OSError):
                continue
            stack.extend(g for g in ppids.get(c, ()) if g not in monitored)
        r.cum = max(r.cum, total)
        r.t = now
        return live

    def _memory(self, procs: list[psutil.Process], pss: bool) -> None:
        """Add a memory reading of ``procs``: their summed resident size, and with ``pss``
        their summed proportional set size (see the module docstring)."""
        rss = pss_sum = 0
        t = time.perf_counter()
        for p in procs:
            try:
                if pss:
                    m = p.memory_full_info()
                    rss += m.rss
                    pss_sum += getattr(m, "pss", m.uss)  # no PSS (not Linux): USS
                else:
                    rss += p.memory_info().rss
            except (psutil.Error, OSError, AttributeError):
                continue
        self.peak_rss = max(self.peak_rss, rss)
        if pss:
            self.peak_pss = max(self.peak_pss, pss_sum)
            cost = time.perf_counter() - t
            self._pss_due = time.monotonic() + max(self.interval, cost / PSS_BUDGET)

    def sample(self) -> tuple[float, float, dict[str, float]]:
        """Take one sample now (normally called by the thread) and append it."""
        with self._lock:
            monitored = self._monitored_pids()
            ppids = _ppid_map()
            parent_of = {c: pp for pp, cs in ppids.items() for c in cs}
            # monitored processes that were reaped since the last sample: their CPU moved into
            # their parent's children times, but it was already counted under their own role
            for r in list(self._procs.values()) + self._retired:
                p = r.proc
                if p is None or r.gone or not _gone(p):
                    continue
                if r.ppid is not None:
                    self._credit[r.ppid] = self._credit.get(r.ppid, 0.0) + r.last_own
                r.gone = True
            self._retired = [r for r in self._retired if not r.gone]
            for r in list(self._procs.values()) + self._retired:
                if r.proc is not None and not r.gone:
                    r.ppid = parent_of.get(r.proc.pid)
            vals: dict[str, float] = {}
            live: list[psutil.Process] = []
            for role, r in self._procs.items():
                before, t_before = r.cum, r.t
                live += self._reading(r, monitored, ppids)
                dt = r.t - t_before
                vals[role] = 100.0 * (r.cum - before) / dt if dt > 0 else 0.0
            for r in self._retired:  # keep their readings current for the credit above
                self._reading(r, monitored, ppids)
        self._memory(live, pss=time.monotonic() >= self._pss_due)
        s = (time.monotonic() - self._t0, sum(vals.values()), vals)
        with self._lock:
            self.samples.append(s)
        return s

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a monitor must never kill the run
                pass

    def start(self) -> CpuMonitor:
        """Start sampling every ``interval`` seconds in a daemon thread."""
        if self._thread is not None:
            return self
        self._t0 = time.monotonic()
        RunPeak.engine_started()
        self._run_peak_paused = True
        with self._lock:
            n = len(self._procs)
        self._pss_due = self._t0 + max(self.interval, n * PSS_GUESS / PSS_BUDGET)
        with self._lock:  # CPU used before start() is not part of the run
            monitored = self._monitored_pids()
            ppids = _ppid_map()
            for r in self._procs.values():
                self._reading(r, monitored, ppids)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-monitor", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # no thread to be had (a limit on processes counts threads):
            self._thread = None  # the run goes on unmonitored, as a monitor never kills it
        return self

    def stop(self) -> None:
        """Stop sampling (idempotent), with a last PSS reading of the processes still running
        (call it before they are told to stop: the peak is usually at the end)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval + 1.0)
            self._thread = None
            try:
                if not self.samples:  # a run shorter than one interval still gets one sample
                    self.sample()
                self.memory_now()
            except Exception:  # noqa: BLE001 - a monitor must never kill the run
                pass
            self._t_stop = time.monotonic() - self._t0
        if self._run_peak_paused:  # (also when its thread could not start)
            self._run_peak_paused = False
            RunPeak.engine_stopped(self.peak_pss)

    def memory_now(self) -> None:
        """Read the PSS of every monitored process and its descendants now (those not
        monitored themselves, as :meth:`sample` counts them; gone ones count nothing)."""
        with self._lock:
            monitored = self._monitored_pids()
            ppids = _ppid_map()
            roots = [r.proc for r in self._procs.values() if r.proc is not None and not r.gone]
        procs, stack = list(roots), [c for p in roots for c in ppids.get(p.pid, ())
                                     if c not in monitored]
        while stack:
            c = stack.pop()
            try:
                procs.append(psutil.Process(c))
            except (psutil.Error, OSError):
                continue
            stack.extend(g for g in ppids.get(c, ()) if g not in monitored)
        self._memory(procs, pss=True)

    def __enter__(self) -> CpuMonitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def average(self) -> float:
        """Mean total % over the samples taken from the first second on (start-up excluded);
        over all samples if the run was shorter; 0 without samples."""
        with self._lock:
            s = list(self.samples)
        if not s:
            return 0.0
        late = [t for sec, t, _ in s if sec >= 1.0] or [t for _, t, _ in s]
        return sum(late) / len(late)

    def memory_line(self) -> str:
        """E.g. ``"peak memory: 2,250 MiB (PSS, all processes)"``: the peak of the summed
        proportional set sizes, shared pages counted once in all (module docstring)."""
        if self.peak_pss:
            return f"peak memory: {self.peak_pss / 2**20:,.0f} MiB (PSS, all processes)"
        return (f"peak memory: {self.peak_rss / 2**20:,.0f} MiB (resident, summed over the "
                "processes: shared pages counted once per process)")

    def summary_line(self, n_procs: int) -> str:
        """E.g. ``"average CPU: 187% of 200%"`` (n_procs processes can use n_procs·100 %)."""
        return f"average CPU: {self.average():.0f}% of {100 * int(n_procs)}%"

    def write_csv(self, path: str | os.PathLike) -> None:
        """Write ``seconds,total,<role columns>`` rows atomically (temporary file + rename)."""
        path = Path(path)
        with self._lock:
            roles = list(self._roles)
            rows = list(self.samples)
        from ..io.model import atomic_write

        def write(f) -> None:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["seconds", "total", *roles])
            for sec, tot, vals in rows:
                w.writerow([f"{sec:.3f}", f"{tot:.1f}",
                            *(f"{vals.get(r, 0.0):.1f}" for r in roles)])

        atomic_write(path, write, mode="w")


def tree_pss(pid: int | None = None) -> int:
    """Bytes: the summed proportional set size (``/proc/<pid>/smaps_rollup``'s ``Pss``) of
    process ``pid`` (this one by default) and all its live descendants; 0 where there is no
    ``smaps_rollup`` (not Linux)."""
    root = os.getpid() if pid is None else int(pid)
    ppids = _ppid_map()
    total, stack = 0, [root]
    while stack:
        q = stack.pop()
        total += _pss_of(q)
        stack.extend(ppids.get(q, ()))
    return total


def _pss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class RunPeak:
    """The peak memory of a whole command: this process and its descendants from
    :meth:`start` to :meth:`stop`, the set-up before training included (a set-up child that
    reads the corpus and builds the features peaks before any :class:`CpuMonitor` starts).

    The peak is the largest of

    * the summed PSS of the process tree (:func:`tree_pss`), read every ``interval`` seconds
      by a thread while no :class:`CpuMonitor` runs in this process (while one runs, its own
      readings of the training processes count instead: the two would only double the
      cost of reading page tables on the learner's core);
    * each :class:`CpuMonitor`'s ``peak_pss`` when it stops (the training's peak);
    * what :meth:`note` is told, e.g. a set-up child's resident high-water mark
      (``ru_maxrss`` from ``wait4``), which catches a peak however short it was between two
      readings. It counts in full the pages the child shares with processes outside the tree
      (shared libraries another Python maps), which PSS divides among them: alone on a
      machine the two agree within a few MiB, beside other Python processes it overstates
      by up to the shared libraries' resident size (the line errs on the high side).

    ``setup`` (bytes) is the peak outside the monitors' spans (the set-up, and after training
    the model's saving and the scoring) and ``training`` the monitors' peak, so that the log
    can say which part of the run the peak is from.
    """

    _active: list[RunPeak] = []

    def __init__(self, interval: float = 0.2):
        self.interval = float(interval)
        self.setup = 0  # bytes: the peak read outside the CpuMonitors' spans (and noted)
        self.training = 0  # bytes: the CpuMonitors' peak PSS
        self._pid = os.getpid()
        self._paused = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def peak(self) -> int:
        """Bytes: the whole run's peak (the larger of :attr:`setup` and :attr:`training`)."""
        return max(self.setup, self.training)

    def start(self) -> RunPeak:
        RunPeak._active.append(self)
        self.read()
        self._thread = threading.Thread(target=self._run, name="demidcd-run-peak", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # no thread to be had: the monitors' peak and the notes remain
            self._thread = None
        return self

    def stop(self) -> int:
        """Stop reading (a last reading first); returns :attr:`peak`."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)
            self._thread = None
        if self in RunPeak._active:
            RunPeak._active.remove(self)
            if not self._paused:
                self.read()
        return self.peak

    def read(self) -> None:
        """One reading of the process tree now."""
        self.setup = max(self.setup, tree_pss(self._pid))

    def note(self, nbytes: int) -> None:
        """Count ``nbytes`` as memory the run held at some moment (see the class docstring)."""
        self.setup = max(self.setup, int(nbytes))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self._paused:
                try:
                    self.read()
                except Exception:  # noqa: BLE001 - a monitor must never kill the run
                    pass

    def __enter__(self) -> RunPeak:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def line(self) -> str:
        """E.g. ``"peak memory: 530 MiB (PSS, all processes, the whole run; training 480 MiB,
        the rest (set-up, saving, scoring) 530 MiB)"``: :attr:`peak`, :attr:`training` and
        :attr:`setup` (what was read outside the training monitors' spans: mostly the
        set-up, which peaks before training)."""
        mib = 2**20
        parts = [f"training {self.training / mib:,.0f} MiB"] if self.training else []
        parts.append(f"the rest (set-up, saving, scoring) {self.setup / mib:,.0f} MiB")
        return (f"peak memory: {self.peak / mib:,.0f} MiB (PSS, all processes, the whole run; "
                + ", ".join(parts) + ")")

    # -- hooks of CpuMonitor (in this process only: a forked child's copies do nothing)
    @classmethod
    def engine_started(cls) -> None:
        for r in cls._active:
            if r._pid == os.getpid():
                r.read()
                r._paused += 1

    @classmethod
    def engine_stopped(cls, peak_pss: int) -> None:
        for r in cls._active:
            if r._pid == os.getpid():
                r.training = max(r.training, int(peak_pss))
                r._paused = max(r._paused - 1, 0)

    @classmethod
    def note_all(cls, nbytes: int) -> None:
        """:meth:`note` to every active one of this process."""
        for r in cls._active:
            if r._pid == os.getpid():
                r.note(nbytes)


def _gone(p: psutil.Process) -> bool:
    """True once the process no longer exists (reaped), also when its pid was reused."""
    try:
        return not p.is_running()
    except (psutil.Error, OSError):
        return True


def _ppid_map() -> dict[int, list[int]]:
    """parent pid → child pids, over every process on the machine (one /proc scan; psutil's
    own ``ppid_map`` where it has one, faster than ``process_iter``)."""
    out: dict[int, list[int]] = {}
    fast = getattr(psutil._psplatform, "ppid_map", None)
    if fast is not None:
        try:
            for pid, pp in fast().items():
                out.setdefault(pp, []).append(pid)
            return out
        except Exception:  # noqa: BLE001 - private API: fall back to the public one
            out.clear()
    for p in psutil.process_iter(["ppid"]):
        pp = p.info.get("ppid")
        if pp is not None:
            out.setdefault(pp, []).append(p.pid)
    return out
