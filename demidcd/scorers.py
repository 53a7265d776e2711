"""scikit-learn scorers of label sequences, under sklearn-crfsuite's names (its ``scorers``
module), built with ``sklearn.metrics.make_scorer`` from :mod:`demidcd.metrics`: for
``GridSearchCV``, ``RandomizedSearchCV``, ``cross_val_score``.

>>> from demidcd import scorers
>>> GridSearchCV(ChunkTagger(algorithm="lbfgs"), {"c1": [0.05, 0.1]}, scoring=scorers.flat_f1)

``flat_accuracy`` (token accuracy) and ``sequence_accuracy`` (whole sequences right) are
sklearn-crfsuite's two scorers; ``flat_f1`` (token F1, averaged over the labels weighted by
their support: the sklearn-crfsuite tutorial's ``make_scorer(metrics.flat_f1_score,
average='weighted', labels=labels)`` over every label), ``flat_precision``, ``flat_recall``
(likewise weighted) and ``chunk_f1`` (chunk or entity F1 as ``conlleval`` computes it, the score
of ``demidcd evaluate`` for chunking and NER) are added. For another ``labels`` or
``average``, build one: ``make_scorer(metrics.flat_f1_score, average="macro", labels=...)``.
Needs scikit-learn (``pip install 'demidcd[sklearn]'``).
"""

from __future__ import annotations

from . import metrics

try:
    from sklearn.metrics import make_scorer
except ImportError as e:  # pragma: no cover - the [sklearn] extra is missing
    raise ImportError("demidcd.scorers builds scikit-learn scorers: install scikit-learn "
                      "(pip install 'demidcd[sklearn]')") from e

__all__ = ["chunk_f1", "flat_accuracy", "flat_f1", "flat_precision", "flat_recall",
           "sequence_accuracy"]

flat_accuracy = make_scorer(metrics.flat_accuracy_score)
sequence_accuracy = make_scorer(metrics.sequence_accuracy_score)
flat_f1 = make_scorer(metrics.flat_f1_score, average="weighted", zero_division=0)
flat_precision = make_scorer(metrics.flat_precision_score, average="weighted", zero_division=0)
flat_recall = make_scorer(metrics.flat_recall_score, average="weighted", zero_division=0)
chunk_f1 = make_scorer(metrics.chunk_f1_score)
