"""Past one machine (issue 54): 1-, 2- and 3-node local Ray clusters against one machine.

    python benchmarks/cluster.py [--data ewt,synthetic] [--nodes 1,2,3] [--limit 150]
                                 [--tokens 4000000] [--cpus-per-node 1[,2]] [--skip-one]
                                 [--out-dir DIR]

Each cluster is a local ``ray.cluster_utils.Cluster`` of N nodes with ``--cpus-per-node`` CPUs
each (all on this machine; a list runs each), trained with ``--backend ray --ray-address``
(a node of c CPUs trains with c learner threads); one machine is the shared-memory engine at
``--threads 2`` (``--skip-one``: not run). Per cluster run also the updates per second per
node and each learner thread's CPU seconds (from the log). Per run: time to 1% relative
gap (the gap the log reports: the cluster's is exact only at the end, see
demidcd/estimators/cluster.py), the final primal, dual and gap, each node's peak memory
(PSS) from ``node K peak memory``, merge traffic (bytes of Δw pulled and forwarded per
second) and the test accuracy (EWT only).

The table ends with a **projection** to 8 nodes x 16 cores on 10 Gb/s — a model, not a
measurement: the time per epoch shrinks with the cores (the 1-node rate times 8·16 / cores,
an ideal speed-up), the epochs to 1% gap grow with σ′ as measured from 1 to 3 nodes
(extrapolated linearly in the node count) and the driver's merge traffic (each change pulled
once and forwarded K − 1 times) grows as K² times the measured bytes per node per node, 1x to
16x for 16 cores per node (larger commits, not more of them); its share of 10 Gb/s is given. Writes
``cluster.json`` (and the logs) to ``--out-dir`` and prints a markdown table. On a loaded
machine every time is under load: say so when quoting it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    EWT,
    RESULTS,
    machine_info,
    machine_line,
    markdown_table,
    run_cli,
    say,
    write_json,
)

CLUSTER = """
import signal, sys, time
from ray.cluster_utils import Cluster
n, cpus, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False})
for _ in range(n - 1):
    c.add_node(num_cpus=cpus)
c.wait_for_nodes()
open(out, "w").write(c.address)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    time.sleep(0.2)
c.shutdown()
"""


def start_cluster(n: int, cpus: int, tmp: Path) -> tuple[subprocess.Popen, str]:
    addr = tmp / f"addr-{n}x{cpus}"
    addr.unlink(missing_ok=True)  # (a file of an earlier cluster of n nodes: its address)
    p = subprocess.Popen([sys.executable, "-c", CLUSTER, str(n), str(cpus), str(addr)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        if addr.exists() and addr.read_text():
            return p, addr.read_text()
        time.sleep(0.5)
    p.terminate()
    raise RuntimeError(f"a local cluster of {n} nodes did not start")


def stop_cluster(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()


ITER = re.compile(r"iter\s+\d+\s+([\d.]+)s.*primal ([\d.e+-]+) dual ([\d.e+-]+) gap ([\d.e+-]+)")


def parse(text: str) -> dict:
    pts = [(float(a), float(p), float(d), float(g)) for a, p, d, g in ITER.findall(text)]
    t1 = next((t for t, _, _, g in pts if g <= 0.01), None)
    peaks = [float(x.replace(",", "")) for x in
             re.findall(r"node \d+ peak memory: ([\d,]+) MiB", text)]
    one = re.search(r"^peak memory: ([\d,]+) MiB", text, re.M)
    traffic = re.search(r"merge traffic: ([\d.]+) MiB/s", text)
    ups = re.findall(r"iter\s+\d+\s+([\d.]+)s\s+updates\s+([\d,]+)", text)
    threads = [[float(x) for x in t.split(", ")] for t in
               re.findall(r"learner threads?, CPU ([\d., ]+) s", text)]
    return {"curve": pts, "time_to_1pct_gap": t1, "final": pts[-1] if pts else None,
            "node_peaks_mib": peaks,
            "peak_mib": float(one.group(1).replace(",", "")) if one else None,
            "merge_mib_per_s": float(traffic.group(1)) if traffic else None,
            "lost": re.findall(r"node \d+ .*lost.*", text),
            "updates_per_s": (float(ups[-1][1].replace(",", "")) / float(ups[-1][0])
                              if ups and float(ups[-1][0]) > 0 else None),
            "thread_cpu_s": threads}


def accuracy(model: Path, log: Path) -> float | None:
    text, _ = run_cli(["evaluate", "--model", model, "--data", EWT / "en_ewt-ud-test.conllu",
                       "--format", "conllu", "--column", "xpos"], log)
    m = re.search(r"accuracy: ([\d.]+)%", text)
    return float(m.group(1)) if m else None


def synthetic(path: Path, tokens: int) -> None:
    from demidcd.synthetic import generator_model, sample

    m = generator_model(n_tags=45, vocab_size=200_000, mean_length=18, max_length=80, seed=7)
    c = sample(m, max(1, tokens // 18), seed=tokens)
    with open(path, "w") as f:
        for toks, tags in zip(c.tokens, c.tags, strict=True):
            f.write("".join(f"{w}\t{t}\n" for w, t in zip(toks, tags, strict=True)) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="ewt,synthetic")
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--limit", type=float, default=150.0)
    ap.add_argument("--tokens", type=int, default=4_000_000)
    ap.add_argument("--cpus-per-node", default="1")
    ap.add_argument("--skip-one", action="store_true")
    ap.add_argument("--out-dir", default=str(RESULTS))
    a = ap.parse_args(argv)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    say(machine_line(info))
    tmp = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    results: dict = {"machine": info, "limit": a.limit,
                     "cpus_per_node": [int(x) for x in a.cpus_per_node.split(",")],
                     "runs": {}}
    for data in a.data.split(","):
        if data == "ewt":
            train = ["--train", EWT / "en_ewt-ud-train.conllu", "--format", "conllu",
                     "--column", "xpos"]
        else:
            path = tmp / "synthetic.txt"
            if not path.exists():
                synthetic(path, a.tokens)
            train = ["--train", path, "--format", "columns"]
        common = [*train, "--time-limit", a.limit, "--eval-every", 5]
        runs = {}
        if not a.skip_one:
            log = out / f"cluster-{data}-one.log"
            text, wall = run_cli(["train", *common, "--threads", 2, "--model",
                                  tmp / "one.npz"], log)
            runs["one machine, p=2"] = {**parse(text), "wall": wall}
            if data == "ewt":
                runs["one machine, p=2"]["accuracy"] = accuracy(tmp / "one.npz",
                                                                tmp / "ev.log")
        for cpus in (int(x) for x in a.cpus_per_node.split(",")):
            for n in (int(x) for x in a.nodes.split(",")):
                p, addr = start_cluster(n, cpus, tmp)
                try:
                    log = out / f"cluster-{data}-{n}x{cpus}.log"
                    text, wall = run_cli(["train", *common, "--backend", "ray",
                                          "--ray-address", addr, "--model",
                                          tmp / f"r{n}.npz"], log)
                finally:
                    stop_cluster(p)
                r = {**parse(text), "wall": wall, "nodes": n, "cpus": cpus}
                if data == "ewt":
                    r["accuracy"] = accuracy(tmp / f"r{n}.npz", tmp / "ev.log")
                runs[f"{n} node{'s' if n > 1 else ''} x {cpus} CPU"] = r
        results["runs"][data] = runs
        rows = []
        for name, r in runs.items():
            f = r["final"] or (None, None, None, None)
            rows.append([name, r["time_to_1pct_gap"] if r["time_to_1pct_gap"] is not None
                         else f"> {a.limit:g}", f"{f[3]:.4f}" if f[3] is not None else "-",
                         f"{f[1]:.6g}" if f[1] is not None else "-",
                         ", ".join(f"{x:.0f}" for x in r["node_peaks_mib"]) or
                         (f"{r['peak_mib']:.0f}" if r["peak_mib"] else "-"),
                         r["merge_mib_per_s"] if r["merge_mib_per_s"] is not None else "-",
                         f"{r['updates_per_s'] / max(r.get('nodes', 1), 1):,.0f}"
                         if r.get("updates_per_s") else "-",
                         "; ".join(", ".join(f"{x:.0f}" for x in t)
                                   for t in r.get("thread_cpu_s", [])) or "-",
                         r.get("accuracy", "-")])
        say(f"\n### {data} ({a.limit:g} s per run; times under whatever load the machine had)")
        say(markdown_table(["run", "s to 1% gap", "final gap", "final primal",
                            "peak MiB (per node)", "merge MiB/s", "updates/s per node",
                            "thread CPU s (per node)", "test acc"], rows))
        results["projection"] = projection(runs, a.limit)
        say("\nPROJECTION (a model, not a measurement): " + results["projection"]["text"])
    write_json(out / "cluster.json", results)
    return 0


def projection(runs: dict, limit: float) -> dict:
    """8 nodes x 16 cores on 10 Gb/s from the 1..3-node runs (module docstring)."""
    cl = {r["nodes"]: r for r in runs.values() if "nodes" in r and r.get("cpus") == 1}
    if 1 not in cl:
        return {"text": "needs a 1-node run of 1 CPU"}
    t1 = cl[1]["time_to_1pct_gap"] or limit
    ks = sorted(cl)
    infl = [(cl[k]["time_to_1pct_gap"] or limit) * k / t1 for k in ks]  # work per node-second
    slope = (infl[-1] - infl[0]) / max(1, ks[-1] - ks[0]) if len(ks) > 1 else 0.0
    infl8 = max(1.0, infl[0] + slope * (8 - ks[0]))
    t8 = t1 * infl8 / (8 * 16)
    # the driver moves each change K times (one pull, K - 1 forwards): bytes/s per node per
    # node of the cluster, as measured; 16 cores make a commit larger, not more frequent (a
    # commit every 50 ms): between 1x (the same changed entries) and 16x (16x the entries)
    per = [(cl[k]["merge_mib_per_s"] or 0.0) / (k * k) for k in ks]
    low, high = max(per) * 8 * 8, max(per) * 8 * 8 * 16
    share = (low * 8 * 2**20 / 10e9, high * 8 * 2**20 / 10e9)
    censored = any(cl[k]["time_to_1pct_gap"] is None for k in ks)
    text = (f"1% gap in about {t8:.1f} s on 8 x 16 cores (1 node x 1 CPU: {t1:.0f} s; work "
            f"inflation at 8 nodes {infl8:.2f}x, extrapolated linearly from {ks} nodes"
            + ("; some runs did not reach 1% within the limit: the limit stands in, so "
               "this is a bound at best" if censored else "")
            + f"); merge traffic through the driver {low:.0f}-{high:.0f} MiB/s, "
            f"{share[0]:.0%}-{share[1]:.0%} of a 10 Gb/s link")
    return {"seconds_to_1pct": t8, "inflation_8": infl8, "traffic_mib_s": [low, high],
            "link_share": list(share), "censored": censored, "text": text}


if __name__ == "__main__":
    sys.exit(main())
