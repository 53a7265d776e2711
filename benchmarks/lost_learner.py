"""A learner frozen at the stop (issue 56, defect 10): what the model written is worth.

    python benchmarks/lost_learner.py [--sentences 300] [--limit 15] [--runs 1]
                                      [--out-dir benchmarks/results]

Trains ``--learners 2 --threads 2`` on the first ``--sentences`` CoNLL-2000 training sentences
(``--task chunking --feature-columns 2``) under ``--limit`` seconds, twice per run: once as is,
once with SIGSTOP to learner process 2 0.3 s before the limit (on the coordinator's clock,
started when it logs its pid) and SIGCONT 4 s later, and scores each model on the CoNLL-2000
test set (chunk F1). Before the fix the frozen learner was killed and w rebuilt without its
part's α: F1 12-20 against 89; now the model keeps the w with every learner's updates. Needs
../shared/data/conll2000. Writes ``lost_learner.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    DATA,
    RESULTS,
    demidcd_cmd,
    machine_info,
    machine_line,
    markdown_table,
    say,
    write_json,
)


def first_sentences(src: Path, n: int, out: Path) -> None:
    kept, count = [], 0
    for line in src.read_text(encoding="utf-8").splitlines():
        kept.append(line)
        if not line.strip():
            count += 1
            if count == n:
                break
    out.write_text("\n".join(kept) + "\n", encoding="utf-8")


def one_run(train: Path, test: Path, work: Path, limit: float, freeze: bool, tag: str) -> dict:
    model, log = work / f"{tag}.npz", work / f"{tag}.log"
    with open(log, "w") as f:
        p = subprocess.Popen([*demidcd_cmd(), "train", "--train", str(train), "--task",
                              "chunking", "--feature-columns", "2", "--threads", "2",
                              "--learners", "2", "--time-limit", str(limit), "--model",
                              str(model)], stdout=f, stderr=subprocess.STDOUT)
    while p.poll() is None and "coordinator pid" not in log.read_text():
        time.sleep(0.01)
    t0 = time.time()
    m = None
    while p.poll() is None and not (m := re.search(r"worker 2 pid (\d+)", log.read_text())):
        time.sleep(0.01)
    if freeze and m:
        time.sleep(max(0.0, t0 + limit - 0.3 - time.time()))
        os.kill(int(m[1]), signal.SIGSTOP)
        time.sleep(4.0)
        try:
            os.kill(int(m[1]), signal.SIGCONT)
        except ProcessLookupError:
            pass
    p.wait()
    ev = subprocess.run([*demidcd_cmd(), "evaluate", "--model", str(model), "--data",
                         str(test)], capture_output=True, text=True)
    text = log.read_text()
    f1 = re.search(r"chunk F1: ([\d.]+)", ev.stdout)
    return {"frozen": freeze, "exit": p.returncode, "f1": float(f1[1]) if f1 else None,
            "lost_at_stop": "a learner was lost at the stop" in text,
            "killed": "learner process 2" in text and "killed" in text}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--limit", type=float, default=15.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args()
    src, test = DATA / "conll2000" / "train.txt", DATA / "conll2000" / "test.txt"
    if not src.is_file():
        sys.exit(f"{src} not found")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        train = work / "train.txt"
        first_sentences(src, args.sentences, train)
        for r in range(args.runs):
            for freeze in (False, True):
                res = one_run(train, test, work, args.limit, freeze, f"r{r}-{int(freeze)}")
                say(f"run {r + 1}: {'frozen' if freeze else 'as is'}: {res}")
                rows.append(res)
    info = machine_info()
    write_json(Path(args.out_dir) / "lost_learner.json", {"machine": info, "runs": rows,
                                                          "args": vars(args)})
    print(machine_line(info))
    print(markdown_table(["learner 2", "exit", "chunk F1", "lost at the stop"],
                         [["SIGSTOP at limit - 0.3 s" if x["frozen"] else "running", x["exit"],
                           x["f1"], x["lost_at_stop"]] for x in rows]))


if __name__ == "__main__":
    main()
