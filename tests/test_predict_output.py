"""What ``demidcd predict`` writes (issue 56): a CRF model's ``--nbest`` headers carry p(y | x)
as ``crf_test -n`` prints it (checked against enumeration of every tagging), ``--marginals`` has
CRF++'s ``crf_test -v1`` / ``-v2`` layouts (``LABEL/p`` cells, one per label summing to 1),
``predict`` without ``--out`` writes to standard output as ``crf_test`` does, and a parser
writes the POS tags it filled and keeps everything it does not predict (DEPS, MISC, FEATS,
comments, multiword tokens, empty nodes, the blank line after a block without words)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cli_run import run
from test_dependency_pipeline import tagged_treebank, two_column_model  # noqa: F401 (fixture)
from test_nbest_force_scores import CHUNKS, _xy

from demidcd.api import SequenceTagger, load_estimator
from demidcd.cli import main
from demidcd.io.dependency import read_dependency, write_dependency

CELL = re.compile(r"(\S+)/(\d(?:\.\d+)?(?:e-\d+)?)")  # CRF++'s LABEL/p cell (%g)


@pytest.fixture(scope="module")
def crf_chunker(tmp_path_factory):
    """(folder, CRF chunking model, test file of short sentences, its sentences as X)."""
    d = tmp_path_factory.mktemp("crfout")
    train = d / "train.txt"
    train.write_text("\n\n".join("\n".join(" ".join(t) for t in s) for s in CHUNKS * 3) + "\n")
    model = d / "crf.npz"
    assert main(["train", "--task", "chunking", "--train", str(train), "--feature-columns", "2",
                 "--threads", "1", "--algorithm", "crf", "--c2", "0.1", "--max-iterations", "30",
                 "--min-count", "1", "--model", str(model), "--quiet"]) == 0
    short = [s[:3] for s in CHUNKS] + [CHUNKS[1][3:5]]  # 3, 3, 3 and 2 tokens
    test = d / "short.txt"
    test.write_text("\n\n".join("\n".join(" ".join(t) for t in s) for s in short) + "\n")
    return d, model, test, _xy(short)[0]


def _blocks(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """[(header fields, [token lines' fields])] of a file with a '#' line before each block."""
    out: list[tuple[list[str], list[list[str]]]] = []
    for line in text.split("\n"):
        if line.startswith("#"):
            out.append((line[1:].split(), []))
        elif line.strip():
            out[-1][1].append(line.split())
    return out


def test_nbest_of_a_crf_prints_the_taggings_probability(crf_chunker, tmp_path):
    """``# RANK p`` with p = exp(w·Φ(x, y) − log Z(x)): over every tagging (K^n of them, the
    k-best list asked long enough to hold all) they sum to 1 and equal exp(score)/Z of the
    enumeration; log Z of the forward pass equals log Σ exp(score) of the enumeration."""
    d, model, test, X = crf_chunker
    est = load_estimator(model)
    K = len(est.classes_)
    out = tmp_path / "nb.txt"
    assert main(["predict", "--model", str(model), "--data", str(test), "--nbest", str(K ** 3),
                 "--out", str(out), "--quiet"]) == 0
    blocks = _blocks(out.read_text())
    every = est.predict_nbest(X, K ** 3)
    assert len(blocks) == sum(K ** len(s) for s in X) == sum(map(len, every))
    logz = est.log_partition(X)
    b = 0
    for s, taggings in enumerate(every):
        assert len({tuple(y) for y, _ in taggings}) == K ** len(X[s])  # all of them
        scores = np.array([v for _, v in taggings])
        z = np.logaddexp.reduce(scores)
        assert logz[s] == pytest.approx(z, rel=1e-9, abs=1e-9)
        printed = []
        for j, (y, v) in enumerate(taggings):
            head, toks = blocks[b]
            b += 1
            assert head[0] == str(j) and [f[-1] for f in toks] == y
            assert 0 <= float(head[1]) <= 1
            assert float(head[1]) == pytest.approx(np.exp(v - z), rel=1e-5, abs=1e-12)
            printed.append(float(head[1]))
        assert sum(printed) == pytest.approx(1, abs=1e-4)
    assert re.fullmatch(r"# 0 [01]\.\d+", out.read_text().split("\n")[0])


def test_marginals_have_crf_test_v1_and_v2_layouts(crf_chunker, tmp_path):
    """``--marginals``: ``# p(y | x)`` then each label as LABEL/p (crf_test -v1); ``--marginals
    all``: every label's LABEL/p cell after it too, in the model's label order, summing to 1
    (-v2); with ``--nbest`` each tagging's labels as LABEL/p (-n -v1)."""
    d, model, test, X = crf_chunker
    est = load_estimator(model)
    labels = list(est.classes_)
    marg, tags, logp = est.predict_marginals_logp(X)
    v1, v2, nb = tmp_path / "v1.txt", tmp_path / "v2.txt", tmp_path / "nb.txt"
    for opt, out in ((["--marginals"], v1), (["--marginals", "all"], v2),
                     (["--nbest", "2", "--marginals"], nb)):
        assert main(["predict", "--model", str(model), "--data", str(test), *opt, "--out",
                     str(out), "--quiet"]) == 0
    one, every = _blocks(v1.read_text()), _blocks(v2.read_text())
    assert len(one) == len(every) == len(X)
    for s, ((h1, t1), (h2, t2)) in enumerate(zip(one, every, strict=True)):
        assert float(h1[0]) == float(h2[0]) == pytest.approx(np.exp(logp[s]), rel=1e-5)
        for t, (f1, f2) in enumerate(zip(t1, t2, strict=True)):
            assert len(f1) == 4 and f2[:4] == f1 and len(f2) == 4 + len(labels)
            label, p = CELL.fullmatch(f1[3]).groups()
            assert label == tags[s][t] and float(p) == pytest.approx(marg[s][t][label], rel=1e-5)
            cells = [CELL.fullmatch(c).groups() for c in f2[4:]]
            assert [k for k, _ in cells] == labels
            assert sum(float(q) for _, q in cells) == pytest.approx(1, abs=1e-5)
            assert dict(cells)[label] == p
    assert sum(bool(CELL.search(line)) for line in v1.read_text().split("\n")) == sum(map(len, X))
    blocks = _blocks(nb.read_text())
    assert [h[0] for h, _ in blocks] == ["0", "1"] * len(X)
    for b, (head, toks) in enumerate(blocks):
        s = b // 2
        assert 0 < float(head[1]) <= 1
        for t, f in enumerate(toks):
            label, p = CELL.fullmatch(f[3]).groups()
            assert float(p) == pytest.approx(marg[s][t][label], rel=1e-5)
        if head[0] == "0":
            assert float(head[1]) == pytest.approx(np.exp(logp[s]), rel=1e-5)


def test_conllu_marginals_go_to_misc(tmp_path):
    X, Y = _xy(CHUNKS)
    words = [[w for w, _ in s] for s in X]
    model = tmp_path / "pos.npz"
    est = SequenceTagger(min_count=1, algorithm="crf", max_iterations=20).fit(
        words, [[p for _, p, _ in s] for s in CHUNKS])
    est.save(model)
    data = tmp_path / "in.conllu"
    data.write_text("".join(
        f"# sent_id = {k}\n" + "".join(f"{i + 1}\t{w}\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No\n"
                                       for i, w in enumerate(s)) + "\n"
        for k, s in enumerate(words)))
    out = tmp_path / "out.conllu"
    assert main(["predict", "--model", str(model), "--data", str(data), "--marginals", "all",
                 "--out", str(out), "--quiet"]) == 0
    marg = est.predict_marginals(words)
    toks = [ln.split("\t") for ln in out.read_text().split("\n") if ln[:1].isdigit()]
    assert len(toks) == sum(map(len, words))
    flat = [m for s in marg for m in s]
    for f, m in zip(toks, flat, strict=True):
        misc = f[9].split("|")
        assert misc[0] == "SpaceAfter=No" and misc[1] == f"Prob={m[f[3]]:.6g}"
        cells = [CELL.fullmatch(c).groups() for c in misc[2].removeprefix("Probs=").split(",")]
        assert [k for k, _ in cells] == list(est.classes_)
        assert sum(float(q) for _, q in cells) == pytest.approx(1, abs=1e-5)


def test_predict_without_out_writes_to_standard_output(crf_chunker, tmp_path):
    """As crf_test: the predictions on stdout, the status line on stderr."""
    d, model, test, _ = crf_chunker
    out = tmp_path / "p.txt"
    p = run("predict", "--model", str(model), "--data", str(test), "--out", str(out))
    assert p.returncode == 0, p.stderr
    p = run("predict", "--model", str(model), "--data", str(test))
    assert p.returncode == 0, p.stderr
    assert p.stdout == out.read_text() and p.stdout.count("\n") >= 11
    assert "wrote standard output (4 sentences)" in p.stderr


# --------------------------------------------------------------------------- dependency
def _conllu(sents, blank: str) -> str:
    """The treebank as CoNLL-U without trees and with column ``blank`` (UPOS or XPOS) ``_``,
    with what a parser does not predict filled in: a comment per sentence, FEATS, DEPS and
    MISC on every word, an empty node in the first sentence, a block of a multiword-token line
    alone between the first two sentences."""
    out = []
    for s, rows in enumerate(sents):
        out.append(f"# sent_id = {s}")
        for i, (w, u, x, h, r) in enumerate(rows, 1):
            out.append("\t".join([str(i), w, w.upper(), "_" if blank == "upos" else u,
                                  "_" if blank == "xpos" else x, f"F={i}", "_", "_", f"{h}:{r}",
                                  f"Idx={s}.{i}"]))
            if s == 0 and i == 3:
                out.append("3.1\tgo\tgo\t_\tVB\t_\t_\t_\t3:conj\t_")
        out.append("")
        if s == 0:
            out += ["1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_", ""]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("blank", ["upos", "xpos"])
def test_parser_writes_the_pos_it_filled_and_keeps_what_was_given(two_column_model,  # noqa: F811
                                                                  blank):
    model, sents, d = two_column_model
    data, out = d / f"blank_{blank}.conllu", d / f"parsed_{blank}.conllu"
    data.write_text(_conllu(sents, blank))
    assert main(["predict", "--model", str(model), "--data", str(data), "--out", str(out),
                 "--quiet"]) == 0
    given, got = data.read_text().split("\n"), out.read_text().split("\n")
    assert len(got) == len(given)  # no line lost or added: blank lines, empty node, blocks
    assert out.read_text().count("\n\n") == data.read_text().count("\n\n") == len(sents) + 1
    col = 3 if blank == "upos" else 4
    est = load_estimator(model)
    words = [[w for w, *_ in s] for s in sents]
    X = [[(w, "_" if blank == "upos" else u, "_" if blank == "xpos" else x)
          for w, u, x, _, _ in s] for s in sents]
    filled = est.filled_pos(X)[0 if blank == "upos" else 1]
    trees = est.predict(X)
    for a, b in zip(given, got, strict=True):
        fa, fb = a.split("\t"), b.split("\t")
        if len(fa) != 10 or not fa[0].isdigit():
            assert a == b  # comments, the multiword token, the empty node, blank lines
            continue
        assert [x for i, x in enumerate(fa) if i not in (col, 6, 7)] == \
            [x for i, x in enumerate(fb) if i not in (col, 6, 7)]  # DEPS, MISC, FEATS, ...
    flat_filled = [p for s in filled for p in s]
    flat_trees = [t for s in trees for t in s]
    toks = [ln.split("\t") for ln in got if ln[:1].isdigit() and ln.split("\t")[0].isdigit()]
    assert len(toks) == len(flat_filled) == sum(map(len, words))
    assert [f[col] for f in toks] == flat_filled and "_" not in flat_filled
    gold = [r[1 if blank == "upos" else 2] for s in sents for r in s]
    assert np.mean([a == b for a, b in zip(flat_filled, gold, strict=True)]) >= 0.95
    assert [(int(f[6]), f[7]) for f in toks] == flat_trees


def test_a_block_without_words_keeps_its_blank_line(tmp_path):
    """A multiword-token line alone between blank lines (and such a block at the end) come back
    as blocks of their own: as many blocks out as in."""
    text = ("# a\n1\tx\tx\tX\tX\t_\t0\troot\t0:root\t_\n\n"
            "1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n\n"
            "# b\n1\ty\ty\tX\tX\t_\t0\troot\t0:root\t_\n\n"
            "# c\n1-2\tcd\t_\t_\t_\t_\t_\t_\t_\t_\n\n")
    p, out = tmp_path / "in.conllu", tmp_path / "out.conllu"
    p.write_text(text)
    c = read_dependency(p, "conllu", "upos")
    assert c.words == [["x"], ["y"]]
    write_dependency(out, c, c.heads, c.deprels)
    assert out.read_text() == text
