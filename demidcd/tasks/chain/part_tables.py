"""The built-in features of a corpus part encoded from numbers alone, once the parts' counts are
merged (:meth:`~demidcd.tasks.chain.features.SequenceFeaturizer.merge_parts`).

A part counted its tokens (:func:`~.feature_counts.base_counts`: its distinct words, their own
feature strings, lower-cased words and attribute values, and n-grams of their ids) and kept its
ids (:class:`~.feature_counts.PartIds`). The merge knows where every counted item went in the
dictionary (:class:`~.feature_counts.KeptPositions`) and the final id of every position (the
frequency order), so it hands each part the final ids of *its* items (:class:`PartTables`):
own-feature strings, ``w<o>=`` features of its lower-cased words, ``a<j>[o]=`` features of its
values, and the kept n-gram rows (kind, a, b, c) over the merged ids of words and values. The
part then fills the arrays of :func:`~.type_tables.assemble_kernel` (the kernel that encodes
with :class:`~.type_tables.TypeTables`) by indexing: no feature string, no dictionary of
strings in the part's process, and the ids of a serial encoding (the n-gram rows are those the
training tokens produce, so every split of a word holding ``|`` that occurs is a row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .feature_counts import BaseCounts, KeptPositions, PartIds, PartMaps
from .type_tables import KINDS_PER_ATTR, assemble_kernel, build_table, known_rows


@dataclass
class PartTables:
    """The final ids of one part's items (−1: not in the dictionary): ``own`` per own-feature
    string, ``ctx`` per lower-cased word and offset (−2, −1, +1, +2), ``lw`` the merged id of
    each lower-cased word (the n-gram rows' word ids), ``bos`` / ``eos`` the ``w<o>=<s>`` /
    ``</s>`` ids; per attribute column ``uni`` (per value and offset −2 … 2) and ``cid`` (the
    merged value ids); ``ngrams``: the kept n-gram rows (kind, a, b, c, id), the same for
    every part."""

    own: np.ndarray
    ctx: np.ndarray
    lw: np.ndarray
    bos: np.ndarray
    eos: np.ndarray
    uni: list[np.ndarray]
    cid: list[np.ndarray]
    ngrams: np.ndarray


def _final(pos: np.ndarray, final: np.ndarray) -> np.ndarray:
    """Positions in the kept names (−1: none) → final ids (−1: none), int32."""
    out = np.full(pos.shape, -1, np.int32)
    hit = pos >= 0
    out[hit] = final[pos[hit]]
    return out


def _ngram_rows(rows: np.ndarray, ids: np.ndarray, kind0: int) -> np.ndarray:
    """The kept n-gram ``rows`` (kind, a, b[, c]) with their final ``ids`` as (kind0 + kind,
    a, b, c, id) rows (c = 0 for bigrams)."""
    sel = np.flatnonzero(ids >= 0)
    out = np.zeros((sel.shape[0], 5), np.int64)
    out[:, 0] = rows[sel, 0] + kind0
    out[:, 1:rows.shape[1]] = rows[sel, 1:]
    out[:, 4] = ids[sel]
    return out


def part_tables(merged: BaseCounts, kept: KeptPositions, final: np.ndarray,
                maps: list[PartMaps]) -> list[PartTables]:
    """Each part's :class:`PartTables` from the merged counts, where their items went
    (``kept``), the final id of each kept position (``final``) and each part's maps."""
    own = _final(kept.own, final)
    ctx = _final(kept.ctx, final)
    blocks = [_ngram_rows(merged.pairs[0], _final(kept.pairs, final), 0)]
    unis = []
    for j, (col, (uni, bi, tri)) in enumerate(zip(merged.columns, kept.columns, strict=True)):
        base = 2 + KINDS_PER_ATTR * j
        blocks.append(_ngram_rows(col.bi[0], _final(bi, final), base))
        blocks.append(_ngram_rows(col.tri[0], _final(tri, final), base + 4))
        unis.append(_final(uni, final))
    ngrams = np.concatenate(blocks)
    return [PartTables(own[m.own], ctx[m.lowers], m.lowers.astype(np.int32), ctx[0].copy(),
                       ctx[1].copy(),
                       [u[v] for u, v in zip(unis, m.values, strict=True)], list(m.values),
                       ngrams) for m in maps]


def encode_part_tokens(sent_ptr: np.ndarray, tok_type: np.ndarray, ids: PartIds,
                       tables: PartTables) -> tuple[np.ndarray, np.ndarray]:
    """(feat_ptr, feat_idx) of a part's tokens (sentences ``sent_ptr``, token t of the part's
    type ``tok_type[t]``) from its ids and tables: what :class:`~.type_tables.TypeTables`
    gives for the same tokens with the merged dictionary."""
    ends, rows = known_rows(tables.own[ids.own_ids] if ids.own_ids.shape[0] else
                            np.zeros(0, np.int32), ids.lens)
    type_ptr = np.concatenate((np.zeros(1, np.int64), ends))
    ctx = np.ascontiguousarray(tables.ctx[ids.low_of_type])
    lw = tables.lw[ids.low_of_type]
    n_attr = len(ids.values)
    offsets = np.cumsum([0] + [u.shape[0] for u in tables.uni])
    attr = np.empty((tok_type.shape[0], n_attr), np.int64)
    pad = np.zeros((max(n_attr, 1), 2), np.int64)
    for j in range(n_attr):
        attr[:, j] = ids.values[j] + offsets[j]
        pad[j] = (offsets[j], offsets[j] + 1)  # (<s> and </s> are each column's values 0, 1)
    uni = np.concatenate(tables.uni) if n_attr else np.zeros((0, 5), np.int32)
    cid = np.concatenate(tables.cid) if n_attr else np.zeros(0, np.int64)
    g = tables.ngrams
    keys, vals, bits = build_table(g[:, 0].copy(), g[:, 1].copy(), g[:, 2].copy(),
                                   g[:, 3].copy(), g[:, 4].astype(np.int32))
    return assemble_kernel(sent_ptr, tok_type, type_ptr, rows, ctx, tables.bos, tables.eos,
                           lw, 0, 1, attr, uni, cid, pad, keys, vals, bits)
