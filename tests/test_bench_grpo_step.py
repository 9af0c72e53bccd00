"""The pure parts of bench/grpo_step.py (bookkeeping, ratios, the summary line, the peak-RSS reset) and the
TRL-side advantage subclass (skipped when TRL, the `bench` extra, is not installed)."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import grpo_step  # noqa: E402
from grpo_step import StepRecord, compare, fspo_overhead, summarise, summary_line  # noqa: E402


def test_summarise_takes_medians_and_the_largest_peak():
    records = [StepRecord(3.0, 700, 100, {"update_s": 1.0}), StepRecord(1.0, 900, 100, {"update_s": 3.0}),
               StepRecord(2.0, 800, 120, {"update_s": 2.0, "fspo_s": 0.5})]
    summary = summarise(records)
    assert summary["steps"] == 3
    assert summary["step_s"] == 2.0
    assert summary["peak_mb"] == 800
    assert summary["max_peak_mb"] == 900
    assert summary["tokens_per_step"] == 100
    assert summary["parts_s"] == {"fspo_s": 0.0, "update_s": 2.0}  # a part a step lacks counts as 0 there


def test_compare_divides_fspo_lite_by_trl():
    ratios = compare({"step_s": 3.0, "peak_mb": 700.0}, {"step_s": 6.0, "peak_mb": 1400.0})
    assert ratios == {"time_ratio": 0.5, "memory_ratio": 0.5}


def test_fspo_overhead_is_a_share_of_the_rest_of_the_step():
    records = [StepRecord(11.0, 0, 0, {"fspo_s": 1.0, "verified_sentences": 10}),
               StepRecord(9.0, 0, 0, {"fspo_s": 1.0, "verified_sentences": 20})]
    overhead = fspo_overhead(records)
    assert overhead["fspo_s"] == 1.0
    assert overhead["grpo_step_s"] == 9.0  # (20 - 2) / 2
    assert overhead["share"] == pytest.approx(2.0 / 18.0)
    assert overhead["verified_sentences"] == 15


def test_summary_line_is_one_line_with_every_model():
    results = {
        "smollm2-135m": {"ratios": {"time_ratio": 0.456, "memory_ratio": 0.5},
                         "fspo_overhead": {"share": 0.0712, "verified_sentences": 9}},
        "tiny": {"ratios": {"time_ratio": 0.4, "memory_ratio": 0.31}, "fspo_overhead": None},
    }
    line = summary_line(results)
    assert "\n" not in line
    assert line == ("RATIOS smollm2-135m: time 0.46x TRL, peak memory 0.50x TRL, FSPO work 7.12% of a GRPO step "
                    "(9 sentences verified) | tiny: time 0.40x TRL, peak memory 0.31x TRL")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs")
def test_peak_rss_reset_forgets_an_earlier_peak():
    # 64 MiB mapped and touched, then unmapped: back to the OS whatever malloc keeps (an earlier Trainer in this
    # process may have set speed.keep_freed_memory's options)
    block = mmap.mmap(-1, 64 * 1024 * 1024)
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1
    block.close()
    before = grpo_step.read_status_kb("VmHWM")
    grpo_step.reset_peak_rss()
    after = grpo_step.read_status_kb("VmHWM")
    assert after <= before - 32 * 1024  # the 64 MiB peak is gone from the high-water mark
    assert after >= grpo_step.read_status_kb("VmRSS") - 4 * 1024


def test_trl_subclass_replaces_advantages_with_token_advantages(monkeypatch):
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    from trl_grpo import TokenAdvantageGRPOTrainer

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    generated = {"completion_mask": mask, "advantages": torch.tensor([0.5, -0.5])}
    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", lambda self, inputs: dict(generated))
    trainer = object.__new__(TokenAdvantageGRPOTrainer)  # the override needs no model: skip the heavy __init__
    trainer.generated_tokens = 0
    seen = []

    def advantage_fn(inputs, output):
        seen.append(inputs)
        return torch.tensor([[1.0, -1.0, 7.0], [2.0, 2.0, -2.0]])

    trainer.advantage_fn = advantage_fn
    output = trainer._generate_and_score_completions([{"prompt": "q"}])
    assert seen == [[{"prompt": "q"}]]
    assert torch.equal(output["advantages"], torch.tensor([[1.0, -1.0, 0.0], [2.0, 2.0, -2.0]]))  # padding zeroed
    assert trainer.generated_tokens == 5
    trainer.advantage_fn = lambda inputs, output: torch.zeros(2)
    with pytest.raises(ValueError, match="shape"):
        trainer._generate_and_score_completions([{"prompt": "q"}])


def test_the_sampler_dtype_option_reaches_fspo_lites_config_only(tmp_path):
    """--sampler-dtype bfloat16 sets fspo-lite's speed.sampler_dtype with its log-probs as pi_old (a valid config);
    the default leaves both at the policy's own weights."""
    plain = grpo_step.fspo_config(grpo_step.BenchSettings(), str(tmp_path))
    assert plain.speed.sampler_dtype == "policy" and not plain.rollout.use_sampler_logprobs
    lower = grpo_step.fspo_config(grpo_step.BenchSettings(sampler_dtype="bfloat16"), str(tmp_path))
    assert lower.speed.sampler_dtype == "bfloat16" and lower.rollout.use_sampler_logprobs
