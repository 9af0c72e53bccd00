"""The lite run report (notebook 04): read the runs, aggregate over seeds, check the goal.

The aggregation functions are pure (tested on hand-made inputs in tests/test_report.py). A run folder holds the
trainer's metrics.jsonl / samples.jsonl and the held-out result heldout.json written by notebook 03
(`fspo_lite.drivers.runs.evaluate_run`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from fspo_lite.drivers.cli_help import MissingFileError
from fspo_lite.drivers.report.study import not_evaluated
from fspo_lite.evaluation.metrics import DECOMPOSITION
from fspo_lite.evaluation.result_files import read_heldout
from fspo_lite.logs.training_log import read_metrics

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
    (`fspo_lite.drivers.runs.evaluate_run`): the short-QA benchmark `qa`'s metrics and decomposition, and the
    TruthfulQA MC / HaluEval numbers when they were run."""
    rows = []
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        record = read_heldout(path)  # types and ranges checked: a hand-edited 7.0 is refused by file and line
        metrics = record["metrics"]
        names = {**{column: f"{qa}.{metric}" for column, metric in QA_METRICS.items()}, **OTHER_METRICS,
                 **{column: f"{qa}.{metric.format(judge=record.get('judge'))}" for column, metric in PER_RESPONSE.items()}}
        rows.append({"run": path.parent.name, "method": record["method"], "seed": record.get("seed"),
                     **{column: metrics[key] for column, key in names.items() if key in metrics}})
    if not rows:
        raise MissingFileError(f"no */heldout.json under {runs_dir}: run notebook 03 first")
    if not any(column in row for row in rows for column in QA_METRICS):
        raise MissingFileError(f"no run under {runs_dir} holds {qa} results: {not_evaluated(qa)}")
    return pd.DataFrame(rows)


def load_training(runs_dir: str | Path) -> pd.DataFrame:
    """Every training step of every run: the trainer's metrics rows with method and seed (from heldout.json)."""
    frames = []
    for path in sorted(Path(runs_dir).glob("*/metrics.jsonl")):
        info = read_heldout(path.parent / "heldout.json") if (path.parent / "heldout.json").exists() else {}
        frame = pd.DataFrame(read_metrics(path))
        frame["run"], frame["method"], frame["seed"] = path.parent.name, info.get("method"), info.get("seed")
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


REPOSITORY = Path(__file__).resolve().parents[3]
COMMITTED_STUDY = Path("results") / "study"
"""The study's committed runs (runs/) and report (summary.json), relative to the repository."""


@dataclass(frozen=True)
class CommittedRuns:
    """What notebook 04 reads and writes instead when the runs folder asked for does not exist (a fresh clone):
    the study's committed runs with the study's order and title; figures and summary go to `out_dir` (ignored by
    git), so the committed results stay as they are."""

    asked: str
    """The runs folder asked for, which does not exist."""
    runs_dir: Path
    order: list[str]
    title: str
    out_dir: str = "runs/committed_study"
    prefix: str = "study_"

    @property
    def note(self) -> str:
        """The one line notebook 04 prints."""
        return (f"{self.asked} does not exist yet (notebook 03 makes it): reading the committed study runs in "
                f"{self.runs_dir} instead; figures and summary go to {self.out_dir}/")


def has_runs(runs_dir: str | Path) -> bool:
    """Whether the folder holds at least one evaluated model (a */heldout.json)."""
    return any(Path(runs_dir).glob("*/heldout.json"))


def committed_runs(runs_dir: str | Path, repository: str | Path = REPOSITORY) -> CommittedRuns | None:
    """None when the folder `runs_dir` exists (or the repository has no committed study to fall back to, as an
    installed wheel); else the committed study's runs, order and title (from its summary.json), for notebook 04 to
    open on its own in a fresh clone, before notebook 03 has made its runs folder. A folder that exists is read as
    it is: a job whose notebook 03 made no run fails with that message instead of reporting other runs."""
    study = Path(repository) / COMMITTED_STUDY
    if Path(runs_dir).exists() or not has_runs(study / "runs") or not (study / "summary.json").exists():
        return None
    settings = json.loads((study / "summary.json").read_text(encoding="utf-8")).get("report") or {}
    runs = study / "runs"
    shown = runs.relative_to(Path.cwd()) if runs.is_relative_to(Path.cwd()) else runs
    return CommittedRuns(str(runs_dir), shown, list(settings.get("order") or ["base", "grpo", "fspo"]),
                         settings.get("title") or "Study: held-out results")


def run_row(record: dict) -> dict:
    """A finished run (or the base model) in one short row, for notebook 03's table instead of its whole record:
    method, seed, held-out accuracy and step hallucination in % (of the short-QA benchmark it was evaluated on)
    and the minutes it took."""
    metrics = record.get("metrics") or {}
    qa = next((b for b in ("kbqa", "multihop") if f"{b}.correct" in metrics), "kbqa")

    def percent(key: str) -> float:
        value = metrics.get(f"{qa}.{key}")
        return round(100 * value, 1) if isinstance(value, (int, float)) and not math.isnan(value) else math.nan

    return {"method": record.get("method", "base"), "seed": record.get("seed"), "accuracy %": percent("correct"),
            "step hallucination %": percent("step_hallucination_rate"), "minutes": record.get("minutes")}


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
    """The preset target: `method` lowers held-out step hallucination by at least `relative_drop` relative to
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
        if pd.isna(value):
            return "n/a"
        spread = table.loc[method, f"{metric}_spread"] if f"{metric}_spread" in table else math.nan
        scale = 100.0 if percent else 1.0
        text = f"{value * scale:.1f}"
        return text + (f" ± {spread * scale / 2:.1f}" if table.loc[method, "seeds"] > 1 and not pd.isna(spread) else "")

    lines = [f"# {title}", ""]
    if settings:
        lines += ["Settings: " + ", ".join(f"{k} = {v}" for k, v in settings.items()), ""]
    reasons = zero_reasons(table, diagnostics)
    if reasons:
        lines += ["Why so many numbers below are 0 or n/a:", "", *[f"- {reason}" for reason in reasons], ""]
    headers = {"accuracy": "accuracy %", "answer_f1": "answer F1 %", "not_attempted": "not attempted %",
               "step_hallucination": "step hallucination %", "judge_coverage": "judge coverage %",
               "format_rate": "well-formed %", "truthfulqa_mc1": "TruthfulQA MC1 %", "truthfulqa_mc2": "TruthfulQA MC2 %",
               "halueval_accuracy": "HaluEval acc. %"}
    shown = [c for c in headers if c in table]
    lines += ["| method | seeds | " + " | ".join(headers[c] for c in shown) + " |", "|---|---|" + "---|" * len(shown)]
    for method in table.index:
        lines.append(f"| {method} | {int(table.loc[method, 'seeds'])} | " + " | ".join(cell(method, c) for c in shown)
                     + " |")
    lines += ["", "± is half the range over seeds."]
    if all(c in table for c in DECOMPOSITION):
        lines[-1] += " Decomposition of each question's k answers (% of questions):"
        lines += ["", "| method | " + " | ".join(DECOMPOSITION) + " |", "|---|" + "---|" * len(DECOMPOSITION)]
    for method in (table.index if all(c in table for c in DECOMPOSITION) else []):
        lines.append(f"| {method} | " + " | ".join("n/a" if pd.isna(table.loc[method, c]) else f"{table.loc[method, c]:.1f}"
                                                   for c in DECOMPOSITION) + " |")
    counts = [c for c in PER_RESPONSE if c in table]
    if counts and no_sentences(table):
        lines += ["", "Per response: no reasoning sentence in any response, so every sentence count is 0"
                  + ("; generated tokens per response: " + ", ".join(f"{m} {table.loc[m, 'tokens']:.2f}"
                                                                     for m in table.index) if "tokens" in table
                     else "") + "."]
    elif counts:
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
        defined = not any(pd.isna(goal[k]) for k in ("relative_drop", "accuracy_delta_points"))
        lines += ["", f"Preset target ({goal['target']}): {goal['method']} vs {goal['baseline']}: step hallucination "
                  f"{goal['hallucination_method']:.1%} vs {goal['hallucination_baseline']:.1%} "
                  f"(relative drop {goal['relative_drop']:.1%}), accuracy {goal['accuracy_delta_points']:+.1f} points: "
                  + (("met" if goal["met"] else "not met") + " on the point estimates." if defined else
                     "cannot be checked (undefined numbers).")]
    if diagnostics is not None and len(diagnostics):
        lines += ["", "Training diagnostics (mean over steps and seeds):", "",
                  "| method | " + " | ".join(diagnostics.columns) + " |", "|---|" + "---|" * len(diagnostics.columns)]
        for method, row in diagnostics.iterrows():
            lines.append(f"| {method} | " + " | ".join(f"{v:.3g}" for v in row) + " |")
    return quiet_zero_tables("\n".join(lines)) + "\n"


SENTENCE_COUNTS = ("supported", "unsupported", "checkable", "sentences", "near_duplicates")
"""The per-response columns that count reasoning sentences (PER_RESPONSE less the tokens)."""


def all_equal(table: pd.DataFrame | None, column: str, value: float) -> bool:
    """Whether the column is there and every method's value is `value` (False when one is missing or NaN)."""
    return table is not None and column in table and len(table) > 0 and bool((table[column] == value).all())


def no_sentences(table: pd.DataFrame) -> bool:
    """Whether no model wrote a reasoning sentence: every sentence count of every method is 0 (or not a number,
    none being a number)."""
    counts = [c for c in SENTENCE_COUNTS if c in table]
    values = table[counts].to_numpy(dtype=float) if counts else None
    return bool(counts) and not (values[~pd.isna(values)] != 0).any()


def zero_reasons(table: pd.DataFrame, diagnostics: pd.DataFrame | None = None) -> list[str]:
    """Why a summary's numbers are 0 or n/a, one line each, read from the numbers themselves (a smoke run of a tiny
    random model gives all three; a real run none): no model wrote a well-formed response, no response held a
    reasoning sentence, no training group had a spread of rewards."""
    reasons = []
    if all_equal(table, "format_rate", 0.0):
        reasons.append("No model wrote a well-formed response (reasoning in `<think>`, then the answer in "
                       "`<answer>`): well-formed is 0% for every method"
                       + (", and no answer matched a gold one (accuracy 0%)." if all_equal(table, "accuracy", 0.0)
                          else "."))
    if no_sentences(table):
        reasons.append("No response held a reasoning sentence: the sentence counts are 0, and step hallucination "
                       "and judge coverage are n/a (no sentence to judge).")
    if all_equal(diagnostics, "frac_reward_zero_std", 1.0):
        reasons.append("In training every group's responses earned the same reward (frac_reward_zero_std = 1): "
                       "every advantage was 0, so the update had no reward to follow and the methods' numbers "
                       "cannot differ for it.")
    return reasons


ZERO_CELL = re.compile(r"\**(?:n/a|[+-]?0(?:\.0+)?(?: ± [+-]?0(?:\.0+)?)?(?: \[[+-]?0(?:\.0+)?, [+-]?0(?:\.0+)?\])?)?"
                       r"\**")
"""A table cell that says nothing: empty, n/a, or 0 (signed, with a zero spread or a zero interval)."""


def table_cells(line: str) -> list[str]:
    """The cells of a markdown table row, first column included, stripped."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def quiet_zero_tables(markdown: str) -> str:
    """Every markdown table whose every value (all columns but the first) is 0 or n/a, replaced by one line that
    says so and names its rows: a wall of zeros says nothing a line cannot (`zero_reasons` says why). A table with
    one number that is not 0 stays whole."""
    lines, out, i = markdown.split("\n"), [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            rows = [table_cells(line) for line in lines[i + 2:end]]
            if rows and all(ZERO_CELL.fullmatch(cell) for row in rows for cell in row[1:]):
                out.append(f"Every value of this table is 0 or n/a, so it is left out (rows: "
                           f"{', '.join(row[0] for row in rows)}).")
            else:
                out += lines[i:end]
            i = end
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def flip_example(samples: Sequence[dict]) -> dict | None:
    """The logged response with the most tokens whose advantage sign FSPO flipped (None when none was; a skipped
    step's row, whose advantages are null, has none)."""
    def flipped(record):
        advantage = record.get("advantage")
        if not isinstance(advantage, (int, float)):
            return 0
        return sum(1 for a in record.get("token_advantages") or () if isinstance(a, (int, float)) and a * advantage < 0)

    best = max(samples, key=flipped, default=None)
    return best if best is not None and flipped(best) > 0 else None
