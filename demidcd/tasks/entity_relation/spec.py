"""The command line's adapter of the entity-relation task (CoNLL04 files): reading, the
estimator's options, the report and the written predictions. Registered as
``demidcd.tasks.entity_relation.spec:SPEC``."""

from __future__ import annotations

from typing import Any

from demidcd.options import DataOptions
from demidcd.tasks import TaskSpec


class EntityRelationSpec(TaskSpec):
    """CoNLL04 files (Roth & Yih 2004): entity and relation F1."""

    name = "entity-relation"
    help = "joint entity and relation extraction (CoNLL04), 0-1 ILP inference"
    estimator = "demidcd.estimators.entity_relation:EntityRelationExtractor"
    max_sentence_length = 300  # the ILP grows with the entity pairs (CoNLL04's longest: 169)
    length_cost = "the relation ILP grows with the entity pairs: about 5 s of CPU for 200 " \
                  "entities"

    def read(self, path: str, options: DataOptions, labelled: bool = True) -> Any:
        from demidcd.io.conll04 import read_conll04

        return read_conll04(path, encoding=options.encoding,
                            max_sentence_length=options.max_sentence_length)

    def xy(self, data):
        return data, None

    def describe(self, data) -> str:
        return (f"{len(data):,} sentences, {sum(s.n_entities for s in data):,} entities, "
                f"{sum(len(s.relations) for s in data):,} relations")

    def make_estimator(self, options: DataOptions, common: dict[str, Any]) -> Any:
        return self.estimator_class()(solver=options.ilp_solver or "exact",
                                      ilp_time_limit=options.ilp_time_limit,
                                      relation_loss_weight=options.relation_loss_weight,
                                      min_count=options.min_count or 1, **common)

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        # evaluation and prediction solve with the exact branch and bound unless --ilp-solver
        # says otherwise, whatever the model was trained with: it reaches the same optima far
        # faster than CBC (benchmarks/README.md, "Evidence behind the defaults and design
        # choices")
        est.solver = options.ilp_solver or "exact"
        est.ilp_time_limit = options.ilp_time_limit  # None: default, 0: none
        return options

    def report(self, est, data, prefix: str = "") -> list[str]:
        m = est.metrics(data)
        return [f"{prefix}{kind} F1: {100 * m[kind + '_f1']:.2f} (P {100 * m[kind + '_p']:.2f}, "
                f"R {100 * m[kind + '_r']:.2f})" for kind in ("entity", "relation")]

    def write(self, path: str, data: Any, predicted: Any, options: DataOptions) -> None:
        from demidcd.io.conll04 import write_conll04

        write_conll04(path, data, [p[0] for p in predicted], [p[1] for p in predicted],
                      encoding=options.encoding)


SPEC = EntityRelationSpec()
