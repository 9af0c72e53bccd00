"""Per-token log-probabilities of completions under a model (policy, old policy or reference): the reference pass.

`completion_logprobs` is one ordinary forward pass over prompt + completion and the log-softmax of the logits at
the sampled tokens, differentiated by autograd. `LogprobPass` is the seam the trainer runs its log-prob passes
through: `micro_batches` cuts a rollout into micro-batches, and inside `with logprob_pass.over(model, rollout) as
logprobs:` each `logprobs(rows, width)` gives the log-probs (and entropies) of those rows. `fspo_lite.speed` builds the
trainer's pass (`build_logprob_pass`): this one with speed.mode=off, else a faster one with the same numbers up to
float rounding (tests/test_speed_contract.py).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from fspo_lite.algos import entropy_from_logits, selective_log_softmax


def prompt_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that follow the mask (left padding does not shift the real tokens)."""
    return (attention_mask.cumsum(dim=1) - 1).clamp(min=0)


def completion_logprobs(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(o_t | q, o_<t) for every completion token, shape (B, C), and optionally the entropy of each position.

    One forward pass over the left-padded prompts and right-padded completions; position ids follow the attention
    mask, so left padding does not shift positions. Only the C + 1 last positions are turned into logits
    (`logits_to_keep`): position t predicts token t + 1. Logits are divided by the sampling temperature, as the
    sampler did. entropy_grad: the entropy keeps its graph (for an entropy bonus in the loss); else it is detached.
    """
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    width = completion_ids.shape[1]
    logits = model(input_ids=torch.cat([prompt_ids, completion_ids], dim=1), attention_mask=attention_mask,
                   position_ids=prompt_positions(attention_mask), logits_to_keep=width + 1,
                   use_cache=False).logits[:, :-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = selective_log_softmax(logits, completion_ids)
    if not with_entropy:
        return logp, None
    return logp, entropy_from_logits(logits if entropy_grad else logits.detach())


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


class LogprobPass:
    """The update's log-prob passes over one rollout (the reference: `completion_logprobs`, rows in order).

    `over(model, rollout)` is a context: inside it, `logprobs(rows, width, with_entropy, entropy_grad)` gives
    (log-probs (rows, width), entropies or None) of the completions of `rollout`'s `rows` cut to their first `width`
    tokens. A faster pass (`fspo_lite.speed.logprobs`) may do work once per `over` (for every micro-batch inside) and
    finish it when the block ends without an error; the caller's backward passes then belong inside the block."""

    def __init__(self, temperature: float = 1.0):
        self.temperature = temperature

    def micro_batches(self, rollout, size: int) -> list[tuple[torch.Tensor, int]]:
        """(rows, width) of each micro-batch of `size` rows: here the rollout's rows in order, at its full width."""
        return micro_batches(rollout.completion_lengths, rollout.completion_ids.shape[1], size, group_by_length=False)

    @contextlib.contextmanager
    def over(self, model, rollout):
        """Inside: the `logprobs(rows, width, with_entropy=False, entropy_grad=False)` of `model` on `rollout`."""
        yield functools.partial(self.logprobs, model, rollout)

    def logprobs(self, model, rollout, rows: torch.Tensor, width: int, with_entropy: bool = False,
                 entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        return completion_logprobs(model, rollout.prompt_ids[rows], rollout.prompt_mask[rows],
                                   rollout.completion_ids[rows, :width], rollout.completion_mask[rows, :width],
                                   self.temperature, with_entropy, entropy_grad)

    def sequence_logprobs(self, model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                          completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                          shared_prompts: bool = False) -> torch.Tensor:
        """(B, C) log p(completion token | prompt, earlier tokens) at temperature 1: how a judge model scores text
        (the likelihood verifier). shared_prompts says the rows repeat few prompts, which a faster pass may encode
        once each; here every row runs whole."""
        return completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)[0]


def reference_context(model):
    """Context in which `model` acts as the frozen reference: a PEFT model with its adapter off."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()
