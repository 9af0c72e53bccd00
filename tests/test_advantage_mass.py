"""Where the gradient goes (fspo_lite/scoring/advantage_mass.py): the shares checked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from fspo_lite.scoring.advantage_mass import REGIONS, advantage_mass, token_regions
from fspo_lite.scoring.verdicts import ResponseView, SentenceVerdicts

S, U, C, ANS, O = range(5)


def test_shares_by_hand():
    # response 0 (A = +2 on every token, as GRPO broadcasts it): 2 supported tokens, 1 answer token, 1 padding;
    # response 1 (A = -1, but FSPO flipped its supported token to +1): 1 supported, 2 unsupported, 1 other.
    advantages = torch.tensor([[2.0, 2.0, 2.0, 9.0], [1.0, -1.0, -1.0, -1.0]])
    regions = torch.tensor([[S, S, ANS, O], [S, U, U, O]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    out = advantage_mass(advantages, regions, mask)
    # sum |A| over real tokens = 2 + 2 + 2 + 1 + 1 + 1 + 1 = 10 (the padded 9 is left out)
    assert out["adv_abs_share/supported"] == pytest.approx(5 / 10)    # 2 + 2 + 1
    assert out["adv_abs_share/unsupported"] == pytest.approx(2 / 10)  # 1 + 1
    assert out["adv_abs_share/answer"] == pytest.approx(2 / 10)
    assert out["adv_abs_share/other"] == pytest.approx(1 / 10)
    assert out["adv_abs_share/unchecked"] == 0.0
    assert out["adv_signed_share/supported"] == pytest.approx(5 / 10)
    assert out["adv_signed_share/unsupported"] == pytest.approx(-2 / 10)
    assert out["adv_signed_share/other"] == pytest.approx(-1 / 10)
    assert out["token_share/supported"] == pytest.approx(3 / 7)
    assert sum(out[f"adv_abs_share/{r}"] for r in REGIONS) == pytest.approx(1.0)


def test_no_advantage_mass_gives_nan_shares():
    out = advantage_mass(torch.zeros(1, 3), torch.tensor([[S, U, ANS]]), torch.ones(1, 3))
    assert math.isnan(out["adv_abs_share/supported"]) and out["token_share/answer"] == pytest.approx(1 / 3)


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="shapes differ"):
        advantage_mass(torch.zeros(1, 3), torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 3))


def test_token_regions_from_verdicts_and_the_answer():
    text = "<think>A b. C d. E f.</think><answer>X</answer>"
    # one token per character run: tags, each sentence, the answer, the closing tag
    cuts = [0, 7, 11, 12, 16, 17, 21, 29, 37, 38, len(text)]
    view = ResponseView(text, list(zip(cuts, cuts[1:])))
    verdict = SentenceVerdicts(spans=[(7, 11), (12, 16), (17, 21)], labels=[1, -1, 0])
    regions = token_regions([view], [verdict], width=len(cuts) - 1)
    assert regions[0].tolist() == [O, S, O, U, O, C, O, O, ANS, O]
    # a response with no verdicts (malformed: no sentences judged) is all "other" but its answer
    bare = token_regions([view], [SentenceVerdicts()], width=10)
    assert bare[0].tolist() == [O, O, O, O, O, O, O, O, ANS, O]


def test_report_figures_draw_from_logged_metrics(tmp_path):
    import pandas as pd

    from fspo_lite.drivers.report import plot_advantage_mass, plot_supported_unsupported

    rows = []
    for method, sign in (("grpo", 1.0), ("fspo", -1.0)):
        for seed in (0, 1):
            out = advantage_mass(torch.tensor([[sign, 2.0, -1.0, 0.5]]), torch.tensor([[S, U, C, ANS]]),
                                 torch.ones(1, 4))
            rows.append({"method": method, "seed": seed, "step": 1, **out})
    fig = plot_advantage_mass(pd.DataFrame(rows), tmp_path / "mass.png", ["grpo", "fspo"])
    assert (tmp_path / "mass.png").exists() and len(fig.axes) == 2
    table = pd.DataFrame([{"metric": f"{kind}_per_response@kb", "method": m, "mean": 1.0, "low": 0.5, "high": 1.5}
                          for kind in ("supported", "unsupported") for m in ("grpo", "fspo")])
    plot_supported_unsupported(table, ["kb"], tmp_path / "su.png")
    assert (tmp_path / "su.png").exists()


def test_bench_advantage_mass_smoke(tmp_path):
    """bench/advantage_mass.py end to end on the tiny model: one batch, every arm, the JSON written."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import advantage_mass as bench  # noqa: E402  (bench/advantage_mass.py, not the package module)

    out = tmp_path / "mass.json"
    assert bench.main(["--model", "tiny", "--batches", "1", "--prompts", "1", "--group", "2",
                       "--max-new-tokens", "6", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["means"]) == {"grpo", "fspo", "fspo+kb"}
    assert result["means"]["grpo"]["token_share/other"] + sum(
        result["means"]["grpo"][f"token_share/{r}"] for r in REGIONS[:-1]) == pytest.approx(1.0)


def test_the_trainer_logs_the_advantage_mass(tmp_path, tiny_policy, monkeypatch):
    """A tiny-model step writes every share into metrics.jsonl. The random model writes no <think> block, so no
    sentence gets a verdict: all the (random, nonzero) advantage mass lands on "other"."""
    import copy

    from fspo_lite.update import trainer as trainer_module
    from fspo_lite.config import load_config
    from fspo_lite.data.examples import QAExample
    from fspo_lite.update.trainer import Trainer
    from fspo_lite.logs.training_log import read_metrics

    real = trainer_module.score_rollouts
    generator = torch.Generator().manual_seed(0)

    def varied(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        scored.rewards = torch.rand(len(examples), generator=generator)
        return scored

    monkeypatch.setattr(trainer_module, "score_rollouts", varied)
    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", "train.steps=1", "reward.method=grpo"])
    examples = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France.")]
    Trainer(config, copy.deepcopy(tiny_policy[0]), tiny_policy[1], examples, progress=False).train()
    row = read_metrics(tmp_path)[0]
    for region in REGIONS:
        assert {f"adv_abs_share/{region}", f"adv_signed_share/{region}", f"token_share/{region}"} <= set(row)
    assert row["adv_abs_share/other"] == pytest.approx(1.0) and row["token_share/other"] == pytest.approx(1.0)


def test_the_report_draws_the_regions_the_trainer_logs():
    """The advantage-mass figure has one stacked segment (left) and one group of bars (right) per region of REGIONS,
    in its order, read from the columns the trainer logs."""
    import pandas as pd

    from fspo_lite.drivers.report import plot_advantage_mass

    rows = [{"method": method, "seed": 0, "step": 1, **{f"adv_abs_share/{r}": 0.2 for r in REGIONS},
             **{f"adv_signed_share/{r}": 0.1 for r in REGIONS}} for method in ("grpo", "fspo")]
    left, right = plot_advantage_mass(pd.DataFrame(rows)).axes
    assert left.get_legend_handles_labels()[1] == list(REGIONS)
    assert [label.get_text() for label in right.get_xticklabels()] == list(REGIONS)
    assert right.get_legend_handles_labels()[1] == ["grpo", "fspo"]
