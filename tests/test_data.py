"""Loaders: the shared benchmark files as they are, local files, and clear errors on bad rows."""

import json

import pytest

from conftest import shared_file
from fspo_lite.data import DataError, QAExample, load_examples, save_examples


def test_hotpotqa_with_evidence():
    examples = load_examples(str(shared_file("hotpotqa_train.jsonl")), limit=5)
    assert len(examples) == 5
    first = examples[0]
    assert first.id == "5abfd2a25542994516f45507" and first.answers == ["University of Wyoming"]
    assert "Wyoming" in first.evidence and first.task == "qa" and first.source == "hotpotqa_train"


@pytest.mark.parametrize("name, answer", [("gsm8k_train.jsonl", "72"), ("simplerl_math_train.jsonl", "118"),
                                          ("math500_test.jsonl", "\\left( 3, \\frac{\\pi}{2} \\right)")])
def test_math_sets(name, answer):
    first = load_examples(str(shared_file(name)), limit=1)[0]
    assert first.task == "math" and first.answers == [answer] and first.evidence == ""


def test_halueval_maps_right_answer_and_knowledge():
    first = load_examples(str(shared_file("halueval_qa_test.jsonl")), limit=1)[0]
    assert first.answers == ["Arthur's Magazine"] and first.evidence.startswith("Arthur's Magazine (1844")
    assert first.extra["candidate_is_hallucinated"] is False


def test_gsm8k_hub_style_answers_keep_final_number(tmp_path):
    path = tmp_path / "gsm8k_hub.jsonl"
    path.write_text(json.dumps({"question": "q?", "answer": "5 + 7 = 12\n#### 1,212"}) + "\n")
    assert load_examples(str(path))[0].answers == ["1212"]


def test_parquet_and_round_trip(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "x.parquet"
    pd.DataFrame([{"question": "Q1?", "answer": "A1", "knowledge": "K"}]).to_parquet(path)
    examples = load_examples(str(path))
    assert examples[0].answers == ["A1"] and examples[0].evidence == "K"
    out = tmp_path / "x.jsonl"
    save_examples(examples, out)
    assert load_examples(str(out)) == examples


def test_hub_context_format_is_flattened(tmp_path):
    row = {"question": "Q?", "answer": "A", "context": {"title": ["T1", "T2"], "sentences": [["a. ", "b."], ["c."]]}}
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert load_examples(str(path))[0].evidence == "T1: a. b.\n\nT2: c."


def test_seeded_shuffle_and_limit(tmp_path):
    path = tmp_path / "d.jsonl"
    save_examples([QAExample(str(i), f"q{i}?", ["a"]) for i in range(20)], path)
    a = load_examples(str(path), seed=1, limit=5)
    assert a == load_examples(str(path), seed=1, limit=5)
    assert [e.id for e in a] != [e.id for e in load_examples(str(path), seed=2, limit=5)]


@pytest.mark.parametrize(
    "content, message",
    [(b'{"question": "ok?", "answer": "a"}\n{"question": "broken\n', "d.jsonl:2: broken JSON"),
     (b'{"question": "ok?", "answer": "a"}\n\xff\xfe\n', "d.jsonl:2: invalid UTF-8"),
     (b'{"question": "", "answer": "a"}\n', "d.jsonl:1: field 'question'"),
     (b'{"question": 5, "answer": "a"}\n', "d.jsonl:1: field 'question'"),
     (b'{"question": "q?"}\n', "d.jsonl:1: no answer field"),
     (b'[1, 2]\n', "d.jsonl:1: expected a JSON object")],
)
def test_bad_rows_name_file_line_and_field(tmp_path, content, message):
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_examples(str(path))


def test_bad_rows_can_be_skipped_and_counted(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"question": "ok?", "answer": "a"}\n{broken\n\xff\n{"question": "q2?"}\n')
    stats = {}
    examples = load_examples(str(path), skip_bad_rows=True, stats=stats)
    assert len(examples) == 1 and stats["skipped"] == 3


def test_unknown_sources_explain_the_choices(tmp_path):
    with pytest.raises(DataError, match="bundled:<name>"):
        load_examples(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DataError, match="no bundled data set"):
        load_examples("bundled:does_not_exist")
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n")
    with pytest.raises(DataError, match="unsupported file type"):
        load_examples(str(bad))


def test_hub_id_without_network_is_a_clear_error():
    pytest.importorskip("datasets")
    with pytest.raises(DataError, match="could not load hub data set"):
        load_examples("hf:definitely-not-a-user/not-a-dataset")
