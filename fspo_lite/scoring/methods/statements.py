"""A response's atomic statements: which sentence each belongs to and where its content ends.

RLFH and KLCF judge statements, not whole sentences. The sentences are those of everything the
response says, cut at its tags (both methods are format-agnostic, so broken tags lose nothing);
a `ClaimExtractor` splits each sentence into statements, and `locate_claim` finds the character
where a statement's content ends, so a reward can be placed on that token. A statement that
cannot be located keeps `end=None`: callers count it instead of dropping it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from fspo_lite.scoring.claims import ClaimExtractor, locate_claim
from fspo_lite.text import sentence_spans

_TAG = re.compile(r"</?(?:think|answer)>")


@dataclass
class Statement:
    """One atomic statement of a response."""

    text: str
    sentence: int
    """Index into the response's sentence spans."""
    end: int | None
    """Character position in the response where the statement's content ends; None when not located."""


def response_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans of everything the response says: the text is cut at its <think>/<answer> tags
    and each piece is split into sentences (reasoning, answer, and any text outside the blocks)."""
    spans: list[tuple[int, int]] = []
    start = 0
    for tag in [*_TAG.finditer(text), None]:
        end = tag.start() if tag else len(text)
        spans += [(start + s, start + e) for s, e in sentence_spans(text[start:end])]
        start = tag.end() if tag else end
    return spans


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
