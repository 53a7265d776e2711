"""What every benchmark script shares: machine description, atomic result files, progress
display, running the ``demidcd`` CLI, parsing its log lines, the relative-primal-difference and
time-to-gap computations, moving averages and plotting helpers.

Nothing here is timed; the scripts that import it are the benchmarks.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
EWT = DATA / "ud_english_ewt"
CONLL04 = DATA / "conll04" / "conll04.corp"
RESULTS = ROOT / "benchmarks" / "results"


# --------------------------------------------------------------------------- machine
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, Python, numpy and numba versions (and the load right now)."""
    import numba
    import numpy as np

    info: dict[str, Any] = {
        "cpu": cpu_model(), "nproc": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "numba": numba.__version__, "platform": platform.platform(),
        "hostname": platform.node(), "load_average_1_5_15min": load_average(),
    }
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover - psutil is a dependency
        pass
    try:
        from importlib.metadata import version

        info["demidcd"] = version("demidcd")
    except Exception:  # noqa: BLE001 - informational only
        pass
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
            timeout=10).stdout.strip() or None
        # uncommitted edits to the package at run time (the tree is shared while people work)
        st = subprocess.run(["git", "status", "--porcelain", "--", "demidcd"], cwd=ROOT,
                            capture_output=True, text=True, timeout=10).stdout
        info["git_dirty_files"] = [ln[3:] for ln in st.splitlines() if ln.strip()]
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    return info


class LoadSampler:
    """Measures how busy the machine was during named spans, and how much of that was *other*
    people's work: system-wide busy CPU seconds (``/proc/stat`` via psutil) minus the CPU
    seconds of this process and its waited-for children (``os.times``). Other engineers share
    the machine; a span with much foreign load is less trustworthy, and methods are compared as
    ratios within one run.
    """

    def __init__(self):
        self.spans: dict[str, dict[str, float]] = {}
        self.t0 = None

    @staticmethod
    def _busy() -> float:
        import psutil

        c = psutil.cpu_times()
        return float(sum(c) - c.idle - getattr(c, "iowait", 0.0))

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self) -> LoadSampler:
        self.t0 = (time.perf_counter(), self._busy(), self._own(), load_average())
        return self

    def stop(self) -> None:
        self.total = self._measure(self.t0)

    def _measure(self, t0) -> dict[str, float]:
        wall, busy, own = (time.perf_counter() - t0[0], self._busy() - t0[1],
                           self._own() - t0[2])
        foreign = max(busy - own, 0.0)
        return {"wall_seconds": round(wall, 2), "system_busy_cores": round(busy / wall, 3),
                "own_cores": round(own / wall, 3), "foreign_cores": round(foreign / wall, 3),
                "load_average_start": t0[3][0] if t0[3] else None,
                "load_average_end": (load_average() or [None])[0]}

    class _Span:
        def __init__(self, outer: LoadSampler, name: str):
            self.outer, self.name = outer, name

        def __enter__(self):
            self.t0 = (time.perf_counter(), LoadSampler._busy(), LoadSampler._own(),
                       load_average())
            return self

        def __exit__(self, *exc):
            self.outer.spans[self.name] = self.outer._measure(self.t0)

    def span(self, name: str) -> LoadSampler._Span:
        return LoadSampler._Span(self, name)

    def summary(self) -> dict[str, Any]:
        return {"spans": self.spans, "total": getattr(self, "total", None),
                "how": "foreign_cores = (system-wide busy CPU seconds - CPU seconds of this "
                       "benchmark and its children) / wall seconds"}

    def summary_line(self) -> str:
        parts = [f"{k}: other processes used {v['foreign_cores']:.2f} cores"
                 for k, v in self.spans.items()]
        return "; ".join(parts) if parts else "n/a"


def machine_line(info: dict[str, Any]) -> str:
    """One line naming the machine, for logs and READMEs."""
    return (f"{info.get('cpu')}, {info.get('nproc')} cores, {info.get('memory_gib')} GiB, "
            f"Python {info.get('python')}, numpy {info.get('numpy')}, numba {info.get('numba')}")


# --------------------------------------------------------------------------- result files
def _atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` atomically (the package's temporary-file-then-rename writer)."""
    from demidcd.io.model import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(text.encode()))
    return path


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (temporary file, then rename); inf → "inf"."""
    return _atomic(path, json.dumps(_jsonable(obj), indent=1) + "\n")


def write_csv(path: str | os.PathLike[str], header: Sequence[str],
              rows: Iterable[Sequence[Any]]) -> Path:
    """Write a CSV file atomically."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(list(header))
    for r in rows:
        w.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)
                    for v in r])
    return _atomic(path, buf.getvalue())


def read_csv(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- progress
class Progress:
    """A tqdm bar over ``total`` steps on stderr (plain lines when tqdm is missing or stderr is
    not a terminal); silent with ``quiet``. ``step(msg)`` advances by one and says what ran."""

    def __init__(self, total: int, desc: str, quiet: bool = False):
        self.quiet, self.desc, self.total, self.n = quiet, desc, total, 0
        self.t0 = time.perf_counter()
        self._last_note = -math.inf
        self.bar = None
        if not quiet:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=desc, file=sys.stderr, leave=True,
                                disable=None, dynamic_ncols=True)
                if self.bar.disable:  # not a terminal: plain lines instead
                    self.bar = None
            except ImportError:
                self.bar = None

    def note(self, msg: str) -> None:
        """Show what is running now (does not advance)."""
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(msg, refresh=True)
        elif time.perf_counter() - self._last_note >= 5.0:  # plain lines: at most every 5 s
            self._last_note = time.perf_counter()
            print(f"[{self.desc} {self.n}/{self.total} {time.perf_counter() - self.t0:6.0f}s] "
                  f"{msg}", file=sys.stderr, flush=True)

    def step(self, msg: str = "") -> None:
        self.n += 1
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(1)
            if msg:
                self.bar.set_postfix_str(msg, refresh=True)
        elif msg:
            print(f"[{self.desc} {self.n}/{self.total} {time.perf_counter() - self.t0:6.0f}s] "
                  f"done: {msg}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def say(msg: str, quiet: bool = False) -> None:
    """A result line on stdout (suppressed by ``--quiet``)."""
    if not quiet:
        print(msg, flush=True)


# --------------------------------------------------------------------------- running the CLI
def add_data_arguments(ap: argparse.ArgumentParser) -> None:
    """The data options of ``convergence.data_setup``: --train, --test, --format, --column
    (default: EWT, or CoNLL04 for entity-relation) and --split-seed (the CoNLL04 split)."""
    ap.add_argument("--train")
    ap.add_argument("--test")
    ap.add_argument("--format", choices=("conllu", "columns"))
    ap.add_argument("--column")
    ap.add_argument("--split-seed", type=int, default=0)


def demidcd_cmd(experimental: dict[str, Any] | None = None) -> list[str]:
    """The ``demidcd`` command of this interpreter (works without the console script); with
    ``experimental`` settings, through ``benchmarks/experimental_cli.py``."""
    if experimental:
        return [sys.executable, str(ROOT / "benchmarks" / "experimental_cli.py"),
                *(f"{k}={v}" for k, v in experimental.items()), "--"]
    return [sys.executable, "-m", "demidcd"]


def execute_cli(args: list[str], log_path: str | os.PathLike[str], timeout: float,
                experimental: dict[str, Any] | None = None) -> int:
    """``demidcd ARGS`` in a new interpreter, stdout and stderr to ``log_path``; its exit
    status. The tests replace it with a faster launcher of the same command."""
    with open(log_path, "w") as f:
        return subprocess.run([*demidcd_cmd(experimental), *args], stdout=f,
                              stderr=subprocess.STDOUT, timeout=timeout,
                              cwd=str(ROOT)).returncode


def run_cli(args: Sequence[str], log_path: str | os.PathLike[str], timeout: float = 3600,
            experimental: dict[str, Any] | None = None) -> tuple[str, float]:
    """Run ``demidcd ARGS`` to completion, stdout+stderr to ``log_path``; return (log text,
    wall seconds). Raises RuntimeError with the last log line on a non-zero exit.
    ``experimental``: the engine's experimental settings for this run (:func:`demidcd_cmd`)."""
    t0 = time.perf_counter()
    kw = {"experimental": experimental} if experimental else {}  # a test's launcher takes none
    returncode = execute_cli([str(a) for a in args], log_path, timeout, **kw)
    wall = time.perf_counter() - t0
    text = Path(log_path).read_text()
    if returncode != 0:
        last = text.strip().splitlines()[-1] if text.strip() else "(no output)"
        raise RuntimeError(f"demidcd {' '.join(map(str, args[:3]))} ... exited {returncode}: "
                           f"{last} (log: {log_path})")
    return text, wall


# --------------------------------------------------------------------------- run summaries
def read_summary(path: str | os.PathLike[str]) -> dict | None:
    """The JSON summary ``demidcd train --summary-json`` wrote (None when absent)."""
    p = Path(path)
    return json.loads(p.read_text()) if p.is_file() else None


def summary_views(s: dict | None) -> dict[str, Any]:
    """From a run summary, the figures the benchmarks report: ``stopped`` (reason,
    iterations, seconds), ``cpu`` (average, of), ``learner`` (DEMI-DCD / MS-DCD counters),
    ``ms_split`` (MS-DCD's barrier vs master time)."""
    if not s:
        return {"stopped": {}, "cpu": None, "learner": None, "ms_split": None}
    x, secs = s.get("extra", {}), float(s.get("seconds") or 0.0)
    out: dict[str, Any] = {
        "stopped": {"reason": s["stop_reason"], "iterations": s["epochs"], "seconds": secs},
        "cpu": ({"average": x["cpu_average"], "of": 100.0 * s.get("threads", 1)}
                if x.get("cpu_average") is not None else None),
        "learner": None, "ms_split": None}
    if "publishes" in x:
        own = float(x.get("learner_inferences", 0))
        out["learner"] = {
            "updates": float(x["updates"]), "updates_per_s": x["updates"] / max(secs, 1e-9),
            "publishes": float(x["publishes"]),
            "publish_percent": 100.0 * x.get("publish_seconds", 0.0) / max(secs, 1e-9),
            "inferences": float(x.get("inferences", 0)) + own, "learner_inferences": own,
            "pushed": float(x.get("pushed", 0)), "chunks_redone": float(x.get("wasted", 0))}
    if "master_seconds" in x:
        a, b, n = x["inference_seconds"], x["master_seconds"], max(s["epochs"], 1)
        out["ms_split"] = {"inference_seconds": a, "master_seconds": b, "iterations": n,
                           "inference_per_iteration": a / n, "master_per_iteration": b / n,
                           "master_share": b / (a + b) if a + b > 0 else float("nan")}
    return out


# --------------------------------------------------------------------------- log parsing
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def _f(s: str) -> float:
    return float(s.replace(",", ""))


def parse_cpu_line(text: str) -> dict[str, float] | None:
    """``average CPU: 187% of 200%`` → {"average": 187, "of": 200}."""
    m = re.findall(r"average CPU:\s*" + _NUM + r"%\s*of\s*" + _NUM + "%", text)
    return {"average": _f(m[-1][0]), "of": _f(m[-1][1])} if m else None


def parse_learner_line(text: str) -> dict[str, float] | None:
    """DEMI-DCD / MS-DCD ``learner process: N updates (R/s), P publishes costing X% of its time[, L
    inferences of its own]; workers: I inferences, S structures pushed, W chunks redone ...``
    (``inferences`` counts both the learner's and the workers'; logs written before the line
    said ``learner process:`` read as well)."""
    m = re.findall(r"learner(?: process)?:\s*" + _NUM + r" updates \(" + _NUM + r"/s\),\s*" + _NUM +
                   r" publishes costing " + _NUM + r"% of its time(?:,\s*" + _NUM +
                   r" inferences of its own)?; workers:\s*" + _NUM +
                   r" inferences,\s*" + _NUM + r" structures pushed,\s*" + _NUM +
                   r" chunks redone", text)
    if not m:
        return None
    u, r, p, pct, own, inf, pushed, wasted = m[-1]
    own_n = _f(own) if own else 0.0
    return {"updates": _f(u), "updates_per_s": _f(r), "publishes": _f(p),
            "publish_percent": _f(pct), "inferences": _f(inf) + own_n,
            "learner_inferences": own_n, "pushed": _f(pushed), "chunks_redone": _f(wasted)}


def parse_ms_split(text: str) -> dict[str, float] | None:
    """``MS-DCD time split: inference (barrier) Xs, master DCD passes Ys over N iterations
    (As vs Bs each)``."""
    m = re.findall(r"MS-DCD time split: inference \(barrier\) " + _NUM + r"s, master DCD passes "
                   + _NUM + r"s over " + _NUM + r" iterations \(" + _NUM + r"s vs " + _NUM +
                   r"s each\)", text)
    if not m:
        return None
    a, b, n, pa, pb = (_f(x) for x in m[-1])
    return {"inference_seconds": a, "master_seconds": b, "iterations": n,
            "inference_per_iteration": pa, "master_per_iteration": pb,
            "master_share": b / (a + b) if a + b > 0 else float("nan")}


def parse_stopped(text: str) -> dict[str, Any] | None:
    """``stopped: REASON after N iterations, S s``."""
    m = re.findall(r"stopped: (\S+) after " + _NUM + r" iterations, " + _NUM + "s", text)
    return ({"reason": m[-1][0], "iterations": int(_f(m[-1][1])), "seconds": _f(m[-1][2])}
            if m else None)


def parse_metrics(text: str) -> dict[str, float]:
    """``accuracy: NN.NN%`` and ``entity F1: NN.NN (P .., R ..)`` / ``relation F1: ...`` lines
    (the last of each, as fractions)."""
    out: dict[str, float] = {}
    for key, pat in (("accuracy", r"accuracy:\s*" + _NUM + "%"),
                     ("entity_f1", r"entity F1:\s*" + _NUM),
                     ("relation_f1", r"relation F1:\s*" + _NUM)):
        m = re.findall(pat, text)
        if m:
            out[key] = _f(m[-1]) / 100.0
    return out


def read_jsonl(path: str | os.PathLike[str]) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


# --------------------------------------------------------------------------- the measures
def relative_difference(primals: Sequence[float], fstar: float) -> list[float]:
    """(f(w) − f*) / f* for each primal value (the paper's Figure 1 and 4 measure)."""
    if not fstar > 0:
        raise ValueError(f"f* must be positive, got {fstar}")
    return [(p - fstar) / fstar for p in primals]


def annotate_relative(curve: list[dict], fstar: float) -> list[float]:
    """Set ``relative_difference`` on every row of a run's snapshot curve that has a primal;
    returns those differences in order."""
    rel = relative_difference([r["primal"] for r in curve if r["primal"] is not None], fstar)
    for r, d in zip((r for r in curve if r["primal"] is not None), rel, strict=True):
        r["relative_difference"] = d
    return rel


def fstar_of(runs: dict[str, Sequence[tuple[float, float]]],
             exclude: Iterable[str] = (), reference: float | None = None) -> float:
    """The lowest primal of any run not excluded (SP-IPM solves another problem), or
    ``reference`` (e.g. a long run's f*, so that short runs stay comparable) when it is lower."""
    ex = set(exclude)
    vals = [p for name, pts in runs.items() if name not in ex for _, p in pts
            if p is not None and math.isfinite(p)]
    if not vals:
        raise ValueError("no primal values to take f* from")
    return min(vals) if reference is None else min(min(vals), reference)


def time_to_gap(points: Sequence[tuple[float, float]], fstar: float, gap: float = 0.01
                ) -> float:
    """The time (points are (t, primal), any order) at which the relative difference
    (P − f*)/f* first reaches ``gap``, interpolated linearly in log(difference) between the
    snapshots on either side, so a coarse snapshot grid does not quantise it (as the
    acceptance checks' ttg.py does); inf if never reached."""
    prev = None
    for t, p in sorted(points):
        if p is None or not math.isfinite(p):
            continue
        g = (p - fstar) / fstar
        if g <= gap:
            if prev is None or prev[1] <= 0 or g <= 0:
                return t
            (t0, g0), lg = prev, math.log
            return t0 + (t - t0) * (lg(g0) - lg(gap)) / (lg(g0) - lg(g))
        prev = (t, g)
    return math.inf


def time_to_metric(points: Sequence[tuple[float, float]], target: float) -> float:
    """First time t (points are (t, metric)) with metric ≥ ``target``; inf if never."""
    for t, m in sorted(points):
        if m is not None and math.isfinite(m) and m >= target:
            return t
    return math.inf


def time_to_stay(points: Sequence[tuple[float, float]], target: float) -> float:
    """First time t (points are (t, metric)) from which every later metric is ≥ ``target``;
    inf if the last one is below it."""
    out = math.inf
    for t, m in sorted(points, reverse=True):
        if m is None or not math.isfinite(m) or m < target:
            break
        out = t
    return out


def ratio(a: float, b: float) -> float:
    """a / b with inf/nan handled (time ratios: how many times slower b is than a → b / a)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf if math.isfinite(a) and not math.isfinite(b) else math.nan
    return a / b if b else math.inf


def moving_average(times: Sequence[float], values: Sequence[float], window: float = 2.0
                   ) -> list[float]:
    """Trailing moving average over ``window`` seconds: the mean of the values with time in
    (t − window, t] at each sample time t."""
    out, q, s, lo = [], [], 0.0, 0
    for t, v in zip(times, values, strict=True):
        q.append((t, v))
        s += v
        while q[lo][0] <= t - window:
            s -= q[lo][1]
            lo += 1
        out.append(s / (len(q) - lo))
    return out


def thin_log_spaced(times: Sequence[float], min_step: float = 1.0, rel_step: float = 0.08
                    ) -> list[int]:
    """Indices of a subset of sorted ``times`` spaced at least max(min_step, rel_step·t)
    apart (roughly log-spaced after min_step/rel_step seconds); the last one is always kept."""
    keep: list[int] = []
    last = -math.inf
    for k, t in enumerate(times):
        if t - last >= max(min_step, rel_step * t):
            keep.append(k)
            last = t
    if times and (not keep or keep[-1] != len(times) - 1):
        keep.append(len(times) - 1)
    return keep


def thin_snapshots(snapshot_dir: str | os.PathLike[str], min_step: float = 1.0,
                   rel_step: float = 0.08) -> tuple[int, int]:
    """Delete snapshots of ``snapshot_dir`` so that the kept ones are log-spaced (see
    :func:`thin_log_spaced`); returns (kept, total). Evaluation cost then grows with
    log(duration), not duration."""
    from demidcd.io.snapshots import list_snapshots

    snaps = list_snapshots(snapshot_dir)
    keep = set(thin_log_spaced([s for s, _ in snaps], min_step, rel_step))
    for k, (_, path) in enumerate(snaps):
        if k not in keep:
            os.unlink(path)
    return len(keep), len(snaps)


def read_snapshot_csv(path: str | os.PathLike[str]) -> list[dict[str, float | None]]:
    """Rows of ``demidcd evaluate-snapshots`` output: seconds, primal, dual (None), metric."""
    rows = []
    for r in read_csv(path):
        rows.append({k: (float(v) if v not in ("", None) else None) for k, v in r.items()})
    return sorted(rows, key=lambda r: r["seconds"])


def read_cpu_csv(path: str | os.PathLike[str]) -> tuple[list[float], list[float]]:
    """(seconds, total CPU %) of a ``--cpu-log`` file."""
    rows = read_csv(path)
    return [float(r["seconds"]) for r in rows], [float(r["total"]) for r in rows]


def fmt_s(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "not reached"
    return f"{x:.1f}s"


def fmt_x(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.2f}x"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join(str(v) for v in r) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- plotting
def pyplot():
    """matplotlib.pyplot with the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        return None


def save_figure(fig, path: str | os.PathLike[str]) -> Path:
    """Save a figure atomically as PNG and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


METHOD_STYLE = {
    "1-DCD": dict(color="tab:gray", linestyle="--"),
    "DEMI-DCD": dict(color="tab:red", linestyle="-"),
    "MS-DCD": dict(color="tab:blue", linestyle="-."),
    "SP-IPM": dict(color="tab:green", linestyle=":"),
    "CRFsuite": dict(color="tab:purple", linestyle="-"),
}


def machine_caption(info: dict[str, Any]) -> str:
    load = info.get("load_average_1_5_15min")
    return (f"{info.get('cpu')}, {info.get('nproc')} cores; load before run "
            f"{load[0] if load else 'n/a'}")


def rmtree(path: str | os.PathLike[str]) -> None:
    shutil.rmtree(path, ignore_errors=True)


def crfsuite_peer(train: str, test: str, *, fmt: str, column: str | int | None = None,
                  algorithm: str = "lbfgs", iterations: int = 100,
                  feature_columns: tuple[int, ...] = (), template: str = "base",
                  min_count: int | None = None, metric: str = "accuracy",
                  work: Path, note=None, done=None) -> dict | None:
    """CRFsuite on the same observation features as demidcd: for each token, the strings of
    the ``SequenceFeaturizer`` features it fires (dictionary fitted on train). ``algorithm``
    ``lbfgs`` (c1 = c2 = 0.1) or ``ap`` (averaged perceptron); ``metric`` ``accuracy`` (tokens)
    or ``chunk-f1`` (conlleval's, ``demidcd.tasks.chain.chunks``). None without python-crfsuite."""
    try:
        import pycrfsuite
    except ImportError:
        return None
    from demidcd.io.tagged import read_tagged
    from demidcd.tasks.chain.chunks import chunk_scores
    from demidcd.tasks.chain.features import DEFAULT_MIN_COUNT, SequenceFeaturizer

    (note or (lambda m: None))(f"CRFsuite {algorithm}: features, then {iterations} iterations")
    t0 = time.perf_counter()
    kw = {"fmt": fmt, "column": column, "feature_columns": tuple(feature_columns)}
    tr, te = read_tagged(train, **kw), read_tagged(test, **kw)
    for c in (tr, te):  # tokens as the tasks see them: (word, *feature columns)
        if c.attributes is not None:
            c.tokens = [[(w, *a) for w, a in zip(ws, at, strict=True)]
                        for ws, at in zip(c.tokens, c.attributes, strict=True)]
    mc = DEFAULT_MIN_COUNT if min_count is None else min_count
    fz = SequenceFeaturizer(mc, 0, template).fit(tr.tokens)
    names = fz.features

    def items(tokens):
        enc = fz.transform(tokens)
        fp, fi, sp = enc.feat_ptr, enc.feat_idx, enc.sent_ptr
        for s in range(enc.n_sentences):
            yield [[names[j] for j in fi[fp[t]:fp[t + 1]]] for t in range(sp[s], sp[s + 1])]

    trainer = pycrfsuite.Trainer(algorithm=algorithm, verbose=False)
    for xseq, yseq in zip(items(tr.tokens), tr.tags, strict=True):
        trainer.append(xseq, yseq)
    params = {"max_iterations": iterations}
    if algorithm == "lbfgs":
        params.update({"c1": 0.1, "c2": 0.1})
    trainer.set_params(params)
    prep = time.perf_counter() - t0
    model = Path(work) / f"crfsuite_{algorithm}.model"
    c0, t0 = time.process_time(), time.perf_counter()
    trainer.train(str(model))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tagger = pycrfsuite.Tagger()
    tagger.open(str(model))
    pred = [tagger.tag(x) for x in items(te.tokens)]
    right = sum(p == g for ps, gs in zip(pred, te.tags, strict=True)
                for p, g in zip(ps, gs, strict=True))
    acc = right / max(sum(len(g) for g in te.tags), 1)
    score = acc if metric == "accuracy" else chunk_scores(te.tags, pred).as_dict()["f1"]
    info = trainer.logparser.last_iteration or {}
    res = {"algorithm": algorithm, "max_iterations": iterations,
           "iterations_run": len(trainer.logparser.iterations),
           "train_wall_seconds": wall, "train_cpu_seconds": cpu,
           "feature_preparation_seconds": prep, "test_accuracy": acc, "metric": metric,
           "test_metric": score, "observation_features": len(names),
           "final_loss": info.get("loss"), "pycrfsuite": getattr(pycrfsuite, "__version__", None)}
    if algorithm == "lbfgs":
        res.update({"c1": 0.1, "c2": 0.1})
    (done or (lambda m: None))(f"CRFsuite {algorithm}: {100 * score:.2f} in {wall:.1f}s")
    return res


def write_feature_items(train: str, test: str, work: Path, *, fmt: str,
                        column: str | int | None = None, feature_columns: tuple[int, ...] = (),
                        template: str = "base", min_count: int | None = None) -> dict[str, Any]:
    """demidcd's observation features per token written to files, for a peer that trains in
    its own process (so that its memory is its own): ``work/train.items`` and
    ``work/test.items``, one token a line, ``LABEL<TAB>feature<TAB>feature ...``, a blank line
    after each sentence (CRFsuite's data format without weights). The features are those of
    :func:`crfsuite_peer`: the ``SequenceFeaturizer`` strings, dictionary fitted on train.
    Returns the two paths, the counts and the seconds taken."""
    from demidcd.io.tagged import read_tagged
    from demidcd.tasks.chain.features import DEFAULT_MIN_COUNT, SequenceFeaturizer

    t0 = time.perf_counter()
    kw = {"fmt": fmt, "column": column, "feature_columns": tuple(feature_columns)}
    tr = read_tagged(train, **kw)
    mc = DEFAULT_MIN_COUNT if min_count is None else min_count

    def tokens_of(c):  # tokens as the tasks see them: (word, *feature columns)
        if c.attributes is None:
            return c.tokens
        return [[(w, *a) for w, a in zip(ws, at, strict=True)]
                for ws, at in zip(c.tokens, c.attributes, strict=True)]

    fz = SequenceFeaturizer(mc, 0, template).fit(tokens_of(tr))
    names = fz.features
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"observation_features": len(names)}
    for part, corpus in (("train", tr), ("test", None)):
        c = corpus if corpus is not None else read_tagged(test, **kw)
        enc = fz.transform(tokens_of(c))
        fp, fi, sp = enc.feat_ptr, enc.feat_idx, enc.sent_ptr
        path = work / f"{part}.items"
        with open(path, "w", encoding="utf-8") as f:
            for s, tags in zip(range(enc.n_sentences), c.tags, strict=True):
                f.write("".join(tag + "\t" + "\t".join(names[j] for j in fi[fp[t]:fp[t + 1]])
                                + "\n" for t, tag in zip(range(sp[s], sp[s + 1]), tags,
                                                         strict=True)) + "\n")
        out[f"{part}_items"] = str(path)
        out[f"{part}_tokens"] = int(sp[enc.n_sentences])
        out[f"{part}_sentences"] = int(enc.n_sentences)
        del enc, c
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def read_feature_items(path: str | os.PathLike[str]) -> Iterable[tuple[list[str], list[str]]]:
    """The sentences of a :func:`write_feature_items` file, one at a time: (the features of
    each token, the labels)."""
    xs: list[list[str]] = []
    ys: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if ys:
                    yield xs, ys
                xs, ys = [], []
                continue
            label, _, rest = line.partition("\t")
            ys.append(label)
            xs.append(rest.split("\t") if rest else [])
    if ys:
        yield xs, ys
