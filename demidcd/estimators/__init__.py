"""Estimators: scikit-learn style front ends (``fit``, ``predict``, ``score``, ``save``/``load``)
for every task, one module per task above the learners (:mod:`demidcd.solvers`).

The classes are imported on first use (PEP 562 ``__getattr__``): loading a tagger for
``predict`` does not import the parser's and the relation extractor's modules."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import ModelFileError

if TYPE_CHECKING:
    from .base import StructuredEstimator
    from .dependency import DependencyParser
    from .entity_relation import EntityRelationExtractor
    from .sequence import ChunkTagger, NamedEntityTagger, SequenceTagger

__all__ = ["ChunkTagger", "DependencyParser", "EntityRelationExtractor", "NamedEntityTagger",
           "SequenceTagger", "StructuredEstimator", "load_estimator"]

_WHERE = {"StructuredEstimator": "base", "DependencyParser": "dependency",
          "EntityRelationExtractor": "entity_relation", "ChunkTagger": "sequence",
          "NamedEntityTagger": "sequence", "SequenceTagger": "sequence"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_estimator(path: str | os.PathLike[str]) -> Any:
    """Load a model file of any registered task (:mod:`demidcd.tasks`): a
    :class:`~demidcd.estimators.base.StructuredEstimator`."""
    from ..io.model import load_model
    from ..tasks import TASKS, get_task

    loaded = load_model(path)
    name = loaded[2].get("task")
    if not isinstance(name, str) or name not in TASKS:
        raise ModelFileError(str(path), f"unknown task {name!r}")
    cls = get_task(name).estimator_class()
    return cls.load(path, _loaded=loaded)
