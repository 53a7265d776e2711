"""Reliability (issue 8): bad input on the command line, unseen labels, determinism, and faults
injected into DEMI-DCD runs (SIGTERM, a double SIGINT, SIGKILL of the parent).

Every bad input must give exit status 2, exactly one stderr line naming the file and line (or
the option), no traceback, and nothing in the output directory (no model, no prediction, no
temporary file). Every fault must end with no process left and no shared-memory segment of the
run left in /dev/shm. The tests in test_demi_dcd.py already cover a single SIGINT, a SIGKILLed
worker and an exception in a worker; these do not repeat them. Leaks are looked for by owner:
segments are named ``demidcd-<parent pid>-…`` and processes are the run's descendants, so other
runs on the machine do not disturb the checks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest
from cli_run import CLI, run, train_model

from demidcd.api import EntityRelationExtractor, SequenceTagger
from demidcd.io.conll04 import read_conll04
from demidcd.io.model import load_model
from demidcd.primitives.shm import list_segments


def _tok(i: int | str, word: str = "w", upos: str = "NOUN") -> str:
    return f"{i}\t{word}\t{word.lower()}\t{upos}\tNN\t_\t0\troot\t_\t_"


def _conllu(*sentences: list[str]) -> str:
    return "".join("\n".join(s) + "\n\n" for s in sentences)


OK_COLUMNS = "The DET\ncat NOUN\nsat VERB\n\nA DET\ndog NOUN\n"
OK_CONLL04 = ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n7\tO\t1\tO\tVBZ\tlives\tO\tO\tO\n"
              "7\tLoc\t2\tO\tNNP\tLondon\tO\tO\tO\n\n0\t2\tLive_In\n\n")


# ================================================================== a small trained model
@pytest.fixture(scope="module")
def model(corpus: Path) -> Path:
    return train_model(corpus, max_epochs=2)


@pytest.fixture(scope="module")
def er_model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("er")
    (d / "s.corp").write_text(OK_CONLL04 * 2)
    est = EntityRelationExtractor(max_epochs=2).fit(read_conll04(d / "s.corp"))
    est.save(d / "er.npz")
    return d / "er.npz"


def _model_variant(model: Path, **meta_changes) -> bytes:
    """The bytes of ``model`` with metadata entries replaced (or the weights, via ``w=``)."""
    import io

    with np.load(model, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta.json"].tobytes())
    if "w" in meta_changes:
        arrays["w"] = meta_changes.pop("w")
    meta.update(meta_changes)
    arrays["meta.json"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


# ================================================================== bad input on the command line
TRAIN = ["train", "--threads", "1", "--max-epochs", "1", "--model", "{out}/m.npz"]
ER = [*TRAIN, "--task", "entity-relation"]
EVAL = ["evaluate", "--data", "{in}/d.txt", "--model"]
PRED = ["predict", "--data", "{in}/d.txt", "--out", "{out}/p.txt", "--model"]
LATIN_CONLLU = _tok(1, "A").encode() + b"\n" + _tok(2, "caf\xe9x").encode("latin-1") + b"\n\n"


def _good(ctx) -> bytes:
    return ctx["model"].read_bytes()


def _w(ctx) -> np.ndarray:
    return np.load(ctx["model"])["w"]


# (id, input files, argv, substrings the one stderr line must contain); ``{in}``/``{out}`` are
# the case's input and (initially empty) output directories; a callable file content gets
# {"model": trained sequence model, "er_model": trained entity-relation model}.
CASES = [
    # malformed lines and wrong column counts
    ("conllu-bad-id", {"bad.conllu": "# x\n" + _tok(1) + "\nX\tB\tb\tNOUN\tNN\t_\t1\tdep\t_\t_\n"},
     [*TRAIN, "--train", "{in}/bad.conllu"], ["{in}/bad.conllu:3:", "bad token id"]),
    ("conllu-id-order", {"o.conllu": _conllu([_tok(1), _tok(3)])},
     [*TRAIN, "--train", "{in}/o.conllu"], ["{in}/o.conllu:2:", "out of order"]),
    ("conllu-4-columns", {"cols.conllu": "1\tThe\tthe\tDET\n"},
     [*TRAIN, "--train", "{in}/cols.conllu"], ["{in}/cols.conllu:1:", "found 4"]),
    ("conllu-11-columns", {"c.conllu": _conllu([_tok(1), _tok(2) + "\tx"])},
     [*TRAIN, "--train", "{in}/c.conllu"], ["{in}/c.conllu:2:", "found 11"]),
    ("columns-count", {"c.txt": "a B\nb C\n\nc D E\n"},
     [*TRAIN, "--train", "{in}/c.txt"], ["{in}/c.txt:4:", "expected 2 columns"]),
    ("columns-one", {"c.txt": "\na\nb\n"},
     [*TRAIN, "--train", "{in}/c.txt"], ["{in}/c.txt:2:", "at least 2 columns"]),
    ("columns-label-column", {"c.txt": "a B\n"},
     [*TRAIN, "--train", "{in}/c.txt", "--column", "5"], ["{in}/c.txt:1:", "label column"]),
    ("conllu-empty-label", {"l.conllu": _conllu([_tok(1), _tok(2, upos="_")])},
     [*TRAIN, "--train", "{in}/l.conllu"], ["{in}/l.conllu:2:", "empty label"]),
    ("conllu-empty-word", {"l.conllu": _conllu([_tok(1), _tok(2, word="")])},
     [*TRAIN, "--train", "{in}/l.conllu"], ["{in}/l.conllu:2:", "empty word"]),
    ("er-malformed", {"bad.corp": OK_CONLL04 + "8\tPeop\t0\tO\tNNP\tJohn\tO\tO\n"},
     [*ER, "--train", "{in}/bad.corp"], ["{in}/bad.corp:7:", "columns"]),
    ("er-bad-relation", {"bad.corp": OK_CONLL04.replace("Live_In", "Loves")},
     [*ER, "--train", "{in}/bad.corp"], ["{in}/bad.corp:5:", "relation type"]),
    # empty files, empty sentences
    ("empty-conllu", {"empty.conllu": ""},
     [*TRAIN, "--train", "{in}/empty.conllu"], ["{in}/empty.conllu: no sentences"]),
    ("empty-columns", {"empty.txt": ""},
     [*TRAIN, "--train", "{in}/empty.txt"], ["{in}/empty.txt: no sentences"]),
    ("blank-sentences", {"b.txt": "\n\n \n\t\n"},
     [*TRAIN, "--train", "{in}/b.txt"], ["{in}/b.txt: no sentences"]),
    ("comment-only-sentences", {"c.conllu": "# sent_id = 1\n\n# sent_id = 2\n# text =\n\n"},
     [*TRAIN, "--train", "{in}/c.conllu"], ["{in}/c.conllu: no sentences"]),
    ("docstart-only", {"d.txt": "-DOCSTART- -X- O\n\n-DOCSTART- -X- O\n"},
     [*TRAIN, "--train", "{in}/d.txt"], ["{in}/d.txt: no sentences"]),
    ("empty-dev", {"t.txt": OK_COLUMNS, "dev.txt": ""},
     [*TRAIN, "--train", "{in}/t.txt", "--dev", "{in}/dev.txt"],
     ["{in}/dev.txt: no sentences"]),
    ("er-empty", {"e.corp": ""}, [*ER, "--train", "{in}/e.corp"],
     ["{in}/e.corp: no sentences"]),
    # non-UTF-8 bytes without --encoding
    ("latin1-conllu", {"latin.conllu": LATIN_CONLLU},
     [*TRAIN, "--train", "{in}/latin.conllu"], ["{in}/latin.conllu:2:", "--encoding"]),
    ("latin1-columns", {"esp.train": "El DA O\n\nEspaña NP B-LOC\n".encode("latin-1")},
     [*TRAIN, "--train", "{in}/esp.train"], ["{in}/esp.train:3:", "--encoding"]),
    ("latin1-test", {"t.txt": OK_COLUMNS, "test.txt": "é X\n".encode("latin-1")},
     [*TRAIN, "--train", "{in}/t.txt", "--test", "{in}/test.txt"],
     ["{in}/test.txt:1:", "--encoding"]),
    ("er-latin1", {"l.corp": OK_CONLL04.replace("London", "Bogotá").encode("latin-1")},
     [*ER, "--train", "{in}/l.corp"], ["{in}/l.corp:3:", "--encoding"]),
    ("unknown-encoding", {"t.txt": OK_COLUMNS},
     [*TRAIN, "--train", "{in}/t.txt", "--encoding", "klingon"], ["klingon"]),
    ("missing-file", {}, [*TRAIN, "--train", "{in}/nope.txt"], ["{in}/nope.txt: no such"]),
    # a sentence longer than --max-sentence-length
    ("too-long-columns", {"long.txt": "a X\n\nb X\nc X\nd X\ne X\n"},
     [*TRAIN, "--train", "{in}/long.txt", "--max-sentence-length", "3"],
     ["{in}/long.txt:3:", "--max-sentence-length"]),
    ("too-long-conllu", {"long.conllu": _conllu([_tok(1)], [_tok(i) for i in range(1, 5)])},
     [*TRAIN, "--train", "{in}/long.conllu", "--max-sentence-length", "3"],
     ["{in}/long.conllu:3:", "--max-sentence-length"]),
    ("max-sentence-length-0", {"t.txt": OK_COLUMNS},
     [*TRAIN, "--train", "{in}/t.txt", "--max-sentence-length", "0"],
     ["--max-sentence-length"]),
    # options
    ("C-0", {}, [*TRAIN, "--C", "0"], ["--C"]),
    ("C-negative", {}, [*TRAIN, "--C", "-1"], ["--C"]),
    ("C-nan", {}, [*TRAIN, "--C", "nan"], ["--C"]),
    ("threads-0", {}, [*TRAIN, "--threads", "0"], ["--threads"]),
    ("threads-negative", {}, [*TRAIN, "--threads", "-3"], ["--threads"]),
    # model files: truncated, corrupt, another format version, another task
    ("model-truncated", {"t.npz": lambda c: _good(c)[: len(_good(c)) // 2], "d.txt": OK_COLUMNS},
     [*EVAL, "{in}/t.npz"], ["{in}/t.npz: ", "truncated"]),
    ("model-truncated-predict", {"t.npz": lambda c: _good(c)[:-30], "d.txt": OK_COLUMNS},
     [*PRED, "{in}/t.npz"], ["{in}/t.npz: "]),
    ("model-empty", {"e.npz": b"", "d.txt": OK_COLUMNS}, [*PRED, "{in}/e.npz"],
     ["{in}/e.npz: "]),
    ("model-corrupt", {"c.npz": lambda c: _good(c)[:200] + bytes(256) + _good(c)[456:],
                       "d.txt": OK_COLUMNS},
     [*PRED, "{in}/c.npz"], ["{in}/c.npz: ", "corrupt"]),
    ("model-not-npz", {"d.txt": OK_COLUMNS}, [*EVAL, "{in}/d.txt"],
     ["{in}/d.txt: ", "not a demidcd model"]),
    ("model-version", {"v.npz": lambda c: _model_variant(c["model"], format_version=2),
                       "d.txt": OK_COLUMNS},
     [*PRED, "{in}/v.npz"], ["{in}/v.npz: ", "format version 2"]),
    ("model-unknown-task", {"t.npz": lambda c: _model_variant(c["model"], task="parsing"),
                            "d.txt": OK_COLUMNS},
     [*EVAL, "{in}/t.npz"], ["{in}/t.npz: ", "unknown task 'parsing'"]),
    ("model-nan", {"n.npz": lambda c: _model_variant(
        c["model"], w=np.where(_w(c) == _w(c).max(), np.nan, _w(c))), "d.txt": OK_COLUMNS},
     [*PRED, "{in}/n.npz"], ["{in}/n.npz: ", "weight"]),
    ("model-wrong-length", {"n.npz": lambda c: _model_variant(
        c["model"], w=_w(c)[:-1], dim=_w(c).size - 1), "d.txt": OK_COLUMNS},
     [*EVAL, "{in}/n.npz"], ["{in}/n.npz: ", "weight"]),
    # an entity-relation model on a tagged file: the data cannot be read as that task
    ("model-other-task", {"er.npz": lambda c: c["er_model"].read_bytes(), "d.txt": OK_COLUMNS},
     [*PRED, "{in}/er.npz"], ["{in}/d.txt:1:"]),
    ("predict-bad-data", {"m.npz": _good, "d.txt": "a\tB\n\nb C D\n"}, [*PRED, "{in}/m.npz"],
     ["{in}/d.txt:3:"]),
]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory, model, er_model) -> dict[str, tuple]:
    """Run every bad-input case (three at a time); {id: (result, in dir, out dir, expected)}."""
    root = tmp_path_factory.mktemp("bad")

    ctx = {"model": model, "er_model": er_model}

    def one(case):
        cid, files, argv, expect = case
        din, dout = root / cid / "in", root / cid / "out"
        din.mkdir(parents=True)
        dout.mkdir()
        for name, data in files.items():
            data = data(ctx) if callable(data) else data
            (din / name).write_bytes(data if isinstance(data, bytes) else data.encode())

        def sub(s: str) -> str:
            return s.replace("{in}", str(din)).replace("{out}", str(dout))

        r = run(*[sub(a) for a in argv], timeout=120)
        return cid, (r, din, dout, [sub(e) for e in expect])

    with ThreadPoolExecutor(3) as ex:
        return dict(ex.map(one, CASES))


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line_and_leaves_nothing(bad_runs, cid: str) -> None:
    r, din, dout, expect = bad_runs[cid]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("demidcd: error: "), lines[0]
    for e in expect:
        assert e in lines[0], (e, lines[0])
    assert sorted(os.listdir(dout)) == [], "output left behind"
    assert all(not n.endswith(".tmp") for n in os.listdir(din))


def test_case_ids_are_unique() -> None:
    assert len({c[0] for c in CASES}) == len(CASES)


# ================================================================== labels unseen in training
def _columns(path: Path) -> list[list[str]]:
    return [ln.split() for ln in path.read_text().splitlines() if ln.strip()]


def test_labels_unseen_in_training_are_handled(tmp_path: Path, corpus: Path, model: Path) -> None:
    classes = json.loads(np.load(model)["meta.json"].tobytes())["labels"]
    rows = _columns(corpus / "test.txt")[:300]
    text, k = [], 0
    for i, (word, tag) in enumerate(rows):  # unseen tags and unseen words, sentences of 10
        if i % 7 == 0:
            tag = "UNSEEN-TAG"
        if i % 11 == 0:
            word = f"neverseen{i}"
        text.append(f"{word} {tag}")
        k += 1
        if k == 10:
            text.append("")
            k = 0
    data = tmp_path / "unseen.txt"
    data.write_text("\n".join(text) + "\n")
    r = run("evaluate", "--model", str(model), "--data", str(data))
    assert r.returncode == 0, r.stderr
    acc = float(re.match(r"accuracy: ([\d.]+)%", r.stdout).group(1))
    out = tmp_path / "pred.txt"
    r = run("predict", "--model", str(model), "--data", str(data), "--out", str(out))
    assert r.returncode == 0, r.stderr
    gold, pred = _columns(data), _columns(out)
    assert [g[0] for g in gold] == [p[0] for p in pred]
    assert {p[-1] for p in pred} <= set(classes)  # only known tags are predicted
    agree = np.mean([g[-1] == p[-1] for g, p in zip(gold, pred, strict=True)])
    assert abs(100 * agree - acc) < 0.01  # unseen gold tags count as errors, not crashes
    n_unseen = sum(g[-1] == "UNSEEN-TAG" for g in gold)
    assert n_unseen > 0 and acc <= 100 * (1 - n_unseen / len(gold)) + 0.01
    # a CoNLL-U file whose UPOS tags were never seen, and the library's score
    conllu = tmp_path / "u.conllu"
    conllu.write_text(_conllu([_tok(1, "The", "WEIRD"), _tok(2, "zebra", "NOUN")]))
    r = run("evaluate", "--model", str(model), "--data", str(conllu))
    assert r.returncode == 0 and r.stdout.startswith("accuracy: "), r.stderr
    est = SequenceTagger.load(model)
    assert est.score([["The", "zebra"]], [["WEIRD", "NEVER"]]) == 0.0


# ================================================================== determinism
def test_seeded_single_thread_training_is_bit_identical(tmp_path: Path, corpus: Path) -> None:
    args = ["train", "--train", str(corpus / "train.txt"), "--algorithm", "dcd", "--threads",
            "1", "--max-epochs", "3", "--quiet"]
    paths = []
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        p = tmp_path / f"{name}.npz"
        r = run(*args, "--seed", seed, "--model", str(p))
        assert r.returncode == 0, r.stderr
        paths.append(p)
    a, b, c = (np.load(p, allow_pickle=False) for p in paths)
    assert sorted(a.files) == sorted(b.files) and "meta.json" in a.files and "w" in a.files
    for k in a.files:  # every array, metadata included
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), f"{k} differs between two seeded runs"
    assert a["w"].tobytes() != c["w"].tobytes(), "the seed has no effect: the check is blind"


# ================================================================== faults injected into DEMI-DCD
DEMI = ["train", "--threads", "2", "--algorithm", "demi-dcd", "--learners", "1", "--time-limit",
        "60", "--tol", "1e-9"]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen([*CLI, *args], stdout=f, stderr=subprocess.STDOUT)


def _wait_for(log: Path, proc: subprocess.Popen, pattern: str, timeout: float = 120) -> re.Match:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        m = re.search(pattern, log.read_text(), re.M)
        if m:
            return m
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-2000:]}"
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} in the log: {log.read_text()[-2000:]}")


def _family(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _until_gone(procs: list[psutil.Process], pid: int, timeout: float) -> tuple[list, list]:
    """Wait until no process of ``procs`` runs and no segment of ``pid`` is in /dev/shm."""
    t0 = time.monotonic()
    while True:
        alive, segs = _alive(procs), list_segments(pid=pid)
        if (not alive and not segs) or time.monotonic() - t0 > timeout:
            return alive, segs
        time.sleep(0.05)


def _kill_all(procs: list[psutil.Process]) -> None:
    for p in _alive(procs):  # only on a failing test: never leave our own processes behind
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def _started(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path, list[psutil.Process], int]:
    """A DEMI-DCD run on the synthetic default, in its training loop; the log names its pids."""
    model, log = tmp_path / "out" / "m.npz", tmp_path / "log.txt"
    model.parent.mkdir()
    p = _start([*DEMI, "--model", str(model)], log)
    learner = int(_wait_for(log, p, r"^learner pid (\d+)").group(1))
    worker = int(_wait_for(log, p, r"^worker 1 pid (\d+)").group(1))
    _wait_for(log, p, r"^iter +2 ")
    assert learner == p.pid
    family = _family(p.pid)
    assert worker in {k.pid for k in family}
    return p, model, log, family, worker


def _stop_with(p: subprocess.Popen, log: Path, family: list[psutil.Process], sig: int,
               before: Callable[[], None] | None = None) -> tuple[float, list, list, str]:
    """Send ``sig`` to the run (after ``before()``) and wait for it to exit 130 without a
    traceback: (seconds from ``sig`` to the exit, processes and segments left, the log)."""
    try:
        if before is not None:
            before()
        t0 = time.monotonic()
        p.send_signal(sig)
        p.wait(timeout=30)
        stopped = time.monotonic() - t0
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        _kill_all(family)
    out = log.read_text()
    assert p.returncode == 130, out[-2000:]
    assert "Traceback" not in out
    return stopped, alive, segs, out


def test_sigterm_stops_gracefully_within_2s_with_a_partial_model(tmp_path: Path) -> None:
    p, model, log, family, _ = _started(tmp_path)
    stopped, alive, segs, out = _stop_with(p, log, family, signal.SIGTERM)
    assert stopped < 2.0, f"SIGTERM took {stopped:.2f}s to stop"
    w, _, meta = load_model(model)
    assert meta["finished"] is False and meta["stop_reason"] == "interrupted"
    assert np.abs(w).sum() > 0
    assert "(partial: interrupted)" in out
    assert os.listdir(model.parent) == ["m.npz"]  # no temporary file
    assert not alive and not segs


def test_second_sigint_stops_at_once(tmp_path: Path) -> None:
    """The worker is stopped (SIGSTOP), so the first Ctrl-C's graceful shutdown would wait 2 s
    for it before terminating it; a second Ctrl-C must cut that wait short."""
    p, model, log, family, worker = _started(tmp_path)

    def first_sigint() -> None:
        os.kill(worker, signal.SIGSTOP)
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)

    stopped, alive, segs, out = _stop_with(p, log, family, signal.SIGINT, before=first_sigint)
    assert stopped < 1.8, f"exit {stopped:.2f}s after the second SIGINT"
    assert not alive, f"left running: {[(k.pid, k.name()) for k in alive]}"
    assert not segs
    assert not [n for n in os.listdir(model.parent) if n.endswith(".tmp")]


def test_sigkill_of_the_parent_leaves_no_worker_and_no_shared_memory(tmp_path: Path) -> None:
    p, model, log, family, worker = _started(tmp_path)
    assert list_segments(pid=p.pid), "the run has no shared-memory segment to leak"
    try:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        t0 = time.monotonic()
        w = psutil.Process(worker)
        try:
            w.wait(timeout=5)  # workers watch their parent
        except psutil.TimeoutExpired:
            pass
        worker_gone = time.monotonic() - t0
        alive, segs = _until_gone(family, p.pid, 10.0)
    finally:
        _kill_all(family)
    assert p.returncode == -signal.SIGKILL
    assert worker_gone < 5.0, "the orphaned worker kept running"
    assert not alive, f"left running: {[(k.pid, k.name()) for k in alive]}"
    assert not segs, f"segments of the killed parent left in /dev/shm: {segs}"
    assert not model.exists()


def test_fault_helpers_detect_a_leak() -> None:
    """The leak checks above can fail: a live process and a live segment are reported."""
    from demidcd.primitives.shm import SharedArena

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    proc = psutil.Process(sleeper.pid)
    arena = SharedArena()
    try:
        arena.create("x", (4,), np.float64)
        alive, segs = _until_gone([proc], os.getpid(), 0.2)
        assert [k.pid for k in alive] == [sleeper.pid] and len(segs) == 1
    finally:
        sleeper.kill()
        sleeper.wait()
        arena.close()
    assert _until_gone([proc], os.getpid(), 0.0) == ([], [])


def _janitor(pid: int) -> psutil.Process:
    """The shared-memory janitor of the run with parent ``pid`` (demidcd.primitives.shm)."""
    for k in _family(pid):
        try:
            cmd = k.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "-S" in cmd and "-c" in cmd and str(pid) in cmd and "owner, fd, shm" in " ".join(cmd):
            return k
    raise AssertionError(f"no janitor among {[k.cmdline() for k in _family(pid)]}")


def test_killing_the_janitor_prints_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    """Killing the process that cleans up after a SIGKILLed parent (formerly the multiprocess
    resource tracker: a relaunch warning and one KeyError traceback per segment) is silent,
    and the run still unlinks its segments on the way out."""
    p, model, log, family, _ = _started(tmp_path)
    try:
        jan = _janitor(p.pid)
        jan.kill()
        assert _until_gone([jan], -1, 5.0)[0] == []  # dead (a zombie until its parent exits)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        alive, segs = _until_gone(family, p.pid, 5.0)
    finally:
        _kill_all(family)
    out = log.read_text()
    assert p.returncode == 130, out[-2000:]
    assert "Traceback" not in out and "KeyError" not in out, out[-2000:]
    assert "warn" not in out.lower() and "leak" not in out.lower(), out[-2000:]
    assert not alive and not segs


def test_parent_and_janitor_killed_then_sweep_stale_removes_the_segments(tmp_path: Path) -> None:
    """With the parent SIGKILLed the janitor unlinks the segments (the test above with the
    parent: test_sigkill_of_the_parent_...); with the janitor killed first nothing can, and the
    next run's sweep_stale (WorkerPool calls it at start) removes them."""
    from demidcd.primitives.shm import sweep_stale

    p, model, log, family, _ = _started(tmp_path)
    try:
        jan = _janitor(p.pid)
        jan.kill()
        assert _until_gone([jan], -1, 5.0)[0] == []  # dead (a zombie until its parent exits)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        alive, _ = _until_gone(family, -1, 10.0)  # processes only: any demidcd run on the
        segs = list_segments(pid=p.pid)  # machine sweeps stale segments when it starts
    finally:
        _kill_all(family)
    assert not alive, f"left running: {[(k.pid, k.name()) for k in alive]}"
    assert segs, "nothing left to sweep: the scenario did not happen"
    removed = sweep_stale()
    assert sorted(s for s in removed if f"-{p.pid}-" in s) == sorted(segs)
    assert list_segments(pid=p.pid) == []


def test_a_one_process_run_sweeps_the_segments_of_dead_runs(corpus: Path) -> None:
    """Segments left by a run whose parent and janitor were both killed (named
    ``demidcd-<dead pid>-<n>-<key>``) are swept by the next run, whatever its --threads: a
    one-process run creates no segment of its own but sweeps too."""
    from demidcd.primitives.shm import SHM_DIR

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that has exited
    assert not psutil.pid_exists(gone.pid)
    made = [Path(SHM_DIR) / f"demidcd-{gone.pid}-0-w", Path(SHM_DIR) / f"demidcd-{gone.pid}-1-ctrl"]
    for f in made:
        f.write_bytes(b"\0" * 4096)
    try:
        r = run("train", "--train", str(corpus / "train.txt"), "--threads", "1",
                "--max-epochs", "1", "--min-count", "1", "--quiet")
        assert r.returncode == 0, r.stderr
        assert [f.name for f in made if f.exists()] == []
    finally:
        for f in made:
            f.unlink(missing_ok=True)
