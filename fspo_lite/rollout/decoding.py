"""Batched sampling that stops computing a row once it has ended.

`model.generate` runs every row of a batch until the last one ends: a batch of 64 sampled answers whose longest
runs to the token limit pays for 64 rows at every step, although most answers ended long before. `decode` is the
same loop (the prompt's last token fed on a prefilled KV cache, temperature and top-p applied to the logits,
one multinomial draw per row, pad after a row's EOS) with the ended rows taken out of the forward pass: their
KV-cache rows and mask rows are dropped once enough of them have ended (`compact_at`).

Tokens are drawn (`draw_tokens`) by an exponential race by default (argmax of p / E over the vocabulary, E = -log U
from uniform numbers), or, with draw="multinomial", as `model.generate` draws them: torch's one-sample multinomial
runs the same race with exponential numbers from its own, about 4x slower, sampler. Either way the table keeps every
row (an ended row gets a uniform one, as its token is replaced by pad anyway), so each row's random numbers keep
their places whichever rows have ended; with draw="multinomial" each row sees the numbers it would see inside
`generate`. What can then differ is float rounding, since a matrix product over fewer rows may sum in another order;
tests/test_decoding.py compares the tokens with `model.generate`'s on the tiny and the bundled model.
"""

from __future__ import annotations

import functools

import torch

from fspo_lite.models.prompt_cache import prompt_positions
from fspo_lite.rollout.llama_step import WeightPacks, llama_step
from fspo_lite.rollout.sampling import Sampling

LOGITS_SETTINGS = ("repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size",
                   "encoder_no_repeat_ngram_size", "min_length", "min_new_tokens", "bad_words_ids", "suppress_tokens",
                   "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id", "min_p", "typical_p",
                   "epsilon_cutoff", "eta_cutoff", "sequence_bias", "renormalize_logits",
                   "exponential_decay_length_penalty", "guidance_scale", "watermarking_config", "diversity_penalty")
"""Generation-config fields that make `generate` change the logits beyond temperature and top-p."""


def plain_sampling(generation_config) -> bool:
    """Whether a model's generation config leaves every LOGITS_SETTINGS field at transformers' default, so
    `decode` (temperature and top-p only) samples what `generate` would. A model whose config sets, e.g., a
    repetition penalty (Qwen2.5-Instruct: 1.05) is decoded with `generate`."""
    from transformers import GenerationConfig

    if generation_config is None:
        return True
    default = GenerationConfig()
    return all(getattr(generation_config, name, None) == getattr(default, name, None) for name in LOGITS_SETTINGS)


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


def process_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Temperature, then top-p (nucleus) filtering, as transformers' TemperatureLogitsWarper and
    TopPLogitsWarper do: the smallest set of top tokens whose probability reaches top_p is kept (at least one),
    the rest set to -inf."""
    scores = logits / temperature if temperature != 1.0 else logits
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - top_p)
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scores


DRAWS = ("exponential_race", "multinomial")
"""The ways `draw_tokens` draws (rollout.draw)."""


def race_tokens(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Row i's token: argmax over j of probs[i, j] / E[i, j], with E = -log(uniforms) exponential numbers (uniforms in
    [0, 1), the shape of probs). The exponential race: token j wins with probability probs[i, j] / sum(probs[i]), so
    rows need not be normalised, and a token of probability 0 never wins (a ratio of 0; a uniform of exactly 0 gives
    E = inf and a ratio of 0 too). It is torch.multinomial's own one-sample method with its exponential numbers made
    from uniform ones, which is about 4x cheaper on a CPU. A row with no positive total (NaN logits) is refused, as
    torch.multinomial refuses it."""
    totals = probs.sum(dim=-1)
    if not bool(((totals > 0) & torch.isfinite(totals)).all()):
        raise ValueError("cannot draw a token: a row of probabilities is not finite or sums to 0")
    return (probs / uniforms.log().neg_()).argmax(dim=-1)


def draw_tokens(probs: torch.Tensor, draw: str = "exponential_race") -> torch.Tensor:
    """One token per row of a (rows, vocabulary) probability table, from torch's default generator: exponential_race
    (`race_tokens` on a table of torch.rand numbers) or multinomial (torch.multinomial, generate's draws)."""
    if draw == "exponential_race":
        return race_tokens(probs, torch.rand(probs.shape, device=probs.device))
    if draw == "multinomial":
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    raise ValueError(f"unknown draw {draw!r}; use one of {', '.join(DRAWS)}")


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: Sampling, pad_id: int,
           past_key_values=None, compact_at: float = 0.125, preallocate_cache: bool = True,
           logprobs: bool = False, fast_steps: bool = True,
           weight_packs: WeightPacks | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """New tokens (rows, steps) for left-padded prompts: sampled with `sampling`'s temperature and top-p, drawn as
    sampling.draw says (`draw_tokens`; or greedy, sampling.do_sample=False), pad after each row's first of
    sampling.eos_ids; steps = sampling.max_new_tokens or fewer when every row has ended, no EOS before
    sampling.min_new_tokens tokens (their logits set to -inf first, as `generate`'s MinNewTokensLengthLogitsProcessor
    does).

    past_key_values: the cache of every prompt token but the last (`fspo_lite.models.prompt_cache`), or None to run the
    whole prompt first. compact_at: ended rows are dropped from the forward pass once they are this share of the
    rows still computed (0: at every step a row ends; 1: never, i.e. `generate`'s work). preallocate_cache: after
    the first step the KV cache gets room for every remaining token (`preallocate`), so a step writes its keys and
    values in place instead of copying the whole cache (the same numbers either way). fast_steps: with a
    preallocated cache, the steps after the first run through `fspo_lite.rollout.llama_step` where the model allows
    it (the same logits, without transformers' Python). weight_packs: those steps' matrix products on weights
    packed for MKL and kept there, LoRA adapters left on (the same logits up to float rounding;
    `fspo_lite.rollout.llama_step`). logprobs=True returns
    (tokens, log-probs): each drawn token's log-probability under the processed scores it was drawn from (after
    temperature and top-p, as vLLM's processed log-probs), 0 after a row's end."""
    max_new_tokens, do_sample, temperature = sampling.max_new_tokens, sampling.do_sample, sampling.temperature
    if do_sample and temperature <= 0:
        raise ValueError(f"sampling needs a temperature above 0, got {temperature}")
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
        if step < sampling.min_new_tokens:
            logits = logits.index_fill(1, eos, float("-inf"))
        scores = process_logits(logits, temperature, sampling.top_p) if do_sample else logits
        if do_sample:
            next_tokens = draw_tokens(torch.softmax(scores, dim=-1), sampling.draw)
        else:
            next_tokens = scores.argmax(dim=-1)
        if logprobs:
            chosen = torch.log_softmax(scores, dim=-1).gather(1, next_tokens[:, None]).squeeze(1)
            drawn_logprobs.append(chosen.masked_fill(ended, 0.0))
        next_tokens = next_tokens.masked_fill(ended, pad_id)
        tokens.append(next_tokens)
        ended = ended | torch.isin(next_tokens, eos)
        if bool(ended.all()):
            break
        keep = ~ended[live]
        if (~keep).sum() >= max(1.0, compact_at * live.numel()):
            index = keep.nonzero().squeeze(1)
            cache.batch_select_indices(index)
            live, mask, positions = live[index], mask[index], positions[index]
        step_ids = next_tokens[live][:, None]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        positions = positions[:, -1:] + 1
    drawn = torch.stack(tokens, dim=1) if tokens else input_ids.new_zeros(rows, 0)
    if not logprobs:
        return drawn
    return drawn, torch.stack(drawn_logprobs, dim=1) if drawn_logprobs else torch.zeros(rows, 0)
