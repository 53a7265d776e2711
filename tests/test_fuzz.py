"""Property-based fuzzing of every reader and of model loading: only clean errors escape.

Readers (CoNLL-U, whitespace columns, CoNLL04) and model loading (``load_model``,
``load_estimator``, the estimators' ``load``) get random bytes, structured near-valid input,
truncations at every length class, mutated archives and mutated metadata. Anything raised must
be a :class:`demidcd.errors.DemidcdError` subclass with a one-line message naming the file;
whatever loads must be usable (predict works or fails with a DemidcdError). Example counts are
bounded so the file runs in well under 30 s.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pickle
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demidcd.api import EntityRelationExtractor, SequenceTagger, load_estimator
from demidcd.errors import DemidcdError, InputError, InputWarning, ModelFileError
from demidcd.io.conll04 import read_conll04, write_conll04
from demidcd.io.model import FORMAT_VERSION, load_model
from demidcd.io.tagged import read_tagged
from demidcd.io.tagged_writer import write_tagged
from demidcd.synthetic import generate

# Deterministic in CI (derandomize); DEMIDCD_FUZZ_SCALE=N runs N times more random examples,
# to hunt for new failures locally.
SCALE = int(os.environ.get("DEMIDCD_FUZZ_SCALE", "0"))


def fuzz(n: int) -> settings:
    return settings(max_examples=n * max(SCALE, 1), deadline=None, database=None,
                    derandomize=SCALE == 0,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


FUZZ = fuzz(120)

ER_SAMPLE = (
    "7\tPeop\t0\tO\tNNP/NNP\tJohn/Smith\tO\tO\tO\n"
    "7\tO\t1\tO\tVBZ\tlives\tO\tO\tO\n"
    "7\tLoc\t2\tO\tNNP\tLondon\tO\tO\tO\n"
    "7\tOrg\t3\tO\tNNP\tIBM\tO\tO\tO\n"
    "\n"
    "0\t2\tLive_In\n"
    "3\t2\tOrgBased_In\n"
    "\n"
    "8\tO\t0\tO\tDT\tThe\tO\tO\tO\n"
    "8\tOther\t1\tO\tJJ\tIsraeli\tO\tO\tO\n"
    "\n"
    "\n"
)


def _check_clean(e: DemidcdError, path: str | None = None) -> None:
    msg = str(e)
    assert msg and "\n" not in msg, repr(msg)
    if path is not None and isinstance(e, InputError | ModelFileError):
        assert msg.startswith(path), msg


# ====================================================== tagged corpora (CoNLL-U, columns)
_field = st.sampled_from(["1", "2", "3", "10", "1-2", "2.1", "x", "", "_", "NOUN", "NN", "é",
                          "a b", "#", "-DOCSTART-", "0", "\x00", "\u00a0", "\u0085", "٣", " "])


@st.composite
def _conllu_line(draw) -> str:
    kind = draw(st.sampled_from(["token", "token", "token", "comment", "blank", "junk"]))
    if kind == "comment":
        return "# " + draw(st.text(max_size=8))
    if kind == "blank":
        return draw(st.sampled_from(["", " ", "\t", "\r"]))
    if kind == "junk":
        return draw(st.text(max_size=12))
    n = draw(st.sampled_from([10, 10, 10, 9, 11, 4, 1]))
    fields = [draw(_field) for _ in range(n)]
    if n >= 2 and draw(st.booleans()):
        fields[0] = str(draw(st.integers(1, 4)))
    if n >= 5 and draw(st.booleans()):
        fields[1], fields[3], fields[4] = "word", "NOUN", "NN"
    return "\t".join(fields)


@st.composite
def _columns_line(draw) -> str:
    kind = draw(st.sampled_from(["token", "token", "token", "docstart", "blank", "junk"]))
    if kind == "docstart":
        return "-DOCSTART- -X- O"
    if kind == "blank":
        return draw(st.sampled_from(["", " ", "\t", "\r", "\u00a0"]))
    if kind == "junk":
        return draw(st.text(max_size=12))
    n = draw(st.integers(1, 4))
    return draw(st.sampled_from([" ", "\t", "  "])).join(draw(_field) or "w" for _ in range(n))


def _tagged_bytes(line_strategy):
    structured = st.lists(line_strategy, max_size=14).map(
        lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass"))
    return st.one_of(st.binary(max_size=300), structured, structured)


_ENCODINGS = ["utf-8", "utf-8", "latin-1", "ascii", "utf-16", "cp1252", "idna", "punycode",
              "base64", "rot13", "no-such-codec"]



@contextlib.contextmanager
def _input_warnings(path: Path):
    """Random bytes often are valid UTF-8 read as a single-byte encoding: the reader's
    InputWarning for that must be one line naming the file (recorded here, not left to the
    suite's summary)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always", InputWarning)
        yield
    for w in got:
        assert issubclass(w.category, InputWarning), w
        text = str(w.message)
        assert text.startswith(str(path)) and "\n" not in text, text


@FUZZ
@given(data=st.one_of(_tagged_bytes(_conllu_line()), _tagged_bytes(_columns_line())),
       fmt=st.sampled_from(["conllu", "columns", "auto"]),
       column=st.sampled_from([None, None, "upos", "xpos", "2", 3, 1, "lemma"]),
       encoding=st.sampled_from(_ENCODINGS), max_len=st.sampled_from([1, 3, 5000, 0]),
       labelled=st.booleans(), gz=st.sampled_from([False, False, True, "broken"]))
def test_tagged_reader_raises_only_clean_errors(tmp_path: Path, data: bytes, fmt: str, column,
                                                encoding: str, max_len: int, labelled: bool,
                                                gz) -> None:
    name = "f.conllu" if fmt != "columns" else "f.txt"
    if gz:
        name += ".gz"
        data = gzip.compress(data)
        if gz == "broken":
            data = data[: len(data) // 2]
    path = tmp_path / name
    path.write_bytes(data)
    try:
        with _input_warnings(path):
            c = read_tagged(path, fmt=fmt, column=column, encoding=encoding,
                            max_sentence_length=max_len, labelled=labelled)
    except DemidcdError as e:
        _check_clean(e, str(path))
        if isinstance(e, InputError) and e.line is not None:
            raw = gzip.decompress(data) if gz is True else data
            assert 1 <= e.line <= raw.count(b"\n") + 1
        return
    assert len(c) > 0 and all(c.tokens)
    for w in (w for s in c.tokens for w in s):  # columns words may be NBSP or NEL (not ASCII ws)
        assert w and (not w.isspace() if c.fmt == "conllu" else not set(w) & set(" \t\r\n\f\v"))
    assert all(len(s) <= max_len for s in c.tokens)
    if labelled:
        assert c.labelled and all(t for s in c.tags for t in s)
        out = tmp_path / ("o" + name)
        write_tagged(out, c, c.tags)  # the writer accepts what the reader returned ...
        r = read_tagged(out, fmt=c.fmt, column=column if c.fmt == "conllu" else None,
                        max_sentence_length=max(max_len, 1))
        if c.fmt == "conllu":  # ... and reading it back gives the same corpus
            assert (r.tokens, r.tags) == (c.tokens, c.tags)
        else:
            assert r.tokens == c.tokens


# ================================================================== CoNLL04 (entity-relation)
@st.composite
def _er_line(draw) -> str:
    kind = draw(st.sampled_from(["token", "token", "token", "relation", "blank", "junk"]))
    if kind == "blank":
        return draw(st.sampled_from(["", " ", "\r", "\t"]))
    if kind == "junk":
        return draw(st.text(max_size=12))
    if kind == "relation":
        a, b = draw(st.sampled_from(["0", "1", "2", "9", "x", "-1"])), draw(
            st.sampled_from(["0", "1", "2", "3"]))
        rel = draw(st.sampled_from(["Live_In", "Kill", "Work_For", "NoRel", "Loves", ""]))
        return f"{a}\t{b}\t{rel}"
    cols = [draw(st.sampled_from(["7", "8", ""])),
            draw(st.sampled_from(["O", "O", "Peop", "Loc", "Org", "Other", "Person"])),
            draw(st.sampled_from(["0", "1", "2", "3", "x", " 1", "٣"])), "O",
            draw(st.sampled_from(["NNP", "", "NN/NN"])),
            draw(st.sampled_from(["John", "", "a/b", "COMMA", "é", "\u00a0"])), "O", "O", "O"]
    if draw(st.integers(0, 5)) == 0:
        cols = cols[: draw(st.integers(1, 8))]
    return "\t".join(cols)


@FUZZ
@given(data=st.one_of(st.binary(max_size=300),
                      st.lists(_er_line(), max_size=16).map(lambda ls: "\n".join(ls).encode())),
       encoding=st.sampled_from(_ENCODINGS), max_len=st.sampled_from([1, 2, 5000, 0]),
       gz=st.booleans())
def test_conll04_reader_raises_only_clean_errors(tmp_path: Path, data: bytes, encoding: str,
                                                 max_len: int, gz: bool) -> None:
    path = tmp_path / ("f.corp.gz" if gz else "f.corp")
    path.write_bytes(gzip.compress(data) if gz else data)
    try:
        with _input_warnings(path):
            sents = read_conll04(path, encoding=encoding, max_sentence_length=max_len)
    except DemidcdError as e:
        _check_clean(e, str(path))
        if isinstance(e, InputError) and e.line is not None:
            assert 1 <= e.line <= data.count(b"\n") + 1
        return
    assert sents and all(s.words and len(s.words) <= max_len for s in sents)
    for s in sents:
        assert len(s.words) == len(s.pos) == len(s.tags)
        assert all(0 <= a < s.n_entities and 0 <= b < s.n_entities and a != b
                   for a, b in s.relations)
    out = tmp_path / "o.corp"
    write_conll04(out, sents)  # the writer accepts what the reader returned, and round-trips
    back = read_conll04(out)
    assert [(s.sid, s.words, s.pos, s.tags, s.relations) for s in back] == [
        (s.sid, s.words, s.pos, s.tags, s.relations) for s in sents]


# ================================================================== model files
@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, bytes]:
    """Bytes of a small trained sequence model and a small entity-relation model."""
    d = tmp_path_factory.mktemp("models")
    c = generate(n_sentences=40, n_tags=4, vocab_size=60, seed=1)
    SequenceTagger(max_epochs=2, min_count=1).fit(c.tokens, c.tags).save(d / "seq.npz")
    (d / "s.corp").write_text(ER_SAMPLE * 2)
    EntityRelationExtractor(max_epochs=2).fit(read_conll04(d / "s.corp")).save(d / "er.npz")
    return {"seq": (d / "seq.npz").read_bytes(), "er": (d / "er.npz").read_bytes(),
            "corp": str(d / "s.corp")}


def _arrays(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _meta(arrays: dict[str, np.ndarray]) -> dict:
    return json.loads(arrays["meta.json"].tobytes().decode())


def _with_meta(arrays: dict[str, np.ndarray], meta) -> dict[str, np.ndarray]:
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    return {**arrays, "meta.json": np.frombuffer(raw, np.uint8)}


def _load_all(path: Path, models: dict) -> list:
    """Every loader on ``path``: each must load or raise a clean DemidcdError; a model that
    loads must predict (or refuse cleanly)."""
    loaded = []
    for fn in (load_model, load_estimator, SequenceTagger.load, EntityRelationExtractor.load):
        try:
            obj = fn(path)
        except DemidcdError as e:
            _check_clean(e, str(path))
            continue
        loaded.append(fn.__qualname__)
        if fn is load_model:
            w, _, meta = obj
            assert w.dtype == np.float64 and w.ndim == 1 and np.isfinite(w).all()
            assert meta.get("dim") in (None, w.shape[0])
            continue
        try:
            if obj.task_name == "sequence":
                obj.predict([["the", "cat", "sat"], ["x"]])
            else:
                obj.predict(read_conll04(models["corp"])[:2])
        except DemidcdError as e:
            _check_clean(e)
    return loaded


@fuzz(150)
@given(data=st.one_of(st.binary(max_size=200),
                      st.binary(max_size=200).map(lambda b: b"PK\x03\x04" + b),
                      st.binary(max_size=200).map(lambda b: b"\x93NUMPY" + b)))
def test_random_bytes_are_clean_model_errors(tmp_path: Path, models, data: bytes) -> None:
    p = tmp_path / "r.npz"
    p.write_bytes(data)
    assert _load_all(p, models) == []


def _cut_points(blob: bytes) -> list[int]:
    """Truncation lengths of every class: empty, inside the zip magic, inside each entry's
    local header / data / the next header, inside the central directory and its end record."""
    n = len(blob)
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        infos = zf.infolist()
    cuts = {0, 1, 2, 3, 4, 5, 29, 30, 31, n - 22, n - 21, n - 1}
    for i in infos:
        start = i.header_offset
        data = start + 30 + len(i.filename) + len(i.extra)
        cuts.update({start, start + 1, start + 29, data - 1, data, data + 1,
                     data + i.compress_size // 2, data + i.compress_size - 1})
    cd = min(n - 22, max(i.header_offset for i in infos) + 1)
    cuts.update({cd, (cd + n) // 2})
    return sorted(c for c in cuts if 0 <= c < n)


@pytest.mark.parametrize("kind", ["seq", "er"])
def test_truncations_at_every_length_class_are_clean_errors(tmp_path: Path, models,
                                                            kind: str) -> None:
    blob = models[kind]
    cuts = _cut_points(blob)
    assert len(cuts) >= 20
    for cut in cuts:
        p = tmp_path / f"t{cut}.npz"
        p.write_bytes(blob[:cut])
        assert _load_all(p, models) == [], f"a model truncated to {cut} of {len(blob)} loaded"


@fuzz(120)
@given(kind=st.sampled_from(["seq", "er"]),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
                      min_size=1, max_size=6),
       compressed=st.booleans())
def test_mutated_archives_load_cleanly_or_fail_cleanly(tmp_path: Path, models, kind: str,
                                                       edits, compressed: bool) -> None:
    blob = models[kind]
    if compressed:  # deflated entries: mutations reach zlib
        buf = io.BytesIO()
        np.savez_compressed(buf, **_arrays(blob))
        blob = buf.getvalue()
    b = bytearray(blob)
    for pos, val in edits:
        b[int(pos * len(b))] = val
    p = tmp_path / "m.npz"
    p.write_bytes(bytes(b))
    _load_all(p, models)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids,
                                                                max_size=4),
    max_leaves=12)
_META_KEYS = ["format", "format_version", "task", "labels", "featurizer", "dim",
              "hyper_parameters", "finished", "stop_reason", "epochs", "other"]


@fuzz(200)
@given(kind=st.sampled_from(["seq", "er"]),
       op=st.sampled_from(["set", "set", "set", "delete", "replace", "set-nested", "raw"]),
       key=st.sampled_from(_META_KEYS), value=_json,
       raw=st.binary(max_size=40))
def test_mutated_or_missing_meta_json_is_clean(tmp_path: Path, models, kind: str, op: str,
                                               key: str, value, raw: bytes) -> None:
    arrays = _arrays(models[kind])
    meta = _meta(arrays)
    if op == "set":
        meta[key] = value
    elif op == "delete":
        meta.pop(key, None)
    elif op == "replace":
        meta = value
    elif op == "set-nested":  # inside the featurizer / hyper-parameters
        sub = "featurizer" if kind == "seq" and key < "l" else "hyper_parameters"
        inner = sorted(meta[sub]) + ["other"]
        meta[sub][inner[_META_KEYS.index(key) % len(inner)]] = value
    else:
        meta = raw
    _load_all(_npz(tmp_path / "m.npz", _with_meta(arrays, meta)), models)


@fuzz(120)
@given(kind=st.sampled_from(["seq", "er"]),
       name=st.sampled_from(["w", "meta.json", "feat.feature_strings", "feat.featurizer_json",
                             "feat.other"]),
       op=st.sampled_from(["drop", "array", "json"]),
       arr=st.one_of(
           st.lists(st.floats(), max_size=8).map(lambda v: np.asarray(v, np.float64)),
           st.lists(st.integers(-3, 300), max_size=8).map(lambda v: np.asarray(v, np.int64)),
           st.binary(max_size=16).map(lambda b: np.frombuffer(b, np.uint8).copy()),
           st.just(np.zeros((2, 3))), st.just(np.array(3.0)), st.just(np.array(["a", "b"]))),
       value=_json)
def test_mutated_arrays_are_clean(tmp_path: Path, models, kind: str, name: str, op: str, arr,
                                  value) -> None:
    arrays = _arrays(models[kind])
    if op == "drop":
        arrays.pop(name, None)
    elif op == "array":
        arrays[name] = arr
    else:  # a JSON document (the ER featurizer state is one)
        arrays[name] = np.frombuffer(json.dumps(value).encode(), np.uint8)
    _load_all(_npz(tmp_path / "m.npz", arrays), models)


@pytest.mark.parametrize("kind", ["seq", "er"])
def test_specific_defects_are_named(tmp_path: Path, models, kind: str) -> None:
    arrays = _arrays(models[kind])
    meta = _meta(arrays)
    w = arrays["w"]
    other = "entity-relation" if kind == "seq" else "sequence"
    right_cls = SequenceTagger if kind == "seq" else EntityRelationExtractor
    wrong_cls = EntityRelationExtractor if kind == "seq" else SequenceTagger

    def err(arrs, fn=load_estimator) -> str:
        p = _npz(tmp_path / "d.npz", arrs)
        with pytest.raises(ModelFileError) as e:
            fn(p)
        _check_clean(e.value, str(p))
        return str(e.value)

    # another format version (also types that compare equal to 1 in Python)
    for v in (FORMAT_VERSION + 1, 0, "1", 1.0, True, None):
        assert "format version" in err(_with_meta(arrays, {**meta, "format_version": v}))
    # another task, and the right file for the other estimator
    assert "unknown task 'parsing'" in err(_with_meta(arrays, {**meta, "task": "parsing"}))
    assert f"for task {TASK[kind]!r}, not {other!r}" in err(arrays, wrong_cls.load)
    assert "task" in err(_with_meta(arrays, {**meta, "task": ["x"]}))
    assert isinstance(right_cls.load(_npz(tmp_path / "ok.npz", arrays)), right_cls)
    # missing or broken meta.json, other format name
    assert "not a demidcd model" in err({k: v for k, v in arrays.items() if k != "meta.json"})
    assert "not a demidcd model" in err(_with_meta(arrays, {**meta, "format": "sklearn"}))
    assert "corrupt" in err(_with_meta(arrays, b"{\"format\": "))
    assert "corrupt" in err(_with_meta(arrays, b"\xff\xfe\x00"))
    assert "corrupt" in err(_with_meta(arrays, b"[" * 5000 + b"]" * 5000))
    assert "corrupt" in err(_with_meta(arrays, json.dumps(
        {**meta, "dim": float("inf")}).encode()))  # Infinity
    assert "corrupt" in err(_with_meta(arrays, json.dumps(meta).replace(
        '"dim": ', '"dim": 1e999, "x": ').encode()))
    assert "corrupt" in err({**arrays, "meta.json": np.zeros((2, 2))})
    # NaN / inf weights, wrong length, wrong shape or dtype, pickled objects
    for bad in (np.where(np.arange(w.size) == 3, np.nan, w), np.full_like(w, np.inf),
                w[:-1], np.append(w, 0.0), w.reshape(1, -1), w.astype(np.float32),
                w.astype(np.int64), np.array([]), np.array(1.0)):
        msg = err({**arrays, "w": bad})
        assert "weight" in msg or "corrupt" in msg
    no_dim = {k: v for k, v in meta.items() if k != "dim"}
    assert "match" in err(_with_meta({**arrays, "w": w[:-1]}, no_dim))
    with open(tmp_path / "obj.npz", "wb") as f:
        np.savez(f, **{**arrays, "w": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ModelFileError):
        load_estimator(tmp_path / "obj.npz")


TASK = {"seq": "sequence", "er": "entity-relation"}


class _Boom:
    def __reduce__(self):
        return (exec, ("raise SystemExit('pickle executed')",))


def test_untrusted_files_never_execute_code(tmp_path: Path, models) -> None:
    blob = pickle.dumps({"w": _Boom()})
    (tmp_path / "p.npz").write_bytes(blob)
    np.save(tmp_path / "a.npy", np.array([_Boom()], dtype=object), allow_pickle=True)
    np.save(tmp_path / "f.npy", np.zeros(3))  # a valid .npy is not an .npz either
    arrays = _arrays(models["seq"])
    with open(tmp_path / "o.npz", "wb") as f:
        np.savez(f, **{**arrays, "feat.feature_strings": np.array([_Boom()], dtype=object)})
    with open(tmp_path / "empty.npz", "wb") as f:
        np.savez(f)
    for name in ("p.npz", "a.npy", "f.npy", "o.npz", "empty.npz"):
        for fn in (load_model, load_estimator):
            with pytest.raises(ModelFileError) as e:
                fn(tmp_path / name)
            _check_clean(e.value, str(tmp_path / name))


@pytest.mark.parametrize("doc", [b"[" * 100_000 + b"]" * 100_000,
                                 b'{"min_count": 1e999, "entity_features": [], '
                                 b'"pair_features": []}'], ids=["deep", "inf"])
def test_er_featurizer_state_defects_are_clean(tmp_path: Path, models, doc: bytes) -> None:
    arrays = {**_arrays(models["er"]), "feat.featurizer_json": np.frombuffer(doc, np.uint8)}
    with pytest.raises(ModelFileError):
        load_estimator(_npz(tmp_path / "m.npz", arrays))


@pytest.mark.parametrize("value", [None, "x", [1], -1.0])
def test_er_bad_relation_loss_weight_is_clean(tmp_path: Path, models, value) -> None:
    arrays = _arrays(models["er"])
    meta = _meta(arrays)
    meta["hyper_parameters"]["relation_loss_weight"] = value
    path = _npz(tmp_path / "m.npz", _with_meta(arrays, meta))
    try:
        est = load_estimator(path)
    except ModelFileError:
        return
    try:
        est.predict(read_conll04(models["corp"])[:1])
    except DemidcdError:
        pass
