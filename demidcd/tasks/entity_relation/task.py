"""Entity and relation recognition (Roth & Yih 2004; DEMI-DCD paper Section 5.1) as an ILP task.

Structure of a sentence with n entities: one label y_a ∈ E = {Peop, Loc, Org, Other} per entity
and one label r_ab ∈ R = {none, Live_In, Work_For, OrgBased_In, Located_In, Kill} per ordered
pair (a, b), a ≠ b; a relation requires its argument types (see :mod:`er_solvers`).

Features are binary strings mapped to ids by a dictionary built on training data. With Fe entity
features and Fp pair features the weight vector is

    w[f·4 + e]            entity feature f, entity label e
    w[4·Fe + g·6 + r]     pair feature g, relation label r   (r = 0 "none" has weights too)

so the score of a labelling is Σ_a Σ_{f∈F(a)} w[f·4 + y_a] + Σ_ab Σ_{g∈G(ab)} w[4Fe + 6g + r_ab].
Loss: Δ(y*, y) = Σ_a [y_a ≠ y*_a] + λ Σ_ab [r_ab ≠ r*_ab] (λ = ``relation_loss_weight``); it
decomposes over the same variables, so loss-augmented inference (Eq. 5) is the same ILP with
U[a, e] += [e ≠ y*_a] and P[ab, r] += λ[r ≠ r*_ab].
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from demidcd.io.conll04 import ENTITY_LABELS, RELATION_LABELS, ERSentence
from demidcd.options import DataOptions
from demidcd.tasks import TaskSpec
from demidcd.tasks.base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from demidcd.tasks.er_solvers import DEFAULT_ILP_TIME_LIMIT, REL_OF, exact_solve_into, get_solver
from demidcd.tasks.phi import merge

NE = len(ENTITY_LABELS)
NR = len(RELATION_LABELS)
_ENT_ID = {e: k for k, e in enumerate(ENTITY_LABELS)}
_REL_ID = {r: k for k, r in enumerate(RELATION_LABELS)}


# ----------------------------------------------------------------------------- features

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
        """Count feature strings on training sentences; ids in order of first occurrence."""
        ec: dict[str, int] = {}
        pc: dict[str, int] = {}
        for s in sentences:
            for t in s.ent_tok:
                for x in set(entity_feature_strings(s, t)):
                    ec[x] = ec.get(x, 0) + 1
            for ta in s.ent_tok:
                for tb in s.ent_tok:
                    if ta != tb:
                        for x in set(pair_feature_strings(s, ta, tb)):
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


# ----------------------------------------------------------------------------- kernels

@njit(cache=True, nogil=True)
def _scores(w, s, ent_ptr, pair_ptr, ef_ptr, ef_idx, pf_ptr, pf_idx, ent_gold, pair_gold,
            fe4, augment, rlw, U, P):
    """U[a, e], P[k, r] for sentence s, with ``augment``·Δ added (the loss scale: 0 plain,
    1 loss-augmented, −1 loss-diminished); returns n."""
    e0 = ent_ptr[s]
    n = ent_ptr[s + 1] - e0
    for a in range(n):
        j = e0 + a
        for e in range(4):
            U[a, e] = 0.0
        for q in range(ef_ptr[j], ef_ptr[j + 1]):
            base = ef_idx[q] * 4
            for e in range(4):
                U[a, e] += w[base + e]
        if augment != 0:
            for e in range(4):
                if e != ent_gold[j]:
                    U[a, e] += augment
    k0 = pair_ptr[s]
    m = pair_ptr[s + 1] - k0
    for k in range(m):
        j = k0 + k
        for r in range(6):
            P[k, r] = 0.0
        for q in range(pf_ptr[j], pf_ptr[j + 1]):
            base = fe4 + pf_idx[q] * 6
            for r in range(6):
                P[k, r] += w[base + r]
        if augment != 0:
            for r in range(6):
                if r != pair_gold[j]:
                    P[k, r] += rlw * augment
    return n


@njit(cache=True, nogil=True)
def _infer_exact(w, examples, ent_ptr, pair_ptr, ef_ptr, ef_idx, pf_ptr, pf_idx, ent_gold,
                 pair_gold, fe4, augment, rlw, rel_of, out_eoff, out_poff, ent_out, pair_out,
                 obj_out, maxn):
    """Exact (loss-augmented) inference for every example; labels into the flat outputs."""
    U = np.zeros((max(maxn, 1), 4))
    P = np.zeros((max(maxn * (maxn - 1), 1), 6))
    for q in range(examples.shape[0]):
        s = examples[q]
        n = _scores(w, s, ent_ptr, pair_ptr, ef_ptr, ef_idx, pf_ptr, pf_idx, ent_gold,
                    pair_gold, fe4, augment, rlw, U, P)
        m = n * (n - 1)
        obj_out[q] = exact_solve_into(U[:n], P[:m], rel_of, ent_out[out_eoff[q]:out_eoff[q] + n],
                                      pair_out[out_poff[q]:out_poff[q] + m])


@njit(cache=True, nogil=True)
def _records(w, examples, ent_ptr, pair_ptr, ef_ptr, ef_idx, pf_ptr, pf_idx, ent_gold,
             pair_gold, fe4, rlw, out_eoff, out_poff, ent_pred, pair_pred, keep_all):
    """Records (i, h, Δ, φ = Φ(gold) − Φ(pred), w·φ) for predictions differing from gold."""
    nq = examples.shape[0]
    # pass 1: Δ and raw φ size per example
    delta = np.zeros(nq)
    raw = np.zeros(nq, np.int64)
    maxraw = 0
    nrec = 0
    for q in range(nq):
        s = examples[q]
        e0 = ent_ptr[s]
        n = ent_ptr[s + 1] - e0
        k0 = pair_ptr[s]
        m = pair_ptr[s + 1] - k0
        dl = 0.0
        c = 0
        for a in range(n):
            if ent_pred[out_eoff[q] + a] != ent_gold[e0 + a]:
                dl += 1.0
                c += 2 * (ef_ptr[e0 + a + 1] - ef_ptr[e0 + a])
        for k in range(m):
            if pair_pred[out_poff[q] + k] != pair_gold[k0 + k]:
                dl += rlw
                c += 2 * (pf_ptr[k0 + k + 1] - pf_ptr[k0 + k])
        delta[q] = dl
        raw[q] = c
        if c > maxraw:
            maxraw = c
        if dl > 0.0 or keep_all:
            nrec += 1
    total = 0
    for q in range(nq):
        if delta[q] > 0.0 or keep_all:
            total += raw[q]
    ex = np.zeros(nrec, np.int64)
    hs = np.zeros(nrec, np.uint64)
    dt = np.zeros(nrec)
    mg = np.zeros(nrec)
    ptr = np.zeros(nrec + 1, np.int64)
    idx = np.zeros(total, np.int32)
    val = np.zeros(total)
    keys = np.zeros(max(maxraw, 1), np.int64)
    fnv_prime = np.uint64(1099511628211)
    j = 0
    nnz = 0
    for q in range(nq):
        if not (delta[q] > 0.0 or keep_all):
            continue
        s = examples[q]
        e0 = ent_ptr[s]
        n = ent_ptr[s + 1] - e0
        k0 = pair_ptr[s]
        m = pair_ptr[s + 1] - k0
        h = np.uint64(14695981039346656037)
        c = 0
        for a in range(n):
            y = ent_pred[out_eoff[q] + a]
            h = (h ^ np.uint64(y + 1)) * fnv_prime
            g = ent_gold[e0 + a]
            if y != g:
                for p in range(ef_ptr[e0 + a], ef_ptr[e0 + a + 1]):
                    base = np.int64(ef_idx[p]) * 4
                    keys[c] = (base + g) * 2 + 1  # +1
                    keys[c + 1] = (base + y) * 2  # −1
                    c += 2
        h = (h ^ np.uint64(255)) * fnv_prime
        for k in range(m):
            r = pair_pred[out_poff[q] + k]
            h = (h ^ np.uint64(r + 1)) * fnv_prime
            g = pair_gold[k0 + k]
            if r != g:
                for p in range(pf_ptr[k0 + k], pf_ptr[k0 + k + 1]):
                    base = fe4 + np.int64(pf_idx[p]) * 6
                    keys[c] = (base + g) * 2 + 1
                    keys[c + 1] = (base + r) * 2
                    c += 2
        kk = keys[:c]
        kk.sort()
        nnz, dot = merge(kk, c, w, idx, val, nnz)
        ex[j] = s
        hs[j] = h
        dt[j] = delta[q]
        mg[j] = dot
        ptr[j + 1] = nnz
        j += 1
    return ex, hs, dt, mg, ptr, idx[:nnz].copy(), val[:nnz].copy()


# ----------------------------------------------------------------------------- task

Structure = tuple[np.ndarray, np.ndarray]  # (entity labels int64[n], pair labels int64[n(n−1)])


class EntityRelationTask(Task):
    """Joint entity typing and relation labelling with exact ILP (loss-augmented) inference.

    ``ilp_time_limit``: per-solve cap (seconds) for ``cbc`` / ``highs``; a solve stopped by it
    returns the solver's best feasible structure and increments :attr:`unproven`. The solvers
    poll :attr:`should_stop` and raise :class:`InferenceInterrupted` when it turns true.
    """

    name = "entity-relation"

    def __init__(self, enc: EncodedER, with_gold: bool = True, solver: str = "exact",
                 relation_loss_weight: float = 1.0,
                 ilp_time_limit: float | None = DEFAULT_ILP_TIME_LIMIT):
        self.enc = enc
        self.with_gold = bool(with_gold) and enc.has_gold
        self.solver_name = solver
        self._solver = get_solver(solver)
        self.ilp_time_limit = ilp_time_limit
        self.unproven = 0
        self.relation_loss_weight = float(relation_loss_weight)
        self._fe4 = 4 * enc.n_entity_features
        self._dim = self.dimension(enc.n_entity_features, enc.n_pair_features)
        ne = np.diff(enc.ent_ptr)
        self._n_ent = ne
        self._maxn = int(ne.max()) if ne.size else 0

    @staticmethod
    def dimension(n_entity_features: int, n_pair_features: int) -> int:
        """Length of w: 4 entity labels × entity features + 6 pair labels × pair features."""
        return 4 * int(n_entity_features) + 6 * int(n_pair_features)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def n_examples(self) -> int:
        return self.enc.n_sentences

    def costs(self) -> np.ndarray:
        """n_entities² + 1 per sentence (pairs dominate inference)."""
        return (self._n_ent.astype(np.float64) ** 2) + 1.0

    def _arrays(self):
        e = self.enc
        return (e.ent_ptr, e.pair_ptr, e.ef_ptr, e.ef_idx, e.pf_ptr, e.pf_idx, e.ent_gold,
                e.pair_gold)

    def _offsets(self, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self._n_ent[examples]
        eoff = np.zeros(len(examples) + 1, np.int64)
        poff = np.zeros(len(examples) + 1, np.int64)
        np.cumsum(n, out=eoff[1:])
        np.cumsum(n * (n - 1), out=poff[1:])
        return eoff, poff

    def infer(self, w: np.ndarray, examples: np.ndarray, augment: bool | float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """argmax_y w·Φ + augment·Δ for each example (``augment``: the loss scale, True = 1):
        flat labels, offsets, objective values."""
        augment = float(augment)
        examples = np.ascontiguousarray(examples, dtype=np.int64)
        w = np.ascontiguousarray(w, dtype=VALUE_DTYPE)
        if augment and not self.with_gold:
            raise ValueError("loss-augmented inference needs gold labels")
        eoff, poff = self._offsets(examples)
        ent = np.zeros(int(eoff[-1]), np.int64)
        pair = np.zeros(int(poff[-1]), np.int64)
        obj = np.zeros(len(examples))
        arrays = self._arrays()
        rlw = self.relation_loss_weight
        if self.solver_name == "exact":
            _infer_exact(w, examples, *arrays, self._fe4, augment, rlw, REL_OF, eoff, poff, ent,
                         pair, obj, self._maxn)
        else:
            maxn = max(self._maxn, 1)
            U = np.zeros((maxn, 4))
            P = np.zeros((max(maxn * (maxn - 1), 1), 6))
            for q, s in enumerate(examples):
                n = _scores(w, s, *arrays, self._fe4, augment, rlw, U, P)
                m = n * (n - 1)
                res = self._solver(U[:n], P[:m], time_limit=self.ilp_time_limit,
                                   should_stop=self.should_stop)
                if not res.proven:
                    self.unproven += 1
                ent[eoff[q]:eoff[q] + n] = res.ent
                pair[poff[q]:poff[q] + m] = res.pair
                obj[q] = res.obj
        return ent, pair, eoff, poff, obj

    def _batch(self, w, examples, ent, pair, eoff, poff, keep_all) -> RecordBatch:
        ex, hs, dt, mg, ptr, idx, val = _records(
            np.ascontiguousarray(w, dtype=VALUE_DTYPE), examples, *self._arrays(), self._fe4,
            self.relation_loss_weight, eoff, poff, ent, pair, keep_all)
        return RecordBatch(ex, hs.view(np.int64), dt, mg, ptr, idx.astype(INDEX_DTYPE, copy=False),
                           val.astype(VALUE_DTYPE, copy=False))

    def loss_augmented(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + Δ(y_i, y) (Eq. 5); one record per example with Δ > 0."""
        examples = np.ascontiguousarray(examples, dtype=np.int64)
        if len(examples) == 0:
            return RecordBatch.empty()
        ent, pair, eoff, poff, _ = self.infer(w, examples, augment=True)
        return self._batch(w, examples, ent, pair, eoff, poff, False)

    def argmax_records(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Records for the plain argmax (no Δ in the objective), one per wrong example."""
        return self.loss_scaled(w, examples, 0.0)

    def loss_scaled(self, w: np.ndarray, examples: np.ndarray, scale: float) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + scale·Δ(y_i, y), one record per example with Δ > 0."""
        examples = np.ascontiguousarray(examples, dtype=np.int64)
        if len(examples) == 0:
            return RecordBatch.empty()
        ent, pair, eoff, poff, _ = self.infer(w, examples, augment=float(scale))
        return self._batch(w, examples, ent, pair, eoff, poff, False)

    def weights_read(self, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Blocks of w inference on ``examples`` reads: 4 weights per entity feature and 6 per
        pair feature occurring in them (repeats allowed)."""
        e = self.enc
        ex = np.ascontiguousarray(examples, dtype=np.int64)
        ef = [e.ef_idx[e.ef_ptr[e.ent_ptr[s]]:e.ef_ptr[e.ent_ptr[s + 1]]] for s in ex]
        pf = [e.pf_idx[e.pf_ptr[e.pair_ptr[s]]:e.pf_ptr[e.pair_ptr[s + 1]]] for s in ex]
        ef = np.concatenate(ef).astype(np.int64) if ef else np.zeros(0, np.int64)
        pf = np.concatenate(pf).astype(np.int64) if pf else np.zeros(0, np.int64)
        starts = np.concatenate([ef * 4, self._fe4 + pf * 6])
        lens = np.concatenate([np.full(ef.shape[0], 4, np.int64),
                               np.full(pf.shape[0], 6, np.int64)])
        return starts, lens

    def decode(self, w: np.ndarray, examples: np.ndarray) -> list[Structure]:
        """argmax_y w·Φ(x_i, y) as (entity labels, pair labels) per example."""
        examples = np.ascontiguousarray(examples, dtype=np.int64)
        ent, pair, eoff, poff, _ = self.infer(w, examples, augment=False)
        return [(ent[eoff[q]:eoff[q + 1]].copy(), pair[poff[q]:poff[q + 1]].copy())
                for q in range(len(examples))]

    def gold(self, examples: np.ndarray) -> list[Structure]:
        e = self.enc
        return [(e.ent_gold[e.ent_ptr[s]:e.ent_ptr[s + 1]].copy(),
                 e.pair_gold[e.pair_ptr[s]:e.pair_ptr[s + 1]].copy())
                for s in np.asarray(examples, dtype=np.int64)]

    def metric(self, gold: list[Structure], predicted: list[Structure]) -> dict[str, float]:
        """Micro P/R/F1 of entities and of relations ((a, b, type) matches; none excluded)."""
        e_tp = e_pred = e_gold = 0
        r_tp = r_pred = r_gold = 0
        for (ge, gp), (pe, pp) in zip(gold, predicted, strict=True):
            e_gold += len(ge)
            e_pred += len(pe)
            e_tp += int(np.sum(np.asarray(ge) == np.asarray(pe)))
            gp, pp = np.asarray(gp), np.asarray(pp)
            r_gold += int(np.count_nonzero(gp))
            r_pred += int(np.count_nonzero(pp))
            r_tp += int(np.count_nonzero((gp == pp) & (gp != 0)))

        def prf(tp: int, npred: int, ngold: int) -> tuple[float, float, float]:
            p = tp / npred if npred else 0.0
            r = tp / ngold if ngold else 0.0
            return p, r, (2 * p * r / (p + r) if p + r > 0 else 0.0)

        ep, er, ef = prf(e_tp, e_pred, e_gold)
        rp, rr, rf = prf(r_tp, r_pred, r_gold)
        return {"score": (ef + rf) / 2, "entity_p": ep, "entity_r": er, "entity_f1": ef,
                "relation_p": rp, "relation_r": rr, "relation_f1": rf}

    def phi_delta(self, i: int, y: Structure) -> tuple[np.ndarray, np.ndarray, float]:
        """φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) (sorted unique, zeros dropped) and Δ."""
        examples = np.array([i], np.int64)
        ent = np.ascontiguousarray(y[0], dtype=np.int64)
        pair = np.ascontiguousarray(y[1], dtype=np.int64)
        eoff, poff = self._offsets(examples)
        if len(ent) != eoff[1] or len(pair) != poff[1]:
            raise ValueError(f"structure has {len(ent)} entity / {len(pair)} pair labels, "
                             f"example {i} has {eoff[1]} / {poff[1]}")
        b = self._batch(np.zeros(self._dim), examples, ent, pair, eoff, poff, True)
        return b.idx, b.val, float(b.delta[0])

    def score(self, w: np.ndarray, i: int, y: Structure) -> float:
        """w·Φ(x_i, y) (without loss)."""
        examples = np.array([i], np.int64)
        maxn = max(self._maxn, 1)
        U = np.zeros((maxn, 4))
        P = np.zeros((max(maxn * (maxn - 1), 1), 6))
        n = _scores(np.ascontiguousarray(w, dtype=VALUE_DTYPE), examples[0], *self._arrays(),
                    self._fe4, False, 0.0, U, P)
        ent, pair = np.asarray(y[0], np.int64), np.asarray(y[1], np.int64)
        return float(U[np.arange(n), ent].sum() + P[np.arange(n * (n - 1)), pair].sum())


def structure_to_labels(y: Structure, n: int) -> tuple[list[str], dict[tuple[int, int], str]]:
    """(entity label strings, {(a, b): relation} without "none") for writing predictions."""
    ent, pair = y
    rels = {}
    k = 0
    for a in range(n):
        for b in range(n):
            if a != b:
                if int(pair[k]) != 0:
                    rels[(a, b)] = RELATION_LABELS[int(pair[k])]
                k += 1
    return [ENTITY_LABELS[int(e)] for e in ent], rels


# ----------------------------------------------------------------------------- registry entry

class EntityRelationSpec(TaskSpec):
    """CoNLL04 files (Roth & Yih 2004): entity and relation F1."""

    name = "entity-relation"
    help = "joint entity and relation extraction (CoNLL04), 0-1 ILP inference"
    estimator = "demidcd.estimators.entity_relation:EntityRelationExtractor"
    max_sentence_length = 300  # the ILP grows with the entity pairs (CoNLL04's longest: 169)
    length_cost = "the relation ILP grows with the entity pairs: about 5 s of CPU for 200 " \
                  "entities"

    def read(self, path: str, options: DataOptions, labelled: bool = True) -> Any:
        from demidcd.io.conll04 import read_conll04

        return read_conll04(path, encoding=options.encoding,
                            max_sentence_length=options.max_sentence_length)

    def xy(self, data):
        return data, None

    def describe(self, data) -> str:
        return (f"{len(data):,} sentences, {sum(s.n_entities for s in data):,} entities, "
                f"{sum(len(s.relations) for s in data):,} relations")

    def make_estimator(self, options: DataOptions, common: dict[str, Any]) -> Any:
        return self.estimator_class()(solver=options.ilp_solver or "exact",
                                      ilp_time_limit=options.ilp_time_limit,
                                      relation_loss_weight=options.relation_loss_weight,
                                      min_count=options.min_count or 1, **common)

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        # evaluation and prediction solve with the exact branch and bound unless --ilp-solver
        # says otherwise, whatever the model was trained with: it reaches the same optima, and
        # CBC made two snapshot evaluations of CoNLL04 take over 300 s against 7 s (issue 22)
        est.solver = options.ilp_solver or "exact"
        est.ilp_time_limit = options.ilp_time_limit  # None: default, 0: none
        return options

    def report(self, est, data, prefix: str = "") -> list[str]:
        m = est.metrics(data)
        return [f"{prefix}{kind} F1: {100 * m[kind + '_f1']:.2f} (P {100 * m[kind + '_p']:.2f}, "
                f"R {100 * m[kind + '_r']:.2f})" for kind in ("entity", "relation")]

    def write(self, path: str, data: Any, predicted: Any, options: DataOptions) -> None:
        from demidcd.io.conll04 import write_conll04

        write_conll04(path, data, [p[0] for p in predicted], [p[1] for p in predicted],
                      encoding=options.encoding)


SPEC = EntityRelationSpec()
