"""Estimators: scikit-learn style front ends (``fit``, ``predict``, ``score``, ``save``/``load``)
for every task, one module per task above the learners (:mod:`demidcd.solvers`)."""

from __future__ import annotations

import os

from ..errors import ModelFileError
from ..io.model import load_model
from .base import StructuredEstimator
from .dependency import DependencyParser
from .entity_relation import EntityRelationExtractor
from .sequence import ChunkTagger, NamedEntityTagger, SequenceTagger

__all__ = ["ChunkTagger", "DependencyParser", "EntityRelationExtractor", "NamedEntityTagger",
           "SequenceTagger", "StructuredEstimator", "load_estimator"]


def load_estimator(path: str | os.PathLike[str]) -> StructuredEstimator:
    """Load a model file of any registered task (:mod:`demidcd.tasks`)."""
    from ..tasks import TASKS, get_task

    _, _, meta = load_model(path)
    name = meta.get("task")
    if not isinstance(name, str) or name not in TASKS:
        raise ModelFileError(str(path), f"unknown task {name!r}")
    return get_task(name).estimator_class().load(path)
