"""Weight snapshots during training, evaluated afterwards so evaluation never steals CPU from
the run being measured.

A snapshot directory holds ``base.npz`` (a model file with the features, labels and
hyper-parameters, and zero weights) and one ``w-SSSSSS.sss.npy`` per snapshot, named by the
seconds since the solver started (after data loading: the same clock for every algorithm).
The learner only copies w (a memcpy); a background thread writes the file (temporary name,
then rename) and hands the copy back, to be copied into at the next snapshot: a fresh array
for each (glibc maps every block this large afresh, :mod:`~demidcd.primitives.pages`) paid a
page fault per 4 KiB page, about 40 ms of the learner's or coordinator's CPU per 44 MiB w
against 5 ms copied into the array kept (benchmarks/README.md, "Snapshots copy into the
array already written").

Where the learner counts its work (1-DCD, DEMI-DCD, several learners), ``work.csv`` holds one
line ``seconds,updates,inferences`` per snapshot: the run's cumulative coordinate updates and
loss-augmented inferences (all processes together) when w was copied, which
``evaluate-snapshots`` reports beside each primal, so that the work to a gap (work inflation,
issue 53) is counted, not inferred from the time.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import DemidcdError
from .model import atomic_write

_NAME = re.compile(r"^w-(\d+\.\d+)\.npy$")
WORK_FILE = "work.csv"
"""The snapshot directory's work counts: ``seconds,updates,inferences`` per snapshot."""


MIN_EVERY = 0.01
"""The shortest ``--snapshot-every`` (--snapshot-every 0.001 wrote 1.4 GB in 4 s); the
snapshots are also rate-limited by what writing them costs (:data:`WRITE_SHARE`)."""
WRITE_SHARE = 0.1
"""The largest share of the run's time the snapshot writer may spend writing: a snapshot that
falls due less than (the last write's seconds) / WRITE_SHARE after the last snapshot is
skipped."""


def check_every(every: object) -> float:
    """``--snapshot-every`` as a float of at least :data:`MIN_EVERY` seconds, else one
    OptionError line."""
    import math

    from ..errors import OptionError

    ok = isinstance(every, int | float | np.integer | np.floating) and not isinstance(every, bool)
    try:
        v = float(every) if ok else math.nan
    except OverflowError:
        v = math.inf
    if not (MIN_EVERY <= v < math.inf):
        raise OptionError(f"--snapshot-every must be a finite number of seconds >= {MIN_EVERY:g}"
                          f", got {every!r}")
    return v


class Snapshotter:
    """Writes w every ``every`` seconds of solver time into ``directory``; a snapshot that falls
    due sooner after the last one than :data:`WRITE_SHARE` allows (by what a write costs) is
    skipped (``skipped`` counts them): the copies do not pile up in memory, nor do the writes
    take the disk."""

    def __init__(self, directory: str | os.PathLike[str], every: float):
        if not every > 0:
            raise DemidcdError(f"--snapshot-every must be > 0, got {every}")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.every, self.due = float(every), -np.inf  # solver time of the next snapshot
        self._q: queue.Queue = queue.Queue()
        self._spare: queue.Queue = queue.Queue()  # a copy written already, to copy into again
        self.skipped = 0
        self._last, self._cost = -np.inf, 0.0  # the last snapshot's time, a write's seconds
        self.work_source: Callable[[], tuple[int, int]] | None = None  # set by the learner
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                self._q.task_done()
                return
            seconds, w, work = item
            t0 = time.perf_counter()
            try:
                atomic_write(self.dir / f"w-{seconds:010.3f}.npy", lambda f, w=w: np.save(f, w))
                if work is not None:
                    with open(self.dir / WORK_FILE, "a") as f:
                        f.write(f"{seconds:.3f},{int(work[0])},{int(work[1])}\n")
                self._cost = time.perf_counter() - t0
            finally:
                if self._spare.empty():  # one kept: more only while the writes fall behind
                    self._spare.put(w)
                del w
                self._q.task_done()

    def maybe(self, seconds: float, w: np.ndarray, force: bool = False,
              work: tuple[int, int] | None = None) -> None:
        """Snapshot w at the first call at or after each multiple of ``every`` seconds (a fixed
        grid, so late calls do not push later snapshots back), and when ``force``d. ``work``:
        the (updates, inferences) done by then, else :attr:`work_source`'s, if any."""
        if force or seconds >= self.due:
            self.due = (np.floor(seconds / self.every) + 1.0) * self.every
            if not force and seconds - self._last < self._cost / WRITE_SHARE:  # too soon
                self.skipped += 1
                return
            self._last = float(seconds)
            if work is None and self.work_source is not None:
                work = self.work_source()
            try:  # the copy the writer handed back, if it has finished with it
                copy = self._spare.get_nowait()
            except queue.Empty:
                copy = None
            if copy is None or copy.shape != w.shape or copy.dtype != w.dtype:
                copy = np.empty_like(w)
            np.copyto(copy, w)
            self._q.put((float(seconds), copy, work))

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


def read_work(directory: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """The work counts of a snapshot directory (:data:`WORK_FILE`): the snapshot's seconds as
    written in its file name (``%.3f``) → (updates, inferences); empty when the run did not
    count (or an older run). A malformed line is skipped (a run killed while appending)."""
    out: dict[str, tuple[int, int]] = {}
    path = Path(directory) / WORK_FILE
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(",")
        try:
            out[f"{float(parts[0]):.3f}"] = (int(parts[1]), int(parts[2]))
        except (IndexError, ValueError):
            continue
    return out


def load_snapshot(path: str | os.PathLike[str], dim: int) -> np.ndarray:
    """The weights of one snapshot file, which must be a float64 vector of ``dim`` finite
    entries (its ``base.npz``'s); a truncated or foreign file is a
    :class:`~demidcd.errors.ModelFileError` naming it."""
    from ..errors import ModelFileError

    try:
        w = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise ModelFileError(str(path), f"not a readable snapshot (truncated?): {e}") from None
    if not isinstance(w, np.ndarray) or w.dtype != np.float64 or w.shape != (dim,):
        raise ModelFileError(str(path), f"not a snapshot of this run: {w.dtype} "
                                        f"{getattr(w, 'shape', '?')}, base.npz has {dim:,} "
                                        "float64 weights")
    if not np.isfinite(w).all():
        raise ModelFileError(str(path), "snapshot with non-finite weights")
    return w
