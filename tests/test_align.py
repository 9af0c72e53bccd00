"""Character spans to token positions through the offsets of the generated token ids."""

import pytest

from fspo_lite.scoring.align import char_to_token_index, spans_to_token_values, token_char_offsets
from fspo_lite.text import sentence_spans

TRICKY = [
    "<think>Paris is the capital of France. It has 2.1 million people.</think>\n<answer>Paris</answer>",
    "  Leading spaces.   Several   spaces between.\n\nNew paragraph!",
    "Naïve café in 東京. Emoji 🚀 here. Done",
    "A.B.C. is short. The U.S. is big.",
    "No final punctuation",
]


def _check_offsets(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoded, offsets = token_char_offsets(tokenizer, ids)
    assert len(offsets) == len(ids)
    # every token's range lies in the decoded text and ranges never go backwards
    assert all(0 <= s <= e <= len(decoded) for s, e in offsets)
    assert all(a[0] <= b[0] for a, b in zip(offsets, offsets[1:]))
    # the ranges tile the decoded text: each character is covered
    covered = set()
    for s, e in offsets:
        covered.update(range(s, e))
    assert covered == set(range(len(decoded)))
    return ids, decoded, offsets


@pytest.mark.parametrize("text", TRICKY)
def test_offsets_smollm2(smol_tokenizer, text):
    ids, decoded, offsets = _check_offsets(smol_tokenizer, text)
    assert decoded == text
    # a token's range decodes to the token's own text for single-token pieces
    for token_id, (s, e) in zip(ids, offsets):
        piece = smol_tokenizer.decode([token_id])
        if "\ufffd" not in piece:
            assert decoded[s:e] == piece


@pytest.mark.parametrize("text", TRICKY)
def test_offsets_metaspace_family(metaspace_tokenizer, text):
    _check_offsets(metaspace_tokenizer, text)


def test_multibyte_character_split_over_tokens(smol_tokenizer):
    text = "東京"
    ids = smol_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > 2  # byte-level BPE splits these characters
    decoded, offsets = token_char_offsets(smol_tokenizer, ids)
    assert decoded == text and offsets[-1][1] == 2


def test_special_tokens_get_empty_ranges(smol_tokenizer):
    ids = smol_tokenizer("Hi there.", add_special_tokens=False)["input_ids"] + [smol_tokenizer.eos_token_id] * 3
    decoded, offsets = token_char_offsets(smol_tokenizer, ids)
    assert decoded == "Hi there."
    assert offsets[-3:] == [(9, 9)] * 3


def test_prefix_fallback_matches_stream(smol_tokenizer):
    from fspo_lite.scoring import align

    text = TRICKY[2]
    ids = smol_tokenizer(text, add_special_tokens=False)["input_ids"]
    special = set(smol_tokenizer.all_special_ids)
    total = len(smol_tokenizer.decode(ids))
    assert (align._prefix_offsets(smol_tokenizer, ids, special, total)
            == align._stream_offsets(smol_tokenizer, ids, special, total))


def test_unfinished_byte_sequence_at_the_end_is_covered(smol_tokenizer):
    """A lone UTF-8 continuation byte (id 111, '\xa1') decodes to U+FFFD; its token must cover it."""
    from fspo_lite.scoring import align

    period = smol_tokenizer.convert_tokens_to_ids(".")
    text, offsets = token_char_offsets(smol_tokenizer, [period, 111])
    assert text == ".\ufffd" and offsets == [(0, 1), (1, 2)]
    special = set(smol_tokenizer.all_special_ids)
    assert align._prefix_offsets(smol_tokenizer, [period, 111], special, 2) == [(0, 1), (1, 2)]


def test_spans_to_token_values_hand_example():
    #          tokens: [0,4) [4,8) [8,12) [12,13) [13,20)
    offsets = [(0, 4), (4, 8), (8, 12), (12, 13), (13, 20)]
    spans = [(1, 9), (13, 19)]
    assert spans_to_token_values(offsets, spans, [1, -1]) == [1, 1, 1, 0, -1]


def test_token_spanning_two_sentences_takes_larger_overlap():
    assert spans_to_token_values([(0, 10)], [(0, 3), (4, 10)], [1, -1]) == [-1]


def test_values_length_mismatch():
    with pytest.raises(ValueError):
        spans_to_token_values([(0, 1)], [(0, 1)], [])


@pytest.mark.parametrize("fixture", ["smol_tokenizer", "metaspace_tokenizer"])
def test_sentence_mask_follows_actual_tokens(request, fixture):
    """Each sentence's tokens decode back to text inside that sentence: no shift from the
    <think> tag or from tokens merged across sentence boundaries (the published defect)."""
    tokenizer = request.getfixturevalue(fixture)
    text = "<think>Paris is the capital of France. Lyon is the capital of Spain.</think><answer>Paris</answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoded, offsets = token_char_offsets(tokenizer, ids)
    start = decoded.index("<think>") + len("<think>")
    end = decoded.index("</think>")
    spans = [(start + s, start + e) for s, e in sentence_spans(decoded[start:end])]
    assert len(spans) == 2
    values = spans_to_token_values(offsets, spans, [1, -1])
    first = "".join(decoded[s:e] for (s, e), v in zip(offsets, values) if v == 1)
    second = "".join(decoded[s:e] for (s, e), v in zip(offsets, values) if v == -1)
    assert first.strip() == "Paris is the capital of France."
    assert second.strip() == "Lyon is the capital of Spain."


def test_char_to_token_index():
    offsets = [(0, 4), (4, 8), (8, 8), (8, 12)]
    assert char_to_token_index(offsets, 8) == 1
    assert char_to_token_index(offsets, 9) == 3
    assert char_to_token_index(offsets, 0) is None
