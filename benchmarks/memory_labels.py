"""Peak memory at p = 2 against python-crfsuite's L-BFGS as the label count grows (issue 56,
defect 9).

    python benchmarks/memory_labels.py [--labels 12,45,83,200,453] [--weights auto[,all,seen]]
        [--sentences 55000] [--test-sentences 5000] [--threads 2] [--time-limit 60]
        [--peer lbfgs|none] [--peer-cap SECONDS] [--peer-from JSON[,JSON]] [--quick]
        [--name NAME] [--work DIR]

For each label count K: the synthetic corpus of the acceptance check (newcomer-3, part 7),
``generator_model(n_tags=K, vocab_size=200_000, mean_length=18, max_length=80, seed=K)`` and
``sample(model, N, seed=N)`` (N = 55,000 sentences: about a million tokens), written as columns
to a work folder, with a held-out ``sample(model, T, seed=N + 1)`` for test accuracy. Then, one
job at a time:

* ``demidcd train --train F --format columns --threads P --time-limit S --weights W --model M``
  for each W of ``--weights``: the log's ``peak memory: N MiB`` (what the acceptance check
  reads: the whole run's peak, the set-up child's included, since ``RunPeak``; before it, the
  training processes' alone), the whole command's peak PSS seen from outside (the sum of
  ``/proc/PID/smaps_rollup`` Pss over its process tree polled every 0.2 s, which may miss a
  short peak), which layout ``auto`` chose and why (the log's ``features:`` and ``weights:``
  lines), then ``demidcd evaluate`` of the model on the held-out sample (test accuracy);
* python-crfsuite ``lbfgs`` (c1 = c2 = 0.1, 2 iterations, ``feature.possible_transitions``) on
  the peers' observation features (``predict_speed.sent_features``, the peer code's own copy),
  its peak RSS (``VmHWM``: what the acceptance's ``ru_maxrss`` reads for a peer started from a
  shell; its own ``ru_maxrss`` here would also count this process's pages, as Linux keeps the
  forked child's pre-exec high-water mark). ``--peer-cap S`` stops the peer after S
  seconds once its first iteration finished (the features, the model and L-BFGS's vectors are
  all allocated by then; its later iterations allocate nothing more): the result then says
  ``capped``. With hundreds of labels two iterations take hours on 2 cores. The peer's
  memory does not depend on demidcd or on the machine's load: ``--peer none --peer-from
  results/A.json,results/B.json`` takes each label count's peer figure from the first earlier
  result that has it (the table says which file).

Results: ``benchmarks/results/memory_labels_NAME.json`` and a markdown table on stdout. Peak
memory does not depend on timing much, but the machine's load is recorded with each run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    ROOT,
    LoadSampler,
    demidcd_cmd,
    machine_info,
    machine_line,
    markdown_table,
    parse_metrics,
    write_json,
)

PEERLIB = Path(__file__).resolve().parent  # predict_speed.py: the peers' sent_features
MODEL = {"vocab_size": 200_000, "mean_length": 18, "max_length": 80}
_PEAK = re.compile(r"peak memory: ([\d,]+) MiB")
_WEIGHTS = re.compile(r"^(features: .*|weights: .*)$", re.M)

PEER = r'''
import os, resource, sys, tempfile
sys.path.insert(0, sys.argv[2])
import pycrfsuite
from predict_speed import sent_features

class T(pycrfsuite.Trainer):
    def message(self, s):
        if "Iteration #" in s:
            print("ITERATION", s.strip().split("#")[-1].split()[0], flush=True)

tr = T(algorithm="lbfgs", verbose=True)
tr.set_params({"c1": 0.1, "c2": 0.1, "max_iterations": 2, "feature.possible_transitions": True})
cur = []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.rstrip("\n")
    if not line:
        if cur: tr.append(sent_features([w for w, _ in cur]), [t for _, t in cur]); cur = []
        continue
    cur.append(line.split("\t"))
print("APPENDED", round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), flush=True)
m = tempfile.mktemp(); tr.train(m); os.unlink(m)
print("MAXRSS", round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), flush=True)
'''


# --------------------------------------------------------------------------- measuring
def _rollup(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                p = line.split()
                if len(p) >= 3 and p[0].endswith(":") and p[-1] == "kB":
                    out[p[0][:-1]] = int(p[1]) * 1024
    except OSError:
        pass
    return out


def _hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_sampled(cmd: list[str], log: Path, timeout: float, stop_when=None, cap: float = 0.0
                ) -> dict[str, Any]:
    """Run ``cmd`` (stdout and stderr to ``log``), polling every 0.2 s the summed PSS of its
    process tree and the root's VmHWM. ``stop_when(text)``: once true and ``cap`` seconds
    have passed, the command is stopped (``capped``: "capped"); after ``timeout`` seconds
    it is stopped whatever it printed ("timeout")."""
    import psutil

    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=str(ROOT))
    peak, hwm, capped = 0, 0, ""
    root = psutil.Process(p.pid)
    done = threading.Event()

    def poll() -> None:
        nonlocal peak, hwm
        while not done.wait(0.2):
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            peak = max(peak, sum(_rollup(q.pid).get("Pss", 0) for q in procs))
            hwm = max(hwm, _hwm(p.pid))

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    while p.poll() is None:
        time.sleep(0.5)
        el = time.perf_counter() - t0
        if el > timeout or (cap > 0 and el > cap and stop_when is not None
                            and stop_when(log.read_text())):
            capped = "capped" if el <= timeout else "timeout"
            hwm = max(hwm, _hwm(p.pid))
            p.kill()
            break
    rc = p.wait()
    done.set()
    th.join()
    return {"rc": rc, "wall_seconds": round(time.perf_counter() - t0, 1),
            "peak_pss_mib": round(peak / 2**20), "vmhwm_mib": round(hwm / 2**20),
            "capped": capped, "log": log.read_text()}


# --------------------------------------------------------------------------- corpora
def write_corpus(k: int, n: int, seed: int, path: Path, n_train: int) -> int:
    """The columns file of ``sample(generator_model(n_tags=k, ..., seed=k), n, seed)``;
    returns its tokens."""
    from demidcd.synthetic import generator_model, sample

    m = generator_model(n_tags=k, seed=k, **MODEL)
    c = sample(m, n, seed=seed)
    tokens = 0
    with open(path, "w") as f:
        for toks, tags in zip(c.tokens, c.tags, strict=True):
            f.write("".join(f"{w}\t{t}\n" for w, t in zip(toks, tags, strict=True)) + "\n")
            tokens += len(toks)
    return tokens


def demidcd_run(train: Path, test: Path, weights: str, args, d: Path) -> dict[str, Any]:
    model = d / f"model-{weights}.npz"
    cmd = ["train", "--train", str(train), "--format", "columns", "--threads", str(args.threads),
           "--time-limit", str(args.time_limit), "--weights", weights, "--model", str(model)]
    r = run_sampled([*demidcd_cmd(), *cmd], d / f"train-{weights}.log",
                    timeout=args.time_limit * 4 + 1800)
    text = r.pop("log")
    peaks = _PEAK.findall(text)
    out = {"command": "demidcd " + " ".join(cmd).replace(str(d), "WORK"), **r,
           "log_peak_mib": float(peaks[-1].replace(",", "")) if peaks else None,
           "weights_lines": _WEIGHTS.findall(text),
           "stopped": next((ln for ln in text.splitlines() if ln.startswith("stopped:")), None)}
    if r["rc"] == 0:
        ev = subprocess.run([*demidcd_cmd(), "evaluate", "--model", str(model), "--data",
                             str(test), "--format", "columns"], capture_output=True, text=True,
                            cwd=str(ROOT), timeout=1800)
        out["test_accuracy"] = parse_metrics(ev.stdout + ev.stderr).get("accuracy")
        model.unlink(missing_ok=True)
    return out


def peer_run(train: Path, args, d: Path) -> dict[str, Any]:
    script = d / "peer.py"
    script.write_text(PEER)
    r = run_sampled([sys.executable, str(script), str(train), str(PEERLIB)], d / "peer.log",
                    timeout=args.peer_timeout, cap=args.peer_cap,
                    stop_when=lambda t: "ITERATION" in t)
    text = r.pop("log")
    m = re.search(r"MAXRSS (\d+)", text)
    a = re.search(r"APPENDED (\d+)", text)
    it = re.findall(r"ITERATION (\d+)", text)
    return {**r, "maxrss_mib": int(m.group(1)) if m else None,
            "after_append_mib": int(a.group(1)) if a else None,
            "iterations_done": int(it[-1]) if it else 0,
            # VmHWM: what the acceptance's ru_maxrss reads for a peer started from a shell. Not
            # its own ru_maxrss here: Linux keeps the pre-exec high-water mark of the forked
            # child, which counts this (large) process's pages (APPENDED / MAXRSS overstate)
            "peak_mib": r["vmhwm_mib"]}


def earlier_peer(k: int, sentences: int, files: list[str]) -> dict[str, Any] | None:
    """The peer's result for ``k`` labels on the same corpus (``sentences``) from the first
    of the earlier result ``files`` that has one, with ``from``: its file name."""
    import json

    for f in files:
        path = Path(f) if Path(f).is_absolute() else ROOT / "benchmarks" / f
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for r in data.get("rows", []):
            if r.get("labels") == k and r.get("sentences", sentences) == sentences \
                    and r.get("peer"):
                return {**r["peer"], "from": path.name}
    return None


# --------------------------------------------------------------------------- main
def table(rows: list[dict[str, Any]], weights: list[str]) -> str:
    head = ["labels", "tokens"]
    for w in weights:
        head += [f"{w}: layout", f"{w}: log peak", f"{w}: whole run", f"{w}: test acc."]
    head += ["python-crfsuite lbfgs (2 it.)"]
    body = []
    for r in rows:
        line = [r["labels"], f"{r['tokens']:,}"]
        for w in weights:
            x = r["demidcd"].get(w) or {}
            lay = "; ".join(x.get("weights_lines", []))
            lay = "seen" if "seen in training" in lay else "all" if "observation features" in lay \
                else "?"
            acc = x.get("test_accuracy")
            line += [lay, f"{x.get('log_peak_mib') or 0:,.0f} MiB",
                     f"{x.get('peak_pss_mib') or 0:,} MiB",
                     f"{100 * acc:.2f}%" if acc is not None else "-"]
        p = r.get("peer")
        line.append("-" if not p else f"{p['peak_mib']:,} MiB"
                    + ({"capped": f" (stopped after iteration {p.get('iterations_done')})",
                        "timeout": f" (stopped at {p.get('wall_seconds', 0):.0f} s, iteration "
                                   f"{p.get('iterations_done')})"}.get(p.get("capped"), ""))
                    + (f" [{p['from']}]" if p.get("from") else ""))
        body.append(line)
    return markdown_table(head, body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--labels", default="12,45,83,200,453")
    ap.add_argument("--weights", default="auto", help="comma list of auto, all, seen")
    ap.add_argument("--sentences", type=int, default=55_000)
    ap.add_argument("--test-sentences", type=int, default=5_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=60)
    ap.add_argument("--peer", default="lbfgs", choices=["lbfgs", "none"])
    ap.add_argument("--peer-cap", type=float, default=0.0,
                    help="stop the peer after this many seconds once iteration 1 finished")
    ap.add_argument("--peer-timeout", type=float, default=7200)
    ap.add_argument("--peer-from", default="",
                    help="with --peer none: earlier results (comma list) to take the peer from")
    ap.add_argument("--quick", action="store_true", help="2,000 sentences, 5 s: checks the script")
    ap.add_argument("--work", default="/tmp/memory_labels")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name", default="run")
    args = ap.parse_args(argv)
    if args.quick:
        args.sentences, args.test_sentences, args.time_limit = 2000, 200, 5
    weights = args.weights.split(",")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    load = LoadSampler().start()
    rows: list[dict[str, Any]] = []
    out_path = Path(args.out_dir) / f"memory_labels_{args.name}.json"
    for k in map(int, args.labels.split(",")):
        d = work / f"k{k}"
        d.mkdir(exist_ok=True)
        train, test = d / "train.txt", d / "test.txt"
        tokens = write_corpus(k, args.sentences, args.sentences, train, args.sentences)
        write_corpus(k, args.test_sentences, args.sentences + 1, test, args.sentences)
        row: dict[str, Any] = {"labels": k, "sentences": args.sentences, "tokens": tokens,
                               "demidcd": {}}
        for w in weights:
            with load.span(f"k{k} demidcd {w}"):
                row["demidcd"][w] = demidcd_run(train, test, w, args, d)
            x = row["demidcd"][w]
            print(f"K={k} {w}: log {x['log_peak_mib']} MiB, whole {x['peak_pss_mib']} MiB, "
                  f"acc {x.get('test_accuracy')}, {x['weights_lines']}", flush=True)
        if args.peer == "none" and args.peer_from:
            row["peer"] = earlier_peer(k, args.sentences, args.peer_from.split(","))
        if args.peer != "none":
            with load.span(f"k{k} peer"):
                row["peer"] = peer_run(train, args, d)
            print(f"K={k} python-crfsuite: {row['peer']['peak_mib']} MiB "
                  f"(capped {row['peer']['capped']})", flush=True)
        rows.append(row)
        for f in (train, test):
            f.unlink(missing_ok=True)
        md = table(rows, weights)
        write_json(out_path, {"machine": info, "args": vars(args), "rows": rows,
                              "load": load.summary(), "table_markdown": md})
    load.stop()
    md = table(rows, weights)
    write_json(out_path, {"machine": info, "args": vars(args), "rows": rows,
                          "load": load.summary(), "table_markdown": md})
    print(machine_line(info))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
