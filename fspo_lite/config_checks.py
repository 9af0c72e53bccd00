"""What a valid config is: the error every config problem raises, how a field states what it accepts (`ranged`: a
numeric key's `Range`; `one_of`: a string key's words), and the checks of every key and of the rules that tie keys
together (`validate_config`).

Generic over the schema (`fspo_lite.config`): the checks read the dataclasses of the config they are given, so this
module sits below the schema that calls it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable


class ConfigError(ValueError):
    """A config file or override names an unknown key or a value of the wrong type."""


def shown(value: Any, limit: int = 60, render: Callable[[Any], str] = repr) -> str:
    """render(value) (repr, or json.dumps for a value read from a JSON file) on one line, cut to `limit` characters,
    so an error line stays one short line whatever the value holds. The one helper every input check shows a refused
    value with (the config, notebook parameters, result files, a server's answers)."""
    try:
        text = render(value)
    except ValueError:  # an integer over Python's 4300-digit limit for str()
        return f"<an integer of about {value.bit_length() * 0.30103:,.0f} digits>"
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields -> their resolved type annotations."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class Range:
    """The valid values of one numeric config key: low <= value <= high (an end excluded when `*_open`), finite,
    and None where the key allows null."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    note: str = ""
    """Why the range is what it is, appended to the error."""

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return _finite(value) and above and below

    def describe(self, integer: bool, nullable: bool) -> str:
        kind = "an integer" if integer else "a finite number"
        ends = []
        if self.low > -math.inf:
            ends.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high < math.inf:
            ends.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        text = f"{kind} {' and '.join(ends)}".strip()
        text = f"null or {text}" if nullable else text
        return f"{text} ({self.note})" if self.note else text


def _number(value: float) -> str:
    return f"{value:,.0f}".replace(",", "_") if float(value).is_integer() and abs(value) >= 10_000 else f"{value:g}"


COUNT = Range(1, 10**9)
"""A count of things (steps, samples, tokens, batch sizes, a notebook's questions or resamples): at least 1, and not
absurdly many."""
INDEX = Range(0, 10**9)
"""A position in a list (0 is the first), or a count that may be 0."""
SHARE = Range(0, 1)
"""A probability, share or threshold."""
WEIGHT = Range(-1e6, 1e6)
"""A reward value or weight: any sign; the bound only catches absurd values (1e20 makes every other term vanish)."""
NONNEGATIVE = Range(0, 1e6)
TIMEOUT = Range(0, 1e6, low_open=True, note="seconds")
SEED = Range(0, 2**32 - 1, note="what numpy and the CUDA generators accept")

RANGE, WORDS = "range", "words"
"""The field metadata that says what a config key accepts: its Range (numeric keys) or its words (string keys)."""
_FIRST = object()


def ranged(default: Any, bounds: Range) -> Any:
    """A numeric config field: its default and its valid range, written where the field is (fspo_lite/config.py),
    the one place the range is stated."""
    return dataclasses.field(default=default, metadata={RANGE: bounds})


def one_of(*words: str, default: Any = _FIRST) -> Any:
    """A string config field that accepts these words: the first is its default unless `default` is given (None
    where the key allows null), written where the field is, the one place the words are stated."""
    return dataclasses.field(default=words[0] if default is _FIRST else default, metadata={WORDS: tuple(words)})


def key_table(schema: type, kind: str) -> dict[str, Any]:
    """Every key of a config class (`fspo_lite.config.Config`) whose field says what it accepts -> that (its Range
    for kind=RANGE, its words for kind=WORDS), in the schema's order."""
    return {key: metadata[kind] for key, _, metadata in _schema_fields(schema) if kind in metadata}


REWARD_SOURCES: dict[str, bool] = {"grpo": True, "caution": True, "rlfh": False, "klcf": True, "random": False,
                                   "format": False, "binary": True, "ternary": True}
"""Every reward source's name -> whether it takes FSPO's flip ('<name>+fspo'): the names and flags of the scoring
layer's table (fspo_lite.scoring.methods.METHODS, in its order; tests/test_plan.py compares). Held here as data so
that whether a config is valid does not depend on which modules were imported; a new source adds its name here, as
it adds its section to fspo_lite/config.py."""
VERIFIER_NAMES: tuple[str, ...] = ("lexical", "embedding", "likelihood", "nli", "hhem", "llm", "kb")
"""Every verifier.name: the keys of fspo_lite.scoring.verifiers.VERIFIERS, in its order (tests/test_plan.py
compares)."""
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


@functools.cache
def _schema_fields(schema: type) -> tuple[tuple[str, Any, Any], ...]:
    """Every key of a config class -> (its resolved annotation, its field's metadata), read once per class."""
    sections = typing.get_type_hints(schema)
    return tuple((f"{section.name}.{field.name}", annotation, field.metadata) for section in dataclasses.fields(schema)
                 for field, annotation in zip(dataclasses.fields(sections[section.name]),
                                              field_types(sections[section.name]).values()))


def numeric_keys(schema: type) -> dict[str, tuple[bool, bool]]:
    """Every numeric key of a config class (`fspo_lite.config.Config`) -> (integer, nullable), read off its
    dataclasses."""
    keys = {}
    for key, annotation, _ in _schema_fields(schema):
        args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
            else (annotation,)
        numeric = [a for a in args if a in (int, float)]
        if numeric:
            keys[key] = (numeric[0] is int, type(None) in args)
    return keys


def _check(condition: bool, key: str, value: Any, valid: str) -> None:
    if not condition:
        raise ConfigError(f"{key}={shown(value)} is out of range; valid: {valid}")


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)  # an int of any size is finite (isfinite would overflow)


def _allows_null(schema: type, key: str) -> bool:
    return any(name == key and type(None) in typing.get_args(annotation)
               for name, annotation, _ in _schema_fields(schema))


def _value(config: Any, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


def split_method(name: str) -> tuple[tuple[str, ...], bool]:
    """The grammar of reward.method: '+'-separated names, case and spaces ignored, 'fspo' the FSPO flip and every other
    name a reward source. 'fspo' -> ((), True), 'KLCF + FSPO' -> (('klcf',), True), 'rlfh' -> (('rlfh',), False).
    Returns (the source names, sorted and distinct; whether 'fspo' is named). Which names exist is `method_source`'s
    table."""
    parts = {part.strip() for part in str(name).lower().split("+") if part.strip()}
    return tuple(sorted(parts - {"fspo"})), "fspo" in parts


def method_names(flips: dict[str, bool]) -> tuple[str, ...]:
    """Every valid reward.method of a table of sources (name -> takes the flip): each source, and its FSPO-flipped
    form where allowed ('fspo' for grpo, '<name>+fspo' for the others)."""
    return tuple(name for source, flip in flips.items()
                 for name in (source, "fspo" if source == "grpo" else f"{source}+fspo")[: 2 if flip else 1])


def method_source(name: str, flips: dict[str, bool] | None = None) -> tuple[str, bool]:
    """reward.method -> (its reward source, whether FSPO flips): 'fspo' -> ('grpo', True), 'caution+fspo' ->
    ('caution', True), 'rlfh' -> ('rlfh', False). `flips`: the sources (name -> takes the flip), REWARD_SOURCES by
    default. ValueError listing every valid reward.method for anything else (no name, two sources, an unknown
    source, a flip the source does not take)."""
    flips = REWARD_SOURCES if flips is None else flips
    sources, flip = split_method(name)
    source = sources[0] if len(sources) == 1 else ("grpo" if not sources else None)
    if not (sources or flip) or source not in flips or (flip and not flips[source]):
        no_flip = ", ".join(source for source, flipped in flips.items() if not flipped)
        raise ValueError(f"unknown reward.method {name!r}; available: {', '.join(method_names(flips))} "
                         f"({no_flip} take no FSPO flip; the study's arms corver, fspo+kb, grpo+4x are settings: "
                         "`fspo-lite list methods` gives their keys)")
    return source, flip


def check_names(config: Any) -> None:
    """reward.method against REWARD_SOURCES and verifier.name against VERIFIER_NAMES: ConfigError in one line listing
    the valid ones, so that load_config, Config(...) and validate_config refuse them as the CLI does."""
    try:
        method_source(config.reward.method)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if not isinstance(config.verifier.name, str) or config.verifier.name not in VERIFIER_NAMES:
        raise ConfigError(f"unknown verifier.name {config.verifier.name!r}; available: {', '.join(VERIFIER_NAMES)}")


def validate_config(config: Any) -> None:
    """Range checks on every value a run depends on (ConfigError naming the key, the value and the valid range):
    each numeric key against the range its field gives (`ranged`; non-finite values never pass), each word key
    against its field's words (`one_of`), and the rules that tie keys together, then the names of reward.method and
    verifier.name (`check_names`). load_config and Config(...) call it; so do the trainer and the evaluation, for
    configs changed in code. Types are already checked by the loader."""
    schema = type(config)
    ranges = key_table(schema, RANGE)
    for key, (integer, nullable) in numeric_keys(schema).items():
        value = _value(config, key)
        if value is None and nullable:
            continue
        bounds = ranges[key]
        _check(bounds.holds(value) and (not integer or isinstance(value, int)), key, value,
               bounds.describe(integer, nullable))
    for key, choices in key_table(schema, WORDS).items():
        value, nullable = _value(config, key), _allows_null(schema, key)
        _check(value in choices or (value is None and nullable), key, value,
               " | ".join(choices) + (" | null" if nullable else ""))
    _check(isinstance(config.verifier.device, str) and bool(_DEVICE.match(config.verifier.device)), "verifier.device",
           config.verifier.device, "auto | cpu | mps | cuda | cuda:N")
    minimum_group = 1 if split_method(config.reward.method)[0] == ("rlfh",) else 2  # token rewards need no group
    _check(config.rollout.group_size >= minimum_group, "rollout.group_size", config.rollout.group_size,
           f"an integer >= {minimum_group} (group-relative advantages need at least two responses per prompt)"
           if minimum_group == 2 else "an integer >= 1")
    rlfh = config.rlfh
    _check(rlfh.wrong_threshold <= rlfh.correct_threshold, "rlfh.wrong_threshold", rlfh.wrong_threshold,
           f"at most rlfh.correct_threshold ({rlfh.correct_threshold}): below it a statement is Wrong, above the "
           "other Correct")
    _check(bool(config.evaluation.benchmarks), "evaluation.benchmarks", config.evaluation.benchmarks,
           "at least one benchmark name")
    _check(config.evaluation.samples == 1 or config.evaluation.temperature > 0, "evaluation.samples",
           config.evaluation.samples, "1 unless evaluation.temperature > 0 (greedy answers would repeat)")
    if config.filter.band is not None:
        validate_band(config.filter.band, "filter.band")
    rollout, sampler_dtype = config.rollout, config.speed.sampler_dtype
    if sampler_dtype != "policy" and config.speed.mode != "off":
        for holds, valid in ((rollout.engine == "transformers", "policy unless rollout.engine is transformers"),
                             (rollout.use_sampler_logprobs, "policy unless rollout.use_sampler_logprobs=true (the "
                              "ratio to the copy's log-probs corrects its gap)"),
                             (config.train.ppo_epochs == 1, "policy unless train.ppo_epochs=1"),
                             (not config.model.load_in_4bit, "policy with model.load_in_4bit (a 4-bit base has no "
                              "bfloat16 copy)")):
            _check(holds, "speed.sampler_dtype", sampler_dtype, valid)
    _check(not rollout.use_sampler_logprobs or config.train.ppo_epochs == 1, "rollout.use_sampler_logprobs",
           rollout.use_sampler_logprobs, "false unless train.ppo_epochs=1 (with mu > 1 the trainer computes pi_old "
           "itself, for every engine)")
    _check(not config.reward.strict_checkable or split_method(config.reward.method)[1], "reward.strict_checkable",
           config.reward.strict_checkable, "false unless reward.method includes fspo (strict FSPO is an option of the "
           "flip)")
    detail = config.detail
    _check(not detail.relevance_weight or detail.relevance_judge is not None, "detail.relevance_weight",
           detail.relevance_weight, "0 unless detail.relevance_judge names a judge (llm)")
    output_folders(config)
    check_names(config)


OUTPUT_KEYS = (("train", "output_dir"), ("evaluation", "output_dir"))


def output_folders(config: Any) -> None:
    """The output folders, once for every reader: a leading `~` expanded here (so the lock, the trainer and the
    evaluation all write where the lock holds), and an empty value (an unset variable), the file system's root or
    the home folder itself refused: each would mix a run's files into (and clear them from) a folder holding others."""
    import os

    for section, key in OUTPUT_KEYS:
        part = getattr(config, section)
        value = getattr(part, key)
        if not isinstance(value, str):
            continue
        folder = os.path.expanduser(value.strip()) if value.strip() else ""
        full = os.path.realpath(folder) if folder else ""
        _check(bool(folder) and full != os.path.realpath(os.path.expanduser("~"))
               and full != os.path.abspath(os.sep), f"{section}.{key}", value,
               "a folder of its own, e.g. runs/my_run (not empty, not / or the home folder)")
        setattr(part, key, folder)


def check_training_settings(config: Any) -> None:
    """The rules of keys that only training reads (an evaluation of the same config is not refused): ConfigError, in
    one line saying what to change, before any model loads. The trainer runs them (fspo_lite.scoring.plan), and so
    do the experiment drivers for every arm before the first one trains."""
    model, train, engine = config.model, config.train, config.rollout.engine
    if train.fsdp and engine == "vllm":
        raise ConfigError("train.fsdp=true with rollout.engine=vllm (one vLLM engine inside each sharded training "
                          "process) is not supported: use rollout.engine=vllm-server (one GPU serves, the others train "
                          "with FSDP; docs/gpu.md), or rollout.engine=vllm with train.fsdp=false")
    if model.dtype == "float16" and not model.lora:
        raise ConfigError("model.dtype=float16 with model.lora=false would train float16 weights, whose small "
                          "updates round away: set model.lora=true (the adapter stays in float32) or "
                          "model.dtype=float32")


def validate_band(band: Any, key: str = "--band") -> list[float]:
    """[low, high] success-rate band with 0 <= low <= high <= 1, or ConfigError."""
    ok = (isinstance(band, (list, tuple)) and len(band) == 2 and all(_finite(x) for x in band)
          and 0 <= band[0] <= band[1] <= 1)
    _check(ok, key, band, "two numbers LOW,HIGH with 0 <= LOW <= HIGH <= 1, e.g. 0.2,0.8")
    return [float(band[0]), float(band[1])]


