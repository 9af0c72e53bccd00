"""The difficulty filter, the system-prompt sweep and the KLCF checklist builder, on the cached base-model
sample-and-grade loop (fspo_lite.drivers.base_samples), driven by a fake sampler (no model):
selection rules by hand, the cache file format, resuming, and the commands."""

import json
from types import SimpleNamespace

import pytest

from fspo_lite.drivers import checklist as checklist_module
from fspo_lite.drivers import filtering, prompt_sweep
from fspo_lite.__main__ import main
from fspo_lite.config import load_config
from fspo_lite.scoring.methods.klcf import load_checklists
from fspo_lite.drivers.base_samples import QuestionStats
from fspo_lite.data.training_set import load_training_examples

QUESTIONS = {  # question -> the completions the fake model cycles through (after the "<think>" prefix)
    "Capital of France?": ["Paris is in France.</think><answer>Paris</answer>", "</think><answer>Lyon</answer>"],
    "Symbol of gold?": ["Gold has the symbol Au.</think><answer>Au</answer>"],
    "Tallest mountain on Mars?": ["</think><answer>Unknown</answer>", "</think><answer>Everest</answer>"],
    "Author of an unwritten book?": ["</think><answer>Smith</answer>"],
}
ANSWERS = {"Capital of France?": "Paris", "Symbol of gold?": "Au", "Tallest mountain on Mars?": "Olympus Mons",
           "Author of an unwritten book?": "nobody"}


class FakeEngine:
    """Cycles through canned completions per question; says Unknown to everything under a cautious prompt."""

    generation_batch_size = 4

    def __init__(self):
        self.prompts_seen = 0

    def generate(self, prompts, num_samples):
        texts = []
        for prompt in prompts:
            self.prompts_seen += 1
            question = next(q for q in QUESTIONS if q in prompt)
            replies = ["</think><answer>Unknown</answer>"] if "only when you are certain" in prompt else QUESTIONS[question]
            texts += [replies[i % len(replies)] for i in range(num_samples)]
        return SimpleNamespace(texts=texts)


@pytest.fixture
def fake_model(monkeypatch):
    engine = FakeEngine()
    calls = []

    def fake_base_engine(config, progress=False):
        calls.append(config.model.name)
        return engine, SimpleNamespace()  # a tokenizer without chat template: prompts are plain text

    for module in (filtering, prompt_sweep, checklist_module):
        monkeypatch.setattr(module, "base_engine", fake_base_engine)
    return SimpleNamespace(engine=engine, loads=calls)


@pytest.fixture
def config(tmp_path):
    data = tmp_path / "questions.jsonl"
    evidence = {"Symbol of gold?": "Gold has the symbol Au.", "Capital of France?": "Paris is the capital of France."}
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answer": ANSWERS[q], "evidence": evidence.get(q, "")}) + "\n"
                            for i, q in enumerate(QUESTIONS)))
    return load_config(None, [f"data.train={data}", "data.few_shot=0", f"filter.output={tmp_path / 'filter.json'}",
                              f"klcf.checklist_path={tmp_path / 'checklist.json'}"])


def test_select_questions_by_hand():
    stats = {
        "a": QuestionStats(4, 2, 0, 4),  # p = 0.5: variance 0.25
        "b": QuestionStats(4, 4, 0, 4),  # always right
        "c": QuestionStats(4, 0, 2, 4),  # never right, declines half the time: not-attempted variance 0.25
        "d": QuestionStats(4, 1, 0, 4),  # p = 0.25: variance 0.1875
        "e": QuestionStats(4, 0, 0, 4),  # never right, never declines
    }
    assert filtering.select_questions(stats) == ["a", "d"]
    assert filtering.select_questions(stats, top=3) == ["a", "c", "d"]  # c wins the tie with b and e
    assert filtering.select_questions(stats, top=1) == ["a"]
    assert filtering.select_questions(stats, band=[0.2, 0.8]) == ["a", "d"]
    assert filtering.select_questions(stats, band=[0.0, 0.0]) == ["c", "e"]
    with pytest.raises(ValueError, match="low <= high"):
        filtering.select_questions(stats, band=[0.8, 0.2])


def test_filter_writes_kept_ids_caches_and_feeds_the_trainer(config, fake_model, tmp_path):
    result = filtering.run_filter(config, samples=4, progress=False, command="test")
    assert {q: (s.correct, s.unknown) for q, s in result.stats.items()} == {
        "q0": (2, 0), "q1": (4, 0), "q2": (0, 2), "q3": (0, 0)}
    assert result.kept_ids == ["q0"] and result.kept_share == 0.25
    stored = json.loads((tmp_path / "filter.json").read_text())
    assert stored["kept_ids"] == ["q0"] and stored["kind"] == "difficulty-filter" and stored["command"] == "test"
    assert stored["questions"]["q2"] == {"samples": 4, "correct": 0, "unknown": 2, "format_ok": 4}
    # a rerun with another selection reads the cache: no model, no sampling
    again = filtering.run_filter(config, samples=4, top=2, progress=False)
    assert sorted(again.kept_ids) == ["q0", "q2"] and fake_model.loads == ["smollm2-135m"]
    assert fake_model.engine.prompts_seen == 4
    config.data.filter_path = str(again.path)
    assert sorted(e.id for e in load_training_examples(config)) == ["q0", "q2"]
    # other settings (k = 2) invalidate the cache
    filtering.run_filter(config, samples=2, progress=False)
    assert fake_model.engine.prompts_seen == 8


def test_filter_resumes_an_interrupted_run(config, fake_model, tmp_path):
    filtering.run_filter(config, samples=4, progress=False)
    stored = json.loads((tmp_path / "filter.json").read_text())
    del stored["questions"]["q1"], stored["questions"]["q3"]  # as if killed after the first batch
    (tmp_path / "filter.json").write_text(json.dumps(stored))
    seen = fake_model.engine.prompts_seen
    result = filtering.run_filter(config, samples=4, progress=False)
    assert fake_model.engine.prompts_seen - seen == 2 and len(result.stats) == 4


def test_filter_figure(config, fake_model, tmp_path):
    result = filtering.run_filter(config, samples=4, progress=False)
    path = filtering.plot_filter(result, tmp_path / "figures" / "filter.png")
    assert path.stat().st_size > 1000


def test_frontier_by_hand():
    R = prompt_sweep.PromptResult
    results = prompt_sweep.mark_frontier([
        R("careful", "", 10, 0.2, 0.6, 0.2, 1.0), R("mid", "", 10, 0.3, 0.3, 0.4, 1.0),
        R("worse", "", 10, 0.25, 0.2, 0.55, 1.0), R("bold", "", 10, 0.35, 0.0, 0.65, 1.0),
    ])
    assert [r.on_frontier for r in results] == [True, True, False, True]  # "worse" is beaten by "mid" on both


def test_sweep_runs_every_prompt_and_plots(config, fake_model, tmp_path):
    prompts = {"cautious": "Answer only when you are certain.", "plain": "Answer."}
    results = prompt_sweep.run_sweep(config, prompts, samples=2, cache_dir=tmp_path / "cache")
    by_name = {r.name: r for r in results}
    assert by_name["cautious"].not_attempted_rate == 1.0 and by_name["cautious"].correct_rate == 0.0
    # plain: q0 Paris/Lyon (1 of 2), q1 Au (2 of 2), q2 Unknown/Everest, q3 wrong: 3 correct, 1 unknown of 8
    assert (by_name["plain"].correct_rate, by_name["plain"].not_attempted_rate) == (3 / 8, 1 / 8)
    assert by_name["plain"].wrong_rate == pytest.approx(4 / 8)
    assert all(r.on_frontier for r in results)
    assert prompt_sweep.plot_frontier(results, tmp_path / "f.png").stat().st_size > 1000
    seen = fake_model.engine.prompts_seen
    prompt_sweep.run_sweep(config, prompts, samples=2, cache_dir=tmp_path / "cache")
    assert fake_model.engine.prompts_seen == seen  # cached


def test_load_prompts(tmp_path):
    assert list(prompt_sweep.load_prompts("builtin"))[0] == "very_cautious"
    (tmp_path / "p.json").write_text(json.dumps([{"name": "a", "prompt": "A."}]))
    (tmp_path / "p.txt").write_text("First.\n\nSecond.\n")
    assert prompt_sweep.load_prompts(str(tmp_path / "p.json")) == {"a": "A."}
    assert prompt_sweep.load_prompts(str(tmp_path / "p.txt")) == {"prompt1": "First.", "prompt2": "Second."}
    with pytest.raises(FileNotFoundError, match="builtin"):
        prompt_sweep.load_prompts(str(tmp_path / "missing.json"))


def test_klcf_checklist_builder(config, fake_model, tmp_path):
    path, checklists = checklist_module.build_checklist_file(config, samples=2, progress=False)
    assert checklists["q1"] == ["Gold has the symbol Au"]
    assert checklists["q0"] == ["Paris is in France"]  # supported by "Paris is the capital of France."
    assert checklists["q2"] == [] and checklists["q3"] == []  # no evidence, nothing to verify against
    assert load_checklists(path) == checklists
    stored = json.loads(path.read_text())
    assert len(stored["questions"]["q1"]["responses"]) == 2


def test_commands(config, fake_model, tmp_path, capsys):
    base = ["--set", f"data.train={config.data.train}", "--set", "data.few_shot=0"]
    assert main(["filter", *base, "--samples", "4", "--band", "0.4,1", "--output", str(tmp_path / "f.json"),
                 "--figure", str(tmp_path / "f.png")]) == 0
    assert "kept 2 of 4 questions (50.0%); train on them with --set data.filter_path=" in capsys.readouterr().out
    assert main(["filter", *base, "--samples", "4", "--band", "0.9,0.95", "--output", str(tmp_path / "f.json")]) == 0
    assert "kept 0 of 4 questions (0.0%); nothing to train on: widen --band" in capsys.readouterr().out
    assert main(["sweep-prompts", *base, "--samples", "2", "--results", str(tmp_path / "s.json"),
                 "--figure", str(tmp_path / "s.png"), "--cache-dir", str(tmp_path / "c")]) == 0
    stored = json.loads((tmp_path / "s.json").read_text())
    assert [p["name"] for p in stored["prompts"]] == list(prompt_sweep.BUILTIN_PROMPTS)
    assert stored["command"].startswith("python -m fspo_lite")
    assert main(["klcf-checklist", *base, "--samples", "2", "--output", str(tmp_path / "k.json")]) == 0
    assert "4 questions" in capsys.readouterr().out
