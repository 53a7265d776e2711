"""``crf`` with ``crf_method="sdca"``: stochastic dual coordinate ascent on CRFsuite's objective
(Le Priol, Piché and Lacoste-Julien, UAI 2018; prox-SDCA for c1 > 0), multi-core the DEMI-DCD
way, in one process on threads.

The dual, its variables (the examples' chain marginals) and the step of one example are the
chain task's (:mod:`demidcd.tasks.chain.crf_dual`); this module runs them:

- ``threads − 1`` worker threads take batches of :data:`BATCH` examples and compute their
  proposals (forward-backward under the shared w, the direction, the line search against the
  shared v as they read it) into batch buffers allocated once; a queue hands each filled
  buffer (one Python object per batch) to the learner;
- the learner thread applies the batches as they come (the update re-reads v, so a stale
  proposal still increases the dual, and searches again where staleness cut its step), and
  proposes :data:`OWN_BATCH` examples itself when no batch waits; with ``threads = 1`` it alone
  runs the same loop. No barrier: the workers read w while the learner writes it (the kernels
  release the GIL).

The examples come in epochs of n draws: the first a random permutation, then (``sampling``
``"gap"``, the default) drawn with probability ½/n + ½ g_i/Σg, g_i the gap estimate
KL(μ_i ‖ p_w) of example i's last proposal (Le Priol et al.'s gap sampling, mixed with the
uniform), or (``"uniform"``) a random permutation each.

An epoch is n applied examples. After each, the log gets the sum of the proposals' gap
estimates KL(μ_i ‖ p_w) (w as each proposal read it: free, not certified) and, after the first
epoch, after an epoch whose estimate came within :data:`ESTIMATE_SLACK` times the stopping
target, after epoch ``max_iterations``, or with ``eval_every`` at most every that many
seconds, the certified figures: the workers park, the queue is drained, and P(w) (one
forward-backward pass) and D(μ) (one entropy pass) are computed on all threads (v and w
recomputed from μ first, :meth:`SdcaRun.evaluate`); the gap P − D = Σ_i KL(μ_i ‖ p_w) ≥ 0.
Stopping: (P − D)/P ≤ ``epsilon``, ``max_iterations`` epochs, or the time limit (the current
w).
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import OptionError
from ..tasks.base import Task
from .common import Callback, OuterLoop, SolverConfig, StopRule, TrainResult, stop_reason
from .recorder import Recorder, Tick

BATCH = 8  # examples per proposal batch of a worker thread: one queue item, one kernel call
# (larger batches go staler: more epochs to the same gap, benchmarks/README.md "The CRF learner")
OWN_BATCH = 4  # examples per batch the learner proposes itself (it applies them at once: the
# fewer, the fewer proposals a previous one of the same batch made stale)
SAMPLING = "gap"  # the order of the examples: "uniform" permutations or "gap" sampling
BUFFERS_PER_WORKER = 2  # batch buffers in flight per worker thread (bounds the queue)
ESTIMATE_SLACK = 10.0  # without eval_every: certify once the epoch's gap estimate is within
# this factor of the target (the certificate costs a forward-backward and an entropy pass)
INIT = "gold"  # μ_i at the start: the gold point mass (v = 0, w = 0); "uniform" starts at
# w = ∇g*(Φ* − E_uniform Φ), far out when c2 is small (benchmarks/README.md, "The CRF learner")


def token_shards(sent_ptr: np.ndarray, parts: int,
                 examples: np.ndarray | None = None) -> list[np.ndarray]:
    """The example indices (``examples``, in order; default all) cut into ``parts``
    consecutive runs of about equal token counts (empty runs dropped)."""
    if examples is not None:
        ex = np.asarray(examples, np.int64)
        tok = np.concatenate([[0], np.cumsum(np.diff(sent_ptr)[ex])])
        cuts = np.searchsorted(tok, np.linspace(0, tok[-1], parts + 1)[1:-1])
        bounds = [0, *np.clip(cuts, 0, ex.shape[0]).tolist(), ex.shape[0]]
        return [ex[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    n = sent_ptr.shape[0] - 1
    cuts = np.searchsorted(sent_ptr, np.linspace(0, sent_ptr[-1], parts + 1)[1:-1])
    bounds = [0, *np.clip(cuts, 0, n).tolist(), n]
    return [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:],
                                                             strict=True) if b > a]


class _Feeder:
    """Batches of ``examples`` in a fresh order per epoch, handed out under a lock to
    whichever thread asks: a random permutation, or with ``gaps`` (per example id, the last
    gap estimate KL(μ_i ‖ p_w) of its proposal; all 0: unknown) n draws with probability
    ½/n + ½ g_i / Σ g (Le Priol et al.'s gap sampling, mixed with the uniform)."""

    def __init__(self, examples: np.ndarray, size: int, seed: int,
                 gaps: np.ndarray | None = None):
        self.examples, self.size, self.gaps = examples, size, gaps
        self.rng = np.random.default_rng(seed)
        self.lock = threading.Lock()
        self.perm = examples[:0]
        self.pos = 0

    def _order(self) -> np.ndarray:
        n = self.examples.shape[0]
        if self.gaps is not None:
            g = np.maximum(self.gaps[self.examples], 0.0)
            total = float(g.sum())
            if total > 0.0 and math.isfinite(total):
                p = 0.5 / n + 0.5 * g / total
                return self.examples[self.rng.choice(n, n, p=p / p.sum())]
        return self.rng.permutation(self.examples)

    def next(self, size: int | None = None) -> np.ndarray:
        """The next ``size`` (default: the feeder's) examples of the current permutation."""
        size = self.size if size is None else size
        with self.lock:
            if self.pos >= self.perm.shape[0]:
                self.perm = self._order()
                self.pos = 0
            b = self.perm[self.pos:self.pos + size]
            self.pos += size
            return b


class SdcaRun:
    """The threads of one SDCA run over a :class:`~demidcd.tasks.chain.crf_dual.ChainDual`
    (module docstring). :meth:`step` applies one batch on the calling (learner) thread,
    :meth:`quiesce` parks the workers and drains the queue, :meth:`evaluate` gives (P, D) on
    all threads, :meth:`close` ends the workers."""

    def __init__(self, dual, threads: int, seed: int, sampling: str = "uniform"):
        self.dual = dual
        self.gaps = np.zeros(dual.task.n_examples) if sampling == "gap" else None
        self.feeder = _Feeder(dual.examples, dual.batch, seed, self.gaps)
        self.ws = dual.workspace()
        self.own = dual.new_batch()
        self.stats = np.zeros(5)  # updates, dropped, dual increase, gap estimates, searched again
        self.n_workers = max(0, int(threads) - 1)
        self.free: queue.Queue = queue.Queue()
        self.ready: queue.Queue = queue.Queue()
        for _ in range(BUFFERS_PER_WORKER * self.n_workers):
            self.free.put(dual.new_batch())
        self.gate = threading.Event()
        self.gate.set()
        self.stop = False
        self.parked = 0
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self.threads = [threading.Thread(target=self._work, daemon=True, name=f"sdca-{k}")
                        for k in range(self.n_workers)]
        self.pool = ThreadPoolExecutor(int(threads)) if threads > 1 else None
        for t in self.threads:
            t.start()

    def _work(self) -> None:
        ws = self.dual.workspace()
        try:
            while not self.stop:
                if not self.gate.is_set():
                    with self.lock:
                        self.parked += 1
                    self.gate.wait()
                    with self.lock:
                        self.parked -= 1
                    continue
                try:
                    B = self.free.get(timeout=0.05)
                except queue.Empty:
                    continue
                ex = self.feeder.next()
                self.dual.propose(ex, B, ws)
                self.ready.put((B, ex.shape[0]))
        except BaseException as e:  # noqa: BLE001 (reported by the learner thread)
            self.error = e
            self.ready.put((None, 0))

    def _apply(self, B, count: int) -> int:
        if B is None:
            raise RuntimeError(f"an SDCA worker thread failed: {self.error!r}") from self.error
        self.dual.apply(B, count, self.stats, self.ws)
        if self.gaps is not None:
            self.gaps[B.ex[:count]] = B.gap[:count]
        if B is not self.own:
            self.free.put(B)
        return count

    def step(self) -> int:
        """Apply one batch (a worker's, or one computed here when none waits); returns its
        examples."""
        try:
            B, count = self.ready.get_nowait()
        except queue.Empty:
            ex = self.feeder.next(min(OWN_BATCH, self.dual.batch))
            self.dual.propose(ex, self.own, self.ws)
            B, count = self.own, ex.shape[0]
        return self._apply(B, count)

    def quiesce(self) -> int:
        """Park the workers and apply every batch they filled; returns the examples applied."""
        self.gate.clear()
        done = 0
        while True:
            with self.lock:
                parked = self.parked
            try:
                B, count = self.ready.get(timeout=0.01)
                done += self._apply(B, count)
                continue
            except queue.Empty:
                pass
            if parked >= self.n_workers:
                return done

    def resume(self) -> None:
        self.gate.set()

    def _map(self, fn: Callable[[np.ndarray], float]) -> float:
        if self.pool is None:
            return fn(self.dual.examples)
        parts = token_shards(self.dual.task.sent_ptr, self.n_workers + 1,
                             self.dual.examples)
        return float(sum(self.pool.map(fn, parts)))

    def evaluate(self) -> tuple[float, float]:
        """(P(w), D(μ)) on all threads (call between :meth:`quiesce` and :meth:`resume`),
        v and w first recomputed from the stored μ (float32 marginals round each update, which
        v, updated in float64, does not see: the certificate is then exact)."""
        d = self.dual
        d.resync()
        return d.primal(self._map(d.log_partition)), d.dual(self._map(d.entropy))

    def close(self) -> None:
        self.stop = True
        self.gate.set()
        for t in self.threads:
            t.join()
        if self.pool is not None:
            self.pool.shutdown()


def check_dual_memory(task: Task, dual_dtype: type = np.float32) -> None:
    """Refuse, in one line and before allocating anything, dual marginals that would not fit
    in the available memory: a unary marginal (K values) per token and a pairwise one (K²)
    per token after a sentence's first, (n_tok·K + n_pairs·K²)·itemsize bytes (5,000 labels:
    about 100 MB per token)."""
    import psutil

    from ..errors import DemidcdError

    n_tok = int(task.sent_ptr[-1])
    n_pairs = n_tok - int(task.sent_ptr.shape[0] - 1)
    K = int(task.K)
    need = (n_tok * K + max(n_pairs, 0) * K * K) * np.dtype(dual_dtype).itemsize
    avail = psutil.virtual_memory().available
    if need > avail:
        raise DemidcdError(f"--crf-method sdca needs {need / 2**30:,.1f} GiB for its dual "
                           f"marginals ({K:,} labels: (K + K²)·{np.dtype(dual_dtype).itemsize} "
                           f"bytes per token, {n_tok:,} tokens) but {avail / 2**30:,.1f} GiB "
                           "is available; use --crf-method lbfgs (memory linear in the "
                           "weights)")


def train_crf_sdca(task: Task, config: SolverConfig, threads: int = 1,
                   callback: Callback | None = None, cpu_log: str | None = None,
                   log: Callable[[str], None] | None = None, tick: Tick | None = None,
                   c1: float = 0.0, c2: float = 1.0, max_iterations: int | None = None,
                   epsilon: float = 1e-5, dual_dtype: type = np.float32,
                   init: str = INIT, batch: int = BATCH, sampling: str = SAMPLING,
                   frozen: np.ndarray | None = None) -> TrainResult:
    """CRF by SDCA (module docstring); one record per epoch (``objective``: P(w) when
    evaluated, ``primal``/``dual``/``gap`` then too, ``gap_estimate``: the proposals' KL sum,
    ``dropped``: proposals whose μ_i had changed). ``dual_dtype``: how μ is stored;
    ``frozen``: transition weights held at 0 (:meth:`ChainDual.freeze`)."""
    from ..tasks.chain.crf_dual import ChainDual

    if c2 <= 0.0:
        raise OptionError("--crf-method sdca needs --c2 > 0 (its dual is that of the L2 term); "
                          "use --crf-method lbfgs for c2 = 0")
    check_dual_memory(task, dual_dtype)
    dual = ChainDual(task, c1, c2, dual_dtype, init, batch)
    if frozen is not None and frozen.size:
        dual.freeze(frozen)
    n = int(dual.examples.shape[0])
    rec = Recorder(task, config, callback, threads, objective_fn=None, tick=tick)
    if log is not None:
        log(f"crf sdca: {n:,} examples, dual marginals {dual.nbytes / 2**20:,.1f} MiB "
            f"({dual.bytes_per_token():,.0f} bytes per token, {np.dtype(dual_dtype).name}), "
            f"{max(0, threads - 1)} proposal thread{'s' * (threads != 2)} + the learner")
    clock = rec.start()
    run = SdcaRun(dual, threads, config.seed, sampling)
    epoch, applied, reason, last_eval = 0, 0, "max-epochs", -math.inf
    P = D = None
    try:
        with OuterLoop(task, clock) as loop:
            while n > 0:
                applied += run.step()
                expired = rec.poll(lambda: dual.w)
                if applied < n * (epoch + 1) and not expired:
                    continue
                if expired:  # the clock ran out, or a stop was asked for (Ctrl-C, SIGTERM)
                    reason = stop_reason(False, clock) or "time-limit"
                    break
                epoch += 1
                st = run.stats.copy()
                r = {"epoch": epoch, "updates": int(st[0]), "dropped": int(st[1]),
                     "searched_again": int(st[4]),
                     "gap_estimate": float(st[3]), "active": int(np.count_nonzero(dual.w))}
                run.stats[3] = 0.0
                if config.eval_every is not None:
                    due = rec.elapsed() - last_eval >= config.eval_every
                else:  # the first epoch, then once the free estimate nears the target
                    due = P is None or r["gap_estimate"] <= ESTIMATE_SLACK * epsilon * abs(P)
                due = due or (max_iterations is not None and epoch >= max_iterations)
                if due:
                    applied += run.quiesce()
                    P, D = run.evaluate()
                    run.resume()
                    last_eval = rec.elapsed()
                    gap = P - D
                    r.update(objective=P, primal=P, dual=D, gap=gap,
                             rel_gap=gap / max(abs(P), 1e-300))
                rec.epoch(r, dual.w)
                converged = P is not None and due and math.isfinite(P - D) and \
                    (P - D) <= epsilon * max(abs(P), 1e-300)
                if converged:
                    reason = "converged"
                    break
                if max_iterations is not None and epoch >= max_iterations:
                    reason = "max-epochs"
                    break
                if loop.stop(False):
                    reason = loop.reason
                    break
            else:
                reason = "converged"
        if loop.reason == "interrupted":
            reason = "interrupted"
    finally:
        run.close()
    w = dual.w.copy()
    if reason in ("time-limit", "interrupted"):  # w moved since the last evaluation
        P = D = None
    rel = rec.history[-1].get("rel_gap") if P is not None and rec.history else None
    return rec.finish(w, reason, epoch, dual=D, cpu_log=cpu_log, objective=P,
                      stop_rule=StopRule("relative duality gap", rel, "epsilon", epsilon,
                                         "max_iterations"),
                      dual_bytes=dual.nbytes, dual_bytes_per_token=dual.bytes_per_token(),
                      updates=int(run.stats[0]), dropped=int(run.stats[1]))
