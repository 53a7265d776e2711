"""CoNLL04 slices with real ILP solvers: DEMI-DCD and MS-DCD at p = 2 reach the 1-DCD primal
optimum within 1e-3 (issue 22), with CBC (PuLP's bundled binary, a subprocess per solve) and
HiGHS (in-process, the ``[highs]`` extra).

The default suite trains the first 10 sentences; the issue's 200-sentence slice needs about
20,000 ILP solves per run (CBC: 116 s for DEMI-DCD, 189 s for MS-DCD at p = 2 on the 2-core
EPYC), so it carries the ``expensive`` marker: ``python -m pytest -q -m expensive``.

The reference is 1-DCD with the exact branch-and-bound solver: CBC, HiGHS and the exact
solver solve the same 0-1 ILP (Eq. 2's loss-augmented argmax), so the SSVM optimum is the same;
every primal below is evaluated with the exact solver on the same featurised task.
Skipped when ../shared/data is absent.
"""

import importlib.util
from pathlib import Path

import pytest

from demidcd.api import EntityRelationExtractor
from demidcd.io.conll04 import read_conll04
from demidcd.solvers.common import primal_objective

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "conll04" / "conll04.corp"
C = 0.1
# tol 3e-3 puts the primal within 1.1e-4 of tol 1e-4's on the 200-sentence slice (exact solver)
FIT = {"C": C, "tol": 3e-3, "delta": 3e-3, "max_epochs": 100000, "time_limit": 400,
       "min_count": 1, "seed": 0}
REF = {**FIT, "tol": 1e-4, "delta": 1e-4}

pytestmark = pytest.mark.slow
_references: dict[int, tuple] = {}


def reference(n: int) -> tuple:
    """(sentences, exact-solver task, 1-DCD optimum at tol 1e-4) for the first n sentences."""
    if not CORPUS.exists():
        pytest.skip("../shared/data is absent")
    if n not in _references:
        X = read_conll04(CORPUS)[:n]
        est = EntityRelationExtractor(solver="exact", algorithm="dcd", threads=1, **REF).fit(X)
        assert est.result_.stop_reason == "converged"
        task = est.training_task(X)
        _references[n] = X, task, primal_objective(task, est.coef_, C)[0]
    return _references[n]


def _solvers():
    out = [pytest.param("cbc")]
    have = importlib.util.find_spec("highspy") is not None
    out.append(pytest.param("highs", marks=pytest.mark.skipif(
        not have, reason="highspy is not installed (the [highs] extra)")))
    return out


@pytest.mark.parametrize("n", [10, pytest.param(50, marks=pytest.mark.expensive),
                               pytest.param(200, marks=pytest.mark.expensive)])
@pytest.mark.parametrize("solver", _solvers())
@pytest.mark.parametrize("algorithm", ["demi-dcd", "ms-dcd"])
def test_parallel_learners_reach_the_1dcd_optimum_with_real_ilp_solvers(
        n, algorithm, solver, shm_guard):
    X, task, p_ref = reference(n)
    est = EntityRelationExtractor(solver=solver, algorithm=algorithm, threads=2, **FIT).fit(X)
    # converged = a full inference pass with every solve proven optimal and no violation
    assert est.result_.stop_reason == "converged", est.result_.stop_reason
    p = primal_objective(task, est.coef_, C)[0]
    assert abs(p - p_ref) / p_ref <= 1e-3, (p, p_ref)
