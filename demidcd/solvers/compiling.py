"""Kernel compilation before the clock: which warm-up calls compile, in parallel, and the notice.

numba compiles a kernel the first time it is called with new argument types, or loads it from
its on-disk cache (``cache=True``, under ``NUMBA_CACHE_DIR`` when set). On a fresh install that
is tens of seconds per learner, before a user's time limit starts (:func:`~demidcd.solvers.
warm_up`). Three things here:

* :func:`compile_jobs` runs a warm-up given as independent jobs (name, callable, weight). Each job
  is first *probed* in this process with compilation forbidden: a job whose kernels are all in
  memory or in the cache runs to its end, one that would compile stops at its first compile
  (:class:`_Forbid`, a numba ``numba:compile`` listener; the event fires only for a real
  compile, never for a cache load). When some jobs need compiling and the cache is writable,
  they are split by weight between forked children, one per usable core (a compile holds the
  GIL: parallel compiling needs processes; and what LLVM allocates for a compile stays with
  the process that compiled, so this one, whose pages a training run's workers share, only
  loads); each child compiles its share into the cache and exits, then this process runs every
  job again, loading what the children cached (without a writable cache it compiles them all).
  A child that fails, or a cache that cannot be written, only costs time: whatever is
  missing is compiled here. Ctrl-C (or any exception) kills and reaps the children, and a
  child dies with this process however it ends (``PR_SET_PDEATHSIG``).
* :class:`CompileWatch` counts the real compiles of a block (the same event).
* :func:`compile_notice` says ``compiling kernels …`` when, and only when, something compiles
  (not after a delay: a slow warm-up that compiles nothing says nothing), and ``kernels ready
  after N s`` then. A library fit that logs nowhere (``log`` None or the silent ``demidcd``
  logger) gets the first as a :class:`~demidcd.errors.CompileWarning`, with the time limit it
  stands outside of.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from numba.core import event as nb_event

Job = tuple  # (name, the calls, rough compile seconds[, wave]): see compile_jobs

NOTICE = "compiling kernels, once per install (numba caches them; later runs start at once)"


class NeedsCompile(Exception):
    """Raised by :class:`_Forbid` at the first compile a probed job would do."""


class _Forbid(nb_event.Listener):
    """Stop the calls under way at their first real compile (a cache load passes)."""

    def on_start(self, event: Any) -> None:
        raise NeedsCompile(event.data["dispatcher"].py_func.__qualname__)

    def on_end(self, event: Any) -> None:  # (the end of the compile it stopped)
        pass


_PROBING = [False]  # a probe under way (or a compiling child): no compiles to count or tell


class CompileWatch(nb_event.Listener):
    """Counts the top-level real compiles while installed (:meth:`watching`), calling
    ``on_first()`` when the first one starts. ``seconds``: their total duration."""

    def __init__(self, on_first: Callable[[], None] | None = None):
        self.on_first, self.compiled, self.seconds = on_first, 0, 0.0
        self._depth, self._t0 = 0, 0.0

    def on_start(self, event: Any) -> None:
        if _PROBING[0]:
            return
        if self._depth == 0:
            self._t0 = time.perf_counter()
            if self.compiled == 0 and self.on_first is not None:
                first, self.on_first = self.on_first, None
                first()
            self.compiled += 1
        self._depth += 1

    def on_end(self, event: Any) -> None:
        if _PROBING[0]:
            return
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._t0

    @contextmanager
    def watching(self) -> Iterator[CompileWatch]:
        with nb_event.install_listener("numba:compile", self):
            yield self


def _probe(fn: Callable[[], Any]) -> bool:
    """Run ``fn`` with compiling forbidden: True when it ran to its end (nothing to compile)."""
    _PROBING[0] = True
    try:
        with nb_event.install_listener("numba:compile", _Forbid()):
            fn()
    except NeedsCompile:
        return False
    finally:
        _PROBING[0] = False
    return True


def load_jobs(jobs: list[Job]) -> int:
    """Run every job with compiling forbidden (what is in numba's cache is loaded, a job stops
    at its first compile); the number of jobs that ran to their end. Safe beside other work
    in this process: it never compiles nor forks."""
    return sum(_probe(job[1]) for job in jobs)


def cache_writable() -> bool:
    """Whether numba can write its cache where this install's kernels are cached (the
    ``NUMBA_CACHE_DIR``, else beside the package's sources); children compile for nothing
    otherwise."""
    from numba.core.config import CACHE_DIR

    where = CACHE_DIR or os.path.dirname(os.path.abspath(__file__))
    while where and not os.path.exists(where):
        where = os.path.dirname(where)
    return bool(where) and os.access(where, os.W_OK)


def _split(jobs: list[Job], parts: int) -> list[list[Job]]:
    """``jobs`` in ``parts`` groups of about equal weight (largest first, each to the lightest
    group)."""
    groups: list[list[Job]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for job in sorted(jobs, key=lambda j: -j[2]):
        k = load.index(min(load))
        groups[k].append(job)
        load[k] += job[2]
    return [g for g in groups if g]


@dataclass
class CompileReport:
    """What :func:`compile_jobs` did: the jobs that compiled (names), the processes used and
    the estimate it made (seconds, from the jobs' weights)."""

    cold: list[str] = field(default_factory=list)
    processes: int = 1
    estimate: float = 0.0


def compile_jobs(jobs: list[Job], processes: int | None = None,
                 on_cold: Callable[[CompileReport], None] | None = None) -> CompileReport:
    """Run every job (see the module docstring), compiling the cold ones on up to
    ``processes`` processes (None: the cores this process may use). A job's optional fourth
    element is its wave (default 0): the jobs of a wave run after every job of the waves
    before (a kernel whose callees an earlier wave compiled into the cache). ``on_cold(report)``
    is called once before any compiling starts, when some job needs it."""
    report = CompileReport()
    for wave in sorted({_wave(j) for j in jobs}):
        _compile_wave([j for j in jobs if _wave(j) == wave], processes, report, on_cold)
        if report.cold:
            on_cold = None
    return report


def _wave(job: tuple) -> int:
    return int(job[3]) if len(job) > 3 else 0


def _compile_wave(jobs: list[Job], processes: int | None, report: CompileReport,
                  on_cold: Callable[[CompileReport], None] | None) -> None:
    """:func:`compile_jobs` of one wave, adding to ``report``."""
    from ..primitives.monitor import usable_cores

    cold = [job for job in jobs if not _probe(job[1])]
    if not cold:
        return
    report.cold += [j[0] for j in cold]
    p = max(1, min(processes or usable_cores(), len(cold)))
    writable = cache_writable()
    if p > 1 and not writable:
        p = 1
    groups = _split(cold, p)
    # with a cache to write, every group compiles in a child and this process only loads
    # (LLVM's memory of a compile stays with the process that compiled: a training run's
    # parent, whose pages its workers share, kept it through training)
    here, away = ([], groups) if writable and len(groups) > 1 else (groups[0], groups[1:])
    report.processes = max(report.processes, len(groups))
    report.estimate += max(sum(j[2] for j in g) for g in groups)
    if on_cold is not None:
        on_cold(report)
    if away:  # compiled out of sight of this process's watch: the notice under way is told
        _tell_active(len(cold))
    children: list[int] = []
    try:
        for g in away:
            pid = _fork_compiler(g)
            if pid:
                children.append(pid)
        for job in here:
            job[1]()
        while children:  # the children's jobs, cached by them: loaded below
            os.waitpid(children[0], 0)
            children.pop(0)
    finally:
        for pid in children:  # interrupted: no compiler is left behind
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    for g in away:
        for job in g:
            job[1]()


def _fork_compiler(group: list[Job]) -> int:
    """Fork a child that runs ``group`` (compiling into numba's cache) and exits at once (no
    exit handlers of this process run there); its pid, or 0 when the fork failed (the jobs
    then compile here)."""
    from ..parallel.supervisor import die_with_parent

    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid:
        return pid
    code = 0
    try:
        die_with_parent(parent)  # however the parent ends (the CLI's Ctrl-C: os._exit)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it with the parent
        _PROBING[0] = True  # the parent's notice is the parent's to give
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for job in group:
                job[1]()
    except BaseException:
        code = 1
    finally:
        os._exit(code)
    return 0  # pragma: no cover


_OPEN: dict[str, Any] = {}  # a notice held open by compile_notice(hold=True)
_ACTIVE: list[dict] = []  # the notice under way (an inner one leaves the saying to it)


def _tell_active(jobs: int) -> None:
    """The notice under way (if any) learns that ``jobs`` jobs compile in children, as its
    :class:`CompileWatch` learns of a compile here: its notice is given once."""
    for state in _ACTIVE[-1:]:
        watch = state["watch"]
        if watch.on_first is not None:
            first, watch.on_first = watch.on_first, None
            first()
        watch.compiled += jobs


def _silent(log: Any) -> bool:
    """Whether ``log`` shows nothing by default (None, or the ``demidcd`` logger's INFO of a
    library fit at verbose 0)."""
    from ..progress import LOGGER

    return log is None or getattr(log, "__self__", None) is LOGGER


@contextmanager
def compile_notice(log: Any, time_limit: float | None = None,
                   hold: bool = False) -> Iterator[CompileWatch]:
    """Say ``compiling kernels, once per install …`` when a kernel starts compiling inside
    this block (numba's ``numba:compile`` event: only a real compile, never a cache load), and
    ``kernels ready after N s`` at its end then (N from the block's start). Nothing is said when
    nothing compiles, however long the block takes. Where ``log`` shows nothing (None, or the
    ``demidcd`` logger of a library fit at verbose 0) the first line is also a
    :class:`~demidcd.errors.CompileWarning`, naming ``time_limit``: compiling is set-up the time
    limit does not count.

    ``hold``: keep the notice open after the block: the next :func:`compile_notice` continues
    it (one ``kernels ready`` line for both, timed from the first block's start; used when
    ``learners="auto"`` compiles what it measures before the run compiles the rest)."""
    if _ACTIVE:  # inside another notice: that one says it all
        yield _ACTIVE[-1]["watch"]
        return
    state = _OPEN.pop("state", None)
    if state is None or state["log"] != log:
        state = {"log": log, "t0": time.perf_counter(), "said": False, "watch": None}
    watch = state["watch"] or CompileWatch()
    state["watch"] = watch

    def announce() -> None:
        if state["said"]:
            return
        state["said"] = True
        limit = (f"; this set-up is outside the time limit of {time_limit:g} s, which starts "
                 "after it" if time_limit else "")
        if log is not None:
            log(f"{NOTICE}{limit} ...")
        if _silent(log):
            from ..errors import CompileWarning

            warnings.warn(CompileWarning(
                f"demidcd: {NOTICE}: roughly half a minute to a few minutes on a cold cache"
                f"{limit or ', before training starts'}"), stacklevel=_caller_level())

    watch.on_first = None if state["said"] else announce
    _ACTIVE.append(state)
    try:
        with watch.watching():
            yield watch
    finally:
        _ACTIVE.pop()
    if hold:
        _OPEN["state"] = state
        return
    if state["said"] and log is not None:
        log(f"kernels ready after {time.perf_counter() - state['t0']:.1f}s")


def _caller_level() -> int:
    """The ``stacklevel`` naming the first frame outside the package and numba."""
    f, level = sys._getframe(1), 1
    while f is not None and str(f.f_globals.get("__name__", "")).split(".")[0] in (
            "demidcd", "numba", "contextlib"):
        f, level = f.f_back, level + 1
    return level
