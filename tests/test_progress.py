"""Progress bars that read done when a notebook is saved (fspo_lite.progress): text bars under the lite job's
notebook runner, whose saved copy keeps their last state, where tqdm.auto's widget would be saved as "0%"."""

import os

import nbformat
import pytest

from fspo_lite.progress import HEADLESS_ENV, TEXT_PROGRESS_ENV, headless_progress, progress_bar, text_progress


@pytest.mark.parametrize("value, text", [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)])
def test_text_progress_reads_the_environment(monkeypatch, value, text):
    if value is None:
        monkeypatch.delenv(TEXT_PROGRESS_ENV, raising=False)
    else:
        monkeypatch.setenv(TEXT_PROGRESS_ENV, value)
    assert text_progress() is text
    with progress_bar(range(2), disable=True) as bar:
        assert (type(bar).__module__ == "tqdm.std") or not text  # text mode: tqdm's own text bar


def test_headless_progress_sets_the_kernel_environment_and_restores_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    monkeypatch.delenv(TEXT_PROGRESS_ENV, raising=False)
    with headless_progress():
        assert {key: os.environ[key] for key in HEADLESS_ENV} == {TEXT_PROGRESS_ENV: "1",
                                                                   "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    assert TEXT_PROGRESS_ENV not in os.environ and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"
    with pytest.raises(RuntimeError), headless_progress():
        raise RuntimeError("a notebook failed")
    assert TEXT_PROGRESS_ENV not in os.environ  # restored on an error too


def outputs_text(cell) -> str:
    """Every output of a saved cell as a reader without widgets sees it: stream text and text/plain."""
    return "".join(o.get("text", "") if o["output_type"] == "stream" else o.get("data", {}).get("text/plain", "")
                   for o in cell.outputs)


def test_a_notebook_run_by_the_lite_job_saves_finished_bars(tmp_path):
    """Executed as the lite job executes notebooks 01-04 (experiment.execute_notebook), then read from disk:
    fspo-lite's bar is saved at 100%; a plain tqdm.auto bar in the same kernel is saved as a widget at 0% (the
    friction this fixes, and proof that the check can fail)."""
    from fspo_lite.drivers.notebook_kernel import execute_notebook

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [
        nbformat.v4.new_code_cell("import os\nfrom fspo_lite.progress import progress_bar\n"
                                  "for _ in progress_bar(range(3), desc='train fspo', mininterval=0):\n    pass\n"
                                  "print(os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'))"),
        nbformat.v4.new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='widget'):\n    pass"),
    ]
    source, executed = tmp_path / "bars.ipynb", tmp_path / "bars_out.ipynb"
    nbformat.write(notebook, source)
    execute_notebook(source, executed, {})
    ours, widget = nbformat.read(executed, as_version=4).cells
    text = outputs_text(ours)
    assert "train fspo: 100%" in text and "fspo:   0%" not in text and "\r" not in text, text
    assert "1\n" in text  # transformers' and the hub's own widget bars are off in the kernel
    assert "widget:   0%" in outputs_text(widget) and any(o["output_type"] == "display_data" for o in widget.outputs)
