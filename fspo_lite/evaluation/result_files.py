"""Result files read back from disk, checked for types and ranges before anything is computed from them.

The report (notebook 04, fspo_lite.drivers.report) and the rejudge tool read what an evaluation wrote: a run's
heldout.json (its metrics), its eval/records.jsonl (one record per response) and a results folder's summary.json.
These files can be edited by hand or damaged; a share of 7.0 (700%) or 1e308 would otherwise flow into means and
intervals (`inf [94.0, 98.5]` in a summary) and a string where a number belongs would fail deep inside pandas. Each
reader here refuses a bad value in one line naming the file, the line, the field, the value and what is valid.

Valid numbers, by name (`metric_bounds`): the decomposition classes are percentages (0-100); counts per response
(sentences, tokens, supported ...) lie in 0-1e6; every other metric is a share (0-1). NaN and null are accepted:
the evaluation writes them where nothing was measured.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fspo_lite import config_checks
from fspo_lite.evaluation.metrics import DECOMPOSITION
from fspo_lite.jsonl import read_jsonl

COUNT_NAMES = ("supported", "unsupported", "checkable", "sentences", "near_duplicates", "tokens", "response_tokens",
               "near_duplicate_sentences", "seeds", "questions", "strata", "items")
"""Metric and column names that count things (per response, or runs and questions): 0 to MAX_COUNT."""
MAX_COUNT = 1e6
LIMIT = 1e9
"""The bound on any other number of a summary (differences, relative changes, settings): finite and this size at
most, so 1e308 or Infinity never reach a table."""
LABELS = (-1, 0, 1)


class ResultFileError(ValueError):
    """A result file holds a value of the wrong type or out of range; the message names file, line and field."""


def metric_bounds(name: str) -> tuple[float, float, str]:
    """(low, high, description) of a metric or table column `name` ('kbqa.correct', 'decomp_all_correct',
    'supported_per_response@kb', 'accuracy_spread', ...)."""
    base = name.split(".", 1)[-1].split("@")[0].removesuffix("_spread").removesuffix("_per_response")
    if base.removeprefix("decomp_") in DECOMPOSITION:
        return 0.0, 100.0, "a percentage from 0 to 100"
    if base in COUNT_NAMES:
        return 0.0, MAX_COUNT, f"a count from 0 to {MAX_COUNT:g}"
    return 0.0, 1.0, "a share from 0 to 1"


def shown(value: Any, limit: int = 40) -> str:
    """A value read from a JSON file as JSON writes it (NaN and infinities as Python does), cut to `limit`."""
    return config_checks.shown(value, limit, render=lambda v: json.dumps(v) if not isinstance(v, float)
                               or math.isfinite(v) else repr(v))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_problem(value: Any, low: float, high: float) -> bool:
    """True when `value` is not null, NaN or a finite number from low to high."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return not _number(value) or not math.isfinite(value) or not low <= value <= high


def _line(text: str, *keys: str, start: int = 0) -> int:
    """The line of `text` (a JSON file) where the last of `keys` appears as a key, looking for each after the one
    before it (a method's row, then its metric) from offset `start`; the line of `start` when none is found."""
    at = start
    for key in keys:
        found = text.find(json.dumps(key) + ":", at)
        at = found if found >= 0 else at
    return text.count("\n", 0, at) + 1


def refuse(path: Path, line: int, field: str, value: Any, valid: str) -> ResultFileError:
    return ResultFileError(f"{path}:{line}: {field}={shown(value)} is not valid; valid: {valid}; correct the value "
                           "or evaluate again")


def read_json_file(path: str | Path) -> tuple[Any, str]:
    """(parsed JSON, its text); ResultFileError naming the line and column of a syntax error."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        return json.loads(text), text
    except UnicodeDecodeError as error:
        raise ResultFileError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    except json.JSONDecodeError as error:
        raise ResultFileError(f"{path}:{error.lineno}:{error.colno}: not JSON ({error.msg})") from None


def check_metrics(metrics: Any, path: Path, text: str, *context: str, start: int = 0) -> None:
    """Every value of a {name: number} mapping within `metric_bounds` of its name (`context`, `start`: where the
    mapping is in `text`, for the line number)."""
    if not isinstance(metrics, dict):
        raise refuse(path, _line(text, *context, start=start), ".".join(context) or "metrics", metrics,
                     "a mapping {name: number}")
    for name, value in metrics.items():
        low, high, valid = metric_bounds(str(name))
        if number_problem(value, low, high):
            raise refuse(path, _line(text, *context, name, start=start), name, value, f"{valid} (or NaN: not measured)")


def read_heldout(path: str | Path) -> dict:
    """A run's heldout.json (fspo_lite.drivers.runs.evaluate_run), checked: method a name, seed an integer or null,
    judge a name or null, every metric in range."""
    path = Path(path)
    record, text = read_json_file(path)
    if not isinstance(record, dict):
        raise ResultFileError(f"{path}:1: not a held-out result (a JSON object with method, seed and metrics)")
    for field, ok, valid in (("method", isinstance(record.get("method"), str) and record.get("method"), "a name"),
                             ("seed", record.get("seed") is None or (isinstance(record.get("seed"), int)
                                                                     and not isinstance(record.get("seed"), bool)),
                              "an integer or null"),
                             ("judge", record.get("judge") is None or isinstance(record.get("judge"), str),
                              "a verifier name or null")):
        if not ok:
            raise refuse(path, _line(text, field), field, record.get(field), valid)
    check_metrics(record.get("metrics"), path, text, "metrics")
    return record


def record_problem(row: Any) -> tuple[str, Any, str] | None:
    """(field, value, what is valid) of the first bad field of an eval record, or None."""
    if not isinstance(row, dict):
        return "record", row, "a JSON object"
    for field in ("benchmark", "id", "grade"):
        if field in row and not isinstance(row[field], str):
            return field, row[field], "a string"
    for field in ("em", "f1", "mc1", "mc2"):
        if field in row and number_problem(row[field], 0.0, 1.0):
            return field, row[field], "a share from 0 to 1"
    for field in ("sample", "response_tokens", "near_duplicate_sentences"):
        value = row.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= LIMIT):
            return field, value, "a whole number >= 0 or null"
    labels = {"sentence_labels": row.get("sentence_labels") or []}
    by_judge = row.get("sentence_labels_by_judge") or {}
    if not isinstance(by_judge, dict):
        return "sentence_labels_by_judge", by_judge, "a mapping {judge: labels}"
    labels.update({f"sentence_labels_by_judge.{judge}": value for judge, value in by_judge.items()})
    for field, value in labels.items():
        if not isinstance(value, list) or not all(type(x) is int and x in LABELS for x in value):
            return field, value, "a list of labels -1, 0 or 1"
    spans, output = row.get("sentence_spans") or [], row.get("output")
    end = len(output) if isinstance(output, str) else LIMIT
    if not isinstance(spans, list) or not all(
            isinstance(s, list) and len(s) == 2 and all(type(x) is int for x in s) and 0 <= s[0] <= s[1] <= end
            for s in spans):
        return "sentence_spans", spans, "a list of [start, end] character offsets into output"
    return None


def read_records(path: str | Path) -> list[dict]:
    """A run's eval/records.jsonl, every record checked (`record_problem`); the error names the line."""
    path = Path(path)
    rows = read_jsonl(path)
    text = path.read_text(encoding="utf-8-sig")
    numbers = [number for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
    for number, row in zip(numbers, rows):
        problem = record_problem(row)
        if problem:
            raise refuse(path, number, *problem)
    return rows


def _walk(value: Any, keys: tuple[str, ...] = ()):
    """(keys to the value, the value) of every number inside nested mappings and lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*keys, str(key)))
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item, keys)
    elif _number(value):
        yield keys, value


def read_summary(path: str | Path) -> dict:
    """A results folder's summary.json (notebook 04), checked: the per-method table and the runs by column name
    (`metric_bounds`), the statistics' means and bounds by their metric, every other number finite and at most LIMIT
    in size."""
    path = Path(path)
    summary, text = read_json_file(path)
    if not isinstance(summary, dict):
        raise ResultFileError(f"{path}:1: not a summary (a JSON object)")
    for method, row in (summary.get("methods") or {}).items():
        check_metrics({k: v for k, v in (row or {}).items() if k != "seeds"}, path, text, "methods", method)
    for row in summary.get("runs") or []:
        at = max(text.find(f'"run": {json.dumps(row.get("run"))}'), 0)
        check_metrics({k: v for k, v in row.items() if k not in ("run", "method", "seed")}, path, text, start=at)
    for row in (summary.get("statistics") or {}).get("methods") or []:
        low, high, valid = metric_bounds(str(row.get("metric")))
        for field in ("mean", "low", "high"):
            if number_problem(row.get(field), low, high):
                raise refuse(path, _line(text, "statistics", "metric"), f"{row.get('metric')} {field}",
                             row.get(field), valid)
    for keys, value in _walk(summary):
        if number_problem(value, -LIMIT, LIMIT):
            raise refuse(path, _line(text, *keys), ".".join(keys), value, f"a finite number of size at most {LIMIT:g}")
    return summary
