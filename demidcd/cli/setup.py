"""``train``'s set-up (reading, the feature dictionary, the encoding) in a short-lived child.

Reading a corpus and building its feature dictionary make Python objects per token and per
feature string (lists of ``str``, dicts), hundreds of MiB for a million tokens, and freeing them
afterwards gives little back: the few that survive (the dictionary's keys, modules imported on
the way) hold on to nearly every pymalloc arena. The processes that train are forked from the
command's process, so whatever it holds they share, and the run's peak memory counts it for the
whole training. :func:`run_in_child` therefore runs the set-up in a forked child, which hands
back only arrays and metadata (a :class:`~demidcd.estimators.sequence.PreparedFit`, the
dev and test corpora) through an unnamed file (:func:`~demidcd.parallel.forked.scratch_file`)
and exits, returning its memory to the system.

What the child prints (the ``data:`` line, warnings, the dictionary's progress lines) goes to the
same stdout and stderr as the parent's would, in the same order. An exception in the child is
raised again in the parent (its type, arguments and attributes); one that cannot travel, or a
child that dies, makes the caller run the set-up in its own process, which reproduces the error.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

_OK, _RAISED = "ok", "raised"


def run_in_child(fn: Callable[[], Any], meanwhile: Callable[[], None] | None = None
                 ) -> tuple[bool, Any]:
    """(True, ``fn()`` computed in a forked child process and unpickled here), or
    (False, None) when there is no ``fork`` or the child failed without an exception that
    travels (the caller then runs ``fn`` itself). An exception raised by ``fn`` in the child
    (KeyboardInterrupt included) is raised here. ``meanwhile()`` runs in a thread of this
    process while the child works (started after the fork, finished before this returns, so
    that no later fork copies it half-way; it must not fork itself).

    The result travels through an unnamed file (in memory where the system allows), read
    once the child has exited: the child's memory is returned before this process allocates
    the result's, so the two are never held at once (through a pipe they would be, for the
    whole transfer); the pickled bytes are, as a file's pages outside any process."""
    if not hasattr(os, "fork"):
        return False, None
    for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
        stream.flush()
    from ..parallel.forked import scratch_file

    with scratch_file() as tmp:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(fn, tmp.fileno())
        beside = threading.Thread(target=_idle_priority, args=(meanwhile,), daemon=True) \
            if meanwhile else None
        try:
            if beside is not None:
                beside.start()
            status = _wait(pid)
        except BaseException:  # Ctrl-C while waiting: the child goes too
            _kill(pid)
            raise
        finally:
            if beside is not None:
                beside.join()
        tmp.seek(0)
        try:
            tag, payload = pickle.load(tmp)
        except Exception:  # noqa: BLE001 - truncated or unreadable: the child failed
            tag, payload = None, None
    if tag == _RAISED:
        raise _rebuilt(*payload)
    if tag != _OK or status != 0:
        return False, None
    return True, payload


def _idle_priority(fn: Callable[[], None]) -> None:
    """``fn()`` in this thread at the lowest priority (Linux: a thread's own nice value), so
    that it takes the cores the child and its parts leave idle, not theirs."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
    fn()


def _wait(pid: int) -> int:
    """Wait for the child ``pid``; returns its status. Its resident high-water mark
    (``wait4``'s ``ru_maxrss``) goes to the run's peak memory
    (:meth:`~demidcd.primitives.monitor.RunPeak.note_all`): the set-up's peak is the command's
    too, even when it fell between two readings of the process tree."""
    from ..primitives.monitor import RunPeak

    if not hasattr(os, "wait4"):
        return os.waitpid(pid, 0)[1]
    _, status, usage = os.wait4(pid, 0)
    RunPeak.note_all(int(usage.ru_maxrss) * 1024)  # (KiB on Linux)
    return status


def _child(fn: Callable[[], Any], fd: int) -> None:
    """The forked child: run ``fn``, write (tag, payload) to the file ``fd``, leave without
    running the parent's clean-up (its model lock is the parent's) or exit handlers."""
    from ..primitives.pages import SETUP_MALLOC_THRESHOLD, fixed_malloc_thresholds
    from .log import CLEANUP

    fixed_malloc_thresholds(SETUP_MALLOC_THRESHOLD)  # its temporaries (primitives.pages)
    CLEANUP.clear()  # (the parent's lock and files: not the child's to undo)
    code = 1
    try:
        _die_with_parent()
        try:
            out = (_OK, fn())
        except BaseException as e:  # noqa: BLE001 - handed to the parent
            out = (_RAISED, (type(e), e.args, dict(e.__dict__)))
            try:
                pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - cannot travel: the parent runs fn itself
                out = ("failed", None)
        try:
            with os.fdopen(fd, "wb", closefd=False) as f:
                pickle.dump(out, f, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as e:  # e.g. ulimit -f, a full /tmp: the parent repeats the set-up
            print(f"demidcd: warning: the set-up could not be handed to the training process "
                  f"({e.strerror or e}): it runs again there (its lines above come twice)",
                  file=sys.stderr, flush=True)
            raise
        code = 0
    except BaseException:  # noqa: BLE001, S110 - the parent sees a failed child
        pass
    finally:
        exit_now(code)


def exit_now(code: int) -> None:
    """Flush standard output and error (as far as they still can be) and leave the process
    at once with ``code``: no interpreter shutdown, no waiting for other threads."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _die_with_parent() -> None:
    """SIGKILL this child when the parent dies (Linux), so that no orphan goes on reading;
    Ctrl-C and SIGTERM are the parent's to handle (it kills the child and says so, once)."""
    from ..parallel.supervisor import PR_SET_PDEATHSIG, prctl

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass


def _rebuilt(cls: type, args: tuple, attrs: dict) -> BaseException:
    """The exception of class ``cls`` with ``args`` and attributes ``attrs``, made without
    calling its ``__init__`` (whose signature may differ from ``args``)."""
    e = cls.__new__(cls)
    e.args = args
    e.__dict__.update(attrs)
    return e
