"""The hot pages of the shared w, private to each learner process and merged by atomic adds
(the ``"hot"`` update mode of the several learners, :mod:`demidcd.solvers.multi_dcd`).

A few pages of w are written by nearly every φ: the transition block, the bias row and the rows
of the most frequent features (ids in decreasing frequency order put them at the front of w).
With K learners writing them in place, every update moves those cache lines between cores. In
the hot mode each learner maps these pages privately over its view of the shared segment
(``mmap(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED)``: the kernels index the same array, the other
pages stay shared) and, between blocks of work, merges them (:meth:`PrivatePages.merge`):

    shared[j] += w_k[j] − base_k[j]   (atomic adds),   w_k[j] = base_k[j] = shared[j]

for every entry j of its private pages, where base_k is what the learner read at its last merge.
Every change reaches the shared pages once, by an atomic add, so nothing is lost there; the rest
of w takes atomic adds in place. Hence w = w₀ + Σ α φ up to rounding whenever every learner
has merged (at every pause: a learner merges before it answers a command), and the coordinator
needs no periodic rebuild. A learner reads the others' changes to its hot pages one block late
(a block of :data:`~demidcd.solvers.multi_dcd.BLOCK` examples of updates or one inference
batch): the bounded delay of PASSCoDe's analysis, with no σ′ (a merge adds changes, it does
not average them). During a command (a rebuild, the certificate, the dual state) the pages are
mapped shared again (:meth:`PrivatePages.share`), so the coordinator and the commands see one w.

The pages are chosen from records of loss-augmented inference at w = 0 on a sample of the
examples (:func:`hot_pages`): those that at least :data:`HOT_SHARE` of the records touch, at
most :data:`MAX_PAGES` (the most touched).
"""

from __future__ import annotations

import _posixshmem
import ctypes
import mmap
import os
from collections.abc import Iterable

import numpy as np
from numba import njit

from ..primitives.records import RecordBatch
from ..tasks.base import Task
from .phi_pool import atomic_add

__all__ = ["HOT_SHARE", "MAX_PAGES", "PAGE_ENTRIES", "PrivatePages", "hot_pages",
           "merge_pages"]

PAGE_ENTRIES = mmap.PAGESIZE // 8  # float64 entries of w per page
HOT_SHARE = 0.9  # a page is hot when at least this share of the sampled records touch it (0.5
# took 40 pages on EWT, whose merges cost a third of the time: benchmarks/README.md, "Where p = 2
# loses on the 2-core AMD EPYC guest")
MAX_PAGES = 64  # at most this many hot pages (each merge reads every entry of them)
SAMPLE = 500  # examples whose records at w = 0 choose the pages
_MAP_FIXED = 0x10  # <sys/mman.h>; the mmap module does not export it

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]


@njit(cache=True, nogil=True)
def merge_pages(w: np.ndarray, shared: np.ndarray, base: np.ndarray, runs: np.ndarray) -> None:
    """For each run [lo, hi) of ``runs`` (rows), entries j: shared[j] += w[j] − base[j]
    (atomic), then w[j] = base[j] = shared[j]. ``base`` holds the runs one after another."""
    q = 0
    for r in range(runs.shape[0]):
        for j in range(runs[r, 0], runs[r, 1]):
            d = w[j] - base[q]
            if d != 0.0:
                atomic_add(shared, j, d)
            v = shared[j]
            w[j] = v
            base[q] = v
            q += 1


def hot_pages(batches: Iterable[RecordBatch], dim: int, share: float = HOT_SHARE,
              max_pages: int = MAX_PAGES) -> np.ndarray:
    """The pages of a float64 w of ``dim`` entries that at least ``share`` of the records in
    ``batches`` touch, the most touched ``max_pages`` at most, in increasing order."""
    count = np.zeros(-(-dim // PAGE_ENTRIES), np.int64)
    n = 0
    for b in batches:
        for r in range(len(b)):
            count[np.unique(b.idx[b.ptr[r]:b.ptr[r + 1]] // PAGE_ENTRIES)] += 1
        n += len(b)
    hot = np.flatnonzero(count >= max(1.0, share * n))
    if hot.shape[0] > max_pages:
        hot = np.sort(hot[np.argsort(-count[hot], kind="stable")[:max_pages]])
    return hot


def sample_hot_pages(task: Task) -> np.ndarray:
    """:func:`hot_pages` of the records of loss-augmented inference at w = 0 on the first
    :data:`SAMPLE` examples of ``task``."""
    sample = np.arange(min(task.n_examples, SAMPLE), dtype=np.int64)
    return hot_pages([task.loss_augmented(np.zeros(task.dim), sample)], task.dim)


class PrivatePages:
    """In a learner process: ``w``, its mapping of the shared segment ``name``, with ``pages``
    private (module docstring). Starts shared; :meth:`privatize` and :meth:`share` switch."""

    def __init__(self, w: np.ndarray, name: str, pages: np.ndarray):
        if w.ctypes.data % mmap.PAGESIZE:
            raise ValueError("w must begin on a page")
        self.w = w
        self.fd = _posixshmem.shm_open(name, os.O_RDWR, mode=0o600)
        self._map = mmap.mmap(self.fd, w.nbytes)
        self.shared = np.frombuffer(self._map, np.float64, w.shape[0])  # always the segment
        runs: list[list[int]] = []
        for p in np.sort(np.asarray(pages, np.int64)):
            if runs and runs[-1][1] == p:
                runs[-1][1] = int(p) + 1
            else:
                runs.append([int(p), int(p) + 1])
        self.pages = runs  # [first page, end page)
        self.runs = np.array([[a * PAGE_ENTRIES, min(b * PAGE_ENTRIES, w.shape[0])]
                              for a, b in runs], np.int64).reshape(-1, 2)
        self.base = np.zeros(int((self.runs[:, 1] - self.runs[:, 0]).sum()))
        self.private = False

    def _remap(self, private: bool) -> None:
        rw = mmap.PROT_READ | mmap.PROT_WRITE
        for a, b in self.pages:
            addr = self.w.ctypes.data + a * mmap.PAGESIZE
            if private:
                got = _libc.mmap(addr, (b - a) * mmap.PAGESIZE, rw,
                                 mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED, -1, 0)
            else:
                got = _libc.mmap(addr, (b - a) * mmap.PAGESIZE, rw, mmap.MAP_SHARED | _MAP_FIXED,
                                 self.fd, a * mmap.PAGESIZE)
            if got != addr:
                e = ctypes.get_errno()
                raise OSError(e, f"mmap of w's hot pages failed: {os.strerror(e)}")

    def privatize(self) -> None:
        """Map the pages privately, holding the shared values (the learners are to resume)."""
        if self.private or not self.pages:
            return
        self._remap(True)
        q = 0
        for lo, hi in self.runs:
            self.base[q:q + hi - lo] = self.shared[lo:hi]  # read once: another learner's
            self.w[lo:hi] = self.base[q:q + hi - lo]  # merge may land between two reads
            q += hi - lo
        self.private = True

    def merge(self) -> None:
        """Add this learner's changes to the shared pages since the last merge; read theirs."""
        if self.private:
            merge_pages(self.w, self.shared, self.base, self.runs)

    def share(self) -> None:
        """Merge, then map the pages shared again (before a command: w is then one array)."""
        if not self.private:
            return
        self.merge()
        self._remap(False)
        self.private = False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
