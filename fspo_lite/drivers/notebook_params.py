"""What each notebook parameter accepts, checked before the lite job runs any notebook.

`python -m fspo_lite lite` hands a profile's parameters (configs/lite/*.yaml, and `--set NB.PARAM=VALUE`) to the
notebooks under papermill, which injects them as they are: a wrong one would fail only once its notebook reached it,
after the notebooks before it had run, and deep inside a traceback. `PARAMETERS` lists every parameter of every
notebook's `parameters` cell with what it accepts (tests/test_notebook_params.py checks that the table and the
notebooks agree, and that each default passes); `check_notebook_parameters` refuses a value in one line naming the
notebook, the parameter, the value and what is valid. A parameter the notebook turns into a config key (notebook 03's
`steps` is `train.steps`) takes that key's own type and range (fspo_lite.config), so the two cannot disagree.

When a notebook does fail, `notebook_failure` turns papermill's error into one line: the exception's own type and
message, and where the executed copy with the traceback is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fspo_lite.config import CHOICES, NUMBER_RANGES, Config, numeric_keys
from fspo_lite.config_checks import COUNT, INDEX, SEED, ConfigError, Range, shown
from fspo_lite.config_load import apply_overrides
from fspo_lite.evaluation.benchmarks import BENCHMARKS
from fspo_lite.scoring.methods import REWARD_METHODS
from fspo_lite.scoring.verifiers import VERIFIERS

MAX_EVALUE = 2000
"""Characters of a failing notebook's exception message shown on the console (the executed copy has all of it)."""


class NotebookError(RuntimeError):
    """A notebook of the lite job raised: the message is the notebook, the exception's type and its message."""


@dataclass(frozen=True)
class Accepts:
    """What one notebook parameter accepts: `valid` says it in words (the end of the error line), `holds` tests a
    value as papermill would inject it."""

    valid: str
    holds: Callable[[Any], bool]


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def nullable(accepts: Accepts) -> Accepts:
    """`accepts`, or null (None)."""
    return Accepts(f"null or {accepts.valid}", lambda value: value is None or accepts.holds(value))


def integer(bounds: Range) -> Accepts:
    """A whole number (not true/false) within `bounds`."""
    return Accepts(bounds.describe(True, False), lambda value: _is_integer(value) and bounds.holds(value))


def text() -> Accepts:
    """A non-empty string: a model name, a data source, a path."""
    return Accepts("a non-empty string", _is_text)


def flag() -> Accepts:
    """true or false."""
    return Accepts("true or false", lambda value: isinstance(value, bool))


def one_of(choices) -> Accepts:
    """One of the given words."""
    choices = tuple(choices)
    return Accepts(" | ".join(choices), lambda value: isinstance(value, str) and value in choices)


def names(choices=None, empty: bool = False) -> Accepts:
    """A list of distinct strings (each one of `choices` when given); at least one unless `empty`."""
    what = f"names from {' | '.join(choices)}" if choices else "names"
    valid = f"a list of distinct {what}" + ("" if empty else " (at least one)")

    def holds(value: Any) -> bool:
        return (isinstance(value, list) and (empty or bool(value)) and all(_is_text(v) for v in value)
                and len(set(value)) == len(value) and (choices is None or set(value) <= set(choices)))
    return Accepts(valid, holds)


def seeds() -> Accepts:
    """A non-empty list of distinct seeds (the notebook reads seeds[0])."""
    return Accepts(f"a list of distinct seeds, each {SEED.describe(True, False)}, at least one, e.g. [0, 1]",
                   lambda value: isinstance(value, list) and bool(value) and len(set(value)) == len(value)
                   and all(integer(SEED).holds(v) for v in value))


def mapping(of_mappings: bool = False) -> Accepts:
    """A mapping with string keys (config keys, or arm names whose values are mappings of config keys)."""
    def holds(value: Any) -> bool:
        return isinstance(value, dict) and all(_is_text(k) for k in value) and (
            not of_mappings or all(isinstance(v, dict) for v in value.values()))
    return Accepts("a mapping {name: {config key: value}}" if of_mappings else "a mapping {config key: value}", holds)


def file_prefix() -> Accepts:
    """The start of a file name: no folder separator, no '..' (it would put the files outside the folder)."""
    return Accepts("a file-name prefix without '/', '\\' or '..'", lambda value: isinstance(value, str) and not any(
        part in value for part in ("/", "\\", "..")))


def benchmark_list() -> Accepts:
    """Notebook 01's `benchmarks`: null (every benchmark available here) or names separated by commas; a list would be
    taken for null."""
    def holds(value: Any) -> bool:
        return value is None or (_is_text(value) and set(value.split(",")) <= set(BENCHMARKS))
    return Accepts(f"null or benchmark names separated by commas, from {' | '.join(BENCHMARKS)}", holds)


def _coerced(key: str, value: Any) -> tuple[bool, Any]:
    """(whether the config takes `value` for `key`, the value as the config holds it)."""
    section, name = key.split(".")
    try:
        return True, getattr(getattr(apply_overrides(Config(), {key: value}), section), name)
    except ConfigError:
        return False, None


def config_key(key: str) -> Accepts:
    """What the config key `key` accepts (its type, range or words, and null where it allows null): for a parameter
    the notebook passes there. Whole-number keys take whole numbers only (the notebooks also compute with them)."""
    whole = numeric_keys().get(key, (False, False))[0]
    can_be_null = _coerced(key, None)[0]
    valid = (NUMBER_RANGES[key].describe(whole, can_be_null) if key in NUMBER_RANGES
             else " | ".join(CHOICES[key]) if key in CHOICES else "null or a string" if can_be_null else "a string")

    def holds(value: Any) -> bool:
        if value is None:
            return can_be_null
        if whole and not _is_integer(value):
            return False
        taken, coerced = _coerced(key, value)
        if not taken:
            return False
        if key in NUMBER_RANGES:
            return NUMBER_RANGES[key].holds(coerced)
        return coerced in CHOICES[key] if key in CHOICES else _is_text(coerced)
    return Accepts(f"{valid} (it is {key})", holds)


PARAMETERS: dict[str, dict[str, Accepts]] = {
    "00_fspo_from_scratch.ipynb": {
        "steps": config_key("train.steps"), "questions_per_step": config_key("train.prompts_per_step"),
        "G": config_key("rollout.group_size"), "max_new_tokens": config_key("rollout.max_new_tokens"),
        "temperature": config_key("rollout.temperature"), "learning_rate": config_key("train.learning_rate"),
        "beta": config_key("train.beta"), "epsilon": config_key("train.epsilon_low"), "seed": integer(SEED),
    },
    "01_measure_hallucination.ipynb": {
        "model": config_key("model.name"), "adapter": nullable(text()), "limit": config_key("evaluation.limit"),
        "samples": config_key("evaluation.samples"), "temperature": config_key("evaluation.temperature"),
        "benchmarks": benchmark_list(), "max_new_tokens": config_key("evaluation.max_new_tokens"),
        "output_dir": text(),
    },
    "02_verifier_labeling.ipynb": {
        "data": text(), "num_questions": integer(COUNT), "samples_per_question": integer(Range(1, 10_000)),
        "max_new_tokens": config_key("rollout.max_new_tokens"), "temperature": config_key("rollout.temperature"),
        "seed": integer(SEED), "verifier_names": names(VERIFIERS), "gold_path": text(), "labels_out": text(),
    },
    "03_train_fspo.ipynb": {
        "base_config": nullable(text()), "model": config_key("model.name"), "methods": names(), "seeds": seeds(),
        "steps": config_key("train.steps"), "prompts_per_step": config_key("train.prompts_per_step"),
        "group_size": config_key("rollout.group_size"), "max_new_tokens": config_key("rollout.max_new_tokens"),
        "learning_rate": config_key("train.learning_rate"), "beta": config_key("train.beta"),
        "temperature": config_key("rollout.temperature"), "train_data": config_key("data.train"),
        "filter_path": config_key("data.filter_path"), "train_verifier": one_of(VERIFIERS),
        "judge_verifier": one_of(VERIFIERS), "eval_benchmarks": names(BENCHMARKS),
        "eval_limit": config_key("evaluation.limit"), "eval_samples": config_key("evaluation.samples"),
        "runs_dir": text(), "overrides": mapping(), "arms": mapping(of_mappings=True),
        "workers": integer(Range(1, 1024, note="runs at a time")),
    },
    "04_results.ipynb": {
        "runs_dir": text(), "figures_dir": text(), "results_dir": text(), "prefix": file_prefix(), "order": names(),
        "goal_method": text(), "goal_baseline": text(), "title": text(), "smoke": flag(),
        "n_resamples": integer(COUNT), "bootstrap_seed": integer(SEED), "rejudge": names(VERIFIERS, empty=True),
        "qa": one_of(("kbqa", "multihop")), "primary_judge": nullable(one_of(VERIFIERS)),
    },
    "05_reward_playground.ipynb": {
        "items_path": nullable(text()), "method": one_of(REWARD_METHODS), "item_index": integer(INDEX),
        "response_index": integer(INDEX), "sample_fresh": flag(), "fresh_questions": integer(COUNT),
        "fresh_samples": integer(COUNT),
    },
}
"""Notebook -> parameter -> what it accepts: every parameter of every notebook's `parameters` cell."""


def parameter_problem(notebook: str, name: str, value: Any) -> str | None:
    """The one-line refusal of `value` for the notebook's parameter `name`, or None when it is valid (or when the
    table does not list the notebook: `check_profile` refuses parameters a notebook does not define)."""
    accepts = PARAMETERS.get(notebook, {}).get(name)
    if accepts is None or accepts.holds(value):
        return None
    return f"notebook {notebook}: {name}={shown(value)} is not valid; valid: {accepts.valid}"


def check_notebook_parameters(notebook: str, parameters: dict[str, Any]) -> None:
    """ConfigError for the first parameter of `parameters` the notebook does not accept (`parameter_problem`)."""
    for name, value in parameters.items():
        problem = parameter_problem(notebook, name, value)
        if problem:
            raise ConfigError(problem)


def notebook_failure(notebook: str, error: Exception, executed: Path, root: Path) -> NotebookError:
    """The one-line error for a notebook that raised under papermill (its PapermillExecutionError carries the
    exception's type as `ename` and its message as `evalue`): '<notebook>: <type>: <message> (traceback: <executed
    copy>)', the message whitespace-joined and cut to MAX_EVALUE characters."""
    message = " ".join(str(getattr(error, "evalue", "") or "").split())
    if len(message) > MAX_EVALUE:
        message = f"{message[:MAX_EVALUE]}... ({len(message)} characters)"
    where = executed.relative_to(root) if executed.is_relative_to(root) else executed
    kind = getattr(error, "ename", None) or type(error).__name__
    return NotebookError(f"{notebook}: {kind}: {message or '(no message)'} (traceback in the executed copy {where})")
