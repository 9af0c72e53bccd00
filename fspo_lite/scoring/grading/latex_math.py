r"""A parser for the arithmetic/LaTeX subset of math answers that produces plain syntax trees.

Symbolic grading must never evaluate model output. This module reads an answer with a fixed
grammar (no eval, no sympify, no parse_expr), checks the tree against size limits, and returns
nested lists that `fspo_lite.scoring.grading.symbolic` sends to a sandboxed worker process, which alone builds
sympy objects from them. Anything outside the grammar raises ParseError; the caller then falls
back to comparing strings.

Grammar (whitespace is ignored; juxtaposition multiplies: 2x, 2\sqrt{2}, (x+1)(x-1), except an
integer followed by a literal \frac of integers that is a proper fraction, a mixed number:
2\frac{1}{2} = 5/2 and -2\frac{1}{2} = -5/2, while 2(1/2) = 1; a number right after a number,
"1 000", is refused rather than multiplied; numbers may have a decimal exponent, 1.5e-3, bounded by
MAX_EXPONENT):

    answer   := part (sep part)*                   sep: ',' | or | and | \quad; see `answer_parts`
    part     := letter ('=' | \in) union | union (rel union)*   rel: < > <= >= \le \ge \leq \geq \lt \gt
    union    := expr (\cup expr)*                  a union of intervals/sets (order does not matter)
    expr     := term (('+' | '-') term)*
    term     := factor (('*' | '/' | \cdot | \times | \div)? factor)*
    factor   := ('-' | '+') factor | power
    power    := postfix ('^' factor)?              right-associative: 2^3^2 = 2^(3^2)
    postfix  := atom '!'*
    atom     := number | letter | greek letter | \pi | \infty
              | '(' expr ')' | '[' expr ']' | '{' expr '}' | '|' expr '|'
              | '(' or '[' expr (',' expr)+ ')' or ']'  tuples and intervals, brackets kept
              | \{ expr (',' expr)* \}                 a set
              | \frac arg arg | \sqrt ('[' expr ']')? arg | function ('^' arg)? (group | power)

Trees: ["num", p, q] (the exact rational p/q), ["sym", name], ["pi"], ["inf"], ["add", a, b],
["sub", a, b], ["mul", a, b], ["div", a, b], ["pow", a, b], ["neg", a], ["fact", a],
["sqrt", a], ["root", a, n], ["abs", a], ["fn", name, a], ["log", a, base],
["tuple", open, close, [items]] (tuples, and intervals, also those read from inequalities), ["set", [items]] (a
braced set), ["list", [items]] (a bare list: "1, 2", "x = 2 or x = -3"), ["union", [items]].
"""

from __future__ import annotations

import math

from fspo_lite.scoring.grading.answer_parts import QUADS, combine_parts, inequality_interval
from fspo_lite.scoring.grading.latex_tokens import (FUNCTIONS, GREEK, MAX_EXPONENT, ParseError, decimal_value,
                                                    number_node, tokenize)

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "MAX_EXPONENT", "ParseError", "decimal_value", "digits_bound",
           "parse_math", "tokenize"]
"""Also the lexer's names that callers use (`fspo_lite.scoring.grading.latex_tokens`)."""

MAX_DEPTH = 100
"""Deepest nesting of grammar rules (about four per bracket level); deeper input is rejected
before Python recursion gets deep."""
MAX_DIGITS = 2000
"""Upper bound on the digits any sub-expression may need (9^9^9^9, 10^{10^{10}}, 1000000! are
rejected here, before any worker sees them)."""
_MULTIPLY = {"*": "mul", "/": "div", "cdot": "mul", "times": "mul", "div": "div"}
_UNORDERED = ("set", "list", "union")
r"""Nodes whose items compare as a multiset: {1, 2} = {2, 1}, (0, 1) \cup (2, 3) = (2, 3) \cup (0, 1)."""


class _Parser:
    """Recursive descent over the token list; `depth` guards against deep nesting."""

    def __init__(self, tokens: list[tuple[str, str]]):
        self.tokens = tokens
        self.position = 0
        self.depth = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ParseError("unexpected end of the answer")
        self.position += 1
        return token

    def at(self, kind: str, *values: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == kind and (not values or token[1] in values)

    def expect(self, kind: str, value: str) -> None:
        token = self.take()
        if token != (kind, value):
            raise ParseError(f"expected {value!r}, found {token[1]!r}")

    def nested(self, parse, *args):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"nested deeper than {MAX_DEPTH}")
        try:
            return parse(*args)
        finally:
            self.depth -= 1

    # answer := part (separator part)*
    def answer(self) -> list:
        parts, joins = [self.part()], set()
        while self.at("op", ",") or self.at("word") or self.at("macro", *QUADS):
            joins.add(self.take()[1])
            parts.append(self.part())
        if self.peek() is not None:
            raise ParseError(f"unexpected {self.peek()[1]!r}")
        return combine_parts(parts, joins)

    def part(self) -> tuple[str, list, str | None]:
        """One part of an answer: ("value", tree, variable) for "2", "x = 2"; ("set", tree, variable) for an interval,
        a set or a union ("x \\in [0, 1)"), or for an inequality read as the interval it describes ("1 \\le x < 2")."""
        variable = None
        token, following = self.peek(), self.tokens[self.position + 1] if self.position + 1 < len(self.tokens) else None
        if token is not None and token[0] == "sym" and following in (("rel", "eq"), ("macro", "in")):
            variable = token[1]
            self.position += 2
            tree = self.union()
            if following == ("rel", "eq"):
                return "value", tree, variable
            if tree[0] not in ("tuple", "set", "union"):
                raise ParseError("\\in must be followed by a set or an interval")
            return "set", tree, variable
        items, relations = [self.union()], []
        while self.at("rel"):
            relations.append(self.take()[1])
            items.append(self.union())
        if not relations:
            return "value", items[0], None
        return ("set", *inequality_interval(items, relations))

    # union := expr ('\cup' expr)*
    def union(self) -> list:
        items = [self.expr()]
        while self.at("macro", "cup"):
            self.take()
            items.append(self.expr())
        return items[0] if len(items) == 1 else ["union", items]

    def expr(self) -> list:
        tree = self.nested(self.term)
        while self.at("op", "+", "-"):
            operator = self.take()[1]
            tree = ["add" if operator == "+" else "sub", tree, self.nested(self.term)]
        return tree

    def term(self) -> list:
        tree = self.factor()
        while True:
            token = self.peek()
            if token is not None and token[0] in ("op", "macro") and token[1] in _MULTIPLY:
                self.take()
                tree = [_MULTIPLY[token[1]], tree, self.factor()]
            elif self.starts_atom():
                if token[0] == "num" and _ends_with_number(tree):
                    # "1 000", "12 500": digits after digits are a separator or a typo, never a product
                    raise ParseError(f"two numbers side by side: {token[1]!r}")
                literal_fraction = token == ("macro", "frac")
                right = self.nested(self.power)
                if literal_fraction and _is_mixednumber_node(tree, right):  # 2\frac{1}{2}; not 2(1/2)
                    tree = ["add", tree, right]
                elif literal_fraction and tree[0] == "neg" and _is_mixednumber_node(tree[1], right):
                    tree = ["neg", ["add", tree[1], right]]  # -2\frac{1}{2} = -(2 + 1/2)
                else:
                    tree = ["mul", tree, right]
            else:
                return tree

    def starts_atom(self) -> bool:
        """Can the next token begin an implicit factor? ('|' and '[' cannot: they would be ambiguous.)"""
        token = self.peek()
        if token is None:
            return False
        kind, value = token
        return kind in ("num", "sym") or (kind == "op" and value in "({") or (
            kind == "macro" and (value in ("frac", "sqrt", "pi", "infty") or value in FUNCTIONS or value in GREEK)
        )

    def factor(self) -> list:
        if self.at("op", "-", "+"):
            sign = self.take()[1]
            inner = self.nested(self.factor)
            return ["neg", inner] if sign == "-" else inner
        return self.nested(self.power)

    def power(self) -> list:
        base = self.postfix()
        if self.at("op", "^"):
            self.take()
            return ["pow", base, self.nested(self.factor)]
        return base

    def postfix(self) -> list:
        tree = self.nested(self.atom)
        while self.at("op", "!"):
            self.take()
            tree = ["fact", tree]
        return tree

    def group(self, close: str) -> list:
        inner = self.expr()
        self.expect("op", close)
        return inner

    def argument(self) -> list:
        """A macro argument: {expr}, or a single token (\\frac12, \\sqrt2, \\sqrt x)."""
        if self.at("op", "{"):
            self.take()
            return self.nested(self.group, "}")
        kind, value = self.take()
        if kind == "num":
            if len(value) > 1 and "." not in value:  # \frac12: one digit is the argument
                self.tokens.insert(self.position, ("num", value[1:]))
                value = value[0]
            return number_node(value)
        if kind == "sym":
            return ["sym", value]
        if kind == "macro" and value in GREEK:
            return ["sym", value]
        if kind == "macro" and value == "pi":
            return ["pi"]
        raise ParseError(f"unsupported macro argument {value!r}")

    def bracketed(self, open_: str) -> list:
        """'(' expr ')' is grouping; with commas it is a tuple or an interval ((a, b], [a, b))."""
        first = self.expr()
        if not self.at("op", ","):
            self.expect("op", ")" if open_ == "(" else "]")
            return first
        items = [first]
        while self.at("op", ","):
            self.take()
            items.append(self.expr())
        close = self.take()
        if close not in (("op", ")"), ("op", "]")):
            raise ParseError(f"a tuple must end with ')' or ']', found {close[1]!r}")
        return ["tuple", open_, close[1], items]

    def set_items(self) -> list:
        """After '\\{': items up to '\\}' (an empty set has none)."""
        items = []
        if not self.at("op", "\\}"):
            items.append(self.expr())
            while self.at("op", ","):
                self.take()
                items.append(self.expr())
        self.expect("op", "\\}")
        return ["set", items]

    def atom(self) -> list:
        kind, value = self.take()
        if kind == "num":
            return number_node(value)
        if kind == "sym":
            return ["sym", value]
        if kind == "op":
            if value in "([":
                return self.nested(self.bracketed, value)
            if value == "{":
                return self.nested(self.group, "}")
            if value == "|":
                return ["abs", self.nested(self.group, "|")]
            if value == "\\{":
                return self.nested(self.set_items)
            raise ParseError(f"unexpected {value!r}")
        return self.macro(value)

    def macro(self, name: str) -> list:
        if name == "pi":
            return ["pi"]
        if name == "infty":
            return ["inf"]
        if name in GREEK:
            return ["sym", name]
        if name == "frac":
            numerator = self.argument()
            return ["div", numerator, self.argument()]
        if name == "sqrt":
            if self.at("op", "["):
                self.take()
                index = self.nested(self.group, "]")
                return ["root", self.argument(), index]
            return ["sqrt", self.argument()]
        if name in FUNCTIONS:
            return self.function(name)
        raise ParseError(f"unsupported macro \\{name}")

    def function(self, name: str) -> list:
        """\\sin x, \\sin(2x), \\sin^2 x = (\\sin x)^2, \\log_2 8, \\ln{x}."""
        base = exponent = None
        if name == "log" and self.at("op", "_"):
            self.take()
            base = self.argument()
        if self.at("op", "^"):
            self.take()
            exponent = self.argument()
        if self.at("op", "(", "{"):
            close = ")" if self.take()[1] == "(" else "}"
            argument = self.nested(self.group, close)
        else:
            argument = self.nested(self.power)
        if base is not None:
            tree = ["log", argument, base]
        else:
            tree = ["fn", "log" if name == "ln" else name, argument]
        return ["pow", tree, exponent] if exponent is not None else tree


def _ends_with_number(tree: list) -> bool:
    """Whether the factor just parsed ends with a bare number literal (2, -2, 3x2's last factor 2, 2!)."""
    while tree[0] in ("mul", "neg"):
        tree = tree[-1]
    return tree[0] == "num"


def _is_mixednumber_node(left: list, right: list) -> bool:
    """2\\frac{1}{2}: a non-negative integer literal times a proper fraction of integer literals."""
    if left[0] != "num" or left[2] != 1 or right[0] != "div":
        return False
    numerator, denominator = right[1], right[2]
    return (numerator[0] == "num" == denominator[0] and numerator[2] == 1 == denominator[2]
            and 0 < numerator[1] < denominator[1])


def parse_math(text: str) -> list:
    """The syntax tree of an answer, or ParseError. Also checks the size bound (see `digits_bound`)."""
    tree = _Parser(tokenize(text)).answer()
    if digits_bound(tree) > MAX_DIGITS:
        raise ParseError(f"the value may need more than {MAX_DIGITS} digits")
    return tree


def _integer_literal(tree: list) -> int | None:
    """The value of a literal integer, or of its negation; None for anything else."""
    if tree[0] == "neg":
        inner = _integer_literal(tree[1])
        return None if inner is None else -inner
    if tree[0] == "num" and tree[2] == 1:
        return tree[1]
    return None


_CAP = 1e18


def digits_bound(tree: list) -> float:
    """An upper bound on the decimal digits of the numerators and denominators an exact
    evaluation of `tree` may produce (a symbol counts as one digit); capped at 1e18."""
    kind = tree[0]
    if kind == "num":
        return float(max(len(str(abs(tree[1]))), len(str(tree[2]))))
    if kind in ("sym", "pi", "inf"):
        return 1.0
    if kind in ("neg", "abs", "sqrt"):
        return digits_bound(tree[1])
    if kind == "fn":
        return digits_bound(tree[2])
    if kind in ("add", "sub", "mul", "div", "root", "log"):
        return min(digits_bound(tree[1]) + digits_bound(tree[2]), _CAP)
    if kind == "pow":
        base, exponent = digits_bound(tree[1]), tree[2]
        literal = _integer_literal(exponent)
        if literal is not None:
            return min(base * max(abs(literal), 1), _CAP)
        exponent_digits = digits_bound(exponent)
        return _CAP if exponent_digits > 17 else min(base * 10.0 ** exponent_digits, _CAP)
    if kind == "fact":
        literal = _integer_literal(tree[1])
        argument = literal if literal is not None else 10.0 ** min(digits_bound(tree[1]), 17)
        argument = max(float(argument), 1.0)
        return min(argument * math.log10(argument) + 1.0, _CAP)
    if kind == "tuple":
        return min(sum(digits_bound(item) for item in tree[3]), _CAP)
    if kind in _UNORDERED:
        return min(sum(digits_bound(item) for item in tree[1]), _CAP)
    raise ParseError(f"unknown node {kind!r}")
