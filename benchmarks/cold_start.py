"""Cold start (issue 56, defect 1): the first ``demidcd train`` and the first library ``fit``
of a fresh clone, where numba compiles every kernel the run calls.

The current tree's committed HEAD is cloned (``git clone``) into a temporary folder and run
from there (``PYTHONPATH`` = the clone), each run with an empty ``NUMBA_CACHE_DIR`` of its own:

* ``train``: README command 1, ``demidcd train --threads 2`` (the synthetic default corpus):
  its ``kernels ready after N s`` line (the acceptance's figure: N <= 45 on 2 cores), whether it
  said ``compiling``, its set-up line, and the wall time of the whole command;
* ``fit``: ``ChunkTagger(threads=2, time_limit=10).fit(X, y)`` on CoNLL-2000's training file
  (``feature_columns=[2]``) in a new interpreter: its wall time from the imports to the end of
  ``fit``, whether it told (stderr, a warning) that it compiles, and ``result_.seconds`` /
  ``result_.extra["setup_seconds"]``;
* ``warm``: the same ``train`` again on the now warm cache (nothing compiled: no notice).

    python benchmarks/cold_start.py --name 2core          # results/cold_start_2core.json
    python benchmarks/cold_start.py --runs 2 --skip-fit

The load average is recorded with each run, and the CPU time of the command with its children
(the set-up child, the compiling children, the learners): on a shared machine other processes
weigh on the wall figures (compare runs made under the same load).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, RESULTS, ROOT, load_average, machine_info, say, write_json  # noqa: E402

FIT = """
import sys, time, warnings
warnings.simplefilter("always")
t0 = time.time()
from demidcd import datasets
from demidcd.api import ChunkTagger
X, y = datasets.load_tagged(sys.argv[1], feature_columns=[2])
est = ChunkTagger(threads=2, time_limit=float(sys.argv[2])).fit(X, y)
print(f"FITWALL {time.time() - t0:.1f} SOLVER {est.result_.seconds:.1f} "
      f"SETUP {est.result_.extra.get('setup_seconds', -1):.1f}")
"""


def _figure(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def clone(dest: Path, source: Path = ROOT) -> Path:
    """A fresh clone of ``source``'s HEAD (what a new user gets)."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(source), str(dest)],
                   check=True)
    return dest


def run(cmd: list[str], cwd: Path, src: Path, cache: Path, timeout: float) -> dict:
    """Run ``cmd`` with the clone first on the path and an empty numba cache: its output,
    exit status, wall time and the load before it."""
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(src), "NUMBA_CACHE_DIR": str(cache)}
    load = load_average()
    t0 = time.perf_counter()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)  # with its reaped children
    return {"rc": p.returncode, "wall_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(cpu, 1), "load_before": load, "load_after": load_average(),
            "out": p.stdout + p.stderr}


def train_run(src: Path, work: Path, cache: Path) -> dict:
    r = run([sys.executable, "-m", "demidcd", "train", "--threads", "2"], work, src, cache,
            1800)
    out = r.pop("out")
    r.update(kernels_ready_s=_figure(r"kernels ready after ([0-9.]+)", out),
             said_compiling="compiling kernels" in out,
             setup_line=next((ln for ln in out.splitlines()
                              if ln.startswith("set-up before training")), None),
             learners=next((ln.split(":")[0] for ln in out.splitlines()
                            if "learner process" in ln and "because" in ln), None))
    if r["rc"] != 0:
        r["tail"] = out[-2000:]
    return r


def fit_run(src: Path, work: Path, cache: Path, data: Path, limit: float) -> dict:
    r = run([sys.executable, "-c", FIT, str(data), str(limit)], work, src, cache, 1800)
    out = r.pop("out")
    r.update(fit_wall_s=_figure(r"FITWALL ([0-9.]+)", out),
             solver_s=_figure(r"SOLVER ([0-9.]+)", out),
             setup_s=_figure(r"SETUP ([0-9.-]+)", out),
             told_compiling=bool(re.search(r"compil", out.replace("FITWALL", ""), re.I)),
             time_limit_s=limit)
    if r["rc"] != 0:
        r["tail"] = out[-2000:]
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default=os.uname().nodename, help="results/cold_start_NAME.json")
    ap.add_argument("--runs", type=int, default=1, help="cold runs of each (default 1)")
    ap.add_argument("--data", type=Path, default=DATA / "conll2000" / "train.txt",
                    help="the CoNLL-2000 training file of the fit")
    ap.add_argument("--time-limit", type=float, default=10.0, help="the fit's time_limit")
    ap.add_argument("--skip-fit", action="store_true", help="only the train command")
    ap.add_argument("--source", type=Path, default=ROOT,
                    help="the git tree to clone (default: this one; e.g. a baseline checkout)")
    args = ap.parse_args()
    runs: dict[str, list] = {"train": [], "fit": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="demidcd-cold-") as tmp:
        tmp_p = Path(tmp)
        src = clone(tmp_p / "clone", args.source)
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        for k in range(args.runs):
            cache = tmp_p / f"cache-train-{k}"
            say(f"cold train {k + 1}/{args.runs} ...")
            r = train_run(src, tmp_p, cache)
            say(f"  kernels ready after {r['kernels_ready_s']} s, wall {r['wall_s']} s, "
                f"load {r['load_before']}")
            runs["train"].append(r)
            if k == 0:
                w = train_run(src, tmp_p, cache)
                say(f"  warm: said compiling {w['said_compiling']}, wall {w['wall_s']} s")
                runs["warm"].append(w)
            if not args.skip_fit and args.data.exists():
                say(f"cold fit {k + 1}/{args.runs} ...")
                f = fit_run(src, tmp_p, tmp_p / f"cache-fit-{k}", args.data, args.time_limit)
                say(f"  fit wall {f['fit_wall_s']} s (solver {f['solver_s']} s, set-up "
                    f"{f['setup_s']} s), told compiling: {f['told_compiling']}")
                runs["fit"].append(f)
    path = write_json(RESULTS / f"cold_start_{args.name}.json",
                      {"machine": machine_info(), "source": str(args.source), "commit": head,
                       "runs": runs,
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    say(f"wrote {path}")


if __name__ == "__main__":
    main()
