"""The multi-process engine: shared state, the inference worker pool, supervision, cleanup.

One process (the caller, the *learner*) owns every shared-memory segment and forks p − 1
inference workers (``multiprocess`` "fork" context, so the bound task and its numba kernels are
inherited, nothing is pickled). Shared state, all in one :class:`~.shm.SharedArena`:

* ``wbar`` — the published vector [w, A] (weights, then the per-example α-sums A_i), double
  buffered under two counters (:class:`~.seqlock.SharedWeights`). A worker reads it per chunk
  of inferences either **in place** (validated after the chunk, redone if two publishes began
  during it: cheap inference) or through a **private copy** (expensive inference, where a
  chunk outlasts many publishes), whichever its measurements favour (:class:`_WbarReader`);
  no worker ever uses a torn w, and every chunk makes progress whatever one inference costs.
  It is stored in the task's ``inference_dtype``: float32 for the sequence task, whose Viterbi
  then runs 1.3x faster per sentence on EWT XPOS (float64 for SP-IPM's mappers, which start
  exactly from the mixed w); a worker's violation tests allow for the rounding by a slack
  relative to Σ|w̄_k φ_k| (:func:`rounding_slack`).
* one SPSC :class:`~.ring.RecordRing` per worker carrying records (i, h, Δ, φ, m) to the learner.
* ``ctrl`` (stop flag, command generation for barrier schedules) and per-worker ``stats``.

Worker schedules: ``"demi"`` loops over its shard until stopped (DEMI-DCD Algorithm 2);
``"barrier"`` runs one sweep per command generation and then waits (MS-DCD's slaves);
``"job"`` runs a caller-supplied ``job(pool, j)`` per command generation (SP-IPM's mappers),
with extra shared ``arrays`` for its inputs and outputs.
Placement: when the learner and the workers fit on the cores this process may use, each is
pinned to a core of its own (the learner's thread, and the CPU-monitor thread it starts, to the
first; worker j to the (j+1)-th), so no worker shares its core and no process migrates; measured
on EWT XPOS, p = 2, 2 cores, 3 runs each: geometric mean of the times to 2% and 1% relative
primal difference 10.5 s pinned vs 11.1 s unpinned. With more processes than cores
(oversubscription) the learner keeps the first core to itself and the workers share the others
at nice +10, so the learner is never starved: its time limit, its signal handling and its
updates go on at full speed (with 63 workers sharing its core it once took 126 s to honour a
5 s limit). :meth:`WorkerPool.close` restores the learner thread's affinity.
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
from numba import njit

from ..errors import DemidcdError
from ..tasks.base import InferenceInterrupted, RecordBatch, Task
from .monitor import CpuMonitor
from .ring import RecordRing
from .seqlock import SharedWeights, load_word, store_word
from .shm import SharedArena, sweep_stale

# ctrl words
STOP, GENERATION = 0, 1
# per-worker int64 stats columns
(INFER, PUSHED, SWEEPS, CLEAN_VERSION, WASTED, BACKOFF, DONE_GEN, ERROR, SWEEP_VIOL,
 N_STATS) = range(10)
ERR_BYTES = 8192


class WorkerError(DemidcdError):
    """An inference worker failed (the message is one line; ``details`` has the traceback)."""

    exit_code = 1

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


CHUNK_SECONDS = 0.05  # a worker's chunk holds at most this much measured inference (_WbarReader)
COPY_RATIO = 20.0  # ...and reads w̄ through a private copy when the chunk costs > 20 copies
DRAIN_RECORDS = 1 << 14  # records per drain, all rings together (WorkerPool.drain)
WORKER_NICE = 10  # oversubscribed (more processes than cores): workers yield to the learner


def balanced_shards(costs: np.ndarray, k: int, seed: int = 0) -> list[np.ndarray]:
    """Split examples into k shards of nearly equal total cost (longest-processing-time
    greedy: heaviest example first, to the lightest shard). Each shard sorted."""
    order = np.argsort(-np.asarray(costs, np.float64), kind="stable")
    load = np.zeros(k)
    owner = np.empty(len(order), np.int64)
    for e in order:
        j = int(np.argmin(load))
        owner[e] = j
        load[j] += costs[e]
    return [np.flatnonzero(owner == j).astype(np.int64) for j in range(k)]


class WorkerPool:
    """p − 1 inference workers over a shared [w, A] and one ring per worker.

    ``admit``: push a structure when its violation Δ − w̄·φ − A_i/(2C) exceeds it (Eq. 11);
    ``tol``: a sweep is *clean* when no structure violates by more than ``tol`` and every chunk
    read the same published version; ``chunk``: examples per validated in-place read.
    """

    def __init__(self, task: Task, n_workers: int, C: float, admit: float, tol: float,
                 mode: str = "demi", seed: int = 0, chunk: int = 16,
                 ring_words: int = 1 << 22, log: Callable[[str], None] | None = None,
                 debug: bool = False, max_restarts: int = 3, monitor_interval: float = 0.5,
                 job: Callable[[WorkerPool, int], None] | None = None,
                 arrays: dict[str, tuple[tuple[int, ...], type]] | None = None,
                 learner_share: bool = False):
        if mode not in ("demi", "barrier", "job") or (mode == "job") != (job is not None):
            raise ValueError(f"bad worker mode {mode!r}")
        self.job = job
        self.task, self.n_workers, self.C = task, n_workers, float(C)
        self.admit, self.tol, self.mode, self.seed = float(admit), float(tol), mode, seed
        self.chunk, self.log = max(1, int(chunk)), log or (lambda s: None)
        self.debug, self.max_restarts = debug, max_restarts
        self.dim, self.n = task.dim, task.n_examples
        sweep_stale()
        self.arena = SharedArena()
        try:
            # workers search with w̄ in the task's inference dtype (float32 for Viterbi); SP-IPM's
            # mappers start exactly from the mixed w, so its w̄ stays float64
            dtype = np.float64 if mode == "job" else task.inference_dtype
            self.wbar = SharedWeights.allocate(self.arena, self.dim + self.n, dtype=dtype)
            self.rings = [RecordRing.allocate(self.arena, f"ring{j}", ring_words)
                          for j in range(n_workers)]
            self.ctrl = self.arena.create("ctrl", (8,), np.int64)
            self.stats = self.arena.create("stats", (n_workers, N_STATS), np.int64)
            self.fstats = self.arena.create("fstats", (n_workers, 2), np.float64)
            self.err = self.arena.create("err", (n_workers, ERR_BYTES), np.uint8)
            self.arrays = {k: self.arena.create(k, shape, dt)
                           for k, (shape, dt) in (arrays or {}).items()}
        except BaseException:
            self.arena.close()
            raise
        self.stats[:, CLEAN_VERSION] = -1
        # learner_share: the learner takes a shard too (MS-DCD's master infers at the barrier)
        parts = balanced_shards(task.costs(), n_workers + int(learner_share), seed)
        self.shards = parts[:n_workers]
        self.learner_shard = parts[n_workers] if learner_share else np.zeros(0, np.int64)
        self.copy_ratio = COPY_RATIO
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
        import multiprocess as mp

        self._ctx = mp.get_context("fork")

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> WorkerPool:
        self.log(f"learner pid {os.getpid()}")
        if self.cores:
            self._affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {self.cores[0]})
        for j in range(self.n_workers):
            self._spawn(j)
        self.monitor.start()
        return self

    def worker_cores(self, j: int) -> set[int]:
        """The cores worker j may run on (see ``cores``)."""
        if not self.oversubscribed:
            return {self.cores[j + 1]}
        return set(self.cores[1:])

    def _spawn(self, j: int) -> None:
        self.stats[j, ERROR] = 0
        p = self._ctx.Process(target=self._worker_main, args=(j,), daemon=True,
                              name=f"demidcd-worker-{j + 1}")
        p.start()
        self.procs[j] = p
        self.monitor.add(f"worker {j + 1}", p.pid)
        self.log(f"worker {j + 1} pid {p.pid} (shard of {len(self.shards[j]):,} examples, "
                 f"{int(self.task.costs()[self.shards[j]].sum()):,} cost units)")

    def check(self, min_interval: float = 0.05) -> None:
        """Detect dead workers (at most every ``min_interval`` s) and restart or fail."""
        now = time.perf_counter()
        if now - self._last_check < min_interval or self.stop_requested():
            return  # after a stop request workers exit by design: nothing to restart
        self._last_check = now
        for j, p in enumerate(self.procs):
            if p is None or p.is_alive():
                continue
            code = p.exitcode
            detail = bytes(self.err[j]).rstrip(b"\0").decode(errors="replace")
            if self.stats[j, ERROR]:
                last = detail.strip().splitlines()[-1] if detail.strip() else "unknown error"
                what = f"raised {last}"
            else:
                what = f"died ({'signal ' + str(-code) if code and code < 0 else f'exit {code}'})"
            if self.debug and detail:
                self.log(f"worker {j + 1} traceback:\n{detail}")
            if self.restarts[j] >= self.max_restarts:
                raise WorkerError(f"worker {j + 1} (pid {p.pid}) {what}; gave up after "
                                  f"{self.restarts[j]} restarts", detail)
            self.restarts[j] += 1
            self.err[j] = 0
            self.log(f"worker {j + 1} (pid {p.pid}) {what}; restarting it on the same shard")
            self._spawn(j)

    def close(self, timeout: float = 2.0) -> None:
        """Stop every worker (join, then terminate, then kill) and unlink all shared memory."""
        if self._closed:
            return
        self._closed = True
        hurry = [False]
        old = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, lambda *_: hurry.__setitem__(0, True))
        except ValueError:  # not the main thread
            old = None
        try:
            store_word(self.ctrl, STOP, 1)
            self.monitor.stop()
            deadline = time.perf_counter() + timeout
            for p in self.procs:
                if p is None:
                    continue
                while p.is_alive() and time.perf_counter() < deadline and not hurry[0]:
                    p.join(0.02)
                if p.is_alive() and not hurry[0]:  # a second Ctrl-C: straight to SIGKILL
                    p.terminate()
                    p.join(0.5)
                if p.is_alive():
                    p.kill()
                    p.join(1.0)
        finally:
            self.arena.close()
            if self._affinity is not None:
                os.sched_setaffinity(0, self._affinity)
                self._affinity = None
            if old is not None:
                signal.signal(signal.SIGINT, old)

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ learner side
    def drain(self, max_records: int = DRAIN_RECORDS) -> RecordBatch:
        """Records from the rings, at most ``max_records`` in all, shared equally among the
        rings (never blocks). The bound keeps one ingest short whatever the number of workers:
        with 63 workers and an unbounded drain (64k records per ring) one ingest took seconds,
        and a 5 s time limit was honoured after 21 s."""
        per_ring = max(16, max_records // max(len(self.rings), 1))
        parts = [r.pop(per_ring) for r in self.rings]
        parts = [b for b in parts if len(b)]
        if not parts:
            return RecordBatch.empty()
        if len(parts) == 1:
            return parts[0]
        nnz = np.cumsum([0] + [int(b.ptr[-1]) for b in parts[:-1]])
        return RecordBatch(np.concatenate([b.ex for b in parts]),
                           np.concatenate([b.hash for b in parts]),
                           np.concatenate([b.delta for b in parts]),
                           np.concatenate([b.margin for b in parts]),
                           np.concatenate([parts[0].ptr[:1]] + [b.ptr[1:] + o for b, o in
                                                                 zip(parts, nnz, strict=True)]),
                           np.concatenate([b.idx for b in parts]),
                           np.concatenate([b.val for b in parts]))

    def totals(self) -> dict[str, int | float]:
        s = self.stats
        return {"inferences": int(s[:, INFER].sum()), "pushed": int(s[:, PUSHED].sum()),
                "wasted": int(s[:, WASTED].sum()), "backoffs": int(s[:, BACKOFF].sum()),
                "sweeps": self.sweeps_completed(),
                "ring": round(max((r.occupancy() for r in self.rings), default=0.0), 4),
                "infer_seconds": float(self.fstats[:, 0].sum())}

    def _words(self, col: int) -> list[int]:
        return [load_word(self.stats[j], col) for j in range(self.n_workers)]

    def sweeps_completed(self) -> int:
        """Full sweeps every worker has finished (the fewest of any worker)."""
        return min(self._words(SWEEPS)) if self.n_workers else 0

    def all_clean_since(self, version: int) -> bool:
        """Every worker finished a clean sweep that started at published version ≥ ``version``."""
        return all(v >= version for v in self._words(CLEAN_VERSION))

    def command_sweep(self) -> int:
        """Barrier/job mode: ask every worker for one sweep (or job); returns the generation
        to wait for."""
        g = load_word(self.ctrl, GENERATION) + 1
        store_word(self.ctrl, GENERATION, g)
        return g

    def sweep_done(self, generation: int) -> bool:
        """Every worker finished the sweep (or job) of ``generation`` (acquire: its records and
        SWEEP_VIOL are visible once this is true)."""
        return all(g >= generation for g in self._words(DONE_GEN))

    def sweep_violations(self) -> int:
        """Structures violating by more than tol found in the workers' last sweeps."""
        return int(self.stats[:, SWEEP_VIOL].sum())

    def stop_requested(self) -> bool:
        return bool(load_word(self.ctrl, STOP))

    def request_stop(self) -> None:
        """Ask every worker to stop (they finish or abandon their current inference)."""
        store_word(self.ctrl, STOP, 1)

    # ------------------------------------------------------------------ worker side
    def _worker_main(self, j: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner handles Ctrl-C
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            self.monitor = None  # the parent's sampling thread does not exist here
            self._worker_loop(j)
        except BaseException:  # noqa: BLE001 - reported to the learner, never swallowed
            tb = traceback.format_exc().encode()[-(ERR_BYTES - 1):]
            self.err[j, :len(tb)] = np.frombuffer(tb, np.uint8)
            self.stats[j, ERROR] = 1
            os._exit(1)
        os._exit(0)

    def _worker_loop(self, j: int) -> None:
        if self.cores:
            os.sched_setaffinity(0, self.worker_cores(j))
        if self.oversubscribed:
            os.nice(WORKER_NICE)  # the learner keeps priority on a shared core
        task, wbar, ring, st = self.task, self.wbar, self.rings[j], self.stats[j]
        ctrl = self.ctrl
        parent = self.parent_pid

        def stopped() -> bool:
            return bool(load_word(ctrl, STOP)) or os.getppid() != parent

        task.should_stop = stopped  # an ILP solver polls it and is killed on a stop
        shard = self.shards[j]
        rng = np.random.default_rng([self.seed, j, self.restarts[j]])
        gen = load_word(st, DONE_GEN)
        reader = _WbarReader(wbar, self.chunk, self.copy_ratio)
        # fault injection for the test suite and the soak script: raise after N chunks
        fault_after = int(os.environ.get("DEMIDCD_FAULT_WORKER_RAISE", "-1"))
        chunks = 0
        while not stopped():
            if self.mode != "demi":
                if load_word(ctrl, GENERATION) <= gen:
                    time.sleep(0.0005)
                    continue
                gen = load_word(ctrl, GENERATION)
                if self.mode == "job":
                    try:
                        self.job(self, j)
                    except InferenceInterrupted:  # stopped mid-job: the job wrote nothing
                        return
                    store_word(st, DONE_GEN, gen)
                    continue
            order = rng.permutation(shard)
            v0, clean, viol_count, done = -1, True, 0, True
            t_inf, s = 0.0, 0
            while s < len(order):
                if stopped():
                    done = False
                    break
                ex = order[s:s + reader.chunk_size()]
                s += len(ex)
                chunks += 1
                if chunks == fault_after:
                    raise RuntimeError("injected fault (DEMIDCD_FAULT_WORKER_RAISE)")
                t, unproven = time.perf_counter(), task.unproven
                try:
                    seq, b, viol, slack = reader.infer(task, ex, self.C, st)
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
                nv = int((viol > self.tol + slack).sum())
                if nv:
                    clean, viol_count = False, viol_count + nv
                keep = viol > self.admit + slack
                if keep.any():
                    pending = b if keep.all() else b.take(keep)
                    k = 0
                    while k < len(pending):
                        k = ring.push(pending, k)
                        if k < len(pending):  # full ring: back off, never block forever
                            st[BACKOFF] += 1
                            if stopped():
                                return
                            time.sleep(0.0005)
                    st[PUSHED] += len(pending)
            self.fstats[j, 0] += t_inf
            if done:
                st[SWEEP_VIOL] = viol_count
                store_word(st, CLEAN_VERSION, v0 if clean and v0 >= 0 else -1)
                store_word(st, SWEEPS, int(st[SWEEPS]) + 1)
                if self.mode == "barrier":
                    store_word(st, DONE_GEN, gen)  # after the ring records and SWEEP_VIOL


class _WbarReader:
    """How a worker reads w̄ for a chunk of inferences, chosen by measurement.

    * **In place** (cheap inference, e.g. Viterbi: 64 EWT sentences take ~2 ms): the chunk runs
      on the current buffer and is validated afterwards (:meth:`SharedWeights.read_valid`); a
      chunk during which two publishes began is redone (``WASTED``). Copying w̄ would cost more
      than the chunk (EWT XPOS: the 5.7M-entry float32 w̄ copies in 2–6 ms, measured on the
      2-core AMD EPYC under load).
    * **Private copy** (expensive inference, e.g. CBC at ~7 ms per CoNLL04 sentence): a
      validated copy of w̄ (:meth:`SharedWeights.read_into`, ~2 ms for CoNLL04's 9 MiB) and then
      the chunk on the copy, which no publish can invalidate, so a chunk is never redone
      whatever one inference costs. Chosen when the chunk's measured inference time exceeds
      ``copy_ratio`` copies (the copy then costs at most 1/copy_ratio of the chunk), and for
      the retry of a chunk that failed in place.

    Chunks hold up to ``max_chunk`` examples but at most :data:`CHUNK_SECONDS` of measured
    inference, so a worker re-reads w̄ at least that often (fresh structures) and checks the
    stop flag between chunks (a slow solver also polls it, see ``Task.should_stop``).
    """

    def __init__(self, wbar: SharedWeights, max_chunk: int, copy_ratio: float):
        self.wbar, self.max_chunk, self.copy_ratio = wbar, max(1, int(max_chunk)), copy_ratio
        self.per_example = 0.0  # measured seconds per inference (moving average)
        self.copy_seconds = wbar.dim * wbar.buf.dtype.itemsize / 2e9  # until measured
        self.local: np.ndarray | None = None
        self._abs = np.zeros(0)

    def chunk_size(self) -> int:
        if self.per_example <= 0.0:
            return 1  # measure one inference first
        return int(min(self.max_chunk, max(1.0, CHUNK_SECONDS / self.per_example)))

    def observe(self, seconds: float, n: int) -> None:
        per = seconds / max(n, 1)
        self.per_example = per if self.per_example <= 0.0 else 0.8 * self.per_example + 0.2 * per

    def infer(self, task: Task, ex: np.ndarray, C: float, st: np.ndarray
              ) -> tuple[int, RecordBatch, np.ndarray, np.ndarray]:
        """Loss-augmented inference on ``ex`` with a consistent w̄: (version, records, violation
        −∇D of each record (Eq. 11), and its float rounding slack)."""
        wbar = self.wbar
        dim = wbar.dim - task.n_examples
        expected = self.per_example * len(ex)
        if expected < self.copy_ratio * self.copy_seconds:
            seq = wbar.read_begin()
            buf = wbar.buffer(seq)
            b = task.loss_augmented(buf[:dim], ex)
            viol, slack = self._violation(b, buf, dim, C)
            if wbar.read_valid(seq):
                return seq, b, viol, slack
            st[WASTED] += 1
        if self.local is None:
            self.local = np.empty(wbar.dim, wbar.buf.dtype)
        t = time.perf_counter()
        seq = wbar.read_into(self.local)
        self.copy_seconds = time.perf_counter() - t
        b = task.loss_augmented(self.local[:dim], ex)
        viol, slack = self._violation(b, self.local, dim, C)
        return seq, b, viol, slack

    @staticmethod
    def _violation(b: RecordBatch, wa: np.ndarray, dim: int, C: float
                   ) -> tuple[np.ndarray, np.ndarray]:
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
