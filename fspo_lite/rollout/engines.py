"""The rollout-engine factory: the rollout section's `engine` -> a sampler with `generate(...) -> Rollout`.

It sits above the engine modules (`fspo_lite.rollout.transformers_rollout`, `fspo_lite.rollout.vllm_rollout`,
`fspo_lite.rollout.vllm_server`, `fspo_lite.rollout.server_sync` for the server engine under train.fsdp), which take
sections and records (`fspo_lite.rollout.sampling.Engine`), never the whole config. `vllm` itself is imported only for rollout.engine=vllm (the `gpu` extra on a CUDA GPU,
`make setup-vllm` for vLLM's CPU build).
"""

from __future__ import annotations

from pathlib import Path

from fspo_lite.config import CHOICES, ModelConfig, RolloutConfig, TrainConfig
from fspo_lite.models.cuda_stack import check_cuda_stack
from fspo_lite.rollout.server_sync import ShardedServerRollout
from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.rollout.vllm_rollout import VLLMRollout, build_llm, check_vllm_engine, require_lora, unsloth_llm
from fspo_lite.rollout.vllm_server import VLLMServerRollout, require_server_url

ROLLOUT_ENGINES = CHOICES["rollout.engine"]
"""The engines (rollout.engine): the config's words, read from its one table."""


def check_rollout_engine(rollout: RolloutConfig, model_config: ModelConfig, train: TrainConfig) -> None:
    """Before any model loads: a one-line error for an engine that cannot run with these sections here (an unknown
    name, a server engine without a URL, a CUDA stack that cannot run the run's parts, vLLM without a platform or
    asked for what its platform lacks)."""
    engine = rollout.engine
    if engine not in ROLLOUT_ENGINES:
        raise ValueError(f"unknown rollout.engine {engine!r}; choose one of {', '.join(ROLLOUT_ENGINES)}")
    if engine == "vllm-server":
        require_server_url(rollout)
    # the driver, torch's, vLLM's and bitsandbytes' CUDA builds and the GPU: a mismatch fails here, not in a load
    check_cuda_stack(uses_vllm=engine == "vllm", uses_bnb=model_config.load_in_4bit)
    check_vllm_engine(rollout, model_config, train)


def build_rollout_engine(model, tokenizer, rollout: RolloutConfig, model_config: ModelConfig, train: TrainConfig,
                         max_prompt_tokens: int, dist, owns_model: bool = True,
                         transformers_engine=TransformersRollout):
    """The sampler named by rollout.engine, sharing `generate(prompts, num_samples, do_sample, max_new_tokens) ->
    Rollout`. It reads the rollout section, the model section (LoRA, backend, what vLLM loads), the train section
    (ppo_epochs, seed, output_dir: where the adapters for vLLM go) and data.max_prompt_tokens; `dist` (a
    `Distributed`) gives the rank and device. The `vllm` package is imported only when the colocated vLLM engine is
    built. `owns_model`: the caller loaded the model for this run, so closing the engine may also shut down the vLLM
    engine Unsloth started beside it. `transformers_engine`: the class (or factory with its arguments) of the
    transformers engine; `fspo_lite.speed.build_rollout_engine` passes the fast one."""
    engine = rollout.engine
    if engine == "transformers":
        # with sharded weights every rank must run the same forward passes (the shared prefill is one more,
        # depending on the rank's own prompts) and the weights are shards (nothing to merge into); Unsloth
        # patches generation, its cache handling and its LoRA layers in ways neither has been tried against
        return transformers_engine(model, tokenizer, rollout, max_prompt_tokens,
                                   generate_kwargs=dist.generation_kwargs(),
                                   plain_model=not dist.shards_weights and model_config.backend != "unsloth")
    if engine == "vllm":
        require_lora(rollout, model_config, train, "vllm")
        if model_config.backend == "unsloth":
            llm = unsloth_llm(model)
        else:
            llm = build_llm(rollout, model_config, train, max_prompt_tokens, dist.rank, dist.world_size)
        root = Path(train.output_dir) / "rollout_adapters" / f"rank{dist.rank}"
        return VLLMRollout(model, tokenizer, llm, rollout, max_prompt_tokens, root, dist.device,
                           owns_llm=owns_model or model_config.backend != "unsloth")
    if engine == "vllm-server":
        require_lora(rollout, model_config, train, "vllm-server")
        require_server_url(rollout)
        if dist.shards_weights:  # rank 0 publishes the gathered adapter, every rank samples (server_sync)
            engine = ShardedServerRollout(model, tokenizer, rollout, max_prompt_tokens, train.output_dir, dist)
        else:
            root = Path(train.output_dir).resolve() / "rollout_adapters" / f"rank{dist.rank}"
            engine = VLLMServerRollout(model, tokenizer, rollout, max_prompt_tokens, root, dist.device)
        engine.probe_logprobs_mode()  # a server without --logprobs-mode processed_logprobs refused before any step
        return engine
    raise ValueError(f"unknown rollout.engine {engine!r}; choose one of {', '.join(ROLLOUT_ENGINES)}")
