"""Feature templates and feature dicts → feature ids: the featurizers of the chain taggers.

A :class:`TemplateFeaturizer` applies a feature template (:mod:`.template_language`: CRF++
syntax with Wapiti's extensions) to sentences of column tuples; a :class:`DictFeaturizer` maps
sentences of feature dicts. Both give a :class:`TemplateEncoding` (CSR arrays of U and B
feature ids).

**Feature dicts** (python-crfsuite's ``ItemSequence`` rules, as sklearn-crfsuite passes them):
a token is a dict name → value, flattened by :func:`flatten_into` into (string, value) pairs:
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
:meth:`Template.expand`: benchmarks/README.md, "Evidence behind the defaults".)
"""

from __future__ import annotations

import itertools
import math
import numbers
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from ...errors import InputValueError, OptionError
from ...io.shards import PackedStrings, merge_counts, pack_strings
from .features import DEFAULT_MIN_COUNT, EncodedSequences, space_size
from .kept_names import frequency_permutation
from .template_kernels import csr_sorted, dense_ids, gather
from .template_language import Macro, Template, TemplateLine, boundary, tokens_width

TEMPLATE_STATE_VERSION = 1


# ---------------------------------------------------------------------------------------------
# feature dicts
# ---------------------------------------------------------------------------------------------
MAX_FEATURE_VALUE = 1e7
"""The largest |value| a real-valued feature of a feature dict may have (larger ones, like NaN
and ±inf, are refused with a ValueError naming the feature). Why: the learners work with the
squared norms ‖φ(x, y) − φ(x, y')‖² = Σ v² (the DCD step's denominator, the CRF's curvature),
in float64. With |v| ≤ 1e7 a value's square is at most 1e14, so an indicator's 1 beside it is
still resolved to 1e14 · 2.2e-16 ≈ 0.02 (float64's rounding at that size), and a sentence of
10⁵ tokens with a few such values keeps every sum far from float64's 1.8e308; beyond ~1e8 the
indicators vanish from the sums, and from ~1e154 the squares themselves overflow: a value of
1e10 already trained to NaN weights that "converged". Scale such values first (e.g. log1p, or
divide by their range); values well above 1 also slow every learner down (conditioning)."""
MAX_NESTING = 100
"""The deepest nesting of dicts (or lists) inside a feature dict's value (python-crfsuite's
prefixed names ``a:b:c``); deeper is refused (it is no real feature, and it would exhaust
Python's recursion)."""


def _check_value(key: str, f: float) -> None:
    """Refuse a real value that is not finite or exceeds :data:`MAX_FEATURE_VALUE`."""
    if not math.isfinite(f):
        raise ValueError(f"feature {key!r} has the non-finite value {f!r}")
    if abs(f) > MAX_FEATURE_VALUE:
        raise ValueError(f"feature {key!r} has the value {f!r}, larger than "
                         f"{MAX_FEATURE_VALUE:g} in magnitude: scale it (e.g. log1p) first "
                         "(demidcd.tasks.chain.template.MAX_FEATURE_VALUE says why)")


def flatten_into(x: Any, prefix: str, names: list[str], vals: list[float],
                 depth: int = 0) -> None:
    """Append the (name, value) pairs of python-crfsuite's item rules for ``x`` (a token: a
    feature dict or a list of feature names; see the module docstring), each name prefixed by
    ``prefix``, to ``names`` and ``vals``. A real value must be finite and at most
    :data:`MAX_FEATURE_VALUE` in magnitude, the nesting at most :data:`MAX_NESTING` deep
    (``depth``: this call's); else ValueError."""
    if depth > MAX_NESTING:
        raise ValueError(f"feature {prefix.rstrip(':')[:60]!r}...: dicts nested more than "
                         f"{MAX_NESTING} deep")
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
                try:
                    f = float(v)
                except OverflowError:  # an int past float's range
                    f = math.inf
                _check_value(key, f)
                if f != 0.0:
                    names.append(key)
                    vals.append(f)
            elif isinstance(v, dict | list | tuple | set | frozenset):
                flatten_into(v, key + ":", names, vals, depth + 1)
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


# ---------------------------------------------------------------------------------------------
# encodings and ids
# ---------------------------------------------------------------------------------------------
@dataclass
class TemplateEncoding(EncodedSequences):
    """Sentences as CSR arrays of U (emission) and B (label-bigram) feature ids
    (:class:`~.features.EncodedSequences`, with B features always present).

    Token t fires the U features feat_idx[feat_ptr[t]:feat_ptr[t+1]] (sorted, unique) with
    values feat_val[same] (None: all 1), scored with y_t; and the B features
    bfeat_idx[bfeat_ptr[t]:bfeat_ptr[t+1]] (values bfeat_val), scored with the pair
    (y_{t-1}, y_t) — for t the first token of a sentence, y_{t-1} = START (CRF++ and Wapiti
    compute them there too; a chain may ignore them). ``transitions``: the source asks for the
    plain label-bigram weights (a bare ``B`` line; always for dicts).
    """

    transitions: bool = True


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
    """The ids of one feature space: a dictionary (after fit) or hashing mod ``hashing``. A
    dictionary built from packed strings (the set-up in parts) stays packed until its
    strings or its index are asked for."""

    def __init__(self, hashing: int):
        self.hashing = int(hashing)
        self._packed: PackedStrings | None = None  # the dictionary by id, packed
        self._features: list[str] | None = None  # the same, decoded
        self._index: dict[str, int] | None = None

    @property
    def features(self) -> list[str] | None:
        """The feature strings by id (None before fit and when hashing)."""
        if self._features is None and self._packed is not None:
            self._features = self._packed.strings()
        return self._features

    @property
    def index(self) -> dict[str, int] | None:
        """Feature string → id (None before fit and when hashing)."""
        if self._index is None and self.features is not None:
            self._index = dict(zip(self._features, range(len(self._features)), strict=True))
        return self._index

    @property
    def size(self) -> int:
        if self._packed is not None and not self.hashing:
            return len(self._packed)
        return space_size(self.hashing, self.features, "feature space")

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
        return self.adopt_counts(list(seen), np.bincount(feat_idx, minlength=len(seen)),
                                 min_count)

    def adopt_counts(self, names: list[str] | PackedStrings, counts: np.ndarray,
                     min_count: int) -> np.ndarray:
        """:meth:`finalize` from the distinct feature strings ``names`` (a list, or packed:
        then ordered as bytes, :meth:`~demidcd.io.shards.PackedStrings.order`, and kept
        packed) and the number of tokens each fires on (``counts``); returns the map index in
        ``names`` → final id."""
        keep = np.flatnonzero(counts >= min_count)
        kept = names.take(keep) if isinstance(names, PackedStrings) else \
            list(map(names.__getitem__, keep.tolist()))
        by = frequency_permutation(kept, counts[keep])
        self._index = None
        if isinstance(kept, PackedStrings):
            self._packed, self._features = kept.take(by), None
        else:
            self._packed, self._features = None, list(map(kept.__getitem__, by.tolist()))
        remap = np.full(len(names), -1, np.int32)
        remap[keep[by]] = np.arange(by.shape[0], dtype=np.int32)
        return remap

    def state(self, prefix: str) -> dict[str, np.ndarray]:
        if self.hashing:
            return {}
        if self._packed is not None:
            blob, ends = self._packed.blob, self._packed.ends
        else:
            blob, ends = _pack_strings(self.features)
        return {f"{prefix}_strings": blob, f"{prefix}_ends": ends}

    def restore(self, arrays: dict[str, np.ndarray], prefix: str, n: int) -> None:
        """The inverse of :meth:`state`: the index of ``n`` features from a model's arrays."""
        if self.hashing:
            if n != self.hashing:
                raise ValueError(f"{prefix}: size does not match hashing")
            return
        feats = _unpack_strings(arrays[f"{prefix}_strings"], arrays[f"{prefix}_ends"], n)
        self._packed, self._features = None, feats
        self._index = dict(zip(feats, range(n), strict=True))
        if len(self._index) != n:
            raise ValueError(f"{prefix}: duplicate feature strings")


def _remap(ptr: np.ndarray, idx: np.ndarray, val: np.ndarray | None,
           remap: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    new = remap[idx] if idx.shape[0] else idx
    w = val is not None
    p, i, v = csr_sorted(ptr, new, val if w else np.zeros(0, np.float64), w)
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
            p, i, v = csr_sorted(ptr, ids, vals if w else np.zeros(0, np.float64), w)
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

    # -- set-up in parts (demidcd.estimators.parts): count, merge, encode ----------------------
    supports_parts = True

    def count_part(self, tokens: list[list]) -> dict:
        """Stage 1 of a set-up in parts: this part encoded with provisional ids (kept for
        :meth:`encode_part`) and, per space, its feature strings and the number of tokens
        each fires on (no cut-off: it applies to the merged counts)."""
        self._fitted = False
        self._fit_source(tokens)
        seen = None if self.hashing else [{} for _ in range(self.n_spaces)]
        self._part = self._encode(tokens, seen)
        out: dict = {"meta": self._part_meta(), "names": [], "counts": []}
        for sn, idx in zip(seen or (), (self._part.feat_idx, self._part.bfeat_idx),
                           strict=False):
            out["names"].append(pack_strings(list(sn)))
            out["counts"].append(np.bincount(idx, minlength=len(sn)))
        return out

    def _part_meta(self) -> dict:
        return {}

    def _adopt_part_meta(self, metas: list[dict]) -> None:
        pass

    def merge_parts(self, parts: list[dict]) -> list[object]:
        """The merge: this featurizer (part 0's) takes the dictionaries of the summed counts
        (as :meth:`fit_transform` builds them); returns, per part, the maps of its
        provisional ids to the final ones (one per space; None when hashing)."""
        self._adopt_part_meta([p["meta"] for p in parts])
        self._fitted = True
        if self.hashing:
            return [None] * len(parts)
        remaps: list[list[np.ndarray]] = [[] for _ in parts]
        for s, sp in enumerate(self.spaces):
            m = merge_counts([(p["names"][s], p["counts"][s]) for p in parts])
            final = sp.adopt_counts(m.packed, m.counts, self.min_count)
            for k, mk in enumerate(m.maps):
                remaps[k].append(final[mk])
        return remaps

    def encode_part(self, remaps: list[np.ndarray] | None) -> TemplateEncoding:
        """Stage 2: this part's encoding with the merged ids (``remaps``: its part of
        :meth:`merge_parts`)."""
        enc, self._part = self._part, None
        if remaps is not None:
            enc.feat_ptr, enc.feat_idx, enc.feat_val = _remap(enc.feat_ptr, enc.feat_idx,
                                                              enc.feat_val, remaps[0])
            if self.n_spaces > 1:
                enc.bfeat_ptr, enc.bfeat_idx, enc.bfeat_val = _remap(
                    enc.bfeat_ptr, enc.bfeat_idx, enc.bfeat_val, remaps[1])
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

    def _restore_spaces(self, arrays: dict[str, np.ndarray], meta: dict) -> None:
        sizes = [int(x) for x in meta["sizes"]]
        if len(sizes) != self.n_spaces or min(sizes) < 0:
            raise ValueError("bad feature space sizes")
        for k, sp in enumerate(self.spaces):
            sp.restore(arrays, ("feature", "bfeature")[k], sizes[k])
        self._fitted = True

    @staticmethod
    def _check_state(meta: dict, kind: str) -> None:
        if meta.get("kind") != kind:
            raise ValueError(f"not a {kind} state")
        if meta.get("version") != TEMPLATE_STATE_VERSION:
            raise ValueError(f"unsupported {kind} state version {meta.get('version')}")


class TemplateFeaturizer(_SpacesFeaturizer):
    """Maps sentences of column tuples to :class:`TemplateEncoding` through a :class:`Template`.

    ``template``: a :class:`Template`, or a file path or shipped name
    (:meth:`Template.from_name_or_file`).
    ``min_count`` / ``hashing`` as in :class:`~demidcd.tasks.chain.features.SequenceFeaturizer`;
    B features are hashed mod ``bhashing`` (default: ``hashing``; each B weight row has K² entries
    against K for U, so a smaller modulus is often wiser).
    """

    kind = "TemplateFeaturizer"
    n_spaces = 2

    def __init__(self, template: Template | str, min_count: int = DEFAULT_MIN_COUNT,
                 hashing: int = 0, bhashing: int | None = None):
        super().__init__(min_count, hashing)
        if not isinstance(template, Template):
            template = Template.from_name_or_file(template)
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
        n = tokens_width(flat)
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
                gathered[key] = gather(sent_ptr, tt, vm, m.row, len(ext) - 2 * R, R)
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
                    first, key = dense_ids(key)
                    radix = first.shape[0]
                key = key * size + v
                radix *= size
            first, inverse = dense_ids(key)
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

    def _part_meta(self) -> dict:
        return {"n_columns": self.n_columns}

    def _adopt_part_meta(self, metas: list[dict]) -> None:
        widths = {m["n_columns"] for m in metas} - {None}
        if len(widths) > 1:
            raise ValueError(f"tokens have {min(widths)} and {max(widths)} columns")
        self.n_columns = widths.pop() if widths else None

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
        obj._restore_spaces(arrays, meta)
        return obj


class DictFeaturizer(_SpacesFeaturizer):
    """Maps sentences of feature dicts (or lists of feature names) to :class:`TemplateEncoding`
    (U features with values; no B features; ``transitions`` True), by :func:`flatten_into`."""

    kind = "DictFeaturizer"
    n_spaces = 1

    def __init__(self, min_count: int = DEFAULT_MIN_COUNT, hashing: int = 0):
        super().__init__(min_count, hashing)

    def _expand(self, tokens, lookups):
        sent_ptr = _sent_ptr(tokens)
        names: list[str] = []
        num_at: list[int] = []  # positions in names of the values other than 1 …
        num_val: list[float] = []  # … and those values
        ends = [0]
        try:
            self._expand_into(tokens, names, num_at, num_val, ends)
        except (TypeError, ValueError) as e:  # name the token: its sentence and position
            done = len(ends) - 1  # tokens expanded before the bad one
            k = int(np.searchsorted(sent_ptr, done, "right")) - 1
            where = f"X: sentence {k}, token {done - int(sent_ptr[k])}: {e}"
            if isinstance(e, ValueError):  # a value refused: not finite, too large, too deep
                raise InputValueError(where) from None
            raise TypeError(where) from None
        vals = np.ones(len(names), np.float64)
        vals[np.array(num_at, np.int64)] = np.array(num_val, np.float64)
        ids = lookups[0](names)
        return sent_ptr, [(np.array(ends, np.int64), ids, vals)], True

    def _expand_into(self, tokens, names: list[str], num_at: list[int], num_val: list[float],
                     ends: list[int]) -> None:
        """The names (and values other than 1) of every token of ``tokens``, appended, with
        ``ends`` the end of each token's names (:meth:`_expand`)."""
        na = names.append
        for s in tokens:
            for tok in s:
                if tok.__class__ is dict:
                    for k, v in tok.items():  # the common cases inline, the rest in flatten_into
                        c = v.__class__
                        if c is str and k.__class__ is str:
                            na(k + ":" + v)
                        elif c is bool and k.__class__ is str:
                            if v:
                                na(k)
                        elif (c is float or c is int) and k.__class__ is str and \
                                -MAX_FEATURE_VALUE <= v <= MAX_FEATURE_VALUE:
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

    @staticmethod
    def _slow(x, names: list[str], num_at: list[int], num_val: list[float]) -> None:
        """:func:`flatten_into` for what the inline cases of :meth:`_expand` do not cover."""
        nm: list[str] = []
        vl: list[float] = []
        flatten_into(x, "", nm, vl)
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
        obj._restore_spaces(arrays, meta)
        return obj



__all__ = ["DictFeaturizer", "TemplateEncoding", "TemplateFeaturizer", "flatten_into",
           "resolve_template"]


def resolve_template(template: Any) -> Template | None:
    """The ``template`` parameter as a :class:`~demidcd.tasks.chain.template_language.Template`
    (None: the built-in features): a Template, a shipped name (``chunking``, ``pos``, ``ner``)
    or a file path; a template that does not parse raises InputError naming its file and
    line."""
    if template is None or isinstance(template, Template):
        return template
    if isinstance(template, str | os.PathLike):
        return Template.from_name_or_file(os.fspath(template))
    raise OptionError(f"--template must be a file name, a shipped template name or a Template, "
                      f"got {type(template).__name__}")
