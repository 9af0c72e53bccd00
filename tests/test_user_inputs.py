"""Your own reward, data and model, as a TRL user passes them: the adapters by hand (fspo_lite.scoring.user_reward,
fspo_lite.data.user_data, fspo_lite.models.user_model), their one-line errors, FSPO's flip on top of a user's reward,
and the README's example run as written."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

from fspo_lite.config import Config
from fspo_lite.data.examples import DataError, QAExample
from fspo_lite.data.user_data import as_examples
from fspo_lite.models.user_model import UserModelError, model_name_of, prepare_user_policy
from fspo_lite.rollout.transformers_rollout import Rollout, completion_mask_from_ids
from fspo_lite.scoring.rewards import advantages_from_scores, build_reward_tools, score_rollouts
from fspo_lite.scoring.user_reward import RewardFuncError, UserReward, check_reward_funcs, combine
from fspo_lite.scoring.verifiers import LexicalVerifier

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = "Gold is a chemical element with the symbol Au and atomic number 79."
EXAMPLE = QAExample("g", "What is the chemical symbol of gold?", ["Au"], EVIDENCE, extra={"level": "easy"})
RIGHT = "<think>Gold has the symbol Au. Gold has atomic number 12.</think>\n<answer>Au</answer>"
WRONG = "<think>Gold has the symbol Ag.</think>\n<answer>Ag</answer>"


def one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text and len(text) < 300, text
    return text


# ---- reward functions -----------------------------------------------------------------------------------------------
def reward_ok(completions, **kwargs):
    return [1.0] * len(completions)


@pytest.mark.parametrize("funcs, weights, method, expected", [
    ("contains_answer", None, "grpo", "expected a function"),
    (42, None, "grpo", "expected a function"),
    ([], None, "grpo", "reward_funcs is empty"),
    (reward_ok, [1.0, 2.0], "grpo", "expected 1 finite numbers"),
    ([reward_ok, reward_ok], [1.0, float("nan")], "grpo", "expected 2 finite numbers"),
    (reward_ok, None, "caution", "reward.method=caution has a reward of its own"),
    (lambda completions, gold: [0.0], None, "fspo", "requires 'gold', which no call gives"),
    (lambda completions, /: [0.0], None, "fspo", "positional-only"),
])
def test_a_wrong_reward_function_is_refused_in_one_line(funcs, weights, method, expected):
    with pytest.raises(RewardFuncError) as error:
        check_reward_funcs(funcs, weights, method=method)
    assert expected in one_line(error)


def test_reward_functions_accepted_with_weights_and_data_columns():
    def by_level(completions, level, **kwargs):
        return [0.0] * len(completions)

    funcs, weights = check_reward_funcs([reward_ok, by_level], [1, 0.5], columns={"level"}, method="fspo")
    assert funcs == [reward_ok, by_level] and weights == [1.0, 0.5]
    assert check_reward_funcs(reward_ok)[1] == [1.0]


def test_combine_by_hand():
    """Weights 1 and 0.5, None as NaN. Group 1 (4 rows): 1 + 0, (unscorable), 0 + 0.5 x 2 = 1, 3 + 0.5 x 1 = 3.5;
    the unscorable row gets the mean of the others, (1 + 1 + 3.5) / 3 = 1.8333. Group 2: every row unscorable -> 0."""
    nan = math.nan
    per_func = torch.tensor([[1, nan], [nan, nan], [0, 2], [3, 1], [nan, nan], [nan, nan], [nan, nan], [nan, nan]])
    rewards = combine(per_func, [1.0, 0.5], group_size=4)
    assert rewards.tolist() == pytest.approx([1.0, 5.5 / 3, 1.0, 3.5, 0, 0, 0, 0])


def rollout_from_texts(tokenizer, texts):
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    mask = completion_mask_from_ids(ids, [tokenizer.eos_token_id])
    prompt = torch.ones(len(rows), 1, dtype=torch.long)
    return Rollout(prompt, prompt, ids, mask, texts, num_samples=len(texts))


def score_with(tokenizer, method, funcs, texts=(RIGHT, WRONG)):
    config = Config(reward={"method": method}, rollout={"group_size": len(texts)}, data={"response_prefix": ""})
    tools = build_reward_tools(config)
    tools.user_reward = UserReward(*check_reward_funcs(funcs, columns=set(EXAMPLE.extra), method=method))
    rollout = rollout_from_texts(tokenizer, list(texts))
    scored = score_rollouts([EXAMPLE] * len(texts), rollout, tokenizer, config, LexicalVerifier(), tools=tools)
    advantages, flipped = advantages_from_scores(scored, rollout.completion_mask, len(texts), True)
    return scored, advantages, flipped, rollout


def test_the_user_reward_replaces_the_outcome_and_is_called_as_trl_calls_it(smol_tokenizer):
    calls = []

    def prefers_ag(prompts, completions, completion_ids, trainer_state, answer, evidence, level, **kwargs):
        calls.append(dict(prompts=prompts, completions=completions, ids=completion_ids, answer=answer,
                          evidence=evidence, level=level, step=trainer_state.global_step, rest=sorted(kwargs)))
        return [1.0 if "<answer>Ag" in c else None for c in completions]

    scored, advantages, _, rollout = score_with(smol_tokenizer, "grpo", prefers_ag)
    call = calls[0]
    assert call["prompts"] == [EXAMPLE.question] * 2 and call["completions"] == [RIGHT, WRONG]
    assert call["answer"] == ["Au", "Au"] and call["evidence"] == [EVIDENCE] * 2 and call["level"] == ["easy"] * 2
    assert [len(ids) for ids in call["ids"]] == rollout.completion_mask.sum(dim=1).tolist()
    assert call["step"] == 0 and call["rest"] == ["answers", "id", "question"]
    # the outcome reward would give Au 1 and Ag 0; the user's gives Ag 1 and Au None, i.e. the group's mean (1):
    assert scored.rewards.tolist() == [1.0, 1.0] and scored.metrics["reward_prefers_ag"] == 1.0
    assert scored.metrics["accuracy"] == 0.5  # the outcome still measures correctness for the logs


def test_fspo_flips_on_top_of_the_user_reward(smol_tokenizer):
    """The user's reward pays Au 1 and Ag 0: advantages +-0.707 (as the outcome reward would give). Under fspo the
    right answer's unsupported sentence ("atomic number 12") is flipped to -0.707; under grpo nothing is."""
    def pays_au(completions, **kwargs):
        return [float("<answer>Au" in c) for c in completions]

    _, grpo, grpo_flipped, _ = score_with(smol_tokenizer, "grpo", pays_au)
    _, fspo, fspo_flipped, rollout = score_with(smol_tokenizer, "fspo", pays_au)
    mask = rollout.completion_mask.bool()
    assert not grpo_flipped.any() and torch.allclose(grpo[0][mask[0]], torch.tensor(0.7071), atol=1e-3)
    assert fspo_flipped[0].any() and not fspo_flipped[1].any()
    assert torch.allclose(fspo[0][fspo_flipped[0]], torch.tensor(-0.7071), atol=1e-3)


@pytest.mark.parametrize("output, expected", [
    ([1.0], "returned 1 rewards for 2 completions"),
    ("1", "returned str rewards"),
    ([1.0, "high"], "returned a str"),
])
def test_a_wrong_answer_of_a_reward_function_is_one_line(smol_tokenizer, output, expected):
    def bad(completions, **kwargs):
        return output

    with pytest.raises(RewardFuncError) as error:
        score_with(smol_tokenizer, "grpo", bad)
    assert expected in one_line(error) and "'bad'" in one_line(error)


# ---- data -----------------------------------------------------------------------------------------------------------
def test_data_as_a_list_a_jsonl_file_and_a_datasets_dataset(tmp_path):
    import datasets

    rows = [{"question": "Capital of France?", "answer": "Paris", "evidence": "Paris is the capital of France.",
             "level": "easy"}, {"question": "Symbol of gold?", "answer": ["Au", "AU"]}]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_list = as_examples(rows)
    assert [e.question for e in from_list] == ["Capital of France?", "Symbol of gold?"]
    assert from_list[0].evidence.startswith("Paris") and from_list[0].extra == {"level": "easy"}
    assert from_list[1].answers == ["Au", "AU"] and from_list[1].evidence == ""
    assert sorted(e.question for e in as_examples(path)) == sorted(e.question for e in from_list)
    assert [e.answers for e in as_examples(datasets.Dataset.from_list(rows[1:]))] == [["Au", "AU"]]
    assert as_examples([EXAMPLE]) == [EXAMPLE]


@pytest.mark.parametrize("data, expected", [
    ({"question": "q", "answer": "a"}, "got dict; expected a list of dicts"),
    (42, "got int"),
    ([], "train_dataset is empty"),
    ([{"question": "q"}], "train_dataset[0]: no answer field"),
    (["What is 2+2?"], "train_dataset[0]: expected a JSON object, got str"),
    ("no_such_file.jsonl", "is not a file"),
])
def test_wrong_data_is_refused_in_one_line(data, expected):
    with pytest.raises(DataError) as error:
        as_examples(data)
    assert expected in one_line(error)


def test_a_dataset_without_a_question_column_is_refused():
    import datasets

    with pytest.raises(DataError) as error:
        as_examples(datasets.Dataset.from_list([{"text": "x", "label": 1}]))
    assert "no question column" in one_line(error) and "text, label" in one_line(error)


# ---- model ----------------------------------------------------------------------------------------------------------
def test_the_model_name_a_run_records(tmp_path, tiny_policy):
    assert model_name_of("HuggingFaceTB/SmolLM2-135M-Instruct", "tiny") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert model_name_of(str(tmp_path), "tiny") == str(tmp_path)
    assert model_name_of(tiny_policy[0], "tiny") == "tiny"  # built from a config: no folder to record
    for wrong, expected in ((42, "got int"), ("", "an empty name"), ("./missing", "is not a folder")):
        with pytest.raises(UserModelError) as error:
            model_name_of(wrong, "tiny")
        assert expected in one_line(error)


def test_a_loaded_model_gets_its_lora_adapter_and_a_nameless_one_needs_its_tokenizer(smol_tokenizer):
    from transformers import AutoModelForCausalLM

    from fspo_lite.config import ModelConfig
    from fspo_lite.models.policy import tiny_model_config

    model = AutoModelForCausalLM.from_config(tiny_model_config(len(smol_tokenizer)))
    with pytest.raises(UserModelError) as error:
        prepare_user_policy(model, None, ModelConfig(name="tiny", lora_r=4, lora_alpha=8))
    assert "pass tokenizer= too" in one_line(error)
    wrapped, tokenizer = prepare_user_policy(model, smol_tokenizer, ModelConfig(name="tiny", lora_r=4, lora_alpha=8))
    assert hasattr(wrapped, "peft_config") and tokenizer.padding_side == "left"
    assert any(p.requires_grad for p in wrapped.parameters())


# ---- the README's example, as written -------------------------------------------------------------------------------
def readme_example() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("**Your own reward, data and model**"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_is_short_and_trains_two_steps_with_its_own_reward(tmp_path, monkeypatch):
    code = readme_example()
    assert len(code.strip().splitlines()) <= 10
    shutil.copytree(ROOT / "configs", tmp_path / "configs")  # a checkout's files, the runs in a scratch folder
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    run = tmp_path / "runs" / "my_reward"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert all("reward_contains_answer" in row for row in rows)
    assert (run / "checkpoints" / "step-000002").is_dir()
    assert "name: tiny" in (run / "config.yaml").read_text() and "method: fspo" in (run / "config.yaml").read_text()


@pytest.mark.parametrize("kwargs, expected", [
    (dict(model=42), "model: got int"),
    (dict(train_dataset={"question": "q"}), "train_dataset: got dict"),
    (dict(reward_funcs="contains_answer"), "expected a function"),
    (dict(reward_weights=[1.0]), "reward_weights without reward_funcs"),
])
def test_the_trainer_refuses_a_wrong_shape_before_any_model_loads(tmp_path, no_model_loads, kwargs, expected):
    from fspo_lite.update.trainer import Trainer

    config = Config(model={"name": "tiny"}, train={"output_dir": str(tmp_path / "run")})
    with pytest.raises((TypeError, ValueError)) as error:
        Trainer(config, progress=False, **kwargs)
    assert expected in one_line(error)
