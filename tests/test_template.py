"""Templates (CRF++ / Wapiti syntax), feature dicts and their featurizers: expansion against
hand-written strings, Wapiti's regex matcher against a transliteration of it, ids against a
brute-force dictionary, errors naming the template line, state round trips."""

from __future__ import annotations

import io
import json
import string
import zlib
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from cli_run import run as cli_run
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.errors import InputError
from demidcd.tasks.chain.template import (
    DictFeaturizer,
    TemplateEncoding,
    TemplateFeaturizer,
    flatten_into,
)
from demidcd.tasks.chain.template_language import SHIPPED_TEMPLATES, Template
from demidcd.tasks.chain.template_regex import WapitiRegex, compile_regex


def dict_features(token):
    """The (feature string, value) pairs of one token, as the DictFeaturizer flattens it."""
    names, vals = [], []
    flatten_into(token, "", names, vals)
    return list(zip(names, vals, strict=True))


# word, POS, a third column
SENT = [("The", "DT", "x1"), ("U.S.", "NNP", "a-b"), ("costs", "NNS", "42"), ("rose", "VBD", "!?")]


def strings(text: str, sent=SENT) -> list[tuple[list[str], list[str]]]:
    return Template(text, "t.template").expand([sent])[0]


def uni(text: str, sent=SENT) -> list[list[str]]:
    return [u for u, _ in strings(text, sent)]


# ---------------------------------------------------------------------------------------------
# expansion
# ---------------------------------------------------------------------------------------------
def test_x_macro_and_literal_text():
    assert uni("U01:%x[0,0]") == [["U01:The"], ["U01:U.S."], ["U01:costs"], ["U01:rose"]]
    assert uni("U02:%x[0,2]") == [["U02:x1"], ["U02:a-b"], ["U02:42"], ["U02:!?"]]
    assert uni("U05:w=%x[-1,0]/%x[0,0]|p=%x[0,1]!") == [
        ["U05:w=_B-1/The|p=DT!"], ["U05:w=The/U.S.|p=NNP!"], ["U05:w=U.S./costs|p=NNS!"],
        ["U05:w=costs/rose|p=VBD!"]]


def test_offsets_past_both_ends_use_crfpp_boundary_strings():
    # CRF++: position t + r = -k gives _B-k, and n - 1 + k gives _B+k (n = 4 tokens)
    assert uni("U:%x[-2,0]") == [["U:_B-2"], ["U:_B-1"], ["U:The"], ["U:U.S."]]
    assert uni("U:%x[3,1]") == [["U:VBD"], ["U:_B+1"], ["U:_B+2"], ["U:_B+3"]]
    assert uni("U:%x[-3,1]/%x[+2,1]", SENT[:1]) == [["U:_B-3/_B+2"]]


def test_case_folding_X():
    assert uni("U:%X[0,0]") == [["U:the"], ["U:u.s."], ["U:costs"], ["U:rose"]]
    assert uni("U:%X[-1,0]", SENT[:1]) == [["U:_b-1"]]  # the macro applies to the boundary too


def test_t_macro_true_false_and_T():
    assert uni('U:cap=%t[0,0,"^\\u"]') == [["U:cap=true"], ["U:cap=true"], ["U:cap=false"],
                                           ["U:cap=false"]]
    assert uni('U:%T[0,0,"^\\u"]') == uni('U:%t[0,0,"^\\u"]')
    assert uni('U:d=%t[0,2,"\\d"]') == [["U:d=true"], ["U:d=false"], ["U:d=true"],
                                        ["U:d=false"]]


def test_m_macro_match_and_M():
    assert uni('U:s2=%m[0,0,".?.?$"]') == [["U:s2=he"], ["U:s2=S."], ["U:s2=ts"], ["U:s2=se"]]
    assert uni('U:s2=%M[0,0,".?.?$"]') == [["U:s2=he"], ["U:s2=s."], ["U:s2=ts"], ["U:s2=se"]]
    assert uni('U:%m[0,0,"\\d"]') == [["U:"]] * 4  # no match: the empty string
    assert uni('U:%M[0,0,"^\\u"]') == [["U:t"], ["U:u"], ["U:"], ["U:"]]


def test_b_star_bare_b_and_comments():
    text = """# a comment
    U00:%x[0,0]

B01:%x[-1,1]/%x[0,1]   # a trailing comment
*02:%x[0,1]
B
u03:%x[0,2]
"""
    t = Template(text, "t.template")
    assert t.transitions
    assert [ln.kind for ln in t.lines] == ["U", "B", "*", "U"]
    assert [ln.lineno for ln in t.lines] == [2, 4, 5, 7]
    got = t.expand([SENT[:2]])[0]
    assert got[0] == (["U00:The", "*02:DT", "u03:x1"], ["B01:_B-1/DT", "*02:DT"])
    assert got[1] == (["U00:U.S.", "*02:NNP", "u03:a-b"], ["B01:DT/NNP", "*02:NNP"])


def test_no_transitions_without_bare_b_and_constant_lines():
    t = Template("U:%x[0,0]\nB:%x[0,1]\n")
    assert not t.transitions
    t = Template("U:bias\n*\n")
    assert t.transitions  # a constant * line is a bias U feature and the transitions
    assert uni("U:bias\n*\n", SENT[:2]) == [["U:bias", "*"], ["U:bias", "*"]]


def test_plain_string_tokens_are_one_column():
    assert uni("U:%x[-1,0]|%x[0,0]", ["a", "b"]) == [["U:_B-1|a"], ["U:a|b"]]
    with pytest.raises(InputError, match="column 1 out of range"):
        uni("U:%x[0,1]", ["a", "b"])


# CoNLL-2000 chunking templates: plain CRF++ syntax (benchmarks/chunk_crfpp.template) and
# Wapiti's extensions
CHUNK = """# CRF++ syntax: column 0 = word, column 1 = POS
U00:%x[-2,0]
U05:%x[-1,0]/%x[0,0]
U15:%x[-2,1]/%x[-1,1]
U21:%x[-1,1]/%x[0,1]/%x[1,1]
# label bigrams
B
"""
CHUNK_STAR = """# Wapiti's extensions
U:w-2=%X[-2,0]
U:w0=%x[0,0]
U:w-1w0=%X[-1,0]/%X[0,0]
*:p-1p0=%x[-1,1]/%x[0,1]
U:p0p+1p+2=%x[0,1]/%x[1,1]/%x[2,1]
U:suf3=%m[0,0,".?.?.?$"]
U:pre2=%m[0,0,"^.?.?"]
U:cap=%t[0,0,"^\\u"]
U:num=%t[0,0,"\\d"]
U:punct=%t[0,0,"^\\p\\p*$"]
B
"""


def test_chunk_template_syntax():
    sent = [("He", "PRP"), ("reckons", "VBZ"), (",", ",")]
    t = Template(CHUNK)
    assert t.transitions and len(t.lines) == 4
    assert t.expand([sent])[0][1] == (
        ["U00:_B-1", "U05:He/reckons", "U15:_B-1/PRP", "U21:PRP/VBZ/,"], [])
    got = Template(CHUNK_STAR).expand([sent])[0]
    assert got[1] == (["U:w-2=_b-1", "U:w0=reckons", "U:w-1w0=he/reckons", "*:p-1p0=PRP/VBZ",
                       "U:p0p+1p+2=VBZ/,/_B+1", "U:suf3=ons", "U:pre2=re", "U:cap=false",
                       "U:num=false", "U:punct=false"], ["*:p-1p0=PRP/VBZ"])
    assert got[0][0][5:8] == ["U:suf3=He", "U:pre2=He", "U:cap=true"]
    assert got[2][0][-1] == "U:punct=true"


def test_benchmark_chunk_template_file_parses():
    """The plain CRF++ template the benchmarks keep (templates.py, bigram_cost.py): 19 U lines
    on two columns, a bare B."""
    t = Template.from_file(Path(__file__).resolve().parents[1] / "benchmarks"
                           / "chunk_crfpp.template")
    assert t.transitions and t.n_columns == 2
    assert len(t.unigram_lines) == 19 and not t.bigram_lines
    got = t.expand([[("He", "PRP"), ("reckons", "VBZ")]])[0]
    assert got[1][0][:3] == ["U00:_B-1", "U01:He", "U02:reckons"] and got[1][1] == []
    got = t.expand([[("He", "PRP"), ("reckons", "VBZ")]])[0]
    assert len(got[0][0]) == len(t.unigram_lines) and len(got[0][1]) == len(t.bigram_lines)


@pytest.mark.parametrize("name", SHIPPED_TEMPLATES)
def test_shipped_templates_parse_and_are_package_data(name):
    res = resources.files("demidcd").joinpath("templates", f"{name}.template")
    assert res.is_file()
    t = Template.from_name_or_file(name)
    assert t.path == f"{name}.template" and t.transitions and t.n_columns >= 1
    sent = [tok[:t.n_columns] for tok in [("Mr.", "NNP"), ("Vinken", "NNP"), ("61", "CD")]]
    got = t.expand([sent])[0]
    assert all(len(u) == len(t.unigram_lines) for u, _ in got)


# ---------------------------------------------------------------------------------------------
# Wapiti's regex dialect
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rx, value, test, match", [
    ("\\d", "ab12", True, "1"), ("\\D", "12a", True, "a"),
    ("\\a", "12ñb", True, "ñ"), ("\\A", "ab-", True, "-"),
    ("\\w", "--a1", True, "a"), ("\\W", "ab-c", True, "-"),
    ("\\l", "ABc", True, "c"), ("\\L", "abC", True, "C"),
    ("\\u", "abÉ", True, "É"), ("\\U", "AB1", True, "1"),
    ("\\p", "ab,c", True, ","), ("\\p", "a$", True, "$"), ("\\P", ",,a", True, "a"),
    ("\\s", "a b", True, " "), ("\\S", "  x", True, "x"),
    ("\\d", "abc", False, ""), ("\\u", "abc", False, ""),
    (".", "xyz", True, "x"), ("b.", "abc", True, "bc"),
    ("^a", "ba", False, ""), ("^b", "ba", True, "b"),
    ("a$", "ab", False, ""), ("a$", "ba", True, "a"), ("^$", "", True, ""),
    ("a\\d*", "a12", True, "a"),  # * tries the fewest repetitions first
    ("a\\d*$", "a12", True, "a12"), ("\\d*", "x1", True, ""),
    ("ab?", "abb", True, "ab"), ("ab?c", "ac", True, "ac"),  # ? tries the character first
    ("\\.", "a.b", True, "."), ("\\*", "a*", True, "*"), ("\\$", "a$b", True, "$"),
    ("a^", "a^", True, "a^"), ("$a", "x$a", True, "$a"), ("\\\\", "a\\b", True, "\\"),
    (".?.?.?$", "walking", True, "ing"), (".?.?.?$", "He", True, "He"),
    ("^.?.?", "a", True, "a"), ("^\\p\\p*$", ",", True, ","), ("^\\p\\p*$", ",a", False, ""),
])
def test_regex_classes_anchors_and_repetition(rx, value, test, match):
    m = compile_regex(rx).search(value)
    assert (m is not None) == test
    assert (m.group(0) if m else "") == match
    t = Template(f'U:%t[0,0,"{rx}"]|%m[0,0,"{rx}"]')
    got = t.expand([[value]])[0][0][0][0]
    assert got == f"U:{'true' if test else 'false'}|{match}"


_CLASSES = {"d": str.isdigit, "a": str.isalpha, "w": str.isalnum, "l": str.islower,
            "u": str.isupper, "p": lambda c: c in string.punctuation, "s": str.isspace}


def _matchit(ch: str, c: str) -> bool:
    if ch == ".":
        return True
    if ch[0] == "\\":
        e = ch[1]
        if e.lower() in _CLASSES:
            return _CLASSES[e.lower()](c) != e.isupper()
        return e == c
    return ch == c


def _matchme(rx: str, s: str, i: int) -> int | None:
    """Wapiti's rex_matchme transliterated: the end of a match of rx at s[i:], or None."""
    if rx == "":
        return i
    if rx == "$":
        return i if i == len(s) else None
    k = 2 if rx[0] == "\\" else 1
    ch, nxt = rx[:k], rx[k:]
    if nxt[:1] == "*":
        nxt, j = nxt[1:], i
        while True:
            e = _matchme(nxt, s, j)
            if e is not None:
                return e
            if j < len(s) and _matchit(ch, s[j]):
                j += 1
            else:
                return None
    if nxt[:1] == "?":
        nxt = nxt[1:]
        if i < len(s) and _matchit(ch, s[i]):
            e = _matchme(nxt, s, i + 1)
            if e is not None:
                return e
        return _matchme(nxt, s, i)
    if i < len(s) and _matchit(ch, s[i]):
        return _matchme(nxt, s, i + 1)
    return None


def _wapiti_match(rx: str, s: str) -> str | None:
    """Wapiti's rex_match: the first match (anchored with ^, else leftmost), or None."""
    starts = [0] if rx.startswith("^") else range(len(s) + 1)
    body = rx[1:] if rx.startswith("^") else rx
    for p in starts:
        e = _matchme(body, s, p)
        if e is not None:
            return s[p:e]
    return None


_ATOMS = ["a", "b", "1", ",", " ", ".", "\\d", "\\D", "\\a", "\\A", "\\w", "\\W", "\\l", "\\L",
          "\\u", "\\U", "\\p", "\\P", "\\s", "\\S", "\\.", "\\$", "$", "^"]
_regexes = st.builds(
    lambda anchor, atoms, end: ("^" if anchor else "") + "".join(atoms) + ("$" if end else ""),
    st.booleans(),
    st.lists(st.builds(lambda a, q: a + q, st.sampled_from(_ATOMS),
                       st.sampled_from(["", "*", "?"])), max_size=5),
    st.booleans())


@settings(max_examples=150, deadline=None)
@given(_regexes, st.text(alphabet="abAB1, .$^", max_size=7))
def test_regex_equals_wapiti_matcher(rx, s):
    body = rx[1:] if rx.startswith("^") else rx
    if body[:1] in ("*", "?"):  # a repetition of nothing: Wapiti stops with an error
        with pytest.raises(ValueError, match="repeats nothing"):
            compile_regex(rx)
        return
    m = compile_regex(rx).search(s)
    assert (m.group(0) if m else None) == _wapiti_match(rx, s)


# the dialect in full: every class, escapes of other characters, literal ^ $ + ( | inside
_ALL_ATOMS = [*_ATOMS, "\\^", "\\*", "\\?", "\\\\", "\\x", "+", "(", "|", "ñ", "É", "٣"]
_all_regexes = st.builds(
    lambda anchor, atoms, end: ("^" if anchor else "") + "".join(atoms) + ("$" if end else ""),
    st.booleans(),
    st.lists(st.builds(lambda a, q: a + q, st.sampled_from(_ALL_ATOMS),
                       st.sampled_from(["", "*", "?"])), min_size=1, max_size=6),
    st.booleans())


@settings(max_examples=200, deadline=None)
@given(_all_regexes, st.lists(st.text(alphabet="abAB1٣ñÉ, \t\n.$^*+?\\x€_-", max_size=10),
                              max_size=6))
def test_linear_matcher_equals_re(rx, values):
    # the non-backtracking matcher of %t / %m finds the match of its backtracking reference,
    # for a batch of values at once (its state is reset between them)
    if rx.removeprefix("^")[:1] in ("*", "?"):
        with pytest.raises(ValueError, match="repeats nothing"):
            WapitiRegex(rx)
        return
    ref = compile_regex(rx)
    want = [m.span() if (m := ref.search(v)) else (-1, -1) for v in values]
    start, end = WapitiRegex(rx).search(values)
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == want
    start, _ = WapitiRegex(rx).search(values, any_match=True)
    assert (start >= 0).tolist() == [s >= 0 for s, _ in want]


def test_catastrophic_regex_trains_within_the_time_limit(tmp_path):
    # Python's re took time exponential in the number of * (a*a*…a*b on a 40-letter token: no
    # end in sight, past --time-limit); the NFA simulation is linear in the token's length
    tpl = tmp_path / "re.tpl"
    tpl.write_text('U00:%t[0,0,"a*a*a*a*a*a*a*a*a*a*a*a*b"]\nU01:%m[0,0,"a*a*a*a*a*a*a*a*b?$"]\nB\n')
    data = tmp_path / "re.txt"
    data.write_text(f"{'a' * 40} NN B-NP\nx VB B-VP\n\n" * 200)
    r = cli_run("train", "--task", "chunking", "--template", tpl, "--train", data,
                "--format", "columns", "--threads", "1", "--time-limit", "10", "--model",
                tmp_path / "re.npz", "--quiet", timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "re.npz").exists()


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, line, what", [
    ("U00:%x[0,0]\n\nU01:%q[0,0]\n", 3, "unknown macro %q"),
    ("# c\nX01:%x[0,0]\n", 2, "unknown line type 'X'"),
    ("U01:%x[0]\n", 1, "bad macro arguments"),
    ("U01:%x[0,a]\n", 1, "bad macro arguments"),
    ("U01:%x[0,0\n", 1, "missing ]"),
    ('U01:%t[0,0]\n', 1, "needs a regex"),
    ('U01:%t[0,0,"abc]\n', 1, "unterminated regex"),
    ('U\nU01:%m[0,0,"*a"]\n', 2, 'bad regex "*a"'),
    ('U01:%m[0,0,"a**"]\n', 1, "bad regex"),
    ('U01:%m[0,0,"a\\"]\n', 1, "unterminated regex"),
    ('U01:%t[0,0,"ab\\\\\\"]\n', 1, "unterminated regex"),
    ("U01:%x[@1,0]\n", 1, "absolute and indirect offsets are not supported"),
    ("U01:%x[101,0]\n", 1, "row offset 101 out of range"),
    ("U01:50%\n", 1, "unknown macro %"),
])
def test_template_errors_name_the_line(text, line, what):
    with pytest.raises(InputError) as e:
        Template(text, "chunk.template")
    msg = str(e.value)
    assert msg.startswith(f"chunk.template:{line}: ") and what in msg and "\n" not in msg
    assert e.value.line == line and e.value.path == "chunk.template"


def test_empty_template_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="e.template: no feature lines"):
        Template("# nothing\n\n", "e.template")
    with pytest.raises(InputError, match="cannot read template"):
        Template.from_file(tmp_path / "absent.template")
    p = tmp_path / "bad.template"
    p.write_text("U00:%x[0,0]\nU01:%x[0,5]\n")
    f = TemplateFeaturizer(p)
    with pytest.raises(InputError) as e:
        f.fit([[("a", "NN"), ("b", "VB")]])
    assert str(e.value) == (f"{p}:2: column 5 out of range (the data has 2 feature columns)")


def test_column_count_must_match_the_fitted_one():
    f = TemplateFeaturizer(Template("U:%x[0,0]\n"), min_count=1).fit([[("a", "b")]])
    with pytest.raises(ValueError, match="3 columns, the model was fitted on 2"):
        f.transform([[("a", "b", "c")]])
    with pytest.raises(ValueError, match="different numbers of columns"):
        f.transform([[("a", "b"), ("a",)]])


# ---------------------------------------------------------------------------------------------
# feature dicts
# ---------------------------------------------------------------------------------------------
def test_dict_rules():
    tok = {"bias": 1.0, "w": "The", "len": 3, "neg": -0.5, "up": True, "low": False, "zero": 0,
           "tags": ["a", "b"], "set": {"s"}, "tup": ("t",),
           "nest": {"x": "y", "n": 2.0, "b": True, "deeper": {"k": "v"}}}
    assert dict_features(tok) == [
        ("bias", 1.0), ("w:The", 1.0), ("len", 3.0), ("neg", -0.5), ("up", 1.0),
        ("tags:a", 1.0), ("tags:b", 1.0), ("set:s", 1.0), ("tup:t", 1.0),
        ("nest:x:y", 1.0), ("nest:n", 2.0), ("nest:b", 1.0), ("nest:deeper:k:v", 1.0)]
    assert dict_features(["f1", "f2"]) == [("f1", 1.0), ("f2", 1.0)]
    assert dict_features({"n": np.float32(0.25), "i": np.int64(2)}) == [("n", 0.25), ("i", 2.0)]


@pytest.mark.parametrize("tok, err", [
    ({"x": None}, TypeError), ({"x": float("nan")}, ValueError), ({1: "a"}, TypeError),
    ({"x": [1]}, TypeError), ("word", TypeError)])
def test_dict_errors(tok, err):
    with pytest.raises(err):
        dict_features(tok)
    with pytest.raises(err):
        DictFeaturizer(min_count=1).fit([[tok]])


DICT_SENTS = [
    [{"w": "a", "len": 1, "up": False}, {"w": "b", "len": 2.5, "tags": ["x", "x"]}],
    [{"w": "a", "len": 1}, ["w:b", "free"]],
    [{"w": "c", "neg": -1.0}],
]


def test_dict_featurizer_ids_values_and_dictionary():
    f = DictFeaturizer(min_count=1)
    enc = f.fit_transform(DICT_SENTS)
    assert isinstance(enc, TemplateEncoding) and enc.transitions
    assert enc.n_sentences == 3 and enc.n_tokens == 5
    # counts: w:a 2, len 3, w:b 2, tags:x 1, free 1, w:c 1, neg 1; ties in string order
    assert f.features == ["len", "w:a", "w:b", "free", "neg", "tags:x", "w:c"]
    rows = [dict(zip(enc.feat_idx[a:b].tolist(), enc.feat_val[a:b].tolist(), strict=True))
            for a, b in zip(enc.feat_ptr[:-1], enc.feat_ptr[1:], strict=True)]
    ix = {s: j for j, s in enumerate(f.features)}
    assert rows == [{ix["w:a"]: 1.0, ix["len"]: 1.0},
                    {ix["w:b"]: 1.0, ix["len"]: 2.5, ix["tags:x"]: 2.0},  # repeats add up
                    {ix["w:a"]: 1.0, ix["len"]: 1.0}, {ix["w:b"]: 1.0, ix["free"]: 1.0},
                    {ix["w:c"]: 1.0, ix["neg"]: -1.0}]
    assert enc.bfeat_idx.size == 0 and np.all(enc.bfeat_ptr == 0) and enc.bfeat_val is None
    f2 = DictFeaturizer(min_count=2).fit(DICT_SENTS)
    assert f2.features == ["len", "w:a", "w:b"]
    enc2 = f2.transform([[{"w": "a", "unseen": "z", "len": 2}]])
    assert enc2.feat_idx.tolist() == [0, 1] and enc2.feat_val.tolist() == [2.0, 1.0]
    enc3 = f2.transform([[["w:a", "w:b"]]])
    assert enc3.feat_val is None and enc3.feat_idx.tolist() == [1, 2]


def test_dict_featurizer_hashing():
    f = DictFeaturizer(hashing=64).fit(DICT_SENTS)
    enc = f.transform(DICT_SENTS[:1])
    want = {}
    for k, v in dict_features(DICT_SENTS[0][1]):
        h = zlib.crc32(k.encode()) % 64
        want[h] = want.get(h, 0.0) + v
    a, b = enc.feat_ptr[1], enc.feat_ptr[2]
    assert dict(zip(enc.feat_idx[a:b].tolist(), enc.feat_val[a:b].tolist(), strict=True)) == want
    assert f.n_features == 64


# ---------------------------------------------------------------------------------------------
# template featurizer: ids against a brute-force dictionary, both expansion paths
# ---------------------------------------------------------------------------------------------
TPL = Template(CHUNK_STAR.replace("B\n", "B:%x[0,1]/%X[-1,0]\nB\n"), "star.template")


def _brute(sents, min_count, tpl=TPL):
    """(U features, B features) in dictionary order, and per token the sorted id sets."""
    exp = [tok for s in tpl.expand(sents) for tok in s]
    out = []
    for k in (0, 1):
        c = Counter(f for tok in exp for f in set(tok[k]))
        feats = sorted((f for f in c if c[f] >= min_count), key=lambda f: (-c[f], f))
        ix = {f: j for j, f in enumerate(feats)}
        out.append((feats, [sorted({ix[f] for f in tok[k] if f in ix}) for tok in exp]))
    return out


def _rows(ptr, idx):
    return [idx[a:b].tolist() for a, b in zip(ptr[:-1], ptr[1:], strict=True)]


_words = st.sampled_from(["the", "The", "U.S.", "42", ",", "dog", "Dog", "a-b", "é", "x"])
_tags = st.sampled_from(["DT", "NN", "CD", ","])
_sents = st.lists(st.lists(st.tuples(_words, _tags), min_size=0, max_size=6), max_size=6)


@settings(max_examples=60, deadline=None)
@given(_sents, st.sampled_from([1, 2, 3]))
def test_template_ids_equal_brute_force(sents, min_count):
    f = TemplateFeaturizer(TPL, min_count=min_count)
    enc = f.fit_transform(sents)
    (uf, urows), (bf, brows) = _brute(sents, min_count)
    assert f.features == uf and f.bfeatures == bf
    assert _rows(enc.feat_ptr, enc.feat_idx) == urows
    assert _rows(enc.bfeat_ptr, enc.bfeat_idx) == brows
    assert enc.feat_val is None and enc.bfeat_val is None and enc.transitions
    assert enc.sent_ptr.tolist() == np.cumsum([0] + [len(s) for s in sents]).tolist()
    enc2 = f.transform(sents)
    assert np.array_equal(enc2.feat_idx, enc.feat_idx) and np.array_equal(enc2.bfeat_idx,
                                                                          enc.bfeat_idx)


def test_plain_string_tokens_featurizer():
    tpl = Template('U:%x[-1,0]|%X[0,0]\nU:%m[0,0,"..$"]\n*:%t[1,0,"^\\u"]\n')
    sents = [["The", "dog", "barks"], ["Dog", "the"], []]
    enc = TemplateFeaturizer(tpl, min_count=1).fit_transform(sents)
    (uf, urows), (bf, brows) = _brute(sents, 1, tpl)
    assert "U:_B-1|the" in uf and "*:false" in bf
    assert _rows(enc.feat_ptr, enc.feat_idx) == urows
    assert _rows(enc.bfeat_ptr, enc.bfeat_idx) == brows and not enc.transitions


def test_unseen_features_are_dropped():
    train = [[("The", "DT"), ("dog", "NN")], [("U.S.", "NNP"), ("42", "CD"), (",", ",")]]
    test = [[("The", "DT"), ("cat", "NN"), ("42", "CD")], [("dog", "NN")]]
    f = TemplateFeaturizer(TPL, min_count=1).fit(train)
    enc = f.transform(test)
    (uf, _), (bf, _) = _brute(train, 1)
    for k, (feats, ptr, idx) in enumerate([(uf, enc.feat_ptr, enc.feat_idx),
                                           (bf, enc.bfeat_ptr, enc.bfeat_idx)]):
        ix = {s: j for j, s in enumerate(feats)}
        want = [sorted({ix[s] for s in tok[k] if s in ix}) for s in TPL.expand(test) for tok in s]
        assert _rows(ptr, idx) == want
    assert f.features.index("U:w0=The") in enc.feat_idx[:enc.feat_ptr[1]]
    assert "U:w0=cat" not in f.features


def test_template_hashing_ids():
    sents = [[("The", "DT"), ("dog", "NN")]]
    f = TemplateFeaturizer(TPL, hashing=1000, bhashing=50).fit(sents)
    assert f.n_features == 1000 and f.n_bfeatures == 50
    enc = f.transform(sents)
    exp = [tok for s in TPL.expand(sents) for tok in s]
    assert _rows(enc.feat_ptr, enc.feat_idx) == [
        sorted({zlib.crc32(x.encode()) % 1000 for x in u}) for u, _ in exp]
    assert _rows(enc.bfeat_ptr, enc.bfeat_idx) == [
        sorted({zlib.crc32(x.encode()) % 50 for x in b}) for _, b in exp]
    with pytest.raises(ValueError):
        TemplateFeaturizer(TPL, hashing=0, bhashing=10)


def test_state_round_trip_without_pickle():
    sents = [[("The", "DT"), ("dog", "NN")], [("U.S.", "NNP"), ("42", "CD")]]
    for f in (TemplateFeaturizer(TPL, min_count=1).fit(sents),
              TemplateFeaturizer(TPL, hashing=128, bhashing=16).fit(sents),
              TemplateFeaturizer(Template(CHUNK), min_count=1).fit(sents)):  # no B features
        arrays, meta = f.state()
        meta = json.loads(json.dumps(meta))
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        buf.seek(0)
        with np.load(buf, allow_pickle=False) as z:
            loaded = {k: z[k] for k in z.files}
        g = TemplateFeaturizer.from_state(loaded, meta)
        assert g.template.text == f.template.text and g.n_features == f.n_features
        assert g.n_bfeatures == f.n_bfeatures and g.n_columns == 2
        a, b = f.transform(sents), g.transform(sents)
        assert np.array_equal(a.feat_idx, b.feat_idx) and np.array_equal(a.bfeat_idx, b.bfeat_idx)
    d = DictFeaturizer(min_count=1).fit(DICT_SENTS + [[{"nl": "a\nb"}]])
    arrays, meta = d.state()
    e = DictFeaturizer.from_state(arrays, json.loads(json.dumps(meta)))
    assert e.features == d.features and "nl:a\nb" in e.features
    with pytest.raises(ValueError):
        DictFeaturizer.from_state(arrays, {**meta, "kind": "TemplateFeaturizer"})
    with pytest.raises(ValueError):
        DictFeaturizer.from_state({**arrays, "feature_ends": arrays["feature_ends"][:-1]}, meta)


def test_not_fitted():
    with pytest.raises(RuntimeError, match="not fitted"):
        TemplateFeaturizer(TPL).transform([[("a", "b")]])


@pytest.mark.slow
def test_conll2000_ids_equal_brute_force():
    path = DATA / "conll2000" / "train.txt"
    if not path.exists():
        pytest.skip(f"{path} absent")
    sents, s = [], []
    with open(path) as fh:
        for line in fh:
            p = line.split()
            if not p:
                if s:
                    sents.append(s)
                    s = []
                if len(sents) == 300:
                    break
                continue
            s.append(tuple(p[:-1]))
    f = TemplateFeaturizer("chunking", min_count=2)
    enc = f.fit_transform(sents)
    (uf, urows), (bf, brows) = _brute(sents, 2, f.template)
    assert f.features == uf and f.bfeatures == bf
    assert _rows(enc.feat_ptr, enc.feat_idx) == urows
    assert _rows(enc.bfeat_ptr, enc.bfeat_idx) == brows
