"""The active sets' compact φ pool on every real task (issue 43): the φ read back from the
pool equals the φ of the task's own records, bit for bit, for structures found by
loss-augmented inference under random weight vectors, whether the pool is coded or valued
(the old layout) and also after a compaction has moved every structure; and DCD over the two
pools gives the same w bit for bit.

:mod:`test_compact_records` covers a toy task and one chain task; here every task a learner
trains is built as its estimator builds it: chain tagging with the built-in features, a
template with B (label-bigram) lines, feature dicts with real values (the template language
itself has no values: its features count 1 per firing), chunking with the ``ner`` template and
the seen-pairs U layout (``weights="seen"``), dependency parsing (unlabelled and labelled, both
decoders, hashed features that collide) and entity-relation extraction."""

from __future__ import annotations

import functools
import itertools
import zlib

import numpy as np
import pytest
from test_dependency import random_treebank

from demidcd.estimators.sequence import ChunkTagger, SequenceTagger
from demidcd.io.conll04 import ENTITY_LABELS, RELATION_LABELS, ERSentence
from demidcd.solvers import kernels as K
from demidcd.solvers.activeset import ActiveSets
from demidcd.synthetic import generate
from demidcd.tasks.base import RecordBatch, Task
from demidcd.tasks.chain.features import SequenceFeaturizer
from demidcd.tasks.chain.records import seen_pairs
from demidcd.tasks.chain.template import DictFeaturizer, TemplateFeaturizer
from demidcd.tasks.chain.template_language import Template
from demidcd.tasks.dependency.encoding import encode_trees
from demidcd.tasks.dependency.spec import label_set
from demidcd.tasks.dependency.task import DependencyTask
from demidcd.tasks.entity_relation.features import EntityRelationFeaturizer
from demidcd.tasks.entity_relation.ilp import REL_OF
from demidcd.tasks.entity_relation.task import EntityRelationTask

ROUNDS = 4  # random weight vectors per pool
CAP = 64  # |A_i| bound of the φ checks: above ROUNDS · 2 records, so nothing is aggregated


# ------------------------------------------------------------------------------- the tasks
def _corpus(n: int, seed: int):
    return generate(n_sentences=n, n_tags=5, vocab_size=60, seed=seed)


def _tagger(est: SequenceTagger, featurizer, X: list, Y: list[list[str]],
            seen: bool = False) -> Task:
    """The training task of ``est`` as its fit builds it, with ``featurizer`` fitted on X;
    ``seen``: the seen-pairs U layout (what ``weights="seen"`` keeps)."""
    est.classes_ = sorted({t for s in Y for t in s})
    est.featurizer_ = featurizer.fit(X)
    if seen:
        index = {t: k for k, t in enumerate(est.classes_)}
        y = np.array([index[t] for s in Y for t in s], np.int32)
        est.seen_pairs_ = seen_pairs(featurizer.transform(X), y, featurizer.n_features,
                                     len(est.classes_))
    task = est.training_task(X, Y)
    assert (task.pairs is not None) == seen
    return task


def sequence_builtin() -> Task:
    c = _corpus(60, 1)
    return _tagger(SequenceTagger(min_count=1), SequenceFeaturizer(1, 0), c.tokens, c.tags)


TEMPLATE = "U00:%x[0,0]\nU01:%x[-1,0]/%x[0,0]\nU02:%x[0,1]\nB01:%x[0,1]\nB02:%x[-1,1]\nB\n"


def sequence_template() -> Task:
    """Two columns (word, its first letter), U and B lines: B features give the G·K² block."""
    c = _corpus(60, 2)
    X = [[(w, w[:1]) for w in s] for s in c.tokens]
    task = _tagger(SequenceTagger(min_count=1), TemplateFeaturizer(Template(TEMPLATE), 1),
                   X, c.tags)
    assert task.G > 0
    return task


def sequence_dicts() -> Task:
    """Feature dicts with real values (N(0, 1), a length ratio) next to string features."""
    c = _corpus(60, 3)
    rng = np.random.default_rng(3)
    X = [[{"w": w, "len": len(w) / 3.0, "z": float(rng.normal()), "b": bool(k % 2)}
          for k, w in enumerate(s)] for s in c.tokens]
    task = _tagger(SequenceTagger(min_count=1), DictFeaturizer(1, 0), X, c.tags)
    assert not np.isin(task.feat_val, (1.0, -1.0)).all()
    return task


def chunking_ner_seen() -> Task:
    """BIO chunk tags, the ``ner`` template (word clusters, wider window), seen pairs."""
    c = _corpus(60, 4)
    roles = sorted({t for s in c.tags for t in s})
    names = {t: ("O" if k == 0 else f"{'BI'[k % 2]}-{'XY'[k // 3]}") for k, t in
             enumerate(roles)}
    Y = [[names[t] for t in s] for s in c.tags]
    task = _tagger(ChunkTagger(min_count=1), SequenceFeaturizer(1, 0, "ner"), c.tokens, Y,
                   seen=True)
    assert task.dim < task.F * task.K + (task.K + 1) ** 2  # fewer weights than dense U
    return task


def dependency(labelled: bool, decoder: str) -> Task:
    """A random treebank (as tests/test_dependency.py's ``tiny``) with a second POS, features
    hashed into 2¹⁰ weights (collisions add up to values other than ±1)."""
    rng = np.random.default_rng(5 + labelled)
    words, pos, heads, rels = random_treebank(rng, 30)
    cpos = [[p[:1] + str(int(p[1:]) % 2) for p in s] for s in pos]
    ids = arcs = None
    if labelled:
        labels, arcs = label_set(heads, rels)
        ids = [[labels.index(r) for r in rs] for rs in rels]
    enc = encode_trees(words, pos, heads, cpos, ids)
    return DependencyTask(enc, hashing=1 << 10, decoder=decoder, label_arcs=arcs)


def entity_relation() -> Task:
    """Random sentences of 1–4 entities with relations that fit their argument types."""
    rng = np.random.default_rng(7)
    sents = []
    for k in range(30):
        n = int(rng.integers(2, 8))
        words = [f"w{rng.integers(15)}" for _ in range(n)]
        pos = [f"P{rng.integers(4)}" for _ in range(n)]
        tok = sorted(rng.choice(n, size=int(rng.integers(1, min(n, 4) + 1)), replace=False))
        tags = ["O"] * n
        for t in tok:
            tags[t] = ENTITY_LABELS[rng.integers(len(ENTITY_LABELS))]
        s = ERSentence(str(k), words, pos, tags)
        s.ent_tok = [int(t) for t in tok]
        s.ent_label = [tags[t] for t in tok]
        for a, b in itertools.permutations(range(len(tok)), 2):
            r = REL_OF[ENTITY_LABELS.index(s.ent_label[a]), ENTITY_LABELS.index(s.ent_label[b])]
            if r and rng.random() < 0.7:
                s.relations[(a, b)] = RELATION_LABELS[r]
        sents.append(s)
    f = EntityRelationFeaturizer().fit(sents)
    return EntityRelationTask(f.transform(sents), True, "exact", 0.5)


BUILDERS = {
    "sequence": sequence_builtin,
    "sequence-template": sequence_template,
    "sequence-dicts": sequence_dicts,
    "chunking-ner-seen": chunking_ner_seen,
    "dependency-unlabelled-eisner": functools.partial(dependency, False, "eisner"),
    "dependency-unlabelled-cle": functools.partial(dependency, False, "cle"),
    "dependency-labelled-eisner": functools.partial(dependency, True, "eisner"),
    "dependency-labelled-cle": functools.partial(dependency, True, "cle"),
    "entity-relation": entity_relation,
}


@functools.cache
def task_of(name: str) -> Task:
    return BUILDERS[name]()


# ------------------------------------------------------------------------------- helpers
def random_w(task: Task, rng: np.random.Generator) -> np.ndarray:
    """A random w at a random scale: small ones let Δ pick the structure (many errors), large
    ones the score."""
    return rng.normal(size=task.dim) * 10.0 ** rng.uniform(-2, 1)


def records_of(batch: RecordBatch, known: dict) -> None:
    """Add each record's φ to ``known`` by (example, hash); a structure found again (another
    w, the same hash) must come with the same φ, bit for bit."""
    for r in range(len(batch)):
        key = (int(batch.ex[r]), int(batch.hash[r]))
        phi = (batch.idx[batch.ptr[r]:batch.ptr[r + 1]].astype(np.int64),
               batch.val[batch.ptr[r]:batch.ptr[r + 1]].copy())
        if key in known:
            np.testing.assert_array_equal(known[key][0], phi[0])
            np.testing.assert_array_equal(known[key][1].view(np.int64), phi[1].view(np.int64))
        else:
            known[key] = phi


def check_stored(act: ActiveSets, known: dict) -> int:
    """Every live structure of ``act`` reads back as its record's φ, indices and values bit
    for bit (values compared as their bit patterns: −0.0 ≠ 0.0), through
    :meth:`ActiveSets.phi` and through the kernels' decoder (:meth:`ActiveSets.state`), with
    ‖φ‖² as the store computes it. Returns the number of structures checked."""
    live = [(i, int(s)) for i in range(act.n) for s in act.slots[i, :act.count[i]]]
    st = act.state()
    assert len(live) == len(st["example"])
    for q, (i, s) in enumerate(live):
        assert act.s_hash[s] != K.MERGED_HASH
        assert (act.s_len[s] >= 0) == act.coded  # the layout under test
        want_idx, want_val = known[(i, int(act.s_hash[s]))]
        idx, val = act.phi(s)
        assert idx.dtype == np.int64 and val.dtype == np.float64
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(val.view(np.int64), want_val.view(np.int64))
        lo, hi = st["phi_ptr"][q], st["phi_ptr"][q + 1]
        assert st["example"][q] == i and st["hash"][q] == act.s_hash[s]
        np.testing.assert_array_equal(st["phi_idx"][lo:hi], want_idx)
        np.testing.assert_array_equal(st["phi_val"][lo:hi].view(np.int64),
                                      want_val.view(np.int64))
        sq = 0.0
        for v in want_val:  # the store's sum, in its order
            sq += float(v) * float(v)
        assert act.s_f[s, K.SQNORM] == sq
    return len(live)


def compact(act: ActiveSets) -> bool:
    """Compact the pool (no garbage left, every live structure moved down or kept its
    place); returns whether some structure moved."""
    before = act.s_ptr.copy()
    act.compact()
    assert act.meta[K.M_PGARB] == 0
    live = act.slots[act.slots >= 0]
    assert (act.s_ptr[live] <= before[live]).all()
    return bool((act.s_ptr[live] < before[live]).any())


ALL_TASKS = list(BUILDERS)


# ------------------------------------------------------------------------------- the tests
def test_every_task_is_covered():
    """The builders give every task a learner trains, each with a w the coded pool takes, and
    among them φ values other than ±1 (real, counted and hashed ones)."""
    names = {task_of(n).name for n in ALL_TASKS}
    assert names == {"sequence", "dependency", "entity-relation"}
    assert all(task_of(n).dim <= K.CODED_MAX_DIM for n in ALL_TASKS)


@pytest.mark.parametrize("name", ALL_TASKS)
@pytest.mark.parametrize("coded", [True, False], ids=["coded", "valued"])
def test_stored_phi_equals_the_tasks_phi(name, coded):
    """Records of loss-augmented inference under random w, admitted unconditionally, read
    back as the task's φ; after each DCD pass (which shrinks structures, leaving garbage) and
    after the compaction that follows it, again."""
    task = task_of(name)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    act = ActiveSets(task.n_examples, task.dim, 0.1, max_active=CAP)
    act.coded = coded
    known: dict = {}
    ex = np.arange(task.n_examples, dtype=np.int64)
    checked = 0
    other = moved = False
    for _ in range(ROUNDS):
        for w in (random_w(task, rng), act.w):
            batch = task.loss_augmented(w, ex)
            records_of(batch, known)
            other |= not np.isin(batch.val, (1.0, -1.0)).all()
            act.insert(batch, -np.inf)
        checked += check_stored(act, known)
        act.update(ex)
        check_stored(act, known)
        moved |= compact(act)
        checked += check_stored(act, known)
    assert checked > 2 * task.n_examples
    assert moved, "a compaction must have moved some structure"
    assert other, "some φ value must be neither +1 nor −1"


def train(task: Task, coded: bool, loss: str, max_active: int, seed: int) -> ActiveSets:
    """DCD over records of random w and of the learner's own w, with compactions between."""
    rng = np.random.default_rng(seed)
    act = ActiveSets(task.n_examples, task.dim, 0.1, max_active=max_active, loss=loss)
    act.coded = coded
    ex = np.arange(task.n_examples, dtype=np.int64)
    for r in range(ROUNDS):
        for w in (random_w(task, rng), act.w):
            act.insert(task.loss_augmented(w, ex), -np.inf if r % 2 else None)
            act.update(rng.permutation(ex))
        if r % 2:
            compact(act)
    return act


@pytest.mark.parametrize("name", ALL_TASKS)
@pytest.mark.parametrize("loss,max_active", [("l2", 50), ("l2", 3), ("l1", 3)])
def test_coded_and_valued_pools_give_the_same_w(name, loss, max_active):
    """DCD (L2 sweeps, L1 SMO, with aggregation at cap 3) over the coded and the valued pool:
    the same w, dual and saved state bit for bit."""
    task = task_of(name)
    a = train(task, True, loss, max_active, 11)
    b = train(task, False, loss, max_active, 11)
    assert a.size > 0 and (a.w != 0).any()
    assert (a.s_len[a.slots[a.slots >= 0]] >= 0).all()
    assert (b.s_len[b.slots[b.slots >= 0]] < 0).all()
    if max_active == 3:  # full active sets aggregated structures (φ merged in the pool)
        assert (a.s_hash[a.slots[a.slots >= 0]] == K.MERGED_HASH).any()
    np.testing.assert_array_equal(a.w.view(np.int64), b.w.view(np.int64))
    assert a.dual_objective() == b.dual_objective()
    sa, sb = a.state(), b.state()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
