"""Two training steps of every reward method on the tiny random model (the reward.method grammar: test_plan.py).

The tiny model never writes the answer format, so its real rewards are all equal. As in
test_trainer.py, the real scorer runs (so each method's code path executes and logs its
metrics) and its rewards are then replaced by seeded random values to exercise the update.
"""

import copy
import json

import pytest
import torch

from fspo_lite.update import trainer as trainer_module
from fspo_lite.config import ConfigError, load_config
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.methods.klcf import CHECKLIST_KIND
from fspo_lite.update.trainer import Trainer
from fspo_lite.logs.training_log import read_metrics

EXAMPLES = [
    QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
    QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au and atomic number 79."),
]


@pytest.fixture
def varied_rewards(monkeypatch):
    real = trainer_module.score_rollouts
    generator = torch.Generator().manual_seed(0)

    def scored_with_variance(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        if scored.token_rewards is not None:
            noise = torch.randn(scored.token_rewards.shape, generator=generator)
            scored.token_rewards = noise * rollout.completion_mask
        else:
            scored.rewards = torch.rand(len(examples), generator=generator)
        if scored.sentence_mask is not None:
            scored.sentence_mask = torch.randint(-1, 2, scored.sentence_mask.shape, generator=generator).float()
        return scored

    monkeypatch.setattr(trainer_module, "score_rollouts", scored_with_variance)


METHOD_METRICS = {
    "caution": ["process_correct_rate", "caution_phase"],
    "caution+fspo": ["process_correct_rate", "flipped_token_share"],
    "rlfh": ["rlfh_statements", "rlfh_unlocated", "rlfh_unplaced"],
    "klcf": ["klcf_recall", "klcf_precision", "klcf_empty_checklist_share"],
    "klcf+fspo": ["klcf_recall", "flipped_token_share"],
}


@pytest.mark.parametrize("method", sorted(METHOD_METRICS))
def test_two_steps_per_method(tmp_path, tiny_policy, varied_rewards, method):
    checklist = tmp_path / "checklist.json"
    checklist.write_text(json.dumps({"kind": CHECKLIST_KIND, "questions": {
        "a": {"checklist": ["Paris is the capital of France"]}, "b": {"checklist": []}}}))
    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path / 'run'}", f"reward.method={method}",
                                               f"klcf.checklist_path={checklist}", "caution.variant=fact_then_caution",
                                               "caution.switch_step=1"])
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    before = {k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k}
    history = Trainer(config, model, tokenizer, EXAMPLES, progress=False).train()
    assert len(history) == 2
    assert any(not torch.equal(before[k], v) for k, v in model.named_parameters() if "lora_" in k)
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    for key in METHOD_METRICS[method]:
        assert key in rows[0], key
    assert all(r["loss"] is not None and abs(r["loss"]) < 1e3 for r in rows)
    if method == "caution":
        assert [r["caution_phase"] for r in rows] == ["fact", "caution"]
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert ("token_rewards" in samples[0]) == (method == "rlfh")


def test_klcf_without_checklist_fails_before_training(tmp_path, tiny_policy):
    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", "reward.method=klcf"])
    with pytest.raises(ConfigError, match="klcf-checklist"):  # check_settings, before the verifier or tools load
        Trainer(config, tiny_policy[0], tiny_policy[1], EXAMPLES, progress=False)


def test_claim_extractor_choices():
    from fspo_lite.scoring.claims import LLMClaimExtractor, RuleBasedClaimExtractor, build_claim_extractor
    from fspo_lite.config import VerifierConfig

    assert isinstance(build_claim_extractor("rules"), RuleBasedClaimExtractor)
    server = VerifierConfig(server_url="http://127.0.0.1:9/v1", server_model="judge")  # nothing is requested yet
    assert isinstance(build_claim_extractor("llm", server), LLMClaimExtractor)
    with pytest.raises(ValueError, match="llm, rules"):
        build_claim_extractor("magic")
