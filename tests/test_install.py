"""The install a newcomer runs: `make setup` takes torch's CPU build on Linux (PyTorch's CPU index; PyPI's Linux
torch is the CUDA build) at the tested version, and pyproject.toml states what the pins need."""

from __future__ import annotations

import platform
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry_run(tmp_path, *variables: str) -> str:
    """`make -n setup` with a venv that does not exist: the commands it would run, nothing run."""
    return subprocess.run(["make", "-n", "-B", "setup", f"VENV={tmp_path / 'venv'}", *variables], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


def _tested_torch() -> str:
    (pin,) = re.findall(r"^torch==(\S+)$", (ROOT / "requirements/constraints.txt").read_text(), re.M)
    return pin


@pytest.mark.skipif(platform.system() != "Linux", reason="the CPU index is for Linux; macOS gets PyPI's torch")
def test_setup_installs_the_cpu_build_of_the_tested_torch_on_linux(tmp_path):
    commands = _dry_run(tmp_path)
    line = next(line for line in commands.splitlines() if "install" in line and " torch==" in line)
    assert f"torch=={_tested_torch()}+cpu" in line.split()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in line
    assert "--no-deps" in line  # only torch is looked up on the CPU index
    first = commands.index(line)
    assert all(first < commands.index(later) for later in commands.splitlines()
               if "install" in later and "-e " in later)  # before anything that could pull the CUDA build


def test_torch_can_be_given(tmp_path):
    assert "install -q --no-deps torch==2.13.0\n" in _dry_run(tmp_path, "TORCH=torch==2.13.0")


def test_pyproject_states_python_authors_classifiers_keywords():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    assert project["authors"] and project["keywords"]
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert not any(c.endswith(":: 3.10") for c in project["classifiers"])


def test_environment_yml_pins_the_same_cpu_torch_and_python():
    text = (ROOT / "environment.yml").read_text()
    assert f"torch=={_tested_torch()}+cpu" in text and "https://download.pytorch.org/whl/cpu" in text
    assert re.search(r"python=3\.1[1-9]", text)
