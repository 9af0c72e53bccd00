"""The README's result blocks and the committed summaries, rendered from the committed result files.

Every number the README shows about the lite job and the study sits between markers
`<!-- results:NAME -->` ... `<!-- /results:NAME -->` and is rendered here from results/summary.json and
results/study/summary.json (and results/study/audit.json, the blind audit); nothing between the markers is
typed by hand. The same run rewrites results/summary.md and results/study/summary.md from their summary.json
(`render.write_summary`), so the README's verdict is the summary's verdict, word for word.

    python -m fspo_lite.drivers.report.readme           # rewrite the blocks and the summaries (make report)
    python -m fspo_lite.drivers.report.readme --check   # exit 1, naming what differs (tests/test_readme.py)
    python -m fspo_lite.drivers.report.readme --figures # also redraw the study figures from summary.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from fspo_lite.atomic import atomic_write_text
from fspo_lite.evaluation.result_files import read_summary
from fspo_lite.drivers.report.controls import control_lead, more_right_lead, readings_markdown
from fspo_lite.drivers.report.render import (AUDIT_FILE, draw_figures, last_invocation_sentence, report_settings,
                                             resumed_note, runs_time_sentence, summary_document, verdict,
                                             verdict_markdown)
from fspo_lite.drivers.report.plain import plain_words
from fspo_lite.drivers.report.evidence_text import evidence_paragraph
from fspo_lite.drivers.report.study import format_interval
from fspo_lite.drivers.report.validity import VALIDITY_FILE, validity_markdown
from fspo_lite.drivers.report.audit_file import read_audit

ROOT = Path(__file__).resolve().parents[3]
SUMMARIES = {"lite": "results", "study": "results/study"}
"""Result folder of each summary the README quotes (relative to the repository root)."""
STUDY_ROWS = (("accuracy", "accuracy %"), ("step_hallucination@{primary}", "step halluc. % ({primary})"),
              ("no_checkable@{primary}", "no checkable sentence % ({primary})"),
              ("supported_per_response@{primary}", "supported / response ({primary})"),
              ("step_hallucination@{second}", "step halluc. % ({second})"),
              ("step_hallucination@{third}", "step halluc. % ({third})"), ("sentences_per_response", "sentences"))
"""The README's study table; {primary} is the first judge of the statistics, {second} and {third} the others."""
LITE_COLUMNS = (("accuracy", "accuracy %"), ("answer_f1", "answer F1 %"), ("not_attempted", "not attempted %"),
                ("step_hallucination", "step hallucination %"), ("format_rate", "well-formed %"),
                ("truthfulqa_mc2", "TruthfulQA MC2 %"), ("halueval_accuracy", "HaluEval acc. %"))


def load(folder: str | Path) -> tuple[dict, dict | None]:
    """(summary.json, audit.json or None) of a results folder."""
    folder = Path(folder)
    audit = folder / AUDIT_FILE
    return (read_summary(folder / "summary.json"),
            read_audit(audit) if audit.exists() else None)  # every field checked: nothing unchecked reaches the README


def load_validity(folder: str | Path) -> dict | None:
    """judge_validity.json of a results folder (docs/statistics.md, "Judge validity"), None when there is none."""
    path = Path(folder) / VALIDITY_FILE
    return json.loads(path.read_text()) if path.exists() else None


def study_table(summary: dict) -> str:
    """One row per trained arm, STUDY_ROWS as columns: mean over seeds [95% interval] from the statistics."""
    stats = summary["statistics"]
    methods = [m for m in report_settings(summary)["order"] if m != "base"]
    cells = {(r["metric"], r["method"]): r for r in stats["methods"]}
    judges = dict(zip(("primary", "second", "third"), stats.get("judges") or []))
    rows = [(m.format(**judges), label.format(**judges)) for m, label in STUDY_ROWS
            if all(f"{{{k}}}" not in m or k in judges for k in ("primary", "second", "third"))]
    lines = ["| arm | " + " | ".join(label for _, label in rows) + " |", "|---|" + "---|" * len(rows)]
    for method in methods:
        if not any((metric, method) in cells for metric, _ in rows):
            continue
        values = [format_interval(metric, *(cells[(metric, method)][k] for k in ("mean", "low", "high")))
                  if (metric, method) in cells else "" for metric, _ in rows]
        lines.append(f"| {method} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def lite_table(summary: dict) -> str:
    """Every method of the lite job: mean over seeds ± half the range over seeds."""
    lines = ["| method | seeds | " + " | ".join(label for _, label in LITE_COLUMNS) + " |",
             "|---|---|" + "---|" * len(LITE_COLUMNS)]
    for method, row in summary["methods"].items():
        seeds = int(row["seeds"])

        def cell(metric):
            if row.get(metric) is None:
                return "n/a"
            spread = row.get(f"{metric}_spread")
            return f"{100 * row[metric]:.1f}" + (f" ± {50 * spread:.1f}" if seeds > 1 and spread is not None else "")

        lines.append(f"| {method} | {seeds} | " + " | ".join(cell(metric) for metric, _ in LITE_COLUMNS) + " |")
    return "\n".join(lines)


def controls_block(summary: dict) -> str:
    """The two questions of the controls and newer rewards, answered with their intervals (summary.md has the
    three-axes tables behind them)."""
    controls = (summary.get("statistics") or {}).get("controls")
    reader = (summary.get("statistics") or {}).get("reader") or {}
    if not controls:
        return ("Not answered yet: the study's summary has no run of the controls (`random`, `format`) or the newer "
                "rewards (`ternary`, `binary`, `corver`). `make study` trains them (it resumes where it stopped).")
    lines = ["**(a) How much of FSPO's change does a reward without information produce?** *all of it*: the control "
             "moves the reading the same way as FSPO and FSPO - control holds 0 (the share is the control's change "
             "over FSPO's, point estimates); *none of it*: the control does not move it that way while FSPO does.",
             "", *[f"- {control_lead(c)}" for c in controls["control_checks"]], "",
             "**(b) Does any arm lower step hallucination against grpo without writing fewer supported sentences "
             f"per response?** {more_right_lead(controls['more_right'], reader.get('primary'), reader.get('holm'))} Every arm under every held-out judge: "
             "results/study/summary.md, \"Controls and newer rewards\"."]
    return "\n".join(lines + readings_markdown(controls))


def wall_time(summary: dict) -> str:
    job = summary.get("job") or {}
    return f"{job['total_seconds'] / 60:.1f} min" if job.get("total_seconds") else "n/a"


def study_time(summary: dict) -> str:
    """The study's time, said as what it is: what its runs took by their own measured files (every run's training
    steps and evaluation, summed, and the range per run), then, apart, what the last invocation did and how long
    it took. Without measured run times (an older summary.json): the invocation's wall time, and what it trained,
    resumed and skipped."""
    job = summary["job"]
    measured = runs_time_sentence(((summary.get("statistics") or {}).get("reader") or {}).get("run_times") or {})
    if measured:
        return f"{measured} {last_invocation_sentence(job)}"
    runs = job.get("runs") or {}
    if runs.get("resumed") or runs.get("skipped"):
        return (f"Wall time of the study's last invocation: {wall_time(summary)} (`{job['command']}`, "
                f"results/study/summary.md). {resumed_note(runs)}")
    return f"Wall time of the whole study, run in one piece: {wall_time(summary)} (`{job['command']}`, " \
           "results/study/summary.md)."


def blocks(root: str | Path = ROOT) -> dict[str, str]:
    """Every README block by name, rendered from the result files under `root`."""
    study, audit = load(Path(root) / SUMMARIES["study"])
    validity = load_validity(Path(root) / SUMMARIES["study"])
    lite, _ = load(Path(root) / SUMMARIES["lite"])
    primary = (study["statistics"].get("reader") or {}).get("primary")
    return {"study-verdict": "\n".join(verdict_markdown(verdict(study, audit, validity))).rstrip(),
            "study-validity": "\n".join(validity_markdown(validity or {}, primary)) or "No hand-labelled set yet.",
            "study-plain": "**In plain words.** " + plain_words(study),
            "study-table": study_table(study),
            "study-controls": controls_block(study),
            "study-time": study_time(study),
            "study-evidence": "**What would have to change?** The model must be able to write the supported sentence "
                              "it is pushed towards (rules registered before the runs: docs/statistics.md). "
                              + (evidence_paragraph(study["statistics"].get("evidence"))
                                 or "Its two tests, evidence in the prompt and the bare-name escape closed, are not "
                                    "in this summary yet (`make study` writes them)."),
            "lite-table": lite_table(lite),
            "lite-verdict": "\n".join(verdict_markdown(verdict(lite))).rstrip(),
            "lite-time": f"Wall time of this run: {wall_time(lite)} (`{lite['job']['command']}`, "
                         "results/summary.md)."}


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- results:{re.escape(name)} -->)(.*?)(<!-- /results:{re.escape(name)} -->)", re.S)


def fill(text: str, rendered: dict[str, str]) -> str:
    """`text` with every block between its markers replaced; a missing marker pair is an error."""
    for name, body in rendered.items():
        pattern = _pattern(name)
        if not pattern.search(text):
            raise ValueError(f"README has no <!-- results:{name} --> ... <!-- /results:{name} --> block")
        text = pattern.sub(lambda m: m.group(1) + "\n" + body + "\n" + m.group(3), text)
    return text


def differences(root: str | Path = ROOT) -> list[str]:
    """What is out of date: README blocks and summary.md files that differ from their rendering (empty: none)."""
    root = Path(root)
    stale = []
    readme = (root / "README.md").read_text()
    try:
        if fill(readme, blocks(root)) != readme:
            stale.append("README.md: a results block differs from the result files")
    except ValueError as error:
        stale.append(f"README.md: {error}")
    for folder in SUMMARIES.values():
        summary, audit = load(root / folder)
        if (root / folder / "summary.md").read_text() != summary_document(summary, audit, load_validity(root / folder)):
            stale.append(f"{folder}/summary.md differs from the rendering of {folder}/summary.json")
    return stale


def write(root: str | Path = ROOT) -> list[Path]:
    """Rewrite the README's blocks and the summaries; returns the files written."""
    root = Path(root)
    written = []
    for folder in SUMMARIES.values():
        summary, audit = load(root / folder)
        path = root / folder / "summary.md"
        atomic_write_text(path, summary_document(summary, audit, load_validity(root / folder)))
        written.append(path)
    readme = root / "README.md"
    atomic_write_text(readme, fill(readme.read_text(), blocks(root)))
    return [*written, readme]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fspo_lite.drivers.report.readme",
        description="Render the README's result blocks and results/{,study/}summary.md from the result files.",
        epilog="example: python -m fspo_lite.drivers.report.readme --check")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 and say what is out of date")
    parser.add_argument("--figures", action="store_true", help="also draw the paired-differences and per-judge "
                        "figures again from the summaries' statistics")
    parser.add_argument("--root", default=str(ROOT), help="the repository root (default: this checkout)")
    args = parser.parse_args(argv)
    if args.figures and not args.check:
        for folder in SUMMARIES.values():
            for path in draw_figures(load(Path(args.root) / folder)[0], args.root):
                print(f"drew {path}")
    if args.check:
        stale = differences(args.root)
        for line in stale:
            print(line, file=sys.stderr)
        if stale:
            print("run `make report` to render them again", file=sys.stderr)
        return 1 if stale else 0
    for path in write(args.root):
        print(f"wrote {path}")
    return 0


def run(argv: list[str] | None = None) -> int:
    """`main` with Ctrl-C and a refused result file as one line each (exit 130 and 1)."""
    from fspo_lite.evaluation.result_files import ResultFileError

    try:
        return main(argv)
    except KeyboardInterrupt:
        print("report: interrupted; files already rendered are whole (each is replaced atomically), the rest "
              "unchanged", file=sys.stderr)
        return 130
    except ResultFileError as error:
        print(f"report: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
