"""Rule-based claim extraction and locating claims inside their sentence."""

import pytest

from fspo_lite.scoring.claims import RuleBasedClaimExtractor, locate_claim


def test_rule_based_splits_clauses():
    claims = RuleBasedClaimExtractor().extract([
        "Gold has the symbol Au; it has atomic number 79.",
        "Paris is the capital of France, and Berlin is the capital of Germany.",
        "Let me think.",
        "",
    ])
    assert claims == [
        ["Gold has the symbol Au", "it has atomic number 79"],
        ["Paris is the capital of France", "Berlin is the capital of Germany"],
        [],
        [],
    ]


def test_locate_claim_returns_end_of_last_shared_word():
    text = "<think>Paris is the capital of France, and Berlin is big.</think>"
    sentence = (7, text.index("</think>"))
    assert text[: locate_claim("Paris is the capital of France", text, sentence)].endswith("France")
    assert text[: locate_claim("Berlin is big", text, sentence)].endswith("big")


@pytest.mark.parametrize("claim", ["", "it is", "Tokyo lies in Japan"])
def test_unlocatable_claims_give_none(claim):
    text = "Paris is the capital of France."
    assert locate_claim(claim, text, (0, len(text))) is None


def test_locate_claim_stays_inside_the_span():
    text = "Gold is yellow. Gold is heavy."
    assert locate_claim("Gold is heavy", text, (0, 15)) == text.index("Gold") + 4
