"""Each notebook opens on its own: run top to bottom with its defaults in a fresh state, it finishes without error.

Notebook 00 (FSPO from scratch) runs here with quick parameters: one step of two answers to one question on the
bundled model (tests/test_from_scratch_contract.py runs its loop against the Trainer). Notebooks 01-03 with their
defaults train and evaluate for minutes; tests/test_lite_job.py runs them (and 04) with
the quick profile's settings. What that leaves out is run here: notebook 04 with its own defaults where no
runs/lite exists (a fresh clone, before notebook 03), which must fall back to the committed study runs and say
so, and notebook 05 with its defaults. Each runs in an empty working folder, so nothing is written into the
repository.
"""

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("papermill")

ROOT = Path(__file__).resolve().parents[1]


def execute(name: str, folder: Path, parameters: dict | None = None) -> str:
    """Run notebooks/<name> with its defaults (or `parameters`), its working folder `folder`; the executed notebook's
    text."""
    import papermill

    from fspo_lite.drivers.notebook_kernel import quiet_kernel_manager

    executed = folder / name
    papermill.execute_notebook(str(ROOT / "notebooks" / name), str(executed), cwd=str(folder), progress_bar=False,
                               kernel_name="python3", kernel_manager_class=quiet_kernel_manager(),
                               parameters=parameters or {})
    return executed.read_text()


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty working folder whose kernel imports this checkout's package."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return tmp_path


def outputs(text: str) -> str:
    """The printed text of an executed notebook."""
    cells = json.loads(text)["cells"]
    return "".join("".join(o.get("text", "")) for c in cells if c["cell_type"] == "code" for o in c["outputs"])


@pytest.mark.integration
@pytest.mark.long  # a minute of real-model work: make test-long (CI runs it after make test)
def test_notebook_04_with_its_defaults_falls_back_to_the_committed_runs(fresh):
    printed = outputs(execute("04_results.ipynb", fresh))
    assert ("runs/lite does not exist yet (notebook 03 makes it): reading the committed study runs in "
            f"{ROOT / 'results' / 'study' / 'runs'} instead") in printed
    out = fresh / "runs" / "committed_study"
    assert (out / "summary.md").read_text().startswith("# Study")
    # the arms asked with the evidence shown are read in the evidence section only, not in the tables before it
    assert "not in the tables (held-out prompts unlike grpo's): fspo+ctx" in printed
    tables, _, evidence = (out / "summary.md").read_text().partition("## Evidence in the prompt")
    assert "| grpo+ctx |" not in tables and "| reading | fspo+ctx | grpo+ctx |" in evidence
    for figure in ("training_curves", "accuracy_vs_hallucination", "flip_example", "paired_differences"):
        assert (out / f"study_{figure}.png").stat().st_size > 1000


@pytest.mark.integration
def test_notebook_05_with_its_defaults(fresh):
    text = execute("05_reward_playground.ipynb", fresh)
    assert "reward" in text and '"output_type": "error"' not in text


@pytest.mark.integration
@pytest.mark.long  # a real SmolLM2 step in a kernel: make test-long (CI runs it after make test)
def test_notebook_00_trains_a_step_and_draws_the_flip(fresh):
    text = execute("00_fspo_from_scratch.ipynb", fresh,
                   {"steps": 1, "questions_per_step": 1, "G": 2, "max_new_tokens": 16})
    printed = outputs(text)
    assert "step 1: reward " in printed and "grad norm " in printed and '"output_type": "error"' not in text
    assert '"image/png"' in text  # the advantages before and after the flip


def test_each_kernel_gets_its_own_socket_folder():
    """A kernel's IPC sockets lie in a folder of their own: a client left from an earlier kernel of the same process
    (ZMQ clients reconnect by themselves) can never attach to a later kernel's sockets of the same name."""
    from fspo_lite.drivers.notebook_kernel import quiet_kernel_manager

    if os.name != "posix":
        pytest.skip("IPC sockets are used on POSIX only")
    manager = quiet_kernel_manager()
    first, second = manager(kernel_name="python3"), manager(kernel_name="python3")
    assert first.transport == second.transport == "ipc"
    assert Path(first.ip).parent != Path(second.ip).parent and Path(first.ip).parent.is_dir()
