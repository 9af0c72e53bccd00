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
