"""Learners. :func:`train` is the one entry point: it maps an algorithm name to a schedule.

Every learner takes a :class:`~demidcd.tasks.base.Task` and a
:class:`~demidcd.solvers.common.SolverConfig`, and returns a
:class:`~demidcd.solvers.common.TrainResult`; none of them knows which task it trains.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import OptionError
from ..tasks.base import Task
from . import multi_dcd
from .common import Callback, SolverConfig, TrainResult

SINGLE_PROCESS = ("dcd", "dcd-light")
ALGORITHMS = ("dcd", "dcd-light", "demi-dcd", "ms-dcd", "sp-ipm")


def check_memory(task: Task, threads: int, ring_words: int) -> None:
    """Fail early when the weight vectors alone would not fit in the available memory: the
    learner's w, the shared [w, A] (two buffers) and the rings (threads > 1), and one w per
    SP-IPM mapper."""
    import psutil

    from ..errors import DemidcdError

    dim, n = task.dim, task.n_examples
    need = 8 * dim * 2
    if threads > 1:
        need += 16 * (dim + n) + 8 * ring_words * (threads - 1) + 8 * dim * (threads - 1)
    avail = psutil.virtual_memory().available
    if need > avail:
        raise DemidcdError(f"training needs at least {need / 2**30:.1f} GiB for {dim:,} weights "
                           f"on {threads} processes but only {avail / 2**30:.1f} GiB is "
                           "available; use --hashing, a larger --min-count or fewer --threads")


def warm_up(task: Task, algorithm: str, threads: int) -> None:
    """Compile (or load from numba's cache) every kernel the run will call, on example 0, before
    the solver's clock starts and before any worker forks (workers inherit the compiled code).

    On a cold cache (a fresh install) compilation takes seconds: without this it lands on the
    clock of whichever learner runs first, and a DEMI-DCD learner sits on empty active sets
    while its worker compiles the inference kernels (a 1 s CI run then made no update at all).
    """
    from .activeset import ActiveSets

    ex = np.zeros(1, np.int64)
    w = np.zeros(task.dim)
    batch = task.loss_augmented(w, ex)
    if algorithm == "sp-ipm":
        task.argmax_records(w, ex)
    elif threads > 1 and task.inference_dtype != np.float64:  # the workers' w̄
        task.loss_augmented(w.astype(task.inference_dtype), ex)
    ActiveSets(1, task.dim, 1.0, track_changes=threads > 1, w=w).compile_kernels(batch)
    if threads > 1:
        from ..parallel.engine import rounding_slack
        from ..parallel.ring import warmup as ring_warmup
        from ..parallel.seqlock import warmup as seqlock_warmup

        ring_warmup()
        seqlock_warmup()
        for dt in {np.float64, task.inference_dtype}:
            wa = np.zeros(task.dim + 1, dt)
            rounding_slack(wa, task.dim, np.zeros(1, np.int64), np.zeros(2, np.int64),
                           np.zeros(0, np.int32), np.zeros(0), 1.0)


def train(task: Task, algorithm: str, config: SolverConfig, threads: int = 1,
          callback: Callback | None = None, cpu_log: str | None = None,
          log: Any = None, tick: Any = None, **engine: Any) -> TrainResult:
    """Train ``task`` with ``algorithm`` on ``threads`` processes.

    ``threads = 1`` always means single-process DCD (DCD-SSVM, or DCD-Light when asked);
    ``tick(seconds, w)`` is called by the learner between blocks of work (snapshots);
    ``engine`` options (``rho``, ``rho_worker``, ``debug``, DEMI-DCD's ``learners`` (K or
    ``"auto"``) and ``update_mode`` (see :mod:`.multi_dcd`), SP-IPM's
    ``perceptron_epochs_per_round``, ``mixing``, ``averaged``) go to the parallel schedules,
    which ignore the ones that are not theirs.
    """
    if threads < 1:
        raise OptionError(f"--threads must be >= 1, got {threads}")
    if algorithm not in ALGORITHMS:
        raise OptionError(f"unknown --algorithm {algorithm!r}; choose one of "
                          f"{', '.join(ALGORITHMS)}")
    config.validate()
    check_memory(task, threads, engine.get("ring_words", 1 << 22))
    with compile_notice(log):
        warm_up(task, algorithm, threads)
    if threads == 1 or algorithm in SINGLE_PROCESS:
        from ..parallel.monitor import CpuMonitor
        from .dcd import train_dcd

        mon = CpuMonitor({"learner": os.getpid()}).start()
        try:
            res = train_dcd(task, config, callback, light=algorithm == "dcd-light", tick=tick)
        finally:
            mon.stop()
        if cpu_log:
            mon.write_csv(cpu_log)
        res.extra.update(cpu_average=mon.average(), cpu_line=mon.summary_line(1),
                         memory_line=mon.memory_line(), peak_rss=mon.peak_rss)
        return res
    engine = {k: v for k, v in engine.items() if v is not None}
    if algorithm == "ms-dcd":
        from .ms_dcd import train_ms_dcd as schedule
    elif algorithm == "sp-ipm":
        from .sp_ipm import train_sp_ipm as schedule
    elif multi_dcd.resolve_learners(task, config, threads, engine, log) > 1:
        schedule = multi_dcd.train_multi_dcd  # several learners on one shared w
    else:
        from .demi_dcd import train_demi_dcd as schedule
    from ..parallel.engine import WorkerError

    seen = _LastIterate(task, callback)
    try:
        return schedule(task, config, threads, seen, cpu_log=cpu_log, log=log, tick=tick,
                        **engine)
    except WorkerError as e:  # the schedule's result is lost: rebuild it from the last iterate
        e.partial = seen.result("worker-failed")
        raise


class _LastIterate:
    """The callback of a parallel schedule, remembering the last record and a copy of w, so
    that a run stopped by a :class:`~demidcd.parallel.engine.WorkerError` (a worker that died
    more than the restart limit allows) still yields its partial model, marked unfinished."""

    def __init__(self, task: Task, callback: Callback | None):
        self.callback, self.w = callback, np.zeros(task.dim)
        self.history: list[dict] = []

    def __call__(self, rec: dict, w: np.ndarray) -> None:
        self.w = w.copy()
        self.history.append(rec)
        if self.callback is not None:
            self.callback(rec, w)

    def result(self, reason: str) -> TrainResult:
        last = self.history[-1] if self.history else {}
        return TrainResult(self.w, False, reason, int(last.get("epoch", 0)),
                           float(last.get("seconds", 0.0)), self.history)


COMPILE_NOTICE_AFTER = 1.0  # seconds of warm-up after which compiling is announced


@contextmanager
def compile_notice(log: Any, after: float | None = None) -> Iterator[None]:
    """Log ``compiling kernels, once per install …`` when the warm-up inside this block takes
    longer than ``after`` seconds (:data:`COMPILE_NOTICE_AFTER`): on a fresh install (or a
    moved one) numba compiles every kernel, tens of seconds before the first iteration; later
    runs load them from its cache in well under a second and print nothing."""
    if log is None:
        yield
        return
    t0 = time.perf_counter()
    said = threading.Event()

    def notice() -> None:
        said.set()
        log("compiling kernels, once per install (numba caches them; later runs start at "
            "once) ...")

    timer = threading.Timer(COMPILE_NOTICE_AFTER if after is None else after, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
    if said.is_set():
        log(f"kernels ready after {time.perf_counter() - t0:.1f}s")
