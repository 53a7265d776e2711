"""The shared weight vector w̄: double buffering under two sequence counters (one writer, the
learner; many readers, the workers).

Layout: two buffers ``buf[0]``, ``buf[1]`` (float64[dim] each) and a header of int64 counters:
``BEGUN`` = publishes started, ``DONE`` = publishes completed. Version v (v = DONE after the v-th
publish) lives in ``buf[v % 2]``. Protocol::

    writer (publish v+1):  BEGUN = v+1 ; fence ; write buf[(v+1) % 2] ; fence ; DONE = v+1
    reader:                v = DONE ; fence ; read buf[v % 2] ... ; fence ; ok iff BEGUN ≤ v+1

The writer only ever writes the buffer that is *not* current, so a reader of version v is safe
until publish v+2 begins (the next write to ``buf[v % 2]``): a reader never uses a torn
(half-written) vector, and, unlike a single-buffer seqlock, one publish during a read costs the
reader nothing. A read that overlapped two publishes is reported invalid and redone. This lets
the learner publish every few milliseconds while workers read w̄ in place for whole chunks.

Keeping the idle buffer current costs no full copies: w is sparse in a known way. The learner
marks every line of 8 entries that some admitted φ touches (``mark[j >> LINE_SHIFT] = 1``, at
admission); w = Σ α φ is zero everywhere else, so :meth:`SharedWeights.publish_lines` copies
the marked lines (and the tail, A) into ``buf[(v+1) % 2]`` and that buffer is then exact.
Marking at admission rather than at every change keeps the update kernel free of stores other
than w (marking changed lines there is costly: benchmarks/README.md, "Marks at admission").
On EWT XPOS the touched lines are about
30% of w's lines (6% of its entries).

Memory ordering — the guarantee relied on
-----------------------------------------
The counter stores must stay ordered with the data stores (writer) and the counter loads with
the data loads (reader), against both compiler and CPU reordering. Each counter access sits in
its own compiled function next to an explicit ``fence seq_cst`` LLVM instruction
(:func:`fence`): LLVM never moves a load or store across a fence, and the fence is a hardware
barrier (``lock or`` on x86-64, ``dmb ish`` on AArch64), so the protocol does not depend on
x86-64 TSO. Aligned 8-byte loads/stores are atomic on every 64-bit target we support, so a
counter value is never itself torn. Exactly one process may write (the learner).

Reader starvation
-----------------
A reader that copies all of w̄ (:meth:`SharedWeights.read_into`) fails only if two publishes
began during its copy. After a failed attempt it raises the ``want`` flag (``hdr[WANT]``, its
own cache line); while it is set the writer *defers* publishes for at most ``max_defer`` seconds
(default 0.5 s), keeping the changes for the next publish. Correctness never depends on the
flag, only progress.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import njit, types
from numba.core.extending import intrinsic

__all__ = ["SharedWeights", "fence", "load_word", "store_word", "BEGUN", "DONE", "WANT",
           "HDR_WORDS", "LINE_SHIFT", "mark_array", "warmup"]

BEGUN, DONE = 0, 1  # hdr indices of the publish counters (one cache line)
WANT = 8  # hdr index of the reader-wants-a-pause flag (separate 64-byte cache line)
HDR_WORDS = 16
LINE_SHIFT = 3  # w is marked and copied per line of 8 entries (64 bytes, a cache line)


def mark_array(n: int) -> np.ndarray:
    """Zeroed line marks for entries 0..n−1: one byte per line of ``2**LINE_SHIFT`` entries,
    padded to a multiple of 8 bytes (read as uint64 words by :func:`_copy_lines`)."""
    lines = (n >> LINE_SHIFT) + 1
    return np.zeros(-(-lines // 8) * 8, np.uint8)


@intrinsic
def fence(typingctx: Any) -> Any:
    """``fence seq_cst``: a full compiler and hardware memory barrier (njit-callable)."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _store_counter(hdr: np.ndarray, i: int, v: int) -> None:
    fence()
    hdr[i] = v
    fence()


@njit(cache=True, nogil=True)
def _load_counter(hdr: np.ndarray, i: int) -> int:
    fence()
    v = hdr[i]
    fence()
    return v


def load_word(a: np.ndarray, i: int) -> int:
    """Acquire-load of the shared int64 control word ``a[i]`` (a 1-d array): no later load or
    store is moved before it, by the compiler or the CPU (fences on both sides)."""
    return int(_load_counter(a, i))


def store_word(a: np.ndarray, i: int, v: int) -> None:
    """Release-store ``a[i] = v``: every earlier store (ring records, other stats) is visible to
    a reader that acquire-loads this word and sees ``v``."""
    _store_counter(a, i, v)


@njit(cache=True, nogil=True)
def _copy_full(dst: np.ndarray, src: np.ndarray) -> None:
    for j in range(src.shape[0]):
        dst[j] = src[j]


@njit(cache=True, nogil=True)
def _copy_lines(dst: np.ndarray, src: np.ndarray, lines: np.ndarray, tail: int) -> int:
    """Copy src → dst on every line of ``2**LINE_SHIFT`` entries of src[:tail] marked (byte
    ≠ 0) in ``lines``, and src[tail:] whole. Runs of marked lines are copied as one block;
    eight unmarked lines are skipped with one uint64 test. Returns the number of lines copied."""
    lines64 = lines.view(np.uint64)
    n_lines = lines.shape[0]
    copied = 0
    k = 0
    while k < n_lines:
        if (k & 7) == 0 and lines64[k >> 3] == 0:
            k += 8
            continue
        if lines[k] == 0:
            k += 1
            continue
        first = k
        while k < n_lines and lines[k] != 0:
            k += 1
        copied += k - first
        for j in range(first << LINE_SHIFT, min(k << LINE_SHIFT, tail)):
            dst[j] = src[j]
    for j in range(tail, src.shape[0]):
        dst[j] = src[j]
    return copied


class SharedWeights:
    """w̄ = two float64[dim] buffers plus an int64[16] header, in shared memory.

    Writer (learner only): :meth:`publish` (whole vector), :meth:`publish_lines` (the lines
    that can be non-zero), :meth:`flush`. Readers (workers): :meth:`read_into` (a consistent
    copy), or in place: ``v = read_begin()``, use :meth:`buffer` ``(v)``, then
    :meth:`read_valid` ``(v)``. Build with :meth:`allocate` in the parent, ship :meth:`spec`
    to children and :meth:`attach` there (warm the kernels with :func:`warmup` before
    forking).
    """

    def __init__(self, arrays: dict[str, np.ndarray], key: str = "wbar",
                 max_defer: float = 0.5):
        self.key = key
        self.buf: np.ndarray = arrays[key]
        self.hdr: np.ndarray = arrays[key + "_hdr"]
        if self.buf.dtype not in (np.float64, np.float32) or self.buf.ndim != 2 \
                or self.buf.shape[0] != 2 or self.hdr.dtype != np.int64:
            raise TypeError("SharedWeights needs float64 or float32 [2, dim] buffers and an "
                            "int64 header")
        self.dim = int(self.buf.shape[1])
        self.max_defer = float(max_defer)
        self._spec: dict | None = None
        # writer-side state (only meaningful in the writer process)
        self._pending_full = False  # a deferred whole-vector publish
        self._defer_since: float | None = None

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def footprint(dim: int, dtype: type = np.float64) -> int:
        """The shared-memory bytes :meth:`allocate` takes for ``dim`` entries of ``dtype``."""
        from .shm import segment_bytes

        return segment_bytes((2, int(dim)), dtype) + segment_bytes(HDR_WORDS, np.int64)

    @staticmethod
    def allocate(arena: Any, dim: int, key: str = "wbar", max_defer: float = 0.5,
                 dtype: type = np.float64) -> SharedWeights:
        """Create w̄ = 0 (version 0) in ``arena`` (a :class:`~demidcd.primitives.shm.SharedArena`),
        stored as ``dtype`` (float64, or float32: publishes round the writer's float64 w)."""
        arena.create(key, (2, int(dim)), dtype)
        arena.create(key + "_hdr", (HDR_WORDS,), np.int64)
        sw = SharedWeights({key: arena[key], key + "_hdr": arena[key + "_hdr"]}, key, max_defer)
        segs = arena.spec()["segments"]
        sw._spec = {"key": key, "max_defer": max_defer,
                    "segments": {k: segs[k] for k in (key, key + "_hdr")}}
        return sw

    def spec(self) -> dict:
        """Picklable description for :meth:`attach` (only from an allocated instance)."""
        if self._spec is None:
            raise RuntimeError("spec() is only available on the instance made by allocate()")
        return self._spec

    @staticmethod
    def attach(spec: dict) -> SharedWeights:
        """Map w̄ in a child process from :meth:`spec` (never registers or unlinks anything)."""
        from .shm import SharedArena

        sw = SharedWeights(SharedArena.attach(spec), spec["key"], spec.get("max_defer", 0.5))
        sw._spec = spec
        return sw

    # -- writer ----------------------------------------------------------------------------
    def _check(self, w: np.ndarray) -> None:
        if w.shape != (self.dim,) or w.dtype != np.float64:
            raise ValueError(f"publish needs float64[{self.dim}], got {w.dtype}{w.shape}")

    def _should_defer(self) -> bool:
        if self.hdr[WANT] == 0:
            self._defer_since = None
            return False
        now = time.perf_counter()
        if self._defer_since is None:
            self._defer_since = now
        if now - self._defer_since < self.max_defer:
            return True
        self._defer_since = None  # publish now; the next request starts a new deferral window
        return False

    def _begin(self) -> tuple[int, np.ndarray]:
        v = int(self.hdr[DONE]) + 1
        _store_counter(self.hdr, BEGUN, v)
        return v, self.buf[v % 2]

    def _end(self, v: int) -> None:
        _store_counter(self.hdr, DONE, v)

    def publish(self, w: np.ndarray, force: bool = False) -> bool:
        """w̄ ← w (whole vector). Returns False if deferred for a reader (see the module
        docstring); the copy then happens at the next publish or :meth:`flush`."""
        self._check(w)
        if not force and self._should_defer():
            self._pending_full = True
            return False
        v, dst = self._begin()
        _copy_full(dst, w)
        self._end(v)
        self._pending_full = False
        return True

    def publish_lines(self, w: np.ndarray, lines: np.ndarray, tail: int,
                      force: bool = False) -> bool:
        """w̄ ← w, copying only the lines of w[:tail] marked in ``lines`` (one byte per line of
        ``2**LINE_SHIFT`` entries; length a multiple of 8), and w[tail:] whole. The caller
        guarantees that w[:tail] and every vector published before are zero off the marked
        lines (the learner marks each line an admitted φ touches), so the copy is exact.
        ``lines`` is left as is. Returns False if deferred for a reader."""
        self._check(w)
        if lines.dtype != np.uint8 or lines.shape[0] % 8 or lines.shape[0] << LINE_SHIFT < tail:
            raise ValueError("lines must be uint8, a multiple of 8 long, covering w[:tail]")
        if not force and self._should_defer():
            return False
        v, dst = self._begin()
        if self._pending_full:
            _copy_full(dst, w)
        else:
            _copy_lines(dst, w, lines, tail)
        self._end(v)
        self._pending_full = False
        return True

    def flush(self, w: np.ndarray) -> None:
        """Write a deferred whole-vector publish now, ignoring reader requests."""
        if self._pending_full:
            self.publish(w, force=True)

    # -- readers ---------------------------------------------------------------------------
    def read_begin(self) -> int:
        """For reading w̄ in place: the current version v (its data: :meth:`buffer` ``(v)``)."""
        return int(_load_counter(self.hdr, DONE))

    def buffer(self, version: int) -> np.ndarray:
        """The buffer holding ``version`` (valid while :meth:`read_valid` says so)."""
        return self.buf[version % 2]

    def read_valid(self, version: int) -> bool:
        """True iff the buffer of ``version`` was not rewritten since :meth:`read_begin`
        returned it (no second publish began), so every in-place read in between saw it."""
        return int(_load_counter(self.hdr, BEGUN)) <= version + 1

    def read_into(self, w_local: np.ndarray, timeout: float | None = None) -> int:
        """Consistent copy w_local ← w̄; returns its version (= number of completed publishes).
        Retries until a copy is not torn; raises TimeoutError after ``timeout`` seconds."""
        if w_local.shape != (self.dim,) or w_local.dtype not in (np.float64, self.buf.dtype):
            raise ValueError(f"read_into needs float64 or {self.buf.dtype} [{self.dim}], got "
                             f"{w_local.dtype}{w_local.shape}")
        asked, tries = False, 0
        t0 = time.perf_counter()
        try:
            while True:
                v = self.read_begin()
                _copy_full(w_local, self.buffer(v))
                if self.read_valid(v):
                    return v
                tries += 1
                if not asked:
                    _store_counter(self.hdr, WANT, 1)
                    asked = True
                if tries % 8 == 0:
                    time.sleep(0)
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    raise TimeoutError("could not read a consistent w̄ (writer too fast?)")
        finally:
            if asked:
                _store_counter(self.hdr, WANT, 0)

    def version(self) -> int:
        """Number of completed publishes."""
        return int(self.hdr[DONE])


def warmup() -> None:
    """Compile (or load from cache) every kernel, e.g. in the parent before forking."""
    hdr = np.zeros(HDR_WORDS, np.int64)
    a, b = np.zeros(16), np.ones(16)
    m = np.zeros(8, np.uint8)
    _store_counter(hdr, WANT, 0)
    _load_counter(hdr, DONE)
    _copy_full(a, b)
    _copy_lines(a, b, m, 8)
