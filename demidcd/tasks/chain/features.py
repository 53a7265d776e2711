"""Observation features for sequence labelling: a fixed template and a feature dictionary.

For token t of a sentence (w_0 … w_{n-1}) the template emits the binary features

    b                       bias
    w=<w_t>, lw=<lower(w_t)>
    p1..p4=<prefix>, s1..s4=<suffix>     (only lengths ≤ len(w_t))
    sh=<shape>, csh=<collapsed shape>    (X upper, x lower, d digit, other kept; csh drops repeats)
    cap, dig, hyph, allcap               (is capitalised, has digit, has hyphen, all caps)
    w-2=, w-1=, w+1=, w+2=<lower(w_{t±k})>  with <s> / </s> outside the sentence
    b-1=<lower(w_{t-1})>|<lower(w_t)>, b+1=<lower(w_t)>|<lower(w_{t+1})>   word bigrams

and, for each extra input column j of the token (its *attributes*, e.g. the POS column of
CoNLL-2000: a token is then a tuple ``(word, attr_0, …)``), the window of CRFsuite's chunking
example over a_t = attr_j of token t (``<s>`` / ``</s>`` outside the sentence):

    a<j>[o]=a_{t+o}                         o = −2 … 2          (unigrams)
    a<j>[o|o+1]=a_{t+o}|a_{t+o+1}           o = −2 … 1          (bigrams)
    a<j>[o|o+1|o+2]=a_{t+o}|…|a_{t+o+2}     o = −2 … 0          (trigrams)

The bigrams raised EWT XPOS dev accuracy (neighbour suffixes and shapes did not).

The ``ner`` template (``template="ner"``, used by ``--task ner``) adds, from the training
words alone (no external resources): distributional clusters k0=, k1= of the word
(:func:`word_clusters`, k-means with k = 64 and 256 over left/right neighbour counts) and

    W[-1]=, W[1]=<w_{t±1}> (cased), w[-3]=, w[3]=<lower(w_{t±3})>, wa=<lower(w_t)>|<a0_t>

(:func:`_ner_window`; a0 is the first attribute column, e.g. POS). The window and then the
clusters each raised CoNLL-2002 Spanish entity F1.

It also looks beyond the sentence (:func:`_doc_context`): for a capitalised word, the other
occurrences of the same word within ``DOC_WINDOW`` = 1000 tokens of the text (sentences in
their order in the file) give capitalisation evidence (dc:low, dc:mid, dc:after, dc:before) and
their neighbours (ca-1=, ca+1=; context aggregation, Ratinov & Roth 2009). A sentence predicted
alone gets none of them. ``DOC_WINDOW`` was chosen on esp.testa (the development set).

The figures behind these choices: benchmarks/README.md, "Evidence behind the defaults and
design choices".

Everything that depends on the word alone is computed once per word *type*; the per-token work
(concatenating the type's ids with the neighbours' ids, sorting, deduplicating) is one numba
kernel. Feature ids come either from a dictionary built by :meth:`SequenceFeaturizer.fit`
(features firing on ≥ ``min_count`` training tokens, ids in order of decreasing count, ties in
string order) or, with ``hashing > 0``, from ``zlib.crc32(utf-8 bytes) mod hashing`` (stable
across processes).

Why frequency order: the weight of feature f for tag k is w[f·K + k], so the rows of frequent
features, which inference reads and the learner updates most, then sit together at the front of
w (fewer cache and TLB misses than ids in string order, which scatter them over all of w;
benchmarks/README.md).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numba as nb
import numpy as np

from ...primitives.monitor import PROGRESS_EVERY, timed_step
from .feature_counts import (
    base_counts,
    count_base_features,
    kept_features,
    merge_base_counts,
)
from .feature_rows import add_ids, add_word_ids, feature_rows, sort_unique
from .kept_names import frequency_order
from .part_tables import encode_part_tokens, part_tables

# 2 drops the singletons (about half the features, so of w) at no measurable accuracy cost
# (benchmarks/README.md, "Evidence behind the defaults").
DEFAULT_MIN_COUNT = 2
TEMPLATE_VERSION = 2
_BOS, _EOS = "<s>", "</s>"
_OFFSETS = (-2, -1, 1, 2)


@dataclass
class EncodedSequences:
    """Sentences as CSR-like arrays of observation feature ids (and values).

    Sentence s holds tokens sent_ptr[s]:sent_ptr[s+1]; token t fires the unigram observation
    features feat_idx[feat_ptr[t]:feat_ptr[t+1]] (ids in [0, F), sorted, unique) with values
    feat_val[same range] (None: every value is 1).

    Bigram observation features (CRF++ / Wapiti ``B`` templates with an observation; ids in
    [0, G), see :mod:`demidcd.tasks.chain.kernels`): token t fires bfeat_idx[bfeat_ptr[t]:
    bfeat_ptr[t+1]] with values bfeat_val[same range] (None: all 1); they score the transition
    (y_{t-1} → y_t), so those of a sentence's first token are ignored. bfeat_ptr None: none.

    ``allowed_ptr`` / ``allowed_idx``: the labels each token admits when the training data is
    partially labelled (:mod:`.partial`), else None.
    """

    sent_ptr: np.ndarray  # int64[n_sent+1]
    feat_ptr: np.ndarray  # int64[n_tokens+1]
    feat_idx: np.ndarray  # int32[nnz]
    feat_val: np.ndarray | None = None  # float64[nnz] or None (all 1)
    bfeat_ptr: np.ndarray | None = None  # int64[n_tokens+1] or None (no bigram features)
    bfeat_idx: np.ndarray | None = None  # int32[bnnz]
    bfeat_val: np.ndarray | None = None  # float64[bnnz] or None (all 1)
    # partially labelled training data (:mod:`.partial`): token t admits the labels
    # allowed_idx[allowed_ptr[t]:allowed_ptr[t+1]] (empty: any); None when all are labelled
    # (keyword-only: subclasses add positional fields after these)
    allowed_ptr: np.ndarray | None = field(default=None, kw_only=True)  # int64[n_tokens+1]
    allowed_idx: np.ndarray | None = field(default=None, kw_only=True)  # int32[...]
    # the scheme's (allowed K·K, first K, last K) the consistent taggings obey, or None
    label_rules: tuple | None = field(default=None, kw_only=True)

    @property
    def n_sentences(self) -> int:
        return int(self.sent_ptr.shape[0] - 1)

    @property
    def n_tokens(self) -> int:
        return int(self.feat_ptr.shape[0] - 1)


def word_shape(word: str) -> str:
    """Map upper-case letters to X, lower-case to x, digits to d; keep everything else."""
    out = []
    for c in word:
        if c.isupper():
            out.append("X")
        elif c.islower():
            out.append("x")
        elif c.isdigit():
            out.append("d")
        else:
            out.append(c)
    return "".join(out)


def collapse_shape(shape: str) -> str:
    """Drop consecutive repeats: ``Xxxxx`` → ``Xx``, ``dd-dd`` → ``d-d``."""
    out = []
    for c in shape:
        if not out or out[-1] != c:
            out.append(c)
    return "".join(out)


def word_features(word: str) -> list[str]:
    """The features of the template that depend on the token's own word only."""
    lw = word.lower()
    shape = word_shape(word)
    feats = ["b", "w=" + word, "lw=" + lw]
    n = len(word)
    for k in range(1, min(4, n) + 1):
        feats.append(f"p{k}={word[:k]}")
        feats.append(f"s{k}={word[-k:]}")
    feats.append("sh=" + shape)
    feats.append("csh=" + collapse_shape(shape))
    if word[:1].isupper():
        feats.append("cap")
    if any(c.isdigit() for c in word):
        feats.append("dig")
    if "-" in word:
        feats.append("hyph")
    if word.isupper():
        feats.append("allcap")
    return feats


def _bigrams(tokens: list[list[str]], attrs: list[list[tuple[str, ...]]] | None = None,
             n_attr: int = 0):
    """Per token, the word-bigram features with its left and right neighbour (lower-cased),
    then the 12 attribute-window features of each of the ``n_attr`` attribute columns."""
    for s, sent in enumerate(tokens):
        low = [_BOS] + [w.lower() for w in sent] + [_EOS]
        cols = []
        if n_attr:
            sa = attrs[s]
            cols = [[_BOS, _BOS] + [a[j] for a in sa] + [_EOS, _EOS] for j in range(n_attr)]
        for t in range(1, len(low) - 1):
            yield f"b-1={low[t - 1]}|{low[t]}"
            yield f"b+1={low[t]}|{low[t + 1]}"
            for j, c in enumerate(cols):
                u = t + 1  # position of token t in the padded column
                m2, m1, z, p1, p2 = c[u - 2], c[u - 1], c[u], c[u + 1], c[u + 2]
                yield f"a{j}[-2]={m2}"
                yield f"a{j}[-1]={m1}"
                yield f"a{j}[0]={z}"
                yield f"a{j}[1]={p1}"
                yield f"a{j}[2]={p2}"
                yield f"a{j}[-2|-1]={m2}|{m1}"
                yield f"a{j}[-1|0]={m1}|{z}"
                yield f"a{j}[0|1]={z}|{p1}"
                yield f"a{j}[1|2]={p1}|{p2}"
                yield f"a{j}[-2|-1|0]={m2}|{m1}|{z}"
                yield f"a{j}[-1|0|1]={m1}|{z}|{p1}"
                yield f"a{j}[0|1|2]={z}|{p1}|{p2}"


_PER_ATTR = 12  # features per attribute column and token (see _bigrams)

TEMPLATES = ("base", "ner")
_PER_NER = 5  # features per token of the "ner" window (see _ner_window)
DOC_WINDOW = 1000  # tokens either side that _doc_context looks at
DOC_NEAREST = 4  # other occurrences whose neighbours _doc_context aggregates
_PER_DOC = 4 + 2 * DOC_NEAREST
_NONE = "\x00"  # a feature string no dictionary holds: id −1, dropped


def word_clusters(words: list[list[str]], ks: tuple[int, ...] = (64, 256), min_seen: int = 3,
                  n_ctx: int = 300, iters: int = 10) -> dict[str, str]:
    """Distributional clusters of the lower-cased words seen ≥ ``min_seen`` times.

    Each word is the vector of its counts of the ``n_ctx`` most frequent words (and of one
    "other" slot) as left and as right neighbour, square-rooted and scaled to unit length; for
    each k of ``ks``, spherical k-means (``iters`` rounds, the k most frequent words as initial
    centres, deterministic) assigns it a cluster. Returns lw → ``","``-joined cluster ids, one
    per k ({} when fewer than max(ks) words qualify)."""
    freq: dict[str, int] = {}
    for s in words:
        for w in s:
            lw = w.lower()
            freq[lw] = freq.get(lw, 0) + 1
    order = sorted(freq, key=lambda w: (-freq[w], w))
    vocab = [w for w in order if freq[w] >= min_seen]
    if not ks or len(vocab) < max(ks):
        return {}
    vi = {w: i for i, w in enumerate(vocab)}
    ci = {w: i for i, w in enumerate(order[:n_ctx])}
    m = np.zeros((len(vocab), 2 * n_ctx + 2), np.float32)
    for s in words:
        low = [w.lower() for w in s]
        for t, lw in enumerate(low):
            r = vi.get(lw)
            if r is None:
                continue
            left = ci.get(low[t - 1], n_ctx) if t else n_ctx
            right = ci.get(low[t + 1], n_ctx) if t + 1 < len(low) else n_ctx
            m[r, left] += 1
            m[r, n_ctx + 1 + right] += 1
    m = np.sqrt(m)
    m /= np.linalg.norm(m, axis=1, keepdims=True) + 1e-12
    out: list[list[str]] = [[] for _ in vocab]
    for k in ks:
        cen = m[:k].copy()
        for _ in range(iters):
            assign = np.argmax(m @ cen.T, axis=1)  # unit rows: nearest = largest dot product
            for j in range(k):
                sel = assign == j
                if sel.any():
                    c = m[sel].sum(axis=0)
                    cen[j] = c / (np.linalg.norm(c) + 1e-12)
        for i, a in enumerate(assign.tolist()):
            out[i].append(str(a))
    return {w: ",".join(c) for w, c in zip(vocab, out, strict=True)}


def _ner_window(tokens: list[list[str]], attrs, n_attr: int):
    """Per token, the ``_PER_NER`` window features of the ``ner`` template: cased neighbour
    words W[-1], W[1]; lower-cased w[-3], w[3]; lower(w_t)|a0_t (the word with its first
    attribute column). (The neighbours' clusters, tried too, lowered F1: 78.82 against 79.38.)"""
    for s, sent in enumerate(tokens):
        pad = [_BOS] * 3 + list(sent) + [_EOS] * 3
        for t in range(len(sent)):
            u = t + 3
            yield f"W[-1]={pad[u - 1]}"
            yield f"W[1]={pad[u + 1]}"
            yield f"w[-3]={pad[u - 3].lower()}"
            yield f"w[3]={pad[u + 3].lower()}"
            yield f"wa={sent[t].lower()}|{attrs[s][t][0] if n_attr else ''}"


def _doc_context(tokens: list[list[str]], window: int = DOC_WINDOW):
    """Per token, ``_PER_DOC`` features from the other occurrences of its (cased) word within
    ``window`` tokens either side in the text (sentences in the given order): context
    aggregation and capitalisation evidence in the style of Ratinov & Roth (2009). Only for
    capitalised words (the others get none):

        dc:low       the lower-cased word occurs nearby
        dc:mid       the word occurs capitalised nearby, not sentence-initially
        dc:after     a nearby occurrence follows a capitalised, non-initial word
        dc:before    a nearby occurrence precedes a capitalised word
        ca-1=, ca+1= the lower-cased neighbours of the DOC_NEAREST closest other occurrences
    """
    import bisect

    flat = [w for s in tokens for w in s]
    initial = np.zeros(len(flat) + 1, bool)
    pos = 0
    for s in tokens:
        initial[pos] = True
        pos += len(s)
    where: dict[str, list[int]] = {}
    for t, w in enumerate(flat):
        where.setdefault(w, []).append(t)
    n = len(flat)

    def cap(u: int) -> bool:
        return 0 <= u < n and flat[u][:1].isupper()

    for t, w in enumerate(flat):
        out = [_NONE] * _PER_DOC
        if w[:1].isupper():
            occ = where[w]
            lo, hi = bisect.bisect_left(occ, t - window), bisect.bisect_right(occ, t + window)
            others = [u for u in occ[lo:hi] if u != t]
            low = where.get(w.lower())
            if low is not None and w.lower() != w:
                k = bisect.bisect_left(low, t - window)
                if k < len(low) and low[k] <= t + window:
                    out[0] = "dc:low"
            if any(not initial[u] for u in others):
                out[1] = "dc:mid"
            if any(not initial[u] and cap(u - 1) and not initial[u - 1] for u in others):
                out[2] = "dc:after"
            if any(u + 1 < n and not initial[u + 1] and cap(u + 1) for u in others):
                out[3] = "dc:before"
            others.sort(key=lambda u: (abs(u - t), u))
            for j, u in enumerate(others[:DOC_NEAREST]):
                out[4 + 2 * j] = "ca-1=" + ("<s>" if initial[u] else flat[u - 1].lower())
                nxt = u + 1
                out[5 + 2 * j] = "ca+1=" + ("</s>" if nxt >= n or initial[nxt]
                                            else flat[nxt].lower())
        yield from out


def _store_map(d: dict[str, str]) -> np.ndarray:
    """A str → str map as one UTF-8 uint8 array of ``key\tvalue`` lines."""
    blob = "\n".join(f"{k}\t{v}" for k, v in sorted(d.items()))
    return np.frombuffer(blob.encode("utf-8"), np.uint8).copy()


def _load_map(a: np.ndarray | None) -> dict[str, str]:
    blob = np.asarray(a if a is not None else np.zeros(0, np.uint8), np.uint8).tobytes()
    rows = [r.split("\t") for r in blob.decode("utf-8").split("\n")] if blob else []
    if any(len(r) != 2 for r in rows):
        raise ValueError("malformed word clusters")
    return dict(rows)


def split_attributes(tokens: list[list]) -> tuple[list[list[str]], list[list[tuple]] | None, int]:
    """(words, attributes, n_attr) of sentences whose tokens are words or tuples
    ``(word, attr_0, …)``; every token must carry the same number of attributes."""
    first = next((t for s in tokens for t in s), "")
    if isinstance(first, str):
        for s in tokens:
            if not set(map(type, s)) <= {str}:
                for t in s:
                    if not isinstance(t, str):
                        raise ValueError(f"mixed tokens: {t!r} after plain words")
        return tokens, None, 0
    n_attr = len(first) - 1
    words: list[list[str]] = []
    attrs: list[list[tuple]] = []
    for s in tokens:
        ws = []
        at = []
        for t in s:
            if isinstance(t, str) or len(t) != n_attr + 1:
                raise ValueError(f"token {t!r}: expected a tuple (word, {n_attr} attributes)")
            ws.append(t[0])
            at.append(tuple(t[1:]))
        words.append(ws)
        attrs.append(at)
    return words, attrs, n_attr






def _ctx_name(o: int, lw: str) -> str:
    return f"w{o:+d}={lw}"


@nb.njit(cache=True, nogil=True)
def _assemble(sent_ptr, tok_type, type_ptr, type_ids, ctx, bos, eos, tok_ids):
    """Per token: own-word ids ∪ neighbours' context ids (−1 = unknown, dropped), sorted unique.

    ctx[type, j] is the id of feature ``w{o_j}=lower(type)`` with o = (−2, −1, +1, +2);
    bos[j] / eos[j] are the ids used when the neighbour lies before / after the sentence.
    """
    n_sent = sent_ptr.shape[0] - 1
    feat_ptr, feat_idx = feature_rows(tok_type, type_ptr, 4 + tok_ids.shape[1])
    pos = 0
    for s in range(n_sent):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            start = pos
            pos = add_word_ids(feat_idx, pos, t, a, b, tok_type, type_ptr, type_ids, ctx, bos, eos)
            pos = add_ids(feat_idx, pos, tok_ids[t])
            pos = sort_unique(feat_idx, start, pos)
            feat_ptr[t + 1] = pos
    return feat_ptr, feat_idx[:pos].copy()


def _sent_ptr(tokens: list[list]) -> np.ndarray:
    """Sentence s holds tokens sent_ptr[s]:sent_ptr[s+1]."""
    sent_ptr = np.zeros(len(tokens) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, tokens), np.int64, count=len(tokens)), out=sent_ptr[1:])
    return sent_ptr


def _types(tokens: list[list[str]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(sent_ptr, type id per token, type strings) for a list of sentences."""
    sent_ptr = _sent_ptr(tokens)
    vocab: dict[str, int] = {}
    setdefault = vocab.setdefault
    tok_type = np.fromiter(
        (setdefault(w, len(vocab)) for s in tokens for w in s), np.int64, count=int(sent_ptr[-1])
    )
    return sent_ptr, tok_type, list(vocab)


def space_size(hashing: int, features: list[str] | None, what: str) -> int:
    """The number of ids of a feature space: ``hashing`` when features are hashed, else the
    length of the fitted dictionary ``features`` (``what`` names the space in the error raised
    before fit)."""
    if hashing:
        return hashing
    if features is None:
        raise RuntimeError(f"{what} is not fitted")
    return len(features)


class SequenceFeaturizer:
    """Maps sentences (lists of word strings) to :class:`EncodedSequences`.

    ``min_count``: a feature gets an id when it fires on at least that many training tokens.
    ``hashing > 0``: no dictionary; id = crc32(feature) mod ``hashing`` and F = ``hashing``.
    ``template``: ``base``, or ``ner`` (+ clusters and the :func:`_ner_window` features).
    ``log``: progress lines for the steps that take a second or more (clustering, building
    the dictionary, encoding; :func:`~demidcd.primitives.monitor.timed_step`).
    """

    def __init__(self, min_count: int = DEFAULT_MIN_COUNT, hashing: int = 0,
                 template: str = "base", log: Callable[[str], None] | None = None):
        if template not in TEMPLATES:
            raise ValueError(f"unknown feature template {template!r}")
        if int(min_count) < 1:
            raise ValueError("min_count must be >= 1")
        if int(hashing) < 0 or int(hashing) >= 2**31:
            raise ValueError("hashing must be in [0, 2**31)")
        self.min_count = int(min_count)
        self.hashing = int(hashing)
        self._packed: tuple[np.ndarray, int] | None = None  # a loaded dictionary, not split yet
        self.features = None  # id -> string (dictionary mode, after fit)
        self.n_attributes: int | None = None  # attribute columns per token (set by fit)
        self.template = template
        self.clusters: dict[str, str] = {}  # "ner": word_clusters of the training words
        self.doc_window = DOC_WINDOW if template == "ner" else 0  # _doc_context (0: none)
        self.log = log

    # -- the dictionary: a list and a dict of strings, made from the packed strings on first use
    @property
    def features(self) -> list[str] | None:
        """The feature strings by id (dictionary mode, after fit; None when hashing)."""
        if self._packed is not None:
            self._unpack()
        return self.__dict__["_features"]

    @features.setter
    def features(self, value: list[str] | None) -> None:
        self._packed = None
        self.__dict__["_features"] = value
        self.__dict__["_index_map"] = None

    @property
    def _index(self) -> dict[str, int] | None:
        """Feature string → id (the dictionary of :attr:`features`)."""
        if self._packed is not None:
            self._unpack()
        return self.__dict__["_index_map"]

    @_index.setter
    def _index(self, value: dict[str, int] | None) -> None:
        self.__dict__["_index_map"] = value

    def _unpack(self) -> None:
        """Split the packed dictionary (:meth:`from_state`) into :attr:`features` and its
        index. A model is loaded, or a prepared fit adopted (``SequenceTagger.fit_prepared``),
        without them: until something encodes with the dictionary its strings stay one
        array, not hundreds of thousands of Python objects in the processes that train."""
        raw, n = self._packed
        feats = raw.tobytes().decode("utf-8").split("\n") if n else []
        if len(feats) != n:
            raise ValueError(f"expected {n} feature strings, found {len(feats)}")
        index = dict(zip(feats, range(n), strict=True))
        if len(index) != n:
            raise ValueError("duplicate feature strings")
        self._packed = None
        self.__dict__["_features"], self.__dict__["_index_map"] = feats, index

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_type_tables", None)  # caches, rebuilt on first use
        state.pop("_blob", None)
        state.pop("_part", None)  # (a set-up in parts' ids of its tokens, process-local)
        return state

    def _word_features(self, word: str) -> list[str]:
        feats = word_features(word)
        c = self.clusters.get(word.lower()) if self.clusters else None
        if c is not None:
            feats.extend(f"k{j}={x}" for j, x in enumerate(c.split(",")))
        return feats

    # -- ids -------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        """F, the number of observation features (ids are 0..F-1)."""
        if self._packed is not None:
            return self._packed[1]
        return space_size(self.hashing, self.features, "SequenceFeaturizer")

    @property
    def fitted(self) -> bool:
        return bool(self.hashing) or self._packed is not None or self.features is not None

    def _id_fn(self, index: dict[str, int] | None):
        if self.hashing:
            mod = self.hashing
            crc = zlib.crc32
            return lambda f: crc(f.encode("utf-8")) % mod
        get = index.get
        return lambda f: get(f, -1)

    def _encode(self, tokens: list[list], index: dict[str, int] | None) -> EncodedSequences:
        tokens, attrs, n_attr = split_attributes(tokens)
        if self.n_attributes is not None and n_attr != self.n_attributes:
            raise ValueError(f"tokens carry {n_attr} attribute columns, the model was fitted "
                             f"with {self.n_attributes}")
        if index is not None and index is self._index and self.template == "base":
            return self._encode_types(tokens, attrs, n_attr)
        sent_ptr, tok_type, types = _types(tokens)
        fid = self._id_fn(index)
        n_types = len(types)
        type_ptr = np.zeros(n_types + 1, np.int64)
        ids: list[int] = []
        ctx = np.empty((n_types, 4), np.int32)
        lower_cache: dict[str, tuple[int, int, int, int]] = {}
        for k, word in enumerate(types):
            ids.extend(fid(f) for f in self._word_features(word))
            type_ptr[k + 1] = len(ids)
            lw = word.lower()
            c = lower_cache.get(lw)
            if c is None:
                c = tuple(fid(_ctx_name(o, lw)) for o in _OFFSETS)
                lower_cache[lw] = c
            ctx[k] = c
        type_ids = np.array(ids, np.int32) if ids else np.zeros(0, np.int32)
        bos = np.array([fid(_ctx_name(o, _BOS)) for o in _OFFSETS], np.int32)
        eos = np.array([fid(_ctx_name(o, _EOS)) for o in _OFFSETS], np.int32)
        tok_ids = np.array([fid(f) for f in _bigrams(tokens, attrs, n_attr)],
                           np.int32).reshape(-1, 2 + _PER_ATTR * n_attr)
        if self.template == "ner":
            ner = np.array([fid(f) for f in _ner_window(tokens, attrs, n_attr)],
                           np.int32).reshape(-1, _PER_NER)
            parts = [tok_ids, ner]
            if self.doc_window:
                parts.append(np.array([-1 if f == _NONE else fid(f)
                                       for f in _doc_context(tokens, self.doc_window)],
                                      np.int32).reshape(-1, _PER_DOC))
            tok_ids = np.ascontiguousarray(np.hstack(parts))
        feat_ptr, feat_idx = _assemble(sent_ptr, tok_type, type_ptr, type_ids, ctx, bos, eos,
                                       tok_ids)
        return EncodedSequences(sent_ptr, feat_ptr, feat_idx)

    def type_tables(self, n_attr: int):
        """The :class:`~demidcd.tasks.chain.type_tables.TypeTables` of the fitted dictionary for
        tokens with ``n_attr`` attribute columns (built on first use, kept across calls);
        None when the features are hashed or of the ``ner`` template (no tables for them)."""
        if self.hashing or self.template != "base" or self._index is None:
            return None
        from .type_tables import TypeTables

        t = self.__dict__.get("_type_tables")
        if t is None or t.n_attr != n_attr or t.index is not self._index:
            t = TypeTables(self._index, self._word_features, n_attr,
                           self.__dict__.get("_blob"))
            self._type_tables = t
        return t

    def _encode_types(self, tokens: list[list[str]], attrs, n_attr: int,
                      tables=None) -> EncodedSequences:
        """:meth:`_encode` with the dictionary, from tables kept per word type (the same
        ids: :mod:`~demidcd.tasks.chain.type_tables`; ``tables``: others than the
        dictionary's)."""
        tables = self.type_tables(n_attr) if tables is None else tables
        flat = list(itertools.chain.from_iterable(tokens))
        values = None
        if n_attr:
            rows = list(itertools.chain.from_iterable(attrs))
            values = [[a[j] for a in rows] for j in range(n_attr)]
        sent_ptr = _sent_ptr(tokens)
        feat_ptr, feat_idx = tables.encode(sent_ptr, flat, values=values)
        return EncodedSequences(sent_ptr, feat_ptr, feat_idx)

    # -- public ------------------------------------------------------------------------------
    def fit(self, tokens: list[list]) -> SequenceFeaturizer:
        """Build the dictionary: features firing on ≥ min_count tokens, ids by decreasing count.

        Tokens are words, or tuples ``(word, attr_0, …)`` with extra input columns."""
        words, attrs, n_attr = split_attributes(tokens)
        self.n_attributes = None
        self.clusters = {}
        if self.template == "ner":
            with timed_step(self.log, f"word clusters of {len(words):,} sentences (k-means)"):
                self.clusters = word_clusters(words)
        if self.hashing:
            self.n_attributes = n_attr
            return self
        with timed_step(self.log, f"building features of {len(words):,} sentences",
                        every=PROGRESS_EVERY):
            self._fit_dictionary(tokens, words, attrs, n_attr)
        return self

    def _fit_dictionary(self, tokens: list[list], words: list[list[str]], attrs,
                        n_attr: int) -> None:
        """The dictionary of :meth:`fit` (features firing on ≥ min_count tokens)."""
        if self.template == "base":  # counted per type and n-gram (no string per token)
            _, _, types = typed = _types(words)
            features, (own, own_ids, lens) = count_base_features(
                *typed, attrs, n_attr, self._word_features, self.min_count)
            self.n_attributes = n_attr
            self._adopt(features)
            self._seed_tables(types, own, own_ids, lens, n_attr)
            return
        # Every feature that fires on the training data, with a provisional id.
        _, _, types = _types(words)
        seen: dict[str, int] = {}
        for word in types:
            if "\n" in word:
                raise ValueError(f"invalid token {word!r}: tokens must not contain newlines")
            for f in self._word_features(word):
                seen.setdefault(f, len(seen))
            for o in _OFFSETS:
                seen.setdefault(_ctx_name(o, word.lower()), len(seen))
        for f in _bigrams(words, attrs, n_attr):
            seen.setdefault(f, len(seen))
        if self.template == "ner":
            for f in _ner_window(words, attrs, n_attr):
                seen.setdefault(f, len(seen))
            for f in _doc_context(words, self.doc_window) if self.doc_window else ():
                if f != _NONE:
                    seen.setdefault(f, len(seen))
        for o in _OFFSETS:
            seen.setdefault(_ctx_name(o, _BOS), len(seen))
            seen.setdefault(_ctx_name(o, _EOS), len(seen))
        enc = self._encode(tokens, seen)
        self.n_attributes = n_attr
        counts = np.bincount(enc.feat_idx, minlength=len(seen))
        names = list(seen)
        keep = np.flatnonzero(counts >= self.min_count)
        self._adopt(frequency_order([names[j] for j in keep.tolist()], counts[keep]))

    def _seed_tables(self, types: list[str], own: list[str], own_ids: np.ndarray,
                     lens: np.ndarray, n_attr: int) -> None:
        """Start the type tables with the training words ``types``, from their own features
        (``own``, ``own_ids``, ``lens``: :func:`count_base_features`'s ``own``)."""
        from .type_tables import MAX_TYPES

        tables = self.type_tables(n_attr)
        if len(types) <= MAX_TYPES:
            ids = np.fromiter(map(self._index.get, own, itertools.repeat(-1)), np.int32,
                              count=len(own))
            with tables.lock:
                tables.add_types(types, ids[own_ids], lens)

    # -- set-up in parts (demidcd.estimators.parts): count, merge, encode ----------------------
    @property
    def supports_parts(self) -> bool:
        """Whether :meth:`count_part` applies: the ``base`` template (the ``ner`` template's
        clusters and document context look at the whole corpus)."""
        return self.template == "base"

    def count_part(self, tokens: list[list]) -> dict:
        """Stage 1 of a set-up in parts: this part's :class:`~.feature_counts.BaseCounts` (its
        distinct words, own-feature strings, lower-cased words and attribute values, and
        n-grams of their ids, counted; no other feature string is made before the merge); its
        ids kept for :meth:`encode_part` (the tokens themselves only when hashing)."""
        words, attrs, n_attr = split_attributes(tokens)
        if self.hashing:
            self._part = tokens
            return {"n_attr": n_attr, "counts": None}
        sent_ptr, tok_type, types = typed = _types(words)
        counts, ids = base_counts(*typed, attrs, n_attr, self._word_features)
        self._part = (sent_ptr, tok_type, ids)
        return {"n_attr": n_attr, "counts": counts}

    def merge_parts(self, parts: list[dict]) -> list[object]:
        """The merge: this featurizer (part 0's) takes the dictionary of the summed counts
        (≥ ``min_count``, by decreasing count then string, as :meth:`fit` builds it); returns
        what each part's :meth:`encode_part` needs: the final ids of its items
        (:func:`~.part_tables.part_tables`)."""
        n_attr = {p["n_attr"] for p in parts}
        if len(n_attr) != 1:
            raise ValueError(f"tokens carry different numbers of attribute columns: {n_attr}")
        self.n_attributes = n_attr = n_attr.pop()
        self.clusters = {}
        if self.hashing:
            return [(None, n_attr)] * len(parts)
        merged, maps = merge_base_counts([p["counts"] for p in parts])
        names, counts, kept = kept_features(merged, self.min_count)
        order = names.permutation(counts)
        final = np.empty(order.shape[0], np.int64)
        final[order] = np.arange(order.shape[0])
        # the dictionary packed, as a loaded model holds it (split into a list and an index
        # only where something encodes with strings: a dev set)
        self._take_packed(names.joined(order), int(order.shape[0]))
        return [(t, n_attr) for t in part_tables(merged, kept, final, maps)]

    def _take_packed(self, blob: np.ndarray, n: int) -> None:
        """Take the dictionary of ``n`` strings packed in ``blob`` (:meth:`state`'s: in id
        order, newline-joined, for the type tables); read-only as the input blocks are, so
        that the kernels reading both are compiled (and loaded) once."""
        self.features = None
        self._type_tables = None
        self._blob = blob.view()
        self._blob.flags.writeable = False
        self._packed = (self._blob, n)

    def encode_part(self, payload: tuple) -> EncodedSequences:
        """Stage 2: this part's tokens encoded with the merged dictionary (``payload``:
        :meth:`merge_parts`'s for this part), the ids :meth:`transform` gives, from numbers
        alone (:func:`~.part_tables.encode_part_tokens`)."""
        part, self._part = self._part, None
        tables, self.n_attributes = payload
        if tables is None:  # hashing
            return self._encode(part, None)
        sent_ptr, tok_type, ids = part
        return EncodedSequences(sent_ptr, *encode_part_tokens(sent_ptr, tok_type, ids, tables))

    def _adopt(self, features: list[str]) -> None:
        """Take ``features`` (in id order) as the dictionary."""
        self.features = features
        self._index = {f: j for j, f in enumerate(features)}
        self._type_tables = self._blob = None

    def transform(self, tokens: list[list[str]]) -> EncodedSequences:
        """Encode sentences; features unknown to the dictionary are dropped."""
        if not self.fitted:
            raise RuntimeError("SequenceFeaturizer is not fitted")
        with timed_step(self.log, f"encoding {len(tokens):,} sentences", every=PROGRESS_EVERY):
            return self._encode(tokens, self._index)

    def fit_transform(self, tokens: list[list[str]]) -> EncodedSequences:
        return self.fit(tokens).transform(tokens)

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """(arrays, JSON-able metadata); the dictionary is one '\\n'-joined UTF-8 uint8 array."""
        meta = {
            "kind": "SequenceFeaturizer",
            "template_version": TEMPLATE_VERSION,
            "min_count": self.min_count,
            "hashing": self.hashing,
            "n_features": self.n_features,
            "n_attributes": self.n_attributes or 0,
            "template": self.template,
            "doc_window": self.doc_window,
        }
        arrays: dict[str, np.ndarray] = {}
        if self.template == "ner":
            arrays["clusters"] = _store_map(self.clusters)
        if not self.hashing:
            if self._packed is not None:  # as loaded
                arrays["feature_strings"] = self._packed[0].copy()
            else:
                blob = "\n".join(self.features).encode("utf-8")
                arrays["feature_strings"] = np.frombuffer(blob, np.uint8).copy()
        return arrays, meta

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], meta: dict,
                   packed: bool = False) -> SequenceFeaturizer:
        """Inverse of :meth:`state`; raises ValueError on inconsistent input. ``packed``: keep
        the dictionary as its one array of strings until first use (:meth:`_unpack`; its
        strings are then not checked for duplicates before)."""
        if meta.get("kind") != "SequenceFeaturizer":
            raise ValueError("not a SequenceFeaturizer state")
        if meta.get("template_version") != TEMPLATE_VERSION:
            raise ValueError(f"unsupported feature template version {meta.get('template_version')}")
        obj = cls(min_count=int(meta["min_count"]), hashing=int(meta["hashing"]),
                  template=str(meta.get("template", "base")))
        obj.doc_window = int(meta.get("doc_window", 0))  # models saved before it: none
        if obj.template == "ner":
            obj.clusters = _load_map(arrays.get("clusters"))
        obj.n_attributes = int(meta.get("n_attributes", 0))
        if obj.n_attributes < 0:
            raise ValueError("negative n_attributes")
        n = int(meta["n_features"])
        if obj.hashing:
            if n != obj.hashing:
                raise ValueError("n_features does not match hashing")
            return obj
        raw = np.asarray(arrays["feature_strings"])
        if raw.dtype != np.uint8:
            raise ValueError(f"feature_strings are {raw.dtype}, not uint8 bytes")
        raw = np.ascontiguousarray(raw).reshape(-1)
        found = int(np.count_nonzero(raw == 10)) + 1 if n else 0
        if found != n:
            raise ValueError(f"expected {n} feature strings, found {found}")
        raw.tobytes().decode("utf-8")  # (bad bytes fail here, not at first use)
        obj._take_packed(raw, n)
        if not packed:
            obj._unpack()
        return obj

