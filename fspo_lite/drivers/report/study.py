"""The study's statistics (docs/statistics.md): per-response rows from the runs' records, every metric as
numerator and denominator per (method, seed, question) cell, bootstrap intervals over questions and seeds,
paired and matched-length differences, the caution goal and the detail arm's question.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from fspo_lite.drivers.cli_help import MissingFileError
from fspo_lite.evaluation.metrics import DECOMPOSITION, decomposition_class
from fspo_lite.evaluation.result_files import read_heldout, read_records


LENGTH_STRATA = 5
"""Matched-length strata: responses with 1, 2, 3, 4 and 5 or more reasoning sentences."""
CAUTION_GOAL = {"relative_drop": 0.30, "correct_points": 2.0}
"""The target set for the caution reward: All-Attempt-and-Wrong down >= 30% relative to GRPO with correct
answers down by at most 2 points."""


def _runs(runs_dir: str | Path):
    """(run name, heldout.json record, eval/records.jsonl rows) of every evaluated run, sorted by name."""
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        records_path = path.parent / "eval" / "records.jsonl"
        if not records_path.exists():
            continue
        info = read_heldout(path)  # both checked for types and ranges, refused by file and line
        rows = read_records(records_path)
        yield path.parent.name, info, rows


def judge_labels(record: dict, default_judge: str) -> dict[str, list[int]]:
    """A short-QA record's sentence labels per judge (records written before the harness kept several judges
    hold only `sentence_labels`, the main judge's)."""
    return record.get("sentence_labels_by_judge") or {default_judge: record.get("sentence_labels") or []}


def not_evaluated(qa: str) -> str:
    """What to do when no run of a runs folder holds the short-QA benchmark `qa`'s held-out results."""
    return (f"run notebook 03 first, with {qa} among its eval_benchmarks, or name in notebook 04's `qa` a "
            f"short-QA benchmark that it evaluated")


CLAIMS_JUDGE = "kb"
"""The judge whose 'checkable' says whether a sentence makes a claim at all (it agrees with the hand labels on
that: docs/verifiers.md); a bare name (`<think>Oxygen</think>`) is not checkable by it."""


def load_responses(runs_dir: str | Path, qa: str = "kbqa", claims_judge: str = CLAIMS_JUDGE) -> pd.DataFrame:
    """One row per held-out short-QA response of every run: method, seed, question, grades, length (reasoning
    sentences, generated tokens, near-duplicate sentences) and per judge j the counts supported@j, unsupported@j,
    checkable@j of its reasoning sentences, and claims_unsupported@j, claims_checkable@j: the same counted over the
    sentences `claims_judge` finds checkable only (when the records carry its labels)."""
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
            by_judge = judge_labels(r, info.get("judge", "judge"))
            claims = by_judge.get(claims_judge)
            for judge, labels in by_judge.items():
                row[f"supported@{judge}"] = sum(1 for x in labels if x > 0)
                row[f"unsupported@{judge}"] = sum(1 for x in labels if x < 0)
                row[f"checkable@{judge}"] = sum(1 for x in labels if x != 0)
                if claims is not None:
                    kept = [x for x, c in zip(labels, claims) if c]
                    row[f"claims_unsupported@{judge}"] = sum(1 for x in kept if x < 0)
                    row[f"claims_checkable@{judge}"] = sum(1 for x in kept if x != 0)
            rows.append(row)
    if not rows:
        raise MissingFileError(f"no {qa} records under {runs_dir}/*/eval/records.jsonl: {not_evaluated(qa)}")
    frame = pd.DataFrame(rows)
    frame["seed"] = frame["seed"].fillna(-1).astype(int)
    for column in ("response_tokens", "near_duplicates"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def judges_of(responses: pd.DataFrame, primary: str | None = None) -> list[str]:
    """The judges whose labels the responses carry, in the order the harness wrote them (main judge first), or with
    `primary` first when it is one of them (docs/statistics.md, "Amendment: the kb judge leads")."""
    judges = [c.split("@", 1)[1] for c in responses.columns if c.startswith("checkable@")]
    return sorted(judges, key=lambda j: j != primary) if primary in judges else judges


def metric_cells(responses: pd.DataFrame, runs_dir: str | Path | None = None) -> pd.DataFrame:
    """Every metric as numerator and denominator per (method, seed, question) cell (the form fspo_lite.stats
    resamples): shares of answers, per-response means, step hallucination per judge (unsupported / checkable),
    the decomposition classes (100 x [question in class] / 1) and, from runs_dir, TruthfulQA MC and HaluEval."""
    keys = ["method", "seed", "question"]
    responses = responses.assign(**{f"no_checkable@{j}": (responses[f"checkable@{j}"] == 0).astype(float)
                                    for j in judges_of(responses)})
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
        specs[f"no_checkable@{judge}"] = (f"no_checkable@{judge}", None)
        if f"claims_checkable@{judge}" in responses:
            specs[f"claims_step_hallucination@{judge}"] = (f"claims_unsupported@{judge}", f"claims_checkable@{judge}")
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


def cell_arrays(cells: pd.DataFrame, method: str, questions: list) -> tuple:
    """(num, den) arrays (seeds x questions) of one metric's cells for one method, 0/0 where a cell is missing."""
    sub = cells[cells["method"] == method]
    num = sub.pivot_table(index="seed", columns="question", values="num", aggfunc="sum").reindex(columns=questions)
    den = sub.pivot_table(index="seed", columns="question", values="den", aggfunc="sum").reindex(columns=questions)
    return num.fillna(0.0).to_numpy(), den.fillna(0.0).to_numpy()


def metric_rng(seed: int, name: str):
    import zlib

    import numpy as np

    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def study_statistics(cells: pd.DataFrame, order: Sequence[str] | None = None, baseline: str = "grpo",
                     n_resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, pd.DataFrame]:
    """Per method and metric the mean over seeds with its bootstrap interval ("methods"), and every trained
    method's paired difference to `baseline` on the same questions ("differences"; the base model is left out).
    Each metric draws from its own generator seeded by (seed, metric name)."""
    from fspo_lite import stats

    methods = [m for m in (order or []) if m in set(cells["method"])]
    methods += [m for m in cells["method"].unique() if m not in methods]
    rows, diffs = [], []
    for metric, sub in cells.groupby("metric", sort=False):
        questions = sorted(sub["question"].unique())
        arrays = {m: cell_arrays(sub, m, questions) for m in methods if (sub["method"] == m).any()}
        rng = metric_rng(seed, metric)
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


MATCHED_QUANTITIES = ("step_hallucination", "supported_per_response", "accuracy")
"""What `matched_length` compares at matched length: the precision, detail and accuracy axes."""


def matched_length(responses: pd.DataFrame, baseline: str = "grpo", strata: int = LENGTH_STRATA,
                   n_resamples: int = 2000, seed: int = 0, level: float = 0.95,
                   quantity: str = "step_hallucination") -> pd.DataFrame:
    """A quantity, method vs baseline, at matched length: responses are stratified by their number of reasoning
    sentences (1, 2, ..., `strata` or more); within a stratum each method has its rate; both are standardized to the
    same weights, the share of the two methods' responses in each stratum (fspo_lite.stats.matched_difference).

    - `step_hallucination` (per judge): unsupported / checkable sentences, over the responses with a checkable
      sentence (the weights count those);
    - `supported_per_response` (per judge): supported sentences per response, over the same responses;
    - `accuracy`: correct answers per response, over the responses with a reasoning sentence (judge '').
    Responses without reasoning sentences are in no stratum."""
    import numpy as np

    from fspo_lite import stats

    if quantity not in MATCHED_QUANTITIES:
        raise ValueError(f"quantity {quantity!r} is not one of {', '.join(MATCHED_QUANTITIES)}")
    frame = responses[responses["sentences"] > 0].copy()
    frame["stratum"] = frame["sentences"].map(lambda n: length_stratum(n, strata))
    frame["one"] = 1.0
    rows = []
    for judge in judges_of(frame) if quantity != "accuracy" else [""]:
        # the step-hallucination stream keeps its old name, so its intervals do not move
        rng = metric_rng(seed, f"matched@{judge}" if quantity == "step_hallucination" else f"matched@{quantity}@{judge}")
        questions = sorted(frame["question"].unique())
        num_column, den_column = {"step_hallucination": (f"unsupported@{judge}", f"checkable@{judge}"),
                                  "supported_per_response": (f"supported@{judge}", "one"),
                                  "accuracy": ("correct", "one")}[quantity]
        for method in [m for m in frame["method"].unique() if m not in (baseline, "base")]:
            pair = frame[frame["method"].isin([method, baseline])]
            if judge:
                pair = pair[pair[f"checkable@{judge}"] > 0]
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
                sums = sub.groupby(["seed", "question", "stratum"])[[num_column, den_column]].sum()
                for (s, q, k), (numerator, denominator) in sums.iterrows():
                    num[s_index[s], q_index[q], k], den[s_index[s], q_index[q], k] = numerator, denominator
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
        if "welch_relative_low" in d.columns:  # Welch over seed values beside the bootstrap (with_welch)
            row.update({"aaw_relative_welch_low": aaw["welch_relative_low"],
                        "aaw_relative_welch_high": aaw["welch_relative_high"],
                        "correct_points_welch_low": 100 * acc["welch_low"],
                        "correct_points_welch_high": 100 * acc["welch_high"]})
        if "not_attempted" in d.index:
            na = d.loc["not_attempted"]
            row.update({"not_attempted_points": 100 * na["diff"], "not_attempted_points_low": 100 * na["low"],
                        "not_attempted_points_high": 100 * na["high"]})
        row["met"] = bool(row["aaw_relative"] <= -relative_drop and row["correct_points"] >= -correct_points)
        row["holds"] = bool(row["aaw_relative_high"] <= -relative_drop and row["correct_points_low"] >= -correct_points)
        if "aaw_relative_welch_high" in row:
            row["holds_welch"] = bool(row["aaw_relative_welch_high"] <= -relative_drop
                                      and row["correct_points_welch_low"] >= -correct_points)
        rows.append(row)
    return pd.DataFrame(rows)


def pair_differences(cells: pd.DataFrame, metrics: Sequence[str], method: str, other: str, n_resamples: int = 2000,
                     seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """`method` - `other` on the same questions for each of `metrics` (fspo_lite.stats.paired_difference; the
    rows look like study_statistics' "differences" with baseline = other). Metrics one of the two lacks are left
    out."""
    from fspo_lite import stats

    rows = []
    for metric in metrics:
        sub = cells[cells["metric"] == metric]
        if not ((sub["method"] == method).any() and (sub["method"] == other).any()):
            continue
        questions = sorted(sub["question"].unique())
        result = stats.paired_difference(*cell_arrays(sub, method, questions), *cell_arrays(sub, other, questions),
                                         n_resamples, metric_rng(seed, f"{metric}:{method}-{other}"), level)
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


def interval_side(low: float, high: float) -> str:
    """Where an interval lies against 0: 'below' (high < 0), 'above' (low > 0), 'unresolved' (it holds 0) or
    'n/a' (NaN bounds: no interval)."""
    if math.isnan(low) or math.isnan(high):
        return "n/a"
    return "below" if high < 0 else "above" if low > 0 else "unresolved"


def training_verifier(runs_dir: str | Path, method: str) -> str | None:
    """The verifier `method`'s runs were trained with (their heldout.json's train_verifier), None if no run. Reads
    the heldout.json files only, not the runs' records."""
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        info = read_heldout(path)
        if info.get("method") == method:
            return info.get("train_verifier")
    return None


PERCENT_METRICS = ("accuracy", "incorrect", "not_attempted", "answer_f1", "format_rate", "truthfulqa_mc1",
                   "truthfulqa_mc2", "halueval_accuracy")
"""Shares shown in percent (the decomposition classes are percentages already, the rest are counts)."""
def is_share(metric: str) -> bool:
    """Whether a metric is a share (shown in percent, its differences in percentage points)."""
    return metric in PERCENT_METRICS or metric.startswith(("step_hallucination@", "judge_coverage@", "no_checkable@",
                                                           "claims_step_hallucination@"))


def metric_scale(metric: str) -> float:
    """The factor a metric is shown with: 100 for shares, 1 for counts."""
    return 100.0 if is_share(metric) else 1.0


def shown_digits(metric: str) -> int:
    """Decimals a metric is shown with: 1 for shares and the decomposition (percent), 2 for counts."""
    return 1 if is_share(metric) or metric in DECOMPOSITION else 2


def format_interval(metric: str, mean: float, low: float, high: float, signed: bool = False) -> str:
    """'12.3 [8.1, 16.0]' in the metric's unit (percent / points for shares)."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    scale, places = metric_scale(metric), shown_digits(metric)
    sign = "+" if signed else ""
    text = f"{mean * scale:{sign}.{places}f}"
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{low * scale:{sign}.{places}f}, {high * scale:{sign}.{places}f}]"
    return text


def excludes_zero(row) -> bool:
    """Whether a row's interval (low, high) lies wholly on one side of 0 (NaN bounds: no)."""
    return not (math.isnan(row["low"]) or math.isnan(row["high"])) and (row["low"] > 0 or row["high"] < 0)
