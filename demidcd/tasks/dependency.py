"""First-order arc-factored unlabeled dependency parsing as a :class:`Task`.

A sentence of n words is x = (x_0 = ROOT, x_1 … x_n); a structure is a head vector y with
y_d ∈ {0..n} \\ {d} for d = 1..n forming a tree rooted at 0 (the root may have several
children). The score factors over arcs (McDonald, Crammer & Pereira 2005):

    w·Φ(x, y) = Σ_{d=1..n} s(y_d, d),   s(h, d) = Σ_{f ∈ F(x, h, d)} w[f].

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

Δ(y_i, y) = #{d : y_d ≠ y_{i,d}} (Hamming distance on heads). Loss-augmented inference
(DEMI-DCD Eq. 5) adds 1 to every non-gold arc score and decodes with Eisner's algorithm
(projective trees, O(n³)) or Chu-Liu-Edmonds (all trees, O(n³) here). A record holds
φ = Φ(x, y_i) − Φ(x, y) (only the words with a wrong head contribute: +F(y_{i,d}, d) − F(y_d, d))
with sorted unique indices, Δ, w·φ and an FNV-1a hash of y.

Metric: unlabeled attachment score UAS = #{d : y_d = y_{i,d}} / #words, with and without
punctuation. A word is punctuation when every character of its form is Unicode punctuation
(general category P*): the convention of the CoNLL-X shared-task scorer ``eval.pl``; it needs
no POS tag set, so it is the same for UPOS, XPOS and CoNLL-X columns.
"""

from __future__ import annotations

import os
import unicodedata
import zlib
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np

from ..api import StructuredEstimator, _check_sentences, estimator_init, param
from ..errors import InputError, ModelFileError, OptionError
from ..io.dependency import (
    DEP_FORMATS,
    POS_COLUMNS,
    DepCorpus,
    read_dependency,
    write_dependency,
)
from ..io.model import load_model, save_model
from . import Option, TaskSpec
from .base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from .sequence import _merge, _sort_keys

TEMPLATE_VERSION = 1
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
    unlabeled); punct: bool per position (True = punctuation, ROOT False).
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
                 cpos: list[list[str]] | None = None) -> EncodedTrees:
    """Encode sentences: word and POS lists, heads of words 1..n (0 = root) or None, and
    optionally a second, coarse POS per word (CoNLL-U UPOS next to XPOS) for extra features."""
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
    return EncodedTrees(tok_ptr, W, P5, PT, PK, n_pos, CT, CK, len(ccache), H, PU)


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


@nb.njit(cache=True, nogil=True)
def _arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, out):
    """Feature ids of arc h → d (positions within the sentence starting at ``a``, N = n + 1)
    into ``out``; returns their number. ``stamp`` (int64[n_pos]) and the unique ``mark`` dedupe
    the between-POS features."""
    dist = h - d if h > d else d - h
    b = dist if dist <= 5 else (6 if dist <= 10 else 7)
    dd = b + (7 if h < d else 0)
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


@nb.njit(cache=True, nogil=True)
def _score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf, S):
    """S[h·N + d] = s(h, d) for all h ≠ d, d ≥ 1; impossible arcs (into ROOT, self) get −1e300.
    Returns the next unused ``mark``."""
    for h in range(N):
        S[h * N] = _NEG
        S[h * N + h] = _NEG
    for h in range(N):
        for d in range(1, N):
            if h == d:
                continue
            m = _arc_features(h, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            s = 0.0
            for q in range(m):
                s += w[fbuf[q]]
            S[h * N + d] = s
    return mark


# ---------------------------------------------------------------------------------------------
# decoders (numba): S is a flat N×N arc-score matrix S[h·N + d]; heads[0] = −1
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def eisner(S, N, heads):
    """Highest-scoring projective tree rooted at 0 (Eisner 1996), O(N³); writes heads[0:N]
    (heads[0] = −1) and returns its score Σ_d S[heads[d]·N + d].

    Spans [s, t]: complete C[s,t,r] (r = 1: headed at s, r = 0: at t), incomplete I[s,t,r]
    (the arc s → t when r = 1, t → s when r = 0). Ties go to the smallest split point.
    """
    NN = N * N
    C0 = np.zeros(NN)
    C1 = np.zeros(NN)
    I0 = np.zeros(NN)
    I1 = np.zeros(NN)
    bI = np.zeros(NN, np.int32)
    bC0 = np.zeros(NN, np.int32)
    bC1 = np.zeros(NN, np.int32)
    for k in range(1, N):
        for s in range(0, N - k):
            t = s + k
            best = -np.inf
            arg = s
            for r in range(s, t):
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
    stack = np.empty((3 * N + 3, 3), np.int64)
    top = 0
    stack[0, 0] = 0
    stack[0, 1] = N - 1
    stack[0, 2] = 1
    top = 1
    while top > 0:
        top -= 1
        s = stack[top, 0]
        t = stack[top, 1]
        kind = stack[top, 2]
        if s == t:
            continue
        if kind == 0:
            r = bC0[s * N + t]
            stack[top, 0], stack[top, 1], stack[top, 2] = s, r, 0
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = r, t, 2
            top += 2
        elif kind == 1:
            r = bC1[s * N + t]
            stack[top, 0], stack[top, 1], stack[top, 2] = s, r, 3
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = r, t, 1
            top += 2
        else:
            r = bI[s * N + t]
            if kind == 2:
                heads[s] = t
            else:
                heads[t] = s
            stack[top, 0], stack[top, 1], stack[top, 2] = s, r, 1
            stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2] = r + 1, t, 0
            top += 2
    total = 0.0
    for d in range(1, N):
        total += S[heads[d] * N + d]
    return total


@nb.njit(cache=True, nogil=True)
def chu_liu_edmonds(S, N, heads):
    """Maximum spanning arborescence rooted at 0 (Chu & Liu 1965, Edmonds 1967), O(N³);
    writes heads[0:N] (heads[0] = −1) and returns its score.

    Greedy best head per node; while the heads contain a cycle C, contract it into a new node c
    with in-scores s(u, c) = max_{v∈C} s(u, v) − s(head(v), v) and out-scores
    s(c, u) = max_{v∈C} s(v, u), remembering the maximisers; then expand the contractions in
    reverse order (the node of C entered from outside takes that head, the rest keep their cycle
    heads). Nodes are ids 0..2N−1 (new nodes appended).
    """
    M = 2 * N
    W = np.full((M, M), -np.inf)
    for h in range(N):
        for d in range(1, N):
            if h != d:
                W[h, d] = S[h * N + d]
    alive = np.zeros(M, np.bool_)
    alive[:N] = True
    head = np.full(M, -1, np.int64)
    enter = np.full((N, M), -1, np.int64)
    leave = np.full((N, M), -1, np.int64)
    cnode = np.zeros(N, np.int64)
    mem = np.zeros(M, np.int64)
    mem_ptr = np.zeros(N + 1, np.int64)
    mhead = np.zeros(M, np.int64)
    incyc = np.zeros(M, np.bool_)
    color = np.zeros(M, np.int64)
    nn = N
    nc = 0
    while True:
        for v in range(1, nn):
            if not alive[v]:
                continue
            best = -np.inf
            arg = -1
            for u in range(nn):
                if alive[u] and u != v and W[u, v] > best:
                    best = W[u, v]
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
                vi = W[u, v] - W[head[v], v]
                if vi > bi:
                    bi = vi
                    ai = v
                vo = W[v, u]
                if vo > bo:
                    bo = vo
                    ao = v
            W[u, c] = bi
            enter[nc, u] = ai
            W[c, u] = bo
            leave[nc, u] = ao
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
                head[u] = leave[k, u]
        h = head[c]
        head[enter[k, h]] = h
        for q in range(mem_ptr[k], mem_ptr[k + 1]):
            incyc[mem[q]] = False
    heads[0] = -1
    total = 0.0
    for d in range(1, N):
        heads[d] = head[d]
        total += S[head[d] * N + d]
    return total


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
def parse_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, gold, examples,
                 augment, decoder):
    """Heads of every example, flat: example e's positions 0..n at out_ptr[e]:out_ptr[e+1]
    (ROOT's entry −1). ``augment``: argmax of w·Φ + Δ (1 added to every non-gold arc)."""
    n_ex = examples.shape[0]
    out_ptr = np.zeros(n_ex + 1, np.int64)
    for e in range(n_ex):
        i = examples[e]
        out_ptr[e + 1] = out_ptr[e] + tok_ptr[i + 1] - tok_ptr[i]
    out = np.empty(out_ptr[n_ex], np.int32)
    maxN = _max_len(tok_ptr, examples)
    S = np.empty(maxN * maxN)
    fbuf = np.empty(_max_features(maxN), np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    mark = np.int64(0)
    for e in range(n_ex):
        i = examples[e]
        a = tok_ptr[i]
        N = tok_ptr[i + 1] - a
        mark = _score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf, S)
        if augment:
            for d in range(1, N):
                g = gold[a + d]
                for h in range(N):
                    if h != g and h != d:
                        S[h * N + d] += 1.0
        y = out[out_ptr[e]:out_ptr[e + 1]]
        if decoder == _EISNER:
            eisner(S, N, y)
        else:
            chu_liu_edmonds(S, N, y)
    return out, out_ptr


@nb.njit(cache=True, nogil=True)
def _key_bits(D):
    nbits = 1
    while (np.int64(1) << nbits) <= 2 * D + 1:
        nbits += 1
    return nbits


@nb.njit(cache=True, nogil=True)
def records_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, gold, examples,
                   heads, hptr, keep_all):
    """Records (i, FNV hash, Δ, w·φ, φ CSR) of the head vectors ``heads`` (flat, as returned by
    :func:`parse_kernel`), for the examples where Δ > 0 (all of them with ``keep_all``)."""
    n_ex = examples.shape[0]
    maxN = _max_len(tok_ptr, examples)
    fbuf = np.empty(_max_features(maxN), np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    mark = np.int64(0)
    nbits = _key_bits(D)
    r_ex = np.empty(n_ex, np.int64)
    r_hash = np.empty(n_ex, np.uint64)
    r_delta = np.empty(n_ex, np.float64)
    r_margin = np.empty(n_ex, np.float64)
    r_ptr = np.zeros(n_ex + 1, np.int64)
    kcap = 2 * maxN * _max_features(maxN)
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
        m = 0
        ham = 0
        h_ = _FNV_OFFSET
        for d in range(1, N):
            h_ = (h_ ^ _U(y[d])) * _FNV_PRIME
            g = gold[a + d]
            p = y[d]
            if g == p:
                continue
            ham += 1
            c = _arc_features(g, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            for q in range(c):
                keys[m] = 2 * fbuf[q] + 1
                m += 1
            c = _arc_features(p, d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, mark, fbuf)
            mark += 1
            for q in range(c):
                keys[m] = 2 * fbuf[q]
                m += 1
        if ham == 0 and not keep_all:
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
        ks = _sort_keys(keys, tmp, counts, m, nbits)
        pos_, margin = _merge(ks, m, w, out_idx, out_val, pos_)
        r_ex[nrec] = i
        r_hash[nrec] = h_
        r_delta[nrec] = ham
        r_margin[nrec] = margin
        nrec += 1
        r_ptr[nrec] = pos_
    return (r_ex[:nrec].copy(), r_hash[:nrec].copy(), r_delta[:nrec].copy(),
            r_margin[:nrec].copy(), r_ptr[:nrec + 1].copy(), out_idx[:pos_].copy(),
            out_val[:pos_].copy())


@nb.njit(cache=True, nogil=True)
def score_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, i, y):
    """w·Φ(x_i, y) = Σ_d s(y_d, d) for one head vector y (positions 0..n, y[0] ignored)."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    fbuf = np.empty(_max_features(N), np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    total = 0.0
    for d in range(1, N):
        c = _arc_features(y[d], d, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, d, fbuf)
        for q in range(c):
            total += w[fbuf[q]]
    return total


@nb.njit(cache=True, nogil=True)
def arc_scores_kernel(w, D, tok_ptr, word, pre, pos, posk, cpos, cposk, n_pos, i):
    """The flat N×N arc-score matrix of example i (−1e300 for impossible arcs)."""
    a = tok_ptr[i]
    N = tok_ptr[i + 1] - a
    S = np.empty(N * N)
    fbuf = np.empty(_max_features(N), np.int64)
    stamp = np.full(max(n_pos, 1), -1, np.int64)
    _score_arcs(w, a, N, word, pre, pos, posk, cpos, cposk, D, stamp, np.int64(0), fbuf, S)
    return S


# ---------------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------------
class DependencyTask(Task):
    """First-order unlabeled dependency parsing over :class:`EncodedTrees`, w of length D.

    ``decoder``: ``"eisner"`` (projective) or ``"cle"`` (non-projective). Structures (decode,
    gold) are int32 arrays of the heads of words 1..n.
    """

    name = "dependency"

    def __init__(self, enc: EncodedTrees, hashing: int = DEFAULT_HASHING,
                 decoder: str = "eisner"):
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder!r}; use eisner or cle")
        if not 16 <= int(hashing) < 2**31 or int(hashing) % 16:
            raise ValueError("hashing must be a multiple of 16 in [16, 2**31)")
        self.enc = enc
        self.D = int(hashing)
        self.decoder = decoder
        self._dec = _EISNER if decoder == "eisner" else _CLE
        self._gold = enc.heads if enc.heads is not None else np.zeros(0, np.int32)

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
        e = self.enc
        return (e.tok_ptr, e.word, e.pre, e.pos, e.posk, e.cpos, e.cposk, e.n_pos + e.n_cpos)

    def _need_gold(self) -> np.ndarray:
        if self.enc.heads is None:
            raise ValueError("this data set has no gold heads")
        return self.enc.heads

    @staticmethod
    def _examples(examples: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(examples, np.int64).reshape(-1)

    def _y(self, i: int, y: Any) -> np.ndarray:
        """Head vector of words 1..n → positions 0..n (y[0] = −1), validated."""
        n = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i]) - 1
        y = np.asarray(y, np.int64).reshape(-1)
        if y.shape[0] != n:
            raise ValueError(f"example {i} has {n} words, got {y.shape[0]} heads")
        if n and (y.min() < 0 or y.max() > n or np.any(y == np.arange(1, n + 1))):
            raise ValueError(f"heads must lie in 0..{n}, none its own")
        return np.concatenate([[-1], y]).astype(np.int32)

    # -- inference ------------------------------------------------------------------------
    def parse(self, w: np.ndarray, examples: np.ndarray, augment: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
        """(flat int32 heads with ROOT entries, int64 ptr) of the (loss-augmented) argmax."""
        gold = self._need_gold() if augment else self._gold
        return parse_kernel(self._w(w, True), self.D, *self._arrays(), gold,
                            self._examples(examples), bool(augment), self._dec)

    def _records(self, w: np.ndarray, examples: np.ndarray, augment: bool) -> RecordBatch:
        examples = self._examples(examples)
        if examples.shape[0] == 0:
            return RecordBatch.empty()
        gold = self._need_gold()
        w = self._w(w, True)
        heads, hptr = parse_kernel(w, self.D, *self._arrays(), gold, examples, augment,
                                   self._dec)
        ex, h, delta, margin, ptr, idx, val = records_kernel(
            w, self.D, *self._arrays(), gold, examples, heads, hptr, False)
        return RecordBatch(ex, h.view(np.int64), delta, margin, ptr,
                           idx.astype(INDEX_DTYPE, copy=False), val.astype(VALUE_DTYPE, copy=False))

    def loss_augmented(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + Δ(y_i, y) per example; one record per example with Δ > 0."""
        return self._records(w, examples, True)

    def argmax_records(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Records of the plain argmax for the examples it gets wrong (structured perceptron)."""
        return self._records(w, examples, False)

    def decode(self, w: np.ndarray, examples: np.ndarray) -> list[np.ndarray]:
        """argmax_y w·Φ(x_i, y): the int32 heads of words 1..n per example."""
        heads, ptr = self.parse(w, examples, False)
        return [heads[ptr[e] + 1:ptr[e + 1]] for e in range(ptr.shape[0] - 1)]

    def gold(self, examples: np.ndarray) -> list[np.ndarray]:
        H = self._need_gold()
        tp = self.enc.tok_ptr
        return [H[tp[i] + 1:tp[i + 1]] for i in self._examples(examples)]

    def metric(self, gold: list[Any], predicted: list[Any],
               examples: np.ndarray | None = None) -> dict[str, float]:
        """UAS = correct heads / words, with punctuation (``score``, ``uas``) and without
        (``uas_no_punct``); ``examples`` (default: all, in order) says which sentences the lists
        hold, for the punctuation marks."""
        ex = np.arange(self.n_examples) if examples is None else self._examples(examples)
        if len(gold) != len(predicted) or len(gold) != ex.shape[0]:
            raise ValueError("gold, predicted and examples differ in number of sentences")
        tp, pu = self.enc.tok_ptr, self.enc.punct
        n = c = n_np = c_np = 0
        for i, g, p in zip(ex, gold, predicted, strict=True):
            g = np.asarray(g)
            p = np.asarray(p)
            mask = pu[tp[i] + 1:tp[i + 1]]
            if g.shape != p.shape or g.shape != mask.shape:
                raise ValueError(f"sentence {i}: gold and predicted differ in length")
            ok = g == p
            n += g.shape[0]
            c += int(ok.sum())
            n_np += int((~mask).sum())
            c_np += int((ok & ~mask).sum())
        uas = c / n if n else 0.0
        uas_np = c_np / n_np if n_np else 0.0
        return {"score": uas, "uas": uas, "uas_no_punct": uas_np, "words": float(n),
                "words_no_punct": float(n_np)}

    # -- records --------------------------------------------------------------------------
    def phi_delta(self, i: int, y: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) (sorted unique, no zeros) and Hamming Δ."""
        i = int(i)
        yy = self._y(i, y)
        ex, _, delta, _, ptr, idx, val = records_kernel(
            np.zeros(0), self.D, *self._arrays(), self._need_gold(),
            np.array([i], np.int64), yy, np.array([0, yy.shape[0]], np.int64), True)
        return idx.astype(INDEX_DTYPE, copy=False), val, float(delta[0])

    def score(self, w: np.ndarray, i: int, y: Any) -> float:
        """w·Φ(x_i, y) = Σ_d s(y_d, d)."""
        i = int(i)
        return float(score_kernel(self._w(w), self.D, *self._arrays(), i, self._y(i, y)))

    def arc_scores(self, w: np.ndarray, i: int) -> np.ndarray:
        """The (n+1)×(n+1) matrix s(h, d) of example i (−1e300 for arcs into ROOT and loops)."""
        i = int(i)
        N = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i])
        return arc_scores_kernel(self._w(w), self.D, *self._arrays(), i).reshape(N, N)

    @staticmethod
    def hash_heads(y: np.ndarray) -> int:
        """The record hash of a head vector of words 1..n (FNV-1a, as a signed int64)."""
        h = int(_FNV_OFFSET)
        for v in np.asarray(y, np.int64).reshape(-1):
            h = ((h ^ int(v)) * int(_FNV_PRIME)) & (2**64 - 1)
        return int(np.array([h], np.uint64).view(np.int64)[0])


# ---------------------------------------------------------------------------------------------
# the estimator
# ---------------------------------------------------------------------------------------------
Sentence = list  # a sentence: a list of (word, POS) pairs


def _split(X: list[Sentence]) -> tuple[list[list[str]], list[list[str]], list[list[str]] | None]:
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


class DependencyParser(StructuredEstimator):
    """First-order arc-factored dependency parser trained as a structural SVM (L2 loss, Eq. 1).

    X is a list of sentences, each a list of (word, POS) pairs or (word, POS, second POS)
    triples (e.g. XPOS and UPOS: the second POS feeds a second set of POS templates); Y a list
    of head lists (head of word k+1 at index k, 0 = root). Extra hyper-parameters: ``decoder``
    (``eisner``: projective, ``cle``: non-projective Chu-Liu-Edmonds; used in training and
    prediction) and ``hashing`` (D, the number of hashed features = len(w)). Fitted: ``coef_``,
    ``second_pos_``, ``result_``. :meth:`score` is UAS (punctuation included); :meth:`metrics`
    adds UAS without punctuation.
    """

    task_name = "dependency"
    score_name = "UAS"
    _task_params = ("decoder", "hashing")
    _task_defaults = {"decoder": "eisner", "hashing": DEFAULT_HASHING}

    __init__ = estimator_init(param("decoder", str | None), param("hashing", int | None))

    def _decoder(self) -> str:
        return self.decoder or "eisner"

    def _hashing(self) -> int:
        return DEFAULT_HASHING if self.hashing is None else self.hashing

    def _check(self) -> None:
        if self._decoder() not in DECODERS:
            raise OptionError(f"unknown --decoder {self.decoder!r}; use eisner or cle")
        h = self._hashing()
        if isinstance(h, bool) or not isinstance(h, int | np.integer) or not 16 <= h < 2**31 \
                or h % 16:
            raise OptionError(f"--hashing must be a multiple of 16 in [16, 2**31) for the "
                              f"dependency task, got {self.hashing!r}")

    def _task(self, X: list[Sentence], Y: list[list[int]] | None) -> DependencyTask:
        words, tags, coarse = _split(X)
        fitted = getattr(self, "second_pos_", None)
        if fitted is not None and fitted != (coarse is not None):
            raise OptionError("the model was trained with " + ("two POS columns (word, POS, "
                              "second POS)" if fitted else "one POS column (word, POS)") +
                              " per token; give the data the same way")
        if Y is not None and len(Y) != len(X):
            raise OptionError(f"X has {len(X)} sentences but Y has {len(Y)}")
        try:
            enc = encode_trees(words, tags, Y, coarse)
        except ValueError as e:
            raise OptionError(str(e)) from None
        return DependencyTask(enc, int(self._hashing()), self._decoder())

    def fit(self, X: list[Sentence], Y: list[list[int]], X_dev: list[Sentence] | None = None,
            Y_dev: list[list[int]] | None = None) -> DependencyParser:
        """Learn w from sentences X with gold heads Y (optional dev set for the log)."""
        self._check()
        _check_sentences(X)
        if not X:
            raise OptionError("cannot fit on an empty data set")
        self.solver_config(), self._learner()  # bad options fail before any work
        for attr in ("coef_", "result_"):  # a new fit forgets the old model
            self.__dict__.pop(attr, None)
        self.second_pos_ = None
        task = self._task(X, Y)
        self.second_pos_ = task.enc.cpos.shape[0] > 0
        dev_eval = None
        if X_dev is not None and Y_dev is not None:
            dtask = self._task(X_dev, Y_dev)
            ex = np.arange(dtask.n_examples)
            gold = dtask.gold(ex)

            def dev_eval(w: np.ndarray) -> dict:
                return dtask.metric(gold, dtask.decode(w, ex), ex)

        self._train(task, dev_eval)
        return self

    def predict(self, X: list[Sentence]) -> list[list[int]]:
        """The argmax tree of each sentence: heads of words 1..n (0 = root)."""
        self._check_fitted()
        self._check()
        if not _check_sentences(X):
            return []
        task = self._task(X, None)
        return [h.tolist() for h in task.decode(self.coef_, np.arange(len(X)))]

    def metrics(self, X: list[Sentence], Y: list[list[int]]) -> dict[str, float]:
        """UAS with punctuation (``score``, ``uas``) and without (``uas_no_punct``)."""
        self._check_fitted()
        self._check()
        _check_sentences(X)
        task = self._task(X, Y)
        ex = np.arange(task.n_examples)
        return task.metric(task.gold(ex), task.decode(self.coef_, ex))

    def score(self, X: list[Sentence], Y: list[list[int]]) -> float:
        """UAS (punctuation included) of :meth:`predict` against Y."""
        return float(self.metrics(X, Y)["score"])

    def training_task(self, X: list[Sentence], Y: list[list[int]]) -> DependencyTask:
        """The bound task for X, Y (for objectives)."""
        return self._task(X, Y)

    def feature_summary(self) -> str:
        dim = self.coef_.shape[0]
        return (f"hashed arc features (McDonald et al. 2005 templates) into {dim:,} weights "
                f"({dim * 8 / 2**20:.1f} MiB float64), decoder {self._decoder()}")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model atomically (npz + JSON metadata, no pickle)."""
        meta = {**self._meta(),
                "featurizer": {"kind": "DependencyFeatures", "template_version": TEMPLATE_VERSION,
                               "hashing": int(self._hashing()),
                               "second_pos": bool(self.second_pos_)}}
        save_model(path, self.coef_, {}, meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DependencyParser:
        """Read a model written by :meth:`save` (``allow_pickle=False``)."""
        w, _, meta = load_model(path, task=cls.task_name)
        try:
            fm = meta["featurizer"]
            if fm.get("kind") != "DependencyFeatures":
                raise ValueError("not a dependency featurizer")
            if fm.get("template_version") != TEMPLATE_VERSION:
                raise ValueError(f"unsupported feature template version "
                                 f"{fm.get('template_version')}")
            hp = dict(meta.get("hyper_parameters", {}))
            hp["hashing"] = fm["hashing"]
            obj = cls(**hp)
            obj._check()
            obj.second_pos_ = fm["second_pos"]
            if not isinstance(obj.second_pos_, bool):
                raise ValueError("second_pos is not a boolean")
            obj.data_options_ = dict(meta.get("data_options") or {})
        except (KeyError, TypeError, ValueError, AttributeError, OptionError) as e:
            raise ModelFileError(str(path), f"corrupt model metadata ({e})") from None
        if w.shape[0] != obj.hashing:
            raise ModelFileError(str(path), "weight vector does not match the feature hashing")
        obj.coef_, obj.result_, obj.meta_ = w, None, meta
        return obj


# ---------------------------------------------------------------------------------------------
# the task's registry entry (CLI)
# ---------------------------------------------------------------------------------------------
def _dep_format(path: str, args: Any) -> str:
    fmt = getattr(args, "format", None) or "auto"
    if fmt == "auto":
        name = str(path).lower()
        name = name[:-3] if name.endswith(".gz") else name
        return "conllu" if name.endswith(".conllu") or name == "-" else "conllx"
    if fmt not in DEP_FORMATS:
        raise OptionError(f"--task dependency reads --format conllu or conllx, not {fmt}")
    return fmt


class DependencySpec(TaskSpec):
    """First-order unlabeled dependency parsing of CoNLL-U / CoNLL-X files, scored by UAS."""

    name = "dependency"
    help = "first-order unlabeled dependency parsing (CoNLL-U / CoNLL-X HEAD), scored by UAS"
    max_sentence_length = 1000  # O(n^3) parsing: measured CPU time, EWT-dev model, see length_cost
    length_cost = "dependency parsing costs O(n^3): about 5 s of CPU for 1,000 words, 40 s " \
                  "for 2,000"
    estimator = "demidcd.tasks.dependency:DependencyParser"
    options = (
        Option(("--decoder",),
               dict(choices=DECODERS, default=None,
                    help="dependency: eisner (projective trees, the default) or cle "
                         "(Chu-Liu-Edmonds, any tree), in training and inference; evaluate / "
                         "predict default to the model's")),
        Option(("--pos-column",),
               dict(choices=tuple(POS_COLUMNS), default=None,
                    help="dependency: the POS column, upos (CoNLL-X CPOSTAG, the default) or "
                         "xpos (CoNLL-X POSTAG); the other one, when filled, feeds a second set "
                         "of POS features; evaluate / predict default to the model's")),
    )
    def make_estimator(self, args: Any, common: dict[str, Any]) -> DependencyParser:
        return DependencyParser(decoder=getattr(args, "decoder", None),
                                hashing=getattr(args, "hashing", None), **common)

    def data_options(self, args: Any) -> dict[str, Any]:
        return {"pos_column": getattr(args, "pos_column", None) or "upos"}

    def configure(self, est: Any, args: Any) -> None:
        opts = getattr(est, "data_options_", {}) or {}
        if getattr(args, "pos_column", None) is None:
            args.pos_column = opts.get("pos_column", "upos")
        if getattr(args, "decoder", None):
            est.decoder = args.decoder
        args.second_pos = est.second_pos_

    def read(self, path: str, args: Any, labeled: bool = True) -> DepCorpus:
        data = read_dependency(path, _dep_format(path, args),
                               getattr(args, "pos_column", None) or "upos",
                               encoding=args.encoding, labeled=labeled,
                               max_sentence_length=args.max_sentence_length)
        second = getattr(args, "second_pos", None)
        if second is False:
            data.other_pos = None
        elif second and data.other_pos is None:
            raise InputError(path, None, "the model was trained with both POS columns (UPOS "
                                         "and XPOS) but this file leaves the second one empty")
        return data

    def xy(self, data: DepCorpus) -> tuple[list[Sentence], list[list[int]] | None]:
        if data.other_pos is not None:
            X = [list(zip(w, p, o, strict=True))
                 for w, p, o in zip(data.words, data.pos, data.other_pos, strict=True)]
        else:
            X = [list(zip(w, p, strict=True)) for w, p in zip(data.words, data.pos, strict=True)]
        return X, (data.heads if data.labeled else None)

    def describe(self, data: DepCorpus) -> str:
        two = "both POS columns" if data.other_pos is not None else "one POS column"
        return f"{len(data):,} sentences, {data.n_tokens:,} words, {two}"

    def report(self, est: Any, data: DepCorpus, prefix: str = "") -> list[str]:
        m = est.metrics(*self.xy(data))
        return [f"{prefix}UAS: {100 * m['uas']:.2f}",
                f"{prefix}UAS without punctuation: {100 * m['uas_no_punct']:.2f} "
                f"({int(m['words_no_punct']):,} of {int(m['words']):,} words, "
                f"{len(data):,} sentences)"]

    def write(self, path: str, data: DepCorpus, predicted: Any, args: Any) -> None:
        write_dependency(path, data, predicted, encoding=args.encoding)


SPEC = DependencySpec()
