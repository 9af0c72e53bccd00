"""A run folder belongs to one process (fspo_lite.run_lock).

The process tests use real `fspo_lite` commands (tests/lock_driver.py replaces only the model loader, the notebook
runner and the judge): one holds its folder, a second into the same folder is refused in one line naming the folder
and the holder before any model loads, and after the holder is killed with SIGKILL a new one takes the folder over.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fspo_lite.run_lock import HELD_ENV, LOCK_NAME, RunLockError, busy_message, read_record, run_lock, run_locks

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "lock_driver.py"
posix_only = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and fcntl")


def command_args(command: str, folder: Path) -> list[str]:
    """Arguments that make `command` write into `folder`."""
    if command == "train":
        return ["--config", str(ROOT / "configs" / "tiny.yaml"), "--set", f"train.output_dir={folder}"]
    if command == "eval":
        return ["--config", str(ROOT / "configs" / "tiny.yaml"), "--limit", "1", "--output", str(folder)]
    if command == "lite":
        return ["--profile", "quick", "--out", str(folder)]
    return ["--runs", str(folder)]  # rejudge


def locked_folder(command: str, folder: Path) -> Path:
    return folder / "results" if command == "lite" else folder


def driver(mode: str, command: str, folder: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop(HELD_ENV, None)
    return subprocess.Popen([sys.executable, str(DRIVER), mode, command, *command_args(command, folder)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def wait_for_line(process: subprocess.Popen, expected: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if expected in line:
            return
        if not line and process.poll() is not None:
            raise AssertionError(f"exited {process.returncode}: {process.stderr.read()[-2000:]}")
    raise AssertionError(f"no {expected!r} within {timeout} s")


@posix_only
@pytest.mark.parametrize("command", ["train", "eval", "lite", "rejudge"])
def test_second_process_is_refused_in_one_line_and_a_killed_holder_is_taken_over(tmp_path, command):
    folder = tmp_path / "out"
    if command == "rejudge":
        folder.mkdir()
    holder = driver("hold", command, folder)
    try:
        wait_for_line(holder, "HOLDING")
        second = driver("trip", command, folder)
        out, err = second.communicate(timeout=180)
        assert second.returncode == 1, (out, err)
        assert "PAST THE LOCK" not in out  # refused before any model (or notebook, or judge) was loaded
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert str(locked_folder(command, folder)) in lines[0] and f"pid {holder.pid}" in lines[0], lines[0]
        assert command in lines[0] and "started" in lines[0]  # the holder's command and start time
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        third = driver("trip", command, folder)
        out, err = third.communicate(timeout=180)
        assert "PAST THE LOCK" in out, (out, err)  # the folder was taken over
        assert f"taking over the lock left by pid {holder.pid}" in err and "no longer running" in err, err
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()
        holder.stderr.close()


HOLD_IN_CHILD = """
import sys, time
from fspo_lite.run_lock import run_lock
with run_lock(sys.argv[1]):
    print("HOLDING", flush=True)
    time.sleep(300)
"""


@posix_only
def test_lock_in_another_process_is_refused_and_children_of_the_holder_pass(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(HELD_ENV, None)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_IN_CHILD, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "HOLDING"
        with pytest.raises(RunLockError, match=f"in use by another fspo-lite process: pid {holder.pid} on"):
            with run_lock(tmp_path):
                pass
        # a child of the holder (a notebook kernel, a worker) inherits its list of held folders and passes
        child_env = {**env, HELD_ENV: str(tmp_path.resolve())}
        code = subprocess.run([sys.executable, "-c", "import sys\nfrom fspo_lite.run_lock import run_lock\n"
                               "with run_lock(sys.argv[1]): print('inside')", str(tmp_path)], env=child_env,
                              capture_output=True, text=True, timeout=60)
        assert code.returncode == 0 and code.stdout.strip() == "inside", code.stderr
    finally:
        holder.kill()
        holder.wait(timeout=30)
        holder.stdout.close()


def test_lock_is_reentrant_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.delenv(HELD_ENV, raising=False)
    folder = tmp_path / "a" / "b"
    with run_lock(folder) as held:
        assert (held / LOCK_NAME).exists()
        record = read_record((held / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid() and record["command"]
        with run_lock(folder):  # the same process: passes
            pass
        assert (held / LOCK_NAME).exists()
    assert not (tmp_path / "a").exists()  # created by the lock, nothing written: removed again
    (tmp_path / "kept").mkdir()
    with run_lock(tmp_path / "kept") as held:
        (held / "result.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["result.json"]
    assert os.environ.get(HELD_ENV) is None


def test_several_folders_and_a_leftover_record(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(HELD_ENV, raising=False)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / LOCK_NAME).write_text('{"pid": 999999, "host": "h", "command": "old", "started": "t"}')
    with run_locks([tmp_path / "x", tmp_path / "y", tmp_path / "x"]) as held:
        assert held == [tmp_path.resolve() / "x", tmp_path.resolve() / "y"]
    assert "taking over the lock left by pid 999999 on h (`old`" in capsys.readouterr().err
    assert not (tmp_path / "x" / LOCK_NAME).exists()


def test_busy_message_is_one_line():
    message = busy_message(Path("/r/x"), {"pid": 7, "host": "h", "command": "python -m fspo_lite train",
                                          "started": "2000-01-01 00:00:00 UTC"}, "choose another train.output_dir")
    assert "\n" not in message
    assert message == ("/r/x is in use by another fspo-lite process: pid 7 on h (`python -m fspo_lite train`, "
                       "started 2000-01-01 00:00:00 UTC); wait for it to end, or choose another train.output_dir")
    assert "has not written its record" in busy_message(Path("/r/x"), None, "c")


def start(mode: str, command: str, args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop(HELD_ENV, None)
    return subprocess.Popen([sys.executable, str(DRIVER), mode, command, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(timeout=60)
    process.stdout.close()
    process.stderr.close()


@posix_only
@pytest.mark.parametrize("order", ["train inside, then lite", "lite around, then train"])
def test_a_lock_covers_the_folders_inside_it(tmp_path, order):
    """A train into X/runs/grpo_s0 and a `lite --out X` (which owns X/runs) refuse each other, whichever came first,
    in one line naming the holder, before any model or notebook starts."""
    out = tmp_path / "X"
    train = ["--config", str(ROOT / "configs" / "tiny.yaml"), "--set", f"train.output_dir={out / 'runs' / 'grpo_s0'}"]
    lite = ["--profile", "quick", "--out", str(out)]
    first, second = (("train", train), ("lite", lite)) if order.startswith("train") else (("lite", lite), ("train", train))
    holder = start("hold", *first)
    try:
        wait_for_line(holder, "HOLDING")
        refused = start("trip", *second)
        stdout, err = refused.communicate(timeout=300)
        assert refused.returncode == 1, (stdout, err)
        assert "PAST THE LOCK" not in stdout
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        relation = "holds" if second[0] == "lite" else "lies inside"
        assert relation in lines[0] and f"pid {holder.pid}" in lines[0] and first[0] in lines[0], lines[0]
    finally:
        stop(holder)


@posix_only
def test_a_shallow_lock_lets_another_job_use_a_folder_inside_it(tmp_path, monkeypatch):
    """lite's results folder (results/) and the study's (results/study) run side by side: the results folder's lock
    is shallow; a tree lock on the same folder refuses the inner one."""
    monkeypatch.delenv(HELD_ENV, raising=False)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(HELD_ENV, None)
    for tree, passes in ((False, True), (True, False)):
        code = ("import sys, time\nfrom fspo_lite.run_lock import run_lock\n"
                f"with run_lock(sys.argv[1], tree={tree}):\n    print('HOLDING', flush=True)\n    time.sleep(300)\n")
        holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "results")], env=env,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "HOLDING"
            if passes:
                with run_lock(tmp_path / "results" / "study"):
                    pass
            else:
                with pytest.raises(RunLockError, match=f"lies inside .*results, which is in use .*pid {holder.pid}"):
                    with run_lock(tmp_path / "results" / "study"):
                        pass
                assert not (tmp_path / "results" / "study").exists()  # the refused lock left nothing behind
        finally:
            holder.kill()
            holder.wait(timeout=60)
            holder.stdout.close()
