"""What a new user meets in the first hour: `eval --adapter` on the model the checkpoint names, a mismatch in one short
line, training output that says `kl=off` rather than `kl=nan`, and an eval table with one unit each."""

from __future__ import annotations

import json
import math

import pytest

from fspo_lite.__main__ import main
from fspo_lite.logs.training_log import metric_text
from fspo_lite.models.adapter_origin import trained_model_name


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A one-step run of the tiny model through the command line; its checkpoint's config.yaml says model.name=tiny."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("run")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
            code = main(["train", "--config", "configs/tiny.yaml", "--set", "train.steps=1", "--set",
                     "rollout.max_new_tokens=8",
                     "--set", f"train.output_dir={root}", "--set", "reward.method=fspo"])
    assert code == 0
    (root / "printed.txt").write_text(printed.getvalue())
    return root / "checkpoints" / "step-000001"


def test_training_output_says_off_and_none_instead_of_nan(tiny_checkpoint, capsys):
    assert metric_text("kl", math.nan) == "off" and metric_text("step_factuality", math.nan) == "none"
    assert metric_text("loss", math.nan) == "n/a" and metric_text("loss", None) == "n/a"
    assert metric_text("loss", 0.123456) == "0.1235" and metric_text("step", 3) == "3"
    rows = [json.loads(line) for line in (tiny_checkpoint.parents[1] / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["kl"] is None  # beta is 0: nothing measured, and the log says so
    printed = (tiny_checkpoint.parents[1] / "printed.txt").read_text()
    assert "kl=off" in printed and "nan" not in printed


def test_eval_adapter_reads_the_model_from_the_checkpoint(tiny_checkpoint, tmp_path, capsys):
    assert trained_model_name(tiny_checkpoint) == "tiny"
    assert trained_model_name(tiny_checkpoint / "model") == "tiny"
    assert trained_model_name(tmp_path) is None
    code = main(["eval", "--adapter", str(tiny_checkpoint), "--benchmarks", "kbqa", "--limit", "1", "--quiet",
                 "--set", "evaluation.max_new_tokens=8", "--output", str(tmp_path / "eval")])
    out, err = capsys.readouterr()
    assert code == 0 and "model.name=tiny (the model" in err
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["benchmarks"]["kbqa"]
    shares, percentages = out.split("answer decomposition, percent of questions:")
    assert "decomp_" not in shares and "decomp_all_correct" in percentages and "f1" not in percentages


def test_an_adapter_on_the_wrong_model_is_one_short_line(tiny_checkpoint, tmp_path, capsys):
    code = main(["eval", "--adapter", str(tiny_checkpoint), "--model", "smollm2-135m", "--benchmarks", "kbqa",
                 "--limit", "1", "--quiet", "--output", str(tmp_path / "eval")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fspo_lite:")]
    assert code == 1 and len(lines) == 1 and len(lines[0]) < 250, lines
    assert "does not fit model.name=smollm2-135m" in lines[0] and "--model tiny" in lines[0]


def test_a_plain_peft_folder_names_its_base_model(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base"}))
    assert trained_model_name(tmp_path) == "org/base"
    (tmp_path / "adapter_config.json").write_text("[not json")
    assert trained_model_name(tmp_path) is None


def test_the_papermill_command_of_docs_evaluation_leaves_nothing_untracked():
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert "--cwd notebooks" in (root / "docs" / "evaluation.md").read_text()  # the notebook writes runs/ there
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", "notebooks/runs/eval_notebook/summary.json"], cwd=root)
    assert ignored.returncode == 0


def test_the_colab_t4_profile_is_documented_with_its_settings():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "colab.md").read_text().split("## The colab_t4 profile", 1)[1]
    profile = yaml.safe_load((root / "configs" / "lite" / "colab_t4.yaml").read_text())
    train = next(n["parameters"] for n in profile["notebooks"] if n["name"].startswith("03"))
    assert "--profile colab_t4" in doc and "configs/lite/colab_t4.yaml" in doc
    said = (f"{train['steps']} steps of {train['prompts_per_step']} questions x {train['group_size']} answers",
            f"{train['max_new_tokens']} new tokens", f"`train.beta` {train['beta']}",
            f"{train['eval_limit']} held-out items per benchmark with {train['eval_samples']} answers")
    assert all(text in " ".join(doc.split()) for text in said), said
    assert train["methods"] == ["grpo", "fspo", "caution"] and train["seeds"] == [0, 1]


def test_the_flip_figure_has_a_legend_and_says_why_a_reward_of_zero_is_pushed_up(tmp_path):
    from fspo_lite.drivers.report.flip_plot import flip_caption, plot_flip

    record = {"question": "Which river?", "gold": ["Danube"], "reward": 0.0, "advantage": 0.87,
              "tokens": ["<think>", "The", " river", "</think>"], "token_advantages": [0.87, -0.87, -0.87, 0.87]}
    fig = plot_flip(record, tmp_path / "flip.png")
    assert (tmp_path / "flip.png").is_file()
    texts = [t.get_text() for t in fig.texts]
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("more likely" in label for label in labels) and any("less likely" in label for label in labels)
    assert any("+0.87 = (reward 0.00 - the group's mean)" in t and "it beat its group's mean" in t for t in texts)
    assert "fell below its group's mean" in flip_caption(1.0, -0.2) and "equals" in flip_caption(0.5, 0.0)
