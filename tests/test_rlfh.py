"""RLFH: labels, the two reward formulas (hand-computed, ALGORITHMS section 4), placement on tokens,
and token rewards turned into advantages."""

import math

import pytest
import torch

from fspo_lite import algos
from fspo_lite.scoring.claims import ClaimExtractor, RuleBasedClaimExtractor
from fspo_lite.config import Config, RLFHConfig
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.methods.rlfh import (
    CORRECT, HEDGED_CORRECT, HEDGED_WRONG, VAGUE, WRONG, RuleBasedInformativeness, info_map, is_hedged,
    place_rewards, rlfh_feedback, sentence_info_reward, truth_label, truth_map, truth_reward,
)
from fspo_lite.scoring.methods.statements import Statement, response_sentences
from fspo_lite.scoring.rewards import advantages_from_scores, score_rollouts
from fspo_lite.rollout.transformers_rollout import rollout_from_texts
from fspo_lite.scoring.verdicts import response_views
from fspo_lite.scoring.verifiers import Verifier

V, I = truth_map(RLFHConfig()), info_map(RLFHConfig())


class FixedVerifier(Verifier):
    """P(supported) looked up by sentence; anything else is not checkable."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def _score(self, evidence, sentences):
        return [self.table.get(s) for s in sentences]


def test_default_maps_are_the_readme_recipe():
    assert V == {CORRECT: 0.45, HEDGED_CORRECT: 0.35, VAGUE: -1.0, HEDGED_WRONG: -1.5, WRONG: -1.7}
    assert I == {5: 1.25, 4: 1.0, 3: 0.75, 2: 0.1, 1: -0.2}
    assert RLFHConfig().truth_weight == 1.0 and RLFHConfig().info_weight == 1.2


@pytest.mark.parametrize(
    "label, info, expected",
    [(CORRECT, 5, 0.45 * 1.25),            # 0.5625
     (HEDGED_CORRECT, 4, 0.35 * 1.0),      # 0.35
     (VAGUE, 3, -1.0 * 0.75),              # -0.75
     (HEDGED_WRONG, 1, -1.5 * 0.2),        # -0.3: |I[1]| = 0.2, the sign comes from V only
     (WRONG, 2, -1.7 * 0.1)],              # -0.17
)
def test_truth_reward_per_statement(label, info, expected):
    assert truth_reward(label, info, V, I) == pytest.approx(expected)
    assert truth_reward(label, info, V, I, truth_weight=2.0) == pytest.approx(2 * expected)


@pytest.mark.parametrize(
    "infos, expected",
    [([5, 3], 1.2 * math.log(1.25 + 0.75 + 1)),        # ln(3) * 1.2 = 1.31833
     ([2], 1.2 * math.log(1.1)),                       # 0.11437
     ([1, 1, 1, 1, 1], 1.2 * math.log(0.1)),           # sum -1.0 is clamped to -0.9: 1.2 * ln(0.1) = -2.76310
     ([1, 1], 1.2 * math.log(0.6)),                    # sum -0.4 stays: 1.2 * ln(0.6) = -0.61298
     ([], 0.0)],
)
def test_info_reward_per_sentence(infos, expected):
    assert sentence_info_reward(infos, I, 1.2) == pytest.approx(expected)


@pytest.mark.parametrize(
    "probability, hedged, label",
    [(0.9, False, CORRECT), (0.9, True, HEDGED_CORRECT), (0.5, False, VAGUE), (0.3, True, VAGUE),
     (0.2, False, WRONG), (0.0, True, HEDGED_WRONG), (None, False, VAGUE), (None, True, VAGUE)],
)
def test_truth_label_thresholds(probability, hedged, label):
    assert truth_label(probability, hedged, correct_threshold=0.5, wrong_threshold=0.2) == label


def test_hedges_are_whole_words():
    words = RLFHConfig().hedge_words
    assert is_hedged("I think Paris is the capital", words)
    assert is_hedged("It is PROBABLY gold", words) and is_hedged("It may be gold", words)
    assert not is_hedged("Mighty rivers flow", words) and not is_hedged("He was born in May 1990", words)
    assert not is_hedged("", words)


def test_rule_based_informativeness_levels():
    scorer = RuleBasedInformativeness(crucial_overlap=0.5)
    question = "What is the capital city of France?"  # content words: capital, city, france
    levels = scorer.score(question, ["Paris"], [
        "Paris is the capital of France",      # states the gold answer
        "The capital city of France is old",   # 3 of 3 question words
        "France has many museums",             # 1 of 3
        "Germany has 83 million people",       # a number and a name
        "this is a nice thing to see",         # nothing
    ])
    assert levels == [5, 4, 3, 2, 1]


def test_place_rewards_on_synthetic_offsets():
    # text "<think>Ab cd. Ef.</think>": tokens "Ab", " cd", ".", " Ef", "." at these character ranges
    offsets = [(7, 9), (9, 12), (12, 13), (13, 16), (16, 17), (17, 25)]
    sentences = [(7, 13), (14, 17)]
    statements = [Statement("Ab", 0, 9), Statement("cd", 0, 12), Statement("lost", 1, None)]
    values, unlocated, unplaced = place_rewards(offsets, 6, sentences, statements, [1.0, 2.0, 4.0], [10.0, 20.0])
    assert values == [1.0, 2.0, 10.0, 0.0, 24.0, 0.0]  # the unlocated statement goes to its sentence end
    assert (unlocated, unplaced) == (1, 0)
    values, _, _ = place_rewards(offsets, 6, sentences, statements, [1.0, 2.0, 4.0], [10.0, 20.0], "sentence")
    assert values == [0.0, 0.0, 13.0, 0.0, 24.0, 0.0]
    values, _, _ = place_rewards(offsets, 6, sentences, statements, [1.0, 2.0, 4.0], [10.0, 20.0], "paragraph")
    assert values == [0.0, 0.0, 0.0, 0.0, 0.0, 37.0]
    with pytest.raises(ValueError, match="granularity"):
        place_rewards(offsets, 6, sentences, statements, [1.0, 2.0, 4.0], [10.0, 20.0], "word")


def test_rewards_with_no_token_are_counted_not_put_on_token_zero():
    offsets = [(7, 12), (12, 15)]
    values, unlocated, unplaced = place_rewards(offsets, 2, [(0, 5)], [Statement("x", 0, 3)], [1.5], [0.5])
    assert values == [0.0, 0.0] and (unlocated, unplaced) == (0, 2)


EVIDENCE = "Paris is the capital of France. Berlin is the capital of Germany."
EXAMPLE = QAExample("p", "What is the capital of France?", ["Paris"], EVIDENCE)
COMPLETION = "Paris is the capital of France, and Berlin is in Spain.</think>\n<answer>Paris</answer>"
TABLE = {"Paris is the capital of France": 0.9, "Berlin is in Spain": 0.1}




def _feedback(tokenizer, granularity="token", extractor=None):
    rollout = rollout_from_texts(tokenizer, [COMPLETION])
    view = response_views(tokenizer, rollout.completion_ids, rollout.completion_mask, "<think>")[0]
    length = int(rollout.completion_mask.sum())
    config = RLFHConfig(granularity=granularity)
    item = rlfh_feedback([EXAMPLE], [view], [length], extractor or RuleBasedClaimExtractor(), FixedVerifier(TABLE),
                         RuleBasedInformativeness(), config)[0]
    return rollout, item


def test_token_rewards_land_where_statements_end(smol_tokenizer):
    rollout, item = _feedback(smol_tokenizer)
    assert [s.text for s in item.statements] == ["Paris is the capital of France", "Berlin is in Spain"]
    assert item.labels == [CORRECT, WRONG] and item.infos == [5, 2]
    truth = [0.45 * 1.25, -1.7 * 0.1]
    info = 1.2 * math.log(1.25 + 0.1 + 1)
    assert item.truth_rewards == pytest.approx(truth)
    assert item.info_rewards == pytest.approx([info, 0.0])  # the answer sentence "Paris" has no statement
    tokens = rollout.completion_ids[0]
    placed = {smol_tokenizer.decode(tokens[i]): v for i, v in enumerate(item.token_rewards) if v}
    assert placed == pytest.approx({" France": truth[0], " Spain": truth[1], ".": info})
    assert (item.unlocated, item.unplaced) == (0, 0)


def test_sentence_and_paragraph_granularity(smol_tokenizer):
    rollout, item = _feedback(smol_tokenizer, "sentence")
    nonzero = [(i, v) for i, v in enumerate(item.token_rewards) if v]
    assert len(nonzero) == 1 and smol_tokenizer.decode(rollout.completion_ids[0, nonzero[0][0]]) == "."
    total = 0.45 * 1.25 - 1.7 * 0.1 + 1.2 * math.log(2.35)
    assert nonzero[0][1] == pytest.approx(total)
    _, item = _feedback(smol_tokenizer, "paragraph")
    assert item.token_rewards[-1] == pytest.approx(total) and sum(map(abs, item.token_rewards[:-1])) == 0


class MadeUpExtractor(ClaimExtractor):
    def extract(self, sentences):
        return [["Tokyo lies in Japan"] if "Berlin" in s else [] for s in sentences]


def test_unlocated_statement_is_counted_and_kept(smol_tokenizer):
    rollout, item = _feedback(smol_tokenizer, extractor=MadeUpExtractor())
    assert item.unlocated == 1 and item.labels == [VAGUE]  # not in the table: nothing checkable
    end_token = [i for i, v in enumerate(item.token_rewards) if v]
    assert len(end_token) == 1 and smol_tokenizer.decode(rollout.completion_ids[0, end_token[0]]) == "."
    assert end_token[0] != 0


def test_response_sentences_cover_reasoning_and_answer():
    text = "<think>A b. C d.</think><answer>E f.</answer>"
    assert [text[s:e] for s, e in response_sentences(text)] == ["A b.", "C d.", "E f."]
    assert [("no tags. At all."[s:e]) for s, e in response_sentences("no tags. At all.")] == ["no tags.", "At all."]
    broken = "<think>Open only. Still open<answer>X</answer> trailing words"
    assert [broken[s:e] for s, e in response_sentences(broken)] == ["Open only.", "Still open", "X", "trailing words"]


def test_reward_to_go_and_group_normalisation():
    rewards = torch.tensor([[0.0, 1.0], [2.0, 5.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert algos.reward_to_go(rewards, mask).tolist() == [[1.0, 1.0], [2.0, 0.0]]
    # group of 2: returns 1, 1, 2 -> mean 4/3, sample std sqrt(1/3) = 0.57735
    advantages = algos.token_reward_advantages(rewards, mask, group_size=2)
    assert advantages.flatten().tolist() == pytest.approx([-0.57735, -0.57735, 1.15470, 0.0], abs=1e-4)
    centred = algos.token_reward_advantages(rewards, mask, group_size=2, scale_by_std=False)
    assert centred.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 2 / 3, 0.0])
    # two groups of one response are normalised separately
    separate = algos.token_reward_advantages(torch.tensor([[1.0, 1.0], [0.0, 3.0]]), torch.ones(2, 2), group_size=1)
    # returns [2, 1] and [3, 3]: means 1.5 and 3, stds 0.70711 and 0
    assert separate.flatten().tolist() == pytest.approx([0.70711, -0.70711, 0.0, 0.0], abs=1e-4)
    with pytest.raises(ValueError, match="group_size"):
        algos.token_reward_advantages(torch.zeros(3, 2), torch.ones(3, 2), group_size=2)


def test_score_rollouts_rlfh_clips_and_adds_final_terms(smol_tokenizer):
    rollout = rollout_from_texts(smol_tokenizer, [COMPLETION, "Berlin is in Spain."])
    config = Config()
    config.reward.method, config.rollout.group_size = "rlfh", 2
    config.rlfh.outcome_weight, config.rlfh.reward_clip = 1.0, 1.5
    scored = score_rollouts([EXAMPLE, EXAMPLE], rollout, smol_tokenizer, config, FixedVerifier(TABLE))
    lengths = rollout.completion_mask.sum(1).tolist()
    first = scored.token_rewards[0, : lengths[0]]
    # final token: outcome reward 1.0 (answer F1) on the EOS token; the sentence-end token's 1.0253 stays
    assert first[-1].item() == pytest.approx(1.0)
    second = scored.token_rewards[1, : lengths[1]]
    # malformed (no tags): -2 format penalty on the final token, clipped to -1.5
    assert second[-1].item() == pytest.approx(-1.5)
    assert scored.token_rewards.abs().max().item() <= 1.5
    assert scored.rewards.tolist() == pytest.approx(scored.token_rewards.sum(1).tolist())
    assert scored.metrics["rlfh_statements"] == 3 and scored.metrics["rlfh_unlocated"] == 0
    assert (scored.metrics["rlfh_correct_share"], scored.metrics["rlfh_wrong_share"]) == pytest.approx((1 / 3, 2 / 3))
    advantages, flipped = advantages_from_scores(scored, rollout.completion_mask, config.rollout.group_size,
                                                 config.train.scale_by_std)
    assert advantages.shape == rollout.completion_ids.shape and not flipped.any()
    assert (advantages[rollout.completion_mask == 0] == 0).all() and advantages.abs().sum() > 0


def test_statements_are_judged_beyond_the_question(smol_tokenizer):
    class Recorder(Verifier):
        uses_context = True

        def __init__(self):
            super().__init__()
            self.contexts = []

        def _score(self, evidence, sentences, context):
            self.contexts += context
            return [0.9] * len(sentences)

    recorder = Recorder()
    rollout = rollout_from_texts(smol_tokenizer, [COMPLETION])
    view = response_views(smol_tokenizer, rollout.completion_ids, rollout.completion_mask, "<think>")[0]
    rlfh_feedback([EXAMPLE], [view], [int(rollout.completion_mask.sum())], RuleBasedClaimExtractor(), recorder,
                  RuleBasedInformativeness(), RLFHConfig())
    assert recorder.contexts == [EXAMPLE.question] * 2
