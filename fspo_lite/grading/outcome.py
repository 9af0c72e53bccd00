"""The outcome reward: a response's final answer graded against the gold answers.

QA answers get exact match and token F1 (HotpotQA's normalisation, `fspo_lite.text`); math
answers safe symbolic equivalence (`fspo_lite.grading.equivalence`). Training rewards (`fspo_lite.rewards`),
the held-out evaluation and the base-model probes all grade answers here, the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..text import extract_answer, hotpot_em_f1, is_unknown, parse_response
from .equivalence import math_answers_equal


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

    `example` is a `fspo_lite.data.QAExample` (its `task` and `answers` are read)."""
    if answer is None:
        return False, 0.0
    if example.task == "math":
        correct = any(math_answers_equal(answer, gold) for gold in example.answers)
        return correct, float(correct)
    em, f1 = hotpot_em_f1(answer, example.answers)
    return bool(em), f1


def outcome_reward(example, text: str, answer_metric: str = "auto", format_penalty: float = -2.0) -> Outcome:
    """FSPO's outcome reward: answer F1 (QA) or equivalence (math) when the tags are well formed,
    `format_penalty` (-2 in the reference) otherwise."""
    parsed = parse_response(text)
    answer = parsed.answer if parsed.format_ok else extract_answer(text)
    correct, f1 = grade_answer(example, answer)
    score = float(correct) if answer_metric == "em" else f1
    reward = score if parsed.format_ok else format_penalty
    return Outcome(reward, parsed.format_ok, answer, correct, f1, is_unknown(answer))
