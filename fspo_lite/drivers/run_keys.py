"""The baseline of a run's settings key: the settings that differ from it are what `fspo_lite.drivers.runs.run_key`
hashes, so a setting added later at its default keeps the keys of finished runs."""

from __future__ import annotations

from typing import Any

from fspo_lite.config import Config


KEY_DEFAULTS: dict[str, dict[str, Any]] = {"rollout": {"draw": "exponential_race"}}
"""Where a run key's baseline differs from today's default: the value every committed run was keyed against. A
setting equal to it is left out of the key, so those runs keep their keys; today's default (`rollout.draw:
multinomial`, generate's draw) is then a change the key records, and a profile that wants the committed runs' draw
sets it (configs/lite/study.yaml and lite.yaml set `rollout.draw: exponential_race`)."""


def key_defaults() -> dict[str, Any]:
    """Config's defaults with KEY_DEFAULTS laid over them: the baseline `run_key` leaves out."""
    defaults = Config().to_dict()
    for section, values in KEY_DEFAULTS.items():
        defaults[section] = {**defaults[section], **values}
    return defaults


def changed_settings(settings: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of a nested settings dict that differ from `defaults` (sections with no change left out)."""
    changed = {}
    for name, value in settings.items():
        default = defaults.get(name, _ABSENT)
        if isinstance(value, dict) and isinstance(default, dict):
            inner = changed_settings(value, default)
            if inner:
                changed[name] = inner
        elif value != default:
            changed[name] = value
    return changed


_ABSENT = object()
