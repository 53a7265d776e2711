"""Where a corpus's text comes from, and the checks of its decoding.

A source is a file path, a ``.gz`` path (decompressed as it is read) or ``-``, standard input
(named ``<stdin>`` in messages; gzip-compressed input is recognised by its magic bytes).
Standard input can be read once only: its first bytes are kept to tell its format
(:func:`stdin_sample`), then it is handed out whole (:func:`read_text`) or as a stream
(:func:`open_source`), never both.

Every problem of opening or reading a source is a one-line :class:`demidcd.errors.InputError`
naming it; bytes that are not valid in the encoding asked for name their 1-based line and, when
the bytes look like another encoding's text, that encoding (:mod:`demidcd.io.encodings`). Bytes
that are valid UTF-8 read with another encoding warn (:func:`check_utf8_read_as_other`).
"""

from __future__ import annotations

import codecs
import gzip
import io
import os
import re
import sys
import warnings
import zlib

from demidcd.errors import InputError, InputWarning, OptionError

__all__ = [
    "STDIN",
    "STDIN_NAME",
    "source_name",
    "stdin_sample",
    "read_text",
    "check_encoding",
    "open_source",
    "read_source",
    "decode_block",
    "check_utf8_read_as_other",
]

STDIN = "-"  # --data -: standard input
STDIN_NAME = "<stdin>"  # how messages name it


def source_name(path: str | os.PathLike[str]) -> str:
    """``path`` as messages and the corpus name it (``-`` is ``<stdin>``)."""
    p = os.fspath(path)
    return STDIN_NAME if p == STDIN else p



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


def stdin_sample() -> bytes:
    """The first bytes of standard input (at most 64 KiB), gzip-decompressed as far as they
    go: what tells its format (:func:`demidcd.io.tagged.sniff_format`)."""
    return _stdin_sniff()[:_HEAD]


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
