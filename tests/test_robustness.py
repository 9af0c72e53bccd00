"""Property-based tests: every parser, reward, grading, segmentation and alignment function returns
a defined, well-formed value on any model output (no tags, nested or repeated tags, empty, 100k
characters, unicode with lone surrogates and control characters).
"""

from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo_lite.scoring.align import char_to_token_index, spans_to_token_values, token_char_offsets
from fspo_lite.scoring.claims import RuleBasedClaimExtractor, locate_claim
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.grading import math_answers_equal, normalize_math_answer, outcome_reward, parse_plain_number
from fspo_lite.scoring.grading.equivalence import is_malformed
from fspo_lite.scoring.grading.latex_math import ParseError, parse_math
from fspo_lite.text import (
    extract_answer, hotpot_em_f1, is_unknown, normalize_answer, numbers_equal, parse_number, parse_response,
    sentence_spans,
)
from fspo_lite.scoring.verdicts import verify_sentences
from fspo_lite.scoring.verifiers import LexicalVerifier

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# any code point, lone surrogates (category Cs) and control characters included
ANY_CHAR = st.characters(exclude_categories=())
PIECES = st.sampled_from([
    "<think>", "</think>", "<answer>", "</answer>", "<think><think>", "</answer></answer>", "\\boxed{", "\\boxed[",
    "}", "]", "{", "Paris", "Paris is the capital of France. ", "Dr. Smith", "3.14", "1,234", "1/2", "-7", "$",
    "Unknown", "I don't know", " ", "\n", "\n\n", ".", "?!", "東京は首都です。", "🚀", "\x00", "\ud800", "\u202e",
    "\\frac{1}{2}", "\\sqrt{2}", "x^2", "(", ")", "the", "a", "yes", "no",
])
MODEL_TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=300),
    st.lists(st.one_of(PIECES, st.text(ANY_CHAR, max_size=8)), max_size=40).map("".join),
)
HUGE = [
    "x" * 100_000,
    "<answer>" * 12_500,
    "\\boxed{" * 15_000,
    "<think>" + "The cat sat on the mat. " * 4_000 + "</think><answer>cat</answer>",
    "<think>" + "Dr. A\n" * 16_000 + "</think><answer>A</answer>",
    "\ud800\x00" * 50_000,
]
EXAMPLE = QAExample("q", "What is the capital of France?", ["Paris", "the City of Light"],
                    "Paris is the capital and largest city of France. It had 2.1 million residents in 2023.")
MATH_EXAMPLE = QAExample("m", "What is 1/2 + 1/4?", ["\\frac{3}{4}"], task="math")


def check_text_functions(text: str) -> list[tuple[int, int]]:
    parsed = parse_response(text)
    for span in (parsed.think_span, parsed.answer_span):
        assert span is None or 0 <= span[0] <= span[1] <= len(text)
    if parsed.answer is not None:
        assert parsed.answer == text[parsed.answer_span[0] : parsed.answer_span[1]].strip()
    assert not parsed.format_ok or parsed.answer
    answer = extract_answer(text)
    assert answer is None or answer in text
    assert isinstance(is_unknown(answer), bool) and isinstance(is_unknown(text), bool)
    assert isinstance(normalize_answer(text), str)
    em, f1 = hotpot_em_f1(text, ["Paris", ""])
    assert em in (0.0, 1.0) and 0.0 <= f1 <= 1.0
    number = parse_number(text)
    assert number is None or isinstance(number, Fraction)
    assert isinstance(numbers_equal(text, "42"), bool)
    spans = sentence_spans(text)
    previous_end = 0
    for start, end in spans:
        assert previous_end <= start < end <= len(text)
        piece = text[start:end]
        assert piece == piece.strip()
        previous_end = end
    return spans


def check_grading(text: str) -> None:
    assert isinstance(normalize_math_answer(text), str)
    number = parse_plain_number(normalize_math_answer(text))
    assert number is None or isinstance(number, Fraction)
    try:
        tree = parse_math(text)
    except ParseError:
        tree = None
    assert tree is None or isinstance(tree, list)
    assert math_answers_equal(text, "\\frac{3}{4}") in (True, False)
    if normalize_math_answer(text) and len(text) <= 1000:
        # every answer equals itself, but a division by zero ('/0', '1/0'), which by design equals nothing
        assert math_answers_equal(text, text) is (not is_malformed(text))


def check_rewards(text: str) -> None:
    for example in (EXAMPLE, MATH_EXAMPLE):
        outcome = outcome_reward(example, text)
        assert outcome.reward == -2.0 if not outcome.format_ok else 0.0 <= outcome.reward <= 1.0
        assert 0.0 <= outcome.f1 <= 1.0 and isinstance(outcome.correct, bool)
    verdicts = verify_sentences([EXAMPLE, MATH_EXAMPLE], [text, text], LexicalVerifier(), require_format=False)
    think = parse_response(text).think_span
    for verdict in verdicts:
        assert len(verdict.spans) == len(verdict.labels) == len(verdict.probabilities)
        assert set(verdict.labels) <= {-1, 0, 1}
        assert all(p is None or 0.0 <= p <= 1.0 for p in verdict.probabilities)
        assert all(think[0] <= s < e <= think[1] for s, e in verdict.spans)
    scores = LexicalVerifier().score([EXAMPLE.evidence, text], [text, EXAMPLE.evidence])
    assert all(p is None or 0.0 <= p <= 1.0 for p in scores)


def check_claims(text: str, spans: list[tuple[int, int]]) -> None:
    spans = spans[:50] or [(0, len(text))]
    claims = RuleBasedClaimExtractor().extract([text[s:e] for s, e in spans])
    assert len(claims) == len(spans) and all(isinstance(c, str) for group in claims for c in group)
    for (start, end), group in zip(spans, claims):
        for claim in group[:5] + [text]:
            position = locate_claim(claim, text, (start, end))
            assert position is None or start < position <= end


@SETTINGS
@given(MODEL_TEXT)
def test_text_functions_on_any_output(text):
    check_text_functions(text)


@SETTINGS
@given(MODEL_TEXT)
def test_grading_on_any_output(text):
    check_grading(text)


@SETTINGS
@given(MODEL_TEXT)
def test_rewards_and_verifier_on_any_output(text):
    check_rewards(text)


@SETTINGS
@given(MODEL_TEXT)
def test_claims_on_any_output(text):
    check_claims(text, sentence_spans(text))


@pytest.mark.parametrize("index", range(len(HUGE) + 1))
def test_huge_outputs(index):
    text = HUGE[index] if index < len(HUGE) else " " * 100_000 + "; but " * 1_000
    spans = check_text_functions(text)
    check_grading(text)
    check_rewards(text)
    check_claims(text, spans)


@SETTINGS
@given(ids=st.lists(st.integers(min_value=0, max_value=49_300), max_size=60))
def test_token_offsets_on_any_ids(smol_tokenizer, ids):
    """Any id sequence a model can emit (ids past the tokenizer's vocabulary included)."""
    text, offsets = token_char_offsets(smol_tokenizer, ids)
    assert len(offsets) == len(ids)
    assert all(0 <= start <= end <= len(text) for start, end in offsets)
    covering = [(start, end) for start, end in offsets if end > start]  # special tokens cover nothing
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(covering, covering[1:]))  # in text order
    assert max((end for _, end in offsets), default=0) == len(text)


@SETTINGS
@given(
    offsets=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)).map(lambda t: (t[0], t[0] + t[1])),
                     max_size=40),
    cuts=st.lists(st.integers(0, 250), max_size=20, unique=True),
    position=st.integers(-5, 300),
)
def test_span_mapping_on_any_offsets(offsets, cuts, position):
    points = sorted(cuts)
    spans = [(a, b) for a, b in zip(points[::2], points[1::2]) if a < b]
    values = [float(i + 1) for i in range(len(spans))]
    mapped = spans_to_token_values(offsets, spans, values, default=-9.0)
    assert len(mapped) == len(offsets) and set(mapped) <= set(values) | {-9.0}
    index = char_to_token_index(offsets, position)
    assert index is None or 0 <= index < len(offsets)


@SETTINGS
@given(st.one_of(MODEL_TEXT, MODEL_TEXT.map(lambda t: t * 40)))
def test_segmentation_blocks(text):
    """Block-wise segmentation (for pysbd's quadratic cases) only starts beyond SEGMENT_BLOCK_CHARS."""
    from fspo_lite.text import SEGMENT_BLOCK_CHARS, _segment_blocks

    blocks = _segment_blocks(text)
    assert blocks[0][0] == 0 and blocks[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert all(end - start <= SEGMENT_BLOCK_CHARS for start, end in blocks)
    if len(text) <= SEGMENT_BLOCK_CHARS:
        assert blocks == [(0, len(text))]
