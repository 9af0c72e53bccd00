"""What a run folder must show before training writes into it or continues it, checked before the model loads.

- No link leads out: `checkpoints/`, `metrics.jsonl`, `samples.jsonl` and `tensorboard/` are the run's own (a
  `checkpoints/` linked into another run would resume that run's weights and write into it).
- Resume continues only this run: the checkpoint's config (`check_provenance`), the training data by content (a
  file changed or shrunk under the same path), and the rows metrics.jsonl and samples.jsonl hold up to the
  checkpoint's step (rows or a checkpoint copied in from another run) must be those the checkpoint was written
  with; each checkpoint records them (`run_record`).
- Resume never drops the rows of a run whose checkpoints are gone: rows past the step of the run's first
  checkpoint show that checkpoints were written, so starting over would wipe a finished (or well advanced) run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from fspo_lite.config_checks import ConfigError
from fspo_lite.config_load import read_config_mapping
from fspo_lite.logs.training_log import refuse_link, rows_digest, step_lines
from fspo_lite.update.checkpoint import (MANIFEST, CheckpointError, check_provenance, latest_checkpoint,
                                         verify_checkpoint)

RUN_FILES = ("checkpoints", "metrics.jsonl", "samples.jsonl", "tensorboard")
"""What a run writes into its folder through paths that could be links (config.yaml replaces a link)."""

ROW_FILES = ("metrics.jsonl", "samples.jsonl")


def examples_digest(examples: list) -> str:
    """SHA-256 of the training examples as loaded (every field, in order): the data's content, whatever its path."""
    digest = hashlib.sha256()
    for example in examples:
        fields = dataclasses.asdict(example) if dataclasses.is_dataclass(example) else example
        digest.update(json.dumps(fields, sort_keys=True, default=str).encode("utf-8") + b"\n")
    return digest.hexdigest()


def run_record(output_dir: str | Path, step: int, examples: list) -> dict:
    """What a checkpoint of `step` records for resume to compare: the data's digest and size, and the digest of the
    rows each row file holds up to `step` (on disk before the checkpoint is written)."""
    return {"data_sha256": examples_digest(examples), "data_examples": len(examples),
            "rows_sha256": {name: rows_digest(Path(output_dir) / name, step) for name in ROW_FILES}}


def check_links(output_dir: str | Path) -> None:
    """RunLogError (one line) when a file or folder the run writes is a link (`RUN_FILES`)."""
    for name in RUN_FILES:
        refuse_link(Path(output_dir) / name)


def checkpoint_state(path: Path) -> dict:
    """A checkpoint's trainer_state.json (covered by its manifest, checked first), or CheckpointError."""
    if (path / MANIFEST).exists():
        verify_checkpoint(path)  # a damaged file is named as the manifest sees it, before it is read
    try:
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {path}: trainer_state.json is unreadable ({type(error).__name__})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise CheckpointError(f"checkpoint {path}: trainer_state.json has no integer 'step'")
    return state


def check_resume(output_dir: str | Path, config, examples: list) -> None:
    """Everything resume refuses before the model loads (this module's docstring), each in one line naming the
    file and what to do. `config`: the run's Config; `examples`: the training examples as loaded."""
    output_dir = Path(output_dir)
    check_links(output_dir)
    rows = {name: step_lines(output_dir / name) for name in ROW_FILES}  # a damaged middle row stops here
    latest = latest_checkpoint(output_dir)
    if latest is None:
        refuse_start_over(output_dir, config, rows["metrics.jsonl"])
        return
    if not (latest / MANIFEST).exists():
        return  # partial: loading it reports so, with the way out
    check_provenance(latest, config.to_dict())
    state = checkpoint_state(latest)
    step = state["step"]
    if "data_sha256" in state and state["data_sha256"] != examples_digest(examples):
        raise CheckpointError(
            f"checkpoint {latest} was trained on other data than data.train={config.data.train!r} holds now "
            f"({state.get('data_examples', '?')} examples then, {len(examples)} now, or the same number changed): "
            "resume with the data it was written with, or train into another train.output_dir")
    for name, digest in (state.get("rows_sha256") or {}).items():
        if name in ROW_FILES and digest != rows_digest(output_dir / name, step):
            raise CheckpointError(
                f"{output_dir / name} does not hold the rows of steps 1-{step} that checkpoint {latest.name} was "
                "written after (the rows or the checkpoint were copied in from another run, or edited): put back "
                "this run's file, or train into another train.output_dir")


def refuse_start_over(output_dir: Path, config, metrics: list[tuple[int, str]]) -> None:
    """CheckpointError when a resume without a checkpoint would drop rows a run cannot have logged without writing
    one: past the step of its first checkpoint, or up to its last step (a finished run whose checkpoints were
    removed). Steps and save_every come from the run's config.yaml when it is readable."""
    if not metrics:
        return
    train = config.train
    steps, every = train.steps, train.save_every
    try:
        written = read_config_mapping(output_dir / "config.yaml")
        steps, every = int(written["train"]["steps"]), int(written["train"]["save_every"] or 0)
    except (OSError, ValueError, TypeError, KeyError, ConfigError):
        pass
    first = every if 0 < every < steps else steps
    last = max(step for step, _ in metrics)
    if last > first or last >= steps:
        raise CheckpointError(
            f"{output_dir} holds a run whose metrics.jsonl reaches step {last} but no checkpoint to continue from "
            f"(its first was due at step {first}, so they were removed); resuming would start over and drop its rows: "
            "train into another train.output_dir, or remove metrics.jsonl and samples.jsonl to start over here")
