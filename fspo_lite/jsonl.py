"""JSON lines: the one way the package reads a .jsonl file back (run logs, evaluation records, data, gold labels).

A record ends at "\\n" and nowhere else. `str.splitlines()` also breaks at U+2028, U+2029, U+0085 and a few other
characters, and `json.dumps(..., ensure_ascii=False)` leaves those raw inside strings; a sampled answer that holds
one would be cut in two and the whole folder would fail to load. Iterating over a file opened in text mode is safe
(it breaks at "\\n", "\\r" and "\\r\\n" only, and JSON escapes "\\r" inside strings), and so is `json_lines` below.
"""

from __future__ import annotations

import json
from pathlib import Path


def json_lines(text: str) -> list[str]:
    """The records of a JSON-lines text: its lines split at "\\n" only, blank lines left out."""
    return [line for line in text.split("\n") if line.strip()]


def read_jsonl(path: str | Path, *, torn_tail: bool = False) -> list:
    """The parsed records of a UTF-8 JSON-lines file. A line that is not JSON raises ValueError naming the file and
    the line; with `torn_tail`, a broken *last* line (what a process killed while appending leaves) is skipped
    instead, and bytes that are not UTF-8 read as U+FFFD rather than failing the whole file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace" if torn_tail else "strict")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    numbered = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
    rows = []
    for index, (number, line) in enumerate(numbered):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if torn_tail and index == len(numbered) - 1:
                break
            raise ValueError(f"{path}:{number}: not a JSON line ({error.msg})") from None
    return rows
