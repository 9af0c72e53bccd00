"""The probe's `round four` group (bench/hostile_inputs.py runs it; docs/reliability.md): what earlier groups left
out, each case `refused` (one line, nothing written or sent), `valid` or `silent`/`lost`/`leak`/`hang`:

- empty and root-like output folders (`lite --out ""`, `train.output_dir` "", "/", "~");
- an audit key drawn over again for another --out (the labeled items' key);
- config.yaml through a link to a user's file;
- credentials in a server URL: config.yaml and the console's error line;
- an LLM judge server that drips its answer (verifier.request_timeout=1) and one that redirects the API key to
  another origin;
- a `train` into a folder inside a folder another process holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = "PLANTED-PASSWORD"


def served(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Judge(BaseHTTPRequestHandler):
    """/drip/models drips its answer, /redirect/models sends the client to `target`; others record the headers."""

    target, seen = "", []

    def do_GET(self):
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.target + "/record/models")
            self.end_headers()
            return
        Judge.seen.append(dict(self.headers))
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            if self.path.startswith("/drip"):
                time.sleep(0.2)

    def log_message(self, *args):
        pass


def judge_cases() -> list[tuple[str, str, str]]:
    from fspo_lite.scoring.llm import LLMError, OpenAICompatibleChatModel

    server = served(Judge)
    url = f"http://127.0.0.1:{server.server_port}"
    results = []
    try:
        started = time.monotonic()
        try:
            OpenAICompatibleChatModel(url + "/drip", timeout=1.0)
            kind, line = "silent", "answered"
        except LLMError as error:
            kind, line = "refused", str(error)[:110]
        seconds = time.monotonic() - started
        results.append(("LLM judge: a dripping server", kind if seconds < 3 else "hang", f"{seconds:.1f} s: {line}"))
        Judge.target, Judge.seen = f"http://localhost:{server.server_port}", []
        OpenAICompatibleChatModel(url + "/redirect", api_key=SECRET, timeout=10.0)
        leaked = any(SECRET in json.dumps(headers) for headers in Judge.seen)
        results.append(("LLM judge: a redirect to another origin", "leak" if leaked else "valid",
                        "the key reached the other origin" if leaked else "the key stayed with the first origin"))
    finally:
        server.shutdown()
    return results


def secret_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    from fspo_lite.config import load_config

    url = f"http://me:{SECRET}@127.0.0.1:9/"
    load_config(None, {"rollout.vllm_server_url": url}).save(folder / "config.yaml")
    kind = "leak" if SECRET in (folder / "config.yaml").read_text() else "valid"
    results = [("a password in rollout.vllm_server_url: config.yaml", kind, "redacted" if kind == "valid" else "kept")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "fspo_lite", "eval", "--config", str(ROOT / "configs" / "tiny.yaml"),
                          "--set", f"verifier.server_url={url}v1", "--set", "verifier.name=llm", "--limit", "1",
                          "--output", str(folder / "eval-secret")], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    printed = run.stdout + run.stderr
    results.append(("a password in verifier.server_url: the console", "leak" if SECRET in printed else "valid",
                    " ".join(printed.strip().splitlines()[-1:])[:110]))
    return results


def folder_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    tiny = str(ROOT / "configs" / "tiny.yaml")
    results = []
    summary = ROOT / "results" / "summary.json"
    before = summary.read_bytes() if summary.exists() else None
    from hostile_outside import no_notebook

    with no_notebook(probe):
        kind, line = probe.cli_verdict(["lite", "--profile", "quick", "--out", ""])
    if (summary.read_bytes() if summary.exists() else None) != before:
        kind = "lost"
    results.append(('lite --out ""', kind, line))
    for value in ("", "/", "~"):
        results.append((f"train.output_dir={value!r}", *probe.cli_verdict(
            ["train", "--config", tiny, "--set", f"train.output_dir={value}"])))
    precious = folder / "precious.txt"
    precious.write_text("mine")
    (folder / "linked").mkdir()
    (folder / "linked" / "config.yaml").symlink_to(precious)
    from fspo_lite.config import Config

    Config().save(folder / "linked" / "config.yaml")
    results.append(("config.yaml linked to a user's file", "lost" if precious.read_text() != "mine" else "valid",
                    "the linked file " + ("overwritten" if precious.read_text() != "mine" else "kept")))
    return results


def audit_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    from fspo_lite.drivers import audit

    runs = ROOT / "results" / "study" / "runs"
    key = folder / "audit_key.json"
    if not runs.is_dir():
        return []
    audit.sample_command(str(runs), ["grpo", "fspo"], 4, 0, str(folder / "a.jsonl"), str(key))
    before = key.read_bytes()
    kind, line = probe.verdict(lambda: audit.sample_command(str(runs), ["grpo", "fspo"], 4, 1,
                                                            str(folder / "b.jsonl"), str(key)))
    if key.read_bytes() != before:
        kind = "lost"
    elif line.startswith("ValueError") and "earlier draw" in line:  # the command's one-line refusal
        kind = "refused"
    return [("audit sample: the key of labeled items drawn over", kind, line)]


HOLD = ("import sys, time\nfrom fspo_lite.run_lock import run_lock\nwith run_lock(sys.argv[1]):\n"
        "    print('HOLDING', flush=True)\n    time.sleep(300)\n")


def lock_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FSPO_LITE_RUN_LOCKS", None)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder / "X" / "runs")], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        tiny = str(ROOT / "configs" / "tiny.yaml")
        kind, line = probe.cli_verdict(["train", "--config", tiny, "--set",
                                        f"train.output_dir={folder / 'X' / 'runs' / 'grpo_s0'}"])
        return [("train inside a folder another process holds",
                 "refused" if line.startswith("RunLockError") else kind, line)]
    finally:
        holder.kill()
        holder.wait(timeout=60)
        holder.stdout.close()


def cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    return [*folder_cases(folder, probe), *audit_cases(folder, probe), *secret_cases(folder, probe), *judge_cases(),
            *lock_cases(folder, probe)]
