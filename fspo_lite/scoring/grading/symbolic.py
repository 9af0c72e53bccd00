"""Symbolic answer checks in a separate, resource-limited process with a hard timeout.

The main process only parses answers into plain syntax trees (`fspo_lite.scoring.grading.latex_math`); the
trees go as JSON to `symbolic_worker.py`, a standalone script that builds sympy objects and
compares them. Slow work is stopped inside the worker by an alarm after `timeout / 2` seconds
(the worker survives); a request still unanswered after `timeout` seconds (a computation stuck
in C code) gets its worker killed (SIGKILL). Both count as "not equal". A spare worker is kept
warm, so a kill costs the next request no start-up time, and workers are reused, so thousands
of checks pay the start-up (about a second, for importing sympy) once.
"""

from __future__ import annotations

import atexit
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("symbolic_worker.py")


def _decode(line: str) -> dict:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class _Worker:
    """One worker process; a reader thread moves its reply lines into a queue."""

    def __init__(self, soft_timeout: float, memory_mb: int):
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(WORKER_SCRIPT), str(soft_timeout), str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )
        self.replies: queue.Queue = queue.Queue()
        self.ready = False
        self.exited = False
        """True once the process closed its output (it ended, or is ending)."""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.replies.put(line)
        self.replies.put(None)  # the process ended

    def wait_ready(self, timeout: float) -> bool:
        if not self.ready:
            try:
                line = self.replies.get(timeout=timeout)
            except queue.Empty:
                return False
            self.exited = line is None
            self.ready = not self.exited and _decode(line).get("ready", False)
        return self.ready

    def request(self, payload: dict, timeout: float) -> dict | None:
        """The reply to one request, or None when the worker overran `timeout` or died."""
        try:
            self.process.stdin.write(json.dumps(payload) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return None
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.replies.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if line is None:
                return None
            reply = _decode(line)
            if reply.get("id") == payload["id"] and "equal" in reply:
                return reply

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class SymbolicChecker:
    """Compares syntax trees in worker processes; `equivalent` never waits much longer than `timeout`
    once a worker is up (`start_timeout` bounds the wait for the first one)."""

    def __init__(self, timeout: float = 1.5, start_timeout: float = 60.0, memory_mb: int = 1024,
                 cache_size: int = 100_000):
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.memory_mb = memory_mb
        self.cache_size = cache_size
        self.cache: dict[str, bool] = {}
        self.stats = {"requests": 0, "timeouts": 0, "errors": 0, "restarts": 0}
        self._lock = threading.Lock()
        self._active: _Worker | None = None
        self._spare: _Worker | None = None
        self._next_id = 0
        self.unavailable: str | None = None
        """Why no worker can run (set when one exits during start-up, e.g. sympy is missing)."""

    def _start(self) -> _Worker:
        return _Worker(soft_timeout=self.timeout / 2, memory_mb=self.memory_mb)

    def _worker(self) -> _Worker | None:
        if self._active is None:
            self._active = self._spare or self._start()
            self._spare = None
        if self._spare is None:
            self._spare = self._start()
        if self._active.wait_ready(self.start_timeout):
            return self._active
        if self._active.exited:
            try:
                code = self._active.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = "unknown"
            self.unavailable = (f"the symbolic worker exited during start-up (code {code}); "
                                "is sympy installed? Math answers are compared as strings and numbers only")
            print(f"[fspo_lite] {self.unavailable}", file=sys.stderr)
            self.close_workers()
        return None

    def _replace_active(self) -> None:
        self._active.kill()
        self._active = None
        self.stats["restarts"] += 1

    def equivalent(self, a: list, b: list) -> bool | None:
        """True/False when the worker decided, None when it timed out or could not build the trees."""
        return self._ask({"a": a, "b": b})

    def within(self, a: list, b: list, places: int) -> bool | None:
        """Whether constant trees a and b differ by at most 10^-places (a long decimal b written from a), in the worker."""
        return self._ask({"a": a, "b": b, "within": int(places)})

    def equivalent_texts(self, prediction: str, gold: str) -> bool | None:
        """Math-Verify's verdict on two LaTeX answers, in the worker (True/False), None when it timed out, could
        not parse them or Math-Verify is not installed."""
        return self._ask({"texts": [str(prediction), str(gold)]})

    def _ask(self, request: dict) -> bool | None:
        key = json.dumps(request, sort_keys=True)
        if key in self.cache:
            return self.cache[key]
        if self.unavailable:
            return None
        with self._lock:
            self.stats["requests"] += 1
            self._next_id += 1
            worker = self._worker()
            reply = worker.request({"id": self._next_id, **request}, self.timeout) if worker else None
            if reply is None:
                if worker is not None:
                    self.stats["timeouts"] += 1
                    self._replace_active()
                return None
            if reply.get("error") is not None:
                self.stats["timeouts" if reply["error"] == "timeout" else "errors"] += 1
                return None
        if len(self.cache) >= self.cache_size:
            self.cache.clear()
        self.cache[key] = reply["equal"]
        return reply["equal"]

    def close_workers(self) -> None:
        for worker in (self._active, self._spare):
            if worker is not None:
                worker.kill()
        self._active = self._spare = None

    def close(self) -> None:
        """Stop the worker processes (a later request starts new ones)."""
        with self._lock:
            self.close_workers()


_default: SymbolicChecker | None = None


def default_checker() -> SymbolicChecker:
    """The process-wide checker used by `math_answers_equal` (started on first use, closed at exit)."""
    global _default
    if _default is None:
        _default = SymbolicChecker()
        atexit.register(_default.close)
    return _default
