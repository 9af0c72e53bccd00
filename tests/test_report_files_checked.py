"""Files the report reads are checked by file, line and field: audit.json (an interval with low above high,
+inf, markup in a name), the evaluation data rejudge matches records to (an id given twice), rejudge's
--threshold (nan, out of range), and a run's metrics.jsonl and samples.jsonl (NaN or infinite numbers, empty
files, bytes that are not UTF-8, steps that are not whole numbers >= 1 or go backwards; a torn last line dropped)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fspo_lite.data.examples import QAExample, save_examples
from fspo_lite.drivers.report import flip_example, load_training
from fspo_lite.drivers.report.audit_file import read_audit
from fspo_lite.drivers.report.readme import load
from fspo_lite.drivers.report.render import write_summary
from fspo_lite.evaluation import rejudge
from fspo_lite.evaluation.result_files import ResultFileError
from fspo_lite.logs.training_log import RunLogError, read_metrics, read_samples

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


SAMPLE = {"step": 1, "question": "q?", "gold": ["a"], "response": "It is a.", "reward": 1.0, "tokens": ["It", " is"],
          "offsets": [[0, 2], [2, 5]], "advantage": 0.5, "token_advantages": [0.5, -0.5],
          "sentence_labels": [1], "sentence_spans": [[0, 8]], "method_details": {}}


def write_lines(path: Path, *lines) -> Path:
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines))
    return path


@pytest.mark.parametrize("lines, named", [
    (['{"step": 1, "reward": 0.5}', '{"step": 2, "reward": NaN}', '{"step": 3, "reward": 0.5}'],
     r"metrics.jsonl:2: reward=nan is not a finite number"),
    (['{"step": 1, "loss": Infinity}', '{"step": 2, "loss": 1.0}'], r"metrics.jsonl:1: loss=inf is not a finite"),
    (['{"step": 1, "reward": -Infinity}', '{"step": 2}'], r"metrics.jsonl:1: reward=-inf"),
    (['{"step": 1}', b'{"step": 2, "note": "\xff\xfe"}', '{"step": 3}'], r"metrics.jsonl:2: not UTF-8 text"),
    (['{"step": 1}', '{"step": 2.5}', '{"step": 3}'], r"metrics.jsonl:2: its step is 2.5, not a whole number >= 1"),
    (['{"step": 0}', '{"step": 1}'], r"metrics.jsonl:1: its step is 0"),
    (['{"step": 1}', '{"step": "2"}', '{"step": 3}'], r"metrics.jsonl:2: its step is '2'"),
    (['{"step": 1}', '{"step": 1e9999}', '{"step": 3}'], r"metrics.jsonl:2: its step is inf"),
    (['{"step": 1}', '{"step": 3}', '{"step": 2}'], r"metrics.jsonl:3: step=2 does not follow the previous row's step 3"),
    (['{"step": 1}', '{"step": 2}', '{"step": 1}', '{"step": 2}'], r"metrics.jsonl:3: step=1 does not follow"),
    ([], r"metrics.jsonl: no rows"),
    (['{"step": 1, "loss": 0.'], r"metrics.jsonl: only a torn line"),
])
def test_a_hostile_metrics_file_is_refused_by_file_line_and_field(tmp_path, lines, named):
    """Before: all of these were read without a word (NaN rows plotted as gaps, an empty run as no run)."""
    write_lines(tmp_path / "metrics.jsonl", *lines)
    with pytest.raises(RunLogError, match=named) as error:
        read_metrics(tmp_path)
    assert "\n" not in str(error.value)


def test_load_training_refuses_a_run_with_a_nan_metric(tmp_path):
    good, bad = tmp_path / "grpo_s0", tmp_path / "fspo_s0"
    good.mkdir(), bad.mkdir()
    write_lines(good / "metrics.jsonl", '{"step": 1, "reward": 0.5}', '{"step": 2, "reward": 0.75}')
    write_lines(bad / "metrics.jsonl", '{"step": 1, "reward": 0.5}', '{"step": 2, "kl": NaN}')
    with pytest.raises(RunLogError, match=r"fspo_s0/metrics.jsonl:2: kl=nan"):
        load_training(tmp_path)
    bad.joinpath("metrics.jsonl").unlink()
    assert list(load_training(tmp_path)["step"]) == [1, 2]


@pytest.mark.parametrize("change, named", [
    ({"reward": float("nan")}, "samples.jsonl:2: reward=nan"),
    ({"advantage": float("inf")}, "samples.jsonl:2: advantage=inf"),
    ({"token_advantages": [0.5, float("-inf")]}, r"samples.jsonl:2: token_advantages\[1\]=-inf"),
    ({"method_details": {"score": float("nan")}}, r"samples.jsonl:2: method_details.score=nan"),
    ({"step": 1}, "samples.jsonl:2: step=1 does not follow the previous row's step 1"),
    ({"step": -4}, "samples.jsonl:2: its step is -4"),
])
def test_a_hostile_samples_file_is_refused_by_file_line_and_field(tmp_path, change, named):
    write_lines(tmp_path / "samples.jsonl", json.dumps(SAMPLE), json.dumps({**SAMPLE, "step": 2, **change}),
                json.dumps({**SAMPLE, "step": 3}))
    with pytest.raises(RunLogError, match=named):
        read_samples(tmp_path)


def test_an_empty_samples_file_is_refused_and_a_missing_one_has_no_rows(tmp_path):
    assert read_samples(tmp_path) == []
    (tmp_path / "samples.jsonl").write_text("")
    with pytest.raises(RunLogError, match="samples.jsonl: no rows"):
        read_samples(tmp_path)


def test_a_torn_last_line_is_still_dropped(tmp_path):
    write_lines(tmp_path / "samples.jsonl", json.dumps(SAMPLE), json.dumps({**SAMPLE, "step": 2}), b'{"step": 3, "re\xff')
    assert [row["step"] for row in read_samples(tmp_path)] == [1, 2]
    write_lines(tmp_path / "metrics.jsonl", '{"step": 1, "loss": null}', '{"step": 2, "loss": 0.5}', '{"step": 3, "lo')
    assert read_metrics(tmp_path) == [{"step": 1, "loss": None}, {"step": 2, "loss": 0.5}]


def test_a_skipped_steps_sample_is_written_with_nulls_and_read_back(tmp_path):
    """The writer logs a number a step could not compute as null (as metrics.jsonl does), so a real run's NaN reward
    never reaches the file, and the flip plot passes over the row."""
    from fspo_lite.logs.training_log import append_jsonl, finite_or_null

    nan = float("nan")
    row = finite_or_null({**SAMPLE, "reward": nan, "advantage": nan, "token_advantages": [nan, float("inf")]})
    append_jsonl(tmp_path / "samples.jsonl", row)
    rows = read_samples(tmp_path)
    assert rows[0]["reward"] is None and rows[0]["token_advantages"] == [None, None]
    assert flip_example(rows) is None
