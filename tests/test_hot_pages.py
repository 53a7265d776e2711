"""The hot mode's private pages of the shared w (demidcd.solvers.hot_pages): private until
merged, every change merged once (w = the serial sum after K processes' random adds), the pages
chosen by how many records touch them."""

import multiprocess as mp
import numpy as np

from demidcd.primitives.records import RecordBatch
from demidcd.primitives.shm import SharedArena
from demidcd.solvers.hot_pages import PAGE_ENTRIES, PrivatePages, hot_pages
from demidcd.solvers.phi_pool import atomic_axpy

CTX = mp.get_context("fork")


def _writer(w, name, pages, idx, val, every):
    pp = PrivatePages(w, name, pages)
    pp.privatize()
    for s in range(0, idx.shape[0], every):
        atomic_axpy(w, 1.0, idx, val, s, min(s + every, idx.shape[0]))
        pp.merge()
    pp.share()
    pp.close()


def test_pages_are_private_until_merged(shm_guard):
    arena = SharedArena()
    try:
        w = arena.create("w", (4 * PAGE_ENTRIES,), np.float64)
        pp = PrivatePages(w, arena.segment_name("w"), np.array([1, 2]))
        pp.privatize()
        shared = pp.shared
        w[PAGE_ENTRIES + 3] += 2.0  # a private page
        w[5] += 1.0  # a shared one
        assert shared[5] == 1.0 and shared[PAGE_ENTRIES + 3] == 0.0
        shared[2 * PAGE_ENTRIES] = 7.0  # another learner's merged change
        assert w[2 * PAGE_ENTRIES] == 0.0
        pp.merge()
        assert shared[PAGE_ENTRIES + 3] == 2.0 and w[2 * PAGE_ENTRIES] == 7.0
        w[PAGE_ENTRIES + 3] += 1.0
        pp.share()  # merged, and one array again
        assert shared[PAGE_ENTRIES + 3] == 3.0
        w[PAGE_ENTRIES] = 4.0
        assert shared[PAGE_ENTRIES] == 4.0
        pp.close()
    finally:
        arena.close()


def test_k_processes_merged_adds_equal_the_serial_sum(shm_guard):
    rng = np.random.default_rng(3)
    dim, k, n = 6 * PAGE_ENTRIES + 100, 3, 40_000
    pages = np.array([0, 1, 4])
    parts = []
    for _ in range(k):  # most adds on the hot pages, as φ's transitions and bias
        hot = rng.integers(0, PAGE_ENTRIES, n) + rng.choice(pages, n) * PAGE_ENTRIES
        cold = rng.integers(0, dim, n)
        idx = np.where(rng.random(n) < 0.7, hot, cold).astype(np.int64)
        parts.append((idx, rng.normal(size=n)))
    serial = np.zeros(dim)
    for idx, val in parts:
        np.add.at(serial, idx, val)
    arena = SharedArena()
    try:
        w = arena.create("w", (dim,), np.float64)
        atomic_axpy(np.zeros(1), 1.0, np.zeros(1, np.int64), np.zeros(1), 0, 1)  # compiled
        procs = [CTX.Process(target=_writer, args=(w, arena.segment_name("w"), pages, idx, val,
                                                   1)) for idx, val in parts]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert np.abs(w - serial).max() <= 1e-9 * np.abs(serial).max()
    finally:
        arena.close()


def test_hot_pages_are_those_most_records_touch():
    e = PAGE_ENTRIES
    # four records: page 0 in all, page 3 in three, page 7 in one
    idx = np.array([1, 3 * e, 0, 3 * e + 5, 7 * e, 2, 3 * e + 1, 4], np.int32)
    ptr = np.array([0, 2, 5, 7, 8], np.int64)
    b = RecordBatch(np.arange(4), np.zeros(4, np.int64), np.ones(4), np.zeros(4), ptr, idx,
                    np.ones(8))
    assert hot_pages([b], 8 * e, share=0.5).tolist() == [0, 3]
    assert hot_pages([b], 8 * e, share=0.2).tolist() == [0, 3, 7]
    assert hot_pages([b], 8 * e, share=0.2, max_pages=1).tolist() == [0]
