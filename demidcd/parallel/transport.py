"""The transport interface: everything a parallel schedule (DEMI-DCD, MS-DCD, SP-IPM) may ask of
the machinery that runs its inference workers, and nothing else.

A schedule (the learner, in this process) publishes [w, A] as a new *version* of w̄
(:meth:`Transport.publish`), drains the records the workers found (:meth:`Transport.drain`, a
:class:`~demidcd.tasks.base.RecordBatch`, never blocking), commands a generation (one sweep per
worker for MS-DCD's barrier, one job for SP-IPM's mappers: :meth:`Transport.command`,
:meth:`Transport.done`, :meth:`Transport.results`), reads per-worker counters (sweeps completed,
clean-since-version, sweep violations, totals), supervises the workers (:meth:`Transport.check`:
a dead worker is restarted on its shard), and stops and closes. The workers run
:func:`demidcd.parallel.worker.run_worker` under every transport.

Two transports implement it: shared memory on one machine (:mod:`demidcd.parallel.engine`,
forked processes, a double-buffered w̄ read in place, one SPSC ring per worker) and a Ray
cluster (:mod:`demidcd.parallel.ray`, actors on any node, w̄ as versioned deltas through the
object store, records in batches of numpy arrays). :func:`make_transport` picks one by name
(or the experimental hook's factory, :mod:`.experimental`, builds a fake one for tests).

The schedules reach processes through exactly two interfaces, both in this package:

* this one, :class:`Transport`: one learner (the schedule, in this process) and p − 1
  inference workers that search with a published w̄ and send records back. The learner's view
  of it (the [w, A] vector it publishes, the drains, their staleness) is
  :class:`~.learner.SharedLearner`. The schedules with one learner process use nothing else:
  DEMI-DCD and MS-DCD through a SharedLearner, SP-IPM and the replicated mini-batches of
  Pegasos and AdaGrad directly.
* :class:`~.coordinator.Coordinator` (with :class:`~.multi.LearnerGroup` under it): K peer
  learners that each infer and learn on their own part and write one shared w in place
  (``--learners K``). It is not a Transport: nothing is published (every learner reads the
  live w), no record travels (each admits its own), and what the schedule needs instead is
  commands to all learners at once (pause, add Σ α φ, certify, collect the dual state) and
  rebuilds of w; forcing them through publish/drain would leave most of either interface
  unused.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from ..errors import OptionError, WorkerError
from ..primitives.ring import RING_WORDS
from ..tasks.base import RecordBatch, Task
from .experimental import EXPERIMENTAL
from .worker import (
    BACKOFF,
    CLEAN_VERSION,
    INFER,
    PUSHED,
    SWEEP_VIOL,
    SWEEPS,
    WASTED,
    WorkerSpec,
)

__all__ = ["Transport", "WorkerError", "make_transport", "concat_batches", "TRANSPORTS",
           "balanced_shards", "start_figures"]




def balanced_shards(costs: np.ndarray, k: int, seed: int = 0) -> list[np.ndarray]:
    """Split examples into k shards of nearly equal total cost (longest-processing-time
    greedy: heaviest example first, to the lightest shard, the first of equals). Each shard
    sorted."""
    costs = np.asarray(costs, np.float64)
    owner = _lpt_owners(np.argsort(-costs, kind="stable"), costs, k)
    return [np.flatnonzero(owner == j).astype(np.int64) for j in range(k)]


@njit(cache=True, nogil=True)
def _lpt_owners(order: np.ndarray, costs: np.ndarray, k: int) -> np.ndarray:
    """The shard of each example, given to the lightest shard in ``order`` (a loop of Python
    calls to np.argmin took 0.1 s on Brown's 45,829 sentences before the learners started)."""
    load = np.zeros(k)
    owner = np.empty(order.shape[0], np.int64)
    for e in order:
        j = 0
        for q in range(1, k):
            if load[q] < load[j]:
                j = q
        owner[e] = j
        load[j] += costs[e]
    return owner


def concat_batches(parts: list[RecordBatch]) -> RecordBatch:
    """One batch holding the records of ``parts`` in order."""
    parts = [b for b in parts if len(b)]
    if not parts:
        return RecordBatch.empty()
    if len(parts) == 1:
        return parts[0]
    nnz = np.cumsum([0] + [int(b.ptr[-1]) for b in parts[:-1]])
    return RecordBatch(np.concatenate([b.ex for b in parts]),
                       np.concatenate([b.hash for b in parts]),
                       np.concatenate([b.delta for b in parts]),
                       np.concatenate([b.margin for b in parts]),
                       np.concatenate([parts[0].ptr[:1]] + [b.ptr[1:] + o for b, o in
                                                             zip(parts, nnz, strict=True)]),
                       np.concatenate([b.idx for b in parts]),
                       np.concatenate([b.val for b in parts]))


def start_figures(t0: float, spawn_began: float, spawn_seconds: float,
                  worker_starts: np.ndarray) -> dict[str, float | None]:
    """How starting the workers went, on the learner's clock started at ``t0``
    (``time.perf_counter()``): ``spawn_began`` (seconds from t0 to the first fork; ≥ 0:
    starting the workers was on the clock; None when unknown), ``spawn_seconds`` and
    ``workers_began`` (seconds from t0 to the first worker beginning work, from the workers'
    own ``perf_counter`` readings, ``worker_starts``: 0 = not begun, nan = not known on this
    machine's clock; None when no worker began)."""
    began = worker_starts[np.isfinite(worker_starts) & (worker_starts > 0.0)]
    return {"spawn_began": spawn_began - t0 if math.isfinite(spawn_began) else None,
            "spawn_seconds": spawn_seconds,
            "workers_began": float(began.min()) - t0 if len(began) else None}


class Transport(ABC):
    """p − 1 inference workers behind one interface (see the module docstring).

    Attributes every transport sets: ``n_workers``; ``shards`` (worker j's examples);
    ``learner_shard`` (the learner's own part when built with ``learner_share``, MS-DCD's
    master); ``monitor`` (a :class:`~demidcd.primitives.monitor.CpuMonitor` of the learner and
    the workers it can see)."""

    n_workers: int
    shards: list[np.ndarray]
    learner_shard: np.ndarray
    monitor: Any
    spawn_began = math.nan  # time.perf_counter() when start() began starting workers
    spawn_seconds = 0.0  # how long starting them took
    learner_only: Callable[[], list[np.ndarray]] | None = None  # the learner process's own
    # arrays (its active sets, its [w, A]), which no worker reads: a forked worker hands their
    # inherited pages back as it starts (:meth:`~.engine.WorkerPool.start`), so that a page
    # the learner writes later is not held twice, the learner's copy and the worker's

    # -- lifecycle
    @abstractmethod
    def start(self, expired: Callable[[], bool] | None = None) -> Transport:
        """Start the workers (logs ``worker K pid N`` for each). The learner's clock is
        already running: ``expired()`` true means the time limit ran out while starting
        them; a transport then starts no more and tells the started ones to stop."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker and release every resource (idempotent; call in ``finally``)."""

    @abstractmethod
    def check(self) -> None:
        """Supervise: restart a worker that died on its shard, or raise :class:`WorkerError`
        after too many restarts. Cheap enough to call between blocks."""

    def __enter__(self) -> Transport:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- w̄
    @abstractmethod
    def publish(self, wa: np.ndarray, marks: np.ndarray | None = None, tail: int = 0) -> int:
        """Make float64 ``wa`` = [w, A] the next version of w̄ and return that version.
        ``marks`` (one byte per line of 8 entries of ``wa[:tail]``, see
        :func:`~demidcd.primitives.seqlock.mark_array`): ``wa[:tail]`` is zero off the marked
        lines now and in every earlier version, so only those lines (and ``wa[tail:]``) need
        to travel."""

    @abstractmethod
    def version(self) -> int:
        """The number of completed publishes (the version the workers read next)."""

    # -- records and generations
    @abstractmethod
    def drain(self) -> RecordBatch:
        """Every record that has arrived from the workers (never waits for one)."""

    @abstractmethod
    def command(self) -> int:
        """Barrier and job modes: ask every worker for one sweep (or job) with the current
        w̄; returns the generation to wait for with :meth:`done`."""

    @abstractmethod
    def done(self, generation: int) -> bool:
        """Every worker finished ``generation`` (its records have then all been drained or
        are in the next :meth:`drain`; its sweep violations and job outputs are readable)."""

    def results(self) -> dict[str, np.ndarray]:
        """Job mode: each output of the workers' last jobs, stacked as [worker, ...]."""
        raise NotImplementedError

    @abstractmethod
    def request_stop(self) -> None:
        """Ask every worker to stop (they finish or abandon their current inference)."""

    def stop_requested(self) -> bool:
        """A stop was asked for (e.g. the time limit ran out while the workers started)."""
        return False

    # -- counters
    @abstractmethod
    def _column(self, col: int) -> np.ndarray:
        """Per-worker counter ``col`` (see :mod:`demidcd.parallel.worker`), acquire-read."""

    def infer_seconds(self) -> float:
        return 0.0

    def worker_starts(self) -> np.ndarray:
        """Per worker, the ``time.perf_counter()`` at which it began work (0: not yet, nan:
        not known on this machine's clock)."""
        return np.full(self.n_workers, np.nan)

    def start_figures(self, t0: float) -> dict[str, float | None]:
        """How the start went, on the learner's clock (:func:`start_figures`)."""
        return start_figures(t0, self.spawn_began, self.spawn_seconds, self.worker_starts())

    def occupancy(self) -> float:
        """How full the fullest record channel is (0–1)."""
        return 0.0

    def traffic(self) -> dict[str, float]:
        """Bytes that went through the transport so far: ``bytes_out`` (w̄ to the workers),
        ``bytes_in`` (records to the learner)."""
        return {}

    def totals(self) -> dict[str, int | float]:
        c = self._column
        return {"inferences": int(c(INFER).sum()), "pushed": int(c(PUSHED).sum()),
                "wasted": int(c(WASTED).sum()), "backoffs": int(c(BACKOFF).sum()),
                "sweeps": self.sweeps_completed(), "ring": round(self.occupancy(), 4),
                "infer_seconds": self.infer_seconds()}

    def _busy(self) -> np.ndarray:
        """Per worker, whether its shard has examples (one without sweeps nothing: it never
        reports a sweep, and the stop rule must not wait for one)."""
        return np.array([len(s) > 0 for s in self.shards], bool)

    def sweeps_completed(self) -> int:
        """Full sweeps every worker with examples has finished (the fewest of any)."""
        sweeps = self._column(SWEEPS)[self._busy()]
        return int(sweeps.min()) if len(sweeps) else 0

    def all_clean_since(self, version: int) -> bool:
        """Every worker with examples finished a clean sweep that started at version ≥
        ``version``."""
        return bool((self._column(CLEAN_VERSION)[self._busy()] >= version).all())

    def sweep_violations(self) -> int:
        """Structures violating by more than tol found in the workers' last sweeps."""
        return int(self._column(SWEEP_VIOL).sum())


TRANSPORTS: dict[str, str] = {"shm": "demidcd.parallel.engine:WorkerPool",
                              "ray": "demidcd.parallel.ray:RayTransport"}
"""The transports by name, as "module:class" strings resolved on first use, so that this
interface imports none of its implementations (they import it)."""


def make_transport(backend: str, task: Task, n_workers: int, spec: WorkerSpec, *,
                   log: Callable[[str], None] | None = None, debug: bool = False,
                   learner_share: bool = False, ring_words: int = RING_WORDS,
                   ray_address: str | None = None, max_restarts: int = 3) -> Transport:
    """The transport ``backend`` (a name of :data:`TRANSPORTS`) for ``n_workers`` workers
    running ``spec``. The experimental hook's factory
    (:attr:`~.experimental.Experimental.transport`), when set, builds the transport instead
    (tests: a fake :class:`Transport`)."""
    factory = EXPERIMENTAL.transport
    if factory is not None:
        return factory(task, n_workers, spec, log=log, debug=debug, learner_share=learner_share)
    if backend not in TRANSPORTS:
        raise OptionError(f"unknown --backend {backend!r}; choose one of "
                          f"{', '.join(TRANSPORTS)}")
    import importlib

    module, _, name = TRANSPORTS[backend].partition(":")
    cls = getattr(importlib.import_module(module), name)
    extra = {"address": ray_address} if backend == "ray" else {}
    return cls(task, n_workers, spec, log=log, debug=debug, learner_share=learner_share,
               ring_words=ring_words, max_restarts=max_restarts, **extra)
