"""The multi-process engine: shared state, the inference worker pool, supervision, cleanup.

One process (the caller, the *learner*) owns every shared-memory segment and forks p − 1
inference workers (``multiprocess`` "fork" context, so the bound task and its numba kernels are
inherited, nothing is pickled). Shared state, all in one :class:`~.shm.SharedArena`:

* ``wbar`` — the published vector [w, A] (weights, then the per-example α-sums A_i), double
  buffered under two counters (:class:`~.seqlock.SharedWeights`). Workers read it **in place**:
  a chunk of inferences runs on the current buffer between ``read_begin`` and ``read_valid``; a
  chunk during which two publishes began (so its buffer was rewritten) is discarded and redone,
  so no worker ever uses a torn w (counted as ``wasted``). It is stored in the task's
  ``inference_dtype``: float32 for the sequence task, whose Viterbi then runs 1.3x faster per
  sentence on EWT XPOS (float64 for SP-IPM's mappers, which start exactly from the mixed w).
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
primal difference 10.5 s pinned vs 11.1 s unpinned. With more processes than cores nothing is
pinned. :meth:`WorkerPool.close` restores the learner thread's affinity.
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

from ..errors import DemidcdError
from ..tasks.base import RecordBatch, Task
from .monitor import CpuMonitor
from .ring import RecordRing
from .seqlock import SharedWeights
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


FLOAT32_SLACK = 1e-4  # see WorkerPool.slack


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
                 arrays: dict[str, tuple[tuple[int, ...], type]] | None = None):
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
            # rounding w to float32 moves a violation by ~1e-6 on EWT XPOS: a worker pushes and
            # counts violations only beyond this slack, so that it never keeps pushing a
            # structure that the learner's float64 w rejects (Eq. 11)
            self.slack = 1e-9 if dtype == np.float64 else FLOAT32_SLACK
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
        self.shards = balanced_shards(task.costs(), n_workers, seed)
        self.procs: list = [None] * n_workers
        self.restarts = [0] * n_workers
        self.parent_pid = os.getpid()
        self.monitor = CpuMonitor({"learner": os.getpid()}, interval=monitor_interval)
        self._last_check = 0.0
        self._closed = False
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.cores = cpus if 0 < n_workers + 1 <= len(cpus) else []  # [] = no pinning
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
        if now - self._last_check < min_interval:
            return
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
            self.ctrl[STOP] = 1
            self.monitor.stop()
            deadline = time.perf_counter() + timeout
            for p in self.procs:
                if p is None:
                    continue
                while p.is_alive() and time.perf_counter() < deadline and not hurry[0]:
                    p.join(0.02)
                if p.is_alive():
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
    def drain(self, max_records: int = 1 << 16) -> RecordBatch:
        """All records currently in the rings (never blocks)."""
        parts = [r.pop(max_records) for r in self.rings]
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

    def sweeps_completed(self) -> int:
        """Full sweeps every worker has finished (the fewest of any worker)."""
        return int(self.stats[:, SWEEPS].min()) if self.n_workers else 0

    def all_clean_since(self, version: int) -> bool:
        """Every worker finished a clean sweep that started at published version ≥ ``version``."""
        return bool((self.stats[:, CLEAN_VERSION] >= version).all())

    def command_sweep(self) -> int:
        """Barrier/job mode: ask every worker for one sweep (or job); returns the generation
        to wait for."""
        self.ctrl[GENERATION] += 1
        return int(self.ctrl[GENERATION])

    def sweep_done(self, generation: int) -> bool:
        return bool((self.stats[:, DONE_GEN] >= generation).all())

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
            os.sched_setaffinity(0, {self.cores[j + 1]})
        task, wbar, ring, st = self.task, self.wbar, self.rings[j], self.stats[j]
        ctrl, dim = self.ctrl, self.dim
        shard = self.shards[j]
        rng = np.random.default_rng([self.seed, j, self.restarts[j]])
        parent = self.parent_pid
        gen = int(st[DONE_GEN])
        # fault injection for the test suite and the soak script: raise after N chunks
        fault_after = int(os.environ.get("DEMIDCD_FAULT_WORKER_RAISE", "-1"))
        chunks = 0
        while not ctrl[STOP]:
            if os.getppid() != parent:
                return
            if self.mode != "demi":
                if ctrl[GENERATION] <= gen:
                    time.sleep(0.0005)
                    continue
                gen = int(ctrl[GENERATION])
                if self.mode == "job":
                    self.job(self, j)
                    st[DONE_GEN] = gen
                    continue
            order = rng.permutation(shard)
            v0, clean, viol_count, done = -1, True, 0, True
            t_inf = 0.0
            for s in range(0, len(order), self.chunk):
                if ctrl[STOP] or os.getppid() != parent:
                    done = False
                    break
                ex = order[s:s + self.chunk]
                chunks += 1
                if chunks == fault_after:
                    raise RuntimeError("injected fault (DEMIDCD_FAULT_WORKER_RAISE)")
                t = time.perf_counter()
                while True:
                    seq = wbar.read_begin()
                    buf = wbar.buffer(seq)
                    b = task.loss_augmented(buf[:dim], ex)
                    viol = b.violation(buf[dim:], self.C) if len(b) else np.zeros(0)
                    if wbar.read_valid(seq):
                        break
                    st[WASTED] += 1
                t_inf += time.perf_counter() - t
                st[INFER] += len(ex)
                if v0 < 0:
                    v0 = seq
                elif seq != v0:
                    clean = False
                nv = int((viol > self.tol + self.slack).sum())
                if nv:
                    clean, viol_count = False, viol_count + nv
                keep = viol > self.admit + self.slack
                if keep.any():
                    pending = b if keep.all() else b.take(keep)
                    k = 0
                    while k < len(pending):
                        k = ring.push(pending, k)
                        if k < len(pending):  # full ring: back off, never block forever
                            st[BACKOFF] += 1
                            if ctrl[STOP] or os.getppid() != parent:
                                return
                            time.sleep(0.0005)
                    st[PUSHED] += len(pending)
            self.fstats[j, 0] += t_inf
            if done:
                st[SWEEPS] += 1
                st[SWEEP_VIOL] = viol_count
                st[CLEAN_VERSION] = v0 if clean and v0 >= 0 else -1
                if self.mode == "barrier":
                    st[DONE_GEN] = gen
