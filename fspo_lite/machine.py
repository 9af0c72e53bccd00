"""This machine's CPU, read from /proc/cpuinfo (Linux): its fields, and a one-line description that benchmarks and run
records print, since timings and float sums differ between CPUs (docs/performance.md, "The CPUs")."""

from __future__ import annotations

import functools
import os
import platform

CPU_FLAGS_SHOWN = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The CPU flags that decide which matrix kernels run (docs/performance.md, "The CPUs")."""


def cpuinfo_fields(text: str) -> dict[str, str]:
    """The 'key : value' lines of a /proc/cpuinfo text as {key: value}, the first non-blank value of each key (the
    first processor's); lines without a colon are skipped."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and value.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


@functools.cache
def cpuinfo() -> dict[str, str]:
    """This machine's `cpuinfo_fields`; empty off Linux or when /proc/cpuinfo cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            return cpuinfo_fields(handle.read())
    except OSError:
        return {}


def cpu_description(fields: dict[str, str]) -> str:
    """'model name (family F, model M; flags)' from `cpuinfo_fields`, the flags limited to CPU_FLAGS_SHOWN; what it
    cannot find is left out ('' when nothing)."""
    flags = set(fields.get("flags", "").split())
    details = [f"{name} {fields[key]}" for name, key in (("family", "cpu family"), ("model", "model")) if key in fields]
    shown = [flag for flag in CPU_FLAGS_SHOWN if flag in flags]
    inside = ", ".join(details) + ("; " if details and shown else "") + ", ".join(shown)
    name = fields.get("model name", "")
    return f"{name} ({inside})" if name and inside else name or inside


def machine_description() -> str:
    """CPU model, family, model number and matrix flags, and the core count (and the GPU when torch sees one), for
    a benchmark's header and a run's record."""
    import torch

    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return f"{cpu_description(cpuinfo()) or platform.processor() or platform.machine()}, {os.cpu_count()} cores{gpu}"
