"""TRL's GRPOTrainer with per-token advantages supplied from outside (the `bench` extra installs TRL).

TRL computes one advantage per response; its loss also accepts a (B, T) tensor. This subclass
replaces TRL's advantages by whatever `advantage_fn` returns for the generated batch, so TRL can
train with exactly the token advantages fspo-lite computes (the FSPO flip included), and it
counts the completion tokens of each generation batch for the benchmark.
"""

from __future__ import annotations

from typing import Callable

import torch
from trl import GRPOTrainer

AdvantageFn = Callable[[list[dict], dict], torch.Tensor]
"""(the batch's dataset rows, TRL's generation output) -> (B, T) token advantages."""


class TokenAdvantageGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose advantages come from `advantage_fn` (shape (B, T) over completion tokens)."""

    def __init__(self, *args, advantage_fn: AdvantageFn, **kwargs):
        super().__init__(*args, **kwargs)
        self.advantage_fn = advantage_fn
        self.generated_tokens = 0
        """Completion tokens generated since the counter was last reset (the benchmark reads it per step)."""

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"]
        advantages = self.advantage_fn(inputs, output).to(mask.device, torch.float32)
        if advantages.shape != mask.shape:
            raise ValueError(f"advantage_fn returned shape {tuple(advantages.shape)}; the completions are "
                             f"{tuple(mask.shape)}")
        output["advantages"] = advantages * mask
        self.generated_tokens += int(mask.sum())
        return output
