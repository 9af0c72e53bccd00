"""A fake OpenAI-compatible vLLM server on 127.0.0.1 for the server engine's tests (tests/test_vllm_rollout.py,
tests/test_vllm_server_hostile.py) and bench/hostile_inputs.py: a real socket server in a thread, started and stopped
by `serving`; `HostileVLLMServer` misbehaves on /v1/completions in one way at a time."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def well_formed_choices(body: dict) -> list[dict]:
    """A vLLM answer's choices for a /v1/completions request: three token ids (the last is 2, SmolLM2's end of text)
    and their log-probs per completion, prompt i's j-th completion at index i * n + j."""
    n = body["n"]
    return [{"index": i * n + j, "text": "", "token_ids": [200 + i, 201 + j, 2], "finish_reason": "stop",
             "logprobs": {"token_logprobs": [-0.1, -0.2, -0.3]}}
            for i in range(len(body["prompt"])) for j in range(n)]


class FakeVLLMServer(BaseHTTPRequestHandler):
    """Answers as a vLLM server does: adapter (un)loading with HTTP 200 and a plain-text body, HTTP 400 for a name
    loaded twice, /v1/models listing the base model and the loaded adapters with their folders, /v1/completions with
    three token ids and log-probs per completion (choices in reverse order, as indexes allow). A subclass changes
    what /v1/completions sends by overriding `completions`."""

    log: list = []
    loaded: dict = {}

    def answer(self, code: int, body: bytes, content_type: str = "application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.log.append((self.path, None))
        data = [{"id": "base", "root": "/models/base", "parent": None}] + [
            {"id": name, "root": path, "parent": "base"} for name, path in self.loaded.items()]
        self.answer(200, json.dumps({"object": "list", "data": data}).encode())

    def completions(self, body: dict) -> None:
        self.answer(200, json.dumps({"choices": list(reversed(well_formed_choices(body)))}).encode())

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.log.append((self.path, body))
        if self.path == "/v1/completions":
            return self.completions(body)
        name = body.get("lora_name")
        if self.path == "/v1/load_lora_adapter":
            if name in self.loaded:
                message = f"The lora adapter '{name}' has already been loaded."
                return self.answer(400, json.dumps({"error": {"message": message, "code": 400}}).encode())
            self.loaded[name] = body["lora_path"]
            return self.answer(200, f"Success: LoRA adapter '{name}' added successfully.".encode(), "text/plain")
        if self.path == "/v1/unload_lora_adapter":
            self.loaded.pop(name, None)
            return self.answer(200, f"Success: LoRA adapter '{name}' removed successfully.".encode(), "text/plain")
        self.answer(404, b'{"detail": "Not Found"}')

    def log_message(self, *args):
        pass


HOSTILE_MODES = ("hang", "drip headers", "drip body", "huge announced", "huge streamed", "deep JSON", "long integer",
                 "edit")
"""What `HostileVLLMServer` does on /v1/completions: wait without answering; send the status line, then one byte of a
header every `drip_every` seconds; send the headers, then one byte of the body every `drip_every` seconds; announce
50 GB (Content-Length); stream 64 MB of padding inside a well-formed answer, without Content-Length; send 100,000
nested brackets; send a 5,000-digit integer; or send the well-formed choices after `change` edited them."""


class HostileVLLMServer(FakeVLLMServer):
    """/v1/completions as `mode` says (HOSTILE_MODES); the adapter endpoints answer as vLLM does. Dripping and hanging
    handlers stop when `stop` is set (`serving` sets it on leaving) or after `drip_for` seconds."""

    mode = "edit"
    change = staticmethod(lambda choices: None)
    """Edits the well-formed choices in place (mode "edit")."""
    stop = threading.Event()
    drip_every = 0.1
    drip_for = 60.0

    def completions(self, body: dict) -> None:
        if self.mode == "hang":
            self.stop.wait(self.drip_for)
        elif self.mode == "drip headers":
            self.drip(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a")
        elif self.mode == "drip body":
            self.drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n", b" ")
        elif self.mode == "huge announced":
            self.send(b"HTTP/1.1 200 OK\r\nContent-Length: 50000000000\r\n\r\n{")
            self.stop.wait(self.drip_for)
        elif self.mode == "huge streamed":
            answer = json.dumps({"choices": well_formed_choices(body)}).encode()
            pieces = [b'{"padding": "'] + [b"a" * 65536] * 1024 + [b'", ' + answer[1:]]
            self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n", *pieces)
        elif self.mode == "deep JSON":
            self.answer(200, b"[" * 100_000 + b"]" * 100_000)
        elif self.mode == "long integer":
            self.answer(200, b'{"choices": ' + b"9" * 5000 + b"}")
        else:
            choices = well_formed_choices(body)
            type(self).change(choices)
            self.answer(200, json.dumps({"choices": choices}).encode())

    def send(self, *pieces: bytes) -> None:
        """Write the pieces until the client goes."""
        try:
            for piece in pieces:
                self.wfile.write(piece)
        except OSError:
            pass

    def drip(self, head: bytes, byte: bytes) -> None:
        """`head`, then `byte` every `drip_every` seconds until the client goes, `stop` is set or `drip_for` seconds
        have passed."""
        end = time.monotonic() + self.drip_for
        try:
            self.wfile.write(head)
            while not self.stop.wait(self.drip_every) and time.monotonic() < end:
                self.wfile.write(byte)
        except OSError:
            pass


@contextlib.contextmanager
def serving(handler: type[FakeVLLMServer], stop: threading.Event | None = None) -> Iterator[str]:
    """The handler served on a free port of 127.0.0.1 in a thread; yields the base URL. On leaving, `stop` is set
    (handlers that hang or drip wait on it) and the server is shut down without waiting for its handlers."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads, server.block_on_close = True, False
    handler.log, handler.loaded = [], {}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        if stop is not None:
            stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
