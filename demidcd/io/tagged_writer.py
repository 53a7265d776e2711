"""Writing tagged corpora back: the predicted labels in the label column of the original lines.

The writer keeps everything of the file a corpus was read from (comments, multiword-token
lines, ``-DOCSTART-`` lines, the other columns) and replaces only the label field of token
lines (:func:`demidcd.io.tagged.output_label_index` says which); an in-memory corpus is
written in the minimal format. Predictions may come as :class:`Blocks` (n-best lists, header lines,
an extra field after the label). Files are written atomically (temporary file in the same
directory, then ``os.replace``); a ``.gz`` path is written gzip-compressed.
"""

from __future__ import annotations

import gzip
import os
from typing import NamedTuple

from demidcd.errors import OptionError

from .tagged import (
    ASCII_WS,
    ASCII_WS_CHARS,
    DOCSTART,
    TaggedCorpus,
    line_separator,
    output_label_index,
)

__all__ = ["Blocks", "write_tagged", "render_tagged"]


class Blocks(NamedTuple):
    """Predictions to write as blocks (:func:`write_tagged`): block b is sentence ``order[b]``
    with the tags ``tags[b]``, preceded by the line ``headers[b]`` (None: none) and with
    ``extra[b][t]`` as a field after token t's label (None: no extra field). A sentence may
    come in several blocks (n-best lists); the lines around its tokens that are not tokens
    (``-DOCSTART-``) are written with its first block only. In a columns file an extra field
    may be a tuple of fields (``--marginals all``: one ``LABEL/p`` cell per label)."""

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
            if fmt != "conllu" and any(isinstance(t, tuple) for t in p):
                p = [c for t in p for c in (t if isinstance(t, tuple) else (t,))]
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
    width = 0 if not blocks.extra else next(
        (len(c) if isinstance(c, tuple) else 1 for e in blocks.extra for c in e[:1]), 1)
    n_out = (ncols + 1 if appending else ncols) + width
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
                yield f"{w} {t}" if ext is None else " ".join((w, t, *_fields(ext[k])))
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
                    g[at:at] = _fields(ext[k])
                k += 1
                yield line_separator(f).join(g)
        yield ""




def _fields(cell: str | tuple[str, ...]) -> tuple[str, ...]:
    """An extra field, or a tuple of them, as a tuple of fields."""
    return cell if isinstance(cell, tuple) else (cell,)


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
    unlabelled columns file, or an in-memory corpus, predicted labels go into a new last column
    (in memory: ``word tag`` lines). A columns-format ``column`` beyond the existing columns
    appends one new last column. A columns line comes back joined by a tab when it held one,
    else by a space (:func:`~demidcd.io.tagged.line_separator`). CoNLL-U keeps every original
    line and replaces only the label field of token lines; an in-memory corpus gets ``_`` in the
    unknown fields.
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

