"""fspo_lite.rollout.llama_step: one decoding step in plain torch calls gives the model's own logits bit for bit,
and is refused wherever it would not (an active adapter, another attention, another architecture)."""

import pytest
import torch

from fspo_lite.config import ModelConfig
from fspo_lite.models.policy import load_policy, merged_lora_weights, tiny_model_config
from fspo_lite.models.prompt_cache import prompt_positions
from fspo_lite.rollout.decoding import decode, preallocate
from fspo_lite.rollout.llama_step import LlamaStep, llama_step
from fspo_lite.rollout.sampling import Sampling


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
