"""Verifier quality metrics, each against a value computed by hand."""

import math

import pytest

from fspo_lite.scoring.verifiers.quality import (accuracy, agreement_matrix, auroc, balanced_accuracy, best_threshold,
                                         cohen_kappa, fit_logistic_1d, predict, ranks)


def test_ranks_average_ties():
    assert ranks([0.3, 0.1, 0.3, 0.9]) == [2.5, 1.0, 2.5, 4.0]


def test_auroc_by_hand():
    # positives 0.9, 0.4; negatives 0.5, 0.1: pairs (0.9>0.5) (0.9>0.1) (0.4<0.5) (0.4>0.1) -> 3/4
    assert auroc([0.9, 0.5, 0.4, 0.1], [True, False, True, False]) == pytest.approx(0.75)


def test_auroc_ties_count_half_and_extremes():
    assert auroc([0.5, 0.5], [True, False]) == pytest.approx(0.5)
    assert auroc([0.2, 0.8, 0.9], [False, True, True]) == 1.0
    assert auroc([0.8, 0.2], [False, True]) == 0.0
    assert math.isnan(auroc([0.1, 0.2], [True, True]))


def test_balanced_accuracy_by_hand():
    labels = [True, True, True, False]
    predictions = [True, True, False, True]  # recall+ 2/3, recall- 0/1
    assert accuracy(predictions, labels) == pytest.approx(0.5)
    assert balanced_accuracy(predictions, labels) == pytest.approx(1 / 3)
    assert math.isnan(balanced_accuracy([True], [True]))


def test_predict_uses_strict_threshold():
    assert predict([0.5, 0.51, 0.2], 0.5) == [False, True, False]


def test_best_threshold_separates_training_data():
    scores = [0.1, 0.2, 0.35, 0.4, 0.8]
    labels = [False, False, False, True, True]
    threshold = best_threshold(scores, labels)
    assert 0.35 < threshold < 0.4
    assert balanced_accuracy(predict(scores, threshold), labels) == 1.0


def test_cohen_kappa_by_hand():
    # observed 3/4; chance: a says x 2/4, b says x 1/4 -> 0.5*0.25 + 0.5*0.75 = 0.5; kappa = 0.25/0.5
    assert cohen_kappa(["x", "x", "y", "y"], ["x", "y", "y", "y"]) == pytest.approx(0.5)
    assert cohen_kappa([1, 1], [1, 1]) == 1.0


def test_agreement_matrix_skips_missing():
    table = agreement_matrix({"a": [1, -1, None, 1], "b": [1, 1, 0, 1], "gold": [1, -1, 0, None]})
    assert table.loc["a", "b"] == pytest.approx(2 / 3)
    assert table.loc["a", "gold"] == pytest.approx(1.0)
    assert table.loc["b", "gold"] == pytest.approx(2 / 3)
    assert table.loc["b", "b"] == 1.0


def test_fit_logistic_recovers_parameters():
    import random

    rng = random.Random(0)
    xs = [rng.uniform(0, 1) for _ in range(3000)]
    ys = [rng.random() < 1 / (1 + math.exp(-8 * (x - 0.6))) for x in xs]
    midpoint, slope = fit_logistic_1d(xs, ys)
    assert midpoint == pytest.approx(0.6, abs=0.03)
    assert slope == pytest.approx(8, rel=0.2)
