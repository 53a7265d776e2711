"""SequenceTask: Viterbi / loss-augmented Viterbi against brute force, φ / Δ / score identities."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from chain_hash import hash_tags

from demidcd.tasks.base import RecordBatch
from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.task import SequenceTask

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def random_instance(rng: np.random.Generator, n_sent: int, K: int, F: int, max_len: int = 5):
    """Random sentences (lengths 0..max_len) with random sorted feature subsets and gold tags."""
    lengths = rng.integers(0, max_len + 1, n_sent)
    sent_ptr = np.zeros(n_sent + 1, np.int64)
    sent_ptr[1:] = np.cumsum(lengths)
    n_tok = int(sent_ptr[-1])
    feats = []
    for _ in range(n_tok):
        k = int(rng.integers(0, min(F, 4) + 1))
        feats.append(np.sort(rng.choice(F, size=k, replace=False)).astype(np.int32))
    feat_ptr = np.zeros(n_tok + 1, np.int64)
    feat_ptr[1:] = np.cumsum([len(f) for f in feats])
    feat_idx = np.concatenate(feats) if feats else np.zeros(0, np.int32)
    X = EncodedSequences(sent_ptr, feat_ptr, feat_idx.astype(np.int32))
    Y = rng.integers(0, K, n_tok).astype(np.int32)
    return X, Y, feats


def dense_phi(F: int, K: int, feats: list[np.ndarray], y) -> np.ndarray:
    """Φ(x, y) built directly from the definition (independent of the package)."""
    v = np.zeros(F * K + (K + 1) ** 2)
    for t, tag in enumerate(y):
        for f in feats[t]:
            v[f * K + tag] += 1.0
    path = [K, *[int(t) for t in y], K]
    for p, c in zip(path[:-1], path[1:], strict=True):
        v[F * K + p * (K + 1) + c] += 1.0
    return v


def sentence(task: SequenceTask, feats, Y, i):
    a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
    return feats[a:b], Y[a:b]


def brute(w, F, K, f_i, gold, augment):
    best, arg = -np.inf, None
    for y in itertools.product(range(K), repeat=len(f_i)):
        s = w @ dense_phi(F, K, f_i, y)
        if augment:
            s += sum(int(a != b) for a, b in zip(y, gold, strict=True))
        if s > best:
            best, arg = s, np.array(y, np.int32)
    return best, arg


@pytest.mark.parametrize("seed", range(6))
def test_decode_and_loss_augmented_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 4))
    F = int(rng.integers(1, 6))
    X, Y, feats = random_instance(rng, 12, K, F)
    task = SequenceTask(X, Y, K, F)
    ex = np.arange(task.n_examples)
    for _ in range(3):
        w = rng.normal(size=task.dim)
        dec = task.decode(w, ex)
        rb = task.loss_augmented(w, ex)
        rec = {int(e): k for k, e in enumerate(rb.ex)}
        for i in ex:
            f_i, g = sentence(task, feats, Y, i)
            best, arg = brute(w, F, K, f_i, g, False)
            assert dec[i].dtype == np.int32
            np.testing.assert_array_equal(dec[i], arg)
            assert task.score(w, i, dec[i]) == pytest.approx(best, abs=1e-9)
            best_la, arg_la = brute(w, F, K, f_i, g, True)
            ham = int(np.sum(arg_la != g))
            if ham == 0:
                assert i not in rec
                continue
            k = rec[int(i)]
            assert rb.delta[k] == ham
            sl = slice(rb.ptr[k], rb.ptr[k + 1])
            phi = np.zeros(task.dim)
            phi[rb.idx[sl]] = rb.val[sl]
            expect = dense_phi(F, K, f_i, g) - dense_phi(F, K, f_i, arg_la)
            np.testing.assert_array_equal(phi, expect)
            # loss-augmented objective of the record's structure is the brute-force optimum
            s_g = w @ dense_phi(F, K, f_i, g)
            assert s_g - rb.margin[k] + ham == pytest.approx(best_la, abs=1e-9)
            assert rb.hash[k] == hash_tags(arg_la)


@pytest.mark.parametrize("seed", range(4))
def test_float32_weights_find_the_float64_structures(seed):
    """Workers search with w̄ rounded to float32 (``inference_dtype``): on random instances
    without near-ties the records are those of float64 w, margins within float32 rounding."""
    rng = np.random.default_rng(200 + seed)
    K, F = 6, 40
    X, Y, _ = random_instance(rng, 60, K, F, max_len=14)
    task = SequenceTask(X, Y, K, F)
    assert task.inference_dtype == np.float32
    ex = np.arange(task.n_examples)
    w = rng.normal(size=task.dim)
    r64 = task.loss_augmented(w, ex)
    r32 = task.loss_augmented(w.astype(np.float32), ex)
    check_batch_shape(r32, task.dim)
    np.testing.assert_array_equal(r32.ex, r64.ex)
    np.testing.assert_array_equal(r32.hash, r64.hash)
    np.testing.assert_array_equal(r32.idx, r64.idx)
    np.testing.assert_array_equal(r32.val, r64.val)
    np.testing.assert_allclose(r32.margin, r64.margin, rtol=0, atol=1e-4)
    assert np.abs(r32.margin - r64.margin).max() > 0  # really computed in float32


def check_batch_shape(rb: RecordBatch, dim: int):
    n = len(rb)
    assert rb.ex.dtype == np.int64 and rb.hash.dtype == np.int64
    assert rb.delta.dtype == np.float64 and rb.margin.dtype == np.float64
    assert rb.ptr.dtype == np.int64 and rb.idx.dtype == np.int32 and rb.val.dtype == np.float64
    assert rb.ptr.shape == (n + 1,) and rb.ptr[0] == 0 and rb.ptr[-1] == rb.idx.shape[0]
    for k in range(n):
        idx = rb.idx[rb.ptr[k]:rb.ptr[k + 1]]
        assert np.all(np.diff(idx) > 0)
        assert np.all(rb.val[rb.ptr[k]:rb.ptr[k + 1]] != 0)
        assert idx.size == 0 or (idx[0] >= 0 and idx[-1] < dim)


@pytest.mark.parametrize("seed", range(4))
def test_records_phi_delta_score_identity(seed):
    rng = np.random.default_rng(100 + seed)
    K, F = 5, 30
    X, Y, feats = random_instance(rng, 40, K, F, max_len=12)
    task = SequenceTask(X, Y, K, F)
    w = rng.normal(size=task.dim)
    ex = rng.permutation(task.n_examples)[:30]
    rb = task.loss_augmented(w, ex)
    check_batch_shape(rb, task.dim)
    assert len(rb) > 0
    assert set(rb.ex.tolist()) <= set(ex.tolist())
    for k in range(len(rb)):
        i = int(rb.ex[k])
        idx = rb.idx[rb.ptr[k]:rb.ptr[k + 1]]
        val = rb.val[rb.ptr[k]:rb.ptr[k + 1]]
        assert rb.margin[k] == pytest.approx(float(w[idx] @ val), abs=1e-9)
    # phi_delta for arbitrary sequences: identity and dense check
    for i in range(task.n_examples):
        f_i, g = sentence(task, feats, Y, i)
        for _ in range(3):
            y = rng.integers(0, K, len(g)).astype(np.int32)
            idx, val, delta = task.phi_delta(i, y)
            assert idx.dtype == np.int32 and val.dtype == np.float64
            assert np.all(np.diff(idx) > 0) and np.all(val != 0)
            assert delta == float(np.sum(y != g))
            phi = np.zeros(task.dim)
            phi[idx] = val
            np.testing.assert_array_equal(phi, dense_phi(F, K, f_i, g) - dense_phi(F, K, f_i, y))
            lhs = float(w[idx] @ val)
            assert lhs == pytest.approx(task.score(w, i, g) - task.score(w, i, y), abs=1e-9)
            assert task.score(w, i, y) == pytest.approx(w @ dense_phi(F, K, f_i, y), abs=1e-9)
        idx, val, delta = task.phi_delta(i, g)
        assert idx.size == 0 and delta == 0.0


def test_no_record_when_gold_wins():
    rng = np.random.default_rng(7)
    K, F = 4, 10
    X, Y, _ = random_instance(rng, 30, K, F, max_len=8)
    # give every token a private feature so a weight vector can make the gold path win by far
    n_tok = X.n_tokens
    feats = [np.append(X.feat_idx[X.feat_ptr[t]:X.feat_ptr[t + 1]], F + t) for t in range(n_tok)]
    feat_ptr = np.zeros(n_tok + 1, np.int64)
    feat_ptr[1:] = np.cumsum([len(f) for f in feats])
    X2 = EncodedSequences(X.sent_ptr, feat_ptr, np.concatenate(feats).astype(np.int32))
    F2 = F + n_tok
    task = SequenceTask(X2, Y, K, F2)
    w = rng.normal(scale=0.1, size=task.dim)
    for t in range(n_tok):
        w[(F + t) * K + Y[t]] += 5.0
    ex = np.arange(task.n_examples)
    assert len(task.loss_augmented(w, ex)) == 0
    dec = task.decode(w, ex)
    assert task.metric(task.gold(ex), dec)["score"] == 1.0
    # spoil a few sentences: exactly those produce records
    spoiled = [i for i in ex if task.sent_ptr[i + 1] > task.sent_ptr[i]][:5]
    for i in spoiled:
        t = int(task.sent_ptr[i])
        w[(F + t) * K + Y[t]] -= 50.0
    rb = task.loss_augmented(w, ex)
    assert sorted(rb.ex.tolist()) == sorted(int(i) for i in spoiled)
    check_batch_shape(rb, task.dim)


def test_hash_equal_iff_sequences_equal():
    rng = np.random.default_rng(3)
    seen: dict[int, tuple] = {}
    for _ in range(3000):
        n = int(rng.integers(1, 8))
        y = rng.integers(0, 3, n).astype(np.int32)
        h = hash_tags(y)
        assert h == hash_tags(y.copy())
        key = tuple(y.tolist())
        if h in seen:
            assert seen[h] == key
        seen[h] = key
    assert len(seen) > 1000


def test_hash_in_records_distinguishes_structures():
    rng = np.random.default_rng(11)
    K, F = 3, 6
    X = EncodedSequences(np.array([0, 6], np.int64), np.arange(7, dtype=np.int64),
                         rng.integers(0, F, 6).astype(np.int32))
    task = SequenceTask(X, np.zeros(6, np.int32), K, F)
    hashes: dict[int, bytes] = {}
    for _ in range(200):
        rb = task.loss_augmented(rng.normal(size=task.dim), np.array([0]))
        if len(rb) == 0:
            continue
        sig = rb.idx.tobytes() + rb.val.tobytes()
        h = int(rb.hash[0])
        if h in hashes:
            assert hashes[h] == sig  # same hash -> same structure -> same φ
        hashes[h] = sig
    sigs = list(hashes.values())
    assert len(set(sigs)) == len(sigs)  # different φ (structures) -> different hashes
    assert len(hashes) > 10


def test_metric_costs_and_validation():
    rng = np.random.default_rng(5)
    X, Y, _ = random_instance(rng, 10, 3, 4)
    task = SequenceTask(X, Y, 3, 4)
    np.testing.assert_array_equal(task.costs(), np.diff(X.sent_ptr).astype(float))
    assert task.dim == 4 * 3 + 16
    gold = [np.array([0, 1, 2]), np.array([1])]
    pred = [np.array([0, 2, 2]), np.array([1])]
    m = task.metric(gold, pred)
    assert m["score"] == m["accuracy"] == pytest.approx(0.75) and m["tokens"] == 4
    with pytest.raises(ValueError):
        task.decode(np.zeros(task.dim + 1), np.arange(2))
    with pytest.raises(ValueError):
        SequenceTask(X, Y, 2 if Y.max() == 2 else 1, 4)
    unl = SequenceTask(X, None, 3, 4)
    assert len(unl.decode(np.zeros(unl.dim), np.arange(10))) == 10
    with pytest.raises(ValueError):
        unl.loss_augmented(np.zeros(unl.dim), np.arange(10))


def test_empty_sentences_and_empty_batch():
    X = EncodedSequences(np.array([0, 0, 2, 2], np.int64), np.array([0, 1, 1], np.int64),
                         np.array([0], np.int32))
    task = SequenceTask(X, np.array([1, 0], np.int32), 2, 1)
    w = np.random.default_rng(0).normal(size=task.dim)
    dec = task.decode(w, np.arange(3))
    assert [len(d) for d in dec] == [0, 2, 0]
    rb = task.loss_augmented(w, np.arange(3))
    assert set(rb.ex.tolist()) <= {1}
    assert len(task.loss_augmented(w, np.zeros(0, np.int64))) == 0
    assert task.decode(w, np.zeros(0, np.int64)) == []


@pytest.mark.slow
def test_ewt_smoke():
    path = DATA / "ud_english_ewt" / "en_ewt-ud-dev.conllu"
    if not path.exists():
        pytest.skip("shared data not available")
    from demidcd.tasks.chain.features import SequenceFeaturizer

    sents, tags = [], []
    ws, ts = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line:
            if ws:
                sents.append(ws)
                tags.append(ts)
            ws, ts = [], []
            continue
        if line.startswith("#"):
            continue
        c = line.split("\t")
        if "-" in c[0] or "." in c[0]:
            continue
        ws.append(c[1])
        ts.append(c[4])
    sents, tags = sents[:500], tags[:500]
    fz = SequenceFeaturizer(min_count=1).fit(sents)
    X = fz.transform(sents)
    names = sorted({t for s in tags for t in s})
    Y = np.array([names.index(t) for s in tags for t in s], np.int32)
    task = SequenceTask(X, Y, len(names), fz.n_features)
    w = np.zeros(task.dim)
    ex = np.arange(task.n_examples)
    # a few online (loss-augmented) perceptron passes must fit the training sentences well
    for _ in range(5):
        for i in ex:
            rb = task.loss_augmented(w, np.array([i]))
            if len(rb):
                w[rb.idx] += rb.val
    acc = task.metric(task.gold(ex), task.decode(w, ex))["score"]
    assert acc > 0.9


def test_sort_keys_matches_numpy():
    from demidcd.tasks.phi import key_bits as _key_bits
    from demidcd.tasks.phi import sort_keys as _sort_keys

    rng = np.random.default_rng(2)
    counts = np.empty(256, np.int64)
    for m in [0, 1, 5, 48, 49, 300, 2000]:
        for top in [10, 2**20, 2**33]:
            keys = rng.integers(0, top, m).astype(np.int64)
            tmp = np.empty(m, np.int64)
            got = _sort_keys(keys.copy(), tmp, counts, m, int(top).bit_length())
            np.testing.assert_array_equal(got[:m], np.sort(keys))
    assert _key_bits(3 * 2 + 9) == int(2 * (3 * 2 + 9)).bit_length()


def test_unknown_gold_tags_evaluate_but_do_not_train():
    rng = np.random.default_rng(9)
    X, Y, _ = random_instance(rng, 6, 3, 4)
    Y = Y.copy()
    Y[0] = -1
    task = SequenceTask(X, Y, 3, 4)
    ex = np.arange(task.n_examples)
    w = rng.normal(size=task.dim)
    m = task.metric(task.gold(ex), task.decode(w, ex))
    assert m["tokens"] == Y.size and m["score"] <= (Y.size - 1) / Y.size
    with pytest.raises(ValueError):
        task.loss_augmented(w, ex)
    with pytest.raises(ValueError):
        SequenceTask(X, np.full_like(Y, -2), 3, 4)
