"""The small synthetic tagging problem the multi-process tests train on (the ``small`` fixture
of conftest.py), and :func:`fit`, which trains on it and measures the primal."""

from __future__ import annotations

from typing import Any

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
