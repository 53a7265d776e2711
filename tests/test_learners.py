"""The papers' other learners (perceptron, MIRA, Pegasos, AdaGrad, SDM hinge/ramp), the learner
registry, the run recorder, loss-scaled inference, and SP-IPM's mixing."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from small_fit import conll04_task

from demidcd.api import SequenceTagger
from demidcd.errors import OptionError
from demidcd.solvers import LEARNERS, train
from demidcd.solvers.common import SolverConfig
from demidcd.solvers.linear import AdaGradWeights, AveragedWeights, _catch_one, _update_one
from demidcd.solvers.online import hinge_objective
from demidcd.solvers.sdm import ramp_objective
from demidcd.synthetic import generate_splits
from demidcd.tasks.base import INDEX_DTYPE, RecordBatch
from demidcd.tasks.chain.features import SequenceFeaturizer
from demidcd.tasks.chain.task import SequenceTask

NEW = ("perceptron", "mira", "pegasos", "adagrad", "sdm-hinge", "sdm-ramp")


def _seq_task(n: int = 150, seed: int = 0, noise: float = 0.0, token_noise: float = 0.0):
    """A small synthetic tagging task (cheap Viterbi inference); ``noise``: share of training
    sentences whose tags are all replaced by random tags; ``token_noise``: share of training
    tokens whose tag is replaced by a random tag."""
    tr, _, te = generate_splits(seed=seed, n_sentences=n)
    classes = sorted({t for s in tr.tags for t in s})
    tags = [list(s) for s in tr.tags]
    if noise:
        rng = np.random.default_rng(seed + 1)
        for i in rng.choice(len(tags), int(noise * len(tags)), replace=False):
            tags[i] = list(rng.choice(classes, len(tags[i])))
    if token_noise:
        rng = np.random.default_rng(seed + 2)
        for s in tags:
            for t in range(len(s)):
                if rng.random() < token_noise:
                    s[t] = str(rng.choice(classes))
    f = SequenceFeaturizer(1, 0).fit(tr.tokens)
    index = {t: k for k, t in enumerate(classes)}

    def bind(tokens, tg):
        enc = f.transform(tokens)
        y = np.fromiter((index.get(t, -1) for s in tg for t in s), np.int32, count=enc.n_tokens)
        return SequenceTask(enc, y, len(classes), f.n_features)

    return bind(tr.tokens, tags), bind(te.tokens, te.tags)


def _accuracy(task: SequenceTask, w: np.ndarray) -> float:
    ex = np.arange(task.n_examples)
    return task.metric(task.gold(ex), task.decode(w, ex))["score"]


def _cfg(**kw) -> SolverConfig:
    base = dict(C=0.1, max_epochs=6, eval_every=0.0, seed=0, batch=4)
    base.update(kw)
    return SolverConfig(**base)


# ----------------------------------------------------------------------------- registry
def test_registry_drives_cli_choices_and_refuses_thread_counts() -> None:
    from demidcd.cli import build_parser

    assert set(NEW) <= set(LEARNERS)
    p = build_parser()
    for name in LEARNERS:
        assert p.parse_args(["train", "--algorithm", name]).algorithm == name
    task, _ = _seq_task(30)
    for name in ("demi-dcd", "ms-dcd", "sp-ipm"):
        with pytest.raises(OptionError, match="needs threads >= 2"):
            train(task, name, _cfg(max_epochs=1), threads=1)
    with pytest.raises(OptionError, match="unknown algorithm"):
        train(task, "nope", _cfg(), threads=1)
    # the API no longer runs 1-DCD for ms-dcd on one thread
    tr, _, _ = generate_splits(seed=0, n_sentences=20)
    with pytest.raises(OptionError):
        SequenceTagger(algorithm="ms-dcd", threads=1, max_epochs=1).fit(tr.tokens, tr.tags)


# ----------------------------------------------------------------------------- inference
def test_loss_scaled_equals_brute_force() -> None:
    """argmax_y w·Φ + s·Δ (s = −1, 0, 1, 2.5) by Viterbi equals enumeration of all taggings."""
    rng = np.random.default_rng(3)
    task, _ = _seq_task(40)
    short = [i for i in range(task.n_examples)
             if 1 <= task.sent_ptr[i + 1] - task.sent_ptr[i] <= 3][:6]
    assert short
    K = task.K
    for _ in range(3):
        w = rng.normal(size=task.dim)
        for s in (-1.0, 0.0, 1.0, 2.5):
            b = task.loss_scaled(w, np.array(short), s)
            found = {int(e): k for k, e in enumerate(b.ex)}
            for i in short:
                gold = task.gold(np.array([i]))[0]
                best, arg = -np.inf, None
                for y in itertools.product(range(K), repeat=len(gold)):
                    v = task.score(w, i, np.array(y)) + s * np.sum(np.array(y) != gold)
                    if v > best + 1e-12:
                        best, arg = v, np.array(y)
                if np.array_equal(arg, gold):
                    assert i not in found
                    continue
                k = found[i]
                idx, val, d = task.phi_delta(i, arg)
                assert b.delta[k] == d
                assert b.margin[k] == pytest.approx(val @ w[idx], abs=1e-8)


# ----------------------------------------------------------------------------- perceptron
def test_lazy_averaged_perceptron_equals_naive() -> None:
    """Collins' averaged perceptron, naively summing w after every example, gives exactly the
    lazily averaged weights (integer φ: exact arithmetic)."""
    task, _ = _seq_task(60)
    res = train(task, "perceptron", _cfg(max_epochs=3, eval_every=None), threads=1)
    n = task.n_examples
    rng = np.random.default_rng(0)
    w, total, T = np.zeros(task.dim), np.zeros(task.dim), 0
    for _ in range(3):
        for i in rng.permutation(n):
            b = task.argmax_records(w, np.array([i]))
            if len(b):
                w[b.idx] += b.val
            total += w
            T += 1
    assert res.extra["steps"] == T
    assert np.array_equal(res.w, total / T)
    last = train(task, "perceptron", _cfg(max_epochs=3, eval_every=None), threads=1,
                 averaged=False)
    assert np.array_equal(last.w, w)


def test_averaged_weights_with_scale_equal_direct_average() -> None:
    """w = s·v with the lazy average (Pegasos' representation, with folds) equals averaging
    the explicit iterates."""
    rng = np.random.default_rng(0)
    dim = 30
    W, w, total = AveragedWeights(dim), np.zeros(dim), np.zeros(dim)
    W.FOLD_BELOW = 1e-3  # fold often
    for t in range(1, 200):
        a = rng.uniform(0.05, 1.0)
        W.scale(a)
        w *= a
        nrec = rng.integers(0, 3)
        idx = [np.sort(rng.choice(dim, rng.integers(1, 6), replace=False)) for _ in range(nrec)]
        ptr = np.concatenate([[0], np.cumsum([len(x) for x in idx])]).astype(np.int64)
        val = rng.normal(size=int(ptr[-1]))
        cat = np.concatenate(idx).astype(INDEX_DTYPE) if nrec else np.zeros(0, INDEX_DTYPE)
        b = RecordBatch(np.zeros(nrec, np.int64), np.zeros(nrec, np.int64), np.ones(nrec),
                        np.zeros(nrec), ptr, cat, val)
        coef = rng.normal(size=nrec)
        W.add(b, coef)
        for r in range(nrec):
            np.add.at(w, cat[ptr[r]:ptr[r + 1]], coef[r] * val[ptr[r]:ptr[r + 1]])
        W.end_step()
        total += w
        if t == 100:
            W.restart_average()
            total[:] = 0.0
            base = t
    assert np.allclose(W.current(), w, rtol=1e-9, atol=1e-9)
    assert np.allclose(W.average(), total / (199 - base), rtol=1e-8, atol=1e-9)
    assert W.norm == pytest.approx(np.linalg.norm(w), rel=1e-6)


# ----------------------------------------------------------------------------- AdaGrad
@pytest.mark.parametrize("l1", [False, True])
def test_sparse_lazy_adagrad_equals_dense(l1: bool) -> None:
    """Algorithm 1 with lazy catch-up (reads of random blocks between steps) equals the dense
    AdaGrad update of every weight at every step."""
    rng = np.random.default_rng(7 + l1)
    dim, eta, C = 40, 0.3, 0.05
    lazy = AdaGradWeights(dim, eta, C, l1=l1)
    w, q = np.zeros(dim), np.full(dim, 1e-6)
    for _ in range(150):
        nrec = int(rng.integers(1, 4))
        idx = [np.sort(rng.choice(dim, rng.integers(1, 5), replace=False)) for _ in range(nrec)]
        ptr = np.concatenate([[0], np.cumsum([len(x) for x in idx])]).astype(np.int64)
        cat = np.concatenate(idx).astype(INDEX_DTYPE)
        val = rng.normal(size=int(ptr[-1]))
        use = rng.random(nrec) < 0.8
        b = RecordBatch(np.zeros(nrec, np.int64), np.zeros(nrec, np.int64), np.ones(nrec),
                        np.zeros(nrec), ptr, cat, val)
        starts = rng.integers(0, dim - 5, 3).astype(np.int64)
        lens = rng.integers(1, 6, 3).astype(np.int64)
        lazy.catch_up(starts, lens)  # what an inference would read
        for s, ln in zip(starts, lens, strict=True):
            assert np.allclose(lazy.w[s:s + ln], w[s:s + ln], rtol=1e-9, atol=1e-12)
        lazy.step(b, use)
        g = np.zeros(dim)
        for r in range(nrec):
            if use[r]:
                np.add.at(g, cat[ptr[r]:ptr[r + 1]], -val[ptr[r]:ptr[r + 1]])
        for f in range(dim):
            if g[f] != 0.0:
                q[f] += g[f] ** 2
                w[f] = _update_one(w[f], g[f], q[f], eta, C, l1)
            else:
                w[f] = _catch_one(w[f], q[f], 1, eta, C, l1)
    assert np.allclose(lazy.materialize(), w, rtol=1e-9, atol=1e-12)
    assert np.abs(w).max() > 0.01  # the comparison is not between zeros
    if l1:
        assert (w == 0).any()  # L1 clipped some weights exactly to 0


# ----------------------------------------------------------------------------- improvement
@pytest.mark.parametrize("algorithm", ["pegasos", "adagrad", "sdm-hinge"])
@pytest.mark.parametrize("threads", [1, 2])
def test_hinge_learners_decrease_their_objective(algorithm: str, threads: int) -> None:
    if threads == 2 and algorithm == "sdm-hinge":
        threads = 1
    task, test = _seq_task(120)
    C = 0.1
    zero = hinge_objective(task, np.zeros(task.dim), C)["primal"]
    res = train(task, algorithm, _cfg(max_epochs=12, C=C), threads=threads)
    prim = [h["primal"] for h in res.history]
    assert prim[-1] < 0.5 * zero
    assert prim[-1] <= prim[1]
    assert res.history[-1]["total_updates"] > 0
    assert _accuracy(test, res.w) > 0.85


@pytest.mark.parametrize("algorithm", ["pegasos", "adagrad"])
def test_parallel_batches_equal_sequential(algorithm: str) -> None:
    """Workers infer with replicas that apply every step: the run equals one process's
    (exactly for Pegasos; AdaGrad's replicas catch weights up in other pieces, so up to
    rounding)."""
    task, _ = _seq_task(80)
    one = train(task, algorithm, _cfg(max_epochs=3, eval_every=None), threads=1)
    two = train(task, algorithm, _cfg(max_epochs=3, eval_every=None), threads=2)
    assert two.extra["learner_inferences"] < two.extra["inferences"]
    assert two.extra["inferences"] == one.extra["inferences"]
    if algorithm == "pegasos":
        assert np.array_equal(one.w, two.w)
    else:
        assert np.allclose(one.w, two.w, rtol=1e-9, atol=1e-12)
    assert np.abs(one.w).max() > 0.01


@pytest.mark.parametrize("algorithm", ["perceptron", "mira"])
def test_perceptron_family_accuracy_improves(algorithm: str) -> None:
    task, test = _seq_task(120)
    accs = []
    res = train(task, algorithm, _cfg(max_epochs=8),
                callback=lambda rec, w: accs.append(_accuracy(task, w)))
    base = _accuracy(task, np.zeros(task.dim))
    assert accs[-1] > base + 0.3
    assert accs[-1] >= accs[0]
    assert _accuracy(test, res.w) > 0.85


def test_ramp_sdm_never_increases_its_cccp_sub_objective() -> None:
    """Within each CCCP iteration, SDM minimises the sub-problem's dual (Eq. 3.3 plus the
    constant ½‖v‖²) D_t(λ) = ½‖Σ λ φ − v‖² − Σ λ Δ: no SDM epoch ever increases it (SMO takes
    exact line-search steps; working sets large enough that nothing is evicted)."""
    from demidcd.solvers.common import Clock
    from demidcd.solvers.sdm import SDM

    task, _ = _seq_task(200, seed=2, token_noise=0.2)
    sdm = SDM(task, _cfg(C=1.0, tol=1e-4, batch=4, max_active=400))

    def sub_objective() -> float:
        return -sdm.dual()  # sdm.dual() = Σ λ Δ − ½‖w‖², w = Σ λ φ − v

    clock, seen_concave, J = Clock(None), 0, []
    for _ in range(4):
        seen_concave += sdm.linearise()
        before = sub_objective()
        for _ in range(4):
            sdm.epoch(clock)
            after = sub_objective()
            assert after <= before + 1e-9 * max(1.0, abs(before))
            before = after
        J.append(ramp_objective(task, sdm.w, 1.0)["primal"])
    assert seen_concave > 0  # the concave part was active: a real ramp-loss run
    assert J[-1] < ramp_objective(task, np.zeros(task.dim), 1.0)["primal"]


@pytest.mark.slow  # 10-15 s; sdm-ramp's CCCP path is checked cheaply by the test above
def test_ramp_loss_beats_hinge_with_noisy_labels() -> None:
    """20% of the training tags randomly replaced: the bounded ramp loss tags the clean test
    set better than the hinge loss (the SDM paper's robustness result; on this synthetic
    corpus the margin is small: +0.15, +0.33, +0.14 points for seeds 2, 5, 7)."""
    task, test = _seq_task(200, seed=5, token_noise=0.2)
    cfg = dict(C=0.03, inner_passes=4, eval_every=None, batch=4)
    hinge = train(task, "sdm-hinge", _cfg(**cfg, max_epochs=32), threads=1)
    ramp = train(task, "sdm-ramp", _cfg(**cfg, max_epochs=8), threads=1)
    assert max(h["concave"] for h in ramp.history) > 0
    a_h, a_r = _accuracy(test, hinge.w), _accuracy(test, ramp.w)
    assert a_r > a_h + 0.002, (a_r, a_h)


# ----------------------------------------------------------------------------- entity-relation
@pytest.mark.parametrize("algorithm", NEW)
def test_every_learner_trains_entity_relation_exact(algorithm: str) -> None:
    task = conll04_task(40, "exact")
    res = train(task, algorithm, _cfg(max_epochs=5, eval_every=None), threads=1)
    ex = np.arange(task.n_examples)
    zero = task.metric(task.gold(ex), task.decode(np.zeros(task.dim), ex))["score"]
    assert task.metric(task.gold(ex), task.decode(res.w, ex))["score"] > zero + 0.2


@pytest.mark.parametrize("algorithm", ["pegasos", "adagrad"])
def test_parallel_batches_need_shared_memory(algorithm: str, monkeypatch,
                                             experimental) -> None:
    """Replicated-weight mini-batches run on the shm transport only: any other backend is a
    one-line OptionError before a worker starts (and so is a replica job on Ray)."""
    from demidcd.parallel import ray

    task, _ = _seq_task(20)
    monkeypatch.setattr(ray, "require_ray", lambda: None)  # as if Ray were installed
    experimental(transport=lambda *a, **k: pytest.fail("a transport was built"))
    with pytest.raises(OptionError, match="backend shm"):
        train(task, algorithm, _cfg(max_epochs=1, eval_every=None), threads=2, backend="ray")
    from demidcd.parallel.ray import RayTransport
    from demidcd.parallel.worker import WorkerSpec

    spec = WorkerSpec("replica", 1.0, job=lambda *a: (RecordBatch.empty(), 0),
                      inputs={"batch": ((4,), np.int64)})
    with pytest.raises(OptionError, match="backend shm only"):
        RayTransport(task, 1, spec)


@pytest.mark.parametrize("algorithm", ["pegasos", "sdm-ramp"])
def test_learners_with_cbc_inference(algorithm: str) -> None:
    """Expensive inference (CBC through PuLP) on a handful of sentences, mini-batches split
    over a worker for Pegasos."""
    task = conll04_task(6, "cbc")
    batch = {"batch_size": 3} if "batch_size" in LEARNERS[algorithm].options else {}
    res = train(task, algorithm, _cfg(max_epochs=4, eval_every=None, C=1.0),
                threads=2 if algorithm == "pegasos" else 1, **batch)
    exact = conll04_task(6, "exact")  # the same sentences, scored with the fast exact solver
    ex = np.arange(exact.n_examples)
    zero = exact.metric(exact.gold(ex), exact.decode(np.zeros(exact.dim), ex))["score"]
    assert exact.metric(exact.gold(ex), exact.decode(res.w, ex))["score"] > zero + 0.2


# ----------------------------------------------------------------------------- SP-IPM
@pytest.mark.parametrize("mixing", ["uniform", "mistakes"])
def test_sp_ipm_mixing_equals_direct_computation(mixing: str, shm_guard) -> None:
    """Two shards, two rounds: w̄ = Σ_j μ_j w_j with μ_j = 1/2 or ∝ mistakes_j, recomputed here
    with the same perceptron epochs from the same starting w."""
    from demidcd.parallel.engine import balanced_shards
    from demidcd.solvers.sp_ipm import mixing_weights, perceptron_epochs

    task, _ = _seq_task(60)
    E = 2
    res = train(task, "sp-ipm", _cfg(max_epochs=2, eval_every=None), threads=3,
                perceptron_epochs_per_round=E, mixing=mixing)
    assert res.epochs == 2
    shards = balanced_shards(task.costs(), 2, 0)
    w = np.zeros(task.dim)
    for _ in range(2):
        ws, mis = [], []
        for sh in shards:
            wj = w.copy()
            mis.append(perceptron_epochs(task, wj, sh, E))
            ws.append(wj)
        mu = mixing_weights(np.array(mis), mixing)
        if mixing == "mistakes":
            assert mu == pytest.approx(np.array(mis) / sum(mis))
        else:
            assert mu == pytest.approx([0.5, 0.5])
        w = mu[0] * ws[0] + mu[1] * ws[1]
    assert np.allclose(res.w, w, rtol=1e-12, atol=1e-12)


def test_sp_ipm_averaged_output_when_time_cuts_a_round(monkeypatch, shm_guard) -> None:
    """The clock cuts round 3 short: its partial mix counts once in the average, which
    divides by the rounds actually mixed (the last average the callback saw)."""
    import time

    from demidcd.solvers import common, sp_ipm

    task, _ = _seq_task(60)
    seen, state = [], {"at": None}
    real_epochs = sp_ipm.perceptron_epochs
    monkeypatch.setattr(sp_ipm, "perceptron_epochs",  # (inherited by the forked mapper)
                        lambda *a, **k: real_epochs(*a, **k) + 1)  # never "converged"
    real = common.Clock.expired

    def expired(self):
        if state["at"] is not None:
            return time.perf_counter() > state["at"]
        return real(self)

    def cb(rec, w):
        seen.append(w.copy())
        if rec["epoch"] == 2:  # round 3 (150 epochs per round: 0.2-0.3 s) is cut after 50 ms
            state["at"] = time.perf_counter() + 0.05

    monkeypatch.setattr(common.Clock, "expired", expired)
    res = train(task, "sp-ipm", _cfg(max_epochs=5, eval_every=None), threads=2,
                perceptron_epochs_per_round=150, averaged=True, callback=cb)
    assert res.stop_reason == "time-limit"
    assert res.extra["rounds_mixed"] == len(seen) >= 2
    assert np.allclose(res.w, seen[-1], rtol=1e-12, atol=1e-12)
    assert np.abs(res.w).max() > 0


# ----------------------------------------------------------------------------- recorder / CLI
def test_cli_summary_json(tmp_path: Path) -> None:
    from demidcd.cli import main

    out = tmp_path / "s.json"
    rc = main(["train", "--algorithm", "mira", "--threads", "2", "--max-epochs", "2",
               "--summary-json", str(out), "--quiet", "--seed", "1"])
    assert rc == 0
    s = json.loads(out.read_text())
    assert s["algorithm"] == "mira" and s["threads"] == 1  # sequential: one process
    assert s["epochs"] == 2 and s["stop_reason"] == "max-epochs"
    assert 0.8 < s["test"]["accuracy"] <= 1.0
    assert s["extra"]["updates"] > 0 and "cpu_average" in s["extra"]
    assert s["last_record"]["epoch"] == 2


def test_benchmarks_read_the_summary(tmp_path: Path, shm_guard) -> None:
    """benchmarks/common.summary_views gives the figures the convergence benchmark reports."""
    import importlib
    import sys

    from demidcd.cli import main

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    common = importlib.import_module("common")
    out = tmp_path / "s.json"
    assert main(["train", "--algorithm", "ms-dcd", "--threads", "2", "--max-epochs", "3",
                 "--summary-json", str(out), "--quiet"]) == 0
    v = common.summary_views(common.read_summary(out))
    assert v["stopped"]["reason"] in ("max-epochs", "converged")
    assert v["stopped"]["iterations"] == json.loads(out.read_text())["epochs"] <= 3
    assert v["cpu"]["of"] == 200.0 and v["cpu"]["average"] >= 0
    assert v["learner"]["updates"] > 0 and v["learner"]["inferences"] > 0
    assert v["ms_split"]["iterations"] == v["stopped"]["iterations"]
    assert common.summary_views(None)["learner"] is None
