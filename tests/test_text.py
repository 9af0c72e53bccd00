"""Parsers and scorers on well-formed and malformed model output."""

import pytest

from fspo_lite.scoring.grading import math_answers_equal
from fspo_lite.text import (
    extract_answer, hotpot_em_f1, is_unknown, normalize_answer, numbers_equal, parse_number, parse_response,
    sentence_spans,
)

GOOD = "<think>Paris is in France. It is the capital.</think>\n<answer>Paris</answer>"


def test_parse_well_formed():
    parsed = parse_response(GOOD)
    assert parsed.format_ok and parsed.answer == "Paris"
    assert GOOD[parsed.think_span[0] : parsed.think_span[1]] == "Paris is in France. It is the capital."
    assert GOOD[parsed.answer_span[0] : parsed.answer_span[1]] == "Paris"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Paris",
        "<think>no close tag <answer>Paris</answer>",
        "<think>a</think><think>b</think><answer>Paris</answer>",
        "<think>a</think><answer>Paris</answer><answer>Lyon</answer>",
        "<answer>Paris</answer><think>after</think>",
        "<think>a</think><answer>  </answer>",
        "preamble <think>a</think><answer>Paris</answer>",
        "<think>a</think> stray <answer>Paris</answer>",
        "<think>a</think><answer>Paris</answer> trailing",
        "<think><think>a</think></think><answer>Paris</answer>",
    ],
)
def test_malformed_format_is_rejected(text):
    assert parse_response(text).format_ok is False


def test_reasoning_span_found_even_when_answer_is_malformed():
    parsed = parse_response("<think>Some reasoning.</think> <answer>unterminated")
    assert not parsed.format_ok and parsed.think_span is not None and parsed.answer is None


@pytest.mark.parametrize(
    "text, expected",
    [
        (GOOD, "Paris"),
        ("<answer> first </answer> then <answer>second</answer>", "second"),
        ("<answer><answer>nested</answer>", "nested"),
        ("so the result is \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{a} and later \\boxed{b{c}}", "b{c}"),
        ("<answer>\\boxed{42}</answer>", "42"),
        ("\\boxed[Unknown]", "Unknown"),
        ("\\boxed{unbalanced", None),
        ("no answer at all", None),
        ("", None),
        ("<answer></answer>", ""),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_survives_huge_and_odd_input():
    assert extract_answer("x" * 100_000) is None
    assert extract_answer("<answer>" * 5000) is None
    assert extract_answer("<answer>東京 🚀</answer>") == "東京 🚀"
    assert extract_answer(None) is None


@pytest.mark.parametrize(
    "answer, expected",
    [("Unknown", True), ("unknown.", True), ("I don't know", True), ("I do not know the answer", True),
     ("Not sure", True), ("Paris", False), ("", False), (None, False), ("Unknown Soldier", True),
     ("The unknown river", False)],
)
def test_is_unknown(answer, expected):
    assert is_unknown(answer) is expected


def test_normalize_answer():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An apple, a day") == "apple day"


@pytest.mark.parametrize(
    "prediction, gold, em, f1",
    [
        ("Paris", "paris", 1.0, 1.0),
        ("the city of Paris", "Paris", 0.0, 0.5),  # tokens: city of paris (3) vs paris (1): p=1/3 r=1 -> 0.5
        ("University of Wyoming", "Wyoming University", 0.0, 0.8),  # p=2/3 r=1 -> 0.8
        ("yes", "no", 0.0, 0.0),
        ("yes it is", "yes", 0.0, 0.0),  # yes/no mismatch after normalisation scores 0
        ("London", "Paris", 0.0, 0.0),
        ("", "Paris", 0.0, 0.0),
        (None, "Paris", 0.0, 0.0),
    ],
)
def test_hotpot_em_f1(prediction, gold, em, f1):
    assert hotpot_em_f1(prediction, gold) == (em, pytest.approx(f1, abs=1e-4))


def test_hotpot_em_f1_takes_best_alias():
    assert hotpot_em_f1("USA", ["United States", "USA"]) == (1.0, 1.0)


@pytest.mark.parametrize(
    "text, value",
    [("The answer is $1,234.", 1234), ("-3", -3), ("3/4", 0.75), ("2.50 dollars", 2.5), ("none", None), ("", None)],
)
def test_parse_number(text, value):
    parsed = parse_number(text)
    assert (parsed is None and value is None) or float(parsed) == pytest.approx(value)


def test_numbers_equal():
    assert numbers_equal("So she makes $18 every day", "18")
    assert numbers_equal("70,000", "70000")
    assert not numbers_equal("17", "18")
    assert not numbers_equal("no number", "18")


@pytest.mark.parametrize(
    "prediction, gold, equal",
    [("\\frac{14}{3}", "\\frac{14}{3}", True), ("\\dfrac{14}{3}", "\\frac{14}{3}", True), ("14/3", "\\frac{14}{3}", True),
     ("0.5", "\\frac12", True), ("$9$", "9", True), ("x = 5", "5", True), ("10\\%", "10", True),
     ("\\text{(C)}", "(C)", True), ("p - q", "p-q", True), ("9", "10", False), ("", "1", False),
     ("__import__('os').system('echo hi')", "0", False)],
)
def test_math_answers_equal(prediction, gold, equal):
    assert math_answers_equal(prediction, gold) is equal


def test_sentence_spans_cover_sentences_exactly():
    text = "Dr. Smith went to Washington. He arrived at 3 p.m. on Jan. 5th!  Was it 3.14? Yes."
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == [
        "Dr. Smith went to Washington.", "He arrived at 3 p.m. on Jan. 5th!", "Was it 3.14?", "Yes."
    ]


@pytest.mark.parametrize("text", ["", "   ", "\n\n", None])
def test_sentence_spans_empty(text):
    assert sentence_spans(text) == []


def test_sentence_spans_unicode_and_newlines():
    text = "東京は日本の首都です。 Tokyo is big.\nCafé culture is naïve? Sure"
    spans = sentence_spans(text)
    pieces = [text[s:e] for s, e in spans]
    assert pieces[-1] == "Sure" and all(p == p.strip() and p for p in pieces)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_near_duplicate_count_by_word_jaccard():
    from fspo_lite.text import near_duplicate_count

    assert near_duplicate_count(["Paris is big.", "paris is BIG", "Lyon is big."]) == 1
    # {paris, is, the, capital, of, france} vs the same + {too}: Jaccard 6/7 >= 0.8
    assert near_duplicate_count(["Paris is the capital of France.", "Paris is the capital of France too."]) == 1
    # 4/6 < 0.8: not a duplicate at the default, a duplicate at 0.6
    assert near_duplicate_count(["Paris is capital of France.", "Paris is capital of Spain."]) == 0
    assert near_duplicate_count(["Paris is capital of France.", "Paris is capital of Spain."], threshold=0.6) == 1
    # sentences without words are near-duplicates of each other (the detail reward's rule, kept for the count)
    assert near_duplicate_count(["...", "...", "", "A."]) == 2
    assert near_duplicate_count(["A.", "...", "a"]) == 1
    assert near_duplicate_count(["x y", "x y", "x y"]) == 2
