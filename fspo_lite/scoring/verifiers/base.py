"""The verifier interface: (evidence, sentence) pairs in, support probabilities out.

A verifier answers "is this sentence supported by this evidence?" with P(supported) in [0, 1],
or None when the sentence holds nothing checkable (FSPO then leaves its tokens alone: mask 0).
Results are cached by a hash of the pair, so re-scoring the same sentence costs nothing, and a
pair repeated inside one call is scored once. Subclasses see only the uncached pairs.
"""

from __future__ import annotations

import hashlib
from typing import Sequence


def pair_key(evidence: str, sentence: str, context: str = "") -> str:
    text = f"{evidence}\x00{sentence}" + (f"\x00{context}" if context else "")
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


class Verifier:
    """Base class: subclasses implement `_score` on the pairs that are not cached yet."""

    name = "base"
    uses_context = False
    """True when `_score` also reads a context: text the sentence may repeat without claiming anything
    new (the question). Verifiers that ignore it are called without it and cache without it."""

    def __init__(self, cache_size: int = 200_000):
        self.cache: dict[str, float | None] = {}
        self.cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0

    def score(self, evidence: Sequence[str], sentences: Sequence[str],
              context: Sequence[str] | None = None) -> list[float | None]:
        """P(supported | evidence_i, sentence_i) for each pair, None where nothing is checkable.

        `context` (optional, one per pair) is text the sentence is allowed to restate, such as the
        question: verifiers with `uses_context` judge only what the sentence adds beyond it.
        """
        if len(evidence) != len(sentences):
            raise ValueError(f"{len(evidence)} evidence texts but {len(sentences)} sentences")
        if context is not None and len(context) != len(sentences):
            raise ValueError(f"{len(context)} contexts but {len(sentences)} sentences")
        contexts = [c or "" for c in context] if context is not None and self.uses_context else [""] * len(sentences)
        keys = [pair_key(e or "", s or "", c) for e, s, c in zip(evidence, sentences, contexts)]
        first_seen: dict[str, int] = {}
        for i, key in enumerate(keys):
            if key not in self.cache:
                first_seen.setdefault(key, i)  # a pair repeated within one call is scored once
        missing = list(first_seen.values())
        self.cache_hits += len(keys) - len(missing)
        self.cache_misses += len(missing)
        if missing:
            pairs = ([evidence[i] or "" for i in missing], [sentences[i] or "" for i in missing])
            scores = self._score(*pairs, [contexts[i] for i in missing]) if self.uses_context else self._score(*pairs)
            if len(self.cache) + len(missing) > self.cache_size:
                self.cache.clear()
            for i, value in zip(missing, scores):
                self.cache[keys[i]] = None if value is None else float(min(1.0, max(0.0, value)))
        return [self.cache[key] for key in keys]

    def _score(self, evidence: list[str], sentences: list[str]) -> list[float | None]:
        raise NotImplementedError


def batches(items: Sequence, size: int):
    """Consecutive slices of at most `size` items."""
    size = max(1, int(size))
    for start in range(0, len(items), size):
        yield items[start : start + size]


def labels_from_scores(scores: Sequence[float | None], threshold: float = 0.5) -> list[int]:
    """+1 supported (p > threshold), -1 unsupported, 0 not checkable."""
    return [0 if p is None else (1 if p > threshold else -1) for p in scores]
