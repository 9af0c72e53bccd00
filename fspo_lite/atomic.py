"""Writes that cannot be torn: every rewrite of a result, record or checkpoint file goes through a temporary file
in the same folder, synced, then `os.replace`d over the old one, so a reader (or a crash at any instant) sees the
old file or the new one, never a mix. A failed write removes its temporary file and leaves the old file as it was.

A full disk is named as such: OSError ENOSPC, and the RuntimeError torch.save raises in its place ("[enforce fail at
inline_container.cc] . unexpected pos"), become `DiskFullError`, one line naming the file and its folder.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path
from typing import Any, Iterator

TORCH_DISK_FULL = ("unexpected pos", "file write failed", "No space left on device")
"""Pieces of the messages torch.save's zip writer raises (as RuntimeError) when the disk fills up under it."""


class DiskFullError(OSError):
    """No space left where a file was being written; the file was left as it was before."""

    def __str__(self) -> str:
        return str(self.strerror)


def is_disk_full(error: BaseException) -> bool:
    """An OSError with errno ENOSPC (or EDQUOT, a full quota), or torch.save's RuntimeError that hides one."""
    if isinstance(error, DiskFullError):
        return True
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
    return isinstance(error, RuntimeError) and any(piece in str(error) for piece in TORCH_DISK_FULL)


def disk_full(path: str | Path) -> DiskFullError:
    """The one-line error for a full disk while writing `path`."""
    path = Path(path)
    return DiskFullError(errno.ENOSPC, f"the disk is full: no space left to write {path.name} in {path.parent} "
                         "(the file there is unchanged); free space on that disk, or choose an output folder on "
                         "another one")


@contextlib.contextmanager
def disk_full_named(path: str | Path) -> Iterator[None]:
    """Re-raise a full-disk error inside the block as `disk_full(path)`; other errors pass unchanged."""
    try:
        yield
    except DiskFullError:
        raise
    except (OSError, RuntimeError) as error:
        if is_disk_full(error):
            raise disk_full(path) from error
        raise


def temporary_name(path: Path) -> Path:
    """`.NAME.tmp-PID` next to `path`: the same folder (so os.replace is a rename), hidden, and recognisably a
    temporary file of fspo-lite's."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def fsync_folder(folder: Path) -> None:
    """Sync a folder's entry list (a rename in it survives a power cut); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path` to write the new file to; on success it is synced and renamed over
    `path` (the old file is replaced only once the new one is complete); on any error it is removed, `path` is left
    as it was, and a full disk is raised as DiskFullError naming `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        with disk_full_named(path):
            yield tmp
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_folder(path.parent)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Replace the file at `path` by `text` atomically (`atomic_path`)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding=encoding) as handle:
            handle.write(text)
    return Path(path)


def atomic_write_json(path: str | Path, value: Any, **dumps: Any) -> Path:
    """Replace the file at `path` by `json.dumps(value, **dumps)` atomically."""
    return atomic_write_text(path, json.dumps(value, **dumps))


def atomic_write_jsonl(path: str | Path, rows: list, **dumps: Any) -> Path:
    """Replace the file at `path` by one `json.dumps(row, **dumps)` line per row, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, **dumps) + "\n")
    return Path(path)
