r"""The lexer of the math-answer parser (`fspo_lite.scoring.grading.latex_math`): tokens, number literals and their
limits.

`tokenize` turns an answer into (kind, text) tokens (numbers, letters, LaTeX macros, operators, relations, the
joining words "or" and "and"; unicode math signs
mapped to their LaTeX or ASCII form, layout macros such as \\left dropped) and refuses inputs over MAX_TOKENS
tokens or with numbers over MAX_NUMBER_DIGITS digits; `decimal_value` reads a decimal literal (1.5e-3) exactly as a
Fraction, with its exponent bounded by MAX_EXPONENT. Anything else raises ParseError.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_TOKENS = 300
"""Longer answers are not parsed (they are compared as strings only)."""
MAX_NUMBER_DIGITS = 60
MAX_EXPONENT = 400
"""Largest decimal exponent a literal may carry (1e400); larger ones (1e999999999) are rejected
from the exponent's digits alone, before any big integer is built."""

FUNCTIONS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln exp".split()
)
GREEK = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho "
    "sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Upsilon Phi Psi Omega".split()
)
_IGNORED_MACROS = frozenset({"left", "right", "displaystyle", "big", "Big", "bigg", "Bigg", "mathrm", "mathit"})
_UNICODE = {"−": "-", "–": "-", "×": "*", "·": "*", "÷": "/", "π": "\\pi ", "∞": "\\infty ", "√": "\\sqrt ",
            "≤": "\\le ", "≥": "\\ge ", "∈": "\\in "}
_OPERATORS = set("+-*/^!()[]{},|_")
RELATIONS = {"<": "lt", ">": "gt", "<=": "le", ">=": "ge", "=": "eq", "lt": "lt", "gt": "gt", "le": "le", "leq": "le",
             "leqslant": "le", "ge": "ge", "geq": "ge", "geqslant": "ge"}
"""Relation signs and macros, as ('rel', name) tokens: <, \\lt -> lt; <=, \\le, \\leq, \\leqslant -> le; ..."""
_WORDS = re.compile(r"(?<![A-Za-z\\])(or|and)(?![A-Za-z])")
"""The words that join the parts of an answer ("x = 2 or x = -3"), as ('word', ...) tokens."""


class ParseError(ValueError):
    """The text is outside the supported grammar or over a size limit."""


def tokenize(text: str) -> list[tuple[str, str]]:
    """(kind, value) tokens: ('num', '3.5'), ('sym', 'x'), ('macro', 'frac'), ('op', '+')."""
    tokens: list[tuple[str, str]] = []
    index, length = 0, len(text)
    while index < length:
        char = _UNICODE.get(text[index], text[index])
        if len(char) > 1:  # a unicode symbol standing for a macro or an operator
            tokens.extend(tokenize(char))
            index += 1
        elif char.isspace():
            index += 1
        elif char.isascii() and char.isdigit() or (char == "." and text[index + 1 : index + 2].isdigit()):
            end = index
            while end < length and text[end].isascii() and text[end].isdigit():
                end += 1
            if end < length and text[end] == "." and text[end + 1 : end + 2].isdigit():
                end += 1
                while end < length and text[end].isascii() and text[end].isdigit():
                    end += 1
            if end - index > MAX_NUMBER_DIGITS:
                raise ParseError(f"a number with more than {MAX_NUMBER_DIGITS} digits")
            exponent = _EXPONENT.match(text, end)
            if exponent:  # 1e3, 2.5E-4: one number token (3e alone stays 3 times e)
                end = exponent.end()
            tokens.append(("num", text[index:end]))
            index = end
        elif char.isascii() and char.isalpha():
            word = _WORDS.match(text, index) if index == 0 or not text[index - 1].isalpha() else None
            if word:
                tokens.append(("word", word.group(1)))
                index = word.end()
            else:
                tokens.append(("sym", char))
                index += 1
        elif char in "<>=":
            name = char + "=" if char in "<>" and text[index + 1 : index + 2] == "=" else char
            tokens.append(("rel", RELATIONS[name]))
            index += len(name)
        elif char == "\\" and text[index + 1 : index + 2] in ("{", "}"):
            tokens.append(("op", text[index : index + 2]))  # \{ \}: set braces
            index += 2
        elif char == "\\":
            end = index + 1
            while end < length and text[end].isascii() and text[end].isalpha():
                end += 1
            name = text[index + 1 : end]
            if not name:
                raise ParseError(f"unsupported escape {text[index : index + 2]!r}")
            if name in RELATIONS:
                tokens.append(("rel", RELATIONS[name]))
            elif name not in _IGNORED_MACROS:
                tokens.append(("macro", name))
            index = end
        elif char in _OPERATORS:
            tokens.append(("op", char))
            index += 1
        else:
            raise ParseError(f"unsupported character {char!r}")
        if len(tokens) > MAX_TOKENS:
            raise ParseError(f"more than {MAX_TOKENS} tokens")
    return tokens


_EXPONENT = re.compile(r"[eE][+-]?\d+")
_DECIMAL = re.compile(r"(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")


def decimal_value(text: str, max_exponent: int = MAX_EXPONENT) -> Fraction:
    """'12', '0.5', '.5', '1.5e-3' as an exact Fraction. The exponent is read and checked before
    any power of ten is built, so '1e999999999' costs microseconds (ParseError: too large)."""
    match = _DECIMAL.fullmatch(text)
    if not match or not (match.group(1) or match.group(2)):
        raise ParseError(f"not a decimal number: {text[:40]!r}")
    whole, fraction, exponent = match.group(1) or "0", match.group(2) or "", match.group(3)
    if len(whole) + len(fraction) > MAX_NUMBER_DIGITS:
        raise ParseError(f"a number with more than {MAX_NUMBER_DIGITS} digits")
    if exponent is not None and len(exponent.lstrip("+-").lstrip("0")) > len(str(max_exponent)):
        raise ParseError(f"an exponent above {max_exponent}")
    power = (int(exponent) if exponent is not None else 0) - len(fraction)
    if abs(power + len(fraction)) > max_exponent:
        raise ParseError(f"an exponent above {max_exponent}")
    mantissa = int(whole + fraction)
    return Fraction(mantissa * 10**power) if power >= 0 else Fraction(mantissa, 10**-power)


def number_node(text: str) -> list:
    """["num", p, q] for a decimal literal (see `decimal_value`)."""
    value = decimal_value(text)
    return ["num", value.numerator, value.denominator]
