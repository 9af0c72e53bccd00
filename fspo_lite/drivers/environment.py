"""`fspo-lite env`: the installation, the device and the dtype each GPU path will use, for a bug report.

Versions come from package metadata (importlib.metadata), so vllm, unsloth and bitsandbytes are never imported:
the command answers in a second even where one of them is broken; the CUDA builds are read from their files
(fspo_lite.models.cuda_stack). The dtypes come from the one rule of
fspo_lite.models.precision, so what it prints is what a run on this machine will do.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys

PACKAGES = ("torch", "transformers", "peft", "bitsandbytes", "vllm", "unsloth", "fspo-lite")
"""The distributions whose versions a GPU or CPU bug report needs, in the order they are printed."""


def package_version(name: str) -> str:
    """The installed version of a distribution, or 'not installed'."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def dtype_lines() -> list[str]:
    """What each path computes in here: on a GPU the rule's dtype for 4-bit compute, vLLM, FSDP and loss scaling;
    on a CPU float32 everywhere."""
    import torch

    from fspo_lite.models.precision import gpu_compute_dtype, needs_loss_scaling

    if not torch.cuda.is_available():
        return ["dtypes: no CUDA GPU, every path computes in float32 (model.dtype for the transformers engine)"]
    dtype = str(gpu_compute_dtype()).replace("torch.", "")
    scaling = "on" if needs_loss_scaling("float32", True, False, "cuda") else "off"
    return [f"GPU compute dtype: {dtype} (bfloat16 only where native: compute capability >= 8.0)",
            f"  4-bit compute (bitsandbytes): {dtype}, or an explicit 16-bit model.dtype",
            f"  vLLM dtype: {dtype} for a 4-bit base, else model.dtype (float32 is refused)",
            f"  FSDP mixed precision: {dtype} for float32 weights, gradients reduced in float32",
            "  transformers engine and trainer: model.dtype (float32 unless set), 4-bit bases as above",
            f"  loss scaling for 4-bit or FSDP training: {scaling} (on exactly when the trainer computes in float16)"]


def device_line() -> str:
    """'device: <GPU name, capability, native bfloat16>' or 'device: CPU <model>, N cores'."""
    import torch

    from fspo_lite.machine import machine_description
    from fspo_lite.models.precision import device_description

    if torch.cuda.is_available():
        return f"device: {device_description()}; torch CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)"
    return f"device: CPU {machine_description()}"


def environment_lines() -> list[str]:
    """Every line `fspo-lite env` prints: python, the packages, the platform, the device and the dtypes."""
    lines = [f"python: {sys.version.split()[0]} ({sys.executable})"]
    lines += [f"{name}: {package_version(name)}" for name in PACKAGES]
    lines += [f"platform: {platform.platform()}", device_line(), *cuda_stack_lines(), *dtype_lines()]
    return lines


def cuda_stack_lines() -> list[str]:
    """The driver, torch's, vLLM's and bitsandbytes' CUDA builds and the GPU's compute capability, and what of them
    cannot run here, each refusal in the one line a run would stop with (fspo_lite.models.cuda_stack)."""
    from fspo_lite.models.cuda_stack import read_cuda_stack, stack_lines

    return stack_lines(read_cuda_stack())


def cmd_env(args) -> int:
    print("\n".join(environment_lines()))
    return 0
