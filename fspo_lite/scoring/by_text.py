"""FSPO on plain text: the public functions a reader of the paper reaches for, from a response to token advantages.

    split_reasoning(response)                 -> the reasoning sentences FSPO checks
    verify_reasoning(response, evidence)      -> each of them with the verifier's label (+1, -1, 0)
    group_token_advantages(question, answers, evidence, responses, tokenizer, method)
                                              -> each response's tokens with their advantages under `method`

They run the training step's own code (fspo_lite.scoring.rewards: score_rollouts, advantages_from_scores) on
responses given as text, so what they show is what a training step computes. Responses are whole replies, from
the opening <think> to the closing </answer>.
"""

from __future__ import annotations

from dataclasses import dataclass

from fspo_lite.config import Config
from fspo_lite.config_load import apply_overrides
from fspo_lite.data.examples import QAExample
from fspo_lite.rollout.transformers_rollout import rollout_from_texts
from fspo_lite.scoring.rewards import advantages_from_scores, score_rollouts
from fspo_lite.scoring.verdicts import verify_sentences
from fspo_lite.scoring.verifiers import build_verifier
from fspo_lite.text import reasoning_sentences


def split_reasoning(response: str) -> list[str]:
    """The sentences inside the response's <think>...</think> block, in order ([] without a block)."""
    return [response[start:end] for start, end in reasoning_sentences(response)]


def verify_reasoning(response: str, evidence: str, question: str = "", verifier: str = "lexical",
                     threshold: float = 0.5) -> list[tuple[str, int]]:
    """Each reasoning sentence with the verifier's label: +1 supported by the evidence, -1 not, 0 not checkable.
    `verifier` is a verifier.name (docs/verifiers.md); `threshold` is verifier.threshold."""
    config = Config()
    apply_overrides(config, {"verifier.name": verifier, "verifier.threshold": threshold})
    example = QAExample("example", question, [], evidence)
    verdict = verify_sentences([example], [response], build_verifier(config.verifier), threshold,
                               require_format=False)[0]
    return [(response[start:end], label) for (start, end), label in zip(verdict.spans, verdict.labels)]


@dataclass
class ResponseAdvantages:
    """One response of a group: its tokens, each token's advantage, which tokens FSPO flipped, its reward and the
    labels of its reasoning sentences."""

    tokens: list[str]
    advantages: list[float]
    flipped: list[bool]
    reward: float
    sentence_labels: list[int]


def group_token_advantages(question: str, answers: list[str], evidence: str, responses: list[str], tokenizer,
                           method: str = "fspo", verifier: str = "lexical",
                           settings: dict | None = None) -> list[ResponseAdvantages]:
    """The token advantages a training step gives one group of responses to one question under `method` (a
    reward.method: 'grpo', 'fspo', ...), with the verifier `verifier`; `settings` are further config keys
    ({'reward.step_reward_lambda': 0.5}). `tokenizer` is the policy's (fspo_lite.load_tokenizer)."""
    config = Config()
    apply_overrides(config, {"reward.method": method, "verifier.name": verifier,
                             "rollout.group_size": len(responses), "data.response_prefix": "", **(settings or {})})
    example = QAExample("example", question, list(answers), evidence)
    rollout = rollout_from_texts(tokenizer, responses)
    scored = score_rollouts([example] * len(responses), rollout, tokenizer, config, build_verifier(config.verifier))
    advantages, flipped = advantages_from_scores(scored, rollout.completion_mask, len(responses),
                                                 config.train.scale_by_std, config.reward.strict_checkable)
    out = []
    for row, length in enumerate(rollout.completion_mask.sum(dim=1).tolist()):
        ids = rollout.completion_ids[row, : int(length)].tolist()
        out.append(ResponseAdvantages([tokenizer.decode([i]) for i in ids], advantages[row, : int(length)].tolist(),
                                      flipped[row, : int(length)].tolist(), float(scored.rewards[row]),
                                      scored.verdicts[row].labels))
    return out
