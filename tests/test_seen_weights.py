"""Emission weights only for the (feature, label) pairs seen in training (``weights="seen"``):
decoding, loss-augmented records, φ and score equal those of a dense model whose other
(feature, label) weights are zero, against enumeration of all K^n taggings; training reaches
the optimum of that restricted problem (its brute-force primal equals the learner's dual);
with every pair seen the layout is the dense one and training is identical; the weights of a
many-label run stay far below features x labels; the model file, dump, predict, the CLI, resume
(continues exactly) and warm start (refused in one line)."""

from __future__ import annotations

import numpy as np
import pytest
from test_chain_features import enumerate_scores, naive_phi, random_chain, sentence

from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.records import seen_pairs
from demidcd.tasks.chain.task import SequenceTask


def restricted(X, Y, K: int, n_obs: int, G: int) -> tuple[SequenceTask, SequenceTask, callable,
                                                           np.ndarray]:
    """(seen task, dense task, w_seen → the dense w with zeros off the seen pairs, dense mask
    of the weights that exist in the seen layout)."""
    pairs = seen_pairs(X, Y, n_obs, K)
    seen = SequenceTask(X, Y, K, n_obs, G, pairs=pairs)
    dense = SequenceTask(X, Y, K, n_obs, G)
    off, lab = pairs
    where = np.repeat(np.arange(n_obs, dtype=np.int64), np.diff(off)) * K + lab
    nu, tb = lab.shape[0], seen.u_rows * K

    def to_dense(ws: np.ndarray) -> np.ndarray:
        assert not ws[nu:tb].any()  # the padding is never written
        wd = np.zeros(dense.dim)
        wd[where] = ws[:nu]
        wd[n_obs * K:] = ws[tb:]
        return wd

    mask = np.zeros(dense.dim, bool)
    mask[where] = True
    mask[n_obs * K:] = True
    return seen, dense, to_dense, mask


def seen_w(rng, seen: SequenceTask) -> np.ndarray:
    w = rng.normal(size=seen.dim)
    w[seen.pairs[1].shape[0]:seen.u_rows * seen.K] = 0.0
    return w


@pytest.mark.parametrize("seed,K,F,G,valued", [(0, 3, 4, 0, False), (1, 3, 4, 2, True),
                                               (2, 2, 3, 0, True), (3, 1, 2, 0, False),
                                               (4, 3, 2, 3, False), (5, 3, 5, 1, True)])
def test_seen_layout_equals_restricted_dense_by_enumeration(seed, K, F, G, valued):
    """Viterbi (plain, loss-augmented, loss-diminished), the records' φ, Δ and margin, and
    score: the seen layout equals the dense one with zeros off the seen pairs, and both find
    the enumerated argmax; φ of arbitrary taggings is the dense φ restricted to the seen pairs."""
    rng = np.random.default_rng(seed)
    X, Y, n_obs, tokens = random_chain(rng, 8, K, F, valued, max_len=4, G=G)
    seen, dense, to_dense, mask = restricted(X, Y, K, n_obs, G)
    assert seen.dim < dense.dim or K == 1
    ex = np.arange(seen.n_examples)
    ws = seen_w(rng, seen)
    wd = to_dense(ws)
    dec = seen.decode(ws, ex)
    for a, b in zip(dec, dense.decode(wd, ex), strict=True):
        np.testing.assert_array_equal(a, b)
    for scale in (1.0, 0.0, -1.0):
        rb = seen.loss_scaled(ws, ex, scale)
        rec = {int(e): k for k, e in enumerate(rb.ex)}
        for i in ex:
            toks, gold = sentence(seen, tokens, Y, i)
            scores = enumerate_scores(wd, n_obs, K, G, toks, gold, scale)
            best = max(scores, key=scores.get)
            if scale == 0.0:
                assert tuple(dec[i]) == best
                assert seen.score(ws, i, dec[i]) == pytest.approx(scores[best], abs=1e-9)
            if best == tuple(gold):
                assert i not in rec
                continue
            k = rec[int(i)]
            sl = slice(rb.ptr[k], rb.ptr[k + 1])
            phi = np.zeros(seen.dim)
            phi[rb.idx[sl]] = rb.val[sl]
            want = (naive_phi(n_obs, K, G, toks, gold) - naive_phi(n_obs, K, G, toks, best))
            np.testing.assert_allclose(to_dense(phi), want * mask, rtol=0, atol=1e-12)
            assert rb.delta[k] == sum(int(a != b) for a, b in zip(best, gold, strict=True))
            assert rb.margin[k] == pytest.approx(float(ws @ phi), abs=1e-9)
    for i in ex:  # φ of random taggings: the dense φ restricted
        toks, gold = sentence(seen, tokens, Y, i)
        y = rng.integers(0, K, len(gold)).astype(np.int32)
        idx, val, delta = seen.phi_delta(i, y)
        assert np.all(np.diff(idx) > 0) and np.all(val != 0)
        phi = np.zeros(seen.dim)
        phi[idx] = val
        want = naive_phi(n_obs, K, G, toks, gold) - naive_phi(n_obs, K, G, toks, y)
        np.testing.assert_allclose(to_dense(phi), want * mask, rtol=0, atol=1e-12)
        assert seen.score(ws, i, y) == pytest.approx(
            float(wd @ naive_phi(n_obs, K, G, toks, y)), abs=1e-9)


def test_weights_read_covers_the_seen_pairs():
    """w zeroed outside the blocks weights_read names (each feature's list of seen labels)
    gives the same records: lazy learners bring every weight inference reads up to date."""
    rng = np.random.default_rng(7)
    X, Y, n_obs, _ = random_chain(rng, 30, 4, 6, True, max_len=8, G=3)
    seen = restricted(X, Y, 4, n_obs, 3)[0]
    w = seen_w(rng, seen)
    ex = np.flatnonzero(np.diff(X.sent_ptr) > 1)[:3]
    starts, lens = seen.weights_read(ex)
    keep = np.zeros(seen.dim, bool)
    for s0, ln in zip(starts, lens, strict=True):
        keep[s0:s0 + ln] = True
    assert not keep[:seen.pairs[1].shape[0]].all()  # not vacuous
    a, b = seen.loss_augmented(w, ex), seen.loss_augmented(np.where(keep, w, 0.0), ex)
    np.testing.assert_array_equal(a.idx, b.idx)
    np.testing.assert_allclose(a.margin, b.margin, rtol=0, atol=1e-12)


def test_training_reaches_the_restricted_optimum(shm_guard):
    """1-DCD on the seen layout converges to the optimum of the dense problem with the unseen
    (feature, label) weights held at 0: the primal of the mapped w, by enumeration of every
    tagging, equals the learner's dual (a certificate); the unrestricted optimum is lower."""
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig

    rng = np.random.default_rng(11)
    K, G, C = 3, 2, 0.5
    X, Y, n_obs, tokens = random_chain(rng, 12, K, 3, True, max_len=4, G=G)
    seen, dense, to_dense, mask = restricted(X, Y, K, n_obs, G)
    cfg = SolverConfig(C=C, tol=1e-6, max_epochs=100000, time_limit=60)

    def primal(wd: np.ndarray) -> float:
        loss = 0.0
        for i in range(seen.n_examples):
            toks, gold = sentence(seen, tokens, Y, i)
            if not len(gold):
                continue
            s_gold = float(wd @ naive_phi(n_obs, K, G, toks, gold))
            worst = max(enumerate_scores(wd, n_obs, K, G, toks, gold, 1.0).values()) - s_gold
            loss += max(worst, 0.0) ** 2
        return 0.5 * float(wd @ wd) + C * loss

    r = train(seen, "dcd", cfg, threads=1)
    assert r.stop_reason == "converged"
    p = primal(to_dense(r.w))
    assert p == pytest.approx(r.dual, rel=1e-4)
    rd = train(dense, "dcd", cfg, threads=1)
    assert primal(rd.w) < p - 1e-6  # the restriction matters on this problem
    assert np.abs(rd.w[~mask]).max() > 1e-6


def test_every_pair_seen_is_the_dense_layout():
    """When every feature occurs with every label the seen lists are full, the layout is the
    dense one weight for weight and 1-DCD trains the same w."""
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig

    rng = np.random.default_rng(5)
    K, F, n_tok = 3, 4, 240
    feat_ptr = np.arange(0, 2 * n_tok + 1, 2, dtype=np.int64)
    feat_idx = rng.integers(0, F, 2 * n_tok).astype(np.int32)
    X = EncodedSequences(np.arange(0, n_tok + 1, 4, dtype=np.int64), feat_ptr, feat_idx)
    Y = rng.integers(0, K, n_tok).astype(np.int32)
    off, lab = seen_pairs(X, Y, F, K)
    np.testing.assert_array_equal(off, np.arange(F + 1) * K)
    seen = SequenceTask(X, Y, K, F, pairs=(off, lab))
    dense = SequenceTask(X, Y, K, F)
    assert seen.dim == dense.dim
    cfg = SolverConfig(C=0.1, tol=1e-12, max_epochs=5)
    np.testing.assert_array_equal(train(seen, "dcd", cfg).w, train(dense, "dcd", cfg).w)


def _many_labels(n_sent: int = 150, n_tags: int = 120, seed: int = 0):
    """Sentences of words from a 600-word vocabulary, each word with its own tag among
    ``n_tags`` (a Brown-tags-like many-label problem in miniature)."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(600)]
    tag_of = {w: f"T{rng.integers(n_tags)}" for w in vocab}
    X = [[vocab[j] for j in rng.integers(0, 600, rng.integers(3, 12))] for _ in range(n_sent)]
    return X, [[tag_of[w] for w in s] for s in X]


def test_memory_per_token_of_a_many_label_run():
    """A run with 120 labels: the seen layout holds under 50 weights (400 bytes) per training
    token where features x labels (the layout of weights="all") needs over ten times that;
    both taggers are fitted and the seen one fits the training data as well."""
    from demidcd.estimators.sequence import SequenceTagger

    X, Y = _many_labels()
    n_tok = sum(map(len, X))
    kw = dict(min_count=1, max_epochs=8, C=0.1)
    seen = SequenceTagger(weights="seen", **kw).fit(X, Y)
    dense = SequenceTagger(weights="all", **kw).fit(X, Y)
    # measured: 190 bytes per token seen, 5,873 with every (feature, label)
    assert seen.coef_.nbytes / n_tok < 400 < dense.coef_.nbytes / n_tok / 10
    assert seen.score(X, Y) >= dense.score(X, Y) - 0.01
    assert seen.score(X, Y) > 0.95


def test_auto_weights_choose_seen_pairs_by_the_memory_model(monkeypatch):
    """weights="auto" (the default) keeps every (feature, label) while the modelled memory it
    adds stays within the budget of :mod:`demidcd.estimators.layout` and takes the seen pairs
    past it; the crf learner takes them whatever the size (CRFsuite's objective), and all of
    them with weights="all"."""
    from demidcd.estimators import layout
    from demidcd.estimators import sequence as seq

    X, Y = _many_labels()
    kw = dict(min_count=1, max_epochs=1, C=0.1)
    assert seq.SequenceTagger(**kw).fit(X, Y).seen_pairs_ is None
    monkeypatch.setattr(layout, "ALL_PAIRS_ALLOWANCE", 0)  # any memory the dense w adds
    monkeypatch.setattr(layout, "RUNTIME_BYTES", 0)  # is then a large share of the run's
    assert seq.SequenceTagger(**kw).fit(X, Y).seen_pairs_ is not None
    assert seq.SequenceTagger(weights="all", **kw).fit(X, Y).seen_pairs_ is None
    monkeypatch.undo()
    crf = seq.SequenceTagger(algorithm="crf", min_count=1, max_iterations=2).fit(X, Y)
    assert crf.seen_pairs_ is not None
    crf = seq.SequenceTagger(algorithm="crf", weights="all", min_count=1,
                             max_iterations=2).fit(X, Y)
    assert crf.seen_pairs_ is None


def test_model_file_dump_and_views(tmp_path):
    """A seen model saves its pairs (npz, no pickle), loads to the same predictions and dim;
    state_features_ names only seen pairs and agrees with the dump; feature_summary says so."""
    from demidcd.estimators.sequence import SequenceTagger

    X, Y = _many_labels(60, 20, seed=1)
    est = SequenceTagger(weights="seen", min_count=1, max_epochs=5).fit(X, Y)
    path = tmp_path / "m.npz"
    est.save(path)
    back = SequenceTagger.load(path)
    np.testing.assert_array_equal(back.coef_, est.coef_)
    np.testing.assert_array_equal(back.seen_pairs_[1], est.seen_pairs_[1])
    assert back.predict(X) == est.predict(X)
    assert "pairs seen in training" in back.feature_summary()
    sf = back.state_features_
    assert sf
    enc = back.featurizer_.transform(X)
    tags = [t for ts in Y for t in ts]
    pairs = {(int(f), tags[t]) for t in range(len(tags))
             for f in enc.feat_idx[enc.feat_ptr[t]:enc.feat_ptr[t + 1]]}
    index = {n: i for i, n in enumerate(back.featurizer_.features)}
    assert all((index[f], t) in pairs for f, t in sf)
    lines = list(back.weight_lines(top=None))
    body = [ln.split("\t") for ln in lines if not ln.startswith("#") and "->" not in ln]
    assert len(body) == len(sf)
    for name, lab, v in body:
        assert float(v) == pytest.approx(sf[(name, lab)], rel=1e-5)
    assert set(back.transition_features_) == {(a, b) for a in back.classes_
                                              for b in back.classes_}


def test_init_refuses_seen(tmp_path):
    """Warm start does not map seen-pair weights: one clear OptionError."""
    from demidcd.errors import OptionError
    from demidcd.estimators.sequence import SequenceTagger

    X, Y = _many_labels(30, 10, seed=2)
    est = SequenceTagger(weights="seen", min_count=1, max_epochs=2).fit(X, Y)
    est.save(tmp_path / "m.npz")
    with pytest.raises(OptionError, match="init does not take"):
        SequenceTagger(min_count=1, max_epochs=2, init=str(tmp_path / "m.npz")).fit(X, Y)


def test_cli_train_evaluate_predict_seen(tmp_path, cli):
    """``train --weights seen`` writes a model evaluate and predict read; the log counts the
    seen pairs; a bad value is one line naming the option."""
    X, Y = _many_labels(80, 15, seed=3)
    train = tmp_path / "train.txt"
    train.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in zip(s, ts, strict=True))
                                 for s, ts in zip(X, Y, strict=True)) + "\n")
    model = tmp_path / "m.npz"
    code, out, err = cli("train", "--train", train, "--format", "columns", "--model", model,
                         "--weights", "seen", "--threads", "1", "--max-epochs", "5",
                         "--min-count", "1")
    assert code == 0, err
    assert "pairs seen in training" in out + err
    code, out, err = cli("evaluate", "--model", model, "--data", train)
    assert code == 0 and "accuracy" in out + err
    pred = tmp_path / "pred.txt"
    code, out, err = cli("predict", "--model", model, "--data", train, "--out", pred)
    assert code == 0 and pred.read_text().count("\n") >= sum(map(len, X))
    code, out, err = cli("train", "--train", train, "--format", "columns", "--model",
                         tmp_path / "x.npz", "--weights", "some")
    assert code == 2 and "--weights" in err and "Traceback" not in err
    assert not (tmp_path / "x.npz").exists()


def test_resume_continues_a_seen_run(tmp_path):
    """--resume of a seen model continues exactly (1-DCD: 2 + 3 epochs = 5 epochs); a resume
    with the other layout is refused by the state check in one line."""
    from demidcd.estimators.sequence import SequenceTagger
    from demidcd.io.model import state_path
    from demidcd.solvers.state import StateMismatch

    X, Y = _many_labels(40, 12, seed=4)
    kw = dict(min_count=1, C=0.1, tol=1e-12)
    a = SequenceTagger(weights="seen", max_epochs=2, save_state=True, **kw).fit(X, Y)
    path = tmp_path / "a.npz"
    a.save(path)
    a.write_state(state_path(path))
    b = SequenceTagger(weights="seen", max_epochs=3, resume=str(path), **kw).fit(X, Y)
    full = SequenceTagger(weights="seen", max_epochs=5, **kw).fit(X, Y)
    assert b.result_.epochs == full.result_.epochs == 5
    np.testing.assert_allclose(b.coef_, full.coef_, rtol=0, atol=1e-9)
    with pytest.raises(StateMismatch, match="feature space differs"):
        SequenceTagger(weights="all", max_epochs=1, resume=str(path), **kw).fit(X, Y)
