"""One error style: a mistake in what the user typed or named is one line, `fspo_lite: error: <message>`, saying what
to change, with no Python exception name, and it comes before any model loads (each case below once printed a
`FileNotFoundError:` or `ValueError:` line, another prefix, or a line on stdout)."""

from __future__ import annotations

import json
import re

import pytest

from fspo_lite.__main__ import main
from fspo_lite.drivers.cli_help import USER_ERRORS, MissingFileError, error_line

STYLE = re.compile(r"^fspo_lite: error: (?!\w+(Error|Exception): )\S.*$")
"""A user error's line: the prefix and the message, no `SomeError: ` after the prefix, no --debug pointer."""


def error_of(argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, the one `fspo_lite:` line on stderr) of the CLI run in this process."""
    status = main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fspo_lite:")]
    assert len(lines) == 1, lines
    return status, lines[0]


@pytest.fixture
def blocked(tmp_path):
    """A path whose folder cannot be made: a file stands where the folder belongs."""
    (tmp_path / "a_file").write_text("")
    return tmp_path / "a_file" / "out.json"


def test_the_style_tells_a_user_error_from_a_crash():
    assert STYLE.match("fspo_lite: error: no profile 'x': use one of lite, quick")
    assert not STYLE.match("fspo_lite: error: FileNotFoundError: x: No such file or directory (run with --debug ...)")
    assert not STYLE.match(error_line(KeyError("x")))
    assert "MissingFileError" in USER_ERRORS and issubclass(MissingFileError, FileNotFoundError)
    assert STYLE.match(error_line(MissingFileError("prompt list 'p.json' not found")))


@pytest.mark.parametrize("argv, message", [
    (["eval", "--benchmarks", "kbqa,nope", "--limit", "1"],
     "unknown benchmark 'nope' in evaluation.benchmarks; choose from kbqa"),
    (["sweep-prompts", "--prompts", "{tmp}/missing.json"], "prompt list '{tmp}/missing.json' not found; use 'builtin'"),
    (["sweep-prompts", "--prompts", "{tmp}/bad.json"], "prompt list '{tmp}/bad.json': not a JSON object"),
    (["sweep-prompts", "--prompts", "{tmp}/empty.txt"], "prompt list '{tmp}/empty.txt': no prompts found"),
    (["train", "--set", "model.name=tiny", "--set", "data.filter_path={tmp}/missing.json"],
     "data.filter_path='{tmp}/missing.json': no such file; write it with `fspo-lite filter"),
    (["train", "--set", "model.name=tiny", "--set", "data.filter_path={tmp}/bad.json"],
     "data.filter_path='{tmp}/bad.json': not a difficulty-filter file"),
    (["audit", "score", "--items", "{tmp}/missing.jsonl"], "audit score: --items {tmp}/missing.jsonl: no such file"),
    (["lite", "--profile", "no-such-profile"], "no profile 'no-such-profile': use one of"),
    (["lite", "--set", "07.seeds=[0]"], "profile override '07.seeds=[0]': '07' names no single notebook"),
    (["lite", "--set", "03seeds"], "profile override '03seeds' must look like NB.PARAM=VALUE"),
    (["data", "prepare", "no_such_file"], "no_such_file: unknown data file 'no_such_file'; choose from"),
])
def test_a_user_mistake_is_one_plain_line(argv, message, tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"a": ')
    (tmp_path / "empty.txt").write_text("\n\n")
    status, line = error_of([arg.replace("{tmp}", str(tmp_path)) for arg in argv], capsys)
    assert status != 0 and STYLE.match(line), line
    assert message.replace("{tmp}", str(tmp_path)) in line


@pytest.mark.parametrize("command, option", [
    (["filter", "--samples", "1", "--output"], "--output or filter.output"),
    (["klcf-checklist", "--samples", "1", "--output"], "--output or klcf.checklist_path"),
])
def test_an_output_file_that_cannot_be_written_stops_before_any_sampling(command, option, blocked, capsys):
    status, line = error_of([*command, str(blocked), "--set", "model.name=tiny", "--set", "data.limit=1"], capsys)
    assert status == 1 and STYLE.match(line), line
    assert line.endswith(f"is a file, not a folder; choose another {option}")


def test_an_audit_mistake_has_the_prefix_too(tmp_path, capsys):
    status, line = error_of(["audit", "sample", "--runs", str(tmp_path), "--out", str(tmp_path / "items.jsonl"),
                             "--key", str(tmp_path / "key.json"), "--n", "2"], capsys)
    assert status == 2 and STYLE.match(line) and line.startswith("fspo_lite: error: audit sample: method 'grpo'")


def test_calibration_without_its_data_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FSPO_LITE_DATA", str(tmp_path))
    status, line = error_of(["verifiers", "calibrate", "--verifiers", "lexical"], capsys)
    assert status == 1 and STYLE.match(line) and "data prepare halueval_qa_train" in line


def test_a_filter_file_is_read_with_its_kept_ids(tmp_path):
    from fspo_lite.data.training_set import filter_kept_ids

    path = tmp_path / "filter.json"
    path.write_text(json.dumps({"kind": "filter", "kept_ids": ["q1", "q2"]}))
    assert filter_kept_ids(path) == {"q1", "q2"}
