"""Seed-level sensitivity of the study's readings (docs/statistics.md, "Seed-level sensitivity"), and what the design
could resolve.

The bootstrap resamples seeds within each arm, but with 5 seeds a resample often repeats one, so the seed side of
its intervals is narrow. Beside it: Welch's t interval over the seed values themselves (each seed's pooled ratio
over all questions, the numbers whose mean is the estimate), and Holm's correction over question (b)'s rate
readings. A reading *survives both* when its bootstrap interval and its Welch interval lie on the same side of 0.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from fspo_lite import stats
from fspo_lite.drivers.report.study import interval_side

POWER_Z = 1.959964 + 0.841621
"""z_(0.975) + z_(0.80): a difference this many standard errors away from 0 is found 80% of the time at 5%."""


def seed_values(cells: pd.DataFrame) -> pd.DataFrame:
    """(metric, method, seed, value): each seed's pooled ratio sum num / sum den over its questions (NaN where the
    denominator is 0)."""
    sums = cells.groupby(["metric", "method", "seed"], sort=False)[["num", "den"]].sum().reset_index()
    sums["value"] = [n / d if d else math.nan for n, d in zip(sums["num"], sums["den"])]
    return sums[["metric", "method", "seed", "value"]]


def with_welch(differences: pd.DataFrame, seeds: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    """The paired differences with Welch's interval and p-value over seed values beside each bootstrap interval
    (columns welch_low, welch_high, welch_p), and the relative change's Welch-type interval (welch_relative_low,
    welch_relative_high; `stats.welch_relative_interval`). Rows whose metric has no seed values (matched length,
    computed elsewhere) keep the Welch columns they carry."""
    values = {key: group["value"].to_numpy() for key, group in seeds.groupby(["metric", "method"])}
    rows = []
    for row in differences.to_dict(orient="records"):
        a, b = values.get((row["metric"], row["method"])), values.get((row["metric"], row["baseline"]))
        if a is None or b is None:
            rows.append({"welch_low": math.nan, "welch_high": math.nan, "welch_p": math.nan,
                         "welch_relative_low": math.nan, "welch_relative_high": math.nan, **row})
            continue
        w, r = stats.welch_interval(a, b, level), stats.welch_relative_interval(a, b, level)
        rows.append({**row, "welch_low": w["low"], "welch_high": w["high"], "welch_p": w["p"],
                     "welch_relative_low": r["low"], "welch_relative_high": r["high"]})
    return pd.DataFrame(rows)


def survives(row) -> str:
    """'both' when the bootstrap and Welch intervals lie on the same side of 0, 'bootstrap only' when only the
    bootstrap's does, 'Welch only' when only Welch's does, 'neither' otherwise."""
    boot = interval_side(float(row["low"]), float(row["high"]))
    welch = interval_side(float(row["welch_low"]), float(row["welch_high"]))
    boot_resolved, welch_resolved = boot in ("below", "above"), welch in ("below", "above")
    if boot_resolved and welch == boot:
        return "both"
    return "bootstrap only" if boot_resolved else "Welch only" if welch_resolved else "neither"


def holm_readings(differences: pd.DataFrame, more_right: Sequence[dict], alpha: float = 0.05) -> list[dict]:
    """Question (b)'s rate readings (every arm under every held-out judge: step hallucination - grpo) with their
    Welch p-value, Holm's decision over all of them at family-wise `alpha`, and whether they survive both
    intervals."""
    rows = []
    index = differences.set_index(["metric", "method"])
    for answer in more_right:
        for judge in answer["judges"]:
            key = (f"step_hallucination@{judge['judge']}", answer["arm"])
            if key in index.index and not math.isnan(float(index.loc[key]["high"])):  # no interval: no reading
                d = index.loc[key]
                rows.append({"arm": answer["arm"], "judge": judge["judge"], "diff": float(d["diff"]),
                             "low": float(d["low"]), "high": float(d["high"]), "welch_low": float(d["welch_low"]),
                             "welch_high": float(d["welch_high"]), "p": float(d["welch_p"])})
    for row, rejected in zip(rows, stats.holm([r["p"] for r in rows], alpha)):
        row["holm"] = bool(rejected)
        row["survives"] = survives(row)
    return rows


def resolvable(differences: pd.DataFrame, metric: str, level: float = 0.95) -> dict:
    """The smallest difference (method - baseline) in `metric` the design finds 80% of the time at 5%: POWER_Z
    standard errors, the standard error read from each bootstrap interval's width (width / (2 z)). Per method,
    and the smallest and largest over methods."""
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + level / 2))
    rows = differences[differences["metric"] == metric]
    per = {r["method"]: POWER_Z * (float(r["high"]) - float(r["low"])) / (2 * z) for r in rows.to_dict("records")
           if not (math.isnan(float(r["high"])) or math.isnan(float(r["low"])))}
    return {"metric": metric, "per_method": per, "smallest": min(per.values(), default=math.nan),
            "largest": max(per.values(), default=math.nan)}


PREREGISTERED = ("accuracy", "step_hallucination", "supported_per_response", "unsupported_per_response")
"""The paired readings the study's questions read (per judge for the last three; docs/statistics.md)."""


def holm_reading(rows: Sequence[dict], primary: str | None = None) -> str:
    """Question (b)'s rate readings after the seed-level check and Holm's correction, in one sentence."""
    if not rows:
        return ""
    down = [r for r in rows if r["high"] < 0]
    both = [r for r in down if r["survives"] == "both"]
    held = [r for r in rows if r["holm"]]

    def names(group):
        return ", ".join(f"{r['arm']} ({r['judge']})" for r in group) or "none"

    return (f"Of question (b)'s {len(rows)} rate readings (arm - grpo in step hallucination, every arm under every "
            f"held-out judge), {len(down)} have a bootstrap interval below 0; {len(both)} of them also a Welch interval "
            f"over seed values below 0 ({names(both)}); {len(held)} survive Holm's correction over all {len(rows)} at "
            f"5% ({names(held)}). A reading that survives neither check is one a reader should not lean on alone.")


def sensitivity_markdown(differences: Sequence[dict], judges: Sequence[str], holm_rows: Sequence[dict],
                         order: Sequence[str]) -> list[str]:
    """Every pre-registered paired reading (arm - baseline) with its bootstrap interval, Welch's interval over seed
    values and which of the two resolve it; then the Holm line over question (b)'s rate readings."""
    from fspo_lite.drivers.report.study import format_interval

    wanted = ["accuracy", *[f"{kind}@{j}" for j in judges for kind in PREREGISTERED[1:]]]
    rows = [r for r in differences if r["metric"] in wanted and r.get("welch_low") is not None]
    if not rows:
        return []
    lines = ["", "## Seed-level sensitivity", "",
             "The bootstrap resamples seeds, but with 5 seeds a resample often repeats one. Beside each bootstrap "
             "interval: Welch's t interval over the seed values themselves (each seed's pooled value; docs/statistics.md, "
             "\"Seed-level sensitivity\"). *both*: the two intervals exclude 0 on the same side.", "",
             "| reading | arm - grpo | bootstrap | Welch over seeds | resolved by |", "|---|---|---|---|---|"]
    rank = {m: i for i, m in enumerate(order)}
    for r in sorted(rows, key=lambda r: (wanted.index(r["metric"]), rank.get(r["method"], 99))):
        boot = format_interval(r["metric"], r["diff"], r["low"], r["high"], True)
        welch = format_interval(r["metric"], r["diff"], r["welch_low"] if r["welch_low"] is not None else math.nan,
                                r["welch_high"] if r["welch_high"] is not None else math.nan, True)
        lines.append(f"| {r['metric']} | {r['method']} | {boot} | {welch} | "
                     f"{survives({k: (math.nan if v is None else v) for k, v in r.items()})} |")
    text = holm_reading(holm_rows)
    return lines + (["", text] if text else [])


def resolvable_markdown(resolvable_rows: dict) -> list[str]:
    """The smallest difference in supported sentences per response the design resolves, per judge."""
    if not resolvable_rows:
        return []
    parts = []
    for judge, r in resolvable_rows.items():
        fspo = r["per_method"].get("fspo")
        parts.append(f"{judge} judge {r['smallest']:.2f} to {r['largest']:.2f}"
                     + (f" (fspo - grpo: {fspo:.2f})" if fspo is not None else ""))
    return ["", "## What the design could resolve", "",
            "The smallest difference in supported sentences per response (arm - grpo) that 117 questions x 4 answers "
            "x 5 seeds finds 80% of the time at 5%, 2.8 standard errors, each read from its bootstrap interval's width: "
            + "; ".join(parts) + ". A smaller change in what an arm says rightly would go unseen."]


PAIR_METRICS = ("accuracy", "step_hallucination", "supported_per_response", "unsupported_per_response", "matched")
"""The added arms' pair readings shown with Welch beside them (per judge for all but accuracy)."""


def welch_rows(stats_part: dict) -> dict[str, list[dict]]:
    """The readings beyond the main paired differences that carry Welch's interval over seed values: matched
    length (each arm - baseline per judge), the caution goal's relative change in all-attempts-wrong, and the
    added arms' pair readings; each row with diff, low, high, welch_low, welch_high and `survives`."""
    def clean(row, **keys):
        out = {k: (math.nan if row.get(v) is None else float(row[v])) for k, v in keys.items()}
        return {**out, "survives": survives(out)}

    matched = [{"reading": f"step hallucination at matched length ({r['judge']})", "pair": f"{r['method']} - "
                f"{r['baseline']}", "unit": "points", **clean(r, diff="diff", low="low", high="high",
                                                               welch_low="welch_low", welch_high="welch_high")}
               for r in stats_part.get("matched_length") or [] if "welch_low" in r]  # older summaries: none
    goal = [{"reading": "caution goal: relative change in all attempts wrong", "pair": f"{r['method']} - "
             f"{r['baseline']}", "unit": "relative", **clean(r, diff="aaw_relative", low="aaw_relative_low",
                                                             high="aaw_relative_high",
                                                             welch_low="aaw_relative_welch_low",
                                                             welch_high="aaw_relative_welch_high")}
            for r in stats_part.get("caution_goal") or [] if "aaw_relative_welch_low" in r]
    pairs = []
    for r in (stats_part.get("questions") or {}).get("pairs") or []:
        if r["metric"].split("@", 1)[0] in PAIR_METRICS and "welch_low" in r:
            pairs.append({"reading": r["metric"], "pair": f"{r['method']} - {r['baseline']}",
                          "unit": "points" if r["metric"].startswith(("accuracy", "step_", "matched")) else "count",
                          **clean(r, diff="diff", low="low", high="high", welch_low="welch_low",
                                  welch_high="welch_high")})
    return {"matched length": matched, "caution goal": goal, "added-arm pairs": pairs}


def welch_value(row: dict, low: float, high: float) -> str:
    """'-3.1 [-9.4, +2.9]' in the row's unit: points for shares, percent for relative changes, counts as they are."""
    scale, digits, tail = {"points": (100, 1, ""), "relative": (100, 1, "%"), "count": (1, 2, "")}[row["unit"]]
    if math.isnan(low) or math.isnan(high):
        return f"{scale * row['diff']:+.{digits}f}{tail} [n/a]"
    return f"{scale * row['diff']:+.{digits}f}{tail} [{scale * low:+.{digits}f}, {scale * high:+.{digits}f}]"


def welch_answer(groups: dict[str, list[dict]]) -> str:
    """Which of these readings the bootstrap resolves and which of those survive Welch too, group by group."""
    parts = []
    for name, rows in groups.items():
        if not rows:
            continue
        boot = [r for r in rows if r["survives"] in ("both", "bootstrap only")]
        both = [r for r in rows if r["survives"] == "both"]
        parts.append(f"{name}: {len(boot)} of {len(rows)} resolved by the bootstrap, {len(both)} also by Welch ("
                     + (", ".join(f"{r['pair']} {r['reading']}" for r in both) or "none") + ")")
    return ("Which survive both: " + "; ".join(parts) + ".") if parts else ""


def welch_more_markdown(stats_part: dict) -> list[str]:
    """summary.md's tables of the matched-length, caution-goal and added-arm readings with the bootstrap and Welch
    intervals side by side, and the answer in one sentence."""
    groups = welch_rows(stats_part)
    if not any(groups.values()):
        return []
    lines = ["", "### Welch beside the matched-length, caution-goal and added-arm readings", "",
             "Same check as above (Welch's t over seed values; for the caution goal's relative change the Welch-type "
             "interval on the log scale, docs/statistics.md, \"Seed-level sensitivity\"). Points for shares, % for "
             "the relative change, counts per response for sentence counts.", "",
             "| reading | pair | bootstrap | Welch over seeds | resolved by |", "|---|---|---|---|---|"]
    for rows in groups.values():
        for r in rows:
            lines.append(f"| {r['reading']} | {r['pair']} | {welch_value(r, r['low'], r['high'])} | "
                         f"{welch_value(r, r['welch_low'], r['welch_high'])} | {r['survives']} |")
    answer = welch_answer(groups)
    return lines + (["", answer] if answer else [])
