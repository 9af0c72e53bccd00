"""The decoding loops: the reference loop (fspo_lite.rollout.decoding.sample) and the fast one with ended rows taken out
of the pass (fspo_lite.speed.decoding.decode) give the same tokens and the same random stream as `model.generate`;
hand-computed logits processing and draws; the cases where the engines keep `generate`."""

import math

import pytest
import torch

from fspo_lite.config import ModelConfig, RolloutConfig, SpeedConfig
from fspo_lite.models.policy import load_policy
from fspo_lite.rollout.decoding import DRAWS, draw_tokens, plain_sampling, process_logits, race_tokens, sample
from fspo_lite.rollout.sampling import Sampling
from fspo_lite.rollout.transformers_rollout import TransformersRollout, eos_ids
from fspo_lite.speed.decoding import decode
from fspo_lite.speed.rollout import FastTransformersRollout

PROMPTS = ["Question: which river flows through Paris? Answer:", "Q: 2+2?", "Name a metal that is liquid at room temperature."]


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_policy(ModelConfig(name="tiny", lora=False), seed=0)
    return model.eval(), tokenizer


def ending_ids(tokenizer, share: int = 6) -> list[int]:
    """Every `share`-th token id counts as EOS, so the random tiny model's rows end at many different steps
    (with the real EOS alone they would all run to the limit and nothing would be dropped)."""
    return list(range(0, len(tokenizer), share))


def both(model, tokenizer, eos, do_sample, temperature=0.7, top_p=1.0, max_new_tokens=24, samples=3, loop=decode,
         **options):
    """(generate's new tokens, the loop's new tokens), each from the same seed, and whether the random stream
    ends in the same state."""
    rows = [p for p in PROMPTS for _ in range(samples)]
    encoded = tokenizer(rows, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    pad = tokenizer.pad_token_id
    sampling = dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0) if do_sample else dict(
        do_sample=False, temperature=None, top_p=None, top_k=None)
    torch.manual_seed(3)
    reference = model.generate(**encoded, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad,
                               **sampling)[:, encoded["input_ids"].shape[1]:]
    after_reference = torch.rand(4)
    torch.manual_seed(3)
    mine = loop(model, encoded["input_ids"], encoded["attention_mask"],
                Sampling(max_new_tokens, eos, do_sample, temperature, top_p, draw="multinomial"), pad, **options)
    return reference, mine, torch.equal(after_reference, torch.rand(4))


@pytest.mark.parametrize("do_sample,top_p", [(True, 1.0), (True, 0.8), (False, 1.0)])
@pytest.mark.parametrize("compact_at", [0.0, 0.125, 1.0])
def test_decode_gives_generates_tokens_and_random_stream(tiny, do_sample, top_p, compact_at):
    model, tokenizer = tiny
    reference, mine, same_stream = both(model, tokenizer, ending_ids(tokenizer), do_sample, top_p=top_p,
                                        compact_at=compact_at)
    lengths = (reference != tokenizer.pad_token_id).sum(1)
    assert lengths.min() < lengths.max()  # rows end at different steps: the dropping is exercised
    assert torch.equal(reference, mine) and same_stream


@pytest.mark.parametrize("do_sample,top_p", [(True, 1.0), (True, 0.8), (False, 1.0)])
def test_the_reference_loop_gives_generates_tokens_and_random_stream(tiny, do_sample, top_p):
    model, tokenizer = tiny
    reference, mine, same_stream = both(model, tokenizer, ending_ids(tokenizer), do_sample, top_p=top_p, loop=sample)
    lengths = (reference != tokenizer.pad_token_id).sum(1)
    assert lengths.min() < lengths.max()
    assert torch.equal(reference, mine) and same_stream


def test_decode_on_a_prefilled_cache_gives_generates_tokens(tiny):
    from fspo_lite.speed.prompt_cache import distinct_prompts, shared_prompt_pass

    model, tokenizer = tiny
    rows = [p for p in PROMPTS for _ in range(3)]
    encoded = tokenizer(rows, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    eos, pad = ending_ids(tokenizer), tokenizer.pad_token_id
    torch.manual_seed(5)
    reference = model.generate(**encoded, max_new_tokens=20, eos_token_id=eos, pad_token_id=pad, do_sample=True,
                               temperature=0.7, top_k=0)[:, ids.shape[1]:]
    cache, _ = shared_prompt_pass(model, ids[:, :-1], mask[:, :-1], distinct_prompts(ids, mask))
    torch.manual_seed(5)
    mine = decode(model, ids, mask, Sampling(20, eos, True, 0.7, 1.0, draw="multinomial"), pad, past_key_values=cache,
                  compact_at=0.0)
    assert torch.equal(reference, mine)


def test_rollout_is_the_same_with_and_without_dropping_ended_rows(tiny):
    model, tokenizer = tiny
    model.generation_config.eos_token_id = ending_ids(tokenizer)  # eos_ids() reads the generation config too
    try:
        rollouts = []
        for drop in (False, True):
            torch.manual_seed(11)
            engine = FastTransformersRollout(model, tokenizer, RolloutConfig(
                max_new_tokens=16, temperature=0.9, draw="multinomial", generation_batch_size=4),
                SpeedConfig(drop_ended_rows=drop))
            rollouts.append(engine.generate(PROMPTS, 3))
    finally:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    assert rollouts[0].completion_lengths.tolist() != [16] * 9
    assert torch.equal(rollouts[0].completion_ids, rollouts[1].completion_ids)
    assert torch.equal(rollouts[0].completion_mask, rollouts[1].completion_mask)
    assert rollouts[0].texts == rollouts[1].texts


def test_process_logits_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    assert torch.allclose(process_logits(logits, 2.0, 1.0), torch.tensor([[1.0, 0.5, 0.0]]))
    # temperature 2: probabilities e^1, e^0.5, e^0 over their sum = 0.506, 0.307, 0.186; top_p 0.6 drops the
    # tokens whose ascending cumulative probability stays <= 0.4: only the last one (0.186; 0.186 + 0.307 > 0.4)
    kept = process_logits(logits, 2.0, 0.6)
    assert kept[0, :2].tolist() == [1.0, 0.5] and kept[0, 2] == -math.inf
    # top_p 0.3: 0.186 + 0.307 = 0.493 <= 0.7, so both smaller ones go; the top token always stays
    assert process_logits(logits, 2.0, 0.3)[0].tolist() == [1.0, -math.inf, -math.inf]
    assert process_logits(logits, 2.0, 0.01)[0, 0] == 1.0


def test_transformers_warpers_agree_with_process_logits():
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(5, 50) * 3
    expected = TopPLogitsWarper(0.7)(None, TemperatureLogitsWarper(0.6)(None, logits))
    assert torch.equal(process_logits(logits, 0.6, 0.7), expected)


def test_sampling_at_temperature_zero_is_refused(tiny):
    model, tokenizer = tiny
    ids = torch.tensor([[1, 2, 3]])
    for loop in (decode, sample):
        with pytest.raises(ValueError, match="temperature above 0"):
            loop(model, ids, torch.ones_like(ids), Sampling(4, [0], do_sample=True, temperature=0.0), 0)


def test_a_generation_config_with_other_logits_settings_keeps_generate(tiny):
    from transformers import GenerationConfig

    model, tokenizer = tiny
    assert plain_sampling(GenerationConfig()) and plain_sampling(None)
    assert not plain_sampling(GenerationConfig(repetition_penalty=1.05))  # Qwen2.5-Instruct's setting
    assert not plain_sampling(GenerationConfig(min_new_tokens=2))
    # greedy, where the random tiny model repeats tokens, with a penalty large enough to change its choices
    model.generation_config.repetition_penalty = 20.0
    try:
        texts = []
        for drop in (False, True):
            engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=24),
                                             SpeedConfig(drop_ended_rows=drop))
            texts.append(engine.generate(PROMPTS, 1, do_sample=False).completion_ids)
        reference = TransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=24))
        texts.append(reference.generate(PROMPTS, 1, do_sample=False).completion_ids)
        model.generation_config.repetition_penalty = 1.0
        without_penalty = engine.generate(PROMPTS, 1, do_sample=False).completion_ids
    finally:
        model.generation_config.repetition_penalty = 1.0
    assert torch.equal(texts[0], texts[1]) and torch.equal(texts[0], texts[2])  # generate was used every time
    assert not torch.equal(texts[1], without_penalty)


@pytest.mark.slow
@pytest.mark.long  # a minute of real-model work: make test-long (CI runs it after make test)
def test_real_model_samples_the_same_tokens():
    """SmolLM2-135M, knowledge-base prompts with the shared prompt start, sampled at the study's temperature."""
    from fspo_lite.config import Config
    from fspo_lite.data.examples import load_examples
    from fspo_lite.data.prompts import prompt_text

    model, tokenizer = load_policy(ModelConfig(name="smollm2-135m", lora=False))
    prompts = [prompt_text(tokenizer, e, Config().data) for e in load_examples("bundled:kbqa_test", limit=4)]
    rollouts = []
    for drop in (False, True):
        torch.manual_seed(0)
        engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=48, temperature=0.7,
                                                                         draw="multinomial"),
                                         SpeedConfig(drop_ended_rows=drop))
        rollouts.append(engine.generate(prompts, 4))
    lengths = rollouts[0].completion_lengths
    assert lengths.min() < lengths.max()
    assert torch.equal(rollouts[0].completion_ids, rollouts[1].completion_ids)
    assert rollouts[0].texts == rollouts[1].texts
    assert eos_ids(tokenizer, model)  # the real EOS ended the rows here


def test_race_tokens_by_hand():
    probs = torch.tensor([[0.25, 0.0, 0.5, 0.25]]).expand(3, 4)
    # E = -log(u) = (1, 0.5, 2, 0.2): ratios 0.25, 0, 0.25, 1.25 -> token 3
    # E = (0.1, 0.01, 1, 1): ratios 2.5, 0 (a zero probability never wins, however small its E), 0.5, 0.25 -> token 0
    # E = (inf, 0.01, 0.25, 1) (u = 0 for token 0): ratios 0, 0, 2, 0.25 -> token 2
    exps = torch.tensor([[1.0, 0.5, 2.0, 0.2], [0.1, 0.01, 1.0, 1.0], [math.inf, 0.01, 0.25, 1.0]])
    assert race_tokens(probs, torch.exp(-exps)).tolist() == [3, 0, 2]
    # an unnormalised row: only the ratios matter
    assert race_tokens(torch.tensor([[2.0, 6.0]]), torch.exp(-torch.tensor([[1.0, 4.0]]))).tolist() == [0]


def test_draws_refuse_rows_without_probability_and_unknown_names():
    for bad in ([[0.0, 0.0]], [[float("nan"), 1.0]], [[float("inf"), 1.0]]):
        with pytest.raises(ValueError, match="not finite or sums to 0"):
            draw_tokens(torch.tensor(bad))
    with pytest.raises(ValueError, match="unknown draw 'gumbel'; use one of multinomial, exponential_race"):
        draw_tokens(torch.tensor([[1.0]]), "gumbel")
    assert DRAWS == ("multinomial", "exponential_race")


@pytest.mark.parametrize("draw", ["exponential_race", "multinomial"])
def test_both_draws_sample_the_given_distribution(draw):
    """60,000 draws from one row with a zero, a tiny and a large probability: no zero-probability token, and a
    chi-square test against the expected counts (seeded, so it cannot flake; a race of the uniform numbers themselves,
    E = U instead of -log U, fails it by far)."""
    from scipy.stats import chisquare

    probs = torch.tensor([0.05, 0.0, 0.6, 0.001, 0.149, 0.2])
    torch.manual_seed(0)
    tokens = draw_tokens(probs.expand(60_000, 6).contiguous(), draw)
    counts = torch.bincount(tokens, minlength=6)
    assert counts[1] == 0
    kept = probs > 0
    assert chisquare(counts[kept].double().numpy(), (probs[kept] * 60_000).double().numpy()).pvalue > 0.01


@pytest.mark.parametrize("draw", ["multinomial", "exponential_race"])
def test_decode_keeps_its_draws_in_place_when_rows_end(tiny, draw):
    """Either draw: the same tokens whether ended rows are dropped at once, late or never, and another seed gives
    other tokens. The default is generate's draw (multinomial)."""
    model, tokenizer = tiny
    rows = [p for p in PROMPTS for _ in range(3)]
    encoded = tokenizer(rows, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    outputs = []
    for seed, compact_at in ((3, 0.0), (3, 0.125), (3, 1.0), (4, 0.0)):
        torch.manual_seed(seed)
        outputs.append(decode(model, encoded["input_ids"], encoded["attention_mask"],
                              Sampling(24, ending_ids(tokenizer), True, 0.7, draw=draw), tokenizer.pad_token_id,
                              compact_at=compact_at))
    lengths = (outputs[0] != tokenizer.pad_token_id).sum(1)
    assert lengths.min() < lengths.max()
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[0], outputs[2])
    assert not torch.equal(outputs[0], outputs[3])
    assert Sampling(4, [0]).draw == RolloutConfig().draw == "multinomial"

