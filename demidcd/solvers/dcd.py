"""1-DCD: single-process DCD-SSVM (Algorithm 3) and DCD-Light (Algorithm 2) of
Chang & Yih (2013), the reference every parallel learner must agree with.

Each outer iteration: r passes of UPDATEWEIGHT over the working sets (DCD-SSVM only; between
full passes they leave out the examples with the smallest projected gradients, see
:class:`~demidcd.solvers.activeset.SweepPlan`), then one
shuffled pass that runs loss-augmented inference (Eq. 5) per example, admits the structure when
it violates by more than min(δ, tol) (Eq. 11), and runs UPDATEWEIGHT on that example.

The run stops when an inference pass finds no structure violating by more than tol and a pass
over every active set (the last inner pass when it was a full one, else the inference pass
itself, which visits every example) saw max |PG| < tol. Both tests are absolute (tol is in
units of Δ, tokens for tagging), so the count of epochs does not shrink with the data: a small
training set can take a couple of hundred epochs to certify, most of them polishing an optimum
the predictions no longer notice, the last ones each admitting a few new structures whose
violation only just exceeds tol (benchmarks/README.md, "Evidence behind the defaults and design
choices"). The paper runs a fixed 25 iterations; a ``time_limit`` or ``max_epochs``, or a
larger ``tol``, stops sooner.

With ``config.loss == "l1"`` the same schedule solves the L1-loss (hinge) SSVM: the active sets
run the SMO procedure per example instead of the coordinate sweeps (see
:class:`~demidcd.solvers.activeset.ActiveSets`), the violation is Δ − w·φ − ξ̂_i and the largest
projected gradient is the largest KKT gap.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..tasks.base import InferenceInterrupted, Task
from .activeset import ActiveSets, SweepPlan
from .common import Callback, SolverConfig, StopRequest, TrainResult, stop_reason
from .recorder import Recorder
from .state import DualState, Start


def begin(act: ActiveSets, start: Start | None, examples: np.ndarray | None = None,
          write_w: bool = True) -> None:
    """Set up ``act`` where ``start`` says (:mod:`.state`): the prior w₀, then the saved
    structures of ``examples`` (default all), w = w₀ + Σ α φ (``write_w=False``: the caller
    set the shared w of several learners to it, :func:`~.state.state_w`)."""
    if not start:
        return
    act.set_prior(start.prior, write=write_w)
    if start.state is not None:
        act.restore(start.state.arrays, examples, add=write_w)
        if start.release and examples is None:  # loaded: its φ live in the active sets now
            a = start.state.arrays
            a["phi_idx"], a["phi_val"] = a["phi_idx"][:0].copy(), a["phi_val"][:0].copy()
            start.state.meta["released"] = True


def saved_rng(start: Start | None, names: tuple[str, ...], seed: int | list[int]
              ) -> np.random.Generator:
    """The shuffling generator: the saved one when resuming a state of a learner in ``names``
    (the same sequence of permutations as one uninterrupted run), else seeded by ``seed`` and,
    when resuming another learner's state, its epoch count."""
    st = start.state if start else None
    if st is not None and st.meta.get("algorithm") in names and st.meta.get("rng"):
        rng = np.random.default_rng()
        rng.bit_generator.state = st.meta["rng"]
        return rng
    base = list(np.atleast_1d(seed))
    return np.random.default_rng(base if st is None else [*base, st.epoch])


def train_dcd(task: Task, config: SolverConfig, callback: Callback | None = None,
              light: bool = False, tick: Callable[[float, np.ndarray], None] | None = None,
              cpu_log: str | None = None, start: Start | None = None) -> TrainResult:
    """Train with DCD-SSVM (``light=False``, r = config.inner_passes) or DCD-Light.
    ``tick(seconds, w)`` is called between chunks of inference (snapshots on time whatever
    one outer iteration costs). ``start``: a prior w₀ and/or a saved state to resume from, and
    whether to keep the final state (:mod:`.state`). ``config`` is checked by the caller
    (:func:`~.plan.make_plan`)."""
    name = "dcd-light" if light else "dcd"
    recorder = Recorder(task, config, callback, tick=tick, prior=start.prior if start else None)
    rng = saved_rng(start, (name,), config.seed)
    act = ActiveSets(task.n_examples, task.dim, config.C, config.admit, config.max_active,
                     sweeps=config.sweeps, loss=config.loss, tol=config.tol)
    begin(act, start)
    plan = SweepPlan(act, config.skip)
    if start and start.state is not None and start.state.meta.get("algorithm") == name:
        plan.restore(start.state.meta.get("plan"))
    clock = recorder.start()
    task.should_stop = lambda: StopRequest.requested or clock.expired()
    r = 0 if light else config.inner_passes
    n, b = task.n_examples, config.batch
    totals = {"updates": 0, "inferences": 0, "admitted": 0, "shrunk": 0}
    # the work done so far, read by the snapshot writer (this epoch's counts not yet in totals)
    clock.count_work(lambda: (totals["updates"] + updates, totals["inferences"] + inferred))
    updates = inferred = 0
    epoch0 = start.epoch if start else 0  # epochs of the runs this one resumes
    pending = _pending(start, name, n)  # the epoch a resumed run was stopped in, if any
    reason, epoch = "max-epochs", epoch0
    cut: tuple[dict, np.ndarray] | None = None  # where this run's last epoch was stopped
    try:
        for epoch in range(epoch0 + (pending is None), epoch0 + config.epochs(1 << 62) + 1):
            if pending is not None:  # finish the inference pass the saved run was stopped in
                (ep, order), pending = pending, None
                at, carried = int(ep["at"]), ep
                max_pg, shrunk, updates = float(ep["max_pg"]), int(ep["shrunk"]), \
                    int(ep["updates"])
                certified, violators = bool(ep["certified"]), int(ep["violators"])
                admitted, pass_pg = int(ep["admitted"]), float(ep["pass_pg"])
            else:
                at, carried = 0, None
                max_pg, shrunk, updates, certified = 0.0, 0, 0, False
                for _ in range(r):
                    st = act.update(rng.permutation(n).astype(np.int64),
                                    skip_below=plan.threshold())
                    max_pg, shrunk, updates = st.max_pg, shrunk + st.shrunk, \
                        updates + st.updates
                    certified = plan.certifies(max_pg, config.tol)
                    if clock.expired():
                        break
                order = rng.permutation(n).astype(np.int64)
                violators = admitted = 0
                pass_pg = 0.0
            inferred = 0
            for s in range(at, n, b):
                chunk = order[s:s + b]
                unproven = task.unproven
                try:
                    batch = task.loss_augmented(act.w, chunk)
                except InferenceInterrupted:
                    break
                violators += task.unproven - unproven  # a solver's time cap proves nothing
                violators += int((act.violation(batch) > config.tol).sum())
                admitted += act.insert(batch).admitted
                st = act.update(chunk)
                pass_pg = max(pass_pg, st.max_pg)
                shrunk, updates = shrunk + st.shrunk, updates + st.updates
                at, inferred = s + len(chunk), inferred + len(chunk)
                if clock.poll(act.w):
                    break
            cut = None
            if at < n:  # stopped inside the pass: a state goes on from here (_pending)
                cut = ({"at": at, "max_pg": max_pg, "shrunk": shrunk, "updates": updates,
                        "certified": certified, "violators": violators, "admitted": admitted,
                        "pass_pg": pass_pg}, order)
                violators += 1  # an unfinished pass proves nothing
            # the restricted problem is judged by the last pass over every active set: the
            # inference pass visits every example, so it certifies as a full inner pass does
            # (the sweep plan's full passes need not fall last: with an even r they never did)
            if r == 0 or (not certified and pass_pg < config.tol):
                max_pg, certified = pass_pg, pass_pg < config.tol
            # the log's max |PG|: at each example's last visit. The inference pass visited those
            # it reached after their new structures came, so unless the epoch certifies, it
            # is the pass's (the first epoch's update passes saw empty active sets: |PG| 0)
            shown_pg = max_pg if violators == 0 and certified else \
                pass_pg if at >= n else max(max_pg, pass_pg)
            before = carried or {}  # a finished epoch's counts made by the saved run
            totals["updates"] += updates - int(before.get("updates", 0))
            totals["inferences"] += inferred
            totals["admitted"] += admitted - int(before.get("admitted", 0))
            totals["shrunk"] += shrunk - int(before.get("shrunk", 0))
            recorder.epoch({"epoch": epoch, "updates": updates,
                            "total_updates": totals["updates"], "inferences": totals["inferences"],
                            "admitted": admitted, "violators": violators, "active": act.size,
                            "shrunk": shrunk, "max_pg": shown_pg}, act.w,
                           dual=act.dual_objective)
            if stop := stop_reason(violators == 0 and certified, clock):
                reason = stop
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        task.__dict__.pop("should_stop", None)
    res = recorder.finish(act.w, reason, epoch, act.dual_objective(), cpu_log=cpu_log,
                          **totals)
    if start and start.keep_state:
        arrays = act.state()
        meta = {"epoch": epoch, "algorithm": name, "rng": rng.bit_generator.state,
                "plan": plan.saved()}
        if cut is not None and reason != "interrupted":  # a Ctrl-C may fall anywhere
            meta["pending"], arrays["pending_order"] = cut
        res.state = DualState(arrays, meta)
    return res


def _pending(start: Start | None, name: str, n: int) -> tuple[dict, np.ndarray] | None:
    """(the counts, the shuffled order) of the epoch a saved ``name`` run was stopped in,
    inside its inference pass; None when it ended at an epoch's end (or was another
    learner's, or is malformed: the resumed run then starts a new epoch)."""
    st = start.state if start else None
    if st is None or st.meta.get("algorithm") != name or not st.meta.get("pending"):
        return None
    ep, order = st.meta["pending"], st.arrays.get("pending_order")
    keys = ("at", "max_pg", "shrunk", "updates", "certified", "violators", "admitted",
            "pass_pg")
    if order is None or order.shape != (n,) or not isinstance(ep, dict) or \
            any(k not in ep for k in keys) or not 0 < int(ep["at"]) < n or \
            not np.array_equal(np.sort(order), np.arange(n)):
        return None
    return ep, order.astype(np.int64)


def _schedule(light: bool, doc: str) -> Callable[..., TrainResult]:
    """A registry schedule running :func:`train_dcd` on one process (``light``: DCD-Light)."""

    def run(task: Task, config: SolverConfig, threads: int = 1,
            callback: Callback | None = None, cpu_log: str | None = None,
            tick: Callable[[float, np.ndarray], None] | None = None,
            start: Start | None = None,
            log: Callable[[str], None] | None = None) -> TrainResult:
        return train_dcd(task, config, callback, light=light, tick=tick, cpu_log=cpu_log,
                         start=start)

    run.__doc__ = doc
    return run


run_dcd = _schedule(False, "The registry's ``dcd`` schedule: DCD-SSVM on one process.")
run_dcd_light = _schedule(True, "The registry's ``dcd-light`` schedule: DCD-Light on one "
                                "process.")
