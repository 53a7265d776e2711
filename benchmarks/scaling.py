"""Thread scaling of DEMI-DCD (the DEMI-DCD paper's Figure 4), measured and projected.

``python benchmarks/scaling.py`` with none of the single-run options below runs the suite of
issue 53 instead (four corpora at p = 1 … 16 with the speed-up's decomposition, the CRF's
seconds per iteration; ``benchmarks/results/scaling16.json``): see
:mod:`scaling_suite` (``--quick`` dry-runs it on a small machine). One corpus, as before:

    python benchmarks/scaling.py --single --threads 1,2,4,8,16 [--budget 100] [--quiet]
        [--task sequence|entity-relation] [--train F --test F --format F --column C]
        [--project-max 32] [--out-dir benchmarks/results] [--name scaling_ewt]

Measured: for each p, ``demidcd train`` (p = 1: 1-DCD; p ≥ 2: DEMI-DCD with p processes) with
the same budget and snapshots, then ``demidcd evaluate-snapshots``; f* is the lowest primal of
all runs; reported: time to 1% relative primal difference and speed-up against 1-DCD, with the
ideal linear reference. Asking more threads than cores is allowed, and said so in the output,
the results file and the plot (those points measure an oversubscribed machine).

PROJECTION (a model, not a measurement) for p = 1 … ``--project-max``, from per-component costs
measured here on one core:

* t_inf — loss-augmented inference seconds per example (chunks of 16, as a worker does);
* t_upd — learner seconds per coordinate update (filled active sets, the update kernel):
  1-DCD's (whole passes), and DEMI-DCD's learner's (blocks of 64 examples, every changed
  entry of w tracked for the next publish), which is slower;
* t_tr  — transport seconds per structure: ring push + pop + admission into the active set;
* the work 1-DCD needed to reach 1%: inferences I, updates U, admitted structures A (from its
  log at that time), structures pushed per inference q and the publish overhead φ_pub (from the
  DEMI-DCD p = 2 log when measured).

1-DCD does everything in sequence:  T(1) = I·t_inf + U·t_upd + A·t_tr.
DEMI-DCD overlaps p − 1 workers with the learner, so the slower side sets the pace:
T(p) = max(I·t_inf / (p − 1), (U·t_upd' + q·I·t_tr)·(1 + φ_pub)) with t_upd' the
DEMI-DCD learner's cost per update. Its processes never wait,
so its busy CPU is p·100%; the *useful* part is the learner plus the workers' share T_inf/T(p).
The model assumes DEMI-DCD needs as many inferences as 1-DCD (stale weights cost nothing); a
second curve multiplies I and U by the ratios s = I(DEMI, p=2)/I(1-DCD) and
u = U(DEMI, p=2)/U(1-DCD) measured at 1% in this run. Both are
validated against the measured p = 1 and p = 2 points (the first is an honest prediction; the
second is fitted at p = 2 and predicts nothing there).
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    LoadSampler,
    Progress,
    add_data_arguments,
    annotate_relative,
    fmt_s,
    fstar_of,
    machine_caption,
    machine_info,
    machine_line,
    markdown_table,
    pyplot,
    read_jsonl,
    rmtree,
    save_figure,
    say,
    time_to_gap,
    write_csv,
    write_json,
)
from convergence import cpu_normalised, data_setup, run_method  # noqa: E402
from foundation import learner_throughput, one_core  # noqa: E402

CHUNK = 16  # examples per worker inference call (DEMI-DCD's default rho_worker)


# --------------------------------------------------------------------------- calibration
def work_at(records: list[dict], t: float, algorithm: str) -> dict | None:
    """Cumulative inferences, updates, admitted (and pushed) structures at time t, from the
    per-iteration log records (the last record at or before t)."""
    if not math.isfinite(t):
        return None
    upto = [r for r in records if r["seconds"] <= t + 1e-6]
    if not upto:
        return None
    last = upto[-1]
    admitted = (sum(int(r.get("admitted", 0)) for r in upto) if algorithm == "dcd"
                else int(last.get("admitted", 0)))
    return {"seconds": float(last["seconds"]), "inferences": int(last.get("inferences", 0)),
            "updates": int(last.get("total_updates", last.get("updates", 0))),
            "admitted": admitted, "pushed": int(last.get("pushed", admitted)),
            "epochs": int(last["epoch"])}


def calibrate(task, w: np.ndarray, C: float, fill_epochs: int, prog: Progress) -> dict:
    """Per-component costs on one core (this process pinned)."""
    from demidcd.primitives.ring import RecordRing
    from demidcd.primitives.shm import SharedArena
    from demidcd.solvers.activeset import ActiveSets

    with one_core():
        n = task.n_examples
        ex = np.arange(n, dtype=np.int64)
        task.loss_augmented(w, ex[:CHUNK])
        prog.note("calibration: inference")
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            for s in range(0, n, CHUNK):
                task.loss_augmented(w, ex[s:s + CHUNK])
            best = min(best, time.perf_counter() - t0)
        t_inf = best / n
        # transport: push + pop through a ring, then admission (insert) into active sets
        prog.note("calibration: transport")
        batch = task.loss_augmented(np.zeros_like(w), ex[: min(n, 2000)])
        nrec = len(batch)
        with SharedArena() as arena:
            ring = RecordRing.allocate(arena, "calib", 1 << 24)
            k = ring.push(batch, 0)
            ring.pop()  # warm-up
            t0 = time.perf_counter()
            k = 0
            while k < nrec:
                k = ring.push(batch, k)
                ring.pop()
            t_ring = (time.perf_counter() - t0) / max(nrec, 1)
        act = ActiveSets(n, task.dim, C, 0.01, 50)
        act.insert(batch.take(np.arange(min(nrec, 4))), -1e300)
        act = ActiveSets(n, task.dim, C, 0.01, 50)
        t0 = time.perf_counter()
        act.insert(batch, -1e300)
        t_ins = (time.perf_counter() - t0) / max(nrec, 1)
        nnz_transport = float(np.diff(batch.ptr).mean()) if nrec else 0.0
        prog.note("calibration: learner updates")
        lrn = learner_throughput(task, C, fill_epochs, 3)
    return {"t_inf_seconds_per_example": t_inf, "inference_chunk": CHUNK,
            "t_upd_seconds_per_update": 1.0 / lrn["no_shrink"]["updates_per_s"],
            "t_upd_demi_seconds_per_update": 1.0 / lrn["blocks_of_64"]["updates_per_s"],
            "t_ring_seconds_per_structure": t_ring, "t_insert_seconds_per_structure": t_ins,
            "t_tr_seconds_per_structure": t_ring + t_ins,
            "transport_records_measured": nrec,
            "transport_mean_nnz (records at w = 0, the largest)": nnz_transport,
            "learner": lrn}


def project(cal: dict, work1: dict, q: float, f_pub: float, s: float, pmax: int,
            u: float = 1.0) -> list[dict]:
    """Predicted time to 1% and CPU for p = 1..pmax (see the module docstring); ``s`` and
    ``u`` scale the inferences and updates DEMI-DCD needs relative to 1-DCD."""
    I, U, A = work1["inferences"], work1["updates"], work1["admitted"]
    ti, tu, tt = (cal["t_inf_seconds_per_example"], cal["t_upd_seconds_per_update"],
                  cal["t_tr_seconds_per_structure"])
    tud = cal.get("t_upd_demi_seconds_per_update", tu)
    out = []
    for p in range(1, pmax + 1):
        if p == 1:
            T = I * ti + U * tu + A * tt
            out.append({"p": p, "time_to_1pct": T, "inference_seconds": I * ti,
                        "learner_seconds": U * tu + A * tt, "bottleneck": "sequential",
                        "busy_cpu_percent": 100.0, "useful_cpu_percent": 100.0})
            continue
        Ti = s * I * ti / (p - 1)
        Tl = (u * U * tud + q * s * I * tt) * (1 + f_pub)
        T = max(Ti, Tl)
        out.append({"p": p, "time_to_1pct": T, "inference_seconds": Ti, "learner_seconds": Tl,
                    "bottleneck": "inference" if Ti >= Tl else "learner",
                    "busy_cpu_percent": 100.0 * p,
                    "useful_cpu_percent": 100.0 * (Tl / T + (p - 1) * Ti / T)})
    return out


# --------------------------------------------------------------------------- plot
def plot(res: dict, path: Path):
    plt = pyplot()
    if plt is None:
        return None
    cores = res["machine"]["nproc"] or 1
    runs = res["runs"]
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(17, 4.8))
    cmap = plt.get_cmap("viridis")
    ps = sorted(runs)
    for k, p in enumerate(ps):
        r = runs[p]
        pts = [(max(x["seconds"], 1e-2), x["relative_difference"]) for x in r["curve"]
               if x.get("relative_difference") is not None and x["relative_difference"] > 0]
        over = " OVERSUBSCRIBED" if p > cores else ""
        a1.loglog([a for a, _ in pts], [b for _, b in pts], marker="o", ms=3,
                  ls="--" if p == 1 else "-", color="tab:gray" if p == 1 else
                  cmap(0.85 * (k - 1) / max(len(ps) - 2, 1)),
                  label=("1-DCD" if p == 1 else f"DEMI-DCD p={p}") + over)
    a1.axhline(0.01, color="k", lw=0.8, ls=":")
    a1.set_xlabel("wall-clock training time (s)")
    a1.set_ylabel("(f(w) − f*) / f*")
    a1.set_title("measured: relative primal difference", fontsize=9)
    a1.legend(fontsize=8)
    S = res["speedup"]
    mp = [p for p in ps if S.get(p) is not None and math.isfinite(S[p])]
    ok = [p for p in mp if p <= cores]
    bad = [p for p in mp if p > cores]
    pm = res["projection"]["pmax"]
    grid = list(range(1, pm + 1))
    a2.plot(grid, grid, color="k", lw=0.8, ls=":", label="ideal (linear in p)")
    for key, style, lab in (("work_conserving", "--", "PROJECTION: same work as 1-DCD"),
                            ("calibrated", "-.", "PROJECTION: work × s, u (fitted at p=2)")):
        pr = res["projection"].get(key)
        if pr:
            t1 = pr[0]["time_to_1pct"]
            a2.plot(grid, [t1 / x["time_to_1pct"] for x in pr], ls=style, color="tab:orange"
                    if key == "work_conserving" else "tab:purple", label=lab)
            a3.loglog(grid, [x["time_to_1pct"] for x in pr], ls=style,
                      color="tab:orange" if key == "work_conserving" else "tab:purple",
                      label=lab)
    a2.plot(ok, [S[p] for p in ok], "o", ms=8, color="tab:red", label="measured")
    if bad:
        a2.plot(bad, [S[p] for p in bad], "o", ms=8, mfc="none", color="tab:red",
                label=f"measured, p > {cores} cores (oversubscribed)")
    a2.set_xscale("log", base=2)
    a2.set_yscale("log", base=2)
    a2.set_xlabel("threads p")
    a2.set_ylabel("speed-up to 1% vs 1-DCD")
    a2.set_title("speed-up: measured points, PROJECTION curves", fontsize=9)
    a2.legend(fontsize=7)
    T = res["time_to_1pct"]
    a3.plot([p for p in ok], [T[p] for p in ok], "o", ms=8, color="tab:red", label="measured")
    if bad:
        a3.plot(bad, [T[p] for p in bad], "o", ms=8, mfc="none", color="tab:red",
                label="measured, oversubscribed")
    a3.set_xscale("log", base=2)
    a3.set_xlabel("threads p")
    a3.set_ylabel("time to 1% relative primal difference (s)")
    a3.set_title("time to 1%: measured vs PROJECTION (model, not measured)", fontsize=9)
    a3.legend(fontsize=7)
    over = [p for p in ps if p > cores]
    warn = (f"WARNING: p > {cores} cores asked (p = {', '.join(map(str, over))}): those runs "
            f"share {cores} cores (oversubscribed)" if over else "")
    missing = [p for p in ps if p not in mp]
    if missing:
        a2.text(0.02, 0.02, "1% not reached within the budget: p = " +
                ", ".join(map(str, missing)), transform=a2.transAxes, fontsize=8)
    fig.suptitle(f"DEMI-DCD thread scaling — {res['what']}. {warn}", fontsize=9,
                 color="tab:red" if warn else "k")
    fig.text(0.01, -0.03, machine_caption(res["machine"]), fontsize=7)
    return save_figure(fig, path)


# --------------------------------------------------------------------------- main
SINGLE_RUN = ("--single", "--task", "--train", "--test", "--format", "--column", "--budget",
              "--learners", "--also-learners", "--project-max", "--name", "--out-dir",
              "--min-step", "--rel-step", "--C", "--fill-epochs", "--seed", "--split-seed")
"""Options of the one-corpus run: with none of them the command runs the suite."""


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    if not any(x.split("=", 1)[0] in SINGLE_RUN for x in args_in):
        import scaling_suite

        return scaling_suite.main(args_in)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", action="store_true", help="one corpus (these options)")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--task", choices=("sequence", "entity-relation"), default="sequence")
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--snapshot-every", type=float, default=1.0)
    ap.add_argument("--min-step", type=float, default=1.0)
    ap.add_argument("--rel-step", type=float, default=0.05)
    add_data_arguments(ap)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--fill-epochs", type=int, default=10,
                    help="DCD epochs that fill the active sets for the t_upd calibration")
    ap.add_argument("--project-max", type=int, default=32)
    ap.add_argument("--learners", default="1",
                    help="DEMI-DCD's --learners in the main series (1: the published layout)")
    ap.add_argument("--also-learners", default="",
                    help="further --learners layouts of DEMI-DCD (e.g. auto) run at every p >= 2 "
                         "beside the published one-learner layout and reported in their own table")
    ap.add_argument("--work-dir")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    args.keep_snapshots = False
    threads = sorted({int(x) for x in args.threads.split(",") if x.strip()})
    if not threads or threads[0] < 1:
        ap.error("--threads needs positive integers")
    if 1 not in threads:
        threads = [1, *threads]  # the speed-up reference
    name = args.name or ("scaling_ewt" if args.task == "sequence" else "scaling_conll04")
    q = args.quiet
    info = machine_info()
    cores = info["nproc"] or 1
    say(f"machine: {machine_line(info)}; load average {info['load_average_1_5_15min']}", q)
    over = [p for p in threads if p > cores]
    if over:
        say(f"WARNING: asked for {', '.join(map(str, over))} threads on a machine with {cores} "
            "cores: those runs are oversubscribed and do not measure scaling", q)
    prog = Progress(len(threads) + 1 + (len(threads) - 1) * len(
        [x for x in args.also_learners.split(",") if x.strip() not in ("", args.learners)]),
        "scaling", q)
    work = Path(args.work_dir).resolve() if args.work_dir else Path(tempfile.mkdtemp(
        prefix="demidcd-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    load = LoadSampler().start()
    runs: dict[int, dict] = {}
    layouts = [x.strip() for x in args.also_learners.split(",")
               if x.strip() not in ("", args.learners)]
    extra: dict[str, dict[int, dict]] = {lay: {} for lay in layouts}
    try:
        data = data_setup(args, work, prog)
        for p in threads:
            a = copy.copy(args)
            a.threads = p
            alg = "dcd" if p == 1 else "demi-dcd"
            runs[p] = run_method(alg, a, data, work / f"p{p}", load, prog, label=f"p{p}")
            runs[p]["records"] = read_jsonl(work / f"p{p}" / alg / "log.jsonl")
            for lay in layouts if p > 1 else ():
                b = copy.copy(a)
                b.learners = lay
                extra[lay][p] = run_method(alg, b, data, work / f"p{p}_{lay}", load, prog,
                                           label=f"p{p} learners {lay}")
        # calibration on the 1-DCD model's task
        prog.note("calibration")
        from demidcd.api import load_estimator

        est = load_estimator(work / "p1" / "dcd" / "model.npz")
        if args.task == "entity-relation":
            from demidcd.io.conll04 import read_conll04

            task = est.training_task(read_conll04(data["train"]))
        else:
            from demidcd.io.tagged import read_tagged

            col = data["column"]
            col = col if col in (None, "upos", "xpos") else int(col)
            tr = read_tagged(data["train"], fmt=data["format"], column=col)
            task = est.training_task(tr.tokens, tr.tags)
        with load.span("calibration"):
            cal = calibrate(task, est.coef_, args.C, args.fill_epochs, prog)
        prog.step("calibration")
    finally:
        if not args.work_dir:
            rmtree(work)
    load.stop()
    prog.close()
    # ---- measured
    pts = {p: [(r["seconds"], r["primal"]) for r in run["curve"] if r["primal"] is not None]
           for p, run in runs.items()}
    xpts = {(lay, p): [(r["seconds"], r["primal"]) for r in run["curve"]
                       if r["primal"] is not None]
            for lay, by_p in extra.items() for p, run in by_p.items()}
    fstar = fstar_of({**pts, **xpts})
    T, S, Tn = {}, {}, {}
    for p, run in runs.items():
        annotate_relative(run["curve"], fstar)
        T[p] = time_to_gap(pts[p], fstar, 0.01)
        Tn[p] = cpu_normalised(run["cpu_timeline"], T[p], run["threads"])
    for p in runs:
        S[p] = (T[1] / T[p] if math.isfinite(T[p]) and T[p] > 0 and math.isfinite(T[1])
                else math.nan)
    x_rows = []  # the other layouts: one row per (layout, p), against the same f* and 1-DCD
    for (lay, p), pp in xpts.items():
        run = extra[lay][p]
        annotate_relative(run["curve"], fstar)
        t = time_to_gap(pp, fstar, 0.01)
        x_rows.append({"learners": lay, "p": p, "time_to_1pct": t,
                       "speedup_vs_p1": T[1] / t if math.isfinite(t) and t > 0 and
                       math.isfinite(T[1]) else math.nan,
                       "cpu_percent": (run["cpu"] or {}).get("average"),
                       "learner_processes": (run.get("learner") or {}).get("learners")})
    # ---- projection
    w1 = work_at(runs[1]["records"], T[1], "dcd")
    proj: dict = {"pmax": args.project_max, "inputs": {}}
    if w1 is not None:
        q_push, f_pub, s, u = 1.0, 0.0, None, 1.0
        demi2 = runs.get(2)
        w2 = work_at(demi2["records"], T[2], "demi-dcd") if demi2 else None
        if demi2 and demi2["learner"]:
            lr = demi2["learner"]
            q_push = lr["pushed"] / max(lr["inferences"], 1)
            f_pub = lr["publish_percent"] / 100.0
        if w2 is not None and w1["inferences"] and w1["updates"]:
            s = w2["inferences"] / w1["inferences"]
            u = w2["updates"] / w1["updates"]
        proj["inputs"] = {"work_of_1dcd_at_1pct": w1, "work_of_demi_p2_at_1pct": w2,
                          "pushed_per_inference_q": q_push, "publish_overhead": f_pub,
                          "inference_ratio_s": s, "update_ratio_u": u,
                          **{k: v for k, v in cal.items() if k != "learner"}}
        proj["work_conserving"] = project(cal, w1, q_push, f_pub, 1.0, args.project_max)
        if s is not None:
            proj["calibrated"] = project(cal, w1, q_push, f_pub, s, args.project_max, u)
        val = {}
        for p in (1, 2):
            if p in runs:
                val[p] = {"measured": T[p], "measured_cpu_normalised": Tn[p],
                          "predicted_work_conserving": proj["work_conserving"][p - 1][
                              "time_to_1pct"],
                          "predicted_calibrated": proj["calibrated"][p - 1]["time_to_1pct"]
                          if "calibrated" in proj else None,
                          "measured_cpu_percent": (runs[p]["cpu"] or {}).get("average")}
                m, pr = val[p]["measured"], val[p]["predicted_work_conserving"]
                val[p]["relative_error_work_conserving"] = (pr - m) / m if math.isfinite(m) \
                    else None
        proj["validation"] = val
    else:
        proj["skipped"] = ("1-DCD did not come within 1% of f* (the best primal of all runs) "
                           "inside the budget: no measured work to project from; give a "
                           "larger --budget")
        say(f"no projection: {proj['skipped']}", q)
    what = (f"{Path(data['train']).name}" if args.train else
            "EWT XPOS" if args.task == "sequence" else "CoNLL04 seeded split")
    res = {"benchmark": "scaling (issue 7, Figure 4)", "machine": info, "what": what,
           "command": "python benchmarks/scaling.py " + " ".join(
               argv if argv is not None else sys.argv[1:]),
           "threads": threads, "cores": cores, "oversubscribed_threads": over,
           "warning": (f"threads {over} exceed the {cores} cores of this machine: those "
                       "points are oversubscribed" if over else None),
           "budget_seconds": args.budget, "fstar": fstar, "time_to_1pct": T, "speedup": S,
           "time_to_1pct_cpu_normalised": Tn,
           "load": load.summary(), "calibration_learner": cal["learner"], "projection": proj,
           "runs": {p: {k: v for k, v in r.items() if k != "records"} for p, r in runs.items()}}
    od = Path(args.out_dir)
    png = plot(res, od / f"{name}.png")
    res["plots"] = [png.name] if png else []
    rows = [[p, "measured", T[p], S[p], (runs[p]["cpu"] or {}).get("average"), "", ""]
            for p in threads]
    for key in ("work_conserving", "calibrated"):
        for x in proj.get(key, []):
            rows.append([x["p"], f"PROJECTION {key}", x["time_to_1pct"],
                         proj[key][0]["time_to_1pct"] / x["time_to_1pct"],
                         x["busy_cpu_percent"], x["useful_cpu_percent"], x["bottleneck"]])
    rows += [[x["p"], f"measured learners={x['learners']}", x["time_to_1pct"],
              x["speedup_vs_p1"], x["cpu_percent"], "", ""] for x in x_rows]
    write_csv(od / f"{name}.csv", ["p", "kind", "time_to_1pct", "speedup_vs_p1",
                                   "cpu_percent", "useful_cpu_percent", "bottleneck"], rows)
    table = markdown_table(
        ["p", "method", "time to 1%", "speed-up vs 1-DCD", "time to 1%, CPU-normalised",
         "average CPU", "other load (cores)"],
        [[p, "1-DCD" if p == 1 else f"DEMI-DCD --learners {args.learners}" +
          (" (oversubscribed)" if p > cores else ""),
          fmt_s(T[p]), f"{S[p]:.2f}x" if math.isfinite(S[p]) else "n/a", fmt_s(Tn[p]),
          f"{(runs[p]['cpu'] or {}).get('average', math.nan):.0f}% of {100 * p}%",
          f"{load.spans.get(f'p{p}', {}).get('foreign_cores', math.nan)}"]
         for p in threads])
    res["table_markdown"] = table
    if x_rows:
        res["other_layouts"] = x_rows
        res["other_runs"] = {f"{lay}/p{p}": run for lay, by_p in extra.items()
                             for p, run in by_p.items()}
        res["other_layouts_markdown"] = markdown_table(
            ["p", "DEMI-DCD --learners", "time to 1%", "speed-up vs 1-DCD", "average CPU"],
            [[x["p"], x["learners"], fmt_s(x["time_to_1pct"]),
              f"{x['speedup_vs_p1']:.2f}x" if math.isfinite(x["speedup_vs_p1"]) else "n/a",
              f"{x['cpu_percent'] or math.nan:.0f}% of {100 * x['p']}%"] for x in x_rows])
    if "validation" in proj:
        vt = markdown_table(["p", "measured time to 1%", "measured, CPU-normalised",
                             "PROJECTION (same work)", "PROJECTION (fitted s, u)",
                             "error of the first"],
                            [[p, fmt_s(v["measured"]), fmt_s(v["measured_cpu_normalised"]),
                              fmt_s(v["predicted_work_conserving"]),
                              fmt_s(v["predicted_calibrated"]),
                              f"{100 * v['relative_error_work_conserving']:+.0f}%"
                              if v["relative_error_work_conserving"] is not None else "n/a"]
                             for p, v in proj["validation"].items()])
        pt = markdown_table(
            ["p", "PROJECTED time to 1% (same work)", "bottleneck", "speed-up",
             "PROJECTED (fitted s, u)", "busy CPU", "useful CPU"],
            [[x["p"], fmt_s(x["time_to_1pct"]), x["bottleneck"],
              f"{proj['work_conserving'][0]['time_to_1pct'] / x['time_to_1pct']:.2f}x",
              fmt_s(proj["calibrated"][x["p"] - 1]["time_to_1pct"]) if "calibrated" in proj
              else "n/a", f"{x['busy_cpu_percent']:.0f}%", f"{x['useful_cpu_percent']:.0f}%"]
             for x in proj["work_conserving"] if x["p"] in (1, 2, 4, 8, 16, 32)])
        res["validation_markdown"], res["projection_markdown"] = vt, pt
    write_json(od / f"{name}.json", res)
    say(table, q)
    if x_rows:
        say("other layouts (same f*, same 1-DCD reference):\n" + res["other_layouts_markdown"], q)
    if "validation_markdown" in res:
        say("validation of the PROJECTION against the measured points:\n" +
            res["validation_markdown"], q)
        say("PROJECTION (model from measured component costs, not a measurement):\n" +
            res["projection_markdown"], q)
        c = proj["inputs"]
        say(f"components: t_inf {1e6 * c['t_inf_seconds_per_example']:.1f} us/example, t_upd "
            f"{1e9 * c['t_upd_seconds_per_update']:.0f} ns/update, t_tr "
            f"{1e6 * c['t_tr_seconds_per_structure']:.2f} us/structure, q "
            f"{c['pushed_per_inference_q']:.3f} pushed/inference, publish "
            f"{100 * c['publish_overhead']:.1f}%, s = {c['inference_ratio_s']}, "
            f"u = {c['update_ratio_u']}; DEMI learner t_upd "
            f"{1e9 * c['t_upd_demi_seconds_per_update']:.0f} ns", q)
    if over:
        say(f"WARNING: threads {over} > {cores} cores: oversubscribed (see the plot)", q)
    say(f"load: {load.summary_line()}", q)
    say(f"wrote {od / (name + '.json')}, {od / (name + '.csv')}" +
        (f", {png}" if png else ""), q)
    return 0


if __name__ == "__main__":
    sys.exit(main())
