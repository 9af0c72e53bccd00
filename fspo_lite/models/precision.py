"""The dtype the GPU paths compute in: one rule for 4-bit compute, vLLM, FSDP mixed precision and the trainer.

bfloat16 only where the GPU has it natively (compute capability 8.0 and newer, and ROCm GPUs), float16 elsewhere
(a T4 is 7.5, a V100 7.0). `torch.cuda.is_bf16_supported()` on its own is the wrong question: it also answers True
where bfloat16 is only emulated (a T4), and vLLM then refuses bfloat16 in its engine start-up, minutes into a run;
emulated bfloat16 matmuls are also far slower than float16 ones. On a CPU nothing here applies: every path keeps
float32 (4-bit bases compute in float32 there, FSDP does not cast).

Float16 has a narrow exponent: gradients below about 6e-8 flush to zero and activations above 65504 overflow.
Training in it therefore needs (a) trainable weights in float32 (peft keeps LoRA adapters in float32 over a 16-bit
base: `autocast_adapter_dtype`; FSDP keeps float32 master weights and casts a copy) and (b) loss scaling
(fspo_lite.update.loss_scale), which `needs_loss_scaling` turns on exactly when the trainer computes in float16.
"""

from __future__ import annotations

import torch

NATIVE_BF16_CAPABILITY = (8, 0)
"""The first CUDA compute capability with bfloat16 matrix units (Ampere)."""
SIXTEEN_BIT = ("bfloat16", "float16")


def dtype_for(native_bf16: bool) -> torch.dtype:
    """The rule itself: bfloat16 on a GPU with native bfloat16, float16 on one without."""
    return torch.bfloat16 if native_bf16 else torch.float16


def native_bf16() -> bool:
    """Whether this process's CUDA GPU computes in bfloat16 natively (False without a GPU). Asks torch without
    emulation where torch can be asked so (`including_emulation=False`), else compares the compute capability."""
    if not torch.cuda.is_available():
        return False
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # a torch whose is_bf16_supported has no including_emulation argument
        return tuple(torch.cuda.get_device_capability()) >= NATIVE_BF16_CAPABILITY


def gpu_compute_dtype() -> torch.dtype:
    """The dtype every GPU path computes in unless model.dtype names a 16-bit one: see the module docstring."""
    return dtype_for(native_bf16())


def four_bit_compute_dtype(model_dtype: str) -> torch.dtype:
    """The matmul dtype of a bitsandbytes 4-bit base (the trainer's copy and vLLM's): an explicit 16-bit
    model.dtype on a GPU, else the GPU rule; float32 on a CPU (bitsandbytes' CPU kernels)."""
    if not torch.cuda.is_available():
        return torch.float32
    return getattr(torch, model_dtype) if model_dtype in SIXTEEN_BIT else gpu_compute_dtype()


def vllm_dtype(model_dtype: str, load_in_4bit: bool) -> str:
    """vLLM's `dtype` argument: a 4-bit base computes in four_bit_compute_dtype, any other in model.dtype."""
    dtype = four_bit_compute_dtype(model_dtype) if load_in_4bit else getattr(torch, model_dtype)
    return str(dtype).replace("torch.", "")


def fsdp_compute_dtype(device: torch.device, weights_dtype: torch.dtype) -> torch.dtype | None:
    """The dtype FSDP computes in: the GPU rule for float32 weights on a GPU (float32 master weights, gradients
    reduced in float32), else None (the weights' own dtype; on a CPU float32)."""
    if device.type == "cuda" and weights_dtype == torch.float32:
        return gpu_compute_dtype()
    return None


def training_compute_dtype(model_dtype: str, load_in_4bit: bool, fsdp: bool, device_type: str) -> torch.dtype:
    """The dtype the trainer's matmuls run in: a 4-bit base's compute dtype, FSDP's mixed precision for float32
    weights, else model.dtype."""
    if load_in_4bit:
        return four_bit_compute_dtype(model_dtype) if device_type == "cuda" else torch.float32
    if fsdp and model_dtype == "float32":
        return fsdp_compute_dtype(torch.device(device_type), torch.float32) or torch.float32
    return getattr(torch, model_dtype)


def needs_loss_scaling(model_dtype: str, load_in_4bit: bool, fsdp: bool, device_type: str) -> bool:
    """Whether the trainer scales its loss: exactly when it computes in float16 on a GPU (a CPU run is unchanged)."""
    return device_type == "cuda" and training_compute_dtype(model_dtype, load_in_4bit, fsdp, device_type) == torch.float16


def device_description() -> str:
    """'<GPU name>, compute capability X.Y, native bfloat16 yes|no' for this process's GPU, or 'no CUDA GPU'."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    major, minor = torch.cuda.get_device_capability()
    return (f"{torch.cuda.get_device_name()}, compute capability {major}.{minor}, "
            f"native bfloat16 {'yes' if native_bf16() else 'no'}")


def vllm_bf16_problem(model_dtype: str) -> str | None:
    """One line refusing an explicit model.dtype=bfloat16 for vLLM on a GPU without native bfloat16 (vLLM stops
    there in its engine start-up, after minutes of loading), else None."""
    if model_dtype != "bfloat16" or native_bf16():
        return None
    return (f"model.dtype=bfloat16 with rollout.engine=vllm needs a GPU with native bfloat16 (compute capability "
            f">= 8.0; this one is {device_description()}): set model.dtype=float16")
