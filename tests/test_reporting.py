"""Issue 45: what the commands and the library print and say (entity F1 for NER, the input's
separator kept by predict, fit's progress and how it ended, a first run in one screen, the
metrics helpers of :mod:`demidcd.metrics`, --quiet, the CoNLL-U label column)."""

from __future__ import annotations

import itertools
import json
import logging
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from demidcd.progress import format_iteration

NAMES = ["Ana", "Juan", "Rosa", "Luis"]
PLACES = ["Madrid", "Lima", "Quito"]


def _ner_lines(n: int) -> list[str]:
    """``n`` tiny sentences with B-PER, I-PER and B-LOC entities, one ``word TAG`` a line."""
    lines = []
    for k in range(n):
        first, last, place = NAMES[k % 4], NAMES[(k + 1) % 4], PLACES[k % 3]
        for word, tag in ((first, "B-PER"), (last, "I-PER"), ("vive", "O"), ("en", "O"),
                          (place, "B-LOC"), (".", "O")):
            lines.append(f"{word} {tag}")
        lines.append("")
    return lines


@pytest.fixture(scope="module")
def ner_file(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("ner") / "ner.txt"
    p.write_text("\n".join(_ner_lines(24)) + "\n")
    return p


# ================================================================== 6: entity F1 for NER
@pytest.mark.parametrize("task, unit, other", [("ner", "entity", "chunk"),
                                              ("chunking", "chunk", "entity")])
def test_ner_reports_entity_f1_and_chunking_chunk_f1(cli, tmp_path, ner_file, task, unit, other):
    model = tmp_path / "m.npz"
    code, out, err = cli("train", "--task", task, "--train", ner_file, "--dev", ner_file,
                         "--threads", "1", "--max-epochs", "3", "--model", model)
    assert code == 0, err
    assert f"dev {unit} F1 " in out and f"{other} F1" not in out  # iteration lines
    assert f"dev {unit} F1: " in out  # the dev report
    code, out, err = cli("evaluate", "--model", model, "--data", ner_file)
    assert code == 0, err
    assert out.startswith(f"{unit} F1: ") and f"{other} F1" not in out
    plural = {"chunk": "chunks", "entity": "entities"}[unit]
    assert f" {plural}, " in out.splitlines()[1]


# ================================================================== 8: predict keeps tabs
@pytest.fixture(scope="module")
def tagger(tmp_path_factory, corpus) -> Path:
    """A sequence model trained on the synthetic corpus (3 iterations, one process)."""
    from demidcd.cli import main

    model = tmp_path_factory.mktemp("tagger") / "m.npz"
    assert main(["train", "--train", str(corpus / "train.txt"), "--threads", "1",
                 "--max-epochs", "3", "--min-count", "1", "--model", str(model),
                 "--quiet"]) == 0
    return model


@pytest.mark.parametrize("flags", [(), ("--threads", "2"), ("--nbest", "2"), ("--scores",),
                                   ("--force",)])
def test_predict_writes_tab_separated_lines_back_with_tabs(cli, tmp_path, corpus, tagger,
                                                           flags):
    """The fast (kernel) route and the general one (n-best, scores, force): a tab-separated
    input line comes back tab-separated, a space-separated one with spaces (per line)."""
    lines = [line for line in (corpus / "test.txt").read_text().splitlines()[:300]
             if not line.startswith("#")]  # (a "#" token would pass for a header line below)
    first_blank = lines.index("")
    tabbed = [line if k < first_blank else line.replace(" ", "\t")
              for k, line in enumerate(lines)]  # the first sentence with spaces, the rest tabs
    src = tmp_path / "in.txt"
    src.write_text("\n".join(tabbed) + "\n\n")
    out = tmp_path / "out.txt"
    code, _, err = cli("predict", "--model", tagger, "--data", src, "--out", out, *flags)
    assert code == 0, err
    n_first, n_tokens = first_blank, sum(1 for line in lines if line)
    copies = 2 if "--nbest" in flags else 1  # each sentence K times, the first sentence first
    got = [line for line in out.read_text().splitlines() if line and not line.startswith("#")]
    assert len(got) == copies * n_tokens
    assert all(("\t" in line) != (" " in line) for line in got), got
    spaced = [k for k, line in enumerate(got) if " " in line]
    assert spaced == list(range(copies * n_first))


# ================================================================== 17: --quiet, CoNLL-U column
def test_quiet_train_prints_only_results(cli, corpus):
    code, out, err = cli("train", "--train", corpus / "train.txt", "--test", corpus / "test.txt",
                         "--threads", "1", "--max-epochs", "2", "--quiet")
    assert code == 0, err
    assert out.startswith("test accuracy: ") and "CPU" not in out + err
    code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                         "--max-epochs", "2")
    assert code == 0 and "average CPU: " in out  # without --quiet: still there


def _conllu(sentences: list[list[tuple[str, str]]]) -> str:
    """CoNLL-U text with the tags in UPOS and ``X`` in XPOS."""
    out = []
    for s in sentences:
        out += [f"{k}\t{w}\t_\t{t}\tX\t_\t_\t_\t_\t_" for k, (w, t) in enumerate(s, 1)] + [""]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("column, shown", [(None, "UPOS"), ("xpos", "XPOS")])
def test_conllu_model_on_columns_file_names_the_conllu_column(cli, tmp_path, column, shown):
    sents = [[("the", "D"), ("cat", "N"), ("sat", "V")], [("a", "D"), ("dog", "N"), ("ran", "V")]]
    train = tmp_path / "train.conllu"
    train.write_text(_conllu(sents * 10).replace("\tX\t", "\t{}\t").format(
        *[t for s in sents * 10 for _, t in s]))  # XPOS = UPOS: either column is the tags
    cols = tmp_path / "test.txt"
    cols.write_text("".join(f"{w} {t}\n" for w, t in sents[0]) + "\n")
    model = tmp_path / "m.npz"
    code, _, err = cli("train", "--train", train, "--threads", "1", "--max-epochs", "2",
                       "--min-count", "1", "--model", model, "--quiet",
                       *(("--column", column) if column else ()))
    assert code == 0, err
    code, out, err = cli("evaluate", "--model", model, "--data", cols)
    assert code == 0, err
    assert f"the model was trained on CoNLL-U (labels in {shown}); " in err
    assert "last column)" not in err and out.startswith("accuracy: ")


# ================================================================== 11: a first run in one screen
def _iterations(out: str) -> list[tuple[int, float]]:
    """(iteration, seconds) of the iteration lines of a log."""
    return [(int(m[1]), float(m[2])) for m in re.finditer(r"^iter +(\d+) +([\d.]+)s ", out, re.M)]


def test_train_log_thins_iteration_lines_and_ends_with_the_last(cli, tmp_path, corpus):
    log, train = tmp_path / "log.jsonl", tmp_path / "train.txt"
    train.write_text("\n\n".join((corpus / "train.txt").read_text().split("\n\n")[:40]))
    args = ("train", "--train", train, "--threads", "1", "--max-epochs", "100",
            "--tol", "1e-9", "--log-json", log)
    code, out, err = cli(*args)
    assert code == 0, err
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(records) == 100  # the JSON log keeps every record
    shown = _iterations(out)
    assert len(out.splitlines()) <= 30 and len(shown) <= 15
    cadence = {1, 2, 3, 4, 5, 8, 16, 32, 64, 100}  # the first 5, powers of two, the last
    assert cadence <= {e for e, _ in shown}
    for (_, before), (e, t) in zip(shown, shown[1:], strict=False):
        assert e in cadence or t - before >= 10  # (one every 10 s: only on a slow machine)
    last = out[out.rindex("\niter "):].splitlines()[1]
    assert last == format_iteration(records[-1]) and shown[-1][0] == 100  # the true final line
    assert "--verbose 2: every one" in out and "stopped: max-epochs after 100 iterations" in out
    code, out, err = cli(*args, "--verbose", "2")
    assert code == 0 and [e for e, _ in _iterations(out)] == list(range(1, 101))
    code, out, err = cli(*args, "--verbose", "0")
    assert code == 0 and not _iterations(out) and "stopped: max-epochs" in out
    assert "ConvergenceWarning" not in err  # the stopped: line says it


# ================================================================== 10: fit's progress, its end
X = [["the", "cat", "sat"], ["a", "dog", "ran"], ["the", "dog", "sat"], ["a", "cat", "ran"]] * 5
Y = [["D", "N", "V"]] * 20


def test_fit_is_quiet_by_default_and_logs_how_it_ended(capsys, caplog):
    from demidcd.api import SequenceTagger

    with caplog.at_level(logging.INFO, logger="demidcd"), warnings.catch_warnings():
        warnings.simplefilter("error")  # a converged fit warns nothing
        est = SequenceTagger(threads=1, min_count=1).fit(X, Y)
    assert est.verbose == 0 and est.result_.stop_reason == "converged"
    assert capsys.readouterr().out == ""
    ended = [r.getMessage() for r in caplog.records if r.name == "demidcd"]
    assert ended[-1] == f"stopped: converged after {est.result_.epochs} iterations, " \
                        f"{est.result_.seconds:.1f}s"


def test_fit_stopped_at_max_epochs_gives_a_convergence_warning():
    from demidcd.api import SequenceTagger
    from demidcd.errors import ConvergenceWarning

    with pytest.warns(ConvergenceWarning, match=r"SequenceTagger: stopped: max-epochs after 2 "
                      r"iterations.*not converged \(largest projected gradient .*, tol 1e-09\): "
                      r"raise max_epochs or tol") as rec:
        SequenceTagger(threads=1, min_count=1, max_epochs=2, tol=1e-9).fit(X, Y)
    assert rec[0].filename == __file__  # points at the caller's fit
    with warnings.catch_warnings():  # a perceptron stops at max_epochs by design
        warnings.simplefilter("error")
        SequenceTagger(threads=1, min_count=1, algorithm="perceptron", max_epochs=2).fit(X, Y)


def test_fit_verbose_prints_progress_and_the_end(capsys):
    from demidcd.api import SequenceTagger
    from demidcd.errors import OptionError

    est = SequenceTagger(threads=1, min_count=1, verbose=1, tol=1e-9, max_epochs=40)
    with pytest.warns(Warning):
        est.fit(X, Y)
    out = capsys.readouterr().out
    assert [e for e, _ in _iterations(out)] == [1, 2, 3, 4, 5, 8, 16, 32, 40]
    assert out.splitlines()[-1].startswith("stopped: max-epochs after 40 iterations, ")
    lines: list[str] = []
    with pytest.warns(Warning):
        est.set_params(verbose=2, log=lines.append).fit(X, Y)
    assert capsys.readouterr().out == "" and len(_iterations("\n".join(lines))) == 40
    assert lines[-1].startswith("stopped: max-epochs after 40 iterations")
    with pytest.raises(OptionError, match="verbose must be an integer >= 0, got -1"):
        est.set_params(verbose=-1).fit(X, Y)


# ================================================================== 12: demidcd.metrics
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG"]


def _random_sequences(rng: np.random.Generator, n: int, tags: list[str]) -> tuple[list, list]:
    y_true, y_pred = [], []
    for _ in range(n):
        k = int(rng.integers(0, 9))
        t = [tags[i] for i in rng.integers(0, len(tags), k)]
        y_true.append(t)
        y_pred.append([x if rng.random() < 0.6 else tags[int(rng.integers(len(tags)))]
                       for x in t])
    return y_true, y_pred


@pytest.mark.parametrize("n_tags", [2, 4, 6])  # binary and multiclass
def test_flat_scores_equal_scikit_learns(n_tags):
    skm = pytest.importorskip("sklearn.metrics")
    from demidcd import metrics

    rng = np.random.default_rng(n_tags)
    tags = TAGS[:n_tags]
    y_true, y_pred = _random_sequences(rng, 30, tags)
    flat_t, flat_p = [x for s in y_true for x in s], [x for s in y_pred for x in s]
    w = rng.random(len(flat_t))
    subsets = [None, tags[1:], [tags[-1], "B-MISC"]]  # "B-MISC" occurs nowhere
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's UndefinedMetricWarning
        for labels, average, zero_division, weights in itertools.product(
                subsets, ("micro", "macro", "weighted", None), ("warn", 1, np.nan),
                (None, w)):
            kw = {"labels": labels, "average": average, "zero_division": zero_division,
                  "sample_weight": weights}
            for ours, theirs in ((metrics.flat_f1_score, skm.f1_score),
                                 (metrics.flat_precision_score, skm.precision_score),
                                 (metrics.flat_recall_score, skm.recall_score)):
                np.testing.assert_allclose(ours(y_true, y_pred, **kw),
                                           theirs(flat_t, flat_p, **kw), rtol=1e-12)
            np.testing.assert_allclose(
                metrics.flat_fbeta_score(y_true, y_pred, beta=0.5, **kw),
                skm.fbeta_score(flat_t, flat_p, beta=0.5, **kw), rtol=1e-12)
        for labels in subsets:
            for digits in (2, 4):
                assert metrics.flat_classification_report(y_true, y_pred, labels=labels,
                                                          digits=digits) == \
                    skm.classification_report(flat_t, flat_p, labels=labels, digits=digits)
            assert metrics.flat_classification_report(y_true, y_pred, labels=labels,
                                                      output_dict=True) == \
                skm.classification_report(flat_t, flat_p, labels=labels, output_dict=True)
        if len(tags) == 2:
            assert metrics.flat_f1_score(y_true, y_pred, pos_label="B-PER") == \
                skm.f1_score(flat_t, flat_p, pos_label="B-PER")
    assert metrics.flat_accuracy_score(y_true, y_pred) == skm.accuracy_score(flat_t, flat_p)


def test_flat_and_sequence_scores_by_brute_force():
    from demidcd import metrics

    rng = np.random.default_rng(7)
    y_true, y_pred = _random_sequences(rng, 40, TAGS)
    y_pred[3] = list(y_true[3])
    pairs = [(a, b) for s, t in zip(y_true, y_pred, strict=True) for a, b in zip(s, t,
                                                                                 strict=True)]
    assert metrics.flat_accuracy_score(y_true, y_pred) == \
        sum(a == b for a, b in pairs) / len(pairs)
    assert metrics.sequence_accuracy_score(y_true, y_pred) == \
        sum(s == t for s, t in zip(y_true, y_pred, strict=True)) / len(y_true) > 0
    for lab in TAGS:  # per label, and their weighted mean
        tp = sum(a == b == lab for a, b in pairs)
        prec = tp / max(1, sum(b == lab for _, b in pairs))
        rec = tp / max(1, sum(a == lab for a, _ in pairs))
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        assert metrics.flat_f1_score(y_true, y_pred, labels=[lab], average="macro") == \
            pytest.approx(f1)
    with pytest.raises(ValueError, match="Target is multiclass but average='binary'"):
        metrics.flat_f1_score(y_true, y_pred)
    with pytest.raises(ValueError, match="sequence 0: 2 true labels but 1 predicted"):
        metrics.flat_f1_score([["O", "O"]], [["O"]], average="micro")
    assert metrics.sequence_accuracy_score([], []) == metrics.flat_accuracy_score([], []) == 0


def test_chunk_f1_score_is_the_evaluate_scorer():
    from demidcd import metrics
    from demidcd.tasks.chain.chunks import chunk_scores

    y_true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    y_pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]  # 2 of 3 entities right
    assert metrics.chunk_f1_score(y_true, y_pred) == pytest.approx(2 / 3)
    m = metrics.chunk_metrics(y_true, y_pred)
    assert m == chunk_scores(y_true, y_pred).as_dict() and m["per_type"]["LOC"]["recall"] == 0
    rng = np.random.default_rng(3)
    y_true, y_pred = _random_sequences(rng, 50, TAGS)
    assert metrics.chunk_f1_score(y_true, y_pred, "iob2") == \
        chunk_scores(y_true, y_pred, "iob2").as_dict()["f1"]


def test_expected_calibration_error_against_its_definition():
    """ECE over random marginals equals the bin-by-bin sum of its definition; a perfectly
    calibrated and a fully over-confident case give 0 and 1 − accuracy."""
    from demidcd.metrics import expected_calibration_error

    rng = np.random.default_rng(0)
    labels = ["A", "B", "C"]
    y, m = [], []
    for _ in range(40):
        n = int(rng.integers(1, 6))
        p = rng.dirichlet(np.ones(3) * 0.5, size=n)
        m.append([dict(zip(labels, row.tolist(), strict=True)) for row in p])
        y.append([labels[int(rng.integers(3))] for _ in range(n)])
    toks = [(max(d, key=d.get), max(d.values()), g)
            for ms, ys in zip(m, y, strict=True) for d, g in zip(ms, ys, strict=True)]
    want = 0.0
    for b in range(10):
        lo, hi = b / 10, (b + 1) / 10
        inb = [(lab == g, c) for lab, c, g in toks if lo < c <= hi]
        if inb:
            acc = sum(r for r, _ in inb) / len(inb)
            conf = sum(c for _, c in inb) / len(inb)
            want += len(inb) / len(toks) * abs(acc - conf)
    assert expected_calibration_error(y, m, n_bins=10) == pytest.approx(want, abs=1e-12)
    sure = [[{"A": 1.0, "B": 0.0}] * 4]
    assert expected_calibration_error([["A", "B", "A", "A"]], sure) == pytest.approx(0.25)
    half = [[{"A": 0.5, "B": 0.5}, {"A": 0.5, "B": 0.5}]]
    assert expected_calibration_error([["A", "B"]], half) == pytest.approx(0.0)
    assert expected_calibration_error([], []) == 0.0
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error(y, m, n_bins=0)
