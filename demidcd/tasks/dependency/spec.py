"""The command line's dependency task (:class:`DependencySpec`, registered as ``SPEC``) and the
data helpers it shares with :class:`~demidcd.estimators.dependency.DependencyParser`: sentences
and trees split into columns, the label set and where each label may sit, universal DEPREL
groups, and the maps that fill one POS column from the other.

The spec reads CoNLL-U / CoNLL-X files (HEAD and DEPREL, one root word per sentence) through
:mod:`demidcd.io.dependency`, reports UAS, LAS and LAS with subtypes, keeps given heads with
``predict --force`` and writes the predicted trees back into the file's columns.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ...errors import InputError, InputWarning, OptionError
from ...io.dependency import (
    DEP_FORMATS,
    DepCorpus,
    read_dependency,
    write_dependency,
)
from ...options import DataOptions, OutputOptions
from .. import TaskSpec
from .task import FixedHeadsError, ProjectiveFallback

Sentence = list  # a sentence: a list of (word, POS) pairs
Heads = list  # a sentence's gold or predicted tree: heads, or (head, DEPREL) pairs, of words 1..n


def split_sentences(X: list[Sentence]
                    ) -> tuple[list[list[str]], list[list[str]], list[list[str]] | None]:
    """(words, POS, coarse POS or None) of sentences of (word, POS[, coarse POS]) tuples."""
    words, tags, coarse = [], [], []
    three = bool(X) and bool(X[0]) and isinstance(X[0][0], tuple | list) and len(X[0][0]) >= 3
    for s, sent in enumerate(X):
        if not sent:
            raise OptionError(f"sentence {s} is empty")
        try:
            words.append([str(t[0]) for t in sent])
            tags.append([str(t[1]) for t in sent])
            if three:
                coarse.append([str(t[2]) for t in sent])
        except (IndexError, TypeError):
            raise OptionError(f"sentence {s}: tokens must be (word, POS) or (word, POS, coarse "
                              "POS) tuples, the same kind in every sentence") from None
    return words, tags, (coarse if three else None)


def split_trees(Y: list[Heads]) -> tuple[list[list[int]], list[list[str]] | None]:
    """(heads, DEPRELs or None) of trees given as head lists or as (head, DEPREL) pair lists."""
    pairs = any(bool(y) and isinstance(y[0], tuple | list) for y in Y)
    heads: list[list[int]] = []
    rels: list[list[str]] = []
    for s, y in enumerate(Y):
        try:
            if pairs:
                heads.append([int(h) for h, _ in y])
                rels.append([str(r) for _, r in y])
            else:
                heads.append([int(h) for h in y])
        except (TypeError, ValueError):
            raise OptionError(f"Y[{s}]: give every sentence's tree as heads (ints) or as "
                              "(head, DEPREL) pairs, the same kind in every sentence") from None
    return heads, (rels if pairs else None)


def label_set(heads: list[list[int]], rels: list[list[str]]) -> tuple[list[str], list[int]]:
    """The sorted DEPRELs of a treebank and, per label, where it may sit: 1 on root arcs (seen
    on a word with head 0), 2 on other arcs, 3 both. UD gives ``root`` 1 and every other label
    2. A treebank without any label of a kind (only one-word sentences) allows every label
    there."""
    seen: dict[str, int] = {}
    for hs, rs in zip(heads, rels, strict=True):
        for h, r in zip(hs, rs, strict=True):
            seen[r] = seen.get(r, 0) | (1 if h == 0 else 2)
    labels = sorted(seen)
    arcs = [seen[r] for r in labels]
    for bit in (1, 2):
        if not any(a & bit for a in arcs):
            arcs = [a | bit for a in arcs]
    return labels, arcs


def universal_deprel(deprel: str) -> str:
    """The universal part of a DEPREL: what comes before the first ':' (``nmod:poss`` →
    ``nmod``), the relation the CoNLL 2018 evaluator compares."""
    return deprel.split(":", 1)[0]


def label_groups(labels: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Per label its universal-DEPREL group id (int32) and the groups' index (universal DEPREL
    → id, in order of first appearance in ``labels``)."""
    index: dict[str, int] = {}
    ids = [index.setdefault(universal_deprel(r), len(index)) for r in labels]
    return np.asarray(ids, np.int32), index


def pos_maps(words: list[list[str]], tags: list[list[str]], second: list[list[str]]
             ) -> tuple[dict[str, str], dict[str, str]]:
    """(POS → second POS, second POS → POS) learnt from a corpus with both columns, for
    :func:`fill_pos`. Each maps a tag t to the tag of the other column seen most often with it
    and, under the key ``word + "\t" + t`` (the word lower-cased), a word whose own most
    frequent tag of the other column differs from that (``is``/VBZ → AUX where VBZ → VERB):
    only those exceptions are kept. Ties go to the tag first in sorted order, so the maps
    depend on the counts only."""
    counts: dict[tuple[str, str, str], int] = {}
    for ws, ps, qs in zip(words, tags, second, strict=True):
        for w, p, q in zip(ws, ps, qs, strict=True):
            key = (w.lower(), p, q)
            counts[key] = counts.get(key, 0) + 1

    def most(pairs: dict[tuple[str, str], int]) -> dict[str, str]:
        best: dict[str, tuple[int, str]] = {}
        for (a, b), k in pairs.items():
            old = best.get(a)
            if old is None or k > old[0] or (k == old[0] and b < old[1]):
                best[a] = (k, b)
        return {a: b for a, (_, b) in best.items()}

    def one_way(t: int) -> dict[str, str]:
        by_tag: dict[tuple[str, str], int] = {}
        by_word: dict[tuple[str, str], int] = {}
        for wpq, k in counts.items():
            a, b = wpq[1 + t], wpq[2 - t]
            by_tag[a, b] = by_tag.get((a, b), 0) + k
            by_word[f"{wpq[0]}\t{a}", b] = k
        tag_map = most(by_tag)
        word_map = {key: b for key, b in most(by_word).items()
                    if b != tag_map[key.rsplit("\t", 1)[1]]}
        return dict(sorted({**tag_map, **word_map}.items()))

    return one_way(0), one_way(1)


def fill_pos(words: list[list[str]], given: list[list[str]], pos_map: dict[str, str]
             ) -> list[list[str]]:
    """The other POS column of sentences whose column ``given`` is known, through a map of
    :func:`pos_maps`: per word the tag its (lower-cased) form and given tag map to, else the one
    its given tag maps to, else ``_`` (a tag never seen in training)."""
    out = []
    for ws, ps in zip(words, given, strict=True):
        out.append([pos_map.get(f"{w.lower()}\t{p}") or pos_map.get(p, "_")
                    for w, p in zip(ws, ps, strict=True)])
    return out


def _dep_format(path: str, options: DataOptions) -> str:
    fmt = options.format or "auto"
    if fmt == "auto":
        name = str(path).lower()
        name = name[:-3] if name.endswith(".gz") else name
        return "conllu" if name.endswith(".conllu") or name == "-" else "conllx"
    if fmt not in DEP_FORMATS:
        raise OptionError(f"--task dependency reads --format conllu or conllx, not {fmt}")
    return fmt


class DependencySpec(TaskSpec):
    """First-order labelled dependency parsing of CoNLL-U / CoNLL-X files (HEAD and DEPREL,
    one root word per sentence), scored by UAS and LAS (as the CoNLL 2018 evaluator) and LAS
    with subtypes."""

    name = "dependency"
    help = ("first-order labelled dependency parsing (CoNLL-U / CoNLL-X HEAD and DEPREL), "
            "scored by UAS and LAS")
    max_sentence_length = 1000  # O(n^3) parsing (its cost: length_cost)
    length_cost = "dependency parsing costs O(n^3): about 5-15 s of CPU for 1,000 words, 8x " \
                  "that for 2,000"
    estimator = "demidcd.estimators.dependency:DependencyParser"

    def make_estimator(self, options: DataOptions, common: dict[str, Any]) -> Any:
        return self.estimator_class()(decoder=options.decoder, hashing=options.hashing,
                                      **common)

    def data_options(self, est: Any, options: DataOptions) -> dict[str, Any]:
        return {"pos_column": options.pos_column or "upos"}

    def configure(self, est: Any, options: DataOptions) -> DataOptions:
        """The model's ``--pos-column`` when none is given; ``--decoder`` set on ``est``;
        ``derived``: ``second_pos`` (whether the model reads both POS columns) and
        ``fill_pos`` (whether it learnt to fill an empty one from the other)."""
        opts = getattr(est, "data_options_", {}) or {}
        if options.decoder:
            est.decoder = options.decoder
        derived = {**options.derived, "second_pos": est.second_pos_,
                   "fill_pos": getattr(est, "pos_by_second_", None) is not None}
        pos_column = opts.get("pos_column", "upos") if options.pos_column is None \
            else options.pos_column
        return replace(options, pos_column=pos_column, derived=MappingProxyType(derived))

    def read(self, path: str, options: DataOptions, labelled: bool = True) -> DepCorpus:
        """The file; for a model trained on both POS columns that learnt the map between them
        (``derived["fill_pos"]``), one column may be ``_`` for every word: the estimator fills
        it from the other (:meth:`~demidcd.estimators.dependency.DependencyParser._fill_pos`).
        ``derived["second_pos"]``: read the second POS column (True: it must be filled),
        never (False) or when it is filled throughout the file (None)."""
        fill = bool(options.derived.get("fill_pos", False))
        data = read_dependency(path, _dep_format(path, options), options.pos_column or "upos",
                               encoding=options.encoding, labelled=labelled,
                               max_sentence_length=options.max_sentence_length,
                               missing_pos=fill)
        second = options.derived.get("second_pos")
        if second is False:
            data.other_pos = None
        elif second and data.other_pos is None:
            if not fill:
                raise InputError(path, None, "the model was trained with both POS columns "
                                             "(UPOS and XPOS) but this file leaves the second "
                                             "one empty")
            data.other_pos = [["_"] * len(w) for w in data.words]
        return data

    def xy(self, data: DepCorpus) -> tuple[list[Sentence], list[Heads] | None]:
        if data.other_pos is not None:
            X = [list(zip(w, p, o, strict=True))
                 for w, p, o in zip(data.words, data.pos, data.other_pos, strict=True)]
        else:
            X = [list(zip(w, p, strict=True)) for w, p in zip(data.words, data.pos, strict=True)]
        if not data.labelled:
            return X, None
        if not data.has_deprels:  # DEPREL all "_": an unlabelled treebank
            return X, data.heads
        return X, [list(zip(h, r, strict=True))
                   for h, r in zip(data.heads, data.deprels, strict=True)]

    def describe(self, data: DepCorpus) -> str:
        two = "both POS columns" if data.other_pos is not None else "one POS column"
        return f"{len(data):,} sentences, {data.n_tokens:,} words, {two}"

    def check(self, est: Any, data: DepCorpus) -> list[str]:
        Y = self.xy(data)[1]
        unknown = est.unknown_labels(Y) if Y else {}
        if not unknown:
            return []
        top = ", ".join(sorted(unknown, key=unknown.get, reverse=True)[:5])
        return [f"{sum(unknown.values()):,} words carry DEPRELs the model never saw "
                f"in training ({top}): they count as label errors in LAS with subtypes, and "
                "in LAS when the model knows no DEPREL with the same part before ':'"]

    def report(self, est: Any, data: DepCorpus, prefix: str = "") -> list[str]:
        m = est.metrics(*self.xy(data))
        words = (f"({int(m['words_no_punct']):,} of {int(m['words']):,} words, "
                 f"{len(data):,} sentences)")
        lines = [f"{prefix}UAS: {100 * m['uas']:.2f}",
                 f"{prefix}UAS without punctuation: {100 * m['uas_no_punct']:.2f} {words}"]
        if "las" in m:
            lines += [f"{prefix}LAS: {100 * m['las']:.2f} (universal DEPREL, the part before "
                      "':', as the CoNLL 2018 evaluator)",
                      f"{prefix}LAS without punctuation: {100 * m['las_no_punct']:.2f} {words}",
                      f"{prefix}LAS with subtypes: {100 * m['las_subtypes']:.2f} (the full "
                      "DEPREL)",
                      f"{prefix}LAS with subtypes without punctuation: "
                      f"{100 * m['las_subtypes_no_punct']:.2f} {words}"]
        return lines

    def given(self, est: Any, data: DepCorpus) -> list[list[Any]]:
        """``predict --force``: per word of ``data`` its given head, with its DEPREL when the
        model knows it ((head, DEPREL)), or None: HEAD (column 7) holding an integer in 0..n
        other than the word's own id is kept; ``_``, ``?`` or anything else is free (and so is
        the DEPREL of a word with a free head)."""
        known = set(getattr(est, "labels_", None) or ())
        fixed: list[list[Any]] = []
        for s, words in enumerate(data.words):
            n = len(words)
            rows = [f for f in data.raw[s] if len(f) == 10 and f[0].isdigit() and
                    f[0].isascii()] if data.raw is not None else []
            out: list[Any] = []
            for d, f in enumerate(rows, 1):
                h, r = f[6], f[7]
                if not (h.isdigit() and h.isascii()) or int(h) > n or int(h) == d:
                    out.append(None)
                else:
                    out.append((int(h), r) if r in known else (int(h), None))
            fixed.append(out if len(out) == n else [None] * n)
        return fixed

    def predict(self, est: Any, data: DepCorpus, options: DataOptions,
                output: OutputOptions) -> Any:
        """:class:`Parsed`: ``est.predict`` of ``data`` and the POS tags it used
        (``est.filled_pos``); with ``--force`` the given heads (:meth:`given`) are
        kept: given heads that no tree keeps are an error naming the file and the sentence's
        first line, and a sentence whose given heads no projective tree keeps (Eisner) is
        decoded with Chu-Liu-Edmonds, with one warning line naming the first such sentence."""
        X = self.xy(data)[0]
        pos, other = est.filled_pos(X)
        return Parsed(self._trees(est, data, X, output), pos, other)

    def _trees(self, est: Any, data: DepCorpus, X: list[Sentence], output: OutputOptions
               ) -> list[Heads]:
        if not output.force:
            return est.predict(X)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                trees = est.predict(X, fixed=self.given(est, data))
        except FixedHeadsError as e:
            raise InputError(data.path, data.lines[e.sentence],
                             f"--force: no tree keeps the given heads of the sentence starting "
                             f"on this line: {e.reason}") from None
        for w in caught:
            if not isinstance(w.message, ProjectiveFallback):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
                continue
            first, k = w.message.sentences[0], len(w.message.sentences)
            warnings.warn(InputWarning(
                f"{data.path}:{data.lines[first]}: --force: no projective tree keeps the given "
                "heads of the sentence starting on this line" +
                (f" nor those of {k - 1:,} more" if k > 1 else "") +
                ": decoded with Chu-Liu-Edmonds (non-projective)"), stacklevel=2)
        return trees

    def write(self, path: str, data: DepCorpus, predicted: Any, options: DataOptions) -> None:
        """The trees of ``predicted`` (:class:`Parsed`, or trees alone) written into ``data``'s
        lines, with the POS tags the parser used in a column given as ``_``."""
        pos = other = None
        if isinstance(predicted, Parsed):
            predicted, pos, other = predicted
        labelled = any(bool(t) and isinstance(t[0], tuple) for t in predicted)
        heads = [[h for h, _ in t] for t in predicted] if labelled else predicted
        rels = [[r for _, r in t] for t in predicted] if labelled else None
        write_dependency(path, data, heads, rels, encoding=options.encoding, pos=pos,
                         other_pos=other)


class Parsed(NamedTuple):
    """What ``predict`` of the dependency task gives :meth:`DependencySpec.write`: the trees
    and the POS columns the parser used (the read one, the other one or None), one filled
    from the other when the file left it ``_``."""

    trees: list[Heads]
    pos: list[list[str]]
    other_pos: list[list[str]] | None


SPEC = DependencySpec()
