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

import time

import numpy as np
from numba import njit

from ..tasks.base import InferenceInterrupted, Task
from .activeset import ActiveSets, SweepPlan
from .common import SolverConfig
from .kernels import dual_terms


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
            out_idx: np.ndarray, out_val: np.ndarray) -> int:
    """Δw_j = (u_j − base_j)/s_j on every entry where u ≠ base (s_j = √σ_j = root[sig[j]]),
    into out_idx/out_val (sized by :func:`_changed`); then u_j = base_j = base_j +
    (u_j − base_j)/σ_j (that is v = base_v + Δw). Returns the number of entries."""
    n = 0
    for j in range(u.shape[0]):
        if u[j] != base[j]:
            d = u[j] - base[j]
            r = root[sig[j]]
            out_idx[n] = j
            out_val[n] = d / r
            n += 1
            base[j] += d / (r * r)
            u[j] = base[j]
    return n


@njit(cache=True, nogil=True)
def _apply(u: np.ndarray, base: np.ndarray, sig: np.ndarray, root: np.ndarray,
           idx: np.ndarray, val: np.ndarray) -> None:
    """v += Δ and base_v += Δ (in u's units: Δ/s) on the entries of a merged change."""
    for q in range(idx.shape[0]):
        j = idx[q]
        d = val[q] / root[sig[j]]
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
        _commit(u, base, sig, root, idx, val)
        _apply(u, base, sig, root, idx[:1], val[:1])
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


class LocalPart:
    """The local subproblem of one part (module docstring): ``task`` holds that part's
    examples only; ``sigma`` is σ′, one number for every coordinate (K for K parts) or a
    uint8 array of σ′_j (:func:`coordinate_sigma`)."""

    def __init__(self, task: Task, config: SolverConfig, sigma: float | np.ndarray,
                 seed: int | list[int]):
        n, dim = task.n_examples, task.dim
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
        self.act = ActiveSets(n, dim, config.C * (k * k if config.loss == "l2" else k),
                              config.delta / k, config.max_active, sweeps=config.sweeps,
                              loss=config.loss, tol=config.tol / k)
        self.base = np.zeros(dim)  # u's units
        # s ⊙ u, what inference reads, in float32 as DEMI-DCD's workers read w̄ (the steps
        # and the admission test use u in float64), fresh where each chunk reads it
        self.v = np.zeros(dim, np.float32)
        self.plan = SweepPlan(self.act, config.skip)
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self._order: np.ndarray | None = None  # the inference pass under way
        self._at = 0
        self._ep: dict = {}
        self.updates = self.inferences = 0
        self._stamp = np.zeros(getattr(task, "F", 0), np.int64)
        self._idx = np.int32 if dim < 2**31 else np.int64  # a change's index type
        self._tick = 0

    def _fresh(self, chunk: np.ndarray) -> None:
        """v fresh where inference on ``chunk`` reads it (a chain task; any other: all)."""
        t = self.task
        if not hasattr(t, "feat_idx"):
            self.view()
            return
        off = t.pairs[0] if t.pairs is not None else np.zeros(0, np.int64)
        self._tick += 1
        _refresh_rows(self.act.w, self.v, self.sig, self.root, t.sent_ptr, t.feat_ptr,
                      t.feat_idx, chunk, t.K, off, t.u_rows * t.K, self._stamp, self._tick)

    def _s(self, idx: np.ndarray) -> np.ndarray:
        return self.root[self.sig[idx]]

    # ------------------------------------------------------------------ the merge
    def reset(self, w: np.ndarray) -> None:
        """v = base = w (the start, or a resynchronisation after a part was lost)."""
        _to_u(np.asarray(w, np.float64), self.sig, self.root, self.act.w, self.base)

    def apply(self, idx: np.ndarray, val: np.ndarray) -> None:
        """Add other parts' merged change (idx, val) to v and base."""
        _apply(self.act.w, self.base, self.sig, self.root, np.asarray(idx, self._idx),
               np.asarray(val, np.float64))

    def commit(self) -> tuple[np.ndarray, np.ndarray]:
        """This part's change since the last commit, Δw_k = Φ_k Δα (sparse), now counted in
        base: (indices (int32 while w has fewer than 2^31 entries: a change travels as 12
        bytes an entry), values), copies."""
        m = _changed(self.act.w, self.base)
        idx, val = np.empty(m, self._idx), np.empty(m)
        _commit(self.act.w, self.base, self.sig, self.root, idx, val)
        return idx, val

    def view(self) -> np.ndarray:
        """v = base + σ′ ⊙ Δw_k (float64, a new array): the w this part's inference reads."""
        v = np.empty(self.act.w.shape[0])
        _to_v(self.act.w, self.sig, self.root, v)
        return v

    # ------------------------------------------------------------------ the work
    def work(self, seconds: float) -> dict | None:
        """DCD-SSVM on this part for about ``seconds``: at an epoch's start r passes over the
        active sets, then chunks of the shuffled inference pass (v made fresh where each
        chunk's inference reads it, :func:`_refresh_rows`). Returns the epoch's record when
        its inference pass ended within this call, else None."""
        cfg, act, task = self.config, self.act, self.task
        n = task.n_examples
        t_end = time.perf_counter() + seconds
        if n == 0:
            time.sleep(min(seconds, 0.05))
            return None
        if self._order is None:
            self.epoch += 1
            ep = {"max_pg": 0.0, "updates": 0, "certified": False, "violators": 0,
                  "admitted": 0, "pass_pg": 0.0}
            for _ in range(cfg.inner_passes):
                st = act.update(self.rng.permutation(n).astype(np.int64),
                                skip_below=self.plan.threshold())
                pg = st.max_pg * (self.s or 1.0)
                ep["max_pg"], ep["updates"] = pg, ep["updates"] + st.updates
                ep["certified"] = self.plan.certifies(pg, cfg.tol)
            self._ep, self._at = ep, 0
            self._order = self.rng.permutation(n).astype(np.int64)
        ep, order, b = self._ep, self._order, max(1, cfg.batch)
        v = self.v
        k = self.s or 1.0
        tol = cfg.tol / k
        admit = cfg.admit / k
        while self._at < n:
            chunk = order[self._at:self._at + b]
            self._fresh(chunk)
            try:
                batch = task.loss_augmented(v, chunk)
            except InferenceInterrupted:
                break
            if self.s is None:
                batch.val = batch.val * self._s(batch.idx)  # φ' = s ⊙ φ: u·φ' = v·φ
            else:  # Δ/s and v·φ/s = u·φ: violations (and |PG|) in 1/s of their units
                batch.delta, batch.margin = batch.delta / k, batch.margin / k
            ep["violators"] += int((batch.delta - batch.margin > tol).sum()) \
                if cfg.loss == "l1" else int((act.violation(batch) > tol).sum())
            ep["admitted"] += act.insert(batch, admit).admitted
            st = act.update(chunk)
            ep["pass_pg"] = max(ep["pass_pg"], st.max_pg * k)
            ep["updates"] += st.updates
            self.updates += st.updates
            self.inferences += len(chunk)
            self._at += len(chunk)
            if time.perf_counter() >= t_end:
                break
        if self._at < n:
            return None
        self._order = None
        if cfg.inner_passes == 0 or (not ep["certified"] and ep["pass_pg"] < cfg.tol):
            ep["max_pg"], ep["certified"] = ep["pass_pg"], ep["pass_pg"] < cfg.tol
        return {"epoch": self.epoch, "violators": ep["violators"], "admitted": ep["admitted"],
                "max_pg": max(ep["max_pg"], ep["pass_pg"]), "updates": ep["updates"],
                "quiet": ep["violators"] == 0 and bool(ep["certified"]),
                "active": act.size}

    # ------------------------------------------------------------------ objective, state
    def dual_terms(self) -> tuple[float, float]:
        """(Σ Δ·α, Σ A_i²) of this part (the dual is the sum over parts of Σ Δα − Σ A²/(4C),
        minus ½‖w‖²; for the L1 loss the A² term is not used)."""
        sq, lin = dual_terms(self.act.slots, self.act.count, self.act.alpha_sum, self.act.s_f)
        return lin, sq / (self.s or 1.0) ** 2  # (one σ′: Σ (Δ/s)(sα) = Σ Δα, Σ (sA)²)

    def loss_part(self, w: np.ndarray, chunk: int = 512, final: bool = False
                  ) -> tuple[float, int]:
        """(C Σ_i ξ_i² (L2; C Σ ξ_i for L1), #ξ_i > 0) over this part's examples at ``w``:
        the primal is ½‖w‖² plus the sum of the parts'. During training w is read in float32
        (in v's buffer, made fresh again where each chunk reads it); ``final``: in float64, in
        base's buffer (the part trains no more)."""
        task, total, nv = self.task, 0.0, 0
        buf = self.base if final else self.v
        buf[:] = w
        w = buf
        for s in range(0, task.n_examples, chunk):
            b = task.loss_augmented(w, np.arange(s, min(s + chunk, task.n_examples)))
            xi = np.maximum(b.delta - b.margin, 0.0)
            total += float(xi @ xi) if self.config.loss == "l2" else float(xi.sum())
            nv += int((xi > 0).sum())
        return self.config.C * total, nv

    def own_w(self) -> np.ndarray:
        """Σ_{i∈part} α_i φ_i, rebuilt from the stored structures (φ' / s)."""
        w = self.act.rebuilt_w()
        w /= self.root[self.sig]
        return w

    def state(self) -> dict[str, np.ndarray]:
        """The part's dual state (:meth:`ActiveSets.state` arrays, φ unscaled)."""
        s = self.act.state()
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

    def checkpoint(self, piece: int = 0, pieces: int = 1) -> dict[str, np.ndarray]:
        """Piece ``piece`` of ``pieces`` (its share of the examples, in order) of the part's
        dual state with φ as the pool stores it (:meth:`ActiveSets.words_state`, α, Δ, A, ξ̂
        and |PG| in α's units): loaded by :meth:`restore_checkpoint` into a part of the same
        σ′ (with one σ′ the words are φ itself, ±1)."""
        n = self.task.n_examples
        lo, hi = n * piece // pieces, n * (piece + 1) // pieces
        st = self.act.words_state(np.arange(lo, hi, dtype=np.int64))
        if self.s is not None:
            st["f"][:, 0] /= self.s
            st["f"][:, 1] *= self.s
            st["alpha_sum"] /= self.s
            st["xi"] *= self.s
            st["ex_pg"] *= self.s
        return st

    def restore_checkpoint(self, arrays: dict[str, np.ndarray]) -> int:
        """Add one piece of a :meth:`checkpoint`; w is left to the caller (:meth:`reset`)."""
        a = {k: np.asarray(v) for k, v in arrays.items()}
        if self.s is not None:
            a["f"] = a["f"].copy()
            a["f"][:, 0] *= self.s
            a["f"][:, 1] /= self.s
            a["alpha_sum"] = a["alpha_sum"] * self.s
            a["xi"] = a["xi"] / self.s
            a["ex_pg"] = a["ex_pg"] / self.s
        return self.act.restore_words(a)

    def restore(self, arrays: dict[str, np.ndarray]) -> int:
        """Load a :meth:`state` of this part's examples; w is left to the caller
        (:meth:`reset` with the resynchronised w)."""
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
