"""The entity-relation ILP (:mod:`.ilp`) solved in process by HiGHS (the optional package
highspy).

One ``Highs`` instance per thread, reused from solve to solve; the constraint matrix of each
sentence size is built once (only the objective changes between sentences). The stop check is
polled by HiGHS's interrupt callbacks, so a solve ends promptly once it turns true.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from demidcd.errors import OptionError
from demidcd.tasks.entity_relation import ilp

_HIGHS_LOCAL = threading.local()
_HIGHS_STRUCT: dict[int, tuple[np.ndarray, ...]] = {}


def _highs_structure(n: int) -> tuple[np.ndarray, ...]:
    """Row-wise constraint matrix of the ILP for n entities (cached; only costs vary)."""
    got = _HIGHS_STRUCT.get(n)
    if got is not None:
        return got
    pairs = ilp.ordered_pairs(n)
    m = len(pairs)
    starts, index, value, lo, hi = [0], [], [], [], []
    for a in range(n):  # Σ_e x_{a,e} = 1
        index += [a * 4 + e for e in range(4)]
        value += [1.0] * 4
        starts.append(len(index))
        lo.append(1.0)
        hi.append(1.0)
    zoff = 4 * n
    for k, (a, b) in enumerate(pairs):
        index += [zoff + k * 6 + r for r in range(6)]  # Σ_r z_{k,r} = 1
        value += [1.0] * 6
        starts.append(len(index))
        lo.append(1.0)
        hi.append(1.0)
        for r in range(1, ilp.N_REL_LABELS):  # z_{k,r} − x_{a,t1} ≤ 0, z_{k,r} − x_{b,t2} ≤ 0
            for arg in (a * 4 + int(ilp.RELATION_ARGS[r, 0]), b * 4 + int(ilp.RELATION_ARGS[r, 1])):
                index += [zoff + k * 6 + r, arg]
                value += [1.0, -1.0]
                starts.append(len(index))
                lo.append(-np.inf)
                hi.append(0.0)
    got = (np.array(starts, np.int32), np.array(index, np.int32), np.array(value),
           np.array(lo), np.array(hi), np.int64(4 * n + 6 * m))
    _HIGHS_STRUCT[n] = got
    return got


def _highs_interrupt(e: Any) -> None:
    """HiGHS interrupt callback: stop the solve once the current stop check is true."""
    check = getattr(_HIGHS_LOCAL, "should_stop", None)
    if check is not None and check():
        e.interrupt()


def _highs_instance():
    h = getattr(_HIGHS_LOCAL, "h", None)
    if h is None:
        try:
            import highspy
        except ImportError:
            raise OptionError("--ilp-solver highs needs the optional package highspy "
                              "(pip install 'demidcd[highs]')") from None
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.0)
        h.setOptionValue("threads", 1)
        # highspy ≥ 1.7: interrupt callbacks, polled by HiGHS inside its MIP and LP loops
        for cb in ("cbMipInterrupt", "cbSimplexInterrupt", "cbIpmInterrupt"):
            if hasattr(h, cb):
                getattr(h, cb).subscribe(_highs_interrupt)
        _HIGHS_LOCAL.h = h
    return h


def solve_highs(U: np.ndarray, P: np.ndarray, *, time_limit: float | None = None,
                should_stop: ilp.StopCheck | None = None) -> ilp.ILPResult:
    """The same 0-1 ILP through HiGHS (highspy) in process.

    ``time_limit`` is HiGHS's ``time_limit`` (wall clock): at the cap its best feasible
    structure is returned with ``proven=False``, :func:`~.ilp.solve_bounded`'s if it has none.
    ``should_stop`` is polled by HiGHS's interrupt callbacks (MIP, simplex, IPM); when true the
    solve ends and :class:`InferenceInterrupted` is raised.
    """
    from demidcd.tasks.base import InferenceInterrupted

    h = _highs_instance()
    import highspy

    U, P = ilp.score_arrays(U, P)
    n = U.shape[0]
    if n == 0:
        return ilp.ILPResult(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, True)
    starts, index, value, lo, hi, ncol = _highs_structure(n)
    ncol = int(ncol)
    lp = highspy.HighsLp()
    lp.num_col_ = ncol
    lp.num_row_ = len(lo)
    lp.col_cost_ = np.concatenate([U.ravel(), P.ravel()])
    lp.col_lower_ = np.zeros(ncol)
    lp.col_upper_ = np.ones(ncol)
    lp.row_lower_ = lo
    lp.row_upper_ = hi
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = ncol
    lp.a_matrix_.num_row_ = len(lo)
    lp.a_matrix_.start_ = starts
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value
    lp.integrality_ = [highspy.HighsVarType.kInteger] * ncol
    h.clearModel()
    h.setOptionValue("time_limit", float(time_limit) if time_limit is not None else np.inf)
    h.passModel(lp)
    _HIGHS_LOCAL.should_stop = should_stop
    try:
        if should_stop is not None and should_stop():
            raise InferenceInterrupted("stop requested before HiGHS started")
        h.run()
    finally:
        _HIGHS_LOCAL.should_stop = None
    status = h.getModelStatus()
    MS = highspy.HighsModelStatus
    if status == MS.kInterrupt:
        # an interrupted instance keeps its interrupt flag and would stop its next run at
        # once, before that run's own stop check turns true, so it is not reused
        _HIGHS_LOCAL.h = None
        raise InferenceInterrupted("stop requested while HiGHS ran")
    feasible = h.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
    if status == MS.kOptimal:
        proven = True
    elif status == MS.kTimeLimit and time_limit is not None:
        if not feasible:
            return ilp.solve_bounded(U, P)
        proven = False
    else:
        raise RuntimeError(f"HiGHS did not solve the entity-relation ILP: "
                           f"{h.modelStatusToString(status)}")
    col = np.asarray(h.getSolution().col_value)
    ent = np.argmax(col[: 4 * n].reshape(n, 4), axis=1).astype(np.int64)
    return ilp.from_entities(U, P, ent, proven)


def highs_solver() -> Callable[..., ilp.ILPResult]:
    """:func:`solve_highs`, after checking that highspy is installed (OptionError if not)."""
    _highs_instance()
    return solve_highs
