"""Safe equivalence of math answers.

Model output is untrusted text, and public graders in this field execute it (eval, sympify,
parse_expr). Here nothing evaluates it. Three checks, cheapest first:

0. an answer with a division by zero (1/0, \\frac{2}{0}) is malformed: never equal, even to itself;
1. both are plain quantities (`read_quantity`: decimals, 1e3, 1.5\\times10^{3}, 12,000 and
   12{,}000, fractions, mixed numbers 2\\frac{1}{2}, percent, a currency sign, a unit suffix),
   compared exactly as Fractions, with the percent and unit rules of `quantities_equal`;
2. the normalised strings are equal (LaTeX decorations, spacing, \\dfrac, "x = 5" -> "5");
3. both parse under the small grammar of `fspo_lite.scoring.grading.latex_math` (no eval; size limits) and a
   sandboxed worker process (`fspo_lite.scoring.grading.symbolic`) finds them symbolically equal within a hard
   timeout: \\frac{1}{2} = 0.5, 2\\sqrt{2} = \\sqrt{8}, (x+1)^2 = x^2+2x+1, {1, 2} = {2, 1}.

An answer that fails to parse, is over the limits, or times out counts as not equal. Numbers
never become big integers before a bound is checked: an exponent above `MAX_EXPONENT` (1e400)
makes a quantity "too large", which equals nothing but the same string. The rules follow what
the maintained graders do (lm-eval-harness's Minerva normalisation: units, dollars, thousands
separators; math-verify: sets unordered, percent), without ever evaluating the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from fspo_lite.scoring.grading.latex_math import MAX_EXPONENT, ParseError, decimal_value, parse_math
from fspo_lite.scoring.grading.units import SCALE, SCALE_WORDS, unit_measure

MAX_ANSWER_CHARS = 1000
"""Longer predictions or golds are not math answers: they compare as not equal."""
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\[dt]?frac(\d)(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_VARIABLE_PREFIX = re.compile(r"\s*[a-zA-Z]\s*=(?!=)")
_DOUBLED_BACKSLASH = re.compile(r"(?<!\\)\\\\(?=[a-zA-Z])")
_TRIG = re.compile(r"\\(?:sin|cos|tan|cot|sec|csc)(?![a-zA-Z])")
_DEGREES = re.compile(r"\^\s*(?:\\circ|\{\s*\\circ\s*\})|°")
_MACRO_OR_TEXT = re.compile(r"(\\[a-zA-Z]+)|(\\[^a-zA-Z]?|[^\\]+)")


def undouble_backslashes(text: str) -> str:
    """"\\\\frac" (a backslash escaped twice, common in copied answers) -> "\\frac"; never inside a matrix or array,
    where "\\\\" ends a row."""
    return text if "\\begin" in text else _DOUBLED_BACKSLASH.sub(r"\\", text)


def strip_latex_decorations(answer: str, keep_percent: bool = False) -> str:
    """Drop what does not change an answer's value: $, \\left/\\right, thin spaces, \\text{},
    degrees, percent signs (unless keep_percent), \\dfrac/\\tfrac, a leading "x =" and trailing
    full stops. Spacing and case are kept (the parser needs them)."""
    text = str(answer).strip()
    text = undouble_backslashes(text)
    text = text.replace("{,}", ",").replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", " ")
    text = text.replace("\\$", "$").replace("$", "").replace("\\left", "").replace("\\right", "")
    if not _TRIG.search(text):  # 90^\\circ = 90, but \\sin 30^\\circ is not \\sin 30 (radians)
        text = _DEGREES.sub("", text)
    if not keep_percent:
        text = text.replace("\\%", "").replace("%", "")
    for _ in range(3):
        text = _TEXT_MACRO.sub(r"\1", text)
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", text)
    text = _SQRT_SHORT.sub(r"\\sqrt{\1}", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if _VARIABLE_PREFIX.match(text):  # "x = 5" -> "5"
        text = text.split("=", 1)[1]
    return text.strip().rstrip(".").strip()


def normalize_math_answer(answer: str) -> str:
    """A canonical string for a LaTeX/plain answer: decorations stripped, no whitespace, lowercase outside macro
    names (\\Delta and \\delta are different letters; "Yes" = "yes")."""
    text = re.sub(r"\s+", "", strip_latex_decorations(answer))
    return "".join(macro or plain.lower() for macro, plain in _MACRO_OR_TEXT.findall(text))


UNIT_WORDS = frozenset(
    "cm mm km m meter meters metre metres centimeter centimeters kilometer kilometers inch inches in ft feet foot "
    "yard yards yd mile miles mi mph kmh kg g gm gram grams mg kilogram kilograms lb lbs pound pounds oz ounce ounces "
    "s sec second seconds min minute minutes h hr hrs hour hours day days week weeks month months year years "
    "l ml liter liters litre litres gallon gallons cup cups dollar dollars cent cents euro euros usd "
    "degree degrees deg units unit sq square cubic points point ways people students items "
    "apples books marbles cookies pages feet".split()
)
"""Unit words a number may carry (after lm-eval-harness's Minerva list): "10 cm" = "10". Single
letters count as units only inside \text{} ("10\text{ m}"), never bare ("10m" is 10 times m)."""
_CURRENCY = re.compile(r"^(?:\\\$|\$|€|£|¥|₹|usd\s*|eur\s*|rs\.?\s*)", re.IGNORECASE)
_CURRENCY_UNITS = {"$": "dollar", "\\$": "dollar", "usd": "dollar", "€": "euro", "eur": "euro", "£": "pound",
                   "¥": "yen", "₹": "rupee", "rs": "rupee"}
"""The unit a currency sign stands for: \\$5 = 5 dollars = 5, but \\$5 != 5 cents."""
_LEADING_DOLLAR = re.compile(r"\s*[-+−]?\s*\\?\$\s*[\d.]")
_UNIT_SYNONYMS = {"usd": "dollar", "buck": "dollar", "eur": "euro", "rs": "rupee", "rupee": "rupee"}
_UNIT_TEXT = re.compile(r"\\(?:text|textrm|mbox|mathrm)\s*\{\s*([a-zA-Z][a-zA-Z .]*?)\s*\}\s*(\^\s*\{?\s*[23]\s*\}?)?\s*$")
_UNIT_WORD = re.compile(r"(?<=[\d}.\s])\s*((?:sq\.?\s+|square\s+|cubic\s+)?([a-zA-Z]{2,}\.?))\s*(\^\s*\{?\s*[23]\s*\}?)?\s*$")
_PERCENT = re.compile(r"(?:\\%|%|\\text\s*\{\s*\\?%\s*\}|(?<![a-zA-Z])(?:percent(?:age)?|pct)\.?)$", re.IGNORECASE)
_TAIL = 48
"""The trailing percent sign or unit is looked for in the last _TAIL characters only (after trailing spaces are
cut): a regex anchored at the end but searched from every start position is quadratic or worse on long runs of
spaces (1,000 spaces and a letter took seconds)."""
_SEPARATED = re.compile(r"\d{1,3}(?:(?P<sep>,|\s|\\,|\\ |\{,\}|')\d{3})(?:(?P=sep)\d{3})*(?:\.\d+)?")
"""Thousands separators: one kind throughout, groups of three (1,000 = 1 000 = 1\\,000 = 1000; 1 00 is not one)."""
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SCALED = re.compile(rf"(?:({_NUMBER})\s*(?:\\times|\\cdot|\*|x)\s*)?10\s*\^\s*(?:\{{\s*([+-]?\d+)\s*\}}|([+-]?\d))")
_FRACTION = re.compile(rf"\\frac\s*\{{\s*({_NUMBER})\s*\}}\s*\{{\s*({_NUMBER})\s*\}}|({_NUMBER})\s*/\s*({_NUMBER})")
_MIXED = re.compile(r"(\d+)\s*(?:\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|\s(\d+)\s*/\s*(\d+))")
_ZERO = r"[+-]?(?:0+(?:\.0*)?|\.0+)"
_DIVISION_BY_ZERO = re.compile(rf"\\frac\s*\{{\s*[^{{}}]*\}}\s*\{{\s*{_ZERO}\s*\}}|/\s*(?:\(\s*{_ZERO}\s*\)|{_ZERO}(?![\d.]))(?!\s*[\w(\\{{])")


class TooLarge:
    """The value of a quantity whose exponent is above MAX_EXPONENT: equal to nothing."""

    def __repr__(self) -> str:
        return "TOO_LARGE"


TOO_LARGE = TooLarge()


@dataclass(frozen=True)
class Quantity:
    """A plain number read from an answer: its exact value (or TOO_LARGE), whether it was written
    as a percentage, and its unit word ("" when none)."""

    value: Fraction | TooLarge
    percent: bool = False
    unit: str = ""


def _unit_key(unit: str) -> str:
    unit = re.sub(r"\s+", " ", unit.lower().rstrip(". "))
    unit = unit[:-1] if len(unit) > 3 and unit.endswith("s") else unit
    return _UNIT_SYNONYMS.get(unit, unit)


def _strip_unit(text: str) -> tuple[str, str]:
    text = text.rstrip()
    head, tail = text[:-_TAIL], text[-_TAIL:]
    match = _UNIT_TEXT.search(tail)
    if match:
        return (head + tail[: match.start()]).rstrip(), _unit_key(match.group(1) + (match.group(2) or "").replace(" ", ""))
    match = _UNIT_WORD.search(tail)
    if match and match.group(2).lower().rstrip(".") in UNIT_WORDS and (match.start() or head):
        return (head + tail[: match.start()]).rstrip(), _unit_key(match.group(1) + (match.group(3) or "").replace(" ", ""))
    return text, ""


def _value(text: str) -> Fraction | None:
    """A bare number, scaled number or fraction (signs handled by the caller); None if it is not one."""
    text = text.strip()
    separated = _SEPARATED.fullmatch(text)
    if separated:
        text = text.replace(separated.group("sep"), "")
    if re.fullmatch(_NUMBER, text):
        return decimal_value(text, MAX_EXPONENT)
    match = _SCALED.fullmatch(text)
    if match:
        exponent = match.group(2) or match.group(3)
        if len(exponent.lstrip("+-").lstrip("0")) > len(str(MAX_EXPONENT)) or abs(int(exponent)) > MAX_EXPONENT:
            raise ParseError("exponent too large")
        mantissa = decimal_value(match.group(1), MAX_EXPONENT) if match.group(1) else Fraction(1)
        return mantissa * Fraction(10) ** int(exponent)
    match = _MIXED.fullmatch(text)
    if match:
        whole = int(match.group(1))
        numerator, denominator = int(match.group(2) or match.group(4)), int(match.group(3) or match.group(5))
        if 0 < numerator < denominator:
            return whole + Fraction(numerator, denominator)
        return None
    match = _FRACTION.fullmatch(text)
    if match:
        numerator = decimal_value(match.group(1) or match.group(3), MAX_EXPONENT)
        denominator = decimal_value(match.group(2) or match.group(4), MAX_EXPONENT)
        if denominator == 0:
            raise ZeroDivisionError("division by zero")
        return numerator / denominator
    return None


def read_quantity(answer: str) -> Quantity | None:
    """The answer as a plain quantity, or None when it is not one (then other checks decide).

    Accepted: 1000, -0.5, .5, 1e3, 1.5\\times10^{3}, 10^{-3}, 1,000 and 1{,}000 (groups of three),
    3/4, \\frac{3}{4}, mixed numbers 2\\frac{1}{2} and 2 1/2 (proper fraction only), a leading
    currency sign (\\$5, $5, €5), a trailing percent sign (25\\%) and a trailing unit (10 cm,
    10\\text{ cm}, 5 dollars). A literal beyond 10^MAX_EXPONENT gives value TOO_LARGE. Division
    by zero raises ZeroDivisionError (malformed). No text is ever evaluated.
    """
    raw = str(answer)
    dollar = "\\$" in raw or (raw.count("$") == 1 and _LEADING_DOLLAR.match(raw) is not None)
    text_unit = ""
    plain = undouble_backslashes(raw).rstrip().rstrip(".$ ")
    match = _UNIT_TEXT.search(plain[-_TAIL:])
    if match and len(match.group(1).strip()) == 1:  # 10\text{ m}: a one-letter unit counts only inside \text{}
        answer = plain[: len(plain) - len(plain[-_TAIL:]) + match.start()]
        text_unit = _unit_key(match.group(1) + (match.group(2) or "").replace(" ", ""))
    text = strip_latex_decorations(answer, keep_percent=True)
    text = text.replace("{,}", ",").replace("\\!", "")
    text = text.rstrip()
    percent_match = _PERCENT.search(text[-_TAIL:])
    percent = percent_match is not None
    if percent:
        text = text[: len(text) - len(text[-_TAIL:]) + percent_match.start()]
    text, unit = _strip_unit(text)
    if text_unit:
        if unit:
            return None  # two units ("10 cm \\text{ m}"): not a plain quantity
        unit = text_unit
    text = text.strip()
    sign = 1
    if text[:1] in ("-", "+", "−"):
        sign, text = (-1 if text[0] != "+" else 1), text[1:].lstrip()
    currency = _CURRENCY.match(text)
    if currency or dollar:
        sign_unit = _CURRENCY_UNITS.get(currency.group(0).strip().lower().rstrip("."), "") if currency else "dollar"
        if unit and sign_unit and unit != sign_unit:
            return Quantity(TOO_LARGE, percent, unit)  # "$5 cents": two units that disagree, equal to nothing
        unit = unit or sign_unit
        text = text[currency.end():].strip() if currency else text
    if text[:1] in ("-", "+", "−") and sign == 1:
        sign, text = (-1 if text[0] != "+" else 1), text[1:].lstrip()
    if text.startswith("{") and text.endswith("}") and text.count("{") == 1:
        text = text[1:-1].strip()
    scale = SCALE.search(text)
    if scale:
        text = text[: scale.start()].strip()
    try:
        value = _value(text)
    except ParseError:
        return Quantity(TOO_LARGE, percent, unit)
    if value is None:
        return None
    return Quantity(sign * value * (SCALE_WORDS[scale.group(1).lower()] if scale else 1), percent, unit)


def quantities_equal(prediction: Quantity, gold: Quantity) -> bool:
    """Exact equality of two quantities, with two rules a careful human applies:

    - units: when both name a unit, the units must match ("10 cm" != "10 m"), or be units of one dimension with a
      fixed conversion, compared after converting ("1 m" = "100 cm", "2 hours" = "120 minutes"); a unit on one side
      only is ignored ("10 cm" = "10"), but a number word is a factor, not a unit ("5 thousand" = 5000 != 5);
    - percent: when exactly one side is a percentage x%, the other may be written x or x/100
      ("25\\%" = "25" = "0.25"); two percentages compare as written ("25\\%" != "0.25\\%").
    A TOO_LARGE value equals nothing.
    """
    if isinstance(prediction.value, TooLarge) or isinstance(gold.value, TooLarge):
        return False
    if prediction.unit and gold.unit and prediction.unit != gold.unit:
        measures = unit_measure(prediction.unit), unit_measure(gold.unit)
        if None in measures or measures[0][:2] != measures[1][:2] or prediction.percent != gold.percent:
            return False
        return prediction.value * measures[0][2] == gold.value * measures[1][2]
    if prediction.value == gold.value:
        return True
    if prediction.percent != gold.percent:
        percent, other = (prediction, gold) if prediction.percent else (gold, prediction)
        return other.value == percent.value / 100
    return False


def parse_plain_number(text: str) -> Fraction | None:
    """'1,000', '-0.5', '3/4', '\\frac{3}{4}', '1e3' as an exact Fraction; None for anything else,
    for a division by zero and for a value over the exponent bound."""
    try:
        quantity = read_quantity(text)
    except ZeroDivisionError:
        return None
    if quantity is None or isinstance(quantity.value, TooLarge) or quantity.percent or quantity.unit:
        return None
    return quantity.value


def is_malformed(answer: str) -> bool:
    """A division by zero (1/0, \\frac{2}{0}, 3/0.0): such an answer equals nothing, not even itself."""
    return bool(_DIVISION_BY_ZERO.search(strip_latex_decorations(answer)))


def _as_latex(answer: str) -> str:
    """An extracted answer in math delimiters for Math-Verify's LaTeX extraction (left as it is when it has some)."""
    return answer if any(mark in answer for mark in ("$", "\\(", "\\[", "\\boxed")) else f"${answer}$"


def symbolically_equal(prediction: str, gold: str) -> bool:
    """Parse both answers here (a fixed grammar, never evaluated) and let the sandboxed worker
    compare them; False when either is too large, or the check times out. When either falls outside the
    grammar (relations, matrices, \\pm, \\cfrac, ...), the worker asks Math-Verify instead (LaTeX extraction only,
    under the same timeout)."""
    from fspo_lite.scoring.grading.symbolic import default_checker

    try:
        prediction_tree = parse_math(strip_latex_decorations(prediction))
        gold_tree = parse_math(strip_latex_decorations(gold))
    except ParseError as error:
        if "digits" in str(error) or "exponent" in str(error):
            return False  # over a size limit: not handed to anyone
        if any(_DEGREES.search(strip_latex_decorations(text)) for text in (prediction, gold)):
            return False  # degrees inside a function (\\sin 30^\\circ): Math-Verify drops them, so it is not asked
        return default_checker().equivalent_texts(_as_latex(undouble_backslashes(prediction)),
                                                  _as_latex(undouble_backslashes(gold))) is True
    except (ValueError, ZeroDivisionError):
        return False
    if prediction_tree == gold_tree:
        return True
    checker = default_checker()
    verdict = checker.equivalent(prediction_tree, gold_tree)
    if verdict is not False:  # equal, or no verdict in time: no second request (one call stays within one timeout)
        return verdict is True
    for decimal, tree, other in ((prediction, prediction_tree, gold_tree), (gold, gold_tree, prediction_tree)):
        places = long_decimal_places(decimal)
        if places is not None and long_decimal_places(gold if decimal is prediction else prediction) is None:
            return checker.within(other, tree, places) is True
    return False


def _long_decimal_matches(prediction: str, pred_quantity: Quantity, gold: str, target_quantity: Quantity) -> bool:
    """Exactly one side is a long decimal (see LONG_DECIMAL_DIGITS) within one unit of its last place of the other
    (plain numbers, no percent or unit): 0.0833333333333333 = \\frac{1}{12}, computed exactly with Fractions."""
    if pred_quantity.percent or target_quantity.percent or pred_quantity.unit or target_quantity.unit:
        return False
    places = [long_decimal_places(prediction), long_decimal_places(gold)]
    if (places[0] is None) == (places[1] is None):
        return False
    bound = Fraction(1, 10 ** (places[0] if places[0] is not None else places[1]))
    return abs(pred_quantity.value - target_quantity.value) <= bound


LONG_DECIMAL_DIGITS = 12
"""A decimal written with at least this many significant digits is read as the value it was printed from:
0.0833333333333333 = 1/12 and 4.123105625617661 = \\sqrt{17} (within one unit of its last place), while
1.41421356 != \\sqrt{2} and 0.333 != 1/3 stay exact."""
_PLAIN_DECIMAL = re.compile(r"\s*[+-]?(\d*)\.(\d+)\s*")


def long_decimal_places(answer: str) -> int | None:
    """The decimal places of an answer that is a plain decimal with >= LONG_DECIMAL_DIGITS significant digits."""
    match = _PLAIN_DECIMAL.fullmatch(strip_latex_decorations(answer))
    if not match:
        return None
    digits = (match.group(1) + match.group(2)).lstrip("0")
    return len(match.group(2)) if LONG_DECIMAL_DIGITS <= len(digits) <= 60 else None


def math_answers_equal(prediction: str | None, gold: str, symbolic: bool = True) -> bool:
    """True when the predicted answer equals the gold answer: as a plain quantity (exactly, see
    `quantities_equal`), as a normalised string, or (symbolic=True) symbolically in a sandboxed
    process. Never executes the prediction; a malformed answer (division by zero) is never equal."""
    if prediction is None or gold is None:
        return False
    prediction, gold = str(prediction), str(gold)
    if len(prediction) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    pred, target = normalize_math_answer(prediction), normalize_math_answer(gold)
    if not pred or is_malformed(prediction) or is_malformed(gold):
        return False
    try:
        pred_quantity, target_quantity = read_quantity(prediction), read_quantity(gold)
    except ZeroDivisionError:
        return False
    if pred_quantity is not None and target_quantity is not None:
        if isinstance(pred_quantity.value, TooLarge) or isinstance(target_quantity.value, TooLarge):
            return pred == target
        if quantities_equal(pred_quantity, target_quantity):
            return True
        return _long_decimal_matches(prediction, pred_quantity, gold, target_quantity)
    if pred == target:
        return True
    return symbolic and symbolically_equal(prediction, gold)
