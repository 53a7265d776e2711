"""Seqlock-protected shared weights: unit behaviour, deferral for starving readers, and a
writer process vs reader process test that must never observe a torn vector."""

from __future__ import annotations

import time

import multiprocess as mp
import numpy as np
import pytest

from demidcd.parallel.seqlock import SEQ, WANT, SharedWeights, warmup
from demidcd.parallel.shm import SharedArena

CTX = mp.get_context("fork")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warmup()


@pytest.fixture
def arena():
    a = SharedArena(prefix="demidcdtest")
    yield a
    a.close()


def test_publish_read_version(arena):
    sw = SharedWeights.allocate(arena, 1000)
    assert sw.version() == 0
    w = np.arange(1000.0)
    loc = np.full(1000, -1.0)
    assert sw.read_into(loc) == 0 and not loc.any()
    assert sw.publish(w)
    assert sw.version() == 1 and sw.hdr[SEQ] == 2
    assert sw.read_into(loc) == 1
    np.testing.assert_array_equal(loc, w)
    w2 = w.copy()
    w2[[3, 500, 999]] = [-1.0, -2.0, -3.0]
    w2[10] = 77.0  # changed but not listed: must NOT be published by publish_sparse
    assert sw.publish_sparse(w2, np.array([3, 500, 999], np.int32))
    assert sw.read_into(loc) == 2
    expect = w.copy()
    expect[[3, 500, 999]] = [-1.0, -2.0, -3.0]
    np.testing.assert_array_equal(loc, expect)
    other = SharedWeights.attach(sw.spec())
    loc2 = np.zeros(1000)
    assert other.read_into(loc2) == 2
    np.testing.assert_array_equal(loc2, expect)
    with pytest.raises(ValueError):
        sw.publish(np.zeros(999))
    with pytest.raises(ValueError):
        sw.read_into(np.zeros(1000, np.float32))


def test_in_place_read_validation(arena):
    sw = SharedWeights.allocate(arena, 10)
    s = sw.read_begin()
    assert sw.read_valid(s)
    sw.publish(np.ones(10))
    assert not sw.read_valid(s)


def test_reader_times_out_on_stalled_writer(arena):
    sw = SharedWeights.allocate(arena, 10)
    sw.hdr[SEQ] = 3  # a writer died mid-publish
    with pytest.raises(TimeoutError):
        sw.read_into(np.zeros(10), timeout=0.05)
    assert sw.hdr[WANT] == 0  # the reader withdrew its request


def test_writer_defers_for_a_starving_reader_then_catches_up(arena):
    sw = SharedWeights.allocate(arena, 100, max_defer=0.2)
    w = np.zeros(100)
    loc = np.zeros(100)
    sw.hdr[WANT] = 1  # a reader asks for a pause
    w[5] = 1.0
    assert not sw.publish_sparse(w, np.array([5]))
    w[7] = 2.0
    assert not sw.publish_sparse(w, np.array([7]))
    assert sw.has_pending and sw.version() == 0
    sw.read_into(loc)
    assert not loc.any()
    sw.hdr[WANT] = 0  # reader done: the next publish carries the deferred entries
    w[9] = 3.0
    assert sw.publish_sparse(w, np.array([9]))
    assert sw.version() == 1 and not sw.has_pending
    sw.read_into(loc)
    np.testing.assert_array_equal(loc, w)
    # deferral is bounded by max_defer even if the flag is never cleared
    sw.hdr[WANT] = 1
    w[1] = 4.0
    assert not sw.publish_sparse(w, np.array([1]))
    time.sleep(0.25)
    w[2] = 5.0
    assert sw.publish_sparse(w, np.array([2]))
    sw.hdr[WANT] = 0
    sw.read_into(loc)
    np.testing.assert_array_equal(loc, w)
    # full publish deferred, then flush writes everything
    sw.hdr[WANT] = 1
    w[:] = 6.0
    assert not sw.publish(w)
    sw.flush(w)
    sw.hdr[WANT] = 0
    sw.read_into(loc)
    np.testing.assert_array_equal(loc, w)


# ---------------------------------------------------------------------------------------------
# writer process vs reader process

def _writer_full(spec, flags_spec, n_pub):
    sw = SharedWeights.attach(spec)
    flags = SharedArena.attach(flags_spec)["flags"]
    w = np.empty(sw.dim)
    k = 0
    deferred = 0
    while k < n_pub and flags[1] == 0:
        k += 1
        w[:] = float(k)  # every entry equals the version it is published as
        while not sw.publish(w):
            deferred += 1
            w[:] = float(k)
    flags[2] = deferred
    flags[0] = 1


def _writer_sparse(spec, flags_spec, n_pub):
    sw = SharedWeights.attach(spec)
    flags = SharedArena.attach(flags_spec)["flags"]
    d = sw.dim
    w = np.zeros(d)
    rng = np.random.default_rng(0)
    for k in range(1, n_pub + 1):
        if flags[1]:
            break
        idx = np.unique(rng.integers(0, d - 1, 2000))
        w[idx] = float(k)
        w[d - 1] = w[: d - 1].sum()  # exact: integer-valued, < 2**53
        sw.publish_sparse(w, np.append(idx, d - 1))
    sw.flush(w)
    flags[0] = 1


def _reader(spec, flags_spec, mode, res_spec):
    sw = SharedWeights.attach(spec)
    flags = SharedArena.attach(flags_spec)["flags"]
    res = SharedArena.attach(res_spec)["res"]
    loc = np.empty(sw.dim)
    raw = np.empty(sw.dim)
    reads = torn_raw = bad = 0
    last = -1
    versions = set()
    t_end = time.monotonic() + 20
    while flags[0] == 0 and time.monotonic() < t_end:
        v = sw.read_into(loc, timeout=5)
        reads += 1
        versions.add(v)
        if v < last:
            bad += 1
        last = v
        if mode == "full":
            ok = loc.min() == loc.max() == float(v)
            raw[:] = sw.w  # unprotected copy, for comparison only
            torn_raw += raw.min() != raw.max()
        else:
            ok = loc[-1] == loc[:-1].sum()
        bad += not ok
    res[:4] = reads, bad, len(versions), torn_raw
    flags[1] = 1


@pytest.mark.parametrize("mode,dim,n_pub", [("full", 200_000, 1500),
                                             ("sparse", 1_000_000, 4000)])
def test_reader_never_sees_torn_vector(arena, mode, dim, n_pub):
    sw = SharedWeights.allocate(arena, dim)
    flags = arena.create("flags", (4,), np.int64)
    arena.create("res", (4,), np.int64)
    spec = arena.spec()
    target = _writer_full if mode == "full" else _writer_sparse
    pw = CTX.Process(target=target, args=(sw.spec(), spec, n_pub))
    pr = CTX.Process(target=_reader, args=(sw.spec(), spec, mode, spec))
    pr.start()
    pw.start()
    pw.join(60)
    pr.join(60)
    for p in (pw, pr):
        if p.is_alive():
            p.kill()
            p.join()
    res = arena["res"]
    assert pw.exitcode == 0 and pr.exitcode == 0
    reads, bad, n_versions, torn_raw = (int(x) for x in res)
    print(f"\n{mode}: {reads} reads, {n_versions} versions seen, {bad} bad, "
          f"{torn_raw} torn unprotected copies, {int(flags[2])} deferred publishes")
    assert bad == 0
    assert reads >= 20 and n_versions >= 5  # reads really overlapped many publishes
    # the final state is consistent and complete
    loc = np.empty(dim)
    v = sw.read_into(loc)
    if mode == "full":
        assert loc.min() == loc.max() == v
    else:
        assert loc[-1] == loc[:-1].sum() and loc[-1] > 0
