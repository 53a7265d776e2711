"""Tagged corpora: CoNLL-U and whitespace-column (CoNLL-2000/2002) files, and their reader.

A corpus is a list of sentences x = (x_1 … x_n) with gold labels y = (y_1 … y_n). Every problem
in a file raises :class:`demidcd.errors.InputError` naming the file and the 1-based line; a bad
argument (format, column, encoding name) raises :class:`demidcd.errors.OptionError`.

This module holds the corpus (:class:`TaggedCorpus`), the formats and their columns (which
field holds the labels, reading or writing; the feature and template columns of a token), and
the parsers of the two formats. The text comes from :mod:`demidcd.io.text_source` (files,
``.gz``, standard input, decoding checks); :mod:`demidcd.io.tagged_writer` writes predicted
labels back into the original lines.
"""

from __future__ import annotations

import gc
import gzip
import os
import re
import zlib
from dataclasses import dataclass

from demidcd.errors import InputError, OptionError, SentenceTooLong

from .shards import ByteRange, read_range
from .text_source import STDIN, read_text, source_name, stdin_sample

__all__ = [
    "TaggedCorpus",
    "read_tagged",
    "parse_text",
    "corpus_from_lists",
    "token_columns",
    "column_values",
    "output_label_index",
    "label_index",
    "guess_format",
    "resolve_format",
    "read_partial",
    "token_line",
    "SET_SEPARATOR",
    "FORMATS",
]

FORMATS = ("conllu", "columns")
_FORMAT_NAMES = {"conllu": "a CoNLL-U file", "columns": "a columns file"}
SET_SEPARATOR = "|"  # a label cell A|B|C: the token's label is one of A, B, C
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
    (:func:`token_columns`). Partially labelled data (:func:`read_partial`): ``tags[s][t]`` is
    None for an unknown label and a frozenset of two or more labels for a set cell
    (``n_unknown``, ``n_sets`` count them); every other entry is one label.
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
    n_unknown: int = 0  # tokens whose label cell is unknown (tags[s][t] None: read_partial)
    n_sets: int = 0  # tokens whose label cell is a set of labels (a frozenset)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_tokens(self) -> int:
        """Total number of tokens Σ_s |x_s|."""
        return sum(len(t) for t in self.tokens)

    @property
    def labelled(self) -> bool:
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


def label_index(fmt: str, column: str | int | None) -> int | None:
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




def resolve_format(path: str | os.PathLike[str], fmt: str) -> str:
    """``fmt``, or for ``"auto"`` the format of ``path``: by its name (:func:`guess_format`), or
    for ``-`` (standard input) by its content (:func:`sniff_format`)."""
    if fmt not in (None, "auto"):
        return fmt
    if os.fspath(path) != STDIN:
        return guess_format(path)
    try:
        return sniff_format(stdin_sample().decode("latin-1"))
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return "columns"  # the reader reports the problem




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
    labelled: bool = True,
    keep_raw: bool = True,
    feature_columns: tuple[str | int, ...] = (),
    unknown_label: str | None = None,
) -> TaggedCorpus:
    """Read a tagged corpus.

    ``fmt="conllu"``: ``column`` is ``"upos"`` (default, column 4), ``"xpos"`` (column 5) or a
    1-based column 3..10; comments, multiword lines (``1-2``) and empty nodes (``5.1``) are
    skipped. ``fmt="columns"``: whitespace columns, word in column 1, ``column`` the 1-based label
    column (``None`` = last); ``-DOCSTART-`` lines end the current sentence and are skipped.
    ``fmt="auto"`` picks by file name (:func:`guess_format`), or for ``path="-"`` (standard
    input, named ``<stdin>`` in messages) by content (:func:`sniff_format`). With
    ``labelled=False`` labels are not read (``tags`` holds empty lists) and a columns file may
    have a single column.
    ``keep_raw=False`` drops the original lines (saves memory; the writer then emits the
    minimal format). ``max_sentence_length`` guards against files without sentence breaks; the
    default 5000 admits every sentence of the standard corpora (CoNLL-2002 esp.train has one of
    1,238 tokens). ``feature_columns`` (1-based, or ``upos`` / ``xpos`` in CoNLL-U) fills
    :attr:`TaggedCorpus.attributes` with those columns' values; the label column may not be
    one of them. ``unknown_label`` (e.g. ``"?"``; None or ``""``: off): label cells equal to it
    are unknown and cells ``A|B`` are sets of labels (:func:`read_partial`).
    """
    path = os.fspath(path)
    fmt = resolve_format(path, fmt)
    li = label_index(fmt, column)
    if max_sentence_length < 1:
        raise OptionError(f"--max-sentence-length must be >= 1, got {max_sentence_length}")
    text = read_text(path, encoding)
    path = source_name(path)
    corpus = parse_text(text, path, fmt, li, max_sentence_length, labelled, keep_raw,
                        feature_columns)
    if not corpus.tokens:
        raise InputError(path, None, "no sentences found (empty file?)")
    if labelled and unknown_label:
        read_partial(corpus, unknown_label, sets=not (fmt == "conllu" and li in _PIPED))
    return corpus


def read_tagged_part(path: str, r: ByteRange, fmt: str, column: str | int | None = None,
                     encoding: str = "utf-8", max_sentence_length: int = 5000,
                     keep_raw: bool = True, feature_columns: tuple[str | int, ...] = (),
                     state: dict | None = None, unknown_label: str | None = None
                     ) -> TaggedCorpus:
    """The labelled sentences of bytes ``[r.start, r.end)`` of ``path`` (a range of
    :func:`~demidcd.io.shards.byte_ranges`), as :func:`read_tagged` reads them in the whole
    file (messages name the file's lines); ``state``: the columns parser's, as the file's
    first token line sets it (:func:`first_columns_state`), so that every part checks its
    lines' width against that line; ``unknown_label`` as :func:`read_tagged`'s. A part may
    hold no sentence."""
    fmt = resolve_format(path, fmt)
    text = read_range(path, r, encoding)
    li = label_index(fmt, column)
    corpus = parse_text(text, source_name(path), fmt, li, max_sentence_length, True, keep_raw,
                        feature_columns, r.line0, dict(state) if state else None)
    if unknown_label:
        read_partial(corpus, unknown_label, sets=not (fmt == "conllu" and li in _PIPED))
    return corpus


def first_columns_state(path: str, encoding: str = "utf-8", limit: int = 1 << 16
                        ) -> dict | None:
    """The columns parser's state after the first token line of ``path`` (its field count
    and line number), found in the first ``limit`` bytes; None when none is there."""
    with open(path, "rb") as f:
        head = f.read(limit)
    text = head[:head.rfind(b"\n") + 1].decode(encoding, "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    for i, line in enumerate(text.split("\n"), 1):
        f = line.split() if line.isascii() else ASCII_WS.split(line.strip(ASCII_WS_CHARS))
        if not f or not f[0] or f[0].startswith(DOCSTART):
            continue
        return {"ncols": len(f), "ncols_line": i}
    return None

_PIPED = (5, 8, 9)  # CoNLL-U FEATS, DEPS, MISC: "|" is their own syntax, not a set


def read_partial(corpus: TaggedCorpus, unknown_label: str, sets: bool = True) -> TaggedCorpus:
    """Turn the partial label cells of ``corpus`` into what the library takes, in place: a
    cell equal to ``unknown_label`` → None (any label), a cell ``A|B|…`` → frozenset({A, B,
    …}) (one label of the set; a set of one label is that label). A cell of a set with an
    empty member or holding the unknown marker is an :class:`InputError` naming its line.
    Data without such cells is left as it is (the same lists). ``sets`` False: only the
    unknown cells (a label column whose values hold ``|`` themselves, CoNLL-U FEATS)."""
    labels = {t for s in corpus.tags for t in s}
    special = {t for t in labels if t == unknown_label or (sets and SET_SEPARATOR in t)}
    if not special:
        return corpus
    conv: dict[str, object] = {}
    for t in special:
        if t == unknown_label:
            conv[t] = None
            continue
        parts = t.split(SET_SEPARATOR)
        if any(not p or p == unknown_label for p in parts):
            conv[t] = _BAD_SET
            continue
        members = frozenset(parts)
        conv[t] = next(iter(members)) if len(members) == 1 else members
    n_unk = n_sets = 0
    for s, tags in enumerate(corpus.tags):
        for t, lab in enumerate(tags):
            if lab in special:
                v = conv[lab]
                if v is _BAD_SET:
                    raise InputError(corpus.path, token_line(corpus, s, t),
                                     f"bad label set {lab!r}: give labels separated by "
                                     f"{SET_SEPARATOR!r}, none empty (the unknown label "
                                     f"{unknown_label!r} stands alone)")
                tags[t] = v
                if v is None:
                    n_unk += 1
                elif not isinstance(v, str):
                    n_sets += 1
    corpus.n_unknown, corpus.n_sets = n_unk, n_sets
    return corpus


_BAD_SET = object()


def token_line(corpus: TaggedCorpus, s: int, t: int) -> int:
    """The 1-based line of token ``t`` of sentence ``s`` in the file (its first token's line
    plus the token lines and, in CoNLL-U, multiword and empty-node lines between)."""
    first = corpus.lines[s]
    if corpus.fmt != "conllu" or corpus.raw is None:
        return first + t  # (a columns file's tokens are consecutive lines)
    rl = corpus.raw[s]
    idx = [k for k, f in enumerate(rl) if len(f) == 10 and f[0].isdigit()]
    return first + idx[t] - idx[0] if t < len(idx) else first + t


def parse_text(text: str, path: str, fmt: str, li: int | None, max_sentence_length: int,
               labelled: bool, keep_raw: bool = True, feature_columns: tuple = (),
               line0: int = 0, state: dict | None = None) -> TaggedCorpus:
    """The corpus in ``text`` (lines ``line0 + 1``… of ``path``, format ``fmt``, labels in
    field ``li``), as :func:`read_tagged` reads it, without the check that it has sentences;
    ``state`` carries what the columns parser needs from block to block."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small lists, no cycles: the cyclic GC only costs time here
    try:
        parse = _parse_conllu if fmt == "conllu" else _parse_columns
        corpus = parse(text, path, li, max_sentence_length, labelled, keep_raw, line0, state)
    finally:
        if gc_was_enabled:
            gc.enable()
    if feature_columns and corpus.tokens:
        corpus.attributes = _attributes(corpus, fmt, feature_columns, labelled)
    return corpus


def feature_indices(fmt: str, feature_columns, path: str, label_column: int | None = None,
                    labelled: bool = False) -> list[int]:
    """The 0-based fields of ``feature_columns`` (1-based, or ``upos`` / ``xpos`` in
    CoNLL-U); OptionError for a bad one."""
    idx = []
    for c in feature_columns:
        try:
            j = label_index(fmt, c) if fmt == "conllu" else int(c) - 1
        except (OptionError, ValueError):
            use = "upos, xpos or a column number 3..10" if fmt == "conllu" else \
                "a 1-based column number"
            raise OptionError(f"bad feature column {c!r} for {path} "
                              f"({_FORMAT_NAMES[fmt]}); use {use}") from None
        if j < 1 or (fmt == "conllu" and j > 9):
            raise OptionError(f"bad feature column {c!r}: column 1 is the word; use 2 or more")
        if labelled and label_column is not None and j == label_column:
            raise OptionError(f"feature column {c} is the label column")
        idx.append(j)
    return idx


def _attributes(corpus: TaggedCorpus, fmt: str, feature_columns, labelled: bool):
    """The values of ``feature_columns`` per token, from the raw lines of ``corpus``."""
    if corpus.raw is None:
        raise OptionError("feature columns need the original lines (keep_raw=True)")
    idx = feature_indices(fmt, feature_columns, corpus.path, corpus.label_column, labelled)
    out = []
    for rl in corpus.raw:
        toks = _token_fields(rl, fmt)
        if toks and max(idx) >= len(toks[0]):
            raise OptionError(f"feature column {max(idx) + 1} is beyond the "
                              f"{len(toks[0])} columns of {corpus.path}")
        out.append([tuple(f[j] for j in idx) for f in toks])
    return out


def token_columns(corpus: TaggedCorpus, width: int | None = None) -> list[list[tuple[str, ...]]]:
    """Per token, every input column but the label column, the word first: what a CRF++ /
    Wapiti template's ``%x[r,c]`` reads as column c (``crf_learn`` numbers a file's columns so,
    the label being the last).

    A columns file: its columns without the label column (CoNLL-2000: 0 = word, 1 = POS).
    CoNLL-U: FORM, LEMMA, UPOS, XPOS, FEATS, HEAD, DEPREL, DEPS, MISC (ID dropped) without the
    label column (UPOS by default: 0 = FORM, 1 = LEMMA, 2 = XPOS, 3 = FEATS, 4 = HEAD,
    5 = DEPREL, 6 = DEPS, 7 = MISC).
    ``width``: how many columns a model reads; an unlabelled columns file (predict) may hold
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
            elif not corpus.labelled and (width is None or n == width):
                drop = ()
            else:
                drop = (n - 1 if li is None else li,)
            got = n - len(set(drop))
            if width is not None and got != width:
                have = f"{n} columns ({got} without ID and the label column)" if conllu else \
                    f"{n} columns" + (f" ({got} without the label column)"
                                      if corpus.labelled else "")
                raise InputError(corpus.path, corpus.lines[s],
                                 f"{have}; the model's template reads {width} token columns "
                                 "(plus the label column, if present)")
            keep = [j for j in range(n) if j not in drop]
        out.append([tuple(f[j] for j in keep) for f in toks])
    return out


class _Sentences:
    """What a parser has read: finished sentences, and the one being read (``words``, ``labs``,
    ``rlines``, starting on line ``first``). The parsers put one string object per distinct
    word and per distinct label in ``tokens`` and ``tags`` (a dictionary of those read so far):
    a million tokens of a hundred labels then hold a hundred label strings, not a million,
    and their repeated words one string each."""

    __slots__ = ("labelled", "keep_raw", "tokens", "tags", "lines", "raw", "words", "labs",
                 "rlines", "first")

    def __init__(self, labelled: bool, keep_raw: bool) -> None:
        self.labelled, self.keep_raw = labelled, keep_raw
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
            self.tags.append(self.labs if self.labelled else [])
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
    text: str, path: str, li: int, max_len: int, labelled: bool, keep_raw: bool,
    line0: int = 0, state: dict | None = None
) -> TaggedCorpus:
    """``line0``: the lines of the file before ``text`` (a block of it); ``state``: unused
    (the columns parser's)."""
    out = _Sentences(labelled, keep_raw)
    colname = {3: "UPOS", 4: "XPOS"}.get(li, f"column {li + 1}")
    lines = text.split("\n")
    same = {}.setdefault  # one string object per distinct word and label (_Sentences)
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
        if labelled:
            lab = f[li]
            if not lab or lab.isspace() or lab == "_":
                raise InputError(path, lineno, f"empty label in {colname} (column {li + 1})")
            out.labs.append(same(lab, lab))
        if not out.words:
            out.first = lineno
        out.words.append(same(w, w))
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


def _too_few_columns(min_cols: int, li: int | None, n: int) -> str:
    what = f"at least {min_cols}" if li is None else f"{min_cols} (label column)"
    return f"expected {what} columns, found {n}"


def _parse_columns(
    text: str, path: str, li: int | None, max_len: int, labelled: bool, keep_raw: bool,
    line0: int = 0, state: dict | None = None
) -> TaggedCorpus:
    """``line0``: the lines of the file before ``text`` (a block of it); ``state``: the
    token lines' field count and where it was set (``ncols``, ``ncols_line``), carried from
    block to block."""
    out = _Sentences(labelled, keep_raw)
    state = {} if state is None else state
    ncols = state.get("ncols", 0)
    ncols_line = state.get("ncols_line", 0)
    min_cols = 2 if labelled else 1
    if li is not None:
        min_cols = max(min_cols, li + 1) if labelled else 1
    if 0 < ncols < min_cols:  # the file's first token line, found before this block
        raise InputError(path, ncols_line, _too_few_columns(min_cols, li, ncols))
    lines = text.split("\n")
    same = {}.setdefault  # one string object per distinct word and label (_Sentences)
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
                raise InputError(path, lineno, _too_few_columns(min_cols, li, n))
            ncols, ncols_line = n, lineno
        elif n != ncols:
            raise InputError(
                path, lineno, f"expected {ncols} columns (as on line {ncols_line}), found {n}"
            )
        if len(out.words) >= max_len:
            raise too_long(path, out.first, lines, idx, max_len, _columns_kind)
        if not out.words:
            out.first = lineno
        w = f[0]
        out.words.append(same(w, w))
        if labelled:
            lab = f[-1] if li is None else f[li]
            out.labs.append(same(lab, lab))
        if keep_raw:
            out.rlines.append(f)
    state["ncols"], state["ncols_line"] = ncols, ncols_line
    label_col = (ncols - 1 if li is None else li) if (labelled and ncols) else li
    return out.corpus(path, "columns", label_col)


def corpus_from_lists(
    tokens: list[list[str]], tags: list[list[str]] | None = None, fmt: str = "columns"
) -> TaggedCorpus:
    """Build an in-memory corpus from word lists and (optionally) tag lists of equal shape.

    ``lines`` are the lines the sentences would start on in a file written by
    :func:`~demidcd.io.tagged_writer.write_tagged` (one token per line, a blank line after each
    sentence).
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




def column_values(corpus: TaggedCorpus, column: str | int | None,
                  exclude: tuple[str | int, ...] = ()) -> list[list[str]]:
    """The values of the label ``column`` (as :func:`read_tagged` takes it; None: UPOS for
    CoNLL-U, the last column of a columns file) per token, from the raw lines (``--force``
    reads the given labels so). A columns file whose only column is the word has none, and
    the column may not be one of the feature columns ``exclude``: an OptionError."""
    if corpus.raw is None:
        raise OptionError("reading a column needs the original lines (keep_raw=True)")
    fmt = corpus.fmt
    li = label_index(fmt, column)
    out = []
    for rl in corpus.raw:
        toks = _token_fields(rl, fmt)
        j = len(toks[0]) - 1 if li is None and toks else li
        if toks and (j is None or j < 1 or j >= len(toks[0])):
            have = len(toks[0])
            which = "" if li is None else f" {li + 1}"
            raise OptionError(f"{corpus.path} has no label column{which} ({have} column"
                              f"{'' if have == 1 else 's'})")
        if toks and any(j == (label_index(fmt, c) if fmt == "conllu" else int(c) - 1)
                        for c in exclude):
            raise OptionError(f"the label column ({j + 1}) of {corpus.path} is a feature "
                              "column; give the labels in another one (--column N)")
        out.append([f[j] for f in toks])
    return out




def output_label_index(corpus: TaggedCorpus, column: str | int | None) -> int | None:
    """The field :func:`~demidcd.io.tagged_writer.write_tagged` writes the labels to (None: a new
    last field)."""
    fmt = corpus.fmt
    if fmt not in FORMATS:
        raise OptionError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    if column is not None:
        return label_index(fmt, column)
    if corpus.label_column is not None:
        return corpus.label_column
    li = label_index(fmt, None)
    if fmt == "columns" and corpus.raw is not None and not corpus.labelled:
        li = None  # unlabelled file: append the predictions
    return li




def _token_fields(raw_lines: list[list[str]], fmt: str) -> list[list[str]]:
    """The field lists of a sentence's token lines: CoNLL-U's word lines (10 fields, an
    integer ID), or every line of a columns file but ``-DOCSTART-``."""
    if fmt == "conllu":
        return [f for f in raw_lines if len(f) == 10 and f[0].isdigit()]
    return [f for f in raw_lines if not f[0].startswith(DOCSTART)]
