"""The dependency parsing :class:`~demidcd.tasks.base.Task`: first-order arc-factored labelled
parsing over :class:`~.encoding.EncodedTrees`, the batch kernels (:mod:`.kernels`) behind the
Task protocol.

A structure is a head vector y with y_d ∈ {0..n} \\ {d} for d = 1..n forming a tree rooted at
0 in which exactly one word has head 0, and a label vector l with l_d ∈ {0..L−1} (L = 0 for an
unlabelled parser); decode, gold and the records take it as an int32 (2, n) array.

Metric: unlabelled attachment score UAS = #{d : y_d = y_{i,d}} / #words and labelled LAS =
#{d : y_d = y_{i,d}, u(l_d) = u(l_{i,d})} / #words, where u(l) is the universal part of the
DEPREL (before the first ':', so ``nmod:poss`` counts as ``nmod``): the LAS of the CoNLL 2018
shared task's evaluator ``conll18_ud_eval.py``; LAS with subtypes compares the full DEPREL.
Each with and without punctuation (:func:`~.encoding.is_punct`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InputWarning, OptionError
from ..base import INDEX_DTYPE, VALUE_DTYPE, RecordBatch, Task
from .decoding import CLE, EISNER, fixed_heads_check
from .encoding import EncodedTrees
from .kernels import (
    arc_scores_kernel,
    label_scores_kernel,
    parse_kernel,
    records_kernel,
    score_kernel,
)

DEFAULT_HASHING = 1 << 23
DECODERS = ("eisner", "cle")
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


class DependencyTask(Task):
    """First-order arc-factored dependency parsing over :class:`~.encoding.EncodedTrees`, w of
    length D.

    ``decoder``: ``"eisner"`` (projective) or ``"cle"`` (non-projective), both with exactly
    one root child. ``label_arcs``: one int8 per label (bit 1: the label may sit on a root arc,
    bit 2: on any other arc), None or empty for an unlabelled parser. Structures (decode, gold)
    are int32 arrays of shape (2, n): the heads of words 1..n and their label ids (−1 when
    unlabelled); :meth:`score` and :meth:`phi_delta` of an unlabelled task also take a plain
    head vector. ``label_groups``: per label its universal-DEPREL group id
    (:func:`~.spec.label_groups`; None: every label its own group), for the LAS of
    :meth:`metric`.
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
        self._dec = EISNER if decoder == "eisner" else CLE
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
        the right head and the right universal DEPREL (the group of :func:`~.spec.label_groups`: the
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
        the argmax label ids (−1 when unlabelled) of example i, through the cached sums that
        inference uses. For tests: training and prediction never call it; with
        :meth:`label_scores` it checks the cache."""
        i = int(i)
        N = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i])
        S, lab = arc_scores_kernel(self._w(w), self.D, *self._arrays(), i)
        return S.reshape(N, N), lab.reshape(N, N)

    def label_scores(self, w: np.ndarray, i: int) -> np.ndarray:
        """The (n+1)×(n+1)×L tensor s(h, d, l) of example i computed arc by arc (−inf where an
        arc or a label on it is impossible): the reference for tests of :meth:`arc_scores`'
        cached sums (training and prediction never call it)."""
        i = int(i)
        N = int(self.enc.tok_ptr[i + 1] - self.enc.tok_ptr[i])
        T = label_scores_kernel(self._w(w), self.D, *self._arrays(), i)
        return T.reshape(N, N, self.n_labels)
