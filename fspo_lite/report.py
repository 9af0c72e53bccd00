"""Results of the lite reproduction (notebook 04): read the runs, aggregate over seeds, check the goal, plot.

The aggregation functions are pure (tested on hand-made inputs in tests/test_report.py); the plot functions
only draw what they are given. A run folder holds the trainer's metrics.jsonl / samples.jsonl and the
held-out result heldout.json written by notebook 03 (`fspo_lite.experiment.evaluate_run`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from .evaluation.metrics import DECOMPOSITION
from .metrics import read_metrics

QA_METRICS = {"accuracy": "correct", "answer_f1": "f1", "not_attempted": "not_attempted", "format_rate": "format_rate",
              "step_hallucination": "step_hallucination_rate", "judge_coverage": "judge_coverage",
              **{name: f"decomp_{name}" for name in DECOMPOSITION}}
"""Table column -> metric of the held-out short-QA benchmark (fspo_lite.evaluation's names)."""
OTHER_METRICS = {"truthfulqa_mc1": "truthfulqa_mc.mc1", "truthfulqa_mc2": "truthfulqa_mc.mc2",
                 "halueval_accuracy": "halueval.accuracy"}
HELDOUT_METRICS = ("accuracy", "answer_f1", "not_attempted", "format_rate", "step_hallucination", "judge_coverage",
                   *OTHER_METRICS)
CURVES = (("reward_mean", "reward"), ("accuracy", "train accuracy"), ("step_factuality", "step factuality (train verifier)"),
          ("flipped_token_share", "share of tokens flipped"), ("kl", "KL to the base model"),
          ("completion_length", "response length (tokens)"))
TRAINING_DIAGNOSTICS = ("flipped_token_share", "reward_std", "frac_reward_zero_std", "verified_sentences",
                        "format_rate", "step_time")


# ---- reading runs ----------------------------------------------------------------------------
def load_heldout(runs_dir: str | Path, qa: str = "kbqa") -> pd.DataFrame:
    """One row per evaluated model (base and every method x seed) from its heldout.json
    (`fspo_lite.experiment.evaluate_run`): the short-QA benchmark `qa`'s metrics and decomposition, and the
    TruthfulQA MC / HaluEval numbers when they were run."""
    rows = []
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        record = json.loads(path.read_text())
        metrics = record["metrics"]
        names = {**{column: f"{qa}.{metric}" for column, metric in QA_METRICS.items()}, **OTHER_METRICS}
        rows.append({"run": path.parent.name, "method": record["method"], "seed": record.get("seed"),
                     **{column: metrics[key] for column, key in names.items() if key in metrics}})
    if not rows:
        raise FileNotFoundError(f"no */heldout.json under {runs_dir}: run notebook 03 first")
    return pd.DataFrame(rows)


def load_training(runs_dir: str | Path) -> pd.DataFrame:
    """Every training step of every run: the trainer's metrics rows with method and seed (from heldout.json)."""
    frames = []
    for path in sorted(Path(runs_dir).glob("*/metrics.jsonl")):
        info = json.loads((path.parent / "heldout.json").read_text()) if (path.parent / "heldout.json").exists() else {}
        frame = pd.DataFrame(read_metrics(path))
        frame["run"], frame["method"], frame["seed"] = path.parent.name, info.get("method"), info.get("seed")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ---- aggregation -------------------------------------------------------------------------------
def summarize(heldout: pd.DataFrame, order: Sequence[str] | None = None) -> pd.DataFrame:
    """Per method: seeds, and for every metric the mean over seeds and the spread (max - min)."""
    columns = [c for c in (*HELDOUT_METRICS, *DECOMPOSITION) if c in heldout]
    grouped = heldout.groupby("method", sort=False)
    table = grouped[columns].mean()
    spread = (grouped[columns].max() - grouped[columns].min()).add_suffix("_spread")
    table = pd.concat([grouped.size().rename("seeds"), table, spread], axis=1)
    if order:
        table = table.reindex([m for m in order if m in table.index] + [m for m in table.index if m not in order])
    return table


def goal_check(table: pd.DataFrame, method: str = "fspo", baseline: str = "grpo", relative_drop: float = 0.20,
               accuracy_points: float = 2.0) -> dict:
    """The issue's goal: `method` lowers held-out step hallucination by at least `relative_drop` relative to
    `baseline`, with answer accuracy within `accuracy_points` percentage points."""
    h_base, h_method = table.loc[baseline, "step_hallucination"], table.loc[method, "step_hallucination"]
    drop = (h_base - h_method) / h_base if h_base else math.nan
    accuracy_delta = 100.0 * (table.loc[method, "accuracy"] - table.loc[baseline, "accuracy"])
    return {"method": method, "baseline": baseline, "hallucination_baseline": h_base, "hallucination_method": h_method,
            "relative_drop": drop, "accuracy_delta_points": accuracy_delta,
            "met": bool(drop >= relative_drop and abs(accuracy_delta) <= accuracy_points),
            "target": f">= {relative_drop:.0%} lower step hallucination, accuracy within {accuracy_points:g} points"}


def training_diagnostics(training: pd.DataFrame, order: Sequence[str] | None = None) -> pd.DataFrame:
    """Per method, averaged over all steps and seeds: the numbers that explain what the update could do
    (share of tokens FSPO flipped, reward spread within a batch, share of groups with no reward spread,
    sentences the training verifier judged, well-formed share, seconds per step)."""
    columns = [c for c in TRAINING_DIAGNOSTICS if c in training]
    table = training.groupby("method", sort=False)[columns].mean()
    return table.reindex([m for m in order if m in table.index]) if order else table


def summary_markdown(table: pd.DataFrame, goal: dict | None, diagnostics: pd.DataFrame | None = None,
                     settings: dict | None = None) -> str:
    """The results table (mean over seeds +- half the spread), the goal line and the training diagnostics."""
    def cell(method, metric, percent=True):
        value = table.loc[method, metric]
        spread = table.loc[method, f"{metric}_spread"] if f"{metric}_spread" in table else math.nan
        scale = 100.0 if percent else 1.0
        text = f"{value * scale:.1f}"
        return text + (f" ± {spread * scale / 2:.1f}" if table.loc[method, "seeds"] > 1 else "")

    lines = ["# Lite reproduction: held-out results", ""]
    if settings:
        lines += ["Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()), ""]
    headers = {"accuracy": "accuracy %", "answer_f1": "answer F1 %", "not_attempted": "not attempted %",
               "step_hallucination": "step hallucination %", "judge_coverage": "judge coverage %",
               "format_rate": "well-formed %", "truthfulqa_mc1": "TruthfulQA MC1 %", "truthfulqa_mc2": "TruthfulQA MC2 %",
               "halueval_accuracy": "HaluEval acc. %"}
    shown = [c for c in headers if c in table]
    lines += ["| method | seeds | " + " | ".join(headers[c] for c in shown) + " |", "|---|---|" + "---|" * len(shown)]
    for method in table.index:
        lines.append(f"| {method} | {int(table.loc[method, 'seeds'])} | " + " | ".join(cell(method, c) for c in shown)
                     + " |")
    lines += ["", "± is half the range over seeds. Decomposition of each question's k answers (% of questions):", "",
              "| method | " + " | ".join(DECOMPOSITION) + " |", "|---|" + "---|" * len(DECOMPOSITION)]
    for method in table.index:
        lines.append(f"| {method} | " + " | ".join(f"{table.loc[method, c]:.1f}" for c in DECOMPOSITION) + " |")
    if goal:
        lines += ["", f"Goal ({goal['target']}): {goal['method']} vs {goal['baseline']}: step hallucination "
                  f"{goal['hallucination_method']:.1%} vs {goal['hallucination_baseline']:.1%} "
                  f"(relative drop {goal['relative_drop']:.1%}), accuracy {goal['accuracy_delta_points']:+.1f} points: "
                  f"**{'met' if goal['met'] else 'not met'}**."]
    if diagnostics is not None and len(diagnostics):
        lines += ["", "Training diagnostics (mean over steps and seeds):", "",
                  "| method | " + " | ".join(diagnostics.columns) + " |", "|---|" + "---|" * len(diagnostics.columns)]
        for method, row in diagnostics.iterrows():
            lines.append(f"| {method} | " + " | ".join(f"{v:.3g}" for v in row) + " |")
    return "\n".join(lines) + "\n"


def flip_example(samples: Sequence[dict]) -> dict | None:
    """The logged response with the most tokens whose advantage sign FSPO flipped (None when none was)."""
    def flipped(record):
        return sum(1 for a in record["token_advantages"] if a * record["advantage"] < 0)

    best = max(samples, key=flipped, default=None)
    return best if best is not None and flipped(best) > 0 else None


# ---- plots -------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib.pyplot as plt  # Agg on a headless machine, inline in a notebook

    return plt


def _save(fig, path: str | Path | None):
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def plot_training_curves(training: pd.DataFrame, path: str | Path | None = None, order: Sequence[str] | None = None):
    """Six panels (reward, accuracy, step factuality, flipped share, KL, length) per step: mean over seeds,
    shaded between the lowest and highest seed."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    methods = [m for m in (order or training["method"].unique()) if m in set(training["method"])]
    for ax, (key, label) in zip(axes.flat, CURVES):
        for method in methods:
            if key not in training:
                continue
            per_step = training[training["method"] == method].groupby("step")[key]
            mean, low, high = per_step.mean(), per_step.min(), per_step.max()
            if mean.isna().all():
                continue
            line, = ax.plot(mean.index, mean.values, label=method)
            ax.fill_between(mean.index, low.values, high.values, color=line.get_color(), alpha=0.2)
        ax.set_title(label)
        ax.set_xlabel("step")
    axes.flat[0].legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_accuracy_vs_hallucination(heldout: pd.DataFrame, path: str | Path | None = None,
                                   order: Sequence[str] | None = None):
    """Held-out accuracy against step-level hallucination: each seed as a dot, the method mean as a marker
    with bars spanning the seeds."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    methods = [m for m in (order or heldout["method"].unique()) if m in set(heldout["method"])]
    for method in methods:
        rows = heldout[heldout["method"] == method]
        x, y = 100 * rows["step_hallucination"], 100 * rows["accuracy"]
        dots = ax.scatter(x, y, alpha=0.4, s=18)
        ax.errorbar(x.mean(), y.mean(), xerr=[[x.mean() - x.min()], [x.max() - x.mean()]],
                    yerr=[[y.mean() - y.min()], [y.max() - y.mean()]], fmt="*" if method == "base" else "o",
                    color=dots.get_facecolor()[0][:3], markersize=10, capsize=3, label=method)
    ax.set_xlabel("held-out step-level hallucination (% of judged sentences)")
    ax.set_ylabel("held-out answer accuracy (%)")
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_decomposition(table: pd.DataFrame, path: str | Path | None = None):
    """Stacked bars of the k-sample decomposition per method (mean over seeds)."""
    plt = _pyplot()
    colors = ("#2a9d3f", "#9fd39b", "#f2c14e", "#9e9e9e", "#d1495b")
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(table)
    for name, color in zip(DECOMPOSITION, colors):
        values = table[name].tolist()
        ax.bar(table.index, values, bottom=bottom, color=color, label=name.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("% of held-out questions")
    ax.legend(bbox_to_anchor=(1.02, 1), loc="upper left", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_flip(record: dict, path: str | Path | None = None):
    """One logged response: its per-token advantage before the flip (the group advantage on every token) and
    after (FSPO's sentence-wise flip), tokens on the x axis."""
    plt = _pyplot()
    after = record["token_advantages"]
    before = [record["advantage"]] * len(after)
    fig, axes = plt.subplots(2, 1, figsize=(min(18, 2 + 0.16 * len(after)), 5), sharex=True, sharey=True)
    for ax, values, title in zip(axes, (before, after), ("before the flip (GRPO)", "after the flip (FSPO)")):
        ax.bar(range(len(values)), values, color=["#2ea043" if v > 0 else "#d73a49" for v in values])
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_ylabel("advantage")
        ax.set_title(title, fontsize=10)
    if len(after) <= 90:
        axes[1].set_xticks(range(len(after)))
        axes[1].set_xticklabels([t.replace("Ġ", " ").replace("Ċ", "\\n") for t in record["tokens"]], rotation=90,
                                fontsize=7)
    fig.suptitle(f"Q: {record['question']}  (gold: {', '.join(record['gold'][:2])}; reward {record['reward']:.2f})",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, path)
