"""The rollout-engine factory: `config.rollout.engine` -> a sampler with `generate(...) -> Rollout`.

It sits above both engine modules (`fspo_lite.rollout`, `fspo_lite.vllm_rollout`), so neither
imports the other's builder. `vllm` itself is imported only inside `VLLMRollout` (GPU extra).
"""

from __future__ import annotations

from .rollout import TransformersRollout
from .vllm_rollout import VLLMRollout, VLLMServerRollout

ROLLOUT_ENGINES = ("transformers", "vllm", "vllm-server")


def build_rollout_engine(model, tokenizer, config, dist):
    """The sampler named by config.rollout.engine, sharing `generate(prompts, num_samples, do_sample,
    max_new_tokens) -> Rollout`; `dist` (a `Distributed`) gives the rank and device. The `vllm`
    package is imported only when a vLLM engine is built (GPU extra)."""
    engine = config.rollout.engine
    if engine == "transformers":
        if config.rollout.use_sampler_logprobs:
            raise ValueError("rollout.use_sampler_logprobs needs a vLLM engine (transformers returns no log-probs)")
        # with sharded weights every rank must run the same forward passes (the shared prefill is one more,
        # depending on the rank's own prompts) and the weights are shards (nothing to merge into); Unsloth
        # patches generation, its cache handling and its LoRA layers in ways neither has been tried against
        return TransformersRollout.from_config(model, tokenizer, config.rollout, config.data.max_prompt_tokens,
                                               generate_kwargs=dist.generation_kwargs(),
                                               plain_model=not dist.shards_weights and config.model.backend != "unsloth")
    if engine in ("vllm", "vllm-server"):
        cls = VLLMRollout if engine == "vllm" else VLLMServerRollout
        return cls.from_config(model, tokenizer, config, dist)
    raise ValueError(f"unknown rollout.engine {engine!r}; choose one of {', '.join(ROLLOUT_ENGINES)}")
