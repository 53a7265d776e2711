"""Model files: one ``.npz`` holding numpy arrays plus a JSON metadata entry, never pickle.

Layout: ``w`` (float64 weights), task-specific arrays (prefixed ``feat.``), and ``meta.json``
(a uint8 array of UTF-8 JSON bytes) with ``format``, ``format_version``, ``task``, the label set,
featurizer settings, hyper-parameters and whether training finished. Loading uses
``allow_pickle=False``, so an untrusted file cannot execute code. Writing goes to a temporary
file in the target directory, then ``os.replace``: an interrupted save never leaves a corrupt
file under the final name.
"""

from __future__ import annotations

import codecs
import fcntl
import json
import math
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from .. import __version__
from ..errors import DemidcdError, ModelFileError
from ..options import option
from .stale import sweep_dead, temp_name_pattern

FORMAT = "demidcd-model"
FORMAT_VERSION = 1


def _umask() -> int:
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


STDIO = "-"  # the file name for standard input (--data) and standard output (--out)


def stdio_fd(path: str | os.PathLike[str]) -> int | None:
    """The descriptor ``path`` names when it is one of this process's open files rather than a
    file name: ``-`` and ``/dev/stdout`` (1), ``/dev/stderr`` (2), ``/dev/fd/N`` and
    ``/proc/self/fd/N`` (N); else None. Such a path is written straight through to the
    descriptor: resolving it (``/proc/PID/fd/pipe:[…]`` for a pipe) names no file."""
    p = os.fspath(path)
    fixed = {STDIO: 1, "/dev/stdout": 1, "/dev/stderr": 2}
    if p in fixed:
        return fixed[p]
    for prefix in ("/dev/fd/", "/proc/self/fd/", f"/proc/{os.getpid()}/fd/"):
        rest = p[len(prefix):]
        if p.startswith(prefix) and rest.isdigit() and rest.isascii():
            return int(rest)
    return None


def shown_name(path: str | os.PathLike[str]) -> str:
    """How messages name ``path``: ``-`` as standard output or input is shown as such."""
    p = os.fspath(path)
    return "standard output" if p == STDIO else p


def _target(path: str | os.PathLike[str]) -> Path:
    """Where writing ``path`` lands: a symlink (chain) is followed to its target."""
    return Path(os.path.realpath(os.fspath(path)))


def check_output(path: str | os.PathLike[str], option: str = "output") -> None:
    """Fail now, with a one-line :class:`DemidcdError`, if ``path`` could not be written later:
    its directory is missing or not writable, or it names a directory. Devices, fifos and
    ``-`` (standard output, :func:`stdio_fd`) are accepted (:func:`atomic_write` writes straight
    through to them). Call before any long work.
    """
    shown = os.fspath(path)
    if not shown:
        raise DemidcdError(f"{option}: empty file name")
    fd = stdio_fd(shown)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            raise DemidcdError(f"{option} {shown}: descriptor {fd} is not open") from None
        return
    target = _target(path)
    if target.is_dir() or shown.endswith(os.sep):
        raise DemidcdError(f"{option} {shown}: is a directory, not a file name")
    if target.exists() and not target.is_file():
        return  # a device or a fifo: written straight through
    directory = target.parent
    if not directory.is_dir():
        missing = directory
        while not missing.parent.is_dir() and missing.parent != missing:
            missing = missing.parent
        if missing.exists():
            raise DemidcdError(f"{option} {shown}: {missing} is not a directory")
        raise DemidcdError(f"{option} {shown}: directory {missing} does not exist")
    why = _probe(directory, make_dir=False)
    if why:
        raise DemidcdError(f"{option} {shown}: cannot write in {directory} ({why})")
    if target.exists():
        try:  # opened for writing without truncating it: the reason if it cannot be
            os.close(os.open(target, os.O_WRONLY))
        except OSError as e:
            raise DemidcdError(f"{option} {shown}: file is not writable "
                               f"({e.strerror or e})") from None


def _probe(directory: str | os.PathLike[str], make_dir: bool) -> str | None:
    """None if a file (``make_dir``: a directory) can be created in ``directory``, else why not
    (``Permission denied``, ``Read-only file system``, …): the only reliable test (root,
    read-only mounts, ACLs) is to create one, and remove it."""
    try:
        if make_dir:
            os.rmdir(tempfile.mkdtemp(prefix=".demidcd-", suffix=".probe", dir=directory))
        else:
            fd, probe = tempfile.mkstemp(prefix=".demidcd-", suffix=".probe", dir=directory)
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


def check_out_dir(path: str | os.PathLike[str], option: str = "output directory") -> None:
    """Fail now, with a one-line :class:`DemidcdError` saying why, if the directory ``path``
    could not be written in or created later (its nearest existing ancestor must be a directory
    we can create it in). Call before any long work."""
    shown = os.fspath(path)
    if not shown:
        raise DemidcdError(f"{option}: empty directory name")
    target = os.path.realpath(shown)
    if os.path.exists(target):
        if not os.path.isdir(target):
            raise DemidcdError(f"{option} {shown}: exists and is not a directory")
        why = _probe(target, make_dir=False)
        if why:
            raise DemidcdError(f"{option} {shown}: cannot write in this directory ({why})")
        return
    parent = os.path.dirname(target)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise DemidcdError(f"{option} {shown}: cannot create it: {parent} is not a directory")
    why = _probe(parent, make_dir=True)
    if why:
        raise DemidcdError(f"{option} {shown}: cannot create it in {parent} ({why})")


def make_dirs(path: str | os.PathLike[str], option: str = "output directory") -> None:
    """``os.makedirs(path, exist_ok=True)``; a failure is one line saying why."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise DemidcdError(f"{option} {os.fspath(path)}: cannot create it "
                           f"({e.strerror or e})") from None


def atomic_write(path: str | os.PathLike[str], write, mode: str = "wb") -> None:
    """Call ``write(fileobj)`` on a temporary file beside ``path``, then rename it into place,
    so that an interrupted write never leaves a truncated file under the final name.

    A symlink is followed: its target is replaced and the link stays. A device or fifo (e.g.
    ``/dev/null``, a named pipe) is written straight through, as ``open`` would, and so is
    ``-``, ``/dev/stdout`` or ``/dev/fd/N`` (:func:`stdio_fd`): to the descriptor itself,
    whatever it is (pipe, terminal, or a regular file the shell opened). The file gets the
    permissions ``open`` would give it (0666 less the umask), or keeps those of the file it
    replaces. Errors are one-line :class:`DemidcdError`; a pipe whose reader has gone raises
    :class:`BrokenPipeError`.
    """
    shown = os.fspath(path)
    fd = stdio_fd(shown)
    if fd is not None:
        _write_fd(shown, fd, write, mode)
        return
    target = _target(path)
    if target.is_dir():
        raise DemidcdError(f"{shown}: is a directory, not a file name")
    if target.exists() and not target.is_file():
        _write_through(shown, lambda: open(target, mode), write)
        return
    directory = target.parent
    if not directory.is_dir():
        raise DemidcdError(f"{shown}: directory {directory} does not exist")
    try:
        perm = (os.stat(target).st_mode & 0o7777) if target.exists() else 0o666 & ~_umask()
        # the pid in the name: a later save removes what a killed writer left (io.stale)
        sweep_dead(directory, temp_name_pattern(target.name))
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=directory)
    except OSError as e:
        raise DemidcdError(f"{shown}: cannot write in {directory} ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, perm)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):
            raise DemidcdError(f"{shown}: cannot write ({e.strerror or e})") from None
        raise


def _write_fd(shown: str, fd: int, write, mode: str) -> None:
    """``write(fileobj)`` on a duplicate of descriptor ``fd`` (Python's own buffered
    ``sys.stdout`` / ``sys.stderr`` flushed first, so lines keep their order)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.fileno() == fd:
                stream.flush()
        except (OSError, ValueError):  # no real descriptor (captured in tests), or closed
            pass
    try:
        dup = os.dup(fd)
    except OSError:
        raise DemidcdError(f"{shown_name(shown)}: descriptor {fd} is not open") from None
    _write_through(shown_name(shown), lambda: os.fdopen(dup, mode), write)


def _write_through(shown: str, opener, write) -> None:
    """``write(f)`` on ``opener()`` (a device, fifo or descriptor: no temporary file); an
    error is one line, except a pipe whose reader has gone (BrokenPipeError)."""
    try:
        with opener() as f:
            write(f)
            f.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise DemidcdError(f"{shown}: cannot write ({e.strerror or e})") from None


_HELD_LOCKS: set[int] = set()  # descriptors of the model locks this process holds


def _drop_inherited_locks() -> None:
    """In a forked child (an inference worker, a learner): close the descriptors of the
    parent's model locks. A ``flock`` belongs to the open file, which an inherited descriptor
    keeps open: a worker left stopped (SIGSTOP) after its parent was SIGKILLed kept the lock,
    and the next training of the model was refused, naming the dead parent."""
    for fd in _HELD_LOCKS:
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_drop_inherited_locks)


class ModelLock:
    """An advisory lock on the model file ``path`` for one training run: ``flock`` on
    ``PATH.lock`` (beside the symlink-resolved model file), which holds the owner's pid. A second
    run for the same model fails at once, naming the first; the lock file is removed on
    :meth:`release`. The kernel drops the lock when the owner dies, whatever way: only the owner
    holds it (forked children close their copy of the descriptor), so a stale lock file whose
    pid is dead never blocks. Devices, fifos and standard output are not locked; nor is a path
    whose directory refuses the lock file (the output check reports that)."""

    def __init__(self, path: str | os.PathLike[str], option: str = "--model") -> None:
        self.path, self.option = os.fspath(path), option
        self.lock_path: Path | None = None
        self._fd: int | None = None
        self._owner = os.getpid()

    def acquire(self) -> ModelLock:
        """Take the lock, or raise :class:`DemidcdError` naming the process that holds it."""
        if stdio_fd(self.path) is not None:
            return self
        target = _target(self.path)
        if target.exists() and not target.is_file():
            return self
        lock = target.with_name(target.name + ".lock")
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return self
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise DemidcdError(
                    f"{self.option} {self.path}: another training (pid {holder}) is writing "
                    f"this model (lock {lock}); wait for it to end or choose another "
                    f"{self.option}") from None
            try:  # the holder may have removed the file between our open and flock
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except OSError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.lock_path, self._fd, self._owner = lock, fd, os.getpid()
        _HELD_LOCKS.add(fd)
        return self

    def release(self) -> None:
        """Remove the lock file, then drop the lock (in this order: a waiting run then opens
        a new file). Idempotent; only the process that took the lock releases it."""
        if os.getpid() != self._owner:  # a forked child: its copy was closed at the fork
            self._fd = None
            return
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _HELD_LOCKS.discard(fd)
        try:
            if os.getpid() == int(os.pread(fd, 64, 0).decode("ascii", "replace") or 0):
                os.unlink(self.lock_path)  # type: ignore[arg-type]
        except (OSError, ValueError):
            pass
        os.close(fd)

    def __enter__(self) -> ModelLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def save_with_fallback(save, path: str | os.PathLike[str], option: str = "--model") -> None:
    """``save(path)``; if writing fails (disk full, ``/dev/full``, a directory gone read-only)
    the model is not lost at the end of a long run: ``save`` is tried on a new file beside
    ``path``, then in the temporary directory (``$TMPDIR``), and the error says where it went.
    """
    try:
        save(path)
        return
    except (DemidcdError, OSError) as e:
        first = e
    shown = os.fspath(path)
    target = _target(path)
    stem = target.name[:-4] if target.name.endswith(".npz") else target.name
    places = [tempfile.gettempdir()]
    if stdio_fd(shown) is None and not (target.exists() and not target.is_file()):
        places.insert(0, str(target.parent))
    why = str(first) if isinstance(first, DemidcdError) else (
        f"{shown}: cannot write ({first.strerror or first})")
    for place in dict.fromkeys(places):
        try:
            fd, kept = tempfile.mkstemp(prefix=f"{stem or 'model'}.", suffix=".npz", dir=place)
            os.close(fd)
        except OSError:
            continue
        try:
            save(kept)
        except (DemidcdError, OSError):
            try:
                os.unlink(kept)
            except OSError:
                pass
            continue
        raise DemidcdError(f"{option} {why}; the model is kept in {kept}") from None
    raise DemidcdError(f"{option} {why}; nor could it be kept in {' or '.join(places)}") \
        from None


def _json_safe(x: Any) -> Any:
    """``x`` with non-finite floats (e.g. ``time_limit=inf``) as ``None``: strict JSON, which
    :func:`load_model` requires."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def save_model(path: str | os.PathLike[str], w: np.ndarray, arrays: dict[str, np.ndarray],
               meta: dict[str, Any]) -> None:
    """Write weights, task arrays (names without the ``feat.`` prefix) and metadata atomically.

    Non-finite floats in ``meta`` are written as ``null``; non-finite weights are refused
    (:class:`~demidcd.errors.DemidcdError`, nothing written): :func:`load_model` would refuse
    the file, and such weights score every structure NaN."""
    bad = int(np.count_nonzero(~np.isfinite(w)))
    if bad:
        raise DemidcdError(f"{path}: not written: {bad:,} of the model's {np.size(w):,} weights "
                           "are not finite (NaN or infinite: training diverged, e.g. on "
                           "feature values too large)")
    full = _json_safe({"format": FORMAT, "format_version": FORMAT_VERSION,
                       "demidcd_version": __version__, **meta})
    payload = {"w": np.ascontiguousarray(w, dtype=np.float64),
               "meta.json": np.frombuffer(json.dumps(full, allow_nan=False).encode(),
                                          dtype=np.uint8)}
    for k, v in arrays.items():
        payload[f"feat.{k}"] = np.asarray(v)
    atomic_write(path, lambda f: np.savez(f, **payload))


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz is a zip archive (or an empty one)
# optional metadata entries and the JSON type each must have when present
_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "dim": int, "labels": list, "featurizer": dict, "hyper_parameters": dict, "finished": bool,
    "stop_reason": str, "data_options": dict}


def _column(v: Any) -> bool:
    return v in ("upos", "xpos") or (type(v) is int and v >= 1)


def _codec(v: Any) -> bool:
    try:
        codecs.lookup(v)
    except (LookupError, TypeError):
        return False
    return True


# the entries of "data_options" (what train remembers of its data and evaluate / predict read:
# TaskSpec.data_options) and what each must be when present: (test, what it must be)
_DATA_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "column": (lambda v: v is None or _column(v),
               'null, "upos", "xpos" or a column number >= 1'),
    "feature_columns": (lambda v: isinstance(v, list) and all(map(_column, v)),
                        'a list of column numbers >= 1, "upos" or "xpos"'),
    "format": (lambda v: v is None or v in option("format").choices,
               "null or one of " + ", ".join(option("format").choices)),
    "template": (lambda v: v is None or isinstance(v, str), "null or a file name"),
    "encoding": (_codec, "a text encoding Python knows"),
    "pos_column": (lambda v: v in option("pos_column").choices,
                   " or ".join(option("pos_column").choices)),
}


def _no_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name} in meta.json")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):  # 1e999 parses as inf
        raise ValueError(f"non-finite number {text} in meta.json")
    return x


def _check_meta(p: str, meta: Any, task: str | None) -> dict:
    """Validate the metadata's format, version, task and the types of the known entries."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelFileError(p, "not a demidcd model file")
    version = meta.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise ModelFileError(p, f"model format version {version!r} is not supported (this "
                                f"demidcd reads {FORMAT_VERSION})")
    if not isinstance(meta.get("task"), str):
        raise ModelFileError(p, "corrupt model metadata (no task name)")
    if task is not None and meta["task"] != task:
        raise ModelFileError(p, f"model is for task {meta['task']!r}, not {task!r}")
    for key, typ in _META_TYPES.items():
        v = meta.get(key)
        if v is None:
            continue
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise ModelFileError(p, f"corrupt model metadata ({key!r} is a "
                                    f"{type(v).__name__})")
    if not all(isinstance(t, str) for t in meta.get("labels") or ()):
        raise ModelFileError(p, "corrupt model metadata (a label is not a string)")
    for key, value in (meta.get("data_options") or {}).items():
        test, must = _DATA_OPTIONS.get(key, (None, ""))
        if test is not None and not test(value):
            raise ModelFileError(p, f"corrupt model metadata (data_options.{key} is "
                                    f"{json.dumps(value)[:40]}, not {must})")
    return meta


def load_model(path: str | os.PathLike[str],
               task: str | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], dict]:
    """Read (w, task arrays, metadata); any defect raises :class:`ModelFileError` in one line.

    The file is untrusted: it must be a zip (``.npz``) archive, is read with
    ``allow_pickle=False``, its ``meta.json`` must be strict JSON (no NaN/Infinity) with the
    expected types, and ``w`` must be a finite 1-D float64 vector of the recorded length. Any
    failure of the parser on a damaged archive (bad zip structure, bad compressed data, bad
    ``.npy`` headers, exhausted memory) is reported as a corrupt or truncated file.
    """
    p = str(path)
    if not os.path.isfile(p):
        raise ModelFileError(p, "no such model file")
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise ModelFileError(p, f"cannot read model file ({e.strerror or e})") from None
    if not head:
        raise ModelFileError(p, "empty model file (truncated?)")
    if head not in _ZIP_MAGIC:
        raise ModelFileError(p, "not a demidcd model file (not an .npz archive)")
    try:
        with zipfile.ZipFile(p) as zf:
            need = sum(i.file_size for i in zf.infolist())
        avail = psutil.virtual_memory().available
        if need > avail:
            raise ModelFileError(p, f"model needs {need / 2**30:.1f} GiB of memory to load; "
                                    f"{avail / 2**30:.1f} GiB available")
        with np.load(p, allow_pickle=False) as z:
            names = set(z.files)
            if "meta.json" not in names or "w" not in names:
                raise ModelFileError(p, "not a demidcd model file (no meta.json or w entry)")
            raw = z["meta.json"]
            if raw.dtype != np.uint8 or raw.ndim != 1:
                raise ModelFileError(p, "corrupt model file (meta.json is not a byte string)")
            meta = _check_meta(p, json.loads(raw.tobytes().decode("utf-8"),
                                             parse_constant=_no_constant,
                                             parse_float=_finite_float), task)
            w = z["w"]
            arrays = {k[5:]: z[k] for k in z.files if k.startswith("feat.")}
    except ModelFileError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a damaged archive makes the parsers raise
        raise ModelFileError(p, f"corrupt or truncated model file ({type(e).__name__})") from None
    if w.dtype != np.float64 or w.ndim != 1 or not np.isfinite(w).all():
        raise ModelFileError(p, "corrupt model file (bad weight vector)")
    if meta.get("dim") is not None and meta["dim"] != w.shape[0]:
        raise ModelFileError(p, "corrupt model file (weight vector of the wrong length)")
    return w, arrays, meta


STATE_FORMAT = "demidcd-state"
STATE_FORMAT_VERSION = 1
STATE_SUFFIX = ".state.npz"


def state_path(model: str | os.PathLike[str]) -> str:
    """Where the dual state of ``model`` lives: beside it, ``MODEL.state.npz`` (``r.npz`` →
    ``r.state.npz``); a path already ending in ``.state.npz`` names the state itself."""
    p = os.fspath(model)
    if p.endswith(STATE_SUFFIX):
        return p
    return (p[:-4] if p.endswith(".npz") else p) + STATE_SUFFIX


def save_state(path: str | os.PathLike[str], arrays: dict[str, np.ndarray],
               meta: dict[str, Any]) -> None:
    """Write a dual state (:class:`~demidcd.solvers.state.DualState`: its arrays and JSON
    metadata) atomically, as an uncompressed ``.npz`` without pickle."""
    full = _json_safe({"format": STATE_FORMAT, "format_version": STATE_FORMAT_VERSION,
                       "demidcd_version": __version__, **meta})
    payload = {f"a.{k}": np.ascontiguousarray(v) for k, v in arrays.items()}
    payload["meta.json"] = np.frombuffer(json.dumps(full, allow_nan=False).encode(), np.uint8)
    atomic_write(path, lambda f: np.savez(f, **payload))


_STATE_DTYPES = {"example": "i", "hash": "i", "delta": "f", "alpha": "f", "phi_ptr": "i",
                 "phi_idx": "i", "phi_val": "f", "alpha_sum": "f", "xi": "f", "ex_pg": "f",
                 "w0": "f", "pending_order": "i"}


def load_state(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict]:
    """Read (arrays, metadata) of a dual state written by :func:`save_state`; a missing,
    truncated or foreign file raises :class:`ModelFileError` in one line (``allow_pickle`` is
    off, the metadata must be strict JSON, every array of a known name must be 1-D of its
    kind: integers or finite floats)."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise ModelFileError(p, "no saved state (train with --save-state to keep one beside "
                                "the model)")
    try:
        with np.load(p, allow_pickle=False) as z:
            if "meta.json" not in z.files:
                raise ModelFileError(p, "not a demidcd state file (no meta.json)")
            meta = json.loads(z["meta.json"].tobytes().decode("utf-8"),
                              parse_constant=_no_constant, parse_float=_finite_float)
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("a.")}
    except ModelFileError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a damaged archive makes the parsers raise
        raise ModelFileError(p, f"corrupt or truncated state file ({type(e).__name__})") \
            from None
    if not isinstance(meta, dict) or meta.get("format") != STATE_FORMAT:
        raise ModelFileError(p, "not a demidcd state file")
    if meta.get("format_version") != STATE_FORMAT_VERSION:
        raise ModelFileError(p, f"state format version {meta.get('format_version')!r} is not "
                                f"supported (this demidcd reads {STATE_FORMAT_VERSION})")
    if not isinstance(meta.get("fingerprint"), dict):
        raise ModelFileError(p, "corrupt state metadata (no fingerprint)")
    for k, a in arrays.items():
        kind = _STATE_DTYPES.get(k)
        if kind is None or a.ndim != 1 or a.dtype.kind != kind or \
                (kind == "f" and k != "ex_pg" and not np.all(np.isfinite(a))):
            raise ModelFileError(p, f"corrupt state file (bad array {k!r})")
    return arrays, meta
