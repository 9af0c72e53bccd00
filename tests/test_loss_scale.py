"""Dynamic loss scaling (fspo_lite.update.loss_scale): its rule by hand, and the trainer with it forced on.

On a CPU the trainer never scales (fspo_lite.models.precision.needs_loss_scaling); here it is forced on so that the
float16 path's bookkeeping runs: a power-of-two scale is exact in float arithmetic, so a scaled run must train the
same weights as an unscaled one, and an overflowing scale must skip steps without stopping the run.
"""

import copy
import json
from pathlib import Path

import pytest
import torch

from fspo_lite.config import load_config
from fspo_lite.data.examples import QAExample
from fspo_lite.update import trainer as trainer_module
from fspo_lite.update.loss_scale import INITIAL_SCALE, LossScale
from fspo_lite.update.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
            QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]


def test_the_rule_by_hand():
    off = LossScale()
    loss = torch.tensor(0.5)
    assert off.scaled(loss) is loss and off.checkpoint_state() == {} and not off.overflowed(True, False)
    scale = LossScale(enabled=True, growth_interval=2)
    assert scale.scaled(loss).item() == 0.5 * INITIAL_SCALE
    weight = torch.nn.Parameter(torch.ones(2))
    weight.grad = torch.full((2,), 4.0 * INITIAL_SCALE)
    scale.unscale([weight, torch.nn.Parameter(torch.ones(1))])  # a parameter without a gradient is left alone
    assert weight.grad.tolist() == [4.0, 4.0]
    assert scale.overflowed(loss_finite=True, grad_finite=False)  # the scale's doing
    assert not scale.overflowed(loss_finite=False, grad_finite=False)  # a non-finite loss is a diverged step
    scale.skipped(overflow=True)
    assert scale.scale == INITIAL_SCALE / 2 and scale.good_steps == 0
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scale.step(optimizer)
    scale.step(optimizer)
    assert scale.scale == INITIAL_SCALE and scale.good_steps == 0  # doubled after growth_interval good steps
    scale.step(optimizer)
    scale.skipped(overflow=False)
    assert scale.scale == INITIAL_SCALE and scale.good_steps == 0  # a diverged step restarts the count only
    assert not LossScale(enabled=True, scale=1.0).overflowed(True, False)  # cannot shrink below 1: diverged
    restored = LossScale(enabled=True)
    restored.load_state_dict(LossScale(enabled=True, scale=8.0, good_steps=3).checkpoint_state()["loss_scale"])
    assert (restored.scale, restored.good_steps) == (8.0, 3)


def _trainer(tmp_path, tiny_policy, *overrides):
    config = load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={tmp_path}", *overrides])
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    return Trainer(config, model, tokenizer, EXAMPLES, progress=False)


def _adapter(trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters() if p.requires_grad}


def test_scaled_training_trains_the_same_weights(tmp_path, tiny_policy, monkeypatch):
    plain = _trainer(tmp_path / "plain", tiny_policy, "train.learning_rate=1e-2")
    assert not plain.loss_scale.enabled  # a CPU never scales
    rollout = plain.rollout(EXAMPLES)
    advantages = torch.randn(rollout.completion_ids.shape, generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr(trainer_module, "needs_loss_scaling", lambda *args: True)
    scaled = _trainer(tmp_path / "scaled", tiny_policy, "train.learning_rate=1e-2")
    assert scaled.loss_scale.enabled
    for _ in range(2):  # the second step also moves LoRA A (its gradient is 0 while B is at its zero init)
        assert str(plain.update(rollout, advantages)) == str(scaled.update(rollout, advantages))  # nan == nan
    before, after = _adapter(plain), _adapter(scaled)
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert all(not torch.equal(value, _adapter_of(tiny_policy)[name]) for name, value in after.items())


def test_the_scale_is_checkpointed_and_resumed(tmp_path, tiny_policy, monkeypatch):
    monkeypatch.setattr(trainer_module, "needs_loss_scaling", lambda *args: True)
    _trainer(tmp_path, tiny_policy, "train.save_every=2").train()
    (checkpoint,) = (tmp_path / "checkpoints").glob("step-*")
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["loss_scale"]["scale"] == INITIAL_SCALE and state["loss_scale"]["good_steps"] == 2
    resumed = _trainer(tmp_path, tiny_policy, "train.save_every=2", "train.resume=true")
    assert resumed.loss_scale.good_steps == 2


def _adapter_of(policy) -> dict[str, torch.Tensor]:
    return {name: p.detach() for name, p in policy[0].named_parameters() if p.requires_grad}


def test_an_overflowing_scale_skips_steps_without_stopping_the_run(tmp_path, tiny_policy, monkeypatch, capsys):
    monkeypatch.setattr(trainer_module, "needs_loss_scaling", lambda *args: True)
    trainer = _trainer(tmp_path, tiny_policy, "train.steps=4", "train.max_bad_steps=2")
    trainer.loss_scale.scale = 2.0**140  # beyond float32: every scaled gradient overflows
    rows = trainer.train()
    assert [row["update_skipped"] for row in rows] == [1, 1, 1, 1]
    assert trainer.bad_steps == 0 and trainer.skipped_updates == 4 and trainer.loss_scale.scale == 2.0**136
    assert "loss scale halved to" in capsys.readouterr().out


@pytest.mark.parametrize("overrides", [["model.dtype=float16", "model.lora=false"]])
def test_float16_full_fine_tuning_is_refused_before_any_model_loads(tmp_path, overrides, no_model_loads):
    config = load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={tmp_path}", *overrides])
    with pytest.raises(ValueError, match=r"model.dtype=float16 with model.lora=false .*: set model.lora=true"):
        Trainer(config, progress=False)
