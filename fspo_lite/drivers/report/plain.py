"""The study in plain words (the README's "In plain words"), each sentence made from the numbers by a rule, so that
a sentence that stops being true stops being written (docs/statistics.md states the rules):

- what the controls do to reasoning length and accuracy (question (a)'s readings);
- which arms write fewer unsupported sentences per response than grpo without fewer supported ones, judge by judge
  (unsupported interval below 0, supported interval not below 0), and whether any writes more supported ones;
- where the newer rewards leave step hallucination against grpo, judge by judge, with their intervals.
"""

from __future__ import annotations

from typing import Sequence

from fspo_lite.drivers.report.study import format_interval, interval_side

NEWER = ("ternary", "binary", "corver")


def rows_by(stats: dict) -> dict:
    """(metric, method) -> paired difference row against the baseline."""
    return {(r["metric"], r["method"]): r for r in stats.get("differences") or []}


def side(row: dict | None) -> str:
    return "n/a" if row is None or row["low"] is None or row["high"] is None else interval_side(row["low"], row["high"])


def fewer_unsupported(stats: dict, judges: Sequence[str], arms: Sequence[str]) -> dict[str, list[str]]:
    """Per judge, the arms whose unsupported sentences per response move down against the baseline while their
    supported sentences do not."""
    rows = rows_by(stats)
    return {j: [a for a in arms if side(rows.get((f"unsupported_per_response@{j}", a))) == "below"
                and side(rows.get((f"supported_per_response@{j}", a))) not in ("below", "n/a")] for j in judges}


def more_supported(stats: dict, judges: Sequence[str], arms: Sequence[str]) -> list[str]:
    """'arm (judge)' for every arm whose supported sentences per response move up against the baseline."""
    rows = rows_by(stats)
    return [f"{a} ({j})" for j in judges for a in arms if side(rows.get((f"supported_per_response@{j}", a))) == "above"]


def rate_text(row: dict) -> str:
    return format_interval("step_hallucination@judge", row["diff"], row["low"], row["high"], True)


def plain_words(summary: dict) -> str:
    """The README's plain-words paragraph from summary.json."""
    stats = summary.get("statistics") or {}
    judges = stats.get("judges") or []
    order = (summary.get("report") or {}).get("order") or []
    rows = rows_by(stats)
    arms = [m for m in order if any(k[1] == m for k in rows)]
    if not judges or not arms:
        return "Not written: the study's summary has no paired differences."
    parts = []
    controls = (stats.get("controls") or {}).get("control_checks") or []
    length = {c["control"]: c["readings"][0] for c in controls if c["readings"]
              and c["readings"][0]["metric"] == "sentences_per_response"}
    if length:
        longer = [c for c, r in length.items() if r["control_low"] > 0]
        parts.append((f"{' and '.join(longer)} make{'s' if len(longer) == 1 else ''} reasoning longer than the base "
                      "model's" if longer else "No control makes reasoning longer")
                     + ", so fspo's shorter reasoning comes from its flip, not from RL at this budget ("
                     + ", ".join(f"{c} - base {format_interval('count', r['control_diff'], r['control_low'], r['control_high'], True)}"
                                 for c, r in length.items()) + " sentences per response).")
    fewer = fewer_unsupported(stats, judges, arms)
    said = "; ".join(f"{j} judge{' (primary)' if k == 0 else ''}: {', '.join(a) or 'none'}"
                     for k, (j, a) in enumerate(fewer.items()))
    parts.append(f"Arms that write fewer unsupported sentences per response than grpo without fewer supported ones, "
                 f"judge by judge: {said}"
                 + ("; the answer changes with the judge" if len({tuple(a) for a in fewer.values()}) > 1 else "")
                 + ".")
    up = more_supported(stats, judges, arms)
    parts.append(f"More supported sentences than grpo: {', '.join(up)}." if up else
                 "No arm writes more supported sentences per response than grpo under any judge.")
    newer = [a for a in NEWER if a in arms]
    if newer:
        texts = []
        for arm in newer:
            readings = [(j, rows.get((f"step_hallucination@{j}", arm))) for j in judges]
            moved = [j for j, r in readings if side(r) == "below"]
            texts.append(f"{arm} " + ", ".join(f"{rate_text(r)} ({j})" for j, r in readings if r)
                         + (f": lower under {', '.join(moved)}" if moved else ": no judge resolves a change"))
        parts.append("Step hallucination of the newer rewards against grpo, in points: " + "; ".join(texts) + ".")
    return " ".join(parts)
