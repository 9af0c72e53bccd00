"""What the rollout engines share (fspo_lite.rollout.sampling): the Sampling record of one generate call, read off the
rollout section, and the copy of that section every engine keeps."""

import pytest

from fspo_lite.config import RolloutConfig
from fspo_lite.rollout.sampling import Engine, Sampling
from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.rollout.vllm_rollout import sampling_arguments
from fspo_lite.rollout.vllm_server import VLLMServerRollout


def test_sampling_comes_from_the_rollout_section_unless_the_call_says_otherwise():
    engine = Engine("model", "tokenizer", RolloutConfig(max_new_tokens=40, temperature=0.7, top_p=0.9), 128)
    assert (engine.model, engine.tokenizer, engine.max_prompt_tokens) == ("model", "tokenizer", 128)
    assert engine.sampling([2, 5]) == Sampling(40, [2, 5], True, 0.7, 0.9, 0)
    assert engine.sampling((2,), do_sample=False, max_new_tokens=8, min_new_tokens=3) == Sampling(8, [2], False, 0.7,
                                                                                                   0.9, 3)
    assert engine.sampling([2], max_new_tokens=None).max_new_tokens == 40  # None (or 0): the section's limit


def test_an_engine_keeps_its_own_copy_of_the_section():
    section = RolloutConfig(temperature=0.5)
    engine = Engine(None, None, section)
    section.temperature = 2.0  # the config edited after the engine was built (as a copied value was before)
    assert engine.rollout.temperature == 0.5 and engine.sampling([0]).temperature == 0.5


def test_sharded_or_unsloth_models_get_the_reference_engine_and_generate():
    from fspo_lite.config import SpeedConfig
    from fspo_lite.speed import transformers_engine
    from fspo_lite.speed.rollout import FastTransformersRollout

    section = RolloutConfig(generation_batch_size=12)
    plain = transformers_engine(None, None, section, speed=SpeedConfig())
    other = transformers_engine(None, None, section, plain_model=False, speed=SpeedConfig())
    off = transformers_engine(None, None, section, speed=SpeedConfig(mode="off"))
    assert type(plain) is FastTransformersRollout and type(other) is type(off) is TransformersRollout
    assert not other.own_loop(None) and off.own_loop(None)  # generate as it is, or the reference loop
    assert plain.generation_batch_size == other.generation_batch_size == 12


def test_one_sampling_record_feeds_the_vllm_request():
    record = Sampling(16, [2, 7], True, 0.8, 0.95)
    assert sampling_arguments(record, 3, with_logprobs=False) == {
        "n": 3, "max_tokens": 16, "stop_token_ids": [2, 7], "temperature": 0.8, "top_p": 0.95,
        "skip_special_tokens": True}


def test_the_server_engine_needs_a_url_in_its_section():
    with pytest.raises(ValueError, match="vllm_server_url"):
        VLLMServerRollout(None, None, RolloutConfig())
