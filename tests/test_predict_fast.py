"""Fast prediction (issue 36): the per-type feature tables give the string path's encoding, and
``demidcd predict`` streamed block by block (numba reader and writer, ``--threads``) writes
byte for byte what the whole-file path (read, predict, write) writes, errors included."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest

from demidcd.cli import build_parser, load_model, main
from demidcd.errors import DemidcdError
from demidcd.io import stream
from demidcd.tasks.chain.features import SequenceFeaturizer

WORDS = ["the", "The", "THE", "cat", "Cat", "a|b", "x|y|z", "|", "||", "New-York", "3.14",
         "<s>", "</s>", "café", "Émile", "ok", "run", "ran", "-", "--", "A1", "b2c"]
TAGS = ["DT", "NN", "VB", "JJ", "CD"]


def _sentences(n: int, seed: int, attrs: int = 0) -> tuple[list[list], list[list[str]]]:
    rng = random.Random(seed)
    X, Y = [], []
    for _ in range(n):
        m = rng.randint(1, 9)
        words = [rng.choice(WORDS) for _ in range(m)]
        if attrs:
            toks = [(w, *(rng.choice(["N", "V", "a|b", "<s>", "P"]) for _ in range(attrs)))
                    for w in words]
        else:
            toks = words
        X.append(toks)
        Y.append([rng.choice(TAGS) for _ in range(m)])
    return X, Y


@pytest.mark.parametrize("attrs", [0, 2])
def test_type_tables_give_the_string_encoding(attrs):
    X, _ = _sentences(300, 1, attrs)
    T, _ = _sentences(200, 2, attrs)
    T.append([("unseen-word", *(["zz"] * attrs)) if attrs else "unseen-word"])
    f = SequenceFeaturizer(min_count=1).fit(X)
    for _ in range(2):  # the tables are kept: a second call reads them
        new = f.transform(T)
        old = f._encode(T, dict(f._index))  # not the dictionary object: the string path
        for a in ("sent_ptr", "feat_ptr", "feat_idx"):
            assert np.array_equal(getattr(new, a), getattr(old, a)), a
    assert f.type_tables(attrs) is f.type_tables(attrs)
    f.fit(T)  # a new dictionary: new tables
    new, old = f.transform(X), f._encode(X, dict(f._index))
    assert np.array_equal(new.feat_idx, old.feat_idx)
    assert np.array_equal(new.feat_ptr, old.feat_ptr)


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
def _conllu(X, Y, comments: bool = True) -> str:
    out = []
    for s, (xs, ys) in enumerate(zip(X, Y, strict=True)):
        if comments:
            out.append(f"# sent_id = {s}")
        for t, (w, y) in enumerate(zip(xs, ys, strict=True)):
            if comments and t == 1 and s % 3 == 0:
                out.append(f"{t + 1}-{t + 2}\tmw\t_\t_\t_\t_\t_\t_\t_\t_")
            out.append(f"{t + 1}\t{w}\t{w.lower()}\t{y}\t{y}X\t_\t0\tdep\t_\t_")
            if comments and t == 0 and s % 4 == 0:
                out.append(f"{t + 1}.1\tnull\t_\t_\t_\t_\t_\t_\t_\t_")
        out.append("")
    return "\n".join(out) + "\n"


def _columns(X, Y, docstart: bool = True) -> str:
    out = []
    for s, (xs, ys) in enumerate(zip(X, Y, strict=True)):
        if docstart and s % 5 == 0:
            out += ["-DOCSTART- -X- O", ""]
        for t, y in zip(xs, ys, strict=True):
            out.append(" ".join([*((t,) if isinstance(t, str) else t), y]))
        out.append("")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny models: a CoNLL-U tagger (XPOS), a chunker with a feature column (built-in
    features), a template chunker and a ner tagger; and their training files."""
    d = tmp_path_factory.mktemp("fast")
    X, Y = _sentences(120, 3)
    (d / "train.conllu").write_text(_conllu(X, Y), encoding="utf-8")
    Xa, Ya = _sentences(120, 4, attrs=1)
    (d / "train.txt").write_text(_columns(Xa, [["B-NP" if y in ("DT", "NN") else "O" for y in ys]
                                               for ys in Ya]), encoding="utf-8")
    common = ["--threads", "1", "--max-epochs", "3", "--quiet"]
    runs = {
        "conllu": ["train", "--train", str(d / "train.conllu"), "--column", "xpos",
                   "--min-count", "1"],
        "chunk": ["train", "--task", "chunking", "--train", str(d / "train.txt"),
                  "--feature-columns", "2", "--min-count", "1"],
        "template": ["train", "--task", "chunking", "--train", str(d / "train.txt"),
                     "--template", "chunking"],
        "ner": ["train", "--task", "ner", "--train", str(d / "train.txt"), "--min-count", "1"],
    }
    out = {}
    for name, argv in runs.items():
        model = d / f"{name}.npz"
        assert main([*argv, *common, "--model", str(model)]) == 0
        out[name] = model
    return d, out


def _whole_file(model, data, out, *extra: str) -> None:
    """The whole-file path: read everything, the spec's predict, write (as predict did)."""
    args = build_parser(helps=False).parse_args(["predict", "--model", str(model), "--data",
                                                 str(data), "--out", str(out), *extra])
    spec, est, options, output = load_model(args)
    corpus = spec.read(str(data), options, labelled=False)
    spec.write(str(out), corpus, spec.predict(est, corpus, options, output), options)


def _streamed(model, data, out, *extra: str) -> None:
    assert main(["predict", "--model", str(model), "--data", str(data), "--out", str(out),
                 "--quiet", *extra]) == 0


@pytest.mark.parametrize("block", [64, 700, 1 << 20])
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("which", ["conllu", "chunk"])
def test_streamed_predict_writes_what_the_whole_file_path_writes(models, tmp_path, monkeypatch,
                                                                 which, threads, block):
    d, m = models
    X, Y = _sentences(150, 5, attrs=0 if which == "conllu" else 1)
    data = tmp_path / ("test.conllu" if which == "conllu" else "test.txt")
    data.write_text(_conllu(X, Y) if which == "conllu" else _columns(X, Y), encoding="utf-8")
    _whole_file(m[which], data, tmp_path / "ref")
    monkeypatch.setattr(stream, "BLOCK_BYTES", block)
    _streamed(m[which], data, tmp_path / "new", "--threads", threads)
    assert (tmp_path / "new").read_bytes() == (tmp_path / "ref").read_bytes()


def test_fast_route_takes_the_blocks(models, tmp_path, monkeypatch):
    """The numba route reads the usual files (no block falls back to the parsers)."""
    from demidcd.tasks.chain import stream as chain_stream

    d, m = models
    calls = {"fast": 0, "general": 0}
    fast, general = chain_stream._fast_block, chain_stream._general_block

    def count(name, fn):
        def wrapped(*a):
            r = fn(*a)
            if r is not None:
                calls[name] += 1
            return r
        return wrapped

    monkeypatch.setattr(chain_stream, "_fast_block", count("fast", fast))
    monkeypatch.setattr(chain_stream, "_general_block", count("general", general))
    monkeypatch.setattr(stream, "BLOCK_BYTES", 500)
    X, Y = _sentences(60, 6)
    data = tmp_path / "t.conllu"
    data.write_text(_conllu(X, Y), encoding="utf-8")
    _streamed(m["conllu"], data, tmp_path / "o")
    assert calls["fast"] > 5 and calls["general"] == 0
    X, Y = _sentences(60, 6, attrs=1)
    data = tmp_path / "t.txt"
    data.write_text(_columns(X, Y), encoding="latin-1")
    _streamed(m["chunk"], data, tmp_path / "o", "--encoding", "latin-1", "--threads", "2")
    assert calls["fast"] > 10 and calls["general"] == 0


EDGE_CONLLU = [
    # CRLF line ends, blank lines of spaces, several blank lines, no newline at the end
    "# a\r\n1\tThe\t_\t_\t_\t_\t_\t_\t_\t_\r\n2\tcat\t_\t_\t_\t_\t_\t_\t_\t_\r\n  \r\n\n\n"
    "1\tran\t_\t_\t_\t_\t_\t_\t_\t_",
    # comments after the last sentence, a comment between tokens
    "1\tThe\t_\t_\t_\t_\t_\t_\t_\t_\n# mid\n2\tcat\t_\t_\t_\t_\t_\t_\t_\t_\n\n# end\n# end2\n",
    # a byte-order mark, leading zeros in ids, Unicode words
    "\ufeff# x\n01\tcafé\t_\t_\t_\t_\t_\t_\t_\t_\n2\tÉmile\t_\t_\t_\t_\t_\t_\t_\t_\n\n",
    # a multiword line before the first token, an empty node at the end of a sentence
    "1-2\tdu\t_\t_\t_\t_\t_\t_\t_\t_\n1\tde\t_\t_\t_\t_\t_\t_\t_\t_\n2\tle\t_\t_\t_\t_\t_\t_"
    "\t_\t_\n2.1\te\t_\t_\t_\t_\t_\t_\t_\t_\n\n",
    # a word of Unicode whitespace (an error), after a good sentence
    "1\tok\t_\t_\t_\t_\t_\t_\t_\t_\n\n1\t\u3000\t_\t_\t_\t_\t_\t_\t_\t_\n\n",
    # a bad id in the third sentence, a wrong column count
    "1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n\n1\tb\t_\t_\t_\t_\t_\t_\t_\t_\n\n1\tc\t_\t_\t_\t_\t_\t_\t_\t_"
    "\n3\td\t_\t_\t_\t_\t_\t_\t_\t_\n\n",
    "1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n\n1\tb\t_\t_\n\n",
    # nothing but comments
    "# only\n\n",
]

EDGE_COLUMNS = [
    "-DOCSTART- -X- O\n\nThe N\ncat N\n\n-DOCSTART- -X- O\nran V\n\n",
    "The N\n\t cat \t N \n\n\n-DOCSTART-\n",  # tabs and spaces, a trailing -DOCSTART- line
    "The N\ncat N X\n\n",  # a wrong field count
    "a N\n\nb N\n\nc N\n\nd N\ne\n\n",  # a wrong field count in a later sentence
    "caf\u00e9 N\n\u00a0 N\n\n",  # a non-breaking space: a word of its own
    "a N\n\n\r-DOCSTART- X O\n\nb N\n\n",  # -DOCSTART- after a carriage return
]


def _outcome(fn, *a):
    try:
        fn(*a)
        return None
    except DemidcdError as e:
        return str(e)


EDGE_CASES = ([("conllu", "e.conllu", t, block) for t in EDGE_CONLLU for block in (16, 1 << 20)]
              + [("chunk", "e.txt", t, block) for t in EDGE_COLUMNS for block in (8, 1 << 20)])


@pytest.mark.parametrize("model,name,text,block", EDGE_CASES)
def test_streamed_edge_cases(models, tmp_path, monkeypatch, model, name, text, block):
    """Each edge case, read in small blocks and in one: the same output or the same error as
    the whole-file path, and nothing written on an error."""
    d, m = models
    data = tmp_path / name
    data.write_bytes(text.encode("utf-8"))
    ref = _outcome(_whole_file, m[model], data, tmp_path / "ref")
    monkeypatch.setattr(stream, "BLOCK_BYTES", block)
    new = _outcome(lambda *a: main([*a, "--quiet", "--debug"]) == 0 or 1 / 0, "predict",
                   "--model", str(m[model]), "--data", str(data), "--out",
                   str(tmp_path / "new"))
    assert new == ref
    if ref is None:
        assert (tmp_path / "new").read_bytes() == (tmp_path / "ref").read_bytes()
    else:
        assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("which", ["template", "ner"])
def test_template_and_ner_models_stream_the_same(models, tmp_path, monkeypatch, which):
    d, m = models
    X, Y = _sentences(80, 7, attrs=1)
    data = tmp_path / "t.txt"
    data.write_text(_columns(X, Y), encoding="utf-8")
    _whole_file(m[which], data, tmp_path / "ref")
    monkeypatch.setattr(stream, "BLOCK_BYTES", 300)
    _streamed(m[which], data, tmp_path / "new", "--threads", "2")
    assert (tmp_path / "new").read_bytes() == (tmp_path / "ref").read_bytes()


def test_chain_options_and_gzip_stream_the_same(models, tmp_path, monkeypatch):
    d, m = models
    X, Y = _sentences(60, 8, attrs=1)
    data = tmp_path / "t.txt.gz"
    data.write_bytes(gzip.compress(_columns(X, Y).encode()))
    monkeypatch.setattr(stream, "BLOCK_BYTES", 200)
    for extra in ([], ["--nbest", "2"], ["--scores"], ["--force"], ["--constraints"]):
        _whole_file(m["chunk"], data, tmp_path / "ref.gz", *extra)
        _streamed(m["chunk"], data, tmp_path / "new.gz", *extra)
        assert gzip.decompress((tmp_path / "new.gz").read_bytes()) == \
            gzip.decompress((tmp_path / "ref.gz").read_bytes()), extra


def test_blocks_cut_only_after_sentences():
    """Every cut leaves the reader in its initial state: after a blank line that ends a
    sentence, never inside comments or -DOCSTART- lines that belong to the next one."""
    import io

    text = EDGE_CONLLU[0] + "\n\n" + _conllu(*_sentences(40, 9))
    data = text.encode()
    for size in (1, 7, 50, 1000):
        blocks = list(stream.iter_blocks(io.BytesIO(data), True, size))
        assert b"".join(b for _, b in blocks) == data
        lines = 0
        for line0, b in blocks:
            assert line0 == lines
            lines += b.count(b"\n")
        for _, b in blocks[:-1]:  # a blank line, after a token line
            lines = b.split(b"\n")
            assert lines[-1] == b"" and lines[-2].strip() == b""
            assert [ln for ln in lines if ln.strip()][-1][:1].isdigit()
    cols = b"-DOCSTART- X O\n\na N\n\n-DOCSTART- X O\n\nb N\n\n"
    blocks = [b for _, b in stream.iter_blocks(io.BytesIO(cols), False, 1)]
    assert blocks == [b"-DOCSTART- X O\n\na N\n\n", b"-DOCSTART- X O\n\nb N\n\n"]


def test_stdin_streams_plain_and_gzip(models, tmp_path):
    """``--data -`` is read as a stream (format told from its first bytes, gzip or not)."""
    import subprocess
    import sys

    d, m = models
    X, Y = _sentences(40, 10)
    data = tmp_path / "t.conllu"
    data.write_text(_conllu(X, Y), encoding="utf-8")
    _whole_file(m["conllu"], data, tmp_path / "ref")
    for payload in (data.read_bytes(), gzip.compress(data.read_bytes())):
        r = subprocess.run([sys.executable, "-m", "demidcd", "predict", "--model",
                            str(m["conllu"]), "--data", "-", "--out", "-", "--quiet"],
                           input=payload, capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout == (tmp_path / "ref").read_bytes()


def _random_file(rng: random.Random, conllu: bool) -> str:
    """A small file mixing the lines a reader meets: comments, multiword tokens, empty nodes,
    blank lines of spaces, CRLF ends, -DOCSTART- lines, Unicode words."""
    lines = []
    for _ in range(rng.randint(1, 12)):
        for _ in range(rng.randint(0, 2)):
            lines.append(rng.choice(["# c", "#", "", "  ", "\t"] if conllu else
                                    ["-DOCSTART- -X- O", "-DOCSTART-", "", "  ", "\t"]))
        if rng.random() < 0.03:
            lines.append("bad")  # an error: a line of one field
        n = rng.randint(1, 6)
        for t in range(1, n + 1):
            w = rng.choice(WORDS)
            if conllu:
                if rng.random() < 0.1:
                    lines.append(f"{t}-{t + 1}\tmw\t_\t_\t_\t_\t_\t_\t_\t_")
                lines.append(f"{t}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_")
                if rng.random() < 0.1:
                    lines.append(f"{t}.1\te\t_\t_\t_\t_\t_\t_\t_\t_")
                if rng.random() < 0.05:
                    lines.append("# inside")
            else:
                lines.append(rng.choice(["", " ", "\t"]) + f"{w}{rng.choice([' ', '  ', chr(9)])}"
                             f"{rng.choice(['N', 'V'])}")
        lines.append(rng.choice(["", "", " ", "\t "]))
    ends = rng.choice(["\n", "\r\n"])
    text = ends.join(lines)
    return text + rng.choice(["", ends, ends * 2])


@pytest.mark.parametrize("conllu", [True, False])
def test_streamed_random_files_match_the_whole_file_path(models, tmp_path, monkeypatch, conllu):
    d, m = models
    model = m["conllu" if conllu else "chunk"]
    rng = random.Random(11 if conllu else 12)
    data = tmp_path / ("r.conllu" if conllu else "r.txt")
    for k in range(25):
        data.write_bytes(_random_file(rng, conllu).encode("utf-8"))
        ref = _outcome(_whole_file, model, data, tmp_path / "ref")
        monkeypatch.setattr(stream, "BLOCK_BYTES", rng.choice([1, 30, 200, 1 << 20]))
        new = _outcome(lambda *a: main([*a, "--quiet", "--debug"]) == 0 or 1 / 0, "predict",
                       "--model", str(model), "--data", str(data), "--out",
                       str(tmp_path / "new"), "--threads", rng.choice(["1", "2"]))
        assert new == ref, (k, data.read_bytes())
        if ref is None:
            assert (tmp_path / "new").read_bytes() == (tmp_path / "ref").read_bytes(), \
                (k, data.read_bytes())
