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


def _shaped_like_the_benchmark(F: int = 400_000, K: int = 83, tokens: int = TOKENS,
                               per_token: int = 15, seed: int = 0):
    """Encoded sentences shaped like the benchmark's at K tags, built from arrays (no
    dictionary, no training): a Zipfian word per token firing its own feature and
    ``per_token − 1`` features shared by words (affix-like, from disjoint ranges), its tag
    a function of the word 90% of the time; F features in all, F·K just under 2^25."""
    from demidcd.tasks.chain.features import EncodedSequences

    rng = np.random.default_rng(seed)
    n_words, n_shared = F - (per_token - 1) * 1000, 1000
    word = np.minimum(rng.zipf(1.3, tokens) - 1, n_words - 1).astype(np.int64)
    cols = [word]
    for j in range(per_token - 1):
        cols.append(n_words + j * n_shared + (word * (2 * j + 3)) % n_shared)
    idx = np.stack(cols, axis=1).astype(np.int32).reshape(-1)
    tag = (word * 7919) % K
    noise = rng.random(tokens) < 0.1
    tag[noise] = rng.integers(0, K, int(noise.sum()))
    lengths = np.full(tokens // 18, 18)
    lengths[-1] += tokens - lengths.sum()
    enc = EncodedSequences(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                           np.arange(0, per_token * tokens + 1, per_token, dtype=np.int64), idx)
    return enc, tag.astype(np.int32)


def test_the_estimator_takes_the_seen_pairs_at_83_labels_under_the_old_threshold():
    """``weights="auto"`` through the estimator on a corpus shaped like the benchmark's with
    83 tags and 400k features (F·K = 33.2 M, under the old 2^25): the seen pairs (the old rule
    kept every pair, the issue's 1,009 MiB run)."""
    from types import SimpleNamespace

    from demidcd.estimators.sequence import SequenceTagger

    F, K = 400_000, 83
    enc, y = _shaped_like_the_benchmark(F, K)
    assert old_rule(F, K) == "all"
    lines: list[str] = []
    est = SequenceTagger(threads=2, log=lines.append)
    est.__dict__["_featurizer"] = SimpleNamespace(n_features=F)
    est.__dict__["_classes"] = [f"T{k}" for k in range(K)]
    est._fit_pairs(enc, y)
    assert est.seen_pairs_ is not None, lines
    n_seen = est.seen_pairs_[1].shape[0]
    assert n_seen < F * K / 10
    assert any(ln.startswith("weights: seen pairs") for ln in lines), lines


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
    """The layout is the problem solved: p = 1, 2 and 8 runs of the same data solve the same
    one (the model is evaluated at its reference process count, whatever ``threads``)."""
    from demidcd.estimators.sequence import SequenceTagger

    X, Y = _corpus(150, 3)
    said = []
    for threads in (1, 2, 8):
        lines: list[str] = []
        SequenceTagger(threads=threads, min_count=1, log=lines.append).prepare_fit(X, Y)
        said.append([ln for ln in lines if ln.startswith("weights:")])
    assert said[0] and said[0] == said[1] == said[2], said
    assert f"at {layout.REFERENCE_PROCESSES} processes" in said[0][0]


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
