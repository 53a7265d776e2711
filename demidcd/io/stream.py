"""Streaming over tagged files: blocks of whole sentences read, tagged and written in order, in
constant memory, and numba kernels that read and write a block's bytes directly.

:func:`iter_blocks` cuts the input's bytes after blank lines that end a sentence, where a
reader of the whole file (:func:`~demidcd.io.tagged.read_tagged`) is in its initial state
(no pending comment, ``-DOCSTART-`` or multiword line), so that reading block after block
gives the same sentences, lines and raw lines as reading the whole file. That needs an
encoding in which the ASCII bytes of tab, newline, carriage return, space, ``#``, ``-`` and
the digits always stand for themselves (:func:`transparent`: UTF-8 and the one-byte codecs);
any other encoding is read as one block.

:func:`scan_conllu` / :func:`scan_columns` read a block as the parsers of
:mod:`demidcd.io.tagged` do for the common, valid case (words as byte spans, sentence
boundaries, a block-local id per distinct word and attribute value); anything else (a line
those parsers would refuse or read differently, a word that may be Unicode whitespace, lines
after the last sentence) is reported as an anomaly and the block is read by the parsers
themselves, which give the same result or the same error. :func:`render_conllu` /
:func:`render_columns` write the block with the predicted labels exactly as
:func:`~demidcd.io.tagged_writer.write_tagged` writes it.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator

import numba as nb
import numpy as np

BLOCK_BYTES = 1 << 20  # input bytes per block (about 14,000 CoNLL-U tokens)
_DOCSTART = np.frombuffer(b"-DOCSTART-", np.uint8)

_ASCII_SAMPLE = "\t\n\r\x0b\x0c #-.0123456789_OXx"


def transparent(encoding: str) -> bool:
    """Whether bytes of ``encoding`` can be cut and scanned as ASCII: UTF-8, or a codec that
    maps every byte to one character and the ASCII characters to themselves."""
    try:
        name = codecs.lookup(encoding).name
    except LookupError:
        return False
    if name == "utf-8":
        return True
    try:
        if _ASCII_SAMPLE.encode(encoding) != _ASCII_SAMPLE.encode("ascii"):
            return False
        return len(bytes(range(256)).decode(encoding, "replace")) == 256 and \
            bytes(range(128)).decode(encoding) == bytes(range(128)).decode("ascii")
    except (UnicodeError, LookupError, TypeError):
        return False


# ---------------------------------------------------------------------------------------------
# cutting into blocks
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _is_ws(c):
    """ASCII whitespace as str.isspace() sees it (tab, newline, vertical tab, form feed,
    carriage return, the file/group/record/unit separators, space)."""
    return c == 32 or 9 <= c <= 13 or 28 <= c <= 31


@nb.njit(cache=True, nogil=True)
def _blank_kind(buf, i, e):
    """0: the line buf[i:e] is blank (ASCII whitespace only or empty); 1: it holds an ASCII
    character that is not whitespace; 2: neither (only whitespace and non-ASCII bytes: it may
    be Unicode whitespace)."""
    other = False
    for q in range(i, e):
        c = buf[q]
        if c >= 128:
            other = True
        elif not _is_ws(c):
            return 1
    return 2 if other else 0


@nb.njit(cache=True, nogil=True)
def last_cut(buf, conllu):
    """The offset just after the last blank line of ``buf`` that ends a sentence with the
    reader in its initial state (−1: none): a token line came since the last such line and
    nothing the reader could take for another blank line or a pending line."""
    n = buf.shape[0]
    i = 0
    pending = False
    cut = -1
    while i < n:
        j = _line_end(buf, i)
        if j == n:
            break  # an unfinished line: not cut here
        e = _content_end(buf, i, j)
        kind = _blank_kind(buf, i, e)
        if kind == 0:
            if pending:
                cut = j + 1
            pending = False
        elif kind == 2:
            pending = False
        elif conllu:
            if buf[i] != 35:
                q = i
                while q < e and 48 <= buf[q] <= 57:
                    q += 1
                if q > i and q < e and buf[q] == 9:  # a token line (else: a multiword
                    pending = True  # line or an empty node, inside a sentence or before one)
        else:
            q = i
            while q < e and (buf[q] == 32 or 9 <= buf[q] <= 13):
                q += 1
            odd = False
            for r in range(i, e):
                if 28 <= buf[r] <= 31:
                    odd = True
            if odd or _starts(buf, q, e, _DOCSTART):
                pending = False
            else:
                pending = True
        i = j + 1
    return cut


@nb.njit(cache=True, nogil=True)
def _starts(buf, i, e, prefix):
    if e - i < prefix.shape[0]:
        return False
    for k in range(prefix.shape[0]):
        if buf[i + k] != prefix[k]:
            return False
    return True


def iter_blocks(source, conllu: bool, block_bytes: int | None = None,
                whole: bool = False) -> Iterator[tuple[int, bytes]]:
    """(first line number − 1, bytes) of consecutive blocks of ``source`` (a binary file) of
    about ``block_bytes`` (None: :data:`BLOCK_BYTES`), each ending after a blank line that
    ends a sentence (:func:`last_cut`), the last one with the rest of the file; ``whole``: one
    block."""
    block_bytes = BLOCK_BYTES if block_bytes is None else int(block_bytes)
    line0 = 0
    carry = b""
    held = None  # the last block cut: lines after the last sentence of the file join it
    size = block_bytes
    while True:
        chunk = source.read(-1 if whole else size)
        data = carry + chunk if carry else chunk
        if not chunk:
            if held is not None and (not data or last_cut(
                    np.frombuffer(data + b"\n\n", np.uint8), conllu) < 0):
                data, held = held + data, None
            if held is not None:
                yield line0, held
                line0 += held.count(b"\n")
            if data:
                yield line0, data
            return
        if whole:
            carry = data
            continue
        cut = last_cut(np.frombuffer(data, np.uint8), conllu)
        if cut < 0:
            carry, size = data, 2 * size  # no boundary yet: read more
            continue
        size = block_bytes
        if held is not None:
            yield line0, held
            line0 += held.count(b"\n")
        held, carry = data[:cut], data[cut:]


# ---------------------------------------------------------------------------------------------
# reading a block
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def intern_spans(buf, start, end, col):
    """Block-local ids of byte strings: (ids, first) with ids[t] the number of the distinct
    string buf[start[t]:end[t]] (col: the same with column start[:, c]) in order of first
    occurrence and first[d] the t of its first occurrence (FNV-1a, open addressing)."""
    n = start.shape[0]
    bits = 4
    while (1 << bits) < 2 * n + 2:
        bits += 1
    mask = (1 << bits) - 1
    slot = np.full(1 << bits, -1, np.int64)
    ids = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    m = 0
    for t in range(n):
        a = start[t, col]
        b = end[t, col]
        h = np.uint64(14695981039346656037)
        for q in range(a, b):
            h = (h ^ np.uint64(buf[q])) * np.uint64(1099511628211)
        s = np.int64(h >> np.uint64(64 - bits))
        while True:
            d = slot[s]
            if d < 0:
                slot[s] = m
                first[m] = t
                ids[t] = m
                m += 1
                break
            u = first[d]
            a2 = start[u, col]
            b2 = end[u, col]
            if b2 - a2 == b - a:
                same = True
                for q in range(b - a):
                    if buf[a + q] != buf[a2 + q]:
                        same = False
                        break
                if same:
                    ids[t] = d
                    break
            s = (s + 1) & mask
    return ids, first[:m].copy()


@nb.njit(cache=True, nogil=True)
def _n_lines(buf):
    n = 1
    for q in range(buf.shape[0]):
        if buf[q] == 10:
            n += 1
    return n


@nb.njit(cache=True, nogil=True)
def _block_arrays(buf, nc, width):
    """A block's output arrays (a token a line at most) and a field-span scratch of width."""
    cap = _n_lines(buf)
    return (np.empty((cap, 2 + 2 * nc), np.int64), np.zeros(cap + 1, np.int64),
            np.empty(width, np.int64), np.empty(width, np.int64))


@nb.njit(cache=True, nogil=True)
def _close_sentence(sent_ptr, n_sent, n_tok, words):
    """End the open sentence if it has words; the number of sentences."""
    if words:
        n_sent += 1
        sent_ptr[n_sent] = n_tok
    return n_sent


@nb.njit(cache=True, nogil=True)
def _put_token(spans, t, ws, we, cols, fstart, fend):
    """Token t: its word buf[ws:we] and the spans of the fields cols."""
    spans[t, 0] = ws
    spans[t, 1] = we
    for c in range(cols.shape[0]):
        spans[t, 2 + 2 * c] = fstart[cols[c]]
        spans[t, 3 + 2 * c] = fend[cols[c]]


@nb.njit(cache=True, nogil=True)
def scan_conllu(buf, max_len, cols):
    """A CoNLL-U block: (anomaly, sent_ptr, spans) with spans[t, 0] / spans[t, 1] the start /
    end of token t's word and spans[t, 2 + 2c] / spans[t, 3 + 2c] those of field cols[c];
    anomaly the 1-based line (in the block) of the first line the fast reading does not take
    (0: none)."""
    n = buf.shape[0]
    spans, sent_ptr, fstart, fend = _block_arrays(buf, cols.shape[0], 10)
    i = lineno = n_tok = n_sent = words = 0
    pending = False
    while i < n:
        j = _line_end(buf, i)
        lineno += 1
        e = _content_end(buf, i, j)
        nxt = j + 1
        kind = _blank_kind(buf, i, e)
        if kind == 2:
            return lineno, sent_ptr[:1], spans[:0]
        if kind == 0:
            n_sent = _close_sentence(sent_ptr, n_sent, n_tok, words)
            words = 0
            i = nxt
            continue
        if buf[i] == 35:  # comment
            if not words:
                pending = True
            i = nxt
            continue
        nf = 0
        a = i
        for q in range(i, e + 1):
            if q == e or buf[q] == 9:
                if nf < 10:
                    fstart[nf] = a
                    fend[nf] = q
                nf += 1
                a = q + 1
        if nf != 10:
            return lineno, sent_ptr[:1], spans[:0]
        d = fstart[0]
        tid = 0
        while d < fend[0] and 48 <= buf[d] <= 57:
            tid = tid * 10 + (buf[d] - 48)
            d += 1
        if d == fend[0] and d > fstart[0] and d - fstart[0] <= 18:
            if tid != words + 1 or tid > max_len:
                return lineno, sent_ptr[:1], spans[:0]
            ws = fstart[1]
            we = fend[1]
            if _blank_kind(buf, ws, we) == 0:
                return lineno, sent_ptr[:1], spans[:0]
            _put_token(spans, n_tok, ws, we, cols, fstart, fend)
            n_tok += 1
            words += 1
            pending = False
        else:  # a multiword token (1-2) or an empty node (5.1)
            sep = d
            if sep == fstart[0] or sep >= fend[0] or (buf[sep] != 45 and buf[sep] != 46):
                return lineno, sent_ptr[:1], spans[:0]
            d = sep + 1
            while d < fend[0] and 48 <= buf[d] <= 57:
                d += 1
            if d != fend[0] or d == sep + 1:
                return lineno, sent_ptr[:1], spans[:0]
            if not words:
                pending = True
        i = nxt
    if pending and not words:
        return lineno, sent_ptr[:1], spans[:0]  # lines after the last sentence
    n_sent = _close_sentence(sent_ptr, n_sent, n_tok, words)
    return 0, sent_ptr[:n_sent + 1].copy(), spans[:n_tok].copy()


@nb.njit(cache=True, nogil=True)
def _fields(buf, i, e, fstart, fend):
    """Split buf[i:e] at runs of space, tab, carriage return, form feed and vertical tab;
    −1 if it holds a file/group/record/unit separator (Python splits ASCII lines at them
    too), else the number of fields (their spans in fstart / fend, up to their size)."""
    nf = 0
    q = i
    while q < e:
        c = buf[q]
        if 28 <= c <= 31:
            return -1
        if c == 32 or c == 9 or c == 13 or c == 12 or c == 11:
            q += 1
            continue
        a = q
        while q < e:
            c = buf[q]
            if c == 32 or c == 9 or c == 13 or c == 12 or c == 11:
                break
            if 28 <= c <= 31:
                return -1
            q += 1
        if nf < fstart.shape[0]:
            fstart[nf] = a
            fend[nf] = q
        nf += 1
    return nf


@nb.njit(cache=True, nogil=True)
def scan_columns(buf, max_len, cols, ncols):
    """A columns block (``ncols``: the file's token fields so far, 0: none yet): (anomaly,
    sent_ptr, spans, ncols, the block line that set ncols (0: none)) as :func:`scan_conllu`
    (cols: 0-based fields)."""
    n = buf.shape[0]
    width = 64
    spans, sent_ptr, fstart, fend = _block_arrays(buf, cols.shape[0], width)
    need = 0  # the fields a token line must have for cols
    for c in range(cols.shape[0]):
        need = max(need, cols[c] + 1)
    i = lineno = n_tok = n_sent = words = 0
    pending = False
    set_at = 0
    while i < n:
        j = _line_end(buf, i)
        lineno += 1
        e = j
        nxt = j + 1
        nf = _fields(buf, i, e, fstart, fend)
        if nf < 0 or nf > width:
            return lineno, sent_ptr[:1], spans[:0], ncols, set_at
        if nf == 0:
            n_sent = _close_sentence(sent_ptr, n_sent, n_tok, words)
            words = 0
            i = nxt
            continue
        if _starts(buf, fstart[0], fend[0], _DOCSTART):
            n_sent = _close_sentence(sent_ptr, n_sent, n_tok, words)
            words = 0
            pending = True
            i = nxt
            continue
        if ncols == 0:
            ncols = nf
            set_at = lineno
        elif nf != ncols:
            return lineno, sent_ptr[:1], spans[:0], ncols, set_at
        if words >= max_len:
            return lineno, sent_ptr[:1], spans[:0], ncols, set_at
        if nf < need:
            return lineno, sent_ptr[:1], spans[:0], ncols, set_at
        _put_token(spans, n_tok, fstart[0], fend[0], cols, fstart, fend)
        n_tok += 1
        words += 1
        pending = False
        i = nxt
    if pending and not words:
        return lineno, sent_ptr[:1], spans[:0], ncols, set_at
    n_sent = _close_sentence(sent_ptr, n_sent, n_tok, words)
    return 0, sent_ptr[:n_sent + 1].copy(), spans[:n_tok].copy(), ncols, set_at


# ---------------------------------------------------------------------------------------------
# writing a block
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _put(out, pos, buf, a, b):
    """out[pos:] = buf[a:b]; returns the position after it."""
    m = b - a
    out[pos:pos + m] = buf[a:b]
    return pos + m


@nb.njit(cache=True, nogil=True)
def _line_end(buf, i):
    """The index of the newline ending the line that starts at ``i`` (len(buf): none)."""
    j = i
    while j < buf.shape[0] and buf[j] != 10:
        j += 1
    return j


@nb.njit(cache=True, nogil=True)
def _content_end(buf, i, j):
    """The end of line ``[i, j)`` without its carriage return."""
    return j - 1 if j > i and buf[j - 1] == 13 else j


@nb.njit(cache=True, nogil=True)
def _put_byte(out, pos, c):
    out[pos] = c
    return pos + 1


@nb.njit(cache=True, nogil=True)
def _out_size(n, tags, tag_off, extra):
    """Bytes enough for a block of n bytes with the labels of ``tags`` written in."""
    size = 2 * n + extra + 16
    for t in range(tags.shape[0]):
        size += tag_off[tags[t] + 1] - tag_off[tags[t]] + 1
    return size


@nb.njit(cache=True, nogil=True)
def render_conllu(buf, li, tags, tag_bytes, tag_off):
    """The block (read by :func:`scan_conllu` without anomaly) with field ``li`` of every
    token line replaced by its label tag_bytes[tag_off[k]:tag_off[k+1]] (k = tags[t]), as
    write_tagged writes it: carriage returns and repeated blank lines dropped, one blank line
    after each sentence."""
    n = buf.shape[0]
    out = np.empty(_out_size(n, tags, tag_off, 0), np.uint8)
    pos = i = t = words = 0
    while i < n:
        j = _line_end(buf, i)
        e = _content_end(buf, i, j)
        nxt = j + 1
        if _blank_kind(buf, i, e) == 0:
            if words:
                pos = _put_byte(out, pos, 10)
                words = 0
            i = nxt
            continue
        token = buf[i] != 35
        if token:
            q = i
            while q < e and 48 <= buf[q] <= 57:
                q += 1
            token = q > i and q < e and buf[q] == 9
        if not token:
            pos = _put(out, pos, buf, i, e)
        else:  # the fields before field li, the label, the fields after it
            a = i
            f = 0
            while f < li:
                if buf[a] == 9:
                    f += 1
                a += 1
            b = a
            while b < e and buf[b] != 9:
                b += 1
            pos = _put(out, pos, buf, i, a)
            k = tags[t]
            pos = _put(out, pos, tag_bytes, tag_off[k], tag_off[k + 1])
            pos = _put(out, pos, buf, b, e)
            t += 1
            words += 1
        pos = _put_byte(out, pos, 10)
        i = nxt
    return _end_block(out, pos, words)


@nb.njit(cache=True, nogil=True)
def _put_label(out, pos, doc, tag_bytes, tag_off, k):
    """Label k's bytes (O on a -DOCSTART- line)."""
    if doc:
        return _put_byte(out, pos, 79)
    return _put(out, pos, tag_bytes, tag_off[k], tag_off[k + 1])


@nb.njit(cache=True, nogil=True)
def _end_block(out, pos, words):
    """The rendered block, with the blank line that ends its open sentence."""
    if words:
        pos = _put_byte(out, pos, 10)
    return out[:pos]


@nb.njit(cache=True, nogil=True)
def _separator(buf, i, e):
    """The byte that joins the fields written back for the line buf[i:e]: a tab when the line
    holds one (its fields were tab-separated, as CRF++'s and Wapiti's files often are), else
    a space (:func:`demidcd.io.tagged.line_separator`, for the lines the parser keeps)."""
    for q in range(i, e):
        if buf[q] == 9:
            return 9
    return 32


@nb.njit(cache=True, nogil=True)
def render_columns(buf, li, n_out, tags, tag_bytes, tag_off):
    """The block (read by :func:`scan_columns` without anomaly) as write_tagged writes it:
    fields joined by one space (one tab on a line that holds a tab: :func:`_separator`), the
    label in field ``li`` (−1: a new last field),
    ``-DOCSTART-`` lines with the label O there (when their fields reach it) and padded with O
    to ``n_out`` fields, each followed by a blank line, and one blank line after each
    sentence."""
    n = buf.shape[0]
    out = np.empty(_out_size(n, tags, tag_off, 2 * (n_out + 1) * _n_lines(buf)), np.uint8)
    width = 64
    fstart = np.empty(width, np.int64)
    fend = np.empty(width, np.int64)
    pos = i = t = words = 0
    while i < n:
        j = _line_end(buf, i)
        nxt = j + 1
        nf = _fields(buf, i, j, fstart, fend)
        if nf == 0:
            if words:
                pos = _put_byte(out, pos, 10)
                words = 0
            i = nxt
            continue
        doc = _starts(buf, fstart[0], fend[0], _DOCSTART)
        if doc and words:
            pos = _put_byte(out, pos, 10)
            words = 0
        k = tags[t] if not doc else -1
        sep = _separator(buf, i, j)
        written = 0
        for f in range(nf):
            if f:
                pos = _put_byte(out, pos, sep)
            if f == li:
                pos = _put_label(out, pos, doc, tag_bytes, tag_off, k)
            else:
                pos = _put(out, pos, buf, fstart[f], fend[f])
            written += 1
        if li < 0:
            pos = _put_byte(out, pos, sep)
            pos = _put_label(out, pos, doc, tag_bytes, tag_off, k)
            written += 1
        if doc:
            while written < n_out:
                out[pos] = sep
                out[pos + 1] = 79
                pos += 2
                written += 1
            pos = _put_byte(out, pos, 10)
        else:
            t += 1
            words += 1
        pos = _put_byte(out, pos, 10)
        i = nxt
    return _end_block(out, pos, words)
