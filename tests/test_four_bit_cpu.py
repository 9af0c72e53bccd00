"""4-bit QLoRA on the CPU: the bundled SmolLM2-135M-Instruct (real weights) with a bitsandbytes NF4 base.

bitsandbytes runs NF4 on CPUs too (float32 compute there), so the path GPU users take for
`model.load_in_4bit` is exercised on every CI run. One trainer is built once for the module: it
trains FSPO steps, generates, saves, and a second trainer on the same model resumes from its first
checkpoint and must reproduce its second step.
"""

import json
import shutil

import pytest
import torch

pytest.importorskip("bitsandbytes", reason="model.load_in_4bit needs bitsandbytes (installed by `make setup`)")

import bitsandbytes as bnb  # noqa: E402

from fspo_lite.update import trainer as trainer_module  # noqa: E402
from fspo_lite.config import load_config  # noqa: E402
from fspo_lite.data.examples import QAExample  # noqa: E402
from fspo_lite.data.prompts import prompt_text  # noqa: E402
from fspo_lite.logs.training_log import read_metrics  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.long]  # SmolLM2 in NF4 (half a minute to load): make test-long

EXAMPLES = [QAExample(f"q{i}", question, [answer], f"{answer} is the answer.") for i, (question, answer) in
            enumerate([("What is the capital of France?", "Paris"), ("What is the capital of Japan?", "Tokyo"),
                       ("What is the capital of Italy?", "Rome"), ("What is the capital of Spain?", "Madrid")])]


def varying_scores(real):
    """The real scoring, then a reward that is a pure function of the sampled ids (as in tests/resume_run.py):
    SmolLM2 at 8 new tokens rarely completes the answer format, so real rewards would all be equal."""
    def score(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        ids = rollout.completion_ids * rollout.completion_mask
        scored.rewards = (ids.sum(dim=1) % 101).to(torch.float32) / 100.0
        if scored.sentence_mask is not None:
            scored.sentence_mask = ((ids % 3) - 1).to(torch.float32) * rollout.completion_mask
        return scored

    return score


def config(output_dir, *extra):
    return load_config("configs/smoke_smollm2.yaml", [
        "model.load_in_4bit=true", f"train.output_dir={output_dir}", "train.steps=2", "train.save_every=1",
        "train.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8", "train.micro_batch_size=4",
        "train.learning_rate=1e-3", "train.beta=0", *extra])


def base_state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" not in k}


def lora_state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("four_bit")
    real = trainer_module.score_rollouts
    trainer_module.score_rollouts = varying_scores(real)
    try:
        first = trainer_module.Trainer(config(root / "a"), train_examples=EXAMPLES, progress=False)
        initial_lora, initial_base = lora_state(first.model), base_state(first.model)
        # the 4-bit base itself (a new adapter adds nothing), before training: two steps at learning rate 1e-3 on
        # rewards made from the sampled ids move the answer wherever those samples push it. Greedy SmolLM2 opens
        # with the answer ("Paris is the capital of France. ..."), so a few tokens show it; each costs a 4-bit pass
        greedy = first.engine.generate([prompt_text(first.tokenizer, EXAMPLES[0], first.config.data)], 1,
                                       do_sample=False, max_new_tokens=12)
        first.output_dir.mkdir(parents=True, exist_ok=True)
        first.train_step()
        first.save()
        first.train_step()
        first.save()
        result = {"trainer": first, "initial_lora": initial_lora, "initial_base": initial_base,
                  "base_after_two": base_state(first.model), "lora_after_two": lora_state(first.model),
                  "greedy": first.tokenizer.decode(greedy.completion_ids[0][greedy.completion_mask[0].bool()])}
        # resume: the first checkpoint, in a fresh output folder, on the same 4-bit base
        resumed_dir = root / "b"
        (resumed_dir / "checkpoints").mkdir(parents=True)
        shutil.copytree(root / "a" / "checkpoints" / "step-000001", resumed_dir / "checkpoints" / "step-000001")
        (resumed_dir / "checkpoints" / "latest").write_text("step-000001")
        for rows in ("metrics.jsonl", "samples.jsonl"):  # the run's own rows: the checkpoint records their digest
            shutil.copy(root / "a" / rows, resumed_dir / rows)
        second = trainer_module.Trainer(config(resumed_dir, "train.resume=true"), model=first.model,
                                        tokenizer=first.tokenizer, train_examples=EXAMPLES, progress=False)
        result["resumed_at"] = second.step_index
        second.train()
        result["resumed"] = second
        result["lora_resumed"] = lora_state(second.model)
        yield result
    finally:
        trainer_module.score_rollouts = real


def test_four_bit_base_is_nf4_on_cpu_with_float32_compute(run):
    model = run["trainer"].model
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 30 * 7  # every projection of SmolLM2's 30 layers
    assert all(m.weight.device.type == "cpu" and m.weight.dtype == torch.uint8 for m in layers)
    assert all(m.compute_dtype == torch.float32 and m.weight.quant_state.quant_type == "nf4" for m in layers)
    assert not any(m.weight.requires_grad for m in layers)


def test_four_bit_fspo_steps_change_the_lora_weights_and_not_the_base(run):
    rows = read_metrics(run["trainer"].output_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["grad_norm"] > 0 and r["update_skipped"] == 0 for r in rows)
    initial, trained = run["initial_lora"], run["lora_after_two"]
    assert any(not torch.equal(initial[k], trained[k]) for k in initial if "lora_B" in k)
    before, after = run["initial_base"], run["base_after_two"]  # packed 4-bit weights and quantization state
    assert before.keys() == after.keys() and len(before) > 0
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_four_bit_base_generates(run):
    assert "Paris" in run["greedy"], run["greedy"]


def test_four_bit_checkpoint_resumes_to_the_same_weights(run):
    assert run["resumed_at"] == 1
    assert [r["step"] for r in read_metrics(run["resumed"].output_dir)] == [1, 2]
    expected, got = run["lora_after_two"], run["lora_resumed"]
    assert max((expected[k] - got[k]).abs().max().item() for k in expected) <= 1e-5
    saved = json.loads((run["resumed"].output_dir / "checkpoints" / "step-000002" / "model" /
                        "adapter_config.json").read_text())
    assert saved["peft_type"] == "LORA"


def test_four_bit_layer_keeps_its_gradient_after_an_inference_pass():
    """bitsandbytes repacks a CPU Linear4bit for inference at its first no-grad forward (on AVX512-BF16 CPUs),
    after which no gradient reaches its input; fspo_lite keeps the trainable layout (keep_trainable_4bit_layout)."""
    from fspo_lite.models.policy import keep_trainable_4bit_layout

    torch.manual_seed(0)
    layer = torch.nn.Sequential(bnb.nn.Linear4bit(64, 32, bias=False, compute_dtype=torch.float32, quant_type="nf4"))
    layer[0].weight = bnb.nn.Params4bit(torch.randn(32, 64), requires_grad=False, quant_type="nf4")
    layer = layer.to("cpu")  # quantizes
    assert keep_trainable_4bit_layout(layer) == 1
    x = torch.randn(3, 64, requires_grad=True)
    layer(x).sum().backward()
    before = x.grad.clone()
    with torch.no_grad():
        layer.eval()(torch.randn(3, 64))
    x.grad = None
    layer.train()(x).sum().backward()
    assert x.grad is not None and torch.equal(x.grad, before)


def test_four_bit_base_model_evaluates_without_an_adapter(tmp_path):
    """The study/lite base-model evaluation loads the 4-bit base with no adapter (nothing trains there); training
    a 4-bit base still needs LoRA."""
    from fspo_lite.config import ModelConfig
    from fspo_lite.drivers.runs import evaluate_base, run_config
    from fspo_lite.models.policy import ModelLoadError, load_policy

    shared = {"model.name": "smollm2-135m", "model.load_in_4bit": True, "evaluation.benchmarks": ["kbqa"],
              "evaluation.limit": 1, "evaluation.samples": 1, "evaluation.max_new_tokens": 8,
              "evaluation.step_verifier": "lexical"}
    record = evaluate_base(run_config(shared, "grpo", 0, tmp_path), tmp_path)
    assert record["method"] == "base" and "kbqa.correct" in record["metrics"]
    with pytest.raises(ModelLoadError, match="set model.lora=true"):
        load_policy(ModelConfig(name="smollm2-135m", load_in_4bit=True, lora=False))
