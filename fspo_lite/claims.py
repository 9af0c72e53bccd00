"""Atomic claims: split a response's sentences into checkable statements and find them again.

RLFH and KLCF reward individual statements, not sentences. A `ClaimExtractor` turns each
sentence into a list of atomic statements; `locate_claim` finds where a statement's content
ends inside its sentence, so a reward can be placed on that token. Statements that cannot be
located are reported (the published RLFH code dropped them silently).

The rule-based extractor here needs no model: it splits sentences at clause boundaries. Model-
based extractors subclass `ClaimExtractor` and implement `extract`.
"""

from __future__ import annotations

import re
from typing import Sequence

from .verifiers.lexical import STOPWORDS

# (?<!\s): a match may only start where a whitespace run starts; otherwise the regex retries inside
# long runs of spaces and takes quadratic time (minutes for 100k spaces of model output).
_CLAUSE_SPLIT = re.compile(
    r";\s*|(?<!\s)\s+;\s*|,\s+(?:and|but|while|whereas)\s+|(?<!\s)\s+(?:but|whereas)\s+|,\s+which\s+"
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class ClaimExtractor:
    """Interface: sentences in, a list of atomic statements per sentence out."""

    name = "base"

    def extract(self, sentences: Sequence[str]) -> list[list[str]]:
        raise NotImplementedError


def content_words(text: str) -> list[str]:
    """The lowercased words of `text` that are not stopwords."""
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in STOPWORDS]


class RuleBasedClaimExtractor(ClaimExtractor):
    """Split at clause boundaries (';', ', and', ', but', ', which'); keep clauses with >= `min_content_words`
    content words. A sentence with no such clause yields no statement."""

    name = "rules"

    def __init__(self, min_content_words: int = 2):
        self.min_content_words = min_content_words

    def extract(self, sentences: Sequence[str]) -> list[list[str]]:
        result = []
        for sentence in sentences:
            clauses = [c.strip(" ,.;:!?") for c in _CLAUSE_SPLIT.split(sentence or "")]
            result.append([c for c in clauses if len(content_words(c)) >= self.min_content_words])
        return result


def locate_claim(claim: str, text: str, span: tuple[int, int]) -> int | None:
    """Character position in `text` where `claim`'s content ends inside `span` (a sentence), or None.

    The position is the end of the right-most word of the sentence that also occurs among the
    claim's content words: the point by which the statement has been fully said.
    """
    start, end = span
    wanted = set(content_words(claim))
    if not wanted:
        return None
    found = None
    for match in _WORD.finditer(text, start, end):
        if match.group(0).lower() in wanted:
            found = match.end()
    return found


CLAIM_EXTRACTORS = {"rules": RuleBasedClaimExtractor}


def build_claim_extractor(name: str = "rules") -> ClaimExtractor:
    """The extractor named by reward.claim_extractor."""
    try:
        return CLAIM_EXTRACTORS[name]()
    except KeyError:
        raise ValueError(f"unknown claim extractor {name!r}; available: {', '.join(sorted(CLAIM_EXTRACTORS))}") from None
