"""The warm start of the L-BFGS CRF (:mod:`.crf`): a few epochs of stochastic gradient descent
on the same objective, Hogwild on the ``threads`` threads, before the first L-BFGS step.

Agarwal, Chapelle, Dudík and Langford (JMLR 2014, "A reliable effective terascale linear
learning system", §3.2) start L-BFGS from one online pass: stochastic steps get the weights
to the right scale in a few passes, where L-BFGS from w = 0 spends its first tens of
iterations (one pass over the data each) on it. Per sentence i (N of them) the step is

    w_j ← w_j − η_e (∂_j[−log p(y_i | x_i)] + (2 c2 / N) w_j)

on the coordinates the sentence touches (its features' seen labels, the transitions, its B
features): the L2 term of CRFsuite's objective (Σ_i −log p + c1‖w‖₁ + c2‖w‖², :mod:`.crf`)
shared among the sentences and applied lazily, as sparse SGD does; the L1 term is left to
OWL-QN (zeroing weights is what its orthant projection does). η_e = η₀ / (1 + e) in epoch e.
The threads each take a run of a fresh random order and update the shared w without locks
(Niu et al., NIPS 2011: a lost update on the transitions every sentence touches costs a
little progress, never correctness: L-BFGS afterwards minimises the exact objective from
wherever this ends).

η₀ is calibrated on a sample, as Bottou's SGD and CRFsuite's ``l2sgd`` calibrate theirs:
each candidate of :data:`CANDIDATES` runs one pass over the same sample of :data:`SAMPLE`
sentences (at most a quarter of the corpus: on a small one six passes over all of it cost more
than the epochs that follow) from w = 0, and the one with the least progressive loss (each
sentence's −log p before its own step, plus the sample's share of the L2 term at the end; no
second pass) wins;
the candidates run on the threads at once. (On CoNLL-2002 Spanish it chooses 0.003, whose three
full epochs end 19 % above those at 0.01, yet L-BFGS from either is within 0.5 % of the other
by its 50th iteration: benchmarks/README.md, "The CRF's warm start".)
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from ..primitives.vectors import dot
from ..tasks.chain.marginals import block_offsets, gradient_workspace, nll_gradient_into

CANDIDATES = (0.3, 0.1, 0.03, 0.01, 0.003, 0.001)  # η₀ tried by the calibration
SAMPLE = 1000  # sentences the calibration passes over, at most …
SAMPLE_SHARE = 4  # … and at most 1/this of the corpus (6 candidates: 1.5 epochs' work)
SAMPLE_MIN = 100  # (but this many, or all)


@njit(cache=True, nogil=True)
def sgd_run(w, g, F, K, X, gold, part, order, eta, lam, frozen, ctl):
    """One SGD step per sentence of ``order`` on w (module docstring), the gradient of each
    built in ``g`` (zero on entry, zero again on return: only the touched entries are written
    and cleared). Returns Σ −log p(y_i | x_i) at the weights each sentence saw (+inf when one
    is not finite: the steps diverged); ``part``: the partial labels
    (:class:`~demidcd.tasks.chain.partial.PartialLabels`, empty: none). ``ctl`` as
    :func:`.nll_gradient_kernel`'s: ctl[0] ≠ 0 stops the run before its next sentence, ctl[1]
    counts the sentences done."""
    _, KK, tbase, bbase = block_offsets(F, K)
    seen = X.u_off.shape[0] > 0
    has_b = X.bfeat_ptr.shape[0] > 0
    ws = gradient_workspace(F, K, X, order)  # (once: K² arrays per sentence would dominate)
    loss = 0.0
    for e in range(order.shape[0]):
        if ctl[0] != 0:
            break
        i = order[e:e + 1]
        nll = nll_gradient_into(w, F, K, X, gold, part, i, g, ctl, ws)
        if not math.isfinite(nll):
            loss = math.inf
        else:
            loss += nll
        a, b = X.sent_ptr[i[0]], X.sent_ptr[i[0] + 1]
        for q in range(X.feat_ptr[a], X.feat_ptr[b]):
            f = X.feat_idx[q]
            if seen:
                lo, hi = np.int64(X.u_off[f]), np.int64(X.u_off[f + 1])
            else:
                lo, hi = np.int64(f) * K, np.int64(f) * K + K
            for j in range(lo, hi):
                if g[j] != 0.0:  # (a feature twice in the sentence: stepped once)
                    w[j] -= eta * (g[j] + lam * w[j])
                    g[j] = 0.0
        if has_b:
            for q in range(X.bfeat_ptr[a], X.bfeat_ptr[b]):
                base = bbase + np.int64(X.bfeat_idx[q]) * KK
                for j in range(base, base + KK):
                    if g[j] != 0.0:
                        w[j] -= eta * (g[j] + lam * w[j])
                        g[j] = 0.0
        for j in range(tbase, bbase):
            w[j] -= eta * (g[j] + lam * w[j])
            g[j] = 0.0
        for j in frozen:
            w[j] = 0.0
    return loss


def _split(order: np.ndarray, parts: int) -> list[np.ndarray]:
    return [r for r in np.array_split(order, parts) if r.size]


def _kernel_args(obj: Any) -> tuple:
    """(F, K, X, gold, part, frozen) of the objective's task (``obj``: a
    :class:`.crf.CrfObjective`, untyped here: crf imports this module) in the seen-pairs
    layout of w."""
    task = obj.task
    return task.u_rows, task.K, task.chain, task.Y, obj.part, obj.frozen


def calibrate(obj: Any, rng: np.random.Generator) -> tuple[float, np.ndarray | None]:
    """(η₀ of :data:`CANDIDATES` with the least progressive loss over one pass of a sample
    (module docstring), the candidates on the objective's threads; the weights of the
    candidate with the least progressive loss per sentence done, or None when none did one).
    The weights matter when a stop cut the pass short (``obj.halted``): they are an SGD
    iterate all the same, the best the run has."""
    F, K, X, gold, part, frozen = _kernel_args(obj)
    dim, n_examples = obj.task.dim, obj.task.n_examples
    size = min(SAMPLE, max(SAMPLE_MIN, n_examples // SAMPLE_SHARE))
    sample = rng.permutation(n_examples)[:size].astype(np.int64)
    lam = 2.0 * obj.c2 / n_examples
    share = obj.c2 * sample.shape[0] / n_examples
    best: dict[str, Any] = {"mean": math.inf, "w": None}
    lock = threading.Lock()

    def job(eta: float) -> Callable[[int], float]:
        def run(t: int) -> float:
            w, g = np.zeros(dim), np.zeros(dim)
            before = int(obj.ctl[t, 1])
            loss = sgd_run(w, g, F, K, X, gold, part, sample, eta, lam, frozen, obj.ctl[t])
            done = int(obj.ctl[t, 1]) - before
            if math.isfinite(loss) and done > 0 and np.isfinite(w).all():
                with lock:
                    if loss / done < best["mean"]:
                        best.update(mean=loss / done, w=w)
            return loss + share * dot(w, w) if math.isfinite(loss) else math.inf
        return run

    losses = obj.run_jobs([job(eta) for eta in CANDIDATES])
    return CANDIDATES[int(np.argmin(losses))], best["w"]


def sgd_epochs(obj: Any, w: np.ndarray, epochs: int, seed: int = 0,
               should_stop: Callable[[], bool] | None = None) -> tuple[float, int]:
    """``epochs`` Hogwild SGD epochs on w in place (module docstring) for the objective ``obj``
    (its task, c2, frozen weights and threads; thread t builds its gradients in
    ``obj.buffers[t, :len(w)]``, zero on entry and on return), η₀ calibrated first. Returns
    (η₀, the epochs run): fewer when ``should_stop()`` says so between epochs or a stop was
    asked while one ran (``obj.halted``: the kernels stop between sentences; w is left as the
    steps done made it, or as the best candidate of a calibration cut short left its own), and
    w is put back to 0 when the steps diverged."""
    F, K, X, gold, part, frozen = _kernel_args(obj)
    n_examples = obj.task.n_examples
    rng = np.random.default_rng(seed)
    eta0, partial = calibrate(obj, rng)
    if obj.halted:  # a stop during the calibration: its best candidate's weights, if any
        if partial is not None:
            w[:] = partial
        return eta0, 0
    lam = 2.0 * obj.c2 / n_examples
    done = 0
    for e in range(epochs):
        if obj.halted or (should_stop is not None and should_stop()):
            break
        eta = eta0 / (1.0 + e)
        runs = _split(rng.permutation(n_examples).astype(np.int64), obj.threads)

        def job(r: np.ndarray, eta: float) -> Callable[[int], float]:
            return lambda t: sgd_run(w, obj.buffers[t, :w.shape[0]], F, K, X, gold, part, r, eta,
                                      lam, frozen, obj.ctl[t])

        losses = obj.run_jobs([job(r, eta) for r in runs])
        if not (all(math.isfinite(x) for x in losses) and np.isfinite(w).all()):
            w[:] = 0.0  # diverged: L-BFGS starts from 0 as without a warm start
            break
        if obj.halted:
            break
        done += 1
    return eta0, done
