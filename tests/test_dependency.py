"""Dependency parsing: Eisner / Chu-Liu-Edmonds against brute force over all (projective) trees,
loss augmentation, φ / Δ / score identities, the CoNLL-U / CoNLL-X reader and writer, and the
estimator on every learner."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from demidcd.errors import InputError, OptionError
from demidcd.io.dependency import corpus_from_lists, read_dependency, write_dependency
from demidcd.tasks.dependency import (
    DependencyParser,
    DependencyTask,
    chu_liu_edmonds,
    eisner,
    encode_trees,
    is_punct,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


# ------------------------------------------------------------------------- brute force
@functools.cache
def all_trees(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every head vector (positions 0..n, column 0 = 0) of a tree rooted at 0 over n words,
    and a mask of the projective ones, by filtering all (n+1)^n head vectors."""
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
    return Y, proj


def tree_scores(S: np.ndarray, Y: np.ndarray) -> np.ndarray:
    n = Y.shape[1] - 1
    return S[Y[:, 1:], np.arange(1, n + 1)].sum(1)


def is_tree(heads, n: int, projective: bool = False) -> bool:
    """heads of words 1..n form a tree rooted at 0 (and, optionally, without crossing arcs)."""
    y = [-1, *map(int, heads)]
    if len(y) != n + 1 or any(not 0 <= y[d] <= n or y[d] == d for d in range(1, n + 1)):
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
    # Cayley: (n+1)^(n-1) trees rooted at 0 over n words; projective ones are a strict subset
    for n in range(1, 6):
        Y, proj = all_trees(n)
        assert Y.shape[0] == (n + 1) ** (n - 1)
        assert 0 < proj.sum() <= Y.shape[0]
    assert all_trees(4)[1].sum() < all_trees(4)[0].shape[0]


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_decoders_equal_brute_force(decoder):
    rng = np.random.default_rng(1 if decoder == "eisner" else 2)
    fn = eisner if decoder == "eisner" else chu_liu_edmonds
    for n in [1, 2, 3, 4, 5, 6, 7, 7, 7]:
        Y, proj = all_trees(n)
        cand = Y[proj] if decoder == "eisner" else Y
        for _ in range(6 if n < 7 else 2):
            N = n + 1
            S = rng.normal(size=(N, N))
            if rng.random() < 0.3:  # ties
                S = np.round(S)
            heads = np.zeros(N, np.int32)
            got = fn(S.ravel().copy(), N, heads)
            best = tree_scores(S, cand).max()
            assert heads[0] == -1
            assert is_tree(heads[1:], n, projective=decoder == "eisner")
            assert got == pytest.approx(best, abs=1e-9)
            assert S[heads[1:], np.arange(1, N)].sum() == pytest.approx(best, abs=1e-9)


def test_cle_beats_eisner_on_non_projective_optimum():
    # scores whose best tree is non-projective: arcs 0→2, 2→4... crossing 1→3 / 2→4
    rng = np.random.default_rng(3)
    Y, proj = all_trees(4)
    for _ in range(200):
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
        for _ in range(3):
            S = rng.normal(size=(N, N)) * rng.choice([0.1, 1.0, 10.0])
            he = np.zeros(N, np.int32)
            hc = np.zeros(N, np.int32)
            se = eisner(S.ravel().copy(), N, he)
            sc = chu_liu_edmonds(S.ravel().copy(), N, hc)
            assert is_tree(he[1:], n, projective=True)
            assert is_tree(hc[1:], n)
            assert sc >= se - 1e-9  # every projective tree is a tree


# ------------------------------------------------------------------------- the task
def random_treebank(rng, n_sent: int, max_len: int = 7, n_words: int = 12, n_pos: int = 4):
    words, pos, heads = [], [], []
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
    return words, pos, heads


@pytest.fixture(scope="module", params=["one POS", "two POS"])
def tiny(request):
    rng = np.random.default_rng(5)
    words, pos, heads = random_treebank(rng, 12)
    cpos = None
    if request.param == "two POS":
        cpos = [[p[:1] + str(int(p[1:]) % 2) for p in s] for s in pos]
    enc = encode_trees(words, pos, heads, cpos)
    assert (enc.cpos.shape[0] > 0) == (cpos is not None)
    return enc, words, pos, heads


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
@pytest.mark.parametrize("augment", [False, True])
def test_task_inference_equals_brute_force(tiny, decoder, augment):
    enc, words, _, heads = tiny
    task = DependencyTask(enc, hashing=256, decoder=decoder)  # small D: many collisions
    rng = np.random.default_rng(6)
    for _ in range(3):
        w = rng.normal(size=task.dim)
        flat, ptr = task.parse(w, np.arange(task.n_examples), augment)
        for i in range(task.n_examples):
            n = len(words[i])
            Y, proj = all_trees(n)
            cand = Y[proj] if decoder == "eisner" else Y
            S = task.arc_scores(w, i)
            obj = tree_scores(S, cand)
            if augment:
                obj = obj + (cand[:, 1:] != np.array(heads[i])).sum(1)
            y = flat[ptr[i] + 1:ptr[i + 1]]
            assert is_tree(y, n, projective=decoder == "eisner")
            got = task.score(w, i, y) + (augment * int((y != np.array(heads[i])).sum()))
            assert got == pytest.approx(obj.max(), abs=1e-8)


def test_arc_scores_match_tree_score(tiny):
    enc, words, _, heads = tiny
    task = DependencyTask(enc, hashing=1 << 12)
    w = np.random.default_rng(7).normal(size=task.dim)
    for i in range(task.n_examples):
        S = task.arc_scores(w, i)
        n = len(words[i])
        assert task.score(w, i, heads[i]) == pytest.approx(
            S[np.array(heads[i]), np.arange(1, n + 1)].sum())


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_records_phi_delta_consistency(tiny, decoder):
    enc, words, _, heads = tiny
    task = DependencyTask(enc, hashing=1 << 10, decoder=decoder)
    rng = np.random.default_rng(8)
    w = rng.normal(size=task.dim)
    ex = np.arange(task.n_examples)
    b = task.loss_augmented(w, ex)
    flat, ptr = task.parse(w, ex, True)
    assert len(b) > 0
    seen = set()
    for k in range(len(b)):
        i = int(b.ex[k])
        seen.add(i)
        y = flat[ptr[i] + 1:ptr[i + 1]]
        idx, val, delta = task.phi_delta(i, y)
        assert delta == b.delta[k] == int((y != np.array(heads[i])).sum()) > 0
        lo, hi = b.ptr[k], b.ptr[k + 1]
        np.testing.assert_array_equal(b.idx[lo:hi], idx)
        np.testing.assert_array_equal(b.val[lo:hi], val)
        assert np.all(np.diff(idx) > 0) and np.all(val != 0)
        margin = task.score(w, i, heads[i]) - task.score(w, i, y)
        assert b.margin[k] == pytest.approx(margin, abs=1e-9)
        assert float(w[idx] @ val) == pytest.approx(margin, abs=1e-9)
        assert b.hash[k] == DependencyTask.hash_heads(y)
    for i in set(range(task.n_examples)) - seen:  # no record: the argmax is the gold tree
        np.testing.assert_array_equal(flat[ptr[i] + 1:ptr[i + 1]], heads[i])
    idx, val, delta = task.phi_delta(0, heads[0])
    assert delta == 0 and idx.size == 0


@pytest.mark.parametrize("decoder", ["eisner", "cle"])
def test_zero_weights_give_the_largest_hamming_loss(tiny, decoder):
    # w = 0: every tree scores 0, so loss-augmented inference finds the max-Δ tree
    enc, words, _, heads = tiny
    task = DependencyTask(enc, hashing=64, decoder=decoder)
    b = task.loss_augmented(np.zeros(task.dim), np.arange(task.n_examples))
    got = dict(zip(b.ex.tolist(), b.delta.tolist(), strict=True))
    for i, h in enumerate(heads):
        Y, proj = all_trees(len(h))
        cand = Y[proj] if decoder == "eisner" else Y
        best = int((cand[:, 1:] != np.array(h)).sum(1).max())
        assert got.get(i, 0) == best
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
    assert is_punct("...") and is_punct("«") and not is_punct("a.") and not is_punct("$")


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


def test_read_conllu_skips_multiword_and_empty_nodes(tmp_path):
    p = tmp_path / "a.conllu"
    p.write_text(CONLLU)
    c = read_dependency(p, "conllu", "upos")
    assert c.words == [["Do", "n't", "stop", "."], ["Yes"]]
    assert c.pos == [["AUX", "PART", "VERB", "PUNCT"], ["INTJ"]]
    assert c.heads == [[3, 3, 0, 3], [0]]
    x = read_dependency(p, "conllu", "xpos")
    assert x.pos[0] == ["VBP", "RB", "VB", "."]
    assert x.other_pos == c.pos and c.other_pos == x.pos
    p.write_text(CONLLU.replace("\tPART\tRB", "\tPART\t_"))
    assert read_dependency(p, "conllu", "upos").other_pos is None


@pytest.mark.parametrize("fmt,text", [("conllu", CONLLU), ("conllx", CONLLX)])
def test_writer_round_trip(tmp_path, fmt, text):
    p = tmp_path / f"a.{fmt}"
    p.write_text(text)
    c = read_dependency(p, fmt, "xpos")
    out = tmp_path / "out"
    write_dependency(out, c, c.heads)
    assert out.read_text() == text + ("" if text.endswith("\n\n") else "\n")
    new = [[0] * len(h) for h in c.heads]
    write_dependency(out, c, new)
    got = out.read_text().split("\n")
    orig = (text + "\n").split("\n")
    assert len(got) == len(orig)
    for a, b in zip(orig, got, strict=True):
        fa, fb = a.split("\t"), b.split("\t")
        if len(fa) == 10 and fa[0].isdigit():
            assert fb[6] == "0" and fa[:6] == fb[:6] and fa[7:] == fb[7:]
        else:
            assert a == b
    c2 = read_dependency(out, fmt, "xpos")
    assert c2.heads == new and c2.words == c.words
    # unlabeled read (HEAD "_") and predict-style write
    u = read_dependency(p, fmt, "upos", labeled=False)
    assert u.heads == [[], []]
    write_dependency(out, u, c.heads)
    assert read_dependency(out, fmt, "upos").heads == c.heads


def test_in_memory_corpus_writes_minimal_conllu(tmp_path):
    c = corpus_from_lists([["a", "b"]], [["X", "Y"]])
    write_dependency(tmp_path / "m.conllu", c, [[2, 0]])
    back = read_dependency(tmp_path / "m.conllu", "conllu", "upos")
    assert back.words == [["a", "b"]] and back.pos == [["X", "Y"]] and back.heads == [[2, 0]]


@pytest.mark.parametrize("bad,line,msg", [
    ("1\ta\t_\tX\tX\t_\tz\t_\t_\t_\n", 1, "bad HEAD"),
    ("1\ta\t_\tX\tX\t_\t0\t_\t_\t_\n2\tb\t_\tX\tX\t_\t5\t_\t_\t_\n", 2, "beyond"),
    ("1\ta\t_\tX\tX\t_\t1\t_\t_\t_\n", 1, "own head"),
    ("1\ta\t_\tX\tX\t_\t0\t_\t_\t_\n2\tb\t_\tX\tX\t_\t3\t_\t_\t_\n"
     "3\tc\t_\tX\tX\t_\t2\t_\t_\t_\n", 2, "cycle through word 2"),
    ("1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n", 1, "empty POS"),
    ("1\ta\t_\tX\tX\t_\t0\t_\t_\n", 1, "10 tab-separated"),
    ("2\ta\t_\tX\tX\t_\t0\t_\t_\t_\n", 1, "out of order"),
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
def chain_treebank(rng, n_sent: int):
    """Sentences 'D N V D N' style: determiners attach right, nouns to the verb, verb to root."""
    X, Y = [], []
    for _ in range(n_sent):
        k = int(rng.integers(1, 4))
        toks = [("the", "D"), (f"n{rng.integers(20)}", "N"), (f"v{rng.integers(5)}", "V")]
        toks += [("the", "D"), (f"n{rng.integers(20)}", "N")] * k
        heads = [2, 3, 0] + [p for j in range(k) for p in (5 + 2 * j, 3)]
        X.append(toks)
        Y.append(heads)
    return X, Y


@pytest.mark.parametrize("algorithm,threads", [("dcd", 1), ("dcd-light", 1), ("demi-dcd", 2),
                                               ("ms-dcd", 2), ("sp-ipm", 2)])
def test_every_learner_trains_the_parser(algorithm, threads, shm_guard, tmp_path):
    rng = np.random.default_rng(9)
    X, Y = chain_treebank(rng, 40)
    est = DependencyParser(algorithm=algorithm, threads=threads, hashing=1 << 14,
                           max_epochs=20 if algorithm in ("dcd", "dcd-light", "sp-ipm") else None,
                           time_limit=10)
    est.fit(X, Y)
    assert est.score(X, Y) >= 0.95
    est.save(tmp_path / "m.npz")
    back = DependencyParser.load(tmp_path / "m.npz")
    assert back.predict(X) == est.predict(X)
    assert back.get_params() == est.get_params()  # as given: decoder None means eisner
    assert back._decoder() == "eisner" and back.hashing == 1 << 14 and back.second_pos_ is False
    with pytest.raises(OptionError, match="one POS column"):
        back.predict([[(w, p, p) for w, p in s] for s in X])


def test_parser_with_second_pos_and_cle(tmp_path):
    rng = np.random.default_rng(10)
    X, Y = chain_treebank(rng, 30)
    X3 = [[(w, p, "C" + p) for w, p in s] for s in X]
    est = DependencyParser(decoder="cle", hashing=1 << 12, max_epochs=10).fit(X3, Y)
    assert est.second_pos_ is True and est.score(X3, Y) >= 0.95
    est.save(tmp_path / "m.npz")
    back = DependencyParser.load(tmp_path / "m.npz")
    assert back.second_pos_ is True and back.decoder == "cle"
    assert back.predict(X3) == est.predict(X3)
    with pytest.raises(OptionError, match="two POS columns"):
        back.predict(X)


def test_parser_options_are_checked():
    with pytest.raises(OptionError, match="decoder"):
        DependencyParser(decoder="mst").fit([[("a", "X")]], [[0]])
    with pytest.raises(OptionError, match=r"\(word, POS\)"):
        DependencyParser().fit([["a"]], [[0]])
    with pytest.raises(OptionError, match="multiple of 16"):
        DependencyParser(hashing=1000).fit([[("a", "X")]], [[0]])


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
def test_cli_train_evaluate_predict_conllx(tmp_path, capsys):
    from demidcd.cli import main

    rng = np.random.default_rng(11)
    X, Y = chain_treebank(rng, 30)
    corpus = corpus_from_lists([[w for w, _ in s] for s in X], [[p for _, p in s] for s in X], Y)
    data = tmp_path / "train.conll"
    write_dependency(data, corpus, Y)
    text = data.read_text()
    model = tmp_path / "m.npz"
    assert main(["train", "--task", "dependency", "--train", str(data), "--format", "conllx",
                 "--pos-column", "upos", "--decoder", "cle", "--algorithm", "dcd",
                 "--max-epochs", "10", "--hashing", "4096", "--model", str(model),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--data", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("UAS: ") and float(out[0].split()[1]) >= 95.0
    assert out[1].startswith("UAS without punctuation: ")
    blank = tmp_path / "blank.conll"
    blank.write_text("\n".join("\t".join(f[:6] + ["_"] + f[7:]) if len(f) == 10 else ""
                               for f in (line.split("\t") for line in text.split("\n"))))
    pred = tmp_path / "pred.conll"
    assert main(["predict", "--model", str(model), "--data", str(blank), "--out", str(pred),
                 "--quiet"]) == 0
    back = read_dependency(pred, "conllx", "upos")
    assert back.words == corpus.words
    assert np.mean([a == b for p, g in zip(back.heads, Y, strict=True)
                    for a, b in zip(p, g, strict=True)]) >= 0.95
    assert main(["evaluate", "--model", str(model), "--data", str(tmp_path / "nope")]) == 2
    assert "nope: no such file" in capsys.readouterr().err
