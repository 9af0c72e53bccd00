"""The update's faster passes that change no number: LoRA projections as one autograd node (fspo_lite.speed.fused_lora),
grouped key/value heads inside torch's attention kernel (fspo_lite.speed.attention), malloc keeping freed memory
(fspo_lite.speed.allocator)."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from fspo_lite.config import load_config
from fspo_lite.speed import attention
from fspo_lite.speed.fused_lora import fused_lora, lora_linear, plain_adapter
from fspo_lite.models.policy import load_policy


def test_lora_linear_by_hand():
    # x = [1, 2]; W = [[1, 0], [0, 1], [1, 1]]; b = [0.5, 0, -1]; A = [[1, 1]] (r = 1); B = [[1], [0], [2]]; s = 2
    # x W^T + b = [1.5, 2, 2]; x A^T = [3]; s (x A^T) B^T = 2 * [3, 0, 6] = [6, 0, 12]; y = [7.5, 2, 14]
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    bias = torch.tensor([0.5, 0.0, -1.0])
    lora_a = torch.tensor([[1.0, 1.0]], requires_grad=True)
    lora_b = torch.tensor([[1.0], [0.0], [2.0]], requires_grad=True)
    y = lora_linear(x, weight, bias, lora_a, lora_b, 2.0)
    assert y.tolist() == [[7.5, 2.0, 14.0]]
    # loss = y . g with g = [1, 1, 1]: dy/dx = W^T g + s A^T (B^T g) = [2, 2] + 2 * [1, 1] * 3 = [8, 8]
    # dA = s (B^T g) x = 2 * 3 * [1, 2] = [6, 12]; dB = s g (x A^T) = 2 * 3 * [1, 1, 1] = [6, 6, 6]
    y.sum().backward()
    assert x.grad.tolist() == [[8.0, 8.0]]
    assert lora_a.grad.tolist() == [[6.0, 12.0]]
    assert lora_b.grad.tolist() == [[6.0], [6.0], [6.0]]


@pytest.mark.parametrize("scaling", [2.0, 0.75])
def test_lora_linear_against_autograd_of_the_plain_formula(scaling):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    weight, bias = torch.randn(24, 16, generator=generator, dtype=torch.float64), torch.randn(24, dtype=torch.float64)
    lora_a = torch.randn(4, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    lora_b = torch.randn(24, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, 5, 24, generator=generator, dtype=torch.float64)
    fused = lora_linear(x, weight, bias, lora_a, lora_b, scaling)
    grads = torch.autograd.grad((fused * upstream).sum(), (x, lora_a, lora_b))
    plain = x @ weight.T + bias + scaling * ((x @ lora_a.T) @ lora_b.T)
    expected = torch.autograd.grad((plain * upstream).sum(), (x, lora_a, lora_b))
    torch.testing.assert_close(fused, plain)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)
    assert torch.autograd.gradcheck(lambda *t: lora_linear(t[0], weight, None, t[1], t[2], scaling),
                                    (x[:1, :2].detach().requires_grad_(), lora_a, lora_b))


def _lora_model(*overrides):
    config = load_config("configs/tiny.yaml", ["model.lora=true", *overrides])
    model, _ = load_policy(config.model, seed=0)
    torch.manual_seed(1)
    with torch.no_grad():  # a non-zero adapter, so both of its gradients and its output are non-zero
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return model.train()


def _outputs_and_grads(model, ids, fused: bool):
    model.zero_grad(set_to_none=True)
    with fused_lora(model) if fused else torch.enable_grad() as swapped:
        logits = model(input_ids=ids).logits
        (logits * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return logits.detach(), grads, swapped


def test_one_layer_gives_peft_numbers_bit_for_bit_at_a_power_of_two_scale():
    from peft import LoraConfig, get_peft_model

    generator = torch.Generator().manual_seed(5)
    layer = torch.nn.Sequential(torch.nn.Linear(48, 96))
    model = get_peft_model(layer, LoraConfig(r=8, lora_alpha=16, target_modules=["0"]))  # scale 2
    with torch.no_grad():
        model.base_model.model[0].lora_B["default"].weight.normal_(0, 0.1, generator=generator)
    x = torch.randn(3, 11, 48, generator=generator, requires_grad=True)
    upstream = torch.randn(3, 11, 96, generator=generator)
    results = []
    for fused in (False, True):
        with fused_lora(model) if fused else torch.enable_grad():
            y = model(x)
            grads = torch.autograd.grad((y * upstream).sum(), [x, *(p for p in model.parameters() if p.requires_grad)])
        results.append((y.detach(), grads))
    (peft_y, peft_grads), (fused_y, fused_grads) = results
    assert torch.equal(fused_y, peft_y)
    assert len(fused_grads) == 3 and all(torch.equal(a, b) for a, b in zip(fused_grads, peft_grads))


def test_a_whole_model_gives_peft_outputs_bit_for_bit_and_its_gradients_to_rounding():
    model = _lora_model()  # configs/tiny.yaml: lora_alpha / lora_r = 2
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(2))
    peft_logits, peft_grads, _ = _outputs_and_grads(model, ids, fused=False)
    fused_logits, fused_grads, swapped = _outputs_and_grads(model, ids, fused=True)
    assert swapped == sum(1 for m in model.modules() if plain_adapter(m) is not None) == 14  # 7 per layer
    assert torch.equal(fused_logits, peft_logits)
    assert peft_grads.keys() == fused_grads.keys() and len(peft_grads) == 2 * swapped
    for name, grad in peft_grads.items():
        assert grad.abs().sum() > 0, name
        # q, k and v (gate and up) read one input: their input gradients are added in another grouping
        assert (fused_grads[name] - grad).norm() <= 1e-5 * grad.norm(), name
    # afterwards peft's own forward again
    assert not any("forward" in vars(m) for m in model.modules())


def test_other_scales_agree_to_rounding_and_adapters_switched_off_keep_peft():
    model = _lora_model("model.lora_alpha=6")  # scale 6 / 4 = 1.5
    ids = torch.randint(3, 200, (2, 7), generator=torch.Generator().manual_seed(3))
    peft_logits, peft_grads, _ = _outputs_and_grads(model, ids, fused=False)
    fused_logits, fused_grads, _ = _outputs_and_grads(model, ids, fused=True)
    torch.testing.assert_close(fused_logits, peft_logits, rtol=1e-5, atol=1e-6)
    for name, grad in peft_grads.items():
        assert (fused_grads[name] - grad).norm() <= 1e-5 * grad.norm(), name
    with torch.no_grad():
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        with fused_lora(model), model.disable_adapter():  # the reference pass inside the block: the base model
            assert torch.equal(model(input_ids=ids).logits, base)


def test_layers_it_cannot_fuse_keep_their_forward():
    from peft import LoraConfig, get_peft_model

    from fspo_lite.models.policy import load_model

    base = load_model(load_config("configs/tiny.yaml").model)
    for options in (dict(lora_dropout=0.1), dict(use_dora=True), dict(lora_bias=True)):
        model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], **options))
        with fused_lora(model) as swapped:
            assert swapped == 0, options
    with fused_lora(base) as swapped:  # no adapter at all
        assert swapped == 0
    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj"]))
    with pytest.raises(RuntimeError, match="boom"):
        with fused_lora(model) as swapped:
            assert swapped == 2
            raise RuntimeError("boom")
    assert not any("forward" in vars(m) for m in model.modules())  # restored after an error too


def test_grouped_query_sdpa_passes_grouped_heads_and_changes_no_number(monkeypatch):
    model = _lora_model()  # configs/tiny.yaml: 4 query heads on 2 key/value heads
    ids = torch.randint(3, 200, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: the call carries a mask, where transformers would copy the heads
    flags = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        flags.append((kwargs.get("enable_gqa", False), args[1].shape[1]))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    monkeypatch.delenv(attention.SWITCH, raising=False)
    results = []
    for grouped in (False, True):
        model.zero_grad(set_to_none=True)
        flags.clear()
        with attention.grouped_query_sdpa("cpu") if grouped else torch.enable_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
            (logits[mask.bool()] * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad],
                        list(flags)))
    (plain, plain_grads, plain_flags), (grouped, grouped_grads, grouped_flags) = results
    assert plain_flags and all(not flag and heads == 4 for flag, heads in plain_flags)  # copied to 4 heads
    assert grouped_flags and all(flag and heads == 2 for flag, heads in grouped_flags)  # 2 heads, grouped
    assert torch.equal(grouped, plain)
    assert all(torch.equal(a, b) for a, b in zip(grouped_grads, plain_grads))
    assert attention.SWITCH not in os.environ  # put back as it was


def test_grouped_query_sdpa_restores_the_switch_and_leaves_other_devices_alone(monkeypatch):
    monkeypatch.setenv(attention.SWITCH, "0")
    with attention.grouped_query_sdpa("cpu"):
        assert os.environ[attention.SWITCH] == "1"
    assert os.environ[attention.SWITCH] == "0"
    with attention.grouped_query_sdpa("cuda"):
        assert os.environ[attention.SWITCH] == "0"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_keep_freed_memory_keeps_a_freed_large_tensor_in_the_process():
    """In a child process (the setting is process-wide): a freed 40 MB tensor goes back to the OS under glibc's
    defaults (above the largest mmap threshold glibc ever picks itself, 32 MiB, it is always its own mapping), so the
    next one faults its pages in again; once freed memory is kept, it stays in the process for the next.

    Resident memory, not page-fault counts, is what is compared: with transparent huge pages on, or a heap that
    happens to sit below other blocks, the fault counts of the defaults vary from machine to machine."""
    script = textwrap.dedent("""
        import resource, sys, torch
        from fspo_lite.speed.allocator import keep_freed_memory
        kept = keep_freed_memory() if sys.argv[1] == "keep" else None
        def resident():
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * resource.getpagesize()
        a = torch.ones(10_000_000)  # 40 MB, every page touched
        held = resident()
        del a
        print(kept, (held - resident()) >> 20)
    """)
    released = {}
    for mode in ("default", "keep"):
        result = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, timeout=120,
                                cwd=os.path.dirname(os.path.dirname(__file__)))
        assert result.returncode == 0, result.stderr
        kept, mib = result.stdout.split()
        released[mode] = (kept, int(mib))
    assert released["default"][0] == "None" and released["keep"][0] == "True"
    assert released["default"][1] >= 30, released  # handed back to the OS
    assert released["keep"][1] < 4, released  # kept


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_blocks_made_outside_the_kept_heap_go_back_to_the_os():
    """With freed memory kept, a 40 MB tensor made inside `blocks_from_the_os` is its own mapping again: freed, it
    goes back to the OS; made outside, it stays in the process (as the test above shows for keep_freed_memory)."""
    script = textwrap.dedent("""
        import resource, torch
        from fspo_lite.speed.allocator import blocks_from_the_os, keep_freed_memory
        assert keep_freed_memory()
        def resident():
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * resource.getpagesize()
        released = []
        for inside in (True, False):
            if inside:
                with blocks_from_the_os():
                    a = torch.ones(10_000_000)  # 40 MB, every page touched
            else:
                a = torch.ones(10_000_000)
            held = resident()
            del a
            released.append((held - resident()) >> 20)
        print(*released)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0, result.stderr
    inside, outside = (int(x) for x in result.stdout.split())
    assert inside >= 30 and outside < 4, (inside, outside)


def test_the_trainer_update_is_the_same_with_the_faster_passes_on_or_off(tmp_path, tiny_policy):
    """speed.fused_lora and speed.grouped_query_sdpa change an update by float rounding only: the same loss, KL and
    entropy (the forward passes are the same numbers), the adapter after the optimizer step within rounding."""
    from fspo_lite.data.examples import QAExample
    from fspo_lite.update.trainer import Trainer

    examples = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
                QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]
    rollout, results = None, {}
    for faster in (False, True):
        model = copy.deepcopy(tiny_policy[0])
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "lora_B" in name:
                    parameter.copy_(torch.linspace(-0.05, 0.05, parameter.numel()).view_as(parameter))
        config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path / str(faster)}",
                                                   f"speed.fused_lora={faster}", f"speed.grouped_query_sdpa={faster}",
                                                   "train.beta=0.1", "train.micro_batch_size=2",
                                                   "train.learning_rate=1e-2"])
        trainer = Trainer(config, model, tiny_policy[1], examples, progress=False)
        torch.manual_seed(0)
        rollout = rollout or trainer.rollout(examples)
        advantages = torch.linspace(-1, 1, rollout.completion_ids.numel()).view_as(rollout.completion_mask.float())
        metrics = trainer.update(rollout, advantages)
        results[faster] = (metrics, {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n})
    (plain, plain_weights), (faster, faster_weights) = results[False], results[True]
    for key in ("loss", "kl", "entropy"):
        assert faster[key] == plain[key], key
    assert faster["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)
    assert plain_weights.keys() == faster_weights.keys()
    for name, weight in plain_weights.items():
        assert (faster_weights[name] - weight).norm() <= 1e-5 * weight.norm(), name
    start = {n: torch.linspace(-0.05, 0.05, w.numel()).view_as(w) for n, w in plain_weights.items() if "lora_B" in n}
    assert all(not torch.equal(faster_weights[n], w) for n, w in start.items())  # the step moved every B


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_packed_weights_land_outside_the_kept_heap_even_when_it_has_room():
    """With freed memory kept and 800 MB of resident free space in the heap, packing SmolLM2's output layer (113 MB)
    takes fresh pages (its written part becomes resident) instead of taking that free space, which the training step
    would otherwise have to grow the heap to get back (fspo_lite.speed.allocator.made_apart). Made in the main thread, as
    before the fix, the pack would cost about 1 MB of new resident memory here."""
    from fspo_lite.speed.llama_step import mkl_packing_available

    if not mkl_packing_available():
        pytest.skip("this torch has no MKL packed product")
    script = textwrap.dedent("""
        import resource, torch
        from fspo_lite.speed.allocator import keep_freed_memory
        from fspo_lite.speed.llama_step import WeightPacks
        assert keep_freed_memory()
        def resident():
            with open("/proc/self/statm") as statm:
                return int(statm.read().split()[1]) * resource.getpagesize() >> 20
        free_space = torch.ones(200_000_000)  # 800 MB, every page touched, then freed into the kept heap
        del free_space
        weight = torch.randn(49152, 576)
        before = resident()
        _, packed = WeightPacks().get([weight], rows=8)
        x = torch.randn(8, 576)
        same = torch.allclose(torch.ops.mkl._mkl_linear(x, packed, weight, None, 8), x @ weight.T, atol=1e-4)
        print(resident() - before, weight.nbytes >> 20, same)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=os.path.dirname(os.path.dirname(__file__)))
    assert result.returncode == 0, result.stderr
    grown, weight_mb, same = result.stdout.split()
    assert int(grown) >= 0.8 * int(weight_mb) and same == "True", result.stdout
