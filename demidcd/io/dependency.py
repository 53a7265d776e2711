"""Reader and writer for dependency treebanks: HEAD and DEPREL of CoNLL-U and CoNLL-X files.

Both formats have ten tab-separated fields per token line,

    ID FORM LEMMA UPOS|CPOSTAG XPOS|POSTAG FEATS HEAD DEPREL DEPS|PHEAD MISC|PDEPREL

so the POS columns and HEAD sit at the same places: ``pos_column="upos"`` reads field 4
(CoNLL-X CPOSTAG), ``"xpos"`` field 5 (CoNLL-X POSTAG), HEAD is field 7 and DEPREL field 8
(``_`` allowed: no label). Comment lines (``#``) are kept for the writer; in CoNLL-U,
multiword-token lines (``1-2``) and empty nodes (``5.1``) are skipped when reading (kept for the
writer too; a block of such lines without a word, between blank lines, stays a block of its
own). Token ids must run 1, 2, … in each sentence and gold heads must lie in 0..n and form a
tree. Every problem raises :class:`~demidcd.errors.InputError` naming the file and the 1-based
line.

:func:`write_dependency` writes the original lines with the predicted HEAD and DEPREL, and in
a POS column given as ``_`` the tag the parser used (filled from the other column, see
:meth:`~demidcd.estimators.dependency.DependencyParser.filled_pos`); everything else is kept
as given: the other fields (DEPS, MISC, FEATS; CoNLL-X PHEAD and PDEPREL), comments,
multiword-token lines, empty nodes and the blank lines between sentences. Without predicted
labels DEPREL is ``root`` on the word with head 0 and ``_`` elsewhere. The file is written
atomically (temporary file in the target directory, then ``os.replace``).
"""

from __future__ import annotations

import gc
import gzip
import os
from dataclasses import dataclass

from demidcd.errors import InputError, OptionError
from demidcd.io.model import atomic_write
from demidcd.io.tagged import conllu_kind, too_long
from demidcd.io.text_source import read_text, source_name

__all__ = ["DepCorpus", "read_dependency", "write_dependency", "DEP_FORMATS", "POS_COLUMNS"]

DEP_FORMATS = ("conllu", "conllx")
POS_COLUMNS = {"upos": 3, "xpos": 4}  # 0-based field index (CoNLL-X: CPOSTAG, POSTAG)
_HEAD = 6
_DEPREL = 7
_BLANK = [""]  # in DepCorpus.raw: a blank line ending a block without words


@dataclass
class DepCorpus:
    """Sentences of words and POS tags with (optional) gold heads.

    ``heads[s][k]`` is the head of word k+1 (0 = the root) and ``deprels[s][k]`` its DEPREL
    (``_`` when the file has none); empty lists when read unlabelled (None: in-memory corpus
    without labels).
    ``other_pos``: the other POS column (XPOS when ``pos`` is UPOS and vice versa; CoNLL-X
    POSTAG / CPOSTAG) when it has a tag for every word of the file, else None.
    ``raw[s]`` holds the sentence's original lines split into fields (comments as one field,
    ``[""]`` a blank line that ended a block without words), or None for an in-memory corpus;
    ``pos_field`` the 0-based field ``pos`` was read from (3: UPOS / CPOSTAG, 4: XPOS /
    POSTAG; ``other_pos`` is the other one).
    """

    words: list[list[str]]
    pos: list[list[str]]
    heads: list[list[int]]
    path: str
    lines: list[int]
    fmt: str
    raw: list[list[list[str]]] | None
    other_pos: list[list[str]] | None = None
    deprels: list[list[str]] | None = None
    pos_field: int = 3

    def __len__(self) -> int:
        return len(self.words)

    @property
    def n_tokens(self) -> int:
        """Total number of words Σ_s n_s (the root not counted)."""
        return sum(len(w) for w in self.words)

    @property
    def labelled(self) -> bool:
        """True when every sentence carries gold heads."""
        return len(self.heads) == len(self.words) and all(
            len(h) == len(w) for h, w in zip(self.heads, self.words, strict=True))

    @property
    def has_deprels(self) -> bool:
        """True when gold DEPRELs were read and some word not attached to the root has one
        other than ``_`` (a file with only ``root`` and ``_``, as written for an unlabelled
        parser, has none)."""
        return self.labelled and self.deprels is not None and any(
            r != "_" and h != 0 for hs, rs in zip(self.heads, self.deprels, strict=True)
            for h, r in zip(hs, rs, strict=True))


def _check_options(fmt: str, pos_column: str) -> int:
    if fmt not in DEP_FORMATS:
        raise OptionError(f"unknown dependency format {fmt!r}; use conllu or conllx")
    if pos_column not in POS_COLUMNS:
        raise OptionError(f"unknown --pos-column {pos_column!r}; use upos or xpos")
    return POS_COLUMNS[pos_column]


def _cycle(heads: list[int]) -> int:
    """0 when heads (of words 1..n, 0 = root) form a tree rooted at 0, else a word on a cycle."""
    state = [0] * (len(heads) + 1)  # 0 unseen, 1 on the current path, 2 reaches the root
    state[0] = 2
    for d in range(1, len(heads) + 1):
        path = []
        x = d
        while state[x] == 0:
            state[x] = 1
            path.append(x)
            x = heads[x - 1]
        if state[x] == 1:
            return x
        for v in path:
            state[v] = 2
    return 0


def read_dependency(path: str | os.PathLike[str], fmt: str = "conllu", pos_column: str = "upos",
                    encoding: str = "utf-8", labelled: bool = True,
                    max_sentence_length: int = 5000, missing_pos: bool = False) -> DepCorpus:
    """Read a CoNLL-U (``fmt="conllu"``) or CoNLL-X (``"conllx"``) treebank.

    ``labelled=False`` reads neither HEAD nor DEPREL (they may be ``_``); otherwise HEAD must be
    an integer in 0..n for every word of an n-word sentence and DEPREL non-empty (``_`` allowed).
    ``missing_pos=True`` accepts a ``pos_column`` that is ``_`` for every word of the file when
    the other POS column has a tag for every word (a tagger's output that filled the other
    one): ``pos`` then holds ``_`` for every word. Otherwise an empty POS tag is an error.
    """
    path = os.fspath(path)
    pi = _check_options(fmt, pos_column)
    if max_sentence_length < 1:
        raise OptionError(f"--max-sentence-length must be >= 1, got {max_sentence_length}")
    text = read_text(path, encoding)
    path = source_name(path)  # "-" (standard input) is named <stdin>
    words_all: list[list[str]] = []
    pos_all: list[list[str]] = []
    heads_all: list[list[int]] = []
    rels_all: list[list[str]] = []
    lines: list[int] = []
    raw: list[list[list[str]]] = []
    words: list[str] = []
    tags: list[str] = []
    other: list[str] = []
    other_all: list[list[str]] = []
    other_ok = True
    oi = 7 - pi  # the other POS field (3 <-> 4)
    heads: list[int] = []
    rels: list[str] = []
    hline: list[int] = []
    rl: list[list[str]] = []
    first = 0
    no_pos_line = 0  # the first line with an empty POS tag (missing_pos)
    some_pos = False
    colname = ("UPOS" if pi == 3 else "XPOS") if fmt == "conllu" else (
        "CPOSTAG" if pi == 3 else "POSTAG")

    def close() -> None:
        n = len(words)
        if labelled:
            for h, ln in zip(heads, hline, strict=True):
                if h > n:
                    raise InputError(path, ln, f"HEAD {h} is beyond the sentence's {n} words")
            d = _cycle(heads)
            if d:
                raise InputError(path, hline[d - 1], f"the heads of the sentence starting on "
                                                      f"line {first} form a cycle through "
                                                      f"word {d}, not a tree")
        words_all.append(words)
        pos_all.append(tags)
        other_all.append(other)
        heads_all.append(heads if labelled else [])
        rels_all.append(rels if labelled else [])
        lines.append(first)
        raw.append(rl)

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        text_lines = text.split("\n")
        for lineno, line in enumerate(text_lines, 1):
            if line.endswith("\r"):
                line = line[:-1]
            if not line or line.isspace():
                if words:
                    close()
                    words, tags, other, heads, rels, hline, rl = [], [], [], [], [], [], []
                elif rl and rl[-1] != _BLANK:  # lines without a word: a block of their own
                    rl.append(_BLANK)
                continue
            if line[0] == "#":
                rl.append([line])
                continue
            f = line.split("\t")
            if len(f) != 10:
                raise InputError(path, lineno,
                                 f"expected 10 tab-separated columns, found {len(f)}")
            tid = f[0]
            if not (tid.isdigit() and tid.isascii()):
                if fmt == "conllu" and ("-" in tid or "." in tid):
                    a, _, b = tid.replace(".", "-", 1).partition("-")
                    if a.isdigit() and b.isdigit() and a.isascii() and b.isascii():
                        rl.append(f)
                        continue
                raise InputError(path, lineno, f"bad token id {tid!r}")
            expect = len(words) + 1
            if int(tid) != expect:
                raise InputError(path, lineno, f"token id {tid} out of order, expected {expect}")
            if expect > max_sentence_length:
                raise too_long(path, first, text_lines, lineno, max_sentence_length,
                               conllu_kind)
            w, p = f[1], f[pi]
            if not w or w.isspace():
                raise InputError(path, lineno, "empty word (column 2)")
            if not p or p.isspace() or p == "_":
                if not missing_pos:
                    raise InputError(path, lineno, f"empty POS tag in {colname} (column "
                                                   f"{pi + 1}); try the other --pos-column")
                no_pos_line = no_pos_line or lineno
                p = "_"
            else:
                some_pos = True
            if labelled:
                h = f[_HEAD]
                if not (h.isdigit() and h.isascii()):
                    raise InputError(path, lineno, f"bad HEAD {h!r} (column 7): expected an "
                                                   "integer >= 0")
                if int(h) == expect:
                    raise InputError(path, lineno, f"word {expect} is its own head")
                r = f[_DEPREL]
                if not r or r.isspace():
                    raise InputError(path, lineno, "empty DEPREL (column 8); write _ for none")
                heads.append(int(h))
                rels.append(r)
                hline.append(lineno)
            if not words:
                first = lineno
            words.append(w)
            tags.append(p)
            o = f[oi]
            if other_ok and (not o or o.isspace() or o == "_"):
                other_ok = False
            other.append(o)
            rl.append(f)
        if words:
            close()
        elif rl and raw:  # trailing lines without a word, after a blank line
            raw[-1].extend([_BLANK, *(rl[:-1] if rl[-1] == _BLANK else rl)])
    finally:
        if gc_was_enabled:
            gc.enable()
    if not words_all:
        raise InputError(path, None, "no sentences found (empty file?)")
    if no_pos_line and (some_pos or not other_ok):
        raise InputError(path, no_pos_line, f"empty POS tag in {colname} (column {pi + 1})" +
                         (": give a tag to every word or to none" if some_pos else
                          ", and the other POS column lacks tags too: give every word a tag "
                          "in one of them"))
    return DepCorpus(words_all, pos_all, heads_all, path, lines, fmt, raw,
                     other_all if other_ok else None, rels_all, pi)


def corpus_from_lists(words: list[list[str]], pos: list[list[str]],
                      heads: list[list[int]] | None = None,
                      deprels: list[list[str]] | None = None) -> DepCorpus:
    """An in-memory corpus (no original lines: the writer emits ``_`` in unknown fields)."""
    if len(pos) != len(words) or (heads is not None and len(heads) != len(words)) or (
            deprels is not None and (heads is None or len(deprels) != len(words))):
        raise ValueError("words, pos, heads and deprels must have one entry per sentence "
                         "(deprels only with heads)")
    for s, (w, p) in enumerate(zip(words, pos, strict=True)):
        if not w or len(p) != len(w) or (heads is not None and len(heads[s]) != len(w)) or (
                deprels is not None and len(deprels[s]) != len(w)):
            raise ValueError(f"sentence {s}: empty, or words/pos/heads/deprels of different "
                             "lengths")
    hs = [list(map(int, h)) for h in heads] if heads is not None else [[] for _ in words]
    rs = [list(map(str, r)) for r in deprels] if deprels is not None else None
    return DepCorpus([list(w) for w in words], [list(p) for p in pos], hs, "",
                     list(range(1, len(words) + 1)), "conllu", None, None, rs)


def _deprel(heads: list[int], rels: list[str] | None, k: int) -> str:
    """DEPREL of word k+1: the predicted one, else ``root`` for head 0 and ``_``."""
    if rels is not None:
        return str(rels[k])
    return "root" if int(heads[k]) == 0 else "_"


def _lines(corpus: DepCorpus, predicted: list[list[int]], deprels: list[list[str]] | None,
           pos: list[list[str]] | None, other_pos: list[list[str]] | None):
    pi = corpus.pos_field
    for s, (words, pred) in enumerate(zip(corpus.words, predicted, strict=True)):
        rels = deprels[s] if deprels is not None else None
        if len(pred) != len(words) or (rels is not None and len(rels) != len(words)):
            raise ValueError(f"sentence {s}: {len(pred)} heads for {len(words)} words")
        used = [(pi, pos[s] if pos is not None else None),
                (7 - pi, other_pos[s] if other_pos is not None else None)]
        for _, tags in used:
            if tags is not None and len(tags) != len(words):
                raise ValueError(f"sentence {s}: {len(tags)} POS tags for {len(words)} words")
        rl = corpus.raw[s] if corpus.raw is not None else None
        if rl is None:
            for k, (w, p) in enumerate(zip(words, used[0][1] or corpus.pos[s], strict=True)):
                f = [str(k + 1), w, "_", p, "_", "_", str(int(pred[k])),
                     _deprel(pred, rels, k), "_", "_"]
                yield "\t".join(f)
        else:
            k = 0
            for f in rl:
                if len(f) == 10 and f[0].isdigit() and f[0].isascii():
                    g = list(f)
                    g[_HEAD] = str(int(pred[k]))
                    g[_DEPREL] = _deprel(pred, rels, k)
                    for i, tags in used:  # a POS column given empty: the tag used
                        if tags is not None and g[i] in ("_", "") and tags[k] != "_":
                            g[i] = tags[k]
                    k += 1
                    yield "\t".join(g)
                else:  # comments, multiword tokens, empty nodes, blank lines: as given
                    yield "\t".join(f)
        yield ""


def write_dependency(path: str | os.PathLike[str], corpus: DepCorpus,
                     predicted: list[list[int]], deprels: list[list[str]] | None = None,
                     encoding: str = "utf-8", pos: list[list[str]] | None = None,
                     other_pos: list[list[str]] | None = None) -> None:
    """Write ``corpus`` with HEAD replaced by ``predicted`` (heads of words 1..n) and DEPREL by
    ``deprels`` (None: ``root`` for head 0, else ``_``), atomically
    (:func:`~demidcd.io.model.atomic_write`: ``-`` is standard output). ``pos`` and
    ``other_pos``: the tags the parser used in the POS column read (``corpus.pos_field``)
    and in the other one, written where the file has ``_`` (a column the parser filled);
    every other field and line is written as read."""
    path = os.fspath(path)
    if len(predicted) != len(corpus.words) or (deprels is not None and
                                               len(deprels) != len(corpus.words)):
        raise ValueError(f"{len(predicted)} predicted sentences for {len(corpus.words)}")
    for tags in (pos, other_pos):
        if tags is not None and len(tags) != len(corpus.words):
            raise ValueError(f"{len(tags)} POS sentences for {len(corpus.words)}")
    data = ("\n".join(_lines(corpus, predicted, deprels, pos, other_pos)) + "\n"
            ).encode(encoding)
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write(path, lambda f: f.write(data))
