"""The speed wing: everything that exists only to make sampling and training faster on some hardware, behind two seams.

The algorithm reads without it. Its two seams have plain reference implementations below this package:

- the rollout engine, prompts and G -> `Rollout`: `fspo_lite.rollout.transformers_rollout.TransformersRollout`, a
  decoding loop of ordinary forward calls (`fspo_lite.rollout.decoding.sample`); here `FastTransformersRollout`
  (`fspo_lite.speed.rollout`) draws the same tokens with the same functions, with less work;
- the log-prob pass, model and rollout rows -> log-probs and entropies: `fspo_lite.models.logprobs.LogprobPass`, one
  forward pass and autograd; here `FastLogprobPass` (`fspo_lite.speed.logprobs`), the same numbers up to float
  rounding.

speed.mode picks them (the speed section of the config): auto (the default) builds the fast ones with the switches
the section turns on, off the reference ones everywhere. tests/test_speed_contract.py holds the contract between
the two. The factories here are all that the trainer, the evaluation and the drivers import from this package.
"""

from __future__ import annotations

import functools

from fspo_lite.config import Config, RolloutConfig, SpeedConfig
from fspo_lite.models.logprobs import LogprobPass
from fspo_lite.rollout import engines
from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.speed.allocator import keep_freed_memory
from fspo_lite.speed.logprobs import FastLogprobPass
from fspo_lite.speed.prompt_cache import shares_prompt_pass
from fspo_lite.speed.rollout import FastTransformersRollout


def transformers_engine(model, tokenizer, rollout: RolloutConfig, max_prompt_tokens: int = 512, progress: bool = False,
                        generate_kwargs: dict | None = None, plain_model: bool = True, *,
                        speed: SpeedConfig) -> TransformersRollout:
    """The transformers engine: the fast one with speed.mode=auto on plain weights, else the reference one (FSDP
    shards and Unsloth, plain_model=False, keep `model.generate` as it is)."""
    if speed.mode == "off" or not plain_model:
        return TransformersRollout(model, tokenizer, rollout, max_prompt_tokens, progress, generate_kwargs, plain_model)
    return FastTransformersRollout(model, tokenizer, rollout, speed, max_prompt_tokens, progress, generate_kwargs)


def build_rollout_engine(model, tokenizer, config: Config, dist, owns_model: bool = True):
    """`fspo_lite.rollout.engines.build_rollout_engine` for this config, its transformers engine chosen by
    `transformers_engine`."""
    return engines.build_rollout_engine(model, tokenizer, config.rollout, config.model, config.train,
                                        config.data.max_prompt_tokens, dist, owns_model,
                                        transformers_engine=functools.partial(transformers_engine, speed=config.speed))


def judge_logprob_pass(speed: SpeedConfig) -> LogprobPass:
    """The pass a judge model scores text through (the likelihood verifier, `LogprobPass.sequence_logprobs`): the
    reference with speed.mode=off, else the fast one (shared prompts encoded once)."""
    return LogprobPass() if speed.mode == "off" else FastLogprobPass()


def build_logprob_pass(config: Config, model, world_size: int) -> LogprobPass:
    """The trainer's log-prob pass for `model` (the unwrapped policy as loaded): the reference with speed.mode=off,
    else `FastLogprobPass` with the switches decided here (the shared prompt pass needs one process, no FSDP, no
    Unsloth and no gradient checkpointing; fused LoRA not with Unsloth's own kernels; grouped-query attention on a
    CPU only). On a CPU it also keeps the process's freed memory for the next pass (speed.keep_freed_memory,
    `fspo_lite.speed.allocator`; a no-op off glibc)."""
    speed = config.speed
    if speed.mode == "off":
        return LogprobPass(config.rollout.temperature)
    device_type = next(model.parameters()).device.type
    if speed.keep_freed_memory and device_type == "cpu":
        keep_freed_memory()  # process-wide
    return FastLogprobPass(config.rollout.temperature, share_prompts=shares_prompt_pass(config, world_size, model),
                           group_by_length=speed.group_by_length,
                           fused=speed.fused_lora and config.model.backend != "unsloth",
                           grouped_query=speed.grouped_query_sdpa, device_type=device_type)
