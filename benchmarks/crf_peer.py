"""``--algorithm crf`` against python-crfsuite's L-BFGS on the same observation features, the
same c1/c2 and the same iteration budget, one after the other in one run (so that the load of a
shared machine is about the same for both): training time, iterations, test accuracy and, with
``--dev``, the expected calibration error of both models' token marginals on it
(:func:`demidcd.metrics.expected_calibration_error`, 15 bins). The peer runs first (on the
features of a one-iteration demidcd fit); with ``--budget-share S`` demidcd's whole fit,
features included, gets S times the peer's training time.

    python benchmarks/crf_peer.py ../shared/data/ud_english_ewt/en_ewt-ud-train.conllu \\
        ../shared/data/ud_english_ewt/en_ewt-ud-test.conllu --column xpos --sentences 3000

Both keep the same weights: ``--weights seen`` (the default, demidcd's for ``crf``) a weight
per (feature, label) pair seen in training, CRFsuite's default; ``--weights all`` every
feature with every label (CRFsuite's ``feature.possible_states``). Every transition has a
weight in both (``feature.possible_transitions``); CRFsuite's chain has no START / END
transitions, so the two objectives differ by those weights and their L2 terms.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    import pycrfsuite

    from demidcd.api import SequenceTagger
    from demidcd.io.tagged import read_tagged
    from demidcd.metrics import expected_calibration_error

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--column", default="xpos")
    ap.add_argument("--sentences", type=int, default=3000, help="first N training sentences")
    ap.add_argument("--iterations", type=int, default=100,
                    help="L-BFGS iterations (--crf-method sdca: epochs) at most")
    ap.add_argument("--crf-method", default="lbfgs", choices=("lbfgs", "sdca"),
                    help="demidcd's optimiser (lbfgs: the same iteration budget as the peer)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--c1", type=float, default=0.1)
    ap.add_argument("--c2", type=float, default=0.1)
    ap.add_argument("--dev", help="a file to measure calibration on (same format)")
    ap.add_argument("--time-limit", type=float, default=None, help="demidcd's training budget")
    ap.add_argument("--budget-share", type=float, default=None,
                    help="give demidcd this share of the peer's training time, its whole fit "
                         "(features included): the peer runs first")
    ap.add_argument("--weights", default="seen", choices=("seen", "all"),
                    help="the (feature, label) weights both keep")
    a = ap.parse_args()
    tr = read_tagged(a.train, fmt="conllu", column=a.column)
    te = read_tagged(a.test, fmt="conllu", column=a.column)
    X, Y = tr.tokens[:a.sentences], tr.tags[:a.sentences]
    dev = read_tagged(a.dev, fmt="conllu", column=a.column) if a.dev else None
    kw = dict(algorithm="crf", c1=a.c1, c2=a.c2, threads=a.threads, min_count=1,
              crf_method=a.crf_method, weights=a.weights)
    t0 = time.perf_counter()
    est = SequenceTagger(**kw, max_iterations=1).fit(X, Y)  # the features, for the peer too
    setup = time.perf_counter() - t0 - est.result_.seconds
    fz, names = est.featurizer_, est.featurizer_.features

    def items(tokens):
        enc = fz.transform(tokens)
        fp, fi, sp = enc.feat_ptr, enc.feat_idx, enc.sent_ptr
        for s in range(enc.n_sentences):
            yield [[names[j] for j in fi[fp[t]:fp[t + 1]]] for t in range(sp[s], sp[s + 1])]

    trainer = pycrfsuite.Trainer(algorithm="lbfgs", verbose=False)
    for xseq, yseq in zip(items(X), Y, strict=True):
        trainer.append(xseq, yseq)
    trainer.set_params({"c1": a.c1, "c2": a.c2, "max_iterations": a.iterations,
                        "feature.possible_states": a.weights == "all",
                        "feature.possible_transitions": True})
    with tempfile.TemporaryDirectory() as d:
        model = str(Path(d) / "m.crfsuite")
        c0, t0 = time.process_time(), time.perf_counter()
        trainer.train(model)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        tagger = pycrfsuite.Tagger()
        tagger.open(model)
        pred = [tagger.tag(x) for x in items(te.tokens)]
        dev_ece = None
        if dev is not None:
            labels = tagger.labels()
            marg = []
            for x in items(dev.tokens):
                tagger.set(x)
                marg.append([{y: tagger.marginal(y, t) for y in labels} for t in range(len(x))])
            dev_ece = expected_calibration_error(dev.tags, marg)
    right = sum(p == g for ps, gs in zip(pred, te.tags, strict=True)
                for p, g in zip(ps, gs, strict=True))
    peer = {"train_wall_seconds": wall, "train_cpu_seconds": cpu,
            "iterations": len(trainer.logparser.iterations),
            "objective": (trainer.logparser.last_iteration or {}).get("loss"),
            "test_accuracy": right / sum(len(g) for g in te.tags), "dev_ece": dev_ece}
    time_limit = a.time_limit
    if a.budget_share is not None:
        time_limit = max(0.1, a.budget_share * wall - setup)
    est = SequenceTagger(**kw, max_iterations=a.iterations, time_limit=time_limit)
    c0, t0 = time.process_time(), time.perf_counter()
    est.fit(X, Y)
    ours = {"train_wall_seconds": time.perf_counter() - t0,
            "train_cpu_seconds": time.process_time() - c0,
            "solver_seconds": est.result_.seconds,  # without building the features
            "iterations": est.result_.epochs, "stop_reason": est.result_.stop_reason,
            "objective": est.result_.extra.get("objective"),
            "test_accuracy": est.score(te.tokens, te.tags)}
    if dev is not None:
        ours["dev_ece"] = expected_calibration_error(dev.tags, est.predict_marginals(dev.tokens))
    print(json.dumps({"sentences": len(X), "c1": a.c1, "c2": a.c2, "weights": a.weights,
                      "budget_share": a.budget_share, "time_limit": time_limit,
                      "demidcd_crf": ours,
                      "crfsuite_lbfgs": peer,
                      "wall_ratio": ours["train_wall_seconds"] / peer["train_wall_seconds"]},
                     indent=1))


if __name__ == "__main__":
    main()
