"""The bundled QA data: the builder (scripts/data_build.py) is deterministic, every record follows the schema, and the
committed files in data/ are exactly what the builder writes."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import load_script

data_build = load_script("data_build")

DATA = Path(__file__).resolve().parent.parent / "data"
KBQA_FILES = ("kbqa_train.jsonl", "kbqa_test.jsonl")
MULTIHOP_FILES = ("multihop_train.jsonl", "multihop_test.jsonl")


def _fact_packages_problem() -> str | None:
    """Why the kbqa set cannot be rebuilt byte-identically here, or None if it can."""
    for pin in data_build.FACT_PACKAGES.split():
        name, version = pin.split("==")
        if importlib.util.find_spec(name) is None:
            return f"fact package {name} not installed (pip install {data_build.FACT_PACKAGES})"
        if importlib.metadata.version(name) != version:
            return f"{name} {importlib.metadata.version(name)} installed; the committed data were built with {pin}"
    return None


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """Two full builds with seed 0 into separate folders."""
    problem = _fact_packages_problem()
    if problem:
        pytest.skip(problem)
    first, second = tmp_path_factory.mktemp("build_a"), tmp_path_factory.mktemp("build_b")
    stats = data_build.main(["--out", str(first), "--seed", "0"])
    data_build.main(["--out", str(second), "--seed", "0"])
    return first, second, stats


def test_builder_is_deterministic(builds):
    first, second, _ = builds
    for name in KBQA_FILES + MULTIHOP_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_seed_changes_kbqa_but_not_multihop(builds, tmp_path):
    first, _, _ = builds
    data_build.build_kbqa(tmp_path, seed=1)
    assert (tmp_path / "kbqa_test.jsonl").read_bytes() != (first / "kbqa_test.jsonl").read_bytes()


def test_committed_data_match_a_fresh_build(builds):
    first, _, _ = builds
    for name in KBQA_FILES + MULTIHOP_FILES:
        assert (DATA / name).read_bytes() == (first / name).read_bytes(), (
            f"data/{name} is stale: run python scripts/data_build.py --out data --seed 0")


def test_kbqa_split_is_stratified(builds):
    _, _, stats = builds
    kbqa = stats["kbqa"]
    assert 400 <= kbqa["train"] + kbqa["test"] <= 600
    assert abs(kbqa["test"] / (kbqa["train"] + kbqa["test"]) - data_build.TEST_FRACTION) < 0.03
    for category, counts in kbqa["by_category"].items():
        assert counts["train"] > 0 and counts["test"] > 0, category
    for difficulty in ("easy", "hard"):
        assert kbqa["by_difficulty"][difficulty]["test"] > 0


@pytest.mark.parametrize("name", KBQA_FILES + MULTIHOP_FILES)
def test_committed_records_follow_the_schema(name):
    records = _read(DATA / name)
    assert records, name
    for record in records:
        data_build.validate_record(record)
        assert list(record) == list(data_build.SCHEMA_KEYS)
        assert record["answers"][0].lower() in record["evidence"].lower()


@pytest.mark.parametrize("prefix", ["kbqa", "multihop"])
def test_no_duplicate_ids_or_questions(prefix):
    records = _read(DATA / f"{prefix}_train.jsonl") + _read(DATA / f"{prefix}_test.jsonl")
    assert len({r["id"] for r in records}) == len(records)
    assert len({r["question"].lower() for r in records}) == len(records)


def test_kbqa_tags_and_subjects():
    train, test = _read(DATA / "kbqa_train.jsonl"), _read(DATA / "kbqa_test.jsonl")
    for split in (train, test):
        strata = Counter((r["extra"]["category"], r["extra"]["difficulty"]) for r in split)
        assert {c for c, _ in strata} == set(data_build.QUOTAS)
        assert {d for _, d in strata} == {"easy", "hard"}
    for record in train + test:
        assert record["source"] == "kbqa" and record["id"].startswith("kbqa-")
        assert record["extra"]["subject"] in record["evidence"] or record["extra"]["subject"] in record["question"]
    # Paired categories never ask about the same subject (no answer leaks between them).
    subjects = {}
    for record in train + test:
        subjects.setdefault(record["extra"]["category"], set()).add(record["extra"]["subject"])
    for category, partner in data_build.PAIRED.items():
        assert not subjects[category] & subjects[partner], category


def test_multihop_files_match_the_source_literal(tmp_path):
    stats = data_build.build_multihop(tmp_path)
    assert (stats["train"], stats["test"]) == (48, 24)
    assert all(counts["test"] > 0 for counts in stats["by_type"].values())
    for name in MULTIHOP_FILES:
        assert (DATA / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_multihop_paragraphs_make_the_evidence():
    for record in _read(DATA / "multihop_train.jsonl") + _read(DATA / "multihop_test.jsonl"):
        paragraphs = record["extra"]["paragraphs"]
        assert record["evidence"] == "\n\n".join(f"{p['title']}: {p['text']}" for p in paragraphs)
        assert len({p["title"] for p in paragraphs}) == 2 and all(p["text"].endswith(".") for p in paragraphs)
        if record["extra"]["type"] == "comparison":  # the gold answer is one of the two options
            assert record["answers"][0].lower() in record["question"].lower()


def test_validate_record_rejects_bad_records():
    good = _read(DATA / "multihop_test.jsonl")[0]
    data_build.validate_record(good)
    for broken in (
        {**good, "answers": []},
        {**good, "answers": ["no such answer anywhere"]},
        {**good, "task": "math"},
        {k: good[k] for k in reversed(data_build.SCHEMA_KEYS)},
        {**good, "extra": {**good["extra"], "type": "other"}},
    ):
        with pytest.raises(ValueError):
            data_build.validate_record(broken)


def test_missing_fact_package_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mendeleev.fetch", None)
    monkeypatch.setitem(sys.modules, "mendeleev", None)
    with pytest.raises(ImportError, match="pip install mendeleev"):
        data_build.build_kbqa(tmp_path)
