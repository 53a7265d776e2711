"""The benchmark scripts end to end on tiny synthetic data, and their measures on fixed input.

Nothing here is timed: the scripts run with budgets of about a second, and the tests check that
they produce their results files and non-empty plots, and that the relative-difference,
time-to-gap and moving-average computations give known answers.
"""

import importlib
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run as cli_run

from demidcd.cli import main as cli_main

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(BENCH))
common = importlib.import_module("common")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# matplotlib is an optional extra ([plot], [bench]); without it the scripts write no plots
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(autouse=True)
def forked_cli(monkeypatch):
    """The benchmarks' ``demidcd`` commands fork from the tests' CLI server (tests/cli_run.py)
    instead of starting an interpreter each: the same commands and logs, 1 s less each."""
    common = importlib.import_module("common")

    def execute(args: list[str], log_path, timeout: float) -> int:
        r = cli_run(*args, timeout=timeout, cwd=common.ROOT, stderr=subprocess.STDOUT)
        Path(log_path).write_text(r.stdout)
        return r.returncode

    monkeypatch.setattr(common, "execute_cli", execute)


def assert_png(path: Path) -> None:
    if not HAVE_MPL:
        assert not path.exists()
        return
    assert path.is_file(), f"{path} not written"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5000, f"{path} is not a non-empty PNG"


# --------------------------------------------------------------------------- fixed inputs
def test_relative_difference_and_time_to_gap_on_fixed_input():
    primals = [110.0, 102.0, 101.0, 100.5, 100.0]
    rel = common.relative_difference(primals, 100.0)
    assert rel == pytest.approx([0.10, 0.02, 0.01, 0.005, 0.0])
    pts = list(zip([1.0, 2.0, 3.0, 4.0, 5.0], primals, strict=True))
    assert common.time_to_gap(pts, 100.0, 0.01) == 3.0  # ≤ gap counts as reached
    # between snapshots the crossing is interpolated linearly in log(gap): 0.10 at 1 s, 0.02 at 2 s
    assert common.time_to_gap(pts, 100.0, 0.05) == pytest.approx(1 + math.log(2) / math.log(5))
    assert common.time_to_gap(list(reversed(pts)), 100.0, 0.01) == 3.0  # order does not matter
    assert common.time_to_gap(pts[:2], 100.0, 0.01) == math.inf
    assert common.time_to_gap([(1.0, 101.5), (2.0, 100.9)], 100.0, 0.01) == pytest.approx(
        1 + math.log(1.5) / math.log(0.015 / 0.009))
    assert common.time_to_gap([(1.0, 100.5)], 100.0, 0.01) == 1.0  # reached at the first point
    with pytest.raises(ValueError):
        common.relative_difference([1.0], 0.0)


def test_fstar_excludes_methods_solving_another_problem():
    runs = {"dcd": [(1.0, 12.0), (2.0, 10.0)], "demi-dcd": [(1.0, 11.0), (3.0, 10.5)],
            "sp-ipm": [(1.0, 3.0)]}
    assert common.fstar_of(runs, exclude=["sp-ipm"]) == 10.0
    assert common.fstar_of(runs) == 3.0
    with pytest.raises(ValueError):
        common.fstar_of({"sp-ipm": [(1.0, 3.0)]}, exclude=["sp-ipm"])
    runs = {"dcd": [(1.0, 5.0), (2.0, 4.0)]}
    assert common.fstar_of(runs, reference=3.5) == 3.5  # a long run's lower f*
    assert common.fstar_of(runs, reference=4.5) == 4.0  # a run went below it


def test_convergence_fstar_option_on_fixed_runs():
    convergence = importlib.import_module("convergence")

    def run(points, threads):
        return {"curve": [{"seconds": t, "primal": p, "metric": None} for t, p in points],
                "cpu_timeline": {"seconds": [], "total": []}, "threads": threads, "cpu": None}

    runs = {"dcd": run([(1.0, 120.0), (2.0, 105.0), (3.0, 100.5)], 1),
            "demi-dcd": run([(1.0, 110.0), (2.0, 100.9)], 2)}

    class Args:
        fstar = 100.0

    A = convergence.analyse(runs, None, Args())
    assert A["fstar"] == 100.0 and A["fstar_from"] == "given"
    # crossings interpolated in log(gap): dcd 0.05 -> 0.005 in 2-3 s, demi 0.10 -> 0.009 in 1-2 s
    t_dcd = 2 + math.log(5) / math.log(10)
    t_demi = 1 + math.log(10) / math.log(0.10 / 0.009)
    assert A["methods"]["dcd"]["time_to_0.01"] == pytest.approx(t_dcd)
    assert A["methods"]["demi-dcd"]["time_to_0.01"] == pytest.approx(t_demi)
    assert A["demi_vs_1dcd_time_to_1pct"] == pytest.approx(t_dcd / t_demi)
    Args.fstar = 101.0  # above what a run reached: the run's own minimum is f*
    A = convergence.analyse(runs, None, Args())
    assert A["fstar"] == 100.5 and A["fstar_from"] == "dcd"
    Args.fstar = None  # without it, f* is the lowest DCD-family primal of the run
    A = convergence.analyse(runs, None, Args())
    assert A["fstar"] == 100.5  # demi: 109.45% -> 0.398% above it over 1-2 s
    g0, g1 = 9.5 / 100.5, 0.4 / 100.5
    assert A["methods"]["demi-dcd"]["time_to_0.01"] == pytest.approx(
        1 + (math.log(g0) - math.log(0.01)) / (math.log(g0) - math.log(g1)))


def test_time_to_metric_and_moving_average():
    pts = [(1.0, 0.90), (2.0, 0.93), (4.0, 0.95)]
    assert common.time_to_metric(pts, 0.93) == 2.0
    assert common.time_to_metric(pts, 0.96) == math.inf
    dip = [(1.0, 0.95), (2.0, 0.90), (3.0, 0.94), (4.0, 0.95)]
    assert common.time_to_metric(dip, 0.93) == 1.0 and common.time_to_stay(dip, 0.93) == 3.0
    assert common.time_to_stay(dip + [(5.0, 0.92)], 0.93) == math.inf
    t = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    v = [100.0, 200.0, 200.0, 200.0, 0.0, 0.0]
    ma = common.moving_average(t, v, 2.0)
    # window (t − 2, t]: at 2.5 → samples 1.0..2.5; at 3.0 → 1.5..3.0
    assert ma == pytest.approx([100.0, 150.0, 500 / 3, 175.0, 150.0, 100.0])


def test_cpu_normalised_time_on_fixed_timeline():
    convergence = importlib.import_module("convergence")
    tl = {"seconds": [0.5, 1.0, 1.5], "total": [200.0, 100.0, 0.0]}
    # each sample covers the half second before it; p = 2 cores = 200%
    assert convergence.cpu_normalised(tl, 1.25, 2) == pytest.approx(0.5 + 0.25 + 0.0)
    assert convergence.cpu_normalised(tl, 3.0, 2) == pytest.approx(0.75)  # last value (0) after
    assert convergence.cpu_normalised(tl, 1.0, 1) == pytest.approx(1.0)  # capped at p cores
    assert convergence.cpu_normalised(tl, math.inf, 2) == math.inf


def test_load_adjusted_time_on_fixed_input():
    convergence = importlib.import_module("convergence")
    assert convergence.load_adjusted(10.0, 2, 2, 0.5) == pytest.approx(7.5)  # 1.5 of 2 cores
    assert convergence.load_adjusted(10.0, 1, 2, 0.5) == pytest.approx(10.0)  # a core was free
    assert convergence.load_adjusted(10.0, 1, 2, 1.5) == pytest.approx(5.0)
    assert convergence.load_adjusted(math.inf, 2, 2, 0.0) == math.inf


def test_thin_log_spaced_keeps_the_last_and_spaces_the_rest():
    times = [0.1 * k for k in range(1, 1001)]  # 0.1 .. 100 s
    keep = common.thin_log_spaced(times, min_step=1.0, rel_step=0.1)
    kept = [times[k] for k in keep]
    assert kept[0] == pytest.approx(0.1) and kept[-1] == pytest.approx(100.0)
    gaps = [b - a for a, b in zip(kept[:-2], kept[1:-1], strict=True)]
    assert all(g >= max(1.0, 0.1 * b) - 1e-9 for g, b in zip(gaps, kept[1:-1], strict=True))
    assert 15 < len(kept) < 40


def test_log_parsers_on_fixed_lines():
    text = "\n".join([
        "learner: 16,838,044 updates (280,619/s), 994 publishes costing 6.7% of its time; "
        "workers: 1,380,992 inferences, 498,387 structures pushed, 903 chunks redone after a "
        "concurrent publish",
        "MS-DCD time split: inference (barrier) 12.50s, master DCD passes 37.50s over 20 "
        "iterations (0.625s vs 1.875s each)",
        "stopped: time-limit after 274 iterations, 60.0s",
        "test accuracy: 94.65%", "test entity F1: 95.00 (P 95.00, R 95.00)",
        "test relation F1: 65.02 (P 81.48, R 54.10)", "average CPU: 187% of 200%"])
    lr = common.parse_learner_line(text)
    assert lr == {"updates": 16838044, "updates_per_s": 280619, "publishes": 994,
                  "publish_percent": 6.7, "inferences": 1380992, "learner_inferences": 0,
                  "pushed": 498387, "chunks_redone": 903}
    own = common.parse_learner_line(
        "learner process: 10 updates (5/s), 3 publishes costing 1.0% of its time, 12,544 "
        "inferences of its own; workers: 100 inferences, 7 structures pushed, 0 chunks redone")
    assert own["inferences"] == 12644 and own["learner_inferences"] == 12544
    ms = common.parse_ms_split(text)
    assert ms["inference_seconds"] == 12.5 and ms["master_seconds"] == 37.5
    assert ms["iterations"] == 20 and ms["master_share"] == pytest.approx(0.75)
    assert common.parse_stopped(text) == {"reason": "time-limit", "iterations": 274,
                                          "seconds": 60.0}
    assert common.parse_cpu_line(text) == {"average": 187.0, "of": 200.0}
    m = common.parse_metrics(text)
    assert m["accuracy"] == pytest.approx(0.9465)
    assert m["entity_f1"] == pytest.approx(0.95) and m["relation_f1"] == pytest.approx(0.6502)
    assert common.parse_learner_line("nothing here") is None


def test_atomic_result_files(tmp_path):
    p = common.write_json(tmp_path / "r.json", {"a": math.inf, "b": [1.5, float("nan")]})
    assert json.loads(p.read_text()) == {"a": "inf", "b": [1.5, None]}
    c = common.write_csv(tmp_path / "r.csv", ["x", "y"], [[1, 0.5], [2, None]])
    assert common.read_csv(c) == [{"x": "1", "y": "0.5"}, {"x": "2", "y": ""}]
    assert not list(tmp_path.glob("*.tmp"))
    info = common.machine_info()
    for k in ("cpu", "nproc", "memory_gib", "python", "numpy", "numba"):
        assert info.get(k) not in (None, ""), k


# --------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench-synth")
    assert cli_main(["generate", "--out-dir", str(d), "--sentences", "160", "--quiet"]) == 0
    return d


def _data(tiny):
    return ["--train", str(tiny / "train.txt"), "--test", str(tiny / "test.txt"),
            "--format", "columns"]


def test_foundation_end_to_end(tiny, tmp_path):
    foundation = importlib.import_module("foundation")
    assert foundation.main([*_data(tiny), "--dev", str(tiny / "dev.txt"), "--time-limit", "120",
                            "--max-epochs", "30", "--min-step", "0.01", "--reps", "1",
                            "--fill-epochs", "2", "--passes", "1", "--out-dir", str(tmp_path),
                            "--name", "f", "--quiet"]) == 0
    res = json.loads((tmp_path / "f.json").read_text())
    assert res["machine"]["nproc"] >= 1
    d = res["dcd"]
    assert d["epochs"] >= 1 and 0.5 < d["test_accuracy"] <= 1.0
    assert min(r["relative_difference"] for r in d["curve"]) == 0.0
    assert d["fstar"] == min(r["primal"] for r in d["curve"])
    assert res["inference_one_core"]["loss_augmented_viterbi"]["tokens_per_s"] > 0
    assert res["learner"]["mean_nnz_phi"] > 0 and res["learner"]["no_shrink"]["updates"] > 0
    assert set(res["targets"]) == {"test_accuracy", "learner_updates_per_s",
                                   "loss_augmented_viterbi_tokens_per_s_per_core"}
    assert (tmp_path / "f_convergence.csv").read_text().startswith("seconds,epoch,primal")
    assert_png(tmp_path / "f.png")


def test_learners_end_to_end_with_crfsuite_peers(tiny, tmp_path):
    learners = importlib.import_module("learners")
    assert learners.main([*_data(tiny), "--algorithms", "demi-dcd,perceptron", "--budget", "1",
                          "--snapshot-every", "0.2", "--ap-iterations", "2",
                          "--crf-iterations", "3", "--work", str(tmp_path / "w"),
                          "--out-dir", str(tmp_path), "--name", "l", "--quiet"]) == 0
    res = json.loads((tmp_path / "l.json").read_text())
    assert [r["algorithm"] for r in res["runs"]] == ["demi-dcd", "perceptron"]
    assert [r["threads"] for r in res["runs"]] == [2, 1]
    for r in res["runs"]:
        assert r["curve"] and 0.3 < r["final_metric"] <= 1.0
        assert r["summary"] is not None
    if importlib.util.find_spec("pycrfsuite") is not None:
        assert set(res["crfsuite"]) == {"ap", "lbfgs"}
        for a, c in res["crfsuite"].items():
            assert 0.3 < c["test_metric"] <= 1.0 and c["iterations_run"] >= 1, a
            for r in res["runs"]:  # the time to the peer's metric is consistent with the curve
                t = r["time_to_crfsuite"][a]
                reached = [s for s, m in r["curve"] if m >= c["test_metric"]]
                assert t == (min(reached) if reached else "inf")
    assert "| demi-dcd |" in res["table_markdown"]
    assert_png(tmp_path / "l.png")


def _columns_to_conllu(src: Path, dst: Path) -> int:
    """The synthetic ``word TAG`` file as CoNLL-U with the tag as XPOS; returns its tokens."""
    out, n, t = [], 0, 0
    for line in src.read_text().split("\n"):
        if line.strip():
            t += 1
            n += 1
            w, tag = line.split()
            out.append(f"{t}\t{w}\t_\t_\t{tag}\t_\t_\t_\t_\t_")
        elif t:
            out.append("")
            t = 0
    dst.write_text("\n".join(out) + "\n\n")
    return n


def test_predict_speed_end_to_end(tiny, tmp_path):
    predict_speed = importlib.import_module("predict_speed")
    train, test = tmp_path / "train.conllu", tmp_path / "test.conllu"
    _columns_to_conllu(tiny / "train.txt", train)
    n = _columns_to_conllu(tiny / "test.txt", test)
    assert predict_speed.main(["--train", str(train), "--test", str(test), "--repeat", "2",
                               "--time-limit", "0.5", "--runs", "1", "--out-dir", str(tmp_path),
                               "--name", "p", "--quiet"]) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    assert res["tokens"] == 2 * n and res["p2_output_equals_p1"]
    assert res["library_warm"]["tokens"] == n and res["library_warm"]["predict_tokens_per_s"] > 0
    assert res["tokens_per_s"]["p1"] > 0 and res["tokens_per_s"]["p2"] > 0
    if importlib.util.find_spec("pycrfsuite") is not None:
        assert res["peer_tokens"] == 2 * n
        assert res["ratios"]["p1_over_crfsuite"] > 0


def test_convergence_end_to_end(tiny, tmp_path):
    convergence = importlib.import_module("convergence")
    assert convergence.main([*_data(tiny), "--budget", "0.4", "--snapshot-every", "0.05",
                             "--min-step", "0.05", "--crf-iterations", "5",
                             "--out-dir", str(tmp_path), "--name", "c", "--quiet"]) == 0
    res = json.loads((tmp_path / "c.json").read_text())
    assert set(res["runs"]) == {"dcd", "demi-dcd", "ms-dcd", "sp-ipm"}
    A = res["analysis"]
    assert A["fstar_from"] != "sp-ipm"
    dcd_primals = [r["primal"] for a in ("dcd", "demi-dcd", "ms-dcd")
                   for r in res["runs"][a]["curve"]]
    assert A["fstar"] == pytest.approx(min(dcd_primals))
    for a, run in res["runs"].items():
        assert run["curve"], a
        assert run["cpu"] is not None and run["cpu"]["of"] == (100 if a == "dcd" else 200)
        if run["stopped"]["seconds"] >= 0.6:  # the monitor samples every 0.5 s
            assert run["cpu_timeline"]["seconds"], a
    assert res["runs"]["demi-dcd"]["learner"]["updates"] > 0
    assert res["runs"]["ms-dcd"]["ms_split"]["iterations"] >= 1
    assert "demi_vs_ms_dcd_time_to_1pct" in A and "demi_vs_1dcd_time_to_1pct" in A
    if importlib.util.find_spec("pycrfsuite") is not None:
        crf = res["crfsuite"]
        assert 0 < crf["test_accuracy"] <= 1 and crf["iterations_run"] >= 1
        assert "demi_dcd_time_to_crfsuite_accuracy" in crf
    header = (tmp_path / "c.csv").read_text().splitlines()[0]
    assert header.startswith("method,seconds,primal,relative_difference,test_metric")
    for suffix in ("primal", "test", "cpu"):
        assert_png(tmp_path / f"c_{suffix}.png")


def test_scaling_end_to_end_warns_when_oversubscribed(tiny, tmp_path, capsys):
    import os

    scaling = importlib.import_module("scaling")
    over = (os.cpu_count() or 1) + 1
    # a budget where 1-DCD surely comes within 1% of every run's best primal (it did so in
    # 0.16-0.20 s on the 2-core guests; a CI runner twice slower missed it at 0.4 s)
    assert scaling.main([*_data(tiny), "--threads", f"1,2,{over}", "--budget", "1.0",
                         "--snapshot-every", "0.05", "--min-step", "0.05", "--fill-epochs", "1",
                         "--project-max", "8", "--out-dir", str(tmp_path), "--name", "s"]) == 0
    out = capsys.readouterr().out
    assert "WARNING" in out and "oversubscribed" in out
    res = json.loads((tmp_path / "s.json").read_text())
    assert res["oversubscribed_threads"] == [over] and res["warning"]
    assert set(res["time_to_1pct"]) == {"1", "2", str(over)}
    proj = res["projection"]
    assert [x["p"] for x in proj["work_conserving"]] == list(range(1, 9))
    assert set(proj["validation"]) == {"1", "2"}
    c = proj["inputs"]
    assert c["t_inf_seconds_per_example"] > 0 and c["t_upd_seconds_per_update"] > 0
    assert c["t_tr_seconds_per_structure"] > 0
    # the model: past the bottleneck switch, adding workers no longer helps
    T = [x["time_to_1pct"] for x in proj["work_conserving"]]
    assert all(b <= a + 1e-12 for a, b in zip(T[1:-1], T[2:], strict=True))
    assert_png(tmp_path / "s.png")


def test_project_model_on_fixed_costs():
    scaling = importlib.import_module("scaling")
    cal = {"t_inf_seconds_per_example": 1e-3, "t_upd_seconds_per_update": 1e-6,
           "t_tr_seconds_per_structure": 1e-5}
    work = {"inferences": 10_000, "updates": 2_000_000, "admitted": 1_000}
    pr = scaling.project(cal, work, q=0.5, f_pub=0.0, s=1.0, pmax=16)
    assert pr[0]["time_to_1pct"] == pytest.approx(10 + 2 + 0.01)  # sequential sum
    assert pr[1]["time_to_1pct"] == pytest.approx(10.0)  # inference-bound at p = 2
    assert pr[1]["bottleneck"] == "inference"
    learner = 2.0 + 0.5 * 10_000 * 1e-5  # 2.05 s: the floor
    assert pr[15]["time_to_1pct"] == pytest.approx(learner)
    assert pr[15]["bottleneck"] == "learner"
    assert pr[4]["time_to_1pct"] == pytest.approx(10.0 / 4)


def test_expensive_projection_on_fixed_runs():
    """The CBC projection reproduces the measured p = 2 times it is calibrated on, DEMI-DCD
    speeds up with the workers while MS-DCD pays for its slowest shard, and a constant solve
    time makes the simulated barrier exactly n/p solves."""
    import numpy as np
    from expensive import barrier_time, project

    def run(t, p, inf, learner=None, ms=None):
        return {"curve": [{"seconds": s, "primal": q} for s, q in t], "stopped": {"seconds": 100.0},
                "last_record": {"inferences": inf}, "learner": learner, "ms_split": ms}

    conv = {"analysis": {"fstar": 1.0}, "data": {"n_train": 1000},
            "runs": {"dcd": run([(0, 4.0), (50, 2.0), (100, 1.5)], 1, 10_000),
                     "demi-dcd": run([(0, 4.0), (25, 2.0), (100, 1.1)], 2, 19_000,
                                     {"learner_inferences": 9_000}),
                     "ms-dcd": run([(0, 4.0), (40, 2.0), (100, 1.2)], 2, 18_000,
                                   ms={"inference_per_iteration": 5.0,
                                       "master_per_iteration": 0.1})}}
    times = np.full(500, 0.01)
    rng = np.random.default_rng(0)
    assert barrier_time(times, 1000, 4, rng, reps=3) == pytest.approx(2.5)
    pr = project(conv, times, 1.0, 16, 0)
    assert pr["sigma_2"] == pytest.approx(0.9)
    rows = {r["p"]: r for r in pr["rows"]}
    assert rows[2]["demi-dcd"] == pytest.approx(25.0)
    assert rows[2]["ms-dcd"] == pytest.approx(40.0)
    assert rows[2]["dcd"] == rows[16]["dcd"] == pytest.approx(50.0)
    assert rows[4]["demi-dcd"] < rows[2]["demi-dcd"] / 1.9
    assert all(rows[p]["ms-dcd"] > rows[p + 1]["ms-dcd"] for p in range(2, 16))
    assert rows[16]["learner_inference_share"] < rows[2]["learner_inference_share"]


def test_transport_log_parser_and_projection_on_fixed_costs():
    tr = importlib.import_module("transport")
    assert tr.parse_transport("x\ntransport: 1,234.5 MB of w̄ out, 6.0 MB of records in\n") \
        == {"bytes_out": 1234.5e6, "bytes_in": 6.0e6}
    assert tr.parse_transport("no such line") is None
    shm = {"structures_per_s": 1000.0}
    ray = {"bytes_per_publish": 2e6, "bytes_per_structure": 500.0, "publish_latency_s": 0.004,
           "learner": {"publishes": 100}, "stopped": {"seconds": 10.0}}
    pr = tr.projection(shm, ray, p=3)  # 2 workers measured
    assert pr["label"].startswith("PROJECTION")
    assert pr["actors"] == 63
    assert pr["structures_per_s_supply"] == pytest.approx(63 * 500.0)
    assert pr["record_bytes_per_s"] == pytest.approx(63 * 500.0 * 500.0)
    assert pr["wbar_bytes_per_s"] == pytest.approx(1e6 * 63 * 10.0)  # per actor × 10/s
    assert pr["publish_latency_s"] == pytest.approx(0.004 * 63 / 2)
    assert "projected_seconds" not in pr  # no learner line: no time model
    # time model: 10 s run, 1 worker at 100 inferences/s, learner inferred 500 (5 s) and
    # published 0% of its time, so 1,000 updates in 5 s = 200 updates/s alone
    shm = {"structures_per_s": 50.0, "worker_inferences_per_s": 100.0, "time_to_1pct": 5.0,
           "stopped": {"seconds": 10.0},
           "learner": {"updates": 1000.0, "publish_percent": 0.0, "inferences": 1500.0,
                       "learner_inferences": 500.0}}
    pr = tr.projection(shm, ray, p=2)
    assert pr["learner_updates_per_s_alone"] == pytest.approx(200.0)
    assert pr["work_inferences"] == pytest.approx(750.0)  # half the run's work by 5 s
    assert pr["inference_seconds"] == pytest.approx(750.0 / (63 * 100.0))
    assert pr["learner_seconds"] == pytest.approx(500.0 / 200.0)
    assert pr["bottleneck"] == "learner"
    assert pr["speedup_over_measured_p"] == pytest.approx(5.0 / 2.5)


def test_example_trains_with_demi_dcd_and_plots_cpu(tmp_path):
    sys.path.insert(0, str(EXAMPLES))
    ex = importlib.import_module("train_demi_cpu")
    png, log = tmp_path / "cpu.png", tmp_path / "cpu.csv"
    assert ex.main(["--sentences", "200", "--time-limit", "2", "--cpu-log", str(log),
                    "--out", str(png)]) == 0
    seconds, cols = ex.read_cpu_log(str(log))
    assert seconds and "total" in cols and "learner" in cols and "worker 1" in cols
    assert_png(png)


def test_bigram_cost_end_to_end(tiny, tmp_path):
    """The B-feature cost benchmark on a three-column file (word, tag as POS, tag as label):
    the star template has B features, the plain template none, both timed."""
    bigram_cost = importlib.import_module("bigram_cost")
    rows = [ln.split() for ln in (tiny / "train.txt").read_text().splitlines()[:600]]
    train = tmp_path / "train.txt"
    train.write_text("\n".join(f"{r[0]} {r[1]} {r[1]}" if r else "" for r in rows) + "\n")
    assert bigram_cost.main(["--train", str(train), "--fit-seconds", "0.3", "--reps", "1",
                             "--out-dir", str(tmp_path), "--name", "b"]) == 0
    res = json.loads((tmp_path / "b.json").read_text())
    acc, star = res["rows"]["plain"], res["rows"]["star"]
    assert acc["b_features"] == 0 and acc["b_per_token"] == 0
    assert star["b_features"] > 0 and star["b_per_token"] > 0
    assert acc["u_features"] == star["u_features"] and acc["tokens"] == star["tokens"] > 0
    assert res["star_over_plain"]["loss_augmented"] > 0
    assert not (tmp_path / "star.template").exists()


def test_setup_speed_parses_the_log_and_runs_end_to_end(tiny, tmp_path):
    setup_speed = importlib.import_module("setup_speed")
    log = ("data: x.txt: 45,829 sentences, 929,285 tokens (read in 0.7s)\n"
           "building features of 45,829 sentences ... (2.5 s)\n"
           "peak memory: 1,234 MiB (PSS, all processes)\n")
    assert setup_speed.parse_log(log) == {"read_s": 0.7, "features_s": 2.5, "encoding_s": 0.0,
                                          "peak_pss_mib": 1234.0}
    out = tmp_path / "s.json"
    assert setup_speed.main(["--train", str(tiny / "train.txt"), "--runs", "1", "--cpu", "-1",
                             "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    m = res["median"]["train.txt"]["this tree"]
    assert m["read_s"] is not None and m["cpu_s"] > 0 and m["wall_s"] >= m["setup_log_s"]


def test_many_labels_end_to_end(tiny, tmp_path):
    """The dense-versus-pruned Viterbi benchmark on a tagger trained for a second: both paths
    timed for decode and loss-augmented inference (after the script checked they agree)."""
    many_labels = importlib.import_module("many_labels")
    model = tmp_path / "m.npz"
    assert cli_main(["train", "--train", str(tiny / "train.txt"), "--format", "columns",
                     "--threads", "1", "--time-limit", "1", "--model", str(model),
                     "--quiet"]) == 0
    assert many_labels.main(["--model", str(model), "--data", str(tiny / "train.txt"),
                             "--format", "columns", "--sentences", "50", "--reps", "1",
                             "--out-dir", str(tmp_path), "--name", "m", "--quiet"]) == 0
    res = json.loads((tmp_path / "many_labels_m.json").read_text())["result"]
    assert res["sentences"] == 50 and res["tokens"] > 0 and res["tags"] > 1
    for name in ("decode_dense", "decode_pruned", "loss_augmented_dense",
                 "loss_augmented_pruned"):
        assert res[name]["ns_per_token"] > 0
    assert res["default_decode"] == ("pruned" if res["tags"] >= res["prune_from_labels"]
                                     else "dense")


def test_million_tokens_log_figures_on_fixed_lines():
    """The zero rows the issue saw (``active 0`` / ``max_pg 0.0000`` while unconverged) are
    counted after the first iteration line, and not at all in a converged run."""
    million_tokens = importlib.import_module("million_tokens")
    log = ("data: x.txt: 45,829 sentences, 929,285 tokens (read in 0.6s)\n"
           "iter   1      1.25s  updates  1,303  active      0  max_pg 0.0000  inferences 31\n"
           "iter   2      2.50s  updates  1,610  active      0  max_pg 0.0000  inferences 36\n"
           "iter   3      3.75s  updates  1,700  active     12  max_pg 0.5000  inferences 40\n"
           "stopped: time-limit after 3 iterations, 3.8s; not converged\n"
           "peak memory: 5,806 MiB (PSS, all processes)\naverage CPU: 94% of 200%\n")
    f = million_tokens.log_figures(log)
    assert (f["sentences"], f["tokens"], f["peak_memory_mib"]) == (45829, 929285, 5806.0)
    assert f["cpu"] == {"average": 94.0, "of": 200.0} and f["read_s"] == 0.6
    assert f["iteration_lines"] == 3 and f["zero_rows"] == 1
    assert million_tokens.log_figures(log.replace("time-limit", "converged"))["zero_rows"] == 0


def test_million_tokens_brown_end_to_end_with_peers(tiny, tmp_path):
    """The Brown benchmark on the tiny corpus (one tag set, column 2): three learners with
    snapshots, then python-crfsuite in child processes on the dumped features; a second run
    reuses those peers from the first one's results file."""
    million_tokens = importlib.import_module("million_tokens")
    base = ["brown", "--train", str(tiny / "train.txt"), "--test", str(tiny / "test.txt"),
            "--tagsets", "tags:2", "--budget", "1", "--snapshot-every", "0.2", "--min-step",
            "0.1", "--lbfgs-iterations", "2", "--ap-iterations", "1", "--out-dir",
            str(tmp_path), "--quiet"]
    assert million_tokens.main([*base, "--name", "b"]) == 0
    res = json.loads((tmp_path / "million_tokens_brown_b.json").read_text())
    t = res["tagsets"]["tags"]
    assert set(t["runs"]) == {"demi-dcd", "dcd", "ms-dcd"}
    for a, r in t["runs"].items():
        assert r["curve"] and 0.3 < r["test_accuracy"] <= 1.0, a
        assert r["peak_memory_mib"] > 0 and r["cpu"]["of"] == 100 * r["threads"], a
        assert r["setup_seconds"] > 0 and r["tokens"] > 0, a
    an = t["analysis"]
    assert an["fstar"] == min(x["primal"] for r in t["runs"].values() for x in r["curve"])
    # f* is some run's primal, so that run comes within 1% (JSON writes an infinity as "inf")
    assert any(r["time_to_1pct"] != "inf" for r in t["runs"].values())
    assert "not installed" in t["peers"]["wapiti"].get("skipped", "not installed")
    if importlib.util.find_spec("pycrfsuite") is not None:
        for p in ("lbfgs", "ap"):
            peer = t["peers"][p]
            assert 0.3 < peer["test_accuracy"] <= 1.0 and peer["peak_rss_mib"] > 0, p
            assert peer["iterations_run"] >= 1
            assert p in t["runs"]["demi-dcd"]["time_to_peer_accuracy"]
        assert million_tokens.main([*base, "--methods", "dcd:1", "--name", "r",
                                    "--peers-from",
                                    str(tmp_path / "million_tokens_brown_b.json")]) == 0
        again = json.loads((tmp_path / "million_tokens_brown_r.json").read_text())
        peers = again["tagsets"]["tags"]["peers"]
        assert peers["ap"]["reused_from"] and peers["ap"]["test_accuracy"] == \
            t["peers"]["ap"]["test_accuracy"]
    assert "| tags | DEMI-DCD (p=2) |" in res["table_markdown"]


def test_million_tokens_synthetic_end_to_end(tmp_path):
    million_tokens = importlib.import_module("million_tokens")
    assert million_tokens.main(["synthetic", "--sizes", "100,200", "--vocab-size", "2000",
                                "--time-limit", "1", "--out-dir", str(tmp_path), "--name",
                                "s", "--quiet"]) == 0
    res = json.loads((tmp_path / "million_tokens_synthetic_s.json").read_text())
    a, b = res["runs"]
    assert (a["sentences"], b["sentences"]) == (100, 200) and b["tokens"] > a["tokens"] > 0
    for r in (a, b):
        assert r["bytes_per_token"] == r["peak_bytes"] / r["tokens"] > 0
        assert r["seconds_per_pass"] > 0 and r["data_passes"] > 0
        assert r["setup_seconds"] > 0 and r["peak_memory_mib"] > 0
    assert "growth_bytes_per_token" not in a
    assert b["growth_bytes_per_token"] == (b["peak_bytes"] - a["peak_bytes"]) / (
        b["tokens"] - a["tokens"])
    assert res["generator"]["n_tags"] == 45 and res["generator"]["vocab_size"] == 2000


@pytest.mark.parametrize("parts,sigma", [(1, 1), (2, 2)])
def test_cocoa_lag_parts_raise_the_dual_every_report(tmp_path, parts, sigma):
    """One part is DCD; two parts with CoCoA+'s safe σ′ = 2, merged after each round (both
    started it from the same w), never lower the dual either (Ma et al. 2015)."""
    cocoa_lag = importlib.import_module("cocoa_lag")
    out = tmp_path / "c.json"
    assert cocoa_lag.main(["--synthetic", "200", "--parts", str(parts), "--sigma",
                           str(sigma), "--updates", "4000", "--slice", "0.002", "--out",
                           str(out)]) == 0
    res = json.loads(out.read_text())
    duals = [c["dual"] for c in res["curve"]]
    assert (res["parts"], res["sigma"]) == (parts, sigma) and len(duals) >= 4
    assert duals[0] > 0 and all(b >= a - 1e-9 for a, b in zip(duals, duals[1:], strict=False))


# end to end (processes, signals, Ray, benchmarks): deselected by default, CI's second step
# (python -m pytest -q -m slow)
pytestmark = pytest.mark.slow


def test_partial_labels_time_to_final_accuracy():
    """(d) of benchmarks/partial_labels.py: the first snapshot within 0.1 points of the last
    one's accuracy (a later dip does not move it), and the ratio of two runs."""
    pl = importlib.import_module("partial_labels")
    curve = [(0.5, 80.0), (2.0, 94.85), (3.1, 94.95), (4.0, 94.7), (6.0, 95.02)]
    t = pl.time_to_final(curve, 0.1)
    assert t == {"final_accuracy": 95.02, "seconds_to_final": 3.1, "snapshots": 5,
                 "last_seconds": 6.0}
    assert pl.time_to_final(curve, 0.2)["seconds_to_final"] == 2.0
    assert pl.time_to_final([(1.0, 50.0)], 0.1)["seconds_to_final"] == 1.0


def test_experimental_cli_sets_the_engine_settings_then_runs_the_command(monkeypatch, capsys):
    """benchmarks/experimental_cli.py (scaling.py --modes): the named EXPERIMENTAL fields are
    set before the command runs; an unknown one, or no ``--``, is refused with status 2."""
    from demidcd.parallel.experimental import EXPERIMENTAL

    xcli = importlib.import_module("experimental_cli")
    monkeypatch.setattr(EXPERIMENTAL, "update_mode", "plain")
    monkeypatch.setattr(EXPERIMENTAL, "rebuild_every", 5.0)
    seen = []
    monkeypatch.setattr("demidcd.cli.main", lambda argv: seen.append(
        (argv, EXPERIMENTAL.update_mode, EXPERIMENTAL.rebuild_every)) or 0)
    assert xcli.main(["update_mode=hot", "rebuild_every=2", "--", "train", "--threads", "2"]) == 0
    assert seen == [(["train", "--threads", "2"], "hot", 2.0)]
    assert xcli.main(["no_such=1", "--", "train"]) == 2
    assert xcli.main(["update_mode=hot", "train"]) == 2
    assert len(seen) == 1
    assert common.demidcd_cmd({"update_mode": "hot"})[-2:] == ["update_mode=hot", "--"]


def test_cores_together_times_one_process_then_two(monkeypatch, tmp_path):
    """benchmarks/cores_together.py: each try has, per kernel, the lone process's rate, the
    two processes' rates and their sum over it; the JSON lands in the results folder."""
    import json

    ct = importlib.import_module("cores_together")
    monkeypatch.setattr(ct, "RESULTS", tmp_path)
    monkeypatch.setattr(ct, "STEP", 1000)
    assert ct.main(["--tries", "1", "--seconds", "0.05", "--name", "t"]) == 0
    tries = json.loads((tmp_path / "t.json").read_text())["tries"]
    assert len(tries) == 1 and set(tries[0]) == {"time", *ct.SIZES}
    for what in ct.SIZES:
        row = tries[0][what]
        assert row["alone"] > 0 and len(row["two_at_once"]) == 2
        assert row["ratio"] == pytest.approx(sum(row["two_at_once"]) / row["alone"])
