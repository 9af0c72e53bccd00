"""A detail-aware reward term: saying less must not pay (docs/methods.md, "Detail term").

A step-wise factuality signal (FSPO's flip, a precision reward) can be satisfied by writing fewer
checkable sentences. "Learning to Reason for Factuality" (Chen et al., arXiv 2508.05618) met the same
effect in online RL and added a detail term that grows with the number of supported claims,
logarithmically. fspo-lite adds the same idea on reasoning *sentences* judged against the question's
*evidence* (not atomic claims judged against retrieved documents):

    bonus = weight * log(1 + min(S, cap)) + precision_weight * S / (T + 1)

S: distinct supported reasoning sentences (near-duplicates count once, `text.near_duplicate_flags`), T: checked sentences (supported
or unsupported, duplicates included, so padding lowers the precision part). The bonus is added to the
reward of a well-formed response; a malformed one keeps the format penalty. Everything here is pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fspo_lite.scoring.llm import ChatModel, build_chat_model
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
RELEVANCE_JUDGES = ("llm",)
"""detail.relevance_judge values: llm = a chat model's P(Yes) (fspo_lite.scoring.llm.ChatModel.yes_probability)."""
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
    return build_chat_model(detail.relevance_model, verifier.server_url, verifier.server_model, verifier.api_key_env,
                            verifier.request_timeout, verifier.device, verifier.trust_remote_code, verifier.batch_size)
