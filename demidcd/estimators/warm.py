"""The vocabulary and weights of a run that starts from a saved model: resume (``resume``: the
saved model's features and labels, unchanged) and warm start (``init``: the old model's features
and labels extended by the new data's, and its w mapped onto them as the prior w₀).

A warm start solves min ½‖w − w₀‖² + C Σ ξ² (:mod:`demidcd.solvers.state`); w₀ has to be
indexed like the new w. Where the featurizer keeps a dictionary of feature strings
(:class:`~demidcd.tasks.chain.features.SequenceFeaturizer`), the new dictionary is the old one with
the new data's features appended (old ids unchanged), the labels are the old ones with the new
data's appended (zero rows in w₀), and w₀ is the old w laid out for the larger F and K
(:func:`prior_weights`). A featurizer without such a dictionary (hashed features, the template
and entity-relation featurizers) keeps the old model's: the new data's features it does not
know are dropped, as at prediction.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import OptionError


def source_key(value: Any) -> Any:
    """What identifies a start source between the hooks of one fit: a path with its size and
    modification time, or the estimator object itself."""
    if isinstance(value, str | os.PathLike):
        p = os.fspath(value)
        try:
            st = os.stat(p)
            return (p, st.st_mtime_ns, st.st_size)
        except OSError:
            return (p, None, None)
    return id(value)


def load_source(cls: type, value: Any, option: str) -> Any:
    """The fitted estimator ``value`` names: a model file (loaded with ``cls.load``) or a
    fitted estimator of the same class."""
    if isinstance(value, str | os.PathLike):
        return cls.load(value)
    if not isinstance(value, cls):
        raise OptionError(f"--{option} must be a model file or a fitted {cls.__name__}, got "
                          f"{type(value).__name__}")
    if not hasattr(value, "coef_"):
        raise OptionError(f"--{option}: the {cls.__name__} given is not fitted")
    return value


def extend_labels(old: list[str], new: list[str]) -> list[str]:
    """The old labels in their order, then the new data's labels the old model lacks."""
    known = set(old)
    return [*old, *sorted(t for t in set(new) if t not in known)]


def _dictionary(featurizer: Any) -> list[str] | None:
    """The feature strings of a featurizer with a plain dictionary (id → string) and the
    state layout of :class:`~demidcd.tasks.chain.features.SequenceFeaturizer`, else None."""
    from ..tasks.chain.features import SequenceFeaturizer

    if type(featurizer) is not SequenceFeaturizer or featurizer.hashing:
        return None
    return featurizer.features


def extend_featurizer(old: Any, new: Any, log: Any = None) -> Any:
    """The featurizer of a warm start: ``old`` (the old model's) with the features of ``new``
    (fitted on the new data) that it lacks appended, when both keep a plain dictionary with
    the same settings; otherwise ``old`` itself."""
    a, b = _dictionary(old), _dictionary(new)
    if a is None or b is None:
        return old
    arrays, meta = old.state()
    _, new_meta = new.state()
    same = {k: v for k, v in meta.items() if k not in ("n_features", "min_count")}
    if same != {k: v for k, v in new_meta.items() if k in same}:
        raise OptionError("--init: the model's feature options differ from this run's "
                          f"({same} against {new_meta}); train with the same template and "
                          "input columns")
    known = set(a)
    added = [f for f in b if f not in known]
    meta = {**meta, "n_features": len(a) + len(added)}
    arrays["feature_strings"] = np.frombuffer("\n".join([*a, *added]).encode("utf-8"),
                                              np.uint8).copy()
    out = type(old).from_state(arrays, meta)
    out.log = getattr(new, "log", None)
    if log is not None:
        log(f"warm start: {len(a):,} features of the initial model, {len(added):,} added "
            "from the new data")
    return out


def prior_weights(old: Any, new: Any, task: Any) -> np.ndarray:
    """w₀ of a warm start of ``new`` (fitting on ``task``) from the fitted model ``old``: for
    a chain tagger whose features and labels extend the old ones (:func:`extend_featurizer`,
    :func:`extend_labels`), the emission rows of the old features and the transitions between
    old labels (START and END included) copied to their new places, zero for new features and
    labels; otherwise the old w as it is, which must have the new w's length."""
    from ..tasks.chain.task import SequenceTask

    w = np.asarray(old.coef_, np.float64)
    if getattr(old, "seen_pairs_", None) is not None or \
            (isinstance(task, SequenceTask) and task.pairs is not None):
        raise OptionError("--init does not take --weights seen (neither the initial model's "
                          "nor this run's): its emission weights are per seen (feature, label) "
                          "pair and are not mapped; warm-start with --weights all")
    if isinstance(task, SequenceTask) and hasattr(old, "classes_") and \
            hasattr(new, "classes_") and task.G == 0:
        F_old, K_old = int(old.featurizer_.n_features), len(old.classes_)
        F, K = task.F, task.K
        if w.shape[0] == SequenceTask.dimension(F_old, K_old) and F >= F_old:
            where = {t: k for k, t in enumerate(new.classes_)}
            try:
                tm = np.array([where[t] for t in old.classes_] + [K], np.int64)
            except KeyError as e:
                raise OptionError(f"--init: label {e.args[0]!r} of the model is missing from "
                                  "this run's labels") from None
            w0 = np.zeros(task.dim)
            w0[:F * K].reshape(F, K)[np.ix_(np.arange(F_old), tm[:-1])] = \
                w[:F_old * K_old].reshape(F_old, K_old)
            t_old = w[F_old * K_old:F_old * K_old + (K_old + 1) ** 2].reshape(K_old + 1,
                                                                             K_old + 1)
            w0[F * K:F * K + (K + 1) ** 2].reshape(K + 1, K + 1)[np.ix_(tm, tm)] = t_old
            return w0
    if w.shape[0] != task.dim:
        raise OptionError(f"--init: the model has {w.shape[0]:,} weights, this run "
                          f"{task.dim:,}, and its features cannot be mapped onto this run's "
                          "(other labels or feature options?)")
    return w.copy()
