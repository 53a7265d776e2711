"""``SequenceTask``: first-order chain labelling as a :class:`~demidcd.tasks.base.Task` over
:class:`~.features.EncodedSequences` (the maths of Φ, w's layout and Viterbi: :mod:`.kernels`;
the batched kernels it calls: :mod:`.records`), with k-best, constrained decoding and
max-marginal confidence through the kernels of :mod:`.decoding` and :mod:`.confidence`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from .features import EncodedSequences
from .kernels import Chain, pair_index
from .records import (
    chain_scores_kernel,
    check_pairs,
    decode_kernel,
    inference_parts,
    loss_augmented_kernel,
    partial_augmented_kernel,
    phi_kernel,
)

_EMPTY = np.zeros(0, np.float64)


class ChainScores(NamedTuple):
    """The scores of a batch of sentences in the layout of :mod:`.decoding`
    (:func:`~.records.chain_scores_kernel`)."""

    em: np.ndarray  # float64[n_tok·K]
    sent_ptr: np.ndarray  # int64[n_sent+1], tokens of the batch
    tr: np.ndarray  # float64[K·K]
    start: np.ndarray  # float64[K]
    end: np.ndarray  # float64[K]
    pos_tr: np.ndarray  # float64[m, K·K], m = 0 without B features
    pos_index: np.ndarray  # int32[n_tok] (−1: tr), or int32[0] without B features


def _constraint_arrays(constraints: tuple | None, K: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(allowed K·K, allowed_start K, allowed_end K) as flat bool arrays; empty for None."""
    if constraints is None:
        return np.zeros(0, np.bool_), np.zeros(0, np.bool_), np.zeros(0, np.bool_)
    allowed, first, last = (np.ascontiguousarray(a, np.bool_).reshape(-1) for a in constraints)
    if allowed.shape[0] != K * K or first.shape[0] != K or last.shape[0] != K:
        raise ValueError(f"constraints must be (K*K, K, K) booleans with K = {K}")
    return allowed, first, last


def _or_empty(a: np.ndarray | None, dtype: type) -> np.ndarray:
    """``a``, or an empty array of ``dtype`` (the kernels' "absent") when it is None."""
    return np.zeros(0, dtype) if a is None else a


def _csr(ptr: np.ndarray, idx: np.ndarray | None, n: int,
         name: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ptr, int32 ids) checked: ptr starts at 0, never decreases and ends at len(ids);
    every id is in [0, n)."""
    if idx is None:
        raise ValueError(f"{name}_ptr given without {name}_idx")
    ptr = np.ascontiguousarray(ptr, np.int64)
    idx = np.ascontiguousarray(idx, np.int32)
    if ptr.ndim != 1 or ptr.shape[0] < 1 or ptr[0] != 0 or ptr[-1] != idx.shape[0] \
            or np.any(np.diff(ptr) < 0):
        raise ValueError(f"{name}_ptr is inconsistent with {name}_idx")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"{name}_idx ids must be in [0, {n})")
    return ptr, idx


def _values(val: np.ndarray | None, idx: np.ndarray, name: str) -> np.ndarray | None:
    """``val`` as contiguous finite float64 with one value per entry of ``idx`` (or None)."""
    if val is None:
        return None
    val = np.ascontiguousarray(val, np.float64)
    if val.shape != idx.shape:
        raise ValueError(f"{name} must have one value per feature ({idx.shape[0]}), "
                         f"got shape {val.shape}")
    if not np.all(np.isfinite(val)):
        raise ValueError(f"{name} has non-finite values")
    return val


class SequenceTask(Task):
    """First-order chain labelling over :class:`EncodedSequences` with ``n_tags`` tags.

    ``Y``: int32 gold tag id per token (None for unlabelled data; −1 = a tag unseen in training,
    allowed for evaluation only). ``n_obs``: F, the number of (unigram) observation features;
    ``n_bigram_obs``: G, the number of bigram observation (B) features (X.bfeat_*).
    ``pairs``: None for the dense U block (F·K weights), or (off, lab) of
    :func:`~.records.seen_pairs`: weights only for those (feature, label) pairs
    (``weights="seen"``; :mod:`.kernels`).
    """

    name = "sequence"
    inference_dtype = np.float32  # loss-augmented inference over float32 w̄: half the
    # bytes of float64 and twice the SIMD lanes (building φ is unchanged; benchmarks/README.md)

    def __init__(self, X: EncodedSequences, Y: np.ndarray | None, n_tags: int, n_obs: int,
                 n_bigram_obs: int = 0, pairs: tuple[np.ndarray, np.ndarray] | None = None,
                 allowed: tuple[np.ndarray, np.ndarray] | None = None,
                 scheme: tuple | None = None):
        self.sent_ptr = np.ascontiguousarray(X.sent_ptr, np.int64)
        self.K = int(n_tags)
        self.F = int(n_obs)
        self.G = int(n_bigram_obs)
        if self.K < 1 or self.F < 0 or self.G < 0:
            raise ValueError("need n_tags >= 1, n_obs >= 0 and n_bigram_obs >= 0")
        self.feat_ptr, self.feat_idx = _csr(X.feat_ptr, X.feat_idx, self.F, "feat")
        self.pairs = check_pairs(pairs, self.F, self.K)
        # the U block's rows as the kernels address it: F, or ⌈pairs / K⌉ (padded)
        self.u_rows = self.F if self.pairs is None else -(-self.pairs[1].shape[0] // self.K)
        n_tok = self.feat_ptr.shape[0] - 1
        sp = self.sent_ptr
        if sp[0] != 0 or sp[-1] != n_tok or np.any(np.diff(sp) < 0):
            raise ValueError("sent_ptr is inconsistent with feat_ptr")
        self.feat_val = _values(X.feat_val, self.feat_idx, "feat_val")
        # B features: None when the data has none (the kernels then take the shared T alone)
        self.bfeat_ptr = self.bfeat_idx = self.bfeat_val = None
        if X.bfeat_ptr is not None:
            bp, bi = _csr(X.bfeat_ptr, X.bfeat_idx, self.G, "bfeat")
            if bp.shape[0] != n_tok + 1:
                raise ValueError(f"bfeat_ptr must have one entry per token + 1 ({n_tok + 1}), "
                                 f"got {bp.shape[0]}")
            if bi.size:
                self.bfeat_ptr, self.bfeat_idx = bp, bi
                self.bfeat_val = _values(X.bfeat_val, bi, "bfeat_val")
        elif X.bfeat_idx is not None or X.bfeat_val is not None:
            raise ValueError("bfeat_idx / bfeat_val given without bfeat_ptr")
        self.chain = Chain(self.sent_ptr, self.feat_ptr, self.feat_idx,
                           _or_empty(self.feat_val, np.float64),
                           _or_empty(self.bfeat_ptr, np.int64),
                           _or_empty(self.bfeat_idx, np.int32),
                           _or_empty(self.bfeat_val, np.float64),
                           *(self.pairs or (np.zeros(0, np.int64), np.zeros(0, np.int32))))
        if Y is None:
            self.Y = None
        else:
            self.Y = np.ascontiguousarray(Y, np.int32)
            if self.Y.shape != (n_tok,):
                raise ValueError(f"Y must have one tag per token ({n_tok}), got {self.Y.shape}")
            if self.Y.size and (self.Y.min() < -1 or self.Y.max() >= self.K):
                raise ValueError(f"tag ids must be in [0, {self.K}) (or -1 for an unknown tag)")
        # partially labelled data (.partial): the labels each token admits (empty: any), or
        # None when every token is labelled; Y is then −1 where a token is not fully known
        self.allowed_ptr = self.allowed_idx = None
        self.label_rules = getattr(X, "label_rules", None)  # the taggings consistent with
        # partial labels obey them (the label scheme's transition rules), or None
        ap = getattr(X, "allowed_ptr", None)
        if ap is not None:
            if self.Y is None:
                raise ValueError("allowed_ptr given without gold tags")
            self.allowed_ptr, self.allowed_idx = _csr(ap, X.allowed_idx, self.K, "allowed")
            if self.allowed_ptr.shape[0] != n_tok + 1:
                raise ValueError(f"allowed_ptr must have one entry per token + 1 ({n_tok + 1})")
        # −1 marks a gold tag unseen in training: fine for decode/metric (always wrong), but
        # loss-augmented inference and φ need every gold tag to have weights (with partial
        # labels −1 marks a token that is not fully known: the learners read allowed_*)
        if allowed is not None:  # (given directly, not on X)
            ap, ai = _csr(allowed[0], allowed[1], self.K, "allowed")
            if ap.shape[0] != n_tok + 1:
                raise ValueError(f"allowed_ptr must have one entry per token + 1 ({n_tok + 1})"
                                 f", got {ap.shape[0]}")
            self.allowed_ptr, self.allowed_idx = ap, ai
        if scheme is not None:
            self.label_rules = scheme
        self._unknown_gold = bool(self.Y is not None and self.Y.size and self.Y.min() < 0
                                  and self.allowed_ptr is None)
        self._inert: np.ndarray | None = None  # examples that give no records (CCCP's start)
        self._imputed = False  # Y holds complete targets (with_targets): the SVM may train
        if self.dim >= 2**31:
            raise ValueError("weight vector too large for int32 indices (reduce features)")

    # -- sizes --------------------------------------------------------------------------------
    @staticmethod
    def dimension(n_obs: int, n_tags: int, n_bigram_obs: int = 0,
                  n_pairs: int | None = None) -> int:
        """Length of w for F observation features, K tags and G bigram observation features:
        F·K + (K+1)² + G·K², laid out as [emissions U: w[f·K + k] | transitions T incl. START
        and END: w[F·K + a·(K+1) + b] | B: w[F·K + (K+1)² + g·K² + j·K + k]] (the maths:
        :mod:`.kernels`); G = 0 is the layout of models without B features. With
        ``n_pairs`` (seen pairs) U holds those weights padded to ⌈n_pairs / K⌉·K in place of
        F·K."""
        F, K, G = int(n_obs), int(n_tags), int(n_bigram_obs)
        if n_pairs is not None:
            F = -(-int(n_pairs) // K)
        return F * K + (K + 1) ** 2 + G * K * K

    @property
    def dim(self) -> int:
        """U + (K+1)² + G·K² (U: F·K, or the seen pairs padded to a multiple of K)."""
        return self.dimension(self.u_rows, self.K, self.G)

    @property
    def bigram_base(self) -> int:
        """Offset of the B block in w: U + (K+1)²."""
        return self.u_rows * self.K + (self.K + 1) ** 2

    @property
    def n_examples(self) -> int:
        return int(self.sent_ptr.shape[0] - 1)

    def costs(self) -> np.ndarray:
        """Tokens per sentence (float64)."""
        return np.diff(self.sent_ptr).astype(np.float64)

    def dense_layout(self) -> tuple[Chain, np.ndarray]:
        """For a seen-pairs task (``pairs``): its data as the kernels read a dense U block (the
        chain without the pair lists) and, per weight of w, its index in that layout of
        :meth:`dimension` (F, K, G) entries: seen pair j of feature f → f·K + lab[j], the
        transitions and B block → the same entries after F·K, U's padding → −1."""
        if self.pairs is None:
            raise ValueError("dense_layout: this task has no seen pairs (its U block is dense)")
        off, lab = self.pairs
        to = np.full(self.dim, -1, np.int64)
        to[:lab.shape[0]] = np.repeat(np.arange(self.F, dtype=np.int64), np.diff(off)) \
            * self.K + lab
        tail = self.u_rows * self.K
        to[tail:] = self.F * self.K + np.arange(self.dim - tail)
        return self.chain._replace(u_off=np.zeros(0, np.int64),
                                   u_lab=np.zeros(0, np.int32)), to

    # -- helpers ------------------------------------------------------------------------------
    def _w(self, w: np.ndarray, float32_ok: bool = False) -> np.ndarray:
        keep = float32_ok and w.dtype == np.float32
        w = np.ascontiguousarray(w, np.float32 if keep else np.float64)
        if w.shape != (self.dim,):
            raise ValueError(f"w must have shape ({self.dim},), got {w.shape}")
        return w

    def _gold_array(self, training: bool = True) -> np.ndarray:
        if self.Y is None:
            raise ValueError("this data set has no gold tags")
        if training and self._unknown_gold:
            raise ValueError("gold tags include unknown tags (-1): cannot train on this data")
        return self.Y

    @staticmethod
    def _examples(examples: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(examples, np.int64).reshape(-1)

    # -- inference ----------------------------------------------------------------------------
    def loss_augmented(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + Δ(y_i, y) per example; one record per example with Δ > 0."""
        return self._records(w, examples, 1.0)

    def inference_parts(self, w: np.ndarray) -> list:
        """Warm-up jobs compiling the large callees of :meth:`loss_augmented` apart (with w,
        of either dtype): :func:`.records.inference_parts`."""
        return inference_parts(self._w(w, float32_ok=True), self.u_rows, self.K, self.G,
                               self.chain, self._gold_array())

    def argmax_records(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Records of the plain Viterbi argmax for the examples it gets wrong."""
        return self._records(w, examples, 0.0)

    def loss_scaled(self, w: np.ndarray, examples: np.ndarray, scale: float) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + scale·Δ(y_i, y), one record per example with Δ > 0."""
        return self._records(w, examples, float(scale))

    def weights_read(self, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Blocks of w inference on ``examples`` reads: K emission weights per observation
        feature of each token (repeats allowed), all transitions, and K² weights per B feature
        of each token but a sentence's first."""
        ex = self._examples(examples)
        sp, fp = self.sent_ptr, self.feat_ptr
        parts = [self.feat_idx[fp[sp[i]]:fp[sp[i + 1]]] for i in ex]
        f = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        g = np.zeros(0, np.int32)
        if self.bfeat_ptr is not None:
            bp = self.bfeat_ptr
            bparts = [self.bfeat_idx[bp[sp[i] + 1]:bp[sp[i + 1]]] for i in ex
                      if sp[i + 1] - sp[i] > 1]
            g = np.concatenate(bparts) if bparts else g
        K = self.K
        if self.pairs is None:
            ustarts, ulens = f.astype(np.int64) * K, np.full(f.shape[0], K, np.int64)
        else:
            ustarts = self.pairs[0][f]
            ulens = self.pairs[0][f.astype(np.int64) + 1] - ustarts
        starts = np.concatenate([ustarts, [self.u_rows * K],
                                 self.bigram_base + g.astype(np.int64) * (K * K)])
        lens = np.full(starts.shape[0], K, np.int64)
        lens[:f.shape[0]] = ulens
        lens[f.shape[0]] = (K + 1) ** 2
        lens[f.shape[0] + 1:] = K * K
        return starts, lens

    def _records(self, w: np.ndarray, examples: np.ndarray, augment: float) -> RecordBatch:
        ex = self._examples(examples)
        if self._inert is not None:
            ex = ex[~self._inert[ex]]
        if self.allowed_ptr is None:
            ex, h, delta, margin, ptr, idx, val = loss_augmented_kernel(
                self._w(w, float32_ok=True), self.u_rows, self.K, self.G, self.chain,
                self._gold_array(), ex, augment)
        else:  # partially labelled: Δ of the annotation, φ against the imputed targets
            if not self._imputed:
                raise ValueError("partially labelled data: impute the targets first "
                                 "(with_targets(impute(w)); the SVM learners do, by CCCP)")
            ex, h, delta, margin, ptr, idx, val = partial_augmented_kernel(
                self._w(w, float32_ok=True), self.u_rows, self.K, self.G, self.chain,
                self._gold_array(), self.allowed_ptr, self.allowed_idx, ex, augment)
        return RecordBatch(ex, h.view(np.int64), delta, margin, ptr,
                           idx.astype(INDEX_DTYPE, copy=False), val.astype(VALUE_DTYPE, copy=False))

    def decode(self, w: np.ndarray, examples: np.ndarray) -> list[np.ndarray]:
        """Viterbi argmax_y w·Φ(x_i, y): one int32 array of tag ids per example."""
        tags, ptr = decode_kernel(self._w(w), self.u_rows, self.K, self.chain,
                                  self._examples(examples))
        return [tags[ptr[e]:ptr[e + 1]] for e in range(ptr.shape[0] - 1)]

    def decode_flat(self, w: np.ndarray, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`decode` but returns (flat int32 tags, int64 ptr) without a Python list."""
        return decode_kernel(self._w(w), self.u_rows, self.K, self.chain,
                             self._examples(examples))

    def gold(self, examples: np.ndarray) -> list[np.ndarray]:
        Y = self._gold_array(training=False)
        sp = self.sent_ptr
        return [Y[sp[i]:sp[i + 1]] for i in self._examples(examples)]

    def metric(self, gold: list[Any], predicted: list[Any]) -> dict[str, float]:
        """Token accuracy = (# tokens with predicted tag = gold tag) / (# tokens)."""
        if len(gold) != len(predicted):
            raise ValueError("gold and predicted differ in number of sentences")
        n = 0
        correct = 0
        for g, p in zip(gold, predicted, strict=True):
            g = np.asarray(g)
            p = np.asarray(p)
            if g.shape != p.shape:
                raise ValueError("gold and predicted sentences differ in length")
            n += g.shape[0]
            correct += int(np.count_nonzero(g == p))
        acc = correct / n if n else 0.0
        return {"score": acc, "accuracy": acc, "tokens": float(n)}

    # -- records ------------------------------------------------------------------------------
    def _y(self, i: int, y: Any) -> np.ndarray:
        y = np.ascontiguousarray(y, np.int32).reshape(-1)
        n = int(self.sent_ptr[i + 1] - self.sent_ptr[i])
        if y.shape[0] != n:
            raise ValueError(f"example {i} has {n} tokens, got {y.shape[0]} tags")
        if n and (y.min() < 0 or y.max() >= self.K):
            raise ValueError(f"tag ids must be in [0, {self.K})")
        return y

    def phi_delta(self, i: int, y: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y) (sorted unique, no zeros) and Hamming Δ."""
        i = int(i)
        idx, val, ham, _ = phi_kernel(_EMPTY, self.u_rows, self.K, self.G, self.chain,
                                      self._gold_array(), i, self._y(i, y))
        return idx.astype(INDEX_DTYPE, copy=False), val, float(ham)

    def score(self, w: np.ndarray, i: int, y: Any) -> float:
        """w·Φ(x_i, y) (valued emissions, START/inner/END transitions and the B features of
        tokens 1..n-1 on their transitions), computed directly."""
        w = self._w(w)
        i = int(i)
        y = self._y(i, y)
        F, K = self.u_rows, self.K
        a = int(self.sent_ptr[i])
        s = 0.0
        for t, tag in enumerate(y):
            q = slice(self.feat_ptr[a + t], self.feat_ptr[a + t + 1])
            f = self.feat_idx[q].astype(np.int64)
            v = np.ones(f.shape[0]) if self.feat_val is None else self.feat_val[q]
            if self.pairs is None:
                s += float((v * w[f * K + tag]).sum())
            else:  # pairs without a weight score 0
                j = np.array([pair_index(*self.pairs, fi, tag) for fi in f], np.int64)
                s += float((v[j >= 0] * w[j[j >= 0]]).sum())
        path = [K, *(int(v) for v in y), K]
        for p, c in zip(path[:-1], path[1:], strict=True):
            s += float(w[F * K + p * (K + 1) + c])
        if self.bfeat_ptr is not None:
            for t in range(1, len(y)):
                q = slice(self.bfeat_ptr[a + t], self.bfeat_ptr[a + t + 1])
                g = self.bfeat_idx[q].astype(np.int64)
                v = 1.0 if self.bfeat_val is None else self.bfeat_val[q]
                s += float((v * w[self.bigram_base + g * K * K + y[t - 1] * K + y[t]]).sum())
        return s

    # -- partially labelled data (the latent SSVM of solvers.cccp) ----------------------------
    @property
    def partial(self) -> bool:
        """Whether some token's label is unknown or a set (the targets are then imputed)."""
        return self.allowed_ptr is not None

    def partial_counts(self) -> dict[str, int]:
        """Tokens whose label is unknown, tokens whose label is a set of two or more, and
        examples with any such token (all 0 for fully labelled data)."""
        if self.allowed_ptr is None:
            return {"unknown": 0, "sets": 0, "partial_examples": 0}
        lens = np.diff(self.allowed_ptr)
        return {"unknown": int(np.count_nonzero(lens == 0)),
                "sets": int(np.count_nonzero(lens > 1)),
                "partial_examples": int(np.count_nonzero(~self.complete_examples()))}

    def complete_examples(self) -> np.ndarray:
        """bool per example: every token's label is known (one admitted label)."""
        n = self.n_examples
        if self.allowed_ptr is None:
            return np.ones(n, np.bool_)
        bad = (np.diff(self.allowed_ptr) != 1).astype(np.int64)
        per = np.add.reduceat(bad, np.minimum(self.sent_ptr[:-1], bad.size - 1)) if bad.size \
            else np.zeros(n, np.int64)
        per[np.diff(self.sent_ptr) == 0] = 0  # (reduceat of an empty range reads one entry)
        return per == 0

    def known_targets(self) -> np.ndarray:
        """int32 per token: its label where known (one admitted label), else −1."""
        if self.allowed_ptr is None:
            return self._gold_array().copy()
        lens = np.diff(self.allowed_ptr)
        out = np.full(lens.shape[0], -1, np.int32)
        one = lens == 1
        out[one] = self.allowed_idx[self.allowed_ptr[:-1][one]]
        return out

    def impute(self, w: np.ndarray, examples: np.ndarray | None = None) -> np.ndarray:
        """The most likely consistent tagging of each example under w (the latent step of
        CCCP): argmax_y w·Φ(x_i, y) over the taggings whose every tag is admitted (a known
        token keeps its label, a set token takes one of its set, an unknown one any) and that
        obey the label scheme (``label_rules``); int32 per token of ``examples`` (default all) in
        order. Admission is an emission of −∞ for every label not admitted; fully known
        examples are copied, not decoded."""
        ex = np.arange(self.n_examples) if examples is None else self._examples(examples)
        known = self.known_targets()
        sp = self.sent_ptr
        out = np.concatenate([known[sp[i]:sp[i + 1]] for i in ex]) if ex.size else \
            np.zeros(0, np.int32)
        if self.allowed_ptr is None:
            return out
        todo = ex[~self.complete_examples()[ex]]
        if todo.size == 0:
            return out
        from .decoding import kbest_batch

        allowed, first, last = _constraint_arrays(self.label_rules, self.K)
        free = _constraint_arrays(None, self.K)
        ptr = np.zeros(ex.shape[0] + 1, np.int64)
        ptr[1:] = np.cumsum(sp[ex + 1] - sp[ex])
        where = dict(zip(ex.tolist(), ptr[:-1].tolist(), strict=True))
        ap, ai, K = self.allowed_ptr, self.allowed_idx, self.K
        for e0, sc, _ in self._scored_batches(w, todo, None):
            n_b = int(sc.sent_ptr[-1])
            toks = np.concatenate([np.arange(sp[i], sp[i + 1]) for i in
                                   todo[e0:e0 + sc.sent_ptr.shape[0] - 1]])
            lens = ap[toks + 1] - ap[toks]
            pen = np.where(np.repeat(lens > 0, K), -np.inf, 0.0).reshape(n_b, K)
            rows = np.repeat(np.arange(n_b), lens)
            cols = ai[np.concatenate([np.arange(ap[q], ap[q + 1]) for q in toks[lens > 0]])
                      ] if np.any(lens) else np.zeros(0, np.int32)
            pen[rows, cols] = 0.0
            em = sc.em + pen.reshape(-1)
            tags, _, counts = kbest_batch(em, sc.sent_ptr, K, sc.tr, sc.start, sc.end,
                                          sc.pos_tr, sc.pos_index, np.zeros(0, np.int32),
                                          allowed, first, last, 1)
            if np.any(counts == 0):  # no tagging obeys the scheme: the admitted labels win
                tags, _, counts = kbest_batch(em, sc.sent_ptr, K, sc.tr, sc.start, sc.end,
                                              sc.pos_tr, sc.pos_index, np.zeros(0, np.int32),
                                              *free, 1)
            bsp = sc.sent_ptr
            for j in range(bsp.shape[0] - 1):
                i = int(todo[e0 + j])
                out[where[i]:where[i] + int(bsp[j + 1] - bsp[j])] = tags[bsp[j]:bsp[j + 1]]
        return out

    def changed_examples(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """bool per example: whether the per-token targets ``old`` and ``new`` differ on it."""
        diff = (np.asarray(old) != np.asarray(new)).astype(np.int64)
        if diff.size == 0:
            return np.zeros(self.n_examples, np.bool_)
        per = np.add.reduceat(diff, np.minimum(self.sent_ptr[:-1], diff.size - 1))
        per[np.diff(self.sent_ptr) == 0] = 0
        return per > 0

    def example_target(self, targets: np.ndarray, i: int) -> np.ndarray:
        """Example i's tagging in per-token ``targets`` (of every example, as :meth:`impute`)."""
        return targets[self.sent_ptr[i]:self.sent_ptr[i + 1]]

    def with_targets(self, targets: np.ndarray, inert: np.ndarray | None = None
                     ) -> SequenceTask:
        """This task with the complete taggings ``targets`` (int32 per token, e.g. from
        :meth:`impute`) as its gold tags: φ is taken against them, Δ stays the annotation's.
        ``inert`` (bool per example): examples that give no records (the labelled examples'
        problem alone, CCCP's first step); the arrays are shared, not copied."""
        import copy

        t = np.ascontiguousarray(targets, np.int32)
        if t.shape != (self.feat_ptr.shape[0] - 1,) or (t.size and (t.min() < 0
                                                                     or t.max() >= self.K)):
            raise ValueError("targets must hold one tag id in [0, K) per token")
        out = copy.copy(self)
        out.Y, out._unknown_gold, out._imputed = t, False, True
        out._inert = None if inert is None else np.ascontiguousarray(inert, np.bool_)
        return out

    # -- k best, constrained decoding, confidence (the kernels of .decoding) -------------------
    def chain_scores(self, w: np.ndarray, examples: np.ndarray) -> ChainScores:
        """The emissions, transitions and B-feature matrices of ``examples`` under w
        (float64), laid out for :mod:`demidcd.tasks.chain.decoding`."""
        return ChainScores(*chain_scores_kernel(self._w(w), self.u_rows, self.K, self.chain,
                                                self._examples(examples)))

    def _scored_batches(self, w: np.ndarray, examples: np.ndarray, fixed: np.ndarray | None,
                        max_tokens: int = 1 << 16):
        """(first example, ChainScores, fixed tags of its tokens) over consecutive batches of
        ``examples`` of at most ``max_tokens`` tokens (one longer sentence alone), so that the
        score tables stay small whatever the input's size. ``fixed`` holds one tag id (−1:
        free) per token of the examples in order, or is None."""
        ex = self._examples(examples)
        lens = self.sent_ptr[ex + 1] - self.sent_ptr[ex]
        if fixed is not None:
            fixed = np.ascontiguousarray(fixed, np.int32).reshape(-1)
            if fixed.shape[0] != int(lens.sum()):
                raise ValueError(f"fixed must hold one tag per token ({int(lens.sum())}), got "
                                 f"{fixed.shape[0]}")
            if fixed.size and (fixed.min() < -1 or fixed.max() >= self.K):
                raise ValueError(f"fixed tags must be -1 (free) or in [0, {self.K})")
        ends = np.cumsum(lens)
        e0, tok0 = 0, 0
        while e0 < ex.shape[0]:
            e1 = max(int(np.searchsorted(ends, tok0 + max_tokens, side="right")), e0 + 1)
            sc = self.chain_scores(w, ex[e0:e1])
            n = int(sc.sent_ptr[-1])
            fx = fixed[tok0:tok0 + n] if fixed is not None else np.zeros(0, np.int32)
            yield e0, sc, fx
            e0, tok0 = e1, tok0 + n

    def _empty_score(self, w: np.ndarray) -> float:
        """w·Φ of an empty sentence: the START → END transition."""
        K = self.K
        return float(self._w(w)[self.u_rows * K + K * (K + 1) + K])

    def kbest(self, w: np.ndarray, examples: np.ndarray, k: int,
              fixed: np.ndarray | None = None, constraints: tuple | None = None
              ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The k best tag sequences y of each example by s(y) = w·Φ(x_i, y)
        (:func:`~demidcd.tasks.chain.decoding.kbest_batch`): per example (int32 (c, n) tags,
        float64 (c,) scores), best first, ties in reversed-lexicographic order, c ≤ k (c < k
        when fewer sequences are admissible). Rank 0 is :meth:`decode`'s tagging with the same
        score. ``fixed``: one tag id per token of the examples in order, −1 = free (Wapiti's
        forced labels); ``constraints``: (allowed K·K, allowed_start K, allowed_end K) booleans
        (:func:`~demidcd.tasks.chain.decoding.scheme_transitions`), or None. Where the fixed tags
        leave no tagging that obeys the constraints, the fixed tags win: that example's list is
        taken without the constraints."""
        from .decoding import kbest_batch

        k = int(k)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        allowed, first, last = _constraint_arrays(constraints, self.K)
        free = _constraint_arrays(None, self.K)
        out = []
        for _, sc, fx in self._scored_batches(w, examples, fixed):
            tags, scores, counts = kbest_batch(
                sc.em, sc.sent_ptr, self.K, sc.tr, sc.start, sc.end, sc.pos_tr, sc.pos_index,
                fx, allowed, first, last, k)
            sp = sc.sent_ptr
            for e in range(sp.shape[0] - 1):
                n, c = int(sp[e + 1] - sp[e]), int(counts[e])
                if c == 0 and allowed.size + first.size + last.size:
                    # the fixed tags break the constraints: they win (a batch of one sentence)
                    one = np.array([0, n], np.int64)
                    fe = fx[sp[e]:sp[e + 1]] if fx.size else fx
                    pi = sc.pos_index[sp[e]:sp[e + 1]] if sc.pos_index.size else sc.pos_index
                    t1, s1, c1 = kbest_batch(sc.em[sp[e] * self.K:sp[e + 1] * self.K], one,
                                             self.K, sc.tr, sc.start, sc.end, sc.pos_tr, pi, fe,
                                             *free, k)
                    c = int(c1[0])
                    out.append((t1[:c * n].reshape(c, n), s1[:c].copy()))
                    continue
                ys = tags[k * sp[e]:k * sp[e] + c * n].reshape(c, n)
                sco = scores[e * k:e * k + c].copy()
                if n == 0:
                    sco[:] = self._empty_score(w)
                out.append((ys, sco))
        return out

    def decode_constrained(self, w: np.ndarray, examples: np.ndarray,
                           fixed: np.ndarray | None = None, constraints: tuple | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """argmax_y w·Φ(x_i, y) over the taggings that keep the ``fixed`` tags and obey the
        ``constraints`` (arguments, and the fixed tags winning over the constraints, as
        :meth:`kbest`): (flat int32 tags, int64 ptr, float64 scores), as :meth:`decode_flat`
        plus the scores. Without either it equals :meth:`decode_flat` tag for tag."""
        ex = self._examples(examples)
        best = self.kbest(w, ex, 1, fixed, constraints)
        ptr = np.zeros(ex.shape[0] + 1, np.int64)
        ptr[1:] = np.cumsum(self.sent_ptr[ex + 1] - self.sent_ptr[ex])
        tags = np.empty(int(ptr[-1]), np.int32)
        scores = np.empty(ex.shape[0], np.float64)
        for e, (ys, sco) in enumerate(best):
            tags[ptr[e]:ptr[e + 1]] = ys[0]
            scores[e] = sco[0]
        return tags, ptr, scores

    def confidence(self, w: np.ndarray, examples: np.ndarray, tags: np.ndarray,
                   fixed: np.ndarray | None = None, constraints: tuple | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """Max-marginal margins of the taggings ``tags`` (flat int32, the layout of
        :meth:`decode_constrained`) under the same ``fixed`` / ``constraints``
        (:func:`~demidcd.tasks.chain.confidence.confidence_batch`): (per-token margins
        M_t(y_t) − max_{k≠y_t} M_t(k), per-example minima), float64, with
        M_t(k) = max {w·Φ(x, y') : y' admissible, y'_t = k}. For the best tagging every margin
        is ≥ 0 and an example's minimum is its best score minus its second best (+∞ where no
        other tagging is admissible, e.g. a token whose tag is fixed). A tagging that breaks the
        constraints (its fixed tags won, see :meth:`kbest`) is measured without them."""
        from .confidence import confidence_batch

        allowed, first, last = _constraint_arrays(constraints, self.K)
        free = _constraint_arrays(None, self.K)
        tags = np.ascontiguousarray(tags, np.int32).reshape(-1)
        margins, sent = [], []
        tok0 = 0
        for _, sc, fx in self._scored_batches(w, examples, fixed):
            n = int(sc.sent_ptr[-1])
            y = tags[tok0:tok0 + n]
            m, s, _ = confidence_batch(sc.em, sc.sent_ptr, self.K, sc.tr, sc.start, sc.end,
                                       sc.pos_tr, sc.pos_index, fx, allowed, first, last, y,
                                       False)
            if allowed.size + first.size + last.size and np.any(s == -np.inf):
                # taggings that break the constraints (fixed tags won, see kbest): without them
                m0, s0, _ = confidence_batch(sc.em, sc.sent_ptr, self.K, sc.tr, sc.start,
                                             sc.end, sc.pos_tr, sc.pos_index, fx, *free, y,
                                             False)
                bad = s == -np.inf
                s[bad] = s0[bad]
                tok = np.repeat(bad, np.diff(sc.sent_ptr))
                m[tok] = m0[tok]
            margins.append(m)
            sent.append(s)
            tok0 += n
        if tok0 != tags.shape[0]:
            raise ValueError(f"tags must hold one tag per token ({tok0}), got {tags.shape[0]}")
        cat = np.concatenate
        return (cat(margins) if margins else np.zeros(0), cat(sent) if sent else np.zeros(0))
