"""The benchmark and training files that are not bundled: one folder, one command.

The project ships small data of its own in ``data/`` (knowledge-base QA, multi-hop QA, samples of
TruthfulQA and HaluEval-QA). Everything larger lives in one *data folder*:

- ``$FSPO_LITE_DATA`` when that environment variable is set, else ``~/.cache/fspo-lite/data``;
- filled by ``python -m fspo_lite data prepare [NAME ...]``: each file is downloaded from the hub and
  converted to the project's row format (needs network and the ``datasets`` package), or, with
  ``--from DIR``, copied from a local folder that already holds files of the same names (checked row by row);
- read by name everywhere: the evaluation benchmarks look there before their bundled sample
  (``fspo_lite.evaluation.benchmarks``), the verifier benchmark reads HaluEval-QA from there, and a data
  spec ``data:<name>`` (e.g. ``data.train: data:hotpotqa_train``) names a file in it.

``python -m fspo_lite data list`` shows which files are present. The row formats are plain JSON lines with
the fields listed in `DATA_FILES`; any file with those fields works, wherever it came from.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

DATA_ENV = "FSPO_LITE_DATA"
"""Environment variable naming the data folder."""
DEFAULT_DATA_DIR = Path("~/.cache/fspo-lite/data")


class DataFolderError(ValueError):
    """A data-folder file is missing or cannot be prepared; the message says what to run."""


def data_dir() -> Path:
    """The data folder: $FSPO_LITE_DATA, else ~/.cache/fspo-lite/data (it may not exist yet)."""
    return Path(os.environ.get(DATA_ENV) or DEFAULT_DATA_DIR).expanduser()


# ---- hub row -> project row -------------------------------------------------------------------
def _identity(row: dict, index: int) -> dict:
    return row


def _hotpotqa(row: dict, index: int) -> dict:
    """Hub HotpotQA (distractor): the paragraphs named by the supporting facts become `knowledge`."""
    titles = list(row["context"]["title"])
    sentences = list(row["context"]["sentences"])
    wanted = list(dict.fromkeys(row["supporting_facts"]["title"]))
    paragraphs = [f"{title}: {''.join(sentences[titles.index(title)])}" for title in wanted if title in titles]
    return {"id": row["id"], "question": row["question"], "answer": row["answer"], "knowledge": "\n\n".join(paragraphs)}


def _halueval(row: dict, index: int) -> dict:
    """HaluEval-QA: one candidate per row, the right or the hallucinated answer, drawn with a per-row seed
    (the same file on every machine)."""
    hallucinated = random.Random(index).random() < 0.5
    return {"question": row["question"], "knowledge": row["knowledge"], "right_answer": row["right_answer"],
            "hallucinated_answer": row["hallucinated_answer"],
            "candidate": row["hallucinated_answer"] if hallucinated else row["right_answer"],
            "candidate_is_hallucinated": hallucinated}


def _gsm8k(row: dict, index: int) -> dict:
    """GSM8K: the final number after '####' is the answer."""
    return {"question": row["question"], "answer": row["answer"].split("####")[-1].strip().replace(",", "")}


def _math500(row: dict, index: int) -> dict:
    return {"question": row["problem"], "answer": row["answer"], "subject": row.get("subject", "")}


@dataclass(frozen=True)
class DataFile:
    """One file of the data folder: its name (`<name>.jsonl`), the fields of a row and where it comes from."""

    name: str
    fields: tuple[str, ...]
    hub: str | None
    """'dataset id[:config]@split', or None when the file only comes from a local copy."""
    convert: Callable[[dict, int], dict] = _identity
    rows: tuple[int, int] | None = None
    """(start, stop) rows of the hub split to keep, e.g. HaluEval's first 5000 as the test file."""
    description: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}.jsonl"


DATA_FILES = {f.name: f for f in [
    DataFile("hotpotqa_train", ("id", "question", "answer", "knowledge"), "hotpot_qa:distractor@train", _hotpotqa,
             description="HotpotQA questions with their supporting paragraphs as evidence (FSPO's training QA)"),
    DataFile("halueval_qa_test", ("question", "knowledge", "right_answer", "hallucinated_answer", "candidate",
                                  "candidate_is_hallucinated"), "pminervini/HaluEval:qa@data", _halueval, (0, 5000),
             description="HaluEval-QA rows 1-5000 (the FSPO split's test half): benchmark and verifier test set"),
    DataFile("halueval_qa_train", ("question", "knowledge", "right_answer", "hallucinated_answer", "candidate",
                                   "candidate_is_hallucinated"), "pminervini/HaluEval:qa@data", _halueval,
             (5000, 10000), description="HaluEval-QA rows 5001-10000: verifier thresholds and calibration"),
    DataFile("truthfulqa", ("question", "best_answer", "correct_answers", "incorrect_answers", "category"),
             "truthful_qa:generation@validation", description="TruthfulQA, all 817 questions (MC and generation)"),
    DataFile("halluqa", ("question_id", "category", "question", "best_answers", "wrong_answers"), None,
             description="HalluQA (Chinese, 450 questions); not on the hub: prepare it --from a local copy"),
    DataFile("gsm8k_test", ("question", "answer"), "openai/gsm8k:main@test", _gsm8k, description="GSM8K test"),
    DataFile("gsm8k_train", ("question", "answer"), "openai/gsm8k:main@train", _gsm8k, description="GSM8K train"),
    DataFile("math500_test", ("question", "answer", "subject"), "HuggingFaceH4/MATH-500@test", _math500,
             description="MATH-500"),
    DataFile("simplerl_math_train", ("question", "answer", "subject"), None,
             description="SimpleRL math training set (MATH levels 3-5); prepare it --from a local copy"),
]}


def data_file(name: str) -> DataFile:
    try:
        return DATA_FILES[name]
    except KeyError:
        raise DataFolderError(f"unknown data file {name!r}; choose from {', '.join(DATA_FILES)}") from None


def local_path(name: str, folder: Path | None = None) -> Path | None:
    """The file's path in the data folder when it is there, else None."""
    path = (folder or data_dir()) / data_file(name).filename
    return path if path.is_file() else None


def require(name: str, folder: Path | None = None) -> Path:
    """The file's path in the data folder, or an error that says how to get it."""
    path = local_path(name, folder)
    if path is None:
        folder = folder or data_dir()
        raise DataFolderError(f"{folder / data_file(name).filename} is missing: run `python -m fspo_lite data "
                              f"prepare {name}` (network), or `... --from DIR` with a local copy; the data folder is "
                              f"${DATA_ENV} (now {folder})")
    return path


# ---- prepare ---------------------------------------------------------------------------------------
def check_rows(rows: Iterable[dict], entry: DataFile, where: str) -> int:
    """Count the rows, raising DataFolderError at the first one that is not an object with every field."""
    count = 0
    for count, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise DataFolderError(f"{where}:{count}: expected a JSON object, got {type(row).__name__}")
        missing = [f for f in entry.fields if f not in row]
        if missing:
            raise DataFolderError(f"{where}:{count}: missing field(s) {', '.join(missing)} "
                                  f"(a {entry.name} row has {', '.join(entry.fields)})")
    if not count:
        raise DataFolderError(f"{where}: no rows")
    return count


def _jsonl_rows(path: Path) -> Iterable[dict]:
    with open(path, encoding="utf-8-sig") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise DataFolderError(f"{path}:{number}: broken JSON ({error.msg})") from None


def _hub_rows(entry: DataFile) -> list[dict]:
    if entry.hub is None:
        raise DataFolderError(f"{entry.name} is not on the hub: prepare it with --from DIR (a folder holding "
                              f"{entry.filename})")
    try:
        import datasets
    except ImportError:
        raise DataFolderError("downloading needs the 'datasets' package: pip install datasets") from None
    name, _, split = entry.hub.partition("@")
    dataset_id, _, config_name = name.partition(":")
    try:
        dataset = datasets.load_dataset(dataset_id, config_name or None, split=split)
    except Exception as error:  # offline, unknown id, ...: one line, with the way out
        raise DataFolderError(f"could not download {entry.hub} ({type(error).__name__}: {str(error)[:200]}); "
                              f"offline, prepare {entry.name} with --from DIR") from None
    start, stop = entry.rows or (0, len(dataset))
    return [entry.convert(dict(dataset[i]), i) for i in range(start, min(stop, len(dataset)))]


def prepare(name: str, source_dir: str | Path | None = None, folder: Path | None = None,
            force: bool = False) -> tuple[Path, int, str]:
    """Put one file into the data folder: (path, rows, where it came from). An existing file is kept unless
    `force`. With `source_dir`, `<source_dir>/<name>.jsonl` is checked row by row and copied; else the hub split
    is downloaded and converted. The file is written to a temporary name first, so a failure leaves no half file."""
    entry = data_file(name)
    folder = folder or data_dir()
    target = folder / entry.filename
    if target.is_file() and not force:
        return target, check_rows(_jsonl_rows(target), entry, str(target)), "already present"
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".jsonl.partial")
    if source_dir is not None:
        source = Path(source_dir).expanduser() / entry.filename
        if not source.is_file():
            raise DataFolderError(f"{source} does not exist (--from needs a folder holding {entry.filename})")
        count = check_rows(_jsonl_rows(source), entry, str(source))
        shutil.copyfile(source, partial)
        origin = f"copied from {source}"
    else:
        rows = _hub_rows(entry)
        count = check_rows(rows, entry, entry.hub)
        with open(partial, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        origin = f"downloaded from hf:{entry.hub}"
    partial.replace(target)
    return target, count, origin
