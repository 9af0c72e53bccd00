"""The README's numbers and the committed summaries come from the committed result files, and say one verdict.

`make report` (fspo_lite.drivers.report.readme) renders the README's result blocks and results/{,study/}summary.md
from results/summary.json, results/study/summary.json and results/study/audit.json; these tests fail when any of
them was edited by hand or a result file changed without rendering them again.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from fspo_lite.drivers.report import readme
from fspo_lite.drivers.report.render import summary_document, verdict

ROOT = Path(__file__).resolve().parents[1]


def test_readme_blocks_and_summaries_equal_their_rendering_from_the_result_files():
    assert readme.differences(ROOT) == []


@pytest.fixture
def copy(tmp_path):
    for name in ("README.md", "results/summary.json", "results/summary.md", "results/study/summary.json",
                 "results/study/summary.md", "results/study/audit.json", "results/study/judge_validity.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    return tmp_path


def test_a_typed_number_in_the_readme_is_caught(copy):
    text = (copy / "README.md").read_text()
    block = text.split("<!-- results:study-table -->", 1)[1].split("<!-- /results:study-table -->", 1)[0]
    first = block.split("[", 1)[1].split(",", 1)[0]  # the first interval's lower end
    (copy / "README.md").write_text(text.replace(block, block.replace(f"[{first},", "[-99.9,", 1)))
    assert readme.differences(copy) == ["README.md: a results block differs from the result files"]
    readme.write(copy)
    assert readme.differences(copy) == []


def test_a_changed_result_file_makes_the_summary_and_readme_stale(copy):
    path = copy / "results/study/audit.json"
    audit = json.loads(path.read_text())
    audit.update(diff=-0.2, low=-0.3, high=-0.1)  # a consistent interval: an inconsistent one is refused
    path.write_text(json.dumps(audit))
    stale = readme.differences(copy)
    assert "README.md: a results block differs from the result files" in stale
    assert any(line.startswith("results/study/summary.md") for line in stale)


def test_readme_and_study_summary_open_with_the_same_verdict_and_it_includes_the_audit():
    text = (ROOT / "README.md").read_text()
    summary = (ROOT / "results/study/summary.md").read_text()
    headline = summary.split("## Verdict", 1)[1].strip().split("\n", 1)[0]
    assert headline.startswith("**") and headline in text
    assert "Blind audit" in summary.split("## Per method", 1)[0]
    assert not summary.startswith("# Lite reproduction")  # the study's title is its own


# ---- the verdict's rules on hand-made summaries -------------------------------------------------------
def _summary(raw, matched=None, smoke=False):
    """fspo - grpo step hallucination (diff, low, high) by the embedding judge, optionally at matched length."""
    diff, low, high = raw
    stats = {"judges": ["embedding"],
             "differences": [{"metric": "step_hallucination@embedding", "method": "fspo", "baseline": "grpo",
                              "diff": diff, "low": low, "high": high}],
             "matched_length": ([{"judge": "embedding", "method": "fspo", "diff": matched[0], "low": matched[1],
                                  "high": matched[2]}] if matched else [])}
    return {"report": {"smoke": smoke, "order": ["grpo", "fspo"]}, "statistics": stats,
            "methods": {"grpo": {"seeds": 1, "step_hallucination": 0.4}, "fspo": {"seeds": 1, "step_hallucination": 0.3}}}


def _audit(diff, low, high):
    return {"items": 10, "difference": "fspo - grpo", "diff": diff, "low": low, "high": high}


def test_verdict_a_drop_that_holds_at_matched_length_and_by_hand():
    result = verdict(_summary((-0.1, -0.15, -0.05), (-0.08, -0.12, -0.02)), _audit(-0.1, -0.2, -0.01))
    assert result["headline"] == ("fspo lowers held-out step hallucination against grpo, also at matched length; "
                                  "the blind audit confirms it.")
    assert any(line.startswith("Blind audit (10 sentences") and "-10.0 [-20.0, -1.0]" in line
               for line in result["lines"])


def test_verdict_a_drop_that_length_explains_and_the_audit_does_not_confirm():
    result = verdict(_summary((-0.1, -0.15, -0.05), (0.01, -0.05, 0.07)), _audit(0.1, -0.03, 0.24))
    assert result["headline"].startswith("fspo makes reasoning shorter")
    assert result["headline"].endswith("and the blind audit does not confirm it.")


def test_verdict_no_resolved_difference_and_no_audit():
    result = verdict(_summary((-0.05, -0.12, 0.02)))
    assert result["headline"].startswith("No difference in held-out step hallucination")
    assert verdict(_summary((-0.1, -0.15, -0.05)))["headline"].endswith("(not checked by hand).")


def test_verdict_of_a_smoke_test_and_of_undefined_numbers():
    assert "mean nothing" in verdict(_summary((math.nan, math.nan, math.nan), smoke=True))["headline"]
    assert verdict(_summary((math.nan, math.nan, math.nan)))["headline"].startswith("No verdict")


def test_summary_of_a_smoke_test_says_so_and_has_no_bold_verdict_on_nan():
    summary = _summary((math.nan, math.nan, math.nan), smoke=True)
    summary["methods"] = {m: {"seeds": 1, "accuracy": None, "step_hallucination": None} for m in ("grpo", "fspo")}
    summary["goal"] = {"method": "fspo", "baseline": "grpo", "relative_drop": None, "accuracy_delta_points": None,
                       "met": False, "target": "t"}
    text = summary_document(summary)
    assert text.startswith("# Smoke test of the notebook sequence: the numbers mean nothing")
    assert "not met" not in text and "caution goal" not in text and "nan" not in text
    assert "| grpo | 1 | n/a | n/a |" in text
