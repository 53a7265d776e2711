"""DEMI-DCD, MS-DCD and SP-IPM engine details: counts, SP-IPM, warm-up (agreement with 1-DCD:
test_convergence.py; stops and clean-up: test_stop_cleanup.py)."""

import subprocess
import sys

import numpy as np
from small_fit import fit

from demidcd.api import SequenceTagger


def test_engine_counts_are_consistent(small, shm_guard):
    est, _ = fit(small, algorithm="demi-dcd", threads=2, learners=1)
    ex = est.result_.extra
    # the learner's own inferences (its first epoch, then its inference share) admit
    # structures without a ring; in the first epoch it infers at most every example once
    n = len(small[0])
    first = est.result_.history[0]["learner_inferences"]
    assert 0 < first <= n and ex["learner_inferences"] >= first
    assert ex["pushed"] + ex["learner_inferences"] >= ex["admitted"] + ex["duplicates"]
    assert ex["learner_inferences"] < est.result_.history[-1]["inferences"] \
        <= ex["inferences"] + ex["learner_inferences"]
    np.testing.assert_array_less(0, ex["updates"])


def test_sp_ipm_one_shard_equals_sequential_perceptron(small, shm_guard):
    from demidcd.solvers.sp_ipm import perceptron_epochs
    X, Y = small
    est = SequenceTagger(algorithm="sp-ipm", threads=2, max_epochs=3, min_count=1,
                         perceptron_epochs_per_round=2).fit(X, Y)
    task = est.training_task(X, Y)
    w = np.zeros(task.dim)
    mistakes = perceptron_epochs(task, w, np.arange(task.n_examples), 6)
    assert est.result_.extra["updates"] == mistakes > 0
    np.testing.assert_array_equal(est.coef_, w)


def test_sp_ipm_mixing_variants_run(small, shm_guard):
    X, Y = small
    for kw in ({"mixing": "mistakes"}, {"averaged": True}):
        est = SequenceTagger(algorithm="sp-ipm", threads=3, max_epochs=2, min_count=1,
                             perceptron_epochs_per_round=1, **kw).fit(X, Y)
        assert est.score(X, Y) > 0.5


WARM_UP_PROBE = """
import numpy as np
from demidcd.api import SequenceTagger
from demidcd.synthetic import generate
from demidcd.solvers import warm_up
from demidcd.tasks.chain.features import SequenceFeaturizer
from demidcd.solvers import kernels as K
from demidcd.tasks.chain import records as S
from demidcd.primitives import ring, seqlock
c = generate(n_sentences=20, n_tags=4, vocab_size=50, seed=1)
est = SequenceTagger(min_count=1)
est.classes_ = sorted({t for s in c.tags for t in s})
est.featurizer_ = SequenceFeaturizer(1, 0).fit(c.tokens)
task = est.training_task(c.tokens, c.tags)
kernels = [K.update_examples, K.insert_records, K.compact_pool, K.dual_terms,
           S.loss_augmented_kernel, ring._push_kernel, ring._pop_copy, seqlock._copy_lines]
before = sum(len(k.signatures) for k in kernels)
warm_up(task, "demi-dcd", 2)
print(before, min(len(k.signatures) for k in kernels))
"""


def test_warm_up_compiles_every_kernel_before_the_clock():
    """In a fresh process nothing is compiled; after warm_up every kernel a DEMI-DCD learner and
    its worker call is (so compilation never lands on the solver's clock, and forked workers
    inherit it)."""
    out = subprocess.run([sys.executable, "-c", WARM_UP_PROBE], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    before, after = map(int, out.stdout.split())
    assert before == 0 and after >= 1



def test_the_partial_models_copy_of_w_takes_a_bounded_share_of_the_time():
    """The parallel schedules' callback copied all of w at every iteration record, for the
    partial model of a failed run: 0.3-0.5 s per record for Brown's 453 tags (1.2 GiB), the
    learner (or every learner, paused for a rebuild) waiting. Now a copy comes once the time
    since the last one is its cost over LAST_ITERATE_SHARE, and the partial result is the
    copied record's."""
    from toy_task import ToyTask

    from demidcd.solvers import LAST_ITERATE_SHARE, _LastIterate

    now = [0.0]

    def clock():  # every reading 0.5 s later: a record every 0.5 s, a copy of w costs 0.5 s
        now[0] += 0.5
        return now[0]

    seen, copies = _LastIterate(ToyTask(dim=4), None, clock=clock), []
    for epoch in range(1, 201):
        seen({"epoch": epoch}, np.full(4, float(epoch)))
        if seen.copied["epoch"] == epoch:
            copies.append(epoch)
    assert copies[0] == 1 and len(seen.history) == 200
    assert len(copies) >= 2, copies  # w is copied again as the run goes on
    assert len(copies) * 0.5 <= LAST_ITERATE_SHARE * now[0] + 0.5, copies  # within the share
    partial = seen.result("worker-failed")
    assert partial.epochs == copies[-1] and np.all(partial.w == copies[-1])
