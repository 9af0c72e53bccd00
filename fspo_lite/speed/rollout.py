"""The fast transformers engine: the reference engine's tokens (`fspo_lite.rollout.transformers_rollout`) with less work
on a CPU.

`FastTransformersRollout` keeps the reference engine's batching and replaces how a batch is decoded (`new_tokens`),
around a `generate` that picks the model drawing the tokens and merges or packs its weights, as the speed section
says (docs/performance.md, "What each lever does"):

- share_prompt_prefill / share_prompt_prefix: each distinct prompt encoded once for its samples, and the start
  every prompt of a batch shares once for the batch (`fspo_lite.speed.prompt_cache`);
- drop_ended_rows: `fspo_lite.speed.decoding.decode`, which takes a row out of the forward pass once it has ended,
  writes its KV cache in place and runs its later steps through `fspo_lite.speed.llama_step` (false: `model.generate`
  on the prefilled cache);
- merge_lora_for_generation: LoRA adapters merged into new weights while sampling (`fspo_lite.speed.lora_merge`);
- packed_weights: the decoding steps on weights packed for MKL, kept for the run (`fspo_lite.speed.llama_step`);
- sampler_dtype: sample from a copy of the policy in another dtype, its trained weights copied in before every
  rollout.
"""

from __future__ import annotations

import contextlib
import copy

import torch

from fspo_lite.config import RolloutConfig, SpeedConfig
from fspo_lite.rollout.sampling import Sampling
from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.speed.decoding import decode
from fspo_lite.speed.llama_step import packing_applies, wants_packed_weights, weight_packs_for
from fspo_lite.speed.lora_merge import merged_lora_weights
from fspo_lite.speed.prompt_cache import (MIN_SHARED_PREFIX, common_prefix_length, distinct_prompts,
                                          shared_prefix_prefill, shared_prompt_pass)


class FastTransformersRollout(TransformersRollout):
    """`TransformersRollout` for plain weights (no FSDP shards, no Unsloth) with the switches of the speed section."""

    def __init__(self, model, tokenizer, rollout: RolloutConfig, speed: SpeedConfig, max_prompt_tokens: int = 512,
                 progress: bool = False, generate_kwargs: dict | None = None, preallocate_cache: bool = True,
                 fast_steps: bool = True):
        super().__init__(model, tokenizer, rollout, max_prompt_tokens, progress, generate_kwargs)
        self.speed = copy.copy(speed)
        self.preallocate_cache = preallocate_cache
        """With speed.drop_ended_rows: `decode` writes the KV cache in place instead of concatenating (same
        tokens)."""
        self.fast_steps = fast_steps
        """With the preallocated cache: `decode` runs its steps after the first through
        `fspo_lite.speed.llama_step` where the model allows it (the same logits, without transformers' Python)."""
        if self.with_logprobs and not speed.drop_ended_rows:
            raise ValueError("rollout.use_sampler_logprobs with the transformers engine needs its decoding loop: "
                             "speed.drop_ended_rows=true (or speed.mode=off)")
        self._copy = None
        """The speed.sampler_dtype copy of the policy, made at the first rollout."""
        self._drawing = None
        """While `generate` runs: (the model drawing the tokens, its packed weights or None, whether the decoding loop
        runs)."""

    def sampling_model(self):
        """The model that draws the tokens: the policy, or (speed.sampler_dtype) its copy in that dtype with the
        policy's trainable weights (the adapter, or every weight in full fine-tuning) copied in now."""
        if self.speed.sampler_dtype == "policy":
            return self.model
        if self._copy is None:
            self._copy = copy.deepcopy(self.model).to(getattr(torch, self.speed.sampler_dtype)).requires_grad_(False)
            self._copy.eval()
        with torch.no_grad():
            for (name, mine), (theirs_name, theirs) in zip(self._copy.named_parameters(), self.model.named_parameters()):
                if name != theirs_name:
                    raise RuntimeError(f"the sampler copy lost step with the policy at {name} / {theirs_name}")
                if theirs.requires_grad:
                    mine.copy_(theirs)
        return self._copy

    def close(self) -> None:
        """Drop the speed.sampler_dtype copy of the policy (a second set of weights)."""
        self._copy = None

    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None):
        """The reference engine's `generate`, its batches drawn by `new_tokens` from `sampling_model()`, with LoRA
        merged or the weights packed as the speed section says."""
        model = self.sampling_model()
        own_loop = self.speed.drop_ended_rows and self.own_loop(model)
        # packed weights: the adapter stays on and is not merged into copies (the packs hold the base weights)
        packed = (own_loop and self.fast_steps and self.preallocate_cache
                  and wants_packed_weights(self.speed.packed_weights))
        packs = weight_packs_for(model) if packed and packing_applies(model) else None
        merge = self.speed.merge_lora_for_generation and packs is None
        self._drawing = (model, packs, own_loop)
        try:
            with merged_lora_weights(model) if merge else contextlib.nullcontext():
                return super().generate(prompts, num_samples, do_sample, max_new_tokens)
        finally:
            self._drawing = None

    def new_tokens(self, model, encoded, sampling: Sampling, pad_id: int):
        """The batch's prompts prefilled once per distinct prompt, then decoded by `decode` (or `generate` on the
        prefilled cache) with the model `generate` chose."""
        model, packs, own_loop = self._drawing
        cache = self._prefilled(model, encoded)
        if not own_loop:
            return self.generated_on(model, sampling, pad_id, encoded, cache.get("past_key_values"))
        drawn = decode(model, encoded["input_ids"], encoded["attention_mask"], sampling, pad_id,
                       cache.get("past_key_values"), preallocate_cache=self.preallocate_cache,
                       logprobs=self.with_logprobs, fast_steps=self.fast_steps, weight_packs=packs)
        return drawn if self.with_logprobs else (drawn, None)

    def generated_on(self, model, sampling: Sampling, pad_id: int, encoded, cache) -> tuple[torch.Tensor, None]:
        """`generated` (the reference's `model.generate` call) continuing from a prefilled past_key_values: the cache
        goes in with the batch's other model inputs."""
        inputs = encoded if cache is None else {**encoded, "past_key_values": cache}
        return self.generated(model, sampling, pad_id, inputs)

    def _prefilled(self, model, encoded) -> dict:
        """`past_key_values` holding all but the last prompt token (the decoding loop or generate then feeds the last
        token and decodes): the batch's common prompt start encoded once and each distinct prompt's rest once
        (share_prompt_prefix, when that start has MIN_SHARED_PREFIX tokens), else each distinct prompt once;
        empty when neither saves anything."""
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        if not self.speed.share_prompt_prefill or ids.shape[1] < 2:
            return {}
        groups = distinct_prompts(ids, mask)
        if self.speed.share_prompt_prefix:
            prefix = common_prefix_length(ids[:, :-1], mask[:, :-1])
            if prefix >= MIN_SHARED_PREFIX:
                return {"past_key_values": shared_prefix_prefill(model, ids[:, :-1], mask[:, :-1], groups, prefix)}
        if groups is None:
            return {}
        cache, _ = shared_prompt_pass(model, ids[:, :-1], mask[:, :-1], groups)
        return {"past_key_values": cache}
