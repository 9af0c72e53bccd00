"""The reward dispatch: what each response of a step earns under config.reward.method.

Two calls, on either side of the verifier's sentence verdicts (fspo_lite.scoring.verdicts), in the order a
training step makes them (fspo_lite.update.trainer.score_rollouts):

- `method_rewards`: the outcome reward of each response (fspo_lite.scoring.grading) and the method's reward,
  through the table of reward sources `methods.METHODS` (outcome, caution table, RLFH token rewards,
  KLCF recall/precision);
- `total_rewards`: the terms that rest on the verdicts (the detail term and relevance judge of
  fspo_lite.scoring.methods.detail, FSPO's step reward) added on top, and the step's reward metrics.

Also here: `parse_method` (a reward.method string taken apart), `build_reward_tools` (what the method
uses besides the verifier, built once per run by its METHODS entry), `check_verifier` (the method or the
detail term needs a verifier) and `verdicts_needed` (whether a step asks for sentence verdicts at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fspo_lite.config import ConfigError, validate_config
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.grading import Outcome, outcome_reward
from fspo_lite.scoring.methods import METHODS, REWARD_METHODS, MethodResult, RewardBatch, RewardTools
from fspo_lite.scoring.methods.detail import (build_relevance_judge, detail_bonus, detail_counts, relevance_bonus,
                                              relevance_messages)
from fspo_lite.scoring.verdicts import (ResponseView, SentenceVerdicts, sentence_count_metrics, step_factuality,
                                        step_scores)
from fspo_lite.scoring.verifiers import VERIFIERS, Verifier


@dataclass
class ScoredRollouts:
    """A step's scored responses: everything the advantage stage needs, plus metrics and per-response details
    for logs (made by `total_rewards`; fspo_lite.update.trainer.score_rollouts is the whole recipe)."""

    rewards: torch.Tensor
    """(N,) scalar reward per response (for RLFH: the sum of its token rewards)."""
    sentence_mask: torch.Tensor | None
    """(N, C) FSPO mask (+1/-1/0) or None when the method does not flip advantages."""
    outcomes: list[Outcome]
    verdicts: list[SentenceVerdicts]
    views: list[ResponseView]
    metrics: dict[str, float]
    token_rewards: torch.Tensor | None = None
    """(N, C) per-token rewards (RLFH); when set, advantages come from their reward-to-go."""
    details: list[dict] = field(default_factory=list)
    """Per-response method details for logs and the playground (caution category, RLFH statements, KLCF scores)."""


REWARD_SOURCES = tuple(METHODS)
"""The reward sources (methods.METHODS); REWARD_METHODS lists every valid reward.method."""


@dataclass(frozen=True)
class MethodSpec:
    """A reward.method string taken apart: where the reward comes from, and whether FSPO flips advantages."""

    source: str
    flip: bool


def parse_method(name: str) -> MethodSpec:
    """'fspo' -> (grpo, flip), 'caution+fspo' -> (caution, flip), 'rlfh' -> (rlfh, no flip), ..."""
    parts = {part.strip() for part in str(name).lower().split("+") if part.strip()}
    sources = sorted(parts - {"fspo"})
    source = sources[0] if len(sources) == 1 else ("grpo" if not sources else None)
    flip = "fspo" in parts
    if not parts or source not in METHODS or (flip and not METHODS[source].flips):
        raise ValueError(f"unknown reward.method {name!r}; available: {', '.join(REWARD_METHODS)} "
                         "(rlfh already rewards each statement, so it is not combined with the FSPO flip)")
    return MethodSpec(source, flip)


def check_settings(config) -> None:
    """Every check a run's settings get before any data or model loads: `validate_config` (ranges and words) and
    the names the registries hold (reward.method, verifier.name); ConfigError naming the key."""
    validate_config(config)
    try:
        parse_method(config.reward.method)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if config.verifier.name not in VERIFIERS:
        raise ConfigError(f"unknown verifier.name {config.verifier.name!r}; available: {', '.join(VERIFIERS)}")


def build_reward_tools(config, checklists: dict[str, list[str]] | None = None) -> RewardTools:
    """What config.reward.method uses besides the verifier (its METHODS entry's `tools` builder; `checklists`:
    KLCF checklists already in hand), and the detail term's relevance judge when detail.relevance_weight is not 0."""
    tools = METHODS[parse_method(config.reward.method).source].tools(config, checklists)
    tools.relevance = build_relevance_judge(config.detail, config.verifier)
    return tools


def _relevance(examples, texts, outcomes, detail, tools: RewardTools):
    """P(relevant) per response from the relevance judge (None where its reply was neither Yes nor No) and the
    relevance term (0 for malformed responses)."""
    if tools.relevance is None:
        raise ValueError("detail.relevance_weight needs a relevance judge: set detail.relevance_judge=llm")
    probabilities = tools.relevance.yes_probability([relevance_messages(e.question, t)
                                                     for e, t in zip(examples, texts)])
    bonuses = [relevance_bonus(p, detail.relevance_weight) if o.format_ok else 0.0
               for p, o in zip(probabilities, outcomes)]
    return probabilities, torch.tensor(bonuses, dtype=torch.float32)


def _detail_rewards(texts, verdicts, outcomes, detail):
    """The detail term of each response (methods.detail; 0 for malformed ones) and the per-response sentence
    counts it rests on. `detail` is config.detail."""
    counts = [detail_counts([text[a:b] for a, b in v.spans], v.labels, detail.duplicate_threshold)
              for text, v in zip(texts, verdicts)]
    bonuses = [detail_bonus(c, detail.weight, detail.cap, detail.precision_weight) if o.format_ok else 0.0
               for c, o in zip(counts, outcomes)]
    return torch.tensor(bonuses, dtype=torch.float32), counts


def relevance_metrics(probabilities: list[float | None]) -> dict[str, float]:
    """Mean P(relevant) over the judge's readable replies (NaN when none was) and the share it could not read."""
    read = [p for p in probabilities if p is not None]
    return {"relevance_mean": sum(read) / len(read) if read else float("nan"),
            "relevance_unread_share": 1 - len(read) / len(probabilities) if probabilities else 0.0}


def detail_term_on(config) -> bool:
    """Whether the detail term is on (detail.weight or detail.precision_weight not 0)."""
    return bool(config.detail.weight or config.detail.precision_weight)


def check_verifier(config, verifier: Verifier | None) -> None:
    """Raise when config.reward.method or the detail term needs a verifier and there is none."""
    if METHODS[parse_method(config.reward.method).source].needs_verifier and verifier is None:
        raise ValueError(f"reward.method={config.reward.method} needs a verifier")
    if detail_term_on(config) and verifier is None:
        raise ValueError("detail.weight / detail.precision_weight need a verifier (verifier.name) to judge sentences")


def verdicts_needed(config, verifier: Verifier | None) -> bool:
    """Whether a step asks the verifier for sentence verdicts: for the FSPO flip, the logged step factuality
    (reward.log_step_factuality) or the detail term; never without a verifier."""
    return verifier is not None and (parse_method(config.reward.method).flip or config.reward.log_step_factuality
                                     or detail_term_on(config))


def method_rewards(examples: list[QAExample], views: list[ResponseView], completion_mask: torch.Tensor, config,
                   verifier: Verifier | None, step: int, tools: RewardTools) -> tuple[RewardBatch, MethodResult]:
    """The outcome of every response and config.reward.method's reward for it (its METHODS entry, given only its
    config section): the batch the method saw and its result.

    `examples` holds one QAExample per response (each prompt's example repeated G times, groups contiguous);
    `step` drives scheduled rewards (caution.variant=fact_then_caution); `tools` are the run's RewardTools.
    """
    method = METHODS[parse_method(config.reward.method).source]
    outcomes = [
        outcome_reward(example, view.text, config.reward.answer_metric, config.reward.format_penalty)
        for example, view in zip(examples, views)
    ]
    batch = RewardBatch(examples, views, outcomes, completion_mask, config.reward.format_penalty,
                        config.rollout.group_size, step, config.train.steps)
    section = getattr(config, method.section) if method.section else None
    return batch, method.score(batch, section, verifier, tools)


def total_rewards(batch: RewardBatch, result: MethodResult, verdicts: list[SentenceVerdicts],
                  sentence_mask: torch.Tensor | None, config, tools: RewardTools) -> ScoredRollouts:
    """The method's rewards plus the terms that rest on the sentence verdicts, with the step's reward metrics.

    The detail term (and the relevance judge's term) goes on every well-formed response, on its final token
    for token rewards (RLFH); with the FSPO flip, reward.step_reward_lambda x the step score too.
    `sentence_mask` is the FSPO mask of the verdicts (None without the flip), carried along for the advantages.
    """
    spec = parse_method(config.reward.method)
    texts, outcomes, completion_mask = batch.texts, batch.outcomes, batch.completion_mask
    rewards, token_rewards, details = result.rewards, result.token_rewards, result.details
    detail_on = detail_term_on(config)
    scores = step_scores(verdicts)
    bonuses, counts = _detail_rewards(texts, verdicts, outcomes, config.detail)
    detail_bonuses = bonuses
    relevance_on = bool(config.detail.relevance_weight)
    if relevance_on:
        relevance, relevance_bonuses = _relevance(batch.examples, texts, outcomes, config.detail, tools)
        bonuses = bonuses + relevance_bonuses
        for item, probability in zip(details, relevance):
            item["relevance"] = probability
    if detail_on or relevance_on:
        rewards = rewards + bonuses
        if token_rewards is not None:  # token rewards (RLFH): the term sits on the final token, like the outcome
            last = (completion_mask.sum(dim=1) - 1).clamp(min=0)
            token_rewards[torch.arange(len(texts)), last] += bonuses * (completion_mask.sum(dim=1) > 0)
    if detail_on:
        for item, bonus, count in zip(details, detail_bonuses.tolist(), counts):
            item.update(detail_bonus=bonus, supported_distinct=count.supported_distinct)
    if spec.flip and config.reward.step_reward_lambda:
        rewards = rewards + config.reward.step_reward_lambda * torch.tensor(scores)
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
        **sentence_count_metrics(verdicts, [c.duplicates for c in counts]),
        **({"detail_bonus_mean": detail_bonuses.mean().item()} if detail_on else {}),
        **(relevance_metrics(relevance) if relevance_on else {}),
        **result.metrics,
    }
    return ScoredRollouts(rewards, sentence_mask, outcomes, verdicts, batch.views, metrics, token_rewards, details)
