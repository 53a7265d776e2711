"""Library API: scikit-learn estimators for structured outputs. Construct with
hyper-parameters, ``fit``, ``predict``, ``score``, ``save`` / ``load``; fitted attributes end
in ``_``. :mod:`demidcd.datasets` reads corpus files into the ``X, Y`` they take.

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

import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from typing import Any

import numpy as np

from .errors import InputTypeError, ModelFileError, OptionError, not_fitted
from .io.model import load_model, save_model
from .solvers import check_loss, get_learner, train
from .solvers.common import SolverConfig, TrainResult, objective
from .tasks.er_solvers import DEFAULT_ILP_TIME_LIMIT
from .tasks.features import DEFAULT_MIN_COUNT, SequenceFeaturizer
from .tasks.sequence import SequenceTask

SOLVER_OPTIONS = tuple(f.name for f in fields(SolverConfig))
"""Constructor arguments that go into :class:`SolverConfig` (defaults there)."""
ENGINE_OPTIONS = ("rho", "rho_worker", "publish_interval", "perceptron_epochs_per_round",
                  "mixing", "averaged", "batch_size", "lam", "projection", "eta",
                  "regularizer", "learners", "update_mode")
"""Constructor arguments passed to the learners that read them when set (defaults in the
learners' signatures; see :data:`demidcd.solvers.LEARNERS`)."""


def _check_sentences(X: Any, name: str = "X") -> Sequence[Sequence[str]]:
    """X as a sequence of token sequences; a string where a list is expected is an error."""
    if isinstance(X, str | bytes) or not hasattr(X, "__len__") or not hasattr(X, "__getitem__"):
        raise InputTypeError(f"{name} must be a list of sentences (lists of tokens), got "
                             f"{type(X).__name__}")
    for k, s in enumerate(X):
        if isinstance(s, str | bytes):
            raise InputTypeError(f"{name}[{k}] is a string, not a list of tokens: split it "
                                 f"first, e.g. {str(s)[:20]!r}.split()")
        if not hasattr(s, "__len__") or not all(
                isinstance(t, str) or (isinstance(t, tuple) and t and
                                       all(isinstance(a, str) for a in t)) for t in s):
            raise InputTypeError(f"{name}[{k}] must be a list of tokens (strings, or tuples "
                                 "(word, attribute, ...) of strings)")
    return X


def _check_tags(X: Sequence[Sequence[str]], Y: Any, name: str = "Y") -> Sequence[Sequence[str]]:
    """Y as tag sequences of the same lengths as the sentences of X."""
    if isinstance(Y, str | bytes) or not hasattr(Y, "__len__"):
        raise InputTypeError(f"{name} must be a list of tag lists, got {type(Y).__name__}")
    for k, t in enumerate(Y):
        if isinstance(t, str | bytes) or not all(isinstance(x, str) for x in t):
            raise InputTypeError(f"{name}[{k}] must be a list of tags (strings)")
    if len(X) != len(Y):
        raise OptionError(f"X has {len(X)} sentences but {name} has {len(Y)}")
    for k, (s, t) in enumerate(zip(X, Y, strict=True)):
        if len(s) != len(t):
            raise OptionError(f"sentence {k} has {len(s)} tokens but {len(t)} tags")
    return Y


def param(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    """A keyword-only constructor argument for :func:`estimator_init`."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


COMMON_PARAMS: tuple[inspect.Parameter, ...] = (
    param("C", float | None), param("algorithm", str | None), param("threads", int | None),
    param("loss", str | None),
    param("tol", float | None), param("delta", float | None), param("max_epochs", int | None),
    param("time_limit", float | None), param("seed", int | None),
    param("inner_passes", int | None), param("max_active", int | None),
    param("batch", int | None), param("skip", float | None), param("sweeps", int | None),
    param("eval_every", float | None), param("rho", int | None),
    param("rho_worker", int | None), param("publish_interval", float | None),
    param("learners", int | str | None), param("update_mode", str | None),
    param("perceptron_epochs_per_round", int | None), param("mixing", str | None),
    param("averaged", bool | None), param("batch_size", int | None), param("lam", float | None),
    param("projection", bool | None), param("eta", float | None),
    param("regularizer", str | None), param("backend", str | None),
    param("ray_address", str | None), param("cpu_log", str | None),
    param("snapshot_every", float | None), param("snapshot_dir", str | None),
    param("callback", Callable[[dict, np.ndarray], None] | None),
    param("log", Callable[[str], None] | None), param("debug", bool, False))
"""Constructor arguments of every estimator (see :class:`StructuredEstimator`), after the
task's own."""


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


class StructuredEstimator:
    """Hyper-parameters shared by every estimator (see ``demidcd train --help``); None means
    the default.

    C: regularisation (Eq. 1). algorithm: a name of :data:`demidcd.solvers.LEARNERS` (``dcd``,
    ``demi-dcd``, ``ms-dcd``, ``sp-ipm``, ``perceptron``, ``mira``, ``pegasos``, ``adagrad``,
    ``sdm-hinge``, ``sdm-ramp``; None: ``demi-dcd`` when threads > 1, else ``dcd``; a learner
    that cannot run on ``threads`` processes raises OptionError). threads: processes (None: 1,
    single-process). tol, delta, max_epochs, time_limit, seed,
    inner_passes (r), max_active (|A_i| bound), batch, skip, sweeps, eval_every (seconds between
    primal/dual evaluations in the log), loss (``"l2"`` or ``"l1"``, the hinge loss; the DCD
    learners only): see :class:`~demidcd.solvers.common.SolverConfig`.
    rho, rho_worker, publish_interval, perceptron_epochs_per_round, mixing, averaged,
    batch_size, lam, projection, eta, regularizer: options of the learners that read them
    (README, "Learners"). cpu_log: CSV path for the CPU timeline. snapshot_every /
    snapshot_dir: save w every so many seconds. callback(record, w): per outer iteration.
    log(line): progress lines (e.g. ``print``). debug: worker tracebacks. backend: ``"shm"``
    (None: forked workers on this machine) or ``"ray"``, the workers as Ray actors (``pip
    install 'demidcd[ray]'``) on the cluster at ``ray_address`` ("HOST:PORT"; None: a local
    Ray instance for the run). Where training ran is not saved with the model.
    """

    task_name = "task"
    score_name = "score"  # what :meth:`score` measures, for logs and reports
    _task_params: tuple[str, ...] = ()  # hyper-parameters of the subclass, saved in the model
    _task_defaults: dict[str, Any] = {}  # ... and what their None means
    _requires_y = True
    _default_loss = "l2"  # what loss=None means for the DCD learners (SolverConfig.loss)

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

    def _check_fitted(self, attribute: str = "coef_") -> None:
        if not hasattr(self, attribute):
            raise not_fitted(f"this {type(self).__name__} is not fitted yet: call fit (or "
                             "load a model) first")

    # -- options --------------------------------------------------------------------------------
    def solver_config(self) -> SolverConfig:
        """The validated :class:`SolverConfig`: the options that are set, defaults for the
        rest."""
        opts = {k: getattr(self, k) for k in SOLVER_OPTIONS}
        if opts.get("loss") is None and "loss" in get_learner(self._algorithm()).options:
            opts["loss"] = self._default_loss
        config = SolverConfig.from_options(**opts)
        config.validate()
        return config

    def _algorithm(self) -> str:
        """The learner's name: ``algorithm``, else DEMI-DCD on several threads, 1-DCD on one."""
        threads = self.threads
        several = isinstance(threads, int | np.integer) and not isinstance(threads, bool) \
            and threads > 1
        return str(self.algorithm or ("demi-dcd" if several else "dcd"))

    def _learner(self) -> tuple[str, int, dict[str, Any]]:
        """(algorithm, threads, the engine options that are set)."""
        threads = 1 if self.threads is None else self.threads
        if isinstance(threads, bool) or not isinstance(threads, int | np.integer):
            raise OptionError(f"--threads must be an integer, got {threads!r}")
        if threads < 1:
            raise OptionError(f"--threads must be >= 1, got {threads}")
        algorithm = self._algorithm()
        check_loss(get_learner(algorithm), self.loss)
        engine = {k: getattr(self, k, None) for k in ENGINE_OPTIONS
                  if getattr(self, k, None) is not None}
        return str(algorithm), int(threads), engine

    def hyper_parameters(self) -> dict[str, Any]:
        """The options the model was trained with, every one resolved: algorithm, threads,
        all fields of :class:`SolverConfig`, the engine options that were set and the task's
        own (``_task_params``)."""
        algorithm, threads, engine = self._learner()
        task = {k: self._task_defaults.get(k) if getattr(self, k) is None else getattr(self, k)
                for k in self._task_params}
        config = asdict(self.solver_config())
        if "loss" not in get_learner(algorithm).options:
            del config["loss"]  # not an option of this learner (check_loss)
        return {"algorithm": algorithm, "threads": threads, **config, **engine, **task}

    # -- training -------------------------------------------------------------------------------
    def _train(self, task, dev_eval: Callable[[np.ndarray], dict] | None = None) -> TrainResult:
        """Run the learner on the bound ``task``; ``dev_eval(w)`` → metrics dict for the log.
        A :class:`~demidcd.parallel.engine.WorkerError` leaves the partial model fitted."""
        from .errors import WorkerError

        config = self.solver_config()
        algorithm, threads, engine = self._learner()
        snap = None
        if self.snapshot_dir is not None:
            from .io.snapshots import Snapshotter

            snap = Snapshotter(self.snapshot_dir, self.snapshot_every or 5.0)
            self.coef_, self.result_ = np.zeros(task.dim), None
            self.save(os.path.join(self.snapshot_dir, "base.npz"))

        def cb(rec: dict, w: np.ndarray) -> None:
            if snap is not None:
                snap.maybe(rec["seconds"], w)
            if dev_eval is not None:
                rec["dev"] = dev_eval(w)["score"]
                rec["dev_metric"] = self.score_name
            if self.callback is not None:
                self.callback(rec, w)

        try:
            result = train(task, algorithm, config, threads, cb, cpu_log=self.cpu_log,
                           log=self.log, debug=bool(self.debug),
                           tick=snap.maybe if snap else None, backend=self.backend,
                           ray_address=self.ray_address, **engine)
        except WorkerError as e:  # keep the partial model (unfinished) for save()
            partial = getattr(e, "partial", None)
            if partial is not None:
                self.coef_, self.result_ = partial.w, partial
            raise
        finally:
            if snap is not None:
                snap.close()
        if snap is not None:
            snap = Snapshotter(self.snapshot_dir, 1.0)
            snap.maybe(result.seconds, result.w, force=True)
            snap.close()
        self.coef_ = result.w
        self.result_ = result
        return result

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
                "data_options": dict(getattr(self, "data_options_", {}) or {}),
                "finished": bool(res.finished) if res else True,
                "stop_reason": res.stop_reason if res else "unknown",
                "epochs": res.epochs if res else None,
                "seconds": float(res.seconds) if res else None,
                "dual": None if res is None or res.dual is None else float(res.dual)}

    def _loaded(self, path: str | os.PathLike[str], w: np.ndarray, meta: dict) -> None:
        """Finish a ``load``: the constructor arguments as they were given (models written
        before they were saved keep the resolved ones the loader passed), ``coef_ = w``,
        ``meta_`` and ``result_``, the saved summary of the training run
        (:func:`saved_result`)."""
        given = decode_parameters(str(path), meta.get("parameters"))
        if given is not None:
            hp = meta.get("hyper_parameters") or {}
            for name in self._get_param_names():
                value = given.get(name)
                # None meant the default of the version that trained: where a task option
                # (e.g. the dependency parser's hashing) now defaults otherwise, keep its value
                if value is None and name in self._task_params and name in hp and \
                        hp[name] != self._task_defaults.get(name):
                    value = hp[name]
                setattr(self, name, value)
        self.coef_, self.meta_ = w, meta
        self.result_ = saved_result(str(path), w, meta)

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
        ob = objective(task, self.coef_, config.C, dual, loss=config.loss)
        return {"primal": ob.primal, "dual": ob.dual, "gap": ob.gap}


class SequenceTagger(StructuredEstimator):
    """First-order chain structural SVM tagger (L2 loss, Eq. 1) over a feature template.

    X is a list of sentences, Y a list of tag lists. A token is a word, or a tuple
    ``(word, attr_0, …)`` whose extra input columns (e.g. POS) feed the attribute window of the
    feature template (:mod:`demidcd.tasks.features`). Extra hyper-parameters: ``min_count``
    (feature dictionary cut-off, None: :data:`~demidcd.tasks.features.DEFAULT_MIN_COUNT`) and
    ``hashing`` (> 0: hashed features, no dictionary; None: 0); the others are those of
    :class:`StructuredEstimator`. Fitted: ``coef_``, ``classes_`` (tag names), ``featurizer_``,
    ``n_features_``, ``result_``. :meth:`score` is token accuracy.
    """

    task_name = "sequence"
    score_name = "accuracy"
    _template = "base"  # feature template of demidcd.tasks.features
    _default_min_count = DEFAULT_MIN_COUNT  # what min_count=None means

    __init__ = estimator_init(param("min_count", int | None), param("hashing", int | None))

    # -- encoding ---------------------------------------------------------------------------
    def _task(self, X: list[list], Y: list[list[str]] | None) -> SequenceTask:
        enc = self.featurizer_.transform(X)
        y = None
        if Y is not None:
            index = {t: k for k, t in enumerate(self.classes_)}
            y = np.fromiter((index.get(t, -1) for s in Y for t in s), np.int32,
                            count=enc.n_tokens)
        return SequenceTask(enc, y, len(self.classes_), self.featurizer_.n_features)

    def fit(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None = None,
            Y_dev: list[list[str]] | None = None) -> SequenceTagger:
        """Learn w from sentences X with gold tags Y (optional dev set for the log)."""
        X = _check_sentences(X)
        Y = _check_tags(X, Y)
        if not X:
            raise OptionError("cannot fit on an empty data set")
        self.solver_config(), self._learner()  # bad options fail before any work
        min_count = self._default_min_count if self.min_count is None else self.min_count
        hashing = 0 if self.hashing is None else self.hashing
        try:
            featurizer = SequenceFeaturizer(int(min_count), int(hashing), self._template,
                                            log=self.log)
        except (TypeError, ValueError) as e:
            raise OptionError(f"--min-count/--hashing: {e}") from None
        for attr in ("coef_", "result_"):  # a new fit forgets the old model
            self.__dict__.pop(attr, None)
        self.classes_ = sorted({t for s in Y for t in s})
        self.featurizer_ = featurizer.fit(X)
        self.n_features_ = self.featurizer_.n_features
        task = self._task(X, Y)
        dev_eval = None
        if X_dev is not None and Y_dev is not None:
            X_dev = _check_sentences(X_dev, "X_dev")
            Y_dev = _check_tags(X_dev, Y_dev, "Y_dev")
            dtask = self._task(X_dev, None)
            gold = [list(s) for s in Y_dev]

            def dev_eval(w: np.ndarray) -> dict:
                return self._metrics(gold, self._decode(dtask, w))

        self._train(task, dev_eval)
        return self

    def _decode(self, task: SequenceTask, w: np.ndarray) -> list[list[str]]:
        tags, ptr = task.decode_flat(w, np.arange(task.n_examples))
        names = np.asarray(self.classes_, dtype=object)[tags].tolist()
        return [names[ptr[e]:ptr[e + 1]] for e in range(ptr.shape[0] - 1)]

    def predict(self, X: list[list]) -> list[list[str]]:
        """Viterbi decoding of each sentence; tags as strings."""
        self._check_fitted()
        X = _check_sentences(X)
        if not X:
            return []
        return self._decode(self._task(X, None), self.coef_)

    def _metrics(self, Y: list[list[str]], pred: list[list[str]]) -> dict[str, Any]:
        total = sum(len(s) for s in Y)
        right = sum(p == g for ps, gs in zip(pred, Y, strict=True)
                    for p, g in zip(ps, gs, strict=True))
        acc = right / max(total, 1)
        return {"score": acc, "accuracy": acc, "tokens": total}

    def metrics(self, X: list[list], Y: list[list[str]]) -> dict[str, Any]:
        """Token accuracy (``score``) of :meth:`predict` against Y, and the token count
        (tags unseen in training count wrong)."""
        self._check_fitted()
        Y = _check_tags(_check_sentences(X), Y)
        return self._metrics(Y, self.predict(X))

    def unknown_labels(self, Y: list[list[str]]) -> dict[str, int]:
        """Gold labels of Y that the model does not know, with their token counts."""
        known = set(self.classes_)
        out: dict[str, int] = {}
        for s in Y:
            for t in s:
                if t not in known:
                    out[t] = out.get(t, 0) + 1
        return out

    def feature_summary(self) -> str:
        n_tags = len(self.classes_)
        dim = self.coef_.shape[0]
        return (f"{self.n_features_:,} observation features x {n_tags} tags + transitions = "
                f"{dim:,} weights ({dim * 8 / 2**20:.1f} MiB float64)")

    def training_task(self, X: list[list], Y: list[list[str]]) -> SequenceTask:
        """The bound task for X, Y with this model's features and tags (for objectives)."""
        self._check_fitted("featurizer_")
        X = _check_sentences(X)
        return self._task(X, _check_tags(X, Y))

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model atomically (npz + JSON metadata, no pickle)."""
        self._check_fitted()
        arrays, fmeta = self.featurizer_.state()
        meta = {**self._meta(), "labels": list(self.classes_), "featurizer": fmeta}
        save_model(path, self.coef_, arrays, meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SequenceTagger:
        """Read a model written by :meth:`save` (``allow_pickle=False``)."""
        w, arrays, meta = load_model(path, task=cls.task_name)
        try:
            hp = meta.get("hyper_parameters", {})
            obj = cls(min_count=meta["featurizer"]["min_count"],
                      hashing=meta["featurizer"]["hashing"], **hp)
            obj.featurizer_ = SequenceFeaturizer.from_state(arrays, meta["featurizer"])
            obj.classes_ = [str(t) for t in meta["labels"]]
            obj.n_features_ = obj.featurizer_.n_features
            obj.data_options_ = dict(meta.get("data_options") or {})
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFileError(str(path), f"corrupt model metadata ({e})") from None
        if w.shape[0] != SequenceTask.dimension(obj.n_features_, len(obj.classes_)):
            raise ModelFileError(str(path), "weight vector does not match features and labels")
        obj._loaded(path, w, meta)
        return obj


class ChunkTagger(SequenceTagger):
    """A :class:`SequenceTagger` for chunking, scored by chunks as ``conlleval`` scores them.

    Labels are BIO / IOB1 / IOB2 / BIOES chunk tags (``B-NP``, ``I-PER``, ``O`` …);
    ``label_scheme`` (``auto``, ``iob1``, ``iob2``/``bio``, ``bioes``/``iobes``) says how to read
    them (:mod:`demidcd.tasks.chunks`). :meth:`score` is chunk F1 and :meth:`metrics` gives
    precision, recall and F1 overall and per type, and token accuracy.

    The DCD learners solve the hinge-loss (L1) SSVM by default here (``loss=None``): measured
    with 1-DCD, C = 0.1, CoNLL-2000 test chunk F1 93.83 against 93.53 (the L2 loss peaks at 93.67
    over C), CoNLL-2002 Spanish esp.testa / esp.testb entity F1 78.19 / 80.85 against
    76.97 / 80.29. ``loss="l2"`` gives the L2 loss (and several DEMI-DCD learners).
    """

    task_name = "chunking"
    score_name = "chunk F1"
    _default_loss = "l1"
    _task_params = ("label_scheme",)
    _task_defaults = {"label_scheme": "auto"}

    __init__ = estimator_init(param("label_scheme", str | None),
                              param("min_count", int | None), param("hashing", int | None))

    def fit(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None = None,
            Y_dev: list[list[str]] | None = None) -> ChunkTagger:
        from .tasks.chunks import resolve_scheme

        Y = _check_tags(_check_sentences(X), Y)
        resolve_scheme({t for s in Y for t in s}, self.label_scheme or "auto")  # fail early
        return super().fit(X, Y, X_dev, Y_dev)

    def _metrics(self, Y: list[list[str]], pred: list[list[str]]) -> dict[str, Any]:
        from .tasks.chunks import chunk_scores

        return chunk_scores(Y, pred, self.label_scheme or "auto").as_dict()


class NamedEntityTagger(ChunkTagger):
    """A :class:`ChunkTagger` for named entities (``B-PER``, ``I-LOC`` …), scored by entity F1.

    Its features are the ``ner`` template of :mod:`demidcd.tasks.features` (word clusters and a
    wider window) and ``min_count`` defaults to 1 (on CoNLL-2002 Spanish, 80 s runs: entity F1
    78.48 with 2, 79.04 with 1)."""

    task_name = "ner"
    _template = "ner"
    _default_min_count = 1


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
        from .tasks.entity_relation import EntityRelationTask

        weight = 1.0 if self.relation_loss_weight is None else self.relation_loss_weight
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            weight = float("nan")
        if not 0 <= weight < float("inf"):
            raise OptionError(f"--relation-loss-weight must be a finite number >= 0, got "
                              f"{self.relation_loss_weight!r}")
        return EntityRelationTask(self.featurizer_.transform(X, with_gold=with_gold),
                                  with_gold=with_gold, solver=self.solver or "exact",
                                  relation_loss_weight=weight,
                                  ilp_time_limit=self._ilp_cap())

    def _ilp_cap(self) -> float | None:
        """Seconds per cbc/highs solve: ``ilp_time_limit`` None → the default
        (:data:`~demidcd.tasks.er_solvers.DEFAULT_ILP_TIME_LIMIT`), 0 → no cap."""
        v = self.ilp_time_limit
        if v is None:
            return DEFAULT_ILP_TIME_LIMIT
        try:
            v = float(v)
        except (TypeError, ValueError):
            v = float("nan")
        if not 0 <= v < float("inf"):
            raise OptionError(f"--ilp-time-limit must be a finite number >= 0, got "
                              f"{self.ilp_time_limit!r}")
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

        from .io.conll04 import ENTITY_LABELS, RELATION_LABELS

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
        from .tasks.entity_relation import EntityRelationFeaturizer

        X = self._with_labels(self._check(X), Y)
        if not X:
            raise OptionError("cannot fit on an empty data set")
        self.solver_config(), self._learner()  # bad options fail before any work
        min_count = 1 if self.min_count is None else self.min_count
        if isinstance(min_count, bool) or not isinstance(min_count, int | np.integer) or \
                min_count < 1:
            raise OptionError(f"--min-count must be an integer >= 1, got {min_count!r}")
        for attr in ("coef_", "result_"):  # a new fit forgets the old model
            self.__dict__.pop(attr, None)
        self.featurizer_ = EntityRelationFeaturizer(int(min_count)).fit(X)
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
        from .tasks.entity_relation import structure_to_labels

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
    def load(cls, path: str | os.PathLike[str]) -> EntityRelationExtractor:
        import json

        from .tasks.entity_relation import EntityRelationFeaturizer, EntityRelationTask

        w, arrays, meta = load_model(path, task=cls.task_name)
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


def load_estimator(path: str | os.PathLike[str]) -> StructuredEstimator:
    """Load a model file of any registered task (:mod:`demidcd.tasks`)."""
    from .tasks import TASKS, get_task

    _, _, meta = load_model(path)
    name = meta.get("task")
    if not isinstance(name, str) or name not in TASKS:
        raise ModelFileError(str(path), f"unknown task {name!r}")
    return get_task(name).estimator_class().load(path)
