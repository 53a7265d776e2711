"""Dependency parsing: single-root Eisner / Chu-Liu-Edmonds against brute force over all
(projective) single-root trees, labelled arc scores and loss augmentation, φ / Δ / score
identities, the CoNLL-U / CoNLL-X reader and writer (UD format rules of the output), and the
estimator on every learner."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.errors import InputError, ModelFileError, OptionError
from demidcd.estimators import DependencyParser
from demidcd.io.dependency import corpus_from_lists, read_dependency, write_dependency
from demidcd.tasks.dependency.decoding import CLE, EISNER, cle_ws, eisner_ws, workspace
from demidcd.tasks.dependency.encoding import encode_trees, is_punct
from demidcd.tasks.dependency.features import LABEL_LOSS
from demidcd.tasks.dependency.spec import label_set
from demidcd.tasks.dependency.task import DependencyTask
from demidcd.tasks.phi import FNV_OFFSET, FNV_PRIME

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def eisner(S: np.ndarray, N: int, heads: np.ndarray) -> float:
    """The best projective single-root tree of the flat N×N scores S into heads (Eisner with
    its own scratch); returns its score."""
    wf, wi, _ = workspace(N, EISNER)
    return eisner_ws(S, N, heads, wf, wi)


def chu_liu_edmonds(S: np.ndarray, N: int, heads: np.ndarray) -> float:
    """The best single-root tree of the flat N×N scores S into heads (Chu-Liu-Edmonds with its
    own scratch); returns its score."""
    wf, wi, wb = workspace(N, CLE)
    return cle_ws(S, N, heads, wf, wi, wb)


def hash_heads(y: np.ndarray) -> int:
    """The record hash of a structure, re-implemented in Python as the oracle of the kernel's:
    FNV-1a over the heads of words 1..n, each followed by its label id + 1 when the structure
    is a (2, n) array with labels (ids ≥ 0), as a signed int64."""
    y = np.asarray(y, np.int64)
    seq = y.reshape(-1)
    if y.ndim == 2:
        seq = np.stack([y[0], y[1] + 1], 1).reshape(-1) if (y[1] >= 0).any() else y[0]
    h = int(FNV_OFFSET)
    for v in seq:
        h = ((h ^ int(v)) * int(FNV_PRIME)) & (2**64 - 1)
    return int(np.array([h], np.uint64).view(np.int64)[0])


# ------------------------------------------------------------------------- brute force
@functools.cache
def all_trees(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every head vector (positions 0..n, column 0 = 0) of a tree rooted at 0 over n words, a
    mask of the projective ones and a mask of those with one root child, by filtering all
    (n+1)^n head vectors."""
    H = np.indices((n + 1,) * n, dtype=np.int8).reshape(n, -1).T
    H = H[(H != np.arange(1, n + 1, dtype=np.int8)).all(1)]
    Y = np.concatenate([np.zeros((H.shape[0], 1), np.int8), H], axis=1).astype(np.int64)
    pos = np.tile(np.arange(1, n + 1), (Y.shape[0], 1))
    for _ in range(n):
        pos = np.take_along_axis(Y, pos, axis=1)
    Y = Y[(pos == 0).all(1)]
    lo = np.minimum(Y[:, 1:], np.arange(1, n + 1))
    hi = np.maximum(Y[:, 1:], np.arange(1, n + 1))
    proj = np.ones(Y.shape[0], bool)
    for i in range(n):
        for j in range(n):
            proj &= ~((lo[:, i] < lo[:, j]) & (lo[:, j] < hi[:, i]) & (hi[:, i] < hi[:, j]))
    single = (Y[:, 1:] == 0).sum(1) == 1
    return Y, proj, single


def candidates(n: int, decoder: str) -> np.ndarray:
    """The trees a decoder searches: single-root, and projective for Eisner."""
    Y, proj, single = all_trees(n)
    return Y[single & proj] if decoder == "eisner" else Y[single]


def tree_scores(S: np.ndarray, Y: np.ndarray) -> np.ndarray:
    n = Y.shape[1] - 1
    return S[Y[:, 1:], np.arange(1, n + 1)].sum(1)


def is_tree(heads, n: int, projective: bool = False) -> bool:
    """heads of words 1..n form a tree rooted at 0 with exactly one root child (and,
    optionally, without crossing arcs)."""
    y = [-1, *map(int, heads)]
    if len(y) != n + 1 or any(not 0 <= y[d] <= n or y[d] == d for d in range(1, n + 1)):
        return False
    if n and sum(y[d] == 0 for d in range(1, n + 1)) != 1:
        return False
    for d in range(1, n + 1):
        x, steps = d, 0
        while x != 0 and steps <= n:
            x, steps = y[x], steps + 1
        if x != 0:
            return False
    if projective:
        arcs = [(min(y[d], d), max(y[d], d)) for d in range(1, n + 1)]
        if any(a < c < b < e for a, b in arcs for c, e in arcs):
            return False
    return True


def test_tree_enumeration_counts():
    # Cayley: (n+1)^(n-1) trees rooted at 0 over n words, n^(n-1) of them with one root child
    # (a rooted tree on the n words); projective ones are a strict subset
    for n in range(1, 6):
        Y, proj, single = all_trees(n)
        assert Y.shape[0] == (n + 1) ** (n - 1)
        assert single.sum() == n ** (n - 1)
        assert 0 < (proj & single).sum() <= single.sum()
    Y, proj, single = all_trees(4)
    assert (proj & single).sum() < single.sum()


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_decoders_equal_brute_force(decoder):
    rng = np.random.default_rng(1 if decoder == "eisner" else 2)
    fn = eisner if decoder == "eisner" else chu_liu_edmonds
    for n in [1, 2, 3, 4, 5, 6, 7, 7, 7]:
        cand = candidates(n, decoder)
        for _ in range(6 if n < 7 else 2):
            N = n + 1
            S = rng.normal(size=(N, N))
            if rng.random() < 0.3:  # ties
                S = np.round(S)
            if rng.random() < 0.3:  # root arcs the best by far: unconstrained, all words on 0
                S[0] += 5.0
            heads = np.zeros(N, np.int32)
            got = fn(S.ravel().copy(), N, heads)
            best = tree_scores(S, cand).max()
            assert heads[0] == -1
            assert is_tree(heads[1:], n, projective=decoder == "eisner")
            assert got == pytest.approx(best, abs=1e-9)
            assert S[heads[1:], np.arange(1, N)].sum() == pytest.approx(best, abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(-3, 3) | st.floats(-5, 5, allow_nan=False),
                         min_size=(n + 1) ** 2, max_size=(n + 1) ** 2))))
def test_single_root_decoders_equal_brute_force_hypothesis(case):
    n, vals = case
    N = n + 1
    S = np.array(vals, np.float64).reshape(N, N)
    for decoder, fn in (("eisner", eisner), ("cle", chu_liu_edmonds)):
        heads = np.zeros(N, np.int32)
        got = fn(S.ravel().copy(), N, heads)
        assert is_tree(heads[1:], n, projective=decoder == "eisner")
        assert got == pytest.approx(tree_scores(S, candidates(n, decoder)).max(), abs=1e-9)


def test_cle_beats_eisner_on_non_projective_optimum():
    # scores whose best single-root tree is non-projective
    rng = np.random.default_rng(3)
    Y, proj, single = all_trees(4)
    Y, proj = Y[single], proj[single]
    for _ in range(500):
        S = rng.normal(size=(5, 5))
        sc = tree_scores(S, Y)
        if not proj[sc.argmax()]:
            break
    else:
        pytest.fail("no non-projective optimum found")
    h = np.zeros(5, np.int32)
    assert chu_liu_edmonds(S.ravel().copy(), 5, h) == pytest.approx(sc.max())
    assert eisner(S.ravel().copy(), 5, h) == pytest.approx(sc[proj].max())
    assert sc[proj].max() < sc.max()


def test_decoders_return_trees_on_long_sentences():
    rng = np.random.default_rng(4)
    for n in (10, 25, 60):
        N = n + 1
        for k in range(4):
            S = rng.normal(size=(N, N)) * rng.choice([0.1, 1.0, 10.0])
            if k == 3:
                S[0] += 100.0  # every word prefers the root
            he = np.zeros(N, np.int32)
            hc = np.zeros(N, np.int32)
            se = eisner(S.ravel().copy(), N, he)
            sc = chu_liu_edmonds(S.ravel().copy(), N, hc)
            assert is_tree(he[1:], n, projective=True)
            assert is_tree(hc[1:], n)
            assert sc >= se - 1e-9  # every projective tree is a tree


# ------------------------------------------------------------------------- the task
def random_treebank(rng, n_sent: int, max_len: int = 7, n_words: int = 12, n_pos: int = 4):
    """Random sentences, trees (possibly with several root children) and DEPRELs: mostly
    ``root`` on root words, else ``b``, which also labels other words (allowed on both)."""
    words, pos, heads, rels = [], [], [], []
    for _ in range(n_sent):
        n = int(rng.integers(1, max_len + 1))
        words.append([f"w{rng.integers(n_words)}" + ("xxxxx" if rng.random() < 0.3 else "")
                      for _ in range(n)])
        pos.append([f"P{rng.integers(n_pos)}" for _ in range(n)])
        h = [0] * n  # a random tree: attach words in random order to an attached word
        attached = [0]
        for d in rng.permutation(np.arange(1, n + 1)):
            h[d - 1] = int(rng.choice(attached))
            attached.append(int(d))
        heads.append(h)
        rels.append([("root" if rng.random() < 0.8 else "b") if x == 0 else
                     str(rng.choice(["a", "b", "c", "d:sub"])) for x in h])
    return words, pos, heads, rels


@pytest.fixture(scope="module", params=["unlabelled", "unlabelled, two POS", "labelled",
                                        "labelled, two POS"])
def tiny(request):
    """(task factory, words, heads, label ids or None) of a random treebank."""
    rng = np.random.default_rng(5)
    words, pos, heads, rels = random_treebank(rng, 12)
    cpos = None
    if "two POS" in request.param:
        cpos = [[p[:1] + str(int(p[1:]) % 2) for p in s] for s in pos]
    ids = arcs = None
    if request.param.startswith("labelled"):
        labels, arcs = label_set(heads, rels)
        assert labels == ["a", "b", "c", "d:sub", "root"] and arcs == [2, 3, 2, 2, 1]
        ids = [[labels.index(r) for r in rs] for rs in rels]
    enc = encode_trees(words, pos, heads, cpos, ids)
    assert (enc.cpos.shape[0] > 0) == (cpos is not None)

    def make(hashing: int, decoder: str = "eisner") -> DependencyTask:
        return DependencyTask(enc, hashing=hashing, decoder=decoder, label_arcs=arcs)

    return make, words, heads, ids


def gold_structure(heads, ids, i):
    n = len(heads[i])
    return np.array([heads[i], ids[i] if ids is not None else [-1] * n])


def arc_table(task, w, i, gold=None):
    """max_l s(h, d, l) (+ the arc's Δ against ``gold`` = (heads, labels)) by brute force over
    the labels of :meth:`DependencyTask.label_scores` (unlabelled: the arc scores)."""
    N = int(task.enc.tok_ptr[i + 1] - task.enc.tok_ptr[i])
    if task.n_labels == 0:
        A = task.arc_scores(w, i)[0].copy()
        if gold is not None:
            A += np.arange(N)[:, None] != np.r_[-1, gold[0]][None, :]
        return A
    T = task.label_scores(w, i)
    if gold is not None:
        g, gl = np.r_[-1, gold[0]], np.r_[-1, gold[1]]
        wrong_head = np.arange(N)[:, None] != g[None, :]
        wrong_label = np.arange(task.n_labels)[None, None, :] != gl[None, :, None]
        T = T + np.where(wrong_head[:, :, None], 1.0, LABEL_LOSS * wrong_label)
    return T.max(2)


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
@pytest.mark.parametrize("augment", [False, True])
def test_task_inference_equals_brute_force(tiny, decoder, augment):
    make, words, heads, ids = tiny
    task = make(256, decoder)  # small D: many collisions
    rng = np.random.default_rng(6)
    for _ in range(3):
        w = rng.normal(size=task.dim)
        flat, labs, ptr = task.parse(w, np.arange(task.n_examples), augment)
        for i in range(task.n_examples):
            n = len(words[i])
            gold = gold_structure(heads, ids, i)
            A = arc_table(task, w, i, gold if augment else None)
            best = tree_scores(A, candidates(n, decoder)).max()
            y = flat[ptr[i] + 1:ptr[i + 1]]
            yl = labs[ptr[i] + 1:ptr[i + 1]]
            assert is_tree(y, n, projective=decoder == "eisner")
            assert ((yl >= 0) if ids is not None else (yl == -1)).all()
            if ids is not None:  # the root word carries a root label, the others not
                kind = np.where(y == 0, 1, 2)
                assert (task.label_arcs[yl] & kind).all()
            delta = task.phi_delta(i, np.stack([y, yl]))[2] if augment else 0.0
            got = task.score(w, i, np.stack([y, yl])) + delta
            assert got == pytest.approx(best, abs=1e-8)


def test_cached_arc_scores_match_label_scores_and_tree_score(tiny):
    make, words, heads, ids = tiny
    task = make(1 << 12)
    w = np.random.default_rng(7).normal(size=task.dim)
    for i in range(task.n_examples):
        n = len(words[i])
        S, lab = task.arc_scores(w, i)
        gold = gold_structure(heads, ids, i)
        h, d = np.array(heads[i]), np.arange(1, n + 1)
        if ids is None:
            assert (lab == -1).all()
            assert task.score(w, i, heads[i]) == pytest.approx(S[h, d].sum())
            continue
        T = task.label_scores(w, i)
        ok = np.isfinite(T.max(2))
        np.testing.assert_allclose(S[ok], T.max(2)[ok], rtol=1e-12, atol=1e-9)
        H, Dd = np.nonzero(ok)
        np.testing.assert_allclose(T[H, Dd, lab[H, Dd]], S[H, Dd], rtol=1e-12, atol=1e-9)
        assert task.score(w, i, gold) == pytest.approx(T[h, d, np.array(ids[i])].sum())


def test_structures_are_validated(tiny):
    make, words, heads, ids = tiny
    task = make(256)
    n = len(words[0])
    with pytest.raises(ValueError):
        task.score(np.zeros(256), 0, [n + 1] * n)
    if ids is not None:
        with pytest.raises(ValueError, match="label"):
            task.score(np.zeros(256), 0, np.array([heads[0], [task.n_labels] * n]))
        with pytest.raises(ValueError, match=r"\(2, n\)"):
            task.score(np.zeros(256), 0, heads[0])


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_records_phi_delta_consistency(tiny, decoder):
    make, words, heads, ids = tiny
    task = make(1 << 10, decoder)
    rng = np.random.default_rng(8)
    w = rng.normal(size=task.dim)
    ex = np.arange(task.n_examples)
    b = task.loss_augmented(w, ex)
    flat, labs, ptr = task.parse(w, ex, True)
    assert len(b) > 0
    seen = set()
    for k in range(len(b)):
        i = int(b.ex[k])
        seen.add(i)
        y = np.stack([flat[ptr[i] + 1:ptr[i + 1]], labs[ptr[i] + 1:ptr[i + 1]]])
        gold = gold_structure(heads, ids, i)
        idx, val, delta = task.phi_delta(i, y)
        wrong_head = y[0] != gold[0]
        want = wrong_head.sum() + LABEL_LOSS * ((y[1] != gold[1]) & ~wrong_head).sum()
        assert delta == b.delta[k] == pytest.approx(want) and delta > 0
        lo, hi = b.ptr[k], b.ptr[k + 1]
        np.testing.assert_array_equal(b.idx[lo:hi], idx)
        np.testing.assert_array_equal(b.val[lo:hi], val)
        assert np.all(np.diff(idx) > 0) and np.all(val != 0)
        margin = task.score(w, i, gold) - task.score(w, i, y)
        assert b.margin[k] == pytest.approx(margin, abs=1e-9)
        assert float(w[idx] @ val) == pytest.approx(margin, abs=1e-9)
        assert b.hash[k] == hash_heads(y)
    for i in set(range(task.n_examples)) - seen:  # no record: the argmax is the gold tree
        np.testing.assert_array_equal(flat[ptr[i] + 1:ptr[i + 1]], heads[i])
    idx, val, delta = task.phi_delta(0, gold_structure(heads, ids, 0))
    assert delta == 0 and idx.size == 0


def test_record_hash_tells_labels_apart():
    h = hash_heads
    assert h(np.array([[2, 0], [0, 1]])) != h(np.array([[2, 0], [1, 1]]))
    assert h(np.array([[2, 0], [-1, -1]])) == h(np.array([2, 0]))


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_zero_weights_give_the_largest_loss(tiny, decoder):
    # w = 0: every labelled tree scores 0, so loss-augmented inference finds the max-Δ tree
    make, words, heads, ids = tiny
    task = make(64, decoder)
    b = task.loss_augmented(np.zeros(task.dim), np.arange(task.n_examples))
    got = dict(zip(b.ex.tolist(), b.delta.tolist(), strict=True))
    for i, h in enumerate(heads):
        n = len(h)
        N = n + 1
        loss = (np.arange(N)[:, None] != np.r_[-1, h][None, :]).astype(float)
        if ids is not None:  # a right head with another allowed label
            for d in range(1, N):
                g, gl = h[d - 1], ids[i][d - 1]
                need = 1 if g == 0 else 2
                if any(task.label_arcs[k] & need for k in range(task.n_labels) if k != gl):
                    loss[g, d] = LABEL_LOSS
        best = tree_scores(loss, candidates(n, decoder)).max()
        assert got.get(i, 0) == pytest.approx(best)
        assert b.margin[b.ex == i].sum() == 0


def test_metric_with_and_without_punctuation():
    words = [["Hello", ",", "world", "!"], ["Yes", "..."]]
    pos = [["UH", ",", "NN", "."], ["UH", "."]]
    gold = [[3, 3, 0, 3], [0, 1]]
    enc = encode_trees(words, pos, gold)
    task = DependencyTask(enc, hashing=64)
    pred = [np.array([3, 1, 0, 1]), np.array([0, 1])]
    m = task.metric(task.gold(np.arange(2)), pred)
    assert m["uas"] == pytest.approx(4 / 6)  # wrong: ",", "!"
    assert m["uas_no_punct"] == pytest.approx(3 / 3)
    assert m["words"] == 6 and m["words_no_punct"] == 3
    assert "las" not in m
    assert is_punct("...") and is_punct("«") and not is_punct("a.") and not is_punct("$")
    # labelled: 0 = punct, 1 = root, 2 = discourse; LAS counts words with head and label right
    lab = [[2, 0, 1, 0], [1, 0]]
    enc = encode_trees(words, pos, gold, labels=lab)
    task = DependencyTask(enc, hashing=64, label_arcs=np.array([2, 1, 2]))
    pred = [np.array([[3, 3, 0, 3], [0, 0, 1, 0]]), np.array([[0, 1], [1, 2]])]
    m = task.metric(task.gold(np.arange(2)), pred)
    assert m["uas"] == 1.0 and m["las"] == pytest.approx(4 / 6)  # wrong: "Hello", "..."
    assert m["las_no_punct"] == pytest.approx(2 / 3) and m["score"] == m["uas"]


# ------------------------------------------------------------------------- reader / writer
CONLLU = """# sent_id = 1
# text = Don't stop.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\tVBP\t_\t3\taux\t3:aux\t_
2\tn't\tnot\tPART\tRB\t_\t3\tadvmod\t3:advmod\t_
3\tstop\tstop\tVERB\tVB\t_\t0\troot\t0:root\tSpaceAfter=No
3.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t3:conj\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t3:punct\t_

# sent_id = 2
1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t0:root\t_
"""

CONLLX = """1\tThe\tthe\tDT\tDT\t_\t2\tNMOD\t_\t_
2\tdog\tdog\tNN\tNN\t_\t3\tSBJ\t_\t_
3\tbarks\tbark\tVB\tVBZ\t_\t0\tROOT\t_\t_

1\tHi\thi\tUH\tUH\t_\t0\tROOT\t_\t_
"""


def ud_problems(text: str) -> list[str]:
    """What the CoNLL 2018 UD evaluator (and UD's validator on the basic tree) would reject in a
    predicted CoNLL-U text: word ids 1..n in order, HEAD an integer in 0..n, exactly one word
    with head 0, no cycle, DEPREL not empty and ``root`` exactly on the head-0 word (the
    other fields and the empty nodes are the input's: issue 56)."""
    out = []
    sentences, cur = [], []
    for line in [*text.split("\n"), ""]:
        if not line:
            if cur:
                sentences.append(cur)
            cur = []
        elif not line.startswith("#"):
            f = line.split("\t")
            if len(f) != 10:
                out.append(f"not 10 columns: {line!r}")
            elif "-" not in f[0] and "." not in f[0]:
                cur.append(f)
    for s, words in enumerate(sentences):
        n = len(words)
        if [f[0] for f in words] != [str(k) for k in range(1, n + 1)]:
            out.append(f"sentence {s}: ids not 1..{n}")
        heads = [int(f[6]) if f[6].isdigit() else -1 for f in words]
        if any(not 0 <= h <= n for h in heads):
            out.append(f"sentence {s}: HEAD out of range")
            continue
        if heads.count(0) != 1:
            out.append(f"sentence {s}: {heads.count(0)} roots")
        if not is_tree(heads, n) and heads.count(0) == 1:
            out.append(f"sentence {s}: a cycle")
        for f, h in zip(words, heads, strict=True):
            if not f[7] or f[7].isspace() or (h == 0) != (f[7] == "root"):
                out.append(f"sentence {s}: DEPREL {f[7]!r} with HEAD {h}")
    return out


def test_read_conllu_skips_multiword_and_empty_nodes(tmp_path):
    p = tmp_path / "a.conllu"
    p.write_text(CONLLU)
    c = read_dependency(p, "conllu", "upos")
    assert c.words == [["Do", "n't", "stop", "."], ["Yes"]]
    assert c.pos == [["AUX", "PART", "VERB", "PUNCT"], ["INTJ"]]
    assert c.heads == [[3, 3, 0, 3], [0]]
    assert c.deprels == [["aux", "advmod", "root", "punct"], ["root"]] and c.has_deprels
    x = read_dependency(p, "conllu", "xpos")
    assert x.pos[0] == ["VBP", "RB", "VB", "."]
    assert x.other_pos == c.pos and c.other_pos == x.pos
    p.write_text(CONLLU.replace("\tPART\tRB", "\tPART\t_"))
    assert read_dependency(p, "conllu", "upos").other_pos is None
    p.write_text(CONLLU.replace("\troot\t0:root", "\t_\t0:root").replace("aux\t", "_\t")
                 .replace("advmod\t", "_\t").replace("punct\t", "_\t"))
    assert not read_dependency(p, "conllu", "upos").has_deprels


@pytest.mark.parametrize("fmt,text", [("conllu", CONLLU), ("conllx", CONLLX)])
def test_writer_replaces_head_deprel_and_keeps_the_rest(tmp_path, fmt, text):
    p = tmp_path / f"a.{fmt}"
    p.write_text(text)
    c = read_dependency(p, fmt, "xpos")
    out = tmp_path / "out"
    # gold heads and labels back: the text as given, DEPS (PHEAD, PDEPREL), MISC and the empty
    # node included (issue 56: the writer keeps what the parser does not predict)
    write_dependency(out, c, c.heads, c.deprels)
    want = (text + ("" if text.endswith("\n\n") else "\n")).split("\n")
    assert out.read_text() == "\n".join(want)
    # new heads and labels
    new = [[0] + [1] * (len(h) - 1) for h in c.heads]
    rels = [["root"] + [f"r{k}" for k in range(1, len(h))] for h in c.heads]
    write_dependency(out, c, new, rels)
    got = [line.split("\t") for line in out.read_text().split("\n")]
    orig = [line.split("\t") for line in want]
    assert len(got) == len(orig)
    for fa, fb in zip(orig, got, strict=True):
        if len(fa) == 10 and fa[0].isdigit():
            k = int(fa[0])
            assert fb[6] == ("0" if k == 1 else "1")
            assert fb[7] == ("root" if k == 1 else f"r{k - 1}")
            assert fa[:6] == fb[:6] and fa[8:] == fb[8:]
        else:
            assert fa == fb
    c2 = read_dependency(out, fmt, "xpos")
    assert c2.heads == new and c2.deprels == rels and c2.words == c.words
    if fmt == "conllu":
        assert ud_problems(out.read_text()) == []
    # unlabelled read (HEAD and DEPREL "_"), predict-style write without labels: root / _
    u = read_dependency(p, fmt, "upos", labelled=False)
    assert u.heads == [[], []]
    write_dependency(out, u, c.heads)
    back = read_dependency(out, fmt, "upos")
    assert back.heads == c.heads
    assert back.deprels == [["root" if h == 0 else "_" for h in hs] for hs in c.heads]


def test_in_memory_corpus_writes_minimal_conllu(tmp_path):
    c = corpus_from_lists([["a", "b"]], [["X", "Y"]])
    write_dependency(tmp_path / "m.conllu", c, [[2, 0]], [["det", "root"]])
    back = read_dependency(tmp_path / "m.conllu", "conllu", "upos")
    assert back.words == [["a", "b"]] and back.pos == [["X", "Y"]] and back.heads == [[2, 0]]
    assert back.deprels == [["det", "root"]]
    c = corpus_from_lists([["a", "b"]], [["X", "Y"]], [[0, 1]], [["root", "_"]])
    assert not c.has_deprels  # labels on root words only: what an unlabelled parser writes
    c = corpus_from_lists([["a", "b"]], [["X", "Y"]], [[0, 1]], [["root", "dep"]])
    assert c.has_deprels and c.deprels == [["root", "dep"]]
    with pytest.raises(ValueError):
        corpus_from_lists([["a"]], [["X"]], None, [["root"]])


@pytest.mark.parametrize("bad,line,msg", [
    ("1\ta\t_\tX\tX\t_\tz\t_\t_\t_\n", 1, "bad HEAD"),
    ("1\ta\t_\tX\tX\t_\t0\t_\t_\t_\n2\tb\t_\tX\tX\t_\t5\t_\t_\t_\n", 2, "beyond"),
    ("1\ta\t_\tX\tX\t_\t1\t_\t_\t_\n", 1, "own head"),
    ("1\ta\t_\tX\tX\t_\t0\t_\t_\t_\n2\tb\t_\tX\tX\t_\t3\t_\t_\t_\n"
     "3\tc\t_\tX\tX\t_\t2\t_\t_\t_\n", 2, "cycle through word 2"),
    ("1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n", 1, "empty POS"),
    ("1\ta\t_\tX\tX\t_\t0\t_\t_\n", 1, "10 tab-separated"),
    ("2\ta\t_\tX\tX\t_\t0\t_\t_\t_\n", 1, "out of order"),
    ("1\ta\t_\tX\tX\t_\t0\t\t_\t_\n", 1, "empty DEPREL"),
])
def test_reader_errors_name_file_and_line(tmp_path, bad, line, msg):
    p = tmp_path / "bad.conllu"
    p.write_text("# c\n" + bad)
    with pytest.raises(InputError, match=f"bad.conllu:{line + 1}: .*{msg}"):
        read_dependency(p, "conllu", "upos")


def test_conllx_rejects_multiword_lines_and_bad_options(tmp_path):
    p = tmp_path / "a.conll"
    p.write_text(CONLLU)
    with pytest.raises(InputError, match="bad token id '1-2'"):
        read_dependency(p, "conllx", "upos")
    with pytest.raises(OptionError):
        read_dependency(p, "conll", "upos")
    with pytest.raises(OptionError):
        read_dependency(p, "conllu", "lemma")


# ------------------------------------------------------------------------- the estimator
def chain_treebank(rng, n_sent: int, labelled: bool = False):
    """Sentences 'D N V D N' style: determiners attach right, nouns to the verb, verb to root;
    ``labelled``: trees as (head, DEPREL) pairs, det / nsubj / root / obj for the first noun
    after the verb and obl for the later ones (told apart by distance only)."""
    X, Y = [], []
    for _ in range(n_sent):
        k = int(rng.integers(1, 4))
        toks = [("the", "D"), (f"n{rng.integers(20)}", "N"), (f"v{rng.integers(5)}", "V")]
        toks += [("the", "D"), (f"n{rng.integers(20)}", "N")] * k
        heads = [2, 3, 0] + [p for j in range(k) for p in (5 + 2 * j, 3)]
        rels = ["det", "nsubj", "root"] + [r for j in range(k)
                                           for r in ("det", "obj" if j == 0 else "obl")]
        X.append(toks)
        Y.append(list(zip(heads, rels, strict=True)) if labelled else heads)
    return X, Y


@pytest.mark.parametrize("algorithm,threads", [("dcd", 1), ("dcd-light", 1), ("demi-dcd", 2),
                                               ("ms-dcd", 2), ("sp-ipm", 2)])
def test_every_learner_trains_the_labelled_parser(algorithm, threads, shm_guard, tmp_path):
    rng = np.random.default_rng(9)
    X, Y = chain_treebank(rng, 40, labelled=True)
    est = DependencyParser(algorithm=algorithm, threads=threads, hashing=1 << 14,
                           max_epochs=20 if algorithm in ("dcd", "dcd-light", "sp-ipm") else None,
                           time_limit=10)
    est.fit(X, Y)
    m = est.metrics(X, Y)
    assert m["uas"] >= 0.95 and m["las"] >= 0.95 and est.score(X, Y) == m["uas"]
    assert est.labels_ == ["det", "nsubj", "obj", "obl", "root"]
    assert est.label_arcs_ == [2, 2, 2, 2, 1]
    pred = est.predict(X)
    for tree in pred:  # (head, DEPREL) pairs; one root word, labelled root, and only it
        assert [r == "root" for _, r in tree] == [h == 0 for h, _ in tree]
        assert sum(h == 0 for h, _ in tree) == 1
    est.save(tmp_path / "m.npz")
    back = DependencyParser.load(tmp_path / "m.npz")
    assert back.predict(X) == pred
    assert back.get_params() == est.get_params()  # as given: decoder None means eisner
    assert back.labels_ == est.labels_ and back.label_arcs_ == est.label_arcs_
    assert back.meta_["featurizer"]["template_version"] == 2
    assert back._decoder() == "eisner" and back.hashing == 1 << 14 and back.second_pos_ is False
    with pytest.raises(OptionError, match="one POS column"):
        back.predict([[(w, p, p) for w, p in s] for s in X])


def test_unlabelled_parser_with_second_pos_and_cle(tmp_path):
    rng = np.random.default_rng(10)
    X, Y = chain_treebank(rng, 30)
    X3 = [[(w, p, "C" + p) for w, p in s] for s in X]
    est = DependencyParser(decoder="cle", hashing=1 << 12, max_epochs=10).fit(X3, Y)
    assert est.second_pos_ is True and est.labels_ is None and est.score(X3, Y) >= 0.95
    assert "las" not in est.metrics(X3, Y)
    pred = est.predict(X3)
    assert all(isinstance(h, int) for t in pred for h in t)
    assert all(t.count(0) == 1 for t in pred)
    est.save(tmp_path / "m.npz")
    back = DependencyParser.load(tmp_path / "m.npz")
    assert back.meta_["featurizer"]["template_version"] == 1  # what models before labels wrote
    assert back.second_pos_ is True and back.decoder == "cle" and back.labels_ is None
    assert back.predict(X3) == pred
    with pytest.raises(OptionError, match="two POS columns"):
        back.predict(X)


def test_labelled_model_metadata_is_checked(tmp_path):
    from demidcd.io.model import load_model, save_model

    rng = np.random.default_rng(12)
    X, Y = chain_treebank(rng, 10, labelled=True)
    DependencyParser(hashing=1 << 10, max_epochs=2).fit(X, Y).save(tmp_path / "m.npz")
    w, arrays, meta = load_model(tmp_path / "m.npz")
    for fm in ({"label_arcs": [2, 2, 2, 2, 0]}, {"labels": ["a", "a", "b", "c", "root"]},
               {"label_arcs": [2, 2]}, {"label_arcs": [2, 2, 2, 2, 2]}, {"labels": "abcde"}):
        save_model(tmp_path / "bad.npz", w, arrays,
                   {**meta, "featurizer": {**meta["featurizer"], **fm}})
        with pytest.raises(ModelFileError, match="labels"):
            DependencyParser.load(tmp_path / "bad.npz")


def test_parser_options_are_checked():
    with pytest.raises(OptionError, match="decoder"):
        DependencyParser(decoder="mst").fit([[("a", "X")]], [[0]])
    with pytest.raises(OptionError, match=r"\(word, POS\)"):
        DependencyParser().fit([["a"]], [[0]])
    with pytest.raises(OptionError, match="multiple of 16"):
        DependencyParser(hashing=1000).fit([[("a", "X")]], [[0]])
    with pytest.raises(OptionError, match="DEPREL"):
        DependencyParser().fit([[("a", "X"), ("b", "X")]], [[(0, "root"), 1]])


@pytest.mark.slow
def test_ewt_reader_reads_every_sentence():
    path = DATA / "ud_english_ewt" / "en_ewt-ud-dev.conllu"
    if not path.exists():
        pytest.skip("../shared/data is absent")
    c = read_dependency(path, "conllu", "xpos")
    assert len(c) == 2001 and c.n_tokens == 25147
    for h in c.heads:
        assert is_tree(h, len(h))


# ------------------------------------------------------------------------- command line
@pytest.mark.parametrize("fmt", ["conllx", "conllu"])
def test_cli_train_evaluate_predict(tmp_path, capsys, fmt):
    from demidcd.cli import main

    rng = np.random.default_rng(11)
    X, Y = chain_treebank(rng, 30, labelled=True)
    heads = [[h for h, _ in t] for t in Y]
    rels = [[r for _, r in t] for t in Y]
    corpus = corpus_from_lists([[w for w, _ in s] for s in X], [[p for _, p in s] for s in X],
                               heads, rels)
    data = tmp_path / f"train.{fmt}"
    write_dependency(data, corpus, heads, rels)
    text = data.read_text()
    model = tmp_path / "m.npz"
    assert main(["train", "--task", "dependency", "--train", str(data), "--format", fmt,
                 "--pos-column", "upos", "--decoder", "cle", "--algorithm", "dcd",
                 "--max-epochs", "10", "--hashing", "4096", "--model", str(model),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--data", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("UAS: ") and float(out[0].split()[1]) >= 95.0
    assert out[1].startswith("UAS without punctuation: ")
    assert out[2].startswith("LAS: ") and float(out[2].split()[1]) >= 95.0
    assert out[3].startswith("LAS without punctuation: ")
    # predict from a file without HEAD, DEPREL (and DEPS): nothing of the gold to pass through
    blank = tmp_path / f"blank.{fmt}"
    blank.write_text("\n".join("\t".join(f[:6] + ["_", "_", "_"] + f[9:]) if len(f) == 10
                               else "" for f in (line.split("\t") for line in text.split("\n"))))
    pred = tmp_path / f"pred.{fmt}"
    assert main(["predict", "--model", str(model), "--data", str(blank), "--out", str(pred),
                 "--quiet"]) == 0
    back = read_dependency(pred, fmt, "upos")
    assert back.words == corpus.words
    assert np.mean(np.concatenate(back.heads) == np.concatenate(heads)) >= 0.95
    assert np.mean(np.concatenate(back.deprels) == np.concatenate(rels)) >= 0.95
    assert ud_problems(pred.read_text()) == []
    # the labels the model never saw are counted and named on stderr
    other = tmp_path / f"other.{fmt}"
    other.write_text(text.replace("\tobl\t", "\tnmod\t"))
    assert main(["evaluate", "--model", str(model), "--data", str(other)]) == 0
    assert "never saw in training (nmod)" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path / "nope")]) == 2
    assert "nope: no such file" in capsys.readouterr().err


def test_cli_unlabelled_model_writes_root_and_underscores(tmp_path, capsys):
    """A model without labels (as every model before labels): DEPREL root on the head-0 word,
    _ elsewhere, DEPS as given, UAS lines only."""
    from demidcd.cli import main

    rng = np.random.default_rng(13)
    X, Y = chain_treebank(rng, 20)
    corpus = corpus_from_lists([[w for w, _ in s] for s in X], [[p for _, p in s] for s in X], Y)
    data = tmp_path / "train.conllu"
    write_dependency(data, corpus, Y)  # DEPREL "root" / "_": an unlabelled treebank
    model = tmp_path / "m.npz"
    assert main(["train", "--task", "dependency", "--train", str(data), "--algorithm", "dcd",
                 "--max-epochs", "5", "--hashing", "4096", "--model", str(model),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert DependencyParser.load(model).labels_ is None
    assert main(["evaluate", "--model", str(model), "--data", str(ud_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "UAS: " in out and "LAS" not in out
    pred = tmp_path / "pred.conllu"
    assert main(["predict", "--model", str(model), "--data", str(ud_file(tmp_path)),
                 "--out", str(pred), "--quiet"]) == 0
    assert ud_problems(pred.read_text()) == []
    assert "\tadvmod\t" not in pred.read_text()
    # DEPS and the empty node are the input's (issue 56)
    assert "3.1\tgo\tgo\tV\tVB\t_\t_\t_\t3:conj\t_\n" in pred.read_text()
    assert "\t3:advmod\t" in pred.read_text()


def ud_file(tmp_path: Path) -> Path:
    """The CoNLL-U sample with the chain treebank's POS tags."""
    p = tmp_path / "ud.conllu"
    p.write_text(CONLLU.replace("\tAUX\t", "\tD\t").replace("\tVERB\t", "\tV\t"))
    return p
