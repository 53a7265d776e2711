"""The shared weight vector w̄ under a seqlock (one writer: the learner; many readers: workers).

Protocol (sequence counter ``seq`` = ``hdr[0]``, int64 in shared memory)::

    writer:  seq += 1 (odd)  ; fence ; write data ; fence ; seq += 1 (even)
    reader:  s1 = seq (wait while odd) ; fence ; copy ; fence ; s2 = seq ; ok iff s1 == s2

A reader therefore never returns a torn (half-written) vector; the *version* of a consistent
copy is ``s1 // 2`` = number of completed publishes.

Memory ordering — the guarantee relied on
-----------------------------------------
Both the compiler and the CPU must keep (a) the odd-counter store before the data stores and
the data stores before the even-counter store, and (b) the reader's counter loads around its data
loads. We use an explicit ``fence seq_cst`` LLVM instruction (:func:`fence`, a numba intrinsic):

* LLVM never moves a load or store across a fence (a fence is modelled as reading and writing
  all memory), so numba cannot reorder or merge the counter accesses with the copy loop even
  when they sit in one compiled function;
* the fence is also a hardware barrier (``lock or`` on x86-64, ``dmb ish`` on AArch64), so the
  protocol does not depend on x86-64 TSO (which by itself already keeps store→store and
  load→load order).

The Python-level methods additionally run "begin", "copy" and "end" as separate compiled calls
(not inlined into each other), so even without the fence the compiler could not reorder them and
x86-64 TSO would keep the order. :func:`publish_sparse_kernel` and :func:`read_attempt_kernel` are
single njit functions (fences inside) that the learner/workers may call from their own njit
loops. Aligned 8-byte loads/stores are atomic on every 64-bit target we support, so a counter
value is never itself torn. Exactly one process may write (the learner).

Reader starvation
-----------------
A full copy of 15 M float64 takes ~10 ms; if the learner publishes more often than that, a
reader could retry forever. After a failed attempt a reader raises the ``want`` flag
(``hdr[8]``, its own cache line); while it is set the writer *defers* publishes for at most
``max_defer`` seconds (default 0.5 s; remembering the changed indices) so the reader can finish;
the deferred entries are written by the next publish (or :meth:`SharedWeights.flush`). Reads
normally finish within one or two copy times (measured: 15 M entries, writer publishing
back-to-back, 2 cores: median ~35 ms per read), so w̄ lags the learner by about one copy time
while a worker is reading. ``max_defer`` only bounds the lag if a reader is descheduled or dies
holding the flag; too small a value (below a copy time under load) lets readers starve.
Correctness never depends on the flag, only progress.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from numba import njit, types
from numba.core.extending import intrinsic

__all__ = ["SharedWeights", "fence", "publish_sparse_kernel", "read_attempt_kernel",
           "SEQ", "WANT", "HDR_WORDS", "warmup"]

SEQ = 0  # hdr index of the sequence counter
WANT = 8  # hdr index of the reader-wants-a-pause flag (separate 64-byte cache line)
HDR_WORDS = 16


@intrinsic
def fence(typingctx: Any) -> Any:
    """``fence seq_cst``: a full compiler and hardware memory barrier (njit-callable)."""
    sig = types.void()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def _write_begin(hdr: np.ndarray) -> None:
    hdr[SEQ] = hdr[SEQ] + 1  # odd: write in progress
    fence()


@njit(cache=True, nogil=True)
def _write_end(hdr: np.ndarray) -> None:
    fence()
    hdr[SEQ] = hdr[SEQ] + 1  # even: consistent


@njit(cache=True, nogil=True)
def _copy_full(dst: np.ndarray, src: np.ndarray) -> None:
    for j in range(src.shape[0]):
        dst[j] = src[j]


@njit(cache=True, nogil=True)
def _copy_sparse(dst: np.ndarray, src: np.ndarray, idx: np.ndarray) -> None:
    for k in range(idx.shape[0]):
        j = idx[k]
        dst[j] = src[j]


@njit(cache=True, nogil=True)
def publish_sparse_kernel(hdr: np.ndarray, wbar: np.ndarray, w: np.ndarray,
                          idx: np.ndarray) -> None:
    """w̄[idx] ← w[idx] under the seqlock, in one compiled call (callable from njit code)."""
    hdr[SEQ] = hdr[SEQ] + 1
    fence()
    for k in range(idx.shape[0]):
        j = idx[k]
        wbar[j] = w[j]
    fence()
    hdr[SEQ] = hdr[SEQ] + 1


@njit(cache=True, nogil=True)
def read_attempt_kernel(hdr: np.ndarray, wbar: np.ndarray, dst: np.ndarray,
                        spins: int) -> int:
    """One seqlock read: wait ≤ ``spins`` polls for an even counter, copy w̄ into ``dst``,
    recheck. Returns the (even) counter value on success, −1 if the copy may be torn."""
    s1 = hdr[SEQ]
    n = 0
    while s1 & 1:
        if n >= spins:
            return -1
        n += 1
        fence()
        s1 = hdr[SEQ]
    fence()
    for j in range(wbar.shape[0]):
        dst[j] = wbar[j]
    fence()
    s2 = hdr[SEQ]
    return s1 if s1 == s2 else -1


@njit(cache=True, nogil=True)
def _load_seq(hdr: np.ndarray) -> int:
    s = hdr[SEQ]
    fence()
    return s


@njit(cache=True, nogil=True)
def _store_word(hdr: np.ndarray, i: int, v: int) -> None:
    fence()
    hdr[i] = v


class SharedWeights:
    """w̄ (float64[dim]) plus its seqlock header (int64[16]) in shared memory.

    Writer (learner only): :meth:`publish`, :meth:`publish_sparse`, :meth:`flush`.
    Readers (workers): :meth:`read_into`, or in place with :meth:`read_begin` /
    :meth:`read_valid`. Build with :meth:`allocate` in the parent, ship :meth:`spec` to
    children and :meth:`attach` there (warm the kernels with :func:`warmup` before forking).
    """

    def __init__(self, arrays: dict[str, np.ndarray], key: str = "wbar",
                 max_defer: float = 0.5):
        self.key = key
        self.w: np.ndarray = arrays[key]
        self.hdr: np.ndarray = arrays[key + "_hdr"]
        if self.w.dtype != np.float64 or self.hdr.dtype != np.int64:
            raise TypeError("SharedWeights needs float64 w̄ and int64 header arrays")
        self.dim = int(self.w.shape[0])
        self.max_defer = float(max_defer)
        self._spec: dict | None = None
        # writer-side deferral state (only meaningful in the writer process)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._pending_all = False
        self._defer_since: float | None = None

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def allocate(arena: Any, dim: int, key: str = "wbar", max_defer: float = 0.5
                 ) -> SharedWeights:
        """Create w̄ = 0 (version 0) in ``arena`` (a :class:`~demidcd.parallel.shm.SharedArena`)."""
        arena.create(key, (int(dim),), np.float64)
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

    def _defer(self, idx: np.ndarray | None) -> None:
        if idx is None or self._pending_n + len(idx) > self.dim // 4:
            self._pending_all = True
            self._pending.clear()
            self._pending_n = 0
        elif not self._pending_all:
            self._pending.append(np.array(idx, copy=True))
            self._pending_n += len(idx)

    def _write(self, w: np.ndarray, idx: np.ndarray | None) -> None:
        _write_begin(self.hdr)
        if idx is None or self._pending_all:
            _copy_full(self.w, w)
        else:
            for p in self._pending:
                _copy_sparse(self.w, w, p)
            _copy_sparse(self.w, w, idx)
        _write_end(self.hdr)
        self._pending.clear()
        self._pending_n = 0
        self._pending_all = False

    def publish(self, w: np.ndarray, force: bool = False) -> bool:
        """w̄ ← w (full copy under the seqlock). Returns False if deferred for a reader (see
        module docstring); the copy then happens at the next publish or :meth:`flush`."""
        if w.shape != self.w.shape or w.dtype != np.float64:
            raise ValueError(f"publish needs float64[{self.dim}], got {w.dtype}{w.shape}")
        if not force and self._should_defer():
            self._defer(None)
            return False
        self._write(w, None)
        return True

    def publish_sparse(self, w: np.ndarray, idx: np.ndarray, force: bool = False) -> bool:
        """w̄[idx] ← w[idx] under the seqlock (plus any deferred entries). ``idx`` = entries
        changed since the last publish (duplicates harmless). Returns False if deferred."""
        if w.shape != self.w.shape or w.dtype != np.float64:
            raise ValueError(f"publish needs float64[{self.dim}], got {w.dtype}{w.shape}")
        if not force and self._should_defer():
            self._defer(idx)
            return False
        self._write(w, idx)
        return True

    def flush(self, w: np.ndarray) -> None:
        """Write any deferred entries now, ignoring reader requests (e.g. at the end of
        training). No-op when nothing is pending."""
        if self._pending_all or self._pending:
            self._write(w, np.zeros(0, np.int64))

    @property
    def has_pending(self) -> bool:
        """True if a deferred publish has not reached w̄ yet."""
        return self._pending_all or bool(self._pending)

    # -- readers ---------------------------------------------------------------------------
    def read_into(self, w_local: np.ndarray, timeout: float | None = None) -> int:
        """Consistent copy w_local ← w̄; returns its version (= number of completed publishes).

        Retries until a copy is not torn; raises TimeoutError after ``timeout`` seconds.
        """
        if w_local.shape != self.w.shape or w_local.dtype != np.float64:
            raise ValueError(f"read_into needs float64[{self.dim}], got {w_local.dtype}"
                             f"{w_local.shape}")
        tries = 0
        asked = False
        t0 = time.perf_counter() if timeout is not None else 0.0
        try:
            while True:
                s = read_attempt_kernel(self.hdr, self.w, w_local, 100_000)
                if s >= 0:
                    return s // 2
                tries += 1
                if not asked:
                    _store_word(self.hdr, WANT, 1)
                    asked = True
                if tries % 8 == 0:
                    time.sleep(0)
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    raise TimeoutError("could not read a consistent w̄ (writer stalled?)")
        finally:
            if asked:
                _store_word(self.hdr, WANT, 0)

    def read_begin(self) -> int:
        """For reading w̄ in place: spin until no write is in progress; return the counter."""
        while True:
            s = _load_seq(self.hdr)
            if not s & 1:
                return s
            time.sleep(0)

    def read_valid(self, s: int) -> bool:
        """True iff no publish started since :meth:`read_begin` returned ``s`` (the in-place
        reads made in between saw one consistent w̄)."""
        return _load_seq(self.hdr) == s

    def version(self) -> int:
        """Number of completed publishes."""
        return int(self.hdr[SEQ]) // 2


def warmup() -> None:
    """Compile (or load from cache) every kernel, e.g. in the parent before forking."""
    hdr = np.zeros(HDR_WORDS, np.int64)
    a = np.zeros(4)
    b = np.ones(4)
    for idt in (np.int32, np.int64):
        i = np.arange(2, dtype=idt)
        _copy_sparse(a, b, i)
        publish_sparse_kernel(hdr, a, b, i)
    _write_begin(hdr)
    _copy_full(a, b)
    _write_end(hdr)
    read_attempt_kernel(hdr, a, b, 1)
    _load_seq(hdr)
    _store_word(hdr, WANT, 0)
