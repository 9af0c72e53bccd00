"""The checks of scripts/adapter_freshness.py without vLLM: its verdict by hand and the stale-adapter switch on each
engine kind. Its vLLM runs are in tests/test_vllm_real.py (`make test-vllm`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import load_script

freshness = load_script("adapter_freshness")


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
