"""The study read through the judge that agrees with people: Welch, Holm and agreement by hand; the judge validity
readers on malformed input; the verdict, preset target, question (b) and plain-words sentences made from the numbers
(each test fails on the sentence the report used to write)."""

from __future__ import annotations

import json
import math
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fspo_lite import stats
from fspo_lite.data.labeling import SentenceItem
from fspo_lite.drivers.report.controls import more_right_lead
from fspo_lite.drivers.report.plain import plain_words
from fspo_lite.drivers.report.render import verdict
from fspo_lite.drivers.report.sensitivity import holm_readings, resolvable, survives, with_welch
from fspo_lite.drivers.report.study import judges_of, metric_cells
from fspo_lite.drivers.report.validity import draw_check, labelled_rows, validity_reading

ROOT = Path(__file__).resolve().parents[1]


# --- the formulas, by hand -----------------------------------------------------------------------------------------

def test_welch_interval_by_hand():
    # a = 1, 2, 3 (mean 2, s^2 1); b = 4, 6, 8 (mean 6, s^2 4): v_a = 1/3, v_b = 4/3, se = sqrt(5/3),
    # df = (5/3)^2 / ((1/3)^2 / 2 + (4/3)^2 / 2) = 50/17
    from scipy.stats import t

    result = stats.welch_interval([1, 2, 3], [4, 6, 8])
    se, df = math.sqrt(5 / 3), 50 / 17
    assert result["diff"] == pytest.approx(-4.0)
    assert result["df"] == pytest.approx(df)
    assert result["low"] == pytest.approx(-4 - t.ppf(0.975, df) * se)
    assert result["high"] == pytest.approx(-4 + t.ppf(0.975, df) * se)
    assert result["p"] == pytest.approx(2 * t.sf(4 / se, df))
    assert math.isnan(stats.welch_interval([1.0], [2.0, 3.0])["low"])  # one seed: no interval
    assert math.isnan(stats.welch_interval([1.0, 1.0], [2.0, 2.0])["low"])  # no spread
    assert stats.welch_interval([1.0, 1.0], [2.0, 2.0])["diff"] == -1.0


def test_holm_by_hand():
    # sorted 0.01 <= 0.05/4 rejected; 0.03 > 0.05/3 stops: only the first
    assert stats.holm([0.01, 0.04, 0.03, 0.2]) == [True, False, False, False]
    # 0.001 <= 0.05/3, 0.02 <= 0.05/2, 0.04 <= 0.05/1: all
    assert stats.holm([0.04, 0.001, 0.02]) == [True, True, True]
    assert stats.holm([float("nan"), 0.03]) == [False, True]  # NaN neither rejected nor counted
    assert stats.holm([]) == []


def test_agreement_kappa_and_constant_by_hand():
    # human U U U S, judge U S - S: agree 2/4; chance = (3/4)(1/4) + (1/4)(2/4) + 0 (1/4) = 5/16
    scores = stats.agreement_scores([-1, -1, -1, 1], [-1, 1, None, 1])
    assert scores["agree"] == pytest.approx(0.5)
    assert scores["kappa"] == pytest.approx((0.5 - 5 / 16) / (1 - 5 / 16))
    assert scores["constant"] == pytest.approx(0.75)
    assert math.isnan(stats.agreement_scores([], [])["agree"])
    assert math.isnan(stats.agreement_scores([1], [1, 1])["agree"])  # mismatched lengths: no score


def test_agreement_interval_resamples_questions_as_clusters():
    # two questions, one all agreed, one all disagreed: a resample of one question only gives 0 or 1
    result = stats.agreement_interval(["a", "a", "b", "b"], [-1, -1, -1, -1], [-1, -1, 1, 1], 500,
                                      np.random.default_rng(0))
    assert result["agree"] == 0.5 and result["agree_low"] == 0.0 and result["agree_high"] == 1.0
    same = stats.agreement_interval(["a", "b"], [-1, 1], [-1, 1], 200, np.random.default_rng(0))
    assert same["agree_low"] == same["agree_high"] == 1.0


def test_resolvable_difference_by_hand():
    # interval width 2 x 1.96 x 0.1: standard error 0.1, 2.8 of them (80% power at 5%)
    rows = pd.DataFrame([{"metric": "supported_per_response@kb", "method": "fspo", "low": -0.196, "high": 0.196},
                         {"metric": "supported_per_response@kb", "method": "corver", "low": 0.0, "high": 0.392}])
    result = resolvable(rows, "supported_per_response@kb")
    assert result["per_method"]["fspo"] == pytest.approx(0.28016, abs=1e-4)
    assert result["smallest"] == result["largest"] == pytest.approx(0.28016, abs=1e-4)


def test_welch_beside_the_bootstrap_and_survives_both():
    seeds = pd.DataFrame([{"metric": "m", "method": "a", "seed": s, "value": v} for s, v in enumerate([1, 2, 3])]
                         + [{"metric": "m", "method": "grpo", "seed": s, "value": v} for s, v in enumerate([4, 6, 8])])
    diffs = with_welch(pd.DataFrame([{"metric": "m", "method": "a", "baseline": "grpo", "diff": -4.0, "low": -5.0,
                                      "high": -3.0}]), seeds)
    row = diffs.iloc[0]
    assert row["welch_low"] < -4 < row["welch_high"] and row["welch_high"] > 0  # df 2.9: Welch holds 0
    assert survives(row) == "bootstrap only"
    assert survives({"low": -2, "high": -1, "welch_low": -3, "welch_high": -0.5}) == "both"
    assert survives({"low": -2, "high": 1, "welch_low": 0.1, "welch_high": 2}) == "Welch only"


def test_holm_readings_of_question_b():
    diffs = pd.DataFrame([{"metric": f"step_hallucination@{j}", "method": "x", "diff": -0.1, "low": -0.2,
                           "high": -0.01, "welch_low": -0.3, "welch_high": 0.1, "welch_p": p}
                          for j, p in (("kb", 0.001), ("embedding", 0.2))])
    rows = holm_readings(diffs, [{"arm": "x", "judges": [{"judge": "kb"}, {"judge": "embedding"}]}])
    assert [(r["judge"], r["holm"], r["survives"]) for r in rows] == [("kb", True, "bootstrap only"),
                                                                       ("embedding", False, "bootstrap only")]


# --- the readers, on good and hostile input ------------------------------------------------------------------------

def _item(item_id, label, response="<think>Oslo is the capital.</think><answer>Oslo</answer>"):
    return SentenceItem(id=item_id, question="q", evidence="e", response=response, sentence="Oslo is the capital.",
                        span=(7, 27), label=label)


def test_labelled_rows_reads_today_s_labels_and_leaves_out_changed_responses():
    records = {("r", "q1", 0): ("<think>Oslo is the capital.</think><answer>Oslo</answer>", [(7, 27)],
                                {"kb": [1], "embedding": [-1]}),
               ("r", "q2", 0): ("something else", [(0, 5)], {"kb": [1]})}
    key = {"a-1": {"run": "r", "question_id": "q1", "sample": 0, "method": "fspo"},
           "a-2": {"run": "r", "question_id": "q2", "sample": 0, "method": "grpo"},
           "a-3": {"run": "gone", "question_id": "q3", "sample": 0, "method": "grpo"}}
    rows, dropped = labelled_rows([_item("a-1", "supported"), _item("a-2", "unsupported"),
                                   _item("a-3", "unsupported")], key, records)
    assert dropped == 2 and rows == [{"id": "a-1", "question": "q1", "method": "fspo", "human": 1,
                                      "judges": {"kb": 1, "embedding": -1}}]
    with pytest.raises(ValueError, match="not labelled"):
        labelled_rows([_item("a-1", None)], key, records)
    with pytest.raises(ValueError, match="not in the key"):
        labelled_rows([_item("a-9", "supported")], key, records)


def test_draw_check_by_hand():
    # pool: 10 supported of 100; drawn: 20, none supported; expected 2; P(X <= 0) = C(90, 20) / C(100, 20)
    rows = [{"method": "fspo", "judges": {"kb": -1}} for _ in range(20)]
    result = draw_check(rows, {"fspo": (10, 100)})["fspo"]
    assert result["expected"] == pytest.approx(2.0)
    assert result["tail"] == pytest.approx(comb(90, 20) / comb(100, 20))


def test_validity_reading_names_the_judges_below_the_constant():
    def judge(agree, low):
        return {"agree": agree, "agree_low": low, "constant": 0.8}

    validity = {"sets": {"audit": {"judges": {"kb": judge(0.94, 0.9), "embedding": judge(0.55, 0.45)}}}}
    text = validity_reading(validity, "kb")
    assert text.startswith("Only the kb judge agrees") and "the embedding judge agrees less often" in text
    assert "No judge" in validity_reading({"sets": {"a": {"judges": {"x": judge(0.8, 0.7)}}}})


def test_judges_of_puts_the_primary_judge_first_and_escape_is_a_metric():
    responses = pd.DataFrame([{"method": "fspo", "seed": 0, "question": "q", "grade": "CORRECT", "correct": 1.0,
                               "incorrect": 0.0, "not_attempted": 0.0, "answer_f1": 1.0, "format_rate": 1.0,
                               "sentences": n, "response_tokens": 5, "near_duplicates": 0,
                               "supported@embedding": 0, "unsupported@embedding": 1, "checkable@embedding": 1,
                               "supported@kb": k, "unsupported@kb": 0, "checkable@kb": k} for n, k in ((1, 0), (2, 1))])
    assert judges_of(responses) == ["embedding", "kb"]
    assert judges_of(responses, "kb") == ["kb", "embedding"]
    assert judges_of(responses, "missing") == ["embedding", "kb"]
    cells = metric_cells(responses).set_index("metric")
    assert cells.loc["no_checkable@kb", "num"] == 1.0 and cells.loc["no_checkable@kb", "den"] == 2
    assert cells.loc["no_checkable@embedding", "num"] == 0.0


# --- sentences made from the numbers -------------------------------------------------------------------------------

def _row(metric, method, diff, low, high):
    return {"metric": metric, "method": method, "baseline": "grpo", "diff": diff, "low": low, "high": high}


def _summary(matched_kb=(-0.031, -0.094, 0.029), rates=None):
    rates = rates or {"kb": (0.768, 0.819), "embedding": (0.323, 0.451)}
    methods = [{"metric": f"step_hallucination@{j}", "method": m, "mean": v, "low": v, "high": v}
               for j, (f, g) in rates.items() for m, v in (("fspo", f), ("grpo", g))]
    methods += [{"metric": "accuracy", "method": m, "mean": 0.11, "low": 0.1, "high": 0.12} for m in ("fspo", "grpo")]
    stats_ = {"judges": list(rates), "methods": methods, "reader": {"primary": "kb"},
              "differences": [_row("step_hallucination@kb", "fspo", -0.05, -0.085, -0.016),
                              _row("step_hallucination@embedding", "fspo", -0.128, -0.169, -0.089)],
              "matched_length": [{"judge": "kb", "method": "fspo", "diff": matched_kb[0], "low": matched_kb[1],
                                  "high": matched_kb[2]},
                                 {"judge": "embedding", "method": "fspo", "diff": 0.009, "low": -0.067,
                                  "high": 0.081}]}
    return {"report": {"order": ["grpo", "fspo"]}, "statistics": stats_,
            "goal": {"target": ">= 20% lower step hallucination, accuracy within 2 points"}}


def test_a_drop_smaller_at_matched_length_is_not_resolved_not_gone():
    result = verdict(_summary())
    assert "disappears at matched length" not in result["headline"]  # the sentence the report used to write
    assert "not resolved under any judge (kb judge -3.1 [-9.4, +2.9] against -5.0 raw)" in result["headline"]
    gone = verdict(_summary(matched_kb=(0.004, -0.05, 0.06)))
    assert "its drop in step hallucination disappears at matched length" in gone["headline"]


def test_preset_target_under_every_judge_and_the_answer_changes_with_it():
    lines = verdict(_summary())["lines"]
    target = next(line for line in lines if line.startswith("Preset target"))
    # kb: 1 - 0.768 / 0.819 = 6.2% (not met); embedding: 1 - 0.323 / 0.451 = 28.4% (met)
    assert "kb judge (primary): not met (relative drop 6.2%" in target
    assert "embedding judge: met (relative drop 28.4%" in target
    assert target.endswith("The answer changes with the judge: met under the embedding judge only.")
    same = verdict(_summary(rates={"kb": (0.3, 0.45), "embedding": (0.3, 0.45)}))["lines"]
    assert "changes with the judge" not in next(line for line in same if line.startswith("Preset target"))


def test_question_b_lists_the_arms_more_right_under_each_judge_primary_first():
    rows = [{"arm": "grpo+4x", "answer": "one judge", "judges": [
        {"judge": "embedding", "more_right": True}, {"judge": "kb", "more_right": False}]},
            {"arm": "fspo+4x", "answer": "no", "judges": [
                {"judge": "embedding", "more_right": False}, {"judge": "kb", "more_right": True}]}]
    text = more_right_lead(rows, "kb")
    assert "kb judge (primary): fspo+4x; embedding judge: grpo+4x. The answer changes with the judge." in text
    assert more_right_lead(rows).count("judge by judge") == 0  # without a primary judge, the first registration's


def test_plain_words_are_made_from_the_numbers():
    differences = [_row("unsupported_per_response@embedding", "grpo+4x", -0.24, -0.44, -0.04),
                   _row("supported_per_response@embedding", "grpo+4x", -0.02, -0.15, 0.10),
                   _row("unsupported_per_response@embedding", "fspo", -0.48, -0.57, -0.38),
                   _row("supported_per_response@embedding", "fspo", -0.29, -0.40, -0.17),
                   _row("step_hallucination@embedding", "binary", -0.052, -0.119, 0.014)]
    summary = {"report": {"order": ["grpo", "fspo", "grpo+4x", "binary"]},
               "statistics": {"judges": ["embedding"], "differences": differences}}
    text = plain_words(summary)
    # the old sentences were false on these numbers
    assert "No arm writes fewer unsupported sentences without also writing fewer supported ones" not in text
    assert "embedding judge (primary): grpo+4x." in text
    assert "binary -5.2 [-11.9, +1.4] (embedding): no judge resolves a change" in text
    assert "leave step hallucination where GRPO has it" not in text
    none = plain_words({**summary, "statistics": {"judges": ["embedding"], "differences": differences[2:]}})
    assert "embedding judge (primary): none." in none


def test_the_committed_readme_no_longer_writes_the_overclaims():
    readme = (ROOT / "README.md").read_text()
    for old in ("No arm writes fewer unsupported sentences without also writing fewer supported ones",
                "its drop in step hallucination disappears at matched length",
                "`ternary` and `binary` leave step hallucination where GRPO has it"):
        assert old not in readme
    validity = json.loads((ROOT / "results/study/judge_validity.json").read_text())
    assert validity["sets"]["audit"]["judges"]["kb"]["agree"] > validity["sets"]["audit"]["judges"]["kb"]["constant"]
    assert "## How far each judge agrees with people" in (ROOT / "results/study/summary.md").read_text()[:6000]
