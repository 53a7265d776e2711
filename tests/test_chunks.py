"""Chunk scoring as conlleval, the chunking / NER tasks end to end, the task registry, feature
columns, remembered label columns, and predict → read round trips (DOCSTART, Latin-1)."""

import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.api import ChunkTagger, SequenceTagger, load_estimator
from demidcd.cli import build_parser, main
from demidcd.errors import OptionError
from demidcd.io.tagged import read_tagged
from demidcd.options import DataOptions
from demidcd.tasks import TASKS, TaskSpec, get_task, register, task_names
from demidcd.tasks.chain.chunks import chunk_scores, resolve_scheme, split_label
from demidcd.tasks.chain.features import SequenceFeaturizer


# ------------------------------------------------------------------ an independent conlleval
def _reference(lines: list[str]) -> tuple[int, int, int, int, int, dict]:
    """conlleval's main loop over the lines of a file ``word ... gold guess`` (blank lines and
    ``-X-`` lines are sentence breaks), written from its Perl source string by string.
    Returns (correct, gold, found, correct tags, tokens, {type: (c, g, f)})."""

    def split(t):
        m = re.match(r"^([^-]*)-(.*)$", t)
        return (m.group(1), m.group(2)) if m else (t, "")

    def end(pt, t, pty, ty):
        return ((pt, t) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"), ("E", "E"),
                            ("E", "I"), ("E", "O")}
                or (pt not in ("O", ".") and pty != ty) or pt in ("[", "]"))

    def start(pt, t, pty, ty):
        return ((pt, t) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"), ("E", "E"),
                            ("E", "I"), ("O", "E")}
                or (t not in ("O", ".") and pty != ty) or t in ("[", "]"))

    cc = fc = fg = tags = toks = 0
    per: dict[str, list[int]] = {}
    inc = False
    lc, lct, lg, lgt = "O", "", "O", ""
    for line in lines:
        f = line.split(" ") if line else []
        if not f or f[0] == "-X-":
            f = ["-X-", "O", "O"]
        g, gt = split(f[-1])
        c, ct = split(f[-2])
        if f[0] == "-X-":
            g = "O"
        if inc:
            if end(lc, c, lct, ct) and end(lg, g, lgt, gt) and lgt == lct:
                inc = False
                cc += 1
                per.setdefault(lct, [0, 0, 0])[0] += 1
            elif end(lc, c, lct, ct) != end(lg, g, lgt, gt) or gt != ct:
                inc = False
        if start(lc, c, lct, ct) and start(lg, g, lgt, gt) and gt == ct:
            inc = True
        if start(lc, c, lct, ct):
            fc += 1
            per.setdefault(ct, [0, 0, 0])[1] += 1
        if start(lg, g, lgt, gt):
            fg += 1
            per.setdefault(gt, [0, 0, 0])[2] += 1
        if f[0] != "-X-":
            tags += c == g and ct == gt
            toks += 1
        lc, lct, lg, lgt = c, ct, g, gt
    if inc:
        cc += 1
        per.setdefault(lct, [0, 0, 0])[0] += 1
    return cc, fc, fg, tags, toks, {k: tuple(v) for k, v in per.items() if v[1] or v[2]}


def _lines(gold, pred):
    out = []
    for g, p in zip(gold, pred, strict=True):
        out += [f"w {a} {b}" for a, b in zip(g, p, strict=True)] + [""]
    return out


def _counts(s):
    return s.correct, s.gold, s.predicted, s.correct_tags, s.tokens, s.per_type


# (gold sentences, predicted sentences) → conlleval's (correct, gold, found, tags right, tokens)
# counts, each checked by hand against conlleval's rules (and against conlleval.pl itself).
FIXED = [
    # IOB1: a B only between adjacent chunks of one type; I after O starts a chunk
    ([["I-NP", "I-NP", "B-NP", "I-NP", "O", "I-VP"]],
     [["B-NP", "I-NP", "B-NP", "I-NP", "O", "B-VP"]], (3, 3, 3, 4, 6)),
    # IOB1: a change of type inside a run of I starts a new chunk
    ([["I-NP", "I-VP", "I-VP", "I-NP"]], [["I-NP", "I-NP", "I-VP", "I-NP"]], (1, 3, 3, 3, 4)),
    # a sentence break ends every chunk (the two I-NP runs are not merged)
    ([["I-NP", "I-NP"], ["I-NP", "O"]], [["I-NP", "I-NP"], ["I-NP", "I-NP"]], (1, 2, 2, 3, 4)),
    # types disagreeing inside a chunk: no correct chunk
    ([["B-NP", "I-NP", "I-NP"]], [["B-NP", "I-VP", "I-NP"]], (0, 1, 3, 2, 3)),
    # ends disagreeing
    ([["B-NP", "I-NP", "O", "B-PP"]], [["B-NP", "I-NP", "I-NP", "B-PP"]], (1, 2, 2, 3, 4)),
    # labels without a type (type "")
    ([["B", "I", "O", "B"]], [["B", "B", "O", "I"]], (1, 2, 3, 2, 4)),
]


@pytest.mark.parametrize("gold,pred,expect", FIXED)
def test_chunk_counts_equal_conlleval_on_fixed_examples(gold, pred, expect):
    s = chunk_scores(gold, pred)
    assert (s.correct, s.gold, s.predicted, s.correct_tags, s.tokens) == expect
    assert _counts(s) == _reference(_lines(gold, pred))
    assert _counts(chunk_scores(gold, pred, "conlleval")) == _counts(s)


def test_per_type_and_figures():
    s = chunk_scores([["I-NP", "I-VP", "I-VP", "I-NP"]], [["I-NP", "I-NP", "I-VP", "I-NP"]])
    assert s.per_type == {"NP": (1, 2, 2), "VP": (0, 1, 1)}
    m = s.as_dict()
    assert m["precision"] == pytest.approx(1 / 3) and m["recall"] == pytest.approx(1 / 3)
    assert m["score"] == m["f1"] == pytest.approx(1 / 3)
    assert m["per_type"]["VP"]["f1"] == 0.0 and m["accuracy"] == pytest.approx(0.75)


def test_bioes_is_read_as_iob2():
    gold = [["S-PER", "O", "B-LOC", "E-LOC", "S-LOC", "S-LOC"]]
    pred = [["S-PER", "O", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]]
    s = chunk_scores(gold, pred)  # auto → bioes
    # gold chunks PER[0] LOC[2-3] LOC[4] LOC[5]; predicted PER[0] LOC[2-4] LOC[5]
    assert (s.correct, s.gold, s.predicted) == (2, 4, 3)
    assert resolve_scheme({"B-X", "I-X", "O"}) == "conll"
    assert resolve_scheme({"S-X", "O"}) == "bioes"
    with pytest.raises(OptionError, match="not part of the IOB2"):
        resolve_scheme({"S-X", "O"}, "iob2")
    assert split_label("B-I-X") == ("B", "I-X") and split_label("O") == ("O", "")


_TYPES = ("NP", "VP", "PP")
_LABELS = ["O"] + [f"{p}-{t}" for p in "BIE" for t in _TYPES] + ["B", "I", "[-NP", "]-VP",
                                                                  ".-NP", "X-PP", "O-NP"]


@st.composite
def _corrupted(draw):
    """Valid IOB2 gold sentences and predictions that copy them with random corruptions."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    rate = draw(st.sampled_from([0.0, 0.1, 0.3, 1.0]))
    gold, pred = [], []
    for _ in range(rng.randint(1, 4)):
        g = []
        for _ in range(rng.randint(1, 10)):
            r = rng.random()
            if r < 0.3:
                g.append("O")
            elif g and g[-1] != "O" and r < 0.65:
                g.append("I-" + g[-1][2:])
            else:
                g.append("B-" + rng.choice(_TYPES))
        p = [rng.choice(_LABELS) if rng.random() < rate else t for t in g]
        gold.append(g)
        pred.append(p)
    return gold, pred


@settings(max_examples=300, deadline=None)
@given(_corrupted())
def test_chunk_counts_agree_with_independent_conlleval(gp):
    gold, pred = gp
    assert _counts(chunk_scores(gold, pred, "conlleval")) == _reference(_lines(gold, pred))


def _spans(seq):
    """Chunks (start, end, type) of a valid IOB2 sequence."""
    out, cur = [], None
    for k, t in enumerate([*seq, "O"]):
        if cur and not (t.startswith("I-") and t[2:] == cur[2]):
            out.append((cur[0], k, cur[2]))
            cur = None
        if t.startswith("B-"):
            cur = (k, None, t[2:])
    return set(out)


@settings(max_examples=200, deadline=None)
@given(_corrupted())
def test_iob2_counts_are_span_matches(gp):
    """On valid IOB2 sequences conlleval counts exact span matches."""
    gold, pred = gp
    pred = [[t if t == "O" or t[:2] in ("B-", "I-") and t[2:] in _TYPES else "O" for t in p]
            for p in pred]
    pred = [[("B-" + t[2:]) if t.startswith("I-") and (k == 0 or p[k - 1][2:] != t[2:])
             else t for k, t in enumerate(p)] for p in pred]
    g = sum(len(_spans(s)) for s in gold)
    f = sum(len(_spans(s)) for s in pred)
    c = sum(len(_spans(a) & _spans(b)) for a, b in zip(gold, pred, strict=True))
    s = chunk_scores(gold, pred)
    assert (s.correct, s.gold, s.predicted) == (c, g, f)


# ------------------------------------------------------------------------------ registry
def test_registry_lists_every_task_and_cli_choices_follow():
    assert {"sequence", "chunking", "ner", "entity-relation"} <= set(task_names())
    for name in task_names():
        spec = get_task(name)
        assert spec.name == name
        assert spec.estimator_class().task_name == name
    p = build_parser()
    train = p._subparsers._group_actions[0].choices["train"]
    task_opt = next(a for a in train._actions if a.dest == "task")
    assert tuple(task_opt.choices) == task_names()


def test_a_new_task_is_one_registration(tmp_path):
    class Toy(TaskSpec):
        name = "toy-task"
        help = "a test"
        estimator = "demidcd.api:SequenceTagger"

    register("toy-task", Toy())
    try:
        args = build_parser().parse_args(["train", "--task", "toy-task"])
        assert get_task(args.task).name == "toy-task"
        with pytest.raises(OptionError, match="needs train FILE"):
            get_task("toy-task").default_data(DataOptions.from_mapping(vars(args)), 0)
    finally:
        del TASKS["toy-task"]
    with pytest.raises(OptionError, match="unknown task"):
        get_task("toy-task")


def test_cli_and_api_have_no_task_branches():
    import demidcd.api
    import demidcd.cli

    cli = sorted(Path(demidcd.cli.__file__).parent.glob("*.py"))  # the package's modules
    for path in [*cli, Path(demidcd.api.__file__)]:
        src = path.read_text(encoding="utf-8")
        assert "_is_er" not in src
        assert not re.search(r"task(_name)?\s*==", src), path.name


# ------------------------------------------------------------------ features from columns
def test_feature_columns_reach_the_template():
    X = [[("The", "DT"), ("cat", "NN")], [("runs", "VBZ")]]
    f = SequenceFeaturizer(min_count=1).fit(X)
    assert "a0[0]=DT" in f.features and "a0[-1|0]=DT|NN" in f.features
    assert "a0[-2|-1|0]=<s>|<s>|DT" in f.features and "a0[0|1|2]=VBZ|</s>|</s>" in f.features
    enc = f.transform(X)
    nn = {f.features[i] for i in enc.feat_idx[enc.feat_ptr[1]:enc.feat_ptr[2]]}
    assert {"a0[0]=NN", "a0[-1]=DT", "a0[1]=</s>", "w=cat"} <= nn
    g = SequenceFeaturizer.from_state(*f.state())
    assert g.n_attributes == 1 and g.features == f.features
    with pytest.raises(ValueError, match="attribute"):
        f.transform([["The", "cat"]])


# --------------------------------------------------------------- CLI: chunking end to end
CHUNKS = [
    [("He", "PRP", "B-NP"), ("reckons", "VBZ", "B-VP"), ("the", "DT", "B-NP"),
     ("deficit", "NN", "I-NP"), ("will", "MD", "B-VP"), ("narrow", "VB", "I-VP"),
     (".", ".", "O")],
    [("Café", "NNP", "B-NP"), ("prices", "NNS", "I-NP"), ("rose", "VBD", "B-VP"),
     ("in", "IN", "B-PP"), ("March", "NNP", "B-NP"), (".", ".", "O")],
    [("The", "DT", "B-NP"), ("señor", "NN", "I-NP"), ("sold", "VBD", "B-VP"),
     ("shares", "NNS", "B-NP"), (".", ".", "O")],
]


def _columns_text(sents, docstart_every=2):
    out = []
    for k, s in enumerate(sents):
        if k % docstart_every == 0:
            out += ["-DOCSTART- -X- O", ""]
        out += [" ".join(t) for t in s] + [""]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def chunk_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("chunk")
    train = d / "train.txt"
    train.write_bytes(_columns_text(CHUNKS * 4).encode("latin-1"))
    model = d / "m.npz"
    assert main(["train", "--task", "chunking", "--train", str(train), "--encoding", "latin-1",
                 "--feature-columns", "2", "--threads", "1", "--max-epochs", "20",
                 "--min-count", "1", "--model", str(model), "--quiet"]) == 0
    return d, train, model


def test_chunking_evaluate_prints_conlleval_figures(chunk_files, capsys):
    d, train, model = chunk_files
    est = load_estimator(model)
    assert isinstance(est, ChunkTagger) and est.task_name == "chunking"
    assert est.data_options_["feature_columns"] == [2] and est.featurizer_.n_attributes == 1
    assert main(["evaluate", "--model", str(model), "--data", str(train),
                 "--encoding", "latin-1"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"^chunk F1: (\d+\.\d\d) \(P (\d+\.\d\d), R (\d+\.\d\d)\)$", out, re.M)
    assert m, out
    corpus = read_tagged(train, fmt="columns", encoding="latin-1", feature_columns=(2,))
    X = [[(w, *a) for w, a in zip(ws, at, strict=True)]
         for ws, at in zip(corpus.tokens, corpus.attributes, strict=True)]
    s = chunk_scores(corpus.tags, est.predict(X))
    assert float(m.group(1)) == pytest.approx(100 * s.as_dict()["f1"], abs=0.006)
    assert est.score(X, corpus.tags) == pytest.approx(s.as_dict()["f1"])
    assert re.search(r"^NP\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\s+\d+$", out, re.M), out


def test_predict_output_is_read_by_conlleval_rules(chunk_files, tmp_path):
    """predict → file: every line has as many fields, DOCSTART lines pass through, Latin-1 kept,
    gold then prediction in the last two columns (what conlleval reads)."""
    d, train, model = chunk_files
    out = tmp_path / "pred.txt"
    assert main(["predict", "--model", str(model), "--data", str(train), "--encoding",
                 "latin-1", "--out", str(out), "--quiet"]) == 0
    raw = out.read_bytes()
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    lines = raw.decode("latin-1").split("\n")
    fields = {len(x.split(" ")) for x in lines if x}
    assert fields == {4}
    assert sum(x.startswith("-DOCSTART-") for x in lines) == 6
    back = read_tagged(out, fmt="columns", encoding="latin-1")
    gold = read_tagged(train, fmt="columns", encoding="latin-1")
    assert back.tokens == gold.tokens
    assert read_tagged(out, fmt="columns", column=3, encoding="latin-1").tags == gold.tags
    est = load_estimator(model)
    X, _ = get_task("chunking").xy(read_tagged(train, fmt="columns", encoding="latin-1",
                                               feature_columns=(2,)))
    assert back.tags == est.predict(X)
    s = chunk_scores(gold.tags, back.tags)
    ref = _reference(lines)  # conlleval also counts the 6 DOCSTART lines as (O, O) tokens
    assert (s.correct, s.gold, s.predicted, s.per_type) == (ref[0], ref[1], ref[2], ref[5])
    assert (s.correct_tags + 6, s.tokens + 6) == (ref[3], ref[4])


def test_conllu_predict_roundtrip_latin1_and_remembered_column(tmp_path, capsys):
    """An XPOS model: evaluate and predict use XPOS without --column; Latin-1 in, Latin-1 out;
    comments (# newdoc) pass through; unknown labels are counted in a warning."""
    sents = [[("Él", "PRON", "PRP"), ("corre", "VERB", "VBZ"), (".", "PUNCT", ".")],
             [("La", "DET", "DT"), ("niña", "NOUN", "NN"), ("canta", "VERB", "VBZ")]] * 3
    def conllu(ss, xpos_of=None):
        out = ["# newdoc id = d1"]
        for s in ss:
            out.append("# text = x")
            for i, (w, u, x) in enumerate(s, 1):
                out.append("\t".join([str(i), w, w.lower(), u, (xpos_of or {}).get(x, x), "_",
                                      "0", "dep", "_", "_"]))
            out.append("")
        return "\n".join(out) + "\n"
    train = tmp_path / "t.conllu"
    train.write_bytes(conllu(sents).encode("latin-1"))
    model = tmp_path / "x.npz"
    assert main(["train", "--train", str(train), "--column", "xpos", "--encoding", "latin-1",
                 "--threads", "1", "--max-epochs", "10", "--min-count", "1", "--model",
                 str(model), "--quiet"]) == 0
    assert main(["evaluate", "--model", str(model), "--data", str(train), "--encoding",
                 "latin-1"]) == 0
    acc = float(re.search(r"accuracy: (\d+\.\d\d)%", capsys.readouterr().out).group(1))
    assert acc > 50
    odd = tmp_path / "odd.conllu"
    odd.write_bytes(conllu(sents, {"VBZ": "VBX"}).encode("latin-1"))
    assert main(["evaluate", "--model", str(model), "--data", str(odd), "--encoding",
                 "latin-1"]) == 0
    err = capsys.readouterr().err
    assert "warning: 6 tokens" in err and "VBX" in err
    out = tmp_path / "p.conllu"
    assert main(["predict", "--model", str(model), "--data", str(train), "--encoding", "latin-1",
                 "--out", str(out), "--quiet"]) == 0
    text = out.read_bytes().decode("latin-1")
    assert text.startswith("# newdoc id = d1\n")
    back = read_tagged(out, fmt="conllu", column="xpos", encoding="latin-1")
    upos = read_tagged(out, fmt="conllu", column="upos", encoding="latin-1")
    assert upos.tags == [[u for _, u, _ in s] for s in sents]  # UPOS untouched
    est = load_estimator(model)
    assert back.tags == est.predict([[w for w, _, _ in s] for s in sents])
    assert est.data_options_["column"] == "xpos"


def test_api_score_is_chunk_f1_for_chunk_tasks():
    X = [[w for w, _, _ in s] for s in CHUNKS] * 3
    Y = [[c for _, _, c in s] for s in CHUNKS] * 3
    ct = ChunkTagger(algorithm="dcd", max_epochs=15, min_count=1).fit(X, Y)
    st_ = SequenceTagger(algorithm="dcd", max_epochs=15, min_count=1).fit(X, Y)
    pred = ct.predict(X)
    assert ct.score(X, Y) == pytest.approx(chunk_scores(Y, pred).as_dict()["f1"])
    acc = np.mean([p == g for ps, gs in zip(st_.predict(X), Y, strict=True)
                   for p, g in zip(ps, gs, strict=True)])
    assert st_.score(X, Y) == pytest.approx(acc)
    with pytest.raises(OptionError, match="IOB1"):
        ChunkTagger(label_scheme="iob1").fit(X, [["S-NP"] * len(s) for s in X])


def test_entity_relation_predict_roundtrip_latin1(tmp_path):
    """conll04 files: predict writes the input's encoding and reads back to the same text."""
    from test_entity_relation import SAMPLE

    corp = tmp_path / "s.corp"
    corp.write_bytes((SAMPLE.replace("London", "Montréal") * 3).encode("latin-1"))
    m = tmp_path / "er.npz"
    assert main(["train", "--task", "entity-relation", "--train", str(corp), "--encoding",
                 "latin-1", "--threads", "1", "--max-epochs", "30", "--model", str(m),
                 "--quiet"]) == 0
    out = tmp_path / "pred.corp"
    assert main(["predict", "--model", str(m), "--data", str(corp), "--encoding", "latin-1",
                 "--out", str(out), "--quiet"]) == 0
    assert out.read_bytes() == corp.read_bytes()  # learnt the 3 sentences; é kept as latin-1
