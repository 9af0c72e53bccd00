"""The rollout-engine factory: `config.rollout.engine` -> a sampler with `generate(...) -> Rollout`.

It sits above the engine modules (`fspo_lite.rollout.transformers_rollout`, `fspo_lite.rollout.vllm_rollout`, `fspo_lite.rollout.vllm_server`), so neither
imports the other's builder. `vllm` itself is imported only for rollout.engine=vllm (the `gpu` extra on a CUDA
GPU, `make setup-vllm` for vLLM's CPU build).
"""

from __future__ import annotations

from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.rollout.vllm_rollout import VLLMRollout, check_vllm_engine
from fspo_lite.rollout.vllm_server import VLLMServerRollout

ROLLOUT_ENGINES = ("transformers", "vllm", "vllm-server")


def check_rollout_engine(config) -> None:
    """Before any model loads: a one-line error for an engine that cannot run with this config here (an unknown
    name, a server engine without a URL, vLLM without a platform or asked for what its platform lacks)."""
    engine = config.rollout.engine
    if engine not in ROLLOUT_ENGINES:
        raise ValueError(f"unknown rollout.engine {engine!r}; choose one of {', '.join(ROLLOUT_ENGINES)}")
    if engine == "vllm-server" and not config.rollout.vllm_server_url:
        raise ValueError("rollout.engine=vllm-server needs rollout.vllm_server_url (e.g. http://localhost:8000)")
    check_vllm_engine(config)


def build_rollout_engine(model, tokenizer, config, dist):
    """The sampler named by config.rollout.engine, sharing `generate(prompts, num_samples, do_sample,
    max_new_tokens) -> Rollout`; `dist` (a `Distributed`) gives the rank and device. The `vllm`
    package is imported only when the colocated vLLM engine is built."""
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
