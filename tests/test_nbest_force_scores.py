"""n-best lists, forced labels, label-scheme constraints and confidences of the chain taggers
(issue 36): SequenceTask.kbest / decode_constrained / confidence against enumeration of all
K^n taggings (B features and real values included), the estimators' predict_nbest /
predict(fixed=...) / predict_scores / constraints on a tiny chunker, and the CLI layouts of
``predict --nbest / --force / --scores`` with the refusals for the other tasks."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_chain_features import naive_phi, random_chain, sentence

from demidcd.api import ChunkTagger, SequenceTagger, load_estimator
from demidcd.cli import main
from demidcd.errors import OptionError
from demidcd.options import OPTIONS, DataOptions, OutputOptions
from demidcd.tasks import get_task
from demidcd.tasks.chain.decoding import scheme_transitions, training_scheme
from demidcd.tasks.chain.task import SequenceTask


# ---------------------------------------------------------------------------------------------
# the task against enumeration
# ---------------------------------------------------------------------------------------------
def _task(seed, K, G, valued, n_sent=12, max_len=4):
    rng = np.random.default_rng(seed)
    X, Y, F, tokens = random_chain(rng, n_sent, K, 3, valued, max_len=max_len, G=G)
    task = SequenceTask(X, Y, K, F, G)
    return task, rng.normal(size=task.dim), tokens, Y, F


def _all(task, w, tokens, Y, F, i, ok=lambda y: True):
    """[(w·Φ(x_i, y), y)] over the admissible taggings of example i, best first."""
    toks, _ = sentence(task, tokens, Y, i)
    out = [(float(w @ naive_phi(F, task.K, task.G, toks, y)), y)
           for y in itertools.product(range(task.K), repeat=len(toks)) if ok(y)]
    return sorted(out, key=lambda sy: -sy[0])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(1, 4), G=st.integers(0, 2),
       valued=st.booleans(), k=st.integers(1, 6))
def test_kbest_equals_enumeration_and_rank0_decode(seed, K, G, valued, k):
    task, w, tokens, Y, F = _task(seed, K, G, valued, n_sent=6)
    ex = np.arange(task.n_examples)
    best = task.kbest(w, ex, k)
    tags, ptr = task.decode_flat(w, ex)
    for i, (ys, scores) in enumerate(best):
        n = int(ptr[i + 1] - ptr[i])
        if n == 0:
            continue
        ref = _all(task, w, tokens, Y, F, i)
        assert ys.shape == (min(k, len(ref)), n)
        assert np.array_equal(ys[0], tags[ptr[i]:ptr[i + 1]])  # rank 0 = Viterbi
        assert np.all(np.diff(scores) <= 1e-12)
        np.testing.assert_allclose(scores, [s for s, _ in ref[:len(scores)]], rtol=1e-9,
                                   atol=1e-9)
        for y, s in zip(ys, scores, strict=True):
            assert task.score(w, i, y) == pytest.approx(s, rel=1e-9, abs=1e-9)
        assert len({tuple(y) for y in ys}) == len(ys)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(2, 4), G=st.integers(0, 2),
       valued=st.booleans())
def test_forced_tags_kept_and_best_among_those(seed, K, G, valued):
    task, w, tokens, Y, F = _task(seed, K, G, valued)
    rng = np.random.default_rng(seed + 1)
    n_tok = int(task.sent_ptr[-1])
    fixed = np.where(rng.random(n_tok) < 0.4, rng.integers(0, K, n_tok), -1).astype(np.int32)
    ex = np.arange(task.n_examples)
    tags, ptr, scores = task.decode_constrained(w, ex, fixed)
    assert np.all((fixed < 0) | (tags == fixed))
    for i in ex:
        a, b = int(ptr[i]), int(ptr[i + 1])
        if a == b:
            continue
        f = fixed[a:b]
        ref = _all(task, w, tokens, Y, F, i,
                   lambda y, f=f: all(c < 0 or c == v for c, v in zip(f, y, strict=True)))
        assert scores[i] == pytest.approx(ref[0][0], rel=1e-9, abs=1e-9)
        assert task.score(w, i, tags[a:b]) == pytest.approx(ref[0][0], rel=1e-9, abs=1e-9)


def _valid(labels, scheme, y):
    """Well-formedness written from the scheme's definition (independent of the tables)."""
    prev = ("O", "")
    for t in y:
        tag, _, typ = labels[t].partition("-")
        if tag in ("I", "E") and not (prev[0] in ("B", "I") and prev[1] == typ):
            return False
        if scheme == "bioes" and tag in ("B", "S", "O") and prev[0] in ("B", "I"):
            return False
        prev = (tag, typ)
    return not (scheme == "bioes" and prev[0] in ("B", "I"))


SCHEME_LABELS = {"iob2": ["O", "B-A", "I-A", "B-B", "I-B"],
                 "bioes": ["O", "B-A", "I-A", "E-A", "S-A", "B-B", "E-B"]}


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scheme=st.sampled_from(["iob2", "bioes"]),
       G=st.integers(0, 2), k=st.integers(1, 4))
def test_scheme_constrained_decoding_never_breaks_the_scheme(seed, scheme, G, k):
    labels = SCHEME_LABELS[scheme]
    task, w, tokens, Y, F = _task(seed, len(labels), G, False, n_sent=6, max_len=4)
    w *= 3  # random weights break the scheme freely
    cons = scheme_transitions(labels, scheme)
    ex = np.arange(task.n_examples)
    tags, ptr, scores = task.decode_constrained(w, ex, None, cons)
    for i, (ys, sc) in enumerate(task.kbest(w, ex, k, None, cons)):
        a, b = int(ptr[i]), int(ptr[i + 1])
        if a == b:
            continue
        assert _valid(labels, scheme, tags[a:b])
        assert all(_valid(labels, scheme, y) for y in ys)
        ref = _all(task, w, tokens, Y, F, i, lambda y: _valid(labels, scheme, y))
        np.testing.assert_allclose(sc, [s for s, _ in ref[:k]], rtol=1e-9, atol=1e-9)
        assert scores[i] == pytest.approx(ref[0][0], rel=1e-9)


def test_fixed_tags_that_break_the_scheme_win():
    labels = SCHEME_LABELS["iob2"]
    task, w, *_ = _task(3, len(labels), 0, False, n_sent=4, max_len=4)
    cons = scheme_transitions(labels, "iob2")
    n_tok = int(task.sent_ptr[-1])
    fixed = np.full(n_tok, -1, np.int32)
    first = [int(task.sent_ptr[i]) for i in range(task.n_examples)
             if task.sent_ptr[i + 1] > task.sent_ptr[i]]
    fixed[first] = labels.index("I-B")  # I-B first: no IOB2 tagging keeps it
    ex = np.arange(task.n_examples)
    tags, ptr, _ = task.decode_constrained(w, ex, fixed, cons)
    assert np.all(tags[first] == labels.index("I-B"))
    margins, sent = task.confidence(w, ex, tags, fixed, cons)
    assert np.all(margins >= 0) and np.all(sent >= 0)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), K=st.integers(2, 4), G=st.integers(0, 2),
       valued=st.booleans())
def test_margins_equal_brute_force_max_marginals(seed, K, G, valued):
    task, w, tokens, Y, F = _task(seed, K, G, valued)
    ex = np.arange(task.n_examples)
    tags, ptr = task.decode_flat(w, ex)
    margins, sent = task.confidence(w, ex, tags)
    assert np.all(margins >= 0)
    for i in ex:
        a, b = int(ptr[i]), int(ptr[i + 1])
        if a == b:
            continue
        ref = _all(task, w, tokens, Y, F, i)
        y = tags[a:b]
        for t in range(b - a):
            own = max(s for s, z in ref if z[t] == y[t])
            other = max((s for s, z in ref if z[t] != y[t]), default=-np.inf)
            assert margins[a + t] == pytest.approx(own - other, rel=1e-9, abs=1e-9)
        second = ref[1][0] if len(ref) > 1 else -np.inf
        assert sent[i] == pytest.approx(ref[0][0] - second, rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# the estimators
# ---------------------------------------------------------------------------------------------
CHUNKS = [
    [("He", "PRP", "B-NP"), ("reckons", "VBZ", "B-VP"), ("the", "DT", "B-NP"),
     ("deficit", "NN", "I-NP"), ("will", "MD", "B-VP"), ("narrow", "VB", "I-VP"),
     (".", ".", "O")],
    [("Prices", "NNS", "B-NP"), ("rose", "VBD", "B-VP"), ("in", "IN", "B-PP"),
     ("March", "NNP", "B-NP"), (".", ".", "O")],
    [("The", "DT", "B-NP"), ("old", "JJ", "I-NP"), ("man", "NN", "I-NP"), ("sold", "VBD", "B-VP"),
     ("new", "JJ", "B-NP"), ("shares", "NNS", "I-NP"), ("in", "IN", "B-PP"), ("May", "NNP", "B-NP"),
     (".", ".", "O")],
]


def _xy(sents):
    return ([[(w, p) for w, p, _ in s] for s in sents], [[c for *_, c in s] for s in sents])


@pytest.fixture(scope="module")
def chunker():
    X, Y = _xy(CHUNKS * 3)
    return ChunkTagger(min_count=1, max_epochs=10, algorithm="dcd").fit(X, Y)


def test_training_scheme():
    iob2 = [["B-NP", "I-NP", "O", "B-VP"]]
    iob1 = [["I-NP", "I-NP", "B-NP", "O", "I-VP"]]
    assert training_scheme(iob2) == "iob2"
    assert training_scheme(iob1) is None
    assert training_scheme([["B-X", "E-X", "S-Y", "O"]]) == "bioes"
    assert training_scheme(iob1, "iob2") == "iob2" and training_scheme(iob2, "iob1") is None
    assert training_scheme(iob2 * 99 + iob1[:1]) == "iob2"  # a slip in 1% of the chunks


def test_predict_nbest_scores_and_rank0(chunker):
    X, _ = _xy(CHUNKS)
    task = chunker._task(X, None)
    index = {t: k for k, t in enumerate(chunker.classes_)}
    lists = chunker.predict_nbest(X, 4)
    assert [b[0][0] for b in lists] == chunker.predict(X)
    for i, best in enumerate(lists):
        assert len(best) == 4
        sc = [s for _, s in best]
        assert sc == sorted(sc, reverse=True)
        for y, s in best:
            assert task.score(chunker.coef_, i, [index[t] for t in y]) == pytest.approx(s)
    with pytest.raises(OptionError):
        chunker.predict_nbest(X, 0)


def test_predict_fixed_keeps_known_tags(chunker):
    X, Y = _xy(CHUNKS)
    fixed = [[t if j % 2 else None for j, t in enumerate(reversed(s))] for s in Y]
    pred = chunker.predict(X, fixed=fixed)
    for f, p in zip(fixed, pred, strict=True):
        assert all(a is None or a == b for a, b in zip(f, p, strict=True))
    with pytest.raises(OptionError, match="no tag 'B-XYZ'"):
        chunker.predict(X, fixed=[["B-XYZ"] + [None] * (len(s) - 1) for s in X])
    with pytest.raises(OptionError):
        chunker.predict(X, fixed=[[None]] * len(X))


def test_predict_scores(chunker):
    X, _ = _xy(CHUNKS)
    rows = chunker.predict_scores(X)
    assert [r[0] for r in rows] == chunker.predict(X)
    for (tags, score, sent, margins), best in zip(rows, chunker.predict_nbest(X, 2),
                                                  strict=True):
        assert len(margins) == len(tags) and min(margins) >= 0
        assert score == pytest.approx(best[0][1])
        assert sent == pytest.approx(min(margins)) == pytest.approx(best[0][1] - best[1][1])


def test_constraints_parameter_saved_and_applied(chunker, tmp_path):
    assert chunker.constraint_scheme_ == "iob2" and chunker.constraints is None
    X, _ = _xy(CHUNKS)
    path = tmp_path / "c.npz"
    chunker.set_params(constraints=True)
    try:
        chunker.save(path)
    finally:
        chunker.set_params(constraints=None)
    back = load_estimator(path)
    assert back.constraints is True and back.constraint_scheme_ == "iob2"
    # weights that favour O → I-NP and START → I-NP: the constrained tagging never has it
    w = back.coef_.copy()
    K = len(back.classes_)
    F = back.n_features_
    i_np, o = back.classes_.index("I-NP"), back.classes_.index("O")
    w[F * K + o * (K + 1) + i_np] += 50.0
    w[F * K + K * (K + 1) + i_np] += 50.0
    back.coef_ = w
    for s in back.predict(X):
        assert s[0] != "I-NP"
        assert all(not (a == "O" and b == "I-NP") for a, b in zip(s, s[1:], strict=False))
    back.constraints = False
    assert any(s[0] == "I-NP" for s in back.predict(X))
    back.constraints = "yes"
    with pytest.raises(OptionError, match="constraints must be True, False or None"):
        back.predict(X)


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cli_chunker(tmp_path_factory):
    d = tmp_path_factory.mktemp("nbest")
    train = d / "train.txt"
    train.write_text("\n\n".join("\n".join(" ".join(t) for t in s) for s in CHUNKS * 3) + "\n")
    model = d / "m.npz"
    assert main(["train", "--task", "chunking", "--train", str(train), "--feature-columns", "2",
                 "--threads", "1", "--max-epochs", "10", "--min-count", "1", "--model",
                 str(model), "--quiet"]) == 0
    return d, train, model


def _blocks(path):
    """[(header fields, [token lines' fields])] of an n-best / scores file."""
    out = []
    for line in path.read_text().split("\n"):
        if line.startswith("#"):
            out.append((line[1:].split(), []))
        elif line.strip():
            out[-1][1].append(line.split())
    return out


def test_cli_nbest_layout(cli_chunker, tmp_path):
    d, train, model = cli_chunker
    nb, one = tmp_path / "nb.txt", tmp_path / "one.txt"
    assert main(["predict", "--model", str(model), "--data", str(train), "--nbest", "3",
                 "--out", str(nb), "--quiet"]) == 0
    assert main(["predict", "--model", str(model), "--data", str(train), "--out", str(one),
                 "--quiet"]) == 0
    first = [ln.split()[-1] for ln in one.read_text().split("\n") if ln.strip()]
    blocks = _blocks(nb)
    assert len(blocks) == 3 * len(CHUNKS) * 3
    assert re.fullmatch(r"# 0 -?\d+\.\d{6}", nb.read_text().split("\n")[0])
    ranks = [int(h[0]) for h, _ in blocks]
    assert ranks == [0, 1, 2] * (len(blocks) // 3)
    assert [f[-1] for h, toks in blocks if h[0] == "0" for f in toks] == first
    for s in range(0, len(blocks), 3):
        sc = [float(h[1]) for h, _ in blocks[s:s + 3]]
        assert sc == sorted(sc, reverse=True)
        assert all(len(f) == 4 for _, toks in blocks[s:s + 3] for f in toks)


def test_cli_force_keeps_given_labels(cli_chunker, tmp_path):
    d, train, model = cli_chunker
    lines = train.read_text().split("\n")
    given, k = [], 0
    for ln in lines:  # every other token: its label flipped to another type, or '?'
        if ln.strip():
            f = ln.split()
            f[-1] = ("B-PP" if f[-1] != "B-PP" else "O") if k % 2 == 0 else "?"
            k += 1
            ln = " ".join(f)
        given.append(ln)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(given))
    assert main(["predict", "--model", str(model), "--data", str(src), "--force",
                 "--out", str(out), "--quiet"]) == 0
    pairs = [(ln.split()[2], ln.split()[-1]) for ln in out.read_text().split("\n") if ln.strip()]
    kept = [(g, p) for g, p in pairs if g != "?"]
    assert kept and all(g == p for g, p in kept)
    assert len({p for g, p in pairs if g == "?"}) > 1  # the free tokens are decoded


def test_cli_scores_columns(cli_chunker, tmp_path):
    d, train, model = cli_chunker
    out = tmp_path / "sc.txt"
    assert main(["predict", "--model", str(model), "--data", str(train), "--scores",
                 "--out", str(out), "--quiet"]) == 0
    blocks = _blocks(out)
    assert len(blocks) == len(CHUNKS) * 3
    for head, toks in blocks:
        score, margin = map(float, head)
        margins = [float(f[4]) for f in toks]
        assert all(len(f) == 5 for f in toks) and min(margins) >= 0
        assert margin == pytest.approx(min(margins), abs=2e-6)


def test_cli_refusals(cli_chunker, tmp_path, capsys):
    d, train, model = cli_chunker
    out = str(tmp_path / "x.txt")
    base = ["predict", "--model", str(model), "--data", str(train), "--out", out]
    assert main([*base, "--nbest", "0"]) == 2
    assert main([*base, "--nbest", "2", "--scores"]) == 2
    capsys.readouterr()
    seq = tmp_path / "seq.npz"
    X, Y = _xy(CHUNKS)
    SequenceTagger(min_count=1, max_epochs=2).fit(X, Y).save(seq)
    assert main(["predict", "--model", str(seq), "--data", str(train), "--out", out,
                 "--constraints"]) == 2
    assert "--constraints is not available for sequence models" in capsys.readouterr().err


def test_cli_refuses_chain_options_for_dependency(tmp_path, capsys):
    from test_dependency import chain_treebank

    from demidcd.estimators import DependencyParser

    X, Y = chain_treebank(np.random.default_rng(1), 10)
    model = tmp_path / "dep.npz"
    DependencyParser(max_epochs=1, hashing=1 << 10).fit(X, Y).save(model)
    capsys.readouterr()
    for opt in (["--nbest", "2"], ["--scores"]):  # --force: tests/test_dependency_force.py
        assert main(["predict", "--model", str(model), "--data", str(tmp_path / "none.conllx"),
                     "--out", str(tmp_path / "o"), *opt]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"demidcd: error: {opt[0]} is not available for dependency models "
                       "(only for sequence, chunking and ner)"]
    unset = {o.name: None for o in OPTIONS}  # as the CLI leaves the options not given
    data = DataOptions.from_mapping(unset)
    with pytest.raises(OptionError, match="scores is not available for entity-relation"):
        get_task("entity-relation").check_options(
            None, data, OutputOptions.from_mapping({**unset, "scores": True}))
    with pytest.raises(OptionError, match="force is not available for entity-relation models "
                                          r"\(only for sequence, chunking, ner and dependency\)"):
        get_task("entity-relation").check_options(
            None, data, OutputOptions.from_mapping({**unset, "force": True}))


def test_cli_conllu_headers_follow_comments_and_margins_go_to_misc(tmp_path):
    X, Y = _xy(CHUNKS)
    model = tmp_path / "pos.npz"
    SequenceTagger(min_count=1, max_epochs=5).fit([[w for w, _ in s] for s in X],
                                                  [[p for _, p, _ in s] for s in CHUNKS]
                                                  ).save(model)
    data = tmp_path / "in.conllu"
    data.write_text("".join(
        f"# sent_id = {k}\n" + "".join(f"{i + 1}\t{w}\t_\t_\t_\t_\t_\t_\t_\t_\n"
                                       for i, (w, _) in enumerate(s)) + "\n"
        for k, s in enumerate(X)))
    nb, sc = tmp_path / "nb.conllu", tmp_path / "sc.conllu"
    for opt, out in ((["--nbest", "2"], nb), (["--scores"], sc)):
        assert main(["predict", "--model", str(model), "--data", str(data), "--out", str(out),
                     "--quiet", *opt]) == 0
    lines = nb.read_text().split("\n")
    heads = [i for i, ln in enumerate(lines) if re.fullmatch(r"# [01] -?\d+\.\d{6}", ln)]
    assert len(heads) == 2 * len(X)
    assert all(lines[i - 1].startswith("# sent_id") and lines[i + 1].startswith("1\t")
               for i in heads)
    toks = [ln.split("\t") for ln in sc.read_text().split("\n") if ln[:1].isdigit()]
    assert len(toks) == sum(map(len, X))
    assert all(re.fullmatch(r"Margin=(\d+\.\d{6}|inf)", f[9]) for f in toks)
