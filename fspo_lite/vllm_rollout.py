"""vLLM rollout engines (GPU): the same `generate(...) -> Rollout` as `TransformersRollout`.

- `VLLMRollout` (rollout.engine=vllm): a `vllm.LLM` on the training GPU. The base weights are
  loaded once; after every update the trainer's LoRA adapter is saved to a fresh folder and
  passed with the request as a `LoRARequest` under a new integer id, so vLLM loads the new
  adapter instead of serving a cached old one, and nothing is merged into the base weights.
  With the Unsloth backend it samples from Unsloth's own vLLM engine (`model.vllm_engine`).
- `VLLMServerRollout` (rollout.engine=vllm-server): an OpenAI-compatible vLLM server. Each
  adapter version is registered through `/v1/load_lora_adapter` and used as the request's model.

Both send token ids (the trainer's tokenization and prompt truncation) and read token ids
back, so the trainer scores exactly the tokens that were sampled. `vllm` is imported only
inside `VLLMRollout`; the conversion helpers here are plain Python and tested on CPU.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import torch

from .models import TINY, compute_dtype, model_source
from .rollout import Rollout, eos_ids

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


def sampling_arguments(num_samples: int, do_sample: bool, temperature: float, top_p: float, max_tokens: int,
                       stop_token_ids: list[int], with_logprobs: bool) -> dict:
    """Keyword arguments of `vllm.SamplingParams` for one request per prompt.

    Sampling asks for n=num_samples per request; greedy decoding gives one completion per request
    (the caller repeats the prompt), since n greedy samples of one prompt are identical anyway.
    logprobs=0 returns the log-prob of the sampled token only.
    """
    arguments = dict(n=num_samples if do_sample else 1, max_tokens=max_tokens, stop_token_ids=list(stop_token_ids),
                     temperature=temperature if do_sample else 0.0, top_p=top_p if do_sample else 1.0,
                     skip_special_tokens=True)
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


class AdapterVersions:
    """Saves the policy's current LoRA adapter as a new version: folder <root>/v<id>, id 1, 2, 3...

    A new id for every version is what makes vLLM load the new weights: it caches adapters by
    id. Only the newest folder is kept on disk.
    """

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="fspo-lite-adapters-"))
        self.version = 0

    def save(self, model) -> tuple[str, int, str]:
        """(name, id, path) of the adapter as it is now."""
        previous = self.root / f"v{self.version}"
        self.version += 1
        path = self.root / f"v{self.version}"
        model.save_pretrained(str(path), safe_serialization=True)
        if previous.exists():
            shutil.rmtree(previous)
        return f"policy-v{self.version}", self.version, str(path)


def _require_lora(config, engine: str) -> None:
    if not config.model.lora:
        raise ValueError(
            f"rollout.engine={engine} sends the policy to vLLM as a LoRA adapter on every step; full fine-tuning "
            "(model.lora=false) would need a weight sync into vLLM, which fspo-lite does not do. "
            "Use rollout.engine=transformers for full fine-tuning."
        )
    if config.rollout.use_sampler_logprobs and config.train.ppo_epochs != 1:
        raise ValueError("rollout.use_sampler_logprobs is valid only with train.ppo_epochs=1 (see docs/gpu.md)")


class VLLMRollout:
    """A colocated `vllm.LLM` (or Unsloth's) with the trainer's adapter passed per request."""

    def __init__(self, policy, tokenizer, llm, max_new_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 max_prompt_tokens: int = 512, with_logprobs: bool = False, sleep_between_rollouts: bool = False,
                 adapter_root: str | Path | None = None, device=None):
        self.policy = policy
        self.tokenizer = tokenizer
        self.llm = llm
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.max_prompt_tokens = max_prompt_tokens
        self.with_logprobs = with_logprobs
        self.sleep_between_rollouts = sleep_between_rollouts
        self.asleep = False
        self.adapters = AdapterVersions(adapter_root)
        self.device = device
        self.eos = eos_ids(tokenizer, policy)

    @classmethod
    def from_config(cls, policy, tokenizer, config, dist):
        _require_lora(config, "vllm")
        if config.model.backend == "unsloth":
            llm = getattr(policy, "vllm_engine", None)
            if llm is None:
                raise RuntimeError("the Unsloth model has no vLLM engine; it is started with fast_inference=True, "
                                   "which the trainer asks for when rollout.engine=vllm")
        else:
            llm = build_llm(config, dist.rank, dist.world_size)
        root = Path(config.train.output_dir) / "rollout_adapters" / f"rank{dist.rank}"
        return cls(policy, tokenizer, llm, config.rollout.max_new_tokens, config.rollout.temperature,
                   config.rollout.top_p, config.data.max_prompt_tokens, config.rollout.use_sampler_logprobs,
                   config.rollout.vllm_enable_sleep_mode, root, dist.device)

    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None) -> Rollout:
        from vllm import SamplingParams
        from vllm.lora.request import LoRARequest

        ids = prompt_token_ids(self.tokenizer, prompts, self.max_prompt_tokens)
        arguments = sampling_arguments(num_samples, do_sample, self.temperature, self.top_p,
                                       max_new_tokens or self.max_new_tokens, self.eos, self.with_logprobs)
        requests = ids if do_sample else [p for p in ids for _ in range(num_samples)]
        name, adapter_id, path = self.adapters.save(self.policy)
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in requests], SamplingParams(**arguments),
                                    lora_request=LoRARequest(name, adapter_id, path), use_tqdm=False)
        if self.sleep_between_rollouts:
            self.llm.sleep(level=1)  # base weights to CPU RAM, KV cache freed: the update gets the memory
            self.asleep = True
        completions, logprobs = completions_from_request_outputs(outputs, self.with_logprobs)
        return rollout_from_token_ids(ids, completions, logprobs, num_samples, self.tokenizer, self.eos, self.device)


def build_llm(config, rank: int = 0, world_size: int = 1):
    """A `vllm.LLM` for the policy's base model, with LoRA slots, memory share and sleep mode from the config."""
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("rollout.engine=vllm needs the 'vllm' package and a CUDA GPU: pip install 'fspo-lite[gpu]'")
    if not torch.cuda.is_available():
        raise RuntimeError("rollout.engine=vllm needs a CUDA GPU; on a CPU use rollout.engine=transformers")
    from vllm import LLM

    if config.model.name == TINY:
        raise RuntimeError("the tiny test model has no files for vLLM to load; use a hub id or a local folder")
    dtype = compute_dtype(torch.cuda.is_bf16_supported()) if config.model.load_in_4bit else config.model.dtype
    arguments = dict(
        model=str(model_source(config.model.name)), dtype=str(dtype).replace("torch.", ""),
        gpu_memory_utilization=config.rollout.vllm_gpu_memory_utilization,
        enable_sleep_mode=config.rollout.vllm_enable_sleep_mode, enable_lora=True, max_loras=1,
        max_lora_rank=vllm_lora_rank(config.rollout.vllm_max_lora_rank or config.model.lora_r),
        max_model_len=config.data.max_prompt_tokens + config.rollout.max_new_tokens,
        seed=config.train.seed + rank, trust_remote_code=config.model.trust_remote_code,
    )
    if config.model.load_in_4bit:
        arguments["quantization"] = "bitsandbytes"
    if config.rollout.use_sampler_logprobs:
        arguments["logprobs_mode"] = "processed_logprobs"  # after temperature, as the trainer computes them
    if world_size > 1:
        arguments["distributed_executor_backend"] = "external_launcher"  # one engine per training rank
    return LLM(**arguments)


def post_json(url: str, payload: dict, timeout: float) -> dict:
    """POST a JSON body and return the JSON answer; HTTP errors carry the server's message."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read().decode()
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"{url} answered HTTP {error.code}: {error.read().decode()[:500]}") from None
    except urllib.error.URLError as error:
        raise RuntimeError(f"cannot reach the vLLM server at {url}: {error.reason}") from None
    return json.loads(body) if body.strip() else {}


class VLLMServerRollout:
    """Sampling from an OpenAI-compatible vLLM server, the current adapter registered per step.

    The server must run with --enable-lora (and --max-lora-rank >= model.lora_r) and the
    environment variable VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and must be able to read the
    adapter folders this process writes (under train.output_dir).
    """

    def __init__(self, policy, tokenizer, url: str, max_new_tokens: int = 256, temperature: float = 1.0,
                 top_p: float = 1.0, max_prompt_tokens: int = 512, with_logprobs: bool = False,
                 adapter_root: str | Path | None = None, timeout: float = 600.0, device=None):
        self.policy = policy
        self.tokenizer = tokenizer
        self.url = url.rstrip("/")
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.max_prompt_tokens = max_prompt_tokens
        self.with_logprobs = with_logprobs
        self.adapters = AdapterVersions(adapter_root)
        self.timeout = timeout
        self.device = device
        self.eos = eos_ids(tokenizer, policy)
        self.served_adapter: str | None = None

    @classmethod
    def from_config(cls, policy, tokenizer, config, dist):
        _require_lora(config, "vllm-server")
        if not config.rollout.vllm_server_url:
            raise ValueError("rollout.engine=vllm-server needs rollout.vllm_server_url (e.g. http://localhost:8000)")
        root = Path(config.train.output_dir).resolve() / "rollout_adapters" / f"rank{dist.rank}"
        return cls(policy, tokenizer, config.rollout.vllm_server_url, config.rollout.max_new_tokens,
                   config.rollout.temperature, config.rollout.top_p, config.data.max_prompt_tokens,
                   config.rollout.use_sampler_logprobs, root, config.rollout.vllm_server_timeout, dist.device)

    def _publish_adapter(self) -> str:
        """Save the adapter as a new version, register it with the server, drop the previous one."""
        name, _, path = self.adapters.save(self.policy)
        post_json(f"{self.url}/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, self.timeout)
        if self.served_adapter is not None:
            post_json(f"{self.url}/v1/unload_lora_adapter", {"lora_name": self.served_adapter}, self.timeout)
        self.served_adapter = name
        return name

    def completion_request(self, model: str, ids: list[list[int]], num_samples: int, do_sample: bool,
                           max_new_tokens: int) -> dict:
        """The /v1/completions body: token-id prompts, and token ids back (vLLM's return_token_ids)."""
        arguments = sampling_arguments(num_samples, do_sample, self.temperature, self.top_p, max_new_tokens,
                                       self.eos, self.with_logprobs)
        return {"model": model, "prompt": ids, "return_token_ids": True, **arguments}

    def generate(self, prompts: list[str], num_samples: int = 1, do_sample: bool = True,
                 max_new_tokens: int | None = None) -> Rollout:
        ids = prompt_token_ids(self.tokenizer, prompts, self.max_prompt_tokens)
        requests = ids if do_sample else [p for p in ids for _ in range(num_samples)]
        body = self.completion_request(self._publish_adapter(), requests, num_samples, do_sample,
                                       max_new_tokens or self.max_new_tokens)
        answer = post_json(f"{self.url}/v1/completions", body, self.timeout)
        choices = sorted(answer["choices"], key=lambda choice: choice["index"])
        if any("token_ids" not in choice for choice in choices):
            raise RuntimeError("the server returned no token ids; fspo-lite needs a vLLM server that supports "
                               "return_token_ids (vLLM 0.10.2 or newer)")
        completions = [list(choice["token_ids"]) for choice in choices]
        logprobs = [choice["logprobs"]["token_logprobs"] for choice in choices] if self.with_logprobs else None
        return rollout_from_token_ids(ids, completions, logprobs, num_samples, self.tokenizer, self.eos, self.device)
