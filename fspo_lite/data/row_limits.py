"""Limits on a data row: the JSON a loader accepts, and the text no loader should pass on to a tokenizer.

Pure functions of plain values; `fspo_lite.data.examples` turns a problem into a DataError naming the file, line and field.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_QUESTION_CHARS = 20_000
"""Longest question a row may hold (the longest in the data folder's files: 4,309 characters, a SimpleRL math
problem). A longer one is a broken or hostile row: the whole question is tokenized before the prompt is cut to
data.max_prompt_tokens, so its cost grows with its length (docs/history.md, "Reliability")."""
MAX_ANSWER_CHARS = 10_000
"""Longest gold answer (answers are compared by F1 and math equivalence, which need short strings)."""
MAX_TEXT_CHARS = 200_000
"""Longest evidence text, and longest string anywhere in a row (the data folder's longest evidence: 10,946)."""


def lone_surrogate(text: str) -> int | None:
    """Index of the first lone surrogate code point in `text` (JSON's \\ud800 escape decodes to one), else None.
    No tokenizer can encode one: it crashed tokenization after the model had loaded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def text_problem(value: Any, field_name: str = "", limit: int = MAX_TEXT_CHARS) -> str | None:
    """What is wrong with the strings in `value` (nested lists and objects too, keys included), naming the field,
    or None: a lone surrogate, or a string longer than `limit` characters."""
    if isinstance(value, str):
        index = lone_surrogate(value)
        if index is not None:
            return (f"field '{field_name}' holds a lone surrogate (U+{ord(value[index]):04X} at character {index}), "
                    "which is not text a tokenizer can encode")
        if len(value) > limit:
            return f"field '{field_name}' has {len(value):,} characters; at most {limit:,} are accepted"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else []
    for key, item in items:
        name = f"{field_name}.{key}".strip(".") if isinstance(value, dict) else field_name
        problem = (text_problem(key, name + " (its name)", limit) if isinstance(key, str) else None) \
            or text_problem(item, name, limit)
        if problem is not None:
            return problem
    return None


def _reject_constant(name: str):
    if name == "NaN":  # pandas writes a missing value as NaN (e.g. TruthfulQA's "source" field): read it as null
        return None
    raise ValueError(f"{name} is not a valid JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def decode_json(text: str):
    """json.loads that accepts only standard JSON, plus NaN read as null (a missing value, as pandas writes it):
    Infinity and numbers overflowing to inf are refused (ValueError); so are integers over Python's digit limit and nesting deep enough to
    exhaust recursion (both as ValueError, whose message says which)."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None
