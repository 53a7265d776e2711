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
full moves that mass back to the gold structure, so λ stays feasible).

Ramp loss (Algorithm 1): each outer iteration first runs loss-diminished inference
ȳ_n = argmax_y w·Φ(x_n, y) − Δ(y_n, y) on every example, sets A = {n : ℓ_C > 0} and
v = C Σ_{n∈A} φ_n(ȳ_n) (w ← w + v_old − v), then ``inner_passes`` SDM epochs. With w = 0 at
first, ȳ_n = y_n and the first outer iteration is the hinge loss's SDM.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..tasks.base import Task
from .activeset import ActiveSets
from .common import Callback, OuterLoop, SolverConfig, TrainResult
from .kernels import (
    ALPHA,
    DELTA,
    M_PGARB,
    M_PUSED,
    SQNORM,
    _free_structure,
    _remove_slot,
    axpy,
    sparse_dot,
)
from .linear import concat
from .recorder import Recorder, Tick

UNBOUNDED_C = 1e300  # ActiveSets' L2 term A_i/(2C) vanishes: admission tests Δ − w·φ only
MAX_SMO_STEPS = 100  # SMO pair steps per visit, at most
DEFAULT_EPOCHS = 100  # outer iterations (the hinge loss: epochs)
ST_STEPS, ST_SHRUNK, ST_KKT = 0, 1, 2


@njit(cache=True, nogil=True)
def _dot_sorted(idx, val, a0, a1, b0, b1):
    """φ_a·φ_b of two sparse vectors with sorted indices."""
    s = 0.0
    i, j = a0, b0
    while i < a1 and j < b1:
        if idx[i] == idx[j]:
            s += val[i] * val[j]
            i += 1
            j += 1
        elif idx[i] < idx[j]:
            i += 1
        else:
            j += 1
    return s


@njit(cache=True, nogil=True)
def smo_examples(examples, w, slots, count, alpha_sum, s_ptr, s_len, s_f, p_idx, p_val,
                 free_ids, meta, c, tau, max_steps, stats):
    """The SMO procedure on the working set of each example in ``examples`` (see the module
    docstring); ``stats``: pair steps, structures removed, largest KKT gap g'' − g' met at a
    visit's start."""
    g = np.empty(slots.shape[1])
    for e in range(examples.shape[0]):
        i = examples[e]
        for it in range(max_steps + 1):
            m = count[i]
            lam0 = c - alpha_sum[i]  # the gold structure's λ (its g is 0)
            gmin, kmin = 0.0, -1
            gmax, kmax = -np.inf, -2
            if lam0 > 1e-12 * c:
                gmax, kmax = 0.0, -1
            for q in range(m):
                s = slots[i, q]
                gq = sparse_dot(w, p_idx, p_val, s_ptr[s], s_ptr[s] + s_len[s]) - s_f[s, DELTA]
                g[q] = gq
                if gq < gmin:
                    gmin, kmin = gq, q
                if s_f[s, ALPHA] > 0.0 and gq > gmax:
                    gmax, kmax = gq, q
            if it == 0 and gmax - gmin > stats[ST_KKT]:
                stats[ST_KKT] = gmax - gmin
            if kmax == -2 or gmax - gmin <= tau or it == max_steps:
                break
            if kmin == -1:
                den = s_f[slots[i, kmax], SQNORM]
            elif kmax == -1:
                den = s_f[slots[i, kmin], SQNORM]
            else:
                a, b = slots[i, kmin], slots[i, kmax]
                den = (s_f[a, SQNORM] + s_f[b, SQNORM]
                       - 2.0 * _dot_sorted(p_idx, p_val, s_ptr[a], s_ptr[a] + s_len[a],
                                           s_ptr[b], s_ptr[b] + s_len[b]))
            if not den > 0.0:
                break
            cap = lam0 if kmax == -1 else s_f[slots[i, kmax], ALPHA]
            d = (gmax - gmin) / den
            full = d >= cap
            if full:
                d = cap
            if kmin >= 0:
                s = slots[i, kmin]
                s_f[s, ALPHA] += d
                alpha_sum[i] += d
                axpy(w, d, p_idx, p_val, s_ptr[s], s_ptr[s] + s_len[s])
            if kmax >= 0:
                s = slots[i, kmax]
                s_f[s, ALPHA] = 0.0 if full else s_f[s, ALPHA] - d
                alpha_sum[i] -= d
                axpy(w, -d, p_idx, p_val, s_ptr[s], s_ptr[s] + s_len[s])
            stats[ST_STEPS] += 1
        q = count[i] - 1
        while q >= 0:  # S_n ← S_n \ {y : λ_{n,y} = 0}
            s = slots[i, q]
            if s_f[s, ALPHA] <= 0.0:
                _remove_slot(slots, count, i, q)
                _free_structure(s, s_len, free_ids, meta)
                stats[ST_SHRUNK] += 1
            q -= 1
        if count[i] == 0:
            alpha_sum[i] = 0.0  # all mass on the gold structure: drop the rounding residue


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
    half = 0.5 * float(w @ w)
    return {"primal": half + C * (hinge + concave), "hinge_primal": half + C * hinge}


def compile_kernels(task: Task) -> None:
    """Compile (or load from numba's cache) the SMO and concave kernels on example 0."""
    sdm = SDM(task, SolverConfig(max_active=4))
    b = task.loss_augmented(sdm.w, np.zeros(1, np.int64))
    sdm.act.insert(b, 0.0)
    a = sdm.act
    smo_examples(np.zeros(1, np.int64), sdm.w, a.slots, a.count, a.alpha_sum, a.s_ptr, a.s_len,
                 a.s_f, a.p_idx, a.p_val, a.free_ids, a.meta, 1.0, 0.01, 2, sdm.stats)
    concave_vector(sdm.v, 1.0, b.delta, b.margin, b.ptr, b.idx, b.val)
    _dot_sorted(b.idx, b.val, 0, len(b.idx), 0, len(b.idx))


class SDM:
    """Working sets, w, v and one SDM epoch; :func:`train_sdm` drives it."""

    def __init__(self, task: Task, config: SolverConfig):
        self.task, self.config = task, config
        n, dim = task.n_examples, task.dim
        self.C = float(config.C)
        self.w = np.zeros(dim)
        self.v = np.zeros(dim)  # the concave linearisation (ramp loss)
        self.act = ActiveSets(n, dim, UNBOUNDED_C, 0.0, config.max_active, w=self.w)
        self.stats = np.zeros(3)
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
            smo_examples(ex, self.w, act.slots, act.count, act.alpha_sum, act.s_ptr, act.s_len,
                         act.s_f, act.p_idx, act.p_val, act.free_ids, act.meta, self.C,
                         cfg.tol, MAX_SMO_STEPS, self.stats)
            if act.meta[M_PGARB] > max(1 << 20, act.meta[M_PUSED] // 2):
                act._grow_pool(0)
            done += ex.shape[0]
            if (poll or clock.expired)():
                break
        return violators, done

    def dual(self) -> float:
        """Dual value of the hinge problem, Σ λ Δ − ½‖w‖² (a lower bound of the primal)."""
        from .kernels import dual_terms

        _, lin = dual_terms(self.act.slots, self.act.count, self.act.alpha_sum, self.act.s_f)
        return float(lin - 0.5 * self.w @ self.w)


def train_sdm(task: Task, config: SolverConfig, callback: Callback | None = None,
              cpu_log: str | None = None, ramp: bool = False,
              tick: Tick | None = None) -> TrainResult:
    """SDM for the hinge loss (epochs until an epoch finds no violation beyond tol and its SMO
    met no KKT gap beyond tol) or, with ``ramp``, CCCP outer iterations of
    ``config.inner_passes`` SDM epochs each (``config.max_epochs`` counts outer iterations)."""
    config.validate()
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
                    tick: Tick | None = None, **_: object) -> TrainResult:
    """The registry's ``sdm-hinge``."""
    return train_sdm(task, config, callback, cpu_log, ramp=False, tick=tick)


def train_sdm_ramp(task: Task, config: SolverConfig, threads: int = 1,
                   callback: Callback | None = None, cpu_log: str | None = None,
                   tick: Tick | None = None, **_: object) -> TrainResult:
    """The registry's ``sdm-ramp``."""
    return train_sdm(task, config, callback, cpu_log, ramp=True, tick=tick)
