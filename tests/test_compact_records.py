"""The active sets' compact φ pool (issues 43, 56): packed structures cost a fifth of the old
(index, value) storage and give the same updates, bit for bit."""

import numpy as np
import pytest
from toy_task import ToyTask

from demidcd.estimators.sequence import SequenceTagger
from demidcd.solvers import kernels as K
from demidcd.solvers.activeset import ActiveSets
from demidcd.synthetic import generate
from demidcd.tasks.chain.features import SequenceFeaturizer


def chain_task(n_sentences: int = 150, seed: int = 3):
    """A small tagging task over binary features, as the CLI trains (values ±1 and ±2...)."""
    c = generate(n_sentences=n_sentences, n_tags=6, vocab_size=120, seed=seed)
    est = SequenceTagger(min_count=1)
    est.classes_ = sorted({t for s in c.tags for t in s})
    est.featurizer_ = SequenceFeaturizer(1, 0).fit(c.tokens)
    return est.training_task(c.tokens, c.tags)


def pool_bytes(act: ActiveSets) -> int:
    """Bytes of the φ pool(s) holding live structures, whatever their layout: the old one kept
    an int32 index array and a float64 value array of the same length."""
    live = int(act.meta[K.M_PUSED] - act.meta[K.M_PGARB])
    shared = np.shares_memory(act.p_idx, act.p_val)
    return live * (act.p_idx.itemsize + (0 if shared else act.p_val.itemsize))


def train(task, coded: bool, epochs: int = 4, max_active: int = 50, loss: str = "l2"):
    """DCD-Light epochs (inference, admission, update per block) in a fixed order."""
    act = ActiveSets(task.n_examples, task.dim, 0.1, max_active=max_active, loss=loss)
    act.coded = coded
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        order = rng.permutation(task.n_examples).astype(np.int64)
        for s in range(0, task.n_examples, 32):
            chunk = order[s:s + 32]
            act.insert(task.loss_augmented(act.w, chunk), 0.01)
            act.update(chunk)
    act.compact()  # a compaction moves every structure: decoding must survive it
    act.update(np.arange(task.n_examples, dtype=np.int64))
    return act


def test_coded_pool_costs_under_8_bytes_per_entry():
    """A chain's φ is stored in under 8 bytes per entry here (Brown: 4.5; the old pool: 12,
    an int32 index and a float64 value), every structure decoding to the record it was
    admitted from."""
    task = chain_task()
    act = ActiveSets(task.n_examples, task.dim, 0.1)
    batch = task.loss_augmented(act.w, np.arange(task.n_examples, dtype=np.int64))
    assert act.insert(batch, -np.inf).admitted == len(batch) > 50
    entries = int(np.diff(batch.ptr).sum())
    assert not np.isin(batch.val, (1.0, -1.0)).all(), "some values must be neither +1 nor -1"
    assert pool_bytes(act) < 8 * entries
    for r in range(len(batch)):
        s = act.slots[batch.ex[r], 0]
        idx, val = act.phi(s)
        np.testing.assert_array_equal(idx, batch.idx[batch.ptr[r]:batch.ptr[r + 1]])
        np.testing.assert_array_equal(val, batch.val[batch.ptr[r]:batch.ptr[r + 1]])
        assert act.s_f[s, K.SQNORM] == float(val @ val)


@pytest.mark.parametrize("max_active,loss", [(50, "l2"), (3, "l2"), (3, "l1")])
def test_coded_and_valued_pools_give_the_same_updates_bit_for_bit(max_active, loss):
    """The same epochs with the coded and the valued (old) pool: the same w bit for bit, the
    same dual and saved state, also where full active sets aggregate structures (cap 3) and
    under the L1 loss's SMO (φ·φ of two stored structures)."""
    task = chain_task()
    a = train(task, True, max_active=max_active, loss=loss)
    b = train(task, False, max_active=max_active, loss=loss)
    assert (a.s_len[a.slots[a.slots >= 0]] >= 0).all()
    assert (b.s_len[b.slots[b.slots >= 0]] < 0).all()
    if max_active == 3:
        assert (a.s_hash[a.slots[a.slots >= 0]] == K.MERGED_HASH).any()
    np.testing.assert_array_equal(a.w, b.w)
    assert a.dual_objective() == b.dual_objective()
    sa, sb = a.state(), b.state()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
    np.testing.assert_allclose(a.rebuilt_w(), a.w, atol=1e-9)
    assert pool_bytes(a) < pool_bytes(b) / 2


def test_restore_of_a_saved_state_codes_it():
    """A state saved from coded active sets loads into new ones with the same w and φ."""
    task = chain_task(80)
    a = train(task, True, epochs=2)
    b = ActiveSets(task.n_examples, task.dim, 0.1)
    assert b.restore(a.state()) == a.size
    np.testing.assert_array_equal(b.w, a.rebuilt_w())
    sa, sb = a.state(), b.state()
    for key in ("phi_ptr", "phi_idx", "phi_val", "alpha", "hash"):
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


def test_real_valued_phi_is_stored_exactly():
    """φ with arbitrary values (the toy task's) round-trips through the coded pool."""
    task = ToyTask(seed=1)
    act = ActiveSets(task.n_examples, task.dim, 0.5, delta=0.0, max_active=64)
    allr = task.all_structures()
    act.insert(allr, admit=-np.inf)
    for r in range(len(allr)):
        i = allr.ex[r]
        s = next(s for s in act.slots[i, :act.count[i]] if act.s_hash[s] == allr.hash[r])
        idx, val = act.phi(s)
        np.testing.assert_array_equal(idx, allr.idx[allr.ptr[r]:allr.ptr[r + 1]])
        np.testing.assert_array_equal(val, allr.val[allr.ptr[r]:allr.ptr[r + 1]])


def test_packed_pool_costs_under_3_bytes_per_unit_entry():
    """A chain's ±1 entries take 16-bit gap keys (issue 56, defect 9: the pool was the run's
    largest memory at 83 tags): under 3 bytes an entry plus 8 per other value and the
    header, where one int32 key an entry took 4."""
    task = chain_task()
    act = ActiveSets(task.n_examples, task.dim, 0.1)
    batch = task.loss_augmented(act.w, np.arange(task.n_examples, dtype=np.int64))
    act.insert(batch, -np.inf)
    unit = int(np.isin(batch.val, (1.0, -1.0)).sum())
    other = len(batch.val) - unit
    assert unit > other > 0
    assert pool_bytes(act) < 3 * unit + 8 * other + 16 * len(batch)


@pytest.mark.parametrize("gaps", [[0, 1, 2], [16383, 16384, 1], [1 << 20, 5, (1 << 22) - 7]])
def test_long_gaps_and_values_round_trip_bitwise(gaps):
    """Gaps of one key and of three (≥ 2^14), the first index 0, values ±1 and others: the
    packed structure decodes to the record, and w·φ, w += dφ and a fold read it as the
    (index, value) pairs do, bit for bit."""
    idx = np.cumsum(np.array(gaps, np.int64)).astype(np.int32)
    val = np.array([1.0, -0.5, -1.0])
    dim = int(idx[-1]) + 1
    rng = np.random.default_rng(1)
    w = rng.normal(size=dim)
    words = int(K.words_bound(3)) + 2
    p_idx = np.zeros(words, np.int32)
    p_val = p_idx.view(np.float64)
    ln, sq, used = K.store_phi(idx, val, 0, 3, p_idx, p_val, 0, True, np.zeros(1, np.uint8),
                               False)
    assert ln == 3 and sq == float(val @ val) and used <= words
    assert K.phi_dot(w, p_idx, p_val, 0, ln) == K.sparse_dot(w, idx, val, 0, 3)
    got, want = w.copy(), w.copy()
    K.phi_axpy(got, 0.25, p_idx, p_val, 0, ln, K.PLAIN_MODE)
    K.axpy(want, 0.25, idx, val, 0, 3)
    np.testing.assert_array_equal(got, want)
    cur = K.entry_cursor(p_idx, 0, ln)
    for q in range(3):
        j, v, cur = K.phi_entry(p_idx, p_val, 0, ln, q, cur)
        assert (j, v) == (idx[q], val[q])
