"""The caution reward: categories, the group-aware table (hand-computed), the four variants."""

import pytest

from fspo_lite.config import Config
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.methods.caution import (
    CORRECT, MALFORMED, PROCESS, UNKNOWN, WRONG, answer_category, caution_group_rewards, caution_phase,
    contains_answer,
)
from fspo_lite.scoring.rewards import score_rollouts
from fspo_lite.rollout.transformers_rollout import rollout_from_texts


@pytest.mark.parametrize(
    "categories, phase, expected",
    [
        # some response is correct: correct 1, process 0.5, Unknown and wrong 0
        ([CORRECT, PROCESS, UNKNOWN, WRONG], "both", [1.0, 0.5, 0.0, 0.0]),
        # none is correct: Unknown 1, everything attempted 0 (process correct too)
        ([PROCESS, UNKNOWN, WRONG, UNKNOWN], "both", [0.0, 1.0, 0.0, 1.0]),
        ([WRONG, WRONG, WRONG, WRONG], "both", [0.0, 0.0, 0.0, 0.0]),
        # malformed responses get the format penalty in every table
        ([CORRECT, MALFORMED, UNKNOWN, WRONG], "both", [1.0, -2.0, 0.0, 0.0]),
        ([MALFORMED, UNKNOWN], "both", [-2.0, 1.0]),
        # fact only: correctness, whatever the group did; Unknown never pays
        ([PROCESS, UNKNOWN, WRONG, MALFORMED], "fact", [0.5, 0.0, 0.0, -2.0]),
        ([CORRECT, PROCESS, UNKNOWN], "fact", [1.0, 0.5, 0.0]),
        # caution only: Unknown pays only when nobody is right; groups with a correct answer give 0 to all
        ([CORRECT, PROCESS, UNKNOWN, WRONG], "caution", [0.0, 0.0, 0.0, 0.0]),
        ([PROCESS, UNKNOWN, WRONG, MALFORMED], "caution", [0.0, 1.0, 0.0, -2.0]),
    ],
)
def test_caution_table(categories, phase, expected):
    assert caution_group_rewards(categories, phase) == expected


def test_caution_table_custom_values():
    rewards = caution_group_rewards([CORRECT, PROCESS, WRONG], "both", correct_reward=2.0, process_reward=0.25,
                                    format_penalty=-1.0)
    assert rewards == [2.0, 0.25, 0.0]
    assert caution_group_rewards([UNKNOWN, MALFORMED], "both", unknown_reward=0.7, format_penalty=-1.0) == [0.7, -1.0]


def test_caution_table_rejects_unknown_inputs():
    with pytest.raises(ValueError, match="unknown categories"):
        caution_group_rewards(["right"], "both")
    with pytest.raises(ValueError, match="phase"):
        caution_group_rewards([WRONG], "sometimes")


@pytest.mark.parametrize(
    "args, expected",
    [((True, True, False, 1.0, False), CORRECT),
     ((False, True, False, 1.0, False), MALFORMED),
     ((True, False, True, 0.0, False), UNKNOWN),
     ((True, False, False, 0.67, False), PROCESS),   # partial / alias form: F1 >= 0.5
     ((True, False, False, 0.4, True), PROCESS),     # gold answer stated in the reasoning
     ((True, False, False, 0.4, False), WRONG)],
)
def test_answer_category(args, expected):
    assert answer_category(*args, process_f1=0.5) == expected


def test_contains_answer_needs_whole_words():
    assert contains_answer("The symbol of gold is Au.", ["Au"])
    assert contains_answer("it is THE Pacific  ocean", ["Pacific Ocean"])
    assert not contains_answer("Australia is large.", ["Au"])
    assert not contains_answer("", ["Au"]) and not contains_answer("Au", [""]) and not contains_answer(None, ["x"])


def test_caution_phase_schedule():
    assert [caution_phase("fact_then_caution", s, None, 10) for s in (0, 4, 5, 9)] == ["fact", "fact", "caution", "caution"]
    assert [caution_phase("fact_then_caution", s, 2, 10) for s in (1, 2)] == ["fact", "caution"]
    assert caution_phase("both", 7, None, 10) == "both" and caution_phase("fact", 7, 1, 10) == "fact"
    with pytest.raises(ValueError, match="caution.variant"):
        caution_phase("bold", 0, None, 10)




GOLD = QAExample("w", "Which university is in Laramie?", ["University of Wyoming"],
                 "The University of Wyoming is a public university in Laramie, Wyoming.")


def test_score_rollouts_caution_groups_and_variants(smol_tokenizer):
    group_a = ["It is in Laramie.</think>\n<answer>University of Wyoming</answer>",     # correct
               "The University of Wyoming is there.</think>\n<answer>Wyoming</answer>",  # process (F1 0.5, reasoning)
               "Not sure.</think>\n<answer>Unknown</answer>",                             # unknown
               "no tags at all"]                                                         # malformed
    group_b = ["Hmm.</think>\n<answer>Unknown</answer>",
               "It is Harvard.</think>\n<answer>Harvard</answer>",
               "Think of Wyoming.</think>\n<answer>Wyoming State</answer>",                # wrong (see below)
               "Not sure.</think>\n<answer>I don't know</answer>"]
    rollout = rollout_from_texts(smol_tokenizer, group_a + group_b)
    config = Config()
    config.reward.method, config.rollout.group_size = "caution", 4
    scored = score_rollouts([GOLD] * 8, rollout, smol_tokenizer, config, verifier=None)
    # "Wyoming State" vs "University of Wyoming": F1 = 2 * (1/2 * 1/3) / (1/2 + 1/3) = 0.4 < 0.5 and the
    # reasoning does not state the full gold answer -> wrong
    assert [d["category"] for d in scored.details] == [CORRECT, PROCESS, UNKNOWN, MALFORMED,
                                                       UNKNOWN, WRONG, WRONG, UNKNOWN]
    assert scored.rewards.tolist() == [1.0, 0.5, 0.0, -2.0, 1.0, 0.0, 0.0, 1.0]
    assert scored.sentence_mask is None and scored.metrics["caution_phase"] == "both"
    assert scored.metrics["process_correct_rate"] == pytest.approx(1 / 8)
    config.caution.variant, config.caution.switch_step = "fact_then_caution", 3
    fact = score_rollouts([GOLD] * 8, rollout, smol_tokenizer, config, verifier=None, step=2)
    assert fact.metrics["caution_phase"] == "fact"
    assert fact.rewards.tolist() == [1.0, 0.5, 0.0, -2.0, 0.0, 0.0, 0.0, 0.0]
    caution = score_rollouts([GOLD] * 8, rollout, smol_tokenizer, config, verifier=None, step=3)
    assert caution.rewards.tolist() == [0.0, 0.0, 0.0, -2.0, 1.0, 0.0, 0.0, 1.0]
    config.reward.method = "caution+fspo"
    from fspo_lite.scoring.verifiers import LexicalVerifier

    flipped = score_rollouts([GOLD] * 8, rollout, smol_tokenizer, config, LexicalVerifier(), step=0)
    assert flipped.sentence_mask is not None and flipped.rewards.tolist() == fact.rewards.tolist()
