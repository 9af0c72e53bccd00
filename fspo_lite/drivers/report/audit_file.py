"""audit.json (written by `audit score --json`) read back for the report and the README, every field checked: an
interval with its low above its high, a non-finite number or markup in a name would otherwise rewrite the verdict
block silently. Each problem is a ResultFileError naming the file, line and field."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from fspo_lite.config_checks import INDEX
from fspo_lite.evaluation.result_files import ResultFileError, number_problem, read_json_file, refuse

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A method or judge name as fspo-lite writes one: no spaces, no markup."""


def _count(value: Any) -> bool:
    """A whole number from 0 to 10^9 (the input checks' INDEX)."""
    return isinstance(value, int) and not isinstance(value, bool) and INDEX.holds(value)


def read_audit(path: str | Path) -> dict:
    """The checked content of an audit.json; ResultFileError (file, line, field) for anything `audit score` does
    not write: names that are not plain names, counts that are not whole numbers, a share outside 0-1, an interval
    that is not finite, not within -1..1 or with low > diff > high, a level outside (0, 1)."""
    path = Path(path)
    audit, text = read_json_file(path)

    def line(key: str) -> int:
        found = text.find(json.dumps(key) + ":")
        return text.count("\n", 0, max(found, 0)) + 1

    if not isinstance(audit, dict):
        raise ResultFileError(f"{path}:1: not an audit (a JSON object written by `audit score --json`)")
    methods = audit.get("methods")
    if not (isinstance(methods, list) and len(methods) == 2 and all(isinstance(m, str) and NAME.fullmatch(m)
                                                                    for m in methods)):
        raise refuse(path, line("methods"), "methods", methods, "two method names (letters, digits, _ . -)")
    for key in ("items", "questions", "n_resamples", "seed"):
        if not _count(audit.get(key)):
            raise refuse(path, line(key), key, audit.get(key), "a whole number from 0")
    if audit.get("difference") != f"{methods[1]} - {methods[0]}":
        raise refuse(path, line("difference"), "difference", audit.get("difference"),
                     f"'{methods[1]} - {methods[0]}' (the methods in order)")
    counts = audit.get("counts")
    if not isinstance(counts, dict) or set(counts) != set(methods):
        raise refuse(path, line("counts"), "counts", counts, "one entry per method")
    for method, entry in counts.items():
        if not (isinstance(entry, dict) and set(entry) == {"supported", "unsupported", "not_checkable"}
                and all(_count(v) for v in entry.values())):
            raise refuse(path, line(method), f"counts.{method}", entry,
                         "whole numbers for supported, unsupported, not_checkable")
    shares = audit.get("unsupported_share")
    if not isinstance(shares, dict) or any(number_problem(v, 0.0, 1.0) for v in shares.values()):
        raise refuse(path, line("unsupported_share"), "unsupported_share", shares, "a share from 0 to 1 per method")
    values = {}
    for key in ("diff", "low", "high"):
        value = audit.get(key)
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and -1.0 <= value <= 1.0):
            raise refuse(path, line(key), key, value, "a finite difference of shares from -1 to 1")
        values[key] = value
    if not values["low"] <= values["diff"] <= values["high"]:
        raise refuse(path, line("low"), "low/diff/high", [values["low"], values["diff"], values["high"]],
                     "low <= diff <= high")
    level = audit.get("level")
    if number_problem(level, 0.0, 1.0) or level in (None, 0, 1) or (isinstance(level, float) and math.isnan(level)):
        raise refuse(path, line("level"), "level", level, "a number between 0 and 1")
    agreement = audit.get("judge_agreement") or {}
    if not isinstance(agreement, dict):
        raise refuse(path, line("judge_agreement"), "judge_agreement", agreement, "an object")
    for judge, entry in agreement.items():
        if not (isinstance(judge, str) and NAME.fullmatch(judge) and isinstance(entry, dict)
                and not number_problem(entry.get("agree"), 0.0, 1.0) and entry.get("agree") is not None
                and _count(entry.get("n"))):
            raise refuse(path, line("judge_agreement"), f"judge_agreement.{str(judge)[:40]}", entry,
                         "a judge name, with agree from 0 to 1 and a whole number n")
    return audit
