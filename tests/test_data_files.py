"""The data folder (`fspo_lite.data.files`, `python -m fspo_lite data`) and a project that stands alone."""

import json
import re
from pathlib import Path

import pytest

from fspo_lite.data.examples import DataError, load_examples
from fspo_lite.data.files import (
    DATA_FILES,
    DataFolderError,
    _gsm8k,
    _halueval,
    _hotpotqa,
    data_dir,
    prepare,
    require,
)

ROOT = Path(__file__).resolve().parents[1]


def _write(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_data_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FSPO_LITE_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.delenv("FSPO_LITE_DATA")
    assert data_dir() == Path("~/.cache/fspo-lite/data").expanduser()


def test_prepare_from_a_local_copy_checks_rows_and_keeps_existing(tmp_path):
    source, folder = tmp_path / "copy", tmp_path / "folder"
    _write(source / "gsm8k_test.jsonl", [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "4"}])
    path, rows, origin = prepare("gsm8k_test", source, folder)
    assert path == folder / "gsm8k_test.jsonl" and rows == 2 and origin.startswith("copied from")
    _write(source / "gsm8k_test.jsonl", [{"question": "3+3?", "answer": "6"}])
    assert prepare("gsm8k_test", source, folder)[1:] == (2, "already present")  # kept without --force
    assert prepare("gsm8k_test", source, folder, force=True)[1] == 1
    assert not list(folder.glob("*.partial"))


@pytest.mark.parametrize("rows, message", [
    ([{"question": "no answer"}], "missing field(s) answer"),
    (["a string"], "expected a JSON object"),
    ([], "no rows"),
])
def test_prepare_refuses_malformed_copies_and_writes_nothing(tmp_path, rows, message):
    source, folder = tmp_path / "copy", tmp_path / "folder"
    _write(source / "gsm8k_test.jsonl", rows)
    with pytest.raises(DataFolderError, match=re.escape(message)):
        prepare("gsm8k_test", source, folder)
    assert not (folder / "gsm8k_test.jsonl").exists()


def test_prepare_errors_say_what_to_do(tmp_path):
    with pytest.raises(DataFolderError, match="unknown data file 'bogus'; choose from hotpotqa_train"):
        prepare("bogus", tmp_path, tmp_path)
    with pytest.raises(DataFolderError, match="not on the hub: prepare it with --from DIR"):
        prepare("halluqa", None, tmp_path)
    with pytest.raises(DataFolderError, match="does not exist"):
        prepare("halluqa", tmp_path / "nowhere", tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "halluqa.jsonl").write_text('{"question_id": 1,\n')
    with pytest.raises(DataFolderError, match=r"halluqa.jsonl:1: broken JSON"):
        prepare("halluqa", tmp_path / "broken", tmp_path / "folder")


def test_data_specs_read_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("FSPO_LITE_DATA", str(tmp_path))
    with pytest.raises(DataError, match="data prepare hotpotqa_train"):
        load_examples("data:hotpotqa_train")
    _write(tmp_path / "hotpotqa_train.jsonl", [{"id": "h1", "question": "Q?", "answer": "A", "knowledge": "A is A."}])
    assert require("hotpotqa_train") == tmp_path / "hotpotqa_train.jsonl"
    (example,) = load_examples("data:hotpotqa_train")
    assert (example.id, example.answers, example.evidence, example.task) == ("h1", ["A"], "A is A.", "qa")


def test_hub_rows_convert_to_the_folder_format():
    hotpot = {"id": "5a8", "question": "Who?", "answer": "Ann",
              "supporting_facts": {"title": ["B", "A", "B"], "sent_id": [0, 0, 1]},
              "context": {"title": ["A", "B", "C"], "sentences": [["a1. ", "a2."], ["b1."], ["c1."]]}}
    assert _hotpotqa(hotpot, 0) == {"id": "5a8", "question": "Who?", "answer": "Ann",
                                    "knowledge": "B: b1.\n\nA: a1. a2."}
    assert _gsm8k({"question": "q", "answer": "so 1,234 + 1 = 1,235\n#### 1,235"}, 0) == {"question": "q",
                                                                                          "answer": "1235"}
    row = {"question": "q", "knowledge": "k", "right_answer": "r", "hallucinated_answer": "h"}
    drawn = [_halueval(row, i) for i in range(200)]
    assert drawn == [_halueval(row, i) for i in range(200)]  # the same draw on every machine
    assert all(d["candidate"] == ("h" if d["candidate_is_hallucinated"] else "r") for d in drawn)
    assert 70 < sum(d["candidate_is_hallucinated"] for d in drawn) < 130
    for name, entry in DATA_FILES.items():
        assert entry.filename == f"{name}.jsonl" and entry.fields


def test_team_copies_pass_the_row_check(tmp_path):
    """Every file of the team's data folder (when present) passes `prepare --from`'s row check."""
    folder = data_dir()
    present = [name for name in DATA_FILES if (folder / f"{name}.jsonl").is_file()]
    if not present:
        pytest.skip(f"no data folder files at {folder}")
    for name in present:
        assert prepare(name, folder, tmp_path)[1] > 0


def test_data_command_lists_and_prepares(tmp_path, monkeypatch, capsys):
    from fspo_lite.__main__ import main

    source = _write(tmp_path / "copy" / "math500_test.jsonl", [{"question": "q", "answer": "1", "subject": "x"}])
    monkeypatch.setenv("FSPO_LITE_DATA", str(tmp_path / "folder"))
    assert main(["data", "prepare", "math500_test", "--from", str(source.parent)]) == 0
    assert "math500_test: 1 rows, copied from" in capsys.readouterr().out
    assert main(["data", "list"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"math500_test\s+present", listing) and re.search(r"halluqa\s+missing", listing)
    assert main(["data", "prepare", "halluqa"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--from DIR" in error


def test_every_cli_lists_its_choices(capsys):
    from fspo_lite.__main__ import main
    from fspo_lite.evaluation.benchmarks import BENCHMARKS
    from fspo_lite.scoring.methods import REWARD_METHODS
    from fspo_lite.scoring.verifiers import VERIFIERS

    def help_text(*args):
        with pytest.raises(SystemExit) as done:
            main([*args, "--help"])
        assert done.value.code == 0
        return " ".join(capsys.readouterr().out.split())  # argparse wraps lines

    assert all(name in help_text("eval") for name in BENCHMARKS)
    assert all(name in help_text("train") for name in REWARD_METHODS + tuple(VERIFIERS))
    assert all(name in help_text("verifiers", "benchmark") for name in VERIFIERS)
    assert all(name in help_text("lite") for name in ("lite", "quick", "colab_t4"))
    assert all(name in help_text("data", "prepare") for name in DATA_FILES)


def test_the_project_stands_alone():
    """Nothing a user's clone has may need the team's folder beside the repository."""
    places = [ROOT / "README.md", ROOT / "Makefile", ROOT / "environment.yml", ROOT / "pyproject.toml"]
    for folder in ("fspo_lite", "docs", "configs", "notebooks", "data"):
        places += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in
                   (".py", ".md", ".yaml", ".yml", ".ipynb", ".toml", ".txt")]
    offenders = [str(p.relative_to(ROOT)) for p in places if re.search(r"\.\./shared|ALGORITHMS\.md",
                                                                       p.read_text(encoding="utf-8"))]
    assert offenders == []
