"""Regenerate the bundled QA data in ``data/`` from facts that PyPI packages ship, offline.

Two sets share the canonical record schema (see ``SCHEMA_KEYS`` and ``validate_record``):

- ``kbqa_{train,test}.jsonl``: knowledge-base QA built from ``countryinfo`` + ``pycountry``
  (UN member states: capital, currency, calling code) and ``mendeleev`` (elements: symbol,
  atomic number, discovery year). Each question has a one-paragraph evidence text built from
  the same facts, including distractor facts about the same subject, so a verifier has real
  prose to check reasoning sentences against.
- ``multihop_{train,test}.jsonl``: a hand-written HotpotQA-style set (``MULTIHOP_ITEMS``).

``python scripts/data_build.py --out data --seed 0`` rewrites all four files; the output is
byte-identical for the same seed and package versions (``FACT_PACKAGES``). A build tool: it lives outside
the runtime package, which only reads the files it writes (``fspo_lite.data.examples``).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

SCHEMA_KEYS = ("id", "question", "answers", "evidence", "source", "task", "extra")
FACT_PACKAGES = "mendeleev==1.3.0 pycountry==26.2.16 countryinfo==1.0.1"
TEST_FRACTION = 0.25

# --------------------------------------------------------------------------------------------
# Curation tables. The facts come from the packages; these tables only choose subjects, mark
# difficulty, skip ambiguous or stale entries and add answer aliases.
# --------------------------------------------------------------------------------------------

# ISO alpha-3 codes of the 193 UN member states (non-members and territories are left out:
# their package data are sparser and staler).
UN_MEMBERS = """
AFG ALB DZA AND AGO ATG ARG ARM AUS AUT AZE BHS BHR BGD BRB BLR BEL BLZ BEN BTN BOL BIH BWA BRA
BRN BGR BFA BDI CPV KHM CMR CAN CAF TCD CHL CHN COL COM COG COD CRI CIV HRV CUB CYP CZE DNK DJI
DMA DOM ECU EGY SLV GNQ ERI EST SWZ ETH FJI FIN FRA GAB GMB GEO DEU GHA GRC GRD GTM GIN GNB GUY
HTI HND HUN ISL IND IDN IRN IRQ IRL ISR ITA JAM JPN JOR KAZ KEN KIR PRK KOR KWT KGZ LAO LVA LBN
LSO LBR LBY LIE LTU LUX MDG MWI MYS MDV MLI MLT MHL MRT MUS MEX FSM MDA MCO MNG MNE MAR MOZ MMR
NAM NRU NPL NLD NZL NIC NER NGA MKD NOR OMN PAK PLW PAN PNG PRY PER PHL POL PRT QAT ROU RUS RWA
KNA LCA VCT WSM SMR STP SAU SEN SRB SYC SLE SGP SVK SVN SLB SOM ZAF SSD ESP LKA SDN SUR SWE CHE
SYR TJK TZA THA TLS TGO TON TTO TUN TUR TKM TUV UGA UKR ARE GBR USA URY UZB VUT VEN VNM YEM ZMB
ZWE
""".split()

# Difficulty rule for country questions: "easy" when the subject is on this list of large or
# much-discussed countries (written by hand), "hard" otherwise.
PROMINENT_COUNTRIES = set("""
USA CAN MEX BRA ARG CHL PER COL VEN CUB GBR FRA DEU ITA ESP PRT NLD BEL CHE AUT SWE NOR DNK FIN
IRL GRC POL RUS UKR TUR EGY NGA KEN ZAF MAR CHN JPN KOR IND PAK IDN THA VNM PHL AUS NZL SAU IRN
IRQ ISR
""".split())

# Difficulty rule for element questions: "easy" for these everyday elements, "hard" otherwise.
COMMON_ELEMENTS = set("H He Li C N O F Ne Na Mg Al Si P S Cl Ar K Ca Fe Cu Zn Ag Sn I Pt Au Hg Pb U".split())

# Countries whose capital question would be ambiguous, disputed or stale in the package data.
# Capitals that share a word with the country's name (Kuwait City, Guinea-Bissau) are skipped too.
CAPITAL_SKIP = {
    "BOL": "Sucre (constitutional) vs La Paz (seat of government)",
    "ZAF": "three capitals",
    "CIV": "Yamoussoukro (official) vs Abidjan (seat of most institutions)",
    "BEN": "Porto-Novo (official) vs Cotonou (seat of government)",
    "SWZ": "Mbabane (executive) vs Lobamba (legislative)",
    "LKA": "Sri Jayawardenepura Kotte (official) vs Colombo (package says Colombo)",
    "MYS": "Kuala Lumpur vs Putrajaya (administrative)",
    "TZA": "Dodoma (official) vs Dar es Salaam",
    "BDI": "moved to Gitega in 2019; package still says Bujumbura",
    "KAZ": "renamed Astana in 2022; package says Nur-Sultan",
    "ISR": "internationally disputed",
    "NRU": "no official capital",
    "IDN": "relocation to Nusantara under way",
    "YEM": "Sana'a vs Aden (temporary seat)",
    "GNQ": "relocation to Ciudad de la Paz under way",
}
# Countries left out of every question: the name alone does not say which place is meant.
AMBIGUOUS_COUNTRY_NAMES = {"GEO": "Georgia is also a US state"}
CAPITAL_ALIASES = {
    "USA": ["Washington", "Washington, D.C.", "Washington DC"],
    "KIR": ["Tarawa"],
    "UKR": ["Kiev"],
    "MMR": ["Nay Pyi Taw", "Naypyitaw"],
    "ATG": ["St. John's"],
    "GRD": ["Saint George's"],
    "CHL": ["Santiago de Chile"],
    "TCD": ["Ndjamena"],
    "MNG": ["Ulan Bator"],
    "ISL": ["Reykjavík"],
    "TTO": ["Port-of-Spain"],
    "SYC": ["Victoria, Seychelles"],
}
# Display names where the package's name is outdated or needs "the" in running text.
COUNTRY_NAMES = {
    "MKD": "North Macedonia", "SWZ": "Eswatini", "BHS": "the Bahamas", "GMB": "the Gambia",
    "USA": "the United States", "GBR": "the United Kingdom", "NLD": "the Netherlands",
    "PHL": "the Philippines", "CZE": "the Czech Republic", "ARE": "the United Arab Emirates",
    "CAF": "the Central African Republic", "DOM": "the Dominican Republic",
    "COD": "the Democratic Republic of the Congo", "COG": "the Republic of the Congo",
    "MHL": "the Marshall Islands", "SLB": "the Solomon Islands", "MDV": "the Maldives",
    "COM": "the Comoros", "FSM": "the Federated States of Micronesia",
}
COUNTRY_ALIASES = {
    "USA": ["USA", "US", "United States of America"],
    "GBR": ["UK", "Britain", "Great Britain"],
    "CZE": ["Czechia"], "TUR": ["Türkiye", "Turkiye"], "CIV": ["Côte d'Ivoire"],
    "CPV": ["Cabo Verde"], "TLS": ["Timor-Leste"], "MMR": ["Burma"], "SWZ": ["Swaziland"],
    "NLD": ["Holland"], "MKD": ["Macedonia"], "PRK": ["DPRK"],
    "COD": ["DR Congo", "DRC", "Congo-Kinshasa"], "COG": ["Congo-Brazzaville"],
}

# ISO 4217 fund codes that the package lists beside the real currency.
FUND_CODES = {"CLF", "BOV", "USN", "UYI", "CHE", "CHW"}
# Codes still in ISO 4217 but no longer the country's currency (stale package data).
CURRENCY_SKIP = {"ZWE"}
CURRENCY_NAMES = {  # ISO name -> (canonical English name, extra aliases)
    "Yuan Renminbi": ("Renminbi", ["yuan", "Chinese yuan"]),
    "US Dollar": ("United States dollar", ["US dollar", "U.S. dollar"]),
    "Pound Sterling": ("Pound sterling", ["British pound", "pound"]),
    "CFA Franc BCEAO": ("West African CFA franc", ["CFA franc"]),
    "CFA Franc BEAC": ("Central African CFA franc", ["CFA franc"]),
    "Peso Uruguayo": ("Uruguayan peso", []),
    "Rial Omani": ("Omani rial", []),
    "Cordoba Oro": ("Córdoba", ["Nicaraguan córdoba"]),
    "New Israeli Sheqel": ("New Israeli shekel", ["shekel", "sheqel"]),
    "Won": ("South Korean won", []),
    "North Korean Won": ("North Korean won", []),
    "Yen": ("Yen", ["Japanese yen"]),
    "Som": ("Som", ["Kyrgyzstani som"]),
    "Surinam Dollar": ("Surinamese dollar", ["Surinam dollar"]),
}

# Elements whose mendeleev discovery year agrees with the commonly cited year and is not
# contested (priority disputes, discovery vs isolation, spectral vs chemical discovery).
VETTED_DISCOVERY = set("""
H Li Be B N Na P Cl Ar K Ca Sc Ti Cr Mn Ni Ga Ge Ne Kr Xe Rb Zr Nb Mo Tc Ru Cd In Te I Cs Ce Pr
Sm Gd Tb Dy Ho Er Tm Yb Hf Ta Re Tl Po At Fr Ra U Np Pu Cm Bk Cf Es Md Hs Mt Ds Rg Cn Lv Ts
""".split())
ANCIENT_ELEMENTS = set("C S Fe Cu Ag Sn Au Hg Pb".split())
ELEMENT_ALIASES = {"Aluminum": ["Aluminium"], "Cesium": ["Caesium"], "Sulfur": ["Sulphur"]}
SERIES_PHRASES = {
    "Nonmetals": "a nonmetal", "Noble gases": "a noble gas", "Alkali metals": "an alkali metal",
    "Alkaline earth metals": "an alkaline earth metal", "Metalloids": "a metalloid",
    "Halogens": "a halogen", "Poor metals": "a post-transition metal",
    "Transition metals": "a transition metal", "Lanthanides": "a lanthanide", "Actinides": "an actinide",
}
# Group placement (La/Lu, Ac/Lr) and series membership of these are debated: state neither.
DEBATED_PLACEMENT = {57, 71, 89, 103}
DEBATED_SERIES = {84, 85}  # polonium, astatine

# Categories tagged "hard" whatever the subject: SmolLM2-135M-Instruct answered (almost) none of
# them even for prominent subjects (see data/README.md).
ALWAYS_HARD = {"calling_code", "element_by_number", "discovery_year"}

# Questions per category: (easy, hard). Paired categories use disjoint subjects.
QUOTAS = {
    "capital": (32, 58),
    "country_by_capital": (12, 28),
    "currency": (30, 40),
    "calling_code": (0, 40),
    "element_symbol": (18, 42),
    "element_by_symbol": (10, 30),
    "atomic_number": (20, 40),
    "element_by_number": (0, 30),
    "discovery_year": (0, 40),
}
PAIRED = {"country_by_capital": "capital", "element_by_symbol": "element_symbol",
          "element_by_number": "atomic_number"}


def _require_fact_packages():
    """Import the fact packages lazily, with an install hint when one is missing."""
    try:
        import countryinfo  # noqa: F401
        import pycountry
        from mendeleev.fetch import fetch_table
    except ImportError as error:
        raise ImportError(
            f"building the kbqa set needs the fact packages ({error.name} is missing): "
            f"pip install {FACT_PACKAGES}"
        ) from error
    return pycountry, fetch_table


def _ascii_fold(text: str) -> str:
    text = text.replace("’", "'")
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def _aliases(*names: str) -> list[str]:
    """Unique non-empty names in order, each followed by its accent-free spelling if different."""
    out: list[str] = []
    for name in names:
        for variant in (name, _ascii_fold(name)):
            if variant and variant.lower() not in {o.lower() for o in out}:
                out.append(variant)
    return out


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", _ascii_fold(text).lower())


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


# --------------------------------------------------------------------------------------------
# Facts
# --------------------------------------------------------------------------------------------


def _load_countries(pycountry) -> dict[str, dict[str, Any]]:
    """UN member facts keyed by alpha-3, from countryinfo's JSON files checked against pycountry."""
    from importlib.resources import files

    raw: dict[str, list[dict]] = {}
    for path in sorted(files("countryinfo").joinpath("data").iterdir(), key=lambda p: p.name):
        if path.name.endswith(".json"):
            data = json.loads(path.read_text(encoding="utf-8"))
            iso = data.get("ISO")
            if isinstance(iso, dict) and iso.get("alpha3") in UN_MEMBERS:
                raw.setdefault(iso["alpha3"], []).append(data)
    countries = {}
    for a3 in UN_MEMBERS:
        if len(raw.get(a3, [])) != 1:
            raise RuntimeError(f"countryinfo has {len(raw.get(a3, []))} records for {a3}; expected 1")
        data, iso = raw[a3][0], pycountry.countries.get(alpha_3=a3)
        name = COUNTRY_NAMES.get(a3, data["name"])
        plain = name[4:] if name.startswith("the ") else name
        official = getattr(iso, "official_name", None)
        codes = [c for c in data.get("currencies") or [] if c not in FUND_CODES]
        currency = None
        if len(codes) == 1 and a3 not in CURRENCY_SKIP and pycountry.currencies.get(alpha_3=codes[0]):
            iso_name = pycountry.currencies.get(alpha_3=codes[0]).name
            canonical, extra = CURRENCY_NAMES.get(iso_name, (iso_name, []))
            currency = {"code": codes[0], "name": canonical,
                        "aliases": _aliases(canonical, *extra, iso_name, codes[0])}
        calling = data.get("callingCodes") or []
        calling_ok = len(calling) == 1 and calling[0].isdigit() and (calling[0] == "1" or not calling[0].startswith("1"))
        capital = data.get("capital") if isinstance(data.get("capital"), str) else None
        if capital and (a3 in CAPITAL_SKIP or set(_words(capital)) & set(_words(plain))):
            capital = None
        countries[a3] = {
            "alpha3": a3,
            "alpha2": iso.alpha_2,
            "name": name,
            "plain": plain,
            "official": official if official and official not in (name, plain) else None,
            "aliases": _aliases(plain, data["name"], getattr(iso, "common_name", ""),
                                "" if "," in iso.name else iso.name, official or "",
                                *COUNTRY_ALIASES.get(a3, [])),
            "region": data["region"],
            "capital": capital,
            "capital_aliases": _aliases(capital or "", *CAPITAL_ALIASES.get(a3, [])),
            "currency": currency,
            "calling": calling[0] if calling_ok else None,
            "prominent": a3 in PROMINENT_COUNTRIES,
        }
    # An alias that is part of another member's name ("Congo", "Korea") would accept a wrong answer.
    for c in countries.values():
        others = [" ".join(_words(o["plain"])) for o in countries.values() if o is not c]
        c["aliases"] = c["aliases"][:1] + [
            a for a in c["aliases"][1:] if not any(f" {' '.join(_words(a))} " in f" {o} " for o in others)]
    return countries


def _load_elements(fetch_table) -> dict[int, dict[str, Any]]:
    """Element facts keyed by atomic number, from mendeleev's bundled database."""
    import math

    series = {int(r["id"]): r["name"] for _, r in fetch_table("series").iterrows()}
    elements = {}
    for _, r in fetch_table("elements").iterrows():
        z, symbol = int(r["atomic_number"]), r["symbol"]
        year = None if math.isnan(r["discovery_year"]) else int(r["discovery_year"])
        ancient = str(r["discoverers"]).startswith("Known to the ancients")
        if symbol in ANCIENT_ELEMENTS and not ancient:
            raise RuntimeError(f"mendeleev no longer lists {symbol} as known to the ancients")
        group = None if math.isnan(r["group_id"]) or z in DEBATED_PLACEMENT else int(r["group_id"])
        elements[z] = {
            "z": z,
            "symbol": symbol,
            "name": r["name"],
            "aliases": ELEMENT_ALIASES.get(r["name"], []),
            "group": group,
            "period": int(r["period"]),
            "series": None if z in DEBATED_PLACEMENT | DEBATED_SERIES or z >= 104 else series[int(r["series_id"])],
            "weight": None if r["is_radioactive"] else f"{r['atomic_weight']:.3f}".rstrip("0").rstrip("."),
            "radioactive": bool(r["is_radioactive"]),
            "year": year if symbol in VETTED_DISCOVERY else None,
            "ancient": symbol in ANCIENT_ELEMENTS,
            "common": symbol in COMMON_ELEMENTS,
        }
    missing = VETTED_DISCOVERY - {e["symbol"] for e in elements.values() if e["year"]}
    if missing:
        raise RuntimeError(f"mendeleev has no discovery year for vetted elements {sorted(missing)}")
    return elements


# --------------------------------------------------------------------------------------------
# Evidence paragraphs
# --------------------------------------------------------------------------------------------


def _paragraph(intro: str, others: list[str], rng: random.Random) -> str:
    """Intro sentence first, then the other facts in a seeded random order."""
    others = list(others)
    rng.shuffle(others)
    return " ".join([intro, *others])


def _country_evidence(c: dict, rng: random.Random) -> str:
    name = c["name"]
    region = "the Americas" if c["region"] == "Americas" else c["region"]
    facts = [f"Its ISO 3166-1 country codes are {c['alpha2']} (alpha-2) and {c['alpha3']} (alpha-3)."]
    if c["official"]:
        official = c["official"] if c["official"].startswith("the ") else "the " + c["official"]
        facts.append(f"Its official name is {official}.")
    if c["capital"]:
        facts.append(f"The capital of {name} is {c['capital']}.")
    if c["currency"]:
        facts.append(f"The currency of {name} is the {c['currency']['name']} "
                     f"(ISO 4217 code {c['currency']['code']}).")
    if c["calling"]:
        facts.append(f"Telephone numbers in {name} use the international calling code +{c['calling']}.")
    intro = f"{_cap(name)} is a United Nations member state that the UN geoscheme places in {region}."
    return _paragraph(intro, facts, rng)


def _element_evidence(e: dict, rng: random.Random) -> str:
    facts = []
    if e["series"]:
        facts.append(f"It is {SERIES_PHRASES[e['series']]}.")
    if e["group"]:
        facts.append(f"It is placed in group {e['group']} and period {e['period']} of the periodic table.")
    else:
        facts.append(f"It is placed in period {e['period']} of the periodic table.")
    if e["weight"]:
        facts.append(f"Its standard atomic weight is about {e['weight']}.")
    if e["radioactive"]:
        facts.append("All of its isotopes are radioactive.")
    if e["year"]:
        facts.append(f"It was discovered in {e['year']}.")
    elif e["ancient"]:
        facts.append("It has been known since ancient times.")
    intro = f"{e['name']} is a chemical element with the symbol {e['symbol']} and atomic number {e['z']}."
    return _paragraph(intro, facts, rng)


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------


def _country_question(category: str, c: dict) -> tuple[str, list[str]]:
    if category == "capital":
        return f"What is the capital of {c['name']}?", c["capital_aliases"]
    if category == "country_by_capital":
        return f"{c['capital']} is the capital of which country?", c["aliases"]
    if category == "currency":
        return f"What is the official currency of {c['name']}?", c["currency"]["aliases"]
    return (f"What is the international telephone calling code of {c['name']}?",
            [f"+{c['calling']}", c["calling"]])


def _element_question(category: str, e: dict) -> tuple[str, list[str]]:
    name = e["name"].lower()
    if category == "element_symbol":
        return f"What is the chemical symbol of {name}?", [e["symbol"]]
    if category == "element_by_symbol":
        return f"Which chemical element has the symbol {e['symbol']}?", [e["name"], *e["aliases"]]
    if category == "atomic_number":
        return f"What is the atomic number of {name}?", [str(e["z"])]
    if category == "element_by_number":
        return f"Which chemical element has atomic number {e['z']}?", [e["name"], *e["aliases"], e["symbol"]]
    return f"In which year was the chemical element {name} discovered?", [str(e["year"])]


def _eligible(category: str, countries: dict, elements: dict) -> list[dict]:
    countries = {a3: c for a3, c in countries.items() if a3 not in AMBIGUOUS_COUNTRY_NAMES}
    if category in ("capital", "country_by_capital"):
        return [c for c in countries.values() if c["capital"]]
    if category == "currency":
        per_code: Counter = Counter()
        pool = []
        for c in sorted(countries.values(), key=lambda c: (not c["prominent"], c["plain"])):
            if c["currency"] and per_code[c["currency"]["code"]] < 2:  # at most two per shared currency
                per_code[c["currency"]["code"]] += 1
                pool.append(c)
        return pool
    if category == "calling_code":
        return [c for c in countries.values() if c["calling"]]
    if category == "discovery_year":
        return [e for e in elements.values() if e["year"]]
    return list(elements.values())


def _is_easy(category: str, subject: dict) -> bool:
    if category in ALWAYS_HARD:
        return False
    return subject["prominent"] if "alpha3" in subject else subject["common"]


def _select(countries: dict, elements: dict, seed: int) -> dict[str, dict[str, list[dict]]]:
    """Seeded choice of subjects per category and difficulty; paired categories share no subject."""
    chosen: dict[str, dict[str, list[dict]]] = {}
    for category, (n_easy, n_hard) in QUOTAS.items():
        taken = set()
        if category in PAIRED:
            taken = {_key(s) for d in chosen[PAIRED[category]].values() for s in d}
        pool = sorted((s for s in _eligible(category, countries, elements) if _key(s) not in taken), key=_key)
        random.Random(f"{seed}/select/{category}").shuffle(pool)
        chosen[category] = {}
        for difficulty, quota in (("easy", n_easy), ("hard", n_hard)):
            matching = [s for s in pool if _is_easy(category, s) == (difficulty == "easy")]
            if len(matching) < quota:
                raise RuntimeError(f"{category}/{difficulty}: only {len(matching)} subjects for {quota} questions")
            chosen[category][difficulty] = matching[:quota]
    return chosen


def _key(subject: dict) -> str:
    return subject.get("alpha3") or f"{subject['z']:03d}"


def kbqa_records(seed: int = 0) -> list[dict[str, Any]]:
    """All kbqa records of both splits, in id order within each category; needs the fact packages."""
    pycountry, fetch_table = _require_fact_packages()
    countries, elements = _load_countries(pycountry), _load_elements(fetch_table)
    records = []
    for category, by_difficulty in _select(countries, elements, seed).items():
        subjects = sorted(((s, d) for d, ss in by_difficulty.items() for s in ss), key=lambda sd: _key(sd[0]))
        for number, (subject, difficulty) in enumerate(subjects, start=1):
            rng = random.Random(f"{seed}/evidence/{category}/{_key(subject)}")
            if "alpha3" in subject:
                question, answers = _country_question(category, subject)
                evidence, name = _country_evidence(subject, rng), subject["plain"]
            else:
                question, answers = _element_question(category, subject)
                evidence, name = _element_evidence(subject, rng), subject["name"]
            records.append({
                "id": f"kbqa-{category.replace('_', '-')}-{number:04d}",
                "question": question,
                "answers": answers,
                "evidence": evidence,
                "source": "kbqa",
                "task": "qa",
                "extra": {"category": category, "difficulty": difficulty, "subject": name},
            })
    return records


def stratified_split(records: list[dict], seed: int, strata_keys: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """Seeded ~75/25 split inside each stratum (values of extra[k] for k in strata_keys)."""
    strata: dict[tuple, list[dict]] = {}
    for record in sorted(records, key=lambda r: r["id"]):
        strata.setdefault(tuple(record["extra"][k] for k in strata_keys), []).append(record)
    train, test = [], []
    for stratum in sorted(strata):
        members = strata[stratum]
        random.Random(f"{seed}/split/{'/'.join(map(str, stratum))}").shuffle(members)
        n_test = min(max(1, round(len(members) * TEST_FRACTION)), len(members) - 1) if len(members) > 1 else 0
        test += members[:n_test]
        train += members[n_test:]
    return sorted(train, key=lambda r: r["id"]), sorted(test, key=lambda r: r["id"])


# --------------------------------------------------------------------------------------------
# Writing and validation
# --------------------------------------------------------------------------------------------


def validate_record(record: dict[str, Any]) -> None:
    """Raise ValueError unless `record` follows the canonical schema of the bundled files."""
    where = f"record {record.get('id', '?')!r}"
    if tuple(record) != SCHEMA_KEYS:
        raise ValueError(f"{where}: keys {tuple(record)} != {SCHEMA_KEYS}")
    for key in ("id", "question", "evidence", "source"):
        if not isinstance(record[key], str) or not record[key].strip():
            raise ValueError(f"{where}: {key} must be a non-empty string")
    answers = record["answers"]
    if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise ValueError(f"{where}: answers must be a non-empty list of non-empty strings")
    if len({a.lower() for a in answers}) != len(answers):
        raise ValueError(f"{where}: duplicate answers {answers}")
    if record["task"] != "qa" or not record["question"].endswith("?"):
        raise ValueError(f"{where}: task must be 'qa' and the question must end with '?'")
    if answers[0].lower() not in record["evidence"].lower():
        raise ValueError(f"{where}: gold answer {answers[0]!r} not in the evidence")
    extra = record["extra"]
    if record["source"] == "kbqa":
        if extra.get("category") not in QUOTAS or extra.get("difficulty") not in ("easy", "hard") \
                or not extra.get("subject"):
            raise ValueError(f"{where}: extra needs category, difficulty and subject, got {extra}")
        if "\n" in record["evidence"]:
            raise ValueError(f"{where}: kbqa evidence must be one paragraph")
    elif record["source"] == "multihop":
        paragraphs = extra.get("paragraphs")
        if extra.get("type") not in ("bridge", "comparison") or not isinstance(paragraphs, list) \
                or len(paragraphs) != 2 or any(set(p) != {"title", "text"} for p in paragraphs):
            raise ValueError(f"{where}: extra needs type and two {{title, text}} paragraphs")
        if record["evidence"] != _join_paragraphs(paragraphs):
            raise ValueError(f"{where}: evidence is not the joined paragraphs")
    else:
        raise ValueError(f"{where}: unknown source {record['source']!r}")


def write_jsonl(records: list[dict], path: Path) -> None:
    """Validate and write one JSON object per line (UTF-8, '\\n' line ends)."""
    for record in records:
        validate_record(record)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _counts(train: list[dict], test: list[dict], key: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for split, records in (("train", train), ("test", test)):
        for record in records:
            out.setdefault(record["extra"][key], {"train": 0, "test": 0})[split] += 1
    return dict(sorted(out.items()))


def build_kbqa(out_dir: str | Path, seed: int = 0) -> dict[str, Any]:
    """Write kbqa_train.jsonl and kbqa_test.jsonl into out_dir; return counts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = kbqa_records(seed)
    questions = Counter(r["question"] for r in records)
    if len(questions) != len(records) or len({r["id"] for r in records}) != len(records):
        raise RuntimeError("duplicate kbqa ids or questions")
    train, test = stratified_split(records, seed, ("category", "difficulty"))
    write_jsonl(train, out / "kbqa_train.jsonl")
    write_jsonl(test, out / "kbqa_test.jsonl")
    return {"train": len(train), "test": len(test),
            "by_category": _counts(train, test, "category"),
            "by_difficulty": _counts(train, test, "difficulty")}


# --------------------------------------------------------------------------------------------
# Hand-written multi-hop set (HotpotQA form). Each item: (type, question, answers, first
# paragraph, second paragraph); a paragraph is (title, text). Bridge questions need the first
# paragraph to find the bridge entity and the second for the answer; comparison questions need
# one number or date from each paragraph. Facts are stable and were checked by hand; nothing
# time-sensitive (office holders, populations, records that may fall).
# --------------------------------------------------------------------------------------------

MULTIHOP_ITEMS: list[tuple[str, str, list[str], tuple[str, str], tuple[str, str]]] = [
    ("bridge", "In which village was the author of Pride and Prejudice born?", ["Steventon"],
     ("Pride and Prejudice", "Pride and Prejudice is a novel first published in 1813. It was written by "
      "Jane Austen and follows Elizabeth Bennet and her sisters."),
     ("Jane Austen", "Jane Austen was an English novelist born on 16 December 1775 in Steventon, a village "
      "in Hampshire. She died in Winchester in 1817.")),
    ("bridge", "In which city was the composer of the opera The Magic Flute born?", ["Salzburg"],
     ("The Magic Flute", "The Magic Flute is an opera in two acts composed by Wolfgang Amadeus Mozart. "
      "It premiered in Vienna in 1791."),
     ("Wolfgang Amadeus Mozart", "Wolfgang Amadeus Mozart was born in Salzburg in 1756. He died in Vienna "
      "in 1791 at the age of 35.")),
    ("bridge", "Which river flows through the capital of Hungary?", ["Danube", "the Danube", "Duna"],
     ("Hungary", "Hungary is a landlocked country in Central Europe. Its capital and largest city is "
      "Budapest."),
     ("Budapest", "Budapest was formed in 1873 by the union of the towns of Buda, Óbuda and Pest. The "
      "Danube flows through the city, separating Buda on the west bank from Pest on the east bank.")),
    ("bridge", "In which city was the scientist who published the general theory of relativity born?",
     ["Ulm"],
     ("General relativity", "General relativity is a theory of gravitation published by Albert Einstein "
      "in 1915. It describes gravity as the curvature of spacetime caused by mass and energy."),
     ("Albert Einstein", "Albert Einstein was born in Ulm, in the Kingdom of Württemberg, in 1879. He "
      "received the 1921 Nobel Prize in Physics for his explanation of the photoelectric effect.")),
    ("bridge", "In which city was the engineer whose company built the Eiffel Tower born?", ["Dijon"],
     ("Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris. It "
      "was built by the company of the engineer Gustave Eiffel and completed in 1889."),
     ("Gustave Eiffel", "Gustave Eiffel was a French civil engineer born in Dijon in 1832. His company also "
      "designed the internal iron framework of the Statue of Liberty.")),
    ("bridge", "In which town was the sculptor of the Statue of Liberty born?", ["Colmar"],
     ("Statue of Liberty", "The Statue of Liberty stands on Liberty Island in New York Harbor. It was a gift "
      "from the people of France and was dedicated in 1886. Its sculptor was Frédéric Auguste Bartholdi."),
     ("Frédéric Auguste Bartholdi", "Frédéric Auguste Bartholdi was a French sculptor born in Colmar, "
      "Alsace, in 1834. A museum devoted to his work now occupies the house where he was born.")),
    ("bridge", "Which astronomer discovered the planet after which uranium is named?",
     ["William Herschel", "Herschel", "Sir William Herschel"],
     ("Uranium", "Uranium is a chemical element with the symbol U and atomic number 92. It was identified "
      "in 1789 and named after the planet Uranus, which had been discovered eight years earlier."),
     ("Uranus", "Uranus is the seventh planet from the Sun. It was discovered by William Herschel in 1781, "
      "the first planet to be found with a telescope.")),
    ("bridge", "What is the capital of the country in which the Taj Mahal stands?", ["New Delhi"],
     ("Taj Mahal", "The Taj Mahal is a white marble mausoleum on the bank of the Yamuna river in Agra, "
      "India. It was built by the Mughal emperor Shah Jahan as a tomb for his wife Mumtaz Mahal."),
     ("India", "India is a country in South Asia with a coastline on the Indian Ocean. Its capital is New "
      "Delhi.")),
    ("bridge", "What is the capital of the Australian state off whose coast the Great Barrier Reef lies?",
     ["Brisbane"],
     ("Great Barrier Reef", "The Great Barrier Reef is the world's largest coral reef system. It lies in the "
      "Coral Sea, off the coast of Queensland in north-eastern Australia."),
     ("Queensland", "Queensland is a state in north-eastern Australia. Its capital and largest city is "
      "Brisbane.")),
    ("bridge", "In which town was the painter of The Starry Night born?", ["Zundert"],
     ("The Starry Night", "The Starry Night is an oil painting by Vincent van Gogh, painted in June 1889. It "
      "shows the view from his room at the asylum of Saint-Rémy-de-Provence, with an imaginary village."),
     ("Vincent van Gogh", "Vincent van Gogh was a Dutch painter born in Zundert, in the Netherlands, in "
      "1853. He died in Auvers-sur-Oise, France, in 1890.")),
    ("bridge", "Near which Tuscan town was the painter of the Mona Lisa born?", ["Vinci"],
     ("Mona Lisa", "The Mona Lisa is a half-length portrait painted by Leonardo da Vinci in the early "
      "sixteenth century. It hangs in the Louvre in Paris."),
     ("Leonardo da Vinci", "Leonardo da Vinci was an Italian polymath of the Renaissance. He was born in "
      "1452 near the town of Vinci in Tuscany and died in Amboise, France, in 1519.")),
    ("bridge", "On which family estate was the author of War and Peace born?", ["Yasnaya Polyana"],
     ("War and Peace", "War and Peace is a novel by Leo Tolstoy, first published in full in 1869. It follows "
      "several aristocratic Russian families during the Napoleonic Wars."),
     ("Leo Tolstoy", "Leo Tolstoy was a Russian writer born in 1828 at Yasnaya Polyana, his family's estate "
      "in Tula province. He also wrote the novel Anna Karenina.")),
    ("bridge", "In which English city was the physicist who discovered the electron born?",
     ["Manchester", "Cheetham Hill"],
     ("Electron", "The electron was discovered in 1897 by the British physicist J. J. Thomson during "
      "experiments with cathode rays. It carries a negative electric charge."),
     ("J. J. Thomson", "J. J. Thomson was born in 1856 in Cheetham Hill, Manchester, England. He received "
      "the Nobel Prize in Physics in 1906.")),
    ("bridge", "In which US state was the first person to walk on the Moon born?", ["Ohio"],
     ("Apollo 11", "Apollo 11 was the spaceflight that first landed humans on the Moon, in July 1969. Its "
      "commander, Neil Armstrong, was the first person to step onto the lunar surface."),
     ("Neil Armstrong", "Neil Armstrong was an American astronaut and aeronautical engineer. He was born in "
      "1930 near Wapakoneta, Ohio.")),
    ("bridge", "Into which sea does the river on which Cairo stands flow?",
     ["Mediterranean Sea", "Mediterranean", "the Mediterranean"],
     ("Cairo", "Cairo is the capital of Egypt. The city lies on the banks of the Nile, just south of the "
      "point where the river spreads out into its delta."),
     ("Nile", "The Nile is a major north-flowing river in north-eastern Africa. It empties into the "
      "Mediterranean Sea through a large delta in northern Egypt.")),
    ("bridge", "Which ocean does the strait spanned by the Golden Gate Bridge connect to San Francisco Bay?",
     ["Pacific Ocean", "Pacific", "the Pacific"],
     ("Golden Gate Bridge", "The Golden Gate Bridge is a suspension bridge in California that opened in 1937. "
      "It spans the Golden Gate, the strait at the entrance to San Francisco Bay."),
     ("Golden Gate", "The Golden Gate is a strait on the west coast of North America. It connects San "
      "Francisco Bay to the Pacific Ocean.")),
    ("bridge", "Who succeeded the founder of the Mongol Empire as Great Khan?",
     ["Ögedei", "Ogedei", "Ögedei Khan", "Ogedei Khan"],
     ("Mongol Empire", "The Mongol Empire was founded in 1206 when Genghis Khan was proclaimed ruler of the "
      "Mongols. It grew into the largest contiguous land empire in history."),
     ("Genghis Khan", "Genghis Khan died in 1227. His third son, Ögedei, succeeded him as Great Khan in 1229.")),
    ("bridge", "In which city was the physicist after whom the SI unit of electric current is named born?",
     ["Lyon", "Lyons"],
     ("Ampere", "The ampere is the SI base unit of electric current. It is named after the French physicist "
      "André-Marie Ampère."),
     ("André-Marie Ampère", "André-Marie Ampère was born in Lyon in 1775. He was one of the founders of the "
      "science of electromagnetism, which he called electrodynamics.")),
    ("bridge", "In which Scottish town was the inventor after whom the SI unit of power is named born?",
     ["Greenock"],
     ("Watt", "The watt is the SI unit of power, equal to one joule per second. It is named after the "
      "Scottish inventor James Watt."),
     ("James Watt", "James Watt was born in Greenock, Scotland, in 1736. His improvements to the steam "
      "engine were central to the Industrial Revolution.")),
    ("bridge", "In which city was the physicist after whom the SI unit of temperature is named born?",
     ["Belfast"],
     ("Kelvin", "The kelvin is the SI base unit of thermodynamic temperature. It is named after William "
      "Thomson, 1st Baron Kelvin."),
     ("William Thomson, 1st Baron Kelvin", "William Thomson, later Lord Kelvin, was born in Belfast in 1824. "
      "He spent most of his career as a professor at the University of Glasgow.")),
    ("bridge", "In which city was the physicist after whom the SI unit of frequency is named born?",
     ["Hamburg"],
     ("Hertz", "The hertz is the SI unit of frequency, equal to one cycle per second. It is named after the "
      "German physicist Heinrich Hertz."),
     ("Heinrich Hertz", "Heinrich Hertz was born in Hamburg in 1857. He was the first to conclusively prove "
      "the existence of electromagnetic waves.")),
    ("bridge", "In which Italian city was the physicist after whom the volt is named born?", ["Como"],
     ("Volt", "The volt is the SI unit of electric potential difference. It is named after the Italian "
      "physicist Alessandro Volta."),
     ("Alessandro Volta", "Alessandro Volta was born in Como in 1745. In 1800 he invented the voltaic pile, "
      "an early electric battery.")),
    ("bridge", "What is the capital of the country where Angkor Wat stands?", ["Phnom Penh"],
     ("Angkor Wat", "Angkor Wat is a temple complex in Cambodia built in the early twelfth century. It was "
      "originally dedicated to the Hindu god Vishnu."),
     ("Cambodia", "Cambodia is a country in mainland Southeast Asia. Its capital and largest city is Phnom "
      "Penh.")),
    ("bridge", "What is the capital of the country where Machu Picchu is located?", ["Lima"],
     ("Machu Picchu", "Machu Picchu is a fifteenth-century Inca citadel high in the Andes Mountains of "
      "southern Peru. It was brought to international attention by Hiram Bingham in 1911."),
     ("Peru", "Peru is a country in western South America with a coastline on the Pacific Ocean. Its capital "
      "is Lima.")),
    ("bridge", "What is the capital of the country in which the ancient city of Petra lies?", ["Amman"],
     ("Petra", "Petra is an ancient city in southern Jordan, famous for its architecture carved into "
      "sandstone cliffs. It was the capital of the Nabataean kingdom."),
     ("Jordan", "Jordan is a country in Western Asia. Its capital and largest city is Amman.")),
    ("bridge", "What was the real name of the author of Nineteen Eighty-Four?",
     ["Eric Arthur Blair", "Eric Blair"],
     ("Nineteen Eighty-Four", "Nineteen Eighty-Four is a dystopian novel by George Orwell, published in 1949. "
      "It introduced the figure of Big Brother."),
     ("George Orwell", "George Orwell was the pen name of Eric Arthur Blair. He was born in 1903 in Motihari, "
      "in British India, and was educated at Eton.")),
    ("bridge", "In which town was the author of Hamlet born?", ["Stratford-upon-Avon", "Stratford"],
     ("Hamlet", "Hamlet is a tragedy written by William Shakespeare, probably between 1599 and 1601. It is "
      "set in Denmark."),
     ("William Shakespeare", "William Shakespeare was born in Stratford-upon-Avon, England, and was baptised "
      "there in April 1564. He died in the same town in 1616.")),
    ("bridge", "In which town was the author of Don Quixote born?", ["Alcalá de Henares", "Alcala de Henares"],
     ("Don Quixote", "Don Quixote is a Spanish novel by Miguel de Cervantes. It was published in two parts, "
      "in 1605 and 1615."),
     ("Miguel de Cervantes", "Miguel de Cervantes was born in 1547 in Alcalá de Henares, near Madrid. He "
      "lost the use of his left hand at the Battle of Lepanto in 1571.")),
    ("bridge", "In which city was the author of the Divine Comedy born?", ["Florence", "Firenze"],
     ("Divine Comedy", "The Divine Comedy is a long narrative poem by Dante Alighieri. It was completed "
      "shortly before the poet's death in 1321."),
     ("Dante Alighieri", "Dante Alighieri was born in Florence around 1265. He was exiled from the city in "
      "1302 and died in Ravenna.")),
    ("bridge", "In which city was the author of Moby-Dick born?", ["New York City", "New York"],
     ("Moby-Dick", "Moby-Dick is a novel by the American writer Herman Melville, first published in 1851. It "
      "tells of Captain Ahab's hunt for a white whale."),
     ("Herman Melville", "Herman Melville was born in New York City in 1819. Before becoming a writer he "
      "worked as a sailor, including on a whaling ship.")),
    ("bridge", "In which city was the author of Faust born?", ["Frankfurt", "Frankfurt am Main"],
     ("Faust", "Faust is a tragic play in two parts by Johann Wolfgang von Goethe. Part One was published in "
      "1808 and Part Two in 1832, after the author's death."),
     ("Johann Wolfgang von Goethe", "Johann Wolfgang von Goethe was born in Frankfurt am Main in 1749. He "
      "spent most of his adult life in Weimar.")),
    ("bridge", "In which English town was the author of On the Origin of Species born?", ["Shrewsbury"],
     ("On the Origin of Species", "On the Origin of Species is a work of natural history by Charles Darwin, "
      "published in 1859. It introduced the theory of evolution by natural selection."),
     ("Charles Darwin", "Charles Darwin was an English naturalist born in Shrewsbury in 1809. As a young man "
      "he sailed around the world on the survey ship HMS Beagle.")),
    ("bridge", "In which city was Friedrich Engels's co-author of The Communist Manifesto born?", ["Trier"],
     ("The Communist Manifesto", "The Communist Manifesto is a political pamphlet first published in London "
      "in 1848. It was written by Karl Marx and Friedrich Engels."),
     ("Karl Marx", "Karl Marx was a German philosopher and economist born in Trier in 1818. He spent much of "
      "his later life in London, where he died in 1883.")),
    ("bridge", "Near which town in Ayrshire was the discoverer of penicillin born?", ["Darvel"],
     ("Penicillin", "Penicillin, one of the first antibiotics, was discovered in 1928 by the Scottish "
      "physician Alexander Fleming. He noticed that a Penicillium mould killed the bacteria around it."),
     ("Alexander Fleming", "Alexander Fleming was born in 1881 at Lochfield, a farm near Darvel in Ayrshire, "
      "Scotland. He shared the Nobel Prize in Physiology or Medicine in 1945.")),
    ("bridge", "In which city was the inventor who received the first US patent for the telephone born?",
     ["Edinburgh"],
     ("Telephone", "The telephone converts sound into electrical signals and back. In 1876 Alexander Graham "
      "Bell was granted the first United States patent for a telephone."),
     ("Alexander Graham Bell", "Alexander Graham Bell was born in Edinburgh, Scotland, in 1847. He later "
      "lived in Canada and the United States.")),
    ("bridge", "In which city was the scientist who discovered polonium together with her husband born?",
     ["Warsaw", "Warszawa"],
     ("Polonium", "Polonium was discovered in 1898 by Marie Curie and Pierre Curie. It was named after "
      "Poland, Marie Curie's native country."),
     ("Marie Curie", "Marie Curie was born Maria Skłodowska in Warsaw in 1867. She was the first person to "
      "win Nobel Prizes in two different sciences, physics and chemistry.")),
    ("bridge", "Near which English town was James Watson's co-discoverer of the DNA double helix born?",
     ["Northampton"],
     ("DNA double helix", "The double-helix structure of DNA was described in 1953 by James Watson and "
      "Francis Crick. They worked at the Cavendish Laboratory of the University of Cambridge."),
     ("Francis Crick", "Francis Crick was born in 1916 in Weston Favell, then a village near Northampton, "
      "England. He later worked at the Salk Institute in California.")),
    ("bridge", "Into which sea does the river that flows through Vienna empty?", ["Black Sea"],
     ("Vienna", "Vienna is the capital of Austria. The city lies on the Danube, at the eastern edge of the "
      "Alps."),
     ("Danube", "The Danube rises in the Black Forest in Germany and flows generally eastward. It empties "
      "into the Black Sea through a delta in Romania and Ukraine.")),
    ("bridge", "Into which body of water does the river that flows through Paris empty?",
     ["English Channel", "the Channel", "La Manche"],
     ("Paris", "Paris is the capital of France. The river Seine flows through the city from east to west."),
     ("Seine", "The Seine is a river in northern France about 775 kilometres long. It flows into the English "
      "Channel at Le Havre.")),
    ("bridge", "From which English port did the ship that carried the Pilgrims to America make its final "
     "departure in 1620?", ["Plymouth"],
     ("Pilgrims", "The Pilgrims were English settlers who founded Plymouth Colony in present-day "
      "Massachusetts in 1620. They crossed the Atlantic aboard the Mayflower."),
     ("Mayflower", "The Mayflower was an English merchant ship. It set out from Southampton in August 1620 but "
      "was forced back by leaks in its companion ship. It made its final departure from Plymouth, England, on "
      "6 September 1620.")),
    ("bridge", "On which island was the emperor defeated at the Battle of Waterloo born?", ["Corsica"],
     ("Battle of Waterloo", "The Battle of Waterloo was fought on 18 June 1815 in present-day Belgium. It "
      "ended in the defeat of the French emperor Napoleon Bonaparte."),
     ("Napoleon", "Napoleon Bonaparte was born in Ajaccio, on the island of Corsica, in 1769. He died in "
      "exile on the island of Saint Helena in 1821.")),
    ("bridge", "The city where the Titanic was built is the capital of which part of the United Kingdom?",
     ["Northern Ireland"],
     ("Titanic", "RMS Titanic was a British ocean liner built by Harland and Wolff in Belfast. It sank in the "
      "North Atlantic in April 1912 on its maiden voyage."),
     ("Belfast", "Belfast is the capital and largest city of Northern Ireland. It stands on the River Lagan.")),
    ("bridge", "What is the name of the larger moon of the planet known as the Red Planet?", ["Phobos"],
     ("Mars", "Mars is the fourth planet from the Sun. It is often called the Red Planet because of the iron "
      "oxide on its surface."),
     ("Moons of Mars", "Mars has two small moons, Phobos and Deimos. Phobos is the larger of the two and "
      "orbits closer to the planet.")),
    ("bridge", "What is the name of the largest moon of the largest planet in the Solar System?",
     ["Ganymede"],
     ("Jupiter", "Jupiter is the fifth planet from the Sun and the largest planet in the Solar System. It is "
      "a gas giant made mostly of hydrogen and helium."),
     ("Ganymede", "Ganymede is the largest moon of Jupiter and the largest moon in the Solar System. It was "
      "discovered by Galileo Galilei in 1610.")),
    ("bridge", "Which astronomer discovered the largest moon of the sixth planet from the Sun?",
     ["Christiaan Huygens", "Huygens"],
     ("Saturn", "Saturn is the sixth planet from the Sun and is known for its prominent ring system. Its "
      "largest moon is Titan."),
     ("Titan", "Titan is the largest moon of Saturn and the only moon known to have a dense atmosphere. It "
      "was discovered in 1655 by the Dutch astronomer Christiaan Huygens.")),
    ("bridge", "Who discovered the gas that makes up most of Earth's atmosphere?", ["Daniel Rutherford"],
     ("Atmosphere of Earth", "Earth's atmosphere is about 78 percent nitrogen and 21 percent oxygen by "
      "volume. Argon makes up most of the remaining one percent."),
     ("Nitrogen", "Nitrogen was discovered in 1772 by the Scottish physician Daniel Rutherford, who called it "
      "noxious air. It is a colourless and odourless gas with atomic number 7.")),
    ("bridge", "Which scientist first recognized the lightest chemical element as a distinct substance?",
     ["Henry Cavendish", "Cavendish"],
     ("Hydrogen", "Hydrogen is the lightest chemical element, with atomic number 1. It is the most abundant "
      "element in the universe."),
     ("Henry Cavendish", "Henry Cavendish was an English scientist who in 1766 recognized hydrogen as a "
      "distinct substance. He called the gas inflammable air.")),
    ("bridge", "In which city was the mathematician after whom the SI unit of pressure is named born?",
     ["Clermont-Ferrand"],
     ("Pascal (unit)", "The pascal is the SI unit of pressure, equal to one newton per square metre. It is "
      "named after the French mathematician and physicist Blaise Pascal."),
     ("Blaise Pascal", "Blaise Pascal was born in Clermont-Ferrand, France, in 1623. As a teenager he built "
      "one of the first mechanical calculators.")),
    ("comparison", "Which was founded first, Harvard University or Yale University?",
     ["Harvard University", "Harvard"],
     ("Harvard University", "Harvard University is a private research university in Cambridge, "
      "Massachusetts. It was founded in 1636 and is the oldest institution of higher learning in the United "
      "States."),
     ("Yale University", "Yale University is a private research university in New Haven, Connecticut. It was "
      "founded in 1701 as the Collegiate School and later renamed after the benefactor Elihu Yale.")),
    ("comparison", "Which planet was discovered first, Uranus or Neptune?", ["Uranus"],
     ("Uranus", "Uranus is the seventh planet from the Sun. It was discovered by William Herschel in 1781, "
      "the first planet to be found with a telescope."),
     ("Neptune", "Neptune is the eighth and farthest known planet from the Sun. Its position was predicted "
      "mathematically before it was first observed by Johann Galle in 1846.")),
    ("comparison", "Which mountain is higher, K2 or Kangchenjunga?", ["K2"],
     ("K2", "K2 is the second-highest mountain on Earth, with a summit 8,611 metres above sea level. It lies "
      "in the Karakoram range on the border between China and Pakistan."),
     ("Kangchenjunga", "Kangchenjunga is the third-highest mountain on Earth, rising 8,586 metres above sea "
      "level. It lies in the Himalayas on the border between Nepal and the Indian state of Sikkim.")),
    ("comparison", "Which mountain is higher, Mont Blanc or the Matterhorn?", ["Mont Blanc"],
     ("Mont Blanc", "Mont Blanc is the highest mountain in the Alps, rising about 4,800 metres above sea "
      "level. It lies on the border between France and Italy."),
     ("Matterhorn", "The Matterhorn is a pyramid-shaped peak in the Pennine Alps on the border between "
      "Switzerland and Italy. Its summit is 4,478 metres above sea level.")),
    ("comparison", "Which lake is deeper, Lake Baikal or Lake Tanganyika?", ["Lake Baikal", "Baikal"],
     ("Lake Baikal", "Lake Baikal is a rift lake in southern Siberia, Russia. With a maximum depth of about "
      "1,642 metres, it is the deepest lake in the world."),
     ("Lake Tanganyika", "Lake Tanganyika is a large rift lake in East Africa shared by four countries. Its "
      "maximum depth is about 1,470 metres.")),
    ("comparison", "Which element has the higher atomic number, gold or platinum?", ["Gold", "Au"],
     ("Gold", "Gold is a chemical element with the symbol Au and atomic number 79. It is a dense, soft and "
      "highly malleable precious metal."),
     ("Platinum", "Platinum is a chemical element with the symbol Pt and atomic number 78. It is a dense, "
      "unreactive precious metal used in catalytic converters.")),
    ("comparison", "Which noble gas was discovered first, argon or neon?", ["Argon", "Ar"],
     ("Argon", "Argon is a noble gas with atomic number 18. It was discovered in 1894 by Lord Rayleigh and "
      "William Ramsay."),
     ("Neon", "Neon is a noble gas with atomic number 10. It was discovered in 1898 in London by William "
      "Ramsay and Morris Travers.")),
    ("comparison", "Which university is older, the University of Oxford or the University of Cambridge?",
     ["University of Oxford", "Oxford", "Oxford University"],
     ("University of Oxford", "The University of Oxford is a collegiate university in Oxford, England. There "
      "is evidence of teaching there as early as 1096, making it the oldest university in the "
      "English-speaking world."),
     ("University of Cambridge", "The University of Cambridge is a collegiate university in Cambridge, "
      "England. It was founded in 1209 by scholars who left Oxford after a dispute with the townspeople.")),
    ("comparison", "Who was born first, Wolfgang Amadeus Mozart or Ludwig van Beethoven?",
     ["Wolfgang Amadeus Mozart", "Mozart"],
     ("Wolfgang Amadeus Mozart", "Wolfgang Amadeus Mozart was a composer of the Classical period. He was "
      "born in Salzburg in 1756."),
     ("Ludwig van Beethoven", "Ludwig van Beethoven was a German composer and pianist. He was born in Bonn in "
      "1770 and spent most of his adult life in Vienna.")),
    ("comparison", "Which novel was published first, Pride and Prejudice or Frankenstein?",
     ["Pride and Prejudice"],
     ("Pride and Prejudice", "Pride and Prejudice is a novel by Jane Austen. It was first published in 1813."),
     ("Frankenstein", "Frankenstein; or, The Modern Prometheus is a novel by Mary Shelley. It was first "
      "published anonymously in London in 1818.")),
    ("comparison", "Which novel was published first, Moby-Dick or Great Expectations?", ["Moby-Dick",
                                                                                          "Moby Dick"],
     ("Moby-Dick", "Moby-Dick is a novel by the American writer Herman Melville. It was first published in "
      "1851."),
     ("Great Expectations", "Great Expectations is a novel by Charles Dickens about the orphan Pip. It was "
      "first published in serial form in 1860 and 1861.")),
    ("comparison", "Which bridge opened first, the Golden Gate Bridge or the Sydney Harbour Bridge?",
     ["Sydney Harbour Bridge", "Sydney Harbor Bridge"],
     ("Golden Gate Bridge", "The Golden Gate Bridge is a suspension bridge spanning the Golden Gate strait in "
      "California. It opened to traffic in 1937."),
     ("Sydney Harbour Bridge", "The Sydney Harbour Bridge is a steel arch bridge across Sydney Harbour in "
      "Australia. It was opened in 1932.")),
    ("comparison", "Which city hosted the Summer Olympic Games first, Tokyo or Mexico City?", ["Tokyo"],
     ("1964 Summer Olympics", "The 1964 Summer Olympics were held in Tokyo, Japan. They were the first "
      "Olympic Games held in Asia."),
     ("1968 Summer Olympics", "The 1968 Summer Olympics were held in Mexico City. They were the first "
      "Olympic Games held in Latin America.")),
    ("comparison", "Who reached the South Pole first, Roald Amundsen or Robert Falcon Scott?",
     ["Roald Amundsen", "Amundsen"],
     ("Roald Amundsen", "Roald Amundsen was a Norwegian polar explorer. His expedition reached the South Pole "
      "on 14 December 1911."),
     ("Robert Falcon Scott", "Robert Falcon Scott was a British Royal Navy officer and explorer. His party "
      "reached the South Pole on 17 January 1912 and died on the return journey.")),
    ("comparison", "Which planet is closer to the Sun, Mercury or Venus?", ["Mercury"],
     ("Mercury (planet)", "Mercury is the smallest planet in the Solar System and the closest to the Sun. It "
      "orbits the Sun once every 88 days."),
     ("Venus", "Venus is the second planet from the Sun. It has a thick carbon dioxide atmosphere and the "
      "hottest surface of any planet in the Solar System.")),
    ("comparison", "Which metal is denser, gold or lead?", ["Gold", "Au"],
     ("Gold", "Gold is a precious metal with the chemical symbol Au. Its density is about 19.3 grams per "
      "cubic centimetre."),
     ("Lead", "Lead is a soft, heavy metal with the chemical symbol Pb. Its density is about 11.3 grams per "
      "cubic centimetre.")),
    ("comparison", "Which metal has the higher melting point, tungsten or iron?", ["Tungsten", "W"],
     ("Tungsten", "Tungsten is a metal with the chemical symbol W. It has the highest melting point of all "
      "metals, about 3,422 degrees Celsius."),
     ("Iron", "Iron is a metal with the chemical symbol Fe and the main component of steel. It melts at about "
      "1,538 degrees Celsius.")),
    ("comparison", "Who was born first, Galileo Galilei or Johannes Kepler?", ["Galileo Galilei", "Galileo"],
     ("Galileo Galilei", "Galileo Galilei was an Italian astronomer and physicist. He was born in Pisa in "
      "1564."),
     ("Johannes Kepler", "Johannes Kepler was a German astronomer known for his laws of planetary motion. He "
      "was born in Weil der Stadt in 1571.")),
    ("comparison", "Who was born first, Henri Matisse or Pablo Picasso?", ["Henri Matisse", "Matisse"],
     ("Henri Matisse", "Henri Matisse was a French artist known for his expressive use of colour. He was "
      "born in Le Cateau-Cambrésis in 1869."),
     ("Pablo Picasso", "Pablo Picasso was a Spanish painter and sculptor who spent most of his adult life in "
      "France. He was born in Málaga in 1881.")),
    ("comparison", "Which canal opened first, the Suez Canal or the Panama Canal?", ["Suez Canal", "Suez"],
     ("Suez Canal", "The Suez Canal is an artificial waterway in Egypt connecting the Mediterranean Sea to "
      "the Red Sea. It opened in 1869."),
     ("Panama Canal", "The Panama Canal is an artificial waterway in Panama connecting the Atlantic and "
      "Pacific oceans. It opened in 1914.")),
    ("comparison", "Which desert is larger, the Sahara or the Gobi Desert?", ["Sahara", "Sahara Desert"],
     ("Sahara", "The Sahara is a desert covering much of North Africa. With an area of about 9 million "
      "square kilometres, it is the largest hot desert in the world."),
     ("Gobi Desert", "The Gobi Desert lies in northern China and southern Mongolia. It covers about 1.3 "
      "million square kilometres.")),
    ("comparison", "Which river is longer, the Danube or the Rhine?", ["Danube", "the Danube"],
     ("Danube", "The Danube is the second-longest river in Europe, about 2,850 kilometres long. It rises in "
      "the Black Forest in Germany and flows into the Black Sea."),
     ("Rhine", "The Rhine rises in the Swiss Alps and flows into the North Sea in the Netherlands. It is about "
      "1,230 kilometres long.")),
    ("comparison", "Which conflict ended first, the Hundred Years' War or the Wars of the Roses?",
     ["Hundred Years' War", "the Hundred Years' War"],
     ("Hundred Years' War", "The Hundred Years' War was a series of conflicts between England and France. It "
      "began in 1337 and ended in 1453."),
     ("Wars of the Roses", "The Wars of the Roses were civil wars fought over the English throne between the "
      "houses of Lancaster and York. They lasted from 1455 to 1487.")),
    ("comparison", "Who was born first, Frédéric Chopin or Franz Liszt?",
     ["Frédéric Chopin", "Chopin", "Frederic Chopin"],
     ("Frédéric Chopin", "Frédéric Chopin was a Polish composer and pianist of the Romantic era. He was born "
      "in Żelazowa Wola in 1810."),
     ("Franz Liszt", "Franz Liszt was a Hungarian composer and virtuoso pianist. He was born in Raiding in "
      "1811.")),
]


def _join_paragraphs(paragraphs: list[dict[str, str]]) -> str:
    """Evidence text of a multi-hop item: 'Title: text' paragraphs separated by a blank line."""
    return "\n\n".join(f"{p['title']}: {p['text']}" for p in paragraphs)


def multihop_records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, test) multi-hop records; every third item of each type goes to test."""
    train, test, seen = [], [], Counter()
    for number, (kind, question, answers, first, second) in enumerate(MULTIHOP_ITEMS, start=1):
        paragraphs = [{"title": t, "text": x} for t, x in (first, second)]
        record = {
            "id": f"multihop-{number:04d}",
            "question": question,
            "answers": list(answers),
            "evidence": _join_paragraphs(paragraphs),
            "source": "multihop",
            "task": "qa",
            "extra": {"paragraphs": paragraphs, "type": kind},
        }
        seen[kind] += 1
        (test if seen[kind] % 3 == 0 else train).append(record)
    return train, test


def build_multihop(out_dir: str | Path) -> dict[str, Any]:
    """Write multihop_train.jsonl and multihop_test.jsonl into out_dir; return counts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, test = multihop_records()
    if len({r["question"] for r in train + test}) != len(train) + len(test):
        raise RuntimeError("duplicate multihop questions")
    write_jsonl(train, out / "multihop_train.jsonl")
    write_jsonl(test, out / "multihop_test.jsonl")
    return {"train": len(train), "test": len(test), "by_type": _counts(train, test, "type")}


TRUTHFULQA_SAMPLE_SIZE = 100
TRUTHFULQA_KEYS = ("type", "category", "question", "best_answer", "correct_answers", "incorrect_answers", "source")


def build_truthfulqa_sample(source: str | Path, out_dir: str | Path, size: int = TRUTHFULQA_SAMPLE_SIZE,
                            seed: int = 0) -> dict[str, Any]:
    """Write truthfulqa_sample.jsonl: `size` questions of the 817-question TruthfulQA file drawn with
    random.Random(seed), kept in their original order, fields as in the source (Apache-2.0)."""
    with open(source, encoding="utf-8") as handle:  # a file's lines break at "\n" only, never inside a string
        rows = [json.loads(line) for line in handle if line.strip()]
    for index, row in enumerate(rows):
        missing = [k for k in TRUTHFULQA_KEYS if k not in row]
        if missing:
            raise ValueError(f"{source}:{index + 1}: missing {', '.join(missing)}")
    chosen = sorted(random.Random(seed).sample(range(len(rows)), size))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "truthfulqa_sample.jsonl", "w", encoding="utf-8", newline="\n") as handle:
        for index in chosen:
            record = {"id": f"truthfulqa-{index}", **{k: rows[index][k] for k in TRUTHFULQA_KEYS}}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return {"rows": size, "of": len(rows), "by_type": dict(Counter(rows[i]["type"] for i in chosen))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line: rebuild the bundled kbqa and multihop files (or, with --truthfulqa, only the TruthfulQA
    sample) and print their counts."""
    parser = argparse.ArgumentParser(prog="python scripts/data_build.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data", help="output folder (default: data)")
    parser.add_argument("--seed", type=int, default=0, help="seed for subject choice, evidence order and split")
    parser.add_argument("--truthfulqa", metavar="PATH", help="write only truthfulqa_sample.jsonl, drawn from this "
                        "817-question TruthfulQA file (e.g. the data folder's truthfulqa.jsonl)")
    args = parser.parse_args(argv)
    if args.truthfulqa:
        stats = {"truthfulqa_sample": build_truthfulqa_sample(args.truthfulqa, args.out, seed=args.seed)}
        print(json.dumps(stats, indent=2))
        return stats
    stats = {"kbqa": build_kbqa(args.out, seed=args.seed), "multihop": build_multihop(args.out)}
    print(json.dumps(stats, indent=2))
    return stats


if __name__ == "__main__":
    main()
