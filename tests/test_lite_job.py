"""Integration test: the whole lite notebook sequence (quick profile) under papermill, through the CLI.

The quick profile trains the tiny random model for one step per run (notebook 02 samples a few tokens from the real
SmolLM2), so its numbers mean nothing; what is checked is that every notebook runs and writes what the next one
and the README rely on. About half a minute on 2 CPU cores.
"""

import json

import pytest

from fspo_lite.__main__ import main
from fspo_lite.drivers.experiment import load_profile

pytest.importorskip("papermill")


NOISE = ("Failed to load CPU gemm_4bit_forward", "is_gradient_checkpointing", "FutureWarning",
         "running over TCP without encryption", "KeyboardInterrupt caught in kernel")
"""Lines the job printed on every run that nobody can act on (silenced at their source)."""


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.long  # a minute of real-model work: make test-long (CI runs it after make test)
def test_quick_profile_runs_the_notebook_sequence(tmp_path, capfd):
    assert main(["lite", "--profile", "quick", "--out", str(tmp_path), "--quiet"]) == 0
    printed = capfd.readouterr()
    assert "profile quick" in printed.out
    assert [n for n in NOISE if n in printed.out + printed.err] == []
    profile = load_profile("quick")
    for name, _ in profile.notebooks:
        text = (tmp_path / "results" / "notebooks" / name).read_text()
        executed = json.loads(text)
        assert any(c.get("outputs") for c in executed["cells"] if c["cell_type"] == "code"), name
        assert [n for n in NOISE if n in text] == [], name
    markdown = (tmp_path / "results" / "summary.md").read_text()
    assert markdown.startswith("# Smoke test of the notebook sequence: the numbers mean nothing")
    assert "not met" not in markdown and "caution goal" not in markdown and "nan" not in markdown
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    trained = dict(profile.notebooks)["03_train_fspo.ipynb"]
    assert set(summary["methods"]) == {"base", *trained["methods"]}
    assert len(summary["runs"]) == 1 + len(trained["methods"]) * len(trained["seeds"])
    assert summary["goal"]["baseline"] == "grpo" and "met" in summary["goal"]
    assert set(summary["job"]["notebook_seconds"]) == {name for name, _ in profile.notebooks}
    runs = len(trained["methods"]) * len(trained["seeds"])
    assert summary["job"]["runs"] == {"trained": runs, "resumed": 0, "skipped": 0}
    assert f"Runs: {runs} trained in this invocation." in markdown
    assert "| fspo | 1 |" in (tmp_path / "results" / "summary.md").read_text()
    for figure in ("decomposition", "flip_example"):  # the flip: from the bundled examples (no run flipped a token)
        assert (tmp_path / "figures" / f"quick_{figure}.png").stat().st_size > 1000
    for figure in ("training_curves", "accuracy_vs_hallucination", "advantage_mass"):  # one step, no sentence
        assert not (tmp_path / "figures" / f"quick_{figure}.png").exists()
        assert f"- `quick_{figure}.png`: " in markdown
    assert f"the flip (token advantages under GRPO and FSPO): {tmp_path}/figures/quick_flip_example.png" in printed.out
    assert "`make lite` is the real job" in printed.out and "notebooks/05_reward_playground.ipynb" in printed.out
    heldout = json.loads((tmp_path / "runs" / "fspo_s0" / "heldout.json").read_text())
    assert heldout["judge"] == "embedding" and heldout["train_verifier"] == "lexical"
    assert {f"{b}." for b in trained["eval_benchmarks"]} <= {k.split(".")[0] + "." for k in heldout["metrics"]}
    assert (tmp_path / "runs" / "fspo_s0" / "eval" / "records.jsonl").exists()
    # notebook 04's rejudge parameter (as the study): the kb checker labels every run's kbqa sentences first
    assert summary["statistics"]["judges"][-1] == "kb" and "step_hallucination@kb" in markdown
    records = [json.loads(line) for line in (tmp_path / "runs" / "fspo_s0" / "eval" / "records.jsonl").read_text()
               .splitlines()]
    kbqa = [r for r in records if r["benchmark"] == "kbqa"]
    assert kbqa and all("kb" in r["sentence_labels_by_judge"] for r in kbqa)


def test_outputs_name_paths_relative_to_the_repository(tmp_path):
    """An executed notebook (JSON, where a path may carry escaped characters) and a summary lose the repository's
    absolute root; a path outside the repository stays."""
    import json

    from fspo_lite.drivers.experiment import without_root

    root = tmp_path / 'my "repo"'  # a quote: escaped inside JSON strings
    notebook = json.dumps({"metadata": {"input_path": f"{root}/notebooks/01.ipynb"},
                           "outputs": [f"{root}/.venv/lib/x.py:3: FutureWarning", "/elsewhere/runs/a"]})
    assert json.loads(without_root(notebook, root)) == {
        "metadata": {"input_path": "notebooks/01.ipynb"},
        "outputs": [".venv/lib/x.py:3: FutureWarning", "/elsewhere/runs/a"]}
    assert without_root(f"![figure]({root}/figures/a.png)\n", root) == "![figure](figures/a.png)\n"


def test_the_last_invocation_says_what_it_trained_resumed_and_skipped(tmp_path):
    from fspo_lite.drivers.report.readme import study_time
    from fspo_lite.drivers.report.render import resumed_note
    from fspo_lite.drivers.runs import invocation_counts, write_invocation

    assert invocation_counts(tmp_path) is None  # nothing written yet: the report says nothing about it
    records = [{"method": "grpo", "seed": 0, "status": "skipped", "minutes": 0.0},
               {"method": "fspo+kb", "seed": 0, "status": "resumed", "minutes": 4.5},
               {"method": "fspo+kb", "seed": 1, "status": "trained", "minutes": 9.0},
               {"method": "fspo", "seed": 1, "status": "trained", "minutes": 8.0}]
    path = write_invocation(tmp_path, records)
    assert json.loads(path.read_text())["runs"]["fspo_kb_s0"] == {"status": "resumed", "minutes": 4.5}
    counts = invocation_counts(tmp_path)
    assert counts == {"trained": 2, "resumed": 1, "skipped": 1}
    assert resumed_note(counts) == ("Runs: this invocation trained 2, resumed 1 from their checkpoints and skipped 1 "
                                    "finished by earlier ones, so its wall time is not the time of the whole job.")
    job = {"command": "python -m fspo_lite lite --profile study", "total_seconds": 600.0, "runs": counts}
    assert study_time({"job": job}).startswith("Wall time of the study's last invocation: 10.0 min (`python -m")
    job["runs"] = {"trained": 4, "resumed": 0, "skipped": 0}
    assert study_time({"job": job}).startswith("Wall time of the whole study, run in one piece: 10.0 min")
    del job["runs"]  # summaries written before the count: as before
    assert study_time({"job": job}).startswith("Wall time of the whole study, run in one piece")
