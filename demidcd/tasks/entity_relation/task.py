"""Entity and relation recognition (Roth & Yih 2004; DEMI-DCD paper Section 5.1) as an ILP task.

Structure of a sentence with n entities: one label y_a ∈ E = {Peop, Loc, Org, Other} per entity
and one label r_ab ∈ R = {none, Live_In, Work_For, OrgBased_In, Located_In, Kill} per ordered
pair (a, b), a ≠ b; a relation requires its argument types (see :mod:`.ilp`).

Features are binary strings mapped to ids by a dictionary built on training data. With Fe entity
features and Fp pair features the weight vector is

    w[f·4 + e]            entity feature f, entity label e
    w[4·Fe + g·6 + r]     pair feature g, relation label r   (r = 0 "none" has weights too)

so the score of a labelling is Σ_a Σ_{f∈F(a)} w[f·4 + y_a] + Σ_ab Σ_{g∈G(ab)} w[4Fe + 6g + r_ab].
Loss: Δ(y*, y) = Σ_a [y_a ≠ y*_a] + λ Σ_ab [r_ab ≠ r*_ab] (λ = ``relation_loss_weight``); it
decomposes over the same variables, so loss-augmented inference (Eq. 5) is the same ILP with
U[a, e] += [e ≠ y*_a] and P[ab, r] += λ[r ≠ r*_ab].

The featurizer is in :mod:`.features`, the ILP and its solvers in :mod:`.ilp`, :mod:`.cbc`,
:mod:`.highs` and :mod:`.inference`, the command line's adapter in :mod:`.spec`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from demidcd.io.conll04 import ENTITY_LABELS, RELATION_LABELS
from demidcd.tasks.base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from demidcd.tasks.entity_relation.features import EncodedER
from demidcd.tasks.entity_relation.ilp import REL_OF, exact_solve_into
from demidcd.tasks.entity_relation.inference import DEFAULT_ILP_TIME_LIMIT, get_solver
from demidcd.tasks.phi import FNV_OFFSET, FNV_PRIME, merge

# ----------------------------------------------------------------------------- kernels

@njit(cache=True, nogil=True)
def _part_scores(w, f_ptr, f_idx, j, offset, n_labels, gold, augment, cost, out, row):
    """out[row, l] = Σ_{f ∈ F(j)} w[offset + f·n_labels + l] for every label l of part j (an
    entity or a pair), plus ``cost`` for l ≠ ``gold`` when ``augment`` ≠ 0."""
    for lab in range(n_labels):
        out[row, lab] = 0.0
    for q in range(f_ptr[j], f_ptr[j + 1]):
        base = offset + f_idx[q] * n_labels
        for lab in range(n_labels):
            out[row, lab] += w[base + lab]
    if augment != 0:
        for lab in range(n_labels):
            if lab != gold:
                out[row, lab] += cost


@njit(cache=True, nogil=True)
def sentence_scores(w, s, ent_ptr, pair_ptr, ef_ptr, ef_idx, pf_ptr, pf_idx, ent_gold,
                    pair_gold, fe4, augment, rlw, U, P):
    """U[a, e], P[k, r] for sentence s, with ``augment``·Δ added (the loss scale: 0 plain,
    1 loss-augmented, −1 loss-diminished); returns n."""
    e0 = ent_ptr[s]
    n = ent_ptr[s + 1] - e0
    for a in range(n):
        _part_scores(w, ef_ptr, ef_idx, e0 + a, 0, 4, ent_gold[e0 + a], augment, augment, U, a)
    k0 = pair_ptr[s]
    m = pair_ptr[s + 1] - k0
    for k in range(m):
        _part_scores(w, pf_ptr, pf_idx, k0 + k, fe4, 6, pair_gold[k0 + k], augment,
                     rlw * augment, P, k)
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
        n = sentence_scores(w, s, ent_ptr, pair_ptr, ef_ptr, ef_idx, pf_ptr, pf_idx, ent_gold,
                    pair_gold, fe4, augment, rlw, U, P)
        m = n * (n - 1)
        obj_out[q] = exact_solve_into(U[:n], P[:m], rel_of, ent_out[out_eoff[q]:out_eoff[q] + n],
                                      pair_out[out_poff[q]:out_poff[q] + m])


@njit(cache=True, nogil=True)
def _part_keys(f_ptr, f_idx, j, offset, n_labels, g, y, keys, c):
    """Signed keys of φ for part j (an entity or a pair) labelled y instead of its gold g: +1
    on each (feature, g) weight, −1 on each (feature, y) weight, written from keys[c]; returns
    the next free position."""
    for p in range(f_ptr[j], f_ptr[j + 1]):
        base = offset + np.int64(f_idx[p]) * n_labels
        keys[c] = (base + g) * 2 + 1  # +1
        keys[c + 1] = (base + y) * 2  # −1
        c += 2
    return c


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
        h = FNV_OFFSET
        c = 0
        for a in range(n):
            y = ent_pred[out_eoff[q] + a]
            h = (h ^ np.uint64(y + 1)) * FNV_PRIME
            g = ent_gold[e0 + a]
            if y != g:
                c = _part_keys(ef_ptr, ef_idx, e0 + a, 0, 4, g, y, keys, c)
        h = (h ^ np.uint64(255)) * FNV_PRIME
        for k in range(m):
            r = pair_pred[out_poff[q] + k]
            h = (h ^ np.uint64(r + 1)) * FNV_PRIME
            g = pair_gold[k0 + k]
            if r != g:
                c = _part_keys(pf_ptr, pf_idx, k0 + k, fe4, 6, g, r, keys, c)
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

    def _score_buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """U and P arrays large enough for the longest sentence's entities and pairs."""
        maxn = max(self._maxn, 1)
        return np.zeros((maxn, 4)), np.zeros((max(maxn * (maxn - 1), 1), 6))

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
            U, P = self._score_buffers()
            for q, s in enumerate(examples):
                n = sentence_scores(w, s, *arrays, self._fe4, augment, rlw, U, P)
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
        return self.loss_scaled(w, examples, 1.0)

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
        U, P = self._score_buffers()
        n = sentence_scores(np.ascontiguousarray(w, dtype=VALUE_DTYPE), np.int64(i),
                            *self._arrays(), self._fe4, 0.0, 0.0, U, P)
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
