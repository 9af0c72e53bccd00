"""The transformers engine's sampler log-probs (rollout.use_sampler_logprobs) and its lower-precision copy
(speed.sampler_dtype=bfloat16): the log-probs are the trainer's for the drawn tokens, asking for them draws the
same tokens, the copy follows every update of the policy, and the rules that tie the knobs together."""

import pytest
import torch

from fspo_lite.config import ConfigError, ModelConfig, RolloutConfig, SpeedConfig, load_config
from fspo_lite.models.logprobs import completion_logprobs
from fspo_lite.models.policy import load_policy
from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.speed.rollout import FastTransformersRollout

PROMPTS = ["Question: which river flows through Paris? Answer:", "Q: 2+2?"]


@pytest.fixture()
def policy():
    model, tokenizer = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8), seed=0)
    torch.manual_seed(1)
    with torch.no_grad():  # a non-zero adapter, so the copy has something to follow
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return model, tokenizer


def _rollout(model, tokenizer, seed=0, sampler_dtype="policy", **settings):
    engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=8, temperature=0.7, **settings),
                                     SpeedConfig(sampler_dtype=sampler_dtype))
    torch.manual_seed(seed)
    return engine, engine.generate(PROMPTS, num_samples=3)


def _trainer_logprobs(model, rollout, temperature=0.7):
    with torch.no_grad():
        logp, _ = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                      rollout.completion_mask, temperature=temperature)
    return logp


def test_decoding_loop_logprobs_are_the_trainers_and_change_no_draw(policy):
    model, tokenizer = policy
    _, plain = _rollout(model, tokenizer)
    _, with_logprobs = _rollout(model, tokenizer, use_sampler_logprobs=True)
    assert plain.sampling_logprobs is None
    assert torch.equal(plain.completion_ids, with_logprobs.completion_ids)  # asking for them draws the same tokens
    mask = with_logprobs.completion_mask.bool()
    sampled = with_logprobs.sampling_logprobs
    assert sampled.shape == with_logprobs.completion_ids.shape and bool((sampled[~mask] == 0).all())
    assert bool((sampled[mask] < 0).all())
    torch.testing.assert_close(sampled[mask], _trainer_logprobs(model, with_logprobs)[mask], atol=1e-4, rtol=1e-4)


def test_bfloat16_copy_follows_the_policy_and_stays_near_it(policy):
    model, tokenizer = policy
    engine, rollout = _rollout(model, tokenizer, use_sampler_logprobs=True, sampler_dtype="bfloat16")
    copy = engine._copy
    assert copy is not None and copy is not model
    assert {p.dtype for p in copy.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the policy itself is untouched
    mask = rollout.completion_mask.bool()
    gap = (rollout.sampling_logprobs - _trainer_logprobs(model, rollout))[mask].abs()
    assert 0 < gap.max() < 0.1  # the copy's rounding is there, and small
    with torch.no_grad():  # an update of the policy's adapter reaches the copy at the next rollout
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.add_(0.5)
    engine.generate(PROMPTS[:1], num_samples=1)
    policy_weights, copy_weights = dict(model.named_parameters()), dict(copy.named_parameters())
    for name, parameter in policy_weights.items():
        if "lora_B" in name:
            assert torch.equal(copy_weights[name], parameter.detach().to(torch.bfloat16)), name


@pytest.mark.parametrize("overrides, message", [
    (["speed.sampler_dtype=bfloat16"], "use_sampler_logprobs=true"),
    (["speed.sampler_dtype=bfloat16", "rollout.use_sampler_logprobs=true", "train.ppo_epochs=2"], "ppo_epochs=1"),
    (["speed.sampler_dtype=bfloat16", "rollout.use_sampler_logprobs=true", "rollout.engine=vllm"],
     "rollout.engine is transformers"),
    (["speed.sampler_dtype=bfloat16", "rollout.use_sampler_logprobs=true", "model.load_in_4bit=true"], "4-bit"),
    (["speed.sampler_dtype=float16"], "policy | bfloat16"),
])
def test_sampler_dtype_rules_fail_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match="speed.sampler_dtype") as error:
        load_config("configs/tiny.yaml", overrides)
    assert message in str(error.value)


def test_sampler_logprobs_with_several_epochs_fail_for_every_engine():
    """mu > 1 takes pi_old from the trainer's own pass, so the sampler's log-probs would be ignored: refused at load
    (vLLM engines refused it before; the transformers engine's log-probs are new)."""
    for engine in ("transformers", "vllm"):
        with pytest.raises(ConfigError, match="rollout.use_sampler_logprobs.*ppo_epochs=1"):
            load_config("configs/tiny.yaml", [f"rollout.engine={engine}", "rollout.use_sampler_logprobs=true",
                                              "train.ppo_epochs=2"])


def test_sampler_logprobs_need_the_decoding_loop(policy):
    model, tokenizer = policy
    with pytest.raises(ValueError, match="drop_ended_rows=true"):
        FastTransformersRollout(model, tokenizer, RolloutConfig(use_sampler_logprobs=True),
                                SpeedConfig(drop_ended_rows=False))
    with pytest.raises(ValueError, match="plain weights"):
        TransformersRollout(model, tokenizer, RolloutConfig(use_sampler_logprobs=True), plain_model=False)
    # the reference loop gives them too
    torch.manual_seed(0)
    reference = TransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=8, temperature=0.7,
                                                                    use_sampler_logprobs=True)).generate(PROMPTS, 3)
    _, fast = _rollout(model, tokenizer, use_sampler_logprobs=True)
    assert torch.equal(reference.completion_ids, fast.completion_ids)
    torch.testing.assert_close(reference.sampling_logprobs, fast.sampling_logprobs, atol=1e-5, rtol=1e-5)


def test_training_with_the_bfloat16_sampler_runs(tmp_path):
    from fspo_lite.data.examples import QAExample
    from fspo_lite.update.trainer import Trainer

    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", "train.steps=2",
                                               "speed.sampler_dtype=bfloat16", "rollout.use_sampler_logprobs=true"])
    examples = [QAExample(str(i), f"What is {i} plus {i}?", [str(2 * i)], f"{i} plus {i} is {2 * i}.")
                for i in range(4)]
    history = Trainer(config, train_examples=examples, progress=False).train()
    assert len(history) == 2 and all(row["loss"] == row["loss"] for row in history)  # finite, not NaN
