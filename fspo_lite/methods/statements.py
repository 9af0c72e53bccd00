"""A response's atomic statements: which sentence each belongs to and where its content ends.

RLFH and KLCF judge statements, not whole sentences. The sentences come from the reasoning and
answer blocks (the whole text when the tags are missing, as both methods are format-agnostic);
a `ClaimExtractor` splits each sentence into statements, and `locate_claim` finds the character
where a statement's content ends, so a reward can be placed on that token. A statement that
cannot be located keeps `end=None`: callers count it instead of dropping it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..claims import ClaimExtractor, locate_claim
from ..text import parse_response, sentence_spans


@dataclass
class Statement:
    """One atomic statement of a response."""

    text: str
    sentence: int
    """Index into the response's sentence spans."""
    end: int | None
    """Character position in the response where the statement's content ends; None when not located."""


def response_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans of the <think> and <answer> blocks, or of the whole text when neither is found."""
    parsed = parse_response(text)
    blocks = [span for span in (parsed.think_span, parsed.answer_span) if span is not None]
    if not blocks:
        blocks = [(0, len(text))]
    return [(start + s, start + e) for start, end in blocks for s, e in sentence_spans(text[start:end])]


def extract_statements(texts: Sequence[str], extractor: ClaimExtractor) -> tuple[list[list[tuple[int, int]]], list[list[Statement]]]:
    """(sentence spans, statements) for every response, with one extractor call for the whole batch."""
    spans = [response_sentences(text) for text in texts]
    sentences = [text[s:e] for text, response_spans in zip(texts, spans) for s, e in response_spans]
    claims = extractor.extract(sentences) if sentences else []
    statements: list[list[Statement]] = []
    cursor = 0
    for text, response_spans in zip(texts, spans):
        found = []
        for index, span in enumerate(response_spans):
            for claim in claims[cursor + index]:
                found.append(Statement(claim, index, locate_claim(claim, text, span)))
        cursor += len(response_spans)
        statements.append(found)
    return spans, statements
