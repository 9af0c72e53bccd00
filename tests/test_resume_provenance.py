"""Resume trusts nothing it finds: another run's checkpoint (other method, learning rate, seed, data, LoRA rank) is
refused by name, a manifest that cannot vouch for every byte is refused, `checkpoints/latest` cannot lead outside
the run, and a second run into a folder that holds one is refused instead of logging its steps after the first's.

In process, on the tiny model (the same fixtures as tests/test_trainer.py); one test runs the real command line.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_lite.update.checkpoint import (CheckpointError, config_differences, latest_checkpoint, load_checkpoint,
                                  verify_checkpoint)
from fspo_lite.config import load_config
from fspo_lite.data.examples import QAExample, save_examples
from fspo_lite.models.policy import load_policy
from fspo_lite.logs.training_log import read_metrics
from fspo_lite.update.trainer import Trainer, TrainingError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
            QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]


def tiny_config(folder, *overrides):
    return load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={folder}", "train.steps=1",
                                                             "rollout.max_new_tokens=8", *overrides])


@pytest.fixture
def saved_run(tmp_path, tiny_policy):
    """A folder with one checkpoint (step 1) written by the default tiny settings; returns (folder, model, tokenizer)."""
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    trainer = Trainer(tiny_config(tmp_path), model, tokenizer, EXAMPLES, progress=False)
    trainer.step_index = 1
    trainer.save()
    return tmp_path, model, tokenizer


def resume(folder, model, tokenizer, *overrides):
    return Trainer(tiny_config(folder, "train.resume=true", *overrides), model, tokenizer, EXAMPLES, progress=False)


@pytest.mark.parametrize("override, named", [
    ("reward.method=grpo", "reward.method: 'fspo' in the checkpoint, 'grpo' now"),
    ("train.learning_rate=0.002", "train.learning_rate: 0.001 in the checkpoint, 0.002 now"),
    ("train.seed=7", "train.seed: 0 in the checkpoint, 7 now"),
    ("data.train=bundled:multihop_train", "data.train: 'bundled:kbqa_train' in the checkpoint"),
    ("train.beta=0.01", "train.beta"),
])
def test_a_checkpoint_of_another_run_is_refused_by_name(saved_run, override, named):
    """Before: a checkpoint with the same tensor shapes loaded silently (the saved config was never compared)."""
    folder, model, tokenizer = saved_run
    with pytest.raises(CheckpointError, match="was written by a run with other settings") as error:
        resume(folder, model, tokenizer, override)
    assert named in str(error.value) and "train into another train.output_dir" in str(error.value)


def test_another_lora_rank_is_one_line_not_a_raw_runtime_error(saved_run):
    """Before: RuntimeError: Error(s) in loading state_dict ... size mismatch (many lines)."""
    folder, _, tokenizer = saved_run
    config = tiny_config(folder, "train.resume=true", "model.lora_r=8")
    model, _ = load_policy(config.model)
    with pytest.raises(CheckpointError, match="model.lora_r: 4 in the checkpoint, 8 now") as error:
        Trainer(config, model, tokenizer, EXAMPLES, progress=False)
    assert "\n" not in str(error.value)
    # without the config comparison (load_checkpoint called directly): still one CheckpointError naming the tensor
    with pytest.raises(CheckpointError, match=r"its adapter does not fit the model \(size mismatch for .*lora") as error:
        load_checkpoint(latest_checkpoint(folder), model, None)
    assert "\n" not in str(error.value)


def test_settings_that_do_not_change_the_run_may_differ(saved_run):
    folder, model, tokenizer = saved_run
    trainer = resume(folder, model, tokenizer, "train.steps=3", "train.save_every=2", "evaluation.limit=5",
                     "verifier.batch_size=4")
    assert trainer.step_index == 1
    assert config_differences({"train": {"steps": 1, "seed": 0}, "old": {"x": 1}},
                              {"train": {"steps": 9, "seed": 1}, "new": {"y": 2}}) == [
        "train.seed: 0 in the checkpoint, 1 now"]


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("cut, message", [
    ("empty", "does not list trainer_state.json, rng.pt, optimizer.pt, model/\\*.safetensors"),
    ("sizes", "gives no size and SHA-256 for"),
    ("drop weights", "does not list model/\\*.safetensors"),
    ("bad digest", "gives no size and SHA-256 for"),
    ("outside", "a file outside the checkpoint"),
])
def test_a_manifest_that_cannot_vouch_for_the_weights_is_refused(saved_run, cut, message):
    """8 flipped weight bytes under a manifest emptied or cut to sizes loaded before, and the run failed later with
    "probability tensor contains inf/nan"."""
    folder, model, tokenizer = saved_run
    path = latest_checkpoint(folder)
    flip_bytes(path / "model" / "adapter_model.safetensors")
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    files = manifest["files"]
    if cut == "empty":
        manifest["files"] = {}
    elif cut == "sizes":
        manifest["files"] = {name: entry["size"] for name, entry in files.items()}
    elif cut == "drop weights":
        del files["model/adapter_model.safetensors"]
    elif cut == "bad digest":
        files["rng.pt"]["sha256"] = "not a digest"
    else:
        files["../../elsewhere.bin"] = {"size": 1, "sha256": "0" * 64}
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=message):
        verify_checkpoint(path)
    with pytest.raises(CheckpointError, match=message):
        resume(folder, model, tokenizer)


def test_an_unlisted_file_in_a_checkpoint_is_refused(saved_run):
    folder, _, _ = saved_run
    path = latest_checkpoint(folder)
    (path / "model" / "extra.safetensors").write_bytes(b"planted")
    with pytest.raises(CheckpointError, match="holds files its manifest.json does not list: model/extra.safetensors"):
        verify_checkpoint(path)


@pytest.mark.parametrize("pointer", ["../../other/checkpoints/step-000001", "step-000001/../../../other/checkpoints/"
                                     "step-000001", "/tmp/step-000001", "step-000001/..", "link"])
def test_a_latest_pointer_that_leads_outside_the_run_is_refused(tmp_path, tiny_policy, pointer):
    """Before: `checkpoints/latest` holding ../../other/checkpoints/step-000001 resumed another run's weights."""
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    other, mine = tmp_path / "other", tmp_path / "mine"
    for folder in (other, mine):
        trainer = Trainer(tiny_config(folder), model, tokenizer, EXAMPLES, progress=False)
        trainer.step_index = 1
        trainer.save()
    root = mine / "checkpoints"
    if pointer == "link":  # a step folder that is a link into the other run
        (root / "step-000001").rename(root / "moved")
        os.symlink(other / "checkpoints" / "step-000001", root / "step-000001")
        pointer = "step-000001"
    (root / "latest").write_text(pointer)
    with pytest.raises(CheckpointError, match="which is not a step folder of this run"):
        latest_checkpoint(mine)
    with pytest.raises(CheckpointError, match="which is not a step folder of this run"):
        resume(mine, model, tokenizer)


def test_a_second_run_into_the_same_folder_is_refused_and_loses_nothing(tmp_path, tiny_policy):
    """Before: `train` again without train.resume appended steps 1, 2 after 1, 2 in metrics.jsonl."""
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    Trainer(tiny_config(tmp_path, "train.steps=2"), model, tokenizer, EXAMPLES, progress=False).train()
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(TrainingError, match=r"already holds a run \(metrics.jsonl with steps 1-2 and checkpoints up to "
                                            r"step-000002\); set train.resume=true"):
        Trainer(tiny_config(tmp_path, "train.steps=2"), model, tokenizer, EXAMPLES, progress=False)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    # following the message: resume (with more steps) logs step 3 once
    Trainer(tiny_config(tmp_path, "train.steps=3", "train.resume=true"), model, tokenizer, EXAMPLES,
            progress=False).train()
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3]


def test_the_command_line_refuses_a_second_run_before_the_model_loads(tmp_path):
    """The real command, twice into one folder: the second ends in one line, exit code 1, metrics unchanged."""
    data = tmp_path / "train.jsonl"
    save_examples(EXAMPLES, data)
    argv = [sys.executable, "-m", "fspo_lite", "train", "--config", str(ROOT / "configs" / "tiny.yaml"),
            "--set", f"train.output_dir={tmp_path / 'run'}", "--set", f"data.train={data}", "--set", "train.steps=1",
            "--set", "rollout.max_new_tokens=4"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    second = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    err = second.stderr.strip().splitlines()
    assert second.returncode == 1 and len(err) == 1 and "already holds a run" in err[0], second.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before
