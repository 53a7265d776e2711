"""SP-IPM: iterative parameter mixing for the structured perceptron (McDonald, Hall and Mann
2010; the DEMI-DCD paper's third baseline), on the same worker pool and CPU monitor.

Each round every worker copies the mixed w̄, runs ``epochs`` epochs of structured-perceptron
updates (Collins 2002: w += Φ(x_i, y_i) − Φ(x_i, ŷ) = φ whenever the argmax ŷ ≠ y_i) over its
shard, in shard order, and writes its w_j; at the barrier the parent mixes
w̄ = Σ_j μ_j w_j with μ_j = 1/k (uniform) or μ_j ∝ mistakes_j ("mistakes"), and publishes it.
With ``averaged`` the output is the average of the mixed vectors over all rounds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import numpy as np

from ..errors import OptionError
from ..options import default
from ..parallel.transport import make_transport
from ..parallel.worker import WorkerSpec
from ..tasks.base import InferenceInterrupted, Task
from .common import Callback, SolverConfig, TrainResult, stop_reason
from .recorder import Recorder


def perceptron_epochs(task: Task, w: np.ndarray, order: np.ndarray, epochs: int,
                      stop: Callable[[], bool] | None = None,
                      progress: np.ndarray | None = None) -> int:
    """Structured perceptron over ``order`` for ``epochs`` epochs, updating ``w`` in place;
    returns the number of mistakes (= updates). One argmax per example, then w += φ.
    ``progress`` (optional int64[2]): live counts of inferences and mistakes."""
    mistakes = 0
    for _ in range(epochs):
        for i in order:
            if stop is not None and stop():
                return mistakes
            try:
                b = task.argmax_records(w, np.array([i], np.int64))
            except InferenceInterrupted:
                return mistakes
            if progress is not None:
                progress[0] += 1
            if len(b):
                w[b.idx] += b.val  # φ has unique indices
                mistakes += 1
                if progress is not None:
                    progress[1] += 1
    return mistakes


def mapper(task: Task, w: np.ndarray, shard: np.ndarray, stop: Callable[[], bool],
           epochs: int) -> tuple[dict[str, object], int, int]:
    """One SP-IPM mapper round (a worker job, see :data:`~demidcd.parallel.worker.Job`):
    ``epochs`` perceptron epochs over ``shard`` from the mixed ``w`` (a private copy), also
    after a stop (the learner then mixes a partial round)."""
    live = np.zeros(2, np.int64)
    m = perceptron_epochs(task, w, shard, epochs, progress=live, stop=stop)
    return {"wloc": w, "mistakes": m}, int(live[0]), int(live[1])


def mixing_weights(mistakes: np.ndarray, mixing: str) -> np.ndarray:
    """μ_j of the mix w̄ = Σ_j μ_j w_j: 1/k ("uniform"), or mistakes_j / Σ mistakes
    ("mistakes"; uniform when no shard made a mistake)."""
    mis = np.asarray(mistakes, np.float64)
    if mixing == "mistakes" and mis.sum() > 0:
        return mis / mis.sum()
    return np.full(mis.shape[0], 1.0 / mis.shape[0])


def train_sp_ipm(task: Task, config: SolverConfig, threads: int,
                 callback: Callback | None = None, cpu_log: str | None = None,
                 log: Callable[[str], None] | None = None, debug: bool = False,
                 perceptron_epochs_per_round: int = default("perceptron_epochs_per_round"),
                 mixing: str = default("mixing"),
                 averaged: bool = False,
                 tick: Callable[[float, np.ndarray], None] | None = None,
                 backend: str = "shm", ray_address: str | None = None) -> TrainResult:
    """Train a structured perceptron by iterative parameter mixing on ``threads − 1`` workers.
    ``config.max_epochs`` counts mixing rounds (default 100)."""
    if mixing not in ("uniform", "mistakes"):
        raise OptionError(f"mixing must be 'uniform' or 'mistakes', got {mixing!r}")
    k, dim, n = threads - 1, task.dim, task.n_examples
    E = int(perceptron_epochs_per_round)

    spec = WorkerSpec("job", config.C, seed=config.seed, job=functools.partial(mapper, epochs=E),
                      outputs={"wloc": ((dim,), np.float64), "mistakes": ((), np.int64)})
    pool = make_transport(backend, task, k, spec, log=log, debug=debug,
                          ray_address=ray_address)
    wa = np.zeros(dim + n)
    w_sum = np.zeros(dim)
    mixes = 0  # mixed vectors summed into w_sum (a round whose mappers never handed in adds none)
    w_out = wa[:dim]  # the model so far (the mixed or the averaged w)
    recorder = Recorder(task, config, callback, threads, monitor=pool.monitor,
                        objective_fn=None, tick=tick)
    reason, rnd, updates, t_map, t_mix = "max-epochs", 0, 0, 0.0, 0.0
    try:
        clock = recorder.start()  # starting the workers is on the clock
        pool.start(expired=clock.expired)
        for rnd in range(1, config.epochs(100) + 1):
            if pool.stop_requested():  # the limit ran out while the mappers were started
                rnd -= 1
                reason = stop_reason(False, clock) or "time-limit"
                break
            pool.publish(wa)
            t = time.perf_counter()
            gen = pool.command()
            while not pool.done(gen) and not clock.poll(w_out):  # the barrier
                pool.check()
                time.sleep(0.0005)
            partial = not pool.done(gen)
            if partial:  # the limit or a signal: the mappers stop within one inference and
                pool.request_stop()  # hand in their w_j, mixed as a last, partial round
                deadline = time.perf_counter() + 2.0
                while not pool.done(gen) and time.perf_counter() < deadline:
                    pool.check()
                    time.sleep(0.001)
            t_map += time.perf_counter() - t
            if not pool.done(gen):
                rnd -= 1
                reason = stop_reason(False, clock) or "time-limit"
                break
            t = time.perf_counter()
            out = pool.results()
            mis = out["mistakes"].astype(np.float64)
            wa[:dim] = mixing_weights(mis, mixing) @ out["wloc"]
            w_sum += wa[:dim]
            mixes += 1
            w_out = w_sum / mixes if averaged else wa[:dim]
            t_mix += time.perf_counter() - t
            updates += int(mis.sum())
            recorder.epoch({"epoch": rnd, "updates": updates, "total_updates": updates,
                            "mistakes": int(mis.sum()),
                            "inferences": pool.totals()["inferences"], "active": 0,
                            "shrunk": 0, "admitted": 0, "max_pg": 0.0}, w_out)
            if stop := stop_reason(mis.sum() == 0 and not partial, clock):
                reason = stop
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    finally:
        inferences = pool.totals()["inferences"]
        started = pool.start_figures(recorder.clock.t0) if recorder.clock else {}
        pool.close()
    # the average of the mixed vectors actually summed (none: the initial w = 0)
    w = w_sum / mixes if averaged and mixes else wa[:dim].copy()
    res = recorder.finish(w, reason, rnd, cpu_log=cpu_log, updates=updates,
                          inferences=inferences, map_seconds=t_map, mix_seconds=t_mix,
                          rounds_mixed=mixes, **started)
    if log:
        log(f"SP-IPM: {rnd} rounds x {E} epochs, {updates:,} perceptron updates, "
            f"{inferences:,} inferences; map {t_map:.2f}s, mix {t_mix:.2f}s")
    return res
