"""Hallucination measurement: benchmarks, metrics, judges and the harness (docs/evaluation.md).

    from fspo_lite.evaluation import evaluate
    result = evaluate(config)          # config.evaluation says which benchmarks; config.model which model
    result.table                       # tidy pandas table: benchmark, metric, value, n, by
"""

from fspo_lite.evaluation.benchmarks import BENCHMARKS, offline_available, resolve
from fspo_lite.evaluation.harness import EvalResult, evaluate, load_eval_model

__all__ = ["BENCHMARKS", "EvalResult", "evaluate", "load_eval_model", "offline_available", "resolve"]
