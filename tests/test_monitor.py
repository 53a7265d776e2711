"""CpuMonitor: a busy child reads ~100 %, an idle one ~0 %, dead processes count 0, CSV."""

from __future__ import annotations

import csv
import os
import time

import multiprocess as mp
import pytest

from demidcd.parallel.monitor import CpuMonitor

CTX = mp.get_context("fork")


def _busy(seconds):
    t_end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < t_end:
        x += 1


def _idle(seconds):
    time.sleep(seconds)


def test_busy_idle_dead_and_csv(tmp_path):
    busy = CTX.Process(target=_busy, args=(2.5,))
    idle = CTX.Process(target=_idle, args=(2.5,))
    short = CTX.Process(target=_busy, args=(0.3,))  # dies early: must read 0, not crash
    for p in (busy, idle, short):
        p.start()
    mon = CpuMonitor({"busy": busy.pid, "idle": idle.pid, "short": short.pid}, interval=0.25)
    mon.start()
    time.sleep(0.8)
    short.join()
    mon.add("late", os.getpid())  # a role added while running
    mon.remove("short")
    time.sleep(1.2)
    mon.stop()
    n = len(mon.samples)
    time.sleep(0.3)
    assert len(mon.samples) == n  # really stopped
    for p in (busy, idle):
        p.join()
    assert 6 <= n <= 10
    late = [s for s in mon.samples if s[0] >= 1.0]
    busy_pct = sum(v["busy"] for _, _, v in late) / len(late)
    idle_pct = sum(v["idle"] for _, _, v in late) / len(late)
    # ~100 % on an idle machine; CI may run other jobs, so ask only for a clear separation
    assert busy_pct > 20 and busy_pct > 5 * idle_pct, (busy_pct, idle_pct)
    assert idle_pct < 5, idle_pct
    for sec, total, vals in mon.samples:
        assert total == pytest.approx(sum(vals.values()))
        assert "short" not in vals or sec < 1.0
    assert mon.average() == pytest.approx(sum(t for _, t, _ in late) / len(late))
    line = mon.summary_line(2)
    assert line.startswith("average CPU: ") and line.endswith("% of 200%")

    path = tmp_path / "cpu.csv"
    mon.write_csv(path)
    rows = list(csv.reader(path.open()))
    assert rows[0] == ["seconds", "total", "busy", "idle", "short", "late"]
    assert len(rows) == n + 1
    assert all(len(r) == 6 for r in rows)
    assert [p.name for p in tmp_path.iterdir()] == ["cpu.csv"]  # no temporary left behind


def test_dead_and_bogus_pids_count_zero():
    p = CTX.Process(target=_idle, args=(0,))
    p.start()
    p.join()
    mon = CpuMonitor({"dead": p.pid, "bogus": 2**22 + 12345}, interval=0.05)
    mon.start()
    time.sleep(0.3)
    mon.stop()
    assert mon.samples and all(t == 0.0 for _, t, _ in mon.samples)
    assert mon.average() == 0.0
    assert CpuMonitor({}).average() == 0.0
    with pytest.raises(ValueError):
        CpuMonitor({}, interval=0)
