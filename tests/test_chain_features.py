"""The chain with real-valued observation features (and, below, label-bigram B features):
Viterbi and loss-augmented Viterbi against enumeration of all K^n taggings, φ against Φ(gold) −
Φ(y) built naively from the definition, margins, value scaling, and the binary fast path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.tasks.features import EncodedSequences
from demidcd.tasks.sequence import SequenceTask


def random_chain(rng: np.random.Generator, n_sent: int, K: int, F: int, valued: bool,
                 max_len: int = 5):
    """Random sentences (lengths 0..max_len); each token fires a private feature (so no two
    taggings tie) and up to 3 of F shared ones, with N(0, 1) values when ``valued``.

    Returns (X, Y, n_obs, tokens) with tokens[t] = (feature ids, values) of token t."""
    lengths = rng.integers(0, max_len + 1, n_sent)
    sent_ptr = np.zeros(n_sent + 1, np.int64)
    sent_ptr[1:] = np.cumsum(lengths)
    n_tok = int(sent_ptr[-1])
    tokens = []
    for t in range(n_tok):
        shared = rng.choice(F, size=int(rng.integers(0, min(F, 3) + 1)), replace=False)
        f = np.sort(np.append(shared, F + t)).astype(np.int32)
        v = rng.normal(size=f.size) if valued else np.ones(f.size)
        tokens.append((f, v))
    feat_ptr = np.zeros(n_tok + 1, np.int64)
    feat_ptr[1:] = np.cumsum([f.size for f, _ in tokens])

    def cat(k, dt):
        return np.concatenate([tok[k] for tok in tokens]).astype(dt) if tokens else np.zeros(0, dt)

    X = EncodedSequences(sent_ptr, feat_ptr, cat(0, np.int32),
                         cat(1, np.float64) if valued else None)
    Y = rng.integers(0, K, n_tok).astype(np.int32)
    return X, Y, F + n_tok, tokens


def naive_phi(F: int, K: int, tokens, y) -> np.ndarray:
    """Φ(x, y) = Σ_t Σ_f v_{t,f} e(f, y_t) + Σ_{t=0}^{n} e(y_{t−1} → y_t), from the definition."""
    v = np.zeros(F * K + (K + 1) ** 2)
    for (f, val), tag in zip(tokens, y, strict=True):
        for fi, vi in zip(f, val, strict=True):
            v[fi * K + tag] += vi
    path = [K, *[int(t) for t in y], K]
    for p, c in zip(path[:-1], path[1:], strict=True):
        v[F * K + p * (K + 1) + c] += 1.0
    return v


def sentence(task: SequenceTask, tokens, Y, i):
    a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
    return tokens[a:b], Y[a:b]


def enumerate_scores(w, F, K, toks, gold, scale):
    """{y: w·Φ(x, y) + scale·Δ(gold, y)} over all K^n taggings."""
    out = {}
    for y in itertools.product(range(K), repeat=len(toks)):
        out[y] = float(w @ naive_phi(F, K, toks, y)) + scale * sum(
            int(a != b) for a, b in zip(y, gold, strict=True))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 3), F=st.integers(1, 4),
       valued=st.booleans())
def test_viterbi_and_loss_augmented_equal_enumeration(seed, K, F, valued):
    rng = np.random.default_rng(seed)
    X, Y, n_obs, tokens = random_chain(rng, 6, K, F, valued)
    task = SequenceTask(X, Y, K, n_obs)
    ex = np.arange(task.n_examples)
    w = rng.normal(size=task.dim)
    dec = task.decode(w, ex)
    for scale in (1.0, 0.0, -1.0):
        rb = task.loss_scaled(w, ex, scale)
        rec = {int(e): k for k, e in enumerate(rb.ex)}
        for i in ex:
            toks, gold = sentence(task, tokens, Y, i)
            scores = enumerate_scores(w, n_obs, K, toks, gold, scale)
            best = max(scores, key=scores.get)
            if scale == 0.0:
                assert tuple(dec[i]) == best
                assert task.score(w, i, dec[i]) == pytest.approx(scores[best], abs=1e-9)
            if best == tuple(gold):
                assert i not in rec
                continue
            k = rec[int(i)]
            assert rb.hash[k] == SequenceTask.hash_tags(np.array(best, np.int32))
            assert rb.delta[k] == sum(int(a != b) for a, b in zip(best, gold, strict=True))
            sl = slice(rb.ptr[k], rb.ptr[k + 1])
            phi = np.zeros(task.dim)
            phi[rb.idx[sl]] = rb.val[sl]
            np.testing.assert_allclose(
                phi, naive_phi(n_obs, K, toks, gold) - naive_phi(n_obs, K, toks, best),
                rtol=0, atol=1e-12)
            assert rb.margin[k] == pytest.approx(float(w @ phi), abs=1e-9)
            s_gold = float(w @ naive_phi(n_obs, K, toks, gold))
            assert s_gold - rb.margin[k] + scale * rb.delta[k] == pytest.approx(scores[best],
                                                                                 abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_phi_delta_and_score_equal_the_definition(seed):
    """φ(y) of arbitrary taggings equals Φ(gold) − Φ(y) built naively (sorted unique indices,
    no zeros), Δ is the Hamming distance, and score(y) = w·Φ(y)."""
    rng = np.random.default_rng(seed)
    K, F = 4, 6
    X, Y, n_obs, tokens = random_chain(rng, 20, K, F, True, max_len=9)
    task = SequenceTask(X, Y, K, n_obs)
    w = rng.normal(size=task.dim)
    for i in range(task.n_examples):
        toks, gold = sentence(task, tokens, Y, i)
        for _ in range(3):
            y = rng.integers(0, K, len(gold)).astype(np.int32)
            idx, val, delta = task.phi_delta(i, y)
            assert np.all(np.diff(idx) > 0) and np.all(val != 0)
            assert delta == float(np.sum(y != gold))
            phi = np.zeros(task.dim)
            phi[idx] = val
            np.testing.assert_allclose(
                phi, naive_phi(n_obs, K, toks, gold) - naive_phi(n_obs, K, toks, y),
                rtol=0, atol=1e-12)
            assert task.score(w, i, y) == pytest.approx(w @ naive_phi(n_obs, K, toks, y),
                                                        abs=1e-9)
        assert task.phi_delta(i, gold)[0].size == 0


def test_values_scale_phi():
    """Doubling every value doubles the emission entries of φ and leaves the transitions;
    doubling one value changes φ by exactly that feature's ±v."""
    rng = np.random.default_rng(1)
    K, F = 3, 5
    X, Y, n_obs, tokens = random_chain(rng, 8, K, F, True, max_len=7)
    task = SequenceTask(X, Y, K, n_obs)
    X2 = EncodedSequences(X.sent_ptr, X.feat_ptr, X.feat_idx, 2.0 * X.feat_val)
    task2 = SequenceTask(X2, Y, K, n_obs)
    emit = n_obs * K
    checked = 0
    for i in range(task.n_examples):
        toks, gold = sentence(task, tokens, Y, i)
        if not toks:
            continue
        y = (gold + 1) % K if K > 1 else gold
        d1 = np.zeros(task.dim)
        d2 = np.zeros(task.dim)
        idx, val, _ = task.phi_delta(i, y)
        d1[idx] = val
        idx, val, _ = task2.phi_delta(i, y)
        d2[idx] = val
        np.testing.assert_array_equal(d2[:emit], 2.0 * d1[:emit])
        np.testing.assert_array_equal(d2[emit:], d1[emit:])
        checked += int(np.count_nonzero(d1[:emit]))
        # one value doubled: the private feature of the sentence's first token
        a = int(task.sent_ptr[i])
        q = int(X.feat_ptr[a + 1]) - 1  # the private feature sorts last
        assert X.feat_idx[q] == F + a
        v3 = X.feat_val.copy()
        v3[q] *= 2.0
        task3 = SequenceTask(EncodedSequences(X.sent_ptr, X.feat_ptr, X.feat_idx, v3), Y, K,
                             n_obs)
        d3 = np.zeros(task.dim)
        idx, val, _ = task3.phi_delta(i, y)
        d3[idx] = val
        expect = d1.copy()
        expect[(F + a) * K + gold[0]] += X.feat_val[q]
        expect[(F + a) * K + y[0]] -= X.feat_val[q]
        np.testing.assert_allclose(d3, expect, rtol=0, atol=1e-12)
    assert checked > 0


def _same_batch(a, b):
    for name in ("ex", "hash", "delta", "margin", "ptr", "idx", "val"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unit_values_give_the_binary_records_bit_for_bit(dtype):
    """Values all 1 (the valued kernels) and values None (the binary fast path) give identical
    records, decodes and φ, bit for bit, for float64 and the workers' float32 w̄."""
    rng = np.random.default_rng(4)
    K, F = 5, 30
    X, Y, n_obs, _ = random_chain(rng, 80, K, F, False, max_len=14)
    binary = SequenceTask(X, Y, K, n_obs)
    ones = SequenceTask(EncodedSequences(X.sent_ptr, X.feat_ptr, X.feat_idx,
                                         np.ones(X.feat_idx.size)), Y, K, n_obs)
    assert binary.dim == ones.dim
    ex = np.arange(binary.n_examples)
    w = rng.normal(size=binary.dim).astype(dtype)
    for scale in (1.0, 0.0):
        a = binary.loss_scaled(w, ex, scale)
        assert len(a) > 10
        _same_batch(a, ones.loss_scaled(w, ex, scale))
    for x, y in zip(binary.decode(w, ex), ones.decode(w, ex), strict=True):
        np.testing.assert_array_equal(x, y)
    y = rng.integers(0, K, int(binary.sent_ptr[2] - binary.sent_ptr[1])).astype(np.int32)
    for x, z in zip(binary.phi_delta(1, y), ones.phi_delta(1, y), strict=True):
        np.testing.assert_array_equal(x, z)


def test_float32_inference_with_values_finds_the_float64_structures():
    rng = np.random.default_rng(5)
    K, F = 6, 40
    X, Y, n_obs, _ = random_chain(rng, 60, K, F, True, max_len=14)
    task = SequenceTask(X, Y, K, n_obs)
    ex = np.arange(task.n_examples)
    w = rng.normal(size=task.dim)
    r64 = task.loss_augmented(w, ex)
    r32 = task.loss_augmented(w.astype(np.float32), ex)
    np.testing.assert_array_equal(r32.hash, r64.hash)
    np.testing.assert_array_equal(r32.idx, r64.idx)
    np.testing.assert_array_equal(r32.val, r64.val)
    np.testing.assert_allclose(r32.margin, r64.margin, rtol=0, atol=1e-4)


def test_bad_values_are_refused():
    rng = np.random.default_rng(6)
    X, Y, n_obs, _ = random_chain(rng, 4, 2, 3, True)
    with pytest.raises(ValueError, match="feat_val"):
        SequenceTask(EncodedSequences(X.sent_ptr, X.feat_ptr, X.feat_idx, X.feat_val[:-1]), Y,
                     2, n_obs)
    bad = X.feat_val.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        SequenceTask(EncodedSequences(X.sent_ptr, X.feat_ptr, X.feat_idx, bad), Y, 2, n_obs)
