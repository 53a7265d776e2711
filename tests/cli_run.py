"""The ``demidcd`` command line as a real process, for the tests that need one.

``run(*args)`` is ``python -m demidcd *args`` with its output captured. Starting an interpreter
and importing numpy and numba costs about 0.8 s per call, more than most commands under test
take, so ``run`` forks each command from a server process that imported ``demidcd.cli`` once
(one server per calling thread): the command still runs in its own process, from
``demidcd.__main__.run`` with its own ``sys.argv``, file descriptors 0-2, exit status and
signal handlers, exactly as the console script does. A call with ``env=`` (read at import)
starts a fresh interpreter instead. ``spawn(*args)`` starts a command the same way without
waiting for it and returns a handle with :class:`subprocess.Popen`'s ``pid``, ``poll``, ``wait``,
``communicate``, ``send_signal`` and ``returncode``, for the tests that signal a run; the tests
of a cold start (Ctrl-C while modules load or numba compiles) start ``CLI`` with ``Popen``.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "demidcd"]

_SERVER = r'''
import json, os, signal, sys, time
import importlib, pkgutil
import demidcd
import demidcd.__main__ as entry
for m in pkgutil.walk_packages(demidcd.__path__, "demidcd."):  # what the commands import
    if not m.name.endswith((".ray", "__main__")):
        importlib.import_module(m.name)
import tempfile
with tempfile.TemporaryDirectory() as d:  # load the sequence kernels once, for every child
    for argv in (["generate", "--out-dir", d, "--sentences", "40", "--quiet"],
                 ["train", "--train", d + "/train.txt", "--threads", "1", "--max-epochs", "2",
                  "--model", d + "/m.npz", "--quiet"],
                 ["predict", "--model", d + "/m.npz", "--data", d + "/test.txt", "--out",
                  d + "/p.txt", "--quiet"]):
        demidcd.cli.main(argv)
requests = os.fdopen(0, "r"); replies = os.fdopen(int(sys.argv[1]), "w")
for line in requests:
    q = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgrp()
            if q["cwd"]:
                os.chdir(q["cwd"])
            w = os.O_WRONLY | os.O_APPEND
            for fd, path, flags in ((0, q["stdin"], os.O_RDONLY), (1, q["stdout"], w),
                                    (2, q["stderr"] or q["stdout"], w)):
                f = os.open(path, flags)
                os.dup2(f, fd)
                os.close(f)
            sys.argv = ["demidcd", *q["argv"]]
            signal.signal(signal.SIGINT, signal.default_int_handler)
            entry.run()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        os._exit(code)
    if q["detach"]:
        replies.write(json.dumps({"pid": pid}) + "\n"); replies.flush()
    deadline = time.monotonic() + q["timeout"]
    status = None
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(st)
        elif time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = "timeout"
        else:
            time.sleep(0.005)
    replies.write(json.dumps({"status": status}) + "\n"); replies.flush()
'''


class _Server:
    """One forking server: a process that imported the CLI and forks a child per command; it
    replies with the child's pid (detached commands) and then its exit status."""

    def __init__(self) -> None:
        r, w = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(w)], pass_fds=(w,),
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        os.close(w)
        self.fd, self.buf = r, b""

    def request(self, args: list[str], timeout: float, cwd: Any, paths: dict[str, str | None],
                detach: bool) -> None:
        req = {"argv": [str(a) for a in args], "timeout": timeout, "detach": detach,
               "cwd": str(cwd) if cwd else None, **paths}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float | None = None) -> dict | None:
        """The next reply, or None when none came within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], wait)[0]:
                return None
            chunk = os.read(self.fd, 4096)
            if not chunk:
                raise RuntimeError("the CLI fork server died")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()
        os.close(self.fd)


_lock = threading.Lock()
_idle: list[_Server] = []  # servers waiting for a command
_servers: list[_Server] = []


@atexit.register
def _close_servers() -> None:
    for s in _servers:
        s.close()


def _take() -> _Server:
    with _lock:
        while _idle:
            s = _idle.pop()
            if s.proc.poll() is None:
                return s
        s = _Server()
        _servers.append(s)
        return s


def _give(s: _Server) -> None:
    with _lock:
        _idle.append(s)


def _stdio(d: str, input: Any, stdout: Any, stderr: Any) -> tuple[dict, dict]:
    """The files of a child's descriptors 0-2 (stderr None: the stdout file) and those the
    caller reads afterwards."""
    paths: dict[str, str | None] = {"stdin": os.path.join(d, "stdin")}
    data = input if input is not None else ""
    Path(paths["stdin"]).write_bytes(data if isinstance(data, bytes) else data.encode())
    ours = {}
    for k, v in (("stdout", stdout), ("stderr", stderr)):
        if k == "stderr" and v == subprocess.STDOUT:
            paths[k] = None
        elif hasattr(v, "name"):  # an open file
            v.flush()
            paths[k] = v.name
        else:
            paths[k] = ours[k] = os.path.join(d, k)
            Path(ours[k]).touch()
    return paths, ours


def run(*args: str, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
    """``demidcd *args``, its output captured as text (``cwd=``, ``input=``, ``env=`` and
    ``stderr=subprocess.STDOUT`` as for :func:`subprocess.run`)."""
    stderr = kw.pop("stderr", None)
    if set(kw) - {"cwd", "input"}:
        return subprocess.run([*CLI, *args], stdout=subprocess.PIPE, text=True, timeout=timeout,
                              stderr=subprocess.STDOUT if stderr == subprocess.STDOUT
                              else subprocess.PIPE, **kw)
    server = _take()
    with tempfile.TemporaryDirectory(prefix="cli_run") as d:
        paths, ours = _stdio(d, kw.get("input"), None, stderr)
        server.request(list(args), timeout, kw.get("cwd"), paths, False)
        status = server.reply()["status"]
        _give(server)
        out = Path(ours["stdout"]).read_text(errors="replace")
        err = Path(ours["stderr"]).read_text(errors="replace") if "stderr" in ours else None
    if status == "timeout":
        raise subprocess.TimeoutExpired([*CLI, *args], timeout, out, err)
    return subprocess.CompletedProcess([*CLI, *args], status, out, err)


class Spawned:
    """A command forked by a server and not waited for: :class:`subprocess.Popen`'s interface
    (text output; ``stdout``/``stderr``: PIPE, an open file, or ``STDOUT`` for stderr)."""

    def __init__(self, args: list[str], stdout: Any, stderr: Any, cwd: Any) -> None:
        self.args = [*CLI, *args]
        self.returncode: int | None = None
        self._server = _take()
        self._dir = tempfile.TemporaryDirectory(prefix="cli_spawn")
        paths, self._ours = _stdio(self._dir.name, None, stdout, stderr)
        self._server.request(list(args), 3600, cwd, paths, True)
        self.pid = int(self._server.reply()["pid"])

    def _done(self, reply: dict | None) -> int | None:
        if reply is not None:
            self.returncode = -signal.SIGKILL if reply["status"] == "timeout" else reply["status"]
            _give(self._server)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            return self._done(self._server.reply(0))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._done(self._server.reply(timeout)) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        self.wait(timeout)
        return tuple(Path(self._ours[k]).read_text(errors="replace") if k in self._ours
                     else None for k in ("stdout", "stderr"))

    def send_signal(self, sig: int) -> None:
        """As Popen's: a process that has already ended is not an error."""
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(*args: str, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
          cwd: Any = None) -> Spawned:
    """``demidcd *args`` started in the background (see the module docstring)."""
    return Spawned(list(args), stdout, stderr, cwd)


def train_model(corpus: Path, max_epochs: int) -> Path:
    """``corpus/m.npz``: one process trained on ``corpus/train.txt`` (min_count 1)."""
    m = corpus / "m.npz"
    r = run("train", "--train", str(corpus / "train.txt"), "--threads", "1", "--max-epochs",
            str(max_epochs), "--min-count", "1", "--model", str(m), "--quiet")
    assert r.returncode == 0, r.stderr
    return m
