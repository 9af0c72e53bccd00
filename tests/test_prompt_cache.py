"""One pass per distinct prompt (fspo_lite.speed.prompt_cache): grouping, and equality with the full pass
in log-probs, entropies, gradients, greedy rollouts and a whole training step."""

import pytest
import torch

from fspo_lite.config import RolloutConfig, SpeedConfig, load_config
from fspo_lite.models.logprobs import prompt_positions
from fspo_lite.models.policy import load_policy
from fspo_lite.speed.logprobs import fast_completion_logprobs as completion_logprobs
from fspo_lite.speed.prompt_cache import distinct_prompts, shares_prompt_pass, uses_gradient_checkpointing
from fspo_lite.speed.rollout import FastTransformersRollout
from fspo_lite.update.trainer import Trainer


def test_distinct_prompts_groups_rows_in_order_of_first_appearance():
    ids = torch.tensor([[5, 6], [1, 2], [5, 6], [1, 2], [1, 2]])
    mask = torch.ones_like(ids)
    first, owner = distinct_prompts(ids, mask)
    assert first.tolist() == [0, 1]
    assert owner.tolist() == [0, 1, 0, 1, 1]
    assert torch.equal(ids[first][owner], ids)


def test_distinct_prompts_tells_masks_apart_and_returns_none_without_repeats():
    ids = torch.tensor([[0, 7], [0, 7], [3, 4]])
    mask = torch.tensor([[0, 1], [1, 1], [1, 1]])  # same ids, different padding: different prompts
    assert distinct_prompts(ids, mask) is None
    assert distinct_prompts(ids[:1], mask[:1]) is None  # a single row
    first, owner = distinct_prompts(torch.tensor([[9], [9]]), torch.tensor([[1], [1]]))
    assert first.tolist() == [0] and owner.tolist() == [0, 0]


def test_prompt_positions_follow_the_mask():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert prompt_positions(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


@pytest.fixture(scope="module")
def tiny_lora():
    config = load_config("configs/tiny.yaml", ["model.lora=true"])
    model, tokenizer = load_policy(config.model, seed=0)
    torch.manual_seed(1)
    with torch.no_grad():  # a non-zero adapter, so its gradients and outputs are not trivially equal
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.02)
    return model, tokenizer


def _rollout(model, tokenizer, share: bool, max_new_tokens: int = 10):
    # prompts of different lengths (left padding), 3 samples each, greedy so both paths must agree exactly
    engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=max_new_tokens),
                                     SpeedConfig(share_prompt_prefill=share))
    return engine.generate(["Question: which river flows through Paris? Answer:", "Q: 2+2?"], 3, do_sample=False)


def test_greedy_rollout_is_the_same_with_a_shared_prefill(tiny_lora):
    model, tokenizer = tiny_lora
    full, shared = _rollout(model, tokenizer, share=False), _rollout(model, tokenizer, share=True)
    assert torch.equal(full.prompt_ids, shared.prompt_ids)
    assert torch.equal(full.completion_ids, shared.completion_ids)
    assert full.texts == shared.texts


def test_shared_prefill_encodes_each_distinct_prompt_once(tiny_lora):
    model, tokenizer = tiny_lora
    batch_sizes = []
    hook = model.get_base_model().model.embed_tokens.register_forward_hook(
        lambda module, inputs, output: batch_sizes.append(tuple(inputs[0].shape)))
    try:
        rollout = _rollout(model, tokenizer, share=True, max_new_tokens=3)
    finally:
        hook.remove()
    width = rollout.prompt_ids.shape[1]
    assert batch_sizes[0] == (2, width - 1)  # 2 distinct prompts, all but the last token
    assert batch_sizes[1] == (6, 1)  # generate feeds the last prompt token of every row


@pytest.mark.parametrize("completion_width", [1, 10])
def test_shared_prompt_logprobs_match_the_full_pass(tiny_lora, completion_width):
    model, tokenizer = tiny_lora
    rollout = _rollout(model, tokenizer, share=False, max_new_tokens=completion_width)
    mask = rollout.completion_mask.clone()
    if completion_width > 1:
        mask[0, 4:] = 0  # an early end: padding after it must not matter
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    results = []
    for share in (False, True):
        model.zero_grad()
        logp, entropy = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask, rollout.completion_ids,
                                            mask, temperature=0.7, with_entropy=True, share_prompts=share)
        (logp * mask).sum().backward()
        results.append((logp.detach(), entropy, [p.grad.clone() for p in parameters]))
    (full_logp, full_entropy, full_grads), (logp, entropy, grads) = results
    assert logp.shape == full_logp.shape == mask.shape
    torch.testing.assert_close(logp * mask, full_logp * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy * mask, full_entropy * mask, atol=1e-4, rtol=1e-5)
    for full_grad, grad in zip(full_grads, grads):  # float32 rounding differs with the batch shapes
        assert (grad - full_grad).norm() <= 1e-4 * full_grad.norm() + 1e-9
    assert all(g.abs().sum() > 0 for g in grads)


def _trainer(tmp_path, *overrides):
    config = load_config("configs/tiny.yaml", ["model.lora=true", "train.prompts_per_step=2", "rollout.group_size=4",
                                               "rollout.max_new_tokens=8", "train.micro_batch_size=4",
                                               "train.learning_rate=1e-2", f"train.output_dir={tmp_path}", *overrides])
    return Trainer(config, progress=False)


def test_training_step_is_the_same_with_shared_prompt_passes(tmp_path):
    states = []
    for share in (False, True):
        trainer = _trainer(tmp_path / str(share), f"speed.share_prompt_pass={share}",
                           f"speed.share_prompt_prefill={share}", "train.beta=0.1")
        assert trainer.logprob_pass.share_prompts is share
        metrics = trainer.train_step()
        states.append((metrics, {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}))
    (full_metrics, full_state), (metrics, state) = states
    assert metrics["completion_length"] == full_metrics["completion_length"]
    assert metrics["loss"] == pytest.approx(full_metrics["loss"], abs=1e-5)
    assert metrics["kl"] == pytest.approx(full_metrics["kl"], abs=1e-6)
    for name, value in full_state.items():
        torch.testing.assert_close(state[name], value, atol=1e-5, rtol=1e-4)


def test_gradient_checkpointing_turns_the_shared_pass_off(tmp_path):
    trainer = _trainer(tmp_path, "model.gradient_checkpointing=true")
    assert uses_gradient_checkpointing(trainer.model)
    assert trainer.logprob_pass.share_prompts is False
    assert torch.isfinite(torch.tensor(trainer.train_step()["loss"]))  # the full pass runs, no cache needed


def test_engine_factory_leaves_the_shared_prefill_out_for_sharded_weights_and_unsloth(tmp_path, tiny_lora):
    from types import SimpleNamespace

    from fspo_lite.speed import build_rollout_engine

    model, tokenizer = tiny_lora
    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}"])
    one_process = SimpleNamespace(shards_weights=False, generation_kwargs=lambda: {})
    sharded = SimpleNamespace(shards_weights=True, generation_kwargs=lambda: {"synced_gpus": True})
    def switches(dist):
        speed = getattr(build_rollout_engine(model, tokenizer, config, dist), "speed", None)  # None: the reference
        return (speed.share_prompt_prefill, speed.drop_ended_rows) if speed else (False, False)

    assert switches(one_process) == (True, True)
    assert switches(sharded) == (False, False)
    config.model.backend = "unsloth"
    assert switches(one_process) == (False, False)
    config.model.backend = "transformers"
    config.speed.share_prompt_prefill = False
    assert switches(one_process) == (False, True)
    config.speed.mode = "off"
    assert switches(one_process) == (False, False)


def test_shared_prompt_pass_rule(tiny_lora):
    model, _ = tiny_lora
    config = load_config("configs/tiny.yaml")
    assert shares_prompt_pass(config, 1, model) is True
    assert shares_prompt_pass(config, 2, model) is False  # DDP/FSDP: one forward per backward
    config.train.fsdp = True
    assert shares_prompt_pass(config, 1, model) is False  # FSDP wraps the model with one process too
    config.train.fsdp = False
    config.model.backend = "unsloth"
    assert shares_prompt_pass(config, 1, model) is False
    config.model.backend = "transformers"
    config.speed.share_prompt_pass = False
    assert shares_prompt_pass(config, 1, model) is False


# ---- the common prompt start, encoded once (speed.share_prompt_prefix) ------------------------------------
from fspo_lite.speed.prompt_cache import common_prefix_length, shared_prefix_prefill  # noqa: E402

DEMO = ("You are a careful assistant. Think inside <think> </think>, then answer inside <answer> </answer>.\n"
        "Q: What is the capital of France?\nA: <think>France's capital is Paris.</think><answer>Paris</answer>\n")
LONG_PROMPTS = [DEMO + "Q: Which river flows through Paris?\nA:", DEMO + "Q: 2+2?\nA:",
                DEMO + "Q: What is the chemical symbol of gold, the metal?\nA:"]


def test_common_prefix_length_reads_the_real_tokens_of_left_padded_rows():
    ids = torch.tensor([[0, 0, 5, 6, 7], [5, 6, 8, 9, 1], [0, 5, 6, 7, 2]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    assert common_prefix_length(ids, mask) == 2  # 5 6, then 7 / 8 / 7
    assert common_prefix_length(ids[[0, 2]], mask[[0, 2]]) == 3  # the shorter row is all prefix
    assert common_prefix_length(ids[:1], mask[:1]) == 3
    assert common_prefix_length(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2, dtype=torch.long)) == 0
    assert common_prefix_length(torch.tensor([[0, 0], [3, 2]]), torch.tensor([[0, 0], [1, 1]])) == 0  # empty row


@pytest.mark.parametrize("samples", [1, 3])
def test_shared_prefix_cache_equals_the_full_pass(tiny_lora, samples):
    model, tokenizer = tiny_lora
    rows = [p for p in LONG_PROMPTS for _ in range(samples)]
    encoded = tokenizer(rows, return_tensors="pt", padding=True, add_special_tokens=False, padding_side="left")
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    prefix = common_prefix_length(ids, mask)
    assert prefix >= 16
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, position_ids=prompt_positions(mask), use_cache=True)
        shared = shared_prefix_prefill(model, ids, mask, distinct_prompts(ids, mask), prefix)
    assert shared.get_seq_length() == ids.shape[1]
    real = mask.bool()[:, None, :, None]
    for mine, theirs in zip(shared.layers, full.past_key_values.layers):
        assert mine.keys.shape == theirs.keys.shape
        assert torch.allclose(mine.keys * real, theirs.keys * real, atol=1e-5)
        assert torch.allclose(mine.values * real, theirs.values * real, atol=1e-5)


def _long_rollout(model, tokenizer, share_prefix: bool, samples: int = 2, do_sample: bool = False):
    engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=8),
                                     SpeedConfig(share_prompt_prefix=share_prefix))
    torch.manual_seed(0)
    return engine.generate(LONG_PROMPTS, samples, do_sample=do_sample)


@pytest.mark.parametrize("samples", [1, 2])
def test_greedy_rollout_is_the_same_with_a_shared_prompt_start(tiny_lora, samples):
    model, tokenizer = tiny_lora
    full = _long_rollout(model, tokenizer, False, samples)
    shared = _long_rollout(model, tokenizer, True, samples)
    assert torch.equal(full.completion_ids, shared.completion_ids) and full.texts == shared.texts


def test_shared_prompt_start_is_encoded_once(tiny_lora):
    model, tokenizer = tiny_lora
    shapes = []
    hook = model.get_base_model().model.embed_tokens.register_forward_hook(
        lambda module, inputs, output: shapes.append(tuple(inputs[0].shape)))
    try:
        _long_rollout(model, tokenizer, True, samples=2)
    finally:
        hook.remove()
    assert shapes[0][0] == 1 and shapes[0][1] >= 16  # the common start, once
    assert shapes[1][0] == 3  # each distinct prompt's rest
    assert shapes[2] == (6, 1)  # then generate feeds the last prompt token of every row


@pytest.mark.slow
def test_real_model_answers_the_same_with_a_shared_prompt_start():
    """SmolLM2-135M on knowledge-base prompts (system prompt and demonstrations shared): the same greedy answers."""
    from fspo_lite.config import Config, ModelConfig
    from fspo_lite.data.examples import load_examples
    from fspo_lite.data.prompts import prompt_text

    model, tokenizer = load_policy(ModelConfig(name="smollm2-135m", lora=False))
    prompts = [prompt_text(tokenizer, e, Config().data) for e in load_examples("bundled:kbqa_test", limit=4)]
    texts = []
    for share in (False, True):
        engine = FastTransformersRollout(model, tokenizer, RolloutConfig(max_new_tokens=24),
                                         SpeedConfig(share_prompt_prefix=share))
        texts.append(engine.generate(prompts, 2, do_sample=False).texts)
    assert texts[0] == texts[1]


@pytest.mark.parametrize("samples", [1, 3])
def test_logprobs_and_gradients_with_a_shared_prompt_start_match_the_full_pass(tiny_lora, samples):
    """The update's passes (fast_completion_logprobs, share_prompts=True) encode the common start once, with gradients."""
    model, tokenizer = tiny_lora
    rollout = _long_rollout(model, tokenizer, False, samples=samples, do_sample=True)
    mask = rollout.completion_mask.clone()
    mask[0, 3:] = 0  # an early end: padding after it must not matter
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    results, shapes = [], []
    for share in (False, True):
        model.zero_grad()
        hook = model.get_base_model().model.embed_tokens.register_forward_hook(
            lambda module, inputs, output: shapes.append((share, tuple(inputs[0].shape))))
        try:
            logp, entropy = completion_logprobs(model, rollout.prompt_ids, rollout.prompt_mask,
                                                rollout.completion_ids, mask, temperature=0.7, with_entropy=True,
                                                share_prompts=share)
        finally:
            hook.remove()
        (logp * mask).sum().backward()
        results.append((logp.detach(), entropy, [p.grad.clone() for p in parameters]))
    (full_logp, full_entropy, full_grads), (logp, entropy, grads) = results
    torch.testing.assert_close(logp * mask, full_logp * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy * mask, full_entropy * mask, atol=1e-4, rtol=1e-5)
    for full_grad, grad in zip(full_grads, grads):
        assert (grad - full_grad).norm() <= 1e-4 * full_grad.norm() + 1e-9
    assert all(g.abs().sum() > 0 for g in grads)
    shared_shapes = [shape for share, shape in shapes if share]
    assert shared_shapes[0][0] == 1 and shared_shapes[0][1] >= 16  # the common start, once
    assert shared_shapes[1][0] == len(LONG_PROMPTS)  # each distinct prompt's rest
    assert shared_shapes[2][0] == len(LONG_PROMPTS) * samples  # last prompt token + completion, every row


def test_select_cache_rows_selects_like_transformers_and_sums_the_gradients_in_the_same_way():
    from transformers import DynamicCache

    from fspo_lite.speed.prompt_cache import select_cache_rows

    torch.manual_seed(0)
    keys = torch.randn(2, 3, 5, 4, requires_grad=True)
    values = torch.randn(2, 3, 5, 4, requires_grad=True)
    rows = torch.tensor([1, 0, 1, 1, 0])
    upstream = torch.randn(5, 3, 5, 4)
    grads = []
    for select in (select_cache_rows, lambda cache, index: cache.batch_select_indices(index)):
        cache = DynamicCache()
        cache.update(keys * 1.0, values * 1.0, 0)
        select(cache, rows)
        assert torch.equal(cache.layers[0].keys, keys[rows]) and torch.equal(cache.layers[0].values, values[rows])
        grads.append(torch.autograd.grad((cache.layers[0].keys * upstream).sum() + cache.layers[0].values.sum(),
                                         [keys, values]))
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(*grads))
    # hand-computed: key row 0 is used by rows 1 and 4, so its gradient is the sum of theirs
    assert torch.equal(grads[0][0][0], upstream[1] + upstream[4])


def test_select_cache_rows_leaves_other_layer_kinds_to_their_own_method():
    from fspo_lite.speed.prompt_cache import select_cache_rows

    class Layer:
        pass

    class Cache:
        layers = [Layer()]
        selected = None

        def batch_select_indices(self, indices):
            self.selected = indices

    cache = Cache()
    select_cache_rows(cache, torch.tensor([0, 0]))
    assert torch.equal(cache.selected, torch.tensor([0, 0]))


def test_the_shared_start_runs_once_per_update_with_the_gradients_of_one_pass_per_micro_batch(tmp_path):
    from fspo_lite.speed.prompt_cache import prefix_pass

    trainer = _trainer(tmp_path, "train.micro_batch_size=2")
    torch.manual_seed(0)
    rollout = trainer.rollout([trainer.examples[i] for i in trainer.sampler.next(2)])
    model = trainer.train_model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.1)  # B = 0 would leave every A without gradient
    embed = model.get_input_embeddings()
    results = []
    for shared in (False, True):
        widths = []
        hook = embed.register_forward_hook(lambda module, args, output: widths.append(args[0].shape[1]))
        for parameter in parameters:
            parameter.grad = None
        start = prefix_pass(model, rollout.prompt_ids, rollout.prompt_mask) if shared else None
        batches = trainer._micro_batches(rollout)
        for rows, width in batches:
            logp, _ = trainer.logprob_pass.logprobs(model, rollout, rows, width, shared_start=start)
            (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        if start is not None:
            start.backward()
            assert start.keys_values == []  # released
        hook.remove()
        results.append(([p.grad.clone() for p in parameters], widths))
    (full_grads, full_widths), (grads, widths) = results
    length = prefix_pass(model, rollout.prompt_ids, rollout.prompt_mask).length
    assert len(batches) == 4 and length >= 16
    # the common start (or a micro-batch's longer one) went through the model once per micro-batch, now once
    assert sum(w >= length for w in full_widths) == 4 and sum(w >= length for w in widths) == 1
    for full_grad, grad in zip(full_grads, grads):
        assert full_grad.abs().sum() > 0
        assert (grad - full_grad).norm() <= 1e-4 * full_grad.norm() + 1e-9


def test_no_prefix_pass_for_a_short_common_start(tiny_policy):
    from fspo_lite.speed.prompt_cache import MIN_SHARED_PREFIX, prefix_pass

    model, _ = tiny_policy
    ids = torch.tensor([[5] * (MIN_SHARED_PREFIX - 1) + [7, 8], [5] * (MIN_SHARED_PREFIX - 1) + [9, 8]])
    assert prefix_pass(model, ids, torch.ones_like(ids)) is None
    ids = torch.tensor([[5] * MIN_SHARED_PREFIX + [7, 8], [5] * MIN_SHARED_PREFIX + [9, 8]])
    assert prefix_pass(model, ids, torch.ones_like(ids)).length == MIN_SHARED_PREFIX
