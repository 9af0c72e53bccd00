"""Figures of an evaluation table: headline metrics per benchmark, and the k-sample decomposition per benchmark."""

from __future__ import annotations

from fspo_lite.evaluation.metrics import DECOMPOSITION

HEADLINE = ("correct", "not_attempted", "f_score", "step_hallucination_rate", "mc1", "mc2", "truthful_ratio",
            "accuracy", "non_hallucination_rate", "pass@1")
"""The metrics `plot_headline` shows (all are shares in [0, 1])."""
DECOMPOSITION_COLOURS = ("#2a9d8f", "#8ab17d", "#e9c46a", "#adb5bd", "#e76f51")


def plot_headline(table, ax=None, title: str = ""):
    """Horizontal bars, one per (benchmark, headline metric) row of an EvalResult table."""
    import matplotlib.pyplot as plt

    rows = table[table.metric.isin(HEADLINE)].dropna(subset=["value"])
    ax = ax or plt.subplots(figsize=(7, 0.32 * len(rows) + 1))[1]
    labels = [f"{b}: {m}" for b, m in zip(rows.benchmark, rows.metric)]
    ax.barh(labels[::-1], rows.value.tolist()[::-1], color="#457b9d")
    for y, value in enumerate(rows.value.tolist()[::-1]):
        ax.text(value + 0.01, y, f"{value:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, 1.1)
    ax.set_xlabel("share (higher is better, except incorrect / not_attempted / step_hallucination_rate)")
    ax.set_title(title or "Headline metrics per benchmark")
    return ax


def plot_decomposition_by_benchmark(table, ax=None, title: str = ""):
    """One stacked bar per benchmark of one evaluation table: percent of questions in each decomposition class (seed
    004's table). The study's per-method view is fspo_lite.drivers.report.plot_decomposition_by_method."""
    import matplotlib.pyplot as plt

    rows = table[table.metric.str.startswith("decomp_")]
    benchmarks = list(dict.fromkeys(rows.benchmark))
    ax = ax or plt.subplots(figsize=(7, 0.5 * len(benchmarks) + 1.5))[1]
    left = [0.0] * len(benchmarks)
    for name, colour in zip(DECOMPOSITION, DECOMPOSITION_COLOURS):
        values = [float(rows[(rows.benchmark == b) & (rows.metric == f"decomp_{name}")].value.iloc[0])
                  for b in benchmarks]
        ax.barh(benchmarks, values, left=left, color=colour, label=name.replace("_", " "))
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("percent of questions")
    ax.legend(ncol=3, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    ax.set_title(title or "Outcomes of the k answers per question")
    return ax
