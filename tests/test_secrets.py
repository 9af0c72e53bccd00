"""No secret leaves (fspo_lite.config_load.redacted): credentials planted in the server URLs of a real `train` run
appear in none of the files it writes and nowhere on its console; config.yaml is written over a link, not through
it; output folders are refused empty, `~` is expanded once."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_lite.config import Config, ConfigError, load_config
from fspo_lite.config_load import redacted

ROOT = Path(__file__).resolve().parents[1]
SECRETS = ("PLANTED-PASSWORD", "PLANTED-TOKEN", "PLANTED-KEY")


def test_redacted_hides_user_password_and_secret_query_values():
    assert redacted("http://me:PLANTED-PASSWORD@host:8000/v1") == "http://***@host:8000/v1"
    assert redacted("see https://h/v1?api_key=PLANTED-KEY&x=1 now") == "see https://h/v1?api_key=***&x=1 now"
    assert redacted({"a": ["https://h/?token=PLANTED-TOKEN"], "b": 3}) == {"a": ["https://h/?token=***"], "b": 3}
    assert redacted("http://host:8000/v1 user@example.org") == "http://host:8000/v1 user@example.org"


def test_a_train_run_writes_and_prints_no_planted_secret(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "fspo_lite", "train", "--config", str(ROOT / "configs" / "tiny.yaml"),
                          "--set", "train.steps=1", "--set", f"train.output_dir={out}",
                          "--set", "rollout.vllm_server_url=http://me:PLANTED-PASSWORD@127.0.0.1:9/",
                          "--set", "verifier.server_url=https://h.invalid/v1?token=PLANTED-TOKEN&api_key=PLANTED-KEY"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "config.yaml" for p in files) and any(p.name == "metrics.jsonl" for p in files)
    leaks = [(str(p.relative_to(out)), s) for p in files for s in SECRETS if s.encode() in p.read_bytes()]
    assert leaks == []
    assert [s for s in SECRETS if s in run.stdout + run.stderr] == []


def test_config_yaml_replaces_a_link_instead_of_writing_through_it(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("mine")
    (tmp_path / "config.yaml").symlink_to(precious)
    Config().save(tmp_path / "config.yaml")
    assert precious.read_text() == "mine" and not (tmp_path / "config.yaml").is_symlink()


@pytest.mark.parametrize("value", ["", "  ", "/", "~"])
def test_empty_and_root_like_output_folders_are_refused(value):
    for key in ("train.output_dir", "evaluation.output_dir"):
        with pytest.raises(ConfigError, match=f"{key}=.*not empty, not / or the home folder"):
            load_config(None, {key: value})


def test_a_tilde_is_expanded_once_in_the_config():
    config = load_config(None, {"train.output_dir": "~/runs/x"})
    assert config.train.output_dir == str(Path.home() / "runs" / "x")


def test_lite_refuses_an_empty_out_before_anything_runs(capsys):
    from fspo_lite.__main__ import main

    summary = ROOT / "results" / "summary.json"
    before = summary.read_bytes() if summary.exists() else None
    assert main(["lite", "--profile", "quick", "--out", ""]) == 1
    assert "--out is empty" in capsys.readouterr().err
    assert (summary.read_bytes() if summary.exists() else None) == before
