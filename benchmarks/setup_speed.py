"""Set-up speed of ``demidcd train`` (issues 43 and 53): reading, building the features and
encoding a corpus before the first update, on one core, and in parts on ``p`` processes.

Each run is ``demidcd train --train FILE --threads 1 --time-limit 1 --seed 0`` pinned to one
core (``--cpu``, as ``taskset -c``), in a new interpreter; from its log come the phases it
prints (``read in``, ``building features ... (s)``, ``encoding ... (s)``: the last two only
when they take a second or more) and its peak memory (PSS), and from the operating system its
wall time and its CPU time (user + system). ``--baseline DIR`` times another copy of the
package too (a ``demidcd/`` folder in DIR, e.g. ``git archive COMMIT demidcd | tar -x -C
DIR``), the two interleaved run by run, so that a loaded machine weighs on both alike; the
report takes each one's median over ``--runs``.

    python benchmarks/setup_speed.py                          # Brown train and EWT train
    python benchmarks/setup_speed.py --baseline /tmp/old --runs 3 --name epyc

``--threads 1,2`` also times ``--threads 2 --algorithm dcd`` (the set-up in 2 processes,
:mod:`demidcd.estimators.parts`; the training, as at p = 1, in one: the wall times differ by the
set-up alone), not pinned (``--cpu`` applies to p = 1), interleaved with the p = 1 runs. For
every run ``setup_s`` is the command's wall time less its training (the seconds of its
``stopped:`` line): start-up, reading, features, encoding, compiling if any, and exit; a run in
parts also gives its stages (``parts_read_s``: read and counted, ``parts_merge_s``,
``parts_encode_s``).

Results: ``benchmarks/results/setup_speed_NAME.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    DATA,
    RESULTS,
    ROOT,
    machine_info,
    machine_line,
    markdown_table,
    say,
    write_json,
)

CORPORA = {
    "brown": (DATA / "brown" / "brown-train.txt", "columns"),
    "ewt": (DATA / "ud_english_ewt" / "en_ewt-ud-train.conllu", "conllu"),
}
_READ = re.compile(r"\(read in ([\d.]+)s[),]")  # (in parts: with the counting)
_FEATURES = re.compile(r"building features of [\d,]+ sentences \.\.\. \(([\d.]+) s\)")
_ENCODING = re.compile(r"encoding [\d,]+ sentences \.\.\. \(([\d.]+) s\)")
_PEAK = re.compile(r"peak memory: ([\d,.]+) MiB")
_TRAINED = re.compile(r"stopped: .*? after [\d,]+ \w+, ([\d.]+)s\b")
_PARTS = re.compile(r"set-up in (\d+) processes: read and counted in ([\d.]+) s \(CPU s per "
                    r"part: ([\d., ]+)\), merged in ([\d.]+) s \(CPU ([\d.]+) s\), encoded "
                    r"in ([\d.]+) s \(CPU s per part: ([\d., ]+); then ([\d.]+) s here\)")


def parse_parts(text: str) -> dict[str, float | None]:
    """A run in parts' stages (wall seconds; None for a serial set-up), the CPU seconds of its
    critical path (the slowest part's reading and counting + the merge + the slowest part's
    encoding + what follows in the parent: what the set-up would take on idle cores, start-up
    and exit aside) and its training seconds."""
    m, t = _PARTS.search(text), _TRAINED.search(text)
    if m:
        path = max(map(float, m.group(3).split(","))) + float(m.group(5)) + \
            max(map(float, m.group(7).split(","))) + float(m.group(8))
    return {"parts_read_s": float(m.group(2)) if m else None,
            "parts_merge_s": float(m.group(4)) if m else None,
            "parts_encode_s": float(m.group(6)) if m else None,
            "parts_critical_cpu_s": round(path, 2) if m else None,
            "train_s": float(t.group(1)) if t else None}


def parse_log(text: str) -> dict[str, float | None]:
    """The phases a train log prints (seconds; a step under a second prints none: 0) and its
    peak memory (MiB, PSS of all processes)."""
    def num(rx: re.Pattern, default: float | None) -> float | None:
        m = rx.search(text)
        return float(m.group(1).replace(",", "")) if m else default

    return {"read_s": num(_READ, None), "features_s": num(_FEATURES, 0.0),
            "encoding_s": num(_ENCODING, 0.0), "peak_pss_mib": num(_PEAK, None)}


def run_once(tree: Path, path: Path, fmt: str, cpu: int | None, log: Path,
             threads: int = 1, extra: tuple[str, ...] = ()) -> dict:
    """One ``demidcd train`` of the package in ``tree`` on ``path`` (``threads`` > 1: with
    ``--algorithm dcd``, the set-up on that many processes): the log's figures, the wall and
    CPU seconds of the whole process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = [sys.executable, "-m", "demidcd", "train", "--train", str(path), "--format", fmt,
            "--threads", str(threads), "--time-limit", "1", "--seed", "0", *extra]
    if threads > 1:
        args += ["--algorithm", "dcd"]
        cpu = None
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, cwd=tree, env=env,
                            preexec_fn=pin, timeout=1800).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = log.read_text()
    if rc != 0:
        raise RuntimeError(f"{' '.join(args[2:6])} in {tree} exited {rc}: {text[-500:]}")
    out = {**parse_log(text), **parse_parts(text)}
    out["setup_log_s"] = round(sum(out[k] or 0.0 for k in ("read_s", "features_s",
                                                           "encoding_s")), 2)
    out["wall_s"] = round(wall, 2)
    out["cpu_s"] = round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2)
    out["setup_s"] = round(wall - out["train_s"], 2) if out["train_s"] is not None else None
    return out


_KEYS = ("read_s", "features_s", "encoding_s", "setup_log_s", "parts_read_s", "parts_merge_s",
         "parts_encode_s", "parts_critical_cpu_s", "setup_s", "wall_s", "cpu_s", "peak_pss_mib")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="brown,ewt",
                    help=f"comma-separated, of {', '.join(CORPORA)} (default: brown,ewt)")
    ap.add_argument("--train", default=None, help="another training file (replaces --corpora)")
    ap.add_argument("--format", default="columns", help="its format (with --train)")
    ap.add_argument("--baseline", default=None,
                    help="a folder holding another demidcd/ package to time alongside")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="the core to pin to (-1: none)")
    ap.add_argument("--threads", default="1",
                    help="comma-separated process counts for the set-up (default: 1)")
    ap.add_argument("--column", default=None, help="--column for every corpus (e.g. 3: "
                                                   "Brown's universal tags)")
    ap.add_argument("--name", default="default")
    ap.add_argument("--out", default=None, help="results file (default: results/setup_speed_"
                                                 "NAME.json)")
    a = ap.parse_args(argv)
    if a.train:
        corpora = {Path(a.train).name: (Path(a.train), a.format)}
    else:
        corpora = {c: CORPORA[c] for c in a.corpora.split(",")}
    missing = [str(p) for p, _ in corpora.values() if not p.is_file()]
    if missing:
        print(f"setup_speed: no such file: {missing[0]} (the corpora of ../shared/data)",
              file=sys.stderr)
        return 2
    trees = {"this tree": ROOT}
    if a.baseline:
        trees = {"baseline": Path(a.baseline).resolve(), **trees}
    cpu = None if a.cpu < 0 else a.cpu
    info = machine_info()
    ps = [int(x) for x in a.threads.split(",")]
    label = {(t, p): t if p == 1 else f"{t}, p={p}" for t in trees for p in ps}
    extra = ("--column", a.column) if a.column else ()
    runs: dict[str, dict[str, list[dict]]] = {c: {v: [] for v in label.values()}
                                              for c in corpora}
    with tempfile.TemporaryDirectory() as tmp:
        for c, (path, fmt) in corpora.items():
            for r in range(a.runs):
                for (t, p), name in label.items():
                    rec = run_once(trees[t], path, fmt, cpu, Path(tmp) / "train.log", p, extra)
                    runs[c][name].append(rec)
                    say(f"{c} {name} run {r + 1}: " + ", ".join(f"{k} {rec[k]}" for k in _KEYS))
    medians = {c: {t: {k: round(statistics.median(x[k] for x in rs), 2) if all(
        x[k] is not None for x in rs) else None for k in _KEYS} for t, rs in by.items()}
        for c, by in runs.items()}
    result = {"machine": info, "cpu_pinned": cpu, "runs_each": a.runs,
              "command": "demidcd train --train FILE --threads 1 --time-limit 1 --seed 0 "
                         "(p > 1: --threads p --algorithm dcd)" + (
                             f" --column {a.column}" if a.column else ""),
              "trees": {t: str(p) for t, p in trees.items()}, "median": medians, "runs": runs}
    out = Path(a.out) if a.out else RESULTS / f"setup_speed_{a.name}.json"
    write_json(out, result)
    rows = [[c, t, *(m[k] for k in _KEYS)] for c, by in medians.items() for t, m in by.items()]
    print(machine_line(info))
    print(markdown_table(["corpus", "code", "read s", "features s", "encoding s",
                          "set-up (log) s", "parts: read+count s", "merge s", "encode s",
                          "parts: critical-path CPU s", "set-up s", "wall s", "CPU s",
                          "peak PSS MiB"], rows))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
