"""Readers and writers for tagged corpora: CoNLL-U and whitespace-column (CoNLL-2000/2002) files.

A corpus is a list of sentences x = (x_1 … x_n) with gold labels y = (y_1 … y_n). Every problem
in a file raises :class:`demidcd.errors.InputError` naming the file and the 1-based line; a bad
argument (format, column, encoding name) raises :class:`demidcd.errors.OptionError`.

Writers put predicted labels into the label column and keep everything else of the original
file (comments, multiword-token lines, other columns); they write atomically (temporary file in
the same directory, then ``os.replace``). A ``.gz`` path is read and written gzip-compressed.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import io
import os
import re
import sys
import warnings
import zlib
from dataclasses import dataclass
from typing import NamedTuple

from demidcd.errors import InputError, InputWarning, OptionError, SentenceTooLong

__all__ = [
    "TaggedCorpus",
    "read_tagged",
    "write_tagged",
    "corpus_from_lists",
    "token_columns",
    "Blocks",
    "column_values",
    "guess_format",
    "FORMATS",
]

FORMATS = ("conllu", "columns")
_FORMAT_NAMES = {"conllu": "a CoNLL-U file", "columns": "a columns file"}
_CONLLU_NAMED = {"upos": 3, "xpos": 4}  # 0-based field index of named CoNLL-U columns
DOCSTART = "-DOCSTART-"
ASCII_WS_CHARS = " \t\r\f\v"
ASCII_WS = re.compile(r"[ \t\r\f\v]+")


@dataclass
class TaggedCorpus:
    """Sentences with (optional) gold labels, plus what is needed to write them back faithfully.

    ``raw[s]`` holds the original lines of sentence ``s`` split into fields: for CoNLL-U every
    line (comments as a single field, token lines as their 10 fields); for columns format the
    ``-DOCSTART-`` lines preceding the sentence and the token lines. ``label_column`` is the
    0-based field index the labels were read from (``None`` = unknown / in memory).
    ``attributes[s][t]``, when feature columns were asked for, holds the values of those
    columns for token t of sentence s (e.g. ``("NN",)`` for the POS column of CoNLL-2000);
    ``columns[s][t]``, for a feature template, every column of token t but the label
    (:func:`token_columns`).
    """

    tokens: list[list[str]]
    tags: list[list[str]]
    path: str
    lines: list[int]
    fmt: str
    raw: list[list[list[str]]] | None
    label_column: int | None = None
    attributes: list[list[tuple[str, ...]]] | None = None
    columns: list[list[tuple[str, ...]]] | None = None  # template tokens (token_columns)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_tokens(self) -> int:
        """Total number of tokens Σ_s |x_s|."""
        return sum(len(t) for t in self.tokens)

    @property
    def labeled(self) -> bool:
        """True when every sentence carries gold labels."""
        return len(self.tags) == len(self.tokens) and all(
            len(g) == len(t) for g, t in zip(self.tags, self.tokens, strict=True)
        )


def guess_format(path: str | os.PathLike[str]) -> str:
    """``"conllu"`` for ``*.conllu[.gz]`` files, else ``"columns"``."""
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return "conllu" if name.endswith(".conllu") else "columns"


def _label_index(fmt: str, column: str | int | None) -> int | None:
    """Resolve the user's ``column`` to a 0-based field index (``None`` = last column)."""
    if fmt == "conllu":
        if column is None:
            return _CONLLU_NAMED["upos"]
        if isinstance(column, str):
            key = column.lower()
            if key in _CONLLU_NAMED:
                return _CONLLU_NAMED[key]
            if key.isdigit():
                column = int(key)
            else:
                raise OptionError(f"unknown CoNLL-U column {column!r}; use upos, xpos or 3..10")
        if isinstance(column, int) and not isinstance(column, bool) and 3 <= column <= 10:
            return column - 1
        raise OptionError(f"bad CoNLL-U label column {column!r}; use upos, xpos or 3..10")
    if fmt == "columns":
        if column is None:
            return None
        if isinstance(column, str):
            if not column.isdigit():
                raise OptionError(f"bad label column {column!r}; use a 1-based number >= 2")
            column = int(column)
        if isinstance(column, int) and not isinstance(column, bool) and column >= 2:
            return column - 1
        raise OptionError(f"bad label column {column!r}; use a 1-based number >= 2")
    raise OptionError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


STDIN = "-"  # --data -: standard input
STDIN_NAME = "<stdin>"  # how messages name it


def source_name(path: str | os.PathLike[str]) -> str:
    """``path`` as messages and the corpus name it (``-`` is ``<stdin>``)."""
    p = os.fspath(path)
    return STDIN_NAME if p == STDIN else p


def sniff_format(text: str) -> str:
    """The format of text read without a file name (standard input): ``"conllu"`` when its
    first line that is not blank is a comment or has 10 tab-separated fields starting with a
    token id, else ``"columns"``."""
    for line in text.split("\n", 200)[:200]:
        if not line.strip():
            continue
        if line.startswith("#"):
            return "conllu"
        f = line.rstrip("\r").split("\t")
        return "conllu" if len(f) == 10 and f[0][:1].isdigit() else "columns"
    return "columns"


_STDIN_DATA: list[tuple[str, bytes]] = []
"""Standard input as read so far (it cannot be read twice): [] nothing yet, [("head", the
first bytes as they came, read to tell the format)], [("all", everything, decompressed)] or
[("streamed", b"")] (handed out as a stream by :func:`open_source`)."""
_HEAD = 65536


class _HeadThen(io.RawIOBase):
    """A binary stream: ``head``, then what ``rest`` still holds."""

    def __init__(self, head: bytes, rest) -> None:
        self.head, self.rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if len(self.head):
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        return self.rest.readinto(b)


def _stdin_head() -> bytes:
    """The first bytes of standard input, as they came (gzip or not)."""
    if not _STDIN_DATA:
        if sys.stdin is None:
            raise InputError(STDIN_NAME, None, "standard input is not open")
        parts, n = [], 0
        while n < _HEAD:
            b = sys.stdin.buffer.read(_HEAD - n)
            if not b:
                break
            parts.append(b)
            n += len(b)
        _STDIN_DATA.append(("head", b"".join(parts)))
    kind, data = _STDIN_DATA[0]
    if kind == "streamed":
        raise InputError(STDIN_NAME, None, "standard input was already read")
    return data[:_HEAD]


def _stdin_stream():
    """Standard input as a binary file to read once, gzip-decompressed when it is gzip."""
    head = _stdin_head()
    kind, data = _STDIN_DATA[0]
    if kind == "all":
        return io.BytesIO(data)
    _STDIN_DATA[0] = ("streamed", b"")
    raw = io.BufferedReader(_HeadThen(head, sys.stdin.buffer))
    return gzip.GzipFile(fileobj=raw, mode="rb") if head[:2] == b"\x1f\x8b" else raw


def _stdin_bytes() -> bytes:
    """Everything on standard input (gzip-decompressed when it is gzip), read on first use."""
    _stdin_head()
    if _STDIN_DATA[0][0] != "all":
        with _stdin_stream() as f:
            data = f.read()
        _STDIN_DATA[0] = ("all", data)
    return _STDIN_DATA[0][1]


def _stdin_sniff() -> bytes:
    """The first bytes of standard input, decompressed (as far as they go) when gzip."""
    head = _stdin_head()
    if _STDIN_DATA[0][0] == "all" or head[:2] != b"\x1f\x8b":
        return head
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head)


def resolve_format(path: str | os.PathLike[str], fmt: str) -> str:
    """``fmt``, or for ``"auto"`` the format of ``path``: by its name (:func:`guess_format`), or
    for ``-`` (standard input) by its content (:func:`sniff_format`)."""
    if fmt not in (None, "auto"):
        return fmt
    if os.fspath(path) != STDIN:
        return guess_format(path)
    try:
        return sniff_format(_stdin_sniff()[:_HEAD].decode("latin-1"))
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return "columns"  # the reader reports the problem


def read_text(path: str, encoding: str) -> str:
    """Whole file (``-``: standard input) as text; decoding errors name the line where the bad
    bytes are."""
    check_encoding(encoding)
    name = source_name(path)
    with _read_errors(name):
        if path == STDIN:
            data = _stdin_bytes()
        elif path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    text = decode_block(data, name, encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    check_utf8_read_as_other(data, text, name, encoding)
    return text


def check_encoding(encoding: str) -> None:
    """An unknown encoding name is an :class:`OptionError`."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise OptionError(f"unknown encoding {encoding!r}") from None


class _read_errors:
    """Context: the errors of opening and reading ``name`` as one-line InputErrors."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ, e, tb) -> bool:
        name = self.name
        if e is None:
            return False
        if isinstance(e, FileNotFoundError):
            raise InputError(name, None, "no such file") from None
        if isinstance(e, IsADirectoryError):
            raise InputError(name, None, "is a directory, not a file") from None
        if isinstance(e, PermissionError):
            raise InputError(name, None, "permission denied") from None
        if isinstance(e, gzip.BadGzipFile | EOFError | zlib.error):
            raise InputError(name, None, "not a valid gzip file (truncated or corrupt)") \
                from None
        if isinstance(e, OSError):
            raise InputError(name, None, f"cannot read file ({e.strerror or e})") from None
        return False


def open_source(path: str):
    """``path`` (``-``: standard input; ``.gz``: decompressed) as a binary file to read in
    pieces (:func:`read_source`), errors as :func:`read_text` gives them."""
    with _read_errors(source_name(path)):
        if path == STDIN:
            return _stdin_stream()
        if path.endswith(".gz"):
            return gzip.open(path, "rb")
        return open(path, "rb")


def read_source(f, name: str, size: int) -> bytes:
    """Up to ``size`` bytes of a file from :func:`open_source` (−1: the rest)."""
    with _read_errors(name):
        return f.read(size)


def decode_block(data: bytes, name: str, encoding: str, line0: int = 0) -> str:
    """``data`` (lines ``line0 + 1``… of ``name``) as text; bad bytes name their line."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        from .encodings import encoding_hint

        line = line0 + data.count(b"\n", 0, e.start) + 1
        shown = "utf-8" if codecs.lookup(encoding).name == "utf-8" else encoding
        raise InputError(name, line, f"not valid {shown} text; "
                         f"{encoding_hint(data, encoding, e.start)}") from None
    except LookupError:  # a bytes-to-bytes codec such as base64 or rot13
        raise OptionError(f"{encoding!r} is not a text encoding") from None
    except UnicodeError:  # codecs (idna, punycode) that give no position
        raise InputError(name, None, f"not valid {encoding} text") from None


_NON_ASCII = re.compile(rb"[\x80-\xff]")


def check_utf8_read_as_other(data: bytes, text: str, name: str, encoding: str,
                              line0: int = 0) -> bool:
    """Warn (:class:`InputWarning`) when bytes that are valid UTF-8 with non-ASCII characters
    are decoded with another encoding (``--encoding latin-1`` on a UTF-8 file): every accented
    word then becomes another word (``España`` → ``EspaÃ±a``) and silently misses the features
    a model learnt. Pure-ASCII files and UTF-8 reads are never flagged. Returns whether the
    question is settled (False: ``data`` is ASCII, the rest of a file read in blocks still
    has to be looked at); ``line0``: the lines of the file before ``data``."""
    if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig"):
        return True
    first = _NON_ASCII.search(data)
    if first is None:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    line = line0 + data.count(b"\n", 0, first.start()) + 1
    start = data.rfind(b"\n", 0, first.start()) + 1
    end = data.find(b"\n", first.start())
    raw = data[start:end if end >= 0 else len(data)]
    word = next((w for w in raw.split() if _NON_ASCII.search(w)), raw)[:40]
    warnings.warn(InputWarning(
        f"{name}:{line}: the file is valid UTF-8 but is read as {encoding}: "
        f"{word.decode(encoding, 'replace')!r} would be {word.decode('utf-8')!r} in UTF-8, and "
        f"so every word with a non-ASCII character becomes another word; unless the file really "
        f"is {encoding}, train and read it as utf-8 (train's default; evaluate and predict "
        f"read as the model was trained)"), stacklevel=3)
    return True


def too_long(path: str, first: int, lines: list[str], lineno: int, limit: int,
             kind) -> SentenceTooLong:
    """The error for the sentence starting on line ``first`` whose token on line ``lineno``
    (1-based in ``lines``) is its ``limit + 1``-th: its length is counted to the line that
    ends it (``kind(line)``: 1 a token, 0 a line to skip, −1 the end of the sentence), so the
    message gives the whole length."""
    n = limit + 1
    for line in lines[lineno:]:
        k = kind(line)
        if k < 0:
            break
        n += k
    return SentenceTooLong(path, first, n, limit)


def conllu_kind(line: str) -> int:
    """For :func:`too_long`: a CoNLL-U token line (1), a comment, multiword-token or empty-node
    line (0), or a blank line (−1)."""
    if not line.strip():
        return -1
    tid = line.split("\t", 1)[0]
    return 1 if tid.isdigit() else 0


def _columns_kind(line: str) -> int:
    """For :func:`too_long`: a columns token line (1), or a blank or ``-DOCSTART-`` line (−1)."""
    s = line.strip()
    return -1 if not s or s.startswith(DOCSTART) else 1


def read_tagged(
    path: str | os.PathLike[str],
    fmt: str = "conllu",
    column: str | int | None = None,
    encoding: str = "utf-8",
    max_sentence_length: int = 5000,
    labeled: bool = True,
    keep_raw: bool = True,
    feature_columns: tuple[str | int, ...] = (),
) -> TaggedCorpus:
    """Read a tagged corpus.

    ``fmt="conllu"``: ``column`` is ``"upos"`` (default, column 4), ``"xpos"`` (column 5) or a
    1-based column 3..10; comments, multiword lines (``1-2``) and empty nodes (``5.1``) are
    skipped. ``fmt="columns"``: whitespace columns, word in column 1, ``column`` the 1-based label
    column (``None`` = last); ``-DOCSTART-`` lines end the current sentence and are skipped.
    ``fmt="auto"`` picks by file name (:func:`guess_format`), or for ``path="-"`` (standard
    input, named ``<stdin>`` in messages) by content (:func:`sniff_format`). With
    ``labeled=False`` labels are not read (``tags`` holds empty lists) and a columns file may
    have a single column.
    ``keep_raw=False`` drops the original lines (saves memory; the writer then emits the
    minimal format). ``max_sentence_length`` guards against files without sentence breaks; the
    default 5000 admits every sentence of the standard corpora (CoNLL-2002 esp.train has one of
    1,238 tokens). ``feature_columns`` (1-based, or ``upos`` / ``xpos`` in CoNLL-U) fills
    :attr:`TaggedCorpus.attributes` with those columns' values; the label column may not be
    one of them.
    """
    path = os.fspath(path)
    fmt = resolve_format(path, fmt)
    li = _label_index(fmt, column)
    if max_sentence_length < 1:
        raise OptionError(f"--max-sentence-length must be >= 1, got {max_sentence_length}")
    text = read_text(path, encoding)
    path = source_name(path)
    corpus = parse_text(text, path, fmt, li, max_sentence_length, labeled, keep_raw,
                        feature_columns)
    if not corpus.tokens:
        raise InputError(path, None, "no sentences found (empty file?)")
    return corpus


def parse_text(text: str, path: str, fmt: str, li: int | None, max_sentence_length: int,
               labeled: bool, keep_raw: bool = True, feature_columns: tuple = (),
               line0: int = 0, state: dict | None = None) -> TaggedCorpus:
    """The corpus in ``text`` (lines ``line0 + 1``… of ``path``, format ``fmt``, labels in
    field ``li``), as :func:`read_tagged` reads it, without the check that it has sentences;
    ``state`` carries what the columns parser needs from block to block."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small lists, no cycles: the cyclic GC only costs time here
    try:
        parse = _parse_conllu if fmt == "conllu" else _parse_columns
        corpus = parse(text, path, li, max_sentence_length, labeled, keep_raw, line0, state)
    finally:
        if gc_was_enabled:
            gc.enable()
    if feature_columns and corpus.tokens:
        corpus.attributes = _attributes(corpus, fmt, feature_columns, labeled)
    return corpus


def feature_indices(fmt: str, feature_columns, path: str, label_column: int | None = None,
                    labeled: bool = False) -> list[int]:
    """The 0-based fields of ``feature_columns`` (1-based, or ``upos`` / ``xpos`` in
    CoNLL-U); OptionError for a bad one."""
    idx = []
    for c in feature_columns:
        try:
            j = _label_index(fmt, c) if fmt == "conllu" else int(c) - 1
        except (OptionError, ValueError):
            use = "upos, xpos or a column number 3..10" if fmt == "conllu" else \
                "a 1-based column number"
            raise OptionError(f"bad feature column {c!r} for {path} "
                              f"({_FORMAT_NAMES[fmt]}); use {use}") from None
        if j < 1 or (fmt == "conllu" and j > 9):
            raise OptionError(f"bad feature column {c!r}: column 1 is the word; use 2 or more")
        if labeled and label_column is not None and j == label_column:
            raise OptionError(f"feature column {c} is the label column")
        idx.append(j)
    return idx


def _attributes(corpus: TaggedCorpus, fmt: str, feature_columns, labeled: bool):
    """The values of ``feature_columns`` per token, from the raw lines of ``corpus``."""
    if corpus.raw is None:
        raise OptionError("feature columns need the original lines (keep_raw=True)")
    idx = feature_indices(fmt, feature_columns, corpus.path, corpus.label_column, labeled)
    out = []
    for rl in corpus.raw:
        toks = _token_fields(rl, fmt)
        if toks and max(idx) >= len(toks[0]):
            raise OptionError(f"feature column {max(idx) + 1} is beyond the "
                              f"{len(toks[0])} columns of {corpus.path}")
        out.append([tuple(f[j] for j in idx) for f in toks])
    return out


CONLLU_TOKEN_COLUMNS = ("FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS",
                        "MISC")
"""The columns of a CoNLL-U token in a template's numbering (:func:`token_columns`), before the
label column is taken out."""


def token_columns(corpus: TaggedCorpus, width: int | None = None) -> list[list[tuple[str, ...]]]:
    """Per token, every input column but the label column, the word first: what a CRF++ /
    Wapiti template's ``%x[r,c]`` reads as column c (``crf_learn`` numbers a file's columns so,
    the label being the last).

    A columns file: its columns without the label column (CoNLL-2000: 0 = word, 1 = POS).
    CoNLL-U: :data:`CONLLU_TOKEN_COLUMNS` (ID dropped) without the label column (UPOS by
    default: 0 = FORM, 1 = LEMMA, 2 = XPOS, 3 = FEATS, 4 = HEAD, 5 = DEPREL, 6 = DEPS, 7 = MISC).
    ``width``: how many columns a model reads; an unlabeled columns file (predict) may hold
    that many, or one more, the label column (``corpus.label_column``, else the last), which is
    dropped as ``crf_test`` drops the answer column. A file of another width is an
    :class:`InputError` naming its first token line.
    """
    if corpus.raw is None:
        raise OptionError("template columns need the original lines (keep_raw=True)")
    conllu = corpus.fmt == "conllu"
    li = corpus.label_column
    out: list[list[tuple[str, ...]]] = []
    drop: tuple[int, ...] | None = None
    for s, rl in enumerate(corpus.raw):
        toks = [f for f in rl if len(f) == 10 and f[0].isdigit()] if conllu else \
            [f for f in rl if not f[0].startswith(DOCSTART)]
        if drop is None and toks:
            n = len(toks[0])
            if conllu:
                drop = (0, li)
            elif not corpus.labeled and (width is None or n == width):
                drop = ()
            else:
                drop = (n - 1 if li is None else li,)
            got = n - len(set(drop))
            if width is not None and got != width:
                have = f"{n} columns ({got} without ID and the label column)" if conllu else \
                    f"{n} columns" + (f" ({got} without the label column)"
                                      if corpus.labeled else "")
                raise InputError(corpus.path, corpus.lines[s],
                                 f"{have}; the model's template reads {width} token columns "
                                 "(plus the label column, if present)")
            keep = [j for j in range(n) if j not in drop]
        out.append([tuple(f[j] for j in keep) for f in toks])
    return out


class _Sentences:
    """What a parser has read: finished sentences, and the one being read (``words``, ``labs``,
    ``rlines``, starting on line ``first``)."""

    __slots__ = ("labeled", "keep_raw", "tokens", "tags", "lines", "raw", "words", "labs",
                 "rlines", "first")

    def __init__(self, labeled: bool, keep_raw: bool) -> None:
        self.labeled, self.keep_raw = labeled, keep_raw
        self.tokens: list[list[str]] = []
        self.tags: list[list[str]] = []
        self.lines: list[int] = []
        self.raw: list[list[list[str]]] = []
        self.words: list[str] = []
        self.labs: list[str] = []
        self.rlines: list[list[str]] = []
        self.first = 0

    def end(self) -> None:
        """Finish the sentence being read, if it has words."""
        if self.words:
            self.tokens.append(self.words)
            self.tags.append(self.labs if self.labeled else [])
            self.lines.append(self.first)
            self.raw.append(self.rlines)
            self.words, self.labs, self.rlines = [], [], []

    def corpus(self, path: str, fmt: str, label_column: int | None) -> TaggedCorpus:
        """Finish the last sentence (raw lines after it go with it) and build the corpus."""
        if self.words:
            self.end()
        elif self.rlines and self.raw and self.keep_raw:  # trailing comments / -DOCSTART-
            self.raw[-1].extend(self.rlines)
        return TaggedCorpus(self.tokens, self.tags, path, self.lines, fmt,
                            self.raw if self.keep_raw else None, label_column)


def _parse_conllu(
    text: str, path: str, li: int, max_len: int, labeled: bool, keep_raw: bool,
    line0: int = 0, state: dict | None = None
) -> TaggedCorpus:
    """``line0``: the lines of the file before ``text`` (a block of it); ``state``: unused
    (the columns parser's)."""
    out = _Sentences(labeled, keep_raw)
    colname = {3: "UPOS", 4: "XPOS"}.get(li, f"column {li + 1}")
    lines = text.split("\n")
    for idx, line in enumerate(lines, 1):
        lineno = line0 + idx
        if line.endswith("\r"):
            line = line[:-1]
        if not line or line.isspace():
            out.end()
            continue
        if line[0] == "#":
            if keep_raw:
                out.rlines.append([line])
            continue
        f = line.split("\t")
        if len(f) != 10:
            raise InputError(path, lineno, f"expected 10 tab-separated columns, found {len(f)}")
        tid = f[0]
        if not tid.isdigit() or not tid.isascii():
            if "-" in tid or "." in tid:  # multiword token / empty node
                a, _, b = tid.replace(".", "-", 1).partition("-")
                if a.isdigit() and b.isdigit() and a.isascii() and b.isascii():
                    if keep_raw:
                        out.rlines.append(f)
                    continue
            raise InputError(path, lineno, f"bad token id {tid!r}")
        expect = len(out.words) + 1
        if int(tid) != expect:
            raise InputError(path, lineno, f"token id {tid} out of order, expected {expect}")
        if expect > max_len:
            raise too_long(path, out.first, lines, idx, max_len, conllu_kind)
        w = f[1]
        if not w or w.isspace():
            raise InputError(path, lineno, "empty word (column 2)")
        if labeled:
            lab = f[li]
            if not lab or lab.isspace() or lab == "_":
                raise InputError(path, lineno, f"empty label in {colname} (column {li + 1})")
            out.labs.append(lab)
        if not out.words:
            out.first = lineno
        out.words.append(w)
        if keep_raw:
            out.rlines.append(f)
    return out.corpus(path, "conllu", li)


class TabFields(list):
    """The fields of a columns line that held a tab (as the parser keeps them): written back
    joined by tabs, as read (:func:`line_separator`)."""

    __slots__ = ()


def line_separator(fields: list[str]) -> str:
    """What joins the fields of a kept columns line when written back: a tab for a line that
    held one (:class:`TabFields`), else a space (the streamed kernels decide alike:
    :func:`demidcd.io.stream._separator`)."""
    return "\t" if isinstance(fields, TabFields) else " "


def _parse_columns(
    text: str, path: str, li: int | None, max_len: int, labeled: bool, keep_raw: bool,
    line0: int = 0, state: dict | None = None
) -> TaggedCorpus:
    """``line0``: the lines of the file before ``text`` (a block of it); ``state``: the
    token lines' field count and where it was set (``ncols``, ``ncols_line``), carried from
    block to block."""
    out = _Sentences(labeled, keep_raw)
    state = {} if state is None else state
    ncols = state.get("ncols", 0)
    ncols_line = state.get("ncols_line", 0)
    min_cols = 2 if labeled else 1
    if li is not None:
        min_cols = max(min_cols, li + 1) if labeled else 1
    lines = text.split("\n")
    for idx, line in enumerate(lines, 1):
        lineno = line0 + idx
        # split on ASCII whitespace only: NBSP or NEL (U+0085, e.g. from latin-1 decoding of
        # UTF-8) inside a word must not split it
        f = line.split() if line.isascii() else ASCII_WS.split(line.strip(ASCII_WS_CHARS))
        if not f or not f[0]:
            out.end()
            continue
        if keep_raw and "\t" in line:
            f = TabFields(f)
        if f[0].startswith(DOCSTART):
            out.end()
            if keep_raw:
                out.rlines.append(f)
            continue
        n = len(f)
        if ncols == 0:
            if n < min_cols:
                what = f"at least {min_cols}" if li is None else f"{min_cols} (label column)"
                raise InputError(path, lineno, f"expected {what} columns, found {n}")
            ncols, ncols_line = n, lineno
        elif n != ncols:
            raise InputError(
                path, lineno, f"expected {ncols} columns (as on line {ncols_line}), found {n}"
            )
        if len(out.words) >= max_len:
            raise too_long(path, out.first, lines, idx, max_len, _columns_kind)
        if not out.words:
            out.first = lineno
        out.words.append(f[0])
        if labeled:
            out.labs.append(f[-1] if li is None else f[li])
        if keep_raw:
            out.rlines.append(f)
    state["ncols"], state["ncols_line"] = ncols, ncols_line
    label_col = (ncols - 1 if li is None else li) if (labeled and ncols) else li
    return out.corpus(path, "columns", label_col)


def corpus_from_lists(
    tokens: list[list[str]], tags: list[list[str]] | None = None, fmt: str = "columns"
) -> TaggedCorpus:
    """Build an in-memory corpus from word lists and (optionally) tag lists of equal shape.

    ``lines`` are the lines the sentences would start on in a file written by
    :func:`write_tagged` (one token per line, a blank line after each sentence).
    """
    if fmt not in FORMATS:
        raise OptionError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    toks = [list(s) for s in tokens]
    if tags is None:
        tg: list[list[str]] = [[] for _ in toks]
    else:
        tg = [list(s) for s in tags]
        if len(tg) != len(toks):
            raise ValueError(f"{len(toks)} token sentences but {len(tg)} tag sentences")
    lines: list[int] = []
    line = 1
    for s, (ws, ts) in enumerate(zip(toks, tg, strict=True)):
        if not ws:
            raise ValueError(f"sentence {s} is empty")
        if tags is not None and len(ts) != len(ws):
            raise ValueError(f"sentence {s}: {len(ws)} tokens but {len(ts)} tags")
        for w in ws:
            if not isinstance(w, str) or not w or w.isspace():
                raise ValueError(f"sentence {s}: empty or non-string token {w!r}")
        for t in ts:
            if not isinstance(t, str) or not t or t.isspace():
                raise ValueError(f"sentence {s}: empty or non-string tag {t!r}")
        lines.append(line)
        line += len(ws) + 1
    return TaggedCorpus(toks, tg, "", lines, fmt, None, None)


class Blocks(NamedTuple):
    """Predictions to write as blocks (:func:`write_tagged`): block b is sentence ``order[b]``
    with the tags ``tags[b]``, preceded by the line ``headers[b]`` (None: none) and with
    ``extra[b][t]`` as a field after token t's label (None: no extra field). A sentence may
    come in several blocks (n-best lists); the lines around its tokens that are not tokens
    (``-DOCSTART-``) are written with its first block only."""

    tags: list[list[str]]
    order: list[int]
    headers: list[str] | None = None
    extra: list[list[str]] | None = None


def _blocks(corpus: TaggedCorpus, predicted: list[list[str]] | Blocks) -> Blocks:
    if isinstance(predicted, Blocks):
        if not (len(predicted.tags) == len(predicted.order)
                and all(0 <= s < len(corpus.tokens) for s in predicted.order)
                and (predicted.headers is None or len(predicted.headers) == len(predicted.order))
                and (predicted.extra is None or len(predicted.extra) == len(predicted.order))):
            raise ValueError("inconsistent prediction blocks")
        return predicted
    if len(predicted) != len(corpus.tokens):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(corpus.tokens)}")
    return Blocks(predicted, list(range(len(predicted))))


def _check_blocks(corpus: TaggedCorpus, blocks: Blocks, fmt: str) -> None:
    """Every block's tags (and extra fields) match its sentence and hold no separator."""
    bad = "\t\n\r" if fmt == "conllu" else ASCII_WS_CHARS + "\n"
    good: set = set()  # tags seen and found fine (most repeat: each is looked at once)
    for b, s in enumerate(blocks.order):
        n = len(corpus.tokens[s])
        fields = [blocks.tags[b]] + ([blocks.extra[b]] if blocks.extra is not None else [])
        for p in fields:
            if len(p) != n:
                raise ValueError(f"sentence {s}: {len(p)} predicted tags for {n} tokens")
            if all(t.__class__ is str for t in p) and good.issuperset(p):
                continue
            for t in p:
                if not isinstance(t, str) or not t:
                    raise ValueError(f"sentence {s}: empty or non-string tag {t!r}")
                if t in good:
                    continue
                if any(c in t for c in bad):
                    raise ValueError(f"sentence {s}: tag {t!r} contains a separator")
                good.add(t)
        if blocks.headers is not None and blocks.headers[b] is not None and \
                any(c in blocks.headers[b] for c in "\n\r"):
            raise ValueError(f"sentence {s}: header {blocks.headers[b]!r} spans lines")


def _conllu_lines(corpus: TaggedCorpus, blocks: Blocks, li: int):
    """CoNLL-U sentences with the label field replaced; the header (a ``#`` comment) after the
    sentence's comments and an extra field in MISC as ``Margin=`` (as it is when it holds an
    ``=``: ``Prob=`` of ``--marginals``)."""
    for b, s in enumerate(blocks.order):
        words, pred = corpus.tokens[s], blocks.tags[b]
        ext = blocks.extra[b] if blocks.extra is not None else None
        head = blocks.headers[b] if blocks.headers is not None else None
        rl = corpus.raw[s] if corpus.raw is not None else None
        if rl is None:
            if head is not None:
                yield head
            for i, (w, t) in enumerate(zip(words, pred, strict=True)):
                if "\t" in w or "\n" in w:
                    raise ValueError(f"sentence {s}: word {w!r} contains a tab or newline")
                f = [str(i + 1), w] + ["_"] * 8
                f[li] = t
                if ext is not None:
                    f[9] = ext[i] if "=" in ext[i] else f"Margin={ext[i]}"
                yield "\t".join(f)
        else:
            k = 0
            for f in rl:
                if head is not None and len(f) == 10:  # after the comments: before token 1
                    yield head
                    head = None
                if len(f) == 10 and f[0].isdigit():
                    g = list(f)
                    g[li] = pred[k]
                    if ext is not None:
                        m = ext[k] if "=" in ext[k] else f"Margin={ext[k]}"
                        g[9] = m if g[9] == "_" else f"{g[9]}|{m}"
                    k += 1
                    yield "\t".join(g)
                else:
                    yield "\t".join(f)
        yield ""


def _columns_lines(corpus: TaggedCorpus, blocks: Blocks, li: int | None):
    """Token lines with the prediction in field ``li`` (``None`` or beyond the fields: a new
    last field) and the extra field right after it; the header before the first token line.
    ``-DOCSTART-`` lines get the label ``O`` the same way and are padded with ``O`` to the
    token lines' field count, so that conlleval (which needs every line to have as many
    fields) reads the file."""
    ncols = next((len(f) for rl in (corpus.raw or ()) for f in rl
                  if not f[0].startswith(DOCSTART)), 0)
    appending = li is None or li >= ncols
    n_out = (ncols + 1 if appending else ncols) + (blocks.extra is not None)
    last = -1
    for b, s in enumerate(blocks.order):
        words, pred = corpus.tokens[s], blocks.tags[b]
        ext = blocks.extra[b] if blocks.extra is not None else None
        head = blocks.headers[b] if blocks.headers is not None else None
        first, last = s != last, s
        rl = corpus.raw[s] if corpus.raw is not None else None
        if rl is None:
            if head is not None:
                yield head
            for k, (w, t) in enumerate(zip(words, pred, strict=True)):
                if ASCII_WS.search(w) or "\n" in w:
                    raise ValueError(f"sentence {s}: word {w!r} contains whitespace")
                yield f"{w} {t}" if ext is None else f"{w} {t} {ext[k]}"
        else:
            k = 0
            for f in rl:
                if f[0].startswith(DOCSTART):
                    if not first:
                        continue
                    g = list(f)
                    if appending:
                        g.append("O")
                    elif li < len(g):
                        g[li] = "O"
                    g.extend(["O"] * (n_out - len(g)))
                    yield line_separator(f).join(g)
                    yield ""
                    continue
                if k == 0 and head is not None:
                    yield head
                g = list(f)
                if li is None or li >= len(g):
                    g.append(pred[k])  # beyond the existing columns: append a new last column
                    at = len(g)
                else:
                    g[li] = pred[k]
                    at = li + 1
                if ext is not None:
                    g.insert(at, ext[k])
                k += 1
                yield line_separator(f).join(g)
        yield ""


def column_values(corpus: TaggedCorpus, column: str | int | None,
                  exclude: tuple[str | int, ...] = ()) -> list[list[str]]:
    """The values of the label ``column`` (as :func:`read_tagged` takes it; None: UPOS for
    CoNLL-U, the last column of a columns file) per token, from the raw lines (``--force``
    reads the given labels so). A columns file whose only column is the word has none, and
    the column may not be one of the feature columns ``exclude``: an OptionError."""
    if corpus.raw is None:
        raise OptionError("reading a column needs the original lines (keep_raw=True)")
    fmt = corpus.fmt
    li = _label_index(fmt, column)
    out = []
    for rl in corpus.raw:
        toks = _token_fields(rl, fmt)
        j = len(toks[0]) - 1 if li is None and toks else li
        if toks and (j is None or j < 1 or j >= len(toks[0])):
            have = len(toks[0])
            which = "" if li is None else f" {li + 1}"
            raise OptionError(f"{corpus.path} has no label column{which} ({have} column"
                              f"{'' if have == 1 else 's'})")
        if toks and any(j == (_label_index(fmt, c) if fmt == "conllu" else int(c) - 1)
                        for c in exclude):
            raise OptionError(f"the label column ({j + 1}) of {corpus.path} is a feature "
                              "column; give the labels in another one (--column N)")
        out.append([f[j] for f in toks])
    return out


def write_tagged(
    path: str | os.PathLike[str],
    corpus: TaggedCorpus,
    predicted: list[list[str]] | Blocks,
    column: str | int | None = None,
    encoding: str = "utf-8",
) -> None:
    """Write ``corpus`` with ``predicted`` labels in the label column, atomically
    (``predicted``: a tag list per sentence, or :class:`Blocks`: n-best lists, header lines,
    an extra field after the label).

    ``column=None`` uses the column the corpus was read from (``corpus.label_column``); for an
    unlabeled columns file, or an in-memory corpus, predicted labels go into a new last column
    (in memory: ``word tag`` lines). A columns-format ``column`` beyond the existing columns
    appends one new last column. A columns line comes back joined by a tab when it held one,
    else by a space (:func:`line_separator`). CoNLL-U keeps every original line and replaces
    only the label field of token lines; an in-memory corpus gets ``_`` in the unknown fields.
    """
    path = os.fspath(path)
    text = render_tagged(corpus, predicted, column)
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as e:
        raise OptionError(f"{path}: {text[e.start:e.end]!r} cannot be written in {encoding}; "
                          "pass another --encoding") from None
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    from .model import atomic_write

    atomic_write(path, lambda f: f.write(data))


def output_label_index(corpus: TaggedCorpus, column: str | int | None) -> int | None:
    """The field :func:`write_tagged` writes the labels to (None: a new last field)."""
    fmt = corpus.fmt
    if fmt not in FORMATS:
        raise OptionError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if column is not None:
        return _label_index(fmt, column)
    if corpus.label_column is not None:
        return corpus.label_column
    li = _label_index(fmt, None)
    if fmt == "columns" and corpus.raw is not None and not corpus.labeled:
        li = None  # unlabeled file: append the predictions
    return li


def render_tagged(corpus: TaggedCorpus, predicted: list[list[str]] | Blocks,
                  column: str | int | None = None) -> str:
    """The text :func:`write_tagged` writes (before encoding)."""
    li = output_label_index(corpus, column)
    blocks = _blocks(corpus, predicted)
    _check_blocks(corpus, blocks, corpus.fmt)
    gen = _conllu_lines(corpus, blocks, li) if corpus.fmt == "conllu" else _columns_lines(
        corpus, blocks, li
    )
    return "\n".join(gen) + "\n"


def _token_fields(raw_lines: list[list[str]], fmt: str) -> list[list[str]]:
    """The field lists of a sentence's token lines: CoNLL-U's word lines (10 fields, an
    integer ID), or every line of a columns file but ``-DOCSTART-``."""
    if fmt == "conllu":
        return [f for f in raw_lines if len(f) == 10 and f[0].isdigit()]
    return [f for f in raw_lines if not f[0].startswith(DOCSTART)]
