"""The dictionary of the built-in ``base`` template (:mod:`demidcd.tasks.chain.features`) counted
per word *type* and per n-gram of type ids, with no feature string per token.

:meth:`~demidcd.tasks.chain.features.SequenceFeaturizer.fit` keeps the features that fire on at
least ``min_count`` training tokens. Each group of the template is counted where it is cheap:

    own(x_t)          per word type k: its features, each counted n_k times (n_k: tokens of k)
    w<o>=lower(x)     per (lower-cased type, offset): a numba pass over the tokens
    b-1=, b+1=        per distinct pair of lower-cased types (numba keys, ``np.unique``)
    a<j>[…]=          per attribute value and offset, per distinct value bigram and trigram

and only the strings of the distinct types and n-grams are formatted. The groups' strings
differ in their prefixes, so no token fires the same string twice and a feature's count is
the sum over the types or n-grams that give it. Two n-grams give the same string only when a
value holds ``|`` (``b-1=a|b|c`` is ("a|b", "c") and ("a", "b|c")): the n-grams of such values
are summed by string; the others are unique and filtered by count before any string is made.
``<s>`` / ``</s>`` (outside the sentence) are interned as the words and values of those
spellings, so a token ``<s>`` gives the string the sentence start gives, as formatting does.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass

import numba as nb
import numpy as np

from ...io.shards import PackedStrings, merge_counts
from .kept_names import KeptNames, format_rows

_BOS, _EOS = "<s>", "</s>"
_OFFSETS = (-2, -1, 1, 2)
_BIGRAM_SPECS = ("-2|-1", "-1|0", "0|1", "1|2")
_TRIGRAM_SPECS = ("-2|-1|0", "-1|0|1", "0|1|2")


@nb.njit(cache=True, nogil=True)
def context_counts(sent_ptr, tok_low, n_low, bos, eos):
    """int64[n_low, 4]: ``[l, j]`` is the number of tokens whose neighbour at offset o_j
    (−2, −1, +1, +2) has the lower-cased id l (``bos`` / ``eos`` outside the sentence)."""
    out = np.zeros((n_low, 4), np.int64)
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            for j in range(4):
                u = t + (j - 2 if j < 2 else j - 1)
                out[bos if u < a else eos if u >= b else tok_low[u], j] += 1
    return out


@nb.njit(cache=True, nogil=True)
def word_pair_rows(sent_ptr, tok_low, bos, eos):
    """int64[2 n_tokens, 3]: per token t the rows (0, l_{t−1}, l_t) of its ``b-1=`` feature
    and (1, l_t, l_{t+1}) of its ``b+1=`` feature (``bos`` / ``eos`` outside the sentence)."""
    n = tok_low.shape[0]
    out = np.empty((2 * n, 3), np.int64)
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            out[2 * t, 0] = 0
            out[2 * t, 1] = tok_low[t - 1] if t > a else bos
            out[2 * t, 2] = tok_low[t]
            out[2 * t + 1, 0] = 1
            out[2 * t + 1, 1] = tok_low[t]
            out[2 * t + 1, 2] = tok_low[t + 1] if t + 1 < b else eos
    return out


@nb.njit(cache=True, nogil=True)
def value_window_rows(sent_ptr, vals, n_vals, bos, eos):
    """The windows of one attribute column (value ids ``vals``, ``bos`` / ``eos`` outside the
    sentence): (uni int64[n_vals, 5], bi int64[4 n, 3], tri int64[3 n, 4]): ``uni[v, o + 2]``
    counts the tokens with v at offset o, ``bi`` holds a row (o + 2, v_o, v_{o+1}) per token
    and o = −2 … 1, ``tri`` a row (o + 2, v_o, v_{o+1}, v_{o+2}) per token and o = −2 … 0."""
    n = vals.shape[0]
    uni = np.zeros((n_vals, 5), np.int64)
    bi = np.empty((4 * n, 3), np.int64)
    tri = np.empty((3 * n, 4), np.int64)
    win = np.empty(5, np.int64)
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            for o in range(5):
                u = t + o - 2
                win[o] = vals[u] if a <= u < b else bos if u < a else eos
                uni[win[o], o] += 1
            for o in range(4):
                bi[4 * t + o, 0] = o
                bi[4 * t + o, 1] = win[o]
                bi[4 * t + o, 2] = win[o + 1]
            for o in range(3):
                tri[3 * t + o, 0] = o
                tri[3 * t + o, 1] = win[o]
                tri[3 * t + o, 2] = win[o + 1]
                tri[3 * t + o, 3] = win[o + 2]
    return uni, bi, tri


@nb.njit(cache=True, nogil=True)
def word_pair_keys(sent_ptr, tok_low, bos, eos, radix):
    """int64[2 n_tokens]: :func:`word_pair_rows`'s rows (kind, a, b) as one key each,
    (kind·radix + a)·radix + b (the caller checks that 2·radix² fits), without the rows
    (three times the memory)."""
    n = tok_low.shape[0]
    out = np.empty(2 * n, np.int64)
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            prev = tok_low[t - 1] if t > a else bos
            nxt = tok_low[t + 1] if t + 1 < b else eos
            out[2 * t] = prev * radix + tok_low[t]
            out[2 * t + 1] = (radix + tok_low[t]) * radix + nxt
    return out


def _unique_counts(keys: np.ndarray, in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(distinct keys in increasing order, how often each occurs): ``np.unique`` by sorting
    (numpy 2.4's ``np.unique`` of int64 is 20 times slower than its sort); ``in_place``:
    ``keys`` may be sorted where it is (no copy)."""
    if in_place:
        keys.sort()
    else:
        keys = np.sort(keys)
    if not keys.shape[0]:  # (a part without sentences)
        return keys, np.zeros(0, np.int64)
    first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[first], np.diff(np.append(first, keys.shape[0]))


def _keyed(radix: int, width: int) -> bool:
    """Whether rows (kind < 8, ``width`` − 1 ids below ``radix``) fit one int64 key each."""
    return 8 * radix ** (width - 1) < 2**62


def _unique_rows(rows: np.ndarray, radix: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, their counts) of an int64 array whose first column is below 8 and the
    others below ``radix``; one int64 key per row where the product fits."""
    if rows.shape[0] == 0:
        return rows, np.zeros(0, np.int64)
    width = rows.shape[1]
    if not _keyed(radix, width):
        return np.unique(rows, axis=0, return_counts=True)
    key = rows[:, 0].copy()
    for c in range(1, width):
        key *= radix
        key += rows[:, c]
    return _key_rows(key, radix, width)


def _key_rows(key: np.ndarray, radix: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_unique_rows` of the rows coded as ``key`` (sorted in place)."""
    uniq, counts = _unique_counts(key, in_place=True)
    return _decoded(uniq, radix, width), counts


@nb.njit(cache=True, nogil=True)
def _easy_kept(rows, counts, easy, min_count):
    """(the rows whose values are all ``easy`` and whose count is ≥ ``min_count``, the rows
    with a value that is not): indices, in one pass."""
    kept = np.empty(rows.shape[0], np.int64)
    hard = np.empty(rows.shape[0], np.int64)
    nk = nh = 0
    for i in range(rows.shape[0]):
        ok = True
        for c in range(1, rows.shape[1]):
            if not easy[rows[i, c]]:
                ok = False
        if not ok:
            hard[nh] = i
            nh += 1
        elif counts[i] >= min_count:
            kept[nk] = i
            nk += 1
    return kept[:nk].copy(), hard[:nh].copy()


class _Kept:
    """The features found so far with their counts (≥ min_count, or any count for the
    strings that may still be summed: :meth:`add_summed`), their strings in a
    :class:`~.kept_names.KeptNames`. Each ``add`` returns where its items went: their
    positions there (−1: not kept)."""

    def __init__(self, min_count: int):
        self.min_count = min_count
        self.names = KeptNames()
        self.counts: list[np.ndarray] = []

    def _positions(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the items kept, the positions of all: −1 where not kept)."""
        keep = np.flatnonzero(counts >= self.min_count)
        pos = np.full(counts.shape[0], -1, np.int64)
        pos[keep] = np.arange(len(self.names), len(self.names) + keep.shape[0])
        self.counts.append(counts[keep])
        return keep, pos

    def add(self, names: list[str] | PackedStrings, counts: np.ndarray) -> np.ndarray:
        """Features already known to be distinct from every other (counts not yet filtered;
        packed names stay packed, those kept taken)."""
        keep, pos = self._positions(counts)
        if isinstance(names, PackedStrings):
            self.names.add_strings(names.take(keep))
        else:
            self.names.add_strings(names if len(keep) == len(names) else
                                   [names[i] for i in keep.tolist()])
        return pos

    def add_rows(self, prefixes: tuple[str, ...], rows: np.ndarray, values: list[str],
                 counts: np.ndarray) -> np.ndarray:
        """Features ``prefixes[kind]`` + their ``values`` joined by ``|`` for ``rows`` (kind,
        value ids…), distinct from every other (counts not yet filtered)."""
        keep, pos = self._positions(counts)
        self.names.add_rows(prefixes, rows[keep], values)
        return pos

    def add_summed(self, names: list[str], counts: np.ndarray) -> np.ndarray:
        """Features whose strings may repeat (their counts are summed by string)."""
        total: dict[str, int] = {}
        for f, c in zip(names, counts.tolist(), strict=True):
            total[f] = total.get(f, 0) + c
        at = dict(zip(total, range(len(total)), strict=True))
        pos = self.add(list(total), np.fromiter(total.values(), np.int64, count=len(total)))
        return pos[np.fromiter(map(at.__getitem__, names), np.int64, count=len(names))]

    def ngrams(self, rows: np.ndarray, counts: np.ndarray, values: list[str],
               easy: np.ndarray, prefixes: tuple[str, ...]) -> np.ndarray:
        """The n-gram features of the distinct ``rows`` (kind, value ids…) with ``counts``:
        ``prefixes[kind]`` and the values joined by ``|``; ``easy[v]``: value v holds no
        ``|`` (its n-grams' strings are unique)."""
        sel, hard = _easy_kept(rows, counts, easy, self.min_count)
        pos = np.full(rows.shape[0], -1, np.int64)
        pos[sel] = self.add_rows(prefixes, rows[sel], values, counts[sel])
        if hard.shape[0]:
            pos[hard] = self.add_summed(format_rows(prefixes, rows[hard], values),
                                        counts[hard])
        return pos

    def result(self) -> tuple[KeptNames, np.ndarray]:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        return self.names, counts


def _intern(values, first: tuple[str, ...] = (_BOS, _EOS)) -> tuple[dict[str, int], np.ndarray]:
    """(value → id, the ids of ``values`` in order); ``first`` get the ids 0, 1, …"""
    index = {v: i for i, v in enumerate(first)}
    setdefault = index.setdefault
    ids = np.fromiter((setdefault(v, len(index)) for v in values), np.int64)
    return index, ids


@dataclass
class Column:
    """An attribute column's windows: its distinct ``values`` (``<s>`` 0, ``</s>`` 1), ``uni``
    (int64[len(values), 5]: tokens with value v at offset o − 2) and the distinct bigram and
    trigram rows (kind, value ids…) with their counts."""

    values: list[str]
    uni: np.ndarray
    bi: tuple[np.ndarray, np.ndarray]
    tri: tuple[np.ndarray, np.ndarray]


@dataclass
class BaseCounts:
    """What a corpus, or one part of it, gives the ``base`` template's dictionary, in terms of
    its distinct words, own-feature strings and attribute values only (no string per
    feature of the other groups, none per token): the distinct own-feature strings and the
    tokens that fire each; the lower-cased types (``<s>`` 0, ``</s>`` 1) with ``ctx``
    (int64[len(lowers), 4], :func:`context_counts`) and the distinct word-bigram rows (kind,
    a, b) over them with their counts; one :class:`Column` per attribute column.

    Counts of consecutive parts of a corpus add up to the corpus' counts
    (:func:`merge_base_counts`) since no feature looks past its sentence, so the dictionary
    of :func:`kept_features` is the serial one."""

    own: list[str] | PackedStrings
    own_counts: np.ndarray
    lowers: list[str]
    ctx: np.ndarray
    pairs: tuple[np.ndarray, np.ndarray]
    columns: list[Column]


@dataclass
class PartIds:
    """A corpus part's own ids, for encoding it once the dictionary is known
    (:mod:`~demidcd.tasks.chain.part_tables`): its types' own features in turn as indices
    into :attr:`BaseCounts.own` (``own_ids``; ``lens[k]`` of them for type k), each type's
    lower-cased word (an index into :attr:`BaseCounts.lowers`), each token's value of each
    attribute column (indices into :attr:`Column.values`)."""

    own_ids: np.ndarray
    lens: np.ndarray
    low_of_type: np.ndarray
    values: list[np.ndarray]


def base_counts(sent_ptr: np.ndarray, tok_type: np.ndarray, types: list[str],
                attrs: list[list[tuple]] | None, n_attr: int,
                word_features: Callable[[str], list[str]]) -> tuple[BaseCounts, PartIds]:
    """(counts, ids) of the tokens of sentences ``sent_ptr``, token t of type
    ``types[tok_type[t]]``, attribute columns ``attrs``. Raises ValueError for a word that
    holds a newline."""
    n_types = len(types)
    type_count = np.bincount(tok_type, minlength=n_types)

    # own(x): per type, counted as often as the type occurs. Each type's strings are interned
    # as they are made (only the distinct ones stay alive: the types share most prefixes,
    # suffixes and shapes, so keeping every type's list until the end held several strings
    # per type, a third of the set-up's peak on a million tokens)
    index: dict[str, int] = {}
    setdefault = index.setdefault
    own_list = array("q")
    lens = np.empty(n_types, np.int64)
    for k, word in enumerate(types):
        if "\n" in word:
            raise ValueError(f"invalid token {word!r}: tokens must not contain newlines")
        fs = word_features(word)
        own_list.extend([setdefault(f, len(index)) for f in fs])
        lens[k] = len(fs)
    names = list(index)
    del index, setdefault
    own_ids = np.frombuffer(own_list, np.int64).copy() if own_list else np.zeros(0, np.int64)
    del own_list
    width = max(len(names), 1)
    pairs = np.repeat(np.arange(n_types, dtype=np.int64), lens) * width + own_ids
    pairs = _unique_counts(pairs, in_place=True)[0]  # a type's features once each
    own_counts = np.rint(np.bincount(pairs % width, type_count[pairs // width].astype(
        np.float64), len(names))).astype(np.int64)

    # context words and word bigrams, over the lower-cased types (<s> 0, </s> 1)
    low_index, low_of_type = _intern(w.lower() for w in types)
    lowers = list(low_index)
    tok_low = low_of_type[tok_type] if n_types else np.zeros(0, np.int64)
    ctx = context_counts(sent_ptr, tok_low, len(lowers), 0, 1)
    radix = len(lowers)
    if _keyed(radix, 3):
        word_pairs = _key_rows(word_pair_keys(sent_ptr, tok_low, 0, 1, radix), radix, 3)
    else:
        word_pairs = _unique_rows(word_pair_rows(sent_ptr, tok_low, 0, 1), radix)

    columns, token_values = [], []
    for j in range(n_attr):
        index, vals = _intern(str(a[j]) for s in attrs for a in s)
        values = list(index)
        uni, bi, tri = value_window_rows(sent_ptr, vals, len(values), 0, 1)
        columns.append(Column(values, uni, _unique_rows(bi, len(values)),
                              _unique_rows(tri, len(values))))
        token_values.append(vals)
    return (BaseCounts(names, own_counts, lowers, ctx, word_pairs, columns),
            PartIds(own_ids, lens, low_of_type, token_values))


@dataclass
class KeptPositions:
    """Where the items of a :class:`BaseCounts` went in :func:`kept_features`'s names (−1:
    not kept): each own-feature string, each (lower-cased word, offset) of ``ctx``, each
    word-bigram row; per column ``(uni, bi, tri)`` likewise."""

    own: np.ndarray
    ctx: np.ndarray
    pairs: np.ndarray
    columns: list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def _single(n: int) -> np.ndarray:
    """Rows (0, v) for the values v < n of a one-value group."""
    rows = np.zeros((n, 2), np.int64)
    rows[:, 1] = np.arange(n)
    return rows


def kept_features(c: BaseCounts, min_count: int
                  ) -> tuple[KeptNames, np.ndarray, KeptPositions]:
    """(names, counts, positions) of the features that fire on ≥ ``min_count`` of the tokens
    counted in ``c``, each counted once per token that fires it (in no particular order;
    :meth:`~.kept_names.KeptNames.permutation` gives the dictionary's)."""
    kept = _Kept(min_count)
    own = kept.add(c.own, c.own_counts)
    ctx = np.empty(c.ctx.shape, np.int64)
    for j, o in enumerate(_OFFSETS):
        ctx[:, j] = kept.add_rows((f"w{o:+d}=",), _single(c.ctx.shape[0]), c.lowers,
                                  c.ctx[:, j])
    easy = np.fromiter(("|" not in w for w in c.lowers), bool, count=len(c.lowers))
    pairs = kept.ngrams(*c.pairs, c.lowers, easy, ("b-1=", "b+1="))
    columns = []
    for j, col in enumerate(c.columns):
        uni = np.full(col.uni.shape, -1, np.int64)
        for o in range(5):
            uni[:, o] = kept.add_rows((f"a{j}[{o - 2}]=",), _single(col.uni.shape[0]),
                                      col.values, col.uni[:, o])
        easy = np.fromiter(("|" not in v for v in col.values), bool, count=len(col.values))
        columns.append((uni, kept.ngrams(*col.bi, col.values, easy,
                                         tuple(f"a{j}[{spec}]=" for spec in _BIGRAM_SPECS)),
                        kept.ngrams(*col.tri, col.values, easy,
                                    tuple(f"a{j}[{spec}]=" for spec in _TRIGRAM_SPECS))))
    return (*kept.result(), KeptPositions(own, ctx, pairs, columns))


def count_base_features(sent_ptr: np.ndarray, tok_type: np.ndarray, types: list[str],
                        attrs: list[list[tuple]] | None, n_attr: int,
                        word_features: Callable[[str], list[str]], min_count: int
                        ) -> tuple[list[str], tuple[list[str], np.ndarray, np.ndarray]]:
    """(dictionary, own): the ``base`` template's features firing on ≥ ``min_count`` of the
    tokens by decreasing count, ties in string order (:func:`base_counts`,
    :func:`kept_features`), and the types' own features (strings, ids, lengths)."""
    counts, ids = base_counts(sent_ptr, tok_type, types, attrs, n_attr, word_features)
    names, kept_counts, _ = kept_features(counts, min_count)
    strings = names.strings()
    return ([strings[i] for i in names.permutation(kept_counts).tolist()],
            (counts.own, ids.own_ids, ids.lens))


@nb.njit(cache=True, nogil=True)
def _global_keys(rows, ids, radix):
    """One key per row (kind, a, b[, c]) of a part, its value ids mapped by ``ids``:
    (kind·radix + ids[a])·radix + ids[b] (·radix + ids[c])."""
    m, width = rows.shape
    out = np.empty(m, np.int64)
    for i in range(m):
        k = rows[i, 0]
        for c in range(1, width):
            k = k * radix + ids[rows[i, c]]
        out[i] = k
    return out


@nb.njit(cache=True, nogil=True)
def _merge_runs(keys, counts, starts):
    """The distinct keys of ``keys`` and their summed ``counts``, where ``keys[starts[r]:
    starts[r + 1]]`` is run r, increasing and distinct: a k-way merge through a binary heap
    of the runs' heads (O(n log k); the outputs are allocated once and not copied: their
    untouched tail costs no memory)."""
    k = starts.shape[0] - 1
    pos = starts[:-1].copy()
    heap = np.empty(k, np.int64)  # runs, a min-heap on their head keys
    size = 0
    for r in range(k):
        if pos[r] < starts[r + 1]:
            heap[size] = r
            size += 1
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(heap, size, i, keys, pos)
    out_k = np.empty(keys.shape[0], np.int64)
    out_c = np.empty(keys.shape[0], np.int64)
    n = 0
    while size > 0:
        r = heap[0]
        key = keys[pos[r]]
        if n > 0 and out_k[n - 1] == key:
            out_c[n - 1] += counts[pos[r]]
        else:
            out_k[n] = key
            out_c[n] = counts[pos[r]]
            n += 1
        pos[r] += 1
        if pos[r] == starts[r + 1]:
            size -= 1
            heap[0] = heap[size]
        _sift_down(heap, size, 0, keys, pos)
    return out_k[:n], out_c[:n]


@nb.njit(cache=True, nogil=True, inline="always")
def _sift_down(heap, size, i, keys, pos):
    while True:
        a = 2 * i + 1
        if a >= size:
            return
        if a + 1 < size and keys[pos[heap[a + 1]]] < keys[pos[heap[a]]]:
            a += 1
        if keys[pos[heap[i]]] <= keys[pos[heap[a]]]:
            return
        heap[i], heap[a] = heap[a], heap[i]
        i = a


def _summed_rows(grams: list[tuple[np.ndarray, np.ndarray]], maps: list[np.ndarray],
                 radix: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the parts' n-gram rows (``grams``: each part's distinct rows,
    first column below 8, and their counts; spent), their value ids mapped by the part's
    ``maps`` into ids below ``radix``, with their counts summed. One int64 key per row where it
    fits: each part's keys sorted into one array, then merged at once (:func:`_merge_runs`)."""
    width = grams[0][0].shape[1]
    if not _keyed(radix, width):
        rows = np.concatenate([_remapped(r, m) for (r, _), m in zip(grams, maps, strict=True)])
        uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
        total = np.zeros(uniq.shape[0], np.int64)
        np.add.at(total, inverse.reshape(-1), np.concatenate([c for _, c in grams]))
        return uniq, total
    starts = np.cumsum([0] + [r.shape[0] for r, _ in grams])
    keys = np.empty(starts[-1], np.int64)
    counts = np.empty(starts[-1], np.int64)
    for i, m in enumerate(maps):
        (r, c), grams[i] = grams[i], None  # (each part's rows let go once keyed)
        k = _global_keys(r, m, radix)
        del r
        order = np.argsort(k)
        keys[starts[i]:starts[i + 1]] = k[order]
        counts[starts[i]:starts[i + 1]] = c[order]
        del k, order
    keys, counts = _merge_runs(keys, counts, starts)
    return _decoded(keys, radix, width), counts


def _decoded(key: np.ndarray, radix: int, width: int) -> np.ndarray:
    """The rows (kind, a, b[, c]) of keys (kind·radix + a)·radix + b … (``key`` is spent)."""
    out = np.empty((key.shape[0], width), np.int64)
    for c in range(width - 1, 0, -1):
        out[:, c] = key % radix
        key //= radix
    out[:, 0] = key
    return out


def _merged_values(values: list[list[str]]) -> tuple[list[str], list[np.ndarray]]:
    """The distinct strings of the parts' ``values`` (each starting ``<s>``, ``</s>``) in
    order of first occurrence, and each part's ids among them."""
    m = merge_counts([(v, np.zeros(len(v), np.int64)) for v in values])
    return m.packed.strings(), m.maps


def _remapped(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
    out = rows.copy()
    out[:, 1:] = ids[rows[:, 1:]]
    return out


@dataclass
class PartMaps:
    """Where a part's strings went in :func:`merge_base_counts`: its own-feature strings,
    lower-cased words and (per column) attribute values, as indices into the merged ones."""

    own: np.ndarray
    lowers: np.ndarray
    values: list[np.ndarray]


def merge_base_counts(parts: list[BaseCounts]) -> tuple[BaseCounts, list[PartMaps]]:
    """The :class:`BaseCounts` of consecutive parts of a corpus together (strings merged by
    :func:`~demidcd.io.shards.merge_counts`, counts summed) and where each part's strings
    went. The parts' own strings and word bigrams are spent (their arrays are let go as
    soon as they are merged: the merge's peak holds one copy of them, not two)."""
    own = merge_counts([(p.own, p.own_counts) for p in parts])
    lowers, low_maps = _merged_values([p.lowers for p in parts])
    ctx = np.zeros((len(lowers), 4), np.int64)
    for p, m in zip(parts, low_maps, strict=True):
        ctx[m] += p.ctx  # (a part's lowers are distinct: no id twice)
        p.own = p.own_counts = None
    grams = [p.pairs for p in parts]
    for p in parts:
        p.pairs = None
    pairs = _summed_rows(grams, low_maps, len(lowers))
    columns, value_maps = [], []
    for j in range(len(parts[0].columns)):
        cols = [p.columns[j] for p in parts]
        values, maps = _merged_values([c.values for c in cols])
        uni = np.zeros((len(values), 5), np.int64)
        for c, m in zip(cols, maps, strict=True):
            uni[m] += c.uni
        columns.append(Column(values, uni, _summed_rows([c.bi for c in cols], maps, len(values)),
                              _summed_rows([c.tri for c in cols], maps, len(values))))
        value_maps.append(maps)
    merged = BaseCounts(own.packed, own.counts, lowers, ctx, pairs, columns)
    return merged, [PartMaps(own.maps[k], low_maps[k], [m[k] for m in value_maps])
                    for k in range(len(parts))]
