"""The user's own training data, in the shapes a TRL user has it: `as_examples` turns a list of dicts, a file path
(or any data spec of fspo_lite.data.examples) or a Hugging Face `datasets.Dataset` into QA examples.

Each row needs a question and an answer (the field names of fspo_lite.data.examples.record_from_row: question /
problem / prompt, answer / answers, optional evidence / context); other columns are kept and reach the user's reward
functions by name. A wrong shape is a one-line DataError naming the row.
"""

from __future__ import annotations

from os import PathLike
from typing import Any

from fspo_lite.data.examples import DataError, QAExample, load_mixture, record_from_row

SHAPES = "a list of dicts with question and answer, a .jsonl/.json/.parquet path or a datasets.Dataset"


def as_examples(data: Any, name: str = "train_dataset", seed: int | None = None) -> list[QAExample]:
    """QA examples from `data` (module docstring); `seed` shuffles a file as data.train's are. DataError in one
    line for any other shape, an empty set or a row without a question or an answer."""
    if isinstance(data, (str, PathLike)):
        examples = load_mixture(str(data), seed=seed)
    elif isinstance(data, dict) or isinstance(data, (bytes, int, float)) or data is None:
        raise DataError(f"{name}: got {type(data).__name__}; expected {SHAPES}")
    elif hasattr(data, "column_names") or isinstance(data, (list, tuple)) or hasattr(data, "__iter__"):
        columns = getattr(data, "column_names", None)
        if isinstance(columns, list) and not {"question", "problem", "query", "prompt"} & set(columns):
            raise DataError(f"{name}: no question column (question / problem / prompt); its columns: "
                            f"{', '.join(columns)[:120]}")
        examples = [row if isinstance(row, QAExample) else record_from_row(row, name, index, f"{name}[{index}]")
                    for index, row in enumerate(data)]
    else:
        raise DataError(f"{name}: got {type(data).__name__}; expected {SHAPES}")
    if not examples:
        raise DataError(f"{name} is empty; it needs at least one question")
    return examples
