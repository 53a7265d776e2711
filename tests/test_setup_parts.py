"""Set-up in parts (issue 53, "set-up on every core"): byte ranges at sentence boundaries, the
count merge, the forked stages, and the model: sharded set-up gives the serial feature ids and,
trained with one process, the serial weights bit for bit."""

from __future__ import annotations

import os
import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.api import SequenceTagger
from demidcd.estimators.parts import PartsUnsupported, concat_encoded, prepare_fit_parts
from demidcd.io.shards import (
    byte_ranges,
    concat_packed,
    merge_counts,
    pack_strings,
    read_range,
)
from demidcd.io.tagged import read_tagged, read_tagged_part
from demidcd.parallel.forked import fork_stages
from demidcd.synthetic import generate

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")


def _corpus(n: int = 120, seed: int = 3) -> tuple[list[list[str]], list[list[str]]]:
    c = generate(n_sentences=n, n_tags=5, vocab_size=300, seed=seed)
    return c.tokens, c.tags


def _write_columns(path, X, Y, attrs=None, docstart: bool = False) -> None:
    with open(path, "w", encoding="utf-8") as f:
        if docstart:
            f.write("-DOCSTART- -X- O\n\n")
        for k, (s, t) in enumerate(zip(X, Y, strict=True)):
            for j, (w, y) in enumerate(zip(s, t, strict=True)):
                mid = f" {attrs[k][j]}" if attrs else ""
                f.write(f"{w}{mid} {y}\n")
            f.write("\n" if k % 7 else "\n\n")  # some double blank lines
            if docstart and k % 23 == 22:
                f.write("-DOCSTART- -X- O\n\n")


# -- byte ranges ---------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 5, 16])
def test_byte_ranges_tile_the_file_and_parse_as_the_whole(tmp_path, n):
    X, Y = _corpus(90)
    path = tmp_path / "t.txt"
    _write_columns(path, X, Y, docstart=True)
    ranges = byte_ranges(str(path), n, conllu=False)
    size = path.stat().st_size
    assert ranges[0].start == 0 and ranges[-1].end == size
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    assert 2 <= len(ranges) <= n
    data = path.read_bytes()
    for r in ranges[1:]:  # each cut just after a blank line that follows a token line
        assert data[r.start - 1:r.start] == b"\n" and data[:r.start].endswith(b"\n\n")
        assert r.line0 == data[:r.start].count(b"\n")
    whole = read_tagged(str(path), fmt="columns")
    tokens, tags, lines = [], [], []
    for r in ranges:
        part = read_tagged_part(str(path), r, "columns")
        tokens += part.tokens
        tags += part.tags
        lines += part.lines
    assert tokens == whole.tokens and tags == whole.tags and lines == whole.lines


def test_byte_ranges_conllu_keep_comments_with_their_sentence(tmp_path):
    rows = []
    for s in range(30):
        rows.append(f"# sent_id = {s}\n# text = x\n")
        for t in range(1, 4 + s % 3):
            rows.append(f"{t}\tw{s}_{t}\t_\tNOUN\tNN\t_\t0\troot\t_\t_\n")
        rows.append("\n")
    path = tmp_path / "t.conllu"
    path.write_text("".join(rows))
    ranges = byte_ranges(str(path), 4, conllu=True)
    assert len(ranges) >= 2
    for r in ranges[1:]:
        assert read_range(str(path), r).startswith("# sent_id")
    whole = read_tagged(str(path), fmt="conllu")
    got = [s for r in ranges for s in read_tagged_part(str(path), r, "conllu").tokens]
    assert got == whole.tokens


def test_byte_ranges_refuse_what_cannot_be_cut(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a X\n\nb Y\n\n")
    assert byte_ranges(str(path), 0, conllu=False) is None
    whole = byte_ranges(str(path), 1, conllu=False)  # one part: the whole file
    assert [(r.start, r.end, r.line0) for r in whole] == [(0, path.stat().st_size, 0)]
    assert byte_ranges("-", 2, conllu=False) is None
    assert byte_ranges(str(path), 2, conllu=False, encoding="utf-16") is None
    one = tmp_path / "one.txt"
    one.write_text("a X\nb Y\n")  # one sentence: nowhere to cut
    r = byte_ranges(str(one), 4, conllu=False)
    assert r is not None and len(r) == 1


# -- merging counts -------------------------------------------------------------------------
def test_merge_counts_against_a_counter():
    rng = random.Random(0)
    vocab = [f"f{i}" for i in range(50)]
    parts, total, order = [], Counter(), []
    for _ in range(4):
        c = Counter(rng.choice(vocab) for _ in range(rng.randint(0, 80)))
        names = list(c)
        rng.shuffle(names)
        parts.append((names, np.array([c[x] for x in names], np.int64)))
        total.update(c)
        order += [x for x in names if x not in order]
    m = merge_counts(parts)
    assert m.names == order  # first occurrence over (part, position)
    assert dict(zip(m.names, m.counts.tolist(), strict=True)) == dict(total)
    for (names, _), mk in zip(parts, m.maps, strict=True):
        assert [m.names[i] for i in mk.tolist()] == names


def test_merge_counts_is_exact_when_every_hash_collides():
    from demidcd.io.shards import _hashes, _merge_table, pack_strings

    names = ["a", "ab", "b", "a", "é", "ab", "", "é", ""]
    p = pack_strings(names)
    starts = np.concatenate(([0], p.ends[:-1]))
    real = _merge_table(p.blob, starts, p.ends, _hashes(p.blob, p.ends))
    same = _merge_table(p.blob, starts, p.ends, np.zeros(len(names), np.uint64))
    for got in (real, same):
        assert got[0].tolist() == [0, 1, 2, 0, 3, 1, 4, 3, 4]
        assert got[1].tolist() == [0, 1, 2, 4, 6]


# -- forked stages ---------------------------------------------------------------------------
def _children() -> set[int]:
    """This process' live or unreaped children (Linux /proc)."""
    out: set[int] = set()
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                out.add(int(d))
    return out


@needs_fork
def test_fork_stages_runs_each_part_in_its_own_process():
    before = _children()
    kept = {}

    def first(k):
        kept["pid"] = os.getpid()
        return k * 10

    def merge(a):
        assert a == [0, 10, 20]
        return [sum(a) + k for k in range(3)]

    def second(k, m):
        return (k, m, kept["pid"])

    out = fork_stages(3, first, merge, second)
    assert [(k, m) for k, m, _ in out] == [(0, 30), (1, 31), (2, 32)]
    pids = [p for _, _, p in out]
    assert pids[0] == os.getpid() and len(set(pids)) == 3  # stage 2 ran where stage 1 did
    assert _children() == before  # no child left behind


@needs_fork
@pytest.mark.parametrize("memfd", [True, False])
def test_fork_stages_hand_results_through_memory_files_or_temporary_ones(monkeypatch, memfd):
    """The parts' results travel through unnamed files in memory (``memfd_create``), and
    through temporary files where the system has none: the same results, no file left."""
    import tempfile

    from demidcd.parallel import forked

    made = []
    real = forked.scratch_file

    def recording():
        f = real()
        made.append(os.readlink(f"/proc/self/fd/{f.fileno()}"))
        return f

    monkeypatch.setattr(forked, "scratch_file", recording)
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    big = np.arange(300_000, dtype=np.int64)  # (an array, as the encodings are)

    def second(k, m):
        return m + k

    out = fork_stages(3, lambda k: big * k, lambda a: [sum(a)] * 3, second)
    for k, a in enumerate(out):
        assert np.array_equal(a, 3 * big + k)
    assert len(made) == 4  # an outbox and an inbox for each forked part
    still_open = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")}
    assert not still_open & set(made)  # every file closed: none left behind
    if memfd and hasattr(os, "memfd_create"):
        assert all(name.startswith("/memfd:demidcd-part") for name in made), made
    else:
        assert all(name.startswith(tempfile.gettempdir()) for name in made), made


@needs_fork
@pytest.mark.parametrize("where", ["first", "second"])
def test_fork_stages_raises_a_part_s_error(where):
    before = _children()
    def first(k):
        if where == "first" and k == 2:
            raise ValueError(f"bad part {k}")
        return k

    def second(k, m):
        if where == "second" and k == 1:
            raise KeyError("nope")
        return m

    with pytest.raises(ValueError if where == "first" else KeyError):
        fork_stages(3, first, lambda a: list(a), second)
    assert _children() == before


@needs_fork
def test_fork_stages_say_when_a_part_dies():
    from demidcd.parallel.forked import PartFailed

    before = _children()

    def first(k):
        if k == 1:
            os._exit(3)  # (as if killed)
        return k

    with pytest.raises(PartFailed, match="died"):
        fork_stages(2, first, lambda a: list(a), lambda k, m: m)
    assert _children() == before


# -- the model: serial set-up against set-up in parts -------------------------------------
def _slices(X, Y, n):
    cuts = np.linspace(0, len(X), n + 1).astype(int).tolist()
    return lambda k: (X[cuts[k]:cuts[k + 1]], Y[cuts[k]:cuts[k + 1]])


def _same_prepared(a, b) -> None:
    (fa, ma), (fb, mb) = a.featurizer, b.featurizer
    assert ma == mb and sorted(fa) == sorted(fb)
    for k in fa:
        assert np.array_equal(fa[k], fb[k]), k
    assert a.classes == b.classes and a.feature_kind == b.feature_kind
    for name in ("sent_ptr", "feat_ptr", "feat_idx", "feat_val", "bfeat_ptr", "bfeat_idx",
                 "bfeat_val"):
        x, y = getattr(a.train, name, None), getattr(b.train, name, None)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert np.array_equal(a.y, b.y)
    assert (a.seen_pairs is None) == (b.seen_pairs is None)
    if a.seen_pairs is not None:
        assert all(np.array_equal(x, y) for x, y in zip(a.seen_pairs, b.seen_pairs,
                                                        strict=True))


def _dicts(X):
    out = []
    for s in X:
        sent = []
        for i, w in enumerate(s):
            d = {"bias": 1.0, "w": w.lower(), "suf": w[-2:], "len": float(len(w)) / 3,
                 "up": w[:1].isupper(), "tags": [w[:1], w[-1:]]}
            if i:
                d["-1:w"] = s[i - 1].lower()
            sent.append(d)
        out.append(sent)
    return out


def _cases():
    X, Y = _corpus()
    attrs = [[("A" if len(w) % 2 else "B") + str(len(w) % 3) for w in s] for s in X]
    Xa = [[(w, a) for w, a in zip(s, at, strict=True)] for s, at in zip(X, attrs, strict=True)]
    return {
        "base": (X, Y, {}),
        "base-min-count-2": (X, Y, {"min_count": 2}),
        "base-attributes": (Xa, Y, {"min_count": 2}),
        "base-hashing": (X, Y, {"hashing": 4096}),
        "template": (Xa, Y, {"template": "chunking"}),
        "template-min-count-2": (Xa, Y, {"template": "chunking", "min_count": 2}),
        "dicts": (_dicts(X), Y, {}),
        "dicts-min-count-2": (_dicts(X), Y, {"min_count": 2}),
    }


@needs_fork
@pytest.mark.parametrize(("case", "n"), [(c, 3) for c in _cases()] + [("base", 2),
                                                                      ("dicts", 2)]
                         + [(c, 1) for c in _cases()])
def test_parts_give_the_serial_feature_ids_and_encoding(case, n):
    X, Y, kw = _cases()[case]
    serial = SequenceTagger(**kw).prepare_fit(X, Y, X[:15], Y[:15])
    parts = prepare_fit_parts(SequenceTagger(**kw), _slices(X, Y, n), n, X[:15], Y[:15])
    _same_prepared(serial, parts)
    for name in ("feat_ptr", "feat_idx"):
        assert np.array_equal(getattr(serial.dev, name), getattr(parts.dev, name))
    assert serial.gold == parts.gold
    if case.startswith("base") and "hashing" not in case:  # the dictionary itself
        assert serial.featurizer[1]["n_features"] > 100


@needs_fork
@pytest.mark.parametrize(("case", "algorithm"), [
    ("base", "dcd"), ("base-attributes", "dcd"), ("template", "dcd"), ("dicts", "dcd"),
    ("template", "crf"), ("dicts", "crf")])
def test_parts_train_the_serial_weights_bit_for_bit(case, algorithm):
    X, Y, kw = _cases()[case]
    kw = {**kw, "algorithm": algorithm, "threads": 1, "seed": 0, "max_epochs": 5,
          "time_limit": 60, "verbose": 0}
    if algorithm == "crf":
        kw = {**kw, "max_epochs": None, "max_iterations": 20}
        kw.pop("max_epochs")
    Xd = X[:20]  # (no dev set: a dev score picks the crf's model by the clock)
    a = SequenceTagger(**kw)
    a.fit_prepared(a.prepare_fit(X, Y))
    b = SequenceTagger(**kw)
    b.fit_prepared(prepare_fit_parts(b, _slices(X, Y, 3), 3))
    assert a.coef_.dtype == b.coef_.dtype and a.coef_.shape == b.coef_.shape
    if algorithm == "dcd":
        assert a.coef_.tobytes() == b.coef_.tobytes()
    else:  # the crf's gradient sums vary in the last bits from run to run, serial or not
        np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-9, atol=1e-12)
    assert np.any(a.coef_ != 0)
    assert a.predict(Xd) == b.predict(Xd)


def test_a_different_dictionary_is_seen():
    """The comparison above can fail: a part missing from the merge changes the ids."""
    X, Y, kw = _cases()["base"]
    serial = SequenceTagger(**kw).prepare_fit(X, Y)
    half = SequenceTagger(**kw).prepare_fit(X[:60], Y[:60])
    with pytest.raises(AssertionError):
        _same_prepared(serial, half)


def test_parts_refuse_what_they_cannot_set_up():
    from demidcd.api import NamedEntityTagger

    X, Y = _corpus(10)
    with pytest.raises(PartsUnsupported):
        prepare_fit_parts(NamedEntityTagger(), _slices(X, Y, 2), 2)


def test_concat_fills_values_of_parts_without_them():
    from demidcd.tasks.chain.features import EncodedSequences

    a = EncodedSequences(np.array([0, 1]), np.array([0, 2]), np.array([3, 4], np.int32),
                         np.array([0.5, 2.0]))
    b = EncodedSequences(np.array([0, 2]), np.array([0, 1, 2]), np.array([1, 7], np.int32))
    c = concat_encoded([a, b])
    assert c.sent_ptr.tolist() == [0, 1, 3] and c.feat_ptr.tolist() == [0, 2, 3, 4]
    assert c.feat_idx.tolist() == [3, 4, 1, 7] and c.feat_val.tolist() == [0.5, 2.0, 1, 1]


def _one_and_two_threads(path, tmp_path) -> dict[int, str]:
    """``demidcd train`` on ``path`` with the pos template at ``--threads`` 1 and 2 (DCD, 3
    epochs; key 1: set up in one part, 2: in two) and serially (key 0: ``--debug`` keeps the
    set-up in the command's process, where it is serial): asserts all succeed and write the
    same model byte for byte (but meta.json, which names --threads); returns each run's
    output, and checks that each said how it set up."""
    from cli_run import run

    outs, models = {}, {}
    for t, extra in ((0, ("--threads", "1", "--debug")), (1, ("--threads", "1")),
                     (2, ("--threads", "2"))):
        models[t] = tmp_path / f"m{t}.npz"
        r = run("train", "--train", str(path), "--template", "pos", *extra,
                "--algorithm", "dcd", "--max-epochs", "3", "--seed", "0",
                "--model", str(models[t]))
        assert r.returncode == 0, r.stderr
        outs[t] = r.stdout + r.stderr
    assert "with its features" not in outs[0]
    assert "in 1 part)" in outs[1] and "set-up in 1 process:" in outs[1]
    assert "in 2 parts)" in outs[2] and "set-up in 2 processes:" in outs[2]
    for t in (1, 2):
        _same_model(models[0], models[t])
    return outs


def _same_model(a_path, b_path) -> None:
    """Two model files hold the same arrays byte for byte (but meta.json, which names the
    options)."""
    a, b = np.load(a_path), np.load(b_path)
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        if k != "meta.json":
            assert a[k].tobytes() == b[k].tobytes(), k


# -- the command line ------------------------------------------------------------------------
@needs_fork
@pytest.mark.slow
def test_cli_sets_up_in_parts_and_writes_the_serial_model(tmp_path):
    """``--threads 2 --algorithm dcd`` with a template: set-up in 2 processes, training in
    one; ``--threads 1``: set-up in one part; the model's weights and dictionary are the
    serial set-up's, byte for byte (:func:`_one_and_two_threads`)."""

    X, Y = _corpus(200)
    attrs = [[w[-1:] for w in s] for s in X]
    path = tmp_path / "train.txt"
    _write_columns(path, X, Y, attrs)
    _one_and_two_threads(path, tmp_path)


@needs_fork
@pytest.mark.slow
def test_cli_parts_name_a_bad_line_as_the_serial_reader(tmp_path):
    from cli_run import run

    X, Y = _corpus(200)
    path = tmp_path / "bad.txt"
    _write_columns(path, X, Y)
    lines = path.read_text().split("\n")
    k = max(i for i, x in enumerate(lines) if x) - 3  # a token line in the last part
    lines[k] = lines[k] + " extra"
    path.write_text("\n".join(lines))
    errs = {}
    for t in (1, 2):
        r = run("train", "--train", str(path), "--template", "pos", "--threads", str(t),
                "--algorithm", "dcd", "--max-epochs", "1")
        assert r.returncode == 2
        errs[t] = r.stderr.strip().splitlines()[-1]
    assert errs[1] == errs[2] and f"bad.txt:{k + 1}:" in errs[2]
    _the_serial_reader_says(errs[1], "--template", "pos", "--train", str(path))


def test_what_sets_up_in_parts():
    """Every feature kind of the sequence tagger sets up in parts (the built-in features
    since their parts count words, not feature strings); a resume or a warm start does not
    (their vocabulary is the saved model's)."""
    from demidcd.estimators.parts import parts_supported

    assert parts_supported(SequenceTagger())
    assert parts_supported(SequenceTagger(template="pos"))
    assert not parts_supported(SequenceTagger(resume="m.npz"))


def test_token_slices_balance_tokens_and_leave_none_empty():
    from demidcd.estimators.parts import token_slices

    X = [["w"] * n for n in [5, 1, 1, 1, 1, 1, 10, 2, 2, 6]]
    cuts = token_slices(X, 3)
    assert cuts[0] == 0 and cuts[-1] == len(X) and cuts == sorted(set(cuts))
    sizes = [sum(map(len, X[a:b])) for a, b in zip(cuts, cuts[1:], strict=False)]
    assert len(sizes) == 3 and max(sizes) <= 16
    assert token_slices(X, 3, min_tokens=1000) is None
    assert token_slices([["a", "b"]], 4) is None
    assert token_slices(X, 50)[-1] == len(X) and len(token_slices(X, 50)) == len(X) + 1


@needs_fork
def test_library_fit_with_threads_sets_up_in_parts(monkeypatch):
    """``fit`` with ``threads`` 2 on enough tokens takes the parts (and the serial model)."""
    import demidcd.estimators.parts as parts

    X, Y, _ = _cases()["dicts"]
    calls = []
    real = parts.prepare_fit_parts

    def spy(*a, **k):
        calls.append(a[2])
        return real(*a, **k)

    monkeypatch.setattr(parts, "PARTS_MIN_TOKENS", 100)
    monkeypatch.setattr(parts, "prepare_fit_parts", spy)
    kw = {"algorithm": "crf", "max_iterations": 5, "verbose": 0, "seed": 0}
    a = SequenceTagger(threads=2, **kw).fit(X, Y)
    assert calls == [2]
    SequenceTagger(threads=1, **kw).fit(X, Y)
    assert calls == [2]  # (one thread: serial)
    monkeypatch.setattr(parts, "PARTS_MIN_TOKENS", 10**9)
    b = SequenceTagger(threads=2, **kw).fit(X, Y)  # (the crf's 2 threads, a serial set-up)
    assert calls == [2]
    assert a.featurizer_.features == b.featurizer_.features
    assert a.seen_pairs_[1].tobytes() == b.seen_pairs_[1].tobytes()
    assert a.coef_.shape == b.coef_.shape and np.any(a.coef_ != 0)
    # (the crf's threads sum gradients in an order of their own: its weights at 2 threads
    # vary from run to run in the last bits, amplified by L-BFGS; the weights bit for bit
    # are test_parts_train_the_serial_weights_bit_for_bit's, with one thread)


@needs_fork
@pytest.mark.parametrize("opened_by_i", [0, 40])
def test_chunker_parts_check_the_label_scheme_as_the_serial_fit(opened_by_i):
    """The chunkers' scheme (IOB2 unless over 1% of chunks open with I-X) from summed part
    counts: the same ``constraint_scheme_`` and model as the serial set-up."""
    from demidcd.api import ChunkTagger

    X, Y = _corpus(150)
    first = Y[0][0]
    Yc = []
    for s in Y:
        out, prev = [], None
        for y in s:
            out.append("O" if y == first else ("I-" if y == prev else "B-") + y)
            prev = y
        Yc.append(out)
    for s in Yc[:opened_by_i]:  # chunks opened by I-X: IOB1-like data
        for i, t in enumerate(s):
            if t.startswith("B-"):
                s[i] = "I-" + t[2:]
    serial_est = ChunkTagger(template="chunking")
    serial = serial_est.prepare_fit([[(w, w[-1:]) for w in s] for s in X], Yc)
    est = ChunkTagger(template="chunking")
    parts = prepare_fit_parts(est, _slices([[(w, w[-1:]) for w in s] for s in X], Yc, 3), 3)
    _same_prepared(serial, parts)
    assert est.constraint_scheme_ == serial_est.constraint_scheme_
    assert est.constraint_scheme_ == ("iob2" if opened_by_i == 0 else None)


def _partial_chunks(n: int = 150, seed: int = 5) -> tuple[list, list]:
    """IOB2 chunk tags over :func:`_corpus` with unknown (None) and set cells in the later
    sentences only (the first part stays fully labelled), one set naming a label that no
    known cell has."""
    X, Y = _corpus(n)
    first, rng = Y[0][0], random.Random(seed)
    Yc = []
    for k, s in enumerate(Y):
        out, prev = [], None
        for y in s:
            tag = "O" if y == first else ("I-" if y == prev else "B-") + y
            prev = y
            u = rng.random() if k >= n // 3 else 1.0
            out.append(None if u < 0.3 else {tag, "O"} if u < 0.4 else
                       {tag, "B-ZZ"} if u < 0.42 else tag)
        Yc.append(out)
    return [[(w, w[-1:]) for w in s] for s in X], Yc


@needs_fork
def test_parts_carry_the_serial_admitted_labels_of_partial_data():
    """Partially labelled data sets up in parts (it used to fall back to the serial set-up):
    the admitted-label CSR, gold ids, label rules, seen pairs and encoding are the serial
    set-up's, array for array; a sentence that admits no tagging is the serial error."""
    from demidcd.api import ChunkTagger
    from demidcd.errors import PartialLabelError

    X, Y = _partial_chunks()
    serial_est = ChunkTagger(template="chunking", weights="seen")
    serial = serial_est.prepare_fit(X, Y)
    est = ChunkTagger(template="chunking", weights="seen")
    parts = prepare_fit_parts(est, _slices(X, Y, 3), 3)
    _same_prepared(serial, parts)
    assert "B-ZZ" in parts.classes and np.count_nonzero(parts.y < 0) > 0
    for name in ("allowed_ptr", "allowed_idx"):
        a, b = getattr(serial.train, name), getattr(parts.train, name)
        assert a is not None and a.dtype == b.dtype and np.array_equal(a, b), name
    assert np.diff(parts.train.allowed_ptr[:50]).tolist() == [1] * 49  # (the labelled part)
    ra, rb = serial.train.label_rules, parts.train.label_rules
    assert ra is not None and all(np.array_equal(x, y) for x, y in zip(ra, rb, strict=True))
    assert est.constraint_scheme_ == serial_est.constraint_scheme_ == "iob2"
    # an I-X after O in a sentence of the last part admits no IOB2 tagging
    bad = [list(s) for s in Y]
    k = len(bad) - 5
    bad[k] = ["O"] + [f"I-{Y[0][0][2:] if len(Y[0][0]) > 2 else 'Q'}"] + bad[k][2:]
    errs = []
    for prep in (lambda e: e.prepare_fit(X, bad),
                 lambda e: prepare_fit_parts(e, _slices(X, bad, 3), 3)):
        with pytest.raises(PartialLabelError) as info:
            prep(ChunkTagger(template="chunking", label_scheme="iob2"))
        errs.append(str(info.value))
    assert errs[0] == errs[1] and errs[0].startswith(f"sentence {k + 1}, token 2:")


@needs_fork
@pytest.mark.slow
def test_cli_sets_up_partial_data_in_parts(tmp_path):
    """A file with '?' cells and a template, ``--threads 2``: set up in 2 parts (not read
    again serially), ``--threads 1`` in one; the model the serial set-up's byte for byte."""

    X, Y = _corpus(300)
    rng = random.Random(1)
    Yp = [[t if k < 150 or rng.random() > 0.5 else "?" for t in s] for k, s in enumerate(Y)]
    path = tmp_path / "partial.txt"
    _write_columns(path, X, Yp, [[w[-1:] for w in s] for s in X])
    for out in _one_and_two_threads(path, tmp_path).values():
        assert "with an unknown label" in out and "CCCP" in out


@needs_fork
@pytest.mark.slow
def test_cli_parts_name_an_infeasible_partial_line_as_the_serial_reader(tmp_path):
    """A chunk file whose '?' and set cells leave a sentence no IOB2 tagging: the same error
    naming the file and line with --threads 2 (the parts find it, the serial reader names the
    line) as with --threads 1."""
    from cli_run import run

    X, Y = _corpus(200)
    lines = []
    for k, (s, t) in enumerate(zip(X, Y, strict=True)):
        prev = None
        for j, (w, y) in enumerate(zip(s, t, strict=True)):
            tag = "O" if y == Y[0][0] else ("I-" if y == prev else "B-") + y
            prev = y
            cell = "?" if k > 100 and j % 4 == 1 else tag
            lines.append(f"{w} {w[-1:]} {cell}")
        lines.append("")
    k = len(lines) - 4  # a token line in the last part: after O, a set of I- labels only
    lines[k - 1] = lines[k - 1].rsplit(" ", 1)[0] + " O"
    lines[k] = lines[k].rsplit(" ", 1)[0] + " I-ZZ|I-YY"
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(lines) + "\n")
    errs = {}
    for t in (1, 2):
        r = run("train", "--train", str(path), "--task", "chunking", "--label-scheme", "iob2",
                "--template", "chunking", "--threads", str(t), "--algorithm", "dcd",
                "--max-epochs", "1")
        assert r.returncode == 2, r.stderr
        errs[t] = r.stderr.strip().splitlines()[-1]
    assert errs[1] == errs[2] and f"bad.txt:{k + 1}:" in errs[2]
    _the_serial_reader_says(errs[1], "--task", "chunking", "--label-scheme", "iob2",
                            "--template", "chunking", "--train", str(path))


def _the_serial_reader_says(line: str, *args: str) -> None:
    """The error ``line`` (``demidcd: error: …``) is the serial set-up's: ``--debug`` keeps
    the set-up in the command's process, serial, and ends with the exception's traceback."""
    from cli_run import run

    r = run("train", *args, "--threads", "1", "--algorithm", "dcd", "--max-epochs", "1",
            "--debug")
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1].split(": ", 1)[1] == line.split(": error: ", 1)[1]


def test_packed_strings_take_join_and_concatenate_as_python_does():
    """:class:`~demidcd.io.shards.PackedStrings`: ``take``, ``joined`` and
    :func:`concat_packed` give what slicing, ``"\\n".join`` and ``+`` give on the strings
    (empty strings, multi-byte characters, repeats and reversals among the indices)."""
    rng = random.Random(3)
    alphabet = ["a", "|", "é", "中", "-", ""]
    words = ["".join(rng.choices(alphabet, k=rng.randrange(4))) for _ in range(40)]
    a, b = pack_strings(words[:25]), pack_strings(words[25:])
    assert concat_packed([a, b]).strings() == words
    assert concat_packed([]).strings() == []
    which = np.array([rng.randrange(25) for _ in range(30)] + [24, 0], np.int64)
    assert a.take(which).strings() == [words[i] for i in which]
    assert a.joined(which).tobytes().decode() == "\n".join(words[i] for i in which)
    assert a.joined(np.zeros(0, np.int64)).tobytes() == b""


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="a\x00|é\U0001f600", max_size=40), max_size=60), st.data())
def test_packed_strings_order_is_pythons_string_order(words, data):
    """``PackedStrings.order`` (a ``lexsort`` of the leading bytes, then the ties that hold a
    longer string sorted by all their bytes) is ``sorted`` of the strings, stable: code
    points above U+FFFF, NUL bytes, equal strings and long shared prefixes (past the 24
    leading bytes: prefixes repeated to the length drawn)."""
    stem = data.draw(st.sampled_from(["", "x" * 23, "é" * 12, "a" * 30]))
    words = [stem + w for w in words]
    order = pack_strings(words).order()
    assert order.tolist() == sorted(range(len(words)), key=words.__getitem__)


@needs_fork
@pytest.mark.parametrize(("text", "extra", "says"), [
    ("a\nb\n\n" * 3000, (), ":1: expected at least 2 columns, found 1"),
    ("a B\nc D\n\n" * 3000, ("--column", "5"), ":1: expected 5 (label column) columns, found 2"),
    ("# sent_id = 1\n# text =\n\n" * 3000, ("--format", "conllu"), ": no sentences found")])
def test_cli_parts_check_the_first_line_and_emptiness_as_the_serial_reader(tmp_path, text, extra,
                                                                           says):
    """Files cut into parts whose first token line is too narrow (one column; fewer than the
    label column), or which hold no sentence: the serial reader's one line at every
    ``--threads`` (the parts took the first line's width without checking it: a one-column
    file trained, the label column raised IndexError; no sentence raised IndexError)."""
    from cli_run import run

    path = tmp_path / "bad.txt"
    path.write_text(text)
    for t in ("1", "2"):
        r = run("train", "--train", str(path), *extra, "--threads", t, "--max-epochs", "1")
        assert r.returncode == 2, (t, r.stdout[-500:], r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("demidcd: error: "), r.stderr
        assert f"{path}{says}" in lines[0], lines[0]
    _the_serial_reader_says(lines[0], "--train", str(path), *extra)


_ODD = "the Dog runs fast 3 a-b É".split()


def _odd_file(kind: str) -> bytes:
    """A small columns file with one oddity of ``kind``."""
    rng = random.Random(kind)
    body = "".join("".join(f"{rng.choice(_ODD)} {rng.choice('XYZ')}\n" for _ in range(3)) + "\n"
                   for _ in range(60))
    text = {"bom": "\ufeff" + body, "crlf": body.replace("\n", "\r\n"),
            "spaces-blank": body.replace("\n\n", "\n   \n"),
            "docstart": body.replace("\n\n", "\n\n-DOCSTART- -X-\n\n", 5),
            "no-final-newline": body.rstrip("\n"), "tabs": body.replace(" ", "\t"),
            "leading-blank-lines": "\n\n\n" + body, "nbsp": body + "a\u00a0b X\nc Y\n\n",
            "width-change-late": body + "a b X\n\n"}.get(kind, body)
    data = text.encode("utf-8")
    return data[:300] + b"\xff\xfe" + data[300:] if kind == "bad-utf8" else data


@needs_fork
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bom", "crlf", "spaces-blank", "docstart", "no-final-newline",
                                  "tabs", "leading-blank-lines", "nbsp", "width-change-late",
                                  "bad-utf8"])
def test_one_part_reads_odd_files_as_the_serial_set_up(tmp_path, kind):
    """``--threads 1`` sets up in one part: on files with a byte-order mark, CRLF, blank lines
    of spaces, -DOCSTART- lines, no final newline, tabs, leading blank lines, a no-break space
    inside a word, the model is the serial set-up's byte for byte (``--debug`` keeps it
    serial); a late line of another width and invalid UTF-8, the serial reader's line."""
    from cli_run import run

    path = tmp_path / f"{kind}.txt"
    path.write_bytes(_odd_file(kind))
    args = ("--train", str(path), "--format", "columns")
    r = run("train", *args, "--threads", "1", "--algorithm", "dcd", "--max-epochs", "2",
            "--model", str(tmp_path / "parts.npz"))
    if kind in ("width-change-late", "bad-utf8"):
        assert r.returncode == 2, r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert f"{kind}.txt:" in line
        _the_serial_reader_says(line, *args)
        return
    assert r.returncode == 0, r.stderr
    r = run("train", *args, "--threads", "1", "--algorithm", "dcd", "--max-epochs", "2",
            "--model", str(tmp_path / "serial.npz"), "--debug")
    assert r.returncode == 0, r.stderr
    _same_model(tmp_path / "parts.npz", tmp_path / "serial.npz")
