"""Generation with the LoRA adapter merged into new weight tensors (fspo_lite.speed.lora_merge.merged_lora_weights)."""

import pytest
import torch

from fspo_lite.config import RolloutConfig, SpeedConfig, load_config
from fspo_lite.speed.lora_merge import merged_lora_weights
from fspo_lite.models.policy import load_policy
from fspo_lite.speed.rollout import FastTransformersRollout


def _policy(*overrides):
    config = load_config("configs/tiny.yaml", ["model.lora=true", *overrides])
    model, tokenizer = load_policy(config.model, seed=0)
    torch.manual_seed(1)
    with torch.no_grad():  # a non-zero adapter, so merged and unmerged outputs differ from the base model
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return model.eval(), tokenizer


def _base_weights(model):
    return {name: p.detach().clone() for name, p in model.named_parameters() if "base_layer.weight" in name}


def _lora_calls(model):
    calls = []
    hooks = [m.register_forward_hook(lambda *_: calls.append(1)) for n, m in model.named_modules()
             if n.endswith("lora_A.default")]
    return calls, hooks


@pytest.fixture(scope="module")
def policy():
    return _policy()


def test_merged_weights_give_the_adapter_outputs_and_leave_the_base_untouched(policy):
    model, _ = policy
    ids = torch.randint(3, 200, (2, 12))
    before = _base_weights(model)
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with model.disable_adapter():
            base_only = model(input_ids=ids).logits
        calls, hooks = _lora_calls(model)
        with merged_lora_weights(model):
            merged = model(input_ids=ids).logits
        inside_calls = len(calls)
        after = model(input_ids=ids).logits
        for hook in hooks:
            hook.remove()
    assert (adapted - base_only).abs().max() > 1e-3  # the adapter matters
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=1e-5)
    assert inside_calls == 0  # the adapter branch is off while merged
    assert torch.equal(after, adapted)  # and back on, unchanged, afterwards
    for name, weight in _base_weights(model).items():
        assert torch.equal(weight, before[name]), name  # bit-identical: no in-place merge/unmerge


def test_weights_are_restored_when_generation_fails(policy):
    model, _ = policy
    before = _base_weights(model)
    with pytest.raises(RuntimeError, match="boom"):
        with merged_lora_weights(model):
            raise RuntimeError("boom")
    for name, weight in _base_weights(model).items():
        assert torch.equal(weight, before[name])
    assert all(not getattr(m, "disable_adapters", False) for m in model.modules() if hasattr(m, "lora_A"))


def test_greedy_rollout_is_the_same_with_the_adapter_merged(policy):
    model, tokenizer = policy
    prompts = ["Question: which river flows through Paris? Answer:", "Q: 2+2?"]
    rollouts = []
    for merge in (False, True):
        engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=10),
                                         SpeedConfig(merge_lora_for_generation=merge))
        rollouts.append(engine.generate(prompts, 2, do_sample=False))
    assert torch.equal(rollouts[0].completion_ids, rollouts[1].completion_ids)


def test_plain_lora_adapter_takes_only_scaling_times_b_of_a():
    """The one check the merge and the packed decoding step share: DoRA and a LoRA bias are refused, per adapter."""
    from peft import LoraConfig, get_peft_model

    from fspo_lite.speed.lora_merge import plain_lora_adapter
    from fspo_lite.models.policy import load_model

    def first_lora_layer(**options):
        model = get_peft_model(load_model(load_config("configs/tiny.yaml").model),
                               LoraConfig(r=4, target_modules=["q_proj"], **options))
        return next(m for m in model.modules() if hasattr(m, "lora_A"))

    assert plain_lora_adapter(first_lora_layer(), "default")
    assert not plain_lora_adapter(first_lora_layer(use_dora=True), "default")
    assert not plain_lora_adapter(first_lora_layer(lora_bias=True), "default")


def test_layers_it_cannot_merge_keep_the_adapter_branch():
    from peft import LoraConfig, get_peft_model

    from fspo_lite.models.policy import load_model

    dora = get_peft_model(load_model(load_config("configs/tiny.yaml").model),
                          LoraConfig(r=4, target_modules=["q_proj"], use_dora=True)).eval()
    ids = torch.randint(3, 200, (1, 6))
    calls, hooks = _lora_calls(dora)
    with torch.no_grad(), merged_lora_weights(dora):
        dora(input_ids=ids)
    for hook in hooks:
        hook.remove()
    assert len(calls) > 0  # DoRA is not merged this way: its branch still runs
    plain = load_model(load_config("configs/tiny.yaml").model)  # no adapter at all: a no-op
    with merged_lora_weights(plain):
        assert plain(input_ids=ids).logits.shape[-1] > 0


def test_a_bfloat16_model_merges_in_its_own_dtype():
    """peft keeps the adapter in float32, so W + delta is float32; the merged matrix must go back to W's
    bfloat16, or the first generation of a `model.dtype=bfloat16` LoRA run fails with a dtype mismatch."""
    model, _ = _policy("model.dtype=bfloat16")
    ids = torch.randint(3, 200, (2, 8))
    weights = [m.get_base_layer().weight for n, m in model.named_modules() if n.endswith("q_proj") and hasattr(m, "lora_A")]
    assert weights and all(w.dtype == torch.bfloat16 for w in weights)
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with merged_lora_weights(model):
            assert all(m.get_base_layer().weight.dtype == torch.bfloat16 for n, m in model.named_modules()
                       if n.endswith("q_proj") and hasattr(m, "lora_A"))
            merged = model(input_ids=ids).logits
    assert merged.dtype == adapted.dtype == torch.bfloat16
    torch.testing.assert_close(merged.float(), adapted.float(), atol=0.1, rtol=0.05)  # bfloat16 rounding of W + delta
