"""Rollout engines: prompts in, sampled completions (token ids and text) out.

`TransformersRollout` is the reference engine: it batches prompts x samples with left padding, and draws each
batch's tokens with `fspo_lite.rollout.decoding.sample` (ordinary forward calls of the model on its KV cache, every
row until the last one ends, the tokens `model.generate` draws; `model.generate` itself where that loop would not
sample what `generate` does). The fast engine with the same tokens (`fspo_lite.speed.rollout`) overrides what it
needs in its own package; `fspo_lite.speed` picks one of them (speed.mode). The vLLM engines (GPU) live in
`fspo_lite.rollout.vllm_rollout` behind the same `generate` signature; `fspo_lite.rollout.engines` builds the one the
config names.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fspo_lite.config import RolloutConfig
from fspo_lite.progress import progress_bar
from fspo_lite.rollout.decoding import plain_sampling, sample
from fspo_lite.rollout.sampling import Engine, Sampling


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
    max_new_tokens, generation_batch_size, draw, use_sampler_logprobs)."""

    def __init__(self, model, tokenizer, rollout: RolloutConfig, max_prompt_tokens: int = 512, progress: bool = False,
                 generate_kwargs: dict | None = None, plain_model: bool = True):
        """plain_model=False (FSDP-sharded weights, Unsloth, which patch generation): `model.generate` runs as is."""
        super().__init__(model, tokenizer, rollout, max_prompt_tokens)
        self.progress = progress
        self.generate_kwargs = generate_kwargs or {}
        """Extra `model.generate` arguments (synced_gpus=True when weights are sharded over ranks)."""
        self.plain_model = plain_model
        self.with_logprobs = rollout.use_sampler_logprobs
        """Return each drawn token's log-prob (Rollout.sampling_logprobs): only the decoding loop gives them."""
        if self.with_logprobs and not plain_model:
            raise ValueError("rollout.use_sampler_logprobs with the transformers engine needs its decoding loop: "
                             "plain weights (no FSDP, no Unsloth)")

    @property
    def generation_batch_size(self) -> int:
        """Sequences generated at once (rollout.generation_batch_size)."""
        return self.rollout.generation_batch_size

    @torch.no_grad()
    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None) -> Rollout:
        """Sample `num_samples` completions per prompt (greedy when do_sample=False)."""
        tokenizer, model = self.tokenizer, self.model
        device = next(model.parameters()).device
        expanded = [p for p in prompts for _ in range(num_samples)]
        eos = eos_ids(tokenizer, model)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        was_training = model.training
        model.eval()
        chunks = []
        batches = range(0, len(expanded), self.generation_batch_size)
        sampling = self.sampling(eos, do_sample, max_new_tokens, self.generate_kwargs.get("min_new_tokens") or 0)
        for start in progress_bar(batches, desc="generate", disable=not self.progress, leave=False):
            batch = expanded[start : start + self.generation_batch_size]
            encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False,
                                truncation=True, max_length=self.max_prompt_tokens, padding_side="left").to(device)
            new_tokens, new_logprobs = self.new_tokens(model, encoded, sampling, pad_id)
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

    def own_loop(self, model) -> bool:
        """Whether the decoding loop samples what `generate` would: plain weights, no generate arguments but
        min_new_tokens, and a generation config that changes the logits by temperature and top-p only."""
        return (self.plain_model and set(self.generate_kwargs) <= {"min_new_tokens"}
                and plain_sampling(getattr(model, "generation_config", None)))

    def new_tokens(self, model, encoded, sampling: Sampling, pad_id: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One tokenized batch's (new tokens, their log-probs or None): the decoding loop `sample` where it samples
        what `generate` would (`own_loop`), else `model.generate`."""
        if not self.own_loop(model):
            return self.generated(model, sampling, pad_id, encoded)
        drawn = sample(model, encoded["input_ids"], encoded["attention_mask"], sampling, pad_id,
                       logprobs=self.with_logprobs)
        return drawn if self.with_logprobs else (drawn, None)

    def generated(self, model, sampling: Sampling, pad_id: int, encoded) -> tuple[torch.Tensor, None]:
        """A batch's new tokens from `model.generate`; `encoded`: the model inputs it is called with (the tokenized
        batch)."""
        if self.with_logprobs:
            raise ValueError("rollout.use_sampler_logprobs: the transformers engine returns log-probs from its "
                             "decoding loop only, which these generate arguments or this generation config do not "
                             f"allow ({sorted(self.generate_kwargs)})")
        drawn = dict(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0) \
            if sampling.do_sample else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        output = model.generate(**encoded, max_new_tokens=sampling.max_new_tokens, eos_token_id=list(sampling.eos_ids),
                                pad_token_id=pad_id, use_cache=True, **drawn, **self.generate_kwargs)
        return output[:, encoded["input_ids"].shape[1]:], None


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
