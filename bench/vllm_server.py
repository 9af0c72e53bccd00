"""A real vLLM OpenAI server on 127.0.0.1 for the tests and benchmarks: started, waited for, stopped.

    with VLLMServer(model_dir, served_name="smollm2-135m") as server:
        server.url        # http://127.0.0.1:<free port>

The server runs in its own process group (start_new_session), so `stop()` ends it and every process
it started (vLLM's engine core, its workers) with one killpg: SIGTERM, then SIGKILL after a grace
period. It serves LoRA adapters loaded at run time (--enable-lora, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)
and, on vLLM's CPU build, a fixed KV cache (VLLM_CPU_KVCACHE_SPACE, GiB) instead of a share of the RAM.
Its log goes to a file; a server that exits or does not answer in time raises with the log's tail.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(model: str, port: int, served_name: str, max_lora_rank: int = 16, max_model_len: int = 1024,
                   max_logprobs: int = 20, python: str = sys.executable, dtype: str = "float32",
                   extra_args: tuple[str, ...] = (), logprobs_mode: str | None = "processed_logprobs") -> list[str]:
    """The command line of a vLLM OpenAI server with runtime LoRA on 127.0.0.1:port (float32, as the trainer on a
    CPU; a CUDA GPU needs bfloat16 or float16 for vLLM's LoRA kernels), then `extra_args`.

    `--logprobs-mode processed_logprobs`: the log-probs it returns are those after temperature, as the trainer
    computes them (rollout.use_sampler_logprobs); vLLM's default, the raw model's, differs at any temperature but 1.
    Greedy requests (the served judge's) get the same numbers either way. logprobs_mode=None leaves the flag out
    (vLLM's default: a server the engine's start probe must refuse)."""
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name", served_name,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--enable-lora",
            "--max-lora-rank", str(max_lora_rank), "--max-loras", "2", "--max-model-len", str(max_model_len),
            "--max-logprobs", str(max_logprobs), *(["--logprobs-mode", logprobs_mode] if logprobs_mode else []),
            "--seed", "0", "--disable-uvicorn-access-log", *extra_args]


class VLLMServer:
    """One vLLM server process group; a context manager, or start()/stop() by hand (stop is idempotent)."""

    def __init__(self, model: str | Path, served_name: str = "smollm2-135m", max_lora_rank: int = 16,
                 max_model_len: int = 1024, max_logprobs: int = 20, kv_cache_gib: int = 1,
                 startup_timeout: float = 600.0, log_path: str | Path | None = None, dtype: str = "float32",
                 extra_args: tuple[str, ...] = (), logprobs_mode: str | None = "processed_logprobs"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.served_name = served_name
        self.command = server_command(str(model), self.port, served_name, max_lora_rank, max_model_len, max_logprobs,
                                      dtype=dtype, extra_args=tuple(extra_args), logprobs_mode=logprobs_mode)
        self.kv_cache_gib = kv_cache_gib
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
        self.process: subprocess.Popen | None = None

    def start(self) -> "VLLMServer":
        env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", HF_HUB_OFFLINE="1",
                   VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib)),
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"the vLLM server exited with code {self.process.returncode}:\n{tail}")
            if self.ready():
                return self
            time.sleep(1.0)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"the vLLM server did not answer within {self.startup_timeout:.0f} s:\n{tail}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/v1/models", timeout=5) as response:
                return bool(json.loads(response.read()).get("data"))
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            return False

    def models(self) -> list[dict]:
        """GET /v1/models: the base model and every LoRA adapter loaded now."""
        with urllib.request.urlopen(f"{self.url}/v1/models", timeout=30) as response:
            return json.loads(response.read())["data"]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the whole process group, SIGKILL to what is left after `grace` seconds (`stop_group`)."""
        if self.process is not None:
            stop_group(self.process, grace)

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_group(process: subprocess.Popen, grace: float = 30.0, settle: float = 10.0) -> None:
    """Stop the process group `process` leads: SIGTERM to all of it, SIGKILL to what is left once the leader has
    exited or `grace` seconds have passed, then wait up to `settle` seconds for the group to be gone. vLLM's server
    exits before the workers of its engine process do (they notice their parent's death a moment later), so the
    group can outlive its leader."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, settle)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + (1.0 if sig == signal.SIGTERM else settle)
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not group_alive(process.pid):
            return


def group_alive(pgid: int) -> bool:
    """Whether a process of process group `pgid` still runs. A zombie (dead, waiting for its new parent to reap it,
    which an init process may do late) does not count, where /proc shows the states."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # pid (comm) state ppid pgrp ...: the command name may hold spaces and parentheses
            state, _, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if int(group) == pgid and state != "Z":
            return True
    return False
