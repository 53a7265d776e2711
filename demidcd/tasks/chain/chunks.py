"""Chunk-level precision, recall and F1 exactly as ``conlleval`` (CoNLL-2000, version 2004-01-26)
computes them.

A label ``P-T`` splits at its first hyphen into a chunk tag P and a type T (``O`` has type "").
Going through the tokens with the previous token's (tag, type), conlleval's rules say where a
chunk starts and ends:

    start:  B after B/I/O, I after O, E after E/O, any tag except O and "." whose type differs
            from the previous type, and "[" / "]" (one-token chunks)
    end:    B/I followed by B/O, E followed by E/I/O, I followed by O, a tag except O and "."
            followed by a different type, and after "[" / "]"

A sentence break (and the start of the data) is an ``O O`` token that is not counted. A chunk is
correct when the gold and the predicted sequences start one at the same token with the same type
and both end it at the same token, without the two disagreeing on an end or a type in between.
With c correct chunks, g gold chunks and p predicted ones: P = c/p, R = c/g, F1 = 2PR/(P + R)
(each 0 when undefined), overall and per type; token accuracy counts (tag, type) equality.

These rules read IOB1 and IOB2 (BIO) labels alike. BIOES (IOBES) labels are first rewritten to
IOB2 (S → B, E → I), which conlleval's rules then read correctly (conlleval has no S tag and
reads ``E-X B-X`` as one chunk). ``scheme="auto"`` picks BIOES when an S tag occurs, or E and B
tags both occur; otherwise the labels are read as they are. ``scheme="conlleval"`` always reads
them as they are, whatever the tags (what ``conlleval`` itself does).

The scan over tokens is a numba kernel over flat integer codes (one call per data set).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba as nb
import numpy as np

from ...errors import OptionError

SCHEMES = ("auto", "iob1", "iob2", "bio", "bioes", "iobes", "conlleval")
_O, _B, _I, _E, _OPEN, _CLOSE, _DOT = 0, 1, 2, 3, 4, 5, 6  # conlleval's special tags
_SPECIAL = {"O": _O, "B": _B, "I": _I, "E": _E, "[": _OPEN, "]": _CLOSE, ".": _DOT}
_ALLOWED = {"iob1": {"O", "B", "I"}, "iob2": {"O", "B", "I"},
            "bioes": {"O", "B", "I", "E", "S"}}


def split_label(label: str) -> tuple[str, str]:
    """(chunk tag, type) as conlleval splits a label: at the first hyphen (``O`` → (O, ""))."""
    tag, sep, typ = label.partition("-")
    return (tag, typ) if sep else (label, "")


def resolve_scheme(labels, scheme: str = "auto") -> str:
    """``"bioes"`` (rewrite S → B, E → I before scoring) or ``"conll"`` (score as they are).

    An explicit scheme checks every label's tag against it (OptionError otherwise)."""
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise OptionError(f"unknown label scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    if scheme == "conlleval":
        return "conll"
    tags = {split_label(lab)[0] for lab in labels}
    if scheme == "auto":
        return "bioes" if "S" in tags or ("E" in tags and "B" in tags) else "conll"
    key = {"bio": "iob2", "iobes": "bioes"}.get(scheme, scheme)
    bad = sorted(tags - _ALLOWED[key])
    if bad:
        raise OptionError(f"label tag {bad[0]!r} is not part of the {scheme.upper()} scheme "
                          f"(tags {', '.join(sorted(_ALLOWED[key]))}); try --label-scheme auto")
    return "bioes" if key == "bioes" else "conll"


def _to_iob2(tag: str) -> str:
    return {"S": "B", "E": "I"}.get(tag, tag)


@nb.njit(cache=True, nogil=True)
def _end(pt, t, pty, ty):
    """conlleval's endOfChunk(prevTag, tag, prevType, type)."""
    e = False
    if pt == 1 and (t == 1 or t == 0):
        e = True
    if pt == 2 and (t == 1 or t == 0):
        e = True
    if pt == 3 and (t == 3 or t == 2 or t == 0):
        e = True
    if pt != 0 and pt != 6 and pty != ty:
        e = True
    if pt == 4 or pt == 5:
        e = True
    return e


@nb.njit(cache=True, nogil=True)
def _start(pt, t, pty, ty):
    """conlleval's startOfChunk(prevTag, tag, prevType, type)."""
    s = False
    if t == 1 and (pt == 1 or pt == 2 or pt == 0):
        s = True
    if t == 2 and pt == 0:
        s = True
    if t == 3 and (pt == 3 or pt == 0):
        s = True
    if pt == 3 and t == 2:
        s = True
    if t != 0 and t != 6 and pty != ty:
        s = True
    if t == 4 or t == 5:
        s = True
    return s


@nb.njit(cache=True, nogil=True)
def conll_counts(ctag, ctype, gtag, gtype, sent_ptr, n_types):
    """Scan gold (ctag, ctype) and guessed (gtag, gtype) codes per token as conlleval does.

    Tags use the codes O=0, B=1, I=2, E=3, "["=4, "]"=5, "."=6, others ≥ 7 (distinct per tag
    string); types are ids with "" = 0. Sentence s is tokens sent_ptr[s]:sent_ptr[s+1]; an
    uncounted ``O O`` token follows each sentence. Returns (correct[n_types], gold[n_types],
    guessed[n_types], correct tags, tokens).
    """
    correct = np.zeros(n_types, np.int64)
    found_c = np.zeros(n_types, np.int64)
    found_g = np.zeros(n_types, np.int64)
    correct_tags = 0
    tokens = 0
    in_correct = False
    lc, lct, lg, lgt = 0, 0, 0, 0
    n_sent = sent_ptr.shape[0] - 1
    for s in range(n_sent):
        a = sent_ptr[s]
        b = sent_ptr[s + 1]
        for k in range(a, b + 1):
            if k < b:
                c, ct, g, gt = ctag[k], ctype[k], gtag[k], gtype[k]
            else:  # the sentence break
                c, ct, g, gt = 0, 0, 0, 0
            ec = _end(lc, c, lct, ct)
            eg = _end(lg, g, lgt, gt)
            if in_correct:
                if ec and eg and lgt == lct:
                    in_correct = False
                    correct[lct] += 1
                elif ec != eg or gt != ct:
                    in_correct = False
            sc = _start(lc, c, lct, ct)
            sg = _start(lg, g, lgt, gt)
            if sc and sg and gt == ct:
                in_correct = True
            if sc:
                found_c[ct] += 1
            if sg:
                found_g[gt] += 1
            if k < b:
                if c == g and ct == gt:
                    correct_tags += 1
                tokens += 1
            lc, lct, lg, lgt = c, ct, g, gt
    if in_correct:
        correct[lct] += 1
    return correct, found_c, found_g, correct_tags, tokens


@dataclass
class ChunkScores:
    """conlleval's counts and figures (fractions in [0, 1], not percentages)."""

    correct: int
    gold: int
    predicted: int
    correct_tags: int
    tokens: int
    per_type: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # (c, gold, pred)

    @staticmethod
    def prf(c: int, g: int, p: int) -> tuple[float, float, float]:
        """(P, R, F1) = (c/p, c/g, 2PR/(P+R)), each 0 when undefined."""
        prec = c / p if p > 0 else 0.0
        rec = c / g if g > 0 else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
        return prec, rec, f1

    def as_dict(self) -> dict:
        """Metrics dict: ``score`` = F1, precision, recall, f1, accuracy, the counts and
        ``per_type`` {type: {precision, recall, f1, gold, predicted, correct}}."""
        p, r, f = self.prf(self.correct, self.gold, self.predicted)
        per = {}
        for t, (c, g, q) in sorted(self.per_type.items()):
            tp, tr, tf = self.prf(c, g, q)
            per[t] = {"precision": tp, "recall": tr, "f1": tf, "gold": g, "predicted": q,
                      "correct": c}
        return {"score": f, "f1": f, "precision": p, "recall": r,
                "accuracy": self.correct_tags / self.tokens if self.tokens else 0.0,
                "tokens": self.tokens, "gold_chunks": self.gold,
                "predicted_chunks": self.predicted, "correct_chunks": self.correct,
                "per_type": per}


class LabelCodes:
    """Integer codes (conlleval tag code, type id) for label strings, growing on demand."""

    def __init__(self, scheme: str = "conll"):
        self.scheme = scheme
        self.types: dict[str, int] = {"": 0}
        self.other: dict[str, int] = {}
        self.index: dict[str, int] = {}
        self.tag_code: list[int] = []
        self.type_id: list[int] = []

    def code(self, label: str) -> int:
        """The row of ``label`` in :attr:`tag_code` / :attr:`type_id`."""
        k = self.index.get(label)
        if k is None:
            tag, typ = split_label(label)
            if self.scheme == "bioes":
                tag = _to_iob2(tag)
            tc = _SPECIAL.get(tag)
            if tc is None:
                tc = self.other.setdefault(tag, 7 + len(self.other))
            k = len(self.tag_code)
            self.index[label] = k
            self.tag_code.append(tc)
            self.type_id.append(self.types.setdefault(typ, len(self.types)))
        return k

    def encode(self, sentences: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """(tag codes, type ids) of every token, flattened."""
        rows = np.fromiter((self.code(lab) for s in sentences for lab in s), np.int64,
                           count=sum(len(s) for s in sentences))
        return (np.asarray(self.tag_code, np.int64)[rows],
                np.asarray(self.type_id, np.int64)[rows])


def chunk_scores(gold: list[list[str]], predicted: list[list[str]],
                 scheme: str = "auto") -> ChunkScores:
    """conlleval's chunk counts for gold and predicted label sequences (one list per sentence)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    for s, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {s}: {len(g)} gold labels but {len(p)} predicted")
    labels = {lab for s in gold for lab in s} | {lab for s in predicted for lab in s}
    codes = LabelCodes(resolve_scheme(labels, scheme))
    ctag, ctype = codes.encode(gold)
    gtag, gtype = codes.encode(predicted)
    sent_ptr = np.zeros(len(gold) + 1, np.int64)
    np.cumsum([len(s) for s in gold], out=sent_ptr[1:])
    n_types = len(codes.types)
    c, fc, fg, ct, ntok = conll_counts(ctag, ctype, gtag, gtype, sent_ptr, n_types)
    names = list(codes.types)
    per = {names[t]: (int(c[t]), int(fc[t]), int(fg[t])) for t in range(n_types)
           if fc[t] or fg[t]}
    return ChunkScores(int(c.sum()), int(fc.sum()), int(fg.sum()), int(ct), int(ntok), per)


_PLURAL = {"chunk": "chunks", "entity": "entities"}


def format_report(m: dict, prefix: str = "", unit: str = "chunk") -> list[str]:
    """The ``chunk F1: NN.NN (P NN.NN, R NN.NN)`` line, token accuracy and a per-type table;
    ``unit``: what a chunk is called (``"entity"`` for named entities: ``entity F1: …``)."""
    lines = [f"{prefix}{unit} F1: {100 * m['f1']:.2f} (P {100 * m['precision']:.2f}, "
             f"R {100 * m['recall']:.2f})",
             f"{prefix}accuracy: {100 * m['accuracy']:.2f}% ({m['tokens']:,} tokens, "
             f"{m['gold_chunks']:,} {_PLURAL.get(unit, unit + 's')}, "
             f"{m['predicted_chunks']:,} found, "
             f"{m['correct_chunks']:,} correct)"]
    per = m.get("per_type", {})
    if per:
        width = max(4, *(len(t) for t in per))
        lines.append(f"{prefix}{'type':<{width}}  precision  recall      F1   gold  found")
        for t, d in per.items():
            lines.append(f"{prefix}{t or '(none)':<{width}}  {100 * d['precision']:9.2f}  "
                         f"{100 * d['recall']:6.2f}  {100 * d['f1']:6.2f}  {d['gold']:5d}  "
                         f"{d['predicted']:5d}")
    return lines
