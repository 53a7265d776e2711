"""The task interface: everything a learner may ask of a structured-prediction task.

A learner never sees sentences, tags or ILPs. It sees *records*: for a structure y found for
example i by loss-augmented inference (DEMI-DCD paper, Eq. 5),

    (i, h, Δ(y_i, y), φ(y, y_i, x_i) = Φ(x_i, y_i) − Φ(x_i, y), m = w·φ)

with h a 64-bit hash identifying y among the structures of example i and φ a sparse vector with
sorted, unique indices. A dual variable α_{i,y} is fully described by its record, so every
DCD-family learner (Eq. 2, 7–9) and every perceptron-family learner works on every task.

A batch of records is a :class:`RecordBatch` of flat arrays (CSR-like), never Python objects per
structure, so it can be written into shared-memory rings and read by numba kernels.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from ..primitives.records import INDEX_DTYPE, VALUE_DTYPE, RecordBatch

__all__ = ["INDEX_DTYPE", "VALUE_DTYPE", "RecordBatch", "InferenceInterrupted", "Task"]


class InferenceInterrupted(Exception):
    """Raised from inside :meth:`Task.loss_augmented` (or decode) when :attr:`Task.should_stop`
    turned true while an expensive solver ran (e.g. a CBC subprocess, which is then killed).
    The caller (a worker or learner) treats it as a stop request: nothing of the call is used."""


def _never() -> bool:
    return False


class Task(ABC):
    """A structured-prediction task bound to one encoded data set.

    Implementations hold flat numpy arrays and bind them to numba kernels; the methods here are
    thin Python shells. ``w`` is a float64 vector of length :attr:`dim`; :meth:`loss_augmented`
    also takes one of :attr:`inference_dtype`.

    ``should_stop``: a callable the caller (the engine in each worker, a learner in its own
    process) sets; a task whose single inference can take long (an ILP solver) polls it while
    the solver runs and raises :class:`InferenceInterrupted` once it is true, so stop requests
    never wait for an inference. ``unproven``: how many inferences ended at a solver time cap
    with a feasible but not proven-optimal structure (0 for exact inference); a learner's stop
    certificate needs a sweep without any.
    """

    name: str = "task"
    inference_dtype: type = np.float64  # the dtype of the published w̄ its workers search with
    should_stop: Callable[[], bool] = staticmethod(_never)
    unproven: int = 0

    @property
    @abstractmethod
    def dim(self) -> int:
        """Length of the weight vector w."""

    @property
    @abstractmethod
    def n_examples(self) -> int:
        """Number of examples in the bound data set."""

    @abstractmethod
    def costs(self) -> np.ndarray:
        """Relative inference cost of each example (e.g. tokens), for balancing shards."""

    @abstractmethod
    def loss_augmented(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Solve Eq. (5), argmax_y w·Φ(x_i, y) + Δ(y_i, y), for each i in ``examples``.

        Returns one record per example whose argmax differs from the gold structure (Δ > 0);
        examples whose argmax is the gold structure produce no record.
        """

    @abstractmethod
    def decode(self, w: np.ndarray, examples: np.ndarray) -> list[Any]:
        """Plain inference argmax_y w·Φ(x_i, y) for each i; structures in the task's own form."""

    @abstractmethod
    def gold(self, examples: np.ndarray) -> list[Any]:
        """Gold structures of the given examples, in the same form as :meth:`decode`."""

    @abstractmethod
    def metric(self, gold: list[Any], predicted: list[Any]) -> dict[str, float]:
        """Evaluation metrics; the key ``"score"`` is the headline figure (higher is better)."""

    def argmax_records(self, w: np.ndarray, examples: np.ndarray) -> RecordBatch:
        """Like :meth:`loss_augmented` but for the plain argmax (no Δ in the objective): one
        record per example the current w gets wrong. The structured perceptron's update is
        w += φ of these records (SP-IPM)."""
        raise NotImplementedError(f"{type(self).__name__} has no argmax_records")

    def loss_scaled(self, w: np.ndarray, examples: np.ndarray, scale: float) -> RecordBatch:
        """argmax_y w·Φ(x_i, y) + scale·Δ(y_i, y) for each example, one record per example
        whose argmax differs from the gold structure (records carry the true Δ and m = w·φ).
        scale = 1 is :meth:`loss_augmented`, 0 :meth:`argmax_records`, −1 the loss-diminished
        argmax of the structured ramp loss; a positive scale s on w/s gives Eq. (5) for w."""
        if scale == 1.0:
            return self.loss_augmented(w, examples)
        if scale == 0.0:
            return self.argmax_records(w, examples)
        raise NotImplementedError(f"{type(self).__name__} has no loss_scaled (needed by the "
                                  "ramp-loss learner)")

    def weights_read(self, examples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, lengths): blocks w[s:s+l] that inference on ``examples`` may read (repeats
        allowed). Lazy-update learners bring exactly these entries up to date before inference.
        Default: all of w."""
        return np.zeros(1, np.int64), np.full(1, self.dim, np.int64)

    def phi_delta(self, i: int, y: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """φ(y, y_i, x_i) as (sorted unique indices, values) and Δ(y_i, y) for one structure."""
        raise NotImplementedError
