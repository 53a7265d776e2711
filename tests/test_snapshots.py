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
