"""The whole run's peak memory (issue 56, defect 9): ``demidcd train``'s ``peak memory`` line
counts the set-up, which runs in a short-lived child before any training process's monitor
starts (``demidcd.cli.setup``), as well as the training (the monitors' peak PSS).

The accounting, not timing: a set-up child that holds 300 MiB for a moment must raise the
run's peak to at least that, even when no reading of the process tree falls in that moment
(its ``ru_maxrss`` from ``wait4`` is a lower bound of the tree's memory then)."""

from __future__ import annotations

import os
import re

import numpy as np
import psutil
import pytest
from cli_run import run

from demidcd.cli import main
from demidcd.cli.setup import run_in_child
from demidcd.primitives.monitor import CpuMonitor, RunPeak

MIB = 2**20


def _hold(mib: int) -> int:
    a = np.ones(mib * MIB // 8)  # every page touched
    return int(a[::4096].sum() > 0)


def test_a_set_up_childs_peak_counts_without_a_reading_at_its_moment(monkeypatch):
    """No reading of the tree at all: the child's 300 MiB come from its high-water mark
    alone (the child's resident size: what it shares with this process, and the 300 MiB)."""
    monkeypatch.setattr(RunPeak, "read", lambda self: None)
    with RunPeak(interval=1000.0) as rp:
        assert rp.setup == 0
        done, out = run_in_child(lambda: _hold(300))
        assert done and out == 1
    own = psutil.Process().memory_info().rss
    assert 300 * MIB <= rp.setup <= own + 340 * MIB
    assert rp.peak == rp.setup and rp.training == 0


def test_the_tree_is_read_while_no_monitor_runs(monkeypatch):
    """With the high-water mark ignored, the thread's readings (every 0.05 s) see a child
    that holds 200 MiB for 1.5 s: the tree's PSS, the parent's and the child's."""
    def hold() -> int:
        import time

        a = np.ones(200 * MIB // 8)
        time.sleep(1.5)
        return int(a[0])

    monkeypatch.setattr(RunPeak, "note", lambda self, nbytes: None)
    with RunPeak(interval=0.05) as rp:
        before = rp.setup
        assert run_in_child(hold) == (True, 1)
    assert rp.setup >= before + 180 * MIB


def test_a_monitors_span_pauses_the_readings_and_its_peak_counts():
    """While a CpuMonitor runs, its readings count instead of the tree's (no doubled cost);
    its peak PSS at stop is the run's training peak, and the line states both parts with the
    larger first."""
    with RunPeak(interval=1000.0) as rp:
        mon = CpuMonitor({"learner": __import__("os").getpid()}, interval=0.05).start()
        assert rp._paused == 1
        mon.peak_pss = 5000 * MIB  # as if the training had peaked there
        mon.stop()
        assert rp._paused == 0
    assert rp.training == 5000 * MIB and rp.peak == 5000 * MIB
    line = rp.line()
    m = re.fullmatch(r"peak memory: ([\d,]+) MiB \(PSS, all processes, the whole run; training "
                     r"([\d,]+) MiB, the rest \(set-up, saving, scoring\) ([\d,]+) MiB\)", line)
    assert m, line
    total, training, setup = (int(x.replace(",", "")) for x in m.groups())
    assert total == max(setup, training) == 5000 and 0 < setup < 5000


@pytest.mark.slow
def test_the_train_commands_peak_line_is_the_larger_of_set_up_and_training(tmp_path):
    """``demidcd train`` in a process of its own: its last ``peak memory`` line is the whole
    run's, at least the set-up's part that it names."""
    assert main(["generate", "--out-dir", str(tmp_path), "--sentences", "200", "--quiet"]) == 0
    r = run("train", "--train", str(tmp_path / "train.txt"), "--algorithm", "dcd",
            "--threads", "1", "--max-epochs", "1", "--model", str(tmp_path / "m.npz"))
    assert r.returncode == 0, r.stderr
    lines = re.findall(r"peak memory: ([\d,]+) MiB \(PSS, all processes, the whole run; "
                       r"training ([\d,]+) MiB, the rest \(set-up, saving, scoring\) "
                       r"([\d,]+) MiB\)", r.stdout + r.stderr)
    assert len(lines) == 1, r.stdout + r.stderr
    total, training, setup = (int(x.replace(",", "")) for x in lines[0])
    assert setup > 0 and training > 0 and total == max(setup, training)


def test_meanwhile_runs_beside_the_child_and_ends_before_return():
    """``run_in_child(fn, meanwhile)``: ``meanwhile`` runs in a thread here while the child
    works and has finished when the call returns (no thread left to be copied by a later
    fork), even when it outlasts the child."""
    import threading
    import time

    seen = []

    def beside() -> None:
        time.sleep(0.5)
        seen.append(os.getpid())

    threads = threading.active_count()
    assert run_in_child(lambda: 7, beside) == (True, 7)
    assert seen == [os.getpid()] and threading.active_count() == threads
