"""Issue 54, past one machine: the pieces of a cluster run checked in one process (byte ranges,
the partitioned count, CoCoA+'s merged changes, a lost part's restart), and, marked slow, a
local Ray cluster end to end."""

from __future__ import annotations

import numpy as np
import pytest

from demidcd.errors import InputError, OptionError
from demidcd.estimators.cluster import node_parts
from demidcd.estimators.cluster_node import ClusterNode
from demidcd.estimators.parts import concat_encoded
from demidcd.io.shards import ByteRange, file_parts
from demidcd.io.tagged import first_columns_state
from demidcd.solvers.cocoa import LocalPart, coordinate_sigma
from demidcd.solvers.common import SolverConfig
from demidcd.solvers.dcd import train_dcd
from demidcd.synthetic import generator_model, sample
from demidcd.tasks.chain.features import SequenceFeaturizer
from demidcd.tasks.chain.task import SequenceTask


def _corpus_file(path, n=60, seed=3, extra_blank=False):
    m = generator_model(n_tags=5, vocab_size=300, mean_length=8, max_length=20, seed=seed)
    c = sample(m, n, seed=seed)
    with open(path, "w") as f:
        for toks, tags in zip(c.tokens, c.tags, strict=True):
            f.write("".join(f"{w}\t{t}\n" for w, t in zip(toks, tags, strict=True)) + "\n")
            if extra_blank:
                f.write("\n \n")
    return c


def test_parts_one_range_a_node_none_past_the_sentences(tmp_path):
    path = tmp_path / "c.txt"
    _corpus_file(path, n=3)
    size = path.stat().st_size
    one = node_parts(str(path), 1, False, "utf-8")
    assert one == [(str(path), ByteRange(0, size, 0))]
    many = node_parts(str(path), 6, False, "utf-8")  # three sentences: three ranges, three idle
    assert len(many) == 6 and [r is None for _, r in many] == [False] * 3 + [True] * 3
    assert many[0][1].start == 0 and many[2][1].end == size
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(b"")
    with pytest.raises(OptionError, match="plain file"):
        node_parts(str(gz), 2, False, "utf-8")


def test_file_parts_deal_every_file_once(tmp_path):
    for j in range(5):
        (tmp_path / f"p{j}.txt").write_text("a\tB\n\n" * (j + 1))
    parts = file_parts(str(tmp_path / "p*.txt"), 2)
    names = sorted(n for p in parts for n in p)
    assert names == sorted(str(tmp_path / f"p{j}.txt") for j in range(5))
    assert all(parts)
    assert node_parts(str(tmp_path / "p*.txt"), 2, False, "utf-8") == [(p, None) for p in parts]


@pytest.mark.parametrize("min_count", [1, 2, 3])
def test_nodes_count_the_driver_merges_into_the_serial_feature_space(tmp_path, min_count):
    """The set-up of :class:`ClusterRun` without Ray: nodes read their ranges, count, and
    encode with the maps of a merge done by a featurizer of the driver's (not one that
    counted); one node more than ranges (an empty part)."""
    path = tmp_path / "c.txt"
    c = _corpus_file(path, n=300, seed=2)
    serial = SequenceFeaturizer(min_count=min_count).fit(c.tokens)
    ranges = node_parts(str(path), 4, False, "utf-8")
    ranges[1:3] = [ranges[1], (str(path), None), ranges[2]]  # an idle node in the middle
    nodes = [ClusterNode(k) for k in range(len(ranges))]
    try:
        reads = [n.read(p, r, "columns", None, (), "utf-8", 5000, "?", None)
                 for n, (p, r) in zip(nodes, ranges, strict=True)]
        assert [r["examples"] > 0 for r in reads] == [True, True, False, True, True]
        assert sum(r["examples"] for r in reads) == len(c.tokens)
        params = (min_count, 0, "base")
        counted = [n.count(params) for n in nodes]
        driver = SequenceFeaturizer(min_count=min_count)
        maps = iter(driver.merge_parts([x for x in counted if x is not None]))
        classes = sorted({t for s in c.tags for t in s})
        encs = [n.encode(None if x is None else next(maps), driver.n_features, classes, False)
                for n, x in zip(nodes, counted, strict=True)]
        assert driver.n_features == serial.n_features
        assert driver.transform(c.tokens[:5]).feat_idx.tolist() == \
            serial.transform(c.tokens[:5]).feat_idx.tolist()  # the same ids, the same order
        whole = serial.transform(c.tokens)
        got = concat_encoded([n.enc for n in nodes])
        assert np.array_equal(got.feat_idx, whole.feat_idx)
        assert np.array_equal(got.feat_ptr, whole.feat_ptr)
        fired = np.zeros(serial.n_features, np.int64)
        for _, _, bits in encs:
            fired += np.unpackbits(bits, count=serial.n_features)
        F = serial.n_features
        assert np.array_equal(fired > 0, np.bincount(whole.feat_idx, minlength=F) > 0)
        # a dictionary from only one part would differ (the test can fail)
        assert SequenceFeaturizer(min_count=min_count).fit(c.tokens[:150]).n_features != \
            serial.n_features
    finally:
        for n in nodes:
            n.monitor.stop()


def _problem(n=80, seed=4):
    m = generator_model(n_tags=4, vocab_size=150, mean_length=7, max_length=15, seed=seed)
    c = sample(m, n, seed=seed + 1)
    f = SequenceFeaturizer(min_count=1).fit(c.tokens)
    tags = sorted({t for s in c.tags for t in s})
    index = {t: j for j, t in enumerate(tags)}

    def task(lo, hi):
        enc = f.transform(c.tokens[lo:hi])
        y = np.array([index[t] for s in c.tags[lo:hi] for t in s], np.int32)
        t = SequenceTask(enc, y, len(tags), f.n_features)
        t.fired = np.bincount(enc.feat_idx, minlength=f.n_features) > 0
        return t

    return task, n


class _Cluster:
    """K local parts merged as the driver merges them, each part's change reaching the others
    one round late (asynchronous: no part waits for the others)."""

    def __init__(self, tasks, cfg, per_coordinate=True):
        self.cfg = cfg
        sigma = len(tasks)
        if per_coordinate:  # σ′_j: the parts that fire coordinate j's feature
            nf = sum(t.fired.astype(np.int64) for t in tasks)
            sigma = coordinate_sigma(nf, tasks[0].K, tasks[0].dim, len(tasks))
            assert 1 <= sigma.min() and sigma.max() == len(tasks) and (sigma == 1).any()
        self.parts = [LocalPart(t, cfg, sigma, [0, k]) for k, t in enumerate(tasks)]
        self.w = np.zeros(tasks[0].dim)
        for p in self.parts:
            p.reset(self.w)
        self.in_flight = []

    def round(self):
        out = []
        for k, p in enumerate(self.parts):
            p.work(0.002)
            idx, val = p.commit()
            np.add.at(self.w, idx, val)
            out.append((k, idx, val))
        for k, idx, val in self.in_flight:  # last round's changes arrive now
            for j, p in enumerate(self.parts):
                if j != k:
                    p.apply(idx, val)
        self.in_flight = out

    def flush(self):
        for k, idx, val in self.in_flight:
            for j, p in enumerate(self.parts):
                if j != k:
                    p.apply(idx, val)
        self.in_flight = []

    def dual(self):
        lin = sum(p.dual_terms()[0] for p in self.parts)
        sq = sum(p.dual_terms()[1] for p in self.parts)
        return lin - sq / (4 * self.cfg.C) - 0.5 * self.w @ self.w

    def primal(self):
        return 0.5 * self.w @ self.w + sum(p.loss_part(self.w, final=True)[0]
                                           for p in self.parts)

    def rounds_until(self, whole: LocalPart, p_best: float, rel: float, gap: float | None,
                     most: int) -> None:
        """Rounds, ``most`` at most, until the driver's w is within ``rel`` of ``p_best`` (and,
        ``gap`` given, its certified duality gap under ``gap``), checked every 100 rounds with
        ``whole``, a part over every example that only evaluates (the parts' own
        ``loss_part(final=True)`` would overwrite their base): the primal and the dual are
        those :meth:`primal` and :meth:`dual` give at the same w."""
        for r in range(1, most + 1):
            self.round()
            if r % 100 == 0:
                p = 0.5 * self.w @ self.w + whole.loss_part(self.w, final=True)[0]
                if abs(p - p_best) / p_best < rel and (gap is None or
                                                       (p - self.dual()) / p < gap):
                    return


@pytest.mark.parametrize("per_coordinate", [True, False])
def test_merged_changes_keep_w_the_sum_of_alpha_phi_over_all_parts(per_coordinate):
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-3)
    cl = _Cluster([task(0, 30), task(30, 55), task(55, n)], cfg, per_coordinate)
    for r in range(40):
        cl.round()
        rebuilt = sum(p.own_w() for p in cl.parts)
        # the driver's w is Σ α φ of every part, after every merge (a replay of the changes)
        assert np.allclose(cl.w, rebuilt, atol=1e-9), r
    cl.flush()
    for p in cl.parts:  # every part's view is the global w once the changes have arrived
        assert np.allclose(p.view(), cl.w, atol=1e-9)
    assert np.abs(cl.w).sum() > 0


@pytest.mark.parametrize("per_coordinate", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_two_parts_reach_the_one_dcd_optimum(per_coordinate):
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-4, max_epochs=500)
    one = train_dcd(task(0, n), cfg)
    p_one = one.history[-1].get("primal") or (0.5 * one.w @ one.w + LocalPart(
        task(0, n), cfg, 1, 0).loss_part(one.w, final=True)[0])
    cl = _Cluster([task(0, 40), task(40, n)], cfg, per_coordinate)
    cl.rounds_until(LocalPart(task(0, n), cfg, 1, 0), p_one, 1e-3, 2e-3, 3000)  # (~900 alone)
    cl.flush()
    p, d = cl.primal(), cl.dual()
    assert d <= p + 1e-9  # weak duality: the certified gap is a gap
    assert abs(p - p_one) / p_one < 1e-3, (p, p_one)
    assert (p - d) / p < 2e-3


@pytest.mark.parametrize("per_coordinate", [True, False])
def test_a_checkpoint_in_pieces_restores_the_parts_dual_state(per_coordinate):
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-4)
    cl = _Cluster([task(0, 40), task(40, n)], cfg, per_coordinate)
    for _ in range(100):
        cl.round()
    old = cl.parts[1]
    pieces = [old.checkpoint(j, 3) for j in range(3)]
    assert sorted(np.concatenate([p["examples"] for p in pieces]).tolist()) == list(range(40))
    new = LocalPart(task(40, n), cfg, old.sig if per_coordinate else 2, [1, 1])
    assert sum(new.restore_checkpoint(p) for p in pieces) == old.act.size > 0
    a, b = old.state(), new.state()  # (decoded, in α's units)
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    assert np.allclose(new.own_w(), old.own_w(), atol=1e-12)
    assert np.allclose(new.dual_terms(), old.dual_terms(), rtol=1e-12)
    if not per_coordinate:  # the pieces hold the pool's words: with one σ′ φ stays ±1 in
        # them (about 2.4 bytes an entry), not (int32, float64) pairs (12)
        val = a["phi_val"]
        assert np.array_equal(val, np.round(val)) and (np.abs(val) == 1).mean() > 0.9
        words = sum(p["words"].nbytes for p in pieces)
        assert words < 0.5 * (a["phi_idx"].nbytes + 8 * a["phi_val"].shape[0])


def test_one_sigma_keeps_phi_packed_in_the_pool():
    """Per coordinate, φ' = √σ′_j φ is stored with a float64 for nearly every entry; with one
    σ′ the pool holds φ itself (±1, packed): a node's pool several times smaller."""
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-3)
    used = {}
    for per in (True, False):
        cl = _Cluster([task(0, 40), task(40, n)], cfg, per)
        for _ in range(30):
            cl.round()
        act = cl.parts[0].act
        used[per] = int(act.meta[1] - act.meta[2]) / sum(
            abs(int(act.s_len[act.slots[i, q]])) for i in range(act.n)
            for q in range(act.count[i]))  # live words per stored entry
    assert used[False] < 0.8 and used[True] > 1.5 * used[False], used


def test_a_lost_part_resumes_from_its_checkpoint_with_no_example_lost_or_twice():
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-4)
    cl = _Cluster([task(0, 40), task(40, n)], cfg, per_coordinate=False)
    for _ in range(100):
        cl.round()
    ckpt = [cl.parts[1].checkpoint(j, 2) for j in range(2)]
    for _ in range(100):  # more work by part 2, then it is lost (its α after ckpt gone)
        cl.round()
    cl.flush()
    new = LocalPart(task(40, n), cfg, 2, [1, 1])
    loaded = sum(new.restore_checkpoint(p) for p in ckpt)
    assert loaded == sum(p["example"].shape[0] for p in ckpt)  # every saved structure
    assert np.array_equal(np.unique(new.state()["example"]),
                          np.unique(np.concatenate([p["example"] for p in ckpt])))
    cl.parts[1] = new
    w = cl.parts[0].own_w() + new.own_w()  # w corrected: Σ α φ of every part
    assert not np.allclose(w, cl.w)  # the lost work is taken out (the test can fail)
    cl.w = w
    for p in cl.parts:
        p.reset(w)
    best = train_dcd(task(0, n), SolverConfig(C=0.5, tol=1e-4, max_epochs=500))
    whole = LocalPart(task(0, n), cfg, 1, 0)
    p_best = 0.5 * best.w @ best.w + whole.loss_part(best.w, final=True)[0]
    cl.rounds_until(whole, p_best, 2e-3, None, 2000)
    cl.flush()
    assert np.allclose(cl.w, sum(p.own_w() for p in cl.parts), atol=1e-8)
    assert abs(cl.primal() - p_best) / p_best < 2e-3  # the optimum, nothing lost or twice


def test_a_node_with_another_version_is_refused():
    from demidcd.errors import DemidcdError
    from demidcd.estimators.cluster import check_versions
    from demidcd.estimators.cluster_node import versions

    mine = versions()
    check_versions([mine, dict(mine)], mine, ["a", "b"])  # the same: taken
    for what in ("demidcd", "python"):
        other = {**mine, what: "0.0.0"}
        with pytest.raises(DemidcdError, match=f"node 2 \\(b\\) runs {what} 0.0.0.*refused"):
            check_versions([mine, other], mine, ["a", "b"])


def test_a_node_flags_partial_labels_and_reads_the_columns_state(tmp_path):
    """A '?' cell makes the part partial (the driver refuses: DCD needs every token labelled);
    a line narrower than the file's first token line is an error naming the file's line."""
    path = tmp_path / "p.txt"
    path.write_text("a\tX\nb\tY\n\nc\t?\n\n")
    node = ClusterNode(0)
    try:
        r = ByteRange(0, path.stat().st_size, 0)
        assert node.read(str(path), r, "columns", None, (), "utf-8", 5000, "?", None)["partial"]
        assert not node.read(str(path), r, "columns", None, (), "utf-8", 5000, "",
                             None)["partial"]
        bad = tmp_path / "b.txt"
        bad.write_text("a\tX\tq\n\nb\tY\n\n")
        state = first_columns_state(str(bad))
        r2 = ByteRange(len("a\tX\tq\n\n"), bad.stat().st_size, 2)
        with pytest.raises(InputError, match=":3"):
            node.read(str(bad), r2, "columns", None, (), "utf-8", 5000, "?", state)
    finally:
        node.monitor.stop()


# ---------------------------------------------------------------------- a node's threads
def test_lane_bounds_cut_the_examples_by_tokens():
    from demidcd.solvers.cocoa import lane_bounds

    task, n = _problem()
    for lanes in (1, 2, 3, 7):
        b = lane_bounds(task(0, n), lanes)
        assert b[0] == 0 and b[-1] == n and len(b) == lanes + 1
        assert all(x < y for x, y in zip(b, b[1:], strict=False))  # every lane has examples
        tok = np.diff(np.asarray(task(0, n).sent_ptr)[b])
        assert tok.max() - tok.min() <= 15 * 2, tok  # about equal tokens (a sentence or two)
    assert lane_bounds(task(0, 3), 8) == [0, 1, 2, 3]  # fewer examples than lanes


def _run_lanes(part, seconds):
    """Every lane of ``part`` trains for ``seconds`` in its own thread at once (the numba
    kernels release the GIL: they truly overlap on several cores)."""
    import threading

    ts = [threading.Thread(target=part.work, args=(seconds, j)) for j in range(part.n_lanes)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_lanes_in_threads_keep_w_the_sum_of_alpha_phi_with_commits_beside_them():
    """Two parts of 3 lanes each, the lanes' threads running while the main thread commits
    and applies at the same time (atomic adds on both sides): the driver's w (the sum of
    the commits) is Σ α φ of every part after every round (a replay), as with one lane."""
    import threading

    task, n = _problem(n=120)
    cfg = SolverConfig(C=0.5, tol=1e-4)
    parts = [LocalPart(task(0, 60), cfg, 2, [0, 0], lanes=3),
             LocalPart(task(60, 120), cfg, 2, [0, 1], lanes=3)]
    assert [p.n_lanes for p in parts] == [3, 3] and all(p.shared for p in parts)
    w = np.zeros(parts[0].task.dim)
    for p in parts:
        p.reset(w)
    commits = 0
    for r in range(40):
        ts = [threading.Thread(target=p.work, args=(0.02, j)) for p in parts
              for j in range(p.n_lanes)]
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):  # commits and merges while the lanes train
            for k, p in enumerate(parts):
                idx, val = p.commit()
                commits += len(idx) > 0
                np.add.at(w, idx, val)
                parts[1 - k].apply(idx, val)
        for t in ts:
            t.join()
        for k, p in enumerate(parts):
            idx, val = p.commit()
            np.add.at(w, idx, val)
            parts[1 - k].apply(idx, val)
        rebuilt = sum(p.own_w() for p in parts)
        assert np.allclose(w, rebuilt, atol=1e-9), (r, np.abs(w - rebuilt).max())
        for p in parts:
            assert np.allclose(p.view(), w, atol=1e-9)
    assert commits > 40 and np.abs(w).sum() > 0


@pytest.mark.slow  # (~4 s; two parts of one lane reach it in the default run)
def test_two_parts_of_two_lanes_reach_the_one_dcd_optimum():
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-4, max_epochs=500)
    one = train_dcd(task(0, n), cfg)
    p_one = 0.5 * one.w @ one.w + LocalPart(task(0, n), cfg, 1, 0).loss_part(
        one.w, final=True)[0]
    cl = _Cluster([task(0, 40), task(40, n)], cfg, per_coordinate=False)
    cl.parts = [LocalPart(t, cfg, 2, [0, k], lanes=2)
                for k, t in enumerate([task(0, 40), task(40, n)])]
    for p in cl.parts:
        p.reset(cl.w)
    for _ in range(700):
        out = []
        for k, p in enumerate(cl.parts):
            _run_lanes(p, 0.002)
            idx, val = p.commit()
            np.add.at(cl.w, idx, val)
            out.append((k, idx, val))
        for k, idx, val in out:
            cl.parts[1 - k].apply(idx, val)
    p, d = cl.primal(), cl.dual()
    assert d <= p + 1e-9
    assert abs(p - p_one) / p_one < 1e-3, (p, p_one)
    assert (p - d) / p < 2e-3


@pytest.mark.parametrize("lanes", [(2, 1), (1, 3), (3, 2)])
def test_a_checkpoint_of_lanes_restores_into_any_number_of_lanes(lanes):
    task, n = _problem()
    cfg = SolverConfig(C=0.5, tol=1e-4)
    old = LocalPart(task(40, n), cfg, 2, [0, 1], lanes=lanes[0])
    old.reset(np.zeros(old.task.dim))
    for _ in range(60):
        _run_lanes(old, 0.002)
        old.commit()
    pieces = max(3, old.n_lanes)
    ck = [old.checkpoint(j, pieces) for j in range(pieces)]
    got = sorted(np.concatenate([c["examples"] for c in ck]).tolist())
    assert got == list(range(n - 40))  # every example once, in the part's ids
    assert len({old.piece_lane(j, pieces) for j in range(pieces)}) == old.n_lanes
    new = LocalPart(task(40, n), cfg, 2, [1, 1], lanes=lanes[1])
    assert sum(new.restore_checkpoint(c) for c in ck) == old.size > 0
    a, b = old.state(), new.state()
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    assert np.allclose(new.own_w(), old.own_w(), atol=1e-12)
    assert np.allclose(new.dual_terms(), old.dual_terms(), rtol=1e-12)


def _nodes(tmp_path, k, lanes, n=160):
    """``k`` in-process ClusterNodes set up as ClusterRun.set_up sets them up (no Ray)."""
    path = tmp_path / "c.txt"
    c = _corpus_file(path, n=n, seed=5)
    ranges = node_parts(str(path), k, False, "utf-8")
    nodes = [ClusterNode(j) for j in range(k)]
    for nd, (p, r) in zip(nodes, ranges, strict=True):
        nd.read(p, r, "columns", None, (), "utf-8", 5000, "?", None)
    counted = [nd.count((1, 0, "base")) for nd in nodes]
    driver = SequenceFeaturizer(min_count=1)
    maps = driver.merge_parts(counted)
    classes = sorted({t for s in c.tags for t in s})
    for nd, m in zip(nodes, maps, strict=True):
        nd.encode(m, driver.n_features, classes, False)
    nodes[0].setup = (ranges, maps)  # (to set a lost part up again)
    return nodes, c, driver, classes


@pytest.mark.slow  # (~4.6 s; the lanes' w = Σαφ test and two parts' optimum run by default)
def test_nodes_of_two_threads_reach_the_one_machine_optimum(tmp_path, monkeypatch):
    """Two in-process nodes of 2 learner threads each, driven as ClusterRun.train drives them
    (pulls, changes added to w and offered to the other node, checkpoints taken by the thread
    whose examples they hold); node 2 is lost after its checkpoint and its part restarts on a
    new node of 2 threads from it, w rebuilt as Σ α φ (ClusterRun._restart and _resync: pauses
    park every thread): the threads run, w is Σ α φ at the end and the run reaches 1-DCD's
    optimum on all the data."""
    import time as _t

    import demidcd.estimators.cluster_node as CN

    monkeypatch.setattr(CN, "SLICE_SECONDS", 0.005)  # rounds of a tiny problem: short ones
    monkeypatch.setattr(CN, "COMMIT_SECONDS", 0.005)
    nodes, c, driver, classes = _nodes(tmp_path, 2, 2, n=60)
    cfg = SolverConfig(C=0.5, tol=1e-4)
    lost = None
    try:
        # the one machine's optimum on all the data, in the merged feature space
        enc = concat_encoded([nd.enc for nd in nodes])
        y = np.concatenate([nd.y for nd in nodes])
        whole = SequenceTask(enc, y, len(classes), driver.n_features)
        best = train_dcd(whole, SolverConfig(C=0.5, tol=1e-4, max_epochs=500))
        ref = LocalPart(whole, cfg, 1, 0)

        def primal(x):
            return 0.5 * x @ x + ref.loss_part(x, final=True)[0]

        p_best = primal(best.w)
        bound = [nd.bind(None, cfg, 2, None, 0, lanes=2) for nd in nodes]
        dim = bound[0][0]
        assert [b[1] for b in bound] == [2, 2]
        assert all(len(nd.threads) == 2 and nd.part.shared for nd in nodes)
        w = np.zeros(dim)
        for nd in nodes:
            nd.resume(0, w.copy())
        epochs = [0, 0]

        t0 = _t.perf_counter()
        cks, look, G, lost = None, 2.0, 0, None
        while _t.perf_counter() < t0 + 30:
            for k, nd in enumerate(nodes):
                gen, idx, val, tm, eps, evs, err = nd.pull(0.005)
                assert err is None, err
                if gen == G and len(idx):
                    np.add.at(w, idx, val)
                    nodes[1 - k].offer(gen, (idx, val))
                for ep in eps:
                    epochs[k] = ep["epoch"]
            if cks is None and _t.perf_counter() > t0 + 0.5:
                P = max(8, nodes[1].part.n_lanes)
                cks = [nodes[1].checkpoint(j, P) for j in range(P)]
                assert all(x is not None for x in cks)
            if lost is None and _t.perf_counter() > t0 + 1.0:  # node 2 lost: its work since
                lost = nodes[1]  # the checkpoint goes; its part restarts on a new node
                lost.stop()
                (path, r), m = nodes[0].setup[0][1], nodes[0].setup[1][1]
                new = ClusterNode(1)
                new.read(path, r, "columns", None, (), "utf-8", 5000, "?", None)
                new.count((1, 0, "base"))
                new.encode(m, driver.n_features, classes, False)
                assert new.bind(None, cfg, 2, None, 7, lanes=2)[1] == 2
                assert sum(new.restore(x) for x in cks) > 0
                nodes[1] = new
                G += 1
                own = [nd.pause(G) for nd in nodes]  # (every thread parked)
                assert not np.allclose(own[0] + lost.part.own_w(), w)  # (w had more)
                w = own[0] + own[1]
                for nd in nodes:
                    nd.resume(G, w.copy())
                epochs = [0, 0]
            if lost is not None and _t.perf_counter() > t0 + look:  # near: stop
                look += 1.0
                if (primal(w) - p_best) / p_best < 1e-3:
                    break
        finals = [nd.stop() for nd in nodes]
        for f in finals:
            np.add.at(w, f[1], f[2])
        assert lost is not None and min(epochs) > 3  # (a node's epoch: all its threads')
        assert all(not t.is_alive() for nd in nodes for t in nd.threads)
        own = sum(nd.part.own_w() for nd in nodes)
        assert np.allclose(w, own, atol=1e-8)  # w = Σ α φ over both nodes
        assert sorted(np.concatenate([x["examples"] for x in cks]).tolist()) == \
            list(range(nodes[1].part.task.n_examples))
        p_got = primal(w)
        lin = sum(f[3][0] for f in finals)
        sq = sum(f[3][1] for f in finals)
        dual = lin - sq / (4 * cfg.C) - 0.5 * w @ w
        assert dual <= p_best * (1 + 1e-9)  # the dual of the merged α is a dual
        assert abs(p_got - p_best) / p_best < 2e-3, (p_got, p_best)
    finally:
        for nd in nodes + ([lost] if lost is not None else []):
            nd.stopping = True
            nd.monitor.stop()
