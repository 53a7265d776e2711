"""Set-up in parts: a text file cut into byte ranges at sentence boundaries, and per-part
counts of strings merged into one count table (the pieces of a parallel count and merge).

The API (also for a set-up spread over machines: each node reads its own byte ranges):

    byte_ranges(path, n, conllu) -> list[ByteRange] | None
        at most ``n`` ranges (start, end, line0) that tile the file, each cut just after a
        blank line that ends a sentence; None when the file cannot be cut (standard input,
        gzip, an encoding whose bytes are not ASCII-transparent, ``n`` < 2)
    read_range(path, r, encoding) -> str
        the text of range ``r`` (decoding errors name the file's line), for a parser given
        ``line0 = r.line0`` so its messages name the file's lines
    merge_counts(parts) -> MergedCounts(names, counts, maps)
        parts = [(names_k, counts_k)]: per part, distinct strings and their counts. The merged
        table holds every string once, in order of first occurrence over (part, position)
        — the order one reader of the concatenated parts would meet them in —, with the
        summed counts; ``maps[k][i]`` is the merged index of ``names_k[i]``.

Counting then merging by sum gives the counts of the whole file exactly: a string's count is
the sum of its counts in the parts, whatever the cut. A dictionary built from the merged table
by a rule that depends only on (string, count) and on first-occurrence order (e.g. by
decreasing count, ties by string) is the one a serial reader builds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numba as nb
import numpy as np

from .stream import transparent
from .text_source import STDIN, decode_block

__all__ = ["ByteRange", "MergedCounts", "byte_ranges", "merge_counts", "read_range",
           "splittable"]

_DOCSTART = np.frombuffer(b"-DOCSTART-", np.uint8)


@dataclass(frozen=True)
class ByteRange:
    """Bytes ``[start, end)`` of a file; ``line0``: the lines before ``start``."""

    start: int
    end: int
    line0: int


@dataclass
class MergedCounts:
    """The merge of per-part string counts (:func:`merge_counts`)."""

    names: list[str]
    counts: np.ndarray  # int64[len(names)]
    maps: list[np.ndarray]  # int64 per part: part index -> merged index


@nb.njit(cache=True, nogil=True)
def _next_cut(buf, i, conllu):
    """The offset just after the first blank line at or after the line holding byte ``i``
    whose previous line is a token line (not blank, not a comment ``#`` in CoNLL-U, not
    ``-DOCSTART-``): a sentence ends there whatever came before. ``buf.shape[0]``: none."""
    n = buf.shape[0]
    while i > 0 and buf[i - 1] != 10:  # back to the start of the line
        i -= 1
    prev_token = False
    while i < n:
        j = i
        while j < n and buf[j] != 10:
            j += 1
        if j == n:
            return n
        blank = True
        for q in range(i, j):
            c = buf[q]
            if not (c == 32 or 9 <= c <= 13):
                blank = False
                break
        if blank:
            if prev_token:
                return j + 1
            prev_token = False
        else:
            q = i
            while q < j and (buf[q] == 32 or buf[q] == 9):
                q += 1
            if conllu:
                prev_token = buf[i] != 35
            else:
                doc = j - q >= _DOCSTART.shape[0]
                if doc:
                    for r in range(_DOCSTART.shape[0]):
                        if buf[q + r] != _DOCSTART[r]:
                            doc = False
                            break
                prev_token = not doc
        i = j + 1
    return n


def splittable(path: str, encoding: str = "utf-8") -> bool:
    """Whether :func:`byte_ranges` can cut ``path``: a regular file, not gzip, in an
    ASCII-transparent encoding."""
    return path != STDIN and not path.endswith(".gz") and os.path.isfile(path) \
        and transparent(encoding)


def byte_ranges(path: str, n: int, conllu: bool, encoding: str = "utf-8"
                ) -> list[ByteRange] | None:
    """At most ``n`` ranges tiling ``path``, each ending just after a blank line that ends a
    sentence (so a parser started at a range's start is in its initial state), of about
    equal size; None when the file cannot be cut (:func:`splittable`) or ``n`` < 2."""
    if n < 2 or not splittable(path, encoding):
        return None
    size = os.path.getsize(path)
    if size == 0:
        return None
    buf = np.memmap(path, np.uint8, mode="r")
    cuts = [0]
    for k in range(1, n):
        target = max(size * k // n, cuts[-1])
        c = int(_next_cut(buf, target, conllu))
        if c > cuts[-1] and c < size:
            cuts.append(c)
    cuts.append(size)
    lines = [0]
    for a, b in zip(cuts[:-2], cuts[1:-1], strict=True):
        lines.append(lines[-1] + int(np.count_nonzero(buf[a:b] == 10)))
    del buf
    return [ByteRange(a, b, li) for a, b, li in zip(cuts[:-1], cuts[1:], lines, strict=True)]


def read_range(path: str, r: ByteRange, encoding: str = "utf-8") -> str:
    """The text of bytes ``[r.start, r.end)`` of ``path``; bad bytes raise an InputError
    naming the file's line; a byte-order mark at the file's start is dropped (as the whole
    file's reader drops it)."""
    from .text_source import source_name

    name = source_name(path)
    with open(path, "rb") as f:
        f.seek(r.start)
        data = f.read(r.end - r.start)
    text = decode_block(data, name, encoding, r.line0)
    if r.start == 0 and text.startswith("\ufeff"):
        text = text[1:]
    return text


def merge_counts(parts: list[tuple[list[str], np.ndarray]]) -> MergedCounts:
    """The merged count table of per-part (distinct strings, counts) (module docstring):
    strings in order of first occurrence over (part, position), counts summed."""
    index: dict[str, int] = {}
    setdefault = index.setdefault
    maps = []
    for names, _ in parts:
        maps.append(np.fromiter((setdefault(s, len(index)) for s in names), np.int64,
                                count=len(names)))
    total = np.zeros(len(index), np.int64)
    for m, (_, counts) in zip(maps, parts, strict=True):
        total += np.bincount(m, np.asarray(counts, np.float64), len(index)).astype(np.int64)
    return MergedCounts(list(index), total, maps)
