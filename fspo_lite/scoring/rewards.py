"""Scoring a step: what each response earns under the run's scoring plan, and its token advantages.

`score_rollouts` walks the plan (fspo_lite.scoring.plan) in one direction, the order a training step needs:

1. the response views (verdicts.response_views: each response's text and the characters of each token);
2. the outcome of each response (fspo_lite.scoring.grading);
3. the verifier's verdicts on the reasoning sentences, when the plan needs them (verdicts.verify_sentences);
4. the reward of the plan's source, through the table `methods.METHODS` (`method_rewards`: outcome, caution table,
   RLFH token rewards, KLCF recall/precision, the controls, Binary RAR (which reads the verdicts), TruthRL);
5. the additive terms that rest on the verdicts (`total_rewards`: the detail and relevance terms of
   methods.detail, only when the plan turns them on, and FSPO's step reward) and the step's reward metrics;
6. the FSPO sentence mask, when the plan flips (verdicts.sentence_mask).

`advantages_from_scores` then turns the scores into token advantages (math in fspo_lite.algos).
Also here: `build_reward_tools` (what the source uses besides the verifier, built once per run by its METHODS entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fspo_lite import algos
from fspo_lite.data.examples import QAExample
from fspo_lite.rollout.transformers_rollout import Rollout
from fspo_lite.scoring.grading import Outcome, outcome_reward
from fspo_lite.scoring.methods import METHODS, MethodResult, RewardBatch, RewardTools
from fspo_lite.scoring.methods.detail import build_relevance_judge, detail_terms
from fspo_lite.scoring.plan import ScoringPlan, parse_method, relevance_on, scoring_plan
from fspo_lite.scoring.verdicts import (ResponseView, SentenceVerdicts, response_views, sentence_count_metrics,
                                        sentence_mask, step_factuality, step_scores, verify_sentences)
from fspo_lite.scoring.verifiers import Verifier


@dataclass
class ScoredRollouts:
    """A step's scored responses: everything the advantage stage needs, plus metrics and per-response details
    for logs (made by `score_rollouts`)."""

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


def build_reward_tools(config, checklists: dict[str, list[str]] | None = None) -> RewardTools:
    """What config.reward.method uses besides the verifier (its METHODS entry's `tools` builder; `checklists`:
    KLCF checklists already in hand), and the relevance judge when the relevance term is on (plan.relevance_on)."""
    tools = METHODS[parse_method(config.reward.method).source].tools(config, checklists)
    tools.relevance = build_relevance_judge(config.detail, config.verifier) if relevance_on(config.detail) else None
    return tools


def score_rollouts(examples: list[QAExample], rollout: Rollout, tokenizer, config, verifier: Verifier | None,
                   step: int = 0, tools: RewardTools | None = None, plan: ScoringPlan | None = None) -> ScoredRollouts:
    """Grade every response of a rollout under the run's scoring plan: the outcome, the verifier's verdicts on
    the reasoning sentences, the source's reward, the terms resting on the verdicts, and the FSPO sentence mask
    (the steps of the module docstring, in that order).

    `examples` holds one QAExample per response (each prompt's example repeated G times, groups contiguous);
    `step` drives scheduled rewards; `tools` are the source's RewardTools (built from the config when None);
    `plan` is the run's ScoringPlan (made from config.reward, config.detail and the verifier when None). `config`
    is the run's Config: each stage below is given only the sections it reads.
    """
    plan = plan if plan is not None else scoring_plan(config.reward, config.detail, verifier is not None)
    tools = tools if tools is not None else build_reward_tools(config)
    views = response_views(tokenizer, rollout.completion_ids, rollout.completion_mask, config.data.response_prefix)
    texts = [view.text for view in views]
    verdicts = (verify_sentences(examples, texts, verifier, config.verifier.threshold) if plan.verdicts
                else [SentenceVerdicts() for _ in views])
    lengths = rollout.completion_mask.sum(dim=1).tolist()
    ids = ([row[: int(n)] for row, n in zip(rollout.completion_ids.tolist(), lengths)]
           if tools.user_reward is not None else None)  # a user's reward functions read them, as TRL's do
    batch = RewardBatch(examples, views, grade(examples, views, config.reward), rollout.completion_mask,
                        config.reward.format_penalty, config.rollout.group_size, step, config.train.steps,
                        config.train.seed, verdicts if plan.verdicts else None, ids)
    result = method_rewards(batch, plan, getattr(config, plan.section) if plan.section else None, verifier, tools)
    total = total_rewards(batch, result, verdicts, plan, config.detail, tools.relevance)
    mask = sentence_mask(views, verdicts, rollout.completion_ids.shape[1]) if plan.flip else None
    return ScoredRollouts(total.rewards, mask, batch.outcomes, verdicts, views, total.metrics, total.token_rewards,
                          total.details)


def grade(examples: list[QAExample], views: list[ResponseView], reward) -> list[Outcome]:
    """The outcome of every response (grading.outcome_reward); `reward` is config.reward (answer_metric and
    format_penalty)."""
    return [outcome_reward(example, view.text, reward.answer_metric, reward.format_penalty)
            for example, view in zip(examples, views)]


def method_rewards(batch: RewardBatch, plan: ScoringPlan, section, verifier: Verifier | None,
                   tools: RewardTools) -> MethodResult:
    """The reward of the plan's source (its METHODS entry) for every response of `batch`, given only its config
    section (`section`: config.<plan.section>, None when the source has none) and the run's `tools`; the user's
    reward functions (tools.user_reward, fspo_lite.scoring.user_reward) when the run has them."""
    if tools.user_reward is not None:
        return tools.user_reward.score(batch, section, verifier, tools)
    return METHODS[plan.source].score(batch, section, verifier, tools)


def total_rewards(batch: RewardBatch, result: MethodResult, verdicts: list[SentenceVerdicts], plan: ScoringPlan,
                  detail, judge) -> MethodResult:
    """The source's result with the plan's additive terms on top, and the step's reward metrics.

    The detail and relevance terms (methods.detail.detail_terms; `detail` is config.detail, `judge` the relevance
    judge) go on every well-formed response, on its final token for token rewards (RLFH); when the plan has neither,
    nothing of methods.detail runs. With the FSPO flip, plan.step_reward_lambda x the step score goes on too.
    """
    outcomes, completion_mask = batch.outcomes, batch.completion_mask
    rewards, token_rewards, details = result.rewards, result.token_rewards, result.details
    scores = step_scores(verdicts)
    terms = detail_terms(batch, verdicts, detail, judge, plan) if plan.detail or plan.relevance else None
    if terms is not None:
        for item, extra in zip(details, terms.details):
            item.update(extra)
        rewards = rewards + terms.bonuses
        if token_rewards is not None:  # token rewards (RLFH): the terms sit on the final token, like the outcome
            last = (completion_mask.sum(dim=1) - 1).clamp(min=0)
            token_rewards[torch.arange(len(outcomes)), last] += terms.bonuses * (completion_mask.sum(dim=1) > 0)
    if plan.step_reward_lambda:
        rewards = rewards + plan.step_reward_lambda * torch.tensor(scores)
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
        **sentence_count_metrics(verdicts, [c.duplicates for c in terms.counts] if plan.detail else None),
        **(terms.metrics if terms is not None else {}),
        **result.metrics,
    }
    return MethodResult(rewards, token_rewards, details, metrics)


def advantages_from_scores(scored: ScoredRollouts, completion_mask: torch.Tensor, group_size: int,
                           scale_by_std: bool, strict: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) token advantages and the (B, T) bool tensor of FSPO-flipped tokens; `group_size` is
    rollout.group_size, `scale_by_std` train.scale_by_std, `strict` reward.strict_checkable (strict FSPO).

    Token rewards (RLFH) go through reward-to-go and group normalisation; scalar rewards through
    group advantages, broadcast over tokens and flipped by the FSPO sentence mask when there is one.
    """
    if scored.token_rewards is not None:
        advantages = algos.token_reward_advantages(scored.token_rewards, completion_mask, group_size, scale_by_std)
        return advantages, torch.zeros_like(advantages, dtype=torch.bool)
    return algos.token_advantages(scored.rewards, completion_mask, group_size, scale_by_std, scored.sentence_mask,
                                  strict=strict)
