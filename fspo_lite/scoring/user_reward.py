"""A reward of the user's own, passed as TRL's GRPOTrainer takes it (`reward_funcs`), in place of the outcome reward.

The calling convention is TRL's: each function is called with keyword arguments only,

    reward_func(prompts=[...], completions=[...], completion_ids=[...], trainer_state=..., question=[...],
                answer=[...], answers=[...], evidence=[...], id=[...], <every other column of the data>=[...])

one entry per response (each question's G responses in a row), and returns one number per response, or None where
it does not apply. `prompts` holds each response's question as the data gave it (fspo-lite builds the chat prompt
itself); `completions` each response as the verifier reads it (the response prefix, usually `<think>`, then the
sampled text). Several functions are summed with their `reward_weights` (default 1 each), None counting as 0; a
response that every function answered with None gets its group's mean reward, so its advantage is 0 (TRL gives it
advantage 0 too). A function without `**kwargs` is given only the arguments it names.

The result replaces the outcome reward of reward.method=grpo or fspo, so FSPO's sentence-wise flip works on top of
it unchanged (fspo_lite.scoring.rewards.score_rollouts). `check_reward_funcs` refuses a wrong shape in one line
before any model loads; `UserReward.score` refuses a wrong answer (count or type) in one line naming the function.
"""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace
from typing import Any, Callable

import torch

from fspo_lite.scoring.methods import MethodResult, RewardBatch

CALL_ARGUMENTS = ("prompts", "completions", "completion_ids", "trainer_state")
"""What every call passes besides the data's columns."""
COLUMNS = ("question", "answer", "answers", "evidence", "id")
"""The columns every example has (answer: its first accepted answer; answers: all of them)."""
SOURCES = ("grpo", "fspo")
"""The reward.method values a user reward may take the place of (the outcome reward, with or without the flip)."""


class RewardFuncError(ValueError):
    """A reward function, its weights or its answer has the wrong shape; the message names which."""


def func_name(func: Callable) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


def accepted_names(func: Callable) -> tuple[set[str] | None, set[str]]:
    """(the keyword names `func` takes, or None when it takes **kwargs; the names it requires)."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: give it everything
        return None, set()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        names = None
    else:
        names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    required = {p.name for p in parameters if p.default is p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional_only = [p.name for p in parameters if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional_only:
        raise RewardFuncError(f"reward function {func_name(func)!r}: parameter {positional_only[0]!r} is positional-"
                              "only; reward functions are called with keywords (prompts=, completions=, **columns)")
    return names, required


def check_reward_funcs(reward_funcs: Any, reward_weights: Any = None, columns: set[str] | frozenset = frozenset(),
                       method: str = "grpo") -> tuple[list[Callable], list[float]]:
    """(functions, weights) from a function or a list of them and optional weights; RewardFuncError in one line when
    one is not callable, names a required argument no call gives (`columns`: the data's extra columns), the weights
    do not match, or reward.method is not one a user reward can replace."""
    if method not in SOURCES:
        raise RewardFuncError(f"reward_funcs replace the outcome reward of reward.method=grpo or fspo (the flip on "
                              f"top); reward.method={method} has a reward of its own")
    funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    if not funcs:
        raise RewardFuncError("reward_funcs is empty; give a function or a list of functions")
    given = set(CALL_ARGUMENTS) | set(COLUMNS) | set(columns)
    for func in funcs:
        if isinstance(func, (str, bytes)) or not callable(func):
            raise RewardFuncError(f"reward_funcs: expected a function (prompts, completions, **kwargs) -> list of "
                                  f"floats, got {type(func).__name__} {str(func)[:60]!r}")
        _, required = accepted_names(func)
        missing = sorted(required - given)
        if missing:
            raise RewardFuncError(f"reward function {func_name(func)!r} requires {missing[0]!r}, which no call gives; "
                                  f"it is called with {', '.join(CALL_ARGUMENTS + COLUMNS)} and the data's columns")
    if reward_weights is None:
        return funcs, [1.0] * len(funcs)
    weights = list(reward_weights) if isinstance(reward_weights, (list, tuple)) else [reward_weights]
    if len(weights) != len(funcs) or not all(isinstance(w, (int, float)) and not isinstance(w, bool)
                                             and math.isfinite(w) for w in weights):
        raise RewardFuncError(f"reward_weights: expected {len(funcs)} finite numbers (one per reward function), got "
                              f"{str(reward_weights)[:80]}")
    return funcs, [float(w) for w in weights]


def call_arguments(batch: RewardBatch) -> dict[str, Any]:
    """The keyword arguments of every call for one step's responses (module docstring)."""
    examples = batch.examples
    arguments = {
        "prompts": [e.question for e in examples],
        "completions": batch.texts,
        "completion_ids": batch.completion_ids,
        "trainer_state": SimpleNamespace(global_step=batch.step, max_steps=batch.total_steps),
        "question": [e.question for e in examples], "answer": [e.answer for e in examples],
        "answers": [list(e.answers) for e in examples], "evidence": [e.evidence for e in examples],
        "id": [e.id for e in examples],
    }
    extra = sorted({key for e in examples for key in e.extra} - set(arguments))
    arguments.update({key: [e.extra.get(key) for e in examples] for key in extra})
    return arguments


def rewards_of(func: Callable, arguments: dict[str, Any], count: int) -> list[float]:
    """One function's rewards (None -> NaN); RewardFuncError in one line when its answer has the wrong shape."""
    names, _ = accepted_names(func)
    output = func(**(arguments if names is None else {k: v for k, v in arguments.items() if k in names}))
    if isinstance(output, torch.Tensor):
        output = output.tolist()
    if isinstance(output, (str, bytes, dict)) or not hasattr(output, "__len__") or len(output) != count:
        size = len(output) if hasattr(output, "__len__") and not isinstance(output, (str, bytes)) else type(output).__name__
        raise RewardFuncError(f"reward function {func_name(func)!r} returned {size} rewards for {count} completions; "
                              "it must return one number (or None) per completion")
    values = []
    for value in output:
        if value is None:
            values.append(math.nan)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) or hasattr(value, "__float__"):
            values.append(float(value))
        else:
            raise RewardFuncError(f"reward function {func_name(func)!r} returned a {type(value).__name__} "
                                  f"({str(value)[:40]!r}); rewards are numbers or None")
    return values


def combine(per_func: torch.Tensor, weights: list[float], group_size: int) -> torch.Tensor:
    """(N,) rewards from (N, F) per-function rewards: the weighted sum with NaN (None) as 0; a row that is NaN in
    every column gets its group's mean of the other rows (0 when the whole group is NaN), so its advantage is 0."""
    unscorable = torch.isnan(per_func).all(dim=1)
    rewards = (per_func * torch.tensor(weights, dtype=per_func.dtype)).nansum(dim=1)
    rewards[unscorable] = math.nan
    grouped = rewards.view(-1, group_size)
    means = torch.nan_to_num(torch.nanmean(grouped, dim=1, keepdim=True), nan=0.0).expand_as(grouped)
    return torch.where(torch.isnan(grouped), means, grouped).reshape(-1)


class UserReward:
    """The user's reward functions as a reward source (`score` has the signature of a METHODS entry's)."""

    def __init__(self, funcs: list[Callable], weights: list[float]):
        self.funcs, self.weights = funcs, weights

    def score(self, batch: RewardBatch, section: Any = None, verifier=None, tools=None) -> MethodResult:
        arguments = call_arguments(batch)
        count = len(batch.examples)
        columns = [rewards_of(func, arguments, count) for func in self.funcs]
        per_func = torch.tensor(columns, dtype=torch.float32).T.reshape(count, len(self.funcs))
        rewards = combine(per_func, self.weights, batch.group_size)
        metrics = {}
        for index, func in enumerate(self.funcs):
            column = per_func[:, index]
            known = column[~torch.isnan(column)]
            metrics[f"reward_{func_name(func)}"] = known.mean().item() if len(known) else math.nan
        return MethodResult(rewards, details=[{} for _ in batch.views], metrics=metrics)


def user_reward(reward_funcs: Any, reward_weights: Any, examples: list | None, method: str) -> UserReward | None:
    """The Trainer's `reward_funcs` / `reward_weights` as a reward source (None when no function is given), checked
    against the training examples' columns and `reward.method` in one line each (check_reward_funcs)."""
    if reward_funcs is None:
        if reward_weights is not None:
            raise RewardFuncError("reward_weights without reward_funcs")
        return None
    columns = {key for example in (examples or []) for key in example.extra}
    return UserReward(*check_reward_funcs(reward_funcs, reward_weights, columns, method))
