"""Learners. :func:`train` is the one entry point: it maps an algorithm name to a schedule.

Every learner takes a :class:`~demidcd.tasks.base.Task` and a
:class:`~demidcd.solvers.common.SolverConfig`, and returns a
:class:`~demidcd.solvers.common.TrainResult`; none of them knows which task it trains.
"""

from __future__ import annotations

from typing import Any

from ..errors import OptionError
from ..tasks.base import Task
from .common import Callback, SolverConfig, TrainResult

SINGLE_PROCESS = ("dcd", "dcd-light")
ALGORITHMS = ("dcd", "dcd-light")


def train(task: Task, algorithm: str, config: SolverConfig, threads: int = 1,
          callback: Callback | None = None, **engine: Any) -> TrainResult:
    """Train ``task`` with ``algorithm`` on ``threads`` processes (1 = single-process DCD)."""
    if threads < 1:
        raise OptionError(f"--threads must be >= 1, got {threads}")
    if algorithm not in ALGORITHMS:
        raise OptionError(f"unknown --algorithm {algorithm!r}; choose one of "
                          f"{', '.join(ALGORITHMS)}")
    config.validate()
    from .dcd import train_dcd

    return train_dcd(task, config, callback, light=algorithm == "dcd-light")
