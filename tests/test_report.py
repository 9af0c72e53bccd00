"""The lite job's aggregation (fspo_lite.drivers.report) and profile handling (drivers.experiment, drivers.runs)
on hand-made inputs."""

import json
import math

import pandas as pd
import pytest

from fspo_lite.drivers.experiment import load_profile, resolve_parameters
from fspo_lite.drivers.report import (
    flip_example,
    goal_check,
    load_heldout,
    load_training,
    summarize,
    summary_markdown,
    training_diagnostics,
)
from fspo_lite.drivers.runs import run_config, run_name
from fspo_lite.evaluation.metrics import DECOMPOSITION
from fspo_lite.jsonl import read_jsonl


def _heldout():
    rows = [("base", None, 0.10, 0.50), ("grpo", 0, 0.20, 0.40), ("grpo", 1, 0.30, 0.60),
            ("fspo", 0, 0.22, 0.30), ("fspo", 1, 0.26, 0.36)]
    return pd.DataFrame([{"run": f"{m}_{s}", "method": m, "seed": s, "accuracy": a, "answer_f1": a,
                          "not_attempted": 0.0, "format_rate": 1.0, "step_hallucination": h, "judge_coverage": 0.5,
                          **dict.fromkeys(DECOMPOSITION, 20.0)} for m, s, a, h in rows])


def test_summarize_means_and_spreads_over_seeds():
    table = summarize(_heldout(), order=["base", "grpo", "fspo"])
    assert list(table.index) == ["base", "grpo", "fspo"]
    assert table.loc["grpo", "seeds"] == 2 and table.loc["base", "seeds"] == 1
    assert table.loc["grpo", "accuracy"] == pytest.approx(0.25)
    assert table.loc["grpo", "accuracy_spread"] == pytest.approx(0.10)
    assert table.loc["fspo", "step_hallucination"] == pytest.approx(0.33)
    assert table.loc["fspo", "step_hallucination_spread"] == pytest.approx(0.06)
    assert table.loc["base", "accuracy_spread"] == 0.0


def test_goal_check_relative_drop_and_accuracy_points():
    table = summarize(_heldout())
    goal = goal_check(table)
    # hallucination 0.50 (grpo) -> 0.33 (fspo): a 34% drop; accuracy 0.25 -> 0.24: -1 point
    assert goal["relative_drop"] == pytest.approx(0.34)
    assert goal["accuracy_delta_points"] == pytest.approx(-1.0)
    assert goal["met"] is True
    assert goal_check(table, accuracy_points=0.5)["met"] is False
    assert goal_check(table, relative_drop=0.4)["met"] is False


def test_summary_markdown_lists_every_method_and_the_goal():
    table = summarize(_heldout(), order=["base", "grpo", "fspo"])
    text = summary_markdown(table, goal_check(table), settings={"questions": 2})
    assert "| grpo | 2 | 25.0 ± 5.0 | 25.0 ± 5.0 | 0.0 ± 0.0 | 50.0 ± 10.0 |" in text
    assert "| base | 1 | 10.0 | " in text  # one seed: no spread shown
    assert "relative drop 34.0%" in text and "met on the point estimates" in text and "questions = 2" in text
    assert "**" not in text  # no bold verdict: the verdict is render.verdict's, on top of summary.md
    assert "Per response" not in text  # runs without per-response counts: no table of them


def test_summary_markdown_per_response_counts():
    heldout = _heldout().assign(supported=[1.0, 1.0, 2.0, 1.5, 1.5], tokens=[40, 50, 60, 30, 34])
    table = summarize(heldout, order=["base", "grpo", "fspo"])
    text = summary_markdown(table, None, settings={"step-hallucination judge": "embedding"})
    assert "Per response (held-out judge: embedding)" in text and "| method | supported | tokens |" in text
    assert "| grpo | 1.50 ± 0.50 | 55.00 ± 5.00 |" in text and "| base | 1.00 | 40.00 |" in text


def test_flip_example_picks_the_most_flipped_response():
    plain = {"advantage": 0.5, "token_advantages": [0.5, 0.5]}
    one = {"advantage": 0.5, "token_advantages": [0.5, -0.5, 0.5]}
    two = {"advantage": -1.0, "token_advantages": [1.0, 1.0, -1.0]}
    assert flip_example([plain, one, two]) is two
    assert flip_example([plain]) is None and flip_example([]) is None


def test_load_runs_from_folders(tmp_path):
    metrics = {"kbqa.correct": 0.5, "kbqa.step_hallucination_rate": 0.2, "kbqa.decomp_partial_correct": 100.0,
               "kbqa.judge_coverage": 0.8, "truthfulqa_mc.mc1": 0.25, "halueval.accuracy": 0.5, "multihop.correct": 0.9,
               "kbqa.supported_per_response@embedding": 1.25, "kbqa.supported_per_response@lexical": 9.0,
               "kbqa.near_duplicates_per_response": 0.5, "kbqa.response_tokens": 48.0}
    for method, seed in (("base", None), ("fspo", 0)):
        run = tmp_path / (method if seed is None else run_name(method, seed))
        run.mkdir()
        (run / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "metrics": metrics,
                                                      "judge": "embedding"}))
    (tmp_path / "fspo_s0" / "metrics.jsonl").write_text(
        '{"step": 1, "flipped_token_share": 0.2, "reward_std": 1.0}\n{"step": 2, "flipped_token_share": 0.4, "reward_std": 0.0}\n')
    heldout = load_heldout(tmp_path).set_index("method")
    assert set(heldout.index) == {"base", "fspo"}
    assert heldout.loc["base", "accuracy"] == 0.5 and heldout.loc["base", "partial_correct"] == 100.0
    assert heldout.loc["fspo", "truthfulqa_mc1"] == 0.25 and heldout.loc["fspo", "judge_coverage"] == 0.8
    assert "answer_f1" not in heldout  # metrics that were not run stay out of the table
    assert heldout.loc["fspo", "supported"] == 1.25  # the run's held-out judge's count, not another judge's
    assert (heldout.loc["fspo", "near_duplicates"], heldout.loc["fspo", "tokens"]) == (0.5, 48.0)
    assert load_heldout(tmp_path, qa="multihop").loc[0, "accuracy"] == 0.9
    training = load_training(tmp_path)
    assert list(training["method"]) == ["fspo", "fspo"]
    diagnostics = training_diagnostics(training, order=["grpo", "fspo"])
    assert diagnostics.loc["fspo", "flipped_token_share"] == pytest.approx(0.3)
    with pytest.raises(FileNotFoundError, match="notebook 03"):
        load_heldout(tmp_path / "nothing")


def test_profiles_load_and_fill_the_output_root(tmp_path):
    for name in ("lite", "quick", "colab_t4"):
        profile = load_profile(name)
        names = [n for n, _ in profile.notebooks]
        assert names == sorted(names) and "03_train_fspo.ipynb" in names and "04_results.ipynb" in names
    lite = dict(load_profile("lite").notebooks)["03_train_fspo.ipynb"]
    assert len(lite["seeds"]) >= 2 and {"grpo", "fspo", "caution"} <= set(lite["methods"])
    assert lite["train_verifier"] != lite["judge_verifier"]
    assert resolve_parameters({"a": "{out}/runs", "b": ["{out}", 3], "c": 1}, tmp_path) == {
        "a": f"{tmp_path}/runs", "b": [str(tmp_path), 3], "c": 1}
    bad = tmp_path / "bad.yaml"
    bad.write_text("notebooks: []\nsteps: 3\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_profile(str(bad))
    with pytest.raises(FileNotFoundError, match="colab_t4, lite, quick"):
        load_profile("nope")


def test_run_config_differs_only_in_method_seed_and_folder(tmp_path):
    shared = {"model.name": "tiny", "train.steps": 3}
    a, b = run_config(shared, "grpo", 0, tmp_path), run_config(shared, "caution+fspo", 1, tmp_path)
    assert (a.reward.method, a.train.seed, a.train.steps) == ("grpo", 0, 3)
    assert b.train.output_dir == str(tmp_path / "caution_fspo_s1")
    a.reward.method, a.train.seed, a.train.output_dir = b.reward.method, b.train.seed, b.train.output_dir
    assert a.to_dict() == b.to_dict()


# ---- the study's statistics on a synthetic runs folder ---------------------------------------------
def _write_run(root, name, method, seed, responses, extra_records=()):
    """responses: (question, grade, {judge: labels}, tokens) per response."""
    run = root / name
    (run / "eval").mkdir(parents=True)
    (run / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "judge": "embedding",
                                                  "train_verifier": "lexical", "metrics": {}}))
    rows = []
    for i, (question, grade, labels, tokens) in enumerate(responses):
        main = next(iter(labels.values()))
        rows.append({"benchmark": "kbqa", "id": question, "sample": i % 2, "grade": grade, "f1": float(grade == "CORRECT"),
                     "format_ok": True, "sentence_labels": main, "sentence_labels_by_judge": labels,
                     "sentence_spans": [[0, 1]] * len(main), "response_tokens": tokens,
                     "near_duplicate_sentences": 0, "output": "x"})
    rows += list(extra_records)
    (run / "eval" / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _study_runs(root):
    """grpo (2 seeds): q1 both wrong with 2 unsupported sentences each, q2 both right with one supported;
    fspo (2 seeds): the same answers, q1's responses with 1 unsupported sentence only."""
    def responses(unsupported_q1):
        wrong = ("q1", "INCORRECT", {"embedding": [-1] * unsupported_q1, "lexical": [-1] * unsupported_q1}, 20)
        right = ("q2", "CORRECT", {"embedding": [1], "lexical": [0]}, 10)
        return [wrong, wrong, right, right]
    mc = [{"benchmark": "truthfulqa_mc", "id": "t1", "mc1": 1.0, "mc2": 0.8, "grade": "CORRECT"}]
    for seed in (0, 1):
        _write_run(root, f"grpo_s{seed}", "grpo", seed, responses(2), mc)
        _write_run(root, f"fspo_s{seed}", "fspo", seed, responses(1), mc)
    _write_run(root, "base", "base", None, responses(3))
    return root


def test_study_cells_and_statistics_by_hand(tmp_path):
    from fspo_lite.drivers.report import judges_of, load_responses, matched_length, metric_cells, study_statistics

    responses = load_responses(_study_runs(tmp_path))
    assert judges_of(responses) == ["embedding", "lexical"]
    cells = metric_cells(responses, tmp_path)
    grpo_q1 = cells[(cells.metric == "step_hallucination@embedding") & (cells.method == "grpo") & (cells.seed == 0)
                    & (cells.question == "q1")].iloc[0]
    assert (grpo_q1.num, grpo_q1.den) == (4, 4)
    tables = study_statistics(cells, ["base", "grpo", "fspo"], n_resamples=200)
    m = tables["methods"].set_index(["metric", "method"])
    # grpo: 4 unsupported of 6 checkable per seed; fspo: 2 of 4 (embedding); seeds agree -> resampling
    # seeds changes nothing, but questions do: q2 alone gives 0, q1 alone 1
    assert m.loc[("step_hallucination@embedding", "grpo"), "mean"] == pytest.approx(2 / 3)
    assert m.loc[("step_hallucination@embedding", "fspo"), "mean"] == pytest.approx(0.5)
    assert (m.loc[("step_hallucination@embedding", "grpo"), "low"],
            m.loc[("step_hallucination@embedding", "grpo"), "high"]) == (0.0, 1.0)
    assert m.loc[("accuracy", "grpo"), "mean"] == 0.5 and m.loc[("all_attempt_wrong", "grpo"), "mean"] == 50.0
    assert m.loc[("supported_per_response@embedding", "fspo"), "mean"] == 0.5
    assert m.loc[("unsupported_per_response@embedding", "grpo"), "mean"] == 1.0
    assert m.loc[("response_tokens", "grpo"), "mean"] == 15.0
    assert m.loc[("truthfulqa_mc2", "fspo"), "mean"] == pytest.approx(0.8)
    assert m.loc[("accuracy", "base"), "seeds"] == 1 and m.loc[("accuracy", "grpo"), "seeds"] == 2
    d = tables["differences"].set_index(["metric", "method"])
    assert set(d.index.get_level_values("method")) == {"fspo"}  # base is not compared
    # same answers: accuracy and supported sentences identical on every question -> zero-width intervals
    assert tuple(d.loc[("accuracy", "fspo"), ["diff", "low", "high"]]) == (0.0, 0.0, 0.0)
    assert tuple(d.loc[("supported_per_response@embedding", "fspo"), ["diff", "low", "high"]]) == (0.0, 0.0, 0.0)
    assert d.loc[("unsupported_per_response@embedding", "fspo"), "diff"] == -0.5
    # lexical judged nothing on q2: only q1 is checkable, 100% for both
    assert d.loc[("step_hallucination@lexical", "fspo"), "diff"] == 0.0
    matched = matched_length(responses, n_resamples=50).set_index(["judge", "method"])
    # embedding: strata 1 sentence (q2: 0% both; fspo's q1: 100%) and 2 sentences (grpo's q1: 100%): in the
    # 1-sentence stratum fspo 2/4 = 50%, grpo 0/4 = 0%; the 2-sentence stratum only grpo reaches
    row = matched.loc[("embedding", "fspo")]
    assert row["strata"] == 1 and row["diff"] == pytest.approx(0.5)


def test_study_reads_records_whose_answers_hold_unicode_line_separators(tmp_path):
    """The harness writes records.jsonl with ensure_ascii=False, so a sampled U+2028 / U+2029 / U+0085 stays raw;
    the report once split lines there and failed on the whole runs folder (a 4-step lite run hit it)."""
    from fspo_lite.drivers.report import load_responses

    root = _study_runs(tmp_path)
    path = root / "grpo_s0" / "eval" / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().split("\n") if line]
    rows[0]["output"] = "<think>Paris\u2028is\u2029the capital\x85.</think>"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    responses = load_responses(root)
    assert len(responses[(responses.method == "grpo") & (responses.seed == 0)]) == 4


def test_the_report_is_about_the_short_qa_benchmark_named(tmp_path):
    """Notebook 04's `qa`: a runs folder evaluated on multihop only is reported on multihop; asked for kbqa, the
    report says what to do instead of "run notebook 03 first"."""
    from fspo_lite.drivers.report import Bootstrap, Study, load_heldout, load_responses, study_report

    root = _study_runs(tmp_path / "runs")
    for path in root.glob("*/eval/records.jsonl"):
        rows = [{**r, "benchmark": "multihop"} if r["benchmark"] == "kbqa" else r for r in read_jsonl(path)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for path in root.glob("*/heldout.json"):
        info = json.loads(path.read_text())
        path.write_text(json.dumps({**info, "metrics": {"multihop.correct": 0.5, "truthfulqa_mc.mc2": 0.8}}))
    for read in (load_responses, load_heldout):
        with pytest.raises(FileNotFoundError, match="with kbqa among its eval_benchmarks, or name in notebook 04's"):
            read(root)
    assert set(load_heldout(root, "multihop")["accuracy"]) == {0.5}
    assert len(load_responses(root, "multihop")) == 20
    study = Study(root, ["base", "grpo", "fspo"], figures_dir=tmp_path / "figures", qa="multihop")
    statistics = study_report(study, Bootstrap(n_resamples=50))
    methods = {(row["metric"], row["method"]): row["mean"] for row in statistics["methods"]}
    assert methods[("accuracy", "grpo")] == 0.5


def test_study_report_files_and_goal(tmp_path):
    from fspo_lite.drivers.report import Bootstrap, Study, study_report

    runs = _study_runs(tmp_path / "runs")
    out = study_report(Study(runs, ["base", "grpo", "fspo"], figures_dir=tmp_path / "figures", prefix="study_",
                             results_dir=tmp_path / "results"), Bootstrap(n_resamples=100), settings={"questions": 2})
    text = (tmp_path / "results" / "summary.md").read_text()
    assert "| step_hallucination@embedding | 75.0 [" in text  # base: 6 of 8 (3 unsupported x2 + supported x2)
    assert "fspo - grpo" in text and "| lexical |" in text and "matched length" in text
    # q2 alone in a resample gives no unsupported sentences for either: the unsupported interval reaches 0
    assert ("embedding, fspo - grpo: supported sentences per response +0.00 [+0.00, +0.00], unsupported -0.50 "
            "[-1.00, +0.00]. Reading: no difference from grpo in either count that the intervals can resolve.") in text
    assert "Does the detail term" not in text  # no fspo+detail arm was run
    assert "The caution goal" in text and "| fspo | 50.0 / 50.0 | +0.0%" in text
    assert (tmp_path / "figures" / "study_paired_differences.png").exists()
    assert (tmp_path / "figures" / "study_step_hallucination_by_judge.png").exists()
    assert out["judges"] == ["embedding", "lexical"] and json.dumps(out)


def test_caution_goal_point_estimates_and_intervals():
    from fspo_lite.drivers.report import caution_goal, length_stratum

    def frame(correct_diff, correct_low, relative, relative_high):
        return pd.DataFrame([
            {"metric": "all_attempt_wrong", "method": "caution", "baseline": "grpo", "a": 30.0, "b": 50.0,
             "diff": -20.0, "low": -30.0, "high": -10.0, "relative": relative, "relative_low": -0.6,
             "relative_high": relative_high},
            {"metric": "accuracy", "method": "caution", "baseline": "grpo", "a": 0.29, "b": 0.30,
             "diff": correct_diff, "low": correct_low, "high": 0.01, "relative": 0.0, "relative_low": 0.0,
             "relative_high": 0.0}])

    # -40% all-attempt-wrong (interval up to -35%), correct -1 point (interval down to -1.5): met and holds
    row = caution_goal(frame(-0.01, -0.015, -0.4, -0.35)).iloc[0]
    assert row["met"] and row["holds"] and row["correct_points"] == pytest.approx(-1.0)
    # the interval of the relative change reaches -20%: met on the point estimate, does not hold
    row = caution_goal(frame(-0.01, -0.015, -0.4, -0.2)).iloc[0]
    assert row["met"] and not row["holds"]
    # correct down 3 points: not met
    assert not caution_goal(frame(-0.03, -0.05, -0.4, -0.35)).iloc[0]["met"]
    assert [length_stratum(n) for n in (1, 2, 4, 5, 9)] == [0, 1, 3, 4, 4]


# ---- the say-less check and the detail arm ----------------------------------------------------------
def _diff(diff, low, high):
    return {"diff": diff, "low": low, "high": high}


def test_say_less_reading_covers_every_case():
    from fspo_lite.drivers.report import direction, say_less_reading

    assert [direction(_diff(0, lo, hi)) for lo, hi in ((-2, -1), (1, 2), (-1, 1), (float("nan"), 1))] == [
        "below", "above", "unresolved", "n/a"]
    fewer, more, same = _diff(-0.5, -0.8, -0.2), _diff(0.5, 0.2, 0.8), _diff(0.1, -0.2, 0.4)
    assert "saying less, not being more right" in say_less_reading("fspo", "grpo", fewer, fewer)
    assert "a factuality gain, not silence" in say_less_reading("fspo", "grpo", more, fewer)
    text = say_less_reading("fspo", "grpo", same, fewer)
    assert "no sign of saying less" in text and "(point +0.10)" in text
    assert "more detail, not precision" in say_less_reading("fspo", "grpo", more, same)
    assert "more unsupported sentences" in say_less_reading("fspo", "grpo", same, more)
    assert "intervals can resolve" in say_less_reading("fspo", "grpo", same, same)
    assert "One seed" in say_less_reading("fspo", "grpo", same, same, seeds=1)
    assert "One seed" not in say_less_reading("fspo", "grpo", same, same, seeds=2)


def _differences(arm_supported, arm_unsupported):
    """Paired differences to grpo: fspo -0.5 unsupported [-0.8, -0.2], supported -0.3 [-0.5, -0.1]."""
    rows = [("supported_per_response@embedding", "fspo", (-0.3, -0.5, -0.1)),
            ("unsupported_per_response@embedding", "fspo", (-0.5, -0.8, -0.2)),
            ("supported_per_response@embedding", "fspo+detail", arm_supported),
            ("unsupported_per_response@embedding", "fspo+detail", arm_unsupported)]
    return pd.DataFrame([{"metric": m, "method": who, "baseline": "grpo", "diff": d, "low": lo, "high": hi}
                         for m, who, (d, lo, hi) in rows])


def test_detail_arm_check_met_holds_and_no():
    from fspo_lite.drivers.report import detail_answer, detail_arm_check, detail_markdown

    versus = pd.DataFrame([{"metric": "supported_per_response@embedding", "method": "fspo+detail",
                            "baseline": "fspo", "diff": 0.4, "low": 0.1, "high": 0.7}])
    # unsupported -0.4 [-0.7, -0.1] and supported +0.1 [0.0, 0.3]: holds
    row = detail_arm_check(_differences((0.1, 0.0, 0.3), (-0.4, -0.7, -0.1)), versus, ["embedding", "lexical"]).iloc[0]
    assert row["met"] and row["holds"] and row["supported_vs_reference"] == 0.4
    assert math.isnan(row["unsupported_vs_reference"])  # not computed: n/a, never a made-up number
    assert detail_answer(row) == "yes, and the intervals resolve it"
    # supported +0.1 [-0.1, 0.3]: met on the point estimates, not resolved
    row = detail_arm_check(_differences((0.1, -0.1, 0.3), (-0.4, -0.7, -0.1)), versus, ["embedding"]).iloc[0]
    assert row["met"] and not row["holds"] and "do not resolve" in detail_answer(row)
    # supported -0.2 and unsupported +0.1: no, for both reasons
    table = detail_arm_check(_differences((-0.2, -0.4, 0.0), (0.1, -0.1, 0.3)), versus, ["embedding"])
    row = table.iloc[0]
    assert not row["met"] and detail_answer(row) == ("no: its unsupported sentences are not below grpo's and it "
                                                     "writes fewer supported sentences than grpo")
    text = "\n".join(detail_markdown(table))
    assert "| embedding | +0.10 [-0.10, +0.30] | -0.50 [-0.80, -0.20] | n/a | -0.20 [-0.40, +0.00] |" in text
    assert "| no | no |" in text and "- embedding: no: " in text
    assert detail_arm_check(_differences((0, 0, 0), (0, 0, 0)).iloc[:2], versus, ["embedding"]).empty


def test_study_report_answers_the_detail_arm_question(tmp_path):
    """fspo+detail (2 seeds): q1 wrong with one supported and one unsupported sentence, q2 right with one
    supported: per response 1.0 supported (grpo 0.5, fspo 0.5) and 0.5 unsupported (grpo 1.0, fspo 0.5)."""
    from fspo_lite.drivers.report import Bootstrap, Study, study_report

    runs = _study_runs(tmp_path / "runs")
    wrong = ("q1", "INCORRECT", {"embedding": [1, -1], "lexical": [0, -1]}, 20)
    right = ("q2", "CORRECT", {"embedding": [1], "lexical": [0]}, 10)
    for seed in (0, 1):
        _write_run(runs, f"fspo_detail_s{seed}", "fspo+detail", seed, [wrong, wrong, right, right])
    out = study_report(Study(runs, ["base", "grpo", "fspo", "fspo+detail"], figures_dir=tmp_path / "figures",
                             prefix="study_", results_dir=tmp_path / "results"), Bootstrap(n_resamples=100))
    row = {r["judge"]: r for r in out["detail_arm"]}["embedding"]
    assert row["supported_arm"] == pytest.approx(0.5) and row["unsupported_arm"] == pytest.approx(-0.5)
    assert row["supported_vs_reference"] == pytest.approx(0.5) and row["unsupported_vs_reference"] == 0.0
    assert row["met"]
    # two questions: q2 alone in a resample gives 0 for both changes, so neither interval excludes 0 on its side
    assert row["supported_arm_low"] == 0.0 and row["unsupported_arm_high"] == 0.0
    assert row["holds_supported_resolved"] and not row["keeps_drop_resolved"] and not row["holds"]
    text = (tmp_path / "results" / "summary.md").read_text()
    assert "## Does the detail term keep fspo's gain without saying less?" in text
    assert "- embedding: yes on the point estimates, but the intervals do not resolve it." in text


def _pairs(rows):
    """rows: (metric, method, baseline, (diff, low, high))."""
    return pd.DataFrame([{"metric": m, "method": a, "baseline": b, "diff": d, "low": lo, "high": hi}
                         for m, a, b, (d, lo, hi) in rows])


def test_interval_side_and_direction_agree():
    from fspo_lite.drivers.report import direction, interval_side

    assert interval_side(-0.3, -0.1) == "below" and interval_side(0.1, 0.2) == "above"
    assert interval_side(-0.1, 0.1) == "unresolved" and interval_side(0.0, 0.2) == "unresolved"
    assert interval_side(math.nan, 0.2) == "n/a"
    assert direction({"low": 0.1, "high": 0.3}) == "above"


def test_verifier_check_yes_partly_no_and_the_trained_judge_left_out():
    from fspo_lite.drivers.report import verifier_answer, verifier_check

    def table(emb_supported, lik_supported, emb_vs_grpo=(0.0, -0.1, 0.1)):
        return _pairs([("supported_per_response@embedding", "fspo+kb", "fspo", emb_supported),
                       ("unsupported_per_response@embedding", "fspo+kb", "fspo", (0.0, -0.1, 0.1)),
                       ("supported_per_response@embedding", "fspo+kb", "grpo", emb_vs_grpo),
                       ("supported_per_response@likelihood", "fspo+kb", "fspo", lik_supported),
                       ("unsupported_per_response@likelihood", "fspo+kb", "fspo", (-0.2, -0.3, -0.1)),
                       ("supported_per_response@likelihood", "fspo+kb", "grpo", (0.0, -0.1, 0.1)),
                       # the kb judge says "more right", but fspo+kb was trained against it: not counted
                       ("supported_per_response@kb", "fspo+kb", "fspo", (0.5, 0.4, 0.6)),
                       ("unsupported_per_response@kb", "fspo+kb", "fspo", (-0.5, -0.6, -0.4)),
                       ("supported_per_response@kb", "fspo+kb", "grpo", (0.5, 0.4, 0.6))])

    judges = ["embedding", "likelihood", "kb"]
    up, zero = (0.2, 0.1, 0.3), (0.0, -0.1, 0.1)
    yes = verifier_check(table(up, up), judges, trained_against="kb")
    assert yes["answer"] == "yes" and [r["judge"] for r in yes["judges"]] == ["embedding", "likelihood"]
    partly = verifier_check(table(up, zero), judges, trained_against="kb")
    assert partly["answer"] == "partly"
    assert verifier_answer(partly, table(up, zero)).startswith(
        "partly: fspo+kb writes more supported sentences per response than fspo under embedding, not under")
    no = verifier_check(table(zero, zero), judges, trained_against="kb")
    assert no["answer"] == "no"
    text = verifier_answer(no, table(zero, zero))
    assert text.startswith("no: under no held-out judge") and "supported +0.00 [-0.10, +0.10]" in text
    assert "The kb judge is left out of the answer" in text
    # more right than fspo but still fewer supported sentences than grpo under one judge: not a full yes
    assert verifier_check(table(up, up, (-0.3, -0.4, -0.2)), judges, trained_against="kb")["answer"] == "partly"
    # counted when nothing was trained against it: the kb judge alone says yes, the others not
    assert verifier_check(table(zero, zero), judges)["answer"] == "partly"
    assert verifier_check(_pairs([]).reindex(columns=["metric", "method", "baseline", "low", "high"]),
                          judges)["answer"] == "n/a"


def test_longer_check_compares_the_sides_of_zero_at_both_budgets():
    from fspo_lite.drivers.report import longer_answer, longer_check

    rows = [("sentences_per_response", "fspo", "grpo", (-0.7, -0.8, -0.5)),
            ("sentences_per_response", "fspo+4x", "grpo+4x", (-0.6, -0.9, -0.3)),
            ("matched@embedding", "fspo", "grpo", (0.01, -0.07, 0.08)),
            ("matched@embedding", "fspo+4x", "grpo+4x", (0.02, -0.05, 0.09)),
            ("accuracy", "grpo+4x", "grpo", (0.07, 0.03, 0.10))]
    same = longer_check(_pairs(rows), ["embedding"])
    assert same["answer"] == "no" and [r["metric"] for r in same["metrics"]] == ["sentences_per_response",
                                                                                "matched@embedding"]
    text = longer_answer(same, _pairs(rows))
    assert text.startswith("no: each of 2 readings of fspo+4x - grpo+4x lies on the same side of 0")
    assert "reasoning sentences per response -0.70 [-0.80, -0.50] -> -0.60 [-0.90, -0.30]" in text
    assert "step hallucination at matched length (embedding) +1.0 [-7.0, +8.0] -> +2.0 [-5.0, +9.0]" in text
    assert "What 4x the budget does to accuracy (points): grpo+4x - grpo +7.0 [+3.0, +10.0]." in text
    rows[1] = ("sentences_per_response", "fspo+4x", "grpo+4x", (-0.2, -0.5, 0.1))
    changed = longer_check(_pairs(rows), ["embedding"])
    assert changed["answer"] == "yes" and changed["metrics"][0]["changed"]
    assert longer_answer(changed, _pairs(rows)).startswith(
        "yes, in 1 of 2 readings: reasoning sentences per response below 0 -> holds 0")
    assert longer_check(_pairs(rows[:1]), ["embedding"])["answer"] == "n/a"


def test_study_report_answers_the_added_arms_questions(tmp_path):
    """fspo+kb (trained with kb) writes fspo's responses: no change against fspo; grpo+4x and fspo+4x repeat
    grpo and fspo: the picture does not change."""
    from fspo_lite.drivers.report import Bootstrap, Study, study_report

    runs = _study_runs(tmp_path / "runs")
    wrong = ("q1", "INCORRECT", {"embedding": [-1], "lexical": [-1]}, 20)
    right = ("q2", "CORRECT", {"embedding": [1], "lexical": [0]}, 10)
    for seed in (0, 1):
        _write_run(runs, f"fspo_kb_s{seed}", "fspo+kb", seed, [wrong, wrong, right, right])
        _write_run(runs, f"grpo_4x_s{seed}", "grpo+4x", seed, [wrong[:2] + ({"embedding": [-1, -1],
                                                                             "lexical": [-1, -1]}, 20)] * 2
                   + [right, right])
        _write_run(runs, f"fspo_4x_s{seed}", "fspo+4x", seed, [wrong, wrong, right, right])
    info = json.loads((runs / "fspo_kb_s0" / "heldout.json").read_text())
    (runs / "fspo_kb_s0" / "heldout.json").write_text(json.dumps({**info, "train_verifier": "lexical2"}))
    out = study_report(Study(runs, ["base", "grpo", "fspo", "fspo+kb", "grpo+4x", "fspo+4x"],
                             figures_dir=tmp_path / "figures", results_dir=tmp_path / "results"),
                       Bootstrap(n_resamples=100))
    questions = out["questions"]
    assert questions["verifier"]["trained_against"] == "lexical2"  # read from the arm's heldout.json
    assert [r["judge"] for r in questions["verifier"]["judges"]] == ["embedding", "lexical"]
    assert questions["verifier"]["answer"] == "no"
    assert questions["longer"]["answer"] == "no" and len(questions["longer"]["metrics"]) == 2 + 3 * 2 + 2
    pairs = {(r["metric"], r["method"], r["baseline"]): r for r in questions["pairs"]}
    # fspo+4x - grpo+4x: unsupported 0.5 - 1.0 per response on every seed and question pair
    assert pairs[("unsupported_per_response@embedding", "fspo+4x", "grpo+4x")]["diff"] == pytest.approx(-0.5)
    assert ("matched@embedding", "fspo+4x", "grpo+4x") in pairs
    text = (tmp_path / "results" / "summary.md").read_text()
    assert "## The added arms: a better verifier, a longer run" in text
    assert "| metric | fspo+kb - fspo | fspo+kb - grpo | fspo - grpo | fspo+4x - grpo+4x | grpo+4x - grpo | " in text
    assert "- **Does longer training change the picture?** no: " in text
    assert "- **Does a better verifier turn saying less into saying right?** no: " in text


def test_a_figure_with_nothing_to_show_is_not_drawn_and_says_why(tmp_path):
    from fspo_lite.drivers import report

    one_step = pd.DataFrame([{"run": f"{m}_s0", "method": m, "seed": 0, "step": 1, "reward_mean": -2.0,
                              "adv_abs_share/supported": float("nan"), "adv_signed_share/supported": float("nan")}
                             for m in ("grpo", "fspo")])
    assert "single training step" in report.curves_not_drawn(one_step)
    assert report.plot_training_curves(one_step, tmp_path / "curves.png") is None
    assert report.plot_advantage_mass(one_step, tmp_path / "mass.png") is None
    assert "every advantage was zero" in report.mass_not_drawn(one_step)
    assert "did not log" in report.mass_not_drawn(one_step.drop(columns=["adv_abs_share/supported"]))
    two_steps = pd.concat([one_step, one_step.assign(step=2)], ignore_index=True)
    assert report.curves_not_drawn(two_steps) is None and report.plot_training_curves(two_steps) is not None
    no_rate = _heldout().assign(step_hallucination=float("nan"))
    assert "checked no reasoning sentence" in report.scatter_not_drawn(no_rate)
    assert report.plot_accuracy_vs_hallucination(no_rate, tmp_path / "scatter.png") is None
    assert report.scatter_not_drawn(_heldout()) is None
    nothing_checked = pd.DataFrame([{"metric": "checkable_per_response@embedding", "method": "grpo", "mean": 0.0,
                                     "low": 0.0, "high": 0.0}])
    assert "no held-out judge found" in report.judges_not_drawn(nothing_checked, ["embedding"])
    assert report.plot_judges(nothing_checked, ["embedding"], tmp_path / "judges.png") is None
    assert report.plot_supported_unsupported(nothing_checked, ["embedding"], tmp_path / "su.png") is None
    assert not list(tmp_path.iterdir())  # nothing saved
    assert report.figures_not_drawn(no_rate, one_step, "quick_") == {
        "quick_training_curves.png": report.curves_not_drawn(one_step),
        "quick_accuracy_vs_hallucination.png": report.scatter_not_drawn(no_rate)}
    assert report.figures_not_drawn(_heldout(), two_steps) == {}


def test_summary_md_lists_the_figures_not_drawn():
    from fspo_lite.drivers.report import summary_document

    summary = {"report": {"title": "t", "order": ["base"], "smoke": True}, "methods": {}, "runs": [],
               "figures_not_drawn": {"quick_training_curves.png": "every run logged a single training step"},
               "statistics": {"figures_not_drawn": {"quick_advantage_mass.png": "every advantage was zero"}}}
    text = summary_document(summary)
    assert ("## Figures not drawn\n\nA figure with nothing to show is not drawn:\n\n"
            "- `quick_training_curves.png`: every run logged a single training step.\n"
            "- `quick_advantage_mass.png`: every advantage was zero.\n") in text
    assert "Figures not drawn" not in summary_document({**summary, "figures_not_drawn": {}, "statistics": {}})


def test_notebook_04_falls_back_to_the_committed_study_runs(tmp_path):
    from fspo_lite.drivers.report import committed_runs

    repository = tmp_path / "repo"
    (repository / "results" / "study" / "runs" / "base").mkdir(parents=True)
    (repository / "results" / "study" / "runs" / "base" / "heldout.json").write_text("{}")
    (repository / "results" / "study" / "summary.json").write_text(
        json.dumps({"report": {"order": ["base", "grpo", "fspo+kb"], "title": "Study"}}))
    fallback = committed_runs(tmp_path / "runs" / "lite", repository)
    assert fallback.order == ["base", "grpo", "fspo+kb"] and fallback.title == "Study"
    assert fallback.runs_dir == repository / "results" / "study" / "runs" and fallback.prefix == "study_"
    assert fallback.note.startswith(f"{tmp_path / 'runs' / 'lite'} does not exist yet (notebook 03 makes it): "
                                    "reading the committed study runs in") and "\n" not in fallback.note
    (tmp_path / "runs" / "lite").mkdir(parents=True)
    assert committed_runs(tmp_path / "runs" / "lite", repository) is None  # a folder that exists is read as it is
    assert committed_runs(tmp_path / "none", tmp_path / "wheel") is None  # nothing committed to fall back to
    real = committed_runs(tmp_path / "none")  # this repository's committed study
    assert real is not None and {"base", "grpo", "fspo"} <= set(real.order)


def test_the_lite_command_says_where_to_go_next(tmp_path):
    from fspo_lite.drivers.experiment import next_steps

    quick = next_steps(load_profile("quick"), tmp_path)
    assert quick[0].endswith(f"{tmp_path}/figures/quick_flip_example.png")
    assert "`make lite` is the real job" in quick[1] and "notebooks/05_reward_playground.ipynb" in quick[2]
    assert "`.venv/bin/jupyter lab notebooks/`" in quick[2] and len(quick) == 3
    lite = next_steps(load_profile("lite"), tmp_path)
    assert lite[0].endswith(f"{tmp_path}/figures/lite_flip_example.png") and len(lite) == 2


def test_run_row_is_one_short_row_of_a_run():
    from fspo_lite.drivers.report import run_row

    record = {"method": "fspo", "seed": 1, "minutes": 2.5, "status": "trained",
              "metrics": {"kbqa.correct": 0.25, "kbqa.step_hallucination_rate": 0.125, "kbqa.f1": 0.3}}
    assert run_row(record) == {"method": "fspo", "seed": 1, "accuracy %": 25.0, "step hallucination %": 12.5,
                               "minutes": 2.5}
    base = run_row({"method": "base", "seed": None, "metrics": {"multihop.correct": 0.5,
                                                                "multihop.step_hallucination_rate": float("nan")}})
    assert base["accuracy %"] == 50.0 and math.isnan(base["step hallucination %"]) and base["minutes"] is None


def test_the_studys_thirteen_models_get_thirteen_colours_and_keep_them_across_figures(tmp_path):
    """matplotlib's default cycle repeats after ten colours: with base and 12 arms, ternary would share base's blue.
    Every bar of the judges' figure has its own colour, and the forest plot (no baseline row) colours each method
    as the bar figure does."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from fspo_lite.drivers import report
    from fspo_lite.drivers.report.plots import plot_forest

    order = ["base", "grpo", "fspo", "caution", "fspo+detail", "fspo+kb", "grpo+4x", "fspo+4x", "random", "format",
             "ternary", "binary", "corver"]
    rows = [{"metric": f"{kind}@embedding", "method": m, "mean": 0.4, "low": 0.3, "high": 0.5}
            for m in order for kind in ("step_hallucination", "checkable_per_response")]
    fig = report.plot_judges(pd.DataFrame(rows), ["embedding"], tmp_path / "judges.png", order)
    bars = {to_hex(p.get_facecolor()) for p in fig.axes[0].patches}
    assert len(bars) == len(order)
    colour_of = {t.get_text(): to_hex(h.get_facecolor()) for t, h in
                 zip(fig.axes[0].get_legend().get_texts(), fig.axes[0].get_legend().legend_handles)}
    differences = pd.DataFrame([{"metric": "accuracy", "method": m, "baseline": "grpo", "diff": 0.1, "low": 0.0,
                                 "high": 0.2} for m in order if m not in ("grpo", "base")])
    forest = plot_forest(differences, ["accuracy"], tmp_path / "forest.png", order=order)
    legend = forest.axes[-1].get_legend()
    forest_colour = {t.get_text(): to_hex(h.get_color()) for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert forest_colour == {m: colour_of[m] for m in forest_colour} and len(forest_colour) == len(order) - 2
    plt.close("all")


def test_every_axis_at_matched_length_by_hand():
    """Two length strata (1 sentence, 2 or more). grpo: q1 1 sentence, right, supported; q2 2 sentences, wrong, both
    unsupported; q3 no sentence (in no stratum). fspo: q1 1 sentence, wrong, unsupported; q2 1 sentence, right,
    supported; q3 2 sentences, right, both supported. Weights: 3 of the 5 responses with a sentence have one, so
    (0.6, 0.4). Accuracy: fspo 0.6 x 1/2 + 0.4 x 1 = 0.7, grpo 0.6 x 1 + 0.4 x 0 = 0.6. Supported per response: fspo
    0.6 x 1/2 + 0.4 x 2 = 1.1, grpo 0.6. Step hallucination: fspo 0.6 x 1/2 + 0.4 x 0 = 0.3, grpo 0.6 x 0 + 0.4 x 1."""
    from fspo_lite.drivers.report import matched_length

    def response(method, question, correct, supported, unsupported):
        sentences = supported + unsupported
        return {"method": method, "seed": 0, "question": question, "sentences": sentences, "correct": float(correct),
                "supported@e": supported, "unsupported@e": unsupported, "checkable@e": sentences}

    responses = pd.DataFrame([response("grpo", "q1", 1, 1, 0), response("grpo", "q2", 0, 0, 2),
                              response("grpo", "q3", 1, 0, 0), response("fspo", "q1", 0, 0, 1),
                              response("fspo", "q2", 1, 1, 0), response("fspo", "q3", 1, 2, 0),
                              response("base", "q1", 1, 1, 0)])
    expected = {"accuracy": (0.7, 0.6), "supported_per_response": (1.1, 0.6), "step_hallucination": (0.3, 0.4)}
    for quantity, (fspo, grpo) in expected.items():
        rows = matched_length(responses, strata=2, n_resamples=20, quantity=quantity)
        assert list(rows["method"]) == ["fspo"]  # base is not compared
        row = rows.iloc[0]
        assert row["judge"] == ("" if quantity == "accuracy" else "e")
        assert (row["a"], row["b"], row["diff"]) == pytest.approx((fspo, grpo, fspo - grpo))
        assert row["weights"] == [0.6, 0.4] and row["strata"] == 2
    with pytest.raises(ValueError, match="not one of"):
        matched_length(responses, quantity="length")


def test_zero_reasons_say_why_a_smoke_runs_numbers_are_zero_and_a_real_run_gets_none():
    from fspo_lite.drivers.report.lite import zero_reasons

    smoke = summarize(_heldout().assign(accuracy=0.0, format_rate=0.0, supported=0.0, sentences=0.0, tokens=8.0))
    diagnostics = pd.DataFrame({"frac_reward_zero_std": [1.0, 1.0]}, index=["grpo", "fspo"])
    reasons = zero_reasons(smoke, diagnostics)
    assert len(reasons) == 3
    assert "well-formed is 0% for every method, and no answer matched a gold one (accuracy 0%)" in reasons[0]
    assert "No response held a reasoning sentence" in reasons[1]
    assert "frac_reward_zero_std = 1" in reasons[2]
    assert zero_reasons(summarize(_heldout().assign(supported=1.0, sentences=2.0)),
                        diagnostics.assign(frac_reward_zero_std=[1.0, 0.5])) == []
    one_well_formed = _heldout().assign(format_rate=[0.0, 0.0, 0.0, 0.0, 0.5])  # fspo seed 1: not all zero
    assert zero_reasons(summarize(one_well_formed)) == []


def test_a_table_of_zeros_becomes_one_line_and_a_table_with_one_number_stays_whole():
    from fspo_lite.drivers.report.lite import quiet_zero_tables

    zeros = ("## Paired\n\n| metric | fspo - grpo | caution - grpo |\n|---|---|---|\n"
             "| accuracy | +0.0 [+0.0, +0.0] | **-0.0 [-0.0, +0.0]** |\n| step_hallucination@kb | n/a | |\n"
             "| tokens | 0.00 ± 0.00 | 0 |\n\nafter")
    assert quiet_zero_tables(zeros) == ("## Paired\n\nEvery value of this table is 0 or n/a, so it is left out (rows: "
                                        "accuracy, step_hallucination@kb, tokens).\n\nafter")
    for number in ("100.0", "10.3", "0.05", "+0.0 [-0.1, +0.1]", "0.00 ± 0.02", "0.0 [0.0, 20.5]"):
        mixed = zeros.replace("| 0 |", f"| {number} |")
        assert quiet_zero_tables(mixed) == mixed, number
    assert quiet_zero_tables("| a | b |\n|---|---|") == "| a | b |\n|---|---|"  # no row: nothing to say


def test_summary_of_a_smoke_run_says_why_its_numbers_are_zero_and_drops_the_sentence_counts():
    heldout = _heldout().assign(accuracy=0.0, answer_f1=0.0, format_rate=0.0, step_hallucination=float("nan"),
                                supported=0.0, unsupported=0.0, sentences=0.0, tokens=8.0)
    text = summary_markdown(summarize(heldout, order=["base", "grpo", "fspo"]), None,
                            settings={"step-hallucination judge": "embedding"})
    assert "Why so many numbers below are 0 or n/a:\n\n- No model wrote a well-formed response" in text
    assert ("Per response: no reasoning sentence in any response, so every sentence count is 0; generated tokens "
            "per response: base 8.00, grpo 8.00, fspo 8.00.") in text
    assert "| method | supported |" not in text
    assert "| grpo | 2 | 0.0 ± 0.0 |" in text  # the main table stays: its TruthfulQA and decomposition columns


def test_a_forest_panel_of_zero_differences_says_so_in_its_title(tmp_path):
    from fspo_lite.drivers.report.plots import ALL_ZERO, plot_forest

    zero = pd.DataFrame([{"metric": m, "method": "fspo", "baseline": "grpo", "diff": 0.0, "low": 0.0, "high": 0.0}
                         for m in ("accuracy", "sentences_per_response")])
    figure = plot_forest(zero, ["accuracy", "sentences_per_response"], tmp_path / "forest.png")
    assert [ax.get_title() for ax in figure.axes] == [ALL_ZERO, ALL_ZERO] and (tmp_path / "forest.png").exists()
    moved = zero.assign(high=[0.02, 0.0])  # the accuracy panel has an interval: it is a figure, not a note
    assert [ax.get_title() for ax in plot_forest(moved, ["accuracy", "sentences_per_response"]).axes] == ["", ALL_ZERO]
