"""SequenceFeaturizer: template, determinism, min_count filtering, hashing, state round trip."""

from __future__ import annotations

import json
import zlib
from collections import Counter

import numpy as np
import pytest

from demidcd.tasks.chain.features import (
    EncodedSequences,
    SequenceFeaturizer,
    collapse_shape,
    word_shape,
)

SENTS = [
    ["Al", "-", "Zaman", ":", "American", "forces", "killed", "Shaikh"],
    ["The", "USA", "won", "12-10", "in", "1999", "."],
    ["the", "the", "the"],
    ["Ünïcode", "mañana", "中文", "x"],
    [],
    ["one"],
]


def token_features(sent: list[str], t: int) -> set[str]:
    """The template written out independently of the package, for one token."""
    w = sent[t]
    lw = w.lower()

    def shape(s):
        return "".join("X" if c.isupper() else "x" if c.islower() else "d" if c.isdigit() else c
                       for c in s)

    sh = shape(w)
    csh = "".join(c for i, c in enumerate(sh) if i == 0 or sh[i - 1] != c)
    f = {"b", "w=" + w, "lw=" + lw, "sh=" + sh, "csh=" + csh}
    for k in range(1, min(4, len(w)) + 1):
        f |= {f"p{k}={w[:k]}", f"s{k}={w[-k:]}"}
    if w[0].isupper():
        f.add("cap")
    if any(c.isdigit() for c in w):
        f.add("dig")
    if "-" in w:
        f.add("hyph")
    if w.isupper():
        f.add("allcap")
    for o in (-2, -1, 1, 2):
        u = t + o
        nb = "<s>" if u < 0 else "</s>" if u >= len(sent) else sent[u].lower()
        f.add(f"w{o:+d}={nb}")
    prev = "<s>" if t == 0 else sent[t - 1].lower()
    nxt = "</s>" if t == len(sent) - 1 else sent[t + 1].lower()
    f |= {f"b-1={prev}|{lw}", f"b+1={lw}|{nxt}"}
    return f


def all_token_features(sents):
    return [token_features(s, t) for s in sents for t in range(len(s))]


def decode_tokens(enc: EncodedSequences, names: list[str]) -> list[set[str]]:
    return [
        {names[j] for j in enc.feat_idx[enc.feat_ptr[t]:enc.feat_ptr[t + 1]]}
        for t in range(enc.n_tokens)
    ]


def check_encoding(enc: EncodedSequences, sents, F):
    assert enc.sent_ptr.dtype == np.int64 and enc.feat_ptr.dtype == np.int64
    assert enc.feat_idx.dtype == np.int32
    np.testing.assert_array_equal(np.diff(enc.sent_ptr), [len(s) for s in sents])
    assert enc.feat_ptr[0] == 0 and enc.feat_ptr[-1] == enc.feat_idx.size
    for t in range(enc.n_tokens):
        ids = enc.feat_idx[enc.feat_ptr[t]:enc.feat_ptr[t + 1]]
        assert np.all(np.diff(ids) > 0)
        assert ids.size == 0 or (ids[0] >= 0 and ids[-1] < F)


def test_shapes():
    assert word_shape("Al-Zaman") == "Xx-Xxxxx"
    assert collapse_shape(word_shape("Al-Zaman")) == "Xx-Xx"
    assert word_shape("12-10") == "dd-dd" and collapse_shape("dd-dd") == "d-d"


@pytest.mark.parametrize("min_count", [1, 2, 3])
def test_dictionary_matches_brute_force(min_count):
    fz = SequenceFeaturizer(min_count=min_count).fit(SENTS)
    feats = all_token_features(SENTS)
    counts = Counter(f for fs in feats for f in fs)
    expect = sorted((f for f, c in counts.items() if c >= min_count),
                    key=lambda f: (-counts[f], f))  # ids by decreasing count, then string
    assert fz.features == expect and fz.n_features == len(expect)
    enc = fz.transform(SENTS)
    check_encoding(enc, SENTS, fz.n_features)
    kept = set(expect)
    assert decode_tokens(enc, fz.features) == [fs & kept for fs in feats]


def test_min_count_filters_and_unknown_dropped():
    f1 = SequenceFeaturizer(min_count=1).fit(SENTS)
    f3 = SequenceFeaturizer(min_count=3).fit(SENTS)
    assert set(f3.features) < set(f1.features)
    assert "w=the" in f3.features and "w=Zaman" not in f3.features  # 'the' fires 3 times
    new = [["Zzyzx", "the", "unseenword"]]
    enc = f1.transform(new)
    got = decode_tokens(enc, f1.features)
    want = [fs & set(f1.features) for fs in all_token_features(new)]
    assert got == want and "w=Zzyzx" not in got[0] and "b" in got[0]


def test_deterministic():
    a = SequenceFeaturizer(min_count=1).fit(SENTS)
    b = SequenceFeaturizer(min_count=1).fit(list(reversed(SENTS)))
    assert a.features == b.features  # ids do not depend on sentence order
    ea, eb = a.transform(SENTS), b.transform(SENTS)
    for x, y in zip((ea.sent_ptr, ea.feat_ptr, ea.feat_idx),
                    (eb.sent_ptr, eb.feat_ptr, eb.feat_idx), strict=True):
        np.testing.assert_array_equal(x, y)


def test_hashing_mode():
    H = 97
    fz = SequenceFeaturizer(hashing=H)
    assert fz.n_features == H
    enc = fz.fit(SENTS).transform(SENTS)
    check_encoding(enc, SENTS, H)
    feats = all_token_features(SENTS)
    for t, fs in enumerate(feats):
        want = sorted({zlib.crc32(f.encode("utf-8")) % H for f in fs})
        np.testing.assert_array_equal(enc.feat_idx[enc.feat_ptr[t]:enc.feat_ptr[t + 1]], want)
    big = SequenceFeaturizer(hashing=2**20).transform(SENTS)
    assert big.feat_idx.max() < 2**20 and big.feat_idx.min() >= 0


@pytest.mark.parametrize("kw", [{"min_count": 1}, {"min_count": 2}, {"hashing": 1000}])
def test_state_round_trip(kw, tmp_path):
    fz = SequenceFeaturizer(**kw).fit(SENTS)
    arrays, meta = fz.state()
    json.dumps(meta)
    for v in arrays.values():
        assert isinstance(v, np.ndarray) and v.dtype != object
    np.savez(tmp_path / "f.npz", **arrays)
    with np.load(tmp_path / "f.npz", allow_pickle=False) as z:
        loaded = {k: z[k] for k in z.files}
    fz2 = SequenceFeaturizer.from_state(loaded, json.loads(json.dumps(meta)))
    assert fz2.n_features == fz.n_features and fz2.features == fz.features
    e1, e2 = fz.transform(SENTS + [["new", "Words"]]), fz2.transform(SENTS + [["new", "Words"]])
    np.testing.assert_array_equal(e1.feat_ptr, e2.feat_ptr)
    np.testing.assert_array_equal(e1.feat_idx, e2.feat_idx)


def test_state_rejects_inconsistent():
    arrays, meta = SequenceFeaturizer(min_count=1).fit(SENTS).state()
    with pytest.raises(ValueError):
        SequenceFeaturizer.from_state(arrays, {**meta, "n_features": meta["n_features"] + 1})
    with pytest.raises(ValueError):
        SequenceFeaturizer.from_state(arrays, {**meta, "template_version": 99})


def test_unfitted_and_bad_args():
    with pytest.raises(RuntimeError):
        SequenceFeaturizer().transform(SENTS)
    with pytest.raises(ValueError):
        SequenceFeaturizer(min_count=0)
    with pytest.raises(ValueError):
        SequenceFeaturizer(min_count=1).fit([["a\nb"]])


def test_word_clusters_group_words_by_their_neighbours():
    from demidcd.tasks.chain.features import word_clusters

    # cities follow en / a / de, names follow dijo / vio / y
    X = ([["en", "Madrid"], ["a", "Madrid"], ["de", "Madrid"], ["en", "Madrid"], ["en", "Lima"],
          ["a", "Lima"], ["de", "Lima"]]
         + [["dijo", "Juan"], ["vio", "Juan"], ["y", "Juan"], ["dijo", "Juan"], ["dijo", "Ana"],
            ["vio", "Ana"], ["y", "Ana"]])
    c = word_clusters(X, ks=(2, 3), min_seen=3, n_ctx=20)
    assert set(c) == {"madrid", "lima", "juan", "ana", "en", "dijo"}  # seen ≥ 3 times
    assert c["madrid"] == c["lima"] and c["juan"] == c["ana"]
    assert c["madrid"].split(",")[0] != c["juan"].split(",")[0]  # k = 2 separates them
    assert all(len(v.split(",")) == 2 for v in c.values())  # one id per k
    assert word_clusters(X, ks=(64,), min_seen=3) == {}  # fewer words than clusters
    assert word_clusters(X, ks=(2, 3), min_seen=3, n_ctx=20) == c  # deterministic


def test_ner_template_window_and_state():
    from demidcd.tasks.chain.features import _ner_window

    toks = [["El", "Banco", "de", "España"]]
    attrs = [[("DA",), ("NC",), ("SP",), ("NP",)]]
    feats = list(_ner_window(toks, attrs, 1))
    assert len(feats) == 4 * 5
    assert feats[5:10] == ["W[-1]=El", "W[1]=de", "w[-3]=<s>", "w[3]=</s>", "wa=banco|NC"]
    assert feats[15:20] == ["W[-1]=de", "W[1]=</s>", "w[-3]=el", "w[3]=</s>", "wa=españa|NP"]
    X = ([[("vive", "V"), ("en", "P"), ("Madrid", "N")]] * 3
         + [[("dijo", "V"), ("Ana", "N"), ("que", "C")]] * 3)
    f = SequenceFeaturizer(1, template="ner")
    f.fit(X)
    assert "wa=madrid|N" in f.features and "W[-1]=en" in f.features
    assert not any(n.startswith(("W[", "wa=")) for n in SequenceFeaturizer(1).fit(X).features)
    g = SequenceFeaturizer.from_state(*f.state())
    assert g.template == "ner" and g.clusters == f.clusters
    assert np.array_equal(g.transform(X).feat_idx, f.transform(X).feat_idx)
    with pytest.raises(ValueError, match="template"):
        SequenceFeaturizer(1, template="nope")


def test_doc_context_features_of_capitalised_words():
    from demidcd.tasks.chain.features import _NONE, _PER_DOC, _doc_context

    sents = [["Banco", "de", "España", "sube"],       # sentence-initial "Banco"
             ["el", "banco", "de", "García", "."],
             ["Dijo", "Pedro", "García", "que", "España", "gana"]]
    out = list(_doc_context(sents, window=1000))
    assert len(out) == 15 * _PER_DOC
    row = {t: out[t * _PER_DOC:(t + 1) * _PER_DOC] for t in range(15)}
    assert all(f == _NONE for t in (1, 3, 4, 5, 6, 8, 12, 14) for f in row[t])  # lower case
    banco = row[0]
    assert banco[0] == "dc:low"  # "banco" occurs in lower case
    assert banco[1:4] == [_NONE] * 3 and banco[4:] == [_NONE] * 8  # no other "Banco"
    garcia = row[7]  # "García" of sentence 2; the other occurrence follows "Pedro"
    assert garcia[:4] == [_NONE, "dc:mid", "dc:after", _NONE]
    assert garcia[4:6] == ["ca-1=pedro", "ca+1=que"] and garcia[6:] == [_NONE] * 6
    espana = row[2]  # the other "España" is mid-sentence, before "gana"
    assert espana[:4] == [_NONE, "dc:mid", _NONE, _NONE]
    assert espana[4:6] == ["ca-1=que", "ca+1=gana"]
    assert row[9] == row[10] == [_NONE] * _PER_DOC  # the only "Dijo" and "Pedro"
    assert row[11][:4] == [_NONE, "dc:mid", _NONE, _NONE]  # the other "García" follows "de"
    # the window: 3 tokens either side sees neither far occurrence
    near = list(_doc_context(sents, window=3))
    assert near[2 * _PER_DOC:3 * _PER_DOC] == [_NONE] * _PER_DOC


def test_ner_template_doc_window_is_saved_and_old_models_keep_theirs():
    X = ([[("dijo", "V"), ("Ana", "N"), ("Ruiz", "N")], [("Ruiz", "N"), ("vino", "V")]] * 3)
    f = SequenceFeaturizer(1, template="ner").fit(X)
    assert f.doc_window > 0 and "dc:after" in f.features and "ca-1=ana" in f.features
    arrays, meta = f.state()
    g = SequenceFeaturizer.from_state(arrays, meta)
    assert g.doc_window == f.doc_window
    assert np.array_equal(g.transform(X).feat_idx, f.transform(X).feat_idx)
    old = SequenceFeaturizer.from_state(arrays, {k: v for k, v in meta.items()
                                                 if k != "doc_window"})
    assert old.doc_window == 0  # a model saved before the document features encodes as then
    assert old.transform(X).feat_idx.size < f.transform(X).feat_idx.size
    assert SequenceFeaturizer(1).doc_window == 0
