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

import numba as nb
import numpy as np

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
    first = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[first], np.diff(np.append(first, keys.shape[0]))


def _unique_rows(rows: np.ndarray, radix: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, their counts) of an int64 array whose first column is below 8 and the
    others below ``radix``; one int64 key per row where the product fits."""
    if rows.shape[0] == 0:
        return rows, np.zeros(0, np.int64)
    width = rows.shape[1]
    if 8 * radix ** (width - 1) >= 2**62:
        return np.unique(rows, axis=0, return_counts=True)
    key = rows[:, 0].copy()
    for c in range(1, width):
        key *= radix
        key += rows[:, c]
    return _key_rows(key, radix, width)


def _key_rows(key: np.ndarray, radix: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_unique_rows` of the rows coded as ``key`` (sorted in place)."""
    uniq, counts = _unique_counts(key, in_place=True)
    out = np.empty((uniq.shape[0], width), np.int64)
    for c in range(width - 1, 0, -1):
        out[:, c] = uniq % radix
        uniq //= radix
    out[:, 0] = uniq
    return out, counts


def _ngram_names(rows: np.ndarray, values: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """The strings of n-gram rows (kind, value ids…): ``prefixes[kind]`` and the values
    joined by ``|``."""
    cols = [c.tolist() for c in rows.T]  # lists of ints: no container per row for the gc
    if rows.shape[1] == 3:
        return [f"{prefixes[k]}{values[a]}|{values[b]}" for k, a, b in zip(*cols, strict=True)]
    return [f"{prefixes[k]}{values[a]}|{values[b]}|{values[c]}"
            for k, a, b, c in zip(*cols, strict=True)]


class _Kept:
    """The features found so far with their counts (≥ min_count, or any count for the
    strings that may still be summed: :meth:`add_summed`)."""

    def __init__(self, min_count: int):
        self.min_count = min_count
        self.names: list[str] = []
        self.counts: list[np.ndarray] = []

    def add(self, names: list[str], counts: np.ndarray) -> None:
        """Features already known to be distinct from every other (counts not yet filtered)."""
        keep = np.flatnonzero(counts >= self.min_count)
        self.names.extend(names if len(keep) == len(names) else
                          [names[i] for i in keep.tolist()])
        self.counts.append(counts[keep])

    def add_summed(self, names: list[str], counts: np.ndarray) -> None:
        """Features whose strings may repeat (their counts are summed by string)."""
        total: dict[str, int] = {}
        for f, c in zip(names, counts.tolist(), strict=True):
            total[f] = total.get(f, 0) + c
        self.add(list(total), np.fromiter(total.values(), np.int64, count=len(total)))

    def ngrams(self, rows: np.ndarray, counts: np.ndarray, values: list[str],
               easy: np.ndarray, prefixes: tuple[str, ...]) -> None:
        """The n-gram features of the distinct ``rows`` (kind, value ids…) with ``counts``:
        ``prefixes[kind]`` and the values joined by ``|``; ``easy[v]``: value v holds no
        ``|`` (its n-grams' strings are unique)."""
        ok = easy[rows[:, 1:]].all(axis=1)
        sel = np.flatnonzero(ok & (counts >= self.min_count))
        self.add(_ngram_names(rows[sel], values, prefixes), counts[sel])
        hard = np.flatnonzero(~ok)
        if hard.shape[0]:
            self.add_summed(_ngram_names(rows[hard], values, prefixes), counts[hard])

    def result(self) -> tuple[list[str], np.ndarray]:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        return self.names, counts


def _intern(values, first: tuple[str, ...] = (_BOS, _EOS)) -> tuple[dict[str, int], np.ndarray]:
    """(value → id, the ids of ``values`` in order); ``first`` get the ids 0, 1, …"""
    index = {v: i for i, v in enumerate(first)}
    setdefault = index.setdefault
    ids = np.fromiter((setdefault(v, len(index)) for v in values), np.int64)
    return index, ids


def count_base_features(sent_ptr: np.ndarray, tok_type: np.ndarray, types: list[str],
                        attrs: list[list[tuple]] | None, n_attr: int,
                        word_features: Callable[[str], list[str]], min_count: int
                        ) -> tuple[list[str], np.ndarray, tuple[list[str], np.ndarray,
                                                                np.ndarray]]:
    """(names, counts, own) of the ``base`` template's features firing on ≥ ``min_count`` of
    the tokens (sentences ``sent_ptr``, token t of type ``types[tok_type[t]]``, attribute
    columns ``attrs``), each counted once per token that fires it; ``word_features(word)``: a
    word's own features, which ``own`` gives back as (strings, the string of each feature of
    each type, in turn, as an index into them, how many each type has). Raises ValueError for
    a word that holds a newline."""
    kept = _Kept(min_count)
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
    pairs = np.repeat(np.arange(n_types, dtype=np.int64), lens) * max(len(names), 1) + own_ids
    pairs = _unique_counts(pairs, in_place=True)[0]  # a type's features once each
    counts = np.bincount(pairs % max(len(names), 1),
                         type_count[pairs // max(len(names), 1)].astype(np.float64), len(names))
    kept.add(names, np.rint(counts).astype(np.int64))
    own = (names, own_ids, lens)

    # context words and word bigrams, over the lower-cased types (<s> 0, </s> 1)
    low_index, low_of_type = _intern(w.lower() for w in types)
    lowers = list(low_index)
    tok_low = low_of_type[tok_type] if n_types else np.zeros(0, np.int64)
    ctx = context_counts(sent_ptr, tok_low, len(lowers), 0, 1)
    for j, o in enumerate(_OFFSETS):
        sel = np.flatnonzero(ctx[:, j] >= min_count)
        kept.add([f"w{o:+d}={lowers[i]}" for i in sel.tolist()], ctx[sel, j])
    radix = len(lowers)
    if 8 * radix ** 2 < 2**62:
        rows, counts = _key_rows(word_pair_keys(sent_ptr, tok_low, 0, 1, radix), radix, 3)
    else:
        rows, counts = _unique_rows(word_pair_rows(sent_ptr, tok_low, 0, 1), radix)
    easy = np.fromiter(("|" not in w for w in lowers), bool, count=len(lowers))
    kept.ngrams(rows, counts, lowers, easy, ("b-1=", "b+1="))

    # attribute windows, per column
    for j in range(n_attr):
        index, vals = _intern(str(a[j]) for s in attrs for a in s)
        values = list(index)
        uni, bi, tri = value_window_rows(sent_ptr, vals, len(values), 0, 1)
        for o in range(5):
            sel = np.flatnonzero(uni[:, o] >= min_count)
            kept.add([f"a{j}[{o - 2}]={values[v]}" for v in sel.tolist()], uni[sel, o])
        easy = np.fromiter(("|" not in v for v in values), bool, count=len(values))
        kept.ngrams(*_unique_rows(bi, len(values)), values, easy,
                    tuple(f"a{j}[{spec}]=" for spec in _BIGRAM_SPECS))
        kept.ngrams(*_unique_rows(tri, len(values)), values, easy,
                    tuple(f"a{j}[{spec}]=" for spec in _TRIGRAM_SPECS))
    return (*kept.result(), own)


def frequency_order(names: list[str], counts: np.ndarray) -> list[str]:
    """``names`` (distinct) by decreasing count, ties in string order."""
    return [names[i] for i in frequency_permutation(names, counts).tolist()]


def frequency_permutation(names: list[str], counts: np.ndarray) -> np.ndarray:
    """The indices of ``names`` (distinct) by decreasing count, ties in string order."""
    by_name = np.array(sorted(range(len(names)), key=names.__getitem__), np.int64)
    return by_name[np.argsort(-counts[by_name], kind="stable")]
