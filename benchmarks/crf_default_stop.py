"""The L-BFGS CRF's default stop against Wapiti's, and its stop latency at many labels (issue 56,
defects 2 and 12): the timed goals the tests only check by accounting.

    python benchmarks/crf_default_stop.py [--patterns ch np] [--runs 1] [--labels 1500 5000]
        [--wapiti PATH] [--out-dir benchmarks/results]

* Default stop: on Wapiti's own examples (``dat/{ch,np}{pattern,train,test}.txt`` of
  ../shared/peers/wapiti-src.tar.gz, built into a temporary directory unless ``--wapiti`` or
  PATH has one), ``wapiti train --nthread 2 -p P`` and then ``demidcd train --algorithm crf
  --threads 2`` at its defaults, back to back: wall seconds of each, test chunk F1 (conlleval
  rules), the ratio of the walls (goal: F1 >= Wapiti's in <= 1.0x its wall) and how each stopped.
* Stop latency: 3,000 three-token sentences with ``--labels`` random labels, ``--algorithm crf
  --threads 2 --time-limit 10``: seconds of training past the limit (goal: a second or two at
  any label count).

Writes ``crf_default_stop.json`` to ``--out-dir`` and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    RESULTS,
    demidcd_cmd,
    machine_info,
    machine_line,
    markdown_table,
    run_cli,
    say,
    write_json,
)

from demidcd.metrics import chunk_f1_score  # noqa: E402

PEERS = HERE.parent.parent / "shared" / "peers" / "wapiti-src.tar.gz"


def build_wapiti(work: Path) -> Path | None:
    """The Wapiti binary and its source tree (for dat/): built from the peers' tarball."""
    if not PEERS.exists() or shutil.which("make") is None:
        return None
    with tarfile.open(PEERS) as tar:
        tar.extractall(work)  # noqa: S202 - the project's own peer tarball
    src = work / "wapiti"
    subprocess.run(["make", "-C", str(src)], check=True, capture_output=True)
    return src / "wapiti"


def columns_f1(path: Path) -> float:
    """Chunk F1 (%) of a file whose last two columns are gold and predicted tags."""
    gold, pred, g, p = [], [], [], []
    for line in path.read_text().splitlines() + [""]:
        parts = line.split()
        if not parts:
            if g:
                gold.append(g)
                pred.append(p)
                g, p = [], []
            continue
        g.append(parts[-2])
        p.append(parts[-1])
    f1 = chunk_f1_score(gold, pred)
    return 100.0 * f1 if f1 <= 1.0 else f1


def timed(cmd: list[str], log: Path) -> float:
    """Wall seconds of the peer's ``cmd`` (its output to ``log``; demidcd runs by run_cli)."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
    return time.perf_counter() - t0


def race(wapiti: Path, dat: Path, pattern: str, work: Path) -> dict:
    p, tr, te = (dat / f"{pattern}{x}.txt" for x in ("pattern", "train", "test"))
    tw = timed([str(wapiti), "train", "--nthread", "2", "-p", str(p), str(tr),
                str(work / "w.mod")], work / "w.log")
    out = work / "w.out"
    with open(out, "w") as f:
        subprocess.run([str(wapiti), "label", "-m", str(work / "w.mod"), str(te)], stdout=f,
                       stderr=subprocess.DEVNULL, check=True)
    w_iters = len(re.findall(r"^\s+\[\s*\d+\]", (work / "w.log").read_text(), re.M))
    log, td = run_cli(["train", "--algorithm", "crf", "--task", "chunking", "--template", p,
                       "--train", tr, "--format", "columns", "--threads", "2", "--model",
                       work / "c.npz"], work / "c.log")
    ev = subprocess.run([*demidcd_cmd(), "evaluate", "--model", str(work / "c.npz"), "--data",
                         str(te), "--format", "columns"], capture_output=True, text=True)
    fd = re.search(r"chunk F1: ([0-9.]+)", ev.stdout)
    stop = re.search(r"stopped: (\S+) after (\d+) iterations", log)
    return {"pattern": pattern, "wapiti_s": tw, "wapiti_f1": columns_f1(out),
            "wapiti_iterations": w_iters, "demidcd_s": td,
            "demidcd_f1": float(fd.group(1)) if fd else None,
            "demidcd_stop": stop.group(1) if stop else None,
            "demidcd_iterations": int(stop.group(2)) if stop else None, "ratio": td / tw}


def latency(labels: int, work: Path) -> dict:
    r = random.Random(labels)
    data = work / f"k{labels}.txt"
    data.write_text("".join("".join(f"w{r.randrange(20000)} L{r.randrange(labels)}\n"
                                    for _ in range(3)) + "\n" for _ in range(3000)))
    log, _ = run_cli(["train", "--train", data, "--format", "columns", "--algorithm", "crf",
                      "--threads", "2", "--time-limit", "10", "--model", work / "k.npz"],
                     work / "k.log")
    m = re.search(r"stopped: (\S+) after \d+ iterations, ([0-9.]+)s", log)
    return {"labels": labels, "stop": m.group(1) if m else None,
            "seconds": float(m.group(2)) if m else None,
            "past_limit_s": float(m.group(2)) - 10.0 if m else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--patterns", nargs="*", default=["ch", "np"])
    ap.add_argument("--labels", nargs="*", type=int, default=[1500, 5000])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--wapiti", default=None)
    ap.add_argument("--out-dir", default=str(RESULTS))
    a = ap.parse_args()
    info = machine_info()
    say(machine_line(info))
    out: dict = {"machine": info, "races": [], "latency": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        wapiti = Path(a.wapiti) if a.wapiti else build_wapiti(work)
        if wapiti is None or not wapiti.exists():
            say("Wapiti: not installed (and ../shared/peers has no source to build)")
        else:
            dat = wapiti.parent / "dat"
            for pattern in a.patterns:
                for _ in range(a.runs):
                    out["races"].append(race(wapiti, dat, pattern, work))
        for k in a.labels:
            out["latency"].append(latency(k, work))
    write_json(Path(a.out_dir) / "crf_default_stop.json", out)
    print(markdown_table(["pattern", "Wapiti F1", "Wapiti s (iter)", "demidcd F1",
                          "demidcd s (iter, stop)", "ratio"],
                         [(r["pattern"], f"{r['wapiti_f1']:.2f}",
                           f"{r['wapiti_s']:.1f} ({r['wapiti_iterations']})",
                           r["demidcd_f1"], f"{r['demidcd_s']:.1f} ({r['demidcd_iterations']}, "
                           f"{r['demidcd_stop']})", f"{r['ratio']:.2f}") for r in out["races"]]))
    print(markdown_table(["labels", "stop", "training s", "past the 10 s limit"],
                         [(r["labels"], r["stop"], r["seconds"], r["past_limit_s"])
                          for r in out["latency"]]))


if __name__ == "__main__":
    main()
