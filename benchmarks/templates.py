"""Own features: CoNLL-2000 chunking with CRF++ / Wapiti templates, demidcd against CRF++ and
python-crfsuite on the same features, p = 2.

Configurations (``--configs``, in this order):

  plain       ``benchmarks/chunk_crfpp.template`` (plain CRF++ syntax: words, POS window, POS
              bigrams and trigrams, a bare ``B``; named acceptance in the results written
              before it was kept here)
  star        the same with every U line on POS alone also a label-bigram feature (Wapiti's
              ``*``; written for CRF++ as the U line plus a B line with the same macros, which
              are the same features)
  shipped     demidcd's shipped ``chunking`` template (Wapiti's %X, %t, %M and ``*``: CRF++
              cannot read it, so no CRF++ run)

For each: ``demidcd train --task chunking --template T`` (``--threads``, ``--time-limit
--budget``, a snapshot every ``--snapshot-every`` s) then ``demidcd evaluate`` (test chunk F1,
conlleval's rules) and ``demidcd evaluate-snapshots --template T`` (the F1 curve); ``crf_learn -p
P T train model`` then ``crf_test`` (CRF++'s defaults: L2, -c 1, -f 1); python-crfsuite L-BFGS
(c1 = c2 = 0.1, ``--crf-iterations``) on the template's U feature strings written as
feature dicts (CRFsuite has no observation-dependent transition features: B and ``*`` lines
give it their U part only). Reported: test chunk F1, training time (demidcd: solver seconds;
peers: wall seconds of the training command), demidcd's time to each peer's final F1 read off
its snapshots, peak memory (demidcd: PSS of all its processes, from its log; peers: peak RSS of
the training process tree, polled every 0.1 s) and model file size.

Results: ``benchmarks/results/NAME.json`` (machine, load from other processes, commands, curves)
and a markdown table on stdout. Timings need a quiet machine:

    python benchmarks/templates.py                      # the three configurations, 120 s each

A converged ``crf_learn`` on the plain template takes ~17 min on 2 cores: to reuse one run,
``--crfpp-from DIR`` (DIR: ``crf.model``, ``crf.log``, ``crf.time`` of ``/usr/bin/time -v
crf_learn -p 2 chunk.template train.txt crf.model``) with ``--no-crfpp`` for the others.

A smoke run (a few minutes; its timings mean nothing):

    python benchmarks/templates.py --max-sentences 300 --budget 10 --crfpp-maxiter 5 \\
        --crf-iterations 5 --name templates_smoke --out-dir /tmp
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    DATA,
    RESULTS,
    ROOT,
    LoadSampler,
    fmt_s,
    machine_info,
    machine_line,
    markdown_table,
    read_snapshot_csv,
    read_summary,
    rmtree,
    run_cli,
    say,
    time_to_metric,
    write_json,
)

sys.path.insert(0, str(ROOT))  # this tree's demidcd, also in the python-crfsuite child
CONLL2000 = DATA / "conll2000"
PLAIN_TEMPLATE = Path(__file__).resolve().parent / "chunk_crfpp.template"
CONFIGS = ("plain", "star", "shipped")


# --------------------------------------------------------------------------- templates
def star_template(text: str) -> tuple[str, str]:
    """(Wapiti form, CRF++ form) of ``text`` with every U line whose macros all read column 1
    (POS) also a label-bigram feature: ``*`` for Wapiti and demidcd; for CRF++, which has no
    ``*``, the U line plus a B line with the same macros (``U10:…`` → ``U10:…`` and
    ``B10:…``)."""
    wapiti, crfpp = [], []
    for line in text.splitlines():
        s = line.strip()
        cols = re.findall(r"%[xX]\[\s*[+-]?\d+\s*,\s*(\d+)\s*\]", s)
        if s.startswith("U") and cols and set(cols) == {"1"}:
            wapiti.append("*" + s[1:])
            crfpp += [s, "B" + s[1:]]
        else:
            wapiti.append(line)
            crfpp.append(line)
    return "\n".join(wapiti) + "\n", "\n".join(crfpp) + "\n"


def template_files(config: str, work: Path) -> tuple[str, Path | None]:
    """(demidcd's --template, CRF++'s template file or None) of a configuration."""
    if config == "plain":
        return str(PLAIN_TEMPLATE), PLAIN_TEMPLATE
    if config == "star":
        wapiti, crfpp = star_template(PLAIN_TEMPLATE.read_text())
        (work / "star.template").write_text(wapiti)
        (work / "star_crfpp.template").write_text(crfpp)
        return str(work / "star.template"), work / "star_crfpp.template"
    if config == "shipped":
        return "chunking", None
    raise ValueError(config)


# --------------------------------------------------------------------------- measuring
def run_measured(cmd: list[str], stdout=None, timeout: float = 7200) -> tuple[int, float, float]:
    """Run ``cmd``; (exit status, wall seconds, peak RSS in MiB of its process tree, polled
    every 0.1 s)."""
    import psutil

    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    peak = 0
    stop = threading.Event()

    def poll() -> None:
        nonlocal peak
        try:
            root = psutil.Process(p.pid)
        except psutil.Error:
            return
        while not stop.wait(0.1):
            try:
                procs = [root, *root.children(recursive=True)]
                peak = max(peak, sum(q.memory_info().rss for q in procs))
            except psutil.Error:
                pass

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    return rc, wall, peak / 2**20


def chunk_f1_of_columns(path: Path) -> float:
    """Chunk F1 (%, conlleval's rules) of a file whose last two columns are gold and
    predicted (crf_test's output)."""
    from demidcd.tasks.chain.chunks import chunk_scores

    gold, pred, g, p = [], [], [], []
    for line in path.read_text().splitlines():
        f = line.split()
        if not f:
            if g:
                gold.append(g)
                pred.append(p)
                g, p = [], []
            continue
        g.append(f[-2])
        p.append(f[-1])
    if g:
        gold.append(g)
        pred.append(p)
    return 100.0 * chunk_scores(gold, pred).as_dict()["f1"]


_PEAK = re.compile(r"peak memory: ([0-9.,]+) MiB")
_F1 = re.compile(r"chunk F1: ([0-9.]+)")


# --------------------------------------------------------------------------- the systems
def run_demidcd(config: str, template: str, args, work: Path) -> dict:
    d = work / f"demidcd_{config}"
    rmtree(d)
    d.mkdir(parents=True)
    data = ["--task", "chunking", "--template", template, "--format", "columns"]
    cmd = ["train", *data, "--train", args.train, "--threads", str(args.threads),
           "--time-limit", str(args.budget), "--snapshot-every", str(args.snapshot_every),
           "--snapshot-dir", str(d / "snap"), "--model", str(d / "model.npz"),
           "--summary-json", str(d / "summary.json"), "--seed", str(args.seed)]
    say(f"demidcd {config}: training {args.budget:g}s on {args.threads} processes", args.quiet)
    log, wall = run_cli(cmd, d / "train.log", timeout=args.budget * 3 + 900)
    ev, _ = run_cli(["evaluate", "--model", str(d / "model.npz"), "--data", args.test,
                     "--format", "columns"], d / "evaluate.log")
    m = _F1.search(ev)
    say(f"demidcd {config}: evaluating the snapshots", args.quiet)
    run_cli(["evaluate-snapshots", str(d / "snap"), *data, "--train", args.train,
             "--test", args.test, "--out", str(d / "snapshots.csv"), "--quiet"],
            d / "evaluate_snapshots.log")
    curve = [(r["seconds"], 100.0 * r["metric"]) for r in read_snapshot_csv(d / "snapshots.csv")]
    summary = read_summary(d / "summary.json") or {}
    peak = _PEAK.search(log)
    res = {"system": "demidcd", "config": config, "template": template,
           "command": "demidcd " + " ".join(cmd).replace(str(work), "WORK"),
           "test_f1": float(m.group(1)) if m else None, "curve": curve,
           "train_seconds": summary.get("seconds"), "wall_seconds_incl_loading": wall,
           "stop_reason": summary.get("stop_reason"), "epochs": summary.get("epochs"),
           "peak_memory_mib": float(peak.group(1).replace(",", "")) if peak else None,
           "model_bytes": os.path.getsize(d / "model.npz"),
           "features": _features_line(log)}
    say(f"demidcd {config}: F1 {res['test_f1']}, {fmt_s(res['train_seconds'])}", args.quiet)
    return res


def _features_line(log: str) -> str | None:
    m = re.search(r"^features: (.*)$", log, re.M)
    return m.group(1) if m else None


def run_crfpp(config: str, template: Path, args, work: Path) -> dict | None:
    if shutil.which("crf_learn") is None or shutil.which("crf_test") is None:
        say("CRF++ skipped: crf_learn / crf_test not on PATH", args.quiet)
        return None
    d = work / f"crfpp_{config}"
    rmtree(d)
    d.mkdir(parents=True)
    cmd = ["crf_learn", "-p", str(args.threads)] + (
        ["-m", str(args.crfpp_maxiter)] if args.crfpp_maxiter else []) + [
        str(template), args.train, str(d / "model")]
    say(f"CRF++ {config}: {' '.join(cmd[:-3])} ...", args.quiet)
    with open(d / "train.log", "w") as log:
        rc, wall, peak = run_measured(cmd, stdout=log)
    if rc != 0:
        raise RuntimeError(f"crf_learn exited {rc} (log: {d / 'train.log'})")
    with open(d / "pred.txt", "w") as out:
        subprocess.run(["crf_test", "-m", str(d / "model"), args.test], stdout=out, check=True)
    f1 = chunk_f1_of_columns(d / "pred.txt")
    text = (d / "train.log").read_text()
    n = re.search(r"Number of features:\s*(\d+)", text)
    it = re.findall(r"^iter=(\d+)", text, re.M)
    res = {"system": "CRF++", "config": config, "test_f1": f1, "train_seconds": wall,
           "command": " ".join(cmd).replace(str(work), "WORK"), "peak_memory_mib": peak,
           "model_bytes": os.path.getsize(d / "model"),
           "features": int(n.group(1)) if n else None,
           "iterations": int(it[-1]) + 1 if it else None}
    say(f"CRF++ {config}: F1 {f1:.2f} in {wall:.1f}s", args.quiet)
    return res


def reuse_crfpp(config: str, src: Path, args, work: Path) -> dict:
    """CRF++'s figures from an earlier ``/usr/bin/time -v crf_learn ...`` run on the
    ``plain`` template (a converged crf_learn takes ~17 min here: run it once): ``src``
    holds ``crf.model``, ``crf.log`` (crf_learn's output) and ``crf.time`` (time -v's report:
    wall seconds, CPU seconds, peak RSS); crf_test is run again on ``args.test``."""
    d = work / f"crfpp_{config}"
    rmtree(d)
    d.mkdir(parents=True)
    with open(d / "pred.txt", "w") as out:
        subprocess.run(["crf_test", "-m", str(src / "crf.model"), args.test], stdout=out,
                       check=True)
    f1 = chunk_f1_of_columns(d / "pred.txt")
    text, tv = (src / "crf.log").read_text(), (src / "crf.time").read_text()
    h, m, sec = (["0", "0"] + re.search(r"Elapsed \(wall clock\) time.*: ([0-9:.]+)", tv)
                 .group(1).split(":"))[-3:]
    wall = 3600 * float(h) + 60 * float(m) + float(sec)
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([0-9.]+)", tv))
    rss = float(re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv).group(1)) / 1024
    n = re.search(r"Number of features:\s*(\d+)", text)
    it = re.findall(r"^iter=(\d+)", text, re.M)
    cmd = re.search(r"Command being timed: \"(.*)\"", tv)
    res = {"system": "CRF++", "config": config, "test_f1": f1, "train_seconds": wall,
           "cpu_seconds": cpu, "reused_from": str(src),
           "command": cmd.group(1) if cmd else None, "peak_memory_mib": rss,
           "model_bytes": os.path.getsize(src / "crf.model"),
           "features": int(n.group(1)) if n else None,
           "iterations": int(it[-1]) + 1 if it else None}
    say(f"CRF++ {config} (earlier run, {src}): F1 {f1:.2f} in {wall:.1f}s", args.quiet)
    return res


def run_crfsuite(config: str, template: str, args, work: Path) -> dict | None:
    try:
        import pycrfsuite  # noqa: F401
    except ImportError:
        say("python-crfsuite skipped: not installed", args.quiet)
        return None
    d = work / f"crfsuite_{config}"
    rmtree(d)
    d.mkdir(parents=True)
    cmd = [sys.executable, __file__, "--crfsuite-child", template, args.train, args.test,
           str(d / "model"), str(args.crf_iterations)]
    say(f"python-crfsuite {config}: L-BFGS, {args.crf_iterations} iterations", args.quiet)
    with open(d / "out.json", "w") as out:
        rc, wall, peak = run_measured(cmd, stdout=out)
    if rc != 0:
        raise RuntimeError(f"the python-crfsuite run exited {rc} ({d / 'out.json'})")
    got = json.loads((d / "out.json").read_text())
    res = {"system": "python-crfsuite", "config": config, **got,
           "peak_memory_mib": peak, "wall_seconds_incl_features": wall,
           "model_bytes": os.path.getsize(d / "model")}
    say(f"python-crfsuite {config}: F1 {res['test_f1']:.2f} in {res['train_seconds']:.1f}s",
        args.quiet)
    return res


def crfsuite_child(template: str, train: str, test: str, model: str, iterations: int) -> None:
    """In its own process (for its memory): L-BFGS on the template's U strings as dicts."""
    import pycrfsuite

    from demidcd.io.tagged import read_tagged, token_columns
    from demidcd.tasks.chain.template_language import Template

    tpl = Template.from_name_or_file(template)
    tr, te = (read_tagged(p, fmt="columns") for p in (train, test))

    def items(corpus):
        for sent in tpl.expand(token_columns(corpus)):
            yield [{u: 1.0 for u in us} for us, _ in sent]

    t0 = time.perf_counter()
    trainer = pycrfsuite.Trainer(algorithm="lbfgs", verbose=False)
    for x, y in zip(items(tr), tr.tags, strict=True):
        trainer.append(x, y)
    prep = time.perf_counter() - t0
    trainer.set_params({"c1": 0.1, "c2": 0.1, "max_iterations": iterations,
                        "feature.possible_transitions": True})
    t0 = time.perf_counter()
    trainer.train(model)
    secs = time.perf_counter() - t0
    tagger = pycrfsuite.Tagger()
    tagger.open(model)
    pred = [tagger.tag(x) for x in items(te)]
    from demidcd.tasks.chain.chunks import chunk_scores

    f1 = 100.0 * chunk_scores(te.tags, pred).as_dict()["f1"]
    print(json.dumps({"test_f1": f1, "train_seconds": secs, "feature_seconds": prep,
                      "iterations": len(trainer.logparser.iterations), "c1": 0.1, "c2": 0.1,
                      "b_lines_dropped": bool(tpl.bigram_lines)}))


# --------------------------------------------------------------------------- main
def subset(path: str, n: int, out: Path) -> str:
    """The first ``n`` sentences of a columns file, written to ``out``."""
    blocks = Path(path).read_text().strip().split("\n\n")[:n]
    out.write_text("\n\n".join(blocks) + "\n")
    return str(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--crfsuite-child"]:
        crfsuite_child(*argv[1:5], int(argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default=str(CONLL2000 / "train.txt"))
    ap.add_argument("--test", default=str(CONLL2000 / "test.txt"))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--threads", type=int, default=2, help="demidcd --threads, crf_learn -p")
    ap.add_argument("--budget", type=float, default=120.0, help="demidcd --time-limit")
    ap.add_argument("--snapshot-every", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--crfpp-maxiter", type=int, default=None,
                    help="crf_learn -m (default: CRF++'s, until converged)")
    ap.add_argument("--crf-iterations", type=int, default=100,
                    help="python-crfsuite L-BFGS max_iterations")
    ap.add_argument("--no-crfpp", action="store_true")
    ap.add_argument("--crfpp-from", metavar="DIR", default=None,
                    help="plain: CRF++'s figures from an earlier /usr/bin/time -v "
                         "crf_learn run in DIR (crf.model, crf.log, crf.time; see reuse_crfpp)")
    ap.add_argument("--no-crfsuite", action="store_true")
    ap.add_argument("--max-sentences", type=int, default=None,
                    help="only the first N sentences of train and test (smoke runs)")
    ap.add_argument("--work", default="/tmp/demidcd-templates")
    ap.add_argument("--name", default="templates_conll2000")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.max_sentences:
        args.train = subset(args.train, args.max_sentences, work / "train.txt")
        args.test = subset(args.test, args.max_sentences, work / "test.txt")
    info = machine_info()
    say(machine_line(info), args.quiet)
    load = LoadSampler().start()
    results = []
    for config in args.configs.split(","):
        template, crfpp_template = template_files(config, work)
        with load.span(config):
            dd = run_demidcd(config, template, args, work)
            peers = []
            if args.crfpp_from and config == "plain":
                peers.append(reuse_crfpp(config, Path(args.crfpp_from), args, work))
            elif crfpp_template is not None and not args.no_crfpp:
                peers.append(run_crfpp(config, crfpp_template, args, work))
            if not args.no_crfsuite:
                peers.append(run_crfsuite(config, template, args, work))
        peers = [p for p in peers if p is not None]
        for p in peers:
            p["demidcd_time_to_f1"] = time_to_metric(dd["curve"], p["test_f1"] - 1e-9)
            p["demidcd_time_ratio"] = (p["demidcd_time_to_f1"] / p["train_seconds"]
                                       if math.isfinite(p["demidcd_time_to_f1"]) else math.inf)
        results.append({"config": config, "demidcd": dd, "peers": peers})
    load.stop()
    head = ["template", "system", "test chunk F1", "training time", "demidcd to this F1",
            "peak memory", "model size"]
    rows = []
    for r in results:
        dd = r["demidcd"]
        rows.append((r["config"], f"demidcd p={args.threads}", _f(dd["test_f1"]),
                     fmt_s(dd["train_seconds"]), "", _mib(dd["peak_memory_mib"]),
                     _mib(dd["model_bytes"] / 2**20)))
        for p in r["peers"]:
            t = p["demidcd_time_to_f1"]
            rows.append((r["config"], p["system"], _f(p["test_f1"]), fmt_s(p["train_seconds"]),
                         fmt_s(t) + (f" ({p['demidcd_time_ratio']:.3f}x)"
                                     if math.isfinite(t) else ""),
                         _mib(p["peak_memory_mib"]), _mib(p["model_bytes"] / 2**20)))
    table = markdown_table(head, rows)
    out = {"machine": info, "load": load.summary(), "args": vars(args), "results": results,
           "table_markdown": table}
    path = write_json(Path(args.out_dir) / f"{args.name}.json", out)
    print(table)
    say(f"other processes' load: {load.summary_line()}", args.quiet)
    say(f"wrote {path}", args.quiet)
    return 0


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _mib(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f} MiB"


if __name__ == "__main__":
    sys.exit(main())
