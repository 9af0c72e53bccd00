"""The study profile's added arms (configs/lite/study.yaml): their configs validate, they set what they say, and the
finished arms' runs keep their settings keys (a rerun skips them)."""

from __future__ import annotations

import pytest

from fspo_lite.config import validate_config
from fspo_lite.data.examples import load_examples
from fspo_lite.drivers.experiment import load_profile
from fspo_lite.drivers.runs import run_config, run_key

NEW_ARMS = {"fspo+kb": ("fspo", "kb", 8), "grpo+4x": ("grpo", "lexical", 32), "fspo+4x": ("fspo", "lexical", 32),
            "random": ("random", "lexical", 8), "format": ("format", "lexical", 8),
            "ternary": ("ternary", "lexical", 8), "binary": ("binary", "lexical", 8), "corver": ("fspo", "lexical", 8),
            "fspo+strict": ("fspo", "lexical", 8)}


def study_parameters():
    return dict(load_profile("study").notebooks)["03_train_fspo.ipynb"]


def shared(parameters):
    """The dotted settings notebook 03 shares between arms (the ones the arms could collide with)."""
    return {"model.name": "tiny", "train.steps": parameters["steps"], "rollout.group_size": parameters["group_size"],
            "verifier.name": parameters["train_verifier"],
            "evaluation.step_verifier": parameters["judge_verifier"], **parameters["overrides"]}


@pytest.mark.parametrize("arm", sorted(NEW_ARMS))
def test_added_arms_validate_and_set_their_keys(arm):
    parameters = study_parameters()
    assert arm in parameters["methods"] and arm in dict(load_profile("study").notebooks)["04_results.ipynb"]["order"]
    config = run_config(shared(parameters), arm, 0, "runs/study", arms=parameters["arms"])
    validate_config(config)
    method, verifier, steps = NEW_ARMS[arm]
    assert (config.reward.method, config.verifier.name, config.train.steps) == (method, verifier, steps)
    assert config.train.save_every == 4 and config.rollout.group_size == parameters["group_size"]
    assert config.reward.step_reward_lambda == (0.5 if arm == "corver" else 0.0)
    assert config.reward.strict_checkable == (arm == "fspo+strict")


def test_the_finished_arms_keep_their_settings_keys():
    parameters = study_parameters()
    old_arms = {name: parameters["arms"][name] for name in ("fspo+detail", "fspo+kb", "grpo+4x", "fspo+4x")}
    examples = load_examples("bundled:kbqa_train")[:4]
    for arm in ("grpo", "fspo", "caution", *old_arms):
        before = run_config(shared(parameters), arm, 0, "runs/study", arms=old_arms)
        after = run_config(shared(parameters), arm, 0, "runs/study", arms=parameters["arms"])
        assert run_key(before, examples) == run_key(after, examples)


def test_the_committed_runs_keep_their_keys_under_todays_defaults():
    """rollout.draw's default is generate's (multinomial); the committed runs drew with exponential_race, which the
    study profile sets and the key's baseline holds (run_keys.KEY_DEFAULTS), so their keys are unchanged and a rerun skips
    them. Computed as notebook 03 computes a run's settings, against the keys the committed runs carry."""
    import json
    from pathlib import Path

    from fspo_lite.data.files import data_dir
    from fspo_lite.data.training_set import load_training_examples
    from fspo_lite.drivers.experiment import local_sources

    profile = load_profile("study")
    if not all((data_dir() / name).exists() for name in ("truthfulqa.jsonl", "halueval_qa_test.jsonl")):
        pytest.skip("the study's full TruthfulQA and HaluEval copies are not in the data folder")
    p = study_parameters()
    sources, _ = local_sources(profile.local_data, data_dir())
    shared = {
        "model.name": p["model"], "data.train": "bundled:kbqa_train", "data.filter_path": p["filter_path"],
        "rollout.group_size": p["group_size"], "rollout.max_new_tokens": p["max_new_tokens"],
        "rollout.temperature": p["temperature"], "train.steps": p["steps"], "train.prompts_per_step": p["prompts_per_step"],
        "train.learning_rate": p["learning_rate"], "train.beta": p["beta"],
        "train.micro_batch_size": p["prompts_per_step"] * p["group_size"], "verifier.name": p["train_verifier"],
        "evaluation.benchmarks": p["eval_benchmarks"], "evaluation.limit": p["eval_limit"],
        "evaluation.samples": p["eval_samples"], "evaluation.temperature": p["temperature"],
        "evaluation.max_new_tokens": p["max_new_tokens"], "evaluation.step_verifier": p["judge_verifier"],
        **{f"evaluation.sources.{b}": s for b, s in sources.items()}, **p["overrides"]}
    runs = Path(__file__).resolve().parents[1] / "results" / "study" / "runs"
    for arm in ("grpo", "fspo", "corver"):
        config = run_config(shared, arm, 0, "runs/study", arms=p["arms"])
        assert config.rollout.draw == "exponential_race"
        stored = json.loads((runs / f"{arm.replace('+', '_')}_s0" / "heldout.json").read_text())["settings_key"]
        assert run_key(config, load_training_examples(config)) == stored, arm
        config.rollout.draw = "multinomial"  # today's default is a change the key records
        assert run_key(config, load_training_examples(config)) != stored
