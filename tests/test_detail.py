"""The detail term (fspo_lite.scoring.methods.detail) by hand, its padding guard, and its place in score_rollouts."""

import math

import pytest
import torch

from fspo_lite.config import Config
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.methods.detail import DetailCounts, detail_bonus, detail_counts
from fspo_lite.scoring.rewards import advantages_from_scores, score_rollouts
from fspo_lite.rollout.transformers_rollout import Rollout, completion_mask_from_ids
from fspo_lite.text import near_duplicate_flags as duplicate_flags
from fspo_lite.text import sentence_words, word_jaccard
from fspo_lite.scoring.verifiers import LexicalVerifier

EXAMPLE = QAExample("g", "What is the chemical symbol of gold?", ["Au"],
                    "Gold is a chemical element with the symbol Au and atomic number 79. Gold is a dense metal.")


def test_words_and_jaccard_by_hand():
    assert sentence_words("Paris is the capital of France.") == sentence_words("The capital of France is Paris!")
    a, b = sentence_words("Gold is a metal."), sentence_words("Gold is a dense metal.")
    assert word_jaccard(a, b) == pytest.approx(4 / 5)  # {gold, is, a, metal} of {gold, is, a, dense, metal}
    assert word_jaccard(frozenset(), frozenset()) == 1.0
    assert word_jaccard(a, frozenset()) == 0.0


def test_duplicate_flags_keep_the_first_and_catch_chains():
    sentences = ["Gold is a metal.", "Gold is a dense metal.", "Au is the symbol.", "gold IS a metal"]
    assert duplicate_flags(sentences, 0.8) == [False, True, False, True]   # 4/5 >= 0.8; exact repeat
    assert duplicate_flags(sentences, 0.9) == [False, False, False, True]  # 4/5 < 0.9
    assert duplicate_flags([], 0.8) == []


def test_counts_and_bonus_by_hand():
    sentences = ["Gold has the symbol Au.", "Gold has the symbol Au!", "Gold melts at 5 K.", "I think so."]
    labels = [1, 1, -1, 0]
    counts = detail_counts(sentences, labels, 0.8)
    assert counts == DetailCounts(supported_distinct=1, checked=3, duplicates=1)
    assert detail_bonus(counts, 0.2, 8) == pytest.approx(0.2 * math.log(2))            # 0.138629
    assert detail_bonus(counts, 0.0, 8, precision_weight=0.5) == pytest.approx(0.5 * 1 / 4)
    assert detail_bonus(DetailCounts(3, 5, 0), 0.2, 8, 0.5) == pytest.approx(0.2 * math.log(4) + 0.5 * 3 / 6)
    assert detail_bonus(DetailCounts(10, 10, 0), 0.2, 8) == pytest.approx(0.2 * math.log(9))  # the cap
    assert detail_bonus(DetailCounts(0, 4, 0), 0.2, 8, 0.5) == 0.0
    with pytest.raises(ValueError, match="2 sentences but 1 labels"):
        detail_counts(["a", "b"], [1], 0.8)
    with pytest.raises(ValueError, match="cap"):
        detail_bonus(counts, 0.2, -1)


def test_padding_does_not_pay():
    """One supported sentence said five times earns what it earns once, and less precision."""
    once = detail_counts(["Gold has the symbol Au."], [1], 0.8)
    padded = detail_counts(["Gold has the symbol Au."] * 5, [1] * 5, 0.8)
    assert once.supported_distinct == padded.supported_distinct == 1 and padded.duplicates == 4
    assert detail_bonus(padded, 0.2, 8) == detail_bonus(once, 0.2, 8)
    assert detail_bonus(padded, 0, 8, 1.0) == pytest.approx(1 / 6)  # S / (T + 1) = 1 / 6
    assert detail_bonus(once, 0, 8, 1.0) == 0.5                      # 1 / 2
    two = detail_counts(["Gold has the symbol Au.", "Gold is a dense metal."], [1, 1], 0.8)
    assert detail_bonus(two, 0.2, 8) > detail_bonus(padded, 0.2, 8)  # saying more, and true, does pay


def _rollout(tokenizer, texts):
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    mask = completion_mask_from_ids(ids, [tokenizer.eos_token_id])
    prompt = torch.ones(len(rows), 1, dtype=torch.long)
    return Rollout(prompt, prompt, ids, mask, texts, num_samples=len(texts))


TEXTS = ["Gold has the symbol Au. Gold is a dense metal.</think>\n<answer>Au</answer>",
         "Gold has the symbol Au.</think>\n<answer>Au</answer>",
         "Gold has the symbol Au. Gold has the symbol Au.</think>\n<answer>Au</answer>",
         "Gold has atomic number 12.</think>\n<answer>Ag</answer>",
         "no tags at all"]


def test_score_rollouts_adds_the_term_and_fspo_flips_on_top(smol_tokenizer):
    rollout = _rollout(smol_tokenizer, TEXTS)
    examples = [EXAMPLE] * 5
    config = Config()
    config.rollout.group_size = 5
    plain = score_rollouts(examples, rollout, smol_tokenizer, config, LexicalVerifier())
    assert plain.rewards.tolist() == [1.0, 1.0, 1.0, 0.0, -2.0]
    assert [v.labels for v in plain.verdicts] == [[1, 1], [1], [1, 1], [-1], []]
    assert plain.metrics["supported_per_response"] == pytest.approx(5 / 5)
    assert plain.metrics["unsupported_per_response"] == pytest.approx(1 / 5)
    assert "detail_bonus_mean" not in plain.metrics and "duplicate_sentences_per_response" not in plain.metrics

    config.detail.weight = 0.2
    detailed = score_rollouts(examples, rollout, smol_tokenizer, config, LexicalVerifier())
    ln2, ln3 = math.log(2), math.log(3)
    expected = [1 + 0.2 * ln3, 1 + 0.2 * ln2, 1 + 0.2 * ln2, 0.0, -2.0]  # the repeat counts once; bad format: no term
    assert detailed.rewards.tolist() == pytest.approx(expected)
    assert detailed.details[2]["supported_distinct"] == 1
    assert detailed.metrics["duplicate_sentences_per_response"] == pytest.approx(1 / 5)
    assert detailed.metrics["detail_bonus_mean"] == pytest.approx((0.2 * ln3 + 0.4 * ln2) / 5)
    # the flip is unchanged: same mask, advantages from the new rewards
    assert torch.equal(detailed.sentence_mask, plain.sentence_mask)
    advantages, flipped = advantages_from_scores(detailed, rollout.completion_mask, config.rollout.group_size,
                                               config.train.scale_by_std)
    rewards = torch.tensor(expected)
    group = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
    row = 3  # a wrong answer: negative advantage; its one sentence is unsupported, so no flip there
    assert advantages[row, 0].item() == pytest.approx(group[row].item(), abs=1e-5)
    assert not flipped[row].any()


def test_detail_term_needs_a_verifier(smol_tokenizer):
    config = Config()
    config.detail.precision_weight = 0.5
    with pytest.raises(ValueError, match="need a verifier"):
        score_rollouts([EXAMPLE], _rollout(smol_tokenizer, TEXTS[:1]), smol_tokenizer, config, None)


# ---- the relevance term -----------------------------------------------------------------------------
def test_relevance_bonus_and_prompt_by_hand():
    from fspo_lite.scoring.methods.detail import relevance_bonus, relevance_messages

    assert relevance_bonus(0.8, 0.5) == pytest.approx(0.4)
    assert relevance_bonus(None, 0.5) == 0.0 and relevance_bonus(1.0, 0.0) == 0.0
    messages = relevance_messages(" What is the chemical symbol of gold? ", "Gold is Au.\n")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "Question: What is the chemical symbol of gold?\n\nResponse: Gold is Au.\n\n" in messages[1]["content"]


class _FakeJudge:
    """A relevance judge that answers from a table keyed by the response's first words."""

    def __init__(self, answers):
        self.answers, self.seen = answers, []

    def yes_probability(self, prompts):
        self.seen += prompts
        return [next((p for key, p in self.answers.items() if f"Response: <think>{key}" in m[1]["content"]), None)
                for m in prompts]


def test_score_rollouts_adds_the_relevance_term(smol_tokenizer):
    from fspo_lite.scoring.methods import RewardTools

    rollout = _rollout(smol_tokenizer, TEXTS)
    config = Config()
    config.rollout.group_size = 5
    config.detail.relevance_weight, config.detail.relevance_judge = 0.5, "llm"
    judge = _FakeJudge({"Gold has the symbol Au. Gold is": 0.9, "Gold has the symbol Au.<": 0.5,
                        "Gold has atomic": 0.2, "no tags": 1.0})  # responses start with <think>
    scored = score_rollouts([EXAMPLE] * 5, rollout, smol_tokenizer, config, LexicalVerifier(),
                            tools=RewardTools(relevance=judge))
    # row 2 (a repeat) gets no reply the judge can read: no term; row 4 is malformed: the format penalty only
    assert scored.rewards.tolist() == pytest.approx([1 + 0.45, 1 + 0.25, 1.0, 0.0 + 0.1, -2.0])
    assert [d["relevance"] for d in scored.details] == [0.9, 0.5, None, 0.2, 1.0]
    assert scored.metrics["relevance_mean"] == pytest.approx((0.9 + 0.5 + 0.2 + 1.0) / 4)
    assert scored.metrics["relevance_unread_share"] == pytest.approx(1 / 5)
    assert "What is the chemical symbol of gold?" in judge.seen[0][1]["content"]
    with pytest.raises(ValueError, match="relevance_judge=llm"):
        score_rollouts([EXAMPLE] * 5, rollout, smol_tokenizer, config, LexicalVerifier(), tools=RewardTools())


def test_relevance_settings_are_checked():
    from fspo_lite.config import ConfigError, load_config
    from fspo_lite.scoring.rewards import build_reward_tools

    with pytest.raises(ConfigError, match="detail.relevance_weight"):
        load_config(None, {"detail.relevance_weight": 0.5})
    with pytest.raises(ConfigError, match="detail.relevance_judge"):
        load_config(None, {"detail.relevance_judge": "gpt"})
    assert build_reward_tools(load_config(None, {"detail.relevance_judge": "llm"})).relevance is None  # weight 0: off


# ---- off, the terms cost nothing; on, their values are those from before that rule ------------------------------
def _forbid(monkeypatch, *names):
    """Make each "module:function" raise when called."""
    import importlib

    for name in names:
        module, _, function = name.partition(":")

        def refuse(*args, _name=name, **kwargs):
            raise AssertionError(f"{_name} ran with the term off")

        monkeypatch.setattr(importlib.import_module(module), function, refuse)


DETAIL_CODE = ("fspo_lite.scoring.rewards:detail_terms", "fspo_lite.scoring.methods.detail:detail_counts",
               "fspo_lite.scoring.methods.detail:detail_bonus", "fspo_lite.scoring.methods.detail:near_duplicate_flags",
               "fspo_lite.text:near_duplicate_flags")
RELEVANCE_CODE = ("fspo_lite.scoring.rewards:build_relevance_judge",
                  "fspo_lite.scoring.methods.detail:build_chat_model")


@pytest.mark.parametrize("method, expected", [
    ("fspo", [1.0, 1.0, 1.0, 0.0, -2.0]),
    ("grpo", [1.0, 1.0, 1.0, 0.0, -2.0]),
    ("caution+fspo", [1.0, 1.0, 1.0, 0.0, -2.0]),
    ("rlfh", [2.5446553230285645, 1.5356162786483765, 3.071232795715332, -0.6034610271453857, -2.0]),
])
def test_with_the_detail_term_off_no_detail_code_runs(smol_tokenizer, monkeypatch, method, expected):
    """The plan has no detail or relevance term: no counts, no near-duplicate flags, no judge built or asked; the
    rewards are the source's alone and the metrics have no detail keys."""
    from fspo_lite.scoring.rewards import build_reward_tools

    _forbid(monkeypatch, *DETAIL_CODE, *RELEVANCE_CODE)
    rollout = _rollout(smol_tokenizer, TEXTS)
    config = Config(reward={"method": method}, rollout={"group_size": 5}, detail={"relevance_judge": "llm"})
    tools = build_reward_tools(config)
    assert tools.relevance is None
    scored = score_rollouts([EXAMPLE] * 5, rollout, smol_tokenizer, config, LexicalVerifier(), tools=tools)
    assert scored.rewards.tolist() == pytest.approx(expected, abs=1e-6)
    assert not {"detail_bonus_mean", "duplicate_sentences_per_response", "relevance_mean"} & set(scored.metrics)
    assert scored.metrics["supported_per_response"] == pytest.approx(1.0)
    assert not any({"detail_bonus", "supported_distinct", "relevance"} & set(item) for item in scored.details)


def test_with_only_the_relevance_term_on_no_detail_count_runs(smol_tokenizer, monkeypatch):
    from fspo_lite.scoring.methods import RewardTools

    _forbid(monkeypatch, *DETAIL_CODE[1:])
    config = Config(rollout={"group_size": 5}, detail={"relevance_weight": 0.5, "relevance_judge": "llm"})
    judge = _FakeJudge({"Gold has the symbol Au. Gold is": 0.9, "Gold has the symbol Au.<": 0.5,
                        "Gold has atomic": 0.2, "no tags": 1.0})
    scored = score_rollouts([EXAMPLE] * 5, _rollout(smol_tokenizer, TEXTS), smol_tokenizer, config, LexicalVerifier(),
                            tools=RewardTools(relevance=judge))
    assert scored.rewards.tolist() == pytest.approx([1.45, 1.25, 1.0, 0.1, -2.0], abs=1e-6)
    assert scored.metrics["relevance_mean"] == pytest.approx(0.65)
    assert "duplicate_sentences_per_response" not in scored.metrics and "detail_bonus_mean" not in scored.metrics


@pytest.mark.parametrize("settings, expected, bonus_mean", [
    ({"detail": {"weight": 0.2, "precision_weight": 0.3}},
     [1.4197224378585815, 1.288629412651062, 1.2386294603347778, 0.0, -2.0], 0.18939626216888428),
    ({"detail": {"precision_weight": 0.5, "duplicate_threshold": 0.5}},
     [1.3333333730697632, 1.25, 1.1666666269302368, 0.0, -2.0], 0.15000000596046448),
    ({"detail": {"weight": 0.2, "relevance_weight": 0.5, "relevance_judge": "llm"}},
     [1.6697224378585815, 1.38862943649292, 1.13862943649292, 0.10000000149011612, -2.0], 0.09939626604318619),
    ({"reward": {"method": "rlfh"}, "detail": {"weight": 0.3}},
     [2.874238967895508, 1.7435604333877563, 3.279176950454712, -0.6034610271453857, -2.0], 0.1490943878889084),
])
def test_with_the_detail_term_on_its_values_are_unchanged(smol_tokenizer, settings, expected, bonus_mean):
    """Rewards, the detail metrics and the per-response details, as scored before the term was skipped when off."""
    from fspo_lite.scoring.methods import RewardTools
    from fspo_lite.scoring.rewards import build_reward_tools

    config = Config(rollout={"group_size": 5}, **settings)
    tools = build_reward_tools(config) if not config.detail.relevance_weight else RewardTools(relevance=_FakeJudge(
        {"Gold has the symbol Au. Gold is": 0.9, "Gold has the symbol Au.<": 0.5, "Gold has atomic": 0.2,
         "no tags": 1.0}))
    scored = score_rollouts([EXAMPLE] * 5, _rollout(smol_tokenizer, TEXTS), smol_tokenizer, config, LexicalVerifier(),
                            tools=tools)
    assert scored.rewards.tolist() == pytest.approx(expected, abs=1e-6)
    assert scored.metrics["detail_bonus_mean"] == pytest.approx(bonus_mean, abs=1e-7)
    assert scored.metrics["duplicate_sentences_per_response"] == pytest.approx(0.2)
    assert [item["supported_distinct"] for item in scored.details] == [2, 1, 1, 0, 0]
