"""Feature templates (CRF++ syntax with Wapiti's extensions) and feature dicts → feature ids.

**Templates.** A template file holds one pattern a line (``#`` comment lines and blank lines are
skipped; a ``#`` after white space ends a line). The first character says what the line's
features are attached to:

    U…   unigram: observation × current label y_t
    B…   bigram: observation × (y_{t-1}, y_t); a line without macros (bare ``B``) is the
         label-bigram transition of the chain
    *…   Wapiti's: both a U and a B feature (from the same string)

The feature string of a line at token t is the line's text with every macro replaced by its
value (CRF++: ``U01:%x[-1,0]/%x[0,0]`` → ``U01:the/dog``); equal strings are the same feature.
Macros read column c (0-based, the label column excluded) of token t + r:

    %x[r,c]            the value                     %X[r,c]            lower-cased
    %t[r,c,"regex"]    true / false: does it match   %T[r,c,"regex"]    same (lower-cased)
    %m[r,c,"regex"]    the leftmost match, or ""     %M[r,c,"regex"]    lower-cased

Past either end of the sentence the value is CRF++'s boundary string: ``_B-k`` for the k-th
position before the first token (t + r = −k) and ``_B+k`` for the k-th after the last; the
macros apply to it like to any value.

Regexes use Wapiti's dialect: ``.`` any character; ``\\d`` digit,
``\\a`` letter, ``\\w`` letter or digit, ``\\l`` lower-case, ``\\u`` upper-case, ``\\p``
punctuation or symbol, ``\\s`` white space, and the upper-case letter for the complement
(``\\D`` …); ``\\`` before any other character takes it literally; ``^`` first anchors at the
start, ``$`` last at the end (elsewhere both are literal); ``x*`` repeats x any number of times
and ``x?`` makes it optional. As in Wapiti's backtracking matcher, ``*`` tries the fewest
repetitions first (Python's ``*?``) and ``?`` tries the character first, and a regex without
``^`` is searched at every start position from the left: ``%t`` is true when any match exists,
``%m`` is the first match found. Classes are Unicode (Wapiti tests bytes with C's ctype). There
are no groups, alternatives or ``+`` (``(``, ``|``, ``+`` are literal). :class:`WapitiRegex`
finds that same match without backtracking, in time linear in the value's length (a
backtracking matcher takes time exponential in the number of ``*`` on ``a*a*…a*b`` and ``aaa…a``);
:func:`compile_regex` is the equivalent :mod:`re` pattern.

**Feature dicts** (python-crfsuite's ``ItemSequence`` rules, as sklearn-crfsuite passes them):
a token is a dict name → value, flattened by :func:`dict_features` into (string, value) pairs:
str → ``name:value`` with 1; int/float → ``name`` with that value; bool → ``name`` with 1 / 0;
list, tuple or set of str → ``name:v`` with 1 each; a nested dict → its pairs prefixed
``name:``. A token may also be a list of strings (names with value 1). Pairs of value 0 are
dropped (they add nothing to any score), repeated names in a token add up.

**Ids.** As in :mod:`.features`: a dictionary (features firing on ≥ ``min_count`` training tokens,
ids by decreasing count, ties in string order) or ``hashing`` (crc32 of the UTF-8 string mod D).
U and B features are two id spaces. Unseen features are dropped at transform time.

**Speed.** :meth:`Template.expand` gives the feature strings themselves, one join per (token,
line); :class:`TemplateFeaturizer` instead maps each column's distinct values through each macro
once (``%t``/``%m``/``%X`` are functions of the value), gathers the per-token value ids of each
(macro, row) with a numba kernel, collapses a line's value-id tuple to one integer key, and builds
and looks up a string only for the line's *distinct* keys; a numba kernel then sorts and
deduplicates each token's ids. (Also for one sentence, this beat looking up the strings of
:meth:`Template.expand`: CoNLL-2000 test, one sentence a call, 638 against 518 sentences/s.)
"""

from __future__ import annotations

import itertools
import math
import numbers
import os
import re
import unicodedata
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Self

import numba as nb
import numpy as np

from ..errors import InputError, OptionError
from .features import DEFAULT_MIN_COUNT

TEMPLATE_STATE_VERSION = 1
MAX_OFFSET = 100  # |r| of %x[r,c] (CRF++ allows 8)
SHIPPED_TEMPLATES = ("chunking", "pos", "ner")


def boundary(k: int) -> str:
    """CRF++'s value of a position k past the sentence: ``_B-k`` before it (k < 0), ``_B+k``
    after it (k > 0)."""
    return f"_B{k:+d}"


# ---------------------------------------------------------------------------------------------
# Wapiti's regex dialect
# ---------------------------------------------------------------------------------------------
_CLASS_LETTERS = "dsawlup"  # bit k of a character's class mask: it is in \<_CLASS_LETTERS[k]>
_ANY, _CHAR, _IN_CLASS, _NOT_IN_CLASS = 0, 1, 2, 3  # what an atom matches
_ONCE, _STAR, _OPTIONAL = 0, 1, 2  # how often: x, x* (fewest first), x? (the character first)


def _parse_regex(rx: str) -> tuple[bool, list[tuple[int, str, int]], bool]:
    """``(anchored at the start, atoms, anchored at the end)`` of Wapiti's regex ``rx``; an atom
    is ``(what, argument, how often)``: ``_ANY`` / ``_CHAR`` and the character / ``_IN_CLASS``
    or ``_NOT_IN_CLASS`` and the lower-case class letter. Raises ValueError naming what is
    wrong."""
    atoms: list[tuple[int, str, int]] = []
    n = len(rx)
    start = rx.startswith("^")
    end = False
    i = 1 if start else 0
    while i < n:
        c = rx[i]
        if c in "*?":
            raise ValueError(f"{c!r} at position {i + 1} repeats nothing")
        if c == "$" and i == n - 1:
            end = True
            break
        if c == "\\":
            if i + 1 == n:
                raise ValueError("it ends in a lone backslash")
            e = rx[i + 1]
            if e.lower() in _CLASS_LETTERS:
                atom = (_NOT_IN_CLASS if e.isupper() else _IN_CLASS, e.lower())
            else:
                atom = (_CHAR, e)
            i += 2
        else:
            atom = (_ANY, "") if c == "." else (_CHAR, c)
            i += 1
        how = _ONCE
        if i < n and rx[i] in "*?":
            how = _STAR if rx[i] == "*" else _OPTIONAL
            i += 1
        atoms.append((*atom, how))
    return start, atoms, end


@cache
def _class_body(letter: str) -> str:
    """The inside of a :mod:`re` class for Wapiti's ``\\l``, ``\\u`` or ``\\p``.

    The members are found by scanning U+0000–U+1FFFF: no code point above is lower-case,
    upper-case, punctuation or symbol."""
    pred = _CLASS_TESTS[letter]
    ranges: list[list[int]] = []
    for cp in range(0x20000):
        if pred(chr(cp)):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


_RE_CLASSES = {"d": r"\d", "D": r"\D", "s": r"\s", "S": r"\S",
               "a": r"[^\W\d_]", "A": r"[\W\d_]", "w": r"[^\W_]", "W": r"[\W_]"}
_CLASS_TESTS: dict[str, Callable[[str], object]] = {
    **{k: re.compile(_RE_CLASSES[k]).fullmatch for k in "dsaw"},
    "l": str.islower, "u": str.isupper,
    "p": lambda c: unicodedata.category(c)[0] in "PS"}


@cache
def compile_regex(rx: str) -> re.Pattern:
    """Wapiti's regex ``rx`` as an equivalent :mod:`re` pattern (use ``.search``); raises
    ValueError naming what is wrong. The reference for :class:`WapitiRegex`, which matches
    without backtracking (``re`` may take time exponential in the number of ``*``)."""
    start, atoms, end = _parse_regex(rx)
    out = [r"\A"] if start else []
    for what, arg, how in atoms:
        if what == _ANY:
            atom = "."
        elif what == _CHAR:
            atom = re.escape(arg)
        elif arg in _RE_CLASSES:
            atom = _RE_CLASSES[arg.upper() if what == _NOT_IN_CLASS else arg]
        else:
            atom = f"[{'^' if what == _NOT_IN_CLASS else ''}{_class_body(arg)}]"
        if how != _ONCE:
            atom = f"(?:{atom})" + ("*?" if how == _STAR else "?")
        out.append(atom)
    if end:
        out.append(r"\Z")
    return re.compile("".join(out), re.DOTALL)


def _class_mask(cp: int) -> int:
    """The classes (bits as in ``_CLASS_LETTERS``) of the character with code point ``cp``."""
    c = chr(cp)
    return sum(1 << k for k, letter in enumerate(_CLASS_LETTERS) if _CLASS_TESTS[letter](c))


_KNOWN = 0x80  # in _CLASS_MASKS: the entry has been computed
_CLASS_MASKS = np.zeros(0x110000, np.uint8)  # by code point: _class_mask | _KNOWN, or 0


def _class_masks(codes: np.ndarray) -> np.ndarray:
    """The class masks of the code points ``codes`` (with the bit ``_KNOWN`` set)."""
    masks = _CLASS_MASKS[codes]
    new = np.unique(codes[masks == 0])  # characters not met before
    if new.shape[0]:
        _CLASS_MASKS[new] = [_class_mask(cp) | _KNOWN for cp in new.tolist()]
        masks = _CLASS_MASKS[codes]
    return masks


class WapitiRegex:
    """Wapiti's regex ``rx`` compiled for :meth:`search`, a Thompson-NFA (Pike VM) simulation:
    time O(len(rx) · len(value)), whatever the regex, and the same match as Wapiti's (and
    :func:`compile_regex`'s) backtracking. Raises ValueError on a bad regex."""

    def __init__(self, rx: str):
        self.regex = rx
        start, atoms, end = _parse_regex(rx)
        self.anchored_start, self.anchored_end = start, end
        self._what = np.array([a[0] for a in atoms], np.int8)
        self._arg = np.array([ord(a[1]) if a[0] == _CHAR else
                              _CLASS_LETTERS.index(a[1]) if a[0] != _ANY else 0 for a in atoms],
                             np.int64)
        self._how = np.array([a[2] for a in atoms], np.int8)

    def search(self, values: list[str], any_match: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(start, end)``, int64 arrays: the first match of each value is
        ``value[start:end]`` (-1, -1: no match). ``any_match``: only whether one exists (start
        ≥ 0), which may stop earlier with another one than the first."""
        lengths = np.fromiter(map(len, values), np.int64, count=len(values))
        ptr = np.zeros(len(values) + 1, np.int64)
        np.cumsum(lengths, out=ptr[1:])
        codes = np.frombuffer("".join(values).encode("utf-32-le", "surrogatepass"), np.uint32)
        start = np.empty(len(values), np.int64)
        end = np.empty(len(values), np.int64)
        _nfa_search(self._what, self._arg, self._how, self.anchored_start, self.anchored_end,
                    any_match, codes, _class_masks(codes), ptr, start, end)
        return start, end


@nb.njit(cache=True, nogil=True)
def _nfa_search(what, arg, how, anchored_start, anchored_end, any_match, codes, masks, ptr,
                start, end):
    """:meth:`WapitiRegex.search` of the values ``codes[ptr[v]:ptr[v + 1]]`` (code points, and
    their class masks in ``masks``) into ``start`` / ``end``.

    A state j < k is "about to match atom j"; k = len(atoms) is the match. Threads (a state
    and the start of its match) are kept in priority order, the order in which backtracking
    would try them: at each position the live threads first, then a new one starting there.
    A thread's epsilon closure (skipping x* before trying x, trying x? before skipping it) is
    walked depth-first in that order; a state reached earlier at the same position is dropped
    (the earlier thread ends the same way, with higher priority). Reaching k records the
    match and cuts every lower-priority thread."""
    k = what.shape[0]
    roots_state = np.empty(k + 2, np.int64)  # threads to expand at this position
    roots_start = np.empty(k + 2, np.int64)
    live_state = np.empty(k + 1, np.int64)  # threads waiting for the next character
    live_start = np.empty(k + 1, np.int64)
    stack_state = np.empty(2 * k + 2, np.int64)
    stack_emit = np.empty(2 * k + 2, np.bool_)  # True: "wait at the state", False: expand it
    seen = np.full(k + 1, -1, np.int64)  # the step that last reached a state
    step = 0
    for v in range(ptr.shape[0] - 1):
        a = ptr[v]
        n = ptr[v + 1] - a
        best_start = -1
        best_end = -1
        n_roots = 0
        for pos in range(n + 1):
            step += 1
            if best_start < 0 and (pos == 0 or not anchored_start):
                roots_state[n_roots] = 0
                roots_start[n_roots] = pos
                n_roots += 1
            n_live = 0
            cut = False
            for r in range(n_roots):
                s = roots_start[r]
                stack_state[0] = roots_state[r]
                stack_emit[0] = False
                sp = 1
                while sp > 0:
                    sp -= 1
                    j = stack_state[sp]
                    if stack_emit[sp]:
                        live_state[n_live] = j
                        live_start[n_live] = s
                        n_live += 1
                        continue
                    if seen[j] == step:
                        continue
                    seen[j] = step
                    if j == k:
                        if anchored_end and pos != n:
                            continue
                        best_start = s
                        best_end = pos
                        cut = True
                        break
                    h = how[j]
                    if h == 0:
                        live_state[n_live] = j
                        live_start[n_live] = s
                        n_live += 1
                    elif h == 1:  # x*: first without x, then with one more x
                        stack_state[sp] = j
                        stack_emit[sp] = True
                        stack_state[sp + 1] = j + 1
                        stack_emit[sp + 1] = False
                        sp += 2
                    else:  # x?: first with x, then without
                        stack_state[sp] = j + 1
                        stack_emit[sp] = False
                        stack_state[sp + 1] = j
                        stack_emit[sp + 1] = True
                        sp += 2
                if cut:
                    break
            if pos == n or (cut and any_match):
                break
            c = codes[a + pos]
            m = masks[a + pos]
            n_roots = 0
            for i in range(n_live):
                j = live_state[i]
                w = what[j]
                if w == 0:
                    ok = True
                elif w == 1:
                    ok = c == arg[j]
                else:
                    ok = ((m >> arg[j]) & 1 == 1) == (w == 2)
                if ok:
                    roots_state[n_roots] = j if how[j] == 1 else j + 1
                    roots_start[n_roots] = live_start[i]
                    n_roots += 1
            if n_roots == 0 and best_start >= 0:
                break
        start[v] = best_start
        end[v] = best_end


# ---------------------------------------------------------------------------------------------
# templates
# ---------------------------------------------------------------------------------------------
class MacroFn:
    """The value function of a macro, ``%x`` / ``%t`` / ``%m`` (lower-cased when ``fold``), with
    a per-value cache. ``cmd`` is ``x``, ``t`` or ``m``."""

    def __init__(self, cmd: str, fold: bool, regex: str | None):
        self.cmd, self.fold, self.regex = cmd, fold, regex
        self._rx = WapitiRegex(regex) if regex is not None else None
        self._cache: dict[str, str] = {}

    @property
    def identity(self) -> bool:
        return self.cmd == "x" and not self.fold

    def map(self, values: list[str]) -> list[str]:
        """The value of the macro for each of ``values`` (the regex runs once for all)."""
        if self.cmd == "x":
            return [v.lower() for v in values] if self.fold else list(values)
        get = self._cache.get
        out = [get(v) for v in values]
        todo = [i for i, r in enumerate(out) if r is None]
        if todo:
            new = [values[i] for i in todo]
            start, end = self._rx.search(new, any_match=self.cmd == "t")
            if self.cmd == "t":
                res = ["true" if s >= 0 else "false" for s in start.tolist()]
            else:
                res = [v[s:e] if s >= 0 else ""
                       for v, s, e in zip(new, start.tolist(), end.tolist(), strict=True)]
            if self.fold:
                res = [r.lower() for r in res]
            if len(self._cache) + len(res) > 1_000_000:
                self._cache.clear()
            self._cache.update(zip(new, res, strict=True))
            for i, r in zip(todo, res, strict=True):
                out[i] = r
        return out

    def __call__(self, v: str) -> str:
        if self.cmd == "x":
            return v.lower() if self.fold else v
        r = self._cache.get(v)
        return r if r is not None else self.map([v])[0]


@dataclass(frozen=True)
class Macro:
    """``%<cmd>[row,col(,"regex")]``; ``fold`` for the upper-case form."""

    cmd: str
    fold: bool
    row: int
    col: int
    regex: str | None = None

    @property
    def fn_key(self) -> tuple:
        """What the value depends on besides the token: same key, same function."""
        return (self.cmd, self.fold, self.regex)


@dataclass(frozen=True)
class TemplateLine:
    """One pattern: ``kind`` U, B or *, literal text and macros in order, its file line."""

    kind: str
    items: tuple[str | Macro, ...]
    lineno: int

    @property
    def unigram(self) -> bool:
        return self.kind in "U*"

    @property
    def bigram(self) -> bool:
        return self.kind in "B*"

    @property
    def macros(self) -> list[Macro]:
        return [m for m in self.items if isinstance(m, Macro)]


_ARGS = re.compile(r"\[\s*([+-]?\d+)\s*,\s*(\d+)\s*")  # [row,col of a macro
_REGEX_START = re.compile(r',\s*"')  # ,"regex"] of %t and %m


def _parse_line(text: str) -> tuple[str, tuple[str | Macro, ...]]:
    """(kind, items) of a stripped, non-empty template line; ValueError on a bad one."""
    kind = text[0].upper()
    if kind not in "UB*":
        raise ValueError(f"unknown line type {text[0]!r} (a line starts with U, B or *)")
    items: list[str | Macro] = []
    lit: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "%":
            if c == "#" and i and text[i - 1].isspace():  # a trailing comment
                break
            lit.append(c)
            i += 1
            continue
        cmd = text[i + 1] if i + 1 < n else ""
        if cmd.lower() not in ("x", "t", "m"):
            raise ValueError(f"unknown macro %{cmd} (known: %x %X %t %T %m %M)")
        form = f"%{cmd}[row,col]" if cmd in "xX" else f'%{cmd}[row,col,"regex"]'
        m = _ARGS.match(text, i + 2)
        if not m:
            if text.startswith(("[@", "[*"), i + 2):
                raise ValueError(f"%{cmd}{text[i + 2:i + 4]}…: Wapiti's absolute and indirect "
                                 "offsets are not supported")
            raise ValueError(f"bad macro arguments at {text[i:i + 12]!r}: expected {form}")
        row, col = int(m.group(1)), int(m.group(2))
        if abs(row) > MAX_OFFSET:
            raise ValueError(f"row offset {row} out of range (at most {MAX_OFFSET} either way)")
        j = m.end()
        regex = None
        if cmd in "tTmM":
            q = _REGEX_START.match(text, j)
            if not q:
                raise ValueError(f"%{cmd} needs a regex: expected {form}")
            j = q.end()
            start = j
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:
                raise ValueError(f"unterminated regex in %{cmd}: missing closing \"")
            regex = text[start:j]
            try:
                _parse_regex(regex)
            except ValueError as e:
                raise ValueError(f'bad regex "{regex}": {e}') from None
            j += 1
            while j < n and text[j].isspace():
                j += 1
        if j >= n or text[j] != "]":
            raise ValueError(f"missing ] at {text[i:j + 1]!r}: expected {form}")
        if lit:
            items.append("".join(lit))
            lit = []
        items.append(Macro(cmd.lower(), cmd.isupper(), row, col, regex))
        i = j + 1
    if lit:
        items.append("".join(lit).rstrip())
    return kind, tuple(x for x in items if x != "")


class Template:
    """A parsed template: its lines (:class:`TemplateLine`), whether it asks for the label
    transitions, and the source text and path (for error messages and for the model file).

    Errors raise :class:`~demidcd.errors.InputError` naming ``path`` and the 1-based line."""

    def __init__(self, text: str, path: str = "<template>"):
        self.text, self.path = text, str(path)
        lines: list[TemplateLine] = []
        self.transitions = False
        for k, raw in enumerate(text.splitlines(), 1):
            s = raw.strip()
            if not s or s.startswith("#"):
                continue
            try:
                kind, items = _parse_line(s)
            except ValueError as e:
                raise InputError(self.path, k, str(e)) from None
            line = TemplateLine(kind, items, k)
            if line.bigram and not line.macros:  # a constant bigram is the transition matrix
                self.transitions = True
                if kind == "B":
                    continue
                line = TemplateLine("U", items, k)
            lines.append(line)
        if not lines and not self.transitions:
            raise InputError(self.path, None, "no feature lines (lines start with U, B or *)")
        self.lines = tuple(lines)
        macros = [m for ln in self.lines for m in ln.macros]
        self.n_columns = max((m.col + 1 for m in macros), default=0)
        self.max_offset = max((abs(m.row) for m in macros), default=0)
        self._fns: dict[tuple, MacroFn] = {}
        for m in macros:
            if m.fn_key not in self._fns:
                self._fns[m.fn_key] = MacroFn(m.cmd, m.fold, m.regex)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Template:
        """Read a template file (UTF-8)."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise InputError(str(path), None, f"cannot read template ({e.strerror or e})") from None
        except UnicodeDecodeError as e:
            raise InputError(str(path), None, f"template is not UTF-8 ({e.reason})") from None
        return cls(text, str(path))

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str]) -> Template:
        """A template file, or a shipped one by name (:data:`SHIPPED_TEMPLATES`)."""
        p = str(name_or_path)
        if p in SHIPPED_TEMPLATES and not os.path.exists(p):
            res = resources.files("demidcd").joinpath("templates", f"{p}.template")
            return cls(res.read_text(encoding="utf-8"), f"{p}.template")
        return cls.from_file(p)

    def fn(self, m: Macro) -> MacroFn:
        return self._fns[m.fn_key]

    @property
    def unigram_lines(self) -> list[TemplateLine]:
        return [ln for ln in self.lines if ln.unigram]

    @property
    def bigram_lines(self) -> list[TemplateLine]:
        return [ln for ln in self.lines if ln.bigram]

    def check_columns(self, n_columns: int) -> None:
        """InputError at the first line reading a column the data does not have."""
        for ln in self.lines:
            for m in ln.macros:
                if m.col >= n_columns:
                    raise InputError(self.path, ln.lineno,
                                     f"column {m.col} out of range (the data has {n_columns} "
                                     f"feature column{'s' if n_columns != 1 else ''})")

    def _expand_line(self, line: TemplateLine, sent: list, t: int) -> str:
        parts = []
        n = len(sent)
        for it in line.items:
            if isinstance(it, str):
                parts.append(it)
                continue
            u = t + it.row
            if u < 0:
                v = boundary(u)
            elif u >= n:
                v = boundary(u - n + 1)
            else:
                tok = sent[u]
                v = tok if isinstance(tok, str) else tok[it.col]
            parts.append(self._fns[it.fn_key](v))
        return "".join(parts)

    def expand(self, sentences: list[list]) -> list[list[tuple[list[str], list[str]]]]:
        """Per sentence, per token: (U feature strings, B feature strings), in line order.

        Tokens are tuples of column strings (label excluded) or plain strings (one column)."""
        n = _n_columns(sentences)
        if n:
            self.check_columns(n)
        regex_columns = {(m.col, m.fn_key) for ln in self.lines for m in ln.macros if m.regex}
        for c, key in regex_columns:  # one matcher call for all the values (then cached)
            self._fns[key].map(list({tok if isinstance(tok, str) else tok[c]: None
                                     for s in sentences for tok in s}))
        uni, bi = self.unigram_lines, self.bigram_lines
        return [[([self._expand_line(ln, s, t) for ln in uni],
                  [self._expand_line(ln, s, t) for ln in bi]) for t in range(len(s))]
                for s in sentences]


def _n_columns(sentences: list[list]) -> int:
    """The number of columns of every token (0 without tokens; ValueError when they differ)."""
    return _width(list(itertools.chain.from_iterable(sentences)))


def _width(flat: list) -> int:
    """:func:`_n_columns` of the tokens of all sentences in one list."""
    if not flat:
        return 0
    kinds = set(map(type, flat))
    if kinds == {str}:
        return 1
    if str in kinds:
        raise ValueError("tokens mix plain strings and tuples of columns")
    widths = set(map(len, flat))
    if len(widths) > 1:
        raise ValueError(f"tokens with different numbers of columns: {sorted(widths)}")
    return widths.pop()


# ---------------------------------------------------------------------------------------------
# feature dicts
# ---------------------------------------------------------------------------------------------
def _flatten_into(x, prefix: str, names: list[str], vals: list[float]) -> None:
    """Append the (name, value) pairs of python-crfsuite's item rules for ``x``."""
    if isinstance(x, dict):
        for k, v in x.items():
            if not isinstance(k, str):
                raise TypeError(f"feature name {k!r} is not a string")
            key = prefix + k
            if isinstance(v, str):
                names.append(key + ":" + v)
                vals.append(1.0)
            elif isinstance(v, bool | np.bool_):
                if v:
                    names.append(key)
                    vals.append(1.0)
            elif isinstance(v, numbers.Real):
                f = float(v)
                if not math.isfinite(f):
                    raise ValueError(f"feature {key!r} has the non-finite value {v!r}")
                if f != 0.0:
                    names.append(key)
                    vals.append(f)
            elif isinstance(v, dict | list | tuple | set | frozenset):
                _flatten_into(v, key + ":", names, vals)
            else:
                raise TypeError(f"feature {key!r} has a value of type {type(v).__name__} "
                                "(expected str, number, bool, list of str or dict)")
    elif isinstance(x, list | tuple | set | frozenset):
        for k in x:
            if not isinstance(k, str):
                raise TypeError(f"feature name {k!r} is not a string")
            names.append(prefix + k)
            vals.append(1.0)
    else:
        raise TypeError(f"a token is a dict or a list of feature names, not {type(x).__name__}")


def dict_features(token: dict | list) -> list[tuple[str, float]]:
    """The (feature string, value) pairs of one token (see the module docstring)."""
    names: list[str] = []
    vals: list[float] = []
    _flatten_into(token, "", names, vals)
    return list(zip(names, vals, strict=True))


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _gather(sent_ptr, tok_type, valmap, row, n_types, n_off):
    """out[t] = valmap[type of column value at t + row], for positions outside the sentence the
    boundary types n_types + k − 1 (``_B-k``) and n_types + n_off + k − 1 (``_B+k``)."""
    out = np.empty(tok_type.shape[0], np.int64)
    for s in range(sent_ptr.shape[0] - 1):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for t in range(a, b):
            u = t + row
            if u < a:
                out[t] = valmap[n_types + (a - u) - 1]
            elif u >= b:
                out[t] = valmap[n_types + n_off + (u - b)]
            else:
                out[t] = valmap[tok_type[u]]
    return out


@nb.njit(cache=True, nogil=True)
def _dense_ids(key):
    """(first, inverse) of an int64 array: the distinct keys numbered in order of first
    occurrence, inverse[t] = the number of key[t], first[d] = the first t holding key d
    (open-addressing hash table, linear probing)."""
    n = key.shape[0]
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    slot_key = np.empty(1 << bits, np.int64)
    slot_id = np.full(1 << bits, -1, np.int64)
    inverse = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    m = 0
    for t in range(n):
        k = key[t]
        h = np.int64((np.uint64(k) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
        while slot_id[h] >= 0 and slot_key[h] != k:
            h = (h + 1) & mask
        if slot_id[h] < 0:
            slot_key[h] = k
            slot_id[h] = m
            first[m] = t
            m += 1
        inverse[t] = slot_id[h]
    return first[:m].copy(), inverse


@nb.njit(cache=True, nogil=True)
def _sort_slice(idx, val, a, b, weighted):
    """Sort idx[a:b] ascending (val alongside when weighted)."""
    if b - a <= 32:
        for i in range(a + 1, b):
            x = idx[i]
            y = val[i] if weighted else 0.0
            k = i - 1
            while k >= a and idx[k] > x:
                idx[k + 1] = idx[k]
                if weighted:
                    val[k + 1] = val[k]
                k -= 1
            idx[k + 1] = x
            if weighted:
                val[k + 1] = y
    else:
        order = np.argsort(idx[a:b], kind="mergesort")
        si = idx[a:b][order]
        idx[a:b] = si
        if weighted:
            sv = val[a:b][order]
            val[a:b] = sv


@nb.njit(cache=True, nogil=True)
def _csr_sorted(ptr, ids, vals, weighted):
    """Per row r, ids[ptr[r]:ptr[r+1]] without −1 (and, weighted, without value 0), sorted,
    equal ids merged (values summed, zero sums dropped; unweighted: kept once).

    Returns (out_ptr int64, out_idx int32, out_val float64 — empty unless weighted)."""
    n = ptr.shape[0] - 1
    out_ptr = np.zeros(n + 1, np.int64)
    out_idx = np.empty(ids.shape[0], np.int32)
    out_val = np.empty(ids.shape[0] if weighted else 0, np.float64)
    pos = 0
    for r in range(n):
        start = pos
        for q in range(ptr[r], ptr[r + 1]):
            f = ids[q]
            if f < 0:
                continue
            if weighted:
                if vals[q] == 0.0:
                    continue
                out_val[pos] = vals[q]
            out_idx[pos] = f
            pos += 1
        _sort_slice(out_idx, out_val, start, pos, weighted)
        m = start
        i = start
        while i < pos:
            f = out_idx[i]
            v = 0.0
            while i < pos and out_idx[i] == f:
                if weighted:
                    v += out_val[i]
                i += 1
            if weighted:
                if v == 0.0:
                    continue
                out_val[m] = v
            out_idx[m] = f
            m += 1
        pos = m
        out_ptr[r + 1] = pos
    return out_ptr, out_idx[:pos].copy(), out_val[:pos if weighted else 0].copy()


# ---------------------------------------------------------------------------------------------
# encodings and ids
# ---------------------------------------------------------------------------------------------
@dataclass
class TemplateEncoding:
    """Sentences as CSR arrays of U (emission) and B (label-bigram) feature ids.

    Sentence s holds tokens sent_ptr[s]:sent_ptr[s+1]. Token t fires the U features
    feat_idx[feat_ptr[t]:feat_ptr[t+1]] (sorted, unique) with values feat_val[same] (None: all 1),
    scored with y_t; and the B features bfeat_idx[bfeat_ptr[t]:bfeat_ptr[t+1]] (values bfeat_val),
    scored with the pair (y_{t-1}, y_t) — for t the first token of a sentence, y_{t-1} = START
    (CRF++ and Wapiti compute them there too; a chain may ignore them). ``transitions``: the
    source asks for the plain label-bigram weights (a bare ``B`` line; always for dicts).
    """

    sent_ptr: np.ndarray  # int64[n_sent+1]
    feat_ptr: np.ndarray  # int64[n_tokens+1]
    feat_idx: np.ndarray  # int32[nnz]
    feat_val: np.ndarray | None  # float64[nnz]
    bfeat_ptr: np.ndarray  # int64[n_tokens+1]
    bfeat_idx: np.ndarray  # int32[bnnz]
    bfeat_val: np.ndarray | None  # float64[bnnz]
    transitions: bool

    @property
    def n_sentences(self) -> int:
        return int(self.sent_ptr.shape[0] - 1)

    @property
    def n_tokens(self) -> int:
        return int(self.feat_ptr.shape[0] - 1)


def _sent_ptr(sentences: list[list]) -> np.ndarray:
    lengths = np.fromiter((len(s) for s in sentences), np.int64, count=len(sentences))
    ptr = np.zeros(len(sentences) + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return ptr


def _pack_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes as uint8, end offsets as int64) of a list of strings."""
    enc = [s.encode("utf-8") for s in strings]
    ends = np.cumsum(np.fromiter((len(b) for b in enc), np.int64, count=len(enc)))
    return np.frombuffer(b"".join(enc), np.uint8).copy(), ends.astype(np.int64)


def _unpack_strings(blob: np.ndarray, ends: np.ndarray, n: int) -> list[str]:
    raw = np.asarray(blob, np.uint8).tobytes()
    ends = np.asarray(ends, np.int64)
    if ends.shape != (n,) or (n and (ends[-1] != len(raw) or np.any(np.diff(ends) < 0)
                                     or ends[0] < 0)):
        raise ValueError("malformed feature strings")
    if not n:
        return []
    starts = np.concatenate([[0], ends[:-1]]).tolist()
    return [raw[a:b].decode("utf-8") for a, b in zip(starts, ends.tolist(), strict=True)]


class _FeatureSpace:
    """The ids of one feature space: a dictionary (after fit) or hashing mod ``hashing``."""

    def __init__(self, hashing: int):
        self.hashing = int(hashing)
        self.features: list[str] | None = None
        self.index: dict[str, int] | None = None

    @property
    def size(self) -> int:
        if self.hashing:
            return self.hashing
        if self.features is None:
            raise RuntimeError("feature space is not fitted")
        return len(self.features)

    def lookup(self, strings: list[str], seen: dict[str, int] | None) -> np.ndarray:
        """int32 ids of ``strings``: provisional ids added to ``seen`` (fit), crc32 mod D
        (hashing) or the dictionary's (−1 when unknown)."""
        n = len(strings)
        if seen is not None:
            for x in dict.fromkeys(strings):
                if x not in seen:
                    seen[x] = len(seen)
            get = seen.__getitem__
        elif self.hashing:
            mod, crc = self.hashing, zlib.crc32
            get = {x: crc(x.encode("utf-8")) % mod for x in dict.fromkeys(strings)}.__getitem__
        else:
            return np.fromiter(map(self.index.get, strings, itertools.repeat(-1, n)), np.int32,
                               count=n)
        return np.fromiter(map(get, strings), np.int32, count=n)

    def finalize(self, seen: dict[str, int], feat_idx: np.ndarray, min_count: int) -> np.ndarray:
        """Keep the provisional features firing on ≥ min_count tokens (``feat_idx``: the
        deduplicated provisional ids of all tokens), ids by decreasing count then string;
        returns the map provisional id → final id (−1: dropped)."""
        names = list(seen)
        counts = np.bincount(feat_idx, minlength=len(names))
        keep = np.flatnonzero(counts >= min_count)
        kept = list(map(names.__getitem__, keep.tolist()))
        rank = np.empty(len(kept), np.int64)
        rank[sorted(range(len(kept)), key=kept.__getitem__)] = np.arange(len(kept))
        by = np.lexsort((rank, -counts[keep]))
        order = keep[by]
        self.features = list(map(kept.__getitem__, by.tolist()))
        self.index = dict(zip(self.features, range(len(self.features)), strict=True))
        remap = np.full(len(names), -1, np.int32)
        remap[order] = np.arange(order.shape[0], dtype=np.int32)
        return remap

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        if self.hashing:
            return {}
        blob, ends = _pack_strings(self.features)
        return {f"{prefix}_strings": blob, f"{prefix}_ends": ends}

    def load(self, arrays: dict[str, np.ndarray], prefix: str, n: int) -> None:
        if self.hashing:
            if n != self.hashing:
                raise ValueError(f"{prefix}: size does not match hashing")
            return
        feats = _unpack_strings(arrays[f"{prefix}_strings"], arrays[f"{prefix}_ends"], n)
        self.features = feats
        self.index = dict(zip(feats, range(n), strict=True))
        if len(self.index) != n:
            raise ValueError(f"{prefix}: duplicate feature strings")


def _remap(ptr: np.ndarray, idx: np.ndarray, val: np.ndarray | None,
           remap: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    new = remap[idx] if idx.shape[0] else idx
    w = val is not None
    p, i, v = _csr_sorted(ptr, new, val if w else np.zeros(0, np.float64), w)
    return p, i, (v if w else None)


def _check_params(min_count: int, hashing: int) -> None:
    if int(min_count) < 1:
        raise ValueError("min_count must be >= 1")
    if int(hashing) < 0 or int(hashing) >= 2**31:
        raise ValueError("hashing must be in [0, 2**31)")


class _SpacesFeaturizer:
    """Shared fit / transform / state machinery of the two featurizers: sources produce, per
    feature space, a pre-CSR (row pointers, ids, values or None) through ``_expand``."""

    kind = ""
    n_spaces = 1

    def __init__(self, min_count: int, hashing: int):
        _check_params(min_count, hashing)
        self.min_count, self.hashing = int(min_count), int(hashing)
        self.spaces = [_FeatureSpace(hashing) for _ in range(self.n_spaces)]
        self._fitted = False

    @property
    def fitted(self) -> bool:
        return self._fitted

    @property
    def n_features(self) -> int:
        """F, the number of U (emission) features (ids 0..F-1)."""
        self._need_fit()
        return self.spaces[0].size

    @property
    def features(self) -> list[str] | None:
        """The U feature strings by id (dictionary mode; None when hashing)."""
        return self.spaces[0].features

    def _need_fit(self) -> None:
        if not self._fitted:
            raise RuntimeError(f"{type(self).__name__} is not fitted")

    def _expand(self, tokens, lookups: list[Callable[[list[str]], np.ndarray]]):
        raise NotImplementedError

    def _encode(self, tokens: list[list], seen: list[dict] | None) -> TemplateEncoding:
        lookups = [(lambda strings, sp=sp, sn=sn: sp.lookup(strings, sn))
                   for sp, sn in zip(self.spaces, seen or [None] * self.n_spaces, strict=True)]
        sent_ptr, parts, transitions = self._expand(tokens, lookups)
        out = []
        for ptr, ids, vals in parts:
            w = vals is not None
            p, i, v = _csr_sorted(ptr, ids, vals if w else np.zeros(0, np.float64), w)
            out.append((p, i, v if w and np.any(v != 1.0) else None))
        if len(out) == 1:
            n = sent_ptr[-1]
            out.append((np.zeros(n + 1, np.int64), np.zeros(0, np.int32), None))
        (fp, fi, fv), (bp, bi, bv) = out
        return TemplateEncoding(sent_ptr, fp, fi, fv, bp, bi, bv, transitions)

    def fit_transform(self, tokens: list[list]) -> TemplateEncoding:
        """Build the dictionaries (see the module docstring) and encode ``tokens``."""
        self._fitted = False  # until the new dictionaries are complete
        self._fit_source(tokens)
        if self.hashing:
            self._fitted = True
            return self._encode(tokens, None)
        seen: list[dict[str, int]] = [{} for _ in range(self.n_spaces)]
        enc = self._encode(tokens, seen)
        remaps = [sp.finalize(sn, idx, self.min_count)
                  for sp, sn, idx in zip(self.spaces, seen, (enc.feat_idx, enc.bfeat_idx),
                                         strict=False)]
        self._fitted = True
        enc.feat_ptr, enc.feat_idx, enc.feat_val = _remap(enc.feat_ptr, enc.feat_idx,
                                                          enc.feat_val, remaps[0])
        if self.n_spaces > 1:
            enc.bfeat_ptr, enc.bfeat_idx, enc.bfeat_val = _remap(enc.bfeat_ptr, enc.bfeat_idx,
                                                                 enc.bfeat_val, remaps[1])
        return enc

    def fit(self, tokens: list[list]) -> Self:
        """:meth:`fit_transform` without the encoding."""
        self.fit_transform(tokens)
        return self

    def transform(self, tokens: list[list]) -> TemplateEncoding:
        """Encode ``tokens``; features unknown to the dictionary are dropped."""
        self._need_fit()
        return self._encode(tokens, None)

    def _fit_source(self, tokens: list[list]) -> None:
        pass

    def _meta(self) -> dict:
        return {"kind": self.kind, "version": TEMPLATE_STATE_VERSION,
                "min_count": self.min_count, "hashing": self.hashing,
                "sizes": [sp.size for sp in self.spaces]}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """(arrays, JSON-able metadata): the dictionaries as UTF-8 bytes + end offsets."""
        self._need_fit()
        arrays: dict[str, np.ndarray] = {}
        for k, sp in enumerate(self.spaces):
            arrays.update(sp.state(("feature", "bfeature")[k]))
        return arrays, self._meta()

    def _load_spaces(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        sizes = [int(x) for x in meta["sizes"]]
        if len(sizes) != self.n_spaces or min(sizes) < 0:
            raise ValueError("bad feature space sizes")
        for k, sp in enumerate(self.spaces):
            sp.load(arrays, ("feature", "bfeature")[k], sizes[k])
        self._fitted = True

    @staticmethod
    def _check_state(meta: dict, kind: str) -> None:
        if meta.get("kind") != kind:
            raise ValueError(f"not a {kind} state")
        if meta.get("version") != TEMPLATE_STATE_VERSION:
            raise ValueError(f"unsupported {kind} state version {meta.get('version')}")


class TemplateFeaturizer(_SpacesFeaturizer):
    """Maps sentences of column tuples to :class:`TemplateEncoding` through a :class:`Template`.

    ``template``: a :class:`Template`, or a file path or shipped name (:meth:`Template.load`).
    ``min_count`` / ``hashing`` as in :class:`~demidcd.tasks.features.SequenceFeaturizer`;
    B features are hashed mod ``bhashing`` (default: ``hashing``; each B weight row has K² entries
    against K for U, so a smaller modulus is often wiser).
    """

    kind = "TemplateFeaturizer"
    n_spaces = 2

    def __init__(self, template: Template | str, min_count: int = DEFAULT_MIN_COUNT,
                 hashing: int = 0, bhashing: int | None = None):
        super().__init__(min_count, hashing)
        if not isinstance(template, Template):
            template = Template.load(template)
        self.template = template
        self.bhashing = self.hashing if bhashing is None else int(bhashing)
        _check_params(1, self.bhashing)
        if bool(self.bhashing) != bool(self.hashing):
            raise ValueError("bhashing needs hashing (and hashing bhashing)")
        self.spaces[1] = _FeatureSpace(self.bhashing)
        self.n_columns: int | None = None  # columns per token (set by fit)

    @property
    def n_bfeatures(self) -> int:
        """The number of B (label-bigram) features."""
        self._need_fit()
        return self.spaces[1].size if self.template.bigram_lines else 0

    @property
    def transitions(self) -> bool:
        return self.template.transitions

    @property
    def bfeatures(self) -> list[str] | None:
        """The B feature strings by id (dictionary mode; None when hashing)."""
        return self.spaces[1].features

    def _fit_source(self, tokens: list[list]) -> None:
        self.n_columns = None  # set by the first _expand

    def _expand(self, tokens, lookups):
        flat = list(itertools.chain.from_iterable(tokens))
        n = _width(flat)
        if n:
            if self.n_columns is not None and n != self.n_columns:
                raise ValueError(f"tokens have {n} columns, the model was fitted on "
                                 f"{self.n_columns}")
            self.template.check_columns(n)
            self.n_columns = n
        sent_ptr = _sent_ptr(tokens)
        n_tok = int(sent_ptr[-1])
        tpl = self.template
        parts = []
        for k, lines in enumerate((tpl.unigram_lines, tpl.bigram_lines)):
            L = len(lines)
            ids = self._line_ids(flat, sent_ptr, lines, lookups[k]).ravel()
            parts.append((np.arange(0, n_tok * L + 1, max(L, 1), dtype=np.int64)
                          if L else np.zeros(n_tok + 1, np.int64), ids, None))
        return sent_ptr, parts, tpl.transitions

    def _line_ids(self, flat: list, sent_ptr, lines: list[TemplateLine], lookup) -> np.ndarray:
        """int32[n_tokens, len(lines)]: the id of each line's feature at each token."""
        n_tok = int(sent_ptr[-1])
        out = np.empty((n_tok, len(lines)), np.int32)
        R = self.template.max_offset
        columns: dict[int, tuple[np.ndarray, list[str]]] = {}
        fn_values: dict[tuple, tuple[np.ndarray, list[str]]] = {}
        gathered: dict[tuple, np.ndarray] = {}

        def column(c: int) -> tuple[np.ndarray, list[str]]:
            if c not in columns:
                col = flat if flat and isinstance(flat[0], str) else [t[c] for t in flat]
                vocab = dict.fromkeys(col)  # distinct values in order of first occurrence
                index = dict(zip(vocab, range(len(vocab)), strict=True))
                tt = np.fromiter(map(index.__getitem__, col), np.int64, count=n_tok)
                ext = list(vocab) + [boundary(-k) for k in range(1, R + 1)] + \
                    [boundary(k) for k in range(1, R + 1)]
                columns[c] = (tt, ext)
            return columns[c]

        def values(m: Macro) -> tuple[np.ndarray, list[str]]:
            key = (m.col, m.fn_key)
            if key not in fn_values:
                _, ext = column(m.col)
                fn = self.template.fn(m)
                if fn.identity:
                    fn_values[key] = (np.arange(len(ext), dtype=np.int64), ext)
                else:
                    vocab: dict[str, int] = {}
                    sd = vocab.setdefault
                    vm = np.fromiter((sd(r, len(vocab)) for r in fn.map(ext)), np.int64,
                                     count=len(ext))
                    fn_values[key] = (vm, list(vocab))
            return fn_values[key]

        def per_token(m: Macro) -> np.ndarray:
            key = (m.col, m.fn_key, m.row)
            if key not in gathered:
                tt, ext = column(m.col)
                vm, _ = values(m)
                gathered[key] = _gather(sent_ptr, tt, vm, m.row, len(ext) - 2 * R, R)
            return gathered[key]

        for j, line in enumerate(lines):
            macros = line.macros
            if not macros:
                out[:, j] = lookup(["".join(line.items)])[0] if n_tok else 0
                continue
            key = per_token(macros[0]).copy()
            radix = len(values(macros[0])[1])
            for m in macros[1:]:
                v, size = per_token(m), len(values(m)[1])
                if radix * size >= 2**62:
                    first, key = _dense_ids(key)
                    radix = first.shape[0]
                key = key * size + v
                radix *= size
            first, inverse = _dense_ids(key)
            cols: list[Iterable[str]] = []
            for it in line.items:
                if isinstance(it, str):
                    cols.append(itertools.repeat(it))
                else:
                    vocab = values(it)[1]
                    cols.append([vocab[x] for x in per_token(it)[first].tolist()])
            strings = list(map("".join, zip(*cols, strict=False)))
            out[:, j] = lookup(strings)[inverse]
        return out

    def expand(self, tokens: list[list]) -> list[list[tuple[list[str], list[str]]]]:
        """The feature strings (see :meth:`Template.expand`)."""
        return self.template.expand(tokens)

    def _meta(self) -> dict:
        return {**super()._meta(), "bhashing": self.bhashing, "n_columns": self.n_columns or 0,
                "template": self.template.text, "template_path": self.template.path}

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], meta: dict) -> TemplateFeaturizer:
        """Inverse of :meth:`state`; ValueError on inconsistent input (an InputError if the stored
        template does not parse)."""
        cls._check_state(meta, cls.kind)
        tpl = Template(str(meta["template"]), str(meta.get("template_path", "<model template>")))
        obj = cls(tpl, int(meta["min_count"]), int(meta["hashing"]), int(meta["bhashing"]))
        obj.n_columns = int(meta["n_columns"]) or None
        if obj.n_columns is not None:
            tpl.check_columns(obj.n_columns)
        obj._load_spaces(arrays, meta)
        return obj


class DictFeaturizer(_SpacesFeaturizer):
    """Maps sentences of feature dicts (or lists of feature names) to :class:`TemplateEncoding`
    (U features with values; no B features; ``transitions`` True), by :func:`dict_features`."""

    kind = "DictFeaturizer"
    n_spaces = 1

    def __init__(self, min_count: int = DEFAULT_MIN_COUNT, hashing: int = 0):
        super().__init__(min_count, hashing)

    def _expand(self, tokens, lookups):
        sent_ptr = _sent_ptr(tokens)
        names: list[str] = []
        na = names.append
        num_at: list[int] = []  # positions in names of the values other than 1 …
        num_val: list[float] = []  # … and those values
        ends = [0]
        for s in tokens:
            for tok in s:
                if tok.__class__ is dict:
                    for k, v in tok.items():  # the common cases inline, the rest in _flatten_into
                        c = v.__class__
                        if c is str and k.__class__ is str:
                            na(k + ":" + v)
                        elif c is bool and k.__class__ is str:
                            if v:
                                na(k)
                        elif (c is float or c is int) and k.__class__ is str and math.isfinite(v):
                            if v:
                                if v != 1:
                                    num_at.append(len(names))
                                    num_val.append(v)
                                na(k)
                        else:
                            self._slow({k: v}, names, num_at, num_val)
                else:
                    self._slow(tok, names, num_at, num_val)
                ends.append(len(names))
        vals = np.ones(len(names), np.float64)
        vals[np.array(num_at, np.int64)] = np.array(num_val, np.float64)
        ids = lookups[0](names)
        return sent_ptr, [(np.array(ends, np.int64), ids, vals)], True

    @staticmethod
    def _slow(x, names: list[str], num_at: list[int], num_val: list[float]) -> None:
        """:func:`_flatten_into` for what the inline cases of :meth:`_expand` do not cover."""
        nm: list[str] = []
        vl: list[float] = []
        _flatten_into(x, "", nm, vl)
        for n, v in zip(nm, vl, strict=True):
            if v != 1.0:
                num_at.append(len(names))
                num_val.append(v)
            names.append(n)

    @property
    def transitions(self) -> bool:
        return True

    @property
    def n_bfeatures(self) -> int:
        return 0

    @classmethod
    def from_state(cls, arrays: dict[str, np.ndarray], meta: dict) -> DictFeaturizer:
        """Inverse of :meth:`state`; ValueError on inconsistent input."""
        cls._check_state(meta, cls.kind)
        obj = cls(int(meta["min_count"]), int(meta["hashing"]))
        obj._load_spaces(arrays, meta)
        return obj


__all__ = ["DictFeaturizer", "Macro", "MacroFn", "Template", "TemplateEncoding",
           "TemplateFeaturizer", "TemplateLine", "WapitiRegex", "boundary", "compile_regex",
           "dict_features"]


def resolve_template(template: Any) -> Template | None:
    """The ``template`` parameter as a :class:`~demidcd.tasks.template.Template` (None: the
    built-in features): a Template, a shipped name (``chunking``, ``pos``, ``ner``) or a file
    path; a template that does not parse raises InputError naming its file and line."""
    if template is None or isinstance(template, Template):
        return template
    if isinstance(template, str | os.PathLike):
        return Template.load(os.fspath(template))
    raise OptionError(f"--template must be a file name, a shipped template name or a Template, "
                      f"got {type(template).__name__}")
