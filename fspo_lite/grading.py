"""Safe equivalence of math answers.

Model output is untrusted text, and public graders in this field execute it (eval, sympify,
parse_expr). Here nothing evaluates it. Three checks, cheapest first:

1. the normalised strings are equal (LaTeX decorations, spacing, \\dfrac, "x = 5" -> "5");
2. both are plain numbers or simple fractions, compared exactly as Fractions;
3. both parse under the small grammar of `fspo_lite.latex_math` (no eval; size limits) and a
   sandboxed worker process (`fspo_lite.symbolic`) finds them symbolically equal within a hard
   timeout: \\frac{1}{2} = 0.5, 2\\sqrt{2} = \\sqrt{8}, (x+1)^2 = x^2+2x+1.

An answer that fails to parse, is over the limits, or times out counts as not equal.
"""

from __future__ import annotations

import re
from fractions import Fraction

from .latex_math import ParseError, parse_math

MAX_ANSWER_CHARS = 1000
"""Longer predictions or golds are not math answers: they compare as not equal."""
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\[dt]?frac(\d)(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_VARIABLE_PREFIX = re.compile(r"\s*[a-zA-Z]\s*=(?!=)")


def strip_latex_decorations(answer: str) -> str:
    """Drop what does not change an answer's value: $, \\left/\\right, thin spaces, \\text{},
    degrees, percent signs, \\dfrac/\\tfrac, a leading "x =" and trailing full stops. Spacing
    and case are kept (the parser needs them)."""
    text = str(answer).strip()
    text = text.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", " ")
    text = text.replace("$", "").replace("\\left", "").replace("\\right", "")
    text = text.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    for _ in range(3):
        text = _TEXT_MACRO.sub(r"\1", text)
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", text)
    text = _SQRT_SHORT.sub(r"\\sqrt{\1}", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    if _VARIABLE_PREFIX.match(text):  # "x = 5" -> "5"
        text = text.split("=", 1)[1]
    return text.strip().rstrip(".").strip()


def normalize_math_answer(answer: str) -> str:
    """A canonical string for a LaTeX/plain answer: decorations stripped, no whitespace, lowercase."""
    return re.sub(r"\s+", "", strip_latex_decorations(answer)).lower()


def parse_plain_number(text: str) -> Fraction | None:
    """'1,000', '-0.5', '3/4', '\\frac{3}{4}', '-\\frac{1}{2}' as an exact Fraction; else None."""
    text = text.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text) else text
    match = _FRAC.fullmatch(text.lstrip("-"))
    sign = -1 if text.startswith("-") else 1
    try:
        if match:
            return sign * Fraction(Fraction(match.group(1)), Fraction(match.group(2)))
        if re.fullmatch(r"-?\d+(\.\d+)?(/\d+)?|-?\.\d+", text):
            return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def symbolically_equal(prediction: str, gold: str) -> bool:
    """Parse both answers here (a fixed grammar, never evaluated) and let the sandboxed worker
    compare them; False when either does not parse, is too large, or the check times out."""
    from .symbolic import default_checker

    try:
        prediction_tree = parse_math(strip_latex_decorations(prediction))
        gold_tree = parse_math(strip_latex_decorations(gold))
    except (ParseError, ValueError, ZeroDivisionError):
        return False
    if prediction_tree == gold_tree:
        return True
    return default_checker().equivalent(prediction_tree, gold_tree) is True


def math_answers_equal(prediction: str | None, gold: str, symbolic: bool = True) -> bool:
    """True when the predicted answer equals the gold answer: as a normalised string, as an exact
    number, or (symbolic=True) symbolically in a sandboxed process. Never executes the prediction."""
    if prediction is None or gold is None:
        return False
    prediction, gold = str(prediction), str(gold)
    if len(prediction) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    pred, target = normalize_math_answer(prediction), normalize_math_answer(gold)
    if not pred:
        return False
    if pred == target:
        return True
    pred_number, target_number = parse_plain_number(pred), parse_plain_number(target)
    if pred_number is not None and target_number is not None:
        return pred_number == target_number
    return symbolic and symbolically_equal(prediction, gold)
