"""Welch over seed values beside the matched-length, caution-goal and added-arm readings, and the study's time
said from the runs' measured files rather than from the last invocation's wall time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fspo_lite import stats
from fspo_lite.drivers.report.reader import run_times, time_totals
from fspo_lite.drivers.report.readme import study_time
from fspo_lite.drivers.report.sensitivity import welch_answer, welch_more_markdown, welch_rows, with_welch
from fspo_lite.drivers.report.study import caution_goal

ROOT = Path(__file__).resolve().parents[1]


def test_welch_relative_interval_by_hand():
    # a = [1, 2, 3] (mean 2, s^2 1), b = [2, 2, 2] (mean 2, s^2 0): log ratio 0, u_a = 1 / (3 * 4) = 1 / 12, u_b = 0,
    # df = (1/12)^2 / ((1/12)^2 / 2) = 2, t(0.975, 2) = 4.302653, half width 4.302653 * sqrt(1/12) = 1.242070
    r = stats.welch_relative_interval([1, 2, 3], [2, 2, 2])
    assert r["relative"] == 0.0 and r["df"] == pytest.approx(2.0)
    assert r["low"] == pytest.approx(math.exp(-1.242070) - 1, abs=1e-5)
    assert r["high"] == pytest.approx(math.exp(1.242070) - 1, abs=1e-5)
    # a ratio of 0.5: the interval is around exp(log 0.5) - 1 = -0.5
    r = stats.welch_relative_interval([1, 1.2, 0.8], [2, 2.2, 1.8])
    assert r["relative"] == pytest.approx(-0.5) and r["low"] < -0.5 < r["high"]
    for a, b in (([1], [2, 3]), ([0, 0], [1, 2]), ([1, 1], [2, 2])):
        assert math.isnan(stats.welch_relative_interval(a, b)["low"])


def test_matched_seed_values_by_hand():
    # seeds x questions x strata (2 x 1 x 2), weights 1/2 each
    num = np.array([[[1.0, 1.0]], [[0.0, 0.0]]])
    den = np.array([[[2.0, 4.0]], [[1.0, 0.0]]])
    values = stats.matched_seed_values(num, den, [0.5, 0.5], np.array([True, True]))
    # seed 0: (1/2 + 1/4) / 2 = 0.375; seed 1: only stratum 0 has a denominator: 0 / 1 = 0
    assert values.tolist() == [0.375, 0.0]
    assert stats.matched_seed_values(num, den, [0.5, 0.5], np.array([False, True])).tolist()[0] == 0.25
    assert math.isnan(stats.matched_seed_values(num, den, [0.5, 0.5], np.array([False, True]))[1])


def test_matched_difference_carries_welch_over_the_seed_values():
    rng = np.random.default_rng(1)
    num_a, num_b = rng.integers(0, 3, (3, 4, 2)).astype(float), rng.integers(0, 3, (4, 4, 2)).astype(float)
    den_a, den_b = num_a + 2, num_b + 1
    weights = np.array([0.6, 0.4])
    result = stats.matched_difference(num_a, den_a, num_b, den_b, weights, n_resamples=50)
    usable = np.array([True, True])
    expected = stats.welch_interval(stats.matched_seed_values(num_a, den_a, weights, usable),
                                    stats.matched_seed_values(num_b, den_b, weights, usable))
    assert (result["welch_low"], result["welch_high"], result["welch_p"]) == pytest.approx(
        (expected["low"], expected["high"], expected["p"]))


def test_caution_goal_asks_welch_too():
    seeds = pd.DataFrame([{"metric": m, "method": meth, "seed": s, "value": v}
                          for m, per in {"all_attempt_wrong": {"caution": [0.5, 0.6, 0.4], "grpo": [0.8, 0.82, 0.78]},
                                         "accuracy": {"caution": [0.2, 0.21, 0.19], "grpo": [0.2, 0.2, 0.21]}}.items()
                          for meth, values in per.items() for s, v in enumerate(values)])
    diffs = pd.DataFrame([
        {"metric": "all_attempt_wrong", "method": "caution", "baseline": "grpo", "a": 0.5, "b": 0.8, "diff": -0.3,
         "low": -0.35, "high": -0.25, "relative": -0.375, "relative_low": -0.45, "relative_high": -0.3},
        {"metric": "accuracy", "method": "caution", "baseline": "grpo", "a": 0.2, "b": 0.2033, "diff": -0.0033,
         "low": -0.01, "high": 0.005, "relative": 0.0, "relative_low": 0.0, "relative_high": 0.0}])
    table = with_welch(diffs, seeds)
    aaw = table.set_index("metric").loc["all_attempt_wrong"]
    expected = stats.welch_relative_interval([0.5, 0.6, 0.4], [0.8, 0.82, 0.78])
    assert (aaw["welch_relative_low"], aaw["welch_relative_high"]) == pytest.approx((expected["low"],
                                                                                       expected["high"]))
    row = caution_goal(table).iloc[0]
    assert row["aaw_relative_welch_high"] == pytest.approx(expected["high"])
    # the bootstrap's interval lies below -20%; Welch's over 3 seeds with this spread does not
    assert row["holds"] and expected["high"] > -0.2 and not row["holds_welch"]


def test_welch_rows_and_the_answer_come_from_the_numbers():
    part = {"matched_length": [{"judge": "kb", "method": "fspo", "baseline": "grpo", "diff": -0.031, "low": -0.094,
                                "high": 0.029, "welch_low": -0.08, "welch_high": 0.02},
                               {"judge": "embedding", "method": "fspo+4x", "baseline": "grpo", "diff": -0.1,
                                "low": -0.15, "high": -0.05, "welch_low": -0.2, "welch_high": 0.01}],
            "caution_goal": [{"method": "caution", "baseline": "grpo", "aaw_relative": -0.05,
                              "aaw_relative_low": -0.09, "aaw_relative_high": -0.01,
                              "aaw_relative_welch_low": -0.1, "aaw_relative_welch_high": -0.02}],
            "questions": {"pairs": [{"metric": "supported_per_response@kb", "method": "fspo+kb", "baseline": "fspo",
                                     "diff": 0.01, "low": -0.05, "high": 0.07, "welch_low": -0.04,
                                     "welch_high": 0.06},
                                    {"metric": "sentences_per_response", "method": "fspo+kb", "baseline": "fspo",
                                     "diff": 0.01, "low": 0.0, "high": 0.02, "welch_low": 0.0, "welch_high": 0.02}]}}
    groups = welch_rows(part)
    assert [r["survives"] for r in groups["matched length"]] == ["neither", "bootstrap only"]
    assert groups["caution goal"][0]["survives"] == "both"
    assert [r["reading"] for r in groups["added-arm pairs"]] == ["supported_per_response@kb"]
    answer = welch_answer(groups)
    assert "matched length: 1 of 2 resolved by the bootstrap, 0 also by Welch (none)" in answer
    assert "caution goal: 1 of 1 resolved by the bootstrap, 1 also by Welch (caution - grpo caution goal" in answer
    text = "\n".join(welch_more_markdown(part))
    assert "| step hallucination at matched length (kb) | fspo - grpo | -3.1 [-9.4, +2.9] | -3.1 [-8.0, +2.0] | " \
           "neither |" in text
    assert "| supported_per_response@kb | fspo+kb - fspo | +0.01 [-0.05, +0.07] | +0.01 [-0.04, +0.06] |" in text
    assert "-5.0% [-10.0, -2.0]" in text
    assert welch_more_markdown({}) == []
    # a summary made before the matched rows carried Welch shows no table of n/a
    assert welch_more_markdown({"matched_length": [{k: v for k, v in part["matched_length"][0].items()
                                                    if not k.startswith("welch")}]}) == []


def _run(root, name, method, step_times, eval_seconds):
    run = root / name
    (run / "eval").mkdir(parents=True)
    (run / "heldout.json").write_text(json.dumps({"method": method}))
    if step_times:
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i + 1, "step_time": t}) + "\n"
                                                   for i, t in enumerate(step_times)))
    (run / "eval" / "summary.json").write_text(json.dumps({"benchmarks": {
        f"b{i}": {"seconds": s} for i, s in enumerate(eval_seconds)}}))


def test_run_times_are_read_from_each_run_s_files(tmp_path):
    _run(tmp_path, "base", "base", [], [100.0, 20.0])
    _run(tmp_path, "grpo_s0", "grpo", [30.0, 30.0], [200.0])
    _run(tmp_path, "fspo_s0", "fspo", [60.0, 60.0, 60.0], [100.0, 140.0])
    rows = run_times(tmp_path)
    assert [(r["run"], r["train_seconds"], r["eval_seconds"]) for r in rows] == [
        ("base", 0.0, 120.0), ("fspo_s0", 180.0, 240.0), ("grpo_s0", 60.0, 200.0)]
    totals = time_totals(rows)
    assert totals == {"models": 3, "trained": 2, "train_seconds": 240.0, "eval_seconds": 560.0, "total_seconds": 800.0,
                      "train_range": [60.0, 180.0], "eval_range": [120.0, 240.0], "run_range": [120.0, 420.0]}
    assert time_totals([]) == {}
    summary = {"job": {"command": "python -m fspo_lite lite --profile study", "total_seconds": 804.0,
                       "runs": {"trained": 0, "resumed": 0, "skipped": 2}},
               "statistics": {"reader": {"run_times": totals}}}
    text = study_time(summary)
    assert text.startswith("The study's 3 models took 0.2 h of measured time: training 0.1 h over 2 runs "
                           "(1.0-3.0 min each), evaluation 0.2 h (2.0-4.0 min each); 2.0-7.0 min per model")
    assert text.endswith("The last invocation (`python -m fspo_lite lite --profile study`) trained no run and "
                         "skipped the 2 finished ones: it read the runs and wrote the report, in 13.4 min.")
    report_only = {"command": "python -m fspo_lite lite --profile study --only 04", "total_seconds": 236.0,
                   "notebook_seconds": {"04_results.ipynb": 236.0}}  # no run folder was read for its counts
    assert study_time({**summary, "job": report_only}).endswith(
        "The last invocation (`python -m fspo_lite lite --profile study --only 04`) ran 04_results.ipynb, in 3.9 min.")


def test_the_readme_no_longer_gives_the_last_invocation_as_the_study_s_time():
    block = (ROOT / "README.md").read_text().split("<!-- results:study-time -->", 1)[1].split("<!--", 1)[0]
    assert "Wall time of the study's last invocation" not in block
    assert "of measured time" in block and "The last invocation" in block
    summary = (ROOT / "results/study/summary.md").read_text()
    assert "## Time the runs took" in summary and "## Wall time of the last invocation" in summary
