"""What comes from outside the config is checked before it is used: result files read back by the report and by
rejudge (fspo_lite.evaluation.result_files), the checkpoint `eval --adapter` names (the checks of resume) and the
output folders of train, eval and lite (fspo_lite.run_lock.check_output_folder). Each refusal is one line."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from fspo_lite.__main__ import main
from fspo_lite.drivers.report import load_heldout, load_responses, write_summary
from fspo_lite.evaluation import harness
from fspo_lite.evaluation.rejudge import main as rejudge_main
from fspo_lite.evaluation.result_files import ResultFileError
from fspo_lite.update.checkpoint import latest_checkpoint

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "results" / "study" / "runs"


def one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def runs(tmp_path):
    """Two committed runs (the base model and grpo seed 0) copied, heldout.json and eval/records.jsonl only."""
    for run in ("base", "grpo_s0"):
        (tmp_path / run / "eval").mkdir(parents=True)
        shutil.copy(RUNS / run / "heldout.json", tmp_path / run / "heldout.json")
        lines = (RUNS / run / "eval" / "records.jsonl").read_text(encoding="utf-8").split("\n")[:6]
        (tmp_path / run / "eval" / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def edit_heldout(folder: Path, metric: str, value) -> int:
    """Set one metric of grpo_s0/heldout.json by hand; returns the line it is on."""
    path = folder / "grpo_s0" / "heldout.json"
    record = json.loads(path.read_text())
    record["metrics"][metric] = value
    text = json.dumps(record, indent=2)
    path.write_text(text)
    return text[:text.index(f'"{metric}":')].count("\n") + 1


@pytest.mark.parametrize("value, shown", [(7.0, "7.0"), (1e308, "1e+308"), ("0.9", '"0.9"'), (float("inf"), "inf"),
                                          (True, "true"), (-0.5, "-0.5")])
def test_a_hand_edited_share_in_heldout_json_is_refused_by_file_and_line(runs, value, shown):
    line = edit_heldout(runs, "kbqa.correct", value)
    with pytest.raises(ResultFileError) as error:
        load_heldout(runs)
    assert str(error.value) == (f"{runs / 'grpo_s0' / 'heldout.json'}:{line}: kbqa.correct={shown} is not valid; valid: "
                                "a share from 0 to 1 (or NaN: not measured); correct the value or evaluate again")


def test_percentages_and_counts_have_their_own_ranges(runs):
    edit_heldout(runs, "kbqa.decomp_all_correct", 70.0)
    edit_heldout(runs, "kbqa.response_tokens", 300.0)
    edit_heldout(runs, "kbqa.correct", float("nan"))  # nothing measured: the evaluation writes NaN
    assert len(load_heldout(runs)) == 2
    edit_heldout(runs, "kbqa.decomp_all_correct", 700.0)
    with pytest.raises(ResultFileError, match="decomp_all_correct=700.0 is not valid; valid: a percentage"):
        load_heldout(runs)


@pytest.mark.parametrize("field, value, valid", [("f1", 7.0, "a share from 0 to 1"), ("em", "1", "a share"),
                                                 ("sentence_labels", [1, 5], "a list of labels -1, 0 or 1"),
                                                 ("sentence_spans", [[0, 10**9]], "a list of .start, end. character offsets"),
                                                 ("response_tokens", 1e308, "a whole number >= 0")])
def test_a_hand_edited_record_is_refused_by_file_and_line(runs, field, value, valid):
    path = runs / "grpo_s0" / "eval" / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[2][field] = value
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    with pytest.raises(ResultFileError, match=f"records.jsonl:3: {field}=.* is not valid; valid: {valid}"):
        load_responses(runs)


def test_rejudge_refuses_a_bad_record_in_one_line_and_leaves_the_file(runs, capsys):
    path = runs / "grpo_s0" / "eval" / "records.jsonl"
    text = path.read_text(encoding="utf-8").replace('"f1": 0.0', '"f1": 7.0', 1)
    path.write_text(text, encoding="utf-8")
    assert rejudge_main(["--runs", str(runs), "--judge", "lexical"]) == 1
    assert " f1=7.0 is not valid" in one_line(capsys)
    assert path.read_text(encoding="utf-8") == text


def test_a_summary_json_with_an_absurd_number_is_refused(tmp_path):
    summary = json.loads((ROOT / "results" / "summary.json").read_text())
    method = next(iter(summary["methods"]))
    summary["methods"][method]["accuracy"] = 1e308
    (tmp_path / "summary.json").write_text(json.dumps(summary, indent=2))
    with pytest.raises(ResultFileError, match=r"summary.json:\d+: accuracy=1e\+308 is not valid; valid: a share"):
        write_summary(tmp_path)
    assert not (tmp_path / "summary.md").exists()


def test_the_committed_results_pass(tmp_path):
    shutil.copy(ROOT / "results" / "study" / "summary.json", tmp_path / "summary.json")
    write_summary(tmp_path)
    assert len(load_heldout(RUNS)) > 10


# ---- eval --adapter: resume's checkpoint checks ------------------------------------------------------------------
class Loaded(Exception):
    """The evaluation got as far as loading the model."""


@pytest.fixture
def checkpoint(tmp_path, tiny_policy, monkeypatch):
    """A training checkpoint of the tiny model; the evaluation's model loader replaced by Loaded."""
    from fspo_lite.config import load_config
    from fspo_lite.update.trainer import Trainer

    from test_resume_provenance import EXAMPLES

    config = load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={tmp_path / 'run'}",
                                                               "train.steps=1", "rollout.max_new_tokens=8"])
    trainer = Trainer(config, copy.deepcopy(tiny_policy[0]), tiny_policy[1], EXAMPLES, progress=False)
    trainer.step_index = 1
    trainer.save()

    def loaded(*args, **kwargs):
        raise Loaded()
    monkeypatch.setattr(harness, "load_eval_model", loaded)
    return latest_checkpoint(tmp_path / "run")


def evaluate_adapter(adapter: Path, output: Path) -> int:
    return main(["eval", "--config", str(ROOT / "configs" / "tiny.yaml"), "--adapter", str(adapter), "--benchmarks",
                 "kbqa", "--limit", "1", "--output", str(output)])


def test_eval_refuses_a_checkpoint_with_corrupted_weights(checkpoint, tmp_path, capsys):
    weights = checkpoint / "model" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    for adapter in (checkpoint, checkpoint / "model"):
        assert evaluate_adapter(adapter, tmp_path / "eval") == 1
        assert one_line(capsys) == (f"fspo_lite: error: checkpoint {checkpoint} is corrupt: "
                                    "model/adapter_model.safetensors does not match its SHA-256 in manifest.json (the "
                                    "file changed after it was written)")


def test_eval_refuses_a_checkpoint_without_its_manifest(checkpoint, tmp_path, capsys):
    (checkpoint / "manifest.json").unlink()
    assert evaluate_adapter(checkpoint, tmp_path / "eval") == 1
    assert "is partial: no manifest.json" in one_line(capsys)


def test_eval_accepts_a_plain_adapter_folder(checkpoint, tmp_path, capsys):
    plain = shutil.copytree(checkpoint / "model", tmp_path / "adapter")
    assert not (plain / "manifest.json").exists() and (plain / "adapter_config.json").exists()
    assert evaluate_adapter(plain, tmp_path / "eval") == 1
    assert one_line(capsys).startswith("fspo_lite: error: Loaded")  # it got as far as loading the model


# ---- output folders --------------------------------------------------------------------------------------------
@pytest.fixture
def no_model(monkeypatch):
    """The model loaders of train and eval and the notebook runner replaced by a failure."""
    import papermill

    from fspo_lite.update import trainer

    def started(*args, **kwargs):
        raise AssertionError("the work started")
    monkeypatch.setattr(harness, "load_eval_model", started)
    monkeypatch.setattr(trainer, "load_policy", started)
    monkeypatch.setattr(papermill, "execute_notebook", started)


def long_folder(tmp_path: Path) -> Path:
    return tmp_path.joinpath(*["d" * 200] * 20)


def commands(folder: Path) -> dict[str, list[str]]:
    tiny = str(ROOT / "configs" / "tiny.yaml")
    return {"eval": ["eval", "--config", tiny, "--benchmarks", "kbqa", "--limit", "1", "--output", str(folder)],
            "train": ["train", "--config", tiny, "--set", f"train.output_dir={folder}"],
            "lite": ["lite", "--profile", "quick", "--out", str(folder)]}


@pytest.mark.parametrize("command", ["eval", "train", "lite"])
@pytest.mark.parametrize("case", ["name too long", "path too long", "a file in the way", "not writable"])
def test_an_output_folder_that_cannot_be_written_is_refused_before_the_work(command, case, tmp_path, capsys,
                                                                            no_model):
    if case == "not writable" and not _unwritable().exists():
        pytest.skip("no read-only folder on this machine")
    (tmp_path / "file").write_text("x")
    folder = {"name too long": tmp_path / ("n" * 300) / "out", "path too long": long_folder(tmp_path),
              "a file in the way": tmp_path / "file" / "out", "not writable": _unwritable() / "out"}[case]
    assert main(commands(folder)[command]) == 1
    line = one_line(capsys)
    assert line.startswith("fspo_lite: error: output folder ") and " cannot be written: " in line
    assert {"name too long": "a folder name of 300 bytes", "path too long": "with the files written inside it",
            "a file in the way": "is a file, not a folder", "not writable": "is not writable"}[case] in line
    assert len(line) < 400


def _unwritable() -> Path:
    """A folder this process cannot write: /sys/kernel (read-only even for root in a container), else none."""
    import os

    folder = Path("/sys/kernel")
    return folder if folder.is_dir() and not os.access(folder, os.W_OK) or _probe_fails(folder) else Path("/absent")


def _probe_fails(folder: Path) -> bool:
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            return False
    except OSError:
        return True
