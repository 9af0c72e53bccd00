"""Writes that cannot be torn (fspo_lite.atomic): a full disk in the middle of a rewrite (simulated by a write that
raises OSError ENOSPC, or torch.save's RuntimeError "unexpected pos") leaves the old file whole and readable, no
temporary file behind, and one error line that says the disk is full and where."""

import builtins
import errno
import json

import pytest

from fspo_lite.drivers.cli_help import error_line
from fspo_lite.atomic import DiskFullError, atomic_write_json, atomic_write_text, is_disk_full
from fspo_lite.jsonl import read_jsonl


def full_disk_after(monkeypatch, room: int):
    """Make every file opened for writing fail with ENOSPC after `room` characters (the first ones do land)."""
    real_open = builtins.open

    def fake_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if "w" not in mode or "b" in mode:
            return handle
        written = [0]
        real_write = handle.write

        def write(text):
            if written[0] + len(text) > room:
                real_write(text[: max(room - written[0], 0)])
                handle.flush()
                raise OSError(errno.ENOSPC, "No space left on device")
            written[0] += len(text)
            return real_write(text)

        handle.write = write
        return handle

    monkeypatch.setattr(builtins, "open", fake_open)


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def test_a_full_disk_mid_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    atomic_write_json(path, {"accuracy": 0.5})
    full_disk_after(monkeypatch, 10)
    with pytest.raises(DiskFullError) as caught:
        atomic_write_json(path, {"accuracy": 0.75, "long": "x" * 1000})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert leftovers(tmp_path) == []
    line = error_line(caught.value)
    assert line == (f"fspo_lite: error: the disk is full: no space left to write summary.json in {tmp_path} (the "
                    "file there is unchanged); free space on that disk, or choose an output folder on another one")
    assert is_disk_full(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 128 vs 64"))
    assert not is_disk_full(RuntimeError("shape mismatch"))


def test_other_errors_pass_unchanged_and_clean_up(tmp_path):
    path = tmp_path / "a.txt"
    atomic_write_text(path, "old")

    class Boom(Exception):
        pass

    from fspo_lite.atomic import atomic_path

    with pytest.raises(Boom):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise Boom()
    assert path.read_text() == "old" and leftovers(tmp_path) == []


def test_rejudge_on_a_full_disk_keeps_every_record(tmp_path, monkeypatch):
    from fspo_lite.config import VerifierConfig
    from fspo_lite.data.examples import load_examples
    from fspo_lite.evaluation.rejudge import rejudge_runs
    from fspo_lite.scoring.verifiers import build_verifier

    example = next(e for e in load_examples("bundled:kbqa_test") if e.extra["category"] == "atomic_number")
    text = f"<think>The atomic number is {example.answers[0]}.</think><answer>{example.answers[0]}</answer>"
    records = [{"benchmark": "kbqa", "id": example.id, "sample": k, "output": text,
                "sentence_spans": [[7, text.index(".") + 1]]} for k in range(200)]
    run = tmp_path / "fspo_s0" / "eval"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    before = (run / "records.jsonl").read_bytes()
    verifier = build_verifier(VerifierConfig(name="kb"))
    full_disk_after(monkeypatch, len(before) // 2)
    with pytest.raises(DiskFullError, match=f"no space left to write records.jsonl in {run}"):
        rejudge_runs(tmp_path, verifier, "kb")
    monkeypatch.undo()
    assert (run / "records.jsonl").read_bytes() == before and len(read_jsonl(run / "records.jsonl")) == 200
    assert leftovers(run) == []
    assert rejudge_runs(tmp_path, verifier, "kb") == {"fspo_s0": 200}  # with room, every record is judged
    assert all(r["sentence_labels_by_judge"]["kb"] == [1] for r in read_jsonl(run / "records.jsonl"))


def test_evaluation_results_on_a_full_disk_keep_the_old_files(tmp_path, monkeypatch):
    import pandas as pd

    from fspo_lite.evaluation.harness import EvalResult

    old = EvalResult(pd.DataFrame({"benchmark": ["kbqa"], "metric": ["accuracy"], "value": [0.5]}),
                     {"benchmarks": {"kbqa": {}}}, [{"benchmark": "kbqa", "id": "q1"}])
    old.save(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    new = EvalResult(old.table, {"benchmarks": {"kbqa": {}, "halueval": {}}},
                     [{"benchmark": "kbqa", "id": f"q{k}", "output": "x" * 100} for k in range(100)])
    full_disk_after(monkeypatch, 500)
    with pytest.raises(DiskFullError, match="records.jsonl"):
        new.save(tmp_path)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


class TinyModel:
    """What save_checkpoint needs of a model: save_pretrained writing a safetensors file."""

    def __init__(self, value: float):
        import torch

        self.weight = torch.full((4,), value)

    def save_pretrained(self, folder, safe_serialization=True, state_dict=None):
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight}, str(folder / "adapter_model.safetensors"))


def test_a_checkpoint_on_a_full_disk_keeps_the_one_it_would_replace(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from fspo_lite.update import checkpoint

    def save(value):
        model = TinyModel(value)
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
        return checkpoint.save_checkpoint(tmp_path, 3, model, optimizer, {"data_position": 0})

    final = save(1.0)
    real_save = torch.save

    def torch_save_on_a_full_disk(obj, path, *args, **kwargs):
        real_save(obj, path, *args, **kwargs)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 448 vs 342")

    monkeypatch.setattr(torch, "save", torch_save_on_a_full_disk)
    with pytest.raises(DiskFullError) as caught:
        save(2.0)
    monkeypatch.undo()
    assert "the disk is full: no space left to write step-000003 in" in error_line(caught.value)
    checkpoint.verify_checkpoint(final)
    assert load_file(str(final / "model" / "adapter_model.safetensors"))["weight"].tolist() == [1.0] * 4
    assert sorted(p.name for p in final.parent.iterdir()) == ["latest", "step-000003"]  # no staging folder left
    save(2.0)  # resaving the same step (a finished run resumed): replaced, nothing set aside stays
    assert load_file(str(final / "model" / "adapter_model.safetensors"))["weight"].tolist() == [2.0] * 4
    assert sorted(p.name for p in final.parent.iterdir()) == ["latest", "step-000003"]


def test_a_crash_between_the_two_renames_of_a_replacement_loses_no_checkpoint(tmp_path):
    import torch

    from fspo_lite.update import checkpoint

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    final = checkpoint.save_checkpoint(tmp_path, 3, TinyModel(1.0), optimizer, {"data_position": 0})
    aside = final.parent / ".replaced-step-000003-4242"
    final.rename(aside)  # the old copy set aside, the new one not yet renamed in: the process dies here
    assert checkpoint.latest_checkpoint(tmp_path) == final
    checkpoint.verify_checkpoint(final)
    assert not aside.exists()
    (final.parent / ".replaced-step-000003-4243").mkdir()  # the new one did get in: the old copy is removed
    assert checkpoint.latest_checkpoint(tmp_path) == final
    assert sorted(p.name for p in final.parent.iterdir()) == ["latest", "step-000003"]
