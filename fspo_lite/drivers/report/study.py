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

from .evaluation.metrics import DECOMPOSITION, decomposition_class
from .metrics import read_metrics

QA_METRICS = {"accuracy": "correct", "answer_f1": "f1", "not_attempted": "not_attempted", "format_rate": "format_rate",
              "step_hallucination": "step_hallucination_rate", "judge_coverage": "judge_coverage",
              **{name: f"decomp_{name}" for name in DECOMPOSITION}}
"""Table column -> metric of the held-out short-QA benchmark (fspo_lite.evaluation's names)."""
OTHER_METRICS = {"truthfulqa_mc1": "truthfulqa_mc.mc1", "truthfulqa_mc2": "truthfulqa_mc.mc2",
                 "halueval_accuracy": "halueval.accuracy"}
HELDOUT_METRICS = ("accuracy", "answer_f1", "not_attempted", "format_rate", "step_hallucination", "judge_coverage",
                   *OTHER_METRICS)
PER_RESPONSE = {"supported": "supported_per_response@{judge}", "unsupported": "unsupported_per_response@{judge}",
                "checkable": "checkable_per_response@{judge}", "sentences": "sentences_per_response",
                "near_duplicates": "near_duplicates_per_response", "tokens": "response_tokens"}
"""Table column -> short-QA metric per response (the harness's names; {judge} = the run's held-out judge):
reasoning sentences the judge found supported, unsupported, checkable; all reasoning sentences; near-duplicates
of an earlier sentence; generated tokens."""
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
        names = {**{column: f"{qa}.{metric}" for column, metric in QA_METRICS.items()}, **OTHER_METRICS,
                 **{column: f"{qa}.{metric.format(judge=record.get('judge'))}" for column, metric in PER_RESPONSE.items()}}
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
    columns = [c for c in (*HELDOUT_METRICS, *DECOMPOSITION, *PER_RESPONSE) if c in heldout]
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
                     settings: dict | None = None, title: str = "Lite reproduction: held-out results") -> str:
    """The results table (mean over seeds +- half the spread), the goal line and the training diagnostics."""
    def cell(method, metric, percent=True):
        value = table.loc[method, metric]
        spread = table.loc[method, f"{metric}_spread"] if f"{metric}_spread" in table else math.nan
        scale = 100.0 if percent else 1.0
        text = f"{value * scale:.1f}"
        return text + (f" ± {spread * scale / 2:.1f}" if table.loc[method, "seeds"] > 1 else "")

    lines = [f"# {title}", ""]
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
    counts = [c for c in PER_RESPONSE if c in table]
    if counts:
        judge = f" (held-out judge: {settings['step-hallucination judge']})" if settings and \
            "step-hallucination judge" in settings else ""
        lines += ["", f"Per response{judge}: reasoning sentences supported, unsupported and checkable by the judge, "
                  "all reasoning sentences, near-duplicates of an earlier sentence, generated tokens (mean ± half "
                  "the range over seeds). A lower hallucination rate with fewer supported sentences is saying less.",
                  "", "| method | " + " | ".join(counts) + " |", "|---|" + "---|" * len(counts)]
        for method in table.index:
            lines.append(f"| {method} | " + " | ".join(
                "n/a" if pd.isna(table.loc[method, c]) else
                f"{table.loc[method, c]:.2f}" + (f" ± {table.loc[method, f'{c}_spread'] / 2:.2f}"
                                                 if table.loc[method, "seeds"] > 1 else "") for c in counts) + " |")
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


# ---- the study's statistics (docs/statistics.md) -----------------------------------------------
LENGTH_STRATA = 5
"""Matched-length strata: responses with 1, 2, 3, 4 and 5 or more reasoning sentences."""
PERCENT_METRICS = ("accuracy", "incorrect", "not_attempted", "answer_f1", "format_rate", "truthfulqa_mc1",
                   "truthfulqa_mc2", "halueval_accuracy")
"""Shares shown in percent (the decomposition classes are percentages already, the rest are counts)."""
CAUTION_GOAL = {"relative_drop": 0.30, "correct_points": 2.0}
"""The seed slides' goal for the caution reward: All-Attempt-and-Wrong down >= 30% relative to GRPO with correct
answers down by at most 2 points."""


def _runs(runs_dir: str | Path):
    """(run name, heldout.json record, eval/records.jsonl rows) of every evaluated run, sorted by name."""
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        records_path = path.parent / "eval" / "records.jsonl"
        if not records_path.exists():
            continue
        info = json.loads(path.read_text())
        rows = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
        yield path.parent.name, info, rows


def judge_labels(record: dict, default_judge: str) -> dict[str, list[int]]:
    """A short-QA record's sentence labels per judge (records written before the harness kept several judges
    hold only `sentence_labels`, the main judge's)."""
    return record.get("sentence_labels_by_judge") or {default_judge: record.get("sentence_labels") or []}


def load_responses(runs_dir: str | Path, qa: str = "kbqa") -> pd.DataFrame:
    """One row per held-out short-QA response of every run: method, seed, question, grades, length (reasoning
    sentences, generated tokens, near-duplicate sentences) and per judge j the counts supported@j, unsupported@j,
    checkable@j of its reasoning sentences."""
    rows = []
    for run, info, records in _runs(runs_dir):
        for r in records:
            if r.get("benchmark") != qa:
                continue
            row = {"run": run, "method": info["method"], "seed": info.get("seed"), "question": r["id"],
                   "sample": r.get("sample", 0), "grade": r["grade"], "correct": float(r["grade"] == "CORRECT"),
                   "incorrect": float(r["grade"] == "INCORRECT"), "not_attempted": float(r["grade"] == "NOT_ATTEMPTED"),
                   "answer_f1": float(r.get("f1", math.nan)), "format_rate": float(bool(r.get("format_ok"))),
                   "sentences": len(r.get("sentence_spans") or r.get("sentence_labels") or []),
                   "response_tokens": r.get("response_tokens"), "near_duplicates": r.get("near_duplicate_sentences")}
            for judge, labels in judge_labels(r, info.get("judge", "judge")).items():
                row[f"supported@{judge}"] = sum(1 for x in labels if x > 0)
                row[f"unsupported@{judge}"] = sum(1 for x in labels if x < 0)
                row[f"checkable@{judge}"] = sum(1 for x in labels if x != 0)
            rows.append(row)
    if not rows:
        raise FileNotFoundError(f"no {qa} records under {runs_dir}/*/eval/records.jsonl: run notebook 03 first")
    frame = pd.DataFrame(rows)
    frame["seed"] = frame["seed"].fillna(-1).astype(int)
    for column in ("response_tokens", "near_duplicates"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def judges_of(responses: pd.DataFrame) -> list[str]:
    """The judges whose labels the responses carry, in the order the harness wrote them (main judge first)."""
    return [c.split("@", 1)[1] for c in responses.columns if c.startswith("checkable@")]


def metric_cells(responses: pd.DataFrame, runs_dir: str | Path | None = None) -> pd.DataFrame:
    """Every metric as numerator and denominator per (method, seed, question) cell (the form fspo_lite.stats
    resamples): shares of answers, per-response means, step hallucination per judge (unsupported / checkable),
    the decomposition classes (100 x [question in class] / 1) and, from runs_dir, TruthfulQA MC and HaluEval."""
    keys = ["method", "seed", "question"]
    grouped = responses.groupby(keys, sort=False)
    sums = grouped.sum(numeric_only=True)
    count = grouped.size()
    specs = {name: (name, None) for name in ("correct", "incorrect", "not_attempted", "answer_f1", "format_rate")}
    specs["accuracy"] = specs.pop("correct")
    specs.update({"sentences_per_response": ("sentences", None), "response_tokens": ("response_tokens", "tokens"),
                  "near_duplicates_per_response": ("near_duplicates", "near")})
    for judge in judges_of(responses):
        specs[f"step_hallucination@{judge}"] = (f"unsupported@{judge}", f"checkable@{judge}")
        specs[f"judge_coverage@{judge}"] = (f"checkable@{judge}", "sentences")
        for kind in ("supported", "unsupported", "checkable"):
            specs[f"{kind}_per_response@{judge}"] = (f"{kind}@{judge}", None)
    frames = []
    for metric, (num, den) in specs.items():
        if den in ("tokens", "near"):
            column = num
            den_values = responses[column].notna().groupby([responses[k] for k in keys], sort=False).sum()
        else:
            den_values = count if den is None else sums[den]
        frames.append(pd.DataFrame({"metric": metric, "num": sums[num].fillna(0.0), "den": den_values}).reset_index())
    classes = responses.groupby(keys, sort=False)["grade"].apply(lambda g: decomposition_class(list(g)))
    for name in DECOMPOSITION:
        frames.append(pd.DataFrame({"metric": name, "num": 100.0 * (classes == name), "den": 1.0}).reset_index())
    if runs_dir is not None:
        frames.append(other_benchmark_cells(runs_dir))
    return pd.concat(frames, ignore_index=True)[["metric", *keys, "num", "den"]]


def other_benchmark_cells(runs_dir: str | Path) -> pd.DataFrame:
    """TruthfulQA MC1/MC2 and HaluEval accuracy per (method, seed, item) from the runs' records."""
    rows = []
    for _, info, records in _runs(runs_dir):
        seed = -1 if info.get("seed") is None else int(info["seed"])
        for r in records:
            base = {"method": info["method"], "seed": seed, "question": r["id"], "den": 1.0}
            if r.get("benchmark") == "truthfulqa_mc":
                rows += [{**base, "metric": "truthfulqa_mc1", "num": float(r["mc1"])},
                         {**base, "metric": "truthfulqa_mc2", "num": float(r["mc2"])}]
            elif r.get("benchmark") == "halueval":
                rows.append({**base, "metric": "halueval_accuracy", "num": float(r["grade"] == "CORRECT")})
    return pd.DataFrame(rows, columns=["metric", "method", "seed", "question", "num", "den"])


def _arrays(cells: pd.DataFrame, method: str, questions: list) -> tuple:
    """(num, den) arrays (seeds x questions) of one metric's cells for one method, 0/0 where a cell is missing."""
    sub = cells[cells["method"] == method]
    num = sub.pivot_table(index="seed", columns="question", values="num", aggfunc="sum").reindex(columns=questions)
    den = sub.pivot_table(index="seed", columns="question", values="den", aggfunc="sum").reindex(columns=questions)
    return num.fillna(0.0).to_numpy(), den.fillna(0.0).to_numpy()


def _rng(seed: int, name: str):
    import zlib

    import numpy as np

    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def study_statistics(cells: pd.DataFrame, order: Sequence[str] | None = None, baseline: str = "grpo",
                     n_resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, pd.DataFrame]:
    """Per method and metric the mean over seeds with its bootstrap interval ("methods"), and every trained
    method's paired difference to `baseline` on the same questions ("differences"; the base model is left out).
    Each metric draws from its own generator seeded by (seed, metric name)."""
    from . import stats

    methods = [m for m in (order or []) if m in set(cells["method"])]
    methods += [m for m in cells["method"].unique() if m not in methods]
    rows, diffs = [], []
    for metric, sub in cells.groupby("metric", sort=False):
        questions = sorted(sub["question"].unique())
        arrays = {m: _arrays(sub, m, questions) for m in methods if (sub["method"] == m).any()}
        rng = _rng(seed, metric)
        for method, (num, den) in arrays.items():
            rows.append({"metric": metric, "method": method,
                         **stats.bootstrap_mean(num, den, n_resamples, rng, level)})
        if baseline in arrays:
            for method, (num, den) in arrays.items():
                if method in (baseline, "base"):
                    continue
                result = stats.paired_difference(num, den, *arrays[baseline], n_resamples, rng, level, relative=True)
                diffs.append({"metric": metric, "method": method, "baseline": baseline, **result})
    return {"methods": pd.DataFrame(rows), "differences": pd.DataFrame(diffs)}


def length_stratum(sentences: int, strata: int = LENGTH_STRATA) -> int:
    """Stratum index of a response with this many reasoning sentences: 0 for 1 sentence ... strata - 1 for
    `strata` or more (responses without reasoning sentences carry no judged sentence and are in no stratum)."""
    return min(int(sentences), strata) - 1


def matched_length(responses: pd.DataFrame, baseline: str = "grpo", strata: int = LENGTH_STRATA,
                   n_resamples: int = 2000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Step hallucination per judge, method vs baseline, at matched length: responses are stratified by their
    number of reasoning sentences (1, 2, ..., `strata` or more); within a stratum each method's rate is
    unsupported / checkable; both are standardized to the same weights, the share of the two methods' responses
    with a checkable sentence in each stratum (fspo_lite.stats.matched_difference)."""
    import numpy as np

    from . import stats

    frame = responses[responses["sentences"] > 0].copy()
    frame["stratum"] = frame["sentences"].map(lambda n: length_stratum(n, strata))
    rows = []
    for judge in judges_of(frame):
        rng = _rng(seed, f"matched@{judge}")
        questions = sorted(frame["question"].unique())
        for method in [m for m in frame["method"].unique() if m not in (baseline, "base")]:
            pair = frame[frame["method"].isin([method, baseline]) & (frame[f"checkable@{judge}"] > 0)]
            if pair.empty or not (pair["method"] == baseline).any() or not (pair["method"] == method).any():
                continue
            weights = np.bincount(pair["stratum"], minlength=strata).astype(float)
            weights /= weights.sum()
            arrays = []
            for m in (method, baseline):
                sub = pair[pair["method"] == m]
                seeds = sorted(sub["seed"].unique())
                shape = (len(seeds), len(questions), strata)
                num, den = np.zeros(shape), np.zeros(shape)
                s_index, q_index = {s: i for i, s in enumerate(seeds)}, {q: i for i, q in enumerate(questions)}
                columns = [f"unsupported@{judge}", f"checkable@{judge}"]
                sums = sub.groupby(["seed", "question", "stratum"])[columns].sum()
                for (s, q, k), (unsupported, checkable) in sums.iterrows():
                    num[s_index[s], q_index[q], k], den[s_index[s], q_index[q], k] = unsupported, checkable
                arrays += [num, den]
            result = stats.matched_difference(*arrays, weights, n_resamples, rng, level)
            rows.append({"judge": judge, "method": method, "baseline": baseline, **result,
                         "weights": [round(float(w), 3) for w in weights]})
    return pd.DataFrame(rows)


def caution_goal(differences: pd.DataFrame, relative_drop: float = CAUTION_GOAL["relative_drop"],
                 correct_points: float = CAUTION_GOAL["correct_points"]) -> pd.DataFrame:
    """The slides' goal per method against the baseline: all_attempt_wrong down by >= relative_drop (relative)
    with correct answers down by at most correct_points points. `met` reads the point estimates; `holds` asks
    the intervals: the whole relative-change interval at or below -relative_drop and the whole correct-answer
    interval above -correct_points."""
    rows = []
    for method in differences["method"].unique():
        d = differences[differences["method"] == method].set_index("metric")
        if not {"all_attempt_wrong", "accuracy"} <= set(d.index):
            continue
        aaw, acc = d.loc["all_attempt_wrong"], d.loc["accuracy"]
        row = {"method": method, "baseline": aaw["baseline"], "aaw_method": aaw["a"], "aaw_baseline": aaw["b"],
               "aaw_relative": aaw["relative"], "aaw_relative_low": aaw["relative_low"],
               "aaw_relative_high": aaw["relative_high"], "correct_points": 100 * acc["diff"],
               "correct_points_low": 100 * acc["low"], "correct_points_high": 100 * acc["high"]}
        if "not_attempted" in d.index:
            na = d.loc["not_attempted"]
            row.update({"not_attempted_points": 100 * na["diff"], "not_attempted_points_low": 100 * na["low"],
                        "not_attempted_points_high": 100 * na["high"]})
        row["met"] = bool(row["aaw_relative"] <= -relative_drop and row["correct_points"] >= -correct_points)
        row["holds"] = bool(row["aaw_relative_high"] <= -relative_drop and row["correct_points_low"] >= -correct_points)
        rows.append(row)
    return pd.DataFrame(rows)


def _is_share(metric: str) -> bool:
    return metric in PERCENT_METRICS or metric.startswith(("step_hallucination@", "judge_coverage@"))


def _scale(metric: str) -> float:
    return 100.0 if _is_share(metric) else 1.0


def _digits(metric: str) -> int:
    return 1 if _is_share(metric) or metric in DECOMPOSITION else 2


def metric_order(metrics: Sequence[str], judges: Sequence[str]) -> list[str]:
    """The report's row order: answers, decomposition, each judge's rates and counts, length, other benchmarks."""
    wanted = ["accuracy", "incorrect", "not_attempted", "answer_f1", "format_rate", *DECOMPOSITION]
    for judge in judges:
        wanted += [f"step_hallucination@{judge}", f"supported_per_response@{judge}",
                   f"unsupported_per_response@{judge}", f"checkable_per_response@{judge}", f"judge_coverage@{judge}"]
    wanted += ["sentences_per_response", "response_tokens", "near_duplicates_per_response", *OTHER_METRICS]
    return [m for m in wanted if m in set(metrics)] + sorted(m for m in set(metrics) if m not in wanted)


def format_interval(metric: str, mean: float, low: float, high: float, signed: bool = False) -> str:
    """'12.3 [8.1, 16.0]' in the metric's unit (percent / points for shares)."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    scale, digits = _scale(metric), _digits(metric)
    sign = "+" if signed else ""
    text = f"{mean * scale:{sign}.{digits}f}"
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{low * scale:{sign}.{digits}f}, {high * scale:{sign}.{digits}f}]"
    return text


def _excludes_zero(row) -> bool:
    return not (math.isnan(row["low"]) or math.isnan(row["high"])) and (row["low"] > 0 or row["high"] < 0)


def study_markdown(tables: dict, matched: pd.DataFrame | None, goal: pd.DataFrame | None, judges: Sequence[str],
                   order: Sequence[str], settings: dict | None = None, n_resamples: int = 2000,
                   level: float = 0.95, title: str = "Study: held-out results with intervals",
                   detail: pd.DataFrame | None = None) -> str:
    """The study summary: per method mean [interval]; paired differences to the baseline; step hallucination per
    judge; supported and unsupported sentences per response with a plain reading (the say-less check); the
    detail arm's question (`detail_arm_check`, when given); the matched-length comparison; the caution goal.
    Shares are in percent, their differences in percentage points."""
    methods_table, differences = tables["methods"], tables["differences"]
    methods = [m for m in order if m in set(methods_table["method"])]
    methods += [m for m in methods_table["method"].unique() if m not in methods]
    trained = [m for m in methods if m in set(differences["method"])] if len(differences) else []
    baseline = differences["baseline"].iloc[0] if len(differences) else None
    rows = metric_order(methods_table["metric"].unique(), judges)
    cell = methods_table.set_index(["metric", "method"])
    diff = differences.set_index(["metric", "method"]) if len(differences) else None
    pct = f"{level:.0%}"

    lines = [f"# {title}", ""]
    if settings:
        lines += ["Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()), ""]
    seeds = {m: int(cell.loc[(rows[0], m), "seeds"]) for m in methods if (rows[0], m) in cell.index}
    questions = int(methods_table[methods_table["metric"] == rows[0]]["questions"].max())
    lines += [f"Every number is the mean over seeds with its {pct} interval: a percentile bootstrap ({n_resamples} "
              "resamples) over held-out questions, resampled as clusters (all samples and sentences of a question "
              "together), and over seeds within each method (docs/statistics.md). Shares are in %, differences of "
              "shares in percentage points; per-response numbers are counts. Seeds: "
              + ", ".join(f"{m} {n}" for m, n in seeds.items()) + f"; questions: {questions}.", ""]

    lines += [f"## Per method: mean over seeds [{pct} interval]", "",
              "| metric | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for metric in rows:
        values = [format_interval(metric, *cell.loc[(metric, m), ["mean", "low", "high"]])
                  if (metric, m) in cell.index else "" for m in methods]
        lines.append(f"| {metric} | " + " | ".join(values) + " |")

    if trained:
        lines += ["", f"## Paired differences: method - {baseline} on the same questions [{pct} interval]", "",
                  "Bold: the interval excludes 0.", "",
                  "| metric | " + " | ".join(f"{m} - {baseline}" for m in trained) + " |",
                  "|---|" + "---|" * len(trained)]
        for metric in rows:
            values = []
            for m in trained:
                if (metric, m) not in diff.index:
                    values.append("")
                    continue
                d = diff.loc[(metric, m)]
                text = format_interval(metric, d["diff"], d["low"], d["high"], signed=True)
                values.append(f"**{text}**" if _excludes_zero(d) else text)
            lines.append(f"| {metric} | " + " | ".join(values) + " |")

    lines += ["", f"## Step hallucination by judge (% of checkable reasoning sentences unsupported) [{pct} interval]",
              "", "Each judge reported separately; the first is the main held-out judge.", "",
              "| judge | " + " | ".join(methods) + "".join(f" | {m} - {baseline}" for m in trained) + " |",
              "|---|" + "---|" * (len(methods) + len(trained))]
    for judge in judges:
        metric = f"step_hallucination@{judge}"
        values = [format_interval(metric, *cell.loc[(metric, m), ["mean", "low", "high"]])
                  if (metric, m) in cell.index else "" for m in methods]
        values += [format_interval(metric, *diff.loc[(metric, m), ["diff", "low", "high"]], signed=True)
                   if diff is not None and (metric, m) in diff.index else "" for m in trained]
        lines.append(f"| {judge} | " + " | ".join(values) + " |")

    if trained and judges:
        lines += ["", "## Saying less is not success", "",
                  "Supported and unsupported reasoning sentences per response are reported separately above. "
                  f"The say-less check: each method's change in *supported* sentences per response against "
                  f"{baseline} [{pct} interval]; a lower hallucination rate bought with fewer supported sentences "
                  "is not a gain in factuality. Then a plain reading of the two changes together.", ""]
        for judge in judges:
            for m in trained:
                metrics = [f"{kind}_per_response@{judge}" for kind in ("supported", "unsupported")]
                if not all((metric, m) in diff.index for metric in metrics):
                    continue
                supported, unsupported = (diff.loc[(metric, m)] for metric in metrics)
                lines.append(f"- {judge}, {m} - {baseline}: supported sentences per response "
                             f"{format_interval(metrics[0], *supported[['diff', 'low', 'high']], signed=True)}, "
                             f"unsupported "
                             f"{format_interval(metrics[1], *unsupported[['diff', 'low', 'high']], signed=True)}. "
                             "Reading: "
                             + say_less_reading(m, baseline, supported, unsupported,
                                                min(seeds.get(m, 0), seeds.get(baseline, 0))))
    if detail is not None and len(detail):
        lines += detail_markdown(detail, pct)
    if matched is not None and len(matched):
        lines += ["", "## Step hallucination at matched length", "",
                  f"Responses stratified by their number of reasoning sentences (1, 2, 3, 4, {LENGTH_STRATA}+); "
                  "within a stratum each method's unsupported share of checkable sentences; both methods weighted "
                  "by the same stratum weights (the pooled share of their responses with a checkable sentence in "
                  "each stratum; strata that only one method reaches left out). Points, method - "
                  f"{baseline} [{pct} interval].", "",
                  "| judge | method | raw difference | matched difference | strata used | weights (1..5+ sentences) |",
                  "|---|---|---|---|---|---|"]
        for row in matched.itertuples(index=False):
            metric = f"step_hallucination@{row.judge}"
            raw = diff.loc[(metric, row.method)] if diff is not None and (metric, row.method) in diff.index else None
            raw_text = ("" if raw is None else
                        format_interval(metric, raw["diff"], raw["low"], raw["high"], signed=True))
            lines.append(f"| {row.judge} | {row.method} | {raw_text} | "
                         f"{format_interval(metric, row.diff, row.low, row.high, signed=True)} | {row.strata} | "
                         f"{', '.join(f'{w:.2f}' for w in row.weights)} |")
    if goal is not None and len(goal):
        lines += ["", "## The caution goal", "",
                  f"The seed slides' goal: All-Attempt-and-Wrong (every one of a question's answers attempted and "
                  f"wrong) down >= {CAUTION_GOAL['relative_drop']:.0%} relative to {baseline}, with correct answers "
                  f"down by at most {CAUTION_GOAL['correct_points']:g} points. *met*: the point estimates satisfy it; "
                  "*holds*: the whole intervals do.", "",
                  "| method | all-attempt-wrong % (method / baseline) | relative change | correct (points) | "
                  "not attempted (points) | met | holds |", "|---|---|---|---|---|---|---|"]
        for row in goal.to_dict(orient="records"):
            na = (f"{row['not_attempted_points']:+.1f} [{row['not_attempted_points_low']:+.1f}, "
                  f"{row['not_attempted_points_high']:+.1f}]") if "not_attempted_points" in row else ""
            lines.append(f"| {row['method']} | {row['aaw_method']:.1f} / {row['aaw_baseline']:.1f} | "
                         f"{row['aaw_relative']:+.1%} [{row['aaw_relative_low']:+.1%}, "
                         f"{row['aaw_relative_high']:+.1%}] | "
                         f"{row['correct_points']:+.1f} [{row['correct_points_low']:+.1f}, "
                         f"{row['correct_points_high']:+.1f}] | {na} | {'yes' if row['met'] else 'no'} | "
                         f"{'yes' if row['holds'] else 'no'} |")
    return "\n".join(lines) + "\n"


def direction(row) -> str:
    """Where a difference's interval lies: 'below' 0 (high < 0), 'above' 0 (low > 0), 'unresolved' (it holds 0)
    or 'n/a' (no interval: NaN bounds)."""
    low, high = float(row["low"]), float(row["high"])
    if math.isnan(low) or math.isnan(high):
        return "n/a"
    return "below" if high < 0 else "above" if low > 0 else "unresolved"


def say_less_reading(method: str, baseline: str, supported, unsupported, seeds: int = 2) -> str:
    """One plain sentence on a method's change in supported and unsupported sentences per response against the
    baseline (rows with diff, low, high): does it say less, or is it more right? `seeds`: the fewer of the two
    methods' seed counts; with one, the interval covers the questions only."""
    s, u = direction(supported), direction(unsupported)
    if s == "below":
        text = (f"{method} writes fewer supported sentences than {baseline}: part of any drop in its hallucination "
                "rate is saying less, not being more right.")
    elif u == "below" and s == "above":
        text = f"{method} writes fewer unsupported and more supported sentences: a factuality gain, not silence."
    elif u == "below":
        text = (f"{method} writes fewer unsupported sentences and its supported sentences are not told apart from "
                f"{baseline}'s (point {float(supported['diff']):+.2f}): no sign of saying less, nor proof it does not.")
    elif s == "above":
        text = f"{method} writes more supported sentences without fewer unsupported ones: more detail, not precision."
    elif u == "above":
        text = f"{method} writes more unsupported sentences than {baseline}."
    elif "n/a" in (s, u):
        text = "no interval to read."
    else:
        text = f"no difference from {baseline} in either count that the intervals can resolve."
    if seeds < 2:
        text += " (One seed: the interval covers the questions only, not seed-to-seed variation.)"
    return text


def pair_differences(cells: pd.DataFrame, metrics: Sequence[str], method: str, other: str, n_resamples: int = 2000,
                     seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """`method` - `other` on the same questions for each of `metrics` (fspo_lite.stats.paired_difference; the
    rows look like study_statistics' "differences" with baseline = other). Metrics one of the two lacks are left
    out."""
    from . import stats

    rows = []
    for metric in metrics:
        sub = cells[cells["metric"] == metric]
        if not ((sub["method"] == method).any() and (sub["method"] == other).any()):
            continue
        questions = sorted(sub["question"].unique())
        result = stats.paired_difference(*_arrays(sub, method, questions), *_arrays(sub, other, questions),
                                         n_resamples, _rng(seed, f"{metric}:{method}-{other}"), level)
        rows.append({"metric": metric, "method": method, "baseline": other, **result})
    return pd.DataFrame(rows)


DETAIL_ARM = ("fspo+detail", "fspo")
"""The study's detail arm and the method it adds the detail term to."""


def detail_arm_check(differences: pd.DataFrame, versus_reference: pd.DataFrame, judges: Sequence[str],
                     arm: str = DETAIL_ARM[0], reference: str = DETAIL_ARM[1]) -> pd.DataFrame:
    """The detail arm's question, per judge: does `arm` keep `reference`'s drop in unsupported sentences per
    response against the baseline while holding supported sentences per response at the baseline's level or
    above? `differences`: paired differences to the baseline (arm and reference among the methods);
    `versus_reference`: arm - reference (`pair_differences`). Per judge: the differences with intervals;
    `keeps_drop` (point: arm - baseline unsupported < 0) and `keeps_drop_resolved` (its interval below 0);
    `holds_supported` (point: arm - baseline supported >= 0) and `holds_supported_resolved` (its interval's lower
    end >= 0); `met` = both points, `holds` = both resolved."""
    rows = []
    d = differences.set_index(["metric", "method"])
    r = versus_reference.set_index(["metric", "method"]) if len(versus_reference) else None
    for judge in judges:
        sup, uns = f"supported_per_response@{judge}", f"unsupported_per_response@{judge}"
        if not all((m, x) in d.index for m in (sup, uns) for x in (arm, reference)):
            continue
        row = {"judge": judge, "arm": arm, "reference": reference, "baseline": d.loc[(uns, arm), "baseline"]}
        for name, metric in (("supported", sup), ("unsupported", uns)):
            for who, key in (("arm", arm), ("reference", reference)):
                x = d.loc[(metric, key)]
                row.update({f"{name}_{who}": float(x["diff"]), f"{name}_{who}_low": float(x["low"]),
                            f"{name}_{who}_high": float(x["high"])})
            x = r.loc[(metric, arm)] if r is not None and (metric, arm) in r.index else None
            row.update({f"{name}_vs_reference": float(x["diff"]) if x is not None else math.nan,
                        f"{name}_vs_reference_low": float(x["low"]) if x is not None else math.nan,
                        f"{name}_vs_reference_high": float(x["high"]) if x is not None else math.nan})
        row["keeps_drop"] = bool(row["unsupported_arm"] < 0)
        row["keeps_drop_resolved"] = bool(row["unsupported_arm_high"] < 0)
        row["holds_supported"] = bool(row["supported_arm"] >= 0)
        row["holds_supported_resolved"] = bool(row["supported_arm_low"] >= 0)
        row["met"] = row["keeps_drop"] and row["holds_supported"]
        row["holds"] = row["keeps_drop_resolved"] and row["holds_supported_resolved"]
        rows.append(row)
    return pd.DataFrame(rows)


def detail_answer(row: dict) -> str:
    """The detail arm's answer in words, from a `detail_arm_check` row."""
    if row["holds"]:
        return "yes, and the intervals resolve it"
    if row["met"]:
        return "yes on the point estimates, but the intervals do not resolve it"
    parts = []
    if not row["keeps_drop"]:
        parts.append(f"its unsupported sentences are not below {row['baseline']}'s")
    if not row["holds_supported"]:
        parts.append(f"it writes fewer supported sentences than {row['baseline']}")
    return "no: " + " and ".join(parts)


def detail_markdown(detail: pd.DataFrame, pct: str = "95%") -> list[str]:
    """The summary's section on the detail arm (rows of `detail_arm_check`)."""
    first = detail.iloc[0]
    arm, reference, baseline = first["arm"], first["reference"], first["baseline"]

    def text(row, name, who):
        return format_interval("count", row[f"{name}_{who}"], row[f"{name}_{who}_low"], row[f"{name}_{who}_high"],
                               signed=True)

    lines = ["", f"## Does the detail term keep {reference}'s gain without saying less?", "",
             f"{arm} is {reference} with the detail term (docs/methods.md, \"Detail term\"). The question: does it "
             f"keep {reference}'s drop in unsupported sentences per response against {baseline} while holding "
             f"supported sentences per response at {baseline}'s level or above? Per response, differences "
             f"[{pct} interval]. *met*: the point estimates say so; *holds*: the intervals do (unsupported interval "
             "below 0, supported interval's lower end at 0 or above).", "",
             f"| judge | unsupported: {arm} - {baseline} | {reference} - {baseline} | {arm} - {reference} | "
             f"supported: {arm} - {baseline} | {reference} - {baseline} | {arm} - {reference} | met | holds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in detail.to_dict(orient="records"):
        lines.append(f"| {row['judge']} | " + " | ".join(text(row, name, who) for name in ("unsupported", "supported")
                                                       for who in ("arm", "reference", "vs_reference"))
                     + f" | {'yes' if row['met'] else 'no'} | {'yes' if row['holds'] else 'no'} |")
    lines.append("")
    lines += [f"- {row['judge']}: {detail_answer(row)}." for row in detail.to_dict(orient="records")]
    return lines


def plot_forest(differences: pd.DataFrame, metrics: Sequence[str], path: str | Path | None = None,
                title: str = ""):
    """Forest plot: every (metric, method) paired difference to the baseline with its interval, shares in
    percentage points, counts per response in their unit (two panels when both kinds are present)."""
    plt = _pyplot()
    metrics = [m for m in metrics if m in set(differences["metric"])]
    groups = [g for g in ([m for m in metrics if _is_share(m) or m in DECOMPOSITION],
                          [m for m in metrics if not (_is_share(m) or m in DECOMPOSITION)]) if g]
    methods = list(differences["method"].unique())
    height = max(2.5, 0.32 * max(len(g) for g in groups) * len(methods) + 1)
    fig, axes = plt.subplots(1, len(groups), figsize=(6.5 * len(groups), height), squeeze=False)
    for ax, group, unit in zip(axes[0], groups, ("percentage points", "per response") if len(groups) == 2 else
                               (("percentage points",) if _is_share(groups[0][0]) or groups[0][0] in DECOMPOSITION
                                else ("per response",))):
        labels, position = [], 0
        for metric in group:
            for k, method in enumerate(methods):
                row = differences[(differences["metric"] == metric) & (differences["method"] == method)]
                if row.empty:
                    continue
                row = row.iloc[0]
                scale = _scale(metric)
                ax.errorbar(row["diff"] * scale, -position, xerr=[[(row["diff"] - row["low"]) * scale],
                                                                  [(row["high"] - row["diff"]) * scale]],
                            fmt="o", color=f"C{k}", capsize=3, label=method if metric == group[0] else None)
                labels.append(f"{metric} ({method})")
                position += 1
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_yticks([-i for i in range(len(labels))])
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlabel(f"difference to {differences['baseline'].iloc[0]} ({unit})")
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_judges(methods_table: pd.DataFrame, judges: Sequence[str], path: str | Path | None = None,
                order: Sequence[str] | None = None):
    """Step hallucination per judge and method (mean over seeds with its interval), one group of bars per judge."""
    plt = _pyplot()
    methods = [m for m in (order or methods_table["method"].unique()) if m in set(methods_table["method"])]
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(judges), 4))
    width = 0.8 / max(len(methods), 1)
    for k, method in enumerate(methods):
        for j, judge in enumerate(judges):
            row = methods_table[(methods_table["metric"] == f"step_hallucination@{judge}")
                                & (methods_table["method"] == method)]
            if row.empty or math.isnan(row.iloc[0]["mean"]):
                continue
            r = row.iloc[0]
            low, high = (0.0, 0.0) if math.isnan(r["low"]) else (r["mean"] - r["low"], r["high"] - r["mean"])
            ax.bar(j + k * width, 100 * r["mean"], width, color=f"C{k}", label=method if j == 0 else None,
                   yerr=[[100 * low], [100 * high]], capsize=3)
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(judges))])
    ax.set_xticklabels(judges)
    ax.set_ylabel("step hallucination (% of checkable sentences)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def study_report(runs_dir: str | Path, results_dir: str | Path, figures_dir: str | Path, prefix: str,
                 order: Sequence[str], baseline: str = "grpo", n_resamples: int = 2000, seed: int = 0,
                 level: float = 0.95, settings: dict | None = None, title: str | None = None,
                 write_markdown: bool = True, detail_arm: tuple[str, str] = DETAIL_ARM) -> dict:
    """Everything above from a runs folder: the tables, <results_dir>/summary.md (when write_markdown) and
    summary.json's "statistics" part (returned), <figures_dir>/<prefix>paired_differences.png and
    <prefix>step_hallucination_by_judge.png. `detail_arm`: (arm, the method it adds the detail term to); when
    both were run, the summary answers the detail arm's question (`detail_arm_check`)."""
    responses = load_responses(runs_dir)
    judges = judges_of(responses)
    cells = metric_cells(responses, runs_dir)
    tables = study_statistics(cells, order, baseline, n_resamples, seed, level)
    matched = matched_length(responses, baseline, n_resamples=n_resamples, seed=seed, level=level)
    goal = caution_goal(tables["differences"]) if len(tables["differences"]) else pd.DataFrame()
    detail = pd.DataFrame()
    if len(tables["differences"]) and set(detail_arm) <= set(tables["differences"]["method"]):
        counts = [f"{kind}_per_response@{j}" for j in judges for kind in ("supported", "unsupported")]
        versus = pair_differences(cells, counts, *detail_arm, n_resamples, seed, level)
        detail = detail_arm_check(tables["differences"], versus, judges, *detail_arm)
    text = study_markdown(tables, matched, goal, judges, order, settings, n_resamples, level,
                          **({"title": title} if title else {}), detail=detail)
    figures = {}
    if len(tables["differences"]):
        main = judges[0] if judges else None
        forest = ["accuracy", "not_attempted", "all_attempt_wrong",
                  *[f"step_hallucination@{j}" for j in judges],
                  *([f"supported_per_response@{main}", f"unsupported_per_response@{main}",
                     "sentences_per_response", "near_duplicates_per_response"] if main else [])]
        shown = tables["differences"]
        if len(matched):  # the matched-length comparisons as rows of their own
            extra = matched.assign(metric=matched["judge"].map(lambda j: f"step_hallucination@{j} (matched length)"))
            columns = ["metric", "method", "baseline", "diff", "low", "high"]
            shown = pd.concat([shown, extra[columns]], ignore_index=True)
            forest[3 + len(judges):3 + len(judges)] = list(extra["metric"].unique())
        figures["paired_differences"] = str(Path(figures_dir) / f"{prefix}paired_differences.png")
        plot_forest(shown, forest, figures["paired_differences"])
    if judges:
        figures["step_hallucination_by_judge"] = str(Path(figures_dir) / f"{prefix}step_hallucination_by_judge.png")
        plot_judges(tables["methods"], judges, figures["step_hallucination_by_judge"], order)
    if write_markdown:
        Path(results_dir).mkdir(parents=True, exist_ok=True)
        (Path(results_dir) / "summary.md").write_text(text)
    return {"markdown": text, "judges": judges, "n_resamples": n_resamples, "seed": seed, "level": level,
            "methods": json.loads(tables["methods"].to_json(orient="records")),
            "differences": json.loads(tables["differences"].to_json(orient="records")),
            "matched_length": json.loads(matched.to_json(orient="records")),
            "caution_goal": json.loads(goal.to_json(orient="records")),
            "detail_arm": json.loads(detail.to_json(orient="records")), "figures": figures}
