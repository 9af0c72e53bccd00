"""The evaluation harness on the tiny model and on scripted responses: the MC scorer against a direct
computation, the evaluate() contract and its files, loaders and the CLI."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from fspo_lite.config import Config, load_config
from fspo_lite.data.examples import DataError, QAExample
from fspo_lite.evaluation import BENCHMARKS, evaluate, resolve
from fspo_lite.evaluation import harness, metrics as M
from fspo_lite.evaluation.benchmarks import halueval_items, load_items, truthfulqa_item
from fspo_lite.evaluation.mc import QA_PRIMER, PrefixScorer, qa_context, score_choices_direct
from fspo_lite.scoring.verifiers import LexicalVerifier

TINY = "configs/tiny.yaml"


def _pairs():
    """Contexts of different lengths with several choices each (long and one-token ones, in mixed order), and
    one context without the primer."""
    seeds, moon = qa_context("What happens if you eat watermelon seeds?"), qa_context(
        "Is the Moon made of cheese? Answer carefully, please.")
    return [(seeds, " Nothing happens"),
            (seeds, " You grow watermelons in your stomach"),
            (moon, " No."),
            ("An unrelated context without the primer:", " so it is scored without the cache"),
            (qa_context("Why?"), " Yes"),
            (moon, " Yes, it is made of green cheese from a very large cow"),
            (seeds, " X"),
            (qa_context("Why?"), " Because the sky is blue")]


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_prefix_scorer_matches_direct_computation(tiny_policy, batch_size):
    model, tokenizer = tiny_policy  # a PEFT model, as a caller evaluating a trained adapter passes
    pairs = _pairs()
    direct = score_choices_direct(model, tokenizer, pairs)
    cached = PrefixScorer(model, tokenizer, QA_PRIMER + "\n\nQ:", batch_size=batch_size).score(pairs)
    assert cached == pytest.approx(direct, abs=5e-5)  # float rounding only: a position off by one moves them 3e-4
    # the direct computation itself: sum of log-softmax of each continuation token, by hand for one pair
    context, continuation = pairs[2]
    ids = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    n_context = len(tokenizer(context, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    by_hand = sum(logp[t - 1, ids[t]].item() for t in range(n_context, len(ids)))
    assert direct[2] == pytest.approx(by_hand, abs=1e-4)


class _ScriptedContext:
    """A harness context whose 'model' replies with fixed texts, to check grading end to end."""

    def __init__(self, replies, samples=1, extra=()):
        self.config = Config()
        self.config.evaluation.samples = samples
        self.ev, self.data = self.config.evaluation, self.config.data
        self.tokenizer = SimpleNamespace(chat_template=None)
        self.replies = list(replies)
        self.extra = list(extra)

    def generate(self, prompts, max_new_tokens=None, samples=None):
        k = self.ev.samples if samples is None else samples
        assert len(self.replies) == len(prompts) * k
        return self.replies

    def verifier(self):
        return LexicalVerifier(), "lexical"

    def verifiers(self):
        return [self.verifier(), *self.extra]

    @property
    def last_token_counts(self):
        return [len(reply.split()) for reply in self.replies]


def test_short_qa_grades_decomposition_and_step_rate():
    items = [QAExample("a", "What is the capital of France?", ["Paris"], evidence="The capital of France is Paris."),
             QAExample("b", "What is the atomic number of iron?", ["26"], evidence="Iron has atomic number 26.")]
    replies = [  # the prompt ends with "<think>", so replies continue inside the reasoning
        " The capital of France is Paris.</think>\n<answer>Paris</answer>",
        " The capital of France is Lyon.</think>\n<answer>Lyon</answer>",
        " I am not sure.</think>\n<answer>Unknown</answer>",
        " no tags at all",
    ]
    rows, records = harness.run_short_qa(_ScriptedContext(replies, samples=2), "kbqa", items)
    values = {r["metric"]: r["value"] for r in rows}
    assert [r["grade"] for r in records] == [M.CORRECT, M.INCORRECT, M.NOT_ATTEMPTED, M.INCORRECT]
    assert values["correct"] == 0.25 and values["not_attempted"] == 0.25
    assert values["correct_given_attempted"] == pytest.approx(1 / 3)
    assert values["decomp_partial_correct"] == 50.0 and values["decomp_partial_not_attempt"] == 50.0
    assert values["em"] == 0.25 and values["format_rate"] == 0.75
    # lexical verifier: the "Paris" sentence is supported, the "Lyon" one is not
    assert records[0]["sentence_labels"] == [1] and records[1]["sentence_labels"] == [-1]
    labels = [label for r in records for label in r["sentence_labels"] if label]
    assert values["step_hallucination_rate"] == pytest.approx(labels.count(-1) / len(labels))
    assert records[0]["answer"] == "Paris" and records[3]["answer"] is None


class _AlwaysSupported:
    """A scripted second judge: every sentence supported."""

    def score(self, evidence, sentences, context=None):
        return [0.9] * len(sentences)


def test_short_qa_every_judge_reported_separately_with_per_response_counts():
    items = [QAExample("a", "What is the capital of France?", ["Paris"], evidence="The capital of France is Paris.")]
    replies = [" The capital of France is Lyon. The capital of France is lyon!</think>\n<answer>Lyon</answer>",
               " The capital of France is Paris.</think>\n<answer>Paris</answer>"]
    ctx = _ScriptedContext(replies, samples=2, extra=[(_AlwaysSupported(), "yes_judge")])
    rows, records = harness.run_short_qa(ctx, "kbqa", items)
    values = {r["metric"]: r["value"] for r in rows}
    # lexical: Lyon x2 unsupported, Paris supported -> 2 of 3 checkable unsupported; the second judge: none
    assert values["step_hallucination@lexical"] == pytest.approx(2 / 3)
    assert values["step_hallucination_rate"] == pytest.approx(2 / 3)
    assert values["step_hallucination@yes_judge"] == 0.0
    assert values["unsupported_per_response@lexical"] == 1.0 and values["supported_per_response@lexical"] == 0.5
    assert values["supported_per_response@yes_judge"] == 1.5 and values["checkable_per_response@yes_judge"] == 1.5
    assert values["sentences_per_response"] == 1.5
    assert records[0]["sentence_labels_by_judge"] == {"lexical": [-1, -1], "yes_judge": [1, 1]}
    assert records[0]["sentence_labels"] == [-1, -1]
    # the second Lyon sentence repeats the first: one near-duplicate in response 0, none in response 1
    assert [r["near_duplicate_sentences"] for r in records] == [1, 0]
    assert values["near_duplicates_per_response"] == 0.5
    assert [r["response_tokens"] for r in records] == [len(t.split()) for t in replies]
    a, b = records[0]["sentence_spans"][0]
    assert records[0]["output"][a:b] == "The capital of France is Lyon."


def test_math_pass_at_k_and_answer_fallback():
    items = [QAExample("m1", "2+2?", ["4"], task="math"), QAExample("m2", "Half of 1?", ["\\frac{1}{2}"], task="math")]
    replies = [" 2+2 = 4.</think><answer>4</answer>", " so the total is 4", " it is 0.5", " <answer>1/3</answer>"]
    rows, records = harness.run_math(_ScriptedContext(replies, samples=2), "gsm8k", items)
    values = {r["metric"]: r["value"] for r in rows}
    assert [r["grade"] for r in records] == [M.CORRECT, M.CORRECT, M.CORRECT, M.INCORRECT]
    assert records[1]["answer"] == "4"  # no tags: the last number of the response
    assert values["pass@1"] == pytest.approx(0.75)  # (2/2 + 1/2) / 2
    assert values["pass@2"] == pytest.approx(1.0)


def test_halueval_runner_counts_unparsable_replies_as_wrong():
    items = halueval_items([{"question": "q", "candidate": "a", "candidate_is_hallucinated": True}] * 2
                           + [{"question": "q", "candidate": "b", "candidate_is_hallucinated": False}] * 2, seed=0)
    rows, records = harness.run_halueval(_ScriptedContext(["Yes.", "Yes and no", "No", "Sure"]), "halueval", items)
    values = {r["metric"]: r["value"] for r in rows}
    assert values["accuracy"] == 0.5 and values["invalid_rate"] == 0.5 and values["yes_rate"] == 0.25
    assert values["accuracy_hallucinated"] == 0.5 and values["accuracy_right"] == 0.5
    assert [r["answer"] for r in records] == ["Yes", None, "No", None]


def test_halueval_candidate_draw_is_seeded():
    rows = [{"question": f"q{i}", "right_answer": "r", "hallucinated_answer": "h"} for i in range(40)]
    first, again, other = halueval_items(rows, 0), halueval_items(rows, 0), halueval_items(rows, 1)
    assert [i.candidate for i in first] == [i.candidate for i in again]
    assert [i.candidate for i in first] != [i.candidate for i in other]
    assert all((i.candidate == "h") == i.is_hallucinated for i in first)
    assert 5 < sum(i.is_hallucinated for i in first) < 35


def test_truthfulqa_rows_both_formats_and_errors():
    item = truthfulqa_item({"question": "q", "best_answer": "b", "correct_answers": ["c"],
                            "incorrect_answers": ["x", "y"]}, 0)
    assert item.correct_answers == ["b", "c"] and item.mc1_incorrect == ["x", "y"]
    hub = truthfulqa_item({"question": "q", "mc1_targets": {"choices": ["b", "x"], "labels": [1, 0]},
                           "mc2_targets": {"choices": ["b", "c", "x", "y"], "labels": [1, 1, 0, 0]}}, 3)
    assert (hub.best_answer, hub.correct_answers, hub.incorrect_answers, hub.mc1_incorrect) == (
        "b", ["b", "c"], ["x", "y"], ["x"])
    with pytest.raises(DataError, match="incorrect_answers"):
        truthfulqa_item({"question": "q", "best_answer": "b", "correct_answers": ["c"]}, 7)


def test_sources_resolve_in_order(tmp_path):
    empty = tmp_path / "empty"
    assert resolve("truthfulqa_mc", folder=empty) == "bundled:truthfulqa_sample"
    assert resolve("truthfulqa_mc", {"truthfulqa_mc": "x.jsonl"}, folder=tmp_path) == "x.jsonl"
    (tmp_path / "truthfulqa.jsonl").write_text("{}\n")  # the data folder's full file comes before the sample
    assert resolve("truthfulqa_mc", folder=tmp_path) == str(tmp_path / "truthfulqa.jsonl")
    (tmp_path / "gsm8k_test.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    assert resolve("gsm8k", folder=tmp_path) == str(tmp_path / "gsm8k_test.jsonl")
    assert resolve("gsm8k", folder=tmp_path / "missing") == BENCHMARKS["gsm8k"].hub
    with pytest.raises(DataError, match="data prepare halluqa"):
        resolve("halluqa", folder=tmp_path)
    examples = load_items("gsm8k", str(tmp_path / "gsm8k_test.jsonl"))
    assert examples[0].task == "math" and examples[0].answers == ["2"]


def test_bundled_truthfulqa_sample_loads():
    items = load_items("truthfulqa_mc", "bundled:truthfulqa_sample")
    assert len(items) == 100 and all(i.best_answer in i.correct_answers and i.incorrect_answers for i in items)


def test_evaluate_contract_on_tiny_model(tmp_path, tiny_policy):
    config = load_config(TINY, {"evaluation.benchmarks": "kbqa,truthfulqa_mc,truthfulqa_gen,halueval",
                                "evaluation.limit": 2, "evaluation.samples": 2, "evaluation.temperature": 1.0,
                                "evaluation.max_new_tokens": 8, "evaluation.judge": "overlap",
                                "evaluation.step_verifier": "lexical", "evaluation.output_dir": str(tmp_path)})
    model, tokenizer = tiny_policy
    result = evaluate(config, model, tokenizer, progress=False)
    table = result.table
    assert list(table.columns) == ["benchmark", "metric", "value", "n", "by"]
    assert set(table.benchmark) == {"kbqa", "truthfulqa_mc", "truthfulqa_gen", "halueval"}
    decomposition = table[table.metric.str.startswith("decomp_")].value.sum()
    assert decomposition == pytest.approx(100.0)
    assert table.set_index(["benchmark", "metric"]).loc[("truthfulqa_gen", "truthful_ratio"), "by"].startswith(
        "judge: overlap")
    kbqa_records = [r for r in result.records if r["benchmark"] == "kbqa"]
    assert len(kbqa_records) == 4 and {"prompt", "output", "answer", "grade"} <= set(kbqa_records[0])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"]["evaluation"]["samples"] == 2 and summary["benchmarks"]["kbqa"]["items"] == 2
    assert summary["benchmarks"]["truthfulqa_mc"]["by"]["mc2"].startswith("summed choice log-likelihood")
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == len(result.records)
    assert (tmp_path / "table.csv").read_text().startswith("benchmark,metric,value,n,by")
    mc2 = summary["benchmarks"]["truthfulqa_mc"]["metrics"]["mc2"]
    assert 0.0 <= mc2 <= 1.0 and not math.isnan(mc2)


def test_evaluate_extra_judges_on_tiny_model(tmp_path, tiny_policy):
    """evaluation.extra_step_verifiers: each judge's labels per record, its own rates in summary.json."""
    config = load_config(TINY, {"evaluation.benchmarks": "kbqa", "evaluation.limit": 2, "evaluation.samples": 2,
                                "evaluation.temperature": 1.0, "evaluation.max_new_tokens": 24,
                                "evaluation.step_verifier": "lexical", "evaluation.extra_step_verifiers": "embedding",
                                "evaluation.output_dir": str(tmp_path)})
    result = evaluate(config, *tiny_policy, progress=False)
    metrics = json.loads((tmp_path / "summary.json").read_text())["benchmarks"]["kbqa"]["metrics"]
    for judge in ("lexical", "embedding"):
        assert f"step_hallucination@{judge}" in metrics and f"supported_per_response@{judge}" in metrics
    for record in result.records:
        labels = record["sentence_labels_by_judge"]
        assert set(labels) == {"lexical", "embedding"} and labels["lexical"] == record["sentence_labels"]
        assert len(labels["embedding"]) == len(record["sentence_spans"])
        assert 0 < record["response_tokens"] <= 24


def test_evaluate_rejects_bad_settings():
    with pytest.raises(ValueError, match="temperature"):  # now refused by load_config already (ConfigError)
        evaluate(load_config(TINY, {"evaluation.samples": 3}))
    with pytest.raises(ValueError, match="unknown benchmark"):
        evaluate(load_config(TINY, {"evaluation.benchmarks": "truthfulqa"}))


def test_eval_command_line(tmp_path, capsys):
    from fspo_lite.__main__ import main

    assert main(["eval", "--config", TINY, "--benchmarks", "halueval,multihop", "--limit", "2", "--quiet",
                 "--output", str(tmp_path), "--set", "evaluation.max_new_tokens=4",
                 "--set", "evaluation.step_verifier=lexical", "--source", "multihop=bundled:multihop_train"]) == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "step_hallucination_rate" in out
    assert json.loads((tmp_path / "summary.json").read_text())["benchmarks"]["multihop"]["source"] == (
        "bundled:multihop_train")
    assert json.loads((tmp_path / "summary.json").read_text())["command"].startswith("python -m fspo_lite")


def test_similarity_judge_on_clear_cases():
    from fspo_lite.evaluation.judges import SimilarityJudge

    judge = SimilarityJudge(device="cpu")
    verdicts = judge.judge(["What happens if you eat watermelon seeds?"] * 2,
                           ["The seeds just pass through your digestive system.", "A watermelon grows in your belly."],
                           [["The watermelon seeds pass through your digestive system"]] * 2,
                           [["You grow watermelons in your stomach"]] * 2)
    assert [v["truthful"] for v in verdicts] == [True, False]


def test_llm_judge_reads_yes_no_replies():
    from fspo_lite.evaluation.judges import LLMJudge

    class Chat:
        def generate(self, prompts, max_new_tokens=8):
            return ["Yes." if "Answer to judge: right" in p else "No" if "Answer to judge" in p else "maybe"
                    for p in prompts]

    verdicts = LLMJudge(Chat()).judge(["q", "q"], ["right", "wrong"], [["right"]] * 2, [["wrong"]] * 2)
    assert verdicts == [{"truthful": True, "informative": False}, {"truthful": False, "informative": False}]


def test_truthfulqa_sample_rebuilds_from_the_shared_file(tmp_path):
    from conftest import load_script, shared_file

    build_truthfulqa_sample = load_script("data_build").build_truthfulqa_sample
    from fspo_lite.data.examples import DATA_DIR

    build_truthfulqa_sample(shared_file("truthfulqa.jsonl"), tmp_path)
    assert (tmp_path / "truthfulqa_sample.jsonl").read_bytes() == (DATA_DIR / "truthfulqa_sample.jsonl").read_bytes()


def test_generation_sorted_by_length_returns_prompt_order():
    class Engine:
        def generate(self, prompts, k, do_sample, max_new_tokens):
            self.seen = list(prompts)
            texts = [f"{p}|{j}" for p in prompts for j in range(k)]
            return SimpleNamespace(texts=texts, completion_mask=torch.ones(len(texts), 2))

    ctx = harness._Context.__new__(harness._Context)
    ctx.ev, ctx.engine, ctx.tokens = Config().evaluation, Engine(), 0
    prompts = ["ccc", "a", "bb"]
    assert ctx.generate(prompts, samples=2) == ["ccc|0", "ccc|1", "a|0", "a|1", "bb|0", "bb|1"]
    assert ctx.engine.seen == ["a", "bb", "ccc"] and ctx.tokens == 12


def test_shuffled_subset_is_seeded_and_spans_the_file():
    spec = resolve("kbqa", {"kbqa": "bundled:kbqa_test"})
    prefix = load_items("kbqa", spec, limit=10)
    drawn, again = load_items("kbqa", spec, 10, seed=0, shuffle=True), load_items("kbqa", spec, 10, 0, True)
    assert [e.id for e in drawn] == [e.id for e in again] != [e.id for e in prefix]
    assert len({e.extra["category"] for e in drawn}) > len({e.extra["category"] for e in prefix})
    rows = load_items("truthfulqa_mc", "bundled:truthfulqa_sample", 5, seed=1, shuffle=True)
    assert len(rows) == 5 and [r.id for r in rows] != [r.id for r in load_items("truthfulqa_mc",
                                                                                 "bundled:truthfulqa_sample", 5)]


def test_shuffled_subsets_keep_file_row_ids(tmp_path):
    rows = [{"question": f"q{i}", "candidate": f"c{i}", "candidate_is_hallucinated": i % 2 == 0} for i in range(30)]
    path = tmp_path / "halueval.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    picked = load_items("halueval", str(path), limit=5, seed=3, shuffle=True)
    assert [i.question for i in picked] != [f"q{n}" for n in range(5)]  # a random draw, not the prefix
    assert all(item.id == f"halueval-{item.question[1:]}" for item in picked)  # the id names the file row
    assert all(item.candidate == f"c{item.question[1:]}" for item in picked)
    assert [i.id for i in load_items("halueval", str(path), limit=3)] == ["halueval-0", "halueval-1", "halueval-2"]


@pytest.mark.parametrize("data_shows, evaluation_shows, expected", [
    (False, None, False), (True, None, True), (False, True, True), (True, False, False)])
def test_held_out_prompts_show_the_evidence_as_evaluation_says_else_as_training(tmp_path, tiny_policy, data_shows,
                                                                                evaluation_shows, expected):
    """evaluation.evidence_in_prompt: null keeps training's prompts (data.evidence_in_prompt); true/false overrides
    them for the held-out questions only, e.g. a closed-book adapter asked with the evidence shown."""
    config = load_config(TINY, {"data.evidence_in_prompt": data_shows, "evaluation.evidence_in_prompt": evaluation_shows,
                                "evaluation.benchmarks": "kbqa", "evaluation.limit": 2, "evaluation.max_new_tokens": 2,
                                "evaluation.step_verifier": "lexical", "evaluation.output_dir": str(tmp_path)})
    records = evaluate(config, *tiny_policy, progress=False).records
    evidence = {e.id: e.evidence for e in load_items("kbqa", config.data.eval, 2, 0, False)}
    assert len(records) == 2 and all(evidence[r["id"]] for r in records)
    assert all((evidence[r["id"]] in r["prompt"]) == expected for r in records)


def test_evidence_in_prompt_of_the_evaluation_refuses_what_is_not_a_switch():
    with pytest.raises(Exception, match="evaluation.evidence_in_prompt"):
        load_config(TINY, {"evaluation.evidence_in_prompt": "sometimes"})
