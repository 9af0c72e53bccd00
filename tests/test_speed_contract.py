"""The contract between the reference and the fast implementations of the two seams (fspo_lite.speed):

- the rollout engine: `TransformersRollout` (ordinary forward calls, every row to the end) and
  `FastTransformersRollout` (shared prefill and prompt start, ended rows dropped, preallocated cache, the plain-torch
  step, merged LoRA) draw the same tokens for the same seed, with the same sampler log-probs up to float rounding;
- the log-prob pass: `LogprobPass` (one forward pass, autograd) and `FastLogprobPass` (shared prompt pass and start,
  length grouping, fused LoRA, grouped-query attention, `token_logprobs`) give the same log-probs, entropies and
  gradients up to float rounding;
- a training step with speed.mode=off and =auto: the same completions, the same losses and gradient norms up to
  float rounding.

On the tiny random model and (marked slow) on the bundled SmolLM2-135M. Each comparison also checks that the
numbers compared are not trivially equal: another seed or temperature changes them, and the fast path did less work.
"""

import math

import pytest
import torch

from fspo_lite import algos
from fspo_lite.config import ModelConfig, RolloutConfig, SpeedConfig, load_config
from fspo_lite.models.logprobs import LogprobPass
from fspo_lite.models.policy import load_policy
from fspo_lite.rollout.transformers_rollout import TransformersRollout
from fspo_lite.speed.logprobs import FastLogprobPass
from fspo_lite.speed.rollout import FastTransformersRollout
from fspo_lite.speed.token_logprobs import token_logprobs

DEMO = ("You are a careful assistant. Think inside <think> </think>, then answer inside <answer> </answer>.\n"
        "Q: What is the capital of France?\nA: <think>France's capital is Paris.</think><answer>Paris</answer>\n")
LONG_PROMPTS = [DEMO + "Q: Which river flows through Paris?\nA:", DEMO + "Q: 2+2?\nA:",
                DEMO + "Q: What is the chemical symbol of gold, the metal?\nA:"]
SHORT_PROMPTS = ["Question: which river flows through Paris? Answer:", "Q: 2+2?", "Name a liquid metal."]


def with_live_adapter(name: str, std: float):
    """The model `name` with an r=4 LoRA adapter whose B matrices are drawn N(0, std) (seed 1), so that the adapter
    changes the computation (a fresh adapter's B is zero)."""
    model, tokenizer = load_policy(ModelConfig(name=name, lora=True, lora_r=4, lora_alpha=8), seed=0)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if "lora_B" in parameter_name:
                parameter.normal_(0, std)
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny():
    """The tiny random model with a non-zero LoRA adapter (merging and fusing it then change the computation), and
    every 6th token an EOS (rows end at many different steps, so dropping ended rows is exercised)."""
    model, tokenizer = with_live_adapter("tiny", std=0.05)
    model.generation_config.eos_token_id = list(range(0, len(tokenizer), 6))
    return model, tokenizer


def rows_computed(model, run) -> int:
    """The rows x positions the model's embedding saw while `run()` ran (the work done)."""
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))
    try:
        run()
    finally:
        hook.remove()
    return sum(seen)


def both_rollouts(model, tokenizer, prompts, seed=0, samples=3, speed=None, max_new_tokens=16, **section):
    """(reference rollout, fast rollout, reference work, fast work) for the same prompts and seed."""
    rollout = RolloutConfig(max_new_tokens=max_new_tokens, temperature=0.8, generation_batch_size=64, **section)
    results, work = [], []
    for engine in (TransformersRollout(model, tokenizer, rollout),
                   FastTransformersRollout(model, tokenizer, rollout, speed or SpeedConfig())):
        torch.manual_seed(seed)
        work.append(rows_computed(model, lambda: results.append(engine.generate(prompts, samples))))
    return (*results, *work)


# ---- the rollout engine ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("prompts", [SHORT_PROMPTS, LONG_PROMPTS], ids=["distinct", "shared-start"])
@pytest.mark.parametrize("draw", ["exponential_race", "multinomial"])
def test_both_engines_draw_the_same_tokens(tiny, prompts, draw):
    model, tokenizer = tiny
    reference, fast, reference_work, fast_work = both_rollouts(model, tokenizer, prompts, draw=draw)
    lengths = reference.completion_lengths
    assert lengths.min() < lengths.max()  # rows end at different steps: the fast loop drops some
    assert torch.equal(reference.prompt_ids, fast.prompt_ids)
    assert torch.equal(reference.completion_ids, fast.completion_ids) and reference.texts == fast.texts
    assert fast_work < reference_work  # the fast engine did less: not the same code twice
    other, _, _, _ = both_rollouts(model, tokenizer, prompts, seed=1, draw=draw)
    assert not torch.equal(other.completion_ids, reference.completion_ids)  # a comparison that can fail


def test_both_engines_decode_greedily_alike_and_give_the_same_sampler_logprobs(tiny):
    model, tokenizer = tiny
    rollout = RolloutConfig(max_new_tokens=12)
    greedy = [engine.generate(LONG_PROMPTS, 2, do_sample=False).completion_ids
              for engine in (TransformersRollout(model, tokenizer, rollout),
                             FastTransformersRollout(model, tokenizer, rollout, SpeedConfig()))]
    assert torch.equal(*greedy)
    reference, fast, _, _ = both_rollouts(model, tokenizer, SHORT_PROMPTS, use_sampler_logprobs=True)
    assert torch.equal(reference.completion_ids, fast.completion_ids)
    mask = reference.completion_mask.bool()
    assert bool((reference.sampling_logprobs[mask] < 0).all()) and bool((reference.sampling_logprobs[~mask] == 0).all())
    torch.testing.assert_close(fast.sampling_logprobs, reference.sampling_logprobs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("switch", ["share_prompt_prefill", "share_prompt_prefix", "merge_lora_for_generation",
                                    "drop_ended_rows"])
def test_each_rollout_switch_alone_keeps_the_tokens(tiny, switch):
    model, tokenizer = tiny
    speed = SpeedConfig(**{name: name == switch for name in ("share_prompt_prefill", "share_prompt_prefix",
                                                             "merge_lora_for_generation", "drop_ended_rows")},
                        packed_weights=False)
    reference, fast, _, _ = both_rollouts(model, tokenizer, LONG_PROMPTS, speed=speed, draw="multinomial")
    assert torch.equal(reference.completion_ids, fast.completion_ids)


# ---- the log-prob pass -------------------------------------------------------------------------------------------

def run_pass(model, rollout, logprob_pass, temperature=0.8, entropy_grad=False, micro_batch_size=4):
    """(log-probs, entropies, gradients of the trainable weights) of one pass over `rollout` with a fixed weighting of
    the tokens as the loss, backward per micro-batch as the trainer does."""
    mask = rollout.completion_mask.float()
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0)) * mask
    logp_all, entropy_all = torch.zeros_like(mask), torch.zeros_like(mask)
    parameters = [p for p in model.parameters() if p.requires_grad]
    model.train()
    model.zero_grad(set_to_none=True)
    logprob_pass.temperature = temperature
    with logprob_pass.over(model, rollout) as logprobs:
        for rows, width in logprob_pass.micro_batches(rollout, micro_batch_size):
            logp, entropy = logprobs(rows, width, with_entropy=True, entropy_grad=entropy_grad)
            loss = (logp * weights[rows, :width]).sum()
            if entropy_grad:
                loss = loss + 0.1 * (entropy * weights[rows, :width]).sum()
            loss.backward()
            logp_all[rows, :width], entropy_all[rows, :width] = logp.detach(), entropy.detach()
    model.eval()
    return logp_all * mask, entropy_all * mask, [p.grad.clone() for p in parameters]


def assert_same_to_rounding(reference, fast, gradient_rtol=1e-4, atol=1e-5):
    (logp, entropy, grads), (fast_logp, fast_entropy, fast_grads) = reference, fast
    assert logp.abs().sum() > 0 and all(g.abs().sum() > 0 for g in grads)  # non-trivial tensors
    torch.testing.assert_close(fast_logp, logp, atol=atol, rtol=1e-5)
    torch.testing.assert_close(fast_entropy, entropy, atol=10 * atol, rtol=1e-5)
    for grad, fast_grad in zip(grads, fast_grads):
        assert (fast_grad - grad).norm() <= gradient_rtol * grad.norm() + 1e-9


def fast_pass() -> FastLogprobPass:
    return FastLogprobPass(share_prompts=True, group_by_length=True, fused=True, grouped_query=True, device_type="cpu")


@pytest.mark.parametrize("prompts", [SHORT_PROMPTS, LONG_PROMPTS], ids=["distinct", "shared-start"])
@pytest.mark.parametrize("entropy_grad", [False, True], ids=["logprobs", "entropy-bonus"])
def test_both_passes_give_the_same_logprobs_entropies_and_gradients(tiny, prompts, entropy_grad):
    model, tokenizer = tiny
    rollout, _, _, _ = both_rollouts(model, tokenizer, prompts, samples=3)
    results = {}
    work = {name: rows_computed(model, lambda: results.__setitem__(name, run_pass(model, rollout, pass_,
                                                                                   entropy_grad=entropy_grad)))
            for name, pass_ in (("reference", LogprobPass()), ("fast", fast_pass()))}
    assert work["fast"] < work["reference"]  # the fast pass ran fewer positions through the model
    reference = results["reference"]
    assert_same_to_rounding(reference, results["fast"])
    hotter = run_pass(model, rollout, LogprobPass(), temperature=1.3)
    assert (hotter[0] - reference[0]).abs().max() > 1e-3  # a comparison that can fail


def test_a_training_step_is_the_same_with_speed_off(tmp_path):
    """The trainer through both seams: speed.mode=off builds the reference engine and pass, auto the fast ones; one
    step with two epochs (the frozen passes for pi_old and the KL reference too) gives the same completions and the
    same loss, KL, entropy and gradient norm up to float rounding."""
    from fspo_lite.update.trainer import Trainer

    steps = {}
    for mode in ("auto", "off"):
        config = load_config("configs/tiny.yaml", [
            f"train.output_dir={tmp_path / mode}", f"speed.mode={mode}", "train.beta=0.1", "train.entropy_coef=0.01",
            "train.ppo_epochs=2", "train.micro_batch_size=4", "train.learning_rate=1e-2", "rollout.max_new_tokens=12"])
        with Trainer(config, progress=False) as trainer:
            fast = mode == "auto"
            assert (type(trainer.logprob_pass) is FastLogprobPass) is fast
            assert (type(trainer.engine) is FastTransformersRollout) is fast
            torch.manual_seed(5)
            rollout = trainer.rollout([trainer.examples[i] for i in range(2)])
            advantages = torch.randn(rollout.completion_ids.shape, generator=torch.Generator().manual_seed(2))
            steps[mode] = (rollout, trainer.update(rollout, advantages * rollout.completion_mask))
    (fast_rollout, fast), (reference_rollout, reference) = steps["auto"], steps["off"]
    assert torch.equal(fast_rollout.completion_ids, reference_rollout.completion_ids)
    assert reference["grad_norm"] > 0 and reference["loss"] != 0  # (KL is logged at epoch 0, still 0 then)
    for key in ("loss", "kl", "entropy", "grad_norm", "clip_fraction"):
        assert fast[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key


# ---- the log-softmax at the sampled tokens: token_logprobs against autograd's formulas ------------------------

def test_token_logprobs_by_hand():
    # logits (1, 2, 3) at temperature 2: tempered (0.5, 1, 1.5); token 2
    logits = torch.tensor([[[1.0, 2.0, 3.0]]], dtype=torch.float64, requires_grad=True)
    logp, entropy = token_logprobs(logits, torch.tensor([[2]]), temperature=2.0, with_entropy=True)
    norm = math.log(math.exp(0.5) + math.exp(1.0) + math.exp(1.5))
    p = [math.exp(z - norm) for z in (0.5, 1.0, 1.5)]
    assert logp.item() == pytest.approx(1.5 - norm, abs=1e-12)
    assert entropy.item() == pytest.approx(-sum(q * math.log(q) for q in p), abs=1e-12)
    assert not entropy.requires_grad
    logp.sum().backward()
    # d logp_2 / d logits = (onehot(2) - p) / T
    assert logits.grad[0, 0].tolist() == pytest.approx([-p[0] / 2, -p[1] / 2, (1 - p[2]) / 2], abs=1e-12)


@pytest.mark.parametrize("temperature,chunk_size", [(1.0, 4), (0.7, 2), (1.3, 1)])
def test_token_logprobs_equals_autograd_through_the_division_gather_and_logsumexp(temperature, chunk_size):
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 11) * 3
    tokens = torch.randint(0, 11, (5, 7))
    upstream = torch.randn(5, 7)
    mine = logits.clone().requires_grad_()
    logp, entropy = token_logprobs(mine, tokens, temperature, with_entropy=True, chunk_size=chunk_size)
    (logp * upstream).sum().backward()
    theirs = logits.clone().requires_grad_()
    tempered = theirs / temperature if temperature != 1.0 else theirs
    expected = algos.selective_log_softmax(tempered, tokens, chunk_size=chunk_size)
    (expected * upstream).sum().backward()
    assert torch.equal(logp, expected)  # the same operations on the same numbers
    assert torch.allclose(mine.grad, theirs.grad, atol=1e-6)
    assert torch.allclose(entropy, algos.entropy_from_logits(tempered.detach()), atol=1e-5)
    assert torch.equal(mine, theirs)  # the caller's logits are left as they were


def test_token_logprobs_gradient_against_finite_differences_and_one_backward_only():
    torch.manual_seed(1)
    logits = torch.randn(3, 2, 5, dtype=torch.float64)
    tokens = torch.randint(0, 5, (3, 2))
    upstream = torch.randn(3, 2, dtype=torch.float64)

    def objective(x):
        return (token_logprobs(x, tokens, 0.8, chunk_size=2)[0] * upstream).sum()

    leaf = logits.clone().requires_grad_()
    objective(leaf).backward()
    numeric = torch.zeros_like(logits)
    for index in range(logits.numel()):
        step = torch.zeros(logits.numel(), dtype=torch.float64)
        step[index] = 1e-6
        step = step.view_as(logits)
        numeric.view(-1)[index] = (objective(logits + step) - objective(logits - step)) / 2e-6
    assert torch.allclose(leaf.grad, numeric, atol=1e-8)
    logp, entropy = token_logprobs(leaf, tokens, 0.8)
    assert entropy is None  # not asked for
    logp.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        logp.sum().backward()


def test_token_logprobs_without_a_gradient_keeps_nothing():
    logits = torch.randn(2, 3, 6)
    with torch.no_grad():
        logp, entropy = token_logprobs(logits, torch.zeros(2, 3, dtype=torch.long), 0.5, with_entropy=True)
    assert torch.allclose(logp, torch.log_softmax(logits / 0.5, -1)[..., 0], atol=1e-6)
    assert torch.allclose(entropy, algos.entropy_from_logits(logits / 0.5), atol=1e-5)


# ---- SmolLM2-135M -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    """The bundled SmolLM2-135M with a non-zero LoRA adapter, and four knowledge-base prompts (system prompt and
    demonstrations shared)."""
    from fspo_lite.config import Config
    from fspo_lite.data.examples import load_examples
    from fspo_lite.data.prompts import prompt_text

    model, tokenizer = with_live_adapter("smollm2-135m", std=0.01)
    prompts = [prompt_text(tokenizer, e, Config().data) for e in load_examples("bundled:kbqa_test", limit=4)]
    return model, tokenizer, prompts


@pytest.mark.slow
@pytest.mark.long  # a minute of real-model work: make test-long (CI runs it after make test)
def test_smollm2_both_engines_draw_the_same_tokens_and_both_passes_agree(smollm2):
    model, tokenizer, prompts = smollm2
    reference, fast, reference_work, fast_work = both_rollouts(model, tokenizer, prompts, samples=4,
                                                               max_new_tokens=48, use_sampler_logprobs=True)
    assert torch.equal(reference.completion_ids, fast.completion_ids) and reference.texts == fast.texts
    assert fast_work < reference_work
    torch.testing.assert_close(fast.sampling_logprobs, reference.sampling_logprobs, atol=1e-4, rtol=1e-4)
    assert_same_to_rounding(run_pass(model, reference, LogprobPass(), micro_batch_size=8),
                            run_pass(model, reference, fast_pass(), micro_batch_size=8), gradient_rtol=1e-3, atol=1e-4)
