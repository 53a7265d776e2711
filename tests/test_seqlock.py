"""Double-buffered shared weights: unit behaviour, deferral for starving readers, and a
writer process vs reader process test that must never observe a torn vector."""

from __future__ import annotations

import time

import multiprocess as mp
import numpy as np
import pytest

from demidcd.primitives.seqlock import (
    BEGUN,
    DONE,
    LINE_SHIFT,
    WANT,
    SharedWeights,
    mark_array,
    warmup,
)
from demidcd.primitives.shm import SharedArena

CTX = mp.get_context("fork")


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warmup()


@pytest.fixture
def arena():
    a = SharedArena(prefix="demidcdtest")
    yield a
    a.close()


def marks_for(dim: int, idx) -> np.ndarray:
    """The learner's change marks for entries ``idx`` of w[:dim]."""
    m = mark_array(dim)
    m[np.asarray(idx, np.int64) >> LINE_SHIFT] = 1
    return m


def test_publish_read_version(arena):
    sw = SharedWeights.allocate(arena, 1000)
    assert sw.version() == 0
    w = np.arange(1000.0)
    loc = np.full(1000, -1.0)
    assert sw.read_into(loc) == 0 and not loc.any()
    assert sw.publish(w)
    assert sw.version() == 1 and sw.hdr[DONE] == sw.hdr[BEGUN] == 1
    assert sw.read_into(loc) == 1
    np.testing.assert_array_equal(loc, w)
    other = SharedWeights.attach(sw.spec())
    loc2 = np.zeros(1000)
    assert other.read_into(loc2) == 1
    np.testing.assert_array_equal(loc2, w)
    # line publishes (a fresh w̄): w[:990] is zero off the marked lines, as the learner's w is
    # off the lines its admitted φ touch, so copying those lines and the tail (A) is exact
    sl = SharedWeights.allocate(arena, 1000, key="lines")
    w = np.zeros(1000)
    w[500] = -2.0
    lines = marks_for(990, [3, 500])
    for v in (1, 2, 3):  # both buffers, then the first again
        w[3], w[995:] = -v, v
        assert sl.publish_lines(w, lines, tail=990) and sl.version() == v
        assert sl.read_into(loc) == v
        np.testing.assert_array_equal(loc, w)
    assert lines.any()  # the marks are kept
    w2 = w.copy()
    w2[10] = 77.0  # off the marked lines (breaks the contract): not published
    assert sl.publish_lines(w2, lines, tail=990)
    sl.read_into(loc)
    assert loc[10] == 0.0 and loc[3] == w2[3]
    with pytest.raises(ValueError):
        sl.publish_lines(w, mark_array(100), tail=990)  # does not cover w[:990]
    with pytest.raises(ValueError):
        sw.publish(np.zeros(999))
    with pytest.raises(ValueError):
        sw.read_into(np.zeros(1000, np.float32))


def test_line_publishes_keep_both_buffers_exact(arena):
    """Each version is exact when w is zero off the marked lines, although each publish
    writes only the idle buffer (two versions old) and only the marked lines."""
    dim, tail = 4099, 4000
    sw = SharedWeights.allocate(arena, dim)
    rng = np.random.default_rng(1)
    w = np.zeros(dim)
    mark = marks_for(tail, [])
    loc = np.empty(dim)
    for k in range(1, 40):
        idx = rng.integers(0, tail, rng.integers(0, 60))
        w[idx] = k
        mark[idx >> LINE_SHIFT] = 1
        w[tail:] = -k
        if k % 7 == 0:
            assert sw.publish(w)  # whole publishes interleave with line publishes
        else:
            before = mark.copy()
            assert sw.publish_lines(w, mark, tail)
            np.testing.assert_array_equal(mark, before)  # the marks are kept
        assert sw.read_into(loc) == k
        np.testing.assert_array_equal(loc, w)


def test_float32_buffers_hold_w_rounded(arena):
    """A float32 w̄ (the sequence task's workers search with it) holds w rounded to float32,
    after whole and line publishes alike; read_into widens it back."""
    dim, tail = 1029, 1000
    sw = SharedWeights.allocate(arena, dim, dtype=np.float32)
    assert sw.buf.dtype == np.float32
    rng = np.random.default_rng(2)
    w = np.zeros(dim)
    mark = marks_for(tail, [])
    loc = np.empty(dim)
    for k in range(1, 6):
        idx = rng.integers(0, tail, 30)
        w[idx] = rng.normal(size=30) / 3.0
        mark[idx >> LINE_SHIFT] = 1
        w[tail:] = rng.normal(size=dim - tail)
        assert sw.publish_lines(w, mark, tail) if k % 2 else sw.publish(w)
        v = sw.read_begin()
        np.testing.assert_array_equal(sw.buffer(v), w.astype(np.float32))
        assert sw.read_into(loc) == k
        np.testing.assert_array_equal(loc, w.astype(np.float32).astype(np.float64))


def test_in_place_read_validation(arena):
    sw = SharedWeights.allocate(arena, 10)
    v = sw.read_begin()
    buf = sw.buffer(v)
    assert sw.read_valid(v)
    sw.publish(np.ones(10))  # writes the other buffer: the reader of v is unaffected
    assert sw.read_valid(v) and not buf.any()
    sw.publish(np.full(10, 2.0))  # rewrites v's buffer
    assert not sw.read_valid(v)
    assert sw.read_valid(sw.read_begin())


def test_reader_times_out_when_every_copy_overlaps_two_publishes(arena):
    sw = SharedWeights.allocate(arena, 10)
    sw.hdr[BEGUN] = 2  # two publishes began and never finished (a writer died mid-publish)
    with pytest.raises(TimeoutError):
        sw.read_into(np.zeros(10), timeout=0.05)
    assert sw.hdr[WANT] == 0  # the reader withdrew its request


def test_writer_defers_for_a_starving_reader_then_catches_up(arena):
    dim = 100
    sw = SharedWeights.allocate(arena, dim, max_defer=0.2)
    w = np.zeros(dim)
    mark = marks_for(dim, [])
    loc = np.zeros(dim)
    sw.publish(w)
    sw.hdr[WANT] = 1  # a reader asks for a pause
    w[5], mark[5 >> LINE_SHIFT] = 1.0, 1
    assert not sw.publish_lines(w, mark, dim)
    w[70], mark[70 >> LINE_SHIFT] = 2.0, 1
    assert not sw.publish_lines(w, mark, dim)
    assert sw.version() == 1 and mark.any()
    sw.read_into(loc)
    assert not loc.any()
    sw.hdr[WANT] = 0  # reader done: the next publish carries the deferred changes
    w[90], mark[90 >> LINE_SHIFT] = 3.0, 1
    assert sw.publish_lines(w, mark, dim)
    assert sw.version() == 2
    sw.read_into(loc)
    np.testing.assert_array_equal(loc, w)
    # deferral is bounded by max_defer even if the flag is never cleared
    sw.hdr[WANT] = 1
    w[1], mark[0] = 4.0, 1
    assert not sw.publish_lines(w, mark, dim)
    time.sleep(0.25)
    w[20], mark[20 >> LINE_SHIFT] = 5.0, 1
    assert sw.publish_lines(w, mark, dim)
    sw.hdr[WANT] = 0
    sw.read_into(loc)
    np.testing.assert_array_equal(loc, w)
    # whole publish deferred, then flush writes everything
    sw.hdr[WANT] = 1
    w[:] = 6.0
    assert not sw.publish(w) and sw._pending_full
    sw.flush(w)
    sw.hdr[WANT] = 0
    assert not sw._pending_full
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


def _writer_marked(spec, flags_spec, n_pub):
    sw = SharedWeights.attach(spec)
    flags = SharedArena.attach(flags_spec)["flags"]
    d = sw.dim
    w = np.zeros(d)
    mark = marks_for(d - 1, [])
    rng = np.random.default_rng(0)
    for k in range(1, n_pub + 1):
        if flags[1]:
            break
        idx = np.unique(rng.integers(0, d - 1, 2000))
        w[idx] = float(k)
        mark[idx >> LINE_SHIFT] = 1
        w[d - 1] = w[: d - 1].sum()  # exact: integer-valued, < 2**53
        sw.publish_lines(w, mark, d - 1)
    sw.flush(w)
    flags[0] = 1


def _reader(spec, flags_spec, mode, res_spec):
    """Reads by copy (read_into) and in place (as the workers do); every read that claims to
    be valid must be consistent: all entries equal the version (full), or the last entry is
    the sum of the others (marked)."""
    sw = SharedWeights.attach(spec)
    flags = SharedArena.attach(flags_spec)["flags"]
    res = SharedArena.attach(res_spec)["res"]
    loc = np.empty(sw.dim)
    reads = bad = invalid = 0
    last = -1
    versions = set()
    t_end = time.monotonic() + 20

    def consistent(x: np.ndarray, v: int) -> bool:
        if mode == "full":
            return x.min() == x.max() == (float(v) if v else 0.0)
        return x[-1] == x[:-1].sum()

    while flags[0] == 0 and time.monotonic() < t_end:
        v = sw.read_into(loc, timeout=5)
        reads += 1
        versions.add(v)
        bad += v < last or not consistent(loc, v)
        last = v
        v = sw.read_begin()  # in place
        buf = sw.buffer(v)
        ok = consistent(buf, v)
        if sw.read_valid(v):
            bad += not ok
        else:
            invalid += 1
    res[:4] = reads, bad, len(versions), invalid
    flags[1] = 1


@pytest.mark.parametrize("mode,dim,n_pub", [("full", 200_000, 1500),
                                             ("marked", 300_000, 1500)])
def test_reader_never_sees_torn_vector(arena, mode, dim, n_pub):
    sw = SharedWeights.allocate(arena, dim)
    flags = arena.create("flags", (4,), np.int64)
    arena.create("res", (4,), np.int64)
    spec = arena.spec()
    target = _writer_full if mode == "full" else _writer_marked
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
    reads, bad, n_versions, invalid = (int(x) for x in res)
    print(f"\n{mode}: {reads} reads, {n_versions} versions seen, {bad} bad, "
          f"{invalid} in-place reads rejected, {int(flags[2])} deferred publishes")
    assert bad == 0
    assert reads >= 20 and n_versions >= 5  # reads really overlapped many publishes
    # the final state is consistent and complete
    loc = np.empty(dim)
    v = sw.read_into(loc)
    if mode == "full":
        assert loc.min() == loc.max() == v
    else:
        assert loc[-1] == loc[:-1].sum() and loc[-1] > 0
