"""The dependency parser estimator (first-order, arc-factored, labelled; single root): the
task's maths, kernels and data flow are in :mod:`demidcd.tasks.dependency`."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from ..errors import ModelFileError, OptionError
from ..io.model import load_model, save_model
from ..primitives.monitor import PROGRESS_EVERY, timed_step
from ..tasks.dependency.encoding import encode_trees
from ..tasks.dependency.features import LABELLED_TEMPLATE_VERSION, TEMPLATE_VERSION
from ..tasks.dependency.spec import (
    Heads,
    Sentence,
    fill_pos,
    label_groups,
    label_set,
    pos_maps,
    split_sentences,
    split_trees,
    universal_deprel,
)
from ..tasks.dependency.task import DECODERS, DEFAULT_HASHING, DependencyTask, ProjectiveFallback
from .base import StructuredEstimator, check_sentences, estimator_init, param


class DependencyParser(StructuredEstimator):
    """First-order arc-factored labelled dependency parser trained as a structural SVM (L2 loss,
    Eq. 1); every tree has exactly one word attached to the root (UD's rule).

    X is a list of sentences, each a list of (word, POS) pairs or (word, POS, second POS)
    triples (e.g. UPOS and XPOS: the second POS feeds a second set of POS templates); Y a list
    of trees, each a list of (head, DEPREL) pairs of words 1..n (0 = root), or of heads alone
    for an unlabelled parser. Arc scores s(h, d, l) = w·f(h, d) + w·g(h, d, l) (the label
    conjoined with a small set of templates, see the module docstring), decoded with
    s(h, d) = max_l s(h, d, l) and the argmax label remembered per arc; Δ = 1 per wrong head
    + 0.5 per right head with a wrong label. :meth:`predict` returns trees in the form Y was
    given to :meth:`fit` ((head, DEPREL) pairs; the root word's DEPREL is the label seen on
    root words in training, ``root`` in UD); ``predict(X, fixed=...)`` keeps heads (and
    DEPRELs) given in advance and decodes the rest of the tree around them.

    A parser fitted on two POS columns takes, in :meth:`predict` and :meth:`metrics`, sentences
    whose POS or second POS is ``"_"`` for every word of X (what a tagger that fills one column
    leaves, e.g. XPOS only): that column is filled from the other through the maps learnt in
    :meth:`fit` (``pos_by_second_``, ``second_by_pos_``; see
    :func:`~demidcd.tasks.dependency.spec.pos_maps`): per word the tag of the other column seen most
    often in training with its form and tag, else with its tag; a tag never seen there → ``"_"``.

    Extra hyper-parameters: ``decoder`` (``eisner``: projective, ``cle``: non-projective
    Chu-Liu-Edmonds; used in training and prediction) and ``hashing`` (D, the number of hashed
    features = len(w)). Fitted: ``coef_``, ``second_pos_``, ``labels_`` (sorted DEPRELs, None
    when unlabelled), ``label_arcs_`` (per label 1: root arcs, 2: others, 3: both),
    ``pos_by_second_``, ``second_by_pos_`` (None with one POS column), ``result_``.
    :meth:`score` is UAS (punctuation included); :meth:`metrics` adds UAS without punctuation
    and LAS (universal DEPREL: the part before ':', as the CoNLL 2018 evaluator) and LAS with
    subtypes (the full DEPREL), each with and without punctuation.

    Accuracy on UD English EWT: benchmarks/README.md ("Evidence behind the defaults").
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

    def _labels(self) -> list[str] | None:
        return getattr(self, "labels_", None)

    def _task(self, X: list[Sentence], Y: list[Heads] | None) -> DependencyTask:
        words, tags, coarse = split_sentences(X)
        fitted = getattr(self, "second_pos_", None)
        if fitted is not None and fitted != (coarse is not None):
            raise OptionError("the model was trained with " + ("two POS columns (word, POS, "
                              "second POS)" if fitted else "one POS column (word, POS)") +
                              " per token; give the data the same way")
        if coarse is not None:
            tags, coarse = self._fill_pos(words, tags, coarse)
        if Y is not None and len(Y) != len(X):
            raise OptionError(f"X has {len(X)} sentences but Y has {len(Y)}")
        heads, rels = split_trees(Y) if Y is not None else (None, None)
        labels = self._labels()
        ids = groups = label_group = None
        if labels is not None:
            label_group, gindex = label_groups(labels)
        if labels is not None and heads is not None:
            index = {r: k for k, r in enumerate(labels)}
            ids = [[index.get(r, -1) for r in rs] for rs in rels] if rels is not None else \
                [[-1] * len(hs) for hs in heads]
            groups = [[gindex.get(universal_deprel(r), -1) for r in rs] for rs in rels] \
                if rels is not None else None
        try:
            enc = encode_trees(words, tags, heads, coarse, ids, groups)
            return DependencyTask(enc, int(self._hashing()), self._decoder(),
                                  getattr(self, "label_arcs_", None), label_group)
        except ValueError as e:
            raise OptionError(str(e)) from None

    def _fill_pos(self, words: list[list[str]], tags: list[list[str]], second: list[list[str]]
                  ) -> tuple[list[list[str]], list[list[str]]]:
        """The two POS columns, one that is ``"_"`` for every word filled from the other
        through the maps learnt in :meth:`fit` (unchanged before fit, or when both are
        filled)."""
        by_second = getattr(self, "pos_by_second_", None)
        by_pos = getattr(self, "second_by_pos_", None)
        if by_second is None or by_pos is None:
            return tags, second
        no_pos = all(p == "_" for ps in tags for p in ps)
        no_second = all(q == "_" for qs in second for q in qs)
        if no_pos and no_second:
            raise OptionError("every POS tag of X is '_' in both columns: the parser needs one "
                              "of them")
        if no_pos:
            tags = fill_pos(words, second, by_second)
        elif no_second:
            second = fill_pos(words, tags, by_pos)
        return tags, second

    def filled_pos(self, X: list[Sentence]) -> tuple[list[list[str]], list[list[str]] | None]:
        """(POS, second POS or None) of the sentences of X as :meth:`predict` uses them: a
        column that is ``"_"`` for every word filled from the other (see the class
        docstring); ``"_"`` where a tag was never seen in training."""
        self._check_fitted()
        words, tags, second = split_sentences(X)
        if second is not None:
            tags, second = self._fill_pos(words, tags, second)
        return tags, second

    def fit(self, X: list[Sentence], Y: list[Heads], X_dev: list[Sentence] | None = None,
            Y_dev: list[Heads] | None = None) -> DependencyParser:
        """Learn w from sentences X with gold trees Y (optional dev set for the log)."""
        self._check()
        X = check_sentences(X)
        if not X:
            raise OptionError("cannot fit on an empty data set")
        self._begin_fit()  # bad options fail before any work
        for attr in ("coef_", "result_"):  # a new fit forgets the old model
            self.__dict__.pop(attr, None)
        self.second_pos_ = self.labels_ = self.label_arcs_ = None
        self.pos_by_second_ = self.second_by_pos_ = None
        if len(Y) != len(X):
            raise OptionError(f"X has {len(X)} sentences but Y has {len(Y)}")
        heads, rels = split_trees(Y)
        if rels is not None:
            self.labels_, self.label_arcs_ = label_set(heads, rels)
        with timed_step(self._say(), f"building features of {len(X):,} sentences",
                        every=PROGRESS_EVERY):
            task = self._task(X, Y)
        self.second_pos_ = task.enc.cpos.shape[0] > 0
        if self.second_pos_:
            self.second_by_pos_, self.pos_by_second_ = pos_maps(*split_sentences(X))
        dev_eval = None
        if X_dev is not None and Y_dev is not None:
            dtask = self._task(X_dev, Y_dev)
            ex = np.arange(dtask.n_examples)
            gold = dtask.gold(ex)

            def dev_eval(w: np.ndarray) -> dict:
                return dtask.metric(gold, dtask.decode(w, ex), ex)

        self._train(task, dev_eval)
        return self

    def predict(self, X: list[Sentence], fixed: list[list[Any]] | None = None) -> list[Heads]:
        """The argmax tree of each sentence: (head, DEPREL) pairs of words 1..n (0 = root), or
        heads alone for a parser fitted on heads alone.

        ``fixed`` (``predict --force``): per sentence one entry per word, None (free), a head
        (0..n, not the word itself) or a (head or None, DEPREL or None) pair; the given heads
        and DEPRELs are kept and the rest decoded around them, i.e. argmax w·Φ(x, y, l) over
        the single-root trees (projective for Eisner) with y_d and l_d as given wherever
        given, by masking the arc scores s(h, d) (a given head g: s(h, d) = −∞ for h ≠ g; a
        given label l: s(h, d) = s(h, d, l)). A DEPREL the parser does not know, a head out
        of range and given heads that no tree keeps (two words on the root, a cycle:
        :class:`~demidcd.tasks.dependency.task.FixedHeadsError`) raise OptionError. With Eisner,
        a sentence whose given heads no *projective* tree keeps is decoded with
        Chu-Liu-Edmonds (non-projective) instead, with a :class:`ProjectiveFallback`
        warning."""
        self._check_fitted()
        self._check()
        X = check_sentences(X)
        if not X:
            return []
        task = self._task(X, None)
        labels = self._labels()
        examples = np.arange(len(X))
        if fixed is None:
            trees = task.decode(self.coef_, examples)
        else:
            fhead, flab = self._fixed_ids(task, X, fixed)
            trees, fell = task.decode_fixed(self.coef_, examples, fhead, flab)
            if fell.any():
                where = np.flatnonzero(fell)
                warnings.warn(ProjectiveFallback(
                    where.tolist(), f"{where.shape[0]:,} sentence(s) (the first: fixed"
                    f"[{where[0]}]) have given heads that no projective tree keeps: decoded "
                    "with Chu-Liu-Edmonds (non-projective)"), stacklevel=2)
        if labels is None:
            return [t[0].tolist() for t in trees]
        return [[(int(h), labels[k]) for h, k in t.T] for t in trees]

    def _fixed_ids(self, task: DependencyTask, X: list[Sentence], fixed: list[list[Any]]
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``fixed`` (see :meth:`predict`) as given heads and label ids per position of the
        task's encoding (−1: free)."""
        if isinstance(fixed, str | bytes) or len(fixed) != len(X):
            raise OptionError(f"fixed must hold one list per sentence ({len(X)})")
        labels = self._labels()
        index = {r: k for k, r in enumerate(labels or ())}
        tp = task.enc.tok_ptr
        fhead = np.full(int(tp[-1]), -1, np.int32)
        flab = np.full(int(tp[-1]), -1, np.int32)
        for k, (s, f) in enumerate(zip(X, fixed, strict=True)):
            n = len(s)
            if isinstance(f, str | bytes) or len(f) != n:
                raise OptionError(f"fixed[{k}] must hold one entry per word ({n}): None, a "
                                  "head or a (head, DEPREL) pair")
            a = int(tp[k])
            for t, g in enumerate(f):
                if g is None:
                    continue
                h, r = (g if isinstance(g, tuple | list) and len(g) == 2 else (g, None))
                if h is not None:
                    if isinstance(h, bool) or not isinstance(h, int | np.integer) \
                            or not 0 <= h <= n or h == t + 1:
                        raise OptionError(f"fixed[{k}][{t}]: a head must be an integer in "
                                          f"0..{n} other than the word's own {t + 1}, got {g!r}")
                    fhead[a + t + 1] = h
                if r is not None:
                    if r not in index:
                        raise OptionError(f"fixed[{k}][{t}]: the parser has no DEPREL {r!r}" +
                                          ("" if labels else " (it is unlabelled)"))
                    flab[a + t + 1] = index[r]
        return fhead, flab

    def metrics(self, X: list[Sentence], Y: list[Heads]) -> dict[str, float]:
        """UAS with punctuation (``score``, ``uas``) and without (``uas_no_punct``); when the
        parser and Y have labels, LAS as the CoNLL 2018 evaluator (the universal DEPREL, before
        ':'; ``las``, ``las_no_punct``) and LAS with subtypes (the full DEPREL;
        ``las_subtypes``, ``las_subtypes_no_punct``)."""
        self._check_fitted()
        self._check()
        X = check_sentences(X)
        task = self._task(X, Y)
        ex = np.arange(task.n_examples)
        m = task.metric(task.gold(ex), task.decode(self.coef_, ex))
        if Y and split_trees(Y)[1] is None:
            for k in ("las", "las_no_punct", "las_subtypes", "las_subtypes_no_punct"):
                m.pop(k, None)
        return m

    def score(self, X: list[Sentence], Y: list[Heads]) -> float:
        """UAS (punctuation included) of :meth:`predict` against Y."""
        return float(self.metrics(X, Y)["score"])

    def unknown_labels(self, Y: list[Heads]) -> dict[str, int]:
        """DEPRELs of Y the parser never saw in training, with their counts."""
        labels = set(self._labels() or ())
        rels = split_trees(Y)[1] if labels else None
        out: dict[str, int] = {}
        for rs in rels or ():
            for r in rs:
                if r not in labels:
                    out[r] = out.get(r, 0) + 1
        return out

    def training_task(self, X: list[Sentence], Y: list[Heads]) -> DependencyTask:
        """The bound task for X, Y (for objectives)."""
        return self._task(X, Y)

    def feature_summary(self) -> str:
        dim = self.coef_.shape[0]
        labels = self._labels()
        what = f"{len(labels)} DEPRELs" if labels is not None else "unlabelled"
        return (f"hashed arc features (McDonald et al. 2005 templates) into {dim:,} weights "
                f"({dim * 8 / 2**20:.1f} MiB float64), {what}, decoder {self._decoder()}")

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model atomically (npz + JSON metadata, no pickle)."""
        labels = self._labels()
        fm: dict[str, Any] = {"kind": "DependencyFeatures",
                              "template_version": TEMPLATE_VERSION if labels is None else
                              LABELLED_TEMPLATE_VERSION,
                              "hashing": int(self._hashing()), "second_pos": bool(self.second_pos_)}
        if labels is not None:
            fm["labels"] = list(labels)
            fm["label_arcs"] = [int(a) for a in self.label_arcs_]
        if getattr(self, "pos_by_second_", None) is not None:
            fm["pos_by_second"] = dict(self.pos_by_second_)
            fm["second_by_pos"] = dict(self.second_by_pos_)
        save_model(path, self.coef_, {}, {**self._meta(), "featurizer": fm})

    @classmethod
    def load(cls, path: str | os.PathLike[str], _loaded: tuple | None = None) -> DependencyParser:
        """Read a model written by :meth:`save` (``allow_pickle=False``); a model of template
        version 1 (before labels) loads as an unlabelled parser."""
        w, _, meta = _loaded or load_model(path, task=cls.task_name)
        try:
            fm = meta["featurizer"]
            if fm.get("kind") != "DependencyFeatures":
                raise ValueError("not a dependency featurizer")
            version = fm.get("template_version")
            if version not in (TEMPLATE_VERSION, LABELLED_TEMPLATE_VERSION):
                raise ValueError(f"unsupported feature template version {version}")
            hp = dict(meta.get("hyper_parameters", {}))
            hp["hashing"] = fm["hashing"]
            obj = cls(**hp)
            obj._check()
            obj.second_pos_ = fm["second_pos"]
            if not isinstance(obj.second_pos_, bool):
                raise ValueError("second_pos is not a boolean")
            obj.labels_ = obj.label_arcs_ = None
            if version == LABELLED_TEMPLATE_VERSION:
                labels, arcs = fm["labels"], fm["label_arcs"]
                if not (isinstance(labels, list) and isinstance(arcs, list) and labels
                        and len(labels) == len(arcs) and len(set(labels)) == len(labels)
                        and all(isinstance(r, str) and r for r in labels)
                        and all(a in (1, 2, 3) for a in arcs)
                        and any(a & 1 for a in arcs) and any(a & 2 for a in arcs)
                        and len(labels) <= obj.hashing):
                    raise ValueError("bad labels / label_arcs")
                obj.labels_, obj.label_arcs_ = labels, arcs
            obj.pos_by_second_ = obj.second_by_pos_ = None  # models before the maps: None
            if obj.second_pos_ and "pos_by_second" in fm:
                maps = fm["pos_by_second"], fm["second_by_pos"]
                if not all(isinstance(m, dict) and m and all(
                        isinstance(k, str) and isinstance(v, str) for k, v in m.items())
                        for m in maps):
                    raise ValueError("bad POS maps")
                obj.pos_by_second_, obj.second_by_pos_ = maps
            obj.data_options_ = dict(meta.get("data_options") or {})
        except (KeyError, TypeError, ValueError, AttributeError, OptionError) as e:
            raise ModelFileError(str(path), f"corrupt model metadata ({e})") from None
        if w.shape[0] != obj.hashing:
            raise ModelFileError(str(path), "weight vector does not match the feature hashing")
        obj._loaded(path, w, meta)
        return obj


# ---------------------------------------------------------------------------------------------
# the task's registry entry (CLI)
# ---------------------------------------------------------------------------------------------
