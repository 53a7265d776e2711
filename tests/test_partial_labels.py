"""Partially labelled data (issue 55), the input and the CRF: reading ``?`` and ``A|B`` cells,
a cell admitting no tagging refused with its line, the constrained forward-backward of the
partial-label likelihood against enumeration of the consistent taggings, its gradient against
enumeration and finite differences, and fully labelled data giving today's objective exactly."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_chain_features import naive_phi, random_chain

from demidcd.errors import InputError, OptionError, PartialLabelError
from demidcd.estimators.sequence import NamedEntityTagger, SequenceTagger
from demidcd.io.tagged import read_tagged
from demidcd.solvers.crf import CrfObjective
from demidcd.tasks.chain.decoding import scheme_transitions
from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.marginals import (
    nll_gradient_kernel,
    partial_nll_gradient_kernel,
    unseen_transitions,
)
from demidcd.tasks.chain.partial import encode_partial, first_infeasible, partial_labels
from demidcd.tasks.chain.task import SequenceTask


def _annotate(rng, Y, K, p_unknown=0.3, p_set=0.3):
    """Per token: the gold label, None (unknown) or a set holding the gold label."""
    out = []
    for y in Y.tolist():
        r = rng.random()
        if r < p_unknown:
            out.append(None)
        elif r < p_unknown + p_set:
            extra = rng.choice(K, size=int(rng.integers(1, K)), replace=False).tolist()
            out.append(frozenset([str(y), *map(str, extra)]))
        else:
            out.append(str(y))
    return out


def _partial_task(seed, valued=False, G=0, K=3, n_sent=6, max_len=4, rules=False):
    """A random chain with partial labels over labels '0'..'K-1' (ids = the labels), its
    tokens (for naive_phi), the annotation per token and the PartialLabels."""
    rng = np.random.default_rng(seed)
    X, Y, n_obs, tokens = random_chain(rng, n_sent, K, 4, valued, max_len=max_len, G=G)
    cells = _annotate(rng, Y, K)
    if not cells:  # (every sentence drawn empty: hypothesis found seed 34 with n_sent 3)
        return _partial_task(seed + 10_007, valued, G, K, n_sent, max_len, rules)
    classes = [str(k) for k in range(K)]
    gold, ap, ai = encode_partial([cells], classes, len(cells))
    if ap is None:  # (every cell known: make one unknown)
        cells[0] = None
        gold, ap, ai = encode_partial([cells], classes, len(cells))
    cons = None
    if rules:  # random transition rules that the gold tagging obeys
        allowed = rng.random((K, K)) < 0.6
        first, last = rng.random(K) < 0.7, rng.random(K) < 0.7
        sp = X.sent_ptr
        for s in range(len(sp) - 1):
            a, b = int(sp[s]), int(sp[s + 1])
            if b > a:
                first[Y[a]] = last[Y[b - 1]] = True
                for t in range(a + 1, b):
                    allowed[Y[t - 1], Y[t]] = True
        cons = (allowed, first, last)
    X.allowed_ptr, X.allowed_idx, X.label_rules = ap, ai, cons
    task = SequenceTask(X, gold, K, n_obs, n_bigram_obs=G)
    w = rng.normal(scale=0.7, size=task.dim)
    return task, w, tokens, cells, partial_labels(ap, ai, cons)


def _obeys(y, cons):
    if cons is None:
        return True
    allowed, first, last = cons
    inner = all(allowed[a, b] for a, b in itertools.pairwise(y))
    return bool(first[y[0]] and last[y[-1]] and inner)


def _brute(task, w, tokens, cells, i, cons):
    """(log Z − log Z_a, E_p[Φ] − E_{p_a}[Φ]) of sentence i by enumerating every tagging;
    a sentence whose every cell is one label: the consistent tagging is its gold one."""
    K, F, G = task.K, task.F, task.G
    a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
    toks, c = tokens[a:b], cells[a:b]
    ys = list(itertools.product(range(K), repeat=b - a))
    phis = np.array([naive_phi(F, K, G, toks, y) for y in ys])
    s = phis @ w
    full = all(isinstance(x, str) for x in c)

    def ok(y):
        consistent = all(x is None or (str(k) == x if isinstance(x, str) else str(k) in x)
                         for x, k in zip(c, y, strict=True))
        return consistent and (full or _obeys(y, cons))

    keep = np.array([ok(y) for y in ys])
    logz = np.logaddexp.reduce(s)
    if not keep.any():
        return np.inf, None
    logza = np.logaddexp.reduce(s[keep])
    p = np.exp(s - logz)
    pa = np.exp(np.where(keep, s - logza, -np.inf))
    return logz - logza, p @ phis - pa @ phis


@pytest.mark.parametrize("valued,G,rules", [(False, 0, False), (True, 0, True),
                                            (True, 3, False), (False, 2, True)])
def test_constrained_forward_backward_equals_enumeration(valued, G, rules):
    task, w, tokens, cells, part = _partial_task(11 + G + 7 * valued + 3 * rules, valued, G,
                                                 rules=rules)
    cons = task.label_rules
    checked = 0
    for i in range(task.n_examples):
        if task.sent_ptr[i + 1] == task.sent_ptr[i]:
            continue
        g = np.zeros(task.dim)
        nll = partial_nll_gradient_kernel(w, task.F, task.K, task.chain, task.Y, part,
                                          np.array([i]), g, np.zeros(3, np.int64))
        want, wg = _brute(task, w, tokens, cells, i, cons)
        if not np.isfinite(want):
            assert nll == np.inf
            continue
        assert nll == pytest.approx(want, rel=1e-10, abs=1e-10)
        np.testing.assert_allclose(g, wg, atol=1e-9)
        checked += 1
    assert checked >= 3


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.booleans(), st.sampled_from([0, 2]))
@example(34, False, 0)  # (every sentence drawn empty)
def test_partial_likelihood_equals_enumeration_hypothesis(seed, rules, G):
    task, w, tokens, cells, part = _partial_task(seed, G=G, n_sent=3, rules=rules)
    for i in range(task.n_examples):
        if task.sent_ptr[i + 1] == task.sent_ptr[i]:
            continue
        g = np.zeros(task.dim)
        nll = partial_nll_gradient_kernel(w, task.F, task.K, task.chain, task.Y, part,
                                          np.array([i]), g, np.zeros(3, np.int64))
        want, wg = _brute(task, w, tokens, cells, i, task.label_rules)
        if np.isfinite(want):
            assert nll == pytest.approx(want, rel=1e-9, abs=1e-9)
            np.testing.assert_allclose(g, wg, atol=1e-8)
        else:
            assert nll == np.inf


@pytest.mark.parametrize("G", [0, 2])
def test_large_weights_take_the_log_space_path(G):
    """Weights in the hundreds underflow the scaled recursion: the log-space fallback gives
    the same partial-label likelihood as enumeration."""
    task, w, tokens, cells, part = _partial_task(5 + G, G=G, rules=True, n_sent=10)
    w = w * 400.0
    for i in range(task.n_examples):
        if task.sent_ptr[i + 1] == task.sent_ptr[i]:
            continue
        g = np.zeros(task.dim)
        nll = partial_nll_gradient_kernel(w, task.F, task.K, task.chain, task.Y, part,
                                          np.array([i]), g, np.zeros(3, np.int64))
        want, _ = _brute(task, w, tokens, cells, i, task.label_rules)
        if np.isfinite(want):
            assert nll == pytest.approx(want, rel=1e-8, abs=1e-6)


def test_partial_gradient_matches_finite_differences():
    task, w, _, _, _ = _partial_task(21, valued=True, G=2, n_sent=8, rules=True)
    obj = CrfObjective(task, c2=0.3, threads=2)
    try:
        f, g = obj(w)
        assert np.isfinite(f)
        rng = np.random.default_rng(0)
        for j in rng.choice(task.dim, 30, replace=False):
            e = np.zeros(task.dim)
            e[j] = 1e-5
            fd = (obj(w + e)[0] - obj(w - e)[0]) / 2e-5
            assert g[j] == pytest.approx(fd, rel=1e-5, abs=1e-6)
    finally:
        obj.close()


def test_fully_labelled_data_gives_todays_objective_exactly():
    """Every token labelled: the partial kernel over a one-label-per-token CSR (with or
    without scheme rules) equals the fully labelled kernel bit for bit, and the estimator
    builds no CSR (today's kernel)."""
    rng = np.random.default_rng(3)
    X, Y, n_obs, _ = random_chain(rng, 10, 3, 4, True, G=2)
    task = SequenceTask(X, Y, 3, n_obs, n_bigram_obs=2)
    w = rng.normal(size=task.dim)
    ex = np.arange(task.n_examples)
    g0 = np.zeros(task.dim)
    f0 = nll_gradient_kernel(w, task.F, 3, task.chain, task.Y, ex, g0, np.zeros(3, np.int64))
    ap = np.arange(Y.shape[0] + 1, dtype=np.int64)
    for cons in (None, (np.zeros((3, 3), bool), np.zeros(3, bool), np.zeros(3, bool))):
        g1 = np.zeros(task.dim)
        f1 = partial_nll_gradient_kernel(w, task.F, 3, task.chain, task.Y,
                                         partial_labels(ap, Y, cons), ex, g1,
                                         np.zeros(3, np.int64))
        assert f1 == f0
        assert np.array_equal(g1, g0)
    gold, p, i = encode_partial([["a", "b"], ["b"]], ["a", "b"], 3)
    assert p is None and i is None and gold.tolist() == [0, 1, 1]


def test_unknown_everywhere_is_zero_loss_and_sets_of_all_labels_too():
    """A sentence whose every token is unknown (or a set of every label) has log Z_a = log Z:
    no loss and no gradient."""
    rng = np.random.default_rng(8)
    X, Y, n_obs, _ = random_chain(rng, 4, 3, 4, False)
    n = int(X.sent_ptr[-1])
    for cell in (None, frozenset("012")):
        gold, ap, ai = encode_partial([[cell] * n], list("012"), n)
        X.allowed_ptr, X.allowed_idx = ap, ai
        task = SequenceTask(X, gold, 3, n_obs)
        w = rng.normal(size=task.dim)
        g = np.zeros(task.dim)
        f = partial_nll_gradient_kernel(w, task.F, 3, task.chain, task.Y,
                                        partial_labels(ap, ai), np.arange(task.n_examples), g,
                                        np.zeros(3, np.int64))
        assert f == pytest.approx(0.0, abs=1e-10)
        np.testing.assert_allclose(g, 0.0, atol=1e-10)


def test_first_infeasible_finds_the_cell():
    labels = ["B-PER", "I-PER", "O"]
    cons = scheme_transitions(labels, "iob2")
    Y = [["O", "B-PER", None], ["O", frozenset({"I-PER", "O"}), "O"],
         ["O", None, frozenset({"I-PER"})]]
    gold, ap, ai = encode_partial(Y, labels, 9)
    ptr = np.array([0, 3, 6, 9], np.int64)
    assert first_infeasible(ptr, ap, ai, 3, cons) == -1
    Y[2][:2] = [None, "O"]  # O then I-PER: nothing consistent at the last cell
    gold, ap, ai = encode_partial(Y, labels, 9)
    assert first_infeasible(ptr, ap, ai, 3, cons) == 8
    assert first_infeasible(ptr, ap, ai, 3, None) == -1  # (without the scheme: fine)


COLUMNS = """El\tDA\tO
Gobierno\tNC\tB-ORG
de\tSP\tI-ORG

Juan\tNC\tB-PER|B-ORG
Perez\tNC\t?
vino\tVM\tO
"""


def test_reading_unknown_and_set_cells(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text(COLUMNS)
    c = read_tagged(p, "columns", unknown_label="?")
    assert c.tags == [["O", "B-ORG", "I-ORG"], [frozenset({"B-PER", "B-ORG"}), None, "O"]]
    assert (c.n_unknown, c.n_sets) == (1, 1)
    plain = read_tagged(p, "columns")  # (off: the cells are labels)
    assert plain.tags[1] == ["B-PER|B-ORG", "?", "O"] and plain.n_unknown == 0
    bad = tmp_path / "bad.txt"
    bad.write_text(COLUMNS.replace("B-PER|B-ORG", "B-PER|"))
    with pytest.raises(InputError, match=r"bad\.txt:5: bad label set"):
        read_tagged(bad, "columns", unknown_label="?")


def test_reading_conllu_cells_and_their_lines(tmp_path):
    rows = ["# sent_id = 1", "1\tEl\tel\tDET\tDA\t_\t2\tdet\t_\t_",
            "2-3\tdel\t_\t_\t_\t_\t_\t_\t_\t_",
            "2\tde\tde\tADP|NOUN\tSP\t_\t0\troot\t_\t_", "3\tel\tel\t?\tDA\t_\t2\tdet\t_\t_", ""]
    p = tmp_path / "p.conllu"
    p.write_text("\n".join(rows) + "\n")
    c = read_tagged(p, "conllu", unknown_label="?")
    assert c.tags == [["DET", frozenset({"ADP", "NOUN"}), None]]
    from demidcd.io.tagged import token_line

    assert [token_line(c, 0, t) for t in range(3)] == [2, 4, 5]
    feats = [r.split("\t") for r in rows[1:5]]  # FEATS as the labels: "|" is its syntax
    for f, v in zip(feats, ["A=1", "_", "A=1|B=2", "?"], strict=True):
        f[5] = v
    p.write_text("\n".join([rows[0], *map("\t".join, feats), ""]) + "\n")
    c = read_tagged(p, "conllu", 6, unknown_label="?")
    assert c.tags == [["A=1", "A=1|B=2", None]] and (c.n_sets, c.n_unknown) == (0, 1)


def test_a_set_admitting_no_tagging_is_refused_with_its_line(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text(COLUMNS + "\nX\tNC\tO\nY\tNC\tI-ORG|I-PER\n")
    r = subprocess.run([sys.executable, "-m", "demidcd", "train", "--train", str(p),
                        "--format", "columns", "--task", "ner", "--algorithm", "crf",
                        "--model", str(tmp_path / "m.npz")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr
    assert f"{p}:10:" in err[0] and "IOB2" in err[0] and "I-ORG|I-PER" in err[0]
    # the library: the sentence and token
    X = [["El", "Gobierno"], ["X", "Y"]]
    Y = [["O", "B-ORG"], ["O", {"I-ORG", "I-PER"}]]
    with pytest.raises(PartialLabelError, match="sentence 2, token 2"):
        NamedEntityTagger(algorithm="crf", label_scheme="iob2").fit(X, Y)


def _small_corpus(seed=0, n=60):
    rng = np.random.default_rng(seed)
    words = {"PER": ["Juan", "Ana", "Luis"], "LOC": ["Madrid", "Lima", "Quito"]}
    X, Y = [], []
    for _ in range(n):
        typ = ["PER", "LOC"][int(rng.integers(2))]
        e = words[typ][int(rng.integers(3))]
        X.append(["el", "dijo", e, "que", "si"])
        Y.append(["O", "O", f"B-{typ}", "O", "O"])
    return X, Y


def test_library_fit_with_unknown_and_set_labels():
    X, Y = _small_corpus()
    Yp = [list(y) for y in Y]
    for k, y in enumerate(Yp):
        if k % 3 == 0:
            y[2] = None
        elif k % 3 == 1:
            y[2] = {"B-PER", "B-LOC"} if y[2] != "O" else y[2]
        y[0] = None if k % 2 else y[0]
    est = NamedEntityTagger(algorithm="crf", max_iterations=30, c1=0.0, c2=0.01)
    est.fit(X, Yp)
    assert est.predict(X[:9]) == Y[:9]
    m = est.metrics(X, Yp)
    assert m["unknown"] > 0 and m["sets"] > 0
    task = est.training_task(X, Yp)  # (the objective of partial data: its CSR, gold -1)
    assert task.allowed_ptr is not None and task.Y.min() == -1
    assert est.training_task(X, Y).allowed_ptr is None
    svm = NamedEntityTagger(algorithm="dcd", label_scheme="iob2").fit(X, Yp)  # by CCCP
    assert svm.predict(X[:9]) == Y[:9]
    assert svm.result_.extra["partial"]["partial_examples"] > 0
    with pytest.raises(OptionError, match="crf"):  # a learner without partial labels
        SequenceTagger(algorithm="perceptron").fit(X, Yp)


def test_unseen_transitions_keep_those_a_partial_token_may_take():
    X = EncodedSequences(np.array([0, 3], np.int64), np.arange(4, dtype=np.int64),
                         np.zeros(3, np.int32))
    gold, ap, ai = encode_partial([["a", None, "b"]], ["a", "b", "c"], 3)
    X.allowed_ptr, X.allowed_idx = ap, ai
    task = SequenceTask(X, gold, 3, 1)
    frozen = set((unseen_transitions(task) - task.u_rows * 3).tolist())
    K1 = 4
    for j in range(3):  # a → any, any → b are possible; c → a is not
        assert 0 * K1 + j not in frozen and j * K1 + 1 not in frozen
    assert 2 * K1 + 0 in frozen
