"""Freed memory kept for the next step (speed.keep_freed_memory): glibc's malloc told not to hand large blocks back to
the OS, and long-lived buffers made outside that kept memory.

A training step on a CPU allocates and frees the same large tensors again and again (activations, their gradients,
logits over the whole vocabulary). glibc serves blocks above its mmap threshold with fresh pages from the OS and
returns them when freed, and trims the top of its heap past a threshold, so the next step's tensors fault their
pages in again, one page at a time, each zeroed by the kernel. `keep_freed_memory` sets malloc's options (mallopt)
so that large blocks come from the heap and the heap is never trimmed: after the first step the page faults stop.
The price: the process keeps its high-water mark of memory until it exits. docs/performance.md has the
measurements.

It changes no number: only where memory comes from. It does nothing (returns False) off Linux, without glibc, or
when mallopt refuses a value.

`blocks_from_the_os` and `made_apart` are for buffers made once and kept (the decoding loop's packed weights,
`fspo_lite.speed.llama_step.WeightPacks`). MKL asks for several times a packed weight's size and writes only the
weight's size. In the kept heap such a buffer takes resident memory that the training step would reuse, all of it:
the step then grows the heap by as much again. Inside `blocks_from_the_os`, while `keep_freed_memory` is in force,
large blocks get their own mapping when the heap has to grow, handed back to the OS when freed. But malloc serves a
block from the heap's free space first, whatever its mmap threshold, so `made_apart` also runs the making in a
short-lived thread of its own: glibc gives a new thread another malloc arena than the main thread's, so the buffer
lands on fresh pages, of which only those written become resident (docs/performance.md, "What each lever does").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import platform
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
"""glibc's mallopt parameter numbers (malloc.h)."""

SETTINGS = {M_MMAP_THRESHOLD: 1 << 30, M_TRIM_THRESHOLD: 2**31 - 1, M_TOP_PAD: 64 << 20}
"""Blocks below 1 GiB from the heap; the heap never trimmed (the largest int); 64 MiB more asked of the OS at a time."""


_KEPT = [False]
"""Whether `keep_freed_memory` is in force in this process."""


def _mallopt():
    """glibc's mallopt, or None off Linux/glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def keep_freed_memory() -> bool:
    """Apply SETTINGS to this process's malloc; True when glibc took all of them."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    _KEPT[0] = all(mallopt(parameter, value) == 1 for parameter, value in SETTINGS.items())
    return _KEPT[0]


@contextlib.contextmanager
def blocks_from_the_os(threshold: int = 1 << 20):
    """Inside: blocks of `threshold` bytes or more are mapped from the OS on their own, and given back when freed,
    instead of coming from the heap that `keep_freed_memory` keeps (see the module docstring). Does nothing when
    `keep_freed_memory` is not in force: glibc's own threshold then maps such large blocks anyway."""
    mallopt = _mallopt() if _KEPT[0] else None
    if mallopt is None or mallopt(M_MMAP_THRESHOLD, threshold) != 1:
        yield
        return
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, SETTINGS[M_MMAP_THRESHOLD])


def made_apart(make: Callable[[], T]) -> T:
    """`make()`, called in a thread of its own while `keep_freed_memory` is in force (else here), inside
    `blocks_from_the_os`: what it allocates comes from another malloc arena than the main thread's kept heap, on fresh
    pages. Its exception, if any, is raised here. Torch's grad mode is per thread: the new thread computes with
    autograd off, as the packing does."""
    if not _KEPT[0]:
        return make()
    outcome: dict[str, object] = {}

    def run() -> None:
        import torch  # this module itself needs no torch

        try:
            with blocks_from_the_os(), torch.no_grad():
                outcome["value"] = make()
        except BaseException as error:  # raised again in the calling thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="fspo-lite-kept-buffers")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
