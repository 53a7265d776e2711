"""The library API: the estimators of every task and :func:`load_estimator`, re-exported from
:mod:`demidcd.estimators` (where they live).

>>> from demidcd.api import SequenceTagger
>>> tagger = SequenceTagger(C=0.1, algorithm="dcd").fit(X, Y)   # X: token lists, Y: tag lists
>>> tagger.predict([["The", "cat", "sat"]])
"""

from .estimators import (
    ChunkTagger,
    DependencyParser,
    EntityRelationExtractor,
    NamedEntityTagger,
    SequenceTagger,
    StructuredEstimator,
    load_estimator,
)

__all__ = ["ChunkTagger", "DependencyParser", "EntityRelationExtractor", "NamedEntityTagger",
           "SequenceTagger", "StructuredEstimator", "load_estimator"]
