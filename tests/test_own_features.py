"""Bring your own features: sklearn-crfsuite feature dicts and CRF++ / Wapiti templates through
the sequence estimators, the CLI (--template, predict / evaluate with a template model) and
``demidcd dump``."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from demidcd.api import ChunkTagger, DependencyParser, NamedEntityTagger, SequenceTagger
from demidcd.cli import main
from demidcd.errors import InputError, InputTypeError, OptionError
from demidcd.io.tagged import read_tagged, token_columns
from demidcd.tasks.chain.template import DictFeaturizer, TemplateFeaturizer
from demidcd.tasks.chain.template_language import Template

FIT = {"C": 0.1, "algorithm": "dcd", "threads": 1, "seed": 0, "max_epochs": 4}

_NP = [("the", "DT"), ("a", "DT"), ("big", "JJ"), ("red", "JJ"), ("dog", "NN"), ("cat", "NN"),
       ("idea", "NN"), ("Paris", "NNP"), ("John", "NNP")]
_VB = [("runs", "VBZ"), ("sees", "VBZ"), ("likes", "VBZ"), ("ran", "VBD")]
_IN = [("in", "IN"), ("with", "IN"), ("of", "IN")]


def _np(r: random.Random) -> list[tuple[str, str, str]]:
    if r.random() < 0.3:
        return [(*r.choice(_NP[7:]), "B-NP")]
    words = [r.choice(_NP[:2])] + [r.choice(_NP[2:4]) for _ in range(r.randint(0, 2))] + \
        [r.choice(_NP[4:7])]
    return [(w, p, "B-NP" if k == 0 else "I-NP") for k, (w, p) in enumerate(words)]


def chunk_corpus(n: int = 40, seed: int = 1) -> list[list[tuple[str, str, str]]]:
    """Tiny CoNLL-2000-like sentences: (word, POS, chunk tag) per token."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        s = _np(r) + [(*r.choice(_VB), "B-VP")] + _np(r)
        if r.random() < 0.5:
            s += [(*r.choice(_IN), "B-PP")] + _np(r)
        out.append(s)
    return out


def xy(corpus):
    return [[t[:-1] for t in s] for s in corpus], [[t[-1] for t in s] for s in corpus]


def write_columns(path: Path, corpus, label: bool = True) -> Path:
    path.write_text("\n\n".join("\n".join(" ".join(t if label else t[:-1]) for t in s)
                                for s in corpus) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# library: feature dicts
# ---------------------------------------------------------------------------------------------
def test_dicts_of_the_builtin_strings_learn_the_builtin_weights():
    X, Y = xy(chunk_corpus())
    a = SequenceTagger(min_count=1, **FIT).fit(X, Y)
    f = a.featurizer_
    enc = f.transform(X)
    names = f.features
    D, t = [], 0
    for s in X:
        D.append([])
        for _ in s:
            ids = enc.feat_idx[enc.feat_ptr[t]:enc.feat_ptr[t + 1]]
            D[-1].append({names[i]: True for i in ids})
            t += 1
    b = SequenceTagger(min_count=1, **FIT).fit(D, Y)
    assert isinstance(b.featurizer_, DictFeaturizer)
    assert b.featurizer_.features == names  # the same ids: counts, then string order
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-9, atol=1e-12)
    assert np.count_nonzero(a.coef_) > 50
    assert b.predict(D) == a.predict(X)
    assert b.score(D, Y) == a.score(X, Y)


def _brute_argmax(task, w, i):
    n = int(task.sent_ptr[i + 1] - task.sent_ptr[i])
    best = max(itertools.product(range(task.K), repeat=n),
               key=lambda y: task.score(w, i, np.array(y, np.int32)))
    return list(best)


def test_real_values_scale_the_emission_and_viterbi_is_the_argmax():
    r = random.Random(0)
    tags = ("A", "B", "C")
    X, Y = [], []
    for _ in range(30):
        n = r.randint(1, 4)
        y = [r.choice(tags) for _ in range(n)]
        X.append([{"bias": 1.0, "v": float(tags.index(t)) + 0.5 * r.random(), "tag": t
                   if r.random() < 0.7 else "?", "flag": r.random() < 0.5} for t in y])
        Y.append(y)
    est = SequenceTagger(**FIT).fit(X, Y)
    f = est.featurizer_
    assert est.min_count is None and f.min_count == 1  # dicts keep every feature
    task = est.training_task(X, Y)
    assert task.feat_val is not None
    w = est.coef_
    K = len(est.classes_)
    v = f.features.index("v")
    for i in range(len(X)):
        ys = np.array([est.classes_.index(t) for t in Y[i]], np.int32)
        # the emission of "v" is its value times its weight
        expect = sum(X[i][t]["v"] * w[v * K + ys[t]] for t in range(len(ys)))
        s_full = task.score(w, i, ys)
        vals = task.feat_val.copy()
        a, b = task.feat_ptr[task.sent_ptr[i]], task.feat_ptr[task.sent_ptr[i + 1]]
        sel = np.flatnonzero(task.feat_idx[a:b] == v) + a
        task.feat_val[sel] *= 2.0  # doubling the value adds the emission once more
        assert task.score(w, i, ys) == pytest.approx(s_full + expect, rel=1e-9, abs=1e-9)
        task.feat_val[:] = vals
    pred = est.predict(X[:12])
    for i in range(12):
        assert [est.classes_.index(t) for t in pred[i]] == _brute_argmax(task, w, i)


def test_sklearn_crfsuite_tutorial_features_run_unchanged():
    def word2features(sent, i):  # the sklearn-crfsuite tutorial's, verbatim in spirit
        word, postag = sent[i][0], sent[i][1]
        f = {"bias": 1.0, "word.lower()": word.lower(), "word[-3:]": word[-3:],
             "word.isupper()": word.isupper(), "word.istitle()": word.istitle(),
             "postag": postag, "postag[:2]": postag[:2], "len": float(len(word)),
             "tags": ["a", "b"], "nested": {"x": "y", "n": 2}}
        if i > 0:
            f.update({"-1:word.lower()": sent[i - 1][0].lower()})
        else:
            f["BOS"] = True
        return f

    corpus = chunk_corpus(30)
    X = [[word2features(s, i) for i in range(len(s))] for s in corpus]
    Y = [[t[-1] for t in s] for s in corpus]
    est = NamedEntityTagger(**FIT).fit(X, Y)
    feats = set(est.featurizer_.features)
    assert {"bias", "word.lower():the", "len", "word.istitle()", "tags:a", "nested:x:y",
            "nested:n", "BOS", "postag:DT"} <= feats
    assert est.score(X, Y) > 0.8
    # the tutorial's inspection: Counter(crf.state_features_ / transition_features_)
    top = Counter(est.state_features_).most_common(1)[0]
    line = list(est.weight_lines(1))[2].split("\t")
    assert (line[0], line[1]) == top[0] and float(line[2]) == pytest.approx(top[1], rel=1e-5)
    F, K = est.n_features_, len(est.classes_)
    assert len(est.state_features_) == np.count_nonzero(est.coef_[:F * K])
    j, k = est.classes_.index("B-NP"), est.classes_.index("I-NP")
    assert est.transition_features_[("B-NP", "I-NP")] == est.coef_[F * K + j * (K + 1) + k]
    assert len(est.transition_features_) == K * K
    # n-best, confidences and forced labels take the dicts as predict does
    pred = est.predict(X)
    assert [nb[0][0] for nb in est.predict_nbest(X, 2)] == pred
    assert [r[0] for r in est.predict_scores(X)] == pred
    fixed = [[s[0]] + [None] * (len(s) - 1) for s in Y]
    assert [p[0] for p in est.predict(X, fixed=fixed)] == [s[0] for s in Y]
    assert [r[0][0] for r in est.predict_scores(X, fixed=fixed)] == [s[0] for s in Y]
    with pytest.raises(InputTypeError, match="feature dicts"):
        est.predict([[t[0] for t in corpus[0]]])  # words for a dict model
    with pytest.raises(InputTypeError, match="feature dicts"):
        est.predict_nbest([[t[0] for t in corpus[0]]], 2)
    with pytest.raises(OptionError, match="feature dicts"):
        NamedEntityTagger(template="chunking", **FIT).fit(X, Y)
    with pytest.raises(InputTypeError, match="mix"):
        SequenceTagger(**FIT).fit([[{"a": "b"}, "word"]], [["A", "B"]])


# ---------------------------------------------------------------------------------------------
# library: templates
# ---------------------------------------------------------------------------------------------
B_TEMPLATE = """# words and POS, label-bigram features on POS
U00:%x[0,0]
U01:%x[-1,0]
U10:%x[0,1]
U11:%x[-1,1]/%x[0,1]
B01:%x[0,1]
B02:%x[-1,1]/%x[0,1]
B
"""


def test_template_round_trip_and_b_features(tmp_path):
    X, Y = xy(chunk_corpus())
    path = tmp_path / "b.template"
    path.write_text(B_TEMPLATE)
    est = ChunkTagger(template=str(path), **FIT).fit(X, Y)
    f = est.featurizer_
    assert isinstance(f, TemplateFeaturizer) and f.min_count == 1
    K, F, G = len(est.classes_), est.n_features_, est.n_bfeatures_
    assert G == len(f.bfeatures) > 5 and all(b.startswith(("B01:", "B02:")) for b in f.bfeatures)
    assert est.coef_.shape[0] == F * K + (K + 1) ** 2 + G * K * K
    bblock = est.coef_[F * K + (K + 1) ** 2:]
    assert np.count_nonzero(bblock) > 10  # the B weights learnt something
    task = est.training_task(X, Y)
    short = [i for i in range(len(X)) if len(X[i]) <= 5][:6]
    assert len(short) >= 4
    pred = est.predict([X[i] for i in short])
    for p, i in zip(pred, short, strict=True):  # Viterbi with B features: the argmax of w·Φ
        assert [est.classes_.index(t) for t in p] == _brute_argmax(task, est.coef_, i)
    m = tmp_path / "m.npz"
    est.save(m)
    path.unlink()  # the model carries the template's text
    back = ChunkTagger.load(m)
    assert back.featurizer_.template.text == B_TEMPLATE and back.n_bfeatures_ == G
    assert back.predict(X) == est.predict(X)
    np.testing.assert_array_equal(back.coef_, est.coef_)
    assert back.template == str(path)  # the parameter as given
    shipped = ChunkTagger(template=Template.from_name_or_file("chunking"), **FIT).fit(X, Y)
    shipped.save(m)
    again = ChunkTagger.load(m)
    assert isinstance(again.template, Template) and again.template.text == \
        shipped.featurizer_.template.text
    assert again.predict(X) == shipped.predict(X)


def test_template_errors():
    X, Y = xy(chunk_corpus(5))
    with pytest.raises(InputError, match=r"bad\.template:2: unknown macro %y"):
        SequenceTagger(template=Template("U00:%x[0,0]\nU01:%y[0,1]\n", "bad.template"),
                       **FIT).fit(X, Y)
    with pytest.raises(InputError, match=r":1: column 5 out of range"):
        SequenceTagger(template=Template("U:%x[0,5]\nB\n"), **FIT).fit(X, Y)
    with pytest.raises(OptionError, match="template must be"):
        SequenceTagger(template=3, **FIT).fit(X, Y)
    est = SequenceTagger(template="chunking", **FIT).fit(X, Y)
    with pytest.raises(InputTypeError, match="columns"):
        est.predict([[("a", "DT", "extra")]])


def test_token_columns_conllu_order(tmp_path):
    p = tmp_path / "a.conllu"
    p.write_text("# c\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
                 "2\tdog\tdog\tNOUN\tNN\tNumber=Sing\t0\troot\t_\tX=1\n\n")
    c = read_tagged(p, fmt="conllu", column="upos")
    assert token_columns(c) == [[("The", "the", "DT", "_", "2", "det", "_", "_"),
                                 ("dog", "dog", "NN", "Number=Sing", "0", "root", "_", "X=1")]]
    c = read_tagged(p, fmt="conllu", column="xpos")
    assert token_columns(c)[0][0] == ("The", "the", "DET", "_", "2", "det", "_", "_")
    q = write_columns(tmp_path / "c.txt", chunk_corpus(3))
    assert token_columns(read_tagged(q, fmt="columns"))[0][0] == chunk_corpus(3)[0][0][:2]
    from demidcd.datasets import load_tagged

    assert load_tagged(q, all_columns=True) == xy(chunk_corpus(3))
    unl = read_tagged(q, fmt="columns", labelled=False)
    assert token_columns(unl, 2) == token_columns(read_tagged(q, fmt="columns"))
    with pytest.raises(InputError, match=r"c\.txt:1: 3 columns; the model's template reads 1 "):
        token_columns(unl, 1)


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    tr = write_columns(d / "train.txt", chunk_corpus(40, seed=1))
    te = write_columns(d / "test.txt", chunk_corpus(15, seed=2))
    nolab = write_columns(d / "test_nolabel.txt", chunk_corpus(15, seed=2), label=False)
    tpl = d / "b.template"
    tpl.write_text(B_TEMPLATE)
    m = d / "m.npz"
    assert main(["train", "--task", "chunking", "--template", str(tpl), "--train", str(tr),
                 "--threads", "1", "--max-epochs", "4", "--model", str(m), "--quiet"]) == 0
    return {"dir": d, "train": tr, "test": te, "nolabel": nolab, "template": tpl, "model": m}


def test_cli_template_model_predicts_and_evaluates(files, capsys):
    d = files["dir"]
    est = ChunkTagger.load(files["model"])
    assert est.featurizer_.template.text == B_TEMPLATE and est.featurizer_.n_columns == 2
    assert est.data_options_["template"] == str(files["template"])
    X, Y = xy(chunk_corpus(15, seed=2))
    want = est.predict(X)
    for data in ("test", "nolabel"):  # with the label column or without it, as crf_test
        out = d / f"pred_{data}.txt"
        assert main(["predict", "--model", str(files["model"]), "--data", str(files[data]),
                     "--out", str(out), "--quiet"]) == 0
        got = [[line.split()[-1] for line in block.splitlines()]
               for block in out.read_text().strip().split("\n\n")]
        assert got == want
    capsys.readouterr()
    assert main(["evaluate", "--model", str(files["model"]), "--data", str(files["test"])]) == 0
    out = capsys.readouterr().out
    f1 = 100 * est.score(X, Y)
    assert "f1" in out.lower() and f"{f1:.2f}" in out
    # the same --template is accepted; another is refused in one line
    assert main(["evaluate", "--model", str(files["model"]), "--data", str(files["test"]),
                 "--template", str(files["template"]), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(files["model"]), "--data", str(files["test"]),
                 "--template", "chunking"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "drop --template" in err[0]


def test_cli_refuses_a_dict_model_in_one_line(files, capsys):
    """A model fitted on feature dicts cannot read a file (its features are the user's dicts):
    predict and evaluate say so in one line naming the model, exit 2 and write nothing."""
    corpus = chunk_corpus(20)
    X = [[{"w": t[0], "p": t[1]} for t in s] for s in corpus]
    m = files["dir"] / "dicts.npz"
    ChunkTagger(**FIT).fit(X, [[t[-1] for t in s] for s in corpus]).save(m)
    out = files["dir"] / "never.txt"
    for cmd in (["predict", "--out", str(out)], ["evaluate"]):
        capsys.readouterr()
        assert main([*cmd, "--model", str(m), "--data", str(files["test"])]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(m) in err[0] and "feature dicts" in err[0]
    assert not out.exists()


def test_cli_bad_template_names_its_line(files, capsys):
    bad = files["dir"] / "bad.template"
    bad.write_text("# a comment\nU00:%x[0,0]\n\nU01:%x[0,1/%x[0,0]\nB\n")
    assert main(["train", "--task", "chunking", "--template", str(bad), "--train",
                 str(files["train"]), "--threads", "1", "--max-epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}:4:" in err[0] and "Traceback" not in err[0]
    assert main(["train", "--task", "chunking", "--template", str(files["template"]),
                 "--feature-columns", "2", "--train", str(files["train"])]) == 2
    assert "--feature-columns" in capsys.readouterr().err


def _dump(args, capfd) -> list[str]:
    capfd.readouterr()
    assert main(["dump", *args]) == 0
    return capfd.readouterr().out.splitlines()


def test_dump_prints_the_largest_weights(files, capfd, tmp_path):
    est = ChunkTagger.load(files["model"])
    lines = _dump(["--model", str(files["model"]), "--top", "12"], capfd)
    rows = [x.split("\t") for x in lines if not x.startswith("#")]
    feats = [r for r in rows if len(r) == 3]
    trans = [r for r in rows if len(r) == 2]
    assert len(feats) == 12 and 0 < len(trans) <= 12
    mags = [abs(float(r[2])) for r in feats]
    assert mags == sorted(mags, reverse=True)
    K, F = len(est.classes_), est.n_features_
    blocks = np.concatenate([est.coef_[:F * K], est.coef_[F * K + (K + 1) ** 2:]])
    assert mags[0] == pytest.approx(np.abs(blocks).max(), rel=1e-5)
    f, k = divmod(int(np.argmax(np.abs(est.coef_[:F * K]))), K)
    if abs(est.coef_[f * K + k]) >= np.abs(blocks).max():
        assert feats[0][:2] == [est.featurizer_.features[f], est.classes_[k]]
    assert any("->" in r[1] for r in feats) or est.n_bfeatures_ == 0
    # --all: every non-zero weight, to a file (atomically)
    out = tmp_path / "all.txt"
    assert main(["dump", "--model", str(files["model"]), "--all", "--out", str(out)]) == 0
    every = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    n_trans = np.count_nonzero(est.coef_[F * K:F * K + (K + 1) ** 2 - 1])
    assert len(every) == np.count_nonzero(blocks) + n_trans
    # hashed features print bucket ids; tasks without names print weights by index
    X, Y = xy(chunk_corpus(10))
    h = tmp_path / "h.npz"
    SequenceTagger(hashing=64, **FIT).fit(X, Y).save(h)
    assert any(x.startswith("bucket ") for x in _dump(["--model", str(h)], capfd))
    dep = DependencyParser()
    dep.coef_ = np.array([0.0, -3.0, 1.0, 2.0])
    assert list(dep.weight_lines(2))[2:] == ["w[1]\t-3", "w[3]\t+2"]
    capfd.readouterr()
    assert main(["dump", "--model", str(files["model"]), "--top", "0"]) == 2
