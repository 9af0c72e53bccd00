"""The outcome reward: a response's final answer graded against the gold answers.

One function reads and grades a response, `grade_response`: the final answer (`final_answer`: the last
<answer> block with a \\boxed{} inside it unwrapped, else the last \\boxed{}, and for math, else the last number
of the text), then exact match and token F1 for QA (HotpotQA's normalisation, `fspo_lite.text`) or safe
equivalence for math (`fspo_lite.scoring.grading.equivalence`). Training rewards (`fspo_lite.scoring.rewards` through
`outcome_reward`), the held-out evaluation and the base-model probes all call it, so a right answer is paid in
training exactly when evaluation counts it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fspo_lite.scoring.grading.equivalence import (MAX_ANSWER_CHARS, math_answers_equal, read_quantity,
                                                   strip_latex_decorations)
from fspo_lite.scoring.grading.latex_math import ParseError, parse_math
from fspo_lite.text import extract_answer, hotpot_em_f1, is_unknown, parse_number, parse_response


@dataclass
class Outcome:
    """The graded final answer of one response."""

    reward: float
    format_ok: bool
    answer: str | None
    correct: bool
    f1: float
    unknown: bool


def grade_answer(example, answer: str | None) -> tuple[bool, float]:
    """(correct, score in [0, 1]): EM and token F1 for QA, safe equivalence for math.

    `example` is a `fspo_lite.data.examples.QAExample` (its `task` and `answers` are read)."""
    if answer is None:
        return False, 0.0
    if example.task == "math":
        golds = [gold if len(str(gold)) <= MAX_ANSWER_CHARS else (final_answer(str(gold), "math") or gold)
                 for gold in example.answers]  # a gold that is a whole worked solution is read like a response
        correct = any(math_answers_equal(answer, gold) for gold in golds)
        return correct, float(correct)
    em, f1 = hotpot_em_f1(answer, example.answers)
    return bool(em), f1


def _rfind_dollar(text: str, end: int) -> int:
    """The last unescaped "$" before `end` (\\$ is a dollar sign inside math), else -1."""
    position = text.rfind("$", 0, end)
    while position > 0 and text[position - 1] == "\\":
        position = text.rfind("$", 0, position - 1)
    return position


def last_math_span(text: str) -> str | None:
    """The content of the math span that ends last: $...$, $$...$$, \\(...\\) or \\[...\\] (None when there is none or
    it is empty). Linear time: each delimiter is found once from the right, never by a lazy regex."""
    best_end, best = -1, None
    closer = _rfind_dollar(text, len(text))
    if closer != -1:
        start = closer
        while start > 0 and text[start - 1] == "$":
            start -= 1
        opener = _rfind_dollar(text, start)
        if opener != -1:
            best_end, best = closer, text[opener + 1 : start]
    for open_, close in (("\\(", "\\)"), ("\\[", "\\]")):
        end = text.rfind(close)
        begin = text.rfind(open_, 0, end) if end != -1 else -1
        if begin != -1 and end > best_end:
            best_end, best = end, text[begin + len(open_) : end]
    best = best.strip("$ \n\t") if best is not None else None
    return best or None


def final_answer(text: str, task: str) -> str | None:
    """The final answer of a response: the last <answer>...</answer> block (a \\boxed{} inside it unwrapped),
    else the last \\boxed{}; for math (`task == "math"`), else the last math span ($...$, \\(...\\), \\[...\\]), else
    the whole text when it is a bare answer (a quantity or an expression of the grammar: "\\frac{10}{9}"), else the
    last number not glued to a word; else None."""
    if not isinstance(text, str):
        return None
    if task == "math" and not ("<answer>" in text and "</answer>" in text):
        answer = _math_answer_without_block(text)
        if answer is not None:
            return answer
    answer = extract_answer(text)
    if answer is None and task == "math":
        answer = last_math_span(text)
        if answer is None and _is_bare_answer(text):
            return text.strip()
        if answer is None:
            numbers = _STANDALONE_NUMBER.findall(text[-10_000:])
            number = parse_number(numbers[-1]) if numbers else None
            answer = None if number is None else str(number)
    return answer


_FINAL_ANSWER = re.compile(r"final answer(?:\s*is)?\s*:?", re.IGNORECASE)
_IS = re.compile(r"\b(?:is|are|equals)\b")
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\n|I hope")
_PART_LABEL = r"(?:\\text\s*\{\s*)?(?:[Pp]art\s*)?\(?(?:[a-h]|[1-9]|i{1,3}|iv|v)\)\s*:?(?:\s*\})?"
_BOX_SEPARATOR = re.compile(r"(?:\s|[,;.:$]|\\\[|\\\]|\\q?quad|\\text\s*\{\s*(?:and|or)\s*\}|\band\b|\bor\b|"
                            + _PART_LABEL + r")*")
"""What may stand between the boxes of one statement: spacing, punctuation, "and"/"or", \\quad, math delimiters and
part labels ("(a) \\boxed{3} (b) \\boxed{5}")."""
MAX_BOXES = 10


def _boxes(text: str) -> list[tuple[int, int]]:
    """(start, end) of the closed boxes \\boxed{...} among the last MAX_BOXES ones (balanced braces), last first.
    Linear time: the braces after the earliest of them are matched in one pass."""
    starts, end = [], len(text)
    while len(starts) < MAX_BOXES:
        start = text.rfind("\\boxed", 0, end)
        if start == -1:
            break
        starts.append(start)
        end = start
    if not starts:
        return []
    closers, stack = {}, []
    for index in range(starts[-1], len(text)):
        char = text[index]
        if char == "{":
            stack.append(index)
        elif char == "}" and stack:
            closers[stack.pop()] = index
    found = []
    for start in starts:
        brace = start + len("\\boxed")
        while brace < len(text) and text[brace].isspace():
            brace += 1
        if brace in closers:
            found.append((start, closers[brace] + 1))
    return found


def _math_answer_without_block(text: str) -> str | None:
    """For math, before the plain \\boxed{} rule: a "Final Answer: ..." statement after the last box (its last math
    span, else its last standalone number), or the last boxes of one statement joined into a list
    ("\\boxed{-2} and \\boxed{1}" -> "-2, 1")."""
    boxes = _boxes(text)
    last_box_end = boxes[0][1] if boxes else -1
    anchors = list(_FINAL_ANSWER.finditer(text[-20_000:]))
    if anchors:
        start = len(text) - len(text[-20_000:]) + anchors[-1].end()
        if start > last_box_end:
            statement = text[start:]
            cut = _SENTENCE_END.search(statement, 1)
            statement = statement[: cut.start()] if cut else statement
            verb = list(_IS.finditer(statement))
            statement = statement[verb[-1].end():] if verb else statement  # "The largest $n$ is 34" -> "34"
            span = last_math_span(statement) if statement.count("$") >= 2 or "\\(" in statement else None
            if span is not None:
                return span
            numbers = _STANDALONE_NUMBER.findall(statement)
            if numbers:
                return numbers[-1]
    if len(boxes) > 1:
        chosen = [boxes[0]]
        for box in boxes[1:]:
            if not _BOX_SEPARATOR.fullmatch(text[box[1] : chosen[-1][0]]):
                break
            chosen.append(box)
        if len(chosen) > 1:
            contents = [text[start:end][text[start:end].index("{") + 1 : -1].strip() for start, end in reversed(chosen)]
            return ", ".join(contents)
    return None


_STANDALONE_NUMBER = re.compile(r"(?<![\w.,])[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
"""A number not glued to a word before it ("is 34.", "$1,000.99", "1,000.99m²"; not the 2 of "AZYUK2A")."""


def _is_bare_answer(text: str) -> bool:
    """The whole response is an answer: a plain quantity or an expression of the math grammar ("\\frac{10}{9}")."""
    text = text.strip()
    if not text or len(text) > 200:
        return False
    try:
        if read_quantity(text) is not None:
            return True
        parse_math(strip_latex_decorations(text))
    except (ParseError, ValueError, ZeroDivisionError):
        return False
    return True


def gold_parts(gold: str) -> int:
    """How many parts a gold answer has: the items of a bare list ("3, 5" -> 2, "x = 2 or x = -3" -> 2), else 1."""
    try:
        tree = parse_math(strip_latex_decorations(str(gold)))
    except (ParseError, ValueError, ZeroDivisionError):
        return 1
    return len(tree[1]) if tree[0] == "list" else 1


_LABEL_INTRO = re.compile(r"\b[Pp]art\s*\(?\s*([a-hA-H]|[1-9]|(?:i{1,3}|iv|v)(?![a-z]))\s*\)?(?![\w])"
                          r"|(?<![\w\\}\)\]^_])\(\s*([a-h]|[1-9]|i{1,3}|iv|v)\s*\)")
"""A part label that introduces an answer: "Part (b)", "part 2", "Part B", or "(b)", "(ii)", "(2)" not glued to a
name before it (the (2) of "f(2)" is an argument, not a label)."""
_LABEL_SCHEMES = ("abcdefgh", ("i", "ii", "iii", "iv", "v"), "123456789")
"""Part labels in their order: letters, roman numerals, digits."""
_CORRECTION = re.compile(r"\b(?:wrong|mistake|incorrect|error|correction|wait|actually|instead|redo|oops|"
                         r"scratch that|not right|not correct|recheck|re-check)", re.IGNORECASE)
"""Words by which a response takes an answer back ("is wrong", "no wait", "Correction:", "I made a mistake")."""


def every_box(text: str, parts: int) -> str | None:
    """The contents of a response's boxes in order, as a list, when they answer the `parts` (>= 2) parts of a
    multi-part gold answer one by one: exactly `parts` closed boxes and nothing else boxed, each introduced by its
    own part label in order ("(a) ... \\boxed{3}. (b) ... \\boxed{5}.": labels a, b, ... or i, ii, ... or 1, 2, ...,
    the last label since the previous box counting), and no word after the first box that takes an answer back
    ("wrong", "wait", "correction", "mistake", ...). Otherwise None: unlabelled or relabelled boxes are a first
    attempt and a correction, not one answer per part."""
    if parts < 2 or not isinstance(text, str) or text.count("\\boxed") != parts:
        return None
    boxes = list(reversed(_boxes(text)))
    if len(boxes) != parts or _CORRECTION.search(text, boxes[0][0]):
        return None
    labels, previous_end = [], 0
    for start, end in boxes:
        found = list(_LABEL_INTRO.finditer(text, previous_end, start))
        if not found:
            return None
        labels.append((found[-1].group(1) or found[-1].group(2)).lower())
        previous_end = end
    if not any(labels == list(scheme[:parts]) for scheme in _LABEL_SCHEMES):
        return None
    return ", ".join(text[start:end][text[start:end].index("{") + 1 : -1].strip() for start, end in boxes)


def grade_response(example, text: str) -> tuple[str | None, bool, float]:
    """(final answer, correct, score in [0, 1]) of a whole response: `final_answer`, then `grade_answer`.
    The one reading and grading of a response that training rewards and evaluation share.

    Several boxes: the final answer is the last box, with the boxes of its own statement joined to it as a list
    (`final_answer`); a box earlier in the text (a first attempt, a step, an answer taken back) does not count. One
    exception, for a gold answer of k >= 2 parts (a bare list): a response with exactly k boxes, each introduced by
    its own part label in order ((a), (b), ...) and none taken back, is graded on all of them together
    (`every_box`), so every part must match; any other response is graded on its final answer only."""
    answer = final_answer(text, example.task)
    correct, score = grade_answer(example, answer)
    if not correct and example.task == "math":
        for parts in sorted({gold_parts(gold) for gold in example.answers if len(str(gold)) <= MAX_ANSWER_CHARS}):
            boxed = every_box(text, parts)
            if boxed is not None and boxed != answer:
                all_correct, all_score = grade_answer(example, boxed)
                if all_correct:
                    return boxed, all_correct, all_score
    return answer, correct, score


def outcome_reward(example, text: str, answer_metric: str = "auto", format_penalty: float = -2.0) -> Outcome:
    """FSPO's outcome reward: answer F1 (QA) or equivalence (math) of `grade_response` when the tags are well
    formed, `format_penalty` (-2 in the reference) otherwise."""
    parsed = parse_response(text)
    answer, correct, f1 = grade_response(example, text)
    score = float(correct) if answer_metric == "em" else f1
    reward = score if parsed.format_ok else format_penalty
    return Outcome(reward, parsed.format_ok, answer, correct, f1, is_unknown(answer))
