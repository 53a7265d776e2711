"""What a command runs with besides its work: the log (:class:`Log`), inference in an
interruptible thread (:func:`interruptible`), and the signal handling that makes Ctrl-C,
SIGTERM and a dying parent stop a run cleanly (exit 130, one line, the model reached kept).

The module-level lists are the state a run shares with its handlers: :data:`RUNNING` (the
inference threads), :data:`KEPT` (what an interrupt now leaves of the model, said with it) and
:data:`CLEANUP` (callables undoing what a command started: a lock, a temp file)."""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import warnings
from typing import Any

from ..errors import InputWarning
from ..progress import Cadence, format_dev

ENVIRONMENT_ERRNOS = frozenset(getattr(errno, n) for n in (
    "EFBIG", "ENOSPC", "EDQUOT", "ENOMEM", "EROFS", "EMFILE", "ENFILE") if hasattr(errno, n))
"""OSErrors of the machine or of a limit the user set (``ulimit -f``, a full disk, no more
memory or files): one line naming what failed, exit 2, as a bad input is."""


class Log:
    """Human log on stdout (unless quiet); JSON lines to a file, written atomically at the end.

    On a terminal the per-iteration lines become a tqdm progress bar (elapsed time, iterations,
    and the latest record as its status); elsewhere (files, pipes, CI) plain lines at the
    cadence of ``--verbose`` (:class:`~demidcd.progress.Cadence`: 1, the first ones, then at
    powers of two and every few seconds, and the last; 2 every one). The JSON lines keep every
    record.
    """

    def __init__(self, quiet: bool, json_path: str | None, verbose: int = 1):
        self.quiet, self.json_path, self.records = quiet, json_path, []
        self.cadence = Cadence(verbose, "--verbose 2")
        self.bar = None
        if not quiet and sys.stdout.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(unit=" iter", dynamic_ncols=True, leave=False)
            except ImportError:
                pass

    def info(self, msg: str) -> None:
        if self.quiet:
            return
        try:
            if self.bar is not None:
                self.bar.write(msg)
            else:
                print(msg, flush=True)
        except BrokenPipeError:
            raise
        except OSError as e:  # ulimit -f, a full disk: the run goes on, without its log
            if e.errno not in ENVIRONMENT_ERRNOS:
                raise
            self.quiet = True
            print(f"demidcd: warning: the log cannot be written to standard output "
                  f"({e.strerror or e}): the run goes on without it", file=sys.stderr,
                  flush=True)

    def iteration(self, rec: dict) -> None:
        self.records.append(rec)
        if self.bar is not None:
            self.bar.update(1)
            dev = f" {format_dev(rec)}" if "dev" in rec else ""
            shown = "".join(f" {k} {rec[k]:,}" if k == "active" else f" {k} {rec[k]:.3g}"
                            for k in ("active", "max_pg") if k in rec)
            head = f"objective {rec['objective']:.7g}" if "gnorm" in rec else \
                f"updates {rec.get('total_updates', 0):,}"  # (an L-BFGS CRF's: no updates)
            self.bar.set_postfix_str(f"{head}{shown}{dev}", refresh=False)
        else:
            for line in self.cadence.lines(rec):
                self.info(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        for line in self.cadence.final():  # the log ends with the last iteration's figures
            self.info(line)
        if self.json_path:
            from ..io.model import atomic_write

            text = "".join(json.dumps(r) + "\n" for r in self.records)
            atomic_write(self.json_path, lambda f: f.write(text), mode="w")


def interruptible(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in a worker thread while the main thread waits in short slices, so that
    SIGINT/SIGTERM are honoured within a fraction of a second even while a compiled kernel
    (which releases the GIL but never returns to Python, e.g. parsing a very long sentence)
    runs: the handler raises KeyboardInterrupt here and the command exits with 130. The thread
    is a daemon; the process ends without waiting for it (:func:`main`)."""
    import threading

    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.is_alive: an interrupted join() marks the thread
    # stopped while it still runs (CPython's fix for bpo-45274, in 3.11)

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            box["error"] = e
        finally:
            done.set()

    RUNNING.append(done)
    threading.Thread(target=run, name="demidcd-inference", daemon=True).start()
    while not done.wait(0.1):
        pass
    RUNNING.remove(done)
    if "error" in box:
        raise box["error"]
    return box["value"]


RUNNING: list[Any] = []  # "done" events of inference threads (left running by an interrupt)
KEPT: list[str] = []  # what an interrupt of train now leaves of the model, said with it

_default_showwarning = warnings.showwarning


def show_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
    """An :class:`InputWarning` as one ``demidcd: warning: …`` line on stderr; others as
    Python shows them."""
    if issubclass(category, InputWarning):
        print(f"demidcd: warning: {message}", file=sys.stderr, flush=True)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


CLEANUP: list[Any] = []  # callables undoing what a command started (a lock, a temp file)


def early_exit(signum: int, frame: object) -> None:
    """SIGINT/SIGTERM while modules load (or kernels compile): nothing is written yet, so leave
    at once, after the :data:`CLEANUP` callables (a model lock's file)."""
    for undo in reversed(CLEANUP):
        try:
            undo()
        except Exception:  # noqa: BLE001, S110 - leaving anyway
            pass
    sys.stderr.write("demidcd: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def interrupt(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM once modules are loaded: :meth:`StopRequest.handler` (a flag while
    training, else KeyboardInterrupt), except inside numba or llvmlite outside training (compiling
    or loading the kernels, before any worker or shared memory exists): there a
    KeyboardInterrupt unwinding through LLVM can crash the process (SIGSEGV, heap
    corruption), so leave at once as while modules load."""
    from ..solvers.common import StopRequest

    if not StopRequest.active:
        f = frame
        while f is not None:
            if str(f.f_globals.get("__name__", "")).startswith(("numba", "llvmlite")):
                early_exit(signum, frame)
            f = f.f_back
    StopRequest.handler(signum, frame)


def stop_with_parent() -> None:
    """A command-line run stops as on SIGTERM (the model reached is saved, the workers and the
    shared memory go) when the process that started it dies: a killed ``timeout`` or job
    runner, a closed terminal. Otherwise it would go on detached, holding the cores and its
    model's lock. Not when it was started to outlive its parent: SIGHUP ignored (``nohup``) or
    a session of its own (``setsid``). Linux's ``PR_SET_PDEATHSIG`` delivers SIGHUP; a parent
    that died before it took effect is noticed by ``getppid``."""
    from ..parallel.supervisor import PR_SET_PDEATHSIG, prctl

    if (prctl is None or signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            or os.getsid(0) == os.getpid()):
        return
    parent = os.getppid()
    if parent == 1:  # already reparented, e.g. a container's init started us
        return
    signal.signal(signal.SIGHUP, interrupt)
    prctl(PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGHUP)


def quiet_interrupt(u: Any) -> None:
    """A Ctrl-C raised inside a callback Python cannot propagate from (llvmlite's object-cache
    callback while numba compiles) is printed as "Exception ignored ... Traceback"; the stop
    flag it set ends the run at its next check, so say nothing. Anything else: the default."""
    if not isinstance(u.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(u)


def stop_requested() -> bool:
    mod = sys.modules.get("demidcd.solvers.common")
    return bool(mod is not None and mod.StopRequest.requested)
