"""Snapshots are taken on a fixed grid of solver time, not every ``every`` seconds after the
last one (which would drift later by each call's lateness)."""

from __future__ import annotations

import numpy as np

from demidcd.io.snapshots import Snapshotter, list_snapshots


def test_snapshots_follow_a_fixed_grid(tmp_path):
    snap = Snapshotter(tmp_path, every=5.0)
    w = np.arange(4.0)
    for t in (0.0, 0.3, 4.9, 5.4, 9.95, 10.4, 10.6, 15.1, 16.0):
        snap.maybe(t, w * t)
    snap.maybe(17.0, w, force=True)
    snap.close()
    (tmp_path / "base.npz").write_bytes(b"")  # list_snapshots wants a snapshot directory
    got = [(t, float(np.load(p)[1])) for t, p in list_snapshots(tmp_path)]
    assert got == [(0.0, 0.0), (5.4, 5.4), (10.4, 10.4), (15.1, 15.1), (17.0, 1.0)]


def test_snapshot_copies_are_reused_once_written_and_never_while_written(tmp_path, monkeypatch):
    """A copy goes back to be copied into once its file is written (one array for a whole run
    whose writes keep up); a snapshot due while the last is still being written gets its own
    array, so every file holds w as it was at its own snapshot."""
    import threading

    import demidcd.io.snapshots as snapshots

    made = []
    real = np.empty_like
    monkeypatch.setattr(snapshots.np, "empty_like", lambda a: made.append(1) or real(a))
    snap = Snapshotter(tmp_path, every=1.0)
    w = np.zeros(1000)
    for t in range(5):  # each write finished before the next snapshot: one array in all
        w[:] = t
        snap.maybe(float(t), w)
        snap._q.join()
    assert len(made) == 1
    gate = threading.Event()
    save = snapshots.np.save
    monkeypatch.setattr(snapshots.np, "save", lambda f, a: [gate.wait(), save(f, a)])
    for t in range(5, 9):  # the writer held up: the first takes the array written at t = 4,
        # each later one an array of its own
        w[:] = t
        snap.maybe(float(t), w)
    gate.set()
    snap.close()
    assert len(made) == 1 + 3
    (tmp_path / "base.npz").write_bytes(b"")
    got = [(t, np.load(p)) for t, p in list_snapshots(tmp_path)]
    assert [t for t, _ in got] == [float(t) for t in range(9)]
    assert all((a == t).all() for t, a in got)
