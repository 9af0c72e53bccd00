"""Every benchmark script the docs quote, run end to end as a user runs it (its own process, its command line) with
the smallest settings: the tiny random model, a few tokens, one step. A renamed function, option or file then breaks
`make test` instead of the next person who runs the benchmark. The figures these runs print mean nothing; the
scripts' documented commands (docs/performance.md and the pages that quote them) give the real ones.

The other bench/ scripts have their smoke runs beside the code they measure: bench/trl_grpo.py inside grpo_step's run
here, bench/advantage_mass.py in tests/test_advantage_mass.py, bench/hostile_inputs.py and bench/hostile_outside.py in
tests/test_bench_hostile_inputs.py, bench/vllm_rollout.py and bench/vllm_server.py in tests/test_vllm_real.py (vLLM
needed; their pure parts in tests/test_bench_vllm.py and tests/test_vllm_server_stop.py). scripts/bench_gpu.py and
scripts/bench_gpu_trl.py have theirs in tests/test_gpu_paths.py, scripts/data_build.py in tests/test_data_build.py.
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


def test_eval_throughput_runs():
    stdout = run("bench/eval_throughput.py", "--model", "tiny", "--questions", "2", "--batch-size", "2",
                 "--tokens", "3")
    assert "speed-up batched / one at a time" in stdout
    assert "6 tokens in" in stdout  # 2 questions x 3 tokens in each mode


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

