"""Small checks of the scale-path settings: the lite job's --set reaching notebook 03."""

import pytest

from fspo_lite.config import ConfigError, parse_overrides
from fspo_lite.drivers.experiment import load_profile, with_training_overrides


def test_lite_set_reaches_the_training_notebook_overrides():
    profile = load_profile("quick")
    changed = with_training_overrides(profile, parse_overrides(["model.load_in_4bit=true", "train.micro_batch_size=2"]))
    parameters = dict(changed.notebooks)
    assert parameters["03_train_fspo.ipynb"]["overrides"] == {"model.load_in_4bit": True, "train.micro_batch_size": 2}
    assert parameters["01_measure_hallucination.ipynb"] == dict(profile.notebooks)["01_measure_hallucination.ipynb"]
    assert with_training_overrides(profile, {}) is profile


def test_lite_set_rejects_unknown_keys():
    with pytest.raises(ConfigError):
        parse_overrides(["model.load_in_5bit=true"])


def test_fsdp_compute_dtype_rule():
    import torch

    from fspo_lite.update.fsdp import fsdp_compute_dtype as compute_dtype_for

    assert compute_dtype_for(torch.device("cpu"), torch.float32) is None  # CPUs compute in the weights' float32
    assert compute_dtype_for(torch.device("cpu"), torch.bfloat16) is None


def test_fsdp_refuses_a_4bit_base_in_one_line():
    import torch

    from fspo_lite.update.fsdp import shard_model

    model = torch.nn.Linear(2, 2)
    model.weight = torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.uint8), requires_grad=False)
    with pytest.raises(ValueError, match=r"floating-point weights only, this model has torch.uint8 ones .* "
                                         r"data-parallel"):
        shard_model(model)


def test_accelerate_sharding_is_refused_with_the_torchrun_command():
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from fspo_lite.update.distributed import Distributed

    accelerator = SimpleNamespace(num_processes=1, process_index=0, is_main_process=True, device="cpu",
                                  distributed_type=DistributedType.FSDP, state=SimpleNamespace())
    with pytest.raises(RuntimeError, match="train.fsdp=true and launch with torchrun"):
        Distributed(accelerator)


def test_lite_set_takes_notebook_parameters_and_config_keys(monkeypatch, tmp_path):
    """`lite --set 03.PARAM=V` sets a notebook parameter, `--set KEY=V` a config key of the training runs."""
    import fspo_lite.drivers.experiment as experiment
    from fspo_lite.__main__ import main

    seen = {}

    def fake_run(profile, out=None, progress=True, data_dir=None, command=None):
        seen["profile"] = profile
        return {"job": {"total_seconds": 1.0}}

    monkeypatch.setattr(experiment, "run_profile", fake_run)
    assert main(["lite", "--profile", "quick", "--out", str(tmp_path), "--quiet", "--set", "03.seeds=[7]",
                 "--set", "train.micro_batch_size=2"]) == 0
    parameters = dict(seen["profile"].notebooks)["03_train_fspo.ipynb"]
    assert parameters["seeds"] == [7] and parameters["overrides"]["train.micro_batch_size"] == 2
    assert main(["lite", "--profile", "quick", "--set", "train.no_such_key=1"]) == 1  # one-line error, no run


def test_fsdp_with_the_colocated_vllm_engine_is_refused_naming_the_server_engine(tmp_path, no_model_loads):
    """One vLLM engine inside each sharded training process is refused before any model loads, the line naming
    rollout.engine=vllm-server as the way; the server engine with FSDP (fspo_lite/rollout/server_sync.py), the
    transformers engine with FSDP and the colocated engine without it pass the check."""
    from fspo_lite.config import ConfigError, check_training_settings, load_config
    from fspo_lite.update.trainer import Trainer

    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", "train.fsdp=true",
                                               "rollout.engine=vllm"])
    with pytest.raises(ConfigError) as refused:
        Trainer(config, progress=False)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("train.fsdp=true with rollout.engine=vllm ")
    assert "use rollout.engine=vllm-server" in line
    server = ["rollout.engine=vllm-server", "rollout.vllm_server_url=http://127.0.0.1:8000"]
    check_training_settings(load_config("configs/tiny.yaml", ["train.fsdp=true", *server]))
    check_training_settings(load_config("configs/tiny.yaml", ["train.fsdp=true"]))
    check_training_settings(load_config("configs/tiny.yaml", ["rollout.engine=vllm"]))
