"""Hand-computed cases for every evaluation metric, and the parsers on malformed input."""

from __future__ import annotations

import math

import pytest

from fspo_lite.evaluation import metrics as M
from fspo_lite.evaluation.judges import closer_to_correct, is_cjk, overlap_f1, overlap_units
from fspo_lite.text import hotpot_em_f1

C, I, N = M.CORRECT, M.INCORRECT, M.NOT_ATTEMPTED


def test_mc1_best_must_rank_first_ties_go_to_best():
    assert M.mc1(-1.0, [-2.0, -3.0]) == 1.0
    assert M.mc1(-2.5, [-2.0, -3.0]) == 0.0
    assert M.mc1(-2.0, [-2.0]) == 1.0  # lm-eval's argmax keeps the first (the best answer) among ties
    assert M.mc1(-2.0, []) == 1.0


def test_mc2_normalised_probability_mass():
    # p = exp(ll): true {0.5, 0.25}, false {0.25}: 0.75 / 1.0
    value = M.mc2([math.log(0.5), math.log(0.25)], [math.log(0.25)])
    assert value == pytest.approx(0.75)
    # normalisation: scaling every probability by the same factor changes nothing
    assert M.mc2([math.log(0.5) - 50, math.log(0.25) - 50], [math.log(0.25) - 50]) == pytest.approx(0.75)
    # very long answers: log-likelihoods of -2000 would underflow exp() directly
    assert M.mc2([-2000.0], [-2000.0 - math.log(3)]) == pytest.approx(0.75)
    assert M.mc2([], [-1.0]) == 0.0 and M.mc2([-1.0], []) == 1.0


def test_simpleqa_grade_and_summary():
    assert M.simpleqa_grade(correct=True, not_attempted=False) == C
    assert M.simpleqa_grade(correct=False, not_attempted=False) == I
    assert M.simpleqa_grade(correct=False, not_attempted=True) == N
    # 2 correct, 1 incorrect, 1 not attempted of 4: correct 0.5, given attempted 2/3, F = 2*0.5*(2/3)/(0.5+2/3) = 4/7
    summary = M.simpleqa_summary([C, C, I, N])
    assert summary["correct"] == 0.5 and summary["incorrect"] == 0.25 and summary["not_attempted"] == 0.25
    assert summary["correct_given_attempted"] == pytest.approx(2 / 3)
    assert summary["f_score"] == pytest.approx(4 / 7)


def test_simpleqa_summary_edge_cases():
    assert M.simpleqa_summary([N, N]) == {"correct": 0.0, "incorrect": 0.0, "not_attempted": 1.0,
                                          "correct_given_attempted": 0.0, "f_score": 0.0}
    assert math.isnan(M.simpleqa_summary([])["f_score"])
    with pytest.raises(ValueError, match="unknown grades"):
        M.simpleqa_summary(["RIGHT"])


def test_decomposition_classes_and_percentages():
    assert M.decomposition_class([C, C, C]) == "all_correct"
    assert M.decomposition_class([C, I, N]) == "partial_correct"
    assert M.decomposition_class([C, N]) == "partial_correct"
    assert M.decomposition_class([N, I, I]) == "partial_not_attempt"
    assert M.decomposition_class([N, N]) == "all_not_attempt"
    assert M.decomposition_class([I, I]) == "all_attempt_wrong"
    table = M.decomposition([[C, C], [C, I], [N, I], [N, N], [I, I], [I, I], [C, C], [C, N]])
    assert table == {"all_correct": 25.0, "partial_correct": 25.0, "partial_not_attempt": 12.5,
                     "all_not_attempt": 12.5, "all_attempt_wrong": 25.0}
    assert sum(table.values()) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        M.decomposition_class([])


def test_pass_at_k_unbiased_estimator():
    assert M.pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert M.pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert M.pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert M.pass_at_k(4, 0, 4) == 0.0 and M.pass_at_k(4, 4, 1) == 1.0
    with pytest.raises(ValueError):
        M.pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        M.pass_at_k(4, 1, 5)


@pytest.mark.parametrize("reply, expected", [
    ("Yes", True), ("No.", False), ("no, the answer is fine", False), ("**Yes**, it is made up", True),
    ("Yes and no", None), ("I cannot tell", None), ("", None), (None, None), ("Nobody knows; yesterday", None),
    ("NO", False), ("\u00a0yes\u200b", True), ("x" * 10000 + " yes", True),
])
def test_parse_judgement(reply, expected):
    assert M.parse_judgement(reply) is expected


def test_halueval_correct_counts_both_or_neither_as_wrong():
    assert M.halueval_correct("Yes", True) and M.halueval_correct("No", False)
    assert not M.halueval_correct("No", True) and not M.halueval_correct("Yes", False)
    assert not M.halueval_correct("Yes. No.", True) and not M.halueval_correct("Maybe", False)


def test_em_f1_hand_computed():
    # prediction "the Eiffel tower Paris" -> "eiffel tower paris"; gold "Eiffel Tower" -> "eiffel tower"
    # overlap 2, precision 2/3, recall 1, F1 = 0.8
    assert hotpot_em_f1("the Eiffel tower Paris", "Eiffel Tower") == (0.0, pytest.approx(0.8))
    assert hotpot_em_f1("An Eiffel Tower!", ["Louvre", "Eiffel Tower"]) == (1.0, 1.0)
    assert hotpot_em_f1("yes", "no") == (0.0, 0.0)
    assert hotpot_em_f1(None, "x") == (0.0, 0.0)


def test_overlap_judge_rules():
    assert is_cjk("我没有上过大学。") and not is_cjk("I did not go to college.")
    assert overlap_units("北京大学") == ["北京", "京大", "大学"]
    assert overlap_units("The Moon, the moon!") == ["the", "moon", "the", "moon"]
    # bigrams: answer {我没,没有,有上,上过,过大,大学}; best "我没有上过大学" shares all 6 -> F1 1
    assert overlap_f1("我没有上过大学", "我没有上过大学。") == 1.0
    assert overlap_f1("", "abc") == 0.0
    assert closer_to_correct([0.6, 0.2], [0.5]) and not closer_to_correct([0.5], [0.5])
    assert not closer_to_correct([], [0.1]) and closer_to_correct([0.1], [])


def test_mean_skips_nan_and_none():
    assert M.mean([1.0, None, float("nan"), 0.0]) == 0.5
    assert math.isnan(M.mean([]))


def test_sentence_counts_and_ratio_of_sums():
    assert M.sentence_counts([1, -1, -1, 0]) == {"supported": 1, "unsupported": 2, "checkable": 3, "sentences": 4}
    assert M.sentence_counts([]) == {"supported": 0, "unsupported": 0, "checkable": 0, "sentences": 0}
    assert M.ratio_of_sums([1, 2], [2, 2]) == 0.75  # pooled, not the mean of 0.5 and 1.0
    assert math.isnan(M.ratio_of_sums([0, 0], [0, 0]))
