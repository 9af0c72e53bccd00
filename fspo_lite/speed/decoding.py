"""The fast decoding loop: the reference loop's tokens (`fspo_lite.rollout.decoding.sample`) with less work.

`model.generate` and the reference loop run every row of a batch until the last one ends: a batch of sampled answers
whose longest runs to the token limit pays for every row at every step, although most answers ended long before.
`decode` is the same loop (the prompt's last token fed on a prefilled KV cache, each step's tokens drawn by the same
`fspo_lite.rollout.decoding.next_tokens`) with, as the speed section turns them on:

- speed.drop_ended_rows: the ended rows taken out of the forward pass: their KV-cache rows and mask rows are dropped
  once enough of them have ended (`compact_at`);
- a KV cache with room for every token to come, written in place (`preallocate`) instead of concatenated;
- the steps after the first through `fspo_lite.speed.llama_step` (the same logits without transformers' modules),
  optionally on weights packed for MKL (speed.packed_weights: the same logits up to float rounding).

The table of random numbers keeps every row (an ended row gets a uniform one, as its token is replaced by pad
anyway), so each row's random numbers keep their places whichever rows have ended. What can then differ from the
reference loop is float rounding, since a matrix product over fewer rows may sum in another order;
tests/test_speed_contract.py compares the tokens of both loops on the tiny and the bundled model, and
tests/test_decoding.py with `model.generate`'s.
"""

from __future__ import annotations

import functools

import torch

from fspo_lite.models.logprobs import prompt_positions
from fspo_lite.rollout.decoding import check_sampling, next_tokens
from fspo_lite.rollout.sampling import Sampling
from fspo_lite.speed.llama_step import WeightPacks, llama_step


@functools.cache
def preallocated_layer_class():
    """A transformers DynamicLayer whose keys and values live in buffers with room for the tokens still to come:
    `update` writes the new positions in place, where DynamicLayer concatenates, which copies the layer's whole
    cache at every decoding step. The keys and values it returns are views of the filled positions, so attention
    sees the same numbers."""
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        def __init__(self, layer: DynamicLayer, room: int):
            super().__init__()
            self.dtype, self.device = layer.keys.dtype, layer.keys.device
            rows, heads, length, dim = layer.keys.shape
            self.key_buffer = layer.keys.new_empty(rows, heads, length + room, dim)
            self.value_buffer = layer.values.new_empty(rows, heads, length + room, layer.values.shape[-1])
            self.key_buffer[:, :, :length] = layer.keys
            self.value_buffer[:, :, :length] = layer.values
            self.length = length
            self.is_initialized = True
            self._view()

        def _view(self) -> None:
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.length + key_states.shape[-2]
            if end > self.key_buffer.shape[-2]:  # more tokens than planned: double the room (one copy)
                extra = max(end - self.key_buffer.shape[-2], self.key_buffer.shape[-2])
                self.key_buffer = torch.cat([self.key_buffer, self.key_buffer.new_empty(
                    *self.key_buffer.shape[:2], extra, self.key_buffer.shape[-1])], dim=-2)
                self.value_buffer = torch.cat([self.value_buffer, self.value_buffer.new_empty(
                    *self.value_buffer.shape[:2], extra, self.value_buffer.shape[-1])], dim=-2)
            self.key_buffer[:, :, self.length : end] = key_states
            self.value_buffer[:, :, self.length : end] = value_states
            self.length = end
            self._view()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
            self._view()

    return PreallocatedLayer


def preallocate(cache, room: int) -> int:
    """Swap every plain DynamicLayer of a DynamicCache for a PreallocatedLayer with `room` free positions; other
    layer kinds (sliding windows, linear attention) stay as they are. Returns the number of layers swapped."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list):
        return 0
    layer_class, swapped = preallocated_layer_class(), 0
    for index, layer in enumerate(layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys is not None and layer.keys.dim() == 4:
            layers[index] = layer_class(layer, room)
            swapped += 1
    return swapped


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: Sampling, pad_id: int,
           past_key_values=None, compact_at: float = 0.125, preallocate_cache: bool = True,
           logprobs: bool = False, fast_steps: bool = True,
           weight_packs: WeightPacks | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """New tokens (rows, steps) for left-padded prompts, drawn by `fspo_lite.rollout.decoding.next_tokens` as
    `sampling` says, pad after each row's first of sampling.eos_ids; steps = sampling.max_new_tokens or fewer when
    every row has ended.

    past_key_values: the cache of every prompt token but the last (`fspo_lite.speed.prompt_cache`), or None to run the
    whole prompt first. compact_at: ended rows are dropped from the forward pass once they are this share of the
    rows still computed (0: at every step a row ends; 1: never, i.e. `generate`'s work). preallocate_cache: after
    the first step the KV cache gets room for every remaining token (`preallocate`), so a step writes its keys and
    values in place instead of copying the whole cache (the same numbers either way). fast_steps: with a
    preallocated cache, the steps after the first run through `fspo_lite.speed.llama_step` where the model allows
    it (the same logits, without transformers' Python). weight_packs: those steps' matrix products on weights
    packed for MKL and kept there, LoRA adapters left on (the same logits up to float rounding;
    `fspo_lite.speed.llama_step`). logprobs=True returns (tokens, log-probs) (`next_tokens`)."""
    check_sampling(sampling)
    max_new_tokens = sampling.max_new_tokens
    rows, device = input_ids.shape[0], input_ids.device
    eos = torch.tensor(list(sampling.eos_ids), device=device)
    mask = attention_mask
    if past_key_values is None:
        step_ids, positions = input_ids, prompt_positions(mask)
    else:
        step_ids, positions = input_ids[:, -1:], prompt_positions(mask)[:, -1:]
    live = torch.arange(rows, device=device)  # the input rows still in the forward pass, in cache order
    ended = torch.zeros(rows, dtype=torch.bool, device=device)
    tokens, drawn_logprobs = [], []
    cache = past_key_values
    fast = None  # LlamaStep once every cache layer is preallocated: the same logits without transformers' modules
    for step in range(max_new_tokens):
        if fast is not None:
            logits = fast.logits(step_ids, mask, positions, cache)[:, -1].float()
        else:
            output = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                           use_cache=True, logits_to_keep=1)
            cache = output.past_key_values
            if step == 0 and preallocate_cache and max_new_tokens > 1:
                layers = getattr(cache, "layers", None)
                if preallocate(cache, max_new_tokens - 1) == len(layers or []) > 0 and fast_steps:
                    fast = llama_step(model, weight_packs, rows=live.numel())
            logits = output.logits[:, -1].float()
        if live.numel() < rows:  # rows out of the pass get a uniform row, so the draws keep their places
            full = torch.zeros(rows, logits.shape[-1], dtype=logits.dtype, device=device)
            full[live] = logits
            logits = full
        chosen, chosen_logprobs = next_tokens(logits, step, sampling, eos, ended, pad_id, logprobs)
        tokens.append(chosen)
        drawn_logprobs.append(chosen_logprobs)
        ended = ended | torch.isin(chosen, eos)
        if bool(ended.all()):
            break
        keep = ~ended[live]
        if (~keep).sum() >= max(1.0, compact_at * live.numel()):
            index = keep.nonzero().squeeze(1)
            cache.batch_select_indices(index)
            live, mask, positions = live[index], mask[index], positions[index]
        step_ids = chosen[live][:, None]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        positions = positions[:, -1:] + 1
    drawn = torch.stack(tokens, dim=1) if tokens else input_ids.new_zeros(rows, 0)
    if not logprobs:
        return drawn
    return drawn, torch.stack(drawn_logprobs, dim=1) if drawn_logprobs else torch.zeros(rows, 0)
