"""Partially labelled chain data: a token's gold label may be unknown or a set of labels.

In the library a tag list ``Y[s]`` holds, per token, a label (str), ``None`` (unknown: any
label) or a set of labels (set, frozenset, tuple or list of str; one of them is right). The
encoded data (:class:`~.features.EncodedSequences`, then :class:`~.task.SequenceTask`) carries
them, when the corpus has any partial cell, as a CSR over tokens:

    allowed_ptr  int64[n_tokens + 1]   token q admits the labels
    allowed_idx  int32[...]            allowed_idx[allowed_ptr[q]:allowed_ptr[q + 1]]

a known label = one entry, a set = its entries (sorted), an EMPTY range = unknown (any label);
both are None when every token is labelled. The gold id array holds −1 for every token that
is not fully known. The label alphabet (``classes_``) includes every label named in a set.

A tagging y is *consistent* with the annotation when y_q is admitted at every token q; under a
label scheme (IOB2, BIOES: :func:`~.decoding.scheme_transitions`) it must also obey the
scheme. :func:`first_infeasible` finds a sentence whose annotation admits no such tagging.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numba as nb
import numpy as np

PARTIAL_TYPES = (set, frozenset, tuple, list)


class PartialLabels(NamedTuple):
    """What the CRF kernels read of partially labelled data (one argument): the allowed-label
    CSR (``ptr`` int64[n_tok + 1], ``idx`` int32; ``ptr`` empty: every token labelled) and
    the label scheme's rules the consistent taggings obey (``allowed`` bool[K·K], ``first``,
    ``last`` bool[K]; empty: none)."""

    ptr: np.ndarray
    idx: np.ndarray
    allowed: np.ndarray
    first: np.ndarray
    last: np.ndarray


def partial_labels(allowed_ptr: np.ndarray | None, allowed_idx: np.ndarray | None,
                   constraints: tuple | None = None) -> PartialLabels:
    """The :class:`PartialLabels` of a task's ``allowed_ptr`` / ``allowed_idx`` (None: every
    token labelled) and the scheme's ``constraints`` ((allowed K×K, first K, last K) or
    None)."""
    e = np.zeros(0, np.bool_)
    rules = (e, e, e) if constraints is None else tuple(
        np.ascontiguousarray(c, np.bool_).reshape(-1) for c in constraints)
    if allowed_ptr is None:
        return PartialLabels(np.zeros(0, np.int64), np.zeros(0, np.int32), e, e, e)
    return PartialLabels(np.ascontiguousarray(allowed_ptr, np.int64),
                         np.ascontiguousarray(allowed_idx, np.int32), *rules)


def is_known(tag: Any) -> bool:
    """Whether a tag cell is one label (a str)."""
    return isinstance(tag, str)


def has_partial(Y: Iterable[Sequence[Any]]) -> bool:
    """Whether any cell of the tag lists ``Y`` is unknown (None) or a set."""
    kinds = set(map(type, itertools.chain.from_iterable(Y)))  # (C loops: no frame per cell)
    return not all(issubclass(k, str) for k in kinds)


def label_names(Y: Iterable[Sequence[Any]]) -> set[str]:
    """Every label named in ``Y``: the known labels and the members of every set."""
    try:
        cells = set(itertools.chain.from_iterable(Y))  # (fully labelled data: just this)
        if all(isinstance(t, str) for t in cells):
            return cells
    except TypeError:  # a mutable set or a list among the cells
        pass
    out: set[str] = set()
    for s in Y:
        for t in s:
            if isinstance(t, str):
                out.add(t)
            elif t is not None:
                out.update(t)
    return out


def partial_counts(Y: Iterable[Sequence[Any]]) -> tuple[int, int]:
    """(tokens whose label is unknown, tokens whose label is a set of two or more)."""
    unknown = sets = 0
    for s in Y:
        for t in s:
            if t is None:
                unknown += 1
            elif not isinstance(t, str):
                if len(set(t)) > 1:
                    sets += 1
    return unknown, sets


def check_cell(tag: Any, where: str) -> None:
    """Raise TypeError unless ``tag`` is a label, None, or a non-empty set of labels."""
    if tag is None or isinstance(tag, str):
        return
    if isinstance(tag, PARTIAL_TYPES) and len(tag) > 0 and all(isinstance(x, str)
                                                                 for x in tag):
        return
    raise TypeError(f"{where}: a tag is a label (str), None (unknown) or a non-empty set of "
                    f"labels, got {tag!r}")


def encode_partial(Y: Sequence[Sequence[Any]], classes: Sequence[str], n_tokens: int
                   ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(gold int32[n_tokens], allowed_ptr, allowed_idx) of ``Y`` over ``classes``: gold holds a
    known label's id (−1: a label not in ``classes``, or a token that is not fully known); the
    CSR as the module docstring says (None, None when every token is labelled; a set of one
    label is that label). A set member not in ``classes`` raises ValueError."""
    index = {t: k for k, t in enumerate(classes)}
    flat = itertools.chain.from_iterable(Y)
    if not has_partial(Y):
        return np.fromiter(map(index.get, flat, itertools.repeat(-1)), np.int32,
                           count=n_tokens), None, None
    gold = np.full(n_tokens, -1, np.int32)
    ptr = np.zeros(n_tokens + 1, np.int64)
    idx: list[int] = []
    for q, t in enumerate(flat):
        if isinstance(t, str):
            k = index.get(t, -1)
            gold[q] = k
            idx.append(k)
        elif t is not None:
            ks = sorted({index[x] if x in index else _missing(x) for x in t})
            if len(ks) == 1:
                gold[q] = ks[0]
            idx.extend(ks)
        ptr[q + 1] = len(idx)
    return gold, ptr, np.array(idx, np.int32)


def _missing(label: str) -> int:
    raise ValueError(f"label {label!r} of a set is not a known label")


@nb.njit(cache=True, nogil=True)
def first_infeasible_kernel(sent_ptr, allowed_ptr, allowed_idx, K, allowed, first, last):
    """The first token (global index) at which no tagging of its sentence consistent with the
    allowed labels (empty range: any) and obeying the transitions (allowed K·K, first K, last
    K; empty: all allowed) reaches; the sentence's last token when none can end there; −1 when
    every sentence admits a tagging. Forward reachability, O(n·K²) per sentence; sentences
    whose every token has one label are skipped (gold data is taken as given)."""
    free = allowed.shape[0] == 0
    reach = np.zeros(K, np.bool_)
    nxt = np.zeros(K, np.bool_)
    mask = np.zeros(K, np.bool_)
    for s in range(sent_ptr.shape[0] - 1):
        a, b = sent_ptr[s], sent_ptr[s + 1]
        partial = False
        for q in range(a, b):
            if allowed_ptr[q + 1] - allowed_ptr[q] != 1:
                partial = True
                break
        if not partial:
            continue
        for q in range(a, b):
            lo, hi = allowed_ptr[q], allowed_ptr[q + 1]
            if hi == lo:
                mask[:] = True
            else:
                mask[:] = False
                for p in range(lo, hi):
                    mask[allowed_idx[p]] = True
            any_ = False
            for k in range(K):
                if q == a:
                    ok = mask[k] and (free or first[k])
                else:
                    ok = False
                    if mask[k]:
                        for j in range(K):
                            if reach[j] and (free or allowed[j * K + k]):
                                ok = True
                                break
                nxt[k] = ok
                any_ = any_ or ok
            if not any_:
                return q
            reach[:] = nxt
        end_ok = False
        for k in range(K):
            if reach[k] and (free or last[k]):
                end_ok = True
        if not end_ok:
            return b - 1
    return -1


def first_infeasible(sent_ptr: np.ndarray, allowed_ptr: np.ndarray, allowed_idx: np.ndarray,
                     K: int, constraints: tuple | None) -> int:
    """:func:`first_infeasible_kernel` with ``constraints`` (allowed K×K, first K, last K
    booleans, or None: every transition)."""
    if constraints is None:
        e = np.zeros(0, np.bool_)
        allowed = first = last = e
    else:
        allowed, first, last = (np.ascontiguousarray(c, np.bool_).reshape(-1)
                                for c in constraints)
    return int(first_infeasible_kernel(np.ascontiguousarray(sent_ptr, np.int64),
                                       allowed_ptr, allowed_idx, int(K), allowed, first, last))


def locate(sent_ptr: np.ndarray, q: int) -> tuple[int, int]:
    """(sentence, token within it) of global token ``q``."""
    s = int(np.searchsorted(sent_ptr, q, side="right")) - 1
    return s, int(q - sent_ptr[s])


def infeasible_message(tags: Sequence[Any], t: int, scheme: str | None) -> str:
    """What is wrong at token ``t`` of a sentence with tag cells ``tags``."""
    cell = tags[t]
    shown = "?" if cell is None else cell if isinstance(cell, str) else "|".join(sorted(cell))
    rule = f"the {scheme.upper()} scheme" if scheme else "the labels"
    return (f"no tagging of this sentence is consistent with its labels and obeys {rule} "
            f"at the cell {shown!r} (e.g. I-X only after B-X or I-X): widen the set or fix the "
            "labels before it")


def check_annotation(enc: Any, Y: Sequence[Sequence[Any]], K: int, scheme: str | None,
                     rules: tuple | None) -> None:
    """Every sentence of the encoded training data ``enc`` (its allowed_* set) must admit a
    tagging consistent with its cells ``Y`` that obeys ``rules`` (the ``scheme``'s, or None);
    else a :class:`~demidcd.errors.PartialLabelError` naming the sentence and token. Sets
    ``enc.label_rules`` to ``rules``."""
    from ...errors import PartialLabelError

    q = first_infeasible(enc.sent_ptr, enc.allowed_ptr, enc.allowed_idx, K, rules)
    if q >= 0:
        s, t = locate(enc.sent_ptr, q)
        raise PartialLabelError(s, t, infeasible_message(Y[s], t, scheme))
    enc.label_rules = rules


def partial_seen_pairs(feat_ptr: np.ndarray, feat_idx: np.ndarray, allowed_ptr: np.ndarray,
                       allowed_idx: np.ndarray, n_obs: int,
                       n_tags: int) -> tuple[np.ndarray, np.ndarray]:
    """The seen (feature, label) pairs of partially labelled data: those of the known tokens,
    and of a set token with each of its labels (an unknown token adds none), as
    :func:`~.records.seen_pairs` lists them."""
    from .records import seen_pairs_rows

    n = allowed_ptr[1:] - allowed_ptr[:-1]
    tok = np.repeat(np.arange(n.shape[0], dtype=np.int64), n)  # one row per admitted label
    lab = allowed_idx.astype(np.int32)
    keep = lab >= 0
    tok, lab = tok[keep], lab[keep]
    lens = feat_ptr[tok + 1] - feat_ptr[tok]
    ptr = np.zeros(tok.shape[0] + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    src = np.repeat(feat_ptr[tok] - ptr[:-1], lens) + np.arange(ptr[-1], dtype=np.int64)
    return seen_pairs_rows(ptr, np.ascontiguousarray(feat_idx[src], np.int32), lab, n_obs,
                           n_tags)
