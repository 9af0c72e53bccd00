"""The `verifiers benchmark` command: load the test sets, build each verifier, print the table."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from fspo_lite.data.examples import DataError
from fspo_lite.machine import machine_description
from fspo_lite.models.policy import ModelLoadError
from fspo_lite.scoring.verifiers.benchmark import (GOLD_SET, ShortClaimBaseline, halueval_file, load_gold,
                                                   load_halueval, results_json, results_table, run_benchmark)


def benchmark_command(config, names: list[str], limit: int | None, train_limit: int, gold: str | None,
                      json_path: str | None) -> int:
    from fspo_lite.scoring.verifiers import build_verifier

    datasets, train_items = {}, None
    test_file = halueval_file("test")
    if test_file is not None:
        datasets[f"HaluEval-QA {test_file.stem}"] = load_halueval(test_file, limit)
    train_file = halueval_file("train")
    if train_file is not None and train_limit:
        train_items = load_halueval(train_file, train_limit)
    gold_path = Path(gold) if gold else GOLD_SET
    if gold_path.exists():
        gold_items, not_checkable = load_gold(gold_path)
        datasets[f"gold ({not_checkable} not checkable left out)"] = gold_items
    if not datasets:
        raise DataError("no test data: neither halueval_qa_test.jsonl in the data folder (python -m fspo_lite data "
                        "prepare halueval_qa_test), the bundled sample, nor a gold set")
    verifiers = {}
    for name in names:
        started = time.perf_counter()
        try:
            verifiers[name] = build_verifier(dataclasses.replace(config.verifier, name=name.strip()))
        except (ModelLoadError, ImportError, ValueError, RuntimeError) as error:
            print(f"[benchmark] {name}: not available ({error})")
            continue
        print(f"[benchmark] {name}: loaded in {time.perf_counter() - started:.1f} s")
    verifiers[ShortClaimBaseline.name] = ShortClaimBaseline()
    results = run_benchmark(verifiers, datasets, train_items, config.verifier.threshold)
    print(f"\nmachine: {machine_description()}; threshold {config.verifier.threshold}; "
          f"best threshold chosen on {len(train_items) if train_items else 0} HaluEval train rows")
    print(results_table(results, config.verifier.threshold))
    if json_path:
        Path(json_path).write_text(results_json(results))
    return 0


def calibrate_command(config, names: list[str], train_limit: int) -> int:
    """Fit and print the logistic map (midpoint, slope) of each verifier with a raw score."""
    from fspo_lite.scoring.verifiers import build_verifier
    from fspo_lite.scoring.verifiers.benchmark import calibrate

    train_file = halueval_file("train")
    if train_file is None:
        raise DataError("calibration needs halueval_qa_train.jsonl in the data folder: python -m fspo_lite data "
                        "prepare halueval_qa_train")
    items = load_halueval(train_file, train_limit)
    for name in names:
        verifier = build_verifier(dataclasses.replace(config.verifier, name=name.strip()))
        if not hasattr(verifier, "raw_scores"):
            print(f"{name}: no raw score to calibrate")
            continue
        midpoint, slope = calibrate(verifier, items)
        print(f"{name}: midpoint={midpoint:.4f} slope={slope:.4f} (fitted on {len(items)} HaluEval train rows)")
    return 0
