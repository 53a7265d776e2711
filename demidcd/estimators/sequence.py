"""Sequence labelling estimators: part-of-speech style tagging, chunking and named entities
(first-order chain, Viterbi)."""


from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np

from ..errors import DemidcdError, InputTypeError, ModelFileError, OptionError
from ..io.model import load_model, save_model
from ..primitives.monitor import PROGRESS_EVERY, timed_step
from ..tasks.chain.features import DEFAULT_MIN_COUNT, SequenceFeaturizer
from ..tasks.chain.partial import (
    encode_partial,
    has_partial,
    label_names,
    partial_counts,
    partial_seen_pairs,
)
from ..tasks.chain.records import seen_pairs
from ..tasks.chain.task import SequenceTask
from ..tasks.chain.template import DictFeaturizer, TemplateFeaturizer, resolve_template
from ..tasks.chain.template_language import Template
from .base import (
    StructuredEstimator,
    check_sentences,
    check_tags,
    estimator_init,
    param,
    token_kind,
)
from .inspection import WeightInspection
from .layout import choose_layout, encoded_bytes
from .parts import PreparedFit

FEATURIZERS: dict[str, Any] = {"SequenceFeaturizer": SequenceFeaturizer,
                                TemplateFeaturizer.kind: TemplateFeaturizer,
                                DictFeaturizer.kind: DictFeaturizer}
"""The featurizer classes by the ``kind`` their state records (``load`` dispatches on it)."""

DICT_MIN_COUNT = 1
"""``min_count=None`` for feature dicts: every feature, as CRFsuite keeps them all."""
TEMPLATE_MIN_COUNT = 1
"""``min_count=None`` for a CRF++ / Wapiti template: every feature, as ``crf_learn`` (``-f 1``)
and Wapiti keep them all."""

_TEMPLATE_PARAM = param("template", str | os.PathLike | Template | None)
_WEIGHTS_PARAM = param("weights", str)
_STATES_PARAM = param("all_possible_states", bool | None, None)


def partial_learners() -> tuple[str, ...]:
    """The learners that train on partially labelled data (:attr:`~demidcd.solvers.Learner.
    partial`: the DCD family by CCCP, the CRF by the partial-label likelihood)."""
    from ..solvers import LEARNERS

    return tuple(k for k, v in LEARNERS.items() if v.partial)


CONSTRAINTS_DEFAULT = False
"""Whether chunk and entity taggers obey their label scheme when ``constraints`` is None: off,
as they do not raise CoNLL-2000 chunk F1 and raise CoNLL-2002 Spanish entity F1 by under 0.1
(benchmarks/README.md, "Evidence behind the defaults"). conlleval reads an I-X that follows O
as a chunk start, so an ill-formed tagging is still scored as chunks."""


class SequenceTagger(WeightInspection, StructuredEstimator):
    """First-order chain structural SVM tagger (L2 loss, Eq. 1) over a feature template.

    X is a list of sentences, Y a list of tag lists. A token is

    * a word, or a tuple ``(word, col_1, …)`` of strings: with ``template=None`` the built-in
      features (:mod:`demidcd.tasks.chain.features`; the extra columns, e.g. POS, feed its attribute
      window); with ``template`` (a CRF++ / Wapiti template: a shipped name ``"chunking"``,
      ``"pos"``, ``"ner"``, a file path or a
      :class:`~demidcd.tasks.chain.template_language.Template`) the template's features, ``%x[r,c]``
      reading column c of the tuple (0 = the word);
    * a feature dict as sklearn-crfsuite takes it (python-crfsuite's rules: a str value →
      the indicator ``name:value``, a number → feature ``name`` with that real value, a bool →
      an indicator, a list of str → several, a nested dict → prefixed names), or a list of
      feature names (:class:`~demidcd.tasks.chain.template.DictFeaturizer`); ``sent2features``
      of the sklearn-crfsuite tutorial gives such X unchanged.

    The kind is read off the tokens, in fit as in predict and score. Extra hyper-parameters:
    ``min_count`` (feature dictionary cut-off; None: 1 for dicts and templates, which keep
    every feature as CRFsuite and CRF++ do, else
    :data:`~demidcd.tasks.chain.features.DEFAULT_MIN_COUNT`), ``hashing`` (> 0: hashed features, no
    dictionary; None: 0), ``template`` and ``weights`` (``"all"``: a weight for every
    (feature, label); ``"seen"``: only for the pairs seen together in training, as CRFsuite
    keeps them, ``seen_pairs_``; memory then grows with them, not with features x labels;
    ``"auto"``: seen for the ``crf`` learner (CRFsuite's objective: its default
    ``feature.possible_states=0``, sklearn-crfsuite's ``all_possible_states=False``), and
    for the others by a model of the run's peak memory,
    :func:`~demidcd.estimators.layout.choose_layout`: all while every pair adds little to it);
    ``all_possible_states`` (sklearn-crfsuite's name; None: ``weights`` decides): True is
    ``weights="all"``, False ``weights="seen"``;
    the others are those of :class:`StructuredEstimator`,
    except that ``C=None`` on feature dicts means :data:`~demidcd.options.C_DICTS` (0.3: such
    dicts have few features per token; see its docstring).
    Template B lines (``B01:%x[0,1]``, Wapiti's ``*``) give label-bigram features (G of them, K²
    weights each); the label transitions are always part of the chain (as if the template had
    its bare ``B`` line). Fitted: ``coef_``, ``classes_`` (tag names), ``featurizer_``,
    ``n_features_``, ``n_bfeatures_``, ``result_``. :meth:`score` is token accuracy.
    """

    task_name = "sequence"
    score_name = "accuracy"
    _capabilities = ("marginals",)  # forward-backward: the crf learner trains it
    _template = "base"  # feature template of demidcd.tasks.chain.features
    _default_min_count = DEFAULT_MIN_COUNT  # what min_count=None means (built-in template)

    __init__ = estimator_init(param("min_count", int | None), param("hashing", int | None),
                              _TEMPLATE_PARAM, _WEIGHTS_PARAM, _STATES_PARAM)

    # -- encoding ---------------------------------------------------------------------------
    def _new_featurizer(self, kind: str):
        """The featurizer for tokens of ``kind`` (:func:`~.base.token_kind`) and the
        parameters."""
        template = resolve_template(self.template)
        hashing = 0 if self.hashing is None else self.hashing
        if kind == "dict" and template is not None:
            raise OptionError("--template applies to tokens that are words or tuples of "
                              "columns; X holds feature dicts (their features are their own)")
        default = DICT_MIN_COUNT if kind == "dict" else \
            TEMPLATE_MIN_COUNT if template is not None else self._default_min_count
        min_count = default if self.min_count is None else self.min_count
        try:
            if kind == "dict":
                return DictFeaturizer(int(min_count), int(hashing))
            if template is not None:
                return TemplateFeaturizer(template, int(min_count), int(hashing))
            return SequenceFeaturizer(int(min_count), int(hashing), self._template,
                                      log=self._say())
        except (TypeError, ValueError) as e:
            raise OptionError(f"--min-count/--hashing: {e}") from None

    def _encode(self, X: list[list], fit: bool = False):
        """The featurizer's encoding of X (fitting it first with ``fit``); tokens it cannot
        take (another kind or number of columns than it was fitted on, a bad dict value) raise
        InputTypeError."""
        f = self.featurizer_
        if X and not fit:
            dicts = isinstance(f, DictFeaturizer)
            if (token_kind(X) == "dict") != dicts and any(len(s) for s in X):
                raise InputTypeError(
                    "this model was fitted on " + ("feature dicts" if dicts else
                                                   "words or tuples of columns")
                    + "; X holds " + ("words or tuples" if dicts else "feature dicts"))
        try:
            if not fit:
                return f.transform(X)
            if isinstance(f, SequenceFeaturizer):
                return f.fit(X).transform(X)
            with timed_step(self._say(), f"building features of {len(X):,} sentences",
                            every=PROGRESS_EVERY):
                return f.fit_transform(X)
        except DemidcdError:
            raise
        except (TypeError, ValueError) as e:
            raise InputTypeError(f"X: {e}") from None

    def _feature_kind(self) -> str | None:
        return "dict" if isinstance(self.__dict__.get("_featurizer"), DictFeaturizer) else None

    @property
    def _n_bfeatures(self) -> int:
        return int(getattr(self.featurizer_, "n_bfeatures", 0))

    def _task(self, X: list[list], Y: list[list[str]] | None, enc=None,
              fit: bool = False) -> SequenceTask:
        """The bound task of X (and Y); ``fit``: the training data, whose (feature, label)
        pairs become ``seen_pairs_`` with ``weights="seen"``."""
        enc = self._encode(X) if enc is None else enc
        if Y is not None and has_partial(Y):  # (objectives of partially labelled data)
            try:
                y, enc.allowed_ptr, enc.allowed_idx = encode_partial(Y, self.classes_,
                                                                     enc.n_tokens)
                enc.label_rules = self._scheme_rules(getattr(self, "constraint_scheme_", None))
                return self._bound(enc, y, fit)
            except ValueError as e:
                raise OptionError(f"Y: {e} (a label the model does not know)") from None
        return self._bound(enc, self._tag_ids(Y, enc.n_tokens), fit)

    def _tag_ids(self, Y: list[list[str]] | None, n_tokens: int) -> np.ndarray | None:
        """The flat tag ids of Y (−1: a tag not in ``classes_``), or None."""
        if Y is None:
            return None
        index = {t: k for k, t in enumerate(self.classes_)}
        return np.fromiter(map(index.get, itertools.chain.from_iterable(Y),
                               itertools.repeat(-1)), np.int32, count=n_tokens)

    def _bound(self, enc, y: np.ndarray | None, fit: bool = False) -> SequenceTask:
        """The task of encoded sentences ``enc`` with flat tag ids ``y`` (see :meth:`_task`)."""
        if fit:
            self._fit_pairs(enc, y)
        return SequenceTask(enc, y, len(self.classes_), self.featurizer_.n_features,
                            n_bigram_obs=self._n_bfeatures,
                            pairs=getattr(self, "seen_pairs_", None))

    def _warm_task(self) -> SequenceTask:
        """Two made-up sentences (tags a chunker accepts too) prepared by a silent copy of
        this estimator: its task has the real task's array types."""
        params = {**self.get_params(deep=False), "verbose": 0, "log": None, "callback": None,
                  "snapshot_dir": None, "resume": None, "init": None, "threads": 1}
        proxy = type(self)(**{k: v for k, v in params.items()
                              if k in self._get_param_names()})
        p = proxy._prepare([["a", "b"], ["b", "c", "a"]], [["B-X", "I-X"], ["O", "B-X", "I-X"]],
                           None, None)
        return proxy._bound(p.train, p.y)

    def _fit_pairs(self, enc, y: np.ndarray | None) -> None:
        """``seen_pairs_`` of the training data (None unless ``weights`` asks for them)."""
        F, K = self.featurizer_.n_features, len(self.classes_)
        weights = self._weights()
        if weights == "all":
            self.seen_pairs_ = None
            return
        pairs = seen_pairs(enc, y, F, K) if getattr(enc, "allowed_ptr", None) is None else \
            partial_seen_pairs(enc.feat_ptr, enc.feat_idx, enc.allowed_ptr, enc.allowed_idx, F, K)
        if weights == "auto" and self._algorithm() != "crf":  # (crf: CRFsuite's seen pairs)
            choice = choose_layout(F, K, self._n_bfeatures, int(pairs[1].shape[0]),
                                   encoded_bytes(enc))
            self._say()(choice.reason())
            if choice.layout == "all":
                pairs = None
        self.seen_pairs_ = pairs

    def _weights(self) -> str:
        """``weights`` resolved with sklearn-crfsuite's ``all_possible_states`` (True: a weight
        for every (feature, label), ``"all"``; False: only the pairs seen in training,
        ``"seen"``; None: ``weights`` decides); the two disagreeing is an OptionError."""
        weights = "auto" if self.weights is None else self.weights
        if weights not in ("auto", "all", "seen"):
            raise OptionError(f"--weights must be auto, all or seen, got {self.weights!r}")
        states = self.all_possible_states
        if states is None:
            return weights
        if not isinstance(states, bool | np.bool_):
            raise OptionError(f"all_possible_states must be True, False or None, got "
                              f"{states!r}")
        implied = "all" if states else "seen"
        if weights not in ("auto", implied):
            raise OptionError(f"all_possible_states={bool(states)} is weights={implied!r}, "
                              f"not weights={weights!r}: give one of them")
        return implied

    def fit(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None = None,
            Y_dev: list[list[str]] | None = None) -> SequenceTagger:
        """Learn w from sentences X with gold tags Y (optional dev set for the log); with
        ``threads`` > 1 on a large X the set-up runs in that many processes
        (:mod:`.parts`: the same model)."""
        prepared = self._prepare_in_parts(X, Y, X_dev, Y_dev)
        if prepared is None:
            prepared = self._prepare(X, Y, X_dev, Y_dev)
        del X, Y, X_dev, Y_dev  # (the caller's references may be the last ones)
        return self._fit_from(prepared, adopt=False)

    def _prepare_in_parts(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None,
                          Y_dev: list[list[str]] | None) -> PreparedFit | None:
        """:func:`~.parts.prepare_fit_parts` over ``threads`` slices of X of about equal
        tokens, where it applies (``threads`` > 1, :data:`~.parts.PARTS_MIN_TOKENS` tokens or
        more, fork, :func:`~.parts.parts_supported`); None elsewhere."""
        from .parts import (
            PARTS_MIN_TOKENS,
            PartsUnsupported,
            parts_supported,
            prepare_fit_parts,
            token_slices,
        )

        n = self.threads if isinstance(self.threads, int) else 1  # (checked later, once)
        if n < 2 or not hasattr(os, "fork") or not isinstance(X, list | tuple) or \
                not isinstance(Y, list | tuple) or len(X) != len(Y) or \
                not parts_supported(self):
            return None
        cuts = token_slices(X, n, PARTS_MIN_TOKENS)
        if cuts is None:
            return None
        try:
            return prepare_fit_parts(
                self, lambda k: (X[cuts[k]:cuts[k + 1]], Y[cuts[k]:cuts[k + 1]]),
                len(cuts) - 1, X_dev, Y_dev)
        except PartsUnsupported:
            return None

    def prepare_fit(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None = None,
                    Y_dev: list[list[str]] | None = None) -> PreparedFit:
        """Everything :meth:`fit` does before the learner starts (checks, the feature
        dictionary, the encoding, the seen pairs), as a :class:`PreparedFit` of arrays and
        metadata: :meth:`fit_prepared` of it, in this or another process (it pickles), fits
        as ``fit(X, Y, X_dev, Y_dev)`` does. The command line prepares in a short-lived
        child process, so that the Python objects of reading and of the dictionary never
        live in the processes that train (``demidcd.cli.setup``)."""
        p = self._prepare(X, Y, X_dev, Y_dev)
        return PreparedFit(self.featurizer_.state(), list(self.classes_),
                           p.feature_kind, p.train, p.y, getattr(self, "seen_pairs_", None),
                           p.dev, p.gold)

    def fit_prepared(self, prepared: PreparedFit) -> SequenceTagger:
        """Fit from :meth:`prepare_fit`'s result (made by an estimator with the same
        parameters)."""
        return self._fit_from(prepared, adopt=True)

    def _fit_from(self, p: PreparedFit, adopt: bool) -> SequenceTagger:
        """Train on prepared data; ``adopt``: first take its featurizer, labels and seen
        pairs as this estimator's (made elsewhere: a resume or warm start already applied)."""
        if adopt:
            self._begin_fit(p.feature_kind)
            for attr in ("coef_", "result_"):
                self.__dict__.pop(attr, None)
            arrays, meta = p.featurizer
            cls = FEATURIZERS[meta.get("kind", "SequenceFeaturizer")]
            if cls is SequenceFeaturizer:  # the strings stay packed while training
                featurizer = cls.from_state(arrays, meta, packed=True)
                featurizer.log = self._say()
            else:
                featurizer = cls.from_state(arrays, meta)
            self.__dict__["_featurizer"] = featurizer  # (not the setter: adopted already)
            self.__dict__["_classes"] = list(p.classes)
            self.n_features_ = featurizer.n_features
            self.n_bfeatures_ = self._n_bfeatures
            self.seen_pairs_ = p.seen_pairs
        task = self._bound(p.train, p.y)
        dev_eval = None
        if p.dev is not None:
            dtask, gold = self._bound(p.dev, None), p.gold

            def dev_eval(w: np.ndarray) -> dict:
                return self._metrics(gold, self._decode(dtask, w))

        self._train(task, dev_eval)
        return self

    def _prepare(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None,
                 Y_dev: list[list[str]] | None) -> PreparedFit:
        """:meth:`prepare_fit` with the fitted featurizer, labels and seen pairs set on this
        estimator (and the featurizer's state not yet taken)."""
        X = check_sentences(X, dicts=True)
        Y = check_tags(X, Y, partial=True)
        self._check_labels(Y)
        if not X:
            raise OptionError("cannot fit on an empty data set")
        kind = token_kind(X)
        feature_kind = "dict" if kind == "dict" else None
        self._begin_fit(feature_kind)  # bad options fail before any work
        self._weights()
        featurizer = self._new_featurizer(kind)
        for attr in ("coef_", "result_", "seen_pairs_"):  # a new fit forgets the old model
            self.__dict__.pop(attr, None)
        self.classes_ = sorted(label_names(Y))  # (and every label a set names)
        self.__dict__["_featurizer"] = featurizer  # fitted on X first, then adopted:
        enc = self._encode(X, fit=True)
        self.featurizer_ = featurizer  # resume keeps the saved vocabulary, init extends it
        if self.featurizer_ is not featurizer:
            enc = self._encode(X)
        self.n_features_ = self.featurizer_.n_features
        self.n_bfeatures_ = self._n_bfeatures
        y, enc.allowed_ptr, enc.allowed_idx = encode_partial(Y, self.classes_, enc.n_tokens)
        if enc.allowed_ptr is not None:
            self._check_partial(enc, Y)
        self._fit_pairs(enc, y)
        dev = gold = None
        if X_dev is not None and Y_dev is not None:
            X_dev = check_sentences(X_dev, "X_dev", dicts=True)
            Y_dev = check_tags(X_dev, Y_dev, "Y_dev", partial=True)
            dev = self._encode(X_dev)
            gold = [list(s) for s in Y_dev]
        return PreparedFit(None, None, feature_kind, enc, y, None, dev, gold)

    def _check_labels(self, Y: list[list[str]]) -> None:
        """What ``fit`` requires of the (checked) training tags beyond their shape (the
        chunkers: a label scheme that reads them)."""

    def _label_summary(self, Y: list[list[str]]) -> object:
        """A part's share of what :meth:`_check_labels` reads beyond the set of labels, for a
        set-up in parts (:mod:`.parts`); none here."""
        return None

    def _check_label_summaries(self, labels: set[str], summaries: list) -> None:
        """:meth:`_check_labels` from the set of labels and the parts' summaries."""


    def _check_partial(self, enc, Y: list[list]) -> None:
        """Partially labelled training data (:func:`~demidcd.tasks.chain.partial.
        check_annotation`: a tagging consistent with every sentence under the label scheme,
        ``enc.label_rules`` set); the learner must train on it (:func:`partial_learners`)."""
        from ..tasks.chain.partial import check_annotation

        scheme = getattr(self, "constraint_scheme_", None)
        check_annotation(enc, Y, len(self.classes_), scheme, self._scheme_rules(scheme))
        takers = partial_learners()
        if self._algorithm() not in takers:
            raise OptionError(f"partially labelled data (unknown or set labels) trains with "
                              f"--algorithm {', '.join(takers)}; "
                              f"{self._algorithm()} needs every token labelled")

    def _scheme_rules(self, scheme: str | None) -> tuple | None:
        """The transition rules of ``scheme`` over ``classes_`` (None: none)."""
        return None

    def _decode(self, task: SequenceTask, w: np.ndarray) -> list[list[str]]:
        return self._names(*self._decode_ids(task, w))

    def _decode_ids(self, task: SequenceTask, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Viterbi of every sentence of ``task`` (under the label-scheme constraints, if any):
        (flat int32 tag ids, int64 ptr)."""
        examples = np.arange(task.n_examples)
        constraints = self._constraints()
        if constraints is None:
            return task.decode_flat(w, examples)
        tags, ptr, _ = task.decode_constrained(w, examples, None, constraints)
        return tags, ptr

    def _warm_decode(self, task: SequenceTask) -> None:
        """:meth:`_decode_ids` of example 0 at w = 0 (its kernels, before the clock)."""
        w, ex = np.zeros(task.dim), np.zeros(1, np.int64)
        constraints = self._constraints()
        if constraints is None:
            task.decode_flat(w, ex)
        else:
            task.decode_constrained(w, ex, None, constraints)

    def decode_encoded(self, enc) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict` of sentences already encoded by ``featurizer_`` (an
        :class:`~demidcd.tasks.chain.features.EncodedSequences`), as tag ids: (flat int32 ids into
        ``classes_``, int64 ptr, sentence e holding ids[ptr[e]:ptr[e+1]])."""
        self._check_fitted()
        return self._decode_ids(self._task(None, None, enc), self.coef_)

    def _names(self, tags: np.ndarray, ptr: np.ndarray) -> list[list[str]]:
        """Flat tag ids cut by ptr into per-sentence lists of tag names."""
        names = np.asarray(self.classes_, dtype=object)[tags].tolist()
        return [names[ptr[e]:ptr[e + 1]] for e in range(ptr.shape[0] - 1)]

    def predict(self, X: list[list], fixed: list[list[str | None]] | None = None
                ) -> list[list[str]]:
        """Viterbi decoding of each sentence; tags as strings.

        ``fixed`` (Wapiti's ``--force``): per sentence a list of tag-or-None, one per token; a
        token whose entry is a tag keeps it and the others are decoded around them, i.e.
        argmax w·Φ(x, y) over the y with y_t = fixed_t wherever given (a tag the model does not
        know raises OptionError). Chunk taggers also obey their label scheme
        (:class:`ChunkTagger`, ``constraints``), except where the fixed tags break it."""
        bound = self._bind(X, fixed)
        if bound is None:
            return []
        task, ids = bound
        if ids is None:
            return self._decode(task, self.coef_)
        tags, ptr, _ = task.decode_constrained(self.coef_, np.arange(task.n_examples), ids,
                                               self._constraints())
        return self._names(tags, ptr)

    # -- n best, forced tags, confidence ------------------------------------------------------
    def _bind(self, X: list[list], fixed: list[list[str | None]] | None
              ) -> tuple[Any, np.ndarray | None] | None:
        """(the task of sentences X, the flat ids of their ``fixed`` tags or None) for a fitted
        model; None when X is empty."""
        self._check_fitted()
        X = check_sentences(X, dicts=True)
        if not X:
            return None
        return self._task(X, None), self._fixed_ids(X, fixed)

    def _constraints(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The transition constraints decoding obeys (chain.decoding.scheme_transitions), or
        None: none for plain tagging (:class:`ChunkTagger` has its label scheme's)."""
        return None

    def _fixed_ids(self, X: list[list], fixed: list[list[str | None]] | None
                   ) -> np.ndarray | None:
        """``fixed`` as one tag id per token (−1: free), or None when it is None."""
        if fixed is None:
            return None
        if isinstance(fixed, str | bytes) or len(fixed) != len(X):
            raise OptionError(f"fixed must hold one list per sentence ({len(X)})")
        index = {t: k for k, t in enumerate(self.classes_)}
        out = np.full(sum(len(s) for s in X), -1, np.int32)
        q = 0
        for k, (s, f) in enumerate(zip(X, fixed, strict=True)):
            if isinstance(f, str | bytes) or len(f) != len(s):
                raise OptionError(f"fixed[{k}] must hold one tag or None per token ({len(s)})")
            for t, lab in enumerate(f):
                if lab is not None:
                    if lab not in index:
                        raise OptionError(f"fixed[{k}][{t}]: the model has no tag {lab!r}")
                    out[q + t] = index[lab]
            q += len(s)
        return out

    def predict_nbest(self, X: list[list], k: int, fixed: list[list[str | None]] | None = None
                      ) -> list[list[tuple[list[str], float]]]:
        """The k best taggings of each sentence (k-best Viterbi), best first: per sentence a
        list of (tags, score) with score = w·Φ(x, y), non-increasing (ties in a fixed order);
        fewer than k when fewer taggings are admissible. The first is :meth:`predict`'s.
        ``fixed`` and the label-scheme constraints as in :meth:`predict`."""
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise OptionError(f"k must be an integer >= 1, got {k!r}")
        bound = self._bind(X, fixed)
        if bound is None:
            return []
        task, ids = bound
        examples = np.arange(task.n_examples)
        best = task.kbest(self.coef_, examples, int(k), ids, self._constraints())
        names = np.asarray(self.classes_, dtype=object)
        return [[(names[y].tolist(), float(v)) for y, v in zip(ys, sc, strict=True)]
                for ys, sc in best]

    def predict_scores(self, X: list[list], fixed: list[list[str | None]] | None = None
                       ) -> list[tuple[list[str], float, float, list[float]]]:
        """:meth:`predict` with confidences: per sentence (tags, score, sentence margin, token
        margins). score = w·Φ(x, ŷ); token margin t = M_t(ŷ_t) − max_{k≠ŷ_t} M_t(k) ≥ 0 with
        the max-marginal M_t(k) = max {w·Φ(x, y) : y_t = k} (0: another tagging with another
        tag at t ties; +inf: no other tag is possible there, e.g. a fixed token); sentence
        margin = best − second-best score = the least token margin (+inf when the tagging is
        the only admissible one). Over the same admissible taggings as :meth:`predict`."""
        bound = self._bind(X, fixed)
        if bound is None:
            return []
        task, ids = bound
        examples = np.arange(task.n_examples)
        constraints = self._constraints()
        tags, ptr, scores = task.decode_constrained(self.coef_, examples, ids, constraints)
        margins, sent = task.confidence(self.coef_, examples, tags, ids, constraints)
        names = self._names(tags, ptr)
        m = margins.tolist()
        return [(names[e], float(scores[e]), float(sent[e]), m[ptr[e]:ptr[e + 1]])
                for e in range(len(names))]

    @property
    def probabilistic(self) -> bool:
        """True when the model's scores are log-probabilities up to log Z (trained with
        ``crf``); the SVMs' and perceptrons' are margins, not calibrated."""
        return self._algorithm() == "crf"

    def _check_probabilistic(self, what: str) -> None:
        """Refuse marginals of a model whose scores are not log-probabilities (every learner
        but ``crf``: the SVMs' and perceptrons' scores are margins, not calibrated)."""
        algorithm = self._algorithm()
        if algorithm != "crf":
            raise OptionError(f"{what}: this model was trained with --algorithm {algorithm}, "
                              "whose scores are margins, not calibrated probabilities; train "
                              "with --algorithm crf for marginals")

    def predict_marginals(self, X: list[list], fixed: list[list[str | None]] | None = None
                          ) -> list[list[dict[str, float]]]:
        """sklearn-crfsuite's ``predict_marginals``: per sentence, per token a dict tag →
        p(y_t = tag | x) (forward-backward, :mod:`demidcd.tasks.chain.marginals`), over the
        taggings :meth:`predict` considers (``fixed`` tags kept, the label scheme's constraints
        obeyed). Only for models trained with ``algorithm="crf"``; others raise OptionError."""
        return self.predict_marginals_logp(X, fixed)[0]

    def predict_marginals_logp(self, X: list[list], fixed: list[list[str | None]] | None = None
                               ) -> tuple[list[list[dict[str, float]]], list[list[str]],
                                          np.ndarray]:
        """(:meth:`predict_marginals`, :meth:`predict`'s tags, log p(tags | x) per sentence)."""
        from ..tasks.chain.marginals import chain_marginals

        self._check_fitted()
        self._check_probabilistic("predict_marginals")
        X = check_sentences(X, dicts=True)
        if not X:
            return [], [], np.zeros(0)
        task = self._task(X, None)
        ids = self._fixed_ids(X, fixed)
        examples = np.arange(task.n_examples)
        constraints = self._constraints()
        marg, ptr, logz = chain_marginals(task, self.coef_, examples, ids, constraints)
        tags, tptr, scores = task.decode_constrained(self.coef_, examples, ids, constraints)
        names = list(self.classes_)
        rows = [dict(zip(names, r, strict=True)) for r in marg.tolist()]
        out = [rows[ptr[e]:ptr[e + 1]] for e in range(len(X))]
        return out, self._names(tags, tptr), scores - logz

    def log_partition(self, X: list[list], fixed: list[list[str | None]] | None = None
                      ) -> np.ndarray:
        """log Z(x) = log Σ_y exp(w·Φ(x, y)) per sentence (float64), over the taggings
        :meth:`predict` considers (``fixed`` tags kept, the label scheme's constraints obeyed),
        so that p(y | x) = exp(w·Φ(x, y) − log Z(x)) for the scores of :meth:`predict_nbest`
        (what CRF++'s ``crf_test -n`` prints). Only for models trained with
        ``algorithm="crf"``; others raise OptionError."""
        from ..tasks.chain.marginals import chain_marginals

        self._check_fitted()
        self._check_probabilistic("log_partition")
        X = check_sentences(X, dicts=True)
        if not X:
            return np.zeros(0)
        task = self._task(X, None)
        ids = self._fixed_ids(X, fixed)
        examples = np.arange(task.n_examples)
        return chain_marginals(task, self.coef_, examples, ids, self._constraints())[2]

    def _metrics(self, Y: list[list[str]], pred: list[list[str]]) -> dict[str, Any]:
        """Token accuracy over the tokens with one gold label (unknown and set cells, if
        any, are counted apart: ``unknown``, ``sets``)."""
        total = sum(len(s) for s in Y)
        right = sum(p == g for ps, gs in zip(pred, Y, strict=True)
                    for p, g in zip(ps, gs, strict=True))
        unknown, sets = partial_counts(Y)
        total -= unknown + sets
        acc = right / max(total, 1)
        return {"score": acc, "accuracy": acc, "tokens": total, "unknown": unknown,
                "sets": sets}

    def metrics(self, X: list[list], Y: list[list[str]]) -> dict[str, Any]:
        """Token accuracy (``score``) of :meth:`predict` against Y, and the token count
        (tags unseen in training count wrong)."""
        self._check_fitted()
        Y = check_tags(check_sentences(X, dicts=True), Y, partial=True)
        return self._metrics(Y, self.predict(X))

    def unknown_labels(self, Y: list[list[str]]) -> dict[str, int]:
        """Gold labels of Y that the model does not know, with their token counts."""
        known = set(self.classes_)
        out: dict[str, int] = {}
        for s in Y:
            for t in s:
                if isinstance(t, str) and t not in known:
                    out[t] = out.get(t, 0) + 1
        return out

    def _u_size(self) -> int:
        """Length of the emission block U of ``coef_``: F·K, or the seen pairs padded to a
        multiple of K (:meth:`SequenceTask.dimension`)."""
        pairs = getattr(self, "seen_pairs_", None)
        K = len(self.classes_)
        return SequenceTask.dimension(self.n_features_, K, 0, None if pairs is None else
                                      pairs[1].shape[0]) - (K + 1) ** 2

    def training_task(self, X: list[list], Y: list[list[str]]) -> SequenceTask:
        """The bound task for X, Y with this model's features and tags (for objectives)."""
        self._check_fitted("featurizer_")
        X = check_sentences(X, dicts=True)
        return self._task(X, check_tags(X, Y, partial=True))

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model atomically (npz + JSON metadata, no pickle): w, the labels and the
        featurizer's state (its ``kind``; a template's text; the feature dictionaries)."""
        self._check_fitted()
        arrays, fmeta = self.featurizer_.state()
        pairs = getattr(self, "seen_pairs_", None)
        if pairs is not None:  # weights="seen": which (feature, label) each U weight is
            arrays = {**arrays, _SEEN_OFF: pairs[0], _SEEN_LAB: pairs[1]}
        meta = {**self._meta(), "labels": list(self.classes_), "featurizer": fmeta}
        save_model(path, self.coef_, arrays, meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str], _loaded: tuple | None = None) -> SequenceTagger:
        """Read a model written by :meth:`save` (``allow_pickle=False``); the featurizer is
        rebuilt by the ``kind`` its state records (models without one: the built-in)."""
        w, arrays, meta = _loaded or load_model(path, task=cls.task_name)
        arrays = dict(arrays)
        pairs = (arrays.pop(_SEEN_OFF), arrays.pop(_SEEN_LAB, None)) \
            if _SEEN_OFF in arrays else None
        try:
            hp = meta.get("hyper_parameters", {})
            fmeta = meta["featurizer"]
            if not isinstance(fmeta, dict):
                raise TypeError(f"featurizer is {type(fmeta).__name__}, not an object")
            kind = fmeta.get("kind", "SequenceFeaturizer")
            if kind not in FEATURIZERS:
                raise ValueError(f"unknown featurizer kind {kind!r}")
            obj = cls(min_count=fmeta["min_count"], hashing=fmeta["hashing"], **hp)
            obj.featurizer_ = FEATURIZERS[kind].from_state(arrays, fmeta)
            obj.classes_ = [str(t) for t in meta["labels"]]
            obj.n_features_ = obj.featurizer_.n_features
            obj.n_bfeatures_ = obj._n_bfeatures
            obj.data_options_ = dict(meta.get("data_options") or {})
            if pairs is not None:
                from ..tasks.chain.records import check_pairs

                if pairs[1] is None:
                    raise ValueError("seen pairs without their labels")
                pairs = check_pairs(pairs, obj.n_features_, len(obj.classes_))
            obj.seen_pairs_ = pairs
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFileError(str(path), f"corrupt model metadata ({e})") from None
        except DemidcdError as e:  # the stored template does not parse
            raise ModelFileError(str(path), f"corrupt model template ({e})") from None
        if w.shape[0] != SequenceTask.dimension(obj.n_features_, len(obj.classes_),
                                                obj.n_bfeatures_, None if pairs is None
                                                else pairs[1].shape[0]):
            raise ModelFileError(str(path), "weight vector does not match features and labels")
        obj._loaded(path, w, meta)
        if isinstance(obj.featurizer_, TemplateFeaturizer) and obj.template is None:
            obj.template = obj.featurizer_.template  # given as a Template: not in the file
        return obj


_SEEN_OFF, _SEEN_LAB = "seen_pairs_off", "seen_pairs_lab"
"""The model file's arrays of ``seen_pairs_`` (models fitted with ``weights="seen"``)."""


class ChunkTagger(SequenceTagger):
    """A :class:`SequenceTagger` for chunking, scored by chunks as ``conlleval`` scores them.

    Labels are BIO / IOB1 / IOB2 / BIOES chunk tags (``B-NP``, ``I-PER``, ``O`` …);
    ``label_scheme`` (``auto``, ``iob1``, ``iob2``/``bio``, ``bioes``/``iobes``) says how to read
    them (:mod:`demidcd.tasks.chain.chunks`). :meth:`score` is chunk F1 and :meth:`metrics` gives
    precision, recall and F1 overall and per type, and token accuracy.

    The DCD learners solve the hinge-loss (L1) SSVM by default here (``loss=None``): it scored
    higher than the L2 loss on CoNLL-2000 and CoNLL-2002 Spanish (benchmarks/README.md,
    "Evidence behind the defaults"). ``loss="l2"`` gives the L2 loss (and several DEMI-DCD
    learners).

    ``constraints`` (None: :data:`CONSTRAINTS_DEFAULT`, off): decode only taggings that obey
    the label scheme of the training labels (``constraint_scheme_``: IOB2, no I-X after O or
    after another type and none first; BIOES likewise; none for IOB1), by −∞ on the forbidden
    transitions; forced tags (``predict(fixed=...)``) win over them.
    """

    task_name = "chunking"
    score_name = "chunk F1"
    _default_loss = "l1"
    _task_params = ("label_scheme", "constraints")
    _task_defaults = {"label_scheme": "auto", "constraints": None}
    _default_constraints = CONSTRAINTS_DEFAULT  # what constraints=None means

    __init__ = estimator_init(param("label_scheme", str | None),
                              param("min_count", int | None), param("hashing", int | None),
                              _TEMPLATE_PARAM, param("constraints", bool | None),
                              _WEIGHTS_PARAM, _STATES_PARAM)

    def _check_labels(self, Y: list[list[str]]) -> None:
        """The label scheme must read the training tags (fails before any work); it sets
        ``constraint_scheme_``."""
        from ..tasks.chain.chunks import resolve_scheme
        from ..tasks.chain.decoding import training_scheme

        resolve_scheme(label_names(Y), self.label_scheme or "auto")
        self.constraint_scheme_ = training_scheme(Y, self.label_scheme or "auto")

    def _label_summary(self, Y: list[list[str]]) -> tuple[int, int]:
        """A part's share of what :meth:`_check_labels` reads beyond the labels
        (:func:`~demidcd.tasks.chain.decoding.scheme_counts`; set-up in parts)."""
        from ..tasks.chain.decoding import scheme_counts

        return scheme_counts(Y)

    def _check_label_summaries(self, labels: set[str], summaries: list) -> None:
        """:meth:`_check_labels` from the labels and the parts' :meth:`_label_summary`."""
        from ..tasks.chain.chunks import resolve_scheme
        from ..tasks.chain.decoding import scheme_of_counts

        scheme = self.label_scheme or "auto"
        resolve_scheme(labels, scheme)
        self.constraint_scheme_ = scheme_of_counts(
            labels, lambda: tuple(map(sum, zip(*summaries, strict=True))), scheme)

    def _scheme_rules(self, scheme: str | None) -> tuple | None:
        from ..tasks.chain.decoding import scheme_transitions

        return None if scheme is None else scheme_transitions(list(self.classes_), scheme)

    # -- label-scheme constraints -------------------------------------------------------------
    def _constraints(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The label scheme's transition rules (no I-X after O or after another type, none
        first; BIOES likewise: :func:`~demidcd.tasks.chain.decoding.scheme_transitions`) when
        ``constraints`` is on (None: :data:`CONSTRAINTS_DEFAULT`) and the training tags follow
        IOB2 or BIOES (``constraint_scheme_``, :func:`~demidcd.tasks.chain.decoding.
        training_scheme`); None otherwise (IOB1: every tag sequence is well formed)."""
        from ..tasks.chain.decoding import scheme_transitions

        on = self.constraints
        if on is None:
            on = self._default_constraints
        if not isinstance(on, bool | np.bool_):
            raise OptionError(f"constraints must be True, False or None, got {on!r}")
        scheme = getattr(self, "constraint_scheme_", None)
        if not on or scheme is None:
            return None
        key = (tuple(self.classes_), scheme)
        cached = getattr(self, "_constraint_cache", None)
        if cached is None or cached[0] != key:
            cached = (key, scheme_transitions(list(self.classes_), scheme))
            self._constraint_cache = cached
        return cached[1]

    def _meta(self) -> dict[str, Any]:
        return {**super()._meta(), "constraint_scheme": getattr(self, "constraint_scheme_", None)}

    def _loaded(self, path: str | os.PathLike[str], w: np.ndarray, meta: dict) -> None:
        super()._loaded(path, w, meta)
        if "constraint_scheme" in meta:
            scheme = meta["constraint_scheme"]
            if scheme not in (None, "iob2", "bioes"):
                raise ModelFileError(str(path), f"corrupt model metadata (constraint_scheme "
                                                f"{scheme!r})")
        else:  # a model saved before: its scheme when explicit or BIOES, else none known
            from ..tasks.chain.chunks import resolve_scheme

            given = (self.label_scheme or "auto").lower()
            given = {"bio": "iob2", "iobes": "bioes"}.get(given, given)
            scheme = given if given in ("iob2", "bioes") else None
            if given in ("auto", "conlleval") and \
                    resolve_scheme(self.classes_, given) == "bioes":
                scheme = "bioes"
        self.constraint_scheme_ = scheme

    def _metrics(self, Y: list[list[str]], pred: list[list[str]]) -> dict[str, Any]:
        """Chunk scores of the sentences whose every gold cell is one label (those with an
        unknown or set cell are left out; ``unknown``, ``sets`` count such cells)."""
        from ..tasks.chain.chunks import chunk_scores

        unknown, sets = partial_counts(Y)
        if unknown or sets:
            keep = [k for k, s in enumerate(Y) if all(isinstance(t, str) for t in s)]
            Y, pred = [Y[k] for k in keep], [pred[k] for k in keep]
        m = chunk_scores(Y, pred, self.label_scheme or "auto").as_dict()
        return {**m, "unknown": unknown, "sets": sets} if unknown or sets else m


class NamedEntityTagger(ChunkTagger):
    """A :class:`ChunkTagger` for named entities (``B-PER``, ``I-LOC`` …), scored by entity F1.

    Its features are the ``ner`` template of :mod:`demidcd.tasks.chain.features` (word clusters
    and a wider window) and ``min_count`` defaults to 1 (rare words matter for entities: it raised
    CoNLL-2002 Spanish entity F1, benchmarks/README.md)."""

    task_name = "ner"
    score_name = "entity F1"
    _template = "ner"
    _default_min_count = 1
