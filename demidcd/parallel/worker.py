"""The inference worker's algorithm (DEMI-DCD Algorithm 2, MS-DCD's slaves, SP-IPM's mappers),
blind to the transport that carries w̄ and the records.

A worker owns a shard of examples. In mode ``"demi"`` it sweeps its shard in random order until
stopped; in ``"barrier"`` it runs one sweep per commanded generation; in ``"job"`` it runs a
caller-supplied :data:`Job` per generation; in ``"replica"`` (shared-memory transport only) a
:data:`ReplicaJob` per generation, which reads the run's shared input arrays instead of w̄ (its
weights are a replica it keeps up to date itself) and returns records to push. A sweep goes chunk by
chunk: loss-augmented inference (Eq. 5) on a chunk with one consistent published w̄ (the transport's
:class:`WbarReader` chooses how: in place, a private copy, a local replica fed by deltas), then the
admission test (push a record when its violation Δ − w̄·φ − Ā_i/(2C) exceeds ``admit`` plus the
float rounding slack, Eq. 11; for the L1 loss Δ − w̄·φ − ξ̂_i, see :attr:`WorkerSpec.tail_C`)
and the clean-sweep bookkeeping: a sweep is *clean* when every chunk read the same version, no
record violated by more than ``tol`` + slack and no solver stopped at a time cap
(``task.unproven``); the worker then reports that version as ``CLEAN_VERSION`` (DEMI-DCD's
stop certificate) and the violators as ``SWEEP_VIOL`` (MS-DCD's).

What the algorithm needs of a transport is a :class:`WorkerEndpoint`: a stop test, a generation
counter, ``push`` for records, ``job_output``, its index ``j``, ``inputs`` (replica jobs), an int64
counter row ``st`` (columns below) and a float64 row ``fst`` (seconds of inference; the
``time.perf_counter()`` at which the worker began, after the transport's start gate). The
shared-memory transport backs them with shared arrays and rings, the Ray transport with an actor's
local arrays and outbox; both run :func:`run_worker` unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from ..primitives.seqlock import load_word, store_word
from ..tasks.base import InferenceInterrupted, RecordBatch, Task

# per-worker int64 counter columns
(INFER, PUSHED, SWEEPS, CLEAN_VERSION, WASTED, BACKOFF, DONE_GEN, ERROR, SWEEP_VIOL,
 N_STATS) = range(10)
FST_INFER_SECONDS, FST_STARTED, N_FSTATS = 0, 1, 2  # per-worker float64 columns
CHUNK_SECONDS = 0.05  # a worker's chunk holds at most this much measured inference
COPY_RATIO = 20.0  # ...and reads w̄ through a private copy when the chunk costs > 20 copies

# a job (SP-IPM's mapper): (task, consistent copy of w̄[:dim], shard, stop) → (outputs,
# inferences, pushes); ``outputs`` maps names to this worker's arrays (see WorkerSpec.outputs)
Job = Callable[[Task, np.ndarray, np.ndarray, Callable[[], bool]],
               tuple[dict[str, Any], int, int]]
# a replica job (mini-batch inference on replicated weights, linear.BatchInference): (task, the
# run's shared input arrays (see WorkerSpec.inputs), worker index, stop) → (records to push,
# inferences)
ReplicaJob = Callable[[Task, dict[str, np.ndarray], int, Callable[[], bool]],
                      tuple[RecordBatch, int]]


@dataclass
class WorkerSpec:
    """What every worker of a run does (the same under every transport).

    ``admit``: push a structure when its violation exceeds it (Eq. 11); ``tol``: the clean-sweep
    threshold; ``chunk``: examples per consistent read of w̄ at most; ``outputs``: a job's
    per-worker outputs, name → (shape, dtype); ``inputs``: a replica job's shared input arrays,
    name → (shape, dtype), written by the learner before each command (shared memory only).
    ``loss``: the learner's SSVM loss, which sets what the tail Ā of w̄ = [w̄, Ā] holds
    (:attr:`tail_C`)."""

    mode: str
    C: float
    admit: float = 0.0
    tol: float = 0.0
    seed: int = 0
    chunk: int = 16
    job: Job | ReplicaJob | None = None
    outputs: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    inputs: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)
    loss: str = "l2"

    def __post_init__(self) -> None:
        if self.mode not in ("demi", "barrier", "job", "replica") or \
                (self.mode in ("job", "replica")) != (self.job is not None):
            raise ValueError(f"bad worker mode {self.mode!r}")
        if self.loss not in ("l1", "l2"):
            raise ValueError(f"bad loss {self.loss!r}")
        self.chunk = max(1, int(self.chunk))

    @property
    def tail_C(self) -> float:
        """The C of the violation's tail term Ā_i/(2C) (:func:`violation_and_slack`): ``C``
        for the L2 loss, whose learner publishes A_i; 0.5 for the L1 loss, whose learner
        publishes ξ̂_i, the example's hinge loss on its active set, so that the violation is
        Δ − w̄·φ − ξ̂_i (the L1 loss's A_i/(2C) term vanishes; ξ̂_i takes its place, see
        :meth:`~demidcd.solvers.activeset.ActiveSets.violation`)."""
        return self.C if self.loss == "l2" else 0.5

    def wbar_dtype(self, task: Task) -> type:
        """Workers search with w̄ in the task's inference dtype (float32 for Viterbi); SP-IPM's
        mappers start exactly from the mixed w, so its w̄ stays float64."""
        return np.float64 if self.mode == "job" else task.inference_dtype


class WorkerEndpoint:
    """A worker's view of its transport (see the module docstring)."""

    st: np.ndarray  # int64[N_STATS]
    fst: np.ndarray  # float64[N_FSTATS]
    j: int  # this worker's index
    inputs: dict[str, np.ndarray]  # the run's shared inputs (replica jobs; read only)

    def stopped(self) -> bool:
        raise NotImplementedError

    def generation(self) -> int:
        """The latest commanded generation (barrier and job modes) whose w̄ is readable."""
        raise NotImplementedError

    def push(self, batch: RecordBatch) -> bool:
        """Send records to the learner; False if a stop came while waiting for room."""
        raise NotImplementedError

    def job_output(self, outputs: dict[str, Any]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Counters changed at the end of a sweep or job (a transport may wake the learner)."""


class WbarReader:
    """Reads w̄ for a chunk of inferences (transport-specific subclasses), and sizes chunks:
    up to ``max_chunk`` examples but at most :data:`CHUNK_SECONDS` of measured inference, so a
    worker re-reads w̄ at least that often (fresh structures) and checks the stop flag between
    chunks (a slow solver also polls it, see ``Task.should_stop``)."""

    def __init__(self, max_chunk: int):
        self.max_chunk = max(1, int(max_chunk))
        self.per_example = 0.0  # measured seconds per inference (moving average)

    def chunk_size(self) -> int:
        if self.per_example <= 0.0:
            return 1  # measure one inference first
        return int(min(self.max_chunk, max(1.0, CHUNK_SECONDS / self.per_example)))

    def observe(self, seconds: float, n: int) -> None:
        per = seconds / max(n, 1)
        self.per_example = per if self.per_example <= 0.0 else 0.8 * self.per_example + 0.2 * per

    def infer(self, task: Task, ex: np.ndarray, C: float, st: np.ndarray
              ) -> tuple[int, RecordBatch, np.ndarray, np.ndarray]:
        """Loss-augmented inference on ``ex`` with one consistent w̄: (its version, records,
        violation of each record (Eq. 11), and its float rounding slack)."""
        raise NotImplementedError

    def read_copy(self, out: np.ndarray) -> int:
        """A consistent copy of w̄ into ``out`` (float64[len(w̄)]); returns its version."""
        raise NotImplementedError


def violation_and_slack(b: RecordBatch, wa: np.ndarray, dim: int, C: float
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Each record's violation under ``wa`` = [w̄, Ā] (Eq. 11) and its rounding slack."""
    if not len(b):
        return np.zeros(0), np.zeros(0)
    viol = b.violation(wa[dim:], C)
    return viol, rounding_slack(wa, dim, b.ex, b.ptr, b.idx, b.val, C)


@njit(cache=True, nogil=True)
def rounding_slack(wa: np.ndarray, dim: int, ex: np.ndarray, ptr: np.ndarray, idx: np.ndarray,
                   val: np.ndarray, C: float) -> np.ndarray:
    """Bound on how far rounding [w, A] to ``wa``'s dtype moves each record's violation
    Δ − w·φ − A_i/(2C) (Eq. 11) from its value under the learner's float64 [w, A]:
    4u(Σ_k |w̄_k φ_k| + |Ā_i|/(2C)) + 1e-12, u the unit roundoff of ``wa`` (2^-24 for float32,
    2^-53 for float64). Relative to the size of w̄·φ, so a worker's test neither keeps pushing a
    structure the learner rejects nor blocks the stop rule, however large w grows."""
    u = np.finfo(wa.dtype).eps / 2.0
    out = np.empty(ex.shape[0])
    for r in range(ex.shape[0]):
        acc = abs(np.float64(wa[dim + ex[r]])) / (2.0 * C)
        for q in range(ptr[r], ptr[r + 1]):
            acc += abs(np.float64(wa[idx[q]]) * val[q])
        out[r] = 4.0 * u * acc + 1e-12
    return out


def run_worker(task: Task, spec: WorkerSpec, shard: np.ndarray, reader: WbarReader,
               ep: WorkerEndpoint, rng: np.random.Generator) -> None:
    """The worker loop: until ``ep.stopped()``, sweep (``"demi"``), or sweep / run the job once per
    new generation (``"barrier"``, ``"job"``, ``"replica"``). Counters go to ``ep.st`` (DONE_GEN,
    SWEEPS and CLEAN_VERSION with release stores, after the records and SWEEP_VIOL they cover)."""
    st, stopped = ep.st, ep.stopped
    task.should_stop = stopped  # an ILP solver polls it and is killed on a stop
    gen = load_word(st, DONE_GEN)
    tol, admit, C = spec.tol, spec.admit, spec.tail_C
    while not stopped():
        if spec.mode != "demi":
            g = ep.generation()
            if g <= gen:
                time.sleep(0.0005)
                continue
            gen = g
            if spec.mode == "replica":
                try:
                    b, inferences = spec.job(task, ep.inputs, ep.j, stopped)
                except InferenceInterrupted:
                    return
                st[INFER] += inferences
                if len(b):
                    if not ep.push(b):
                        return
                    st[PUSHED] += len(b)
                store_word(st, DONE_GEN, gen)  # after the records
                ep.flush()
                continue
            if spec.mode == "job":
                w = np.empty(task.dim + task.n_examples)
                reader.read_copy(w)
                try:
                    out, inferences, pushes = spec.job(task, w[:task.dim], shard, stopped)
                except InferenceInterrupted:  # stopped mid-job: the job wrote nothing
                    return
                st[INFER] += inferences
                st[PUSHED] += pushes
                ep.job_output(out)  # also after a stop: the learner mixes a partial round
                store_word(st, DONE_GEN, gen)
                ep.flush()
                continue
        if not len(shard) and spec.mode == "demi":  # nothing to sweep (more processes than
            time.sleep(0.01)  # examples): idle; the transport leaves it out of the stop rule
            continue  # (a barrier's empty sweep ends at once and reports its generation)
        order = rng.permutation(shard)
        v0, clean, viol_count, done = -1, True, 0, True
        t_inf, s = 0.0, 0
        while s < len(order):
            if stopped():
                done = False
                break
            ex = order[s:s + reader.chunk_size()]
            s += len(ex)
            t, unproven = time.perf_counter(), task.unproven
            try:
                seq, b, viol, slack = reader.infer(task, ex, C, st)
            except InferenceInterrupted:
                done = False
                break
            dt = time.perf_counter() - t
            t_inf += dt
            reader.observe(dt, len(ex))
            st[INFER] += len(ex)
            if v0 < 0:
                v0 = seq
            elif seq != v0:
                clean = False
            if task.unproven != unproven:  # a solver stopped at its time cap
                clean = False
            nv = int((viol > tol + slack).sum())
            if nv:
                clean, viol_count = False, viol_count + nv
            keep = viol > admit + slack
            if keep.any():
                pending = b if keep.all() else b.take(keep)
                if not ep.push(pending):
                    return
                st[PUSHED] += len(pending)
        ep.fst[FST_INFER_SECONDS] += t_inf
        if done:
            st[SWEEP_VIOL] = viol_count
            store_word(st, CLEAN_VERSION, v0 if clean and v0 >= 0 else -1)
            store_word(st, SWEEPS, int(st[SWEEPS]) + 1)
            if spec.mode == "barrier":
                store_word(st, DONE_GEN, gen)  # after the records and SWEEP_VIOL
            ep.flush()

