"""Pruned Viterbi for many labels (pruned_viterbi.relax_pruned, issue 43) against the dense scan:
the tagger's decode and loss-augmented kernels and the constrained 1-best of chain.decoding,
forced to each path, must give the same labels and the same scores, bit for bit, on random
chains with B features, real values, forced labels and transition masks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.tasks.chain import decoding as cd
from demidcd.tasks.chain import kernels as sq
from demidcd.tasks.chain import pruned_viterbi as pv
from demidcd.tasks.chain import records
from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.task import SequenceTask

DENSE = 1 << 30  # prune_from no tag count reaches: the dense scan
PRUNED = 0  # prune_from every tag count reaches

LABELS = st.sampled_from([1, 2, 3, 50, 200])


def random_task(rng: np.random.Generator, K: int, n_sent: int, F: int, G: int, valued: bool):
    """A SequenceTask of n_sent sentences of 1..30 tokens, each token with 0..4 of F features
    and (G > 0) 0..2 of G B features (first tokens too), N(0, 1) values when ``valued``."""
    lengths = rng.integers(1, 31, n_sent)
    sent_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_tok = int(sent_ptr[-1])

    def csr(n_max, dim):
        per = rng.integers(0, n_max + 1, n_tok) if dim else np.zeros(n_tok, np.int64)
        ptr = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
        idx = np.concatenate([np.sort(rng.choice(dim, size=int(c), replace=False))
                              for c in per] or [np.zeros(0)]).astype(np.int32)
        val = rng.normal(size=idx.size) if valued else None
        return ptr, idx, val

    fp, fi, fv = csr(4, F)
    bp, bi, bv = csr(2, G) if G else (None, None, None)
    X = EncodedSequences(sent_ptr, fp, fi, fv, bp, bi, bv)
    return SequenceTask(X, rng.integers(0, K, n_tok).astype(np.int32), K, F, G)


def random_weights(rng: np.random.Generator, task: SequenceTask, trans_scale: float,
                   integer: bool, dtype) -> np.ndarray:
    """U weights N(0, 1), transitions and B weights N(0, trans_scale²) (scale ≪ 1: emissions
    dominate and pruning stops early; ≫ 1: it scans deep); integers in [−2, 2] tie often."""
    F, K = task.F, task.K
    if integer:
        return rng.integers(-2, 3, task.dim).astype(dtype)
    w = rng.normal(size=task.dim)
    w[F * K:] *= trans_scale
    return w.astype(dtype)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=LABELS, G=st.sampled_from([0, 0, 2]),
       valued=st.booleans(), f32=st.booleans(), integer=st.booleans(),
       trans_scale=st.sampled_from([0.05, 0.5, 3.0]))
def test_pruned_tagger_kernels_equal_dense(seed, K, G, valued, f32, integer, trans_scale):
    """decode_kernel and loss_augmented_kernel (augment 1, −1, 0) give the same tags and the
    same records pruned as dense; chain_viterbi the same path and score, sentence by
    sentence, ties included (integer weights)."""
    rng = np.random.default_rng(seed)
    task = random_task(rng, K, int(rng.integers(1, 4)), 20, G, valued)
    w = random_weights(rng, task, trans_scale, integer, np.float32 if f32 else np.float64)
    ex = np.arange(task.n_examples, dtype=np.int64)
    F, chain, gold = task.F, task.chain, task._gold_array()
    dense = records.decode_kernel(w, F, K, chain, ex, DENSE)
    pruned = records.decode_kernel(w, F, K, chain, ex, PRUNED)
    for a, b in zip(dense, pruned, strict=True):
        np.testing.assert_array_equal(a, b)
    for augment in (1.0, -1.0, 0.0):
        rd = records.loss_augmented_kernel(w, F, K, task.G, chain, gold, ex, augment, DENSE)
        rp = records.loss_augmented_kernel(w, F, K, task.G, chain, gold, ex, augment, PRUNED)
        for a, b in zip(rd, rp, strict=True):
            np.testing.assert_array_equal(a, b)
    tr, trT, start, end = sq.transitions(w, F, K)
    tmax, order = sq.pruning(tr, K, PRUNED)
    assert tmax.shape == (K,) and order.shape == (2 * K,)
    for i in ex:
        a0, n = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1] - task.sent_ptr[i])
        out = []
        for tm, od in ((tr[:0], order[:0]), (tmax, order)):
            _, em, scratch, y, trb, slots = records._workspace(w, K, chain, ex[i:i + 1])
            s = sq.chain_viterbi(w, F, K, chain, a0, n, tr, trT, start, end, em, scratch, trb,
                                  slots, y, gold, 1.0, tm, od)
            out.append((y[:n].copy(), s))
        np.testing.assert_array_equal(out[0][0], out[1][0])
        assert out[0][1] == out[1][1]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=LABELS, n_pos=st.integers(0, 2), f32=st.booleans(),
       integer=st.booleans(), force=st.floats(0.0, 0.6), masks=st.booleans(),
       trans_scale=st.sampled_from([0.05, 0.5, 3.0]))
def test_pruned_constrained_one_best_equals_dense(seed, K, n_pos, f32, integer, force, masks,
                                                   trans_scale):
    """kbest_batch with k = 1 (constrained decoding): forced labels, random allowed / start /
    end masks (sometimes leaving nothing admissible), per-position matrices: the same tags,
    scores and counts pruned as dense."""
    rng = np.random.default_rng(seed)
    dt = np.float32 if f32 else np.float64
    lengths = rng.integers(1, 31, int(rng.integers(1, 4)))
    sent_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_tok = int(sent_ptr[-1])

    def draw(*shape, scale=1.0):
        if integer:
            return rng.integers(-2, 3, shape).astype(dt)
        return (scale * rng.normal(size=shape)).astype(dt)

    em = draw(n_tok * K)
    tr, start, end = draw(K * K, scale=trans_scale), draw(K), draw(K)
    pos_tr, pos_index, fixed, allowed, first, last = cd.no_constraints()
    if n_pos:
        pos_tr = draw(n_pos, K * K, scale=trans_scale).astype(np.float64)
        pos_index = rng.integers(-1, n_pos, n_tok).astype(np.int32)
    if force:
        fixed = np.where(rng.random(n_tok) < force, rng.integers(0, K, n_tok), -1).astype(
            np.int32)
    if masks:
        allowed = rng.random(K * K) < 0.8
        first, last = rng.random(K) < 0.9, rng.random(K) < 0.9
    args = (em, sent_ptr, K, tr, start, end, pos_tr, pos_index, fixed, allowed, first, last, 1)
    dense = cd.kbest_batch(*args, DENSE)
    pruned = cd.kbest_batch(*args, PRUNED)
    for a, b in zip(dense, pruned, strict=True):
        np.testing.assert_array_equal(a, b)


def test_pruning_follows_the_label_count():
    """pruning gives the pruned pass (tmax = column maxima) from prune_from tags on, the
    dense one (empty arrays) below; loss-augmented inference prunes from no fewer tags than
    decoding (the measured crossovers)."""
    rng = np.random.default_rng(0)
    for K in (1, 5, 70):
        tr = rng.normal(size=K * K)
        tmax, order = sq.pruning(tr, K, K)
        np.testing.assert_array_equal(tmax, tr.reshape(K, K).max(axis=0))
        assert order.shape == (2 * K,) and order.dtype == np.int32
        assert sq.pruning(tr, K, K + 1)[0].size == 0
    assert 1 < pv.PRUNE_FROM_LABELS <= pv.PRUNE_FROM_LABELS_AUGMENTED <= 453


def test_pruned_pass_stops_early_when_emissions_dominate():
    """The pruned relaxation visits few predecessors when emissions dominate (what makes it
    pay), and still returns the dense max: on one position with K = 300, emission gaps of ~1
    and transitions within ±0.01, the sorted prefix it pops stays short."""
    rng = np.random.default_rng(5)
    K = 300
    prow = rng.normal(size=K) * 3
    tr = rng.uniform(-0.01, 0.01, K * K)
    tmax = tr.reshape(K, K).max(axis=0).copy()
    crow = rng.normal(size=K)
    expect = crow + (prow[:, None] + tr.reshape(K, K)).max(axis=0)
    hv, sv, acc = np.empty(K), np.full(K, np.nan), np.empty(2 * K)
    hi, si = np.empty(K, np.int32), np.full(K, -1, np.int32)
    pv.relax_pruned(prow, crow, K, tr, tmax, hv, hi, sv, si, acc)
    np.testing.assert_array_equal(crow, expect)
    popped = int(np.sum(si >= 0))
    assert 1 <= popped <= 10
    np.testing.assert_array_equal(sv[:popped], np.sort(prow)[::-1][:popped])


def test_pruned_pass_falls_back_when_rounding_defeats_the_threshold():
    """A case (found by search) where θ + tmax[b] rounds above column b's best after every
    candidate prow[a] ≥ θ: the column scans the other predecessors too, and the result is the
    dense max."""
    prow = np.array([-0.7262318167458824, -0.00030391822599613963])
    tr = np.array([[0.02016086802513504, -0.0026947995836466756],
                   [-0.0017985065122480485, 0.010686011185663334]])
    m1, r1, tmax = prow.max(), tr[prow.argmax()], tr.max(axis=0)
    theta = min(m1, float(np.min(m1 + r1 - tmax)))
    cand = prow >= theta
    best_c = (prow[cand, None] + tr[cand]).max(axis=0)
    assert not cand.all() and theta + tmax[0] > best_c[0]  # the fallback branch runs
    crow = np.zeros(2)
    pv.relax_pruned(prow, crow, 2, tr.reshape(-1), tmax.copy(), np.empty(2), np.empty(2, np.int32),
                     np.empty(2), np.empty(2, np.int32), np.empty(4))
    np.testing.assert_array_equal(crow, (prow[:, None] + tr).max(axis=0))
