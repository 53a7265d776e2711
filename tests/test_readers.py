"""Readers and writers of tagged corpora: round trips, skipping rules, encodings, exact errors."""

from __future__ import annotations

import gzip
import os
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demidcd.errors import InputError, InputWarning, OptionError
from demidcd.io.tagged import corpus_from_lists, guess_format, read_tagged
from demidcd.io.tagged_writer import write_tagged

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

CONLLU = """# newdoc id = d1
# text = I can't go.
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t_\t_
2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_
2\tca\tcan\tAUX\tMD\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tgo\tgo\tVERB\tVB\t_\t0\troot\t_\t_
4.1\tgone\t_\t_\t_\t_\t_\t_\t4:x\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# text = Yes
1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_

"""

COLUMNS = """-DOCSTART- -X- O

Confidence NN B-NP
in IN B-PP

the DT B-NP
-DOCSTART- -X- O
pound NN I-NP
"""


def _write(tmp_path: Path, name: str, text: str | bytes, encoding: str = "utf-8") -> str:
    p = tmp_path / name
    data = text if isinstance(text, bytes) else text.encode(encoding)
    if name.endswith(".gz"):
        data = gzip.compress(data)
    p.write_bytes(data)
    return str(p)


def _error(path: str, **kw) -> InputError:
    with pytest.raises(InputError) as e:
        read_tagged(path, **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(path)
    return e.value


# --- CoNLL-U -----------------------------------------------------------------------------------

def test_conllu_skips_comments_multiword_and_empty_nodes(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.conllu", CONLLU)
    c = read_tagged(p)
    assert c.tokens == [["I", "ca", "n't", "go", "."], ["Yes"]]
    assert c.tags == [["PRON", "AUX", "PART", "VERB", "PUNCT"], ["INTJ"]]
    assert c.lines == [3, 12] and c.fmt == "conllu" and c.path == p
    x = read_tagged(p, column="xpos")
    assert x.tags == [["PRP", "MD", "RB", "VB", "."], ["UH"]]
    assert read_tagged(p, column=8).tags[1] == ["root"]
    u = read_tagged(p, labelled=False)
    assert u.tokens == c.tokens and u.tags == [[], []] and not u.labelled


def test_conllu_writer_keeps_every_other_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.conllu", CONLLU)
    c = read_tagged(p, column="xpos")
    out = str(tmp_path / "out.conllu")
    write_tagged(out, c, c.tags)
    assert Path(out).read_text() == CONLLU  # gold labels reproduce the file byte for byte
    pred = [["A", "B", "C", "D", "E"], ["F"]]
    write_tagged(out, c, pred)  # replaces the XPOS column the corpus was read from
    before, after = CONLLU.splitlines(), Path(out).read_text().splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 6
    for a, b in changed:
        fa, fb = a.split("\t"), b.split("\t")
        assert fa[:4] + fa[5:] == fb[:4] + fb[5:] and fb[4] in "ABCDEF"
    assert read_tagged(out, column="xpos").tags == pred
    assert read_tagged(out, column="upos").tags == read_tagged(p).tags


def test_round_trip_in_memory(tmp_path: Path) -> None:
    toks = [["Hello", "wörld", "!"], ["x"]]
    tags = [["INTJ", "NOUN", "PUNCT"], ["X"]]
    c = corpus_from_lists(toks, tags)
    assert c.lines == [1, 5] and c.raw is None
    for fmt, name in (("columns", "m.txt"), ("conllu", "m.conllu"), ("conllu", "m.conllu.gz")):
        c = corpus_from_lists(toks, tags, fmt=fmt)
        out = str(tmp_path / name)
        write_tagged(out, c, tags)
        r = read_tagged(out, fmt=guess_format(out))
        assert (r.tokens, r.tags, r.lines) == (toks, tags, c.lines)
    assert Path(tmp_path / "m.txt").read_text().splitlines()[:2] == ["Hello INTJ", "wörld NOUN"]
    with pytest.raises(ValueError):
        corpus_from_lists([["a"]], [["A", "B"]])
    with pytest.raises(ValueError):
        corpus_from_lists([[]])
    with pytest.raises(ValueError):
        write_tagged(str(tmp_path / "bad.txt"), corpus_from_lists(toks), [["A"], ["B"]])
    assert not (tmp_path / "bad.txt").exists()


_word = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
                min_size=1, max_size=6)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.tuples(_word, _word), min_size=1, max_size=5), min_size=1,
                max_size=5), st.sampled_from(["columns", "conllu"]))
def test_round_trip_fuzzed(tmp_path: Path, sents, fmt: str) -> None:
    toks = [[w for w, _ in s] for s in sents]
    tags = [[t for _, t in s] for s in sents]
    if fmt == "conllu":  # "_" is CoNLL-U's "no value", never a label; "#" starts a comment
        tags = [[t if t != "_" else "U" for t in s] for s in tags]
    toks = [[("w" + w if w.startswith(("#", "-DOCSTART-")) else w) for w in s] for s in toks]
    out = str(tmp_path / f"f.{fmt}")
    write_tagged(out, corpus_from_lists(toks, tags, fmt=fmt), tags)
    r = read_tagged(out, fmt=fmt)
    assert (r.tokens, r.tags) == (toks, tags)


# --- columns -------------------------------------------------------------------------------------

def test_columns_docstart_and_label_column(tmp_path: Path) -> None:
    p = _write(tmp_path, "c.txt", COLUMNS)
    c = read_tagged(p, fmt="columns")
    assert c.tokens == [["Confidence", "in"], ["the"], ["pound"]]
    assert c.tags == [["B-NP", "B-PP"], ["B-NP"], ["I-NP"]]
    assert c.lines == [3, 6, 8]
    assert read_tagged(p, fmt="columns", column=2).tags[0] == ["NN", "IN"]
    out = str(tmp_path / "o.txt")
    write_tagged(out, c, c.tags)
    assert read_tagged(out, fmt="columns").tags == c.tags
    write_tagged(out, c, [["A", "B"], ["C"], ["D"]], column=4)  # beyond: appended
    r = read_tagged(out, fmt="columns")
    assert r.tags == [["A", "B"], ["C"], ["D"]]
    assert read_tagged(out, fmt="columns", column=3).tags == c.tags
    assert Path(out).read_text().splitlines()[2] == "Confidence NN B-NP A"
    # unlabelled file: predictions are appended as a new last column
    u = _write(tmp_path, "u.txt", "a\nb\n\nc\n")
    cu = read_tagged(u, fmt="columns", labelled=False)
    write_tagged(out, cu, [["X", "Y"], ["Z"]])
    assert Path(out).read_text() == "a X\nb Y\n\nc Z\n\n"


def test_gzip_and_no_stray_temp_files(tmp_path: Path) -> None:
    p = _write(tmp_path, "a.conllu.gz", CONLLU)
    c = read_tagged(p, fmt="auto")
    assert c.fmt == "conllu" and c.tokens[1] == ["Yes"]
    out = str(tmp_path / "o.conllu.gz")
    write_tagged(out, c, c.tags)
    assert gzip.decompress(Path(out).read_bytes()).decode().startswith("# newdoc id = d1\n")
    assert sorted(os.listdir(tmp_path)) == ["a.conllu.gz", "o.conllu.gz"]
    e = _error(_write(tmp_path, "bad.conllu.gz", b""), fmt="conllu")
    assert e.line is None
    (tmp_path / "trunc.gz").write_bytes(gzip.compress(CONLLU.encode())[:30])
    assert _error(str(tmp_path / "trunc.gz")).line is None


def test_latin1_with_and_without_encoding(tmp_path: Path) -> None:
    text = "El DA O\nrey NC O\n\nEspaña NP B-LOC\nhoy RG O\n"
    p = _write(tmp_path, "esp.train", text, encoding="latin-1")
    e = _error(p, fmt="columns")
    assert e.line == 4 and "not valid utf-8 text; it reads cleanly as latin-1: pass " \
        "--encoding latin-1" in str(e)
    assert str(e).startswith(f"{p}:4: ")
    c = read_tagged(p, fmt="columns", encoding="latin-1")
    assert c.tokens == [["El", "rey"], ["España", "hoy"]]
    with pytest.raises(OptionError):
        read_tagged(p, fmt="columns", encoding="no-such-codec")


def test_utf8_bom_and_crlf(tmp_path: Path) -> None:
    p = _write(tmp_path, "b.txt", "\ufeffa\tX\r\nb\tY\r\n\r\nc\tZ\r\n")
    assert read_tagged(p, fmt="columns").tags == [["X", "Y"], ["Z"]]
    q = _write(tmp_path, "b.conllu", CONLLU.replace("\n", "\r\n"))
    assert read_tagged(q).tokens[1] == ["Yes"]


# --- errors name the file and the exact line ---------------------------------------------------

def _tok(i: int | str, word: str = "w", upos: str = "NOUN", ncols: int = 10) -> str:
    f = [str(i), word, "l", upos, "NN", "_", "0", "root", "_", "_"]
    return "\t".join((f + ["_"] * 10)[:ncols])


@pytest.mark.parametrize("lines, line, words", [
    (["# c", _tok(1), _tok(2, ncols=9)], 3, "10 tab-separated columns, found 9"),
    (["# c", _tok(1), _tok(2, ncols=11)], 3, "found 11"),
    ([_tok(1), "", _tok(1), _tok("x")], 4, "bad token id"),
    ([_tok(1), _tok(3)], 2, "out of order, expected 2"),
    ([_tok(2)], 1, "expected 1"),
    ([_tok(1), _tok("1-x")], 2, "bad token id"),
    ([_tok(1), _tok(2, upos="_")], 2, "empty label in UPOS"),
    ([_tok(1), _tok(2, upos="")], 2, "empty label"),
    ([_tok(1), _tok(2, word="")], 2, "empty word"),
    (["# c", "", "# d", _tok(1), _tok(2), _tok(3), _tok(4), "# e", _tok("4-5"), _tok(5), "",
      _tok(1)], 4, "sentence of 5 tokens is longer than --max-sentence-length 3"),
])
def test_conllu_errors(tmp_path: Path, lines: list[str], line: int, words: str) -> None:
    p = _write(tmp_path, "e.conllu", "\n".join(lines) + "\n")
    e = _error(p, max_sentence_length=3)
    assert e.line == line and words in str(e) and str(e).startswith(f"{p}:{line}: ")


@pytest.mark.parametrize("text, line, words, kw", [
    ("a B\nb C\n\nc D E\n", 4, "expected 2 columns (as on line 1), found 3", {}),
    ("\n\na\n", 3, "at least 2 columns, found 1", {}),
    ("a B C\n", 1, "3 (label column) columns, found 3", {"column": 4}),
    ("a B\nb C\nc D\n\n", 1, "sentence of 3 tokens is longer than --max-sentence-length 2",
     {"max_sentence_length": 2}),
    ("a B\nb C\nc D\nd E\n-DOCSTART- X\ne F\n", 1, "sentence of 4 tokens",
     {"max_sentence_length": 2}),
])
def test_columns_errors(tmp_path: Path, text: str, line: int, words: str, kw: dict) -> None:
    if "label column" in words:
        words = "expected 4 (label column) columns, found 3"
    p = _write(tmp_path, "e.txt", text)
    e = _error(p, fmt="columns", **kw)
    assert e.line == line and words in str(e)


def test_file_level_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.conllu")
    e = _error(missing)
    assert e.line is None and str(e) == f"{missing}: no such file"
    for name, text, fmt in (("empty.conllu", "", "conllu"), ("c.conllu", "# only\n\n", "conllu"),
                            ("blank.txt", "\n\n\n", "columns"),
                            ("doc.txt", "-DOCSTART- -X- O\n\n", "columns")):
        e = _error(_write(tmp_path, name, text), fmt=fmt)
        assert e.line is None and "no sentences" in str(e)
    assert _error(str(tmp_path)).line is None  # a directory
    for bad in ({"fmt": "xml"}, {"column": "lemma"}, {"column": 2}, {"fmt": "columns",
                                                                      "column": 1}):
        with pytest.raises(OptionError):
            read_tagged(_write(tmp_path, "ok.conllu", CONLLU), **bad)


_fragment = st.sampled_from(["1", "2", "3", "1-2", "5.1", "x", "", "_", "#", "\t", " ",
                             "-DOCSTART-", "\n", "\n\n", "é", "\r", "\x00", "0", "-", ".",
                             "NOUN"])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.binary(max_size=200),
                 st.lists(_fragment, max_size=60).map(lambda f: "".join(f).encode())),
       st.sampled_from(["conllu", "columns"]), st.sampled_from(["utf-8", "latin-1"]))
def test_fuzz_only_input_errors(tmp_path: Path, data: bytes, fmt: str, enc: str) -> None:
    p = tmp_path / "fuzz.txt"
    p.write_bytes(data)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = read_tagged(str(p), fmt=fmt, encoding=enc, max_sentence_length=8)
    except InputError as e:
        assert "\n" not in str(e)
        assert e.line is None or 1 <= e.line <= data.count(b"\n") + 1
        return
    # the one warning there is: UTF-8 text read as latin-1, one line naming the file
    for w in caught:
        assert w.category is InputWarning and enc == "latin-1", w.message
        assert str(w.message).startswith(f"{p}:") and "\n" not in str(w.message)
    assert c.tokens and all(c.tokens) and all(
        len(t) == len(w) for t, w in zip(c.tags, c.tokens, strict=True))
    write_tagged(str(tmp_path / "fuzz.out"), c, c.tags)  # the writer accepts what was read
    r = read_tagged(str(tmp_path / "fuzz.out"), fmt=fmt, max_sentence_length=8)
    assert (r.tokens, r.tags) == (c.tokens, c.tags)


# --- real corpora (slow-ish) -------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("rel, fmt, enc, n_sent, n_tok", [
    ("ud_english_ewt/en_ewt-ud-train.conllu", "conllu", "utf-8", 12544, 204577),
    ("conll2000/train.txt", "columns", "utf-8", 8936, 211727),
    ("conll2002/esp.train", "columns", "latin-1", 8323, 264715),
    ("conll2002/esp.train", "columns", "utf-8", 8323, 264715),
])
def test_real_corpora(tmp_path: Path, rel: str, fmt: str, enc: str, n_sent: int,
                      n_tok: int) -> None:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"{path} absent")
    raw = path.read_bytes()
    try:
        utf8_text = not raw.isascii() and bool(raw.decode("utf-8"))
    except UnicodeDecodeError:
        utf8_text = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = read_tagged(path, fmt=fmt, encoding=enc)
    # the UTF-8 copy read as latin-1 is warned about, once; nothing else is
    said = [str(w.message) for w in caught if w.category is InputWarning]
    if enc == "latin-1" and utf8_text:
        assert len(said) == 1 and "valid UTF-8 but is read as latin-1" in said[0], said
    else:
        assert not said, said
    assert (len(c), c.n_tokens) == (n_sent, n_tok)
    out = tmp_path / "copy"
    write_tagged(out, c, c.tags, encoding=enc)
    assert out.read_bytes() == path.read_bytes()  # writing gold labels reproduces the file
