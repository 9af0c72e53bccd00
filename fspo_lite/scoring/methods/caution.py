"""Factuality GRPO with a caution reward (docs/algorithms.md section 3; docs/methods.md).

Every response of a group is put in one category, then rewarded by a table that looks at the
whole group: when any response is correct, correct answers earn 1 and "process correct" ones
0.5; when none is, answering "Unknown" earns 1. The four variants compared in the seed are
choices of which part of the table is active.

"Process correct" (the seed leaves it open) is defined here as: an attempted answer that is not
an exact match, but either overlaps a gold answer with token F1 >= `process_f1` (a partial or
alias form, "University of Wyoming" for "Wyoming") or follows reasoning that states a gold
answer as whole words (right reasoning, wrong final form).
"""

from __future__ import annotations

from typing import Sequence

from fspo_lite.config import CHOICES
from fspo_lite.text import normalize_answer

CORRECT, PROCESS, UNKNOWN, WRONG, MALFORMED = "correct", "process", "unknown", "wrong", "malformed"
CATEGORIES = (CORRECT, PROCESS, UNKNOWN, WRONG, MALFORMED)
VARIANTS = CHOICES["caution.variant"]
"""The reward variants (caution.variant): the config's words, read from its one table."""


def contains_answer(text: str | None, answers: Sequence[str]) -> bool:
    """True when some gold answer occurs in `text` as a run of whole words after normalisation."""
    words = normalize_answer(text or "").split()
    for answer in answers:
        gold = normalize_answer(answer or "").split()
        if gold and any(words[i : i + len(gold)] == gold for i in range(len(words) - len(gold) + 1)):
            return True
    return False


def answer_category(format_ok: bool, correct: bool, unknown: bool, f1: float, gold_in_reasoning: bool,
                    process_f1: float = 0.5) -> str:
    """The caution category of one graded response (format first, then correct, unknown, process, wrong)."""
    if not format_ok:
        return MALFORMED
    if correct:
        return CORRECT
    if unknown:
        return UNKNOWN
    if f1 >= process_f1 or gold_in_reasoning:
        return PROCESS
    return WRONG


def caution_phase(variant: str, step: int, switch_step: int | None, total_steps: int) -> str:
    """The reward table active at `step`: 'both', 'fact' or 'caution'."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown caution.variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if variant != "fact_then_caution":
        return variant
    switch = total_steps // 2 if switch_step is None else switch_step
    return "fact" if step < switch else "caution"


def caution_group_rewards(
    categories: Sequence[str], phase: str = "both", correct_reward: float = 1.0, process_reward: float = 0.5,
    unknown_reward: float = 1.0, format_penalty: float = -2.0,
) -> list[float]:
    """Rewards of one group's responses under a phase's table.

    both:    any correct -> correct 1, process 0.5, else 0;  none correct -> Unknown 1, else 0.
    fact:    correct 1, process 0.5, else 0, whatever the group did.
    caution: any correct -> 0 for all;  none correct -> Unknown 1, else 0.
    A malformed response gets `format_penalty` in every table.
    """
    unknown_cats = set(categories) - set(CATEGORIES)
    if unknown_cats:
        raise ValueError(f"unknown categories {sorted(unknown_cats)}; expected {', '.join(CATEGORIES)}")
    any_correct = CORRECT in categories
    rewards = []
    for category in categories:
        if category == MALFORMED:
            rewards.append(format_penalty)
        elif phase == "fact" or (phase == "both" and any_correct):
            rewards.append({CORRECT: correct_reward, PROCESS: process_reward}.get(category, 0.0))
        elif phase in ("both", "caution"):
            rewards.append(unknown_reward if category == UNKNOWN and not any_correct else 0.0)
        else:
            raise ValueError(f"unknown caution phase {phase!r}; expected both, fact or caution")
    return rewards
