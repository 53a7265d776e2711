"""The strings of the kept built-in features, put in the dictionary's order and packed without a
Python string per context word or n-gram.

The dictionary orders its features by decreasing count, ties by string (code points, which
UTF-8 bytes compare the same way). Most kept features are *structured*: a group's prefix P
(``w-1=``, ``b+1=``, ``a0[-1|0]=``, …) then the ids of one to three values (lower-cased words,
attribute values) whose strings are joined by ``|``. :class:`KeptNames` holds those as rows of
value ids and the rest (own-feature strings, n-grams of values holding ``|``) as strings, and
gives the order and the packed dictionary from numbers:

* the order of two strings P + body of one group is that of their bodies; for values without
  ``|``, a body a|b compares as (a + "|", b) and a|b|c as (a + "|", b + "|", c): where a ≠ a′,
  a + "|" and a′ + "|" differ before either's ``|`` ends the first value (a value that is a
  prefix of another meets the ``|``), so one sort of each value table by v and by v + "|" ranks
  every body (:func:`numpy.lexsort` of the ranks);
* group prefixes all end at their first ``=``, so none is a prefix of another: all strings
  that start with P (P's rows, and any free string — own features, the n-grams whose values
  hold ``|``, summed by string — that does) sit together in the string order where P would,
  after the free strings below P and before the rest; a free string of P's is put among P's
  rows by bisection (a few of them formatted).

The packed strings are formatted by a kernel from the value tables' bytes
(:func:`_format_rows`) and gathered in the dictionary's order
(:meth:`~demidcd.io.shards.PackedStrings.joined`). The result is
the one sorting every string would give (tests compare the two on adversarial values).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from itertools import pairwise

import numba as nb
import numpy as np

from ...io.shards import PackedStrings, concat_packed, pack_strings

__all__ = ["KeptNames", "format_rows", "frequency_order", "frequency_permutation"]


@dataclass
class _Group:
    """Structured features: ``rows`` (kind, value ids…) over ``values``, the string of a row
    ``prefixes[kind]`` and its values joined by ``|`` (none holding ``|`` but in a
    one-value group)."""

    prefixes: tuple[str, ...]
    rows: np.ndarray
    values: list[str]


@nb.njit(cache=True, nogil=True)
def _format_rows(pre_blob, pre_ends, val_blob, val_ends, rows):
    """(blob, ends): per row (kind, v…) the bytes of prefix ``kind`` then the values' bytes
    joined by ``|`` (``pre_ends``/``val_ends``: end offsets into the blobs)."""
    m, width = rows.shape
    ends = np.empty(m, np.int64)
    total = 0
    for i in range(m):
        k = rows[i, 0]
        total += pre_ends[k] - (pre_ends[k - 1] if k > 0 else 0) + width - 2
        for c in range(1, width):
            v = rows[i, c]
            total += val_ends[v] - (val_ends[v - 1] if v > 0 else 0)
        ends[i] = total
    out = np.empty(total, np.uint8)
    q = 0
    for i in range(m):
        k = rows[i, 0]
        for b in range(pre_ends[k - 1] if k > 0 else 0, pre_ends[k]):
            out[q] = pre_blob[b]
            q += 1
        for c in range(1, width):
            if c > 1:
                out[q] = 124  # "|"
                q += 1
            v = rows[i, c]
            for b in range(val_ends[v - 1] if v > 0 else 0, val_ends[v]):
                out[q] = val_blob[b]
                q += 1
    return out, ends


def format_rows(prefixes: tuple[str, ...], rows: np.ndarray, values: list[str]) -> list[str]:
    """The strings of ``rows`` (kind, value ids…): ``prefixes[kind]`` and the ``values``
    joined by ``|``."""
    names = KeptNames()
    names.add_rows(prefixes, rows, values)
    return names.strings()


def _by_string(keys: list[str]) -> np.ndarray:
    """The indices of ``keys`` in string order (ties: the first first)."""
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), np.int64)


def _ranks(keys: list[str]) -> np.ndarray:
    """The rank of each of ``keys`` in string order (ties: the first first)."""
    out = np.empty(len(keys), np.int64)
    out[_by_string(keys)] = np.arange(len(keys))
    return out


def frequency_order(names: list[str], counts: np.ndarray) -> list[str]:
    """``names`` (distinct) by decreasing count, ties in string order."""
    return [names[i] for i in frequency_permutation(names, counts).tolist()]


def frequency_permutation(names: list[str] | PackedStrings, counts: np.ndarray) -> np.ndarray:
    """The indices of ``names`` (distinct) by decreasing count, ties in string order."""
    by_name = names.order() if isinstance(names, PackedStrings) else _by_string(names)
    return by_name[np.argsort(-counts[by_name], kind="stable")]


class KeptNames:
    """The strings of the kept features, in the order they were added (their *positions*):
    free strings (:meth:`add_strings`) and groups of rows (:meth:`add_rows`); the dictionary's
    order (:meth:`permutation`) and its packed form (:meth:`joined`) without formatting the
    groups' strings in Python (module docstring)."""

    def __init__(self) -> None:
        self._parts: list[list[str] | PackedStrings | _Group] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add_strings(self, names: list[str] | PackedStrings) -> None:
        self._parts.append(names)
        self._size += len(names)

    def add_rows(self, prefixes: tuple[str, ...], rows: np.ndarray, values: list[str]) -> None:
        """Rows (kind, value ids…) whose strings are ``prefixes[kind]`` and the ``values``
        joined by ``|``."""
        self._parts.append(_Group(prefixes, np.ascontiguousarray(rows, np.int64), values))
        self._size += rows.shape[0]

    # -- strings -----------------------------------------------------------------------------
    def packed(self) -> PackedStrings:
        """Every string, in position order, packed."""
        out = []
        tables: dict[int, PackedStrings] = {}  # value tables shared by several groups
        for part in self._parts:
            if isinstance(part, _Group):
                table = tables.get(id(part.values))
                if table is None:
                    table = tables[id(part.values)] = pack_strings(part.values)
                pre = pack_strings(list(part.prefixes))
                out.append(PackedStrings(*_format_rows(pre.blob, pre.ends, table.blob,
                                                       table.ends, part.rows)))
            else:
                out.append(part if isinstance(part, PackedStrings) else pack_strings(part))
        return concat_packed(out)

    def strings(self) -> list[str]:
        """Every string, in position order."""
        return self.packed().strings()

    def joined(self, order: np.ndarray) -> np.ndarray:
        """The strings at positions ``order``, newline-joined UTF-8 (uint8)."""
        return self.packed().joined(np.ascontiguousarray(order, np.int64))

    # -- order -------------------------------------------------------------------------------
    def permutation(self, counts: np.ndarray) -> np.ndarray:
        """The positions by decreasing ``counts``, ties in string order
        (:func:`frequency_permutation` of :meth:`strings`, from the groups' value ranks)."""
        free: list[PackedStrings] = []
        free_at: list[np.ndarray] = []
        blocks: list[_Block] = []
        at = 0
        ranks: dict[tuple[int, bool], np.ndarray] = {}
        for part in self._parts:
            if isinstance(part, _Group):
                blocks += _blocks(part, at, ranks)
                at += part.rows.shape[0]
            else:
                free.append(part if isinstance(part, PackedStrings) else pack_strings(part))
                free_at.append(np.arange(at, at + len(part), dtype=np.int64))
                at += len(part)
        blocks.sort(key=lambda b: b.prefix)
        if any(b.prefix.startswith(a.prefix) for a, b in pairwise(blocks)):
            return frequency_permutation(self.packed(), counts)  # (not the built-in groups)
        packed_free = concat_packed(free)
        by_string = packed_free.order()
        ordered = packed_free.strings(by_string)
        where = np.concatenate(free_at)[by_string] if free_at else np.zeros(0, np.int64)
        head = np.empty(self._size, np.int64)
        within = np.zeros(self._size, np.int64)
        inside = np.zeros(len(ordered), bool)  # free strings placed in a block
        step = len(blocks) + 1
        for r, b in enumerate(blocks):
            lo = bisect_left(ordered, b.prefix)
            hi = lo
            while hi < len(ordered) and ordered[hi].startswith(b.prefix):
                hi += 1
            inside[lo:hi] = True
            # where no free string starts with a block's prefix, the block sits where its
            # prefix would among them: after those below it, before the rest
            head[b.pos] = lo * step + r
            head[where[lo:hi]] = lo * step + r
            within[b.pos], within[where[lo:hi]] = b.ranks(ordered[lo:hi])
        rest = np.flatnonzero(~inside)
        head[where[rest]] = rest * step + len(blocks)
        return np.lexsort((within, head, -np.asarray(counts, np.int64)))


@dataclass
class _Block:
    """The rows of one kind of a :class:`_Group` (its ``prefix``), at positions ``pos``:
    ``by_body`` orders them by their strings (from the value ranks)."""

    prefix: str
    pos: np.ndarray
    by_body: np.ndarray
    group: _Group
    sel: np.ndarray  # the rows of the group

    def string(self, i: int) -> str:
        row = self.group.rows[self.sel[i]]
        return self.prefix + "|".join(self.group.values[v] for v in row[1:].tolist())

    def ranks(self, others: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The rank in string order of each of the rows and of ``others`` (sorted strings
        distinct from the rows', each starting with the prefix) among all of them: each other
        string is put in place by bisection over the rows in order (a few formatted)."""
        m = self.by_body.shape[0]
        before = np.empty(len(others), np.int64)  # rows below each other string
        lo = 0
        for k, s in enumerate(others):
            hi = m
            while lo < hi:
                mid = (lo + hi) // 2
                if self.string(self.by_body[mid]) < s:
                    lo = mid + 1
                else:
                    hi = mid
            before[k] = lo
        rank = np.empty(m, np.int64)
        rank[self.by_body] = np.arange(m) + np.searchsorted(before, np.arange(m), side="right")
        return rank, before + np.arange(len(others))


def _blocks(g: _Group, at: int, ranks: dict) -> list[_Block]:
    """The kinds of ``g`` as :class:`_Block` (positions from ``at``); ``ranks``: the value
    tables' ranks by (table, with "|"), shared between groups."""
    def value_rank(bar: bool) -> np.ndarray:
        key = (id(g.values), bar)
        if key not in ranks:
            ranks[key] = _ranks([v + "|" for v in g.values] if bar else g.values)
        return ranks[key]

    width = g.rows.shape[1]
    cols = [value_rank(c < width - 1)[g.rows[:, c]] for c in range(1, width)]
    out = []
    for k, prefix in enumerate(g.prefixes):
        sel = np.flatnonzero(g.rows[:, 0] == k)
        if sel.shape[0]:
            out.append(_Block(prefix, sel + at, np.lexsort(tuple(c[sel] for c in reversed(cols))),
                              g, sel))
    return out
