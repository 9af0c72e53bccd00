"""Integration: the tiny random model trains a few GRPO/FSPO steps on CPU.

A random-weight model never writes the <think>/<answer> format, so every reward would be the
format penalty and every advantage zero. The real scorer still runs; the test then replaces
its rewards (and FSPO mask) with seeded random values so that the update path is exercised.
"""

import copy
import json
import math
import shutil

import pytest
import torch

from fspo_lite.update import trainer as trainer_module
from fspo_lite.update.checkpoint import CheckpointError, latest_checkpoint, verify_checkpoint
from fspo_lite.config import load_config
from fspo_lite.data.examples import QAExample
from fspo_lite.update.trainer import Trainer, TrainingError
from fspo_lite.logs.training_log import read_metrics
from fspo_lite.data.training_set import ExampleSampler

EXAMPLES = [
    QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
    QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au and atomic number 79."),
    QAExample("c", "What is the atomic number of carbon?", ["6"], "Carbon has atomic number 6."),
]


@pytest.fixture
def varied_rewards(monkeypatch):
    real = trainer_module.score_rollouts
    generator = torch.Generator().manual_seed(0)

    def scored_with_variance(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        scored.rewards = torch.rand(len(examples), generator=generator)
        if scored.sentence_mask is not None:
            scored.sentence_mask = torch.randint(-1, 2, scored.sentence_mask.shape, generator=generator).float()
        return scored

    monkeypatch.setattr(trainer_module, "score_rollouts", scored_with_variance)


def tiny_config(tmp_path, *overrides):
    return load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", *overrides])


def lora_weights(model):
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


@pytest.mark.parametrize("method", ["grpo", "fspo"])
def test_tiny_training_updates_adapter_and_writes_metrics(tmp_path, tiny_policy, varied_rewards, method):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    before = lora_weights(model)
    config = tiny_config(tmp_path, f"reward.method={method}")
    trainer = Trainer(config, model, tokenizer, EXAMPLES, progress=False)
    history = trainer.train()
    assert len(history) == 2
    after = lora_weights(model)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward_mean", "accuracy", "format_rate", "frac_reward_zero_std", "step_factuality",
                "flipped_token_share", "clip_fraction", "entropy", "completion_length", "tokens_per_second",
                "step_time", "loss", "grad_norm"):
        assert key in rows[0]
    assert "sampler_logprob_gap_mean" not in rows[0]  # no sampler log-probs, no gap
    assert all(r["loss"] is not None and abs(r["loss"]) < 1e3 for r in rows)
    if method == "fspo":
        assert any(r["flipped_token_share"] > 0 for r in rows)
    else:
        assert all(r["flipped_token_share"] == 0 for r in rows)
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 and len(samples[0]["tokens"]) == len(samples[0]["token_advantages"])
    verify_checkpoint(latest_checkpoint(tmp_path))


def test_sampler_logprob_gap_is_logged_and_shows_a_stale_sampler(tmp_path, tiny_policy, varied_rewards):
    """With the sampler's log-probs (here the transformers engine's own decoding loop) every metrics row holds the
    gap to the trainer's log-probs: rounding for a sampler with the current weights, the whole offset for one whose
    log-probs are off (as an engine serving an older adapter would be)."""
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    fresh = Trainer(tiny_config(tmp_path / "fresh", "rollout.use_sampler_logprobs=true"), model, tokenizer, EXAMPLES,
                    progress=False)
    fresh.train()
    rows = read_metrics(tmp_path / "fresh")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(0 <= r["sampler_logprob_gap_mean"] <= r["sampler_logprob_gap_max"] < 1e-3 for r in rows), rows

    stale = Trainer(tiny_config(tmp_path / "stale", "rollout.use_sampler_logprobs=true", "train.steps=1"),
                    copy.deepcopy(tiny_policy[0]), tokenizer, EXAMPLES, progress=False)
    generate = stale.engine.generate

    def off_by_a_quarter(*args, **kwargs):
        rollout = generate(*args, **kwargs)
        rollout.sampling_logprobs = rollout.sampling_logprobs - 0.25 * rollout.completion_mask
        return rollout

    stale.engine.generate = off_by_a_quarter
    row = stale.train()[0]
    assert row["sampler_logprob_gap_mean"] == pytest.approx(0.25, abs=1e-3)
    assert row["sampler_logprob_gap_max"] == pytest.approx(0.25, abs=1e-3)


def test_kl_and_ppo_epochs_paths(tmp_path, tiny_policy, varied_rewards):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    config = tiny_config(tmp_path, "train.beta=0.01", "train.ppo_epochs=2", "train.steps=1",
                         "train.loss_aggregation=seq-mean-token-mean")
    history = Trainer(config, model, tokenizer, EXAMPLES, progress=False).train()
    assert history[0]["kl"] >= 0.0 and history[0]["clip_fraction"] >= 0.0


def test_full_finetuning_with_frozen_reference(tmp_path, varied_rewards):
    config = tiny_config(tmp_path, "model.lora=false", "train.beta=0.01", "train.steps=1", "train.learning_rate=1e-4")
    trainer = Trainer(config, train_examples=EXAMPLES, progress=False)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    history = trainer.train()
    assert trainer.reference is not None
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.named_parameters())
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == reference


def test_resume_continues_the_same_run(tmp_path, tiny_policy, varied_rewards):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, EXAMPLES, progress=False).train()
    resumed = Trainer(tiny_config(tmp_path, "train.steps=2", "train.resume=true"),
                      copy.deepcopy(tiny_policy[0]), tokenizer, EXAMPLES, progress=False)
    assert resumed.step_index == 1 and resumed.sampler.position == 2
    before = lora_weights(resumed.model)
    resumed.train()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert any(not torch.equal(before[k], v) for k, v in lora_weights(resumed.model).items())  # the step trained


def test_truncated_checkpoint_is_detected(tmp_path, tiny_policy, varied_rewards):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, EXAMPLES, progress=False).train()
    path = latest_checkpoint(tmp_path)
    optimizer_file = path / "optimizer.pt"
    optimizer_file.write_bytes(optimizer_file.read_bytes()[:10])
    with pytest.raises(CheckpointError, match="truncated: optimizer.pt"):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, EXAMPLES, progress=False)


def test_close_ends_the_engine_once_and_drops_the_weights(tmp_path, tiny_policy, varied_rewards, monkeypatch):
    """`with Trainer(...)` closes the engine on the way out (also after an error), and a trainer refused while it
    resumes closes the engine it had already built."""
    closed = []
    build = trainer_module.build_rollout_engine

    def recorded(*args, **kwargs):
        engine = build(*args, **kwargs)
        engine.close = lambda: closed.append(engine)
        return engine

    monkeypatch.setattr(trainer_module, "build_rollout_engine", recorded)
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    with Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, EXAMPLES, progress=False) as trainer:
        engine = trainer.engine
        trainer.train()
    assert closed == [engine] and trainer.engine is trainer.model is trainer.optimizer is None
    trainer.close()  # a second close does nothing
    assert closed == [engine]
    with pytest.raises(KeyboardInterrupt), Trainer(tiny_config(tmp_path / "cut", "train.steps=1"), model, tokenizer,
                                                   EXAMPLES, progress=False) as cut:
        raise KeyboardInterrupt
    assert len(closed) == 2 and cut.engine is None
    checkpoint = latest_checkpoint(tmp_path)
    (checkpoint / "optimizer.pt").write_bytes((checkpoint / "optimizer.pt").read_bytes()[:10])
    with pytest.raises(CheckpointError):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, EXAMPLES, progress=False)
    assert len(closed) == 2  # the damaged checkpoint is refused before any engine is built: none left to close


def test_non_finite_steps_are_skipped_then_stop(tmp_path, tiny_policy, monkeypatch):
    real = trainer_module.score_rollouts

    def nan_rewards(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        scored.rewards = torch.full((len(examples),), float("nan"))
        return scored

    monkeypatch.setattr(trainer_module, "score_rollouts", nan_rewards)
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    before = lora_weights(model)
    config = tiny_config(tmp_path, "train.steps=5", "train.max_bad_steps=2")
    trainer = Trainer(config, model, tokenizer, EXAMPLES, progress=False)
    with pytest.raises(TrainingError, match="2 consecutive steps"):
        trainer.train()
    assert trainer.skipped_updates == 2
    assert all(torch.equal(before[k], v) for k, v in lora_weights(model).items())
    rows = read_metrics(tmp_path)  # the bad steps are logged before the run stops
    assert [(r["step"], r["update_skipped"], r["skipped_updates"], r["loss"]) for r in rows] == [
        (1, 1, 1, None), (2, 1, 2, None)]


def test_non_finite_gradient_is_skipped_and_the_run_continues(tmp_path, tiny_policy, varied_rewards):
    """A finite loss with an infinite gradient (step 1 only): no update, logged, counted; step 2 trains."""
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    before = lora_weights(model)
    parameter = next(p for name, p in model.named_parameters() if "lora_B" in name)
    calls = []

    def poison_first_backward(grad):
        calls.append(1)
        return torch.full_like(grad, float("inf")) if len(calls) == 1 else grad

    parameter.register_hook(poison_first_backward)
    trainer = Trainer(tiny_config(tmp_path, "train.steps=3", "train.max_bad_steps=2", "train.micro_batch_size=8"),
                      model, tokenizer, EXAMPLES, progress=False)
    history = trainer.train()
    assert [(r["update_skipped"], r["skipped_updates"]) for r in history] == [(1, 1), (0, 1), (0, 1)]
    assert math.isfinite(history[0]["loss"]) and not math.isfinite(history[0]["grad_norm"])
    assert trainer.bad_steps == 0 and math.isfinite(history[1]["grad_norm"])
    assert any(not torch.equal(before[k], v) for k, v in lora_weights(model).items())
    assert [r["update_skipped"] for r in read_metrics(tmp_path)] == [1, 0, 0]


def test_fault_counters_survive_resume(tmp_path, tiny_policy, varied_rewards):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    trainer = Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, EXAMPLES, progress=False)
    trainer.skipped_updates, trainer.bad_steps = 4, 2
    trainer.save()
    resumed = Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, EXAMPLES, progress=False)
    assert (resumed.skipped_updates, resumed.bad_steps) == (4, 2)


def test_partial_checkpoints_are_ignored_and_damaged_ones_name_the_way_out(tmp_path, tiny_policy, varied_rewards):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    Trainer(tiny_config(tmp_path, "train.steps=2", "train.save_every=1"), model, tokenizer, EXAMPLES,
            progress=False).train()
    root = tmp_path / "checkpoints"
    # a run killed while writing step 3: a staging folder and no pointer update
    (root / ".staging-000003-99999" / "model").mkdir(parents=True)
    assert latest_checkpoint(tmp_path) == root / "step-000002"
    # a checkpoint folder without its manifest (copied by hand, half-deleted, ...) is not "complete"
    (root / "latest").unlink()
    (root / "step-000002" / "manifest.json").unlink()
    assert latest_checkpoint(tmp_path) == root / "step-000001"
    with pytest.raises(CheckpointError, match="partial: no manifest.json"):
        verify_checkpoint(root / "step-000002")
    # damage the newest one: resuming names it and the intact one before it
    (root / "latest").write_text("step-000002")
    with pytest.raises(CheckpointError, match=r"partial.*remove .*step-000002 \(intact: step-000001\)"):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, EXAMPLES, progress=False)
    # a new run into the folder is refused (it would log steps 1, 2 again); following the hint resumes from step 1
    with pytest.raises(TrainingError, match="already holds a run .*steps 1-2.*train.resume=true"):
        Trainer(tiny_config(tmp_path, "train.steps=3"), model, tokenizer, EXAMPLES, progress=False)
    shutil.rmtree(root / "step-000002")
    trainer = Trainer(tiny_config(tmp_path, "train.steps=3", "train.resume=true"), model, tokenizer, EXAMPLES,
                      progress=False)
    assert trainer.step_index == 1
    # the next save clears the staging leftover
    trainer.step_index = 3
    trainer.save()
    assert not list(root.glob(".staging-*")) and verify_checkpoint(root / "step-000003")["step"] == 3


def test_sampler_reshuffles_each_epoch_and_restores():
    sampler = ExampleSampler(5, seed=3)
    first_epoch = sampler.next(5)
    assert sorted(first_epoch) == list(range(5))
    second = sampler.next(3)
    clone = ExampleSampler(5, seed=3)
    clone.load_state_dict({"epoch": 1, "position": 3})
    assert clone.next(2) == sampler.next(2)
    assert len(second) == 3


def _ragged_rollout(tokenizer, prompts, lengths, width, seed=0):
    """A rollout of len(lengths) completions, row i with lengths[i] real tokens (the last one EOS) right-padded to
    `width`: the shape the engine returns when the rollout's longest answer is longer than a micro-batch's."""
    from fspo_lite.rollout.transformers_rollout import Rollout

    generator = torch.Generator().manual_seed(seed)
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    rows = len(lengths)
    repeat = rows // len(prompts)
    pad, eos = tokenizer.pad_token_id or 0, tokenizer.eos_token_id
    ids = torch.full((rows, width), pad, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, : length - 1] = torch.randint(10, 200, (length - 1,), generator=generator)
        ids[row, length - 1] = eos
        mask[row, :length] = 1
    return Rollout(encoded["input_ids"].repeat_interleave(repeat, 0), encoded["attention_mask"].repeat_interleave(
        repeat, 0), ids, mask, [""] * rows, repeat)


@pytest.mark.parametrize("share", [False, True])
def test_update_leaves_padding_columns_out_and_changes_nothing(tmp_path, tiny_policy, share):
    """speed.group_by_length sorts the rows longest first and runs each micro-batch only up to its longest
    completion: same loss, KL, entropy and adapter update as rollout order at full width, with narrower inputs
    (a forward hook reads their widths)."""
    _, tokenizer = tiny_policy
    prompts = ["Q: What is the capital of France?\nA:", "Q: Symbol of gold?\nA:"]
    lengths = [3, 5, 2, 4, 12, 7, 9, 1]  # sorted into micro-batches of 4: [12 9 7 5], [4 3 2 1]; 16 wide
    rollout = _ragged_rollout(tokenizer, prompts, lengths, width=16)
    advantages = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    results = {}
    for trim in (False, True):
        model = copy.deepcopy(tiny_policy[0])
        config = tiny_config(tmp_path / str(trim), f"speed.group_by_length={trim}", f"speed.share_prompt_pass={share}",
                             "train.beta=0.1", "train.micro_batch_size=4", "train.learning_rate=1e-2")
        trainer = Trainer(config, model, tokenizer, EXAMPLES, progress=False)
        widths, grads = [], []
        hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: widths.append(args[0].shape[1]))
        step = trainer.optimizer.step
        trainer.optimizer.step = lambda: (grads.append([p.grad.clone() for p in trainer.parameters]), step())
        metrics = trainer.update(rollout, advantages)
        hook.remove()
        results[trim] = (metrics, grads[0], widths)
    (full, full_grads, full_widths), (cut, cut_grads, cut_widths) = results[False], results[True]
    for key in ("loss", "kl", "entropy", "clip_fraction", "grad_norm"):
        assert cut[key] == pytest.approx(full[key], rel=1e-5, abs=1e-6), key
    assert len(cut_grads) == len(full_grads) > 0
    assert sum(g.norm() for g in full_grads) > 0  # (LoRA A's gradients are 0 while B is at its zero init)
    for grad, full_grad in zip(cut_grads, full_grads):  # summed in another order: float rounding only
        assert (grad - full_grad).norm() <= 1e-5 * full_grad.norm()
    # the same passes, and each one that runs completions is 16 - 12 = 4 or 16 - 4 = 12 columns narrower
    assert len(cut_widths) == len(full_widths)
    assert {a - b for a, b in zip(full_widths, cut_widths)} - {0} == {4, 12}


def test_micro_batches_by_hand():
    from fspo_lite.models.logprobs import micro_batches

    lengths = torch.tensor([3, 5, 2, 5, 0, 7])
    grouped = micro_batches(lengths, width=9, size=4)
    # longest first, ties in row order (stable): rows 5 (7), 1 (5), 3 (5), 0 (3) | 2 (2), 4 (0)
    assert [(rows.tolist(), width) for rows, width in grouped] == [([5, 1, 3, 0], 7), ([2, 4], 2)]
    plain = micro_batches(lengths, width=9, size=4, group_by_length=False)
    assert [(rows.tolist(), width) for rows, width in plain] == [([0, 1, 2, 3], 9), ([4, 5], 9)]
    empty = micro_batches(torch.tensor([0, 0]), width=4, size=4)  # no token at all: one column, never zero
    assert [(rows.tolist(), width) for rows, width in empty] == [([0, 1], 1)]
