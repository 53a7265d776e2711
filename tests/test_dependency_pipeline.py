"""Dependency parsing as the CoNLL 2018 evaluator scores it and after a POS tagger: LAS on the
universal DEPREL (before ':') next to LAS with subtypes, and a parser trained on UPOS + XPOS
that parses a file where a tagger filled only one of the two columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from demidcd.estimators import DependencyParser
from demidcd.io.dependency import read_dependency
from demidcd.tasks.dependency.encoding import encode_trees
from demidcd.tasks.dependency.spec import label_groups
from demidcd.tasks.dependency.task import DependencyTask


def tags(word: str) -> tuple[str, str]:
    """(UPOS, XPOS) of a word of the chain treebank: the XPOS of a noun or verb depends on the
    word (n0, n3, … are NNS, the other nouns NN; v0, v2, v4 VBD, v1, v3 VBZ)."""
    if word == "the":
        return "DET", "DT"
    k = int(word[1:])
    if word[0] == "n":
        return "NOUN", "NNS" if k % 3 == 0 else "NN"
    return "VERB", "VBD" if k % 2 == 0 else "VBZ"


def tagged_treebank(rng, n_sent: int) -> list[list[tuple]]:
    """Sentences 'D N V (D N)+' as (word, UPOS, XPOS, head, DEPREL) rows: determiners attach
    right (det), the first noun to the verb (nsubj), the verb to the root, the first noun
    after the verb as obj, later ones as obl:tmod (a DEPREL with a subtype). XPOS determines
    UPOS; UPOS and the word determine XPOS (:func:`tags`)."""
    out = []
    for _ in range(n_sent):
        k = int(rng.integers(1, 4))
        words = ["the", f"n{rng.integers(20)}", f"v{rng.integers(5)}"] + \
            [w for _ in range(k) for w in ("the", f"n{rng.integers(20)}")]
        heads = [2, 3, 0] + [p for j in range(k) for p in (5 + 2 * j, 3)]
        rels = ["det", "nsubj", "root"] + [r for j in range(k)
                                           for r in ("det", "obj" if j == 0 else "obl:tmod")]
        out.append([(w, *tags(w), h, r) for w, h, r in zip(words, heads, rels, strict=True)])
    return out


def write_conllu(path: Path, sents: list[list[tuple]], upos: bool = True, xpos: bool = True,
                 trees: bool = True) -> Path:
    """The rows as CoNLL-U; a column left out is ``_`` on every word."""
    lines = []
    for rows in sents:
        for i, (w, u, x, h, r) in enumerate(rows, 1):
            lines.append("\t".join([str(i), w, "_", u if upos else "_", x if xpos else "_",
                                    "_", str(h) if trees else "_", r if trees else "_",
                                    "_", "_"]))
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def xy(sents: list[list[tuple]]) -> tuple[list, list]:
    return ([[(w, u, x) for w, u, x, _, _ in s] for s in sents],
            [[(h, r) for *_, h, r in s] for s in sents])


# ------------------------------------------------------------------------- LAS
def test_las_compares_the_universal_deprel_and_las_with_subtypes_the_full_one():
    """A hand-made example: the parser knows nmod, nmod:poss, obl, obl:tmod, punct, root; the
    gold of one word is obl:npmod, a label the parser never saw (id −1) of a group it knows."""
    labels = ["nmod", "nmod:poss", "obl", "obl:tmod", "punct", "root"]
    group, index = label_groups(labels)
    assert group.tolist() == [0, 0, 1, 1, 2, 3] and index == {"nmod": 0, "obl": 1, "punct": 2,
                                                               "root": 3}
    words = [["Kim", "'s", "dog", "barked", "today", "."]]
    heads = [[3, 1, 4, 0, 4, 4]]
    gold = ["nmod:poss", "punct", "nsubj", "root", "obl:npmod", "punct"]
    ids = [[labels.index(r) if r in labels else -1 for r in gold]]
    groups = [[index.get(r.split(":")[0], -1) for r in gold]]
    enc = encode_trees(words, [["P"] * 6], heads, labels=ids, groups=groups)
    task = DependencyTask(enc, hashing=64, label_arcs=np.array([2, 2, 2, 2, 2, 1]),
                          label_groups=group)
    L = labels.index
    # Kim: nmod for nmod:poss (universal right); 's: right; dog: head right, gold nsubj unknown
    # to the parser (wrong either way); barked: right; today: obl for obl:npmod (universal
    # right); ".": obl:tmod (wrong)
    pred = [np.array([[3, 1, 4, 0, 4, 4],
                      [L("nmod"), L("punct"), L("obl"), L("root"), L("obl"), L("obl:tmod")]])]
    m = task.metric(task.gold(np.arange(1)), pred)
    assert m["uas"] == 1.0
    assert m["las"] == pytest.approx(4 / 6)  # Kim, 's, barked, today
    assert m["las_subtypes"] == pytest.approx(2 / 6)  # 's, barked
    # punctuation: "." only ("'s" has a letter)
    assert m["words_no_punct"] == 5 and m["las_no_punct"] == pytest.approx(4 / 5)
    assert m["las_subtypes_no_punct"] == pytest.approx(2 / 5)  # 's, barked
    assert m["score"] == m["uas"]
    # a wrong head is a label error in both
    pred[0][0, 0] = 2
    m = task.metric(task.gold(np.arange(1)), pred)
    assert m["las"] == pytest.approx(3 / 6) and m["las_subtypes"] == pytest.approx(2 / 6)


def test_evaluate_prints_las_and_las_with_subtypes(tmp_path, cli):
    """``evaluate`` on gold whose obl:tmod became obl:npmod (a subtype the model never saw) and
    whose obj became obj:x: LAS (universal DEPREL) and LAS with subtypes, each against a
    reference computed here from the model's own trees."""
    rng = np.random.default_rng(3)
    sents = tagged_treebank(rng, 30)
    train = write_conllu(tmp_path / "train.conllu", sents)
    model = tmp_path / "m.npz"
    assert cli("train", "--task", "dependency", "--train", train, "--algorithm", "dcd",
               "--max-epochs", "10", "--hashing", "4096", "--model", model, "--quiet")[0] == 0
    renamed = {"obl:tmod": "obl:npmod", "obj": "obj:x"}
    other = [[(w, u, x, h, renamed.get(r, r)) for w, u, x, h, r in s] for s in sents]
    data = write_conllu(tmp_path / "test.conllu", other)
    code, out, err = cli("evaluate", "--model", model, "--data", data)
    assert code == 0, err
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    est = DependencyParser.load(model)
    X, Y = xy(other)
    got = [t for tree in est.predict(X) for t in tree]
    ref = [t for tree in Y for t in tree]
    assert len(got) == len(ref)
    las = np.mean([g[0] == r[0] and g[1].split(":")[0] == r[1].split(":")[0]
                   for g, r in zip(got, ref, strict=True)])
    sub = np.mean([g == r for g, r in zip(got, ref, strict=True)])
    assert sub < las - 0.2  # the renamed labels cost LAS with subtypes only
    assert float(lines["LAS"].split()[0]) == pytest.approx(100 * las, abs=0.006)
    assert float(lines["LAS with subtypes"].split()[0]) == pytest.approx(100 * sub, abs=0.006)
    assert "LAS without punctuation" in lines and "LAS with subtypes without punctuation" in lines
    m = est.metrics(X, Y)
    assert m["las"] == pytest.approx(las) and m["las_subtypes"] == pytest.approx(sub)
    assert est.score(X, Y) == m["uas"]


# ------------------------------------------------------------------------- one POS column
@pytest.fixture(scope="module")
def two_column_model(tmp_path_factory):
    """A labelled parser trained on UPOS + XPOS (the CLI, default --pos-column upos), its
    treebank and the folder."""
    from demidcd.cli import main

    d = tmp_path_factory.mktemp("pipeline")
    sents = tagged_treebank(np.random.default_rng(5), 40)
    train = write_conllu(d / "train.conllu", sents)
    model = d / "m.npz"
    assert main(["train", "--task", "dependency", "--train", str(train), "--algorithm", "dcd",
                 "--max-epochs", "10", "--hashing", "4096", "--model", str(model),
                 "--quiet"]) == 0
    return model, sents, d


def test_the_model_records_the_maps_between_the_pos_columns(two_column_model):
    """Tag → the other column's most frequent tag, and the words whose own differs."""
    model, sents, _ = two_column_model
    est = DependencyParser.load(model)
    assert est.second_pos_ is True
    assert est.pos_by_second_ == {"DT": "DET", "NN": "NOUN", "NNS": "NOUN", "VBD": "VERB",
                                  "VBZ": "VERB"}
    words = {w for s in sents for w, *_ in s}
    n_nns = sum(1 for s in sents for w, _, x, _, _ in s if x == "NNS")
    n_nn = sum(1 for s in sents for w, _, x, _, _ in s if x == "NN")
    n_vbd = sum(1 for s in sents for w, _, x, _, _ in s if x == "VBD")
    n_vbz = sum(1 for s in sents for w, _, x, _, _ in s if x == "VBZ")
    noun, verb = "NN" if n_nn >= n_nns else "NNS", "VBD" if n_vbd >= n_vbz else "VBZ"
    expect = {"DET": "DT", "NOUN": noun, "VERB": verb}
    for w in words - {"the"}:
        u, x = tags(w)
        if x != expect[u]:
            expect[f"{w}\t{u}"] = x
    assert est.second_by_pos_ == expect and len(expect) > 3


@pytest.mark.parametrize("kept", ["xpos", "upos"])
def test_parser_on_two_pos_columns_parses_a_file_with_one(two_column_model, cli, kept):
    """A tagger's output (one POS column filled, the other ``_``, no trees): predict fills the
    empty column through the model's maps; here XPOS gives back UPOS and (word, UPOS) gives
    back XPOS, so the trees are those of the gold-POS file."""
    model, sents, d = two_column_model
    tagged = write_conllu(d / f"tagged_{kept}.conllu", sents, upos=kept == "upos",
                          xpos=kept == "xpos", trees=False)
    out = d / f"parsed_{kept}.conllu"
    code, _, err = cli("predict", "--model", model, "--data", tagged, "--out", out, "--quiet")
    assert code == 0, err
    got = read_dependency(out, "conllu", "xpos" if kept == "xpos" else "upos")
    trees = [list(zip(h, r, strict=True)) for h, r in zip(got.heads, got.deprels, strict=True)]
    est = DependencyParser.load(model)
    X, Y = xy(sents)
    assert trees == est.predict(X)  # the gold-POS parse
    assert np.mean([a == b for t, y in zip(trees, Y, strict=True)
                    for a, b in zip(t, y, strict=True)]) >= 0.95
    # the library takes the same sentences with "_" in the empty column
    blank = [[(w, "_", x) if kept == "xpos" else (w, u, "_") for w, u, x in s] for s in X]
    assert est.predict(blank) == trees
    # evaluate reads such a file with gold trees too
    scored = write_conllu(d / f"scored_{kept}.conllu", sents, upos=kept == "upos",
                          xpos=kept == "xpos")
    code, text, err = cli("evaluate", "--model", model, "--data", scored)
    assert code == 0 and text.startswith("UAS: "), err


def test_pos_columns_a_parser_cannot_use_are_one_line_errors(two_column_model, cli):
    model, sents, d = two_column_model
    both = write_conllu(d / "none.conllu", sents, upos=False, xpos=False, trees=False)
    code, _, err = cli("predict", "--model", model, "--data", both, "--out", d / "x.conllu")
    assert code == 2 and f"{both}:1: empty POS tag in UPOS (column 4)" in err
    assert "Traceback" not in err and not (d / "x.conllu").exists()
    # a column with gaps is not a missing column: the first empty tag is named
    text = write_conllu(d / "gaps.conllu", sents, trees=False).read_text().split("\n")
    text[2] = "\t".join(f if k != 3 else "_" for k, f in enumerate(text[2].split("\t")))
    gaps = d / "gaps.conllu"
    gaps.write_text("\n".join(text))
    code, _, err = cli("predict", "--model", model, "--data", gaps, "--out", d / "x.conllu")
    assert code == 2 and f"{gaps}:3: empty POS tag in UPOS (column 4)" in err
    X = xy(sents)[0]
    from demidcd.errors import OptionError
    with pytest.raises(OptionError, match="both columns"):
        DependencyParser.load(model).predict([[(w, "_", "_") for w, _, _ in s] for s in X])
