"""Hugging Face hub look-ups that cannot hang: a model that is not a local folder is downloaded only once the hub has
answered within seconds, and never when the environment says offline.

`hub_options(source)` is called before every `from_pretrained` of a name that is not a local folder:
- a local folder or file: loaded as it is;
- offline (`HF_HUB_OFFLINE=1`, as every `make` target sets it): a model in the hub cache is loaded without asking the
  hub (`local_files_only=True`); one that is not cached is one error saying how to allow the download;
- otherwise (unset, or 0) the hub's host must resolve and accept a connection within `PROBE_SECONDS`: then
  `from_pretrained` may download (a Colab or GPU user naming a hub model gets it, as with transformers); if it does
  not answer, a cached model is loaded without it and an uncached one is one error. With no DNS answer a hub look-up
  used to take minutes (huggingface_hub's retries) to say what this says in seconds.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

PROBE_SECONDS = 5.0
"""How long the hub's host may take to resolve and accept a connection before a download is given up."""

ALLOW_DOWNLOADS = "HF_HUB_OFFLINE=0 (or unset)"


class HubUnavailable(RuntimeError):
    """A hub model is not cached and cannot (or may not) be downloaded; the caller words it as its own error."""


def offline() -> bool:
    """True when the environment forbids downloads: HF_HUB_OFFLINE set to 1, true, yes or on."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def cached(repo_id: str) -> bool:
    """Whether the hub cache holds a snapshot of `repo_id` (a model downloaded before)."""
    from huggingface_hub import constants

    snapshots = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def hub_reachable(seconds: float | None = None) -> str | None:
    """None when the hub's host resolves and accepts a TCP connection within `seconds`, else why not. Name
    resolution runs in a thread, since getaddrinfo itself has no timeout."""
    from huggingface_hub import constants

    seconds = PROBE_SECONDS if seconds is None else seconds
    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=seconds).close()
            outcome.append(None)
        except OSError as error:
            outcome.append(f"{host}:{port}: {type(error).__name__}: {error}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(seconds)
    return outcome[0] if outcome else f"{host}:{port} did not answer within {seconds:g} s"


def hub_options(source: str | Path) -> dict:
    """Keyword arguments for `from_pretrained(source, ...)` (the module's docstring): {} or
    {"local_files_only": True}; HubUnavailable (one line) when the model cannot be had, before anything waits."""
    name = str(source)
    if Path(name).expanduser().exists():
        return {}
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a folder that is missing, not a hub id
        return {"local_files_only": True}
    if offline():
        if cached(name):
            return {"local_files_only": True}
        raise HubUnavailable(f"'{name}' is not in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloads; allow "
                             f"them with {ALLOW_DOWNLOADS} in the environment, or give a local folder")
    problem = hub_reachable()
    if problem is None:
        return {}
    if cached(name):  # the cached copy, without the update check that would wait on the network
        return {"local_files_only": True}
    raise HubUnavailable(f"'{name}' is not in the Hugging Face cache and the hub cannot be reached ({problem}); "
                         "connect to the network, or give a local folder")
