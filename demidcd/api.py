"""The library API: the estimators of every task and :func:`load_estimator`, re-exported from
:mod:`demidcd.estimators` (where they live; each imported on first use).

>>> from demidcd.api import SequenceTagger
>>> tagger = SequenceTagger(C=0.1, algorithm="dcd").fit(X, Y)   # X: token lists, Y: tag lists
>>> tagger.predict([["The", "cat", "sat"]])
"""

from typing import TYPE_CHECKING, Any

from . import estimators
from .estimators import load_estimator

if TYPE_CHECKING:
    from .estimators.base import StructuredEstimator
    from .estimators.dependency import DependencyParser
    from .estimators.entity_relation import EntityRelationExtractor
    from .estimators.sequence import ChunkTagger, NamedEntityTagger, SequenceTagger

__all__ = ["ChunkTagger", "DependencyParser", "EntityRelationExtractor", "NamedEntityTagger",
           "SequenceTagger", "StructuredEstimator", "load_estimator"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(estimators, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
