"""Notebook 03's runs: train every method x seed with the package's Trainer and score each trained adapter (and
the base model) with the evaluation harness (`evaluate_run` -> `fspo_lite.evaluation.evaluate`): held-out answer
accuracy and F1, the not-attempted rate, the k-sample outcome decomposition and the step-level hallucination
rate judged by a verifier other than the one used for training, plus TruthfulQA MC and HaluEval subsets.

The study profile (`configs/lite/study.yaml`) is long, so notebook 03 is resumable: each run's `heldout.json` carries
a key of every setting that decides its numbers (`run_key`); `train_and_evaluate` / `evaluate_base` skip a run whose
record has the current key, resume a half-trained run from its last checkpoint, and start over one made with other
settings. Notebook 03 evaluates on the bundled benchmark samples, so a profile's numbers do not depend on what a
machine's data folder holds (`fspo_lite.drivers.experiment.local_sources` picks the full copies a profile asks for).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from fspo_lite.atomic import atomic_write_json, atomic_write_text
from fspo_lite.config import Config, ConfigError, apply_overrides, load_config
from fspo_lite.data.training_set import load_training_examples
from fspo_lite.drivers.run_keys import changed_settings, key_defaults
from fspo_lite.logs.training_log import read_metrics


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


def check_runs(shared: dict[str, Any], methods: list[str], seeds: list[int], runs_dir: str | Path,
               config_path: str | Path | None = None, arms: dict[str, dict[str, Any]] | None = None) -> None:
    """Every (arm, seed) run's settings checked (`check_settings`) before the first one trains, so that a setting
    only one arm gets wrong (a klcf arm without its checklist file, a misspelt arm) stops the invocation at once,
    naming the run, instead of after the runs before it have trained. ConfigError."""
    from fspo_lite.scoring.plan import check_settings

    for method in methods:
        for seed in seeds:
            try:
                check_settings(run_config(shared, method, seed, runs_dir, config_path, arms))
            except ConfigError as error:
                raise ConfigError(f"run {run_name(method, seed)}: {error}") from None


QUESTION_ORDER_SEED = 0
"""The shuffle of every study run's training questions (`train_and_evaluate` with examples=None): one order for all
runs, so `--set 03.seeds=[2]` trains the run the whole study trains as seed 2. The run's train.seed then draws its
batches from them."""

INVOCATION_FILE = "last_invocation.json"
"""In a runs folder: what the last `train_and_evaluate_all` did to each run (trained, resumed or skipped) and its
minutes, so a report can tell a study made in one piece from one resumed across sessions."""


def write_invocation(runs_dir: str | Path, records: list[dict]) -> Path:
    """<runs_dir>/last_invocation.json: each record's run name with its status and minutes."""
    path = Path(runs_dir) / INVOCATION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = {run_name(r["method"], r["seed"]): {"status": r["status"], "minutes": r["minutes"]} for r in records}
    atomic_write_text(path, json.dumps({"runs": runs}, indent=1) + "\n")
    return path


def invocation_counts(runs_dir: str | Path) -> dict[str, int] | None:
    """{"trained": n, "resumed": n, "skipped": n} of the last invocation in `runs_dir`, None if none was written."""
    path = Path(runs_dir) / INVOCATION_FILE
    if not path.exists():
        return None
    statuses = [run["status"] for run in json.loads(path.read_text())["runs"].values()]
    return {status: statuses.count(status) for status in ("trained", "resumed", "skipped")}


def run_name(method: str, seed: int) -> str:
    return f"{method.replace('+', '_')}_s{seed}"


def evaluate_run(config: Config, model, tokenizer, run_dir: str | Path, progress: bool = False, **info) -> dict:
    """Score a model (a trained PEFT adapter in memory, or the base model) with the evaluation harness on
    config.evaluation's benchmarks, into `<run_dir>/eval/`; write `<run_dir>/heldout.json` with `info`
    (method, seed, ...), every benchmark metric as 'benchmark.metric', the judge's coverage on the
    short-QA benchmarks (share of reasoning sentences it could check) and the `machine`. Returns that record."""
    from fspo_lite.evaluation import evaluate

    run_dir = Path(run_dir)
    config = apply_overrides(load_config(None, config.to_dict()), {"evaluation.output_dir": str(run_dir / "eval")})
    result = evaluate(config, model=model, tokenizer=tokenizer, progress=progress)
    metrics = {f"{name}.{metric}": value for name, bench in result.summary["benchmarks"].items()
               for metric, value in bench["metrics"].items()}
    for name in {r["benchmark"] for r in result.records if "sentence_labels" in r}:
        labels = [label for r in result.records if r["benchmark"] == name for label in r["sentence_labels"]]
        metrics[f"{name}.judge_coverage"] = sum(1 for label in labels if label) / len(labels) if labels else float("nan")
    record = {**info, "judge": config.evaluation.step_verifier, "benchmarks": list(config.evaluation.benchmarks),
              "limit": config.evaluation.limit, "samples": config.evaluation.samples, "metrics": metrics,
              "machine": machine()}
    atomic_write_json(run_dir / "heldout.json", record, indent=1)
    return record


def machine() -> str:
    """The CPU (model, cores, torch's instruction set) a run was made on: float sums, hence sampled tokens, can
    differ between CPUs, so a study whose runs were made on several machines says which made which."""
    import torch

    from fspo_lite.machine import machine_description

    return f"{machine_description()}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"


# ---- resumable runs (the study) ---------------------------------------------------------------
RUN_SETTINGS = "run_settings.json"
"""Written into a run folder before training: the run_key the folder's contents belong to."""
BASE_SECTIONS = ("model", "data", "rollout", "verifier", "evaluation")
"""The config sections that decide the base model's held-out numbers (no training happens)."""




def source_identity(spec: str) -> str:
    """An evaluation source as the run key sees it: a local file by its name and the sha256 of its content, so a copy
    of the same file in another folder keys the same; bundled:, data: and hf: sources (and a missing file) as given."""
    path = Path(spec).expanduser()
    if spec.startswith(("bundled:", "data:", "hf:")) or not path.is_file():
        return spec
    stat = path.stat()
    return _file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """'<name> sha256:<16 hex digits>' of a file (size and mtime only make the cache forget a changed file)."""
    with open(path, "rb") as handle:
        return f"{Path(path).name} sha256:{hashlib.file_digest(handle, 'sha256').hexdigest()[:16]}"


def run_key(config: Config, examples: list | None = None, sections: tuple[str, ...] | None = None,
            by_content: bool = True) -> str:
    """A hash of everything that decides a run's numbers: the config settings that differ from the defaults (all
    sections, or `sections`), without the output folders and the resume/checkpoint switches, plus the ids of the
    training questions (a filter file rewritten with other kept ids changes it). Local evaluation files count by
    name and content (`source_identity`), not by path, unless by_content=False (the older form of keys, by path,
    which `finished_record` still accepts; docs/history.md, "The study"). A setting added later at its default keeps the keys of
    finished runs. Code changes, defaults included, are not in it: after one, delete the runs to redo them."""
    from fspo_lite.drivers.base_samples import settings_key

    settings = config.to_dict()
    for section, key in (("train", "output_dir"), ("train", "resume"), ("train", "save_every"),
                         ("train", "tensorboard"), ("evaluation", "output_dir")):
        settings[section].pop(key, None)
    if by_content:
        sources = settings["evaluation"]["sources"]
        settings["evaluation"]["sources"] = {name: source_identity(spec) for name, spec in sources.items()}
    if sections is not None:
        settings = {name: settings[name] for name in sections}
    settings = changed_settings(settings, key_defaults())
    if examples is not None:
        settings["train_ids"] = [e.id for e in examples]
    return settings_key(settings)


def finished_record(run_dir: str | Path, key: str, path_key: str | None = None) -> dict | None:
    """The run's heldout.json record when it exists and was made with settings `key`, else None. A record keyed the
    older way (`path_key`: run_key with by_content=False, evaluation files by path) is accepted and re-keyed to
    `key` in heldout.json and the run's settings marker, so finished runs survive the change of key."""
    path = Path(run_dir) / "heldout.json"
    try:
        record = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    stored = record.get("settings_key")
    if stored == key:
        return record
    if path_key is None or stored != path_key or path_key == key:
        return None
    record["settings_key"] = key
    atomic_write_json(path, record, indent=1)
    atomic_write_json(Path(run_dir) / RUN_SETTINGS, {"settings_key": key})
    print(f"[fspo_lite] {Path(run_dir).name}: settings key moved to the content-based form ({stored} -> {key})")
    return record


RUN_ENTRIES = frozenset({RUN_SETTINGS, "heldout.json", "eval", "metrics.jsonl", "samples.jsonl", "config.yaml",
                         "checkpoints", "tensorboard", "rollout_adapters", ".fspo-lite.lock"})
"""What fspo-lite writes into a run folder (the trainer, `evaluate_run`, the run lock); a hidden `.NAME.tmp-*` file
is a temporary file of its atomic writes. Anything else in a run folder was put there by someone else."""


class RunFolderError(RuntimeError):
    """A run folder holds files fspo-lite did not write, so it is refused rather than cleared."""


def foreign_entries(run_dir: str | Path) -> list[str]:
    """The names in `run_dir` that fspo-lite does not write (sorted; empty when the folder is missing)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [run_dir.name] if run_dir.exists() else []
    return sorted(p.name for p in run_dir.iterdir()
                  if p.name not in RUN_ENTRIES and not (p.name.startswith(".") and ".tmp-" in p.name))


def refuse_foreign(run_dir: str | Path, why: str) -> None:
    """RunFolderError, in one line naming the folder and its first foreign entries, when `run_dir` holds any."""
    foreign = foreign_entries(run_dir)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise RunFolderError(f"{run_dir} {why}, but it holds what fspo-lite did not write ({shown}), so it is left as "
                             "it is: move those out, or choose another runs_dir")


def prepare_run_dir(run_dir: str | Path, key: str) -> str:
    """Make a run folder ready to (re)train: 'resume' when it holds a checkpoint of a run with settings `key`;
    otherwise 'new', after removing what a run with other settings (or an unknown one) left there, and the logs
    of an attempt cut off before its first checkpoint (they would be appended to). Writes RUN_SETTINGS. Only
    folders that hold nothing but what fspo-lite writes (RUN_ENTRIES) are cleared; any other is refused
    (RunFolderError) and left untouched."""
    from fspo_lite.update.checkpoint import latest_checkpoint

    run_dir = Path(run_dir)
    marker = run_dir / RUN_SETTINGS
    stored = json.loads(marker.read_text()).get("settings_key") if marker.exists() else None
    if run_dir.exists() and stored != key:
        refuse_foreign(run_dir, "would be cleared for a new run (its run_settings.json is "
                       + ("missing)" if stored is None else "of other settings)"))
        if any(run_dir.iterdir()):
            print(f"[fspo_lite] {run_dir} holds a run made with other settings; starting it over")
        shutil.rmtree(run_dir)
    state = "resume" if latest_checkpoint(run_dir) is not None else "new"
    if state == "new":
        for name in ("metrics.jsonl", "samples.jsonl", "heldout.json"):
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "eval", ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(marker, {"settings_key": key})
    return state


def check_run_folders(runs_dir: str | Path, methods: list[str], seeds: list[int]) -> None:
    """RunFolderError, before any run starts, for a run folder without run_settings.json holding foreign files."""
    for method in methods:
        for seed in seeds:
            run_dir = Path(runs_dir) / run_name(method, seed)
            if run_dir.exists() and not (run_dir / RUN_SETTINGS).exists():
                refuse_foreign(run_dir, "is not an fspo-lite run (no run_settings.json)")


def evaluate_base(config: Config, runs_dir: str | Path, progress: bool = False) -> dict:
    """The base model's held-out record (`<runs_dir>/base/heldout.json`): read when made with the same settings
    (run_key over BASE_SECTIONS), else evaluated now (the model loaded without an adapter)."""
    import dataclasses

    from fspo_lite.models.policy import load_policy

    key = run_key(config, sections=BASE_SECTIONS)
    run_dir = Path(runs_dir) / "base"
    record = finished_record(run_dir, key, run_key(config, sections=BASE_SECTIONS, by_content=False))
    if record is not None:
        print(f"[fspo_lite] base: finished earlier with the same settings ({run_dir / 'heldout.json'}); skipped")
        return record
    run_dir.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_policy(dataclasses.replace(config.model, lora=False), for_training=False)
    return evaluate_run(config, model, tokenizer, run_dir, progress=progress, method="base", seed=None,
                        train_verifier=None, settings_key=key)


def train_and_evaluate(shared: dict[str, Any], method: str, seed: int, runs_dir: str | Path, examples: list | None,
                       config_path: str | Path | None = None, progress: bool = True,
                       arms: dict[str, dict[str, Any]] | None = None) -> dict:
    """Train one (arm, seed) run on `examples` and evaluate its adapter, resumably: a run whose heldout.json has
    the current run_key is skipped, one cut off during training resumes from its last checkpoint (checkpoints
    every train.save_every steps), one made with other settings starts over. `method` is the arm's name (a
    reward.method, or a name defined in `arms`: `arm_overrides`). examples=None: the run's own training questions
    (`load_training_examples` shuffled with QUESTION_ORDER_SEED), so an arm may set its own data keys. Returns the held-out record plus
    `status` (trained | resumed | skipped), `last_reward` and `minutes`."""
    from fspo_lite.update.trainer import Trainer

    config = run_config(shared, method, seed, runs_dir, config_path, arms)
    if examples is None:  # the arm's own training set (its data keys), in the order every run of a study shares
        examples = load_training_examples(config, order_seed=QUESTION_ORDER_SEED)
    key = run_key(config, examples)
    run_dir = Path(config.train.output_dir)
    started = time.perf_counter()
    record = finished_record(run_dir, key, run_key(config, examples, by_content=False))
    if record is not None:
        status = "skipped"
        if progress:  # a worker process stays quiet: its line would land amid the parent's rows (status says it)
            print(f"[fspo_lite] {run_name(method, seed)}: finished earlier with the same settings; skipped")
    else:
        status = "resumed" if prepare_run_dir(run_dir, key) == "resume" else "trained"
        apply_overrides(config, {"train.resume": status == "resumed"})
        with Trainer(config, train_examples=examples, progress=progress) as trainer:  # its engine ends before the next
            trainer.train()
            record = evaluate_run(config, trainer.model, trainer.tokenizer, run_dir, method=method, seed=seed,
                                  train_verifier=config.verifier.name, settings_key=key)
    rows = read_metrics(run_dir)
    return {**record, "status": status, "last_reward": rows[-1]["reward_mean"] if rows else float("nan"),
            "minutes": round((time.perf_counter() - started) / 60, 2)}


def _worker_threads(threads: int) -> None:
    """Process-pool initializer: each worker gets its share of the parent's CPU threads."""
    import torch

    torch.set_num_threads(threads)


def train_and_evaluate_all(shared: dict[str, Any], methods: list[str], seeds: list[int], runs_dir: str | Path,
                           examples: list | None, config_path: str | Path | None = None,
                           arms: dict[str, dict[str, Any]] | None = None, workers: int = 1,
                           on_finish=None) -> list[dict]:
    """`train_and_evaluate` for every (method, seed), in that order, with `workers` runs at a time.

    workers=1 runs them one after the other in this process. workers=N > 1 runs them in N worker processes
    (spawned), each with 1/N of this process's torch threads: on a CPU, a 135M model's batched decoding keeps
    two threads only partly busy (docs/performance.md, "Runs side by side"), so two one-thread runs side by side finish
    sooner than two two-thread runs in a row. Each run seeds itself (trainer and evaluation), so where it runs
    does not change its numbers. `on_finish(record)` is called in this process as each run ends (in finishing
    order); the list returned is in (method, seed) order, and each run's status and minutes are written to
    <runs_dir>/last_invocation.json (`write_invocation`). A run that fails raises here, naming the run; the runs
    finished before it are kept on disk and skipped on the rerun.
    """
    jobs = [(method, seed) for method in methods for seed in seeds]
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    check_runs(shared, methods, seeds, runs_dir, config_path, arms)
    check_run_folders(runs_dir, methods, seeds)
    if workers == 1 or len(jobs) == 1:
        records: dict[tuple[str, int], dict] = {}
        for method, seed in jobs:
            records[method, seed] = train_and_evaluate(shared, method, seed, runs_dir, examples, config_path,
                                                       arms=arms)
            if on_finish is not None:
                on_finish(records[method, seed])
    else:
        records = _in_workers(shared, jobs, runs_dir, examples, config_path, arms, workers, on_finish)
    ordered = [records[job] for job in jobs]
    write_invocation(runs_dir, ordered)
    return ordered


def _in_workers(shared: dict[str, Any], jobs: list[tuple[str, int]], runs_dir: str | Path, examples: list | None,
                config_path: str | Path | None, arms: dict[str, dict[str, Any]] | None, workers: int,
                on_finish) -> dict[tuple[str, int], dict]:
    """`train_and_evaluate` for every job in `workers` spawned processes, 1/workers of the torch threads each;
    returns the records by job, calling `on_finish` as each run ends."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    import torch

    records: dict[tuple[str, int], dict] = {}
    threads = max(1, torch.get_num_threads() // workers)
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_threads, initargs=(threads,)) as pool:
        pending = {pool.submit(train_and_evaluate, shared, method, seed, runs_dir, examples, config_path, False,
                               arms): (method, seed) for method, seed in jobs}
        print(f"[fspo_lite] {len(jobs)} runs, {min(workers, len(jobs))} at a time "
              f"({threads} torch thread{'s' if threads > 1 else ''} each)")
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                method, seed = pending.pop(future)
                try:
                    records[method, seed] = future.result()
                except Exception as error:
                    for other in pending:
                        other.cancel()
                    raise RuntimeError(f"run {run_name(method, seed)} failed: {error}") from error
                if on_finish is not None:
                    on_finish(records[method, seed])
    return records
