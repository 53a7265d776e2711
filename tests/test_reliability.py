"""Reliability (issue 8): bad input on the command line, unseen labels, determinism (the faults
injected into DEMI-DCD runs, SIGTERM, a double SIGINT, SIGKILL of the parent, are in
test_stop_cleanup.py).

Every bad input must give exit status 2, exactly one stderr line naming the file and line (or
the option), no traceback, and nothing in the output directory (no model, no prediction, no
temporary file). Every fault must end with no process left and no shared-memory segment of the
run left in /dev/shm.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cli_run import run, train_model

from demidcd.api import EntityRelationExtractor, SequenceTagger
from demidcd.io.conll04 import read_conll04


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
