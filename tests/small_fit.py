"""The small problems the tests train on: the synthetic tagging problem of the multi-process
tests (the ``small`` fixture of conftest.py), :func:`fit`, which trains on it and measures the
primal, and :func:`conll04_task`, a few CoNLL04 entity-relation sentences."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from demidcd.api import SequenceTagger
from demidcd.solvers.common import primal_objective
from demidcd.synthetic import generate

Corpus = tuple[list[list[str]], list[list[str]]]
C = 0.1


def small_corpus() -> Corpus:
    """150 sentences, 5 tags, 300 words (seed 3): (tokens, tags)."""
    c = generate(n_sentences=150, n_tags=5, vocab_size=300, seed=3)
    return c.tokens, c.tags


def fit(small: Corpus, **kw: Any) -> tuple[SequenceTagger, float]:
    """A SequenceTagger (C 0.1, tol and δ 1e-3, 60 s, min_count 1; ``kw`` on top) fitted on
    ``small``, and its primal objective."""
    X, Y = small
    kw = {"C": C, "tol": 1e-3, "delta": 1e-3, "max_epochs": 100000, "time_limit": 60,
          "min_count": 1, **kw}
    est = SequenceTagger(**kw).fit(X, Y)
    p, _ = primal_objective(est.training_task(X, Y), est.coef_, C)
    return est, p


DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def conll04_task(n: int, solver: str):
    """An entity-relation task on the first ``n`` CoNLL04 sentences (of the first 200) with 2–4
    entities, inferred by ``solver``; skips the test where ../shared/data/conll04 is absent."""
    from demidcd.io.conll04 import read_conll04
    from demidcd.tasks.entity_relation.features import EntityRelationFeaturizer
    from demidcd.tasks.entity_relation.task import EntityRelationTask

    path = DATA / "conll04" / "conll04.corp"
    if not path.is_file():
        pytest.skip("../shared/data/conll04 not available")
    s = [x for x in read_conll04(path)[:200] if 2 <= x.n_entities <= 4][:n]
    f = EntityRelationFeaturizer().fit(s)
    return EntityRelationTask(f.transform(s), True, solver)


def tiny_sequence_task(n: int = 60):
    """The training task of a synthetic tagging problem (``n`` sentences, 4 tags, 100 words,
    seed 1; features of :class:`~demidcd.tasks.chain.features.SequenceFeaturizer` (1, 0))."""
    from demidcd.synthetic import generate
    from demidcd.tasks.chain.features import SequenceFeaturizer

    c = generate(n_sentences=n, n_tags=4, vocab_size=100, seed=1)
    est = SequenceTagger(min_count=1)
    est.classes_ = sorted({t for s in c.tags for t in s})
    est.featurizer_ = SequenceFeaturizer(1, 0).fit(c.tokens)
    return est.training_task(c.tokens, c.tags)
