"""summary.md from summary.json (and the blind audit's audit.json beside it): one source of numbers.

Notebook 04 writes summary.json; everything a reader sees in summary.md, and the README's result blocks
(`fspo_lite.drivers.report.readme`), is rendered from that file by the functions here. So summary.md can be
rewritten without rerunning anything (`python -m fspo_lite.drivers.report.readme --write`), and the verdict at its
top is the same text the README shows.

The verdict weighs, in this order: the paired difference in held-out step hallucination (method - baseline) by the
main judge and every other judge, the same difference at matched length (responses with the same number of
reasoning sentences), and the blind audit's hand labels when an audit.json is there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from fspo_lite.atomic import atomic_write_text
from fspo_lite.evaluation.result_files import read_summary
from fspo_lite.drivers.report.controls import control_headline, more_right_lead
from fspo_lite.drivers.report.lite import summary_markdown
from fspo_lite.drivers.report.plots import plot_judges
from fspo_lite.drivers.report.study import format_interval
from fspo_lite.drivers.report.summary import direction, plot_paired_differences, study_markdown
from fspo_lite.drivers.report.audit_file import read_audit

AUDIT_FILE = "audit.json"
SHARE = "step_hallucination@judge"
"""Any share metric: format_interval prints it in percent and its differences in points."""
SMOKE_TITLE = "Smoke test of the notebook sequence: the numbers mean nothing"


def _frame(records) -> pd.DataFrame:
    """A table from JSON records, JSON's null read back as NaN (pandas writes NaN as null)."""
    return pd.DataFrame([{k: (math.nan if v is None else v) for k, v in r.items()} for r in records or []])


def report_settings(summary: dict) -> dict:
    """The rendering settings notebook 04 recorded (title, order, goal pair, smoke), with defaults for summaries
    written before it recorded them."""
    report = dict(summary.get("report") or {})
    report.setdefault("title", "Lite reproduction: held-out results")
    report.setdefault("order", list(summary.get("methods") or {}))
    report.setdefault("method", (summary.get("goal") or {}).get("method", "fspo"))
    report.setdefault("baseline", (summary.get("goal") or {}).get("baseline", "grpo"))
    report.setdefault("smoke", False)
    return report


def _difference(stats: dict, metric: str, method: str) -> dict | None:
    for row in stats.get("differences") or []:
        if row["metric"] == metric and row["method"] == method:
            return {k: (math.nan if v is None else v) for k, v in row.items()}
    return None


def _matched(stats: dict, judge: str, method: str) -> dict | None:
    for row in stats.get("matched_length") or []:
        if row["judge"] == judge and row["method"] == method:
            return {k: (math.nan if v is None else v) for k, v in row.items()}
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not math.isnan(value)


def verdict(summary: dict, audit: dict | None = None) -> dict:
    """{"headline": one sentence, "lines": the evidence, one markdown bullet each}: what the summary's numbers say
    about `method` against `baseline` (report_settings). Pure: reads the summary and audit dicts only."""
    settings = report_settings(summary)
    method, baseline = settings["method"], settings["baseline"]
    if settings["smoke"]:
        return {"headline": "Smoke test: tiny random model, one step per run. The numbers mean nothing; this run "
                            "only shows that the notebooks run end to end.", "lines": []}
    stats = summary.get("statistics") or {}
    judges = stats.get("judges") or []
    raw = {j: _difference(stats, f"step_hallucination@{j}", method) for j in judges}
    main = judges[0] if judges else None
    if main is None or raw[main] is None or not _is_number(raw[main]["diff"]):
        return {"headline": f"No verdict: the runs hold no {method} - {baseline} difference in step hallucination "
                            "to read.", "lines": []}
    lines = []
    methods = summary.get("methods") or {}
    rates = {m: methods.get(m, {}).get("step_hallucination") for m in (method, baseline)}
    goal = summary.get("goal") or {}
    accuracy = _difference(stats, "accuracy", method)
    text = (f"Held-out step hallucination, {method} - {baseline}: "
            + "; ".join(f"{j} judge {format_interval(SHARE, r['diff'], r['low'], r['high'], True)}"
                        for j, r in raw.items() if r) + " points")
    if all(_is_number(v) for v in rates.values()):
        text += f" ({main} judge: {rates[method]:.1%} against {rates[baseline]:.1%})"
    if accuracy:
        text += (f"; accuracy {format_interval('accuracy', accuracy['diff'], accuracy['low'], accuracy['high'], True)}"
                 " points")
    lines.append(text + ".")
    if _is_number(goal.get("relative_drop")) and _is_number(goal.get("accuracy_delta_points")):
        lines.append(f"Preset target ({goal['target']}, {main} judge, point estimates): "
                     f"{'met' if goal['met'] else 'not met'} (relative drop {goal['relative_drop']:.1%}, accuracy "
                     f"{goal['accuracy_delta_points']:+.1f} points).")
    sentences = _difference(stats, "sentences_per_response", method)
    supported = _difference(stats, f"supported_per_response@{main}", method)
    matched = {j: _matched(stats, j, method) for j in judges}
    if sentences:
        text = (f"Length: {method} writes "
                f"{format_interval('count', sentences['diff'], sentences['low'], sentences['high'], True)} "
                "reasoning sentences per response")
        if supported:
            text += (f" and {format_interval('count', supported['diff'], supported['low'], supported['high'], True)}"
                     f" supported ones ({main} judge)")
        lines.append(text + ".")
    if any(matched.values()):
        lines.append("At matched length (responses with the same number of reasoning sentences): " + "; ".join(
            f"{j} judge {format_interval(SHARE, r['diff'], r['low'], r['high'], True)}"
            for j, r in matched.items() if r) + " points.")
    if audit:
        agreement = audit.get("judge_agreement") or {}
        lines.append(f"Blind audit ({audit['items']} sentences labelled by hand before unblinding): unsupported "
                     f"share {audit['difference']} "
                     f"{format_interval(SHARE, audit['diff'], audit['low'], audit['high'], True)} "
                     "points" + ("; the judges agree with the hand labels on " + ", ".join(
                         f"{a['agree']:.0%} ({j})" for j, a in agreement.items()) + " of the sentences"
                                 if agreement else "") + ".")

    drop = direction(raw[main])
    if drop != "below":
        headline = (f"{method} raises held-out step hallucination against {baseline}." if drop == "above" else
                    f"No difference in held-out step hallucination between {method} and {baseline} that the "
                    "intervals resolve.")
        return {"headline": headline, "lines": lines}
    length_explains = any(matched.values()) and all(direction(r) != "below" for r in matched.values() if r)
    audit_state = None if not audit else direction(audit)
    if length_explains:
        headline = (f"{method} makes reasoning shorter; this does not show that it makes reasoning more factual: "
                    "its drop in step hallucination disappears at matched length")
        if audit_state is not None and audit_state != "below":
            headline += ", and the blind audit does not confirm it"
    elif audit_state is not None and audit_state != "below":
        headline = (f"The automatic judges see lower step hallucination for {method}; the blind audit does not "
                    "confirm it")
    else:
        headline = f"{method} lowers held-out step hallucination against {baseline}"
        headline += ", also at matched length" if any(matched.values()) else ""
        headline += "; the blind audit confirms it" if audit_state == "below" else " (not checked by hand)"
    return {"headline": headline + ".", "lines": lines}


def verdict_markdown(result: dict) -> list[str]:
    """The verdict as markdown lines: the headline in bold, then the evidence as bullets."""
    return [f"**{result['headline']}**", *([""] if result["lines"] else []), *[f"- {line}" for line in result["lines"]]]


def resumed_note(runs: dict[str, int]) -> str:
    """What the invocation behind the wall time did: 'Runs: 36 trained in this invocation.' or, for one that
    resumed earlier work, how many it trained, resumed and skipped, and that the time is not the whole job's."""
    trained, resumed, skipped = (runs.get(k, 0) for k in ("trained", "resumed", "skipped"))
    if not (resumed or skipped):
        return f"Runs: {trained} trained in this invocation."
    return (f"Runs: this invocation trained {trained}, resumed {resumed} from their checkpoints and skipped "
            f"{skipped} finished by earlier ones, so its wall time is not the time of the whole job.")


def questions_of(stats: dict) -> dict | None:
    """summary.json's added-arms questions with their pairs as a table again (None when the study had none)."""
    questions = stats.get("questions")
    return {**questions, "pairs": _frame(questions["pairs"])} if questions else None


def summary_document(summary: dict, audit: dict | None = None) -> str:
    """The whole summary.md from summary.json's content (and the audit's): title, verdict, the per-method tables,
    the statistics sections, the figures not drawn, the wall time and the benchmark data."""
    settings = report_settings(summary)
    title = SMOKE_TITLE if settings["smoke"] else settings["title"]
    table = pd.DataFrame.from_dict(summary.get("methods") or {}, orient="index").astype(float, errors="ignore")
    diagnostics = summary.get("training_diagnostics")
    diagnostics = pd.DataFrame.from_dict(diagnostics, orient="index") if diagnostics else None
    lines = [f"# {title}", "", "## Verdict", "", *verdict_markdown(verdict(summary, audit))]
    controls = (summary.get("statistics") or {}).get("controls")
    if controls:  # the two questions' answers in one line; their section below has the tables
        lines.append(f"- Controls and newer rewards: (a) {control_headline(controls['control_checks'])} (b) "
                     + more_right_lead(controls["more_right"]))
    lines.append("")
    if len(table):
        text = summary_markdown(table, None, diagnostics, summary.get("settings"), title="")
        lines.append("## Per method\n" + text.split("\n", 1)[1])
    stats = summary.get("statistics")
    if stats and stats.get("methods"):
        tables = {"methods": _frame(stats["methods"]), "differences": _frame(stats["differences"])}
        goal = _frame(stats.get("caution_goal"))
        if not any("caution" in m for m in summary.get("methods") or {}):
            goal = None  # the caution goal only where a caution arm ran
        study = study_markdown(tables, _frame(stats.get("matched_length")), goal, stats.get("judges") or [],
                               settings["order"], None, stats.get("n_resamples", 2000), stats.get("level", 0.95),
                               detail=_frame(stats.get("detail_arm")), added=questions_of(stats),
                               controls=stats.get("controls") or None)
        lines.append(study.split("\n", 2)[2])
    if audit:
        lines += ["## Blind audit", "", audit_summary(audit), ""]
    lines += not_drawn_markdown({**(summary.get("figures_not_drawn") or {}), **((stats or {}).get("figures_not_drawn")
                                                                                 or {})})
    job = summary.get("job")
    if job:
        lines += [f"## Wall time (profile `{job['profile']}`)", "", "| notebook | seconds |", "|---|---|"]
        lines += [f"| {name} | {seconds:.0f} |" for name, seconds in job["notebook_seconds"].items()]
        lines += [f"| **total** | **{job['total_seconds']:.0f}** ({job['total_seconds'] / 60:.1f} min) |", ""]
        if job.get("runs"):
            lines += [resumed_note(job["runs"]), ""]
        if job.get("benchmark_data"):
            lines += ["Benchmark data: " + "; ".join(f"{k}: {v}" for k, v in job["benchmark_data"].items()), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def not_drawn_markdown(not_drawn: dict[str, str]) -> list[str]:
    """summary.md's lines on the figures not drawn because they had nothing to show ({file name: why}); none when
    every figure was drawn."""
    if not not_drawn:
        return []
    return ["## Figures not drawn", "", "A figure with nothing to show is not drawn:", "",
            *[f"- `{name}`: {why}." for name, why in not_drawn.items()], ""]


def audit_summary(audit: dict) -> str:
    """One paragraph on the blind audit's counts (docs/statistics.md, "The blind audit")."""
    counts = "; ".join(f"{m}: {c['supported']} supported, {c['unsupported']} unsupported, {c['not_checkable']} "
                       "not checkable" for m, c in audit["counts"].items())
    return (f"{audit['items']} reasoning sentences from {audit['questions']} held-out questions, drawn equally from "
            f"{' and '.join(audit['methods'])}, shuffled with the method hidden and labelled by hand before "
            f"unblinding ({counts}). Unsupported share {audit['difference']}: "
            f"{format_interval(SHARE, audit['diff'], audit['low'], audit['high'], True)} points "
            f"({audit['level']:.0%} bootstrap interval over questions, {audit['n_resamples']} resamples).")


def write_summary(results_dir: str | Path) -> Path:
    """Rewrite <results_dir>/summary.md from its summary.json and, when there, audit.json."""
    folder = Path(results_dir)
    summary = read_summary(folder / "summary.json")  # types and ranges checked
    audit_path = folder / AUDIT_FILE
    audit = read_audit(audit_path) if audit_path.exists() else None  # every field checked (audit_file.py)
    path = folder / "summary.md"
    atomic_write_text(path, summary_document(summary, audit))
    return path


def draw_figures(summary: dict, root: str | Path) -> list[Path]:
    """Draw the study figures again (paired differences, step hallucination by judge) from summary.json's
    statistics, at the paths it records (relative to `root`); no runs folder needed."""
    stats = summary.get("statistics") or {}
    paths = {name: Path(root) / path for name, path in (stats.get("figures") or {}).items()}
    judges = stats.get("judges") or []
    if "paired_differences" in paths and stats.get("differences"):
        plot_paired_differences(_frame(stats["differences"]), _frame(stats.get("matched_length")), judges,
                                paths["paired_differences"], stats.get("level", 0.95),
                                report_settings(summary)["order"])
    if "step_hallucination_by_judge" in paths and judges:
        plot_judges(_frame(stats["methods"]), judges, paths["step_hallucination_by_judge"],
                    report_settings(summary)["order"])
    return [p for name, p in paths.items() if name in ("paired_differences", "step_hallucination_by_judge")]
