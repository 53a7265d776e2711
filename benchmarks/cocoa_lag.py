"""What CoCoA+'s σ′ and the merge lag cost per update, without Ray (issue 54).

    python benchmarks/cocoa_lag.py [--parts 2] [--sigma 2] [--slice 0.05] [--updates 4e6]
                                   [--data-dir ../shared/data] [--out FILE.json]

EWT XPOS train cut into ``--parts`` contiguous parts, each a
:class:`~demidcd.solvers.cocoa.LocalPart` (the node's local solver) with one σ′ =
``--sigma``, in one process: the parts take turns, each works ``--slice`` seconds and
commits its change Δw_k, which is added to w and reaches the other parts after the round
(so each part's view lacks one slice of the others' work: the merge lag, with no transport
and no Ray process). Every 0.5 M updates (all parts together; a quarter of ``--updates`` if
that is less) it prints the dual
Σ_k (Σ Δ·α − Σ A_i²/(4C)) − ½‖w‖² at the merged w, which is exact there (w = Σ α φ after
every round). One part (``--parts 1 --sigma 1``) is DCD-SSVM itself; the updates another run
needs to reach its dual are the per-update cost of σ′ and lag. The times are this process's
(the parts run in turn, not in parallel): compare updates, not seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, say, write_json  # noqa: E402

from demidcd.io.tagged import read_tagged  # noqa: E402
from demidcd.solvers.cocoa import LocalPart  # noqa: E402
from demidcd.solvers.common import SolverConfig  # noqa: E402
from demidcd.synthetic import generator_model, sample  # noqa: E402
from demidcd.tasks.chain.features import SequenceFeaturizer  # noqa: E402
from demidcd.tasks.chain.task import SequenceTask  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--sigma", type=int, default=2)
    ap.add_argument("--slice", type=float, default=0.05, help="seconds a part works a turn")
    ap.add_argument("--updates", type=float, default=4e6, help="stop after this many")
    ap.add_argument("--data-dir", default=str(DATA))
    ap.add_argument("--synthetic", type=int, default=0,
                    help="this many sentences of the synthetic corpus instead of EWT (tests)")
    ap.add_argument("--out", default=None, help="write the curve here (JSON)")
    a = ap.parse_args(argv)
    if a.synthetic:
        corpus = sample(generator_model(n_tags=6, vocab_size=300, seed=1), a.synthetic, seed=2)
    else:
        corpus = read_tagged(Path(a.data_dir) / "ud_english_ewt" / "en_ewt-ud-train.conllu",
                             "conllu", "xpos")
    toks, tags = corpus.tokens, corpus.tags
    feats = SequenceFeaturizer(min_count=2).fit(toks)
    labels = sorted({t for s in tags for t in s})
    index = {t: j for j, t in enumerate(labels)}
    cfg = SolverConfig(C=0.1, tol=0.01)
    cuts = np.linspace(0, len(toks), a.parts + 1).astype(int)
    parts = []
    for k in range(a.parts):
        lo, hi = cuts[k], cuts[k + 1]
        y = np.array([index[t] for s in tags[lo:hi] for t in s], np.int32)
        task = SequenceTask(feats.transform(toks[lo:hi]), y, len(labels), feats.n_features)
        parts.append(LocalPart(task, cfg, a.sigma, [0, k]))
    w = np.zeros(parts[0].task.dim)
    for p in parts:
        p.reset(w)

    def dual() -> float:
        terms = [p.dual_terms() for p in parts]
        return sum(lin - sq / (4 * cfg.C) for lin, sq in terms) - 0.5 * float(w @ w)

    step = min(5e5, a.updates / 4)
    curve, t0, report = [], time.perf_counter(), step
    while True:
        merged = []
        for k, p in enumerate(parts):
            p.work(a.slice)
            idx, val = p.commit()
            np.add.at(w, idx, val)
            merged.append((k, idx, val))
        for k, idx, val in merged:  # after the round: one slice late
            for j, q in enumerate(parts):
                if j != k:
                    q.apply(idx, val)
        done = sum(p.updates for p in parts)
        if done >= report:
            curve.append({"updates": int(done), "dual": dual(),
                          "seconds": round(time.perf_counter() - t0, 2)})
            say(f"updates {done / 1e6:.2f} M  dual {curve[-1]['dual']:.2f}")
            report += step
        if done >= a.updates:
            break
    if a.out:
        write_json(a.out, {"parts": a.parts, "sigma": a.sigma, "slice": a.slice,
                           "curve": curve})
    return 0


if __name__ == "__main__":
    sys.exit(main())
