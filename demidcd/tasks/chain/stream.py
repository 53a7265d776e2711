"""``demidcd predict`` for the chain taggers (sequence, chunking, ner), streamed: the input is
read in blocks of whole sentences (:func:`~demidcd.io.stream.iter_blocks`), each block is
tagged and written in input order, so memory stays bounded by a few blocks whatever the size
of the file, and ``--threads N`` tags N blocks at once.

A block takes one of two routes, with the same output:

* fast: the built-in features from their dictionary (:mod:`~demidcd.tasks.chain.type_tables`),
  1-best (with or without the label-scheme constraints), an encoding whose bytes can be
  scanned as ASCII. The block's bytes are read by a numba kernel (words as byte spans, one
  block-local id per distinct word: only the distinct words become Python strings), encoded,
  decoded and written back by numba kernels (:mod:`~demidcd.io.stream`); every kernel
  releases the GIL, so threads tag blocks in parallel.
* general: anything else (n-best, ``--force``, ``--scores``, templates, the ``ner``
  features, a block the fast reader does not take): the block is parsed, tagged and written
  by the same code as a whole file (:func:`~demidcd.io.tagged.parse_text`, the spec's
  ``predict``, :func:`~demidcd.io.tagged_writer.render_tagged`).

The ``ner`` features look at the other sentences within 1,000 tokens (document context), so a
ner model reads its input as one block.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ...errors import InputError, OptionError
from ...options import DataOptions, OutputOptions


class _Plan:
    """What every block of one ``predict`` run shares."""

    def __init__(self, spec: Any, est: Any, options: DataOptions, output: OutputOptions):
        from ...io import tagged, text_source
        from ...io.stream import transparent

        self.spec, self.est, self.options, self.output = spec, est, options, output
        self.path = options.data
        self.name = text_source.source_name(self.path)
        text_source.check_encoding(options.encoding)
        self.encoding = options.encoding
        self.fmt, column, self.features, self.templated = spec.read_plan(self.path, options,
                                                                         labelled=False)
        self.read_li = tagged.label_index(self.fmt, column)
        if options.max_sentence_length < 1:
            raise OptionError(f"--max-sentence-length must be >= 1, got "
                              f"{options.max_sentence_length}")
        self.max_len = int(options.max_sentence_length)
        probe = tagged.TaggedCorpus([], [], self.name, [], self.fmt, [], self.read_li)
        self.write_li = tagged.output_label_index(probe, spec.write_column(self.fmt, options))
        self.transparent = transparent(self.encoding)
        featurizer = getattr(est, "featurizer_", None)
        self.whole = not self.transparent or getattr(featurizer, "doc_window", 0) > 0
        self.state: dict[str, int] = {}  # the columns parser's, carried over blocks
        self.utf8_checked = False
        self.cols = np.array(tagged.feature_indices(self.fmt, self.features, self.name)
                             if self.features else [], np.int64)
        self.fast = self._fast_tables(featurizer)

    def _fast_tables(self, featurizer):
        """The featurizer's type tables when blocks can take the fast route, else None."""
        output = self.output
        if not self.transparent or self.templated or output.nbest is not None or any(
                (output.force, output.scores, output.marginals)):
            return None
        tables = getattr(featurizer, "type_tables", None)
        n_attr = self.cols.shape[0]
        if tables is None or (featurizer.n_attributes or 0) != n_attr:
            return None  # (a mismatch: the general route raises the error)
        bad = "\t\n\r" if self.fmt == "conllu" else " \t\r\x0b\x0c\n"
        encoded = []
        for t in self.est.classes_:
            if not t or any(c in t for c in bad):
                return None
            try:
                encoded.append(t.encode(self.encoding))
            except UnicodeEncodeError:
                return None
        self.tag_bytes = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
        self.tag_off = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(b) for b in encoded], out=self.tag_off[1:])
        return tables(n_attr)


def predict_stream(spec: Any, est: Any, options: DataOptions, output: OutputOptions,
                   threads: int = 1, run: Callable | None = None) -> int:
    """Tag ``options.data`` into ``output.out`` block by block, ``threads`` blocks at once
    (see the module docstring); returns the number of sentences. ``run(fn, *a)`` runs the
    work (the CLI: in a thread it can interrupt), else it runs here."""
    from ...io import text_source
    from ...io.model import atomic_write
    from ...io.stream import iter_blocks

    plan = _Plan(spec, est, options, output)
    threads = max(1, int(threads or 1))
    counts = [0]

    def body(f: Any) -> None:
        out = f
        if output.out.endswith(".gz"):
            import gzip

            out = gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0)
        encoder = codecs.getincrementalencoder(plan.encoding)()
        source = text_source.open_source(plan.path)
        try:
            blocks = _blocks(plan, iter_blocks(_Reader(source, plan.name), plan.fmt == "conllu",
                                               whole=plan.whole))
            for n, data in _ordered(blocks, lambda b: _tag_block(plan, b, encoder), threads):
                counts[0] += n
                out.write(data)
            if counts[0] == 0:
                raise InputError(plan.name, None, "no sentences found (empty file?)")
            if out is not f:
                out.close()
        finally:
            source.close()

    atomic_write(output.out, (lambda f: run(body, f)) if run is not None else body)
    return counts[0]


class _Reader:
    """``read(size)`` of an input file with the reader's one-line errors."""

    def __init__(self, source, name: str):
        self.source, self.name = source, name

    def read(self, size: int) -> bytes:
        from ...io.text_source import read_source

        return read_source(self.source, self.name, size)


def _blocks(plan: _Plan, blocks: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes,
                                                                                 str]]:
    """(line0, bytes, text) of each block: decoded (errors name the line), the byte-order
    mark of the file dropped, the UTF-8-read-as-another-encoding warning given; in input
    order (the warning and the columns state need it)."""
    from ...io.text_source import check_utf8_read_as_other, decode_block

    first = True
    for line0, data in blocks:
        text = decode_block(data, plan.name, plan.encoding, line0)
        if first and text.startswith("\ufeff"):
            text = text[1:]
            bom = "\ufeff".encode(plan.encoding) if plan.transparent else b""
            if data.startswith(bom):
                data = data[len(bom):]
        first = False
        if plan.fmt == "columns" and "ncols" not in plan.state:
            _columns_width(plan, line0, text)
        if not plan.utf8_checked:
            plan.utf8_checked = check_utf8_read_as_other(data, text, plan.name, plan.encoding,
                                                          line0)
        yield line0, data, text


def _columns_width(plan: _Plan, line0: int, text: str) -> None:
    """The fields of the file's first token line and its line (``plan.state``), as the
    columns parser sets them, before blocks are tagged in parallel."""
    from ...io.tagged import ASCII_WS, ASCII_WS_CHARS, DOCSTART

    for idx, line in enumerate(text.split("\n"), 1):
        f = line.split() if line.isascii() else ASCII_WS.split(line.strip(ASCII_WS_CHARS))
        if f and f[0] and not f[0].startswith(DOCSTART):
            plan.state["ncols"], plan.state["ncols_line"] = len(f), line0 + idx
            return


def _ordered(items: Iterator, fn: Callable, threads: int) -> Iterator:
    """fn(item) for every item, in order; with threads > 1 up to 2·threads at once."""
    if threads <= 1:
        for it in items:
            yield fn(it)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads, thread_name_prefix="demidcd-predict") as pool:
        pending: deque = deque()
        try:
            for it in items:
                pending.append(pool.submit(fn, it))
                while len(pending) > 2 * threads or (pending and pending[0].done()):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()


def _tag_block(plan: _Plan, block: tuple[int, bytes, str], encoder) -> tuple[int, bytes]:
    """(sentences, output bytes) of one block: the fast route when it takes the block, else
    the general one."""
    if plan.fast is not None:
        done = _fast_block(plan, block)
        if done is not None:
            return done
    return _general_block(plan, block, encoder)


def _general_block(plan: _Plan, block: tuple[int, bytes, str], encoder) -> tuple[int, bytes]:
    """A block through the whole-file code: parse, the spec's predict, render."""
    from ...io.tagged import parse_text, token_columns
    from ...io.tagged_writer import render_tagged

    line0, _, text = block
    options = plan.options
    corpus = parse_text(text, plan.name, plan.fmt, plan.read_li, plan.max_len, False, True,
                        plan.features, line0, plan.state if plan.fmt == "columns" else None)
    if not corpus.tokens:
        return 0, b""
    if plan.templated:
        corpus.columns = token_columns(corpus, options.derived.get("template_width"))
    predicted = plan.spec.predict(plan.est, corpus, options, plan.output)
    out = render_tagged(corpus, predicted, plan.spec.write_column(plan.fmt, options))
    try:
        return len(corpus), encoder.encode(out)
    except UnicodeEncodeError as e:
        raise OptionError(f"{plan.output.out}: {out[e.start:e.end]!r} cannot be written in "
                          f"{plan.encoding}; pass another --encoding") from None


def _fast_block(plan: _Plan, block: tuple[int, bytes, str]) -> tuple[int, bytes] | None:
    """A block through the kernels (:mod:`~demidcd.io.stream`), or None when the fast
    reader does not take it."""
    from ...io import stream
    from .features import EncodedSequences

    _, data, _ = block
    buf = np.frombuffer(data, np.uint8)
    conllu = plan.fmt == "conllu"
    if conllu:
        anomaly, sent_ptr, spans = stream.scan_conllu(buf, plan.max_len, plan.cols)
    else:
        anomaly, sent_ptr, spans, ncols, _ = stream.scan_columns(
            buf, plan.max_len, plan.cols, plan.state.get("ncols", 0))
    if anomaly:
        return None
    n_sent = sent_ptr.shape[0] - 1
    if n_sent == 0:
        return None
    starts = np.ascontiguousarray(spans[:, 0::2])
    ends = np.ascontiguousarray(spans[:, 1::2])
    enc = plan.encoding
    local, first = stream.intern_spans(buf, starts, ends, 0)
    words = [data[a:b].decode(enc) for a, b in zip(starts[first, 0].tolist(),
                                                   ends[first, 0].tolist(), strict=True)]
    if any(w.isspace() for w in words):
        return None  # a word of Unicode whitespace: the reader's error
    values, vlocal = [], []
    for c in range(plan.cols.shape[0]):
        ids, fc = stream.intern_spans(buf, starts, ends, c + 1)
        values.append([data[a:b].decode(enc) for a, b in zip(starts[fc, c + 1].tolist(),
                                                             ends[fc, c + 1].tolist(),
                                                             strict=True)])
        vlocal.append(ids)
    feat_ptr, feat_idx = plan.fast.encode(sent_ptr, words, local, values, vlocal)
    tags, _ = plan.est.decode_encoded(EncodedSequences(sent_ptr, feat_ptr, feat_idx))
    if conllu:
        out = stream.render_conllu(buf, plan.write_li, tags, plan.tag_bytes, plan.tag_off)
    else:
        li = plan.write_li
        appending = li is None or li >= ncols
        out = stream.render_columns(buf, -1 if appending else li,
                                    ncols + 1 if appending else ncols, tags, plan.tag_bytes,
                                    plan.tag_off)
    return n_sent, out.tobytes()


__all__ = ["predict_stream"]
