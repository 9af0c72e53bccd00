"""Sentence verdicts and FSPO sentence masks: the verifier's word on each reasoning sentence.

Data flow: rollout -> response views (prefix + completion text, and the characters of each
completion token) -> the verifier's verdict on each reasoning sentence (`verify_sentences`) ->
the (N, C) sentence mask over completion tokens (`sentence_mask`, +1 supported / -1 not / 0
elsewhere) that `algos.fspo_flip` applies to the advantages. The same verdicts give the logged
step factuality, the FSPO step score and the detail term's sentence counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fspo_lite.algos import step_score
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.align import spans_to_token_values, token_char_offsets
from fspo_lite.scoring.verifiers import Verifier, labels_from_scores
from fspo_lite.text import parse_response, reasoning_sentences


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
class SentenceVerdicts:
    """Verifier labels of one response's reasoning sentences (+1 supported, -1 not, 0 not checkable)."""

    spans: list[tuple[int, int]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    probabilities: list[float | None] = field(default_factory=list)


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


def sentence_count_metrics(verdicts: list[SentenceVerdicts], duplicates: list[int] | None) -> dict[str, float]:
    """Per-response means of supported, unsupported and checkable reasoning sentences, and of near-duplicates when
    they were counted (`duplicates`, by the detail term; None when it is off): a method that lowers the unsupported
    share by writing less shows it here."""
    n = max(len(verdicts), 1)
    metrics = {
        "supported_per_response": sum(v.labels.count(1) for v in verdicts) / n,
        "unsupported_per_response": sum(v.labels.count(-1) for v in verdicts) / n,
        "checkable_per_response": sum(sum(1 for x in v.labels if x != 0) for v in verdicts) / n,
    }
    if duplicates is not None:
        metrics["duplicate_sentences_per_response"] = sum(duplicates) / n
    return metrics
