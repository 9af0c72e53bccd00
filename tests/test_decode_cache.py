"""decode's preallocated KV cache (fspo_lite.speed.decoding.preallocate): the same tokens as the concatenating cache,
written in place (no copy of the cache per step), and right after rows leave the pass."""

from __future__ import annotations

import pytest
import torch

from fspo_lite.config import ModelConfig, RolloutConfig
from fspo_lite.speed.decoding import decode, preallocate, preallocated_layer_class
from fspo_lite.rollout.sampling import Sampling
from fspo_lite.models.policy import load_policy


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_policy(ModelConfig(name="tiny", lora=False), seed=0)
    return model.eval(), tokenizer


def test_preallocated_layer_writes_in_place_and_returns_the_concatenation():
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    first = torch.randn(3, 2, 5, 4)
    layer.update(first, first + 1)
    grown = preallocated_layer_class()(layer, room=4)
    start = grown.key_buffer.data_ptr()
    expected_keys, expected_values = first, first + 1
    for _ in range(6):  # two more than the room: the buffer grows once
        new = torch.randn(3, 2, 1, 4)
        keys, values = grown.update(new, new * 2)
        expected_keys, expected_values = torch.cat([expected_keys, new], -2), torch.cat([expected_values, new * 2], -2)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        if grown.get_seq_length() <= 9:
            assert grown.key_buffer.data_ptr() == start  # written in place, no copy of the cache
    assert grown.get_seq_length() == 11
    grown.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(grown.keys, expected_keys[[2, 0]]) and torch.equal(grown.values, expected_values[[2, 0]])


def test_preallocate_swaps_only_plain_dynamic_layers():
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = DynamicCache()
    for index in range(2):
        cache.update(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4), index)

    class Other(DynamicLayer):
        pass

    cache.layers.append(Other())
    assert preallocate(cache, 8) == 2
    assert [type(layer).__name__ for layer in cache.layers] == ["PreallocatedLayer", "PreallocatedLayer", "Other"]
    assert preallocate(object(), 8) == 0


@pytest.mark.parametrize("compact_at", [0.0, 1.0])
def test_decode_gives_the_same_tokens_with_and_without_preallocation(tiny, compact_at):
    model, tokenizer = tiny
    prompts = ["a b c", "question one two three four", "x", "the quick brown fox"]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    vocab = model.config.vocab_size
    eos = list(range(0, vocab, 11))  # many end ids: rows end at different steps, so compaction happens
    outputs = {}
    for preallocated in (False, True):
        torch.manual_seed(3)
        outputs[preallocated] = decode(model, encoded["input_ids"], encoded["attention_mask"],
                                       Sampling(24, eos, temperature=0.9), tokenizer.pad_token_id,
                                       compact_at=compact_at, preallocate_cache=preallocated)
    assert outputs[True].shape[1] > 1
    assert torch.equal(outputs[True], outputs[False])
    ended_early = (outputs[True] == tokenizer.pad_token_id).any(dim=1)
    assert ended_early.any()  # some row left the pass before the last step


def test_min_new_tokens_matches_generate_and_the_rollout_uses_decode_for_it(tiny):
    """generate_kwargs={"min_new_tokens": N} (bench/grpo_step.py forces the length so) stays on `decode`, with the
    tokens `generate` draws: no EOS before N tokens, the same random draws."""
    from fspo_lite.config import SpeedConfig
    from fspo_lite.speed.rollout import FastTransformersRollout

    model, tokenizer = tiny
    prompts = ["a b c", "question one two three four", "x", "the quick brown fox"]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    eos = list(range(0, model.config.vocab_size, 11))  # rows would end within a few tokens without the minimum
    torch.manual_seed(7)
    reference = model.generate(**encoded, max_new_tokens=12, min_new_tokens=9, eos_token_id=eos,
                               pad_token_id=tokenizer.pad_token_id, do_sample=True, temperature=0.9,
                               top_k=0)[:, encoded["input_ids"].shape[1]:]
    torch.manual_seed(7)
    mine = decode(model, encoded["input_ids"], encoded["attention_mask"],
                  Sampling(12, eos, temperature=0.9, min_new_tokens=9, draw="multinomial"),
                  tokenizer.pad_token_id)
    assert torch.equal(reference, mine)
    assert not torch.isin(mine[:, :9], torch.tensor(eos)).any()

    calls = []
    engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=6), SpeedConfig(),
                                     generate_kwargs={"min_new_tokens": 6})
    original = model.generate
    model.generate = lambda *args, **kwargs: calls.append(kwargs) or original(*args, **kwargs)
    try:
        rollout = engine.generate(prompts, 2)
    finally:
        del model.generate
    assert calls == [] and rollout.completion_lengths.tolist() == [6] * 8
