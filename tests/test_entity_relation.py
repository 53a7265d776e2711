"""Entity-relation task: reader, featurizer, exact/ILP solvers against brute force, records."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demidcd.errors import InputError, OptionError
from demidcd.io.conll04 import (
    ENTITY_LABELS,
    RELATION_LABELS,
    ERSentence,
    pair_index,
    read_conll04,
    split_corpus,
    write_conll04,
)
from demidcd.tasks.entity_relation.cbc import solve_cbc
from demidcd.tasks.entity_relation.features import EntityRelationFeaturizer
from demidcd.tasks.entity_relation.ilp import (
    REL_OF,
    RELATION_ARGS,
    pair_labels_given,
    solve_exact,
)
from demidcd.tasks.entity_relation.inference import get_solver
from demidcd.tasks.entity_relation.task import EntityRelationTask, structure_to_labels

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

try:
    import highspy  # noqa: F401

    HAVE_HIGHS = True
except ImportError:
    HAVE_HIGHS = False

SOLVERS = ["exact", "cbc"] + (["highs"] if HAVE_HIGHS else [])

SAMPLE = (
    "7\tPeop\t0\tO\tNNP/NNP\tJohn/Smith\tO\tO\tO\n"
    "7\tO\t1\tO\tVBZ\tlives\tO\tO\tO\n"
    "7\tO\t2\tO\tIN\tin\tO\tO\tO\n"
    "7\tLoc\t3\tO\tNNP\tLondon\tO\tO\tO\n"
    "7\tO\t4\tO\t,\tCOMMA\tO\tO\tO\n"
    "7\tOrg\t5\tO\tNNP\tIBM\tO\tO\tO\n"
    "\n"
    "0\t3\tLive_In\n"
    "5\t3\tOrgBased_In\n"
    "\n"
    "8\tO\t0\tO\tDT\tThe\tO\tO\tO\n"
    "8\tOther\t1\tO\tJJ\tIsraeli\tO\tO\tO\n"
    "8\tO\t2\tO\tNN\thumor\tO\tO\tO\n"
    "\n"
    "\n"
    "9\tO\t0\tO\tDT\tNothing\tO\tO\tO\n"
    "\n"
    "\n"
)


def _sample(tmp_path: Path) -> Path:
    p = tmp_path / "s.corp"
    p.write_text(SAMPLE)
    return p


# ----------------------------------------------------------------------------- reader / writer

def test_read_sample(tmp_path: Path) -> None:
    s = read_conll04(_sample(tmp_path))
    assert len(s) == 3
    assert s[0].words[0] == "John/Smith" and s[0].pos[0] == "NNP/NNP"
    assert s[0].ent_tok == [0, 3, 5] and s[0].ent_label == ["Peop", "Loc", "Org"]
    assert s[0].relations == {(0, 1): "Live_In", (2, 1): "OrgBased_In"}
    assert s[1].ent_tok == [1] and s[1].relations == {}
    assert s[2].n_entities == 0


def test_write_round_trip_is_byte_identical(tmp_path: Path) -> None:
    s = read_conll04(_sample(tmp_path))
    out = tmp_path / "o.corp"
    write_conll04(out, s)
    assert out.read_text() == SAMPLE
    # predictions replace labels; pair-array and dict forms agree
    pe = [[2, 1, 2], ["Loc"], []]
    n = 3
    arr = np.zeros(n * (n - 1), np.int64)
    arr[pair_index(n, 2, 1)] = RELATION_LABELS.index("OrgBased_In")
    write_conll04(out, s, pe, [arr, {}, {}])
    t = read_conll04(out)
    assert t[0].ent_label == ["Org", "Loc", "Org"] and t[1].ent_label == ["Loc"]
    assert t[0].relations == {(2, 1): "OrgBased_In"}
    assert not list(tmp_path.glob(".conll04-*"))  # no temporary left behind


BAD = [
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\n", 1, "columns"),
    ("7\tPerson\t0\tO\tNNP\tJohn\tO\tO\tO\n", 1, "entity type"),
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n7\tO\t2\tO\tVB\tx\tO\tO\tO\n", 2, "token index"),
    ("7\tPeop\tz\tO\tNNP\tJohn\tO\tO\tO\n", 1, "integer"),
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n7\tO\t1\tO\tVB\tx\tO\tO\tO\n\n0\t1\tKill\n", 4,
     "not an entity"),
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n7\tPeop\t1\tO\tNNP\tx\tO\tO\tO\n\n0\t5\tKill\n", 4,
     "not a token"),
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n7\tPeop\t1\tO\tNNP\tx\tO\tO\tO\n\n0\t1\tLoves\n", 4,
     "relation type"),
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n7\tPeop\t1\tO\tNNP\tx\tO\tO\tO\n\n0\t1\tKill\n"
     "0\t1\tKill\n", 5, "second relation"),
    ("0\t1\tKill\n", 1, "before any sentence"),
    ("7\tPeop\t0\tO\tNNP\tJohn\tO\tO\tO\n0\t0\tKill\n", 2, "inside a token block"),
]


@pytest.mark.parametrize("text,line,what", BAD)
def test_reader_rejects_malformed(tmp_path: Path, text: str, line: int, what: str) -> None:
    p = tmp_path / "bad.corp"
    p.write_text("\n\n" + text)  # two leading blank lines shift every line by 2
    with pytest.raises(InputError) as ei:
        read_conll04(p)
    assert ei.value.line == line + 2
    assert what in str(ei.value) and f"{p}:{line + 2}:" in str(ei.value)


def test_split_is_seeded(tmp_path: Path) -> None:
    s = [ERSentence(str(i), ["x"], ["NN"], ["O"]) for i in range(50)]
    a, b = split_corpus(s, 0.2, seed=3)
    assert len(a) == 40 and len(b) == 10
    assert {x.sid for x in a} | {x.sid for x in b} == {str(i) for i in range(50)}
    assert [x.sid for x in split_corpus(s, 0.2, seed=3)[1]] == [x.sid for x in b]
    assert [x.sid for x in split_corpus(s, 0.2, seed=4)[1]] != [x.sid for x in b]


# ----------------------------------------------------------------------------- solvers

_PAIR_SPACE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def brute_force(U: np.ndarray, P: np.ndarray) -> float:
    """max over the FULL variable space (every entity × every pair labelling), constraints
    checked on every combination (vectorised over the pair labellings: for pair k, whether
    each labelling's relation r_k is allowed between the entity labels (e_a, e_b), i.e.
    r_k = 0 or RELATION_ARGS[r_k] = (e_a, e_b), tabulated once per number of pairs for the 16
    label pairs)."""
    n = U.shape[0]
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    m = len(pairs)
    if m not in _PAIR_SPACE:
        space = np.array(list(itertools.product(range(6), repeat=m)),
                         np.int64).reshape(6**m, m)
        allowed = np.empty((m, 4, 4, space.shape[0]), bool)  # [k, e_a, e_b, labelling]
        for k in range(m):
            r = space[:, k]
            for ea in range(4):
                for eb in range(4):
                    allowed[k, ea, eb] = (r == 0) | ((RELATION_ARGS[r, 0] == ea) &
                                                     (RELATION_ARGS[r, 1] == eb))
        _PAIR_SPACE[m] = space, allowed
    space, allowed = _PAIR_SPACE[m]  # (6^m, m)
    pscore = P[np.arange(m), space].sum(axis=1) if m else np.zeros(1)
    best = -np.inf
    for ent in itertools.product(range(4), repeat=n):
        ok = np.ones(space.shape[0], bool)
        for k, (a, b) in enumerate(pairs):
            ok &= allowed[k, ent[a], ent[b]]
        base = sum(U[a, ent[a]] for a in range(n))
        best = max(best, base + pscore[ok].max())
    return best


def _check_feasible(ent: np.ndarray, pair: np.ndarray, n: int) -> None:
    assert ent.shape == (n,) and pair.shape == (n * (n - 1),)
    assert np.all((ent >= 0) & (ent < 4)) and np.all((pair >= 0) & (pair < 6))
    for a in range(n):
        for b in range(n):
            if a != b:
                r = pair[pair_index(n, a, b)]
                if r:
                    assert (ent[a], ent[b]) == tuple(RELATION_ARGS[r])


def _instance(seed: int, n: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, 4)) * scale
    P = rng.normal(size=(n * (n - 1), 6))
    if seed % 3 == 0:  # ties: integer scores
        U, P = np.round(U), np.round(P)
    return U, P


@pytest.mark.parametrize("solver", SOLVERS)
def test_solvers_equal_full_brute_force(solver: str) -> None:
    solve = get_solver(solver)
    for seed in range(12 if solver == "exact" else 5):
        for n in (0, 1, 2, 3):
            if n == 3 and solver != "exact" and seed > 1:
                continue
            U, P = _instance(seed, n, scale=(1.0, 0.2)[seed % 2])
            ent, pair, obj, proven = solve(U, P)
            assert proven
            _check_feasible(ent, pair, n)
            assert obj == pytest.approx(brute_force(U, P), abs=1e-9)
            got = U[np.arange(n), ent].sum() + P[np.arange(n * (n - 1)), pair].sum()
            assert got == pytest.approx(obj, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.integers(2, 7), st.sampled_from([0.0, 0.3, 1.0, 3.0]))
def test_exact_equals_enumeration_of_entity_labellings(seed: int, n: int, scale: float) -> None:
    """Larger n: enumerate 4^n entity labellings, pairs by best allowed label (the reduction
    that the n ≤ 3 full brute force above confirms)."""
    U, P = _instance(seed, n, scale)
    pair = np.zeros(n * (n - 1), np.int64)
    best = max(pair_labels_given(U, P, REL_OF, np.array(e, np.int64), pair)
               for e in itertools.product(range(4), repeat=n))
    ent, pr, obj, _ = solve_exact(U, P)
    _check_feasible(ent, pr, n)
    assert obj == pytest.approx(best, abs=1e-9)


@pytest.mark.parametrize("solver", [s for s in SOLVERS if s != "exact"])
def test_ilp_solvers_match_exact_on_medium_sentences(solver: str) -> None:
    solve = get_solver(solver)
    for seed, n in ((1, 5), (2, 6)):
        U, P = _instance(seed, n, 1.0)
        ent, pair, obj, proven = solve(U, P, time_limit=30.0)
        assert proven
        _check_feasible(ent, pair, n)
        assert obj == pytest.approx(solve_exact(U, P).obj, abs=1e-6)


def test_unknown_solver() -> None:
    with pytest.raises(OptionError):
        get_solver("gurobi")


# ----------------------------------------------------------------------------- task

def _task(tmp_path: Path, solver: str = "exact", rlw: float = 1.0):
    s = read_conll04(_sample(tmp_path))
    s = s + [ERSentence("10", ["A", "met", "B", "in", "C"], ["NNP", "VBD", "NNP", "IN", "NNP"],
                        ["Peop", "O", "Peop", "O", "Loc"])]
    s[-1].ent_tok, s[-1].ent_label = [0, 2, 4], ["Peop", "Peop", "Loc"]
    s[-1].relations = {(0, 1): "Kill", (1, 2): "Live_In"}
    f = EntityRelationFeaturizer().fit(s)
    return s, f, EntityRelationTask(f.transform(s), True, solver, rlw)


def test_featurizer_state_round_trip(tmp_path: Path) -> None:
    s, f, task = _task(tmp_path)
    g = EntityRelationFeaturizer.from_state(f.state())
    a, b = f.transform(s), g.transform(s)
    for name in ("ent_ptr", "pair_ptr", "ef_ptr", "ef_idx", "pf_ptr", "pf_idx", "ent_gold",
                 "pair_gold"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert task.dim == 4 * f.n_entity_features + 6 * f.n_pair_features
    # min_count drops rare strings
    assert EntityRelationFeaturizer(min_count=2).fit(s).n_entity_features < f.n_entity_features


def _np_scores(task: EntityRelationTask, w: np.ndarray, i: int, augment: bool):
    """U, P of sentence i from the encoded arrays in plain numpy (independent of the kernels)."""
    e = task.enc
    U = np.array([[w[e.ef_idx[e.ef_ptr[j]:e.ef_ptr[j + 1]] * 4 + lab].sum() for lab in range(4)]
                  for j in range(e.ent_ptr[i], e.ent_ptr[i + 1])]).reshape(-1, 4)
    fe4 = 4 * e.n_entity_features
    P = np.array([[w[fe4 + e.pf_idx[e.pf_ptr[k]:e.pf_ptr[k + 1]] * 6 + r].sum() for r in range(6)]
                  for k in range(e.pair_ptr[i], e.pair_ptr[i + 1])]).reshape(-1, 6)
    if augment:
        U += np.arange(4)[None, :] != e.ent_gold[e.ent_ptr[i]:e.ent_ptr[i + 1], None]
        P += task.relation_loss_weight * (
            np.arange(6)[None, :] != e.pair_gold[e.pair_ptr[i]:e.pair_ptr[i + 1], None])
    return U, P


@pytest.mark.parametrize("solver", SOLVERS)
def test_task_inference_equals_brute_force(tmp_path: Path, solver: str) -> None:
    _, _, task = _task(tmp_path, solver, rlw=0.5)
    rng = np.random.default_rng(5)
    ex = np.arange(task.n_examples)
    for trial in range(2):
        w = rng.normal(size=task.dim) * (0.3 if trial else 1.0)
        for augment in (False, True):
            ent, pair, eoff, poff, obj = task.infer(w, ex, augment)
            for q in ex:
                y = (ent[eoff[q]:eoff[q + 1]], pair[poff[q]:poff[q + 1]])
                _check_feasible(y[0], y[1], len(y[0]))
                assert obj[q] == pytest.approx(brute_force(*_np_scores(task, w, q, augment)),
                                               abs=1e-9)
                # the objective is the (augmented) score of the returned labelling
                s = task.score(w, int(q), y)
                if augment:
                    g = task.gold(np.array([q]))[0]
                    s += np.sum(y[0] != g[0]) + 0.5 * np.sum(y[1] != g[1])
                assert obj[q] == pytest.approx(s, abs=1e-9)


def test_records_and_score_identity(tmp_path: Path) -> None:
    _, _, task = _task(tmp_path, rlw=0.5)
    rng = np.random.default_rng(1)
    ex = np.arange(task.n_examples)
    gold = task.gold(ex)
    for _ in range(5):
        w = rng.normal(size=task.dim)
        b = task.loss_augmented(w, ex)
        pred = task.decode(w, ex)
        assert len(b) >= 1
        for k in range(len(b)):
            i = int(b.ex[k])
            idx, val = b.idx[b.ptr[k]:b.ptr[k + 1]], b.val[b.ptr[k]:b.ptr[k + 1]]
            assert np.all(np.diff(idx) > 0) and np.all(val != 0) and b.delta[k] > 0
            assert b.margin[k] == pytest.approx(w[idx] @ val, abs=1e-9)
        for i in ex:
            idx, val, dl = task.phi_delta(int(i), pred[i])
            # w·φ = score(gold) − score(y)
            assert w[idx] @ val == pytest.approx(
                task.score(w, int(i), gold[i]) - task.score(w, int(i), pred[i]), abs=1e-9)
            want = np.sum(pred[i][0] != gold[i][0]) + 0.5 * np.sum(pred[i][1] != gold[i][1])
            assert dl == pytest.approx(want)
        # gold itself: no record, Δ = 0, φ = 0
        idx, val, dl = task.phi_delta(0, gold[0])
        assert dl == 0 and len(idx) == 0
    # argmax records: exactly the examples decode gets wrong, with their φ
    w = rng.normal(size=task.dim)
    pred = task.decode(w, ex)
    wrong = [int(i) for i in ex if task.phi_delta(int(i), pred[i])[2] > 0]
    b = task.argmax_records(w, ex)
    assert b.ex.tolist() == wrong
    for k, i in enumerate(wrong):
        idx, val, dl = task.phi_delta(i, pred[i])
        assert np.array_equal(b.idx[b.ptr[k]:b.ptr[k + 1]], idx) and b.delta[k] == dl
    # hashes identify a structure among those of its example: equal structures hash equally,
    # different ones differently (two examples may share a labelling, hence a hash)
    w = rng.normal(size=task.dim)
    b1, b2 = task.loss_augmented(w, ex), task.loss_augmented(w, ex)
    assert np.array_equal(b1.hash, b2.hash)
    compared = differ = 0
    for _ in range(5):  # the same examples' structures under other weights
        bo = task.loss_augmented(rng.normal(size=task.dim), ex)
        pos = {int(i): q for q, i in enumerate(bo.ex)}
        for k, i in enumerate(b1.ex.tolist()):
            if i not in pos:
                continue
            q = pos[i]
            same = all(np.array_equal(a[b1.ptr[k]:b1.ptr[k + 1]], o[bo.ptr[q]:bo.ptr[q + 1]])
                       for a, o in ((b1.idx, bo.idx), (b1.val, bo.val)))
            assert (b1.hash[k] == bo.hash[q]) == same
            compared, differ = compared + 1, differ + (not same)
    assert compared and differ  # both cases were seen


def test_metric_and_labels(tmp_path: Path) -> None:
    s, _, task = _task(tmp_path)
    ex = np.arange(task.n_examples)
    gold = task.gold(ex)
    m = task.metric(gold, gold)
    assert m["score"] == 1.0 and m["relation_f1"] == 1.0
    pred = [(g[0].copy(), g[1].copy()) for g in gold]
    pred[0][0][0] = 3  # one wrong entity of 7
    pred[0][1][:] = 0  # drop both relations of sentence 0, keep the 2 of the last sentence
    pred[3][1][pair_index(3, 2, 0)] = 1  # one spurious relation
    m = task.metric(gold, pred)
    assert m["entity_f1"] == pytest.approx(6 / 7)
    assert m["relation_p"] == pytest.approx(2 / 3) and m["relation_r"] == pytest.approx(2 / 4)
    ents, rels = structure_to_labels(gold[0], 3)
    assert ents == [s[0].ent_label[a] for a in range(3)] and rels == s[0].relations
    assert set(ents) <= set(ENTITY_LABELS)


def test_trained_weights_fit_training_data(tmp_path: Path) -> None:
    """A few structured-perceptron steps with the records drive the sample to Δ = 0."""
    _, _, task = _task(tmp_path)
    w = np.zeros(task.dim)
    ex = np.arange(task.n_examples)
    for _ in range(30):
        b = task.loss_augmented(w, ex)
        if len(b) == 0:
            break
        for k in range(len(b)):
            w[b.idx[b.ptr[k]:b.ptr[k + 1]]] += b.val[b.ptr[k]:b.ptr[k + 1]]
    assert len(task.loss_augmented(w, ex)) == 0
    assert task.metric(task.gold(ex), task.decode(w, ex))["score"] == 1.0


# ----------------------------------------------------------------------------- real corpus

@pytest.mark.slow
def test_full_corpus_counts() -> None:
    path = DATA / "conll04" / "conll04.corp"
    if not path.exists():
        pytest.skip("shared data absent")
    s = read_conll04(path)
    assert len(s) == 5516
    assert sum(x.n_entities for x in s) == 14177
    assert sum(len(x.relations) for x in s) == 2048
    train, test = split_corpus(s, 0.2, seed=0)
    assert len(train) == 4412 and len(test) == 1104


def test_cbc_importable() -> None:
    U = np.array([[0.0, 1.0, 0.0, 0.0]])
    ent, pair, obj, _ = solve_cbc(U, np.zeros((0, 6)))
    assert ent.tolist() == [1] and obj == 1.0
