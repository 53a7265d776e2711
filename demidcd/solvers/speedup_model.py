"""The speed-up model behind ``--learners auto`` (issue 53, "every loss explained").

A run of p processes reaches a gap p·R/I times sooner than 1-DCD on one process, where R is
the per-process throughput (updates + inferences per second against a lone 1-DCD process) and
I the work inflation (updates + inferences to the gap against 1-DCD's); the benchmarks measure
both (``benchmarks/inflation.py``, ``benchmarks/scaling.py``). ``auto`` compares the two
layouts on p processes with that decomposition, before training, from two figures measured on
the task (t_inf, seconds per loss-augmented inference; t_pass, seconds per update pass over an
example's active set, both per example) and the constants below:

* **one learner** (DEMI-DCD: a learner and p − 1 inference workers). 1-DCD spends
  t_inf + R0·t_pass per example (R0 = :data:`PASSES_PER_SWEEP` update passes per inference);
  DEMI-DCD overlaps them, the learner spending a share f of its time on inference of its own
  (``demi_dcd.inference_share``, at most :data:`MAX_INFERENCE_SHARE`), so that per example

      T₁ = max(t_inf / (p − 1 + f), R0·t_pass / (1 − f)),
      f = clip((t_inf − (p − 1)·R0·t_pass) / (t_inf + R0·t_pass), 0, MAX_INFERENCE_SHARE)

  (f balances the two sides), and S₁(p) = ρ_w · (t_inf + R0·t_pass) / T₁, with
  ρ_w = :data:`WORKER_THROUGHPUT` (processes that share no writes still share the memory
  system) and its inflation taken as 1 (the workers' stale w̄ costs little: the published
  layout);
* **p learners** (each infers and updates on its part, one shared w):

      S_p(p) = p · ρ_s / I(p, n),   I(K, n) = 1 + :data:`INFLATION_SLOPE` · (K − 1) / √n,

  ρ_s = :data:`SHARED_W_THROUGHPUT`, n the training examples: the asynchronous coordinate
  methods' inflation grows with the delay (≈ K) against √n (AsySCD, Liu and Wright: near-linear
  speed-up while K = O(√n)).

``auto`` takes p learners when S_p(p) > S₁(p) (and each learner has a core of its own: the
caller's rule). The constants are calibrated from the benchmarks' results (see each one) and
are to be re-fitted when a machine measures them anew.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PASSES_PER_SWEEP = 8.0
"""R0: update passes one learner needs per worker sweep (``demi_dcd.inference_share``)."""
MAX_INFERENCE_SHARE = 0.95
"""The learner's largest share of its time on inference (``demi_dcd.MAX_INFERENCE_SHARE``)."""
WORKER_THROUGHPUT = 0.9
"""ρ_w: each of two independent 1-DCD processes keeps ~0.9x a lone one's updates and
inferences per second (2-core Xeon, issue 53)."""
SHARED_W_THROUGHPUT = 0.70
"""ρ_s: per-process throughput of learner processes on one shared w against a lone 1-DCD
(the bias row and the transition block written by nearly every φ). Issue 53 measured ~0.63x
for two on a 2-core Xeon; 0.70 makes 2·ρ_s/I(2) reproduce the measured two-learner speed-ups
on EWT XPOS at p = 2 (1.40x / 1.43x, benchmarks/README.md "several learners", with I(2) ≈ 1.00
from inflation_2core.json), and keeps today's choices where they were measured (EWT and Brown
universal: p learners; Brown's 472 tags, CBC: one). Re-fit it from scaling16.json's
``throughput`` when the learners change (the hot-block work of issue 53 aims at >= 0.9)."""
INFLATION_SLOPE = 8.0
"""c of I(K, n) = 1 + c·(K − 1)/√n, fitted to ``benchmarks/results/inflation_2core.json``."""


def inflation(k: int, n: int, slope: float = INFLATION_SLOPE) -> float:
    """Modelled work inflation of ``k`` learners on ``n`` training examples:
    1 + slope·(k − 1)/√n (1 for one learner)."""
    return 1.0 + slope * max(int(k) - 1, 0) / math.sqrt(max(int(n), 1))


def one_learner_speedup(p: int, t_inf: float, t_pass: float,
                        r0: float = PASSES_PER_SWEEP, rho: float = WORKER_THROUGHPUT) -> float:
    """S₁(p): one learner (inferring a balanced share f of its time) and p − 1 workers against
    1-DCD (module docstring); 1 at p = 1."""
    if p <= 1:
        return 1.0
    upd = r0 * t_pass
    f = min(max((t_inf - (p - 1) * upd) / max(t_inf + upd, 1e-300), 0.0), MAX_INFERENCE_SHARE)
    pace = max(t_inf / (p - 1 + f), upd / (1.0 - f), 1e-300)
    return rho * (t_inf + upd) / pace


def learners_speedup(p: int, n: int, rho: float = SHARED_W_THROUGHPUT,
                     slope: float = INFLATION_SLOPE) -> float:
    """S_p(p) = p·ρ_s / I(p, n): p learner processes against 1-DCD (module docstring)."""
    return 1.0 if p <= 1 else p * rho / inflation(p, n, slope)


@dataclass(frozen=True)
class LearnerChoice:
    """``auto``'s choice of learner processes on p processes and the modelled speed-ups."""

    learners: int
    processes: int
    one: float  # S₁(p)
    many: float  # S_p(p)
    throughput: float  # ρ_s used
    inflation: float  # I(p, n) used
    learner_bound: bool  # whether the one learner's passes set S₁'s pace

    def reason(self) -> str:
        """One line: the choice and the figures it came from."""
        p = self.processes
        return (f"modelled speed-up over 1-DCD at p = {p}: {p} learners {self.many:.2f}x "
                f"(= {p} x {self.throughput:.2f} throughput / {self.inflation:.2f} work "
                f"inflation), one learner and {p - 1} worker{'s' * (p > 2)} {self.one:.2f}x"
                f" ({'its update passes' if self.learner_bound else 'the workers'} set the "
                f"pace): the {'former' if self.learners > 1 else 'latter'}")


def choose(p: int, n: int, t_inf: float, t_pass: float) -> LearnerChoice:
    """The layout with the larger modelled speed-up at p processes on n examples (the one
    learner on a tie)."""
    one = one_learner_speedup(p, t_inf, t_pass)
    many = learners_speedup(p, n)
    k = p if p > 1 and many > one else 1
    return LearnerChoice(k, p, one, many, SHARED_W_THROUGHPUT, inflation(p, n),
                         p > 1 and PASSES_PER_SWEEP * t_pass * p >= t_inf + PASSES_PER_SWEEP
                         * t_pass)
