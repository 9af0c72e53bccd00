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
    (columns welch_low, welch_high, welch_p)."""
    values = {key: group["value"].to_numpy() for key, group in seeds.groupby(["metric", "method"])}
    rows = []
    for row in differences.to_dict(orient="records"):
        a, b = values.get((row["metric"], row["method"])), values.get((row["metric"], row["baseline"]))
        w = stats.welch_interval(a, b, level) if a is not None and b is not None else {"low": math.nan,
                                                                                        "high": math.nan, "p": math.nan}
        rows.append({**row, "welch_low": w["low"], "welch_high": w["high"], "welch_p": w["p"]})
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
            if key in index.index:
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
