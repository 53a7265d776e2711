"""First-order arc-factored labelled dependency parsing as a :class:`Task`.

A sentence of n words is x = (x_0 = ROOT, x_1 … x_n); a structure is a head vector y with
y_d ∈ {0..n} \\ {d} for d = 1..n forming a tree rooted at 0 in which exactly one word has
head 0 (UD's rule: the CoNLL 2018 evaluator rejects a sentence with several), and a label
vector l with l_d ∈ {0..L−1} (DEPRELs; L = 0 for an unlabelled parser). The score factors
over labelled arcs (McDonald, Crammer & Pereira 2005; McDonald, Lerman & Pereira 2006):

    w·Φ(x, y, l) = Σ_{d=1..n} s(y_d, d, l_d),
    s(h, d, l) = Σ_{f ∈ F(x, h, d)} w[f] + Σ_{k ∈ G(x, h, d)} w[base(k) + l],

F the unlabelled arc features below and G a smaller set of templates conjoined with the label:
the weights of (k, l) for l = 0..L−1 sit at L consecutive slots base(k) + l of the same hashed
w (base a multiple of 8 in [0, D − L]), so one template costs L/8 cache lines per arc. A label
may sit on root arcs (h = 0), on the others, or both, as seen in training (UD: ``root`` only
on the root arc and only there). Since labels do not interact across arcs,

    max_{y, l} w·Φ = max_y Σ_d s(y_d, d),   s(h, d) = max_{l allowed on h → d} s(h, d, l),

so the tree is decoded over s(h, d) and each arc keeps its argmax label.

G: dependent side dw, dp, dw·dp, dp−1·dp, dp·dp+1 (+ dc, dw·dc with a second POS column),
cached per word; head side hw·dir, hp·dir (+ hc·dir), cached per word and direction; pair
dd, hp·dp·dd, hw·dp·dir, hp·dw·dir, hw·dw (+ hc·dc·dd), per arc (dir = h < d, dd = direction
and distance bucket). Measured on EWT (see
:class:`~demidcd.estimators.dependency.DependencyParser`).

Arc features F(x, h, d) (McDonald et al. 2005, Table 1), with hw/dw the lower-cased head /
dependent word, hp/dp their POS, hw5/dw5 5-character prefixes, hp±1 / dp±1 the POS left and
right of head / dependent (``<s>``/``</s>`` outside the sentence), bp the POS of a word between:

    unigram   hw·hp, hw, hp, dw·dp, dw, dp
    bigram    hw·hp·dw·dp, hp·dw·dp, hw·dw·dp, hw·hp·dp, hw·hp·dw, hw·dw, hp·dp
    prefix    the unigram and bigram templates with hw5/dw5 for hw/dw (only when the head or
              the dependent word is longer than 5 characters)
    surround  hp·hp+1·dp-1·dp, hp-1·hp·dp-1·dp, hp·hp+1·dp·dp+1, hp-1·hp·dp·dp+1, and the
              eight three-POS back-offs dropping hp-1, hp+1, dp-1 or dp+1 (MSTParser's)
    between   hp·bp·dp for every distinct bp strictly between h and d
    second    with a second POS column c (UPOS next to XPOS): hc, dc, hc·dc, hc·dw·dc,
    POS       hw·hc·dc, hw·hc·dw·dc, the four surrounding four-grams and the between-POS
              template over c
    bias      (empty)

each emitted twice, alone and conjoined with the direction (h < d or h > d) and the distance
bucket of |h − d| (1, 2, 3, 4, 5, 6–10, > 10). Measured on EWT dev (DEMI-DCD, p = 2, 60 s,
XPOS): the back-offs took UAS from 85.0 to 85.75, and UPOS as second POS from 85.3 to 87.0.

A feature is a 64-bit hash of its template id and attribute hashes (``zlib.crc32`` of the
strings, so stable across processes and model files) mapped into 0..D−1 (D = ``hashing``, the
length of w, a multiple of 16): no dictionary. A template's plain and direction/distance
versions share a 16-weight block (see :func:`_emit`). Features are computed on the fly in numba for
each candidate arc: pre-computing them for the n² arcs of every sentence would take about
80 ids × 5.3 M arcs × 4 bytes ≈ 1.7 GB on EWT train, against O(1) extra memory here; arc
scoring is then ~90% of inference time and Eisner ~8% (EWT train, 3,000 sentences).

Loss: Δ(y_i, y) = Σ_d [y_d ≠ y_{i,d}] + 0.5·[y_d = y_{i,d}, l_d ≠ l_{i,d}]: 1 per wrong head,
0.5 per right head with a wrong label (a word costs at most 1, as in the unlabelled parser,
so C keeps its scale; a head error costs twice a label error). It factors over labelled arcs, so
loss-augmented inference (DEMI-DCD Eq. 5) adds Δ(h, d, l) to s(h, d, l) before the max over
labels and decodes the same way, with Eisner's algorithm (projective trees, O(n³)) or
Chu-Liu-Edmonds (all trees, O(n³) here), both restricted to one root child (see
:func:`eisner_ws`, :func:`cle_ws`). A record holds φ = Φ(x, y_i, l_i) − Φ(x, y, l) (only the
words with a wrong head or label contribute: +F(y_{i,d}, d) − F(y_d, d) for a wrong head,
+G(y_{i,d}, d)⊗l_{i,d} − G(y_d, d)⊗l_d) with sorted unique indices, Δ, w·φ and an FNV-1a
hash of (y, l).

Given heads (``predict --force``, ``DependencyParser.predict(X, fixed=...)``): a word d with
a given head g keeps it by masking, s(h, d) = −1e300 for every h ≠ g (the masked arcs' features
are not computed), and a given label l replaces the max over labels, s(h, d) = s(h, d, l); the
decoders are unchanged and return the best tree of unmasked arcs whenever one exists. Such a
tree exists iff at most one word is given head 0 and the given heads have no cycle
(:func:`fixed_heads_check`); a *projective* one may not (given arcs that cross), and then the
Eisner optimum uses a masked arc, which :func:`parse_kernel` detects to decode that sentence
with Chu-Liu-Edmonds instead.

Metric: unlabelled attachment score UAS = #{d : y_d = y_{i,d}} / #words and labelled LAS =
#{d : y_d = y_{i,d}, u(l_d) = u(l_{i,d})} / #words, where u(l) is the universal part of the
DEPREL (before the first ':', so ``nmod:poss`` counts as ``nmod``): the LAS of the CoNLL 2018
shared task's evaluator ``conll18_ud_eval.py``; LAS with subtypes compares the full DEPREL.
Each with and without punctuation. A word is
punctuation when every character of its form is Unicode punctuation (general category P*): the
convention of the CoNLL-X shared-task scorer ``eval.pl``; it needs no POS tag set, so it is the
same for UPOS, XPOS and CoNLL-X columns.
"""

from __future__ import annotations

import unicodedata
import warnings
import zlib
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numba as nb
import numpy as np

from ..errors import InputError, InputWarning, OptionError
from ..io.dependency import (
    DEP_FORMATS,
    DepCorpus,
    read_dependency,
    write_dependency,
)
from ..options import DataOptions, OutputOptions
from . import TaskSpec
from .base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from .phi import merge, sort_keys

TEMPLATE_VERSION = 1  # unlabelled models (F only)
LABELLED_TEMPLATE_VERSION = 2  # F and the label templates G
LABEL_LOSS = 0.5  # Δ of a word with the right head and a wrong label
DEFAULT_HASHING = 1 << 23
DECODERS = ("eisner", "cle")
_EISNER, _CLE = 0, 1

_U = np.uint64
_FNV_OFFSET = _U(14695981039346656037)
_FNV_PRIME = _U(1099511628211)
_M1 = _U(0x9E3779B97F4A7C15)
_M2 = _U(0xFF51AFD7ED558CCD)
_M3 = _U(0xC4CEB9FE1A85EC53)
_S29 = _U(29)
_S33 = _U(33)
_S32 = _U(32)
_NEG = -1e300  # score of an impossible arc
_NONE = np.zeros(0, np.int32)  # no given heads / labels (parse_kernel)


class ProjectiveFallback(InputWarning):
    """Eisner could keep the given heads of these ``sentences`` (indices) in no projective
    tree: they were decoded with Chu-Liu-Edmonds (non-projective) instead."""

    def __init__(self, sentences: list[int], message: str):
        self.sentences = list(sentences)
        super().__init__(message)


class FixedHeadsError(OptionError):
    """Given heads (``predict(fixed=...)``, ``predict --force``) that no single-root tree
    keeps: ``sentence`` (its index) and ``reason``."""

    def __init__(self, sentence: int, reason: str):
        self.sentence, self.reason = int(sentence), reason
        super().__init__(f"fixed[{sentence}]: {reason}")


# ---------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------
@dataclass
class EncodedTrees:
    """Sentences as flat per-position arrays; sentence s owns positions tok_ptr[s]:tok_ptr[s+1],
    the first one being ROOT (so n_s + 1 positions).

    word/pre/pos: uint64 attribute hashes (lower-cased form, its 5-prefix, POS; pre = word when
    the form has ≤ 5 characters); posk: int32 small POS ids (0..n_pos−1, per corpus, for the
    "distinct between-POS" test only); heads: int32 gold head per position (−1 at ROOT; None
    without gold trees); labels: int32 gold label id per position (−1 at ROOT and for labels
    the parser does not know; None without gold labels); punct: bool per position
    (True = punctuation, ROOT False); groups: int32 gold universal-DEPREL group per position
    (see :func:`label_groups`; −1 at ROOT and where the parser knows no label of the group;
    None: the group of the gold label id).
    """

    tok_ptr: np.ndarray
    word: np.ndarray
    pre: np.ndarray
    pos: np.ndarray
    posk: np.ndarray
    n_pos: int
    cpos: np.ndarray
    cposk: np.ndarray
    n_cpos: int
    heads: np.ndarray | None
    punct: np.ndarray
    labels: np.ndarray | None = None
    groups: np.ndarray | None = None

    @property
    def n_sentences(self) -> int:
        return int(self.tok_ptr.shape[0] - 1)


def _h(kind: str, s: str) -> int:
    return zlib.crc32(f"{kind}\x1f{s}".encode())


def is_punct(word: str) -> bool:
    """True when every character of ``word`` is Unicode punctuation (category P*)."""
    return bool(word) and all(unicodedata.category(c).startswith("P") for c in word)


_ROOT = "<root>"


def encode_trees(words: list[list[str]], pos: list[list[str]],
                 heads: list[list[int]] | None = None,
                 cpos: list[list[str]] | None = None,
                 labels: list[list[int]] | None = None,
                 groups: list[list[int]] | None = None) -> EncodedTrees:
    """Encode sentences: word and POS lists, heads of words 1..n (0 = root) or None,
    optionally a second, coarse POS per word (CoNLL-U UPOS next to XPOS) for extra features,
    optionally gold label ids of words 1..n (−1: unknown label; needs heads) and their
    universal-DEPREL groups (−1: a group the parser does not know; needs labels)."""
    n_sent = len(words)
    lens = np.fromiter((len(s) + 1 for s in words), np.int64, count=n_sent)
    tok_ptr = np.zeros(n_sent + 1, np.int64)
    np.cumsum(lens, out=tok_ptr[1:])
    total = int(tok_ptr[-1])
    wcache: dict[str, tuple[int, int, bool]] = {}
    pcache: dict[str, tuple[int, int]] = {}
    ccache: dict[str, tuple[int, int]] = {}

    def wattr(w: str) -> tuple[int, int, bool]:
        r = wcache.get(w)
        if r is None:
            lw = w.lower()
            hw = _h("w", lw)
            r = (hw, _h("p5", lw[:5]) if len(lw) > 5 else hw, is_punct(w) and w != _ROOT)
            wcache[w] = r
        return r

    def tattr(cache: dict[str, tuple[int, int]], kind: str, p: str) -> tuple[int, int]:
        r = cache.get(p)
        if r is None:
            r = (_h(kind, p), len(cache))
            cache[p] = r
        return r

    W = np.empty(total, np.uint64)
    P5 = np.empty(total, np.uint64)
    PT = np.empty(total, np.uint64)
    PK = np.empty(total, np.int32)
    PU = np.zeros(total, np.bool_)
    has_c = cpos is not None
    CT = np.empty(total if has_c else 0, np.uint64)
    CK = np.empty(total if has_c else 0, np.int32)
    if has_c and len(cpos) != n_sent:
        raise ValueError("cpos must have one entry per sentence")
    k = 0
    for s, (ws, ps) in enumerate(zip(words, pos, strict=True)):
        if len(ps) != len(ws) or (has_c and len(cpos[s]) != len(ws)):
            raise ValueError(f"sentence {s}: {len(ws)} words but {len(ps)} POS tags")
        cs = cpos[s] if has_c else ps
        for j, (w, p, q) in enumerate(zip([_ROOT, *ws], [_ROOT, *ps], [_ROOT, *cs],
                                          strict=True)):
            if j and w == _ROOT:
                w = _ROOT + " "  # a word spelt like the root symbol is not the root
            a = wattr(w)
            b = tattr(pcache, "t", p)
            W[k], P5[k], PT[k], PK[k], PU[k] = a[0], a[1], b[0], b[1], a[2]
            if has_c:
                b = tattr(ccache, "c", q)
                CT[k], CK[k] = b[0], b[1]
            k += 1
    n_pos = len(pcache)
    if has_c:
        CK += n_pos  # coarse ids follow the fine ones in the between-POS stamp array
    H = None
    if heads is not None:
        if len(heads) != n_sent:
            raise ValueError("heads must have one entry per sentence")
        H = np.full(total, -1, np.int32)
        for s, hs in enumerate(heads):
            n = len(words[s])
            hs = np.asarray(hs, np.int64)
            if hs.shape != (n,):
                raise ValueError(f"sentence {s}: {n} words but {hs.shape[0]} heads")
            if n and (hs.min() < 0 or hs.max() > n or np.any(hs == np.arange(1, n + 1))):
                raise ValueError(f"sentence {s}: heads must lie in 0..{n}, none its own")
            H[tok_ptr[s] + 1:tok_ptr[s + 1]] = hs
    def per_word_ids(ids: list, what: str, needs: str) -> np.ndarray:
        """One id ≥ −1 per word of every sentence, in the token layout (ROOT slots −1)."""
        if len(ids) != n_sent:
            raise ValueError(f"{what}s need {needs} and one entry per sentence")
        out = np.full(total, -1, np.int32)
        for s, xs in enumerate(ids):
            xs = np.asarray(xs, np.int64)
            if xs.shape != (len(words[s]),) or (xs.size and xs.min() < -1):
                raise ValueError(f"sentence {s}: {len(words[s])} words but {xs.shape[0]} "
                                 f"{what}s, or a {what.split()[-1]} id below −1")
            out[tok_ptr[s] + 1:tok_ptr[s + 1]] = xs
        return out

    if labels is not None and H is None:
        raise ValueError("labels need heads and one entry per sentence")
    LB = None if labels is None else per_word_ids(labels, "label", "heads")
    if groups is not None and LB is None:
        raise ValueError("label groups need labels and one entry per sentence")
    GR = None if groups is None else per_word_ids(groups, "label group", "labels")
    return EncodedTrees(tok_ptr, W, P5, PT, PK, n_pos, CT, CK, len(ccache), H, PU, LB, GR)


# ---------------------------------------------------------------------------------------------
# features (numba)
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True, inline="always")
def _comb(h, v):
    h = (h ^ v) * _M2
    return h ^ (h >> _S29)


@nb.njit(cache=True, nogil=True, inline="always")
def _emit(key, dd, D, out, c):
    """The feature ``key`` alone and conjoined with direction/distance ``dd`` (1..14), both in
    the 16-weight block the key hashes to, at slots o and (o + dd) mod 16 for a hashed offset o:
    one or two cache lines per template instead of two random ones (arc scoring 2x faster on
    EWT at D = 2**23), and slots still uniformly loaded."""
    h = key ^ (key >> _S33)
    h *= _M3
    h ^= h >> _S29
    base = np.int64(((h >> _S32) * _U(D >> 4)) >> _S32) << 4
    o = np.int64(h & _U(15))
    out[c] = base + o
    out[c + 1] = base + ((o + dd) & 15)
    return c + 2


@nb.njit(cache=True, nogil=True, inline="always")
def _t(k):
    return _U(k) * _M1


@nb.njit(cache=True, nogil=True, inline="always")
def _dir_dist(h, d):
    """Direction and distance bucket of arc h → d: 1..7 (|h − d| = 1, 2, 3, 4, 5, 6–10, > 10),
    plus 7 when h < d."""
    dist = h - d if h > d else d - h
    b = dist if dist <= 5 else (6 if dist <= 10 else 7)
    return b + (7 if h < d else 0)


@nb.njit(cache=True, nogil=True)
def _arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, out):
    """Feature ids of arc h → d (positions within the sentence starting at ``a``, N = n + 1)
    into ``out``; returns their number. ``stamp`` (int64[n_pos]) and the unique ``mark`` dedupe
    the between-POS features."""
    dd = _dir_dist(h, d)
    hw = word[a + h]
    hp = pos[a + h]
    dw = word[a + d]
    dp = pos[a + d]
    c = 0
    # unigram and bigram
    c = _emit(_comb(_comb(_t(1), hw), hp), dd, D, out, c)
    c = _emit(_comb(_t(2), hw), dd, D, out, c)
    c = _emit(_comb(_t(3), hp), dd, D, out, c)
    c = _emit(_comb(_comb(_t(4), dw), dp), dd, D, out, c)
    c = _emit(_comb(_t(5), dw), dd, D, out, c)
    c = _emit(_comb(_t(6), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(7), hw), hp), dw), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(8), hp), dw), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(9), hw), dw), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(10), hw), hp), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(11), hw), hp), dw), dd, D, out, c)
    c = _emit(_comb(_comb(_t(12), hw), dw), dd, D, out, c)
    c = _emit(_comb(_comb(_t(13), hp), dp), dd, D, out, c)
    # 5-prefix versions
    h5 = pre[a + h]
    d5 = pre[a + d]
    if h5 != hw or d5 != dw:
        c = _emit(_comb(_comb(_t(14), h5), hp), dd, D, out, c)
        c = _emit(_comb(_t(15), h5), dd, D, out, c)
        c = _emit(_comb(_comb(_t(16), d5), dp), dd, D, out, c)
        c = _emit(_comb(_t(17), d5), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(18), h5), hp), d5), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(19), hp), d5), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(20), h5), d5), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(21), h5), hp), dp), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(22), h5), hp), d5), dd, D, out, c)
        c = _emit(_comb(_comb(_t(23), h5), d5), dd, D, out, c)
    # surrounding POS
    bos = _U(1)
    eos = _U(2)
    hl = pos[a + h - 1] if h > 0 else bos
    hr = pos[a + h + 1] if h + 1 < N else eos
    dl = pos[a + d - 1] if d > 0 else bos
    dr = pos[a + d + 1] if d + 1 < N else eos
    c = _emit(_comb(_comb(_comb(_comb(_t(24), hp), hr), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(25), hl), hp), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(26), hp), hr), dp), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(27), hl), hp), dp), dr), dd, D, out, c)
    # the four-grams with one of the outer POS dropped (MSTParser's back-offs)
    c = _emit(_comb(_comb(_comb(_t(30), hp), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(31), hp), hr), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(32), hl), hp), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_t(33), hp), dp), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(34), hl), hr), dl), dp), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(35), hp), hr), dl), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(36), hl), hr), dp), dr), dd, D, out, c)
    c = _emit(_comb(_comb(_comb(_comb(_t(37), hl), hp), dl), dr), dd, D, out, c)
    # coarse POS versions (when the corpus has a second POS column)
    if cpos.shape[0] > 0:
        hc = cpos[a + h]
        dc = cpos[a + d]
        c = _emit(_comb(_t(40), hc), dd, D, out, c)
        c = _emit(_comb(_t(41), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_t(42), hc), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(43), hc), dw), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_t(44), hw), hc), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(45), hw), hc), dw), dc), dd, D, out, c)
        hl = cpos[a + h - 1] if h > 0 else bos
        hr = cpos[a + h + 1] if h + 1 < N else eos
        dl = cpos[a + d - 1] if d > 0 else bos
        dr = cpos[a + d + 1] if d + 1 < N else eos
        c = _emit(_comb(_comb(_comb(_comb(_t(46), hc), hr), dl), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(47), hl), hc), dl), dc), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(48), hc), hr), dc), dr), dd, D, out, c)
        c = _emit(_comb(_comb(_comb(_comb(_t(49), hl), hc), dc), dr), dd, D, out, c)
        lo = h if h < d else d
        hi = d if h < d else h
        if hi - lo > 1:
            base = _comb(_t(50), hc)
            for q in range(a + lo + 1, a + hi):
                k = cposk[q]
                if stamp[k] != mark:
                    stamp[k] = mark
                    c = _emit(_comb(_comb(base, cpos[q]), dc), dd, D, out, c)
    # bias
    c = _emit(_t(29), dd, D, out, c)
    # between POS (distinct)
    lo = h if h < d else d
    hi = d if h < d else h
    if hi - lo > 1:
        base = _comb(_t(28), hp)
        for q in range(a + lo + 1, a + hi):
            k = posk[q]
            if stamp[k] != mark:
                stamp[k] = mark
                c = _emit(_comb(_comb(base, pos[q]), dp), dd, D, out, c)
    return c


@nb.njit(cache=True, nogil=True)
def _max_features(N):
    """Upper bound on the features of one arc in a sentence of N positions."""
    return 2 * 52 + 4 * max(N, 1)


# ---------------------------------------------------------------------------------------------
# label-conjoined features (numba): template keys k, the weight of (k, label l) at base(k) + l
# ---------------------------------------------------------------------------------------------
_MAX_LABEL_KEYS = 16  # bound on the keys of one arc (dependent + head + pair templates)


@nb.njit(cache=True, nogil=True, inline="always")
def _label_base(key, D, L):
    """First of the L consecutive weights of label-conjoined ``key``: w[base + l] is the weight
    of (key, label l). base is a multiple of 8 (a 64-byte cache line) in [0, D − L], so the
    label loop reads L/8 consecutive lines instead of L random ones."""
    h = key ^ (key >> _S33)
    h *= _M3
    h ^= h >> _S29
    nblk = _U((D - L) // 8 + 1)
    return np.int64(((h >> _S32) * nblk) >> _S32) * 8


@nb.njit(cache=True, nogil=True)
def _dep_label_keys(d, a, N, word, pos, cpos, D, L, out, c):
    """Bases of the dependent-side label templates of word d (dw, dp, dw·dp, dp−1·dp, dp·dp+1;
    with a second POS column dc, dw·dc) into out[c:]; returns the new c."""
    dw = word[a + d]
    dp = pos[a + d]
    dl = pos[a + d - 1]
    dr = pos[a + d + 1] if d + 1 < N else _U(2)
    out[c] = _label_base(_comb(_t(60), dw), D, L)
    out[c + 1] = _label_base(_comb(_t(61), dp), D, L)
    out[c + 2] = _label_base(_comb(_comb(_t(62), dw), dp), D, L)
    out[c + 3] = _label_base(_comb(_comb(_t(63), dl), dp), D, L)
    out[c + 4] = _label_base(_comb(_comb(_t(64), dp), dr), D, L)
    c += 5
    if cpos.shape[0] > 0:
        dc = cpos[a + d]
        out[c] = _label_base(_comb(_t(65), dc), D, L)
        out[c + 1] = _label_base(_comb(_comb(_t(66), dw), dc), D, L)
        c += 2
    return c


@nb.njit(cache=True, nogil=True)
def _head_label_keys(h, right, a, word, pos, cpos, D, L, out, c):
    """Bases of the head-side label templates of head h with its dependent to the ``right``
    (1) or left (0): hw·dir, hp·dir (and hc·dir); returns the new c."""
    r = _U(right + 1)
    out[c] = _label_base(_comb(_comb(_t(70), word[a + h]), r), D, L)
    out[c + 1] = _label_base(_comb(_comb(_t(71), pos[a + h]), r), D, L)
    c += 2
    if cpos.shape[0] > 0:
        out[c] = _label_base(_comb(_comb(_t(72), cpos[a + h]), r), D, L)
        c += 1
    return c


@nb.njit(cache=True, nogil=True)
def _pair_label_keys(h, d, a, pos, cpos, D, L, out, c):
    """Bases of the label templates of the pair h → d: dd (direction·distance), hp·dp·dd (and
    hc·dc·dd); returns the new c. Unlexicalised: a few thousand keys whose blocks stay in
    cache. With the lexical pair templates hw·dp·dir, hp·dw·dir, hw·dw as well, loss-augmented
    inference on 1,000 EWT dev sentences took 2.0x the unlabelled parser's time instead of
    1.3x, and EWT test after 120 s of training had UAS 86.22 / LAS 81.92 instead of 86.88 /
    82.64 (shared machine, similar CPU share). Conjoining the dependent-side templates with the
    direction and adding dw5·dp, dp−1·dp·dp+1 and hw·hp·dir gave 86.71 / 82.18."""
    dd = _U(_dir_dist(h, d))
    out[c] = _label_base(_comb(_t(80), dd), D, L)
    out[c + 1] = _label_base(_comb(_comb(_comb(_t(81), pos[a + h]), pos[a + d]), dd), D, L)
    c += 2
    if cpos.shape[0] > 0:
        out[c] = _label_base(_comb(_comb(_comb(_t(85), cpos[a + h]), cpos[a + d]), dd), D, L)
        c += 1
    return c


@nb.njit(cache=True, nogil=True)
def _label_keys(h, d, a, N, word, pos, cpos, D, L, out):
    """All label-template bases of arc h → d (G(h, d) below); returns their number."""
    c = _dep_label_keys(d, a, N, word, pos, cpos, D, L, out, 0)
    c = _head_label_keys(h, 1 if h < d else 0, a, word, pos, cpos, D, L, out, c)
    return _pair_label_keys(h, d, a, pos, cpos, D, L, out, c)


@nb.njit(cache=True, nogil=True, inline="always")
def _add_block(w, base, L, acc):
    for q in range(L):
        acc[q] += w[base + q]


@nb.njit(cache=True, nogil=True, inline="always")
def _arc_loss(h, l, g, gl):
    """Δ of one word given head h and label l against gold head g and label gl: 1 for a wrong
    head, LABEL_LOSS for the right head with a wrong label (l = gl = −1 when unlabelled)."""
    if h != g:
        return 1.0
    return LABEL_LOSS if l != gl else 0.0


@nb.njit(cache=True, nogil=True, inline="always")
def _masked(fhead, a, h, d):
    """True when arc h → d is ruled out by a given head of d (``fhead`` per position from
    ``a``, −1 free)."""
    g = fhead[a + d]
    return g >= 0 and g != h


@nb.njit(cache=True, nogil=True)
def _score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf,
                lab_arcs, gold, glab, augment, S, Lab, LD, LH, acc, kbuf, fhead, flab):
    """S[h·N + d] = max_l s(h, d, l) (+ Δ of the arc when ``augment``) for all h ≠ d, d ≥ 1, and
    Lab[h·N + d] = its argmax label (−1 unlabelled); impossible arcs (into ROOT, self) get −1e300.

    Given heads and labels (``predict --force``; ``fhead``/``flab`` per position, −1 free, or
    empty arrays: none): a word d with a given head g has every other arc h → d masked to
    −1e300 (its features are not even computed), and a word with a given label l scores
    s(h, d) = s(h, d, l) instead of the max (the label kept even where training never saw it
    on such an arc).

    s(h, d, l) = Σ_{f∈F(h,d)} w[f] + Σ_{k∈G(h,d)} w[base(k) + l], l ranging over the labels
    allowed on the arc (``lab_arcs[l]`` bit 1: on root arcs h = 0, bit 2: on the others). G
    splits into dependent-side keys (cached per d in LD), head-side keys (per h and direction
    in LH) and pair keys, so the label loop costs L·|pair keys| per arc. Returns the next
    ``mark``."""
    L = lab_arcs.shape[0]
    for h in range(N):
        S[h * N] = _NEG
        S[h * N + h] = _NEG
        Lab[h * N] = -1
        Lab[h * N + h] = -1
    if L > 0:
        for d in range(1, N):
            row = LD[d * L:(d + 1) * L]
            row[:] = 0.0
            c = _dep_label_keys(d, a, N, word, pos, cpos, D, L, kbuf, 0)
            for q in range(c):
                _add_block(w, kbuf[q], L, row)
        for h in range(N):
            for right in range(2):
                row = LH[(2 * h + right) * L:(2 * h + right + 1) * L]
                row[:] = 0.0
                c = _head_label_keys(h, right, a, word, pos, cpos, D, L, kbuf, 0)
                for q in range(c):
                    _add_block(w, kbuf[q], L, row)
    fixing = fhead.shape[0] > 0
    for h in range(N):
        for d in range(1, N):
            if h == d:
                continue
            if fixing and _masked(fhead, a, h, d):
                S[h * N + d] = _NEG
                Lab[h * N + d] = -1
                continue
            m = _arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            s = 0.0
            for q in range(m):
                s += w[fbuf[q]]
            g = gold[a + d] if augment else -1
            if L == 0:
                S[h * N + d] = s + (_arc_loss(h, -1, g, -1) if augment else 0.0)
                Lab[h * N + d] = -1
                continue
            right = 1 if h < d else 0
            for q in range(L):
                acc[q] = LD[d * L + q] + LH[(2 * h + right) * L + q]
            c = _pair_label_keys(h, d, a, pos, cpos, D, L, kbuf, 0)
            for q in range(c):
                _add_block(w, kbuf[q], L, acc)
            need = 1 if h == 0 else 2
            gl = glab[a + d] if augment else -1
            keep = flab[a + d] if fixing else -1
            best = -np.inf
            arg = -1
            for q in range(L) if keep < 0 else range(keep, keep + 1):
                if keep < 0 and lab_arcs[q] & need == 0:
                    continue
                v = acc[q] + (_arc_loss(h, q, g, gl) if augment else 0.0)
                if v > best:
                    best = v
                    arg = q
            S[h * N + d] = s + best
            Lab[h * N + d] = arg
    return mark


# ---------------------------------------------------------------------------------------------
# decoders (numba): S is a flat N×N arc-score matrix S[h·N + d]; heads[0] = −1; one root child
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _workspace(maxN, decoder):
    """Scratch for :func:`eisner_ws` (float64[4N²], int32[3N² + 9N + 9]) or :func:`cle_ws`
    (float64[4N²], int32[4N² + 10N + 1], bool[4N]) on sentences of up to maxN positions."""
    NN = maxN * maxN
    if decoder == _EISNER:
        return np.empty(4 * NN), np.empty(3 * NN + 9 * maxN + 9, np.int32), np.empty(0, np.bool_)
    return (np.empty(4 * NN), np.empty(4 * NN + 10 * maxN + 1, np.int32),
            np.empty(4 * maxN, np.bool_))


@nb.njit(cache=True, nogil=True)
def eisner_ws(S, N, heads, wf, wi):
    """Highest-scoring projective tree rooted at 0 with exactly one child of the root
    (Eisner 1996), O(N³); writes heads[0:N] (heads[0] = −1) and returns its score
    Σ_d S[heads[d]·N + d]. ``wf``, ``wi``: scratch from :func:`_workspace`.

    Spans [s, t]: complete C[s,t,r] (r = 1: headed at s, r = 0: at t), incomplete I[s,t,r]
    (the arc s → t when r = 1, t → s when r = 0):

        I[s,t,·] = max_{s≤r<t} C[s,r,1] + C[r+1,t,0] + S(s→t or t→s)
        C[s,t,0] = max_{s≤r<t} C[s,r,0] + I[r,t,0],  C[s,t,1] = max_{s<r≤t} I[s,r,1] + C[r,t,1]

    Single root: a root arc 0 → t may only close the split r = 0, I[0,t,1] = C[1,t,0] + S(0,t),
    so C[0,n,1] = max_t S(0,t) + C[1,t,0] + C[t,n,1]: the root's complete span attaches one
    child t, which heads all of 1..n (the inner Eisner over 1..n, then the best root child).
    Ties go to the smallest split point.
    """
    NN = N * N
    C0 = wf[0:NN]
    C1 = wf[NN:2 * NN]
    I0 = wf[2 * NN:3 * NN]
    I1 = wf[3 * NN:4 * NN]
    bI = wi[0:NN]
    bC0 = wi[NN:2 * NN]
    bC1 = wi[2 * NN:3 * NN]
    stack = wi[3 * NN:3 * NN + 3 * (3 * N + 3)]
    for s in range(N):
        C0[s * N + s] = 0.0
        C1[s * N + s] = 0.0
    for k in range(1, N):
        for s in range(0, N - k):
            t = s + k
            best = -np.inf
            arg = s
            for r in range(s, s + 1 if s == 0 else t):
                v = C1[s * N + r] + C0[(r + 1) * N + t]
                if v > best:
                    best = v
                    arg = r
            I0[s * N + t] = best + S[t * N + s]
            I1[s * N + t] = best + S[s * N + t]
            bI[s * N + t] = arg
            best = -np.inf
            arg = s
            for r in range(s, t):
                v = C0[s * N + r] + I0[r * N + t]
                if v > best:
                    best = v
                    arg = r
            C0[s * N + t] = best
            bC0[s * N + t] = arg
            best = -np.inf
            arg = s + 1
            for r in range(s + 1, t + 1):
                v = I1[s * N + r] + C1[r * N + t]
                if v > best:
                    best = v
                    arg = r
            C1[s * N + t] = best
            bC1[s * N + t] = arg
    heads[0] = -1
    # backtrack with an explicit stack of (s, t, kind): kind 0/1 = C0/C1, 2/3 = I0/I1
    stack[0] = 0
    stack[1] = N - 1
    stack[2] = 1
    top = 1
    while top > 0:
        top -= 1
        p = 3 * top
        s = stack[p]
        t = stack[p + 1]
        kind = stack[p + 2]
        if s == t:
            continue
        if kind == 0:
            r = bC0[s * N + t]
            stack[p], stack[p + 1], stack[p + 2] = s, r, 0
            stack[p + 3], stack[p + 4], stack[p + 5] = r, t, 2
        elif kind == 1:
            r = bC1[s * N + t]
            stack[p], stack[p + 1], stack[p + 2] = s, r, 3
            stack[p + 3], stack[p + 4], stack[p + 5] = r, t, 1
        else:
            r = bI[s * N + t]
            if kind == 2:
                heads[s] = t
            else:
                heads[t] = s
            stack[p], stack[p + 1], stack[p + 2] = s, r, 1
            stack[p + 3], stack[p + 4], stack[p + 5] = r + 1, t, 0
        top += 2
    total = 0.0
    for d in range(1, N):
        total += S[heads[d] * N + d]
    return total


@nb.njit(cache=True, nogil=True)
def cle_ws(S, N, heads, wf, wi, wb):
    """Maximum spanning arborescence rooted at 0 with exactly one root arc (Chu & Liu 1965,
    Edmonds 1967, with the root constraint of Gabow & Tarjan 1984), O(N³); writes heads[0:N]
    (heads[0] = −1) and returns its score. ``wf``, ``wi``, ``wb``: scratch from
    :func:`_workspace`.

    Root constraint: every root arc is lowered by M = 1 + Σ_d (max_h S(h,d) − min_h S(h,d)),
    more than the score range of all trees; a tree with k root arcs then scores its own
    score − kM, so the unconstrained maximum has k = 1 and is the best single-root tree (the
    score returned is recomputed from S). Zmigrod et al. (2020) give an O(N²) exact variant;
    this one keeps the plain algorithm.

    Plain algorithm: greedy best head per node; while the heads contain a cycle C, contract it
    into a new node c with in-scores s(u, c) = max_{v∈C} s(u, v) − s(head(v), v) and
    out-scores s(c, u) = max_{v∈C} s(v, u), remembering the maximisers; then expand the
    contractions in reverse order (the node of C entered from outside takes that head, the
    rest keep their cycle heads). Nodes are ids 0..2N−1 (new nodes appended).
    """
    M = 2 * N
    W = wf[:M * M]
    W[:] = -np.inf
    penalty = 1.0
    for d in range(1, N):
        lo = np.inf
        hi = -np.inf
        for h in range(N):
            v = S[h * N + d]
            if h != d and v > _NEG and v < np.inf:
                lo = min(lo, v)
                hi = max(hi, v)
        if hi > lo:
            penalty += hi - lo
    for h in range(N):
        for d in range(1, N):
            if h != d:
                W[h * M + d] = S[h * N + d] - (penalty if h == 0 else 0.0)
    alive = wb[0:M]
    incyc = wb[M:2 * M]
    alive[:] = False
    alive[:N] = True
    incyc[:] = False
    o = 0
    head = wi[o:o + M]
    o += M
    enter = wi[o:o + N * M]
    o += N * M
    leave = wi[o:o + N * M]
    o += N * M
    cnode = wi[o:o + N]
    o += N
    mem = wi[o:o + M]
    o += M
    mem_ptr = wi[o:o + N + 1]
    o += N + 1
    mhead = wi[o:o + M]
    o += M
    color = wi[o:o + M]
    head[:] = -1
    mem_ptr[0] = 0
    nn = N
    nc = 0
    while True:
        for v in range(1, nn):
            if not alive[v]:
                continue
            best = -np.inf
            arg = -1
            for u in range(nn):
                if alive[u] and u != v and W[u * M + v] > best:
                    best = W[u * M + v]
                    arg = u
            head[v] = arg
        # find a cycle
        color[:nn] = 0
        found = -1
        for v in range(1, nn):
            if not alive[v] or color[v] != 0:
                continue
            x = v
            while x > 0 and color[x] == 0:
                color[x] = v
                x = head[x]
            if x > 0 and color[x] == v:
                found = x
                break
        if found < 0:
            break
        # contract the cycle through ``found`` into node c = nn
        c = nn
        nn += 1
        p = mem_ptr[nc]
        x = found
        while True:
            mem[p] = x
            mhead[p] = head[x]
            incyc[x] = True
            p += 1
            x = head[x]
            if x == found:
                break
        mem_ptr[nc + 1] = p
        for u in range(c):
            if not alive[u] or incyc[u]:
                continue
            bi = -np.inf
            ai = -1
            bo = -np.inf
            ao = -1
            for q in range(mem_ptr[nc], p):
                v = mem[q]
                vi = W[u * M + v] - W[head[v] * M + v]
                if vi > bi:
                    bi = vi
                    ai = v
                vo = W[v * M + u]
                if vo > bo:
                    bo = vo
                    ao = v
            W[u * M + c] = bi
            enter[nc * M + u] = ai
            W[c * M + u] = bo
            leave[nc * M + u] = ao
        for q in range(mem_ptr[nc], p):
            alive[mem[q]] = False
            incyc[mem[q]] = False
        alive[c] = True
        cnode[nc] = c
        nc += 1
    # expand
    for k in range(nc - 1, -1, -1):
        c = cnode[k]
        for q in range(mem_ptr[k], mem_ptr[k + 1]):
            head[mem[q]] = mhead[q]
            incyc[mem[q]] = True
        for u in range(c):
            if head[u] == c and not incyc[u]:
                head[u] = leave[k * M + u]
        h = head[c]
        head[enter[k * M + h]] = h
        for q in range(mem_ptr[k], mem_ptr[k + 1]):
            incyc[mem[q]] = False
    heads[0] = -1
    total = 0.0
    for d in range(1, N):
        heads[d] = head[d]
        total += S[head[d] * N + d]
    return total


@nb.njit(cache=True, nogil=True)
def eisner(S, N, heads):
    """:func:`eisner_ws` with its own scratch (for tests and one-off calls)."""
    wf, wi, _ = _workspace(N, _EISNER)
    return eisner_ws(S, N, heads, wf, wi)


@nb.njit(cache=True, nogil=True)
def chu_liu_edmonds(S, N, heads):
    """:func:`cle_ws` with its own scratch (for tests and one-off calls)."""
    wf, wi, wb = _workspace(N, _CLE)
    return cle_ws(S, N, heads, wf, wi, wb)


# ---------------------------------------------------------------------------------------------
# batch kernels
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _max_len(tok_ptr, examples):
    m = 1
    for e in range(examples.shape[0]):
        i = examples[e]
        n = tok_ptr[i + 1] - tok_ptr[i]
        if n > m:
            m = n
    return m


@nb.njit(cache=True, nogil=True)
def _decode_tree(S, N, y, decoder, fhead, a, wf, wi, wb, cf, ci, cb):
    """The best single-root tree over the arc scores S into y with the ``decoder``'s scratch
    wf, wi, wb; with given heads ``fhead`` (from position ``a``; empty: none), already masked
    in S, and Eisner: when the projective optimum drops one of them (no projective tree keeps
    them all), decode again with Chu-Liu-Edmonds in the scratch cf, ci, cb and return 1
    (else 0)."""
    if decoder != _EISNER:
        cle_ws(S, N, y, wf, wi, wb)
        return 0
    eisner_ws(S, N, y, wf, wi)
    if fhead.shape[0] == 0:
        return 0
    for d in range(1, N):
        if _masked(fhead, a, y[d], d):
            cle_ws(S, N, y, cf, ci, cb)
            return 1
    return 0


def decode_given(S: np.ndarray, given: np.ndarray, decoder: str = "eisner"
                 ) -> tuple[np.ndarray, float, bool]:
    """The best single-root tree over the (n+1)×(n+1) arc scores S keeping the heads ``given``
    (int per position 0..n, −1 free; no two 0s and no cycle, see :func:`fixed_heads_check`),
    decoded as :func:`parse_kernel` does: (heads of positions 0..n, heads[0] = −1; its score
    Σ_d S(heads[d], d); True when Eisner fell back to Chu-Liu-Edmonds). For tests and one-off
    calls."""
    N = S.shape[0]
    heads = np.empty(N, np.int32)
    total, fell = _decode_given(np.array(S, np.float64).ravel(), N, heads,
                                np.ascontiguousarray(given, np.int32),
                                _EISNER if decoder == "eisner" else _CLE)
    return heads, float(total), bool(fell)


@nb.njit(cache=True, nogil=True)
def _decode_given(S, N, heads, given, decoder):
    for h in range(N):
        for d in range(1, N):
            if _masked(given, 0, h, d):
                S[h * N + d] = _NEG
    wf, wi, wb = _workspace(N, decoder)
    cf, ci, cb = _workspace(N if decoder == _EISNER else 0, _CLE)
    fell = _decode_tree(S, N, heads, decoder, given, 0, wf, wi, wb, cf, ci, cb)
    total = 0.0
    for d in range(1, N):
        total += S[heads[d] * N + d]
    return total, fell


@nb.njit(cache=True, nogil=True)
def fixed_heads_check(tok_ptr, fhead, examples):
    """Whether some single-root tree keeps the given heads ``fhead`` (per position, −1 free) of
    each example: (code, word) per example, code 0 yes, 1 two words given head 0 (word: the
    second), 2 the given heads form a cycle (word: one on it). Otherwise a tree exists: the
    given arcs form a forest; hang every other forest root below the word given head 0, or
    below any forest root when none is. (A *projective* one may still not exist: see
    :func:`parse_kernel`.)"""
    n_ex = examples.shape[0]
    code = np.zeros(n_ex, np.int64)
    where = np.zeros(n_ex, np.int64)
    state = np.zeros(_max_len(tok_ptr, examples), np.int64)
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        root = 0
        for d in range(1, N):
            if fhead[a + d] == 0:
                if root:
                    code[e] = 1
                    where[e] = d
                    break
                root = d
        if code[e]:
            continue
        # state: 0 unseen, d on the path walked from d, −1 reaches the root or a free word
        state[:N] = 0
        for d in range(1, N):
            x = d
            while x > 0 and state[x] == 0 and fhead[a + x] >= 0:
                state[x] = d
                x = fhead[a + x]
            if x > 0 and state[x] == d:
                code[e] = 2
                where[e] = x
                break
            x = d
            while x > 0 and state[x] == d:
                state[x] = -1
                x = fhead[a + x]
    return code, where


@nb.njit(cache=True, nogil=True)
def parse_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, gold, glab,
                 examples, augment, decoder, fhead, flab):
    """Heads and labels of every example, flat: example e's positions 0..n at
    out_ptr[e]:out_ptr[e+1] (ROOT's entries −1; labels −1 when unlabelled, L = 0), and per
    example 1 where Eisner fell back to Chu-Liu-Edmonds (else 0).
    ``augment``: argmax of w·Φ + Δ (Δ added per arc and label, see :func:`_arc_loss`).
    ``fhead``, ``flab``: given heads and labels per position (−1 free; empty arrays: none),
    kept by masking the arc scores (:func:`_score_arcs`); the caller checks with
    :func:`fixed_heads_check` that some single-root tree keeps them. When no *projective* one
    does (given arcs that cross, or that the root arc must cross), the best projective tree
    Eisner finds uses a masked arc (score ≤ −1e300 against a finite score for any tree of
    unmasked arcs); that sentence is decoded again with Chu-Liu-Edmonds, which finds the best
    non-projective tree keeping them. Scratch is allocated once per call, for the longest
    sentence."""
    n_ex = examples.shape[0]
    out_ptr = np.zeros(n_ex + 1, np.int64)
    for e in range(n_ex):
        i = examples[e]
        out_ptr[e + 1] = out_ptr[e] + tok_ptr[i + 1] - tok_ptr[i]
    out = np.empty(out_ptr[n_ex], np.int32)
    out_lab = np.empty(out_ptr[n_ex], np.int32)
    maxN = _max_len(tok_ptr, examples)
    L = lab_arcs.shape[0]
    S = np.empty(maxN * maxN)
    Lab = np.empty(maxN * maxN, np.int32)
    LD = np.empty(maxN * L)
    LH = np.empty(2 * maxN * L)
    acc = np.empty(L)
    kbuf = np.empty(_MAX_LABEL_KEYS, np.int64)
    fbuf = np.empty(_max_features(maxN), np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    wf, wi, wb = _workspace(maxN, decoder)
    fixing = fhead.shape[0] > 0
    cf, ci, cb = _workspace(maxN if fixing and decoder == _EISNER else 0, _CLE)
    fell = np.zeros(n_ex, np.int8)
    mark = np.int64(0)
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        mark = _score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf,
                           lab_arcs, gold, glab, augment, S, Lab, LD, LH, acc, kbuf, fhead, flab)
        y = out[out_ptr[e]:out_ptr[e + 1]]
        fell[e] = _decode_tree(S, N, y, decoder, fhead, a, wf, wi, wb, cf, ci, cb)
        lab = out_lab[out_ptr[e]:out_ptr[e + 1]]
        lab[0] = -1
        for d in range(1, N):
            lab[d] = Lab[y[d] * N + d]
    return out, out_lab, out_ptr, fell


@nb.njit(cache=True, nogil=True)
def _key_bits(D):
    nbits = 1
    while (np.int64(1) << nbits) <= 2 * D + 1:
        nbits += 1
    return nbits


@nb.njit(cache=True, nogil=True)
def _push_label_keys(h, d, lab, a, N, word, pos, cpos, D, L, kbuf, keys, m, sign):
    """Append the signed keys 2·(base(k) + lab) + sign of the label features of (h, d, lab)."""
    c = _label_keys(h, d, a, N, word, pos, cpos, D, L, kbuf)
    for q in range(c):
        keys[m] = 2 * (kbuf[q] + lab) + sign
        m += 1
    return m


@nb.njit(cache=True, nogil=True)
def records_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, gold,
                   glab, examples, heads, labs, hptr, keep_all):
    """Records (i, FNV hash, Δ, w·φ, φ CSR) of the head and label vectors ``heads``, ``labs``
    (flat, as returned by :func:`parse_kernel`), for the examples where Δ > 0 (all of them with
    ``keep_all``). Only words with a wrong head or label contribute to φ:
    +F(g, d) − F(y_d, d) when the head is wrong, +G(g, d)⊗gl − G(y_d, d)⊗l_d (labelled)."""
    n_ex = examples.shape[0]
    L = lab_arcs.shape[0]
    maxN = _max_len(tok_ptr, examples)
    fbuf = np.empty(_max_features(maxN), np.int64)
    kbuf = np.empty(_MAX_LABEL_KEYS, np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    mark = np.int64(0)
    nbits = _key_bits(D)
    r_ex = np.empty(n_ex, np.int64)
    r_hash = np.empty(n_ex, np.uint64)
    r_delta = np.empty(n_ex, np.float64)
    r_margin = np.empty(n_ex, np.float64)
    r_ptr = np.zeros(n_ex + 1, np.int64)
    kcap = 2 * maxN * (_max_features(maxN) + _MAX_LABEL_KEYS)
    keys = np.empty(kcap, np.int64)
    tmp = np.empty(kcap, np.int64)
    counts = np.empty(256, np.int64)
    cap = 4096
    out_idx = np.empty(cap, np.int32)
    out_val = np.empty(cap, np.float64)
    pos_ = 0
    nrec = 0
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        y = heads[hptr[e]:hptr[e + 1]]
        yl = labs[hptr[e]:hptr[e + 1]]
        m = 0
        delta = 0.0
        h_ = _FNV_OFFSET
        for d in range(1, N):
            h_ = (h_ ^ _U(y[d])) * _FNV_PRIME
            if L > 0:
                h_ = (h_ ^ _U(yl[d] + 1)) * _FNV_PRIME
            g = gold[a + d]
            p = y[d]
            gl = glab[a + d] if L > 0 else -1
            pl = yl[d] if L > 0 else -1
            loss = _arc_loss(p, pl, g, gl)
            if loss == 0.0:
                continue
            delta += loss
            if g != p:
                c = _arc_features(g, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark,
                                  fbuf)
                mark += 1
                for q in range(c):
                    keys[m] = 2 * fbuf[q] + 1
                    m += 1
                c = _arc_features(p, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark,
                                  fbuf)
                mark += 1
                for q in range(c):
                    keys[m] = 2 * fbuf[q]
                    m += 1
            if L > 0:
                if gl >= 0:
                    m = _push_label_keys(g, d, gl, a, N, word, pos, cpos, D, L, kbuf, keys, m, 1)
                m = _push_label_keys(p, d, pl, a, N, word, pos, cpos, D, L, kbuf, keys, m, 0)
        if delta == 0.0 and not keep_all:
            continue
        if pos_ + m > cap:
            while pos_ + m > cap:
                cap *= 2
            ni = np.empty(cap, np.int32)
            nv = np.empty(cap, np.float64)
            ni[:pos_] = out_idx[:pos_]
            nv[:pos_] = out_val[:pos_]
            out_idx = ni
            out_val = nv
        ks = sort_keys(keys, tmp, counts, m, nbits)
        pos_, margin = merge(ks, m, w, out_idx, out_val, pos_)
        r_ex[nrec] = i
        r_hash[nrec] = h_
        r_delta[nrec] = delta
        r_margin[nrec] = margin
        nrec += 1
        r_ptr[nrec] = pos_
    return (r_ex[:nrec].copy(), r_hash[:nrec].copy(), r_delta[:nrec].copy(),
            r_margin[:nrec].copy(), r_ptr[:nrec + 1].copy(), out_idx[:pos_].copy(),
            out_val[:pos_].copy())


@nb.njit(cache=True, nogil=True)
def score_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, i, y, yl):
    """w·Φ(x_i, y) = Σ_d s(y_d, d, l_d) for one head vector y and label vector yl (positions
    0..n, entry 0 ignored; yl unused when unlabelled)."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    L = lab_arcs.shape[0]
    fbuf = np.empty(_max_features(N), np.int64)
    kbuf = np.empty(_MAX_LABEL_KEYS, np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    total = 0.0
    for d in range(1, N):
        c = _arc_features(y[d], d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, d, fbuf)
        for q in range(c):
            total += w[fbuf[q]]
        if L > 0:
            c = _label_keys(y[d], d, a, N, word, pos, cpos, D, L, kbuf)
            for q in range(c):
                total += w[kbuf[q] + yl[d]]
    return total


@nb.njit(cache=True, nogil=True)
def arc_scores_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, i):
    """The flat N×N matrices max_l s(h, d, l) (−1e300 for impossible arcs) and argmax l of
    example i, through the decomposed path of :func:`_score_arcs`."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    L = lab_arcs.shape[0]
    S = np.empty(N * N)
    Lab = np.empty(N * N, np.int32)
    fbuf = np.empty(_max_features(N), np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    none = np.zeros(0, np.int32)
    _score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, np.int64(0), fbuf,
                lab_arcs, none, none, False, S, Lab, np.empty(N * L), np.empty(2 * N * L),
                np.empty(L), np.empty(_MAX_LABEL_KEYS, np.int64), none, none)
    return S, Lab


@nb.njit(cache=True, nogil=True)
def label_scores_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, lab_arcs, i):
    """The flat N×N×L tensor s(h, d, l) of example i straight from F and G (no caching):
    −inf for impossible arcs and for labels not allowed on the arc."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    L = lab_arcs.shape[0]
    T = np.full(N * N * L, -np.inf)
    fbuf = np.empty(_max_features(N), np.int64)
    kbuf = np.empty(_MAX_LABEL_KEYS, np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    mark = np.int64(0)
    for h in range(N):
        for d in range(1, N):
            if h == d:
                continue
            m = _arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            s = 0.0
            for q in range(m):
                s += w[fbuf[q]]
            c = _label_keys(h, d, a, N, word, pos, cpos, D, L, kbuf)
            need = 1 if h == 0 else 2
            for lab in range(L):
                if lab_arcs[lab] & need == 0:
                    continue
                v = s
                for q in range(c):
                    v += w[kbuf[q] + lab]
                T[(h * N + d) * L + lab] = v
    return T


# ---------------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------------
class DependencyTask(Task):
    """First-order arc-factored dependency parsing over :class:`EncodedTrees`, w of length D.

    ``decoder``: ``"eisner"`` (projective) or ``"cle"`` (non-projective), both with exactly
    one root child. ``label_arcs``: one int8 per label (bit 1: the label may sit on a root arc,
    bit 2: on any other arc), None or empty for an unlabelled parser. Structures (decode, gold)
    are int32 arrays of shape (2, n): the heads of words 1..n and their label ids (−1 when
    unlabelled); :meth:`score` and :meth:`phi_delta` of an unlabelled task also take a plain
    head vector. ``label_groups``: per label its universal-DEPREL group id (:func:`label_groups`;
    None: every label its own group), for the LAS of :meth:`metric`.
    """

    name = "dependency"

    def __init__(self, enc: EncodedTrees, hashing: int = DEFAULT_HASHING,
                 decoder: str = "eisner", label_arcs: np.ndarray | None = None,
                 label_groups: np.ndarray | None = None):
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder!r}; use eisner or cle")
        if not 16 <= int(hashing) < 2**31 or int(hashing) % 16:
            raise ValueError("hashing must be a multiple of 16 in [16, 2**31)")
        arcs = np.zeros(0, np.int8) if label_arcs is None else \
            np.ascontiguousarray(label_arcs, np.int8).reshape(-1)
        if arcs.shape[0] and (int(hashing) < arcs.shape[0] or arcs.min() < 1 or arcs.max() > 3
                              or not (arcs & 1).any() or not (arcs & 2).any()):
            raise ValueError("label_arcs must be 1 (root arcs), 2 (other arcs) or 3 per label, "
                             "some label for each kind, and no more labels than hashing")
        self.enc = enc
        self.D = int(hashing)
        self.decoder = decoder
        self._dec = _EISNER if decoder == "eisner" else _CLE
        self.label_arcs = arcs
        self.n_labels = int(arcs.shape[0])
        self.label_groups = np.arange(self.n_labels, dtype=np.int32) if label_groups is None \
            else np.ascontiguousarray(label_groups, np.int32).reshape(-1)
        if self.label_groups.shape[0] != self.n_labels or (self.n_labels and
                                                           self.label_groups.min() < 0):
            raise ValueError("label_groups must give every label a group id >= 0")
        self._gold = enc.heads if enc.heads is not None else np.zeros(0, np.int32)
        self._glab = self._gold_labels() if enc.heads is not None else np.zeros(0, np.int32)

    @property
    def dim(self) -> int:
        """D, the number of hashed features."""
        return self.D

    @property
    def n_examples(self) -> int:
        return self.enc.n_sentences

    def costs(self) -> np.ndarray:
        """n² per sentence (arc scoring dominates inference)."""
        return np.diff(self.enc.tok_ptr).astype(np.float64) ** 2

    # -- helpers --------------------------------------------------------------------------
    def _w(self, w: np.ndarray, float32_ok: bool = False) -> np.ndarray:
        keep = float32_ok and w.dtype == np.float32
        w = np.ascontiguousarray(w, np.float32 if keep else np.float64)
        if w.shape != (self.D,):
            raise ValueError(f"w must have shape ({self.D},), got {w.shape}")
        return w

    def _arrays(self) -> tuple:
        """The sentence arrays and the label arcs, in the kernels' argument order."""
        e = self.enc
        return (e.tok_ptr, e.word, e.pre, e.pos, e.posk, e.cpos, e.cposk, e.n_pos + e.n_cpos,
                self.label_arcs)

    def _gold_labels(self) -> np.ndarray:
        """Gold label ids per position (−1 at ROOT; all −1 when unlabelled)."""
        if self.n_labels == 0:
            return np.full(self.enc.word.shape[0], -1, np.int32)
        if self.enc.labels is None:
            raise ValueError("a labelled parser needs gold labels with the gold heads")
        if self.enc.labels.max(initial=-1) >= self.n_labels:
            raise ValueError(f"gold label ids must lie in 0..{self.n_labels - 1} (or −1)")
        return self.enc.labels

    def _need_gold(self) -> np.ndarray:
        if self.enc.heads is None:
            raise ValueError("this data set has no gold heads")
        return self.enc.heads

    @staticmethod
    def _examples(examples: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(examples, np.int64).reshape(-1)

    def _y(self, i: int, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """A structure of words 1..n → (heads, labels) over positions 0..n (entry 0 = −1),
        validated."""
        n = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i]) - 1
        y = np.asarray(y, np.int64)
        if y.ndim == 1 and self.n_labels == 0:
            y = np.stack([y, np.full(y.shape[0], -1)])
        if y.shape != (2, n):
            raise ValueError(f"example {i} has {n} words: expected heads" +
                             (" and labels as a (2, n) array" if self.n_labels else "") +
                             f", got shape {y.shape}")
        h, lab = y
        if n and (h.min() < 0 or h.max() > n or np.any(h == np.arange(1, n + 1))):
            raise ValueError(f"heads must lie in 0..{n}, none its own")
        if self.n_labels and n and (lab.min() < 0 or lab.max() >= self.n_labels):
            raise ValueError(f"label ids must lie in 0..{self.n_labels - 1}")
        if not self.n_labels and (lab != -1).any():
            raise ValueError("an unlabelled task takes label ids −1")
        return (np.concatenate([[-1], h]).astype(np.int32),
                np.concatenate([[-1], lab]).astype(np.int32))

    # -- inference ------------------------------------------------------------------------
    def parse(self, w: np.ndarray, examples: np.ndarray, augment: bool = False
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(flat int32 heads, flat int32 labels, both with ROOT entries −1, int64 ptr) of the
        (loss-augmented) argmax."""
        if augment:
            self._need_gold()
        return parse_kernel(self._w(w, True), self.D, *self._arrays(), self._gold, self._glab,
                            self._examples(examples), bool(augment), self._dec, _NONE,
                            _NONE)[:3]

    def _records(self, w: np.ndarray, examples: np.ndarray, augment: bool) -> RecordBatch:
        examples = self._examples(examples)
        if examples.shape[0] == 0:
            return RecordBatch.empty()
        gold = self._need_gold()
        w = self._w(w, True)
        heads, labs, hptr, _ = parse_kernel(w, self.D, *self._arrays(), gold, self._glab,
                                            examples, augment, self._dec, _NONE, _NONE)
        ex, h, delta, margin, ptr, idx, val = records_kernel(
            w, self.D, *self._arrays(), gold, self._glab, examples, heads, labs, hptr, False)
        return RecordBatch(ex, h.view(np.int64), delta, margin, ptr,
                           idx.astype(INDEX_DTYPE, copy=False), val.astype(VALUE_DTYPE, copy=False))

    def loss_augmented(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + Δ(y_i, y) per example; one record per example with Δ > 0."""
        return self._records(w, examples, True)

    def argmax_records(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Records of the plain argmax for the examples it gets wrong (structured perceptron)."""
        return self._records(w, examples, False)

    def decode(self, w: np.ndarray, examples: np.ndarray) -> list[np.ndarray]:
        """argmax_y w·Φ(x_i, y): per example an int32 (2, n) array, heads of words 1..n and
        their label ids (−1 when unlabelled)."""
        heads, labs, ptr = self.parse(w, examples, False)
        return [np.stack([heads[ptr[e] + 1:ptr[e + 1]], labs[ptr[e] + 1:ptr[e + 1]]])
                for e in range(ptr.shape[0] - 1)]

    def decode_fixed(self, w: np.ndarray, examples: np.ndarray, fhead: np.ndarray,
                     flab: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray]:
        """argmax_y w·Φ(x_i, y) over the single-root trees (projective for Eisner) with
        y_d = fhead[d] wherever fhead[d] ≥ 0 and l_d = flab[d] wherever flab[d] ≥ 0: the
        structures as :meth:`decode`'s, and the bool mask of the examples where no projective
        tree keeps the given heads, decoded with Chu-Liu-Edmonds instead (Eisner only).

        ``fhead``, ``flab``: int per position of the encoding (``enc.tok_ptr`` layout, ROOT
        entries −1), −1 where free. Raises :class:`FixedHeadsError` for the first example whose
        given heads no single-root tree keeps (two words given head 0, a cycle) and
        ``ValueError`` for heads outside 0..n or on the word itself and unknown label ids."""
        examples = self._examples(examples)
        fhead, flab = self._fixed_arrays(fhead, flab)
        code, where = fixed_heads_check(self.enc.tok_ptr, fhead, examples)
        bad = np.flatnonzero(code)
        if bad.shape[0]:
            e = int(bad[0])
            i, d = int(examples[e]), int(where[e])
            if code[e] == 1:
                first = int(np.flatnonzero(fhead[self.enc.tok_ptr[i] + 1:
                                                 self.enc.tok_ptr[i] + d] == 0)[0]) + 1
                raise FixedHeadsError(i, f"words {first} and {d} are both given head 0, but a "
                                         "tree has one root word")
            raise FixedHeadsError(i, f"the given heads form a cycle through word {d}")
        heads, labs, ptr, fell = parse_kernel(
            self._w(w, True), self.D, *self._arrays(), self._gold, self._glab, examples, False,
            self._dec, fhead, flab)
        return ([np.stack([heads[ptr[e] + 1:ptr[e + 1]], labs[ptr[e] + 1:ptr[e + 1]]])
                 for e in range(ptr.shape[0] - 1)], fell.astype(bool))

    def _fixed_arrays(self, fhead: np.ndarray, flab: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Given heads and labels as checked int32 arrays over the encoding's positions."""
        tp = self.enc.tok_ptr
        total = int(tp[-1])
        fhead = np.ascontiguousarray(fhead, np.int32).reshape(-1)
        flab = np.full(total, -1, np.int32) if flab is None else \
            np.ascontiguousarray(flab, np.int32).reshape(-1)
        if fhead.shape[0] != total or flab.shape[0] != total:
            raise ValueError(f"given heads and labels need one entry per position ({total})")
        lens = np.diff(tp)
        n = np.repeat(lens - 1, lens)
        at = np.arange(total) - np.repeat(tp[:-1], lens)
        if np.any((fhead < -1) | (fhead > n) | (fhead == at)) or np.any(fhead[tp[:-1]] != -1):
            raise ValueError("given heads must lie in 0..n (−1: free, and at ROOT), none on "
                             "its own word")
        if np.any((flab < -1) | (flab >= self.n_labels)) or np.any(flab[tp[:-1]] != -1):
            raise ValueError(f"given label ids must lie in 0..{self.n_labels - 1} (−1: free, "
                             "and at ROOT)")
        return fhead, flab

    def gold(self, examples: np.ndarray) -> list[np.ndarray]:
        """The gold structures, int32 (2, n) arrays like :meth:`decode`'s."""
        H = self._need_gold()
        tp = self.enc.tok_ptr
        return [np.stack([H[tp[i] + 1:tp[i + 1]], self._glab[tp[i] + 1:tp[i + 1]]])
                for i in self._examples(examples)]

    def metric(self, gold: list[Any], predicted: list[Any],
               examples: np.ndarray | None = None) -> dict[str, float]:
        """UAS = words with the right head / words and, for a labelled task, LAS = words with
        the right head and the right universal DEPREL (the group of :func:`label_groups`: the
        part before ':', as the CoNLL 2018 evaluator) / words and LAS with subtypes = words with
        the right head and label / words, each with punctuation (``uas``, ``las``,
        ``las_subtypes``; ``score`` is the UAS) and without (``uas_no_punct``,
        ``las_no_punct``, ``las_subtypes_no_punct``); ``examples`` (default: all, in order)
        says which sentences the lists hold, for the punctuation marks and the gold groups."""
        ex = np.arange(self.n_examples) if examples is None else self._examples(examples)
        if len(gold) != len(predicted) or len(gold) != ex.shape[0]:
            raise ValueError("gold, predicted and examples differ in number of sentences")
        tp, pu, gr = self.enc.tok_ptr, self.enc.punct, self.enc.groups
        group = np.append(self.label_groups, -2)  # id −1 (none) → −2, never a gold group
        n = n_np = 0
        c = np.zeros(6, np.int64)  # heads, labelled, universal labelled; each without punct.
        for i, g, p in zip(ex, gold, predicted, strict=True):
            g = np.asarray(g).reshape(-1, tp[i + 1] - tp[i] - 1)
            p = np.asarray(p).reshape(-1, tp[i + 1] - tp[i] - 1)
            mask = pu[tp[i] + 1:tp[i + 1]]
            if g.shape[1] != p.shape[1] or g.shape[1] != mask.shape[0]:
                raise ValueError(f"sentence {i}: gold and predicted differ in length")
            ok = g[0] == p[0]
            lok = uok = np.zeros_like(ok)
            if g.shape[0] == p.shape[0] == 2 and self.n_labels:
                lok = ok & (g[1] == p[1])
                gg = gr[tp[i] + 1:tp[i + 1]] if gr is not None else \
                    np.where(g[1] >= 0, group[g[1]], -1)
                uok = ok & (gg >= 0) & (gg == group[p[1]])
            n += mask.shape[0]
            n_np += int((~mask).sum())
            c += [ok.sum(), (ok & ~mask).sum(), lok.sum(), (lok & ~mask).sum(),
                  uok.sum(), (uok & ~mask).sum()]
        uas = c[0] / n if n else 0.0
        m = {"score": uas, "uas": uas, "uas_no_punct": c[1] / n_np if n_np else 0.0,
             "words": float(n), "words_no_punct": float(n_np)}
        if self.n_labels:
            m["las"] = c[4] / n if n else 0.0
            m["las_no_punct"] = c[5] / n_np if n_np else 0.0
            m["las_subtypes"] = c[2] / n if n else 0.0
            m["las_subtypes_no_punct"] = c[3] / n_np if n_np else 0.0
        return {k: float(v) for k, v in m.items()}

    # -- records --------------------------------------------------------------------------
    def phi_delta(self, i: int, y: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) (sorted unique, no zeros) and Δ(y_i, y)."""
        i = int(i)
        yy, yl = self._y(i, y)
        ex, _, delta, _, ptr, idx, val = records_kernel(
            np.zeros(0), self.D, *self._arrays(), self._need_gold(), self._glab,
            np.array([i], np.int64), yy, yl, np.array([0, yy.shape[0]], np.int64), True)
        return idx.astype(INDEX_DTYPE, copy=False), val, float(delta[0])

    def score(self, w: np.ndarray, i: int, y: Any) -> float:
        """w·Φ(x_i, y) = Σ_d s(y_d, d, l_d)."""
        i = int(i)
        yy, yl = self._y(i, y)
        return float(score_kernel(self._w(w), self.D, *self._arrays(), i, yy, yl))

    def arc_scores(self, w: np.ndarray, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The (n+1)×(n+1) matrices max_l s(h, d, l) (−1e300 for arcs into ROOT and loops) and
        the argmax label ids (−1 when unlabelled) of example i."""
        i = int(i)
        N = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i])
        S, lab = arc_scores_kernel(self._w(w), self.D, *self._arrays(), i)
        return S.reshape(N, N), lab.reshape(N, N)

    def label_scores(self, w: np.ndarray, i: int) -> np.ndarray:
        """The (n+1)×(n+1)×L tensor s(h, d, l) of example i computed arc by arc (−inf where an
        arc or a label on it is impossible); a check of :meth:`arc_scores`' cached sums."""
        i = int(i)
        N = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i])
        T = label_scores_kernel(self._w(w), self.D, *self._arrays(), i)
        return T.reshape(N, N, self.n_labels)

    @staticmethod
    def hash_heads(y: np.ndarray) -> int:
        """The record hash of a structure: FNV-1a over the heads of words 1..n, each followed by
        its label id + 1 when the structure is a (2, n) array with labels (ids ≥ 0), as a signed
        int64."""
        y = np.asarray(y, np.int64)
        seq = y.reshape(-1)
        if y.ndim == 2:
            seq = np.stack([y[0], y[1] + 1], 1).reshape(-1) if (y[1] >= 0).any() else y[0]
        h = int(_FNV_OFFSET)
        for v in seq:
            h = ((h ^ int(v)) * int(_FNV_PRIME)) & (2**64 - 1)
        return int(np.array([h], np.uint64).view(np.int64)[0])


# ---------------------------------------------------------------------------------------------
# the estimator
# ---------------------------------------------------------------------------------------------
Sentence = list  # a sentence: a list of (word, POS) pairs
Heads = list  # a sentence's gold or predicted tree: heads, or (head, DEPREL) pairs, of words 1..n


def split_sentences(X: list[Sentence]
                    ) -> tuple[list[list[str]], list[list[str]], list[list[str]] | None]:
    """(words, POS, coarse POS or None) of sentences of (word, POS[, coarse POS]) tuples."""
    words, tags, coarse = [], [], []
    three = bool(X) and bool(X[0]) and isinstance(X[0][0], tuple | list) and len(X[0][0]) >= 3
    for s, sent in enumerate(X):
        if not sent:
            raise OptionError(f"sentence {s} is empty")
        try:
            words.append([str(t[0]) for t in sent])
            tags.append([str(t[1]) for t in sent])
            if three:
                coarse.append([str(t[2]) for t in sent])
        except (IndexError, TypeError):
            raise OptionError(f"sentence {s}: tokens must be (word, POS) or (word, POS, coarse "
                              "POS) tuples, the same kind in every sentence") from None
    return words, tags, (coarse if three else None)


def split_trees(Y: list[Heads]) -> tuple[list[list[int]], list[list[str]] | None]:
    """(heads, DEPRELs or None) of trees given as head lists or as (head, DEPREL) pair lists."""
    pairs = any(bool(y) and isinstance(y[0], tuple | list) for y in Y)
    heads: list[list[int]] = []
    rels: list[list[str]] = []
    for s, y in enumerate(Y):
        try:
            if pairs:
                heads.append([int(h) for h, _ in y])
                rels.append([str(r) for _, r in y])
            else:
                heads.append([int(h) for h in y])
        except (TypeError, ValueError):
            raise OptionError(f"Y[{s}]: give every sentence's tree as heads (ints) or as "
                              "(head, DEPREL) pairs, the same kind in every sentence") from None
    return heads, (rels if pairs else None)


def label_set(heads: list[list[int]], rels: list[list[str]]) -> tuple[list[str], list[int]]:
    """The sorted DEPRELs of a treebank and, per label, where it may sit: 1 on root arcs (seen
    on a word with head 0), 2 on other arcs, 3 both. UD gives ``root`` 1 and every other label
    2. A treebank without any label of a kind (only one-word sentences) allows every label
    there."""
    seen: dict[str, int] = {}
    for hs, rs in zip(heads, rels, strict=True):
        for h, r in zip(hs, rs, strict=True):
            seen[r] = seen.get(r, 0) | (1 if h == 0 else 2)
    labels = sorted(seen)
    arcs = [seen[r] for r in labels]
    for bit in (1, 2):
        if not any(a & bit for a in arcs):
            arcs = [a | bit for a in arcs]
    return labels, arcs


def universal_deprel(deprel: str) -> str:
    """The universal part of a DEPREL: what comes before the first ':' (``nmod:poss`` →
    ``nmod``), the relation the CoNLL 2018 evaluator compares."""
    return deprel.split(":", 1)[0]


def label_groups(labels: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Per label its universal-DEPREL group id (int32) and the groups' index (universal DEPREL
    → id, in order of first appearance in ``labels``)."""
    index: dict[str, int] = {}
    ids = [index.setdefault(universal_deprel(r), len(index)) for r in labels]
    return np.asarray(ids, np.int32), index


def pos_maps(words: list[list[str]], tags: list[list[str]], second: list[list[str]]
             ) -> tuple[dict[str, str], dict[str, str]]:
    """(POS → second POS, second POS → POS) learnt from a corpus with both columns, for
    :func:`fill_pos`. Each maps a tag t to the tag of the other column seen most often with it
    and, under the key ``word + "\t" + t`` (the word lower-cased), a word whose own most
    frequent tag of the other column differs from that (``is``/VBZ → AUX where VBZ → VERB):
    only those exceptions are kept. Ties go to the tag first in sorted order, so the maps
    depend on the counts only."""
    counts: dict[tuple[str, str, str], int] = {}
    for ws, ps, qs in zip(words, tags, second, strict=True):
        for w, p, q in zip(ws, ps, qs, strict=True):
            key = (w.lower(), p, q)
            counts[key] = counts.get(key, 0) + 1

    def most(pairs: dict[tuple[str, str], int]) -> dict[str, str]:
        best: dict[str, tuple[int, str]] = {}
        for (a, b), k in pairs.items():
            old = best.get(a)
            if old is None or k > old[0] or (k == old[0] and b < old[1]):
                best[a] = (k, b)
        return {a: b for a, (_, b) in best.items()}

    def one_way(t: int) -> dict[str, str]:
        by_tag: dict[tuple[str, str], int] = {}
        by_word: dict[tuple[str, str], int] = {}
        for wpq, k in counts.items():
            a, b = wpq[1 + t], wpq[2 - t]
            by_tag[a, b] = by_tag.get((a, b), 0) + k
            by_word[f"{wpq[0]}\t{a}", b] = k
        tag_map = most(by_tag)
        word_map = {key: b for key, b in most(by_word).items()
                    if b != tag_map[key.rsplit("\t", 1)[1]]}
        return dict(sorted({**tag_map, **word_map}.items()))

    return one_way(0), one_way(1)


def fill_pos(words: list[list[str]], given: list[list[str]], pos_map: dict[str, str]
             ) -> list[list[str]]:
    """The other POS column of sentences whose column ``given`` is known, through a map of
    :func:`pos_maps`: per word the tag its (lower-cased) form and given tag map to, else the one
    its given tag maps to, else ``_`` (a tag never seen in training)."""
    out = []
    for ws, ps in zip(words, given, strict=True):
        out.append([pos_map.get(f"{w.lower()}\t{p}") or pos_map.get(p, "_")
                    for w, p in zip(ws, ps, strict=True)])
    return out


def _dep_format(path: str, options: DataOptions) -> str:
    fmt = options.format or "auto"
    if fmt == "auto":
        name = str(path).lower()
        name = name[:-3] if name.endswith(".gz") else name
        return "conllu" if name.endswith(".conllu") or name == "-" else "conllx"
    if fmt not in DEP_FORMATS:
        raise OptionError(f"--task dependency reads --format conllu or conllx, not {fmt}")
    return fmt


class DependencySpec(TaskSpec):
    """First-order labelled dependency parsing of CoNLL-U / CoNLL-X files (HEAD and DEPREL,
    one root word per sentence), scored by UAS and LAS (as the CoNLL 2018 evaluator) and LAS
    with subtypes."""

    name = "dependency"
    help = ("first-order labelled dependency parsing (CoNLL-U / CoNLL-X HEAD and DEPREL), "
            "scored by UAS and LAS")
    max_sentence_length = 1000  # O(n^3) parsing: measured CPU time, EWT-dev model, see length_cost
    length_cost = "dependency parsing costs O(n^3): about 5-15 s of CPU for 1,000 words, 8x " \
                  "that for 2,000"
    estimator = "demidcd.estimators.dependency:DependencyParser"

    def make_estimator(self, options: DataOptions, common: dict[str, Any]) -> Any:
        return self.estimator_class()(decoder=options.decoder, hashing=options.hashing,
                                      **common)

    def data_options(self, est: Any, options: DataOptions) -> dict[str, Any]:
        return {"pos_column": options.pos_column or "upos"}

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        """The model's ``--pos-column`` when none is given; ``--decoder`` set on ``est``;
        ``derived``: ``second_pos`` (whether the model reads both POS columns) and
        ``fill_pos`` (whether it learnt to fill an empty one from the other)."""
        opts = getattr(est, "data_options_", {}) or {}
        if options.decoder:
            est.decoder = options.decoder
        derived = {**options.derived, "second_pos": est.second_pos_,
                   "fill_pos": getattr(est, "pos_by_second_", None) is not None}
        pos_column = opts.get("pos_column", "upos") if options.pos_column is None \
            else options.pos_column
        return replace(options, pos_column=pos_column, derived=MappingProxyType(derived))

    def read(self, path: str, options: DataOptions, labelled: bool = True) -> DepCorpus:
        """The file; for a model trained on both POS columns that learnt the map between them
        (``derived["fill_pos"]``), one column may be ``_`` for every word: the estimator fills
        it from the other (:meth:`~demidcd.estimators.dependency.DependencyParser._fill_pos`).
        ``derived["second_pos"]``: read the second POS column (True: it must be filled),
        never (False) or when it is filled throughout the file (None)."""
        fill = bool(options.derived.get("fill_pos", False))
        data = read_dependency(path, _dep_format(path, options), options.pos_column or "upos",
                               encoding=options.encoding, labelled=labelled,
                               max_sentence_length=options.max_sentence_length,
                               missing_pos=fill)
        second = options.derived.get("second_pos")
        if second is False:
            data.other_pos = None
        elif second and data.other_pos is None:
            if not fill:
                raise InputError(path, None, "the model was trained with both POS columns "
                                             "(UPOS and XPOS) but this file leaves the second "
                                             "one empty")
            data.other_pos = [["_"] * len(w) for w in data.words]
        return data

    def xy(self, data: DepCorpus) -> tuple[list[Sentence], list[Heads] | None]:
        if data.other_pos is not None:
            X = [list(zip(w, p, o, strict=True))
                 for w, p, o in zip(data.words, data.pos, data.other_pos, strict=True)]
        else:
            X = [list(zip(w, p, strict=True)) for w, p in zip(data.words, data.pos, strict=True)]
        if not data.labelled:
            return X, None
        if not data.has_deprels:  # DEPREL all "_": an unlabelled treebank
            return X, data.heads
        return X, [list(zip(h, r, strict=True))
                   for h, r in zip(data.heads, data.deprels, strict=True)]

    def describe(self, data: DepCorpus) -> str:
        two = "both POS columns" if data.other_pos is not None else "one POS column"
        return f"{len(data):,} sentences, {data.n_tokens:,} words, {two}"

    def check(self, est: Any, data: DepCorpus) -> list[str]:
        Y = self.xy(data)[1]
        unknown = est.unknown_labels(Y) if Y else {}
        if not unknown:
            return []
        top = ", ".join(sorted(unknown, key=unknown.get, reverse=True)[:5])
        return [f"{sum(unknown.values()):,} words carry DEPRELs the model never saw "
                f"in training ({top}): they count as label errors in LAS with subtypes, and "
                "in LAS when the model knows no DEPREL with the same part before ':'"]

    def report(self, est: Any, data: DepCorpus, prefix: str = "") -> list[str]:
        m = est.metrics(*self.xy(data))
        words = (f"({int(m['words_no_punct']):,} of {int(m['words']):,} words, "
                 f"{len(data):,} sentences)")
        lines = [f"{prefix}UAS: {100 * m['uas']:.2f}",
                 f"{prefix}UAS without punctuation: {100 * m['uas_no_punct']:.2f} {words}"]
        if "las" in m:
            lines += [f"{prefix}LAS: {100 * m['las']:.2f} (universal DEPREL, the part before "
                      "':', as the CoNLL 2018 evaluator)",
                      f"{prefix}LAS without punctuation: {100 * m['las_no_punct']:.2f} {words}",
                      f"{prefix}LAS with subtypes: {100 * m['las_subtypes']:.2f} (the full "
                      "DEPREL)",
                      f"{prefix}LAS with subtypes without punctuation: "
                      f"{100 * m['las_subtypes_no_punct']:.2f} {words}"]
        return lines

    def given(self, est: Any, data: DepCorpus) -> list[list[Any]]:
        """``predict --force``: per word of ``data`` its given head, with its DEPREL when the
        model knows it ((head, DEPREL)), or None: HEAD (column 7) holding an integer in 0..n
        other than the word's own id is kept; ``_``, ``?`` or anything else is free (and so is
        the DEPREL of a word with a free head)."""
        known = set(getattr(est, "labels_", None) or ())
        fixed: list[list[Any]] = []
        for s, words in enumerate(data.words):
            n = len(words)
            rows = [f for f in data.raw[s] if len(f) == 10 and f[0].isdigit() and
                    f[0].isascii()] if data.raw is not None else []
            out: list[Any] = []
            for d, f in enumerate(rows, 1):
                h, r = f[6], f[7]
                if not (h.isdigit() and h.isascii()) or int(h) > n or int(h) == d:
                    out.append(None)
                else:
                    out.append((int(h), r) if r in known else (int(h), None))
            fixed.append(out if len(out) == n else [None] * n)
        return fixed

    def predict(self, est: Any, data: DepCorpus, options: DataOptions,
                output: OutputOptions) -> Any:
        """``est.predict`` of ``data``; with ``--force`` the given heads (:meth:`given`) are
        kept: given heads that no tree keeps are an error naming the file and the sentence's
        first line, and a sentence whose given heads no projective tree keeps (Eisner) is
        decoded with Chu-Liu-Edmonds, with one warning line naming the first such sentence."""
        X = self.xy(data)[0]
        if not output.force:
            return est.predict(X)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trees = est.predict(X, fixed=self.given(est, data))
        except FixedHeadsError as e:
            raise InputError(data.path, data.lines[e.sentence],
                             f"--force: no tree keeps the given heads of the sentence starting "
                             f"on this line: {e.reason}") from None
        for w in caught:
            if not isinstance(w.message, ProjectiveFallback):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
                continue
            first, k = w.message.sentences[0], len(w.message.sentences)
            warnings.warn(InputWarning(
                f"{data.path}:{data.lines[first]}: --force: no projective tree keeps the given "
                "heads of the sentence starting on this line" +
                (f" nor those of {k - 1:,} more" if k > 1 else "") +
                ": decoded with Chu-Liu-Edmonds (non-projective)"), stacklevel=2)
        return trees

    def write(self, path: str, data: DepCorpus, predicted: Any, options: DataOptions) -> None:
        labelled = any(bool(t) and isinstance(t[0], tuple) for t in predicted)
        heads = [[h for h, _ in t] for t in predicted] if labelled else predicted
        rels = [[r for _, r in t] for t in predicted] if labelled else None
        write_dependency(path, data, heads, rels, encoding=options.encoding)


SPEC = DependencySpec()
