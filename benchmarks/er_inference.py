"""Entity-relation inference time per solver on CoNLL04 (one core, random scores).

    python benchmarks/er_inference.py [--data ../shared/data/conll04/conll04.corp]
        [--solvers exact,cbc,highs] [--limit N] [--seed 0] [--out FILE.json]

Scores: w ~ N(0, 1) (fixed seed) over the features of a featurizer fitted on the whole corpus, so
U[a, e] and P[k, r] are sums of ~30–60 random weights (a harder, flatter problem than trained
weights). For each solver, every sentence is solved alone and timed (median, p95, total), and the
optimal objective values are compared with the ``exact`` solver's. The production path for
``exact`` (one numba call over all sentences: scoring + inference) is timed separately.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demidcd.io.conll04 import read_conll04  # noqa: E402
from demidcd.tasks.entity_relation.features import EntityRelationFeaturizer  # noqa: E402
from demidcd.tasks.entity_relation.inference import get_solver  # noqa: E402
from demidcd.tasks.entity_relation.task import (  # noqa: E402
    EntityRelationTask,
    sentence_scores,
)


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "nproc": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "platform": platform.platform()}
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        import pulp

        info["pulp"] = pulp.__version__
    except (ImportError, AttributeError):
        pass
    try:
        from importlib.metadata import version

        import highspy  # noqa: F401

        info["highspy"] = version("highspy")
    except ImportError:
        pass
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "conll04" /
                                          "conll04.corp"))
    ap.add_argument("--solvers", default="exact,cbc,highs")
    ap.add_argument("--limit", type=int, default=0, help="first N sentences (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "er_inference.json"))
    args = ap.parse_args()
    try:  # one core
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    except (AttributeError, OSError):
        pass
    sents = read_conll04(args.data)
    if args.limit:
        sents = sents[: args.limit]
    feat = EntityRelationFeaturizer().fit(sents)
    enc = feat.transform(sents)
    task = EntityRelationTask(enc, True, "exact")
    rng = np.random.default_rng(args.seed)
    w = rng.normal(size=task.dim)
    ex = np.arange(task.n_examples)
    nent = np.diff(enc.ent_ptr)
    print(f"{len(sents)} sentences, {int(nent.sum())} entities, max {int(nent.max())} per "
          f"sentence, dim {task.dim}", flush=True)
    # precompute scores per sentence
    maxn = int(nent.max())
    U = np.zeros((maxn, 4))
    P = np.zeros((max(maxn * (maxn - 1), 1), 6))
    probs = []
    for s in ex:
        n = sentence_scores(w, s, enc.ent_ptr, enc.pair_ptr, enc.ef_ptr, enc.ef_idx,
                            enc.pf_ptr, enc.pf_idx, enc.ent_gold, enc.pair_gold,
                            4 * enc.n_entity_features, 0.0, 0.0, U, P)
        probs.append((U[:n].copy(), P[: n * (n - 1)].copy()))
    results: dict = {"machine": machine(), "sentences": len(sents), "seed": args.seed,
                     "entities": int(nent.sum()), "max_entities": int(nent.max()),
                     "scores": "w ~ N(0,1) over all features", "solvers": {}}
    # production path: one numba call over all sentences (scoring + exact inference)
    task.infer(w, ex[:10], False)  # compile
    reps = []
    for _ in range(5):
        t0 = time.perf_counter()
        _, _, _, _, obj_batch = task.infer(w, ex, False)
        reps.append(time.perf_counter() - t0)
    results["exact_batch_pass_s"] = {"min": min(reps), "median": float(np.median(reps))}
    print(f"exact, whole pass in one call: {min(reps):.4f} s", flush=True)
    ref = None
    for name in args.solvers.split(","):
        solve = get_solver(name)
        solve(*probs[1])  # warm up
        times = np.zeros(len(probs))
        objs = np.zeros(len(probs))
        for q, (u, p) in enumerate(probs):
            t0 = time.perf_counter()
            objs[q] = solve(u, p).obj
            times[q] = time.perf_counter() - t0
        if ref is None:
            ref = objs
        by_n = {}
        for n in sorted(set(nent.tolist())):
            sel = nent == n
            by_n[str(n)] = {"count": int(sel.sum()), "median_s": float(np.median(times[sel])),
                            "max_s": float(times[sel].max())}
        r = {"median_s": float(np.median(times)), "p95_s": float(np.percentile(times, 95)),
             "max_s": float(times.max()), "total_s": float(times.sum()),
             "max_abs_objective_diff_vs_first": float(np.max(np.abs(objs - ref))),
             "by_entities": by_n}
        results["solvers"][name] = r
        print(f"{name}: median {r['median_s'] * 1e3:.3f} ms, p95 {r['p95_s'] * 1e3:.3f} ms, "
              f"max {r['max_s']:.3f} s, total {r['total_s']:.2f} s, "
              f"max |Δobj| {r['max_abs_objective_diff_vs_first']:.2e}", flush=True)
    assert np.allclose(obj_batch, ref, atol=1e-6)
    tot = {k: v["total_s"] for k, v in results["solvers"].items()}
    if "exact" in tot:
        results["speedup_vs_exact_batch"] = {k: v / results["exact_batch_pass_s"]["min"]
                                             for k, v in tot.items()}
        results["speedup_vs_exact_per_sentence"] = {k: v / tot["exact"] for k, v in tot.items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
