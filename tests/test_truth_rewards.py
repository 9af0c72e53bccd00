"""The controls (random, format) and the published truthfulness rewards (Binary RAR, TruthRL): every value computed
by hand, and each method trained through score_rollouts on real tokenized responses."""

import pytest
import torch

from fspo_lite.config import Config
from fspo_lite.data.examples import QAExample
from fspo_lite.rollout.transformers_rollout import rollout_from_texts
from fspo_lite.scoring.methods.truth import binary_rewards, coin_rewards, format_rewards, ternary_rewards
from fspo_lite.scoring.plan import parse_method, scoring_plan
from fspo_lite.scoring.rewards import advantages_from_scores, score_rollouts
from fspo_lite.scoring.verifiers import LexicalVerifier

GOLD = QAExample("q", "What is the capital of France?", ["Paris"], "Paris is the capital of France.")
TEXTS = [
    "Paris is the capital of France.</think>\n<answer>Paris</answer>",            # correct, supported
    "Lyon is a big city near the Alps.</think>\n<answer>Paris</answer>",          # correct, unsupported reasoning
    "I do not know this.</think>\n<answer>Unknown</answer>",                       # declines
    "Lyon is the capital.</think>\n<answer>Lyon</answer>",                         # wrong
    "no tags at all, Paris",                                                       # malformed
]


def test_format_reward_by_hand():
    assert format_rewards([True, False, True]) == [1.0, -2.0, 1.0]
    assert format_rewards([False], format_penalty=-0.5) == [-0.5]
    assert format_rewards([]) == []


def test_ternary_reward_by_hand():
    # correct +1, Unknown 0, wrong -1, malformed the penalty (even when "correct" or "unknown" is set)
    assert ternary_rewards([True, True, True, False, False], [True, False, False, True, False],
                           [False, True, False, False, True]) == [1.0, 0.0, -1.0, -2.0, -2.0]
    assert ternary_rewards([False], [False], [False], format_penalty=-1.0) == [-1.0]


def test_binary_reward_by_hand():
    labels = [[1, 1], [1, -1], [], [0, 0], [1], [-1]]
    correct = [True, True, True, True, False, False]
    assert binary_rewards([True] * 6, correct, labels) == [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    # malformed: the penalty whatever the labels
    assert binary_rewards([False, False], [True, False], [[1], [-1]], format_penalty=-3.0) == [-3.0, -3.0]


def test_coin_reward_is_a_fair_coin_fixed_by_seed_and_step():
    first = coin_rewards([True] * 8, seed=0, step=1)
    assert first == coin_rewards([True] * 8, seed=0, step=1)  # a resumed step draws the same coins
    assert set(first) <= {0.0, 1.0}
    assert first != coin_rewards([True] * 8, seed=0, step=2) or first != coin_rewards([True] * 8, seed=1, step=1)
    # malformed responses get the penalty; the coins of the others do not move
    mixed = coin_rewards([True, False] * 4, seed=0, step=1, format_penalty=-2.0)
    assert mixed[1::2] == [-2.0] * 4 and mixed[0::2] == first[0::2]
    # a fair coin: over 4,000 draws the share of ones is 0.5 within 5 standard errors (0.04)
    draws = [c for step in range(500) for c in coin_rewards([True] * 8, seed=3, step=step)]
    assert abs(sum(draws) / len(draws) - 0.5) < 0.04


def score(method, smol_tokenizer, seed=0, step=0):
    config = Config()
    config.reward.method, config.rollout.group_size, config.train.seed = method, 5, seed
    scored = score_rollouts([GOLD] * 5, rollout_from_texts(smol_tokenizer, TEXTS), smol_tokenizer, config,
                            LexicalVerifier(), step=step)
    return scored, config


def test_each_method_through_a_training_step(smol_tokenizer):
    scored, _ = score("format", smol_tokenizer)
    assert scored.rewards.tolist() == [1.0, 1.0, 1.0, 1.0, -2.0] and scored.sentence_mask is None
    scored, _ = score("ternary", smol_tokenizer)
    assert scored.rewards.tolist() == [1.0, 1.0, 0.0, -1.0, -2.0]
    scored, _ = score("binary", smol_tokenizer)
    labels = [v.labels for v in scored.verdicts]
    assert labels[0] == [1] and -1 in labels[1]  # the lexical verifier: supported / unsupported reasoning
    assert scored.rewards.tolist() == [1.0, 0.0, 0.0, 0.0, -2.0]
    assert [d["vetoed"] for d in scored.details] == [False, True, False, False, False]
    assert scored.metrics["binary_vetoed_share"] == 0.5  # one of the two correct answers lost its reward
    scored, config = score("random", smol_tokenizer, seed=4, step=2)
    assert scored.rewards.tolist() == coin_rewards([True] * 4 + [False], 4, 2)
    advantages, flipped = advantages_from_scores(scored, rollout_from_texts(smol_tokenizer, TEXTS).completion_mask,
                                                 5, True)
    assert not flipped.any() and advantages.shape[0] == 5


def test_ternary_and_binary_take_the_flip(smol_tokenizer):
    scored, _ = score("binary+fspo", smol_tokenizer)
    assert scored.sentence_mask is not None and (scored.sentence_mask[1] < 0).any()
    scored, _ = score("ternary+fspo", smol_tokenizer)
    assert scored.sentence_mask is not None


@pytest.mark.parametrize("name", ["random+fspo", "format+fspo"])
def test_the_controls_refuse_the_flip(name):
    with pytest.raises(ValueError, match="random, format take no FSPO flip"):
        parse_method(name)


def test_binary_needs_a_verifier_and_always_gets_verdicts():
    config = Config()
    config.reward.method, config.reward.log_step_factuality = "binary", False
    assert scoring_plan(config.reward, config.detail, True).verdicts
    with pytest.raises(ValueError, match="needs a verifier"):
        scoring_plan(config.reward, config.detail, False)
