"""Dependency parsing with given heads kept (``predict(fixed=...)``, ``predict --force``):
constrained Eisner and Chu-Liu-Edmonds against brute force over the single-root (projective)
trees that keep the given heads, the infeasible cases (two root words, a cycle: refused; no
projective tree: Chu-Liu-Edmonds), labels kept, the estimator's checks and the command line."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from cli_run import run
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dependency import all_trees, chain_treebank, is_tree, random_treebank, tree_scores

from demidcd.errors import OptionError
from demidcd.estimators import DependencyParser
from demidcd.io.dependency import read_dependency
from demidcd.tasks.dependency.decoding import (
    CLE,
    EISNER,
    NEG,
    decode_tree,
    fixed_heads_check,
    workspace,
)
from demidcd.tasks.dependency.encoding import encode_trees
from demidcd.tasks.dependency.spec import label_set
from demidcd.tasks.dependency.task import DependencyTask, FixedHeadsError, ProjectiveFallback


def decode_given(S: np.ndarray, given: np.ndarray, decoder: str = "eisner"
                 ) -> tuple[np.ndarray, float, bool]:
    """The best single-root tree over the (n+1)×(n+1) arc scores S keeping the heads ``given``
    (int per position 0..n, −1 free; no two 0s and no cycle, see ``fixed_heads_check``),
    decoded as the parse kernel does (arcs masked, then ``decode_tree``): (heads of positions
    0..n, heads[0] = −1; its score Σ_d S(heads[d], d); True when Eisner fell back to
    Chu-Liu-Edmonds)."""
    N = S.shape[0]
    given = np.ascontiguousarray(given, np.int32)
    M = np.array(S, np.float64)
    for d in range(1, N):
        if given[d] >= 0:
            M[np.arange(N) != given[d], d] = NEG
    dec = EISNER if decoder == "eisner" else CLE
    wf, wi, wb = workspace(N, dec)
    cf, ci, cb = workspace(N if dec == EISNER else 0, CLE)
    heads = np.empty(N, np.int32)
    flat = M.ravel()
    fell = decode_tree(flat, N, heads, dec, given, 0, wf, wi, wb, cf, ci, cb)
    return heads, float(M[heads[1:], np.arange(1, N)].sum()), bool(fell)


def keeps(Y: np.ndarray, given: np.ndarray) -> np.ndarray:
    """Mask of the head vectors Y (positions 0..n) that keep the given heads (−1: free)."""
    return ((given[None, 1:] < 0) | (Y[:, 1:] == given[None, 1:])).all(1)


def check_given(S: np.ndarray, given: np.ndarray) -> None:
    """decode_given with both decoders against brute force; fixed_heads_check against the
    existence of a single-root tree keeping ``given``."""
    n = S.shape[0] - 1
    Y, proj, single = all_trees(n)
    ok = keeps(Y, given) & single
    code, where = fixed_heads_check(np.array([0, n + 1], np.int64), given.astype(np.int32),
                                    np.zeros(1, np.int64))
    assert (code[0] == 0) == ok.any()
    if code[0] == 1:
        assert (given == 0).sum() >= 2 and given[where[0]] == 0
    if code[0]:
        return
    for decoder in ("eisner", "cle"):
        heads, score, fell = decode_given(S, given, decoder)
        allowed = ok & proj if decoder == "eisner" else ok
        assert fell == (decoder == "eisner" and not allowed.any())
        if fell:
            allowed = ok  # no projective tree keeps them: the best non-projective one
        assert heads[0] == -1 and is_tree(heads[1:], n, projective=not fell and
                                          decoder == "eisner")
        assert ((given[1:] < 0) | (heads[1:] == given[1:])).all()
        best = tree_scores(S, Y[allowed]).max()
        assert score == pytest.approx(best, abs=1e-9)
        assert S[heads[1:], np.arange(1, n + 1)].sum() == pytest.approx(best, abs=1e-9)


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(-3, 3) | st.floats(-5, 5, allow_nan=False),
             min_size=(n + 1) ** 2, max_size=(n + 1) ** 2),
    st.lists(st.none() | st.integers(0, n), min_size=n, max_size=n))))
def test_constrained_decoders_equal_brute_force(case):
    vals, heads = case
    n = len(heads)
    S = np.array(vals, np.float64).reshape(n + 1, n + 1)
    given = np.array([-1] + [-1 if h is None or h == d else h
                             for d, h in enumerate(heads, 1)], np.int64)
    check_given(S, given)


def test_constrained_decoders_on_random_cases_with_every_outcome():
    """Random scores and given heads on n ≤ 6, until each outcome occurred: refused (two roots,
    cycle), kept projectively, and kept only non-projectively (Eisner falls back)."""
    rng = np.random.default_rng(21)
    seen = set()
    for _ in range(600):
        n = int(rng.integers(1, 7))
        S = rng.normal(size=(n + 1, n + 1))
        given = np.full(n + 1, -1, np.int64)
        for d in range(1, n + 1):
            if rng.random() < 0.5:
                h = int(rng.integers(0, n + 1))
                given[d] = -1 if h == d else h
        check_given(S, given)
        code = fixed_heads_check(np.array([0, n + 1], np.int64), given.astype(np.int32),
                                 np.zeros(1, np.int64))[0][0]
        seen.add(int(code) if code else 3 + decode_given(S, given, "eisner")[2])
    assert seen == {1, 2, 3, 4}


# ------------------------------------------------------------------------- the task, labelled
@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_task_decode_fixed_keeps_heads_and_labels_and_is_best(decoder):
    rng = np.random.default_rng(22)
    words, pos, heads, rels = random_treebank(rng, 14, max_len=6)
    labels, arcs = label_set(heads, rels)
    ids = [[labels.index(r) for r in rs] for rs in rels]
    enc = encode_trees(words, pos, heads, None, ids)
    task = DependencyTask(enc, hashing=512, decoder=decoder, label_arcs=arcs)
    tp = enc.tok_ptr
    b = labels.index("b")  # allowed on root arcs and on the others
    for _ in range(3):
        w = rng.normal(size=task.dim)
        fhead = np.full(int(tp[-1]), -1, np.int32)
        flab = np.full(int(tp[-1]), -1, np.int32)
        for i, hs in enumerate(heads):  # gold heads (one on the root), some with the label
            root = False
            for d in range(1, len(hs) + 1):
                if rng.random() < 0.5 and not (root and hs[d - 1] == 0):
                    root |= hs[d - 1] == 0
                    fhead[tp[i] + d] = hs[d - 1]
                    if rng.random() < 0.5:
                        flab[tp[i] + d] = ids[i][d - 1]
                elif rng.random() < 0.3:
                    flab[tp[i] + d] = b  # a label given, the head free
        trees, fell = task.decode_fixed(w, np.arange(task.n_examples), fhead, flab)
        assert decoder == "eisner" or not fell.any()
        for i, y in enumerate(trees):
            n = len(words[i])
            g, gl = fhead[tp[i]:tp[i + 1]], flab[tp[i]:tp[i + 1]]
            assert ((g[1:] < 0) | (y[0] == g[1:])).all()
            assert ((gl[1:] < 0) | (y[1] == gl[1:])).all()
            T = task.label_scores(w, i)
            A = T.max(2)
            for d in range(1, n + 1):
                if gl[d] >= 0:
                    A[:, d] = T[:, d, gl[d]]
            Y, proj, single = all_trees(n)
            allowed = keeps(Y, g) & single
            if decoder == "eisner":  # falls back exactly when no projective tree keeps them
                assert fell[i] == (not (allowed & proj).any())
                allowed &= proj if not fell[i] else True
            best = tree_scores(A, Y[allowed]).max()
            assert task.score(w, i, y) == pytest.approx(best, abs=1e-8)
    with pytest.raises(ValueError, match="0..n"):
        bad = np.full(int(tp[-1]), -1, np.int32)
        bad[tp[0] + 1] = 1  # word 1 on itself
        task.decode_fixed(np.zeros(task.dim), np.arange(task.n_examples), bad)


def test_task_decode_fixed_refuses_two_roots_and_cycles():
    words = [["a", "b", "c"], ["a", "b", "c", "d"]]
    enc = encode_trees(words, [["P"] * 3, ["P"] * 4])
    task = DependencyTask(enc, hashing=256)
    w = np.zeros(256)
    two_roots = np.array([-1, -1, 0, 1, -1, -1, 0, -1, 0], np.int32)  # sentence 1: 2 and 4
    with pytest.raises(FixedHeadsError, match=r"fixed\[1\]: words 2 and 4 are both given "
                                              "head 0") as e:
        task.decode_fixed(w, np.arange(2), two_roots)
    assert e.value.sentence == 1 and isinstance(e.value, OptionError)
    cycle = np.array([-1, 2, 3, 1, -1, -1, -1, -1, -1], np.int32)  # sentence 0: 1 → 2 → 3 → 1
    with pytest.raises(FixedHeadsError, match=r"fixed\[0\]: the given heads form a cycle"):
        task.decode_fixed(w, np.arange(2), cycle)
    # only the examples decoded count
    trees, fell = task.decode_fixed(w, np.array([1]), cycle)
    assert len(trees) == 1 and not fell.any()


# ------------------------------------------------------------------------- the estimator
@pytest.fixture(scope="module")
def parser():
    X, Y = chain_treebank(np.random.default_rng(23), 40, labelled=True)
    est = DependencyParser(algorithm="dcd", max_epochs=10, hashing=1 << 12).fit(X, Y)
    return est, X, Y


def test_predict_fixed_keeps_heads_and_labels(parser):
    est, X, Y = parser
    assert est.predict(X, fixed=[[None] * len(s) for s in X]) == est.predict(X)
    rng = np.random.default_rng(24)
    fixed = []
    for s in X:  # heads of a random tree (the model would not choose), labels on some
        n, order = len(s), rng.permutation(np.arange(1, len(s) + 1))
        h = [0] * n
        for k, d in enumerate(order[1:], 1):
            h[d - 1] = int(order[rng.integers(0, k)])
        fixed.append([None if rng.random() < 0.4 else
                      ((h[d], "obl") if rng.random() < 0.5 else h[d]) for d in range(n)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pred = est.predict(X, fixed=fixed)
    fell = [m.message for m in caught if isinstance(m.message, ProjectiveFallback)]
    for k, (tree, f) in enumerate(zip(pred, fixed, strict=True)):
        heads = [h for h, _ in tree]
        proj = not fell or k not in fell[0].sentences
        assert is_tree(heads, len(heads), projective=proj)
        for (h, r), g in zip(tree, f, strict=True):
            if isinstance(g, tuple):
                assert (h, r) == g
            elif g is not None:
                assert h == g
    assert pred != est.predict(X)


def test_predict_fixed_falls_back_to_cle_for_crossing_heads(parser):
    est, X, _ = parser
    x = [("the", "D"), ("n1", "N"), ("v1", "V"), ("the", "D"), ("n2", "N")]
    fixed = [[3, 4, None, None, 2]]  # arcs 3 → 1 and 4 → 2 cross
    with pytest.warns(ProjectiveFallback, match=r"1 sentence\(s\) \(the first: fixed\[0\]\)"):
        (tree,) = est.predict([x], fixed=fixed)
    heads = [h for h, _ in tree]
    assert heads[0] == 3 and heads[1] == 4 and heads[4] == 2 and is_tree(heads, 5)
    cle = DependencyParser(**{**est.get_params(), "decoder": "cle"})
    cle.__dict__.update({k: v for k, v in est.__dict__.items() if k.endswith("_")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cle.predict([x], fixed=fixed) == [tree]  # the same, without a fallback


@pytest.mark.parametrize("fixed,msg", [
    ([[0, None, 0]], r"fixed\[0\]: words 1 and 3 are both given head 0"),
    ([[2, 1, None]], r"fixed\[0\]: the given heads form a cycle"),
    ([[1, None, None]], r"fixed\[0\]\[0\]: a head must be an integer in 0..3"),
    ([[4, None, None]], r"fixed\[0\]\[0\]: a head must be an integer in 0..3"),
    ([[(2, "nmod"), None, None]], r"fixed\[0\]\[0\]: the parser has no DEPREL 'nmod'"),
    ([[None, None]], r"fixed\[0\] must hold one entry per word \(3\)"),
    ([], r"fixed must hold one list per sentence \(1\)"),
])
def test_predict_fixed_errors(parser, fixed, msg):
    est = parser[0]
    with pytest.raises(OptionError, match=msg):
        est.predict([[("the", "D"), ("n1", "N"), ("v1", "V")]], fixed=fixed)


# ------------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def cli_files(parser, tmp_path_factory):
    est, X, Y = parser
    d = tmp_path_factory.mktemp("force")
    model = d / "m.npz"
    est.save(model)
    return d, model, X, Y


def _conllu(path, X, heads, rels):
    """A CoNLL-U file of sentences X with the HEAD and DEPREL fields given (any text)."""
    path.write_text("".join(
        f"# sent_id = {k}\n" + "".join(f"{i + 1}\t{w}\t_\t{p}\t_\t_\t{h}\t{r}\t_\t_\n"
                                       for i, ((w, p), h, r) in enumerate(zip(s, hs, rs,
                                                                              strict=True)))
        + "\n" for k, (s, hs, rs) in enumerate(zip(X, heads, rels, strict=True))))


def test_cli_force_keeps_every_other_given_head(cli_files):
    d, model, X, Y = cli_files
    rng = np.random.default_rng(25)
    heads, rels, trees = [], [], []
    for s in X:  # a random tree's heads on every other word
        n, order = len(s), rng.permutation(np.arange(1, len(s) + 1))
        h = [0] * n
        for k, dd in enumerate(order[1:], 1):
            h[dd - 1] = int(order[rng.integers(0, k)])
        trees.append(h)
        heads.append([h[k] if k % 2 == 0 else ("_" if k % 4 == 1 else "?") for k in range(n)])
        rels.append([("obl" if k % 3 else "nmod") if k % 2 == 0 else "_" for k in range(n)])
    src, out = d / "given.conllu", d / "pred.conllu"
    _conllu(src, X, heads, rels)
    r = run("predict", "--model", str(model), "--data", str(src), "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    back = read_dependency(out, "conllu", "upos")  # checks a tree per sentence (no cycle)
    n_fell = 0
    for h, t, p, pr in zip(heads, trees, back.heads, back.deprels, strict=True):
        assert sum(x == 0 for x in p) == 1
        kept = [k for k in range(len(h)) if k % 2 == 0]
        assert [p[k] for k in kept] == [t[k] for k in kept]
        assert all(pr[k] == "obl" for k in kept if k % 3)  # known label kept
        assert all(pr[k] in ("det", "nsubj", "obj", "obl", "root") for k in range(len(p)))
        n_fell += not is_tree(p, len(p), projective=True)
    warned = [ln for ln in r.stderr.splitlines() if "no projective tree" in ln]
    assert n_fell and len(warned) == 1 and f"nor those of {n_fell - 1:,} more" in warned[0]
    assert all(ln.startswith(f"demidcd: warning: {src}:") for ln in warned)
    # every other gold head given: kept, and the output is the gold tree's elsewhere mostly
    gold = [[h for h, _ in t] for t in Y]
    _conllu(src, X, [[g[k] if k % 2 == 0 else "_" for k in range(len(g))] for g in gold],
            [["_"] * len(g) for g in gold])
    r = run("predict", "--model", str(model), "--data", str(src), "--out", str(out), "--force",
            "--quiet")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    back = read_dependency(out, "conllu", "upos")
    for g, p in zip(gold, back.heads, strict=True):
        assert [p[k] for k in range(0, len(g), 2)] == g[::2]
        assert is_tree(p, len(p), projective=True)


@pytest.mark.parametrize("heads,msg", [
    (["0", "_", "0", "_", "_"], "words 1 and 3 are both given head 0, but a tree has one root "
                                "word"),
    (["2", "1", "_", "_", "_"], "the given heads form a cycle through word 1"),
])
def test_cli_force_refuses_heads_no_tree_keeps(cli_files, heads, msg):
    d, model, X, Y = cli_files
    src = d / "bad.conllu"
    X2 = [X[0], [("the", "D"), ("n1", "N"), ("v1", "V"), ("the", "D"), ("n2", "N")]]
    good = [str(h) for h, _ in Y[0]]
    _conllu(src, X2, [good, heads], [["_"] * len(good), ["_"] * 5])
    line = len(X[0]) + 4  # after sentence 1's comment, words and blank line, its comment
    assert src.read_text().split("\n")[line - 1].startswith("1\tthe\t")
    r = run("predict", "--model", str(model), "--data", str(src), "--out", str(d / "o.conllu"),
            "--force")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"demidcd: error: {src}:{line}: --force: no tree keeps the given heads of the "
        f"sentence starting on this line: {msg}"]
    assert not (d / "o.conllu").exists()


def test_cli_refusals_for_dependency(cli_files):
    d, model, *_ = cli_files
    for opt in (["--nbest", "2"], ["--scores"]):
        r = run("predict", "--model", str(model), "--data", str(d / "none.conllu"), "--out",
                str(d / "o"), *opt)
        assert r.returncode == 2
        assert r.stderr.splitlines() == [f"demidcd: error: {opt[0]} is not available for "
                                         "dependency models (only for sequence, chunking and "
                                         "ner)"]
