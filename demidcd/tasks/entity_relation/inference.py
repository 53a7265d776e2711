"""The entity-relation ILP's solvers by name, and the default per-solve time cap.

``exact`` is the branch and bound of :mod:`.ilp` (numba, always proven optimal); ``cbc`` runs
PuLP's bundled CBC binary in a watched subprocess (:mod:`.cbc`); ``highs`` calls HiGHS in
process (:mod:`.highs`). Each is ``solve(U, P, *, time_limit=None, should_stop=None) ->
ILPResult`` on the score arrays U[a, e] and P[k, r] of one sentence.
"""

from __future__ import annotations

from collections.abc import Callable

from demidcd.errors import OptionError
from demidcd.tasks.entity_relation.cbc import cbc_solver
from demidcd.tasks.entity_relation.highs import highs_solver
from demidcd.tasks.entity_relation.ilp import ILPResult, solve_exact

SOLVER_NAMES = ("exact", "cbc", "highs")
# Per-solve cap (seconds) of cbc / highs: above CBC's 99.9th-percentile solve time on CoNLL04
# at an early and at a later w, so it only cuts the rare instances that take CBC minutes
# (figures: benchmarks/README.md, "Evidence behind the defaults and design choices"). CBC's
# cap counts its CPU time, so a loaded machine does not cut small instances.
DEFAULT_ILP_TIME_LIMIT: float | None = 2.0

Solver = Callable[..., ILPResult]


def get_solver(name: str) -> Solver:
    """The solver called ``name`` (exact | cbc | highs); OptionError if unknown or unavailable.

    Every solver is ``solve(U, P, *, time_limit=None, should_stop=None) -> ILPResult``.
    """
    if name == "exact":
        return solve_exact
    if name == "cbc":
        return cbc_solver()
    if name == "highs":
        return highs_solver()
    raise OptionError(f"unknown ILP solver {name!r} (choose from {', '.join(SOLVER_NAMES)})")
