"""The transport interface is the seam: a fake, in-process, deterministic transport drives the
parallel schedules (DEMI-DCD, MS-DCD, SP-IPM) to the same results as shared memory."""

import os
import subprocess

import numpy as np
import pytest
from cli_run import CLI
from toy_task import ToyTask

from demidcd.parallel.transport import Transport, balanced_shards, concat_batches
from demidcd.parallel.worker import (
    CLEAN_VERSION,
    DONE_GEN,
    INFER,
    N_STATS,
    PUSHED,
    SWEEP_VIOL,
    SWEEPS,
    violation_and_slack,
)
from demidcd.primitives.monitor import CpuMonitor
from demidcd.solvers import train
from demidcd.solvers.common import SolverConfig
from demidcd.tasks.base import RecordBatch

CHUNK = 4


class FakeTransport(Transport):
    """Workers simulated in this process, one chunk of each worker's sweep per drain (DEMI-DCD)
    or one whole sweep / job per command (MS-DCD, SP-IPM), with the w̄ last published: no
    threads, no clocks, so a run is a function of its inputs."""

    def __init__(self, task, n_workers, spec, log=None, debug=False, learner_share=False):
        self.task, self.n_workers, self.spec = task, n_workers, spec
        parts = balanced_shards(task.costs(), n_workers + int(learner_share), spec.seed)
        self.shards = parts[:n_workers]
        self.learner_shard = parts[n_workers] if learner_share else np.zeros(0, np.int64)
        self.wbar = np.zeros(task.dim + task.n_examples, spec.wbar_dtype(task))
        self.ver, self.gen = 0, 0
        self.stats = np.zeros((n_workers, N_STATS), np.int64)
        self.stats[:, CLEAN_VERSION] = -1
        self.rng = [np.random.default_rng([spec.seed, j]) for j in range(n_workers)]
        self.sweep = [self._new_sweep(j) for j in range(n_workers)]
        self.records: list[RecordBatch] = []
        self.outputs = {k: np.zeros((n_workers, *shape), dt)
                        for k, (shape, dt) in spec.outputs.items()}
        self.monitor = CpuMonitor({"learner": os.getpid()})
        self.published: list[int] = []
        self.started = self.closed = False

    def _new_sweep(self, j):
        return {"order": self.rng[j].permutation(self.shards[j]), "at": 0, "v0": -1,
                "clean": True, "viol": 0}

    def _chunk(self, j):
        """One chunk of worker j's sweep (admission and clean-sweep bookkeeping as in
        run_worker); True when it ended the sweep."""
        s, task, spec = self.sweep[j], self.task, self.spec
        ex = s["order"][s["at"]:s["at"] + CHUNK]
        s["at"] += len(ex)
        b = task.loss_augmented(self.wbar[:task.dim], ex)
        viol, slack = violation_and_slack(b, self.wbar, task.dim, spec.tail_C)
        self.stats[j, INFER] += len(ex)
        if s["v0"] < 0:
            s["v0"] = self.ver
        elif s["v0"] != self.ver:
            s["clean"] = False
        nv = int((viol > spec.tol + slack).sum())
        s["viol"] += nv
        s["clean"] &= nv == 0
        keep = viol > spec.admit + slack
        if keep.any():
            self.records.append(b.take(keep))
            self.stats[j, PUSHED] += int(keep.sum())
        if s["at"] < len(s["order"]):
            return False
        self.stats[j, SWEEP_VIOL] = s["viol"]
        self.stats[j, CLEAN_VERSION] = s["v0"] if s["clean"] else -1
        self.stats[j, SWEEPS] += 1
        self.sweep[j] = self._new_sweep(j)
        return True

    def start(self, expired=None):
        self.started = True
        return self

    def close(self):
        self.closed = True

    def check(self):
        pass

    def publish(self, wa, marks=None, tail=0):
        self.wbar[:] = wa
        self.ver += 1
        self.published.append(self.ver)
        return self.ver

    def version(self):
        return self.ver

    def drain(self):
        if self.spec.mode == "demi":
            for j in range(self.n_workers):
                self._chunk(j)
        out, self.records = concat_batches(self.records), []
        return out

    def command(self):
        self.gen += 1
        for j in range(self.n_workers):
            if self.spec.mode == "job":
                w = self.wbar.astype(np.float64)[:self.task.dim]
                out, inf, mis = self.spec.job(self.task, w, self.shards[j], lambda: False)
                for k, v in out.items():
                    self.outputs[k][j] = v
                self.stats[j, INFER] += inf
            else:
                while not self._chunk(j):
                    pass
            self.stats[j, DONE_GEN] = self.gen
        return self.gen

    def done(self, generation):
        return bool((self.stats[:, DONE_GEN] >= generation).all())

    def results(self):
        return self.outputs

    def request_stop(self):
        pass

    def _column(self, col):
        return self.stats[:, col].copy()


CFG = dict(C=0.5, tol=1e-4, delta=1e-4, max_epochs=100000, time_limit=60)


@pytest.fixture(scope="module")
def toy():
    return ToyTask(n=40, m=6, dim=25, seed=2)


def _fake_factory(made):
    def make(*a, **kw):
        made.append(FakeTransport(*a, **kw))
        return made[-1]
    return make


def test_ms_dcd_over_the_fake_transport_is_deterministic(toy, experimental):
    experimental(transport=_fake_factory([]))
    runs = [train(toy, "ms-dcd", SolverConfig(**CFG), threads=3) for _ in range(2)]
    assert runs[0].epochs == runs[1].epochs
    assert np.array_equal(runs[0].w, runs[1].w)


@pytest.fixture(scope="module")
def seq():
    from demidcd.api import SequenceTagger
    from demidcd.synthetic import generate
    from demidcd.tasks.chain.features import SequenceFeaturizer

    c = generate(n_sentences=60, n_tags=4, vocab_size=100, seed=1)
    est = SequenceTagger(min_count=1)
    est.classes_ = sorted({t for s in c.tags for t in s})
    est.featurizer_ = SequenceFeaturizer(1, 0).fit(c.tokens)
    return est.training_task(c.tokens, c.tags)


def test_sp_ipm_fake_transport_equals_shared_memory(seq, shm_guard, experimental):
    cfg = dict(C=0.5, max_epochs=3)
    toy = seq
    shm = train(toy, "sp-ipm", SolverConfig(**cfg), threads=3, perceptron_epochs_per_round=2)
    experimental(transport=_fake_factory([]))
    fake = train(toy, "sp-ipm", SolverConfig(**cfg), threads=3, perceptron_epochs_per_round=2)
    assert shm.epochs == fake.epochs == 3
    assert np.abs(shm.w).sum() > 0
    assert np.array_equal(shm.w, fake.w)  # same shards, same mappers, same mixing


def test_backend_ray_without_ray_is_a_one_line_error(tmp_path):
    fake = tmp_path / "ray"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), root])}
    p = subprocess.run([*CLI, "train", "--threads", "2",
                        "--backend", "ray", "--time-limit", "1"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("demidcd: error: --backend ray needs"), \
        p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64])
def test_balanced_shards_are_the_longest_processing_time_greedy(dtype):
    """Every example in exactly one shard, each shard sorted, and the shards those of the LPT
    rule written out (heaviest first, stable among equal costs; to the lightest shard, the
    first of equal loads), ties and k > n included."""
    rng = np.random.default_rng(3)
    for _ in range(60):
        n, k = int(rng.integers(0, 200)), int(rng.integers(1, 18))
        costs = (rng.integers(1, 4, n) if dtype is np.int64 else rng.random(n)).astype(dtype)
        load, owner = [0.0] * k, [0] * n
        for e in sorted(range(n), key=lambda e: -float(costs[e])):
            j = min(range(k), key=lambda q: load[q])
            owner[e], load[j] = j, load[j] + float(costs[e])
        got = balanced_shards(costs, k)
        assert len(got) == k
        assert [s.tolist() for s in got] == [[e for e in range(n) if owner[e] == j]
                                              for j in range(k)]
