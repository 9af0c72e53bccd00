"""Resume refuses what would lose or mix a run's rows, each in one line naming the file and what to do, before the
model loads: a damaged middle row of metrics.jsonl (only a torn last line may be dropped), a finished run whose
checkpoints are gone, training data changed under the same path, a checkpoint or rows copied in from another run,
and links out of the run folder (which no write follows).

In process on the tiny model (the fixtures of tests/test_trainer.py); one test runs the real command line.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_lite.config import load_config
from fspo_lite.data.examples import QAExample, save_examples
from fspo_lite.logs.training_log import RunLogError, append_jsonl, read_metrics, truncate_jsonl
from fspo_lite.update.checkpoint import CheckpointError, save_checkpoint
from fspo_lite.update.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
            QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]


def tiny_config(folder, *overrides):
    return load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={folder}", "train.steps=2",
                                                             "rollout.max_new_tokens=4", *overrides])


def trained(folder, policy, *overrides, examples=EXAMPLES):
    """A finished run in `folder` (2 steps, checkpoints at steps 1 and 2 with save_every=1)."""
    model, tokenizer = copy.deepcopy(policy[0]), policy[1]
    with Trainer(tiny_config(folder, "train.save_every=1", *overrides), model, tokenizer, examples,
                 progress=False) as trainer:
        trainer.train()
    return folder


def resume(folder, policy, *overrides, examples=EXAMPLES):
    model, tokenizer = copy.deepcopy(policy[0]), policy[1]
    return Trainer(tiny_config(folder, "train.resume=true", "train.save_every=1", *overrides), model, tokenizer,
                   examples, progress=False)


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_a_damaged_middle_row_is_refused_by_file_and_line(tmp_path):
    """Before: the damaged row of step 1 was dropped as a "torn line" and resume went on without it."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 0.5, "re\n{"step": 2, "loss": 0.25}\n{"step": 3, "lo')
    before = metrics.read_bytes()
    with pytest.raises(RunLogError, match=r"metrics.jsonl:1: not a JSON line .*only a torn last line may be dropped"):
        truncate_jsonl(metrics, 2)
    assert metrics.read_bytes() == before
    for bad, problem in [(b'{"step": "1"}', "its step is '1'"), (b'{"step": 0}', "its step is 0"),
                         (b"[1, 2]", "not a JSON object"), (b'{"step": 1, "x": "\xff"}', "not UTF-8")]:
        metrics.write_bytes(bad + b'\n{"step": 2}\n')
        with pytest.raises(RunLogError, match=f"metrics.jsonl:1: {problem}"):
            truncate_jsonl(metrics, 2)
    metrics.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')  # a torn last line is still dropped
    truncate_jsonl(metrics, 5)
    assert metrics.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_resume_refuses_a_damaged_middle_row_before_the_model(tmp_path, tiny_policy):
    folder = trained(tmp_path / "run", tiny_policy)
    metrics = folder / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text(lines[0][:-9] + "\n" + lines[1] + "\n")
    before = snapshot(folder)
    with pytest.raises(RunLogError, match=r"metrics.jsonl:1: not a JSON line") as error:
        resume(folder, tiny_policy, "train.steps=3")
    one_line(error)
    assert snapshot(folder) == before


def test_a_finished_run_without_checkpoints_keeps_its_rows(tmp_path, tiny_policy):
    """Before: train.resume=true found no checkpoint, "started over" and wiped the finished run's rows."""
    folder = trained(tmp_path / "run", tiny_policy)
    shutil.rmtree(folder / "checkpoints")
    before = snapshot(folder)
    with pytest.raises(CheckpointError, match=r"reaches step 2 but no checkpoint to continue from .*remove "
                                              r"metrics.jsonl and samples.jsonl to start over") as error:
        resume(folder, tiny_policy, "train.steps=3")
    one_line(error)
    assert snapshot(folder) == before
    assert [row["step"] for row in read_metrics(folder)] == [1, 2]


def test_a_run_cut_before_its_first_checkpoint_still_starts_over(tmp_path, tiny_policy):
    """Rows up to the first checkpoint's step may be all a killed run left: resume starts over, as documented."""
    folder = tmp_path / "run"
    folder.mkdir()
    tiny_config(folder, "train.save_every=2", "train.steps=4").save(folder / "config.yaml")
    for step in (1, 2):
        append_jsonl(folder / "metrics.jsonl", {"step": step, "loss": 0.0})
    trainer = resume(folder, tiny_policy, "train.steps=4", "train.save_every=2")
    trainer.close()
    assert not (folder / "metrics.jsonl").read_text()


@pytest.mark.parametrize("change", ["edited", "shrunk"])
def test_data_changed_under_the_same_path_is_refused(tmp_path, tiny_policy, change):
    """Before: a data file edited or cut under the same path was trained on without a word."""
    data = tmp_path / "train.jsonl"
    save_examples(EXAMPLES, data)
    folder = trained(tmp_path / "run", tiny_policy, f"data.train={data}", examples=None)
    if change == "edited":
        save_examples([EXAMPLES[0], QAExample("b", EXAMPLES[1].question, ["Ag"], EXAMPLES[1].evidence)], data)
    else:
        save_examples(EXAMPLES[:1], data)
    before = snapshot(folder)
    with pytest.raises(CheckpointError, match=r"was trained on other data than data.train=.*\(2 examples then, "
                                              rf"{2 if change == 'edited' else 1} now") as error:
        resume(folder, tiny_policy, f"data.train={data}", "train.steps=3", examples=None)
    one_line(error)
    assert snapshot(folder) == before
    save_examples(EXAMPLES, data)  # the data it was written with: resumes
    resume(folder, tiny_policy, f"data.train={data}", "train.steps=3", examples=None).close()


@pytest.mark.parametrize("copied", ["checkpoints", "metrics.jsonl"])
def test_a_checkpoint_or_rows_of_another_run_are_refused(tmp_path, tiny_policy, copied):
    """Two runs with the same settings: another run's checkpoints (or rows) copied in resumed before."""
    mine, other = trained(tmp_path / "mine", tiny_policy), trained(tmp_path / "other", tiny_policy)
    if copied == "checkpoints":
        shutil.rmtree(mine / "checkpoints")
        shutil.copytree(other / "checkpoints", mine / "checkpoints")
    else:
        shutil.copyfile(other / "metrics.jsonl", mine / "metrics.jsonl")
    before = snapshot(mine)
    with pytest.raises(CheckpointError, match=r"metrics.jsonl does not hold the rows of steps 1-2 that checkpoint "
                                              r"step-000002 was written after") as error:
        resume(mine, tiny_policy, "train.steps=3")
    one_line(error)
    assert snapshot(mine) == before
    resume(other, tiny_policy, "train.steps=3").close()  # the run's own rows and checkpoints resume


@pytest.mark.parametrize("name", ["checkpoints", "metrics.jsonl", "samples.jsonl"])
@pytest.mark.parametrize("resuming", [True, False])
def test_nothing_is_written_through_a_link_out_of_the_run(tmp_path, tiny_policy, name, resuming):
    """Before: a `checkpoints/` linked into another run resumed that run's weights and wrote into it."""
    other = trained(tmp_path / "other", tiny_policy)
    mine = tmp_path / "mine"
    mine.mkdir()
    os.symlink(other / name, mine / name)
    before = snapshot(other)
    with pytest.raises(RunLogError, match=rf"mine/{name} is a link \(to .*other/{name}\); a run writes only inside "
                                          "its own folder") as error:
        if resuming:
            resume(mine, tiny_policy, "train.steps=3")
        else:
            Trainer(tiny_config(mine), copy.deepcopy(tiny_policy[0]), tiny_policy[1], EXAMPLES, progress=False)
    one_line(error)
    assert snapshot(other) == before


def test_writes_never_follow_a_link(tmp_path):
    """The write-time guard, for a link made after the run started: rows and checkpoints are not written through."""
    outside = tmp_path / "outside.jsonl"
    outside.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside, run / "samples.jsonl")
    with pytest.raises(RunLogError, match="is a link"):
        append_jsonl(run / "samples.jsonl", {"step": 1})
    with pytest.raises(RunLogError, match="is a link"):
        truncate_jsonl(run / "samples.jsonl", 1)
    assert outside.read_text() == "mine\n"
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", run / "checkpoints")
    with pytest.raises(CheckpointError, match="checkpoints is a link"):
        save_checkpoint(run, 1, model=None, optimizer=None, trainer_state={})
    assert not any((tmp_path / "elsewhere").iterdir())


def test_a_linked_step_folder_is_refused(tmp_path, tiny_policy):
    """Without a `latest` pointer, the newest step folder was taken even when it was a link into another run."""
    mine, other = trained(tmp_path / "mine", tiny_policy), trained(tmp_path / "other", tiny_policy, "train.steps=3")
    (mine / "checkpoints" / "latest").unlink()
    os.symlink(other / "checkpoints" / "step-000003", mine / "checkpoints" / "step-000003")
    with pytest.raises(CheckpointError, match="step-000003 is a link, not a checkpoint of this run"):
        resume(mine, tiny_policy, "train.steps=4")


def test_the_command_line_refuses_in_one_line(tmp_path, tiny_policy):
    """The real command resuming a finished run without checkpoints: one line, exit code 1, rows kept."""
    data = tmp_path / "train.jsonl"
    save_examples(EXAMPLES, data)
    folder = trained(tmp_path / "run", tiny_policy, f"data.train={data}", examples=None)
    shutil.rmtree(folder / "checkpoints")
    before = snapshot(folder)
    argv = [sys.executable, "-m", "fspo_lite", "train", "--config", str(ROOT / "configs" / "tiny.yaml"),
            "--set", f"train.output_dir={folder}", "--set", f"data.train={data}", "--set", "train.steps=2",
            "--set", "rollout.max_new_tokens=4", "--set", "train.save_every=1", "--set", "train.resume=true"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(err) == 1 and "no checkpoint to continue from" in err[0], run.stderr[-2000:]
    assert snapshot(folder) == before
