"""1-DCD: single-process DCD-SSVM (Algorithm 3) and DCD-Light (Algorithm 2) of
Chang & Yih (2013), the reference every parallel learner must agree with.

Each outer iteration: r passes of UPDATEWEIGHT over the working sets (DCD-SSVM only; between
full passes they leave out the examples with the smallest projected gradients, see
:class:`~demidcd.solvers.activeset.SweepPlan`), then one
shuffled pass that runs loss-augmented inference (Eq. 5) per example, admits the structure when
it violates by more than min(δ, tol) (Eq. 11), and runs UPDATEWEIGHT on that example.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..tasks.base import InferenceInterrupted, Task
from .activeset import ActiveSets, SweepPlan
from .common import Callback, Clock, SolverConfig, StopRequest, TrainResult, objective, stop_reason


def train_dcd(task: Task, config: SolverConfig, callback: Callback | None = None,
              light: bool = False, tick: Callable[[float, np.ndarray], None] | None = None
              ) -> TrainResult:
    """Train with DCD-SSVM (``light=False``, r = config.inner_passes) or DCD-Light.
    ``tick(seconds, w)`` is called between chunks of inference (snapshots on time whatever
    one outer iteration costs)."""
    config.validate()
    rng = np.random.default_rng(config.seed)
    act = ActiveSets(task.n_examples, task.dim, config.C, config.delta, config.max_active,
                     sweeps=config.sweeps)
    plan = SweepPlan(act, config.skip)
    clock = Clock(config.time_limit, tick)
    task.should_stop = lambda: StopRequest.requested or clock.expired()
    r = 0 if light else config.inner_passes
    n, b = task.n_examples, config.batch
    history: list[dict] = []
    totals = {"updates": 0, "inferences": 0, "admitted": 0, "shrunk": 0}
    reason, epoch, last_eval = "max-epochs", 0, 0.0
    try:
        for epoch in range(1, config.epochs(1 << 62) + 1):
            max_pg, shrunk, updates, certified = 0.0, 0, 0, False
            for _ in range(r):
                st = act.update(rng.permutation(n).astype(np.int64), skip_below=plan.threshold())
                max_pg, shrunk, updates = st.max_pg, shrunk + st.shrunk, updates + st.updates
                certified = plan.certifies(max_pg, config.tol)
                if clock.expired():
                    break
            order = rng.permutation(n).astype(np.int64)
            violators = admitted = 0
            pass_pg = 0.0
            for s in range(0, n, b):
                chunk = order[s:s + b]
                unproven = task.unproven
                try:
                    batch = task.loss_augmented(act.w, chunk)
                except InferenceInterrupted:
                    violators += 1
                    break
                violators += task.unproven - unproven  # a solver's time cap proves nothing
                violators += int((batch.violation(act.alpha_sum, config.C) > config.tol).sum())
                admitted += act.insert(batch, config.admit).admitted
                st = act.update(chunk)
                pass_pg = max(pass_pg, st.max_pg)
                shrunk, updates = shrunk + st.shrunk, updates + st.updates
                if clock.poll(act.w):
                    violators += 1  # an unfinished pass proves nothing
                    break
            # the restricted problem is judged by the last pass over every active set
            if r == 0:
                max_pg, certified = pass_pg, pass_pg < config.tol
            totals["updates"] += updates
            totals["inferences"] += n
            totals["admitted"] += admitted
            totals["shrunk"] += shrunk
            rec = {"epoch": epoch, "seconds": round(clock.elapsed(), 4), "updates": updates,
                   "total_updates": totals["updates"], "inferences": totals["inferences"],
                   "admitted": admitted, "violators": violators, "active": act.size,
                   "shrunk": shrunk, "max_pg": max_pg}
            if config.eval_every is not None and clock.elapsed() - last_eval >= config.eval_every:
                ob = objective(task, act.w, config.C, act.dual_objective())
                rec.update(primal=ob.primal, dual=ob.dual, gap=ob.gap)
                last_eval = clock.elapsed()
            history.append(rec)
            if callback is not None:
                callback(rec, act.w)
            if stop := stop_reason(violators == 0 and certified, clock):
                reason = stop
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        task.__dict__.pop("should_stop", None)
    return TrainResult(act.w, reason == "converged", reason, epoch, clock.elapsed(), history,
                       act.dual_objective())
