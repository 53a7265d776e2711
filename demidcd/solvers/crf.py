"""``crf``: a linear-chain conditional random field trained by L-BFGS (OWL-QN when c1 > 0),
``crf_method="lbfgs"``, on CRFsuite's objective

    L(w) = Σ_i −log p(y_i | x_i) + c1 Σ_j |w_j| + c2 Σ_j w_j²

(CRFsuite's ``lbfgs`` trainer: ``c2`` multiplies ‖w‖² itself, not ½‖w‖²), over the chain
tasks' features (:mod:`demidcd.tasks.chain.marginals`: forward-backward over the scores Viterbi
reads, B features and real values included). Stopping as CRFsuite's: ‖g‖ / max(1, ‖w‖) ≤
``epsilon`` (g the pseudo-gradient with L1), or an improvement (f_{k−period} − f_k) / f_k below
``stop_delta`` over the last ``period`` iterations, or ``max_iterations``.

The default ``crf_method="sdca"`` trains the same objective by stochastic dual coordinate
ascent (:mod:`.crf_sdca`). Multi-core here: the barrier-synchronised baseline. Each
objective evaluation splits the examples into ``threads`` shards of about equal token counts,
and the numba kernel (``nogil``) runs on every shard at once in a thread pool of this
process, each shard into a gradient buffer of its own, summed afterwards; the worker processes
of the DEMI-DCD engine are not used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..errors import OptionError
from ..options import default
from ..primitives.vectors import dot, norm
from ..tasks.base import Task
from .common import Callback, OuterLoop, SolverConfig, StopRule, TrainResult
from .crf_sdca import token_shards, train_crf_sdca
from .recorder import Recorder, Tick

MEMORY = 6  # L-BFGS corrections kept (CRFsuite's lbfgs.num_memories)
MAX_LINESEARCH = 40  # halvings of the step before the line search gives up
ARMIJO = 1e-4  # sufficient decrease of the backtracking line search (liblbfgs' ftol)


def check_marginals(task: Task) -> None:
    """Refuse, in one line, a task whose structures have no marginals (no forward-backward):
    every task but the chain ones (sequence, chunking, ner)."""
    from ..tasks.chain.task import SequenceTask

    if not isinstance(task, SequenceTask):
        raise OptionError(f"crf needs marginals; task {task.name} has none (--algorithm crf "
                          "trains the chain tasks: sequence, chunking, ner)")


def compile_kernels(task: Task) -> None:
    """Compile (or load from numba's cache) the forward-backward kernels on example 0."""
    from ..tasks.chain.marginals import marginals_kernel, nll_gradient_kernel

    check_marginals(task)
    w = np.zeros(task.dim)
    ex = np.zeros(min(1, task.n_examples), np.int64)
    nll_gradient_kernel(w, task.u_rows, task.K, task.chain, task.Y, ex, np.zeros(task.dim))
    marginals_kernel(w, task.u_rows, task.K, task.chain, ex, np.zeros(0, np.int32))


class CrfObjective:
    """The smooth part of the CRF objective, w → (Σ_i −log p(y_i | x_i) + c2‖w‖², gradient),
    evaluated on ``threads`` shards at once (see the module docstring). The gradient array is
    a fresh one per call; its ``frozen`` entries (weights the model does not have) are 0."""

    def __init__(self, task: Task, c2: float, threads: int = 1,
                 frozen: np.ndarray | None = None):
        check_marginals(task)
        if task.Y is None:
            raise OptionError("crf needs gold tags to train on")
        self.task, self.c2 = task, float(c2)
        self.frozen = np.zeros(0, np.int64) if frozen is None else frozen  # held at 0
        self.shards = token_shards(task.sent_ptr, max(1, int(threads)))
        self.buffers = [np.zeros(task.dim) for _ in self.shards[1:]]
        self.pool = ThreadPoolExecutor(len(self.shards)) if len(self.shards) > 1 else None
        self.evaluations = 0

    def _shard(self, ex: np.ndarray, grad: np.ndarray) -> float:
        from ..tasks.chain.marginals import nll_gradient_kernel

        t = self.task
        return nll_gradient_kernel(self._w, t.u_rows, t.K, t.chain, t.Y, ex, grad)

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        self._w = np.ascontiguousarray(w, np.float64)
        self.evaluations += 1
        grad = np.zeros(self.task.dim)
        if self.pool is None:
            nll = sum(self._shard(ex, grad) for ex in self.shards)
        else:
            for b in self.buffers:
                b[:] = 0.0
            futures = [self.pool.submit(self._shard, ex, b)
                       for ex, b in zip(self.shards[1:], self.buffers, strict=True)]
            nll = self._shard(self.shards[0], grad)
            nll += sum(f.result() for f in futures)
            for b in self.buffers:
                grad += b
        w = self._w
        grad += (2.0 * self.c2) * w
        grad[self.frozen] = 0.0
        return float(nll + self.c2 * dot(w, w)), grad

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


@dataclass
class Iteration:
    """One accepted L-BFGS step: k, the objective f (with the L1 term), the relative gradient
    norm ‖g‖ / max(1, ‖w‖), the step length, the evaluations so far and w (do not modify)."""

    k: int
    f: float
    gnorm: float
    step: float
    evaluations: int
    w: np.ndarray


@dataclass
class Minimum:
    w: np.ndarray
    f: float
    reason: str  # "converged" | "max-epochs" | "line-search" | "time-limit" | "interrupted"
    iterations: int


def _pseudo_gradient(w: np.ndarray, g: np.ndarray, c1: float) -> np.ndarray:
    """OWL-QN's pseudo-gradient of f + c1‖w‖₁ (Andrew and Gao 2007): the one-sided derivative
    towards decrease; 0 where w_j = 0 and |g_j| ≤ c1."""
    if c1 == 0.0:
        return g
    pg = np.where(w > 0, g + c1, np.where(w < 0, g - c1, 0.0))
    zero = w == 0
    pg[zero & (g + c1 < 0)] = (g + c1)[zero & (g + c1 < 0)]
    pg[zero & (g - c1 > 0)] = (g - c1)[zero & (g - c1 > 0)]
    return pg


def minimize_lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], w0: np.ndarray,
                   c1: float = 0.0, epsilon: float = 1e-5, period: int = 10,
                   delta: float = 1e-5, max_iterations: int | None = None,
                   memory: int = MEMORY,
                   on_iteration: Callable[[Iteration], None] | None = None,
                   should_stop: Callable[[np.ndarray], bool] | None = None) -> Minimum:
    """Minimise fun(w) + c1‖w‖₁ (fun returns (value, gradient) of a smooth convex function):
    two-loop L-BFGS with a backtracking Armijo line search, OWL-QN (pseudo-gradient, the
    direction restricted to its orthant, steps projected onto it) when c1 > 0. Stops as
    CRFsuite does (module docstring); ``should_stop(w)`` (the clock) is asked after every
    evaluation, and the last accepted w is returned."""
    w = np.array(w0, np.float64)
    fs, g = fun(w)
    f = fs + c1 * float(np.abs(w).sum())
    pg = _pseudo_gradient(w, g, c1)
    S: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    rho: list[float] = []
    past = [f]
    d = -pg
    step = 1.0 / max(norm(d), 1e-300)
    k = flat = 0
    if norm(pg) / max(1.0, norm(w)) <= epsilon:
        return Minimum(w, f, "converged", 0)
    while max_iterations is None or k < max_iterations:
        if c1 > 0.0:
            d[d * pg >= 0] = 0.0  # keep only the directions that descend the pseudo-gradient
        dg = dot(pg, d)
        if not dg < 0.0:  # not a descent direction: restart from the steepest descent
            S.clear(), Y.clear(), rho.clear()
            d = -pg
            dg = dot(pg, d)
            step = 1.0 / max(norm(d), 1e-300)
        orthant = np.where(w != 0, np.sign(w), np.sign(-pg)) if c1 > 0.0 else None
        for _ in range(MAX_LINESEARCH):
            wn = w + step * d
            if orthant is not None:
                wn[np.sign(wn) != orthant] = 0.0
            fsn, gn = fun(wn)
            fn = fsn + c1 * float(np.abs(wn).sum())
            decrease = dot(pg, wn - w) if orthant is not None else step * dg
            if fn <= f + ARMIJO * decrease:
                break
            if should_stop is not None and should_stop(w):
                return Minimum(w, f, "time-limit", k)
            step *= 0.5
        else:
            return Minimum(w, f, "line-search", k)
        flat = flat + 1 if not fn < f else 0  # accepted without a decrease (rounding)
        if flat >= period:  # that many in a row: flat at this precision, as a failed search
            return Minimum(w, f, "line-search", k)
        k += 1
        s, y = wn - w, gn - g
        sy = dot(s, y)
        if sy > 1e-12 * max(dot(y, y), 1e-300):
            S.append(s), Y.append(y), rho.append(1.0 / sy)
            if len(S) > memory:
                S.pop(0), Y.pop(0), rho.pop(0)
        w, g, f = wn, gn, fn
        pg = _pseudo_gradient(w, g, c1)
        gnorm = norm(pg) / max(1.0, norm(w))
        if on_iteration is not None:
            on_iteration(Iteration(k, f, gnorm, step, 0, w))
        past.append(f)
        if gnorm <= epsilon:
            return Minimum(w, f, "converged", k)
        if len(past) > period and (past[-period - 1] - f) / max(abs(f), 1e-300) < delta:
            return Minimum(w, f, "converged", k)
        if should_stop is not None and should_stop(w):
            return Minimum(w, f, "time-limit", k)
        # two-loop recursion: d = −H pg
        q = pg.copy()
        alphas = []
        for s_, y_, r_ in zip(reversed(S), reversed(Y), reversed(rho), strict=True):
            a_ = r_ * dot(s_, q)
            alphas.append(a_)
            q -= a_ * y_
        if S:
            q *= dot(S[-1], Y[-1]) / dot(Y[-1], Y[-1])
        for s_, y_, r_, a_ in zip(S, Y, rho, reversed(alphas), strict=True):
            b_ = r_ * dot(y_, q)
            q += (a_ - b_) * s_
        d = -q
        step = 1.0
    return Minimum(w, f, "max-epochs", k)


def train_crf(task: Task, config: SolverConfig, threads: int = 1,
              callback: Callback | None = None, cpu_log: str | None = None,
              log: Callable[[str], None] | None = None, tick: Tick | None = None,
              c1: float = default("c1"), c2: float = default("c2"),
              max_iterations: int | None = default("max_iterations"),
              epsilon: float = default("epsilon"), period: int = default("period"),
              stop_delta: float = default("stop_delta"),
              crf_method: str = default("crf_method"),
              all_possible_transitions: bool | None = default("all_possible_transitions")
              ) -> TrainResult:
    """CRF by ``crf_method``: ``"sdca"`` (:func:`.crf_sdca.train_crf_sdca`: one record per
    epoch) or ``"lbfgs"``, L-BFGS / OWL-QN (module docstring): one iteration record per
    accepted step (``objective``: L(w); ``max_pg``: ‖g‖ / max(1, ‖w‖); ``active``: non-zero
    weights). ``all_possible_transitions`` False: the transitions no gold tagging takes have
    no weight (held at 0), as CRFsuite without ``feature.possible_transitions``; None or True:
    every transition has one."""
    check_marginals(task)
    for name, v in (("c1", c1), ("c2", c2), ("epsilon", epsilon), ("stop_delta", stop_delta)):
        if not 0.0 <= float(v) < math.inf:
            raise OptionError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if int(period) < 1:
        raise OptionError(f"--period must be >= 1, got {period}")
    if max_iterations is not None and int(max_iterations) < 1:
        raise OptionError(f"--max-iterations must be >= 1, got {max_iterations}")
    if crf_method not in ("sdca", "lbfgs"):
        raise OptionError(f"--crf-method must be sdca or lbfgs, got {crf_method!r}")
    if task.Y is None:
        raise OptionError("crf needs gold tags to train on")
    from ..tasks.chain.marginals import unseen_transitions

    frozen = None if all_possible_transitions in (None, True) else unseen_transitions(task)
    if crf_method == "sdca":
        return train_crf_sdca(task, config, threads, callback, cpu_log, log, tick,
                              float(c1), float(c2),
                              None if max_iterations is None else int(max_iterations),
                              float(epsilon), frozen=frozen)
    obj = CrfObjective(task, c2, threads, frozen)
    rec = Recorder(task, config, callback, threads, objective_fn=None, tick=tick)
    state = {"w": np.zeros(task.dim), "k": 0}

    def on_iteration(it: Iteration) -> None:
        state["w"], state["k"] = it.w, it.k
        rec.epoch({"epoch": it.k, "updates": it.k, "objective": it.f, "max_pg": it.gnorm,
                   "active": int(np.count_nonzero(it.w)), "evaluations": obj.evaluations,
                   "step": it.step}, it.w)

    clock = rec.start()
    res = None
    try:
        with OuterLoop(task, clock) as run:
            res = minimize_lbfgs(obj, np.zeros(task.dim), float(c1), float(epsilon),
                                 int(period), float(stop_delta),
                                 None if max_iterations is None else int(max_iterations),
                                 on_iteration=on_iteration,
                                 should_stop=lambda w: rec.poll(lambda: w))
            run.stop(res.reason == "converged")
    finally:
        obj.close()
    if res is None:  # interrupted: the last accepted iterate
        w, reason, k = state["w"], run.reason, state["k"]
    else:
        w, k = res.w, res.iterations
        reason = res.reason if res.reason in ("converged", "max-epochs", "line-search") \
            else run.reason if run.reason != "max-epochs" else "time-limit"
    if reason == "line-search" and log is not None:
        log("crf: the line search found no decrease (the objective is flat at this precision)")
    if reason == "line-search":
        reason = "converged"
    last = rec.history[-1]["max_pg"] if rec.history else None
    return rec.finish(w, reason, k, cpu_log=cpu_log, evaluations=obj.evaluations,
                      objective=None if res is None else res.f,
                      stop_rule=StopRule("‖g‖ / max(1, ‖w‖)", last, "epsilon",
                                         float(epsilon), "max_iterations"))
