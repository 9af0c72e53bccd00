"""The report's figures: training curves, accuracy against hallucination, the decomposition, the study's forest
plot and step hallucination per judge. They only draw what they are given, and a
figure with nothing to show (no point, empty axes, a curve of one step) is not drawn: its function returns None and
saves nothing, and a `*_not_drawn` check says why in one line (summary.md lists those figures).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from fspo_lite.drivers.figures import save_png
from fspo_lite.drivers.report.lite import CURVES
from fspo_lite.drivers.report.study import is_share, metric_scale
from fspo_lite.evaluation.metrics import DECOMPOSITION
from fspo_lite.scoring.advantage_mass import REGIONS


def pyplot():
    """matplotlib.pyplot, imported when the first figure is drawn."""
    import matplotlib.pyplot as plt  # Agg on a headless machine, inline in a notebook

    return plt


METHOD_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                 "#17becf", "#000000", "#000080", "#e6007e", "#ffd700", "#006d6f")
"""One colour per method, in the study's order: matplotlib's ten default colours, then five more, so that the
study's 13 models (base and 12 arms) never share one (the default cycle repeats after ten)."""


def method_color(method: str, order: Sequence[str] | None = None, k: int = 0) -> str:
    """A method's colour: by its place in `order` (the study's order, base first), so that it is the same in every
    figure whichever methods that figure draws; the k-th colour for a method not in `order`."""
    index = list(order).index(method) if order and method in order else k
    return METHOD_COLORS[index % len(METHOD_COLORS)]


def legend_outside(ax, handles_from=None, **options) -> None:
    """The legend right of `ax`, outside every panel, so that it hides no point, bar or title (the saved image is
    cropped to what is drawn, legend included)."""
    handles, labels = (handles_from or ax).get_legend_handles_labels()
    ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), **options)


def save_figure(fig, path: str | Path | None):
    """Lay the figure out and write it to `path` (`save_png`, cropped to what is drawn) when a path is given;
    return the figure."""
    titled = bool(fig.get_suptitle())  # tight_layout leaves a figure title no room of its own: keep 0.4 inch
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()) if titled else None)
    if path is not None:
        save_png(fig, path, tight_box=True)
    return fig


def method_order(table: pd.DataFrame, order: Sequence[str] | None) -> list[str]:
    """The methods to draw: those of `order` (default: the table's, as they appear) that the table holds."""
    return [m for m in (order or table["method"].unique()) if m in set(table["method"])]


def method_row(table: pd.DataFrame, metric: str, method: str) -> pd.Series | None:
    """The row of a (metric, method) long table, or None when there is none."""
    rows = table[(table["metric"] == metric) & (table["method"] == method)]
    return None if rows.empty else rows.iloc[0]


def grouped_bars(ax, groups: Sequence[str], methods: Sequence[str], bar, order: Sequence[str] | None = None) -> None:
    """One group of bars per entry of `groups` (its x tick label), one bar per method in its colour, named in the
    legend by the first group. `bar(method, group)` gives (height, error below, error above), or None for no bar."""
    width = 0.8 / max(len(methods), 1)
    for k, method in enumerate(methods):
        for j, group in enumerate(groups):
            value = bar(method, group)
            if value is None:
                continue
            height, below, above = value
            ax.bar(j + k * width, height, width, color=method_color(method, order, k),
                   label=method if j == 0 else None, yerr=[[below], [above]], capsize=3)
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(groups))])
    ax.set_xticklabels(groups)


# ---- a figure with nothing to show is not drawn: each check says why, in one line --------------------------
def curves_not_drawn(training: pd.DataFrame) -> str | None:
    """Why the training curves would show nothing (None: they show something): no run logged a step, or every
    run logged a single one (a curve of one point is a dot)."""
    if training.empty or "step" not in training:
        return "no run logged a training step"
    if training.groupby("method")["step"].nunique().max() < 2:
        return "every run logged a single training step, so there is no curve to draw"
    return None


def scatter_not_drawn(heldout: pd.DataFrame) -> str | None:
    """Why accuracy against step hallucination would have no point: no model has both numbers (a judge that
    checked no reasoning sentence gives no hallucination rate)."""
    both = heldout[["accuracy", "step_hallucination"]].dropna() if {"accuracy", "step_hallucination"} <= set(
        heldout) else pd.DataFrame()
    return None if len(both) else "no model has a step-hallucination rate: the judge checked no reasoning sentence"


def judges_not_drawn(methods_table: pd.DataFrame, judges: Sequence[str]) -> str | None:
    """Why the per-judge figures (step hallucination by judge, supported against unsupported) would show nothing:
    no judge, or no judge found a checkable reasoning sentence in any response."""
    if not judges or methods_table.empty:
        return "no held-out judge labelled any reasoning sentence"
    kinds = ("checkable", "supported", "unsupported")
    names = [f"{kind}_per_response@{judge}" for judge in judges for kind in kinds]
    counts = methods_table[methods_table["metric"].isin(names)]["mean"]
    if not (counts.fillna(0) > 0).any():
        return "no held-out judge found a checkable reasoning sentence in any response"
    return None


def mass_not_drawn(training: pd.DataFrame) -> str | None:
    """Why the advantage mass would be empty axes: the runs did not log it, or every advantage was zero (no group
    had a spread of rewards, so there was no gradient to share out)."""
    columns = [f"adv_abs_share/{region}" for region in REGIONS if f"adv_abs_share/{region}" in training]
    if not columns:
        return "the runs did not log where their advantage went"
    if not (training[columns].fillna(0) > 0).any().any():
        return "every advantage was zero: no group of responses had a spread of rewards"
    return None


def figures_not_drawn(heldout: pd.DataFrame, training: pd.DataFrame, prefix: str = "") -> dict[str, str]:
    """{<prefix>name.png: why} for notebook 04's own figures that would show nothing (summary.md lists them)."""
    reasons = {"training_curves": curves_not_drawn(training), "accuracy_vs_hallucination": scatter_not_drawn(heldout)}
    return {f"{prefix}{name}.png": why for name, why in reasons.items() if why}


def plot_training_curves(training: pd.DataFrame, path: str | Path | None = None, order: Sequence[str] | None = None):
    """Six panels (reward, accuracy, step factuality, flipped share, KL, length) per step: mean over seeds,
    shaded between the lowest and highest seed. None, nothing drawn, when there is no curve (`curves_not_drawn`)."""
    if curves_not_drawn(training):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    methods = method_order(training, order)
    from matplotlib.ticker import MaxNLocator

    for ax, (key, label) in zip(axes.flat, CURVES):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        for k, method in enumerate(methods):
            if key not in training:
                continue
            per_step = training[training["method"] == method].groupby("step")[key]
            mean, low, high = per_step.mean(), per_step.min(), per_step.max()
            if mean.isna().all():
                continue
            line, = ax.plot(mean.index, mean.values, label=method, marker="o" if len(mean) <= 20 else None,
                            markersize=4, color=method_color(method, order, k))  # markers: a short run still shows
            ax.fill_between(mean.index, low.values, high.values, color=line.get_color(), alpha=0.2)
        if not ax.get_lines():
            ax.text(0.5, 0.5, "no values logged", ha="center", va="center", transform=ax.transAxes, color="0.5")
        ax.set_title(label)
        ax.set_xlabel("step")
    legend_outside(axes.flat[2], handles_from=axes.flat[0])
    return save_figure(fig, path)


def plot_accuracy_vs_hallucination(heldout: pd.DataFrame, path: str | Path | None = None,
                                   order: Sequence[str] | None = None):
    """Held-out accuracy against step-level hallucination: each seed as a dot, the method mean as a marker
    with bars spanning the seeds. None, nothing drawn, when no model has both numbers (`scatter_not_drawn`)."""
    if scatter_not_drawn(heldout):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    methods = method_order(heldout, order)
    for k, method in enumerate(methods):
        rows = heldout[heldout["method"] == method]
        x, y = 100 * rows["step_hallucination"], 100 * rows["accuracy"]
        dots = ax.scatter(x, y, alpha=0.4, s=18, color=method_color(method, order, k))
        ax.errorbar(x.mean(), y.mean(), xerr=[[x.mean() - x.min()], [x.max() - x.mean()]],
                    yerr=[[y.mean() - y.min()], [y.max() - y.mean()]], fmt="*" if method == "base" else "o",
                    color=dots.get_facecolor()[0][:3], markersize=10, capsize=3, label=method)
    ax.set_xlabel("held-out step-level hallucination (% of judged sentences)")
    ax.set_ylabel("held-out answer accuracy (%)")
    legend_outside(ax)
    return save_figure(fig, path)


def plot_decomposition_by_method(table: pd.DataFrame, path: str | Path | None = None):
    """Stacked bars of the k-sample decomposition per method (mean over seeds; `summarize`'s table). One evaluation's
    view per benchmark is fspo_lite.evaluation.plots.plot_decomposition_by_benchmark."""
    plt = pyplot()
    colors = ("#2a9d3f", "#9fd39b", "#f2c14e", "#9e9e9e", "#d1495b")
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(table)
    for name, color in zip(DECOMPOSITION, colors):
        values = table[name].tolist()
        ax.bar(table.index, values, bottom=bottom, color=color, label=name.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("% of held-out questions")
    ax.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=8)
    return save_figure(fig, path)


METRIC_NAMES = {"accuracy": "accuracy", "not_attempted": "not attempted",
                "all_attempt_wrong": "questions with every answer wrong", "step_hallucination": "step hallucination",
                "supported_per_response": "supported sentences", "unsupported_per_response": "unsupported sentences",
                "checkable_per_response": "checkable sentences", "sentences_per_response": "reasoning sentences",
                "near_duplicates_per_response": "near-duplicate sentences", "response_tokens": "tokens",
                "judge_coverage": "judge coverage", "answer_f1": "answer F1", "format_rate": "well-formed"}
"""Plain names of the report's metrics for figure labels (per-response counts say so in the axis)."""


def metric_label(metric: str) -> str:
    """'step_hallucination@embedding (matched length)' -> 'step hallucination, embedding judge, matched length'."""
    base, _, extra = metric.partition(" (")
    name, _, judge = base.partition("@")
    text = METRIC_NAMES.get(name, name.replace("_", " "))
    return text + (f", {judge} judge" if judge else "") + (f", {extra.rstrip(')')}" if extra else "")


ALL_ZERO = "every difference and interval here is 0: the methods gave the same numbers"
"""The forest plot's note on a panel whose every difference is 0 (a smoke run: no reward spread, no update)."""


def plot_forest(differences: pd.DataFrame, metrics: Sequence[str], path: str | Path | None = None,
                title: str = "", order: Sequence[str] | None = None):
    """Forest plot: every (metric, method) paired difference to the baseline with its interval, shares in
    percentage points, counts per response in their unit (two panels when both kinds are present). One label per
    metric (`metric_label`), the methods told apart by colour (each keeps its colour of the other figures:
    `method_color` by its place in `order`), named in one legend right of the last panel. A difference that is not
    a number (no checkable sentence on either side, say) is left out, and a metric with none left loses its
    label. A panel whose every difference and interval is 0 says so in its title (`ALL_ZERO`)."""
    plt = pyplot()
    differences = differences[pd.to_numeric(differences["diff"], errors="coerce").notna()]
    if differences.empty:
        return None
    metrics = [m for m in metrics if m in set(differences["metric"])]
    groups = [g for g in ([m for m in metrics if is_share(m) or m in DECOMPOSITION],
                          [m for m in metrics if not (is_share(m) or m in DECOMPOSITION)]) if g]
    methods = list(differences["method"].unique())
    colors = {m: method_color(m, order, k) for k, m in enumerate(methods)}
    height = max(2.5, 0.3 * max(len(g) for g in groups) * len(methods) + 1.2)
    fig, axes = plt.subplots(1, len(groups), figsize=(7 * len(groups), height), squeeze=False)
    for ax, group, unit in zip(axes[0], groups, ("percentage points", "per response") if len(groups) == 2 else
                               (("percentage points",) if is_share(groups[0][0]) or groups[0][0] in DECOMPOSITION
                                else ("per response",))):
        ticks, labels, position = [], [], 0
        for i, metric in enumerate(group):
            first = position
            for k, method in enumerate(methods):
                row = method_row(differences, metric, method)
                if row is None:
                    continue
                scale = metric_scale(metric)
                ax.errorbar(row["diff"] * scale, -position, xerr=[[(row["diff"] - row["low"]) * scale],
                                                                  [(row["high"] - row["diff"]) * scale]],
                            fmt="o", color=colors[method], capsize=3, label=method if i == 0 else None)
                position += 1
            if position > first:
                ticks.append(-(first + position - 1) / 2)
                labels.append(metric_label(metric))
                if i:
                    ax.axhline(-first + 0.5, color="0.85", linewidth=0.8)
        ax.axvline(0, color="black", linewidth=0.6)
        shown = differences[differences["metric"].isin(group)][["diff", "low", "high"]]
        if not shown.to_numpy(dtype=float).any():  # dots on the zero line alone would read as an empty figure
            ax.set_title(ALL_ZERO, fontsize=9, color="0.35")
        ax.set_yticks(ticks)
        ax.set_yticklabels(labels, fontsize=9)
        ax.set_xlabel(f"difference to {differences['baseline'].iloc[0]} ({unit})")
    legend_outside(axes[0][-1], handles_from=axes[0][0])
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, path)


def plot_judges(methods_table: pd.DataFrame, judges: Sequence[str], path: str | Path | None = None,
                order: Sequence[str] | None = None):
    """Step hallucination per judge and method (mean over seeds with its interval), one group of bars per judge.
    None, nothing drawn, when no judge checked a sentence (`judges_not_drawn`)."""
    if judges_not_drawn(methods_table, judges):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(judges), 4))

    def bar(method, judge):
        r = method_row(methods_table, f"step_hallucination@{judge}", method)
        if r is None or math.isnan(r["mean"]):
            return None
        low, high = (0.0, 0.0) if math.isnan(r["low"]) else (r["mean"] - r["low"], r["high"] - r["mean"])
        return 100 * r["mean"], 100 * low, 100 * high

    grouped_bars(ax, judges, method_order(methods_table, order), bar, order)
    ax.set_ylabel("step hallucination (% of checkable sentences)")
    legend_outside(ax)
    return save_figure(fig, path)


def plot_supported_unsupported(methods_table: pd.DataFrame, judges: Sequence[str], path: str | Path | None = None,
                               order: Sequence[str] | None = None):
    """Supported against unsupported reasoning sentences per response, one panel per judge: each method's mean over
    seeds with its interval on both axes. Up and to the left is "more right"; down and to the left is "says less".
    None, nothing drawn, when no judge checked a sentence (`judges_not_drawn`)."""
    if judges_not_drawn(methods_table, judges):
        return None
    plt = pyplot()
    methods = method_order(methods_table, order)
    fig, axes = plt.subplots(1, max(len(judges), 1), figsize=(4.2 * max(len(judges), 1), 4), squeeze=False)
    for ax, judge in zip(axes[0], judges):
        for k, method in enumerate(methods):
            x, y = (method_row(methods_table, f"{kind}_per_response@{judge}", method)
                    for kind in ("unsupported", "supported"))
            if x is None or y is None:
                continue
            ax.errorbar(x["mean"], y["mean"], xerr=[[x["mean"] - x["low"]], [x["high"] - x["mean"]]],
                        yerr=[[y["mean"] - y["low"]], [y["high"] - y["mean"]]], fmt="o",
                        color=method_color(method, order, k), capsize=3, label=method)
        ax.set_title(f"judge: {judge}")
        ax.set_xlabel("unsupported sentences per response")
        ax.set_ylabel("supported sentences per response")
    legend_outside(axes[0][-1], handles_from=axes[0][0])
    return save_figure(fig, path)


def plot_advantage_mass(training: pd.DataFrame, path: str | Path | None = None, order: Sequence[str] | None = None):
    """Where the gradient goes, per method (mean over steps and seeds of the trainer's `adv_abs_share/<region>` and
    `adv_signed_share/<region>`): left, the share of sum |A| on each region (stacked to 1); right, the net push
    sum A / sum |A| on each region (bars: the lowest and highest seed). The regions are
    fspo_lite.scoring.advantage_mass.REGIONS, the names the trainer logs. None, nothing drawn, when there is no
    mass to share out (`mass_not_drawn`)."""
    if mass_not_drawn(training):
        return None
    plt = pyplot()
    methods = method_order(training, order) if f"adv_abs_share/{REGIONS[0]}" in training else []
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5))
    for k, method in enumerate(methods):
        runs = training[training["method"] == method]
        bottom = 0.0
        for r, region in enumerate(REGIONS):
            abs_share = runs.groupby("seed")[f"adv_abs_share/{region}"].mean()
            left.bar(k, abs_share.mean(), 0.6, bottom=bottom, color=f"C{r}", label=region if k == 0 else None)
            bottom += abs_share.mean()

    def net_push(method, region):
        signed = training[training["method"] == method].groupby("seed")[f"adv_signed_share/{region}"].mean()
        mean = signed.mean()
        return mean, mean - signed.min(), signed.max() - mean

    grouped_bars(right, REGIONS, methods, net_push, order)
    left.set_xticks(range(len(methods)))
    left.set_xticklabels(methods, rotation=30, ha="right")
    left.set_ylabel("share of sum |A| over tokens")
    legend_outside(left)
    right.axhline(0, color="black", linewidth=0.8)
    right.set_ylabel("sum A / sum |A| (net push up > 0)")
    legend_outside(right)
    return save_figure(fig, path)


def plot_paired_differences(differences: pd.DataFrame, matched: pd.DataFrame | None, judges: Sequence[str],
                            path: str | Path | None = None, level: float = 0.95, order: Sequence[str] | None = None):
    """The study's forest plot: accuracy, declines, step hallucination per judge (raw and at matched length), and
    for the main judge the sentence counts per response; every method against the baseline."""
    main = judges[0] if judges else None
    forest = ["accuracy", "not_attempted", "all_attempt_wrong", *[f"step_hallucination@{j}" for j in judges],
              *([f"supported_per_response@{main}", f"unsupported_per_response@{main}", "sentences_per_response",
                 "near_duplicates_per_response"] if main else [])]
    shown = differences
    if matched is not None and len(matched):  # the matched-length comparisons as rows of their own
        extra = matched.assign(metric=matched["judge"].map(lambda j: f"step_hallucination@{j} (matched length)"))
        columns = ["metric", "method", "baseline", "diff", "low", "high"]
        shown = pd.concat([shown, extra[columns]], ignore_index=True)
        forest[3 + len(judges):3 + len(judges)] = list(extra["metric"].unique())
    baseline = differences["baseline"].iloc[0]
    title = f"Each method minus {baseline} on the same held-out questions: mean over seeds with its {level:.0%} " \
            "bootstrap interval"
    return plot_forest(shown, forest, path, title=title, order=order)
