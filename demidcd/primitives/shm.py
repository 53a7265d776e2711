"""Named shared-memory numpy arrays that never leak.

Ownership model (one place registers and unlinks every segment):

* The **parent** (the process that will start the learner/workers) builds a
  :class:`SharedArena` and calls :meth:`SharedArena.create` for every array. Each array lives in
  its own POSIX shared-memory segment named ``/<prefix>-<parent pid>-<n>-<key>`` so that a
  leftover segment in ``/dev/shm`` is attributable to the process that leaked it.
* Children receive :meth:`SharedArena.spec` (a small picklable dict) and call
  :meth:`SharedArena.attach`. Attaching maps the segments but never registers them anywhere: a
  child exiting (normally, by exception or by a signal) cannot unlink the parent's segments and
  makes the resource tracker print nothing. (Python 3.11's ``SharedMemory(name)`` registers the
  segment with the resource tracker on attach; unregistering afterwards would also drop the
  *parent's* registration, because forked children share the parent's tracker. We therefore
  bypass ``SharedMemory`` and map segments with ``_posixshmem.shm_open`` + ``mmap``.)
* Segments are unlinked by :meth:`SharedArena.close` (idempotent; call it in ``finally``), at
  interpreter exit (``atexit``) and, if the owner is killed with SIGKILL, by this process's
  *janitor* (``track=True``, the default) or by :func:`sweep_stale` at the next start.
  SIGINT raises ``KeyboardInterrupt`` so ``finally`` runs.
* The janitor is a tiny interpreter (``python -I -S``, no imports beyond ``os``) started on the
  first tracked :meth:`SharedArena.create` of a process, in its own session (a terminal Ctrl-C
  never reaches it). It holds the read end of a pipe whose only write end the owner keeps
  (closed in forked children); the owner sends it each arena prefix. When the owner dies, by
  any means, the pipe reads EOF and the janitor unlinks ``/dev/shm/<prefix>-<owner pid>-*``
  and exits; after a normal exit that finds nothing. Killing the janitor is harmless: the owner
  never talks to it again except to write prefixes (a dead janitor is relaunched on the next
  tracked create), prints nothing, and still unlinks on close; if the owner is then SIGKILLed
  too, the segments stay until :func:`sweep_stale` at the next start (every
  :class:`~demidcd.parallel.engine.WorkerPool` calls it). The ``multiprocess`` resource
  tracker is not used: killing it made the owner relaunch a fresh tracker on the next
  unregister ("process died unexpectedly, relaunching" warning) which then printed a KeyError
  traceback for every segment it had never seen registered.

Only the creating process (``os.getpid() == owner pid``) ever unlinks: an inherited ``atexit``
handler in a forked child that exits through ``sys.exit`` does nothing.

Space: ``/dev/shm`` is a tmpfs of its own size (Docker's default: 64 MiB). A segment sized with
``ftruncate`` alone is sparse, and the first write to a page the tmpfs cannot back kills the
process with SIGBUS (POS and dependency training died so, with nothing on stderr, in
``publish_lines`` and ``ring.push``). So every segment is backed at creation
(``posix_fallocate``: a shortfall is ENOSPC there, turned into :class:`SharedMemoryFull`), and
the owners check the sum of their segments against the free space first (:func:`require_space`),
so that the error names what the run needs.
"""

from __future__ import annotations

import _posixshmem
import atexit
import errno
import mmap
import os
import re
import threading
from typing import Any

import numpy as np

from ..errors import DemidcdError
from ..io.stale import owner_alive, sweep_cbc_dirs

__all__ = ["SharedArena", "sweep_stale", "sweep_once", "list_segments", "SHM_DIR",
           "SharedMemoryFull", "segment_bytes", "require_space", "free_bytes"]

SHM_DIR = "/dev/shm"  # where Linux exposes POSIX shared memory (for sweeping and tests)
_MAX_NAME = 250  # Linux NAME_MAX is 255 including the leading '/'


class SharedMemoryFull(DemidcdError):
    """The shared memory a run needs does not fit in :data:`SHM_DIR` (one line, exit 2)."""


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB"


def _space() -> tuple[int, int]:
    """(free, total) bytes of the file system under :data:`SHM_DIR`."""
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def free_bytes() -> int | None:
    """Free bytes of the file system under :data:`SHM_DIR`; None when it cannot tell."""
    try:
        return _space()[0]
    except OSError:
        return None


def _advice(need: int) -> str:
    """How to get ``need`` more bytes of shared memory, or do without."""
    free, total = _space()
    size = -(-(total - free + need) * 5 // 4 // 2**26) * 64  # MiB, a quarter spare, 64 MiB steps
    return (f"give {SHM_DIR} more (a container: docker run --shm-size={size}m) or train on one "
            "process (--threads 1), which uses no shared memory")


def segment_bytes(shape: int | tuple[int, ...], dtype: Any) -> int:
    """The bytes a segment of this shape and dtype takes in :data:`SHM_DIR` (whole pages)."""
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return -(-max(n, 1) // mmap.PAGESIZE) * mmap.PAGESIZE


def require_space(need: int, threads: int) -> None:
    """Raise :class:`SharedMemoryFull` when ``need`` bytes of segments (:func:`segment_bytes`)
    for a run with ``--threads threads`` do not fit in the free space of :data:`SHM_DIR`.
    Call before creating them; a file system that cannot tell (``statvfs`` fails) passes."""
    try:
        free, total = _space()
    except OSError:
        return
    if need > free:
        raise SharedMemoryFull(
            f"shared memory: training with --threads {threads} needs {_mib(need)} in "
            f"{SHM_DIR} but only {_mib(free)} of its {_mib(total)} is free; {_advice(need)}")


def _map(name: str, nbytes: int, create: bool) -> mmap.mmap:
    """shm_open ``name`` (exclusive create when ``create``: sized and backed, see the module
    docstring), mmap it, close the fd."""
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = _posixshmem.shm_open(name, flags, mode=0o600)
    try:
        size = max(int(nbytes), 1)  # mmap refuses length 0
        if create:
            os.ftruncate(fd, size)
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                    raise
                _unlink(name)
                free, total = _space()
                raise SharedMemoryFull(
                    f"shared memory: cannot back a segment of {_mib(size)} in {SHM_DIR} "
                    f"({e.strerror}: {_mib(free)} of its {_mib(total)} is free); "
                    f"{_advice(size)}") from None
        elif os.fstat(fd).st_size < size:
            raise ValueError(f"shared segment {name} is smaller than its spec ({size} bytes)")
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _unlink(name: str) -> bool:
    try:
        _posixshmem.shm_unlink(name)
        return True
    except FileNotFoundError:
        return False


def _as_array(buf: mmap.mmap, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(buf, dtype=dtype, count=n).reshape(shape)


_JANITOR_CODE = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
owner, fd, shm = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
prefixes, buf = set(), b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except InterruptedError:
        continue
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    prefixes.update(x.decode() for x in lines if x)
try:
    names = os.listdir(shm)
except OSError:
    names = []
for e in names:
    if any(e.startswith(f"{p}-{owner}-") for p in prefixes):
        try:
            os.unlink(os.path.join(shm, e))
        except OSError:
            pass
"""


class _Janitor:
    """This process's janitor (see the module docstring): started lazily, one per process."""

    lock = threading.Lock()
    pid: int | None = None  # the owner process the state below belongs to
    proc: Any = None  # subprocess.Popen of the janitor
    wfd: int | None = None  # write end of the pipe (owner only)
    prefixes: set[str] = set()

    @classmethod
    def tell(cls, prefix: str) -> None:
        """Make sure a live janitor knows ``prefix`` (start or relaunch it if needed)."""
        import subprocess
        import sys

        with cls.lock:
            if cls.pid != os.getpid():  # a forked child: the parent's janitor is not ours
                cls.pid, cls.proc, cls.wfd, cls.prefixes = os.getpid(), None, None, set()
            if cls.proc is not None and cls.proc.poll() is not None:  # killed: relaunch
                cls._close_wfd()
                cls.proc, cls.prefixes = None, set(cls.prefixes)
            if cls.proc is None:
                r, w = os.pipe()
                try:
                    cls.proc = subprocess.Popen(
                        [sys.executable, "-I", "-S", "-c", _JANITOR_CODE, str(os.getpid()),
                         str(r), SHM_DIR], pass_fds=(r,), stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True)
                except OSError:  # no process to be had (a limit on processes): without a
                    os.close(w)  # janitor, close() and sweep_stale still unlink; the forks
                    return  # that follow fail with their own message
                except BaseException:
                    os.close(w)
                    raise
                finally:
                    os.close(r)
                cls.wfd = w
                old, cls.prefixes = cls.prefixes, set()
                for p in old:
                    cls._send(p)
            if prefix not in cls.prefixes:
                cls._send(prefix)

    @classmethod
    def _send(cls, prefix: str) -> None:
        try:
            os.write(cls.wfd, prefix.encode() + b"\n")
            cls.prefixes.add(prefix)
        except OSError:  # janitor gone between poll and write: relaunched next time
            pass

    @classmethod
    def _close_wfd(cls) -> None:
        if cls.wfd is not None:
            try:
                os.close(cls.wfd)
            except OSError:
                pass
            cls.wfd = None

    @classmethod
    def after_fork_in_child(cls) -> None:
        """A forked child must not hold the owner's write end (the janitor would wait for the
        child too) and starts its own janitor if it ever creates segments."""
        if cls.wfd is not None and cls.pid != os.getpid():
            cls._close_wfd()
        cls.pid, cls.proc, cls.prefixes = os.getpid(), None, set()


os.register_at_fork(after_in_child=_Janitor.after_fork_in_child)


class SharedArena:
    """Creates named shared-memory numpy arrays in the parent; unlinks all of them on close(),
    at interpreter exit (atexit), and on SIGTERM/SIGINT paths (the owner calls close in finally).

    >>> arena = SharedArena()
    >>> w = arena.create("w", (10,), np.float64)       # zero-filled, shared
    >>> spec = arena.spec()                            # send to a child (fork or spawn)
    >>> arrays = SharedArena.attach(spec)              # in the child: {"w": ndarray view}
    >>> arena.close()                                  # in the parent, in ``finally``

    ``track=True`` also has this process's janitor unlink the segments if the owner dies without
    running ``close`` (SIGKILL, OOM killer); see the module docstring.
    """

    def __init__(self, prefix: str = "demidcd", track: bool = True):
        if not re.fullmatch(r"[A-Za-z0-9_]+", prefix):
            raise ValueError(f"arena prefix must be [A-Za-z0-9_]+, got {prefix!r}")
        self.prefix = prefix
        self.owner_pid = os.getpid()
        self.track = track
        self._segments: dict[str, tuple[str, tuple[int, ...], str]] = {}
        self._maps: dict[str, mmap.mmap] = {}
        self._arrays: dict[str, np.ndarray] = {}
        self._counter = 0
        self._closed = False
        self._lock = threading.Lock()
        sweep_once(prefix)  # what a killed run left, before this process makes segments
        atexit.register(self.close)

    # -- parent side -----------------------------------------------------------------------
    def create(self, key: str, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
        """A new zero-filled shared array ``key`` of the given shape and dtype."""
        if self._closed:
            raise RuntimeError("SharedArena is closed")
        if os.getpid() != self.owner_pid:
            raise RuntimeError("SharedArena.create must be called in the process that owns it")
        if key in self._segments:
            raise KeyError(f"shared array {key!r} already exists")
        shape_t = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape_t, dtype=np.int64)) * dt.itemsize
        safe = re.sub(r"[^A-Za-z0-9_.]", "_", key)
        with self._lock:
            n = self._counter
            self._counter += 1
        name = f"/{self.prefix}-{self.owner_pid}-{n}-{safe}"[:_MAX_NAME]
        if self.track:
            _Janitor.tell(self.prefix)
        buf = _map(name, nbytes, create=True)
        arr = _as_array(buf, shape_t, dt)  # ftruncate zero-fills
        self._segments[key] = (name, shape_t, dt.str)
        self._maps[key] = buf
        self._arrays[key] = arr
        return arr

    def __getitem__(self, key: str) -> np.ndarray:
        return self._arrays[key]

    def segment_name(self, key: str) -> str:
        """The segment name (with the leading '/') of array ``key``."""
        return self._segments[key][0]

    def names(self) -> list[str]:
        """Segment names (with the leading '/') of all live arrays."""
        return [v[0] for v in self._segments.values()]

    def spec(self) -> dict:
        """Picklable description of every array, for :meth:`attach` in a child."""
        return {"prefix": self.prefix, "owner_pid": self.owner_pid,
                "segments": dict(self._segments)}

    # -- child side ------------------------------------------------------------------------
    @staticmethod
    def attach(spec: dict) -> dict[str, np.ndarray]:
        """Map every array of ``spec`` (from :meth:`spec`) into this process.

        Nothing is registered with a resource tracker: the child never unlinks, and its exit
        never affects the parent's segments. The returned arrays keep their mappings alive.
        """
        out: dict[str, np.ndarray] = {}
        for key, (name, shape, dts) in spec["segments"].items():
            dt = np.dtype(dts)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            out[key] = _as_array(_map(name, nbytes, create=False), tuple(shape), dt)
        return out

    # -- cleanup ---------------------------------------------------------------------------
    def close(self) -> None:
        """Unlink every segment (idempotent). A no-op in any process other than the owner.

        The mappings are released too unless arrays handed out by :meth:`create` are still
        referenced; then the memory is freed when the last reference dies (the name is gone
        from ``/dev/shm`` either way).
        """
        if self._closed or os.getpid() != self.owner_pid:
            return
        self._closed = True
        for key, (name, _, _) in list(self._segments.items()):
            _unlink(name)
            self._arrays.pop(key, None)
            buf = self._maps.pop(key, None)
            if buf is not None:
                try:
                    buf.close()
                except BufferError:  # arrays still referenced elsewhere
                    pass
        self._segments.clear()
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> SharedArena:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_NAME_RE = re.compile(r"^(?P<prefix>[A-Za-z0-9_]+)-(?P<pid>\d+)-\d+-")


def list_segments(prefix: str = "demidcd", pid: int | None = None) -> list[str]:
    """Names (without '/') in ``/dev/shm`` made by an arena with this prefix (and parent pid)."""
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    out = []
    for e in entries:
        m = _NAME_RE.match(e)
        if m and m["prefix"] == prefix and (pid is None or int(m["pid"]) == pid):
            out.append(e)
    return sorted(out)


def sweep_stale(prefix: str = "demidcd") -> list[str]:
    """Unlink ``/dev/shm`` segments named ``<prefix>-<pid>-…`` whose creating process is dead.

    Call at start-up. Returns the names unlinked. Linux only (elsewhere returns []).
    """
    removed = []
    for e in list_segments(prefix):
        pid = int(_NAME_RE.match(e)["pid"])
        if pid == os.getpid():
            continue
        try:
            mtime = os.stat(os.path.join(SHM_DIR, e)).st_mtime
        except FileNotFoundError:
            continue
        if not owner_alive(pid, mtime) and _unlink("/" + e):
            removed.append(e)
    return removed


_SWEPT_IN: list[int] = []  # the pid of the process whose sweep_once has run


def sweep_once(prefix: str = "demidcd") -> list[str]:
    """:func:`sweep_stale`, the first time this process calls it (the command line at start-up
    and the first training run of a library process share one sweep); [] afterwards. The
    CBC temporary directories of dead processes go too (:func:`~demidcd.io.stale.sweep_cbc_dirs`:
    a SIGKILLed run leaves its own, and only a later CBC solve removed them)."""
    if os.getpid() in _SWEPT_IN:
        return []
    _SWEPT_IN[:] = [os.getpid()]
    sweep_cbc_dirs()
    return sweep_stale(prefix)

