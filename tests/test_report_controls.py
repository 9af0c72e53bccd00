"""The controls and newer rewards in the study report (fspo_lite.drivers.report.controls): the rules of
docs/statistics.md ("Controls and newer rewards") on hand-made tables and hand-made runs."""

import json

import pandas as pd
import pytest

from fspo_lite.drivers.report.controls import (classify_reading, control_check, control_headline, control_lead,
                                               mass_reading,
                                               matched_detail_reading, more_right_check, more_right_lead,
                                               more_right_table)


@pytest.mark.parametrize("control, fspo, gap, answer", [
    ("down", "down", "holds 0", "all of it"),       # the coin moves it as far as FSPO does
    ("down", "down", "down", "part of it"),         # the coin moves it, FSPO further
    ("holds 0", "down", "down", "none of it"),      # the coin does not move it, FSPO does
    ("up", "down", "down", "none of it"),           # the coin moves it the other way
    ("down", "down", "up", "cannot tell"),          # the coin moves it further than FSPO
    ("holds 0", "down", "holds 0", "cannot tell"),  # neither the coin's change nor the gap resolved
    ("up", "up", "holds 0", "all of it"),
    ("down", "holds 0", "down", "FSPO does not move it"),
    ("down", "n/a", "down", "FSPO does not move it"),
])
def test_question_a_rule_by_hand(control, fspo, gap, answer):
    assert classify_reading(control, fspo, gap) == answer


def _differences(rows):
    return pd.DataFrame([{"metric": m, "method": a, "baseline": "grpo", "diff": (lo + hi) / 2, "low": lo, "high": hi}
                         for m, a, lo, hi in rows])


def _matched(rows):
    return pd.DataFrame([{"judge": j, "method": a, "baseline": "grpo", "diff": (lo + hi) / 2, "low": lo, "high": hi}
                         for j, a, lo, hi in rows])


def test_question_b_rule_by_hand():
    rate, sup = "step_hallucination@{}", "supported_per_response@{}"
    rows = []
    for judge in ("embedding", "likelihood", "kb"):
        rows += [(rate.format(judge), "good", -0.2, -0.1), (sup.format(judge), "good", -0.1, 0.2),   # more right
                 (rate.format(judge), "short", -0.2, -0.1), (sup.format(judge), "short", -0.4, -0.1)]  # says less
    rows += [(rate.format("embedding"), "one", -0.2, -0.1), (sup.format("embedding"), "one", 0.0, 0.1),
             (rate.format("likelihood"), "one", -0.1, 0.1), (sup.format("likelihood"), "one", -0.1, 0.1),
             (rate.format("embedding"), "trained", -0.3, -0.1), (sup.format("embedding"), "trained", 0.1, 0.2),
             (rate.format("kb"), "trained", -0.3, -0.1), (sup.format("kb"), "trained", 0.1, 0.2),
             (rate.format("likelihood"), "trained", -0.1, 0.1), (sup.format("likelihood"), "trained", 0.0, 0.1)]
    differences = _differences(rows)
    matched = _matched([("embedding", "good", -0.1, 0.1), ("likelihood", "good", -0.2, 0.05)])
    answers = {r["arm"]: r for r in more_right_check(differences, matched, ["embedding", "likelihood", "kb"],
                                                     ["good", "short", "one", "trained", "absent"],
                                                     {"trained": "kb"})}
    assert answers["good"]["answer"] == "yes" and len(answers["good"]["judges"]) == 3
    assert answers["short"]["answer"] == "no" and all(j["says_less"] for j in answers["short"]["judges"])
    assert answers["one"]["answer"] == "one judge"
    # more right under embedding (kb, its training verifier, is left out) and not under likelihood: one judge
    assert [j["judge"] for j in answers["trained"]["judges"]] == ["embedding", "likelihood"]
    assert answers["trained"]["answer"] == "one judge"
    assert "absent" not in answers
    # a matched-length interval above 0 withdraws the yes
    matched_up = _matched([("kb", "good", 0.01, 0.2)])
    judges = ["embedding", "likelihood", "kb"]
    assert more_right_check(differences, matched_up, judges, ["good"], {})[0]["answer"] == "no"


def _write_run(root, name, method, seed, sentences, correct=False):
    """Four questions, two responses each, every response with `sentences` unsupported reasoning sentences."""
    run = root / name
    (run / "eval").mkdir(parents=True)
    (run / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "judge": "embedding",
                                                  "train_verifier": "lexical", "metrics": {}}))
    grade = "CORRECT" if correct else "INCORRECT"
    rows = [{"benchmark": "kbqa", "id": f"q{q}", "sample": s, "grade": grade, "f1": float(correct),
             "format_ok": True, "sentence_labels": [-1] * sentences,
             "sentence_labels_by_judge": {"embedding": [-1] * sentences}, "sentence_spans": [[0, 1]] * sentences,
             "response_tokens": 10 * sentences, "near_duplicate_sentences": 0, "output": "x"}
            for q in range(4) for s in range(2)]
    (run / "eval" / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _runs(root, arms):
    _write_run(root, "base", "base", None, 3)
    for arm, sentences in arms.items():
        for seed in (0, 1):
            _write_run(root, f"{arm}_s{seed}", arm, seed, sentences)
    return root


def test_question_a_on_hand_made_runs(tmp_path):
    """base writes 3 sentences per response, fspo 1; the coin 1 (all of it), `format` 3 (none of it), `half` 2
    (part of it, share 0.5). Every question and seed alike, so every interval is a point."""
    from fspo_lite.drivers.report import load_responses, metric_cells

    runs = _runs(tmp_path, {"grpo": 3, "fspo": 1, "random": 1, "format": 3, "half": 2})
    cells = metric_cells(load_responses(runs))
    boot = {"n_resamples": 50, "seed": 0, "level": 0.95}
    answers = {c: control_check(cells, ["embedding"], c, **boot) for c in ("random", "format", "half", "none")}
    assert answers["random"]["answer"] == "all of it"
    assert answers["format"]["answer"] == "none of it"
    assert answers["half"]["answer"] == "part of it"
    length = answers["half"]["readings"][0]
    assert length["metric"] == "sentences_per_response" and length["share"] == pytest.approx(0.5)
    assert (length["control_diff"], length["fspo_diff"], length["gap_diff"]) == pytest.approx((-1.0, -2.0, -1.0))
    assert answers["none"] == {"control": "none", "answer": "n/a", "readings": []}
    # every response is wrong and every sentence unsupported in every arm: FSPO does not move those readings
    by_metric = {r["metric"]: r["answer"] for r in answers["random"]["readings"]}
    assert by_metric["accuracy"] == by_metric["step_hallucination@embedding"] == "FSPO does not move it"


def test_the_study_report_answers_both_questions(tmp_path):
    from fspo_lite.drivers.report import Bootstrap, Study, study_report

    runs = _runs(tmp_path / "runs", {"grpo": 3, "fspo": 1, "random": 1, "format": 3, "ternary": 2})
    order = ["base", "grpo", "fspo", "random", "format", "ternary"]
    out = study_report(Study(runs, order, figures_dir=tmp_path / "figures", results_dir=tmp_path / "results"),
                       Bootstrap(n_resamples=50))
    controls = out["controls"]
    assert [c["answer"] for c in controls["control_checks"]] == ["all of it", "none of it"]
    # every arm's responses are all unsupported: no arm lowers step hallucination; the shorter ones say less
    assert {r["arm"]: r["answer"] for r in controls["more_right"]} == dict.fromkeys(
        ["fspo", "random", "format", "ternary"], "no")
    text = (tmp_path / "results" / "summary.md").read_text()
    assert "## Every arm on three axes: precision, detail, accuracy" in text
    assert "| random | 0.0 [0.0, 0.0] |" in text
    assert ("| arm | accuracy % | - grpo | - grpo, matched | step hallucination % | - grpo | - grpo, matched | "
            "supported per response | - grpo | - grpo, matched |") in text
    assert {r["metric"] for r in controls["matched_axes"]} == {"accuracy", "supported_per_response@embedding"}
    assert ("- **random: all of it** of FSPO's change in reasoning length (random - base -2.00 [-2.00, -2.00], "
            "fspo - base -2.00 [-2.00, -2.00] sentences per response).") in text
    assert "| reasoning sentences per response | -2.00 [-2.00, -2.00] | -2.00 [-2.00, -2.00] |" in text
    assert "**(b) Does any arm lower step hallucination" in text and "**No arm does.**" in text
    assert "| fspo | no | holds 0 / holds 0 / n/a |" in text   # no matched-length difference: no stratum in common
    # summary.md rendered again from summary.json (make report) holds the same sections
    from fspo_lite.drivers.report.render import summary_document

    stats = json.loads(json.dumps({k: v for k, v in out.items() if k != "markdown"}))
    again = summary_document({"statistics": stats, "report": {"order": order, "title": "t"}})
    assert ("- Controls and newer rewards: (a) random: **all of it**, format: **none of it** of FSPO's change in "
            "reasoning length. (b) **No arm does.**") in again.split("## Per method")[0]
    start = text.index("## Every arm on three axes")
    assert text[start:text.index("## Paired differences")] in again


def test_a_study_without_the_new_arms_has_no_controls_section(tmp_path):
    from fspo_lite.drivers.report import Bootstrap, Study, study_report

    runs = _runs(tmp_path / "runs", {"grpo": 3, "fspo": 1})
    out = study_report(Study(runs, ["base", "grpo", "fspo"], figures_dir=tmp_path / "figures",
                             results_dir=tmp_path / "results"), Bootstrap(n_resamples=50))
    assert out["controls"] == {}
    assert "three axes" not in (tmp_path / "results" / "summary.md").read_text()


def _judged(arm, answer, **by_judge):
    """A question (b) row: judge -> (rate, supported) moves."""
    return {"arm": arm, "answer": answer, "judges": [
        {"judge": j, "rate": rate, "supported": sup, "matched": "holds 0", "more_right": rate == "down" and sup != "down",
         "says_less": sup == "down"} for j, (rate, sup) in by_judge.items()]}


def test_question_b_in_words_and_as_a_table():
    rows = [_judged("fspo", "no", embedding=("down", "down"), kb=("down", "down")),
            _judged("fspo+kb", "one judge", embedding=("down", "holds 0")),
            _judged("random", "no", embedding=("holds 0", "holds 0"), kb=("holds 0", "down"))]
    assert more_right_lead(rows).startswith("**No arm does.** More right under one judge only: fspo+kb.")
    assert more_right_lead([{**rows[0], "answer": "yes"}]).startswith("**Yes: fspo.**")
    assert more_right_lead([]).startswith("Not answered")
    table = more_right_table(rows, ["embedding", "kb"])
    assert table[2] == "| fspo | no | down / down / holds 0 | down / down / holds 0 |"
    assert table[3] == "| fspo+kb | one judge | down / holds 0 / holds 0 | - |"   # kb: its training verifier


def test_where_the_advantage_went_in_words():
    rows = [_judged("fspo", "no", embedding=("down", "down")),
            _judged("corver", "no", embedding=("down", "holds 0")),
            _judged("random", "no", embedding=("holds 0", "holds 0")),
            _judged("grpo+4x", "one judge", embedding=("down", "holds 0"))]
    mass = [{"arm": "grpo", "unsupported": 0.08}, {"arm": "fspo", "unsupported": -0.19},
            {"arm": "corver", "unsupported": -0.2}, {"arm": "random", "unsupported": 0.1},
            {"arm": "grpo+4x", "unsupported": 0.0}]
    text = mass_reading(mass, rows)
    # grpo is the baseline of (b), not an arm of it; corver pushes against unsupported sentences and does not say less
    assert text.startswith("The arms whose advantage pushes against unsupported sentences (fspo, corver): 1 of "
                           "these 2 write fewer supported sentences than grpo under at least one held-out judge "
                           "(corver does not).")
    assert text.endswith("The other arms (random, grpo+4x) push unsupported sentences up, or not at all; of these, "
                         "only grpo+4x lowers step hallucination under any held-out judge.")
    assert mass_reading([], rows) == ""


def test_question_a_lead_names_the_other_readings():
    def reading(metric, answer, share=float("nan")):
        return {"metric": metric, "answer": answer, "share": share,
                **{f"{n}_{k}": v for n in ("control", "fspo", "gap") for k, v in
                   (("diff", -0.1), ("low", -0.2), ("high", -0.05))}}

    check = {"control": "random", "answer": "none of it", "readings": [
        reading("sentences_per_response", "none of it"), reading("accuracy", "all of it", 0.59),
        reading("step_hallucination@kb", "FSPO does not move it")]}
    assert control_lead(check) == (
        "**random: none of it** of FSPO's change in reasoning length (random - base -0.10 [-0.20, -0.05], fspo - "
        "base -0.10 [-0.20, -0.05] sentences per response); all of it of its change in accuracy (share 0.59).")
    assert control_lead({"control": "format", "answer": "n/a", "readings": []}).startswith("format: not answered")
    assert control_headline([check, {"control": "format", "answer": "n/a", "readings": []}]) == (
        "random: **none of it** of FSPO's change in reasoning length.")
    assert control_headline([]).startswith("not answered")


def test_detail_at_matched_length_in_words():
    def row(method, judge, low, high):
        return {"metric": f"supported_per_response@{judge}", "method": method, "baseline": "grpo",
                "diff": (low + high) / 2, "low": low, "high": high}

    still = [row("fspo", "kb", -0.1, 0.1), row("corver", "kb", -0.2, 0.05), {**row("x", "kb", 0, 1),
                                                                              "metric": "accuracy"}]
    assert matched_detail_reading(still).startswith("At matched length no arm writes more or fewer supported")
    moved = still + [row("binary", "embedding", 0.01, 0.2), row("fspo", "likelihood", -0.3, -0.1)]
    assert matched_detail_reading(moved) == (
        "At matched length, supported sentences per response against grpo move for: binary up (embedding judge), "
        "fspo down (likelihood judge); every other arm and judge holds 0.")
    assert matched_detail_reading([]) == ""
