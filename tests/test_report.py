"""The lite job's aggregation (fspo_lite.report) and profile handling (fspo_lite.experiment) on hand-made inputs."""

import json

import pandas as pd
import pytest

from fspo_lite.experiment import load_profile, resolve_parameters, run_config, run_name
from fspo_lite.report import (
    DECOMPOSITION,
    flip_example,
    goal_check,
    load_heldout,
    load_training,
    summarize,
    summary_markdown,
    training_diagnostics,
)


def _heldout():
    rows = [("base", None, 0.10, 0.50), ("grpo", 0, 0.20, 0.40), ("grpo", 1, 0.30, 0.60),
            ("fspo", 0, 0.22, 0.30), ("fspo", 1, 0.26, 0.36)]
    return pd.DataFrame([{"run": f"{m}_{s}", "method": m, "seed": s, "accuracy": a, "answer_f1": a,
                          "not_attempted": 0.0, "format_rate": 1.0, "step_hallucination": h, "judge_coverage": 0.5,
                          **dict.fromkeys(DECOMPOSITION, 20.0)} for m, s, a, h in rows])


def test_summarize_means_and_spreads_over_seeds():
    table = summarize(_heldout(), order=["base", "grpo", "fspo"])
    assert list(table.index) == ["base", "grpo", "fspo"]
    assert table.loc["grpo", "seeds"] == 2 and table.loc["base", "seeds"] == 1
    assert table.loc["grpo", "accuracy"] == pytest.approx(0.25)
    assert table.loc["grpo", "accuracy_spread"] == pytest.approx(0.10)
    assert table.loc["fspo", "step_hallucination"] == pytest.approx(0.33)
    assert table.loc["fspo", "step_hallucination_spread"] == pytest.approx(0.06)
    assert table.loc["base", "accuracy_spread"] == 0.0


def test_goal_check_relative_drop_and_accuracy_points():
    table = summarize(_heldout())
    goal = goal_check(table)
    # hallucination 0.50 (grpo) -> 0.33 (fspo): a 34% drop; accuracy 0.25 -> 0.24: -1 point
    assert goal["relative_drop"] == pytest.approx(0.34)
    assert goal["accuracy_delta_points"] == pytest.approx(-1.0)
    assert goal["met"] is True
    assert goal_check(table, accuracy_points=0.5)["met"] is False
    assert goal_check(table, relative_drop=0.4)["met"] is False


def test_summary_markdown_lists_every_method_and_the_goal():
    table = summarize(_heldout(), order=["base", "grpo", "fspo"])
    text = summary_markdown(table, goal_check(table), settings={"questions": 2})
    assert "| grpo | 2 | 25.0 ± 5.0 | 25.0 ± 5.0 | 0.0 ± 0.0 | 50.0 ± 10.0 |" in text
    assert "| base | 1 | 10.0 | " in text  # one seed: no spread shown
    assert "relative drop 34.0%" in text and "**met**" in text and "questions = 2" in text


def test_flip_example_picks_the_most_flipped_response():
    plain = {"advantage": 0.5, "token_advantages": [0.5, 0.5]}
    one = {"advantage": 0.5, "token_advantages": [0.5, -0.5, 0.5]}
    two = {"advantage": -1.0, "token_advantages": [1.0, 1.0, -1.0]}
    assert flip_example([plain, one, two]) is two
    assert flip_example([plain]) is None and flip_example([]) is None


def test_load_runs_from_folders(tmp_path):
    metrics = {"kbqa.correct": 0.5, "kbqa.step_hallucination_rate": 0.2, "kbqa.decomp_partial_correct": 100.0,
               "kbqa.judge_coverage": 0.8, "truthfulqa_mc.mc1": 0.25, "halueval.accuracy": 0.5, "multihop.correct": 0.9}
    for method, seed in (("base", None), ("fspo", 0)):
        run = tmp_path / (method if seed is None else run_name(method, seed))
        run.mkdir()
        (run / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "metrics": metrics}))
    (tmp_path / "fspo_s0" / "metrics.jsonl").write_text(
        '{"step": 1, "flipped_token_share": 0.2, "reward_std": 1.0}\n{"step": 2, "flipped_token_share": 0.4, "reward_std": 0.0}\n')
    heldout = load_heldout(tmp_path).set_index("method")
    assert set(heldout.index) == {"base", "fspo"}
    assert heldout.loc["base", "accuracy"] == 0.5 and heldout.loc["base", "partial_correct"] == 100.0
    assert heldout.loc["fspo", "truthfulqa_mc1"] == 0.25 and heldout.loc["fspo", "judge_coverage"] == 0.8
    assert "answer_f1" not in heldout  # metrics that were not run stay out of the table
    assert load_heldout(tmp_path, qa="multihop").loc[0, "accuracy"] == 0.9
    training = load_training(tmp_path)
    assert list(training["method"]) == ["fspo", "fspo"]
    diagnostics = training_diagnostics(training, order=["grpo", "fspo"])
    assert diagnostics.loc["fspo", "flipped_token_share"] == pytest.approx(0.3)
    with pytest.raises(FileNotFoundError, match="notebook 03"):
        load_heldout(tmp_path / "nothing")


def test_profiles_load_and_fill_the_output_root(tmp_path):
    for name in ("lite", "quick", "colab_t4"):
        profile = load_profile(name)
        names = [n for n, _ in profile.notebooks]
        assert names == sorted(names) and "03_train_fspo.ipynb" in names and "04_results.ipynb" in names
    lite = dict(load_profile("lite").notebooks)["03_train_fspo.ipynb"]
    assert len(lite["seeds"]) >= 2 and {"grpo", "fspo", "caution"} <= set(lite["methods"])
    assert lite["train_verifier"] != lite["judge_verifier"]
    assert resolve_parameters({"a": "{out}/runs", "b": ["{out}", 3], "c": 1}, tmp_path) == {
        "a": f"{tmp_path}/runs", "b": [str(tmp_path), 3], "c": 1}
    bad = tmp_path / "bad.yaml"
    bad.write_text("notebooks: []\nsteps: 3\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_profile(str(bad))
    with pytest.raises(FileNotFoundError, match="colab_t4, lite, quick"):
        load_profile("nope")


def test_run_config_differs_only_in_method_seed_and_folder(tmp_path):
    shared = {"model.name": "tiny", "train.steps": 3}
    a, b = run_config(shared, "grpo", 0, tmp_path), run_config(shared, "caution+fspo", 1, tmp_path)
    assert (a.reward.method, a.train.seed, a.train.steps) == ("grpo", 0, 3)
    assert b.train.output_dir == str(tmp_path / "caution_fspo_s1")
    a.reward.method, a.train.seed, a.train.output_dir = b.reward.method, b.train.seed, b.train.output_dir
    assert a.to_dict() == b.to_dict()
