"""The knowledge-base verifier (fspo_lite/scoring/verifiers/kb.py): evidence parsing, number words, and hand-made sentences,
adversarial ones included."""

from __future__ import annotations

import pytest

from fspo_lite.data.examples import load_examples
from fspo_lite.scoring.verifiers import build_verifier
from fspo_lite.config import VerifierConfig
from fspo_lite.scoring.verifiers.kb import KBVerifier, check_claims
from fspo_lite.scoring.verifiers.kb_facts import parse_evidence, question_attribute, tokens, words_to_numbers

CHAD = ("Chad is a United Nations member state that the UN geoscheme places in Africa. The capital of Chad is "
        "N'Djamena. Its ISO 3166-1 country codes are TD (alpha-2) and TCD (alpha-3). Its official name is the "
        "Republic of Chad. The currency of Chad is the Central African CFA franc (ISO 4217 code XAF). Telephone "
        "numbers in Chad use the international calling code +235.")
XENON = ("Xenon is a chemical element with the symbol Xe and atomic number 54. It was discovered in 1898. Its "
         "standard atomic weight is about 131.293. It is placed in group 18 and period 5 of the periodic table. "
         "It is a noble gas.")
VANADIUM = ("Vanadium is a chemical element with the symbol V and atomic number 23. It is a transition metal. It is "
            "placed in group 5 and period 4 of the periodic table.")
Q_CHAD = "What is the capital of Chad?"
Q_XENON = "What is the atomic number of xenon?"


def score(evidence, sentence, question=""):
    return check_claims(parse_evidence(evidence), sentence, question)[0]


def test_parse_evidence_reads_the_templates():
    chad = parse_evidence(CHAD)
    assert chad.kind == "country" and chad.names[:2] == ["Chad", "Chad"] and "Republic of Chad" in chad.names
    assert chad.values["capital"] == ["N'Djamena"] and chad.values["calling"] == ["235"]
    assert chad.values["currency"][0] == "Central African CFA franc" and chad.codes["XAF"] == "value:currency"
    assert chad.codes == {"TD": "subject", "TCD": "subject", "XAF": "value:currency"}
    xenon = parse_evidence(XENON)
    assert xenon.kind == "element" and xenon.codes == {"Xe": "subject:symbol"}
    assert {k: v[0] for k, v in xenon.values.items()} == {"z": "54", "year": "1898", "weight": "131.293",
                                                          "group": "18", "period": "5", "series": "noble gas"}


@pytest.mark.parametrize("evidence", ["", "Paris is in France.", "Xenon is a gas. It was discovered in 1898.",
                                      "is a chemical element with the symbol", "\x00\ud800 garbage"])
def test_other_evidence_is_not_parsed_and_not_checked(evidence):
    assert parse_evidence(evidence) is None
    assert KBVerifier().score([evidence], ["The capital of Chad is N'Djamena."], [Q_CHAD]) == [None]


def test_every_bundled_kbqa_record_parses_and_its_answer_is_a_fact():
    for split in ("bundled:kbqa_train", "bundled:kbqa_test"):
        for example in load_examples(split):
            facts = parse_evidence(example.evidence)
            assert facts is not None, example.id
            stated = {v for vs in facts.values.values() for v in vs} | set(facts.names) | set(facts.codes)
            assert example.answers[0].lstrip("+") in stated, (example.id, example.answers[0])


@pytest.mark.parametrize("words, digits", [
    ("twenty-six", "26"), ("twenty six", "26"), ("nine", "9"), ("one hundred and eighteen", "118"),
    ("eighteen ninety-eight", "1898"), ("nineteen hundred", "1900"), ("two thousand and ten", "2010"),
    ("fifty four", "54"),
])
def test_number_words(words, digits):
    assert words_to_numbers(tokens(f"It is {words} now")) == ["It", "is", digits, "now"]


def test_one_of_stays_a_word():
    assert words_to_numbers(tokens("Rome is one of the cities")) == ["Rome", "is", "one", "of", "the", "cities"]


def test_question_attribute():
    assert question_attribute(Q_CHAD) == "capital"
    assert question_attribute("Yerevan is the capital of which country?") is None
    assert question_attribute("In which year was the chemical element xenon discovered?") == "year"


@pytest.mark.parametrize("sentence", [
    "The capital of Chad is N'Djamena.", "N'Djamena is the capital of Chad.", "Chad's capital is N'Djamena.",
    "Chad is a country in Africa.", "The international calling code of Chad is +235.",
    "The currency of Chad is the Central African CFA franc.", "Its currency is the XAF.",
    "The capital of Chad is not Djibouti.",
])
def test_supported_country_sentences(sentence):
    assert score(CHAD, sentence, Q_CHAD) == 1.0


@pytest.mark.parametrize("sentence", [
    "The capital of Chad is Djibouti.",             # another country's name as the value
    "The capital of Chad is Yaounde.",              # a right fact about another country (Cameroon) ... unstated
    "The capital of Cameroon is Yaounde.",          # ... and about another subject altogether
    "The capital of Chad is not N'Djamena.",        # negation of a true claim
    "Chad isn't in Africa.",
    "The currency of Chad is N'Djamena.",           # a right value for the wrong attribute
    "The calling code of Chad is +236.",
    "Chad is a chemical element.",                  # the wrong kind of thing
    "The capital of Chad is Chad.",                 # the subject named as its own capital
])
def test_unsupported_country_sentences(sentence):
    assert score(CHAD, sentence, Q_CHAD) < 0.5


@pytest.mark.parametrize("sentence", [
    "The atomic number of xenon is 54.", "The atomic number of xenon is fifty-four.", "Xe is a noble gas.",
    "It is placed in group 18 and period 5 of the periodic table.", "It was discovered in eighteen ninety-eight.",
    "Xenon has an atomic weight of about 131.3.", "Xenon is a chemical element with the symbol Xe.",
    "Xenon is not a metal.",
])
def test_supported_element_sentences(sentence):
    assert score(XENON, sentence, Q_XENON) == 1.0


@pytest.mark.parametrize("sentence", [
    "The atomic number of xenon is 131.",           # right-looking number of the wrong attribute (the weight)
    "The atomic number of xenon is 18.",            # the group
    "Xenon was discovered in 54.",                  # the atomic number as a year
    "The atomic number of xenon is fifty-five.",    # number words, wrong
    "Xenon is placed in group 5 and period 18.",    # both swapped
    "Xenon is a halogen.", "Xenon is not a noble gas.", "Xenon is a metal.",
    "The chemical symbol of xenon is Ra.",          # another element's symbol
    "Krypton has atomic number 54.",                # another element named
    "Xenon is used in lamps.",                      # true in the world, not in the facts
    "Xenon is a country.",
])
def test_unsupported_element_sentences(sentence):
    assert score(XENON, sentence, Q_XENON) < 0.5


def test_contradiction_scores_below_an_uncovered_claim():
    assert score(XENON, "The atomic number of xenon is 55.", Q_XENON) == 0.0
    assert 0.0 < score(XENON, "Xenon is used in lamps.", Q_XENON) < 0.5


def test_negation_of_a_series_the_facts_rule_out():
    assert score(VANADIUM, "The element is not a metalloid.", "Which chemical element has the symbol V?") == 1.0
    assert score(VANADIUM, "Vanadium is not a metal.", "Which chemical element has the symbol V?") == 0.0


@pytest.mark.parametrize("sentence", ["Uranium", "Atomic number 46", "The year 1948", "Chad", "", "...",
                                      "The chemical elements are all."])
def test_nothing_checkable_gives_none(sentence):
    assert score(XENON, sentence, Q_XENON) is None


def test_reverse_question_pronoun_takes_the_value_from_the_question():
    question = "N'Djamena is the capital of which country?"
    assert score(CHAD, "It is the capital of Chad.", question) == 1.0
    assert score(CHAD, "It is the capital of Chad.", Q_CHAD) < 0.5  # "it" names nothing the facts can check


def test_symbols_and_iso_codes_keep_their_case():
    indium = "Indium is a chemical element with the symbol In and atomic number 49. It was discovered in 1863."
    assert score(indium, "In 1863, indium was discovered.", "") == 1.0  # "In" opening a sentence is a preposition
    assert score(CHAD, "The capital is in Chad.", Q_CHAD) < 0.5
    assert score(CHAD, "TCD is a country in Africa.", Q_CHAD) == 1.0  # the ISO code names the subject


def test_verifier_is_registered_offline_and_caches():
    verifier = build_verifier(VerifierConfig(name="kb"))
    assert isinstance(verifier, KBVerifier) and verifier.uses_context
    out = verifier.score([XENON, XENON], ["Xe is a noble gas.", "Xe is a noble gas."], [Q_XENON, Q_XENON])
    assert out == [1.0, 1.0] and verifier.cache_misses == 1
