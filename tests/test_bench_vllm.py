"""The pure parts of bench/vllm_rollout.py (the gap statistics, the summary); its end-to-end smoke run with the real
engines is tests/test_vllm_real.py::test_bench_vllm_rollout_smoke."""

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from vllm_rollout import gap_statistics, summary, tokens_per_second  # noqa: E402


def test_gap_statistics_by_hand():
    sampler = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, -9.0]])
    trainer = torch.tensor([[-1.5, -2.0, -2.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    gap = gap_statistics(sampler, trainer, mask)  # differences -0.5, 0, 1, 0 (the padded 9s are ignored)
    assert gap["tokens"] == 4
    assert gap["mean_abs_diff"] == pytest.approx(0.375) and gap["max_abs_diff"] == pytest.approx(1.0)
    assert gap["mean_ratio"] == pytest.approx((math.exp(-0.5) + 1 + math.e + 1) / 4)
    empty = gap_statistics(sampler, trainer, torch.zeros_like(mask))
    assert empty["tokens"] == 0 and empty["mean_ratio"] is None


def test_summary_medians_and_ratios():
    records = [{"kind": "speed", "engine": "transformers", "tokens_per_s": v} for v in (10.0, 30.0, 20.0)]
    records += [{"kind": "speed", "engine": "vllm", "tokens_per_s": v} for v in (50.0, 70.0)]
    records += [{"kind": "gap", "engine": "vllm", "phase": "fresh adapter", "mean_abs_diff": 1e-5,
                 "max_abs_diff": 2e-5, "mean_ratio": 1.0}]
    result = summary(records)
    assert result["tokens_per_s"] == {"transformers": 20.0, "vllm": 60.0}
    assert result["ratio_to_transformers"] == {"transformers": 1.0, "vllm": 3.0}
    assert result["logprob_gap"] == {"vllm@fresh adapter": {"mean_abs_diff": 1e-5, "max_abs_diff": 2e-5,
                                                            "mean_ratio": 1.0}}
    assert summary([])["ratio_to_transformers"] == {}
    assert tokens_per_second(10, 0) != tokens_per_second(10, 0)  # nan, not a division error
