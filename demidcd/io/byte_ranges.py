"""Parts of one training file for several readers: byte ranges that begin and end at sentence
boundaries (a blank line), so that each reader parses only its own range and every sentence
falls in exactly one range.

:func:`sentence_ranges` cuts a file of ``size`` bytes into ``k`` ranges near multiples of
size/k: each cut moves forward from its nominal offset to just past the next blank line
(``\\n\\n``, or ``\\n`` followed by whitespace-only lines), reading only a few blocks around
each cut. Ranges may be empty (a file with fewer sentences than parts). :func:`read_range`
gives the text of one range and the number of lines before it (for error messages naming the
file's line numbers). A list or glob of files is split by whole files (:func:`file_parts`).
"""

from __future__ import annotations

import glob
import os

BLOCK = 1 << 20  # bytes read at a time while looking for a boundary or counting lines


def _next_boundary(f, pos: int, size: int) -> int:
    """The offset of the first non-blank line after the first blank line that ends at or
    after ``pos`` (``size`` when none): the first byte of a sentence."""
    if pos <= 0:
        return 0
    f.seek(pos - 1)
    f.readline()  # the rest of the line that holds byte pos - 1
    blank = False
    while True:
        at = f.tell()
        line = f.readline()
        if not line:
            return size
        if not line.strip():
            blank = True
        elif blank:
            return at


def sentence_ranges(path: str | os.PathLike[str], k: int) -> list[tuple[int, int]]:
    """``k`` byte ranges [lo, hi) covering the file, each cut just past a blank line (see the
    module docstring); every sentence lies in exactly one range."""
    if k < 1:
        raise ValueError("k must be >= 1")
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for j in range(1, k):
            cuts.append(max(cuts[-1], _next_boundary(f, size * j // k, size)))
    cuts.append(size)
    return [(cuts[j], cuts[j + 1]) for j in range(k)]


def read_range(path: str | os.PathLike[str], lo: int, hi: int, encoding: str = "utf-8"
               ) -> tuple[str, int]:
    """(the text of bytes [lo, hi) of ``path``, the number of lines before ``lo``): the lines
    are counted, not kept, a block at a time."""
    lines = 0
    with open(path, "rb") as f:
        left = lo
        while left > 0:
            chunk = f.read(min(BLOCK, left))
            if not chunk:
                break
            lines += chunk.count(b"\n")
            left -= len(chunk)
        data = f.read(hi - lo)
    return data.decode(encoding), lines


def file_parts(spec: str, k: int) -> list[list[str]]:
    """A comma-separated list or glob of files dealt to ``k`` parts by size (largest first to
    the part with the fewest bytes so far); parts may be empty when there are fewer files."""
    names: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        hits = sorted(glob.glob(item)) if any(c in item for c in "*?[") else [item]
        names += hits
    parts: list[list[str]] = [[] for _ in range(k)]
    load = [0] * k
    for name in sorted(names, key=lambda p: -os.path.getsize(p)):
        j = load.index(min(load))
        parts[j].append(name)
        load[j] += os.path.getsize(name)
    return parts
