"""A command's whole job ends with it: `whole_job()` around the work of `train` and `lite` (so the study).

SIGTERM and SIGHUP become `Terminated` (a KeyboardInterrupt, as SIGINT is) in the main thread, so the command's
`with` blocks unwind (the trainer closes its engines) instead of the process vanishing with its children left
running. When the work ends by an interruption, every process it started goes too, before the command's run lock
is released (`whole_job` sits inside the lock): the process groups registered with `register_group` (a notebook
kernel runs in its own session, and the training workers it spawns share its group, so one `killpg` reaches the
workers even after the kernel is gone) and the children this process started inside the block. Each gets SIGTERM,
then SIGKILL after `grace` seconds; the block returns only once none of them runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterator

GROUPS: set[int] = set()
"""Process groups started for the current job (notebook kernels), ended with it when it is interrupted."""


class Terminated(KeyboardInterrupt):
    """The command received SIGTERM or SIGHUP."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def register_group(pgid: int | None) -> None:
    """A process group (a kernel's session) that belongs to the current job."""
    if pgid and pgid > 1 and pgid != os.getpgrp():
        GROUPS.add(pgid)


def process_table() -> dict[int, tuple[int, int, str]] | None:
    """{pid: (ppid, pgid, state)} of every process (Linux /proc), None where there is no /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                text = handle.read().decode("utf-8", "replace")
        except OSError:  # the process ended meanwhile
            continue
        fields = text[text.rfind(")") + 2:].split()
        table[int(name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def children(pid: int | None = None) -> set[int]:
    """The live (not zombie) child processes of `pid` (this process by default); empty where that cannot be told."""
    pid = os.getpid() if pid is None else pid
    table = process_table() or {}
    return {p for p, (ppid, _, state) in table.items() if ppid == pid and state != "Z"}


def running(pids: set[int], groups: set[int]) -> set[int]:
    """Those of `pids`, and the members of `groups`, that still run (zombies do not count)."""
    table = process_table()
    if table is None:  # no /proc: ask the kernel (a zombie counts as running until reaped)
        alive = set()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 0)
                alive.add(pid)
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, 0)
                alive.add(group)
        return alive
    return {p for p, (_, pgid, state) in table.items() if state != "Z" and (p in pids or pgid in groups)}


def _reap() -> None:
    """Collect the exit status of this process's ended children (so they are gone, not zombies)."""
    for pid in children() | GROUPS:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def end_processes(pids: set[int], groups: set[int], grace: float = 10.0) -> set[int]:
    """SIGTERM to `pids` and `groups`, SIGKILL to what still runs after `grace` seconds; returns what still runs
    after 10 s more (empty unless a process cannot be killed)."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap()
            if not running(pids, groups):
                return set()
            time.sleep(0.05)
    return running(pids, groups)


def _raise_terminated(signum, frame):
    raise Terminated(signum)


@contextlib.contextmanager
def whole_job(grace: float = 10.0) -> Iterator[None]:
    """Run the block as one job: SIGTERM/SIGHUP raise `Terminated`; on any interruption (those, SIGINT, an error)
    the processes it started (`register_group`, and this process's children that were not there before) get
    SIGTERM, then SIGKILL, and the block ends only when they are gone. On a normal end nothing is killed."""
    main = threading.current_thread() is threading.main_thread() and os.name == "posix"
    before_children = children()
    before_groups = set(GROUPS)
    previous = {}
    if main:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, _raise_terminated)
    try:
        yield
    except BaseException:
        if os.name == "posix":
            with _ignored_while_ending():
                end_processes(children() - before_children, GROUPS - before_groups, grace)
        raise
    finally:
        GROUPS.intersection_update(before_groups)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _ignored_while_ending() -> Iterator[None]:
    """A second SIGTERM or Ctrl-C while the job's processes are being ended does not cut that short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
