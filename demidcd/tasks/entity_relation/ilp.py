"""Exact inference for the entity-relation ILP: branch and bound (numba), PuLP+CBC, HiGHS.

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
node costs O(4n). Measured (``python benchmarks/er_inference.py``, one core, CoNLL04's 5,516
sentences, random w ~ N(0,1); ``benchmarks/results/er_inference.json``): one full pass takes
0.015 s (one numba call, scoring included; per-sentence calls: median 2 µs, max 4 ms for the
24-entity sentence) against 82 s for PuLP+CBC and 87 s for HiGHS (max 8 s on one sentence),
with identical objective values (max difference 7e-13). So no size cut-off or fallback is
needed: branch and bound is exact and fast on every sentence.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from demidcd.errors import OptionError

N_ENT_LABELS = 4
N_REL_LABELS = 6
# RELATION_ARGS[r] = (type of arg 1, type of arg 2); entity labels Peop 0, Loc 1, Org 2, Other 3
RELATION_ARGS = np.array([[-1, -1], [0, 1], [0, 2], [2, 1], [1, 1], [0, 0]], dtype=np.int64)
# REL_OF[e, f] = the one relation allowed between an e and an f entity (0 if none)
REL_OF = np.zeros((N_ENT_LABELS, N_ENT_LABELS), dtype=np.int64)
for _r in range(1, N_REL_LABELS):
    REL_OF[RELATION_ARGS[_r, 0], RELATION_ARGS[_r, 1]] = _r

SOLVER_NAMES = ("exact", "cbc", "highs")
# Per-solve cap (seconds) of cbc / highs. Measured on the CoNLL04 seed-0 train split (4,412
# sentences, loss-augmented, 2-core EPYC under load average 6-29 from other jobs), CBC's time
# per sentence: w after one 1-DCD epoch: median 0.094 s, p99 0.28 s, p99.9 0.90 s, max > 10 s
# (a 24-entity sentence; next 7.3 s for 20 entities); w after 30 s of 1-DCD: median 0.066 s,
# p99 0.40 s, p99.9 1.65 s, max 2.6 s (a 4-entity sentence: load, not hardness). The
# branch and bound needs at most 17 / 53 ms. 2 s is above p99.9 at both w: 2 and 1 of the
# 4,412 solves took longer (wall clock; the one at the later w is a 4-entity sentence slowed
# by the load, which a cap on CBC's CPU time, as used, does not stop), while each instance
# that CBC needs minutes for at an early w costs at most 2 s.
DEFAULT_ILP_TIME_LIMIT: float | None = 2.0


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


def _never() -> bool:
    return False


def solve_exact(U: np.ndarray, P: np.ndarray, *, time_limit: float | None = None,
                should_stop: StopCheck | None = None) -> ILPResult:
    """Exact argmax by branch and bound (always proven; the cap and stop check are unused:
    one call takes milliseconds)."""
    U = np.ascontiguousarray(U, dtype=np.float64)
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, N_REL_LABELS)
    n = U.shape[0]
    ent = np.zeros(n, np.int64)
    pair = np.zeros(n * (n - 1), np.int64)
    obj = exact_solve_into(U, P, REL_OF, ent, pair)
    return ILPResult(ent, pair, float(obj), True)


# Node budget of the branch and bound when a capped ILP solver ends without a feasible
# structure. Measured on the lead's two hard CoNLL04 instances (16 and 24 entities, w after
# ~15 DEMI-DCD updates; /tmp/scratch/probs.pkl): 3e7 nodes/s; the 16-entity one needs 1.6e5
# nodes (5 ms), the 24-entity one 6.4e7 nodes (2.1 s CPU, 13 s wall on the loaded machine),
# so an unbounded exact fallback would not bound the latency; 3e6 nodes take ~0.1 s.
FALLBACK_NODES = 3_000_000


def solve_bounded(U: np.ndarray, P: np.ndarray, max_nodes: int = FALLBACK_NODES) -> ILPResult:
    """Branch and bound within ``max_nodes`` nodes: the optimum (proven) if the search ends,
    else the best structure found (not proven)."""
    U = np.ascontiguousarray(U, dtype=np.float64)
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, N_REL_LABELS)
    n = U.shape[0]
    ent = np.zeros(n, np.int64)
    pair = np.zeros(n * (n - 1), np.int64)
    info = np.zeros(2, np.int64)
    obj = bnb_solve_into(U, P, REL_OF, ent, pair, int(max_nodes), info)
    return ILPResult(ent, pair, float(obj), bool(info[1]))


def _pairs(n: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(n) for b in range(n) if a != b]


def _from_entities(U: np.ndarray, P: np.ndarray, ent: np.ndarray, proven: bool) -> ILPResult:
    """The best structure with entity labels ``ent``: each pair takes its best allowed label.
    For a solver's optimum this is its own optimum (ties aside); for a time-capped solution it
    can only raise the objective, and it is always feasible whatever the solver's rounding."""
    U = np.ascontiguousarray(U, dtype=np.float64)
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, N_REL_LABELS)
    ent = np.ascontiguousarray(ent, dtype=np.int64)
    pair = np.zeros(U.shape[0] * (U.shape[0] - 1), np.int64)
    obj = pair_labels_given(U, P, REL_OF, ent, pair)
    return ILPResult(ent, pair, float(obj), proven)


# ----------------------------------------------------------------------------- CBC
# CBC runs as a subprocess that we start and watch ourselves (not PuLP's solve()):
# * its own session (start_new_session): a Ctrl-C in the terminal reaches our process group
#   only, never CBC; the learner decides what a signal means;
# * PR_SET_PDEATHSIG = SIGKILL (Linux): CBC dies with the thread that started it, so a killed
#   worker never leaves a CBC behind; the thread that starts CBC waits for it, so "thread"
#   and "process" coincide here. Set by ``setpriv --pdeathsig KILL`` exec'ing CBC (keeps
#   Python's vfork: see _pdeathsig_prefix) or else by a ctypes prctl in a preexec_fn, which
#   also exits if the parent already died; through setpriv a parent dying in the
#   microseconds between the spawn and setpriv's prctl leaves CBC to finish on its own;
# * polled every ≤ 20 ms: once ``should_stop()`` is true CBC is killed and
#   InferenceInterrupted raised;
# * the model is written as MPS text from a per-size template (only the objective changes
#   between sentences) into one private temporary directory per process,
#   ``<tmp>/demidcd-cbc-<pid>-*``; a solve's files are removed in ``finally``, the directory
#   at exit (atexit), and directories of dead processes (workers, whose os._exit skips
#   atexit, and killed processes) when the process that chose the solver (get_solver, the
#   workers' parent) exits, and by the next process that starts a CBC solve.
_TMP_PREFIX = "demidcd-cbc-"
_tmp_state: tuple[int, str] | None = None  # (pid, directory) of this process
_tmp_counter = itertools.count()
_MPS_CACHE: dict[int, tuple[str, str]] = {}
_prctl_fn: Any = None
PR_SET_PDEATHSIG = 1
POLL_SECONDS = 0.02


def _wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    """``proc.wait(timeout)`` that returns the moment the process exits: poll(2) on a pidfd.
    ``Popen.wait(timeout)`` sleeps in doubling steps (0.5, 1, 2, … ms), which left a core idle
    for up to half of each ~15 ms CBC solve (DEMI-DCD on CoNLL04 with CBC, p = 2, idle
    machine: 160% of 200% CPU). Falls back to ``Popen.wait`` where pidfds are missing."""
    import select

    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.wait(timeout=timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(timeout * 1000.0):
            raise subprocess.TimeoutExpired(proc.args, timeout)
        return proc.wait()
    finally:
        os.close(fd)


def _cbc_path() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import pulp

        path = pulp.PULP_CBC_CMD().path
    if not path or not os.path.exists(path):
        raise OptionError("--ilp-solver cbc needs PuLP's bundled CBC binary (pip install pulp)")
    return path


_CBC: list[str] = []


def _cbc() -> str:
    if not _CBC:
        _CBC.append(_cbc_path())
    return _CBC[0]


def _sweep_stale_dirs(tmp: str) -> list[str]:
    """Remove ``demidcd-cbc-<pid>-*`` directories whose process is gone (or whose pid now
    belongs to a process started after the directory was made). Returns the paths removed."""
    import psutil

    removed = []
    try:
        entries = os.listdir(tmp)
    except OSError:
        return removed
    for e in entries:
        m = re.match(re.escape(_TMP_PREFIX) + r"(\d+)-", e)
        if not m or int(m[1]) == os.getpid():
            continue
        path = os.path.join(tmp, e)
        try:
            made = os.stat(path).st_mtime
            proc = psutil.Process(int(m[1]))
            alive = (proc.status() != psutil.STATUS_ZOMBIE
                     and proc.create_time() <= made + 1.0)
        except (psutil.Error, OSError):
            alive = False
        if not alive:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _remove_dir(pid: int, path: str) -> None:
    if os.getpid() == pid:  # an inherited atexit handler in a forked child does nothing
        shutil.rmtree(path, ignore_errors=True)


_SWEEP_REGISTERED: list[int] = []


def _sweep_at_exit() -> None:
    """At this process's exit, remove the CBC directories of dead processes: its workers leave
    theirs (they end with os._exit, which skips atexit) and are gone by then."""
    if os.getpid() in _SWEEP_REGISTERED:
        return
    _SWEEP_REGISTERED.append(os.getpid())
    pid = os.getpid()

    def sweep() -> None:
        if os.getpid() == pid:  # never in a forked child that inherited the handler
            _sweep_stale_dirs(tempfile.gettempdir())

    atexit.register(sweep)


def _private_dir() -> str:
    """This process's temporary directory for CBC files (made on first use)."""
    global _tmp_state
    pid = os.getpid()
    if _tmp_state is None or _tmp_state[0] != pid or not os.path.isdir(_tmp_state[1]):
        tmp = tempfile.gettempdir()
        _sweep_stale_dirs(tmp)
        path = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{pid}-", dir=tmp)
        _tmp_state = (pid, path)
        atexit.register(_remove_dir, pid, path)
    return _tmp_state[1]


_SETPRIV: list[list[str]] = []


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL --`` when util-linux's setpriv can (≥ 2.33), else [].

    Measured (a process holding 400 MB, like a worker; loaded machine, 30 starts of
    /bin/true): Popen with a preexec_fn must fork (47 ms per start), without one Python uses
    vfork (11 ms), through setpriv 8.6 ms; CBC's median solve is ~7 ms on an idle machine, so
    the prctl goes through setpriv's exec when it can and through preexec_fn otherwise.
    """
    if not _SETPRIV:
        path = shutil.which("setpriv") if sys.platform.startswith("linux") else None
        ok = False
        if path:
            try:
                out = subprocess.run([path, "--help"], capture_output=True, text=True,
                                     timeout=10)
                ok = "--pdeathsig" in out.stdout
            except (OSError, subprocess.SubprocessError):
                ok = False
        _SETPRIV.append([path, "--pdeathsig", "KILL", "--"] if ok else [])
    return _SETPRIV[0]


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when its parent dies (Linux prctl)."""
    global _prctl_fn
    if not sys.platform.startswith("linux"):
        return None
    if _prctl_fn is None:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.prctl
        fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                       ctypes.c_ulong]
        fn.restype = ctypes.c_int
        _prctl_fn = fn
    prctl, parent = _prctl_fn, os.getpid()

    def preexec() -> None:  # runs in the child between fork and exec: no allocation-heavy work
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def _mps_template(n: int) -> tuple[str, str]:
    """(COLUMNS body with one ``{}`` per column for its objective coefficient, the rest of the
    file) for n entities; the model is ``min −score`` over binary x, z (module docstring)."""
    got = _MPS_CACHE.get(n)
    if got is not None:
        return got
    pairs = _pairs(n)
    m = len(pairs)
    ncol = 4 * n + 6 * m
    entries: list[list[str]] = [[] for _ in range(ncol)]
    rows = ["NAME ER", "ROWS", " N OBJ"]
    rhs = []
    for a in range(n):  # Σ_e x_{a,e} = 1
        rows.append(f" E X{a}")
        rhs.append(f"    RHS X{a} 1")
        for e in range(4):
            entries[4 * a + e].append(f" X{a} 1")
    zoff = 4 * n
    q = 0
    for k, (a, b) in enumerate(pairs):
        rows.append(f" E Z{k}")  # Σ_r z_{k,r} = 1
        rhs.append(f"    RHS Z{k} 1")
        for r in range(N_REL_LABELS):
            entries[zoff + 6 * k + r].append(f" Z{k} 1")
        for r in range(1, N_REL_LABELS):  # z_{k,r} − x_{arg,type} ≤ 0
            for arg in (4 * a + int(RELATION_ARGS[r, 0]), 4 * b + int(RELATION_ARGS[r, 1])):
                rows.append(f" L L{q}")
                entries[zoff + 6 * k + r].append(f" L{q} 1")
                entries[arg].append(f" L{q} -1")
                q += 1
    body = ["    M1 'MARKER' 'INTORG'"]
    for j in range(ncol):
        # one line per entry ({{}} survives as the objective's placeholder)
        body.append(f"    C{j} OBJ {{}}")
        body.extend(f"    C{j}{x}" for x in entries[j])
    body.append("    M2 'MARKER' 'INTEND'")
    head = "\n".join(rows) + "\nCOLUMNS\n" + "\n".join(body) + "\n"
    tail = ("RHS\n" + "\n".join(rhs) + "\nBOUNDS\n"
            + "\n".join(f" UP BND C{j} 1" for j in range(ncol)) + "\nENDATA\n")
    got = (head, tail)
    _MPS_CACHE[n] = got
    return got


def write_mps(path: str, U: np.ndarray, P: np.ndarray) -> None:
    """Write the ILP for scores U, P (minimising −score) as an MPS file."""
    head, tail = _mps_template(U.shape[0])
    cost = np.concatenate([U.ravel(), P.ravel()])
    with open(path, "w") as f:
        f.write(head.format(*(-cost).tolist()))
        f.write(tail)


def _read_cbc_solution(path: str, n: int) -> tuple[str, np.ndarray | None]:
    """(CBC's status line, entity labels or None) from a ``-solution`` file."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return "", None
    if not lines:
        return "", None
    status = lines[0].strip()
    x = np.zeros((n, 4))
    for line in lines[1:]:
        tok = line.split()
        if tok and tok[0] == "**":
            tok = tok[1:]
        if len(tok) >= 3 and tok[1].startswith("C"):
            j = int(tok[1][1:])
            if j < 4 * n:
                x[j // 4, j % 4] = float(tok[2])
    if "no integer solution" in status or status.startswith(("Infeasible", "Integer infeas")):
        return status, None
    return status, np.argmax(x, axis=1).astype(np.int64)


def solve_cbc(U: np.ndarray, P: np.ndarray, *, time_limit: float | None = None,
              should_stop: StopCheck | None = None) -> ILPResult:
    """The 0-1 ILP with the CBC binary bundled with PuLP, run in a watched subprocess.

    Exact (``-ratio 0``) unless ``time_limit`` (seconds of CBC's CPU time, so that a busy
    machine does not cap small instances; the wall clock is bounded by the kill at
    1.5·cap + 1 s) stops the search first:
    then CBC's best feasible structure is returned with ``proven=False``. Without a feasible
    one (or if CBC overruns the cap by more than half of it plus a second and is killed):
    :func:`solve_bounded`, i.e. the branch-and-bound optimum (proven) when it takes at most
    :data:`FALLBACK_NODES` nodes (~0.1 s), else its best structure (not proven).
    ``should_stop`` is polled every 20 ms: when true, CBC is killed and
    :class:`InferenceInterrupted` raised.
    """
    from demidcd.tasks.base import InferenceInterrupted

    U = np.ascontiguousarray(U, dtype=np.float64)
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, N_REL_LABELS)
    n = U.shape[0]
    if n == 0:
        return ILPResult(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, True)
    stop = should_stop or _never
    d = _private_dir()
    k = next(_tmp_counter)
    mps, sol = os.path.join(d, f"{k}.mps"), os.path.join(d, f"{k}.sol")
    wrap = _pdeathsig_prefix()
    cmd = [*wrap, _cbc(), mps, "-ratio", "0", "-timeMode", "cpu"]
    if time_limit is not None:
        cmd += ["-sec", repr(float(time_limit))]
    cmd += ["-solve", "-printingOptions", "all", "-solution", sol]
    hard = None if time_limit is None else 1.5 * float(time_limit) + 1.0
    try:
        write_mps(mps, U, P)
        if stop():
            raise InferenceInterrupted("stop requested before CBC started")
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True,
                                preexec_fn=None if wrap else _die_with_parent())
        try:
            while True:
                try:
                    rc = _wait_exit(proc, POLL_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    if stop():
                        raise InferenceInterrupted("stop requested while CBC ran") from None
                    if hard is not None and time.monotonic() - t0 > hard:
                        rc = None
                        break
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
        if rc is None:  # overran its own cap
            return solve_bounded(U, P)
        status, ent = _read_cbc_solution(sol, n)
        if status.startswith("Optimal") and ent is not None:
            return _from_entities(U, P, ent, True)
        if time_limit is not None:  # "Stopped on time", or (seen once when the cap struck
            # during preprocessing) "Integer infeasible": the ILP is always feasible, so any
            # other status under a cap means the cap stopped CBC
            if ent is None:  # no feasible structure within the cap
                return solve_bounded(U, P)
            return _from_entities(U, P, ent, False)
        raise RuntimeError(f"CBC did not solve the entity-relation ILP (exit {rc}): "
                           f"{status or 'no solution file'}")
    finally:
        for f in (mps, sol):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass


# ----------------------------------------------------------------------------- HiGHS
_HIGHS_LOCAL = threading.local()
_HIGHS_STRUCT: dict[int, tuple[np.ndarray, ...]] = {}


def _highs_structure(n: int) -> tuple[np.ndarray, ...]:
    """Row-wise constraint matrix of the ILP for n entities (cached; only costs vary)."""
    got = _HIGHS_STRUCT.get(n)
    if got is not None:
        return got
    pairs = _pairs(n)
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
        for r in range(1, N_REL_LABELS):  # z_{k,r} − x_{a,t1} ≤ 0, z_{k,r} − x_{b,t2} ≤ 0
            for arg in (a * 4 + int(RELATION_ARGS[r, 0]), b * 4 + int(RELATION_ARGS[r, 1])):
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
                should_stop: StopCheck | None = None) -> ILPResult:
    """The same 0-1 ILP through HiGHS (highspy) in process.

    ``time_limit`` is HiGHS's ``time_limit`` (wall clock): at the cap its best feasible
    structure is returned with ``proven=False``, :func:`solve_bounded`'s if it has none.
    ``should_stop`` is polled by HiGHS's interrupt callbacks (MIP, simplex, IPM); when true the
    solve ends and :class:`InferenceInterrupted` is raised.
    """
    from demidcd.tasks.base import InferenceInterrupted

    h = _highs_instance()
    import highspy

    U = np.ascontiguousarray(U, dtype=np.float64)
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, N_REL_LABELS)
    n = U.shape[0]
    if n == 0:
        return ILPResult(np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, True)
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
        # an interrupted instance interrupts its next run at once (measured: the next solve
        # stopped 0.47 s before its own stop check turned true), so it is not reused
        _HIGHS_LOCAL.h = None
        raise InferenceInterrupted("stop requested while HiGHS ran")
    feasible = h.getInfo().primal_solution_status == 2  # kSolutionStatusFeasible
    if status == MS.kOptimal:
        proven = True
    elif status == MS.kTimeLimit and time_limit is not None:
        if not feasible:
            return solve_bounded(U, P)
        proven = False
    else:
        raise RuntimeError(f"HiGHS did not solve the entity-relation ILP: "
                           f"{h.modelStatusToString(status)}")
    col = np.asarray(h.getSolution().col_value)
    ent = np.argmax(col[: 4 * n].reshape(n, 4), axis=1).astype(np.int64)
    return _from_entities(U, P, ent, proven)


Solver = Callable[..., ILPResult]


def get_solver(name: str) -> Solver:
    """The solver called ``name`` (exact | cbc | highs); OptionError if unknown or unavailable.

    Every solver is ``solve(U, P, *, time_limit=None, should_stop=None) -> ILPResult``.
    """
    if name == "exact":
        return solve_exact
    if name == "cbc":
        _cbc()  # fail early and clearly when the binary is missing
        _sweep_at_exit()
        return solve_cbc
    if name == "highs":
        _highs_instance()  # fail early and clearly when highspy is missing
        return solve_highs
    raise OptionError(f"unknown ILP solver {name!r} (choose from {', '.join(SOLVER_NAMES)})")
