"""Checkpoints that survive crashes: written to a temporary folder, then renamed into place.

A checkpoint holds the weights (the LoRA adapter in PEFT format, or the full model), the
optimizer, the RNG states and the trainer state (step, data position). A manifest with every
file's size and SHA-256 is written last; a folder without it is reported as partial, a file of
the wrong size as truncated and a file whose bytes changed (same size) as corrupt, each naming
the file, instead of being loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import torch

MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, partial or truncated."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a small text file through a synced temporary file and a rename: readers see the old or the new text."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(output_dir: str | Path, step: int, model, optimizer, trainer_state: dict, config=None,
                    state_dict: dict | None = None, extra_dirs: dict[str, Path] | None = None) -> Path:
    """Write checkpoints/step-XXXXXX atomically and point checkpoints/latest at it.

    `state_dict`: the model's weights when they were gathered from ranks that shard them (FSDP);
    None saves the model's own parameters. `optimizer` None writes no optimizer.pt (its state is sharded
    in one of `extra_dirs`: {name: folder} moved into the checkpoint before the manifest is written)."""
    root = Path(output_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    for leftover in root.glob(".staging-*"):  # from a run killed while writing a checkpoint
        shutil.rmtree(leftover, ignore_errors=True)
    staging = root / f".staging-{step:06d}-{os.getpid()}"
    staging.mkdir()
    model.save_pretrained(staging / "model", safe_serialization=True, state_dict=state_dict)
    if optimizer is not None:
        torch.save(optimizer.state_dict(), staging / "optimizer.pt")
    torch.save(rng_state(), staging / "rng.pt")
    for name, folder in (extra_dirs or {}).items():
        os.rename(folder, staging / name)
    (staging / "trainer_state.json").write_text(json.dumps({**trainer_state, "step": step}, indent=2))
    if config is not None:
        config.save(staging / "config.yaml")
    files = {
        str(p.relative_to(staging)): {"size": p.stat().st_size, "sha256": file_sha256(p)}
        for p in sorted(staging.rglob("*")) if p.is_file()
    }
    for name in files:
        with open(staging / name, "rb") as handle:
            os.fsync(handle.fileno())
    write_text_atomic(staging / MANIFEST, json.dumps({"step": step, "files": files}, indent=2))
    _fsync_dir(staging)
    if final.exists():
        shutil.rmtree(final)
    os.rename(staging, final)
    _fsync_dir(root)
    write_text_atomic(root / "latest", final.name)
    return final


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The checkpoint `checkpoints/latest` points to, else the newest folder with a manifest, else None.

    The pointer is rewritten only after a checkpoint is complete, so a run killed while writing
    one resumes from the one before. A checkpoint damaged later is returned as it is, for
    `verify_checkpoint` to report.
    """
    root = Path(output_dir) / "checkpoints"
    pointer = root / "latest"
    if pointer.exists():
        candidate = root / pointer.read_text().strip()
        if candidate.name.startswith("step-") and candidate.is_dir():
            return candidate
    complete = sorted(p for p in root.glob("step-*") if (p / MANIFEST).exists()) if root.exists() else []
    return complete[-1] if complete else None


def complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """Every checkpoint folder that passes `verify_checkpoint`, oldest first."""
    root = Path(output_dir) / "checkpoints"
    found = []
    for path in sorted(root.glob("step-*")) if root.exists() else []:
        try:
            verify_checkpoint(path)
        except CheckpointError:
            continue
        found.append(path)
    return found


def verify_checkpoint(path: str | Path) -> dict:
    """Check the manifest against the files on disk; return the manifest or raise CheckpointError."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise CheckpointError(f"checkpoint {path} is partial: no {MANIFEST} (the run stopped while writing it)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupt ({error})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupt (no file list)")
    for name, entry in manifest["files"].items():
        file = path / name
        # older manifests hold the size only; newer ones {"size": n, "sha256": hex}
        size, digest = (entry, None) if isinstance(entry, int) else (entry.get("size"), entry.get("sha256"))
        if not file.exists():
            raise CheckpointError(f"checkpoint {path} is partial: {name} is missing")
        if file.stat().st_size != size:
            raise CheckpointError(
                f"checkpoint {path} is truncated: {name} has {file.stat().st_size} bytes, expected {size}"
            )
        if digest is not None and file_sha256(file) != digest:
            raise CheckpointError(f"checkpoint {path} is corrupt: {name} does not match its SHA-256 in {MANIFEST} "
                                  "(the file changed after it was written)")
    return manifest


def load_checkpoint(path: str | Path, model, optimizer) -> dict:
    """Restore weights, optimizer and RNG from a verified checkpoint; return the trainer state."""
    from safetensors.torch import load_file

    path = Path(path)
    verify_checkpoint(path)
    weights_dir = path / "model"
    adapter = weights_dir / "adapter_model.safetensors"
    if adapter.exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(adapter)))
    else:
        state = {}
        for shard in sorted(weights_dir.glob("*.safetensors")):
            state.update(load_file(str(shard)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        real_missing = [k for k in missing if "lm_head" not in k]  # tied embeddings are saved once
        if real_missing or unexpected:
            raise CheckpointError(f"checkpoint {path} does not match the model: missing {real_missing[:5]}, "
                                  f"unexpected {unexpected[:5]}")
    try:
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    except Exception as error:  # a manifest without checksums cannot vouch for the bytes
        raise CheckpointError(f"checkpoint {path}: optimizer.pt cannot be loaded ({type(error).__name__}: {error})") from None
    try:
        set_rng_state(torch.load(path / "rng.pt", weights_only=True))
    except Exception as error:
        raise CheckpointError(f"checkpoint {path}: rng.pt cannot be loaded ({type(error).__name__}: {error})") from None
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"checkpoint {path}: trainer_state.json is not valid JSON ({error})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or "sampler" not in state:
        raise CheckpointError(f"checkpoint {path}: trainer_state.json has no integer 'step' and 'sampler'")
    return state
