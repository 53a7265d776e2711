"""Issue 33: what a new user and the real scorers found. Predicting into a pipe and ``-``, long
sentences refused early and signals honoured during decoding, early warnings about the data, one
training per model file, a model kept when its file cannot be written, a model evaluated on a
file of another format or encoding, and output-directory errors that say why."""

from __future__ import annotations

import errno
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cli_run import CLI, run, spawn, train_model

from demidcd.cli import main
from demidcd.io import text_source
from demidcd.io.tagged import read_tagged


@pytest.fixture(scope="module")
def model(corpus: Path) -> Path:
    return train_model(corpus, max_epochs=2)


def _shell(cmd: str, **kw) -> subprocess.CompletedProcess:
    """``cmd`` in bash, with ``DEMIDCD`` the command line of this tree."""
    demidcd = " ".join(CLI)
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd.replace("DEMIDCD", demidcd)],
                          capture_output=True, text=True, timeout=120, **kw)


# ================================================================== item 3: pipes and '-'
def test_predict_into_a_pipe_and_dash(tmp_path, corpus, model):
    test = corpus / "test.txt"
    ref = tmp_path / "ref.txt"
    r = run("predict", "--model", str(model), "--data", str(test), "--out", str(ref))
    assert r.returncode == 0, r.stderr
    n_ref = sum(1 for ln in ref.read_text().splitlines() if ln.strip())
    for out in ("/dev/stdout", "-"):
        r = _shell(f"DEMIDCD predict --model {model} --data {test} --out {out} | grep -c .")
        assert r.returncode == 0, r.stderr
        assert int(r.stdout) == n_ref, (out, r.stdout, r.stderr)
        assert "wrote standard output" in r.stderr or "wrote /dev/stdout" in r.stderr
    # the pipe carries only the data: byte for byte the file predict writes
    r = _shell(f"DEMIDCD predict --model {model} --data - --out - <{test}")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ref.read_text() and "wrote" in r.stderr
    assert not (Path.cwd() / "-").exists()


def test_dev_stdout_redirected_to_a_file_is_written_in_place(tmp_path, corpus, model):
    """No temporary file and rename: the shell's file gets the data (appended with >>)."""
    out = tmp_path / "o.txt"
    out.write_text("first line\n")
    r = _shell(f"DEMIDCD predict --model {model} --data {corpus / 'test.txt'} "
               f"--out /dev/stdout >>{out}")
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert text.startswith("first line\n") and text.count("\n") > 100
    assert "wrote" not in text and "wrote" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.txt"]


def test_a_closed_pipe_ends_predict_quietly(tmp_path, corpus, model):
    big = tmp_path / "big.txt"  # more than a pipe's 64 KiB buffer
    big.write_text((corpus / "test.txt").read_text() * 20)
    r = _shell(f"DEMIDCD predict --model {model} --data {big} --out - "
               "| head -1; echo status ${PIPESTATUS[0]}")
    assert r.stdout.count("\n") == 2 and "status 141" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr and "error" not in r.stderr, r.stderr


def test_data_dash_reads_stdin_and_tells_the_format(monkeypatch, tmp_path):
    conllu = "# sent_id = 1\n1\tHe\the\tPRON\tPRP\t_\t2\tnsubj\t_\t_\n" \
             "2\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\t_\n\n"
    for text, fmt, tags in ((conllu, "conllu", [["PRP", "VBZ"]]),
                            ("He PRP\nruns VBZ\n\n", "columns", [["PRP", "VBZ"]])):
        monkeypatch.setattr(text_source, "_STDIN_DATA", [])
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        c = read_tagged("-", fmt="auto", column="xpos" if fmt == "conllu" else None)
        assert c.fmt == fmt and c.tags == tags and c.path == "<stdin>"
    monkeypatch.setattr(text_source, "_STDIN_DATA", [])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("é X\n".encode("latin-1"))))
    assert read_tagged("-", fmt="auto", encoding="latin-1").tokens == [["é"]]
    monkeypatch.setattr(text_source, "_STDIN_DATA", [])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a B\nc\n")))
    with pytest.raises(Exception, match=r"^<stdin>:2: "):
        read_tagged("-", fmt="auto")


def test_evaluate_reads_stdin(corpus, model):
    test = corpus / "test.txt"
    ref = run("evaluate", "--model", str(model), "--data", str(test))
    r = _shell(f"DEMIDCD evaluate --model {model} --data - <{test}")
    assert r.returncode == 0 and ref.returncode == 0, r.stderr
    assert r.stdout == ref.stdout and "accuracy" in r.stdout


def test_model_cannot_go_to_stdout(corpus, cli):
    code, out, err = cli("train", "--train", corpus / "train.txt", "--model", "-")
    assert code == 2 and "--model -" in err and "data:" not in out


# ================================================================== item 13: why a directory fails
def _mkdir_error(where: Path) -> str | None:
    """What ``mkdir`` says in ``where`` (None: it works here, e.g. as root in a 0o500 dir)."""
    probe = where / "demidcd-probe"
    try:
        probe.mkdir()
    except OSError as e:
        return e.strerror
    probe.rmdir()
    return None


@pytest.mark.parametrize("where", ["sysfs", "read-only dir", "under a file"])
def test_split_and_generate_say_why_an_out_dir_fails(tmp_path, where, cli):
    from test_entity_relation import SAMPLE

    corp = tmp_path / "s.corp"
    corp.write_text(SAMPLE * 4)
    if where == "sysfs":
        parent = Path("/sys")
    elif where == "read-only dir":
        parent = tmp_path / "ro"
        parent.mkdir(mode=0o500)
    else:
        parent = corp
    reason = "is not a directory" if where == "under a file" else _mkdir_error(parent)
    if reason is None:  # root writes in a 0o500 directory: that place is writable then
        code, _, err = cli("split", corp, "--out-dir", parent / "out")
        assert code == 0, err
        return
    for cmd in (("split", corp), ("generate", "--sentences", "20")):
        code, out, err = cli(*cmd, "--out-dir", parent / "out")
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith("demidcd: error: --out-dir ") and reason in err, err
        assert "wrote" not in out


# ================================================================== item 11: one training per model
def test_a_second_training_of_one_model_fails_at_once(tmp_path, corpus, cli):
    m = tmp_path / "m.npz"
    log = tmp_path / "first.log"
    with open(log, "w") as f:
        first = spawn("train", "--train", str(corpus / "train.txt"), "--threads", "1",
                      "--time-limit", "60", "--tol", "1e-12", "--model", str(m), stdout=f)
    try:
        lock = tmp_path / "m.npz.lock"
        t0 = time.monotonic()
        while not re.search(r"^iter", log.read_text(), re.M) and time.monotonic() - t0 < 60:
            assert first.poll() is None, first.communicate()[1]
            time.sleep(0.02)
        assert lock.read_text().strip() == str(first.pid)
        code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                             "--max-epochs", "1", "--model", m)
        assert code == 2 and err.count("\n") == 1, err
        assert f"another training (pid {first.pid})" in err and "--model" in err, err
        assert "data:" not in out and not m.exists()
        first.send_signal(signal.SIGINT)  # the first run still ends normally, model written
        assert first.wait(60) == 130, first.communicate()[1]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert m.exists() and not lock.exists()
    code, _, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                       "--max-epochs", "1", "--model", m, "--quiet")
    assert code == 0 and not lock.exists(), err
    code, _, err = cli("train", "--train", tmp_path / "missing.txt", "--model", m)
    assert code == 2 and not lock.exists(), err  # removed on an error too


def test_a_model_that_cannot_be_written_is_kept(tmp_path, corpus, cli, monkeypatch):
    """Disk full when the model is written after training: saved beside it, the error says
    where."""
    real_fsync = os.fsync

    def full_disk(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".m.npz."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    m = tmp_path / "m.npz"
    code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                         "--max-epochs", "2", "--min-count", "1", "--model", m)
    assert code == 2 and err.count("\n") == 1, err
    kept = Path(re.search(r"the model is kept in (\S+)$", err.strip()).group(1))
    assert "No space left on device" in err and kept.parent == tmp_path and kept.exists()
    assert not m.exists() and "model written" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [kept.name]  # no temp, no lock
    monkeypatch.setattr(os, "fsync", real_fsync)
    code, out, err = cli("evaluate", "--model", kept, "--data", corpus / "dev.txt")
    assert code == 0 and "accuracy" in out, err


def test_model_to_dev_full_is_kept_in_tmpdir(tmp_path, corpus, monkeypatch, cli):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code, out, err = cli("train", "--train", corpus / "train.txt", "--threads", "1",
                         "--max-epochs", "1", "--model", "/dev/full", "--quiet")
    assert code == 2 and "No space left on device" in err, err
    kept = Path(err.strip().rsplit(" ", 1)[1])
    assert kept.parent == tmp_path and kept.stat().st_size > 0


# ================================================================== item 10: early label warnings
def test_dev_labels_unknown_to_training_are_reported_before_training(tmp_path, corpus, cli):
    dev = tmp_path / "dev.txt"
    lines = (corpus / "dev.txt").read_text().splitlines()
    changed = [ln.rsplit(" ", 1)[0] + " XX" if ln.endswith(" VERB") else ln for ln in lines]
    dev.write_text("\n".join(changed) + "\n")
    n_xx = sum(ln.endswith(" XX") for ln in changed)
    n_tok = sum(1 for ln in changed if ln.strip())
    code, out, err = cli("train", "--train", corpus / "train.txt", "--dev", dev, "--threads",
                         "1", "--max-epochs", "1", "--time-limit", "0.001")
    assert code == 0, err
    warn = [ln for ln in err.splitlines() if "--dev" in ln]
    assert len(warn) == 1 and f"{n_xx:,} of {n_tok:,} tokens" in warn[0], err
    assert "1 label: XX" in warn[0] and str(dev) in warn[0]
    # before training: stderr and stdout interleave in a real process; the warning must come
    # before the first iteration line
    r = run("train", "--train", str(corpus / "train.txt"), "--dev", str(dev), "--threads", "1",
            "--max-epochs", "1", stderr=subprocess.STDOUT)
    text = r.stdout
    assert text.index("demidcd: warning: --dev") < text.index("iter ")


def test_a_single_training_label_is_said_at_once(tmp_path, corpus, cli):
    one = tmp_path / "one.txt"
    one.write_text("".join(f"{ln.split()[0]} N\n" if ln.strip() else "\n"
                           for ln in (corpus / "train.txt").read_text().splitlines()))
    code, out, err = cli("train", "--train", one, "--threads", "1", "--max-epochs", "1",
                         "--model", tmp_path / "m.npz")
    assert code == 0, err
    assert "nothing to learn" in err and "'N'" in err and str(one) in err and "data:" in out


# ============================================================ item 12: other formats, encodings
def _to_conllu(columns: Path, out: Path) -> Path:
    """The ``word TAG`` file as CoNLL-U with XPOS = TAG and UPOS = ``u`` + TAG."""
    lines, i = [], 0
    for ln in columns.read_text().splitlines():
        if not ln.strip():
            lines.append("")
            i = 0
            continue
        i += 1
        word, tag = ln.split()
        lines.append(f"{i}\t{word}\t_\tu{tag}\t{tag}\t_\t{i - 1}\tdep\t_\t_")
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.fixture(scope="module")
def xpos_model(corpus: Path, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("xpos")
    m = d / "x.npz"
    assert main(["train", "--train", str(_to_conllu(corpus / "train.txt", d / "t.conllu")),
                 "--column", "xpos", "--threads", "1", "--max-epochs", "2", "--min-count", "1",
                 "--model", str(m), "--quiet"]) == 0
    return m


def test_a_conllu_model_evaluates_a_columns_file_without_column(corpus, xpos_model, cli):
    dev = corpus / "dev.txt"  # word TAG: the label is the last column
    code, out, err = cli("evaluate", "--model", xpos_model, "--data", dev, "--format", "columns")
    assert code == 0, err
    assert "trained on CoNLL-U (labels in XPOS)" in err and "last column" in err
    code, same, err2 = cli("evaluate", "--model", xpos_model, "--data", dev, "--column", "2")
    assert code == 0 and same == out and "trained on CoNLL-U" not in err2
    assert float(re.search(r"accuracy: ([\d.]+)%", out).group(1)) > 50


def test_a_columns_model_on_conllu_says_which_column(tmp_path, corpus, cli):
    conllu = _to_conllu(corpus / "dev.txt", tmp_path / "d.conllu")
    three = tmp_path / "three.txt"  # word POS TAG, as CoNLL-2000
    three.write_text("".join(f"{ln.split()[0]} P {ln.split()[1]}\n" if ln.strip() else "\n"
                             for ln in (corpus / "train.txt").read_text().splitlines()))
    m = tmp_path / "c.npz"
    assert cli("train", "--train", three, "--feature-columns", "2", "--threads", "1",
               "--max-epochs", "1", "--model", m, "--quiet")[0] == 0
    code, _, err = cli("evaluate", "--model", m, "--data", conllu)
    assert code == 2 and err.count("\n") == 1, err
    assert "trained on a columns file with feature columns 2" in err
    assert "--feature-columns upos or xpos" in err and str(conllu) in err
    code, _, err = cli("evaluate", "--model", m, "--data", conllu, "--feature-columns", "2")
    assert code == 2 and "bad feature column 2" in err and "CoNLL-U" in err, err
    m3 = tmp_path / "c3.npz"
    assert cli("train", "--train", three, "--column", "3", "--threads", "1", "--max-epochs",
               "1", "--model", m3, "--quiet")[0] == 0
    code, _, err = cli("evaluate", "--model", m3, "--data", conllu)
    assert code == 2 and "labels in column 3" in err and "--column upos or xpos" in err, err
    code, out, err = cli("evaluate", "--model", m3, "--data", conllu, "--column", "xpos")
    assert code == 0 and "accuracy" in out, err


def test_a_different_encoding_warns(tmp_path, cli):
    words = ["España", "está", "niño", "año", "él", "canción"]
    text = "".join(f"{w} {t}\n" + ("\n" if k % 3 == 2 else "")
                   for k, (w, t) in enumerate(zip(words * 10, ["A", "B"] * 30, strict=True)))
    utf8 = tmp_path / "u.txt"
    utf8.write_bytes(text.encode("utf-8"))
    m = tmp_path / "m.npz"
    code, _, err = cli("train", "--train", utf8, "--threads", "1", "--max-epochs", "1",
                       "--min-count", "1", "--model", m)
    assert code == 0 and "warning" not in err, err
    code, _, err = cli("evaluate", "--model", m, "--data", utf8, "--encoding", "latin-1")
    assert code == 0, err
    warn = err.strip().splitlines()
    assert any(f"{utf8}:1: the file is valid UTF-8 but is read as latin-1" in w
               and "'EspaÃ±a' would be 'España'" in w for w in warn), err
    assert any("trained on text read as utf-8, --encoding latin-1 differs" in w
               for w in warn), err
    code, _, err = cli("train", "--train", utf8, "--encoding", "latin-1", "--threads", "1",
                       "--max-epochs", "1", "--model", tmp_path / "l.npz")
    assert code == 0 and "valid UTF-8 but is read as latin-1" in err, err
    latin = tmp_path / "l.txt"  # the reverse: latin-1 bytes read as UTF-8 are refused
    latin.write_bytes(text.encode("latin-1"))
    code, _, err = cli("evaluate", "--model", m, "--data", latin)
    assert code == 2 and f"{latin}:1: not valid utf-8" in err and "latin-1" in err, err
    code, _, err = cli("evaluate", "--model", m, "--data", latin, "--encoding", "latin-1")
    assert code == 0 and "valid UTF-8" not in err and "differs" in err, err


# ================================================================== item 4: long input
def _long_conllu(path: Path, n: int, short_before: int = 0) -> Path:
    """``short_before`` 3-word sentences, then one ``n``-word sentence (a chain, as the
    acceptance's)."""
    out = []
    for _ in range(short_before):
        out += [f"{i}\tw{i}\t_\tNOUN\tNN\t_\t{i - 1}\tdep\t_\t_" for i in range(1, 4)] + [""]
    out += [f"{i}\tword{i % 50}\t_\tNOUN\tNN\t_\t{i - 1}\tdep\t_\t_" for i in range(1, n + 1)]
    path.write_text("\n".join(out) + "\n\n")
    return path


@pytest.fixture(scope="module")
def dep_model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dep")
    m = d / "d.npz"
    assert main(["train", "--task", "dependency", "--train",
                 str(_long_conllu(d / "t.conllu", 12, short_before=20)), "--threads", "1",
                 "--max-epochs", "2", "--model", str(m), "--quiet"]) == 0
    return m


def test_a_long_sentence_is_refused_before_any_work(tmp_path, dep_model, cli):
    from demidcd.tasks import get_task

    limit = get_task("dependency").max_sentence_length
    long = _long_conllu(tmp_path / "long.conllu", limit + 200, short_before=2)
    expect = (f"{long}:9: sentence of {limit + 200:,} tokens is longer than "
              f"--max-sentence-length {limit:,} (dependency parsing costs O(n^3)")
    for cmd in (["train", "--task", "dependency", "--train", long, "--model", tmp_path / "m"],
                ["evaluate", "--model", dep_model, "--data", long],
                ["predict", "--model", dep_model, "--data", long, "--out", tmp_path / "o"]):
        code, out, err = cli(*cmd)
        assert code == 2 and err.count("\n") == 1 and err.startswith("demidcd: error: "), err
        assert expect in err and "raise --max-sentence-length" in err, err
        assert "data:" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.conllu"]
    code, out, err = cli("evaluate", "--model", dep_model, "--data", long,
                         "--max-sentence-length", str(limit // 2))  # the option wins
    assert code == 2 and f"--max-sentence-length {limit // 2:,}" in err, err
    # a linear-time task keeps a large limit; the help shows each task's
    assert get_task("sequence").max_sentence_length >= 5000
    r = run("predict", "--help")
    assert f"dependency {limit:,} (dependency parsing costs O(n^3)" in " ".join(r.stdout.split())


@pytest.mark.parametrize("command, sig", [("predict", signal.SIGTERM),
                                          ("evaluate", signal.SIGINT)])
def test_a_signal_during_a_long_parse_ends_it_at_once(tmp_path, dep_model, command, sig):
    """The kernel parsing a 2,000-word sentence (tens of seconds) never returns to Python:
    the signal is still honoured at once (within a second on a quiet machine), exit 130, no
    output or temporary file."""
    psutil = pytest.importorskip("psutil")
    long = _long_conllu(tmp_path / "long.conllu", 2000)
    out = tmp_path / "out.conllu"
    cmd = [*CLI, command, "--model", str(dep_model), "--data", str(long),
           "--max-sentence-length", "3000"] + (["--out", str(out)] if command == "predict" else [])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc = psutil.Process(p.pid)
        t0 = time.time()
        while time.time() - t0 < 120:  # until a thread other than the main one computes
            if p.poll() is not None or any(t.id != p.pid and t.user_time > 0.5
                                           for t in proc.threads()):
                break
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()
        t1 = time.time()
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
        latency = time.time() - t1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130 and err.strip() == "demidcd: interrupted", err
    # within a second on a quiet machine; the bound holds on a loaded one and still fails a
    # signal left waiting for the kernel (tens of seconds)
    assert latency < 8.0, latency
    assert sorted(x.name for x in tmp_path.iterdir()) == ["long.conllu"]


# end to end (processes, signals, Ray, benchmarks): deselected by default, CI's second step
# (python -m pytest -q -m slow)
pytestmark = pytest.mark.slow
