"""Shared memory against Ray at the same p: time to 1% relative primal difference, structures
and bytes per second through the transport, publish latency; then a projection (labelled as
such) of a 4-node × 16-core Ray cluster from those measured costs.

    python benchmarks/transport.py --task sequence --budget 60             # EWT XPOS
    python benchmarks/transport.py --task entity-relation --ilp-solver cbc # CoNLL04

Each backend trains DEMI-DCD through the CLI (``--backend shm`` / ``--backend ray``, a local Ray
instance), with snapshots every second; the snapshots' primal objectives give the time to 1%
(f* = the lowest primal of either run, or ``--fstar``). Transport figures come from the
learner's last log lines (``learner process: …``, ``transport: … MB of w̄ out, … MB of records in``).
Writes ``results/transport_<task>.json`` and prints a Markdown table. Needs the ``[ray]`` extra.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    RESULTS,
    add_data_arguments,
    fmt_s,
    fstar_of,
    machine_info,
    machine_line,
    markdown_table,
    parse_cpu_line,
    parse_learner_line,
    parse_stopped,
    read_snapshot_csv,
    run_cli,
    say,
    thin_snapshots,
    time_to_gap,
    write_json,
)
from convergence import data_setup  # noqa: E402

NODES, CORES = 4, 16  # the projected cluster
NETWORK = 1.25e9  # bytes/s of one 10 Gb/s link (an assumption of the projection)


def parse_transport(text: str) -> dict[str, float] | None:
    m = re.findall(r"transport: ([0-9,.]+) MB of w̄ out, ([0-9,.]+) MB of records in", text)
    if not m:
        return None
    out, inn = (float(x.replace(",", "")) * 1e6 for x in m[-1])
    return {"bytes_out": out, "bytes_in": inn}


def run(backend: str, args, data: dict, work: Path) -> dict:
    d = work / backend
    d.mkdir(parents=True, exist_ok=True)
    snap = d / "snapshots"
    cmd = ["train", "--algorithm", "demi-dcd", "--threads", str(args.threads), "--backend",
           backend, "--train", data["train"], *data["opts"], "--time-limit", str(args.budget),
           "--max-epochs", str(10**9), "--snapshot-every", "1", "--snapshot-dir", str(snap),
           "--model", str(d / "model.npz"), "--seed", str(args.seed)]
    if args.task == "entity-relation" and args.ilp_solver:
        cmd += ["--ilp-solver", args.ilp_solver]
    say(f"{backend}: training {args.budget:g}s on {args.threads} processes")
    text, wall = run_cli(cmd, d / "train.log", timeout=args.budget * 3 + 600)
    thin_snapshots(snap, 1.0, 0.05)
    ev = ["evaluate-snapshots", str(snap), "--train", data["train"], *data["opts"], "--out",
          str(d / "snapshots.csv"), "--quiet"]
    if args.task == "entity-relation":
        ev += ["--ilp-solver", "exact"]
    run_cli(ev, d / "evaluate.log", timeout=3600)
    rows = read_snapshot_csv(d / "snapshots.csv")
    stopped = parse_stopped(text) or {}
    learner = parse_learner_line(text) or {}
    traffic = parse_transport(text) or {}
    secs = stopped.get("seconds") or args.budget
    res = {"backend": backend, "command": "demidcd " + " ".join(cmd).replace(str(work), "WORK"),
           "wall_seconds_incl_startup": wall, "stopped": stopped, "learner": learner,
           "cpu": parse_cpu_line(text), "traffic": traffic,
           "curve": [(r["seconds"], r["primal"]) for r in rows]}
    if learner:
        worker_inf = learner["inferences"] - learner["learner_inferences"]
        res["structures_per_s"] = learner["pushed"] / secs
        res["worker_inferences_per_s"] = worker_inf / secs
        res["publish_latency_s"] = (learner["publish_percent"] / 100 * secs
                                    / max(learner["publishes"], 1))
        res["bytes_in_per_s"] = traffic.get("bytes_in", 0.0) / secs
        res["bytes_out_per_s"] = traffic.get("bytes_out", 0.0) / secs
        res["bytes_per_structure"] = traffic.get("bytes_in", 0.0) / max(learner["pushed"], 1)
        res["bytes_per_publish"] = traffic.get("bytes_out", 0.0) / max(learner["publishes"], 1)
    return res


def projection(shm: dict, ray: dict, p: int) -> dict:
    """A PROJECTION, not a measurement: a 4-node × 16-core cluster (k = 63 actors + the learner)
    from this machine's measured costs.

    * inference supply: k × (structures and inferences per second of one shm worker);
    * the learner's publish cost grows with one actor call per actor: latency × k / (p − 1)
      (pessimistic: the object-store put is paid once, not per actor);
    * network: records (bytes per structure × supply) and w̄ (bytes per publish per actor ×
      k × publishes per second) against one 10 Gb/s link at the driver (``NETWORK``);
    * time for the work the shm run did up to its time to 1% (or its whole budget when it did
      not get there): T = max(inferences / (k × r_worker), updates / u_learner), with r_worker
      the measured inferences/s of one worker and u_learner the learner's measured update rate
      once its own inference time (its inferences / r_worker) and publish time are taken out.
      The same work on more actors ignores staleness (more stale structures may need more work).
    Ray pays off while inference is what limits training (an ILP per sentence); with cheap
    inference (Viterbi) the learner is already the bottleneck at p = 2."""
    k = NODES * CORES - 1
    secs = max(shm.get("stopped", {}).get("seconds") or 1.0, 1e-9)
    per_worker = shm.get("structures_per_s", 0.0) / max(p - 1, 1)
    supply = k * per_worker
    per_actor_pub = ray.get("bytes_per_publish", 0.0) / max(p - 1, 1)
    pubs_per_s = ray["learner"].get("publishes", 0) / max(ray["stopped"].get("seconds", 1), 1)
    rec_bytes = supply * ray.get("bytes_per_structure", 0.0)
    wbar_bytes = per_actor_pub * k * pubs_per_s
    out = {"label": "PROJECTION from measured costs, not a measurement",
           "nodes": NODES, "cores_per_node": CORES, "actors": k,
           "structures_per_s_supply": supply,
           "publish_latency_s": ray.get("publish_latency_s", 0.0) * k / max(p - 1, 1),
           "record_bytes_per_s": rec_bytes, "wbar_bytes_per_s": wbar_bytes,
           "network_share": (rec_bytes + wbar_bytes) / NETWORK,
           "learner_structures_per_s_at_p": shm.get("structures_per_s", 0.0)}
    lr = shm.get("learner") or {}
    r_worker = shm.get("worker_inferences_per_s", 0.0) / max(p - 1, 1)
    if not lr or r_worker <= 0:
        return out
    t1 = shm.get("time_to_1pct", math.inf)
    t1 = float(t1) if not isinstance(t1, str) else math.inf
    frac = min(t1, secs) / secs  # share of the run's work done by its time to 1%
    learner_busy = secs * (1 - lr.get("publish_percent", 0.0) / 100) - lr.get(
        "learner_inferences", 0.0) / r_worker
    u_learner = lr["updates"] / max(learner_busy, 1e-3)
    t_inf = frac * lr["inferences"] / (k * r_worker)
    t_upd = frac * lr["updates"] / u_learner
    out.update({"work_until_s": min(t1, secs), "work_inferences": frac * lr["inferences"],
                "work_updates": frac * lr["updates"], "worker_inferences_per_s": r_worker,
                "learner_updates_per_s_alone": u_learner,
                "inference_seconds": t_inf, "learner_seconds": t_upd,
                "projected_seconds": max(t_inf, t_upd),
                "bottleneck": "inference" if t_inf > t_upd else "learner",
                "speedup_over_measured_p": min(t1, secs) / max(t_inf, t_upd)})
    return out


def report(res: dict) -> None:
    """Print the Markdown table and the projection of a result dict."""
    runs, proj = res["runs"], res["projection"]
    rows = [(b, fmt_s(r["time_to_1pct"] if not isinstance(r["time_to_1pct"], str)
                      else math.inf),
             f"{r.get('structures_per_s', 0):,.0f}",
             f"{r.get('worker_inferences_per_s', 0):,.0f}",
             f"{r.get('bytes_in_per_s', 0) / 1e6:,.2f}",
             f"{r.get('bytes_out_per_s', 0) / 1e6:,.2f}",
             f"{1000 * r.get('publish_latency_s', 0):.2f}") for b, r in runs.items()]
    print(markdown_table(["backend", "time to 1%", "structures/s", "worker inferences/s",
                          "records MB/s", "w̄ MB/s", "publish ms"], rows))
    print(f"\n{proj['label']}: {proj['actors']} actors would supply "
          f"{proj['structures_per_s_supply']:,.0f} structures/s (the learner absorbed "
          f"{proj['learner_structures_per_s_at_p']:,.0f}/s here), publish "
          f"{1000 * proj['publish_latency_s']:.1f} ms, "
          f"{proj['network_share']:.1%} of a 10 Gb/s link")
    if "projected_seconds" in proj:
        print(f"{proj['label']}: the work shm did in {proj['work_until_s']:.1f}s "
              f"({proj['work_inferences']:,.0f} inferences, {proj['work_updates']:,.0f} updates) "
              f"takes {proj['inference_seconds']:.2f}s of inference on {proj['actors']} actors "
              f"and {proj['learner_seconds']:.2f}s of learner updates: "
              f"{proj['projected_seconds']:.2f}s, {proj['bottleneck']}-bound, "
              f"{proj['speedup_over_measured_p']:.1f}x the measured p = {res['threads']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("sequence", "entity-relation"), default="sequence")
    ap.add_argument("--ilp-solver", choices=("exact", "cbc", "highs"), default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fstar", type=float, default=None)
    add_data_arguments(ap)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--reanalyse", metavar="JSON",
                    help="recompute the projection and table of an earlier results file")
    args = ap.parse_args(argv)
    if args.reanalyse:
        import json
        res = json.loads(Path(args.reanalyse).read_text())
        res["projection"] = projection(res["runs"]["shm"], res["runs"]["ray"], res["threads"])
        write_json(args.reanalyse, res)
        report(res)
        return 0
    try:
        import ray  # noqa: F401
    except ImportError:
        ap.error("needs Ray: pip install -e '.[ray]'")
    info = machine_info()
    say(f"machine: {machine_line(info)}")
    work = Path(tempfile.mkdtemp(prefix="demidcd-transport-"))

    class _Prog:  # data_setup reports progress through this
        def note(self, msg: str) -> None:
            say(msg)

    try:
        data = data_setup(args, work, _Prog())
        runs = {b: run(b, args, data, work) for b in ("shm", "ray")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fstar = fstar_of({b: r["curve"] for b, r in runs.items()},
                     reference=args.fstar)
    for r in runs.values():
        r["time_to_1pct"] = time_to_gap(r["curve"], fstar, 0.01)
    proj = projection(runs["shm"], runs["ray"], args.threads)
    res = {"benchmark": f"transport ({args.task})", "machine": info, "threads": args.threads,
           "budget_seconds": args.budget, "fstar": fstar, "runs": runs, "projection": proj,
           "command": "python benchmarks/transport.py " + " ".join(
               argv if argv is not None else sys.argv[1:])}
    tag = "ewt" if args.task == "sequence" else "conll04"
    out = write_json(Path(args.out_dir) / f"transport_{tag}.json", res)
    report(res)
    say(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
