"""Rollout engines: prompts in, sampled completions (token ids and text) out.

`TransformersRollout` batches prompts x samples with left padding and the KV cache, encodes each
distinct prompt once for its samples (`fspo_lite.models.prompt_cache`), decodes with
`fspo_lite.rollout.decoding.decode` (ended rows leave the forward pass; `model.generate` where that is off),
and stops as soon as every sequence has produced EOS. The vLLM engines
(GPU) live in `fspo_lite.rollout.vllm_rollout` behind the same `generate` signature; `fspo_lite.rollout.engines`
builds the one the config names.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from fspo_lite.config import RolloutConfig
from fspo_lite.models.lora_merge import merged_lora_weights
from fspo_lite.models.prompt_cache import (MIN_SHARED_PREFIX, common_prefix_length, distinct_prompts,
                                           shared_prefix_prefill, shared_prompt_pass)
from fspo_lite.rollout.decoding import decode, plain_sampling
from fspo_lite.rollout.llama_step import packing_applies, wants_packed_weights, weight_packs_for
from fspo_lite.rollout.sampling import Engine


@dataclass
class Rollout:
    """A batch of sampled responses; row i answers prompt i // num_samples."""

    prompt_ids: torch.Tensor
    """(N, P) left-padded prompt tokens."""
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    """(N, C) right-padded completion tokens."""
    completion_mask: torch.Tensor
    """(N, C) 1 on sampled tokens up to and including the first EOS."""
    texts: list[str]
    num_samples: int
    sampling_logprobs: torch.Tensor | None = None
    """(N, C) log-probs of the sampled tokens under the sampler (rollout.use_sampler_logprobs), 0 on padding."""

    @property
    def completion_lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)


def completion_mask_from_ids(completion_ids: torch.Tensor, eos_token_ids: list[int]) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_token_ids, device=completion_ids.device))
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0
    return (~seen_before).long()


def _pad_to(tensor: torch.Tensor, width: int, value: int, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing <= 0:
        return tensor
    pad = torch.full((tensor.shape[0], missing), value, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([pad, tensor] if left else [tensor, pad], dim=1)


def eos_ids(tokenizer, model=None) -> list[int]:
    """All token ids that end a response (tokenizer EOS plus the generation config's)."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(configured)
    return sorted(i for i in ids if i is not None)


class TransformersRollout(Engine):
    """Sampling with the model on whatever device it is on, as the rollout section says (temperature, top_p,
    max_new_tokens, generation_batch_size and the transformers-engine switches)."""

    def __init__(self, model, tokenizer, rollout: RolloutConfig, max_prompt_tokens: int = 512, progress: bool = False,
                 generate_kwargs: dict | None = None, plain_model: bool = True, preallocate_cache: bool = True,
                 fast_steps: bool = True):
        """plain_model=False (FSDP-sharded weights, Unsloth) turns the shared prefill, the LoRA merge and the
        row-dropping decoder off: `model.generate` then runs as is."""
        if not plain_model:
            rollout = dataclasses.replace(rollout, share_prompt_prefill=False, merge_lora_for_generation=False,
                                          share_prompt_prefix=False, drop_ended_rows=False)
        super().__init__(model, tokenizer, rollout, max_prompt_tokens)
        self.progress = progress
        self.generate_kwargs = generate_kwargs or {}
        """Extra `model.generate` arguments (synced_gpus=True when weights are sharded over ranks)."""
        self.preallocate_cache = preallocate_cache
        """With rollout.drop_ended_rows: `decode` writes the KV cache in place instead of concatenating (same
        tokens)."""
        self.fast_steps = fast_steps
        """With the preallocated cache: `decode` runs its steps after the first through
        `fspo_lite.rollout.llama_step` where the model allows it (the same logits, without transformers' Python)."""
        self.with_logprobs = rollout.use_sampler_logprobs
        """Return each drawn token's log-prob (Rollout.sampling_logprobs): only `decode` gives them."""
        if self.with_logprobs and not (rollout.drop_ended_rows and plain_model):
            raise ValueError("rollout.use_sampler_logprobs with the transformers engine needs its decoding loop: "
                             "rollout.drop_ended_rows=true, plain weights (no FSDP, no Unsloth)")
        self._copy = None
        """The rollout.sampler_dtype copy of the policy, made at the first rollout."""

    @property
    def generation_batch_size(self) -> int:
        """Sequences generated at once (rollout.generation_batch_size)."""
        return self.rollout.generation_batch_size

    def sampling_model(self):
        """The model that draws the tokens: the policy, or (rollout.sampler_dtype) its copy in that dtype with the
        policy's trainable weights (the adapter, or every weight in full fine-tuning) copied in now."""
        if self.rollout.sampler_dtype == "policy":
            return self.model
        if self._copy is None:
            self._copy = copy.deepcopy(self.model).to(getattr(torch, self.rollout.sampler_dtype)).requires_grad_(False)
        with torch.no_grad():
            for (name, mine), (theirs_name, theirs) in zip(self._copy.named_parameters(), self.model.named_parameters()):
                if name != theirs_name:
                    raise RuntimeError(f"the sampler copy lost step with the policy at {name} / {theirs_name}")
                if theirs.requires_grad:
                    mine.copy_(theirs)
        return self._copy

    def close(self) -> None:
        """Drop the rollout.sampler_dtype copy of the policy (a second set of weights)."""
        self._copy = None

    @torch.no_grad()
    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None) -> Rollout:
        """Sample `num_samples` completions per prompt (greedy when do_sample=False)."""
        tokenizer, model = self.tokenizer, self.sampling_model()
        device = next(model.parameters()).device
        expanded = [p for p in prompts for _ in range(num_samples)]
        eos = eos_ids(tokenizer, model)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        was_training = model.training
        model.eval()
        chunks = []
        batches = range(0, len(expanded), self.generation_batch_size)
        sampling = self.sampling(eos, do_sample, max_new_tokens, self.generate_kwargs.get("min_new_tokens") or 0)
        own_loop = self.rollout.drop_ended_rows and set(self.generate_kwargs) <= {"min_new_tokens"} and plain_sampling(
            getattr(model, "generation_config", None))
        # packed weights: the adapter stays on and is not merged into copies (the packs hold the base weights)
        packed = (own_loop and self.fast_steps and self.preallocate_cache
                  and wants_packed_weights(self.rollout.packed_weights))
        packs = weight_packs_for(model) if packed and packing_applies(model) else None
        merge = self.rollout.merge_lora_for_generation and packs is None
        with merged_lora_weights(model) if merge else contextlib.nullcontext():
            for start in tqdm(batches, desc="generate", disable=not self.progress, leave=False):
                batch = expanded[start : start + self.generation_batch_size]
                encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False,
                                    truncation=True, max_length=self.max_prompt_tokens, padding_side="left").to(device)
                if own_loop:
                    drawn = decode(model, encoded["input_ids"], encoded["attention_mask"], sampling, pad_id,
                                   self._prefilled(model, encoded).get("past_key_values"),
                                   preallocate_cache=self.preallocate_cache, logprobs=self.with_logprobs,
                                   fast_steps=self.fast_steps, weight_packs=packs)
                    new_tokens, new_logprobs = drawn if self.with_logprobs else (drawn, None)
                elif self.with_logprobs:
                    raise ValueError("rollout.use_sampler_logprobs: the transformers engine returns log-probs from "
                                     "its decoding loop only, which these generate arguments or this generation "
                                     f"config do not allow ({sorted(self.generate_kwargs)})")
                else:
                    drawn = dict(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0) \
                        if do_sample else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
                    output = model.generate(**encoded, max_new_tokens=sampling.max_new_tokens, eos_token_id=eos,
                                            pad_token_id=pad_id, use_cache=True, **drawn, **self._prefilled(model, encoded),
                                            **self.generate_kwargs)
                    new_tokens, new_logprobs = output[:, encoded["input_ids"].shape[1]:], None
                chunks.append((encoded["input_ids"], encoded["attention_mask"], new_tokens, new_logprobs))
        model.train(was_training)
        prompt_width = max(c[0].shape[1] for c in chunks)
        completion_width = max(max(c[2].shape[1] for c in chunks), 1)
        prompt_ids = torch.cat([_pad_to(c[0], prompt_width, pad_id, left=True) for c in chunks])
        prompt_mask = torch.cat([_pad_to(c[1], prompt_width, 0, left=True) for c in chunks])
        completion_ids = torch.cat([_pad_to(c[2], completion_width, pad_id, left=False) for c in chunks])
        completion_mask = completion_mask_from_ids(completion_ids, eos)
        completion_ids = completion_ids.masked_fill(completion_mask == 0, pad_id)
        texts = tokenizer.batch_decode(
            [ids[: int(n)] for ids, n in zip(completion_ids, completion_mask.sum(1))],
            skip_special_tokens=True, clean_up_tokenization_spaces=False,
        )
        logprobs = None
        if self.with_logprobs:
            logprobs = torch.cat([_pad_to(c[3].to(completion_ids.device), completion_width, 0.0, left=False)
                                  for c in chunks]) * completion_mask
        return Rollout(prompt_ids, prompt_mask, completion_ids, completion_mask, texts, num_samples, logprobs)

    def _prefilled(self, model, encoded) -> dict:
        """`past_key_values` holding all but the last prompt token (generate then feeds the last token and
        decodes): the batch's common prompt start encoded once and each distinct prompt's rest once
        (share_prompt_prefix, when that start has MIN_SHARED_PREFIX tokens), else each distinct prompt once;
        empty when neither saves anything."""
        ids, mask = encoded["input_ids"], encoded["attention_mask"]
        if not self.rollout.share_prompt_prefill or ids.shape[1] < 2:
            return {}
        groups = distinct_prompts(ids, mask)
        if self.rollout.share_prompt_prefix:
            prefix = common_prefix_length(ids[:, :-1], mask[:, :-1])
            if prefix >= MIN_SHARED_PREFIX:
                return {"past_key_values": shared_prefix_prefill(model, ids[:, :-1], mask[:, :-1], groups, prefix)}
        if groups is None:
            return {}
        cache, _ = shared_prompt_pass(model, ids[:, :-1], mask[:, :-1], groups)
        return {"past_key_values": cache}


def rollout_from_texts(tokenizer, completions: list[str], num_samples: int | None = None) -> Rollout:
    """A Rollout holding given completion texts (tokenized, EOS appended), for scoring stored responses.

    The prompt is a one-token placeholder: such a rollout feeds the reward and advantage functions
    (the playground, tests), not log-probability computations.
    """
    rows = [tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for text in completions]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(map(len, rows), default=1)
    completion_ids = torch.tensor([row + [pad_id] * (width - len(row)) for row in rows], dtype=torch.long)
    completion_mask = completion_mask_from_ids(completion_ids, [tokenizer.eos_token_id])
    prompt = torch.full((len(rows), 1), pad_id, dtype=torch.long)
    return Rollout(prompt, torch.ones_like(prompt), completion_ids, completion_mask, list(completions),
                   num_samples or len(rows))
