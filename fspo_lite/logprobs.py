"""Per-token log-probabilities of completions under a model (policy, old policy or reference)."""

from __future__ import annotations

import contextlib

import torch

from .algos import entropy_from_logits, selective_log_softmax


def completion_logprobs(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(o_t | q, o_<t) for every completion token, shape (B, C), and optionally the entropy.

    Only the C + 1 last positions are turned into logits (`logits_to_keep`), and the log-softmax
    is taken a few rows at a time, so the (B, T, V) float32 log-softmax never exists. Logits are
    divided by the sampling temperature, as the sampler did. Position ids follow the attention
    mask, so left padding does not shift positions.
    """
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    width = completion_ids.shape[1]
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        logits_to_keep=width + 1, use_cache=False,
    ).logits[:, :-1, :]
    if temperature != 1.0:
        logits = logits / temperature
    logp = selective_log_softmax(logits, completion_ids)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    return logp, entropy


def reference_context(model):
    """Context in which `model` acts as the frozen reference: a PEFT model with its adapter off."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()
