"""Weight snapshots during training, evaluated afterwards so evaluation never steals CPU from
the run being measured.

A snapshot directory holds ``base.npz`` (a model file with the features, labels and
hyper-parameters, and zero weights) and one ``w-SSSSSS.sss.npy`` per snapshot, named by the
seconds since the solver started (after data loading: the same clock for every algorithm).
The learner only copies w (a memcpy); a background thread writes the file (temporary name,
then rename).
"""

from __future__ import annotations

import os
import queue
import re
import threading
from pathlib import Path

import numpy as np

from ..errors import DemidcdError
from .model import atomic_write

_NAME = re.compile(r"^w-(\d+\.\d+)\.npy$")


class Snapshotter:
    """Writes w every ``every`` seconds of solver time into ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], every: float):
        if not every > 0:
            raise DemidcdError(f"--snapshot-every must be > 0, got {every}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.every, self.due = float(every), -np.inf  # solver time of the next snapshot
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            seconds, w = item
            atomic_write(self.dir / f"w-{seconds:010.3f}.npy", lambda f, w=w: np.save(f, w))

    def maybe(self, seconds: float, w: np.ndarray, force: bool = False) -> None:
        """Snapshot w at the first call at or after each multiple of ``every`` seconds (a fixed
        grid, so late calls do not push later snapshots back), and when ``force``d."""
        if force or seconds >= self.due:
            self.due = (np.floor(seconds / self.every) + 1.0) * self.every
            self._q.put((float(seconds), w.copy()))

    def close(self) -> None:
        """Wait until every snapshot is on disk."""
        self._q.put(None)
        self._thread.join()


def list_snapshots(directory: str | os.PathLike[str]) -> list[tuple[float, Path]]:
    """(seconds, path) of every snapshot in ``directory``, in time order."""
    d = Path(directory)
    if not (d / "base.npz").is_file():
        raise DemidcdError(f"{d}: not a snapshot directory (no base.npz)")
    out = [(float(m.group(1)), d / f) for f in os.listdir(d) if (m := _NAME.match(f))]
    return sorted(out)
