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
from fspo_lite.drivers.report.evidence_text import evidence_lead, evidence_markdown
from fspo_lite.drivers.report.lite import goal_check, summary_markdown
from fspo_lite.drivers.report.plots import plot_judges, plot_paired_differences
from fspo_lite.drivers.report.reader import (examples_markdown, figures_markdown, main_table_markdown,
                                             positions_markdown)
from fspo_lite.drivers.report.sensitivity import resolvable_markdown, sensitivity_markdown, welch_more_markdown
from fspo_lite.drivers.report.study import format_interval
from fspo_lite.drivers.report.summary import direction, study_markdown
from fspo_lite.drivers.report.validity import (VALIDITY_FILE, draw_reading, second_audit_markdown,
                                               second_audit_reading, validity_markdown)
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


def welch_note(row: dict | None) -> str:
    """' (seeds, Welch [-12.0, +2.9])' beside a difference that carries Welch's interval over seed values, else ''."""
    if not row or not _is_number(row.get("welch_low")) or not _is_number(row.get("welch_high")):
        return ""
    return f" (seeds, Welch [{100 * row['welch_low']:+.1f}, {100 * row['welch_high']:+.1f}])"


def preset_targets(summary: dict, judges, method: str, baseline: str) -> dict:
    """The preset target (lite.goal_check's rule) on each judge's point estimates, from the statistics."""
    cells = {(r["metric"], r["method"]): r["mean"] for r in (summary.get("statistics") or {}).get("methods") or []}
    out = {}
    for judge in judges:
        values = {m: (cells.get((f"step_hallucination@{judge}", m)), cells.get(("accuracy", m))) for m in (method,
                                                                                                       baseline)}
        if all(_is_number(v) for pair in values.values() for v in pair):
            table = pd.DataFrame({"step_hallucination": {m: v[0] for m, v in values.items()},
                                  "accuracy": {m: v[1] for m, v in values.items()}})
            out[judge] = goal_check(table, method, baseline)
    return out


def judge_name(judge: str, main: str, primary: bool) -> str:
    return f"{judge} judge" + (" (primary)" if primary and judge == main else "")


def matched_phrase(matched: dict, raw: dict, main: str) -> str:
    """How the drop fares at matched length, said as the numbers say it: 'disappears' only when no judge's
    matched point estimate is below 0; otherwise 'is not resolved', with the main judge's two numbers."""
    rows = {j: r for j, r in matched.items() if r}
    if all(r["diff"] >= 0 for r in rows.values()):
        return "its drop in step hallucination disappears at matched length"
    m = rows.get(main) or next(iter(rows.values()))
    judge = main if main in rows else next(iter(rows))
    return (f"at matched length its drop in step hallucination is not resolved under any judge ({judge} judge "
            f"{format_interval(SHARE, m['diff'], m['low'], m['high'], True)} against "
            f"{format_interval(SHARE, raw[judge]['diff'], math.nan, math.nan, True)} raw)")


def verdict(summary: dict, audit: dict | None = None, validity: dict | None = None) -> dict:
    """{"headline": one sentence, "lines": the evidence, one markdown bullet each}: what the summary's numbers say
    about `method` against `baseline` (report_settings), the first judge of the statistics leading (the primary
    one when the study names it). Pure: reads the summary, audit and judge-validity dicts only."""
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
    primary = bool((stats.get("reader") or {}).get("primary"))
    name = {j: judge_name(j, main, primary) for j in judges}
    lines = []
    cells = {(r["metric"], r["method"]): r for r in stats.get("methods") or []}
    rates = {m: (cells.get((f"step_hallucination@{main}", m)) or {}).get("mean") for m in (method, baseline)}
    accuracy = _difference(stats, "accuracy", method)
    text = (f"Held-out step hallucination, {method} - {baseline}: "
            + "; ".join(f"{name[j]} {format_interval(SHARE, r['diff'], r['low'], r['high'], True)}{welch_note(r)}"
                        for j, r in raw.items() if r) + " points")
    if all(_is_number(v) for v in rates.values()):
        text += f" ({main} judge: {rates[method]:.1%} against {rates[baseline]:.1%})"
    if accuracy:
        text += (f"; accuracy {format_interval('accuracy', accuracy['diff'], accuracy['low'], accuracy['high'], True)}"
                 " points")
    lines.append(text + ".")
    targets = preset_targets(summary, judges, method, baseline)
    goal = summary.get("goal") or {}
    if targets:
        text = (f"Preset target ({next(iter(targets.values()))['target']}, point estimates): " + "; ".join(
            f"{name[j]}: {'met' if g['met'] else 'not met'} (relative drop {g['relative_drop']:.1%}, accuracy "
            f"{g['accuracy_delta_points']:+.1f} points)" for j, g in targets.items()))
        met = [j for j, g in targets.items() if g["met"]]
        if 0 < len(met) < len(targets):
            text += f". The answer changes with the judge: met under the {', '.join(met)} judge only"
        lines.append(text + ".")
    elif _is_number(goal.get("relative_drop")) and _is_number(goal.get("accuracy_delta_points")):
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
    bare = {m: cells.get((f"no_checkable@{main}", m)) for m in (method, baseline)}
    if all(bare.values()):
        d = _difference(stats, f"no_checkable@{main}", method)
        lines.append(f"Bare-name escape (responses whose reasoning has no sentence the {main} judge can check, which "
                     f"the flip cannot act on): {method} "
                     f"{format_interval(SHARE, *(bare[method][k] for k in ('mean', 'low', 'high')))}%, {baseline} "
                     f"{format_interval(SHARE, *(bare[baseline][k] for k in ('mean', 'low', 'high')))}%"
                     + (f", difference {format_interval(SHARE, d['diff'], d['low'], d['high'], True)} points"
                        if d else "") + ".")
    if any(matched.values()):
        lines.append("At matched length (responses with the same number of reasoning sentences): " + "; ".join(
            f"{name[j]} {format_interval(SHARE, r['diff'], r['low'], r['high'], True)}{welch_note(r)}"
            for j, r in matched.items() if r) + " points.")
    claims = {j: _difference(stats, f"claims_step_hallucination@{j}", method) for j in judges if j != main}
    if primary and any(claims.values()):
        lines.append(f"Robustness, over the sentences the {main} judge finds checkable only (bare names left out): "
                     + "; ".join(f"{name[j]} {format_interval(SHARE, r['diff'], r['low'], r['high'], True)}"
                                 for j, r in claims.items() if r) + " points.")
    if audit:
        draw = draw_reading(validity or {}, main if primary else "kb")
        lines.append(f"Blind audit ({audit['items']} sentences labelled by hand before unblinding): unsupported "
                     f"share {audit['difference']} "
                     f"{format_interval(SHARE, audit['diff'], audit['low'], audit['high'], True)} points"
                     + (f"; {draw}" if draw else "") + ".")
    second = second_audit_reading(validity or {}, main if primary else "kb")
    if second:
        lines.append(second)

    drop = direction(raw[main])
    if drop != "below":
        headline = (f"{method} raises held-out step hallucination against {baseline}." if drop == "above" else
                    f"No difference in held-out step hallucination between {method} and {baseline} that the "
                    "intervals resolve.")
        return {"headline": headline, "lines": lines}
    length_explains = any(matched.values()) and all(direction(r) != "below" for r in matched.values() if r)
    states = audit_states(audit, validity, f"{method} - {baseline}")
    audit_state = None if not states else ("below" if all(x == "below" for x in states) else "not below")
    unconfirmed = ("the blind audit does not confirm it" if len(states) == 1 else
                   "neither blind audit confirms it" if "below" not in states else "the blind audits disagree")
    if length_explains:
        headline = (f"{method} makes reasoning shorter; this does not show that it makes reasoning more factual: "
                    + matched_phrase(matched, raw, main))
        if audit_state is not None and audit_state != "below":
            headline += f", and {unconfirmed}"
    elif audit_state is not None and audit_state != "below":
        headline = f"The automatic judges see lower step hallucination for {method}; {unconfirmed}"
    else:
        headline = f"{method} lowers held-out step hallucination against {baseline}"
        headline += ", also at matched length" if any(matched.values()) else ""
        headline += ((f"; the blind audit{'s confirm' if len(states) > 1 else ' confirms'} it")
                     if audit_state == "below" else " (not checked by hand)")
    return {"headline": headline + ".", "lines": lines}


def audit_states(audit: dict | None, validity: dict | None, pair: str) -> list[str]:
    """Where each blind audit's unsupported-share difference for `pair` ('fspo - grpo') lies ('below' 0, ...): the
    first audit's (audit.json), then the second's (judge_validity.json's second audit) when it compares that pair."""
    states = [direction(audit)] if audit else []
    second = ((((validity or {}).get("sets") or {}).get("second audit") or {}).get("arms") or {})
    if pair in (second.get("differences") or {}):
        states.append(direction(second["differences"][pair]))
    return states


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


def runs_time_sentence(times: dict) -> str:
    """What the runs themselves took, from their measured files (reader.time_totals): the sum of every run's
    training steps and evaluation, and the range per run; '' without measured runs."""
    if not times:
        return ""

    def minutes(pair):
        return f"{pair[0] / 60:.1f}-{pair[1] / 60:.1f} min"

    text = (f"The study's {times['models']} models took {times['total_seconds'] / 3600:.1f} h of measured time: "
            f"training {times['train_seconds'] / 3600:.1f} h over {times['trained']} runs")
    if times.get("train_range"):
        text += f" ({minutes(times['train_range'])} each)"
    return (text + f", evaluation {times['eval_seconds'] / 3600:.1f} h ({minutes(times['eval_range'])} each); "
            f"{minutes(times['run_range'])} per model, training and evaluation together (each run's metrics.jsonl "
            "step times and eval/summary.json benchmark seconds, summed; model loading and the report not "
            "counted).")


def last_invocation_sentence(job: dict) -> str:
    """What the last invocation of the job did and how long it took, said apart from the runs' own time."""
    runs = job.get("runs") or {}
    trained, resumed, skipped = (runs.get(k, 0) for k in ("trained", "resumed", "skipped"))
    total = job.get("total_seconds")
    took = f"{total / 60:.1f} min" if total else "an unrecorded time"
    if runs and not trained and not resumed:
        did = f"trained no run and skipped the {skipped} finished ones: it read the runs and wrote the report"
    elif runs:
        did = f"trained {trained}, resumed {resumed} from their checkpoints and skipped {skipped} finished runs"
    else:
        did = "ran " + (", ".join(job.get("notebook_seconds") or {}) or "the notebooks")
    return f"The last invocation (`{job.get('command', 'n/a')}`) {did}, in {took}."


def questions_of(stats: dict) -> dict | None:
    """summary.json's added-arms questions with their pairs as a table again (None when the study had none)."""
    questions = stats.get("questions")
    return {**questions, "pairs": _frame(questions["pairs"])} if questions else None


def summary_document(summary: dict, audit: dict | None = None, validity: dict | None = None) -> str:
    """The whole summary.md from summary.json's content (and the audit's): title, verdict, the per-method tables,
    the statistics sections, the figures not drawn, the wall time and the benchmark data."""
    settings = report_settings(summary)
    title = SMOKE_TITLE if settings["smoke"] else settings["title"]
    table = pd.DataFrame.from_dict(summary.get("methods") or {}, orient="index").astype(float, errors="ignore")
    diagnostics = summary.get("training_diagnostics")
    diagnostics = pd.DataFrame.from_dict(diagnostics, orient="index") if diagnostics else None
    lines = [f"# {title}", "", "## Verdict", "", *verdict_markdown(verdict(summary, audit, validity))]
    stats = summary.get("statistics") or {}
    reader = stats.get("reader") or {}
    controls = stats.get("controls")
    if controls:  # the two questions' answers in one line; their section below has the tables
        lines.append(f"- Controls and newer rewards: (a) {control_headline(controls['control_checks'])} (b) "
                     + more_right_lead(controls["more_right"], reader.get("primary"), reader.get("holm")))
    lines += [*evidence_lead(stats.get("evidence")), ""]
    if validity and validity.get("sets"):
        lines += ["## How far each judge agrees with people", "", *validity_markdown(validity, reader.get("primary")),
                  ""]
    lines += main_table_markdown(stats, settings["order"])
    if len(table):
        text = summary_markdown(table, None, diagnostics, summary.get("settings"), title="")
        harness = (summary.get("settings") or {}).get("step-hallucination judge")
        heading = "## Per method" + (f" (the harness's table: step hallucination by its main judge, {harness})"
                                     if harness and reader.get("primary") not in (None, harness) else "")
        lines.append(heading + "\n" + text.split("\n", 1)[1])
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
        lines += [study.split("\n", 2)[2], *evidence_markdown(stats.get("evidence"))]
        if not settings["smoke"]:  # seed-level readings of a smoke test's numbers would only add noise
            lines += [*sensitivity_markdown(stats["differences"], stats.get("judges") or [], reader.get("holm") or [],
                                            settings["order"]), *welch_more_markdown(stats)]
        lines += [*resolvable_markdown(reader.get("resolvable") or {}),
                  *positions_markdown(reader.get("positions") or [], reader.get("primary"), settings["order"]),
                  *examples_markdown(reader.get("examples") or [], stats.get("judges") or []),
                  *figures_markdown(stats.get("figures") or {}), ""]
    if audit:
        lines += ["## Blind audit", "", audit_summary(audit), ""]
    lines += second_audit_markdown(validity or {}, reader.get("primary"))
    lines += not_drawn_markdown({**(summary.get("figures_not_drawn") or {}), **((stats or {}).get("figures_not_drawn")
                                                                                 or {})})
    job = summary.get("job")
    measured = runs_time_sentence(((stats or {}).get("reader") or {}).get("run_times") or {})
    if measured:
        lines += ["## Time the runs took", "", measured, ""]
    if job:
        lines += [f"## Wall time of the last invocation (profile `{job['profile']}`)", "", "| notebook | seconds |",
                  "|---|---|"]
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
    validity = json.loads((folder / VALIDITY_FILE).read_text()) if (folder / VALIDITY_FILE).exists() else None
    path = folder / "summary.md"
    atomic_write_text(path, summary_document(summary, audit, validity))
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
