"""The φ pool's packed keys (issue 56 defect 9: a prefix varint of 1-5 bytes, read five bytes
at once): every gap length round-trips, the kernels' dot and update match the plain sparse
ones bit for bit, and a key takes the bytes its gap's class says."""

import numpy as np
import pytest

from demidcd.solvers import kernels as K
from demidcd.solvers.activeset import ActiveSets

BOUNDS = [1, 31, 32, 4095, 4096, (1 << 19) - 1, 1 << 19, (1 << 26) - 1, 1 << 26]
BYTES = [1, 1, 2, 2, 3, 3, 4, 4, 5]


@pytest.mark.parametrize("gap,nbytes", list(zip(BOUNDS, BYTES, strict=True)))
def test_a_keys_length_follows_its_gap(gap, nbytes):
    assert K.entry_keys(np.int64(100 + gap), np.int64(100)) == nbytes


def test_every_gap_class_round_trips_and_the_kernels_match_the_plain_ones():
    rng = np.random.default_rng(3)
    gaps = np.array(BOUNDS * 3 + list(rng.integers(1, 1 << 12, 200)), np.int64)
    rng.shuffle(gaps)
    idx = np.cumsum(gaps)
    idx = idx[idx < K.CODED_MAX_DIM]
    val = rng.choice([1.0, -1.0, 2.0, -0.5, 3.0], size=idx.size, p=[0.4, 0.4, 0.1, 0.05, 0.05])
    dim = int(idx[-1]) + 1
    # the structure stored last, its pool exactly words_bound long: the five-byte reads stay
    # inside the array
    pool = np.zeros(int(K.words_bound(idx.size)) + 8, np.int32)
    act = ActiveSets(1, dim, 1.0)
    act.p_idx, act.p_val = pool, pool.view(np.float64)
    ln, sq, words = K.store_phi(idx, val, 0, idx.size, act.p_idx, act.p_val, 8, True,
                                np.zeros(1, np.uint8), False)
    assert ln == idx.size and 8 + words + 2 <= pool.size
    assert int(pool[9]) == sum(K.entry_keys(np.int64(j), np.int64(i))
                               for i, j in zip(np.r_[0, idx[:-1]], idx, strict=True))
    act.s_ptr[0], act.s_len[0] = 8, ln
    got_idx, got_val = act.phi(0)
    np.testing.assert_array_equal(got_idx, idx)
    np.testing.assert_array_equal(got_val.view(np.int64), val.view(np.int64))
    # w is read and written at idx only: random there, zero pages elsewhere (a dense draw of
    # the ~2^27 entries the long gaps span took a minute and gigabytes)
    w = np.zeros(dim)
    w[idx] = np.random.default_rng(4).standard_normal(idx.size)
    assert K.phi_dot(w, act.p_idx, act.p_val, 8, ln) == K.sparse_dot(w, idx, val, 0, idx.size)
    a, b = np.zeros(dim), np.zeros(dim)
    a[idx] = b[idx] = w[idx]
    K.phi_axpy(a, 0.37, act.p_idx, act.p_val, 8, ln, K.PLAIN_MODE)
    K.axpy(b, 0.37, idx, val, 0, idx.size)
    assert (a.view(np.int64) == b.view(np.int64)).all()  # bit for bit (a 2^27-entry w)
    cur = K.entry_cursor(act.p_idx, 8, ln)
    for q in range(ln):
        j, v, cur = K.phi_entry(act.p_idx, act.p_val, 8, ln, q, cur)
        assert j == idx[q] and v == val[q]
