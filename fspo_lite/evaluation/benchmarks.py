"""Benchmark registry and loaders: where each benchmark's data comes from and what one item is.

Each benchmark has up to three default sources, tried in order: its file in the data folder (the full
release, put there by `python -m fspo_lite data prepare`, see `fspo_lite.data.files`), the project's bundled
data (a sample for TruthfulQA and HaluEval-QA), then a hub id (needs network and `datasets`). Any of them is
replaced by `evaluation.sources.<name>`: a bundled name, a local file, `data:<name>` or `hf:<id>`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from fspo_lite.config_checks import ConfigError
from fspo_lite.data.examples import DataError, QAExample, load_examples, read_rows
from fspo_lite.data.files import data_dir


@dataclass(frozen=True)
class Benchmark:
    """A benchmark: its kind (which runner scores it) and its default sources."""

    name: str
    kind: str
    """short_qa (SimpleQA-style grades + decomposition + step hallucination) | math (pass@k) |
    truthfulqa_mc | truthfulqa_gen | halueval | halluqa."""
    bundled: str | None = None
    file: str | None = None
    """Its file in the data folder (`fspo_lite.data.files.DATA_FILES`)."""
    hub: str | None = None
    description: str = ""


BENCHMARKS = {b.name: b for b in [
    Benchmark("kbqa", "short_qa", bundled="bundled:kbqa_test",
              description="bundled knowledge-base QA (data.eval), SimpleQA-style grades and step hallucination"),
    Benchmark("multihop", "short_qa", bundled="bundled:multihop_test",
              description="bundled hand-written two-hop questions with evidence paragraphs"),
    Benchmark("hotpotqa", "short_qa", file="hotpotqa_train", hub="hf:hotpot_qa:distractor@validation",
              description="HotpotQA closed-book: answer EM/F1 and step hallucination against the gold paragraphs"),
    Benchmark("truthfulqa_mc", "truthfulqa_mc", bundled="bundled:truthfulqa_sample", file="truthfulqa",
              hub="hf:truthful_qa:multiple_choice@validation", description="TruthfulQA MC1/MC2, 6-shot QA primer"),
    Benchmark("truthfulqa_gen", "truthfulqa_gen", bundled="bundled:truthfulqa_sample", file="truthfulqa",
              hub="hf:truthful_qa:generation@validation", description="TruthfulQA generation, judged"),
    Benchmark("halueval", "halueval", bundled="bundled:halueval_qa_sample", file="halueval_qa_test",
              hub="hf:pminervini/HaluEval:qa@data", description="HaluEval-QA: the model judges candidate answers"),
    Benchmark("halluqa", "halluqa", file="halluqa",
              description="HalluQA (Chinese): non-hallucination rate per category, judged"),
    Benchmark("gsm8k", "math", file="gsm8k_test", hub="hf:openai/gsm8k:main@test",
              description="GSM8K test: pass@1 / pass@k"),
    Benchmark("math500", "math", file="math500_test", hub="hf:HuggingFaceH4/MATH-500@test",
              description="MATH-500: pass@1 / pass@k"),
    Benchmark("aime2024", "math", hub="hf:HuggingFaceH4/aime_2024@train", description="AIME 2024 (hub)"),
    Benchmark("aime2025", "math", hub="hf:yentinglin/aime_2025@train", description="AIME 2025 (hub)"),
]}


def benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ConfigError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}") from None


def resolve(name: str, sources: dict[str, str] | None = None, folder: Path | None = None) -> str:
    """The data spec a benchmark reads: the override, else its file in the data folder (`folder`, default
    `data_dir()`), else the bundled data, else the hub id."""
    entry = benchmark(name)
    if sources and sources.get(name):
        return sources[name]
    folder = folder if folder is not None else data_dir()
    if entry.file and (folder / f"{entry.file}.jsonl").is_file():
        return str(folder / f"{entry.file}.jsonl")
    if entry.bundled:
        return entry.bundled
    if entry.hub:
        return entry.hub
    raise DataError(f"benchmark {name!r} has no bundled data and {folder / f'{entry.file}.jsonl'} is missing: run "
                    f"`python -m fspo_lite data prepare {entry.file} --from DIR` with a local copy, or give a file "
                    f"with evaluation.sources.{name}=PATH")


def offline_available(name: str, sources: dict[str, str] | None = None, folder: Path | None = None) -> bool:
    """True when the benchmark's data is on this machine (data folder, bundled, or a local override)."""
    try:
        spec = resolve(name, sources, folder)
    except DataError:
        return False
    return not spec.startswith("hf:")


@dataclass
class TruthfulQAItem:
    """One TruthfulQA question with its answer lists (MC1: best vs incorrect; MC2: true vs false)."""

    id: str
    question: str
    best_answer: str
    correct_answers: list[str]
    incorrect_answers: list[str]
    mc1_incorrect: list[str] = field(default_factory=list)
    category: str = ""


def truthfulqa_item(row: dict, index: int) -> TruthfulQAItem:
    """From the generation release's fields, or from the hub's multiple_choice {choices, labels} targets."""
    if "mc1_targets" in row:
        mc1, mc2 = row["mc1_targets"], row["mc2_targets"]
        best = mc1["choices"][mc1["labels"].index(1)]
        true = [c for c, label in zip(mc2["choices"], mc2["labels"]) if label]
        false = [c for c, label in zip(mc2["choices"], mc2["labels"]) if not label]
        mc1_false = [c for c, label in zip(mc1["choices"], mc1["labels"]) if not label]
        return TruthfulQAItem(f"truthfulqa-{index}", row["question"], best, true, false, mc1_false)
    missing = [k for k in ("question", "best_answer", "correct_answers", "incorrect_answers") if not row.get(k)]
    if missing:
        raise DataError(f"TruthfulQA row {index}: missing {', '.join(missing)}")
    correct = list(row["correct_answers"])
    if row["best_answer"] not in correct:
        correct.insert(0, row["best_answer"])
    return TruthfulQAItem(str(row.get("id", f"truthfulqa-{index}")), row["question"], row["best_answer"], correct,
                          list(row["incorrect_answers"]), list(row["incorrect_answers"]), row.get("category", ""))


@dataclass
class HaluEvalItem:
    id: str
    question: str
    candidate: str
    is_hallucinated: bool


def halueval_items(rows: list[dict], seed: int, row_numbers: list[int] | None = None) -> list[HaluEvalItem]:
    """One candidate per row: the file's own `candidate` when it has one, else the right or the hallucinated
    answer drawn with `random.Random(seed)` in row order (the same draw for the same file and seed).
    `row_numbers` (default 0, 1, ...) are the rows' positions in the file, used in the item ids."""
    rng = random.Random(seed)
    items = []
    for index, row in zip(row_numbers if row_numbers is not None else range(len(rows)), rows):
        if "candidate" in row:
            candidate, hallucinated = row["candidate"], bool(row["candidate_is_hallucinated"])
        else:
            hallucinated = rng.random() < 0.5
            candidate = row["hallucinated_answer"] if hallucinated else row["right_answer"]
        items.append(HaluEvalItem(f"halueval-{index}", row["question"], candidate, hallucinated))
    return items


@dataclass
class HalluQAItem:
    id: str
    question: str
    category: str
    """misleading | misleading-hard | knowledge (lower-cased from the release)."""
    best_answers: list[str]
    wrong_answers: list[str]


def halluqa_item(row: dict, index: int) -> HalluQAItem:
    return HalluQAItem(str(row.get("question_id", index)), row["question"], str(row["category"]).lower(),
                       list(row["best_answers"]), list(row["wrong_answers"]))


def load_items(name: str, spec: str, limit: int | None = None, seed: int = 0, shuffle: bool = False) -> list:
    """The first `limit` items of a benchmark from a resolved data spec (file order, so a limited run is a
    prefix of the full run), or with `shuffle` `limit` items drawn at random with `seed`."""
    kind = benchmark(name).kind
    if kind in ("short_qa", "math"):
        examples: list[QAExample] = load_examples(spec, limit=limit, seed=seed if shuffle else None)
        if kind == "math":
            for example in examples:
                example.task = "math"
        return examples
    rows = read_rows(spec)
    row_numbers = list(range(len(rows)))  # file positions, so item ids name the row whatever the subset
    if shuffle:
        random.Random(seed).shuffle(row_numbers)
    row_numbers = row_numbers[:limit] if limit else row_numbers
    rows = [rows[i] for i in row_numbers]
    if kind in ("truthfulqa_mc", "truthfulqa_gen"):
        return [truthfulqa_item(row, i) for i, row in zip(row_numbers, rows)]
    if kind == "halueval":
        return halueval_items(rows, seed, row_numbers)
    if kind == "halluqa":
        return [halluqa_item(row, i) for i, row in zip(row_numbers, rows)]
    raise ValueError(f"no loader for benchmark kind {kind!r}")
