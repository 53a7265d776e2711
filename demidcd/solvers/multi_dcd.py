"""Several learners on one shared w (``--learners K``): asynchronous DCD-SSVM in K processes.

DEMI-DCD has one learner, so where inference is cheap (Viterbi on EWT XPOS) it is learner-bound
from p = 2. Here, as in PASSCoDe (Hsieh, Yu and Dhillon, ICML 2015) and as the DEMI-DCD paper
names for future work, K = p processes each own a disjoint part P_k of the examples (balanced
by cost): their α, active sets A_i and A_i-sums are private, and each runs DCD-SSVM
(Chang & Yih Algorithm 3, the schedule of :mod:`.dcd`) on its part — r passes of the
Eq. (7)–(9) update (:func:`~.kernels.update_examples`) over its active sets, then a pass of
loss-augmented inference (Eq. 5) on its examples, admission (Eq. 11) and UPDATEWEIGHT — all
reading and writing one float64 w in shared memory in place, without locks. Every process
both infers and learns (K = p); K = 1 is DEMI-DCD; 1 < K < p is not implemented. With
``--loss l1`` the update is the SMO visit (:func:`~.kernels.smo_examples`), the violation's
tail ξ̂_i, the stop measure the KKT gap and the dual Σ Δλ − ½‖w‖² (no A² term).

Updates to w (:attr:`~demidcd.parallel.experimental.Experimental.update_mode`, an experimental
setting): ``"atomic"``, the default, makes every w += d φ an LLVM ``atomicrmw fadd``
(:func:`~.kernels.atomic_add`): no update is lost, so w = Σ α φ up to rounding at every moment
(every snapshot and certificate reads it) and no periodic rebuild pauses the learners; the
schedule's periodic record is then a progress line that pauses no one (a rebuild only where
``eval_every`` asks for the exact dual). ``"plain"`` uses ordinary loads and stores, so two
learners adding to one entry at the same moment may lose one of the adds (a *lost update*;
PASSCoDe's "Wild" variant), repaired by a rebuild every
:attr:`~demidcd.parallel.experimental.Experimental.rebuild_every` seconds. On the 2-core EPYC
guest atomic adds reached a 1% relative primal gap sooner than plain stores in 5 of 6
interleaved triples (EWT XPOS, Brown universal) and inflated the work of 16 learners 1.09-1.11x
where plain stores did not reach 1% of the optimum their own rebuilt w found
(benchmarks/README.md, "Atomic adds by default"); plain stores were the default before, from
an older 2-core Xeon measurement ("Evidence behind the defaults"). Private copies of w's
most-touched pages, exchanged with the shared w every block of updates, raised throughput with
atomic adds but made the learners read stale values, so they are not used.
A third mode, ``"hot"`` (:mod:`demidcd.solvers.hot_pages`), keeps the few pages of w nearly
every φ writes (transitions, bias, the most frequent features) private to each learner, merged by
atomic adds between blocks of work, and adds atomically elsewhere: at p = 2 it was slower than
the other two (benchmarks/README.md, "Where p = 2 loses on the 2-core AMD EPYC guest") and it
waits for a 16-core measurement (``benchmarks/scaling.py --modes``), as does the choice between
atomic adds and plain stores where 16 cores write the transition block at once.
With plain stores, in the tail (every learner's last pass found violators in at most 1% of its
part) the learners turn to atomic adds (the TAIL command, logged): the few updates left then
lose nothing, so a rebuild no longer undoes the last steps and the stop rule can certify.

Exactness: a coordinator (this process, which mostly sleeps;
:class:`~demidcd.parallel.coordinator.Coordinator` does what involves the processes) rebuilds
w before every stop test and at the end (with plain stores also every 5 s, less often where a
rebuild takes more than :data:`~demidcd.parallel.coordinator.REBUILD_SHARE` of that): it
pauses the learners (each between two blocks of work), keeps the old w, zeroes w and lets every
learner add its own Σ_{i∈P_k} α φ with atomic adds (:func:`~.kernels.add_alpha_phi`). The *drift*
‖w_old − Σ α φ‖ measures the lost updates since the last rebuild (entries with drift: a lower
bound on their number). When every learner's last epoch found no violation and certified its
active sets (the 1-DCD stop rule on its part, with a moving w), the coordinator tests the
rebuilt w with the learners paused on it: max |PG| over every active set
(:func:`~.kernels.max_projected_gradient`) and a full loss-augmented inference pass with no
structure violating by more than ``tol`` (and no solver time cap hit). Only then does it stop
with ``converged``, returning that exact, certified w = Σ α φ (the 1-DCD stop rule of
:mod:`.dcd`); otherwise the learners resume. A time limit or a stop request returns the w
rebuilt at the end, and the dual −D(α) (Eq. 2) summed over the learners' α.

Supervision: a learner that dies loses its α; w is then rebuilt from the live learners' α
(α_{P_k} = 0 is a feasible dual point) and the learner restarts on its part with empty active
sets (:mod:`demidcd.parallel.multi`). Once the run is stopping it is not restarted, and the w
returned is the one from before the first rebuild without it, which holds its updates (w
rebuilt without its part's α scored 12 F1 where the run had reached 89), with no dual.

This module is the algorithm: each learner's body (its DCD-SSVM passes and its answers to the
coordinator's commands) and the schedule's stop rule; the processes, the commands and the
rebuilds of w are :mod:`demidcd.parallel.coordinator`'s.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np

from ..parallel import multi as M
from ..parallel.coordinator import (
    ADD,
    CERTIFY,
    CHECK,
    POLL,
    STATE,
    TAIL,
    Coordinator,
    part_path,
    warm_up_kernels,
)
from ..parallel.experimental import EXPERIMENTAL
from ..primitives.records import RecordBatch
from ..primitives.seqlock import load_word, store_word
from ..primitives.vectors import dot
from ..tasks.base import InferenceInterrupted, Task
from . import kernels as KK
from .activeset import ActiveSets, SweepPlan
from .common import Callback, Clock, SolverConfig, StopRequest, TrainResult, objective, stop_reason
from .dcd import begin
from .hot_pages import PrivatePages, merge_pages, sample_hot_pages
from .state import DualState, Start, empty_state, merge_parts, state_w

BLOCK = 256  # examples per update call between command polls (a pause waits at most one)
FINAL_TAIL = (1.0, 0.05)  # a time limit T: rebuild and turn to atomic adds max(1 s, 5% T) before
# it. Lost adds make the learners overshoot α on the lines both write (transitions), so w = Σ α φ
# rebuilt at a stop after plain stores was far worse than the w trained on (benchmarks/README.md,
# "Evidence"); atomic adds for the last second let the learners repair α on the rebuilt w
TAIL_SHARE = 0.01  # plain stores turn to atomic adds once every learner's last pass found
# violators in at most this share of its part (the tail, where lost updates block the stop)
F_SQ, F_LIN, F_MAXPG, F_INFER_S, F_UPDATE_S, F_PASS_PG = range(6)  # fstats columns


class _PartPlan(SweepPlan):
    """:class:`SweepPlan` over one learner's part: the skip threshold is a quantile of the
    part's examples only (the other examples' ``ex_pg`` stay +inf here)."""

    def __init__(self, act: ActiveSets, skip: float, part: np.ndarray):
        super().__init__(act, skip)
        self.part = part

    def threshold(self) -> float:
        self.full = (self.skip <= 0.0 or self._force_full
                     or self.since_full % self.full_every == 0)
        self.since_full = 1 if self.full else self.since_full + 1
        self._force_full = False
        if self.full or len(self.part) < 2:
            self.full = True
            return -1.0
        pg = self.act.ex_pg[self.part]
        k = min(int(self.skip * pg.shape[0]), pg.shape[0] - 1)
        return float(np.partition(pg, k)[k])


def _learner_body(task: Task, config: SolverConfig, mode: str,
                  start: Start | None = None, state_dir: str | None = None,
                  pages: np.ndarray | None = None) -> Callable[[M.LearnerGroup, int], None]:
    """DCD-SSVM on part k of the examples over the shared w (runs in learner process k).
    ``start``: the prior and/or saved state (:mod:`.state`): a learner's first start loads the
    saved structures of its part (the coordinator has set w = w₀ + Σ α φ); a restarted one
    begins empty, as ever. ``state_dir``: where the STATE command writes part k's state.
    ``pages``: the hot mode's private pages of w (:mod:`~demidcd.solvers.hot_pages`)."""

    def body(g: M.LearnerGroup, k: int) -> None:
        cfg, w, part = config, g.w, g.parts[k]
        st, fs = g.stats[k], g.fstats[k]
        hot = mode != "plain"  # atomic adds (the hot mode: on the pages it shares)
        act = ActiveSets(task.n_examples, task.dim, cfg.C, cfg.admit, cfg.max_active, w=w,
                         sweeps=cfg.sweeps, hot=hot, track_changes=True, loss=cfg.loss,
                         tol=cfg.tol)
        act.mark = g.arrays["mark"]  # lines some learner's admitted φ touches (w is 0 elsewhere)
        # inference reads the shared w in place. A private copy refreshed from the marked lines
        # (float32, as DEMI-DCD's workers read w̄) removed the slow-down from lines the other
        # learner writes, but a copy refreshed only every few copy-costs left w too stale
        if g.restarts[k] == 0:
            begin(act, start, part, write_w=False)
        elif start:
            act.set_prior(start.prior, write=False)
        plan = _PartPlan(act, cfg.skip, part)
        task.should_stop = g.urgent  # an ILP solver is abandoned at the final stop
        seed = [cfg.seed, k, g.restarts[k]]
        rng = np.random.default_rng(seed if not start or start.state is None
                                    else [*seed, start.epoch])
        blocks = [0]

        pp = PrivatePages(w, g.arena.segment_name("w"), pages) \
            if pages is not None and len(pages) else None

        def run(code: int) -> None:
            if pp is not None:  # w is one shared array while the learners are paused
                pp.share()
            if code == ADD:  # this part's share of w = Σ α φ, into the zeroed w
                KK.add_alpha_phi(w, act.slots, act.count, act.s_ptr, act.s_len, act.s_f,
                                 act.p_idx, act.p_val, True)
                fs[F_SQ], fs[F_LIN] = KK.dual_terms(act.slots, act.count, act.alpha_sum,
                                                    act.s_f)
            elif code == CERTIFY:  # the stop rule on the rebuilt w, changing nothing
                fs[F_MAXPG] = act.max_pg(part)
                viol = 0
                for s in range(0, len(part), max(cfg.batch, 16)):
                    u0 = task.unproven
                    try:
                        b = task.loss_augmented(w, part[s:s + max(cfg.batch, 16)])
                    except InferenceInterrupted:
                        viol += 1
                        break
                    viol += task.unproven - u0
                    if len(b):
                        viol += int((act.violation(b) > cfg.tol).sum())
                st[M.VIOLATORS] = viol
            elif code == TAIL:  # atomic adds from now on: no lost update in the tail
                act.hot = True
            elif code == CHECK:  # Σ α φ of this part, sequentially (tests of the rebuild)
                g.arrays["check"][k] = act.rebuilt_w() - (act.w0 if act.w0 is not None else 0)
            elif code == STATE and state_dir is not None:  # this part's dual state, to a file
                np.savez(part_path(state_dir, k), **act.state(part))

        def poll() -> None:
            blocks[0] += 1
            if pp is not None:
                pp.merge()
            if g.poll_command(k, run) and pp is not None:  # resumed
                pp.privatize()

        fs[F_PASS_PG] = np.inf  # no pass yet: nothing is certified
        st[M.ACTIVE] = act.size  # a restored state's structures; a restart's empty sets
        if g.start_paused:
            g.poll_command(k, run, wait=True)
        if pp is not None:
            pp.privatize()
        r, b = cfg.inner_passes, max(cfg.batch, 1)
        epoch = int(st[M.EPOCHS])  # a restarted learner goes on counting
        while True:
            epoch += 1
            certified = False
            t = time.perf_counter()
            for _ in range(r):
                order = rng.permutation(part)
                skip_below, pass_pg = plan.threshold(), 0.0
                for s in range(0, len(order), BLOCK):
                    u = act.update(order[s:s + BLOCK], skip_below=skip_below)
                    pass_pg = max(pass_pg, u.max_pg)
                    st[M.UPDATES] += u.updates
                    st[M.STEPS] += u.nonzero_steps
                    poll()
                certified = plan.certifies(pass_pg, cfg.tol)
                fs[F_PASS_PG] = pass_pg  # the log's max_pg: this part's, last pass
            fs[F_UPDATE_S] += time.perf_counter() - t
            order = rng.permutation(part)
            violators, pass_pg, t_inf = 0, 0.0, 0.0
            # the log reads |A| and max |PG| while this pass goes on: with costly inference
            # (Brown, 453 tags: a pass over a part takes minutes) it is most of the run, and the
            # passes before the first inference pass saw empty active sets (|PG| 0)
            updates_pg = fs[F_PASS_PG] if np.isfinite(fs[F_PASS_PG]) else 0.0
            for s in range(0, len(order), b):
                chunk = order[s:s + b]
                u0, t = task.unproven, time.perf_counter()
                try:
                    batch = task.loss_augmented(w, chunk)
                except InferenceInterrupted:
                    violators += 1
                    poll()
                    break
                t_inf += time.perf_counter() - t
                violators += task.unproven - u0
                if len(batch):  # the margins of the w inference read (the other learners'
                    # updates since: a stale count only moves when a certificate is tried,
                    # and the certificate itself runs on the paused, rebuilt w)
                    violators += int((act.violation(batch) > cfg.tol).sum())
                    st[M.ADMITTED] += act.insert(batch).admitted
                u = act.update(chunk)
                pass_pg = max(pass_pg, u.max_pg)
                st[M.UPDATES] += u.updates
                st[M.STEPS] += u.nonzero_steps
                st[M.INFER] += len(chunk)
                st[M.ACTIVE] = act.size
                fs[F_PASS_PG] = max(updates_pg, pass_pg)
                poll()
            fs[F_INFER_S] += t_inf
            if r == 0:
                certified = pass_pg < cfg.tol
                fs[F_PASS_PG] = pass_pg
            st[M.ACTIVE] = act.size
            st[M.VIOLATORS] = violators
            st[M.CANDIDATE] = epoch if violators == 0 and certified else 0
            store_word(st, M.EPOCHS, epoch)  # after CANDIDATE
            if not len(part):  # no examples (more learners than examples): no block above
                time.sleep(M.POLL)  # polled, so answer the commands here, without spinning
                poll()

    return body


def collect_state(co: Coordinator, state_dir: str, start: Start | None, n: int,
                  epoch: int) -> DualState:
    """The dual state of the paused learners: each writes its part's to ``state_dir`` (the
    STATE command), merged here (:func:`~.state.merge_parts`). When no learner began, the
    state the run started from (or empty active sets)."""
    if co.group.incomplete:
        arrays = start.state.arrays if start and start.state is not None else empty_state(n)
    else:
        arrays = merge_parts(n, co.collect_parts(state_dir))
    return DualState(arrays, {"epoch": epoch, "algorithm": "demi-dcd", "rng": None})


def warm_up(task: Task, loss: str = "l2") -> None:
    """Compile (or load from numba's cache) the kernels only this schedule calls, before the
    learners fork (each would otherwise compile them on its own clock)."""
    warm_up_shared(task.dim, loss, task.loss_augmented(np.zeros(task.dim), np.zeros(1, np.int64)))


def warm_up_shared(dim: int, loss: str, b: RecordBatch) -> None:
    """:func:`warm_up` on a batch ``b`` of records (any with the tasks' dtypes: no inference
    needed, so that it compiles apart from the inference kernels)."""
    w = np.zeros(dim)
    act = ActiveSets(1, dim, 1.0, w=w, hot=True, loss=loss)
    act.violation(b)
    act.insert(b, 0.0)
    act.update(np.zeros(1, np.int64))
    KK.add_alpha_phi(w, act.slots, act.count, act.s_ptr, act.s_len, act.s_f, act.p_idx,
                     act.p_val, True)
    act.max_pg(np.zeros(1, np.int64))
    merge_pages(w, w, np.zeros(1), np.array([[0, 1]], np.int64))
    warm_up_kernels(w)


def train_multi_dcd(task: Task, config: SolverConfig, threads: int,
                    callback: Callback | None = None, learners: int | None = None,
                    cpu_log: str | None = None,
                    log: Callable[[str], None] | None = None, debug: bool = False,
                    tick: Callable[[float, np.ndarray], None] | None = None,
                    start: Start | None = None) -> TrainResult:
    """Train with ``learners`` (default ``threads``) learner processes on one shared w.
    ``config.max_epochs`` bounds each learner's DCD-SSVM epochs (r update passes and one
    inference pass over its part); the log has one record per rebuild of w and per periodic
    progress record (atomic adds: every 5 s, without a pause). The processes,
    the rebuilds and the commands are the :class:`~demidcd.parallel.coordinator.Coordinator`'s;
    this function is the schedule (when to rebuild, switch to atomic adds, certify, stop).
    The update mode and the periodic records' interval are
    :data:`~demidcd.parallel.experimental.EXPERIMENTAL` settings (atomic adds, every 5 s; with
    plain stores each periodic record is a rebuild), as is the check of the rebuild
    (``extra["rebuild_error"]``).
    ``start``: a prior w₀ and/or a saved state (:mod:`.state`); every rebuild then sets
    w = w₀ + Σ α φ, and the dual gains ½‖w₀‖²."""
    log = log or (lambda s: None)
    k = threads if learners is None else int(learners)
    if k > max(task.n_examples, 1):  # a learner without examples would only idle
        log(f"{task.n_examples} training examples: {max(task.n_examples, 1)} learner "
            f"processes, not {k}")
        k = max(task.n_examples, 1)
    mode = EXPERIMENTAL.checked_update_mode()
    C, dim = config.C, task.dim
    warm_up(task, config.loss)
    prior = start.prior if start else None
    prior_sq = 0.0 if prior is None else dot(prior, prior)
    keep_state = bool(start and start.keep_state)
    state_dir = tempfile.mkdtemp(prefix="demidcd-state-") if keep_state else None
    cnt = {"certifications": 0}
    drift_log: list[tuple[float, float, int]] = []  # (seconds, drift, entries with drift)
    history: list[dict] = []
    pages = sample_hot_pages(task) if mode == "hot" else None
    co = Coordinator(task.n_examples, task.costs(), dim, k,
                     _learner_body(task, config, mode, start, state_dir, pages), config.seed, log,
                     debug, base=np.zeros(0) if prior is None else prior, mode=mode)
    group, w = co.group, co.w
    if start and start.state is not None:
        co.set_w(state_w(start.state, dim))  # w₀ + Σ α φ before any learner moves it
    elif prior is not None:
        co.set_w(prior)
    dual: float | None = None
    clock: Clock | None = None
    epoch0 = start.epoch if start else 0
    reason, epoch = "max-epochs", epoch0
    final_state: DualState | None = None
    check_error = None
    how = {"plain": "plain stores to one shared w (an add may be lost), rebuilt from α every "
                    f"{co.rebuild_every:g} s",
           "atomic": "atomic adds to one shared w (no update lost: w = Σ α φ up to rounding "
                     "without a rebuild)",
           "hot": f"atomic adds to one shared w but for {0 if pages is None else len(pages)} "
                  "hot pages private to each learner, merged by atomic adds between blocks of "
                  "work; no periodic rebuild"}[mode]
    log(f"multi-learner DCD: {k} learner processes (each infers and learns on its part), {how}")

    def rebuild() -> dict:
        """Pause the learners and set w = Σ α φ; they stay paused. Returns the figures."""
        nonlocal dual
        d, entries, w_norm, active = co.rebuild()
        if co.lost_at_stop:  # the w returned is not this Σ α φ: no dual for it
            drift_log.append((clock.elapsed() if clock else 0.0, d, entries))
            dual = None
            return {"drift": d, "drift_entries": entries, "dual": None, "w_norm": w_norm,
                    "active": active}
        live = co.live()
        sq = float(group.fstats[live, F_SQ].sum())
        lin = float(group.fstats[live, F_LIN].sum())
        quad = 0.0 if config.loss == "l1" else sq / (4.0 * C)  # Eq. (2); the L1 dual has none
        dual = -0.5 * w_norm ** 2 + 0.5 * prior_sq - quad + lin
        drift_log.append((clock.elapsed() if clock else 0.0, d, entries))
        return {"drift": d, "drift_entries": entries, "dual": dual, "w_norm": w_norm,
                "active": active}

    def tail(why: str = "") -> None:
        """Plain stores: switch every learner to atomic adds once each one's last pass since
        its (re)start, or the certification pass, found violators in at most
        :data:`TAIL_SHARE` of its part (-1 until it has counted). Lost
        updates then stop; near the optimum they otherwise leave violations above ``tol``
        after every rebuild, so the stop rule never certifies. ``why``:
        switch now, for this reason (the time limit is near, :data:`FINAL_TAIL`; every
        learner's last pass was clean)."""
        if mode != "plain" or co.atomic_from is not None or group.missing():
            return
        s = group.stats
        if why or all(0 <= s[j, M.VIOLATORS] <= TAIL_SHARE * len(group.parts[j])
                      for j in range(k)):
            co.to_atomic(clock.elapsed())
            why = why or f"violators {int(s[:, M.VIOLATORS].sum())}"
            log(f"multi-learner: the tail at {co.atomic_from:.1f} s ({why}): atomic adds from "
                "now on")

    def resume() -> None:
        tail()
        while co.command(M.RESUME):  # someone died: rebuild without it, then go on
            rebuild()

    def certify() -> tuple[bool, float, int]:
        cnt["certifications"] += 1
        if co.command(CERTIFY):
            return False, np.inf, -1
        live = co.live()
        viol = int(group.stats[live, M.VIOLATORS].sum())
        pg = float(group.fstats[live, F_MAXPG].max())
        return viol == 0 and pg < config.tol and not group.missing(), pg, viol

    def largest_pg() -> float:
        """max |PG| (the L1 loss: the largest KKT gap) over the learners' parts, each from its
        last pass over its active sets (+inf for a learner that has not finished one)."""
        live = co.live()
        return float(group.fstats[live, F_PASS_PG].max()) if live else np.inf

    def record(figs: dict, **extra) -> None:
        nonlocal epoch
        epoch += 1
        s = group.stats
        rec = {"epoch": epoch, "seconds": round(clock.elapsed(), 4),
               "updates": int(s[:, M.UPDATES].sum()), "total_updates": int(s[:, M.UPDATES].sum()),
               "inferences": int(s[:, M.INFER].sum()), "admitted": int(s[:, M.ADMITTED].sum()),
               "learner_epochs": int(s[:, M.EPOCHS].min()), "max_pg": largest_pg(), **figs,
               **extra}
        if config.eval_every is not None and figs["dual"] is not None and \
                clock.elapsed() - last_eval[0] >= config.eval_every:
            ob = objective(task, w, C, figs["dual"], loss=config.loss, w0=prior)
            rec.update(primal=ob.primal, dual=ob.dual, gap=ob.gap)
            last_eval[0] = clock.elapsed()
        history.append(rec)
        if callback is not None:
            callback(rec, w)

    last_eval = [0.0]
    try:
        clock = Clock(config.time_limit, tick)  # starting the learners is on the clock
        clock.count_work(lambda: (int(group.stats[:, M.UPDATES].sum()),
                                  int(group.stats[:, M.INFER].sum())))
        task.should_stop = lambda: StopRequest.requested or clock.expired()
        co.start(expired=clock.expired)
        cert_epochs = [0] * k
        max_epochs = config.max_epochs
        limit = config.time_limit
        final_tail = None if not limit else limit - max(FINAL_TAIL[0], FINAL_TAIL[1] * limit)
        while not group.incomplete:  # (incomplete: no learner began, w = Σ α φ = 0)
            time.sleep(POLL)
            if group.dead():  # rebuild w from the live learners' α, restart the dead
                record(rebuild())
                resume()
            if clock.poll(w):
                reason = stop_reason(False, clock)
                break
            ep = [load_word(group.stats[j], M.EPOCHS) for j in range(k)]
            if max_epochs is not None and min(ep) >= max_epochs:
                reason = "max-epochs"
                break
            cand = [int(group.stats[j, M.CANDIDATE]) for j in range(k)]
            if all(c == e and e > ce for c, e, ce in zip(cand, ep, cert_epochs, strict=True)):
                figs = rebuild()
                co.recorded(clock.elapsed())
                tail("every learner's last pass was clean")  # the tail, at the latest
                ok, pg, viol = certify()
                record(figs, max_pg=pg, violators=viol)
                if ok:
                    reason = "converged"
                    break
                cert_epochs = [load_word(group.stats[j], M.EPOCHS) for j in range(k)]
                if group.missing():  # one died while certifying: w without its α first
                    record(rebuild())
                resume()
            elif (final_tail is not None and mode == "plain" and co.atomic_from is None
                  and clock.elapsed() >= final_tail):
                record(rebuild())
                co.recorded(clock.elapsed())
                tail("the time limit is near")
                resume()
            elif co.periodic_due(clock.elapsed()):
                now = clock.elapsed()
                if mode == "plain" or (config.eval_every is not None
                                       and now - last_eval[0] >= config.eval_every):
                    record(rebuild())  # the repair of lost updates; the primal's exact dual
                    co.recorded(clock.elapsed(), began=now)
                    resume()
                else:  # no update is lost: w = Σ α φ already, the progress line pauses no one
                    record({"dual": None, "active": co.active()})
                    co.recorded(now)
        if group.incomplete:
            reason = stop_reason(False, clock) or "time-limit"
        elif reason != "converged":
            store_word(group.ctrl, M.URGENT, 1)  # abandon expensive inferences
            record(rebuild())
        check_error = co.rebuild_error(prior)
        if keep_state:
            final_state = collect_state(co, state_dir, start, task.n_examples, epoch)
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        seconds = clock.elapsed() if clock else 0.0
        started = group.start_figures(clock.t0) if clock else {}
        w_out = co.w_out()
        s, f = group.stats.copy(), group.fstats.copy()
        try:
            co.close()
        finally:
            task.__dict__.pop("should_stop", None)
            if state_dir is not None:
                shutil.rmtree(state_dir, ignore_errors=True)
    mon = group.monitor
    if cpu_log:
        mon.write_csv(cpu_log)
    res = TrainResult(w_out, reason == "converged", reason, epoch, seconds, history,
                      dual, state=final_state)
    drifts = [d for _, d, _ in drift_log]
    res.extra = {"cpu_average": mon.average(), "cpu_line": mon.summary_line(k),
                 "memory_line": mon.memory_line(), "peak_rss": mon.peak_rss,
                 "peak_pss": mon.peak_pss, **started,
                 "learners": k, "update_mode": mode, "updates": int(s[:, M.UPDATES].sum()),
                 "hot_pages": 0 if pages is None else len(pages),
                 "nonzero_steps": int(s[:, M.STEPS].sum()),
                 "inferences": int(s[:, M.INFER].sum()), "admitted": int(s[:, M.ADMITTED].sum()),
                 "learner_infer_seconds": float(f[:, F_INFER_S].sum()),
                 "update_seconds": float(f[:, F_UPDATE_S].sum()),
                 "drift_max": max(drifts, default=0.0),
                 "drift_entries": int(sum(e for _, _, e in drift_log)),
                 "drift_log": drift_log, "rebuild_error": check_error,
                 "atomic_from": co.atomic_from, "rebuilds": co.counts["rebuilds"],
                 "certifications": cnt["certifications"], "restarts": co.counts["restarts"],
                 "rebuild_seconds": co.counts["rebuild_seconds"],
                 "lost_at_stop": co.lost_at_stop}
    log(f"multi-learner: {k} learners ({mode}), {res.extra['updates']:,} updates, "
        f"{res.extra['inferences']:,} inferences, {co.counts['rebuilds']} rebuilds "
        f"({co.counts['rebuild_seconds']:.2f} s; largest drift "
        f"‖w − Σαφ‖ {res.extra['drift_max']:.3g}, {res.extra['drift_entries']:,} entries with "
        f"lost updates), {cnt['certifications']} certification(s), {co.counts['restarts']} "
        "restarts" + ("; a learner was lost at the stop: the model is the w from before the "
                      "rebuild without it" if co.lost_at_stop else ""))
    return res
