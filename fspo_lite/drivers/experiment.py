"""The lite reproduction: profiles and the notebook sequence under papermill.

A profile (`configs/lite/lite.yaml`, `quick.yaml`, `colab_t4.yaml`) is plain data: where the outputs go and, per
notebook, the papermill parameters. `run_profile` executes the notebooks in order into
`<out>/results/notebooks/`, times each one and adds the timings to the summary that notebook 04 writes
(`<out>/results/summary.json` and `.md`). `python -m fspo_lite lite --profile lite|quick` calls it. Notebook 03's
training and evaluation calls are in `fspo_lite.drivers.runs`.

The benchmarks a profile lists under `local_data` read their full copy from the data folder (`--data-dir`, else
$FSPO_LITE_DATA, else ~/.cache/fspo-lite/data) when it is there, the bundled sample otherwise. The choice is
printed and recorded in summary.json.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fspo_lite.atomic import atomic_write_text
from fspo_lite.config import load_config
from fspo_lite.config_checks import ConfigError
from fspo_lite.config_load import parse_yaml_file, split_override
from fspo_lite.data.files import data_dir
from fspo_lite.drivers.cli_help import MissingFileError
from fspo_lite.drivers.notebook_kernel import execute_notebook
from fspo_lite.drivers.notebook_params import check_notebook_parameters, notebook_failure
from fspo_lite.drivers.report.render import write_summary
from fspo_lite.drivers.runs import check_run_folders, invocation_counts
from fspo_lite.evaluation.benchmarks import BENCHMARKS
from fspo_lite.scoring.methods import REWARD_METHODS
from fspo_lite.scoring.plan import check_settings

ROOT = Path(__file__).resolve().parents[2]
PROFILE_DIR = ROOT / "configs" / "lite"
"""Named profiles: configs/lite/<name>.yaml (lite, quick, colab_t4)."""


# ---- profiles and the notebook sequence ---------------------------------------------------
@dataclass
class Profile:
    """One lite-job profile: its name, output root and the ordered (notebook, parameters) pairs."""

    name: str
    out: str
    notebooks: list[tuple[str, dict[str, Any]]]
    description: str = ""
    local_data: list[str] = field(default_factory=list)
    """Benchmarks that read their full copy from the data folder when present (see `local_sources`)."""


def profile_names() -> dict[str, str]:
    """The named profiles (configs/lite/<name>.yaml) and their descriptions (an unreadable one: its error)."""
    return {path.stem: _description(path) for path in sorted(PROFILE_DIR.glob("*.yaml"))}


def _description(path: Path) -> str:
    try:
        data = parse_yaml_file(path)
    except ConfigError as error:
        return str(error)
    return str(data.get("description", "")) if isinstance(data, dict) else ""


def load_profile(name_or_path: str) -> Profile:
    """A profile by name ('lite', 'quick') or YAML path; errors name the valid profiles."""
    if not (ROOT / "notebooks").is_dir():
        raise ConfigError("fspo-lite lite runs the notebooks of a checkout (notebooks/ and configs/lite/ of the "
                          "repository), and this installation (a wheel) has none: clone the repository and run "
                          "`make lite` there, or open the notebooks one by one (docs/colab.md)")
    named = PROFILE_DIR / f"{name_or_path}.yaml"
    path = named if named.exists() else Path(name_or_path)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise MissingFileError(f"no profile {name_or_path!r}: use one of {names} or a YAML file")
    data = parse_yaml_file(path) or {}  # the config's strict loader: no aliases, no key twice, bounded nesting
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a profile is a mapping with description, out, notebooks and local_data")
    unknown = set(data) - {"description", "out", "notebooks", "local_data"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; valid: description, out, notebooks, local_data")
    local_data = data.get("local_data") or []
    with_files = [b.name for b in BENCHMARKS.values() if b.file]
    if not isinstance(local_data, list) or not all(name in with_files for name in local_data):
        raise ValueError(f"{path}: local_data must list benchmarks with a data-folder file ({', '.join(with_files)}), "
                         f"got {local_data!r}")
    notebooks = []
    for entry in data.get("notebooks") or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"{path}: each notebooks entry needs a name (and optional parameters), got {entry!r}")
        notebooks.append((entry["name"], dict(entry.get("parameters") or {})))
    return Profile(path.stem, str(data.get("out", ".")), notebooks, data.get("description", ""), list(local_data))


def override_parameters(profile: Profile, overrides: list[str]) -> Profile:
    """A copy of the profile with notebook parameters replaced: each override is 'NB.PARAM=VALUE' (VALUE parsed as
    YAML with the config's strict loader, `split_override`), NB a notebook's name or its number prefix ('03');
    'NB.overrides.KEY=VALUE' sets one dotted config key in that notebook's `overrides` mapping. E.g.
    `--set 03.seeds=[0] --set 03.overrides.evaluation.limit=2`. The values are checked by `check_profile`."""
    notebooks = [(name, dict(parameters)) for name, parameters in profile.notebooks]
    for item in overrides:
        target, equals, raw = item.partition("=")
        target = target.strip()
        full_names = [name for name, _ in notebooks if target.startswith(name + ".")]
        where, _, parameter = ((full_names[0], "", target[len(full_names[0]) + 1:]) if full_names
                               else target.partition("."))
        if not equals or not parameter:
            raise ConfigError(f"profile override {item!r} must look like NB.PARAM=VALUE, e.g. 03.seeds=[0,1]")
        matches = [parameters for name, parameters in notebooks if name == where or name.split("_")[0] == where]
        if len(matches) != 1:
            names = ", ".join(name for name, _ in notebooks)
            raise ConfigError(f"profile override {item!r}: {where!r} names no single notebook of {names}")
        value = split_override(item)[1]
        if parameter.startswith("overrides."):
            matches[0]["overrides"] = {**(matches[0].get("overrides") or {}), parameter[len("overrides."):]: value}
        else:
            matches[0][parameter] = value
    return Profile(profile.name, profile.out, notebooks, profile.description, list(profile.local_data))


def notebook_parameters(name: str) -> dict[str, str]:
    """The parameters a notebook's `parameters` cell defines: name -> default as written (papermill reads it)."""
    import papermill

    path = ROOT / "notebooks" / name
    if not path.exists():
        raise ConfigError(f"no notebook {name} in notebooks/")
    return {key: value["default"] for key, value in papermill.inspect_notebook(str(path)).items()}


def only_notebooks(profile: Profile, which: list[str] | None) -> Profile:
    """The profile with only the notebooks `which` names (a number such as '04', or a file name), in the profile's
    order: e.g. the report alone over the runs already made (`--only 04`). None or []: every notebook."""
    if not which:
        return profile
    def named(name: str, word: str) -> bool:
        return word.strip() in (name, name.split("_")[0])
    unknown = [word for word in which if not any(named(name, word) for name, _ in profile.notebooks)]
    if unknown:
        raise ConfigError(f"--only {','.join(unknown)}: profile {profile.name} runs no such notebook; it runs "
                          f"{', '.join(name for name, _ in profile.notebooks)}")
    notebooks = [(name, p) for name, p in profile.notebooks if any(named(name, word) for word in which)]
    return Profile(profile.name, profile.out, notebooks, profile.description, list(profile.local_data))


def check_profile(profile: Profile) -> None:
    """ConfigError, in one line, for what would otherwise fail (or be ignored) only once the notebooks run: a
    parameter a notebook does not define (papermill would only warn and run the defaults), a training arm that is
    neither a reward.method nor a name defined in `arms`, and config keys or values of the training notebook's
    `overrides` and arms that the config refuses, or files they name that are missing (`check_settings`: KLCF's
    checklist file), and every parameter's type and range (`check_notebook_parameters`). Run before the first
    notebook."""
    for name, parameters in profile.notebooks:
        known = notebook_parameters(name)
        unknown = sorted(set(parameters) - set(known))
        if unknown:
            raise ConfigError(f"profile {profile.name}: notebook {name} has no parameter {', '.join(unknown)}; its "
                              f"parameters: {', '.join(known)}")
        try:
            check_notebook_parameters(name, parameters)
        except ConfigError as error:
            raise ConfigError(f"profile {profile.name}: {error}") from None
        if name != TRAINING_NOTEBOOK:
            continue
        methods = parameters.get("methods", ast.literal_eval(known["methods"]))
        arms = parameters.get("arms") or {}
        if not isinstance(methods, list) or not methods:
            raise ConfigError(f"profile {profile.name}: {name} methods must be a non-empty list, e.g. [grpo, fspo]; "
                              f"got {methods!r}")
        for method in methods:
            method_key = (arms.get(method) or {}).get("reward.method") if method in arms else method
            if method_key not in REWARD_METHODS:
                raise ConfigError(f"profile {profile.name}: {name} method {method!r} is neither a reward.method "
                                  f"({', '.join(REWARD_METHODS)}) nor an arm defined in `arms`"
                                  + (f" ({', '.join(arms)})" if arms else ""))
            try:
                with contextlib.chdir(ROOT):  # the notebooks run there: relative paths (klcf.checklist_path) too
                    check_settings(load_config(None, {**(parameters.get("overrides") or {}),
                                                      **(arms.get(method) or {}), "reward.method": method_key}))
            except ConfigError as error:
                raise ConfigError(f"profile {profile.name}: {name}, arm {method}: {error}") from None


def check_training_folders(profile: Profile, out: Path) -> None:
    """`check_run_folders` for the training notebook's runs (its methods x seeds in its runs_dir), before the first
    notebook runs: a run folder holding files fspo-lite did not write is refused, never cleared."""
    for name, parameters in profile.notebooks:
        if name != TRAINING_NOTEBOOK:
            continue
        known = notebook_parameters(name)
        parameters = resolve_parameters(parameters, out)
        methods = parameters.get("methods", ast.literal_eval(known["methods"]))
        seeds = parameters.get("seeds", ast.literal_eval(known["seeds"]))
        runs_dir = parameters.get("runs_dir", ast.literal_eval(known["runs_dir"]))
        check_run_folders(ROOT / runs_dir, methods, seeds if isinstance(seeds, list) else [seeds])


def local_sources(local_data: list[str], folder: str | Path | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({benchmark: spec} for notebook 03's evaluation.sources, {benchmark: what it reads}).

    Every benchmark with a bundled sample reads it (`bundled:<name>`), except those in `local_data` whose file is in
    the data folder (`folder`, default `data_dir()`): they read that copy. So a profile's numbers never depend on
    what else a machine's data folder holds. Paths inside or beside the repository are written relative to it
    (notebooks run from its root); the descriptions name the file only, so summaries hold no machine's paths."""
    folder = Path(folder).expanduser() if folder else data_dir()
    sources, used = {}, {}
    for entry in BENCHMARKS.values():
        path = folder / f"{entry.file}.jsonl" if entry.file else None
        if entry.name in local_data and path is not None and path.is_file():
            sources[entry.name] = os.path.relpath(path.resolve(), ROOT)
            used[entry.name] = f"local copy {path.name} from the data folder"
        elif entry.bundled:
            sources[entry.name] = entry.bundled
            if entry.name in local_data:
                used[entry.name] = f"bundled sample ({path.name} not in the data folder)"
    return sources, used


TRAINING_NOTEBOOK = "03_train_fspo.ipynb"


def with_training_overrides(profile: Profile, overrides: dict[str, Any]) -> Profile:
    """The profile with config overrides (e.g. {"model.load_in_4bit": True}) added to the training notebook's
    `overrides` parameter; the given values win over the profile's own."""
    if not overrides:
        return profile
    names = [name for name, _ in profile.notebooks]
    if TRAINING_NOTEBOOK not in names:
        raise ValueError(f"profile {profile.name} runs no {TRAINING_NOTEBOOK}: --set has nothing to apply to")
    notebooks = [(name, {**parameters, "overrides": {**(parameters.get("overrides") or {}), **overrides}})
                 if name == TRAINING_NOTEBOOK else (name, parameters) for name, parameters in profile.notebooks]
    return Profile(profile.name, profile.out, notebooks, profile.description, list(profile.local_data))


def resolve_parameters(parameters: dict[str, Any], out: Path) -> dict[str, Any]:
    """Replace '{out}' in string values (also inside lists) by the absolute output root."""
    def fill(value):
        if isinstance(value, str):
            return value.replace("{out}", str(out))
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return {key: fill(value) for key, value in parameters.items()}


def run_profile(profile: Profile, out: str | Path | None = None, progress: bool = True,
                data_dir: str | Path | None = None, command: str | None = None) -> dict[str, Any]:
    """Execute the profile's notebooks in order (cwd = repository root); returns the summary with timings.

    Executed copies go to `<results>/notebooks/` (`results_folder`: `<out>/results` unless notebook 04 is given
    another results_dir). A failing notebook stops the sequence with a NotebookError naming the notebook and the
    exception's type and message (`notebook_failure`); its partly executed copy, with the traceback, is kept. Notebook 03 gets
    evaluation.sources.<benchmark> overrides from `local_sources`: the bundled samples, or for the profile's
    `local_data` benchmarks their copy in the data folder (`data_dir`, default $FSPO_LITE_DATA) when present.
    """
    import papermill

    check_profile(profile)  # a misspelled parameter, method or config key: one line, before any notebook runs
    out = output_root(profile, out)
    check_training_folders(profile, out)  # a run folder holding someone's files: refused before any notebook runs
    results_dir = results_folder(profile, out)
    executed_dir = results_dir / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    sources, used = local_sources(profile.local_data, data_dir)
    for name, what in used.items():
        print(f"[fspo_lite] {name}: {what}")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    for name, parameters in profile.notebooks:
        source = ROOT / "notebooks" / name
        if not source.exists():
            raise MissingFileError(f"profile {profile.name}: {source} does not exist")
        parameters = resolve_parameters(parameters, out)
        if sources and name.startswith("03_"):
            parameters["overrides"] = {**{f"evaluation.sources.{b}": spec for b, spec in sources.items()},
                                       **(parameters.get("overrides") or {})}  # the profile's own keys win
        begun = time.perf_counter()
        executed = executed_dir / name
        try:
            execute_notebook(source, executed, parameters, progress)
        except papermill.PapermillExecutionError as error:  # the exception's own message, not a traceback header
            raise notebook_failure(name, error, executed, Path.cwd()) from error
        atomic_write_text(executed, without_root(executed.read_text(encoding="utf-8")))
        timings[name] = round(time.perf_counter() - begun, 1)
        print(f"[fspo_lite] {name}: {timings[name]:.0f} s")
    total = round(time.perf_counter() - started, 1)
    runs_dirs = [resolve_parameters(p, out)["runs_dir"] for n, p in profile.notebooks
                 if n == TRAINING_NOTEBOOK and "runs_dir" in p]
    runs = invocation_counts(ROOT / runs_dirs[0]) if runs_dirs else None
    return record_timings(results_dir, profile.name, timings, total, used, runs, command)  # command: as typed


def results_folder(profile: Profile, out: Path) -> Path:
    """Where the profile's summary and executed notebooks go: the `results_dir` parameter (of notebook 04), else
    `<out>/results`."""
    folders = [p["results_dir"] for _, p in profile.notebooks if "results_dir" in p]
    return (ROOT / resolve_parameters({"d": folders[-1]}, out)["d"]).resolve() if folders else out / "results"


def flip_figure(profile: Profile, out: Path) -> Path | None:
    """Notebook 04's flip figure (<figures_dir>/<prefix>flip_example.png); None when the profile runs no 04."""
    report = [parameters for name, parameters in profile.notebooks if name.startswith("04_")]
    if not report:
        return None
    folder = resolve_parameters({"d": report[-1].get("figures_dir", "figures")}, out)["d"]
    return (ROOT / folder / f"{report[-1].get('prefix', 'lite_')}flip_example.png").resolve()


def shown(path: Path) -> Path:  # relative to the current folder when it lies below it
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def closing_lines(profile: Profile, out: Path, summary: dict[str, Any]) -> list[str]:
    """What the lite command prints at the end: the wall time and where the summary is, where the flip figure is,
    and where to go next."""
    lines = [f"profile {profile.name}: {summary['job']['total_seconds'] / 60:.1f} min; results in "
             f"{shown(results_folder(profile, out))}/summary.md"]
    return lines + next_steps(profile, out)


def next_steps(profile: Profile, out: Path) -> list[str]:  # where the flip figure is and where to go next
    figure = flip_figure(profile, out)
    lines = [f"the flip (token advantages under GRPO and FSPO): {shown(figure)}"] if figure else []
    if profile.name == "quick":
        lines.append("a smoke test: its numbers mean nothing; `make lite` is the real job")
    return lines + ["play with the flip: notebooks/05_reward_playground.ipynb (`.venv/bin/jupyter lab notebooks/`)"]


def output_root(profile: Profile, out: str | Path | None = None) -> Path:
    """The absolute output root (`out`, else the profile's); an empty `out` is refused, not read as the root."""
    if out is not None and not str(out).strip():  # an unset variable: the repository root holds committed results
        raise ConfigError("--out is empty (an unset variable?); name the output root, e.g. --out runs/my_job")
    return (ROOT / Path(out if out is not None else profile.out).expanduser()).resolve()


def job_folders(profile: Profile, out: str | Path | None = None) -> list[Path]:
    """The folders a profile's job owns while it runs (`fspo_lite.run_lock`): its results folder and the training
    notebook's runs folder. Profiles that share an output root but not these folders (lite and study) can run side
    by side; two jobs into the same ones cannot."""
    out = output_root(profile, out)
    runs = [resolve_parameters(p, out)["runs_dir"] for n, p in profile.notebooks
            if n == TRAINING_NOTEBOOK and "runs_dir" in p]
    return [results_folder(profile, out), *((ROOT / r).resolve() for r in runs)]


def record_timings(results_dir: Path, profile: str, timings: dict[str, float], total: float,
                   data: dict[str, str] | None = None, runs: dict[str, int] | None = None,
                   command: str | None = None) -> dict[str, Any]:
    """Add the profile, wall times, benchmark data read (local_data) and runs trained, resumed and skipped
    (`invocation_counts`) to notebook 04's summary.json, and render summary.md again."""
    summary_path = results_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary["job"] = {"profile": profile, "notebook_seconds": timings, "total_seconds": total,
                      "command": command or f"python -m fspo_lite lite --profile {profile}"}
    if runs is not None:
        summary["job"]["runs"] = runs
    if data:
        summary["job"]["benchmark_data"] = data
    written = without_root(json.dumps(summary, indent=2))  # notebook 04 wrote the figures' absolute paths
    atomic_write_text(summary_path, written)
    markdown = write_summary(results_dir)  # rendered again, now with the wall times
    atomic_write_text(markdown, without_root(markdown.read_text()))
    return json.loads(written)


def without_root(text: str, root: Path = ROOT) -> str:
    """`text` (an executed notebook, a summary) with the repository root's absolute path taken out, so that it names
    paths relative to the repository, not to the machine that ran it: papermill records the paths it ran with and
    warnings name the virtual environment. Also inside JSON strings; paths outside the repository stay."""
    prefix = str(root.resolve()) + os.sep
    return text.replace(json.dumps(prefix)[1:-1], "").replace(prefix, "")
