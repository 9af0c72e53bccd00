"""The vLLM engines without vLLM: request building, adapter versioning, output conversion, the server client, the
checks before a model loads.

A fake `vllm` module (SamplingParams, LoRARequest) and a fake LLM that answers with objects
shaped like vLLM's RequestOutput / CompletionOutput / Logprob stand in for the GPU engine;
the server engine talks to a small HTTP server on 127.0.0.1.
"""

import copy
import sys
import types
from dataclasses import dataclass

import pytest
import torch

from fspo_lite.config import RolloutConfig, load_config
from fspo_lite.rollout.engines import build_rollout_engine, check_rollout_engine
from fspo_lite.rollout.sampling import Sampling
from fspo_lite.rollout.vllm_rollout import (
    AdapterVersions,
    VLLMRollout,
    adapter_name,
    completions_from_request_outputs,
    cpu_kv_cache_gib,
    cut_at_eos,
    llm_arguments,
    rollout_from_token_ids,
    sampling_arguments,
    vllm_lora_rank,
    vllm_option_problems,
    vllm_platform,
)
from fspo_lite.rollout.vllm_server import VLLMServerRollout, answer_from_body, stale_adapters
from fake_vllm_server import FakeVLLMServer, serving


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list
    cumulative_logprob: float | None
    logprobs: list | None
    finish_reason: str = "stop"


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list
    outputs: list


def test_vllm_lora_rank_rounds_up_to_an_accepted_value():
    assert [vllm_lora_rank(r) for r in (1, 4, 8, 16, 17, 64, 300)] == [1, 8, 8, 16, 32, 64, 320]
    with pytest.raises(ValueError, match="largest"):
        vllm_lora_rank(1024)


def test_sampling_arguments_sample_and_greedy():
    sample = sampling_arguments(Sampling(32, [2], True, 0.7, 0.9), 4, with_logprobs=True)
    assert sample == {"n": 4, "max_tokens": 32, "stop_token_ids": [2], "temperature": 0.7, "top_p": 0.9,
                      "skip_special_tokens": True, "logprobs": 0}
    greedy = sampling_arguments(Sampling(32, [2], False, 0.7, 0.9), 4, with_logprobs=False)
    assert greedy["n"] == 1 and greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0 and "logprobs" not in greedy


def test_cut_at_eos():
    assert cut_at_eos([5, 6, 2, 7, 2], [2]) == [5, 6, 2]
    assert cut_at_eos([5, 6], [2]) == [5, 6]
    assert cut_at_eos([], [2]) == []


def test_rollout_from_token_ids_pads_and_masks(smol_tokenizer):
    eos = smol_tokenizer.eos_token_id
    pad = smol_tokenizer.pad_token_id
    paris = smol_tokenizer(" Paris", add_special_tokens=False)["input_ids"]
    rollout = rollout_from_token_ids(
        [[10, 11, 12], [20]], [paris + [eos, 99], [30, 31], [40], [41, 42, 43]],
        [[-0.5] * (len(paris) + 2), [-1.0, -2.0], [-3.0], [-4.0, -5.0, -6.0]], 2, smol_tokenizer, [eos])
    width = max(len(paris) + 1, 3)
    assert rollout.prompt_ids.tolist() == [[10, 11, 12], [10, 11, 12], [pad, pad, 20], [pad, pad, 20]]
    assert rollout.prompt_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert rollout.completion_ids.shape == (4, width)
    assert rollout.completion_lengths.tolist() == [len(paris) + 1, 2, 1, 3]  # EOS kept, token after it dropped
    assert rollout.completion_ids[1].tolist() == [30, 31] + [pad] * (width - 2)
    assert rollout.texts[0] == " Paris"
    assert rollout.sampling_logprobs[1].tolist() == [-1.0, -2.0] + [0.0] * (width - 2)
    assert rollout.num_samples == 2
    with pytest.raises(ValueError, match="3 completions for 2 prompts x 2 samples"):
        rollout_from_token_ids([[1], [2]], [[1], [2], [3]], None, 2, smol_tokenizer, [eos])


def test_completions_from_request_outputs_reads_sampled_logprobs():
    outputs = [
        RequestOutput("0", [1, 2], [CompletionOutput(0, "a", [5, 6], -1.5, [{5: Logprob(-1.0), 9: Logprob(-0.1)},
                                                                            {6: Logprob(-0.5)}])]),
        RequestOutput("1", [3], [CompletionOutput(0, "b", [7], -2.0, [{7: Logprob(-2.0)}]),
                                 CompletionOutput(1, "c", [], 0.0, [])]),
    ]
    ids, logprobs = completions_from_request_outputs(outputs, with_logprobs=True)
    assert ids == [[5, 6], [7], []] and logprobs == [[-1.0, -0.5], [-2.0], []]
    assert completions_from_request_outputs(outputs, with_logprobs=False)[1] is None


def test_adapter_versions_get_new_ids_and_keep_only_the_newest(tmp_path, tiny_policy):
    versions = AdapterVersions(tmp_path, run_id="abc123")
    first = versions.save(tiny_policy[0])
    second = versions.save(tiny_policy[0])
    assert (first[0], first[1]) == ("policy-abc123-v1", 1) and (second[0], second[1]) == ("policy-abc123-v2", 2)
    assert not (tmp_path / "abc123-v1").exists()
    newest = tmp_path / "abc123-v2"
    assert (newest / "adapter_config.json").exists() and (newest / "adapter_model.safetensors").exists()


def test_adapter_names_differ_between_runs_on_one_folder(tmp_path, tiny_policy):
    """A resumed run or a second run must not reuse a name a server already holds (HTTP 400 "already loaded")."""
    names = {AdapterVersions(tmp_path).save(tiny_policy[0])[0] for _ in range(5)}
    assert len(names) == 5 and all(name.startswith("policy-") and name.endswith("-v1") for name in names)
    assert adapter_name("0f0f0f0f", 12) == "policy-0f0f0f0f-v12"


def test_answer_from_body_reads_json_text_and_nothing():
    assert answer_from_body('{"choices": []}') == {"choices": []}
    assert answer_from_body("Success: LoRA adapter 'policy-x-v1' added successfully.") == {
        "message": "Success: LoRA adapter 'policy-x-v1' added successfully."}
    assert answer_from_body("  \n") == {}
    assert answer_from_body("[1, 2]") == {"message": [1, 2]}
    assert answer_from_body("{not json") == {"message": "{not json"}


def test_stale_adapters_are_this_folders_adapters_only(tmp_path):
    root = tmp_path / "run" / "rollout_adapters" / "rank0"
    listing = {"data": [
        {"id": "smollm2-135m", "root": str(tmp_path), "parent": None},  # the base model
        {"id": "policy-old-v3", "root": str(root / "old-v3"), "parent": "smollm2-135m"},
        {"id": "policy-new-v1", "root": str(root / "new-v1"), "parent": "smollm2-135m"},
        {"id": "policy-other-v1", "root": str(tmp_path / "other" / "x-v1"), "parent": "smollm2-135m"},
        {"id": "odd", "root": None, "parent": "smollm2-135m"}, "not a dict", {"root": str(root / "z")},
    ]}
    assert stale_adapters(listing, root, keep="policy-new-v1") == ["policy-old-v3"]
    assert stale_adapters({}, root) == [] and stale_adapters({"data": None}, root) == []


def test_vllm_option_problems_on_cpu_and_cuda(tmp_path, monkeypatch):
    from fspo_lite.models import precision

    monkeypatch.setattr(precision, "native_bf16", lambda: True)  # a GPU with bfloat16 (tests/test_gpu_paths.py: others)
    plain = _config(tmp_path, "rollout.engine=vllm")
    assert vllm_option_problems(plain.rollout, plain.model, "cpu") == []
    both = _config(tmp_path, "rollout.engine=vllm", "rollout.vllm_enable_sleep_mode=true", "model.load_in_4bit=true")
    problems = vllm_option_problems(both.rollout, both.model, "cpu")
    assert len(problems) == 2 and "sleep_mode=false" in problems[0] and "load_in_4bit=false" in problems[1]
    assert all("\n" not in line for line in problems)
    assert vllm_option_problems(both.rollout, both.model, "cuda") == []
    # on CUDA, vLLM's LoRA kernels assert 16-bit inputs: a float32 model is refused before vLLM starts
    (line,) = vllm_option_problems(plain.rollout, plain.model, "cuda")
    assert plain.model.dtype == "float32" and "model.dtype=bfloat16" in line and "\n" not in line
    for fine in (["model.dtype=bfloat16"], ["model.dtype=float16"], ["model.backend=unsloth", "model.dtype=float16"]):
        config = _config(tmp_path, "rollout.engine=vllm", *fine)
        assert vllm_option_problems(config.rollout, config.model, "cuda") == [], fine
    unsloth_float32 = _config(tmp_path, "rollout.engine=vllm", "model.backend=unsloth")  # its loader takes 16-bit only
    assert "Unsloth's vLLM loader" in vllm_option_problems(unsloth_float32.rollout, unsloth_float32.model, "cuda")[0]


def test_llm_arguments_on_cuda_and_cpu(tmp_path):
    config = _config(tmp_path, "rollout.engine=vllm", "model.name=Qwen/Qwen2.5-0.5B-Instruct", "model.lora_r=12",
                     "rollout.generation_batch_size=24", "rollout.max_new_tokens=100", "train.seed=5",
                     "rollout.vllm_gpu_memory_utilization=0.25", "rollout.vllm_enable_sleep_mode=true")
    cuda = llm_arguments(config.rollout, config.model, config.train, 60, "cuda", rank=1)
    assert cuda["model"] == "Qwen/Qwen2.5-0.5B-Instruct" and cuda["enable_lora"] and cuda["max_loras"] == 1
    assert cuda["max_lora_rank"] == 16 and cuda["max_model_len"] == 160 and cuda["seed"] == 6
    assert cuda["max_num_seqs"] == 24  # the generation batch: CUDA graphs only up to it
    assert cuda["gpu_memory_utilization"] == 0.25 and cuda["enable_sleep_mode"] is True
    assert "kv_cache_memory_bytes" not in cuda and "logprobs_mode" not in cuda and "quantization" not in cuda
    assert "distributed_executor_backend" not in cuda
    sampler = _config(tmp_path, "rollout.engine=vllm", "model.name=Qwen/Qwen2.5-0.5B-Instruct",
                      "rollout.use_sampler_logprobs=true")
    cpu = llm_arguments(sampler.rollout, sampler.model, sampler.train, 60, "cpu", world_size=1, cpu_kv_gib=3)
    assert cpu["kv_cache_memory_bytes"] == 3 * 1024**3 and cpu["logprobs_mode"] == "processed_logprobs"
    assert "gpu_memory_utilization" not in cpu and "enable_sleep_mode" not in cpu
    assert llm_arguments(sampler.rollout, sampler.model, sampler.train, 60, "cpu")["kv_cache_memory_bytes"] == 1024**3
    ranks = llm_arguments(sampler.rollout, sampler.model, sampler.train, 60, "cuda", rank=1, world_size=2)
    assert ranks["distributed_executor_backend"] == "external_launcher"


def test_cpu_kv_cache_size_from_the_environment(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert cpu_kv_cache_gib() == 1
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert cpu_kv_cache_gib() == 3
    for bad in ("0", "-1", "1.5", "lots"):
        monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", bad)
        with pytest.raises(ValueError, match="whole GiB"):
            cpu_kv_cache_gib()


class FakeLLM:
    """Answers every request with fixed completions; records requests, LoRA requests and sleep calls."""

    def __init__(self):
        self.calls, self.events = [], []

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
        self.calls.append((prompts, sampling_params, lora_request))
        self.events.append("generate")
        return [RequestOutput(str(i), p["prompt_token_ids"], [
            CompletionOutput(j, "", [100 + j, 101, 2], None, [{100 + j: Logprob(-0.25)}, {101: Logprob(-0.5)},
                                                              {2: Logprob(-0.75)}])
            for j in range(sampling_params.kwargs["n"])]) for i, p in enumerate(prompts)]

    def sleep(self, level):
        self.events.append(f"sleep{level}")

    def wake_up(self):
        self.events.append("wake")


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(kwargs=kwargs)
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, id_, path: types.SimpleNamespace(name=name, id=id_, path=path)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)


def test_colocated_engine_passes_a_new_adapter_version_per_call(tmp_path, tiny_policy, fake_vllm):
    model, tokenizer = tiny_policy
    llm = FakeLLM()
    rollout = RolloutConfig(max_new_tokens=8, temperature=0.9, use_sampler_logprobs=True, vllm_enable_sleep_mode=True)
    engine = VLLMRollout(model, tokenizer, llm, rollout, adapter_root=tmp_path)
    prompts = ["What is the capital of France?", "Name a noble gas."]
    first = engine.generate(prompts, num_samples=3)
    second = engine.generate(prompts[:1], num_samples=2, do_sample=False)
    (requests, params, lora), (greedy_requests, greedy_params, lora2) = llm.calls
    expected_ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
    assert [r["prompt_token_ids"] for r in requests] == expected_ids
    assert params.kwargs["n"] == 3 and params.kwargs["temperature"] == 0.9 and params.kwargs["max_tokens"] == 8
    run = engine.adapters.run_id
    assert (lora.name, lora.id, lora2.id) == (f"policy-{run}-v1", 1, 2) and lora2.path.endswith(f"{run}-v2")
    assert len(greedy_requests) == 2 and greedy_params.kwargs["n"] == 1  # greedy: the prompt repeated
    assert llm.events == ["generate", "sleep1", "wake", "generate", "sleep1"]  # starts awake
    assert first.completion_ids.shape == (6, 3) and first.completion_ids[:3, 0].tolist() == [100, 101, 102]
    assert first.completion_mask.sum().item() == 18  # every completion ends with EOS (id 2), kept
    assert torch.allclose(first.sampling_logprobs[0], torch.tensor([-0.25, -0.5, -0.75]))
    assert second.prompt_ids.shape[0] == 2


def _config(tmp_path, *overrides):
    return load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", *overrides])


def _build(model, tokenizer, config, dist):
    from fspo_lite.speed import build_rollout_engine as trainers_factory  # the trainer's: the speed section decides

    return trainers_factory(model, tokenizer, config, dist)


def _check(config):
    return check_rollout_engine(config.rollout, config.model, config.train)


def test_engine_factory_choices_and_errors(tmp_path, tiny_policy):
    from fspo_lite.update.distributed import Distributed

    model, tokenizer = tiny_policy
    dist = Distributed()
    with pytest.raises(ValueError, match="rollout.engine='vlm' is out of range"):  # load_config refuses it first
        _config(tmp_path, "rollout.engine=vlm")
    config = _config(tmp_path)
    config.rollout.engine = "vlm"  # a config built in code reaches the factory unchecked
    with pytest.raises(ValueError, match="unknown rollout.engine 'vlm'"):
        _build(model, tokenizer, config, dist)
    with pytest.raises(ValueError, match="drop_ended_rows=true"):  # transformers gives log-probs from its own loop
        _build(model, tokenizer, _config(tmp_path, "rollout.use_sampler_logprobs=true",
                                         "speed.drop_ended_rows=false"), dist)
    with pytest.raises(ValueError, match="full fine-tuning"):
        _build(model, tokenizer, _config(tmp_path, "rollout.engine=vllm", "model.lora=false"), dist)
    with pytest.raises(ValueError, match="ppo_epochs=1"):
        _build(model, tokenizer, _config(tmp_path, "rollout.engine=vllm-server", "train.ppo_epochs=2",
                                         "rollout.use_sampler_logprobs=true"), dist)
    with pytest.raises(ValueError, match="vllm_server_url"):
        _build(model, tokenizer, _config(tmp_path, "rollout.engine=vllm-server"), dist)
    if "vllm" not in sys.modules or vllm_platform() == "cpu":  # no vllm here, or vLLM's CPU build: the tiny model
        with pytest.raises(RuntimeError, match="(?i)vllm"):
            _build(model, tokenizer, _config(tmp_path, "rollout.engine=vllm"), dist)


def test_check_rollout_engine_before_any_model_loads(tmp_path, monkeypatch):
    from fspo_lite.rollout import vllm_rollout
    from fspo_lite.models.policy import ModelLoadError

    colocated = _config(tmp_path, "rollout.engine=vllm")
    _check(_config(tmp_path))  # transformers: nothing to check
    with pytest.raises(ValueError, match="vllm_server_url"):
        _check(_config(tmp_path, "rollout.engine=vllm-server"))
    with pytest.raises(ValueError, match=r"rollout\.engine='sglang' is out of range"):  # the config refuses it first
        _config(tmp_path, "rollout.engine=sglang")
    built_in_code = _config(tmp_path)
    built_in_code.rollout.engine = "sglang"
    with pytest.raises(ValueError, match="unknown rollout.engine"):
        _check(built_in_code)
    real_find_spec = vllm_rollout.importlib.util.find_spec
    monkeypatch.setattr(vllm_rollout.importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(ModelLoadError, match="needs the 'vllm' package: .*make setup-vllm"):
        _check(colocated)
    monkeypatch.setattr(vllm_rollout.importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(vllm_rollout, "vllm_platform", lambda: None)
    with pytest.raises(ModelLoadError, match="finds no platform here"):
        _check(colocated)
    monkeypatch.setattr(vllm_rollout, "vllm_platform", lambda: "cpu")
    assert vllm_rollout.check_vllm_engine(colocated.rollout, colocated.model, colocated.train) == "cpu"
    with pytest.raises(ValueError, match="sleep_mode=false"):
        _check(_config(tmp_path, "rollout.engine=vllm", "rollout.vllm_enable_sleep_mode=true"))
    monkeypatch.setattr(vllm_rollout, "vllm_platform", lambda: "cuda")
    from fspo_lite.models import precision

    monkeypatch.setattr(precision, "native_bf16", lambda: True)  # an A100: bfloat16 is fine
    _check(_config(tmp_path, "rollout.engine=vllm", "rollout.vllm_enable_sleep_mode=true", "model.dtype=bfloat16"))
    monkeypatch.setattr(precision, "native_bf16", lambda: False)  # a T4: refused before any model loads
    with pytest.raises(ValueError, match="needs a GPU with native bfloat16 .*: set model.dtype=float16$"):
        _check(_config(tmp_path, "rollout.engine=vllm", "model.dtype=bfloat16"))
    with pytest.raises(ValueError, match="needs 16-bit weights"):
        _check(_config(tmp_path, "rollout.engine=vllm", "rollout.vllm_enable_sleep_mode=true"))


@pytest.fixture
def fake_server():
    with serving(FakeVLLMServer) as url:
        yield url


def test_server_engine_registers_adapters_and_reads_token_ids(tmp_path, tiny_policy, fake_server):
    model, tokenizer = tiny_policy
    FakeVLLMServer.loaded = {"policy-killed-v4": str(tmp_path / "killed-v4"),  # left by a killed run of this folder
                          "policy-elsewhere-v1": "/another/run/x-v1"}
    rollout = RolloutConfig(vllm_server_url=fake_server, max_new_tokens=5, use_sampler_logprobs=True,
                            vllm_server_timeout=10)
    engine = VLLMServerRollout(model, tokenizer, rollout, adapter_root=tmp_path)
    run = engine.adapters.run_id
    rollout = engine.generate(["Hello?", "Where is Rome?"], num_samples=2)
    engine.generate(["Hello?"], num_samples=2)
    paths = [path for path, _ in FakeVLLMServer.log]
    assert paths == ["/v1/load_lora_adapter", "/v1/models", "/v1/unload_lora_adapter", "/v1/completions",
                     "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/completions"]
    load, completion = FakeVLLMServer.log[0][1], FakeVLLMServer.log[3][1]
    assert load == {"lora_name": f"policy-{run}-v1", "lora_path": str(tmp_path / f"{run}-v1")}
    assert FakeVLLMServer.log[2][1] == {"lora_name": "policy-killed-v4"}
    assert completion["model"] == f"policy-{run}-v1" and completion["return_token_ids"] is True
    assert completion["prompt"] == tokenizer(["Hello?", "Where is Rome?"], add_special_tokens=False)["input_ids"]
    assert FakeVLLMServer.log[5][1] == {"lora_name": f"policy-{run}-v1"}
    assert set(FakeVLLMServer.loaded) == {f"policy-{run}-v2", "policy-elsewhere-v1"}
    assert rollout.completion_ids[:, :2].tolist() == [[200, 201], [200, 202], [201, 201], [201, 202]]
    assert torch.allclose(rollout.sampling_logprobs[3], torch.tensor([-0.1, -0.2, -0.3]))
    # a second engine on the same folder (a resumed run) and server: new names, the first run's adapter unloaded
    second = VLLMServerRollout(model, tokenizer, RolloutConfig(vllm_server_url=fake_server, max_new_tokens=5,
                                                               vllm_server_timeout=10), adapter_root=tmp_path)
    second.generate(["Hello?"], num_samples=1)
    assert set(FakeVLLMServer.loaded) == {f"policy-{second.adapters.run_id}-v1", "policy-elsewhere-v1"}
    # a name the server already holds: its HTTP 400 message in one line
    second.adapters.version = 0
    second.adapters.run_id = run
    FakeVLLMServer.loaded[f"policy-{run}-v1"] = "x"
    with pytest.raises(RuntimeError, match="HTTP 400: .*already been loaded"):
        second.generate(["Hello?"], num_samples=1)


def test_server_engine_errors_are_one_line(tmp_path, tiny_policy, fake_server):
    model, tokenizer = tiny_policy
    no_lora = VLLMServerRollout(model, tokenizer, RolloutConfig(vllm_server_url=fake_server + "nolora",
                                                                vllm_server_timeout=10), adapter_root=tmp_path)
    with pytest.raises(RuntimeError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        no_lora.generate(["Hello?"], num_samples=1)
    unreachable = RolloutConfig(vllm_server_url="http://127.0.0.1:9", vllm_server_timeout=5)
    gone = VLLMServerRollout(model, tokenizer, unreachable, adapter_root=tmp_path)
    with pytest.raises(RuntimeError, match="cannot reach the vLLM server"):
        gone.generate(["Hello?"], num_samples=1)


def test_trainer_uses_sampler_logprobs_as_pi_old(tmp_path, tiny_policy, monkeypatch):
    """With mu = 1 and sampler log-probs far below the policy's, the ratio is large and gets clipped;
    without them the ratio is exactly 1 and nothing is clipped."""
    from fspo_lite.update import trainer as trainer_module
    from fspo_lite.data.examples import QAExample

    real = trainer_module.score_rollouts

    def positive_advantages(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        scored.rewards = torch.arange(len(examples), dtype=torch.float32)
        return scored

    monkeypatch.setattr(trainer_module, "score_rollouts", positive_advantages)
    examples = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France.")] * 2
    clip = {}
    for use in (False, True):
        trainer = trainer_module.Trainer(_config(tmp_path / str(use), "train.steps=1", "reward.method=grpo"),
                                         copy.deepcopy(tiny_policy[0]), tiny_policy[1], examples, progress=False)
        engine = trainer.engine

        class WithSamplerLogprobs:
            def generate(self, prompts, num_samples=1, do_sample=True, max_new_tokens=None):
                rollout = engine.generate(prompts, num_samples, do_sample, max_new_tokens)
                if use:
                    rollout.sampling_logprobs = torch.full(rollout.completion_ids.shape, -50.0)
                return rollout

        trainer.engine = WithSamplerLogprobs()
        clip[use] = trainer.train()[0]["clip_fraction"]
    assert clip[False] == 0.0 and clip[True] > 0.2


class Stoppable:
    """An engine with a `shutdown()` (vLLM's LLM where it has one; the V1 engine-core client in every version)."""

    def __init__(self):
        self.calls = 0

    def shutdown(self):
        self.calls += 1


def test_close_shuts_down_the_engine_it_owns_through_either_vllm_api(tmp_path, tiny_policy):
    model, tokenizer = tiny_policy
    with_method = Stoppable()
    core_only = types.SimpleNamespace(llm_engine=types.SimpleNamespace(engine_core=Stoppable()))  # no LLM.shutdown
    not_ours = Stoppable()
    for llm, owns in ((with_method, True), (core_only, True), (not_ours, False)):
        engine = VLLMRollout(model, tokenizer, llm, RolloutConfig(max_new_tokens=8), adapter_root=tmp_path,
                             owns_llm=owns)
        engine.close()
        engine.close()  # a second close does nothing
        assert engine.llm is None
    assert (with_method.calls, core_only.llm_engine.engine_core.calls, not_ours.calls) == (1, 1, 0)


@pytest.mark.parametrize("owns_model, shut_down", [(True, 1), (False, 0)])
def test_unsloths_engine_ends_with_the_trainer_only_when_it_loaded_the_model(tmp_path, tiny_policy, owns_model,
                                                                             shut_down):
    """Unsloth starts its vLLM engine beside the model (model.vllm_engine): a trainer that loaded the model ends
    that engine when it closes; a model handed in keeps its engine for whoever handed it in."""
    from fspo_lite.update.distributed import Distributed

    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    model.vllm_engine = Stoppable()
    config = _config(tmp_path, "rollout.engine=vllm")
    config.model.backend = "unsloth"  # built in code: no Unsloth here to check it against
    engine = build_rollout_engine(model, tokenizer, config.rollout, config.model, config.train,
                                  config.data.max_prompt_tokens, Distributed(), owns_model=owns_model)
    engine.close()
    assert model.vllm_engine.calls == shut_down
