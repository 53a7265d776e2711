"""A watchdog that kills the processes a local Ray instance started once this process is gone.

Ray makes its GCS server and raylet die with the driver (the kernel's parent-death signal), but
not the agents the raylet starts (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``): after a
SIGKILL of the driver they went on for 40 s or more. :class:`Watchdog` starts, before
``ray.init``, a small process of its own session (so a Ctrl-C to the terminal's process group
does not reach it) that holds the read end of a pipe whose write end only this process has.
Every :data:`SCAN_SECONDS` it notes this process's descendants that are Ray's (a command line
naming ray, started after the watchdog) and, once the pipe reads end-of-file (this process
closed it or died, however), SIGKILLs every one of them still running (the same process: its
start time is checked) and their descendants, then exits. A Ctrl-C to the whole group leaves it
running to do just that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

SCAN_SECONDS = 0.2

_SCRIPT = r"""
import os, select, signal, sys, time
driver, me, scan_every = int(sys.argv[1]), os.getpid(), float(sys.argv[2])
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)

def table():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d, "rb") as f:
                    rest = f.read().rpartition(b")")[2].split()
                out[int(d)] = (int(rest[1]), int(rest[19]))
            except (OSError, IndexError, ValueError):
                pass
    return out

def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read()
    except OSError:
        return b""

mine = cmdline(driver)

def is_ray(pid):  # Ray's processes; not a fork of the driver (the same command line)
    c = cmdline(pid)
    return b"ray" in c and c != mine

born = table().get(me, (0, 0))[1]
seen = {}

def scan():
    t = table()
    kids = {}
    for pid, (pp, st) in t.items():
        kids.setdefault(pp, []).append(pid)
    roots = [driver] + [p for p, st in seen.items() if t.get(p, (0, -1))[1] == st]
    todo, found = list(roots), set()
    while todo:
        for c in kids.get(todo.pop(), ()):
            if c != me and c not in found:
                found.add(c)
                todo.append(c)
    for pid in found:
        if pid not in seen and t[pid][1] >= born and is_ray(pid):
            seen[pid] = t[pid][1]
    return t

def kill_seen():
    t = table()
    for pid, st in seen.items():
        if t.get(pid, (0, -1))[1] == st:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

while True:
    scan()
    r, _, _ = select.select([0], [], [], scan_every)
    if r:
        data = os.read(0, 64)
        if not data:
            break
        if b"k" in data:
            scan()
            kill_seen()
scan()
kill_seen()
time.sleep(0.2)  # a process one of them started meanwhile
scan()
kill_seen()
"""


class Watchdog:
    """The watchdog process (see the module docstring); Linux only (elsewhere it does
    nothing)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        if not sys.platform.startswith("linux"):
            return
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-S", "-c", _SCRIPT, str(os.getpid()), str(SCAN_SECONDS)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except OSError:
            self.proc = None

    def kill_now(self) -> None:
        """Kill the Ray processes seen so far now (a start given up); the watchdog goes on."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"k")
                self.proc.stdin.flush()
            except OSError:
                pass

    def close(self, timeout: float = 2.0) -> None:
        """Close the pipe: the watchdog kills what is left of Ray's processes and exits
        (waited for up to ``timeout`` s). Idempotent."""
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            p.stdin.close()
        except OSError:
            pass
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
