"""Loaders: the shared benchmark files as they are, local files, and clear errors on bad rows."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_file
from fspo_lite.data.examples import DataError, QAExample, load_examples, record_from_row, save_examples


def test_hotpotqa_with_evidence():
    examples = load_examples(str(shared_file("hotpotqa_train.jsonl")), limit=5)
    assert len(examples) == 5
    first = examples[0]
    assert first.id == "5abfd2a25542994516f45507" and first.answers == ["University of Wyoming"]
    assert "Wyoming" in first.evidence and first.task == "qa" and first.source == "hotpotqa_train"


@pytest.mark.parametrize("name, answer", [("gsm8k_train.jsonl", "72"), ("simplerl_math_train.jsonl", "118"),
                                          ("math500_test.jsonl", "\\left( 3, \\frac{\\pi}{2} \\right)")])
def test_math_sets(name, answer):
    stats = {}
    first = load_examples(str(shared_file(name)), limit=1, skip_bad_rows=True, stats=stats)[0]
    assert first.task == "math" and first.answers == [answer] and first.evidence == ""
    assert stats["skipped"] == (2 if name.startswith("simplerl") else 0)  # two SimpleRL rows have an empty answer


def test_empty_answer_in_shared_data_is_named():
    with pytest.raises(DataError, match=r"simplerl_math_train.jsonl:5055: no answer field.*data.skip_bad_rows"):
        load_examples(str(shared_file("simplerl_math_train.jsonl")))


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


@pytest.mark.parametrize(
    "row, message",
    [({"question": "q?", "answer": {"nested": 1}}, "field 'answers'"),
     ({"question": "q?", "answers": ["a", ["b"]]}, "field 'answers'"),
     ({"question": "q?", "answer": True}, "field 'answers'"),
     ({"question": "q?", "answer": "a", "evidence": {"x": 1}}, "field 'evidence'"),
     ({"question": "q?", "answer": "a", "context": {"title": ["t"], "sentences": "flat"}}, "field 'evidence'"),
     ({"question": "q?", "answer": "a", "task": "poetry"}, "field 'task'"),
     ({"question": "q?", "answer": "a", "task": 5}, "field 'task'"),
     ({"question": "q?", "answer": "a", "extra": [1, 2]}, "field 'extra'"),
     ({"question": "q?", "answer": "a", "id": {"a": 1}}, "field 'id'"),
     ({"question": "   ", "answer": "a"}, "field 'question'"),
     ({"question": ["q?"], "answer": "a"}, "field 'question'")],
)
def test_mistyped_fields_are_named(tmp_path, row, message):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "fine?", "answer": "x"}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match=f"d.jsonl:2: {message}"):
        load_examples(str(path))
    stats = {}
    assert len(load_examples(str(path), skip_bad_rows=True, stats=stats)) == 1 and stats["skipped"] == 1


@pytest.mark.parametrize(
    "content, message",
    [(b'[{"question": "q?", "answer": "a"}, {"question": "q2?"}]', r"d.json: item 2: no answer field"),
     (b'[{"question": "q?", "answer": "a"},', "d.json: broken JSON"),
     (b'"just a string"', "d.json: expected a list"),
     (b'{"rows": []}', "d.json: expected a list"),
     (b'[{"question": "\xff"}]', "d.json: invalid UTF-8")],
)
def test_json_file_errors_name_the_file(tmp_path, content, message):
    path = tmp_path / "d.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        load_examples(str(path))


def test_damaged_parquet_is_a_data_error(tmp_path):
    path = tmp_path / "d.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(DataError, match="d.parquet: not a readable parquet file"):
        load_examples(str(path))


def test_parquet_arrays_and_missing_cells(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path = tmp_path / "x.parquet"
    pd.DataFrame([{"question": "Q1?", "answers": ["A1", "B1"], "evidence": None},
                  {"question": "Q2?", "answers": ["A2"], "evidence": "E"}]).to_parquet(path)
    first, second = load_examples(str(path))
    assert first.answers == ["A1", "B1"] and first.evidence == "" and second.evidence == "E"


def test_config_can_skip_bad_rows(tmp_path, capsys):
    from fspo_lite.config import load_config
    from fspo_lite.data.training_set import load_training_examples

    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"question": "ok?", "answer": "a"}\n{broken\n{"question": "q2?", "answer": "b"}\n')
    with pytest.raises(DataError, match="d.jsonl:2: broken JSON"):
        load_training_examples(load_config(None, [f"data.train={path}"]))
    examples = load_training_examples(load_config(None, [f"data.train={path}", "data.skip_bad_rows=true"]))
    assert len(examples) == 2 and "skipped 1 malformed rows" in capsys.readouterr().out


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(exclude_categories=())),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
FIELDS = st.sampled_from(["id", "question", "answer", "answers", "evidence", "context", "knowledge", "task",
                          "extra", "source", "problem", "right_answer"])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(FIELDS, JSON_VALUES, max_size=6) | JSON_VALUES)
def test_any_row_gives_an_example_or_a_data_error(row):
    try:
        example = record_from_row(row, "src", 0, "f.jsonl:1")
    except DataError as error:
        assert str(error).startswith("f.jsonl:1: ")
        return
    assert example.question and example.answers and all(isinstance(a, str) for a in example.answers)
    assert isinstance(example.evidence, str) and example.task in ("qa", "math") and isinstance(example.extra, dict)
