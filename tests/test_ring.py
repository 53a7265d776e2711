"""SPSC RecordRing: brute-force round trips, wrap handling, errors, and a 10^6-record
producer-process → consumer-process stress test through a small (often full) ring."""

from __future__ import annotations

import os
import time

import multiprocess as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from demidcd.primitives.ring import CAP, HEAD, TAIL, RecordRing, record_words, warmup
from demidcd.primitives.shm import SharedArena, list_segments
from demidcd.tasks.base import RecordBatch

CTX = mp.get_context("fork")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warmup()
    _gen(0, 2, np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2), np.zeros(2),
         np.zeros(3, np.int64), np.zeros(100, np.int32), np.zeros(100))


@pytest.fixture
def arena():
    a = SharedArena(prefix="demidcdtest")
    yield a
    a.close()


def _batch(rng: np.random.Generator, n: int, max_nnz: int) -> RecordBatch:
    nnz = rng.integers(0, max_nnz + 1, n)
    ptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int64)
    idx = np.concatenate([np.sort(rng.choice(10_000, k, replace=False)) for k in nnz]
                         + [np.zeros(0)]).astype(np.int32)
    return RecordBatch(rng.integers(0, 1000, n), rng.integers(-(1 << 62), 1 << 62, n),
                       rng.standard_normal(n), rng.standard_normal(n), ptr, idx,
                       rng.standard_normal(int(ptr[-1])))


def _concat(bs: list[RecordBatch]) -> RecordBatch:
    ptrs = [np.zeros(1, np.int64)]
    off = 0
    for b in bs:
        ptrs.append(b.ptr[1:] + off)
        off += int(b.ptr[-1])
    return RecordBatch(*(np.concatenate([getattr(b, f) for b in bs] + [np.zeros(0, dt)])
                         for f, dt in (("ex", np.int64), ("hash", np.int64),
                                       ("delta", float), ("margin", float))),
                       np.concatenate(ptrs),
                       np.concatenate([b.idx for b in bs] + [np.zeros(0, np.int32)]),
                       np.concatenate([b.val for b in bs] + [np.zeros(0)]))


def _assert_same(a: RecordBatch, b: RecordBatch) -> None:
    assert len(a) == len(b)
    for f in ("ex", "hash", "ptr", "idx"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    for f in ("delta", "margin", "val"):  # bit-exact
        np.testing.assert_array_equal(getattr(a, f).view(np.int64),
                                      getattr(b, f).view(np.int64), err_msg=f)


def test_record_words():
    assert record_words(0) == 5
    assert record_words(1) == 7
    assert record_words(2) == 8
    assert record_words(3) == 10


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cap=st.integers(16, 300),
       pop_max=st.integers(1, 50), n=st.integers(0, 120))
def test_roundtrip_matches_brute_force(seed, cap, pop_max, n):
    """Interleaved pushes/pops through a tiny ring return exactly the pushed sequence."""
    rng = np.random.default_rng(seed)
    max_nnz = max(0, (cap - 5) * 2 // 3)  # every record fits in an empty ring
    b = _batch(rng, n, min(max_nnz, 40))
    payload = np.zeros(cap, np.int64)
    ctrl = np.zeros(32, np.int64)
    ctrl[CAP] = cap
    ring = RecordRing({"r": payload, "r_ctrl": ctrl}, "r")
    out = []
    k = 0
    stalls = 0
    while k < n:
        k2 = ring.push(b, k)
        assert k <= k2 <= n
        assert 0 <= ring.used_words() <= cap
        got = ring.pop(int(rng.integers(1, pop_max + 1)))
        assert len(got) <= pop_max
        out.append(got)
        stalls = stalls + 1 if (k2 == k and len(got) == 0) else 0
        assert stalls < 3, "no progress: ring deadlocked"
        k = k2
    out.append(ring.pop())
    assert ring.empty() and ring.occupancy() == 0.0
    assert len(ring.pop()) == 0
    _assert_same(_concat(out), b)


def test_wrap_marker_and_full_ring():
    cap = 40
    payload = np.zeros(cap, np.int64)
    ctrl = np.zeros(32, np.int64)
    ring = RecordRing({"r": payload, "r_ctrl": ctrl}, "r")
    rng = np.random.default_rng(1)
    b = _batch(rng, 1, 0)
    b20 = RecordBatch(np.array([7]), np.array([9]), np.array([1.5]), np.array([2.5]),
                      np.array([0, 20], np.int64), np.arange(20, dtype=np.int32),
                      np.arange(20.0))  # 5 + 10 + 20 = 35 words
    assert record_words(20) == 35
    assert ring.push(b) == 1  # 5 words, head = 5
    assert ring.push(b20) == 1  # 40 - 5 = 35 free and 35 before the end: fits exactly
    assert int(ctrl[HEAD]) == 40
    assert ring.occupancy() == 1.0
    assert ring.push(b) == 0  # full: returns 0 (nothing pushed), does not block
    _assert_same(ring.pop(), _concat([b, b20]))
    # now head = tail = 40 (pos 0); push 5, pop 5 -> pos 5; then 35 words fit exactly again
    ring.push(b)
    ring.pop()
    ring.push(b)  # pos 10
    ring.pop()
    # needs a wrap: the marker at 10 consumes 30 words, then 35 do not fit in the 10 free
    assert ring.push(b20) == 0
    assert int(ctrl[HEAD]) == 40 + 10 + 30 and payload[10] == -1
    assert len(ring.pop()) == 0  # consumer passes the marker
    assert int(ctrl[TAIL]) == 80
    assert ring.push(b20) == 1  # now at position 0
    assert int(ctrl[HEAD]) == 80 + 35
    got = ring.pop()
    _assert_same(got, b20)
    assert int(ctrl[TAIL]) == int(ctrl[HEAD])


def test_oversize_record_raises_after_pushing_earlier_ones():
    ring = RecordRing({"r": np.zeros(32, np.int64), "r_ctrl": np.zeros(32, np.int64)}, "r")
    small = RecordBatch(np.array([0, 1]), np.array([0, 1]), np.zeros(2), np.zeros(2),
                        np.array([0, 1, 31], np.int64), np.arange(31, dtype=np.int32),
                        np.zeros(31))
    with pytest.raises(ValueError, match="larger than ring"):
        ring.push(small)
    got = ring.pop()
    assert len(got) == 1 and got.ex[0] == 0


def test_corrupt_header_detected():
    payload = np.zeros(64, np.int64)
    ctrl = np.zeros(32, np.int64)
    ring = RecordRing({"r": payload, "r_ctrl": ctrl}, "r")
    ctrl[HEAD] = 10
    payload[0] = 1000  # a record claiming to be larger than what was published
    with pytest.raises(RuntimeError, match="corrupt"):
        ring.pop()


def test_allocate_attach_spec(arena):
    ring = RecordRing.allocate(arena, "ring1", 1000)
    assert ring.capacity == 1000 and ring.occupancy() == 0.0
    other = RecordRing.attach(ring.spec())
    b = _batch(np.random.default_rng(3), 10, 5)
    assert ring.push(b) == 10
    assert other.occupancy() > 0
    _assert_same(other.pop(), b)
    assert ring.empty()
    with pytest.raises(ValueError):
        RecordRing.allocate(arena, "tiny", 8)


# ---------------------------------------------------------------------------------------------
# stress: 10^6 deterministic records, producer process -> consumer process

@njit(cache=True)
def _mix(x):
    x = (x ^ (x >> 31)) * 0x5DEECE66D
    x = (x ^ (x >> 29)) * 0x3C6EF372F
    return x ^ (x >> 32)


@njit(cache=True)
def _gen(r0, n, ex, hs, delta, margin, ptr, idx, val):
    """Records r0..r0+n-1: nnz = mix(r) % 51, content a function of r."""
    q = 0
    ptr[0] = 0
    for k in range(n):
        r = r0 + k
        m = _mix(r)
        nnz = (m & 0xFFFF) % 51
        ex[k] = r
        hs[k] = m
        delta[k] = r * 0.25
        margin[k] = -r * 0.5 + 1.0 / 3.0
        base = (m >> 20) & 0xFFFF
        for j in range(nnz):
            idx[q + j] = base + 3 * j
            val[q + j] = r + j / 64.0
        q += nnz
        ptr[k + 1] = q
    return q


@njit(cache=True)
def _verify(r0, ex, hs, delta, margin, ptr, idx, val):
    """Return the number of leading records equal to the expected r0, r0+1, ...; −1-k on the
    first mismatch at k."""
    for k in range(ex.shape[0]):
        r = r0 + k
        m = _mix(r)
        nnz = (m & 0xFFFF) % 51
        if ex[k] != r or hs[k] != m or delta[k] != r * 0.25 or \
                margin[k] != -r * 0.5 + 1.0 / 3.0 or ptr[k + 1] - ptr[k] != nnz:
            return -1 - k
        base = (m >> 20) & 0xFFFF
        p = ptr[k]
        for j in range(nnz):
            if idx[p + j] != base + 3 * j or val[p + j] != r + j / 64.0:
                return -1 - k
    return ex.shape[0]


def _producer(spec, n_total, batch, res_spec):
    ring = RecordRing.attach(spec)
    res = SharedArena.attach(res_spec)["res"]
    ex = np.empty(batch, np.int64)
    hs = np.empty(batch, np.int64)
    de = np.empty(batch)
    ma = np.empty(batch)
    ptr = np.empty(batch + 1, np.int64)
    idx = np.empty(batch * 50, np.int32)
    val = np.empty(batch * 50)
    full = 0
    r0 = 0
    deadline = time.monotonic() + 60
    while r0 < n_total:
        n = min(batch, n_total - r0)
        q = _gen(r0, n, ex, hs, de, ma, ptr, idx, val)
        b = RecordBatch(ex[:n], hs[:n], de[:n], ma[:n], ptr[:n + 1], idx[:q], val[:q])
        k = 0
        while k < n:
            k = ring.push(b, k)
            if k < n:
                full += 1
                os.sched_yield()
                if time.monotonic() > deadline:
                    raise TimeoutError("producer stuck")
        r0 += n
    res[0] = full


def _consumer(spec, n_total, res_spec):
    ring = RecordRing.attach(spec)
    res = SharedArena.attach(res_spec)["res"]
    got = 0
    pops = 0
    deadline = time.monotonic() + 60
    while got < n_total:
        b = ring.pop()
        if len(b) == 0:
            os.sched_yield()
            if time.monotonic() > deadline:
                raise TimeoutError("consumer stuck")
            continue
        pops += 1
        v = _verify(got, b.ex, b.hash, b.delta, b.margin, b.ptr, b.idx, b.val)
        if v != len(b):
            res[2] = got + (-1 - v)  # first bad record
            raise AssertionError(f"record {got + (-1 - v)} corrupt or out of order")
        got += len(b)
    time.sleep(0.05)
    extra = ring.pop()  # nothing duplicated after the last record
    res[1] = got + len(extra)
    res[3] = pops


def test_stress_million_records_two_processes(arena):
    n_total = 1_000_000
    _verify(0, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0),
            np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0))
    ring = RecordRing.allocate(arena, "stress", 8192)  # ~190 average records: full often
    res = arena.create("res", (4,), np.int64)
    res[2] = -1
    rs = arena.spec()
    pc = CTX.Process(target=_consumer, args=(ring.spec(), n_total, rs))
    pp = CTX.Process(target=_producer, args=(ring.spec(), n_total, 2000, rs))
    t0 = time.monotonic()
    pc.start()
    pp.start()
    pp.join(90)
    pc.join(90)
    dt = time.monotonic() - t0
    for p in (pp, pc):
        if p.is_alive():
            p.kill()
            p.join()
    assert pp.exitcode == 0, f"producer failed ({pp.exitcode})"
    assert pc.exitcode == 0, f"consumer failed ({pc.exitcode}); first bad record {res[2]}"
    assert res[1] == n_total  # no loss, no duplicates
    assert res[0] > 100, "the ring was never full: the test does not exercise back-pressure"
    assert ring.empty()
    print(f"\n10^6 records in {dt:.1f}s, producer saw a full ring {res[0]} times, "
          f"{res[3]} pops")
    assert list_segments("demidcdtest", os.getpid())  # arena still alive until fixture close


def test_rings_shrink_to_fit_a_small_dev_shm() -> None:
    """A container's 64 MiB /dev/shm: 15 rings of the default 32 MiB cannot fit, so each is
    halved until all fit beside the other segments; never below MIN_RING_WORDS, never above
    the asked size, unchanged when the space is unknown or ample."""
    from demidcd.primitives.ring import MIN_RING_WORDS, RING_WORDS, RecordRing, fit_ring_words

    mib = 2**20
    assert fit_ring_words(RING_WORDS, 15, 3 * mib, None) == RING_WORDS
    assert fit_ring_words(RING_WORDS, 15, 3 * mib, 10**12) == RING_WORDS
    words = fit_ring_words(RING_WORDS, 15, 3 * mib, 64 * mib)
    assert MIN_RING_WORDS <= words < RING_WORDS
    assert 3 * mib + 15 * RecordRing.footprint(words) <= 64 * mib
    assert 3 * mib + 15 * RecordRing.footprint(2 * words) > 64 * mib  # the largest that fits
    assert fit_ring_words(RING_WORDS, 15, 3 * mib, 1 * mib) == MIN_RING_WORDS
    assert fit_ring_words(1 << 10, 15, 3 * mib, 1 * mib) == 1 << 10
