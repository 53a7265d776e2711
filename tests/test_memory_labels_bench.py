"""benchmarks/memory_labels.py's measuring and reporting on fixed input (nothing timed): the
sampled peak PSS of a command's process tree, a peer stopped once it printed what it was
waited for, and the table of a results row."""

import importlib
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
ml = importlib.import_module("memory_labels")

ALLOC = ("import time, numpy as np; a = np.ones(60 * 2**20 // 8); print('ITERATION 1', "
         "flush=True); time.sleep({})")


def test_run_sampled_sees_a_child_allocation(tmp_path):
    r = ml.run_sampled([sys.executable, "-c", ALLOC.format(1.5)], tmp_path / "a.log", timeout=60)
    assert r["rc"] == 0 and r["capped"] == ""
    assert r["peak_pss_mib"] >= 60 and r["vmhwm_mib"] >= 60  # the 60 MiB array, at least


def test_a_peer_is_stopped_once_it_printed_its_first_iteration(tmp_path):
    r = ml.run_sampled([sys.executable, "-c", ALLOC.format(60)], tmp_path / "b.log", timeout=50,
                       cap=1.0, stop_when=lambda t: "ITERATION" in t)
    assert r["capped"] == "capped" and r["wall_seconds"] < 30
    assert r["vmhwm_mib"] >= 60


def test_table_of_fixed_rows():
    row = {"labels": 83, "tokens": 987_624, "demidcd": {"auto": {
        "weights_lines": ["features: 1,706,330 (feature, tag) pairs seen in training (of "
                          "470,331 x 83) + transitions = 1,713,453 weights (13.1 MiB float64)"],
        "log_peak_mib": 358.0, "peak_pss_mib": 553, "test_accuracy": 0.7855}},
        "peer": {"peak_mib": 584, "capped": "capped", "iterations_done": 1, "wall_seconds": 300}}
    md = ml.table([row], ["auto"])
    line = md.splitlines()[-1]
    assert "| 83 | 987,624 | seen | 358 MiB | 553 MiB | 78.55% | 584 MiB (stopped after " \
           "iteration 1) |" == line


def test_the_generator_takes_brown_sized_tag_sets():
    """The series' 453 labels (Brown's tag count): the generator took at most 200."""
    import pytest

    from demidcd.synthetic import generator_model, sample

    c = sample(generator_model(n_tags=453, vocab_size=4000, seed=1), 400, seed=1)
    assert len({t for s in c.tags for t in s}) > 200
    with pytest.raises(ValueError, match="n_tags"):
        generator_model(n_tags=1001, vocab_size=5000)


def test_the_peer_taken_from_earlier_results(tmp_path):
    """``--peer-from``: the first file with the label count on the same corpus size gives the
    peer's row, marked with its file; none found: None."""
    import json

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"rows": [{"labels": 83, "sentences": 2000, "peer": {"peak_mib": 1}},
                                      {"labels": 12, "sentences": 55000, "peer": None}]}))
    b.write_text(json.dumps({"rows": [{"labels": 83, "sentences": 55000,
                                       "peer": {"peak_mib": 584, "capped": "capped",
                                                "iterations_done": 1}},
                                      {"labels": 12, "sentences": 55000,
                                       "peer": {"peak_mib": 363, "capped": ""}}]}))
    files = [str(tmp_path / "missing.json"), str(a), str(b)]
    assert ml.earlier_peer(83, 55000, files) == {"peak_mib": 584, "capped": "capped",
                                                 "iterations_done": 1, "from": "b.json"}
    assert ml.earlier_peer(12, 55000, files)["peak_mib"] == 363
    assert ml.earlier_peer(45, 55000, files) is None
    row = {"labels": 12, "tokens": 10, "demidcd": {}, "peer": ml.earlier_peer(12, 55000, files)}
    assert ml.table([row], []).splitlines()[-1] == "| 12 | 10 | 363 MiB [b.json] |"
