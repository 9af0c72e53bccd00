"""Per-token log-probabilities of completions under a model (policy, old policy or reference)."""

from __future__ import annotations

import contextlib

import torch

from fspo_lite.algos import entropy_from_logits, selective_log_softmax, token_logprobs
from fspo_lite.models.prompt_cache import (MIN_SHARED_PREFIX, PrefixPass, common_prefix_length, distinct_prompts,
                                           prompt_positions, shared_prefix_prefill, shared_prompt_pass)


def completion_logprobs(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = False,
    entropy_grad: bool = False,
    shared_start: PrefixPass | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(o_t | q, o_<t) for every completion token, shape (B, C), and optionally the entropy.

    Only the C + 1 last positions are turned into logits (`logits_to_keep`), and the log-softmax
    is taken a few rows at a time, so the (B, T, V) float32 log-softmax never exists. Logits are
    divided by the sampling temperature, as the sampler did. Position ids follow the attention
    mask, so left padding does not shift positions.

    share_prompts: rows with the same prompt (the G responses of a group) share one pass over it
    (`fspo_lite.models.prompt_cache`); the completions then attend to the copied prompt keys/values. When
    every prompt starts with the same MIN_SHARED_PREFIX or more tokens (system prompt, demonstrations),
    that start is encoded once for the whole batch and each distinct prompt's rest on top of it.
    Same values and gradients up to float rounding; the model must keep its KV cache (no gradient
    checkpointing).
    entropy_grad: the entropy keeps its graph (for an entropy bonus in the loss); else it is detached.
    shared_start: with share_prompts, the common start's pass made once for every micro-batch of the rollout
    (`prompt_cache.prefix_pass`); these rows' common start may be longer, and then only its length is shared.
    """
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = prompt_positions(attention_mask)
    width = completion_ids.shape[1]
    prefix = common_prefix_length(prompt_ids[:, :-1], prompt_mask[:, :-1]) if share_prompts else 0
    # the whole prompts' groups are needed only where the common start is too short to share
    groups = distinct_prompts(prompt_ids, prompt_mask) if share_prompts and prefix < MIN_SHARED_PREFIX else None
    if shared_start is not None and prefix >= shared_start.length:
        prefix = shared_start.length
    else:
        shared_start = None
    if prefix >= MIN_SHARED_PREFIX:
        # all prompt tokens but the last in two passes (the common start once, then each distinct rest); then
        # the last prompt token and the completion in one pass on that cache
        prompt_width = prompt_ids.shape[1]
        cache = shared_prefix_prefill(model, prompt_ids[:, :-1], prompt_mask[:, :-1],
                                      distinct_prompts(prompt_ids[:, :-1], prompt_mask[:, :-1]), prefix, shared_start)
        logits = model(
            input_ids=torch.cat([prompt_ids[:, -1:], completion_ids[:, :-1]], dim=1),
            attention_mask=attention_mask[:, :-1], position_ids=position_ids[:, prompt_width - 1 : -1],
            past_key_values=cache, use_cache=True,
        ).logits
        pieces = [(logits, completion_ids)]
    elif groups is None:
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
            logits_to_keep=width + 1, use_cache=False,
        ).logits[:, :-1, :]
        pieces = [(logits, completion_ids)]
    else:
        # the last prompt position predicts the first completion token; the completion pass the rest
        cache, first_logits = shared_prompt_pass(model, prompt_ids, prompt_mask, groups)
        pieces = [(first_logits, completion_ids[:, :1])]
        if width > 1:
            prompt_width = prompt_ids.shape[1]
            rest = model(
                input_ids=completion_ids[:, :-1], attention_mask=attention_mask[:, :-1],
                position_ids=position_ids[:, prompt_width:-1], past_key_values=cache, use_cache=True,
            ).logits
            pieces.append((rest, completion_ids[:, 1:]))
    logps, entropies = [], []
    for logits, tokens in pieces:
        if entropy_grad:  # an entropy bonus: autograd through the tempered logits, the entropy keeps its graph
            tempered = logits / temperature if temperature != 1.0 else logits
            logps.append(selective_log_softmax(tempered, tokens))
            entropies.append(entropy_from_logits(tempered))
        else:  # one pass over the vocabulary; the backward from the probabilities it kept
            logp, entropy = token_logprobs(logits, tokens, temperature, with_entropy)
            logps.append(logp)
            entropies.append(entropy)
    logp = torch.cat(logps, dim=1)
    return logp, torch.cat(entropies, dim=1) if with_entropy else None


def micro_batches(lengths: torch.Tensor, width: int, size: int, group_by_length: bool = True
                  ) -> list[tuple[torch.Tensor, int]]:
    """(row indices, completion width) of each micro-batch of `size` rows, for completions of `lengths` tokens
    right-padded to `width`.

    group_by_length: the rows go longest first (a stable sort), and each micro-batch runs only up to its own
    longest completion (at least 1), so a micro-batch of short answers does not run columns of padding through
    every pass. No real token attends to a later position, so the cut changes no log-prob; the order changes only
    how a gradient accumulated over the micro-batches is rounded. False: rows in order, each at `width`.
    """
    if group_by_length:
        order = torch.sort(lengths, descending=True, stable=True).indices
    else:
        order = torch.arange(len(lengths), device=lengths.device)
    batches = [order[start : start + size] for start in range(0, len(order), size)]
    return [(rows, max(int(lengths[rows].max()), 1) if group_by_length else width) for rows in batches]


def reference_context(model):
    """Context in which `model` acts as the frozen reference: a PEFT model with its adapter off."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()
