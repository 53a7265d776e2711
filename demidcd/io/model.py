"""Model files: one ``.npz`` holding numpy arrays plus a JSON metadata entry, never pickle.

Layout: ``w`` (float64 weights), task-specific arrays (prefixed ``feat.``), and ``meta.json``
(a uint8 array of UTF-8 JSON bytes) with ``format``, ``format_version``, ``task``, the label set,
featurizer settings, hyper-parameters and whether training finished. Loading uses
``allow_pickle=False``, so an untrusted file cannot execute code. Writing goes to a temporary
file in the target directory, then ``os.replace``: an interrupted save never leaves a corrupt
file under the final name.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import DemidcdError, ModelFileError

FORMAT = "demidcd-model"
FORMAT_VERSION = 1


def atomic_write(path: str | os.PathLike[str], write, mode: str = "wb") -> None:
    """Call ``write(fileobj)`` on a temporary file beside ``path``, then rename it into place."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise DemidcdError(f"{path}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save_model(path: str | os.PathLike[str], w: np.ndarray, arrays: dict[str, np.ndarray],
               meta: dict[str, Any]) -> None:
    """Write weights, task arrays (names without the ``feat.`` prefix) and metadata atomically."""
    full = {"format": FORMAT, "format_version": FORMAT_VERSION, "demidcd_version": __version__,
            **meta}
    payload = {"w": np.ascontiguousarray(w, dtype=np.float64),
               "meta.json": np.frombuffer(json.dumps(full).encode(), dtype=np.uint8)}
    for k, v in arrays.items():
        payload[f"feat.{k}"] = np.asarray(v)
    atomic_write(path, lambda f: np.savez(f, **payload))


def load_model(path: str | os.PathLike[str],
               task: str | None = None) -> tuple[np.ndarray, dict[str, np.ndarray], dict]:
    """Read (w, task arrays, metadata); any defect raises :class:`ModelFileError` in one line."""
    p = str(path)
    if not os.path.isfile(p):
        raise ModelFileError(p, "no such model file")
    try:
        with np.load(p, allow_pickle=False) as z:
            names = set(z.files)
            if "meta.json" not in names or "w" not in names:
                raise ModelFileError(p, "not a demidcd model file (no meta.json or w entry)")
            meta = json.loads(bytes(z["meta.json"]).decode())
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise ModelFileError(p, "not a demidcd model file")
            if meta.get("format_version") != FORMAT_VERSION:
                raise ModelFileError(p, f"model format version {meta.get('format_version')} is "
                                        f"not supported (this demidcd reads {FORMAT_VERSION})")
            if task is not None and meta.get("task") != task:
                raise ModelFileError(p, f"model is for task {meta.get('task')!r}, not {task!r}")
            w = z["w"]
            arrays = {k[5:]: z[k] for k in z.files if k.startswith("feat.")}
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, UnicodeDecodeError,
            json.JSONDecodeError, zipfile.LargeZipFile) as e:
        raise ModelFileError(p, f"corrupt or truncated model file ({type(e).__name__})") from None
    if w.dtype != np.float64 or w.ndim != 1 or not np.isfinite(w).all():
        raise ModelFileError(p, "corrupt model file (bad weight vector)")
    if meta.get("dim") is not None and meta["dim"] != w.shape[0]:
        raise ModelFileError(p, "corrupt model file (weight vector of the wrong length)")
    return w, arrays, meta
