"""The CUDA stack a GPU run stands on, checked before any model loads (docs/gpu.md, "The CUDA stack, checked first").

Four things must agree, and when they do not the failure otherwise comes late, deep inside torch or vLLM, after
the model has loaded: the NVIDIA driver (the highest CUDA version it runs), torch's CUDA build, the installed
vLLM's CUDA build (and the CUDA libraries bitsandbytes ships), and the GPU's compute capability against the
architectures those builds carry kernels for.

The rules, as NVIDIA and the projects publish them:
- A build for CUDA major M runs on a driver whose CUDA version has major >= M (CUDA's minor version
  compatibility: every 12.x build runs on a 12.0+ driver, 525 and newer; a 13.x build needs 580 or newer).
- A GPU of compute capability X.Y runs a build that carries SASS for sm_XZ with Z <= Y (same major), or PTX for
  compute_AB <= X.Y (compiled on first use). CUDA 13 compiles for 7.5 and newer only (no Maxwell, Pascal or
  Volta), so no CUDA 13 build runs on a V100 (7.0).
- vLLM builds ask compute capability 7.5+ for CUDA 13 (the toolkit's floor) and 7.0+ for CUDA 12 (vLLM's docs).
  PyPI's vllm wheels that pin torch 2.11.0 (0.20.2 to 0.26.0) are CUDA 13 builds (their extensions need
  libcudart.so.13; their metadata pulls `nvidia-cutlass-dsl[cu13]`).
- bitsandbytes ships one library per CUDA version (`libbitsandbytes_cudaXYZ.so`) and loads the one for torch's.

Everything below `read_cuda_stack` is pure: a `CudaStack` of plain values in, lines out, so every combination of
driver, build and GPU is tested on a CPU (tests/test_cuda_stack.py). `read_cuda_stack` is the thin shell that reads
the real values (the driver from /proc and libcuda, the GPU from nvidia-smi or torch, the builds from package files);
it imports neither vllm nor bitsandbytes.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

DRIVER_CUDA: tuple[tuple[int, tuple[int, int]], ...] = (
    (580, (13, 0)), (575, (12, 9)), (570, (12, 8)), (560, (12, 6)), (555, (12, 5)), (550, (12, 4)), (545, (12, 3)),
    (535, (12, 2)), (530, (12, 1)), (525, (12, 0)), (520, (11, 8)), (515, (11, 7)), (510, (11, 6)), (495, (11, 5)),
    (470, (11, 4)), (465, (11, 3)), (460, (11, 2)), (455, (11, 1)), (450, (11, 0)))
"""The CUDA version each Linux driver branch reports (NVIDIA's CUDA release notes, "CUDA Toolkit and Corresponding
Driver Versions"): the first branch at or below a driver's major number wins."""

CUDA_FLOOR_CAPABILITY = {11: (3, 5), 12: (5, 0), 13: (7, 5)}
"""The lowest compute capability each CUDA major compiles for (CUDA 13 dropped Maxwell, Pascal and Volta)."""

VLLM_MIN_CAPABILITY = {12: (7, 0), 13: (7, 5)}
"""vLLM's lowest compute capability by the CUDA major of its build."""

TORCH_ARCHES = {
    (12, 6): ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    (12, 8): ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
    (13, 0): ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"),
}
"""The architectures of PyTorch's Linux builds of torch 2.11 by CUDA version, as its release notes list them. Used
for simulated stacks and the install hints only: a real check reads the installed torch's own list
(`torch.cuda.get_arch_list()`)."""

TORCH_INDEX = "https://download.pytorch.org/whl/"
TORCH_FOR_VOLTA = f"pip install torch==2.11.0 --index-url {TORCH_INDEX}cu126"
"""The install line of a torch 2.11 that still carries Volta (V100) kernels: PyTorch's CUDA 12.6 build."""
TORCH_FOR_CUDA12 = f"pip install torch==2.11.0 --index-url {TORCH_INDEX}cu128"
"""The install line of torch 2.11's CUDA 12.8 build (the one Colab ships), for drivers 525 to 579."""

GPUS = {"T4": ("Tesla T4", (7, 5)), "V100": ("Tesla V100-SXM2-16GB", (7, 0)), "A100": ("NVIDIA A100-SXM4-40GB", (8, 0)),
        "H100": ("NVIDIA H100 80GB HBM3", (9, 0))}
"""Name and compute capability of the GPUs the simulated stacks stand in (and the docs talk about)."""


class CudaStackError(RuntimeError):
    """A part of the CUDA stack cannot run here; the message names what to run instead."""


@dataclass(frozen=True)
class CudaStack:
    """What a GPU machine has, as plain values (None: not there or not read). `torch_arches` empty: unknown."""

    driver: str | None = None
    driver_cuda: tuple[int, int] | None = None
    gpu: str | None = None
    capability: tuple[int, int] | None = None
    torch_version: str = ""
    torch_cuda: tuple[int, int] | None = None
    torch_arches: tuple[str, ...] = ()
    vllm_version: str | None = None
    vllm_cuda: int | None = None
    bnb_version: str | None = None
    bnb_cudas: tuple[tuple[int, int], ...] = field(default_factory=tuple)


def parse_cuda_version(text: str | None) -> tuple[int, int] | None:
    """'12.8' -> (12, 8); None for None, '' or anything else."""
    match = re.fullmatch(r"\s*(\d{1,2})\.(\d{1,2})\s*", text or "")
    return (int(match[1]), int(match[2])) if match else None


def cuda_from_label(version: str | None) -> tuple[int, int] | None:
    """The CUDA version a local version label names: '2.11.0+cu128' -> (12, 8), '0.26.0+cu130' -> (13, 0); None
    without a cuXYZ label (PyPI's default builds carry none)."""
    match = re.search(r"\+cu(\d{2})(\d)(?:\b|$)", version or "")
    return (int(match[1]), int(match[2])) if match else None


def parse_driver_version(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version's text ('NVRM version: NVIDIA UNIX x86_64 Kernel Module
    550.54.15 ...'), or None."""
    match = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d{3}\.\d{1,3}(?:\.\d{1,3})?)\b", text or "")
    return match[1] if match else None


def driver_cuda_version(driver: str | None) -> tuple[int, int] | None:
    """The CUDA version a driver version runs up to ('550.54.15' -> (12, 4)), by DRIVER_CUDA; None if unknown."""
    match = re.match(r"(\d{3})\.", driver or "")
    if not match:
        return None
    branch = int(match[1])
    return next((cuda for first, cuda in DRIVER_CUDA if branch >= first), None)


def cuda_major_from_requirements(requirements: list[str]) -> int | None:
    """The CUDA major a distribution's requirements pull in (`nvidia-cutlass-dsl[cu13]`, `nvidia-cublas-cu12`), the
    highest named; None when none names one."""
    found = [int(m) for requirement in requirements
             for m in re.findall(r"(?:\[|-)cu(1[1-9])\b", requirement.split(";")[0])]
    return max(found) if found else None


def cuda_major_from_binary(head: bytes) -> int | None:
    """The CUDA runtime a shared library links (libcudart.so.13 -> 13), from the start of the file, where its dynamic
    string table lies; None when it names none."""
    found = {int(m) for m in re.findall(rb"libcudart\.so\.(\d{2})", head)}
    return max(found) if found else None


def bnb_cuda_versions(file_names: list[str]) -> tuple[tuple[int, int], ...]:
    """The CUDA versions bitsandbytes carries a library for, from its file names ('libbitsandbytes_cuda128.so')."""
    found = {(int(m[1]), int(m[2])) for name in file_names
             if (m := re.search(r"libbitsandbytes_cuda(\d{2})(\d)\.(?:so|dll|dylib)$", name))}
    return tuple(sorted(found))


def arches_run_on(capability: tuple[int, int], arches: tuple[str, ...] | list[str]) -> bool:
    """Whether a build carrying `arches` (sm_XY SASS, compute_XY PTX) has kernels for compute capability X.Y: SASS of
    the same major and a minor at or below, or PTX at or below (compiled on first use)."""
    for arch in arches:
        match = re.fullmatch(r"(sm|compute)_(\d+?)(\d)[a-z]?", arch)
        if not match:
            continue
        built = (int(match[2]), int(match[3]))
        if match[1] == "sm" and built[0] == capability[0] and built[1] <= capability[1]:
            return True
        if match[1] == "compute" and built <= capability:
            return True
    return False


def version_text(cuda: tuple[int, int] | int | None) -> str:
    """(12, 8) -> '12.8', 13 -> '13', None -> 'none'."""
    if cuda is None:
        return "none"
    return str(cuda) if isinstance(cuda, int) else f"{cuda[0]}.{cuda[1]}"


def capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def gpu_text(stack: CudaStack) -> str:
    """'Tesla T4 (compute capability 7.5)'."""
    name = stack.gpu or "the GPU"
    return f"{name} (compute capability {capability_text(stack.capability)})" if stack.capability else name


def torch_problem(stack: CudaStack) -> str | None:
    """One line when torch's CUDA build cannot run here (driver too old, no kernels for this GPU), naming the torch
    that does; None when it can or nothing is known."""
    if stack.torch_cuda is None:
        return None
    if stack.driver_cuda is not None and stack.driver_cuda[0] < stack.torch_cuda[0]:
        fix = TORCH_FOR_CUDA12 if stack.driver_cuda[0] == 12 else "a torch built for your driver's CUDA"
        return (f"torch {stack.torch_version} is a CUDA {version_text(stack.torch_cuda)} build and driver {stack.driver} "
                f"runs CUDA {version_text(stack.driver_cuda)} at most: {fix}, or a driver >= 580")
    if stack.capability is None:
        return None
    arches = stack.torch_arches or TORCH_ARCHES.get(stack.torch_cuda, ())
    floor = CUDA_FLOOR_CAPABILITY.get(stack.torch_cuda[0])
    lacks = (arches and not arches_run_on(stack.capability, arches)) or (floor and stack.capability < floor)
    if not lacks:
        return None
    fix = (TORCH_FOR_VOLTA if stack.capability[0] <= 7 and stack.capability < (7, 5)
           else "a torch build that lists its sm_ in torch.cuda.get_arch_list()")
    return (f"torch {stack.torch_version} (CUDA {version_text(stack.torch_cuda)}) has no kernels for {gpu_text(stack)}: "
            f"{fix}, and rollout.engine=transformers")


def vllm_problem(stack: CudaStack) -> str | None:
    """One line when the installed vLLM's CUDA build cannot run here (driver, torch's CUDA, the GPU), naming what does;
    None when it can or its build is unknown."""
    if stack.vllm_version is None or stack.vllm_cuda is None:
        return None
    build = f"vllm {stack.vllm_version} is a CUDA {stack.vllm_cuda} build"
    instead = "use rollout.engine=transformers"
    if stack.driver_cuda is not None and stack.driver_cuda[0] < stack.vllm_cuda:
        return (f"rollout.engine=vllm: {build} and driver {stack.driver} runs CUDA {version_text(stack.driver_cuda)} at "
                f"most (CUDA {stack.vllm_cuda} needs a driver >= {580 if stack.vllm_cuda >= 13 else 525}): {instead}, "
                "which needs no vLLM")
    if stack.torch_cuda is not None and stack.torch_cuda[0] != stack.vllm_cuda:
        return (f"rollout.engine=vllm: {build} beside torch {stack.torch_version} (CUDA "
                f"{version_text(stack.torch_cuda)}); their CUDA runtimes differ and vLLM fails in its start: {instead}, "
                f"or install the vllm and torch of one CUDA (pip install -c requirements/gpu-constraints.txt "
                f"-e '.[gpu]' brings both as CUDA 13 builds, on a driver >= 580)")
    low = VLLM_MIN_CAPABILITY.get(stack.vllm_cuda)
    if stack.capability is not None and low is not None and stack.capability < low:
        return (f"rollout.engine=vllm: {build}, which runs on compute capability {capability_text(low)} and newer, and "
                f"this is {gpu_text(stack)}: {instead} (model.dtype float16)")
    return None


def bnb_problem(stack: CudaStack) -> str | None:
    """One line when bitsandbytes has no library for torch's CUDA version (4-bit would fail at load); None otherwise."""
    if stack.bnb_version is None or stack.torch_cuda is None or not stack.bnb_cudas:
        return None
    if stack.torch_cuda in stack.bnb_cudas:
        return None
    carried = ", ".join(version_text(c) for c in stack.bnb_cudas)
    return (f"model.load_in_4bit=true: bitsandbytes {stack.bnb_version} carries libraries for CUDA {carried}, not for "
            f"torch's CUDA {version_text(stack.torch_cuda)}: pip install -U bitsandbytes, or model.load_in_4bit=false")


def stack_problems(stack: CudaStack, uses_vllm: bool, uses_bnb: bool) -> list[str]:
    """Every one-line refusal for a run on `stack`: torch always, vLLM when the run starts a colocated engine,
    bitsandbytes when it loads 4-bit. Empty off a GPU machine (no driver)."""
    if stack.driver is None and stack.driver_cuda is None:
        return []
    problems = [torch_problem(stack)]
    if uses_vllm:
        problems.append(vllm_problem(stack))
    if uses_bnb:
        problems.append(bnb_problem(stack))
    return [p for p in problems if p]


def check_cuda_stack(uses_vllm: bool, uses_bnb: bool, stack: CudaStack | None = None) -> None:
    """Before any model loads: CudaStackError with the first refusal for this machine's stack (`stack` stands in for
    it in tests), nothing off a GPU machine."""
    problems = stack_problems(stack if stack is not None else current_stack(), uses_vllm, uses_bnb)
    if problems:
        raise CudaStackError(problems[0])


def stack_lines(stack: CudaStack) -> list[str]:
    """The `fspo-lite env` lines: each part of the stack, then what of it cannot run here (every path asked)."""
    if stack.driver is None and stack.driver_cuda is None:
        return ["CUDA stack: no NVIDIA driver (CPU only: every GPU check is skipped)"]
    arches = " ".join(stack.torch_arches) or "unknown"
    lines = [f"CUDA stack: driver {stack.driver or 'unknown'} runs CUDA {version_text(stack.driver_cuda)} at most",
             f"  GPU: {gpu_text(stack) if stack.gpu or stack.capability else 'none visible'}",
             f"  torch {stack.torch_version}: CUDA {version_text(stack.torch_cuda)} build, kernels for {arches}",
             f"  vllm: {stack.vllm_version or 'not installed'}"
             + (f", CUDA {stack.vllm_cuda} build" if stack.vllm_version and stack.vllm_cuda else ""),
             f"  bitsandbytes: {stack.bnb_version or 'not installed'}"
             + (f", libraries for CUDA {', '.join(version_text(c) for c in stack.bnb_cudas)}" if stack.bnb_cudas else "")]
    problems = stack_problems(stack, uses_vllm=True, uses_bnb=True)
    lines += [f"  refused: {p}" for p in problems] or ["  every part fits"]
    return lines


def simulated_stack(driver: str, torch_cuda: tuple[int, int], gpu: str, vllm_cuda: int | None = None,
                    vllm_version: str = "0.26.0", bnb_cudas: tuple[tuple[int, int], ...] = ()) -> CudaStack:
    """A stack from a driver version, torch 2.11.0's CUDA build and a GPU of GPUS (tests, docs)."""
    name, capability = GPUS[gpu]
    label = f"cu{torch_cuda[0]}{torch_cuda[1]}"
    return CudaStack(driver=driver, driver_cuda=driver_cuda_version(driver), gpu=name, capability=capability,
                     torch_version=f"2.11.0+{label}", torch_cuda=torch_cuda, torch_arches=TORCH_ARCHES[torch_cuda],
                     vllm_version=vllm_version if vllm_cuda else None, vllm_cuda=vllm_cuda,
                     bnb_version="0.50.2" if bnb_cudas else None, bnb_cudas=bnb_cudas)


# ---- the thin shell: the real values of this machine ----------------------------------------------------------------


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def libcuda_version() -> tuple[int, int] | None:
    """cuDriverGetVersion from libcuda (12040 -> (12, 4)), which a CUDA compatibility package raises; None without
    libcuda."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(value)) != 0 or value.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return value.value // 1000, (value.value % 1000) // 10


def visible_gpu() -> tuple[str | None, tuple[int, int] | None]:
    """The first GPU's name and compute capability from nvidia-smi (it answers when torch's build cannot), else from
    torch; (None, None) when neither can tell."""
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=10)
            first = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
            name, _, cap = first.rpartition(",")
            if parse_cuda_version(cap):
                return name.strip(), parse_cuda_version(cap)
        except (OSError, subprocess.SubprocessError):
            pass
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0))
    return None, None


def distribution(name: str):
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_build() -> tuple[str | None, int | None]:
    """The installed vllm's version and CUDA major (its label, else the CUDA runtime its extension links, else the
    CUDA its requirements pull in), read from its files without importing it; (None, None) when not installed."""
    dist = distribution("vllm")
    if dist is None:
        return None, None
    label = cuda_from_label(dist.version)
    if label:
        return dist.version, label[0]
    for file in dist.files or []:
        if file.name.endswith(".so") and file.name.startswith("_C"):
            try:
                with open(dist.locate_file(file), "rb") as handle:
                    found = cuda_major_from_binary(handle.read(16 * 1024 * 1024))
            except OSError:
                continue
            if found:
                return dist.version, found
    return dist.version, cuda_major_from_requirements(dist.requires or [])


def read_cuda_stack() -> CudaStack:
    """This machine's CudaStack (a second or two; nvidia-smi is asked once)."""
    import torch

    driver = parse_driver_version(read_text("/proc/driver/nvidia/version"))
    driver_cuda = libcuda_version() or driver_cuda_version(driver)
    if driver is None and driver_cuda is None:
        return CudaStack(torch_version=torch.__version__, torch_cuda=parse_cuda_version(torch.version.cuda))
    gpu, capability = visible_gpu()
    vllm_version, vllm_cuda = vllm_build()
    bnb = distribution("bitsandbytes")
    return CudaStack(driver=driver, driver_cuda=driver_cuda, gpu=gpu, capability=capability,
                     torch_version=torch.__version__, torch_cuda=parse_cuda_version(torch.version.cuda),
                     torch_arches=tuple(torch.cuda.get_arch_list()) if torch.cuda.is_available() else (),
                     vllm_version=vllm_version, vllm_cuda=vllm_cuda, bnb_version=bnb.version if bnb else None,
                     bnb_cudas=bnb_cuda_versions([f.name for f in bnb.files or []]) if bnb else ())


@functools.cache
def current_stack() -> CudaStack:
    """read_cuda_stack, once per process (a driver, a GPU and the installed packages do not change under a run)."""
    return read_cuda_stack()
