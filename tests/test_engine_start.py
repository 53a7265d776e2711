"""Starting the workers is on the clock (the time limit is the wall time of training): they are
forked behind a start gate and begin together after the last fork, none before the clock
started; a limit running out while they are forked stops the rest. With more threads than
cores, --learners auto runs one learner and the warning describes that very layout."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from cli_run import run as cli

from demidcd.api import SequenceTagger
from demidcd.parallel.engine import WorkerPool
from demidcd.parallel.worker import FST_STARTED, INFER, WorkerSpec
from demidcd.primitives.monitor import usable_cores
from demidcd.solvers import oversubscription, train
from demidcd.solvers.common import SolverConfig
from demidcd.solvers.plan import decide_learners, make_plan


@pytest.fixture(scope="module")
def task(small):
    X, Y = small
    est = SequenceTagger(C=0.1, algorithm="dcd", max_epochs=1, min_count=1).fit(X, Y)
    return est.training_task(X, Y)


def _cfg(limit: float) -> SolverConfig:
    """tol 1e-12: this task certifies it only after 2.5 s or more, past these limits."""
    return SolverConfig(C=0.1, tol=1e-12, delta=1e-12, time_limit=limit)


@pytest.mark.parametrize("learners", [1, 2])
def test_workers_begin_after_the_clock_started_and_after_the_last_fork(task, learners,
                                                                       shm_guard):
    """From the run's records: spawning began on the clock (spawn_began >= 0), no worker did
    any work before the last one was forked (the gate), so none before the clock started; the
    stop came at the limit on that clock."""
    limit = 1.0
    res = train(task, "demi-dcd", _cfg(limit), threads=2, learners=learners)
    ex = res.extra
    assert res.stop_reason == "time-limit"
    assert ex["spawn_began"] is not None and ex["spawn_began"] >= 0.0
    assert ex["workers_began"] is not None
    assert ex["workers_began"] >= ex["spawn_began"] + ex["spawn_seconds"] - 1e-3, ex
    assert res.seconds >= limit
    assert res.history and res.history[-1]["seconds"] >= ex["workers_began"]
    assert res.history[-1]["inferences"] > 0  # the workers did work, after the gate


def test_a_limit_running_out_while_forking_stops_the_rest(task, shm_guard):
    """The limit expires after the first fork: no more workers are forked, the forked one is
    told to stop (and exits without inferring), close leaves nothing."""
    spec = WorkerSpec("demi", 0.1, chunk=16)
    pool = WorkerPool(task, 3, spec)
    calls = itertools.count()
    try:
        pool.start(expired=lambda: next(calls) >= 1)
        assert pool.procs[0] is not None and pool.procs[1:] == [None, None]
        assert pool.stop_requested()
        pool.procs[0].join(10)
        assert pool.procs[0].exitcode == 0
        assert int(pool.stats[:, INFER].sum()) == 0 and (pool.fstats[:, FST_STARTED] == 0).all()
    finally:
        pool.close()


@pytest.mark.parametrize("algorithm,engine", [("demi-dcd", {"learners": 1}),
                                              ("demi-dcd", {"learners": 2}),
                                              ("ms-dcd", {}), ("sp-ipm", {}),
                                              ("pegasos", {})])
def test_a_limit_shorter_than_the_start_ends_every_parallel_learner(task, algorithm, engine,
                                                                    shm_guard):
    """A limit that runs out before the first fork: every parallel learner stops with
    time-limit (none waits for a worker that was never forked)."""
    res = train(task, algorithm, _cfg(1e-6), threads=2, **engine)
    assert res.stop_reason == "time-limit"
    assert np.isfinite(res.w).all()


def test_auto_learners_never_outnumber_the_cores_and_the_warning_says_so(task):
    """More threads than cores: --learners auto runs one learner, and the warning describes
    one learner and threads − 1 inference workers; with --learners equal to --threads it
    describes the learners sharing the cores instead."""
    cores = usable_cores()
    threads = cores + 2
    lines: list[str] = []
    plan = decide_learners(make_plan("demi-dcd", SolverConfig(), threads, learners="auto"),
                           task, lines.append)
    assert plan.learners == 1 and lines and \
        lines[0].startswith("1 learner process: because --threads")
    note = oversubscription("demi-dcd", threads, "auto")
    assert note is not None and f"{threads - 1} inference workers share" in note
    assert "learner process keeps one core" in note
    many = oversubscription("demi-dcd", threads, str(threads))
    assert many is not None and \
        f"the {threads} learner processes (--learners {threads}) share" in many
    assert oversubscription("demi-dcd", cores, "auto") is None  # they fit
    assert oversubscription("dcd", threads) is None  # sequential: one process


@pytest.mark.skipif(usable_cores() > 2, reason="needs --threads > cores with at most 4 threads")
def test_cli_warning_and_learners_agree_with_more_threads_than_cores(corpus):
    """The CLI with --threads cores + 1: the warning and the run describe the same layout (one
    learner, `threads - 1` inference workers), and every fork before the first iteration."""
    threads = usable_cores() + 1
    r = cli("train", "--train", str(corpus / "train.txt"), "--threads", str(threads),
            "--time-limit", "2", "--max-epochs", "2", "--min-count", "1")
    assert r.returncode == 0, r.stderr
    warn = [s for s in r.stderr.splitlines() if "warning" in s]
    assert len(warn) == 1 and f"the {threads - 1} inference workers share" in warn[0], r.stderr
    assert re.search(r"^1 learner process: because --threads", r.stdout, re.M), r.stdout
    workers = re.findall(r"^worker \d+ pid \d+ \(shard of", r.stdout, re.M)
    assert len(workers) == threads - 1, r.stdout
    assert "multi-learner" not in r.stdout
