"""Single-producer single-consumer rings of records (i, h, Δ, m, φ) in shared memory.

One ring per inference worker: the worker (producer) pushes the records its loss-augmented
inference found, the learner (consumer) pops them. No locks, no pickling.

Shared layout (two arrays of the arena)::

    <key>_ctrl  int64[32]   ctrl[0]  = head  (words ever written; only the producer stores it)
                            ctrl[8]  = tail  (words ever consumed; only the consumer stores it)
                            ctrl[16] = capacity in words (constant)
                            head, tail and the constant each own a 64-byte cache line
    <key>       int64[capacity_words]   the payload, used circularly (position = counter % cap)

head and tail are monotonic int64 word counters (2**63 words never wrap in practice); the ring
holds ``head − tail`` words, so it is empty iff head == tail and has ``cap − (head − tail)`` free.

Record format (int64 words; a record is never split across the end of the payload)::

    [nnz, ex, hash, Δ bits, margin bits, ceil(nnz/2) words = nnz int32 indices (+1 pad),
     nnz words = float64 values]                         size = 5 + ceil(nnz/2) + nnz words

If a record does not fit before the end of the payload, the producer writes a **wrap marker**
(a single word −1 in place of nnz) and the record starts at position 0; the words from the
marker to the end count as used until the consumer passes them. A record larger than the whole
payload can never be pushed: :meth:`RecordRing.push` raises ``ValueError``. Size rings
generously: e.g. capacity ≥ 4 × (largest batch a worker pushes at once) words; a record with
φ of nnz entries needs 5 + 1.5·nnz words (a 1000-token sentence with 50 features per token and
a 50-tag chain has nnz ≲ 60 000 → ~90 000 words = 720 kB).

Ordering: the producer writes payload words in one compiled call and then stores head through a
separate compiled call that begins with a ``fence seq_cst`` (:func:`~demidcd.primitives.seqlock.
fence`: compiler + hardware barrier); the consumer loads head through a call that ends with a
fence, reads the payload, and stores tail after a fence. So neither the compiler nor the CPU can
let the consumer see head before the payload it covers, nor let the producer overwrite words the
consumer is still reading (x86-64 TSO alone already gives these orders in hardware).

A full ring never blocks: ``push`` returns how far it got and the caller decides (keep the
model fresh, back off, retry later).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from .records import INDEX_DTYPE, VALUE_DTYPE, RecordBatch
from .seqlock import fence

__all__ = ["RecordRing", "record_words", "warmup", "HEAD", "TAIL", "CAP", "CTRL_WORDS"]

HEAD = 0
TAIL = 8
CAP = 16
CTRL_WORDS = 32
HDR = 5  # header words per record
WRAP = -1  # wrap marker in the nnz word


def record_words(nnz: int | np.ndarray) -> int | np.ndarray:
    """Payload words used by a record whose φ has ``nnz`` entries: 5 + ceil(nnz/2) + nnz."""
    return HDR + (nnz + 1) // 2 + nnz


@njit(cache=True, nogil=True)
def _acquire_load(ctrl: np.ndarray, i: int) -> int:
    """Acquire-load of a control word (the fence keeps later payload accesses after it)."""
    v = ctrl[i]
    fence()
    return v


@njit(cache=True, nogil=True)
def _release_store(ctrl: np.ndarray, i: int, v: int) -> None:
    """Release-store of a control word (the fence keeps earlier payload accesses before it)."""
    fence()
    ctrl[i] = v


@njit(cache=True, nogil=True)
def _push_kernel(payload: np.ndarray, pf: np.ndarray, pi: np.ndarray, head: int, tail: int,
                 ex: np.ndarray, hs: np.ndarray, delta: np.ndarray, margin: np.ndarray,
                 ptr: np.ndarray, idx: np.ndarray, val: np.ndarray,
                 start: int) -> tuple[int, int, int]:
    """Write records start.. while they fit. Returns (first record not written, new head,
    1 if that record is larger than the whole ring else 0)."""
    cap = payload.shape[0]
    n = ex.shape[0]
    k = start
    while k < n:
        p0 = ptr[k]
        nnz = ptr[k + 1] - p0
        s = HDR + (nnz + 1) // 2 + nnz
        if s > cap:
            return k, head, 1
        free = cap - (head - tail)
        pos = head % cap
        rem = cap - pos
        if s > rem:
            if free < rem:
                break
            payload[pos] = WRAP  # the rest of the payload is skipped
            head += rem
            free -= rem
            pos = 0
        if s > free:
            break
        payload[pos] = nnz
        payload[pos + 1] = ex[k]
        payload[pos + 2] = hs[k]
        pf[pos + 3] = delta[k]
        pf[pos + 4] = margin[k]
        ib = 2 * (pos + HDR)
        for j in range(nnz):
            pi[ib + j] = idx[p0 + j]
        if nnz & 1:
            pi[ib + nnz] = 0
        vb = pos + HDR + (nnz + 1) // 2
        for j in range(nnz):
            pf[vb + j] = val[p0 + j]
        head += s
        k += 1
    return k, head, 0


@njit(cache=True, nogil=True)
def _pop_scan(payload: np.ndarray, tail: int, head: int, max_records: int) -> tuple[int, int]:
    """Count records (and their total nnz) available in [tail, head), at most max_records.
    Returns (-1, position) on a corrupt header."""
    cap = payload.shape[0]
    t = tail
    nrec = 0
    nnz_tot = 0
    while t < head and nrec < max_records:
        pos = t % cap
        nnz = payload[pos]
        if nnz == WRAP:
            t += cap - pos
            continue
        s = HDR + (nnz + 1) // 2 + nnz
        if nnz < 0 or pos + s > cap or t + s > head:
            return -1, t
        nrec += 1
        nnz_tot += nnz
        t += s
    return nrec, nnz_tot


@njit(cache=True, nogil=True)
def _pop_copy(payload: np.ndarray, pf: np.ndarray, pi: np.ndarray, tail: int, head: int,
              ex: np.ndarray, hs: np.ndarray, delta: np.ndarray, margin: np.ndarray,
              ptr: np.ndarray, idx: np.ndarray, val: np.ndarray) -> int:
    """Copy len(ex) records starting at tail into the output arrays; return the new tail
    (also past a trailing wrap marker, which frees space for the producer)."""
    cap = payload.shape[0]
    n = ex.shape[0]
    t = tail
    k = 0
    q = 0
    ptr[0] = 0
    while k < n:
        pos = t % cap
        nnz = payload[pos]
        if nnz == WRAP:
            t += cap - pos
            continue
        ex[k] = payload[pos + 1]
        hs[k] = payload[pos + 2]
        delta[k] = pf[pos + 3]
        margin[k] = pf[pos + 4]
        ib = 2 * (pos + HDR)
        vb = pos + HDR + (nnz + 1) // 2
        for j in range(nnz):
            idx[q + j] = pi[ib + j]
            val[q + j] = pf[vb + j]
        q += nnz
        ptr[k + 1] = q
        t += HDR + (nnz + 1) // 2 + nnz
        k += 1
    if t < head:
        pos = t % cap
        if payload[pos] == WRAP:
            t += cap - pos
    return t

RING_WORDS = 1 << 21  # words per ring (8 bytes each: 16 MiB), the default everywhere. A ring is
# written circularly, so all of it becomes resident: sized for a few times the fullest the
# learner's records showed it on Brown and EWT (benchmarks/README.md, "Memory at a million
# tokens"); a full ring only makes its worker wait
MIN_RING_WORDS = 1 << 17  # 1 MiB: the smallest ring a small /dev/shm gets (fit_ring_words)


def fit_ring_words(ring_words: int, n_rings: int, other_bytes: int, free: int | None) -> int:
    """The capacity to give each of ``n_rings`` rings when ``other_bytes`` of other segments
    share ``free`` bytes of /dev/shm with them: ``ring_words``, halved while the rings do not
    fit (a container's 64 MiB /dev/shm holds 15 rings of 2 MiB, not of 32 MiB), never below
    :data:`MIN_RING_WORDS` (nor above ``ring_words``). A smaller ring only makes a worker wait
    sooner for the learner to drain it; what still does not fit is refused by the caller's
    space check (:func:`~demidcd.primitives.shm.require_space`)."""
    words = int(ring_words)
    if free is None:
        return words
    while words > MIN_RING_WORDS and other_bytes + n_rings * RecordRing.footprint(words) > free:
        words //= 2
    return words


class RecordRing:
    """SPSC ring of records; see the module docstring for layout and ordering.

    Parent: ``ring = RecordRing.allocate(arena, "ring1", 1 << 22)``; child:
    ``RecordRing.attach(ring.spec())``. The producer process only calls :meth:`push`, the
    consumer only :meth:`pop`; :meth:`occupancy` is safe anywhere. Call :func:`warmup` before
    forking so children do not compile.
    """

    def __init__(self, arrays: dict[str, np.ndarray], key: str):
        self.key = key
        self.payload: np.ndarray = arrays[key]
        self.ctrl: np.ndarray = arrays[key + "_ctrl"]
        if self.payload.dtype != np.int64 or self.ctrl.dtype != np.int64:
            raise TypeError("RecordRing needs int64 payload and control arrays")
        self._pf = self.payload.view(np.float64)
        self._pi = self.payload.view(np.int32)
        self.capacity = int(self.payload.shape[0])
        self._spec: dict | None = None

    @staticmethod
    def footprint(capacity_words: int) -> int:
        """The shared-memory bytes :meth:`allocate` takes for a ring of this capacity."""
        from .shm import segment_bytes

        return segment_bytes(int(capacity_words), np.int64) + segment_bytes(CTRL_WORDS, np.int64)

    @staticmethod
    def allocate(arena: Any, key: str, capacity_words: int) -> RecordRing:
        """Create an empty ring of ``capacity_words`` int64 words (8 bytes each) in ``arena``."""
        cap = int(capacity_words)
        if cap < 16:
            raise ValueError(f"ring capacity must be at least 16 words, got {cap}")
        arena.create(key, (cap,), np.int64)
        ctrl = arena.create(key + "_ctrl", (CTRL_WORDS,), np.int64)
        ctrl[CAP] = cap
        ring = RecordRing({key: arena[key], key + "_ctrl": ctrl}, key)
        segs = arena.spec()["segments"]
        ring._spec = {"key": key, "segments": {k: segs[k] for k in (key, key + "_ctrl")}}
        return ring

    def spec(self) -> dict:
        """Picklable description for :meth:`attach` (only from the instance made by allocate)."""
        if self._spec is None:
            raise RuntimeError("spec() is only available on the instance made by allocate()")
        return self._spec

    @staticmethod
    def attach(spec: dict) -> RecordRing:
        """Map the ring in a child process (never registers or unlinks anything)."""
        from .shm import SharedArena

        ring = RecordRing(SharedArena.attach(spec), spec["key"])
        ring._spec = spec
        return ring

    # -- producer --------------------------------------------------------------------------
    def push(self, batch: RecordBatch, start: int = 0) -> int:
        """Push records ``start..`` while they fit; return the index of the first record not
        pushed (``len(batch)`` when all fit). Never blocks. Raises ``ValueError`` for a record
        larger than the whole ring (the records before it are pushed)."""
        n = len(batch)
        if start >= n:
            return n
        head = int(self.ctrl[HEAD])  # only this process writes head
        tail = _acquire_load(self.ctrl, TAIL)
        k, new_head, too_big = _push_kernel(
            self.payload, self._pf, self._pi, head, tail,
            _as(batch.ex, np.int64), _as(batch.hash, np.int64), _as(batch.delta, np.float64),
            _as(batch.margin, np.float64), _as(batch.ptr, np.int64),
            _as(batch.idx, INDEX_DTYPE), _as(batch.val, VALUE_DTYPE), int(start))
        if new_head != head:
            _release_store(self.ctrl, HEAD, new_head)
        if too_big:
            nnz = int(batch.ptr[k + 1] - batch.ptr[k])
            raise ValueError(
                f"record {k} (nnz={nnz}, {record_words(nnz)} words) is larger than ring "
                f"{self.key!r} ({self.capacity} words); allocate a larger ring")
        return int(k)

    # -- consumer --------------------------------------------------------------------------
    def pop(self, max_records: int = 1 << 30) -> RecordBatch:
        """Remove and return all available records (at most ``max_records``), in push order."""
        head = _acquire_load(self.ctrl, HEAD)
        tail = int(self.ctrl[TAIL])  # only this process writes tail
        if head == tail:
            return RecordBatch.empty()
        nrec, nnz = _pop_scan(self.payload, tail, head, int(max_records))
        if nrec < 0:
            raise RuntimeError(f"ring {self.key!r} corrupt at word {nnz} (tail={tail}, "
                               f"head={head})")
        b = RecordBatch(np.empty(nrec, np.int64), np.empty(nrec, np.int64),
                        np.empty(nrec, np.float64), np.empty(nrec, np.float64),
                        np.empty(nrec + 1, np.int64), np.empty(nnz, INDEX_DTYPE),
                        np.empty(nnz, VALUE_DTYPE))
        new_tail = _pop_copy(self.payload, self._pf, self._pi, tail, head, b.ex, b.hash,
                             b.delta, b.margin, b.ptr, b.idx, b.val)
        if new_tail != tail:
            _release_store(self.ctrl, TAIL, new_tail)
        return b

    # -- either side -----------------------------------------------------------------------
    def used_words(self) -> int:
        """Words currently held (including wrap padding)."""
        return int(self.ctrl[HEAD]) - int(self.ctrl[TAIL])

    def occupancy(self) -> float:
        """Fraction of the payload in use, in [0, 1]."""
        return min(max(self.used_words() / self.capacity, 0.0), 1.0)

    def empty(self) -> bool:
        return self.used_words() == 0


def _as(a: np.ndarray, dt: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dt)


def warmup() -> None:
    """Compile (or load from cache) the ring kernels, e.g. in the parent before forking."""
    from .seqlock import warmup as _w

    _w()
    payload = np.zeros(64, np.int64)
    ctrl = np.zeros(CTRL_WORDS, np.int64)
    ring = RecordRing({"r": payload, "r_ctrl": ctrl}, "r")
    b = RecordBatch(np.arange(2, dtype=np.int64), np.arange(2, dtype=np.int64), np.ones(2),
                    np.ones(2), np.array([0, 1, 3], np.int64), np.arange(3, dtype=np.int32),
                    np.ones(3))
    ring.push(b)
    ring.pop()
