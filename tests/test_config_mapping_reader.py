"""The one reader of a run's or checkpoint's config.yaml (fspo_lite.config_load.read_config_mapping) and its callers:
the study report's run settings (defaults when the file is missing), a checkpoint's provenance (an error when it is
missing), the model an adapter was trained on (None), and the resume check (the current config's values)."""
from pathlib import Path

import pytest

from fspo_lite.config import Config
from fspo_lite.config_checks import ConfigError
from fspo_lite.config_load import read_config_mapping
from fspo_lite.drivers.report.evidence import run_settings
from fspo_lite.evaluation.result_files import ResultFileError
from fspo_lite.models.adapter_origin import trained_model_name
from fspo_lite.update.checkpoint import CheckpointError, checkpoint_config

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = {
    "a list": "- a\n- b\n",
    "a scalar": "42\n",
    "empty": "",
    "unclosed": "a: [unclosed\n",
    "an alias": "a: &x [1, 2]\nb: *x\n",
    "a duplicate key": "model: {name: a}\nmodel: {name: b}\n",
    "a python tag": "model: !!python/object/apply:os.system ['true']\n",
    "huge integer": "train: {steps: " + "9" * 5000 + "}\n",
    "deep": "a: " + "[" * 200 + "]" * 200 + "\n",
}


def test_a_saved_config_reads_back_as_the_mapping_it_was_written_from(tmp_path):
    config = Config()
    config.save(tmp_path / "config.yaml")
    values = read_config_mapping(tmp_path / "config.yaml")
    assert values["model"]["name"] == config.model.name and values["train"]["steps"] == config.train.steps


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_config_yaml_is_one_line_naming_the_file_for_every_caller(tmp_path, name):
    file = tmp_path / "config.yaml"
    file.write_text(HOSTILE[name], encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_config_mapping(file)
    line = str(error.value)
    assert "\n" not in line and str(file) in line and len(line) < 400
    with pytest.raises(ResultFileError, match="config.yaml"):
        run_settings(tmp_path)
    with pytest.raises(CheckpointError, match="config.yaml holds no readable settings"):
        checkpoint_config(tmp_path)
    (tmp_path / "model").mkdir()
    assert trained_model_name(tmp_path) is None


def test_bytes_that_are_not_utf8_are_one_line(tmp_path):
    file = tmp_path / "config.yaml"
    file.write_bytes(b"model:\n  name: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_config_mapping(file)


def test_a_missing_file_means_defaults_for_the_report_and_an_error_for_a_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_config_mapping(tmp_path / "config.yaml")
    assert run_settings(tmp_path) == {"max_new_tokens": None, "evidence_in_prompt": False, "heldout_evidence": False}
    with pytest.raises(CheckpointError, match="has no config.yaml"):
        checkpoint_config(tmp_path)
    assert trained_model_name(tmp_path) is None


def test_every_committed_run_config_reads_with_the_strict_reader():
    files = sorted((ROOT / "results").rglob("config.yaml"))
    assert files, "the committed study runs have config.yaml files"
    for file in files:
        assert isinstance(read_config_mapping(file).get("model"), dict), file
