"""The checks of scripts/adapter_freshness.py and scripts/trainers_in_turn.py, without vLLM: their verdicts by hand,
the stale-adapter switch on each engine kind, and the process and memory bookkeeping. The vLLM runs of both are in
tests/test_vllm_real.py (`make test-vllm`); scripts/gpu_session.py runs them on a GPU."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from conftest import load_script

freshness = load_script("adapter_freshness")
in_turn = load_script("trainers_in_turn")


def test_fresh_gaps_pass_and_each_kind_of_failure_is_named():
    assert freshness.freshness_problems([1e-3, 5e-3, 2e-3]) == []
    assert freshness.freshness_problems([1e-3, 5e-3, 0.5], stale_from=3) == []
    late = freshness.freshness_problems([1e-3, 0.02, 1e-3])
    assert len(late) == 1 and late[0].startswith("step 2: gap 0.02 is 20 x step 1's 0.001")
    weak = freshness.freshness_problems([1e-3, 1e-3, 0.05], stale_from=3)
    assert len(weak) == 1 and "step 3 (refresh skipped)" in weak[0] and "raise the learning rate" in weak[0]
    assert freshness.freshness_problems([1e-3]) == ["1 step(s) logged a gap; the check needs at least 2"]
    assert "finite" in freshness.freshness_problems([1e-3, float("nan")])[0]
    # an engine that matches the trainer exactly (gap 0) is measured against GAP_FLOOR, not against 0
    assert freshness.freshness_problems([0.0, 5e-5]) == []


def test_skip_adapter_refresh_keeps_what_each_engine_serves():
    server = SimpleNamespace(served_adapter="policy-ab-v2", _publish_adapter=lambda: "policy-ab-v3")
    freshness.skip_adapter_refresh(server)
    assert server._publish_adapter() == "policy-ab-v2"

    from fspo_lite.rollout.vllm_rollout import AdapterVersions

    versions = AdapterVersions(root="/nowhere", run_id="ab")
    versions.version = 2
    colocated = SimpleNamespace(adapters=versions)
    freshness.skip_adapter_refresh(colocated)
    assert versions.save(model=None) == ("policy-ab-v2", 2, "/nowhere/ab-v2")

    copy = object()
    transformers = SimpleNamespace(_copy=copy, sampling_model=lambda: "refreshed")
    freshness.skip_adapter_refresh(transformers)
    assert transformers.sampling_model() is copy
    with pytest.raises(ValueError, match="nothing can go stale"):
        freshness.skip_adapter_refresh(SimpleNamespace(_copy=None))


def test_a_child_process_is_seen_and_a_helper_is_not():
    before = {c["pid"] for c in in_turn.child_processes()}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        seen = in_turn.engine_processes(in_turn.child_processes(), before)
        assert [c["pid"] for c in seen] == [child.pid]
        helper = [{"pid": child.pid, "command": "python -c from multiprocessing.resource_tracker import main"}]
        assert in_turn.engine_processes(helper, before) == []
        started = time.monotonic()
        assert in_turn.leftovers_after(before, wait=0.5)[0]["pid"] == child.pid
        assert time.monotonic() - started < 5
    finally:
        child.kill()
        child.wait()
    assert in_turn.leftovers_after(before, wait=5) == []


def test_in_turn_problems_name_leftovers_and_memory_kept():
    clean = {"left_after_close": [], "free_gpu_gib_after_close": 70.5}
    assert in_turn.in_turn_problems([clean, clean], free_before=71.0, slack_gib=1.0) == []
    leaked = {"left_after_close": [{"pid": 42, "command": "VLLM::EngineCore"}], "free_gpu_gib_after_close": 40.0}
    problems = in_turn.in_turn_problems([clean, leaked], free_before=71.0, slack_gib=1.0)
    assert problems == ["trainer 2: processes left after close: 42",
                        "trainer 2: 40.0 GiB free after close, 71.0 GiB before the first"]
    assert in_turn.in_turn_problems([{"left_after_close": [], "free_gpu_gib_after_close": None}], None, 1.0) == []


def test_memory_an_engine_held_must_be_free_for_the_next_one():
    """Simulated on the CPU (the numbers stand for torch.cuda.mem_get_info readings; no GPU here): after trainer 1
    closes, the next engine asks 0.3 x 80 GiB = 24 GiB; an engine that kept its memory leaves too little."""
    gave_back = {"left_after_close": [], "free_gpu_gib_after_close": 78.0}
    kept = {"left_after_close": [], "free_gpu_gib_after_close": 20.0}
    assert in_turn.in_turn_problems([gave_back, gave_back], 79.0, 2.0, next_engine_gib=24.0) == []
    problems = in_turn.in_turn_problems([kept, gave_back], 79.0, 80.0, next_engine_gib=24.0)
    assert problems == ["trainer 1: 20.0 GiB free after close, the next engine asks 24.0 GiB"]
    assert in_turn.in_turn_problems([kept], 79.0, 80.0, next_engine_gib=24.0) == []  # no next engine after the last


def test_one_engine_per_rank_caps_batched_tokens_as_trl_does():
    from fspo_lite.config import load_config
    from fspo_lite.rollout.vllm_rollout import COLOCATED_BATCHED_TOKENS, llm_arguments

    config = load_config(None, ["rollout.engine=vllm", "model.dtype=float16"])
    one = llm_arguments(config.rollout, config.model, config.train, 64, "cuda")
    ranks = llm_arguments(config.rollout, config.model, config.train, 64, "cuda", rank=1, world_size=2)
    assert "max_num_batched_tokens" not in one and ranks["max_num_batched_tokens"] == COLOCATED_BATCHED_TOKENS == 4096
    assert ranks["distributed_executor_backend"] == "external_launcher" and ranks["seed"] == config.train.seed + 1
