"""The multi-learner coordinator: K learner processes on one shared float64 w, and the rebuilds
that keep w = w₀ + Σ α φ.

:class:`Coordinator` is the process side of the several-learners schedule
(:mod:`demidcd.solvers.multi_dcd`, which holds the algorithm: each learner's DCD-SSVM passes and
the stop rule). It owns a :class:`~.multi.LearnerGroup` (the K forked learners, their commands,
supervision) and the shared arrays the schedule needs besides w: ``mark`` (one byte per line of
``2**LINE_SHIFT`` entries of w that some admitted φ or w₀ touches; w is 0 off them, so only
those lines are saved, zeroed and compared) and, with
:attr:`~.experimental.Experimental.check_rebuild`, ``check`` (each learner's Σ α φ summed
sequentially). It issues the schedule's commands (codes :data:`ADD`, :data:`CERTIFY`,
:data:`CHECK`, :data:`TAIL`, :data:`STATE`; the learners' body answers them) and does what
involves the processes:

* :meth:`Coordinator.rebuild`: pause every learner, keep the marked lines of the old w, zero
  them (w₀ there), let every learner add its part's Σ α φ with atomic adds (``ADD``; a learner
  dying mid-add: add again without it), restart the learners that died (paused, empty active
  sets: α = 0 on their part is a feasible dual point) and measure the drift ‖w_old − Σ α φ‖,
  the updates lost since the last rebuild (:func:`drift`);
* the switch of every learner from plain stores to atomic adds (:meth:`Coordinator.to_atomic`,
  ``TAIL``; a learner restarted later gets it too);
* the periodic records' schedule (:meth:`Coordinator.periodic_due`): every
  :attr:`~.experimental.Experimental.rebuild_every` seconds; with plain stores each is a
  rebuild (the repair of lost updates), less often where one paused the learners for more
  than :data:`REBUILD_SHARE` of that, and with atomic adds a progress record that pauses no
  one (the schedule's, :mod:`demidcd.solvers.multi_dcd`);
* collecting the learners' dual states (``STATE``, one file per part) and the rebuild check
  (``CHECK``);
* the w to return (:meth:`Coordinator.w_out`: a second Ctrl-C mid-rebuild returns the w from
  before it, not the half-added one; a learner lost once the run is stopping is not restarted,
  so the rebuilds from then on lack its part's Σ α φ: the w from before the first of them is
  returned, the one trained with every learner's updates, :attr:`Coordinator.lost_at_stop`).

The learners are not a :class:`~.transport.Transport`: they are peers that each infer and
learn, with no w̄ to publish and no records to drain (see :mod:`.transport`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import numpy as np
from numba import njit

from ..primitives.seqlock import LINE_SHIFT, mark_array
from .experimental import EXPERIMENTAL, REBUILD_EVERY
from .multi import ACTIVE, PAUSE, LearnerGroup

__all__ = ["Coordinator", "ADD", "CERTIFY", "CHECK", "TAIL", "STATE", "REBUILD_EVERY",
           "REBUILD_SHARE", "POLL", "drift", "save_lines", "copy_lines", "part_path",
           "warm_up_kernels"]

ADD, CERTIFY, CHECK, TAIL, STATE = 16, 17, 18, 19, 20  # schedule commands (.multi: 16 on)
REBUILD_SHARE = 0.05  # the periodic rebuilds pause every learner at most this share of the time
# (a rebuild over a w of a GiB takes a good part of a second)
POLL = 0.01  # seconds between the coordinator's checks


@njit(cache=True, nogil=True)
def drift(saved: np.ndarray, w: np.ndarray, lines: np.ndarray) -> tuple[float, int, float]:
    """(‖old − w‖, entries where |old − w| > 1e-10 · max(1, max|w|), ‖w‖) for an old w whose
    given lines of ``2**LINE_SHIFT`` entries are ``saved`` (:func:`save_lines`; both are 0 off
    them), in two passes without temporaries (w has millions of entries and the learners
    wait)."""
    width, dim = 1 << LINE_SHIFT, w.shape[0]
    scale = 1.0
    sq_w = 0.0
    for q in range(lines.shape[0]):
        for j in range(lines[q] << LINE_SHIFT, min((lines[q] << LINE_SHIFT) + width, dim)):
            a = abs(w[j])
            sq_w += a * a
            if a > scale:
                scale = a
    thr = 1e-10 * scale
    sq, n = 0.0, 0
    for q in range(lines.shape[0]):
        first = lines[q] << LINE_SHIFT
        for j in range(first, min(first + width, dim)):
            e = saved[(q << LINE_SHIFT) + j - first] - w[j]
            sq += e * e
            if abs(e) > thr:
                n += 1
    return np.sqrt(sq), n, np.sqrt(sq_w)


@njit(cache=True, nogil=True)
def save_lines(saved: np.ndarray, w: np.ndarray, lines: np.ndarray, back: bool) -> None:
    """The given lines of ``2**LINE_SHIFT`` entries of w one after another in ``saved``
    (``back``: from ``saved`` into w)."""
    width, dim = 1 << LINE_SHIFT, w.shape[0]
    for q in range(lines.shape[0]):
        first = lines[q] << LINE_SHIFT
        for j in range(first, min(first + width, dim)):
            if back:
                w[j] = saved[(q << LINE_SHIFT) + j - first]
            else:
                saved[(q << LINE_SHIFT) + j - first] = w[j]


@njit(cache=True, nogil=True)
def copy_lines(dst: np.ndarray, src: np.ndarray, lines: np.ndarray) -> None:
    """dst ← src on the given lines of ``2**LINE_SHIFT`` entries (``src`` empty: dst ← 0)."""
    width, dim = 1 << LINE_SHIFT, dst.shape[0]
    zero = src.shape[0] == 0
    for q in range(lines.shape[0]):
        for j in range(lines[q] << LINE_SHIFT, min((lines[q] << LINE_SHIFT) + width, dim)):
            dst[j] = 0.0 if zero else src[j]


def warm_up_kernels(w: np.ndarray) -> None:
    """Compile (or load from numba's cache) this module's kernels, before the learners fork."""
    lines = np.zeros(1, np.int64)
    saved = np.zeros(1 << LINE_SHIFT)
    save_lines(saved, w, lines, False)
    drift(saved, w, lines)
    copy_lines(w, w, lines)


def part_path(state_dir: str, k: int) -> str:
    """Where learner k writes its part's dual state at the ``STATE`` command (``np.savez``)."""
    return os.path.join(state_dir, f"part-{k}.npz")


class Coordinator:
    """K learner processes running ``body(group, k)`` on one shared w (module docstring).

    ``base``: w₀, what w is before Σ α φ is added (empty: 0). ``mode``: the learners' update
    mode, ``"plain"``, ``"atomic"`` or ``"hot"`` (:mod:`.experimental`)."""

    def __init__(self, n_examples: int, costs: np.ndarray, dim: int, k: int,
                 body: Callable[[LearnerGroup, int], None], seed: int,
                 log: Callable[[str], None], debug: bool, base: np.ndarray, mode: str):
        self.check = EXPERIMENTAL.check_rebuild
        # the hot mode: no update is lost, and w lacks the private pages between merges, so no
        # periodic record (the callback's snapshots read w) comes until a rebuild
        self.rebuild_every = math.inf if mode == "hot" else float(EXPERIMENTAL.rebuild_every)
        self.k, self.log, self.base, self.mode = k, log, base, mode
        self.group = LearnerGroup(n_examples, costs, dim, k, body, seed, log, debug,
                                  arrays={"mark": (mark_array(dim).shape, np.uint8),
                                          **({"check": ((k, dim), np.float64)}
                                             if self.check else {})})
        self.w, self.mark = self.group.w, self.group.arrays["mark"]
        self.old = (np.zeros(0, np.int64), np.zeros(0))  # w before a rebuild: (lines, saved)
        self.rebuilding = False  # w is incomplete until every ADD came back: old holds it
        self.fallback: tuple[np.ndarray, np.ndarray] | None = None  # (lines, saved): w before
        # the first rebuild that lacked a learner lost at the stop (w_out returns it)
        self.atomic_from: float | None = None  # when the learners turned to atomic adds
        self.counts = {"rebuilds": 0, "restarts": 0, "rebuild_seconds": 0.0}
        self.interval, self.last_record = self.rebuild_every, 0.0

    def set_w(self, w0: np.ndarray) -> None:
        """w ← ``w0`` (w₀ + Σ α φ of a saved state, or w₀) before any learner moves it; its
        non-zero lines are marked (the learners mark their parts' φ too, once they began)."""
        self.w[:] = w0
        self.mark[np.flatnonzero(self.w) >> LINE_SHIFT] = 1

    def start(self, expired: Callable[[], bool]) -> None:
        """Fork the learners (:meth:`~.multi.LearnerGroup.start`)."""
        self.group.start(expired=expired)

    def command(self, cmd: int) -> list[int]:
        """Issue ``cmd`` to every live learner and wait for them; the learners that died."""
        return self.group.command(cmd)

    def live(self) -> list[int]:
        """The learners running now."""
        return [j for j in range(self.k) if self.group.procs[j] is not None]

    def active(self) -> int:
        """Structures in the live learners' active sets (their own counters)."""
        return int(self.group.stats[self.live(), ACTIVE].sum())

    def rebuild(self) -> tuple[float, int, float, int]:
        """Pause the learners and set w = w₀ + Σ α φ; they stay paused. Returns (the drift
        ‖w_old − w‖, entries with drift, ‖w‖, structures in the live learners' active sets).
        Learners that died are restarted (paused) unless the run is stopping."""
        t0 = time.perf_counter()
        group, w = self.group, self.w
        group.command(PAUSE)
        # w = w₀ + Σ α φ is 0 off the lines that w₀ or an admitted φ touches (marked, never
        # cleared): only those are saved, reset and compared. Copying, zeroing and comparing
        # all of w paused the learners too long on a large w (benchmarks/README.md, "Evidence")
        lines = np.flatnonzero(self.mark)
        self.old = (lines, np.empty(lines.shape[0] << LINE_SHIFT))
        save_lines(self.old[1], w, lines, False)
        self.rebuilding = True
        while True:
            copy_lines(w, self.base, lines)
            if not group.command(ADD):  # a learner dying mid-add: add again without it
                break
        self.rebuilding = False
        respawned = [] if group.expired() else group.missing()  # none once the run stops
        for j in respawned:  # restarted with empty active sets (α = 0), paused
            group.respawn(j)
            self.counts["restarts"] += 1
        if respawned and self.atomic_from is not None:
            group.command(TAIL)  # a restarted learner takes atomic adds too
        if group.missing() and self.fallback is None:  # lost at the stop, not restarted: w
            self.fallback = self.old  # lacks its part's α; the w before has its updates
        self.counts["rebuilds"] += 1
        d, entries, w_norm = drift(self.old[1], w, lines)
        self.counts["rebuild_seconds"] += time.perf_counter() - t0
        return float(d), int(entries), float(w_norm), self.active()

    def to_atomic(self, now: float) -> None:
        """Turn every learner from plain stores to atomic adds (``TAIL``) at ``now`` seconds."""
        self.group.command(TAIL)
        self.atomic_from = now

    def periodic_due(self, now: float) -> bool:
        """A periodic record (a rebuild, or a progress record) is due at ``now`` (seconds on
        the run's clock)."""
        return now - self.last_record >= self.interval

    def recorded(self, now: float, began: float | None = None) -> None:
        """A record (a rebuild, or a progress record) was made at ``now``; ``began``: it was a
        periodic rebuild that began then, and the next comes after :attr:`rebuild_every` s or
        later, so that they pause the learners at most :data:`REBUILD_SHARE` of the time."""
        self.last_record = now
        if began is not None:
            self.interval = max(min(2.0 * self.interval, self.rebuild_every),
                                (now - began) / REBUILD_SHARE)

    def rebuild_error(self, prior: np.ndarray | None) -> float | None:
        """With ``check_rebuild``: max |w − w₀ − Σ_k (Σ_{P_k} α φ)|, each part's sum made
        sequentially by its learner (``CHECK``); else None."""
        if not self.check or self.group.incomplete:
            return None
        self.group.command(CHECK)
        return float(np.abs(self.group.arrays["check"].sum(0) + (
            0.0 if prior is None else prior) - self.w).max())

    def collect_parts(self, state_dir: str) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """Each live learner's (part, dual-state arrays), written to ``state_dir`` at the
        ``STATE`` command (a learner that died meanwhile: its α is lost)."""
        self.group.command(STATE)
        parts = []
        for j, part in enumerate(self.group.parts):
            path = part_path(state_dir, j)
            if os.path.exists(path):
                with np.load(path, allow_pickle=False) as z:
                    parts.append((part, {key: z[key] for key in z.files}))
        return parts

    @property
    def lost_at_stop(self) -> bool:
        """A learner was lost once the run was stopping: :meth:`w_out` is the w from before
        the first rebuild without it (w = w₀ + Σ α φ up to the updates lost since the last
        rebuild), not one rebuilt from the other learners' α alone (its part's α = 0: a
        feasible dual point, but a model that scored 12 F1 where the run had reached 89)."""
        return self.fallback is not None

    def w_out(self) -> np.ndarray:
        """A copy of w to return; interrupted mid-rebuild (a second Ctrl-C), the w from
        before it; a learner lost at the stop (:attr:`lost_at_stop`), the w from before the
        first rebuild without it."""
        kept = self.fallback if self.fallback is not None else \
            self.old if self.rebuilding else None
        if kept is not None:
            w = np.zeros(self.w.shape[0])
            save_lines(kept[1], w, kept[0], True)
            return w
        return self.w.copy()

    def close(self) -> None:
        """Stop the learners and unlink every segment (:meth:`~.multi.LearnerGroup.close`)."""
        self.group.close()
