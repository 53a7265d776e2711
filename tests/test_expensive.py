"""The expensive-inference regime (issue 22): every learner makes progress, keeps its time
limit and stops on a signal within about one inference, whatever one inference costs.

The bounds hold on a loaded machine (issue 45): a learner must notice the limit at its first
poll after it, so the overshoot is measured against the longest time it went between polls in
the same run (which grows with the load), and the wall-clock bounds only say "ended, not hung".
How fast the stops are on a quiet machine is measured by ``benchmarks/stop_latency.py``."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from toy_task import SlowToyTask, ToyTask

from demidcd.primitives.shm import list_segments
from demidcd.solvers import train
from demidcd.solvers.common import SolverConfig, StopRequest

SLOW = 0.05  # seconds per inference


def _run(task, algorithm, threads, limit, **engine):
    StopRequest.requested = StopRequest.active = False
    recs, ticks = [], []
    cfg = SolverConfig(C=0.1, tol=1e-6, delta=1e-6, time_limit=limit, max_epochs=10**9)
    t0 = time.perf_counter()
    res = train(task, algorithm, cfg, threads, callback=lambda r, w: recs.append(dict(r)),
                tick=lambda s, w: ticks.append((s, float(np.abs(w).sum()))), **engine)
    return res, recs, ticks, time.perf_counter() - t0


def _longest_between_polls(ticks: list[tuple[float, float]]) -> float:
    """The longest time the learner went without polling the clock (its ``tick`` calls; the
    clock's start counts as one): how late it may notice the limit in this run."""
    times = [0.0, *sorted(s for s, _ in ticks)]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


@pytest.mark.parametrize("algorithm", ["demi-dcd", "ms-dcd", "sp-ipm", "dcd"])
def test_slow_inference_progress_and_time_limit(algorithm, shm_guard):
    # SP-IPM: 16 examples a round (0.8 s), 3 features (not separable: it never converges)
    task = SlowToyTask(SLOW, n=16, dim=2, density=1.0, seed=1) if algorithm == "sp-ipm" else \
        SlowToyTask(SLOW, n=30, seed=1)
    threads = 1 if algorithm == "dcd" else 2
    extra = {"perceptron_epochs_per_round": 1} if algorithm == "sp-ipm" else {}
    limit = 3.0
    res, recs, ticks, wall = _run(task, algorithm, threads, limit, **extra)
    assert res.stop_reason == "time-limit"
    # polled until the limit, up to one block of 16 inferences (0.8 s) that the DEMI-DCD
    # learner runs itself when idle and that may straddle the limit
    assert ticks and max(s for s, _ in ticks) >= limit - 16 * SLOW - 0.5
    # stopped at the first poll after the limit: late by at most the longest time between
    # polls (one block of inferences, 0.8 s here when the machine is quiet), + 1 s to stop
    between = _longest_between_polls(ticks)
    assert res.seconds - limit <= between + 1.0 + SLOW, (res.seconds, between)
    assert wall <= res.seconds + 30.0, wall  # ended: start-up and shut-down, not hung
    # progress during the run, not only at its end: the model changed before the limit (a
    # poll comes every 0.8 s or so when the machine is quiet, an epoch takes 1.5 s; on a
    # loaded one SP-IPM's second round may end after the limit)
    seen = {round(v, 12) for s, v in ticks if s < limit}
    assert len(seen) >= 2, (algorithm, sorted(seen)[:3])
    assert res.extra.get("updates", recs[-1]["updates"] if recs else 0) > 0
    if algorithm == "demi-dcd":  # the learner infers beside its worker once it is idle
        assert res.extra["learner_inferences"] > 0


_SIGINT_SCRIPT = textwrap.dedent("""
    import signal, sys, time
    sys.path.insert(0, {tests!r})
    from toy_task import SlowToyTask
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig, StopRequest
    signal.signal(signal.SIGINT, StopRequest.handler)
    task = SlowToyTask({slow}, n=30, seed=2)
    cfg = SolverConfig(C=0.1, tol=1e-9, delta=1e-9, time_limit=60, max_epochs=10**9)
    res = train(task, {alg!r}, cfg, 2, callback=lambda r, w: print("iter", flush=True),
                **({extra!r}))
    print("STOPPED", res.stop_reason, time.time(), flush=True)
""")


@pytest.mark.parametrize("algorithm", ["demi-dcd", "ms-dcd", "sp-ipm"])
def test_sigint_stops_within_one_second_plus_one_inference(algorithm, tmp_path, shm_guard):
    extra = {"perceptron_epochs_per_round": 1} if algorithm == "sp-ipm" else {}
    script = _SIGINT_SCRIPT.format(tests=os.path.dirname(__file__), slow=SLOW, alg=algorithm,
                                   extra=extra)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()  # the first iteration: training runs
        assert line.startswith("iter"), line + p.stderr.read()
        time.sleep(0.5)
        sent = time.time()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    stopped = [ln for ln in out.splitlines() if ln.startswith("STOPPED")]
    assert stopped, err
    _, reason, at = stopped[0].split()
    assert reason == "interrupted"
    # within 1 s + one inference on a quiet machine (benchmarks/stop_latency.py); here only
    # long before the 60 s limit, which a signal that was not honoured would run into
    assert float(at) - sent <= 15.0, float(at) - sent
    assert p.returncode == 0
    assert not list_segments(pid=p.pid)


def test_oversubscribed_threads_keep_the_time_limit(shm_guard):
    """--threads 8 on 2 cores with a 5 s limit stops at the first poll after the limit, within
    about 1 s on a quiet machine (workers yield to the learner, which keeps a core of its
    own)."""
    task = ToyTask(n=400, m=8, dim=60, seed=3)
    res, recs, ticks, wall = _run(task, "demi-dcd", 8, 5.0)
    between = _longest_between_polls(ticks)
    assert res.seconds - 5.0 <= between + 1.0, (res.seconds, between)
    assert wall <= res.seconds + 30.0, wall  # ended: start-up and shut-down, not hung
    assert res.extra["updates"] > 0


# end to end (processes, signals, Ray, benchmarks): deselected by default, CI's second step
# (python -m pytest -q -m slow)
pytestmark = pytest.mark.slow
