"""Rewards that pay truthfulness or pay nothing at all: two controls and two published factuality rewards.

- `coin_rewards` (`random`): a fair coin per well-formed response. The control of the spurious-rewards result
  (arXiv 2506.10947): RL on a small model moves its behaviour even when the reward carries no information about
  the answer, so an arm trained on a coin shows how much of a method's change any RL at the same budget makes.
- `format_rewards` (`format`): 1 for a well-formed response, whatever it says. The second control: how much of a
  change the format alone buys.
- `binary_rewards` (`binary`): Binary RAR (arXiv 2510.17733): 1 only for a correct answer none of whose checked
  reasoning sentences the verifier finds unsupported, else 0. One contradicted claim costs the whole reward.
- `ternary_rewards` (`ternary`): TruthRL (arXiv 2509.25760): +1 correct, 0 for declining ("Unknown"), -1 wrong, so
  that abstaining is better than a wrong answer and worse than a right one.

Every function here takes plain values and returns one float per response; a malformed response gets the format
penalty in all four, as in every other method. docs/methods.md states each paper's definition and where this
differs from it.
"""

from __future__ import annotations

import random
from typing import Sequence

COIN_PROBABILITY = 0.5
"""P(reward 1) of the random reward's coin (the spurious-rewards paper's fair coin)."""


def coin_rewards(format_ok: Sequence[bool], seed: int, step: int, format_penalty: float = -2.0) -> list[float]:
    """A fair coin (1 or 0) per well-formed response, the format penalty for the others.

    The coins are a function of (seed, step) only, so a resumed run draws the same ones and two arms with the same
    seed see the same sequence; they never depend on the response."""
    draw = random.Random(f"coin-reward/{seed}/{step}")
    coins = [1.0 if draw.random() < COIN_PROBABILITY else 0.0 for _ in format_ok]
    return [coin if ok else format_penalty for coin, ok in zip(coins, format_ok)]


def format_rewards(format_ok: Sequence[bool], format_penalty: float = -2.0) -> list[float]:
    """1 for every well-formed response, the format penalty for the others."""
    return [1.0 if ok else format_penalty for ok in format_ok]


def binary_rewards(format_ok: Sequence[bool], correct: Sequence[bool], labels: Sequence[Sequence[int]],
                   format_penalty: float = -2.0) -> list[float]:
    """Binary RAR: 1 for a correct answer with no checked reasoning sentence labelled unsupported (-1), else 0.

    `labels` holds each response's sentence labels (+1 supported, -1 unsupported, 0 not checkable); a response with
    no checkable sentence has nothing contradicted, so its correct answer is paid."""
    return [format_penalty if not ok else float(right and -1 not in sentence_labels)
            for ok, right, sentence_labels in zip(format_ok, correct, labels)]


def ternary_rewards(format_ok: Sequence[bool], correct: Sequence[bool], unknown: Sequence[bool],
                    format_penalty: float = -2.0) -> list[float]:
    """TruthRL: +1 correct, 0 for an "Unknown" answer, -1 for any other answer; the format penalty when malformed."""
    return [format_penalty if not ok else 1.0 if right else 0.0 if declined else -1.0
            for ok, right, declined in zip(format_ok, correct, unknown)]
