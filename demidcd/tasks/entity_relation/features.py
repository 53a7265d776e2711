"""Features of the entity-relation task: strings per entity and per ordered entity pair, and
their integer ids.

An entity at token t is described by its words (a multi-word entity is one token with "/"
between its words), shape, affixes, POS and a ±2 token window; an ordered pair (a, b) by its two
entities' words, the words and POS between them, their order and a bucketed distance. The
featurizer keeps the strings seen at least ``min_count`` times in training, numbered in order of
first occurrence, separately for entities (Fe ids) and pairs (Fp ids); :class:`EncodedER` holds a
corpus as sorted id lists, the layout that the kernels of :mod:`.task` read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from demidcd.io.conll04 import ENTITY_LABELS, RELATION_LABELS, ERSentence
from demidcd.tasks.base import INDEX_DTYPE

_ENT_ID = {e: k for k, e in enumerate(ENTITY_LABELS)}
_REL_ID = {r: k for k, r in enumerate(RELATION_LABELS)}


def _shape(w: str) -> str:
    s = re.sub("[A-Z]", "X", w)
    s = re.sub("[a-z]", "x", s)
    s = re.sub("[0-9]", "d", s)
    return re.sub(r"(.)\1+", r"\1\1", s)


def _dist_bucket(d: int) -> str:
    for lim, name in ((1, "1"), (2, "2"), (3, "3"), (4, "4"), (6, "5-6"), (9, "7-9"),
                      (14, "10-14"), (24, "15-24")):
        if d <= lim:
            return name
    return "25+"


def entity_feature_strings(s: ERSentence, t: int) -> list[str]:
    """Feature strings of the entity at token t: words, shape, affixes, POS, ±2 context."""
    word, pos = s.words[t], s.pos[t]
    comps = word.split("/")
    lcomps = [c.lower() for c in comps]
    last, first = lcomps[-1], lcomps[0]
    f = ["b", "W=" + word, "w=" + word.lower(), "last=" + last, "first=" + first,
         "n=" + str(min(len(comps), 4)), "shape=" + _shape(word), "lshape=" + _shape(comps[-1]),
         "pos=" + pos, "lpos=" + pos.split("/")[-1]]
    f += ["cw=" + c for c in lcomps]
    f += ["cW=" + c for c in comps]
    f += ["cp=" + p for p in pos.split("/")]
    for k in (1, 2, 3, 4):
        if len(last) >= k:
            f.append(f"s{k}=" + last[-k:])
            f.append(f"p{k}=" + last[:k])
    if any(ch.isdigit() for ch in word):
        f.append("digit")
    if word.isupper():
        f.append("allcaps")
    if "-" in word:
        f.append("hyphen")
    n = len(s.words)
    ctx = {}
    for off in (-2, -1, 1, 2):
        u = t + off
        cw = s.words[u].lower() if 0 <= u < n else ("<s>" if u < 0 else "</s>")
        cp = s.pos[u] if 0 <= u < n else ("<s>" if u < 0 else "</s>")
        ctx[off] = (cw, cp)
        f.append(f"w{off}=" + cw)
        f.append(f"p{off}=" + cp)
    f.append("w-1w+1=" + ctx[-1][0] + "|" + ctx[1][0])
    f.append("p-1p+1=" + ctx[-1][1] + "|" + ctx[1][1])
    f.append("w-2w-1=" + ctx[-2][0] + "|" + ctx[-1][0])
    f.append("w+1w+2=" + ctx[1][0] + "|" + ctx[2][0])
    f.append("w-1|last=" + ctx[-1][0] + "|" + last)
    f.append("last|w+1=" + last + "|" + ctx[1][0])
    return f


def pair_feature_strings(s: ERSentence, ta: int, tb: int) -> list[str]:
    """Feature strings of the ordered entity pair at tokens (ta, tb): words, between, distance."""
    o = "F" if ta < tb else "B"  # a before b / after
    lo, hi = (ta, tb) if ta < tb else (tb, ta)
    wa, wb = s.words[ta].lower(), s.words[tb].lower()
    la, lb = wa.split("/")[-1], wb.split("/")[-1]
    d = _dist_bucket(hi - lo)
    btw = [s.words[u].lower() for u in range(lo + 1, hi)]
    btp = [s.pos[u] for u in range(lo + 1, hi)]
    n_ent_btw = sum(1 for u in range(lo + 1, hi) if s.tags[u] != "O")
    n = len(s.words)
    pre = s.words[lo - 1].lower() if lo > 0 else "<s>"
    post = s.words[hi + 1].lower() if hi + 1 < n else "</s>"
    f = ["B", "o=" + o, "d=" + d, "od=" + o + d, "aw=" + wa, "bw=" + wb, "al=" + la,
         "bl=" + lb, "oal=" + o + la, "obl=" + o + lb, "oalbl=" + o + la + "|" + lb,
         "ne=" + o + str(min(n_ent_btw, 3)), "pre=" + o + pre, "post=" + o + post]
    f += ["bw=" + o + x for x in btw]
    f += ["bp=" + o + x for x in btp]
    f += ["bwd=" + o + d + x for x in btw]
    if btw:
        f.append("bf=" + o + btw[0])
        f.append("bl=" + o + btw[-1])
        f.append("bfl=" + o + btw[0] + "|" + btw[-1])
    if len(btw) <= 4:
        f.append("bseq=" + o + " ".join(btw))
    if len(btp) <= 6:
        f.append("bpseq=" + o + " ".join(btp))
    return f


PAIR_STRINGS_PER_SECOND = 0.8e6  # pair feature strings counted and encoded per second (one
# core of the 2-core reference machine: 1.8 M/s counted, a little less encoded): the set-up
# estimate of :func:`pair_feature_count`


def pair_feature_count(sentences: Sequence[ERSentence]) -> tuple[int, int, int]:
    """(entity pairs, pair feature strings, most entities in a sentence) of ``sentences``:
    :func:`pair_feature_strings` makes 14 to 19 strings per ordered pair and 3 more per token
    between its entities, so a sentence of E entities over n tokens makes O(E² n) of them
    (600 entities: about 220 M, minutes of set-up), counted here in O(E²) numpy per sentence
    before any is built."""
    pairs = strings = most = 0
    for s in sentences:
        e = len(s.ent_tok)
        most = max(most, e)
        if e < 2:
            continue
        tok = np.asarray(s.ent_tok, np.int64)
        gaps = np.maximum(np.abs(tok[:, None] - tok[None, :]) - 1, 0)
        gaps = gaps[~np.eye(e, dtype=np.bool_)]  # the ordered pairs a ≠ b
        pairs += e * (e - 1)
        strings += int((14 + 3 * gaps + 3 * (gaps > 0) + (gaps <= 4) + (gaps <= 6)).sum())
    return pairs, strings, most


@dataclass
class EncodedER:
    """A corpus encoded as flat arrays (CSR-like).

    Sentence i owns entities ent_ptr[i]:ent_ptr[i+1] and pairs pair_ptr[i]:pair_ptr[i+1] (pair
    order of :func:`demidcd.io.conll04.pair_index`); entity j has features
    ef_idx[ef_ptr[j]:ef_ptr[j+1]], pair k has pf_idx[pf_ptr[k]:pf_ptr[k+1]] (sorted, unique).
    Gold labels are 0 where ``has_gold`` is False.
    """

    ent_ptr: np.ndarray  # int64[N+1]
    pair_ptr: np.ndarray  # int64[N+1]
    ef_ptr: np.ndarray  # int64[E+1]
    ef_idx: np.ndarray  # int32
    pf_ptr: np.ndarray  # int64[K+1]
    pf_idx: np.ndarray  # int32
    ent_gold: np.ndarray  # int64[E]
    pair_gold: np.ndarray  # int64[K]
    n_entity_features: int
    n_pair_features: int
    has_gold: bool = True

    @property
    def n_sentences(self) -> int:
        return int(self.ent_ptr.shape[0] - 1)


class EntityRelationFeaturizer:
    """String features → integer ids; ids kept for strings seen ≥ ``min_count`` times in fit."""

    def __init__(self, min_count: int = 1):
        self.min_count = int(min_count)
        self.entity_features: dict[str, int] = {}
        self.pair_features: dict[str, int] = {}

    @property
    def n_entity_features(self) -> int:
        return len(self.entity_features)

    @property
    def n_pair_features(self) -> int:
        return len(self.pair_features)

    def fit(self, sentences: Sequence[ERSentence]) -> EntityRelationFeaturizer:
        """Count feature strings on training sentences (once per token or pair); ids in order of
        first occurrence, the same in every process (no set order, which varies with
        PYTHONHASHSEED)."""
        ec: dict[str, int] = {}
        pc: dict[str, int] = {}
        for s in sentences:
            for t in s.ent_tok:
                for x in dict.fromkeys(entity_feature_strings(s, t)):
                    ec[x] = ec.get(x, 0) + 1
            for ta in s.ent_tok:
                for tb in s.ent_tok:
                    if ta != tb:
                        for x in dict.fromkeys(pair_feature_strings(s, ta, tb)):
                            pc[x] = pc.get(x, 0) + 1
        self.entity_features = {}
        for x, c in ec.items():
            if c >= self.min_count:
                self.entity_features[x] = len(self.entity_features)
        self.pair_features = {}
        for x, c in pc.items():
            if c >= self.min_count:
                self.pair_features[x] = len(self.pair_features)
        return self

    def transform(self, sentences: Sequence[ERSentence], with_gold: bool = True) -> EncodedER:
        """Encode sentences; unknown feature strings are dropped."""
        ed, pd = self.entity_features, self.pair_features
        ent_ptr, pair_ptr = [0], [0]
        ef_ptr, pf_ptr = [0], [0]
        ef: list[int] = []
        pf: list[int] = []
        eg: list[int] = []
        pg: list[int] = []
        for s in sentences:
            n = s.n_entities
            for a, t in enumerate(s.ent_tok):
                ids = sorted({ed[x] for x in entity_feature_strings(s, t) if x in ed})
                ef += ids
                ef_ptr.append(len(ef))
                eg.append(_ENT_ID[s.ent_label[a]] if with_gold else 0)
            for a, ta in enumerate(s.ent_tok):
                for b, tb in enumerate(s.ent_tok):
                    if a == b:
                        continue
                    ids = sorted({pd[x] for x in pair_feature_strings(s, ta, tb) if x in pd})
                    pf += ids
                    pf_ptr.append(len(pf))
                    pg.append(_REL_ID[s.relations.get((a, b), RELATION_LABELS[0])]
                              if with_gold else 0)
            ent_ptr.append(ent_ptr[-1] + n)
            pair_ptr.append(pair_ptr[-1] + n * (n - 1))
        return EncodedER(
            np.array(ent_ptr, np.int64), np.array(pair_ptr, np.int64),
            np.array(ef_ptr, np.int64), np.array(ef, INDEX_DTYPE),
            np.array(pf_ptr, np.int64), np.array(pf, INDEX_DTYPE),
            np.array(eg, np.int64), np.array(pg, np.int64),
            self.n_entity_features, self.n_pair_features, bool(with_gold),
        )

    def state(self) -> dict[str, Any]:
        """JSON-serialisable state (feature strings in id order)."""
        return {"min_count": self.min_count,
                "entity_features": list(self.entity_features),
                "pair_features": list(self.pair_features)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EntityRelationFeaturizer:
        f = cls(int(state["min_count"]))
        f.entity_features = {x: k for k, x in enumerate(state["entity_features"])}
        f.pair_features = {x: k for k, x in enumerate(state["pair_features"])}
        return f
