"""The study summary: the statistics as markdown (per method, paired differences, per judge, the say-less
check, the detail arm, matched length, the caution goal) and `study_report`, which makes the tables, the
summary and the figures from a runs folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from fspo_lite.atomic import atomic_write_text
from fspo_lite.drivers.report.arms import (LONGER_QUESTION, VERIFIER_QUESTION, longer_check, pairs_table,
                                           questions_markdown, verifier_check)
from fspo_lite.drivers.report.controls import (CONTROLS, NEWER, advantage_mass, control_check, controls_markdown,
                                               more_right_check)
from fspo_lite.drivers.report.evidence import other_prompt_arms, without_arms
from fspo_lite.drivers.report.evidence_readings import evidence_section
from fspo_lite.drivers.report.evidence_text import evidence_markdown
from fspo_lite.drivers.report.lite import OTHER_METRICS, load_training, quiet_zero_tables
from fspo_lite.drivers.report.plots import (judges_not_drawn, mass_not_drawn, plot_advantage_mass, plot_judges,
                                            plot_paired_differences, plot_supported_unsupported)
from fspo_lite.drivers.report.reader import reader_statistics
from fspo_lite.drivers.report.sensitivity import seed_values, with_welch
from fspo_lite.drivers.report.study import (CAUTION_GOAL, DETAIL_ARM, LENGTH_STRATA, caution_goal, detail_arm_check,
                                            excludes_zero, format_interval, interval_side, judges_of, load_responses,
                                            matched_length, metric_cells, pair_differences, study_statistics,
                                            training_verifier)
from fspo_lite.evaluation.metrics import DECOMPOSITION
from fspo_lite.scoring.advantage_mass import REGIONS


def metric_order(metrics: Sequence[str], judges: Sequence[str]) -> list[str]:
    """The report's row order: answers, decomposition, each judge's rates and counts, length, other benchmarks."""
    wanted = ["accuracy", "incorrect", "not_attempted", "answer_f1", "format_rate", *DECOMPOSITION]
    for judge in judges:
        wanted += [f"step_hallucination@{judge}", f"supported_per_response@{judge}",
                   f"unsupported_per_response@{judge}", f"checkable_per_response@{judge}", f"judge_coverage@{judge}"]
    wanted += ["sentences_per_response", "response_tokens", "near_duplicates_per_response", *OTHER_METRICS]
    return [m for m in wanted if m in set(metrics)] + sorted(m for m in set(metrics) if m not in wanted)


def study_markdown(tables: dict, matched: pd.DataFrame | None, goal: pd.DataFrame | None, judges: Sequence[str],
                   order: Sequence[str], settings: dict | None = None, n_resamples: int = 2000,
                   level: float = 0.95, title: str = "Study: held-out results with intervals",
                   detail: pd.DataFrame | None = None, added: dict | None = None,
                   controls: dict | None = None) -> str:
    """The study summary: per method mean [interval]; every arm on the three axes and the two questions of the
    controls and newer rewards (`controls`, when given); paired differences to the baseline; step hallucination per
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
    if controls:
        lines += controls_markdown(controls, tables, matched if matched is not None else pd.DataFrame(), judges,
                                   methods, baseline or "grpo", pct)

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
                values.append(f"**{text}**" if excludes_zero(d) else text)
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
    if added:
        lines += questions_markdown(added["pairs"], added["verifier"], added["longer"], pct)
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
                  f"The target set for the caution reward: All-Attempt-and-Wrong (every one of a question's answers attempted and "
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
    return quiet_zero_tables("\n".join(lines)) + "\n"  # a table of zeros only: one line instead


def direction(row) -> str:
    """Where a difference's interval lies: 'below' 0 (high < 0), 'above' 0 (low > 0), 'unresolved' (it holds 0)
    or 'n/a' (no interval: NaN bounds)."""
    return interval_side(float(row["low"]), float(row["high"]))


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


@dataclass(frozen=True)
class Study:
    """What a study report reads and where it writes: notebook 04's parameters."""

    runs_dir: str | Path
    order: Sequence[str]
    """The methods, in the tables' order."""
    baseline: str = "grpo"
    """The method every other one is compared with."""
    figures_dir: str | Path = "figures"
    prefix: str = ""
    """Of the figure file names: <prefix>paired_differences.png, ..."""
    results_dir: str | Path | None = None
    """Where summary.md is written; None: the markdown is only returned."""
    detail_arm: tuple[str, str] = DETAIL_ARM
    """(arm, the method it adds the detail term to); when both were run, the summary answers the detail arm's
    question (`detail_arm_check`)."""
    verifier_question: tuple[str, str, str] = VERIFIER_QUESTION
    """(arm, reference, baseline) of "does a better verifier turn saying less into saying right?"
    (`verifier_check`)."""
    longer_question: tuple[tuple[str, str], tuple[str, str]] = LONGER_QUESTION
    """(a pair at the budget, the same pair trained longer) of "does longer training change the picture?"
    (`longer_check`)."""
    qa: str = "kbqa"
    """The short-QA benchmark whose answers and reasoning sentences the report is about (kbqa or multihop; one of
    notebook 03's eval_benchmarks)."""
    primary_judge: str | None = None
    """The judge read first (verdict, preset target, tables); None: the harness's main judge (docs/statistics.md)."""


@dataclass(frozen=True)
class Bootstrap:
    """The intervals' settings (docs/statistics.md)."""

    n_resamples: int = 2000
    seed: int = 0
    """Seeds the bootstrap's random draws."""
    level: float = 0.95


def study_report(study: Study, bootstrap: Bootstrap = Bootstrap(), settings: dict | None = None,
                 title: str | None = None) -> dict:
    """Everything above from a runs folder: the tables, <results_dir>/summary.md (when a results_dir is given) and
    summary.json's "statistics" part (returned), <figures_dir>/<prefix>paired_differences.png and
    <prefix>step_hallucination_by_judge.png, <prefix>supported_vs_unsupported.png and <prefix>advantage_mass.png,
    each when it has something to show (else "figures_not_drawn" says why). `settings` and `title` go to the
    markdown (`study_markdown`)."""
    boot = asdict(bootstrap)  # n_resamples, seed, level: the keywords of the statistics functions
    every_response = load_responses(study.runs_dir, study.qa)
    judges = judges_of(every_response, study.primary_judge)
    every_cell, every_step = metric_cells(every_response, study.runs_dir), load_training(study.runs_dir)
    # the main tables compare arms asked the baseline's held-out prompt; the others, for the evidence section only
    aside = other_prompt_arms(study.runs_dir, study.baseline)
    responses, cells, training = (without_arms(frame, aside) for frame in (every_response, every_cell, every_step))
    tables = study_statistics(cells, study.order, study.baseline, **boot)
    seeds = seed_values(cells)  # Welch's interval over seed values beside each bootstrap interval
    tables["differences"] = with_welch(tables["differences"], seeds, bootstrap.level)
    matched = matched_length(responses, study.baseline, **boot)
    goal = caution_goal(tables["differences"]) if len(tables["differences"]) else pd.DataFrame()
    detail = pd.DataFrame()
    if len(tables["differences"]) and set(study.detail_arm) <= set(tables["differences"]["method"]):
        counts = [f"{kind}_per_response@{j}" for j in judges for kind in ("supported", "unsupported")]
        versus = pair_differences(cells, counts, *study.detail_arm, **boot)
        detail = detail_arm_check(tables["differences"], versus, judges, *study.detail_arm)
    questions = added_arms(study, cells, responses, judges, boot, seeds)
    controls = controls_section(study, cells, responses, tables, matched, training, judges, boot)
    text = study_markdown(tables, matched, goal, judges, study.order, settings, bootstrap.n_resamples,
                          bootstrap.level, **({"title": title} if title else {}), detail=detail, added=questions,
                          controls=controls)
    evidence = (evidence_section(study.runs_dir, every_cell, every_response, every_step, judges, boot, aside=aside)
                or ({"set_aside": aside} if aside else {}))  # set-aside arms are named even without the study's arms
    text += "\n".join(evidence_markdown(evidence)) + ("\n" if evidence else "")
    figures, not_drawn = {}, {}

    def path(name: str) -> Path:
        return Path(study.figures_dir) / f"{study.prefix}{name}.png"

    def record(name: str, drawn, why: str | None = None) -> None:
        """The figure's path when it was drawn, else why it was not (when there is a reason to give)."""
        if drawn is not None:
            figures[name] = str(path(name))
        elif why:
            not_drawn[path(name).name] = why

    if len(tables["differences"]):
        record("paired_differences", plot_paired_differences(tables["differences"], matched, judges,
                                                             path("paired_differences"), bootstrap.level,
                                                             study.order),
               "no paired difference to the baseline is a number")
    why = judges_not_drawn(tables["methods"], judges)
    record("step_hallucination_by_judge", plot_judges(tables["methods"], judges, path("step_hallucination_by_judge"),
                                                      study.order), why)
    record("supported_vs_unsupported", plot_supported_unsupported(tables["methods"], judges,
                                                                  path("supported_vs_unsupported"), study.order), why)
    record("advantage_mass", plot_advantage_mass(training, path("advantage_mass"), study.order),
           mass_not_drawn(training))
    reader = reader_statistics(study.runs_dir, responses, seeds, tables["differences"],
                               (controls or {}).get("more_right") or [], training, judges, study.order, path, study.qa)
    figures.update(reader.pop("figures"))
    not_drawn.update(reader.pop("figures_not_drawn"))
    if study.results_dir is not None:
        Path(study.results_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(study.results_dir) / "summary.md", text)
    return {"markdown": text, "judges": judges, **boot,
            "methods": json.loads(tables["methods"].to_json(orient="records")),
            "differences": json.loads(tables["differences"].to_json(orient="records")),
            "matched_length": json.loads(matched.to_json(orient="records")),
            "caution_goal": json.loads(goal.to_json(orient="records")),
            "detail_arm": json.loads(detail.to_json(orient="records")),
            "questions": {**questions, "pairs": json.loads(questions["pairs"].to_json(orient="records"))}
            if questions else {}, "controls": controls, "evidence": evidence, "reader": reader, "figures": figures,
            "figures_not_drawn": not_drawn}


def added_arms(study: Study, cells: pd.DataFrame, responses: pd.DataFrame, judges: Sequence[str],
               boot: dict, seeds: pd.DataFrame | None = None) -> dict:
    """The added arms' two questions: the pairs' differences (`pairs_table`, with Welch over `seeds` beside each)
    and both checks; {} when neither question's arms were run."""
    arm, reference, baseline = study.verifier_question
    short, long = study.longer_question
    pairs = pairs_table(cells, responses, [(arm, reference), (arm, baseline), tuple(short), tuple(long),
                                           (long[1], short[1]), (long[0], short[0])], judges, **boot, seeds=seeds)
    verifier = verifier_check(pairs, judges, arm, reference, baseline, training_verifier(study.runs_dir, arm))
    longer = longer_check(pairs, judges, tuple(short), tuple(long))
    if verifier["answer"] == "n/a" and longer["answer"] == "n/a":
        return {}
    return {"pairs": pairs, "verifier": verifier, "longer": longer}


def controls_section(study: Study, cells: pd.DataFrame, responses: pd.DataFrame, tables: dict, matched: pd.DataFrame,
                     training: pd.DataFrame, judges: Sequence[str], boot: dict) -> dict:
    """The controls and newer rewards (fspo_lite.drivers.report.controls): question (a) per control, question (b)
    per trained arm, the advantage mass per arm, and the detail and accuracy axes at matched length (the three-axes
    tables' other matched columns); {} when none of those arms was run."""
    ran = set(cells["method"])
    if not ran & set(CONTROLS + NEWER):
        return {}
    arms = [m for m in study.order if m in ran and m not in ("base", study.baseline)]
    arms += [m for m in sorted(ran) if m not in arms and m not in ("base", study.baseline)]
    checks = [control_check(cells, judges, control, **boot) for control in CONTROLS if control in ran]
    right = more_right_check(tables["differences"], matched, judges, arms,
                             {arm: training_verifier(study.runs_dir, arm) for arm in arms})
    mass = advantage_mass(training, [study.baseline, *arms], REGIONS)
    axes = []
    for quantity in ("supported_per_response", "accuracy"):
        rows = matched_length(responses, study.baseline, quantity=quantity, **boot)
        for row in rows.to_dict(orient="records"):
            axes.append({"metric": f"{quantity}@{row['judge']}" if row["judge"] else quantity,
                         **{k: row[k] for k in ("method", "baseline", "diff", "low", "high")}})
    return {"control_checks": checks, "more_right": right, "advantage_mass": mass.to_dict(orient="records"),
            "matched_axes": axes}
