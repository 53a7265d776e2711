"""One run recorder shared by every learner: the clock, the per-epoch records (with the
``eval_every`` objective and the callback), the CPU monitor, the :class:`TrainResult` and its
JSON summary (what the benchmarks read instead of parsing log lines).

A learner calls :meth:`Recorder.start` when its clock starts, :meth:`Recorder.epoch` once per
outer iteration, and :meth:`Recorder.finish` on every exit path::

    rec = Recorder(task, config, callback, threads=1)
    clock = rec.start()
    ...
    rec.epoch({"epoch": e, "updates": u, ...}, w, dual=D)
    return rec.finish(w, reason, e, cpu_log=cpu_log, updates=u)

Single-process learners get a CPU monitor of their own; the multi-process schedules pass their
pool's (which the pool stops on close).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..primitives.monitor import CpuMonitor
from ..tasks.base import Task
from .common import Callback, Clock, SolverConfig, TrainResult, objective

Tick = Callable[[float, np.ndarray], None]
"""(seconds, w) → None: called between blocks of work (the snapshot writer)."""

Objective = Callable[[np.ndarray], dict[str, float | None]]
"""w → {"primal": …, "dual": …, "gap": …}: the learner's own objective, for ``eval_every``."""


class Recorder:
    """Epoch records, ``eval_every`` objectives, callback, CPU monitor and result of one run.

    ``objective_fn`` overrides the default evaluation (the SSVM primal of ``config.loss``: Eq. 1
    or the hinge loss's, with the dual the learner passes to :meth:`epoch`); learners of another
    objective (the SDMs) pass theirs, the perceptron family none (``eval_every`` then logs
    nothing).
    """

    def __init__(self, task: Task, config: SolverConfig, callback: Callback | None = None,
                 threads: int = 1, monitor: CpuMonitor | None = None,
                 objective_fn: Objective | None | bool = True,
                 tick: Tick | None = None, prior: np.ndarray | None = None):
        self.task, self.config, self.callback, self.threads = task, config, callback, threads
        self.prior = prior  # w₀ of a warm start: the primal measures ½‖w − w₀‖²
        self.tick = tick
        self._last_tick = -1.0
        self._own_monitor = monitor is None
        self.monitor = monitor
        self.objective_fn = objective_fn
        self.history: list[dict] = []
        self.clock: Clock | None = None
        self._last_eval = 0.0

    def start(self) -> Clock:
        """Start the clock (and this process's CPU monitor when none was given)."""
        if self._own_monitor and self.monitor is None:
            self.monitor = CpuMonitor({"learner": os.getpid()}).start()
        self.clock = Clock(self.config.time_limit, self.tick)
        return self.clock

    def poll(self, w: Callable[[], np.ndarray], every: float = 0.1) -> bool:
        """Between blocks of work: at most every ``every`` s pass (seconds, w()) to ``tick``
        (the snapshot writer; ``w`` is a function, so a costly w — an average — is built only
        then); returns whether the clock expired."""
        if self.tick is not None:
            t = self.elapsed()
            # a snapshot writer (Snapshotter.maybe) says when it is due: build w only then
            due = getattr(getattr(self.tick, "__self__", None), "due", None)
            if t - self._last_tick >= every and (due is None or t >= due):
                self._last_tick = t
                self.tick(t, w())
        return self.clock.expired()

    def elapsed(self) -> float:
        return self.clock.elapsed() if self.clock is not None else 0.0

    def epoch(self, rec: dict, w: np.ndarray,
              dual: float | Callable[[], float] | None = None) -> dict:
        """Complete and store one outer iteration's record: ``seconds``, and primal/dual/gap at
        most every ``eval_every`` seconds (``dual`` may be a function, called only then); then
        call the callback with (record, w)."""
        rec = {"epoch": rec.get("epoch", len(self.history) + 1),
               "seconds": round(self.elapsed(), 4), **rec}
        cfg = self.config
        if (cfg.eval_every is not None and self.objective_fn is not None
                and self.objective_fn is not False
                and self.elapsed() - self._last_eval >= cfg.eval_every):
            if self.objective_fn is True:
                dual = dual() if callable(dual) else dual
                ob = objective(self.task, w, cfg.C, dual, loss=cfg.loss, w0=self.prior)
                rec.update(primal=ob.primal, dual=ob.dual, gap=ob.gap)
            else:
                rec.update(self.objective_fn(w))
            self._last_eval = self.elapsed()
        self.history.append(rec)
        if self.callback is not None:
            self.callback(rec, w)
        return rec

    def finish(self, w: np.ndarray, reason: str, epochs: int, dual: float | None = None,
               cpu_log: str | None = None, seconds: float | None = None,
               **extra: Any) -> TrainResult:
        """Stop the own CPU monitor, write ``cpu_log``, build the result (``extra`` goes to
        ``result.extra`` with the CPU and memory figures; ``seconds``: the solver time, by
        default now)."""
        seconds = self.elapsed() if seconds is None else seconds
        mon = self.monitor
        if mon is not None and self._own_monitor:
            mon.stop()
        res = TrainResult(w, reason == "converged", reason, epochs, seconds, self.history, dual)
        if mon is not None:
            if cpu_log:
                mon.write_csv(cpu_log)
            res.extra.update(cpu_average=mon.average(), cpu_line=mon.summary_line(self.threads),
                             memory_line=mon.memory_line(), peak_rss=mon.peak_rss,
                             peak_pss=mon.peak_pss)
        res.extra.update(extra)
        return res


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bool, str)) or v is None:
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(float(v)) else None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return None


def summary(result: TrainResult, **more: Any) -> dict[str, Any]:
    """The JSON-ready summary of a run: stop reason, epochs, seconds, dual, the learner's
    counters and CPU figures (``result.extra``), the last epoch record, and ``more`` (the CLI
    adds the algorithm, threads, data and the dev/test metrics)."""
    out = {"stop_reason": result.stop_reason, "finished": bool(result.finished),
           "epochs": int(result.epochs), "seconds": float(result.seconds),
           "dual": result.dual,
           "extra": {k: v for k, v in result.extra.items() if k not in ("cpu_line",
                                                                       "memory_line")},
           "cpu_line": result.extra.get("cpu_line"),
           "last_record": result.history[-1] if result.history else None, **more}
    return _jsonable(out)


def write_summary(path: str | os.PathLike[str], result: TrainResult, **more: Any) -> None:
    """Write :func:`summary` as JSON (temporary file, then rename)."""
    from ..io.model import atomic_write

    text = json.dumps(summary(result, **more), indent=1, sort_keys=True) + "\n"
    atomic_write(path, lambda f: f.write(text), mode="w")
