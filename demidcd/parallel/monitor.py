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
"""

from __future__ import annotations

import csv
import os
import threading
import time
from pathlib import Path

import psutil

__all__ = ["CpuMonitor"]


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
        self.peak_rss = 0  # bytes: the largest sum of resident memory over all processes
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

    def add(self, role: str, pid: int) -> None:
        """Monitor ``pid`` under ``role`` (replaces the pid of an existing role, e.g. a
        restarted worker)."""
        r = _Role(self._open(pid))
        with self._lock:
            monitored = self._monitored_pids()
            ppids = _ppid_map()
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

    def _reading(self, r: _Role, monitored: set[int], ppids: dict[int, list[int]]) -> int:
        """Update ``r.cum`` (monotonic) from a fresh reading; returns the resident bytes of the
        process and its counted descendants (0 if it is gone)."""
        now = time.monotonic()
        p = r.proc
        if p is None or r.gone:
            r.t = now
            return 0
        try:
            own = _times(p)
            zombie = p.status() == psutil.STATUS_ZOMBIE
            rss = 0 if zombie else p.memory_info().rss
        except (psutil.Error, OSError):  # died: `sample` marks it gone once it is reaped
            r.t = now
            return 0
        r.last_own = own
        total = own - self._credit.get(p.pid, 0.0)
        stack = [c for c in ppids.get(p.pid, ()) if c not in monitored]
        while stack:  # live descendants, pruned at monitored processes
            c = stack.pop()
            try:
                cp = psutil.Process(c)
                total += _times(cp)
                if cp.status() != psutil.STATUS_ZOMBIE:
                    rss += cp.memory_info().rss
            except (psutil.Error, OSError):
                continue
            stack.extend(g for g in ppids.get(c, ()) if g not in monitored)
        r.cum = max(r.cum, total)
        r.t = now
        return rss

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
            rss = 0
            for role, r in self._procs.items():
                before, t_before = r.cum, r.t
                rss += self._reading(r, monitored, ppids)
                dt = r.t - t_before
                vals[role] = 100.0 * (r.cum - before) / dt if dt > 0 else 0.0
            for r in self._retired:  # keep their readings current for the credit above
                self._reading(r, monitored, ppids)
        self.peak_rss = max(self.peak_rss, rss)
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
        with self._lock:  # CPU used before start() is not part of the run
            monitored = self._monitored_pids()
            ppids = _ppid_map()
            for r in self._procs.values():
                self._reading(r, monitored, ppids)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval + 1.0)
            self._thread = None
            if not self.samples:  # a run shorter than one interval still gets one sample
                try:
                    self.sample()
                except Exception:  # noqa: BLE001 - a monitor must never kill the run
                    pass
            self._t_stop = time.monotonic() - self._t0

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
        """E.g. ``"peak memory: 412 MiB resident (all processes)"`` (shared pages counted once
        per process, as top does)."""
        return f"peak memory: {self.peak_rss / 2**20:.0f} MiB resident (all processes)"

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


def _gone(p: psutil.Process) -> bool:
    """True once the process no longer exists (reaped), also when its pid was reused."""
    try:
        return not p.is_running()
    except (psutil.Error, OSError):
        return True


def _ppid_map() -> dict[int, list[int]]:
    """parent pid → child pids, over every process on the machine (one /proc scan; psutil's
    own ``ppid_map`` where it has one: ~2 ms for 100 processes against ~8 ms through
    ``process_iter``)."""
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
