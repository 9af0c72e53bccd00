"""One process per output folder: `run_lock(folder)` is held by `train`, `eval`, `lite` (and so the study) and
`rejudge` for as long as they write there.

The lock is an OS advisory lock (`fcntl.flock`) on `<folder>/.fspo-lite.lock`, which the kernel releases when its
process ends however it ends (SIGKILL included), so a lock can never outlive its holder. The same file holds a small
JSON record of the holder (pid, host, command, start time) for the one-line refusal a second process gets. A record
found in a file whose lock is free was left by a holder that died; the new process says so in one line and takes
over. The file is removed (under the lock) when the holder finishes, and a folder the lock itself had to create is
removed again if nothing was written into it.

A lock covers the folder's tree: a folder inside a locked one, or one that holds a locked one, is refused in one line
naming the holder (`nested_holder`), checked after this process's own lock is taken so that of two processes
racing for nested folders at least one sees the other. A lock taken with tree=False (a results folder written file
by file and never cleared, which other jobs' results folders may lie inside) covers only the folder itself.

Nested calls in the same process tree pass: the folders a process holds are listed in $FSPO_LITE_RUN_LOCKS, which
children (notebook kernels, worker processes) inherit, so a notebook of `lite` that calls an entry point for a
folder its parent holds does not wait on it. On platforms without `fcntl` the lock file is created exclusively
instead; a leftover one is taken over only when its holder's pid is known dead on this host (POSIX), else the
refusal names the file to remove.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_NAME = ".fspo-lite.lock"
"""The lock file inside a locked folder."""
HELD_ENV = "FSPO_LITE_RUN_LOCKS"
"""Folders held by this process or an ancestor, os.pathsep-separated: a nested lock on one of them passes."""


class RunLockError(RuntimeError):
    """The folder belongs to another running process."""


class OutputFolderError(RuntimeError):
    """The output folder cannot be written: a file in its place, no permission, or a name or path too long."""


FILE_ROOM = 128
"""Bytes of path kept for what a command writes inside its output folder (checkpoints/step-000050/model/
adapter_model.safetensors and the like), so a folder that only just fits does not fail at its first checkpoint."""
NAME_MAX, PATH_MAX = 255, 4096
"""The limits assumed where the file system does not say (os.pathconf): 255 bytes per name, 4096 per path."""


def _limit(folder: Path, name: str, fallback: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError, AttributeError):  # not POSIX, or the file system does not say
        return fallback


def _existing_ancestor(folder: Path) -> Path:
    """The longest leading part of `folder` (absolute) that is an existing folder, found from the root down, so an
    over-long name further on is never handed to the OS."""
    found = Path(folder.anchor)
    for path in reversed((folder, *folder.parents)):
        try:
            if not path.is_dir():
                break
        except OSError:  # a name too long for the file system, and the like
            break
        found = path
    return found


def _shown(folder: Path, limit: int = 80) -> str:
    text = str(folder)
    return text if len(text) <= limit else f"{text[:limit // 2]}...{text[-limit // 2:]} ({len(text)} characters)"


def output_folder_problem(folder: Path) -> str | None:
    """Why a command could not write into the absolute `folder`, or None: a name longer than the file system's
    limit (PC_NAME_MAX), a path that with FILE_ROOM bytes more passes PC_PATH_MAX, a file where a folder belongs, or
    the nearest existing folder refusing a test file (no permission, a read-only file system)."""
    if folder == Path(folder.anchor) or folder == Path.home().resolve():
        return "it is the file system's root or the home folder itself, which hold others' files; name a folder of its own"
    existing = _existing_ancestor(folder)
    name_max, path_max = _limit(existing, "PC_NAME_MAX", NAME_MAX), _limit(existing, "PC_PATH_MAX", PATH_MAX)
    long = [part for part in folder.parts if len(os.fsencode(part)) > name_max]
    if long:
        return f"a folder name of {len(os.fsencode(long[0]))} bytes; the file system allows {name_max}"
    size = len(os.fsencode(str(folder)))
    if size + FILE_ROOM > path_max:
        return (f"a path of {size} bytes; with the files written inside it (up to {FILE_ROOM} bytes more) it passes "
                f"the file system's limit of {path_max}")
    if existing != folder:
        blocker = existing / folder.parts[len(existing.parts)]
        if blocker.exists():
            return f"{_shown(blocker)} is a file, not a folder"
    try:
        fd, name = tempfile.mkstemp(dir=existing, prefix=".fspo-lite-write-test-")
        os.close(fd)
        os.unlink(name)
    except OSError as error:
        return f"{_shown(existing)} is not writable ({error.strerror or error})"
    return None


def check_output_folder(folder: Path, change: str = "choose another output folder") -> None:
    """OutputFolderError, one line naming the folder, what is wrong and `change`, when `output_folder_problem`
    finds one: before a command starts its work, not at its first write."""
    problem = output_folder_problem(folder)
    if problem:
        raise OutputFolderError(f"output folder {_shown(folder)} cannot be written: {problem}; {change}")


def holder_record(command: str | None = None, tree: bool = True) -> dict:
    """Who holds a lock: pid, host, command line (cut to 300 characters), start time and whether the lock covers
    the folder's tree."""
    from fspo_lite.config_load import redacted

    if command is None:
        command = shlex.join(sys.argv) if sys.argv else "python"
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": redacted(command)[:300],
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "tree": tree}


def describe_holder(record: dict | None) -> str:
    """'pid 123 on host h (`python -m fspo_lite train ...`, started YYYY-MM-DD HH:MM:SS UTC)' or a placeholder."""
    if not record:
        return "a process that has not written its record yet"
    return (f"pid {record.get('pid')} on {record.get('host')} (`{record.get('command')}`, started "
            f"{record.get('started')})")


def read_record(text: str) -> dict | None:
    """The holder record in a lock file's text; None when empty or not a record."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def pid_alive(pid: object) -> bool:
    """Whether a process with this pid runs on this host; True where that cannot be told (non-POSIX)."""
    if os.name != "posix" or not isinstance(pid, int) or pid <= 0:
        return os.name != "posix"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def held_folders() -> list[str]:
    return [f for f in os.environ.get(HELD_ENV, "").split(os.pathsep) if f]


def busy_message(folder: Path, record: dict | None, change: str = "") -> str:
    """The refusal: the folder, its holder and what to do (wait, or `change`)."""
    return (f"{folder} is in use by another fspo-lite process: {describe_holder(record)}; wait for it to end"
            + (f", or {change}" if change else ""))


def takeover_message(folder: Path, record: dict) -> str:
    return f"[fspo_lite] {folder}: taking over the lock left by {describe_holder(record)}, which is no longer running"


def lock_holder(path: Path) -> dict | None:
    """The record of the live process holding the lock file `path` ({} when it holds it without a readable record),
    or None when the file is missing or its lock free (a record left by a dead holder)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        text = os.read(fd, 1 << 16).decode("utf-8", "replace")
        if fcntl is None:
            record = read_record(text)
            held = bool(record) and (record.get("host") != socket.gethostname() or pid_alive(record.get("pid")))
            return record if held else None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_record(text) or {}
        except OSError:
            return None
        return None
    finally:
        os.close(fd)


NESTED_SCAN_LIMIT = 100_000
"""Entries looked at below a folder for locks inside it; a larger tree is not scanned further (docs/reliability.md,
"Known limits")."""


def nested_holder(folder: Path, tree: bool = True) -> tuple[Path, str, dict] | None:
    """(locked folder, 'inside' or 'holding', its holder's record) for a lock held by another process on a folder
    that holds `folder` (a lock with tree=False covers only its own folder) or, when this lock covers its tree
    (`tree`), on a folder inside `folder`; None when there is none. Folders this process tree holds
    ($FSPO_LITE_RUN_LOCKS) are passed over."""
    held = set(held_folders())
    for parent in folder.parents:
        if str(parent) in held:
            continue
        record = lock_holder(parent / LOCK_NAME)
        if record is not None and record.get("tree", True) is not False:
            return parent, "inside", record
    if not tree:
        return None
    seen = 0
    for top, folders, files in os.walk(folder):  # links are not followed
        seen += len(folders) + len(files)
        if top != str(folder) and LOCK_NAME in files and top not in held:
            record = lock_holder(Path(top) / LOCK_NAME)
            if record is not None:
                return Path(top), "holding", record
        if seen > NESTED_SCAN_LIMIT:
            break
    return None


def nested_message(folder: Path, found: tuple[Path, str, dict], change: str = "") -> str:
    """The refusal for a folder inside, or holding, a folder another process holds: one line naming both and the
    holder."""
    other, relation, record = found
    where = (f"{folder} lies inside {other}" if relation == "inside" else f"{folder} holds {other}")
    return (f"{where}, which is in use by another fspo-lite process: {describe_holder(record)}; wait for it to end"
            + (f", or {change}" if change else ""))


def _first_missing(folder: Path) -> Path | None:
    """The outermost of `folder` and its parents that does not exist yet (None if `folder` exists)."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing = path
    return missing


def _remove_if_empty(folder: Path, top: Path | None) -> None:
    """rmdir `folder` and its parents up to `top` (the folders the lock created) while they are empty."""
    if top is None:
        return
    for path in (folder, *folder.parents):
        try:
            path.rmdir()
        except OSError:
            return
        if path == top:
            return


def _acquire_flock(path: Path, record: dict, folder: Path, change: str) -> int:
    """An open descriptor of `path` holding its flock, with `record` written in; RunLockError if it is held."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 1 << 16).decode("utf-8", "replace")
            os.close(fd)
            raise RunLockError(busy_message(folder, read_record(text), change)) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:  # else the holder removed the file between our open and flock: try the new one
            break
        os.close(fd)
    previous = read_record(os.read(fd, 1 << 16).decode("utf-8", "replace"))
    if previous:
        print(takeover_message(folder, previous), file=sys.stderr)
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(record).encode())
    os.fsync(fd)
    return fd


def _acquire_exclusive(path: Path, record: dict, folder: Path, change: str) -> int:
    """Without fcntl: create the lock file exclusively; a leftover of a dead holder on this host is replaced."""
    for _ in range(2):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            previous = read_record(path.read_text(encoding="utf-8", errors="replace"))
            if (previous and previous.get("host") == socket.gethostname() and not pid_alive(previous.get("pid"))):
                print(takeover_message(folder, previous), file=sys.stderr)
                path.unlink(missing_ok=True)
                continue
            raise RunLockError(busy_message(folder, previous, change) + f" (if no such process runs, remove {path})")
        os.write(fd, json.dumps(record).encode())
        return fd
    raise RunLockError(busy_message(folder, None, change))


@contextlib.contextmanager
def run_lock(folder: str | Path, change: str = "choose another output folder",
             command: str | None = None, tree: bool = True) -> Iterator[Path]:
    """Hold `folder` for this process (created if missing); yields the resolved folder. RunLockError, one line
    naming the folder and the holder, when another live process holds it; `change` completes that line with what to
    change (e.g. "choose another train.output_dir"). OutputFolderError, one line, for a folder that cannot be written
    (`check_output_folder`). The lock covers the folder's tree unless tree=False (`nested_holder`). Re-entrant for
    this process and its children."""
    if not str(folder).strip():
        raise OutputFolderError(f"the output folder is empty (an unset variable?); {change}")
    folder = Path(folder).expanduser().resolve()
    if str(folder) in held_folders():
        yield folder
        return
    check_output_folder(folder, change)  # writable, names and path short enough: before any work starts
    created = _first_missing(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    acquire = _acquire_flock if fcntl is not None else _acquire_exclusive
    try:
        fd = acquire(path, holder_record(command, tree), folder, change)
    except BaseException:
        _remove_if_empty(folder, created)
        raise
    try:  # after our own lock is taken: of two processes racing for nested folders, the later check sees the other
        found = nested_holder(folder, tree)
    except BaseException:
        found = None
        _release(path, fd, folder, created)
        raise
    if found is not None:
        _release(path, fd, folder, created)
        raise RunLockError(nested_message(folder, found, change))
    before = os.environ.get(HELD_ENV)
    os.environ[HELD_ENV] = os.pathsep.join([*held_folders(), str(folder)])
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = before
        _release(path, fd, folder, created)


def _release(path: Path, fd: int, folder: Path, created: Path | None) -> None:
    with contextlib.suppress(OSError):
        path.unlink()  # still under the lock: a waiting opener sees the file change and opens the new one
    os.close(fd)
    _remove_if_empty(folder, created)


@contextlib.contextmanager
def run_locks(folders: list[str | Path], change: str = "choose another output folder",
              command: str | None = None, shallow: list[str | Path] = ()) -> Iterator[list[Path]]:
    """`run_lock` on several folders (each once, in a fixed order, so two jobs cannot each hold one and wait); those
    in `shallow` with tree=False."""
    unique = sorted({Path(f).expanduser().resolve() for f in folders})
    flat = {Path(f).expanduser().resolve() for f in shallow}
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(run_lock(f, change, command, tree=f not in flat)) for f in unique]


def command_lock(folders: list[str | Path], change: str, command: str, every_rank: bool = True,
                 shallow: list[str | Path] = ()):
    """The lock a command takes on the folders it writes, before any model loads. every_rank=False: under a
    multi-process launch (torchrun / accelerate set $RANK) only rank 0 takes it, for all the ranks of one run.
    `shallow`: folders whose lock covers only themselves (`run_lock`'s tree=False)."""
    if not every_rank and os.environ.get("RANK", "0") != "0":
        return contextlib.nullcontext([])
    return run_locks(folders, change, command, shallow)
