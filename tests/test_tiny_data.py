"""More processes than training examples (issue 56, defect 11): a process with an empty shard
never reported a sweep, so the stop rule waited for it for ever (two sentences at the default
--threads hung after "part of 0 examples"). The plan now gives no process an empty shard
(:func:`demidcd.solvers.plan.fit_to_examples`, said in the log) and the engine leaves an idle
worker out of the stop rule."""

import pytest

from demidcd.api import SequenceTagger
from demidcd.solvers.common import SolverConfig

SENTENCES = [(["a", "b"], ["B-NP", "O"]), (["c"], ["B-NP"]), (["d", "e"], ["O", "B-NP"])]


@pytest.mark.parametrize("n,threads,learners", [
    (1, 2, "auto"), (1, 2, 2), (1, 3, 1), (1, 8, 1), (2, 2, 2), (2, 3, 1), (2, 8, "auto"),
    (3, 8, 1), (3, 2, 2)])
def test_more_processes_than_sentences_converge(n, threads, learners, shm_guard):
    X = [x for x, _ in SENTENCES[:n]]
    Y = [y for _, y in SENTENCES[:n]]
    lines = []
    est = SequenceTagger(threads=threads, learners=learners, time_limit=20, min_count=1,
                         log=lines.append).fit(X, Y)
    assert est.result_.stop_reason == "converged", lines  # before: time-limit (hung)
    ran = est.plan_
    assert ran.threads <= n + 1
    assert not ran.several_learners or ran.learners <= n
    if threads > n + 1 or (learners == 2 and n < 2):
        assert any(f"{n} training example" in s for s in lines), lines  # the log says so
    assert not any("part of 0 examples" in s or "shard of 0 examples" in s for s in lines)


def test_fit_to_examples():
    from demidcd.solvers.plan import fit_to_examples, make_plan

    cfg = {"C": 0.1}
    plan = make_plan("demi-dcd", cfg, 8)
    assert fit_to_examples(plan, 100).threads == 8
    assert fit_to_examples(plan, 3).threads == 4  # one learner, 3 workers of one example
    assert fit_to_examples(plan, 1).threads == 2  # demi-dcd runs on 2 at least
    two = make_plan("demi-dcd", cfg, 4, learners=4)
    assert (fit_to_examples(two, 3).threads, fit_to_examples(two, 3).learners) == (3, 3)
    assert (fit_to_examples(two, 1).threads, fit_to_examples(two, 1).learners) == (2, 1)
    one = make_plan("dcd", cfg, 1)
    assert fit_to_examples(one, 1) is one


def test_an_idle_worker_does_not_hold_the_stop_rule(shm_guard):
    """The engine on its own (no plan to fit the processes): DEMI-DCD with 2 workers on one
    example leaves a worker with an empty shard; the run still converges."""
    X, Y = [SENTENCES[0][0]], [SENTENCES[0][1]]
    est = SequenceTagger(algorithm="dcd", max_epochs=1, min_count=1).fit(X, Y)
    task = est.training_task(X, Y)
    from demidcd.solvers.demi_dcd import train_demi_dcd

    r = train_demi_dcd(task, SolverConfig(C=0.1, time_limit=20), 3)
    assert r.stop_reason == "converged"
