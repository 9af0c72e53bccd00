"""The verifier benchmark: loaders, per-verifier metrics, the table and the command."""

import json
import math

import pytest

from fspo_lite.__main__ import main
from fspo_lite.scoring.verifiers import LexicalVerifier
from fspo_lite.scoring.verifiers.base import Verifier
from fspo_lite.scoring.verifiers.benchmark import (GOLD_SET, HALUEVAL_SAMPLE, ClaimItem, ShortClaimBaseline, evaluate,
                                          halueval_claim, load_gold, load_halueval, results_table, run_benchmark)


class ScriptedVerifier(Verifier):
    name = "scripted"

    def __init__(self, values):
        super().__init__()
        self.values = values

    def _score(self, evidence, sentences):
        return [self.values[s] for s in sentences]


ITEMS = [ClaimItem("e", "a", True), ClaimItem("e", "b", True), ClaimItem("e", "c", False), ClaimItem("e", "d", False)]


def test_evaluate_by_hand():
    verifier = ScriptedVerifier({"a": 0.9, "b": None, "c": 0.6, "d": 0.1})
    result = evaluate(verifier, ITEMS, "toy", threshold=0.5, chosen_threshold=0.7)
    # None is scored at the threshold (0.5): scores 0.9, 0.5, 0.6, 0.1 -> predictions T F T F
    assert result.abstained == 1
    assert result.accuracy == pytest.approx(0.5) and result.balanced_accuracy == pytest.approx(0.5)
    assert result.auroc == pytest.approx(0.75)  # 0.9 beats both negatives, 0.5 beats only 0.1
    assert result.best_accuracy == pytest.approx(0.75)  # at 0.7: T F F F
    assert result.sentences_per_s > 0


def test_run_benchmark_chooses_the_threshold_on_train_only():
    train = [ClaimItem("e", "a", True), ClaimItem("e", "c", False)]
    verifier = ScriptedVerifier({"a": 0.9, "b": 0.8, "c": 0.6, "d": 0.1})
    [result] = run_benchmark({"scripted": verifier}, {"toy": ITEMS}, train, log=lambda _: None)
    assert 0.6 < result.best_threshold < 0.9
    assert math.isnan(run_benchmark({"s": ScriptedVerifier(verifier.values)}, {"toy": ITEMS}, log=lambda _: None)[0].best_threshold)
    table = results_table([result])
    assert table.count("\n") == 2 and "| scripted | toy | 4 | 0 |" in table


def test_halueval_claim_keeps_question_and_candidate():
    claim = halueval_claim(" Who wrote Moby-Dick? ", "Herman Melville ")
    assert claim == 'The answer to the question "Who wrote Moby-Dick?" is: Herman Melville'


def test_bundled_halueval_sample_loads():
    items = load_halueval(HALUEVAL_SAMPLE)
    assert len(items) == 200
    assert sum(not i.supported for i in items) == 94
    assert len(load_halueval(HALUEVAL_SAMPLE, limit=7)) == 7


def test_gold_set_is_complete_and_labeled():
    from fspo_lite.data.labeling import load_items

    gold = load_items(GOLD_SET)
    assert len(gold) >= 150
    assert all(item.label in ("supported", "unsupported", "not_checkable") for item in gold)
    items, not_checkable = load_gold(GOLD_SET)
    assert len(items) + not_checkable == len(gold)
    assert any(i.supported for i in items) and any(not i.supported for i in items)


def test_short_claim_baseline_prefers_short_claims():
    shorter, longer = ShortClaimBaseline().score(["e", "e"], ["Paris", "Paris is a big city in the north of France"])
    assert shorter > longer


def test_benchmark_command_prints_the_table(tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["verifiers", "benchmark", "--verifiers", "lexical,oracle", "--limit", "40", "--train-limit", "40",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "oracle: not available" in printed
    assert "| lexical | HaluEval-QA" in printed and "| lexical | gold" in printed
    rows = json.loads(out.read_text())
    assert {r["verifier"] for r in rows} == {"lexical", "baseline: shorter claim"}
    assert all(r["n"] > 0 for r in rows)


def test_lexical_beats_chance_on_the_gold_set():
    items, _ = load_gold(GOLD_SET)
    result = evaluate(LexicalVerifier(), items, "gold")
    assert result.auroc > 0.5
