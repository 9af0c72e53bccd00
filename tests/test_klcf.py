"""KLCF: checklist building and de-duplication, recall and precision (hand-computed), the reward, the
optional reward model."""

import json

import pytest
import torch

from fspo_lite.scoring.claims import RuleBasedClaimExtractor
from fspo_lite.config import Config, KLCFConfig
from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.methods.klcf import (
    CHECKLIST_KIND, SequenceClassifierRewardModel, build_checklist, checklist_recall, claim_overlap, claim_precision,
    dedupe_claims, klcf_reward, klcf_scores, load_checklists,
)
from fspo_lite.scoring.methods import RewardTools
from fspo_lite.rollout.transformers_rollout import rollout_from_texts
from fspo_lite.scoring.rewards import score_rollouts
from fspo_lite.scoring.verifiers import LexicalVerifier, Verifier

EVIDENCE = "Gold is a chemical element with the symbol Au and atomic number 79. It is a soft metal."


class TableVerifier(Verifier):
    def __init__(self, table):
        super().__init__()
        self.table = table

    def _score(self, evidence, sentences):
        return [self.table.get((e, s), self.table.get(s)) for e, s in zip(evidence, sentences)]


def test_recall_and_precision_by_hand():
    assert checklist_recall([0.9, 0.2, 0.6, None], threshold=0.5) == 0.5   # 2 of 4 facts stated
    assert checklist_recall([], 0.5) == 0.0
    assert claim_precision([0.9, 0.3, None]) == pytest.approx(0.6)         # None (not checkable) is skipped
    assert claim_precision([None]) == 0.0 and claim_precision([]) == 0.0


def test_reward_weights():
    config = KLCFConfig(recall_weight=2.0, precision_weight=0.5, reward_model_weight=0.1, outcome_weight=1.0)
    # 2 * 0.5 + 0.5 * 0.6 + 0.1 * 3.0 + 1.0 * 0.8 = 2.4
    assert klcf_reward(0.5, 0.6, config, reward_model_score=3.0, outcome=0.8) == pytest.approx(2.4)
    assert klcf_reward(0.5, 0.6, KLCFConfig(), reward_model_score=3.0, outcome=0.8) == pytest.approx(1.1)


def test_dedupe_by_content_word_overlap():
    assert claim_overlap("Gold has the symbol Au", "the symbol of gold is Au") == 1.0
    # {gold, atomic, number, 79} vs {gold, atomic, number}: 3/4
    assert claim_overlap("Gold has atomic number 79", "gold has an atomic number") == pytest.approx(0.75)
    claims = ["Gold has the symbol Au", "The symbol of gold is Au", "Gold has atomic number 79",
              "Gold has atomic number"]
    assert dedupe_claims(claims, overlap=0.8) == ["Gold has the symbol Au", "Gold has atomic number 79",
                                                  "Gold has atomic number"]
    assert dedupe_claims(claims, overlap=0.7) == ["Gold has the symbol Au", "Gold has atomic number 79"]


class ContextRecorder(Verifier):
    uses_context = True

    def __init__(self):
        super().__init__()
        self.contexts = []

    def _score(self, evidence, sentences, context):
        self.contexts += context
        return [0.9] * len(sentences)


def test_the_question_is_passed_as_context():
    recorder = ContextRecorder()
    texts = ["<think>Gold has the symbol Au.</think><answer>Au</answer>"]
    build_checklist(texts, EVIDENCE, RuleBasedClaimExtractor(), recorder, question="Symbol of gold?")
    klcf_scores(texts, [["Gold is a soft metal"]], [EVIDENCE], ["Which metal?"], RuleBasedClaimExtractor(), recorder)
    assert recorder.contexts == ["Symbol of gold?", "Which metal?", "Which metal?"]


def test_build_checklist_keeps_supported_unique_claims():
    responses = ["<think>Gold has the symbol Au, and gold has atomic number 80.</think><answer>Au</answer>",
                 "<think>The symbol of gold is Au; gold is a soft metal.</think><answer>Au</answer>"]
    checklist = build_checklist(responses, EVIDENCE, RuleBasedClaimExtractor(), LexicalVerifier(), 0.5, 0.8)
    assert checklist == ["Gold has the symbol Au", "gold is a soft metal"]
    assert build_checklist(responses, "", RuleBasedClaimExtractor(), LexicalVerifier()) == []


def test_klcf_scores_use_the_response_as_evidence_for_recall():
    texts = ["<think>Gold has the symbol Au.</think><answer>Au</answer>", "<think>No idea.</think><answer>x</answer>"]
    checklists = [["Gold has the symbol Au", "Gold is a soft metal"]] * 2
    table = {(texts[0], "Gold has the symbol Au"): 0.9, (texts[0], "Gold is a soft metal"): 0.1,
             (EVIDENCE, "Gold has the symbol Au"): 0.8}
    scores = klcf_scores(texts, checklists, [EVIDENCE] * 2, ["Symbol of gold?"] * 2, RuleBasedClaimExtractor(),
                         TableVerifier(table), 0.5)
    assert scores == [(0.5, 0.8, 1), (0.0, 0.0, 0)]




def test_score_rollouts_klcf(smol_tokenizer, tmp_path):
    example = QAExample("g", "What is the symbol of gold?", ["Au"], EVIDENCE)
    path = tmp_path / "checklist.json"
    path.write_text(json.dumps({"kind": CHECKLIST_KIND, "questions": {
        "g": {"checklist": ["Gold has the symbol Au", "Gold has atomic number 79"]}}}))
    config = Config()
    config.reward.method, config.rollout.group_size, config.klcf.checklist_path = "klcf", 2, str(path)
    rollout = rollout_from_texts(smol_tokenizer, ["Gold has the symbol Au.</think>\n<answer>Au</answer>", "Gold is Au."])
    scored = score_rollouts([example] * 2, rollout, smol_tokenizer, config, LexicalVerifier())
    # response 1: states 1 of 2 facts (recall 0.5); its one claim is supported (lexical score 1.0)
    assert scored.details[0]["recall"] == 0.5 and scored.details[0]["precision"] == pytest.approx(1.0)
    assert scored.rewards.tolist() == pytest.approx([1.5, -2.0])  # response 2 has no tags: format penalty
    assert scored.metrics["klcf_recall"] == pytest.approx((0.5 + 0.5) / 2)  # "Gold is Au." states the symbol fact too
    assert scored.metrics["klcf_empty_checklist_share"] == 0.0
    empty = score_rollouts([example] * 2, rollout, smol_tokenizer, config, LexicalVerifier(), tools=RewardTools(
        RuleBasedClaimExtractor(), checklists={}))
    assert empty.metrics["klcf_empty_checklist_share"] == 1.0 and empty.details[0]["recall"] == 0.0


def test_missing_checklist_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="klcf-checklist"):
        load_checklists(None)
    other = tmp_path / "filter.json"
    other.write_text(json.dumps({"kind": "filter", "questions": {}}))
    with pytest.raises(ValueError, match="not a KLCF checklist"):
        load_checklists(other)
    for text in ("", "{", "[1, 2]", "null", '"klcf-checklist"'):
        other.write_text(text)
        with pytest.raises(ValueError, match=r"filter\.json is not a KLCF checklist file"):
            load_checklists(other)
    other.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(ValueError, match="not JSON text"):
        load_checklists(other)


def test_the_settings_check_reads_the_checklist_before_any_model_loads(tmp_path):
    from fspo_lite.config import Config, ConfigError, apply_overrides
    from fspo_lite.scoring.plan import check_settings

    config = apply_overrides(Config(), {"reward.method": "klcf", "verifier.name": "lexical"})
    with pytest.raises(ConfigError, match="klcf.checklist_path=None does not exist"):
        check_settings(config)
    path = tmp_path / "checklists.json"
    path.write_text(json.dumps({"kind": "klcf-checklist", "questions": {"q1": {"checklist": ["Au is gold."]}}}))
    check_settings(apply_overrides(config, {"klcf.checklist_path": str(path)}))
    check_settings(apply_overrides(Config(), {"reward.method": "fspo"}))  # other methods read no file


def test_sequence_classifier_reward_model_on_a_tiny_local_model(tmp_path, smol_tokenizer):
    from transformers import LlamaForSequenceClassification

    from fspo_lite.models.policy import tiny_model_config

    torch.manual_seed(0)
    model = LlamaForSequenceClassification(tiny_model_config(len(smol_tokenizer), num_labels=1))
    model.save_pretrained(tmp_path)
    smol_tokenizer.save_pretrained(tmp_path)
    reward_model = SequenceClassifierRewardModel(str(tmp_path), batch_size=2)
    scores = reward_model.score(["Q1?", "Q2?", "Q3?"], ["short", "a longer answer here", "x"])
    assert len(scores) == 3 and all(isinstance(s, float) and s == s for s in scores)
    assert reward_model.score(["Q1?"], ["short"]) == pytest.approx(scores[:1], abs=1e-5)  # padding does not matter
