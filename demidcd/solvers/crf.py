"""``crf``: a linear-chain conditional random field trained by L-BFGS (OWL-QN when c1 > 0),
``crf_method="lbfgs"``, on CRFsuite's objective

    L(w) = Σ_i −log p(y_i | x_i) + c1 Σ_j |w_j| + c2 Σ_j w_j²

(CRFsuite's ``lbfgs`` trainer: ``c2`` multiplies ‖w‖² itself, not ½‖w‖²), over the chain
tasks' features (:mod:`demidcd.tasks.chain.marginals`: forward-backward over the scores Viterbi
reads, B features and real values included). Stopping as CRFsuite's: ‖g‖ / max(1, ‖w‖) ≤
``epsilon`` (g the pseudo-gradient with L1), or an improvement (f_{k−period} − f_k) / f_k below
``stop_delta`` over the last ``period`` iterations, or ``max_iterations``; and, without a time
limit, as Wapiti's error window: the training token error (the marginals' argmax against the
gold tags, counted by the gradient pass) within ``stop_eps`` points over the last
``stop_window`` iterations (on Wapiti's own examples it then stops with Wapiti's F1 or better in
a fraction of its time: benchmarks/crf_default_stop.py). A non-finite objective is refused
(:class:`ObjectiveNotFinite`), never reported as converged. A stop request or the time limit
reaches the kernels between sentences (:attr:`CrfObjective.ctl`), whatever an evaluation costs.

``crf_method="lbfgs"`` is the default; ``"sdca"`` trains the same objective by stochastic
dual coordinate ascent (:mod:`.crf_sdca`), without a barrier but slower to a given F1 at
every thread count measured (benchmarks/README.md, "The CRF on 16 cores"). Multi-core here: each
objective evaluation cuts the examples into runs, largest first, that the ``threads`` threads
of this process take in turn (the numba kernel releases the GIL), each into a gradient buffer
of its own, then sums the buffers by slices of the coordinates on all threads
(:class:`CrfObjective`); the worker processes of the DEMI-DCD engine are not used. L-BFGS
starts from ``warm_epochs`` epochs of Hogwild SGD on the same threads (:mod:`.crf_sgd`), its
initial inverse Hessian γ_k·diag(1 / (h + 2 c2)) with h the Hessian's diagonal there
(:meth:`CrfObjective.hessian_diagonal`; benchmarks/README.md, "The CRF's warm start"). Its
vector algebra between evaluations runs on the same threads, by slices of the coordinates
(:class:`PairMemory`: the two-loop recursion from inner products kept as pairs arrive).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ..errors import DemidcdError, OptionError
from ..options import default
from ..primitives.vectors import dot
from ..tasks.base import InferenceInterrupted, Task
from .common import Callback, OuterLoop, SolverConfig, StopRequest, StopRule, TrainResult
from .crf_sdca import train_crf_sdca
from .recorder import Recorder, Tick

MEMORY = 6  # L-BFGS corrections kept by default in minimize_lbfgs (CRFsuite's num_memories)
MEMORY_MAX = 20  # num_memories=None: as many as fit MEMORY_BYTES, between MEMORY and this
MEMORY_BYTES = 1 << 26  # … of the pairs (s, y): 2·m·dim float64
WINDOW = 5  # train_crf's error window without a time limit (Wapiti's --stopwin)
MAX_LINESEARCH = 40  # halvings of the step before the line search gives up
ARMIJO = 1e-4  # sufficient decrease of the backtracking line search (liblbfgs' ftol)


def check_marginals(task: Task) -> None:
    """Refuse, in one line, a task whose structures have no marginals (no forward-backward):
    every task but the chain ones (sequence, chunking, ner)."""
    from ..tasks.chain.task import SequenceTask

    if not isinstance(task, SequenceTask):
        raise OptionError(f"crf needs marginals; task {task.name} has none (--algorithm crf "
                          "trains the chain tasks: sequence, chunking, ner)")


def task_partial(task: Task):
    """The :class:`~demidcd.tasks.chain.partial.PartialLabels` of a chain task: its allowed
    labels per token and the label scheme's rules, or empty ones when every token is
    labelled."""
    from ..tasks.chain.partial import partial_labels

    return partial_labels(getattr(task, "allowed_ptr", None), getattr(task, "allowed_idx", None),
                          getattr(task, "label_rules", None))


def compile_kernels(task: Task) -> None:
    """Compile (or load from numba's cache) the kernels training and marginals call, on
    example 0 (before the clock starts: a cold cache costs seconds): every job of
    :func:`warm_up_jobs`, in this process."""
    for _, job, _ in warm_up_jobs(task):
        job()


def warm_up_jobs(task: Task) -> list[tuple]:
    """:func:`compile_kernels` as independent warm-up jobs (name, function, rough compile
    seconds), which :func:`demidcd.solvers.warm_up` compiles on several processes at once."""
    from ..tasks.chain.marginals import (
        hessian_diagonal_kernel,
        marginals_kernel,
        nll_gradient_kernel,
        partial_nll_gradient_kernel,
    )
    from .crf_sgd import sgd_run

    check_marginals(task)
    ex = np.zeros(min(1, task.n_examples), np.int64)
    args = (task.u_rows, task.K, task.chain)
    ctl = np.zeros(3, np.int64)
    part = task_partial(task)

    def lbfgs() -> None:
        a = np.array([1.0, 3.0])
        minimize_lbfgs(lambda x: (float(a @ (x - 1.0) ** 2), 2.0 * a * (x - 1.0)), np.zeros(2),
                       c1=0.1, memory=2, max_iterations=4, h0=1.0 / a)

    return [
        ("CRF gradient", lambda: nll_gradient_kernel(np.zeros(task.dim), *args, task.Y, ex,
                                                     np.zeros(task.dim), ctl), 8.0),
        ("CRF marginals", lambda: marginals_kernel(np.zeros(task.dim), *args, ex,
                                                   np.zeros(0, np.int32)), 6.0),
        ("CRF Hessian", lambda: hessian_diagonal_kernel(np.zeros(task.dim), *args, ex,
                                                        np.zeros(task.dim), ctl), 5.0),
        ("CRF SGD", lambda: sgd_run(np.zeros(task.dim), np.zeros(task.dim), *args, task.Y, part,
                                    ex,
                                    0.0, 0.0, np.zeros(0, np.int64), ctl), 6.0),
        ("L-BFGS", lbfgs, 3.0),
    ] + ([("CRF partial labels", lambda: partial_nll_gradient_kernel(
        np.zeros(task.dim), *args, task.Y, part, ex, np.zeros(task.dim), ctl), 10.0)]
        if part.ptr.shape[0] else [])


POLL = 0.05  # seconds between the checks of a stop request while the threads work
SMALLEST_RUN = 1 / 32  # the last runs of an evaluation: this share of one thread's tokens
DENSE_VIEW_MAX = 1 << 21  # F·K at most (16 MiB of float64 per thread) for the dense view …
DENSE_VIEW_FILL = 0.5  # … and its labels seen per feature occurrence at least this share of K


@njit(cache=True, nogil=True, fastmath=True)
def _sum_rows(buffers, w, two_c2, a, b, out):
    """out[a:b] = Σ_t buffers[t, a:b] + two_c2 · w[a:b], the rows zeroed there after."""
    for j in range(a, b):
        g = two_c2 * w[j]
        for t in range(buffers.shape[0]):
            g += buffers[t, j]
            buffers[t, j] = 0.0
        out[j] = g


def dense_view(task: Task) -> bool:
    """Whether :class:`CrfObjective` runs the kernels on a dense copy of the seen pairs'
    weights: a seen-pairs model whose F·K is at most :data:`DENSE_VIEW_MAX` and whose feature
    occurrences carry on average at least :data:`DENSE_VIEW_FILL`·K seen labels: the dense
    loop over all K labels then costs less than walking the lists (benchmarks/README.md, "The
    CRF's gradient kernel")."""
    if task.pairs is None or task.F * task.K > DENSE_VIEW_MAX or task.feat_idx.size == 0:
        return False
    occurrences = np.bincount(task.feat_idx, minlength=task.F)
    labels = float(occurrences @ np.diff(task.pairs[0])) / task.feat_idx.size
    return labels >= DENSE_VIEW_FILL * task.K


def guided_runs(sent_ptr: np.ndarray, threads: int) -> list[np.ndarray]:
    """The examples cut into consecutive runs for ``threads`` threads that take them in turn,
    largest first (OpenMP's guided schedule): each run holds 1/(2·threads) of the tokens still
    left, and none fewer than :data:`SMALLEST_RUN` of one thread's share, so that the threads
    finish an evaluation within about one small run of each other (one run: a single thread)."""
    n, total = sent_ptr.shape[0] - 1, int(sent_ptr[-1])
    if threads <= 1 or n <= 1:
        return [np.arange(n, dtype=np.int64)] if n > 0 else []
    smallest = max(1, int(total * SMALLEST_RUN / threads))
    runs, a = [], 0
    while a < n:
        left = total - int(sent_ptr[a])
        target = int(sent_ptr[a]) + max(left // (2 * threads), smallest)
        b = min(max(int(np.searchsorted(sent_ptr, target)), a + 1), n)
        runs.append(np.arange(a, b, dtype=np.int64))
        a = b
    return runs


class CrfObjective:
    """The smooth part of the CRF objective, w → (Σ_i −log p(y_i | x_i) + c2‖w‖², gradient).

    With ``threads`` > 1 the examples are cut into runs, largest first (:func:`guided_runs`),
    which the threads (this one and ``threads − 1`` of a pool) take in turn until none is
    left, each adding its runs' gradients into a buffer of its own (the kernel releases the
    GIL); then each thread sums its slice of the coordinates over the buffers.
    The gradient array is a fresh one per call; its ``frozen`` entries (weights the model does
    not have) are 0."""

    def __init__(self, task: Task, c2: float, threads: int = 1,
                 frozen: np.ndarray | None = None):
        check_marginals(task)
        if task.Y is None:
            raise OptionError("crf needs gold tags to train on")
        self.task, self.c2 = task, float(c2)
        self.part = task_partial(task)  # partially labelled data (empty: every token labelled)
        self.frozen = np.zeros(0, np.int64) if frozen is None else frozen  # held at 0
        threads = max(1, int(threads))
        self.chunks = guided_runs(task.sent_ptr, threads)
        self.threads = min(threads, len(self.chunks)) if self.chunks else 1
        self.rows, self.chain, self.dense_at = task.u_rows, task.chain, None
        if dense_view(task):
            # the seen pairs' weights laid out densely (0 where unseen): the kernels' dense U
            # path, the same objective; the gradient of the unseen pairs is dropped
            self.chain, to_dense = task.dense_layout()
            self.rows = task.F
            self.seen_at = np.flatnonzero(to_dense >= 0)  # w[seen_at] = w_dense[dense_at]
            self.dense_at = to_dense[self.seen_at]
            self.pad_at = np.flatnonzero(to_dense < 0)
            self.w_dense = np.zeros(task.dimension(task.F, task.K, task.G))
            self.total = np.empty(self.w_dense.shape[0])
        width = task.dim if self.dense_at is None else self.w_dense.shape[0]
        self.buffers = np.zeros((self.threads, width))
        self.cuts = np.linspace(0, width, self.threads + 1).astype(np.int64)
        self.pool: ThreadPoolExecutor | None = None
        # the kernels' control rows, one per thread: [stop asked, sentences done, tokens whose
        # most probable label is not the gold one]; should_stop() (the clock, a signal) is
        # asked while the threads work and sets the stop column
        self.ctl = np.zeros((self.threads, 3), np.int64)
        self.should_stop: Callable[[], bool] | None = None
        self.evaluations, self.errors, self._dirty = 0, -1, False

    @property
    def halted(self) -> bool:
        """Whether a stop was asked (:attr:`should_stop`) while the threads worked: the
        kernels then left their sentences undone, and every later call ends at once."""
        return bool(self.ctl[0, 0])

    @property
    def work(self) -> int:
        """Sentences the kernels have done (forward-backward passes) so far."""
        return int(self.ctl[:, 1].sum())

    def _gradients(self, t: int) -> float:
        """Thread t's share: runs taken in turn (``next`` on the shared counter is atomic)."""
        from ..tasks.chain.marginals import nll_gradient_kernel, partial_nll_gradient_kernel

        task, w, buf, nll = self.task, self._kernel_w, self.buffers[t], 0.0
        part = self.part
        for i in self._next:
            if i >= len(self.chunks) or self.ctl[t, 0]:
                break
            if part.ptr.shape[0]:  # (the fully labelled kernel otherwise: today's objective)
                nll += partial_nll_gradient_kernel(w, self.rows, task.K, self.chain, task.Y,
                                                   part, self.chunks[i], buf, self.ctl[t])
            else:
                nll += nll_gradient_kernel(w, self.rows, task.K, self.chain, task.Y,
                                           self.chunks[i], buf, self.ctl[t])
        return nll

    def _sum(self, t: int) -> None:
        _sum_rows(self.buffers, self._kernel_w, 2.0 * self.c2, self.cuts[t], self.cuts[t + 1],
                  self._grad if self.dense_at is None else self.total)

    def on_all(self, fn: Callable[[int], Any]) -> list:
        """fn(t) on every thread t at once, on the pool's threads, while this one asks
        :attr:`should_stop` every :data:`POLL` s and on a stop sets the kernels' stop flag
        (they leave at their next sentence); a signal's handler, which runs on this thread
        while it waits, sets it at once (:attr:`StopRequest.listeners`)."""
        if self.threads == 1 and self.should_stop is None:
            return [fn(0)]
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.threads)
        futures = [self.pool.submit(fn, t) for t in range(self.threads)]
        StopRequest.listeners.append(self.halt)  # a signal's handler: the flag at once
        try:
            while wait(futures, timeout=POLL)[1]:
                if self.should_stop is not None and not self.halted and self.should_stop():
                    self.halt()
        except BaseException:  # a second Ctrl-C: the threads stop before it goes on
            self.halt()
            wait(futures)
            raise
        finally:
            StopRequest.listeners.remove(self.halt)
        return [f.result() for f in futures]

    def halt(self) -> None:
        """Ask the kernels to stop before their next sentence."""
        self.ctl[:, 0] = 1

    def check_halted(self) -> None:
        """Raise :class:`~demidcd.tasks.base.InferenceInterrupted` when a stop was asked: what
        the kernels left undone makes the call's result unusable."""
        if self.halted:
            raise InferenceInterrupted("stop requested")

    def run_jobs(self, jobs: list[Callable[[int], float]]) -> list[float]:
        """The jobs on the threads, each taken in turn by the next free thread and given that
        thread's index (its row of ``buffers``); their results in order."""
        out, turn = [0.0] * len(jobs), itertools.count()

        def take(t: int) -> None:
            for i in turn:
                if i >= len(jobs):
                    break
                out[i] = jobs[i](t)

        self.on_all(take)
        return out

    def hessian_diagonal(self, w: np.ndarray) -> np.ndarray:
        """The diagonal of the Hessian of Σ_i −log p(y_i | x_i) at w without the covariances
        between positions (:func:`~demidcd.tasks.chain.marginals.hessian_diagonal_kernel`),
        on the threads (the seen-pairs layout of ``task.dim``), the buffers left zero."""
        from ..tasks.chain.marginals import hessian_diagonal_kernel

        task, n = self.task, self.task.dim
        w = np.ascontiguousarray(w, np.float64)

        def job(run: np.ndarray) -> Callable[[int], float]:
            return lambda t: hessian_diagonal_kernel(w, task.u_rows, task.K, task.chain, run,
                                                     self.buffers[t, :n], self.ctl[t])

        self.run_jobs([job(r) for r in self.chunks])
        h = self.buffers[:, :n].sum(axis=0)
        self.buffers[:, :n] = 0.0
        self.check_halted()
        return h

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        w = np.ascontiguousarray(w, np.float64)
        self.evaluations += 1
        if self._dirty:  # an earlier call was interrupted between the two phases
            self.buffers[:] = 0.0
        self._dirty, self._next = True, itertools.count()
        self._kernel_w = w
        if self.dense_at is not None:
            self.w_dense[self.dense_at] = w[self.seen_at]
            self._kernel_w = self.w_dense
        self.ctl[:, 2] = 0
        nll = sum(self.on_all(self._gradients))
        self.check_halted()  # (the buffers stay dirty: the next call clears them)
        self.errors = int(self.ctl[:, 2].sum())
        self._grad = grad = np.empty(self.task.dim)
        self.on_all(self._sum)
        if self.dense_at is not None:
            grad[self.seen_at] = self.total[self.dense_at]
            grad[self.pad_at] = (2.0 * self.c2) * w[self.pad_at]  # U's padding: its L2 term
        self._dirty = False
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
    reason: str  # "converged" | "max-iterations" | "line-search" | "time-limit"
    iterations: int
    rule: str = ""  # with "converged": the test that passed (:data:`RULES`)


RULES = {"epsilon": "the gradient norm ‖g‖ / max(1, ‖w‖) fell to --epsilon",
         "delta": "the objective improved by less than --stop-delta of itself over the last "
                  "--period iterations",
         "window": "the training error changed by less than --stop-eps points over the last "
                   "--stop-window iterations"}
"""The convergence tests of :func:`minimize_lbfgs` and of :func:`train_crf`'s window."""


class ObjectiveNotFinite(DemidcdError):
    """The CRF objective (or its gradient) is not a finite number at the weights L-BFGS holds:
    no model is made from them."""

    exit_code = 1


@njit(cache=True, nogil=True)
def _pseudo_gradient(w, g, c1, pg, a, b):
    """pg ← OWL-QN's pseudo-gradient of f + c1‖w‖₁ (Andrew and Gao 2007) on [a, b): the
    one-sided derivative towards decrease, 0 where w_j = 0 and |g_j| ≤ c1 (pg = g when c1 = 0).
    Returns the slice's (‖pg‖², ‖w‖²)."""
    pp = ww = 0.0
    for j in range(a, b):
        x, gj = w[j], g[j]
        if c1 == 0.0:
            p = gj
        elif x > 0.0:
            p = gj + c1
        elif x < 0.0:
            p = gj - c1
        elif gj + c1 < 0.0:
            p = gj + c1
        elif gj - c1 > 0.0:
            p = gj - c1
        else:
            p = 0.0
        pg[j] = p
        pp += p * p
        ww += x * x
    return pp, ww


@njit(cache=True, nogil=True, fastmath=True)
def _steepest(pg, h0, d, a, b):
    """d ← −D pg on [a, b), D = diag(h0); returns the slice's ‖d‖²."""
    dd = 0.0
    for j in range(a, b):
        x = -pg[j] * h0[j]
        d[j] = x
        dd += x * x
    return dd


@njit(cache=True, nogil=True)
def _slope(d, pg, owlqn, a, b):
    """With ``owlqn``, zero the directions on [a, b) that do not descend the pseudo-gradient
    (d_j pg_j ≥ 0: OWL-QN's restriction); returns the slice's pg·d."""
    s = 0.0
    for j in range(a, b):
        x = d[j] * pg[j]
        if owlqn and x >= 0.0:
            d[j] = 0.0
        else:
            s += x
    return s


@njit(cache=True, nogil=True)
def _trial(w, d, step, pg, owlqn, wn, a, b):
    """wn ← w + step·d on [a, b), with ``owlqn`` projected onto the orthant of w (of −pg where
    w_j = 0). Returns the slice's (pg·(wn − w), ‖wn‖₁)."""
    dec = l1 = 0.0
    for j in range(a, b):
        x = w[j] + step * d[j]
        if owlqn:
            o = w[j] if w[j] != 0.0 else -pg[j]
            if (x > 0.0 and not o > 0.0) or (x < 0.0 and not o < 0.0):
                x = 0.0
        wn[j] = x
        dec += pg[j] * (x - w[j])
        l1 += abs(x)
    return dec, l1


@njit(cache=True, nogil=True, fastmath=True)
def _store_pair(wn, w, gn, g, s, y, h0, a, b):
    """s ← wn − w, y ← gn − g on [a, b); returns the slice's (s·y, y·D y) with D = diag(h0)."""
    sy = yy = 0.0
    for j in range(a, b):
        u = wn[j] - w[j]
        v = gn[j] - g[j]
        s[j] = u
        y[j] = v
        sy += u * v
        yy += v * v * h0[j]
    return sy, yy


BLOCK = 1024  # coordinates per block of the two-loop's passes (a few rows of it fit in L1)


@njit(cache=True, nogil=True, fastmath=True)
def _gram_pass(S, Y, order, new, pg, h0, out, a, b):
    """The inner products the two-loop needs, over [a, b) (summed over the slices by the
    caller): out[k] = s_k·pg, out[m + k] = y_k·D pg for the pairs k of ``order`` (rows of S,
    Y), and out[2m + k] = s_new·y_k, out[3m + k] = s_k·y_new, out[4m + k] = y_new·D y_k for
    the pair in row ``new`` (just stored; the caller ignores these when no pair was). One pass
    over the pairs, by blocks."""
    m = order.shape[0]
    out[:] = 0.0
    dpg, dyn = np.empty(BLOCK), np.empty(BLOCK)
    for lo in range(a, b, BLOCK):
        hi = min(lo + BLOCK, b)
        width, pgb = hi - lo, pg[lo:hi]
        yn, sn = Y[new, lo:hi], S[new, lo:hi]
        for j in range(width):
            dpg[j] = pgb[j] * h0[lo + j]
            dyn[j] = yn[j] * h0[lo + j]
        for k in range(m):
            si, yi = S[order[k], lo:hi], Y[order[k], lo:hi]
            sg = ydg = p = q = r = 0.0
            for j in range(width):
                sg += si[j] * pgb[j]
                ydg += yi[j] * dpg[j]
                p += sn[j] * yi[j]
                q += si[j] * yn[j]
                r += yi[j] * dyn[j]
            out[k] += sg
            out[m + k] += ydg
            out[2 * m + k] += p
            out[3 * m + k] += q
            out[4 * m + k] += r


@njit(cache=True, nogil=True)
def _coefficients(SY, YDY, rho, order, gamma, sg, ydg, qy, rs, alpha):
    """The two-loop recursion (Nocedal and Wright, Algorithm 7.4; H₀ = γ D) run on inner
    products only: its q stays pg + Σ_k qy_k y_k and its r = γ D q + Σ_k rs_k s_k, so that
    s_i·q and y_i·r come from sg, ydg (this iteration's) and SY[i, j] = s_i·y_j, YDY[i, j] =
    y_i·D y_j (kept as pairs arrive). Fills qy, rs (by position in ``order``) for
    :func:`_combine`: −H pg = −(γ D (pg + Σ qy_k y_k) + Σ rs_k s_k)."""
    m = order.shape[0]
    qy[:m] = 0.0
    rs[:m] = 0.0
    for k in range(m - 1, -1, -1):  # newest to oldest: α_k = ρ_k s_k·q, q −= α_k y_k
        i, sq = order[k], sg[k]
        for t in range(m):
            sq += qy[t] * SY[i, order[t]]
        alpha[k] = rho[i] * sq
        qy[k] -= alpha[k]
    for k in range(m):  # oldest to newest: β = ρ_k y_k·r, r += (α_k − β) s_k
        i, yr, ys = order[k], ydg[k], 0.0
        for t in range(m):
            yr += qy[t] * YDY[i, order[t]]
            ys += rs[t] * SY[order[t], i]
        rs[k] += alpha[k] - rho[i] * (gamma * yr + ys)


@njit(cache=True, nogil=True, fastmath=True)
def _combine(S, Y, order, qy, rs, gamma, pg, h0, d, a, b):
    """d ← −(γ D (pg + Σ_k qy_k y_k) + Σ_k rs_k s_k) on [a, b), by blocks
    (:func:`_coefficients`)."""
    m = order.shape[0]
    acc = np.empty(BLOCK)
    for lo in range(a, b, BLOCK):
        hi = min(lo + BLOCK, b)
        width = hi - lo
        pgb = pg[lo:hi]
        for j in range(width):
            acc[j] = pgb[j]
        for k in range(m):
            c, yk = qy[k], Y[order[k], lo:hi]
            for j in range(width):
                acc[j] += c * yk[j]
        hb = h0[lo:hi]
        for j in range(width):
            acc[j] *= -gamma * hb[j]
        for k in range(m):
            c, sk = rs[k], S[order[k], lo:hi]
            for j in range(width):
                acc[j] -= c * sk[j]
        db = d[lo:hi]
        for j in range(width):
            db[j] = acc[j]


def _backtrack(step: float, f: float, fn: float, slope: float) -> float:
    """The next trial step after ``step`` failed the sufficient decrease: the minimiser of the
    quadratic through φ(0) = f, φ'(0)·step = ``slope`` (< 0) and φ(step) = fn, kept within
    [0.1, 0.5]·step (Nocedal and Wright, Eq. 3.57 and the safeguard of §3.5)."""
    curvature = fn - f - slope
    if not (curvature > 0.0 and slope < 0.0):
        return 0.5 * step
    return step * min(0.5, max(0.1, -slope / (2.0 * curvature)))


def _sliced(on_threads: Callable[[Callable[[int], Any]], list], cuts: np.ndarray,
            kernel: Callable, *args: Any) -> Any:
    """kernel(*args, a, b) on every thread's slice [cuts[t], cuts[t + 1]) at once; the sum over
    the slices of what it returns (a number, or a tuple of them summed entrywise)."""
    parts = on_threads(lambda t: kernel(*args, cuts[t], cuts[t + 1]))
    return tuple(map(sum, zip(*parts, strict=True))) if isinstance(parts[0], tuple) \
        else sum(parts)


class PairMemory:
    """L-BFGS's memory: the last ``memory`` pairs s = w_{k+1} − w_k, y = g_{k+1} − g_k in a ring
    of ``memory`` + 1 rows allocated once, with ρ = 1 / s·y and the inner products SY[i, j] =
    s_i·y_j and YDY[i, j] = y_i·D y_j (D = diag(h0)) taken as pairs arrive, so that
    the two-loop recursion (Nocedal and Wright, Algorithm 7.4) needs one pass for the inner
    products with pg and one to form the direction (:func:`_coefficients`), each over the
    threads' slices of the coordinates (``on_threads(fn)`` calls fn(t) for every thread t)."""

    def __init__(self, n: int, memory: int, h0: np.ndarray, cuts: np.ndarray,
                 on_threads: Callable[[Callable[[int], Any]], list]):
        self.h0, self.cuts, self.on_threads = h0, cuts, on_threads
        self.S, self.Y = np.zeros((memory + 1, n)), np.zeros((memory + 1, n))
        self.SY, self.YDY = np.zeros((memory + 1, memory + 1)), np.zeros((memory + 1, memory + 1))
        self.rho, self.qy, self.rs, self.alpha = (np.zeros(memory + 1) for _ in range(4))
        self.dots = np.zeros((len(cuts) - 1, 5 * (memory + 1)))  # _gram_pass's, per slice
        self.memory, self.ring, self.gamma = memory, [], 1.0  # ring: rows in use, oldest first
        self.new = -1  # the row of a pair stored since the last direction

    def __len__(self) -> int:
        return len(self.ring)

    def clear(self) -> None:
        """Forget every pair (L-BFGS restarts from the steepest descent)."""
        self.ring.clear()
        self.new = -1

    def store(self, wn: np.ndarray, w: np.ndarray, gn: np.ndarray, g: np.ndarray) -> None:
        """Keep the pair (wn − w, gn − g) if s·y > 0 (the curvature condition), the oldest beyond
        ``memory`` out; γ = s·y / y·D y of the newest. Its inner products with the others are
        taken by the next :meth:`direction`, which must come before the next store."""
        row = next(r for r in range(self.memory + 1) if r not in self.ring)  # a free row
        sy, yy = _sliced(self.on_threads, self.cuts, _store_pair, wn, w, gn, g, self.S[row],
                         self.Y[row], self.h0)
        self.new = -1
        if sy > 1e-12 * max(yy, 1e-300):
            self.ring.append(row)
            self.rho[row], self.gamma, self.new = 1.0 / sy, sy / yy, row
            if len(self.ring) > self.memory:
                self.ring.pop(0)

    def direction(self, pg: np.ndarray, d: np.ndarray) -> None:
        """d ← −H pg, H the L-BFGS inverse Hessian of the pairs kept, H₀ = γ D."""
        order, m, new, cuts = np.array(self.ring, np.int64), len(self.ring), self.new, self.cuts
        S, Y, h0, dots = self.S, self.Y, self.h0, self.dots
        self.on_threads(lambda t: _gram_pass(S, Y, order, max(new, 0), pg, h0, dots[t],
                                             cuts[t], cuts[t + 1]))
        tot = dots.sum(axis=0)
        if new >= 0:
            self.SY[new, order], self.SY[order, new] = tot[2 * m:3 * m], tot[3 * m:4 * m]
            self.YDY[new, order] = self.YDY[order, new] = tot[4 * m:5 * m]
            self.new = -1
        qy, rs, gamma = self.qy, self.rs, self.gamma
        _coefficients(self.SY, self.YDY, self.rho, order, gamma, tot[:m], tot[m:2 * m], qy, rs,
                      self.alpha)
        self.on_threads(lambda t: _combine(S, Y, order, qy, rs, gamma, pg, h0, d, cuts[t],
                                           cuts[t + 1]))


def minimize_lbfgs(fun: Callable[[np.ndarray], tuple[float, np.ndarray]], w0: np.ndarray,
                   c1: float = 0.0, epsilon: float = 1e-5, period: int = 10,
                   delta: float = 1e-5, max_iterations: int | None = None,
                   memory: int = MEMORY,
                   on_iteration: Callable[[Iteration], bool | None] | None = None,
                   should_stop: Callable[[np.ndarray], bool] | None = None,
                   h0: np.ndarray | None = None, threads: int = 1,
                   on_threads: Callable[[Callable[[int], Any]], list] | None = None) -> Minimum:
    """Minimise fun(w) + c1‖w‖₁ (fun returns (value, gradient) of a smooth convex function):
    two-loop L-BFGS with a backtracking Armijo line search, OWL-QN (pseudo-gradient, the
    direction restricted to its orthant, steps projected onto it) when c1 > 0. Stops as
    CRFsuite does (module docstring), or when ``on_iteration`` returns True (a test of the
    caller's: reason "converged", rule "window"); ``should_stop(w)`` (the clock) is asked after
    every evaluation, and the last accepted w is returned. A trial step whose objective is not
    finite is refused as one without sufficient decrease; a non-finite objective at w0, or a
    non-finite gradient norm at an accepted step, raises :class:`ObjectiveNotFinite` (never
    "converged"). Each accepted iterate is a fresh array
    (callers may keep the ones they were given). ``h0`` (positive, len(w0)): the diagonal of
    the initial inverse Hessian H₀ = γ_k·diag(h0), γ_k = s·y / y·diag(h0) y (Nocedal and Wright,
    Eq. 7.20, with a diagonal in place of I), and the first direction −diag(h0)·pg; None: the
    identity.

    The vector algebra runs in numba kernels over ``threads`` slices of the coordinates at
    once, ``on_threads(fn)`` calling fn(t) for every t < ``threads`` concurrently (None: one
    slice, here); the two-loop recursion as :class:`PairMemory` runs it, in two passes."""
    w = np.array(w0, np.float64)
    n, c1, owlqn = w.shape[0], float(c1), c1 > 0.0
    if on_threads is None:
        threads, on_threads = 1, lambda fn: [fn(0)]
    cuts = np.linspace(0, n, max(1, int(threads)) + 1).astype(np.int64)

    def sliced(kernel: Callable, *args: Any) -> Any:
        return _sliced(on_threads, cuts, kernel, *args)

    fs, g = fun(w)
    f = fs + c1 * float(np.abs(w).sum())
    if not math.isfinite(f):
        raise ObjectiveNotFinite(f"crf: the objective is {f} at the starting weights")
    pg, d, wn = np.empty(n), np.empty(n), np.empty(n)
    h0 = np.ones(n) if h0 is None else np.ascontiguousarray(h0, np.float64)
    pairs = PairMemory(n, memory, h0, cuts, on_threads)

    def pseudo_gradient() -> tuple[float, float]:  # pg; (‖pg‖, ‖w‖)
        pp, ww = sliced(_pseudo_gradient, w, g, c1, pg)
        return math.sqrt(pp), math.sqrt(ww)

    def steepest() -> float:  # d ← −H₀ pg; the first step length
        return 1.0 / max(math.sqrt(sliced(_steepest, pg, h0, d)), 1e-300)

    pnorm, wnorm = pseudo_gradient()
    past = [f]
    step = steepest()
    k = flat = 0
    if not math.isfinite(pnorm):
        raise ObjectiveNotFinite(f"crf: the gradient norm is {pnorm} at the starting weights")
    if pnorm / max(1.0, wnorm) <= epsilon:
        return Minimum(w, f, "converged", 0, "epsilon")
    while max_iterations is None or k < max_iterations:
        dg = sliced(_slope, d, pg, owlqn)
        if not dg < 0.0:  # not a descent direction: restart from the steepest descent
            pairs.clear()
            step = steepest()
            dg = sliced(_slope, d, pg, owlqn)
        for _ in range(MAX_LINESEARCH):
            decrease, l1 = sliced(_trial, w, d, step, pg, owlqn, wn)
            fsn, gn = fun(wn)
            fn = fsn + c1 * l1
            slope = decrease if owlqn else step * dg  # the model's decrease at this step
            if math.isfinite(fn) and fn <= f + ARMIJO * slope:
                break
            if should_stop is not None and should_stop(w):
                return Minimum(w, f, "time-limit", k)
            step = _backtrack(step, f, fn, slope) if math.isfinite(fn) else 0.5 * step
        else:
            if not math.isfinite(fn):  # nothing finite along the direction, however short
                raise ObjectiveNotFinite(f"crf: the objective is {fn} at every trial step "
                                         f"of iteration {k + 1} (objective {f:g} before it)")
            return Minimum(w, f, "line-search", k)
        flat = flat + 1 if not fn < f else 0  # accepted without a decrease (rounding)
        if flat >= period:  # that many in a row: flat at this precision, as a failed search
            return Minimum(w, f, "line-search", k)
        k += 1
        pairs.store(wn, w, gn, g)
        w, g, f = wn, gn, fn
        wn = np.empty(n)  # a fresh array per iterate: callers may keep the ones they were given
        pnorm, wnorm = pseudo_gradient()
        gnorm = pnorm / max(1.0, wnorm)
        if not math.isfinite(gnorm):
            raise ObjectiveNotFinite(f"crf: the gradient norm is {gnorm} at iteration {k} "
                                     f"(objective {f:g})")
        window = on_iteration is not None and on_iteration(Iteration(k, f, gnorm, step, 0, w))
        past.append(f)
        if gnorm <= epsilon:
            return Minimum(w, f, "converged", k, "epsilon")
        if len(past) > period and (past[-period - 1] - f) / max(abs(f), 1e-300) < delta:
            return Minimum(w, f, "converged", k, "delta")
        if window:
            return Minimum(w, f, "converged", k, "window")
        if should_stop is not None and should_stop(w):
            return Minimum(w, f, "time-limit", k)
        if pairs:
            pairs.direction(pg, d)
        else:
            steepest()
        step = 1.0
    return Minimum(w, f, "max-iterations", k)


def lbfgs_memory(dim: int) -> int:
    """The L-BFGS pairs kept by default: as many as :data:`MEMORY_BYTES` hold (2·m·dim
    float64), at least CRFsuite's :data:`MEMORY`, at most :data:`MEMORY_MAX` (more pairs, fewer
    iterations to a given objective: benchmarks/README.md, "The CRF's warm start")."""
    return int(min(MEMORY_MAX, max(MEMORY, MEMORY_BYTES // (16 * max(dim, 1)))))


def train_crf(task: Task, config: SolverConfig, threads: int = 1,
              callback: Callback | None = None, cpu_log: str | None = None,
              log: Callable[[str], None] | None = None, tick: Tick | None = None,
              c1: float = default("c1"), c2: float = default("c2"),
              max_iterations: int | None = default("max_iterations"),
              epsilon: float = default("epsilon"), period: int = default("period"),
              stop_delta: float = default("stop_delta"),
              crf_method: str = default("crf_method"),
              all_possible_transitions: bool | None = default("all_possible_transitions"),
              num_memories: int | None = default("num_memories"),
              warm_epochs: int = default("warm_epochs"),
              stop_window: int | None = default("stop_window"),
              stop_eps: float = default("stop_eps")) -> TrainResult:
    """CRF by ``crf_method``: ``"lbfgs"`` (the default), L-BFGS / OWL-QN (module docstring):
    one iteration record per accepted step (``objective``: L(w); ``gnorm``: ‖g‖ / max(1,
    ‖w‖); ``improvement``: (f_{k−period} − f_k) / f_k once there are that many;
    ``train_error``: the share of training tokens, in %, whose most probable label under the
    marginals is not the gold one; ``nonzero``: non-zero weights), or ``"sdca"``
    (:func:`.crf_sdca.train_crf_sdca`: one record per epoch). Besides CRFsuite's tests it
    stops as Wapiti's error window does: when ``train_error`` moved by less than ``stop_eps``
    points over the last ``stop_window`` iterations (0: never; None: :data:`WINDOW`, or never
    under a time limit, which is then the budget; Wapiti decodes the training set by Viterbi,
    here the marginals' argmax, which the gradient pass gives for free).
    ``all_possible_transitions`` False: the transitions no gold tagging
    takes have no weight (held at 0), as CRFsuite without ``feature.possible_transitions``;
    None or True: every transition has one. ``num_memories``: the pairs L-BFGS keeps (None:
    :func:`lbfgs_memory`); ``warm_epochs``: epochs of Hogwild SGD (:mod:`.crf_sgd`) that give
    L-BFGS its start (0: w = 0, as CRFsuite); their time counts in the time limit. A stop
    request or the time limit ends the kernels between sentences (the warm start, the
    Hessian's diagonal and every evaluation): the run keeps the last accepted iterate."""
    check_marginals(task)
    for name, v in (("c1", c1), ("c2", c2), ("epsilon", epsilon), ("stop_delta", stop_delta),
                    ("stop_eps", stop_eps)):
        if not 0.0 <= float(v) < math.inf:
            raise OptionError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {v}")
    if int(period) < 1:
        raise OptionError(f"--period must be >= 1, got {period}")
    if stop_window is not None and int(stop_window) < 0:
        raise OptionError(f"--stop-window must be >= 0, got {stop_window}")
    if num_memories is not None and int(num_memories) < 1:
        raise OptionError(f"--num-memories must be >= 1, got {num_memories}")
    if int(warm_epochs) < 0:
        raise OptionError(f"--warm-epochs must be >= 0, got {warm_epochs}")
    if max_iterations is not None and int(max_iterations) < 1:
        raise OptionError(f"--max-iterations must be >= 1, got {max_iterations}")
    if crf_method not in ("sdca", "lbfgs"):
        raise OptionError(f"--crf-method must be sdca or lbfgs, got {crf_method!r}")
    if task.Y is None:
        raise OptionError("crf needs gold tags to train on")
    from ..tasks.chain.marginals import unseen_transitions
    from .crf_sgd import sgd_epochs

    frozen = None if all_possible_transitions in (None, True) else unseen_transitions(task)
    if crf_method == "sdca":
        if getattr(task, "allowed_ptr", None) is not None:
            raise OptionError("--crf-method sdca needs every token labelled; partially "
                              "labelled data trains with --crf-method lbfgs")
        return train_crf_sdca(task, config, threads, callback, cpu_log, log, tick,
                              float(c1), float(c2),
                              None if max_iterations is None else int(max_iterations),
                              float(epsilon), frozen=frozen)
    obj = CrfObjective(task, c2, threads, frozen)
    rec = Recorder(task, config, callback, threads, objective_fn=None, tick=tick)
    state = {"w": np.zeros(task.dim), "k": 0}
    window = int(stop_window) if stop_window is not None else \
        0 if config.time_limit is not None else WINDOW
    tokens, past = max(int(task.sent_ptr[-1]), 1), []
    errors: list[float] = []

    def on_iteration(it: Iteration) -> bool:
        state["w"], state["k"] = it.w, it.k
        past.append(it.f)
        errors.append(100.0 * obj.errors / tokens)
        r = {"epoch": it.k, "objective": it.f, "gnorm": it.gnorm}
        if len(past) > period:
            r["improvement"] = (past[-period - 1] - it.f) / max(abs(it.f), 1e-300)
        r.update(train_error=errors[-1], nonzero=int(np.count_nonzero(it.w)),
                 evaluations=obj.evaluations, step=it.step)
        rec.epoch(r, it.w)
        last = errors[-window:]
        return window > 0 and len(last) == window and max(last) - min(last) < float(stop_eps)

    clock = rec.start()
    obj.should_stop = clock.expired  # asked while the threads work: a signal, the time limit
    res = None
    try:
        with OuterLoop(task, clock) as run:
            w0 = state["w"]
            if int(warm_epochs) > 0:
                eta0, ran = sgd_epochs(obj, w0, int(warm_epochs), seed=config.seed,
                                       should_stop=lambda: rec.poll(lambda: w0))
                if log is not None:
                    log(f"crf: warm start: {ran} SGD epochs (eta {eta0:g}) in "
                        f"{clock.elapsed():.1f} s")
                if obj.halted or clock.expired():
                    raise InferenceInterrupted("stop requested during the warm start")
            memory = lbfgs_memory(task.dim) if num_memories is None else int(num_memories)
            h0 = 1.0 / (obj.hessian_diagonal(w0) + 2.0 * float(c2) + 1e-12)
            res = minimize_lbfgs(obj, w0, float(c1), float(epsilon), int(period),
                                 float(stop_delta),
                                 None if max_iterations is None else int(max_iterations),
                                 memory=memory, on_iteration=on_iteration,
                                 should_stop=lambda w: rec.poll(lambda: w), h0=h0,
                                 threads=obj.threads, on_threads=obj.on_all)
            run.stop(res.reason == "converged")
    finally:
        obj.close()
    if res is None:  # interrupted: the last accepted iterate
        w, reason, k = state["w"], run.reason, state["k"]
    else:
        w, k = res.w, res.iterations
        reason = res.reason if res.reason in ("converged", "max-iterations", "line-search") \
            else run.reason if run.reason != "max-epochs" else "time-limit"
    if log is not None and reason == "line-search":
        log("crf: the line search found no decrease (the objective is flat at this precision)")
    elif log is not None and reason == "converged" and res is not None and res.rule:
        log(f"crf: converged: {RULES[res.rule]}")
    if reason == "line-search":
        reason = "converged"
    last = rec.history[-1]["gnorm"] if rec.history else None
    return rec.finish(w, reason, k, cpu_log=cpu_log, evaluations=obj.evaluations,
                      objective=None if res is None else res.f,
                      stop_rule=StopRule("‖g‖ / max(1, ‖w‖)", last, "epsilon",
                                         float(epsilon), "max_iterations"))
