"""Issue 53's accounting: the decomposition speed-up = p × throughput / work inflation, the
work counted at a gap (benchmarks/inflation.py), the snapshots' work counts, and
``--learners auto``'s modelled choice (demidcd/solvers/speedup_model.py)."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from demidcd.solvers import speedup_model as M

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
inflation = importlib.import_module("inflation")


# --------------------------------------------------------------------------- decomposition
@pytest.mark.parametrize("p", [1, 2, 4, 16])
def test_the_decomposition_multiplies_back_to_the_speedup(p):
    rng = np.random.default_rng(p)
    for _ in range(50):
        t1, w1 = rng.uniform(1, 100), rng.uniform(1e5, 1e7)
        tp, wp = rng.uniform(0.1, 100), rng.uniform(1e5, 1e7)
        d = inflation.decompose(p, t1, w1, tp, wp)
        assert d["speedup"] == pytest.approx(t1 / tp)
        assert d["inflation"] == pytest.approx(wp / w1)
        assert d["throughput"] == pytest.approx((wp / tp) / (w1 / t1) / p)
        assert p * d["throughput"] / d["inflation"] == pytest.approx(d["speedup"])


def test_the_decomposition_of_known_cases():
    # p = 4 processes each as fast as the lone one, doing the same work: 4x, R = 1, I = 1
    assert inflation.decompose(4, 40.0, 1e6, 10.0, 1e6) == pytest.approx(
        {"speedup": 4.0, "throughput": 1.0, "inflation": 1.0})
    # twice the work at half the per-process rate on 16 processes: 16 x 0.5 / 2 = 4x
    d = inflation.decompose(16, 80.0, 1e6, 20.0, 2e6)
    assert d["speedup"] == pytest.approx(4.0) and d["throughput"] == pytest.approx(0.5) and \
        d["inflation"] == pytest.approx(2.0)
    # a missing time (1% not reached) gives NaN, not a number
    assert all(math.isnan(v) for v in inflation.decompose(2, 10.0, 1e6, math.inf, 1e6).values())
    assert all(math.isnan(v) for v in inflation.decompose(2, 10.0, 1e6, 5.0, None).values())


def _row(t, primal, u, i):
    return {"seconds": t, "primal": primal, "updates": u, "inferences": i}


def test_work_to_gap_interpolates_the_counts_at_the_crossing():
    fstar = 100.0
    # gaps 10%, 4%, 0.25%: 1% lies halfway between 4% and 0.25% in log(gap)
    rows = [_row(1.0, 110.0, 100, 10), _row(2.0, 104.0, 300, 30), _row(4.0, 100.25, 700, 70)]
    a = inflation.work_to_gap(rows, fstar)
    assert a["seconds"] == pytest.approx(3.0)
    assert a["updates"] == pytest.approx(500.0) and a["inferences"] == pytest.approx(50.0)
    assert a["work"] == pytest.approx(550.0)
    # the rows' order does not matter; a row at exactly the gap is the crossing
    assert inflation.work_to_gap(rows[::-1], fstar)["seconds"] == pytest.approx(3.0)
    hit = inflation.work_to_gap([_row(1.0, 110.0, 1, 1), _row(2.0, 101.0, 9, 3)], fstar)
    assert hit["seconds"] == pytest.approx(2.0) and hit["work"] == pytest.approx(12.0)
    # never reached; or reached at the first snapshot (no interpolation)
    assert inflation.work_to_gap(rows[:2], fstar) is None
    first = inflation.work_to_gap([_row(0.5, 100.5, 7, 2), _row(1.0, 100.1, 9, 3)], fstar)
    assert first["seconds"] == 0.5 and first["work"] == 9
    # a run whose snapshots carry no counts has no work at the gap
    assert inflation.work_to_gap([_row(1.0, 100.0, None, None)], fstar) is None


def test_summarise_reports_inflation_against_one_dcd():
    runs = {"1": {"rows": [_row(1, 110.0, 100, 10), _row(2, 100.0, 1000, 100)], "wall": 3,
                  "solver_seconds": 2, "setup": 1, "cpu_percent": 99, "stop_reason": "x",
                  "learner_processes": None},
            "4": {"rows": [_row(1, 110.0, 200, 20), _row(2, 100.0, 1300, 130)], "wall": 3,
                  "solver_seconds": 2, "setup": 1, "cpu_percent": 99, "stop_reason": "x",
                  "learner_processes": 4}}
    out = inflation.summarise(runs)
    assert out["fstar"] == 100.0
    assert out["K"]["1"]["inflation"] == pytest.approx(1.0)
    assert out["K"]["4"]["inflation"] == pytest.approx(1430 / 1100)
    assert out["K"]["4"]["inflation_updates"] == pytest.approx(1.3)


def test_the_suite_table_has_the_issues_keys_and_multiplies_back():
    suite = importlib.import_module("scaling_suite")

    def run(rows, wall):
        return {"rows": rows, "wall": wall, "setup": wall - 2, "cpu_percent": 90.0 * len(rows),
                "solver_seconds": 2.0}

    runs = {1: run([_row(1, 120.0, 10, 1), _row(8, 100.0, 800, 80)], 10.0),
            2: run([_row(1, 120.0, 10, 1), _row(4, 100.0, 900, 90)], 6.0)}
    t = suite.corpus_table(runs)
    assert set(suite.KEYS) <= set(t)
    assert t["speedup"]["1"] == pytest.approx(1.0) and t["speedup"]["2"] == pytest.approx(2.0)
    assert t["inflation"]["2"] == pytest.approx(990 / 880)
    assert 2 * t["throughput"]["2"] / t["inflation"]["2"] == pytest.approx(t["speedup"]["2"])
    assert t["wall"] == {"1": 10.0, "2": 6.0}


# --------------------------------------------------------------------------- the model
def test_modelled_inflation_grows_with_k():
    assert M.inflation(1) == 1.0
    vals = [M.inflation(k) for k in (2, 4, 8, 16)]
    assert all(a < b for a, b in zip(vals, vals[1:], strict=False))
    assert M.inflation(16, per_doubling=0.05) == pytest.approx(1.2)
    # the fitted constant stays within the issue's target at K = 16 (the measured 1.23-1.34x)
    assert 1.15 <= M.inflation(16) <= 1.35


def test_shared_w_throughput_interpolates_the_table_in_log_p():
    t = {1: 1.0, 2: 0.8, 8: 0.2}
    assert M.shared_w_throughput(2, t) == pytest.approx(0.8)
    assert M.shared_w_throughput(4, t) == pytest.approx(0.5)  # halfway in log2 between 2 and 8
    assert M.shared_w_throughput(16, t) == pytest.approx(0.1)  # p * rho held at 8 * 0.2
    for p, r in M.SHARED_W_THROUGHPUT.items():
        assert M.shared_w_throughput(p) == pytest.approx(r)
    # the table's p = 16 point reproduces the 16-core speed-ups it was taken from (~3x)
    assert 2.6 <= M.learners_speedup(16) <= 3.3


def test_one_learner_speedup_is_the_slower_side_with_the_balanced_share():
    def brute(p, t_inf, upd, fmax=M.MAX_INFERENCE_SHARE):
        # the best share of the learner's time on inference, on a fine grid
        fs = np.linspace(0.0, fmax, 200_001)
        pace = np.maximum(t_inf / (p - 1 + fs), upd / (1.0 - fs))
        return (t_inf + upd) / pace.min()

    for p, t_inf, t_pass in [(2, 1.0, 0.01), (5, 1.0, 0.001), (16, 1.0, 1.0), (2, 0.687, 0.009),
                             (4, 0.1, 0.05), (8, 1e-3, 1e-7)]:
        got = M.one_learner_speedup(p, t_inf, t_pass, r0=8.0, rho=1.0)
        assert got == pytest.approx(brute(p, t_inf, 8.0 * t_pass), rel=1e-4), (p, t_inf, t_pass)
    # costly updates: the learner's passes set the pace, whatever p: (1 + 8) / 8
    assert M.one_learner_speedup(16, 1.0, 1.0, r0=8.0, rho=1.0) == pytest.approx(9.0 / 8.0)
    # free updates: p - 1 workers and the learner's largest share infer
    assert M.one_learner_speedup(4, 1.0, 0.0, rho=1.0) == pytest.approx(3 + M.MAX_INFERENCE_SHARE)
    assert M.one_learner_speedup(1, 1.0, 1.0) == 1.0


@pytest.mark.parametrize("p,n,t_inf,t_pass", [
    (2, 12_544, 1e-4, 1e-5), (2, 12_544, 1e-4, 5e-5), (4, 45_829, 5e-5, 2e-5),
    (16, 45_829, 2e-5, 1e-5), (16, 300, 1e-3, 1e-6), (8, 267_000, 3e-5, 4e-5)])
def test_auto_takes_the_layout_with_the_larger_modelled_speedup(p, n, t_inf, t_pass):
    c = M.choose(p, n, t_inf, t_pass)
    one, many = M.one_learner_speedup(p, t_inf, t_pass), M.learners_speedup(p)
    assert (c.one, c.many) == pytest.approx((one, many))
    assert c.learners == (p if many > one else 1)  # brute force over the two layouts
    assert c.reason().endswith("the former" if c.learners > 1 else "the latter")
    assert "\n" not in c.reason() and f"{c.many:.2f}x" in c.reason()


def test_auto_choices_at_the_extremes():
    # costly inference (an ILP, a big label set): the workers keep one learner busy -> 1
    assert M.choose(8, 45_829, t_inf=5e-3, t_pass=1e-6).learners == 1
    # a learner that cannot keep up (passes as costly as inference) on plenty of data -> p
    assert M.choose(8, 45_829, t_inf=1e-5, t_pass=1e-5).learners == 8
    # p = 1: one process, nothing to choose
    assert M.choose(1, 100, 1e-5, 1e-5).learners == 1
    # more processes than examples: a learner would have none
    assert M.choose(8, 5, t_inf=1e-5, t_pass=1e-5).learners == 1


# --------------------------------------------------------------------------- work counts
def test_snapshots_keep_the_work_done_when_w_was_copied(tmp_path):
    from demidcd.io.snapshots import Snapshotter, list_snapshots, read_work

    snap = Snapshotter(tmp_path, every=1.0)
    done = [0, 0]
    snap.work_source = lambda: (done[0], done[1])
    for t in (0.0, 0.5, 1.2, 2.7):
        done[0], done[1] = int(100 * t), int(10 * t)
        snap.maybe(t, np.zeros(3))
    snap.maybe(3.0, np.zeros(3), force=True, work=(999, 99))  # given: the source is not read
    snap.close()
    (tmp_path / "base.npz").write_bytes(b"")
    got = read_work(tmp_path)
    assert got == {"0.000": (0, 0), "1.200": (120, 12), "2.700": (270, 27), "3.000": (999, 99)}
    assert [f"{t:.3f}" for t, _ in list_snapshots(tmp_path)] == list(got)
    (tmp_path / "work.csv").write_text("1.000,5,6\ntruncat")  # a killed run's last line
    assert read_work(tmp_path) == {"1.000": (5, 6)}
    assert read_work(tmp_path / "nothing") == {}


def test_a_one_dcd_run_counts_its_work_at_every_snapshot(tmp_path):
    """Each snapshot's counts are the run's cumulative updates and inferences when w was
    copied: non-decreasing, and the last (forced at the end) equals the result's totals."""
    from demidcd.api import SequenceTagger
    from demidcd.io.snapshots import list_snapshots, read_work
    from demidcd.synthetic import generate

    c = generate(300, seed=1)
    est = SequenceTagger(algorithm="dcd", threads=1, C=0.1, max_epochs=6, tol=1e-9,
                         snapshot_dir=str(tmp_path / "s"), snapshot_every=0.01)
    est.fit(c.tokens, c.tags)
    work = read_work(tmp_path / "s")
    snaps = list_snapshots(tmp_path / "s")
    assert len(work) >= 2 and set(work) <= {f"{t:.3f}" for t, _ in snaps}
    counts = [work[k] for k in sorted(work, key=float)]
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(counts, counts[1:], strict=False))
    x = est.result_.extra
    assert counts[-1] == (x["updates"], x["inferences"])
    assert x["inferences"] == 6 * 300 and counts[-1][0] > 0


def test_the_suite_skips_the_plot_cleanly_without_matplotlib(tmp_path, monkeypatch):
    suite = importlib.import_module("scaling_suite")
    for name in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    res = {"corpora": {"ewt": {"speedup": {"1": 1.0, "2": 1.5}}}, "crf": {}, "machine": "m",
           "cores": 2, "commit": "abc"}
    assert suite.plot(res, tmp_path / "x.png") is None and not (tmp_path / "x.png").exists()


def test_the_suite_refuses_scaling16_on_a_small_machine(tmp_path, monkeypatch, capsys):
    suite = importlib.import_module("scaling_suite")
    monkeypatch.setattr(suite, "machine_info", lambda: {"nproc": 2, "cpu": "x"})
    with pytest.raises(SystemExit):
        suite.main(["--out", str(tmp_path / "scaling16.json"), "--corpora", "", "--crf", ""])
    assert "scaling16.json is for >= 16" in capsys.readouterr().err
    assert not (tmp_path / "scaling16.json").exists()
    # a missing corpus is skipped, and the file says so in the issue's schema
    assert suite.main(["--out", str(tmp_path / "s.json"), "--corpora", "ewt", "--crf",
                       "spanish", "--data-dir", str(tmp_path / "none"), "--commit", "c0ffee",
                       "--quiet"]) == 0
    import json

    d = json.loads((tmp_path / "s.json").read_text())
    assert d["commit"] == "c0ffee" and d["cores"] == 2 and d["machine"]
    assert "not found" in d["corpora"]["ewt"]["skipped"]
    assert set(suite.KEYS) <= set(d["corpora"]["ewt"])
    assert "not found" in d["crf"]["spanish"]["skipped"] and d["crf"]["spanish"][
        "s_per_iteration"] == {}


# --------------------------------------------------------------------------- end to end
@pytest.fixture
def forked_cli(monkeypatch):
    """The benchmarks' ``demidcd`` commands fork from the tests' CLI server."""
    import subprocess

    from cli_run import run as cli_run

    common = importlib.import_module("common")

    def execute(args: list[str], log_path, timeout: float) -> int:
        r = cli_run(*args, timeout=timeout, cwd=common.ROOT, stderr=subprocess.STDOUT)
        Path(log_path).write_text(r.stdout)
        return r.returncode

    monkeypatch.setattr(common, "execute_cli", execute)


@pytest.mark.slow  # four trainings and their evaluations
def test_inflation_quick_counts_the_work_of_every_run(tmp_path, forked_cli):
    import json

    assert inflation.main(["--quick", "--out-dir", str(tmp_path), "--quiet"]) == 0
    d = json.loads((tmp_path / "inflation_2core_quick.json").read_text())
    runs = d["corpora"]["synthetic_quick"]["K"]
    assert set(runs) == {"1", "2", "4"} and runs["1"]["inflation"] == 1.0
    for k, r in runs.items():  # every run counted its work (reached 1% of f* or not)
        assert r["work_done"] and r["work_done"] > 0, (k, r)
    assert runs["1"]["work_to_1pct"] > 0 and runs["1"]["updates_to_1pct"] > 0


@pytest.mark.slow  # the suite's dry run on one small corpus
def test_the_suite_quick_writes_the_issues_schema(tmp_path, forked_cli):
    import json

    suite = importlib.import_module("scaling_suite")
    out = tmp_path / "q.json"
    assert suite.main(["--quick", "--corpora", "synthetic_4m", "--crf", "", "--budget-scale",
                       "0.05", "--out", str(out), "--commit", "f00", "--quiet"]) == 0
    d = json.loads(out.read_text())
    c = d["corpora"]["synthetic_4m"]
    assert set(suite.KEYS) <= set(c) and set(c["wall"]) == {"1", "2"}
    s1 = c["speedup"]["1"]  # None (and said in a note) if 1-DCD missed 1% in its 6 s
    assert (s1 == pytest.approx(1.0)) if s1 is not None else "note" in c
    assert c["setup"]["1"] > 0
    assert c["runs"]["1"]["algorithm"] == "dcd" and c["warm_up_seconds"] > 0
