"""Chat backends: yes/no parsing and log-prob math, the server client against a local fake server,
and the local backend on the tiny random model."""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from fspo_lite.scoring.llm import (ChatModelSettings, LLMError, LocalChatModel, OpenAICompatibleChatModel,
                                   build_chat_model, parse_yes_no, two_way_probability, yes_probability_from_logprobs)


@pytest.mark.parametrize("text, expected", [
    ("Yes", True), ("no.", False), ("**No**, it is not.", False), ("Yes, because the evidence says so.", True),
    ("The answer is yes.", True), ("I think no", False), ("Yes and no", True), ("It is unclear whether yes or no", None),
    ("Maybe", None), ("", None), (None, None), ("123", None),
])
def test_parse_yes_no(text, expected):
    assert parse_yes_no(text) is expected


def test_two_way_probability_by_hand():
    assert two_way_probability(math.log(0.6), math.log(0.2)) == pytest.approx(0.75)
    assert two_way_probability(-math.inf, math.log(0.2)) == 0.0
    assert two_way_probability(-math.inf, -math.inf) == 0.5


def test_yes_probability_from_logprobs():
    field = {"content": [{"token": "Yes", "logprob": math.log(0.5), "top_logprobs": [
        {"token": "Yes", "logprob": math.log(0.5)}, {"token": " yes", "logprob": math.log(0.1)},
        {"token": "No", "logprob": math.log(0.2)}, {"token": "Maybe", "logprob": math.log(0.2)}]}]}
    assert yes_probability_from_logprobs(field) == pytest.approx(0.6 / 0.8)
    assert yes_probability_from_logprobs({"content": [{"token": "Hmm", "logprob": -0.1, "top_logprobs": []}]}) is None
    assert yes_probability_from_logprobs(None) is None
    assert yes_probability_from_logprobs({"content": []}) is None


class FakeOpenAI(BaseHTTPRequestHandler):
    """Answers like an OpenAI-compatible server: Yes when the prompt mentions Paris."""

    with_logprobs = True
    seen = []

    def log_message(self, *args):
        pass

    def _send(self, code, payload):
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, {"data": [{"id": "fake-judge"}]})
        else:
            self._send(404, {"error": "no such path"})

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeOpenAI.seen.append((self.headers.get("Authorization"), request))
        prompt = request["messages"][-1]["content"]
        if "explode" in prompt:
            return self._send(500, {"error": "boom"})
        yes = "Paris" in prompt
        choice = {"message": {"role": "assistant", "content": "Yes." if yes else "No, it is not."}}
        if request.get("logprobs") and FakeOpenAI.with_logprobs:
            p = 0.9 if yes else 0.2
            choice["logprobs"] = {"content": [{"token": "Yes", "logprob": math.log(p), "top_logprobs": [
                {"token": "Yes", "logprob": math.log(p)}, {"token": "No", "logprob": math.log(1 - p)}]}]}
        self._send(200, {"choices": [choice]})


@pytest.fixture(scope="module")
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture()
def fake_server(server_url):
    FakeOpenAI.with_logprobs, FakeOpenAI.seen = True, []
    return server_url


def test_server_client_yes_probability_and_generate(fake_server, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "secret")
    chat = build_chat_model(settings=ChatModelSettings(server_url=fake_server, api_key_env="FAKE_KEY", timeout=5))
    assert chat.model == "fake-judge"  # taken from /models
    probabilities = chat.yes_probability(["Is Paris in France?", "Is Rome in Spain?"])
    assert probabilities == pytest.approx([0.9, 0.2])
    assert chat.generate([[{"role": "user", "content": "Paris?"}]], max_new_tokens=5) == ["Yes."]
    authorization, request = FakeOpenAI.seen[-1]
    assert authorization == "Bearer secret" and request["max_tokens"] == 5 and request["model"] == "fake-judge"


def test_server_without_logprobs_falls_back_to_parsing(fake_server):
    FakeOpenAI.with_logprobs = False
    chat = OpenAICompatibleChatModel(fake_server, model="m", timeout=5)
    assert chat.yes_probability(["Paris?", "Rome?"]) == [1.0, 0.0]
    assert chat.parsed_fallbacks == 2


def test_server_errors_are_clear(fake_server):
    chat = OpenAICompatibleChatModel(fake_server, model="m", timeout=5)
    with pytest.raises(LLMError, match="HTTP 500"):
        chat.generate(["explode"])
    with pytest.raises(LLMError, match="not reachable"):
        OpenAICompatibleChatModel("http://127.0.0.1:9/v1", model="m", timeout=2).generate(["hi"])
    with pytest.raises(LLMError, match="http"):
        OpenAICompatibleChatModel("localhost:8000", model="m")
    with pytest.raises(LLMError, match="NOT_SET_ANYWHERE"):
        build_chat_model(settings=ChatModelSettings(server_url=fake_server, api_key_env="NOT_SET_ANYWHERE"))


@pytest.fixture()
def tiny_chat(tiny_policy):
    model, tokenizer = tiny_policy
    was_training = model.training
    yield LocalChatModel(model, tokenizer, batch_size=4)
    model.train(was_training)


def test_local_yes_probability_matches_a_manual_forward_pass(tiny_chat):
    prompts = ["Is Paris in France?", [{"role": "system", "content": "Judge."}, {"role": "user", "content": "Is 2+2=5?"}],
               "A much longer question that makes the batch need left padding for the short ones?"]
    batched = tiny_chat.yes_probability(prompts)
    for prompt, value in zip(prompts, batched):
        ids = tiny_chat.tokenizer(tiny_chat.render(prompt), return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logprobs = torch.log_softmax(tiny_chat.model(input_ids=ids).logits[0, -1].float(), dim=-1)
        yes = torch.logsumexp(logprobs[tiny_chat.yes_ids], 0).item()
        no = torch.logsumexp(logprobs[tiny_chat.no_ids], 0).item()
        assert value == pytest.approx(two_way_probability(yes, no), abs=1e-4)
    assert len(tiny_chat.yes_ids) >= 2 and not set(tiny_chat.yes_ids) & set(tiny_chat.no_ids)


def test_local_generate_returns_text(tiny_chat):
    replies = tiny_chat.generate(["Hello?", "Name a colour."], max_new_tokens=4)
    assert len(replies) == 2 and all(isinstance(r, str) for r in replies)


def test_every_chat_model_takes_its_settings_from_the_verifier_section(monkeypatch):
    """ChatModelSettings.of(verifier) by hand, and what each chat model of a run is built with from it: the
    relevance judge and the llm verifier with verifier.batch_size, claim extraction and the answer judge with 8,
    the answer judge without trust_remote_code."""
    from fspo_lite.config import Config, DetailConfig, VerifierConfig
    from fspo_lite.evaluation.judges import build_judge
    from fspo_lite.scoring import llm
    from fspo_lite.scoring.claims import build_claim_extractor
    from fspo_lite.scoring.methods.detail import build_relevance_judge
    from fspo_lite.scoring.verifiers.llm_judge import LLMJudgeVerifier

    verifier = VerifierConfig(name="llm", model="verifier-m", device="cpu", trust_remote_code=True, batch_size=3,
                              server_model="served", api_key_env="KEY", request_timeout=7.0)
    assert ChatModelSettings.of(verifier) == ChatModelSettings(None, "served", "KEY", 7.0, "cpu", True)
    seen = []
    monkeypatch.setattr(llm.LocalChatModel, "from_name",
                        classmethod(lambda cls, name, **kwargs: seen.append((name, kwargs)) or object()))
    build_relevance_judge(DetailConfig(relevance_weight=0.5, relevance_judge="llm", relevance_model="judge-m"), verifier)
    build_claim_extractor("llm", verifier)
    LLMJudgeVerifier.from_config(verifier)
    config = Config()
    config.verifier, config.evaluation.judge_model = verifier, "answer-m"
    build_judge("llm", "en", config)
    assert seen == [("judge-m", {"device": "cpu", "trust_remote_code": True, "batch_size": 3}),
                    ("verifier-m", {"device": "cpu", "trust_remote_code": True, "batch_size": 8}),
                    ("verifier-m", {"device": "cpu", "trust_remote_code": True, "batch_size": 3}),
                    ("answer-m", {"device": "cpu", "trust_remote_code": False, "batch_size": 8})]
