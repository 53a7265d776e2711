"""Sentences of a treebank as flat numeric arrays for the dependency kernels.

A corpus of sentences x = (x_0 = ROOT, x_1 … x_n) becomes one array per attribute over all
positions, sentence s owning positions tok_ptr[s]:tok_ptr[s+1] (ROOT first). Each string
attribute (lower-cased form, its 5-character prefix, POS, second POS) is hashed with
``zlib.crc32`` of the attribute kind and the string, so the hashes are stable across processes
and model files; the feature templates (:mod:`.features`) combine these hashes into feature ids.

A word is punctuation when every character of its form is Unicode punctuation (general
category P*): the convention of the CoNLL-X shared-task scorer ``eval.pl``; it needs no POS
tag set, so it is the same for UPOS, XPOS and CoNLL-X columns.
"""

from __future__ import annotations

import unicodedata
import zlib
from dataclasses import dataclass

import numpy as np


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
    (see :func:`.spec.label_groups`; −1 at ROOT and where the parser knows no label of the group;
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
