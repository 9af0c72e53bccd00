"""The study's bootstrap (fspo_lite.stats) on tiny hand-computed inputs."""

import numpy as np
import pytest

from fspo_lite import stats


def test_seed_mean_is_the_mean_of_pooled_ratios():
    # seed 0: (1 + 3) / (2 + 4) = 2/3; seed 1: (0 + 1) / (1 + 1) = 1/2; seed 2 has nothing to judge: left out
    num = [[1, 3], [0, 1], [0, 0]]
    den = [[2, 4], [1, 1], [0, 0]]
    assert stats.seed_mean(num, den) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert np.isnan(stats.seed_mean([[0]], [[0]]))


def test_replicates_for_given_draws_by_hand():
    num = np.array([[1.0, 0.0], [1.0, 1.0]])
    den = np.ones((2, 2))
    questions = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    seeds = np.array([[0, 0], [0, 1], [1, 1]])
    # draw 0: question 0 twice, seed 0 twice -> 2/2 = 1; draw 1: question 1 twice, seeds 0 and 1 -> (0 + 1) / 2;
    # draw 2: both questions once, seed 1 twice -> 2/2 = 1
    assert stats.replicates(num, den, questions, seeds).tolist() == [1.0, 0.5, 1.0]


def test_zero_variance_gives_a_zero_width_interval():
    num, den = np.full((3, 5), 2.0), np.full((3, 5), 4.0)  # every seed and question: 0.5
    result = stats.bootstrap_mean(num, den, n_resamples=200, rng=np.random.default_rng(1))
    assert result == {"mean": 0.5, "low": 0.5, "high": 0.5, "seeds": 3, "questions": 5}


def test_question_clusters_widen_the_interval_against_an_iid_bootstrap():
    # one seed, two questions of 10 sentences each: question A all unsupported, question B all supported.
    # Clustered: a resample holds A twice (1/4), B twice (1/4) or both (1/2): rates 1, 0, 0.5 -> interval [0, 1].
    clustered = stats.bootstrap_mean([[10, 0]], [[10, 10]], n_resamples=4000, rng=np.random.default_rng(0))
    assert clustered["mean"] == 0.5 and (clustered["low"], clustered["high"]) == (0.0, 1.0)
    # i.i.d. over the 20 sentences (each its own cluster): Binomial(20, 1/2) / 20, 95% within about 0.5 +- 0.22
    iid = stats.bootstrap_mean([[1] * 10 + [0] * 10], [[1] * 20], n_resamples=4000, rng=np.random.default_rng(0))
    assert iid["mean"] == 0.5 and 0.25 <= iid["low"] <= 0.35 and 0.65 <= iid["high"] <= 0.75


def test_seed_resampling_spreads_the_interval():
    # two seeds that disagree completely (0 and 1 on every question): seed draws give 0, 0.5 or 1
    result = stats.bootstrap_mean([[0, 0], [1, 1]], [[1, 1], [1, 1]], n_resamples=4000,
                                  rng=np.random.default_rng(0))
    assert result["mean"] == 0.5 and (result["low"], result["high"]) == (0.0, 1.0)


def test_bootstrap_is_seeded_and_the_resample_count_is_a_knob():
    rng_values = np.random.default_rng(7).random((3, 6))
    a = stats.bootstrap_mean(rng_values, np.ones((3, 6)), n_resamples=300, rng=np.random.default_rng(3))
    b = stats.bootstrap_mean(rng_values, np.ones((3, 6)), n_resamples=300, rng=np.random.default_rng(3))
    c = stats.bootstrap_mean(rng_values, np.ones((3, 6)), n_resamples=301, rng=np.random.default_rng(3))
    assert a == b and a != c


def test_paired_difference_uses_the_same_questions():
    # method a = method b + 0.1 on every question; questions differ a lot. Paired: the difference is exactly 0.1
    # in every resample; an unpaired bootstrap (different question draws) would be wide.
    base = np.array([[0.0, 0.2, 0.9, 0.5]])
    paired = stats.paired_difference(base + 0.1, np.ones((1, 4)), base, np.ones((1, 4)), n_resamples=500,
                                     rng=np.random.default_rng(0))
    assert paired["diff"] == pytest.approx(0.1)
    assert paired["low"] == pytest.approx(0.1) and paired["high"] == pytest.approx(0.1)
    rng = np.random.default_rng(0)
    unpaired = (stats.replicates(base + 0.1, np.ones((1, 4)), stats.question_draws(4, 500, rng), np.zeros((500, 1), int))
                - stats.replicates(base, np.ones((1, 4)), stats.question_draws(4, 500, rng), np.zeros((500, 1), int)))
    low, high = stats.interval(unpaired)
    assert high - low > 0.3
    with pytest.raises(ValueError, match="same questions"):
        stats.paired_difference([[1, 1]], [[1, 1]], [[1]], [[1]])


def test_paired_relative_change():
    # all-attempt-wrong 40% -> 20% on every question: relative change -50% with no spread
    result = stats.paired_difference(np.full((2, 3), 20.0), np.ones((2, 3)), np.full((2, 3), 40.0), np.ones((2, 3)),
                                     n_resamples=100, relative=True)
    assert result["diff"] == -20.0 and result["relative"] == pytest.approx(-0.5)
    assert result["relative_low"] == pytest.approx(-0.5) and result["relative_high"] == pytest.approx(-0.5)


def test_interval_percentiles_and_nans():
    assert stats.interval(np.arange(101.0)) == pytest.approx((2.5, 97.5))
    assert stats.interval([np.nan, 1.0, 1.0]) == (1.0, 1.0)
    assert all(np.isnan(stats.interval([np.nan])))


def test_matched_difference_removes_a_length_effect():
    # Strata: responses with 1 sentence (k=0) and with 3 sentences (k=1). In both strata both methods have the
    # same rate (0.2 short, 0.6 long), but method a writes mostly short responses: its raw pooled rate is lower.
    # a: short 8 sentences (1.6 unsupported), long 3 sentences (1.8 unsupported) -> raw 3.4 / 11
    # b: short 2 sentences (0.4), long 12 sentences (7.2) -> raw 7.6 / 14
    num_a = np.array([[[1.6, 1.8]]])
    den_a = np.array([[[8.0, 3.0]]])
    num_b = np.array([[[0.4, 7.2]]])
    den_b = np.array([[[2.0, 12.0]]])
    raw = stats.seed_mean(num_a.sum(-1), den_a.sum(-1)) - stats.seed_mean(num_b.sum(-1), den_b.sum(-1))
    assert raw == pytest.approx(3.4 / 11 - 7.6 / 14)
    matched = stats.matched_difference(num_a, den_a, num_b, den_b, weights=[0.5, 0.5], n_resamples=50)
    # standardized to equal weights: both 0.5 * 0.2 + 0.5 * 0.6 = 0.4
    assert matched["a"] == pytest.approx(0.4) and matched["b"] == pytest.approx(0.4)
    assert matched["diff"] == pytest.approx(0.0) and matched["strata"] == 2
    assert matched["low"] == pytest.approx(0.0) and matched["high"] == pytest.approx(0.0)
    # a stratum only one method reaches is left out (weights renormalized over the shared strata)
    only_a = stats.matched_difference(np.array([[[1.0, 1.0]]]), np.array([[[2.0, 4.0]]]), np.array([[[1.0, 0.0]]]),
                                      np.array([[[4.0, 0.0]]]), weights=[0.3, 0.7], n_resamples=20)
    assert only_a["strata"] == 1 and only_a["diff"] == pytest.approx(0.5 - 0.25)
