"""Knowledge-base verifier (`verifier.name: kb`): checks a sentence's claims against the facts a kbqa question was
built from, closed-world.

The kbqa evidence paragraphs are written from structured facts by fixed templates (scripts/data_build.py), so they
parse back into those facts (`parse_evidence`): for a country its name, official name, capital, currency, calling
code, ISO codes and region; for an element its name, symbol, atomic number, group, period, series, atomic weight,
radioactivity and discovery year. Every bundled kbqa record is parsed once into an index of names (`known_names`),
so a sentence that names another country, capital, currency or element is recognized.

A sentence is read as a sequence of pieces (`analyse`): mentions of the subject (its name, symbol, ISO codes, "it"),
attribute keywords ("capital", "atomic number", "discovered", ...), values of the subject (its capital, its
currency, a series such as "noble gas", a region), numbers (digits or words: "twenty-six"), names of other
entities, allowed filler, and unknown content words. Then (`check_claims`):

- no verb, or nothing that claims anything -> None (not checkable: "Atomic number 46", "Uranium");
- a value bound to the wrong attribute ("the atomic number of xenon is 131.293"), a wrong number, another entity's
  name ("the capital of Chad is Djibouti", "Minsk is the capital of Russia"), a wrong kind ("Iron is a country")
  -> contradicted, score 0;
- content the facts do not cover ("Lisbon is the largest city in Portugal") -> unsupported, score 0.2 (0.35 when
  the rest of the sentence checks out);
- every claim confirmed -> supported, score 1.

Negation ("not", "n't", "never") flips a claim: it is supported when the positive claim is contradicted ("Vanadium
is not a metalloid") and contradicted when the positive claim is confirmed. As in the project's hand labels
(data/gold_sentences.md), a claim the evidence does not state is unsupported even when it is true in the world,
including a right fact about another country. Evidence that is not a kbqa paragraph gives None for every sentence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from fspo_lite.scoring.verifiers.base import Verifier
from fspo_lite.scoring.verifiers.kb_facts import (SERIES, Facts, known_names, parse_evidence, phrase,
                                                  question_attribute, singular, tokens, words_to_numbers)
from fspo_lite.text import STOPWORDS

SUPPORTED, PARTLY_UNCOVERED, UNCOVERED, CONTRADICTED = 1.0, 0.35, 0.2, 0.0
"""Scores of the four outcomes: all claims confirmed; confirmed claims plus content the facts do not cover; only
uncovered content; a claim the facts contradict."""

METALS = {"alkali metal", "alkaline earth metal", "post-transition metal", "transition metal", "lanthanide", "actinide"}
REGIONS = {"africa": "Africa", "europe": "Europe", "asia": "Asia", "oceania": "Oceania", "americas": "the Americas",
           "america": "the Americas"}

KEYWORDS = {  # token sequence -> attribute (longest first when matching)
    "capital": "capital", "currency": "currency", "money": "currency", "calling code": "calling",
    "dialing code": "calling", "dialling code": "calling", "phone code": "calling", "telephone code": "calling",
    "country code": "calling", "code": "calling", "atomic number": "z", "proton number": "z", "number": "z",
    "group": "group", "period": "period", "atomic weight": "weight", "weight": "weight", "mass": "weight",
    "discovered": "year", "discovery": "year", "year": "year", "symbol": "symbol", "official name": "official",
}
NUMERIC = {"z", "group", "period", "weight", "year", "calling"}
KINDS = {"element": "element", "country": "country", "nation": "country", "state": "country"}
PRONOUNS = {"it", "they", "he", "she", "which", "this", "that", "who"}
NEGATIONS = {"not", "never", "no", "neither", "nor", "cannot"}
FILLER = STOPWORDS | set("""
    chemical periodic table placed standard approximately around roughly official officially city international
    telephone phone calling dialing dialling united nations member geoscheme region located place lies situated
    iso alpha isotope isotopes sovereign use uses used using equal equals equivalent called named known name
    named whose also still today currently named denoted represented written abbreviated letter letters
    """.split())
VERBS = set("""is are was were be been being has have had uses use used called named known means contains
    lies sits belongs became remains includes consists equals stands denotes represents 's""".split())


@dataclass
class Piece:
    kind: str
    """subject | keyword | value | number | other | series | region | flag | type | negation | filler | unknown"""
    text: str
    attribute: str | None = None
    start: int = 0


def _match(lower: list[str], start: int, table: dict[tuple[str, ...], str]) -> tuple[int, str] | None:
    for length in range(min(6, len(lower) - start), 0, -1):
        key = tuple(lower[start:start + length])
        if key in table:
            return length, table[key]
    return None


def analyse(facts: Facts, sentence: str) -> list[Piece]:
    """The sentence as pieces (see the module docstring), longest match first at every position."""
    raw = words_to_numbers(tokens(sentence))
    lower = [t.lower() for t in raw]
    table: dict[tuple[str, ...], str] = {}
    for name in facts.names:
        table[phrase(name)] = "subject"
    for attribute, spellings in facts.values.items():
        if attribute not in NUMERIC and attribute != "region":
            for spelling in spellings:
                table.setdefault(phrase(spelling), f"value:{attribute}")
    for series in SERIES:
        table.setdefault(phrase(series), f"series:{series}")
        table.setdefault(phrase(series)[:-1] + (phrase(series)[-1] + "s",), f"series:{series}")
    table.update({("non", "metal"): "series:nonmetal", ("metal",): "series:metal", ("metals",): "series:metal",
                  ("noble", "gases"): "series:noble gas", ("radioactive",): "flag:radioactive",
                  ("ancient",): "flag:ancient", ("antiquity",): "flag:ancient"})
    for word, region in REGIONS.items():
        table.setdefault((word,), f"region:{region}")
    for key, attribute in KEYWORDS.items():
        table.setdefault(tuple(key.split()), f"keyword:{attribute}")
    pieces, i = [], 0
    while i < len(raw):
        hit = _match(lower, i, table) or _match(lower, i, known_names())
        if raw[i] in facts.codes:
            hit = (1, facts.codes[raw[i]])
        elif raw[i].lower() != raw[i] and ("\x00" + raw[i],) in known_names() and raw[i] != "I" and (
                i or raw[i].lower() not in STOPWORDS):
            hit = (1, known_names()[("\x00" + raw[i],)])  # another element's symbol ("Rubidium is Ra.")
        elif hit is None and re.fullmatch(r"[A-Z][a-z]?", raw[i]) and i and lower[i - 1] == "symbol":
            hit = (1, "other:symbol")  # a symbol right after "symbol" that is not the subject's
        if hit is None and lower[i - 1:i] == ["iso"] and re.fullmatch(r"[\d.]+", raw[i]):
            hit = (1, "filler:iso")  # "ISO 3166", "ISO 4217"
        if hit is not None:
            length, label = hit
            kind, _, attribute = label.partition(":")
            if kind in ("country", "element", "capital", "currency"):
                kind = "other"
            if kind == "keyword" and lower[i] in ("number", "code"):
                attribute = ("calling" if lower[i] == "number" else attribute) if facts.kind == "country" else (
                    "z" if lower[i] == "number" else None)
                if lower[i] == "code" and (lower[max(0, i - 3):i].count("iso") or attribute is None):
                    kind, attribute = "filler", None
            pieces.append(Piece(kind, " ".join(raw[i:i + length]), attribute or None, i))
            i += length
            continue
        word = singular(lower[i])
        if re.fullmatch(r"\d+(?:\.\d+)?", raw[i]):
            pieces.append(Piece("number", raw[i], None, i))
        elif lower[i] in NEGATIONS or lower[i] == "n't":
            pieces.append(Piece("negation", raw[i], None, i))
        elif word in KINDS:
            pieces.append(Piece("type", raw[i], KINDS[word], i))
        elif lower[i] in FILLER or word in FILLER or lower[i] in VERBS or len(lower[i]) == 1 or lower[i].endswith("'s"):
            pieces.append(Piece("filler", raw[i], None, i))
        else:
            pieces.append(Piece("unknown", raw[i], None, i))
        i += 1
    return pieces


def _has_verb(sentence: str) -> bool:
    """A verb from the list, a word in -ed, or any word after a pronoun ("It borders ...")."""
    words = [t.lower() for t in tokens(sentence)]
    return any(w in VERBS or (len(w) > 4 and w.endswith("ed")) or (k and words[k - 1] in PRONOUNS)
               for k, w in enumerate(words))


def _number_ok(value: str, spellings: list[str], attribute: str) -> bool:
    if attribute != "weight":
        return any(float(value) == float(s) for s in spellings)
    decimals = len(value.partition(".")[2])
    return abs(float(value) - float(spellings[0])) <= 0.5 * 10 ** -decimals + 1e-9


def _contains(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    return bool(needle) and any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def _nearest_keyword(piece: Piece, keywords: list[Piece], numeric: bool) -> Piece | None:
    usable = [k for k in keywords if k.attribute and (k.attribute in NUMERIC) == numeric]
    return min(usable, key=lambda k: (abs(k.start - piece.start), k.start > piece.start), default=None)


def check_claims(facts: Facts, sentence: str, question: str = "") -> tuple[float | None, list[str]]:
    """(score, reasons): the score of the sentence's claims about the subject (module docstring), None when it
    claims nothing checkable; the reasons name what was confirmed, contradicted or not covered."""
    if not _has_verb(sentence):
        return None, ["no verb: not a claim"]
    pieces = analyse(facts, sentence)
    keywords = [p for p in pieces if p.kind == "keyword"]
    asked = question_attribute(question)
    confirmed, wrong, uncovered = [], [], []
    for p in pieces:
        if p.kind == "subject" and p.attribute == "symbol":
            confirmed.append(f"symbol {p.text}")
        elif p.kind == "other":
            wrong.append(f"names another entity: {p.text}")
        elif p.kind == "unknown":
            uncovered.append(p.text)
        elif p.kind == "type":
            (confirmed if p.attribute == facts.kind else wrong).append(f"kind {p.text}")
        elif p.kind == "series":
            own = facts.values.get("series", [None])[0]
            if own is None:
                (wrong if facts.kind == "country" else uncovered).append(f"series {p.text}")
            else:
                ok = own in METALS if p.attribute == "metal" else own == p.attribute
                (confirmed if ok else wrong).append(f"series {p.text}")
        elif p.kind == "region":
            (confirmed if p.attribute in facts.values.get("region", []) else wrong).append(f"region {p.text}")
        elif p.kind == "flag":
            (confirmed if p.attribute in facts.flags else wrong if facts.kind == "element" and p.attribute ==
             "radioactive" else uncovered).append(p.text)
        elif p.kind == "value":
            keyword = _nearest_keyword(p, keywords, numeric=False)
            ok = keyword is None or keyword.attribute == p.attribute
            (confirmed if ok else wrong).append(f"{p.text} as {keyword.attribute if keyword else p.attribute}")
        elif p.kind == "number":
            keyword = _nearest_keyword(p, keywords, numeric=True)
            attribute = keyword.attribute if keyword else (asked if asked in NUMERIC else None)
            if attribute is None or attribute not in facts.values:
                (uncovered if attribute is None else wrong).append(f"number {p.text}")
            else:
                (confirmed if _number_ok(p.text, facts.values[attribute], attribute) else wrong).append(
                    f"{p.text} as {attribute}")
    subjects = [p for p in pieces if p.kind == "subject"]
    words = [p.text.lower() for p in pieces]
    given = phrase(question)
    for k in keywords:
        if k.attribute in NUMERIC or k.attribute in ("symbol", "official"):
            continue
        filled = any(p.kind in ("value", "number", "other", "unknown") for p in pieces)
        as_value = [s for s in subjects if pieces.index(s) and words[pieces.index(s) - 1] in ("is", "are", "was")]
        if as_value or (not filled and len(subjects) >= 2):
            wrong.append(f"the subject's own name given as its {k.attribute}")
        elif not filled and any(_contains(given, phrase(v)) for v in facts.values.get(k.attribute, [])):
            confirmed.append(f"{k.attribute} named in the question")  # "Minsk ...?" -> "It is the capital of Belarus."
        elif not filled:
            uncovered.append(f"{k.attribute} of what is not said")
    if not (subjects or PRONOUNS & set(words)):  # "The chemical elements are all." claims no kind of anything
        confirmed = [c for c in confirmed if not c.startswith("kind ")]
    if not (confirmed or wrong or uncovered):
        return None, ["no checkable claim"]
    negated = any(p.kind == "negation" for p in pieces)
    if negated and not uncovered:
        return (SUPPORTED if wrong else CONTRADICTED), ["negated"] + wrong + confirmed
    if wrong:
        return CONTRADICTED, wrong
    if uncovered:
        return (PARTLY_UNCOVERED if confirmed else UNCOVERED), [f"not in the facts: {' '.join(uncovered)}"]
    return SUPPORTED, confirmed


class KBVerifier(Verifier):
    """Checks sentences against the kbqa facts parsed from the evidence (None for evidence of other kinds)."""

    name = "kb"
    uses_context = True

    def _score(self, evidence: list[str], sentences: list[str], contexts: list[str]) -> list[float | None]:
        scores = []
        for e, s, c in zip(evidence, sentences, contexts):
            facts = parse_evidence(e)
            scores.append(None if facts is None else check_claims(facts, s, c)[0])
        return scores
