"""The Ray transport: inference workers as Ray actors on any node of a cluster, the learner in
this (driver) process; the same :func:`~demidcd.parallel.worker.run_worker` as shared memory.

* **Start-up.** Without an address a local Ray instance is started (and shut down fully on
  close, leaving no Ray process; a :class:`~.watchdog.Watchdog` kills what it started should
  this process die, the agents included); with ``address`` the run joins that cluster and
  only disconnects (an address nothing answers at is one error line, :func:`probe_address`).
  ``ray.init`` runs in a thread of its own, which lives until close (Ray's processes die
  with the thread that started them), while this one waits: a SIGINT or SIGTERM stops the
  start at once, and a start that does not end within a bound is an error. The task is
  shipped once through the object store (``ray.put``); each actor gets
  its shard, a replica of w̄ and runs its worker loop in a background thread; its pid is logged
  (``worker K pid N``).
* **w̄ goes out as versioned deltas** (:meth:`RayTransport.publish`): the driver keeps the last
  published vector ``sent`` (in the task's inference dtype) and compares it with [w, A] on the
  lines the learner marked (the only lines of w that can be non-zero) and all of A; the entries
  that changed after rounding travel as (indices, values), or the whole vector when that is
  smaller. One ``ray.put`` per publish and one non-blocking actor call per actor. An actor
  queues the payloads by version and its worker thread applies them between chunks, in version
  order, so every chunk runs on one consistent version (:class:`_Replica`).
* **Records come back in batches of numpy arrays**: a worker's pushes go to its actor's outbox;
  the driver keeps one ``fetch`` call in flight per actor (it returns once records or a sweep
  end are there, or after 50 ms) and collects the finished ones with
  ``ray.wait(..., timeout=0)``, so the learner never waits for an actor. A fetch also carries the
  actor's counters, taken before its records, so a learner that sees a sweep or generation done
  has its records too.
* **Supervision.** A fetch that fails (the actor's process or node died) or reports an error of
  the worker thread restarts the actor on the same shard, with the current w̄ and counters, and
  re-issues an outstanding barrier/job command; after ``max_restarts`` restarts of one worker
  training stops with :class:`~demidcd.parallel.transport.WorkerError`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from ..errors import DemidcdError, OptionError, WorkerError
from ..primitives.monitor import CpuMonitor
from ..primitives.ring import RING_WORDS
from ..primitives.seqlock import LINE_SHIFT
from ..tasks.base import RecordBatch, Task
from .transport import Transport, balanced_shards, concat_batches
from .watchdog import Watchdog
from .worker import (
    BACKOFF,
    CLEAN_VERSION,
    DONE_GEN,
    N_FSTATS,
    N_STATS,
    WbarReader,
    WorkerEndpoint,
    WorkerSpec,
    run_worker,
    violation_and_slack,
)

__all__ = ["RayTransport", "require_ray", "probe_address", "FETCH_WAIT"]

FETCH_WAIT = 0.05  # seconds an actor's fetch waits for records before returning empty
DRAIN_RECORDS = 1 << 14  # records per drain at most (as the shared-memory transport)
FETCH_GAP = 0.005  # ...and records wait at most this long for more to join their batch
PROBE_SECONDS = 5.0  # a cluster's address that accepts no TCP connection within this: refused
CONNECT_SECONDS = 30.0  # ray.init(address=...) that has not returned by then: an error
LOCAL_START_SECONDS = 120.0  # a local Ray instance not started by then: an error


def require_ray() -> Any:
    """The ``ray`` module, or a one-line :class:`OptionError` (exit 2) when it is missing."""
    try:
        import ray
    except ImportError:
        raise OptionError("--backend ray needs Ray: pip install 'demidcd[ray]' "
                          "(ray>=2.9)") from None
    return ray


def probe_address(address: str, timeout: float = PROBE_SECONDS) -> None:
    """A one-line :class:`DemidcdError` when nothing accepts a TCP connection at ``address``
    (``host:port``, or ``ray://host:port``) within ``timeout`` s: Ray itself retried an
    unreachable address for minutes (it hung, and ignored Ctrl-C). ``auto``, ``local`` and
    addresses without a port are left to Ray."""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise DemidcdError(f"cannot join the Ray cluster at {address}: {why} (is a Ray head "
                           f"running there? `ray start --head` prints its address)") from None


# ---------------------------------------------------------------------------------- driver
@njit(cache=True, nogil=True, inline="always")
def _diff_range(sent: np.ndarray, wa: np.ndarray, lo: int, hi: int, out_idx: np.ndarray,
                out_val: np.ndarray, n: int) -> int:
    """sent ← wa on [lo, hi), recording changed entries after the first n; the new count."""
    cap = out_idx.shape[0]
    for j in range(lo, hi):
        old = sent[j]
        sent[j] = wa[j]
        if sent[j] != old:
            if n < cap:
                out_idx[n] = j
                out_val[n] = sent[j]
            n += 1
    return n


@njit(cache=True, nogil=True)
def _diff_lines(sent: np.ndarray, wa: np.ndarray, lines: np.ndarray, tail: int,
                out_idx: np.ndarray, out_val: np.ndarray) -> int:
    """sent ← wa (rounded to sent's dtype) on the marked lines of wa[:tail] and all of
    wa[tail:]; records the entries whose rounded value changed in out_idx/out_val and returns
    their count (counting on, without recording, past the arrays' capacity)."""
    n = 0
    n_lines = lines.shape[0]
    lines64 = lines.view(np.uint64)
    k = 0
    while k < n_lines:
        if (k & 7) == 0 and lines64[k >> 3] == 0:
            k += 8
            continue
        if lines[k] != 0:
            n = _diff_range(sent, wa, k << LINE_SHIFT, min((k + 1) << LINE_SHIFT, tail),
                            out_idx, out_val, n)
        k += 1
    return _diff_range(sent, wa, tail, wa.shape[0], out_idx, out_val, n)


@njit(cache=True, nogil=True)
def _apply_delta(w: np.ndarray, idx: np.ndarray, val: np.ndarray) -> None:
    for q in range(idx.shape[0]):
        w[idx[q]] = val[q]


def warmup(dtype: type = np.float32) -> None:
    """Compile (or load from cache) the delta kernels."""
    sent, wa = np.zeros(16, dtype), np.ones(16)
    lines = np.ones(8, np.uint8)
    oi, ov = np.zeros(16, np.int64), np.zeros(16, dtype)
    n = _diff_lines(sent, wa, lines, 8, oi, ov)
    _apply_delta(sent, oi[:n], ov[:n])


class RayTransport(Transport):
    """Inference workers as Ray actors (see the module docstring)."""

    def __init__(self, task: Task, n_workers: int, spec: WorkerSpec,
                 ring_words: int = RING_WORDS, log: Callable[[str], None] | None = None,
                 debug: bool = False, max_restarts: int = 3, monitor_interval: float = 0.5,
                 learner_share: bool = False, address: str | None = None):
        if spec.mode == "replica" or spec.inputs:
            raise OptionError("replica jobs (pegasos and adagrad with --threads > 1) run on "
                              "--backend shm only")
        self.task, self.n_workers, self.spec = task, n_workers, spec
        self.log = log or (lambda s: None)
        self.debug, self.max_restarts, self.address = debug, max_restarts, address
        self.ring_words = int(ring_words)
        parts = balanced_shards(task.costs(), n_workers + int(learner_share), spec.seed)
        self.shards = parts[:n_workers]
        self.learner_shard = parts[n_workers] if learner_share else np.zeros(0, np.int64)
        self.dtype = np.dtype(spec.wbar_dtype(task))
        size = task.dim + task.n_examples
        self.sent = np.zeros(size, self.dtype)  # w̄ as last published (every actor's target)
        cap = max(16, size * self.dtype.itemsize // (8 + self.dtype.itemsize))
        self._didx, self._dval = np.zeros(cap, np.int64), np.zeros(cap, self.dtype)
        self._version, self._gen, self._gen_version = 0, 0, 0
        self.stats = np.zeros((n_workers, N_STATS), np.int64)
        self.stats[:, CLEAN_VERSION] = -1
        self.fstats = np.zeros((n_workers, N_FSTATS))
        self.outputs = {k: np.zeros((n_workers, *shape), dt)
                        for k, (shape, dt) in spec.outputs.items()}
        self.actors: list[Any] = [None] * n_workers
        self.pids = [0] * n_workers
        self.restarts = [0] * n_workers
        self._fetch: dict[Any, int] = {}  # in-flight fetch ref → worker
        self._info: dict[Any, int] = {}  # pending pid query of a restarted actor → worker
        self._dead: dict[int, str] = {}  # worker → why (to restart at the next check)
        self._records: list[RecordBatch] = []
        self.monitor = CpuMonitor({"learner": os.getpid()}, interval=monitor_interval)
        self._owns_ray = self._closed = self._abandoned = False
        self._watchdog: Watchdog | None = None
        self._release = threading.Event()  # lets the thread that started Ray end (close)
        self._ray: Any = None
        self._cls: Any = None
        self._task_ref = self._spec_ref = None
        self.bytes_out = self.bytes_in = 0  # payload bytes through the transport
        self.publish_seconds: list[float] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self, expired: Callable[[], bool] | None = None) -> RayTransport:
        """Start Ray (or join it) and the actors; they all start (an actor's start cannot be
        cut short), and the learner's first poll of ``expired`` stops them."""
        self.log(f"learner pid {os.getpid()}")
        self.spawn_began = time.perf_counter()
        os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")  # calls to a killed actor
        ray = self._ray = require_ray()
        warmup(self.dtype)
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "configure_logging": False,
                                  "log_to_driver": self.debug}
            if self.address:
                probe_address(self.address)
                self._init(ray, {"address": self.address, **kw}, CONNECT_SECONDS,
                           f"cannot join the Ray cluster at {self.address}")
                where = f"the Ray cluster at {self.address}"
            else:
                # workers import this very demidcd (a source checkout works as well)
                pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
                    __file__))))
                old = os.environ.get("PYTHONPATH")
                os.environ["PYTHONPATH"] = pkg + (os.pathsep + old if old else "")
                self._watchdog = Watchdog()  # the local Ray's processes die with this one
                try:
                    self._init(ray, {"num_cpus": max(os.cpu_count() or 1, self.n_workers + 1),
                                     **kw}, LOCAL_START_SECONDS, "cannot start Ray")
                finally:
                    if old is None:
                        os.environ.pop("PYTHONPATH", None)
                    else:
                        os.environ["PYTHONPATH"] = old
                where = "a local Ray instance"
            self._owns_ray = True
        else:
            where = "the running Ray instance"
        self._cls = ray.remote(num_cpus=1, max_restarts=0, max_concurrency=4)(_RayWorker)
        # pickled once, unpickled by each actor into writable arrays (zero-copy arrays from
        # the object store are read-only, and numba compiles anew for read-only arrays)
        self._task_ref = ray.put(ray.cloudpickle.dumps(self.task))
        self._spec_ref = ray.put(self.spec)
        for j in range(self.n_workers):
            self._spawn(j)
        try:
            infos = ray.get([a.info.remote() for a in self.actors])
        except Exception as e:  # noqa: BLE001 - an actor could not start
            lines = [x for x in str(e).strip().splitlines() if x.strip()]
            raise WorkerError(f"an inference actor failed to start: "
                              f"{lines[-1].strip() if lines else type(e).__name__}",
                              str(e)) from None
        for j, info in enumerate(infos):
            self._started(j, info)
        self.log(f"{self.n_workers} inference actors on {where}")
        self.spawn_seconds = time.perf_counter() - self.spawn_began
        self.monitor.start()
        return self

    def _init(self, ray: Any, kw: dict[str, Any], timeout: float, failed: str) -> None:
        """``ray.init(**kw)`` in a thread of its own, while this one waits in short slices:
        Ray's start (or its connection to a cluster) may block in its C++ core for minutes,
        deaf to signals, and ``ray.init`` in the main thread replaces the SIGTERM handler with
        an exit (15, no "interrupted" line). A SIGINT or SIGTERM meanwhile abandons the start
        (:meth:`_abandon`) and is then handled as the caller's handler says (the command line:
        a stop, "interrupted", 130) and raises KeyboardInterrupt; no answer within ``timeout``
        s is a one-line :class:`DemidcdError` (``failed``: what could not be done). The thread
        lives on until :meth:`close` (see ``run``)."""
        box: dict[str, BaseException] = {}
        done, release = threading.Event(), self._release

        def run() -> None:
            try:
                ray.init(**kw)
            except BaseException as e:  # noqa: BLE001 - re-raised by the waiting thread
                box["error"] = e
                return
            finally:
                done.set()
            # Ray's GCS server and raylet get the kernel's parent-death signal when the
            # *thread* that started them ends: this one lives until close() has shut Ray down
            release.wait()

        got: list[tuple[int, Any]] = []
        old: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.getsignal(sig)
                if old[sig] is not signal.SIG_IGN:
                    signal.signal(sig, lambda signum, frame: got.append((signum, frame)))
        quiet = logging.getLogger("ray._private.worker")  # "SIGTERM handler is not set ..."
        level = quiet.level
        if not self.debug:
            quiet.setLevel(logging.ERROR)
        deadline = time.monotonic() + timeout
        try:
            threading.Thread(target=run, name="demidcd-ray-init", daemon=True).start()
            while not done.wait(0.05) and not got and time.monotonic() < deadline:
                pass
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            quiet.setLevel(level)
        if got:
            self._abandon()
            signum, frame = got[0]
            handler = old.get(signum)
            if callable(handler):
                handler(signum, frame)  # the caller's handling of the signal (a stop request)
            raise KeyboardInterrupt
        if not done.is_set():
            self._abandon()
            raise DemidcdError(f"{failed}: no answer within {timeout:g} s")
        if "error" in box:
            e = box["error"]
            if not isinstance(e, Exception):
                raise e
            text = str(e).strip()
            why = text.splitlines()[0] if text else type(e).__name__
            raise DemidcdError(f"{failed}: {why}") from None

    def _abandon(self) -> None:
        """A start given up: the processes it started are killed (the thread still in
        ``ray.init`` is left to fail), and Ray's own shutdown at exit, which would wait for
        them, is not run."""
        import atexit

        self._abandoned = True
        if self._watchdog is not None:
            self._watchdog.kill_now()
        try:
            atexit.unregister(self._ray.shutdown)
        except Exception:  # noqa: BLE001 - nothing registered
            pass

    def _spawn(self, j: int) -> None:
        ray = self._ray
        init = ray.put(self.sent) if self._version else None
        a = self._cls.remote(self._task_ref, self._spec_ref, self.shards[j], j,
                             self.restarts[j], self._version, init, self.stats[j].copy(),
                             self.ring_words)
        self.actors[j] = a
        if self.spec.mode != "demi" and self._gen > self.stats[j, DONE_GEN]:
            a.command.remote(self._gen, self._gen_version)  # redo the outstanding one
        self._fetch[a.fetch.remote(0.0)] = j

    def _started(self, j: int, info: tuple[int, str]) -> None:
        pid, host = info
        self.pids[j] = pid
        here = host == socket.gethostname()
        if here:
            self.monitor.add(f"worker {j + 1}", pid)
        self.log(f"worker {j + 1} pid {pid} (shard of {len(self.shards[j]):,} examples, "
                 f"{int(self.task.costs()[self.shards[j]].sum()):,} cost units"
                 f"{'' if here else ', on ' + host})")

    def check(self) -> None:
        """Collect finished fetches; restart every worker found dead (or raise)."""
        self._poll()
        for j, why in list(self._dead.items()):
            del self._dead[j]
            if self.restarts[j] >= self.max_restarts:
                raise WorkerError(f"worker {j + 1} (pid {self.pids[j]}) {why}; gave up after "
                                  f"{self.restarts[j]} restarts")
            self.restarts[j] += 1
            self.log(f"worker {j + 1} (pid {self.pids[j]}) {why}; restarting it on the same "
                     "shard")
            try:
                self._ray.kill(self.actors[j], no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.stats[j, CLEAN_VERSION] = -1
            self._spawn(j)
            self._info[self.actors[j].info.remote()] = j

    def close(self, timeout: float = 2.0) -> None:
        """Stop the actors (kill those that do not stop within ``timeout``) and, when this run
        started Ray, shut it down."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        try:
            self.monitor.stop()
            if ray is None or self._abandoned or not ray.is_initialized():
                return
            live = [a for a in self.actors if a is not None]
            try:
                ray.wait([a.stop.remote() for a in live], num_returns=len(live),
                         timeout=timeout)
            except Exception:  # noqa: BLE001 - dead actors
                pass
            for a in live:
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
        finally:
            self._fetch.clear()
            self._info.clear()
            try:
                if ray is not None and self._owns_ray and not self._abandoned and \
                        ray.is_initialized():
                    ray.shutdown()
            finally:
                self._release.set()
                if self._watchdog is not None:
                    self._watchdog.close()  # what the shutdown left (agents) goes now

    # ------------------------------------------------------------------ learner side
    def publish(self, wa: np.ndarray, marks: np.ndarray | None = None, tail: int = 0) -> int:
        """Send the entries of w̄ that changed since the last publish (or all of it when
        cheaper) to every actor, through one object in the object store."""
        t = time.perf_counter()
        if marks is None:
            marks, tail = np.zeros(0, np.uint8), 0
            self.sent[:] = wa
            n = -1
        else:
            n = _diff_lines(self.sent, wa, marks, tail, self._didx, self._dval)
        self._version += 1
        if n < 0 or n >= self._didx.shape[0]:
            payload: tuple = ("full", self.sent)
            size = self.sent.nbytes
        else:
            payload = ("delta", self._didx[:n].copy(), self._dval[:n].copy())
            size = n * (8 + self.dtype.itemsize)
        ray = self._ray
        ref = ray.put(payload)
        for a in self.actors:
            a.offer.remote(self._version, ref)
        self.bytes_out += size * len(self.actors)
        self.publish_seconds.append(time.perf_counter() - t)
        return self._version

    def version(self) -> int:
        return self._version

    def traffic(self) -> dict[str, float]:
        lat = np.array(self.publish_seconds or [0.0])
        return {"bytes_out": float(self.bytes_out), "bytes_in": float(self.bytes_in),
                "publish_median_seconds": float(np.median(lat)),
                "publish_p90_seconds": float(np.quantile(lat, 0.9))}

    def _poll(self) -> None:
        """Take every finished fetch (never waits) and re-issue it."""
        ray = self._ray
        if ray is None or self._closed:
            return
        if self._info:
            done, _ = ray.wait(list(self._info), num_returns=len(self._info), timeout=0)
            for ref in done:
                j = self._info.pop(ref)
                try:
                    self._started(j, ray.get(ref))
                except Exception:  # noqa: BLE001 - died again: its fetch reports it
                    pass
        if not self._fetch:
            return
        done, _ = ray.wait(list(self._fetch), num_returns=len(self._fetch), timeout=0)
        for ref in done:
            j = self._fetch.pop(ref)
            try:
                st, fst, rec, out, err = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the actor (process or node) died
                self._dead[j] = f"died ({type(e).__name__})"
                continue
            if rec is not None:  # writable: the learner's kernels take writable arrays
                b = RecordBatch(*(np.require(a, requirements="W") for a in rec))
                self._records.append(b)
                self.bytes_in += sum(a.nbytes for a in rec)
            self.stats[j], self.fstats[j] = st, fst
            if out is not None:
                for k, v in out.items():
                    self.outputs[k][j] = v
            if err is not None:
                last = err.strip().splitlines()[-1] if err.strip() else "unknown error"
                if self.debug:
                    self.log(f"worker {j + 1} traceback:\n{err}")
                self._dead[j] = f"raised {last}"
                continue
            self._fetch[self.actors[j].fetch.remote(FETCH_WAIT)] = j

    def drain(self, max_records: int = DRAIN_RECORDS) -> RecordBatch:
        """The records fetched so far, at most ``max_records`` (the rest wait for the next
        drain, so one ingest stays short whatever the number of actors)."""
        self._poll()
        batch = concat_batches(self._records)
        self._records = []
        if len(batch) > max_records:
            self._records = [batch.take(np.arange(max_records, len(batch)))]
            batch = batch.take(np.arange(max_records))
        return batch

    def _column(self, col: int) -> np.ndarray:
        self._poll()
        return self.stats[:, col].copy()

    def infer_seconds(self) -> float:
        return float(self.fstats[:, 0].sum())

    def command(self) -> int:
        self._gen += 1
        self._gen_version = self._version
        for a in self.actors:
            a.command.remote(self._gen, self._version)
        return self._gen

    def done(self, generation: int) -> bool:
        self._poll()
        return bool((self.stats[:, DONE_GEN] >= generation).all())

    def results(self) -> dict[str, np.ndarray]:
        return self.outputs

    def request_stop(self) -> None:
        for a in self.actors:
            if a is not None:
                a.stop.remote()


# ---------------------------------------------------------------------------------- actor
class _Replica(WbarReader):
    """An actor's copy of w̄: payloads are offered by version (any thread) and applied in
    version order by the worker thread between chunks, so a chunk sees one version."""

    def __init__(self, max_chunk: int, size: int, dtype: Any, version: int,
                 init: np.ndarray | None):
        super().__init__(max_chunk)
        self.w = np.zeros(size, dtype) if init is None else np.array(init, dtype)
        self.version = version
        self.pending: dict[int, tuple] = {}
        self.received = version
        self.lock = threading.Lock()

    def offer(self, version: int, payload: tuple) -> None:
        with self.lock:
            self.pending[version] = payload
            self.received = max(self.received, version)

    def sync(self) -> None:
        with self.lock:
            if not self.pending:
                return
            full = [v for v, p in self.pending.items() if p[0] == "full" and v > self.version]
            if full:
                v = max(full)
                self.w[:] = self.pending[v][1]
                self.version = v
            while self.version + 1 in self.pending:
                p = self.pending.pop(self.version + 1)
                if p[0] == "full":
                    self.w[:] = p[1]
                else:
                    _apply_delta(self.w, np.require(p[1], requirements="W"),
                                 np.require(p[2], requirements="W"))
                self.version += 1
            for v in [v for v in self.pending if v <= self.version]:
                del self.pending[v]

    def infer(self, task: Task, ex: np.ndarray, C: float, st: np.ndarray
              ) -> tuple[int, RecordBatch, np.ndarray, np.ndarray]:
        self.sync()
        dim = task.dim
        b = task.loss_augmented(self.w[:dim], ex)
        viol, slack = violation_and_slack(b, self.w, dim, C)
        return self.version, b, viol, slack

    def read_copy(self, out: np.ndarray) -> int:
        self.sync()
        out[:] = self.w
        return self.version


class _RayWorker(WorkerEndpoint):
    """One inference worker as a Ray actor (methods run on Ray's threads; the worker loop runs
    in a thread of its own)."""

    def __init__(self, task: bytes, spec: WorkerSpec, shard: np.ndarray, j: int, restarts: int,
                 version: int, init: np.ndarray | None, st: np.ndarray, cap_words: int):
        from ray import cloudpickle

        self.task: Task = cloudpickle.loads(task)
        self.spec, self.shard, self.j = spec, np.array(shard), j
        self.st = np.array(st, np.int64)
        self.st[CLEAN_VERSION] = -1
        self.fst = np.zeros(2)
        self.reader = _Replica(spec.chunk, self.task.dim + self.task.n_examples,
                               spec.wbar_dtype(self.task),
                               version, init)
        self.lock = threading.Condition()
        self.outbox: list[RecordBatch] = []
        self.out_words, self.cap_words = 0, max(1 << 16, int(cap_words))
        self.outputs: dict | None = None
        self.error: str | None = None
        self.gen, self.gen_version = int(self.st[DONE_GEN]), 0
        self._stop = threading.Event()
        self._changed = False
        rng = np.random.default_rng([spec.seed, j, restarts])
        self.thread = threading.Thread(target=self._main, args=(rng,), daemon=True)
        self.thread.start()

    def _main(self, rng: np.random.Generator) -> None:
        try:
            run_worker(self.task, self.spec, self.shard, self.reader, self, rng)
        except BaseException:  # noqa: BLE001 - reported to the learner by fetch
            with self.lock:
                self.error = traceback.format_exc()
                self.lock.notify_all()

    # -- actor methods (the driver calls them)
    def info(self) -> tuple[int, str]:
        return os.getpid(), socket.gethostname()

    def offer(self, version: int, payload: tuple) -> None:
        self.reader.offer(version, payload)

    def command(self, gen: int, version: int) -> None:
        with self.lock:
            if gen > self.gen:
                self.gen, self.gen_version = gen, version

    def stop(self) -> None:
        self._stop.set()
        with self.lock:
            self.lock.notify_all()

    def fetch(self, wait: float) -> tuple:
        """(counters, seconds, records as 7 arrays or None, job outputs or None, error or
        None), once a sweep or job ended or an error came, else after ``wait`` s, or
        :data:`FETCH_GAP` s when records are waiting."""
        t0 = time.perf_counter()
        with self.lock:
            while not (self._changed or self.error or self._stop.is_set()):
                left = wait - (time.perf_counter() - t0)
                if self.outbox:  # batch what arrives within FETCH_GAP (fewer round trips)
                    left = min(left, FETCH_GAP - (time.perf_counter() - t0))
                if left <= 0:
                    break
                self.lock.wait(left)
            st, fst = self.st.copy(), self.fst.copy()  # before the records they cover
            recs, self.outbox, self.out_words = self.outbox, [], 0
            out, self.outputs, self._changed = self.outputs, None, False
            err = self.error
            self.lock.notify_all()  # room in the outbox
        rec = None
        if recs:
            b = concat_batches(recs)
            rec = (b.ex, b.hash, b.delta, b.margin, b.ptr, b.idx, b.val)
        return st, fst, rec, out, err

    # -- the worker endpoint (the worker thread calls these)
    def stopped(self) -> bool:
        return self._stop.is_set()

    def generation(self) -> int:
        with self.lock:
            gen, need = self.gen, self.gen_version
        if gen > self.st[DONE_GEN]:
            self.reader.sync()
            if self.reader.version < need:  # the w̄ of that command has not arrived yet
                return int(self.st[DONE_GEN])
        return gen

    def push(self, batch: RecordBatch) -> bool:
        words = 5 * len(batch) + int(batch.ptr[-1] - batch.ptr[0]) * 3 // 2
        with self.lock:
            while self.outbox and self.out_words + words > self.cap_words:
                self.st[BACKOFF] += 1
                if self._stop.is_set():
                    return False
                self.lock.wait(0.01)
            self.outbox.append(batch)
            self.out_words += words
            self.lock.notify_all()
        return True

    def job_output(self, outputs: dict) -> None:
        with self.lock:
            self.outputs = {k: np.array(v) for k, v in outputs.items()}

    def flush(self) -> None:
        with self.lock:
            self._changed = True
            self.lock.notify_all()
