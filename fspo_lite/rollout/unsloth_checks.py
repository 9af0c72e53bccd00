"""What Unsloth's own vLLM engine (model.backend=unsloth with rollout.engine=vllm) cannot honour, refused before any
model loads (read from unsloth_zoo.vllm_utils.load_vllm, the function that starts it)."""

from __future__ import annotations

import os

from fspo_lite.config import ModelConfig, RolloutConfig
from fspo_lite.models.precision import gpu_compute_dtype

UNSLOTH_STANDBY = "UNSLOTH_VLLM_STANDBY"
"""The variable Unsloth reads when it starts its vLLM engine: only when it is set (not "0") does the engine have sleep
mode (unsloth_zoo.vllm_utils.load_vllm's enable_sleep_mode)."""


def unsloth_vllm_problems(rollout: RolloutConfig, model_config: ModelConfig, environ=None) -> list[str]:
    """What Unsloth's own vLLM engine (model.backend=unsloth with rollout.engine=vllm) cannot honour, one line each.

    Its loader (unsloth_zoo.vllm_utils.load_vllm) takes float16 or bfloat16 only (float32 raises
    NotImplementedError) unless the base is 4-bit; it starts vLLM without `logprobs_mode`, so the sampler's
    log-probs are vLLM's default raw ones, before temperature: as pi_old at a temperature other than 1 they would
    bias every ratio; and it enables sleep mode only when UNSLOTH_VLLM_STANDBY is set before it is imported."""
    environ = os.environ if environ is None else environ
    problems = []
    if model_config.dtype == "float32" and not model_config.load_in_4bit:
        wanted = str(gpu_compute_dtype()).replace("torch.", "")
        problems.append(f"model.backend=unsloth with rollout.engine=vllm: Unsloth's vLLM loader takes float16 or "
                        f"bfloat16 only: set model.dtype={wanted} (this GPU's compute dtype), or model.load_in_4bit=true")
    if rollout.use_sampler_logprobs and rollout.temperature != 1.0:
        problems.append(f"rollout.use_sampler_logprobs=true with model.backend=unsloth: Unsloth's vLLM engine returns "
                        f"raw log-probs (before temperature), which at rollout.temperature={rollout.temperature} are not "
                        "the policy's: set rollout.use_sampler_logprobs=false (pi_old recomputed), or rollout.temperature=1")
    if rollout.vllm_enable_sleep_mode and environ.get(UNSLOTH_STANDBY, "0") in ("", "0"):
        problems.append(f"rollout.vllm_enable_sleep_mode=true with model.backend=unsloth: Unsloth's vLLM engine has "
                        f"sleep mode only with {UNSLOTH_STANDBY}=1 set before the run starts: run with "
                        f"{UNSLOTH_STANDBY}=1, or set rollout.vllm_enable_sleep_mode=false")
    return problems
