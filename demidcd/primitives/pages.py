"""Resident pages a training process no longer needs, handed back to the kernel.

:func:`release_library_pages`: numba's compiler, LLVM (``libllvmlite.so``), is touched while the
kernels are compiled or loaded from numba's cache: about 67 MiB of its code and read-only data
become resident (and count in the process's PSS) and stay so, although training calls no
compiler once every kernel is loaded. ``madvise(MADV_DONTNEED)`` on those mappings drops the
pages from the process; they are clean copies of the library file, so a later compile simply
faults them in again from the page cache. Only read-only mappings without anonymous
(copy-on-write) pages are released: relocated data must never be dropped.

:func:`release_tail`: the pages of a numpy array past a given element, zero-filled again on
the next touch (the φ pool's words beyond its live structures after a compaction).

:func:`fixed_malloc_thresholds`: glibc's malloc serves a request above its mmap threshold
(128 KiB) from a mapping of its own, handed back on ``free``, but raises that threshold to the
size of every such block freed (up to 32 MiB), after which the same arrays come from the heap,
whose freed chunks stay resident and whose pages both processes of a fork then dirty. The
worker's and the learner's per-chunk arrays (records, inference outputs) did so: on a million
synthetic tokens with 83 tags the inference worker held 43 MiB of private heap at its first
sweep, 2 MiB with the thresholds fixed (the run's peak 343 -> 314 MiB at 20 s, under load;
issue 56, defect 9). The command's set-up child, which exits before training, fixes them at
:data:`SETUP_MALLOC_THRESHOLD` instead.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys

import numpy as np

MADV_DONTNEED = 4
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
COMPILER_LIBRARIES = ("libllvmlite",)
_MAP = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")


def _madvise():
    """libc's ``madvise`` (None off Linux or where it cannot be found)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


madvise = _madvise()

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
MALLOC_THRESHOLD = 128 * 1024
SETUP_MALLOC_THRESHOLD = 2 * 1024 * 1024
"""The command's set-up child's (and its parts') fixed thresholds: its temporaries up to 2 MiB
come from the heap again. With the training processes' 128 KiB, every array of the merge above
that was a fresh mapping, faulted in page by page and unmapped: Brown's merge took 64 k page
faults and 0.42 s of CPU against 0.35 s here (4 MiB: 0.30 s, but 30-50 MiB more set-up peak on
synthetic 4 M tokens; benchmarks/README.md, "The set-up's heap")."""


def fixed_malloc_thresholds(threshold: int = MALLOC_THRESHOLD) -> bool:
    """Fix glibc malloc's mmap and trim thresholds at ``threshold`` bytes (setting them turns
    off their growth; module docstring), for this process and those it forks later. Returns
    whether it was done (False off glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, threshold)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                       threshold))


def release_library_pages(libraries: tuple[str, ...] = COMPILER_LIBRARIES) -> int:
    """Drop this process's resident pages of the read-only, unmodified mappings of
    ``libraries`` (module docstring); returns the bytes released (0 where unsupported)."""
    if madvise is None:
        return 0
    try:
        with open(f"/proc/{os.getpid()}/smaps") as f:
            text = f.read()
    except OSError:
        return 0
    released = 0
    span = None
    fields: dict[str, int] = {}

    def flush() -> None:
        nonlocal released
        if span is None:
            return
        a, b, perm, name = span
        if ("w" in perm or not any(lib in name for lib in libraries)
                or fields.get("Anonymous", 1) != 0 or fields.get("Rss", 0) == 0):
            return
        if madvise(a, b - a, MADV_DONTNEED) == 0:
            released += fields["Rss"] * 1024

    for line in text.splitlines():
        m = _MAP.match(line)
        if m:
            flush()
            span = (int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4))
            fields = {}
            continue
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[key] = int(parts[0])
    flush()
    return released


def release_tail(a: np.ndarray, start: int, end: int) -> int:
    """Hand back the whole pages of the contiguous array ``a`` between elements ``start`` and
    ``end`` (their contents become zero); returns the bytes released."""
    if madvise is None or end <= start or not a.flags.c_contiguous:
        return 0
    base = a.ctypes.data
    lo = -(-(base + start * a.itemsize) // PAGE) * PAGE
    hi = (base + min(end, a.size) * a.itemsize) // PAGE * PAGE
    if hi <= lo or madvise(lo, hi - lo, MADV_DONTNEED) != 0:
        return 0
    return hi - lo


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)``, where there is one: the heap's free pages back to the
    system (a process's freed Python objects otherwise stay resident)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
