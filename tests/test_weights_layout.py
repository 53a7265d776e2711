"""``weights="auto"``: the emission layout chosen by a model of the run's peak memory
(issue 56, defect 9), not by a fixed size of w.

The old rule took the seen pairs only once F·K passed 2^25 weights (256 MiB of float64): a
million synthetic tokens with 83 tags and 400k features (33.2 M weights, just under it) kept
every pair and peaked at 1,009 MiB at p = 2, where python-crfsuite's L-BFGS needs 725 MiB;
with 45 tags (18.5 M weights) 1,461 MiB. The memory model counts the copies of w a run holds
(the learner's, w̄'s two float32 buffers, the workers', the result's) against the rest of the
run (the processes' runtime, the encoded sentences and what training builds from them), and
keeps every pair only where that adds little. Figures: ``benchmarks/memory_labels.py``.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from demidcd.estimators import layout
from demidcd.estimators.layout import choose_layout, encoded_bytes, modelled_peak, weights_dim

# the counts of the benchmark's corpora (generator_model(n_tags=K, vocab_size=200_000,
# mean_length=18, max_length=80), 55,000 sentences, the built-in template): 987,624 tokens
# of 15.3 features each, 69.5 bytes a token encoded
TOKENS = 987_624
DATA = int(TOKENS * 69.5)


def old_rule(F: int, K: int) -> str:
    return "seen" if F * K > 2**25 else "all"


@pytest.mark.parametrize("F,K,S", [(400_000, 83, 1_500_000),   # the 83 tags
                                   (410_000, 45, 1_100_000)])  # the 45 of the 1 M series
def test_a_million_tokens_with_tens_of_labels_take_the_seen_pairs(F, K, S):
    """Just under the old rule's 2^25 weights, every pair would add about 2-3x the memory of
    the rest of the run: auto takes the seen pairs (the old rule kept every pair)."""
    assert old_rule(F, K) == "all"
    choice = choose_layout(F, K, 0, S, DATA)
    assert choice.layout == "seen", choice.reason()
    assert choice.peak_all > 2 * choice.peak_seen
    assert "seen pairs" in choice.reason() and "modelled peak" in choice.reason()


@pytest.mark.parametrize("F,K,S,tokens,per_token", [
    (248_225, 12, 473_038, TOKENS, 69.5),  # the benchmark's 12 tags (measured counts)
    (116_947, 49, 277_977, 204_585, 90.0),  # EWT XPOS: seen pairs cost 0.26 points there
    (140_000, 22, 287_000, 211_727, 90.0),  # CoNLL-2000 chunks
])
def test_cheap_dense_weights_are_kept(F, K, S, tokens, per_token):
    """Where every pair adds little (few labels, or a small corpus) auto keeps them all, as
    the seen pairs cost accuracy there."""
    choice = choose_layout(F, K, 0, S, int(tokens * per_token))
    assert choice.layout == "all", choice.reason()


def test_the_choice_does_not_depend_on_the_thread_count():
    """The layout is the problem solved: p = 1 and p = 16 runs of the same data solve the
    same one (the model is evaluated at its reference process count)."""
    import inspect

    from demidcd.estimators import sequence

    assert "threads" not in inspect.getsource(sequence.SequenceTagger._fit_pairs)
    assert layout.REFERENCE_PROCESSES == 2


def test_the_model_counts_copies_processes_and_data():
    """Every term moves the modelled peak the way the module docstring says."""
    F, K, S = 1000, 10, 1500
    assert weights_dim(F, K, 0, None) == F * K + (K + 1) ** 2
    assert weights_dim(F, K, 2, S) == S + (K + 1) ** 2 + 2 * K * K  # 1500 = 150 rows of 10
    base = modelled_peak(F, K, 0, None, 10**6, 2)
    assert modelled_peak(F, K, 0, None, 10**6, 3) - base == pytest.approx(
        layout.RUNTIME_BYTES + layout.BYTES_PER_WEIGHT_WORKER * weights_dim(F, K, 0, None))
    assert modelled_peak(F, K, 0, None, 2 * 10**6, 2) - base == pytest.approx(
        layout.DATA_FACTOR * 10**6)
    assert modelled_peak(F, K, 0, S, 10**6, 2) < base


def _corpus(n: int, seed: int):
    from demidcd.synthetic import generator_model, sample

    m = generator_model(n_tags=20, vocab_size=4000, mean_length=12, max_length=30, seed=5)
    c = sample(m, n, seed=seed)
    return c.tokens, c.tags


def test_auto_says_why_and_fits_the_model_of_its_choice(monkeypatch):
    """On a small corpus, with the budget set so that the seen pairs win: auto logs the
    modelled peaks, fits exactly the model of weights="seen" (same w, same predictions), and
    its held-out accuracy is that of every pair within a point."""
    from demidcd.estimators.sequence import SequenceTagger

    X, Y = _corpus(400, 1)
    Xt, Yt = _corpus(200, 2)
    kw = dict(threads=1, algorithm="dcd", max_epochs=15, C=0.1, min_count=1)
    lines = io.StringIO()
    keep = SequenceTagger(log=lambda s: lines.write(s + "\n"), **kw).fit(X, Y)
    assert keep.seen_pairs_ is None and "every (feature, tag) pair" in lines.getvalue()
    monkeypatch.setattr(layout, "ALL_PAIRS_ALLOWANCE", 0)
    monkeypatch.setattr(layout, "RUNTIME_BYTES", 0)
    lines = io.StringIO()
    auto = SequenceTagger(log=lambda s: lines.write(s + "\n"), **kw).fit(X, Y)
    assert auto.seen_pairs_ is not None, lines.getvalue()
    assert "weights: seen pairs (auto: modelled peak" in lines.getvalue()
    seen = SequenceTagger(weights="seen", **kw).fit(X, Y)
    np.testing.assert_array_equal(auto.coef_, seen.coef_)
    assert auto.predict(Xt) == seen.predict(Xt)
    dense = SequenceTagger(weights="all", **kw).fit(X, Y)
    assert auto.score(Xt, Yt) >= dense.score(Xt, Yt) - 0.01, (auto.score(Xt, Yt),
                                                             dense.score(Xt, Yt))
    assert auto.coef_.shape[0] < dense.coef_.shape[0] / 3


def test_encoded_bytes_counts_every_array():
    from demidcd.tasks.chain.features import EncodedSequences

    enc = EncodedSequences(np.array([0, 2], np.int64), np.array([0, 1, 3], np.int64),
                           np.array([1, 2, 3], np.int32))
    assert encoded_bytes(enc) == 16 + 24 + 12
