"""The lite reproduction: the notebook sequence under papermill, and the training/evaluation calls of notebook 03.

A profile (`configs/lite/lite.yaml`, `quick.yaml`, `colab_t4.yaml`) is plain data: where the outputs go and, per
notebook, the papermill parameters. `run_profile` executes the notebooks in order into
`<out>/results/notebooks/`, times each one and adds the timings to the summary that notebook 04 writes
(`<out>/results/summary.json` and `.md`). `python -m fspo_lite lite --profile lite|quick` calls it.

Notebook 03 trains every method x seed with the package's Trainer and scores each trained adapter (and the
base model) with the evaluation harness (`evaluate_run` -> `fspo_lite.evaluation.evaluate`): held-out answer
accuracy and F1, the not-attempted rate, the k-sample outcome decomposition and the step-level hallucination
rate judged by a verifier other than the one used for training, plus TruthfulQA MC and HaluEval subsets.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .config import Config, apply_overrides, load_config

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
    unknown = set(data) - {"description", "out", "notebooks"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}; valid: description, out, notebooks")
    notebooks = []
    for entry in data.get("notebooks") or []:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"{path}: each notebooks entry needs a name (and optional parameters), got {entry!r}")
        notebooks.append((entry["name"], dict(entry.get("parameters") or {})))
    return Profile(path.stem, str(data.get("out", ".")), notebooks, data.get("description", ""))


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
    return Profile(profile.name, profile.out, notebooks, profile.description)


def resolve_parameters(parameters: dict[str, Any], out: Path) -> dict[str, Any]:
    """Replace '{out}' in string values (also inside lists) by the absolute output root."""
    def fill(value):
        if isinstance(value, str):
            return value.replace("{out}", str(out))
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    return {key: fill(value) for key, value in parameters.items()}


def run_profile(profile: Profile, out: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Execute the profile's notebooks in order (cwd = repository root); returns the summary with timings.

    Executed copies go to `<out>/results/notebooks/`. A failing notebook stops the sequence with papermill's
    error, which names the cell; its partly executed copy is kept for reading.
    """
    import papermill

    out = (ROOT / (out if out is not None else profile.out)).resolve()
    executed_dir = out / "results" / "notebooks"
    executed_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    for name, parameters in profile.notebooks:
        source = ROOT / "notebooks" / name
        if not source.exists():
            raise FileNotFoundError(f"profile {profile.name}: {source} does not exist")
        begun = time.perf_counter()
        papermill.execute_notebook(str(source), str(executed_dir / name), parameters=resolve_parameters(parameters, out),
                                   cwd=str(ROOT), progress_bar=progress, kernel_name="python3")
        timings[name] = round(time.perf_counter() - begun, 1)
        print(f"[fspo_lite] {name}: {timings[name]:.0f} s")
    total = round(time.perf_counter() - started, 1)
    return record_timings(out / "results", profile.name, timings, total)


def record_timings(results_dir: Path, profile: str, timings: dict[str, float], total: float) -> dict[str, Any]:
    """Add the profile name and wall times to summary.json / summary.md (written by notebook 04)."""
    summary_path = results_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary["job"] = {"profile": profile, "notebook_seconds": timings, "total_seconds": total,
                      "command": f"python -m fspo_lite lite --profile {profile}"}
    summary_path.write_text(json.dumps(summary, indent=2))
    lines = [f"| {name} | {seconds:.0f} |" for name, seconds in timings.items()]
    markdown = results_dir / "summary.md"
    text = markdown.read_text() if markdown.exists() else ""
    text += (f"\n## Wall time (profile `{profile}`)\n\n| notebook | seconds |\n|---|---|\n" + "\n".join(lines)
             + f"\n| **total** | **{total:.0f}** ({total / 60:.1f} min) |\n")
    markdown.write_text(text)
    return summary


# ---- notebook 03: train and evaluate --------------------------------------------------------
def run_config(shared: dict[str, Any], method: str, seed: int, runs_dir: str | Path,
               config_path: str | Path | None = None) -> Config:
    """The Config of one (method, seed) run: a YAML config (or the defaults), the shared dotted settings, then
    method, seed and output folder."""
    config = load_config(config_path, dict(shared))
    return apply_overrides(config, {"reward.method": method, "train.seed": seed,
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
