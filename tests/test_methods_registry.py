"""The reward-method table (fspo_lite.scoring.methods.METHODS): one entry per source, each given only its config section,
one result type, and a new entry is all a new method needs to be trained with (and combined with the FSPO flip)."""

import pytest
import torch

from fspo_lite.config import Config
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.methods import METHODS, REWARD_METHODS, MethodResult, RewardMethod, no_tools
from fspo_lite.scoring.plan import parse_method
from fspo_lite.rollout.transformers_rollout import rollout_from_texts
from fspo_lite.scoring.rewards import score_rollouts
from fspo_lite.scoring.verifiers import LexicalVerifier

GOLD = QAExample("q", "What is the capital of France?", ["Paris"], "Paris is the capital of France.")
TEXTS = ["Paris is the capital of France.</think>\n<answer>Paris</answer>",
         "Lyon is the capital of France.</think>\n<answer>Lyon</answer>"]


def test_the_table_names_every_reward_method_and_each_section_exists():
    assert list(METHODS) == ["grpo", "caution", "rlfh", "klcf", "random", "format", "binary", "ternary"]
    assert REWARD_METHODS == ("grpo", "fspo", "caution", "caution+fspo", "rlfh", "klcf", "klcf+fspo", "random", "format",
                              "binary", "binary+fspo", "ternary", "ternary+fspo")
    config = Config()
    for name, method in METHODS.items():
        assert method.section is None or hasattr(config, method.section), name


@pytest.mark.parametrize("source, section", [("grpo", None), ("caution", "caution")])
def test_a_method_is_given_only_its_config_section(source, section, smol_tokenizer, monkeypatch):
    seen = {}
    real = METHODS[source]

    def spy(batch, given, verifier, tools):
        seen["section"] = given
        seen["batch"] = (batch.format_penalty, batch.group_size, batch.step, batch.total_steps)
        return real.score(batch, given, verifier, tools)

    monkeypatch.setitem(METHODS, source, RewardMethod(spy, real.section, real.needs_verifier, real.flips))
    config = Config()
    config.reward.method, config.rollout.group_size, config.train.steps = source, 2, 7
    score_rollouts([GOLD] * 2, rollout_from_texts(smol_tokenizer, TEXTS), smol_tokenizer, config, None, step=3)
    assert seen["section"] is (None if section is None else getattr(config, section))
    assert seen["batch"] == (config.reward.format_penalty, 2, 3, 7)


def test_a_new_table_entry_trains_with_and_without_the_flip(smol_tokenizer, monkeypatch):
    """A constant reward registered under a new name: parse_method accepts it and its '+fspo' form, and
    score_rollouts returns its rewards, details and metrics (plus the FSPO mask when flipped)."""

    def constant(batch, section, verifier, tools):
        n = len(batch.views)
        return MethodResult(torch.full((n,), 0.25), details=[{"k": i} for i in range(n)], metrics={"const": 1.0})

    monkeypatch.setitem(METHODS, "const", RewardMethod(constant))
    rollout = rollout_from_texts(smol_tokenizer, TEXTS)
    config = Config()
    config.rollout.group_size = 2
    for method, flipped in (("const", False), ("const+fspo", True)):
        config.reward.method = method
        assert parse_method(method).source == "const" and parse_method(method).flip == flipped
        scored = score_rollouts([GOLD] * 2, rollout, smol_tokenizer, config, LexicalVerifier())
        assert scored.rewards.tolist() == [0.25, 0.25] and scored.metrics["const"] == 1.0
        assert [d["k"] for d in scored.details] == [0, 1]
        assert (scored.sentence_mask is not None) == flipped
    monkeypatch.setitem(METHODS, "const", RewardMethod(constant, flips=False))
    with pytest.raises(ValueError, match="unknown reward.method"):
        parse_method("const+fspo")


def test_a_table_entry_builds_its_own_tools(smol_tokenizer, monkeypatch):
    """What a method uses besides the verifier comes from its entry's `tools` builder (given the whole config and
    the caller's checklists): rewards.build_reward_tools names no method, so a new entry needs no edit there."""
    from fspo_lite.scoring.methods import RewardTools
    from fspo_lite.scoring.rewards import build_reward_tools

    built = []

    def tools(config, checklists=None):
        built.append((config.reward.method, checklists))
        return RewardTools(checklists=checklists if checklists is not None else {"q": ["from the config"]})

    def reads_its_tools(batch, section, verifier, tools):
        n = len(batch.views)
        return MethodResult(torch.full((n,), float(len(tools.checklists["q"]))), details=[{} for _ in range(n)])

    monkeypatch.setitem(METHODS, "const", RewardMethod(reads_its_tools, tools=tools))
    config = Config()
    config.reward.method, config.rollout.group_size = "const+fspo", 2
    own = build_reward_tools(config)
    assert own.checklists == {"q": ["from the config"]} and own.relevance is None  # detail.relevance_weight 0
    assert build_reward_tools(config, checklists={"q": ["a", "b"]}).checklists == {"q": ["a", "b"]}
    assert built == [("const+fspo", None), ("const+fspo", {"q": ["a", "b"]})]
    scored = score_rollouts([GOLD] * 2, rollout_from_texts(smol_tokenizer, TEXTS), smol_tokenizer, config,
                            LexicalVerifier())  # no tools given: built from the config through the entry
    assert scored.rewards.tolist() == [1.0, 1.0] and len(built) == 3
    for name in ("grpo", "caution", "rlfh", "klcf"):  # the seed methods: grpo and caution need nothing
        assert (METHODS[name].tools is no_tools) == (name in ("grpo", "caution")), name
