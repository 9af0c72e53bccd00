"""Parsing and scoring of model text: tags, answers, "Unknown", EM/F1, numbers, sentences.

Every function here takes untrusted model output and returns a defined value for any input
(no tags, repeated tags, empty, very long, any unicode); none of them raises on bad text.
"""

from __future__ import annotations

import importlib.util
import re
import string
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Sequence

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)

STOPWORDS = frozenset(
    """a an the and or but if then so of to in on at by for with from as is are was were be been being
    it its this that these those there here which who whom whose what when where why how not no yes
    i me my we our you your he him his she her they them their do does did done have has had having
    will would can could should may might must shall also very just only than too more most much many
    some any each every all both either neither one into onto about over under after before between
    during through up down out off again further once such own same other another because while
    know known think answer question let lets need find first step therefore thus hence so called""".split()
)
"""Function words and reasoning filler that carry no checkable content (lexical verifier, claim content words)."""


@dataclass(frozen=True)
class ParsedResponse:
    """Where the reasoning and the answer sit in a response (character spans into the text)."""

    format_ok: bool
    think_span: tuple[int, int] | None
    answer_span: tuple[int, int] | None
    answer: str | None


def parse_response(text: str) -> ParsedResponse:
    """Locate <think>...</think> and <answer>...</answer>.

    The format is valid when each tag occurs exactly once, in the order think, /think, answer,
    /answer, the answer is not empty and only whitespace lies outside the two blocks. The spans
    are reported whenever they can be found, valid format or not, so a verifier can still read a
    reasoning block that is followed by a malformed answer.
    """
    counts = {tag: text.count(tag) for tag in _TAGS}
    think_span = answer_span = None
    t_open, t_close = text.find(THINK_OPEN), text.find(THINK_CLOSE)
    if t_open != -1 and t_close > t_open:
        think_span = (t_open + len(THINK_OPEN), t_close)
    a_open = text.find(ANSWER_OPEN, t_close + 1 if t_close != -1 else 0)
    a_close = text.find(ANSWER_CLOSE, a_open + 1) if a_open != -1 else -1
    if a_open != -1 and a_close != -1:
        answer_span = (a_open + len(ANSWER_OPEN), a_close)
    answer = text[answer_span[0] : answer_span[1]].strip() if answer_span else None
    format_ok = (
        all(count == 1 for count in counts.values())
        and think_span is not None
        and answer_span is not None
        and bool(answer)
        and not text[:t_open].strip()
        and not text[t_close + len(THINK_CLOSE) : a_open].strip()
        and not text[a_close + len(ANSWER_CLOSE) :].strip()
    )
    return ParsedResponse(format_ok, think_span, answer_span, answer)


def _matching_closers(text: str, opener: str, closer: str) -> dict[int, int]:
    """Position of each `opener` -> position of the `closer` that balances it (one linear pass)."""
    matches, stack = {}, []
    for index, char in enumerate(text):
        if char == opener:
            stack.append(index)
        elif char == closer and stack:
            matches[stack.pop()] = index
    return matches


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\boxed[...]) with balanced brackets, else None.

    Linear time: the bracket pairs are matched once, so thousands of unclosed \\boxed{ cost
    one pass instead of one scan each.
    """
    found = list(re.finditer(r"\\boxed\s*([{\[])", text))
    if not found:
        return None
    closers = {"{": None, "[": None}
    for match in reversed(found):
        opener = match.group(1)
        if closers[opener] is None:
            closers[opener] = _matching_closers(text, opener, "}" if opener == "{" else "]")
        end = closers[opener].get(match.end() - 1)
        if end is not None:
            return text[match.end() : end].strip()
    return None


def _last_answer_block(text: str) -> str | None:
    """Inside of the last <answer>...</answer> pair (each opening tag closed by the next closing
    tag, scanning left to right), else None. Linear time, unlike a lazy regex over unclosed tags."""
    position, inner = 0, None
    while True:
        start = text.find(ANSWER_OPEN, position)
        if start == -1:
            return inner
        end = text.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
        if end == -1:
            return inner
        inner = text[start + len(ANSWER_OPEN) : end]
        position = end + len(ANSWER_CLOSE)


def extract_answer(text: str) -> str | None:
    """The final answer: the last <answer>...</answer> block, else the last \\boxed{}, else None."""
    if not isinstance(text, str):
        return None
    inner = _last_answer_block(text)
    if inner is not None:
        # nested or repeated opening tags: keep what follows the innermost one
        inner = inner.rsplit(ANSWER_OPEN, 1)[-1].strip()
        boxed = _last_boxed(inner)
        return boxed if boxed is not None else inner
    return _last_boxed(text)


_UNKNOWN_PATTERNS = re.compile(
    r"^(unknown|i (do not|don't|dont) know|not sure|i am not sure|i'm not sure|unsure|no idea|"
    r"cannot (be )?(determined|answer)|can't (be )?(determined|answer)|i cannot answer|"
    r"insufficient information|not enough information|n/?a|none known)\b"
)


def is_unknown(answer: str | None) -> bool:
    """True when the answer declines ("Unknown", "I don't know", ...): the caution reward's NOT_ATTEMPTED."""
    if not answer:
        return False
    return bool(_UNKNOWN_PATTERNS.match(answer.strip().lower().strip(" .!*\"'")))


_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """HotpotQA/SQuAD normalisation: lowercase, drop punctuation and articles, collapse spaces."""
    text = text.lower().translate(_PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _em_f1_single(prediction: str, gold: str) -> tuple[float, float]:
    pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
    em = float(pred_norm == gold_norm)
    special = {"yes", "no", "noanswer"}
    if (pred_norm in special or gold_norm in special) and pred_norm != gold_norm:
        return em, 0.0
    pred_tokens, gold_tokens = pred_norm.split(), gold_norm.split()
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return em, 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return em, 2 * precision * recall / (precision + recall)


def hotpot_em_f1(prediction: str | None, gold: str | list[str]) -> tuple[float, float]:
    """HotpotQA answer exact match and token F1, the best over the accepted gold answers."""
    if prediction is None:
        return 0.0, 0.0
    golds = [gold] if isinstance(gold, str) else list(gold)
    scores = [_em_f1_single(prediction, g) for g in golds if g is not None]
    if not scores:
        return 0.0, 0.0
    return max(s[0] for s in scores), max(s[1] for s in scores)


_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def parse_number(text: str | None) -> Fraction | None:
    """The last number in the text ('$1,234.50', '3/4', '-2'), as an exact Fraction, else None."""
    if not text:
        return None
    matches = _NUMBER_RE.findall(text.replace("$", "")[-10_000:])
    if not matches:
        return None
    raw = matches[-1].replace(",", "")
    try:
        return Fraction(raw)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_equal(prediction: str | None, gold: str, rel_tol: float = 1e-6) -> bool:
    """GSM8K-style check: the last number of the prediction equals the gold number."""
    pred, target = parse_number(prediction), parse_number(gold)
    if pred is None or target is None:
        return False
    if pred == target:
        return True
    return abs(float(pred) - float(target)) <= rel_tol * max(1.0, abs(float(target)))


class SentenceSplitterMissing(RuntimeError):
    """pysbd, the sentence splitter, cannot be imported: every response would be one sentence."""


PYSBD_MISSING = ("sentence splitting needs pysbd (a dependency of fspo-lite): pip install pysbd; without it every "
                 "response would be scored as one sentence")


def require_sentence_splitter() -> None:
    """SentenceSplitterMissing in one line unless pysbd is installed (checked before a run's models load)."""
    if importlib.util.find_spec("pysbd") is None:
        raise SentenceSplitterMissing(PYSBD_MISSING)


@lru_cache(maxsize=1)
def _segmenter():
    try:
        import pysbd
    except ImportError as error:  # not the pathological-input fallback below: no split at all would be silent
        raise SentenceSplitterMissing(PYSBD_MISSING) from error
    return pysbd.Segmenter(language="en", clean=False)


SEGMENT_BLOCK_CHARS = 1000
"""pysbd is quadratic on some inputs (minutes for 100k characters of "Dr. A" lines), so long
texts are segmented in blocks of at most this many characters, cut where pysbd would end a
sentence anyway (a line break), else after sentence punctuation, else at a space."""
_BLOCK_CUT = re.compile(r"[.!?][\"')\]]*\s+")


def _segment_blocks(text: str, size: int = SEGMENT_BLOCK_CHARS) -> list[tuple[int, int]]:
    """(start, end) blocks covering `text`; a text of at most `size` characters is one block."""
    blocks, start = [], 0
    while len(text) - start > size:
        limit = start + size
        cut = text.rfind("\n", start, limit) + 1
        if cut <= start:
            ends = [m.end() for m in _BLOCK_CUT.finditer(text, start, limit)]
            cut = ends[-1] if ends else text.rfind(" ", start, limit) + 1
        if cut <= start:
            cut = limit
        blocks.append((start, cut))
        start = cut
    blocks.append((start, len(text)))
    return blocks


_BRACKET_RUN = re.compile(r"\[([\d,\s\-]*)")
_DIGIT_RUN = re.compile(r"\d+")
MAX_REFERENCE_PARTITIONS = 100_000
"""pysbd's numbered-reference rule, (\\[(\\d{1,3},?\\s?-?\\s?)*\\b\\d{1,3}\\])+, backtracks over every way
of cutting the digits after a '[' into groups of 1-3 (about 1.84^n for n digits) and of giving each
space to one of its two optional \\s? (2^n for n spaces), so its time grows exponentially with the
bracket. A bracket allowing more ways than this is masked (docs/reliability.md, "Sentence splitting")."""


def _reference_partitions(run: str) -> int:
    """An upper bound on the ways the regex above can match `run`: the cuttings of each digit run
    into groups of 1-3 digits, times 2 per space or hyphen."""
    total = 2 ** min(sum(1 for char in run if not char.isdigit() and char != ","), 64)
    for digits in _DIGIT_RUN.finditer(run):
        length = min(len(digits.group()), 40)  # 40 digits already allow about 10^10 cuttings
        ways = [1, 1, 2, 4]
        for _ in range(4, length + 1):
            ways.append(ways[-1] + ways[-2] + ways[-3])
        total *= ways[length]
        if total > MAX_REFERENCE_PARTITIONS:
            break
    return total


SEGMENTER_MARKERS = "ƪȸȹᓰᓱᓳᓴᓷᓸ∮∯⌬⎋☄☇☈☉☏☝♝♟♨♬♭✂"
"""Characters pysbd writes into the text while it works (a period inside an abbreviation becomes '∯', '!' inside a
quotation '&ᓴ&', a list marker '♨' or '☝', an ellipsis 'ƪƪƪ', ...) and turns back or deletes at the end. Text that
already holds one had it turned into punctuation or deleted, so the segment no longer matched the text and its
characters dropped out of every sentence span; `mask_for_segmenter` replaces each by SEGMENTER_MARKER_STANDIN."""
SEGMENTER_MARKER_STANDIN = "\ue000"
"""A private-use character pysbd has no rule for; like the markers it is neither a letter nor a space."""
_MARKER_TABLE = str.maketrans({marker: SEGMENTER_MARKER_STANDIN for marker in SEGMENTER_MARKERS})


def mask_for_segmenter(text: str) -> str:
    """`text` made safe for pysbd, with the same length (so spans found in the masked text index the original):
    each of pysbd's own marker characters (SEGMENTER_MARKERS) replaced by a stand-in, and the '[' of each bracket
    that would make pysbd backtrack exponentially replaced by a space. No real reference list ("[1, 2, 5-7]",
    "[12]") is masked: their cuttings are few."""
    text = text.translate(_MARKER_TABLE)
    masked = None
    for match in _BRACKET_RUN.finditer(text):
        if _reference_partitions(match.group(1)) > MAX_REFERENCE_PARTITIONS:
            masked = masked or list(text)
            masked[match.start()] = " "
    return text if masked is None else "".join(masked)


def _segment(text: str) -> list[str]:
    segmenter = _segmenter()  # a missing pysbd is an error, never one span per text
    try:
        return segmenter.segment(text)
    except Exception:  # pysbd can fail on pathological input; fall back to one span
        return [text]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Sentences of `text` as (start, end) character spans, whitespace trimmed, in order.

    pysbd finds the boundaries (block by block for long texts, see SEGMENT_BLOCK_CHARS; brackets
    that would make it backtrack exponentially are masked first, see `mask_for_segmenter`); each
    segment is then located from a moving cursor in a text of the same length, so the spans index
    the exact string the tokens came from.
    """
    if not isinstance(text, str) or not text.strip():
        return []
    spans: list[tuple[int, int]] = []
    for block_start, block_end in _segment_blocks(text):
        block = mask_for_segmenter(text[block_start:block_end])
        cursor = 0
        for segment in _segment(block):
            piece = segment.strip()
            if not piece:
                continue
            start = block.find(piece, cursor)
            if start == -1:
                continue
            end = start + len(piece)
            spans.append((block_start + start, block_start + end))
            cursor = end
    return spans


def reasoning_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences inside <think>...</think> (empty if there is no block)."""
    think = parse_response(text).think_span
    if think is None:
        return []
    start, end = think
    return [(start + s, start + e) for s, e in sentence_spans(text[start:end])]


NEAR_DUPLICATE_JACCARD = 0.8
"""Default threshold: two sentences are near-duplicates when the Jaccard similarity of their word sets is at
least this (`detail.duplicate_threshold` and `klcf.dedup_overlap` set their own)."""
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def sentence_words(sentence: str) -> frozenset[str]:
    """The lower-cased words (runs of letters and digits) of a sentence, as a set."""
    return frozenset(word.lower() for word in _WORD.findall(sentence or ""))


def word_jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b|; two empty sets are identical (1.0)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def near_duplicate_flags(sentences: Sequence[str], threshold: float = NEAR_DUPLICATE_JACCARD,
                         words: Callable[[str], frozenset[str]] = sentence_words) -> list[bool]:
    """For each sentence, True when an earlier one is a near-duplicate of it: word_jaccard(words(a), words(b))
    >= threshold. The first of a set of near-duplicates is kept (False), each later one flagged. Comparison is
    with every earlier sentence, flagged or not, so a chain of small edits is caught too. Sentences without
    words are near-duplicates of each other (two empty sets are identical). The one rule for the detail
    reward (methods.detail), the KLCF checklist (methods.klcf, with content words) and the evaluation's
    padding count (`near_duplicate_count`)."""
    sets = [words(sentence) for sentence in sentences]
    return [any(word_jaccard(sets[i], sets[j]) >= threshold for j in range(i)) for i in range(len(sets))]


def near_duplicate_count(sentences: Sequence[str], threshold: float = NEAR_DUPLICATE_JACCARD) -> int:
    """How many sentences repeat an earlier one of the list (padding), by `near_duplicate_flags`.
    ["Paris is big.", "paris is BIG", "Lyon is big."] -> 1."""
    return sum(near_duplicate_flags(sentences, threshold))
