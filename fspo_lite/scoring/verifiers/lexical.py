"""Lexical/entity support: the offline default verifier.

A sentence is scored by how much of its checkable content (numbers, names, content words)
appears in the evidence. Numbers and names weigh more than ordinary words, and a number or
name that the evidence does not contain pulls the score down hard: those are the typical
hallucinations of a small model ("born in 1887", "the capital is Sydney"). A sentence with no
content at all ("Let me think about this.") is not checkable and gets None.

With a context (the question), words the sentence shares with the question are not counted: a
sentence that restates the question claims nothing, and a claim is judged by what it adds.
On HaluEval-QA this is what separates a right answer from a hallucinated one (docs/verifiers.md).
"""

from __future__ import annotations

import re
from functools import lru_cache

from fspo_lite.scoring.verifiers.base import Verifier
from fspo_lite.text import STOPWORDS

_WORD_RE = re.compile(r"[^\W_]+(?:[.'’-][^\W_]+)*", re.UNICODE)
_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")


def _stem(word: str) -> str:
    for suffix in ("ies", "es", "s", "ed", "ing"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _key(token: str) -> str:
    """Lowercase, drop a possessive ("Saturn's" -> "saturn"), then stem."""
    lower = token.lower()
    if lower.endswith(("'s", "’s")):
        lower = lower[:-2]
    return _stem(lower)


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER_RE.findall(text)}


def content_units(sentence: str) -> tuple[set[str], set[str], set[str]]:
    """(numbers, name words, other content words) of a sentence, lowercased and lightly stemmed."""
    numbers = _numbers(sentence)
    names, words = set(), set()
    for index, match in enumerate(_WORD_RE.finditer(sentence)):
        token = match.group(0)
        lower = token.lower()
        if lower in STOPWORDS or _NUMBER_RE.fullmatch(token):
            continue
        # a capitalised word is a name unless it merely starts the sentence
        if token[0].isupper() and (index > 0 or not token.istitle()):
            names.add(_key(token))
        elif len(lower) > 2:
            words.add(_key(token))
    return numbers, names, words


@lru_cache(maxsize=4096)
def _evidence_index(evidence: str) -> tuple[frozenset[str], frozenset[str]]:
    words = frozenset(_key(m.group(0)) for m in _WORD_RE.finditer(evidence))
    return words, frozenset(_numbers(evidence))


class LexicalVerifier(Verifier):
    """Weighted recall of a sentence's numbers, names and content words in the evidence."""

    name = "lexical"
    uses_context = True

    def __init__(self, number_weight: float = 3.0, name_weight: float = 2.0, word_weight: float = 1.0,
                 missing_key_penalty: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.number_weight = number_weight
        self.name_weight = name_weight
        self.word_weight = word_weight
        self.missing_key_penalty = missing_key_penalty

    def _score_one(self, evidence: str, sentence: str, context: str = "") -> float | None:
        numbers, names, words = content_units(sentence)
        if context:  # only what the sentence adds beyond the question is a claim
            given_numbers, given_names, given_words = content_units(context)
            given = given_names | given_words
            numbers, names, words = numbers - given_numbers, names - given, words - given
        if not (numbers or names or len(words) >= (1 if context else 2)):
            return None
        evidence_words, evidence_numbers = _evidence_index(evidence)
        found_numbers = {n for n in numbers if n in evidence_numbers}
        found_names = {n for n in names if n in evidence_words}
        found_words = {w for w in words if w in evidence_words}
        total = self.number_weight * len(numbers) + self.name_weight * len(names) + self.word_weight * len(words)
        hit = (self.number_weight * len(found_numbers) + self.name_weight * len(found_names)
               + self.word_weight * len(found_words))
        score = hit / total
        missing_keys = (len(numbers) - len(found_numbers)) + (len(names) - len(found_names))
        return score * (self.missing_key_penalty ** missing_keys)

    def _score(self, evidence: list[str], sentences: list[str], contexts: list[str]) -> list[float | None]:
        return [self._score_one(e, s, c) for e, s, c in zip(evidence, sentences, contexts)]
