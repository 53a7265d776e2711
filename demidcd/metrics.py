"""Scores of label sequences (lists of label lists), under sklearn-crfsuite's names and
signatures: the token-level scores of scikit-learn's ``sklearn.metrics`` over the flattened
sequences (``flat_accuracy_score``, ``flat_precision_score``, ``flat_recall_score``,
``flat_f1_score``, ``flat_fbeta_score``, ``flat_classification_report``), the share of whole
sequences right (``sequence_accuracy_score``), and the chunk (or entity) F1 that ``demidcd
evaluate`` reports for chunking and NER, as ``conlleval`` computes it (``chunk_f1_score``,
``chunk_metrics``), and the expected calibration error of per-token marginals
(``expected_calibration_error``, on the output of ``predict_marginals``).

>>> from demidcd import metrics
>>> y_pred = tagger.predict(X_test)
>>> metrics.flat_f1_score(y_test, y_pred, average="weighted", labels=["B-PER", "I-PER"])
>>> print(metrics.flat_classification_report(y_test, y_pred, digits=3))
>>> metrics.chunk_f1_score(y_test, y_pred)   # entity F1 of B-PER I-PER ... chunks

The token scores are computed here with numpy (the core install has no scikit-learn) and give
scikit-learn's values: ``labels``, ``pos_label``, ``average`` (``"binary"``, ``"micro"``,
``"macro"``, ``"weighted"``, None), ``sample_weight`` (one weight per token) and
``zero_division`` (``"warn"`` gives 0 as there, without its warning; 0, 1 or ``nan``) as in
``sklearn.metrics.precision_recall_fscore_support``; the report is the text (or, with
``output_dict``, the dict) of ``sklearn.metrics.classification_report``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["chunk_f1_score", "chunk_metrics", "expected_calibration_error", "flat_accuracy_score",
           "flat_classification_report", "flat_f1_score", "flat_fbeta_score",
           "flat_precision_score", "flat_recall_score", "sequence_accuracy_score"]

Sequences = Sequence[Sequence[Hashable]]
_AVERAGES = ("binary", "micro", "macro", "weighted", None)


def _flat(y_true: Sequences, y_pred: Sequences) -> tuple[list, list]:
    """The two label lists flattened, the sequences checked pairwise for equal lengths."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} sequences but y_pred has {len(y_pred)}")
    for k, (t, p) in enumerate(zip(y_true, y_pred, strict=True)):
        if len(t) != len(p):
            raise ValueError(f"sequence {k}: {len(t)} true labels but {len(p)} predicted")
    return [x for s in y_true for x in s], [x for s in y_pred for x in s]


def _weights(sample_weight: Any, n: int) -> np.ndarray | None:
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, np.float64).ravel()
    if w.shape[0] != n:
        raise ValueError(f"sample_weight has {w.shape[0]} weights for {n} tokens")
    return w


def _counts(true: list, pred: list, labels: Sequence[Hashable] | None,
            sample_weight: np.ndarray | None) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """(the labels scored, true positives, predicted and true counts per label): ``labels``,
    or every label of either list, sorted."""
    present = sorted(set(true) | set(pred))
    scored = present if labels is None else list(labels)
    index = {lab: k for k, lab in enumerate(scored)}
    n = len(scored)
    t = np.fromiter((index.get(x, n) for x in true), np.int64, count=len(true))
    p = np.fromiter((index.get(x, n) for x in pred), np.int64, count=len(pred))
    w = sample_weight
    hit = t == p
    tp = np.bincount(t[hit], None if w is None else w[hit], minlength=n + 1)[:n]
    pred_sum = np.bincount(p, w, minlength=n + 1)[:n]
    true_sum = np.bincount(t, w, minlength=n + 1)[:n]
    return scored, tp.astype(np.float64), pred_sum.astype(np.float64), \
        true_sum.astype(np.float64)


def _divide(num: np.ndarray, den: np.ndarray, zero_division: Any) -> np.ndarray:
    """num / den, ``zero_division`` where den is 0 (``"warn"``: 0)."""
    if isinstance(zero_division, str):
        if zero_division != "warn":
            raise ValueError(f"zero_division must be 'warn', 0, 1 or nan, got {zero_division!r}")
        fill = 0.0
    elif zero_division in (0, 1):
        fill = float(zero_division)
    elif isinstance(zero_division, float) and np.isnan(zero_division):
        fill = np.nan
    else:
        raise ValueError(f"zero_division must be 'warn', 0, 1 or nan, got {zero_division!r}")
    zero = den == 0
    out = num / np.where(zero, 1.0, den)
    out[zero] = fill
    return out


def _nan_average(a: np.ndarray, weights: np.ndarray | None) -> float:
    """The (weighted) mean of ``a`` leaving out NaNs (all weights 0: the plain mean)."""
    keep = ~np.isnan(a)
    if a.shape[0] == 0 or not keep.any():
        return float("nan")
    if weights is None or weights[keep].sum() == 0:
        return float(a[keep].mean())
    return float(np.average(a[keep], weights=weights[keep]))


def _binary_labels(true: list, pred: list, pos_label: Hashable) -> list:
    present = sorted(set(true) | set(pred))
    if len(present) > 2:
        raise ValueError("Target is multiclass but average='binary'. Please choose another "
                         "average setting, one of [None, 'micro', 'macro', 'weighted'].")
    if pos_label not in present and len(present) >= 2:
        raise ValueError(f"pos_label={pos_label!r} is not a valid label. It should be one of "
                         f"{present}")
    return [pos_label]


def _prfs(true: list, pred: list, beta: float, labels: Sequence[Hashable] | None,
          pos_label: Hashable, average: str | None, sample_weight: Any,
          zero_division: Any) -> tuple[Any, Any, Any, Any]:
    """scikit-learn's ``precision_recall_fscore_support`` of two flat label lists."""
    if average not in _AVERAGES:
        raise ValueError(f"average has to be one of {_AVERAGES}, got {average!r}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if len(true) != len(pred):
        raise ValueError(f"{len(true)} true labels but {len(pred)} predicted")
    w = _weights(sample_weight, len(true))
    if average == "binary":
        labels = _binary_labels(true, pred, pos_label)
    _, tp, pred_sum, true_sum = _counts(true, pred, labels, w)
    if average == "micro":
        tp, pred_sum, true_sum = (np.array([x.sum()]) for x in (tp, pred_sum, true_sum))
    precision = _divide(tp, pred_sum, zero_division)
    recall = _divide(tp, true_sum, zero_division)
    b2 = beta * beta
    if np.isposinf(beta):
        f = recall
    elif beta == 0:
        f = precision
    else:
        f = _divide((1 + b2) * tp, b2 * true_sum + pred_sum, zero_division)
    if average is None:
        return precision, recall, f, true_sum
    weights = true_sum if average == "weighted" else None
    return (_nan_average(precision, weights), _nan_average(recall, weights),
            _nan_average(f, weights), None)


def flat_accuracy_score(y_true: Sequences, y_pred: Sequences) -> float:
    """The share of tokens whose predicted label is the true one."""
    true, pred = _flat(y_true, y_pred)
    if not true:
        return 0.0
    return sum(a == b for a, b in zip(true, pred, strict=True)) / len(true)


def flat_precision_score(y_true: Sequences, y_pred: Sequences, *,
                         labels: Sequence[Hashable] | None = None, pos_label: Hashable = 1,
                         average: str | None = "binary", sample_weight: Any = None,
                         zero_division: Any = "warn") -> Any:
    """Token precision (``sklearn.metrics.precision_score`` of the flattened sequences)."""
    return _prfs(*_flat(y_true, y_pred), 1.0, labels, pos_label, average, sample_weight,
                 zero_division)[0]


def flat_recall_score(y_true: Sequences, y_pred: Sequences, *,
                      labels: Sequence[Hashable] | None = None, pos_label: Hashable = 1,
                      average: str | None = "binary", sample_weight: Any = None,
                      zero_division: Any = "warn") -> Any:
    """Token recall (``sklearn.metrics.recall_score`` of the flattened sequences)."""
    return _prfs(*_flat(y_true, y_pred), 1.0, labels, pos_label, average, sample_weight,
                 zero_division)[1]


def flat_fbeta_score(y_true: Sequences, y_pred: Sequences, *, beta: float,
                     labels: Sequence[Hashable] | None = None, pos_label: Hashable = 1,
                     average: str | None = "binary", sample_weight: Any = None,
                     zero_division: Any = "warn") -> Any:
    """Token F-beta (``sklearn.metrics.fbeta_score`` of the flattened sequences)."""
    return _prfs(*_flat(y_true, y_pred), beta, labels, pos_label, average, sample_weight,
                 zero_division)[2]


def flat_f1_score(y_true: Sequences, y_pred: Sequences, *,
                  labels: Sequence[Hashable] | None = None, pos_label: Hashable = 1,
                  average: str | None = "binary", sample_weight: Any = None,
                  zero_division: Any = "warn") -> Any:
    """Token F1 (``sklearn.metrics.f1_score`` of the flattened sequences): with ``average=None``
    an array, one F1 per label of ``labels`` (default: every label, sorted)."""
    return _prfs(*_flat(y_true, y_pred), 1.0, labels, pos_label, average, sample_weight,
                 zero_division)[2]


def flat_classification_report(y_true: Sequences, y_pred: Sequences,
                               labels: Sequence[Hashable] | None = None,
                               target_names: Sequence[str] | None = None,
                               sample_weight: Any = None, digits: int = 2,
                               output_dict: bool = False,
                               zero_division: Any = "warn") -> str | dict:
    """Precision, recall, F1 and support per label and their micro (or accuracy), macro and
    weighted averages: the text (``output_dict``: the dict) of
    ``sklearn.metrics.classification_report`` of the flattened sequences."""
    true, pred = _flat(y_true, y_pred)
    w = _weights(sample_weight, len(true))
    present = sorted(set(true) | set(pred))
    labels_given = labels is not None
    scored = list(labels) if labels_given else present
    if target_names is not None and len(target_names) != len(scored):
        if not labels_given:
            raise ValueError(f"Number of classes, {len(scored)}, does not match size of "
                             f"target_names, {len(target_names)}. Try specifying the labels "
                             "parameter")
    names = [str(x) for x in scored] if target_names is None else list(target_names)
    headers = ["precision", "recall", "f1-score", "support"]
    p, r, f, s = _prfs(true, pred, 1.0, scored, 1, None, w, zero_division)
    support = s if w is not None else s.astype(np.int64)
    rows = list(zip(names, p, r, f, support, strict=False))
    micro_is_accuracy = not labels_given or set(scored) >= set(present)
    averages = []
    for average in ("micro", "macro", "weighted"):
        heading = "accuracy" if average == "micro" and micro_is_accuracy else f"{average} avg"
        ap, ar, af, _ = _prfs(true, pred, 1.0, scored, 1, average, w, zero_division)
        averages.append((heading, ap, ar, af, support.sum()))
    if output_dict:
        out: dict[str, Any] = {name: dict(zip(headers, map(float, row), strict=True))
                               for name, *row in rows}
        for heading, *row in averages:
            out[heading] = dict(zip(headers, map(float, row), strict=True))
        if "accuracy" in out:
            out["accuracy"] = out["accuracy"]["precision"]
        return out
    width = max(max((len(n) for n in names), default=0), len("weighted avg"), digits)
    report = ("{:>{width}s} " + " {:>9}" * 4).format("", *headers, width=width) + "\n\n"
    row_fmt = "{:>{width}s} " + " {:>9.{digits}f}" * 3 + " {:>9}\n"
    for row in rows:
        report += row_fmt.format(*row, width=width, digits=digits)
    report += "\n"
    for heading, ap, ar, af, total in averages:
        if heading == "accuracy":
            report += ("{:>{width}s} " + " {:>9.{digits}}" * 2 + " {:>9.{digits}f}"
                       + " {:>9}\n").format(heading, "", "", af, total, width=width,
                                            digits=digits)
        else:
            report += row_fmt.format(heading, ap, ar, af, total, width=width, digits=digits)
    return report


def sequence_accuracy_score(y_true: Sequences, y_pred: Sequences) -> float:
    """The share of sequences predicted entirely right (0 for none)."""
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} sequences but y_pred has {len(y_pred)}")
    if not len(y_true):
        return 0.0
    return sum(list(t) == list(p) for t, p in zip(y_true, y_pred, strict=True)) / len(y_true)


def chunk_metrics(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]],
                  label_scheme: str = "auto") -> dict[str, Any]:
    """Chunk (entity) precision, recall and F1, overall and per type, and token accuracy, as
    ``conlleval`` computes them (:func:`demidcd.tasks.chain.chunks.chunk_scores`; ``label_scheme``:
    how labels mark chunks, as ``--label-scheme``): what ``ChunkTagger.metrics`` gives."""
    from .tasks.chain.chunks import chunk_scores

    return chunk_scores([list(s) for s in y_true], [list(s) for s in y_pred],
                        label_scheme).as_dict()


def chunk_f1_score(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]],
                   label_scheme: str = "auto") -> float:
    """Chunk F1 (entity F1 for named entities) as ``conlleval`` computes it: the score of
    ``demidcd evaluate`` for chunking and NER (:func:`chunk_metrics`)."""
    return float(chunk_metrics(y_true, y_pred, label_scheme)["f1"])


def expected_calibration_error(y_true: Sequences,
                               marginals: Sequence[Sequence[dict[Hashable, float]]],
                               n_bins: int = 15) -> float:
    """The expected calibration error of the per-token marginals (Guo et al., ICML 2017, eq. 3)
    in sklearn-crfsuite's ``predict_marginals`` shape (per token a dict label -> probability):
    each token's confidence c_t = max_y p_t(y) and its prediction argmax_y p_t(y); tokens in
    ``n_bins`` equal-width bins of c over (0, 1], and

        ECE = Σ_b |B_b| / n · |acc(B_b) − conf(B_b)|

    with acc the share of tokens in the bin whose prediction is the gold label and conf their
    mean confidence. 0 is perfectly calibrated; 0 for no tokens."""
    if len(y_true) != len(marginals):
        raise ValueError(f"y_true has {len(y_true)} sequences but marginals has "
                         f"{len(marginals)}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf, right = [], []
    for gold, ms in zip(y_true, marginals, strict=True):
        if len(gold) != len(ms):
            raise ValueError(f"a sequence has {len(gold)} labels but {len(ms)} marginals")
        for g, m in zip(gold, ms, strict=True):
            label = max(m, key=m.__getitem__)
            conf.append(m[label])
            right.append(label == g)
    if not conf:
        return 0.0
    c, r = np.asarray(conf, float), np.asarray(right, float)
    bins = np.clip(np.ceil(c * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    gap = np.abs(np.bincount(bins, r, n_bins) - np.bincount(bins, c, n_bins))
    return float(gap.sum() / c.size)
