"""Shared fixtures: the bundled SmolLM2 tokenizer, a second tokenizer family built locally, the tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# OpenMP threads that spin while waiting make the 4-bit CPU tests ~10x slower on a busy 2-core machine (the Makefile
# sets the same); set here, before torch loads, so a plain `python -m pytest` gets it too
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The full benchmark files come from the data folder, as for a user ($FSPO_LITE_DATA, `python -m fspo_lite data`).
# On the team's machines a copy sits beside the repository; the tests use it through that same variable.
TEAM_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not os.environ.get("FSPO_LITE_DATA") and TEAM_DATA.is_dir():
    os.environ["FSPO_LITE_DATA"] = str(TEAM_DATA)


def load_script(name: str):
    """A script of scripts/ (a build tool outside the package, e.g. data_build) imported as a module."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_file(name: str) -> Path:
    """A file of the data folder, or skip the test when it is absent."""
    from fspo_lite.data.files import data_dir

    path = data_dir() / name
    if not path.exists():
        pytest.skip(f"{path} not present (prepare it with `python -m fspo_lite data prepare`)")
    return path


@pytest.fixture(scope="session")
def smol_tokenizer():
    from fspo_lite.models.policy import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.fixture(scope="session")
def metaspace_tokenizer():
    """A SentencePiece-style tokenizer (Metaspace + byte fallback, like Llama 2), trained here in a second."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    corpus = [
        "The capital of France is Paris. Paris lies on the Seine.",
        "Gold has the symbol Au and atomic number 79. Carbon has atomic number 6.",
        "<think> reasoning </think> <answer> answer </answer>",
        "Tokyo is the capital of Japan. It is a very large city.",
    ] * 20
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator(corpus, trainer)
    spec = json.loads(tokenizer.to_str())  # byte fallback needs <0xNN> pieces in the model vocabulary
    vocab = spec["model"]["vocab"]
    for piece in byte_tokens:
        vocab.setdefault(piece, len(vocab))
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    wrapped.pad_token = wrapped.eos_token
    return wrapped


@pytest.fixture
def no_model_loads(monkeypatch):
    """Tripwires on the ways a command reaches a model (the trainer's and the evaluation's loaders, the difficulty
    filter's run): a test using it fails if a model would load before the settings were checked."""
    from fspo_lite.drivers import filtering
    from fspo_lite.evaluation import harness
    from fspo_lite.update import trainer

    def forbidden(*args, **kwargs):
        raise AssertionError("a model was loaded before the settings were checked")

    monkeypatch.setattr(trainer, "load_policy", forbidden)
    monkeypatch.setattr(harness, "load_eval_model", forbidden)
    monkeypatch.setattr(filtering, "run_filter", forbidden)


@pytest.fixture(scope="session")
def tiny_policy():
    from fspo_lite.config import ModelConfig
    from fspo_lite.models.policy import load_policy

    return load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` run only where torch sees a CUDA device; elsewhere they skip with the reason. Tests
    marked `browser` (several minutes, a Chromium) run only when asked for: `make test-browser` (`-m browser`)."""
    import torch

    if "browser" not in (config.getoption("markexpr") or "").replace("not browser", ""):
        skip_browser = pytest.mark.skip(reason="browser test: run it with `make test-browser` (pytest -m browser)")
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(skip_browser)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


GPUS = {  # name: (compute capability, whether torch can emulate bfloat16 there, the dtype the rule must pick)
    "Tesla T4": ((7, 5), True, "float16"),
    "Tesla V100-SXM2-16GB": ((7, 0), True, "float16"),
    "NVIDIA A100-SXM4-40GB": ((8, 0), True, "bfloat16"),
    "NVIDIA H100 80GB HBM3": ((9, 0), True, "bfloat16"),
}


@pytest.fixture
def simulate_gpu(monkeypatch):
    """simulate_gpu(name, old_torch=False): torch.cuda answers as on that GPU of GPUS for this test (`_simulate`)."""
    return lambda name, old_torch=False: _simulate(monkeypatch, name, old_torch)


def _simulate(monkeypatch, name: str, old_torch: bool = False):
    """Make torch.cuda answer as on the GPU `name` of GPUS (is_bf16_supported() True where bfloat16 is only
    emulated, as torch answers on a T4); `old_torch`: is_bf16_supported has no including_emulation argument.
    Returns the dtype the rule must pick there."""
    import torch

    capability, emulated, expected = GPUS[name]

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return capability >= (8, 0) or (including_emulation and emulated)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        (lambda: capability >= (8, 0) or emulated) if old_torch else is_bf16_supported)
    return getattr(torch, expected)


def kbqa_record(sentences, labels, **fields):
    """A held-out kbqa record as the harness writes it: the reasoning `sentences` with their character spans in the
    output, every judge's `labels`, answer 'Paris' graded correct; `fields` replace any key (id, sample, prompt...)."""
    output = "<think>" + " ".join(sentences) + "</think>\n<answer>Paris</answer>"
    spans, at = [], 0
    for text in sentences:
        start = output.index(text, at)
        spans.append([start, start + len(text)])
        at = start + len(text)
    return {"benchmark": "kbqa", "id": "q0", "sample": 0, "grade": "CORRECT", "f1": 1.0, "format_ok": True,
            "output": output, "sentence_spans": spans, "gold": ["Paris"], "prompt": "", "response_tokens": 30,
            "near_duplicate_sentences": 0, "sentence_labels": labels,
            "sentence_labels_by_judge": {"kb": labels, "embedding": labels, "likelihood": labels}, **fields}
