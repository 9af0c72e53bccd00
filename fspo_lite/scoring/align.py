"""Map character spans of a response to the positions of its generated tokens.

The published FSPO code tokenized each sentence on its own and laid the counts end to end,
which shifts the mask by the <think> tag and by merges across sentence boundaries. Here every
generated token gets the character range it decodes to *inside the actual response string*,
and sentences are mapped through those ranges.
"""

from __future__ import annotations

from typing import Sequence


def token_char_offsets(tokenizer, token_ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode `token_ids` and return (text, [(start, end)] per token) into that text.

    Special tokens (EOS, padding) decode to nothing and get an empty range. A character
    split over several byte tokens is attributed to every token that carries part of it.
    Uses the streaming decoder of fast tokenizers (linear time) and falls back to decoding
    growing prefixes when that is unavailable or disagrees with a plain decode.
    """
    ids = [int(i) for i in token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    offsets = _stream_offsets(tokenizer, ids, special, len(text))
    if offsets is None or _joined_length(offsets) != len(text):
        offsets = _prefix_offsets(tokenizer, ids, special, len(text))
    return text, offsets


def _joined_length(offsets: list[tuple[int, int]]) -> int:
    return max((end for _, end in offsets), default=0)


def _assign(chunk_len: int, cursor: int, pending: list[int], offsets: list[tuple[int, int]]) -> int:
    for index in pending:
        offsets[index] = (cursor, cursor + chunk_len)
    pending.clear()
    return cursor + chunk_len


def _stream_offsets(tokenizer, ids: list[int], special: set[int], total: int) -> list[tuple[int, int]] | None:
    backend = getattr(tokenizer, "_tokenizer", None)
    try:
        from tokenizers.decoders import DecodeStream
    except ImportError:
        return None
    if backend is None:
        return None
    stream = DecodeStream(skip_special_tokens=True)
    offsets: list[tuple[int, int]] = [(0, 0)] * len(ids)
    pending: list[int] = []
    cursor = 0
    try:
        for index, token in enumerate(ids):
            if token in special:
                offsets[index] = (cursor, cursor)
                continue
            chunk = stream.step(backend, token)
            pending.append(index)
            if chunk:
                cursor = _assign(len(chunk), cursor, pending, offsets)
    except Exception:
        return None
    _assign(max(total - cursor, 0), cursor, pending, offsets)  # bytes left incomplete decode to U+FFFD
    return offsets


def _prefix_offsets(tokenizer, ids: list[int], special: set[int], total: int) -> list[tuple[int, int]]:
    offsets: list[tuple[int, int]] = [(0, 0)] * len(ids)
    pending: list[int] = []
    cursor = 0
    for index, token in enumerate(ids):
        if token in special:
            offsets[index] = (cursor, cursor)
            continue
        pending.append(index)
        prefix = tokenizer.decode(ids[: index + 1], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        if prefix.endswith("\ufffd"):
            continue  # an incomplete multi-byte character: wait for the token that completes it
        if len(prefix) > cursor:
            cursor = _assign(len(prefix) - cursor, cursor, pending, offsets)
        else:
            for pending_index in pending:
                offsets[pending_index] = (cursor, cursor)
            pending.clear()
    _assign(max(total - cursor, 0), cursor, pending, offsets)  # bytes left incomplete decode to U+FFFD
    return offsets


def spans_to_token_values(
    offsets: Sequence[tuple[int, int]],
    spans: Sequence[tuple[int, int]],
    values: Sequence[float],
    default: float = 0.0,
) -> list[float]:
    """Give each token the value of the span it overlaps most (ties: the earlier span).

    Tokens that overlap no span (tags, whitespace between sentences, special tokens) get
    `default`. Spans must be sorted and non-overlapping, as sentence_spans returns them.
    """
    if len(spans) != len(values):
        raise ValueError(f"{len(spans)} spans but {len(values)} values")
    result = [default] * len(offsets)
    first_candidate = 0
    for index, (start, end) in enumerate(offsets):
        if end <= start:
            continue
        while first_candidate < len(spans) and spans[first_candidate][1] <= start:
            first_candidate += 1
        best_overlap, best_value = 0, default
        candidate = first_candidate
        while candidate < len(spans) and spans[candidate][0] < end:
            overlap = min(end, spans[candidate][1]) - max(start, spans[candidate][0])
            if overlap > best_overlap:
                best_overlap, best_value = overlap, values[candidate]
            candidate += 1
        result[index] = best_value
    return result


def char_to_token_index(offsets: Sequence[tuple[int, int]], char_position: int) -> int | None:
    """Index of the last token whose range starts before `char_position` (the token that ends a
    span ending there), or None when no token covers text before that point."""
    found = None
    for index, (start, end) in enumerate(offsets):
        if end > start and start < char_position:
            found = index
        elif start >= char_position and end > start:
            break
    return found
