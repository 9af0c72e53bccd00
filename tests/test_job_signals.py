"""A signal ends the whole job (fspo_lite.drivers.job_control): SIGTERM or SIGINT to `lite` (and so the study) or
`train` ends every process it started, notebook kernels and their training workers included, before the run lock
is released; the command says so in one line, and a rerun finds its folders free and resumes.

The fast tests use the real `lite` command with its notebook runner replaced (tests/lock_driver.py `family`: a
kernel-like process in its own session with two workers of its own); the slow one runs the quick profile with two
training workers, stops it in notebook 03 and runs it again to the end.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fspo_lite.drivers.job_control import process_table
from fspo_lite.run_lock import HELD_ENV, LOCK_NAME

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "lock_driver.py"
pytestmark = pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="reads the process table in /proc")


def env() -> dict:
    variables = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    variables.pop(HELD_ENV, None)
    return variables


def sigint_as_at_a_terminal() -> None:
    """In the child before it starts: SIGINT's default action, so Python turns it into KeyboardInterrupt as for a
    command typed at a terminal. A shell starts a background job (`make test &`, nohup, CI runners) with SIGINT
    ignored, children inherit that, and Python then leaves SIGINT ignored: the job would never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive(pids: set[int]) -> set[int]:
    table = process_table()
    return {pid for pid in pids if pid in table and table[pid][2] != "Z"}


def watch_until_exit(job: subprocess.Popen, pids: set[int], lock: Path, timeout: float = 120) -> None:
    """Poll until `job` exits: its lock file must never be gone while one of `pids` still runs."""
    deadline = time.monotonic() + timeout
    while job.poll() is None:
        assert time.monotonic() < deadline, "the job did not end"
        if not lock.exists():
            assert not alive(pids), f"lock released while {alive(pids)} still run"
        time.sleep(0.02)
    assert not alive(pids), f"left running: {alive(pids)}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_lite_ends_its_kernel_and_workers_before_the_lock_goes(tmp_path, signum):
    job = subprocess.Popen([sys.executable, str(DRIVER), "family", "lite", "--profile", "quick", "--out",
                            str(tmp_path)], cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, preexec_fn=sigint_as_at_a_terminal)
    pids: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while not pids:
            line = job.stdout.readline()
            assert line or job.poll() is None, job.stderr.read()
            assert time.monotonic() < deadline
            if line.startswith("FAMILY"):
                pids = {int(p) for p in line.split()[1:]}
        assert len(pids) == 3 and alive(pids) == pids
        job.send_signal(signum)
        watch_until_exit(job, pids, tmp_path / "runs" / LOCK_NAME, timeout=300)  # a loaded CI machine
        err = job.stderr.read()
        assert job.returncode == (128 + signum if signum == signal.SIGTERM else 130), err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fspo_lite: "), err
        assert not (tmp_path / "runs" / LOCK_NAME).exists() and not (tmp_path / "results" / LOCK_NAME).exists()
    finally:
        job.kill()
        job.wait(timeout=60)
        for pid in alive(pids):
            os.kill(pid, signal.SIGKILL)
        job.stdout.close()
        job.stderr.close()


@pytest.mark.long
@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_to_lite_with_two_workers_ends_them_and_a_rerun_resumes(tmp_path):
    """The real quick profile with 03.workers=2: SIGTERM once both training workers run; none is left, the lock goes
    after them, and the same command then runs to the end."""
    command = [sys.executable, "-m", "fspo_lite", "lite", "--profile", "quick", "--out", str(tmp_path), "--quiet",
               "--set", "03.workers=2"]
    job = subprocess.Popen(command, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    family: set[int] = set()
    try:
        deadline = time.monotonic() + 900
        while len([p for p in family if "spawn" in cmdline(p)]) < 2:
            assert job.poll() is None, job.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the training workers did not start"
            family = descendants(job.pid)
            time.sleep(0.2)
        job.send_signal(signal.SIGTERM)
        watch_until_exit(job, family, tmp_path / "runs" / LOCK_NAME, timeout=180)
        assert job.returncode == 128 + signal.SIGTERM
        # the dying kernel may add its own last words (the pool's workers gone) on the shared stderr
        assert "fspo_lite: stopped by SIGTERM" in job.stderr.read().strip().splitlines()
    finally:
        job.kill()
        job.wait(timeout=60)
        job.stderr.close()
    rerun = subprocess.run(command, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=1800)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (tmp_path / "results" / "summary.json").exists()


def descendants(pid: int) -> set[int]:
    table = process_table()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (ppid, _, state) in table.items() if ppid in frontier and state != "Z"} - found
        found |= frontier
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
