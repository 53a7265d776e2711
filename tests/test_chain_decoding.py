"""tasks.chain.decoding: k-best Viterbi, constrained decoding and max-marginals against brute-force
enumeration of all K^n label sequences on short random chains (n ≤ 5, K ≤ 5), and rank 0
against the tagger's own Viterbi kernels (kernels._forward / _backtrack, records.decode_kernel)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.errors import OptionError
from demidcd.tasks.chain import confidence as cf
from demidcd.tasks.chain import decoding as cd
from demidcd.tasks.chain import kernels as sq
from demidcd.tasks.chain import records

NEG = -np.inf


def max_marginals(em, tr, start, end, *, pos_tr=None, pos_index=None, fixed=None, allowed=None,
                  allowed_start=None, allowed_end=None):
    """:func:`~demidcd.tasks.chain.confidence.max_marginals_chain` for one sentence (arguments as
    :func:`~demidcd.tasks.chain.decoding.kbest`): M (n, K)."""
    n, K, a = cd.chain_args(em, tr, start, end, pos_tr, pos_index, fixed, allowed,
                            allowed_start, allowed_end)
    M = np.empty(n * K, np.float64)
    cf.max_marginals_chain(a[0], n, K, *a[1:], M, np.empty(3 * K, np.float64))
    return M.reshape(n, K)


# ---------------------------------------------------------------------------------------------
# brute force, written from the definitions
# ---------------------------------------------------------------------------------------------
def random_chain(rng, n, K, dtype=np.float64, integer=False, n_pos=0):
    """em (n, K), tr (K, K), start, end in ``dtype``; pos_tr (n_pos, K·K) float64 and pos_index
    (n,) int32 (None when n_pos = 0). Integer weights in [-2, 2] make ties frequent."""
    def draw(*shape):
        if integer:
            return rng.integers(-2, 3, shape).astype(np.float64)
        return rng.normal(size=shape)
    em, tr, start, end = (draw(n, K).astype(dtype), draw(K, K).astype(dtype),
                          draw(K).astype(dtype), draw(K).astype(dtype))
    pos_tr = pos_index = None
    if n_pos:
        pos_tr = draw(n_pos, K * K)
        pos_index = rng.integers(-1, n_pos, n).astype(np.int32)
    return dict(em=em, tr=tr, start=start, end=end, pos_tr=pos_tr, pos_index=pos_index)


def seq_score(c, y):
    """s(y) = start[y_0] + Σ em[t, y_t] + Σ_{t≥1} trans_t(y_{t−1}, y_t) + end[y_{n−1}] (float64)."""
    em, K = c["em"].astype(np.float64), c["em"].shape[1]
    s = float(c["start"][y[0]]) + float(c["end"][y[-1]])
    for t, b in enumerate(y):
        s += em[t, b]
        if t:
            p = -1 if c["pos_index"] is None else c["pos_index"][t]
            trans = c["tr"] if p < 0 else c["pos_tr"][p].reshape(K, K)
            s += float(trans[y[t - 1], b])
    return s


def enumerate_sorted(c, admissible=lambda y: True):
    """All admissible sequences as (score, y), best first, ties by reversed-lexicographic y."""
    n, K = c["em"].shape
    out = [(seq_score(c, y), y) for y in itertools.product(range(K), repeat=n) if admissible(y)]
    out.sort(key=lambda sy: (-sy[0], sy[1][::-1]))
    return out


def mask_admissible(allowed=None, first=None, last=None, fixed=None):
    """Admissibility under explicit masks and forced tags (independent of the kernels)."""
    def ok(y):
        if fixed is not None and any(f >= 0 and f != v for f, v in zip(fixed, y, strict=True)):
            return False
        if first is not None and not first[y[0]]:
            return False
        if last is not None and not last[y[-1]]:
            return False
        return allowed is None or all(allowed[a, b] for a, b in zip(y[:-1], y[1:], strict=False))
    return ok


def kernel_args(c):
    return dict(pos_tr=c["pos_tr"], pos_index=c["pos_index"])


def assert_matches_enumeration(ys, scores, ref, k, exact, tol):
    """The kernel's k best equal the first min(k, |ref|) of the enumeration: scores always,
    sequences exactly when ``exact`` (integer weights), else wherever a score is isolated."""
    m = min(k, len(ref))
    assert len(scores) == m and ys.shape[0] == m
    ref_scores = np.array([s for s, _ in ref[:m]])
    np.testing.assert_allclose(scores, ref_scores, rtol=tol, atol=tol)
    assert np.all(np.diff(scores) <= 0)
    all_scores = np.array([s for s, _ in ref])
    for j in range(m):
        isolated = np.sum(np.abs(all_scores - ref[j][0]) <= 10 * tol) == 1
        if exact or isolated:
            assert tuple(ys[j]) == ref[j][1], (j, ys[j], ref[j])


# ---------------------------------------------------------------------------------------------
# k-best
# ---------------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), K=st.integers(1, 4),
       k=st.integers(1, 14), integer=st.booleans(), f32=st.booleans(), n_pos=st.integers(0, 2))
def test_kbest_equals_enumeration(seed, n, K, k, integer, f32, n_pos):
    rng = np.random.default_rng(seed)
    c = random_chain(rng, n, K, np.float32 if f32 else np.float64, integer, n_pos)
    ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], k, **kernel_args(c))
    assert ys.dtype == np.int32 and scores.dtype == np.float64
    assert_matches_enumeration(ys, scores, enumerate_sorted(c), k, exact=integer,
                               tol=1e-4 if f32 else 1e-9)


def test_kbest_returns_every_sequence_when_k_exceeds_k_to_the_n():
    c = random_chain(np.random.default_rng(1), 3, 2)
    ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], 20)
    assert ys.shape == (8, 3)
    assert len({tuple(y) for y in ys}) == 8


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("integer", [False, True])
def test_rank0_is_sequence_viterbi(dtype, integer):
    """Rank 0 (path and score, bit for bit) = sequence._forward + _backtrack on the same arrays,
    including the tie rule (integer weights tie often)."""
    rng = np.random.default_rng(7)
    ties = 0
    for _ in range(300):
        n, K = int(rng.integers(1, 8)), int(rng.integers(1, 7))
        c = random_chain(rng, n, K, dtype, integer)
        em = c["em"].reshape(-1).copy()
        y = np.empty(n, np.int32)
        sq._forward(em, n, K, c["tr"].reshape(-1), c["start"], np.empty(2 * K, np.float64))
        best = sq._backtrack(em, n, K, np.ascontiguousarray(c["tr"].T).reshape(-1), c["end"], y)
        for k in (1, 3):  # k = 1 takes its own path through the kernel
            ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], k)
            assert np.array_equal(ys[0], y)
            assert scores[0] == float(best)
        ties += len(scores) > 1 and scores[1] == scores[0]
    assert not integer or ties > 20  # the tie rule was exercised


def test_rank0_equals_decode_kernel_on_tagger_arrays():
    """The wiring the tagger will use: emissions from sequence.emissions and (tr, start, end)
    from sequence.transitions of a float32 w, k-best per sentence via kbest_batch; rank 0 must
    be decode_kernel's output."""
    rng = np.random.default_rng(3)
    F, K, n_sent = 12, 5, 40
    lengths = rng.integers(0, 7, n_sent)
    sent_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_tok = int(sent_ptr[-1])
    per_tok = rng.integers(0, 4, n_tok)
    feat_ptr = np.concatenate([[0], np.cumsum(per_tok)]).astype(np.int64)
    feat_idx = rng.integers(0, F, int(feat_ptr[-1])).astype(np.int32)
    w = rng.integers(-3, 4, F * K + (K + 1) ** 2).astype(np.float32)  # ties on purpose
    chain = sq.Chain(sent_ptr, feat_ptr, feat_idx, np.zeros(0), np.zeros(0, np.int64),
                     np.zeros(0, np.int32), np.zeros(0))
    tags, ptr = records.decode_kernel(w.astype(np.float64), F, K, chain,
                                 np.arange(n_sent, dtype=np.int64))
    em = np.empty(n_tok * K, np.float32)
    for e in range(n_sent):
        a, b = sent_ptr[e], sent_ptr[e + 1]
        sq.emissions(w, K, feat_ptr, feat_idx, np.zeros(0, np.float32), a, b - a,
                      em[a * K:b * K])
    tr, _, start, end = sq.transitions(w, F, K)
    k = 4
    kt, ks, counts = cd.kbest_batch(em, sent_ptr, K, tr, start, end, *cd.no_constraints(), k)
    assert np.array_equal(counts, np.minimum(k, K ** lengths))
    for e in range(n_sent):
        a, n = int(sent_ptr[e]), int(lengths[e])
        block = kt[k * a:k * (a + n)].reshape(k, n)
        assert np.array_equal(block[0], tags[ptr[e]:ptr[e + 1]])
        assert np.all(block[counts[e]:] == -1) and np.all(ks[e * k + counts[e]:(e + 1) * k] == NEG)
        ys, sc = cd.kbest(em[a * K:(a + n) * K].reshape(n, K), tr.reshape(K, K), start, end, k)
        assert np.array_equal(block[:counts[e]], ys) and np.array_equal(ks[e * k:e * k + len(sc)],
                                                                         sc)


# ---------------------------------------------------------------------------------------------
# constraints
# ---------------------------------------------------------------------------------------------
@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), K=st.integers(1, 4),
       k=st.integers(1, 8), f32=st.booleans(), n_pos=st.integers(0, 2))
def test_forced_labels(seed, n, K, k, f32, n_pos):
    """Every returned sequence keeps the forced tags, and the list is the k best of those that
    do (integer weights: exact order with ties)."""
    rng = np.random.default_rng(seed)
    c = random_chain(rng, n, K, np.float32 if f32 else np.float64, True, n_pos)
    fixed = np.where(rng.random(n) < 0.5, rng.integers(0, K, n), -1).astype(np.int32)
    ref = enumerate_sorted(c, mask_admissible(fixed=fixed))
    for kk in (1, k):  # k = 1 has its own code path
        ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], kk, fixed=fixed,
                              **kernel_args(c))
        assert len(scores) >= 1  # forcing alone never makes decoding impossible
        assert np.all((ys == fixed) | (fixed < 0))
        assert_matches_enumeration(ys, scores, ref, kk, exact=True, tol=1e-5)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), K=st.integers(1, 4),
       k=st.integers(1, 8), n_pos=st.integers(0, 2), force=st.booleans())
def test_random_masks(seed, n, K, k, n_pos, force):
    """Random allowed / start / end masks (often leaving nothing admissible), with forced tags:
    k-best and max-marginals equal enumeration over the admissible sequences."""
    rng = np.random.default_rng(seed)
    c = random_chain(rng, n, K, np.float64, bool(seed % 2), n_pos)
    allowed = rng.random((K, K)) < 0.7
    first, last = rng.random(K) < 0.8, rng.random(K) < 0.8
    fixed = (np.where(rng.random(n) < 0.3, rng.integers(0, K, n), -1).astype(np.int32)
             if force else None)
    masks = dict(allowed=allowed, allowed_start=first, allowed_end=last, fixed=fixed)
    ref = enumerate_sorted(c, mask_admissible(allowed, first, last, fixed))
    for kk in (1, k):
        ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], kk, **masks,
                              **kernel_args(c))
        assert_matches_enumeration(ys, scores, ref, kk, exact=bool(seed % 2), tol=1e-9)
    M = max_marginals(c["em"], c["tr"], c["start"], c["end"], **masks, **kernel_args(c))
    np.testing.assert_allclose(M, brute_max_marginals(ref, n, K), rtol=1e-9, atol=1e-9)


LABELS = {
    "iob2": [["O", "B-X", "I-X", "B-Y"], ["B-X", "I-X", "B-Y", "I-Y"], ["O", "I-X", "B-X"]],
    "bioes": [["O", "B-X", "I-X", "E-X", "S-X"], ["B-X", "E-X", "S-Y", "O"],
              ["B-X", "I-X", "E-X", "S-X"]],
}


def scheme_valid(labels, scheme, y):
    """Well-formedness of a label sequence, by reading it left to right (not from the
    kernels' matrices): an open chunk (type) must be continued legally and closed."""
    open_type = None  # the type of the chunk that must continue (BIOES) or may continue (BIO)
    for v in y:
        tag, _, typ = labels[v].partition("-")
        if scheme == "iob2":
            if tag == "I" and open_type != typ:
                return False
            open_type = typ if tag in ("B", "I") else None
        else:
            if tag in ("I", "E"):
                if open_type != typ:
                    return False
            elif open_type is not None:
                return False
            open_type = typ if tag in ("B", "I") else None
    return scheme == "iob2" or open_type is None


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 4), scheme=st.sampled_from(["iob2",
       "bioes"]), which=st.integers(0, 2), k=st.integers(1, 10), f32=st.booleans(),
       n_pos=st.integers(0, 2))
def test_scheme_constraints(seed, n, scheme, which, k, f32, n_pos):
    """No decoded sequence (1-best and every k-best entry) breaks the scheme on random weights,
    and the constrained k best are the k best valid sequences; max-marginals likewise."""
    labels = LABELS[scheme][which]
    K = len(labels)
    rng = np.random.default_rng(seed)
    c = random_chain(rng, n, K, np.float32 if f32 else np.float64, False, n_pos)
    allowed, first, last = cd.scheme_transitions(labels, scheme)
    masks = dict(allowed=allowed, allowed_start=first, allowed_end=last)
    ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], k, **masks, **kernel_args(c))
    assert all(scheme_valid(labels, scheme, y) for y in ys)
    ref = enumerate_sorted(c, lambda y: scheme_valid(labels, scheme, y))
    assert_matches_enumeration(ys, scores, ref, k, exact=False, tol=1e-4 if f32 else 1e-9)
    y1, s1 = cd.kbest(c["em"], c["tr"], c["start"], c["end"], 1, **masks, **kernel_args(c))
    assert np.array_equal(y1, ys[:1]) and np.array_equal(s1, scores[:1])
    M = max_marginals(c["em"], c["tr"], c["start"], c["end"], **masks, **kernel_args(c))
    np.testing.assert_allclose(M, brute_max_marginals(ref, n, K), rtol=1e-4, atol=1e-4)


def test_scheme_transitions_tables():
    labels = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
    allowed, first, last = cd.scheme_transitions(labels, "BIO")
    # I-NP only after B-NP / I-NP, I-VP only after B-VP / I-VP; everything else free
    expect = np.ones((5, 5), bool)
    expect[:, 2] = [False, True, True, False, False]
    expect[:, 4] = [False, False, False, True, True]
    assert np.array_equal(allowed, expect)
    assert first.tolist() == [True, True, False, True, False] and last.all()
    b = ["O", "B-X", "I-X", "E-X", "S-X", "B-Y", "E-Y"]
    allowed, first, last = cd.scheme_transitions(b, "iobes")
    assert first.tolist() == [True, True, False, False, True, True, False]
    assert last.tolist() == [True, False, False, True, True, False, True]
    assert allowed[1].tolist() == [False, False, True, True, False, False, False]  # B-X → I|E-X
    assert allowed[3].tolist() == [True, True, False, False, True, True, False]  # E-X → B|S|O
    assert allowed[5].tolist() == [False] * 6 + [True]  # B-Y → E-Y only
    allowed, first, last = cd.scheme_transitions(labels, "iob1")
    assert allowed.all() and first.all() and last.all()
    with pytest.raises(OptionError, match="E-NP"):
        cd.scheme_transitions(["O", "E-NP"], "bio")
    with pytest.raises(OptionError, match="unknown label scheme"):
        cd.scheme_transitions(labels, "bilou")


def test_impossible_constraints():
    """Forcing I-X at the first token under BIO leaves nothing admissible: no sequence, all
    max-marginals −∞; the batch kernels report count 0 and margins −∞."""
    labels = ["O", "B-X", "I-X"]
    c = random_chain(np.random.default_rng(0), 3, 3)
    allowed, first, last = cd.scheme_transitions(labels, "iob2")
    masks = dict(allowed=allowed, allowed_start=first, allowed_end=last,
                 fixed=np.array([2, -1, -1], np.int32))
    ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], 3, **masks)
    assert ys.shape == (0, 3) and scores.shape == (0,)
    M = max_marginals(c["em"], c["tr"], c["start"], c["end"], **masks)
    assert np.all(M == NEG)
    pos_tr, pos_index = cd.no_constraints()[:2]
    args = (c["em"].reshape(-1), np.array([0, 3], np.int64), 3, c["tr"].reshape(-1), c["start"],
            c["end"], pos_tr, pos_index, masks["fixed"], allowed.reshape(-1), first, last)
    tags, sc, counts = cd.kbest_batch(*args, 2)
    assert counts.tolist() == [0] and np.all(tags == -1) and np.all(sc == NEG)
    margins, sent, _ = cf.confidence_batch(*args, tags[:3], False)
    assert np.all(margins == NEG) and sent[0] == NEG


def test_bad_arguments_raise():
    c = random_chain(np.random.default_rng(0), 3, 3)
    with pytest.raises(ValueError, match="fixed"):
        cd.kbest(c["em"], c["tr"], c["start"], c["end"], 2, fixed=np.array([0, 3, -1]))
    with pytest.raises(ValueError, match="pos_index"):
        cd.kbest(c["em"], c["tr"], c["start"], c["end"], 2, pos_tr=np.zeros((1, 9)),
                 pos_index=np.array([-1, 1, 0]))
    with pytest.raises(ValueError, match="k must be"):
        cd.kbest(c["em"], c["tr"], c["start"], c["end"], 0)


# ---------------------------------------------------------------------------------------------
# max-marginals and margins
# ---------------------------------------------------------------------------------------------
def brute_max_marginals(ref, n, K):
    M = np.full((n, K), NEG)
    for s, y in ref:
        for t, b in enumerate(y):
            M[t, b] = max(M[t, b], s)
    return M


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), K=st.integers(1, 4),
       f32=st.booleans(), n_pos=st.integers(0, 2))
def test_max_marginals_equal_brute_force(seed, n, K, f32, n_pos):
    rng = np.random.default_rng(seed)
    c = random_chain(rng, n, K, np.float32 if f32 else np.float64, False, n_pos)
    M = max_marginals(c["em"], c["tr"], c["start"], c["end"], **kernel_args(c))
    assert M.dtype == np.float64
    np.testing.assert_allclose(M, brute_max_marginals(enumerate_sorted(c), n, K), rtol=1e-12,
                               atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), K=st.integers(1, 4),
       n_pos=st.integers(0, 2), force=st.booleans())
def test_margins_zero_exactly_at_ties(seed, n, K, n_pos, force):
    """Integer weights (frequent ties): for the Viterbi path ŷ, each token margin is ≥ 0, and is
    0 exactly when a sequence with another tag at t ties the best; the sentence margin is
    best − second-best (0 on a tie, +∞ when only one sequence is admissible)."""
    rng = np.random.default_rng(seed)
    c = random_chain(rng, n, K, np.float64, True, n_pos)
    fixed = (np.where(rng.random(n) < 0.4, rng.integers(0, K, n), -1).astype(np.int32)
             if force else None)
    ys, scores = cd.kbest(c["em"], c["tr"], c["start"], c["end"], 2, fixed=fixed,
                          **kernel_args(c))
    M = max_marginals(c["em"], c["tr"], c["start"], c["end"], fixed=fixed, **kernel_args(c))
    tok, sent = cf.margins(M, ys[0])
    ref = enumerate_sorted(c, mask_admissible(fixed=fixed))
    best = ref[0][0]
    assert np.all(tok >= 0)
    for t in range(n):
        others = [s for s, y in ref if y[t] != ys[0][t]]
        tie = bool(others) and max(others) == best
        assert (tok[t] == 0) == tie
        assert tok[t] == (best - max(others) if others else np.inf)
    assert sent == (ref[0][0] - ref[1][0] if len(ref) > 1 else np.inf)
    assert sent == (scores[0] - scores[1] if len(scores) > 1 else np.inf)


def test_token_margins_of_a_non_viterbi_path_can_be_negative():
    c = random_chain(np.random.default_rng(5), 4, 3)
    ys, _ = cd.kbest(c["em"], c["tr"], c["start"], c["end"], 27)
    M = max_marginals(c["em"], c["tr"], c["start"], c["end"])
    tok, sent = cf.margins(M, ys[-1])  # the worst sequence; the best is unique (random floats)
    differs = ys[-1] != ys[0]
    assert differs.any() and sent < 0
    assert np.all(tok[differs] < 0) and np.all(tok[~differs] >= 0)


def test_confidence_batch_matches_per_sentence():
    rng = np.random.default_rng(11)
    K, lengths = 4, [3, 0, 5, 1, 4]
    sent_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_tok = int(sent_ptr[-1])
    em = rng.normal(size=n_tok * K).astype(np.float32)
    tr = rng.normal(size=K * K).astype(np.float32)
    start, end = rng.normal(size=K).astype(np.float32), rng.normal(size=K).astype(np.float32)
    pos_tr = rng.normal(size=(2, K * K))
    pos_index = rng.integers(-1, 2, n_tok).astype(np.int32)
    fixed = np.where(rng.random(n_tok) < 0.2, rng.integers(0, K, n_tok), -1).astype(np.int32)
    _, _, _, allowed, first, last = cd.no_constraints()
    args = (em, sent_ptr, K, tr, start, end, pos_tr, pos_index, fixed, allowed, first, last)
    tags, _, counts = cd.kbest_batch(*args, 1)
    assert counts.tolist() == [1] * 5
    margins, sent, table = cf.confidence_batch(*args, tags, True)
    _, _, empty = cf.confidence_batch(*args, tags, False)
    assert table.shape == (n_tok * K,) and empty.shape == (0,)
    for e, n in enumerate(lengths):
        a = int(sent_ptr[e])
        sl = slice(a, a + n)
        M = max_marginals(em[a * K:(a + n) * K].reshape(n, K), tr.reshape(K, K), start, end,
                             pos_tr=pos_tr, pos_index=pos_index[sl], fixed=fixed[sl])
        np.testing.assert_array_equal(table[a * K:(a + n) * K], M.reshape(-1))
        tok, s = cf.margins(M, tags[sl])
        np.testing.assert_array_equal(margins[sl], tok)
        assert sent[e] == s
        assert n > 0 or s == np.inf
        if n:
            assert np.all(tok >= -1e-5)  # float32 Viterbi path, float64 marginals

