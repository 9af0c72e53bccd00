"""The scoring plan (fspo_lite.scoring.plan): reward.method taken apart once, and what a step's scoring does.

The grammar (`config.split_method`) and the names (`plan.parse_method`) on every valid string, on the spellings
the grammar accepts, and on malformed and adversarial strings; `scoring_plan` field by field, by hand."""

import dataclasses

import pytest

from fspo_lite.config import Config, ConfigError, DetailConfig, RewardConfig, load_config, split_method
from fspo_lite.scoring.methods import REWARD_METHODS
from fspo_lite.scoring.plan import MethodSpec, ScoringPlan, check_settings, parse_method, scoring_plan

# ---- the grammar and the names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, parts", [
    ("fspo", ((), True)), ("grpo", (("grpo",), False)), ("KLCF + FSPO", (("klcf",), True)),
    ("fspo+caution", (("caution",), True)), ("grpo+caution", (("caution", "grpo"), False)),
    ("", ((), False)), ("+", ((), False)), (" + + ", ((), False)), ("fspo+fspo", ((), True)),
    ("rlfh+fspo", (("rlfh",), True)), ("ppo", (("ppo",), False)), ("fspo grpo", (("fspo grpo",), False)),
])
def test_the_grammar_by_hand(name, parts):
    assert split_method(name) == parts


EVERY_METHOD = {  # reward.method -> (source, flip, the config section the source reads)
    "grpo": ("grpo", False, None), "fspo": ("grpo", True, None),
    "caution": ("caution", False, "caution"), "caution+fspo": ("caution", True, "caution"),
    "rlfh": ("rlfh", False, "rlfh"), "klcf": ("klcf", False, "klcf"), "klcf+fspo": ("klcf", True, "klcf"),
    "random": ("random", False, None), "format": ("format", False, None),
    "binary": ("binary", False, None), "binary+fspo": ("binary", True, None),
    "ternary": ("ternary", False, None), "ternary+fspo": ("ternary", True, None),
}


def test_every_valid_method_by_hand():
    assert set(EVERY_METHOD) == set(REWARD_METHODS)
    for name, (source, flip, section) in EVERY_METHOD.items():
        assert parse_method(name) == MethodSpec(source, flip), name
        plan = scoring_plan(RewardConfig(method=name), DetailConfig(), verifier_present=True)
        assert (plan.source, plan.flip, plan.section) == (source, flip, section), name


@pytest.mark.parametrize(
    "name, spec",
    [("grpo", MethodSpec("grpo", False)), ("fspo", MethodSpec("grpo", True)), ("grpo+fspo", MethodSpec("grpo", True)),
     ("caution", MethodSpec("caution", False)), ("fspo+caution", MethodSpec("caution", True)),
     ("rlfh", MethodSpec("rlfh", False)), ("KLCF + FSPO", MethodSpec("klcf", True)),
     # spellings the grammar accepts: case, spaces and empty parts are ignored, a repeated name counts once
     ("FSPO ", MethodSpec("grpo", True)), ("fspo+fspo", MethodSpec("grpo", True)), ("+fspo+", MethodSpec("grpo", True)),
     ("grpo+grpo", MethodSpec("grpo", False)), ("\tCaution\n", MethodSpec("caution", False)),
     # str.lower folds the Kelvin sign (U+212A) to a plain k
     ("\u212alcf", MethodSpec("klcf", False))],
)
def test_method_grammar(name, spec):
    assert parse_method(name) == spec


@pytest.mark.parametrize("name", [
    "rlfh+fspo", "fspo+rlfh", "random+fspo", "format+fspo", "caution+klcf", "grpo+caution", "ppo", "", "+", " ", "++", "fspo grpo", "fspo,grpo",
    "fsp\u043e",  # a Cyrillic o
    "\uff46\uff53\uff50\uff4f",  # full-width letters
    "fspo\u200b",  # a zero-width space is not a space
    None, 3,
])
def test_invalid_methods_list_the_choices(name):
    with pytest.raises(ValueError, match="caution\\+fspo"):
        parse_method(name)


def test_check_settings_reports_a_bad_method_as_a_config_error():
    config = Config()
    config.reward.method = "grpo+caution"
    with pytest.raises(ConfigError, match="unknown reward.method 'grpo\\+caution'; available: grpo, fspo"):
        check_settings(config)
    config.reward.method = "FSPO "
    check_settings(config)


def test_the_group_rule_reads_the_same_grammar():
    """rollout.group_size may be 1 for RLFH only, however the name is spelled (the config's own check splits
    reward.method with the grammar the parser uses)."""
    for name in ("rlfh", "RLFH", " rlfh "):
        assert parse_method(name).source == "rlfh"
        assert load_config(None, [f"reward.method={name}", "rollout.group_size=1"]).rollout.group_size == 1
    for name in ("fspo", "klcf"):
        with pytest.raises(ConfigError, match="rollout.group_size"):
            load_config(None, [f"reward.method={name}", "rollout.group_size=1"])


# ---- the plan -----------------------------------------------------------------------------------------------


def _plan(method="fspo", verifier=True, **settings):
    config = Config()
    config.reward.method = method
    for key, value in settings.items():
        section, name = key.split("__")
        setattr(getattr(config, section), name, value)
    return scoring_plan(config.reward, config.detail, verifier)


def test_the_plan_by_hand():
    assert _plan("fspo") == ScoringPlan("grpo", None, flip=True, verdicts=True, detail=False, relevance=False,
                                        step_reward_lambda=0.0)
    assert _plan("fspo", reward__step_reward_lambda=0.5).step_reward_lambda == 0.5
    assert _plan("grpo", reward__step_reward_lambda=0.5).step_reward_lambda == 0.0  # the step reward needs the flip
    # verdicts: for the flip, the logged step factuality or the detail term, and only with a verifier
    assert _plan("grpo").verdicts and not _plan("grpo", reward__log_step_factuality=False).verdicts
    assert _plan("grpo", reward__log_step_factuality=False, detail__precision_weight=0.5).verdicts
    assert not _plan("fspo", verifier=False).verdicts and _plan("fspo", verifier=False).flip
    assert _plan("caution", detail__weight=0.2) == ScoringPlan("caution", "caution", False, True, True, False, 0.0)
    assert _plan("grpo", detail__relevance_weight=0.3, verifier=False).relevance
    with pytest.raises(dataclasses.FrozenInstanceError):
        _plan().flip = False


@pytest.mark.parametrize("method, settings, message", [
    ("rlfh", {}, "reward.method=rlfh needs a verifier"),
    ("klcf+fspo", {}, "reward.method=klcf\\+fspo needs a verifier"),
    ("grpo", {"detail__weight": 0.2}, "need a verifier"),
    ("grpo", {"detail__precision_weight": 0.5}, "need a verifier"),
    ("rlfh+fspo", {}, "unknown reward.method"),  # the name is checked first
])
def test_the_plan_refuses_what_needs_a_verifier_without_one(method, settings, message):
    with pytest.raises(ValueError, match=message):
        _plan(method, verifier=False, **settings)


def test_a_step_given_the_plan_reads_no_method_name(smol_tokenizer, monkeypatch):
    """The trainer makes the plan once per run: a step given it (and the run's tools) never parses reward.method,
    and scores exactly as a step that makes its own plan."""
    import torch

    from fspo_lite.data.examples import QAExample
    from fspo_lite.rollout.transformers_rollout import rollout_from_texts
    from fspo_lite.scoring import plan as plan_module
    from fspo_lite.scoring import rewards as rewards_module
    from fspo_lite.scoring.methods import RewardTools
    from fspo_lite.scoring.verifiers import LexicalVerifier

    gold = QAExample("q", "What is the capital of France?", ["Paris"], "Paris is the capital of France.")
    rollout = rollout_from_texts(smol_tokenizer, ["Paris is the capital of France.</think>\n<answer>Paris</answer>",
                                                  "Lyon is the capital of France.</think>\n<answer>Lyon</answer>"])
    config = Config()
    config.rollout.group_size, config.reward.step_reward_lambda = 2, 0.5
    own = rewards_module.score_rollouts([gold] * 2, rollout, smol_tokenizer, config, LexicalVerifier())
    plan = scoring_plan(config.reward, config.detail, True)

    def forbidden(name):
        raise AssertionError(f"reward.method {name!r} parsed during a step")

    monkeypatch.setattr(plan_module, "parse_method", forbidden)
    monkeypatch.setattr(rewards_module, "parse_method", forbidden)
    config.reward.method = "not a method"
    given = rewards_module.score_rollouts([gold] * 2, rollout, smol_tokenizer, config, LexicalVerifier(),
                                          tools=RewardTools(), plan=plan)
    assert torch.equal(given.rewards, own.rewards) and torch.equal(given.sentence_mask, own.sentence_mask)
    assert given.metrics == own.metrics and given.sentence_mask.abs().sum() > 0


@pytest.mark.parametrize("key, value", [("reward.method", "fspo2"), ("reward.method", "rlfh+fspo"),
                                        ("verifier.name", "lexicall")])
def test_load_config_and_config_refuse_an_unknown_name_as_check_settings_does(key, value):
    config = Config()
    section, name = key.split(".")
    setattr(getattr(config, section), name, value)
    with pytest.raises(ConfigError) as checked:
        check_settings(config)
    assert str(checked.value).startswith(f"unknown {key} {value!r}; available: ")
    with pytest.raises(ConfigError) as loaded:
        load_config(overrides={key: value})
    with pytest.raises(ConfigError) as built:
        Config(**{section: {name: value}})
    assert str(loaded.value) == str(built.value) == str(checked.value)


def test_the_public_facade_refuses_an_unknown_name():
    """A fresh process that imports only the public facade refuses an unknown reward.method in load_config."""
    import subprocess
    import sys

    code = ("from fspo_lite import load_config\ntry:\n    load_config(overrides={'reward.method': 'fspo2'})\n"
            "except Exception as error:\n    print(type(error).__name__, error)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300).stdout
    assert out.startswith("ConfigError unknown reward.method 'fspo2'; available: grpo, fspo"), out


def test_a_config_is_checked_without_the_scoring_layer():
    """Whether a Config is valid does not depend on what was imported: a fresh process that loads fspo_lite.config
    with the scoring layer made unimportable (and the package's __init__, which imports it, skipped) still refuses an
    unknown reward.method, a flip the source does not take and an unknown verifier.name, in the words the scoring
    layer's check uses."""
    import subprocess
    import sys
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "fspo_lite"
    code = (f"import sys, types\npackage = types.ModuleType('fspo_lite'); package.__path__ = [{str(package)!r}]\n"
            "sys.modules['fspo_lite'] = package; sys.modules['fspo_lite.scoring'] = None\n"
            "from fspo_lite.config import Config, ConfigError\n"
            "for key, value in (('reward', {'method': 'fspo2'}), ('reward', {'method': 'rlfh+fspo'}),\n"
            "                   ('verifier', {'name': 'lexicall'})):\n"
            "    try:\n        Config(**{key: value})\n        print('accepted', value)\n"
            "    except ConfigError as error:\n        print(error)\n"
            "print(sorted(name for name in sys.modules if name.startswith('fspo_lite.scoring')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = out.stdout.splitlines()
    assert len(lines) == 4, out.stdout + out.stderr
    for line, (key, value) in zip(lines, [("reward.method", "fspo2"), ("reward.method", "rlfh+fspo"),
                                          ("verifier.name", "lexicall")]):
        config = Config()
        section, name = key.split(".")
        setattr(getattr(config, section), name, value)
        with pytest.raises(ConfigError) as checked:
            check_settings(config)
        assert line == str(checked.value), (line, str(checked.value))
    assert lines[3] == "['fspo_lite.scoring']"  # the blocked entry only: nothing of the layer was loaded


def test_the_config_layer_holds_the_scoring_layers_names():
    """REWARD_SOURCES and VERIFIER_NAMES are the METHODS and VERIFIERS tables' names (in order) and flip flags, so
    the config refuses exactly what the scoring layer does."""
    from fspo_lite.config import REWARD_SOURCES, VERIFIER_NAMES
    from fspo_lite.scoring.methods import METHODS
    from fspo_lite.scoring.verifiers import VERIFIERS

    assert list(REWARD_SOURCES.items()) == [(source, method.flips) for source, method in METHODS.items()]
    assert VERIFIER_NAMES == tuple(VERIFIERS)
    assert REWARD_METHODS[:3] == ("grpo", "fspo", "caution")
