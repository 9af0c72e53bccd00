"""Waits with a bound: a hub model that is not cached is downloaded only once the hub answers within seconds, and
refused at once offline; a logged sample is cut to a plottable length where it is written and read."""

from __future__ import annotations

import json
import time

import pytest

from fspo_lite.logs.training_log import MAX_SAMPLE_TOKENS, bounded_sample, read_samples
from fspo_lite.models import hub
from fspo_lite.models.policy import ModelLoadError


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


@pytest.fixture
def no_loading(monkeypatch):
    """from_pretrained must not be reached: it would ask the hub."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    def forbidden(*args, **kwargs):
        raise AssertionError("from_pretrained was called for a model that is not cached")

    for cls in (AutoModelForSequenceClassification, AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", forbidden)


def test_an_uncached_nli_model_is_refused_in_seconds_when_the_hub_does_not_answer(monkeypatch, empty_cache,
                                                                                   no_loading):
    """Before: with HF_HUB_OFFLINE unset and no DNS answer, verifier.name=nli asked the hub for 237 s."""
    from huggingface_hub import constants

    from fspo_lite.scoring.verifiers.nli import CrossEncoderVerifier

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://hub.invalid")  # a name no DNS resolves
    monkeypatch.setattr(hub, "PROBE_SECONDS", 2.0)
    started = time.monotonic()
    with pytest.raises(ModelLoadError, match=r"'cross-encoder/nli-deberta-v3-base' is not in the Hugging Face cache "
                                             r"and the hub cannot be reached \(hub.invalid:80"):
        CrossEncoderVerifier(device="cpu")
    assert time.monotonic() - started < 5


def test_offline_an_uncached_model_is_refused_at_once_saying_how_to_allow_downloads(monkeypatch, empty_cache,
                                                                                    no_loading):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "hub_reachable", lambda seconds=None: pytest.fail("asked the hub while offline"))
    with pytest.raises(hub.HubUnavailable, match=r"HF_HUB_OFFLINE=1 forbids downloads; allow them with "
                                                  r"HF_HUB_OFFLINE=0 \(or unset\)"):
        hub.hub_options("nobody/uncached-model")


def test_the_policy_loader_refuses_an_uncached_hub_id_at_once(monkeypatch, empty_cache):
    from transformers import AutoModelForCausalLM

    from fspo_lite.config import ModelConfig
    from fspo_lite.models.policy import load_policy

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("asked the hub")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache .*HF_HUB_OFFLINE=0"):  # offline
        load_policy(ModelConfig(name="nobody/uncached-model", lora=False))


def test_allowed_downloads_wait_for_the_hub_only_seconds(monkeypatch, empty_cache, no_loading):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "ENDPOINT", "http://hub.invalid")  # a name no DNS resolves
    monkeypatch.setattr(hub, "PROBE_SECONDS", 2.0)
    started = time.monotonic()
    with pytest.raises(hub.HubUnavailable, match=r"the hub cannot be reached \(hub.invalid:80"):
        hub.hub_options("nobody/uncached-model")
    assert time.monotonic() - started < 4


def test_cached_models_and_local_folders_load_without_the_hub(monkeypatch, empty_cache, tmp_path):
    (empty_cache / "models--someone--model" / "snapshots" / "abc").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_options("someone/model") == {"local_files_only": True}
    assert hub.hub_options(tmp_path) == {}
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_reachable", lambda seconds=None: "no route")
    assert hub.hub_options("someone/model") == {"local_files_only": True}  # no update check on a dead network
    monkeypatch.setattr(hub, "hub_reachable", lambda seconds=None: None)
    assert hub.hub_options("someone/model") == {}


def runaway_row(tokens: int = 300_000) -> dict:
    text = "ab" * tokens
    return {"step": 1, "question": "q?", "gold": ["a"], "response": text, "reward": 0.5,
            "tokens": ["ab"] * tokens, "offsets": [[2 * i, 2 * i + 2] for i in range(tokens)], "advantage": 0.5,
            "token_advantages": [(-0.5 if i % 3 else 0.5) for i in range(tokens)],
            "sentence_labels": [1, 0], "sentence_spans": [[0, 10], [5000, 2 * tokens]], "method_details": {}}


def test_a_runaway_sample_is_cut_where_it_is_read(tmp_path):
    """Before: one 300k-token row in samples.jsonl made notebook 04 take 512 s (its flip plot drew every token)."""
    from fspo_lite.drivers.report import flip_example, plot_flip

    path = tmp_path / "samples.jsonl"
    short = {**runaway_row(3), "step": 2}
    path.write_text(json.dumps(runaway_row()) + "\n" + json.dumps(short) + "\n")
    started = time.monotonic()
    rows = read_samples(tmp_path)
    example = flip_example(rows)
    plot_flip(example, tmp_path / "flip.png")
    assert time.monotonic() - started < 60
    first = rows[0]
    assert first["truncated"] is True and rows[1] == short
    assert all(len(first[key]) == MAX_SAMPLE_TOKENS for key in ("tokens", "offsets", "token_advantages"))
    assert len(first["response"]) == 2 * MAX_SAMPLE_TOKENS  # up to the last kept token
    assert first["sentence_spans"] == [[0, 10]] and first["sentence_labels"] == [1]


def test_a_sample_is_cut_where_it_is_written():
    row = runaway_row(MAX_SAMPLE_TOKENS + 1)
    cut = bounded_sample(row)
    assert len(cut["tokens"]) == MAX_SAMPLE_TOKENS and cut["truncated"] is True
    assert cut["sentence_spans"] == [[0, 10]]
    small = runaway_row(5)
    assert bounded_sample(small) is small  # nothing to cut: the row as it was, no marker
