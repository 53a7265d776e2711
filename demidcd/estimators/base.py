"""The estimators' common base: scikit-learn conventions (constructor keywords stored as given,
``get_params``/``set_params``, ``fit``/``predict``/``score``, ``save``/``load``) over the learners
of :mod:`demidcd.solvers`, for every task.

>>> from demidcd.datasets import load_tagged
>>> X, Y = load_tagged("en_ewt-ud-train.conllu", column="xpos")  # token lists, tag lists
>>> tagger = SequenceTagger(C=0.1, algorithm="dcd").fit(X, Y)
>>> tagger.predict([["The", "cat", "sat"]])

The estimators follow scikit-learn's conventions without importing it (it takes seconds):
``get_params`` / ``set_params`` over the constructor's keyword arguments, which are stored
unchanged (a misspelt one is a TypeError) and validated in ``fit`` (a bad value raises
:class:`~demidcd.errors.OptionError`, a ValueError naming the parameter: ``C must be a finite
number > 0, got -1.0``); ``save`` keeps them as given and ``load`` gives them back so (but
``callback`` and ``log``, which come back as None), with ``result_`` the saved summary of the
training run (:func:`saved_result`); ``__sklearn_tags__``;
``predict`` before ``fit`` raises :class:`~demidcd.errors.NotFittedError` (also scikit-learn's
when it is installed). So ``clone``, ``GridSearchCV``, ``cross_val_score`` and ``Pipeline``
work with the ``[sklearn]`` extra installed. Every solver option defaults to None, meaning
the default in :class:`~demidcd.solvers.common.SolverConfig` (or the learner's own, for the
engine options).
"""

from __future__ import annotations

import gc
import inspect
import json
import logging
import os
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from ..errors import InputTypeError, ModelFileError, OptionError, not_fitted
from ..options import BY_NAME, DCD, LEARNER, Option, default_C, learner_params
from ..options import default as table_default
from ..progress import LOGGER, Cadence, format_iteration, print_line, stop_line
from ..solvers import train
from ..solvers.common import SolverConfig, TrainResult, objective, work_done
from ..solvers.plan import TrainingPlan, decide_learners, make_plan

SOLVER_OPTIONS = tuple(f.name for f in fields(SolverConfig))
"""Constructor arguments that go into :class:`SolverConfig` (defaults there)."""
TOLERANCE_LEARNERS = (*DCD, "sdm-hinge")
"""The learners that stop when a tolerance test passes: one that stops at ``max_epochs``
instead gives a ConvergenceWarning (the others, perceptrons and online learners, stop there by
design)."""
START_OPTIONS = ("resume", "init", "save_state")
"""Constructor arguments of where a DCD learner starts and what it keeps
(:meth:`StructuredEstimator._start_point`): not engine options, nor hyper-parameters."""
COLLECT_FROM_EXAMPLES = 5_000  # a fit on this many examples or more collects its learner's
# reference cycles as it returns (StructuredEstimator.fit)
ENGINE_OPTIONS = tuple(o.name for o in learner_params()
                       if o.group == LEARNER and o.name not in SOLVER_OPTIONS
                       and o.name not in ("algorithm", "threads", "backend", "ray_address",
                                          *START_OPTIONS))
"""Constructor arguments passed to the learners that read them when set (the learners own
them in the option table, :mod:`demidcd.options`)."""


def _token_kind(t: Any) -> str | None:
    """``columns`` for a word or a tuple of column strings, ``dict`` for a feature dict or a
    list of feature names (python-crfsuite's items), None for anything else."""
    if isinstance(t, str):
        return "columns"
    if isinstance(t, tuple):
        return "columns" if t and all(isinstance(a, str) for a in t) else None
    if isinstance(t, dict):
        return "dict"
    if isinstance(t, list):
        return "dict" if all(isinstance(a, str) for a in t) else None
    return None


def token_kind(X: Sequence[Sequence[Any]]) -> str:
    """What the tokens of (checked) sentences X are: ``dict`` (sklearn-crfsuite feature dicts,
    or lists of feature names) or ``columns`` (words, or tuples ``(word, col1, …)``; also for
    X without tokens)."""
    for s in X:
        for t in s:
            return "dict" if _token_kind(t) == "dict" else "columns"
    return "columns"


def check_sentences(X: Any, name: str = "X", dicts: bool = False) -> Sequence[Sequence[Any]]:
    """X as a sequence of token sequences; a string where a list is expected is an error.

    A token is a word or a tuple ``(word, attribute, …)`` of strings; with ``dicts`` also a
    feature dict as sklearn-crfsuite takes it (``{"word.lower()": "the", "len": 3.0, …}``) or
    a list of feature names, but every token of X of the same kind (:func:`token_kind`). A
    numpy array (of sentences, or 2-D of tokens) is taken as the lists it holds."""
    if isinstance(X, np.ndarray):
        X = X.tolist()
    if isinstance(X, str | bytes) or not hasattr(X, "__len__") or not hasattr(X, "__getitem__"):
        raise InputTypeError(f"{name} must be a list of sentences (lists of tokens), got "
                             f"{type(X).__name__}")
    kind = None
    for k, s in enumerate(X):
        if isinstance(s, str | bytes):
            raise InputTypeError(f"{name}[{k}] is a string, not a list of tokens: split it "
                                 f"first, e.g. {str(s)[:20]!r}.split()")
        if not hasattr(s, "__len__"):
            raise InputTypeError(f"{name}[{k}] must be a list of tokens")
        types = set(map(type, s))  # words only: the common case, without a call per token
        kinds = ({"columns"} if types else set()) if types <= {str} else set(map(_token_kind, s))
        if kind is not None:
            kinds.add(kind)
        if None in kinds or (not dicts and "dict" in kinds):
            raise InputTypeError(f"{name}[{k}] must be a list of tokens (strings, or tuples "
                                 "(word, attribute, ...) of strings"
                                 + (", or feature dicts" if dicts else "") + ")")
        if len(kinds) > 1:
            raise InputTypeError(f"{name}[{k}]: tokens mix feature dicts with words or tuples; "
                                 "all tokens must be of one kind")
        if kinds:
            kind = kinds.pop()
    return X


def check_tags(X: Sequence[Sequence[str]], Y: Any, name: str = "Y",
               partial: bool = False) -> Sequence[Sequence[str]]:
    """Y as tag sequences of the same lengths as the sentences of X (a numpy array: the lists
    it holds). ``partial``: a tag may also be None (unknown) or a set of labels
    (:mod:`demidcd.tasks.chain.partial`)."""
    if isinstance(Y, np.ndarray):
        Y = Y.tolist()
    if isinstance(Y, str | bytes) or not hasattr(Y, "__len__"):
        raise InputTypeError(f"{name} must be a list of tag lists, got {type(Y).__name__}")
    for k, t in enumerate(Y):  # set(map(type, t)): no call per tag in the common case
        if isinstance(t, str | bytes):
            raise InputTypeError(f"{name}[{k}] must be a list of tags (strings)")
        if set(map(type, t)) <= {str} or all(isinstance(x, str) for x in t):
            continue
        if not partial:
            raise InputTypeError(f"{name}[{k}] must be a list of tags (strings)")
        from ..tasks.chain.partial import check_cell

        for j, x in enumerate(t):
            try:
                check_cell(x, f"{name}[{k}][{j}]")
            except TypeError as e:
                raise InputTypeError(str(e)) from None
    if len(X) != len(Y):
        raise OptionError(f"X has {len(X)} sentences but {name} has {len(Y)}")
    for k, (s, t) in enumerate(zip(X, Y, strict=True)):
        if len(s) != len(t):
            raise OptionError(f"sentence {k} has {len(s)} tokens but {len(t)} tags")
    return Y


def top_weights(w: np.ndarray, top: int | None) -> np.ndarray:
    """Indices of the ``top`` largest |w| (None: every non-zero entry), largest first, ties by
    index; zeros never count."""
    a = np.abs(np.asarray(w, np.float64))
    nz = np.flatnonzero(a)
    if top is not None and nz.shape[0] > top:
        part = np.argpartition(-a[nz], top - 1)[:top] if top > 0 else nz[:0]
        nz = np.sort(nz[part])
    return nz[np.lexsort((nz, -a[nz]))]


def top_text(top: int | None, n: int) -> str:
    """How a dump header names ``n`` weights picked by :func:`top_weights` with ``top``."""
    return f"all {n:,} non-zero weights" if top is None else f"top {n:,} weights"


_FROM_TABLE = object()


def param(name: str, annotation: Any, default: Any = _FROM_TABLE) -> inspect.Parameter:
    """A keyword-only constructor argument for :func:`estimator_init`; its default is the
    option table's (:func:`demidcd.options.default`) unless given."""
    if default is _FROM_TABLE:
        default = table_default(name) if name in BY_NAME else None
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def _annotation(o: Option) -> Any:
    kind = int | str if o.name == "learners" else Any if o.name == "init" else o.type
    return kind if o.default is not None and o.type is bool else kind | None


COMMON_PARAMS: tuple[inspect.Parameter, ...] = (
    *(param(o.name, _annotation(o)) for o in learner_params()),
    param("callback", Callable[[dict, np.ndarray], None] | None, None),
    param("log", Callable[[str], None] | None, None))
"""Constructor arguments of every estimator (see :class:`StructuredEstimator`), after the
task's own: the option table's learner and output options with its defaults, and the
callbacks."""


def estimator_init(*task_params: inspect.Parameter) -> Callable[..., None]:
    """An estimator ``__init__`` taking ``task_params`` and :data:`COMMON_PARAMS`, keyword-only,
    and storing each unchanged. Its ``__signature__`` lists them, so ``get_params``, ``clone``
    and ``help`` see them as if written out; a positional or unknown argument is a TypeError."""
    self_ = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    sig = inspect.Signature([self_, *task_params, *COMMON_PARAMS])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{type(self).__name__}.__init__() {e}") from None
        bound.apply_defaults()
        self._store(bound.arguments)

    __init__.__signature__ = sig
    __init__.__annotations__ = {p.name: p.annotation for p in sig.parameters.values()
                                if p.annotation is not p.empty}
    return __init__


_NOT_SAVED = object()


def _encode_value(v: Any) -> Any:
    """One constructor argument as JSON: None, bool, int, str and finite floats as they are
    (numpy scalars as Python ones, paths as strings), a non-finite float as ``{"float":
    "inf"}``; anything else (a callable) is not saved."""
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if np.isfinite(v) else {"float": repr(v)}
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    return _NOT_SAVED


def encode_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments a model file keeps (``callback``, ``log`` and other values
    that are not numbers, strings, booleans or None are left out: ``load`` gives None)."""
    out = {}
    for k, v in params.items():
        enc = _encode_value(v)
        if enc is not _NOT_SAVED:
            out[k] = enc
    return out


def decode_parameters(path: str, saved: Any) -> dict[str, Any] | None:
    """The inverse of :func:`encode_parameters`; None when the file has none (older models);
    a malformed entry is a :class:`ModelFileError`."""
    if saved is None:
        return None
    bad = ModelFileError(path, "corrupt model metadata (bad 'parameters')")
    if not isinstance(saved, dict):
        raise bad
    out: dict[str, Any] = {}
    for k, v in saved.items():
        if isinstance(v, dict):
            if set(v) != {"float"} or v["float"] not in ("inf", "-inf", "nan"):
                raise bad
            v = float(v["float"])
        elif not (v is None or isinstance(v, bool | int | float | str)):
            raise bad
        out[k] = v
    return out


def _saved_type_error(annotation: Any, value: Any) -> str:
    """"" when ``value``, a saved constructor argument (None, bool, int, float or str), has a
    type the argument's ``annotation`` names, else what it should be ("a string", "a number",
    …). Annotations that name neither strings nor numbers (Any, callables) take anything."""
    kinds = set(typing.get_args(annotation) or (annotation,))
    text, number = str in kinds, bool(kinds & {int, float, bool})
    if value is None or not (text or number) or (text and isinstance(value, str)) or (
            number and isinstance(value, int | float)):
        return ""
    return " or ".join([*(["a string"] if text else []), *(["a number"] if number else [])])


def saved_result(path: str, w: np.ndarray, meta: dict) -> TrainResult:
    """``result_`` of a loaded model: the saved summary of its training as a
    :class:`~demidcd.solvers.common.TrainResult` (``finished``, ``stop_reason``, ``epochs``,
    ``seconds`` and ``dual``; None where the file does not say, as older models do not for
    ``seconds`` and ``dual``), with an empty ``history`` and ``extra``."""
    epochs, seconds, dual = meta.get("epochs"), meta.get("seconds"), meta.get("dual")
    if not (epochs is None or (isinstance(epochs, int) and not isinstance(epochs, bool)
                               and epochs >= 0)) or any(
            not (x is None or (isinstance(x, int | float) and not isinstance(x, bool)))
            for x in (seconds, dual)):
        raise ModelFileError(path, "corrupt model metadata (bad training summary)")
    return TrainResult(w=w, finished=bool(meta.get("finished", True)),
                       stop_reason=str(meta.get("stop_reason", "unknown")), epochs=epochs,
                       seconds=None if seconds is None else float(seconds),
                       dual=None if dual is None else float(dual))


def _caller_level() -> int:
    """The ``stacklevel`` of a warning given by the function that calls this one that names
    the first frame outside the package (the user's call of ``fit``, however deep the
    estimators' ``fit`` chain)."""
    import sys

    f, level = sys._getframe(1), 1
    while f is not None and str(f.f_globals.get("__name__", "")).startswith("demidcd."):
        f, level = f.f_back, level + 1
    return level


class StructuredEstimator:
    """Hyper-parameters shared by every estimator (see ``demidcd train --help``); None means
    the default.

    C: regularisation (Eq. 1). algorithm: a name of :data:`demidcd.solvers.LEARNERS` (``dcd``,
    ``demi-dcd``, ``ms-dcd``, ``sp-ipm``, ``perceptron``, ``mira``, ``pegasos``, ``adagrad``,
    ``sdm-hinge``, ``sdm-ramp``, ``crf``; None: ``demi-dcd`` when threads > 1, else ``dcd``;
    sklearn-crfsuite's ``lbfgs``, ``ap``, ``pa`` are ``crf`` with ``crf_method="lbfgs"``,
    ``perceptron`` and ``mira``, :data:`~demidcd.solvers.plan.ALIASES`; a learner that cannot
    run on ``threads`` processes raises OptionError, and so does an option it does not read
    set to a value of its own, e.g. ``C`` for ``crf``, whose objective has ``c1`` and
    ``c2``). threads: processes (None: 1,
    single-process). tol, delta, max_epochs, time_limit, seed,
    inner_passes (r), max_active (|A_i| bound), batch, skip, sweeps, eval_every (seconds between
    primal/dual evaluations in the log), loss (``"l2"`` or ``"l1"``, the hinge loss; the DCD
    learners only): see :class:`~demidcd.solvers.common.SolverConfig`.
    rho, rho_worker, publish_interval, perceptron_epochs_per_round, mixing, averaged,
    batch_size, lam, projection, eta, regularizer: options of the learners that read them
    (README, "Learners"). cpu_log: CSV path for the CPU timeline. snapshot_every /
    snapshot_dir: save w every so many seconds. callback(record, w): per outer iteration.
    verbose: 0 (default) prints nothing; 1 prints the progress lines, the iteration lines at
    a thinning cadence (:class:`~demidcd.progress.Cadence`) and the ``stopped:`` line on
    stdout; 2 every iteration line. log(line): where those lines go instead of stdout (e.g.
    ``print``). Whatever ``verbose``, how fit ended is an INFO record of the ``demidcd`` logger
    (and, without ``log`` and at verbose 0, so are the progress lines; each iteration at
    DEBUG), and a learner with a tolerance test that stops at ``max_epochs`` gives a
    :class:`~demidcd.errors.ConvergenceWarning`. debug: worker tracebacks. backend: ``"shm"``
    (None: forked workers on this machine) or ``"ray"``, the workers as Ray actors (``pip
    install 'demidcd[ray]'``) on the cluster at ``ray_address`` ("HOST:PORT"; None: a local
    Ray instance for the run). Where training ran is not saved with the model.

    Resume and warm start (the DCD learners; :mod:`demidcd.solvers.state`): ``save_state``
    keeps the final dual state of ``fit`` in ``state_`` (write it with :meth:`write_state`;
    :func:`~demidcd.io.model.state_path` names the file beside a model); ``resume`` (a model
    path whose state file lies beside it, or the ``.state.npz`` itself) continues that run on
    the same data and options: its features and labels are reused, its active sets and α
    loaded, and the run certifies the same optimum as one uninterrupted run (a state of
    other data, C, loss or feature space raises :class:`~demidcd.solvers.state.StateMismatch`).
    ``init`` (a model path or a fitted estimator of this class; like scikit-learn's
    ``warm_start`` but from any model: pass a path where the estimator is cloned) trains
    min ½‖w − w₀‖² + C Σ ξ² with the old model's w₀ as the prior, so that a model adapts to new
    data without the old data: its features and labels are extended by the new data's
    (:mod:`.warm`) and the prior is kept in ``prior_`` (:meth:`objective` measures ‖w − w₀‖;
    the model file does not keep it, the state file does).
    """

    task_name = "task"
    score_name = "score"  # what :meth:`score` measures, for logs and reports
    _task_params: tuple[str, ...] = ()  # hyper-parameters of the subclass, saved in the model
    _task_defaults: dict[str, Any] = {}  # ... and what their None means
    _requires_y = True
    _default_loss = "l2"  # what loss=None means for the DCD learners (SolverConfig.loss)
    _capabilities: tuple[str, ...] = ()  # what the task's structures offer (Learner.needs)

    # -- scikit-learn's estimator protocol ------------------------------------------------------
    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's keyword arguments, sorted (as ``BaseEstimator``)."""
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind == p.KEYWORD_ONLY)

    def _store(self, values: dict[str, Any]) -> None:
        for name in self._get_param_names():
            setattr(self, name, values[name])

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor arguments as stored (``deep``: also ``name__sub`` of nested
        estimators)."""
        out: dict[str, Any] = {}
        for k in self._get_param_names():
            v = getattr(self, k)
            if deep and hasattr(v, "get_params") and not isinstance(v, type):
                out.update((f"{k}__{kk}", vv) for kk, vv in v.get_params().items())
            out[k] = v
        return out

    def set_params(self, **params: Any) -> StructuredEstimator:
        """Set constructor arguments (validated at the next ``fit``); returns self."""
        valid = self._get_param_names()
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator "
                                 f"{type(self).__name__}. Valid parameters are: {valid!r}.")
            if sub:
                getattr(self, name).set_params(**{sub: value})
            else:
                setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__).parameters
        changed = []
        for k in self._get_param_names():
            v = getattr(self, k, None)
            default = sig[k].default
            if v is not default and not (type(v) is type(default) and v == default):
                changed.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self):  # noqa: ANN204 - sklearn.utils.Tags, imported lazily
        """scikit-learn tags: neither classifier nor regressor (so cross-validation uses plain
        K-fold splits), inputs are sequences of tokens, not 2-D arrays."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=self._requires_y),
                    input_tags=InputTags(two_d_array=False, string=True), requires_fit=True,
                    non_deterministic=isinstance(self.threads, int) and self.threads > 1)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "coef_")

    # -- resume and warm start: the hooks on the fitted vocabulary ------------------------------
    @property
    def featurizer_(self) -> Any:
        """The fitted featurizer. Assigning it while ``resume`` or ``init`` is set (in ``fit``)
        takes the saved model's instead (resume) or extends it (warm start, :mod:`.warm`)."""
        try:
            return self.__dict__["_featurizer"]
        except KeyError:
            raise AttributeError("featurizer_") from None

    @featurizer_.setter
    def featurizer_(self, value: Any) -> None:
        self.__dict__["_featurizer"] = self._adopt("featurizer", value)

    @property
    def classes_(self) -> list[str]:
        """The label names; assigned in ``fit`` while ``resume`` or ``init`` is set: the saved
        model's (resume) or those extended by the new data's (warm start)."""
        try:
            return self.__dict__["_classes"]
        except KeyError:
            raise AttributeError("classes_") from None

    @classes_.setter
    def classes_(self, value: list[str]) -> None:
        self.__dict__["_classes"] = self._adopt("classes", value)

    def _start_source(self) -> tuple[str, Any] | None:
        """("resume" | "init", the fitted model it names), loaded once per fit; None when
        neither is set (both: refused by :meth:`plan` first)."""
        from .warm import load_source, source_key

        resume, init = getattr(self, "resume", None), getattr(self, "init", None)
        if resume is None and init is None:
            return None
        kind, value = ("resume", resume) if resume is not None else ("init", init)
        if kind == "resume":
            from ..io.model import STATE_SUFFIX

            p = os.fspath(value)
            value = p[:-len(STATE_SUFFIX)] + ".npz" if p.endswith(STATE_SUFFIX) else p
        key = (kind, source_key(value))
        cached = self.__dict__.get("_start_cache")
        if cached is None or cached[0] != key:
            cached = (key, load_source(type(self), value, kind))
            self.__dict__["_start_cache"] = cached
        return kind, cached[1]

    def _adopt(self, what: str, value: Any) -> Any:
        """``value`` as fitted, or what a resume or warm start makes of it (see
        :attr:`featurizer_` and :attr:`classes_`)."""
        from ..solvers.state import StateMismatch
        from .warm import extend_featurizer, extend_labels

        src = self._start_source()
        if src is None:
            return value
        kind, old = src
        if what == "classes":
            old_labels = list(old.classes_)
            if kind == "init":
                return extend_labels(old_labels, list(value))
            extra = sorted(set(value) - set(old_labels))
            if extra:
                raise StateMismatch(f"--resume {self.resume}: the training data have labels "
                                    f"the saved model lacks ({', '.join(map(repr, extra[:5]))}"
                                    f"{' …' if len(extra) > 5 else ''}): not the same data")
            return old_labels
        if kind == "init":
            return extend_featurizer(old.featurizer_, value, self._say())
        for attr in ("min_count", "hashing"):  # the saved vocabulary is kept: not silently
            now, was = getattr(value, attr, None), getattr(old.featurizer_, attr, None)
            if now is not None and was is not None and now != was:
                raise StateMismatch(f"--resume {self.resume}: --{attr.replace('_', '-')} {now} "
                                    f"is not the saved run's {was}: the features would change; "
                                    f"resume with --{attr.replace('_', '-')} {was}, or start "
                                    "from the model's weights with --init")
        return old.featurizer_

    def _start_point(self, task: Any) -> Any:
        """The :class:`~demidcd.solvers.state.Start` of this fit (None: a plain one)."""
        from ..solvers.state import DualState, Start, StateMismatch

        keep = bool(self.save_state)
        src = self._start_source()
        if src is None:
            return Start(keep_state=True) if keep else None
        kind, old = src
        if kind == "init":
            from .warm import prior_weights

            return Start(w0=prior_weights(old, self, task), keep_state=keep)
        from ..io.model import load_state, state_path

        path = state_path(self.resume)
        try:
            arrays, meta = load_state(path)
        except ModelFileError as e:
            raise ModelFileError(f"--resume {self.resume}", str(e)) from None
        state = DualState(arrays, meta)
        if not state.belongs_to(old.coef_):
            raise StateMismatch(f"--resume {self.resume}: the saved state {path} is not the "
                                "state of this model (a run stopped between writing the model "
                                "and its state?); resume from a model and the state saved with "
                                "it, or start from this model's weights with --init")
        self._say()(f"resuming {self.resume}: {state.epoch} iterations done, "
                    f"{state.n_structures:,} structures in the active sets")
        return Start(state=state, keep_state=keep)

    def write_state(self, path: str | os.PathLike[str]) -> None:
        """Write the dual state kept by the last ``fit`` (``save_state=True``) atomically to
        ``path`` (beside a model: :func:`~demidcd.io.model.state_path`)."""
        from ..io.model import save_state

        st = getattr(self, "state_", None)
        if st is None:
            raise not_fitted(f"this {type(self).__name__} kept no dual state: fit it with "
                             "save_state=True (a DCD learner) first")
        save_state(path, st.arrays, st.meta)

    def _check_fitted(self, attribute: str = "coef_") -> None:
        if not hasattr(self, attribute):
            raise not_fitted(f"this {type(self).__name__} is not fitted yet: call fit (or "
                             "load a model) first")

    # -- options --------------------------------------------------------------------------------
    def plan(self, feature_kind: str | None | object = _FROM_TABLE) -> TrainingPlan:
        """The :class:`~demidcd.solvers.plan.TrainingPlan` of these parameters: every learner
        option checked once and every default resolved (:func:`~demidcd.solvers.plan.
        make_plan`): the algorithm (None: DEMI-DCD on several threads, else 1-DCD), the
        processes (None: 1), the :class:`SolverConfig` (``C=None`` by the features' kind,
        ``feature_kind``, :func:`~demidcd.options.default_C`; ``loss=None`` the task's loss for
        the DCD learners), the engine options, DEMI-DCD's ``learners`` and the start options.
        A bad value raises :class:`~demidcd.errors.OptionError` naming the parameter."""
        opts = {k: getattr(self, k) for k in SOLVER_OPTIONS}
        engine = {k: getattr(self, k, None) for k in ENGINE_OPTIONS}
        if self.snapshot_every is not None:
            from ..io.snapshots import check_every

            check_every(self.snapshot_every)
        return make_plan(self.algorithm, opts, 1 if self.threads is None else self.threads,
                         default_loss=self._default_loss,
                         start=tuple(k for k in START_OPTIONS
                                     if getattr(self, k, None) not in (None, False)),
                         backend=self.backend, ray_address=self.ray_address,
                         debug=bool(self.debug),
                         default_C=default_C(self._feature_kind() if feature_kind is
                                             _FROM_TABLE else feature_kind),
                         capabilities=self._capabilities, **engine)

    def solver_config(self) -> SolverConfig:
        """The validated :class:`SolverConfig` of :meth:`plan`: the options that are set,
        defaults for the rest."""
        return self.plan().config

    def _feature_kind(self) -> str | None:
        """What the model's features are, for the defaults that depend on it (``C``:
        :func:`~demidcd.options.default_C`): ``"dict"`` for feature dicts, None otherwise (and
        before fit)."""
        return None

    def _begin_fit(self, feature_kind: str | None | object = _FROM_TABLE) -> TrainingPlan:
        """The plan of the fit under way (:meth:`plan`, once per fit: bad options fail before
        any work), which :meth:`_train` runs."""
        plan = self.plan(feature_kind)
        self.__dict__["_fit_plan"] = plan
        self.__dict__["_fit_t0"] = time.perf_counter()  # set-up before the clock, from here
        return plan

    def _algorithm(self) -> str:
        """The learner's name: the plan's of the fit under way, else of the fitted model, else
        of the parameters (:meth:`plan`)."""
        plan = self.__dict__.get("_fit_plan") or self.__dict__.get("plan_") or self.plan()
        return plan.algorithm

    def hyper_parameters(self) -> dict[str, Any]:
        """The options the model was trained with (before ``fit``: would be trained with),
        every one resolved (:meth:`~demidcd.solvers.plan.TrainingPlan.hyper_parameters`:
        algorithm, threads, the fields of :class:`SolverConfig` the learner reads, its engine
        options, DEMI-DCD's ``learners`` as decided) and the task's own (``_task_params``)."""
        plan = self.__dict__.get("plan_") or self.plan()
        task = {k: self._task_defaults.get(k) if getattr(self, k) is None else getattr(self, k)
                for k in self._task_params}
        return {**plan.hyper_parameters(), **task}

    # -- training -------------------------------------------------------------------------------
    def _train(self, task, dev_eval: Callable[[np.ndarray], dict] | None = None) -> TrainResult:
        """Run the learner on the bound ``task``; ``dev_eval(w)`` → metrics dict for the log.
        A :class:`~demidcd.parallel.engine.WorkerError` leaves the partial model fitted."""
        from ..errors import WorkerError
        from ..solvers.state import StateMismatch, weights_digest

        plan = self.__dict__.pop("_fit_plan", None) or self.plan()
        config, algorithm = plan.config, plan.algorithm
        for attr in ("state_", "prior_", "plan_"):
            self.__dict__.pop(attr, None)
        try:
            start = self._start_point(task)
        finally:
            self.__dict__.pop("_start_cache", None)  # the next fit loads its source afresh
        snap = None
        if self.snapshot_dir is not None:
            from ..io.snapshots import Snapshotter

            snap = Snapshotter(self.snapshot_dir, self.snapshot_every or 5.0)
            self.coef_, self.result_ = np.zeros(task.dim), None
            self.save(os.path.join(self.snapshot_dir, "base.npz"))

        say = self._say()
        cadence = Cadence(self._verbosity(), "verbose=2")
        debug_lines = say is LOGGER.info and LOGGER.isEnabledFor(logging.DEBUG)

        def cb(rec: dict, w: np.ndarray) -> None:
            if snap is not None:  # with the work the record counts (work.csv), if any
                snap.maybe(rec["seconds"], w, work=(rec["total_updates"], rec["inferences"])
                           if "total_updates" in rec and "inferences" in rec else None)
            if dev_eval is not None:
                rec["dev"] = dev_eval(w)["score"]
                rec["dev_metric"] = self.score_name
            if self.callback is not None:
                self.callback(rec, w)
            for line in cadence.lines(rec):
                say(line)
            if debug_lines:
                LOGGER.debug(format_iteration(rec))

        try:
            plan = decide_learners(plan, task, say)  # learners="auto", measured on the task
            self.plan_ = plan  # what the model records (hyper_parameters)
            result = train(task, plan, callback=cb, cpu_log=self.cpu_log, log=say,
                           tick=snap.maybe if snap else None, start=start,
                           warm=None if dev_eval is None else lambda: self._warm_decode(task),
                           since=self.__dict__.pop("_fit_t0", None))
        except StateMismatch as e:
            from ..io.model import state_path

            raise StateMismatch(f"--resume {self.resume}: the saved state "
                                f"{state_path(self.resume)} does not match this run: "
                                f"{e.cli_text()}") from None
        except WorkerError as e:  # keep the partial model (unfinished) for save()
            partial = getattr(e, "partial", None)
            if partial is not None:
                self.coef_, self.result_ = partial.w, partial
            raise
        finally:
            if snap is not None:
                snap.close()
            # the learner's objects form reference cycles (its clock's work counter refers to
            # it): collect them now, so that its active sets (the φ pool) are handed back
            # before the model is saved and scored, not at some later collection (issue 56,
            # defect 9; benchmarks/README.md); not for a small task, whose active sets are
            # small, where a full collection (tens of ms in a large interpreter) would cost
            # more than it gives back
            if task.n_examples >= COLLECT_FROM_EXAMPLES:
                gc.collect()
        self._say_how_it_ended(result, config, algorithm, cadence)
        if snap is not None:
            snap = Snapshotter(self.snapshot_dir, 1.0)
            snap.maybe(result.seconds, result.w, force=True, work=work_done(result.extra))
            snap.close()
        self.coef_ = result.w
        self.result_ = result
        if start is not None:
            if start.prior is not None:
                self.prior_ = start.prior
            if start.keep_state:
                self.state_ = result.state
                if result.state is not None:  # the model this state belongs to (a resume checks)
                    result.state.meta["model_weights"] = weights_digest(result.w)
        return result

    def preload_kernels(self, plan: Any) -> None:
        """Load from numba's cache, never compile, the kernels a fit by ``plan`` will call,
        on a task of a few made-up examples (:meth:`_warm_task`; None: nothing to do): the
        command line runs it while another process reads and encodes the data, so that the
        fit's warm-up finds them in memory (:func:`demidcd.solvers.preload`). An estimator
        whose made-up task cannot be built loses only that head start."""
        from ..primitives.pages import release_library_pages
        from ..solvers import preload

        try:
            task = self._warm_task()
            if task is not None:
                preload(task, plan)
        except Exception:  # noqa: BLE001, S110 - the fit's own warm-up loads what is missing
            pass
        release_library_pages()  # (what loading touched of the compiler, as before a fork)

    def _warm_task(self) -> Any:
        """A task of a few made-up examples bound as this estimator binds its data, or None."""
        return None

    def _warm_decode(self, task: Any) -> None:
        """Decode example 0 of ``task`` at w = 0, as the dev evaluation decodes: its kernels
        compile (or load) with the learner's, before the clock starts."""
        task.decode(np.zeros(task.dim), np.zeros(1, np.int64))

    def _verbosity(self) -> int:
        """``verbose`` checked (None: 0)."""
        v = self.verbose
        if v is None:
            return 0
        if not isinstance(v, int | np.integer) or v < 0:
            raise OptionError(f"--verbose must be an integer >= 0, got {v!r}")
        return int(v)

    def _say(self) -> Callable[[str], None]:
        """Where fit's lines go: ``log`` when given, else stdout at ``verbose`` >= 1, else
        the ``demidcd`` logger at INFO (:data:`~demidcd.progress.LOGGER`)."""
        if self.log is not None:
            return self.log
        return print_line if self._verbosity() > 0 else LOGGER.info

    def _say_how_it_ended(self, result: TrainResult, config: SolverConfig, algorithm: str,
                          cadence: Cadence) -> None:
        """After fit: the last iteration's line if the cadence left it out, the ``stopped:``
        line (where the iteration lines go at ``verbose`` >= 1; always a ``demidcd`` logger
        record) and, when a learner with a tolerance test stopped at ``max_epochs``, a
        :class:`~demidcd.errors.ConvergenceWarning`."""
        import warnings

        from ..errors import ConvergenceWarning

        say = self._say()
        for line in cadence.final():
            say(line)
        line = stop_line(result, config.tol, config.loss)
        if say is not LOGGER.info:
            if cadence.verbose > 0:
                say(line)
            LOGGER.info(line)
        else:
            say(line)
        step = result.extra.get("cccp_stop", {}).get("step_reason")  # CCCP: its convex step's
        if "max-epochs" in (result.stop_reason, step) and algorithm in TOLERANCE_LEARNERS:
            warnings.warn(ConvergenceWarning(f"{type(self).__name__}: {line}"),
                          stacklevel=_caller_level())

    def _meta(self) -> dict[str, Any]:
        """Metadata every model file carries: task, the constructor arguments as given
        (``parameters``, :func:`encode_parameters`) and resolved (``hyper_parameters``), how
        training ended (stop reason, epochs, seconds, dual) and the data options the CLI
        remembers (``data_options_``, e.g. the label column)."""
        self._check_fitted()
        res = getattr(self, "result_", None)
        return {"task": self.task_name, "dim": int(self.coef_.shape[0]),
                "parameters": encode_parameters(self.get_params(deep=False)),
                "hyper_parameters": self.hyper_parameters(),
                **({"learners_reason": self.plan_.learners_reason}
                   if getattr(self, "plan_", None) and self.plan_.learners_reason else {}),
                "data_options": dict(getattr(self, "data_options_", {}) or {}),
                "finished": bool(res.finished) if res else True,
                "stop_reason": res.stop_reason if res else "unknown",
                "epochs": res.epochs if res else None,
                "dual": None if res is None or res.dual is None else float(res.dual)}

    def _loaded(self, path: str | os.PathLike[str], w: np.ndarray, meta: dict) -> None:
        """Finish a ``load``: the constructor arguments as they were given (models written
        before they were saved keep the resolved ones the loader passed), ``coef_ = w``,
        ``meta_`` and ``result_``, the saved summary of the training run
        (:func:`saved_result`)."""
        given = decode_parameters(str(path), meta.get("parameters"))
        if given is not None:
            hp = meta.get("hyper_parameters") or {}
            sig = inspect.signature(type(self).__init__).parameters
            for name in self._get_param_names():
                value, field = given.get(name), "parameters"
                # None meant the default of the version that trained: where a task option
                # (e.g. the dependency parser's hashing) now defaults otherwise, keep its value
                if value is None and name in self._task_params and name in hp and \
                        hp[name] != self._task_defaults.get(name):
                    value, field = hp[name], "hyper_parameters"
                must = _saved_type_error(sig[name].annotation, value)
                if must:
                    raise ModelFileError(str(path), f"corrupt model metadata ({field}.{name} is "
                                                    f"{json.dumps(value)[:40]}, not {must})")
                setattr(self, name, value)
        self.coef_, self.meta_ = w, meta
        self.result_ = saved_result(str(path), w, meta)
        saved = (meta.get("hyper_parameters") or {}).get("learners")
        if isinstance(saved, int) and not isinstance(saved, bool):
            try:  # learners="auto" as decided when the model was trained
                plan = self.plan()
            except OptionError:
                return
            if plan.learners == "auto":
                self.plan_ = replace(plan, learners=saved,
                                     learners_reason=str(meta.get("learners_reason") or ""))

    def weight_lines(self, top: int | None = 50) -> Iterator[str]:
        """The lines of ``demidcd dump``: a header, then the ``top`` weights by |weight| (None:
        every non-zero one), ``w[index]<TAB>weight`` each (tasks whose features have no names
        or are hashed; the sequence taggers name them)."""
        self._check_fitted()
        w = self.coef_
        idx = top_weights(w, top)
        yield (f"# {self.task_name} model, {w.shape[0]:,} weights ({np.count_nonzero(w):,} "
               f"non-zero); the features are not named: weights by index")
        yield f"# {top_text(top, idx.shape[0])} by |weight|"
        for i in idx.tolist():
            yield f"w[{i}]\t{w[i]:+.6g}"

    def feature_summary(self) -> str:
        """One line on the size of w, for the training log."""
        dim = self.coef_.shape[0]
        return f"{dim:,} weights ({dim * 8 / 2**20:.1f} MiB float64)"

    def metrics(self, X: Any, Y: Any = None) -> dict[str, Any]:
        """Evaluation metrics of :meth:`predict` on X against Y; ``score`` is the headline."""
        raise NotImplementedError

    def score(self, X: Any, Y: Any = None) -> float:
        """The headline metric (:attr:`score_name`) of :meth:`predict` on X against Y."""
        self._check_fitted()
        return float(self.metrics(X, Y)["score"])

    def objective(self, task) -> dict[str, float | None]:
        """Primal (Eq. 1, or the hinge loss's for ``loss="l1"``) of the fitted w on a bound
        task, and the learner's dual and gap."""
        self._check_fitted()
        dual = self.result_.dual if getattr(self, "result_", None) is not None else None
        config = self.solver_config()
        ob = objective(task, self.coef_, config.C, dual, loss=config.loss,
                       w0=getattr(self, "prior_", None))
        return {"primal": ob.primal, "dual": ob.dual, "gap": ob.gap}
