"""The offline lexical verifier and the verifier interface (cache, None for uncheckable)."""

import pytest

from fspo_lite.scoring.verifiers import LexicalVerifier, build_verifier, labels_from_scores
from fspo_lite.config import VerifierConfig

EVIDENCE = ("Gold is a chemical element with the symbol Au and atomic number 79. "
            "It was known to ancient Egyptians.")


def test_supported_beats_hallucinated():
    verifier = LexicalVerifier()
    supported, wrong_number, wrong_name = verifier.score(
        [EVIDENCE] * 3,
        ["Gold has the symbol Au.", "Gold has atomic number 47.", "Gold was discovered by Marie Curie."],
    )
    assert supported > 0.5 > max(wrong_number, wrong_name)


def test_nothing_checkable_is_none():
    assert LexicalVerifier().score([EVIDENCE, EVIDENCE], ["Let me think about this.", ""]) == [None, None]


def test_scores_are_probabilities_and_cached():
    verifier = LexicalVerifier()
    first = verifier.score([EVIDENCE], ["Gold is an element with atomic number 79."])
    assert 0.0 <= first[0] <= 1.0
    assert verifier.cache_misses == 1 and verifier.cache_hits == 0
    assert verifier.score([EVIDENCE], ["Gold is an element with atomic number 79."]) == first
    assert verifier.cache_hits == 1


def test_length_mismatch():
    with pytest.raises(ValueError):
        LexicalVerifier().score(["a"], [])


def test_labels_from_scores():
    assert labels_from_scores([0.9, 0.5, 0.1, None], threshold=0.5) == [1, -1, -1, 0]


def test_factory():
    assert isinstance(build_verifier(VerifierConfig(name="lexical")), LexicalVerifier)
    with pytest.raises(ValueError, match="available"):
        build_verifier(VerifierConfig(name="oracle"))


def test_possessives_match_the_plain_name():
    evidence = "Titan is the largest moon of Saturn."
    assert LexicalVerifier().score([evidence], ["Titan is Saturn's largest moon."])[0] > 0.5
    assert LexicalVerifier().score([evidence], ["Titan is Jupiter's largest moon."])[0] < 0.5


def test_question_context_is_not_claim_content():
    verifier = LexicalVerifier()
    question = "What is the chemical symbol of gold?"
    restated, answered, wrong = verifier.score(
        [EVIDENCE] * 3,
        ["The chemical symbol of gold.", "The chemical symbol of gold is Au.", "The chemical symbol of gold is Ag."],
        [question] * 3,
    )
    assert restated is None  # restating the question claims nothing
    assert answered == 1.0 and wrong == 0.0  # judged only on what the sentence adds
    # without the context, the question's words (all in the evidence) dilute the wrong answer
    assert verifier.score([EVIDENCE], ["The chemical symbol of gold is Ag."])[0] > 0.0


def test_context_is_part_of_the_cache_key_and_length_checked():
    verifier = LexicalVerifier()
    sentence = ["Gold has the symbol Au."]
    verifier.score([EVIDENCE], sentence)
    verifier.score([EVIDENCE], sentence, ["What is gold's symbol?"])
    assert verifier.cache_misses == 2
    with pytest.raises(ValueError, match="contexts"):
        verifier.score([EVIDENCE], sentence, [])
