"""Atomic claims: split a response's sentences into checkable statements and find them again.

RLFH and KLCF reward individual statements, not sentences. A `ClaimExtractor` turns each
sentence into a list of atomic statements; `locate_claim` finds where a statement's content
ends inside its sentence, so a reward can be placed on that token. Statements that cannot be
located are reported (the published RLFH code dropped them silently).

The rule-based extractor here needs no model: it splits sentences at clause boundaries. Model-
based extractors subclass `ClaimExtractor` and implement `extract`.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

from fspo_lite.text import STOPWORDS

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


CLAIM_PROMPT = (
    "Split the sentence below into atomic facts: short statements that each say exactly one thing and "
    "can be checked on their own. Repeat names instead of pronouns. Write one fact per line, each line "
    "starting with \"- \". If the sentence states no fact (a plan, a question, a remark about the "
    "reasoning), write only NONE.\n\nSentence: {sentence}"
)
"""The extraction prompt (one sentence per request; docs/verifiers.md shows it with an example)."""

_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)(?:```|$)", re.DOTALL)
_MARKER = re.compile(
    r"^\s*(?:[-*•·+]\s*|\(?\d{1,3}[.):](?=\s)\s*|\(?[a-h][.)]\s+|(?:fact|claim|statement)\s*\d*\s*[:.)-]\s*)",
    re.IGNORECASE,
)
_NONE_REPLY = re.compile(r"^\W*(none|no facts?|no claims?|n/?a|nothing)\W*$", re.IGNORECASE)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_JSON_KEYS = ("claims", "facts", "statements", "atomic_facts", "claim", "fact", "text", "statement")


def _json_body(text: str) -> str | None:
    """The JSON part of a reply: all of it when it opens with [ or {, or what follows "...:" on a preamble."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        return stripped
    preamble = re.match(r"[^\n\[\]{}]{0,200}:\s*(?=[\[{])", stripped)
    return stripped[preamble.end():] if preamble else None


def _unquote(raw: str) -> str:
    try:
        return json.loads(f'"{raw}"')
    except json.JSONDecodeError:
        return raw


def _from_json(text: str) -> list[str] | None:
    """Strings of a JSON list/object reply; the closed strings of a truncated one; None if not JSON."""
    body = _json_body(text)
    if body is None:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:  # cut off mid-way: keep the strings that were closed
        strings = [_unquote(s) for s in _QUOTED.findall(body)]
        return [s for s in strings if s.lower() not in _JSON_KEYS]
    return _json_strings(value)


def _json_strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _json_strings(v)]
    if isinstance(value, dict):
        for key in _JSON_KEYS:
            if key in value:
                return _json_strings(value[key])
        return [s for v in value.values() for s in _json_strings(v)]
    return []


def _from_lines(text: str) -> list[str]:
    """Items of a bulleted/numbered list; a reply without list markers is split into sentences."""
    from fspo_lite.text import sentence_spans

    lines = [line.strip() for line in text.splitlines() if line.strip()]
    marked = [line for line in lines if _MARKER.match(line)]
    if not marked:
        return [text[s:e] for s, e in sentence_spans(" ".join(lines))]
    return [_strip_markers(line) for line in marked]


def _strip_markers(line: str) -> str:
    """'* Fact 1: Gold is a metal' -> 'Gold is a metal' (markers may be stacked)."""
    while (match := _MARKER.match(line)) and match.end() > 0:
        line = line[match.end():]
    return line


def parse_claims(reply: str | None) -> list[str] | None:
    """The atomic facts in an extractor's reply, or None when the reply is unusable.

    Accepts "- " / "* " / "1." lists, JSON lists or objects (also inside ``` fences, also cut
    off mid-way), and plain prose (split into sentences). A NONE reply gives []. Items are
    stripped of quotes and markers, items without two content words are dropped, and repeats
    (ignoring case and final punctuation) are kept once. None for an empty reply or one from
    which nothing usable survives.
    """
    if not isinstance(reply, str) or not reply.strip():
        return None
    fenced = _FENCE.search(reply)
    text = (fenced.group(1) if fenced else reply).strip()
    if _NONE_REPLY.match(text):
        return []
    items = _from_json(text)
    if items is None:
        items = _from_lines(text)
    claims, seen = [], set()
    for item in items:
        claim = item.strip().strip("\"'`").strip()
        key = claim.lower().rstrip(" .;")
        if key.endswith(":") or len(content_words(claim)) < 2 or key in seen:
            continue  # a heading ("Here are the facts:"), a fragment, or a repeat
        seen.add(key)
        claims.append(claim)
    return claims or None


class LLMClaimExtractor(ClaimExtractor):
    """Atomic facts from a chat model (fspo_lite.scoring.llm backend) prompted with CLAIM_PROMPT.

    A reply that `parse_claims` cannot use (empty, only fragments) falls back to `fallback`
    (the rule-based extractor by default); `fallbacks` counts those sentences.
    """

    name = "llm"

    def __init__(self, chat_model, fallback: ClaimExtractor | None = None, max_new_tokens: int = 128,
                 prompt: str = CLAIM_PROMPT):
        self.chat_model = chat_model
        self.fallback = fallback or RuleBasedClaimExtractor()
        self.max_new_tokens = max_new_tokens
        self.prompt = prompt
        self.fallbacks = 0
        self.sentences_seen = 0

    def extract(self, sentences: Sequence[str]) -> list[list[str]]:
        result: list[list[str]] = [[] for _ in sentences]
        asked = [i for i, s in enumerate(sentences) if s and s.strip()]
        replies = self.chat_model.generate([self.prompt.format(sentence=sentences[i].strip()) for i in asked],
                                           max_new_tokens=self.max_new_tokens, temperature=0.0) if asked else []
        failed = []
        for i, reply in zip(asked, replies):
            claims = parse_claims(reply)
            if claims is None:
                failed.append(i)
            else:
                result[i] = claims
        if failed:
            for i, claims in zip(failed, self.fallback.extract([sentences[i] for i in failed])):
                result[i] = claims
        self.fallbacks += len(failed)
        self.sentences_seen += len(asked)
        return result


def build_claim_extractor(name: str = "rules", verifier_config=None) -> ClaimExtractor:
    """The extractor named by reward.claim_extractor: rules, or llm (the chat model that the verifier
    section's model / server_url settings name, as for the llm verifier; rules on unusable replies)."""
    if name == "rules":
        return RuleBasedClaimExtractor()
    if name == "llm":
        from fspo_lite.scoring.llm import ChatModelSettings, build_chat_model

        v = verifier_config
        chat = build_chat_model() if v is None else build_chat_model(v.model, ChatModelSettings.of(v))
        return LLMClaimExtractor(chat)
    raise ValueError(f"unknown claim extractor {name!r}; available: llm, rules")
