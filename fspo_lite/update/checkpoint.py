"""Checkpoints that survive crashes: written to a temporary folder, then renamed into place.

A checkpoint holds the weights (the LoRA adapter in PEFT format, or the full model), the
optimizer, the RNG states, the trainer state (step, data position) and the run's config. A manifest
with every file's size and SHA-256 is written last; a folder without it is reported as partial, a file of
the wrong size as truncated and a file whose bytes changed (same size) as corrupt, each naming
the file, instead of being loaded. A manifest must vouch for every file (a SHA-256 each, the files a
checkpoint needs all listed, no unlisted file), and `checkpoints/latest` must name a step folder inside
`checkpoints/`; anything else is refused. `config_differences` compares a checkpoint's config with the
current run's, for the trainer to refuse resuming another run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path

import torch

from fspo_lite.atomic import atomic_write_text, disk_full_named, fsync_folder

MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, partial or truncated."""


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
    if root.is_symlink():  # checked before the model loads too (update/resume_checks.py); never written through
        raise CheckpointError(f"{root} is a link (to {os.readlink(root)}); checkpoints are written only inside the "
                              "run folder: replace the link with a folder, or train into another train.output_dir")
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    for leftover in root.glob(".staging-*"):  # from a run killed while writing a checkpoint
        shutil.rmtree(leftover, ignore_errors=True)
    restore_replaced(root)
    staging = root / f".staging-{step:06d}-{os.getpid()}"
    staging.mkdir()
    try:
        with disk_full_named(final):  # torch.save's "unexpected pos" on a full disk says so
            _write_staging(staging, step, model, optimizer, trainer_state, config, state_dict, extra_dirs)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # nothing half-written stays behind; `final` is untouched
        raise
    replaced = root / f"{REPLACED}{final.name}-{os.getpid()}" if final.exists() else None
    if replaced is not None:  # the old copy is removed only once the new one is in place (`restore_replaced`)
        os.rename(final, replaced)
    os.rename(staging, final)
    fsync_folder(root)
    atomic_write_text(root / "latest", final.name)
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)
    return final


def _write_staging(staging: Path, step: int, model, optimizer, trainer_state: dict, config, state_dict,
                   extra_dirs) -> None:
    """Every file of a checkpoint into `staging`, synced, the manifest last."""
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
    atomic_write_text(staging / MANIFEST, json.dumps({"step": step, "files": files}, indent=2))
    fsync_folder(staging)


REPLACED = ".replaced-"
"""Prefix of a checkpoint folder moved aside while a new checkpoint of the same step takes its name."""


def restore_replaced(root: Path) -> None:
    """Finish a replacement cut off by a crash: a `.replaced-step-N-PID` folder whose `step-N` is back in place is
    removed; one whose `step-N` is missing (the crash fell between the two renames) is renamed back, so the trained
    weights are never lost."""
    for aside in sorted(root.glob(f"{REPLACED}step-*")) if root.exists() else []:
        name = aside.name[len(REPLACED):].rpartition("-")[0]
        if (root / name).exists():
            shutil.rmtree(aside, ignore_errors=True)
        elif STEP_FOLDER.fullmatch(name):
            os.rename(aside, root / name)


STEP_FOLDER = re.compile(r"step-\d{6,}")
"""The name of a checkpoint folder; `checkpoints/latest` holds one, nothing else."""


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The checkpoint `checkpoints/latest` points to, else the newest folder with a manifest, else None.

    The pointer is rewritten only after a checkpoint is complete, so a run killed while writing
    one resumes from the one before. A checkpoint damaged later is returned as it is, for
    `verify_checkpoint` to report. A pointer that names anything but a step folder inside this
    run's `checkpoints/` (`../../other/checkpoints/step-000003`, an absolute path, a link that leads
    out) is a CheckpointError: resuming would load another run's weights.
    """
    root = Path(output_dir) / "checkpoints"
    restore_replaced(root)
    pointer = root / "latest"
    if pointer.exists():
        try:
            name = pointer.read_text(encoding="utf-8").strip()
        except (UnicodeDecodeError, OSError) as error:
            raise CheckpointError(f"{pointer} is unreadable ({type(error).__name__}); remove it to resume from the "
                                  "newest complete checkpoint") from None
        candidate = root / name
        if not STEP_FOLDER.fullmatch(name) or (candidate.exists() and candidate.resolve().parent != root.resolve()):
            shown = name if len(name) <= 80 else name[:80] + "..."
            raise CheckpointError(f"{pointer} points to {shown!r}, which is not a step folder of this run "
                                  f"(step-NNNNNN inside {root}); remove the pointer to resume from the newest "
                                  "complete checkpoint")
        if candidate.is_dir():
            return candidate
    linked = sorted(p.name for p in root.glob("step-*") if p.is_symlink()) if root.exists() else []
    if linked:
        raise CheckpointError(f"{root / linked[0]} is a link, not a checkpoint of this run (it may lead into another "
                              "run); remove the link to resume from this run's own checkpoints")
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
    listed = manifest["files"]
    for name, entry in listed.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int)
                and isinstance(entry.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])):
            raise CheckpointError(f"checkpoint {path}: {MANIFEST} gives no size and SHA-256 for {name!r}, so it "
                                  "cannot vouch for the file (manifests hold both since checksums were added)")
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise CheckpointError(f"checkpoint {path}: {MANIFEST} lists {name!r}, a file outside the checkpoint")
    required = ["trainer_state.json", "rng.pt"]
    if not (path / "sharded").exists():
        required.append("optimizer.pt")
    missing = [name for name in required if name not in listed]
    if not any(name.startswith("model/") and name.endswith(".safetensors") for name in listed):
        missing.append("model/*.safetensors")
    if missing:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} does not list {', '.join(missing)} (it was emptied or "
                              "cut), so the checkpoint cannot be trusted")
    unlisted = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and p.name != MANIFEST
                      and str(p.relative_to(path)) not in listed)
    if unlisted:
        raise CheckpointError(f"checkpoint {path} holds files its {MANIFEST} does not list: {', '.join(unlisted[:3])}"
                              f"{' ...' if len(unlisted) > 3 else ''} (added or renamed after it was written)")
    for name, entry in listed.items():
        file = path / name
        size, digest = entry["size"], entry["sha256"]
        if not file.exists():
            raise CheckpointError(f"checkpoint {path} is partial: {name} is missing")
        if file.stat().st_size != size:
            raise CheckpointError(
                f"checkpoint {path} is truncated: {name} has {file.stat().st_size} bytes, expected {size}"
            )
        if file_sha256(file) != digest:
            raise CheckpointError(f"checkpoint {path} is corrupt: {name} does not match its SHA-256 in {MANIFEST} "
                                  "(the file changed after it was written)")
    return manifest


RESUME_MAY_CHANGE = ("train.steps", "train.resume", "train.save_every", "train.output_dir", "train.tensorboard",
                     "train.max_bad_steps", "evaluation.", "filter.", "verifier.device", "verifier.batch_size",
                     "verifier.request_timeout", "rollout.vllm_server_timeout")
"""Config keys (or section prefixes ending in '.') a resumed run may set differently from the run that wrote the
checkpoint: how long to run, where and how often to save and log, and settings that do not change what is
trained. Any other difference (method, learning rate, seed, data, LoRA rank, ...) means another run."""


CHECKPOINT_FILES = (MANIFEST, "trainer_state.json", "rng.pt", "optimizer.pt")
"""Files only a training checkpoint holds: a folder with one of them is a checkpoint, whatever else it lacks."""


def checkpoint_of_adapter(adapter_path: str | Path) -> Path | None:
    """The training checkpoint an adapter path names (the checkpoint folder, or its `model/` folder), or None for
    anything else: a plain PEFT adapter folder (adapter_config.json, no manifest), a hub id."""
    path = Path(adapter_path).expanduser()
    for folder in (path, path.parent) if path.name == "model" else (path,):
        if any((folder / name).exists() for name in CHECKPOINT_FILES):
            return folder
    return None


def verify_adapter(adapter_path: str | Path) -> None:
    """The checks resume runs (`verify_checkpoint`: a manifest, every file's size and SHA-256) on an adapter path
    that names a training checkpoint, so `eval --adapter` never evaluates weights resume would refuse; a plain
    adapter folder passes as it is."""
    checkpoint = checkpoint_of_adapter(adapter_path)
    if checkpoint is not None:
        verify_checkpoint(checkpoint)


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and prefix == "":
            flat.update(_flat(value, f"{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_differences(saved: dict, current: dict, may_change: tuple[str, ...] = RESUME_MAY_CHANGE) -> list[str]:
    """'key: <saved> in the checkpoint, <current> now' for every config key whose value differs between a
    checkpoint's config (`saved`, as read from its config.yaml) and the current one (`current`, Config.to_dict()),
    leaving out `may_change`. Keys present on one side only (a newer or older version of the config) are skipped."""
    import yaml

    saved_flat = _flat(saved)
    current_flat = _flat(yaml.safe_load(yaml.safe_dump(current)))  # the same YAML round trip as config.yaml
    differences = []
    for key in saved_flat.keys() & current_flat.keys():
        if key in may_change or any(key.startswith(p) for p in may_change if p.endswith(".")):
            continue
        if saved_flat[key] != current_flat[key]:
            differences.append(f"{key}: {saved_flat[key]!r} in the checkpoint, {current_flat[key]!r} now")
    return sorted(differences)


def check_provenance(path: str | Path, current: dict) -> None:
    """CheckpointError naming every setting (outside RESUME_MAY_CHANGE) in which the checkpoint's config.yaml differs
    from the current config (`Config.to_dict()`): another method, learning rate, seed, data or LoRA rank is another
    run, whose weights and optimizer state would otherwise be continued silently."""
    from fspo_lite.config_load import redacted

    differences = config_differences(checkpoint_config(path), redacted(current))  # config.yaml holds no secrets
    if differences:
        shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
        raise CheckpointError(f"checkpoint {path} was written by a run with other settings ({shown}); resume with "
                              f"its settings ({Path(path) / 'config.yaml'}) or train into another train.output_dir")


def checkpoint_config(path: str | Path) -> dict:
    """The config a checkpoint was written with (its config.yaml, covered by the manifest), or CheckpointError."""
    from fspo_lite.config_checks import ConfigError
    from fspo_lite.config_load import read_config_mapping

    file = Path(path) / "config.yaml"
    if not file.exists():
        raise CheckpointError(f"checkpoint {path} has no config.yaml, so nothing shows it belongs to this run")
    try:
        return read_config_mapping(file)
    except (ConfigError, OSError) as error:
        raise CheckpointError(f"checkpoint {path}: config.yaml holds no readable settings ({error})") from None


def _first_mismatch(error: RuntimeError) -> str:
    """The first 'size mismatch for <tensor>: ...' line of torch's load_state_dict error, cut short."""
    lines = [line.strip() for line in str(error).splitlines() if "size mismatch" in line] or [str(error)]
    return " ".join(lines[0].split())[:200] + (f"; {len(lines) - 1} more tensors differ" if len(lines) > 1 else "")


def load_checkpoint(path: str | Path, model, optimizer) -> dict:
    """Restore weights, optimizer and RNG from a verified checkpoint; return the trainer state."""
    from safetensors.torch import load_file

    path = Path(path)
    verify_checkpoint(path)
    weights_dir = path / "model"
    adapter = weights_dir / "adapter_model.safetensors"
    if adapter.exists():
        from peft import set_peft_model_state_dict

        try:
            set_peft_model_state_dict(model, load_file(str(adapter)))
        except RuntimeError as error:  # tensors of other shapes: another LoRA rank or another base model
            raise CheckpointError(f"checkpoint {path}: its adapter does not fit the model ({_first_mismatch(error)}); "
                                  "it was written with another model.lora_r or model") from None
    else:
        state = {}
        for shard in sorted(weights_dir.glob("*.safetensors")):
            state.update(load_file(str(shard)))
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise CheckpointError(f"checkpoint {path}: its weights do not fit the model ({_first_mismatch(error)}); "
                                  "it was written for another model") from None
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
