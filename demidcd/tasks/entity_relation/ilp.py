"""The entity-relation ILP and its exact branch and bound (numba).

Problem. A sentence has n entities and the m = n(n−1) ordered pairs k = (a, b), a ≠ b, numbered
row-major with the diagonal left out (:func:`demidcd.io.conll04.pair_index`). Given label scores
U[a, e] (4 entity labels) and P[k, r] (6 relation labels, r = 0 "no relation"), find

    max  Σ_a U[a, y_a] + Σ_k P[k, r_k]
    s.t. exactly one label per entity and per pair; r_k ≠ 0 only if
         (y_a, y_b) = (type1(r_k), type2(r_k))   (Live_In(Peop, Loc), Work_For(Peop, Org),
         OrgBased_In(Org, Loc), Located_In(Loc, Loc), Kill(Peop, Peop)).

As a 0-1 ILP (``cbc``, ``highs``): indicators x_{a,e}, z_{k,r}; Σ_e x_{a,e} = 1, Σ_r z_{k,r} = 1,
z_{k,r} ≤ x_{a,type1(r)}, z_{k,r} ≤ x_{b,type2(r)} for r ≥ 1.

``exact`` (default). Every entity-type pair allows at most one relation besides "none", so given
the entity labels each pair independently takes r = rel(y_a, y_b) if P[k, r] > P[k, 0], else 0:

    max_y  Σ_k P[k, 0] + Σ_a U[a, y_a] + Σ_{a<b} W_ab(y_a, y_b),
    W_ab(e, f) = max(0, P[ab, rel(e,f)] − P[ab, 0]) + max(0, P[ba, rel(f,e)] − P[ba, 0]) ≥ 0,

a pairwise problem on the complete graph with 4 labels. It is solved exactly by depth-first
branch and bound: entities ordered by decreasing total interaction, a start incumbent from
iterated conditional modes, children tried in decreasing bound order, and the upper bound

    partial score of assigned entities
    + Σ_{unassigned a} max_e [U[a,e] + Σ_{assigned b} W_ab(e, y_b) + Σ_{unassigned b after a}
                               max_f W_ab(e, f)]

(each unassigned–unassigned pair is credited optimistically once, to its earlier entity). Each
node costs O(4n). Branch and bound is exact and fast on every CoNLL04 sentence, far faster than
PuLP+CBC or HiGHS (benchmarks/README.md, "CoNLL04: inference is cheap"), so no size cut-off or
fallback is needed.

The CBC and HiGHS solvers (:mod:`.cbc`, :mod:`.highs`) share :class:`ILPResult`, the node-capped
branch and bound :func:`solve_bounded` (their fallback when a time cap leaves them without a
feasible structure) and :func:`from_entities` from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba import njit

N_ENT_LABELS = 4
N_REL_LABELS = 6
# RELATION_ARGS[r] = (type of arg 1, type of arg 2); entity labels Peop 0, Loc 1, Org 2, Other 3
RELATION_ARGS = np.array([[-1, -1], [0, 1], [0, 2], [2, 1], [1, 1], [0, 0]], dtype=np.int64)
# REL_OF[e, f] = the one relation allowed between an e and an f entity (0 if none)
REL_OF = np.zeros((N_ENT_LABELS, N_ENT_LABELS), dtype=np.int64)
for _r in range(1, N_REL_LABELS):
    REL_OF[RELATION_ARGS[_r, 0], RELATION_ARGS[_r, 1]] = _r


@njit(cache=True, nogil=True)
def pair_labels_given(U, P, rel_of, ent, pair_out):
    """Best allowed label of every pair given entity labels ``ent``; returns the objective."""
    n = U.shape[0]
    obj = 0.0
    for a in range(n):
        obj += U[a, ent[a]]
    k = 0
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            r = rel_of[ent[a], ent[b]]
            if r > 0 and P[k, r] > P[k, 0]:
                pair_out[k] = r
                obj += P[k, r]
            else:
                pair_out[k] = 0
                obj += P[k, 0]
            k += 1
    return obj


@njit(cache=True, nogil=True)
def exact_solve_into(U, P, rel_of, ent_out, pair_out):
    """Exact argmax of the entity-relation ILP by branch and bound (module docstring).

    U: float64[n, 4], P: float64[n(n−1), 6]. Writes entity labels into ``ent_out[:n]`` and pair
    labels into ``pair_out[:n(n−1)]``; returns the optimal objective value.
    """
    info = np.zeros(2, np.int64)
    return bnb_solve_into(U, P, rel_of, ent_out, pair_out, -1, info)


@njit(cache=True, nogil=True)
def bnb_solve_into(U, P, rel_of, ent_out, pair_out, max_nodes, info):
    """Branch and bound of :func:`exact_solve_into` with a node budget (``max_nodes`` < 0: none).

    Returns the objective of the structure written; ``info[0]`` = nodes expanded, ``info[1]``
    = 1 if the search finished (the structure is optimal), 0 if the budget stopped it (the
    structure is the best found: at least the iterated-conditional-modes start).
    """
    info[0] = 0
    info[1] = 1
    n = U.shape[0]
    if n == 0:
        return 0.0
    if n == 1:
        best_e = 0
        for e in range(1, 4):
            if U[0, e] > U[0, best_e]:
                best_e = e
        ent_out[0] = best_e
        return U[0, best_e]
    # symmetric pairwise gains W[a, b, e, f] (a ≠ b) = W[b, a, f, e]
    W = np.zeros((n, n, 4, 4))
    for a in range(n):
        for b in range(n):
            if a == b:
                continue
            k = a * (n - 1) + b - (1 if b > a else 0)
            p0 = P[k, 0]
            for e in range(4):
                for f in range(4):
                    r = rel_of[e, f]
                    if r > 0:
                        g = P[k, r] - p0
                        if g > 0.0:
                            W[a, b, e, f] += g
                            W[b, a, f, e] += g
    # order: decreasing total interaction
    infl = np.zeros(n)
    for a in range(n):
        s = 0.0
        for b in range(n):
            if b != a:
                mx = 0.0
                for e in range(4):
                    for f in range(4):
                        if W[a, b, e, f] > mx:
                            mx = W[a, b, e, f]
                s += mx
        infl[a] = -s
    order = np.argsort(infl, kind="mergesort")
    Uo = np.empty((n, 4))
    Wo = np.empty((n, n, 4, 4))
    for i in range(n):
        for e in range(4):
            Uo[i, e] = U[order[i], e]
        for j in range(n):
            for e in range(4):
                for f in range(4):
                    Wo[i, j, e, f] = W[order[i], order[j], e, f]
    # M[i, e] = Σ_{j>i} max_f W[i, j, e, f]
    M = np.zeros((n, 4))
    for i in range(n):
        for j in range(i + 1, n):
            for e in range(4):
                mx = 0.0
                for f in range(4):
                    if Wo[i, j, e, f] > mx:
                        mx = Wo[i, j, e, f]
                M[i, e] += mx
    # incumbent: iterated conditional modes from the unary argmax
    y = np.zeros(n, np.int64)
    for i in range(n):
        be = 0
        for e in range(1, 4):
            if Uo[i, e] > Uo[i, be]:
                be = e
        y[i] = be
    for _sweep in range(50):
        changed = False
        for i in range(n):
            bv = -np.inf
            be = 0
            for e in range(4):
                v = Uo[i, e]
                for j in range(n):
                    if j != i:
                        v += Wo[i, j, e, y[j]]
                if v > bv:
                    bv = v
                    be = e
            if be != y[i]:
                y[i] = be
                changed = True
        if not changed:
            break
    best = 0.0
    for i in range(n):
        best += Uo[i, y[i]]
        for j in range(i + 1, n):
            best += Wo[i, j, y[i], y[j]]
    y_best = y.copy()
    # depth-first branch and bound; A[d, i, e] = Σ_{j<d} W[i, j, e, y_j] for i ≥ d
    A = np.zeros((n + 1, n, 4))
    partial = np.zeros(n + 1)
    R = np.zeros(n + 1)
    cand = np.zeros((n, 4), np.int64)
    cval = np.zeros((n, 4))
    cptr = np.zeros(n, np.int64)
    d = 0
    _prepare(0, n, Uo, A, M, cand, cval, R)
    cptr[0] = 0
    nodes = 0
    while d >= 0:
        if cptr[d] == 4:
            d -= 1
            continue
        nodes += 1
        if max_nodes >= 0 and nodes > max_nodes:
            info[1] = 0
            break
        c = cptr[d]
        cptr[d] = c + 1
        if partial[d] + cval[d, c] + R[d] <= best:
            cptr[d] = 4  # candidates are sorted: the rest cannot do better either
            continue
        e = cand[d, c]
        newp = partial[d] + Uo[d, e] + A[d, d, e]
        y[d] = e
        if d == n - 1:
            if newp > best:
                best = newp
                for i in range(n):
                    y_best[i] = y[i]
            continue
        for i in range(d + 1, n):
            for f in range(4):
                A[d + 1, i, f] = A[d, i, f] + Wo[i, d, f, e]
        partial[d + 1] = newp
        d += 1
        _prepare(d, n, Uo, A, M, cand, cval, R)
        cptr[d] = 0
    info[0] = nodes
    for i in range(n):
        ent_out[order[i]] = y_best[i]
    return pair_labels_given(U, P, rel_of, ent_out, pair_out)


@njit(cache=True, nogil=True)
def _prepare(d, n, Uo, A, M, cand, cval, R):
    """Sorted candidate labels of entity d with their optimistic values; R[d] = rest bound."""
    for e in range(4):
        v = Uo[d, e] + A[d, d, e] + M[d, e]
        # insertion into descending list
        j = e
        while j > 0 and cval[d, j - 1] < v:
            cval[d, j] = cval[d, j - 1]
            cand[d, j] = cand[d, j - 1]
            j -= 1
        cval[d, j] = v
        cand[d, j] = e
    r = 0.0
    for i in range(d + 1, n):
        mx = -np.inf
        for e in range(4):
            v = Uo[i, e] + A[d, i, e] + M[i, e]
            if v > mx:
                mx = v
        r += mx
    R[d] = r


class ILPResult(NamedTuple):
    """An argmax of the ILP: entity labels int64[n], pair labels int64[n(n−1)], objective, and
    ``proven`` (False only when a solver time cap stopped the search at a feasible structure)."""

    ent: np.ndarray
    pair: np.ndarray
    obj: float
    proven: bool = True


StopCheck = Callable[[], bool]


def score_arrays(U: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """U as float64[n, 4] and P as float64[n(n−1), 6], C-contiguous (what the kernels read)."""
    return (np.ascontiguousarray(U, dtype=np.float64),
            np.ascontiguousarray(P, dtype=np.float64).reshape(-1, N_REL_LABELS))


def solve_exact(U: np.ndarray, P: np.ndarray, *, time_limit: float | None = None,
                should_stop: StopCheck | None = None) -> ILPResult:
    """Exact argmax by branch and bound (always proven; the cap and stop check are unused:
    one call takes milliseconds)."""
    return solve_bounded(U, P, max_nodes=-1)


# Node budget of the branch and bound when a capped ILP solver ends without a feasible
# structure: hard instances can need ~1e8 nodes, so an unbounded exact fallback would not
# bound the latency; 3e6 nodes take about 0.1 s (figures: benchmarks/README.md, "Evidence
# behind the defaults and design choices").
FALLBACK_NODES = 3_000_000


def solve_bounded(U: np.ndarray, P: np.ndarray, max_nodes: int = FALLBACK_NODES) -> ILPResult:
    """Branch and bound within ``max_nodes`` nodes (< 0: no budget): the optimum (proven) if
    the search ends, else the best structure found (not proven)."""
    U, P = score_arrays(U, P)
    n = U.shape[0]
    ent = np.zeros(n, np.int64)
    pair = np.zeros(n * (n - 1), np.int64)
    info = np.zeros(2, np.int64)
    obj = bnb_solve_into(U, P, REL_OF, ent, pair, int(max_nodes), info)
    return ILPResult(ent, pair, float(obj), bool(info[1]))


def ordered_pairs(n: int) -> list[tuple[int, int]]:
    """The ordered entity pairs (a, b), a ≠ b, of n entities in the ILP's order (row-major)."""
    return [(a, b) for a in range(n) for b in range(n) if a != b]


def from_entities(U: np.ndarray, P: np.ndarray, ent: np.ndarray, proven: bool) -> ILPResult:
    """The best structure with entity labels ``ent``: each pair takes its best allowed label.
    For a solver's optimum this is its own optimum (ties aside); for a time-capped solution it
    can only raise the objective, and it is always feasible whatever the solver's rounding."""
    U, P = score_arrays(U, P)
    ent = np.ascontiguousarray(ent, dtype=np.int64)
    pair = np.zeros(U.shape[0] * (U.shape[0] - 1), np.int64)
    obj = pair_labels_given(U, P, REL_OF, ent, pair)
    return ILPResult(ent, pair, float(obj), proven)
