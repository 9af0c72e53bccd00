"""The command line as a newcomer meets it: --version, help with a description and an example for every command,
defaults shown, the right program name, and profile mistakes refused in one line before any notebook runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_lite import __main__ as cli
from fspo_lite.drivers import cli_help
from fspo_lite import __version__

ROOT = Path(__file__).resolve().parents[1]


def _parsers():
    """(path, parser) for the program and every (sub)command, built as main() builds them."""
    captured = {}
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        captured.setdefault("root", self)
        raise SystemExit(0)

    argparse.ArgumentParser.parse_args = capture
    try:
        with pytest.raises(SystemExit):
            cli.main(["--help"])
    finally:
        argparse.ArgumentParser.parse_args = original

    def walk(parser, path=""):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}".strip())

    return list(walk(captured["root"]))


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"fspo-lite {__version__}"


def test_every_command_has_a_description_and_an_example():
    parsers = _parsers()
    names = {path for path, _ in parsers}
    assert {"train", "filter", "sweep-prompts", "klcf-checklist", "eval", "lite", "audit score"} <= names
    for path, parser in parsers:
        help_text = parser.format_help()
        assert parser.description, f"{path or 'the program'} has no description"
        if path in {"verifiers", "audit", "data"} or not any(isinstance(a, argparse._SubParsersAction)
                                                             for a in parser._actions):
            assert "example" in help_text, f"{path or 'the program'} shows no example"


def test_defaults_are_shown():
    parsers = dict(_parsers())
    assert "(default: 4)" in parsers["sweep-prompts"].format_help()
    assert "default: results/prompt_sweep.json" in " ".join(parsers["sweep-prompts"].format_help().split())
    assert "(default: None)" not in "".join(p.format_help() for p in parsers.values())


def test_program_name_follows_how_it_was_started():
    assert cli_help.program_name("/usr/local/bin/fspo-lite") == "fspo-lite"
    assert cli_help.program_name("/repo/fspo_lite/__main__.py") == "python -m fspo_lite"
    out = subprocess.run([sys.executable, "-m", "fspo_lite", "lite", "--help"], capture_output=True, text=True,
                         cwd=ROOT).stdout
    assert out.startswith("usage: python -m fspo_lite lite")


@pytest.mark.parametrize("setting, message", [
    ("03.seed=[0]", "notebook 03_train_fspo.ipynb has no parameter seed; its parameters: base_config"),
    ("03.methods=[grpo,fpso]", "method 'fpso' is neither a reward.method (grpo, fspo"),
    ("03.overrides.train.stepz=2", "unknown config key 'train.stepz'"),
    ("train.steps=0", "train.steps=0 is out of range"),
    ("03.methods=[grpo,klcf]", "arm klcf: reward.method=klcf needs a checklist file (klcf.checklist_path=None"),
])
def test_profile_mistakes_fail_in_one_line_before_any_notebook_runs(setting, message, monkeypatch, capsys):
    import papermill

    def refuse(*args, **kwargs):
        raise AssertionError("a notebook ran")

    monkeypatch.setattr(papermill, "execute_notebook", refuse)
    assert cli.main(["lite", "--profile", "quick", "--set", setting]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fspo_lite: error: profile quick: ") and message in err


def test_only_a_notebook_the_profile_lacks_fails_in_one_line_before_any_notebook_runs(monkeypatch, capsys):
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    assert cli.main(["lite", "--profile", "quick", "--only", "04,07"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--only 07: profile quick runs no such notebook" in err


def test_a_klcf_arm_needs_its_checklist_file_where_the_notebooks_run(tmp_path, monkeypatch):
    """The check reads klcf.checklist_path as notebook 03 will, from the repository root, whatever the cwd."""
    from fspo_lite.config import ConfigError
    from fspo_lite.drivers.experiment import ROOT, check_profile, load_profile, override_parameters

    checklist = tmp_path / "lists" / "checklist.json"
    checklist.parent.mkdir()
    checklist.write_text(json.dumps({"kind": "klcf-checklist", "questions": {}}))
    relative = os.path.relpath(checklist, ROOT)  # right from the repository root only
    monkeypatch.chdir(checklist.parent)
    check_profile(override_parameters(load_profile("quick"), [
        "03.methods=[grpo,klcf]", f"03.overrides.klcf.checklist_path={relative}"]))
    with pytest.raises(ConfigError, match="arm klcf: reward.method=klcf needs a checklist file"):
        check_profile(override_parameters(load_profile("quick"), [
            "03.methods=[grpo,klcf]", "03.overrides.klcf.checklist_path=checklist.json"]))  # right from the cwd only


def test_every_shipped_profile_passes_the_check():
    from fspo_lite.drivers.experiment import check_profile, load_profile, profile_names

    for name in profile_names():
        check_profile(load_profile(name))


def test_lite_from_an_installation_without_notebooks_says_what_to_do(tmp_path, monkeypatch, capsys):
    from fspo_lite.drivers import experiment

    monkeypatch.setattr(experiment, "ROOT", tmp_path)  # a wheel: the package without the repository around it
    assert cli.main(["lite", "--profile", "quick"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "clone the repository" in err


def test_env_prints_versions_device_and_dtypes_in_a_fresh_process():
    """`python -m fspo_lite env`, as a user runs it for a bug report: every package named, the platform, the device
    and the dtype line; on this machine (no CUDA GPU) float32 everywhere."""
    result = subprocess.run([sys.executable, "-m", "fspo_lite", "env"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    keys = [line.split(":", 1)[0] for line in lines]
    assert keys[:10] == ["python", "torch", "transformers", "peft", "bitsandbytes", "vllm", "unsloth", "fspo-lite",
                         "platform", "device"]
    assert all(line.split(": ", 1)[1] for line in lines[:10])  # a version or "not installed", never empty
    assert f"fspo-lite: {__version__}" in lines or "fspo-lite: not installed" in lines
    import torch

    if not torch.cuda.is_available():
        assert lines[-1].startswith("dtypes: no CUDA GPU, every path computes in float32")


@pytest.mark.parametrize("gpu, dtype, scaling", [("Tesla T4", "float16", "on"),
                                                 ("NVIDIA A100-SXM4-40GB", "bfloat16", "off")])
def test_env_on_a_simulated_gpu_names_its_dtype_for_every_path(simulate_gpu, gpu, dtype, scaling):
    from fspo_lite.drivers.environment import environment_lines

    simulate_gpu(gpu)
    lines = environment_lines()
    assert any(line.startswith(f"device: {gpu}, compute capability ") for line in lines)
    assert f"GPU compute dtype: {dtype} (bfloat16 only where native: compute capability >= 8.0)" in lines
    for path in ("4-bit compute (bitsandbytes)", "vLLM dtype", "FSDP mixed precision"):
        assert any(line.startswith(f"  {path}: {dtype}") for line in lines), path
    assert any(line.startswith(f"  loss scaling for 4-bit or FSDP training: {scaling}") for line in lines)
