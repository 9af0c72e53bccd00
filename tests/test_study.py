"""The study's resumable runs (fspo_lite.drivers.runs: run_key, train_and_evaluate, evaluate_base), its profile
tools (parameter overrides, local benchmark copies) and portable recorded commands. Tiny random model: about
half a minute on 2 idle CPU cores."""

import json
import os
from pathlib import Path

import pytest

from fspo_lite.models import policy as models
from fspo_lite.update import trainer as trainer_module
from fspo_lite.__main__ import _portable_argument
from fspo_lite.data.examples import DATA_DIR, load_examples, portable_spec
from fspo_lite.config import Config
from fspo_lite.drivers.experiment import ROOT, load_profile, local_sources, only_notebooks, override_parameters
from fspo_lite.drivers.runs import (changed_settings, evaluate_base, finished_record, run_config, run_key,
                                    source_identity, train_and_evaluate)

SHARED = {"model.name": "tiny", "data.train": "bundled:kbqa_train", "rollout.group_size": 2,
          "rollout.max_new_tokens": 4, "train.steps": 2, "train.prompts_per_step": 1, "train.micro_batch_size": 2,
          "train.save_every": 1, "verifier.name": "lexical", "evaluation.benchmarks": ["kbqa"], "evaluation.limit": 1,
          "evaluation.samples": 2, "evaluation.temperature": 0.7, "evaluation.max_new_tokens": 4,
          "evaluation.step_verifier": "lexical"}


@pytest.fixture(scope="module")
def questions():
    return load_examples("bundled:kbqa_train", limit=3)


def same(a: dict, b: dict) -> bool:
    """Equal, NaN included (a judge with nothing to check gives NaN)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def steps_logged(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_rerun_skips_a_finished_run_and_redoes_one_with_other_settings(tmp_path, questions, monkeypatch):
    first = train_and_evaluate(SHARED, "grpo", 0, tmp_path, questions, progress=False)
    assert first["status"] == "trained" and first["method"] == "grpo"
    heldout = tmp_path / "grpo_s0" / "heldout.json"
    written = heldout.read_text()

    class NoTraining:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a finished run was trained again")

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module, "Trainer", NoTraining)
        again = train_and_evaluate(SHARED, "grpo", 0, tmp_path, questions, progress=False)
    assert again["status"] == "skipped" and heldout.read_text() == written
    assert same(again["metrics"], first["metrics"]) and again["last_reward"] == first["last_reward"]

    changed = train_and_evaluate({**SHARED, "train.learning_rate": 1e-3}, "grpo", 0, tmp_path, questions,
                                 progress=False)
    assert changed["status"] == "trained" and changed["settings_key"] != first["settings_key"]
    assert steps_logged(tmp_path / "grpo_s0") == [1, 2]  # the old run's rows were removed, not appended to


def test_a_run_cut_off_during_training_resumes_from_its_checkpoint(tmp_path, questions, monkeypatch):
    calls = {"n": 0}
    original = trainer_module.Trainer.train_step

    def dies_on_the_second_step(self):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("session over")
        return original(self)

    closed = []
    close = trainer_module.Trainer.close

    def recorded_close(self):
        closed.append(self.engine is not None)
        close(self)

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module.Trainer, "train_step", dies_on_the_second_step)
        patch.setattr(trainer_module.Trainer, "close", recorded_close)
        with pytest.raises(KeyboardInterrupt):
            train_and_evaluate(SHARED, "fspo", 0, tmp_path, questions, progress=False)
    run_dir = tmp_path / "fspo_s0"
    assert steps_logged(run_dir) == [1] and not (run_dir / "heldout.json").exists()
    assert closed == [True]  # the cut-off trainer's engine ended too (notebook 03 runs the next one in this kernel)
    resumed = train_and_evaluate(SHARED, "fspo", 0, tmp_path, questions, progress=False)
    assert resumed["status"] == "resumed" and steps_logged(run_dir) == [1, 2]  # step 1 from the checkpoint
    # that the resumed run equals the uninterrupted one is the trainer's guarantee (tests/test_resume_after_kill.py)


def test_an_attempt_cut_off_before_its_first_checkpoint_starts_over(tmp_path, questions):
    config = run_config(SHARED, "grpo", 1, tmp_path)
    run_dir = Path(config.train.output_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "run_settings.json").write_text(json.dumps({"settings_key": run_key(config, questions)}))
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.0}) + "\n")
    record = train_and_evaluate(SHARED, "grpo", 1, tmp_path, questions, progress=False)
    assert record["status"] == "trained" and steps_logged(run_dir) == [1, 2]


def test_base_evaluation_is_read_back_when_made_with_the_same_settings(tmp_path, monkeypatch):
    config = run_config(SHARED, "grpo", 0, tmp_path)
    first = evaluate_base(config, tmp_path)
    assert first["method"] == "base" and (tmp_path / "base" / "heldout.json").exists()
    # the CPU that made it: runs of one study may come from several machines (scripts/keep_finished_runs.py)
    assert "cores, torch CPU capability " in json.loads((tmp_path / "base" / "heldout.json").read_text())["machine"]

    def no_model(*args, **kwargs):
        raise AssertionError("the base model was evaluated again")

    monkeypatch.setattr(models, "load_policy", no_model)
    other_method = run_config(SHARED, "caution", 3, tmp_path)  # training settings do not touch the base model
    assert same(evaluate_base(other_method, tmp_path)["metrics"], first["metrics"])
    with pytest.raises(AssertionError, match="evaluated again"):
        evaluate_base(run_config({**SHARED, "evaluation.samples": 3}, "grpo", 0, tmp_path), tmp_path)


def test_run_key_ignores_output_folders_and_resume_switches(tmp_path, questions):
    a = run_config(SHARED, "grpo", 0, tmp_path / "a")
    b = run_config({**SHARED, "train.resume": True, "train.save_every": 5}, "grpo", 0, tmp_path / "b")
    assert run_key(a, questions) == run_key(b, questions)
    assert run_key(a, questions) != run_key(run_config(SHARED, "grpo", 1, tmp_path), questions)
    assert run_key(a, questions) != run_key(a, questions[:1])
    assert run_key(a, sections=("model",)) == run_key(run_config(SHARED, "fspo", 2, tmp_path), sections=("model",))


def test_run_key_counts_a_local_evaluation_file_by_content_not_by_folder(tmp_path, questions):
    """The same TruthfulQA copy in two folders keys the same run; one changed byte keys another."""
    rows = '{"question": "q", "mc1_targets": {"a": 1}}\n'
    for folder in ("here", "elsewhere", "edited"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "truthfulqa.jsonl").write_text(rows if folder != "edited" else rows.replace("q", "Q"))
    keys = {folder: run_key(run_config({**SHARED, "evaluation.sources.truthfulqa_mc":
                                        str(tmp_path / folder / "truthfulqa.jsonl")}, "grpo", 0, tmp_path), questions)
            for folder in ("here", "elsewhere", "edited")}
    assert keys["here"] == keys["elsewhere"] != keys["edited"]
    by_path = [run_key(run_config({**SHARED, "evaluation.sources.truthfulqa_mc": str(tmp_path / folder /
                                   "truthfulqa.jsonl")}, "grpo", 0, tmp_path), questions, by_content=False)
               for folder in ("here", "elsewhere")]
    assert by_path[0] != by_path[1]  # the older form: the path itself
    assert source_identity(str(tmp_path / "here" / "truthfulqa.jsonl")).startswith("truthfulqa.jsonl sha256:")
    for spec in ("bundled:kbqa_test", "data:truthfulqa", "hf:truthful_qa", str(tmp_path / "missing.jsonl")):
        assert source_identity(spec) == spec


def test_a_run_keyed_by_path_is_accepted_and_rekeyed(tmp_path):
    """finished_record: a heldout.json written with the older, path-based key is the run's (re-keyed in place);
    a record with any other key is not."""
    run_dir = tmp_path / "grpo_s0"
    run_dir.mkdir()
    record = {"method": "grpo", "seed": 0, "settings_key": "path0000", "metrics": {"kbqa.em": 0.5}}
    (run_dir / "heldout.json").write_text(json.dumps(record, indent=1))
    (run_dir / "run_settings.json").write_text(json.dumps({"settings_key": "path0000"}))
    assert finished_record(run_dir, "content1", "other999") is None
    assert finished_record(run_dir, "content1") is None
    found = finished_record(run_dir, "content1", "path0000")
    assert found["metrics"] == {"kbqa.em": 0.5} and found["settings_key"] == "content1"
    assert json.loads((run_dir / "heldout.json").read_text())["settings_key"] == "content1"
    assert json.loads((run_dir / "run_settings.json").read_text()) == {"settings_key": "content1"}
    assert finished_record(run_dir, "content1")["settings_key"] == "content1"  # now found by the new key alone


def test_changed_settings_keeps_only_what_differs_from_the_defaults():
    defaults = {"a": {"x": 1, "y": [1, 2]}, "b": {"z": None}, "c": 0.5}
    assert changed_settings({"a": {"x": 1, "y": [1, 2]}, "b": {"z": None}, "c": 0.5}, defaults) == {}
    assert changed_settings({"a": {"x": 2, "y": [1, 2]}, "b": {"z": None}, "c": 0.5}, defaults) == {"a": {"x": 2}}
    assert changed_settings({"a": {"x": 1, "y": [2, 1]}, "b": {"z": "s"}, "c": 1}, defaults) == {
        "a": {"y": [2, 1]}, "b": {"z": "s"}, "c": 1}
    assert changed_settings({"new": {"k": 3}}, defaults) == {"new": {"k": 3}}  # not in the defaults: kept


def test_a_setting_at_its_default_does_not_change_the_run_key(tmp_path, questions, monkeypatch):
    """A knob added to the config later (at its default) must not make finished runs look unfinished."""
    plain = run_config(SHARED, "fspo", 0, tmp_path)
    key = run_key(plain, questions)
    to_dict = Config.to_dict

    def with_a_new_knob(self):
        settings = to_dict(self)
        settings["detail"]["added_later"] = 0.0
        return settings

    monkeypatch.setattr(Config, "to_dict", with_a_new_knob)
    assert run_key(plain, questions) == key
    monkeypatch.undo()
    at_default = run_config({**SHARED, "detail.weight": Config().detail.weight}, "fspo", 0, tmp_path)
    assert run_key(at_default, questions) == key
    assert run_key(run_config({**SHARED, "detail.weight": 0.3}, "fspo", 0, tmp_path), questions) != key
    assert "detail" not in changed_settings(plain.to_dict(), Config().to_dict())


def test_local_sources_use_the_copies_present_and_say_so(tmp_path):
    (tmp_path / "truthfulqa.jsonl").write_text("{}\n")
    (tmp_path / "halueval_qa_test.jsonl").write_text("{}\n")
    sources, used = local_sources(["truthfulqa_mc"], tmp_path)
    assert sources["truthfulqa_mc"] == os.path.relpath(tmp_path / "truthfulqa.jsonl", ROOT)
    assert used["truthfulqa_mc"].startswith("local copy")
    # a benchmark not listed reads its bundled sample even when the data folder has its file
    assert sources["halueval"] == "bundled:halueval_qa_sample" and sources["kbqa"] == "bundled:kbqa_test"
    sources, used = local_sources(["truthfulqa_mc", "halueval"], tmp_path / "empty")
    assert sources["truthfulqa_mc"] == "bundled:truthfulqa_sample"
    assert all(text.startswith("bundled sample") for text in used.values()) and set(used) == {"truthfulqa_mc", "halueval"}


def test_local_data_must_name_benchmarks_with_a_data_file(tmp_path):
    (tmp_path / "p.yaml").write_text("local_data: [kbqa]\nnotebooks: []\n")
    with pytest.raises(ValueError, match="local_data must list benchmarks"):
        load_profile(str(tmp_path / "p.yaml"))


def test_profile_parameter_overrides():
    study = load_profile("study")
    assert study.local_data and dict(study.notebooks)["03_train_fspo.ipynb"]["seeds"] == [0, 1, 2, 3, 4]
    small = override_parameters(study, ["03.seeds=[0]", "03_train_fspo.ipynb.model=tiny",
                                        "03.overrides.evaluation.limit=2", "01.limit=1"])
    parameters = dict(small.notebooks)["03_train_fspo.ipynb"]
    assert parameters["seeds"] == [0] and parameters["model"] == "tiny"
    assert parameters["overrides"]["evaluation.limit"] == 2
    assert parameters["overrides"]["evaluation.batch_size"] == dict(study.notebooks)["03_train_fspo.ipynb"][
        "overrides"]["evaluation.batch_size"]  # the other overrides stay
    assert dict(study.notebooks)["03_train_fspo.ipynb"]["seeds"] == [0, 1, 2, 3, 4]  # the profile is not changed
    for bad in ("seeds=[0]", "03seeds=1", "99.seeds=[0]", "0.seeds=[0]"):
        with pytest.raises(ValueError, match="profile override"):
            override_parameters(study, [bad])


def test_only_some_notebooks_of_a_profile_run_in_its_order():
    study = load_profile("study")
    assert only_notebooks(study, None) == only_notebooks(study, []) == study
    report = only_notebooks(study, ["04"])
    assert [name for name, _ in report.notebooks] == ["04_results.ipynb"]
    assert dict(report.notebooks)["04_results.ipynb"] == dict(study.notebooks)["04_results.ipynb"]
    both = only_notebooks(study, ["04_results.ipynb", "03"])
    assert [name for name, _ in both.notebooks] == ["03_train_fspo.ipynb", "04_results.ipynb"]
    assert report.name == study.name and report.local_data == study.local_data  # recorded as the study's own
    for bad in (["05"], ["04", "4"], [""], ["03_train"]):
        with pytest.raises(ValueError, match="--only .*runs no such notebook; it runs 01_"):
            only_notebooks(study, bad)


def test_recorded_paths_are_portable(tmp_path):
    inside = str(ROOT / "data" / "kbqa_test.jsonl")
    assert portable_spec(inside) == "data/kbqa_test.jsonl"
    copy = tmp_path / "kbqa_train.jsonl"
    copy.write_bytes((DATA_DIR / "kbqa_train.jsonl").read_bytes())
    assert portable_spec(str(copy)) == "bundled:kbqa_train"
    copy.write_text("{}\n")  # same name, other content: kept as it is
    assert portable_spec(str(copy)) == str(copy)
    for unchanged in ("bundled:kbqa_train", "hf:truthful_qa", "data/x.jsonl", "", "/no/such/file.jsonl"):
        assert portable_spec(unchanged) == unchanged
    assert _portable_argument(f"data.train={inside}") == "data.train=data/kbqa_test.jsonl"
    assert _portable_argument(inside) == "data/kbqa_test.jsonl"
    assert _portable_argument("--samples") == "--samples"
    assert _portable_argument("train.steps=2") == "train.steps=2"


def test_results_go_where_notebook_04_writes_them(tmp_path):
    from fspo_lite.drivers.experiment import record_timings, results_folder

    assert results_folder(load_profile("study"), tmp_path) == tmp_path / "results" / "study"
    assert results_folder(load_profile("quick"), tmp_path) == tmp_path / "results"
    folder = tmp_path / "results" / "study"
    folder.mkdir(parents=True)
    summary = record_timings(folder, "study", {"03_train_fspo.ipynb": 12.0}, 12.5,
                             {"halueval": "bundled sample (no data folder)"})
    assert summary["job"]["benchmark_data"] == {"halueval": "bundled sample (no data folder)"}
    assert "Benchmark data: halueval: bundled sample" in (folder / "summary.md").read_text()
    assert "benchmark_data" not in record_timings(folder, "lite", {}, 1.0)["job"]
    typed = "python -m fspo_lite lite --profile study --only 04"
    assert record_timings(folder, "study", {"04_results.ipynb": 3.0}, 3.0, command=typed)["job"]["command"] == typed


# ---- named arms (e.g. FSPO with the detail term) -----------------------------------------------------
DETAIL_ARM = {"fspo+detail": {"reward.method": "fspo", "detail.weight": 0.2}}


def test_a_named_arm_sets_its_keys_and_leaves_the_other_arms_alone(tmp_path, questions):
    from fspo_lite.drivers.runs import arm_overrides

    assert arm_overrides("caution+fspo", DETAIL_ARM) == {"reward.method": "caution+fspo"}
    assert arm_overrides("fspo+detail", DETAIL_ARM) == DETAIL_ARM["fspo+detail"]
    with pytest.raises(ValueError, match="must set reward.method"):
        arm_overrides("x", {"x": {"detail.weight": 0.2}})
    arm = run_config(SHARED, "fspo+detail", 0, tmp_path, arms=DETAIL_ARM)
    assert (arm.reward.method, arm.detail.weight) == ("fspo", 0.2)
    assert arm.train.output_dir == str(tmp_path / "fspo_detail_s0")
    fspo = run_config(SHARED, "fspo", 0, tmp_path, arms=DETAIL_ARM)
    assert fspo.detail.weight == 0.0
    # defining an arm changes no other arm's settings, so runs finished before it was added stay finished
    for method in ("grpo", "fspo", "caution"):
        assert run_key(run_config(SHARED, method, 0, tmp_path, arms=DETAIL_ARM), questions) == run_key(
            run_config(SHARED, method, 0, tmp_path), questions)
    assert run_key(arm, questions) != run_key(fspo, questions)


def test_the_study_profile_defines_its_detail_arm():
    parameters = dict(load_profile("study").notebooks)["03_train_fspo.ipynb"]
    assert "fspo+detail" in parameters["methods"] and "fspo+detail" in parameters["arms"]
    config = run_config({**SHARED, **parameters["overrides"]}, "fspo+detail", 0, "runs", arms=parameters["arms"])
    assert config.reward.method == "fspo" and config.detail.weight > 0
    assert "fspo+detail" in dict(load_profile("study").notebooks)["04_results.ipynb"]["order"]


def test_a_named_arm_trains_records_its_name_and_resumes(tmp_path, questions, monkeypatch):
    first = train_and_evaluate(SHARED, "fspo+detail", 0, tmp_path, questions, progress=False, arms=DETAIL_ARM)
    run_dir = tmp_path / "fspo_detail_s0"
    assert first["status"] == "trained" and first["method"] == "fspo+detail"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("detail_bonus_mean" in row for row in rows)

    class NoTraining:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(trainer_module, "Trainer", NoTraining)
    again = train_and_evaluate(SHARED, "fspo+detail", 0, tmp_path, questions, progress=False, arms=DETAIL_ARM)
    assert again["status"] == "skipped"


@pytest.mark.long  # several processes for 10-20 s: make test-long (CI runs it after make test)
def test_runs_in_worker_processes_give_the_same_records_as_runs_in_a_row(tmp_path, questions):
    from fspo_lite.drivers.runs import train_and_evaluate_all

    ended = []
    in_a_row = train_and_evaluate_all(SHARED, ["grpo", "fspo"], [0], tmp_path / "a", questions, workers=1)
    side_by_side = train_and_evaluate_all(SHARED, ["grpo", "fspo"], [0], tmp_path / "b", questions, workers=2,
                                          on_finish=ended.append)
    assert [(r["method"], r["seed"]) for r in side_by_side] == [("grpo", 0), ("fspo", 0)]
    assert sorted((r["method"], r["seed"]) for r in ended) == [("fspo", 0), ("grpo", 0)]
    for a, b in zip(in_a_row, side_by_side):
        assert b["status"] == "trained" and same(a["metrics"], b["metrics"]) and a["last_reward"] == b["last_reward"]
    for run in ("grpo_s0", "fspo_s0"):
        assert (tmp_path / "a" / run / "samples.jsonl").read_text() == (tmp_path / "b" / run / "samples.jsonl").read_text()


def test_every_run_is_checked_before_the_first_one_trains(tmp_path, questions):
    """A setting only one arm gets wrong stops the invocation before anything trains (a lite job with a klcf arm
    and no checklist file once trained four runs first), in a row and in workers alike, naming the run."""
    from fspo_lite.config import ConfigError
    from fspo_lite.drivers.runs import check_runs, train_and_evaluate_all

    for workers in (1, 2):
        with pytest.raises(ConfigError, match=r"run klcf_s0: reward.method=klcf needs a checklist file"):
            train_and_evaluate_all(SHARED, ["grpo", "klcf"], [0, 1], tmp_path, questions, workers=workers)
        with pytest.raises(ConfigError, match="run no-such-method_s0: unknown reward.method 'no-such-method'"):
            train_and_evaluate_all(SHARED, ["grpo", "no-such-method"], [0], tmp_path, questions, workers=workers)
    assert not any(tmp_path.iterdir())
    checklist = tmp_path / "checklists.json"
    checklist.write_text(json.dumps({"kind": "klcf-checklist", "questions": {}}))
    check_runs({**SHARED, "klcf.checklist_path": str(checklist)}, ["grpo", "klcf", "caution+fspo"], [0, 1], tmp_path)
    with pytest.raises(ConfigError, match="run grpo_s0: .*train.steps"):
        check_runs({**SHARED, "train.steps": -1}, ["grpo"], [0], tmp_path)


def test_a_failing_worker_run_is_named_and_finished_runs_are_kept(tmp_path, questions):
    from fspo_lite.drivers.runs import train_and_evaluate_all

    arms = {"lost": {"reward.method": "grpo", "model.name": str(tmp_path / "no-model-here")}}  # fails as it loads
    with pytest.raises(RuntimeError, match="run lost_s0 failed"):
        train_and_evaluate_all(SHARED, ["grpo", "lost"], [0], tmp_path, questions, arms=arms, workers=2)
    assert (tmp_path / "grpo_s0" / "heldout.json").exists()
    with pytest.raises(ValueError, match="workers must be at least 1"):
        train_and_evaluate_all(SHARED, ["grpo"], [0], tmp_path, questions, workers=0)


def test_without_given_questions_every_seed_trains_on_one_order_and_an_arm_on_its_own_filter(tmp_path, monkeypatch):
    """examples=None: a run's questions do not depend on its own seed nor on which runs share the invocation (the
    seed-2 run of `--set 03.seeds=[2]` is the seed-2 run of the whole study), and an arm's data keys are read."""
    from fspo_lite.data.training_set import load_training_examples
    from fspo_lite.drivers import runs as runs_module

    seen = {}

    class Stop(Exception):
        pass

    def capture(config, train_examples=None, progress=True):
        seen[config.train.seed, config.data.filter_path] = [e.id for e in train_examples]
        raise Stop

    monkeypatch.setattr(trainer_module, "Trainer", capture)
    kept = ["kbqa-capital-0006", "kbqa-currency-0025"]
    filter_file = tmp_path / "filter.json"
    filter_file.write_text(json.dumps({"kind": "difficulty-filter", "kept_ids": kept, "questions_probed": 2}))
    arms = {"grpo+filtered": {"reward.method": "grpo", "data.filter_path": str(filter_file)}}
    for arm, seed in (("grpo", 2), ("grpo", 0), ("grpo+filtered", 3)):
        with pytest.raises(Stop):
            train_and_evaluate(SHARED, arm, seed, tmp_path / "runs", None, progress=False, arms=arms)
    order = [e.id for e in load_training_examples(run_config(SHARED, "grpo", 0, tmp_path))]
    assert runs_module.QUESTION_ORDER_SEED == 0
    assert seen[2, None] == seen[0, None] == order
    assert order != [e.id for e in load_training_examples(run_config(SHARED, "grpo", 2, tmp_path))]  # seed mattered
    assert sorted(seen[3, str(filter_file)]) == sorted(kept)
