"""Convergence benchmark (issues 4, 5, 6, 7; the DEMI-DCD paper's Figures 1–3).

    python benchmarks/convergence.py --task sequence          # EWT XPOS (+ CRFsuite peer)
    python benchmarks/convergence.py --task entity-relation   # CoNLL04, seeded split, seed 0
        [--threads 2] [--budget 100] [--snapshot-every 1] [--methods dcd,demi-dcd,ms-dcd,sp-ipm]
        [--train F --test F --format conllu|columns --column xpos] [--no-crfsuite]
        [--out-dir benchmarks/results] [--name NAME] [--quiet]

Runs 1-DCD (one process), DEMI-DCD, MS-DCD and SP-IPM (``--threads`` processes) one after the
other, each with the same time budget, through the CLI (``demidcd train --snapshot-every S
--snapshot-dir D --cpu-log F --log-json F``), then ``demidcd evaluate-snapshots`` on log-spaced
snapshots (so that evaluation never steals CPU from a run), and produces:

* relative primal difference (f − f*)/f* against wall-clock time, log–log, f* the lowest primal
  reached by any DCD method (SP-IPM solves another problem and is excluded) — Figure 1;
* test metric against time, log x — Figure 2 (entity-relation: entity and relation F1);
* CPU use over time, 2-second moving averages, each method's average in the legend — Figure 3;
* time to 1% for each method and the ratios DEMI-DCD vs MS-DCD and vs 1-DCD, MS-DCD's split of
  time between inference and master updates, the learners' updates/s, structures/s through the
  rings, publish overhead, average CPU of each;
* (sequence task, python-crfsuite installed) CRFsuite on the same split with the same
  observation features (``SequenceFeaturizer`` strings; lbfgs, c1 = c2 = 0.1, 100 iterations):
  its training time and test accuracy next to the time DEMI-DCD needs to reach that accuracy.

Times are seconds since the solver started (after data loading), the same clock for every
method. Other processes may share the machine: the load each run saw is recorded, and methods
are compared as ratios within one run.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    CONLL04,
    EWT,
    METHOD_STYLE,
    RESULTS,
    LoadSampler,
    Progress,
    add_data_arguments,
    annotate_relative,
    crfsuite_peer,
    fmt_s,
    fmt_x,
    fstar_of,
    machine_caption,
    machine_info,
    machine_line,
    markdown_table,
    moving_average,
    parse_metrics,
    pyplot,
    read_cpu_csv,
    read_jsonl,
    read_snapshot_csv,
    read_summary,
    rmtree,
    run_cli,
    save_figure,
    say,
    summary_views,
    thin_snapshots,
    time_to_gap,
    time_to_metric,
    write_csv,
    write_json,
)

NAMES = {"dcd": "1-DCD", "demi-dcd": "DEMI-DCD", "ms-dcd": "MS-DCD", "sp-ipm": "SP-IPM"}
DCD_FAMILY = ("dcd", "demi-dcd", "ms-dcd")
GAPS = (1.0, 0.5, 0.2, 0.1, 0.05, 0.01, 0.001)  # the looser ones for CBC runs


# --------------------------------------------------------------------------- data
def data_setup(args, work: Path, prog: Progress) -> dict:
    """Train/test files and the data options of the CLI for the chosen task."""
    for k in ("train", "test"):  # the CLI runs with the repository as working directory
        if getattr(args, k):
            setattr(args, k, str(Path(getattr(args, k)).resolve()))
    if args.task == "entity-relation":
        if args.train:
            train, test = args.train, args.test
            split = None
        else:
            prog.note(f"demidcd split {CONLL04} --seed {args.split_seed}")
            run_cli(["split", str(CONLL04), "--out-dir", str(work / "split"), "--seed",
                     str(args.split_seed)], work / "split.log")
            train, test = str(work / "split" / "train.corp"), str(work / "split" / "test.corp")
            split = (f"demidcd split {CONLL04} --out-dir DIR --seed {args.split_seed} "
                     "(80/20 of sentences; 4,412 train / 1,104 test)")
        return {"train": train, "test": test, "opts": ["--task", "entity-relation"],
                "split": split}
    train = args.train or str(EWT / "en_ewt-ud-train.conllu")
    test = args.test or str(EWT / "en_ewt-ud-test.conllu")
    fmt = args.format or ("conllu" if train.endswith(".conllu") else "columns")
    col = args.column if args.column is not None else ("xpos" if fmt == "conllu" else None)
    opts = ["--format", fmt] + (["--column", col] if col else [])
    return {"train": train, "test": test, "opts": opts, "format": fmt, "column": col,
            "split": None}


# --------------------------------------------------------------------------- one method
def run_method(alg: str, args, data: dict, work: Path, load: LoadSampler, prog: Progress,
               label: str | None = None) -> dict:
    """Train ``alg`` through the CLI, evaluate its snapshots; the load span is ``label``."""
    threads = 1 if alg in ("dcd", "dcd-light") else args.threads
    d = work / alg
    rmtree(d)
    d.mkdir(parents=True)
    snap = d / "snapshots"
    cmd = ["train", "--algorithm", alg, "--threads", str(threads), "--train", data["train"],
           *data["opts"], "--time-limit", str(args.budget), "--snapshot-every",
           str(args.snapshot_every), "--snapshot-dir", str(snap), "--cpu-log", str(d / "cpu.csv"),
           "--log-json", str(d / "log.jsonl"), "--model", str(d / "model.npz"),
           "--summary-json", str(d / "summary.json"), "--seed", str(args.seed)]
    if alg == "demi-dcd":
        # DEMI-DCD as published is one learner (see multi_learner.py); scaling.py also runs auto
        cmd += ["--learners", str(getattr(args, "learners", "1"))]
    if args.task == "entity-relation" and getattr(args, "ilp_solver", None):
        cmd += ["--ilp-solver", args.ilp_solver]  # training only: evaluation solves exactly
    if alg != "dcd":
        cmd += ["--max-epochs", str(10**9)]  # the budget, not an epoch count, stops every run
    else:
        cmd += ["--max-epochs", str(10**6)]
    prog.note(f"{NAMES[alg]}: training {args.budget:g}s on {threads} process(es)")
    with load.span(label or alg):
        text, wall = run_cli(cmd, d / "train.log", timeout=args.budget * 3 + 600)
    kept, total = thin_snapshots(snap, args.min_step, args.rel_step)
    prog.note(f"{NAMES[alg]}: evaluating {kept} of {total} snapshots")
    ev = ["evaluate-snapshots", str(snap), "--train", data["train"], "--test", data["test"],
          *data["opts"], "--out", str(d / "snapshots.csv"), "--quiet"]
    if args.task == "entity-relation":
        ev += ["--ilp-solver", "exact"]
    _, ev_wall = run_cli(ev, d / "evaluate.log", timeout=3600)
    rows = read_snapshot_csv(d / "snapshots.csv")
    if args.task == "entity-relation":
        er_f1_per_snapshot(snap, data["test"], rows)
    metrics_text, _ = run_cli(["evaluate", "--model", str(d / "model.npz"), "--data",
                               data["test"], *data["opts"], *(["--ilp-solver", "exact"]
                               if args.task == "entity-relation" else [])], d / "final.log")
    cpu_t, cpu_v = read_cpu_csv(d / "cpu.csv")
    recs = read_jsonl(d / "log.jsonl")
    views = summary_views(read_summary(d / "summary.json"))
    stopped = views["stopped"]
    out = {
        "algorithm": alg, "name": NAMES[alg], "threads": threads, "command": "demidcd " +
        " ".join(cmd).replace(str(work), "WORK"), "wall_seconds_incl_loading": wall,
        "stopped": stopped, "cpu": views["cpu"], "learner": views["learner"],
        "ms_split": views["ms_split"], "final": parse_metrics(metrics_text),
        "last_record": recs[-1] if recs else None, "iterations": len(recs),
        "snapshots": {"taken": total, "evaluated": kept, "evaluate_wall_seconds": ev_wall},
        "curve": rows, "cpu_timeline": {"seconds": cpu_t, "total": cpu_v},
        "log_summary": [ln for ln in text.splitlines() if not ln.startswith("iter ")],
    }
    secs = stopped.get("seconds")
    if out["learner"] and secs:
        lr = out["learner"]
        lr["structures_pushed_per_s"] = lr["pushed"] / secs
        lr["inferences_per_s"] = lr["inferences"] / secs
    if not args.keep_snapshots:
        rmtree(snap)
    prog.step(f"{NAMES[alg]}: {stopped.get('reason')} at {secs}s, avg CPU "
              f"{(out['cpu'] or {}).get('average')}%")
    return out


def er_f1_per_snapshot(snap: Path, test_path: str, rows: list[dict]) -> None:
    """Entity and relation F1 of every evaluated snapshot (evaluate-snapshots gives their
    mean as ``metric``); computed here, after the run."""
    import numpy as np

    from demidcd.api import load_estimator
    from demidcd.io.conll04 import read_conll04
    from demidcd.io.snapshots import list_snapshots

    est = load_estimator(snap / "base.npz")
    est.solver = "exact"  # the same optima as CBC/HiGHS, in milliseconds
    test = read_conll04(test_path)
    by_t = {round(s, 3): p for s, p in list_snapshots(snap)}
    for r in rows:
        p = by_t.get(round(r["seconds"], 3))
        if p is None:
            continue
        est.coef_ = np.load(p, allow_pickle=False)
        m = est.metrics(test)
        r["entity_f1"], r["relation_f1"] = m["entity_f1"], m["relation_f1"]


# --------------------------------------------------------------------------- CRFsuite
def run_crfsuite(data: dict, iterations: int, prog: Progress, work: Path) -> dict | None:
    """CRFsuite (lbfgs, c1 = c2 = 0.1) on the same observation features as demidcd
    (``common.crfsuite_peer``)."""
    col = data["column"]
    col = col if col in (None, "upos", "xpos") else int(col)
    return crfsuite_peer(data["train"], data["test"], fmt=data["format"], column=col,
                         algorithm="lbfgs", iterations=iterations, work=work, note=prog.note,
                         done=prog.step)


# --------------------------------------------------------------------------- analysis
def cpu_normalised(timeline: dict, t: float, p: int) -> float:
    """∫_0^t (CPU the run received / p cores) dt from its CPU log: the time the run would
    have needed with p idle cores *if* its progress scaled with the CPU it got. An estimate
    for shared machines (other people's processes take cores away from a run); each sample
    covers the interval since the previous one; inf when t is."""
    if not math.isfinite(t):
        return math.inf
    secs, vals = timeline["seconds"], timeline["total"]
    if not secs:
        return math.nan
    cap, acc, prev = 100.0 * p, 0.0, 0.0
    for s, v in zip(secs, vals, strict=True):
        if prev >= t:
            break
        acc += (min(s, t) - prev) * min(v, cap) / cap
        prev = s
    if prev < t:  # after the last sample: its value
        acc += (t - prev) * min(vals[-1], cap) / cap
    return acc


def load_adjusted(t: float, p: int, cores: int, foreign: float | None) -> float:
    """t × (cores the run could have had) / p, the cores being min(p, cores − foreign load):
    an estimate of the time on an idle machine that, unlike :func:`cpu_normalised`, does not
    credit a method for its own idle time (MS-DCD's and SP-IPM's barriers)."""
    if not math.isfinite(t) or foreign is None:
        return t if foreign is None else math.inf
    return t * min(p, max(cores - foreign, 0.1)) / p


def analyse(runs: dict[str, dict], crf: dict | None, args, spans: dict | None = None,
            cores: int | None = None) -> dict:
    pts = {a: [(r["seconds"], r["primal"]) for r in run["curve"] if r["primal"] is not None]
           for a, run in runs.items()}
    given = getattr(args, "fstar", None)
    fstar = fstar_of(pts, exclude=[a for a in pts if a not in DCD_FAMILY], reference=given)
    fstar_from = "given" if fstar == given else min(
        (a for a in pts if a in DCD_FAMILY),
        key=lambda a: min((p for _, p in pts[a]), default=math.inf))
    out: dict = {"fstar": fstar, "fstar_from": fstar_from, "fstar_given": given, "methods": {}}
    for a, run in runs.items():
        rel = annotate_relative(run["curve"], fstar)
        m = {f"time_to_{g:g}": time_to_gap(pts[a], fstar, g) for g in GAPS}
        # resolution of the 1% figure: the snapshot before the one that reached it
        t1 = m["time_to_0.01"]
        before = [t for t, _ in sorted(pts[a]) if t < t1]
        m["time_to_0.01_previous_snapshot"] = before[-1] if before and math.isfinite(t1) else None
        m["min_relative_difference"] = min(rel) if rel else None
        fm = [r["metric"] for r in run["curve"] if r["metric"] is not None]
        m["final_metric"] = fm[-1] if fm else None
        m["best_metric"] = max(fm) if fm else None
        tl, p = run["cpu_timeline"], run["threads"]
        m["cpu_normalised_time_to_0.01"] = cpu_normalised(tl, t1, p)
        m["load_adjusted_time_to_0.01"] = load_adjusted(
            t1, p, cores or p, (spans or {}).get(a, {}).get("foreign_cores"))
        m["cpu_average"] = (run["cpu"] or {}).get("average")
        m["cpu_of"] = (run["cpu"] or {}).get("of")
        m["cpu_fraction_of_p_cores"] = (m["cpu_average"] / m["cpu_of"]
                                        if m["cpu_average"] is not None and m["cpu_of"] else None)
        out["methods"][a] = m
    M = out["methods"]

    def speed(other: str, key: str = "time_to_0.01") -> float | None:
        if "demi-dcd" not in M or other not in M:
            return None
        d, o = M["demi-dcd"][key], M[other][key]
        if math.isinf(d):
            return 0.0 if math.isfinite(o) else math.nan
        return o / d if d > 0 else math.inf

    out["demi_vs_ms_dcd_time_to_1pct"] = speed("ms-dcd")
    out["demi_vs_1dcd_time_to_1pct"] = speed("dcd")
    out["load_adjusted_demi_vs_ms_dcd"] = speed("ms-dcd", "load_adjusted_time_to_0.01")
    out["load_adjusted_demi_vs_1dcd"] = speed("dcd", "load_adjusted_time_to_0.01")
    out["cpu_normalised_demi_vs_1dcd"] = speed("dcd", "cpu_normalised_time_to_0.01")
    if crf is not None and "demi-dcd" in runs:
        target = crf["test_accuracy"]
        t = time_to_metric([(r["seconds"], r["metric"]) for r in runs["demi-dcd"]["curve"]],
                           target)
        crf["demi_dcd_time_to_crfsuite_accuracy"] = t
        crf["ratio_to_crfsuite_wall"] = t / crf["train_wall_seconds"]
        crf["ratio_to_crfsuite_cpu"] = t / crf["train_cpu_seconds"]
        if "dcd" in runs:
            crf["dcd_time_to_crfsuite_accuracy"] = time_to_metric(
                [(r["seconds"], r["metric"]) for r in runs["dcd"]["curve"]], target)
    return out


def targets(res: dict, args) -> dict:
    A, M, p = res["analysis"], res["analysis"]["methods"], args.threads
    t: dict = {}
    if "demi-dcd" in M:
        f = M["demi-dcd"]["cpu_fraction_of_p_cores"]
        t["issue4_demi_cpu_ge_95pct_of_p_cores"] = {"measured": f, "target": 0.95,
                                                    "met": bool(f is not None and f >= 0.95)}
    if A.get("demi_vs_1dcd_time_to_1pct") is not None:
        x = A["demi_vs_1dcd_time_to_1pct"]
        t["issue4_demi_ge_1.3x_faster_than_1dcd_to_1pct"] = {"measured": x, "target": 1.3,
                                                            "met": bool(x >= 1.3)}
    if A.get("demi_vs_ms_dcd_time_to_1pct") is not None:
        x = A["demi_vs_ms_dcd_time_to_1pct"]
        key = ("issue6" if args.task == "entity-relation" else "issue5") + \
            "_demi_ge_1.5x_faster_than_ms_dcd_to_1pct"
        t[key] = {"measured": x, "target": 1.5, "met": bool(x >= 1.5)}
    if args.task == "entity-relation" and "demi-dcd" in res["runs"]:
        fin = res["runs"]["demi-dcd"]["final"]
        for k, goal in (("entity_f1", 0.94), ("relation_f1", 0.60)):
            if k in fin:
                t[f"issue6_demi_{k}"] = {"measured": fin[k], "target": goal,
                                         "met": fin[k] >= goal}
    crf = res.get("crfsuite")
    if crf and "ratio_to_crfsuite_wall" in crf:
        x = crf["ratio_to_crfsuite_wall"]
        t["issue7_demi_reaches_crfsuite_accuracy_in_le_0.25x_its_time"] = {
            "measured": x, "target": 0.25, "met": bool(x <= 0.25), "p": p}
    return t


# --------------------------------------------------------------------------- plots
def _label(a: str, runs: dict) -> str:
    return NAMES[a] + (f" (p={runs[a]['threads']})" if runs[a]["threads"] > 1 else "")


def plot_primal(res: dict, path: Path, title: str):
    plt = pyplot()
    if plt is None:
        return None
    runs, A = res["runs"], res["analysis"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    drawn = 0
    for a in DCD_FAMILY:
        if a not in runs:
            continue
        xs = [max(r["seconds"], 1e-2) for r in runs[a]["curve"]
              if r.get("relative_difference") is not None and r["relative_difference"] > 0]
        ys = [r["relative_difference"] for r in runs[a]["curve"]
              if r.get("relative_difference") is not None and r["relative_difference"] > 0]
        t1 = A["methods"][a]["time_to_0.01"]
        ax.loglog(xs, ys, marker="o", ms=3, label=f"{_label(a, runs)}: 1% "
                  + (f"at {fmt_s(t1)}" if math.isfinite(t1) else "not reached"),
                  **METHOD_STYLE[NAMES[a]])
        drawn += len(xs)
    ax.axhline(0.01, color="k", lw=0.8, ls=":")
    ax.set_xlabel("wall-clock training time (s)")
    ax.set_ylabel("relative primal difference (f(w) − f*) / f*")
    ax.set_title(title + "\n(f* = lowest primal of any DCD method; SP-IPM solves another "
                 "problem)", fontsize=9)
    ax.legend(fontsize=8)
    fig.text(0.01, -0.02, machine_caption(res["machine"]), fontsize=7)
    return save_figure(fig, path) if drawn else None


def plot_test(res: dict, path: Path, title: str, task: str):
    plt = pyplot()
    if plt is None:
        return None
    runs = res["runs"]
    keys = (["entity_f1", "relation_f1"] if task == "entity-relation" else ["metric"])
    fig, axes = plt.subplots(1, len(keys), figsize=(6.5 * len(keys), 4.5), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for a in runs:
            rows = [r for r in runs[a]["curve"] if r.get(key) is not None]
            ax.semilogx([max(r["seconds"], 1e-2) for r in rows], [100 * r[key] for r in rows],
                        marker="o", ms=3, label=_label(a, runs), **METHOD_STYLE[NAMES[a]])
        crf = res.get("crfsuite")
        if crf and key == "metric":
            ax.axhline(100 * crf["test_accuracy"], color=METHOD_STYLE["CRFsuite"]["color"],
                       lw=0.8, ls=":")
            ax.plot([crf["train_wall_seconds"]], [100 * crf["test_accuracy"]], marker="*",
                    ms=12, ls="none", color=METHOD_STYLE["CRFsuite"]["color"],
                    label=f"CRFsuite lbfgs: {100 * crf['test_accuracy']:.2f}% in "
                          f"{crf['train_wall_seconds']:.0f}s")
        lo = [100 * r[key] for a in runs for r in runs[a]["curve"] if r.get(key) is not None]
        if lo and key == "metric" and task != "entity-relation":
            ax.set_ylim(max(min(lo), max(lo) - 8), max(lo) + 0.5)
        ax.set_xlabel("wall-clock training time (s)")
        ax.set_ylabel({"metric": "test token accuracy (%)", "entity_f1": "test entity F1 (%)",
                       "relation_f1": "test relation F1 (%)"}[key])
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.text(0.01, -0.02, machine_caption(res["machine"]), fontsize=7)
    return save_figure(fig, path)


def plot_cpu(res: dict, path: Path, title: str):
    plt = pyplot()
    if plt is None:
        return None
    runs = res["runs"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for a in runs:
        tl = runs[a]["cpu_timeline"]
        if not tl["seconds"]:
            continue
        avg = (runs[a]["cpu"] or {}).get("average")
        ax.plot(tl["seconds"], moving_average(tl["seconds"], tl["total"], 2.0),
                label=f"{_label(a, runs)}: average {avg:.0f}%" if avg is not None else a,
                **METHOD_STYLE[NAMES[a]])
    p = max(r["threads"] for r in runs.values())
    ax.axhline(100 * p, color="k", lw=0.8, ls=":", label=f"{p} cores = {100 * p}%")
    ax.set_ylim(0, 100 * p * 1.15)
    ax.set_xlabel("wall-clock training time (s)")
    ax.set_ylabel("CPU use (%), 2-second moving average")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.text(0.01, -0.02, machine_caption(res["machine"]), fontsize=7)
    return save_figure(fig, path)


# --------------------------------------------------------------------------- report
def summary_table(res: dict) -> str:
    runs, M = res["runs"], res["analysis"]["methods"]
    rows = []
    for a in runs:
        m, r = M[a], runs[a]
        lr = r["learner"] or {}
        fin = r["final"]
        metric = (f"{100 * fin['accuracy']:.2f}%" if "accuracy" in fin else
                  f"E {100 * fin.get('entity_f1', math.nan):.1f} / "
                  f"R {100 * fin.get('relation_f1', math.nan):.1f}")
        rows.append([_label(a, runs), fmt_s(m["time_to_0.1"]), fmt_s(m["time_to_0.01"]),
                     fmt_s(m["time_to_0.001"]), fmt_s(m.get("load_adjusted_time_to_0.01")),
                     metric,
                     f"{m['cpu_average']:.0f}% of {m['cpu_of']:.0f}%"
                     if m["cpu_average"] is not None else "n/a",
                     f"{lr['updates_per_s']:,.0f}" if lr else "",
                     f"{lr['structures_pushed_per_s']:,.0f}" if lr.get(
                         "structures_pushed_per_s") else "",
                     f"{lr['publish_percent']:.1f}%" if lr else "",
                     f"{res['load']['spans'].get(a, {}).get('foreign_cores', math.nan):.2f}"])
    return markdown_table(["method", "time to 10%", "time to 1%", "time to 0.1%",
                           "time to 1%, load-adjusted", "final test", "average CPU",
                           "learner updates/s", "structures/s pushed", "publish cost",
                           "other load (cores)"], rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("sequence", "entity-relation"), default="sequence")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ilp-solver", choices=("exact", "cbc", "highs"), default=None,
                    help="entity-relation: the training runs' ILP solver (snapshots and "
                         "models are evaluated with the exact solver: same optima)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per method (default 100 sequence, 60 entity-relation)")
    ap.add_argument("--snapshot-every", type=float, default=1.0)
    ap.add_argument("--min-step", type=float, default=1.0,
                    help="evaluate snapshots at least this many seconds apart ...")
    ap.add_argument("--rel-step", type=float, default=0.05, help="... and this fraction of t")
    ap.add_argument("--methods", default="dcd,demi-dcd,ms-dcd,sp-ipm")
    add_data_arguments(ap)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-crfsuite", action="store_true")
    ap.add_argument("--crf-iterations", type=int, default=100)
    ap.add_argument("--keep-snapshots", action="store_true")
    ap.add_argument("--work-dir", help="keep logs, CPU logs and models here (default: temporary)")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name")
    ap.add_argument("--fstar", type=float, default=None,
                    help="reference primal f* (e.g. a long run's lowest) instead of the lowest "
                         "primal of this run, when no run goes below it")
    ap.add_argument("--reanalyse", metavar="JSON",
                    help="recompute the analysis, plots and files of an earlier results file")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.reanalyse:
        import json

        res = json.loads(Path(args.reanalyse).read_text())
        args.task, args.threads = res["task"], res["threads"]
        args.budget = res["budget_seconds"]
        args.train = None if "train.corp" in res["data"]["train"] or "en_ewt" in res["data"][
            "train"] else res["data"]["train"]
        name = args.name or Path(args.reanalyse).stem
        return report(res, args, name)
    if args.budget is None:
        args.budget = 60.0 if args.task == "entity-relation" else 100.0
    name = args.name or ("convergence_ewt" if args.task == "sequence" else
                         "convergence_conll04")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in NAMES:
            ap.error(f"unknown method {m!r}")
    info = machine_info()
    q = args.quiet
    say(f"machine: {machine_line(info)}; load average {info['load_average_1_5_15min']}", q)
    if args.threads > (os.cpu_count() or 1):
        say(f"WARNING: --threads {args.threads} is more than the {os.cpu_count()} cores here",
            q)
    crf_on = args.task == "sequence" and not args.no_crfsuite
    prog = Progress(len(methods) + int(crf_on), f"convergence {args.task}", q)
    work = Path(args.work_dir).resolve() if args.work_dir else Path(tempfile.mkdtemp(
        prefix="demidcd-convergence-"))
    work.mkdir(parents=True, exist_ok=True)
    load = LoadSampler().start()
    try:
        data = data_setup(args, work, prog)
        runs = {}
        for alg in methods:
            runs[alg] = run_method(alg, args, data, work, load, prog)
        crf = None
        if crf_on:
            with load.span("crfsuite"):
                crf = run_crfsuite(data, args.crf_iterations, prog, work)
            if crf is None:
                say("CRFsuite peer skipped: python-crfsuite is not installed "
                    "(pip install python-crfsuite, or the [bench] extra)", q)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    load.stop()
    prog.close()
    res = {"benchmark": f"convergence ({args.task})", "machine": info,
           "command": "python benchmarks/convergence.py " + " ".join(
               argv if argv is not None else sys.argv[1:]),
           "task": args.task, "threads": args.threads, "budget_seconds": args.budget,
           "data": {k: v for k, v in data.items() if k != "opts"} | {"options": data["opts"]},
           "load": load.summary(), "runs": runs, "crfsuite": crf}
    return report(res, args, name)


def report(res: dict, args, name: str) -> int:
    """Analysis, targets, plots, CSV/JSON files and the printed summary of a finished run
    (also used by ``--reanalyse`` on a results file)."""
    q, runs, crf = args.quiet, res["runs"], res["crfsuite"]
    data = res["data"]
    res["analysis"] = analyse(runs, crf, args, res["load"]["spans"], res["machine"]["nproc"])
    res["targets"] = targets(res, args)
    od = Path(args.out_dir)
    what = ("EWT XPOS" if args.task == "sequence" and not args.train else
            "CoNLL04 (seeded split)" if args.task == "entity-relation" and not args.train
            else Path(data["train"]).name)
    title = f"{what}, p = {args.threads}, budget {args.budget:g}s per method"
    pngs = [plot_primal(res, od / f"{name}_primal.png", "Relative primal difference — " + title),
            plot_test(res, od / f"{name}_test.png", "Test performance — " + title, args.task),
            plot_cpu(res, od / f"{name}_cpu.png", "CPU use — " + title)]
    res["plots"] = [str(p.name) for p in pngs if p is not None]
    rows = []
    for a, run in runs.items():
        for r in run["curve"]:
            rows.append([NAMES[a], r["seconds"], r["primal"], r.get("relative_difference"),
                         r["metric"], r.get("entity_f1"), r.get("relation_f1")])
    write_csv(od / f"{name}.csv", ["method", "seconds", "primal", "relative_difference",
                                   "test_metric", "entity_f1", "relation_f1"], rows)
    cpu_rows = []
    for a, run in runs.items():
        tl = run["cpu_timeline"]
        for t, v, mv in zip(tl["seconds"], tl["total"],
                            moving_average(tl["seconds"], tl["total"], 2.0), strict=True):
            cpu_rows.append([NAMES[a], t, v, mv])
    write_csv(od / f"{name}_cpu.csv", ["method", "seconds", "total_percent",
                                       "moving_average_2s"], cpu_rows)
    res["table_markdown"] = summary_table(res)
    write_json(od / f"{name}.json", res)
    A = res["analysis"]
    say(res["table_markdown"], q)
    src = NAMES.get(A["fstar_from"], "--fstar")
    say(f"f* = {A['fstar']:.6g} (from {src}); DEMI-DCD vs MS-DCD to 1%: "
        f"{fmt_x(A['demi_vs_ms_dcd_time_to_1pct'])}, vs 1-DCD: "
        f"{fmt_x(A['demi_vs_1dcd_time_to_1pct'])}; adjusted for the cores other processes "
        f"took (estimate for an idle machine): {fmt_x(A['load_adjusted_demi_vs_ms_dcd'])} and "
        f"{fmt_x(A['load_adjusted_demi_vs_1dcd'])}", q)
    if "ms-dcd" in runs and runs["ms-dcd"]["ms_split"]:
        s = runs["ms-dcd"]["ms_split"]
        say(f"MS-DCD time split: inference (barrier) {s['inference_seconds']:.1f}s, master "
            f"updates {s['master_seconds']:.1f}s ({100 * s['master_share']:.0f}% of the two) "
            f"over {s['iterations']:.0f} iterations", q)
    if crf:
        say(f"CRFsuite: {100 * crf['test_accuracy']:.2f}% test accuracy in "
            f"{crf['train_wall_seconds']:.1f}s wall ({crf['train_cpu_seconds']:.1f}s CPU); "
            f"DEMI-DCD (p={args.threads}) reaches it at "
            f"{fmt_s(crf['demi_dcd_time_to_crfsuite_accuracy'])} = "
            f"{crf['ratio_to_crfsuite_wall']:.2f}x CRFsuite's time (target <= 0.25x)", q)
    for k, v in res["targets"].items():
        say(f"target {k}: measured {v['measured']}, target {v['target']}: "
            f"{'met' if v['met'] else 'NOT met'}", q)
    spans = res["load"]["spans"]
    say("load: " + "; ".join(f"{k}: other processes used {v['foreign_cores']:.2f} cores"
                             for k, v in spans.items()), q)
    say(f"wrote {od / (name + '.json')}, {od / (name + '.csv')}, " + ", ".join(res["plots"]), q)
    return 0


if __name__ == "__main__":
    sys.exit(main())
