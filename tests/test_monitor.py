"""CpuMonitor: a busy child reads ~100 %, an idle one ~0 %, dead processes count 0, CSV."""

from __future__ import annotations

import csv
import os
import re
import time

import multiprocess as mp
import pytest

from demidcd.primitives.monitor import CpuMonitor

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


BUSY = "import time\nt = time.monotonic() + {s}\nwhile time.monotonic() < t: pass\n"


def _spawner(seconds):
    """Idle itself: runs busy subprocesses one after another and waits for each."""
    import subprocess
    import sys

    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        subprocess.run([sys.executable, "-c", BUSY.format(s=0.15)], check=True)


def _holder(seconds):
    """Idle itself: one busy grandchild that lives (and is counted live) the whole time."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.run([sys."
                    f"executable, '-c', {BUSY.format(s=seconds)!r}])"], check=True)


def _share(mon, role, lo, hi):
    vals = [v.get(role, 0.0) for sec, _, v in mon.samples if lo <= sec < hi]
    return sum(vals) / max(1, len(vals))


def test_solver_subprocesses_count_in_their_parents_share():
    """Exited (waited-for) and live descendants count in the share of the monitored process
    that started them; a monitored child is not counted again in its monitored parent's share,
    neither while it runs nor when the parent reaps it."""
    spawner = CTX.Process(target=_spawner, args=(2.4,))
    holder = CTX.Process(target=_holder, args=(2.4,))
    busy = CTX.Process(target=_busy, args=(1.4,))  # a monitored child of the monitored parent
    for p in (spawner, holder, busy):
        p.start()
    mon = CpuMonitor({"parent": os.getpid(), "spawner": spawner.pid, "holder": holder.pid,
                      "busy": busy.pid}, interval=0.2)
    mon.start()
    time.sleep(1.6)
    busy.join()  # reaped: its CPU now sits in this process's children times
    time.sleep(0.8)
    mon.stop()
    for p in (spawner, holder):
        p.join()
    # while all run: the spawner and the holder are idle themselves, their (grand)children
    # busy; the old monitor read ~0 % for both. Four busy processes share 2 cores (and CI
    # runs other jobs), so compare with the busy reference process, not with 100 %.
    busy_pct = _share(mon, "busy", 0.3, 1.0)
    spawner_pct = _share(mon, "spawner", 0.3, 2.2)
    holder_pct = _share(mon, "holder", 0.3, 2.2)
    parent_pct = _share(mon, "parent", 0.3, 2.2)
    assert busy_pct > 5, busy_pct
    assert spawner_pct > 0.3 * busy_pct and holder_pct > 0.3 * busy_pct, \
        (spawner_pct, holder_pct, busy_pct)
    # the parent (only the monitor thread runs in it) does not count its monitored children:
    # double counting would put it above the sum of the three
    assert parent_pct < max(spawner_pct, holder_pct, busy_pct), \
        (parent_pct, spawner_pct, holder_pct, busy_pct)
    # reaping the busy child (~1 s of CPU at once in the children times) shows in no sample
    assert max(v["parent"] for _, _, v in mon.samples) < 100
    for _, total, vals in mon.samples:
        assert total == pytest.approx(sum(vals.values()))


def test_peak_memory_is_pss_summed_over_the_processes(small, shm_guard):
    """A run with a learner and two workers reports its peak as the PSS summed over the
    processes: below the machine's memory and below the resident sizes summed (the pages the
    forked workers share with the learner counted once, not once per process), above the
    learner's own private memory (every page only it maps is in the sum); the log line says
    which measure it is."""
    import psutil

    from demidcd.api import SequenceTagger

    X, Y = small
    est = SequenceTagger(C=0.1, algorithm="demi-dcd", threads=3, learners=1, time_limit=1.5,
                         tol=1e-12, min_count=1).fit(X, Y)
    ex = est.result_.extra
    own = psutil.Process().memory_full_info().uss  # now that the workers are gone
    assert 0 < ex["peak_pss"] < psutil.virtual_memory().total
    assert ex["peak_pss"] < ex["peak_rss"], (ex["peak_pss"], ex["peak_rss"])
    assert ex["peak_pss"] > 0.8 * own, (ex["peak_pss"], own)
    assert re.fullmatch(r"peak memory: [\d,]+ MiB \(PSS, all processes\)", ex["memory_line"])
    assert int(ex["memory_line"].split()[2].replace(",", "")) == round(ex["peak_pss"] / 2**20)


@pytest.mark.parametrize("budget", [1.0, 1e-9])
def test_pss_readings_are_spaced_by_their_cost(monkeypatch, budget):
    """PSS readings take at most PSS_BUDGET of the time: with a whole core (budget 1) one
    process is read at nearly every sample, with almost none (1e-9) only when the monitor
    stops; the resident sizes are read at every sample."""
    from demidcd.primitives import monitor as M

    monkeypatch.setattr(M, "PSS_BUDGET", budget)
    mon = CpuMonitor({"me": os.getpid()}, interval=0.05)
    reads: list[bool] = []
    real = mon._memory

    def spy(procs, pss):
        reads.append(pss)
        real(procs, pss)

    mon._memory = spy
    mon.start()
    time.sleep(0.5)
    mon.stop()
    assert len(reads) >= 4 and reads[-1], reads  # the last: when it stops
    if budget == 1.0:
        assert sum(reads[:-1]) >= len(reads[:-1]) // 2, reads
    else:
        assert not any(reads[:-1]), reads
    assert mon.peak_pss > 0 and mon.peak_rss >= mon.peak_pss
