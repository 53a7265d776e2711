"""The learner's algorithm shared by the multi-process DCD schedules (DEMI-DCD and MS-DCD).

:class:`DcdLearner` owns the active sets over the [w, A] vector of a
:class:`~demidcd.parallel.learner.SharedLearner` (the process side: the transport to the
workers, shared memory or Ray, ``backend``, and the publishing). It admits the workers' records
into the active sets (:meth:`DcdLearner.ingest`), runs UPDATEWEIGHT and inference of its own,
publishes [w, A] (:meth:`DcdLearner.publish`, only the lines an admitted φ touches), builds the
per-iteration log record and the final :class:`TrainResult`. A schedule decides only *when*
each of these happens.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..parallel.learner import SharedLearner
from ..parallel.worker import WorkerSpec
from ..tasks.base import InferenceInterrupted, Task
from .activeset import ActiveSets
from .common import Callback, Clock, SolverConfig, StopRequest, TrainResult
from .recorder import Recorder
from .state import DualState, Start

FRESH_SWEEPS = 6  # sweeps (at most) over an example's active set right after its structures
# arrive (kernels.update_examples stops earlier once its |PG| fell to RESWEEP_RATIO of the first
# sweep's). More sweeps on fresh structures lowered DEMI-DCD's primal sooner; 1-DCD's update after
# each inference gains nothing from them and keeps one (benchmarks/README.md, "Float32 w̄ for the
# workers and fresh-structure sweeps").


class DcdLearner:
    """The learner of DEMI-DCD and MS-DCD (module docstring); ``shared`` is its
    :class:`~demidcd.parallel.learner.SharedLearner`, ``transport`` the workers'."""

    def __init__(self, task: Task, config: SolverConfig, threads: int, mode: str,
                 callback: Callback | None, chunk: int, ring_words: int,
                 log: Callable[[str], None] | None, debug: bool, learner_share: bool = False,
                 tick: Callable[[float, np.ndarray], None] | None = None,
                 backend: str = "shm", ray_address: str | None = None,
                 start: Start | None = None):
        config.validate()
        self.task, self.config, self.threads, self.callback = task, config, threads, callback
        self.log = log or (lambda s: None)
        n, dim = task.n_examples, task.dim
        self.transport_mode = mode
        spec = WorkerSpec(mode, config.C, config.admit, config.tol, config.seed, chunk,
                          loss=config.loss)
        self.shared = SharedLearner(task, threads, spec, log=self.log, debug=debug,
                                    learner_share=learner_share, ring_words=ring_words,
                                    backend=backend, ray_address=ray_address)
        self.transport = self.shared.transport
        self.tick = tick
        self.wa = self.shared.wa  # [w, A], published as one vector (L1 loss: [w, ξ̂])
        tail = {"xi": self.wa[dim:]} if config.loss == "l1" else {"alpha_sum": self.wa[dim:]}
        self.act = ActiveSets(n, dim, config.C, config.admit, config.max_active,
                              track_changes=True, w=self.wa[:dim], sweeps=config.sweeps,
                              loss=config.loss, tol=config.tol, **tail)
        self.transport.learner_only = self.learner_arrays  # not the workers' to keep
        from .dcd import begin

        self.start_point = start  # the prior and/or saved state it starts from (.state)
        begin(self.act, start)
        self.cnt = {"updates": 0, "learner_inferences": 0, "admitted": 0, "duplicates": 0,
                    "rejected": 0, "evicted": 0, "shrunk": 0, "publishes": 0}
        self.seconds = {"publish": 0.0, "update": 0.0, "insert": 0.0, "infer": 0.0,
                        "wait": 0.0, "main": 0.0}
        self.recorder = Recorder(task, config, callback, threads, monitor=self.transport.monitor,
                                 tick=tick, prior=start.prior if start else None)
        self.history = self.recorder.history
        self.clock: Clock | None = None

    def learner_arrays(self) -> list[np.ndarray]:
        """The arrays only this process reads ([w, A] and the active sets'): a forked
        worker hands its inherited pages of them back (``Transport.learner_only``)."""
        return [self.wa, *self.act.own_arrays()]

    # ------------------------------------------------------------------ operations
    def start(self) -> None:
        """Start the clock, then the workers: the time limit is the wall time of training,
        starting the workers included."""
        self.clock = clock = self.recorder.start()
        # the learner's own inference (an ILP solver) is interrupted by a stop or the limit
        self.task.should_stop = lambda: StopRequest.requested or clock.expired()
        self.shared.start(clock.expired)
        clock.count_work(lambda: (self.cnt["updates"], self.transport.totals()["inferences"]
                                  + self.cnt["learner_inferences"]))
        if self.start_point is not None and (self.start_point.prior is not None
                                             or self.start_point.state is not None):
            self.publish()  # the workers search with w = w₀ + Σ α φ from the start

    def poll(self) -> bool:
        """Snapshot when due, supervise the workers; True once the run must stop."""
        self.shared.check()
        return self.clock.poll(self.act.w)

    @property
    def seconds_per_inference(self) -> float:
        """Measured seconds per loss-augmented inference: the learner's own, else the
        workers'."""
        c = self.cnt["learner_inferences"]
        if c:
            return self.seconds["infer"] / c
        tot = self.transport.totals()
        return tot["infer_seconds"] / tot["inferences"] if tot["inferences"] else 0.0

    def publish(self, fresh: bool = False) -> int:
        """Publish [w, A] as the next version of w̄ (returned): the lines of w that some
        admitted φ touches (the only ones that can be non-zero) and all of A. For the L1 loss
        the workers' violation test reads ξ̂ (:meth:`ActiveSets.violation`) where the L2 loss
        has A; ``fresh`` recomputes every ξ̂_i with w first, so that sweeps at this version test
        exactly what the stopping rule needs (otherwise each ξ̂_i is from its example's last
        visit or admission)."""
        version = self.shared.publish(
            self.act.mark, self.act.refresh_slack if fresh and self.act.l1 else None)
        self.cnt["publishes"] += 1
        self.seconds["publish"] += self.shared.last_publish_cost
        return version

    def ingest(self, update_now: bool = False) -> int:
        """Drain the rings into the active sets; returns how many records were admitted or
        already present (either means some structure violates: more updates are due).

        ``update_now``: run UPDATEWEIGHT at once on the examples that received records, as
        DCD-Light does right after inference, sweeping each up to :data:`FRESH_SWEEPS` times
        (DEMI-DCD; MS-DCD's master waits for the barrier).
        """
        batch = self.shared.drain()
        if not len(batch):
            return 0
        st = self._insert(batch)
        self.shared.count_stale(len(batch), st.rejected)
        if update_now:
            self.update(np.unique(batch.ex), sweeps=FRESH_SWEEPS)
        return st.admitted + st.duplicates

    def infer(self, examples: np.ndarray, update: bool = True) -> int:
        """Loss-augmented inference (Eq. 5) on ``examples`` with the learner's own w, then
        admission (Eq. 11) and, with ``update``, UPDATEWEIGHT on them: one chunk of a
        DCD-Light epoch. Returns how many structures violate by more than tol (−1 when a
        stop interrupted the inference: nothing was found)."""
        t = time.perf_counter()
        try:
            batch = self.task.loss_augmented(self.act.w, examples)
        except InferenceInterrupted:
            return -1
        finally:
            self.seconds["infer"] += time.perf_counter() - t
        self.cnt["learner_inferences"] += len(examples)
        violators = int((self.act.violation(batch) > self.config.tol).sum())
        self._insert(batch)
        if update:
            self.update(examples)
        return violators

    def _insert(self, batch):
        """Admit the records of ``batch`` (Eq. 11), counting and timing it."""
        t = time.perf_counter()
        st = self.act.insert(batch)
        self.seconds["insert"] += time.perf_counter() - t
        for k in ("admitted", "duplicates", "rejected", "evicted"):
            self.cnt[k] += getattr(st, k)
        return st

    def update(self, examples: np.ndarray, skip_below: float = -1.0,
               sweeps: int | None = None):
        t = time.perf_counter()
        st = self.act.update(examples, skip_below=skip_below, sweeps=sweeps)
        self.seconds["update"] += time.perf_counter() - t
        self.cnt["updates"] += st.updates
        self.cnt["shrunk"] += st.shrunk
        return st

    # ------------------------------------------------------------------ reporting
    def iteration(self, epoch: int, max_pg: float, shrunk: int, **extra) -> dict:
        """Log record of one outer iteration (also passed to the callback)."""
        tot = self.transport.totals()
        c = self.cnt
        rec = {"epoch": epoch, "updates": c["updates"],
               "total_updates": c["updates"],
               "inferences": tot["inferences"] + c["learner_inferences"],
               "learner_inferences": c["learner_inferences"],
               "pushed": tot["pushed"], "admitted": c["admitted"], "duplicates": c["duplicates"],
               "dropped": c["rejected"], "active": self.act.size, "shrunk": shrunk,
               "max_pg": max_pg, "ring": tot["ring"], "wasted": tot["wasted"],
               "publishes": c["publishes"], **extra}
        return self.recorder.epoch(rec, self.act.w, dual=self.act.dual_objective)

    def finish(self, reason: str, epoch: int, cpu_log: str | None,
               rng: np.random.Generator | None = None) -> TrainResult:
        """Stop the pool (always call, in ``finally``), write the CPU log, build the result
        (with the final dual state when the start asked to keep it; ``rng``: the schedule's
        shuffling generator, saved with it)."""
        seconds = self.clock.elapsed() if self.clock else 0.0
        tot = self.transport.totals()
        traffic = self.transport.traffic()
        started = self.transport.start_figures(self.clock.t0) if self.clock else {}
        self.shared.close()
        self.task.__dict__.pop("should_stop", None)  # back to the class default
        sec = self.seconds
        res = self.recorder.finish(
            self.act.w.copy(), reason, epoch, self.act.dual_objective(), cpu_log=cpu_log,
            seconds=seconds, publish_seconds=sec["publish"], update_seconds=sec["update"],
            insert_seconds=sec["insert"], wait_seconds=sec["wait"],
            learner_infer_seconds=sec["infer"], transport=traffic, **tot, **self.cnt,
            **started)
        if self.start_point is not None and self.start_point.keep_state:
            name = "demi-dcd" if self.transport_mode == "demi" else "ms-dcd"
            res.state = DualState(self.act.state(), {
                "epoch": epoch, "algorithm": name,
                "rng": None if rng is None else rng.bit_generator.state})
        c = self.cnt
        self.log(f"learner process: {c['updates']:,} updates "
                 f"({c['updates'] / max(seconds, 1e-9):,.0f}/s), {c['publishes']:,} publishes "
                 f"costing {100 * sec['publish'] / max(seconds, 1e-9):.1f}% of its time, "
                 f"{c['learner_inferences']:,} inferences of its own; workers: "
                 f"{tot['inferences']:,} inferences, {tot['pushed']:,} structures pushed, "
                 f"{tot['wasted']:,} chunks redone after a concurrent publish")
        if traffic:
            self.log(f"transport: {traffic.get('bytes_out', 0) / 1e6:,.1f} MB of w̄ out, "
                     f"{traffic.get('bytes_in', 0) / 1e6:,.1f} MB of records in")
        return res
