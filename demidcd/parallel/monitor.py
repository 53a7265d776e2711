"""CPU-utilisation monitor for the learner and worker processes (psutil, like ``top``).

Every ``interval`` seconds a daemon thread samples ``psutil.Process(pid).cpu_percent()`` of each
monitored process (100 % = one fully busy core, so p busy processes give ~p·100 %) and their
sum. A process that has died (or is a zombie, or cannot be read) counts 0 and is never an error.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from pathlib import Path

import psutil

__all__ = ["CpuMonitor"]


class CpuMonitor:
    """Samples the CPU % of named processes in a background thread.

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
        self._procs: dict[str, psutil.Process | None] = {}
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
            p.cpu_percent(None)  # first call only sets the baseline
            return p
        except (psutil.Error, OSError, ValueError):
            return None

    def add(self, role: str, pid: int) -> None:
        """Monitor ``pid`` under ``role`` (replaces the pid of an existing role, e.g. a
        restarted worker)."""
        p = self._open(pid)
        with self._lock:
            self._procs[role] = p
            if role not in self._roles:
                self._roles.append(role)

    def remove(self, role: str) -> None:
        """Stop monitoring ``role`` (its CSV column reads 0 afterwards)."""
        with self._lock:
            self._procs.pop(role, None)

    @property
    def roles(self) -> list[str]:
        with self._lock:
            return list(self._roles)

    def sample(self) -> tuple[float, float, dict[str, float]]:
        """Take one sample now (normally called by the thread) and append it."""
        with self._lock:
            procs = list(self._procs.items())
        vals: dict[str, float] = {}
        rss = 0
        for role, p in procs:
            v = 0.0
            if p is not None:
                try:
                    if p.status() != psutil.STATUS_ZOMBIE:
                        v = float(p.cpu_percent(None))
                        rss += p.memory_info().rss
                except (psutil.Error, OSError):
                    v = 0.0
            vals[role] = v
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
        with self._lock:
            for role, p in self._procs.items():
                if p is not None:
                    self._procs[role] = self._open(p.pid)
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
