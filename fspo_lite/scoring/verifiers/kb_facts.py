"""The facts behind the kbqa questions, read back from the bundled evidence paragraphs, and the text helpers the
knowledge-base verifier (verifiers/kb.py) reads sentences with.

scripts/data_build.py writes every kbqa evidence paragraph from structured facts with fixed templates, so
`parse_evidence` recovers those facts from the paragraph alone, and `known_names` indexes the names of every subject
in the bundled kbqa files. Nothing here needs the fact packages the data were built from.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from fspo_lite.data.examples import DATA_DIR
from fspo_lite.jsonl import read_jsonl

_COUNTRY = re.compile(r"^(?P<name>.+?) is a United Nations member state that the UN geoscheme places in "
                      r"(?P<region>[^.]+)\.")
_ELEMENT = re.compile(r"^(?P<name>\S+) is a chemical element with the symbol (?P<symbol>\w+) and atomic number "
                      r"(?P<z>\d+)\.")
_COUNTRY_FACTS = {
    "capital": re.compile(r"The capital of .+? is (?P<v>.+?)\.(?= (?:Its|The|Telephone) |$)"),
    "currency": re.compile(r"The currency of .+? is the (?P<v>.+?) \(ISO 4217 code (?P<code>[A-Z]{3})\)"),
    "calling": re.compile(r"international calling code \+(?P<v>\d+)"),
    "iso": re.compile(r"country codes are (?P<v>[A-Z]{2}) \(alpha-2\) and (?P<code>[A-Z]{3}) \(alpha-3\)"),
    "official": re.compile(r"Its official name is (?:the )?(?P<v>.+?)\.(?= (?:Its|The|Telephone) |$)"),
}
_ELEMENT_FACTS = {
    "group": re.compile(r"placed in group (?P<v>\d+) and period (?P<code>\d+)"),
    "period": re.compile(r"placed in (?:group \d+ and )?period (?P<v>\d+)"),
    "series": re.compile(r"It is an? (?P<v>[a-z -]+)\."),
    "weight": re.compile(r"atomic weight is about (?P<v>\d+(?:\.\d+)?)"),
    "year": re.compile(r"It was discovered in (?P<v>\d{4})"),
}
SERIES = ("nonmetal", "noble gas", "alkali metal", "alkaline earth metal", "metalloid", "halogen",
          "post-transition metal", "transition metal", "lanthanide", "actinide")
NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
NUMBER_WORDS.update({w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(),
                                                      start=2)})


def fold(text: str) -> str:
    """Accents dropped, curly apostrophes straightened."""
    text = text.replace("’", "'").replace("‘", "'")
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def tokens(text: str) -> list[str]:
    """Case-kept tokens of folded text: numbers (thousands commas dropped, '+' dropped), words split at hyphens,
    "n't" kept as its own token."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", fold(text))
    text = re.sub(r"n't\b", " n't", text)
    return re.findall(r"\d+(?:\.\d+)?|n't|[^\W\d_]+(?:'[^\W\d_]+)*", text)


def words_to_numbers(toks: list[str]) -> list[str]:
    """Number words replaced by digits: 'twenty six' / 'twenty-six' -> '26', 'one hundred and eighteen' -> '118',
    'eighteen ninety eight' -> '1898' (the way years are read). 'one of' stays a word."""
    out, i = [], 0
    while i < len(toks):
        lower = toks[i].lower()
        if lower not in NUMBER_WORDS or (lower == "one" and i + 1 < len(toks) and toks[i + 1].lower() == "of"):
            out.append(toks[i])
            i += 1
            continue
        run, j = [], i
        while j < len(toks):
            w = toks[j].lower()
            joins = w == "and" and run and run[-1] in ("hundred", "thousand") and j + 1 < len(toks) \
                and toks[j + 1].lower() in NUMBER_WORDS
            if not (w in NUMBER_WORDS or w in ("hundred", "thousand") or joins):
                break
            run.append(w)
            j += 1
        out.append(str(_number_value([w for w in run if w != "and"])))
        i = j
    return out


def _number_value(run: list[str]) -> int:
    if "hundred" in run or "thousand" in run:  # a cardinal: "two thousand ten", "one hundred eighteen"
        total = current = 0
        for w in run:
            if w == "hundred":
                current = max(current, 1) * 100
            elif w == "thousand":
                total, current = total + max(current, 1) * 1000, 0
            else:
                current += NUMBER_WORDS[w]
        return total + current
    groups = [0]  # two-digit groups read one after the other: "eighteen ninety eight" -> 18, 98 -> 1898
    for w in run:
        value, current = NUMBER_WORDS[w], groups[-1]
        if current == 0 or (current >= 20 and current % 10 == 0 and value < 10):
            groups[-1] = current + value
        else:
            groups.append(value)
    return int(str(groups[0]) + "".join(f"{g:02d}" for g in groups[1:]))


def singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ses", "xes", "ches", "shes")):
        return word[:-2]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def phrase(text: str) -> tuple[str, ...]:
    """The lowercase token tuple a name is matched by."""
    return tuple(t.lower() for t in tokens(text))


@dataclass
class Facts:
    """What one kbqa evidence paragraph states about its subject."""

    kind: str
    """'country' or 'element'."""
    names: list[str]
    """Ways to name the subject: its name (with and without 'the'), its official name, an element's name."""
    values: dict[str, list[str]] = field(default_factory=dict)
    """attribute -> accepted spellings (capital, currency, calling, z, group, period, series, weight, year, region)."""
    flags: set[str] = field(default_factory=set)
    """'radioactive' and 'ancient' where stated."""
    codes: dict[str, str] = field(default_factory=dict)
    """Matched with their case only (ISO 'IN', 'AND' and symbol 'In' are also English words): element symbol and
    ISO country codes -> 'subject', ISO currency code -> 'value:currency'."""


def parse_evidence(evidence: str) -> Facts | None:
    """The facts of a kbqa evidence paragraph, or None when it is not one."""
    evidence = evidence.strip()
    if m := _COUNTRY.match(evidence):
        name = m["name"]
        facts = Facts("country", [name, name[4:] if name.lower().startswith("the ") else name])
        facts.values["region"] = [m["region"]]
        for attribute, pattern in _COUNTRY_FACTS.items():
            if found := pattern.search(evidence):
                if attribute == "iso":
                    facts.codes.update({found["v"]: "subject", found["code"]: "subject"})
                elif attribute == "official":
                    facts.names.append(found["v"])
                elif attribute == "currency":
                    facts.values[attribute] = [found["v"], "the " + found["v"]]
                    facts.codes[found["code"]] = "value:currency"
                else:
                    facts.values[attribute] = [found["v"]]
        return facts
    if m := _ELEMENT.match(evidence):
        facts = Facts("element", [m["name"]], {"z": [m["z"]]}, codes={m["symbol"]: "subject:symbol"})
        for attribute, pattern in _ELEMENT_FACTS.items():
            if found := pattern.search(evidence):
                facts.values[attribute] = [found["v"]]
        if facts.values.get("series", [""])[0] not in SERIES:
            facts.values.pop("series", None)
        if "isotopes are radioactive" in evidence:
            facts.flags.add("radioactive")
        if "known since ancient times" in evidence:
            facts.flags.add("ancient")
        return facts
    return None


@lru_cache(maxsize=1)
def known_names() -> dict[tuple[str, ...], str]:
    """Lowercase token tuple -> what it names, over every bundled kbqa record: 'country:<name>', 'element:<name>',
    'capital:<country>', 'currency:<country>'. The union of the facts the questions were built from."""
    index: dict[tuple[str, ...], str] = {}
    for split in ("kbqa_train", "kbqa_test"):
        path = DATA_DIR / f"{split}.jsonl"
        if not path.exists():
            continue
        for row in read_jsonl(path):
            facts = parse_evidence(row["evidence"])
            if facts is None:
                continue
            own = facts.names[0]
            for name in facts.names:
                index.setdefault(phrase(name), f"{facts.kind}:{own}")
            for code, label in facts.codes.items():
                if label == "subject:symbol":
                    index.setdefault(("\x00" + code,), f"element:{own}")  # case-kept symbols, see analyse
            for attribute in ("capital", "currency"):
                for value in facts.values.get(attribute, [])[:1]:
                    index.setdefault(phrase(value), f"{attribute}:{own}")
    return index


def question_attribute(question: str) -> str | None:
    """The attribute a kbqa question asks for (None for the reverse questions, which ask for the subject)."""
    q = question.lower()
    for needle, attribute in (("which country", None), ("which chemical element", None), ("capital", "capital"),
                              ("currency", "currency"), ("calling code", "calling"), ("symbol", "symbol"),
                              ("atomic number", "z"), ("discovered", "year")):
        if needle in q:
            return attribute
    return None

