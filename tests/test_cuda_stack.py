"""The CUDA stack checked before any model loads (fspo_lite/models/cuda_stack.py), on simulated machines: drivers 535,
550, 570 and 580, torch 2.11.0's CUDA 12.6, 12.8 and 13.0 builds, vLLM's CUDA 12 and 13 builds, T4, V100, A100 and
H100. Nothing here has a GPU: the stacks are plain values, and the parsers read texts written as the real files are.
Also Unsloth's vLLM engine's refusals (fspo_lite/rollout/vllm_rollout.py, unsloth_vllm_problems)."""

from __future__ import annotations

import pytest

from fspo_lite.config import load_config
from fspo_lite.models import cuda_stack as cs
from fspo_lite.models.cuda_stack import CudaStack, simulated_stack, stack_problems

DRIVERS = {"535.183.01": (12, 2), "550.54.15": (12, 4), "570.172.08": (12, 8), "580.65.06": (13, 0)}
BUILDS = [(12, 6), (12, 8), (13, 0)]
GPUS = ["T4", "V100", "A100", "H100"]


@pytest.mark.parametrize("driver, cuda", DRIVERS.items())
def test_a_driver_runs_the_cuda_of_its_branch(driver, cuda):
    assert cs.driver_cuda_version(driver) == cuda
    assert cs.driver_cuda_version("575.51.03") == (12, 9) and cs.driver_cuda_version("450.80.02") == (11, 0)
    assert cs.driver_cuda_version("390.12") is None and cs.driver_cuda_version("") is None
    assert cs.driver_cuda_version(None) is None and cs.driver_cuda_version("abc.1") is None


def test_parsers_on_real_texts_and_hostile_ones():
    proc = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")
    assert cs.parse_driver_version(proc) == "550.54.15"
    assert cs.parse_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release") == \
        "580.65.06"
    for hostile in ("", "garbage", "Kernel Module", "Kernel Module 5.5", "\x00" * 50, "Kernel Module 12345.1"):
        assert cs.parse_driver_version(hostile) is None, hostile
    assert cs.parse_cuda_version("12.8") == (12, 8) and cs.parse_cuda_version(" 13.0\n") == (13, 0)
    for hostile in (None, "", "12", "12.8.1", "x.y", "1234.5"):
        assert cs.parse_cuda_version(hostile) is None, hostile
    assert cs.cuda_from_label("2.11.0+cu128") == (12, 8) and cs.cuda_from_label("0.26.0+cu130") == (13, 0)
    assert cs.cuda_from_label("2.11.0") is None and cs.cuda_from_label("2.13.0+cpu") is None
    assert cs.cuda_from_label(None) is None and cs.cuda_from_label("1.0+cu1") is None
    # vllm 0.26.0's requirements as PyPI publishes them; a CUDA 12 set; none
    assert cs.cuda_major_from_requirements(["torch==2.11.0", "nvidia-cutlass-dsl[cu13]==4.6.0",
                                            'nvidia-deepstream-videodecode-cu13>=9.0.2; extra == "deepstream"']) == 13
    assert cs.cuda_major_from_requirements(["nvidia-cublas-cu12==12.8.4.1", "torch"]) == 12
    assert cs.cuda_major_from_requirements(["torch==2.11.0", "numpy", "cupy"]) is None
    assert cs.cuda_major_from_binary(b"\x7fELF....libc.so.6\x00libcudart.so.13\x00libcuda.so.1\x00") == 13
    assert cs.cuda_major_from_binary(b"\x7fELF libcudart.so.12\x00") == 12
    assert cs.cuda_major_from_binary(b"\x7fELF libcuda.so.1 libcudart.so.\xff") is None
    names = ["libbitsandbytes_cpu.so", "libbitsandbytes_cuda118.so", "libbitsandbytes_cuda128.so",
             "libbitsandbytes_cuda130.so", "libbitsandbytes_cuda12.so", "README.md"]
    assert cs.bnb_cuda_versions(names) == ((11, 8), (12, 8), (13, 0))


def test_arch_lists_follow_cudas_compatibility_rules():
    assert cs.arches_run_on((8, 6), ["sm_80"])            # SASS of the same major, lower minor
    assert not cs.arches_run_on((7, 0), ["sm_75", "sm_80"])  # no SASS runs on a lower minor or another major
    assert cs.arches_run_on((9, 0), ["sm_80", "compute_80"])  # PTX compiled on first use
    assert not cs.arches_run_on((7, 5), ["compute_80"])
    assert cs.arches_run_on((9, 0), ["sm_90a"]) and not cs.arches_run_on((7, 0), ["bogus", ""])
    assert cs.arches_run_on((12, 0), ["sm_120"]) and cs.arches_run_on((10, 0), ["sm_100"])


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("gpu", GPUS)
def test_torch_runs_where_the_driver_and_the_gpu_allow_and_is_refused_in_one_line_elsewhere(driver, build, gpu):
    """Every simulated machine: torch's build runs iff the driver's CUDA major reaches the build's, and the build has
    kernels for the GPU (cu128 and cu130 have none for a V100; cu126 has)."""
    stack = simulated_stack(driver, build, gpu)
    problems = stack_problems(stack, uses_vllm=False, uses_bnb=False)
    driver_ok = DRIVERS[driver][0] >= build[0]
    gpu_ok = not (gpu == "V100" and build != (12, 6))
    assert (problems == []) == (driver_ok and gpu_ok), problems
    for line in problems:
        assert "\n" not in line and line.startswith(f"torch 2.11.0+cu{build[0]}{build[1]}")
    if not driver_ok:
        assert problems[0].endswith("or a driver >= 580") and cs.TORCH_FOR_CUDA12 in problems[0]
    elif not gpu_ok:
        assert "compute capability 7.0" in problems[0] and cs.TORCH_FOR_VOLTA in problems[0]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("vllm_cuda", [12, 13])
def test_vllm_is_refused_naming_the_transformers_engine_where_its_build_cannot_run(driver, gpu, vllm_cuda):
    """torch 2.11.0's build of the same CUDA as vLLM's where the driver runs it (cu128 for 12, cu130 for 13); the
    vLLM line comes after torch's, and only a colocated engine asks for it."""
    build = (12, 8) if vllm_cuda == 12 else (13, 0)
    stack = simulated_stack(driver, build, gpu, vllm_cuda=vllm_cuda)
    vllm_line = cs.vllm_problem(stack)
    runs = DRIVERS[driver][0] >= vllm_cuda and not (gpu == "V100" and vllm_cuda == 13)  # CUDA 13 has no Volta
    assert (vllm_line is None) == runs
    if vllm_line:
        assert "\n" not in vllm_line and "use rollout.engine=transformers" in vllm_line
        assert vllm_line.startswith(f"rollout.engine=vllm: vllm 0.26.0 is a CUDA {vllm_cuda} build")
    assert stack_problems(stack, uses_vllm=False, uses_bnb=False) == stack_problems(stack, False, True)
    assert (vllm_line in stack_problems(stack, uses_vllm=True, uses_bnb=False)) == (vllm_line is not None)


def test_colab_as_it_ships_refuses_pypis_vllm_and_keeps_the_transformers_engine():
    """Colab's GPU runtime: driver 550 or 570, torch 2.11.0+cu128, a T4; pip puts PyPI's CUDA 13 vllm beside it."""
    for driver in ("550.54.15", "570.172.08"):
        stack = simulated_stack(driver, (12, 8), "T4", vllm_cuda=13, bnb_cudas=((12, 8), (13, 0)))
        assert stack_problems(stack, uses_vllm=False, uses_bnb=True) == []  # transformers engine, 4-bit: runs
        (line,) = stack_problems(stack, uses_vllm=True, uses_bnb=True)
        assert line.startswith("rollout.engine=vllm: vllm 0.26.0 is a CUDA 13 build and driver ")
        assert "use rollout.engine=transformers" in line
    # the same vllm on a driver >= 580 still cannot share a process with Colab's CUDA 12.8 torch
    stack = simulated_stack("580.65.06", (12, 8), "T4", vllm_cuda=13)
    (line,) = stack_problems(stack, uses_vllm=True, uses_bnb=False)
    assert "beside torch 2.11.0+cu128 (CUDA 12.8)" in line and "use rollout.engine=transformers" in line


def test_v100_is_driven_by_torchs_cuda_12_6_build_and_the_transformers_engine_only():
    v100 = simulated_stack("570.172.08", (12, 6), "V100", vllm_cuda=13)
    assert stack_problems(v100, uses_vllm=False, uses_bnb=False) == []
    assert "use rollout.engine=transformers" in cs.vllm_problem(v100)  # PyPI's CUDA 13 vllm on a 570 driver
    cuda12_vllm = simulated_stack("570.172.08", (12, 6), "V100", vllm_cuda=12)
    assert cs.vllm_problem(cuda12_vllm) is None  # a CUDA 12 vLLM build would (none on PyPI pins torch 2.11)
    pinned = simulated_stack("580.65.06", (13, 0), "V100", vllm_cuda=13)
    torch_line, vllm_line = stack_problems(pinned, uses_vllm=True, uses_bnb=False)
    assert cs.TORCH_FOR_VOLTA in torch_line
    assert vllm_line.endswith("this is Tesla V100-SXM2-16GB (compute capability 7.0): use rollout.engine="
                              "transformers (model.dtype float16)")


def test_bitsandbytes_without_a_library_for_torchs_cuda_is_refused():
    stack = simulated_stack("580.65.06", (13, 0), "A100", bnb_cudas=((11, 8), (12, 8)))
    (line,) = stack_problems(stack, uses_vllm=False, uses_bnb=True)
    assert line.startswith("model.load_in_4bit=true: bitsandbytes 0.50.2 carries libraries for CUDA 11.8, 12.8, not ")
    assert stack_problems(stack, uses_vllm=False, uses_bnb=False) == []


def test_no_driver_means_no_check_and_env_says_so():
    cpu = CudaStack(torch_version="2.13.0+cpu")
    assert stack_problems(cpu, True, True) == [] and cs.stack_lines(cpu)[0].startswith("CUDA stack: no NVIDIA driver")
    lines = cs.stack_lines(simulated_stack("550.54.15", (12, 8), "T4", vllm_cuda=13, bnb_cudas=((12, 8),)))
    assert lines[0] == "CUDA stack: driver 550.54.15 runs CUDA 12.4 at most"
    assert lines[1] == "  GPU: Tesla T4 (compute capability 7.5)"
    assert lines[2].startswith("  torch 2.11.0+cu128: CUDA 12.8 build, kernels for sm_75 ")
    assert lines[3] == "  vllm: 0.26.0, CUDA 13 build" and lines[4].endswith("libraries for CUDA 12.8")
    assert lines[5].startswith("  refused: rollout.engine=vllm: vllm 0.26.0 is a CUDA 13 build") and len(lines) == 6
    fits = cs.stack_lines(simulated_stack("580.65.06", (13, 0), "H100", vllm_cuda=13))
    assert fits[-1] == "  every part fits"


def test_this_machines_stack_is_read_without_importing_vllm():
    import sys

    stack = cs.read_cuda_stack()
    assert stack.torch_version and "vllm" not in sys.modules
    if stack.driver is None and stack.driver_cuda is None:  # a CPU machine: nothing is checked
        assert stack_problems(stack, True, True) == []


def test_a_mismatch_is_refused_before_a_model_loads(monkeypatch, tmp_path):
    """The Trainer on a simulated Colab (driver 550, torch cu128, T4, PyPI's CUDA 13 vllm): rollout.engine=vllm stops in
    one line before the data or the model is touched; the transformers engine passes the check."""
    from fspo_lite.models import policy
    from fspo_lite.update import trainer as trainer_module

    colab = simulated_stack("550.54.15", (12, 8), "T4", vllm_cuda=13)
    monkeypatch.setattr(cs, "current_stack", lambda: colab)

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(policy, "load_policy", no_load)
    monkeypatch.setattr(trainer_module, "load_policy", no_load)
    monkeypatch.setattr(trainer_module, "load_training_examples", no_load)
    config = load_config(None, ["rollout.engine=vllm", "model.name=HuggingFaceTB/SmolLM2-135M-Instruct",
                                "model.dtype=float16", f"train.output_dir={tmp_path / 'run'}"])
    with pytest.raises(cs.CudaStackError) as refused:
        trainer_module.Trainer(config)
    assert "\n" not in str(refused.value) and "use rollout.engine=transformers" in str(refused.value)
    from fspo_lite.rollout.engines import check_rollout_engine

    check_rollout_engine(config.rollout.__class__(engine="transformers"), config.model, config.train)


# ---- Unsloth's own vLLM engine ---------------------------------------------------------------------------------------


def unsloth_problems(*overrides, environ=None):
    from fspo_lite.rollout.unsloth_checks import unsloth_vllm_problems

    config = load_config(None, ["model.backend=unsloth", "rollout.engine=vllm", *overrides])
    return unsloth_vllm_problems(config.rollout, config.model, environ={} if environ is None else environ)


def test_unsloth_refuses_float32_without_4bit_and_takes_16_bit_or_4bit():
    (line,) = unsloth_problems("model.dtype=float32")
    assert "\n" not in line and "Unsloth's vLLM loader takes float16 or bfloat16 only" in line
    assert unsloth_problems("model.dtype=float16") == [] and unsloth_problems("model.dtype=bfloat16") == []
    assert unsloth_problems("model.dtype=float32", "model.load_in_4bit=true") == []


def test_unsloth_refuses_raw_sampler_logprobs_away_from_temperature_1():
    (line,) = unsloth_problems("model.dtype=float16", "rollout.use_sampler_logprobs=true", "rollout.temperature=0.7")
    assert "raw log-probs" in line and "rollout.temperature=0.7" in line
    assert unsloth_problems("model.dtype=float16", "rollout.use_sampler_logprobs=true") == []  # temperature 1
    assert unsloth_problems("model.dtype=float16", "rollout.temperature=0.7") == []  # pi_old recomputed


def test_unsloth_sleep_mode_needs_its_standby_variable():
    sleep = ("model.dtype=float16", "rollout.vllm_enable_sleep_mode=true")
    (line,) = unsloth_problems(*sleep)
    assert "UNSLOTH_VLLM_STANDBY=1" in line and line.endswith("set rollout.vllm_enable_sleep_mode=false")
    assert len(unsloth_problems(*sleep, environ={"UNSLOTH_VLLM_STANDBY": "0"})) == 1
    assert unsloth_problems(*sleep, environ={"UNSLOTH_VLLM_STANDBY": "1"}) == []


def test_unsloth_refusals_come_through_the_cuda_platforms_option_check(simulate_gpu, monkeypatch):
    from fspo_lite.rollout.vllm_rollout import vllm_option_problems

    simulate_gpu("Tesla T4")
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY", raising=False)
    config = load_config(None, ["model.backend=unsloth", "rollout.engine=vllm", "rollout.vllm_enable_sleep_mode=true"])
    problems = vllm_option_problems(config.rollout, config.model, "cuda")
    assert len(problems) == 2 and "model.dtype=float16" in problems[0] and "UNSLOTH_VLLM_STANDBY" in problems[1]


@pytest.mark.parametrize("gpu, torch_cuda, refused", [("V100", (12, 8), cs.TORCH_FOR_VOLTA), ("V100", (12, 6), None),
                                                      ("T4", (12, 8), None)])
def test_env_prints_the_stack_and_its_refusals(monkeypatch, gpu, torch_cuda, refused):
    """`fspo-lite env` on a simulated machine (driver 570, PyPI's CUDA 13 vllm): a V100 under torch's CUDA 12.8 build
    is refused naming the CUDA 12.6 install line; under the 12.6 build only vLLM is refused."""
    from fspo_lite.drivers import environment

    stack = simulated_stack("570.172.08", torch_cuda, gpu, vllm_cuda=13)
    monkeypatch.setattr(cs, "read_cuda_stack", lambda: stack)
    lines = environment.cuda_stack_lines()
    assert lines[0] == "CUDA stack: driver 570.172.08 runs CUDA 12.8 at most"
    refusals = [line for line in lines if line.startswith("  refused: ")]
    assert refusals[-1].startswith("  refused: rollout.engine=vllm: vllm 0.26.0 is a CUDA 13 build")
    assert (refused is None) == (len(refusals) == 1)
    if refused:
        assert refused in refusals[0]


def test_without_pysbd_sentence_splitting_is_refused_in_one_line_not_one_sentence_per_response(monkeypatch):
    """A machine without pysbd (a bare GPU image): splitting used to fall back to one span per text, silently; now the
    split and the trainer's pre-load check say so in one line."""
    import importlib.util
    import sys

    from fspo_lite import text

    monkeypatch.setitem(sys.modules, "pysbd", None)  # `import pysbd` raises ImportError
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pysbd" else real_find_spec(name, *a))
    text._segmenter.cache_clear()
    try:
        with pytest.raises(text.SentenceSplitterMissing, match="pip install pysbd") as missing:
            text.sentence_spans("One sentence. Another one.")
        assert "\n" not in str(missing.value)
        with pytest.raises(text.SentenceSplitterMissing):
            text.require_sentence_splitter()
    finally:
        text._segmenter.cache_clear()
    monkeypatch.undo()
    assert len(text.sentence_spans("One sentence. Another one.")) == 2
