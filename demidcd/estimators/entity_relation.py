"""Joint entity and relation extraction (CoNLL04) with 0-1 ILP inference."""


from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import InputTypeError, ModelFileError, OptionError
from ..io.model import load_model, save_model
from ..primitives.monitor import PROGRESS_EVERY, timed_step
from ..tasks.entity_relation.inference import DEFAULT_ILP_TIME_LIMIT
from .base import StructuredEstimator, estimator_init, param

SETUP_SAY_STRINGS = 10_000_000  # pair feature strings from which the set-up's length is said


class EntityRelationExtractor(StructuredEstimator):
    """Joint entity and relation labelling (CoNLL04 style) with 0-1 ILP inference.

    X is a list of :class:`~demidcd.io.conll04.ERSentence` (words, POS and which tokens are
    entities); Y, as :meth:`predict` returns it, one ``(entity labels, {(a, b): relation})``
    per sentence (entities numbered in token order, relations without ``NoRel``):

    >>> from demidcd.datasets import load_conll04
    >>> X, Y = load_conll04("train.corp")
    >>> er = EntityRelationExtractor(time_limit=60).fit(X, Y)
    >>> er.score(X_test, Y_test)

    ``fit(X)`` and ``score(X)`` without Y take the gold labels that sentences read from a file
    carry (``ERSentence.ent_label`` and ``relations``); a given Y replaces them. Extra
    hyper-parameters: ``solver`` (``exact`` branch-and-bound, ``cbc`` (bundled with PuLP),
    ``highs``), ``ilp_time_limit`` (seconds per cbc/highs solve; None = the default, 2; 0 = no
    cap), ``relation_loss_weight`` (λ of Δ), ``min_count``. Fitted: ``coef_``,
    ``featurizer_``, ``result_``.
    """

    task_name = "entity-relation"
    score_name = "mean entity/relation F1"
    _task_params = ("solver", "relation_loss_weight", "min_count")
    _task_defaults = {"solver": "exact", "relation_loss_weight": 1.0, "min_count": 1}
    _requires_y = False

    __init__ = estimator_init(param("solver", str | None),
                              param("relation_loss_weight", float | None),
                              param("min_count", int | None),
                              param("ilp_time_limit", float | None))

    def _task(self, X, with_gold: bool):
        from ..tasks.entity_relation.task import EntityRelationTask

        weight = _nonnegative("relation_loss_weight", self.relation_loss_weight, 1.0)
        return EntityRelationTask(self.featurizer_.transform(X, with_gold=with_gold),
                                  with_gold=with_gold, solver=self.solver or "exact",
                                  relation_loss_weight=weight,
                                  ilp_time_limit=self._ilp_cap())

    def _ilp_cap(self) -> float | None:
        """Seconds per cbc/highs solve: ``ilp_time_limit`` None → the default
        (:data:`~demidcd.tasks.entity_relation.inference.DEFAULT_ILP_TIME_LIMIT`), 0 → no cap."""
        v = _nonnegative("ilp_time_limit", self.ilp_time_limit, DEFAULT_ILP_TIME_LIMIT)
        return None if v == 0 else v

    @staticmethod
    def _check(X: Any, name: str = "X") -> Any:
        """X as a list of ERSentence (a string or other records is an error)."""
        if isinstance(X, str | bytes) or not hasattr(X, "__len__"):
            raise InputTypeError(f"{name} must be a list of ERSentence, got {type(X).__name__}")
        for k, s in enumerate(X):
            if not hasattr(s, "n_entities"):
                raise InputTypeError(f"{name}[{k}] is a {type(s).__name__}, not an ERSentence "
                                     "(see demidcd.io.conll04.read_conll04)")
        return X

    @staticmethod
    def _with_labels(X: Any, Y: Any, name: str = "Y") -> Any:
        """X with the gold labels of Y, ``(entity labels, {(a, b): relation})`` per sentence as
        :meth:`predict` returns them (X itself when Y is None)."""
        import dataclasses

        from ..io.conll04 import ENTITY_LABELS, RELATION_LABELS

        if Y is None:
            return X
        if isinstance(Y, str | bytes) or not hasattr(Y, "__len__"):
            raise InputTypeError(f"{name} must be a list of (entity labels, relations) pairs, "
                                 f"got {type(Y).__name__}")
        if len(Y) != len(X):
            raise OptionError(f"X has {len(X)} sentences but {name} has {len(Y)}")
        out = []
        for k, (s, y) in enumerate(zip(X, Y, strict=True)):
            try:
                labels, relations = y
                labels, relations = list(labels), dict(relations)
            except (TypeError, ValueError):
                raise InputTypeError(f"{name}[{k}] must be a pair (entity labels, {{(a, b): "
                                     "relation}), as predict returns") from None
            n = s.n_entities
            if len(labels) != n:
                raise OptionError(f"sentence {k} has {n} entities but {name}[{k}] has "
                                  f"{len(labels)} labels")
            if bad := [t for t in labels if t not in ENTITY_LABELS]:
                raise OptionError(f"{name}[{k}]: unknown entity label {bad[0]!r} (use "
                                  f"{', '.join(ENTITY_LABELS)})")
            for key, rel in relations.items():
                if not (isinstance(key, tuple) and len(key) == 2
                        and all(isinstance(a, int | np.integer) and 0 <= a < n for a in key)
                        and key[0] != key[1]):
                    raise OptionError(f"{name}[{k}]: relation key {key!r} is not a pair (a, b) "
                                      f"of two entities in 0..{n - 1}")
                if rel not in RELATION_LABELS:
                    raise OptionError(f"{name}[{k}]: unknown relation {rel!r} (use "
                                      f"{', '.join(RELATION_LABELS)})")
            tags = list(s.tags)
            for t, lab in zip(s.ent_tok, labels, strict=True):
                tags[t] = lab
            out.append(dataclasses.replace(
                s, tags=tags, ent_label=labels,
                relations={(int(a), int(b)): r for (a, b), r in relations.items()
                           if r != RELATION_LABELS[0]}))
        return out

    def fit(self, X, Y: Any = None, X_dev=None, Y_dev: Any = None) -> EntityRelationExtractor:
        """Learn w from sentences X with gold labels Y (None: those inside X); an optional
        dev set X_dev, Y_dev is scored in the log."""
        from ..tasks.entity_relation.features import (
            PAIR_STRINGS_PER_SECOND,
            EntityRelationFeaturizer,
            pair_feature_count,
        )

        X = self._with_labels(self._check(X), Y)
        if not X:
            raise OptionError("cannot fit on an empty data set")
        self._begin_fit()  # bad options fail before any work
        min_count = self._task_defaults["min_count"] if self.min_count is None else \
            self.min_count
        if isinstance(min_count, bool) or not isinstance(min_count, int | np.integer) or \
                min_count < 1:
            raise OptionError(f"--min-count must be an integer >= 1, got {min_count!r}")
        for attr in ("coef_", "result_"):  # a new fit forgets the old model
            self.__dict__.pop(attr, None)
        n_pairs, n_strings, most = pair_feature_count(X)
        if n_strings >= SETUP_SAY_STRINGS:  # minutes of set-up: said before it starts
            self._say()(f"{n_pairs:,} entity pairs (up to {most:,} entities in a sentence) "
                        f"make about {n_strings / 1e6:,.0f} M pair feature strings: building "
                        f"and encoding them takes roughly "
                        f"{n_strings / PAIR_STRINGS_PER_SECOND:,.0f} s"
                        + (f", before the time limit of {self.time_limit:g} s starts"
                           if self.time_limit else "")
                        + " (a lower --max-sentence-length drops such sentences)")
        with timed_step(self._say(), f"building features of {len(X):,} sentences "
                        f"({n_pairs:,} entity pairs)", every=PROGRESS_EVERY):
            self.featurizer_ = EntityRelationFeaturizer(int(min_count)).fit(X)
        with timed_step(self._say(), f"encoding {len(X):,} sentences", every=PROGRESS_EVERY):
            task = self._task(X, True)
        dev_eval = None
        if X_dev:
            dtask = self._task(self._with_labels(self._check(X_dev, "X_dev"), Y_dev, "Y_dev"),
                               True)
            ex = np.arange(dtask.n_examples)
            gold = dtask.gold(ex)

            def dev_eval(w: np.ndarray) -> dict:
                return dtask.metric(gold, dtask.decode(w, ex))

        self._train(task, dev_eval)
        return self

    def predict(self, X) -> list[tuple[list[str], dict[tuple[int, int], str]]]:
        """(entity labels, {(a, b): relation}) per sentence, by exact ILP inference."""
        from ..tasks.entity_relation.task import structure_to_labels

        self._check_fitted()
        if not self._check(X):
            return []
        task = self._task(X, False)
        return [structure_to_labels(y, s.n_entities)
                for y, s in zip(task.decode(self.coef_, np.arange(len(X))), X, strict=True)]

    def metrics(self, X, Y: Any = None) -> dict[str, float]:
        """Micro P/R/F1 for entities and relations ("no relation" excluded) of
        :meth:`predict` against Y (None: the labels inside X); ``score`` is their mean."""
        self._check_fitted()
        task = self._task(self._with_labels(self._check(X), Y), True)
        ex = np.arange(task.n_examples)
        return task.metric(task.gold(ex), task.decode(self.coef_, ex))

    def feature_summary(self) -> str:
        f = self.featurizer_
        dim = self.coef_.shape[0]
        return (f"{f.n_entity_features:,} entity x 4 labels + {f.n_pair_features:,} pair x 6 "
                f"labels = {dim:,} weights ({dim * 8 / 2**20:.1f} MiB float64)")

    def training_task(self, X, Y: Any = None):
        """The bound task for X, Y (None: the labels inside X) with this model's features (for
        objectives)."""
        self._check_fitted("featurizer_")
        return self._task(self._with_labels(self._check(X), Y), True)

    def save(self, path: str | os.PathLike[str]) -> None:
        import json

        self._check_fitted()
        blob = np.frombuffer(json.dumps(self.featurizer_.state()).encode(), np.uint8)
        save_model(path, self.coef_, {"featurizer_json": blob}, self._meta())

    @classmethod
    def load(cls, path: str | os.PathLike[str],
             _loaded: tuple | None = None) -> EntityRelationExtractor:
        import json

        from ..tasks.entity_relation.features import EntityRelationFeaturizer
        from ..tasks.entity_relation.task import EntityRelationTask

        w, arrays, meta = _loaded or load_model(path, task=cls.task_name)
        try:
            hp = dict(meta.get("hyper_parameters", {}))
            hp["relation_loss_weight"] = float(hp.get("relation_loss_weight", 1.0))
            if not np.isfinite(hp["relation_loss_weight"]):
                raise ValueError("relation_loss_weight is not finite")
            obj = cls(**hp)
            obj.featurizer_ = EntityRelationFeaturizer.from_state(
                json.loads(bytes(arrays["featurizer_json"]).decode()))
            obj.data_options_ = dict(meta.get("data_options") or {})
        except (KeyError, TypeError, ValueError, OverflowError, RecursionError,
                UnicodeDecodeError) as e:
            raise ModelFileError(str(path), f"corrupt model metadata ({e})") from None
        f = obj.featurizer_
        if w.shape[0] != EntityRelationTask.dimension(f.n_entity_features, f.n_pair_features):
            raise ModelFileError(str(path), "weight vector does not match the features")
        obj._loaded(path, w, meta)
        return obj


def _nonnegative(name: str, value: Any, default: float) -> float:
    """``value`` (None: ``default``) as a finite float ≥ 0, else a one-line OptionError."""
    if value is None:
        return default
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if not 0 <= v < float("inf"):
        raise OptionError(f"--{name.replace('_', '-')} must be a finite number >= 0, got "
                          f"{value!r}")
    return v
