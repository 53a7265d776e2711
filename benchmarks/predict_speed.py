"""Tagging speed (issue 36): ``demidcd predict`` end to end against python-crfsuite's ``Tagger``,
and the library's warm ``predict``, on EWT test written ``--repeat`` times (10: 250,940 tokens).

* demidcd end to end: the wall time of the whole ``demidcd predict --model M --data
  test10.conllu --threads P --out F`` process (interpreter start, imports, model, reading,
  features, decoding, writing), P = 1 and 2, after one warm-up run (the compiled kernels are
  cached on disk).
* python-crfsuite end to end: a model trained on EWT train (averaged perceptron, 10
  iterations) with the observation features of the acceptance check's peers (word, lower case,
  shape, prefixes and suffixes 1-4, capitalisation, digit, hyphen, lower-cased words at ±1, ±2;
  written out here as they are in the acceptance check's ``peerlib.py``), then, timed in this
  process as the acceptance check times it: reading the file, the features, ``Tagger.tag``,
  writing ``word<TAB>tag`` lines.
* library warm ``predict``: ``SequenceTagger.predict`` on EWT test's token lists, called once
  before (the per-type tables are then filled), in this process on one core, with the
  encoding and the Viterbi part of it timed apart.

The runs are interleaved (``--runs`` rounds of demidcd p = 1, p = 2, crfsuite); the report takes
each one's median. Results: ``benchmarks/results/NAME.json`` and a markdown table on stdout.
Timings need a quiet machine:

    python benchmarks/predict_speed.py                 # trains the EWT model (60 s, p = 2)
    python benchmarks/predict_speed.py --model e.npz   # an EWT XPOS model already trained
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    EWT,
    RESULTS,
    ROOT,
    demidcd_cmd,
    machine_info,
    machine_line,
    markdown_table,
    run_cli,
    say,
    write_json,
)

sys.path.insert(0, str(ROOT))  # this tree's demidcd for the in-process library timing


# --------------------------------------------------------------------------- the peer's features
def read_conllu_xpos(path: str | os.PathLike[str]) -> list[list[tuple[str, str]]]:
    """Sentences of (form, xpos); comments, multiword tokens and empty nodes skipped."""
    sents, cur = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if cur:
                    sents.append(cur)
                    cur = []
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            if "-" in cols[0] or "." in cols[0]:
                continue
            cur.append((cols[1], cols[4]))
    if cur:
        sents.append(cur)
    return sents


def word_shape(w: str) -> str:
    """A-Z → X, a-z → x, 0-9 → d, runs collapsed: ``Hello`` → ``Xx``, ``U.S.`` → ``X.X.``."""
    s = re.sub("[A-Z]", "X", w)
    s = re.sub("[a-z]", "x", s)
    s = re.sub("[0-9]", "d", s)
    return re.sub(r"(.)\1+", r"\1", s)


def token_features(words: list[str], lowers: list[str], i: int) -> list[str]:
    w = words[i]
    lw = lowers[i]
    f = ["bias", "w=" + w, "lw=" + lw, "shape=" + word_shape(w)]
    for k in range(1, 5):
        if len(w) >= k:
            f.append("p%d=%s" % (k, w[:k]))  # noqa: UP031 - the peer's code as it is
            f.append("s%d=%s" % (k, w[-k:]))  # noqa: UP031
    if w[:1].isupper():
        f.append("is_cap")
    if any(c.isdigit() for c in w):
        f.append("has_digit")
    if "-" in w:
        f.append("has_hyphen")
    n = len(words)
    for o in (-2, -1, 1, 2):
        j = i + o
        if j < 0:
            f.append("lw[%d]=__BOS__" % o)  # noqa: UP031
        elif j >= n:
            f.append("lw[%d]=__EOS__" % o)  # noqa: UP031
        else:
            f.append("lw[%d]=%s" % (o, lowers[j]))  # noqa: UP031
    return f


def sent_features(words: list[str]) -> list[list[str]]:
    lowers = [w.lower() for w in words]
    return [token_features(words, lowers, i) for i in range(len(words))]


def crfsuite_model(train: Path, work: Path) -> str:
    """python-crfsuite's averaged perceptron, 10 iterations, on ``train`` (as the acceptance
    check's peer): the model file."""
    import pycrfsuite

    t = pycrfsuite.Trainer(algorithm="ap", verbose=False)
    for sent in read_conllu_xpos(train):
        t.append(sent_features([f for f, _ in sent]), [x for _, x in sent])
    t.set_params({"max_iterations": 10})
    model = str(work / "m.crfsuite")
    t.train(model)
    return model


def crfsuite_end_to_end(model: str, test: Path, repeat: int) -> tuple[int, float]:
    """(tokens, seconds) of reading ``test`` ``repeat`` times, the features, Tagger.tag and
    writing word<TAB>tag lines (to /dev/null), as the acceptance check's tag_speed.py."""
    import pycrfsuite

    tagger = pycrfsuite.Tagger()
    tagger.open(model)
    t0 = time.perf_counter()
    n = 0
    with open(os.devnull, "w") as out:
        for _ in range(repeat):
            for sent in read_conllu_xpos(test):
                words = [f for f, _ in sent]
                for w, y in zip(words, tagger.tag(sent_features(words)), strict=True):
                    out.write(f"{w}\t{y}\n")
                n += len(words)
    return n, time.perf_counter() - t0


# --------------------------------------------------------------------------- demidcd
def demidcd_end_to_end(model: Path, data: Path, out: Path, threads: int) -> float:
    """Wall seconds of one ``demidcd predict`` process."""
    t0 = time.perf_counter()
    r = subprocess.run([*demidcd_cmd(), "predict", "--model", str(model), "--data", str(data),
                        "--threads", str(threads), "--out", str(out), "--quiet"],
                       capture_output=True, text=True, cwd=str(ROOT))
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"demidcd predict failed: {r.stderr.strip()[-300:]}")
    return wall


def library_warm(model: Path, test: Path, runs: int) -> dict:
    """The library's warm predict on the token lists of ``test`` (one core): tokens/s of
    ``predict`` (median of ``runs``), and of its encoding and Viterbi parts."""
    from demidcd.api import load_estimator
    from demidcd.io.tagged import read_tagged

    est = load_estimator(model)
    X = read_tagged(test, fmt="conllu", column="xpos").tokens
    n = sum(map(len, X))
    est.predict(X)  # warm: kernels loaded, per-type tables filled
    whole, enc_t, vit_t = [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        est.predict(X)
        whole.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        enc = est.featurizer_.transform(X)
        t1 = time.perf_counter()
        est.decode_encoded(enc)
        vit_t.append(time.perf_counter() - t1)
        enc_t.append(t1 - t0)
    med = statistics.median
    return {"tokens": n, "predict_seconds": med(whole), "predict_tokens_per_s": n / med(whole),
            "encode_tokens_per_s": n / med(enc_t), "viterbi_tokens_per_s": n / med(vit_t),
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=str(EWT / "en_ewt-ud-train.conllu"))
    ap.add_argument("--test", default=str(EWT / "en_ewt-ud-test.conllu"))
    ap.add_argument("--repeat", type=int, default=10, help="copies of the test file")
    ap.add_argument("--model", help="a demidcd EWT XPOS model (default: train one)")
    ap.add_argument("--time-limit", type=float, default=60, help="training seconds (p = 2)")
    ap.add_argument("--runs", type=int, default=5, help="timed rounds")
    ap.add_argument("--name", default="predict_speed")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    info = machine_info()
    say(machine_line(info), a.quiet)
    work = Path(tempfile.mkdtemp(prefix="predict_speed."))
    test10 = work / "test10.conllu"
    text = Path(a.test).read_bytes()
    test10.write_bytes(text * a.repeat)
    model = Path(a.model) if a.model else work / "e.npz"
    if not a.model:
        say(f"training the demidcd model ({a.time_limit:g} s, p = 2)", a.quiet)
        run_cli(["train", "--train", a.train, "--format", "conllu", "--column", "xpos",
                 "--threads", "2", "--time-limit", str(a.time_limit), "--model", str(model)],
                work / "train.log")
    try:
        say("training python-crfsuite (ap, 10 iterations)", a.quiet)
        peer_model = crfsuite_model(Path(a.train), work)
    except ImportError:
        peer_model = None
        say("python-crfsuite is not installed: no peer", a.quiet)
    demidcd_end_to_end(model, Path(a.test), work / "warm.conllu", 1)  # kernels compiled
    times: dict[str, list[float]] = {"p1": [], "p2": [], "crfsuite": []}
    ntok = 0
    for r in range(a.runs):
        times["p1"].append(demidcd_end_to_end(model, test10, work / "p1.conllu", 1))
        times["p2"].append(demidcd_end_to_end(model, test10, work / "p2.conllu", 2))
        if peer_model is not None:
            ntok, t = crfsuite_end_to_end(peer_model, Path(a.test), a.repeat)
            times["crfsuite"].append(t)
        say(f"round {r + 1}: p=1 {times['p1'][-1]:.2f}s  p=2 {times['p2'][-1]:.2f}s  "
            f"crfsuite {times['crfsuite'][-1] if times['crfsuite'] else float('nan'):.2f}s",
            a.quiet)
    out_tokens = sum(1 for line in (work / "p1.conllu").open("rb")
                     if line[:1].isdigit() and line.split(b"\t", 1)[0].isdigit())
    same = (work / "p1.conllu").read_bytes() == (work / "p2.conllu").read_bytes()
    lib = library_warm(model, Path(a.test), a.runs)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    speed = {k: out_tokens / v for k, v in med.items()}
    res = {"machine": info, "tokens": out_tokens, "repeat": a.repeat, "runs": a.runs,
           "seconds": times, "median_seconds": med, "tokens_per_s": speed,
           "p2_output_equals_p1": same, "peer_tokens": ntok, "library_warm": lib,
           "model": str(model) if a.model else f"trained {a.time_limit:g} s, p = 2"}
    if "crfsuite" in speed:
        res["ratios"] = {"p1_over_crfsuite": speed["p1"] / speed["crfsuite"],
                         "p2_over_crfsuite": speed["p2"] / speed["crfsuite"],
                         "p2_over_p1": speed["p2"] / speed["p1"]}
    path = write_json(Path(a.out_dir) / f"{a.name}.json", res)
    rows = [["demidcd predict, p = 1 (end to end)", f"{med['p1']:.2f}", f"{speed['p1']:,.0f}"],
            ["demidcd predict, p = 2 (end to end)", f"{med['p2']:.2f}", f"{speed['p2']:,.0f}"]]
    if "crfsuite" in med:
        rows.append(["python-crfsuite Tagger (end to end)", f"{med['crfsuite']:.2f}",
                     f"{speed['crfsuite']:,.0f}"])
    rows.append(["library warm predict (EWT test, one core)", f"{lib['predict_seconds']:.3f}",
                 f"{lib['predict_tokens_per_s']:,.0f}"])
    print(markdown_table(["what", "seconds (median)", "tokens/s"], rows))
    if "ratios" in res:
        r = res["ratios"]
        print(f"p=1 / crfsuite {r['p1_over_crfsuite']:.2f}x (target >= 2), p=2 / p=1 "
              f"{r['p2_over_p1']:.2f}x (target >= 1.8), p=2 / crfsuite "
              f"{r['p2_over_crfsuite']:.2f}x; library encoding "
              f"{lib['encode_tokens_per_s']:,.0f} tokens/s, Viterbi "
              f"{lib['viterbi_tokens_per_s']:,.0f} tokens/s")
    say(f"results: {path}", a.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
