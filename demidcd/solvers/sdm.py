"""The sequential dual method (SDM) for the structured hinge loss and, with the concave-convex
procedure, for the structured ramp loss ("A sequential dual method for the structured ramp
loss minimization", Algorithm 1 and its SMO procedure).

Objective (the paper's Eq. 2.1 with C_paper/N = C): ½‖w‖² + C Σ_n ℓ_n(w), with
ℓ^MM_n = max_y [Δ(y_n, y) − w·φ_n(y)]₊ (hinge) and, for the ramp loss,
ℓ_n = ℓ^MM_n + ℓ^C_n, ℓ^C_n = −max_y [−Δ(y_n, y) − w·φ_n(y)]₊ (the concave part).

Dual (Eq. 3.3–3.4): per example, λ_{n,y} ≥ 0 with Σ_y λ_{n,y} = C (the gold structure, whose
φ = 0 and Δ = 0, holds C − Σ_{y≠y_n} λ_{n,y}); w = Σ λ φ − v, where v = C Σ_{n∈A} φ_n(ȳ_n) is the
CCCP linearisation of the concave part (v = 0 for the hinge loss). A visit of example n adds the
loss-augmented ŷ_n to its working set S_n and runs SMO on S_n: with g_y = w·φ_n(y) − Δ(y_n, y)
(Eq. 4.5), y' = argmin g, y'' = argmax g over λ > 0, and while g_y'' > g_y' + τ the pair step
δ = min(λ_y'', (g_y'' − g_y')/‖φ(y') − φ(y'')‖²) moves mass from y'' to y' (Eq. 4.9). Structures
whose λ reaches 0 leave S_n. The working sets live in the DCD learners' flat
:class:`~.activeset.ActiveSets` (α there is λ here; its eviction of the smallest λ when S_n is
full moves that mass back to the gold structure, so λ stays feasible), and the SMO kernel is
:func:`~.kernels.smo_examples`, which the DCD learners' L1 loss (``--loss l1``) runs too.

Ramp loss (Algorithm 1): each outer iteration first runs loss-diminished inference
ȳ_n = argmax_y w·Φ(x_n, y) − Δ(y_n, y) on every example, sets A = {n : ℓ_C > 0} and
v = C Σ_{n∈A} φ_n(ȳ_n) (w ← w + v_old − v), then ``inner_passes`` SDM epochs. With w = 0 at
first, ȳ_n = y_n and the first outer iteration is the hinge loss's SDM.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from ..primitives.vectors import dot
from ..tasks.base import Task
from .activeset import ActiveSets
from .common import Callback, OuterLoop, SolverConfig, TrainResult
from .kernels import (
    S_MAXPG,
    S_SHRUNK,
    S_UPDATES,
    SMO_MAX_STEPS,
    STATS_FIELDS,
    dot_sorted,
    smo_examples,
)
from .linear import concat
from .recorder import Recorder, Tick

UNBOUNDED_C = 1e300  # ActiveSets' L2 term A_i/(2C) vanishes: admission tests Δ − w·φ only
MAX_SMO_STEPS = SMO_MAX_STEPS  # SMO pair steps per visit, at most
DEFAULT_EPOCHS = 100  # outer iterations (the hinge loss: epochs)
ST_STEPS, ST_SHRUNK, ST_KKT = S_UPDATES, S_SHRUNK, S_MAXPG  # columns of SDM.stats


@njit(cache=True, nogil=True)
def concave_vector(v, C, delta, margin, ptr, idx, val):
    """v = C Σ φ_r over the records with ℓ_C = −Δ − w·φ > 0 (A of Algorithm 1); returns |A|."""
    v[:] = 0.0
    na = 0
    for r in range(delta.shape[0]):
        if -delta[r] - margin[r] > 0.0:
            na += 1
            for k in range(ptr[r], ptr[r + 1]):
                v[idx[k]] += C * val[k]
    return na


def ramp_objective(task: Task, w: np.ndarray, C: float, chunk: int = 512) -> dict:
    """J(w) = ½‖w‖² + C Σ_n (ℓ^MM_n(w) + ℓ^C_n(w)), the structured ramp loss objective (Eq. 3.1),
    and its hinge part."""
    hinge = concave = 0.0
    for s in range(0, task.n_examples, chunk):
        ex = np.arange(s, min(s + chunk, task.n_examples))
        b = task.loss_augmented(w, ex)
        hinge += float(np.maximum(b.delta - b.margin, 0.0).sum())
        d = task.loss_scaled(w, ex, -1.0)
        concave -= float(np.maximum(-d.delta - d.margin, 0.0).sum())
    half = 0.5 * dot(w, w)
    return {"primal": half + C * (hinge + concave), "hinge_primal": half + C * hinge}


def compile_kernels(task: Task) -> None:
    """Compile (or load from numba's cache) the SMO and concave kernels on example 0."""
    sdm = SDM(task, SolverConfig(max_active=4))
    b = task.loss_augmented(sdm.w, np.zeros(1, np.int64))
    sdm.act.insert(b, 0.0)
    sdm.smo(np.zeros(1, np.int64), 2)
    concave_vector(sdm.v, 1.0, b.delta, b.margin, b.ptr, b.idx, b.val)
    dot_sorted(b.idx, b.val, 0, len(b.idx), 0, len(b.idx))


class SDM:
    """Working sets, w, v and one SDM epoch; :func:`train_sdm` drives it."""

    def __init__(self, task: Task, config: SolverConfig):
        self.task, self.config = task, config
        n, dim = task.n_examples, task.dim
        self.C = float(config.C)
        self.w = np.zeros(dim)
        self.v = np.zeros(dim)  # the concave linearisation (ramp loss)
        self.act = ActiveSets(n, dim, UNBOUNDED_C, 0.0, config.max_active, w=self.w)
        self.stats = np.zeros(STATS_FIELDS)
        self.rng = np.random.default_rng(config.seed)
        self.inferences = 0
        self.admitted = 0

    def linearise(self, chunk: int = 512) -> int:
        """Ramp loss, Algorithm 1 lines 4–10: v = C Σ_{n∈A} φ_n(ȳ_n) with ȳ_n by loss-diminished
        inference at the current w, and w ← w + v_old − v; returns |A|."""
        task, n = self.task, self.task.n_examples
        parts = [task.loss_scaled(self.w, np.arange(s, min(s + chunk, n)), -1.0)
                 for s in range(0, n, chunk)]  # ȳ_n at the current w = u − v_old
        self.inferences += n
        b = concat(parts)
        self.w += self.v  # w = u = Σ λ φ
        na = concave_vector(self.v, self.C, b.delta, b.margin, b.ptr, b.idx, b.val)
        self.w -= self.v
        return int(na)

    def smo(self, examples: np.ndarray, max_steps: int = MAX_SMO_STEPS) -> None:
        """The SMO procedure on each example's working set (λ0 = C − Σλ; tolerance tol)."""
        act = self.act
        smo_examples(examples, self.w, act.slots, act.count, act.alpha_sum, act.s_ptr,
                     act.s_len, act.s_f, act.p_idx, act.p_val, act.free_ids, act.meta, self.C,
                     self.config.tol, max_steps, False, True, act.ex_pg, -1.0, act.xi, self.stats,
                     act.hot)

    def epoch(self, clock, poll=None) -> tuple[int, int]:
        """One SDM pass (lines 12–15): per chunk of ``config.batch`` examples, loss-augmented
        inference, admission into S_n (Δ − w·φ > 0) and SMO on each; returns (violators beyond
        tol, examples visited)."""
        task, cfg, act = self.task, self.config, self.act
        order = self.rng.permutation(task.n_examples).astype(np.int64)
        violators, done = 0, 0
        for s in range(0, order.shape[0], cfg.batch):
            ex = order[s:s + cfg.batch]
            b = task.loss_augmented(self.w, ex)
            self.inferences += ex.shape[0]
            violators += int(((b.delta - b.margin) > cfg.tol).sum())
            self.admitted += act.insert(b, 0.0).admitted
            self.smo(ex)
            act.maybe_compact()
            done += ex.shape[0]
            if (poll or clock.expired)():
                break
        return violators, done

    def dual(self) -> float:
        """Dual value of the hinge problem, Σ λ Δ − ½‖w‖² (a lower bound of the primal)."""
        from .kernels import dual_terms

        _, lin = dual_terms(self.act.slots, self.act.count, self.act.alpha_sum, self.act.s_f)
        return float(lin - 0.5 * dot(self.w, self.w))


def train_sdm(task: Task, config: SolverConfig, callback: Callback | None = None,
              cpu_log: str | None = None, ramp: bool = False,
              tick: Tick | None = None) -> TrainResult:
    """SDM for the hinge loss (epochs until an epoch finds no violation beyond tol and its SMO
    met no KKT gap beyond tol) or, with ``ramp``, CCCP outer iterations of
    ``config.inner_passes`` SDM epochs each (``config.max_epochs`` counts outer iterations)."""
    from ..errors import OptionError
    from .online import hinge_objective

    if ramp:
        try:
            task.loss_scaled(np.zeros(task.dim), np.zeros(1, np.int64), -1.0)
        except NotImplementedError:
            raise OptionError(f"--algorithm sdm-ramp needs loss-diminished inference "
                              f"(Task.loss_scaled), which the {task.name} task does not "
                              "provide") from None
    sdm = SDM(task, config)
    obj = ((lambda w: ramp_objective(task, w, config.C)) if ramp
           else (lambda w: {**hinge_objective(task, w, config.C), "dual": sdm.dual()}))
    rec = Recorder(task, config, callback, objective_fn=obj, tick=tick)
    inner = max(1, config.inner_passes) if ramp else 1
    epoch, steps, admitted = 0, 0, 0
    clock = rec.start()
    with OuterLoop(task, clock) as run:
        for epoch in range(1, config.epochs(DEFAULT_EPOCHS) + 1):
            na = sdm.linearise() if ramp else 0
            violators = 0
            for _ in range(inner):
                sdm.stats[:] = 0.0
                violators, _done = sdm.epoch(clock, lambda: rec.poll(lambda: sdm.w))
                steps += int(sdm.stats[ST_STEPS])
                if clock.expired():
                    violators += 1
                    break
            kkt = float(sdm.stats[ST_KKT])
            r = {"epoch": epoch, "updates": int(sdm.stats[ST_STEPS]), "total_updates": steps,
                 "inferences": sdm.inferences, "violators": violators,
                 "active": sdm.act.size, "shrunk": int(sdm.stats[ST_SHRUNK]),
                 "admitted": sdm.admitted - admitted,
                 "max_pg": kkt}
            admitted = sdm.admitted
            if ramp:
                r["concave"] = na
            rec.epoch(r, sdm.w)
            # the hinge loss converges; a CCCP iteration never proves the ramp loss optimal
            if run.stop(not ramp and violators == 0 and kkt <= config.tol):
                break
    return rec.finish(sdm.w, run.reason, epoch, None if ramp else sdm.dual(), cpu_log=cpu_log,
                      updates=steps, inferences=sdm.inferences)


def train_sdm_hinge(task: Task, config: SolverConfig, threads: int = 1,
                    callback: Callback | None = None, cpu_log: str | None = None,
                    tick: Tick | None = None,
                    log: Callable[[str], None] | None = None) -> TrainResult:
    """The registry's ``sdm-hinge``."""
    return train_sdm(task, config, callback, cpu_log, ramp=False, tick=tick)


def train_sdm_ramp(task: Task, config: SolverConfig, threads: int = 1,
                   callback: Callback | None = None, cpu_log: str | None = None,
                   tick: Tick | None = None,
                   log: Callable[[str], None] | None = None) -> TrainResult:
    """The registry's ``sdm-ramp``."""
    return train_sdm(task, config, callback, cpu_log, ramp=True, tick=tick)
