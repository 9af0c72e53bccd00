"""A detail-aware reward term: saying less must not pay (docs/methods.md, "Detail term").

A step-wise factuality signal (FSPO's flip, a precision reward) can be satisfied by writing fewer
checkable sentences. "Learning to Reason for Factuality" (Chen et al., arXiv 2508.05618) met the same
effect in online RL and added a detail term that grows with the number of supported claims,
logarithmically. fspo-lite adds the same idea on reasoning *sentences* judged against the question's
*evidence* (not atomic claims judged against retrieved documents):

    bonus = weight * log(1 + min(S, cap)) + precision_weight * S / (T + 1)

S: distinct supported reasoning sentences (near-duplicates count once, `text.near_duplicate_flags`), T: checked sentences (supported
or unsupported, duplicates included, so padding lowers the precision part). The bonus is added to the
reward of a well-formed response; a malformed one keeps the format penalty.

A second, optional part asks a judge whether the response addresses the question at all (the relevance term,
detail.relevance_weight x P(Yes)). Neither is a reward source (methods.METHODS): both are additive terms that
the scoring plan (fspo_lite.scoring.plan) lists and puts on top of any source's reward, through the one entry
point `detail_terms`. Everything here is pure but the judge's call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fspo_lite.scoring.llm import ChatModel, ChatModelSettings, build_chat_model
from fspo_lite.text import near_duplicate_flags


@dataclass(frozen=True)
class DetailCounts:
    """One response's reasoning sentences as the detail term sees them."""

    supported_distinct: int
    """S: supported sentences that are not near-duplicates of an earlier sentence."""
    checked: int
    """T: sentences the verifier judged (+1 or -1), duplicates included."""
    duplicates: int
    """Sentences flagged as near-duplicates of an earlier one (any label)."""


def detail_counts(sentences: list[str], labels: list[int], threshold: float) -> DetailCounts:
    """Count S, T and the near-duplicates of one response from its sentences and verifier labels (+1/-1/0)."""
    if len(sentences) != len(labels):
        raise ValueError(f"{len(sentences)} sentences but {len(labels)} labels")
    flags = near_duplicate_flags(sentences, threshold)
    supported = sum(1 for label, duplicate in zip(labels, flags) if label > 0 and not duplicate)
    return DetailCounts(supported, sum(1 for label in labels if label != 0), sum(flags))


def detail_bonus(counts: DetailCounts, weight: float, cap: int, precision_weight: float = 0.0) -> float:
    """weight * log(1 + min(S, cap)) + precision_weight * S / (T + 1)."""
    if cap < 0:
        raise ValueError(f"detail.cap must be >= 0, got {cap}")
    s = counts.supported_distinct
    return weight * math.log1p(min(s, cap)) + precision_weight * s / (counts.checked + 1)


# ---- the relevance term: through a judge, when one is configured ------------------------------------------
RELEVANCE_SYSTEM = "You check whether a response is about the question it was given. Reply Yes or No."
RELEVANCE_PROMPT = ("Question: {question}\n\nResponse: {response}\n\nDoes the response address this question, "
                    "whether its answer is right or wrong (No if it talks about something else or dodges it)? "
                    "Reply Yes or No.")


def relevance_messages(question: str, response: str) -> list[dict]:
    """The chat the relevance judge answers with Yes or No: is `response` about `question`? Correctness is left
    to the outcome reward; the judge is asked about relevance only."""
    return [{"role": "system", "content": RELEVANCE_SYSTEM},
            {"role": "user", "content": RELEVANCE_PROMPT.format(question=question.strip(), response=response.strip())}]


def relevance_bonus(probability: float | None, weight: float) -> float:
    """weight * P(relevant); a judge reply with neither Yes nor No (None) adds nothing."""
    return 0.0 if probability is None else weight * probability


def build_relevance_judge(detail, verifier) -> ChatModel | None:
    """detail.relevance_judge=llm with a non-zero detail.relevance_weight: a chat model (the server of
    verifier.server_url when set, else detail.relevance_model locally, default the bundled SmolLM2); else None."""
    if not detail.relevance_weight or detail.relevance_judge is None:
        return None
    if detail.relevance_judge != "llm":
        raise ValueError(f"detail.relevance_judge must be null or llm, got {detail.relevance_judge!r}")
    return build_chat_model(detail.relevance_model, ChatModelSettings.of(verifier), verifier.batch_size)


def relevance_metrics(probabilities: list[float | None]) -> dict[str, float]:
    """Mean P(relevant) over the judge's readable replies (NaN when none was) and the share it could not read."""
    read = [p for p in probabilities if p is not None]
    return {"relevance_mean": sum(read) / len(read) if read else float("nan"),
            "relevance_unread_share": 1 - len(read) / len(probabilities) if probabilities else 0.0}


# ---- the one entry point: both terms for a step's responses -------------------------------------------------
@dataclass
class DetailTerms:
    """The detail and relevance terms of a step's responses (`detail_terms`)."""

    bonuses: torch.Tensor
    """(N,) the detail term (0 when it is off: both its weights are 0) plus the relevance term when that is on: what
    the caller adds to each response's reward when either term is on."""
    counts: list[DetailCounts]
    """Each response's S, T and near-duplicates with the detail term on (the step's duplicate metric reads them);
    empty when only the relevance term is on."""
    details: list[dict] = field(default_factory=list)
    """Per response: what to add to its logged details (relevance, detail_bonus, supported_distinct)."""
    metrics: dict[str, float] = field(default_factory=dict)
    """detail_bonus_mean with the detail term on; relevance_mean and relevance_unread_share with the relevance
    term on."""


def detail_terms(batch, verdicts: list, detail, judge: ChatModel | None, plan) -> DetailTerms:
    """The detail term of each response of `batch` (a methods.RewardBatch) from the verifier's `verdicts` on its
    reasoning sentences (verdicts.SentenceVerdicts), plus the relevance term from `judge` when `plan.relevance`;
    0 for malformed responses. `detail` is config.detail, `plan` the run's scoring.plan.ScoringPlan (its `detail`
    and `relevance` switches); ValueError when the relevance term is on and there is no judge."""
    texts, format_ok = batch.texts, [outcome.format_ok for outcome in batch.outcomes]
    counts = [detail_counts([text[a:b] for a, b in v.spans], v.labels, detail.duplicate_threshold)
              for text, v in zip(texts, verdicts)] if plan.detail else []
    detail_bonuses = torch.tensor([detail_bonus(c, detail.weight, detail.cap, detail.precision_weight) if ok else 0.0
                                   for c, ok in zip(counts, format_ok)] if plan.detail else [0.0] * len(texts),
                                  dtype=torch.float32)
    bonuses, details, metrics = detail_bonuses, [{} for _ in texts], {}
    if plan.relevance:
        if judge is None:
            raise ValueError("detail.relevance_weight needs a relevance judge: set detail.relevance_judge=llm")
        probabilities = judge.yes_probability([relevance_messages(example.question, text)
                                               for example, text in zip(batch.examples, texts)])
        bonuses = bonuses + torch.tensor([relevance_bonus(p, detail.relevance_weight) if ok else 0.0
                                          for p, ok in zip(probabilities, format_ok)], dtype=torch.float32)
        for item, probability in zip(details, probabilities):
            item["relevance"] = probability
    if plan.detail:
        for item, bonus, count in zip(details, detail_bonuses.tolist(), counts):
            item.update(detail_bonus=bonus, supported_distinct=count.supported_distinct)
        metrics["detail_bonus_mean"] = detail_bonuses.mean().item()
    if plan.relevance:
        metrics.update(relevance_metrics(probabilities))
    return DetailTerms(bonuses, counts, details, metrics)
