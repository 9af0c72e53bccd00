"""The study's wall time from measured pieces: one model's held-out evaluation and a few training steps at the
study's settings (configs/lite/study.yaml), extrapolated to the whole study.

    python bench/study_time.py [--profile study] [--steps 2] [--fraction 0.25] [--data-dir DIR] [--filter FILE]
                               [--workers N] [--out FILE]

Pieces, each timed on the bundled SmolLM2-135M with the profile's notebook-03 settings (prompt, budget, held-out
benchmarks, judges):
- held-out evaluation of the base model on `--fraction` of every benchmark's items (seconds per benchmark, scaled
  to the full item counts: generation and scoring run in batches, so time grows with the item count); the step
  judge's model load (a repeated one, as in notebook 03's later models) is timed on its own and counted once
  per model;
- the second step judge (the profile's `evaluation.extra_step_verifiers`, e.g. likelihood), timed on the
  reasoning sentences of that evaluation, also scaled (its cost is per sentence);
- `--steps` training steps of one method (fspo, the one with the most per-step work), plus the time to load the
  policy; per-step time x the profile's steps is one run's training.

Estimate = base evaluation + methods x seeds x (training + evaluation) + notebooks 01, 02, 04 (their lite-job
times). With `--workers N` (notebook 03's `workers`: N runs at a time, each in its own process with 1/N of the
torch threads) the script starts N copies of itself at once, each with that thread share, so every piece is timed
as a worker runs it, next to the others; the estimate is then base evaluation (timed the same way: an upper
bound, since notebook 03 gives it all threads) + ceil(runs / N) x (training + evaluation) + notebooks 01, 02, 04. Both wall-clock and process CPU seconds are printed: on a machine shared with other jobs the wall times
are inflated, and CPU seconds / 2 (two cores kept busy) is the better guess for an idle machine.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)

LITE_OTHER_NOTEBOOKS_SECONDS = 63 + 15 + 6
"""Notebooks 01, 02 and 04 in the lite job (results/summary.md); the study runs 01 and 02 with the same settings."""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Clock:
    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), cpu_seconds()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), cpu_seconds()
        result = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return result


def notebook_defaults(name: str = "03_train_fspo.ipynb") -> dict:
    """The literal defaults of a notebook's parameters cell (what papermill overrides with a profile's values)."""
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}


def notebook03_parameters(profile) -> dict:
    """Notebook 03's parameters under a lite profile: the notebook's defaults, then the profile's values."""
    return {**notebook_defaults(), **dict(profile.notebooks)["03_train_fspo.ipynb"]}


def shared_settings(p: dict) -> dict:
    """The dotted settings notebook 03 builds from its parameters (the same dict, same keys)."""
    return {
        "model.name": p["model"], "data.train": p.get("train_data", "bundled:kbqa_train"),
        "data.filter_path": p["filter_path"], "rollout.group_size": p["group_size"],
        "rollout.max_new_tokens": p["max_new_tokens"], "rollout.temperature": p["temperature"],
        "train.steps": p["steps"], "train.prompts_per_step": p["prompts_per_step"],
        "train.learning_rate": p["learning_rate"], "train.beta": p["beta"],
        "train.micro_batch_size": p["prompts_per_step"] * p["group_size"], "verifier.name": p["train_verifier"],
        "evaluation.benchmarks": p["eval_benchmarks"], "evaluation.limit": p["eval_limit"],
        "evaluation.samples": p["eval_samples"], "evaluation.temperature": p["temperature"],
        "evaluation.max_new_tokens": p["max_new_tokens"], "evaluation.step_verifier": p["judge_verifier"],
        **(p.get("overrides") or {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="study")
    parser.add_argument("--steps", type=int, default=2, help="training steps to time (after one warm-up step)")
    parser.add_argument("--fraction", type=float, default=0.25, help="share of each benchmark's items to evaluate")
    parser.add_argument("--data-dir", help="the data folder the profile's local_data benchmarks read "
                        "(default: $FSPO_LITE_DATA, else ~/.cache/fspo-lite/data)")
    parser.add_argument("--filter", help="difficulty-filter file of the training questions (default: the profile's)")
    parser.add_argument("--workers", type=int, default=1, help="time the pieces as N concurrent workers run them")
    parser.add_argument("--threads", type=int, help="torch threads of this process (set by --workers)")
    parser.add_argument("--out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.workers > 1:
        return run_workers(args)

    import dataclasses

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from fspo_lite.config import apply_overrides
    from fspo_lite.evaluation import evaluate
    from fspo_lite.evaluation.benchmarks import load_items, resolve
    from fspo_lite.drivers.experiment import load_profile, local_sources
    from fspo_lite.drivers.runs import run_config
    from fspo_lite.models.policy import load_policy
    from fspo_lite.text import reasoning_sentences
    from fspo_lite.update.trainer import Trainer
    from fspo_lite.data.training_set import load_training_examples
    from fspo_lite.scoring.verifiers import build_verifier
    from fspo_lite.machine import machine_description

    profile = load_profile(args.profile)
    params = notebook03_parameters(profile)
    sources, used = local_sources(profile.local_data, args.data_dir)
    shared = shared_settings(params)
    shared.update({f"evaluation.sources.{name}": path for name, path in sources.items()})
    if args.filter:
        shared["data.filter_path"] = args.filter
    extra = list(shared.pop("evaluation.extra_step_verifiers", []) or [])  # timed here, whatever the harness does
    scratch = tempfile.mkdtemp(prefix="study_time_runs_")  # one per process: --workers copies run side by side
    config = run_config(shared, "fspo", 0, scratch)
    ev = config.evaluation
    print(f"machine: {machine_description()}; torch threads {torch.get_num_threads()}; load average "
          f"{os.getloadavg()[0]:.1f} at start")
    print(f"profile {profile.name}: " + "; ".join(f"{k}: {v}" for k, v in used.items()))

    # held-out evaluation of the base model on a fraction of each benchmark
    full_counts = {name: len(load_items(name, resolve(name, {"kbqa": config.data.eval, **ev.sources}), ev.limit,
                                        ev.seed, ev.shuffle)) for name in ev.benchmarks}
    clock = Clock()
    model, tokenizer = load_policy(dataclasses.replace(config.model, lora=False))
    load_wall, load_cpu = clock.lap()
    pieces = {"load_model": {"wall": load_wall, "cpu": load_cpu}}
    # the step judge's model is loaded once per evaluated model (notebook 03: from the OS file cache after the
    # first): a second load is timed on its own and counted once per model, not scaled with the items
    build_verifier(dataclasses.replace(config.verifier, name=ev.step_verifier))
    clock.lap()
    build_verifier(dataclasses.replace(config.verifier, name=ev.step_verifier))
    judge_wall, judge_cpu = clock.lap()
    pieces["load_step_judge"] = {"wall": judge_wall, "cpu": judge_cpu}
    print(f"loading the step judge ({ev.step_verifier}): {judge_wall:.0f} s wall / {judge_cpu:.0f} s CPU")
    eval_wall, eval_cpu = judge_wall, judge_cpu
    sentences, evidence, questions = [], [], []
    for name in ev.benchmarks:
        subset = max(1, round(full_counts[name] * args.fraction))
        bench_config = apply_overrides(run_config(shared, "fspo", 0, scratch), {
            "evaluation.benchmarks": [name], "evaluation.limit": subset,
            "evaluation.output_dir": f"{scratch}/eval_{name}"})
        clock.lap()
        with torch.no_grad():
            result = evaluate(bench_config, model=model, tokenizer=tokenizer, progress=False)
        wall, cpu = clock.lap()
        if name == "kbqa":  # the harness loaded the step judge here: counted once above
            wall, cpu = max(0.0, wall - judge_wall), max(0.0, cpu - judge_cpu)
        scale = full_counts[name] / subset
        pieces[f"eval_{name}"] = {"items": subset, "full_items": full_counts[name], "wall": wall, "cpu": cpu,
                                  "wall_full": wall * scale, "cpu_full": cpu * scale}
        eval_wall, eval_cpu = eval_wall + wall * scale, eval_cpu + cpu * scale
        print(f"eval {name}: {subset} of {full_counts[name]} items in {wall:.0f} s wall / {cpu:.0f} s CPU "
              f"-> {wall * scale:.0f} s / {cpu * scale:.0f} s for all")
        if name == "kbqa":
            items = {e.id: e for e in load_items(name, resolve(name, {"kbqa": config.data.eval}), subset, ev.seed,
                                                 ev.shuffle)}
            for record in result.records:
                for start, end in reasoning_sentences(record["output"]):
                    sentences.append(record["output"][start:end])
                    evidence.append(items[record["id"]].evidence)
                    questions.append(items[record["id"]].question)
            kbqa_scale = scale
    for judge in extra:
        verifier = build_verifier(dataclasses.replace(config.verifier, name=judge))
        clock.lap()
        verifier.score(evidence, sentences, questions)
        wall, cpu = clock.lap()
        pieces[f"judge_{judge}"] = {"sentences": len(sentences), "wall": wall, "cpu": cpu,
                                    "wall_full": wall * kbqa_scale, "cpu_full": cpu * kbqa_scale}
        eval_wall, eval_cpu = eval_wall + wall * kbqa_scale, eval_cpu + cpu * kbqa_scale
        print(f"judge {judge}: {len(sentences)} sentences in {wall:.0f} s wall / {cpu:.0f} s CPU "
              f"-> {wall * kbqa_scale:.0f} s / {cpu * kbqa_scale:.0f} s for all")
        del verifier
    del model

    # training steps at the study budget
    questions_kept = load_training_examples(config)
    clock.lap()
    trainer = Trainer(config, train_examples=questions_kept, progress=False)
    setup_wall, setup_cpu = clock.lap()
    trainer.train_step()  # warm-up
    clock.lap()
    for _ in range(args.steps):
        trainer.train_step()
    wall, cpu = clock.lap()
    step_wall, step_cpu = wall / args.steps, cpu / args.steps
    train_wall = setup_wall + step_wall * config.train.steps
    train_cpu = setup_cpu + step_cpu * config.train.steps
    pieces["train"] = {"setup_wall": setup_wall, "setup_cpu": setup_cpu, "step_wall": step_wall, "step_cpu": step_cpu,
                       "steps": config.train.steps, "responses_per_step": config.train.prompts_per_step
                       * config.rollout.group_size, "training_questions": len(questions_kept)}
    print(f"training: {len(questions_kept)} questions, setup {setup_wall:.0f} s, {step_wall:.1f} s wall / "
          f"{step_cpu:.1f} s CPU per step x {config.train.steps} steps")

    runs = len(params["methods"]) * len(params["seeds"])
    total_wall = eval_wall + runs * (train_wall + eval_wall) + LITE_OTHER_NOTEBOOKS_SECONDS
    total_cpu = eval_cpu + runs * (train_cpu + eval_cpu) + 2 * LITE_OTHER_NOTEBOOKS_SECONDS
    print(f"one model's held-out evaluation: {eval_wall:.0f} s wall / {eval_cpu:.0f} s CPU; one run's training: "
          f"{train_wall:.0f} s wall / {train_cpu:.0f} s CPU")
    print(f"study ({runs} runs + the base model): {total_wall / 3600:.2f} h wall as measured here; "
          f"{total_cpu / 2 / 3600:.2f} h at 2 busy cores (CPU seconds / 2); load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    if args.out:
        Path(args.out).write_text(json.dumps({"profile": profile.name, "machine": machine_description(),
                                              "benchmark_data": used, "pieces": pieces, "runs": runs,
                                              "threads": torch.get_num_threads(), "eval_wall": eval_wall,
                                              "train_wall": train_wall,
                                              "estimate_hours_wall": total_wall / 3600,
                                              "estimate_hours_cpu_over_2": total_cpu / 7200}, indent=1))
    return 0


def run_workers(args) -> int:
    """--workers N: N copies of this script at once, each with its thread share; their figures combined."""
    import math
    import subprocess

    import torch

    threads = max(1, torch.get_num_threads() // args.workers)
    forwarded = [f"--profile={args.profile}", f"--steps={args.steps}", f"--fraction={args.fraction}",
                 f"--threads={threads}"] + [f"--{name}={getattr(args, name.replace('-', '_'))}"
                                           for name in ("data-dir", "filter") if getattr(args, name.replace("-", "_"))]
    folder = Path(tempfile.mkdtemp(prefix="study_time_"))
    children = []
    for index in range(args.workers):
        log = open(folder / f"worker{index}.log", "w")
        children.append((subprocess.Popen([sys.executable, __file__, *forwarded, f"--out={folder}/worker{index}.json"],
                                          stdout=log, stderr=subprocess.STDOUT), log))
    print(f"{args.workers} workers x {threads} torch threads, started together; their output: {folder}/worker*.log")
    if any(child.wait() for child, _ in children):
        print(f"a worker failed: see {folder}/worker*.log")
        return 1
    figures = [json.loads((folder / f"worker{index}.json").read_text()) for index in range(args.workers)]
    for index, f in enumerate(figures):
        print(f"worker {index}: one model's held-out evaluation {f['eval_wall']:.0f} s wall, one run's training "
              f"{f['train_wall']:.0f} s wall")
    eval_wall = sum(f["eval_wall"] for f in figures) / len(figures)
    train_wall = sum(f["train_wall"] for f in figures) / len(figures)
    runs = figures[0]["runs"]
    rounds = math.ceil(runs / args.workers)
    total = eval_wall + rounds * (train_wall + eval_wall) + LITE_OTHER_NOTEBOOKS_SECONDS
    print(f"study ({runs} runs, {args.workers} at a time: {rounds} rounds, + the base model): {total / 3600:.2f} h "
          f"wall as measured here (mean over workers: evaluation {eval_wall:.0f} s, training {train_wall:.0f} s)")
    if args.out:
        Path(args.out).write_text(json.dumps({"workers": args.workers, "threads": threads, "per_worker": figures,
                                              "estimate_hours_wall": total / 3600}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
