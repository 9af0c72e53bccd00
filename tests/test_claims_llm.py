"""The LLM claim extractor: its reply parser on malformed output, and the rule-based fallback."""

import pytest

from fspo_lite.scoring.claims import LLMClaimExtractor, RuleBasedClaimExtractor, parse_claims


@pytest.mark.parametrize("reply, expected", [
    ("- Paris is the capital of France.\n- Paris lies on the Seine.",
     ["Paris is the capital of France.", "Paris lies on the Seine."]),
    ("1. Gold has symbol Au\n2) Gold has atomic number 79", ["Gold has symbol Au", "Gold has atomic number 79"]),
    ("Here are the atomic facts:\n* Fact 1: Tokyo is in Japan\n* Fact 2: Tokyo is a large city",
     ["Tokyo is in Japan", "Tokyo is a large city"]),
    ('```json\n["Paris is in France", "Berlin is in Germany"]\n```', ["Paris is in France", "Berlin is in Germany"]),
    ('Facts: {"claims": ["Ulm is in Germany", "Einstein was born in Ulm"]}', ["Ulm is in Germany", "Einstein was born in Ulm"]),
    ('[{"fact": "Mars has two moons"}, {"fact": "Mars is red"}]', ["Mars has two moons", "Mars is red"]),
    ('["Paris is in France", "Berlin is in Germ', ["Paris is in France"]),  # cut off mid-string
    ("```\n- Einstein was born in Ulm\n- Einstein was", ["Einstein was born in Ulm"]),  # unclosed fence, cut item
    ("- Gold is a metal\n- gold is a metal.\n- Gold is a metal", ["Gold is a metal"]),  # repeats
    ("Paris is in France. Berlin is in Germany.", ["Paris is in France.", "Berlin is in Germany."]),  # prose
    ("NONE", []),
    ("None.", []),
])
def test_parse_claims(reply, expected):
    assert parse_claims(reply) == expected


@pytest.mark.parametrize("reply", [None, "", "   \n", "- ok\n- a", "[1, 2]", "{}", "```\n```", 42])
def test_unusable_replies_give_none(reply):
    assert parse_claims(reply) is None


class ScriptedChat:
    """A chat model that replies from a list (records the prompts it got)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts = []

    def generate(self, prompts, max_new_tokens=256, temperature=0.0):
        self.prompts += prompts
        return [self.replies.pop(0) for _ in prompts]


def test_extractor_uses_replies_and_falls_back():
    chat = ScriptedChat(["- Gold has the symbol Au\n- Gold has atomic number 79", "```json\n[", "NONE"])
    extractor = LLMClaimExtractor(chat)
    sentences = ["Gold has the symbol Au and atomic number 79.",
                 "Paris is the capital of France, and Berlin is the capital of Germany.",
                 "Let me think.", ""]
    claims = extractor.extract(sentences)
    assert claims[0] == ["Gold has the symbol Au", "Gold has atomic number 79"]
    assert claims[1] == RuleBasedClaimExtractor().extract([sentences[1]])[0]  # fallback on the broken reply
    assert claims[2] == [] and claims[3] == []
    assert extractor.fallbacks == 1 and extractor.sentences_seen == 3
    assert len(chat.prompts) == 3 and "Sentence: Gold has the symbol Au" in chat.prompts[0]
