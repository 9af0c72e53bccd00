"""The server engine against a server that is not to be trusted: answers that drip, hang, overflow or are wrong in
shape end in one line naming the server, within rollout.vllm_server_timeout.

`check_completions` is tested on malformed and adversarial choices directly; the engine against a fake server on
127.0.0.1 (tests/fake_vllm_server.py) whose /v1/completions misbehaves in one way per test.
"""

from __future__ import annotations

import math
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo_lite.config import RolloutConfig
from fspo_lite.rollout.server_checks import (
    ANSWER_MARGIN,
    BYTES_PER_TOKEN,
    check_completions,
    completion_bytes,
    vocabulary_size,
)
from fspo_lite.rollout.vllm_server import VLLMServerRollout, answer_from_body, stale_adapters
from fake_vllm_server import HostileVLLMServer, serving

URL = "http://127.0.0.1:1/v1/completions"
TIMEOUT = 1.5
"""rollout.vllm_server_timeout of the engine tests: short, so the tests that wait it out stay fast."""
DRIP = 0.1
"""Seconds between the bytes of a dripping server: well inside TIMEOUT, so a per-read timeout never trips."""


def choice(index, ids, logprobs=None):
    return {"index": index, "text": "", "token_ids": ids, "logprobs": {"token_logprobs": logprobs}}


def check(choices, count=2, max_new_tokens=4, vocab=100, with_logprobs=True):
    return check_completions(choices, count, max_new_tokens, vocab, with_logprobs, URL)


def refused(call, match: str) -> str:
    with pytest.raises(RuntimeError, match=match) as error:
        call()
    message = str(error.value)
    assert "\n" not in message and "127.0.0.1:" in message, message
    return message


def test_well_formed_choices_come_back_in_index_order():
    completions, logprobs = check([choice(1, [7, 2], [-0.5, 0]), choice(0, [5], [-1e-6])])
    assert completions == [[5], [7, 2]] and logprobs == [[-1e-6], [-0.5, 0.0]]
    # one end-of-sequence token is a completion (a real vLLM may sample EOS first); log-probs may be left out
    assert check([choice(0, [2]), choice(1, [2, 3, 4, 5])], with_logprobs=False) == ([[2], [2, 3, 4, 5]], None)
    # a log-prob a hair above 0 is float32 rounding of a near-certain token; -9999 is vLLM's stand-in for -inf
    assert check([choice(0, [1], [0.0004]), choice(1, [1], [-9999.0])])[1] == [[0.0004], [-9999.0]]
    # without indexes the order is the server's
    assert check([{"token_ids": [3]}, {"token_ids": [4]}], with_logprobs=False)[0] == [[3], [4]]


@pytest.mark.parametrize("choices, match", [
    (None, "without a list of choices"),
    ({"0": choice(0, [1])}, "without a list of choices"),
    ([choice(0, [1], [-1.0]), "text"], "without a list of choices"),
    ([choice(0, [1], [-1.0])], "answered 1 completions for the 2 asked"),
    ([choice(i, [1], [-1.0]) for i in range(3)], "answered 3 completions for the 2 asked"),
    ([choice(0, [1], [-1.0]), choice(0, [1], [-1.0])], r"indexed \[0, 0\]"),
    ([choice(0, [1], [-1.0]), choice(2, [1], [-1.0])], r"indexed \[0, 2\]"),
    ([choice(0, [1], [-1.0]), choice("1", [1], [-1.0])], "indexed"),
    ([choice(0, [1], [-1.0]), choice(True, [1], [-1.0])], "indexed"),
    ([choice(0, [1], [-1.0]), {"index": 1, "text": "hi"}], "supports return_token_ids"),
    ([choice(0, [1], [-1.0]), choice(1, [], [])], "completion 1 with no tokens"),
    ([choice(0, [1], [-1.0]), choice(1, [1] * 5, [-1.0] * 5)], "5 tokens, more than the max_tokens=4"),
    ([choice(0, [1], [-1.0]), choice(1, [1] * 10_000, [-1.0] * 10_000)], "10000 tokens"),
    ([choice(0, [1], [-1.0]), choice(1, "12", [-1.0])], "token_ids '12', not a list"),
    ([choice(0, [1], [-1.0]), choice(1, {"0": 1}, [-1.0])], "not a list"),
    ([choice(0, [1], [-1.0]), choice(1, None, [-1.0])], "not a list"),
])
def test_malformed_choices_are_refused_in_one_line(choices, match):
    refused(lambda: check(choices), match)


@pytest.mark.parametrize("token", [True, False, 1.0, 3.5, "5", None, [1], {"id": 1}, math.nan])
def test_token_ids_must_be_plain_integers(token):
    message = refused(lambda: check([choice(0, [1], [-1.0]), choice(1, [4, token], [-1.0, -1.0])]),
                      "completion 1 with token id .* at position 1, not an integer")
    assert len(message) < 400


@pytest.mark.parametrize("token", [-1, 100, 101, 2**63, 2**70, 10**4000, 10**5000],
                         ids=["-1", "100", "101", "2**63", "2**70", "10**4000", "10**5000"])
def test_token_ids_must_lie_in_the_vocabulary(token):
    message = refused(lambda: check([choice(0, [token], [-1.0]), choice(1, [1], [-1.0])]),
                      "outside the policy's vocabulary of 100 tokens; the server must serve the policy's base model")
    assert len(message) < 400


@pytest.mark.parametrize("logprobs, match", [
    (None, "without logprobs.token_logprobs, which rollout.use_sampler_logprobs=true needs"),
    ("-1.0", "without logprobs.token_logprobs"),
    ([-1.0], "1 log-probs for 2 tokens"),
    ([-1.0, -1.0, -1.0], "3 log-probs for 2 tokens"),
    ([-1.0, math.nan], r"log-prob nan at position 1, not a finite number <= 0"),
    ([-math.inf, -1.0], "log-prob -inf at position 0"),
    ([-1.0, math.inf], "log-prob inf"),
    ([-1.0, 0.5], "log-prob 0.5"),
    ([-1.0, "-1.0"], "log-prob '-1.0'"),
    ([-1.0, None], "log-prob None"),
    ([-1.0, True], "log-prob True"),
    ([-1.0, [-1.0]], r"log-prob \[-1.0\]"),
])
def test_sampler_logprobs_must_be_one_finite_number_per_token(logprobs, match):
    refused(lambda: check([choice(0, [1], [-1.0]), choice(1, [1, 2], logprobs)]), match)
    # without rollout.use_sampler_logprobs the log-probs are not read
    assert check([choice(0, [1], [-1.0]), choice(1, [1, 2], logprobs)], with_logprobs=False)[1] is None


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
CHOICE = st.fixed_dictionaries({}, optional={"index": st.integers(-1, 3) | JSON, "token_ids": st.lists(
    st.integers(-2, 101) | JSON, max_size=6) | JSON, "logprobs": st.fixed_dictionaries(
    {"token_logprobs": st.lists(st.floats() | JSON, max_size=6) | JSON}) | JSON})


@settings(max_examples=300, deadline=None)
@given(st.lists(CHOICE, max_size=4) | JSON, st.booleans())
def test_any_answer_gives_checked_completions_or_one_line(choices, with_logprobs):
    try:
        completions, logprobs = check(choices, with_logprobs=with_logprobs)
    except RuntimeError as error:
        assert "\n" not in str(error) and str(error).startswith(URL) and len(str(error)) < 500
        return
    assert len(completions) == 2
    for index, ids in enumerate(completions):
        assert 1 <= len(ids) <= 4 and all(type(t) is int and 0 <= t < 100 for t in ids)
        if with_logprobs:
            assert len(logprobs[index]) == len(ids) and all(math.isfinite(v) and v <= 1e-3 for v in logprobs[index])


def test_answer_size_bound_and_vocabulary(tiny_policy):
    assert completion_bytes(8, 100, 256) == 8 * 356 * BYTES_PER_TOKEN + ANSWER_MARGIN
    model, tokenizer = tiny_policy
    assert vocabulary_size(model, tokenizer) == model.config.vocab_size == len(tokenizer)
    assert vocabulary_size(object(), tokenizer) == len(tokenizer)


def test_bodies_python_cannot_hold_as_json_are_text():
    deep = "[" * 100_000 + "]" * 100_000
    assert answer_from_body(deep) == {"message": deep}
    assert answer_from_body('{"n": ' + "9" * 5000 + "}")["message"].startswith('{"n": 999')


def test_a_hostile_adapter_listing_names_no_adapter(tmp_path):
    mine = {"id": "policy-killed-v1", "root": str(tmp_path / "killed-v1"), "parent": "base"}
    for data in [None, 7, "policy-x", {"id": "x"}, [7, None, "x"], [{"id": 5, "root": str(tmp_path / "a")}],
                 [{"id": "x", "root": str(tmp_path) + "/a\0b", "parent": "base"}], [{"id": "x", "root": ["/"]}]]:
        assert stale_adapters({"data": data}, tmp_path) == []
    assert stale_adapters({"data": [7, mine, {"id": "y", "root": "\0"}]}, tmp_path) == ["policy-killed-v1"]


@pytest.fixture
def hostile(tmp_path, tiny_policy):
    """A function: (mode, change, match) -> the one-line error of one generate() call against the hostile server, and
    its seconds."""
    HostileVLLMServer.stop, HostileVLLMServer.drip_every = threading.Event(), DRIP
    with serving(HostileVLLMServer, HostileVLLMServer.stop) as url:
        model, tokenizer = tiny_policy
        rollout = RolloutConfig(vllm_server_url=url, max_new_tokens=5, use_sampler_logprobs=True,
                                vllm_server_timeout=TIMEOUT)
        engine = VLLMServerRollout(model, tokenizer, rollout, adapter_root=tmp_path)

        def run(mode, change=None, match=""):
            HostileVLLMServer.mode, HostileVLLMServer.change = mode, staticmethod(change or (lambda choices: None))
            started = time.monotonic()
            message = refused(lambda: engine.generate(["Hello?", "Where is Rome?"], num_samples=2), match)
            assert url.rstrip("/") in message
            return message, time.monotonic() - started

        yield run


def test_the_fake_server_answers_well_formed_completions(tmp_path, tiny_policy):
    HostileVLLMServer.mode, HostileVLLMServer.change = "edit", staticmethod(lambda choices: None)
    with serving(HostileVLLMServer, threading.Event()) as url:
        model, tokenizer = tiny_policy
        rollout = RolloutConfig(vllm_server_url=url, max_new_tokens=3, use_sampler_logprobs=True,
                                vllm_server_timeout=TIMEOUT)
        result = VLLMServerRollout(model, tokenizer, rollout, adapter_root=tmp_path).generate(["Hi"], num_samples=2)
    assert result.completion_ids.tolist() == [[200, 201, 2], [200, 202, 2]]


@pytest.mark.parametrize("mode", ["hang", "drip headers", "drip body"])
def test_a_server_that_hangs_or_drips_is_cut_at_the_timeout(hostile, mode):
    message, seconds = hostile(mode, match=r"did not answer within rollout.vllm_server_timeout=1.5 s: raise "
                                           "rollout.vllm_server_timeout")
    assert TIMEOUT * 0.9 < seconds < TIMEOUT + 5  # one deadline for the whole request, not one per read


@pytest.mark.parametrize("mode", ["huge announced", "huge streamed"])
def test_an_oversized_answer_is_refused_before_it_is_read(hostile, mode):
    message, seconds = hostile(mode, match="sent more than .* bytes, more than an answer to this request can take")
    limit = int(message.split("sent more than ")[1].split(" bytes")[0].replace(",", ""))
    assert limit <= completion_bytes(4, 10, 5) and seconds < TIMEOUT


@pytest.mark.parametrize("mode", ["deep JSON", "long integer"])
def test_json_python_cannot_hold_is_refused_as_an_answer_without_choices(hostile, mode):
    hostile(mode, match="answered without a list of choices")


def too_many(choices):
    choices[1]["token_ids"] = list(range(100, 106))
    choices[1]["logprobs"]["token_logprobs"] = [-0.1] * 6


@pytest.mark.parametrize("change, match", [
    (too_many, "completion 1 with 6 tokens, more than the max_tokens=5 asked"),
    (lambda c: c[2].update(token_ids=[], logprobs={"token_logprobs": []}), "completion 2 with no tokens"),
    (lambda c: c[0]["token_ids"].__setitem__(1, 49152), "token id 49152 at position 1, outside the policy"),
    (lambda c: c[0]["token_ids"].__setitem__(0, -3), "token id -3 at position 0, outside"),
    (lambda c: c[3]["token_ids"].__setitem__(0, 2**80), "token id 1208925819614629174706176 at position 0, outside"),
    (lambda c: c[0]["token_ids"].__setitem__(2, 2.0), "token id 2.0 at position 2, not an integer"),
    (lambda c: c[0]["token_ids"].__setitem__(2, "2"), "token id '2' at position 2, not an integer"),
    (lambda c: c[0]["token_ids"].__setitem__(2, [2]), r"token id \[2\] at position 2, not an integer"),
    (lambda c: c[1]["logprobs"]["token_logprobs"].pop(), "completion 1 with 2 log-probs for 3 tokens"),
    (lambda c: c[1]["logprobs"]["token_logprobs"].__setitem__(0, math.nan), "log-prob nan at position 0"),
    (lambda c: c[1]["logprobs"]["token_logprobs"].__setitem__(0, math.inf), "log-prob inf at position 0"),
    (lambda c: c.pop(), "answered 3 completions for the 4 asked"),
    (lambda c: c.append(dict(c[0], index=4)), "answered 5 completions for the 4 asked"),
    (lambda c: c[0].update(index=1), r"indexed \[1, 1, 2, 3\]"),
])
def test_a_wrong_answer_is_refused_in_one_line_naming_the_server(hostile, change, match):
    hostile("edit", change, match)
