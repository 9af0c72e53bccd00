"""bench/vllm_server.py's process-group stop, on plain Python processes (no vLLM needed): a group whose leader exits
at SIGTERM while a child ignores it is SIGKILLed and gone when stop_group returns; zombies do not count as alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from vllm_server import group_alive, stop_group  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc")

LEADER = textwrap.dedent("""
    import signal, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    child.stdout.readline()  # the child ignores SIGTERM from here on
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the leader leaves at once, its child stays
    print("ready", flush=True)  # only once the handler is in place: a SIGTERM right after "ready" exits with 0
    time.sleep(600)
""")


def test_stop_group_kills_a_child_that_outlives_its_leader():
    leader = subprocess.Popen([sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert leader.stdout.readline().strip() == "ready"
        assert group_alive(leader.pid)
        started = time.monotonic()
        stop_group(leader, grace=20.0, settle=10.0)
        assert leader.returncode == 0  # the leader left at SIGTERM
        assert not group_alive(leader.pid)  # and its SIGTERM-proof child was killed, not left behind
        assert time.monotonic() - started < 15.0
    finally:
        stop_group(leader, grace=1.0, settle=5.0)


def test_a_zombie_is_not_alive():
    process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    stat = Path(f"/proc/{process.pid}/stat")
    deadline = time.monotonic() + 30
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)  # exited but not reaped: still found by kill(0), but dead
    assert stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    assert not group_alive(process.pid)
    process.wait()
    assert not group_alive(process.pid)


def test_a_running_group_is_alive_and_a_missing_one_is_not():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        assert group_alive(process.pid)
    finally:
        stop_group(process, grace=5.0)
    assert not group_alive(process.pid)
