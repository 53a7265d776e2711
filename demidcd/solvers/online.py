"""The primal online learners of the seed papers, over the same task interface, inference,
recorder and CPU monitor as the DCD family:

* ``perceptron`` — the averaged structured perceptron (Collins 2002): for each example,
  ŷ = argmax_y w·Φ(x_i, y); if ŷ ≠ y_i, w += φ = Φ(x_i, y_i) − Φ(x_i, ŷ). Output: the average
  of w over all example visits (lazy, :class:`~.linear.AveragedWeights`).
* ``mira`` — 1-best MIRA (Crammer et al. 2005; PA-I): ŷ by loss-augmented inference (Eq. 5),
  w += τ φ with τ = min(C, (Δ − w·φ)/‖φ‖²) when Δ − w·φ > 0; averaged.
* ``pegasos`` — structured Pegasos (Algorithm 2 of "Pegasos for dependency parsing"): a
  mini-batch A_t of k examples, ŷ_i by loss-augmented inference, η_t = 1/(λt),
  w ← (1 − η_t λ) w + (η_t/k) Σ_{A_t} φ_i, optional projection onto ‖w‖ ≤ 1/√λ, averaged output
  over a suffix of the steps: the average restarts at epochs 2, 4, 8, …, so it covers at least
  the last half of the epochs (the first steps, with η_t = 1/(λt) largest, would otherwise
  dominate it for long).
  It minimises λ/2‖w‖² + (1/n) Σ_i max_y [Δ − w·φ], the L1-loss SSVM ½‖w‖² + C Σ ξ_i with
  λ = 1/(C n) (the default).
* ``adagrad`` — the online primal subgradient method with AdaGrad (Algorithm 1 of Kummerfeld et
  al. 2015), sparse lazy updates, L2 or L1: per mini-batch of k examples, g = −Σ φ_i over the
  loss-augmented ŷ_i, q += g², and the proximal AdaGrad step on the features of g. Its per-step
  regulariser C_ada = k/(C n) makes the objective the same L1-loss SSVM.

Pegasos and AdaGrad split each mini-batch's inferences between this process and the p − 1
workers (:class:`~.linear.BatchInference`); the perceptron and MIRA are sequential (one
process). An *epoch* is one pass over the examples (n/k steps for the mini-batch learners).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing

import numpy as np

from ..errors import OptionError
from ..options import default
from ..primitives.ring import RING_WORDS
from ..tasks.base import RecordBatch, Task
from .common import Callback, OuterLoop, SolverConfig, TrainResult, primal_objective
from .linear import AdaGradWeights, AveragedWeights, BatchInference, record_sqnorms
from .recorder import Recorder, Tick

DEFAULT_EPOCHS = 100  # the mini-batch learners
SEQUENTIAL_EPOCHS = 30  # the perceptron and MIRA: averaged-perceptron dev accuracy peaks at
# 20-30 epochs and then falls (benchmarks/README.md, "Evidence behind the defaults")
DEFAULT_BATCH = default("batch_size")
DEFAULT_ETA = default("eta")


def compile_kernels(task: Task) -> None:
    """Compile (or load from numba's cache) the weight kernels of this module on example 0."""
    b = task.loss_augmented(np.zeros(task.dim), np.zeros(1, np.int64))
    W = AveragedWeights(task.dim)
    W.add(b, np.ones(len(b)))
    record_sqnorms(b.val, b.ptr)
    A = AdaGradWeights(task.dim, 0.1, 0.1)
    for l1 in (False, True):
        A.l1 = l1
        A.catch_up(*task.weights_read(np.zeros(1, np.int64)))
        A.step(b, np.ones(len(b), np.bool_))
        A.materialize()


def hinge_objective(task: Task, w: np.ndarray, C: float, chunk: int = 512) -> dict:
    """The L1-loss SSVM primal ½‖w‖² + C Σ_i max(0, max_y Δ(y_i, y) − w·φ(y, y_i, x_i))
    (:func:`~.common.primal_objective` with ``loss="l1"``)."""
    return {"primal": primal_objective(task, w, C, chunk, loss="l1")[0]}


def _epoch_record(epoch: int, steps: int, mistakes: int, total: int, inferences: int,
                  **extra) -> dict:
    """updates: the epoch's non-zero updates (mistakes, or margin violations); total_updates:
    all of them so far; steps: the averaging steps so far."""
    return {"epoch": epoch, "updates": mistakes, "total_updates": total, "steps": steps,
            "inferences": inferences, "mistakes": mistakes, **extra}


# ------------------------------------------------------------------------------ sequential
def _sequential(task: Task, config: SolverConfig, callback: Callback | None,
                cpu_log: str | None, averaged: bool, mira: bool,
                tick: Tick | None = None) -> TrainResult:
    """The perceptron (``mira=False``) and 1-best MIRA: one example at a time, in a fresh
    random order each epoch, w averaged over every visit."""
    n = task.n_examples
    W = AveragedWeights(task.dim)
    rng = np.random.default_rng(config.seed)
    rec = Recorder(task, config, callback,
                   objective_fn=(lambda w: hinge_objective(task, w, config.C)) if mira else None,
                   tick=tick)
    C = float(config.C)
    one = np.zeros(1, np.int64)
    coef = np.ones(1)
    epoch, updates = 0, 0
    clock = rec.start()
    with OuterLoop(task, clock) as run:
        for epoch in range(1, config.epochs(SEQUENTIAL_EPOCHS) + 1):
            mistakes = 0
            for i in rng.permutation(n):
                one[0] = i
                b = task.loss_augmented(W.v, one) if mira else task.argmax_records(W.v, one)
                if len(b):
                    if mira:
                        loss = float(b.delta[0] - b.margin[0])
                        sq = float(record_sqnorms(b.val, b.ptr)[0])
                        coef[0] = min(C, loss / sq) if loss > 0.0 and sq > 0.0 else 0.0
                    if coef[0] > 0.0:
                        W.add(b, coef)
                        mistakes += 1
                W.end_step()
                if rec.poll(lambda: W.output(averaged)):
                    break
            updates += mistakes
            rec.epoch(_epoch_record(epoch, W.T, mistakes, updates, W.T), W.output(averaged))
            if run.stop(mistakes == 0 and not clock.expired()):
                break
    return rec.finish(W.output(averaged), run.reason, epoch, cpu_log=cpu_log, updates=updates,
                      steps=W.T, inferences=W.T)


def train_perceptron(task: Task, config: SolverConfig, threads: int = 1,
                     callback: Callback | None = None, cpu_log: str | None = None,
                     averaged: bool = True, tick: Tick | None = None,
                     log: Callable[[str], None] | None = None) -> TrainResult:
    """Averaged structured perceptron (Collins 2002); ``averaged=False`` outputs the last w.
    Stops when an epoch makes no mistake ("converged")."""
    return _sequential(task, config, callback, cpu_log, averaged, mira=False, tick=tick)


def train_mira(task: Task, config: SolverConfig, threads: int = 1,
               callback: Callback | None = None, cpu_log: str | None = None,
               averaged: bool = True, tick: Tick | None = None,
               log: Callable[[str], None] | None = None) -> TrainResult:
    """1-best MIRA with loss-augmented inference and step cap C (``config.C``), averaged."""
    return _sequential(task, config, callback, cpu_log, averaged, mira=True, tick=tick)


# ------------------------------------------------------------------------------ mini-batch
def _minibatch(task: Task, config: SolverConfig, threads: int, callback: Callback | None,
               cpu_log: str | None, log: Callable[[str], None] | None, debug: bool,
               k: int, weights, infer, apply, output: Callable[[], np.ndarray],
               name: str, ring_words: int = RING_WORDS,
               on_epoch: Callable[[int], None] | None = None,
               tick: Tick | None = None, backend: str = "shm") -> TrainResult:
    """The mini-batch loop shared by Pegasos and AdaGrad: batches of exactly k distinct
    examples from consecutive random permutations, inferred by :class:`BatchInference`, then
    one ``apply`` step; an epoch every ⌈n/k⌉ steps."""
    n = task.n_examples
    k = max(1, min(int(k), n))
    rng = np.random.default_rng(config.seed)
    bi = BatchInference(task, threads, weights, infer, apply, k, config.seed, log, debug,
                        ring_words, backend)
    rec = Recorder(task, config, callback, threads, monitor=bi.monitor,
                   objective_fn=lambda w: hinge_objective(task, w, config.C), tick=tick)
    steps_per_epoch = -(-n // k)
    perm, pos = rng.permutation(n), 0

    def next_batch() -> np.ndarray:
        """The next k examples of the current permutation; at its end, its r remaining ones
        and the first k − r of a new permutation whose copies of them moved to its end."""
        nonlocal perm, pos
        if pos + k <= n:
            pos += k
            return perm[pos - k:pos]
        rest = perm[pos:]
        p2 = rng.permutation(n)
        seen = np.isin(p2, rest)
        perm = np.concatenate([p2[~seen], p2[seen]])
        pos = k - rest.shape[0]
        return np.concatenate([rest, perm[:pos]])

    epoch, updates = 0, 0
    run = OuterLoop(task)
    with closing(bi), run:  # bi closes after the loop ends
        bi.start(run.start(rec.start()).expired)  # starting the workers is on the clock
        for epoch in range(1, config.epochs(DEFAULT_EPOCHS) + 1):
            if on_epoch is not None:
                on_epoch(epoch)
            mistakes = 0
            for _ in range(steps_per_epoch):
                head = next_batch()
                b = bi.infer_batch(head)
                mistakes += int((b.delta - b.margin > 0).sum())
                bi.step(b)
                if rec.poll(output):
                    break
            updates += mistakes
            rec.epoch(_epoch_record(epoch, weights.steps, mistakes, updates, bi.inferences()),
                      output())
            if run.stop(False):
                break
    res = rec.finish(output(), run.reason, epoch, cpu_log=cpu_log, updates=updates,
                     steps=weights.steps, inferences=bi.inferences(),
                     learner_inferences=bi.own_inferences, wait_seconds=bi.wait_seconds,
                     worker_share=bi.worker_share)
    if log:
        log(f"{name}: {weights.steps:,} steps of {k} examples, {bi.inferences():,} inferences "
            f"({bi.own_inferences:,} in the learner process), {bi.wait_seconds:.2f}s waiting for "
            f"the inference workers, whose share of a batch ended at {bi.worker_share:.0%}")
    return res


def train_pegasos(task: Task, config: SolverConfig, threads: int = 1,
                  callback: Callback | None = None, cpu_log: str | None = None,
                  log: Callable[[str], None] | None = None, debug: bool = False,
                  batch_size: int = DEFAULT_BATCH, lam: float | None = None,
                  projection: bool = default("projection"), averaged: bool = True,
                  ring_words: int = RING_WORDS, tick: Tick | None = None, backend: str = "shm",
                  ray_address: str | None = None) -> TrainResult:
    """Structured Pegasos (mini-batch k = ``batch_size``, λ = ``lam`` or 1/(C n)).
    ``ray_address`` (an option the table gives Pegasos) is not read: the batch inference does
    not take it."""
    n = task.n_examples
    lam = float(lam) if lam is not None else 1.0 / (config.C * n)
    if not lam > 0:
        raise OptionError(f"--lambda must be > 0, got {lam}")
    if batch_size < 1:
        raise OptionError(f"--batch-size must be >= 1, got {batch_size}")
    k = max(1, min(int(batch_size), n))
    W = AveragedWeights(task.dim)
    radius = 1.0 / np.sqrt(lam)

    def infer(t: Task, ex: np.ndarray) -> RecordBatch:
        """argmax_y w·Φ + Δ with w = s·v: argmax v·Φ + Δ/s; margins returned for w."""
        if W.s == 1.0:
            return t.loss_augmented(W.v, ex)
        try:
            b = t.loss_scaled(W.v, ex, 1.0 / W.s)
            b.margin *= W.s
            return b
        except NotImplementedError:
            return t.loss_augmented(W.current(), ex)

    def apply(b: RecordBatch) -> None:
        t = W.steps + 1
        if t > 1:
            W.scale(1.0 - 1.0 / t)  # (1 − η_t λ)
        use = (b.delta - b.margin) > 0.0
        if use.any():
            W.add(b, use * (1.0 / (lam * t * k)))
        if projection:
            if t % 1024 == 0:
                W.refresh_norm()
            if W.norm > radius:
                W.scale(radius / W.norm)
        W.end_step()
        W.steps = t

    def on_epoch(epoch: int) -> None:
        if epoch & (epoch - 1) == 0 and epoch > 1:  # epochs 2, 4, 8, …: the average covers
            W.restart_average()  # the last half of the epochs or more (suffix averaging)

    return _minibatch(task, config, threads, callback, cpu_log, log, debug, k, W, infer, apply,
                      lambda: W.output(averaged), "Pegasos", ring_words, on_epoch, tick,
                      backend)


def train_adagrad(task: Task, config: SolverConfig, threads: int = 1,
                  callback: Callback | None = None, cpu_log: str | None = None,
                  log: Callable[[str], None] | None = None, debug: bool = False,
                  batch_size: int = DEFAULT_BATCH, eta: float = DEFAULT_ETA,
                  regularizer: str = default("regularizer"), ring_words: int = RING_WORDS,
                  tick: Tick | None = None, backend: str = "shm",
                  ray_address: str | None = None) -> TrainResult:
    """Online primal subgradient with AdaGrad (mini-batch k = ``batch_size``, learning rate
    ``eta``, ``regularizer`` "l2" or "l1" with per-step strength k/(C n)). ``ray_address``
    (an option the table gives AdaGrad) is not read: the batch inference does not take it."""
    if regularizer not in ("l1", "l2"):
        raise OptionError(f"--regularizer must be l1 or l2, got {regularizer!r}")
    if not eta > 0:
        raise OptionError(f"--eta must be > 0, got {eta}")
    if batch_size < 1:
        raise OptionError(f"--batch-size must be >= 1, got {batch_size}")
    n = task.n_examples
    k = max(1, min(int(batch_size), n))
    W = AdaGradWeights(task.dim, eta, k / (config.C * n), l1=regularizer == "l1")

    def infer(t: Task, ex: np.ndarray) -> RecordBatch:
        W.catch_up(*t.weights_read(ex))  # the weights this inference reads, up to step n
        return t.loss_augmented(W.w, ex)

    def apply(b: RecordBatch) -> None:
        W.step(b, (b.delta - b.margin) > 0.0)
        W.steps += 1

    return _minibatch(task, config, threads, callback, cpu_log, log, debug, k, W, infer, apply,
                      W.materialize, "AdaGrad", ring_words, tick=tick, backend=backend)
