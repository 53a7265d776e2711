"""Training the SSVM learners from partially labelled data: the latent structural SVM
(Yu & Joachims, ICML 2009) by the concave-convex procedure (CCCP), as the SDM paper's ramp loss.

A partially labelled example i admits a set of taggings H_i (every token's label known, one of
a set, or unknown, and the label scheme obeyed); its loss Δ_i(y) counts the tokens whose
admitted labels do not hold y_t (an unknown token costs 0; Δ_i(h) = 0 for h ∈ H_i). The latent
objective (L2 loss; the L1 loss sums ξ_i)

    L(w) = ½‖w − w₀‖² + C Σ_i ξ_i²,   ξ_i = max_y [w·Φ(x_i, y) + Δ_i(y)] − max_{h∈H_i} w·Φ(x_i, h)

is a convex function minus a convex one. CCCP linearises the concave part at w_t: impute
ŷ_i = argmax_{h∈H_i} w_t·Φ(x_i, h) (the task's :meth:`impute`, constrained Viterbi), then solve
the convex SSVM with targets ŷ_i and loss Δ_i (the task's :meth:`with_targets`) with the engine
(any DCD learner, on any number of processes). Then L(w_{t+1}) ≤ J_t(w_{t+1}) ≤ J_t(w_t) = L(w_t)
(J_t the convex problem; the first inequality because w·Φ(ŷ_i) ≤ max_{h∈H_i} w·Φ(h)), so the
objective never increases when each convex step is solved (to the learners' tolerance). The
loop stops when L decreases by less than :data:`CCCP_TOL` (relative), at the time limit or after
:data:`CCCP_ROUNDS` rounds; the best w met is returned. Under a time limit each step gets a share
of the time left (:data:`FIRST_SHARE`, :data:`ROUND_SHARE`) and stops at a looser tolerance
(:data:`STEP_TOL_FACTOR` times the learner's) or, but the first, after :data:`STEP_EPOCHS`
epochs, whichever comes first (inexact CCCP, the targets of a step being provisional). A step
so cut short after which the objective did not decrease goes on first (its targets and state
kept, :data:`STEP_EXTENSIONS` times at most); when the objective still stops decreasing
(inexact steps need not decrease it), the best round's step is resumed where it stopped (its
own targets and state) in all the time left, to the learner's tolerance. Without a time
limit every step is solved to the tolerance.

**Start.** Imputing under w = 0 ties every tagging. When some examples are fully labelled the
first step trains on them alone (the others ``inert``: no records), whose α are α of the full
problem (zero on the partial examples); otherwise it imputes under w₀ (0: the first admitted
label wins ties).

**Warm start, α carried over.** A dual variable α_{i,y} of the convex step is the record
(i, y, Δ_i(y), φ = Φ(x_i, ŷ_i) − Φ(x_i, y)). Δ_i(y) depends on the annotation only, so when the
target of example i moves from ŷ to ŷ', each of its records stays valid once re-expressed:
φ' = Φ(ŷ') − Φ(y) = φ − d_i with d_i = Φ(ŷ) − Φ(ŷ') (the old task's φ of ŷ'). α, A_i = Σ_y α_{i,y}
and Δ are unchanged, so α stays dual feasible, and the learner rebuilds w = w₀ + Σ α φ' from
the re-expressed state (:meth:`~.activeset.ActiveSets.restore`): w moves by −Σ_i A_i d_i, which is
exactly the w of the same α under the new targets (w = w₀ + Σαφ holds by construction, not by
carrying the old w). A record whose y is the new target (φ' = 0, Δ = 0) is dropped with its α.
Every example's skipping state is reset (w changed), so the first pass is a full one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numba as nb
import numpy as np

from ..errors import OptionError
from ..tasks.base import Task
from .common import TrainResult, primal_objective, work_done
from .state import DualState, Start, empty_state, fingerprint, state_w

CCCP_TOL = 1e-3  # stop when the latent objective decreases by less than this share
CCCP_ROUNDS = 50  # convex steps at most
MIN_ROUND_SECONDS = 5.0  # no convex step is started with less time left, none given less
# (a step of several processes first starts its workers)
FIRST_SHARE = 0.05  # with a time limit: the first step's share of it (the labelled examples)
ROUND_SHARE = 0.1  # and each later step's share of the time left (warm-started, they mostly
# reach the learner's tolerance sooner); once the objective stops decreasing after a step
# cut short, the best round's step is resumed as it stopped, in all the time left
STEP_TOL_FACTOR = 10.0  # with a time limit, every step but the last stops at this multiple of
# the learner's tolerance (inexact CCCP: a step's targets are provisional, its early epochs do
# most of its good); the best round's step is then resumed to the tolerance itself
STEP_EXTENSIONS = 2  # with a time limit, a step cut short (its epochs or its share) after
# which the latent objective did not decrease goes on this many times at most (its targets
# kept) before the decrease is judged: its re-expressed start can put w above where the last
# round ended, and its epochs need not recover that (benchmarks/README.md, issue 55)
STEP_EPOCHS = 10  # with a time limit, every step but the first and the last also stops after
# this many of the learner's epochs when an epoch infers every example once (plan.sweep_epochs),
# whatever the limit: their targets are provisional, so the imputations come as soon as each
# step's first epochs have done most of its good (5 were too few on EWT: the latent objective
# rose). The first step (the labelled examples, whose targets never move) keeps its share: cut
# at 10 epochs its model imputed twice as many wrong targets and CCCP ended lower on EWT


class RunClock:
    """The whole CCCP run's clock for what the convex steps report while they run. Each step's
    learner counts its seconds (and its work) from its own start; the snapshot writer (``tick``,
    e.g. :meth:`~demidcd.io.snapshots.Snapshotter.maybe`) and the records passed to
    ``callback`` get them on the run's clock instead: seconds + :attr:`offset` (the time, from
    the run's start, at which the running step was called: 0 for the first, whose clock is the
    run's) and work + :attr:`work` (the steps before it). So the snapshots of every round lie
    on one monotone time line (a step's snapshot at its second s was taken at or after
    offset + s) and ``evaluate-snapshots`` gives the accuracy curve of the whole run.
    :meth:`maybe` stands for the writer's own: a learner reads the writer's ``due`` (on its
    own clock here) and sets its ``work_source`` through the bound method's owner."""

    def __init__(self, tick: Callable[[float, np.ndarray], None] | None,
                 callback: Callable[[dict, np.ndarray], None] | None):
        self._tick, self._callback = tick, callback
        self.owner = getattr(tick, "__self__", None)  # the snapshot writer, if any
        self.offset, self.work = 0.0, (0, 0)

    @property
    def due(self) -> float | None:
        due = getattr(self.owner, "due", None)
        return None if due is None else due - self.offset

    @property
    def work_source(self) -> Callable[[], tuple[int, int]] | None:
        return getattr(self.owner, "work_source", None)

    @work_source.setter
    def work_source(self, source: Callable[[], tuple[int, int]] | None) -> None:
        if self.owner is None or not hasattr(self.owner, "work_source"):
            return
        base = self.work
        self.owner.work_source = None if source is None else (
            lambda: tuple(int(a + b) for a, b in zip(base, source(), strict=True)))

    def maybe(self, seconds: float, w: np.ndarray) -> None:
        if self._tick is not None:
            self._tick(seconds + self.offset, w)

    def record(self, rec: dict, w: np.ndarray) -> None:
        """The step's record on the run's clock (changed in place: the run's history holds
        the same dicts), then the caller's callback."""
        rec["seconds"] = round(float(rec.get("seconds", 0.0)) + self.offset, 4)
        for k, base in (("total_updates", self.work[0]), ("inferences", self.work[1])):
            if k in rec:
                rec[k] = int(rec[k]) + base
        if self._callback is not None:
            self._callback(rec, w)

    def step_done(self, res: TrainResult) -> None:
        """Count a finished step's work in :attr:`work`."""
        done = work_done(res.extra)
        if done is not None:
            self.work = (self.work[0] + done[0], self.work[1] + done[1])


class _Parked:
    """The dual state of one step's result (the best round's) kept in an unnamed temporary
    file instead of memory while later steps run: it is read again only to resume that step
    (when the latent objective stops decreasing) or to return it (``keep_state``). The file
    has no name (deleted when closed, or when the process ends)."""

    def __init__(self) -> None:
        self.res: TrainResult | None = None
        self.file: Any = None
        self.meta: dict = {}

    def park(self, res: TrainResult | None) -> None:
        if res is None or res.state is None or res is self.res:
            return
        self.drop()
        import tempfile

        self.file = tempfile.TemporaryFile(prefix="demidcd-cccp-")
        np.savez(self.file, **res.state.arrays)
        self.res, self.meta = res, res.state.meta
        res.state = None

    def has_state(self, res: TrainResult) -> bool:
        return res.state is not None or (res is self.res and self.file is not None)

    def unpark(self, res: TrainResult) -> DualState | None:
        """``res``'s state, read back into memory if parked."""
        if res is self.res and self.file is not None:
            self.file.seek(0)
            with np.load(self.file, allow_pickle=False) as z:
                res.state = DualState({k: z[k] for k in z.files}, self.meta)
            self.drop()
        return res.state

    def drop(self) -> None:
        if self.file is not None:
            self.file.close()
        self.res, self.file, self.meta = None, None, {}


def convex_view(task: Task) -> Task:
    """``task`` itself for complete data; for partially labelled data its convex step with the
    targets imputed under w = 0 (what a measurement of inference, e.g. DEMI-DCD's
    ``learners="auto"``, times)."""
    if not getattr(task, "partial", False):
        return task
    return task.with_targets(task.impute(np.zeros(task.dim)))


def latent_objective(task: Task, w: np.ndarray, C: float, loss: str = "l2",
                     w0: np.ndarray | None = None) -> tuple[float, Task]:
    """(L(w), the convex step's task at w): the targets imputed under w, then the primal of
    that convex problem at w (:func:`~.common.primal_objective`), which is L(w) because the
    imputed ŷ_i attains max_{h∈H_i} w·Φ(h)."""
    task_w = task.with_targets(task.impute(w))
    return primal_objective(task_w, w, C, loss=loss, w0=w0)[0], task_w


def reexpress(state: DualState, old: Task, new_targets: np.ndarray, changed: np.ndarray,
              l1: bool = False, w0: np.ndarray | None = None
              ) -> tuple[dict[str, np.ndarray], int]:
    """The state's arrays with every record of a ``changed`` example (bool per example)
    re-expressed against its new target: φ' = φ − d_i, d_i = Φ(ŷ) − Φ(ŷ') (``old``'s φ of the
    new target), records with φ' = 0 dropped; A_i recomputed, every skipping state reset and,
    for the L1 loss (``l1``), every ξ̂_i recomputed under the new w = ``w0`` + Σ α φ'. The
    records of the other examples are kept entry for entry; the new φ arrays, of the state's
    dtypes, are filled in two passes of :func:`_reexpress_pass` (count, then fill), so the
    memory it takes is the new arrays' (and the d_i), not copies of every entry in int64.
    Returns (arrays, records dropped)."""
    dim = old.dim
    a = state.arrays
    ex, ptr = a["example"], a["phi_ptr"]
    S, n = ex.shape[0], a["alpha_sum"].shape[0]
    with_records = np.unique(ex[changed[ex]]) if S else np.zeros(0, np.int64)
    d_len = np.zeros(n, np.int64)
    d_idx, d_val = [], []
    for i in with_records.tolist():
        idx, val, _ = old.phi_delta(i, old.example_target(new_targets, i))
        d_len[i] = idx.shape[0]
        d_idx.append(np.asarray(idx, np.int64))
        d_val.append(np.asarray(val, np.float64))
    d_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(d_len, out=d_ptr[1:])
    di = np.concatenate(d_idx) if d_idx else np.zeros(0, np.int64)
    dv = np.concatenate(d_val) if d_val else np.zeros(0, np.float64)
    del d_idx, d_val
    ex64 = np.asarray(ex, np.int64)
    pidx, pval = a["phi_idx"], a["phi_val"]
    none_i, none_v = np.zeros(0, pidx.dtype), np.zeros(0, pval.dtype)
    full_ptr = np.zeros(S + 1, np.int64)
    count = _reexpress_pass(ex64, ptr, pidx, pval, d_ptr, di, dv, full_ptr, none_i, none_v,
                            False)
    np.cumsum(count, out=full_ptr[1:])
    new_idx = np.empty(int(full_ptr[-1]), pidx.dtype)
    new_val = np.empty(int(full_ptr[-1]), pval.dtype)
    _reexpress_pass(ex64, ptr, pidx, pval, d_ptr, di, dv, full_ptr, new_idx, new_val, True)
    keep = count > 0
    # a record with φ' = 0 is the new target itself (Δ = 0): dropped, with its α
    out = dict(a)
    out.pop("pending_order", None)
    for k in ("example", "hash", "delta", "alpha"):
        out[k] = a[k][keep]
    out["phi_ptr"] = np.concatenate([[0], np.cumsum(count[keep])]).astype(np.int64)
    out["phi_idx"], out["phi_val"] = new_idx, new_val
    out["alpha_sum"] = np.bincount(out["example"], weights=out["alpha"], minlength=n)
    out["ex_pg"] = np.full(n, np.inf)
    if l1:  # ξ̂_i = max(0, max over the active set of Δ − w·φ') under the new w = w₀ + Σαφ'
        w = state_w(DualState({k: v for k, v in out.items() if k != "w0"}), dim)
        if w0 is not None:
            w += w0
        m = out["phi_val"] * w[out["phi_idx"].astype(np.int64)]
        cs = np.concatenate([[0.0], np.cumsum(m)])
        margin = cs[out["phi_ptr"][1:]] - cs[out["phi_ptr"][:-1]]
        xi = np.zeros(n)
        np.maximum.at(xi, out["example"], out["delta"] - margin)
        out["xi"] = xi
    return out, int(S - keep.sum())


@nb.njit(cache=True, nogil=True)
def _reexpress_pass(ex, ptr, pidx, pval, d_ptr, d_idx, d_val, out_ptr, out_idx, out_val,
                    fill):
    """One pass of :func:`reexpress` over the records: the entries of record j's φ' (its
    example i's d_i = ``d_idx/d_val[d_ptr[i]:d_ptr[i + 1]]`` subtracted, entries summed by
    feature in ascending order, |value| <= 1e-12 dropped; an example without d_i keeps its
    records as they are), counted (returned per record) and, with ``fill``, written at
    ``out_ptr[j]``."""
    S = ptr.shape[0] - 1
    counts = np.zeros(S, np.int64)
    for j in range(S):
        a, b = ptr[j], ptr[j + 1]
        i = ex[j]
        da, db = d_ptr[i], d_ptr[i + 1]
        if da == db:
            counts[j] = b - a
            if fill:
                o = out_ptr[j]
                for q in range(a, b):
                    out_idx[o + q - a] = pidx[q]
                    out_val[o + q - a] = pval[q]
            continue
        m = (b - a) + (db - da)
        keys = np.empty(m, np.int64)
        vals = np.empty(m, np.float64)
        for q in range(a, b):
            keys[q - a] = pidx[q]
            vals[q - a] = pval[q]
        for q in range(da, db):
            keys[b - a + q - da] = d_idx[q]
            vals[b - a + q - da] = -d_val[q]
        order = np.argsort(keys, kind="mergesort")
        o = out_ptr[j] if fill else 0
        c = 0
        q = 0
        while q < m:
            k = keys[order[q]]
            v = 0.0
            while q < m and keys[order[q]] == k:
                v += vals[order[q]]
                q += 1
            if abs(v) > 1e-12:
                if fill:
                    out_idx[o + c] = k
                    out_val[o + c] = v
                c += 1
        counts[j] = c
    return counts


def run_cccp(task: Task, plan: Any, convex: Callable[..., TrainResult], log: Any = None,
             start: Start | None = None, **kw: Any) -> TrainResult:
    """Train the latent SSVM of partially labelled ``task`` (see the module docstring):
    ``convex(task, plan, start=…, log=…, **kw)`` solves one convex step (the engine's
    :func:`~demidcd.solvers.run_plan` for complete data); ``plan`` is the run's checked plan,
    whose time limit covers every round. Each round's latent objective is logged and kept in
    ``result.extra["cccp"]``; the counts of unknown and set tokens in
    ``result.extra["partial"]``."""
    if start is not None and start.state is not None:
        raise OptionError("--resume: partially labelled data is trained by CCCP, whose "
                          "targets change between rounds; start it again (--init works)")
    config = plan.config
    say = log if log is not None else (lambda _m: None)
    w0 = start.w0 if start is not None else None
    keep_state = bool(start and start.keep_state)
    t0 = time.perf_counter()
    limit = config.time_limit
    counts = task.partial_counts()
    n_part = counts["partial_examples"]
    say(f"partially labelled data: {counts['unknown']:,} unknown and {counts['sets']:,} set "
        f"tokens in {n_part:,} of {task.n_examples:,} examples; CCCP (latent SSVM)")

    epochs = [0]  # the convex steps' iterations, all together
    clock = [t0]  # the time limit's start: after the first step's set-up (as run_plan's)

    def left() -> float | None:
        return None if limit is None else limit - (time.perf_counter() - clock[0])

    overhead = [0.0, 0.0]  # a later step's wall seconds outside its solver's clock, at most;
    # the last latent objective's seconds
    since = [kw.pop("since", None)]  # the user's call: the first step's set-up only
    run_clock = RunClock(kw.pop("tick", None), kw.pop("callback", None))
    kw["tick"] = run_clock.maybe if run_clock._tick is not None else None
    kw["callback"] = run_clock.record if run_clock._callback is not None else None
    warm = kw.pop("warm", None)

    def warm_all() -> None:  # compiled before the clock with the learner's kernels: the
        if warm is not None:  # caller's, imputation, the set-loss inference
            warm()
        task.impute(np.zeros(task.dim), np.flatnonzero(~task.complete_examples())[:1])
        n = task.n_examples  # and the re-expression (2.3 s to compile, else on the clock)
        reexpress(DualState(empty_state(n), {}), task, task.known_targets(), np.zeros(n, bool))

    history: list[dict] = []

    def step(task_r: Task, state: DualState | None, last: bool = False,
             release: bool = False) -> TrainResult:
        first = clock[0] == t0  # the first convex step: its set-up is outside the limit
        if limit is None:
            cfg = config
        else:  # a share of the time left (the whole of it for the last step), less what a
            # step costs outside its own clock (its start; after the last, the objective)
            rest = limit if first else max((left() or 0.0) - overhead[0]
                                           - (overhead[1] if last else 0.0), 1e-3)
            share = 1.0 if last else FIRST_SHARE if first else ROUND_SHARE
            provisional = not (first or last) and plan.sweep_epochs  # (STEP_EPOCHS)
            cfg = dataclasses.replace(
                config, time_limit=max(share * rest, min(rest, MIN_ROUND_SECONDS)),
                tol=config.tol if last else config.tol * STEP_TOL_FACTOR,
                max_epochs=min(STEP_EPOCHS, config.epochs(STEP_EPOCHS)) if provisional
                else config.max_epochs)
        origin = since[0] if since[0] is not None else time.perf_counter()
        kw["since"], since[0] = since[0], None
        kw["warm"] = warm_all if first else None
        st = Start(w0=w0 if state is None else None, state=state,  # (the resumed best
                   keep_state=keep_state or not last, release=release)  # step ends the run)
        if state is not None and w0 is not None:
            state.arrays["w0"] = w0
        run_clock.offset = 0.0 if first else time.perf_counter() - clock[0]
        res = convex(task_r, dataclasses.replace(plan, config=cfg), log=log, start=st, **kw)
        if first:  # the clock started when the step's set-up ended
            clock[0] = origin + float(res.extra.get("setup_seconds", 0.0))
        else:
            overhead[0] = max(overhead[0], time.perf_counter() - clock[0]
                              - run_clock.offset - float(res.seconds))
        run_clock.step_done(res)
        epochs[0] += int(res.epochs)
        history.extend(res.history)  # (every step's records, the run's history)
        return res

    rounds: list[dict] = []
    parked = _Parked()
    complete = task.complete_examples()
    targets = task.known_targets()
    state: DualState | None = None
    if n_part == 0:  # every token known: one convex step, today's training exactly
        res = step(task.with_targets(targets), None)
        res.extra["partial"] = counts
        if not keep_state:
            res.state = None
        return res
    if complete.any():  # the labelled examples alone first
        say(f"cccp: first the {int(complete.sum()):,} fully labelled examples alone")
        targets = np.where(targets < 0, 0, targets)  # (the inert examples': never read)
        cur = task.with_targets(targets, inert=~complete)
        res = step(cur, None)
        w, state = res.w, res.state
    else:
        res, cur = None, None
        w = np.zeros(task.dim) if w0 is None else w0.astype(np.float64)
    best_w, best_obj, best_res, best_task = w, np.inf, res, cur
    prev, extended = np.inf, 0
    reason, polish = "max-rounds", False
    for r in range(CCCP_ROUNDS + 1):
        t_obj = time.perf_counter()
        obj, task_r = latent_objective(task, w, config.C, config.loss, w0)
        t_obj = time.perf_counter() - t_obj
        overhead[1] = t_obj
        new = task_r.Y
        changed = task.changed_examples(targets, new)
        rounds.append({"round": r, "objective": obj, "changed": int(changed.sum()),
                       "seconds": time.perf_counter() - clock[0], "objective_seconds": t_obj})
        say(f"cccp round {r}: latent objective {obj:.6g}"
            + (f" ({(obj - prev) / abs(prev):+.2e})" if np.isfinite(prev) else "")
            + f", imputed targets changed on {int(changed.sum()):,} examples (at "
            f"{time.perf_counter() - clock[0]:.1f}s; imputing and the objective {t_obj:.1f}s)")
        if obj < best_obj:
            best_w, best_obj, best_res, best_task = w, obj, res, cur
        remaining = left()
        out_of_time = remaining is not None and remaining < MIN_ROUND_SECONDS
        if res is not None and res.stop_reason == "interrupted":
            reason = "interrupted"
            break
        if polish or out_of_time or r == CCCP_ROUNDS:
            reason = "converged" if polish else "time-limit" if out_of_time else "max-rounds"
            break
        if np.isfinite(prev) and obj >= prev - CCCP_TOL * abs(prev):
            if extended < STEP_EXTENSIONS and limit is not None and res is not None \
                    and res.stop_reason in ("max-epochs", "time-limit") and state is not None:
                # the step was cut short (its epochs or its share), not solved: the objective
                # at its w says little of CCCP's yet. It goes on with its targets and state
                extended += 1
                parked.park(best_res)  # (the step may take its state's arrays: the best's,
                # if it is this step's, go to disk first, as before any step)
                say(f"cccp: the last step stopped at its {res.stop_reason.replace('-', ' ')} "
                    f"and the latent objective decreased by less than {CCCP_TOL:g} (relative): "
                    "that step goes on (its targets kept)")
                res = step(cur, state, release=True)
                w, state = res.w, res.state
                continue
            if res is None or limit is None or best_res is None \
                    or not parked.has_state(best_res) or best_task is None:
                reason = "converged"
                break
            # the best w's convex step stopped at its share of the time or at the steps' looser
            # tolerance: it goes on (resumed as it stopped, its targets kept) in the time left,
            # to the learner's tolerance
            say("cccp: the latent objective stopped decreasing; the best round's convex step "
                "goes on in the time left")
            polish, cur = True, best_task
            res = step(best_task, parked.unpark(best_res), last=True, release=not keep_state)
            w, state = res.w, res.state
            continue
        prev, extended = obj, 0
        if state is not None:
            arrays, _dropped = reexpress(state, task.with_targets(targets), new, changed,
                                         config.loss == "l1", w0)
            meta = {k: v for k, v in state.meta.items() if k not in ("pending", "plan")}
            meta["fingerprint"] = fingerprint(task_r, config.C, config.loss, w0)
            state = DualState(arrays, meta)
        targets, cur = new, task_r
        if limit is None and not keep_state and best_res is not None:
            best_res.state = None  # (no time limit: no step is resumed, no state returned)
        parked.park(best_res)  # (on disk while the step runs: needed again only to resume it)
        res = step(task_r, state, release=state is not None)
        w, state = res.w, res.state
    final = best_res if best_res is not None else res
    if keep_state and final is not None:
        parked.unpark(final)
    parked.drop()
    if final is None:  # (no convex step ran: no time)
        final = TrainResult(best_w, False, reason, 0, 0.0)
    out = dataclasses.replace(final, w=best_w, seconds=time.perf_counter() - clock[0],
                              history=history, finished=reason == "converged" and final.finished,
                              stop_reason=reason, epochs=epochs[0], extra=dict(final.extra))
    if "updates" in out.extra and "inferences" in out.extra:  # the whole run's work
        out.extra["updates"], out.extra["inferences"] = run_clock.work
        out.extra.pop("learner_inferences", None)  # (counted in the inferences)
    out.extra["cccp"] = rounds
    out.extra["partial"] = counts
    out.extra["cccp_stop"] = stop_summary(reason, len(rounds) - 1, final, config)
    out.extra.pop("stop_rule", None)  # (the step's: in cccp_stop)
    if not keep_state:
        out.state = None
    say(f"cccp: {len(rounds) - 1} rounds, best latent objective {best_obj:.6g}")
    return out


def stop_summary(reason: str, rounds: int, step: TrainResult, config: Any) -> dict[str, Any]:
    """How a CCCP run ended, for the ``stopped:`` line (:func:`~demidcd.progress.stop_line`):
    the run's reason (``converged``: the latent objective decreased by less than
    :data:`CCCP_TOL` in a round; ``time-limit``; ``max-rounds``; ``interrupted``), its rounds,
    and the state of the convex step whose w is returned (the best round's): its own stop
    reason, whether it reached the learner's tolerance, and its stop rule (what, value,
    option, target, epochs option) as :func:`~demidcd.progress.stop_line` reads it."""
    last = step.history[-1] if step.history else {}
    rule = step.extra.get("stop_rule") or (
        "largest KKT gap" if config.loss == "l1" else "largest projected gradient",
        last.get("max_pg"), "tol", config.tol, "max_epochs")
    return {"reason": reason, "rounds": int(rounds), "tol": CCCP_TOL,
            "step_reason": step.stop_reason, "step_finished": bool(step.finished),
            "step_rule": list(rule)}
