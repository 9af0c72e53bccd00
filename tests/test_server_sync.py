"""rollout.engine=vllm-server under train.fsdp (fspo_lite/rollout/server_sync.py) without vLLM: the pure helpers,
the engine with a stand-in for the process group, and a simulation of the several-GPU layout: `torchrun` with 2
FSDP ranks over gloo beside a fake server that speaks vLLM's HTTP API (tests/fake_vllm_server.py). The same run
beside vLLM's real CPU server is in tests/test_vllm_fsdp_server.py (`make test-vllm`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fake_vllm_server import FakeVLLMServer, serving  # noqa: E402

from fspo_lite.config import RolloutConfig  # noqa: E402
from fspo_lite.rollout.server_sync import (ShardedServerRollout, gathered_adapter, outcome_name,  # noqa: E402
                                           publish_outcome)
from fspo_lite.rollout.vllm_rollout import WRITING, AdapterVersions  # noqa: E402


def test_publish_outcome_and_outcome_name():
    assert publish_outcome(lambda weights: f"policy-x-v{len(weights)}", {"a": 1}) == ("ok", "policy-x-v1")

    def unreachable(weights):
        raise RuntimeError("cannot reach the vLLM server at http://h:1/v1/load_lora_adapter:\n refused")

    outcome = publish_outcome(unreachable, {})
    assert outcome == ("error", "cannot reach the vLLM server at http://h:1/v1/load_lora_adapter: refused")
    assert outcome_name(("ok", "policy-x-v3"), 1) == "policy-x-v3"
    with pytest.raises(RuntimeError, match=r"^cannot reach the vLLM server"):
        outcome_name(outcome, 0)  # rank 0 raises its own line
    with pytest.raises(RuntimeError, match=r"^rank 0 could not serve the new adapter, so rank 3 stops too: cannot"):
        outcome_name(outcome, 3)
    for hostile in (None, ("ok",), ("ok", 5), ["ok", "x"], "ok"):
        with pytest.raises(RuntimeError, match="rank 0 sent no adapter name"):
            outcome_name(hostile, 1)


class Group:
    """A stand-in for FSDPDistributed's part the engine uses: rank 0 of 1, or another rank that receives `sent`."""

    def __init__(self, rank: int = 0, sent=None):
        self.rank, self.is_main, self.device, self.sent = rank, rank == 0, torch.device("cpu"), sent
        self.broadcasts = []

    def broadcast_object(self, value):
        self.broadcasts.append(value)
        return value if self.is_main else self.sent.pop(0)


def test_adapter_versions_never_leave_a_half_written_adapter_under_a_version_name(tmp_path, tiny_policy):
    model, _ = tiny_policy
    versions = AdapterVersions(tmp_path, run_id="r")
    (tmp_path / f"{WRITING}r-v7").mkdir()  # what a run killed while writing leaves
    name, version, path = versions.save(model)
    assert (name, version, Path(path).name) == ("policy-r-v1", 1, "r-v1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-v1"]

    class Torn:
        def save_pretrained(self, folder, **kwargs):
            Path(folder).mkdir(parents=True)
            (Path(folder) / "adapter_config.json").write_text("{")
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        versions.save(Torn())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r-v1"]  # the served version stays whole


def test_sharded_engine_publishes_the_gathered_adapter_and_other_ranks_follow_rank_0(tmp_path, tiny_policy):
    from safetensors.torch import load_file

    model, tokenizer = tiny_policy
    with serving(FakeVLLMServer) as url:
        rollout = RolloutConfig(vllm_server_url=url, max_new_tokens=5, vllm_server_timeout=10)
        group = Group()
        engine = ShardedServerRollout(model, tokenizer, rollout, 64, tmp_path, group)
        run = engine.adapters.run_id
        assert group.broadcasts == [run]  # every rank takes rank 0's run id
        engine.generate(["Hello?"], num_samples=2)
        assert group.broadcasts[-1] == ("ok", f"policy-{run}-v1")
        folder = tmp_path.resolve() / "rollout_adapters" / "shared" / f"{run}-v1"
        assert FakeVLLMServer.log[0][1] == {"lora_name": f"policy-{run}-v1", "lora_path": str(folder)}
        assert FakeVLLMServer.log[-1][1]["model"] == f"policy-{run}-v1"
        saved = load_file(str(folder / "adapter_model.safetensors"))
        own = {k: v for k, v in gathered_adapter(model).items()}
        assert len(saved) == len(own) > 0
        assert all(torch.equal(saved[k], own[k.replace(".weight", ".default.weight")]) for k in saved)
        # another rank: no adapter written, no registration, the name rank 0 sent
        served = len([p for p, _ in FakeVLLMServer.log if p == "/v1/load_lora_adapter"])
        other = ShardedServerRollout(model, tokenizer, rollout, 64, tmp_path / "other",
                                     Group(1, sent=["abc", ("ok", "policy-abc-v1")]))
        assert other.adapters.run_id == "abc"
        other.generate(["Hello?"], num_samples=1)
        assert len([p for p, _ in FakeVLLMServer.log if p == "/v1/load_lora_adapter"]) == served
        assert FakeVLLMServer.log[-1][1]["model"] == "policy-abc-v1"
        assert not (tmp_path / "other" / "rollout_adapters").exists()
    # a server that cannot be reached: rank 0 sends its line to every rank, then raises it
    gone = RolloutConfig(vllm_server_url="http://127.0.0.1:9", vllm_server_timeout=5)
    group = Group()
    with pytest.raises(RuntimeError, match=r"^cannot reach the vLLM server at http://127\.0\.0\.1:9"):
        ShardedServerRollout(model, tokenizer, gone, 64, tmp_path / "gone", group).generate(["Hi"], 1)
    status, line = group.broadcasts[-1]
    assert status == "error" and line.startswith("cannot reach the vLLM server") and "\n" not in line
    other = ShardedServerRollout(model, tokenizer, gone, 64, tmp_path / "gone", Group(1, sent=["x", (status, line)]))
    with pytest.raises(RuntimeError, match=r"^rank 0 could not serve the new adapter, so rank 1 stops too: cannot"):
        other.generate(["Hi"], 1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.long
def test_two_fsdp_ranks_sample_from_one_fake_server_each_step_under_the_adapter_both_hold(tmp_path):
    """A simulation (fake server, tiny model): torchrun, 2 FSDP ranks, 2 steps through the real CLI. Each step rank 0
    registers one new adapter, and both ranks then send their own prompt under its name, never an older one; the
    last adapter served holds the weights of the checkpoint after step 1 (the gather is whole and in the right
    order), and nothing half-written is left in the adapters' folder."""
    from safetensors.torch import load_file

    from fspo_lite.data.examples import QAExample, save_examples

    data = tmp_path / "questions.jsonl"
    save_examples([QAExample(f"q{i}", f"What is fact {i}?", [f"answer {i}"]) for i in range(4)], data)
    out = tmp_path / "run"
    with serving(FakeVLLMServer) as url:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                   "127.0.0.1", "--master_port", str(free_port()), "-m", "fspo_lite", "train",
                   "--config", "configs/tiny.yaml", "--set", f"train.output_dir={out}", "--set", f"data.train={data}",
                   "--set", "train.steps=2", "--set", "train.save_every=1", "--set", "train.fsdp=true",
                   "--set", "rollout.engine=vllm-server", "--set", f"rollout.vllm_server_url={url}",
                   "--set", "train.learning_rate=0.01", "--set", "train.entropy_coef=0.01"]  # a gradient
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        log = list(FakeVLLMServer.log)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    loads = [i for i, (path, _) in enumerate(log) if path == "/v1/load_lora_adapter"]
    names = [log[i][1]["lora_name"] for i in loads]
    run = names[0].split("-")[1]
    assert names == [f"policy-{run}-v1", f"policy-{run}-v2"]
    for step, start in enumerate(loads):
        end = loads[step + 1] if step + 1 < len(loads) else len(log)
        sent = [body for path, body in log[start:end] if path == "/v1/completions"]
        assert [body["model"] for body in sent] == [names[step]] * 2  # both ranks, the step's adapter
        assert sorted(len(body["prompt"]) for body in sent) == [1, 1]  # one prompt each (prompts_per_step=2)
    assert sent[0]["prompt"] != sent[1]["prompt"]
    folder = out / "rollout_adapters" / "shared"
    assert sorted(p.name for p in folder.iterdir()) == [f"{run}-v2"]
    served = load_file(str(folder / f"{run}-v2" / "adapter_model.safetensors"))
    saved = load_file(str(out / "checkpoints" / "step-000001" / "model" / "adapter_model.safetensors"))
    assert served.keys() == saved.keys() and all(torch.equal(served[k], saved[k]) for k in saved)
    assert any(t.abs().sum() > 0 for k, t in served.items() if "lora_B" in k)  # the update reached the server
