"""Issue 56 (options, names, input validation, error messages): options read by no learner
refused before any data is read, sklearn-crfsuite's names (algorithm, all_possible_states,
scorers), huge feature values, the help texts, and raw errors that became one line."""

from __future__ import annotations

import errno
import types

import numpy as np
import pytest

from demidcd import metrics
from demidcd.api import ChunkTagger, SequenceTagger
from demidcd.cli import COMMANDS, main
from demidcd.cli.parser import build_parser
from demidcd.errors import DemidcdError, ModelFileError, OptionError

X = [["the", "cat", "sat"], ["a", "dog", "ran", "far"], ["the", "dog", "sat"]] * 4
Y = [["D", "N", "V"], ["D", "N", "V", "R"], ["D", "N", "V"]] * 4
CX = [[("He", "PRP"), ("reckons", "VBZ"), ("the", "DT"), ("deficit", "NN")]] * 6
CY = [["B-NP", "B-VP", "B-NP", "I-NP"]] * 6


def _one_error_line(err: str, *words: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("demidcd: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], (w, lines[0])


# ============================================ defects 5 and 18: what the learner does not read
@pytest.mark.parametrize("args, flag", [
    (["--algorithm", "crf", "--C", "0.5"], "--C"),
    (["--algorithm", "crf", "--tol", "0.5"], "--tol"),
    (["--algorithm", "crf", "--learners", "2"], "--learners"),
    (["--algorithm", "crf", "--backend", "ray"], "--backend"),
    (["--algorithm", "crf", "--crf-method", "sdca", "--num-memories", "5"], "--num-memories"),
    (["--algorithm", "crf", "--crf-method", "sdca", "--warm-epochs", "2"], "--warm-epochs"),
    (["--algorithm", "dcd", "--learners", "2"], "--learners"),
    (["--algorithm", "dcd", "--c1", "0.5"], "--c1"),
    (["--task", "dependency", "--algorithm", "crf"], "crf"),
    (["--algorithm", "l2sgd"], "l2sgd"),
    (["--threads", "1" + "0" * 400], "--threads"),
    (["--seed", "-1"], "--seed"),
    (["--algorithm", "crf", "--num-memories", "1" + "0" * 400], "--num-memories"),
    (["--algorithm", "crf", "--c1", "nan"], "--c1"),
    (["--snapshot-every", "0.001"], "--snapshot-every"),
])
def test_options_no_learner_reads_are_refused_before_the_data(tmp_path, capsys, args, flag):
    """One line naming the option, exit 2, before the (missing) training file is opened."""
    missing = tmp_path / "no-such-file.txt"
    code = main(["train", "--train", str(missing), "--threads", "1", *args])
    err = capsys.readouterr().err
    assert code == 2
    _one_error_line(err, flag)
    assert str(missing) not in err


@pytest.mark.parametrize("algorithm", ["dcd", "crf", "perceptron", "demi-dcd"])
def test_debug_is_the_traceback_switch_for_every_learner(algorithm):
    threads = 2 if algorithm == "demi-dcd" else 1
    plan = SequenceTagger(algorithm=algorithm, threads=threads, debug=True).plan()
    assert plan.algorithm == algorithm
    assert ("debug" in plan.engine) == (algorithm == "demi-dcd")
    assert "debug" not in plan.hyper_parameters()


def test_options_the_learner_reads_still_pass():
    """The refusals leave alone what each learner reads, and the library's defaults."""
    assert SequenceTagger(algorithm="crf", c1=0.0, time_limit=3).plan().config.time_limit == 3
    assert SequenceTagger(algorithm="crf", crf_method="sdca", c2=1.0).plan().algorithm == "crf"
    assert SequenceTagger(algorithm="dcd", C=0.5, tol=0.1).plan().config.C == 0.5
    assert SequenceTagger(algorithm="crf", seed=3).plan().config.seed == 3  # sdca reads it


# ================================================================= defect 6: sklearn-crfsuite
def test_sklearn_crfsuite_algorithm_names():
    plan = ChunkTagger(algorithm="lbfgs").plan()
    assert plan.algorithm == "crf" and plan.engine["crf_method"] == "lbfgs"
    assert ChunkTagger(algorithm="ap").plan().algorithm == "perceptron"
    assert ChunkTagger(algorithm="pa").plan().algorithm == "mira"
    # CRFsuite's max_iterations of ap / pa counts epochs: it is this learner's max_epochs
    assert ChunkTagger(algorithm="ap", max_iterations=7).plan().config.max_epochs == 7
    with pytest.raises(OptionError, match="lbfgs is crf with crf_method lbfgs"):
        ChunkTagger(algorithm="lbfgs", crf_method="sdca").plan()
    with pytest.raises(OptionError, match="mira"):
        ChunkTagger(algorithm="arow").plan()
    with pytest.raises(OptionError, match="crf"):
        ChunkTagger(algorithm="l2sgd").plan()
    with pytest.raises(OptionError, match="CRFsuite's delta is stop_delta"):
        ChunkTagger(algorithm="lbfgs", delta=1e-5).plan()


def test_all_possible_states_is_weights_all():
    est = ChunkTagger(algorithm="lbfgs", all_possible_states=True, max_iterations=3,
                      warm_epochs=0).fit(CX, CY)
    assert est.plan_.algorithm == "crf" and est.seen_pairs_ is None  # every (feature, label)
    assert "all_possible_states" in est.get_params()
    seen = ChunkTagger(algorithm="lbfgs", max_iterations=3, warm_epochs=0).fit(CX, CY)
    assert seen.seen_pairs_ is not None  # CRFsuite's default: the pairs seen
    assert ChunkTagger(all_possible_states=False)._weights() == "seen"
    with pytest.raises(OptionError, match="all_possible_states"):
        ChunkTagger(all_possible_states=True, weights="seen").fit(CX, CY)


def test_scorers_are_sklearn_scorers_of_the_metrics():
    pytest.importorskip("sklearn")
    from demidcd import scorers

    est = SequenceTagger(max_epochs=1).fit(X, Y)
    pred = est.predict(X)
    assert scorers.flat_accuracy(est, X, Y) == metrics.flat_accuracy_score(Y, pred)
    assert scorers.sequence_accuracy(est, X, Y) == metrics.sequence_accuracy_score(Y, pred)
    assert scorers.flat_f1(est, X, Y) == pytest.approx(
        metrics.flat_f1_score(Y, pred, average="weighted"))


def test_numpy_arrays_as_x_and_y():
    """A numpy array of sentences was 'truth value of an array is ambiguous'."""
    Xa, Ya = np.array(X, dtype=object), np.array(Y, dtype=object)
    est = SequenceTagger(max_epochs=2).fit(Xa, Ya)
    assert est.predict(Xa) == SequenceTagger(max_epochs=2).fit(X, Y).predict(X)
    assert 0 <= est.score(Xa, Ya) <= 1


# ======================================================= defect 14: huge real feature values
@pytest.mark.parametrize("value", [1e308, 1e10, 10**400, -1e8])
def test_huge_feature_values_are_refused_naming_the_feature(value):
    D = [[{"w": w, "len": value} for w in s] for s in X]
    with pytest.raises(ValueError, match=r"sentence 0, token 0: feature 'len'"):
        SequenceTagger(threads=1, max_epochs=1).fit(D, Y)


def test_values_up_to_the_bound_train_to_finite_weights():
    from demidcd.tasks.chain.template import MAX_FEATURE_VALUE

    D = [[{"w": w, "len": MAX_FEATURE_VALUE} for w in s] for s in X]
    est = SequenceTagger(threads=1, max_epochs=2).fit(D, Y)
    assert np.isfinite(est.coef_).all()


def test_deeply_nested_dict_is_a_value_error_not_a_recursion_error():
    deep: dict = {"b": 1.0}
    for _ in range(2000):
        deep = {"a": deep}
    D = [[{"w": w, "d": deep} if k == 0 else {"w": w} for k, w in enumerate(s)] for s in X]
    with pytest.raises(ValueError, match="nested more than"):
        SequenceTagger(max_epochs=1).fit(D, Y)


def test_save_refuses_non_finite_weights(tmp_path):
    est = SequenceTagger(max_epochs=1).fit(X, Y)
    est.coef_ = est.coef_.copy()
    est.coef_[3] = np.nan
    path = tmp_path / "m.npz"
    with pytest.raises(DemidcdError, match="not finite"):
        est.save(path)
    assert not path.exists()


# ======================================================================= column names, --model
def test_column_names_in_any_case(tmp_path, capsys):
    from demidcd.tasks.chain.spec import _parse_column, _parse_feature_columns

    assert _parse_column("XPOS") == "xpos" and _parse_column("Upos") == "upos"
    assert _parse_feature_columns("XPOS,2") == ("xpos", 2)
    args = build_parser().parse_args(["predict", "--model", "m", "--data", "d", "--out", "o",
                                      "--pos-column", "XPOS"])
    assert args.pos_column == "xpos"
    f = tmp_path / "t.conllu"
    rows = "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_\n\n"
    f.write_text(rows * 5)
    m = tmp_path / "x.npz"
    assert main(["train", "--train", str(f), "--column", "XPOS", "--threads", "1",
                 "--max-epochs", "1", "--model", str(m), "--quiet"]) == 0
    assert SequenceTagger.load(m).classes_ == ["DT", "NN"]


def test_train_without_model_says_so_first(corpus, capsys):
    assert main(["train", "--train", str(corpus / "train.txt"), "--threads", "1",
                 "--max-epochs", "1"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("no --model: the trained model is not saved")


def test_predict_refuses_another_task(corpus, capsys, tmp_path):
    m = tmp_path / "m.npz"
    assert main(["train", "--train", str(corpus / "train.txt"), "--threads", "1",
                 "--max-epochs", "1", "--model", str(m), "--quiet"]) == 0
    capsys.readouterr()
    code = main(["predict", "--model", str(m), "--data", str(corpus / "test.txt"),
                 "--out", str(tmp_path / "o.txt"), "--task", "dependency"])
    assert code == 2
    _one_error_line(capsys.readouterr().err, "--task dependency", "sequence model")


def test_resume_with_another_min_count_is_refused(corpus, capsys, tmp_path):
    m = tmp_path / "r.npz"
    train = ["train", "--train", str(corpus / "train.txt"), "--threads", "1", "--quiet"]
    assert main([*train, "--max-epochs", "1", "--model", str(m), "--save-state"]) == 0
    capsys.readouterr()
    code = main([*train, "--model", str(tmp_path / "r2.npz"), "--resume", str(m),
                 "--min-count", "1"])
    assert code == 2
    _one_error_line(capsys.readouterr().err, "--min-count 1", "saved run's 2")


# ======================================================================= defect 7: help texts
def test_help_all_names_the_learners_of_each_option(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help-all"])
    out = capsys.readouterr().out
    for flag, reader in (("--eta", "[adagrad]"), ("--lambda", "[pegasos]"),
                         ("--batch-size", "[pegasos, adagrad]"), ("--projection", "[pegasos]"),
                         ("--regularizer", "[adagrad]"), ("--mixing", "[sp-ipm]"),
                         ("--perceptron-epochs", "[sp-ipm]"),
                         ("--averaged", "[sp-ipm, perceptron, mira, pegasos]")):
        block = out[out.index(f"\n  {flag}"):]
        block = block[:block.index("\n  --", 1)]
        assert reader in " ".join(block.split()), (flag, block)


def test_predict_help_shows_only_what_predict_reads(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    out = capsys.readouterr().out
    assert "learner:" not in out and "\ndata:" not in out and "input:" in out
    assert "what to learn" not in out and "train runs" not in out
    assert "--template" not in out and "--label-scheme" not in out
    assert "--nbest" in out and "--threads" in out


# ============================================= defect 18: BOM, snapshots; defect 17: one line
def test_template_with_a_bom_is_read(tmp_path):
    from demidcd.tasks.chain.template_language import Template

    text = "U00:%x[0,0]\nU01:%x[-1,0]\nB\n"
    a, b = tmp_path / "a.tpl", tmp_path / "b.tpl"
    a.write_text(text, encoding="utf-8")
    b.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert [(ln.kind, ln.items) for ln in Template.from_file(b).lines] == \
        [(ln.kind, ln.items) for ln in Template.from_file(a).lines]


def test_snapshots_are_rate_limited(tmp_path):
    from demidcd.io.snapshots import Snapshotter

    snap = Snapshotter(tmp_path, 0.01)
    w = np.zeros(10)
    snap._last, snap._cost = 4.5, 1.0  # a snapshot at 4.5 s, whose write took 1 s
    snap.maybe(5.0, w)  # due (every 0.01 s), but writing would take 20% of the time
    assert snap.skipped == 1
    snap.maybe(6.0, w, force=True)  # the final snapshot is always written
    snap.close()
    assert [p.name for p in tmp_path.iterdir()] == ["w-000006.000.npy"]


def test_truncated_snapshot_is_one_line(tmp_path):
    from demidcd.io.snapshots import load_snapshot

    p = tmp_path / "w-000001.000.npy"
    np.save(p, np.zeros(50))
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(ModelFileError, match="w-000001.000.npy: not a readable snapshot"):
        load_snapshot(p, 50)
    np.save(p, np.zeros(3))
    with pytest.raises(ModelFileError, match="not a snapshot of this run"):
        load_snapshot(p, 50)


def test_sdca_dual_that_cannot_fit_is_refused_before_allocating():
    from demidcd.solvers.crf_sdca import check_dual_memory

    task = types.SimpleNamespace(sent_ptr=np.array([0, 3_000, 9_000]), K=5_000)
    with pytest.raises(DemidcdError, match=r"--crf-method sdca needs [\d,.]+ GiB"):
        check_dual_memory(task)


@pytest.mark.parametrize("exc, words", [
    (OSError(errno.EFBIG, "File too large", "m.npz"), ("m.npz: File too large",)),
    (OSError(errno.ENOSPC, "No space left on device"), ("No space left on device",)),
    (MemoryError(), ("out of memory",)),
    (OSError("Could not find/load shared object file 'libllvmlite.so'"), ("address space",)),
])
def test_environment_errors_are_one_line_exit_2(monkeypatch, capsys, exc, words):
    def boom(args):
        raise exc

    monkeypatch.setitem(COMMANDS, "learners", boom)
    assert main(["learners"]) == 2
    _one_error_line(capsys.readouterr().err, *words)


def test_a_log_that_cannot_be_written_is_dropped_with_one_warning(monkeypatch, capsys):
    import sys

    from demidcd.cli.log import Log

    class Full:
        def write(self, s):
            raise OSError(errno.EFBIG, "File too large")

        def flush(self):
            pass

        def isatty(self):
            return False

    log = Log(False, None)
    monkeypatch.setattr(sys, "stdout", Full())
    log.info("a line")
    log.info("another")  # dropped, no second warning
    err = capsys.readouterr().err
    assert err.count("demidcd: warning: the log cannot be written") == 1 and log.quiet



def test_learners_crf_does_not_list_options_it_does_not_read(capsys):
    assert main(["learners", "crf"]) == 0
    out = capsys.readouterr().out
    assert "--c1" in out and "--time-limit" in out and "--seed" in out
    assert "--C " not in out and "--tol" not in out and "--max-epochs" not in out
    assert main(["learners"]) == 0
    assert "lbfgs = crf" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--nbest", "1" + "0" * 400], ("--nbest", "401 digits")),
    (["--threads", "1" + "0" * 400], ("--threads", "401 digits")),
])
def test_predict_refuses_huge_integers_in_one_line(corpus, capsys, tmp_path, args, words):
    m = tmp_path / "m.npz"
    assert main(["train", "--train", str(corpus / "train.txt"), "--threads", "1",
                 "--max-epochs", "1", "--model", str(m), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(m), "--data", str(corpus / "test.txt"),
                 "--out", str(tmp_path / "o.txt"), *args]) == 2
    _one_error_line(capsys.readouterr().err, *words)


def test_ulimit_f_set_up_repeated_is_said_and_training_goes_on(corpus):
    """Under ``ulimit -f`` the set-up's child could not hand its arrays back (a temporary
    file): the set-up ran again, its lines twice, unexplained; now one warning says so."""
    import subprocess

    from cli_run import CLI

    cmd = " ".join([*CLI, "train", "--train", str(corpus / "train.txt"), "--threads", "1",
                    "--max-epochs", "1"])
    r = subprocess.run(["bash", "-c", f"ulimit -f 1; {cmd}"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("the set-up could not be handed to the training process") == 1
    assert "Traceback" not in r.stderr and "stopped:" in r.stdout
