"""Expensive inference (CBC) at p = 2, measured, and a PROJECTION to p = 2 … 32.

    python benchmarks/convergence.py --task entity-relation --ilp-solver cbc --threads 2 \\
        --budget 300 --methods dcd,demi-dcd,ms-dcd --fstar F --work-dir W --name N
    python benchmarks/expensive.py --conv results/N.json --work-dir W [--sample 400]
        [--gap G] [--pmax 32] [--out-dir benchmarks/results] [--name expensive_conll04_cbc]

Measured here: per-sentence loss-augmented CBC solve times on one core (a random sample of the
training split, at the 1-DCD run's final weights: the w the solver sees mid-training).
Read from the convergence run (one run, p = 2, same budget per method): each method's time to
the gap G (the smallest relative primal gap every method reached), its inference rate, and
MS-DCD's time split per iteration (inference up to the barrier b, the master's DCD passes m).

PROJECTION (a model, not a measurement), for the same work to the gap G:

* 1-DCD does not change with p: T_1.
* DEMI-DCD is inference-bound with CBC. In its p = 2 run one worker made r_w inferences/s and
  the learner σ_2 r_w (σ_2: the learner's own inferences over the worker's), R_2 in all. Updates
  cost the learner at most u = (1 − σ_2)/R_2 seconds per inference, so at p it infers a share
  σ_p = (1 − u (p − 1) r_w) / (1 + u r_w) of its time (0 when it must only update) and
  T_D(p) = T_D(2) · R_2 / R_p with R_p = r_w (p − 1 + σ_p), capped at 1/u. It assumes
  DEMI-DCD needs the same inferences at every p (no extra staleness: the paper's premise).
* MS-DCD keeps its iterations N = T_MS(2) / (b_2 + m): each waits for the slowest of p shards
  (b_p = E[max_k Σ_{i∈shard k} t_i], from the measured solve times by resampling, scaled so that
  the simulated b_2 equals the measured one), then for the master's passes m while the others
  idle: T_MS(p) = N (b_p + m).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    fmt_s,
    machine_caption,
    machine_info,
    markdown_table,
    pyplot,
    save_figure,
    say,
    time_to_gap,
    write_json,
)
from convergence import GAPS  # noqa: E402


def solve_times(model: Path, train: Path, sample: int, seed: int) -> np.ndarray:
    """Seconds of one loss-augmented CBC solve per sentence, for a random sample."""
    from demidcd.api import EntityRelationExtractor
    from demidcd.io.conll04 import read_conll04

    est = EntityRelationExtractor.load(model)
    est.set_params(solver="cbc")
    task = est.training_task(read_conll04(str(train)))
    rng = np.random.default_rng(seed)
    ex = rng.choice(task.n_examples, size=min(sample, task.n_examples), replace=False)
    task.loss_augmented(est.coef_, ex[:3].astype(np.int64))  # start-up costs out of the sample
    out = np.empty(len(ex))
    for k, i in enumerate(ex):
        t = time.perf_counter()
        task.loss_augmented(est.coef_, np.array([i], np.int64))
        out[k] = time.perf_counter() - t
    return out


def barrier_time(times: np.ndarray, n: int, p: int, rng: np.random.Generator,
                 reps: int = 200) -> float:
    """E[max over p shards of the shard's summed solve times], n sentences dealt at random."""
    per = -(-n // p)
    sims = [rng.choice(times, size=(p, per)).sum(1).max() for _ in range(reps)]
    return float(np.mean(sims))


def project(conv: dict, times: np.ndarray, gap: float, pmax: int, seed: int) -> dict:
    runs, fstar = conv["runs"], conv["analysis"]["fstar"]
    pts = {a: [(r["seconds"], r["primal"]) for r in run["curve"] if r["primal"] is not None]
           for a, run in runs.items()}
    t_gap = {a: time_to_gap(pts[a], fstar, gap) for a in pts}
    rate = {a: runs[a]["last_record"]["inferences"] / runs[a]["stopped"]["seconds"]
            for a in runs}
    secs = runs["demi-dcd"]["stopped"]["seconds"]
    own = runs["demi-dcd"]["learner"]["learner_inferences"]
    r2 = rate["demi-dcd"]
    rw = r2 - own / secs  # one worker's inferences/s (p = 2 has one worker)
    sigma2 = own / secs / rw  # the learner's inference share, relative to a worker
    u = (1.0 - sigma2) / r2  # learner seconds of update work per inference (an upper bound)
    ms = runs["ms-dcd"]["ms_split"]
    b2, m = ms["inference_per_iteration"], ms["master_per_iteration"]
    iters = t_gap["ms-dcd"] / (b2 + m)
    n = conv.get("data", {}).get("n_train") or 4412
    rng = np.random.default_rng(seed)
    scale = b2 / barrier_time(times, n, 2, rng)
    rows = []
    for p in range(2, pmax + 1):
        sigma = max(0.0, (1.0 - u * (p - 1) * rw) / (1.0 + u * rw))
        rp = min(rw * (p - 1 + sigma), 1.0 / u)
        td = t_gap["demi-dcd"] * r2 / rp
        bp = scale * barrier_time(times, n, p, rng)
        tm = iters * (bp + m)
        rows.append({"p": p, "dcd": t_gap["dcd"], "demi-dcd": td, "ms-dcd": tm,
                     "learner_inference_share": sigma, "inferences_per_s": rp,
                     "ms_barrier_s": bp, "demi_vs_ms": tm / td, "demi_vs_1dcd": t_gap["dcd"] / td})
    return {"gap": gap, "fstar": fstar, "measured_time_to_gap": t_gap,
            "inferences_per_s": rate, "worker_inferences_per_s": rw, "sigma_2": sigma2,
            "update_s_per_inference": u,
            "ms_barrier_2": b2, "ms_master": m, "ms_iterations": iters,
            "barrier_scale": scale, "rows": rows}


def plot(res: dict, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    rows = res["projection"]["rows"]
    ps = [r["p"] for r in rows]
    for a, lab in (("dcd", "1-DCD"), ("demi-dcd", "DEMI-DCD"), ("ms-dcd", "MS-DCD")):
        ax.plot(ps, [r[a] for r in rows], marker=".", label=lab + " (PROJECTION)")
    meas = res["projection"]["measured_time_to_gap"]
    for a, mk in (("dcd", "o"), ("demi-dcd", "s"), ("ms-dcd", "^")):
        ax.plot([1 if a == "dcd" else 2], [meas[a]], mk, color="k")
    ax.set_xlabel("processes p")
    ax.set_ylabel(f"seconds to {100 * res['projection']['gap']:g}% primal gap")
    ax.set_yscale("log")
    ax.set_title("CoNLL04, CBC: measured at p ≤ 2 (black), PROJECTION beyond", fontsize=10)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, machine_caption(res["machine"]), fontsize=6)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conv", required=True, help="convergence.py results (CBC, p = 2)")
    ap.add_argument("--work-dir", required=True, help="that run's --work-dir")
    ap.add_argument("--sample", type=int, default=400)
    ap.add_argument("--gap", type=float, default=None)
    ap.add_argument("--pmax", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--name", default="expensive_conll04_cbc")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    conv = json.loads(Path(args.conv).read_text())
    work = Path(args.work_dir)
    times = solve_times(work / "dcd" / "model.npz", work / "split" / "train.corp", args.sample,
                        args.seed)
    fstar = conv["analysis"]["fstar"]
    if args.gap is None:  # the smallest gap every method reached
        reached = [g for g in GAPS if all(
            math.isfinite(time_to_gap([(r["seconds"], r["primal"]) for r in run["curve"]
                                       if r["primal"] is not None], fstar, g))
            for run in conv["runs"].values())]
        args.gap = min(reached) if reached else max(GAPS)
    res = {"benchmark": "expensive inference: CBC, measured p <= 2, PROJECTION to p = "
                        f"2..{args.pmax}", "machine": machine_info(),
           "command": "python benchmarks/expensive.py " + " ".join(argv or sys.argv[1:]),
           "convergence_results": str(args.conv), "convergence_command": conv.get("command"),
           "solve_times": {"sample": len(times), "mean_ms": 1e3 * float(times.mean()),
                           "p50_ms": 1e3 * float(np.median(times)),
                           "p99_ms": 1e3 * float(np.quantile(times, 0.99)),
                           "max_ms": 1e3 * float(times.max())},
           "projection": project(conv, times, args.gap, args.pmax, args.seed)}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{args.name}.json", res)
    plot(res, out / f"{args.name}.png")
    pr = res["projection"]
    table = markdown_table(
        ["p", "1-DCD", "DEMI-DCD", "MS-DCD", "DEMI vs MS-DCD", "DEMI vs 1-DCD",
         "learner inference share"],
        [[r["p"], fmt_s(r["dcd"]), fmt_s(r["demi-dcd"]), fmt_s(r["ms-dcd"]),
          f"{r['demi_vs_ms']:.2f}×", f"{r['demi_vs_1dcd']:.2f}×",
          f"{r['learner_inference_share']:.2f}"]
         for r in pr["rows"] if r["p"] in (2, 4, 8, 16, 32)])
    say(f"CBC solve: mean {res['solve_times']['mean_ms']:.1f} ms, p99 "
        f"{res['solve_times']['p99_ms']:.1f} ms ({len(times)} sentences); gap {args.gap:g}: "
        f"measured {json.dumps({k: round(v, 1) for k, v in pr['measured_time_to_gap'].items()})}"
        f"\nPROJECTION (time to {100 * args.gap:g}% gap):\n{table}", args.quiet)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
