"""QA examples and the loaders that produce them.

One record type serves every data set: training sets (bundled knowledge-base QA, multi-hop, HotpotQA with evidence,
GSM8K, MATH/SimpleRL) and the QA-style benchmarks. A source is named by a string:

- ``bundled:<name>``: ``data/<name>.jsonl`` shipped with the project,
- ``data:<name>``: ``<name>.jsonl`` in the data folder (``python -m fspo_lite data prepare``; see
  ``fspo_lite.data.files``), e.g. ``data:hotpotqa_train``,
- a local ``.jsonl`` / ``.json`` / ``.parquet`` path,
- ``hf:<dataset id>[:<config>][@<split>]``: a hub dataset (needs network and `datasets`).

Field names of the common releases are mapped onto the record (``answer``/``answers``/``right_answer``,
``knowledge``/``evidence``/``context``...), so the data folder's files and common hub releases load as they are.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from fspo_lite.data.files import DataFolderError, require
from fspo_lite.data.row_limits import MAX_ANSWER_CHARS, MAX_QUESTION_CHARS, MAX_TEXT_CHARS, decode_json, text_problem

# The bundled samples: data/ at the root of a checkout; an installed wheel carries a copy as fspo_lite/bundled_data
# (setup.py), which wins when present.
WHEEL_DATA = Path(__file__).resolve().parents[1] / "bundled_data"
DATA_DIR = WHEEL_DATA if WHEEL_DATA.is_dir() else Path(__file__).resolve().parents[2] / "data"


MATH_SOURCES = ("gsm8k", "math", "simplerl", "aime")
TASKS = ("qa", "math")


@dataclass
class QAExample:
    """A question with its accepted answers and (possibly empty) evidence text."""

    id: str
    question: str
    answers: list[str]
    evidence: str = ""
    source: str = ""
    task: str = "qa"
    """'qa' (graded by answer F1/EM) or 'math' (graded by answer equivalence; no step verification)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        return self.answers[0] if self.answers else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DataError(ValueError):
    """A data file or row is malformed; the message names the file, line and field."""


def _plain(value: Any) -> Any:
    """Parquet/pandas values as plain Python: arrays become lists, NaN (a missing cell) None."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _first(row: dict, *keys: str, default=None):
    for key in keys:
        if key in row and row[key] is not None:
            return row[key]
    return default


def _as_text(value: Any, where: str = "") -> str:
    """Evidence may come as a string, a list of paragraphs, or HotpotQA's {title, sentences} context."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "sentences" in value:  # hub HotpotQA context
        titles, sentences = value.get("title") or [], value["sentences"]
        if not isinstance(titles, list) or not isinstance(sentences, list) or not all(
                isinstance(group, list) and all(isinstance(x, str) for x in group) for group in sentences):
            raise DataError(f"{where}: field 'evidence' has a {{title, sentences}} context of the wrong shape")
        return "\n\n".join(
            f"{t}: {''.join(s)}" if t else "".join(s) for t, s in zip(titles, sentences)
        )
    if isinstance(value, (list, tuple)):
        return "\n\n".join(_as_text(v, where) for v in value if v)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise DataError(f"{where}: field 'evidence' should be text or a list of texts, got {type(value).__name__}")


def _as_answers(value: Any, where: str = "") -> list[str]:
    if value is None:
        return []
    if isinstance(value, dict) and "text" in value:  # SQuAD-style {"text": [...]}
        return _as_answers(value["text"], where)
    values = value if isinstance(value, (list, tuple)) else [value]
    answers = []
    for item in values:
        if item is None:
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise DataError(f"{where}: field 'answers' should hold strings or numbers, got {type(item).__name__}")
        if str(item).strip():
            answers.append(str(item))
    return answers


def check_text_fields(value: Any, where: str, field_name: str = "", limit: int = MAX_TEXT_CHARS) -> None:
    """DataError naming the row and field of a lone surrogate or a string over `limit` characters (row_limits)."""
    problem = text_problem(value, field_name, limit)
    if problem is not None:
        raise DataError(f"{where}: {problem}")


def _gsm8k_final(answer: str) -> str:
    """GSM8K hub answers end with '#### 42'; the data folder's files hold just '42'."""
    return answer.split("####")[-1].strip().replace(",", "") if "####" in answer else answer


def record_from_row(row: dict, source: str, index: int, where: str = "") -> QAExample:
    """Map a raw row of any supported release onto a QAExample, or raise DataError naming the field."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    row = _plain(row)
    question = _first(row, "question", "problem", "query", "prompt")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: field 'question' is missing, empty or not a string")
    check_text_fields(question, where, "question", MAX_QUESTION_CHARS)
    answers = _as_answers(_first(row, "answers", "answer", "right_answer", "best_answer", "solution"), where)
    if not answers:
        raise DataError(f"{where}: no answer field (answers / answer / right_answer / best_answer)")
    check_text_fields(answers, where, "answers", MAX_ANSWER_CHARS)
    check_text_fields(row, where)  # evidence, ids and extra fields: no lone surrogate, no string over MAX_TEXT_CHARS
    canonical = "task" in row  # rows written by this project (save_examples) carry their own source
    task = row.get("task") or ("math" if any(s in source.lower() for s in MATH_SOURCES) else "qa")
    if task not in TASKS:
        raise DataError(f"{where}: field 'task' must be one of {', '.join(TASKS)}, got {task!r}")
    if not isinstance(row.get("extra") or {}, dict):
        raise DataError(f"{where}: field 'extra' should be an object, got {type(row['extra']).__name__}")
    identifier = _first(row, "id", "_id", "question_id", default=f"{source}-{index}")
    if isinstance(identifier, bool) or not isinstance(identifier, (str, int)):
        raise DataError(f"{where}: field 'id' should be a string or an integer, got {type(identifier).__name__}")
    if task == "math":
        answers = [_gsm8k_final(a) for a in answers]
    known = {"id", "_id", "question_id", "question", "problem", "query", "prompt", "answers", "answer",
             "right_answer", "best_answer", "solution", "evidence", "knowledge", "context", "task", "extra"}
    if canonical:
        known.add("source")
    extra = dict(row.get("extra") or {})
    extra.update({k: v for k, v in row.items() if k not in known})
    return QAExample(
        id=str(identifier),
        question=question.strip(),
        answers=answers,
        evidence=_as_text(_first(row, "evidence", "knowledge", "context"), where),
        source=str(row.get("source") or source) if canonical else source,
        task=task,
        extra=extra,
    )


def _json_problem(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):  # msg may end in "at" ("Unterminated string starting at")
        return f"{error.msg}{'' if error.msg.endswith(' at') else ' at'} column {error.colno}"
    return str(error).split(";")[0]


def _read_jsonl(path: Path, skip_bad: bool, stats: dict) -> Iterable[tuple[int, dict]]:
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # a leading BOM is not data
            except UnicodeDecodeError as error:
                if skip_bad:
                    stats["skipped"] += 1
                    continue
                raise DataError(f"{path}:{line_number}: invalid UTF-8 ({error.reason})") from None
            if not text.strip():
                continue
            try:
                row = decode_json(text)
            except ValueError as error:
                if skip_bad:
                    stats["skipped"] += 1
                    continue
                raise DataError(f"{path}:{line_number}: broken JSON ({_json_problem(error)})") from None
            yield line_number, row


def _rows_from_path(path: Path, skip_bad: bool, stats: dict) -> Iterable[tuple[int, dict]]:
    """The rows of a local file; DataError when it holds none at all (an empty file said nothing clear later:
    "max() arg is an empty sequence")."""
    count, skipped = 0, stats.get("skipped", 0)
    for item in _file_rows(path, skip_bad, stats):
        count += 1
        yield item
    if not count and stats.get("skipped", 0) == skipped:
        raise DataError(f"{path}: the file holds no rows (it is empty)")


def _file_rows(path: Path, skip_bad: bool, stats: dict) -> Iterable[tuple[int, dict]]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        yield from _read_jsonl(path, skip_bad, stats)
    elif suffix == ".json":
        try:
            rows = decode_json(path.read_bytes().decode("utf-8-sig"))
        except UnicodeDecodeError as error:
            raise DataError(f"{path}: invalid UTF-8 at byte {error.start} ({error.reason})") from None
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: broken JSON ({_json_problem(error)}, line {error.lineno})") from None
        except ValueError as error:
            raise DataError(f"{path}: broken JSON ({_json_problem(error)})") from None
        rows = rows.get("data") if isinstance(rows, dict) else rows
        if not isinstance(rows, list):
            raise DataError(f"{path}: expected a list of objects (or {{\"data\": [...]}}) at the top level")
        yield from enumerate(rows, start=1)
    elif suffix == ".parquet":
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except Exception as error:  # pyarrow raises several types for a damaged file
            raise DataError(f"{path}: not a readable parquet file ({type(error).__name__}: {error})") from None
        yield from enumerate(frame.to_dict("records"), start=1)
    else:
        raise DataError(f"{path}: unsupported file type {suffix!r} (use .jsonl, .json or .parquet)")


def _rows_from_hub(spec: str) -> Iterable[tuple[int, dict]]:
    try:
        import datasets
    except ImportError:
        raise DataError("hub data sets need the 'datasets' package: pip install datasets") from None
    name, _, split = spec.partition("@")
    dataset_id, _, config_name = name.partition(":")
    try:
        dataset = datasets.load_dataset(dataset_id, config_name or None, split=split or "train")
    except Exception as error:
        raise DataError(
            f"could not load hub data set '{dataset_id}' ({type(error).__name__}: {error}). Offline, use a local "
            f"file or one of the bundled sets: {', '.join(bundled_names())}"
        ) from error
    yield from enumerate(dataset, start=1)


def bundled_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.jsonl"))


def resolve_source(spec: str) -> tuple[str, Path | None]:
    """(source name, local path or None for hub) for a data spec string."""
    if spec.startswith("bundled:"):
        name = spec.split(":", 1)[1]
        path = DATA_DIR / f"{name}.jsonl"
        if not path.exists():
            raise DataError(f"no bundled data set '{name}'; available: {', '.join(bundled_names())}")
        return name, path
    if spec.startswith("data:"):
        name = spec.split(":", 1)[1]
        try:
            return name, require(name)
        except DataFolderError as error:
            raise DataError(str(error)) from None
    if spec.startswith("hf:"):
        return spec[3:].split("@")[0].split(":")[0].split("/")[-1], None
    path = Path(spec).expanduser()
    if path.is_dir():
        raise DataError(f"data source '{spec}' is a folder; give a .jsonl/.json/.parquet file inside it")
    if not path.exists():
        raise DataError(
            f"data source '{spec}' is not a file; use bundled:<name> ({', '.join(bundled_names())}), "
            "data:<name> (the data folder), a .jsonl/.json/.parquet path, or hf:<dataset id>"
        )
    return path.stem, path


def read_rows(spec: str, skip_bad_rows: bool = False, stats: dict | None = None) -> list[dict]:
    """The raw rows of a source (bundled name, local file or hub id), for benchmarks whose items are not
    QA records (TruthfulQA choices, HaluEval candidates, HalluQA answer lists)."""
    stats = stats if stats is not None else {}
    stats.setdefault("skipped", 0)
    _, path = resolve_source(spec)
    rows = _rows_from_hub(spec[3:]) if path is None else _rows_from_path(path, skip_bad_rows, stats)
    unit = {".jsonl": ":", ".json": ": item "}.get(path.suffix.lower() if path is not None else "", ": row ")
    kept = []
    for number, row in rows:
        row = _plain(row)
        try:
            check_text_fields(row, f"{path if path is not None else spec}{unit}{number}")
        except DataError as error:
            if not skip_bad_rows:
                raise DataError(f"{error} (data.skip_bad_rows=true skips and counts malformed rows)") from None
            stats["skipped"] += 1
            continue
        kept.append(row)
    return kept


def load_examples(
    spec: str, limit: int | None = None, seed: int | None = None, skip_bad_rows: bool = False, stats: dict | None = None
) -> list[QAExample]:
    """Load QA examples from a bundled name, a local file or a hub id.

    `seed` shuffles before `limit` is applied. With skip_bad_rows, malformed rows are skipped
    and counted in `stats['skipped']`; otherwise the first one raises DataError naming the
    file, line (item / row for .json / .parquet) and field. A file that cannot be read at all
    (broken .json, damaged .parquet) is always an error.
    """
    stats = stats if stats is not None else {}
    stats.setdefault("skipped", 0)
    source, path = resolve_source(spec)
    rows = _rows_from_hub(spec[3:]) if path is None else _rows_from_path(path, skip_bad_rows, stats)
    unit = {".jsonl": ":", ".json": ": item "}.get(path.suffix.lower() if path is not None else "", ": row ")
    where_prefix = str(path) if path is not None else spec
    examples = []
    for line_number, row in rows:
        try:
            examples.append(record_from_row(row, source, line_number - 1, f"{where_prefix}{unit}{line_number}"))
        except DataError as error:
            if not skip_bad_rows:
                raise DataError(f"{error} (data.skip_bad_rows=true skips and counts malformed rows)") from None
            stats["skipped"] += 1
    if seed is not None:
        random.Random(seed).shuffle(examples)
    return examples[:limit] if limit else examples


MIXTURE_SEPARATOR = " + "
_LIMITED = re.compile(r"^(?P<spec>.+?)\[(?P<limit>\d+)\]$")


def parse_mixture(spec: str) -> list[tuple[str, int | None]]:
    """Split 'a[N] + b' into [(a, N), (b, None)]: several sources joined by ' + ' (spaces
    around the plus), each optionally limited to its first N examples with a trailing [N]."""
    parts = [part.strip() for part in spec.split(MIXTURE_SEPARATOR)]
    if any(not part for part in parts):
        raise DataError(f"data spec {spec!r} has an empty part; join sources as 'a + b[1000]'")
    mixture = []
    for part in parts:
        match = _LIMITED.match(part)
        mixture.append((match["spec"].strip(), int(match["limit"])) if match else (part, None))
    return mixture


def load_mixture(spec: str, seed: int | None = None, skip_bad_rows: bool = False,
                 stats: dict | None = None) -> list[QAExample]:
    """Examples of every source in a mixture spec (see `parse_mixture`), concatenated in order.

    Each source is shuffled with `seed` before its limit, so '[N]' is a seeded random subset.
    A single source without '+' or '[N]' behaves exactly like `load_examples(spec, seed=seed)`.
    `skip_bad_rows` and `stats` work as in `load_examples` (skipped rows of all sources are summed).
    """
    stats = stats if stats is not None else {}
    stats.setdefault("skipped", 0)
    examples = []
    for part, limit in parse_mixture(spec):
        examples += load_examples(part, limit=limit, seed=seed, skip_bad_rows=skip_bad_rows, stats=stats)
    return examples


def save_examples(examples: Iterable[QAExample], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for example in examples:
            handle.write(json.dumps(example.to_dict(), ensure_ascii=False) + "\n")


def portable_spec(spec: str, root: str | Path | None = None) -> str:
    """A data spec or path as a user of another checkout can type it, for records of how a result was made:
    an absolute path inside the repository (`root`, default: this checkout) becomes relative to it, and a copy of
    a bundled file anywhere (e.g. another checkout's data/kbqa_train.jsonl) becomes `bundled:<name>`; anything
    else (bundled:, hf:, relative paths, files outside) comes back unchanged."""
    if not spec or not (spec.startswith("/") or spec.startswith("~")):
        return spec
    root = Path(root).resolve() if root is not None else DATA_DIR.parent
    path = Path(spec).expanduser().resolve()
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix() or "."
    bundled = DATA_DIR / path.name
    if path.suffix == ".jsonl" and path.is_file() and bundled.is_file() and path.read_bytes() == bundled.read_bytes():
        return f"bundled:{path.stem}"
    return spec
