"""The SVM learners on partially labelled chain data: the latent SSVM by CCCP
(demidcd.solvers.cccp) over the task's imputation and set loss (SequenceTask.impute,
records.partial_augmented_kernel), checked against brute-force enumeration on tiny chains."""

from __future__ import annotations

import itertools
from dataclasses import replace as dataclasses_replace

import numpy as np
import pytest

from demidcd.errors import OptionError
from demidcd.solvers import train
from demidcd.solvers.cccp import latent_objective, reexpress
from demidcd.solvers.common import SolverConfig, primal_objective
from demidcd.solvers.state import state_w
from demidcd.tasks.chain.decoding import scheme_transitions
from demidcd.tasks.chain.features import EncodedSequences
from demidcd.tasks.chain.task import SequenceTask


def random_data(rng, n_sent, K, F, lens=(1, 5), feats=3, bigram=0):
    """(EncodedSequences, gold tags): random binary features; gold from a hidden w, so that
    the data is learnable."""
    L = rng.integers(lens[0], lens[1] + 1, n_sent)
    sent_ptr = np.concatenate([[0], np.cumsum(L)]).astype(np.int64)
    n = int(sent_ptr[-1])
    idx = [np.sort(rng.choice(F, feats, replace=False)) for _ in range(n)]
    feat_ptr = np.arange(n + 1, dtype=np.int64) * feats
    feat_idx = np.concatenate(idx).astype(np.int32)
    hidden = rng.normal(size=(F, K))
    Y = np.array([int(np.argmax(hidden[f].sum(0))) for f in idx], np.int32)
    bp = bi = None
    if bigram:
        bp = np.arange(n + 1, dtype=np.int64)
        bi = rng.integers(0, bigram, n).astype(np.int32)
    return EncodedSequences(sent_ptr, feat_ptr, feat_idx, None, bp, bi), Y


def hide(rng, Y, K, p_unknown, p_set, sent_ptr=None, sentences=None):
    """allowed CSR: each token known, unknown (p_unknown) or a set of 2-3 holding the gold
    tag (p_set); ``sentences``: only those sentences lose labels."""
    ptr, idx = [0], []
    hideable = np.ones(Y.shape[0], bool)
    if sentences is not None:
        hideable[:] = False
        for s in sentences:
            hideable[sent_ptr[s]:sent_ptr[s + 1]] = True
    for t, g in enumerate(Y):
        u = rng.random()
        if hideable[t] and u < p_unknown:
            pass
        elif hideable[t] and u < p_unknown + p_set and K > 2:
            others = rng.choice([k for k in range(K) if k != g], rng.integers(1, 3),
                                replace=False)
            idx += sorted([int(g), *map(int, others)])
        else:
            idx.append(int(g))
        ptr.append(len(idx))
    return np.array(ptr, np.int64), np.array(idx, np.int32)


def partial_task(X, Y, K, F, allowed, G=0, scheme=None):
    lens = np.diff(allowed[0])
    Yp = np.where(lens == 1, Y, -1).astype(np.int32)
    return SequenceTask(X, Yp, K, F, n_bigram_obs=G, allowed=allowed, scheme=scheme)


def admitted(task, i, y):
    ap, ai = task.allowed_ptr, task.allowed_idx
    a = task.sent_ptr[i]
    return all(ap[a + t] == ap[a + t + 1] or y[t] in ai[ap[a + t]:ap[a + t + 1]]
               for t in range(len(y)))


def set_loss(task, i, y):
    ap, ai = task.allowed_ptr, task.allowed_idx
    a = task.sent_ptr[i]
    return sum(ap[a + t] != ap[a + t + 1] and y[t] not in ai[ap[a + t]:ap[a + t + 1]]
               for t in range(len(y)))


@pytest.mark.parametrize("seed,G", [(0, 0), (1, 0), (2, 3), (3, 0)])
def test_impute_and_records_equal_enumeration(seed, G):
    rng = np.random.default_rng(seed)
    K, F = 3, 8
    X, Y = random_data(rng, 12, K, F, bigram=G)
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.4, 0.3), G=G)
    w = rng.normal(size=task.dim)
    targets = task.impute(w)
    full = task.with_targets(targets)
    b = full.loss_augmented(w, np.arange(task.n_examples))
    got = {int(i): (float(d), float(m)) for i, d, m in zip(b.ex, b.delta, b.margin,
                                                            strict=True)}
    sp = task.sent_ptr
    for i in range(task.n_examples):
        n = int(sp[i + 1] - sp[i])
        ys = [np.array(y, np.int32) for y in itertools.product(range(K), repeat=n)]
        ok = [y for y in ys if admitted(task, i, y)]
        best = max(task.score(w, i, y) for y in ok)
        t_i = targets[sp[i]:sp[i + 1]]
        assert admitted(task, i, t_i)
        assert task.score(w, i, t_i) == pytest.approx(best, abs=1e-9)
        aug = max(task.score(w, i, y) + set_loss(task, i, y) for y in ys)
        s_t = task.score(w, i, t_i)
        if i in got:  # Δ − margin = the violation ξ_i, margin = w·Φ(ŷ) − w·Φ(y)
            d, m = got[i]
            assert d - m == pytest.approx(aug - s_t, abs=1e-9)
        else:  # the argmax is the target itself
            assert aug == pytest.approx(s_t, abs=1e-9)


def test_impute_obeys_the_scheme():
    rng = np.random.default_rng(5)
    labels = ["B-A", "I-A", "O"]
    K, F = 3, 6
    X, Y = random_data(rng, 10, K, F)
    allowed = hide(rng, Y, K, 1.0, 0.0)  # every token unknown
    cons = tuple(np.asarray(a) for a in scheme_transitions(labels, "iob2"))
    task = partial_task(X, Y, K, F, allowed, scheme=cons)
    w = rng.normal(size=task.dim) * 3
    targets = task.impute(w)
    sp = task.sent_ptr
    for i in range(task.n_examples):
        y = targets[sp[i]:sp[i + 1]]
        assert y.size == 0 or y[0] != 1  # I-A never starts a sentence
        assert all(not (y[t] == 1 and y[t - 1] == 2) for t in range(1, len(y)))  # nor after O


def test_fully_known_annotation_gives_todays_records_and_model():
    rng = np.random.default_rng(3)
    K, F = 4, 10
    X, Y = random_data(rng, 30, K, F)
    plain = SequenceTask(X, Y, K, F)
    allowed = (np.arange(Y.shape[0] + 1, dtype=np.int64), Y.copy())
    part = SequenceTask(X, Y, K, F, allowed=allowed)
    assert part.partial and not plain.partial
    w = rng.normal(size=plain.dim)
    ex = np.arange(plain.n_examples)
    a, b = plain.loss_augmented(w, ex), part.with_targets(Y).loss_augmented(w, ex)
    for f in ("ex", "hash", "delta", "margin", "ptr", "idx", "val"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    cfg = SolverConfig(C=0.5, tol=1e-4, max_epochs=30)
    r0 = train(plain, "dcd", cfg)
    r1 = train(part, "dcd", cfg)
    np.testing.assert_array_equal(r0.w, r1.w)
    assert r1.extra["partial"] == {"unknown": 0, "sets": 0, "partial_examples": 0}
    assert latent_objective(part, r1.w, 0.5)[0] == pytest.approx(
        primal_objective(plain, r0.w, 0.5)[0], rel=1e-12)


def test_reexpressed_state_keeps_w_equal_sum_alpha_phi():
    rng = np.random.default_rng(7)
    K, F = 3, 8
    X, Y = random_data(rng, 20, K, F)
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.5, 0.2))
    from demidcd.solvers.state import Start

    t0 = task.impute(rng.normal(size=task.dim))
    old = task.with_targets(t0)
    res = train(old, "dcd", SolverConfig(C=1.0, tol=1e-3, max_epochs=30),
                start=Start(keep_state=True))
    t1 = task.impute(rng.normal(size=task.dim))
    changed = task.changed_examples(t0, t1)
    assert changed.any()
    arrays, _ = reexpress(res.state, old, t1, changed)
    new = task.with_targets(t1)
    # every re-expressed record is the new task's φ of the same structure: w·φ' agrees with
    # scores, and w = Σ α φ' equals Σ α (Φ(ŷ') − Φ(y)) rebuilt from the old records
    w_old = state_w(res.state, task.dim)
    from demidcd.solvers.state import DualState
    w_new = state_w(DualState(arrays), task.dim)
    shift = np.zeros(task.dim)
    A = np.bincount(res.state.arrays["example"], weights=res.state.arrays["alpha"],
                    minlength=task.n_examples)
    sp = task.sent_ptr
    for i in np.flatnonzero(changed):
        idx, val, _ = old.phi_delta(int(i), t1[sp[i]:sp[i + 1]])  # Φ(ŷ) − Φ(ŷ')
        shift[idx] -= A[i] * val
    np.testing.assert_allclose(w_new, w_old + shift, atol=1e-9)
    np.testing.assert_allclose(arrays["alpha_sum"],
                               np.bincount(arrays["example"], weights=arrays["alpha"],
                                           minlength=task.n_examples))
    assert new.n_examples == task.n_examples


@pytest.mark.parametrize("algorithm,threads,loss", [
    ("dcd", 1, "l2"), pytest.param("dcd", 1, "l1", marks=pytest.mark.slow),
    pytest.param("demi-dcd", 2, "l2", marks=pytest.mark.slow)])
def test_cccp_objective_never_increases(algorithm, threads, loss):
    rng = np.random.default_rng(11)
    K, F = 4, 30
    X, Y = random_data(rng, 120, K, F, lens=(2, 7))
    sp = X.sent_ptr
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.7, 0.1, sp, range(60, 120)))
    # each convex step solved closely: 1-DCD's 100 epochs (deterministic); DEMI-DCD to its
    # certified tolerance (its epochs are its learner's passes: 100 of them could end a step
    # before its worker's first records; at this size it certifies 1e-2, not 1e-3), so L
    # never rises by more than the steps' inexactness
    tol, epochs, slack = (1e-4, 100, 1e-4) if algorithm == "dcd" else (1e-2, 20_000, 1e-3)
    res = train(task, algorithm, SolverConfig(C=0.5, tol=tol, max_epochs=epochs, loss=loss),
                threads=threads)
    objs = [r["objective"] for r in res.extra["cccp"]]
    assert len(objs) >= 2
    for a, b in itertools.pairwise(objs):
        assert b <= a + slack * abs(a)
    assert objs[-1] < objs[0]
    assert latent_objective(task, res.w, 0.5, loss)[0] == pytest.approx(min(objs), rel=1e-9)
    assert res.extra["partial"]["partial_examples"] > 0


@pytest.mark.slow
def test_partial_beats_dropping_and_recovers_hidden_tags():
    rng = np.random.default_rng(12)
    K, F = 4, 40
    X, Y = random_data(rng, 300, K, F, lens=(3, 8))
    sp = X.sent_ptr
    half = range(150, 300)
    allowed = hide(rng, Y, K, 0.7, 0.0, sp, half)
    task = partial_task(X, Y, K, F, allowed)
    res = train(task, "dcd", SolverConfig(C=0.5, tol=1e-3, max_epochs=50))
    gold = SequenceTask(X, Y, K, F)
    tags, _ = gold.decode_flat(res.w, np.arange(gold.n_examples))
    acc = float((tags == Y).mean())
    # the labelled half alone: the same first step
    first = task.with_targets(task.impute(np.zeros(task.dim)),
                              inert=~task.complete_examples())
    res0 = train(first, "dcd", SolverConfig(C=0.5, tol=1e-3, max_epochs=50))
    tags0, _ = gold.decode_flat(res0.w, np.arange(gold.n_examples))
    assert acc >= float((tags0 == Y).mean())
    assert acc > 0.8


def test_learner_without_cccp_is_refused():
    rng = np.random.default_rng(1)
    K, F = 3, 6
    X, Y = random_data(rng, 10, K, F)
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.5, 0.0))
    with pytest.raises(OptionError, match="partially labelled"):
        train(task, "perceptron", SolverConfig())


def test_cccp_ticks_and_records_lie_on_the_runs_clock():
    """Every convex step reports (snapshot ticks, iteration records) on the whole run's clock:
    monotone times, each round's step between that round's start and the next's, and the
    records' work counted from the run's start (every step used to restart at 0 s)."""
    rng = np.random.default_rng(11)
    K, F = 4, 30
    X, Y = random_data(rng, 120, K, F, lens=(2, 7))
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.7, 0.1, X.sent_ptr, range(60, 120)))
    ticks, recs = [], []
    res = train(task, "dcd", SolverConfig(C=0.5, tol=1e-4, max_epochs=100),
                tick=lambda s, w: ticks.append(s),
                callback=lambda r, w: recs.append((r["seconds"], r.get("total_updates"))))
    rounds = res.extra["cccp"]
    assert len(rounds) >= 3
    assert ticks == sorted(ticks) and len(ticks) >= len(rounds)
    assert [s for s, _ in recs] == sorted(s for s, _ in recs)
    work = [u for _, u in recs if u is not None]
    assert work == sorted(work)
    for a, b in itertools.pairwise(rounds):  # round a's convex step ran between a and b
        assert any(a["seconds"] <= t <= b["seconds"] for t in ticks)
    assert res.seconds >= ticks[-1]
    assert [r["seconds"] for r in res.history] == [s for s, _ in recs]


def test_run_clock_shifts_the_snapshot_writer(tmp_path):
    """The snapshot writer seen through the CCCP run clock: a step's second s is written at
    offset + s, the writer's schedule (``due``) is read on the step's clock, and the work it
    records adds the earlier steps'."""
    from demidcd.io.snapshots import Snapshotter, list_snapshots, read_work
    from demidcd.solvers.cccp import RunClock
    from demidcd.solvers.common import Clock

    snap = Snapshotter(tmp_path, 1.0)
    rc = RunClock(snap.maybe, None)
    rc.offset, rc.work = 10.0, (5, 7)
    Clock(None, rc.maybe).count_work(lambda: (1, 2))  # as a learner registers its counts
    rc.maybe(0.5, np.ones(3))
    assert snap.due == 11.0 and rc.due == 1.0
    rc.maybe(0.7, np.ones(3))  # not due yet
    rc.maybe(1.2, np.full(3, 2.0))
    snap.close()
    (tmp_path / "base.npz").touch()
    assert [t for t, _ in list_snapshots(tmp_path)] == [10.5, 11.2]
    assert read_work(tmp_path) == {"10.500": (6, 9), "11.200": (6, 9)}


def test_cccp_stop_line_says_each_reason_once():
    """The ``stopped:`` line of a CCCP run: the rounds' reason, then the returned step's state,
    never 'converged' and 'not converged' for the same thing (it used to print the step's
    'stopped: time-limit ... not converged' after the log's 'cccp ... stopped: converged')."""
    from demidcd.progress import cli_flag, stop_line
    from demidcd.solvers.cccp import stop_summary
    from demidcd.solvers.common import TrainResult

    cfg = SolverConfig(C=0.5, tol=0.01)
    step = TrainResult(np.zeros(2), False, "time-limit", 40, 30.0,
                       [{"seconds": 30.0, "max_pg": 0.00799}])
    res = TrainResult(np.zeros(2), False, "converged", 300, 118.25, [])
    res.extra["cccp_stop"] = stop_summary("converged", 6, step, cfg)
    line = stop_line(res, cfg.tol, cfg.loss, cli_flag)
    assert line.startswith("stopped: converged after 300 iterations, 118.2s: 6 CCCP rounds")
    assert "not converged" not in line and line.count("converged") == 1
    assert "largest projected gradient 0.00799, --tol 0.01" in line
    assert "share of the time" in line
    res.extra["cccp_stop"] = stop_summary("time-limit", 2, dataclasses_replace(
        step, stop_reason="max-epochs"), cfg)  # a round's step, cut at its STEP_EPOCHS
    assert "stopped at its epoch limit before its tolerance" in stop_line(
        res, cfg.tol, cfg.loss, cli_flag)
    res.stop_reason = "time-limit"
    res.extra["cccp_stop"] = stop_summary("time-limit", 2, dataclasses_replace(
        step, finished=True, stop_reason="converged"), cfg)
    line = stop_line(res, cfg.tol, cfg.loss, cli_flag)
    assert line.startswith("stopped: time-limit after 300 iterations")
    assert "not converged: raise --time-limit" in line and "reached its tolerance" in line
    # a real run: the summary the CLI prints
    rng = np.random.default_rng(3)
    X, Y = random_data(rng, 40, 3, 12)
    task = partial_task(X, Y, 3, 12, hide(rng, Y, 3, 0.5, 0.0, X.sent_ptr, range(20, 40)))
    run = train(task, "dcd", SolverConfig(C=0.5, tol=1e-3, max_epochs=100))
    line = stop_line(run, 1e-3, "l2", cli_flag)
    assert run.stop_reason == "converged" and run.finished
    assert line.startswith(f"stopped: converged after {run.epochs} iterations")
    assert "reached its tolerance" in line and "not converged" not in line
    assert run.epochs >= sum(1 for _ in run.history) > 0


def test_parked_state_and_released_start_keep_the_results():
    """Memory of CCCP: the best round's state parked in an unnamed file comes back array for
    array; a start state marked ``release`` is emptied once loaded and the learner trains
    exactly as from a kept one (and does not hand the emptied state back)."""
    from demidcd.solvers.cccp import _Parked
    from demidcd.solvers.state import DualState, Start

    rng = np.random.default_rng(4)
    X, Y = random_data(rng, 60, 3, 15)
    task = SequenceTask(X, Y, 3, 15)
    cfg = SolverConfig(C=0.5, tol=1e-3, max_epochs=3)
    first = train(task, "dcd", cfg, start=Start(keep_state=True))
    saved = {k: v.copy() for k, v in first.state.arrays.items()}
    p = _Parked()
    p.park(first)
    assert first.state is None and p.has_state(first) and p.file is not None
    back = p.unpark(first)
    assert p.file is None and first.state is back and sorted(back.arrays) == sorted(saved)
    assert all(np.array_equal(back.arrays[k], v) and back.arrays[k].dtype == v.dtype
               for k, v in saved.items())
    runs = []
    for release in (False, True):
        st = DualState({k: v.copy() for k, v in saved.items()}, dict(back.meta))
        res = train(task, "dcd", SolverConfig(C=0.5, tol=1e-3, max_epochs=4),
                    start=Start(state=st, keep_state=True, release=release))
        runs.append(res.w)
        assert (st.arrays["phi_idx"].size == 0) == release
        assert st.meta.get("released", False) == release and res.state is not st
    assert runs[0].tobytes() == runs[1].tobytes()


@pytest.mark.slow
def test_cli_snapshots_of_a_cccp_run_give_its_whole_curve(tmp_path):
    """``train --snapshot-dir`` on partially labelled data, then ``evaluate-snapshots``: the
    snapshots run past the first convex step (it used to write them during that step only), in
    time order, up to the model written; their primal is the latent objective (it used to
    refuse partially labelled data), the last one the run's best."""
    import re

    from cli_run import run

    rng = np.random.default_rng(7)
    words = [f"w{k}" for k in range(40)]
    tags = ["A", "B", "C"]
    lines, test = [], []
    for s in range(300):
        sent = [(words[j], tags[j % 3]) for j in rng.integers(0, 40, rng.integers(3, 9))]
        for w, t in sent:
            lines.append(f"{w}\t{t if s < 150 or rng.random() > 0.6 else '?'}")
            test.append(f"{w}\t{t}")
        lines.append("")
        test.append("")
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "test.txt").write_text("\n".join(test) + "\n")
    snap = tmp_path / "snap"
    r = run("train", "--train", str(tmp_path / "train.txt"), "--format", "columns",
            "--algorithm", "dcd", "--tol", "1e-3", "--time-limit", "12", "--snapshot-dir",
            str(snap), "--snapshot-every", "0.05", "--model", str(tmp_path / "m.npz"))
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    first_step = float(re.search(r"cccp round 0: .* \(at ([0-9.]+)s", out).group(1))
    best = float(re.search(r"best latent objective ([0-9.e+-]+)", out).group(1))
    r = run("evaluate-snapshots", str(snap), "--train", str(tmp_path / "train.txt"),
            "--test", str(tmp_path / "test.txt"), "--format", "columns",
            "--out", str(tmp_path / "s.csv"))
    assert r.returncode == 0, r.stderr
    rows = [x.split(",") for x in (tmp_path / "s.csv").read_text().split("\n")[1:] if x]
    secs = [float(x[0]) for x in rows]
    assert secs == sorted(secs) and secs[-1] > first_step
    assert float(rows[-1][1]) == pytest.approx(best, rel=1e-5)
    assert float(rows[-1][3]) > 0.9


def test_cccp_keeps_to_the_time_limit(monkeypatch):
    """Every later step's start (outside its solver's clock) and the last latent objective
    lie inside ``time_limit``: the steps' shares are taken from the time left less what a
    step costs outside its clock. On a clock that each convex step moves by its whole share,
    and every later step's start by ``start_cost`` more (steps of 3 real epochs): without the
    deduction the fourth step would end 1.5 s past the limit."""
    import time

    import demidcd.solvers as solvers

    rng = np.random.default_rng(5)
    K, F, limit, start_cost = 4, 30, 27.5, 3.0
    X, Y = random_data(rng, 200, K, F, lens=(2, 7))
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.7, 0.0, X.sent_ptr, range(100, 200)))
    train(task, "dcd", SolverConfig(C=0.5, max_epochs=2))  # (kernels compiled off the clock)
    real, shift, shares = time.perf_counter, [0.0], []
    monkeypatch.setattr(time, "perf_counter", lambda: real() + shift[0])
    convex = solvers._run_convex

    def costly(task_r, plan, *a, **kw):
        if shares:
            shift[0] += start_cost
        share = plan.config.time_limit
        shares.append(share)
        res = convex(task_r, dataclasses_replace(plan, config=dataclasses_replace(
            plan.config, max_epochs=3)), *a, **kw)
        shift[0] += share
        return dataclasses_replace(res, seconds=share)

    monkeypatch.setattr(solvers, "_run_convex", costly)
    res = train(task, "dcd", SolverConfig(C=0.5, time_limit=limit, tol=1e-6))
    assert len(shares) >= 4  # several later steps ran (5 s each at least, but the last)
    assert res.seconds <= limit + 0.5, (shares, res.extra["cccp"])


@pytest.mark.parametrize("algorithm,threads,capped", [
    ("dcd", 1, True),
    pytest.param("demi-dcd", 2, False, marks=pytest.mark.slow)])  # (~6 s)
def test_cccp_steps_stop_after_step_epochs(monkeypatch, algorithm, threads, capped):
    """Under a time limit every convex step between the first (the labelled examples, whose
    targets never move: the first imputation's model, trained for its share) and the resumed
    last one stops after ``STEP_EPOCHS`` epochs when an epoch of the plan infers every
    example once (1-DCD), so a long limit does not make the steps whose targets are
    provisional long; DEMI-DCD's one learner, whose epochs are update passes, keeps its time
    shares. The user's smaller ``max_epochs`` still holds."""
    import demidcd.solvers as solvers
    from demidcd.solvers import cccp

    rng = np.random.default_rng(6)
    K, F = 3, 20
    X, Y = random_data(rng, 80, K, F, lens=(2, 6))
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.6, 0.0, X.sent_ptr, range(40, 80)))
    convex, seen = solvers._run_convex, []

    def spy(task_r, plan, *a, **kw):
        seen.append(plan.config.max_epochs)
        return convex(task_r, plan, *a, **kw)

    monkeypatch.setattr(solvers, "_run_convex", spy)
    train(task, algorithm, SolverConfig(C=0.5, time_limit=600.0, tol=1e-3), threads=threads)
    assert len(seen) >= 3
    want = cccp.STEP_EPOCHS if capped else None
    assert seen[0] is None and seen[1:-1] == [want] * (len(seen) - 2), seen
    seen.clear()
    train(task, algorithm, SolverConfig(C=0.5, time_limit=600.0, tol=1e-3, max_epochs=4),
          threads=threads)
    assert set(seen[:-1]) == {4}, seen


@pytest.mark.slow  # (~5 s)
def test_cccp_step_cut_short_goes_on_before_the_objective_is_judged(monkeypatch):
    """Under a time limit, a provisional step stopped by its epoch limit after which the
    latent objective did not decrease goes on (its targets and state kept, up to
    ``STEP_EXTENSIONS`` times) instead of ending CCCP with the round before's model: here the
    objective after the first imputed step is made to rise, and the next convex step is that
    step again (provisional, the same targets), not the polish of the best round (the
    learner's own tolerance, no epoch cap)."""
    import demidcd.solvers as solvers
    from demidcd.solvers import cccp

    rng = np.random.default_rng(8)
    K, F = 3, 20
    X, Y = random_data(rng, 80, K, F, lens=(2, 6))
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.6, 0.0, X.sent_ptr, range(40, 80)))
    monkeypatch.setattr(cccp, "STEP_EPOCHS", 1)  # (every provisional step cut by epochs)
    convex, calls = solvers._run_convex, []

    def spy(task_r, plan, *a, **kw):
        calls.append((plan.config.max_epochs, plan.config.tol, task_r.Y.copy()))
        return convex(task_r, plan, *a, **kw)

    objective, rounds = cccp.latent_objective, [0]

    def rising(*a, **kw):  # round 2's objective: 10x round 1's
        rounds[0] += 1
        obj, task_w = objective(*a, **kw)
        return (obj * 10 if rounds[0] == 3 else obj), task_w

    monkeypatch.setattr(solvers, "_run_convex", spy)
    monkeypatch.setattr(cccp, "latent_objective", rising)
    res = train(task, "dcd", SolverConfig(C=0.5, time_limit=600.0, tol=1e-9))
    assert len(calls) >= 4
    (ep1, tol1, y1), (ep2, tol2, y2) = calls[1], calls[2]
    assert ep1 == ep2 == 1 and tol1 == tol2 == 1e-9 * cccp.STEP_TOL_FACTOR
    assert np.array_equal(y1, y2)  # the same step, gone on
    assert res.extra["cccp"][3]["objective"] < res.extra["cccp"][2]["objective"]


@pytest.mark.parametrize("algorithm,threads", [("dcd", 1), ("demi-dcd", 2)])
def test_cccp_polishes_the_best_step_after_it_went_on(monkeypatch, algorithm, threads):
    """A step that goes on (cut short, the objective decreasing by less than ``CCCP_TOL``)
    may be the best round's own step; its state is kept (parked) before it goes on, so the
    polish of the best round that follows starts from that intact state (the engine takes
    its start's arrays: DEMI-DCD's learners found it damaged)."""
    from demidcd.solvers import cccp

    rng = np.random.default_rng(9)
    K, F = 3, 20
    X, Y = random_data(rng, 80, K, F, lens=(2, 6))
    task = partial_task(X, Y, K, F, hide(rng, Y, K, 0.6, 0.0, X.sent_ptr, range(40, 80)))
    monkeypatch.setattr(cccp, "STEP_EPOCHS", 1)
    objective, seen = cccp.latent_objective, []

    def creeping(*a, **kw):  # round 1 half of round 0; round 2 a hair below round 1 (the
        obj, task_w = objective(*a, **kw)  # best, but not by CCCP_TOL: its step goes on);
        if seen:  # every later round above it
            obj = seen[0] * (0.5 if len(seen) == 1 else 0.5 * (1 - 1e-4) if len(seen) == 2
                             else 0.75)
        seen.append(obj)
        return obj, task_w

    monkeypatch.setattr(cccp, "latent_objective", creeping)
    res = train(task, algorithm, SolverConfig(C=0.5, time_limit=600.0, tol=1e-9),
                threads=threads)
    assert res.stop_reason == "converged" and len(seen) >= 4 and np.isfinite(res.w).all()


def test_cccp_compiles_the_reexpression_before_the_clock(monkeypatch):
    """The re-expression's kernel is compiled (called once on an empty state) in the first
    step's warm-up, before the time limit's clock starts, not at the first round (2.3 s on
    EWT's clock when numba's cache was cold)."""
    import demidcd.solvers as solvers
    from demidcd.solvers import cccp

    rng = np.random.default_rng(7)
    X, Y = random_data(rng, 60, 3, 20, lens=(2, 6))
    task = partial_task(X, Y, 3, 20, hide(rng, Y, 3, 0.6, 0.0, X.sent_ptr, range(30, 60)))
    calls, steps = [], [0]
    reexpress, convex = cccp.reexpress, solvers._run_convex

    def spy_reexpress(state, *a, **kw):
        calls.append((steps[0], state.arrays["example"].shape[0]))
        return reexpress(state, *a, **kw)

    def spy_convex(*a, **kw):
        steps[0] += 1
        return convex(*a, **kw)

    monkeypatch.setattr(cccp, "reexpress", spy_reexpress)
    monkeypatch.setattr(solvers, "_run_convex", spy_convex)
    train(task, "dcd", SolverConfig(C=0.5, time_limit=60.0, tol=1e-2))
    assert calls and calls[0] == (1, 0), calls  # in the first step, on an empty state
