"""Primal online learners' shared machinery: the weight representations and their numba update
kernels, and mini-batch inference split over the worker processes.

:class:`AveragedWeights` — w = s·v with a scalar s (Pegasos rescales w every step; a scalar
keeps the step O(nnz)), and the running average of w over the steps by the lazy trick of
Collins (2002) / Daumé: with S_t = Σ_{τ≤t} s_τ and, for every change g of v made at step τ,
U += S_{τ−1}·g, the sum Σ_{t≤T} w_t = S_T·v − U. No step does O(d) work. The perceptron and
MIRA keep s = 1.

:class:`AdaGradWeights` — the online primal subgradient method with AdaGrad and sparse lazy
updates of Algorithm 1 in "An Empirical Analysis of Optimization for Max-Margin NLP" (Kummerfeld
et al. 2015): a step touches only the features of its subgradient; every other weight owes the
zero-gradient steps since its last update, which UPDATE-CATCHUP applies in one go when
inference is about to read it (:meth:`Task.weights_read <demidcd.tasks.base.Task.weights_read>`).

:class:`BatchInference` — loss-augmented inference of a mini-batch, split between this process and
p − 1 workers (the shared-memory transport's "replica" jobs). Every worker holds a replica of the
weights; after each step the batch's records (in batch order) are broadcast through shared arrays
and every replica applies the same step, so each process infers with exactly the parent's weights
and no O(d) vector is ever copied.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from ..errors import DemidcdError, OptionError
from ..primitives.ring import RING_WORDS
from ..primitives.vectors import dot
from ..tasks.base import INDEX_DTYPE, RecordBatch, Task


# ------------------------------------------------------------------------------ kernels
@njit(cache=True, nogil=True)
def add_records(v, U, S_prev, sq, idx, val, ptr, coef):
    """v += Σ_r coef[r]·φ_r and U += S_prev·(the same change); returns ‖v‖² updated from ``sq``
    entry by entry (records may share indices)."""
    for r in range(coef.shape[0]):
        c = coef[r]
        if c == 0.0:
            continue
        for k in range(ptr[r], ptr[r + 1]):
            j = idx[k]
            d = c * val[k]
            old = v[j]
            new = old + d
            v[j] = new
            U[j] += S_prev * d
            sq += new * new - old * old
    return sq


@njit(cache=True, nogil=True)
def record_sqnorms(val, ptr):
    """‖φ_r‖² of every record."""
    out = np.empty(ptr.shape[0] - 1)
    for r in range(out.shape[0]):
        s = 0.0
        for k in range(ptr[r], ptr[r + 1]):
            s += val[k] * val[k]
        out[r] = s
    return out


@njit(cache=True, nogil=True)
def _catch_one(w, q, t, eta, C, l1):
    """UPDATE-CATCHUP: t AdaGrad steps with zero subgradient on one weight."""
    if w == 0.0 or t <= 0:
        return w
    sq = np.sqrt(q)
    if l1:
        a = abs(w) - eta * C / sq * t
        if a <= 0.0:
            return 0.0
        return a if w > 0.0 else -a
    return w * (sq / (eta * C + sq)) ** t


@njit(cache=True, nogil=True)
def _update_one(w, g, q, eta, C, l1):
    """UPDATE-ACTIVE: one AdaGrad step on one weight with subgradient g (q already += g²)."""
    sq = np.sqrt(q)
    if l1:
        z = w - eta / sq * g
        a = abs(z) - eta / sq * C
        if a <= 0.0:
            return 0.0
        return a if z > 0.0 else -a
    return (w * sq - eta * g) / (eta * C + sq)


@njit(cache=True, nogil=True)
def adagrad_catch_up(w, q, u, n, starts, lens, eta, C, l1):
    """Bring w[s:s+l] of every block up to step n (u[f] < n owes n − u[f] zero-gradient
    steps)."""
    for b in range(starts.shape[0]):
        for f in range(starts[b], starts[b] + lens[b]):
            if u[f] < n:
                w[f] = _catch_one(w[f], q[f], n - u[f], eta, C, l1)
                u[f] = n


@njit(cache=True, nogil=True)
def adagrad_materialize(w, q, u, n, eta, C, l1, out):
    """out = w brought up to step n everywhere, leaving the state untouched."""
    for f in range(w.shape[0]):
        out[f] = _catch_one(w[f], q[f], n - u[f], eta, C, l1)


@njit(cache=True, nogil=True)
def adagrad_step(w, q, u, n, gbuf, stamp, idx, val, ptr, use, eta, C, l1):
    """Step n (≥ 1) of Algorithm 1 with g = Σ_{r: use[r]} (Φ(ŷ_r) − Φ(y_r)) = −Σ φ_r: for each
    feature of g, catch up to step n − 1, then q += g², UPDATE-ACTIVE (or one zero-gradient step
    when its entries cancel), u = n. Returns the number of features touched."""
    m = 0
    touched = np.empty(idx.shape[0], np.int64)
    for r in range(use.shape[0]):
        if not use[r]:
            continue
        for k in range(ptr[r], ptr[r + 1]):
            f = idx[k]
            if stamp[f] != n:
                stamp[f] = n
                touched[m] = f
                m += 1
            gbuf[f] -= val[k]
    for k in range(m):
        f = touched[k]
        g = gbuf[f]
        gbuf[f] = 0.0
        if u[f] < n - 1:
            w[f] = _catch_one(w[f], q[f], n - 1 - u[f], eta, C, l1)
        if g != 0.0:
            q[f] += g * g
            w[f] = _update_one(w[f], g, q[f], eta, C, l1)
        else:
            w[f] = _catch_one(w[f], q[f], 1, eta, C, l1)
        u[f] = n
    return m


# ------------------------------------------------------------------------------ weights
class AveragedWeights:
    """w = s·v with the lazily averaged Σ_t w_t (see the module docstring).

    A step is: any number of :meth:`add` (changes of w) and :meth:`scale` calls, then
    :meth:`end_step`, which counts w_t into the average.
    """

    FOLD_BELOW = 1e-8  # s below this is folded into v (projection can shrink s every step)

    def __init__(self, dim: int):
        self.v = np.zeros(dim)
        self.U = np.zeros(dim)
        self.A0: np.ndarray | None = None  # Σ w_t of the steps before the last fold
        self.s = 1.0
        self.S = 0.0  # Σ_{τ ≤ T} s_τ
        self.T = 0  # steps ended
        self.sq = 0.0  # ‖v‖²
        self.steps = 0  # steps applied (replicas use it to apply each broadcast step once)

    def add(self, batch: RecordBatch, coef: np.ndarray) -> None:
        """w += Σ_r coef[r]·φ_r (v += coef/s · φ)."""
        c = np.ascontiguousarray(coef, np.float64) / self.s
        self.sq = add_records(self.v, self.U, self.S, self.sq, batch.idx, batch.val, batch.ptr,
                              c)

    def scale(self, a: float) -> None:
        """w *= a (a > 0)."""
        self.s *= a
        if self.s < self.FOLD_BELOW:
            self.fold()

    def fold(self) -> None:
        """Fold s into v (s = 1), moving the average's sum so far into ``A0``: O(d), needed
        only when s underflows (Pegasos with a projection that binds at every step)."""
        if self.T:
            part = self.S * self.v - self.U
            self.A0 = part if self.A0 is None else self.A0 + part
        self.v *= self.s
        self.sq *= self.s * self.s
        self.s, self.S = 1.0, 0.0
        self.U[:] = 0.0

    def restart_average(self) -> None:
        """Forget the steps so far in the average (it then covers only later steps)."""
        self.A0 = None
        self.U[:] = 0.0
        self.S, self.T = 0.0, 0

    def end_step(self) -> None:
        self.T += 1
        self.S += self.s

    @property
    def norm(self) -> float:
        return self.s * float(np.sqrt(max(self.sq, 0.0)))

    def refresh_norm(self) -> None:
        """Recompute ‖v‖² exactly (the running value drifts by rounding)."""
        self.sq = dot(self.v, self.v)

    def current(self) -> np.ndarray:
        """w (a view of v when s = 1)."""
        return self.v if self.s == 1.0 else self.s * self.v

    def average(self) -> np.ndarray:
        """(1/T) Σ_{t ≤ T} w_t = (S·v − U)/T (w itself before any step)."""
        if self.T == 0:
            return self.current().copy()
        total = self.S * self.v - self.U
        if self.A0 is not None:
            total += self.A0
        return total / self.T

    def output(self, averaged: bool) -> np.ndarray:
        return self.average() if averaged else self.current().copy()


class AdaGradWeights:
    """AdaGrad state of Algorithm 1: w (lazily up to date), q = δ + Σ g², u (last step each
    weight is up to date with), n (steps so far). ``l1``: L1 instead of L2 regularisation,
    ``C``: its per-step strength, ``eta``: the learning rate η."""

    def __init__(self, dim: int, eta: float, C: float, l1: bool = False, delta: float = 1e-6):
        self.w = np.zeros(dim)
        self.q = np.full(dim, float(delta))
        self.u = np.zeros(dim, np.int64)
        self.n = 0
        self.eta, self.C, self.l1 = float(eta), float(C), bool(l1)
        self._gbuf = np.zeros(dim)
        self._stamp = np.zeros(dim, np.int64)
        self.steps = 0

    def catch_up(self, starts: np.ndarray, lens: np.ndarray) -> None:
        """Bring the given blocks of w up to step n."""
        adagrad_catch_up(self.w, self.q, self.u, self.n, np.ascontiguousarray(starts, np.int64),
                         np.ascontiguousarray(lens, np.int64), self.eta, self.C, self.l1)

    def materialize(self) -> np.ndarray:
        """A copy of w with every weight up to step n (the state is not changed, so replicas
        stay identical)."""
        out = np.empty_like(self.w)
        adagrad_materialize(self.w, self.q, self.u, self.n, self.eta, self.C, self.l1, out)
        return out

    def step(self, batch: RecordBatch, use: np.ndarray) -> int:
        """One step with the subgradient of the records selected by ``use``."""
        self.n += 1
        return int(adagrad_step(self.w, self.q, self.u, self.n, self._gbuf, self._stamp,
                                batch.idx, batch.val, batch.ptr,
                                np.ascontiguousarray(use, np.bool_), self.eta, self.C, self.l1))


# ------------------------------------------------------------------------------ batches
def in_order(batch: RecordBatch, examples: np.ndarray) -> RecordBatch:
    """The records of ``batch`` sorted by the position of their example in ``examples``
    (distinct examples), so every process sees one canonical batch."""
    if len(batch) <= 1:
        return batch
    pos = np.empty(int(examples.max()) + 1, np.int64)
    pos[examples] = np.arange(examples.shape[0])
    return batch.take(np.argsort(pos[batch.ex], kind="stable"))


def concat(parts: list[RecordBatch]) -> RecordBatch:
    parts = [b for b in parts if len(b)]
    if not parts:
        return RecordBatch.empty()
    if len(parts) == 1:
        return parts[0]
    off = np.cumsum([0] + [int(b.ptr[-1]) for b in parts[:-1]])
    return RecordBatch(*(np.concatenate([getattr(b, k) for b in parts])
                         for k in ("ex", "hash", "delta", "margin")),
                       np.concatenate([parts[0].ptr[:1]] + [b.ptr[1:] + o for b, o in
                                                             zip(parts, off, strict=True)]),
                       np.concatenate([b.idx for b in parts]),
                       np.concatenate([b.val for b in parts]))


BROADCAST_WORDS = 1 << 21  # φ words of one step's records the broadcast arrays hold


class BatchInference:
    """Mini-batch inference on this process and ``threads − 1`` workers with replicated weights.

    ``infer(task, examples) → RecordBatch`` runs on the current weights (this process's, or a
    worker's replica); ``apply(batch)`` applies one step to the weights from the batch's records
    and must be deterministic. Use: ``records = bi.infer_batch(examples)``, then
    ``bi.step(records)`` (applies the step here and broadcasts it to the replicas).
    With ``threads == 1`` no worker starts and both calls run here. The workers run a
    ``"replica"`` job (:data:`~demidcd.parallel.worker.ReplicaJob`) on the shared-memory
    transport: the batch, the slices and the broadcast step are its shared ``inputs``, and its
    records come back through the worker's ring.
    """

    def __init__(self, task: Task, threads: int, weights: Any,
                 infer: Callable[[Task, np.ndarray], RecordBatch],
                 apply: Callable[[RecordBatch], None], max_batch: int, seed: int = 0,
                 log: Callable[[str], None] | None = None, debug: bool = False,
                 ring_words: int = RING_WORDS, backend: str = "shm"):
        self.task, self.threads, self.weights = task, int(threads), weights
        self._infer, self._apply = infer, apply
        self.pool: Any = None
        self.wait_seconds = 0.0
        self.own_inferences = 0
        # share of a batch the workers infer: starts at (p − 1)/p and follows their measured
        # throughput, wake-up latency included (on a loaded machine a sleeping worker wakes
        # milliseconds late at every step, and this process then infers more of each batch)
        self.worker_share = (self.threads - 1) / self.threads if self.threads > 1 else 0.0
        if self.threads <= 1:
            return
        if backend != "shm":
            raise OptionError("pegasos and adagrad infer their mini-batches on replicated "
                              "weights in shared memory: use --backend shm (or --threads 1)")
        from ..parallel.transport import make_transport
        from ..parallel.worker import WorkerSpec

        k = self.threads - 1
        cap = BROADCAST_WORDS
        nrec = max(int(max_batch), 1)

        def job(task: Task, a: dict[str, np.ndarray], j: int, stopped: Callable[[], bool]
                ) -> tuple[RecordBatch, int]:
            """Apply the broadcast step to this replica, then infer slice j of the batch."""
            step_id = int(a["bc_meta"][0])
            if step_id == weights.steps + 1:  # apply the broadcast step on this replica
                nr, nnz = int(a["bc_meta"][1]), int(a["bc_meta"][2])
                b = RecordBatch(a["bc_ex"][:nr].copy(), np.zeros(nr, np.int64),
                                a["bc_delta"][:nr].copy(), a["bc_margin"][:nr].copy(),
                                a["bc_ptr"][:nr + 1].copy(), a["bc_idx"][:nnz].copy(),
                                a["bc_val"][:nnz].copy())
                apply(b)
            elif step_id > weights.steps + 1:
                raise RuntimeError(f"replica at step {weights.steps} missed steps up to "
                                   f"{step_id}")
            lo, hi = int(a["slices"][j]), int(a["slices"][j + 1])
            if hi <= lo:
                return RecordBatch.empty(), 0
            return infer(task, a["batch"][lo:hi].copy()), hi - lo

        spec = WorkerSpec("replica", 1.0, seed=seed, job=job, inputs={
            "batch": ((nrec,), np.int64), "slices": ((k + 1,), np.int64),
            "bc_meta": ((3,), np.int64), "bc_ex": ((nrec,), np.int64),
            "bc_delta": ((nrec,), np.float64), "bc_margin": ((nrec,), np.float64),
            "bc_ptr": ((nrec + 1,), np.int64), "bc_idx": ((cap,), INDEX_DTYPE),
            "bc_val": ((cap,), np.float64)})
        self.pool = make_transport(backend, task, k, spec, log=log, debug=debug,
                                   ring_words=ring_words)
        self._max_batch = nrec

    @property
    def monitor(self):
        return None if self.pool is None else self.pool.monitor

    def start(self, expired: Callable[[], bool] | None = None) -> None:
        """Start the workers (``expired``: the learner's clock, see
        :meth:`~demidcd.parallel.transport.Transport.start`)."""
        if self.pool is not None:
            self.pool.start(expired=expired)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def inferences(self) -> int:
        w = 0 if self.pool is None else int(self.pool.totals()["inferences"])
        return w + self.own_inferences

    def infer_batch(self, examples: np.ndarray) -> RecordBatch:
        """Records of ``examples`` (distinct) in batch order, this process inferring the first
        part (see :attr:`worker_share`) and the workers equal parts of the rest."""
        examples = np.ascontiguousarray(examples, np.int64)
        pool = self.pool
        if pool is None or pool.stop_requested():  # none, or stopped while they started
            self.own_inferences += len(examples)
            return self._infer(self.task, examples)
        if len(examples) > self._max_batch:
            raise DemidcdError(f"batch of {len(examples)} exceeds {self._max_batch}")
        p, nb = self.threads, len(examples)
        m = nb - int(round(self.worker_share * nb))  # this process's share
        cuts = np.concatenate([[0], m + np.linspace(0, nb - m, p).astype(np.int64)])
        a = pool.inputs
        a["batch"][:len(examples) - m] = examples[m:]
        a["slices"][:] = cuts[1:] - m
        gen = pool.command()
        t0 = time.perf_counter()
        own = self._infer(self.task, examples[:m]) if m else None
        self.own_inferences += m
        parts = [] if own is None else [own]
        t = time.perf_counter()
        while not pool.done(gen):
            parts.append(pool.drain())
            pool.check()
            if not pool.done(gen):
                time.sleep(0.0001)
        while True:  # done: every record is in the rings (a drain takes a bounded number)
            last = pool.drain()
            if not len(last):
                break
            parts.append(last)
        t1 = time.perf_counter()
        self.wait_seconds += t1 - t
        self._rebalance(m, nb - m, t - t0, t1 - t0)
        return in_order(concat(parts), examples)

    def _rebalance(self, mine: int, theirs: int, my_seconds: float, their_seconds: float
                   ) -> None:
        """Move the workers' share towards equal finishing times: rates mine/my_seconds and
        theirs/their_seconds (from the command to the last record), smoothed over steps."""
        if mine <= 0 or my_seconds <= 0 or their_seconds <= 0:
            target = min(self.worker_share + 0.05, (self.threads - 1) / self.threads)
        else:
            r_me, r_them = mine / my_seconds, max(theirs, 1) / their_seconds
            target = r_them / (r_me + r_them)
        self.worker_share = 0.9 * self.worker_share + 0.1 * target

    def step(self, batch: RecordBatch) -> None:
        """Apply one step here, then broadcast its records to the replicas."""
        self._apply(batch)
        if self.pool is None:
            return
        a = self.pool.inputs
        nr, nnz = len(batch), int(batch.ptr[-1])
        if nr > self._max_batch or nnz > a["bc_idx"].shape[0]:
            raise DemidcdError(f"one step's records ({nr} records, {nnz:,} words) exceed the "
                               "broadcast buffer; use a smaller --batch-size")
        a["bc_ex"][:nr] = batch.ex
        a["bc_delta"][:nr] = batch.delta
        a["bc_margin"][:nr] = batch.margin
        a["bc_ptr"][:nr + 1] = batch.ptr
        a["bc_idx"][:nnz] = batch.idx
        a["bc_val"][:nnz] = batch.val
        a["bc_meta"][1], a["bc_meta"][2] = nr, nnz
        a["bc_meta"][0] = self.weights.steps  # last: the step id the replicas check
