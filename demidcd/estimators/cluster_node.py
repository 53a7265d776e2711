"""One node of a Ray cluster run (:mod:`.cluster`): a Ray actor that reads, encodes and trains
on its own part of the training data only.

Set-up, each step called by the driver (the stages of :mod:`.parts`, one node a part):
:meth:`ClusterNode.read` parses the node's byte range (or files), :meth:`~ClusterNode.count`
returns its features' counts (the featurizer's ``count_part``; the driver merges them into
the one dictionary), :meth:`~ClusterNode.encode` encodes the part with its map to the final
ids (``encode_part``; and returns its seen (feature, label) pairs as codes f·K + y),
:meth:`~ClusterNode.bind` builds the part's :class:`~demidcd.solvers.cocoa.LocalPart`
(:meth:`~ClusterNode.restore` then loads an α checkpoint, piece by piece, for a part that
moves here from a lost node). A node's memory is kept as a one-machine learner's: glibc's
malloc thresholds fixed, the compiler's pages released once every kernel is loaded
(:mod:`demidcd.primitives.pages`), the set-up's kernels loaded before the part is read
(:func:`~.parts.warm_builtin_parts`), the part's feature names packed and its labels coded,
the heap trimmed every :data:`TRIM_SECONDS`, changes sent with int32 indices (what each step saved:
docs/learners-and-tasks.md).

Training runs in one thread a CPU of the node (:meth:`~ClusterNode.bind` ``lanes``; each on
its own contiguous range of the part's examples, :class:`~demidcd.solvers.cocoa.LocalPart`):
thread 0 (:meth:`ClusterNode._main`) runs slices of local DCD and, between them, commits
Δw_k every :data:`COMMIT_SECONDS` (longer when a commit is dear) into the outbox, applies the
others' merged changes from the inbox and answers evaluations; threads 1… (:meth:`_lane`)
run slices of local DCD meanwhile, all on the node's one u with atomic adds. A checkpoint
piece is taken by the thread whose examples it holds, between two of its slices; a pause
(a resynchronisation) parks every thread between two slices. A thread whose last epoch was
quiet waits for news instead of spinning. The driver keeps one :meth:`~ClusterNode.pull`
in flight (it returns once a commit is there) and never waits for a node; nothing here waits
for another node either. Changes carry a generation: a resynchronisation after a lost node
(:meth:`~ClusterNode.pause` → :meth:`~ClusterNode.resume`) discards the older ones, whose
effect the resynchronised w already holds (w = Σ α φ, rebuilt from every part's α).
"""

from __future__ import annotations

import gc
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from ..io.shards import ByteRange
from ..io.tagged import read_tagged, read_tagged_part
from ..primitives.monitor import CpuMonitor
from ..primitives.pages import fixed_malloc_thresholds, release_library_pages, trim_heap
from ..solvers import warm_up
from ..solvers.cocoa import LocalPart, coordinate_sigma, warm_kernels
from ..tasks.chain.features import EncodedSequences, SequenceFeaturizer
from ..tasks.chain.partial import has_partial
from ..tasks.chain.records import seen_pairs
from ..tasks.chain.task import SequenceTask
from .layout import encoded_bytes
from .parts import warm_builtin_parts

SLICE_SECONDS = 0.05  # local work between looks at the inbox
COMMIT_SECONDS = 0.05  # a node's change goes to the merge this often at most (a round of
COMMIT_COST_RATIO = 4.0  # CoCoA+: rounds, not local epochs, set the pace), and no more often
# than this many times the last commit's cost (a scan of w): under 20% of the node's time


TRIM_SECONDS = 2.0  # the training thread hands freed heap back this often (malloc_trim)


def versions() -> dict[str, str]:
    """What must agree between the driver and every node."""
    import numba

    from .. import __version__

    return {"demidcd": __version__, "python": ".".join(map(str, sys.version_info[:3])),
            "numpy": np.__version__, "numba": numba.__version__}


class ClusterNode:
    """A node's part of the training data and its local engine (module docstring)."""

    def __init__(self, k: int) -> None:
        fixed_malloc_thresholds()  # a Ray worker's heap as a training process's (pages)
        self.k = k
        self.monitor = CpuMonitor({"node": os.getpid()}, interval=0.5).start()
        self.X: Any = None
        self.Y: Any = None
        self.f: SequenceFeaturizer | None = None
        self.part: LocalPart | None = None
        self.cv = threading.Condition()
        self.inbox: list[tuple[int, np.ndarray, np.ndarray]] = []
        self.outbox: list[tuple[np.ndarray, np.ndarray]] = []
        self.epochs: list[dict] = []
        self.evals: list[tuple[int, float, int]] = []
        self.eval_req: list[tuple[int, np.ndarray]] = []
        self.ckpt_req: tuple[int, int] | None = None
        self.ckpt: dict | None = None
        self.gen = 0
        self.pause_req: int | None = None
        self.paused = True
        self.own: np.ndarray | None = None
        self.stopping = False
        self.error: str | None = None
        self.thread: threading.Thread | None = None
        self.threads: list[threading.Thread] = []
        self.hold = False  # the lanes park at their next slice boundary (pause)
        self.thread_cpu: list[float] = []  # each learner thread's CPU seconds, at its end
        self.terms = (0.0, 0.0)

    # ------------------------------------------------------------------ set-up
    def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "host": socket.gethostname(), "node_id": ctx.get_node_id(),
                **versions()}

    def read(self, path: str | list[str], r: ByteRange | None, fmt: str, column: Any,
             features: tuple, encoding: str, max_len: int, unknown_label: str,
             state: dict | None) -> dict[str, Any]:
        """Parse this node's part: byte range ``r`` of ``path`` (None: nothing), or every file
        of a list (``state``: the columns parser's after the file's first token line)."""
        from ..tasks import get_task

        warm_builtin_parts()  # (before the part is read: what loading keeps, numba's type and
        # dispatcher objects, then lies in the heap below the part's tokens, not among them)
        gc.collect()
        if isinstance(path, list):
            corpora = [read_tagged(p, fmt=fmt, column=column, encoding=encoding,
                                   max_sentence_length=max_len, keep_raw=bool(features),
                                   feature_columns=features, unknown_label=unknown_label)
                       for p in path]
            tokens = [s for c in corpora for s in c.tokens]
            corpus = corpora[0] if corpora else None
            if corpus is not None:
                corpus.tokens = tokens
                corpus.tags = [s for c in corpora for s in c.tags]
                if features:
                    corpus.attributes = [s for c in corpora for s in c.attributes]
        elif r is None:
            corpus = None
        else:
            corpus = read_tagged_part(path, r, fmt, column, encoding, max_len,
                                      keep_raw=bool(features), feature_columns=features,
                                      state=state, unknown_label=unknown_label)
        if corpus is None or not corpus.tokens:
            self.X, self.Y = [], []
            return {"examples": 0, "tokens": 0, "labels": [], "partial": False}
        self.X, Y = get_task("sequence").xy(corpus)
        del corpus
        partial = has_partial(Y)
        labels = [] if partial else sorted({t for s in Y for t in s})
        # the labels as codes into ``labels`` (a Python list per sentence no more)
        code = {t: j for j, t in enumerate(labels)}
        self.Y = labels, np.fromiter((code[t] for s in Y for t in s), np.int32,
                                     count=sum(map(len, Y))) if not partial else None
        del Y
        return {"examples": len(self.X), "tokens": sum(map(len, self.X)), "labels": labels,
                "partial": partial}

    def count(self, params: tuple[int, int, str]) -> dict | None:
        """This part's feature counts (:meth:`SequenceFeaturizer.count_part` of a featurizer
        of ``params`` (min_count, hashing, template), kept for :meth:`encode`); None for an
        empty part."""
        self.f = SequenceFeaturizer(*params)
        return self.f.count_part(self.X) if self.X else None

    def encode(self, payload: tuple | None, F: int, classes: list[str], pairs: bool
               ) -> tuple[np.ndarray | None, int, np.ndarray]:
        """Encode the part with its map to the final ids (``payload``: the merge's for this
        part, :meth:`SequenceFeaturizer.encode_part`; ``F`` features in all); drop its Python
        objects. Returns (its seen pairs as codes f·K + y when ``pairs``, the encoded arrays'
        bytes, the features it fires as packed bits)."""
        if self.X:
            self.enc = self.f.encode_part(payload)
        else:
            self.enc = EncodedSequences(np.zeros(1, np.int64), np.zeros(1, np.int64),
                                        np.zeros(0, np.int32))
        index = {t: j for j, t in enumerate(classes)}
        if self.X:
            labels, local = self.Y
            self.y = np.array([index[t] for t in labels], np.int32)[local]
        else:
            self.y = np.zeros(0, np.int32)
        self.F, self.K = F, len(classes)
        self.X = self.Y = self.f = None
        gc.collect()
        trim_heap()  # the set-up's freed heap back to the system (it stays resident otherwise)
        codes = None
        if pairs and self.enc.n_sentences:
            off, lab = seen_pairs(self.enc, self.y, self.F, self.K)
            codes = np.repeat(np.arange(self.F, dtype=np.int64), np.diff(off)) * self.K + lab
        fired = np.packbits(np.bincount(self.enc.feat_idx, minlength=self.F) > 0)
        return codes, encoded_bytes(self.enc), fired

    def bind(self, pairs: tuple | None, config: Any, parts: int,
             parts_of_feature: np.ndarray | None, seed: int, lanes: int = 1
             ) -> tuple[int, int]:
        """The part's task and local engine (paused until :meth:`resume`), with one σ′ =
        ``parts`` for every coordinate (``parts_of_feature`` None: φ stays ±1 in the packed
        pool) or σ′_j the number of parts that fire coordinate j's feature
        (:func:`coordinate_sigma`), trained by ``lanes`` threads (the node's cores; fewer
        when the part has fewer examples). Returns (the dimension of w, the threads)."""
        if pairs is not None:
            pairs = (np.array(pairs[0]), np.array(pairs[1]))
        task = SequenceTask(self.enc, self.y, self.K, self.F, n_bigram_obs=0, pairs=pairs)
        sig = parts if parts_of_feature is None else \
            coordinate_sigma(parts_of_feature, self.K, task.dim, parts, pairs)
        self.part = LocalPart(task, config, sig, [seed, self.k], lanes=max(1, int(lanes)))
        L = self.part.n_lanes
        self.lane_epoch, self.lane_quiet = [0] * L, [False] * L
        self.lane_terms = [(0.0, 0.0)] * L
        self.lane_ckpt: list[tuple[int, int] | None] = [None] * L
        self.parked: set[int] = set()
        self.thread_cpu = [0.0] * L
        warm_kernels()
        warm_up(task, "dcd", 1, config.loss, state=True)  # every kernel the part calls, then
        release_library_pages()  # the compiler's pages go (as a one-machine learner's do)
        self.threads = [threading.Thread(target=self._main, name=f"node-{self.k}",
                                         daemon=True)]
        self.threads += [threading.Thread(target=self._lane, args=(j,), daemon=True,
                                          name=f"node-{self.k}-lane-{j}")
                         for j in range(1, L)]
        self.thread = self.threads[0]
        for t in self.threads:
            t.start()
        return task.dim, L

    # ------------------------------------------------------------------ the driver's calls
    def offer(self, gen: int, change: tuple[np.ndarray, np.ndarray]) -> None:
        """Another part's merged change (indices, values) of generation ``gen``."""
        with self.cv:
            if gen == self.gen:
                self.inbox.append((gen, change[0], change[1]))

    def pull(self, wait: float) -> tuple:
        """(generation, Δw indices, values, dual terms, finished epochs, evaluations, error):
        once a commit, an epoch, an evaluation or an error is there, or after ``wait`` s."""
        t_end = time.perf_counter() + wait
        with self.cv:
            while not (self.outbox or self.evals or self.error or self.stopping) and \
                    time.perf_counter() < t_end:
                self.cv.wait(max(0.0, t_end - time.perf_counter()))
            return self._take()

    def _take(self) -> tuple:
        out, self.outbox = self.outbox, []
        epochs, self.epochs = self.epochs, []
        evals, self.evals = self.evals, []
        if len(out) == 1:
            idx, val = out[0]
        elif out:
            idx = np.concatenate([o[0] for o in out])
            val = np.concatenate([o[1] for o in out])
        else:
            idx, val = np.zeros(0, np.int32), np.zeros(0)
        return self.gen, idx, val, self.terms, epochs, evals, self.error

    def evaluate(self, eid: int, w: np.ndarray) -> None:
        """Queue a primal evaluation of this part at ``w`` (answered through :meth:`pull`)."""
        with self.cv:
            self.eval_req.append((eid, w))
            self.cv.notify_all()

    def restore(self, piece: dict) -> int:
        """Load one piece of the α checkpoint of a part that moves here (after :meth:`bind`,
        before the resynchronisation resumes it). Returns the structures loaded."""
        with self.cv:
            return self.part.restore_checkpoint(piece)

    def checkpoint(self, piece: int = 0, pieces: int = 1, timeout: float = 60.0
                   ) -> dict | None:
        """Piece ``piece`` of ``pieces`` of the part's α (:meth:`LocalPart.checkpoint`: φ as
        the pool stores it, in pieces: a copy of the whole pool at once was a spike of twice
        its size on the node and on the driver; ``pieces`` at least the node's threads), taken
        by the thread whose examples it holds between two of its slices (the others train
        on)."""
        j = self.part.piece_lane(piece, pieces)
        with self.cv:
            self.ckpt, self.lane_ckpt[j] = None, (piece, pieces)
            self.cv.notify_all()
            t_end = time.perf_counter() + timeout
            while self.ckpt is None and not self.error and \
                    all(t.is_alive() for t in self.threads) and time.perf_counter() < t_end:
                self.cv.wait(0.05)
            ck, self.ckpt = self.ckpt, None
            return ck

    def pause(self, gen: int, timeout: float = 120.0) -> np.ndarray:
        """Stop between two slices, discard the unmerged changes of older generations (the
        resynchronised w holds them) and return Σ α φ of this part."""
        with self.cv:
            self.own, self.pause_req = None, gen
            self.cv.notify_all()
            t_end = time.perf_counter() + timeout
            while self.own is None and not self.error and time.perf_counter() < t_end:
                self.cv.wait(0.05)
            own, self.own = self.own, None
        if own is None:
            raise RuntimeError(f"node {self.k + 1} did not pause: {self.error or 'timeout'}")
        return own

    def resume(self, gen: int, w: np.ndarray) -> None:
        """Go on from the global ``w`` (v = base = w), in generation ``gen``."""
        with self.cv:
            self.part.reset(np.asarray(w, np.float64))
            self.gen = gen
            self.inbox = [m for m in self.inbox if m[0] == gen]
            self.outbox = []
            self.paused = False
            self.cv.notify_all()

    def stop(self, timeout: float = 30.0) -> tuple:
        """End the training thread after its current slice; its last change is committed and
        returned with everything not yet pulled (as :meth:`pull`)."""
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        for t in self.threads:
            t.join(timeout)
        with self.cv:
            return self._take()

    def final_loss(self, w: np.ndarray) -> tuple[float, int]:
        """This part's loss term of the primal at ``w`` (after :meth:`stop`)."""
        return self.part.loss_part(w, final=True)

    def peak(self) -> dict[str, Any]:
        """Peak memory (PSS of this node's process, MiB), its average CPU (%, 100 = one
        busy core) and the CPU seconds each learner thread used (the threads that ran)."""
        self.monitor.stop()
        return {"peak_mib": self.monitor.peak_pss / 2**20, "pid": os.getpid(),
                "cpu": self.monitor.average(), "thread_cpu": list(self.thread_cpu)}

    # ------------------------------------------------------------------ the training threads
    def _lane_done(self, j: int, info: dict | None) -> None:
        """Lane j's slice ended (under the lock): its dual terms, and its epoch's record as
        the node's (the node's epoch: the fewest any lane has finished; quiet: every lane's
        last epoch was)."""
        if info is None:
            return
        self.lane_epoch[j], self.lane_quiet[j] = info["epoch"], info["quiet"]
        self.epochs.append({**info, "epoch": min(self.lane_epoch),
                            "quiet": all(self.lane_quiet)})

    def _lane_checkpoint(self, j: int) -> None:
        """Take lane j's checkpoint piece if one is asked for (lane j's thread)."""
        with self.cv:
            want, self.lane_ckpt[j] = self.lane_ckpt[j], None
        if want is not None:
            ck = self.part.checkpoint(*want)
            with self.cv:
                self.ckpt = ck
                self.cv.notify_all()

    def _lane(self, j: int) -> None:
        """Lane j ≥ 1: slices of DCD on its examples beside lane 0 (:meth:`_main`), which
        merges; parks while the node is paused or a pause is under way."""
        part = self.part
        quiet = False
        try:
            while True:
                with self.cv:
                    while (self.paused or self.hold) and not self.stopping and \
                            self.lane_ckpt[j] is None:
                        self.parked.add(j)
                        self.cv.notify_all()
                        self.cv.wait(0.05)
                    self.parked.discard(j)
                    if self.stopping:
                        break
                self._lane_checkpoint(j)
                if quiet:  # converged here: wait for news
                    with self.cv:
                        if not self.inbox:
                            self.cv.wait(SLICE_SECONDS)
                    quiet = False
                    continue
                info = part.work(SLICE_SECONDS, j)
                terms = part.dual_terms(j)
                with self.cv:
                    self.lane_terms[j] = terms
                    self._lane_done(j, info)
                if info is not None:
                    quiet = info["quiet"]
        except BaseException:  # noqa: BLE001 - reported to the driver by pull
            with self.cv:
                self.error = traceback.format_exc()
                self.cv.notify_all()
        finally:
            with self.cv:
                self.thread_cpu[j] = time.thread_time()
                self.parked.add(j)
                self.cv.notify_all()

    def _park_lanes(self) -> None:
        """Wait (under the lock) until every other lane is parked between two slices."""
        others = set(range(1, self.part.n_lanes))
        while not others <= self.parked and not self.error:
            self.cv.wait(0.05)

    def _main(self) -> None:
        """Lane 0: its slices of DCD, and between them the node's merges (the others'
        changes applied, its own committed), evaluations, its checkpoint pieces and pauses;
        the other lanes train meanwhile (:meth:`_lane`)."""
        part = self.part
        last = time.perf_counter()
        quiet = False  # the last epoch had no violator and max |PG| < tol
        cost = 0.0  # seconds the last commit took (a scan of w)
        trimmed = last
        try:
            while True:
                with self.cv:
                    if self.pause_req is not None:
                        self.hold = True
                        self.cv.notify_all()
                        self._park_lanes()
                        part.commit()  # in α (own_w) already: not sent
                        self.gen, self.pause_req = self.pause_req, None
                        self.inbox, self.outbox = [], []
                        self.paused, self.hold = True, False
                        self.own = part.own_w()
                        self.cv.notify_all()
                    while (self.paused and not self.stopping and self.lane_ckpt[0] is None
                           and self.pause_req is None):
                        self.cv.wait(0.05)
                    if self.pause_req is not None:
                        continue
                    if self.stopping:
                        break
                    inbox, self.inbox = self.inbox, []
                    evals, self.eval_req = self.eval_req, []
                for gen, idx, val in inbox:
                    if gen == self.gen:
                        part.apply(idx, val)
                for eid, w in evals:
                    loss, nv = part.loss_part(w)
                    with self.cv:
                        self.evals.append((eid, loss, nv))
                        self.cv.notify_all()
                self._lane_checkpoint(0)
                if self.paused:
                    continue
                if quiet and not inbox and not evals:  # converged here: wait for news
                    with self.cv:
                        if not self.inbox:
                            self.cv.wait(SLICE_SECONDS)
                    quiet = False
                    continue
                info = part.work(SLICE_SECONDS)
                if info is not None:
                    quiet = info["quiet"]
                    with self.cv:
                        self._lane_done(0, info)
                now = time.perf_counter()
                if now - last >= max(COMMIT_SECONDS, COMMIT_COST_RATIO * cost):
                    self._commit()
                    last = time.perf_counter()
                    cost = last - now
                if now - trimmed >= TRIM_SECONDS:  # the messages' freed heap (Ray's
                    trim_heap()  # threads' arenas too) back to the system
                    trimmed = time.perf_counter()
        except BaseException:  # noqa: BLE001 - reported to the driver by pull
            with self.cv:
                self.error = traceback.format_exc()
                self.cv.notify_all()
        finally:
            for t in self.threads[1:]:  # (stopping or failed: they end after their slice)
                t.join(SLICE_SECONDS * 200)
            if self.error is None and not self.paused:
                self._commit()
            self.thread_cpu[0] = time.thread_time()

    def _commit(self) -> None:
        idx, val = self.part.commit()
        shared = self.part.shared
        terms = self.part.dual_terms(0 if shared else None)
        with self.cv:
            if len(idx):
                self.outbox.append((idx, val))
            if shared:
                self.lane_terms[0] = terms
                terms = (sum(t[0] for t in self.lane_terms), sum(t[1] for t in self.lane_terms))
            self.terms = terms
            self.cv.notify_all()
