"""Several processes: the sharding/normaliser/metric arithmetic by hand, then real 2-process CPU runs.

The multi-process tests launch `accelerate` with gloo on CPU (tests/dist_driver.py gives fixed
completions and rewards, so a 2-process step and a 1-process step see the same global batch).
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fspo_lite import algos
from fspo_lite.update.distributed import combine_metrics, launch_problem, loss_normalisers, shard_bounds

REPO = Path(__file__).resolve().parents[1]


def test_shard_bounds_are_contiguous_and_equal():
    assert [shard_bounds(6, 3, r) for r in range(3)] == [(0, 2), (2, 4), (4, 6)]
    assert shard_bounds(4, 1, 0) == (0, 4)
    with pytest.raises(ValueError, match="multiple of the number of processes"):
        shard_bounds(5, 2, 0)


def test_loss_normalisers_divide_global_counts_by_world_size():
    assert loss_normalisers(30.0, 8, 2) == (15.0, 4.0)
    assert loss_normalisers(7.0, 3, 1) == (7.0, 3.0)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "dr_grpo"])
def test_rank_gradients_averaged_equal_the_single_process_gradient(mode):
    """Two 'ranks' each aggregate their half with the normalisers; the mean of their gradients
    (what DDP applies) equals the gradient of the whole batch's loss."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 5, generator=generator, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.float)
    token_loss = logits * torch.arange(1.0, 6.0)
    (whole,) = torch.autograd.grad(algos.aggregate_loss(token_loss, mask, mode, 5), logits, retain_graph=True)
    tokens, sequences = loss_normalisers(mask.sum().item(), 4, 2)
    ranks = []
    for rows in (slice(0, 2), slice(2, 4)):
        loss = algos.aggregate_loss(token_loss[rows], mask[rows], mode, 5, tokens, int(sequences))
        (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
        ranks.append(grad)
    assert torch.allclose((ranks[0] + ranks[1]) / 2, whole, atol=1e-7)


def test_combine_metrics_means_sums_and_keeps_identical_integers():
    per_rank = [
        {"step": 3, "reward_mean": 0.5, "verified_sentences": 4, "tokens_per_second": 100.0, "step_factuality": 1.0,
         "note": "a"},
        {"step": 3, "reward_mean": 0.0, "verified_sentences": 6, "tokens_per_second": 50.0, "step_factuality": 0.5,
         "note": "b"},
    ]
    combined = combine_metrics(per_rank)
    assert combined == {"step": 3, "reward_mean": 0.25, "verified_sentences": 10, "tokens_per_second": 150.0,
                        "step_factuality": 0.75, "note": "a"}
    assert isinstance(combined["step"], int)
    gaps = [{"sampler_logprob_gap_mean": 0.1, "sampler_logprob_gap_max": 0.3},
            {"sampler_logprob_gap_mean": 0.3, "sampler_logprob_gap_max": 0.9}]
    assert combine_metrics(gaps) == pytest.approx({"sampler_logprob_gap_mean": 0.2, "sampler_logprob_gap_max": 0.9})


@pytest.mark.parametrize("env, joined, expected", [
    ({}, 1, None),
    ({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, 2, None),
    ({"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, 1, "did not join"),
    ({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1"}, 1, "only through MPI"),
    ({"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "PMI_SIZE": "2"}, 1, None),
    ({"ACCELERATE_USE_CPU": "True"}, 1, None),
])
def test_launch_problems_are_named(env, joined, expected):
    problem = launch_problem(env, joined)
    assert (problem is None) if expected is None else (expected in problem and "ACCELERATE_USE_CPU=1" in problem)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launch(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    """`accelerate launch` of 2 CPU processes over gloo (see fspo_lite.update.distributed.CPU_LAUNCH)."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(_free_port()), *args]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def _driver():
    spec = importlib.util.spec_from_file_location("dist_driver", REPO / "tests" / "dist_driver.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_processes_match_one_process_and_the_cli_runs(tmp_path):
    """One launch of 2 processes: the fixed-batch driver (2 steps), then the real CLI (2 steps)."""
    from fspo_lite.data.examples import save_examples

    driver = _driver()
    save_examples(driver.EXAMPLES, tmp_path / "train.jsonl")
    result = _launch(["tests/dist_driver.py", str(tmp_path / "multi"), "2", "fspo",
                      "--then-cli", str(tmp_path / "train.jsonl")])
    driver.train(tmp_path / "single", 1, "fspo")
    load = lambda name: torch.load(name, weights_only=True)  # noqa: E731
    rank0 = [load(tmp_path / "multi" / f"weights-rank0-step{s}.pt") for s in (1, 2)]
    rank1 = [load(tmp_path / "multi" / f"weights-rank1-step{s}.pt") for s in (1, 2)]
    single = load(tmp_path / "single" / "weights-rank0-step1.pt")
    for zero, one in zip(rank0, rank1):
        assert zero.keys() == one.keys() and all(torch.equal(zero[k], one[k]) for k in zero)
    assert any(not torch.equal(rank0[0][k], rank0[1][k]) for k in rank0[0])  # the second step moved the adapter
    assert max((rank0[0][k] - single[k]).abs().max().item() for k in single) < 1e-6
    multi_rows = [json.loads(line) for line in (tmp_path / "multi" / "metrics.jsonl").read_text().splitlines()]
    single_rows = [json.loads(line) for line in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in multi_rows] == [1, 2]  # written once, by the main process
    launch = json.loads((tmp_path / "multi" / "launch.json").read_text())
    assert launch == {"distributed_type": "DistributedType.MULTI_CPU", "world_size": 2, "shards_weights": False}
    for key in ("loss", "grad_norm", "completion_length", "frac_reward_zero_std"):
        assert multi_rows[0][key] == pytest.approx(single_rows[0][key], rel=1e-5, abs=1e-7)
    # the CLI part: 2 steps, one report, metrics written once, a checkpoint
    cli = tmp_path / "multi" / "cli"
    assert result.stdout.count("metrics:") == 1  # only the main process reports
    assert [json.loads(line)["step"] for line in (cli / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert (cli / "checkpoints" / "step-000002" / "manifest.json").exists()
