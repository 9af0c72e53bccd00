"""The lite reproduction: the notebook sequence under papermill, and the training/evaluation calls of notebook 03.

A profile (`configs/lite/lite.yaml`, `quick.yaml`, `colab_t4.yaml`) is plain data: where the outputs go and, per
notebook, the papermill parameters. `run_profile` executes the notebooks in order into
`<out>/results/notebooks/`, times each one and adds the timings to the summary that notebook 04 writes
(`<out>/results/summary.json` and `.md`). `python -m fspo_lite lite --profile lite|quick` calls it.

Notebook 03 trains every method x seed with the package's Trainer and scores each trained adapter (and the
base model) with the evaluation harness (`evaluate_run` -> `fspo_lite.evaluation.evaluate`): held-out answer
accuracy and F1, the not-attempted rate, the k-sample outcome decomposition and the step-level hallucination
rate judged by a verifier other than the one used for training, plus TruthfulQA MC and HaluEval subsets.

The study profile (`configs/lite/study.yaml`) is long, so notebook 03 is resumable: each run's `heldout.json` carries
a key of every setting that decides its numbers (`run_key`); `train_and_evaluate` / `evaluate_base` skip a run whose
record has the current key, resume a half-trained run from its last checkpoint, and start over one made with other
settings. Notebook 03 evaluates on the bundled benchmark samples, so a profile's numbers do not depend on what a
machine's data folder holds; the benchmarks a profile lists under `local_data` read their full copy from the data
folder (`--data-dir`, else $FSPO_LITE_DATA, else ~/.cache/fspo-lite/data) when it is there, the bundled sample
otherwise. The choice is printed and recorded in summary.json.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config import Config, apply_overrides, load_config
from .data_files import data_dir
from .evaluation.benchmarks import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
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
    """The named profiles (configs/lite/<name>.yaml) and their descriptions."""
    return {path.stem: str((yaml.safe_load(path.read_text()) or {}).get("description", ""))
            for path in sorted(PROFILE_DIR.glob("*.yaml"))}


def load_profile(name_or_path: str) -> Profile:
    """A profile by name ('lite', 'quick') or YAML path; errors name the valid profiles."""
    named = PROFILE_DIR / f"{name_or_path}.yaml"
    path = named if named.exists() else Path(name_or_path)
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"no profile {name_or_path!r}: use one of {names} or a YAML file")
    data = yaml.safe_load(path.read_text()) or {}
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
    YAML), NB a notebook's name or its number prefix ('03'); 'NB.overrides.KEY=VALUE' sets one dotted config key in
    that notebook's `overrides` mapping. E.g. `--set 03.seeds=[0] --set 03.overrides.evaluation.limit=2`."""
    notebooks = [(name, dict(parameters)) for name, parameters in profile.notebooks]
    for item in overrides:
        target, equals, raw = item.partition("=")
        target = target.strip()
        full_names = [name for name, _ in notebooks if target.startswith(name + ".")]
        where, _, parameter = ((full_names[0], "", target[len(full_names[0]) + 1:]) if full_names
                               else target.partition("."))
        if not equals or not parameter:
            raise ValueError(f"profile override {item!r} must look like NB.PARAM=VALUE, e.g. 03.seeds=[0,1]")
        matches = [parameters for name, parameters in notebooks if name == where or name.split("_")[0] == where]
        if len(matches) != 1:
            names = ", ".join(name for name, _ in notebooks)
            raise ValueError(f"profile override {item!r}: {where!r} names no single notebook of {names}")
        value = yaml.safe_load(raw) if raw.strip() else ""
        if parameter.startswith("overrides."):
            matches[0]["overrides"] = {**(matches[0].get("overrides") or {}), parameter[len("overrides."):]: value}
        else:
            matches[0][parameter] = value
    return Profile(profile.name, profile.out, notebooks, profile.description, list(profile.local_data))


def local_sources(local_data: list[str], folder: str | Path | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({benchmark: spec} for notebook 03's evaluation.sources, {benchmark: what it reads}).

    Every benchmark with a bundled sample reads it (`bundled:<name>`), except those in `local_data` whose file is in
    the data folder (`folder`, default `data_dir()`): they read that copy. So a profile's numbers never depend on
    what else a machine's data folder holds. Paths inside or beside the repository are written relative to it
    (notebooks run from its root), so records hold no machine-specific prefix."""
    folder = Path(folder).expanduser() if folder else data_dir()
    sources, used = {}, {}
    for entry in BENCHMARKS.values():
        path = folder / f"{entry.file}.jsonl" if entry.file else None
        if entry.name in local_data and path is not None and path.is_file():
            sources[entry.name] = os.path.relpath(path.resolve(), ROOT)
            used[entry.name] = f"local copy {sources[entry.name]}"
        elif entry.bundled:
            sources[entry.name] = entry.bundled
            if entry.name in local_data:
                used[entry.name] = f"bundled sample ({path} not found)"
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
                data_dir: str | Path | None = None) -> dict[str, Any]:
    """Execute the profile's notebooks in order (cwd = repository root); returns the summary with timings.

    Executed copies go to `<results>/notebooks/` (`results_folder`: `<out>/results` unless notebook 04 is given
    another results_dir). A failing notebook stops the sequence with papermill's
    error, which names the cell; its partly executed copy is kept for reading. Notebook 03 gets
    evaluation.sources.<benchmark> overrides from `local_sources`: the bundled samples, or for the profile's
    `local_data` benchmarks their copy in the data folder (`data_dir`, default $FSPO_LITE_DATA) when present.
    """
    import papermill

    out = (ROOT / (out if out is not None else profile.out)).resolve()
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
            raise FileNotFoundError(f"profile {profile.name}: {source} does not exist")
        parameters = resolve_parameters(parameters, out)
        if sources and name.startswith("03_"):
            parameters["overrides"] = {**{f"evaluation.sources.{b}": spec for b, spec in sources.items()},
                                       **(parameters.get("overrides") or {})}  # the profile's own keys win
        begun = time.perf_counter()
        papermill.execute_notebook(str(source), str(executed_dir / name), parameters=parameters,
                                   cwd=str(ROOT), progress_bar=progress, kernel_name="python3")
        timings[name] = round(time.perf_counter() - begun, 1)
        print(f"[fspo_lite] {name}: {timings[name]:.0f} s")
    total = round(time.perf_counter() - started, 1)
    return record_timings(results_dir, profile.name, timings, total, used)


def results_folder(profile: Profile, out: Path) -> Path:
    """Where the profile's summary and executed notebooks go: the `results_dir` parameter (of notebook 04), else
    `<out>/results`."""
    folders = [parameters["results_dir"] for _, parameters in profile.notebooks if "results_dir" in parameters]
    return (ROOT / resolve_parameters({"d": folders[-1]}, out)["d"]).resolve() if folders else out / "results"


def record_timings(results_dir: Path, profile: str, timings: dict[str, float], total: float,
                   data: dict[str, str] | None = None) -> dict[str, Any]:
    """Add the profile name, wall times and (when the profile has local_data) which benchmark data each
    benchmark read to summary.json / summary.md (written by notebook 04)."""
    summary_path = results_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary["job"] = {"profile": profile, "notebook_seconds": timings, "total_seconds": total,
                      "command": f"python -m fspo_lite lite --profile {profile}"}
    if data:
        summary["job"]["benchmark_data"] = data
    summary_path.write_text(json.dumps(summary, indent=2))
    lines = [f"| {name} | {seconds:.0f} |" for name, seconds in timings.items()]
    markdown = results_dir / "summary.md"
    text = markdown.read_text() if markdown.exists() else ""
    text += (f"\n## Wall time (profile `{profile}`)\n\n| notebook | seconds |\n|---|---|\n" + "\n".join(lines)
             + f"\n| **total** | **{total:.0f}** ({total / 60:.1f} min) |\n")
    if data:
        text += "\nBenchmark data: " + "; ".join(f"{name}: {what}" for name, what in data.items()) + "\n"
    markdown.write_text(text)
    return summary


# ---- notebook 03: train and evaluate --------------------------------------------------------
def arm_overrides(arm: str, arms: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The config keys an arm sets. An arm is a name in notebook 03's `methods` list: a plain reward.method
    ('grpo', 'caution+fspo') sets only reward.method; a name defined in `arms` (e.g. {'fspo+detail':
    {'reward.method': 'fspo', 'detail.weight': 0.2}}) sets its mapping of dotted keys, which must name the
    reward.method. The arm's name, not its reward.method, names the run folder and the method in the reports."""
    if arms and arm in arms:
        overrides = dict(arms[arm] or {})
        if "reward.method" not in overrides:
            raise ValueError(f"arm {arm!r} must set reward.method among its keys, e.g. "
                             f"{{'reward.method': 'fspo', 'detail.weight': 0.2}}; got {sorted(overrides)}")
        return overrides
    return {"reward.method": arm}


def run_config(shared: dict[str, Any], method: str, seed: int, runs_dir: str | Path,
               config_path: str | Path | None = None, arms: dict[str, dict[str, Any]] | None = None) -> Config:
    """The Config of one (arm, seed) run: a YAML config (or the defaults), the shared dotted settings, then the
    arm's keys (`arm_overrides`: its reward.method and, for an arm defined in `arms`, its other keys), seed and
    output folder. `method` is the arm's name."""
    config = load_config(config_path, dict(shared))
    return apply_overrides(config, {**arm_overrides(method, arms), "train.seed": seed,
                                    "train.output_dir": str(Path(runs_dir) / run_name(method, seed))})


def run_name(method: str, seed: int) -> str:
    return f"{method.replace('+', '_')}_s{seed}"


def evaluate_run(config: Config, model, tokenizer, run_dir: str | Path, progress: bool = False, **info) -> dict:
    """Score a model (a trained PEFT adapter in memory, or the base model) with the evaluation harness on
    config.evaluation's benchmarks, into `<run_dir>/eval/`; write `<run_dir>/heldout.json` with `info`
    (method, seed, ...), every benchmark metric as 'benchmark.metric', and the judge's coverage on the
    short-QA benchmarks (share of reasoning sentences it could check). Returns that record."""
    from .evaluation import evaluate

    run_dir = Path(run_dir)
    config = apply_overrides(load_config(None, config.to_dict()), {"evaluation.output_dir": str(run_dir / "eval")})
    result = evaluate(config, model=model, tokenizer=tokenizer, progress=progress)
    metrics = {f"{name}.{metric}": value for name, bench in result.summary["benchmarks"].items()
               for metric, value in bench["metrics"].items()}
    for name in {r["benchmark"] for r in result.records if "sentence_labels" in r}:
        labels = [label for r in result.records if r["benchmark"] == name for label in r["sentence_labels"]]
        metrics[f"{name}.judge_coverage"] = sum(1 for label in labels if label) / len(labels) if labels else float("nan")
    record = {**info, "judge": config.evaluation.step_verifier, "benchmarks": list(config.evaluation.benchmarks),
              "limit": config.evaluation.limit, "samples": config.evaluation.samples, "metrics": metrics}
    (run_dir / "heldout.json").write_text(json.dumps(record, indent=1))
    return record


# ---- resumable runs (the study) ---------------------------------------------------------------
RUN_SETTINGS = "run_settings.json"
"""Written into a run folder before training: the run_key the folder's contents belong to."""
BASE_SECTIONS = ("model", "data", "rollout", "verifier", "evaluation")
"""The config sections that decide the base model's held-out numbers (no training happens)."""


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


def run_key(config: Config, examples: list | None = None, sections: tuple[str, ...] | None = None) -> str:
    """A hash of everything that decides a run's numbers: the config settings that differ from the defaults (all
    sections, or `sections`), without the output folders and the resume/checkpoint switches, plus the ids of the
    training questions (a filter file rewritten with other kept ids changes it). A setting added later at its
    default keeps the keys of finished runs. Code changes, defaults included, are not in it: after one, delete
    the runs to redo them."""
    from .probing import settings_key

    settings = config.to_dict()
    for section, key in (("train", "output_dir"), ("train", "resume"), ("train", "save_every"),
                         ("train", "tensorboard"), ("evaluation", "output_dir")):
        settings[section].pop(key, None)
    if sections is not None:
        settings = {name: settings[name] for name in sections}
    settings = changed_settings(settings, Config().to_dict())
    if examples is not None:
        settings["train_ids"] = [e.id for e in examples]
    return settings_key(settings)


def finished_record(run_dir: str | Path, key: str) -> dict | None:
    """The run's heldout.json record when it exists and was made with settings `key`, else None."""
    path = Path(run_dir) / "heldout.json"
    try:
        record = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if record.get("settings_key") == key else None


def prepare_run_dir(run_dir: str | Path, key: str) -> str:
    """Make a run folder ready to (re)train: 'resume' when it holds a checkpoint of a run with settings `key`;
    otherwise 'new', after removing what a run with other settings (or an unknown one) left there, and the logs
    of an attempt cut off before its first checkpoint (they would be appended to). Writes RUN_SETTINGS."""
    from .checkpoint import latest_checkpoint

    run_dir = Path(run_dir)
    marker = run_dir / RUN_SETTINGS
    stored = json.loads(marker.read_text()).get("settings_key") if marker.exists() else None
    if run_dir.exists() and stored != key:
        if any(run_dir.iterdir()):
            print(f"[fspo_lite] {run_dir} holds a run made with other settings; starting it over")
        shutil.rmtree(run_dir)
    state = "resume" if latest_checkpoint(run_dir) is not None else "new"
    if state == "new":
        for name in ("metrics.jsonl", "samples.jsonl", "heldout.json"):
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "eval", ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"settings_key": key}))
    return state


def evaluate_base(config: Config, runs_dir: str | Path, progress: bool = False) -> dict:
    """The base model's held-out record (`<runs_dir>/base/heldout.json`): read when made with the same settings
    (run_key over BASE_SECTIONS), else evaluated now (the model loaded without an adapter)."""
    import dataclasses

    from .models import load_policy

    key = run_key(config, sections=BASE_SECTIONS)
    run_dir = Path(runs_dir) / "base"
    record = finished_record(run_dir, key)
    if record is not None:
        print(f"[fspo_lite] base: finished earlier with the same settings ({run_dir / 'heldout.json'}); skipped")
        return record
    run_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(dataclasses.replace(config.model, lora=False))
    return evaluate_run(config, model, tokenizer, run_dir, progress=progress, method="base", seed=None,
                        train_verifier=None, settings_key=key)


def train_and_evaluate(shared: dict[str, Any], method: str, seed: int, runs_dir: str | Path, examples: list,
                       config_path: str | Path | None = None, progress: bool = True,
                       arms: dict[str, dict[str, Any]] | None = None) -> dict:
    """Train one (arm, seed) run on `examples` and evaluate its adapter, resumably: a run whose heldout.json has
    the current run_key is skipped, one cut off during training resumes from its last checkpoint (checkpoints
    every train.save_every steps), one made with other settings starts over. `method` is the arm's name (a
    reward.method, or a name defined in `arms`: `arm_overrides`). Returns the held-out record plus
    `status` (trained | resumed | skipped), `last_reward` and `minutes`."""
    from .trainer import Trainer

    config = run_config(shared, method, seed, runs_dir, config_path, arms)
    key = run_key(config, examples)
    run_dir = Path(config.train.output_dir)
    started = time.perf_counter()
    record = finished_record(run_dir, key)
    if record is not None:
        status = "skipped"
        print(f"[fspo_lite] {run_name(method, seed)}: finished earlier with the same settings; skipped")
    else:
        status = "resumed" if prepare_run_dir(run_dir, key) == "resume" else "trained"
        apply_overrides(config, {"train.resume": status == "resumed"})
        trainer = Trainer(config, train_examples=examples, progress=progress)
        trainer.train()
        record = evaluate_run(config, trainer.model, trainer.tokenizer, run_dir, method=method, seed=seed,
                              train_verifier=config.verifier.name, settings_key=key)
        del trainer
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {**record, "status": status, "last_reward": rows[-1]["reward_mean"] if rows else float("nan"),
            "minutes": round((time.perf_counter() - started) / 60, 2)}
