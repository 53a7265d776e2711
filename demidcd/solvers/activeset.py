"""Per-example active sets A_i of dual variables α_{i,y}, stored in flat arrays.

The learner sees only records (i, h, Δ, φ) (see :mod:`demidcd.tasks.base`); this class owns the
pools they are copied into and binds them to the update kernels of :mod:`.kernels`. It also owns
the learner's weight vector ``w`` so that w = Σ α φ (Eq. 3) holds by construction.

It is also the one place that decides the per-example update by the loss (``loss``): the L2
loss's coordinate sweeps (:func:`~.kernels.update_examples`) or the L1 loss's SMO
(:func:`~.kernels.smo_examples`), with the matching violation (Eq. 11, or Δ − w·φ − ξ̂_i) and
dual objective; the learners call :meth:`ActiveSets.insert`, :meth:`~ActiveSets.update`,
:meth:`~ActiveSets.violation` and :meth:`~ActiveSets.dual_objective` the same way for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..primitives.pages import release_tail
from ..primitives.seqlock import LINE_SHIFT, mark_array
from ..primitives.vectors import dot
from ..tasks.base import INDEX_DTYPE, RecordBatch
from . import kernels as K

DEFAULT_MAX_ACTIVE = 50  # above the largest active set of uncapped 1-DCD on EWT XPOS, so it
# rarely evicts; a small cap evicts and costs accuracy (benchmarks/README.md, "Evidence behind
# the defaults")


DEFAULT_SWEEPS = 1  # sweeps per example visit at most (kernels.update_examples)
SMO_TAU_SHARE = 0.5  # L1 loss: a visit's SMO steps go on while the example's KKT gap exceeds
# this share of tol, so a later pass (which certifies gaps below tol) starts with some headroom
GARBAGE_SHARE = 0.1  # the φ pool is compacted once freed structures' words pass this share of
# the words used (and COMPACT_MIN_WORDS), and the pages past its live words are handed back:
# its resident size then follows the live structures, not every structure ever admitted (at
# 1/2 it held about twice the live words: benchmarks/README.md, "Pages handed back")
COMPACT_MIN_WORDS = 1 << 18  # ... and once the garbage passes 1 MiB
POOL_WORDS_PER_EXAMPLE = 6144  # φ-pool capacity (int32 words) reserved up front: 2048 valued
# entries or 6144 unit ones (EWT XPOS peaks at ~900 live entries per example; with garbage and
# headroom the pool then never grows during training)


def _pool(words: int) -> tuple[np.ndarray, np.ndarray]:
    """A φ pool of ``words`` int32 words (even) and its float64 view (see :mod:`.kernels`)."""
    pool = np.zeros(words + (words & 1), INDEX_DTYPE)
    return pool, pool.view(np.float64)


def _reserve_pool(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The φ pool (:func:`_pool`) with room for ``POOL_WORDS_PER_EXAMPLE`` words per example,
    at most 1/16 of physical memory. ``np.zeros`` of this size maps fresh zero pages that the OS
    commits only when first written, so the reservation costs what is used; growing by copying
    costs page faults and copies while training starts (benchmarks/README.md)."""
    import psutil

    budget = psutil.virtual_memory().total // 16 // 4  # 4 bytes per word
    words = int(max(1 << 16, min(n * POOL_WORDS_PER_EXAMPLE, budget)))
    try:
        return _pool(words)
    except MemoryError:  # strict overcommit: start small and grow
        return _pool(1 << 16)


@dataclass
class InsertStats:
    admitted: int = 0
    duplicates: int = 0
    rejected: int = 0
    evicted: int = 0


@dataclass
class UpdateStats:
    updates: int = 0
    shrunk: int = 0
    max_pg: float = 0.0
    nonzero_steps: int = 0
    skipped: int = 0
    extra: dict = field(default_factory=dict)


class ActiveSets:
    """Active sets for ``n`` examples over a weight vector of length ``dim``.

    Parameters: ``C`` (Eq. 1), ``delta`` the shrinking threshold of Eq. (9) (the learners pass
    :attr:`~.common.SolverConfig.admit`: δ at most tol; also the admission threshold of Eq. 11),
    ``max_active`` the bound on |A_i| (the smallest-α structure is evicted when a new one
    arrives), ``track_changes`` to mark the lines of 8 entries of w that some admitted φ touches
    (``mark``, one byte per line, set at admission and never cleared): w changes only there, so
    copying the marked lines publishes w exactly, and the update kernel marks nothing (see
    :mod:`.kernels`). ``w`` and ``alpha_sum`` may be given as (zeroed) views, e.g. of one buffer
    [w, A] that is published as a whole. ``hot``: how the kernels change a w shared by several
    learners (:func:`~.kernels.shared_axpy`): None, plain stores (one learner); ``True``, every
    add atomic; a line mask (``mark_array(dim)``), atomic adds on its nonzero lines only.

    ``loss``: ``"l2"`` (Eq. 1–11) or ``"l1"``, the hinge loss: α is then the SDM's λ with
    Σ_y λ_{i,y} ≤ C (the gold structure holds λ0 = C − A_i), :meth:`update` runs the SMO with
    tolerance :data:`SMO_TAU_SHARE` · ``tol`` and at most ``sweeps`` · |A_i| pair steps per visit
    (see :meth:`update`) and the violation's
    tail A_i/(2C) becomes ξ̂_i, the example's hinge loss on its active set, kept in ``xi``
    (may be given as a zeroed view, e.g. the A part of a published [w, A]; it is refreshed with
    the current w before every admission test and at every visit).

    ``coded``: the φ pool's encoding (:mod:`.phi_pool`), packed (about 2.4 bytes a ±1 entry)
    when ``dim`` ≤ :data:`~.kernels.CODED_MAX_DIM`, else valued (12 bytes an entry); either gives
    the same updates, bit for bit. Set before the first insert.
    """

    def __init__(self, n: int, dim: int, C: float, delta: float = 0.01,
                 max_active: int = DEFAULT_MAX_ACTIVE, track_changes: bool = False,
                 w: np.ndarray | None = None, alpha_sum: np.ndarray | None = None,
                 sweeps: int = DEFAULT_SWEEPS, hot: np.ndarray | bool | None = None,
                 loss: str = "l2", tol: float = 0.01, xi: np.ndarray | None = None):
        if loss not in ("l1", "l2"):
            raise ValueError(f"unknown loss {loss!r}")
        self.hot = hot
        self.n, self.dim, self.C, self.delta = n, dim, float(C), float(delta)
        self.loss, self.tau = loss, SMO_TAU_SHARE * float(tol)
        self.sweeps = int(sweeps)
        self.w = np.zeros(dim) if w is None else w
        self.slots = np.full((n, max_active), -1, np.int32)
        self.count = np.zeros(n, np.int32)
        self.alpha_sum = np.zeros(n) if alpha_sum is None else alpha_sum
        self.xi = np.zeros(n) if xi is None else xi  # L1: ξ̂_i (kernels.restricted_slack)
        self.l1 = loss == "l1"
        self._all = np.arange(n, dtype=np.int64)
        self._fresh: RecordBatch | None = None  # the batch whose ξ̂ violation() just refreshed
        cap = max(1024, 4 * n)
        self.s_hash = np.zeros(cap, np.int64)
        self.s_ptr = np.zeros(cap, np.int64)
        self.s_len = np.zeros(cap, np.int32)
        self.s_f = np.zeros((cap, 3))
        self.free_ids = np.zeros(cap, np.int32)
        self.p_idx, self.p_val = _reserve_pool(n)
        self.coded = dim <= K.CODED_MAX_DIM  # the φ pool's encoding (see .kernels)
        self.meta = np.zeros(K.META_FIELDS, np.int64)
        self.track = bool(track_changes)
        self.mark = mark_array(dim if self.track else 0)
        self.ex_pg = np.full(n, np.inf)  # max |PG| of example i at its last visit
        self._stats = np.zeros(K.STATS_FIELDS)
        self._ins = np.zeros(K.INSERT_FIELDS, np.int64)
        self.w0: np.ndarray | None = None  # the prior of a warm start (set_prior)
        self.prior_sq = 0.0  # ‖w₀‖²

    @property
    def hot(self) -> np.ndarray:
        """The update mode as the kernels take it: empty (plain stores), one 1 (every add
        atomic) or a line mask; may be changed between calls (``act.hot = True``)."""
        return self._hot

    @hot.setter
    def hot(self, value: np.ndarray | bool | None) -> None:
        if value is None or value is False:
            value = np.zeros(0, np.uint8)
        elif value is True:
            value = np.ones(1, np.uint8)
        self._hot = value

    def own_arrays(self) -> list[np.ndarray]:
        """The arrays of the active sets themselves (slots, structures, the φ pool, the
        per-example figures); ``w``, ``alpha_sum`` and ``xi`` may be views of the caller's."""
        return [self.slots, self.count, self.s_hash, self.s_ptr, self.s_len, self.s_f,
                self.free_ids, self.p_idx, self.mark, self.ex_pg]

    # ------------------------------------------------------------------ growth
    def _grow_structures(self) -> None:
        cap = self.s_f.shape[0] * 2
        for name in ("s_hash", "s_ptr", "s_len", "free_ids"):
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        s_f = np.zeros((cap, 3))
        s_f[: self.s_f.shape[0]] = self.s_f
        self.s_f = s_f

    def _grow_pool(self, need: int) -> None:
        """Drop the garbage of freed structures from the φ pools, in place when they stay large
        enough for twice the live words plus ``need``, otherwise into pools twice as large."""
        used = int(self.meta[K.M_PUSED])
        live = used - int(self.meta[K.M_PGARB])
        cap = self.p_idx.shape[0]
        if cap >= 2 * (live + need):
            new_idx, new_val = self.p_idx, self.p_val
        else:
            while cap < 2 * (live + need):
                cap *= 2
            new_idx, new_val = _pool(cap)
        K.compact_pool(self.slots, self.count, self.s_ptr, self.s_len, self.p_idx, self.p_val,
                       new_idx, new_val, self.meta)
        if new_idx is self.p_idx:  # the words past the live ones: garbage, resident no more
            release_tail(self.p_idx, int(self.meta[K.M_PUSED]), used)
        self.p_idx, self.p_val = new_idx, new_val

    def compact(self) -> None:
        """Drop the garbage of freed structures from the φ pool now, moving every live
        structure (:func:`~.kernels.compact_pool`) and handing back the pages past them."""
        self._grow_pool(0)

    def maybe_compact(self) -> None:
        """:meth:`compact` once the garbage passes :data:`GARBAGE_SHARE` of the used words."""
        if self.meta[K.M_PGARB] > max(COMPACT_MIN_WORDS, GARBAGE_SHARE * self.meta[K.M_PUSED]):
            self._grow_pool(0)

    # ------------------------------------------------------------------ records
    def refresh_slack(self, examples: np.ndarray | None = None) -> None:
        """L1 loss: recompute ξ̂_i (``xi``) with the current w for ``examples`` (default all)."""
        ex = self._all if examples is None else examples
        K.restricted_slack(ex, self.w, self.slots, self.count, self.s_ptr, self.s_len, self.s_f,
                           self.p_idx, self.p_val, self.xi)

    def violation(self, batch: RecordBatch) -> np.ndarray:
        """Each record's violation under the current w and active sets: Δ − w·φ − A_i/(2C)
        (Eq. 11) for the L2 loss, Δ − w·φ − ξ̂_i for the L1 loss (ξ̂_i refreshed first). The
        margins w·φ are the batch's own (computed with the w it was inferred with)."""
        if not len(batch):
            return np.zeros(0)
        if not self.l1:
            return batch.violation(self.alpha_sum, self.C)
        self.refresh_slack(batch.ex)
        self._fresh = batch  # insert(batch) next needs no second refresh: w has not changed
        return batch.delta - batch.margin - self.xi[batch.ex]

    def insert(self, batch: RecordBatch, admit: float | None = None) -> InsertStats:
        """Admit the records of ``batch`` whose violation (:meth:`violation`, recomputed with
        the current w) exceeds ``admit`` (default δ)."""
        admit = self.delta if admit is None else admit
        out = self._ins
        out[:] = 0
        start = 0
        n = len(batch)
        if self.l1 and n and batch is not self._fresh:
            self.refresh_slack(batch.ex)
        self._fresh = None
        tail, scale = (self.xi, 1.0) if self.l1 else (self.alpha_sum, 1.0 / (2.0 * self.C))
        while start < n:
            K.insert_records(batch.ex, batch.hash, batch.delta, batch.ptr, batch.idx, batch.val,
                             start, self.w, self.slots, self.count, self.alpha_sum, self.s_hash,
                             self.s_ptr, self.s_len, self.s_f, self.p_idx, self.p_val,
                             self.free_ids, self.meta, tail, scale, admit, self.mark,
                             self.track, self.ex_pg, out, self.hot, self.coded)
            start = int(out[K.I_NEXT])
            if start < n:
                if self.meta[K.M_NFREE] == 0 and self.meta[K.M_NEXT] >= self.s_f.shape[0]:
                    self._grow_structures()
                need = int(out[K.I_NEED])
                if self.meta[K.M_PUSED] + need > self.p_idx.shape[0]:
                    self._grow_pool(need)
        return InsertStats(int(out[K.I_ADMITTED]), int(out[K.I_DUPLICATE]),
                           int(out[K.I_REJECTED]), int(out[K.I_EVICTED]))

    def update(self, order: np.ndarray, shrink: bool = True,
               skip_below: float = -1.0, sweeps: int | None = None) -> UpdateStats:
        """One Eq. (7)–(9) pass over the active sets of the examples in ``order``, leaving out
        those whose largest |PG| at their last visit was below ``skip_below`` (see
        :class:`SweepPlan`) and sweeping each example up to ``sweeps`` times (default: the
        ``sweeps`` given at construction). L1 loss: one SMO visit per example instead
        (:func:`~.kernels.smo_examples`) of at most ``sweeps`` · |A_i| pair steps (|A_i| at
        the visit's start), each between the structures with the largest and the smallest
        gradient, until the KKT gap is below τ; ``shrink`` drops the structures with λ = 0
        after the visit, and |PG| reads the example's KKT gap. Solving each example's
        subproblem to τ on every visit (up to 100 steps, as the SDM's SMO does) spends steps
        on examples whose w·φ the next visits change anyway; |A_i| steps per visit certified
        convergence soonest, and one step per visit, whatever |A_i|, certified late
        (benchmarks/README.md, "Evidence behind the defaults")."""
        st = self._stats
        st[:] = 0.0
        self._fresh = None
        if self.l1:
            K.smo_examples(order, self.w, self.slots, self.count, self.alpha_sum, self.s_ptr,
                           self.s_len, self.s_f, self.p_idx, self.p_val, self.free_ids,
                           self.meta, self.C, self.tau, self.sweeps if sweeps is None else sweeps,
                           True, shrink, self.ex_pg, skip_below, self.xi, st, self.hot)
        else:
            K.update_examples(order, self.w, self.slots, self.count, self.alpha_sum, self.s_ptr,
                              self.s_len, self.s_f, self.p_idx, self.p_val, self.free_ids,
                              self.meta, self.C, self.delta, shrink, self.ex_pg, skip_below,
                              self.sweeps if sweeps is None else sweeps, st, self.hot)
        self.maybe_compact()
        return UpdateStats(int(st[K.S_UPDATES]), int(st[K.S_SHRUNK]), float(st[K.S_MAXPG]),
                           int(st[K.S_NONZERO_STEPS]), int(st[K.S_SKIPPED]))

    # ------------------------------------------------------------------ resume, warm start
    def set_prior(self, w0: np.ndarray | None, write: bool = True) -> None:
        """Start from the prior w₀ (warm start, :mod:`.state`): the problem becomes
        min ½‖w − w₀‖² + C Σ ξ², w = w₀ + Σ α φ. ``write``: add w₀ to w (False where another
        process writes the shared w); the lines w₀ touches are marked when tracking, so that
        a publish of the marked lines still carries all of w."""
        if w0 is None:
            return
        self.w0 = w0
        self.prior_sq = dot(w0, w0)
        if write:
            self.w += w0
        if self.track:
            self.mark[np.unique(np.flatnonzero(w0) >> LINE_SHIFT)] = 1

    def state(self, examples: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The dual state of the examples in ``examples`` (default all; in increasing order)
        as the flat arrays of :class:`~.state.DualState` (per-example entries of the other
        examples are left at 0)."""
        ex = self._all if examples is None else np.sort(np.asarray(examples, np.int64))
        e, h, d, a, ptr, idx, val = K.dump_structures(ex, self.slots, self.count, self.s_hash,
                                                      self.s_ptr, self.s_len, self.s_f,
                                                      self.p_idx, self.p_val)
        return {"example": e, "hash": h, "delta": d, "alpha": a, "phi_ptr": ptr,
                "phi_idx": idx, "phi_val": val, **self._per_example(ex)}

    def _per_example(self, ex: np.ndarray) -> dict[str, np.ndarray]:
        """A_i, ξ̂_i and the skipping state of the examples ``ex`` (the others' 0), as saved."""
        out = {}
        for name in ("alpha_sum", "xi", "ex_pg"):
            full = np.zeros(self.n)
            full[ex] = getattr(self, name)[ex]
            out[name] = full
        return out

    def _make_room(self, ex: np.ndarray, words: int) -> None:
        """Room for the structures of examples ``ex`` (one entry a structure) and ``words``
        pool words: every active set widened to hold its old and new structures, the
        structure arrays and the pool grown."""
        per = np.bincount(ex, minlength=self.n)
        width = int((self.count + per).max(initial=0))
        if width > self.slots.shape[1]:
            slots = np.full((self.n, width), -1, np.int32)
            slots[:, :self.slots.shape[1]] = self.slots
            self.slots = slots
        while self.meta[K.M_NEXT] + ex.shape[0] > self.s_f.shape[0]:
            self._grow_structures()
        if self.meta[K.M_PUSED] + words > self.p_idx.shape[0]:
            self._grow_pool(words)

    def restore(self, arrays: dict[str, np.ndarray], examples: np.ndarray | None = None,
                add: bool = True) -> int:
        """Load the structures of a saved state (:meth:`state`; those of ``examples`` only,
        default all) into these (empty) active sets, with their α, A_i, ξ̂_i and skipping
        state, and add their Σ α φ to w (``add=False``: the caller has set w, e.g. the shared
        w of several learners, :func:`~.state.state_w`). Returns the number of structures
        loaded. An example with more saved structures than ``max_active`` widens every active
        set to hold them."""
        keep = np.zeros(self.n, np.bool_)
        keep[self._all if examples is None else np.asarray(examples, np.int64)] = True
        ex = arrays["example"]
        mine = keep[ex]
        lens = np.diff(arrays["phi_ptr"])
        self._make_room(np.asarray(ex[mine], np.int64),
                        int((4 * lens[mine] + 4).sum()))  # pool words, at most (words_bound)
        first = int(self.meta[K.M_NEXT])
        loaded = int(K.load_structures(keep, ex, arrays["hash"], arrays["delta"],
                                       arrays["alpha"], arrays["phi_ptr"],
                                       arrays["phi_idx"].astype(INDEX_DTYPE, copy=False),
                                       arrays["phi_val"], self.slots, self.count,
                                       self.s_hash, self.s_ptr, self.s_len, self.s_f,
                                       self.p_idx, self.p_val, self.meta, self.mark,
                                       self.track, self.coded))
        for name in ("alpha_sum", "xi", "ex_pg"):
            getattr(self, name)[keep] = arrays[name][keep]  # in place: may be views
        if add:
            K.add_structures(self.w, np.arange(first, first + loaded), self.s_ptr, self.s_len,
                             self.s_f, self.p_idx, self.p_val)
        return loaded

    def words_state(self, examples: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """:meth:`state` with φ as the pool stores it (:func:`~.kernels.dump_words`: about 2.4
        bytes a ±1 entry, not 12): "example", "hash", "f" (α, Δ, ‖φ‖² a row), "s_len",
        "w_ptr", "words", the examples saved and their "alpha_sum", "xi", "ex_pg"; loaded by
        :meth:`restore_words` into active sets of the same dimension."""
        ex = self._all if examples is None else np.sort(np.asarray(examples, np.int64))
        e, h, f, ln, ptr, words = K.dump_words(ex, self.slots, self.count, self.s_hash,
                                               self.s_ptr, self.s_len, self.s_f, self.p_idx)
        return {"example": e, "hash": h, "f": f, "s_len": ln, "w_ptr": ptr, "words": words,
                "examples": ex, **self._per_example(ex)}

    def restore_words(self, arrays: dict[str, np.ndarray]) -> int:
        """Add the structures of a :meth:`words_state` (of other examples than those already
        here, e.g. one piece of a checkpoint after another), with their α, A_i, ξ̂_i and
        skipping state; w is the caller's. Returns the number loaded."""
        if self.track:
            raise ValueError("restore_words: the lines a structure touches are not tracked")
        if self.coded != (arrays["s_len"] >= 0).all() and len(arrays["s_len"]):
            raise ValueError("restore_words: the saved pool's encoding is not this one's")
        ex = np.asarray(arrays["example"], np.int64)
        keep = np.zeros(self.n, np.bool_)
        keep[ex] = True
        self._make_room(ex, int(arrays["w_ptr"][-1]))
        loaded = int(K.load_words(keep, ex, arrays["hash"], arrays["f"], arrays["s_len"],
                                  arrays["w_ptr"], arrays["words"].astype(INDEX_DTYPE,
                                                                          copy=False),
                                  self.slots, self.count, self.s_hash, self.s_ptr,
                                  self.s_len, self.s_f, self.p_idx, self.meta))
        keep[np.asarray(arrays["examples"], np.int64)] = True
        for name in ("alpha_sum", "xi", "ex_pg"):
            getattr(self, name)[keep] = arrays[name][keep]
        return loaded

    def max_pg(self, order: np.ndarray) -> float:
        """The stop rule's measure on the examples in ``order`` under the current w, changing
        no α: the largest |PG| (Eq. 8) for the L2 loss, the largest KKT gap g'' − g' (SMO
        with no step; ξ̂ is refreshed on the way) for the L1 loss."""
        if self.l1:
            st = np.zeros_like(self._stats)
            K.smo_examples(order, self.w, self.slots, self.count, self.alpha_sum, self.s_ptr,
                           self.s_len, self.s_f, self.p_idx, self.p_val, self.free_ids,
                           self.meta, self.C, self.tau, 0, False, False, self.ex_pg, -1.0, self.xi,
                           st, self.hot)
            return float(st[K.S_MAXPG])
        return float(K.max_projected_gradient(order, self.w, self.slots, self.count,
                                              self.alpha_sum, self.s_ptr, self.s_len,
                                              self.s_f, self.p_idx, self.p_val, self.C))

    def compile_kernels(self, batch: RecordBatch) -> None:
        """Run every kernel of this loss once (insert, update, pool compaction, dual terms) so
        numba compiles them, or loads them from its cache, now (see
        :func:`demidcd.solvers.warm_up`)."""
        self.insert(batch, 0.0)
        self.update(np.arange(self.n, dtype=np.int64))
        self._grow_pool(0)
        self.dual_objective()

    # ------------------------------------------------------------------ objective
    @property
    def size(self) -> int:
        """Total number of structures in all active sets."""
        return int(self.count.sum())

    def dual_objective(self) -> float:
        """The dual as a lower bound of the primal: −D(α) with D of Eq. (2),
        −D = −½‖w‖² − (1/4C) Σ_i A_i² + Σ Δ α  ≤  P(w) for every w (weak duality); for the L1
        loss Σ Δ λ − ½‖w‖² (no A² term; feasible while every A_i ≤ C). With a prior w₀
        (:meth:`set_prior`) both gain ½‖w₀‖² (:mod:`.state`)."""
        sq, lin = K.dual_terms(self.slots, self.count, self.alpha_sum, self.s_f)
        quad = 0.0 if self.l1 else sq / (4.0 * self.C)
        return float(-0.5 * dot(self.w, self.w) + 0.5 * self.prior_sq - quad + lin)

    def rebuilt_w(self) -> np.ndarray:
        """w₀ + Σ α φ recomputed from the stored structures (Eq. 3; w₀ = 0 without a prior)."""
        w = np.zeros(self.dim)
        K.rebuild_w(w, self.slots, self.count, self.s_ptr, self.s_len, self.s_f, self.p_idx,
                    self.p_val)
        if self.w0 is not None:
            w += self.w0
        return w

    def phi(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """φ of stored structure ``s`` as (sorted int64 indices, float64 values), decoded from
        the pool's compact encoding (:mod:`.phi_pool`)."""
        return K.decode_phi(self.p_idx, self.p_val, int(self.s_ptr[s]), int(self.s_len[s]))

    def memory_bytes(self) -> int:
        """Bytes of the arrays (reserved, not only touched; the φ pool's float64 view is the
        same memory as its int32 words)."""
        arrays = (self.slots, self.count, self.alpha_sum, self.s_hash, self.s_ptr, self.s_len,
                  self.s_f, self.free_ids, self.p_idx, self.mark, self.xi)
        return int(sum(a.nbytes for a in arrays))


FULL_EVERY = 4  # every 4th pass over the active sets visits every example


class SweepPlan:
    """Which examples each pass over the active sets visits.

    A DCD step on structure (i, y) lowers the dual by g²/(2(‖φ‖² + 1/(2C))) (Eq. 7), so
    examples whose projected gradients are already small contribute little (for the L1 loss,
    ``ex_pg`` holds the example's KKT gap, which bounds its SMO steps the same way). The first
    pass and every ``full_every``-th after a full one visit every example; the passes in between
    leave out the share ``skip`` of the examples with the smallest max |PG| at their last visit
    (``ActiveSets.ex_pg``; an example that received a violating structure since is always
    visited). Full passes keep every coordinate visited infinitely often, so DCD's convergence
    (DEMI-DCD paper, Theorem 3) is kept, and only a full pass may certify max |PG| < tol.
    ``skip = 0`` gives plain cyclic passes.
    """

    def __init__(self, act: ActiveSets, skip: float, full_every: int = FULL_EVERY):
        self.act, self.skip, self.full_every = act, float(skip), int(full_every)
        self.since_full = 0  # passes since the last full one began (it included)
        self.full = True
        self._force_full = False

    def threshold(self) -> float:
        """``skip_below`` for the next pass (−1: a full pass); sets :attr:`full`."""
        self.full = (self.skip <= 0.0 or self._force_full
                     or self.since_full % self.full_every == 0)
        self.since_full = 1 if self.full else self.since_full + 1
        self._force_full = False
        if self.full:
            return -1.0
        ex_pg = self.act.ex_pg
        k = min(int(self.skip * ex_pg.shape[0]), ex_pg.shape[0] - 1)
        return float(np.partition(ex_pg, k)[k])

    def saved(self) -> dict[str, int]:
        """Where the plan is in its cycle (for a saved state, :mod:`.state`)."""
        return {"since_full": int(self.since_full), "force_full": int(self._force_full)}

    def restore(self, saved: dict | None) -> None:
        """Go on from :meth:`saved` (None or malformed: start a cycle, with a full pass)."""
        try:
            self.since_full = max(int(saved["since_full"]), 0)
            self._force_full = bool(saved["force_full"])
        except (KeyError, TypeError, ValueError):
            self.since_full, self._force_full = 0, False

    def certifies(self, max_pg: float, tol: float) -> bool:
        """Whether the pass just made proves max |PG| < tol over all active sets; a skipping
        pass that saw max |PG| < tol makes the next pass full."""
        if max_pg < tol and not self.full:
            self._force_full = True
        return max_pg < tol and self.full
