"""The config object: YAML loading, overrides, and errors on unknown keys or wrong types."""

import pytest

from fspo_lite.config import Config, ConfigError, apply_overrides, config_from_dict, load_config


def test_defaults_round_trip_through_yaml(tmp_path):
    config = Config()
    path = tmp_path / "c.yaml"
    config.save(path)
    assert load_config(path) == config


def test_yaml_sections_and_types(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  steps: 7\n  learning_rate: 1e-5\n  beta: 0.001\nmodel:\n  lora_target_modules: [q_proj]\n")
    config = load_config(path)
    assert config.train.steps == 7 and config.train.learning_rate == 1e-5 and config.train.beta == 0.001
    assert config.model.lora_target_modules == ["q_proj"]


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown config key 'train.stepz'.*steps"):
        config_from_dict({"train": {"stepz": 3}})
    with pytest.raises(ConfigError, match=r"unknown config key 'trainer'.*train"):
        config_from_dict({"trainer": {}})


@pytest.mark.parametrize("old, new", [("train.fused_lora", "speed.fused_lora"),
                                      ("rollout.packed_weights", "speed.packed_weights"),
                                      ("rollout.drop_ended_rows", "speed.drop_ended_rows"),
                                      ("train.keep_freed_memory", "speed.keep_freed_memory")])
def test_a_key_moved_to_the_speed_section_is_refused_in_one_line_naming_its_new_name(old, new):
    from fspo_lite.config import SpeedConfig
    from fspo_lite.config_load import MOVED_KEYS

    section, key = old.split(".")
    for attempt in (lambda: config_from_dict({section: {key: True}}),
                    lambda: apply_overrides(Config(), [f"{old}=true"]), lambda: Config(**{section: {key: True}})):
        with pytest.raises(ConfigError) as error:
            attempt()
        assert str(error.value) == f"config key '{old}' is now '{new}' (the speed section); rename it"
    assert set(MOVED_KEYS.values()) == {f"speed.{name}" for name in vars(SpeedConfig()) if name != "mode"}
    assert getattr(config_from_dict({"speed": {key: False}}).speed, key) is False  # the new name is taken


def test_speed_mode_off_as_yaml_reads_it(tmp_path):
    path = tmp_path / "speed.yaml"
    path.write_text("speed:\n  mode: off\n")  # YAML's false
    assert load_config(path).speed.mode == "off"
    assert load_config(None, ["speed.mode=off"]).speed.mode == "off"
    assert load_config(None, ["speed.mode=auto"]).speed.mode == "auto"
    with pytest.raises(ConfigError, match=r"speed.mode=True is out of range|speed.mode: expected a string"):
        load_config(None, ["speed.mode=true"])


@pytest.mark.parametrize(
    "values, message",
    [({"train": {"steps": "many"}}, "integer"), ({"train": {"steps": 2.5}}, "integer"),
     ({"model": {"lora": "maybe"}}, "true/false"), ({"train": {"beta": [1]}}, "number"),
     ({"train": 3}, "section"), ({"model": {"name": 5}}, "string"),
     ({"speed": {"packed_weights": "maybe"}}, r"packed_weights: expected true/false or null, got 'maybe'$"),
     ({"train": {"steps": "x"}}, r"expected an integer, got 'x'$")],
)
def test_wrong_types_are_errors(values, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(values)


def test_cli_style_overrides():
    config = load_config(None, ["train.steps=3", "model.lora=false", "rollout.temperature=0.7",
                                "model.adapter_path=null", "model.lora_target_modules=q_proj,v_proj"])
    assert config.train.steps == 3 and config.model.lora is False and config.rollout.temperature == 0.7
    assert config.model.lora_target_modules == ["q_proj", "v_proj"]


def test_papermill_style_dict_overrides():
    config = apply_overrides(Config(), {"reward.method": "grpo", "train.seed": 4})
    assert config.reward.method == "grpo" and config.train.seed == 4


def test_malformed_override():
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["train.steps"])
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(None, ["nope.steps=1"])


def test_top_level_must_be_mapping(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_a_section_given_as_a_mapping_is_built_and_checked_as_a_config_file_is():
    from fspo_lite.config import TrainConfig

    config = Config(train={"steps": "2", "learning_rate": 3e-6}, evaluation={"sources": {"kbqa": "x.jsonl"}})
    assert isinstance(config.train, TrainConfig) and config.train.steps == 2 and config.train.learning_rate == 3e-6
    assert config.evaluation.sources == {"kbqa": "x.jsonl"} and config.train.seed == TrainConfig().seed
    assert config == config_from_dict({"train": {"steps": 2, "learning_rate": 3e-6},
                                       "evaluation": {"sources": {"kbqa": "x.jsonl"}}})
    assert Config(train=TrainConfig(steps=3)).train.steps == 3


@pytest.mark.parametrize("sections, message", [
    ({"train": {"stepz": 2}}, r"^unknown config key 'train.stepz'; valid keys here: .*steps"),
    ({"train": {"steps": "many"}}, r"^train.steps: expected an integer, got 'many'$"),
    ({"model": {"lora": "maybe"}}, r"^model.lora: expected true/false, got 'maybe'$"),
    ({"train": {"steps": 0}}, r"^train.steps=0 is out of range; valid: an integer >= 1"),
    ({"rollout": {"top_p": float("nan")}}, r"^rollout.top_p=nan is out of range"),
    ({"rollout": {"group_size": 1}}, r"^rollout.group_size=1 is out of range"),
    ({"train": 5}, r"^'train' is a section; expected a mapping or a TrainConfig, got 5$"),
    ({"train": [("steps", 2)]}, r"^'train' is a section; expected a mapping or a TrainConfig, got \[\('steps'"),
    ({"model": {"name": "tiny"}, "data": "bundled:kbqa_train"}, r"^'data' is a section; expected a mapping or a "
     r"DataConfig"),
])
def test_a_bad_section_is_refused_in_one_line_naming_the_key(sections, message):
    with pytest.raises(ConfigError, match=message) as error:
        Config(**sections)
    assert "\n" not in str(error.value)


def test_a_section_of_another_class_or_out_of_range_is_refused():
    from fspo_lite.config import RolloutConfig, TrainConfig

    with pytest.raises(ConfigError, match=r"^'train' is a section; expected a mapping or a TrainConfig, got "
                                          r"RolloutConfig\("):
        Config(train=RolloutConfig())
    with pytest.raises(ConfigError, match=r"^train.steps=0 is out of range"):
        Config(train=TrainConfig(steps=0))


def test_strict_fspo_needs_the_flip_and_says_so_in_one_line():
    assert load_config(overrides={"reward.method": "fspo", "reward.strict_checkable": True}).reward.strict_checkable
    with pytest.raises(ConfigError) as error:
        load_config(overrides={"reward.method": "grpo", "reward.strict_checkable": True})
    assert "reward.strict_checkable" in str(error.value) and "\n" not in str(error.value)


def test_strict_fspo_takes_a_bare_name_answer_positive_advantage_away():
    from fspo_lite import group_token_advantages, load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    question, gold = "What is the chemical symbol of gold?", ["Au"]
    evidence = "Gold is a chemical element with the symbol Au and atomic number 79."
    responses = ["<think>Au</think>\n<answer>Au</answer>",  # a bare name: the lexical verifier cannot check it
                 "<think>Gold has the symbol Ag.</think>\n<answer>Ag</answer>"]
    plain = group_token_advantages(question, gold, evidence, responses, tokenizer, "fspo")
    strict = group_token_advantages(question, gold, evidence, responses, tokenizer, "fspo",
                                    settings={"reward.strict_checkable": True})
    assert plain[0].sentence_labels in ([], [0])              # nothing checkable in the right answer's reasoning
    assert max(plain[0].advantages) > 0 and max(strict[0].advantages) == 0.0
    assert strict[1].advantages == plain[1].advantages       # a response with a checked sentence is unchanged
