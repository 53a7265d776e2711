"""A part's local subproblem (CoCoA+, Ma et al. 2015; Hybrid-DCA, Pal et al. 2020): the DCD
of Chang & Yih (2013) on the examples of one part, with their α, active sets and φ pool,
against the global w as this part last heard of it plus σ′ ⊙ its own unmerged change.

With K parts P_k and w = Σ_k Σ_{i∈P_k} α_i φ_i, part k maximises over its Δα (the others
fixed), for the L2 loss,

    Σ_{i∈P_k} [Δ·(α_i+Δα_i) − (A_i+ΔA_i)²/(4C)] − w·(Φ_k Δα) − ½ Σ_j σ′_j (Φ_k Δα)_j²

and its change Δw_k = Φ_k Δα is *added* to the global w (γ = 1). The adding is safe (the
sum of the K subproblems' values lower-bounds the dual's increase) when
‖Σ_k x_k‖² ≤ Σ_j σ′_j Σ_k x_{kj}² for every change x_k = Φ_k Δα_k; by Cauchy–Schwarz per
coordinate this holds for σ′_j = the number of parts whose φ can be non-zero at j
(:func:`coordinate_sigma`: the parts that fire j's feature; K for the transitions). With one
σ′ = K for every coordinate it is CoCoA+'s safe choice (Ma et al. 2015, with γ = 1); per
coordinate it is never larger and is 1 where one part alone has the feature. The merge is
asynchronous (Hybrid-DCA): a part's w may lack changes of others still in flight; the
certified gap at the end does not depend on that (w = Σ α φ holds exactly once every change
is merged, :meth:`LocalPart.commit`).

**The kernels run unchanged.** Coordinate ascent on the subproblem, with v = w + σ′ ⊙ Δw_k
(S = diag σ′), takes the step δ = G / (φᵀSφ + 1/(2C)) with G = Δ − v·φ − A_i/(2C) and moves
v by δ Sφ. In u = S^{-1/2} v with φ' = S^{1/2} φ that is G = Δ − u·φ' − A_i/(2C),
δ = G / (‖φ'‖² + 1/(2C)) and u += δ φ': the plain DCD update
(:func:`~.kernels.update_examples`; the L1 loss's SMO the same way) with w = u on records
whose φ is scaled by s = √σ′ (:meth:`LocalPart.work` scales each batch as it comes from
inference). α is the real α; inference reads v = s ⊙ u, made fresh for each chunk on the
coordinates it reads (:func:`_refresh_rows`).

**One σ′ for every coordinate** (what the cluster uses, :mod:`demidcd.estimators.cluster`):
with s = √σ′ the same for every j the φ need no scaling. With α̃ = s·α (so Ã_i = s·A_i) the
step above is δ̃ = s·δ = (Δ/s − u·φ − Ã_i/(2C s²)) / (‖φ‖² + 1/(2C s²)) and u += δ̃ φ: plain
DCD on the stored φ itself with Δ/s and C·s² (the L1 loss: the box Σ λ̃ ≤ C·s, so C·s), its
violations, |PG| and thresholds (δ, tol) in 1/s of their units. The φ pool then holds ±1
values, about 2.4 bytes an entry (:mod:`.phi_pool`); per coordinate, φ' = s ⊙ φ is a float64
almost everywhere (about 10 bytes an entry; docs/learners-and-tasks.md has the node's
measured pool). :meth:`LocalPart.state`, :meth:`~LocalPart.checkpoint` and
:meth:`~LocalPart.dual_terms` report α's units either way.

A :meth:`LocalPart.commit` moves the part's change to the merge: Δw_k = (v − base_v)/σ′,
after which v = base_v = base_v + Δw_k (a new subproblem starts at the merged point);
:meth:`LocalPart.apply` adds the others' merged changes to both.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
from numba import njit

from ..tasks.base import InferenceInterrupted, Task
from .activeset import ActiveSets, SweepPlan
from .common import SolverConfig
from .kernels import dual_terms
from .phi_pool import atomic_add


@njit(cache=True, nogil=True)
def _changed(u: np.ndarray, base: np.ndarray) -> int:
    """The number of entries where u ≠ base."""
    n = 0
    for j in range(u.shape[0]):
        if u[j] != base[j]:
            n += 1
    return n


@njit(cache=True, nogil=True)
def _commit(u: np.ndarray, base: np.ndarray, sig: np.ndarray, root: np.ndarray,
            out_idx: np.ndarray, out_val: np.ndarray, atomic: bool) -> int:
    """Δw_j = (u_j − base_j)/s_j on every entry where u ≠ base (s_j = √σ_j = root[sig[j]]),
    into out_idx/out_val (sized by :func:`_changed`); then base_j += (u_j − base_j)/σ_j and
    u_j = base_j (that is v = base_v + Δw). Returns the number of entries. ``atomic``: on a
    u that training threads add to at the same time: u_j is read once and moves by the
    atomic add (its new value − the value read), so an add made meanwhile stays in
    u − base (sent by the next commit); stops once ``out_idx`` is full (entries changed
    since :func:`_changed` counted wait)."""
    n = 0
    cap = out_idx.shape[0]
    for j in range(u.shape[0]):
        if n == cap:
            break
        uj = u[j]
        if uj != base[j]:
            d = uj - base[j]
            r = root[sig[j]]
            out_idx[n] = j
            out_val[n] = d / r
            n += 1
            base[j] += d / (r * r)
            if atomic:
                atomic_add(u, j, base[j] - uj)
            else:
                u[j] = base[j]
    return n


@njit(cache=True, nogil=True)
def _apply(u: np.ndarray, base: np.ndarray, sig: np.ndarray, root: np.ndarray,
           idx: np.ndarray, val: np.ndarray, atomic: bool) -> None:
    """v += Δ and base_v += Δ (in u's units: Δ/s) on the entries of a merged change; with
    ``atomic``, atomic adds to u (training threads add to it meanwhile)."""
    for q in range(idx.shape[0]):
        j = idx[q]
        d = val[q] / root[sig[j]]
        if atomic:
            atomic_add(u, j, d)
        else:
            u[j] += d
        base[j] += d


@njit(cache=True, nogil=True)
def _to_v(u: np.ndarray, sig: np.ndarray, root: np.ndarray, v: np.ndarray) -> None:
    """v = s ⊙ u."""
    for j in range(u.shape[0]):
        v[j] = u[j] * root[sig[j]]


@njit(cache=True, nogil=True)
def _to_u(w: np.ndarray, sig: np.ndarray, root: np.ndarray, u: np.ndarray,
          base: np.ndarray) -> None:
    """u = base = w / s."""
    for j in range(w.shape[0]):
        u[j] = w[j] / root[sig[j]]
        base[j] = u[j]


@njit(cache=True, nogil=True)
def _refresh_rows(u: np.ndarray, v: np.ndarray, sig: np.ndarray, root: np.ndarray,
                  sent_ptr: np.ndarray, feat_ptr: np.ndarray, feat_idx: np.ndarray,
                  chunk: np.ndarray, K: int, off: np.ndarray, t0: int, stamp: np.ndarray,
                  tick: int) -> None:
    """v = s ⊙ u on the coordinates that inference on the sentences ``chunk`` of a chain
    reads: the emission weights of every feature their tokens fire (f·K … f·K + K − 1, or
    the seen pairs off[f] … off[f+1] − 1 when ``off`` is not empty; each feature once:
    ``stamp[f]`` = ``tick`` once done) and the transitions from ``t0`` on. A feature's
    weights share one σ′ (:func:`coordinate_sigma`)."""
    pairs = off.shape[0] > 0
    for q in range(chunk.shape[0]):
        s = chunk[q]
        for t in range(sent_ptr[s], sent_ptr[s + 1]):
            for e in range(feat_ptr[t], feat_ptr[t + 1]):
                f = feat_idx[e]
                if stamp[f] == tick:
                    continue
                stamp[f] = tick
                lo, hi = (off[f], off[f + 1]) if pairs else (f * K, f * K + K)
                if lo < hi:
                    r = root[sig[lo]]
                    for j in range(lo, hi):
                        v[j] = u[j] * r
    for j in range(t0, u.shape[0]):
        v[j] = u[j] * root[sig[j]]


def warm_kernels() -> None:
    """Compile (or load from numba's cache) this module's kernels, before a clock starts."""
    u, base, v = np.zeros(4), np.zeros(4), np.zeros(4, np.float32)
    sig, root = np.ones(4, np.uint8), np.sqrt(np.arange(256, dtype=np.float64))
    val = np.zeros(4)
    _changed(u, base)
    for t in (np.int32, np.int64):  # (a change's index type: LocalPart._idx)
        idx = np.zeros(4, t)
        _commit(u, base, sig, root, idx, val, False)
        _apply(u, base, sig, root, idx[:1], val[:1], False)
    _to_v(u, sig, root, v)
    _to_u(u, sig, root, u, base)
    ptr = np.array([0, 1], np.int64)
    _refresh_rows(u, v, sig, root, ptr, ptr, np.zeros(1, np.int32), np.zeros(1, np.int64), 2,
                  np.zeros(0, np.int64), 2, np.zeros(1, np.int64), 1)
    act = ActiveSets(1, 4, 1.0)  # the checkpoint's kernels (LocalPart.checkpoint)
    act.restore_words(act.words_state())


def coordinate_sigma(n_parts_of_feature: np.ndarray, K: int, dim: int, parts: int,
                     pairs: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """σ′_j of every coordinate of a chain's w (uint8): for an emission weight (f, y) the
    number of parts whose examples fire feature f (at least 1), for the transitions (and
    any padding) the number of parts. ``pairs``: the seen-pairs layout (off, lab)."""
    nf = np.maximum(np.asarray(n_parts_of_feature, np.int64), 1)
    sig = np.full(dim, parts, np.uint8)
    if pairs is None:
        sig[:nf.shape[0] * K] = np.repeat(nf, K)
    else:
        off = np.asarray(pairs[0], np.int64)
        sig[:int(off[-1])] = np.repeat(nf, np.diff(off))
    return sig


def lane_bounds(task: Task, lanes: int) -> list[int]:
    """Cut the part's examples into ``lanes`` contiguous ranges of about equal tokens (one
    example at least each; fewer ranges than ``lanes`` when there are fewer examples):
    returns the bounds b_0 = 0 < b_1 < … < b_L = n."""
    n = task.n_examples
    lanes = max(1, min(int(lanes), n))
    ptr = getattr(task, "sent_ptr", None)
    cost = np.asarray(ptr, np.int64)[1:] if ptr is not None and len(ptr) == n + 1 \
        else np.arange(1, n + 1, dtype=np.int64)
    cuts = np.searchsorted(cost, cost[-1] * np.arange(1, lanes) / lanes, side="left") + 1 \
        if n else np.zeros(0, np.int64)
    bounds = [0]
    for c in cuts.tolist():  # strictly increasing, a last range left non-empty
        bounds.append(min(max(c, bounds[-1] + 1), n - (lanes - len(bounds))))
    bounds.append(n)
    return bounds


class _Lane:
    """One training thread's examples [lo, hi) of a part: their active sets (over the part's
    one u), sweep plan, shuffling and place in the epoch (local example ids i − lo)."""

    def __init__(self, lo: int, hi: int, act: ActiveSets, config: SolverConfig, rng: Any):
        self.lo, self.hi, self.n = lo, hi, hi - lo
        self.act, self.plan, self.rng = act, SweepPlan(act, config.skip), rng
        self.epoch = 0
        self.order: np.ndarray | None = None  # the inference pass under way
        self.at = 0
        self.ep: dict = {}


class LocalPart:
    """The local subproblem of one part (module docstring): ``task`` holds that part's
    examples only; ``sigma`` is σ′, one number for every coordinate (K for K parts) or a
    uint8 array of σ′_j (:func:`coordinate_sigma`).

    ``lanes``: training threads (Hybrid-DCA's cores of a node): the examples are cut into
    that many contiguous ranges of about equal tokens (:func:`lane_bounds`), each with its
    own active sets, φ pool and sweep plan, all updating the part's one u (and reading its
    one v) at the same time, every add atomic (:func:`~.phi_pool.atomic_add`), so
    u − base = S^{-1/2} Φ_k Δα holds to rounding and :meth:`commit` (with atomic adds too)
    sends exactly Φ_k Δα: w = Σ α φ is kept as with one lane. The lanes do not change the
    subproblem (one σ′ for the part): they are PASSCoDe's asynchronous threads on it
    (Hsieh et al. 2015; atomic: no lost update). :meth:`work` ``(lane=l)`` runs lane l and may
    run in a thread beside the others and beside :meth:`commit`, :meth:`apply` and
    :meth:`loss_part`; everything else wants the lanes stopped (:meth:`dual_terms` of one lane
    and :meth:`checkpoint` of a piece: that lane only)."""

    def __init__(self, task: Task, config: SolverConfig, sigma: float | np.ndarray,
                 seed: int | list[int], lanes: int = 1):
        dim = task.dim
        self.s: float | None = None  # one σ′ for every coordinate: s = √σ′ (module docstring)
        if np.ndim(sigma) == 0:
            if not 1 <= float(sigma) <= 255 or float(sigma) != int(sigma):
                raise ValueError("sigma' must be an integer in [1, 255]")
            sig = np.full(dim, int(sigma), np.uint8)
            self.s = float(np.sqrt(int(sigma)))
        else:
            sig = np.asarray(sigma, np.uint8)
            if sig.shape != (dim,) or (sig < 1).any():
                raise ValueError("sigma' must be >= 1 for each of the dim coordinates")
        self.task, self.config, self.sig = task, config, sig
        self.root = np.sqrt(np.arange(256, dtype=np.float64))
        # one σ′: the pool keeps φ itself (±1: packed), Δ/s, C·s² (L1: C·s) and thresholds
        # in α̃ = s·α's units; per coordinate: φ' = s ⊙ φ (module docstring)
        k = self.s or 1.0
        self.bounds = lane_bounds(task, lanes)
        self.shared = len(self.bounds) > 2  # several lanes: atomic adds to u
        self.u = np.zeros(dim)  # the lanes' one w
        seeds = list(seed) if isinstance(seed, (list, tuple)) else [seed]
        self.lanes = [_Lane(lo, hi, ActiveSets(
            hi - lo, dim, config.C * (k * k if config.loss == "l2" else k), config.admit / k,
            config.max_active, w=self.u, hot=self.shared or None, sweeps=config.sweeps,
            loss=config.loss, tol=config.tol / k), config,
            np.random.default_rng(seed if not self.shared else seeds + [1 << 20, j]))
            for j, (lo, hi) in enumerate(zip(self.bounds[:-1], self.bounds[1:], strict=True))]
        self.act = self.lanes[0].act  # (one lane: the part's active sets)
        self.base = np.zeros(dim)  # u's units
        # s ⊙ u, what inference reads, in float32 as DEMI-DCD's workers read w̄ (the steps
        # and the admission test use u in float64), fresh where each chunk reads it
        self.v = np.zeros(dim, np.float32)
        self.updates = self.inferences = 0
        self._stamp = np.zeros(getattr(task, "F", 0), np.int64)
        self._idx = np.int32 if dim < 2**31 else np.int64  # a change's index type
        self._ticks = itertools.count(1)  # (next() is atomic under the GIL: a tick a chunk)

    @property
    def n_lanes(self) -> int:
        return len(self.lanes)

    @property
    def epoch(self) -> int:
        """Epochs every lane has finished (the part's)."""
        return min(ln.epoch for ln in self.lanes)

    def _fresh(self, chunk: np.ndarray) -> None:
        """v fresh where inference on ``chunk`` reads it (a chain task; any other: all).
        ``stamp`` is shared by the lanes: each chunk takes a tick no other chunk has, so
        another lane's stamp only makes a row refreshed twice."""
        t = self.task
        if not hasattr(t, "feat_idx"):
            _to_v(self.u, self.sig, self.root, self.v)
            return
        off = t.pairs[0] if t.pairs is not None else np.zeros(0, np.int64)
        _refresh_rows(self.u, self.v, self.sig, self.root, t.sent_ptr, t.feat_ptr,
                      t.feat_idx, chunk, t.K, off, t.u_rows * t.K, self._stamp,
                      next(self._ticks))

    def _s(self, idx: np.ndarray) -> np.ndarray:
        return self.root[self.sig[idx]]

    # ------------------------------------------------------------------ the merge
    def reset(self, w: np.ndarray) -> None:
        """v = base = w (the start, or a resynchronisation after a part was lost; the lanes
        stopped)."""
        _to_u(np.asarray(w, np.float64), self.sig, self.root, self.u, self.base)

    def apply(self, idx: np.ndarray, val: np.ndarray) -> None:
        """Add other parts' merged change (idx, val) to v and base."""
        _apply(self.u, self.base, self.sig, self.root, np.asarray(idx, self._idx),
               np.asarray(val, np.float64), self.shared)

    def commit(self) -> tuple[np.ndarray, np.ndarray]:
        """This part's change since the last commit, Δw_k = Φ_k Δα (sparse), now counted in
        base: (indices (int32 while w has fewer than 2^31 entries: a change travels as 12
        bytes an entry), values), copies."""
        m = _changed(self.u, self.base)
        idx, val = np.empty(m, self._idx), np.empty(m)
        got = _commit(self.u, self.base, self.sig, self.root, idx, val, self.shared)
        return (idx, val) if got == m else (idx[:got].copy(), val[:got].copy())

    def view(self) -> np.ndarray:
        """v = base + σ′ ⊙ Δw_k (float64, a new array): the w this part's inference reads."""
        v = np.empty(self.u.shape[0])
        _to_v(self.u, self.sig, self.root, v)
        return v

    # ------------------------------------------------------------------ the work
    def work(self, seconds: float, lane: int = 0) -> dict | None:
        """DCD-SSVM on lane ``lane``'s examples for about ``seconds``: at an epoch's start r
        passes over the active sets, then chunks of the shuffled inference pass (v made fresh
        where each chunk's inference reads it, :func:`_refresh_rows`). Returns the lane's
        epoch record when its inference pass ended within this call, else None."""
        cfg, task, ln = self.config, self.task, self.lanes[lane]
        act, n, lo = ln.act, ln.n, ln.lo
        t_end = time.perf_counter() + seconds
        if n == 0:
            time.sleep(min(seconds, 0.05))
            return None
        if ln.order is None:
            ln.epoch += 1
            ep = {"max_pg": 0.0, "updates": 0, "certified": False, "violators": 0,
                  "admitted": 0, "pass_pg": 0.0}
            for _ in range(cfg.inner_passes):
                st = act.update(ln.rng.permutation(n).astype(np.int64),
                                skip_below=ln.plan.threshold())
                pg = st.max_pg * (self.s or 1.0)
                ep["max_pg"], ep["updates"] = pg, ep["updates"] + st.updates
                ep["certified"] = ln.plan.certifies(pg, cfg.tol)
            ln.ep, ln.at = ep, 0
            ln.order = ln.rng.permutation(n).astype(np.int64)
        ep, order, b = ln.ep, ln.order, max(1, cfg.batch)
        v = self.v
        k = self.s or 1.0
        tol = cfg.tol / k
        while ln.at < n:
            chunk = order[ln.at:ln.at + b]
            glob = chunk + lo if lo else chunk  # the task's example ids
            self._fresh(glob)
            try:
                batch = task.loss_augmented(v, glob)
            except InferenceInterrupted:
                break
            if lo:
                batch.ex = batch.ex - lo  # the lane's ids
            if self.s is None:
                batch.val = batch.val * self._s(batch.idx)  # φ' = s ⊙ φ: u·φ' = v·φ
            else:  # Δ/s and v·φ/s = u·φ: violations (and |PG|) in 1/s of their units
                batch.delta, batch.margin = batch.delta / k, batch.margin / k
            ep["violators"] += int((batch.delta - batch.margin > tol).sum()) \
                if cfg.loss == "l1" else int((act.violation(batch) > tol).sum())
            ep["admitted"] += act.insert(batch).admitted
            st = act.update(chunk)
            ep["pass_pg"] = max(ep["pass_pg"], st.max_pg * k)
            ep["updates"] += st.updates
            self.updates += st.updates  # (racy across lanes: a progress figure)
            self.inferences += len(chunk)
            ln.at += len(chunk)
            if time.perf_counter() >= t_end:
                break
        if ln.at < n:
            return None
        ln.order = None
        if cfg.inner_passes == 0 or (not ep["certified"] and ep["pass_pg"] < cfg.tol):
            ep["max_pg"], ep["certified"] = ep["pass_pg"], ep["pass_pg"] < cfg.tol
        return {"epoch": ln.epoch, "violators": ep["violators"], "admitted": ep["admitted"],
                "max_pg": max(ep["max_pg"], ep["pass_pg"]), "updates": ep["updates"],
                "quiet": ep["violators"] == 0 and bool(ep["certified"]),
                "active": act.size, "lane": lane}

    # ------------------------------------------------------------------ objective, state
    def dual_terms(self, lane: int | None = None) -> tuple[float, float]:
        """(Σ Δ·α, Σ A_i²) of this part, or of lane ``lane`` only (the dual is the sum over
        parts of Σ Δα − Σ A²/(4C), minus ½‖w‖²; for the L1 loss the A² term is not used)."""
        lin = sq = 0.0
        for ln in self.lanes if lane is None else [self.lanes[lane]]:
            a = ln.act
            q, li = dual_terms(a.slots, a.count, a.alpha_sum, a.s_f)
            sq, lin = sq + q, lin + li
        return lin, sq / (self.s or 1.0) ** 2  # (one σ′: Σ (Δ/s)(sα) = Σ Δα, Σ (sA)²)

    def loss_part(self, w: np.ndarray, chunk: int = 512, final: bool = False
                  ) -> tuple[float, int]:
        """(C Σ_i ξ_i² (L2; C Σ ξ_i for L1), #ξ_i > 0) over this part's examples at ``w``:
        the primal is ½‖w‖² plus the sum of the parts'. During training w is read in float32
        (one lane: in v's buffer, made fresh again where each chunk reads it; several: a copy,
        as the other lanes read v meanwhile); ``final``: in float64, in base's buffer (the
        part trains no more)."""
        task, total, nv = self.task, 0.0, 0
        if final:
            buf = self.base
            buf[:] = w
        elif self.shared:
            buf = np.asarray(w, np.float32).copy()
        else:
            buf = self.v
            buf[:] = w
        w = buf
        for s in range(0, task.n_examples, chunk):
            b = task.loss_augmented(w, np.arange(s, min(s + chunk, task.n_examples)))
            xi = np.maximum(b.delta - b.margin, 0.0)
            total += float(xi @ xi) if self.config.loss == "l2" else float(xi.sum())
            nv += int((xi > 0).sum())
        return self.config.C * total, nv

    def own_w(self) -> np.ndarray:
        """Σ_{i∈part} α_i φ_i, rebuilt from the stored structures (φ' / s; the lanes
        stopped)."""
        w = self.lanes[0].act.rebuilt_w()
        for ln in self.lanes[1:]:
            w += ln.act.rebuilt_w()
        w /= self.root[self.sig]
        return w

    @property
    def size(self) -> int:
        """Structures in every lane's active sets."""
        return sum(ln.act.size for ln in self.lanes)

    def _whole(self, parts: list[tuple[_Lane, dict]], ptr: str, data: tuple[str, ...],
               rows: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Lanes' states (local ids) as one of the part (its example ids, per-example arrays
        of every example, ``ptr`` rebased)."""
        if len(parts) == 1 and parts[0][0].lo == 0 and parts[0][0].n == self.task.n_examples:
            return parts[0][1]
        n = self.task.n_examples
        out: dict[str, np.ndarray] = {}
        for name in ("alpha_sum", "xi", "ex_pg"):
            full = np.zeros(n)
            for ln, st in parts:
                full[ln.lo:ln.hi] = st[name]
            out[name] = full
        for name in ("example", "examples"):
            if name in parts[0][1]:
                out[name] = np.concatenate([st[name] + ln.lo for ln, st in parts])
        for name in rows + data:
            out[name] = np.concatenate([st[name] for _, st in parts])
        at, ptrs = 0, [np.zeros(1, np.int64)]
        for _, st in parts:
            ptrs.append(st[ptr][1:] + at)
            at += int(st[ptr][-1])
        out[ptr] = np.concatenate(ptrs)
        return out

    def state(self) -> dict[str, np.ndarray]:
        """The part's dual state (:meth:`ActiveSets.state` arrays, φ unscaled)."""
        s = self._whole([(ln, ln.act.state()) for ln in self.lanes], "phi_ptr",
                        ("phi_idx", "phi_val"), ("hash", "delta", "alpha"))
        val = s["phi_val"]
        if self.s is None:
            val /= self.root[self.sig[s["phi_idx"]]]  # in place: a checkpoint is large
        else:  # α̃ = s·α, Δ/s, ξ̂/s, |PG|/s back to α's units
            for name in ("alpha", "alpha_sum"):
                s[name] /= self.s
            for name in ("delta", "xi", "ex_pg"):
                s[name] *= self.s
        s["phi_val"] = val.astype(np.float32)  # (the chain's φ: small integers, exact)
        return s

    def piece_lane(self, piece: int, pieces: int) -> int:
        """The lane whose examples piece ``piece`` of ``pieces`` (at least :attr:`n_lanes`)
        takes: lane j holds pieces ⌊j·pieces/L⌋ … ⌊(j+1)·pieces/L⌋ − 1."""
        L = self.n_lanes
        if pieces < L:
            raise ValueError(f"a checkpoint of {L} lanes is taken in {L} pieces at least")
        return max(j for j in range(L) if j * pieces // L <= piece)

    def checkpoint(self, piece: int = 0, pieces: int = 1) -> dict[str, np.ndarray]:
        """Piece ``piece`` of ``pieces`` (at least one a lane; its share of one lane's
        examples, in order) of the part's dual state with φ as the pool stores it
        (:meth:`ActiveSets.words_state`, α, Δ, A, ξ̂ and |PG| in α's units, the part's
        example ids): loaded by :meth:`restore_checkpoint` into a part of the same σ′, any
        number of lanes (with one σ′ the words are φ itself, ±1). Only that lane must be
        stopped."""
        j = self.piece_lane(piece, pieces)
        ln, L = self.lanes[j], self.n_lanes
        first, last = j * pieces // L, (j + 1) * pieces // L
        q, m = piece - first, last - first
        lo, hi = ln.n * q // m, ln.n * (q + 1) // m
        st = self._whole([(ln, ln.act.words_state(np.arange(lo, hi, dtype=np.int64)))],
                         "w_ptr", ("words",), ("hash", "f", "s_len"))
        if self.s is not None:
            st["f"][:, 0] /= self.s
            st["f"][:, 1] *= self.s
            st["alpha_sum"] /= self.s
            st["xi"] *= self.s
            st["ex_pg"] *= self.s
        return st

    def restore_checkpoint(self, arrays: dict[str, np.ndarray]) -> int:
        """Add one piece of a :meth:`checkpoint` (each lane its examples' structures); w is
        left to the caller (:meth:`reset`)."""
        a = {k: np.asarray(v) for k, v in arrays.items()}
        if self.s is not None:
            a["f"] = a["f"].copy()
            a["f"][:, 0] *= self.s
            a["f"][:, 1] /= self.s
            a["alpha_sum"] = a["alpha_sum"] * self.s
            a["xi"] = a["xi"] / self.s
            a["ex_pg"] = a["ex_pg"] / self.s
        ex = np.asarray(a["example"], np.int64)
        exs = np.asarray(a["examples"], np.int64)
        loaded = 0
        for ln in self.lanes:
            mine = exs[(exs >= ln.lo) & (exs < ln.hi)]
            if not mine.shape[0]:
                continue
            s0, s1 = np.searchsorted(ex, [ln.lo, ln.hi])  # (grouped by example, in order)
            p = a["w_ptr"]
            part = {"example": ex[s0:s1] - ln.lo, "hash": a["hash"][s0:s1],
                    "f": a["f"][s0:s1], "s_len": a["s_len"][s0:s1],
                    "w_ptr": p[s0:s1 + 1] - p[s0], "words": a["words"][p[s0]:p[s1]],
                    "examples": mine - ln.lo}
            for name in ("alpha_sum", "xi", "ex_pg"):
                part[name] = a[name][ln.lo:ln.hi]
            loaded += ln.act.restore_words(part)
        return loaded

    def restore(self, arrays: dict[str, np.ndarray]) -> int:
        """Load a :meth:`state` of this part's examples (one lane); w is left to the caller
        (:meth:`reset` with the resynchronised w)."""
        if self.shared:
            raise ValueError("restore: one lane (a checkpoint restores any number)")
        a = dict(arrays)
        a["phi_val"] = np.asarray(a["phi_val"], np.float64)
        if self.s is None:
            a["phi_val"] = a["phi_val"] * self._s(np.asarray(a["phi_idx"], np.int64))
        else:
            for name in ("alpha", "alpha_sum"):
                a[name] = np.asarray(a[name], np.float64) * self.s
            for name in ("delta", "xi", "ex_pg"):
                a[name] = np.asarray(a[name], np.float64) / self.s
        return self.act.restore(a, add=False)
