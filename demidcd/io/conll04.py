"""Reader and writer for the Roth & Yih (2004) entity/relation corpus (``conll04.corp``).

A sentence is a block of 9-column tab-separated token lines

    sentence-id  entity-type  token-index  _  POS  word  _  _  _

then a blank line, then zero or more 3-column relation lines ``arg1-token  arg2-token  relation``,
then a blank line. Entity types are ``Peop``, ``Loc``, ``Org``, ``Other`` (``O``: no entity); a
multi-word entity is one token whose words are joined by ``/``. Every ordered pair of entities
not listed has no relation.

Entities are numbered 0..n−1 in token order; relations are stored by entity position
``(a, b) -> type``, not by token index.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from demidcd.errors import InputError, OptionError

ENTITY_LABELS: tuple[str, ...] = ("Peop", "Loc", "Org", "Other")
RELATION_LABELS: tuple[str, ...] = (
    "NoRel", "Live_In", "Work_For", "OrgBased_In", "Located_In", "Kill",
)
# argument types of each relation (index into ENTITY_LABELS); NoRel has none
RELATION_ARGS: tuple[tuple[int, int], ...] = ((-1, -1), (0, 1), (0, 2), (2, 1), (1, 1), (0, 0))
_ENT_INDEX = {e: k for k, e in enumerate(ENTITY_LABELS)}
_REL_INDEX = {r: k for k, r in enumerate(RELATION_LABELS) if k > 0}


@dataclass
class ERSentence:
    """One sentence: tokens, their entity tags, and the relations between its entities."""

    sid: str
    words: list[str]  # per token ("/"-joined for multi-word entities, "COMMA" for ",")
    pos: list[str]  # per token
    tags: list[str]  # per token: entity type or "O"
    ent_tok: list[int] = field(default_factory=list)  # token index of each entity
    ent_label: list[str] = field(default_factory=list)  # type of each entity
    relations: dict[tuple[int, int], str] = field(default_factory=dict)  # entity positions

    @property
    def n_entities(self) -> int:
        return len(self.ent_tok)


def _finish_tokens(sent: ERSentence) -> None:
    sent.ent_tok = [t for t, tag in enumerate(sent.tags) if tag != "O"]
    sent.ent_label = [sent.tags[t] for t in sent.ent_tok]


def read_conll04(path: str | os.PathLike, encoding: str = "utf-8",
                 max_sentence_length: int = 5000) -> list[ERSentence]:
    """Read a conll04-format file; any malformed line raises ``InputError(path, line, msg)``.

    Reading and decoding follow :func:`demidcd.io.tagged.read_tagged`: ``.gz`` is decompressed,
    a UTF-8 BOM is dropped, undecodable bytes name their line, an unknown encoding raises
    :class:`~demidcd.errors.OptionError`. A file without sentences, and a sentence of more than
    ``max_sentence_length`` tokens, are errors too.
    """
    from .tagged import too_long
    from .text_source import read_text, source_name

    path = str(path)
    if max_sentence_length < 1:
        raise OptionError(f"--max-sentence-length must be >= 1, got {max_sentence_length}")
    text = read_text(path, encoding)
    path = source_name(path)  # "-" (standard input) is named <stdin>
    sentences: list[ERSentence] = []
    cur: ERSentence | None = None
    tok_pos: dict[int, int] = {}  # token index -> entity position, for the current sentence
    first_line = 0  # line of the current sentence's first token
    state = "between"  # "tokens": inside a token block; "rels": after its blank line
    lines = text.split("\n")
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            if state == "tokens":
                state = "rels"
            continue
        cols = line.split("\t")
        if len(cols) == 9:
            if state != "tokens":
                if cur is not None:
                    _finish_sentence(cur)
                cur = ERSentence(cols[0], [], [], [])
                sentences.append(cur)
                first_line = lineno
                state = "tokens"
                tok_pos = {}
            assert cur is not None
            if cols[0] != cur.sid:
                raise InputError(path, lineno, f"sentence id {cols[0]!r} inside the token block "
                                 f"of sentence {cur.sid!r} (missing blank line?)")
            tag = cols[1]
            if tag != "O" and tag not in _ENT_INDEX:
                raise InputError(path, lineno, f"unknown entity type {tag!r} "
                                 f"(expected one of O, {', '.join(ENTITY_LABELS)})")
            try:
                idx = int(cols[2])
            except ValueError:
                raise InputError(path, lineno, f"token index {cols[2]!r} is not an integer"
                                 ) from None
            if idx != len(cur.words):
                raise InputError(path, lineno, f"token index {idx} out of sequence "
                                 f"(expected {len(cur.words)})")
            if idx >= max_sentence_length:
                raise too_long(path, first_line, lines, lineno, max_sentence_length,
                               lambda ln: 1 if len(ln.split("\t")) == 9 else -1)
            if not cols[5] or not cols[4]:
                raise InputError(path, lineno, "empty word or POS column")
            if tag != "O":
                tok_pos[idx] = len(tok_pos)
            cur.words.append(cols[5])
            cur.pos.append(cols[4])
            cur.tags.append(tag)
        elif len(cols) == 3:
            if state == "tokens":
                raise InputError(path, lineno, "relation line inside a token block "
                                 "(expected a blank line after the tokens)")
            if cur is None:
                raise InputError(path, lineno, "relation line before any sentence")
            try:
                ta, tb = int(cols[0]), int(cols[1])
            except ValueError:
                raise InputError(path, lineno, f"relation arguments {cols[0]!r}, {cols[1]!r} "
                                 "are not integers") from None
            for t in (ta, tb):
                if not 0 <= t < len(cur.words):
                    raise InputError(path, lineno, f"relation argument {t} is not a token of "
                                     f"sentence {cur.sid!r} ({len(cur.words)} tokens)")
                if t not in tok_pos:
                    raise InputError(path, lineno, f"relation argument {t} "
                                     f"({cur.words[t]!r}) is not an entity")
            if ta == tb:
                raise InputError(path, lineno, "relation from a token to itself")
            rel = cols[2].strip()
            if rel not in _REL_INDEX:
                raise InputError(path, lineno, f"unknown relation type {rel!r} "
                                 f"(expected one of {', '.join(RELATION_LABELS[1:])})")
            key = (tok_pos[ta], tok_pos[tb])
            if key in cur.relations:
                raise InputError(path, lineno, f"second relation for the pair ({ta}, {tb})")
            cur.relations[key] = rel
            state = "rels"
        else:
            raise InputError(path, lineno, f"expected 9 (token) or 3 (relation) tab-separated "
                             f"columns, found {len(cols)}")
    if cur is None:
        raise InputError(path, None, "no sentences found (empty file?)")
    _finish_sentence(cur)
    return sentences


def _finish_sentence(sent: ERSentence) -> None:
    _finish_tokens(sent)


def _label_str(lab: object, table: Sequence[str]) -> str:
    if isinstance(lab, str):
        return lab
    return table[int(lab)]  # type: ignore[call-overload]


def pair_index(n: int, a: int, b: int) -> int:
    """Position of ordered pair (a, b), a ≠ b, among the n(n−1) pairs (row-major, diagonal out)."""
    return a * (n - 1) + b - (1 if b > a else 0)


def write_conll04(
    path: str | os.PathLike,
    sentences: Sequence[ERSentence],
    pred_entities: Sequence[Sequence[object]] | None = None,
    pred_relations: Sequence[Mapping[tuple[int, int], object] | np.ndarray] | None = None,
    encoding: str = "utf-8",
) -> None:
    """Write sentences in conll04 format (in ``encoding``), atomically (temporary file + rename,
    see :func:`~demidcd.io.model.atomic_write`).

    ``pred_entities[i]`` gives the label of each entity of sentence i (str or index into
    :data:`ENTITY_LABELS`); ``pred_relations[i]`` is a dict ``(a, b) -> label`` over entity
    positions or an array of n(n−1) pair labels in :func:`pair_index` order (0 = no relation).
    ``None`` writes the sentences' own labels.
    """
    path = str(path)
    out: list[str] = []
    for i, s in enumerate(sentences):
        n = s.n_entities
        ents = s.ent_label if pred_entities is None else pred_entities[i]
        if len(ents) != n:
            raise ValueError(f"sentence {i}: {len(ents)} entity labels for {n} entities")
        tags = list(s.tags)
        for a, t in enumerate(s.ent_tok):
            tags[t] = _label_str(ents[a], ENTITY_LABELS)
        for t, (w, p, tag) in enumerate(zip(s.words, s.pos, tags, strict=True)):
            out.append(f"{s.sid}\t{tag}\t{t}\tO\t{p}\t{w}\tO\tO\tO\n")
        out.append("\n")
        rels = s.relations if pred_relations is None else pred_relations[i]
        if isinstance(rels, np.ndarray):
            items = []
            for a in range(n):
                for b in range(n):
                    if a != b and int(rels[pair_index(n, a, b)]) != 0:
                        items.append(((a, b), int(rels[pair_index(n, a, b)])))
        else:
            items = sorted(rels.items())
        for (a, b), r in items:
            lab = _label_str(r, RELATION_LABELS)
            if lab != RELATION_LABELS[0]:
                out.append(f"{s.ent_tok[a]}\t{s.ent_tok[b]}\t{lab}\n")
        out.append("\n")
    from .model import atomic_write

    text = "".join(out)
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as e:
        raise OptionError(f"{path}: {text[e.start:e.end]!r} cannot be written in {encoding}; "
                          "pass another --encoding") from None
    atomic_write(path, lambda f: f.write(data))


def split_corpus(
    sentences: Sequence[ERSentence], test_fraction: float = 0.2, seed: int = 0
) -> tuple[list[ERSentence], list[ERSentence]]:
    """Seeded shuffle (``random.Random(seed)``) then cut: (train, test), test ≈ fraction·N.

    Uses the same procedure as the acceptance split script, so ``seed`` reproduces its split.
    """
    order = list(sentences)
    random.Random(seed).shuffle(order)
    cut = int((1.0 - test_fraction) * len(order))
    return order[:cut], order[cut:]
