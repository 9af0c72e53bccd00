"""The GPU paths: their CPU-side logic and guards here, the real thing in tests marked `gpu`.

On a machine without CUDA the `gpu` tests skip (tests/conftest.py) and the rest check that the
CPU install never imports vllm or unsloth, and that asking for them fails clearly. (bitsandbytes is
part of the CPU install: 4-bit QLoRA runs on the CPU too, tests/test_four_bit_cpu.py.)
docs/gpu.md has the commands to run the `gpu` tests and the benchmark on a GPU.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from fspo_lite.config import ModelConfig
from fspo_lite.models import precision
from fspo_lite.models.policy import (
    LARGE_MODEL_PARAMETERS,
    ModelLoadError,
    four_bit_options,
    four_bit_placement,
    load_policy,
    wants_gradient_checkpointing,
)

REPO = Path(__file__).resolve().parents[1]
GPU_PACKAGES = ("vllm", "unsloth")


def test_four_bit_options_are_qlora():
    assert four_bit_options(torch.float16) == {
        "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
        "bnb_4bit_compute_dtype": torch.float16,
    }
    assert precision.dtype_for(True) == torch.bfloat16 and precision.dtype_for(False) == torch.float16


from conftest import GPUS  # noqa: E402  (the simulated GPUs; the `simulate_gpu` fixture answers as one)


@pytest.mark.parametrize("old_torch", [False, True])
@pytest.mark.parametrize("gpu", list(GPUS))
def test_every_gpu_path_computes_in_the_native_dtype(simulate_gpu, tmp_path, gpu, old_torch):
    """A T4 and a V100 (bfloat16 emulated at most) get float16 on every path, an A100 and an H100 bfloat16: the
    4-bit compute dtype, vLLM's dtype (4-bit too), FSDP's mixed precision and the trainer's loss scaling."""
    from fspo_lite.config import load_config
    from fspo_lite.rollout.vllm_rollout import llm_arguments, vllm_option_problems
    from fspo_lite.update.fsdp import mixed_precision_policy

    expected = simulate_gpu(gpu, old_torch)
    name = str(expected).replace("torch.", "")
    assert torch.cuda.is_bf16_supported()  # the emulation answer the rule must not trust
    assert precision.gpu_compute_dtype() == expected
    dtype, device_map = four_bit_placement("float32")
    assert dtype == expected and device_map == {"": 0}
    assert four_bit_options(dtype)["bnb_4bit_compute_dtype"] == expected
    assert four_bit_placement("float16")[0] == torch.float16  # an explicit 16-bit model.dtype is kept
    config = load_config(str(REPO / "configs" / "colab_t4.yaml"), [f"train.output_dir={tmp_path}"])
    assert config.model.load_in_4bit and config.rollout.engine == "vllm"
    assert llm_arguments(config.rollout, config.model, config.train, 64, "cuda")["dtype"] == name
    assert vllm_option_problems(config.rollout, config.model, "cuda") == []
    plain = load_config(None, ["rollout.engine=vllm", "model.dtype=float16"])
    assert llm_arguments(plain.rollout, plain.model, plain.train, 64, "cuda")["dtype"] == "float16"
    (line,) = vllm_option_problems(plain.rollout, load_config(None, ["rollout.engine=vllm"]).model, "cuda")
    assert f"set model.dtype={name} " in line  # a float32 model is told this GPU's dtype
    policy = mixed_precision_policy(precision.fsdp_compute_dtype(torch.device("cuda", 0), torch.float32))
    assert policy.param_dtype == expected and policy.reduce_dtype == torch.float32
    assert precision.fsdp_compute_dtype(torch.device("cuda", 0), torch.bfloat16) is None
    scaled = expected == torch.float16
    assert precision.needs_loss_scaling("float32", True, False, "cuda") is scaled  # 4-bit QLoRA
    assert precision.needs_loss_scaling("float32", False, True, "cuda") is scaled  # FSDP mixed precision
    assert precision.needs_loss_scaling("float16", False, False, "cuda") is True
    assert precision.needs_loss_scaling("float32", False, False, "cuda") is False  # plain float32 weights
    assert precision.needs_loss_scaling("float16", False, False, "cpu") is False
    assert f"{gpu}, compute capability {GPUS[gpu][0][0]}.{GPUS[gpu][0][1]}" in precision.device_description()


@pytest.mark.parametrize("gpu", list(GPUS))
def test_explicit_bfloat16_for_vllm_is_refused_in_one_line_without_native_bfloat16(simulate_gpu, gpu):
    from fspo_lite.config import load_config
    from fspo_lite.rollout.vllm_rollout import vllm_option_problems

    native = simulate_gpu(gpu) == torch.bfloat16
    for overrides in (["model.dtype=bfloat16"], ["model.dtype=bfloat16", "model.load_in_4bit=true"]):
        config = load_config(None, ["rollout.engine=vllm", *overrides])
        problems = vllm_option_problems(config.rollout, config.model, "cuda")
        if native:
            assert problems == []
        else:
            (line,) = problems
            assert "\n" not in line and line.endswith("set model.dtype=float16") and gpu in line


def test_cpu_keeps_float32_everywhere(monkeypatch):
    """Without a GPU: 4-bit computes in float32, FSDP does not cast, the trainer never scales its loss."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert four_bit_placement("float32") == (torch.float32, {"": "cpu"})
    assert four_bit_placement("bfloat16") == (torch.float32, {"": "cpu"})
    assert precision.fsdp_compute_dtype(torch.device("cpu"), torch.float32) is None
    assert precision.vllm_dtype("float32", False) == "float32"
    assert not precision.native_bf16() and precision.device_description() == "no CUDA GPU"
    assert not any(precision.needs_loss_scaling(dtype, four, fsdp, "cpu") for dtype in ("float32", "float16")
                   for four in (False, True) for fsdp in (False, True))


def test_gradient_checkpointing_rule():
    assert wants_gradient_checkpointing(None, LARGE_MODEL_PARAMETERS) is False
    assert wants_gradient_checkpointing(None, LARGE_MODEL_PARAMETERS + 1) is True
    assert wants_gradient_checkpointing(False, 7_000_000_000) is False
    assert wants_gradient_checkpointing(True, 1_000) is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only errors")
@pytest.mark.parametrize("overrides, message", [
    ({"backend": "unsloth"}, r"model.backend=unsloth needs a CUDA GPU"),
])
def test_gpu_options_fail_clearly_without_a_gpu(overrides, message):
    with pytest.raises(ModelLoadError, match=message):
        load_policy(ModelConfig(name="tiny", **overrides))


def test_a_missing_gpu_package_names_its_own_extra(monkeypatch):
    """Unsloth has its own extra (it caps transformers), so the message names `unsloth`, not `gpu`."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(ModelLoadError) as raised:
        load_policy(ModelConfig(name="tiny", backend="unsloth"))
    assert "pip install 'fspo-lite[unsloth]'" in str(raised.value)
    assert "-c requirements/gpu-constraints.txt" in str(raised.value) and "[gpu]" not in str(raised.value)


@pytest.mark.parametrize("overrides, message", [
    ({"backend": "jax"}, "unknown model.backend 'jax'"),
    ({"load_in_4bit": True, "lora": False}, "QLoRA"),
    ({"load_in_4bit": True}, "the tiny test model has no 4-bit variant"),
])
def test_invalid_scale_options(overrides, message):
    with pytest.raises(ModelLoadError, match=message):
        load_policy(ModelConfig(name="tiny", **overrides))


def test_cpu_path_never_imports_gpu_packages(tmp_path):
    """A fresh interpreter imports every fspo_lite module and trains one CLI step of the tiny model;
    none of the GPU packages may be in sys.modules afterwards. On the CPU install they are absent, so
    an unguarded import would also crash the run. vllm and unsloth are moreover replaced by poisoned
    stand-ins that fail when imported, which shows the guards hold even where they are installed.
    (bitsandbytes is not among them: it is part of the CPU install, and peft imports it whenever it is installed.)"""
    for name in ("vllm", "unsloth"):
        (tmp_path / "poison" / name).mkdir(parents=True)
        (tmp_path / "poison" / name / "__init__.py").write_text(
            f"raise ImportError('{name} was imported on the CPU path')\n")
    from fspo_lite.data.examples import QAExample, save_examples

    save_examples([QAExample("a", "What is the capital of France?", ["Paris"], "Paris is in France.")] * 2,
                  tmp_path / "train.jsonl")
    script = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        import fspo_lite
        for module in pkgutil.walk_packages(fspo_lite.__path__, "fspo_lite."):
            importlib.import_module(module.name)
        from fspo_lite.__main__ import main
        main(["train", "--config", "configs/tiny.yaml", "--set", "train.steps=1", "--set", "rollout.max_new_tokens=4",
              "--set", "train.output_dir={tmp_path / 'run'}", "--set", "data.train={tmp_path / 'train.jsonl'}"])
        loaded = [name for name in {GPU_PACKAGES!r} if name in sys.modules]
        assert not loaded, loaded
        print("clean")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "poison"), str(REPO)]),
           "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("clean"), result.stderr[-3000:]


# ---- on a GPU -------------------------------------------------------------------------------

def random_qwen_folder(path: Path, layers: int = 2, hidden: int = 256) -> Path:
    """A small random-weight Qwen2-architecture model saved with the SmolLM2 tokenizer (no download)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from fspo_lite.models.policy import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def gpu_config(tmp_path, model_dir, *overrides):
    from fspo_lite.config import load_config

    return load_config(REPO / "configs" / "tiny.yaml", [
        f"model.name={model_dir}", f"train.output_dir={tmp_path / 'run'}", "train.steps=2", *overrides])



def _examples():
    from fspo_lite.data.examples import QAExample

    return [QAExample(str(i), f"What is {i} plus {i}?", [str(2 * i)], f"{i} plus {i} is {2 * i}.") for i in range(4)]


@pytest.mark.gpu
def test_qlora_4bit_trains_on_gpu(tmp_path):
    pytest.importorskip("bitsandbytes", reason="the 'gpu' extra (bitsandbytes) is not installed")
    from fspo_lite.update.trainer import Trainer

    model_dir = random_qwen_folder(tmp_path / "model")
    trainer = Trainer(gpu_config(tmp_path, model_dir, "model.load_in_4bit=true"), train_examples=_examples(),
                      progress=False)
    assert any(type(m).__name__ == "Linear4bit" for m in trainer.model.modules())
    assert next(trainer.model.parameters()).device.type == "cuda"
    history = trainer.train()
    assert len(history) == 2 and all(row["loss"] is not None for row in history)


@pytest.mark.gpu
@pytest.mark.parametrize("sleep", [False, True], ids=["awake", "sleep_mode"])
def test_vllm_colocated_engine_on_gpu(tmp_path, sleep):
    pytest.importorskip("vllm", reason="the 'gpu' extra (vllm) is not installed")
    from fspo_lite.update.distributed import Distributed
    from fspo_lite.models.policy import load_policy
    from fspo_lite.rollout.engines import build_rollout_engine

    model_dir = random_qwen_folder(tmp_path / "model")
    config = gpu_config(tmp_path, model_dir, "rollout.engine=vllm", "rollout.vllm_gpu_memory_utilization=0.3",
                        "rollout.use_sampler_logprobs=true", "rollout.max_new_tokens=16", "model.dtype=bfloat16",
                        f"rollout.vllm_enable_sleep_mode={str(sleep).lower()}")
    model, tokenizer = load_policy(config.model)
    engine = build_rollout_engine(model.cuda(), tokenizer, config.rollout, config.model, config.train,
                                  config.data.max_prompt_tokens, Distributed())
    first = engine.generate(["Hello there", "What is two plus two?"], num_samples=3)
    second = engine.generate(["Hello there"], num_samples=2, do_sample=False)
    assert first.completion_ids.shape[0] == 6 and first.completion_ids.device.type == "cuda"
    assert first.sampling_logprobs is not None and (first.sampling_logprobs <= 0).all()
    assert torch.equal(second.completion_ids[0], second.completion_ids[1])  # greedy
    assert engine.adapters.version == 2
    assert engine.asleep is sleep  # sleep mode: the engine sleeps after each rollout and woke for the second


@pytest.mark.gpu
def test_unsloth_backend_on_gpu(tmp_path):
    pytest.importorskip("unsloth", reason="the 'unsloth' extra is not installed")
    from fspo_lite.update.trainer import Trainer

    model_dir = random_qwen_folder(tmp_path / "model")
    config = gpu_config(tmp_path, model_dir, "model.backend=unsloth", "model.load_in_4bit=true", "model.lora_r=8")
    history = Trainer(config, train_examples=_examples(), progress=False).train()
    assert len(history) == 2


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_ddp_on_two_gpus_keeps_ranks_identical(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "tests/dist_driver.py", str(tmp_path), "2", "fspo"]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    zero, one = (torch.load(tmp_path / f"weights-rank{r}-step2.pt", weights_only=True) for r in (0, 1))
    assert all(torch.equal(zero[k], one[k]) for k in zero)


def test_four_bit_without_a_working_bitsandbytes_fails_in_one_line(tmp_path, monkeypatch):
    """Missing package, or a wheel that cannot run on this platform (it raises at import): one line naming the fix."""
    import importlib.util as util

    from fspo_lite.models.policy import require_bitsandbytes

    real_find_spec = util.find_spec
    monkeypatch.setattr(util, "find_spec",
                        lambda name, *a: None if name == "bitsandbytes" else real_find_spec(name, *a))
    with pytest.raises(ModelLoadError, match=r"needs the 'bitsandbytes' package: pip install") as missing:
        require_bitsandbytes()
    monkeypatch.setattr(util, "find_spec", real_find_spec)
    (tmp_path / "bitsandbytes").mkdir()
    (tmp_path / "bitsandbytes" / "__init__.py").write_text(
        "raise RuntimeError('no native library for this CPU\\nmore')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bitsandbytes", raising=False)
    with pytest.raises(ModelLoadError, match=r"bitsandbytes cannot run here \(RuntimeError: no native library for "
                                             r"this CPU\); use model.load_in_4bit=false$") as broken:
        require_bitsandbytes()
    assert "\n" not in str(missing.value) and "\n" not in str(broken.value)


def test_gpu_packages_are_absent_here_or_gpu_present():
    """Documents the machine: the CPU install has none of the GPU packages (they stay uninstalled)."""
    if not torch.cuda.is_available():
        assert [p for p in GPU_PACKAGES if importlib.util.find_spec(p) is not None] == []


def test_gpu_benchmark_script_runs_its_cpu_smoke_configuration(tmp_path):
    """scripts/bench_gpu.py end to end on a toy Qwen2 (no 4-bit, one step of 2 tokens): keeps the GPU
    benchmark runnable when the trainer's interfaces change (a GPU session should not find it broken)."""
    out = tmp_path / "results.jsonl"
    command = [sys.executable, str(REPO / "scripts" / "bench_gpu.py"), "--models", "qwen2-test", "--methods", "fspo",
               "--no-4bit", "--steps", "1", "--max-new-tokens", "2", "--prompts", "2", "--group-size", "2",
               "--cache", str(tmp_path / "cache"), "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    row = json.loads(out.read_text().splitlines()[0])
    assert row["model"] == "qwen2-test" and row["method"] == "fspo" and row["measured_steps"] == 1
    assert row["completion_length"] == 2 and row["step_time_s"] > 0


def test_trl_gpu_benchmark_script_runs_its_cpu_smoke_configuration(tmp_path):
    """scripts/bench_gpu_trl.py (TRL's GRPOTrainer, the GPU comparison) end to end on a toy Qwen2 with TRL's own
    generation (--no-vllm), one measured step of 2 tokens: the columns the GPU run reports are all there."""
    pytest.importorskip("trl", reason="the dev/bench extra (TRL) is not installed")
    out = tmp_path / "results.jsonl"
    command = [sys.executable, str(REPO / "scripts" / "bench_gpu_trl.py"), "--models", "qwen2-test", "--no-vllm",
               "--steps", "1", "--max-new-tokens", "2", "--prompts", "2", "--group-size", "2", "--micro-batch", "2",
               "--cache", str(tmp_path / "cache"), "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    row = json.loads(out.read_text().splitlines()[0])
    assert row["engine"] == "trl" and row["measured_steps"] == 1 and row["completion_length"] == 2
    assert 0 < row["generation_time_s"] < row["step_time_s"]


def test_gpu_memory_held_counts_this_process_and_its_children():
    """bench_gpu.held_gib by hand (MiB lines of nvidia-smi; other processes' lines left out), and process_tree
    finds a child process (vLLM's engine core runs in one)."""
    from conftest import load_script

    bench = load_script("bench_gpu")
    smi = "101, 2048\n202, 1024\n303, 512\n"
    assert bench.held_gib(smi, {101, 303}) == 2.5
    assert bench.held_gib("", {101}) == 0 and bench.held_gib(smi, set()) == 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert {os.getpid(), child.pid} <= bench.process_tree(os.getpid())
    finally:
        child.kill()
        child.wait()
