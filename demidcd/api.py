"""Library API in scikit-learn style: construct with hyper-parameters, ``fit``, ``predict``,
``score``, ``save`` / ``load``. Fitted attributes end in ``_``.

>>> tagger = SequenceTagger(C=0.1, algorithm="dcd").fit(X, Y)   # X: token lists, Y: tag lists
>>> tagger.predict([["The", "cat", "sat"]])
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ModelFileError, OptionError
from .io.model import load_model, save_model
from .solvers import train
from .solvers.common import SolverConfig, TrainResult, objective
from .tasks.features import DEFAULT_MIN_COUNT, SequenceFeaturizer
from .tasks.sequence import SequenceTask


class StructuredEstimator:
    """Hyper-parameters shared by every estimator (see ``demidcd train --help``).

    C: regularisation (Eq. 1). algorithm: ``dcd`` (DCD-SSVM), ``dcd-light``, and the parallel
    learners once installed. threads: processes (1 = single-process). tol, delta, max_epochs,
    time_limit, seed, inner_passes (r), max_active (|A_i| bound), batch, skip, sweeps: see
    :class:`~demidcd.solvers.common.SolverConfig`. rho / rho_worker: publish / refresh
    intervals of the parallel engine. cpu_log: CSV path for the CPU timeline. eval_every:
    seconds between primal/dual evaluations in the log. callback(record, w): per outer
    iteration.
    """

    task_name = "task"
    score_name = "score"  # what :meth:`score` measures, for logs and reports
    _task_params: tuple[str, ...] = ()  # hyper-parameters of the subclass, saved in the model

    def __init__(self, C: float = 0.1, algorithm: str = "dcd", threads: int = 1,
                 tol: float = 0.01, delta: float = 0.01, max_epochs: int | None = None,
                 time_limit: float | None = None, seed: int = 0, inner_passes: int = 5,
                 max_active: int = 50, batch: int = 16, skip: float = 0.75, sweeps: int = 1,
                 rho: int | None = None,
                 rho_worker: int | None = None, cpu_log: str | None = None,
                 eval_every: float | None = None, snapshot_every: float | None = None,
                 snapshot_dir: str | None = None,
                 callback: Callable[[dict, np.ndarray], None] | None = None, **engine: Any):
        self.C, self.algorithm, self.threads = C, algorithm, threads
        self.tol, self.delta, self.max_epochs, self.time_limit = tol, delta, max_epochs, time_limit
        self.seed, self.inner_passes, self.max_active, self.batch = (seed, inner_passes,
                                                                     max_active, batch)
        self.skip, self.sweeps = skip, sweeps
        self.rho, self.rho_worker, self.cpu_log, self.eval_every = (rho, rho_worker, cpu_log,
                                                                    eval_every)
        self.snapshot_every, self.snapshot_dir = snapshot_every, snapshot_dir
        self.callback = callback
        self.engine = engine

    def _config(self) -> SolverConfig:
        return SolverConfig(C=float(self.C), tol=float(self.tol), delta=float(self.delta),
                            max_epochs=self.max_epochs, time_limit=self.time_limit,
                            seed=int(self.seed), inner_passes=int(self.inner_passes),
                            max_active=int(self.max_active), batch=int(self.batch),
                            skip=float(self.skip), sweeps=int(self.sweeps),
                            eval_every=self.eval_every)

    def _train(self, task, dev_eval: Callable[[np.ndarray], dict] | None = None) -> TrainResult:
        """Run the learner on the bound ``task``; ``dev_eval(w)`` → metrics dict for the log."""
        config = self._config()
        config.validate()

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

        engine = dict(self.engine)
        for k in ("rho", "rho_worker"):
            if getattr(self, k) is not None:
                engine[k] = getattr(self, k)
        try:
            result = train(task, self.algorithm, config, int(self.threads), cb,
                           cpu_log=self.cpu_log, tick=snap.maybe if snap else None, **engine)
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

    def hyper_parameters(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("C", "algorithm", "threads", "tol", "delta",
                                              "max_epochs", "time_limit", "seed",
                                              "inner_passes", "max_active", "batch",
                                              *self._task_params)}

    def _meta(self) -> dict[str, Any]:
        """Metadata every model file carries: task, hyper-parameters, how training ended and
        the data options the CLI remembers (``data_options_``, e.g. the label column)."""
        res = getattr(self, "result_", None)
        return {"task": self.task_name, "dim": int(self.coef_.shape[0]),
                "hyper_parameters": self.hyper_parameters(),
                "data_options": dict(getattr(self, "data_options_", {}) or {}),
                "finished": bool(res.finished) if res else True,
                "stop_reason": res.stop_reason if res else "unknown",
                "epochs": res.epochs if res else None}

    def feature_summary(self) -> str:
        """One line on the size of w, for the training log."""
        dim = self.coef_.shape[0]
        return f"{dim:,} weights ({dim * 8 / 2**20:.1f} MiB float64)"

    def metrics(self, X: Any, Y: Any = None) -> dict[str, Any]:
        """Evaluation metrics of :meth:`predict` on X against Y; ``score`` is the headline."""
        raise NotImplementedError

    def score(self, X: Any, Y: Any = None) -> float:
        """The headline metric (:attr:`score_name`) of :meth:`predict` on X against Y."""
        return float(self.metrics(X, Y)["score"])

    def objective(self, task) -> dict[str, float | None]:
        """Primal (Eq. 1) of the fitted w on a bound task, and the learner's dual and gap."""
        ob = objective(task, self.coef_, float(self.C), self.result_.dual)
        return {"primal": ob.primal, "dual": ob.dual, "gap": ob.gap}


class SequenceTagger(StructuredEstimator):
    """First-order chain structural SVM tagger (L2 loss, Eq. 1) over a feature template.

    X is a list of sentences, Y a list of tag lists. A token is a word, or a tuple
    ``(word, attr_0, …)`` whose extra input columns (e.g. POS) feed the attribute window of the
    feature template (:mod:`demidcd.tasks.features`). Extra hyper-parameters: ``min_count``
    (feature dictionary cut-off) and ``hashing`` (> 0: hashed features, no dictionary).
    Fitted: ``coef_``, ``classes_`` (tag names), ``featurizer_``, ``n_features_``, ``result_``.
    :meth:`score` is token accuracy.
    """

    task_name = "sequence"
    score_name = "accuracy"

    def __init__(self, min_count: int = DEFAULT_MIN_COUNT, hashing: int = 0, **kw: Any):
        super().__init__(**kw)
        self.min_count, self.hashing = min_count, hashing

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
        if len(X) != len(Y):
            raise OptionError(f"X has {len(X)} sentences but Y has {len(Y)}")
        if not X:
            raise OptionError("cannot fit on an empty data set")
        self.classes_ = sorted({t for s in Y for t in s})
        self.featurizer_ = SequenceFeaturizer(int(self.min_count), int(self.hashing)).fit(X)
        self.n_features_ = self.featurizer_.n_features
        task = self._task(X, Y)
        dev_eval = None
        if X_dev is not None and Y_dev is not None:
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
        if len(X) != len(Y):
            raise OptionError(f"X has {len(X)} sentences but Y has {len(Y)}")
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
        return self._task(X, Y)

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model atomically (npz + JSON metadata, no pickle)."""
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
        obj.coef_ = w
        obj.result_ = None
        obj.meta_ = meta
        return obj


class ChunkTagger(SequenceTagger):
    """A :class:`SequenceTagger` for chunking, scored by chunks as ``conlleval`` scores them.

    Labels are BIO / IOB1 / IOB2 / BIOES chunk tags (``B-NP``, ``I-PER``, ``O`` …);
    ``label_scheme`` (``auto``, ``iob1``, ``iob2``/``bio``, ``bioes``/``iobes``) says how to read
    them (:mod:`demidcd.tasks.chunks`). :meth:`score` is chunk F1 and :meth:`metrics` gives
    precision, recall and F1 overall and per type, and token accuracy.
    """

    task_name = "chunking"
    score_name = "chunk F1"
    _task_params = ("label_scheme",)

    def __init__(self, label_scheme: str = "auto", **kw: Any):
        super().__init__(**kw)
        self.label_scheme = label_scheme

    def fit(self, X: list[list], Y: list[list[str]], X_dev: list[list] | None = None,
            Y_dev: list[list[str]] | None = None) -> ChunkTagger:
        from .tasks.chunks import resolve_scheme

        resolve_scheme({t for s in Y for t in s}, self.label_scheme)  # fail early on bad tags
        return super().fit(X, Y, X_dev, Y_dev)

    def _metrics(self, Y: list[list[str]], pred: list[list[str]]) -> dict[str, Any]:
        from .tasks.chunks import chunk_scores

        return chunk_scores(Y, pred, self.label_scheme).as_dict()


class NamedEntityTagger(ChunkTagger):
    """A :class:`ChunkTagger` for named entities (``B-PER``, ``I-LOC`` …), scored by entity F1."""

    task_name = "ner"


class EntityRelationExtractor(StructuredEstimator):
    """Joint entity and relation labelling (CoNLL04 style) with 0-1 ILP inference.

    X is a list of :class:`~demidcd.io.conll04.ERSentence` (entity tokens given; gold labels
    inside them for fit/score). Extra hyper-parameters: ``solver`` (``exact`` branch-and-bound,
    ``cbc`` through PuLP, ``highs``), ``relation_loss_weight`` (λ of Δ), ``min_count``.
    Fitted: ``coef_``, ``featurizer_``, ``result_``.
    """

    task_name = "entity-relation"
    score_name = "mean entity/relation F1"
    _task_params = ("solver", "relation_loss_weight", "min_count")

    def __init__(self, solver: str = "exact", relation_loss_weight: float = 1.0,
                 min_count: int = 1, **kw: Any):
        super().__init__(**kw)
        self.solver, self.relation_loss_weight, self.min_count = (solver,
                                                                   relation_loss_weight,
                                                                   min_count)

    def _task(self, X, with_gold: bool):
        from .tasks.entity_relation import EntityRelationTask

        return EntityRelationTask(self.featurizer_.transform(X, with_gold=with_gold),
                                  with_gold=with_gold, solver=self.solver,
                                  relation_loss_weight=float(self.relation_loss_weight))

    def fit(self, X, Y: Any = None, X_dev=None, Y_dev: Any = None) -> EntityRelationExtractor:
        """Learn w from annotated sentences X (Y is unused: the labels are inside X)."""
        from .tasks.entity_relation import EntityRelationFeaturizer

        if not X:
            raise OptionError("cannot fit on an empty data set")
        self.featurizer_ = EntityRelationFeaturizer(int(self.min_count)).fit(X)
        task = self._task(X, True)
        dev_eval = None
        if X_dev:
            dtask = self._task(X_dev, True)
            ex = np.arange(dtask.n_examples)
            gold = dtask.gold(ex)

            def dev_eval(w: np.ndarray) -> dict:
                return dtask.metric(gold, dtask.decode(w, ex))

        self._train(task, dev_eval)
        return self

    def predict(self, X) -> list[tuple[list[str], dict[tuple[int, int], str]]]:
        """(entity labels, {(a, b): relation}) per sentence, by exact ILP inference."""
        from .tasks.entity_relation import structure_to_labels

        if not X:
            return []
        task = self._task(X, False)
        return [structure_to_labels(y, s.n_entities)
                for y, s in zip(task.decode(self.coef_, np.arange(len(X))), X, strict=True)]

    def metrics(self, X, Y: Any = None) -> dict[str, float]:
        """Micro P/R/F1 for entities and relations ("no relation" excluded); ``score`` is
        their mean (Y is unused: the labels are inside X)."""
        task = self._task(X, True)
        ex = np.arange(task.n_examples)
        return task.metric(task.gold(ex), task.decode(self.coef_, ex))

    def feature_summary(self) -> str:
        f = self.featurizer_
        dim = self.coef_.shape[0]
        return (f"{f.n_entity_features:,} entity x 4 labels + {f.n_pair_features:,} pair x 6 "
                f"labels = {dim:,} weights ({dim * 8 / 2**20:.1f} MiB float64)")

    def training_task(self, X, Y: Any = None):
        return self._task(X, True)

    def save(self, path: str | os.PathLike[str]) -> None:
        import json

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
        obj.coef_, obj.result_, obj.meta_ = w, None, meta
        return obj


def load_estimator(path: str | os.PathLike[str]) -> StructuredEstimator:
    """Load a model file of any registered task (:mod:`demidcd.tasks`)."""
    from .tasks import TASKS, get_task

    _, _, meta = load_model(path)
    name = meta.get("task")
    if not isinstance(name, str) or name not in TASKS:
        raise ModelFileError(str(path), f"unknown task {name!r}")
    return get_task(name).estimator_class().load(path)
