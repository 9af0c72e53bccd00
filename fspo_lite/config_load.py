"""Reading a config: the strict YAML loader, the conversion of every value to its field's type, `--set` overrides,
and the whole load (file, overrides, range checks), each problem a one-line ConfigError naming the key.

Generic over the schema: the functions take the config class (`fspo_lite.config.Config`) or a config built from it,
and `fspo_lite.config` binds them to its Config (`load_config`, `config_from_dict`, `parse_overrides`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from fspo_lite.config_checks import ConfigError, field_types, shown, validate_config

MAX_YAML_DEPTH = 20
"""Deepest nesting of mappings and lists a config file or --set value may have (the config itself has 3 levels)."""


class ConfigLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, stricter where a config file needs it: no aliases (`*name`; a few hundred bytes of
    nested aliases expand to gigabytes: the "billion laughs"), no nesting deeper than MAX_YAML_DEPTH (deep nesting
    exhausted the recursion), and no key twice in one mapping (`train:` twice: the second silently won). Each is a
    yaml error with the line and column, which load_config reports in one line."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed in a config "
                                              "file; write the value out", event.start_mark)
        self.depth = getattr(self, "depth", 0) + 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    line = seen.get(key)
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if line is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {shown(key)} appears twice (first on line {line}); keep one",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def parse_yaml(text: str) -> Any:
    """A YAML document read with ConfigLoader (safe types only, no aliases, bounded depth, no duplicate keys)."""
    loader = ConfigLoader(text)  # what yaml.safe_load does, with the stricter SafeLoader subclass
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_value_problem(error: Exception) -> str:
    if isinstance(error, ValueError) and not isinstance(error, yaml.YAMLError):
        return "an integer with more digits than Python converts (4300)"
    return str(error).splitlines()[0]


YAML_BOOLEAN_WORDS = {(False, "speed.mode"): "off"}
"""Words of a string key that YAML reads as booleans (`speed.mode: off` is false to YAML), taken back as the word."""

MOVED_KEYS = {f"{section}.{key}": f"speed.{key}" for section, keys in (
    ("rollout", ("share_prompt_prefill", "share_prompt_prefix", "merge_lora_for_generation", "drop_ended_rows",
                 "packed_weights", "sampler_dtype")),
    ("train", ("share_prompt_pass", "group_by_length", "fused_lora", "grouped_query_sdpa", "keep_freed_memory")),
) for key in keys}
"""Keys that moved to another section: the old name is refused in one line that names the new one."""


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert a YAML/CLI value to the field's declared type, or raise ConfigError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        try:
            return _coerce(value, inner[0], where)
        except ConfigError as error:
            if type(None) not in args:
                raise
            # say that null is allowed too: "expected true/false or null, got 'maybe'"
            raise ConfigError(str(error).replace(", got ", " or null, got ", 1)) from None
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {shown(value)}")
        return {str(k): _coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {shown(value)}")
        return [_coerce(v, args[0], where) for v in value]
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{where}: expected true/false, got {shown(value)}")
    if annotation is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
            try:  # YAML reads 1e20 (no dot) as a string; a whole number written so is still a whole number
                number = float(value)
            except ValueError:
                number = None
            if number is not None and number.is_integer():
                return int(number)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {shown(value)}")
    if annotation is float:
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                return float(value)
            except ValueError:
                pass
            except OverflowError:  # an integer beyond float: infinite, which the range check refuses by name
                return math.inf if value > 0 else -math.inf
        raise ConfigError(f"{where}: expected a number, got {shown(value)}")
    if annotation is str:
        if isinstance(value, bool) and (value, where) in YAML_BOOLEAN_WORDS:
            return YAML_BOOLEAN_WORDS[value, where]
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {shown(value)}")
        return value
    return value


def update_fields(obj: Any, values: dict[str, Any], prefix: str) -> None:
    """Set a dataclass's fields from nested plain data, each value converted to its field's type; an unknown key is a
    ConfigError listing the valid ones (`prefix`: the dotted path of `obj`, for the message)."""
    types = field_types(type(obj))
    for key, value in values.items():
        where = f"{prefix}{key}"
        if key not in types and where in MOVED_KEYS:
            raise ConfigError(f"config key {where!r} is now {MOVED_KEYS[where]!r} (the speed section); rename it")
        if key not in types:
            raise ConfigError(f"unknown config key {shown(where)}; valid keys here: {', '.join(sorted(types))}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"'{where}' is a section; expected a mapping, got {shown(value)}")
            update_fields(current, value, where + ".")
        elif isinstance(current, dict) and isinstance(value, dict):  # a mapping field: keys merge, as --set adds one
            setattr(obj, key, {**current, **_coerce(value, types[key], where)})
        else:
            setattr(obj, key, _coerce(value, types[key], where))


def build_sections(config: Any) -> None:
    """A config's sections given as mappings built as a config file's are (keys, types: `update_fields`); a section of
    any other type is refused. `Config.__post_init__` runs it before `validate_config`."""
    for name, cls in field_types(type(config)).items():
        value = getattr(config, name)
        if isinstance(value, dict):
            setattr(config, name, cls())
            update_fields(getattr(config, name), value, f"{name}.")
        elif not isinstance(value, cls):
            raise ConfigError(f"'{name}' is a section; expected a mapping or a {cls.__name__}, got {shown(value)}")


def from_dict(schema: type, values: dict[str, Any] | None) -> Any:
    """Build a config of class `schema` from nested plain data (a parsed YAML file), validating every key."""
    config = schema()
    update_fields(config, values or {}, "")
    return config


def apply_overrides(config: Any, overrides: list[str] | dict[str, Any]) -> Any:
    """Apply 'section.key=value' strings (CLI --set) or a flat {'section.key': value} dict (papermill)."""
    items = overrides.items() if isinstance(overrides, dict) else [split_override(o) for o in overrides]
    for dotted, value in items:
        nested: dict[str, Any] = {}
        cursor = nested
        parts = dotted.split(".")
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
        update_fields(config, nested, "")
    return config


def apply_shortcuts(config: Any, values: dict[str, Any]) -> Any:
    """A command's option shortcuts ({'section.key': value}, None: option not given) applied like --set and then
    range-checked (`validate_config`), so `eval --limit 0` or `--temperature nan` stop before any model loads."""
    apply_overrides(config, {key: value for key, value in values.items() if value is not None})
    validate_config(config)
    return config


def split_override(text: str) -> tuple[str, Any]:
    """'KEY=VALUE' as (KEY, VALUE read by `parse_yaml`), or ConfigError in one line naming KEY: the parsing of every
    --set, the config's and the lite job's notebook parameters'."""
    if "=" not in text:
        raise ConfigError(f"override {shown(text)} must look like section.key=value")
    key, raw = text.split("=", 1)
    if not raw.strip():
        return key.strip(), ""
    try:
        return key.strip(), parse_yaml(raw)
    except (yaml.YAMLError, ValueError) as error:  # ValueError: an integer over Python's digit limit
        problem = getattr(error, "problem", None) or _yaml_value_problem(error)
        raise ConfigError(f"--set {key.strip()}: the value is not valid YAML ({problem})") from None


def parse_yaml_file(path: Path) -> Any:
    """A YAML file read with `parse_yaml` (the config's strict loader), or ConfigError in one line naming the file,
    line and column: config files and the lite job's profiles."""
    try:
        return parse_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except (yaml.YAMLError, ValueError) as error:  # ValueError: an integer over Python's digit limit
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or _yaml_value_problem(error)
        raise ConfigError(f"{where}: invalid YAML ({problem})") from None


def read_config_mapping(path: str | Path) -> dict:
    """A config.yaml written by a run or checkpoint (`Config.save`), read with `parse_yaml_file`: the mapping, or
    ConfigError in one line naming the file (unreadable, not YAML, or not a mapping). A missing file is the caller's
    to judge (defaults for a report, an error for a checkpoint), so it raises FileNotFoundError."""
    path = Path(path)
    values = parse_yaml_file(path)
    if not isinstance(values, dict):
        raise ConfigError(f"{path}:1: not a config (a YAML mapping of sections)")
    return values


def load(schema: type, path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """Load a YAML config of class `schema` (or its defaults when path is None), apply overrides and check every
    value's range (`validate_config`), so a bad value stops the run before any model loads."""
    values = {}
    if path is not None:
        path = Path(path)
        if path.is_dir() or not path.exists():
            raise ConfigError(f"{path}: no such config file" + (" (it is a folder)" if path.is_dir() else "")
                              + "; the bundled ones are in configs/ (e.g. configs/tiny.yaml)")
        values = parse_yaml_file(path)
        if values is None:
            raise ConfigError(f"{path}: the file holds no settings (empty, or only comments); leave out --config to "
                              "run with the defaults, or write at least one section (e.g. 'train: {steps: 2}')")
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections")
    try:
        config = from_dict(schema, values)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}" if path is not None else str(error)) from None
    if overrides:
        apply_overrides(config, overrides)
    validate_config(config)
    return config


def parsed_overrides(schema: type, texts: list[str]) -> dict[str, Any]:
    """'section.key=value' strings as a flat {'section.key': value} dict (values parsed as YAML), each key
    checked against the fields of `schema`, for passing on (e.g. to a notebook's `overrides` parameter)."""
    parsed = dict(split_override(text) for text in texts)
    apply_overrides(schema(), parsed)  # raises ConfigError naming an unknown key or a bad value
    return parsed


_URL_USER = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@")
_URL_SECRET = re.compile(r"([?&;](?:api[_-]?key|key|token|access[_-]?token|password|passwd|secret|signature|sig)=)"
                         r"[^&;#\s'\"]+", re.IGNORECASE)
REDACTED = "***"


def redacted(value: Any) -> Any:
    """`value` (a string, or lists and dicts of them) with the credentials of every URL in it replaced by ***: the
    user and password before `@` and the values of secret-looking query keys (api_key, token, password, ...). Used
    wherever a URL is written or printed: config.yaml, the console's error line, recorded commands, summaries."""
    if isinstance(value, str):
        return _URL_SECRET.sub(rf"\1{REDACTED}", _URL_USER.sub(rf"\1{REDACTED}@", value))
    if isinstance(value, dict):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redacted(item) for item in value)
    return value

