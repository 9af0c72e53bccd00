"""From sampled responses to rewards and FSPO sentence masks.

Data flow: rollout -> response views (text + per-token character ranges) -> outcome reward
per response -> sentence labels from the verifier -> (N, C) sentence mask over completion
tokens. The trainer turns these into advantages with the pure functions in `algos`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .algos import step_score
from .align import spans_to_token_values, token_char_offsets
from .data import QAExample
from .grading import math_answers_equal
from .text import extract_answer, hotpot_em_f1, is_unknown, parse_response, sentence_spans
from .verifiers import Verifier, labels_from_scores


@dataclass
class ResponseView:
    """A response as the reward functions see it: prefix + completion text, and where each
    completion token sits in that text."""

    text: str
    offsets: list[tuple[int, int]]


def response_views(tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor, prefix: str = ""):
    """Decode each completion with per-token character ranges, shifted past the response prefix."""
    views = []
    for ids, length in zip(completion_ids.tolist(), completion_mask.sum(dim=1).tolist()):
        text, offsets = token_char_offsets(tokenizer, ids[: int(length)])
        shift = len(prefix)
        views.append(ResponseView(prefix + text, [(s + shift, e + shift) for s, e in offsets]))
    return views


@dataclass
class Outcome:
    """The graded final answer of one response."""

    reward: float
    format_ok: bool
    answer: str | None
    correct: bool
    f1: float
    unknown: bool


def grade_answer(example: QAExample, answer: str | None) -> tuple[bool, float]:
    """(correct, score in [0, 1]): EM and token F1 for QA, safe equivalence for math."""
    if answer is None:
        return False, 0.0
    if example.task == "math":
        correct = any(math_answers_equal(answer, gold) for gold in example.answers)
        return correct, float(correct)
    em, f1 = hotpot_em_f1(answer, example.answers)
    return bool(em), f1


def outcome_reward(example: QAExample, text: str, answer_metric: str = "auto", format_penalty: float = -2.0) -> Outcome:
    """FSPO's outcome reward: answer F1 (QA) or equivalence (math) when the tags are well formed,
    `format_penalty` (-2 in the reference) otherwise."""
    parsed = parse_response(text)
    answer = parsed.answer if parsed.format_ok else extract_answer(text)
    correct, f1 = grade_answer(example, answer)
    score = float(correct) if answer_metric == "em" else f1
    reward = score if parsed.format_ok else format_penalty
    return Outcome(reward, parsed.format_ok, answer, correct, f1, is_unknown(answer))


@dataclass
class SentenceVerdicts:
    """Verifier labels of one response's reasoning sentences (+1 supported, -1 not, 0 not checkable)."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    probabilities: list[float | None] = field(default_factory=list)


def reasoning_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences inside <think>...</think> (empty if there is no block)."""
    think = parse_response(text).think_span
    if think is None:
        return []
    start, end = think
    return [(start + s, start + e) for s, e in sentence_spans(text[start:end])]


def verify_sentences(
    examples: list[QAExample], texts: list[str], verifier: Verifier, threshold: float = 0.5,
    require_format: bool = True,
) -> list[SentenceVerdicts]:
    """Label the reasoning sentences of every response in one batched verifier call.

    Responses of math examples, without evidence, or (with require_format) with malformed tags
    get no verdicts, so their tokens keep mask 0 as in the FSPO reference.
    """
    verdicts = [SentenceVerdicts() for _ in texts]
    pairs_evidence, pairs_sentence, pairs_question, owners = [], [], [], []
    for index, (example, text) in enumerate(zip(examples, texts)):
        if example.task == "math" or not example.evidence:
            continue
        if require_format and not parse_response(text).format_ok:
            continue
        for span in reasoning_sentences(text):
            verdicts[index].spans.append(span)
            pairs_evidence.append(example.evidence)
            pairs_sentence.append(text[span[0] : span[1]])
            pairs_question.append(example.question)
            owners.append(index)
    if owners:
        probabilities = verifier.score(pairs_evidence, pairs_sentence, pairs_question)
        for owner, probability in zip(owners, probabilities):
            verdicts[owner].probabilities.append(probability)
    for verdict in verdicts:
        verdict.labels = labels_from_scores(verdict.probabilities, threshold)
    return verdicts


def sentence_mask(views: list[ResponseView], verdicts: list[SentenceVerdicts], width: int) -> torch.Tensor:
    """(N, width) tensor: +1/-1 on tokens of supported/unsupported sentences, 0 elsewhere."""
    mask = torch.zeros(len(views), width)
    for row, (view, verdict) in enumerate(zip(views, verdicts)):
        if verdict.spans:
            values = spans_to_token_values(view.offsets, verdict.spans, verdict.labels)
            mask[row, : len(values)] = torch.tensor(values, dtype=mask.dtype)
    return mask


def step_factuality(verdicts: list[SentenceVerdicts]) -> tuple[float, int]:
    """(share of verified sentences that are supported, number verified) over a batch."""
    verified = [label for v in verdicts for label in v.labels if label != 0]
    return (sum(1 for label in verified if label > 0) / len(verified) if verified else float("nan")), len(verified)


def step_scores(verdicts: list[SentenceVerdicts]) -> list[float]:
    return [step_score(v.labels) for v in verdicts]


@dataclass
class ScoredRollouts:
    """Everything the advantage stage needs, plus metrics and per-response details for logs."""

    rewards: torch.Tensor
    """(N,) scalar reward per response."""
    sentence_mask: torch.Tensor | None
    """(N, C) FSPO mask (+1/-1/0) or None when the method does not flip advantages."""
    outcomes: list[Outcome]
    verdicts: list[SentenceVerdicts]
    views: list[ResponseView]
    metrics: dict[str, float]


REWARD_METHODS = ("grpo", "fspo")


def score_rollouts(examples: list[QAExample], rollout, tokenizer, config, verifier: Verifier | None) -> ScoredRollouts:
    """Grade every response of a rollout under config.reward.method.

    `examples` holds one QAExample per response (each prompt's example repeated G times).
    """
    method = config.reward.method
    if method not in REWARD_METHODS:
        raise ValueError(f"unknown reward.method {method!r}; available: {', '.join(REWARD_METHODS)}")
    views = response_views(tokenizer, rollout.completion_ids, rollout.completion_mask, config.data.response_prefix)
    texts = [view.text for view in views]
    outcomes = [
        outcome_reward(example, text, config.reward.answer_metric, config.reward.format_penalty)
        for example, text in zip(examples, texts)
    ]
    rewards = torch.tensor([o.reward for o in outcomes], dtype=torch.float32)
    verify = verifier is not None and (method == "fspo" or config.reward.log_step_factuality)
    verdicts = (
        verify_sentences(examples, texts, verifier, config.verifier.threshold) if verify
        else [SentenceVerdicts() for _ in texts]
    )
    scores = step_scores(verdicts)
    if method == "fspo" and config.reward.step_reward_lambda:
        rewards = rewards + config.reward.step_reward_lambda * torch.tensor(scores)
    mask = sentence_mask(views, verdicts, rollout.completion_ids.shape[1]) if method == "fspo" else None
    factuality, verified = step_factuality(verdicts)
    metrics = {
        "reward_mean": rewards.mean().item(),
        "reward_std": rewards.std().item() if len(rewards) > 1 else 0.0,
        "accuracy": sum(o.correct for o in outcomes) / len(outcomes),
        "answer_f1": sum(o.f1 for o in outcomes) / len(outcomes),
        "format_rate": sum(o.format_ok for o in outcomes) / len(outcomes),
        "unknown_rate": sum(o.unknown for o in outcomes) / len(outcomes),
        "step_factuality": factuality,
        "verified_sentences": verified,
        "step_score_mean": sum(scores) / len(scores),
    }
    return ScoredRollouts(rewards, mask, outcomes, verdicts, views, metrics)
