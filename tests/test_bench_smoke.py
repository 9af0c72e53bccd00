"""Every benchmark script the docs quote, run end to end as a user runs it (its own process, its command line) with
the smallest settings: the tiny random model, a few tokens, one step. A renamed function, option or file then breaks
`make test` instead of the next person who runs the benchmark. The figures these runs print mean nothing; the
scripts' documented commands (docs/performance.md and the pages that quote them) give the real ones.

scripts/bench_gpu.py and scripts/bench_gpu_trl.py have their smoke runs in tests/test_gpu_paths.py, scripts/data_build.py in
tests/test_data_build.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.bench


def run(script: str, *args: str, timeout: int = 300) -> str:
    """Run `python <script> <args>` from the repository root on the CPU; its stdout, or a failure with its output."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_WAIT_POLICY": "PASSIVE"}
    result = subprocess.run([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, f"{script} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_grpo_step_runs_both_trainers_for_one_step(tmp_path):
    """bench/grpo_step.py (the figures behind the TRL ratios): one forced-length step of fspo-lite and of TRL's
    GRPOTrainer, then one natural-length FSPO step with its extra scoring work timed."""
    # not skipped without TRL: the dev extra (`make setup`) installs it, so CI always runs the TRL side
    assert importlib.util.find_spec("trl"), "TRL is missing: `make setup` (the dev extra) installs it"
    out = tmp_path / "grpo_step.jsonl"
    stdout = run("bench/grpo_step.py", "--models", "tiny", "--steps", "1", "--warmup", "0", "--overhead-steps", "1",
                 "--max-new-tokens", "4", "--threads", "1", "--trl-keep-freed-memory", "--omp-wait-policy", "active",
                 "--set", "speed.packed_weights=false", "--out", str(out))
    line = json.loads(out.read_text())
    result = line["results"]["tiny"]
    # asked for ACTIVE over the environment's PASSIVE (run() sets it): both workers were started with it
    policies = {line["omp_wait_policy"], result["fspo-lite"]["omp_wait_policy"], result["trl"]["omp_wait_policy"]}
    assert policies == {"ACTIVE"}, policies
    for side in ("fspo-lite", "trl"):
        assert result[side]["steps"] == 1
        assert result[side]["tokens_per_step"] == 4 * 4 * 4  # prompts x G x forced length, on both sides
        assert result[side]["step_s"] > 0 and result[side]["peak_mb"] > 0
    assert set(result["fspo-lite"]["parts_s"]) >= {"generation_s", "reward_s", "update_s"}
    overhead = result["fspo_overhead"]
    assert overhead["steps"] == 1 and overhead["fspo_s"] >= 0 and overhead["grpo_step_s"] > 0
    assert result["versions"]["trl"]
    assert result["trl"]["keep_freed_memory"] is sys.platform.startswith("linux")  # glibc here; asked for
    assert stdout.splitlines()[-1].startswith("RATIOS tiny: time ")
    assert result["settings"]["fspo_settings"] == ["speed.packed_weights=false"]  # recorded with the figures
    assert line["machine"].endswith(f", {os.cpu_count()} cores") and stdout.startswith(f"machine: {line['machine']}")


def test_grpo_step_refuses_an_unknown_setting_before_any_worker_starts():
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "grpo_step.py"), "--set", "rollout.packd=false"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--set:" in result.stderr and "rollout.packd" in result.stderr
    assert "machine:" not in result.stdout  # stopped before the run's first line


def test_step_profile_runs():
    """bench/step_profile.py (the operator table behind docs/performance.md's "Where the step's time goes")."""
    stdout = run("bench/step_profile.py", "--model", "tiny", "--warmup", "0", "--tokens", "2", "--rows", "3",
                 "--threads", "1")
    lines = stdout.splitlines()
    assert lines[-1].startswith("MATMUL ") and "GFLOP/s" in lines[-1]
    assert any(line.startswith("aten::") for line in lines)  # the operator table


def test_step_profile_sums_the_matrix_products():
    """matmul_share by hand: 3 s of products (6e9 + 3e9 FLOPs) out of 4 s of self time."""
    spec = importlib.util.spec_from_file_location("step_profile", ROOT / "bench" / "step_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [{"name": "aten::mm", "self_s": 2.0, "calls": 5, "flops": 6e9},
            {"name": "aten::bmm", "self_s": 1.0, "calls": 1, "flops": 3e9},
            {"name": "aten::mul", "self_s": 1.0, "calls": 9, "flops": 0}]
    assert module.matmul_share(rows) == {"seconds": 3.0, "share": 0.75, "gflops_per_s": 3.0}
    assert module.matmul_share([]) == {"seconds": 0, "share": 0.0, "gflops_per_s": 0.0}


def test_four_bit_cpu_runs(tmp_path):
    """bench/four_bit_cpu.py, its float32 worker (the tiny model has no 4-bit form; tests/test_four_bit_cpu.py
    trains the 4-bit SmolLM2)."""
    out = tmp_path / "four_bit.jsonl"
    run("bench/four_bit_cpu.py", "--model", "tiny", "--variants", "float32", "--repeats", "1", "--tokens", "2",
        "--length", "8", "--out", str(out))
    row = json.loads(out.read_text())
    assert row["variant"] == "float32" and row["model"] == "tiny" and row["generation_s"] >= 0
    assert row["peak_rss_mib"] >= row["loaded_rss_mib"] > 0


def test_eval_throughput_runs():
    stdout = run("bench/eval_throughput.py", "--model", "tiny", "--questions", "2", "--batch-size", "2",
                 "--tokens", "3")
    assert "speed-up batched / one at a time" in stdout
    assert "6 tokens in" in stdout  # 2 questions x 3 tokens in each mode


def test_prompt_prefix_runs_and_both_settings_agree():
    stdout = run("bench/prompt_prefix.py", "--model", "tiny", "--questions", "2", "--samples", "2", "--tokens", "4",
                 "--repeats", "1", "--setting", "preallocate_cache", "--temperature", "0.7", "--min-new-tokens", "2")
    assert "same answers: True" in stdout


def test_prompt_prefix_times_the_plain_torch_decoding_steps_with_the_same_answers():
    stdout = run("bench/prompt_prefix.py", "--model", "tiny", "--questions", "2", "--samples", "2", "--tokens", "4",
                 "--repeats", "1", "--setting", "fast_steps", "--temperature", "0.7", "--min-new-tokens", "2")
    assert "fast_steps, 2 prompts" in stdout and "same answers: True" in stdout


def test_prompt_prefix_times_the_two_draws():
    stdout = run("bench/prompt_prefix.py", "--model", "tiny", "--questions", "2", "--samples", "2", "--tokens", "4",
                 "--repeats", "2", "--setting", "draw", "--temperature", "0.7", "--min-new-tokens", "4")
    assert "draw, 2 prompts x 2 samples x 4 tokens" in stdout
    assert "mean answer tokens 4.0 without, 4.0 with" in stdout  # forced to full length on both sides


def test_truthfulqa_mc_runs():
    stdout = run("bench/truthfulqa_mc.py", "--model", "tiny", "--items", "2", "--batch-size", "4", "--check", "3")
    assert "largest difference from the direct computation over 3 pairs" in stdout


def test_likelihood_share_runs():
    stdout = run("bench/likelihood_share.py", "--model", "tiny", "--limit", "6", "--repeats", "1", "--batch-size", "4")
    assert "largest gain difference" in stdout


def test_gold_auroc_interval_runs():
    stdout = run("bench/gold_auroc_interval.py", "--verifiers", "lexical", "--resamples", "20")
    assert "lexical: AUROC" in stdout and "(95% bootstrap over questions" in stdout


def test_verifier_length_strata_runs_on_the_bundled_sample():
    stdout = run("bench/verifier_length_strata.py", "--data-file", "data/halueval_qa_sample.jsonl")
    lines = stdout.splitlines()
    assert lines[0] == "200 rows of halueval_qa_sample.jsonl"
    assert [line.split()[0] for line in lines[1:]] == ["1-2", "3-5", "6-9", "10+"]
    assert sum(int(line.split()[1]) for line in lines[1:]) == 200


def test_hostile_grading_runs():
    stdout = run("bench/hostile_grading.py", "--benign", "8")
    assert "sentinel created: False" in stdout
    assert "wrong verdicts: 0" in stdout


def test_fuzz_parsers_command_line_runs():
    run("bench/fuzz_parsers.py", "--count", "10")


def test_matmul_share_runs():
    stdout = run("bench/matmul_share.py", "--profile", "quick", "--questions", "1", "--items", "1", "--steps", "1",
                 "--judge-model", "tiny")
    assert "training, 1 steps of fspo" in stdout


def test_study_time_runs(tmp_path):
    out = tmp_path / "study_time.json"
    run("bench/study_time.py", "--profile", "quick", "--steps", "1", "--fraction", "0.01", "--out", str(out))
    assert json.loads(out.read_text())["profile"] == "quick"


def test_gemm_dtype_runs():
    stdout = run("bench/gemm_dtype.py", "--rows", "4", "--rounds", "1", "--seconds", "0.01", "--threads", "1")
    assert "4 rows: float32 " in stdout and "bfloat16 / float32 speed" in stdout


def test_sampler_precision_runs(tmp_path):
    """bench/sampler_precision.py: int8 and bfloat16 samplers against float32 (speed, log-prob gap, outliers)."""
    out = tmp_path / "sampler.jsonl"
    stdout = run("bench/sampler_precision.py", "--model", "tiny", "--questions", "2", "--samples", "2", "--tokens",
                 "3", "--repeats", "1", "--out", str(out))
    assert "log-prob gap to float32, int8:" in stdout and "bfloat16:" in stdout
    result = json.loads(out.read_text())
    assert set(result["speed"]) == {"float32", "int8", "int8-no-down", "bfloat16"}
    assert set(result["gap"]) == {"int8", "int8-no-down", "bfloat16"} and result["tokens_scored"] > 0
    # the tiny model's random weights have no outliers: every variant stays close to float32 there
    assert all(gap["mean_abs"] < 0.1 for gap in result["gap"].values())


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sampler_precision_quantizes_rows_as_computed_by_hand():
    import torch

    bench = load_bench("sampler_precision")
    weight = torch.tensor([[0.5, -1.27, 0.0], [0.0, 0.0, 0.0], [2.54, 1.0, -0.02]])
    values, scales = bench.quantize_rows(weight)
    # row 0: scale 1.27 / 127 = 0.01 -> 50, -127, 0; row 1: all zero -> scale 1; row 2: scale 0.02 -> 127, 50, -1
    assert torch.allclose(scales, torch.tensor([0.01, 1.0, 0.02]))
    assert values.tolist() == [[50, -127, 0], [0, 0, 0], [127, 50, -1]] and values.dtype == torch.int8
    assert ((values.float() * scales[:, None] - weight).abs() <= scales[:, None] / 2 + 1e-7).all()
    # torch's int8 linear holds the same integers and computes x @ (q * scale)^T
    layer = bench.int8_linear(weight, None)
    assert layer.weight().int_repr().tolist() == values.tolist()
    with pytest.raises(ValueError, match=r"\(out, in\) weight"):
        bench.quantize_rows(torch.ones(3))


def test_sampler_precision_gap_by_hand():
    import torch

    bench = load_bench("sampler_precision")
    reference = torch.tensor([-1.0, -2.0, -0.5, -3.0])
    other = torch.tensor([-1.0, -2.5, -0.4, -3.0])  # ratios exp(ref - other): 1, e^0.5 = 1.65, e^-0.1 = 0.905, 1
    result = bench.gap(reference, other)
    assert result["mean_abs"] == pytest.approx(0.15) and result["outside_clip"] == pytest.approx(0.25)


def test_sampler_precision_int8_context_restores_the_float_layers():
    import torch

    bench = load_bench("sampler_precision")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    before = model(x)
    with bench.int8_weights(model) as swapped:
        inside = model(x)
    assert swapped == 2 and not torch.equal(inside, before) and torch.allclose(inside, before, atol=0.05)
    assert torch.equal(model(x), before) and "forward" not in vars(model[0])
    with bench.int8_weights(model, skip=("2",)) as swapped:
        assert swapped == 1


def test_packed_linear_runs():
    from fspo_lite.speed.llama_step import mkl_packing_available

    if not mkl_packing_available():
        pytest.skip("this torch has no MKL packed product")
    stdout = run("bench/packed_linear.py", "--rows", "2,16", "--rounds", "1", "--layers", "2", "--threads", "1")
    assert "down (1536 -> 576), 16 rows: plain" in stdout and "packed / plain time" in stdout
    assert stdout.count("equal bit for bit") == 10  # 5 products x 2 row counts


def test_prompt_prefix_times_the_packed_weights():
    stdout = run("bench/prompt_prefix.py", "--model", "tiny", "--questions", "2", "--samples", "2", "--tokens", "4",
                 "--repeats", "1", "--setting", "packed_weights", "--temperature", "0.7", "--min-new-tokens", "4")
    assert "packed_weights, 2 prompts x 2 samples x 4 tokens" in stdout


@pytest.mark.parametrize("text, described", [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
     "flags\t\t: fpu avx2 avx512f avx512_bf16 avx_vnni\n\nprocessor\t: 1\nmodel name\t: other\n",
     "AMD EPYC (family 26, model 2; avx2, avx512f, avx512_bf16)"),
    ("model name\t: Intel(R) Xeon(R) Processor\nflags\t: amx_bf16 avx2 avx512_bf16 avx512f amx_tile\n",
     "Intel(R) Xeon(R) Processor (avx2, avx512f, avx512_bf16, amx_bf16)"),  # the table's order, not the file's
    ("model name\t: Old CPU\nflags\t: sse2\n", "Old CPU"),
    ("cpu family\t: 6\n", "family 6"),
    ("", ""),
    ("\x00garbage without colons\n:::\nmodel name:\n", ""),
])
def test_cpu_from_cpuinfo(text, described):
    """The CPU line every benchmark prints and records (family and model tell the EPYC machines apart)."""
    from fspo_lite.machine import cpu_description, cpuinfo_fields

    assert cpu_description(cpuinfo_fields(text)) == described

