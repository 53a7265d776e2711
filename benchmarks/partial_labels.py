"""Training from partially labelled data (issue 55): the SVM by CCCP and the CRF by the
partial-label likelihood, against the same data with the unknown labels thrown away or made
"O". Seeded, from the public corpora in ../shared/data (:func:`make_ewt`, :func:`make_ner`):

    python benchmarks/partial_labels.py [--parts a b c d | --only time] [--threads 2]
        [--time-limit 120] [--out-dir benchmarks/results]

(``--only time``: (d) alone, about 6 minutes on 2 cores; the other parts' results already in
the JSON file are kept.)

* (a) EWT XPOS: the full training set; its labelled half (a seeded half of the sentences);
  that half plus the other half with 70% of its tags unknown ('?'). Goals: partial >= half +
  0.3 and >= full - 0.5 (test accuracy, points).
* (b) CoNLL-2002 Spanish with 30% of the entity mentions removed: their tokens unknown vs
  relabelled O, for the default SVM learner and for --algorithm crf. Goal: unknown >= as-O +
  3.0 entity F1, both learners.
* (c) EWT: a tag dictionary from the training set for every word (each token's cell the set
  of tags its word takes in training) and gold tags for a seeded 10% of the sentences, vs the
  10% alone.
* (d) time to the final accuracy: the partial data of (a) and the full data (the same
  sentences), p = 2, each trained with --time-limit --d-time-limit and weight snapshots every
  --snapshot-every s (``--snapshot-dir``; CCCP's snapshots cover every round, on the run's
  clock). Each snapshot's test accuracy is taken afterwards (the training is not slowed);
  the time to the final accuracy is the first snapshot's seconds (solver clock, set-up not
  counted) whose accuracy is within --within points (0.1) of that run's final model's.
  Goal: partial <= 3x full.

Every run: ``demidcd train --format columns --threads T --time-limit L`` then ``demidcd
evaluate``. Writes ``partial_labels.json`` to --out-dir and a markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (  # noqa: E402
    RESULTS,
    machine_info,
    machine_line,
    markdown_table,
    parse_metrics,
    parse_stopped,
    run_cli,
    say,
    write_json,
)

SHARED = HERE.parent.parent / "shared"
DATA = SHARED / "data"
EWT = DATA / "ud_english_ewt"
ESP = DATA / "conll2002"
SEED = 20261201


def conllu_to_columns(src: Path, out: Path) -> None:
    """word <TAB> XPOS per token, a blank line between sentences (multiword and empty nodes
    skipped), as the acceptance check writes EWT's test set."""
    with open(out, "w", encoding="utf-8") as f:
        for line in open(src, encoding="utf-8"):
            line = line.rstrip("\n")
            if not line.strip():
                f.write("\n")
                continue
            if line.startswith("#"):
                continue
            c = line.split("\t")
            if "-" in c[0] or "." in c[0]:
                continue
            f.write(f"{c[1]}\t{c[4]}\n")


def read_columns(path: Path) -> list[list[list[str]]]:
    sents, cur = [], []
    for line in open(path, encoding="utf-8"):
        p = line.rstrip("\n").split("\t") if "\t" in line else line.split()
        if not line.strip():
            if cur:
                sents.append(cur)
                cur = []
            continue
        cur.append(p)
    if cur:
        sents.append(cur)
    return sents


def write_columns(path: Path, sents: list[list[list[str]]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for s in sents:
            f.write("".join("\t".join(t) + "\n" for t in s) + "\n")


def make_ewt(train_conllu: Path, out: Path, seed: int = SEED) -> None:
    """out/full.txt (every sentence), half.txt (a seeded half of the sentences) and
    partial.txt (that half labelled, the other half with each tag '?' with probability 0.7)."""
    out.mkdir(parents=True, exist_ok=True)
    conllu_to_columns(train_conllu, out / "full.txt")
    sents = read_columns(out / "full.txt")
    rng = random.Random(seed)
    idx = list(range(len(sents)))
    rng.shuffle(idx)
    half = set(idx[:len(sents) // 2])
    write_columns(out / "half.txt", [sents[i] for i in sorted(half)])
    write_columns(out / "partial.txt", [
        s if i in half else [[w, "?" if rng.random() < 0.7 else t] for w, t in s]
        for i, s in enumerate(sents)])


def make_ner(train: Path, out: Path, seed: int = SEED) -> None:
    """out/removed_o.txt and removed_unknown.txt: a seeded 30% of the entity mentions (B-X and
    the I-X after it) relabelled O, or their tokens '?'."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    as_o, unknown = [], []
    for sent in read_columns(train):
        a, b = [list(t) for t in sent], [list(t) for t in sent]
        i = 0
        while i < len(sent):
            if not sent[i][-1].startswith("B-"):
                i += 1
                continue
            j = i + 1
            while j < len(sent) and sent[j][-1].startswith("I-"):
                j += 1
            if rng.random() < 0.3:
                for k in range(i, j):
                    a[k][-1], b[k][-1] = "O", "?"
            i = j
        as_o.append(a)
        unknown.append(b)
    write_columns(out / "removed_o.txt", as_o)
    write_columns(out / "removed_unknown.txt", unknown)


def tag_dictionary_data(full: Path, out: Path, share: float = 0.1, seed: int = SEED
                        ) -> tuple[Path, Path, dict]:
    """(dictionary + 10% gold file, the 10% alone file, counts): every token of the other
    sentences gets the set of tags its word takes in the training set (one tag: that tag)."""
    sents = read_columns(full)
    tags: dict[str, set[str]] = defaultdict(set)
    for s in sents:
        for w, t in s:
            tags[w].add(t)
    rng = random.Random(seed)
    idx = list(range(len(sents)))
    rng.shuffle(idx)
    gold = set(idx[:int(len(sents) * share)])
    dict_sents, sets, ambiguous = [], 0, 0
    for i, s in enumerate(sents):
        if i in gold:
            dict_sents.append(s)
            continue
        row = []
        for w, _ in s:
            cell = sorted(tags[w])
            sets += len(cell) > 1
            ambiguous += 1
            row.append([w, "|".join(cell)])
        dict_sents.append(row)
    a, b = out / "dict_gold10.txt", out / "gold10.txt"
    write_columns(a, dict_sents)
    write_columns(b, [sents[i] for i in sorted(gold)])
    return a, b, {"gold_sentences": len(gold), "dictionary_tokens": ambiguous,
                  "set_tokens": sets}


def run(name: str, train: Path, test: Path, work: Path, args: argparse.Namespace,
        *extra: str, time_limit: float | None = None) -> dict:
    """Train and evaluate; the test metric (accuracy or entity F1, in points) and the
    training seconds of the stopped line."""
    model = work / f"{name}.npz"
    limit = args.time_limit if time_limit is None else time_limit
    log, wall = run_cli(["train", "--train", train, "--format", "columns", "--threads",
                         args.threads, "--time-limit", limit, *extra, "--model", model],
                        work / f"{name}.log", timeout=limit * 6 + 900)
    ev, _ = run_cli(["evaluate", "--model", model, "--data", test, "--format", "columns"],
                    work / f"{name}.ev", timeout=900)
    m = parse_metrics(ev)
    metric = m.get("entity_f1", m.get("accuracy"))
    stopped = parse_stopped(log) or {}
    rounds = [ln for ln in log.splitlines() if "cccp round" in ln]
    out = {"metric": None if metric is None else round(100 * metric, 2),
           "train_seconds": stopped.get("seconds"), "wall_seconds": round(wall, 1),
           "stopped": stopped.get("reason"), "cccp_rounds": len(rounds)}
    say(f"  {name}: {out}")
    return out


def snapshot_curve(snap_dir: Path, test: Path) -> list[tuple[float, float]]:
    """(seconds, test accuracy in points) of every snapshot of ``snap_dir``, in time order:
    its ``base.npz`` model with each snapshot's weights, scored on ``test`` (word, tag)."""
    sys.path.insert(0, str(HERE.parent))
    from demidcd.api import load_estimator
    from demidcd.io.snapshots import list_snapshots, load_snapshot

    est = load_estimator(str(snap_dir / "base.npz"))
    sents = read_columns(test)
    X, Y = [[t[0] for t in s] for s in sents], [[t[-1] for t in s] for s in sents]
    dim = est.coef_.shape[0]
    out = []
    for seconds, path in list_snapshots(snap_dir):
        est.coef_ = load_snapshot(path, dim)
        out.append((seconds, round(100 * float(est.score(X, Y)), 3)))
    return out


def time_to_final(curve: list[tuple[float, float]], within: float) -> dict:
    """The final accuracy (the last snapshot: the model written) and the seconds of the first
    snapshot within ``within`` points of it."""
    final = curve[-1][1]
    first = next(t for t, a in curve if a >= final - within)
    return {"final_accuracy": final, "seconds_to_final": round(first, 2),
            "snapshots": len(curve), "last_seconds": round(curve[-1][0], 2)}


def measure_time(ewt: Path, test: Path, work: Path, args: argparse.Namespace) -> dict:
    """(d): the full and the partial EWT data trained with snapshots (module docstring)."""
    d: dict = {"time_limit": args.d_time_limit, "snapshot_every": args.snapshot_every,
               "within_points": args.within}
    for k in ("full", "partial"):
        snap = work / f"d_{k}.snapshots"
        d[k] = run(f"d_{k}", ewt / f"{k}.txt", test, work, args, "--snapshot-dir", snap,
                   "--snapshot-every", args.snapshot_every, time_limit=args.d_time_limit)
        curve = snapshot_curve(snap, test)
        d[k].update(time_to_final(curve, args.within))
        d[k]["curve"] = curve
        say(f"  {k}: final {d[k]['final_accuracy']:.2f} reached (within {args.within}) at "
            f"{d[k]['seconds_to_final']} s of {d[k]['last_seconds']} s")
    fs, ps = d["full"]["seconds_to_final"], d["partial"]["seconds_to_final"]
    d["ratio"] = None if not fs else round(ps / fs, 2)
    d["goal"] = d["ratio"] is not None and d["ratio"] <= 3.0
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", nargs="+", default=["a", "b", "c", "d"],
                    choices=["a", "b", "c", "d"])
    ap.add_argument("--only", choices=["a", "b", "c", "d", "time"],
                    help="one part alone (time: (d))")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--d-time-limit", type=float, default=120.0,
                    help="(d): each run's --time-limit")
    ap.add_argument("--snapshot-every", type=float, default=2.0, help="(d): seconds")
    ap.add_argument("--within", type=float, default=0.1,
                    help="(d): points from the final accuracy that count as reached")
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--note", default="", help="e.g. 'under load': kept in the results")
    args = ap.parse_args()
    if args.only:
        args.parts = ["d" if args.only == "time" else args.only]
    info = machine_info()
    say(machine_line(info))
    out_path = Path(args.out_dir) / "partial_labels.json"
    results: dict = json.loads(out_path.read_text()) if out_path.is_file() else {}
    meta = {"machine": info, "note": args.note, "threads": args.threads,
            "time_limit": args.time_limit, "seed": SEED}
    if not results or set(args.parts) == {"a", "b", "c", "d"}:
        results.update(meta)  # (a run of some parts keeps the others' and says its own)
    rows = []
    with tempfile.TemporaryDirectory(prefix="partial-") as tmp:
        work = Path(tmp)
        ewt, ner = work / "ewt", work / "ner"
        if set(args.parts) & {"a", "c", "d"}:
            make_ewt(EWT / "en_ewt-ud-train.conllu", ewt)
            conllu_to_columns(EWT / "en_ewt-ud-test.conllu", ewt / "test.txt")
        test = ewt / "test.txt"
        if "a" in args.parts:
            say("(a) EWT XPOS, half labelled + half with 70% of tags unknown")
            a = {k: run(f"a_{k}", ewt / f"{k}.txt", test, work, args)
                 for k in ("full", "half", "partial")}
            full, half, part = (a[k]["metric"] for k in ("full", "half", "partial"))
            a["goals"] = {"partial >= half + 0.3": part >= half + 0.3,
                          "partial >= full - 0.5": part >= full - 0.5}
            results["a"] = a
            rows += [["(a) EWT full", full, ""], ["(a) EWT labelled half", half, ""],
                     ["(a) EWT half + 70%-unknown half", part,
                      f"+{part - half:.2f} vs half, {part - full:+.2f} vs full"]]
        if "b" in args.parts:
            say("(b) CoNLL-2002 Spanish, 30% of the mentions removed")
            make_ner(ESP / "esp.train", ner)
            b: dict = {}
            for alg, extra in (("svm", ()), ("crf", ("--algorithm", "crf"))):
                for kind, f in (("as_o", "removed_o.txt"), ("unknown", "removed_unknown.txt")):
                    b[f"{alg}_{kind}"] = run(f"b_{alg}_{kind}", ner / f, ESP / "esp.testb",
                                             work, args, "--task", "ner",
                                             "--feature-columns", "2", *extra)
                o, u = b[f"{alg}_as_o"]["metric"], b[f"{alg}_unknown"]["metric"]
                b[f"{alg}_goal"] = u >= o + 3.0
                rows.append([f"(b) Spanish {alg.upper()}: removed as O / unknown",
                             f"{o} / {u}", f"{u - o:+.2f} F1"])
            results["b"] = b
        if "c" in args.parts:
            say("(c) EWT tag dictionary + gold tags for 10% of the sentences")
            dict_file, gold10, counts = tag_dictionary_data(ewt / "full.txt", work)
            c = {"data": counts,
                 "dictionary": run("c_dict", dict_file, test, work, args),
                 "gold10": run("c_gold10", gold10, test, work, args)}
            results["c"] = c
            d_, g_ = c["dictionary"]["metric"], c["gold10"]["metric"]
            rows.append(["(c) EWT dictionary + 10% gold / 10% alone", f"{d_} / {g_}",
                         f"{d_ - g_:+.2f}"])
        if "d" in args.parts:
            say("(d) time to the final accuracy (snapshots): partial vs fully labelled, the "
                "same sentences")
            d = results["d"] = measure_time(ewt, test, work, args)
            f_, p_ = d["full"], d["partial"]
            rows.append(["(d) seconds to within 0.1 of the final accuracy, full / partial "
                         "(final accuracies)",
                         f"{f_['seconds_to_final']} / {p_['seconds_to_final']} "
                         f"({f_['final_accuracy']:.2f} / {p_['final_accuracy']:.2f})",
                         f"{d['ratio']}x (goal <= 3x)"])
    for k in args.parts:  # each part says how it was run
        if isinstance(results.get(k), dict):
            results[k]["run"] = meta
    path = write_json(out_path, results)
    say(markdown_table(["run", "test metric", "difference"], rows))
    say(f"written {path}")


if __name__ == "__main__":
    main()
