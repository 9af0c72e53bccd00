"""docs/trl.md's table from TRL's GRPOConfig to fspo-lite's keys: every TRL name is a field of the installed
trl.GRPOConfig with the default the table says, every fspo-lite key exists with the default it says, and the fields
a TRL user sets first are all there."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from fspo_lite.config import Config

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"`([a-z_]+(?:\.[a-z_0-9]+)?)` \(([^)]*)\)")
FIRST = ("num_generations", "beta", "epsilon", "epsilon_high", "loss_type", "max_completion_length", "use_vllm",
         "vllm_mode", "learning_rate", "temperature", "num_iterations", "scale_rewards", "mask_truncated_completions",
         "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "top_p", "reward_weights",
         "vllm_gpu_memory_utilization", "seed", "max_grad_norm", "output_dir", "save_steps")


def value(text: str):
    text = {"true": "True", "false": "False", "null": "None"}.get(text.strip(), text.strip())
    return ast.literal_eval(text)


def rows() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "trl.md").read_text()
    table = text.split("## GRPOConfig", 1)[1]
    return [tuple(line.split(" | ")[:2]) for line in table.splitlines() if line.startswith("| `")]


def test_every_trl_name_and_default_is_the_installed_grpo_config():
    trl = pytest.importorskip("trl")
    defaults = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    seen = set()
    for trl_cell, _ in rows():
        for name, default in NAMED.findall(trl_cell):
            assert name in defaults, f"docs/trl.md: {name} is not a field of trl.GRPOConfig {trl.__version__}"
            if ":" not in default:  # "None: epsilon" says what None means
                assert value(default) == defaults[name], f"docs/trl.md: {name} defaults to {defaults[name]!r}"
            seen.add(name)
    assert set(FIRST) <= seen, sorted(set(FIRST) - seen)


def test_every_fspo_lite_key_and_default_exists():
    config = Config().to_dict()
    checked = 0
    for _, ours in rows():
        for key, default in NAMED.findall(ours):
            section, _, field = key.partition(".")
            assert section in config and field in config[section], f"docs/trl.md: no config key {key}"
            assert value(default) == config[section][field], f"docs/trl.md: {key} defaults to {config[section][field]!r}"
            checked += 1
    assert checked >= 25
