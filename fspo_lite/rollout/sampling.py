"""What every rollout engine shares: the `Sampling` record of one `generate` call and the `Engine` base.

Each engine (`fspo_lite.rollout.transformers_rollout`, `fspo_lite.rollout.vllm_rollout`,
`fspo_lite.rollout.vllm_server`) is built from the rollout section (`RolloutConfig`: temperature, top_p,
max_new_tokens, its engine switches) and the prompt limit (data.max_prompt_tokens); `Engine.sampling` turns the
arguments of one `generate(prompts, num_samples, do_sample, max_new_tokens)` call into a `Sampling` record, which
`fspo_lite.rollout.decoding.sample`, `fspo_lite.speed.decoding.decode` and the vLLM request builders read.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from fspo_lite.config import RolloutConfig


@dataclass(frozen=True)
class Sampling:
    """How one batch of completions is drawn."""

    max_new_tokens: int
    eos_ids: Sequence[int]
    """Token ids that end a completion."""
    do_sample: bool = True
    """False: greedy (temperature and top_p are then not used)."""
    temperature: float = 1.0
    top_p: float = 1.0
    min_new_tokens: int = 0
    """No EOS before this many tokens (transformers engine only)."""
    draw: str = "multinomial"
    """How the transformers engine's decoding loop draws a token (rollout.draw): multinomial (generate's) |
    exponential_race."""


class Engine:
    """The policy, its tokenizer, a copy of the rollout section (later edits of the config do not reach a built
    engine) and the prompt limit: what the constructors of every engine start with."""

    def __init__(self, model, tokenizer, rollout: RolloutConfig, max_prompt_tokens: int = 512):
        self.model = model
        self.tokenizer = tokenizer
        self.rollout = copy.copy(rollout)
        self.max_prompt_tokens = max_prompt_tokens

    def close(self) -> None:
        """End what the engine started (processes, workers, copies of the weights); the engine cannot sample after
        it. Nothing here: each engine that starts something ends it in its own `close`."""

    def sampling(self, eos_ids: Sequence[int], do_sample: bool = True, max_new_tokens: int | None = None,
                 min_new_tokens: int = 0) -> Sampling:
        """The `Sampling` of one `generate` call: the rollout section's temperature and top_p, and its max_new_tokens
        unless the call gives one."""
        return Sampling(max_new_tokens or self.rollout.max_new_tokens, list(eos_ids), do_sample,
                        self.rollout.temperature, self.rollout.top_p, min_new_tokens, self.rollout.draw)
