"""Nothing is deleted that fspo-lite did not write, and labeled work is never replaced without an explicit flag:
a run folder holding someone's files is refused (never cleared), `audit sample` does not replace labeled items
without --overwrite-labels, and a labeling session does not drop the labels of the file it saves to."""

import json

import pytest

from fspo_lite.__main__ import main
from fspo_lite.data.labeling import LabelingSession, SentenceItem, load_items, save_items
from fspo_lite.drivers import experiment
from fspo_lite.drivers.runs import RUN_SETTINGS, RunFolderError, check_run_folders, foreign_entries, prepare_run_dir


def test_a_run_folder_holding_someones_files_is_refused_and_left_as_it_is(tmp_path):
    run = tmp_path / "grpo_s0"
    (run / "mine").mkdir(parents=True)
    (run / "notes.txt").write_text("my notes")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    expected = (r"grpo_s0 would be cleared for a new run \(its run_settings.json is missing\), but it holds what "
                r"fspo-lite did not write \(mine, notes.txt\)")
    with pytest.raises(RunFolderError, match=expected):
        prepare_run_dir(run, "key")
    assert (run / "notes.txt").read_text() == "my notes" and (run / "metrics.jsonl").exists()
    assert (run / "mine").is_dir()
    (run / RUN_SETTINGS).write_text(json.dumps({"settings_key": "other"}))  # a run of other settings, plus files
    with pytest.raises(RunFolderError, match="its run_settings.json is of other settings"):
        prepare_run_dir(run, "key")
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl", "mine", "notes.txt", RUN_SETTINGS]


def test_a_run_folder_of_fspo_lite_files_only_is_still_started_over(tmp_path, capsys):
    run = tmp_path / "grpo_s0"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "records.jsonl").write_text("{}\n")
    for name in ("metrics.jsonl", "samples.jsonl", "heldout.json", "config.yaml", ".heldout.json.tmp-12"):
        (run / name).write_text("{}")
    (run / RUN_SETTINGS).write_text(json.dumps({"settings_key": "other"}))
    assert foreign_entries(run) == []
    assert prepare_run_dir(run, "key") == "new"
    assert "starting it over" in capsys.readouterr().out
    assert sorted(p.name for p in run.iterdir()) == [RUN_SETTINGS]
    assert json.loads((run / RUN_SETTINGS).read_text()) == {"settings_key": "key"}


def test_lite_refuses_a_foreign_run_folder_before_any_notebook_runs(tmp_path, monkeypatch, capsys):
    import papermill

    def tripwire(*args, **kwargs):
        raise AssertionError("a notebook ran")

    monkeypatch.setattr(papermill, "execute_notebook", tripwire)
    run = tmp_path / "out" / "runs" / "fspo_s0"  # the quick profile trains grpo and fspo, seed 0, into {out}/runs
    run.mkdir(parents=True)
    (run / "thesis.tex").write_text("mine")
    assert main(["lite", "--profile", "quick", "--out", str(tmp_path / "out"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fspo_s0 is not an fspo-lite run (no run_settings.json)" in err[0], err
    assert "thesis.tex" in err[0] and "move those out, or choose another runs_dir" in err[0]
    assert (run / "thesis.tex").read_text() == "mine"
    check_run_folders(tmp_path / "out" / "runs", ["grpo"], [0, 1])  # other folders: nothing to refuse
    assert experiment.job_folders(experiment.load_profile("quick"), tmp_path / "out") == [
        (tmp_path / "out" / "results").resolve(), (tmp_path / "out" / "runs").resolve()]


def _labeled(path, labels):
    items = [SentenceItem(id=f"a{i}", question="Q", evidence="E", response="S.", sentence="S.", span=(0, 2),
                          label=label) for i, label in enumerate(labels)]
    save_items(items, path)
    return items


def test_audit_sample_keeps_labeled_items_unless_told(tmp_path, capsys):
    from tests.test_audit import _runs

    runs = _runs(tmp_path / "runs")
    items_path, key_path = tmp_path / "items.jsonl", tmp_path / "key.json"
    command = ["audit", "sample", "--runs", str(runs), "--n", "8", "--out", str(items_path), "--key", str(key_path)]
    assert main(command) == 0
    assert main(command) == 0  # nothing labeled yet: drawn again
    items = load_items(items_path)
    for item in items[:3]:
        item.label = "supported"
    save_items(items, items_path)
    before, key_before = items_path.read_bytes(), key_path.read_bytes()
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds 3 labeled items" in err[0] and "--overwrite-labels" in err[0], err
    assert items_path.read_bytes() == before and key_path.read_bytes() == key_before
    assert main([*command, "--overwrite-labels"]) == 0
    assert all(item.label is None for item in load_items(items_path))
    items_path.write_text("my own notes\n")  # not an items file: refused by name, kept
    assert main(command) == 2
    assert "is not an audit items file" in capsys.readouterr().err
    assert items_path.read_text() == "my own notes\n"


def test_a_labeling_session_never_drops_the_labels_of_its_file(tmp_path):
    path = tmp_path / "labels.jsonl"
    labeled = _labeled(path, ["supported", None, "unsupported"])
    fresh = LabelingSession([SentenceItem(id="b0", question="Q", evidence="E", response="S.", sentence="S.",
                                          span=(0, 2))])
    with pytest.raises(ValueError, match="holds 2 labeled items this session would drop"):
        fresh.save(path)
    assert [i.label for i in load_items(path)] == ["supported", None, "unsupported"]
    session = LabelingSession.load(path)
    session.label("not_checkable", index=0)  # relabeling and labeling more: saved
    session.label("supported", index=1)
    session.save(path)
    assert [i.label for i in load_items(path)] == ["not_checkable", "supported", "unsupported"]
    fresh.save(path, replace_labels=True)
    assert [i.id for i in load_items(path)] == ["b0"] and labeled
