r"""How the parts of a math answer combine into one tree (for `fspo_lite.scoring.grading.latex_math`).

An answer is one or more parts joined by ",", "or", "and" or \\quad; a part is a value ("2", "x = 2"), a set or an
interval ("x \\in [0, 1)"), or an inequality on one variable, read as the interval it describes ("1 \\le x < 2" ->
[1, 2)). `combine_parts` turns the parts into a bare list, a union or one interval, and refuses (ParseError) what a
grader could read two ways. Trees only; nothing is evaluated.
"""

from __future__ import annotations

from fspo_lite.scoring.grading.latex_tokens import ParseError
QUADS = ("quad", "qquad")
"""Spacing macros that separate the parts of an answer ("x = 2 \\quad x = -3")."""
_BOUND = {"lt": ("(", ")"), "le": ("[", "]")}
"""The bracket an endpoint gets from a strict (lt) or non-strict (le) inequality."""


def inequality_interval(items: list, relations: list[str]) -> tuple[list, str]:
    """The interval an inequality describes, and its variable: "x < 3" -> (-\\infty, 3); "x \\ge 3" -> [3, \\infty);
    "1 \\le x < 2" -> [1, 2); "3 > x" -> (-\\infty, 3). The variable must be a single letter standing alone on its side,
    absent from the bounds; anything else ("x \\ne 3", "y < x", "f(2) < f(1)", "-x > -1") raises ParseError."""
    if "eq" in relations:
        raise ParseError("an equation is not an interval")
    positions = [index for index, item in enumerate(items) if item[0] == "sym"]
    if len(items) == 2 and len(positions) == 1:
        position = positions[0]
    elif len(items) == 3 and positions == [1]:
        position = 1
    else:
        raise ParseError("an inequality must bound one variable standing alone")
    variable = items[position][1]
    if any(mentions(item, variable) for index, item in enumerate(items) if index != position):
        raise ParseError("the variable appears in its own bound")
    lower, upper = ["(", ["neg", ["inf"]]], [")", ["inf"]]
    for index, relation in enumerate(relations):
        # x < b: x is bounded above by b; a < x: x is bounded below by a (and the reverse for > and >=)
        bounded_above = (relation in ("lt", "le")) == (index == position)
        bound = items[index + 1] if index == position else items[index]
        strictness = "lt" if relation in ("lt", "gt") else "le"
        if bounded_above:
            if upper[1] != ["inf"]:
                raise ParseError("two upper bounds")
            upper = [_BOUND[strictness][1], bound]
        else:
            if lower[1] != ["neg", ["inf"]]:
                raise ParseError("two lower bounds")
            lower = [_BOUND[strictness][0], bound]
    return ["tuple", lower[0], upper[0], [lower[1], upper[1]]], variable


def mentions(tree, name: str) -> bool:
    """Whether the symbol `name` occurs anywhere in `tree`."""
    if isinstance(tree, list):
        if tree[:1] == ["sym"] and tree[1:] == [name]:
            return True
        return any(mentions(item, name) for item in tree[1:])
    return False


def combine_parts(parts: list[tuple[str, list, str | None]], joins: set[str]) -> list:
    """The tree of a whole answer from its parts. One part is its own tree. Values joined by ",", "or", "and" or
    \\quad are a bare list ["list", items] ("x = 2 or x = -3" = "2, -3"), provided every named variable is the same
    (x = 1, y = 2 is a system's solution: ParseError, left to the other checks). Sets and inequalities joined by "or"
    or "," are a union ("x < -1 or x > 2" = (-\\infty, -1) \\cup (2, \\infty)); "a < x and x < b" is one interval.
    Values mixed with sets raise ParseError."""
    kinds = {kind for kind, _, _ in parts}
    variables = {variable for _, _, variable in parts if variable is not None}
    if len(variables) > 1:
        raise ParseError("parts name different variables")
    if len(parts) == 1:
        return parts[0][1]
    if kinds == {"value"}:
        return ["list", [tree for _, tree, _ in parts]]
    if kinds != {"set"}:
        raise ParseError("values mixed with sets")
    if "and" in joins:
        if len(parts) != 2 or joins != {"and"}:
            raise ParseError("'and' joins two inequalities only")
        return intersect_bounds(parts[0][1], parts[1][1])
    items = []
    for _, tree, _ in parts:
        items.extend(tree[1] if tree[0] == "union" else [tree])
    return ["union", items]


def intersect_bounds(first: list, second: list) -> list:
    """"x > 1 and x < 3": a lower bound and an upper bound (each from an inequality) make one interval."""
    infinite = (["neg", ["inf"]], ["inf"])
    for low, high in ((first, second), (second, first)):
        if (low[0] == high[0] == "tuple" and low[3][1] == infinite[1] and low[2] == ")"
                and high[3][0] == infinite[0] and high[1] == "(" and low[3][0] != infinite[0] and high[3][1] != infinite[1]):
            return ["tuple", low[1], high[2], [low[3][0], high[3][1]]]
    raise ParseError("'and' must join a lower and an upper bound")

