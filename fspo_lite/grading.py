"""Safe equivalence of math answers.

Model output is untrusted text: nothing here evaluates it. Answers are compared after a
string normalisation of common LaTeX, and numerically when both sides are plain numbers or
simple fractions, parsed by hand (no eval, no sympify).
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_ANSWER_CHARS = 1000
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\[dt]?frac(\d)(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")


def normalize_math_answer(answer: str) -> str:
    """A canonical string for a LaTeX/plain answer: spacing, $, \\left/\\right, \\text, degrees,
    \\dfrac and trailing punctuation removed."""
    text = str(answer)[:MAX_ANSWER_CHARS].strip()
    text = text.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", "")
    text = text.replace("$", "").replace("\\left", "").replace("\\right", "")
    text = text.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "").replace("%", "")
    for _ in range(3):
        text = _TEXT_MACRO.sub(r"\1", text)
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", text)
    text = _SQRT_SHORT.sub(r"\\sqrt{\1}", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = re.sub(r"\s+", "", text).rstrip(".").lower()
    if re.fullmatch(r"[a-z]=.*", text):  # "x=5" -> "5"
        text = text.split("=", 1)[1]
    return text


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


def math_answers_equal(prediction: str | None, gold: str) -> bool:
    """True when the predicted answer equals the gold answer, by normalised string or exact number.
    Never executes the prediction."""
    if prediction is None or gold is None:
        return False
    pred, target = normalize_math_answer(prediction), normalize_math_answer(gold)
    if not pred:
        return False
    if pred == target:
        return True
    pred_number, target_number = parse_plain_number(pred), parse_plain_number(target)
    return pred_number is not None and pred_number == target_number
