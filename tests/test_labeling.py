"""The gold-label records, the labeling session behind notebook 02, and the HTML view."""

import json
import os

import pytest

from fspo_lite.data.examples import QAExample
from fspo_lite.data.labeling import (LabelingSession, SentenceItem, highlight_html, items_from_responses, load_items,
                                save_items)

RESPONSE = "<think>Gold has the symbol Au. Let me think. It was found on Mars.</think>\n<answer>Au</answer>"
EXAMPLE = QAExample("g1", "What is the symbol of gold?", ["Au"], evidence="Gold has the symbol Au.")


def make_items():
    return items_from_responses([EXAMPLE], [RESPONSE], id_prefix="t")


def test_items_hold_the_reasoning_sentences_with_spans():
    items = make_items()
    assert [i.sentence for i in items] == ["Gold has the symbol Au.", "Let me think.", "It was found on Mars."]
    for item in items:
        assert RESPONSE[item.span[0] : item.span[1]] == item.sentence
        assert item.label is None and item.meta["example_id"] == "g1"
    assert len({i.id for i in items}) == 3


def test_session_labels_saves_and_loads(tmp_path):
    session = LabelingSession(make_items())
    session.label("supported")
    assert session.next_unlabeled().sentence == "Let me think."
    session.label("not_checkable", notes="no content")
    session.label("unsupported", index=2)
    session.label("supported", index=2)  # a correction replaces the label
    path = tmp_path / "gold" / "labels.jsonl"
    session.save(path)
    loaded = LabelingSession.load(path)
    assert [i.label for i in loaded.items] == ["supported", "not_checkable", "supported"]
    assert loaded.items[1].notes == "no content"
    assert loaded.items[0].span == session.items[0].span
    assert loaded.counts() == {"supported": 2, "unsupported": 0, "not_checkable": 1, "unlabeled": 0}
    assert loaded.next_unlabeled() is None


def test_session_rejects_bad_labels_and_duplicates():
    session = LabelingSession(make_items())
    with pytest.raises(ValueError, match="label must be"):
        session.label("maybe")
    with pytest.raises(ValueError, match="unique"):
        LabelingSession(make_items() + make_items())
    assert session.add(make_items()) == 0
    assert session.move(-5) is session.items[0] and session.move(99) is session.items[-1]


def test_load_reports_malformed_lines(tmp_path):
    good = make_items()[:1]
    path = tmp_path / "gold.jsonl"
    save_items(good, path)
    row = json.loads(path.read_text())
    row["span"] = [0, 3]  # no longer points at the sentence
    path.write_text(path.read_text() + json.dumps(row) + "\n{broken\n")
    with pytest.raises(ValueError, match=r"gold.jsonl:2: .*span"):
        load_items(path)
    path.write_text(json.dumps({**json.loads(path.read_text().splitlines()[0]), "colour": "red"}) + "\n")
    with pytest.raises(ValueError, match="unknown fields"):
        load_items(path)
    with pytest.raises(ValueError, match="not one of"):
        SentenceItem("x", "q", "e", "abc", "abc", (0, 3), label="true")


def test_highlight_html_escapes_and_colours():
    text = "a <b> c. d & e."
    html = highlight_html(text, [(0, 8), (9, 15)], [1, -1], titles=["p=0.9", "p=0.1"])
    assert "&lt;b&gt;" in html and "&amp;" in html and "<b>" not in html
    assert html.index("#c8f7c5") < html.index("#f7c5c5")
    assert 'title="p=0.9"' in html


def test_shown_path_is_relative_near_the_working_directory(tmp_path, monkeypatch):
    from fspo_lite.data.labeling import shown_path

    (tmp_path / "repo" / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "repo" / "notebooks")
    assert shown_path(tmp_path / "repo" / "runs" / "labels.jsonl") == os.path.join("..", "runs", "labels.jsonl")
    assert shown_path("labels.jsonl") == "labels.jsonl"
    assert shown_path(tmp_path / "elsewhere.jsonl") == str(tmp_path / "elsewhere.jsonl")
