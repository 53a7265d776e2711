"""The learner's view of the shared [w, A] for the schedules with one learner and p − 1
inference workers (DEMI-DCD, MS-DCD): the transport, the vector it publishes, the records it
drains, and how stale those records arrive.

:class:`SharedLearner` builds the :class:`~.transport.Transport`
(:func:`~.transport.make_transport`, shared memory or Ray) and owns ``wa`` = [w, A] (the L1
loss: [w, ξ̂]), one float64 vector whose first ``dim`` entries the learner's active sets update
in place (:class:`demidcd.solvers.learner.DcdLearner`, the algorithm) and which
:meth:`SharedLearner.publish` makes the workers' next w̄: only the lines of w that some
admitted φ touches travel (w is zero elsewhere), and all of A. It drains the workers' records
(:meth:`SharedLearner.drain`) and keeps the share of them the learner rejected since the last
publish (:attr:`SharedLearner.stale_share`: structures found with a w̄ so stale that they no
longer violate, Eq. 11), which DEMI-DCD's publish schedule follows. The schedule decides when
each of these happens.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..primitives.ring import RING_WORDS
from ..tasks.base import RecordBatch, Task
from .transport import Transport, make_transport
from .worker import WorkerSpec


class SharedLearner:
    """The learner's side of the workers' transport and of the published [w, A] (module
    docstring). ``threads``: the learner and its ``threads − 1`` workers; ``learner_share``:
    the learner infers a part of the data itself (MS-DCD's master, the transport's
    ``learner_shard``)."""

    def __init__(self, task: Task, threads: int, spec: WorkerSpec, *,
                 log: Callable[[str], None] | None = None, debug: bool = False,
                 learner_share: bool = False, ring_words: int = RING_WORDS,
                 backend: str = "shm", ray_address: str | None = None):
        self.dim = task.dim
        self.transport: Transport = make_transport(
            backend, task, threads - 1, spec, log=log, debug=debug,
            learner_share=learner_share, ring_words=ring_words, ray_address=ray_address)
        self.wa = np.zeros(task.dim + task.n_examples)  # [w, A], published as one vector
        self.last_publish_cost = 0.0  # seconds the last publish took
        self._drained_since_publish = self._rejected_since_publish = 0
        self.stale_share = 1.0  # share of the records drained since the last publish that were
        # rejected (no longer violated under w, Eq. 11); kept when nothing was drained
        self.last_drained = 0  # records in the last drain (admitted, duplicate or rejected)

    def start(self, expired: Callable[[], bool]) -> None:
        """Start the workers; ``expired``: the learner's clock, already running."""
        self.transport.start(expired=expired)

    def check(self) -> None:
        """Supervise the workers (:meth:`~.transport.Transport.check`)."""
        self.transport.check()

    def publish(self, marks: np.ndarray, prepare: Callable[[], None] | None = None) -> int:
        """Publish [w, A] as the next version of w̄ (returned): the lines of w ``marks`` marks
        and all of A. ``prepare``: called first, on the publish's clock (the L1 loss's
        recomputed ξ̂). Sets :attr:`last_publish_cost` and starts a new staleness count."""
        t = time.perf_counter()
        if prepare is not None:
            prepare()
        version = self.transport.publish(self.wa, marks, self.dim)
        self._drained_since_publish = self._rejected_since_publish = 0
        self.last_publish_cost = time.perf_counter() - t
        return version

    def drain(self) -> RecordBatch:
        """The records that arrived from the workers (never waits)."""
        batch = self.transport.drain()
        self.last_drained = len(batch)
        return batch

    def count_stale(self, drained: int, rejected: int) -> None:
        """``drained`` records reached the active sets, of which ``rejected`` no longer
        violated: updates :attr:`stale_share` (since the last publish)."""
        self._drained_since_publish += drained
        self._rejected_since_publish += rejected
        if self._drained_since_publish:
            self.stale_share = self._rejected_since_publish / self._drained_since_publish

    def close(self) -> None:
        """Stop the workers and release the transport (idempotent)."""
        self.transport.close()
