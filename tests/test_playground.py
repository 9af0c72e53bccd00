"""The playground's update function, called directly: it must show what a training step computes."""

import pytest

from fspo_lite.drivers import playground
from fspo_lite.config import ConfigError
from fspo_lite.data.examples import QAExample

ITEM = playground.PlaygroundItem(
    QAExample("g", "What is the chemical symbol of gold?", ["Au"],
              "Gold is a chemical element with the symbol Au and atomic number 79."),
    ["Gold is a chemical element. Gold has the symbol Au.</think>\n<answer>Au</answer>",
     "Gold has atomic number 12. Its symbol is Ag.</think>\n<answer>Ag</answer>",
     "Gold has the symbol Au, and gold has atomic number 79.</think>\n<answer>Au</answer>",
     "I am not sure.</think>\n<answer>Unknown</answer>"],
)


def test_fspo_view_matches_the_trainer_math(smol_tokenizer):
    result = playground.compute_playground(ITEM, smol_tokenizer, "fspo")
    assert result.rewards == [1.0, 0.0, 1.0, 0.0]
    assert [len(t) for t in result.tokens] == [len(a) for a in result.advantages]
    # response 1 is below average (negative advantage) but its reasoning is checked sentence by sentence:
    # "Gold has atomic number 12." is unsupported and keeps the negative sign
    assert result.details[1]["sentence_labels"] == [-1, -1]
    assert all(a < 0 for a in result.advantages[1])
    # response 0 is above average; both its sentences are supported, so no token is negative
    assert result.details[0]["sentence_labels"] == [1, 1] and min(result.advantages[0]) > 0
    assert "<span" in result.html and "gold:</b> Au" in result.html


def test_sliders_change_the_view(smol_tokenizer):
    default = playground.compute_playground(ITEM, smol_tokenizer, "fspo")
    # lexical support of "Gold has atomic number 12." (beyond the question) is 0.2: supported below that
    lenient = playground.compute_playground(ITEM, smol_tokenizer, "fspo", {"verifier.threshold": 0.15})
    assert (default.details[1]["sentence_labels"], lenient.details[1]["sentence_labels"]) == ([-1, -1], [1, -1])
    assert min(default.advantages[1]) < 0 < max(lenient.advantages[1])
    shaped = playground.compute_playground(ITEM, smol_tokenizer, "fspo", {"reward.step_reward_lambda": 1.0})
    assert shaped.rewards[0] == pytest.approx(2.0)  # F1 1 + 1.0 * step score (+1: both sentences supported)


def test_grpo_advantage_is_constant_per_response(smol_tokenizer):
    result = playground.compute_playground(ITEM, smol_tokenizer, "grpo")
    assert all(len(set(row)) == 1 for row in result.advantages)


def test_every_method_renders(smol_tokenizer):
    caution = playground.compute_playground(ITEM, smol_tokenizer, "caution")
    assert [d["category"] for d in caution.details] == ["correct", "wrong", "correct", "unknown"]
    rlfh = playground.compute_playground(ITEM, smol_tokenizer, "rlfh", {"rlfh.granularity": "token"})
    assert rlfh.token_rewards is not None and len(set(rlfh.advantages[0])) > 2  # varies along the response
    klcf = playground.compute_playground(ITEM, smol_tokenizer, "klcf+fspo", {"klcf.recall_weight": 2.0})
    assert klcf.details[2]["recall"] > klcf.details[3]["recall"]
    assert "recall=" in klcf.html


def test_every_knob_is_a_config_key(smol_tokenizer):
    settings = {key: low for key, (low, high, step) in playground.KNOBS.items()}
    settings.update({key: choices[-1] for key, choices in playground.CHOICES.items()})
    playground.playground_config("fspo", 4, "<think>", settings)
    with pytest.raises(ConfigError, match="unknown config key"):
        playground.compute_playground(ITEM, smol_tokenizer, "fspo", {"rlfh.no_such_knob": 1.0})


def test_bar_chart(smol_tokenizer):
    result = playground.compute_playground(ITEM, smol_tokenizer, "rlfh")
    figure = playground.plot_token_advantages(result, 1)
    assert len(figure.axes[0].patches) == len(result.tokens[1])


def test_items_round_trip(tmp_path):
    playground.save_items([ITEM], tmp_path / "items.jsonl")
    [loaded] = playground.load_items(tmp_path / "items.jsonl")
    assert loaded.example == ITEM.example and loaded.completions == ITEM.completions


def test_bundled_items_load():
    if not playground.PLAYGROUND_FILE.exists():
        pytest.skip("data/playground_examples.jsonl not generated")
    items = playground.load_items()
    assert len(items) >= 4 and all(len(i.completions) >= 2 and i.example.evidence for i in items)


def test_sample_items_strips_the_prefix():
    from types import SimpleNamespace

    from fspo_lite.config import Config

    class Engine:
        generation_batch_size = 4

        def generate(self, prompts, num_samples):
            return SimpleNamespace(texts=[f"reply {i}</think><answer>x</answer>" for i in range(len(prompts) * num_samples)])

    items = playground.sample_items(Config(), [ITEM.example, ITEM.example], samples=2, engine=Engine(),
                                    tokenizer=SimpleNamespace())
    assert [i.completions for i in items] == [["reply 0</think><answer>x</answer>", "reply 1</think><answer>x</answer>"],
                                              ["reply 2</think><answer>x</answer>", "reply 3</think><answer>x</answer>"]]
    assert items[0].meta["model"] == "smollm2-135m" and items[0].response_prefix == "<think>"


def test_detail_slider_gives_the_training_reward(smol_tokenizer):
    """With the detail term on, the playground's rewards and advantages are the ones score_rollouts and
    advantages_from_scores give a training step for the same config, and the bonus is the hand-computed one."""
    import math

    from fspo_lite.config import load_config
    from fspo_lite.scoring.rewards import advantages_from_scores, score_rollouts
    from fspo_lite.rollout.transformers_rollout import rollout_from_texts
    from fspo_lite.scoring.verifiers import build_verifier

    settings = {"detail.weight": 0.3, "detail.precision_weight": 0.6}
    shown = playground.compute_playground(ITEM, smol_tokenizer, "fspo", settings)
    config = load_config(None, ["reward.method=fspo", "rollout.group_size=4", "detail.weight=0.3",
                                "detail.precision_weight=0.6"])
    rollout = rollout_from_texts(smol_tokenizer, ITEM.completions)
    scored = score_rollouts([ITEM.example] * 4, rollout, smol_tokenizer, config, build_verifier(config.verifier))
    advantages, _ = advantages_from_scores(scored, rollout.completion_mask, config.rollout.group_size,
                                               config.train.scale_by_std)
    assert shown.rewards == scored.rewards.tolist()
    lengths = rollout.completion_mask.sum(dim=1).tolist()
    assert shown.advantages == [row[: int(n)] for row, n in zip(advantages.tolist(), lengths)]
    # by hand: F1 + 0.3 * log(1 + S) + 0.6 * S / (T + 1); labels [1, 1], [-1, -1], [1], [-1]
    expected = [1 + 0.3 * math.log(3) + 0.6 * 2 / 3, 0.0, 1 + 0.3 * math.log(2) + 0.6 * 1 / 2, 0.0]
    assert shown.rewards == pytest.approx(expected, abs=1e-6)
    assert [d["supported_distinct"] for d in shown.details] == [2, 0, 1, 0]
    table = playground.reward_table(shown)
    assert table["detail_bonus"].tolist() == pytest.approx([e - f1 for e, f1 in zip(expected, [1, 0, 1, 0])], abs=1e-6)
    off = playground.compute_playground(ITEM, smol_tokenizer, "fspo")
    assert off.rewards == [1.0, 0.0, 1.0, 0.0] and "detail_bonus" not in playground.reward_table(off)


def test_missing_answer_reads_the_same_in_table_and_text(smol_tokenizer):
    item = playground.PlaygroundItem(ITEM.example, ["Gold is Au.</think>\n<answer>Au</answer>", "I forgot the tags."])
    result = playground.compute_playground(item, smol_tokenizer, "grpo")
    assert playground.reward_table(result)["answer"].tolist() == ["Au", "(none)"]
    assert "answer=(none)" in result.html and "answer=None" not in result.html


def test_the_controls_and_truthfulness_rewards_show_what_training_pays(smol_tokenizer):
    """ITEM: 0 correct with both sentences supported, 1 wrong (Ag) with unsupported sentences, 2 correct with its one
    sentence supported, 3 'Unknown' with an unsupported sentence."""
    assert playground.compute_playground(ITEM, smol_tokenizer, "format").rewards == [1.0, 1.0, 1.0, 1.0]
    assert playground.compute_playground(ITEM, smol_tokenizer, "ternary").rewards == [1.0, -1.0, 1.0, 0.0]
    binary = playground.compute_playground(ITEM, smol_tokenizer, "binary")
    assert [d["sentence_labels"] for d in binary.details] == [[1, 1], [-1, -1], [1], [-1]]
    assert binary.rewards == [1.0, 0.0, 1.0, 0.0] and not any(d["vetoed"] for d in binary.details)
    # a correct answer after an unsupported sentence loses its reward
    vetoed = playground.PlaygroundItem(ITEM.example, [
        "Gold has atomic number 12. Gold has the symbol Au.</think>\n<answer>Au</answer>", ITEM.completions[0]])
    result = playground.compute_playground(vetoed, smol_tokenizer, "binary")
    assert result.details[0]["sentence_labels"] == [-1, 1] and result.details[0]["vetoed"]
    assert result.rewards == [0.0, 1.0]
    coins = playground.compute_playground(ITEM, smol_tokenizer, "random").rewards
    assert set(coins) <= {0.0, 1.0}
    # corver: fspo with the step reward at 0.5: response 0 earns 1 + 0.5 x (+1), response 1 0 + 0.5 x (-1)
    corver = playground.compute_playground(ITEM, smol_tokenizer, "fspo", {"reward.step_reward_lambda": 0.5})
    assert corver.rewards[:2] == pytest.approx([1.5, -0.5])


def test_flipped_tokens_counts_signs_turned_against_the_group_advantage():
    assert playground.flipped_tokens([0.5, 0.5, 0.5], [0.5, -0.5, -0.5]) == 2
    assert playground.flipped_tokens([-1.0, -1.0], [1.0, -1.0]) == 1
    assert playground.flipped_tokens([0.0, 0.0], [0.0, 0.0]) == 0


def test_flip_record_from_examples_picks_the_most_flipped_response(smol_tokenizer, tmp_path):
    from fspo_lite.drivers.report import plot_flip

    right_with_a_wrong_step = "Gold has atomic number 12. Its symbol is Au.</think>\n<answer>Au</answer>"
    item = playground.PlaygroundItem(ITEM.example, [*ITEM.completions, right_with_a_wrong_step])
    record = playground.flip_record_from_examples(smol_tokenizer, [item])
    assert record["response"] == "<think>" + right_with_a_wrong_step
    assert record["advantage"] > 0 and record["reward"] == 1.0 and record["gold"] == ["Au"]
    assert record["flipped_tokens"] == sum(1 for a in record["token_advantages"] if a < 0) > 0
    assert len(record["tokens"]) == len(record["token_advantages"])
    plot_flip(record, tmp_path / "flip.png")  # the record is what the report's flip figure reads
    assert (tmp_path / "flip.png").stat().st_size > 1000
    assert playground.flip_record_from_examples(smol_tokenizer, [ITEM]) is None  # no flipped token: nothing
    bundled = playground.flip_record_from_examples(smol_tokenizer)  # notebook 04's fallback has a response to draw
    assert bundled is not None and bundled["flipped_tokens"] > 0


def test_the_notebooks_default_example_shows_the_flip_both_ways(smol_tokenizer):
    """Notebook 05 opens on a group where FSPO does what the README says: a right answer's unsupported sentence
    pushed down, a wrong answer's supported sentence pushed up (GRPO gives each response one sign throughout)."""
    from fspo_lite.drivers.experiment import notebook_parameters

    defaults = notebook_parameters("05_reward_playground.ipynb")
    item = playground.load_items()[int(defaults["item_index"])]
    grpo = playground.compute_playground(item, smol_tokenizer, "grpo")
    fspo = playground.compute_playground(item, smol_tokenizer, "fspo")
    down = [i for i, (d, before, after) in enumerate(zip(fspo.details, grpo.advantages, fspo.advantages))
            if d["correct"] and min(before) > 0 and min(after) < 0]
    up = [i for i, (d, before, after) in enumerate(zip(fspo.details, grpo.advantages, fspo.advantages))
          if not d["correct"] and d["format_ok"] and max(before) < 0 and max(after) > 0]
    assert down and up, (down, up)
    shown = int(defaults["response_index"])  # the bar chart's response is a right answer pushed partly down
    assert shown in down and fspo.details[shown]["sentence_labels"] == [1, -1]
