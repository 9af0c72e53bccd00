"""Notebooks are Colab-ready (badge, guarded install cell, parameters cell) and committed without outputs; their badges
and install cells, and README.md's and docs/colab.md's, are what the generator writes from the one repository URL.
(The install cell itself runs against a stand-in Colab in test_colab_install.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_lite.drivers.notebook_tools import (
    INSTALL_CELL_LINES,
    PLACEHOLDER_OWNER,
    RepositoryError,
    colab_badge,
    colab_install_cell,
    colab_url,
    generate_colab,
    main,
    notebook_problems,
    repository_url,
    set_repository_url,
    strip_outputs,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


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
    owner = repository_url().split("/")[3]
    assert colab_url("01_demo.ipynb") == (
        f"https://colab.research.google.com/github/{owner}/fspo-lite/blob/main/notebooks/01_demo.ipynb")
    assert colab_url("x.ipynb", "https://github.com/me/my-fork.git") == (
        "https://colab.research.google.com/github/me/my-fork/blob/main/notebooks/x.ipynb")


def test_the_repository_url_lives_in_pyproject():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'Repository = "{repository_url()}"' in text.split("[project.urls]")[1].split("[")[0]
    assert "<org>" not in repository_url()


@pytest.mark.parametrize("url", ["http://github.com/a/b", "https://gitlab.com/a/b", "https://github.com/a",
                                 "github.com/a/b", "https://github.com/<org>/fspo-lite", ""])
def test_a_url_colab_cannot_open_is_refused(url):
    with pytest.raises(RepositoryError, match="not a GitHub repository URL"):
        colab_install_cell(url)


def test_install_cell_is_guarded_python_that_does_nothing_off_colab():
    source = colab_install_cell()
    compile(source, "<install cell>", "exec")  # plain Python: runs under papermill and nbconvert too
    assert 'if "google.colab" in sys.modules:' in source and "fspo_lite/drivers/colab_setup.py" in source
    assert len(source.splitlines()) <= INSTALL_CELL_LINES
    assert '"notebooks,embed", EXTRAS)' in colab_install_cell(extras=["embed"])
    assert "nvidia-smi" not in source  # a GPU runtime alone installs nothing more: the config decides (EXTRAS)
    calls = []
    record = {"record": lambda *args, **kwargs: calls.append(args)}
    assert "google.colab" not in sys.modules
    exec(source.replace("subprocess.run", "record"), dict(record))
    assert calls == []  # not on Colab: installs nothing


def test_committed_files_match_the_generator(capsys):
    assert main(["colab", "--check"]) == 0, capsys.readouterr().out


def _checkout(tmp_path):
    """A small checkout: pyproject with the URL, two notebooks with old-style Colab cells, README with a marker."""
    (tmp_path / "notebooks").mkdir()
    old_badge = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://x/old.ipynb)"
    old_install = ("import subprocess, sys\nif \"google.colab\" in sys.modules:\n"
                   "    subprocess.run([sys.executable, '-m', 'pip', 'install', 'fspo-lite @ git+https://old'])")
    cells = [_cell("markdown", "# Title\n\n" + old_badge + "\n\nText."), _cell("code", old_install),
             _cell("code", "steps = 2\n", tags=["parameters"]), _cell("code", "print(steps)", outputs=[], count=None)]
    cells[1]["metadata"] = {"fspo_lite_extras": ["embed"]}
    _write(tmp_path / "notebooks", "01_a.ipynb", cells)
    _write(tmp_path / "notebooks", "02_b.ipynb", [_cell("markdown", "# B"), _cell("code", "x = 1")])
    (tmp_path / "README.md").write_text("# fspo-lite\n\n<!-- colab:badges -->\nold table\n<!-- /colab:badges -->\nend\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fspo-lite"\n\n[project.urls]\n'
                                             f'Repository = "https://github.com/{PLACEHOLDER_OWNER}/fspo-lite"\n')
    return tmp_path


def test_the_generator_rewrites_only_badges_and_install_cells(tmp_path):
    root = _checkout(tmp_path)
    repo = "https://github.com/someone/fspo-lite"
    wanted = generate_colab(root, repo)
    assert sorted(p.name for p in wanted) == ["01_a.ipynb", "02_b.ipynb", "README.md"]
    before = json.loads((root / "notebooks" / "01_a.ipynb").read_text())["cells"]
    after = json.loads(wanted[root / "notebooks" / "01_a.ipynb"])["cells"]
    assert "".join(after[0]["source"]) == "# Title\n\n" + colab_badge("01_a.ipynb", repo) + "\n\nText."
    assert "".join(after[1]["source"]) == colab_install_cell(repo, ["embed"]).rstrip("\n")
    assert after[1]["metadata"] == before[1]["metadata"] and after[2:] == before[2:]  # the rest untouched
    added = json.loads(wanted[root / "notebooks" / "02_b.ipynb"])["cells"]  # no badge, no install cell: both added
    assert [c["cell_type"] for c in added] == ["markdown", "code", "markdown", "code"]
    assert "".join(added[0]["source"]) == colab_badge("02_b.ipynb", repo) and "".join(added[3]["source"]) == "x = 1"
    readme = wanted[root / "README.md"]
    assert "old table" not in readme and readme.count("colab.research.google.com/github/someone/fspo-lite") == 2
    assert readme.endswith("<!-- /colab:badges -->\nend\n")
    for path, text in wanted.items():  # idempotent
        path.write_text(text)
    assert generate_colab(root, repo) == wanted


def test_set_repository_url_changes_the_one_line(tmp_path):
    root = _checkout(tmp_path)
    set_repository_url(root / "pyproject.toml", "https://github.com/me/fork")
    assert 'Repository = "https://github.com/me/fork"' in (root / "pyproject.toml").read_text()
    with pytest.raises(RepositoryError):
        set_repository_url(root / "pyproject.toml", "https://example.com/me/fork")
    (root / "pyproject.toml").write_text('[project]\nname = "fspo-lite"\n')
    with pytest.raises(RepositoryError, match="no `Repository"):
        set_repository_url(root / "pyproject.toml", "https://github.com/me/fork")


def test_colab_command_reports_a_bad_url_in_one_line(capsys):
    assert main(["colab", "--repo", "https://gitlab.com/me/fork"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: 'https://gitlab.com/me/fork' is not a GitHub repository URL like https://github.com/OWNER/fspo-lite"]


@pytest.mark.parametrize("mutate, problem", [
    (lambda cells: cells.pop(0), "badge"),
    (lambda cells: cells.__setitem__(0, _cell("markdown", colab_badge("other.ipynb"))), "badge"),
    (lambda cells: cells.pop(1), "no Colab install cell"),
    (lambda cells: cells.__setitem__(1, _cell("code", "!pip install fspo-lite\n")), "not guarded"),
    (lambda cells: cells.__setitem__(1, _cell("code", "import sys\nif \"google.colab\" in sys.modules:\n"
                                             "    !pip install 'fspo-lite @ git+https://github.com/<org>/fspo-lite'\n")),
     "differs from the generated one"),
    (lambda cells: cells[1]["metadata"].update(fspo_lite_extras=["embed"]), "differs from the generated one"),
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
    result = subprocess.run([sys.executable, "-m", "fspo_lite.drivers.notebook_tools", "check", str(path)],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout
