"""The vllm-server engine's start probe of the server's log-prob mode: the pure comparison on hand-computed numbers,
and the probe end to end against a fake server that returns the policy's own log-probs at the run's temperature (a
server started with --logprobs-mode processed_logprobs) or at temperature 1 (one started without it). vLLM's real
CPU server, started with and without the flag, is in tests/test_vllm_real.py."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fspo_lite.config import ConfigError, load_config
from fspo_lite.models.logprobs import completion_logprobs
from fspo_lite.rollout.server_checks import LOGPROBS_MODE_TOLERANCE, logprobs_mode_gaps, logprobs_mode_refusal
from fspo_lite.rollout.vllm_server import PROBE_PROMPT, PROBE_SAMPLES, PROBE_TOKENS, probe_request
from fake_vllm_server import FakeVLLMServer, serving

# logits (2, 1, 0), the token of logit 2: log softmax at temperature 1 is 2 - log(e^2 + e + 1) = 2 - log(11.1073)
# = -0.40761; at temperature 0.5 the logits are (4, 2, 0): 4 - log(e^4 + e^2 + 1) = 4 - log(62.9872) = -0.14293
RAW, AT_HALF = -0.40761, -0.14293


def test_the_gaps_are_mean_distances_to_the_processed_and_the_raw_log_probs():
    assert torch.log_softmax(torch.tensor([2.0, 1.0, 0.0]), 0)[0].item() == pytest.approx(RAW, abs=1e-5)
    assert torch.log_softmax(torch.tensor([4.0, 2.0, 0.0]), 0)[0].item() == pytest.approx(AT_HALF, abs=1e-5)
    # a server that returned the raw log-prob for that token and -1.0 (processed: -0.9) for another
    gap, raw_gap = logprobs_mode_gaps([RAW, -1.0], [AT_HALF, -0.9], [RAW, -1.0])
    assert gap == pytest.approx((0.26468 + 0.1) / 2, abs=1e-5) and raw_gap == 0.0
    assert logprobs_mode_gaps([-1.0, -2.0], [-1.1, -2.0], [-0.5, -1.0]) == pytest.approx((0.05, 0.75))


def test_the_raw_log_probs_are_refused_in_one_line_naming_the_flag():
    line = logprobs_mode_refusal(0.18234, 0.0, 0.5, "http://127.0.0.1:8000")
    assert line is not None and "\n" not in line
    assert line.startswith("the vLLM server at http://127.0.0.1:8000 returns the raw model's log-probs (0 nats")
    assert "not those at temperature 0.5 (0.18 nats from the policy's)" in line
    assert line.endswith("start the server with --logprobs-mode processed_logprobs, or set "
                         "rollout.use_sampler_logprobs=false")


@pytest.mark.parametrize("gap, raw_gap, refused", [
    (1e-5, 0.18, False),  # processed, rounded as vLLM's CPU server rounds in float32
    (0.04, 0.2, False),  # a bfloat16 server: further from both, nearer the processed ones
    (0.18, 1e-5, True),  # raw
    (0.2, 0.04, True),  # raw, in bfloat16
    (0.009, 0.0, False),  # under the floor: a temperature so near 1 that only rounding tells them apart
    (LOGPROBS_MODE_TOLERANCE, 0.0, False),
    (0.011, 0.0, True),
    (0.05, 0.05, False),  # as near one as the other: nothing says the flag is missing
])
def test_only_log_probs_nearer_the_raw_ones_beyond_the_floor_are_refused(gap, raw_gap, refused):
    assert (logprobs_mode_refusal(gap, raw_gap, 0.7, "http://x") is not None) is refused


@pytest.mark.parametrize("served, at_temperature, raw, message", [
    ([], [], [], "no tokens"),
    ([-1.0], [-1.0, -2.0], [-1.0, -2.0], "1 log-probs against 2"),
    ([-1.0], [float("nan")], [-1.0], "not finite"),
    ([-1.0], [-1.0], [float("-inf")], "not finite"),
])
def test_gaps_of_malformed_input_are_refused(served, at_temperature, raw, message):
    with pytest.raises(ValueError, match=message):
        logprobs_mode_gaps(served, at_temperature, raw)


def test_the_probe_request_samples_at_the_runs_temperature_without_top_p():
    body = probe_request("policy-x-v1", [1, 2, 3], 0.7)
    assert body == {"model": "policy-x-v1", "prompt": [[1, 2, 3]], "return_token_ids": True, "n": PROBE_SAMPLES,
                    "max_tokens": PROBE_TOKENS, "temperature": 0.7, "top_p": 1.0, "logprobs": 0, "seed": 0,
                    "ignore_eos": True, "skip_special_tokens": True}
    json.dumps(body)  # what post_json sends


IDS = [[300 + i for i in range(PROBE_TOKENS)], [400 + i for i in range(PROBE_TOKENS)]]


class ModeServer(FakeVLLMServer):
    """Answers the probe with the tokens IDS and, for them, `logprobs` (set by the test before it starts the engine)."""

    logprobs: list[list[float]] = []

    def completions(self, body: dict) -> None:
        choices = [{"index": j, "text": "", "token_ids": IDS[j], "finish_reason": "length",
                    "logprobs": {"token_logprobs": self.logprobs[j]}} for j in range(body["n"])]
        self.answer(200, json.dumps({"choices": choices}).encode())


def policy_logprobs(model, tokenizer, temperature: float) -> list[list[float]]:
    """The tiny policy's log-probs of IDS after the probe's prompt at `temperature`."""
    prompt = torch.tensor([tokenizer(PROBE_PROMPT, add_special_tokens=False)["input_ids"]] * len(IDS))
    completion = torch.tensor(IDS)
    training = model.training
    try:
        with torch.no_grad():
            values = completion_logprobs(model.eval(), prompt, torch.ones_like(prompt), completion,
                                         torch.ones_like(completion), temperature)[0]
    finally:
        model.train(training)  # the session's shared policy keeps its mode
    return values.tolist()


def build(model, tokenizer, tmp_path, url: str, *overrides: str):
    from fspo_lite.speed import build_rollout_engine
    from fspo_lite.update.distributed import Distributed

    config = load_config("configs/tiny.yaml", [f"train.output_dir={tmp_path}", "rollout.engine=vllm-server",
                                               f"rollout.vllm_server_url={url}", "rollout.vllm_server_timeout=30",
                                               "rollout.use_sampler_logprobs=true", *overrides])
    return build_rollout_engine(model, tokenizer, config, Distributed())


def test_the_engine_refuses_a_server_with_raw_log_probs_when_it_starts(tmp_path, tiny_policy, capsys):
    model, tokenizer = tiny_policy
    training = model.training
    ModeServer.log, ModeServer.loaded = [], {}
    with serving(ModeServer) as url:
        ModeServer.logprobs = policy_logprobs(model, tokenizer, 1.0)  # vLLM's default, raw_logprobs
        with pytest.raises(ConfigError) as refused:
            build(model, tokenizer, tmp_path / "raw", url, "rollout.temperature=0.7")
        line = str(refused.value)
        assert "\n" not in line and "returns the raw model's log-probs (0 nats" in line, line
        assert "start the server with --logprobs-mode processed_logprobs" in line
        request = [body for path, body in ModeServer.log if path == "/v1/completions"][0]
        assert request["temperature"] == 0.7 and request["top_p"] == 1.0 and request["logprobs"] == 0
        assert model.training is training  # the probe's eval mode does not outlive it

        ModeServer.logprobs = policy_logprobs(model, tokenizer, 0.7)  # processed_logprobs
        engine = build(model, tokenizer, tmp_path / "processed", url, "rollout.temperature=0.7")
        assert engine.served_adapter is not None  # the probe sampled the policy's adapter
        shown = re.search(r"the vLLM server's log-probs at temperature 0.7: (\S+) nats from the policy's, (\S+) from",
                          capsys.readouterr().out)
        assert shown and float(shown[1]) < 1e-6 < float(shown[2]), shown

        ModeServer.log = []  # at temperature 1 raw and processed are one: nothing is asked
        build(model, tokenizer, tmp_path / "one", url, "rollout.temperature=1.0")
        build(model, tokenizer, tmp_path / "off", url, "rollout.temperature=0.7", "rollout.use_sampler_logprobs=false")
        assert not [path for path, _ in ModeServer.log if path == "/v1/completions"]
