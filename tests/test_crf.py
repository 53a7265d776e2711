"""The CRF learner (``--algorithm crf``): forward-backward against enumeration of all K^n
taggings (log Z, token marginals, forced labels; real values and B features), the gradient of
the negative log-likelihood against Φ built naively and against finite differences, L-BFGS and
OWL-QN against a reference optimiser, and ``predict_marginals``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_chain_features import naive_phi, random_chain
from test_nbest_force_scores import _blocks, cli_chunker  # noqa: F401, F811 (a fixture)

from demidcd.solvers.crf import CrfObjective, minimize_lbfgs
from demidcd.tasks.chain.marginals import marginals_kernel, nll_gradient_kernel
from demidcd.tasks.chain.task import SequenceTask


def _chain(seed: int, valued: bool, G: int, K: int = 3, n_sent: int = 6, max_len: int = 4):
    rng = np.random.default_rng(seed)
    F = 4
    X, Y, n_obs, tokens = random_chain(rng, n_sent, K, F, valued, max_len=max_len, G=G)
    task = SequenceTask(X, Y, K, n_obs, n_bigram_obs=G)
    w = rng.normal(scale=0.7, size=task.dim)
    return task, w, tokens, Y


def _brute(task: SequenceTask, w: np.ndarray, tokens, i: int, fixed=None):
    """(log Z, token marginals (n, K), E_p[Φ]) of sentence i by enumeration."""
    K, F, G = task.K, task.F, task.G
    a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
    toks = tokens[a:b]
    ys = [y for y in itertools.product(range(K), repeat=b - a)
          if fixed is None or all(f < 0 or f == t for f, t in zip(fixed, y, strict=True))]
    phis = np.array([naive_phi(F, K, G, toks, y) for y in ys])
    s = phis @ w
    logz = np.logaddexp.reduce(s)
    p = np.exp(s - logz)
    marg = np.zeros((b - a, K))
    for y, py in zip(ys, p, strict=True):
        marg[np.arange(b - a), list(y)] += py
    return logz, marg, p @ phis


@pytest.mark.parametrize("valued,G", [(False, 0), (True, 0), (True, 3), (False, 2)])
def test_forward_backward_equals_enumeration(valued, G):
    task, w, tokens, _ = _chain(1 + G + 10 * valued, valued, G)
    ex = np.arange(task.n_examples)
    marg, ptr, logz = marginals_kernel(w, task.F, task.K, task.chain, ex, np.zeros(0, np.int32))
    K = task.K
    for i in ex:
        n = int(ptr[i + 1] - ptr[i])
        m = marg[ptr[i] * K:ptr[i + 1] * K].reshape(n, K)
        if n == 0:
            assert logz[i] == pytest.approx(task._empty_score(w))
            continue
        lz, bm, _ = _brute(task, w, tokens, i)
        assert logz[i] == pytest.approx(lz, rel=1e-10, abs=1e-10)
        np.testing.assert_allclose(m, bm, atol=1e-10)
        np.testing.assert_allclose(m.sum(axis=1), 1.0, atol=1e-12)


def test_forced_labels_give_the_constrained_marginals():
    task, w, tokens, _ = _chain(7, True, 2, max_len=4)
    K = task.K
    i = int(np.argmax(np.diff(task.sent_ptr)))
    n = int(task.sent_ptr[i + 1] - task.sent_ptr[i])
    fixed = np.full(n, -1, np.int32)
    fixed[n // 2] = 1
    marg, _, logz = marginals_kernel(w, task.F, K, task.chain, np.array([i]), fixed)
    lz, bm, _ = _brute(task, w, tokens, i, fixed)
    assert logz[0] == pytest.approx(lz, rel=1e-10)
    np.testing.assert_allclose(marg.reshape(n, K), bm, atol=1e-10)
    assert marg.reshape(n, K)[n // 2, 1] == pytest.approx(1.0)


@pytest.mark.parametrize("valued,G", [(False, 0), (True, 3)])
def test_gradient_is_expected_minus_gold_features(valued, G):
    task, w, tokens, Y = _chain(3 + G, valued, G)
    grad = np.zeros(task.dim)
    nll = nll_gradient_kernel(w, task.F, task.K, task.chain, task.Y, np.arange(task.n_examples),
                              grad, np.zeros(3, np.int64))
    want_nll, want = 0.0, np.zeros(task.dim)
    for i in range(task.n_examples):
        a, b = int(task.sent_ptr[i]), int(task.sent_ptr[i + 1])
        if a == b:
            continue
        lz, _, expected = _brute(task, w, tokens, i)
        gold = naive_phi(task.F, task.K, task.G, tokens[a:b], Y[a:b])
        want_nll += lz - gold @ w
        want += expected - gold
    assert nll == pytest.approx(want_nll, rel=1e-10)
    np.testing.assert_allclose(grad, want, atol=1e-9)


def test_gradient_matches_finite_differences():
    task, w, _, _ = _chain(5, True, 2)
    obj = CrfObjective(task, c2=0.3, threads=1)
    f, g = obj(w)
    rng = np.random.default_rng(0)
    for j in rng.choice(task.dim, 25, replace=False):
        e = np.zeros(task.dim)
        e[j] = 1e-5
        fd = (obj(w + e)[0] - obj(w - e)[0]) / 2e-5
        assert g[j] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_threads_give_the_same_objective():
    task, w, _, _ = _chain(6, True, 2, n_sent=40)
    f1, g1 = CrfObjective(task, c2=0.1, threads=1)(w)
    f2, g2 = CrfObjective(task, c2=0.1, threads=3)(w)
    assert f2 == pytest.approx(f1, rel=1e-12)
    np.testing.assert_allclose(g2, g1, atol=1e-10)


def test_lbfgs_decreases_and_reaches_the_reference_optimum():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    task, _, _, _ = _chain(8, True, 2, n_sent=30)
    obj = CrfObjective(task, c2=0.5, threads=1)
    seen = []
    # (epsilon 1e-6: near 1e-8 the objective is flat to its last bit here, f − f* ≈ ½ gᵀH⁻¹g
    # ≈ 1e-14 relative, and the search stops as "line-search")
    res = minimize_lbfgs(obj, np.zeros(task.dim), c1=0.0, epsilon=1e-6, period=10, delta=0.0,
                         max_iterations=500, on_iteration=lambda it: seen.append(it.f))
    assert res.reason == "converged"
    assert all(b <= a + 1e-12 for a, b in zip(seen, seen[1:], strict=False))
    ref = scipy_optimize.minimize(obj, np.zeros(task.dim), jac=True, method="L-BFGS-B",
                                  options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 5000})
    assert res.f == pytest.approx(ref.fun, rel=1e-8)


def test_owlqn_reaches_the_l1_optimum_and_zeroes_weights():
    task, _, _, _ = _chain(9, True, 2, n_sent=30)
    c1, c2 = 0.5, 0.1
    obj = CrfObjective(task, c2=c2, threads=1)
    res = minimize_lbfgs(obj, np.zeros(task.dim), c1=c1, epsilon=1e-9, period=10, delta=0.0,
                         max_iterations=2000)
    assert np.count_nonzero(res.w) < task.dim // 2
    # the reference: proximal gradient descent (ISTA) on the same objective, run long
    w = np.zeros(task.dim)
    step = 0.02
    for _ in range(20000):
        _, g = obj(w)
        z = w - step * g
        w = np.sign(z) * np.maximum(np.abs(z) - step * c1, 0.0)
    ref = obj(w)[0] + c1 * np.abs(w).sum()
    assert res.f == pytest.approx(ref, rel=1e-6)


def _dict_corpus(seed: int = 0, n: int = 40):
    """Sentences of feature dicts (a word, a real-valued feature, the previous word) and tags
    that depend on the word and the previous tag."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        words = rng.integers(0, 6, int(rng.integers(1, 5)))
        X.append([{"w": f"w{v}", "len": float(v) / 3, "prev": f"w{words[t - 1]}" if t else "BOS"}
                  for t, v in enumerate(words)])
        tags, prev = [], "A"
        for v in words:
            prev = "B" if v % 3 == 0 else ("C" if prev == "B" else "A")
            tags.append(prev)
        Y.append(tags)
    return X, Y


def test_predict_marginals_of_a_fitted_crf_equal_enumeration():
    from demidcd.api import SequenceTagger

    X, Y = _dict_corpus()
    est = SequenceTagger(algorithm="crf", c2=0.05, max_iterations=60).fit(X, Y)
    assert est.score(X, Y) > 0.9
    test = X[:5]
    marg = est.predict_marginals(test)
    task = est._task(test, None)
    K = task.K
    for i, sent in enumerate(marg):
        n = len(test[i])
        ys = list(itertools.product(range(K), repeat=n))
        s = np.array([task.score(est.coef_, i, y) for y in ys])
        p = np.exp(s - np.logaddexp.reduce(s))
        brute = np.zeros((n, K))
        for y, py in zip(ys, p, strict=True):
            brute[np.arange(n), list(y)] += py
        assert len(sent) == n and all(set(d) == set(est.classes_) for d in sent)
        got = np.array([[d[c] for c in est.classes_] for d in sent])
        np.testing.assert_allclose(got, brute, atol=1e-10)
    _, tags, logp = est.predict_marginals_logp(test)
    assert tags == est.predict(test)
    assert np.all(logp <= 1e-12) and np.all(logp > -50)


def test_marginals_of_an_svm_model_are_refused():
    from demidcd.api import SequenceTagger
    from demidcd.errors import OptionError

    X, Y = _dict_corpus(1, 10)
    est = SequenceTagger(algorithm="dcd", max_epochs=3).fit(X, Y)
    with pytest.raises(OptionError, match="not calibrated probabilities"):
        est.predict_marginals(X)


def test_constrained_marginals_obey_the_label_scheme():
    from demidcd.api import NamedEntityTagger

    rng = np.random.default_rng(2)
    X, Y = [], []
    for _ in range(30):
        n = int(rng.integers(1, 6))
        words = [f"w{v}" for v in rng.integers(0, 8, n)]
        tags = ["B-X" if w in ("w1", "w2") else "O" for w in words]
        tags = [("I-X" if t == "B-X" and k and tags[k - 1] != "O" else t)
                for k, t in enumerate(tags)]
        X.append(words), Y.append(tags)
    est = NamedEntityTagger(algorithm="crf", c2=0.1, max_iterations=30, constraints=True,
                            min_count=1).fit(X, Y)
    for sent in est.predict_marginals(X):
        assert sent[0]["I-X"] == 0.0  # I-X cannot begin a sentence under IOB2
        for d in sent:
            assert sum(d.values()) == pytest.approx(1.0)


def test_a_task_without_marginals_is_refused_in_one_line():
    from toy_task import ToyTask

    from demidcd.errors import OptionError
    from demidcd.solvers import train
    from demidcd.solvers.common import SolverConfig

    with pytest.raises(OptionError, match=r"^crf needs marginals; task toy has none"):
        train(ToyTask(), "crf", SolverConfig())


def test_cli_train_crf_and_predict_marginals(cli_chunker, tmp_path, capsys):  # noqa: F811
    from demidcd.cli import main

    d, train, svm_model = cli_chunker
    model, out = tmp_path / "crf.npz", tmp_path / "marg.txt"
    assert main(["train", "--task", "chunking", "--train", str(train), "--feature-columns", "2",
                 "--threads", "2", "--algorithm", "crf", "--c1", "0.01", "--c2", "0.01",
                 "--max-iterations", "40", "--min-count", "1", "--model", str(model),
                 "--quiet"]) == 0
    assert main(["predict", "--model", str(model), "--data", str(train), "--marginals",
                 "--out", str(out), "--quiet"]) == 0
    blocks = _blocks(out)
    assert blocks
    for head, toks in blocks:  # crf_test -v1: the label as LABEL/p(label | x)
        p = float(head[0])
        probs = [float(f[3].rsplit("/", 1)[1]) for f in toks]
        assert all(len(f) == 4 for f in toks)
        assert 0 < p <= min(probs) + 1e-6 and max(probs) <= 1 + 1e-9  # p(y) <= p(y_t)
    capsys.readouterr()
    assert main(["predict", "--model", str(svm_model), "--data", str(train), "--marginals",
                 "--out", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not calibrated probabilities" in err[0]


def _two_loop_reference(S, Y, pg, h0=None):
    """The textbook two-loop recursion (Nocedal and Wright, Algorithm 7.4), pairs oldest first,
    H₀ = γ·diag(h0) with γ = s·y / y·diag(h0)·y of the newest pair (h0 None: ones)."""
    h0 = np.ones_like(pg) if h0 is None else h0
    q, alphas = pg.copy(), []
    for s, y in zip(reversed(S), reversed(Y), strict=True):
        a = (s @ q) / (s @ y)
        alphas.append(a)
        q -= a * y
    q *= (S[-1] @ Y[-1]) / (Y[-1] @ (h0 * Y[-1])) * h0
    for s, y, a in zip(S, Y, reversed(alphas), strict=True):
        q += (a - (y @ q) / (s @ y)) * s
    return -q


@pytest.mark.parametrize("m,stored,diagonal,slices", [
    (1, 1, False, 1), (2, 2, False, 3), (5, 5, False, 2), (1, 1, True, 1), (5, 5, True, 3),
    (3, 8, False, 2), (4, 9, True, 3)])
def test_two_loop_equals_the_textbook_recursion(m, stored, diagonal, slices):
    """PairMemory's direction (inner products kept as pairs arrive, one pass for those with pg,
    one to form d; slices of the coordinates on threads, blocks of BLOCK) equals Algorithm 7.4
    on the last m of ``stored`` pairs (stored > m: the ring wraps and rows are reused)."""
    from concurrent.futures import ThreadPoolExecutor

    from demidcd.solvers.crf import BLOCK, PairMemory

    rng = np.random.default_rng(10 * m + stored)
    n = 2 * BLOCK + 37  # blocks, a partial one, and slices that cut blocks
    S, Y = rng.normal(size=(stored, n)), rng.normal(size=(stored, n))
    Y[:] = S + 0.3 * Y  # s·y > 0, as the line search keeps them
    h0 = rng.uniform(0.01, 10.0, n) if diagonal else np.ones(n)  # D = I
    cuts = np.linspace(0, n, slices + 1).astype(np.int64)
    with ThreadPoolExecutor(slices) as pool:
        def on_threads(fn):
            return list(pool.map(fn, range(slices)))

        pairs = PairMemory(n, m, h0, cuts, on_threads)
        zero = np.zeros(n)
        for i in range(stored):  # a direction after every pair, as minimize_lbfgs takes them
            pairs.store(S[i], zero, Y[i], zero)
            pg, d = rng.normal(size=n), np.empty(n)
            pairs.direction(pg, d)
            lo = max(0, i + 1 - m)
            np.testing.assert_allclose(
                d, _two_loop_reference(S[lo:i + 1], Y[lo:i + 1], pg, h0 if diagonal else None),
                rtol=1e-9, atol=1e-11)
    assert len(pairs) == min(m, stored)


@pytest.mark.parametrize("c1,threads", [(0.0, 1), (0.7, 1), (0.0, 3), (0.7, 2)])
def test_lbfgs_reaches_the_closed_form_optimum_of_a_separable_problem(c1, threads):
    """f(w) = Σ_j a_j (w_j − b_j)²: the optimum of f + c1‖w‖₁ is the soft threshold
    sign(b)·max(|b| − c1/(2a), 0); with a spread over e^±3 the iterations run well past the
    m = 6 pairs kept (the ring of pairs wraps); the vector algebra on 1 to 3 threads."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    n = 200
    a, b = np.exp(rng.uniform(-3, 3, n)), rng.normal(scale=2.0, size=n)
    def fun(w):
        return float(a @ (w - b) ** 2), 2 * a * (w - b)

    with ThreadPoolExecutor(threads) as pool:
        res = minimize_lbfgs(fun, np.zeros(n), c1=c1, epsilon=1e-7, period=10, delta=0.0,
                             max_iterations=5000, threads=threads,
                             on_threads=lambda fn: list(pool.map(fn, range(threads))))
    assert res.reason == "converged" and res.iterations > 12
    opt = np.sign(b) * np.maximum(np.abs(b) - c1 / (2 * a), 0.0)
    np.testing.assert_allclose(res.w, opt, atol=1e-5)
    assert res.f == pytest.approx(fun(opt)[0] + c1 * np.abs(opt).sum(), rel=1e-10, abs=1e-10)
    if c1:
        assert np.count_nonzero(res.w == 0.0) == np.count_nonzero(np.abs(b) <= c1 / (2 * a))


def test_an_interrupted_evaluation_leaves_no_partial_gradient_behind():
    task, w, _, _ = _chain(6, True, 2, n_sent=40)
    obj = CrfObjective(task, c2=0.1, threads=3)
    f, g = obj(w)
    obj.buffers[:] = 1.0  # as if a call had stopped between its two phases
    obj._dirty = True
    f2, g2 = obj(w)
    assert f2 == pytest.approx(f, rel=1e-12)  # (the runs go to the threads in any order)
    np.testing.assert_allclose(g2, g, atol=1e-10)
    obj.close()


def test_backtracking_steps_to_the_minimiser_of_the_quadratic_within_its_safeguard():
    from demidcd.solvers.crf import _backtrack

    # φ(t) = f + g t + h t²: a failed step t = 1 gives the exact minimiser −g/(2h) back …
    f, g, h = 5.0, -2.0, 4.0
    assert _backtrack(1.0, f, f + g + h, g) == pytest.approx(0.25)
    # … kept within [0.1, 0.5] of the failed step, halved without curvature information
    assert _backtrack(2.0, f, f + 2 * g + 4 * 100.0, 2 * g) == pytest.approx(0.2)
    assert _backtrack(1.0, f, f + g + 1.1, g) == pytest.approx(0.5)
    assert _backtrack(1.0, f, float("nan"), g) == 0.5
