"""The shared-memory transport (:class:`~demidcd.parallel.transport.Transport` on one machine):
shared state, the forked inference workers, supervision, cleanup.

One process (the caller, the *learner process*) owns every shared-memory segment and forks p − 1
inference workers (``multiprocess`` "fork" context, so the bound task and its numba kernels are
inherited, nothing is pickled). Shared state, all in one :class:`~.shm.SharedArena`:

* ``wbar`` — the published vector [w, A] (weights, then the per-example α-sums A_i), double
  buffered under two counters (:class:`~.seqlock.SharedWeights`). A worker reads it per chunk
  of inferences either **in place** (validated after the chunk, redone if two publishes began
  during it: cheap inference) or through a **private copy** (expensive inference, where a
  chunk outlasts many publishes), whichever its measurements favour (:class:`_WbarReader`);
  no worker ever uses a torn w, and every chunk makes progress whatever one inference costs.
  It is stored in the task's ``inference_dtype``: float32 for the sequence task, whose Viterbi
  then reads half the bytes (float64 for SP-IPM's mappers, which start
  exactly from the mixed w); a worker's violation tests allow for the rounding by a slack
  relative to Σ|w̄_k φ_k| (:func:`rounding_slack`).
* one SPSC :class:`~.ring.RecordRing` per worker carrying records (i, h, Δ, φ, m) to the learner.
* ``ctrl`` (stop flag, command generation for barrier schedules) and per-worker ``stats``.

Each worker runs :func:`demidcd.parallel.worker.run_worker` (modes ``"demi"``, ``"barrier"``,
``"job"``, ``"replica"``) over a :class:`_ShmEndpoint` (the stop flag, the command generation,
its ring, its row of ``stats``; a job's outputs go to shared arrays ``outputs[name][j]``, a
replica job reads the shared arrays ``inputs[name]`` the learner writes before a command).
Placement: when the learner and the workers fit on the cores this process may use, each is
pinned to a core of its own (the learner's thread, and the CPU-monitor thread it starts, to the
first; worker j to the (j+1)-th), so no worker shares its core and no process migrates
(benchmarks/README.md, "Evidence behind the defaults and design choices"). With more processes
than cores
(oversubscription) the learner process keeps the first core to itself and the workers share
the others at nice +10, so it is never starved: its time limit, its signal handling and its
updates go on at full speed. :meth:`WorkerPool.close` first gives the learner's thread and the
workers every core back.
Memory ordering: every control word one process writes and another reads (the stop flag, the
command generation, a worker's sweep count, clean version and done generation) is written with
:func:`~.seqlock.store_word` (release) and read with :func:`~.seqlock.load_word` (acquire),
fenced LLVM loads and stores; a worker stores ``DONE_GEN`` after its ring records and
``SWEEP_VIOL``, so a learner that sees the generation sees them. Statistics counters (``INFER``,
``PUSHED``, ...) are plain aligned 8-byte stores, never torn, read only for reporting.
Supervision (:meth:`WorkerPool.check`): a worker that died (signal, exception) is restarted on
the same shard and ring (a ring's head only moves after a whole record is written, so a killed
producer never leaves a torn record); an exception is reported, with its traceback under
``--debug``; a worker that raises again after ``max_restarts`` restarts stops training with a
one-line error. Workers exit by themselves when the stop flag is set or their parent dies.
Start-up (:meth:`WorkerPool.start`): the learner's clock is already running (the time limit is
the wall time of training, spawning included); the workers are forked behind a closed
:class:`StartGate` and wait on it, using no CPU, until the last one is forked. Forked workers
that started at once took the cores from the learner process still forking the others, and
inferred before the clock started. Once the time limit runs out no more workers are forked and
those forked are told to stop.
:meth:`WorkerPool.close` joins with a timeout, then terminates and kills, then unlinks every
segment; it runs in ``finally`` on every exit path, and a second Ctrl-C only makes it hurry.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable

import numpy as np

from ..errors import WorkerError
from ..primitives.monitor import CpuMonitor
from ..primitives.pages import release_tail
from ..primitives.ring import RING_WORDS, RecordRing, fit_ring_words
from ..primitives.seqlock import LINE_SHIFT, SharedWeights, load_word, store_word
from ..primitives.shm import (
    SHM_DIR,
    SharedArena,
    free_bytes,
    require_space,
    segment_bytes,
)
from ..tasks.base import RecordBatch, Task
from .supervisor import ProcessGroup, StartGate
from .transport import Transport, balanced_shards, concat_batches
from .worker import (
    BACKOFF,
    CHUNK_SECONDS,
    CLEAN_VERSION,
    COPY_RATIO,
    DONE_GEN,
    ERROR,
    FST_INFER_SECONDS,
    FST_STARTED,
    N_FSTATS,
    N_STATS,
    WASTED,
    WbarReader,
    WorkerEndpoint,
    WorkerSpec,
    rounding_slack,
    run_worker,
    violation_and_slack,
)

__all__ = ["WorkerPool", "WorkerError", "StartGate", "balanced_shards", "rounding_slack",
           "CHUNK_SECONDS", "COPY_RATIO"]

# ctrl words
STOP, GENERATION = 0, 1
ERR_BYTES = 8192
DRAIN_RECORDS = 1 << 14  # records per drain, all rings together (WorkerPool.drain)
WORKER_NICE = 10  # oversubscribed (more processes than cores): workers yield to the learner


class WorkerPool(ProcessGroup, Transport):
    """The shared-memory transport: p − 1 forked workers over a shared [w, A] and one ring per
    worker (see the module docstring)."""

    error_column = ERROR

    def __init__(self, task: Task, n_workers: int, spec: WorkerSpec,
                 ring_words: int = RING_WORDS, log: Callable[[str], None] | None = None,
                 debug: bool = False, max_restarts: int = 3, monitor_interval: float = 0.5,
                 learner_share: bool = False):
        self.task, self.n_workers, self.spec = task, n_workers, spec
        self.log = log or (lambda s: None)
        self.debug, self.max_restarts = debug, max_restarts
        self.dim, self.n = task.dim, task.n_examples
        arrays = {"ctrl": ((8,), np.int64), "stats": ((n_workers, N_STATS), np.int64),
                  "fstats": ((n_workers, N_FSTATS), np.float64),
                  "err": ((n_workers, ERR_BYTES), np.uint8),
                  **{f"out-{k}": ((n_workers, *shape), dt) for k, (shape, dt) in
                     spec.outputs.items()},
                  **{f"in-{k}": (shape, dt) for k, (shape, dt) in spec.inputs.items()}}
        other = (SharedWeights.footprint(self.dim + self.n, spec.wbar_dtype(task))
                 + sum(segment_bytes(*a) for a in arrays.values()))
        free = free_bytes()
        fitted = fit_ring_words(ring_words, n_workers, other, free)
        if fitted < ring_words:
            self.log(f"rings of {RecordRing.footprint(fitted) / 2**20:.0f} MiB, not "
                     f"{RecordRing.footprint(ring_words) / 2**20:.0f} MiB, to fit {SHM_DIR} "
                     f"({(free or 0) / 2**20:.0f} MiB free)")
            ring_words = fitted
        require_space(other + n_workers * RecordRing.footprint(ring_words), n_workers + 1)
        self.arena = SharedArena()
        try:
            self.wbar = SharedWeights.allocate(self.arena, self.dim + self.n,
                                               dtype=spec.wbar_dtype(task))
            self.rings = [RecordRing.allocate(self.arena, f"ring{j}", ring_words)
                          for j in range(n_workers)]
            made = {key: self.arena.create(key, *a) for key, a in arrays.items()}
            self.ctrl, self.stats, self.fstats, self.err = (
                made[k] for k in ("ctrl", "stats", "fstats", "err"))
            self.outputs = {k: made[f"out-{k}"] for k in spec.outputs}
            self.inputs = {k: made[f"in-{k}"] for k in spec.inputs}
        except BaseException:
            self.arena.close()
            raise
        self.stats[:, CLEAN_VERSION] = -1
        # learner_share: the learner takes a shard too (MS-DCD's master infers at the barrier)
        parts = balanced_shards(task.costs(), n_workers + int(learner_share), spec.seed)
        self.shards = parts[:n_workers]
        self.learner_shard = parts[n_workers] if learner_share else np.zeros(0, np.int64)
        self.copy_ratio = COPY_RATIO
        self.bytes_out = 0  # w̄ bytes copied by publishes
        self.procs: list = [None] * n_workers
        self.restarts = [0] * n_workers
        self.parent_pid = os.getpid()
        self.monitor = CpuMonitor({"learner": os.getpid()}, interval=monitor_interval)
        self._last_check = 0.0
        self._closed = False
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        # one core each when everyone fits; otherwise the learner keeps the first core to
        # itself and the workers share the others at a lower priority (WORKER_NICE), so the
        # learner never starves and honours the time limit and signals at any --threads
        self.cores = cpus if len(cpus) >= 2 and n_workers >= 1 else []  # [] = no pinning
        self.oversubscribed = n_workers + 1 > max(len(cpus), 1)
        self._affinity: set[int] | None = None
        self._gate: StartGate | None = None
        import multiprocess as mp

        self._ctx = mp.get_context("fork")

    # ------------------------------------------------------------------ lifecycle
    def start(self, expired: Callable[[], bool] | None = None) -> WorkerPool:
        """Fork the workers behind a :class:`StartGate`, then let them all go; ``expired``
        (the learner's clock, already running): once true no more workers are forked and the
        forked ones are told to stop."""
        self.log(f"learner pid {os.getpid()}")
        if self.cores:
            self._affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {self.cores[0]})
        self._fork_all(self.n_workers, expired, self._spawn, self.request_stop)
        return self

    def worker_cores(self, j: int) -> set[int]:
        """The cores worker j may run on (see ``cores``)."""
        if not self.oversubscribed:
            return {self.cores[j + 1]}
        return set(self.cores[1:])

    def _spawn(self, j: int) -> None:
        self.stats[j, ERROR] = 0
        self._start(j, self._worker_main, f"shard of {len(self.shards[j]):,} examples, "
                    f"{int(self.task.costs()[self.shards[j]].sum()):,} cost units")

    def check(self, min_interval: float = 0.05) -> None:
        """Detect dead workers (at most every ``min_interval`` s) and restart or fail."""
        now = time.perf_counter()
        if now - self._last_check < min_interval or self.stop_requested():
            return  # after a stop request workers exit by design: nothing to restart
        self._last_check = now
        for j, p in enumerate(self.procs):
            if p is None or p.is_alive():
                continue
            what = self._failure(j)
            self.restarts[j] += 1
            self.err[j] = 0
            self.log(f"worker {j + 1} (pid {p.pid}) {what}; restarting it on the same shard")
            self._spawn(j)

    def close(self, timeout: float = 2.0) -> None:
        """Stop every worker (join, then terminate, then kill) and unlink all shared memory;
        training is over, so the last steps may use every core (:meth:`_unpin`)."""
        self._stop_all(timeout, lambda: store_word(self.ctrl, STOP, 1), release=self._unpin)

    def _unpin(self) -> None:
        """Give the learner's thread and the live workers every core this process had: after
        training, so that the last memory reading and the workers' exit do not queue on one
        core each (63 workers at nice +10 on one core of a loaded machine)."""
        if self._affinity is None:
            return
        cores, self._affinity = self._affinity, None
        os.sched_setaffinity(0, cores)
        for p in self.procs:
            if p is not None and p.pid is not None:
                try:
                    os.sched_setaffinity(p.pid, cores)
                except OSError:  # exited meanwhile
                    pass

    # ------------------------------------------------------------------ learner side
    def publish(self, wa: np.ndarray, marks: np.ndarray | None = None, tail: int = 0) -> int:
        """Write ``wa`` into w̄'s idle buffer (only the marked lines of ``wa[:tail]``, see
        :meth:`SharedWeights.publish_lines`) and flip to it."""
        item = self.wbar.buf.dtype.itemsize
        if marks is None:
            self.wbar.publish(wa, force=True)
            self.bytes_out += wa.shape[0] * item
        else:
            self.wbar.publish_lines(wa, marks, tail, force=True)
            lines = int(np.count_nonzero(marks))  # the lines copied
            self.bytes_out += ((lines << LINE_SHIFT) + wa.shape[0] - tail) * item
        return self.wbar.version()

    def version(self) -> int:
        return self.wbar.version()

    def drain(self, max_records: int = DRAIN_RECORDS) -> RecordBatch:
        """Records from the rings, at most ``max_records`` in all, shared equally among the
        rings (never blocks). The bound keeps one ingest short whatever the number of workers:
        an unbounded drain over many rings would delay the time limit."""
        per_ring = max(16, max_records // max(len(self.rings), 1))
        return concat_batches([r.pop(per_ring) for r in self.rings])

    def _column(self, col: int) -> np.ndarray:
        return np.array([load_word(self.stats[j], col) for j in range(self.n_workers)],
                        np.int64)

    def infer_seconds(self) -> float:
        return float(self.fstats[:, FST_INFER_SECONDS].sum())

    def worker_starts(self) -> np.ndarray:
        return self.fstats[:, FST_STARTED].copy()

    def occupancy(self) -> float:
        return max((r.occupancy() for r in self.rings), default=0.0)

    def traffic(self) -> dict[str, float]:
        """Ring bytes (every word ever written) and w̄ bytes (lines copied per publish)."""
        return {"bytes_in": 8.0 * sum(int(r.ctrl[0]) for r in self.rings),
                "bytes_out": float(self.bytes_out)}

    def command(self) -> int:
        g = load_word(self.ctrl, GENERATION) + 1
        store_word(self.ctrl, GENERATION, g)
        return g

    def done(self, generation: int) -> bool:
        """Acquire: the records and SWEEP_VIOL of ``generation`` are visible once true."""
        return bool((self._column(DONE_GEN) >= generation).all())

    def results(self) -> dict[str, np.ndarray]:
        return self.outputs

    def stop_requested(self) -> bool:
        return bool(load_word(self.ctrl, STOP))

    def request_stop(self) -> None:
        store_word(self.ctrl, STOP, 1)

    # ------------------------------------------------------------------ worker side
    def _worker_main(self, j: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner handles Ctrl-C
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # the CLI's stop-with-parent is not ours
        try:
            self.monitor = None  # the parent's sampling thread does not exist here
            release_learner_only(self.learner_only)
            if self.cores:
                os.sched_setaffinity(0, self.worker_cores(j))
            if self.oversubscribed:
                os.nice(WORKER_NICE)  # the learner keeps priority on a shared core
            if self._gate is not None:
                self._gate.wait()  # until every worker is forked
            if self.stop_requested():
                os._exit(0)
            if self.fstats[j, FST_STARTED] == 0.0:  # the first start (not a restart)
                self.fstats[j, FST_STARTED] = time.perf_counter()
            rng = np.random.default_rng([self.spec.seed, j, self.restarts[j]])
            reader = _WbarReader(self.wbar, self.spec.chunk, self.copy_ratio)
            run_worker(self.task, self.spec, self.shards[j], reader, _ShmEndpoint(self, j), rng)
        except BaseException:  # noqa: BLE001 - reported to the learner, never swallowed
            tb = traceback.format_exc().encode()[-(ERR_BYTES - 1):]
            self.err[j, :len(tb)] = np.frombuffer(tb, np.uint8)
            self.stats[j, ERROR] = 1
            os._exit(1)
        os._exit(0)


def release_learner_only(arrays: Callable[[], list[np.ndarray]] | None) -> int:
    """In a forked worker: hand back the whole pages of the learner's own arrays
    (``Transport.learner_only``, called here: the arrays as they were at the fork), which the
    worker never reads. A page the learner had touched before the fork is shared until the
    learner writes it; then the learner holds its copy and the worker the old one, for nothing
    (the active sets' slot table, filled with -1 before the fork; issue 56 defect 9,
    benchmarks/README.md). Returns the bytes handed back."""
    if arrays is None:
        return 0
    return sum(release_tail(a, 0, a.size) for a in arrays())


class _ShmEndpoint(WorkerEndpoint):
    """Worker j's side of the shared-memory transport."""

    def __init__(self, pool: WorkerPool, j: int):
        self.ctrl, self.ring, self.j = pool.ctrl, pool.rings[j], j
        self.st, self.fst, self.inputs = pool.stats[j], pool.fstats[j], pool.inputs
        self.outputs, self.parent = pool.outputs, pool.parent_pid

    def stopped(self) -> bool:
        return bool(load_word(self.ctrl, STOP)) or os.getppid() != self.parent

    def generation(self) -> int:
        return load_word(self.ctrl, GENERATION)

    def push(self, batch: RecordBatch) -> bool:
        k = 0
        while k < len(batch):
            k = self.ring.push(batch, k)
            if k < len(batch):  # full ring: back off, never block forever
                self.st[BACKOFF] += 1
                if self.stopped():
                    return False
                time.sleep(0.0005)
        return True

    def job_output(self, outputs: dict) -> None:
        for k, v in outputs.items():
            self.outputs[k][self.j] = v


class _WbarReader(WbarReader):
    """How a worker reads w̄ for a chunk of inferences, chosen by measurement.

    * **In place** (cheap inference, e.g. Viterbi): the chunk runs on the current buffer and
      is validated afterwards (:meth:`SharedWeights.read_valid`); a chunk during which two
      publishes began is redone (``WASTED``). Copying w̄ would cost as much as the chunk.
    * **Private copy** (expensive inference, e.g. CBC): a validated copy of w̄
      (:meth:`SharedWeights.read_into`) and then
      the chunk on the copy, which no publish can invalidate, so a chunk is never redone
      whatever one inference costs. Chosen when the chunk's measured inference time exceeds
      ``copy_ratio`` copies (the copy then costs at most 1/copy_ratio of the chunk), and for
      the retry of a chunk that failed in place.
    """

    def __init__(self, wbar: SharedWeights, max_chunk: int, copy_ratio: float):
        super().__init__(max_chunk)
        self.wbar, self.copy_ratio = wbar, copy_ratio
        self.copy_seconds = wbar.dim * wbar.buf.dtype.itemsize / 2e9  # until measured
        self.local: np.ndarray | None = None

    def infer(self, task: Task, ex: np.ndarray, C: float, st: np.ndarray
              ) -> tuple[int, RecordBatch, np.ndarray, np.ndarray]:
        wbar = self.wbar
        dim = wbar.dim - task.n_examples
        expected = self.per_example * len(ex)
        if expected < self.copy_ratio * self.copy_seconds:
            seq = wbar.read_begin()
            buf = wbar.buffer(seq)
            b = task.loss_augmented(buf[:dim], ex)
            viol, slack = violation_and_slack(b, buf, dim, C)
            if wbar.read_valid(seq):
                return seq, b, viol, slack
            st[WASTED] += 1
        if self.local is None:
            self.local = np.empty(wbar.dim, wbar.buf.dtype)
        t = time.perf_counter()
        seq = wbar.read_into(self.local)
        self.copy_seconds = time.perf_counter() - t
        b = task.loss_augmented(self.local[:dim], ex)
        viol, slack = violation_and_slack(b, self.local, dim, C)
        return seq, b, viol, slack

    def read_copy(self, out: np.ndarray) -> int:
        return self.wbar.read_into(out)
