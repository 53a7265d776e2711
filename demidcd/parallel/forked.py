"""Two stages over ``n`` parts in ``n`` processes, with a merge between them in this one.

:func:`fork_stages` runs ``first(k)`` for part k in process k (part 0 here, the others in
forked children), hands the ``n`` results to ``merge`` here, sends ``merge``'s k-th output to
process k, which runs ``second(k, that)`` and hands its result back. A child keeps what it
made in ``first`` for ``second`` (it is the same process), so only the small results travel:
through unnamed files in memory (``memfd_create``; a temporary file where that is missing),
pickled once each (arrays, not objects per token).

A child that raises makes the whole call raise (the same exception type and arguments); one
that dies raises :class:`PartFailed`. Children die with this process (``PR_SET_PDEATHSIG``),
ignore Ctrl-C and SIGTERM (this process handles them and kills them) and leave with
``os._exit`` (no exit handlers of the parent run twice).
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from .supervisor import PR_SET_PDEATHSIG, prctl

__all__ = ["PartFailed", "can_fork", "fork_stages", "scratch_file"]

_OK, _RAISED = b"o", b"r"


class PartFailed(RuntimeError):
    """A part's process died or its result could not be read."""


def can_fork() -> bool:
    """Whether :func:`fork_stages` can run parts in other processes."""
    return hasattr(os, "fork")


def scratch_file() -> Any:
    """An unnamed read-write file for a result handed between forked processes: in memory
    where the system allows (``memfd_create``: no disk's page cache written back, gone with
    its descriptors), else a temporary file."""
    if hasattr(os, "memfd_create"):
        try:
            return os.fdopen(os.memfd_create("demidcd-part", os.MFD_CLOEXEC), "w+b")
        except OSError:
            pass
    return tempfile.TemporaryFile()


def _send(f, value: Any) -> None:
    f.seek(0)
    f.truncate()
    pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
    f.flush()


def _load(f) -> Any:
    f.seek(0)
    return pickle.load(f)


def _child(k: int, first, second, out, inbox, up_w: int, down_r: int) -> None:
    """Process k: first, report, wait for the merge's part, second, report, leave."""
    code = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        for stage in (0, 1):
            try:
                if stage == 0:
                    value = (_OK, first(k))
                else:
                    if os.read(down_r, 1) != b"g":  # the parent gave up
                        break
                    value = (_OK, second(k, _load(inbox)))
            except BaseException as e:  # noqa: BLE001 - handed to the parent
                value = (_RAISED, (type(e), e.args, dict(e.__dict__)))
                try:
                    pickle.dumps(value)
                except Exception:  # noqa: BLE001 - cannot travel
                    value = (_RAISED, (PartFailed, (f"part {k}: {type(e).__name__}: {e}",), {}))
            _send(out, value)
            os.write(up_w, value[0])
            failed = value[0] == _RAISED
            del value  # (not kept while the merge runs)
            if failed:
                break
        code = 0
    except BaseException:  # noqa: BLE001, S110 - the parent sees a failed child
        pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _rebuilt(cls: type, args: tuple, attrs: dict) -> BaseException:
    e = cls.__new__(cls)
    e.args = args
    e.__dict__.update(attrs)
    return e


def fork_stages(n: int, first: Callable[[int], Any], merge: Callable[[list[Any]], list[Any]],
                second: Callable[[int, Any], Any]) -> list[Any]:
    """``[second(k, merge([first(0), …, first(n−1)])[k]) for k]``, part k in process k
    (module docstring); ``n`` = 1 (or no ``fork``) runs everything here."""
    if n <= 1 or not can_fork():
        a = [first(k) for k in range(n)]
        m = merge(a)
        return [second(k, m[k]) for k in range(n)]
    for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
        stream.flush()
    kids: list[tuple[int, Any, Any, int, int]] = []  # pid, out, inbox, up_r, down_w
    finished = False
    try:
        for k in range(1, n):
            out, inbox = scratch_file(), scratch_file()
            up_r, up_w = os.pipe()
            down_r, down_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(up_r)
                os.close(down_w)
                _child(k, first, second, out, inbox, up_w, down_r)
            os.close(up_w)
            os.close(down_r)
            kids.append((pid, out, inbox, up_r, down_w))
        results = [first(0)]
        results += [_collect(kid) for kid in kids]
        parts = merge(results)
        del results
        for (_, _, inbox, _, down_w), part in zip(kids, parts[1:], strict=True):
            _send(inbox, part)
            os.write(down_w, b"g")
        mine = second(0, parts[0])
        del parts
        out = [mine] + [_collect(kid) for kid in kids]
        for kid in kids:  # each has reported its last result: it is leaving
            os.waitpid(kid[0], 0)
        finished = True
        return out
    finally:
        for pid, out_f, inbox, up_r, down_w in kids:
            for fd in (up_r, down_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if not finished:
                _kill(pid)
            out_f.close()
            inbox.close()


def _collect(kid: tuple) -> Any:
    """The next result of a child (raising what it raised)."""
    pid, out, _, up_r, _ = kid
    tag = os.read(up_r, 1)
    if tag not in (_OK, _RAISED):
        raise PartFailed(f"a set-up process (pid {pid}) died")
    kind, value = _load(out)
    if kind == _RAISED:
        raise _rebuilt(*value)
    return value


def _kill(pid: int) -> None:
    """Kill and reap a child (an error or Ctrl-C here ended the stages early)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
