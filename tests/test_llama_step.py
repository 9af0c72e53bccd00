"""fspo_lite.speed.llama_step: one decoding step in plain torch calls gives the model's own logits bit for bit,
and is refused wherever it would not (an active adapter, another attention, another architecture); with weights
packed for MKL, the same logits up to float rounding."""

import pytest
import torch
import torch.nn.functional as F

from fspo_lite.config import ModelConfig
from fspo_lite.machine import cpuinfo_fields
from fspo_lite.models.logprobs import prompt_positions
from fspo_lite.models.policy import load_policy, tiny_model_config
from fspo_lite.rollout.sampling import Sampling
from fspo_lite.speed import llama_step as llama_step_module
from fspo_lite.speed.decoding import decode, preallocate
from fspo_lite.speed.llama_step import (LlamaStep, Projection, WeightPacks, _low_rank, llama_step,
                                        mkl_packing_available, packing_applies, wants_packed_weights,
                                        weight_packs_for)
from fspo_lite.speed.lora_merge import merged_lora_weights


def tiny_model(config_class=None, **overrides):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = tiny_model_config(97, **overrides) if config_class is None else config_class(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=256, **overrides)
    config._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


def step_pairs(model, prompt_ids, mask, steps=5):
    """(the model's logits, LlamaStep's logits) for `steps` greedy steps after the prompt, each on its own copy of
    the same preallocated cache."""
    fast = llama_step(model)
    assert isinstance(fast, LlamaStep)
    output = model(input_ids=prompt_ids, attention_mask=mask, position_ids=prompt_positions(mask), use_cache=True)
    caches = [output.past_key_values, model(input_ids=prompt_ids, attention_mask=mask, use_cache=True,
                                            position_ids=prompt_positions(mask)).past_key_values]
    for cache in caches:
        assert preallocate(cache, steps) == len(cache.layers)
    ids = output.logits[:, -1].argmax(-1, keepdim=True)
    pairs = []
    for _ in range(steps):
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        positions = prompt_positions(mask)[:, -1:]
        theirs = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=caches[0],
                       use_cache=True, logits_to_keep=1).logits
        mine = fast.logits(ids, mask, positions, caches[1])
        pairs.append((theirs, mine))
        ids = theirs[:, -1].argmax(-1, keepdim=True)
    return pairs


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("kv_heads", [2, 4])
def test_llama_logits_are_the_models_bit_for_bit(padded, kv_heads):
    model = tiny_model(num_key_value_heads=kv_heads)
    torch.manual_seed(1)
    ids = torch.randint(3, 97, (3, 9))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :4] = 0
        mask[2, :1] = 0
    with torch.no_grad():
        for theirs, mine in step_pairs(model, ids, mask):
            assert theirs.shape == mine.shape and torch.equal(theirs, mine)


def test_qwen2_projection_biases_are_applied():
    from transformers import Qwen2Config

    model = tiny_model(Qwen2Config, num_key_value_heads=2, use_sliding_window=False, sliding_window=None)
    with torch.no_grad():
        for layer in model.model.layers:  # random biases, so that leaving one out would show
            layer.self_attn.q_proj.bias.normal_()
            layer.self_attn.k_proj.bias.normal_()
        ids = torch.randint(3, 97, (2, 6))
        mask = torch.ones_like(ids)
        mask[1, :2] = 0
        for theirs, mine in step_pairs(model, ids, mask, steps=3):
            assert torch.equal(theirs, mine)


def test_refused_where_it_would_not_compute_the_models_logits():
    from transformers import GPT2Config, GPT2LMHeadModel

    assert llama_step(tiny_model()) is not None
    eager = tiny_model()
    eager.config._attn_implementation = "eager"
    assert llama_step(eager) is None  # eager attention sums in another order
    assert llama_step(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))) is None
    policy, _ = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))
    assert llama_step(policy) is None  # the adapter is on: its branch would be left out
    with merged_lora_weights(policy):
        assert llama_step(policy) is not None  # merged into the base weights, adapter off


def test_a_lora_policy_decodes_the_same_tokens_with_and_without_it():
    policy, tokenizer = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)  # a non-zero delta, so that the merge matters
    policy.eval()
    encoded = tokenizer(["one two three", "a"], return_tensors="pt", padding=True, padding_side="left")
    drawn = []
    for fast in (True, False):
        torch.manual_seed(5)
        with merged_lora_weights(policy):
            drawn.append(decode(policy, encoded["input_ids"], encoded["attention_mask"],
                                Sampling(12, [tokenizer.eos_token_id], True, 0.9, 1.0), tokenizer.pad_token_id,
                                fast_steps=fast))
    assert torch.equal(drawn[0], drawn[1])


def test_more_than_one_token_per_row_is_refused():
    model = tiny_model()
    ids = torch.randint(3, 97, (1, 4))
    cache = model(input_ids=ids, use_cache=True).past_key_values
    preallocate(cache, 4)
    with pytest.raises(ValueError, match="one token per row"):
        llama_step(model).logits(ids[:, :2], torch.ones(1, 6, dtype=torch.long), torch.tensor([[4, 5]]), cache)


needs_mkl = pytest.mark.skipif(not mkl_packing_available(), reason="this torch has no MKL packed product")


@needs_mkl
@pytest.mark.parametrize("rows", [1, 3, 8, 16, 40])
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_packed_projection_computes_the_linear_layer(rows, with_bias):
    torch.manual_seed(rows)
    weights = [torch.randn(96, 80), torch.randn(32, 80)]
    biases = [torch.randn(96), torch.randn(32)] if with_bias else [None, None]
    packs = WeightPacks()
    for group in ([0], [0, 1]):  # one weight, and two stacked (a stand-in weight then)
        weight, packed = packs.get([weights[i] for i in group], rows=16)  # packed for 16 rows, used with any count
        bias = torch.cat([biases[i] for i in group]) if with_bias else None
        projection = Projection(weight, bias, packed)
        full_weight = torch.cat([weights[i] for i in group])
        for x in (torch.randn(rows, 80), torch.randn(rows, 1, 80)):
            expected = x.double() @ full_weight.double().T + (bias.double() if with_bias else 0)
            got = projection(x)
            assert got.shape == expected.shape and got.dtype == torch.float32
            assert torch.allclose(got.double(), expected, rtol=1e-5, atol=1e-5)


@needs_mkl
def test_weight_packs_are_kept_until_a_weight_changes():
    weights = [torch.randn(16, 8), torch.randn(4, 8)]
    packs = WeightPacks()
    first = packs.get(weights, rows=4)
    assert packs.get(weights, rows=4)[1] is first[1]  # kept
    assert first[0].shape == (20, 8) and first[0].stride() == (0, 0)  # a stand-in: no memory
    with torch.no_grad():
        weights[1].add_(1.0)  # an optimizer step: the version counter moves
    again = packs.get(weights, rows=4)
    assert again[1] is not first[1]
    x = torch.randn(3, 8)
    assert torch.allclose(Projection(again[0], None, again[1])(x), F.linear(x, torch.cat(weights)), rtol=1e-5,
                          atol=1e-5)


def test_the_low_rank_term_places_each_adapter_in_its_projections_rows():
    torch.manual_seed(0)
    a1, b1, a2, b2 = torch.randn(2, 6), torch.randn(5, 2), torch.randn(3, 6), torch.randn(4, 3)
    down, up = _low_rank([[(a1, b1, 0.5)], [], [(a2, b2, 2.0)]], [5, 7, 4])
    x = torch.randn(3, 6)
    got = F.linear(F.linear(x, down), up)
    expected = torch.cat([0.5 * x @ a1.T @ b1.T, torch.zeros(3, 7), 2.0 * x @ a2.T @ b2.T], dim=1)
    assert torch.allclose(got, expected, atol=1e-5)
    assert _low_rank([[], []], [5, 7]) is None
    weight = torch.randn(16, 6)  # no pack: F.linear plus the low-rank term
    assert torch.allclose(Projection(weight, None, None, (down, up))(x), F.linear(x, weight) + got)


def lora_policy():
    policy, tokenizer = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))
    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)  # a non-zero delta, so that leaving the adapter out would show
    return policy.eval(), tokenizer


@needs_mkl
@pytest.mark.parametrize("padded", [True, False])
def test_packed_logits_with_the_adapter_on_are_the_models_up_to_float_rounding(padded):
    policy, _ = lora_policy()
    assert packing_applies(policy)
    torch.manual_seed(1)
    ids = torch.randint(3, 97, (3, 9))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :4] = 0
    fast = llama_step(policy, WeightPacks(), rows=3)
    assert isinstance(fast, LlamaStep) and fast.head.packed is not None and fast.layers[0][2].low_rank is not None
    with torch.no_grad():
        output = policy(input_ids=ids, attention_mask=mask, position_ids=prompt_positions(mask), use_cache=True)
        caches = [output.past_key_values, policy(input_ids=ids, attention_mask=mask, use_cache=True,
                                                 position_ids=prompt_positions(mask)).past_key_values]
        for cache in caches:
            preallocate(cache, 3)
        step_ids = output.logits[:, -1].argmax(-1, keepdim=True)
        mask = torch.cat([mask, mask.new_ones(3, 1)], dim=1)
        positions = prompt_positions(mask)[:, -1:]
        theirs = policy(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=caches[0],
                        use_cache=True, logits_to_keep=1).logits
        mine = fast.logits(step_ids, mask, positions, caches[1])
        with policy.disable_adapter():  # the adapter's term matters here
            without = policy(input_ids=step_ids, attention_mask=mask, position_ids=positions,
                             past_key_values=caches[0], use_cache=True, logits_to_keep=1).logits
    assert mine.shape == theirs.shape
    assert torch.allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(without, theirs, rtol=1e-4, atol=1e-5)


def test_packing_is_refused_where_it_would_not_compute_the_models_logits():
    policy, _ = lora_policy()
    assert packing_applies(policy) == mkl_packing_available()
    assert not packing_applies(tiny_model().to(torch.bfloat16))
    with merged_lora_weights(policy):
        assert packing_applies(policy) == mkl_packing_available()  # adapter off: plain weights
    policy.train()  # dropout would be on
    for module in policy.modules():
        if hasattr(module, "lora_dropout"):
            module.lora_dropout["default"] = torch.nn.Dropout(0.1)
    assert not packing_applies(policy)


@needs_mkl
def test_the_engines_of_one_model_share_kept_packs_and_give_the_same_greedy_tokens():
    from fspo_lite.config import RolloutConfig, SpeedConfig
    from fspo_lite.speed.rollout import FastTransformersRollout

    policy, tokenizer = lora_policy()
    texts = {}
    for packed in (False, True):
        engine = FastTransformersRollout(policy, tokenizer, RolloutConfig(max_new_tokens=8),
                                         SpeedConfig(packed_weights=packed))
        texts[packed] = engine.generate(["one two three", "a b"], 2, do_sample=False).texts
        assert bool(weight_packs_for(policy)._packs) == packed  # packs made, and only when asked for
    kept = dict(weight_packs_for(policy)._packs)
    other = FastTransformersRollout(policy, tokenizer, RolloutConfig(max_new_tokens=8),
                                    SpeedConfig(packed_weights=True))  # e.g. the evaluation's engine
    other.generate(["one two three"], 1, do_sample=False)
    assert all(weight_packs_for(policy)._packs[k][3] is v[3] for k, v in kept.items())  # the same packs again
    assert texts[True] == texts[False]


INTEL_CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"


@pytest.mark.parametrize("text, vendor", [
    (INTEL_CPUINFO, "GenuineIntel"),
    ("processor : 0\nvendor_id : AuthenticAMD\nflags : avx2 vendor_id\n", "AuthenticAMD"),
    ("vendor_id\t: first\nvendor_id\t: second\n", "first"),  # the first one counts
    ("", None),                                                    # empty
    ("vendor_id\t:\nvendor_id\t:   \n", None),                   # named but blank
    ("vendor_id GenuineIntel\nmodel name: vendor_id: x\n", None),  # no colon after the key; the key elsewhere
    ("\x00\ufffd\ufffd: :\n:::\n", None),                         # garbage
    ("Processor\t: ARMv7 Processor rev 4 (v7l)\nCPU implementer\t: 0x41\n", None),  # an ARM board
])
def test_vendor_from_cpuinfo(text, vendor):
    assert cpuinfo_fields(text).get("vendor_id") == vendor


def test_packed_weights_default_packs_on_intel_only_and_true_or_false_force_it(monkeypatch):
    for vendor, default in (("GenuineIntel", True), ("AuthenticAMD", False), (None, False)):
        monkeypatch.setattr(llama_step_module, "cpu_vendor", lambda vendor=vendor: vendor)
        assert wants_packed_weights(None) is default
        assert wants_packed_weights(True) is True and wants_packed_weights(False) is False


def test_the_default_engine_packs_by_the_vendor_rule(monkeypatch):
    """speed.packed_weights=null through FastTransformersRollout: packs made for the bundled model on an 'Intel' CPU,
    none on an 'AMD' one (merged LoRA copies instead), and the same greedy tokens either way."""
    from fspo_lite.config import RolloutConfig, SpeedConfig, load_config
    from fspo_lite.speed.rollout import FastTransformersRollout

    if not mkl_packing_available():
        pytest.skip("this torch has no MKL packed product")
    config = load_config("configs/tiny.yaml", ["model.name=smollm2-135m", "model.lora=true"])
    policy, tokenizer = load_policy(config.model)
    made = []
    real = llama_step_module.weight_packs_for
    monkeypatch.setattr("fspo_lite.speed.rollout.weight_packs_for",
                        lambda model: made.append(model) or real(model))
    tokens = {}
    for vendor in ("GenuineIntel", "AuthenticAMD"):
        monkeypatch.setattr(llama_step_module, "cpu_vendor", lambda vendor=vendor: vendor)
        engine = FastTransformersRollout(policy, tokenizer, RolloutConfig(max_new_tokens=6), SpeedConfig(),
                                         progress=False)
        tokens[vendor] = engine.generate(["The capital of France is"], num_samples=2, do_sample=False).completion_ids
        assert len(made) == 1  # packed for the Intel run only
    assert torch.equal(tokens["GenuineIntel"], tokens["AuthenticAMD"])

