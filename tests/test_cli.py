"""The command line end to end on synthetic data, and its error contract."""

import json

import numpy as np
import pytest
from cli_run import run

from demidcd.api import SequenceTagger
from demidcd.cli import main
from demidcd.errors import ModelFileError
from demidcd.synthetic import generate


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    assert main(["generate", "--out-dir", str(d), "--sentences", "300", "--quiet"]) == 0
    return d


@pytest.fixture(scope="module")
def model(corpus_dir):
    m = corpus_dir / "m.npz"
    r = run("train", "--train", str(corpus_dir / "train.txt"), "--dev", str(corpus_dir / "dev.txt"),
            "--test", str(corpus_dir / "test.txt"), "--threads", "1", "--max-epochs", "5",
            "--model", str(m), "--log-json", str(corpus_dir / "log.jsonl"))
    assert r.returncode == 0, r.stderr
    assert "test accuracy:" in r.stdout and "average CPU:" in r.stdout
    return m


def test_train_evaluate_predict_roundtrip(corpus_dir, model, tmp_path):
    recs = [json.loads(x) for x in (corpus_dir / "log.jsonl").read_text().splitlines()]
    assert len(recs) == 5 and all("dev" in r and "active" in r for r in recs)
    r = run("evaluate", "--model", str(model), "--data", str(corpus_dir / "test.txt"))
    assert r.returncode == 0 and r.stdout.startswith("accuracy: ")
    acc = float(r.stdout.split()[1].rstrip("%"))
    assert 50 < acc < 100
    out = tmp_path / "pred.txt"
    r = run("predict", "--model", str(model), "--data", str(corpus_dir / "test.txt"),
            "--out", str(out))
    assert r.returncode == 0, r.stderr
    gold = [ln.split() for ln in (corpus_dir / "test.txt").read_text().splitlines() if ln]
    pred = [ln.split() for ln in out.read_text().splitlines() if ln]
    assert [g[0] for g in gold] == [p[0] for p in pred]
    agree = np.mean([g[-1] == p[-1] for g, p in zip(gold, pred, strict=True)])
    assert abs(100 * agree - acc) < 0.01


def test_save_load_predicts_identically(corpus_dir, model, tmp_path):
    est = SequenceTagger.load(model)
    X = generate(n_sentences=30, seed=11).tokens
    est.save(tmp_path / "again.npz")
    again = SequenceTagger.load(tmp_path / "again.npz")
    assert est.predict(X) == again.predict(X)
    np.testing.assert_array_equal(est.coef_, again.coef_)


def test_truncated_and_foreign_model_files_are_rejected(model, tmp_path):
    data = model.read_bytes()
    for cut in (len(data) // 2, 100, 0):
        bad = tmp_path / f"t{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(ModelFileError):
            SequenceTagger.load(bad)
    r = run("evaluate", "--model", str(tmp_path / f"t{len(data) // 2}.npz"), "--data",
            str(model))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("field, value", [
    ("column", [1]), ("column", {}), ("column", 0), ("column", "lemma"), ("feature_columns", "2"),
    ("feature_columns", [2, None]), ("format", "csv"), ("encoding", 5),
    ("encoding", "no-such-codec"), ("template", 3), ("pos_column", "lemma")])
def test_hand_edited_data_options_are_named(cli, model, tmp_path, corpus_dir, field, value):
    # a hand-edited field (column: [1]) gave a TypeError from inside the reader, or an error
    # about an option the user never gave: the loader checks each data option the commands
    # read and names the model file and the field
    z = np.load(model)
    arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta.json"].tobytes())
    meta["data_options"][field] = value
    arrays["meta.json"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    edited = tmp_path / "edited.npz"
    np.savez(edited, **arrays)
    out = tmp_path / "pred.txt"
    data = corpus_dir / "test.txt"
    for cmd in (["evaluate", "--model", edited, "--data", data],
                ["predict", "--model", edited, "--data", data, "--out", out]):
        code, _, err = cli(*cmd)
        assert code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"demidcd: error: {edited}: corrupt model metadata "
                              f"(data_options.{field} is {json.dumps(value)}, not "), err
    assert not out.exists()
    with pytest.raises(ModelFileError, match=f"data_options.{field} is"):
        SequenceTagger.load(edited)


@pytest.mark.parametrize("field, value, must", [
    ("label_scheme", -1, "a string"), ("label_scheme", True, "a string"),
    ("min_count", "2", "a number")])
def test_hand_edited_parameters_are_named(cli, tmp_path, field, value, must):
    # parameters.label_scheme: -1 gave "AttributeError: 'int' object has no attribute 'lower'"
    # from evaluate: each saved constructor argument must have a type the argument takes
    from demidcd.api import ChunkTagger

    rng = np.random.default_rng(0)
    tags = [["B-NP", "I-NP", "O", "B-VP"][i % 4] for i in range(8)]
    X = [[f"w{rng.integers(20)}" for _ in tags] for _ in range(20)]
    data = tmp_path / "chunks.txt"
    data.write_text("".join("".join(f"{w} {t}\n" for w, t in zip(s, tags, strict=True)) + "\n"
                            for s in X))
    model = tmp_path / "chunk.npz"
    ChunkTagger(min_count=1, max_epochs=2).fit(X, [tags] * len(X)).save(model)
    z = np.load(model)
    arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta.json"].tobytes())
    meta["parameters"][field] = value
    arrays["meta.json"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(model, **arrays)
    code, _, err = cli("evaluate", "--model", model, "--data", data)
    assert (code, err.splitlines()) == (2, [
        f"demidcd: error: {model}: corrupt model metadata (parameters.{field} is "
        f"{json.dumps(value)}, not {must})"])


@pytest.mark.parametrize("content,line", [("a B\nb\n", 2), ("a B\n\nc D E\n", 3)])
def test_reader_errors_name_file_and_line(tmp_path, content, line):
    f = tmp_path / "bad.txt"
    f.write_text(content)
    r = run("train", "--train", str(f), "--threads", "1", "--model", str(tmp_path / "x.npz"))
    assert r.returncode == 2
    assert f"bad.txt:{line}:" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize("opt", [["--C", "0"], ["--C", "-1"], ["--threads", "0"]])
def test_bad_options_exit_2(opt):
    r = run("train", *opt, "--max-epochs", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--" in r.stderr


@pytest.mark.parametrize("alg,threads,learners", [("dcd", "1", "auto"), ("demi-dcd", "2", "1"),
                                                  ("demi-dcd", "2", "2")])
def test_entity_relation_end_to_end(tmp_path, alg, threads, learners):
    from test_entity_relation import SAMPLE
    corp = tmp_path / "s.corp"
    corp.write_text(SAMPLE * 3)
    m = tmp_path / "er.npz"
    r = run("train", "--task", "entity-relation", "--train", str(corp), "--algorithm", alg,
            "--threads", threads, "--learners", learners, "--time-limit", "60", "--model", str(m))
    assert r.returncode == 0, r.stderr
    for solver in ("exact", "cbc"):
        r = run("evaluate", "--model", str(m), "--data", str(corp), "--ilp-solver", solver)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].startswith("entity F1: 100.00") and lines[1].startswith("relation F1: ")
    out = tmp_path / "pred.corp"
    r = run("predict", "--model", str(m), "--data", str(corp), "--out", str(out))
    assert r.returncode == 0 and out.read_text() == corp.read_text()


def test_evaluation_of_a_cbc_trained_model_defaults_to_exact(tmp_path):
    """evaluate / evaluate-snapshots / predict solve with exact unless --ilp-solver is given;
    both reach the same optima, so the reports agree."""
    from test_entity_relation import SAMPLE

    from demidcd.cli import build_parser, load_model

    corp = tmp_path / "s.corp"
    corp.write_text(SAMPLE * 3)
    m = tmp_path / "er.npz"
    r = run("train", "--task", "entity-relation", "--train", str(corp), "--algorithm", "dcd",
            "--ilp-solver", "cbc", "--ilp-time-limit", "5", "--time-limit", "60",
            "--model", str(m))
    assert r.returncode == 0, r.stderr
    parser = build_parser()
    for extra, want, cap in (([], "exact", 2.0), (["--ilp-solver", "cbc"], "cbc", 2.0),
                             (["--ilp-solver", "highs", "--ilp-time-limit", "0"], "highs",
                              None)):
        for cmd in (["evaluate", "--model", str(m), "--data", str(corp)],
                    ["predict", "--model", str(m), "--data", str(corp), "--out", "x"]):
            _, est, _, _ = load_model(parser.parse_args(cmd + extra))
            assert est.solver == want
            if want != "highs":
                task = est.training_task([])
                assert task.solver_name == want and task.ilp_time_limit == cap
    outs = [run("evaluate", "--model", str(m), "--data", str(corp), *extra)
            for extra in ([], ["--ilp-solver", "cbc"])]
    assert all(o.returncode == 0 for o in outs), [o.stderr for o in outs]
    assert outs[0].stdout == outs[1].stdout
    r = run("train", "--task", "entity-relation", "--train", str(corp), "--ilp-time-limit", "-1")
    assert r.returncode == 2 and "--ilp-time-limit" in r.stderr and "Traceback" not in r.stderr


def test_split_command_is_seeded(tmp_path):
    from test_entity_relation import SAMPLE
    corp = tmp_path / "s.corp"
    corp.write_text(SAMPLE * 4)
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert main(["split", str(corp), "--out-dir", str(d), "--seed", "3", "--quiet"]) == 0
    assert (a / "test.corp").read_text() == (b / "test.corp").read_text()
    assert (a / "train.corp").read_text().count("\n\n") > 0


def test_every_estimator_option_given_reaches_the_estimator(cli, monkeypatch, tmp_path):
    """The learning and output options that are estimator parameters (``--cpu-log``,
    ``--eval-every``, ``--snapshot-every``, ``--save-state``, ``--C``, …) reach the estimator the
    command builds: ``--cpu-log`` once wrote nothing because it was dropped on the way."""
    from demidcd.estimators.base import StructuredEstimator

    seen = {}

    def capture(self, *a, **k):
        seen.update(self.get_params())
        raise SystemExit(9)

    monkeypatch.setattr(StructuredEstimator, "plan", capture)
    cpu = tmp_path / "cpu.csv"
    with pytest.raises(SystemExit):
        cli("train", "--cpu-log", cpu, "--eval-every", "3", "--snapshot-every", "2",
            "--save-state", "--C", "0.7", "--max-epochs", "4", "--model", tmp_path / "m.npz")
    assert seen["cpu_log"] == str(cpu) and seen["eval_every"] == 3
    assert seen["snapshot_every"] == 2 and seen["save_state"] is True
    assert seen["C"] == 0.7 and seen["max_epochs"] == 4


def test_cpu_log_is_written(cli, tmp_path):
    cpu = tmp_path / "cpu.csv"
    code, _, err = cli("train", "--threads", "1", "--max-epochs", "2", "--cpu-log", cpu, "--quiet")
    assert code == 0, err
    assert cpu.read_text().startswith("seconds,total")


def test_the_train_command_sets_numba_up_without_scipy(corpus_dir, tmp_path):
    """The command's own process hides SciPy while numba imports and sets its compiler up
    (kernels call no BLAS; the import cost a quarter of a second of every start-up), before
    the set-up child forks, and SciPy is importable again afterwards. One learner: no kernels
    load beside the set-up, so the training process sets numba up itself unless it did first.
    The report is an exit handler: it runs although the command leaves without the
    interpreter's shutdown (the handlers are shared memory's and temporary files' safety nets)."""
    import subprocess
    import sys
    import textwrap

    pytest.importorskip("scipy.linalg")
    code = textwrap.dedent("""
        import atexit, sys
        def report():
            seen = "scipy.linalg" in sys.modules
            import scipy.linalg  # noqa: F401
            print(f"scipy.linalg imported during the command: {seen}", file=sys.stderr)
        atexit.register(report)
        sys.argv = ["demidcd"] + sys.argv[1:]
        from demidcd.__main__ import run
        run()
    """)
    for threads in ("1", "2"):
        r = subprocess.run([sys.executable, "-c", code, "train", "--train",
                            str(corpus_dir / "train.txt"), "--threads", threads,
                            "--max-epochs", "1", "--model", str(tmp_path / "m.npz")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "scipy.linalg imported during the command: False" in r.stderr, r.stderr
