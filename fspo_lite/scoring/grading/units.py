"""Units and number words of plain quantities (for `fspo_lite.scoring.grading.equivalence`).

Number words multiply ("1.5 million" = 1500000); units of one dimension with a fixed size convert to a base unit
(1 m = 100 cm) when both sides of a comparison name one. Tables and a lookup only.
"""

from __future__ import annotations

import re
from fractions import Fraction

SCALE_WORDS = {"dozen": 12, "hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
SCALE = re.compile(r"\s+(dozen|hundred|thousand|million|billion|trillion)$", re.IGNORECASE)
"""Number words that multiply ("1.5 million" = 1500000): a word that changes the quantity, never dropped as a unit."""
UNIT_MEASURES = {
    "length": {1: ("mm millimeter millimetre", Fraction(1, 1000)), 2: ("cm centimeter centimetre", Fraction(1, 100)),
               3: ("m meter metre", Fraction(1)), 4: ("km kilometer kilometre", Fraction(1000)),
               5: ("in inch inche", Fraction(254, 10000)), 6: ("ft foot feet", Fraction(3048, 10000)),
               7: ("yd yard", Fraction(9144, 10000)), 8: ("mi mile", Fraction(1609344, 1000))},
    "time": {1: ("s sec second", Fraction(1)), 2: ("min minute", Fraction(60)), 3: ("h hr hrs hour", Fraction(3600)),
             4: ("day", Fraction(86400)), 5: ("week", Fraction(604800))},
    "mass": {1: ("mg milligram", Fraction(1, 1000)), 2: ("g gm gram", Fraction(1)), 3: ("kg kilogram", Fraction(1000))},
    "volume": {1: ("ml milliliter millilitre", Fraction(1, 1000)), 2: ("l liter litre", Fraction(1))},
    "money": {1: ("cent", Fraction(1, 100)), 2: ("dollar", Fraction(1))},
}
UNIT_FACTORS = {name: (dimension, factor) for dimension, table in UNIT_MEASURES.items()
                 for names, factor in table.values() for name in names.split()}
"""Units with a fixed conversion: two quantities in units of one dimension compare after conversion (1 m = 100 cm,
2 hours = 120 minutes, \\$0.50 = 50 cents). Months, years, pounds (money or weight) and miles per hour have none."""
UNIT_POWER = re.compile(r"^(?:(sq\.?|square)\s+|(cubic)\s+)?(.*?)(?:\^\{?([23])\}?)?$")


def unit_measure(unit: str) -> tuple[str, int, Fraction] | None:
    """(dimension, power, factor to the base unit) of a unit key ("cm^2" -> length, 2, 1/10000), None if unknown."""
    match = UNIT_POWER.match(unit)
    square, cubic, name, exponent = match.groups()
    power = 3 if cubic else 2 if square else int(exponent) if exponent else 1
    if (square or cubic) and exponent:
        return None
    known = UNIT_FACTORS.get(name.strip())
    if known is None:
        return None
    return known[0], power, known[1] ** power
