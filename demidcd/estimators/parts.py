"""A sequence tagger's set-up (reading, features, encoding) in ``n`` processes, into the one
feature space a serial set-up builds.

:func:`prepare_fit_parts` is :meth:`~.sequence.SequenceTagger.prepare_fit` over a training
set given in parts (``read(k)`` → the sentences and tags of part k, e.g. a byte range of the
file: :func:`demidcd.io.shards.byte_ranges`), the parts in order making the whole training
set. In the stages of :func:`demidcd.parallel.forked.fork_stages`:

    1. process k reads part k, checks it, and counts its features and labels (the
       featurizer's ``count_part``: templates and feature dicts count every feature string,
       no cut-off; the built-in features count the part's words, their own feature strings
       and n-grams of word ids, :class:`~demidcd.tasks.chain.feature_counts.BaseCounts`, and
       make no other string);
    2. here: the counts merged by sum (:func:`demidcd.io.shards.merge_counts` for strings),
       the cut-off ``min_count`` applied to the sums, the ids given by decreasing count then
       string, the labels sorted — exactly the dictionary and labels of the serial set-up,
       since both depend only on the whole corpus' counts;
    3. process k encodes part k with those ids (``encode_part``: the built-in features from
       the final ids of its own items alone, :mod:`demidcd.tasks.chain.part_tables`) and its
       tags; the parts' arrays are concatenated here in order.

A token's feature ids depend only on its sentence and the dictionary, so the encoding is the
serial one array for array (tests/test_setup_parts.py checks ids and, trained with one
process, the weights bit for bit). Only counts, the dictionary and the encoded arrays travel
between processes, never an object per token.

The chunkers' label-scheme check reads per-part counts (``_label_summary``: chunks, and those
opened by I-X), summed. Partially labelled parts (unknown or set cells) carry the serial
set-up's admitted-label CSR of their tokens (:func:`~demidcd.tasks.chain.partial.
encode_partial` over the merged labels, which hold every set's members), concatenated here
(:func:`concat_allowed`) and checked as the serial set-up checks them. What it does not take
(:class:`PartsUnsupported`, the caller then sets up serially): a resume or warm start (their
vocabulary is the saved model's), the ``ner`` built-in template (word clusters and document
context over the whole text).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..parallel.forked import fork_stages
from ..tasks.chain.partial import encode_partial, has_partial, partial_counts
from .base import check_sentences, check_tags, token_kind

__all__ = ["PARTS_MIN_TOKENS", "PartsUnsupported", "PreparedFit", "concat_allowed",
           "concat_encoded",
           "parts_supported", "prepare_fit_parts", "token_slices"]


PARTS_MIN_TOKENS = 50_000
"""The fewest training tokens a library ``fit`` sets up in parts (below, the processes' start
costs more than the parts save)."""


def token_slices(X: list[list], n: int, min_tokens: int = 0) -> list[int] | None:
    """Sentence indices ``[0, c_1, …, len(X)]`` cutting X into at most ``n`` slices of about
    equal tokens, none empty; None when X holds fewer than ``min_tokens`` tokens or cannot be
    cut in two."""
    lens = np.fromiter(map(len, X), np.int64, count=len(X))
    total = int(lens.sum())
    if total < max(min_tokens, 1) or len(X) < 2:
        return None
    ends = np.cumsum(lens)
    cuts = [0]
    for k in range(1, n):
        c = int(np.searchsorted(ends, total * k / n, "left")) + 1
        if cuts[-1] < c < len(X):
            cuts.append(c)
    cuts.append(len(X))
    return cuts if len(cuts) > 2 else None


@dataclass
class PreparedFit:
    """What :meth:`SequenceTagger.prepare_fit` hands to :meth:`SequenceTagger.fit_prepared`:
    the featurizer's state (arrays, metadata: as the model file holds it), the labels, the
    kind of features (for the default C), the encoded training sentences and their flat tag
    ids, the seen pairs (or None), the encoded dev sentences and their tags (or None)."""

    featurizer: tuple[dict[str, np.ndarray], dict] | None
    classes: list[str] | None
    feature_kind: str | None
    train: Any
    y: np.ndarray | None
    seen_pairs: tuple[np.ndarray, np.ndarray] | None
    dev: Any = None
    gold: list[list[str]] | None = None


class PartsUnsupported(Exception):
    """This estimator or data cannot be set up in parts (module docstring)."""


def parts_supported(est: Any) -> bool:
    """Whether ``est`` (a sequence tagger, before fit) can be set up in parts, as far as its
    parameters tell (the kind of tokens is only known once read)."""
    if getattr(est, "resume", None) is not None or getattr(est, "init", None) is not None:
        return False
    if not hasattr(est, "_label_summary"):  # (a sequence tagger's hooks)
        return False
    return getattr(est, "_template", "base") == "base" or est.template is not None


def warm_builtin_parts() -> None:
    """Load the built-in features' set-up kernels (count, merge, encode, seen pairs) on two
    sentences here, before the parts fork: they then share this process's loaded code instead
    of each loading its own copy."""
    from ..tasks.chain.features import SequenceFeaturizer
    from ..tasks.chain.records import seen_pairs

    f = SequenceFeaturizer(1, 0, "base")
    merged = SequenceFeaturizer(1, 0, "base").merge_parts([f.count_part([["a", "b", "c"],
                                                                         ["b", "d"]])])
    enc = f.encode_part(merged[0])
    seen_pairs(enc, np.zeros(enc.n_tokens, np.int32), int(enc.feat_idx.max()) + 1, 1)


def concat_encoded(encs: list[Any]) -> Any:
    """The encodings of consecutive parts as one (same class; pointers offset, values filled
    with 1 where a part has none and another has some)."""
    first = encs[0]
    if len(encs) == 1:
        return first

    def ptrs(name: str) -> np.ndarray:
        out, off = [np.zeros(1, np.int64)], 0
        for e in encs:
            p = getattr(e, name)
            out.append(p[1:] + off)
            off += int(p[-1])
        return np.concatenate(out)

    def cat(name: str, like: str) -> np.ndarray | None:
        if all(getattr(e, name) is None for e in encs):
            return None
        parts = []
        for e in encs:
            v = getattr(e, name)
            parts.append(v if v is not None else np.ones(getattr(e, like).shape[0], np.float64))
        return np.concatenate(parts)

    fields = {"sent_ptr": ptrs("sent_ptr"), "feat_ptr": ptrs("feat_ptr"),
              "feat_idx": np.concatenate([e.feat_idx for e in encs]),
              "feat_val": cat("feat_val", "feat_idx")}
    if first.bfeat_ptr is not None:
        fields.update(bfeat_ptr=ptrs("bfeat_ptr"),
                      bfeat_idx=np.concatenate([e.bfeat_idx for e in encs]),
                      bfeat_val=cat("bfeat_val", "bfeat_idx"))
    return dataclasses.replace(first, **fields)


def _label_counts(Y: list[list]) -> Counter:
    """The labels of a part's tag cells and their counts as one label: a set's members are
    counted 0 times (in the alphabet, as :func:`~demidcd.tasks.chain.partial.label_names`
    has them), an unknown cell not at all."""
    if not has_partial(Y):
        return Counter(itertools.chain.from_iterable(Y))
    out: Counter = Counter()
    for s in Y:
        for t in s:
            if isinstance(t, str):
                out[t] += 1
            elif t is not None:
                for x in t:
                    out[x] += 0
    return out


def concat_allowed(parts: list[tuple[tuple[Any, Any], np.ndarray]]
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The admitted-label CSR (allowed_ptr int64, allowed_idx int32) of consecutive parts,
    each given as ((allowed_ptr, allowed_idx) or (None, None) when fully labelled, its gold
    ids): a fully labelled part admits its gold label at each token; (None, None) when every
    part is fully labelled (as :func:`~demidcd.tasks.chain.partial.encode_partial`)."""
    if all(a[0] is None for a, _ in parts):
        return None, None
    ptrs, idxs, off = [np.zeros(1, np.int64)], [], 0
    for (ap, ai), y in parts:
        if ap is None:
            ap, ai = np.arange(y.shape[0] + 1, dtype=np.int64), y
        ptrs.append(ap[1:] + off)
        idxs.append(np.asarray(ai, np.int32))
        off += int(ap[-1])
    return np.concatenate(ptrs), np.concatenate(idxs)


class _Cells:
    """The tag cells of sentence s rebuilt from the encoded admitted labels (a label, None
    or a set), for the message of a sentence that admits no tagging."""

    def __init__(self, enc: Any, classes: list[str]):
        self.enc, self.classes = enc, classes

    def __getitem__(self, s: int) -> list:
        e, out = self.enc, []
        for q in range(int(e.sent_ptr[s]), int(e.sent_ptr[s + 1])):
            ks = e.allowed_idx[e.allowed_ptr[q]:e.allowed_ptr[q + 1]]
            out.append(None if ks.size == 0 else self.classes[ks[0]] if ks.size == 1
                       else {self.classes[k] for k in ks})
        return out


def prepare_fit_parts(est: Any, read: Callable[[int], tuple[list, list]], n: int,
                      X_dev: list[list] | None = None, Y_dev: list[list[str]] | None = None,
                      on_read: Callable[[list[dict]], None] | None = None) -> Any:
    """``est.prepare_fit`` of the training set read in ``n`` parts (module docstring);
    ``on_read(summaries)`` is called here once every part is read (each: ``n_sentences``,
    ``labels`` (a Counter)). Raises :class:`PartsUnsupported` before any work when ``est``
    cannot, and after the reading when the tokens cannot (the caller sets up serially)."""
    if not parts_supported(est):
        raise PartsUnsupported(type(est).__name__)
    est._begin_fit(None)  # bad options fail before any work
    est._weights()
    t0 = est.__dict__["_fit_t0"]
    local: dict[int, dict[str, Any]] = {}  # part k's from stage 1 to stage 2 (its process)
    clock = {"start": time.perf_counter()}

    def first(k: int) -> dict:
        c0 = time.process_time()
        X, Y = read(k)
        X = check_sentences(X, dicts=True)
        Y = check_tags(X, Y, partial=True)
        kind = token_kind(X) if any(len(s) for s in X) else None
        f = est._new_featurizer(kind or "columns")
        if not getattr(f, "supports_parts", False):
            raise PartsUnsupported(type(f).__name__)
        local[k] = {"Y": Y, "f": f}
        labels = _label_counts(Y)
        out = {"kind": kind, "labels": labels, "n_sentences": len(X),
               "n_tokens": sum(map(len, Y)),
               "partial": partial_counts(Y) if has_partial(Y) else (0, 0),
               "label_summary": est._label_summary(Y), "counts": f.count_part(X)}
        out["cpu"] = time.process_time() - c0
        return out

    def merge(parts: list[dict]) -> list[Any]:
        clock["counted"] = time.perf_counter()
        c0 = time.process_time()
        clock["cpu_read"] = [p["cpu"] for p in parts]
        kinds = {p["kind"] for p in parts} - {None}
        if len(kinds) > 1:
            raise PartsUnsupported("tokens of several kinds")
        if on_read is not None:
            on_read(parts)
        kind = kinds.pop() if kinds else "columns"
        if parts[0]["kind"] != kind:  # (part 0's featurizer is the one that merges)
            raise PartsUnsupported("an empty first part")
        labels: Counter = Counter()
        for p in parts:
            labels.update(p["labels"])
        if not labels:
            from ..errors import OptionError

            raise OptionError("cannot fit on an empty data set")
        est._check_label_summaries(set(labels), [p["label_summary"] for p in parts])
        feature_kind = "dict" if kind == "dict" else None
        est._begin_fit(feature_kind)
        est.__dict__["_fit_t0"] = t0  # (the set-up started before the reading)
        for attr in ("coef_", "result_", "seen_pairs_"):
            est.__dict__.pop(attr, None)
        classes = sorted(labels)
        est.classes_ = classes
        f = local[0]["f"]
        payloads = f.merge_parts([p["counts"] for p in parts])
        est.featurizer_ = f
        local[0]["kind"] = feature_kind
        clock["merged"] = time.perf_counter()
        clock["cpu_merge"] = time.process_time() - c0
        return [(payload, classes) for payload in payloads]

    def second(k: int, got: tuple) -> tuple[Any, np.ndarray, float]:
        c0 = time.process_time()
        payload, classes = got
        enc = local[k]["f"].encode_part(payload)
        Y = local[k].pop("Y")
        if has_partial(Y):  # the serial set-up's admitted-label CSR, of this part's tokens
            y, ap, ai = encode_partial(Y, classes, enc.n_tokens)
        else:
            index = {t: j for j, t in enumerate(classes)}
            y = np.fromiter(map(index.__getitem__, itertools.chain.from_iterable(Y)),
                            np.int32, count=enc.n_tokens)
            ap = ai = None
        del Y
        return enc, y, (ap, ai), time.process_time() - c0

    if n > 1 and est.template is None and getattr(est, "_template", "base") == "base":
        warm_builtin_parts()
    out = fork_stages(n, first, merge, second)
    c_end = time.process_time()
    enc = concat_encoded([e for e, _, _, _ in out])
    y = np.concatenate([y for _, y, _, _ in out])
    allowed = concat_allowed([(a, y_k) for _, y_k, a, _ in out])
    cpu_encode = [c for _, _, _, c in out]
    del out
    est.n_features_ = est.featurizer_.n_features
    est.n_bfeatures_ = est._n_bfeatures
    enc.allowed_ptr, enc.allowed_idx = allowed
    if enc.allowed_ptr is not None:  # (a sentence that admits no tagging: the serial error)
        est._check_partial(enc, _Cells(enc, est.classes_))
    est._fit_pairs(enc, y)
    dev = gold = None
    if X_dev is not None and Y_dev is not None:
        X_dev = check_sentences(X_dev, "X_dev", dicts=True)
        Y_dev = check_tags(X_dev, Y_dev, "Y_dev")
        dev = est._encode(X_dev)
        gold = [list(s) for s in Y_dev]
    done = time.perf_counter()

    def cpu(xs: list[float]) -> str:
        return ", ".join(f"{x:.2f}" for x in xs)

    est._say()(f"set-up in {n} process{'es' if n > 1 else ''}: read and counted in "
               f"{clock['counted'] - clock['start']:.1f} s (CPU s per part: "
               f"{cpu(clock['cpu_read'])}), merged in "
               f"{clock['merged'] - clock['counted']:.1f} s (CPU {clock['cpu_merge']:.2f} s), "
               f"encoded in {done - clock['merged']:.1f} s (CPU s per part: "
               f"{cpu(cpu_encode)}; then {time.process_time() - c_end:.2f} s here)")
    return PreparedFit(est.featurizer_.state(), list(est.classes_), local[0]["kind"], enc, y,
                       getattr(est, "seen_pairs_", None), dev, gold)
