"""MS-DCD: the master–slave parallel DCD of JLIS (DEMI-DCD paper, Section 4), on the same
engine as DEMI-DCD.

Each outer iteration: the master publishes w, and all p − 1 slaves run loss-augmented inference
on their shards with that same w, pushing structures that satisfy Eq. (11); the master waits at
the barrier (draining the rings). Then the master runs up to ``inner_passes`` DCD passes
(Eq. 7–9, the shared kernel; :class:`~demidcd.solvers.activeset.SweepPlan` decides which
examples a pass visits) over all active sets, stopping early once max |PG| < tol, while
the slaves wait. It solves the same SSVM as 1-DCD and DEMI-DCD (the L2 loss, or the L1 loss
with ``config.loss == "l1"``: SMO updates, [w, ξ̂] published, see :mod:`.demi_dcd`) and stops
when a sweep finds no structure violating by more than tol and max |PG| < tol.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..primitives.ring import RING_WORDS
from ..tasks.base import Task
from .activeset import SweepPlan
from .common import Callback, SolverConfig, TrainResult, stop_reason
from .dcd import saved_rng
from .demi_dcd import LEARNER_CHUNK
from .learner import DcdLearner
from .state import Start


def train_ms_dcd(task: Task, config: SolverConfig, threads: int,
                 callback: Callback | None = None, rho_worker: int = 16,
                 cpu_log: str | None = None, log: Callable[[str], None] | None = None,
                 debug: bool = False, ring_words: int = RING_WORDS,
                 tick: Callable[[float, np.ndarray], None] | None = None,
                 backend: str = "shm", ray_address: str | None = None,
                 start: Start | None = None) -> TrainResult:
    """Train with a master (this process) and ``threads − 1`` slaves, barrier-synchronised.
    The data is split into ``threads`` parts (as JLIS does for p processors): the master infers
    on its own part while the slaves infer on theirs, then waits at the barrier. ``start``: a
    prior and/or a saved state (:mod:`.state`)."""
    L = DcdLearner(task, config, threads, "barrier", callback, rho_worker, ring_words, log,
                      debug, learner_share=True, tick=tick, backend=backend,
                      ray_address=ray_address, start=start)
    n, workers = task.n_examples, L.transport
    rng = saved_rng(start, ("ms-dcd",), config.seed)
    epoch0 = start.epoch if start else 0
    reason, epoch = "max-epochs", epoch0
    t_inference = t_master = 0.0
    plan = SweepPlan(L.act, config.skip)
    mine = workers.learner_shard
    try:
        L.start()
        for epoch in range(epoch0 + 1, epoch0 + config.epochs(1 << 62) + 1):
            L.publish(fresh=True)  # the L1 loss: the slaves test against ξ̂ at this w
            t = time.perf_counter()
            gen = workers.command()
            unproven, own_violators, stopped = task.unproven, 0, False
            for s in range(0, len(mine), LEARNER_CHUNK):  # the master's part, with w = w̄
                L.ingest()
                found = L.infer(mine[s:s + LEARNER_CHUNK], update=False)
                if found < 0 or L.poll():
                    stopped = True
                    break
                own_violators += found
            while not workers.done(gen) and not stopped:  # the barrier
                L.ingest()
                if L.poll():
                    break
                time.sleep(0.0002)
            L.ingest()
            t_inference += time.perf_counter() - t
            violators = workers.sweep_violations() + own_violators + (task.unproven - unproven)
            t = time.perf_counter()
            max_pg, shrunk, certified = np.inf, 0, False
            for _ in range(max(config.inner_passes, 1)):
                if L.poll():
                    break
                st = L.update(rng.permutation(n).astype(np.int64), plan.threshold())
                max_pg, shrunk = st.max_pg, shrunk + st.shrunk
                if certified := plan.certifies(max_pg, config.tol):
                    break
            t_master += time.perf_counter() - t
            L.iteration(epoch, float(max_pg), shrunk, violators=violators,
                        inference_seconds=round(t_inference, 4),
                        master_seconds=round(t_master, 4))
            done = workers.done(gen)
            if stop := stop_reason(done and violators == 0 and certified, L.clock):
                reason = stop
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        res = L.finish(reason, epoch, cpu_log, rng)
    res.extra.update(inference_seconds=t_inference, master_seconds=t_master,
                     per_iteration_inference=t_inference / max(epoch - epoch0, 1),
                     per_iteration_master=t_master / max(epoch - epoch0, 1))
    if log:
        log(f"MS-DCD time split: inference (barrier) {t_inference:.2f}s, master DCD passes "
            f"{t_master:.2f}s over {epoch - epoch0} iterations "
            f"({t_inference / max(epoch - epoch0, 1):.3f}s vs "
            f"{t_master / max(epoch - epoch0, 1):.3f}s each)")
    return res
