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
  system). No inflation divides it: its counts mix differently from 1-DCD's (the learner makes
  many cheap update passes per inference: 1.86x 1-DCD's updates + inferences to 1% on EWT at
  p = 2, measured loaded, while it reaches 1% 1.3-1.7x sooner than 1-DCD), and the R0 passes
  per inference already price the extra updates;
* **p learners** (each infers and updates on its part, one shared w):

      S_p(p) = p · ρ_s(p) / I(p),   I(K) = 1 + :data:`INFLATION_PER_DOUBLING` · log₂ K,

  ρ_s(p) interpolated in log p in :data:`SHARED_W_THROUGHPUT` (p·ρ_s held beyond its last
  point: no more work done per second for more processes). I is fitted to the work counted by
  ``benchmarks/inflation.py`` (``results/inflation_2core.json``): at 1% gap EWT XPOS
  1.00 / 1.12 / 1.11 / 1.23x and Brown universal 1.04 / 1.11 / 1.10 / 1.34x at K = 2 / 4 / 8 /
  16.
  Brown has 3.7 times EWT's examples and inflated as much, so the model has no term in the
  corpus's size (AsySCD's K = O(√n) would predict half EWT's inflation there); the corpus
  enters through t_inf and t_pass, measured on it.

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
SHARED_W_THROUGHPUT = {1: 1.0, 2: 0.70, 4: 0.67, 8: 0.44, 16: 0.235}
"""ρ_s(p): per-process throughput of p learner processes on one shared w against a lone 1-DCD
(the bias row and the transition block written by nearly every φ). p = 2: issue 53 measured
~0.63x on a 2-core Xeon; 0.70 brings 2·ρ_s/I(2) to the measured two-learner speed-ups on EWT
XPOS (1.40x / 1.43x, benchmarks/README.md "several learners"; 1.32x modelled, a near tie with
one learner's 1.31x there, as the measurements are). p = 4, 8, 16: S·I(p)/p from the 16-core
Xeon's speed-ups of the default layout (p learners; EWT 2.33 / 3.02 / 2.82x, Brown universal
2.46 / 3.14 / 3.03x, ``861a103``) with the inflation counted here: 13/16 of the work lost at
p = 16 is throughput. Re-fit from scaling16.json's ``throughput`` when the learners change
(the hot-block work of issue 53 aims at >= 0.9)."""
INFLATION_PER_DOUBLING = 0.057
"""b of I(K) = 1 + b·log₂ K: least squares on the eight points of inflation_2core.json at 1%
(module docstring; Brown's K = 8 from its 24-epoch run)."""


def inflation(k: int, per_doubling: float = INFLATION_PER_DOUBLING) -> float:
    """Modelled work inflation of ``k`` learners: 1 + per_doubling·log₂ k (1 for one)."""
    return 1.0 + per_doubling * math.log2(max(int(k), 1))


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


def shared_w_throughput(p: int, table: dict[int, float] | None = None) -> float:
    """ρ_s(p): :data:`SHARED_W_THROUGHPUT` interpolated linearly in log₂ p; beyond its last
    point p·ρ_s stays at the last point's."""
    pts = sorted((table or SHARED_W_THROUGHPUT).items())
    p = max(int(p), 1)
    if p >= pts[-1][0]:
        return pts[-1][1] * pts[-1][0] / p
    for (a, ra), (b, rb) in zip(pts, pts[1:], strict=False):
        if a <= p <= b:
            x = (math.log2(p) - math.log2(a)) / (math.log2(b) - math.log2(a))
            return ra + x * (rb - ra)
    return pts[0][1]


def learners_speedup(p: int, rho: float | None = None,
                     per_doubling: float = INFLATION_PER_DOUBLING) -> float:
    """S_p(p) = p·ρ_s(p) / I(p): p learner processes against 1-DCD (module docstring);
    ``rho`` overrides ρ_s(p)."""
    if p <= 1:
        return 1.0
    return p * (shared_w_throughput(p) if rho is None else rho) / inflation(p, per_doubling)


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
    learner on a tie, and where p learners would leave one without examples)."""
    one = one_learner_speedup(p, t_inf, t_pass)
    many = learners_speedup(p)
    k = p if 1 < p <= n and many > one else 1
    return LearnerChoice(k, p, one, many, shared_w_throughput(p), inflation(p),
                         p > 1 and PASSES_PER_SWEEP * t_pass * p >= t_inf + PASSES_PER_SWEEP
                         * t_pass)
