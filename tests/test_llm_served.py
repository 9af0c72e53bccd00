"""The served-judge client's handling of log-probs a server refuses, and the yes/no token rule both backends share."""

import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fspo_lite.scoring.llm import (
    PARSED_REPLY_TOKENS,
    LLMError,
    OpenAICompatibleChatModel,
    allowed_top_logprobs,
    reads_as,
    refuses_logprobs,
    yes_no_token_ids,
    yes_probability_from_logprobs,
)


def test_allowed_top_logprobs_reads_the_limit_from_refusals():
    assert allowed_top_logprobs("Requested sample logprobs of 100, which is greater than max allowed: 20") == 20
    assert allowed_top_logprobs("top_logprobs must be <= 5") == 5
    assert allowed_top_logprobs("'top_logprobs' must be less than or equal to 20") == 20
    assert allowed_top_logprobs("logprobs are not supported") is None
    assert allowed_top_logprobs("") is None and allowed_top_logprobs(None) is None


def test_refuses_logprobs_needs_http_400_about_logprobs():
    assert refuses_logprobs("http://x/v1/chat/completions: HTTP 400: {'message': 'Requested sample logprobs of 9'}")
    assert not refuses_logprobs("http://x: HTTP 500: logprobs exploded")
    assert not refuses_logprobs("http://x: HTTP 400: bad model name")


def test_reads_as_strips_spaces_and_case():
    assert reads_as(" Yes", ("yes",)) and reads_as("YES\n", ("yes",)) and not reads_as("Y", ("yes",))
    assert not reads_as("yes.", ("yes",)) and not reads_as("", ("yes",))


def test_yes_no_token_ids_are_whole_words_only(smol_tokenizer):
    yes, no = yes_no_token_ids(smol_tokenizer)
    texts = smol_tokenizer.batch_decode([[i] for i in yes + no])
    assert {"Yes", " Yes", "yes", " yes"} <= set(texts[: len(yes)]) and {"No", " No", "no", " no"} <= set(texts[len(yes):])
    assert all(t.strip().lower() == "yes" for t in texts[: len(yes)]) and all(t.strip().lower() == "no" for t in texts[len(yes):])
    assert not set(yes) & set(no)


def test_yes_probability_from_logprobs_skips_malformed_candidates():
    field = {"content": [{"token": "Yes", "logprob": math.log(0.3), "top_logprobs": [
        {"token": " yes", "logprob": math.log(0.3)}, {"token": "NO", "logprob": math.log(0.2)},
        {"token": "No", "logprob": float("nan")}, {"token": "no", "logprob": True}, "junk", {"logprob": -1.0},
        {"token": "Y", "logprob": math.log(0.4)}]}]}
    assert yes_probability_from_logprobs(field) == pytest.approx(0.6)


class Refusing(BaseHTTPRequestHandler):
    """A chat server that allows `limit` top log-probs (None: refuses log-probs outright)."""

    limit = None
    seen: list = []

    def do_POST(self):  # noqa: N802
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Refusing.seen.append(request)
        asked = request.get("top_logprobs", 0) if request.get("logprobs") else 0
        if asked and (Refusing.limit is None or asked > Refusing.limit):
            message = ("logprobs are not supported by this server" if Refusing.limit is None else
                       f"Requested sample logprobs of {asked}, which is greater than max allowed: {Refusing.limit}")
            return self._send(400, {"error": {"message": message, "code": 400}})
        choice = {"message": {"role": "assistant", "content": "Yes, it is." if "Paris" in str(request) else "No."}}
        if asked:
            choice["logprobs"] = {"content": [{"token": "Yes", "logprob": math.log(0.7), "top_logprobs": [
                {"token": "Yes", "logprob": math.log(0.7)}, {"token": "No", "logprob": math.log(0.1)}][:asked]}]}
        self._send(200, {"choices": [choice]})

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    Refusing.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_server_with_a_lower_limit_is_asked_for_its_limit(refusing_url, capsys):
    Refusing.limit = 20
    chat = OpenAICompatibleChatModel(refusing_url, model="m", timeout=5, concurrency=4)
    assert chat.yes_probability(["Paris?", "Rome?", "Oslo?"]) == pytest.approx([0.875] * 3)
    assert chat.top_logprobs == 20 and chat.parsed_fallbacks == 0
    assert "refuses top_logprobs=100: asking for 20" in capsys.readouterr().out
    assert Refusing.seen[-1]["top_logprobs"] == 20


def test_a_server_refusing_logprobs_gets_parsed_replies(refusing_url, capsys):
    Refusing.limit = None
    chat = OpenAICompatibleChatModel(refusing_url, model="m", timeout=5, concurrency=1)
    assert chat.yes_probability(["Is Paris in France?", "Is Rome in Spain?"]) == [1.0, 0.0]
    assert chat.top_logprobs == 0 and chat.parsed_fallbacks == 2
    assert "refuses top_logprobs=100: parsing the replies instead" in capsys.readouterr().out
    last = Refusing.seen[-1]
    assert "logprobs" not in last and last["max_tokens"] == PARSED_REPLY_TOKENS
    assert sum("logprobs" in request for request in Refusing.seen) == 1  # asked once, then never again


class Hostile(BaseHTTPRequestHandler):
    """/v1/models drips one byte every 0.1 s; /v1/redirect sends the client to another origin (`target`), where
    `Recorder` keeps the headers it receives."""

    target = ""

    def do_GET(self):
        if self.path.endswith("/redirect/models"):
            self.send_response(302)
            self.send_header("Location", self.target + "/v1/models")
            self.end_headers()
            return
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(0.1)

    def log_message(self, *args):
        pass


class Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):
        Recorder.seen.append(dict(self.headers))
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_dripping_judge_server_is_cut_at_the_request_timeout():
    server = serve(Hostile)
    try:
        started = time.monotonic()
        with pytest.raises(LLMError, match="no whole reply within verifier.request_timeout=1 s"):
            OpenAICompatibleChatModel(f"http://127.0.0.1:{server.server_port}/v1", timeout=1.0)
        assert time.monotonic() - started < 3.0  # the body alone takes over 2 s to drip
    finally:
        server.shutdown()


def test_the_api_key_never_follows_a_redirect_to_another_origin():
    recorder, hostile = serve(Recorder), serve(Hostile)
    Recorder.seen = []
    Hostile.target = f"http://localhost:{recorder.server_port}"  # another host name: another origin
    try:
        model = OpenAICompatibleChatModel(f"http://127.0.0.1:{hostile.server_port}/v1/redirect", api_key="SECRET-KEY",
                                          timeout=10.0)
        assert model.model == "m" and Recorder.seen
        assert all("SECRET-KEY" not in json.dumps(headers) for headers in Recorder.seen)
    finally:
        recorder.shutdown()
        hostile.shutdown()
