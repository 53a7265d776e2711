"""The ``demidcd`` command line as a real process, for the tests that need one.

``run(*args)`` is ``python -m demidcd *args`` with its output captured. Starting an interpreter
and importing numpy and numba costs about 0.8 s per call, more than most commands under test
take, so ``run`` forks each command from a server process that imported ``demidcd.cli`` once
(one server per calling thread): the command still runs in its own process, from
``demidcd.__main__.run`` with its own ``sys.argv``, file descriptors 0-2, exit status and
signal handlers, exactly as the console script does. A call with ``env=`` (read at import)
starts a fresh interpreter instead. Tests that signal the process use ``CLI`` with ``Popen``.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
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
    """One forking server: a process that imported the CLI and forks a child per command."""

    def __init__(self) -> None:
        r, w = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(w)], pass_fds=(w,),
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        os.close(w)
        self.replies = os.fdopen(r, "r")

    def run(self, args: list[str], timeout: float, cwd: Any, input: Any, merge: bool
            ) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="cli_run") as d:
            paths = {k: os.path.join(d, k) for k in ("stdin", "stdout", "stderr")}
            data = input if input is not None else ""
            Path(paths["stdin"]).write_bytes(data if isinstance(data, bytes) else data.encode())
            for k in ("stdout", "stderr"):
                Path(paths[k]).touch()
            req = {"argv": [str(a) for a in args], "timeout": timeout,
                   "cwd": str(cwd) if cwd else None, **paths}
            if merge:
                req["stderr"] = None
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.replies.readline()
            if not line:
                raise RuntimeError("the CLI fork server died")
            status = json.loads(line)["status"]
            out = Path(paths["stdout"]).read_text(errors="replace")
            err = None if merge else Path(paths["stderr"]).read_text(errors="replace")
        if status == "timeout":
            raise subprocess.TimeoutExpired([*CLI, *args], timeout, out, err)
        return subprocess.CompletedProcess([*CLI, *args], status, out, err)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()


_local = threading.local()
_servers: list[_Server] = []


@atexit.register
def _close_servers() -> None:
    for s in _servers:
        s.close()


def run(*args: str, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
    """``demidcd *args``, its output captured as text (``cwd=``, ``input=``, ``env=`` and
    ``stderr=subprocess.STDOUT`` as for :func:`subprocess.run`)."""
    merge = kw.pop("stderr", None) == subprocess.STDOUT
    if set(kw) - {"cwd", "input"}:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                              **kw)
    server = getattr(_local, "server", None)
    if server is None or server.proc.poll() is not None:
        server = _local.server = _Server()
        _servers.append(server)
    return server.run(list(args), timeout, kw.get("cwd"), kw.get("input"), merge)


def train_model(corpus: Path, max_epochs: int) -> Path:
    """``corpus/m.npz``: one process trained on ``corpus/train.txt`` (min_count 1)."""
    m = corpus / "m.npz"
    r = run("train", "--train", str(corpus / "train.txt"), "--threads", "1", "--max-epochs",
            str(max_epochs), "--min-count", "1", "--model", str(m), "--quiet")
    assert r.returncode == 0, r.stderr
    return m
