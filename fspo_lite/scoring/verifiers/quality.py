"""How good is a verifier? Pure metric functions over scores and gold labels.

Labels are booleans (True = supported). Scores are P(supported); a verifier that abstains
(None) is scored at the decision threshold, i.e. as undecided, and its abstentions are
reported separately by the benchmark.
"""

from __future__ import annotations

import math
from typing import Sequence


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        average = (start + end) / 2 + 1
        for k in range(start, end + 1):
            result[order[k]] = average
        start = end + 1
    return result


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(a random positive scores above a random negative), ties count 1/2.

    Computed from ranks (the Mann-Whitney U statistic). NaN when one class is empty.
    """
    positives = sum(1 for y in labels if y)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    rank = ranks(scores)
    positive_rank_sum = sum(r for r, y in zip(rank, labels) if y)
    return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def accuracy(predictions: Sequence[bool], labels: Sequence[bool]) -> float:
    if not labels:
        return math.nan
    return sum(p == y for p, y in zip(predictions, labels)) / len(labels)


def balanced_accuracy(predictions: Sequence[bool], labels: Sequence[bool]) -> float:
    """Mean of the recall on positives and the recall on negatives (NaN when a class is empty)."""
    positives = [p for p, y in zip(predictions, labels) if y]
    negatives = [p for p, y in zip(predictions, labels) if not y]
    if not positives or not negatives:
        return math.nan
    return (sum(positives) / len(positives) + sum(not p for p in negatives) / len(negatives)) / 2


def predict(scores: Sequence[float], threshold: float) -> list[bool]:
    """Supported iff score > threshold (the rule the trainer uses)."""
    return [s > threshold for s in scores]


def best_threshold(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The threshold with the highest balanced accuracy under `score > threshold`.

    Candidates are the midpoints between consecutive distinct scores plus one below the minimum;
    ties go to the lowest threshold. Choose it on training data, then apply it to test data.
    """
    distinct = sorted(set(scores))
    if not distinct:
        return 0.5
    candidates = [distinct[0] - 1e-9] + [(a + b) / 2 for a, b in zip(distinct, distinct[1:])]
    best, best_value = candidates[0], -1.0
    for threshold in candidates:
        value = balanced_accuracy(predict(scores, threshold), labels)
        if value > best_value + 1e-12:
            best, best_value = threshold, value
    return best


def cohen_kappa(a: Sequence, b: Sequence) -> float:
    """Agreement of two labelings beyond chance: (p_observed - p_chance) / (1 - p_chance)."""
    n = len(a)
    if n == 0:
        return math.nan
    observed = sum(x == y for x, y in zip(a, b)) / n
    categories = set(a) | set(b)
    chance = sum((sum(x == c for x in a) / n) * (sum(y == c for y in b) / n) for c in categories)
    return 1.0 if chance == 1.0 else (observed - chance) / (1 - chance)


def agreement_matrix(labelings: dict[str, Sequence], kappa: bool = False):
    """A DataFrame of pairwise agreement (share of equal labels, or Cohen's kappa) between labelings.

    Each labeling is a sequence over the same items; items where either side is None are skipped
    for that pair.
    """
    import pandas as pd

    names = list(labelings)
    table = pd.DataFrame(index=names, columns=names, dtype=float)
    for first in names:
        for second in names:
            pairs = [(x, y) for x, y in zip(labelings[first], labelings[second]) if x is not None and y is not None]
            if not pairs:
                table.loc[first, second] = math.nan
                continue
            xs, ys = zip(*pairs)
            table.loc[first, second] = cohen_kappa(xs, ys) if kappa else accuracy(xs, ys)
    return table


def fit_logistic_1d(scores: Sequence[float], labels: Sequence[bool], iterations: int = 50) -> tuple[float, float]:
    """(midpoint, slope) of P(y=1) = 1 / (1 + exp(-slope * (x - midpoint))) by Newton's method.

    Used once to calibrate the embedding verifier's similarity-to-probability map.
    """
    a, b = 0.0, 0.0  # logit = a + b * x
    for _ in range(iterations):
        g_a = g_b = h_aa = h_ab = h_bb = 0.0
        for x, y in zip(scores, labels):
            p = 1.0 / (1.0 + math.exp(-max(-700.0, min(700.0, a + b * x))))
            w = p * (1 - p) + 1e-12
            g_a += p - float(y)
            g_b += (p - float(y)) * x
            h_aa += w
            h_ab += w * x
            h_bb += w * x * x
        det = h_aa * h_bb - h_ab * h_ab
        if abs(det) < 1e-18:
            break
        step_a = (h_bb * g_a - h_ab * g_b) / det
        step_b = (h_aa * g_b - h_ab * g_a) / det
        a, b = a - step_a, b - step_b
        if abs(step_a) + abs(step_b) < 1e-10:
            break
    if b == 0:
        return math.nan, 0.0
    return -a / b, b
