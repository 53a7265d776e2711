"""DEMI-DCD (DEMI-DCD paper, Section 3): the learner of Algorithm 1 in this process, p − 1
inference workers running Algorithm 2 in others, with no barrier between them.

The learner loops over the examples in blocks: it drains the workers' rings into the active
sets (de-duplicated by hash, admitted by Eq. 11 against its current w) and updates the examples
that received structures at once (as DCD-Light does after inference, but sweeping each up to
:data:`~demidcd.solvers.learner.FRESH_SWEEPS` times), runs the Eq. (7)–(9)
updates of :func:`~demidcd.solvers.kernels.update_examples` (the same kernel as 1-DCD) on the
block, and publishes [w, A] to the shared, double-buffered w̄ every ρ updates and otherwise on a
schedule driven by staleness (:func:`publish_gap`): every few ms while the workers' structures
arrive stale, at most every 300 ms near the optimum; a publish copies only the cache lines of w
that some admitted φ touches (w is zero elsewhere), rounded to the task's ``inference_dtype``
(float32 for sequences: half the bytes for the workers' Viterbi to read). An *outer
iteration* is one pass over all examples.

Why staleness rules the first seconds: a structure found with an old w̄ is often no longer
violated under the learner's w and is rejected (Eq. 11). With infrequent publishes most early
structures are rejected and the primal stalls near its value at w = 0 (1-DCD with ``--batch
2048`` shows the same stall); publishing every few ms in that phase avoids the stall and
reaches a small primal difference sooner (benchmarks/README.md, "Evidence behind the defaults
and design choices").

The first epoch: the learner itself runs loss-augmented inference on every example with its own
w (in chunks of :data:`LEARNER_CHUNK`, each followed by admission and UPDATEWEIGHT: a DCD-Light
epoch, Chang & Yih Algorithm 2) while the workers sweep with w̄ and their rings are drained
between chunks. At first w moves fastest, so a published w̄ is stalest and the learner has
few structures to update: its own inference with the freshest possible w is its most useful
work, and it doubles the structures found at p = 2. It reached a 1% relative primal
difference sooner (benchmarks/README.md, "The learner's own first epoch"); more such epochs
did not help. The epoch ends early once every worker has swept its shard
:data:`LEARNER_EPOCH_SWEEPS` times (many workers) or after :data:`LEARNER_EPOCH_SECONDS`
(expensive inference).

After it the learner updates, as in the paper's Algorithm 1, and where the workers are the
bottleneck (expensive inference) it also spends a measured share of its time on inference of
its own (:func:`inference_share`).

Stopping (``tol``): when a pass ends with max |PG| < tol on the active set and no violating
structure arrived during it, the learner publishes w (version V) and stops changing w: it
drains the rings into the active sets (new structures enter with α = 0) and, where inference is
expensive, checks examples itself with w_V. It resumes updating when a violating structure
arrives, and stops when every worker has finished a full sweep that started at version ≥ V and
found no structure violating by more than tol (plus the rounding slack of a float32 w̄,
relative to Σ|w̄_k φ_k|: see :func:`~demidcd.parallel.worker.rounding_slack`) and had no
inference stopped by a solver's time cap. The w returned is then exactly w_V, the one the
sweeps certify.

The L1 loss (``config.loss == "l1"``): the learner's active sets run the SMO procedure
(:class:`~demidcd.solvers.activeset.ActiveSets`), it publishes [w, ξ̂] instead of [w, A]
(ξ̂_i: example i's hinge loss on its active set, recomputed with w_V before V is published),
and the workers' violation is Δ − w̄·φ − ξ̂_i (:attr:`~demidcd.parallel.worker.WorkerSpec.tail_C`);
the schedule and its stopping rule are the same, with the largest KKT gap for max |PG|.
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
from .learner import DcdLearner
from .state import Start

DEFAULT_RHO = 100_000  # updates between publishes (EWT XPOS p=2: see benchmarks/README.md)
PUBLISH_INTERVAL = 0.3  # seconds: publish at least this often when anything changed (more
# often costs the learner time without a lower primal: benchmarks/README.md, "Evidence")
MIN_PUBLISH_INTERVAL = 0.003  # seconds: and at most this often (a worker chunk takes ~2 ms)
PUBLISH_SHARE = (0.03, 0.5)  # bounds of the learner's time spent publishing (publish_gap)
DEFAULT_CHUNK = 64  # examples per validated in-place inference chunk (ρ' of Algorithm 2)
BLOCK = 256  # examples between ring drains
LEARNER_CHUNK = 16  # examples per inference call in the learner's own first epoch
LEARNER_EPOCH_SWEEPS = 2  # ...which ends early once every worker finished this many sweeps
# (with many workers, or costly inference, the learner's updating is then the scarcer work)
LEARNER_EPOCH_SECONDS = 5.0  # ...or after this long (CBC: a full epoch takes minutes; the main
# loop then goes on inferring at the measured share, and logs its iterations)
PASSES_PER_SWEEP = 8.0  # R0 of inference_share: update passes per worker sweep to keep
MAX_INFERENCE_SHARE = 0.95  # the learner always keeps 5% of its time for updates


def publish_gap(L: DcdLearner, longest: float) -> float:
    """Seconds to wait after a publish before the next one.

    The share of the learner's time spent publishing follows the share of pushed structures the
    learner rejected since the last publish (found with a w̄ so stale that they no longer
    violate, Eq. 11), within :data:`PUBLISH_SHARE`: while w moves fast (the first seconds, when
    up to 3/4 of the structures arrive stale) publishes come every few ms; near the optimum
    (< 10% rejected) they cost ≤ 3–10% of the learner's time. Bounded by
    :data:`MIN_PUBLISH_INTERVAL` and ``longest``."""
    share = min(PUBLISH_SHARE[1], max(PUBLISH_SHARE[0], L.shared.stale_share))
    return min(longest, max(MIN_PUBLISH_INTERVAL, L.shared.last_publish_cost / share))


def inference_share(L: DcdLearner, pass_seconds: float) -> float:
    """Share of the learner's time to spend on loss-augmented inference of its own after the
    first epoch: 1 − R0/R with R = (a worker's sweep time) / (the learner's full update-pass
    time, ``pass_seconds``),
    both measured, and 0 when R ≤ R0 (:data:`PASSES_PER_SWEEP`).

    Where inference is expensive (CBC on CoNLL04: a sweep takes tens of seconds, a pass over
    the active sets tens of milliseconds) a learner that only updates re-sweeps converged
    active sets while the workers are the bottleneck; spending this share on inference leaves
    it R0 update passes per worker sweep (as DCD-SSVM's r inner passes per inference epoch)
    and adds one inference process at p = 2. Where inference is cheap (Viterbi on EWT: a
    sweep takes about as long as a pass) the share is 0 and the learner only updates."""
    workers = max(L.threads - 1, 1)
    sweep = L.task.n_examples * L.seconds_per_inference / workers
    if pass_seconds <= 0.0 or sweep <= PASSES_PER_SWEEP * pass_seconds:
        return 0.0
    return min(MAX_INFERENCE_SHARE, 1.0 - PASSES_PER_SWEEP * pass_seconds / sweep)


def train_demi_dcd(task: Task, config: SolverConfig, threads: int,
                   callback: Callback | None = None, rho: int = DEFAULT_RHO,
                   rho_worker: int = DEFAULT_CHUNK, cpu_log: str | None = None,
                   log: Callable[[str], None] | None = None, debug: bool = False,
                   ring_words: int = RING_WORDS, publish_interval: float = PUBLISH_INTERVAL,
                   tick: Callable[[float, np.ndarray], None] | None = None,
                   backend: str = "shm", ray_address: str | None = None,
                   start: Start | None = None) -> TrainResult:
    """Train with one learner (this process) and ``threads − 1`` inference workers on the
    ``backend`` transport ("shm" or "ray"). ``start``: a prior and/or a saved state
    (:mod:`.state`)."""
    L = DcdLearner(task, config, threads, "demi", callback, rho_worker, ring_words, log,
                      debug, tick=tick, backend=backend, ray_address=ray_address, start=start)
    n, workers = task.n_examples, L.transport
    rng = saved_rng(start, ("demi-dcd",), config.seed)
    plan = SweepPlan(L.act, config.skip)
    epoch0 = start.epoch if start else 0
    reason, epoch = "max-epochs", epoch0
    try:
        L.start()
        since_publish, last_publish = 0, time.perf_counter()

        def publish_due(updates: int) -> bool:  # ρ updates, or the staleness schedule
            return updates >= rho or (time.perf_counter() - last_publish
                                      >= publish_gap(L, publish_interval))

        own = rng.permutation(n).astype(np.int64)  # the learner's own inference order
        at = 0
        for at in range(0, n, LEARNER_CHUNK):  # the learner's own DCD-Light epoch
            L.ingest(update_now=True)
            L.infer(own[at:at + LEARNER_CHUNK])
            if publish_due(0):
                L.publish()
                last_publish = time.perf_counter()
            if L.poll() or workers.sweeps_completed() >= LEARNER_EPOCH_SWEEPS or \
                    L.clock.elapsed() >= LEARNER_EPOCH_SECONDS:
                break
        at += LEARNER_CHUNK
        share, t_main, infer_main = 0.0, time.perf_counter(), L.seconds["infer"]
        full_pass_ema = 0.0  # seconds of a full update pass over all active sets (measured)
        for epoch in range(epoch0 + 1, epoch0 + config.epochs(1 << 62) + 1):
            order = rng.permutation(n).astype(np.int64)
            max_pg, received, shrunk, skipped = 0.0, 0, 0, 0
            skip_below = plan.threshold()
            t_pass, infer_pass = time.perf_counter(), L.seconds["infer"]
            for s in range(0, n, BLOCK):
                received += L.ingest(update_now=True)
                st = L.update(order[s:s + BLOCK], skip_below)
                max_pg, shrunk = max(max_pg, st.max_pg), shrunk + st.shrunk
                skipped += st.skipped
                since_publish += st.updates
                if since_publish and publish_due(since_publish):
                    L.publish()
                    since_publish, last_publish = 0, time.perf_counter()
                if share > 0.0 and (L.seconds["infer"] - infer_main
                                    < share * (time.perf_counter() - t_main)):
                    if at >= n:
                        own, at = rng.permutation(n).astype(np.int64), 0
                    received += max(L.infer(own[at:at + LEARNER_CHUNK]), 0)
                    at += LEARNER_CHUNK
                if L.poll():
                    break
            pass_seconds = (time.perf_counter() - t_pass) - (L.seconds["infer"] - infer_pass)
            full_pass = pass_seconds * n / max(n - skipped, 1)  # a skipping pass, scaled up
            full_pass_ema = full_pass if full_pass_ema <= 0.0 else \
                0.7 * full_pass_ema + 0.3 * full_pass
            share = inference_share(L, full_pass_ema)
            converged = False
            if plan.certifies(max_pg, config.tol) and received == 0 and not L.poll():
                version = L.publish(fresh=True)  # V: w is not changed again unless a
                # violation arrives (the L1 loss's ξ̂ are recomputed at w_V first),
                since_publish = 0  # so the w returned is the
                t = time.perf_counter()  # one the workers' clean sweeps certify
                while not L.poll():
                    L.ingest()  # records only enter the active sets (α = 0): w stays w_V
                    if L.shared.last_drained:  # a worker saw a violation at V: resume
                        break
                    if workers.all_clean_since(version):
                        converged = True
                        break
                    if share > 0.0:  # check examples itself with w_V, without updating
                        if at >= n:
                            own, at = rng.permutation(n).astype(np.int64), 0
                        found = L.infer(own[at:at + LEARNER_CHUNK], update=False)
                        at += LEARNER_CHUNK
                        if found > 0:
                            break
                    else:
                        time.sleep(0.001)
                L.seconds["wait"] += time.perf_counter() - t
            L.iteration(epoch, max_pg, shrunk, inference_share=round(share, 3))
            if stop := stop_reason(converged, L.clock):
                reason = stop
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        res = L.finish(reason, epoch, cpu_log, rng)
    return res
