"""scripts/keep_finished_runs.py: the finished runs of a study copied for committing (no checkpoints, no machine
paths), and what notebook 03 needs to skip them is all there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_run(runs: Path, name: str, key: str, record_key: str | None, base: bool = False) -> Path:
    run = runs / name
    (run / "eval").mkdir(parents=True)
    (run / "checkpoints" / "step-000004" / "model").mkdir(parents=True)
    (run / "checkpoints" / "step-000004" / "model" / "adapter_model.safetensors").write_bytes(b"\0" * 64)
    if not base:
        (run / "run_settings.json").write_text(json.dumps({"settings_key": key}))
        (run / "config.yaml").write_text(f"train:\n  output_dir: {runs.resolve()}/{name}\n")
        (run / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    if record_key is not None:
        (run / "heldout.json").write_text(json.dumps({"method": name, "settings_key": record_key}))
        (run / "eval" / "records.jsonl").write_text('{"benchmark": "kbqa", "output": "x"}\n')
        (run / "eval" / "summary.json").write_text(json.dumps({"output_dir": f"{runs.resolve()}/{name}/eval"}))
    return run


def keep(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "keep_finished_runs.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_finished_runs_are_kept_without_checkpoints_or_machine_paths(tmp_path):
    source = tmp_path / "clone" / "runs" / "study"
    make_run(source, "grpo_s0", "k1", "k1")
    make_run(source, "fspo_s0", "k2", None)          # still training: no held-out record
    make_run(source, "fspo_s1", "k3", "old-key")     # a record of other settings
    make_run(source, "base", "", "kb", base=True)
    repo = tmp_path / "repo"
    repo.mkdir()
    result = keep("--from", str(source), "--to", "results/study/runs", "--machine", "Some CPU, 2 cores", cwd=repo)
    assert result.returncode == 0, result.stderr
    assert "2 finished runs kept" in result.stdout and "fspo_s0, fspo_s1" in result.stdout
    kept = repo / "results" / "study" / "runs"
    assert sorted(p.name for p in kept.iterdir()) == ["base", "grpo_s0"]
    assert not list(kept.rglob("checkpoints")) and not list(kept.rglob("*.safetensors"))
    assert (kept / "grpo_s0" / "config.yaml").read_text() == "train:\n  output_dir: results/study/runs/grpo_s0\n"
    summary = json.loads((kept / "grpo_s0" / "eval" / "summary.json").read_text())
    assert summary["output_dir"] == "results/study/runs/grpo_s0/eval"
    assert not any(str(tmp_path) in p.read_text() for p in kept.rglob("*") if p.is_file())
    assert json.loads((kept / "grpo_s0" / "heldout.json").read_text())["machine"] == "Some CPU, 2 cores"


def test_what_is_kept_is_skipped_by_notebook_03(tmp_path):
    from fspo_lite.drivers.runs import finished_record

    source = tmp_path / "runs"
    make_run(source, "grpo_s0", "k1", "k1")
    assert keep("--from", str(source), "--to", "kept", cwd=tmp_path).returncode == 0
    assert finished_record(tmp_path / "kept" / "grpo_s0", "k1") is not None


def test_dry_run_copies_nothing_and_bad_folders_fail_in_one_line(tmp_path):
    source = tmp_path / "runs"
    make_run(source, "grpo_s0", "k1", "k1")
    result = keep("--from", str(source), "--to", "kept", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0 and "would keep grpo_s0" in result.stdout and not (tmp_path / "kept").exists()
    missing = keep("--from", str(tmp_path / "nowhere"), "--to", "kept", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0 and "is not a folder" in missing.stderr
    same = keep("--from", str(source), "--to", str(source), cwd=tmp_path)
    assert same.returncode == 2 and "same folder" in same.stderr
