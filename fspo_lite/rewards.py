"""From sampled responses to rewards and token advantages: the reward dispatch.

Data flow: rollout -> response views (text + per-token character ranges) -> outcome reward
per response -> the method's reward (outcome, caution table, RLFH token rewards or KLCF
recall/precision; fspo_lite.methods) -> sentence verdicts from the verifier and the (N, C)
FSPO sentence mask (fspo_lite.verdicts). `advantages_from_scores` turns the result into token
advantages with the pure functions in `algos`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import algos
from .claims import ClaimExtractor, build_claim_extractor
from .data import QAExample
from .grading import Outcome, outcome_reward
from .llm import ChatModel
from .methods import METHODS, REWARD_METHODS, RewardBatch
from .methods.detail import build_relevance_judge, detail_bonus, detail_counts, relevance_bonus, relevance_messages
from .methods.klcf import RewardModel, build_reward_model, load_checklists
from .methods.rlfh import InformativenessScorer, RuleBasedInformativeness
from .verdicts import (ResponseView, SentenceVerdicts, response_views, sentence_count_metrics, sentence_mask,
                       step_factuality, step_scores, verify_sentences)
from .verifiers import Verifier


@dataclass
class ScoredRollouts:
    """Everything the advantage stage needs, plus metrics and per-response details for logs."""

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


@dataclass
class Judges:
    """What a reward method needs besides the verifier, built once per run (see build_judges)."""

    extractor: ClaimExtractor | None = None
    informativeness: InformativenessScorer | None = None
    checklists: dict[str, list[str]] | None = None
    reward_model: RewardModel | None = None
    relevance: ChatModel | None = None
    """The detail term's relevance judge (detail.relevance_judge), when its weight is not 0."""


def build_judges(config, checklists: dict[str, list[str]] | None = None) -> Judges:
    """The claim extractor, informativeness scorer, checklists and reward model that config.reward.method uses,
    and the relevance judge of the detail term when detail.relevance_weight is not 0."""
    source = parse_method(config.reward.method).source
    if source == "rlfh":
        judges = Judges(build_claim_extractor(config.reward.claim_extractor, config.verifier),
                        RuleBasedInformativeness(config.rlfh.crucial_overlap))
    elif source == "klcf":
        judges = Judges(build_claim_extractor(config.reward.claim_extractor, config.verifier),
                        checklists=checklists if checklists is not None else load_checklists(config.klcf.checklist_path),
                        reward_model=build_reward_model(config.klcf.reward_model))
    else:
        judges = Judges()
    judges.relevance = build_relevance_judge(config.detail, config.verifier)
    return judges


def _relevance(examples, texts, outcomes, detail, judges):
    """P(relevant) per response from the relevance judge (None where its reply was neither Yes nor No) and the
    relevance term (0 for malformed responses)."""
    if judges.relevance is None:
        raise ValueError("detail.relevance_weight needs a relevance judge: set detail.relevance_judge=llm")
    probabilities = judges.relevance.yes_probability([relevance_messages(e.question, t)
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


def score_rollouts(examples: list[QAExample], rollout, tokenizer, config, verifier: Verifier | None, step: int = 0,
                   judges: Judges | None = None) -> ScoredRollouts:
    """Grade every response of a rollout under config.reward.method.

    `examples` holds one QAExample per response (each prompt's example repeated G times, groups
    contiguous). `step` drives scheduled rewards (caution.variant=fact_then_caution); `judges` holds
    the method's claim extractor, checklists and reward model (built from the config when None).
    """
    spec = parse_method(config.reward.method)
    method = METHODS[spec.source]
    if method.needs_verifier and verifier is None:
        raise ValueError(f"reward.method={config.reward.method} needs a verifier")
    judges = judges if judges is not None else build_judges(config)
    views = response_views(tokenizer, rollout.completion_ids, rollout.completion_mask, config.data.response_prefix)
    texts = [view.text for view in views]
    outcomes = [
        outcome_reward(example, text, config.reward.answer_metric, config.reward.format_penalty)
        for example, text in zip(examples, texts)
    ]
    batch = RewardBatch(examples, views, outcomes, rollout.completion_mask, config.reward.format_penalty,
                        config.rollout.group_size, step, config.train.steps)
    section = getattr(config, method.section) if method.section else None
    result = method.score(batch, section, verifier, judges)
    rewards, token_rewards, details, method_metrics = (result.rewards, result.token_rewards, result.details,
                                                       result.metrics)
    detail_on = bool(config.detail.weight or config.detail.precision_weight)
    if detail_on and verifier is None:
        raise ValueError("detail.weight / detail.precision_weight need a verifier (verifier.name) to judge sentences")
    verify = verifier is not None and (spec.flip or config.reward.log_step_factuality or detail_on)
    verdicts = (
        verify_sentences(examples, texts, verifier, config.verifier.threshold) if verify
        else [SentenceVerdicts() for _ in texts]
    )
    scores = step_scores(verdicts)
    bonuses, counts = _detail_rewards(texts, verdicts, outcomes, config.detail)
    detail_bonuses = bonuses
    relevance_on = bool(config.detail.relevance_weight)
    if relevance_on:
        relevance, relevance_bonuses = _relevance(examples, texts, outcomes, config.detail, judges)
        bonuses = bonuses + relevance_bonuses
        for item, probability in zip(details, relevance):
            item["relevance"] = probability
    if detail_on or relevance_on:
        rewards = rewards + bonuses
        if token_rewards is not None:  # token rewards (RLFH): the term sits on the final token, like the outcome
            last = (rollout.completion_mask.sum(dim=1) - 1).clamp(min=0)
            token_rewards[torch.arange(len(texts)), last] += bonuses * (rollout.completion_mask.sum(dim=1) > 0)
    if detail_on:
        for item, bonus, count in zip(details, detail_bonuses.tolist(), counts):
            item.update(detail_bonus=bonus, supported_distinct=count.supported_distinct)
    if spec.flip and config.reward.step_reward_lambda:
        rewards = rewards + config.reward.step_reward_lambda * torch.tensor(scores)
    mask = sentence_mask(views, verdicts, rollout.completion_ids.shape[1]) if spec.flip else None
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
        **method_metrics,
    }
    return ScoredRollouts(rewards, mask, outcomes, verdicts, views, metrics, token_rewards, details)


def advantages_from_scores(scored: ScoredRollouts, completion_mask: torch.Tensor, config) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) token advantages and the (B, T) bool tensor of FSPO-flipped tokens.

    Token rewards (RLFH) go through reward-to-go and group normalisation; scalar rewards through
    group advantages, broadcast over tokens and flipped by the FSPO sentence mask when there is one.
    """
    group_size, scale = config.rollout.group_size, config.train.scale_by_std
    if scored.token_rewards is not None:
        advantages = algos.token_reward_advantages(scored.token_rewards, completion_mask, group_size, scale)
        return advantages, torch.zeros_like(advantages, dtype=torch.bool)
    return algos.token_advantages(scored.rewards, completion_mask, group_size, scale, scored.sentence_mask)
