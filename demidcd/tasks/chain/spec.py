"""Chunking and named entities: the sequence task (:mod:`demidcd.tasks.sequence`) with labels
read as chunks (BIO / IOB1 / IOB2 / BIOES) and scored by chunk precision, recall and F1 exactly as
``conlleval`` scores them (:mod:`demidcd.tasks.chunks`). Training is unchanged (Hamming Δ over
the chunk tags); only the metric, the report and the estimator's ``score`` differ.
"""

from __future__ import annotations

from typing import Any

from ..options import DataOptions
from .chunks import format_report
from .sequence import SequenceSpec


class ChunkingSpec(SequenceSpec):
    """``--task chunking``: CoNLL-2000 style chunk tags; ``evaluate`` prints chunk F1."""

    name = "chunking"
    help = "chunking (BIO/IOB1/IOB2/BIOES), scored by chunk F1 as conlleval"
    estimator = "demidcd.estimators.sequence:ChunkTagger"
    unit = "chunk"  # what the report calls a chunk (chunk F1, entity F1)

    def estimator_params(self, options: DataOptions) -> dict[str, Any]:
        return {"label_scheme": options.label_scheme or "auto",
                "constraints": options.constraints}

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        """The sequence task's, and ``--label-scheme`` / ``--constraints`` set on ``est``."""
        options = super().configure(est, options)
        if options.label_scheme:
            est.label_scheme = options.label_scheme
        if options.constraints is not None:
            est.constraints = options.constraints
        return options

    def report(self, est, data, prefix: str = "") -> list[str]:
        X, Y = self.xy(data)
        return format_report(est.metrics(X, Y), prefix, self.unit)


class NERSpec(ChunkingSpec):
    """``--task ner``: named-entity tags (CoNLL-2002/2003 style); ``evaluate`` prints entity F1."""

    name = "ner"
    help = "named entities (BIO/IOB1/IOB2/BIOES), scored by entity F1 as conlleval"
    estimator = "demidcd.estimators.sequence:NamedEntityTagger"
    unit = "entity"


CHUNKING = ChunkingSpec()
NER = NERSpec()
