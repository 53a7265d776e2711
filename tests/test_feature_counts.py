"""The dictionary of the built-in features counted per word type and per n-gram
(:mod:`demidcd.tasks.chain.feature_counts`) is the one of counting every token's feature strings:
random sentences whose words and attribute values hold ``|``, ``<s>``, case variants."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.tasks.chain.feature_counts import (
    _summed_rows,
    base_counts,
    kept_features,
    merge_base_counts,
)
from demidcd.tasks.chain.features import SequenceFeaturizer, _types, split_attributes
from demidcd.tasks.chain.kept_names import KeptNames, frequency_order, frequency_permutation
from demidcd.tasks.chain.part_tables import encode_part_tokens, part_tables

WORDS = ["the", "The", "THE", "a|b", "A|B", "a", "b|c", "b", "c", "|", "||", "<s>", "</s>",
         "<S>", "New-York", "3.14", "café", "CAFÉ", "Émile", "x", "-", "A1"]
VALUES = ["N", "V", "a|b", "a", "b", "b|c", "c", "|", "<s>", "</s>", "P"]


def _shape(w: str) -> str:
    return "".join("X" if c.isupper() else "x" if c.islower() else "d" if c.isdigit() else c
                   for c in w)


def _token_features(words: list[str], cols: list[list[str]], t: int) -> set[str]:
    """Every feature string of token t, written out from the template's description."""
    w, lw, n = words[t], words[t].lower(), len(words)
    sh = _shape(w)
    f = {"b", "w=" + w, "lw=" + lw, "sh=" + sh,
         "csh=" + "".join(c for i, c in enumerate(sh) if i == 0 or sh[i - 1] != c)}
    f |= {f"p{k}={w[:k]}" for k in range(1, min(4, len(w)) + 1)}
    f |= {f"s{k}={w[-k:]}" for k in range(1, min(4, len(w)) + 1)}
    f |= {name for name, on in [("cap", w[:1].isupper()), ("hyph", "-" in w),
                                ("dig", any(c.isdigit() for c in w)), ("allcap", w.isupper())]
          if on}

    def low(u: int) -> str:
        return "<s>" if u < 0 else "</s>" if u >= n else words[u].lower()

    f |= {f"w{o:+d}={low(t + o)}" for o in (-2, -1, 1, 2)}
    f |= {f"b-1={low(t - 1)}|{lw}", f"b+1={lw}|{low(t + 1)}"}
    for j, col in enumerate(cols):
        def v(u: int, col=col) -> str:
            return "<s>" if u < 0 else "</s>" if u >= n else col[u]

        f |= {f"a{j}[{o}]={v(t + o)}" for o in range(-2, 3)}
        f |= {f"a{j}[{o}|{o + 1}]={v(t + o)}|{v(t + o + 1)}" for o in range(-2, 2)}
        f |= {f"a{j}[{o}|{o + 1}|{o + 2}]={v(t + o)}|{v(t + o + 1)}|{v(t + o + 2)}"
              for o in range(-2, 1)}
    return f


def _sentences(seed: int, n_attr: int) -> tuple[list[list], list[list[set[str]]]]:
    """Random sentences (tokens as the featurizer takes them) and every token's features."""
    rng = random.Random(seed)
    X, feats = [], []
    for _ in range(rng.randint(60, 120)):
        m = rng.choice([0, 1, 1, 2, 3, 5, 8])
        words = [rng.choice(WORDS) for _ in range(m)]
        cols = [[rng.choice(VALUES) for _ in range(m)] for _ in range(n_attr)]
        X.append([(w, *(c[t] for c in cols)) for t, w in enumerate(words)] if n_attr
                 else words)
        feats.append([_token_features(words, cols, t) for t in range(m)])
    return X, feats


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_attr", [0, 1, 2])
@pytest.mark.parametrize("min_count", [1, 2, 4])
def test_dictionary_and_encoding_match_counting_every_token(seed, n_attr, min_count):
    X, feats = _sentences(seed, n_attr)
    counts = Counter(f for sent in feats for tok in sent for f in tok)
    expect = sorted((f for f, c in counts.items() if c >= min_count),
                    key=lambda f: (-counts[f], f))
    fz = SequenceFeaturizer(min_count=min_count).fit(X)
    assert fz.features == expect
    enc = fz.transform(X)
    index = {f: i for i, f in enumerate(expect)}
    rows = [sorted(index[f] for f in tok if f in index) for sent in feats for tok in sent]
    assert enc.feat_ptr.tolist() == np.cumsum([0] + [len(r) for r in rows]).tolist()
    assert enc.feat_idx.tolist() == [i for r in rows for i in r]


def test_frequency_order_breaks_ties_by_string():
    names = ["b", "a", "c|d", "é", "A", "c"]
    counts = np.array([2, 2, 5, 2, 1, 5])
    assert frequency_order(names, counts) == ["c", "c|d", "a", "b", "é", "A"]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_attr", [0, 2])
@pytest.mark.parametrize("n_parts", [2, 3, 5])
def test_parts_counts_merged_give_the_whole_corpus_dictionary_and_encoding(seed, n_attr,
                                                                           n_parts):
    """A set-up in parts counts each part (:func:`base_counts`, no feature string but the
    words' own) and merges: the counts, and so the kept features, are the whole corpus', and
    each part encoded from numbers alone (:mod:`~demidcd.tasks.chain.part_tables`) gets the
    serial encoding's rows (words and values holding ``|``, ``<s>``, case variants; parts may
    be empty)."""
    X, feats = _sentences(seed, n_attr)
    counts = Counter(f for sent in feats for tok in sent for f in tok)
    fz = SequenceFeaturizer()
    cuts = sorted(random.Random(seed).choices(range(len(X) + 1), k=n_parts - 1))
    cuts = [0, *cuts, len(X)]
    parts, typed = [], []
    for a, b in zip(cuts, cuts[1:], strict=False):
        words, attrs, _ = split_attributes(X[a:b]) if n_attr else (X[a:b], None, 0)
        typed.append(_types(words))
        parts.append(base_counts(*typed[-1], attrs, n_attr, fz._word_features))
    merged, maps = merge_base_counts([c for c, _ in parts])
    for min_count in (1, 2, 4):
        packed, got, kept = kept_features(merged, min_count)
        names = packed.strings()
        order = packed.permutation(got)
        assert order.tolist() == frequency_permutation(names, got).tolist()
        assert packed.joined(order).tobytes().decode() == "\n".join(frequency_order(names, got))
        assert len(set(names)) == len(names)
        assert dict(zip(names, got.tolist(), strict=True)) == \
            {f: c for f, c in counts.items() if c >= min_count}
        serial = SequenceFeaturizer(min_count=min_count).fit(X)
        final = np.full(len(names), -1, np.int64)
        index = {f: i for i, f in enumerate(serial.features)}
        final[:] = [index[f] for f in names]
        whole = serial.transform(X)
        for (a, b), (sent_ptr, tok_type, _), (_, ids), tables in zip(
                zip(cuts, cuts[1:], strict=False), typed, parts,
                part_tables(merged, kept, final, maps), strict=True):
            ptr, idx = encode_part_tokens(sent_ptr, tok_type, ids, tables)
            t0, t1 = whole.sent_ptr[a], whole.sent_ptr[b]
            assert ptr.tolist() == (whole.feat_ptr[t0:t1 + 1] - whole.feat_ptr[t0]).tolist()
            assert idx.tolist() == whole.feat_idx[whole.feat_ptr[t0]:whole.feat_ptr[t1]].tolist()


@pytest.mark.parametrize("width", [3, 4])
@pytest.mark.parametrize("n_parts", [1, 3, 17])
def test_summed_rows_of_parts_against_a_counter(width, n_parts):
    """The merge of the parts' n-gram rows (ids mapped, counts summed) by int64 keys (a k-way
    merge of the parts' sorted keys, some parts empty) and, where a key would not fit, by
    rows: both against a Counter."""
    rng = np.random.default_rng(width + n_parts)
    grams, maps, expect = [], [], Counter()
    for k in range(n_parts):
        n_local = int(rng.integers(3, 9))
        ids = rng.permutation(12)[:n_local]  # the part's values among the merged 12
        m = 0 if k % 5 == 1 else int(rng.integers(1, 60))
        rows = np.unique(np.column_stack([rng.integers(0, 4, m)] + [
            rng.integers(0, n_local, m) for _ in range(width - 1)]).reshape(m, width), axis=0)
        counts = rng.integers(1, 5, rows.shape[0])
        grams.append((rows, counts))
        maps.append(ids)
        for r, c in zip(rows.tolist(), counts.tolist(), strict=True):
            expect[(r[0], *(int(ids[v]) for v in r[1:]))] += c
    for radix in (12, 2**31):  # (2**31: 8·radix² passes 2**62, the rows' way)
        rows, counts = _summed_rows(list(grams), maps, radix)  # (it spends its list)
        assert dict(zip(map(tuple, rows.tolist()), counts.tolist(), strict=True)) == expect


_CHARS = "ab|{}~=-[é\u00ff\u4e2d"  # around "|" (0x7c) in code-point order, a multi-byte few
_texts = st.text(alphabet=_CHARS, max_size=4)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(_texts, min_size=1, max_size=8, unique=True),
       free=st.lists(_texts, max_size=6, unique=True),
       rows=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 7), st.integers(0, 7),
                               st.integers(0, 7)), max_size=25),
       width=st.sampled_from([2, 3, 4]), lead=st.sampled_from(["", "w", "a0[", "b"]),
       counts_seed=st.integers(0, 1000))
def test_kept_names_order_and_packing_are_the_sorted_strings(values, free, rows, width, lead,
                                                             counts_seed):
    """:class:`KeptNames` orders and packs from value ranks what sorting every string gives:
    values that are prefixes of others, hold ``|`` or sort around it, multi-byte characters;
    free strings that start with a group's prefix (put among its rows) or are prefixes of
    one; counts with many ties."""
    prefixes = (f"{lead}x-1=", f"{lead}x+1=", f"{lead}y=")
    rows = np.array([r[:width] for r in rows], np.int64).reshape(-1, width)
    rows[:, 1:] %= len(values)
    one = width == 2 or all("|" not in v for v in values)
    names = KeptNames()
    strings: list[str] = []
    if one:  # a group's strings must be distinct (a `|` in n-gram values: free strings)
        rows = np.unique(rows, axis=0)
        names.add_rows(prefixes, rows, values)
        strings += [prefixes[r[0]] + "|".join(values[v] for v in r[1:]) for r in rows.tolist()]
    extra = [f for f in [*free, prefixes[0], prefixes[2][:-1], f"{lead}y=a"] if f not in strings]
    names.add_strings(extra)
    strings += extra
    assert names.strings() == strings
    counts = np.random.default_rng(counts_seed).integers(1, 3, len(strings))
    order = names.permutation(counts)
    assert order.tolist() == frequency_permutation(strings, counts).tolist()
    assert names.joined(order).tobytes().decode() == "\n".join(frequency_order(strings, counts))
