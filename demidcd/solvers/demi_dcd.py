"""DEMI-DCD (DEMI-DCD paper, Section 3): the learner of Algorithm 1 in this process, p − 1
inference workers running Algorithm 2 in others, with no barrier between them.

The learner loops over the examples in blocks: it drains the workers' rings into the active
sets (de-duplicated by hash, admitted by Eq. 11 against its current w), runs the Eq. (7)–(9)
updates of :func:`~demidcd.solvers.kernels.update_examples` (the same kernel as 1-DCD) on the
block, and publishes [w, A] to the shared w̄ every ρ updates (and at least every 20 ms when
anything changed), copying only the entries changed since the last publish. An *outer
iteration* is one pass over all examples.

Stopping (``tol``): when a pass ends with max |PG| < tol on the active set and no violating
structure arrived during it, the learner publishes w (version V) and waits, draining rings; it
resumes updating when a violating structure arrives (new, or already in the active set: its
gradient grew after it was visited in the pass), and stops when every worker has finished a full sweep that
started at version ≥ V and found no structure violating by more than tol.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..parallel.engine import WorkerPool
from ..tasks.base import Task
from .activeset import ActiveSets
from .common import Callback, Clock, SolverConfig, TrainResult, objective

DEFAULT_RHO = 20_000  # updates between publishes (see benchmarks/results: publish cost < 5%)
PUBLISH_INTERVAL = 0.02  # seconds: publish at least this often when anything changed
DEFAULT_CHUNK = 16  # examples per validated in-place inference chunk (ρ' of Algorithm 2)
BLOCK = 64  # examples between ring drains


def train_demi_dcd(task: Task, config: SolverConfig, threads: int,
                   callback: Callback | None = None, rho: int = DEFAULT_RHO,
                   rho_worker: int = DEFAULT_CHUNK, cpu_log: str | None = None,
                   log: Callable[[str], None] | None = None, debug: bool = False,
                   ring_words: int = 1 << 22) -> TrainResult:
    """Train with one learner (this process) and ``threads − 1`` inference workers."""
    config.validate()
    log = log or (lambda s: None)
    n, dim = task.n_examples, task.dim
    rng = np.random.default_rng(config.seed)
    pool = WorkerPool(task, threads - 1, config.C, config.admit, config.tol, "demi",
                      config.seed, rho_worker, ring_words, log, debug)
    wa = np.zeros(dim + n)  # [w, A], published as one vector
    act = ActiveSets(n, dim, config.C, config.delta, config.max_active, track_changes=True,
                     w=wa[:dim], alpha_sum=wa[dim:])
    a_idx = np.arange(dim, dim + n, dtype=np.int64)
    history: list[dict] = []
    cnt = {"updates": 0, "admitted": 0, "duplicates": 0, "rejected": 0, "evicted": 0,
           "shrunk": 0, "publishes": 0}
    t_publish = t_update = t_insert = 0.0
    reason, epoch, last_eval = "max-epochs", 0, 0.0

    def publish() -> None:
        nonlocal t_publish
        t = time.perf_counter()
        pool.wbar.publish_sparse(wa, np.concatenate((act.take_changes().astype(np.int64),
                                                     a_idx)), force=True)
        cnt["publishes"] += 1
        t_publish += time.perf_counter() - t

    def ingest() -> int:
        """Drain the rings into the active sets; returns how many records were admitted or
        already present (either means some structure violates: more updates are due)."""
        nonlocal t_insert
        batch = pool.drain()
        if not len(batch):
            return 0
        t = time.perf_counter()
        st = act.insert(batch, config.admit)
        t_insert += time.perf_counter() - t
        cnt["admitted"] += st.admitted
        cnt["duplicates"] += st.duplicates
        cnt["rejected"] += st.rejected
        cnt["evicted"] += st.evicted
        return st.admitted + st.duplicates

    pool.start()
    clock = Clock(config.time_limit)
    try:
        since_publish, last_publish = 0, time.perf_counter()
        for epoch in range(1, config.epochs(1 << 62) + 1):
            order = rng.permutation(n).astype(np.int64)
            max_pg, received, shrunk = 0.0, 0, 0
            for s in range(0, n, BLOCK):
                received += ingest()
                t = time.perf_counter()
                st = act.update(order[s:s + BLOCK])
                t_update += time.perf_counter() - t
                max_pg, shrunk = max(max_pg, st.max_pg), shrunk + st.shrunk
                cnt["updates"] += st.updates
                since_publish += st.updates
                if since_publish >= rho or (
                        since_publish and time.perf_counter() - last_publish >= PUBLISH_INTERVAL):
                    publish()
                    since_publish, last_publish = 0, time.perf_counter()
                pool.check()
                if clock.expired():
                    break
            cnt["shrunk"] += shrunk
            converged = False
            if max_pg < config.tol and received == 0 and not clock.expired():
                publish()
                since_publish = 0
                version = pool.wbar.version()
                while not clock.expired():  # wait for clean sweeps at this version
                    if ingest():
                        break
                    if pool.all_clean_since(version):
                        converged = True
                        break
                    pool.check()
                    time.sleep(0.001)
            tot = pool.totals()
            rec = {"epoch": epoch, "seconds": round(clock.elapsed(), 4), "updates": cnt["updates"],
                   "total_updates": cnt["updates"], "inferences": tot["inferences"],
                   "pushed": tot["pushed"], "admitted": cnt["admitted"],
                   "duplicates": cnt["duplicates"], "dropped": cnt["rejected"],
                   "active": act.size, "shrunk": shrunk, "max_pg": max_pg, "ring": tot["ring"],
                   "wasted": tot["wasted"], "publishes": cnt["publishes"]}
            if config.eval_every is not None and clock.elapsed() - last_eval >= config.eval_every:
                ob = objective(task, act.w, config.C, act.dual_objective())
                rec.update(primal=ob.primal, dual=ob.dual, gap=ob.gap)
                last_eval = clock.elapsed()
            history.append(rec)
            if callback is not None:
                callback(rec, act.w)
            if converged:
                reason = "converged"
                break
            if clock.expired():
                reason = "time-limit"
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        seconds = clock.elapsed()
        tot = pool.totals()
        pool.close()
    mon = pool.monitor
    if cpu_log:
        mon.write_csv(cpu_log)
    res = TrainResult(act.w.copy(), reason == "converged", reason, epoch, seconds, history,
                      act.dual_objective())
    res.extra = {"cpu_average": mon.average(), "cpu_line": mon.summary_line(threads),
                 "publish_seconds": t_publish,
                 "update_seconds": t_update, "insert_seconds": t_insert,
                 "publishes": cnt["publishes"], **tot, **cnt}
    log(f"learner: {cnt['updates']:,} updates ({cnt['updates'] / max(seconds, 1e-9):,.0f}/s), "
        f"{cnt['publishes']:,} publishes costing {100 * t_publish / max(seconds, 1e-9):.1f}% of "
        f"its time; workers: {tot['inferences']:,} inferences, {tot['pushed']:,} structures "
        f"pushed, {tot['wasted']:,} chunks redone after a concurrent publish")
    return res
