"""The chain with real-valued observation features and label-bigram (B) observation features:
Viterbi and loss-augmented Viterbi against enumeration of all K^n taggings, φ against Φ(gold) −
Φ(y) built naively from the definition, margins, value scaling, the binary fast path, the
weights inference reads, and training through the learner registry."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from chain_hash import hash_tags
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.task import SequenceTask


def random_chain(rng: np.random.Generator, n_sent: int, K: int, F: int, valued: bool,
                 max_len: int = 5, G: int = 0):
    """Random sentences (lengths 0..max_len); each token fires a private feature (so no two
    taggings tie) and up to 3 of F shared ones, and up to 2 of G B features (first tokens
    too: they must be ignored), with N(0, 1) values when ``valued``.

    Returns (X, Y, n_obs, tokens) with tokens[t] = (ids, values, B ids, B values) of token t."""
    lengths = rng.integers(0, max_len + 1, n_sent)
    sent_ptr = np.zeros(n_sent + 1, np.int64)
    sent_ptr[1:] = np.cumsum(lengths)
    n_tok = int(sent_ptr[-1])
    tokens = []
    for t in range(n_tok):
        shared = rng.choice(F, size=int(rng.integers(0, min(F, 3) + 1)), replace=False)
        f = np.sort(np.append(shared, F + t)).astype(np.int32)
        g = np.sort(rng.choice(G, size=int(rng.integers(0, min(G, 2) + 1)),
                               replace=False)).astype(np.int32)
        value = (lambda k: rng.normal(size=k)) if valued else np.ones
        tokens.append((f, value(f.size), g, value(g.size)))

    def cat(k, dt):
        return np.concatenate([tok[k] for tok in tokens]).astype(dt) if tokens else np.zeros(0, dt)

    def ptr(k):
        p = np.zeros(n_tok + 1, np.int64)
        p[1:] = np.cumsum([tok[k].size for tok in tokens])
        return p

    X = EncodedSequences(sent_ptr, ptr(0), cat(0, np.int32),
                         cat(1, np.float64) if valued else None,
                         ptr(2) if G else None, cat(2, np.int32) if G else None,
                         cat(3, np.float64) if G and valued else None)
    Y = rng.integers(0, K, n_tok).astype(np.int32)
    return X, Y, F + n_tok, tokens


def naive_phi(F: int, K: int, G: int, tokens, y) -> np.ndarray:
    """Φ(x, y) from the definition: Σ_t Σ_f v_{t,f} e(f, y_t) + Σ_{t=0}^{n} e(y_{t−1} → y_t)
    + Σ_{t=1}^{n−1} Σ_g v_{t,g} e(g, y_{t−1}, y_t), laid out as [F·K | (K+1)² | G·K·K]."""
    v = np.zeros(F * K + (K + 1) ** 2 + G * K * K)
    for (f, val, _, _), tag in zip(tokens, y, strict=True):
        for fi, vi in zip(f, val, strict=True):
            v[fi * K + tag] += vi
    path = [K, *[int(t) for t in y], K]
    for p, c in zip(path[:-1], path[1:], strict=True):
        v[F * K + p * (K + 1) + c] += 1.0
    bbase = F * K + (K + 1) ** 2
    for t in range(1, len(y)):
        _, _, g, gv = tokens[t]
        for gi, vi in zip(g, gv, strict=True):
            v[bbase + gi * K * K + y[t - 1] * K + y[t]] += vi
    return v


def sentence(task: SequenceTask, tokens, Y, i):
    a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
    return tokens[a:b], Y[a:b]


def enumerate_scores(w, F, K, G, toks, gold, scale):
    """{y: w·Φ(x, y) + scale·Δ(gold, y)} over all K^n taggings."""
    out = {}
    for y in itertools.product(range(K), repeat=len(toks)):
        out[y] = float(w @ naive_phi(F, K, G, toks, y)) + scale * sum(
            int(a != b) for a, b in zip(y, gold, strict=True))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 3), F=st.integers(1, 4),
       G=st.integers(0, 3), valued=st.booleans())
def test_viterbi_and_loss_augmented_equal_enumeration(seed, K, F, G, valued):
    """Plain (scale 0), loss-augmented (1) and loss-diminished (−1) Viterbi with random U, T
    and B weights find the enumerated argmax; records carry its hash, Δ, φ and w·φ."""
    rng = np.random.default_rng(seed)
    X, Y, n_obs, tokens = random_chain(rng, 6, K, F, valued, G=G)
    task = SequenceTask(X, Y, K, n_obs, G)
    assert task.dim == n_obs * K + (K + 1) ** 2 + G * K * K
    ex = np.arange(task.n_examples)
    w = rng.normal(size=task.dim)
    dec = task.decode(w, ex)
    for scale in (1.0, 0.0, -1.0):
        rb = task.loss_scaled(w, ex, scale)
        rec = {int(e): k for k, e in enumerate(rb.ex)}
        for i in ex:
            toks, gold = sentence(task, tokens, Y, i)
            scores = enumerate_scores(w, n_obs, K, G, toks, gold, scale)
            best = max(scores, key=scores.get)
            if scale == 0.0:
                assert tuple(dec[i]) == best
                assert task.score(w, i, dec[i]) == pytest.approx(scores[best], abs=1e-9)
            if best == tuple(gold):
                assert i not in rec
                continue
            k = rec[int(i)]
            assert rb.hash[k] == hash_tags(np.array(best, np.int32))
            assert rb.delta[k] == sum(int(a != b) for a, b in zip(best, gold, strict=True))
            sl = slice(rb.ptr[k], rb.ptr[k + 1])
            phi = np.zeros(task.dim)
            phi[rb.idx[sl]] = rb.val[sl]
            np.testing.assert_allclose(
                phi, naive_phi(n_obs, K, G, toks, gold) - naive_phi(n_obs, K, G, toks, best),
                rtol=0, atol=1e-12)
            assert rb.margin[k] == pytest.approx(float(w @ phi), abs=1e-9)
            s_gold = float(w @ naive_phi(n_obs, K, G, toks, gold))
            assert s_gold - rb.margin[k] + scale * rb.delta[k] == pytest.approx(scores[best],
                                                                                 abs=1e-9)


@pytest.mark.parametrize("seed,G,valued", [(0, 0, True), (1, 3, True), (2, 3, False),
                                           (3, 1, True)])
def test_phi_delta_and_score_equal_the_definition(seed, G, valued):
    """φ(y) of arbitrary taggings equals Φ(gold) − Φ(y) built naively (sorted unique indices,
    no zeros), Δ is the Hamming distance, and score(y) = w·Φ(y)."""
    rng = np.random.default_rng(seed)
    K, F = 4, 6
    X, Y, n_obs, tokens = random_chain(rng, 20, K, F, valued, max_len=9, G=G)
    task = SequenceTask(X, Y, K, n_obs, G)
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
                phi, naive_phi(n_obs, K, G, toks, gold) - naive_phi(n_obs, K, G, toks, y),
                rtol=0, atol=1e-12)
            assert task.score(w, i, y) == pytest.approx(w @ naive_phi(n_obs, K, G, toks, y),
                                                        abs=1e-9)
        assert task.phi_delta(i, gold)[0].size == 0


def test_values_scale_phi():
    """Doubling every value doubles the emission and B entries of φ and leaves the transitions;
    doubling one value changes φ by exactly that feature's ±v."""
    rng = np.random.default_rng(1)
    K, F, G = 3, 5, 2
    X, Y, n_obs, tokens = random_chain(rng, 12, K, F, True, max_len=7, G=G)
    task = SequenceTask(X, Y, K, n_obs, G)
    task2 = SequenceTask(replace(X, feat_val=2.0 * X.feat_val, bfeat_val=2.0 * X.bfeat_val), Y,
                         K, n_obs, G)
    emit, bbase = n_obs * K, task.bigram_base

    def phi(t, i, y):
        d = np.zeros(t.dim)
        idx, val, _ = t.phi_delta(i, y)
        d[idx] = val
        return d

    checked = np.zeros(2, int)
    for i in range(task.n_examples):
        toks, gold = sentence(task, tokens, Y, i)
        if not toks:
            continue
        y = (gold + 1) % K  # every tag and every transition differs from gold's
        d1, d2 = phi(task, i, y), phi(task2, i, y)
        np.testing.assert_array_equal(d2[:emit], 2.0 * d1[:emit])
        np.testing.assert_array_equal(d2[emit:bbase], d1[emit:bbase])
        np.testing.assert_array_equal(d2[bbase:], 2.0 * d1[bbase:])
        checked += [np.count_nonzero(d1[:emit]), np.count_nonzero(d1[bbase:])]
        # one emission value doubled: the private feature of the sentence's first token
        a = int(task.sent_ptr[i])
        q = int(X.feat_ptr[a + 1]) - 1  # the private feature sorts last
        assert X.feat_idx[q] == F + a
        v3 = X.feat_val.copy()
        v3[q] *= 2.0
        expect = d1.copy()
        expect[(F + a) * K + gold[0]] += X.feat_val[q]
        expect[(F + a) * K + y[0]] -= X.feat_val[q]
        np.testing.assert_allclose(phi(SequenceTask(replace(X, feat_val=v3), Y, K, n_obs, G),
                                       i, y), expect, rtol=0, atol=1e-12)
        # one B value doubled: a B feature of the second token
        if len(toks) > 1 and X.bfeat_ptr[a + 2] > X.bfeat_ptr[a + 1]:
            q = int(X.bfeat_ptr[a + 1])
            g = int(X.bfeat_idx[q])
            v4 = X.bfeat_val.copy()
            v4[q] *= 2.0
            expect = d1.copy()
            expect[bbase + g * K * K + gold[0] * K + gold[1]] += X.bfeat_val[q]
            expect[bbase + g * K * K + y[0] * K + y[1]] -= X.bfeat_val[q]
            np.testing.assert_allclose(
                phi(SequenceTask(replace(X, bfeat_val=v4), Y, K, n_obs, G), i, y), expect,
                rtol=0, atol=1e-12)
    assert checked.min() > 0


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


@pytest.mark.parametrize("valued", [False, True])
def test_b_features_of_first_tokens_are_ignored(valued):
    """B features firing only on the first token of each sentence score nothing (no transition
    into position 0 but START's): the kernels with B arrays give the records of the task
    without them, bit for bit."""
    rng = np.random.default_rng(8)
    K, F, G = 4, 20, 3
    X, Y, n_obs, _ = random_chain(rng, 60, K, F, valued, max_len=10)
    n_tok = X.n_tokens
    first = np.zeros(n_tok, bool)
    first[X.sent_ptr[:-1][np.diff(X.sent_ptr) > 0]] = True
    bptr = np.zeros(n_tok + 1, np.int64)
    bptr[1:] = np.cumsum(first * 2)
    bidx = np.tile(np.array([0, 2], np.int32), int(first.sum()))
    with_b = SequenceTask(replace(X, bfeat_ptr=bptr, bfeat_idx=bidx,
                                  bfeat_val=rng.normal(size=bidx.size) if valued else None),
                          Y, K, n_obs, G)
    plain = SequenceTask(X, Y, K, n_obs)
    assert with_b.bfeat_ptr is not None
    ex = np.arange(plain.n_examples)
    w = rng.normal(size=with_b.dim)
    w_plain = w[:plain.dim]
    for scale in (1.0, 0.0):
        a = plain.loss_scaled(w_plain, ex, scale)
        assert len(a) > 10
        _same_batch(a, with_b.loss_scaled(w, ex, scale))
    starts, lens = with_b.weights_read(ex)
    assert starts.max() < with_b.bigram_base  # no B block is read


@pytest.mark.parametrize("G", [0, 8])
def test_float32_inference_with_values_finds_the_float64_structures(G):
    """The workers' float32 w̄ (values and B matrices in float32) finds the float64 records."""
    rng = np.random.default_rng(5)
    K, F = 6, 40
    X, Y, n_obs, _ = random_chain(rng, 60, K, F, True, max_len=14, G=G)
    task = SequenceTask(X, Y, K, n_obs, G)
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


def test_weights_read_covers_what_inference_reads():
    """w zeroed outside the blocks weights_read names gives the same records as the full w (so
    the lazy learners bring every weight inference reads up to date), and the blocks include
    B blocks."""
    rng = np.random.default_rng(9)
    K, F, G = 4, 10, 30
    X, Y, n_obs, _ = random_chain(rng, 40, K, F, True, max_len=10, G=G)
    task = SequenceTask(X, Y, K, n_obs, G)
    w = rng.normal(size=task.dim)
    few = np.flatnonzero(np.diff(X.sent_ptr) > 1)[:4]
    for ex in (np.arange(task.n_examples), few):
        starts, lens = task.weights_read(ex)
        assert starts.shape == lens.shape
        assert np.all(starts + lens <= task.dim)
        mask = np.zeros(task.dim, bool)
        for s0, ln in zip(starts, lens, strict=True):
            mask[s0:s0 + ln] = True
        assert mask[task.bigram_base:].any()
        assert ex is not few or not mask[task.bigram_base:].all()  # not vacuous
        _same_batch(task.loss_augmented(w, ex), task.loss_augmented(np.where(mask, w, 0.0), ex))


def test_bad_b_features_are_refused():
    rng = np.random.default_rng(10)
    X, Y, n_obs, _ = random_chain(rng, 5, 2, 3, True, G=3)
    with pytest.raises(ValueError, match=r"bfeat_idx ids must be in \[0, 2\)"):
        SequenceTask(X, Y, 2, n_obs, 2)
    with pytest.raises(ValueError, match="bfeat_val"):
        SequenceTask(replace(X, bfeat_val=X.bfeat_val[:-1]), Y, 2, n_obs, 3)
    with pytest.raises(ValueError, match="bfeat_ptr"):
        SequenceTask(replace(X, bfeat_ptr=X.bfeat_ptr[:-1]), Y, 2, n_obs, 3)
    with pytest.raises(ValueError, match="without bfeat_ptr"):
        SequenceTask(replace(X, bfeat_ptr=None), Y, 2, n_obs, 3)


def _valued_bigram_task(n_sentences: int = 120, G: int = 24, seed: int = 3) -> SequenceTask:
    """A small synthetic tagging problem (as tests/small_fit.py's) with real values on every
    observation feature (U(0.5, 1.5)) and, per token but the first of a sentence, two B
    features: the bucket of the previous word type (mod G − 1) and a bias (G − 1), valued."""
    from demidcd.synthetic import generate
    from demidcd.tasks.chain.features import SequenceFeaturizer

    c = generate(n_sentences=n_sentences, n_tags=5, vocab_size=300, seed=seed)
    enc = SequenceFeaturizer(1, 0).fit_transform(c.tokens)
    rng = np.random.default_rng(seed)
    types: dict[str, int] = {}
    bidx, bptr = [], [0]
    for sent in c.tokens:
        for t in range(len(sent)):
            if t:
                prev = types.setdefault(sent[t - 1].lower(), len(types))
                bidx += [prev % (G - 1), G - 1]
            bptr.append(len(bidx))
    X = replace(enc, feat_val=rng.uniform(0.5, 1.5, enc.feat_idx.size),
                bfeat_ptr=np.array(bptr, np.int64), bfeat_idx=np.array(bidx, np.int32),
                bfeat_val=rng.uniform(0.5, 1.5, len(bidx)))
    classes = sorted({t for s in c.tags for t in s})
    y = np.array([classes.index(t) for s in c.tags for t in s], np.int32)
    return SequenceTask(X, y, len(classes), enc.feat_idx.max() + 1, G)


def test_learners_train_b_features_and_values_unchanged(shm_guard):
    """1-DCD and DEMI-DCD (one learner, one worker process) train a task with valued U and B
    features through the learner registry and reach the same primal objective; the B block
    gets weights and the model fits the training data."""
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig, primal_objective

    task = _valued_bigram_task()
    C = 0.1
    cfg = dict(C=C, tol=1e-3, delta=1e-3, max_epochs=100000, time_limit=60)
    one = train(task, "dcd", SolverConfig(**cfg), threads=1)
    demi = train(task, "demi-dcd", SolverConfig(**cfg), threads=2, learners=1)
    assert one.stop_reason == "converged" and demi.stop_reason == "converged"
    p1, _ = primal_objective(task, one.w, C)
    p2, _ = primal_objective(task, demi.w, C)
    assert abs(p2 - p1) / p1 <= 1e-3
    assert np.abs(one.w[task.bigram_base:]).max() > 1e-3  # the B block is trained
    ex = np.arange(task.n_examples)
    assert task.metric(task.gold(ex), task.decode(one.w, ex))["score"] > 0.95


@pytest.mark.parametrize("name", ["dcd-light", "ms-dcd", "sp-ipm", "perceptron", "mira",
                                  "pegasos", "adagrad", "sdm-hinge", "sdm-ramp"])
def test_every_other_learner_trains_b_features_and_values(name, shm_guard):
    """The remaining learners take the same valued U + B task through the registry, as they take
    a binary one: the B block gets weights and the model fits the training data (1-DCD and
    DEMI-DCD are held to the optimum above). Bounded by epochs (16; 4 CCCP rounds of
    sdm-ramp), where each learner fits the data with room to spare, not by the clock: four of
    them used to train until a 1.5 s time limit."""
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig

    task = _valued_bigram_task()
    threads = 2 if name in ("ms-dcd", "sp-ipm") else 1
    epochs = 4 if name == "sdm-ramp" else 16
    r = train(task, name, SolverConfig(C=0.1, tol=1e-3, max_epochs=epochs, time_limit=5),
              threads=threads)
    assert np.all(np.isfinite(r.w))
    assert np.abs(r.w[task.bigram_base:]).max() > 1e-3
    ex = np.arange(task.n_examples)
    assert task.metric(task.gold(ex), task.decode(r.w, ex))["score"] > 0.98
