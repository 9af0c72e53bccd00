"""The fast log-prob pass: the reference pass's numbers (`fspo_lite.models.logprobs`) up to float rounding, with less
work on a CPU.

`FastLogprobPass` is what the trainer runs with speed.mode=auto (`fspo_lite.speed.build_logprob_pass`). Each switch is
a speed.* key (docs/performance.md, "What each lever does"):

- share_prompt_pass: rows with the same prompt (the G responses of a group) share one pass over it
  (`fspo_lite.speed.prompt_cache`), and the start every prompt of the rollout shares (system prompt,
  demonstrations) runs once for all micro-batches, forward and backward: `over` makes it, the micro-batches build on
  it, and the end of the `over` block sends their summed gradient through it;
- group_by_length: micro-batches take the responses longest first, each cut to its longest completion;
- fused_lora: LoRA projections as one autograd node (`fspo_lite.speed.fused_lora`);
- grouped_query_sdpa: grouped key/value heads inside torch's CPU attention kernel (`fspo_lite.speed.attention`);
- the log-softmax at the sampled tokens through `fspo_lite.speed.token_logprobs` (one pass over the vocabulary, its
  own backward).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from fspo_lite.algos import entropy_from_logits, selective_log_softmax
from fspo_lite.models.logprobs import LogprobPass, micro_batches, prompt_positions
from fspo_lite.speed.attention import grouped_query_sdpa
from fspo_lite.speed.fused_lora import fused_lora
from fspo_lite.speed.prompt_cache import (MIN_SHARED_PREFIX, PrefixPass, common_prefix_length, distinct_prompts,
                                          prefix_pass, shared_prefix_prefill, shared_prompt_pass)
from fspo_lite.speed.token_logprobs import token_logprobs


def fast_completion_logprobs(
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
    """`fspo_lite.models.logprobs.completion_logprobs`'s log pi(o_t | q, o_<t), shape (B, C), and optionally the
    entropy, up to float rounding.

    Only the C + 1 last positions are turned into logits (`logits_to_keep`), and the log-softmax
    is taken a few rows at a time, so the (B, T, V) float32 log-softmax never exists. Logits are
    divided by the sampling temperature, as the sampler did. Position ids follow the attention
    mask, so left padding does not shift positions.

    share_prompts: rows with the same prompt (the G responses of a group) share one pass over it
    (`fspo_lite.speed.prompt_cache`); the completions then attend to the copied prompt keys/values. When
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


class FastLogprobPass(LogprobPass):
    """`LogprobPass` with the speed switches of the module docstring (each given as decided for this run)."""

    def sequence_logprobs(self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                          completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                          shared_prompts: bool = False) -> torch.Tensor:
        """The reference's judge log-probs from `fast_completion_logprobs`: rows with the same prompt share one
        pass over it when shared_prompts."""
        return fast_completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                        share_prompts=shared_prompts)[0]

    def __init__(self, temperature: float = 1.0, share_prompts: bool = False, group_by_length: bool = False,
                 fused: bool = False, grouped_query: bool = False, device_type: str = "cpu"):
        super().__init__(temperature)
        self.share_prompts, self.group_by_length = share_prompts, group_by_length
        self.fused, self.grouped_query, self.device_type = fused, grouped_query, device_type

    def micro_batches(self, rollout, size: int) -> list[tuple[torch.Tensor, int]]:
        return micro_batches(rollout.completion_lengths, rollout.completion_ids.shape[1], size, self.group_by_length)

    @contextlib.contextmanager
    def over(self, model, rollout):
        """Inside: LoRA fused and grouped-query attention on as decided; the prompt start every response shares run
        once, its gradient sent back through it when the block ends without an error."""
        with contextlib.ExitStack() as stack:
            if self.fused:
                stack.enter_context(fused_lora(model))
            if self.grouped_query:
                stack.enter_context(grouped_query_sdpa(self.device_type))
            shared_start = prefix_pass(model, rollout.prompt_ids, rollout.prompt_mask) if self.share_prompts else None
            yield functools.partial(self.logprobs, model, rollout, shared_start=shared_start)
            if shared_start is not None:
                shared_start.backward()

    def logprobs(self, model, rollout, rows: torch.Tensor, width: int, with_entropy: bool = False,
                 entropy_grad: bool = False, shared_start: PrefixPass | None = None):
        return fast_completion_logprobs(
            model, rollout.prompt_ids[rows], rollout.prompt_mask[rows], rollout.completion_ids[rows, :width],
            rollout.completion_mask[rows, :width], self.temperature, with_entropy, self.share_prompts, entropy_grad,
            shared_start)
