"""Wapiti's regex dialect, for the ``%t`` / ``%m`` macros of feature templates
(:mod:`.template_language`).

A regex of Wapiti's dialect has: ``.`` any character; ``\\d`` digit,
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
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from functools import cache

import numba as nb
import numpy as np

__all__ = ["WapitiRegex", "compile_regex", "parse_regex"]

_CLASS_LETTERS = "dsawlup"  # bit k of a character's class mask: it is in \<_CLASS_LETTERS[k]>
_ANY, _CHAR, _IN_CLASS, _NOT_IN_CLASS = 0, 1, 2, 3  # what an atom matches
_ONCE, _STAR, _OPTIONAL = 0, 1, 2  # how often: x, x* (fewest first), x? (the character first)


def parse_regex(rx: str) -> tuple[bool, list[tuple[int, str, int]], bool]:
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
    without backtracking (``re`` may take time exponential in the number of ``*``): a
    reference for the tests, training never calls it."""
    start, atoms, end = parse_regex(rx)
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
        start, atoms, end = parse_regex(rx)
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
