"""The lite job's notebook parameters are checked before any notebook runs (fspo_lite.drivers.notebook_params), with
the config's strict YAML loader; a notebook that fails ends the console with its exception's own message."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

papermill = pytest.importorskip("papermill")

from fspo_lite.__main__ import main  # noqa: E402
from fspo_lite.drivers.experiment import ROOT, check_profile, load_profile, notebook_parameters  # noqa: E402
from fspo_lite.drivers.notebook_params import PARAMETERS, parameter_problem  # noqa: E402

BOMB = "[&a [x,x,x,x,x,x,x,x,x]," + ",".join(f"&{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")) + "]"
"""The "billion laughs" in flow style: 9 levels of nine aliases each, under 400 bytes, 9**9 strings expanded."""


@pytest.fixture
def no_notebook(monkeypatch):
    """papermill.execute_notebook replaced by a failure: a refusal must come before any notebook starts."""
    def started(*args, **kwargs):
        raise AssertionError(f"a notebook started: {args[0]}")
    monkeypatch.setattr(papermill, "execute_notebook", started)


def last_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[-1]


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_the_table_lists_every_parameter_of_every_notebook_and_its_defaults_pass(name):
    defaults = notebook_parameters(name)
    assert set(PARAMETERS[name]) == set(defaults)
    for parameter, default in defaults.items():
        assert parameter_problem(name, parameter, ast.literal_eval(default)) is None, (parameter, default)


@pytest.mark.parametrize("profile", ["quick", "lite", "study", "colab_t4"])
def test_the_bundled_profiles_pass(profile):
    check_profile(load_profile(profile))


@pytest.mark.parametrize("setting, named", [
    ("03.steps=-1", "steps=-1"), ("03.seeds=0", "seeds=0"), ("03.workers=0", "workers=0"),
    ("04.qa=../../etc", "qa='../../etc'"), ("03.seeds=[0, 0]", "seeds=[0, 0]"), ("03.steps=true", "steps=True"),
    ("03.learning_rate=.nan", "learning_rate=nan"), ("04.prefix=../../x_", "prefix='../../x_'"),
    ("02.verifier_names=[lexical, lexicall]", "verifier_names=['lexical', 'lexicall']"),
    ("01.benchmarks=[kbqa]", "benchmarks=['kbqa']"), ("03.eval_limit=0", "eval_limit=0"),
])
def test_a_bad_parameter_is_refused_in_one_line_before_any_notebook(setting, named, tmp_path, capsys, no_notebook):
    assert main(["lite", "--profile", "quick", "--out", str(tmp_path), "--set", setting]) == 1
    line = last_line(capsys)
    notebook = {"01": "01_measure_hallucination", "02": "02_verifier_labeling", "03": "03_train_fspo",
                "04": "04_results"}[setting[:2]]
    assert line.startswith(f"fspo_lite: error: profile quick: notebook {notebook}.ipynb: {named} is not valid; valid: ")
    assert not (tmp_path / "results").exists()


def test_an_alias_bomb_in_a_notebook_parameter_is_refused_by_the_strict_loader(tmp_path, capsys, no_notebook):
    assert len(f"03.methods={BOMB}") < 400
    assert main(["lite", "--profile", "quick", "--out", str(tmp_path), "--set", f"03.methods={BOMB}"]) == 1
    line = last_line(capsys)
    assert line.startswith("fspo_lite: error: --set 03.methods: the value is not valid YAML (aliases (*a) are not")


def test_an_alias_bomb_in_a_profile_file_is_refused_by_the_strict_loader(tmp_path, capsys, no_notebook):
    text = (ROOT / "configs" / "lite" / "quick.yaml").read_text().replace("methods: [grpo, fspo]", f"methods: {BOMB}")
    (tmp_path / "bomb.yaml").write_text(text)
    assert main(["lite", "--profile", str(tmp_path / "bomb.yaml"), "--out", str(tmp_path)]) == 1
    line = last_line(capsys)
    assert "bomb.yaml:" in line and "aliases (*a) are not allowed" in line


def test_a_key_twice_in_a_profile_is_refused(tmp_path, capsys, no_notebook):
    text = (ROOT / "configs" / "lite" / "quick.yaml").read_text().replace("steps: 1\n", "steps: 1\n      steps: 2\n")
    (tmp_path / "twice.yaml").write_text(text)
    assert main(["lite", "--profile", str(tmp_path / "twice.yaml"), "--out", str(tmp_path)]) == 1
    assert "key 'steps' appears twice" in last_line(capsys)


def test_a_failing_notebook_ends_the_console_with_its_own_message(tmp_path, capsys, monkeypatch):
    message = "train.steps=-1 is out of range; valid: an integer >= 1 " + "and so on " * 80

    def fails(source, output, **kwargs):
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text("{}")
        raise papermill.PapermillExecutionError(cell_index=4, exec_count=3, source="run()", ename="ConfigError",
                                                evalue=message, traceback=["Traceback (most recent call last)"] * 40)
    monkeypatch.setattr(papermill, "execute_notebook", fails)
    assert main(["lite", "--profile", "quick", "--out", str(tmp_path)]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("fspo_lite: error: 01_measure_hallucination.ipynb: ConfigError: " + " ".join(message.split()))
    assert last.endswith("(traceback in the executed copy "
                         f"{tmp_path / 'results' / 'notebooks' / '01_measure_hallucination.ipynb'})")


def test_a_real_notebook_failure_reaches_the_console(tmp_path, capsys):
    """Notebook 04 on a runs folder without runs: its MissingFileError, under a real kernel."""
    profile = tmp_path / "report_only.yaml"
    profile.write_text("out: .\nnotebooks:\n  - name: 04_results.ipynb\n    parameters:\n"
                       f"      runs_dir: {tmp_path / 'no_runs'}\n      results_dir: {tmp_path / 'results'}\n"
                       f"      figures_dir: {tmp_path / 'figures'}\n")
    (tmp_path / "no_runs").mkdir()
    assert main(["lite", "--profile", str(profile), "--out", str(tmp_path), "--quiet"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"fspo_lite: error: 04_results.ipynb: MissingFileError: no */heldout.json under "
                           f"{tmp_path / 'no_runs'}: run notebook 03 first (traceback in the executed copy ")
