"""Feature encoding at decoding speed: the built-in features of
:class:`~demidcd.tasks.chain.features.SequenceFeaturizer` assembled per token by one numba kernel
from tables cached per word *type* (and per attribute value), with no Python string per token.

Every feature of the ``base`` template (:mod:`demidcd.tasks.chain.features`) of token t is a
function of the types around it:

    own(x_t)                         b, w=, lw=, p1..p4=, s1..s4=, sh=, csh=, cap, dig, …
    ctx_o(x_{t+o}), o = ±1, ±2       w-2= … w+2=<lower(x_{t+o})>   (<s> / </s> outside)
    b-1=lower(x_{t-1})|lower(x_t),   b+1=lower(x_t)|lower(x_{t+1})      (word bigrams)
    a<j>[o]=a_{t+o}, a<j>[o|o+1]=…, a<j>[o|o+1|o+2]=…                   (attribute windows)

so a :class:`TypeTables` holds, per word type k, the ids of own(k) (CSR rows), the four ids
ctx_o(k) and the id ``lw[k]`` of lower(k) among the words of the dictionary's bigram features;
per attribute value v of column j the five ids of ``a<j>[o]=v`` and the id of v among the
values of the dictionary's attribute n-grams. The n-gram features (word bigrams, attribute
bigrams and trigrams) are keys (kind, a, b, c) of an open-addressing hash table built from the
dictionary: a feature ``b-1=X`` is entered once for every ``|`` in X (the split of X into
lower(x_{t-1}) | lower(x_t) is not unique when a word holds ``|``; every split that a pair of
words can produce maps to the one feature string, exactly as formatting the string and looking
it up does). :func:`assemble_kernel` then builds each token's sorted, deduplicated id list
over the token-type ids, as :func:`~demidcd.tasks.chain.features._assemble` does from the strings:
the same ids, so the same encoding (tests/test_predict_fast.py checks equality).

The tables grow as new types are met (Python work once per type) and are kept across calls,
up to :data:`MAX_TYPES` types, past which they start afresh (constant memory over a stream).
"""

from __future__ import annotations

import itertools
import threading

import numba as nb
import numpy as np

from ...io.stream import intern_spans
from .feature_rows import add_word_ids, feature_rows, sort_unique

MAX_TYPES = 1 << 21  # types (and attribute values) kept before the tables start afresh
_BOS, _EOS = "<s>", "</s>"
_OFFSETS = (-2, -1, 1, 2)
_ATTR_OFFSETS = (-2, -1, 0, 1, 2)
KINDS_PER_ATTR = 7  # 4 bigram windows (o = −2 … 1) and 3 trigram windows (o = −2 … 0)

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
_M3 = np.uint64(0x165667B19E3779F9)
_M4 = np.uint64(0x27D4EB2F165667C5)


@nb.njit(cache=True, nogil=True)
def _slot(kind, a, b, c, bits):
    h = (np.uint64(kind) * _M4 + np.uint64(a) * _M1 + np.uint64(b) * _M2
         + np.uint64(c) * _M3)
    return np.int64(h >> np.uint64(64 - bits))


@nb.njit(cache=True, nogil=True)
def build_table(kind, a, b, c, ids):
    """An open-addressing table (keys int64[size, 4], vals int32[size], bits) of the n-gram
    keys (kind, a, b, c) → ids (linear probing, load ≤ 1/2)."""
    n = kind.shape[0]
    bits = 4
    while (1 << bits) < 2 * n + 2:
        bits += 1
    size = 1 << bits
    keys = np.full((size, 4), -1, np.int64)
    vals = np.full(size, -1, np.int32)
    mask = size - 1
    for i in range(n):
        h = _slot(kind[i], a[i], b[i], c[i], bits)
        while vals[h] >= 0 and not (keys[h, 0] == kind[i] and keys[h, 1] == a[i]
                                    and keys[h, 2] == b[i] and keys[h, 3] == c[i]):
            h = (h + 1) & mask
        keys[h, 0] = kind[i]
        keys[h, 1] = a[i]
        keys[h, 2] = b[i]
        keys[h, 3] = c[i]
        vals[h] = ids[i]
    return keys, vals, bits


@nb.njit(cache=True, nogil=True, inline="always")
def _lookup(keys, vals, bits, kind, a, b, c):
    mask = (1 << bits) - 1
    h = _slot(kind, a, b, c, bits)
    while vals[h] >= 0:
        if keys[h, 0] == kind and keys[h, 1] == a and keys[h, 2] == b and keys[h, 3] == c:
            return vals[h]
        h = (h + 1) & mask
    return -1


@nb.njit(cache=True, nogil=True)
def assemble_kernel(sent_ptr, tok_type, type_ptr, type_ids, ctx, bos, eos, lw, bos_lw, eos_lw,
                    attr, uni, cid, pad, keys, vals, bits):
    """(feat_ptr int64, feat_idx int32): per token the sorted unique ids of its features.

    ``tok_type[t]``: the type of token t; ``type_ids[type_ptr[k]:type_ptr[k+1]]``: own(k) (ids
    ≥ 0, sorted: the insertion sort then only moves the other ids); ``ctx[k, j]``:
    ctx_{o_j}(k), o = (−2, −1, 1, 2), with ``bos[j]`` / ``eos[j]`` outside the sentence;
    ``lw[k]``: the bigram word id of lower(k) (−1: in no bigram feature), bos_lw / eos_lw those
    of <s> / </s>. ``attr[t, j]``: the value id of column j at token t (values of all columns
    numbered together; ``pad[j, 0/1]``: the ids of <s> / </s> of column j), ``uni[v, o + 2]``:
    the id of ``a<j>[o]=v``, ``cid[v]``: v among the n-gram values (−1: none). (keys, vals,
    bits): the n-gram table (kinds 0 = b-1, 1 = b+1, then 7 per column).
    """
    n_attr = attr.shape[1]
    feat_ptr, feat_idx = feature_rows(tok_type, type_ptr, 6 + 12 * n_attr)
    win = np.empty(5, np.int64)
    pos = 0
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            start = pos
            ty = tok_type[t]
            pos = add_word_ids(feat_idx, pos, t, a, b, tok_type, type_ptr, type_ids, ctx, bos, eos)
            lt = lw[ty]
            if lt >= 0:
                la = lw[tok_type[t - 1]] if t > a else bos_lw
                if la >= 0:
                    v = _lookup(keys, vals, bits, 0, la, lt, 0)
                    if v >= 0:
                        feat_idx[pos] = v
                        pos += 1
                lb = lw[tok_type[t + 1]] if t + 1 < b else eos_lw
                if lb >= 0:
                    v = _lookup(keys, vals, bits, 1, lt, lb, 0)
                    if v >= 0:
                        feat_idx[pos] = v
                        pos += 1
            for j in range(n_attr):
                for o in range(5):
                    u = t + o - 2
                    win[o] = attr[u, j] if a <= u < b else pad[j, 0] if u < a else pad[j, 1]
                    v = uni[win[o], o]
                    if v >= 0:
                        feat_idx[pos] = v
                        pos += 1
                base = 2 + KINDS_PER_ATTR * j
                for o in range(4):
                    c0 = cid[win[o]]
                    c1 = cid[win[o + 1]]
                    if c0 >= 0 and c1 >= 0:
                        v = _lookup(keys, vals, bits, base + o, c0, c1, 0)
                        if v >= 0:
                            feat_idx[pos] = v
                            pos += 1
                for o in range(3):
                    c0 = cid[win[o]]
                    c1 = cid[win[o + 1]]
                    c2 = cid[win[o + 2]]
                    if c0 >= 0 and c1 >= 0 and c2 >= 0:
                        v = _lookup(keys, vals, bits, base + 4 + o, c0, c1, c2)
                        if v >= 0:
                            feat_idx[pos] = v
                            pos += 1
            pos = sort_unique(feat_idx, start, pos)
            feat_ptr[t + 1] = pos
    # the used part, not a copy of it: the buffer's unused end was never written, so it holds
    # no memory, where a copy doubled the largest array of the set-up at its peak
    return feat_ptr, feat_idx[:pos]


@nb.njit(cache=True, nogil=True)
def known_rows(ids, lens):
    """Rows of ids (row k: the next ``lens[k]`` of ``ids``) cut to their ids ≥ 0, sorted
    and unique: (ends int64[len(lens)]: where each row ends, the rows int32 one after the
    other)."""
    out = np.empty(ids.shape[0], np.int32)
    ends = np.empty(lens.shape[0], np.int64)
    pos = 0
    q = 0
    for k in range(lens.shape[0]):
        start = pos
        for i in range(q, q + lens[k]):
            if ids[i] >= 0:
                out[pos] = ids[i]
                pos += 1
        q += lens[k]
        pos = sort_unique(out, start, pos)
        ends[k] = pos
    return ends, out[:pos].copy()


@nb.njit(cache=True, nogil=True)
def bigram_keys(blob):
    """The word-bigram features in ``blob``, the newline-joined UTF-8 feature strings (the
    feature of line l has id l): one key per ``|`` of X in ``b-1=X`` / ``b+1=X``, as (kind
    0 / 1, start and end of the piece before the ``|``, of the piece after it, id)."""
    n = blob.shape[0]
    cap = 0
    for q in range(n):
        if blob[q] == 124:
            cap += 1
    kind = np.empty(cap, np.int64)
    spans = np.empty((2 * cap, 2), np.int64)
    ids = np.empty(cap, np.int32)
    m = 0
    line = 0
    i = 0
    while i <= n:
        j = i
        while j < n and blob[j] != 10:
            j += 1
        if (j - i >= 4 and blob[i] == 98 and (blob[i + 1] == 45 or blob[i + 1] == 43)
                and blob[i + 2] == 49 and blob[i + 3] == 61):
            for q in range(i + 4, j):
                if blob[q] == 124:
                    kind[m] = 0 if blob[i + 1] == 45 else 1
                    spans[m, 0] = i + 4
                    spans[m, 1] = q
                    spans[cap + m, 0] = q + 1
                    spans[cap + m, 1] = j
                    ids[m] = line
                    m += 1
        line += 1
        i = j + 1
    both = np.concatenate((spans[:m], spans[cap:cap + m]))
    return kind[:m].copy(), both, ids[:m].copy()


class _Grow:
    """A numpy array grown by doubling along its first axis (``a[:n]`` is the content)."""

    def __init__(self, dtype: type, width: int = 0, fill: int = 0):
        self.width, self.fill = width, fill
        self.a = np.full((16, width) if width else 16, fill, dtype)
        self.n = 0

    def extend(self, rows: np.ndarray) -> None:
        m = rows.shape[0]
        if self.n + m > self.a.shape[0]:
            cap = max(2 * self.a.shape[0], self.n + m)
            new = np.full((cap, self.width) if self.width else cap, self.fill, self.a.dtype)
            new[:self.n] = self.a[:self.n]
            self.a = new
        self.a[self.n:self.n + m] = rows
        self.n += m

    @property
    def view(self) -> np.ndarray:
        return self.a[:self.n]


def _splits(text: str, parts: int) -> list[tuple[str, ...]]:
    """Every way of cutting ``text`` at ``parts − 1`` of its ``|`` into ``parts`` pieces."""
    bars = [i for i, ch in enumerate(text) if ch == "|"]
    if parts == 2:
        return [(text[:i], text[i + 1:]) for i in bars]
    return [(text[:i], text[i + 1:k], text[k + 1:]) for x, i in enumerate(bars)
            for k in bars[x + 1:]]


class TypeTables:
    """The per-type tables of one fitted dictionary (``index``: feature string → id) for
    sentences whose tokens carry ``n_attr`` attribute columns; ``word_features(word)`` gives a
    word's own feature strings. :meth:`encode` returns what
    :meth:`~demidcd.tasks.chain.features.SequenceFeaturizer._encode` returns for the same tokens."""

    def __init__(self, index: dict[str, int], word_features, n_attr: int,
                 blob: np.ndarray | None = None):
        self.index, self.word_features, self.n_attr = index, word_features, int(n_attr)
        self.blob = blob  # the feature strings joined by newlines, in id order (or None)
        get = index.get
        self.bos = np.array([get(f"w{o:+d}={_BOS}", -1) for o in _OFFSETS], np.int32)
        self.eos = np.array([get(f"w{o:+d}={_EOS}", -1) for o in _OFFSETS], np.int32)
        self._build_ngrams()
        self.lock = threading.Lock()
        self.reset()

    def _build_ngrams(self) -> None:
        """The n-gram table and the word / attribute-value ids its keys use."""
        index = self.index
        blob = self.blob
        if blob is None:
            blob = np.frombuffer("\n".join(index).encode("utf-8"), np.uint8)
        karr, spans, iarr = bigram_keys(blob)
        m = karr.shape[0]
        starts = np.ascontiguousarray(spans[:, :1])
        ends = np.ascontiguousarray(spans[:, 1:])
        pieces, first = intern_spans(blob, starts, ends, 0)
        raw = blob.tobytes()
        words = {raw[a:b].decode("utf-8"): i for i, (a, b) in
                 enumerate(zip(starts[first, 0].tolist(), ends[first, 0].tolist(),
                               strict=True))}
        kind = karr.tolist()
        ka = pieces[:m].tolist()
        kb = pieces[m:].tolist()
        kc = [0] * m
        ids = iarr.tolist()
        values: dict[tuple[int, str], int] = {}
        if self.n_attr:
            for f in (f for f in index if f[:1] == "a" and "|" in f):
                k, j, n = _attr_kind(f)
                if k < 0 or j >= self.n_attr:
                    continue
                for parts in _splits(f[f.index("]=") + 2:], n):
                    c = [values.setdefault((j, p), len(values)) for p in parts]
                    kind.append(k)
                    ka.append(c[0])
                    kb.append(c[1])
                    kc.append(c[2] if n == 3 else 0)
                    ids.append(index[f])
        self.bigram_words = words
        self.ngram_values = values
        arr = [np.array(x, np.int64) for x in (kind, ka, kb, kc)]
        self.keys, self.vals, self.bits = build_table(*arr, np.array(ids, np.int32))
        self.bos_lw = words.get(_BOS, -1)
        self.eos_lw = words.get(_EOS, -1)

    def reset(self) -> None:
        """Forget every type (the tables start afresh)."""
        self.types: dict[str, int] = {}
        self.type_ptr = _Grow(np.int64)
        self.type_ptr.extend(np.zeros(1, np.int64))
        self.type_ids = _Grow(np.int32)
        self.ctx = _Grow(np.int32, 4)
        self.lw = _Grow(np.int32)
        self.attr_values: list[dict[str, int]] = [{} for _ in range(self.n_attr)]
        self.n_values = 0
        self.uni = _Grow(np.int32, 5)
        self.cid = _Grow(np.int64)
        self.pad = np.zeros((max(self.n_attr, 1), 2), np.int64)
        self._lower_ids: dict[str, int] = {}  # lower-cased word → its row of _lower_ctx
        self._lower_ctx = _Grow(np.int32, 4)  # ids of w-2= … w+2= <lower-cased word>
        for j in range(self.n_attr):
            self.pad[j] = self.value_ids(j, [_BOS, _EOS])

    def add_types(self, words: list[str], feature_ids: np.ndarray | None = None,
                  lens: np.ndarray | None = None) -> None:
        """Enter new word types (not yet in :attr:`types`, distinct) in the tables; the ids
        of their own features (−1: not in the dictionary; word k has ``lens[k]`` of them, in
        turn) may be given by a caller that has them (:meth:`SequenceFeaturizer.fit`)."""
        get = self.index.get
        if feature_ids is None:
            word_features = self.word_features
            feats: list[str] = []
            lens = np.empty(len(words), np.int64)
            for k, word in enumerate(words):
                fs = word_features(word)
                feats += fs
                lens[k] = len(fs)
            feature_ids = np.fromiter(map(get, feats, itertools.repeat(-1)), np.int32,
                                      count=len(feats))
        # own ids sorted: the kernel's sort then has only the few context ids to move
        ends, rows = known_rows(feature_ids, lens)
        lows = [w.lower() for w in words]
        lower_ids = self._lower_ids
        new = [low for low in dict.fromkeys(lows) if low not in lower_ids]
        if new:
            new_ctx = np.empty((len(new), 4), np.int32)
            for j, o in enumerate(_OFFSETS):
                new_ctx[:, j] = np.fromiter(map(get, [f"w{o:+d}={low}" for low in new],
                                             itertools.repeat(-1)), np.int32, count=len(new))
            n = self._lower_ctx.n
            lower_ids.update(zip(new, range(n, n + len(new)), strict=True))
            self._lower_ctx.extend(new_ctx)
        ctx = self._lower_ctx.view[np.fromiter(map(lower_ids.__getitem__, lows), np.int64,
                                               count=len(lows))]
        lw = np.fromiter(map(self.bigram_words.get, lows, itertools.repeat(-1)), np.int32,
                         count=len(lows))
        n = len(self.types)
        self.types.update(zip(words, range(n, n + len(words)), strict=True))
        self.type_ids.extend(rows)
        self.type_ptr.extend(ends + self.type_ptr.a[self.type_ptr.n - 1])
        self.ctx.extend(ctx)
        self.lw.extend(lw)

    def value_ids(self, j: int, values: list[str]) -> np.ndarray:
        """The ids of attribute values of column j (new ones entered)."""
        col = self.attr_values[j]
        get = col.get
        out = np.fromiter(map(get, values, itertools.repeat(-1, len(values))), np.int64,
                          count=len(values))
        missing = np.flatnonzero(out < 0)
        if missing.shape[0]:
            new = list(dict.fromkeys(values[i] for i in missing.tolist()))
            fget = self.index.get
            nv = self.ngram_values.get
            self.uni.extend(np.array([[fget(f"a{j}[{o}]={x}", -1) for o in _ATTR_OFFSETS]
                                      for x in new], np.int32).reshape(-1, 5))
            self.cid.extend(np.array([nv((j, x), -1) for x in new], np.int64))
            col.update(zip(new, range(self.n_values, self.n_values + len(new)), strict=True))
            self.n_values += len(new)
            out[missing] = np.fromiter((col[values[i]] for i in missing.tolist()), np.int64,
                                       count=missing.shape[0])
        return out

    def begin(self, n: int) -> None:
        """Before the ids of ``n`` more tokens: start afresh when the tables would pass
        :data:`MAX_TYPES` (ids taken before are then void)."""
        if len(self.types) + n > MAX_TYPES or self.n_values + n > MAX_TYPES:
            self.reset()

    def type_ids_of(self, words: list[str]) -> np.ndarray:
        """The type id of every word (new types entered)."""
        get = self.types.get
        ids = np.fromiter(map(get, words, itertools.repeat(-1, len(words))), np.int64,
                          count=len(words))
        missing = np.flatnonzero(ids < 0)
        if missing.shape[0]:
            unknown = words if missing.shape[0] == len(words) else \
                list(map(words.__getitem__, missing.tolist()))
            self.add_types(list(dict.fromkeys(unknown)))
            ids[missing] = np.fromiter(map(self.types.__getitem__, unknown), np.int64,
                                       count=missing.shape[0])
        return ids

    def encode(self, sent_ptr: np.ndarray, words: list[str], local: np.ndarray | None = None,
               values: list[list[str]] | None = None,
               vlocal: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(feat_ptr, feat_idx) of the tokens of sentences ``sent_ptr``: token t is the word
        words[local[t]] (local None: words[t]) with the value values[j][vlocal[j][t]] in
        attribute column j (vlocal None: values[j][t]). Thread-safe: the tables are updated
        under a lock, the kernel runs on a snapshot of them."""
        with self.lock:
            self.begin(len(words) + sum(map(len, values or ())))
            tok_type = self.type_ids_of(words)
            if local is not None:
                tok_type = tok_type[local]
            attr = np.empty((tok_type.shape[0], self.n_attr), np.int64)
            for j in range(self.n_attr):
                v = self.value_ids(j, values[j])
                attr[:, j] = v if vlocal is None else v[vlocal[j]]
            types = (self.type_ptr.view, self.type_ids.view, self.ctx.view, self.bos, self.eos,
                     self.lw.view, self.bos_lw, self.eos_lw)
            vals = (self.uni.view, self.cid.view, self.pad)
        return assemble_kernel(sent_ptr, tok_type, *types, attr, *vals, self.keys, self.vals,
                               self.bits)


def _attr_kind(f: str) -> tuple[int, int, int]:
    """(table kind, column j, pieces) of an attribute n-gram feature ``a<j>[o|…]=…``, or
    (−1, 0, 0) for anything else."""
    close = f.find("]=")
    open_ = f.find("[")
    if open_ < 2 or close < open_ or not f[1:open_].isdigit():
        return -1, 0, 0
    j = int(f[1:open_])
    spec = f[open_ + 1:close]
    pos = {"-2|-1": 0, "-1|0": 1, "0|1": 2, "1|2": 3, "-2|-1|0": 4, "-1|0|1": 5, "0|1|2": 6}
    k = pos.get(spec, -1)
    if k < 0:
        return -1, 0, 0
    return 2 + KINDS_PER_ATTR * j + k, j, 2 if k < 4 else 3
