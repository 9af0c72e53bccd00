"""Files the report reads are checked by file, line and field: audit.json (an interval with low above high,
+inf, markup in a name), the evaluation data rejudge matches records to (an id given twice) and rejudge's
--threshold (nan, out of range)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fspo_lite.data.examples import QAExample, save_examples
from fspo_lite.drivers.report.audit_file import read_audit
from fspo_lite.drivers.report.readme import load
from fspo_lite.drivers.report.render import write_summary
from fspo_lite.evaluation import rejudge
from fspo_lite.evaluation.result_files import ResultFileError

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "results" / "study"


@pytest.fixture
def study(tmp_path):
    if not (STUDY / "audit.json").exists():
        pytest.skip("no committed study results")
    for name in ("summary.json", "audit.json"):
        shutil.copyfile(STUDY / name, tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("field, value, named", [
    ("low", 0.5, r"low/diff/high=\[0.5, 0.10"),                      # low above diff and high
    ("high", float("inf"), "high=inf is not valid"),
    ("diff", float("nan"), "diff=nan is not valid"),
    ("methods", ["grpo", "<script>alert(1)</script>"], "methods="),
    ("difference", "fspo - grpo <b>", "difference="),
    ("items", -3, "items=-3"),
    ("level", 1.5, "level=1.5"),
    ("judge_agreement", {"<img src=x>": {"agree": 0.5, "n": 3}}, "judge_agreement"),
])
def test_a_hostile_audit_is_refused_by_file_line_and_field(study, field, value, named):
    """Before: low above high rewrote the README's verdict silently; a script tag reached the verdict block."""
    audit = json.loads((study / "audit.json").read_text())
    audit[field] = value
    (study / "audit.json").write_text(json.dumps(audit, indent=1))
    before = (study / "summary.md").read_bytes() if (study / "summary.md").exists() else None
    for reader in (lambda: read_audit(study / "audit.json"), lambda: load(study), lambda: write_summary(study)):
        with pytest.raises(ResultFileError, match=rf"audit.json:\d+: {named}") as error:
            reader()
        assert "\n" not in str(error.value)
    assert ((study / "summary.md").read_bytes() if (study / "summary.md").exists() else None) == before


def test_the_committed_audit_passes(study):
    assert read_audit(study / "audit.json")["methods"] == ["grpo", "fspo"]


def test_rejudge_refuses_an_id_given_to_two_questions(tmp_path):
    """Before: the second question's evidence replaced the first's, and sentences were judged against it."""
    data = tmp_path / "kbqa.jsonl"
    save_examples([QAExample("q1", "Who?", ["A"], "A did it."), QAExample("q1", "Where?", ["B"], "In B.")], data)
    (tmp_path / "runs").mkdir()
    with pytest.raises(ResultFileError, match="id 'q1' is given to more than one question"):
        rejudge.rejudge_runs(tmp_path / "runs", verifier=None, judge="kb", data=str(data))


@pytest.mark.parametrize("threshold", ["nan", "inf", "-0.1", "1.5", "half"])
def test_rejudge_refuses_a_threshold_that_is_not_a_probability(tmp_path, threshold, capsys):
    """Before: --threshold nan labelled every sentence unsupported and wrote it."""
    with pytest.raises(SystemExit) as stop:
        rejudge.main(["--runs", str(tmp_path), "--threshold", threshold])
    assert stop.value.code == 2
    assert "is not a number from 0 to 1" in capsys.readouterr().err
