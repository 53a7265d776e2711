"""How promptly training and inference stop: the speed goals that the tests only bound loosely
(issue 45: the tests must pass on a loaded machine; these figures need a quiet one).

    python benchmarks/stop_latency.py [--runs 3] [--limit 3] [--out-dir benchmarks/results]

* Time limit (issue 22's expensive-inference regime): each learner (DEMI-DCD, MS-DCD and
  SP-IPM on 2 processes, 1-DCD on one) trains ``tests/toy_task.SlowToyTask`` (every inference
  sleeps 0.05 s, like a solver subprocess) under ``--limit`` seconds. Reported, worst of
  ``--runs``: how far past the limit the solver stopped (goal: 1 s + one inference), the longest
  time the learner went without polling the clock, and the longest time the model it holds
  went unchanged before the limit (goal: progress every second).
* ILP stop: CBC and HiGHS (when installed) on a CoNLL04 instance they cannot solve in minutes
  (``tests/data/er_hard_ilp.npz``), ``should_stop()`` true after 1 s: seconds from then to the
  raised ``InferenceInterrupted`` (goals: CBC 0.2 s, HiGHS 1 s), worst of ``--runs``.

Writes ``<name>.json`` to ``--out-dir`` and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the toy tasks the tests use

from common import (  # noqa: E402
    RESULTS,
    LoadSampler,
    machine_info,
    machine_line,
    markdown_table,
    say,
    write_json,
)
from toy_task import SlowToyTask  # noqa: E402

from demidcd.solvers import train  # noqa: E402
from demidcd.solvers.common import SolverConfig, StopRequest  # noqa: E402

SLOW = 0.05  # seconds per inference
LEARNERS = ("demi-dcd", "ms-dcd", "sp-ipm", "dcd")


def time_limit_run(algorithm: str, limit: float) -> dict:
    """One run of ``algorithm`` on the slow toy task (as tests/test_expensive.py trains it)."""
    StopRequest.requested = StopRequest.active = False
    task = SlowToyTask(SLOW, n=16, dim=2, density=1.0, seed=1) if algorithm == "sp-ipm" else \
        SlowToyTask(SLOW, n=30, seed=1)
    extra = {"perceptron_epochs_per_round": 1} if algorithm == "sp-ipm" else {}
    ticks: list[tuple[float, float]] = []
    cfg = SolverConfig(C=0.1, tol=1e-6, delta=1e-6, time_limit=limit, max_epochs=10**9)
    t0 = time.perf_counter()
    res = train(task, algorithm, cfg, 1 if algorithm == "dcd" else 2,
                tick=lambda s, w: ticks.append((s, float(np.abs(w).sum()))), **extra)
    wall = time.perf_counter() - t0
    times = [0.0, *(s for s, _ in ticks)]
    changes, last = [0.0], 0.0  # when the model (its |w|_1) changed, seen at the polls
    for s, v in ticks:
        if s < limit and round(v, 12) != round(last, 12):
            changes.append(s)
        last = v
    changes.append(min(limit, res.seconds))
    return {"stop_reason": res.stop_reason, "seconds": res.seconds, "wall_seconds": wall,
            "past_limit": res.seconds - limit,
            "longest_between_polls": max(b - a for a, b in zip(times, times[1:], strict=False)),
            "longest_unchanged": max(b - a for a, b in zip(changes, changes[1:],
                                                           strict=False))}


def ilp_stop(solver: str) -> float:
    """Seconds from ``should_stop()`` turning true to the interrupted solve's return."""
    from demidcd.tasks.base import InferenceInterrupted
    from demidcd.tasks.entity_relation.inference import get_solver

    d = np.load(HERE.parent / "tests" / "data" / "er_hard_ilp.npz")
    U, P = d["U24"], d["P24"]
    solve = get_solver(solver)
    solve(U[:2], P[:2])  # warm: the first call imports and starts things
    t_stop = time.monotonic() + 1.0
    try:
        solve(U, P, should_stop=lambda: time.monotonic() >= t_stop)
    except InferenceInterrupted:
        return time.monotonic() - t_stop
    raise RuntimeError(f"{solver} finished the hard instance: not a stop measurement")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=float, default=3.0)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name", default="stop_latency")
    args = ap.parse_args(argv)
    info = machine_info()
    say(machine_line(info))
    load = LoadSampler().start()
    learners = {}
    for alg in LEARNERS:
        with load.span(alg):
            learners[alg] = [time_limit_run(alg, args.limit) for _ in range(args.runs)]
    solvers = ["cbc"]
    try:
        import highspy  # noqa: F401

        solvers.append("highs")
    except ImportError:
        pass
    ilp = {}
    for solver in solvers:
        with load.span(solver):
            ilp[solver] = [ilp_stop(solver) for _ in range(args.runs)]
    load.stop()
    rows = [(alg, f"{max(r['past_limit'] for r in runs):.2f} s",
             f"{max(r['longest_between_polls'] for r in runs):.2f} s",
             f"{max(r['longest_unchanged'] for r in runs):.2f} s")
            for alg, runs in learners.items()]
    table = markdown_table(["learner", "stopped past the limit", "longest between polls",
                            "model unchanged at most"], rows)
    table += "\n\n" + markdown_table(
        ["ILP solver", "stop after should_stop (worst)", "all runs"],
        [(s, f"{max(v):.3f} s", ", ".join(f"{x:.3f}" for x in v)) for s, v in ilp.items()])
    path = write_json(Path(args.out_dir) / f"{args.name}.json",
                      {"benchmark": "stop_latency", "machine": info, "load": load.summary(),
                       "args": vars(args), "learners": learners, "ilp": ilp,
                       "table_markdown": table})
    print(table)
    say(f"other processes' load: {load.summary_line()}")
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
