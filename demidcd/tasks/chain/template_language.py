"""The feature template language: CRF++ syntax with Wapiti's extensions.

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

A :class:`Template` is a file's lines parsed (:class:`TemplateLine`: literal text and
:class:`Macro` items); a line that does not parse is an :class:`~demidcd.errors.InputError`
naming the file and the 1-based line. :meth:`Template.expand` gives the feature strings
themselves; :class:`~.template.TemplateFeaturizer` maps them to ids fast. The regex
dialect of ``%t`` / ``%m`` is in :mod:`.template_regex`.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass
from importlib import resources

from ...errors import InputError
from .template_regex import WapitiRegex, parse_regex

__all__ = ["MAX_OFFSET", "SHIPPED_TEMPLATES", "Macro", "MacroFn", "Template", "TemplateLine",
           "boundary", "tokens_width"]

MAX_OFFSET = 100  # |r| of %x[r,c] (CRF++ allows 8)
SHIPPED_TEMPLATES = ("chunking", "pos", "ner")


def boundary(k: int) -> str:
    """CRF++'s value of a position k past the sentence: ``_B-k`` before it (k < 0), ``_B+k``
    after it (k > 0)."""
    return f"_B{k:+d}"



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
                parse_regex(regex)
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
        """Read a template file (UTF-8; a byte-order mark, as some Windows editors write,
        is dropped)."""
        try:
            with open(path, encoding="utf-8-sig") as f:
                text = f.read()
        except OSError as e:
            raise InputError(str(path), None, f"cannot read template ({e.strerror or e})") from None
        except UnicodeDecodeError as e:
            raise InputError(str(path), None, f"template is not UTF-8 ({e.reason})") from None
        return cls(text, str(path))

    @classmethod
    def from_name_or_file(cls, name_or_path: str | os.PathLike[str]) -> Template:
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
    return tokens_width(list(itertools.chain.from_iterable(sentences)))


def tokens_width(flat: list) -> int:
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
