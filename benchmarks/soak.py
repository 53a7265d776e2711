"""Soak test (issue 8, not in CI): training runs with random faults for N minutes.

    python benchmarks/soak.py --minutes 3 [--seed 0] [--sentences 300]
        [--out benchmarks/results/soak.json] [--keep DIR]

Each run trains ``demidcd train`` on a small synthetic corpus (``demidcd generate``) with a
random algorithm among demi-dcd / ms-dcd / sp-ipm / dcd and random threads in 1–3 (dcd: 1;
ms-dcd and sp-ipm need 2–3; demi-dcd with 1 is single-process DCD), and injects one random
fault a random 0.2–3 s into training (after the first log line of the training loop) or, for a
quarter of the parent signals, 0.05–1.5 s after the launch (start-up: imports, reading, pool
creation). SP-IPM runs use 64 hashed features so that the perceptron cannot separate the data
and stop before the fault:

* ``none`` — the run must end by itself (time limit or convergence) with exit 0 and a model;
* ``sigkill-worker`` — a random worker (from the log's ``worker K pid N`` lines) is SIGKILLed:
  the run must say so, restart it, and still end with exit 0 and a model;
* ``sigint-parent`` / ``sigterm-parent`` — graceful stop: exit 130, and when training was
  interrupted (``stopped: interrupted``) a partial model (``finished`` false) that loads; the
  time from the signal to the exit is recorded (the issue asks for < 2 s); during start-up,
  before the CLI has installed its handlers, death by the signal itself is accepted;
* ``sigkill-parent`` — the orphaned workers must exit by themselves (they watch their parent)
  and the multiprocess resource tracker must unlink the parent's segments.

After every run it checks for leaks: a process of the run's family (every descendant seen while
it ran) still alive 10 s after the exit, a ``/dev/shm/demidcd-<parent pid>-…`` segment still
there 10 s after the exit, or a temporary file left in the output directory (a SIGKILLed parent
may legitimately leave one: it is counted apart). Leftovers are then removed (only this run's),
so one leak does not disturb the next run. A run survives its fault when it ends as described
above and leaks nothing.

Writes ``--out`` (JSON: machine, runs, faults injected / survived by kind, leaks found, stop
latencies, failures with their log tails) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, demidcd_cmd, machine_info, machine_line, write_json  # noqa: E402

from demidcd.errors import DemidcdError  # noqa: E402
from demidcd.io.model import load_model  # noqa: E402
from demidcd.primitives.shm import SHM_DIR, list_segments  # noqa: E402

ALGORITHMS = ("demi-dcd", "ms-dcd", "sp-ipm", "dcd")
FAULTS = ("none", "sigkill-worker", "sigint-parent", "sigterm-parent", "sigkill-parent")
START = re.compile(r"^(iter +\d+ |learner pid \d+)", re.M)
WORKER = re.compile(r"^worker (\d+) pid (\d+)", re.M)
GRACE = 10.0  # seconds after the exit before a live process or segment counts as a leak


class Family:
    """Every descendant of ``pid`` seen so far (kept after the parent dies: orphans)."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.procs: dict[tuple[int, float], psutil.Process] = {}

    def poll(self) -> None:
        try:
            kids = self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for k in kids:
            try:
                self.procs.setdefault((k.pid, k.create_time()), k)
            except psutil.NoSuchProcess:
                pass

    def alive(self) -> list[psutil.Process]:
        out = []
        for p in self.procs.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def kill(self) -> None:
        for p in self.alive():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def _wait_clean(fam: Family, pid: int, timeout: float) -> tuple[list, list, float]:
    """Wait until no family process runs and no segment of ``pid`` is left; returns what is
    left after ``timeout`` and the seconds it took."""
    t0 = time.monotonic()
    while True:
        alive, segs = fam.alive(), list_segments(pid=pid)
        waited = time.monotonic() - t0
        if (not alive and not segs) or waited > timeout:
            return alive, segs, waited
        time.sleep(0.05)


def _model_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"exists": False}
    try:
        _, _, meta = load_model(path)
    except DemidcdError as e:
        return {"exists": True, "error": str(e)}
    return {"exists": True, "finished": meta.get("finished"),
            "stop_reason": meta.get("stop_reason")}


def one_run(i: int, rng: random.Random, data: Path, work: Path) -> dict[str, Any]:
    algorithm = rng.choice(ALGORITHMS)
    threads = {"dcd": 1, "demi-dcd": rng.randint(1, 3)}.get(algorithm) or rng.randint(2, 3)
    multi = threads > 1 and algorithm != "dcd"
    faults = [f for f in FAULTS if multi or f != "sigkill-worker"]
    fault = rng.choice(faults)
    # a quarter of the parent faults land during start-up (imports, data, pool creation)
    phase = ("startup" if fault not in ("none", "sigkill-worker") and rng.random() < 0.25
             else "training")
    delay = round(rng.uniform(0.05, 1.5) if phase == "startup" else rng.uniform(0.2, 3.0), 2)
    time_limit = round(delay + rng.uniform(1.0, 4.0), 1)
    tol = "1e-9" if fault != "none" or rng.random() < 0.5 else "0.01"
    out = work / f"run{i}"
    out.mkdir()
    model, log = out / "m.npz", out / "log.txt"
    args = ["train", "--train", str(data / "train.txt"), "--dev", str(data / "dev.txt"),
            "--algorithm", algorithm, "--threads", str(threads), "--seed", str(i),
            "--time-limit", str(time_limit), "--tol", tol, "--max-epochs", "100000",
            "--model", str(model)]
    if algorithm == "demi-dcd":  # the worker engine's faults: one learner
        args += ["--learners", "1"]
    if algorithm == "sp-ipm":  # few hashed features: not separable, so it runs until the fault
        args += ["--hashing", "64", "--perceptron-epochs", "2"]
    rec: dict[str, Any] = {"run": i, "algorithm": algorithm, "threads": threads, "fault": fault,
                           "phase": phase, "delay": delay, "time_limit": time_limit,
                           "tol": float(tol)}
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = subprocess.Popen([*demidcd_cmd(), *args], stdout=f, stderr=subprocess.STDOUT)
    fam = Family(p.pid)
    problems: list[str] = []
    injected, t_fault, target = False, None, None
    try:
        # wait for the training loop, then for the fault time
        t_start = None
        while p.poll() is None and time.monotonic() - t0 < 300:
            fam.poll()
            text = log.read_text()
            if t_start is None and (phase == "startup" or START.search(text)):
                t_start = t0 if phase == "startup" else time.monotonic()
            if t_start is not None and time.monotonic() - t_start >= delay:
                break
            time.sleep(0.02)
        fam.poll()
        if p.poll() is None and t_start is None:
            problems.append("no training loop within 300 s")
        elif p.poll() is None and fault != "none":
            text = log.read_text()
            if fault == "sigkill-worker":
                latest = {}
                for k, pid in WORKER.findall(text):
                    latest[int(k)] = int(pid)
                alive = {q.pid for q in fam.alive()}
                choices = sorted(pid for pid in latest.values() if pid in alive)
                if choices:
                    target = rng.choice(choices)
                    os.kill(target, signal.SIGKILL)
                    injected = True
            else:
                sig = {"sigint-parent": signal.SIGINT, "sigterm-parent": signal.SIGTERM,
                       "sigkill-parent": signal.SIGKILL}[fault]
                p.send_signal(sig)
                injected = True
            t_fault = time.monotonic()
        # wait for the exit
        deadline = time.monotonic() + time_limit + 120
        while p.poll() is None and time.monotonic() < deadline:
            fam.poll()
            time.sleep(0.02)
        if p.poll() is None:
            problems.append("hung: still running 120 s after its time limit; killed")
            p.kill()
            p.wait()
    finally:
        if p.poll() is None:  # interrupted soak
            p.kill()
            p.wait()
    t_exit = time.monotonic()
    rec.update(injected=injected, returncode=p.returncode, seconds=round(t_exit - t0, 2))
    if t_fault is not None:
        rec["exit_after_fault"] = round(t_exit - t_fault, 3)
    if target is not None:
        rec["killed_worker_pid"] = target
    # leaks: processes, shared memory, temporary files
    alive, segs, waited = _wait_clean(fam, p.pid, GRACE)
    rec["cleanup_seconds"] = round(waited, 2)
    leaks = []
    if alive:
        leaks.append(f"processes left: {[(q.pid, q.name()) for q in alive]}")
        fam.kill()
    if segs:
        leaks.append(f"/dev/shm segments left: {segs}")
        for s in segs:
            try:
                os.unlink(os.path.join(SHM_DIR, s))
            except FileNotFoundError:
                pass
    tmps = [n for n in os.listdir(out) if n.endswith(".tmp")]
    if tmps:
        if fault == "sigkill-parent" and injected:
            rec["temp_files_after_sigkill"] = tmps  # a killed writer cannot clean up
        else:
            leaks.append(f"temporary files left: {tmps}")
    rec["leaks"] = leaks
    # did the run end as it should after its fault?
    text = log.read_text()
    ms = _model_state(model)
    rec["model"] = ms
    stopped = re.search(r"^stopped: (\S+)", text, re.M)
    rec["stop_reason"] = stopped.group(1) if stopped else None
    rc = p.returncode
    if "Traceback" in text:
        problems.append("traceback in the log")
    if ms.get("error"):
        problems.append(f"model does not load: {ms['error']}")
    if not injected or fault == "none":
        if rc != 0 or not ms.get("exists"):
            problems.append(f"exit {rc}, model {'present' if ms.get('exists') else 'missing'}")
    elif fault == "sigkill-worker":
        if rc != 0 or not ms.get("exists"):
            problems.append(f"did not survive a killed worker: exit {rc}")
        if f"pid {target}) died (signal 9)" not in text:
            problems.append("the log does not report the killed worker")
    elif fault in ("sigint-parent", "sigterm-parent"):
        sig = signal.SIGINT if fault == "sigint-parent" else signal.SIGTERM
        # before the CLI installs its handlers (interpreter start, imports) the default
        # action applies; nothing has been allocated yet
        if rc != 130 and not (phase == "startup" and rc == -sig):
            problems.append(f"exit {rc} after {fault} (expected 130)")
        if rec["stop_reason"] == "interrupted" and not (ms.get("exists")
                                                       and ms.get("finished") is False):
            problems.append(f"interrupted without a partial model: {ms}")
    elif fault == "sigkill-parent":
        if rc != -signal.SIGKILL:
            problems.append(f"exit {rc} after SIGKILL")
    rec["problems"] = problems
    rec["survived"] = injected and fault != "none" and not problems and not leaks
    if problems or leaks:
        rec["log_tail"] = text.strip().splitlines()[-6:]
    return rec


def summarize(runs: list[dict], started: float, args, info: dict) -> dict[str, Any]:
    inj = [r for r in runs if r["injected"]]
    by = {f: {"runs": sum(r["fault"] == f for r in runs),
              "injected": sum(r["fault"] == f and r["injected"] for r in runs),
              "survived": sum(r["fault"] == f and r["survived"] for r in runs)}
          for f in FAULTS}
    by["none"]["ok"] = sum(r["fault"] == "none" and not r["problems"] and not r["leaks"]
                           for r in runs)
    stops = [r["exit_after_fault"] for r in inj if r["fault"] in ("sigint-parent",
                                                                    "sigterm-parent")
             and r["stop_reason"] == "interrupted"]
    orphan = [r["cleanup_seconds"] for r in inj if r["fault"] == "sigkill-parent"]
    res = {
        "benchmark": "soak (issue 8)",
        "command": " ".join(["python", "benchmarks/soak.py", *sys.argv[1:]]),
        "machine": info,
        "minutes_requested": args.minutes,
        "wall_seconds": round(time.time() - started, 1),
        "sentences": args.sentences,
        "seed": args.seed,
        "runs": len(runs),
        "faults_injected": len([r for r in inj if r["fault"] != "none"]),
        "faults_survived": sum(r["survived"] for r in runs),
        "faults_not_injected_run_ended_first": sum(not r["injected"] and r["fault"] != "none"
                                                   for r in runs),
        "runs_without_fault_ok": by["none"]["ok"],
        "leaks_found": sum(len(r["leaks"]) for r in runs),
        "runs_with_problems": sum(bool(r["problems"]) for r in runs),
        "by_fault": by,
        "by_algorithm": {a: sum(r["algorithm"] == a for r in runs) for a in ALGORITHMS},
        "graceful_stop_seconds": {"n": len(stops), "max": max(stops, default=None),
                                  "median": statistics.median(stops) if stops else None,
                                  "over_2s": sum(s > 2.0 for s in stops)},
        "after_parent_sigkill_cleanup_seconds": {"n": len(orphan),
                                                 "max": max(orphan, default=None)},
        "failures": [r for r in runs if r["problems"] or r["leaks"]],
        "run_records": [{k: v for k, v in r.items() if k != "log_tail"} for r in runs],
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    return res


def _injected(rec: dict) -> str:
    if rec["fault"] == "none":
        return ""
    return "injected" if rec["injected"] else "not injected"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sentences", type=int, default=300, help="synthetic training sentences")
    ap.add_argument("--out", default=str(RESULTS / "soak.json"))
    ap.add_argument("--keep", metavar="DIR", help="keep run directories (logs, models) here")
    args = ap.parse_args(argv)
    info = machine_info()
    load = info.get("load_average_1_5_15min")
    print(f"soak: {args.minutes:g} min on {machine_line(info)}; load {load}", flush=True)
    rng = random.Random(args.seed)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="demidcd-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    subprocess.run([*demidcd_cmd(), "generate", "--out-dir", str(data), "--sentences",
                    str(args.sentences), "--seed", str(args.seed), "--quiet"], check=True)
    started = time.time()
    deadline = time.monotonic() + 60 * args.minutes
    runs: list[dict] = []
    try:
        while time.monotonic() < deadline:
            rec = one_run(len(runs), rng, data, work)
            runs.append(rec)
            status = ("ok" if not rec["problems"] and not rec["leaks"] else
                      "FAIL: " + "; ".join(rec["problems"] + rec["leaks"]))
            extra = (f", exit {rec['exit_after_fault']:.2f}s after the fault"
                     if "exit_after_fault" in rec else "")
            print(f"run {rec['run']:3d}  {rec['algorithm']:8s} p={rec['threads']}  "
                  f"{rec['fault']:14s} {_injected(rec):12s}"
                  f" rc={rec['returncode']:4d}{extra}  {status}", flush=True)
    except KeyboardInterrupt:
        print("soak: interrupted; writing what was measured", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res = summarize(runs, started, args, info)
    write_json(args.out, res)
    print(f"runs {res['runs']}, faults injected {res['faults_injected']}, survived "
          f"{res['faults_survived']}, leaks found {res['leaks_found']}, runs with problems "
          f"{res['runs_with_problems']}; graceful stops: max "
          f"{res['graceful_stop_seconds']['max']} s; written to {args.out}", flush=True)
    print(json.dumps(res["by_fault"]), flush=True)
    return 0 if not res["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
