"""Outcome rewards, sentence verification and the FSPO mask on real tokenizer output."""

import pytest
import torch

from fspo_lite.config import Config
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.grading import outcome_reward
from fspo_lite.scoring.rewards import score_rollouts
from fspo_lite.rollout.transformers_rollout import Rollout, completion_mask_from_ids
from fspo_lite.scoring.verdicts import response_views, sentence_mask, verify_sentences
from fspo_lite.scoring.verifiers import LexicalVerifier

EXAMPLE = QAExample("g", "What is the chemical symbol of gold?", ["Au"],
                    "Gold is a chemical element with the symbol Au and atomic number 79.")


@pytest.mark.parametrize(
    "text, reward, format_ok, correct",
    [("<think>Gold has the symbol Au.</think>\n<answer>Au</answer>", 1.0, True, True),
     ("<think>Gold.</think><answer>Ag</answer>", 0.0, True, False),
     ("The answer is Au.", -2.0, False, False),
     ("<think>x</think><answer>Au</answer> extra", -2.0, False, True)],
)
def test_outcome_reward(text, reward, format_ok, correct):
    outcome = outcome_reward(EXAMPLE, text)
    assert (outcome.reward, outcome.format_ok, outcome.correct) == (reward, format_ok, correct)


def test_partial_f1_reward_and_em_metric():
    example = QAExample("w", "Which university?", ["University of Wyoming"])
    text = "<think>x</think><answer>Wyoming University</answer>"
    assert outcome_reward(example, text).reward == pytest.approx(0.8)
    assert outcome_reward(example, text, answer_metric="em").reward == 0.0


def test_math_reward_uses_equivalence():
    example = QAExample("m", "1/2 + 1/2?", ["1"], task="math")
    assert outcome_reward(example, "<think>sum</think><answer>\\frac{1}{2}</answer>").reward == 0.0
    assert outcome_reward(example, "<think>sum</think><answer>\\frac{2}{2}</answer>").reward == 1.0
    assert outcome_reward(example, "<think>sum</think><answer>1.0</answer>").reward == 1.0


def test_verify_sentences_skips_math_missing_evidence_and_bad_format():
    verifier = LexicalVerifier()
    good = "<think>Gold has the symbol Au. Gold has atomic number 12.</think><answer>Au</answer>"
    examples = [EXAMPLE, QAExample("m", "q", ["1"], task="math"), QAExample("n", "q", ["a"]), EXAMPLE]
    texts = [good, good, good, "Gold has the symbol Au."]
    verdicts = verify_sentences(examples, texts, verifier)
    assert verdicts[0].labels == [1, -1]
    assert [v.labels for v in verdicts[1:]] == [[], [], []]


def _rollout_from_texts(tokenizer, texts):
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    mask = completion_mask_from_ids(ids, [tokenizer.eos_token_id])
    prompt = torch.ones(len(rows), 1, dtype=torch.long)
    return Rollout(prompt, prompt, ids, mask, texts, num_samples=len(texts))


def test_fspo_mask_marks_tokens_of_each_sentence(smol_tokenizer):
    # with response_prefix "<think>", the completion starts inside the reasoning block
    completion = "Gold has the symbol Au. Gold has atomic number 12.</think>\n<answer>Au</answer>"
    rollout = _rollout_from_texts(smol_tokenizer, [completion])
    views = response_views(smol_tokenizer, rollout.completion_ids, rollout.completion_mask, prefix="<think>")
    assert views[0].text == "<think>" + completion
    verdicts = verify_sentences([EXAMPLE], [views[0].text], LexicalVerifier())
    mask = sentence_mask(views, verdicts, rollout.completion_ids.shape[1])[0]
    tokens = rollout.completion_ids[0]
    supported = smol_tokenizer.decode(tokens[mask == 1])
    unsupported = smol_tokenizer.decode(tokens[mask == -1])
    assert supported.strip() == "Gold has the symbol Au."
    assert unsupported.strip() == "Gold has atomic number 12."
    assert (mask[rollout.completion_mask[0] == 0] == 0).all()


def test_completion_mask_stops_after_first_eos():
    ids = torch.tensor([[5, 6, 2, 2, 2], [5, 2, 7, 2, 2], [5, 6, 7, 8, 9]])
    assert completion_mask_from_ids(ids, [2]).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_score_rollouts_fspo_and_grpo(smol_tokenizer):
    texts = ["Gold has the symbol Au.</think>\n<answer>Au</answer>",
             "Gold has atomic number 12.</think>\n<answer>Ag</answer>"]
    rollout = _rollout_from_texts(smol_tokenizer, texts)
    config = Config()
    fspo = score_rollouts([EXAMPLE, EXAMPLE], rollout, smol_tokenizer, config, LexicalVerifier())
    assert fspo.rewards.tolist() == [1.0, 0.0]
    assert fspo.sentence_mask is not None and fspo.metrics["step_factuality"] == 0.5
    assert fspo.metrics["accuracy"] == 0.5 and fspo.metrics["format_rate"] == 1.0
    config.reward.method = "grpo"
    grpo = score_rollouts([EXAMPLE, EXAMPLE], rollout, smol_tokenizer, config, LexicalVerifier())
    assert grpo.sentence_mask is None and grpo.metrics["step_factuality"] == 0.5
    config.reward.method = "fspo"
    config.reward.step_reward_lambda = 0.5
    shaped = score_rollouts([EXAMPLE, EXAMPLE], rollout, smol_tokenizer, config, LexicalVerifier())
    assert shaped.rewards.tolist() == [1.5, -0.5]
    config.reward.method = "nonsense"
    with pytest.raises(ValueError, match="available"):
        score_rollouts([EXAMPLE, EXAMPLE], rollout, smol_tokenizer, config, LexicalVerifier())
