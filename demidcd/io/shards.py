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

A training set given as several files (a comma-separated list or a glob) is cut by whole files
instead: :func:`file_parts`.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

import numba as nb
import numpy as np

from .stream import transparent
from .text_source import STDIN, decode_block

__all__ = ["ByteRange", "MergedCounts", "PackedStrings", "byte_ranges", "concat_packed",
           "file_parts", "merge_counts", "pack_strings", "read_range", "splittable"]

_DOCSTART = np.frombuffer(b"-DOCSTART-", np.uint8)


@dataclass(frozen=True)
class ByteRange:
    """Bytes ``[start, end)`` of a file; ``line0``: the lines before ``start``."""

    start: int
    end: int
    line0: int


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
    equal size (``n`` = 1: the whole file); None when the file cannot be cut
    (:func:`splittable`) or ``n`` < 1."""
    if n < 1 or not splittable(path, encoding):
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


@dataclass
class PackedStrings:
    """Strings as one UTF-8 byte array and the end offset of each (what travels between
    processes and machines instead of a Python object per string)."""

    blob: np.ndarray  # uint8
    ends: np.ndarray  # int64[n]

    def __len__(self) -> int:
        return int(self.ends.shape[0])

    def starts(self) -> np.ndarray:
        """The start offset of each string."""
        starts = np.zeros(self.ends.shape[0], np.int64)
        starts[1:] = self.ends[:-1]
        return starts

    def take(self, which: np.ndarray) -> PackedStrings:
        """The strings at the indices ``which``, in that order."""
        starts = self.starts()[which]
        lens = self.ends[which] - starts
        return PackedStrings(_gather(self.blob, starts, lens, -1), np.cumsum(lens))

    def joined(self, which: np.ndarray, sep: int = 10) -> np.ndarray:
        """The UTF-8 bytes of the strings at ``which``, in that order, the byte ``sep``
        (a newline) between them."""
        starts = self.starts()[which]
        return _gather(self.blob, starts, self.ends[which] - starts, sep)

    def order(self) -> np.ndarray:
        """The indices of the strings in string order (Python's order of ``str``: UTF-8 bytes
        compare as the code points they encode), equal strings first first: a ``lexsort`` of
        each string's first :data:`ORDER_BYTES` bytes as big-endian words and its length, then
        the runs that tie there and hold a longer string sorted by all their bytes."""
        n = len(self)
        if n == 0:
            return np.zeros(0, np.int64)
        starts = self.starts()
        lens = self.ends - starts
        keys = _leading_words(self.blob, starts, lens, ORDER_BYTES // 8)
        order = np.lexsort((lens, *keys[::-1]))
        if int(lens.max()) > ORDER_BYTES:
            _sort_long_ties(order, keys, self.blob, starts, lens, ORDER_BYTES)
        return order

    def strings(self, which: np.ndarray | None = None) -> list[str]:
        """The strings (those at the indices ``which``, in that order)."""
        ends = self.ends if which is None else self.ends[which]
        starts = self.starts() if which is None else self.starts()[which]
        raw = self.blob.tobytes()
        if raw.isascii():  # one decode; byte offsets are character offsets
            text = raw.decode("ascii")
            return [text[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
        return [raw[a:b].decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist(),
                                                          strict=True)]


def concat_packed(parts: list[PackedStrings]) -> PackedStrings:
    """The strings of ``parts`` one after another, as one :class:`PackedStrings`."""
    if not parts:
        return PackedStrings(np.zeros(0, np.uint8), np.zeros(0, np.int64))
    byte_off = np.cumsum([0] + [int(p.blob.shape[0]) for p in parts])
    return PackedStrings(np.concatenate([p.blob for p in parts]),
                         np.concatenate([p.ends + b for p, b in zip(parts, byte_off,
                                                                     strict=False)]))


def pack_strings(strings: list[str]) -> PackedStrings:
    """:class:`PackedStrings` of ``strings``."""
    text = "".join(strings)
    if text.isascii():
        lens = np.fromiter(map(len, strings), np.int64, count=len(strings))
        blob = text.encode("ascii")
    else:
        enc = [x.encode("utf-8") for x in strings]
        lens = np.fromiter(map(len, enc), np.int64, count=len(enc))
        blob = b"".join(enc)
    return PackedStrings(np.frombuffer(blob, np.uint8), np.cumsum(lens))


@nb.njit(cache=True, nogil=True)
def _hashes(blob, ends):
    """FNV-1a (64 bits) of each string."""
    out = np.empty(ends.shape[0], np.uint64)
    a = 0
    for i in range(ends.shape[0]):
        h = np.uint64(14695981039346656037)
        for q in range(a, ends[i]):
            h = (h ^ np.uint64(blob[q])) * np.uint64(1099511628211)
        out[i] = h
        a = ends[i]
    return out


@nb.njit(cache=True, nogil=True)
def _same(blob, starts, ends, i, j):
    la = ends[i] - starts[i]
    if la != ends[j] - starts[j]:
        return False
    for q in range(la):
        if blob[starts[i] + q] != blob[starts[j] + q]:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _merge_table(blob, starts, ends, hashes):
    """One pass over the strings in order with an open-addressing table keyed by their
    hashes (equal hashes: the bytes compared, so a collision is only a longer probe):
    (merged index of each string, the first string of each merged index)."""
    n = ends.shape[0]
    size = 1
    while size < 2 * n + 2:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, np.int64)  # slot -> merged index
    merged_of = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        h = hashes[i]
        slot = h & mask
        while True:
            g = table[slot]
            if g < 0:
                table[slot] = m
                first[m] = i
                merged_of[i] = m
                m += 1
                break
            j = first[g]
            if hashes[j] == h and _same(blob, starts, ends, i, j):
                merged_of[i] = g
                break
            slot = (slot + np.uint64(1)) & mask
    return merged_of, first[:m].copy()


@dataclass
class MergedCounts:
    """The merge of per-part string counts (:func:`merge_counts`): the strings packed (one
    copy each), the summed counts, per part the map of its indices to merged ones."""

    packed: PackedStrings
    counts: np.ndarray  # int64[n]
    maps: list[np.ndarray]  # int64 per part: part index -> merged index

    @property
    def names(self) -> list[str]:
        return self.packed.strings()


def merge_counts(parts: list[tuple[PackedStrings | list[str], np.ndarray]]) -> MergedCounts:
    """The merged count table of per-part (distinct strings, counts) (module docstring):
    strings in order of first occurrence over (part, position), counts summed. One pass of a
    hash table over the bytes (numba; equal hashes compare the bytes, so the merge is exact):
    no Python object per string."""
    packed = [p if isinstance(p, PackedStrings) else pack_strings(p) for p, _ in parts]
    sizes = [len(p) for p in packed]
    off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    out = concat_packed(packed)
    blob, ends, starts = out.blob, out.ends, out.starts()
    counts = np.concatenate([np.asarray(c, np.int64) for _, c in parts]) if parts else \
        np.zeros(0, np.int64)
    merged_of, keep = _merge_table(blob, starts, ends, _hashes(blob, ends))
    total = np.bincount(merged_of, counts.astype(np.float64), keep.shape[0]).astype(np.int64)
    kept = out.take(keep)
    maps = [merged_of[off[k]:off[k + 1]] for k in range(len(parts))]
    return MergedCounts(kept, total, maps)


@nb.njit(cache=True, nogil=True)
def _gather(blob, starts, lens, sep):
    """The byte ranges (``starts``, ``lens``) of ``blob`` one after another, the byte ``sep``
    between two of them (−1: nothing)."""
    n = starts.shape[0]
    total = lens.sum() + (max(n - 1, 0) if sep >= 0 else 0)
    out = np.empty(total, np.uint8)
    pos = 0
    for i in range(n):
        if sep >= 0 and i > 0:
            out[pos] = sep
            pos += 1
        out[pos:pos + lens[i]] = blob[starts[i]:starts[i] + lens[i]]
        pos += lens[i]
    return out


ORDER_BYTES = 24
"""The leading bytes of each string that :meth:`PackedStrings.order` sorts by as numbers."""


@nb.njit(cache=True, nogil=True)
def _leading_words(blob, starts, lens, width):
    """(width, n) uint64: the first 8·width bytes of each string as big-endian words, zero
    padded (a shorter string's words are those of its bytes and zeros)."""
    n = starts.shape[0]
    out = np.zeros((width, n), np.uint64)
    for i in range(n):
        for q in range(min(lens[i], 8 * width)):
            c = q >> 3
            out[c, i] |= np.uint64(blob[starts[i] + q]) << np.uint64(8 * (7 - (q & 7)))
    return out


@nb.njit(cache=True, nogil=True, inline="always")
def _bytes_less(blob, starts, lens, a, b):
    """Whether string a sorts before string b (bytes, then the shorter first)."""
    m = min(lens[a], lens[b])
    for q in range(m):
        x = blob[starts[a] + q]
        y = blob[starts[b] + q]
        if x != y:
            return x < y
    return lens[a] < lens[b]


@nb.njit(cache=True, nogil=True)
def _sort_long_ties(order, keys, blob, starts, lens, limit):
    """In ``order`` (sorted by ``keys``, then length), each run of equal keys that holds a
    string longer than ``limit`` bytes sorted by all its bytes (stable: an insertion sort
    into a merge sort of the run)."""
    n = order.shape[0]
    width = keys.shape[0]
    tmp = np.empty(n, np.int64)
    a = 0
    while a < n:
        b = a + 1
        long = lens[order[a]] > limit
        while b < n:
            same = True
            for c in range(width):
                if keys[c, order[b]] != keys[c, order[a]]:
                    same = False
                    break
            if not same:
                break
            long = long or lens[order[b]] > limit
            b += 1
        if long and b - a > 1:
            _merge_sort(order, tmp, a, b, blob, starts, lens)
        a = b


@nb.njit(cache=True, nogil=True)
def _merge_sort(order, tmp, lo, hi, blob, starts, lens):
    """order[lo:hi] sorted by :func:`_bytes_less`, stably (runs of 16 by insertion, then
    merged bottom-up through ``tmp``)."""
    run = 16
    for s in range(lo, hi, run):
        e = min(s + run, hi)
        for i in range(s + 1, e):
            v = order[i]
            j = i - 1
            while j >= s and _bytes_less(blob, starts, lens, v, order[j]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = v
    width = run
    while width < hi - lo:
        for s in range(lo, hi, 2 * width):
            m = min(s + width, hi)
            e = min(s + 2 * width, hi)
            i, j = s, m
            for o in range(s, e):
                if j >= e or (i < m and not _bytes_less(blob, starts, lens, order[j],
                                                         order[i])):
                    tmp[o] = order[i]
                    i += 1
                else:
                    tmp[o] = order[j]
                    j += 1
        order[lo:hi] = tmp[lo:hi]
        width *= 2


def file_parts(spec: str, k: int) -> list[list[str]]:
    """A comma-separated list or glob of files dealt to ``k`` parts by size (largest first to
    the part with the fewest bytes so far); parts may be empty when there are fewer files."""
    names: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        names += sorted(glob.glob(item)) if any(c in item for c in "*?[") else [item]
    parts: list[list[str]] = [[] for _ in range(k)]
    load = [0] * k
    for name in sorted(names, key=lambda p: -os.path.getsize(p)):
        j = load.index(min(load))
        parts[j].append(name)
        load[j] += os.path.getsize(name)
    return parts
