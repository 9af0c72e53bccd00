"""Which model an adapter was trained on, read from the files saved with it: a training checkpoint's config.yaml
(model.name), else a PEFT folder's adapter_config.json (base_model_name_or_path). `fspo-lite eval --adapter`
evaluates on that model, and an adapter loaded onto another one is refused in one line that names it."""

from __future__ import annotations

import json
from pathlib import Path


def named(value) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def trained_model_name(adapter_path: str | Path) -> str | None:
    """The model an adapter was trained on: model.name of a training checkpoint's config.yaml (given the checkpoint
    or its model/ folder), else base_model_name_or_path of a PEFT folder's adapter_config.json; None when neither
    names one (a hub id, an unreadable or hostile file: the load reports those)."""
    from fspo_lite.config_checks import ConfigError
    from fspo_lite.config_load import read_config_mapping

    folder = Path(adapter_path).expanduser()
    for checkpoint in (folder, folder.parent):
        file = checkpoint / "config.yaml"
        if file.is_file() and (checkpoint / "model").is_dir():
            try:
                values = read_config_mapping(file)
            except (ConfigError, OSError):
                return None
            model = values.get("model")
            return named(model.get("name")) if isinstance(model, dict) else None
    for candidate in (folder, folder / "model"):
        file = candidate / "adapter_config.json"
        if file.is_file():
            try:
                values = json.loads(file.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError, OSError):
                return None
            return named(values.get("base_model_name_or_path")) if isinstance(values, dict) else None
    return None
