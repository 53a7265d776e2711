"""Read a corpus file into ``X, y`` for the estimators, as the command line reads it.

Each loader goes through the task's registry entry (:mod:`demidcd.tasks`): the same reader
(:mod:`demidcd.io`) and the same conversion to the estimator's input (``TaskSpec.xy``) as
``demidcd train``, so ``X, y`` are what the matching estimator's ``fit``, ``predict``,
``score`` and ``metrics`` take, and a bad file raises the same one-line
:class:`~demidcd.errors.InputError` naming the file and line.

=====================  =========================================  ===========================
loader                 X                                          y
=====================  =========================================  ===========================
:func:`load_tagged`    token lists: words, or tuples               tag lists
                       ``(word, attr, ...)`` with ``feature_columns``
:func:`load_dependency`  lists of ``(word, POS)`` or                  head lists (0 = root)
                       ``(word, POS, other POS)``
:func:`load_conll04`   :class:`~demidcd.io.conll04.ERSentence`      ``(entity labels,
                                                                   {(a, b): relation})``
=====================  =========================================  ===========================

>>> from demidcd.api import ChunkTagger
>>> from demidcd.datasets import load_tagged
>>> X, y = load_tagged("conll2000/train.txt", feature_columns=[2])   # (word, POS) tokens
>>> X[0][:2], y[0][:2]
([('Confidence', 'NN'), ('in', 'IN')], ['B-NP', 'B-PP'])
>>> chunker = ChunkTagger(time_limit=60).fit(X, y)
>>> chunker.score(*load_tagged("conll2000/test.txt", feature_columns=[2]))
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

__all__ = ["load_tagged", "load_dependency", "load_conll04", "conll04_labels"]

Column = str | int


def _columns(value: Column | Sequence[Column] | None) -> list[Column]:
    """``feature_columns`` as a list: None → none, one column → a list of one."""
    if value is None:
        return []
    if isinstance(value, str | int):
        return [value]
    return list(value)


def _read(task: str, path: str | os.PathLike[str], labelled: bool,
          derived: Mapping[str, Any] | None = None, **options: Any) -> Any:
    """The task's reader (``TaskSpec.read``) with ``options`` as the command line's data
    options and ``derived`` as what a loaded model would have said about its input
    (:class:`~demidcd.options.DataOptions`)."""
    from .options import DataOptions
    from .tasks import get_task

    values = DataOptions(**options, derived=MappingProxyType(dict(derived or {})))
    return get_task(task).read(os.fspath(path), values, labelled)


def load_tagged(path: str | os.PathLike[str], format: str = "auto", column: Column | None = None,
                feature_columns: Column | Sequence[Column] | None = None,
                encoding: str = "utf-8", max_sentence_length: int = 5000,
                labelled: bool = True, all_columns: bool = False
                ) -> tuple[list[list], list[list[str]] | None]:
    """``(X, y)`` of a tagged file for :class:`~demidcd.api.SequenceTagger`,
    :class:`~demidcd.api.ChunkTagger` or :class:`~demidcd.api.NamedEntityTagger`.

    ``format``: ``"conllu"``, ``"columns"`` (whitespace columns, word first, as CoNLL-2000
    and CoNLL-2002) or ``"auto"`` (``.conllu`` names are CoNLL-U). ``column``: the label
    column, ``"upos"`` (the CoNLL-U default), ``"xpos"`` or a 1-based number (columns: default
    the last). ``feature_columns``: other 1-based columns (or ``"upos"`` / ``"xpos"``) whose
    values go with each word into the feature template; X's tokens are then tuples
    ``(word, value, ...)``, otherwise words. ``labelled=False`` reads no labels (a file to
    predict on) and returns ``y = None``. ``-DOCSTART-`` lines, comments and CoNLL-U multiword
    and empty-node lines are skipped. ``all_columns``: tokens are tuples of every column but the
    label, the word first, as a template's ``%x[r,c]`` numbers them (``template=`` of the
    taggers; :func:`~demidcd.io.tagged.token_columns`).

    >>> X, y = load_tagged("en_ewt-ud-train.conllu", column="xpos")
    >>> X[0][:3], y[0][:3]
    (['Al', '-', 'Zaman'], ['NNP', 'HYPH', 'NNP'])
    >>> X, y = load_tagged("esp.train", feature_columns=2)   # NER: (word, POS) and BIO tags
    >>> X, y = load_tagged("conll2000/train.txt", all_columns=True)   # for template="chunking"
    """
    data = _read("sequence", path, labelled, format=format, column=column,
                 feature_columns=_columns(feature_columns), encoding=encoding,
                 max_sentence_length=max_sentence_length,
                 derived={"column_given": column is not None, "templated": all_columns})
    from .tasks import get_task

    X, y = get_task("sequence").xy(data)
    return X, (y if labelled else None)


def load_dependency(path: str | os.PathLike[str], format: str = "auto", pos_column: str = "upos",
                    second_pos: bool | None = None, encoding: str = "utf-8",
                    max_sentence_length: int = 1000, labelled: bool = True) -> tuple[Any, Any]:
    """``(X, y)`` of a CoNLL-U or CoNLL-X treebank for
    :class:`~demidcd.estimators.dependency.DependencyParser`.

    X's tokens are ``(word, POS)`` with the POS of ``pos_column`` (``"upos"``: CoNLL-U UPOS /
    CoNLL-X CPOSTAG, ``"xpos"``: XPOS / POSTAG), or ``(word, POS, other POS)`` when the other
    POS column is filled throughout the file (``second_pos=None``, as ``demidcd train``), always
    (``True``: an error when it is not filled) or never (``False``). ``y[s][k]`` is the
    ``(head, DEPREL)`` pair of word k+1 (head 0 = the root), or the head alone when the file
    has no DEPRELs (all ``_``); ``labelled=False`` reads no trees and returns ``y = None``.
    ``format``: ``"conllu"``, ``"conllx"`` or ``"auto"`` (``.conllu`` names are CoNLL-U, others
    CoNLL-X).

    >>> X, y = load_dependency("en_ewt-ud-train.conllu")
    >>> X[0][:2], y[0][:2]
    ([('Al', 'PROPN', 'NNP'), ('-', 'PUNCT', 'HYPH')], [(0, 'root'), (3, 'punct')])
    """
    data = _read("dependency", path, labelled, format=format, pos_column=pos_column,
                 encoding=encoding, max_sentence_length=max_sentence_length,
                 derived={"second_pos": second_pos})
    from .tasks import get_task

    X, y = get_task("dependency").xy(data)
    return X, (y if labelled else None)


def conll04_labels(X: Sequence[Any]) -> list[tuple[list[str], dict[tuple[int, int], str]]]:
    """The gold labels that sentences read from a CoNLL04 file carry, in the form
    :meth:`~demidcd.api.EntityRelationExtractor.predict` returns: per sentence, the entity
    labels (entities in token order) and ``{(a, b): relation}`` (no ``NoRel`` entries)."""
    return [(list(s.ent_label), dict(s.relations)) for s in X]


def load_conll04(path: str | os.PathLike[str], encoding: str = "utf-8",
                 max_sentence_length: int = 5000) -> tuple[list[Any], list[Any]]:
    """``(X, y)`` of a CoNLL04 (Roth & Yih 2004) file for
    :class:`~demidcd.api.EntityRelationExtractor`: X the
    :class:`~demidcd.io.conll04.ERSentence` list (words, POS, which tokens are entities), y
    their gold labels (:func:`conll04_labels`).

    >>> X, y = load_conll04("conll04.corp")
    >>> y[10]   # entities 0..2 in token order; entity 1 lives in entity 0
    (['Loc', 'Peop', 'Other'], {(1, 0): 'Live_In'})
    """
    X = _read("entity-relation", path, True, encoding=encoding,
              max_sentence_length=max_sentence_length)
    return X, conll04_labels(X)
