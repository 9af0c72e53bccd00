"""The controls and the newer rewards (issue "More right, or only less said?"): every arm on the three axes of
factuality (precision: step hallucination per held-out judge; detail: supported sentences per response; accuracy),
and the two questions, answered by the rules of docs/statistics.md ("Controls and newer rewards"), which were
written before any of these arms' runs was read:

(a) how much of FSPO's change does a reward without information (`random`, `format`) produce (`control_check`);
(b) does any arm lower step hallucination against GRPO without fewer supported sentences per response
    (`more_right_check`)?

Every function takes the tables the study report already makes (metric cells, paired differences, matched-length
differences) and returns plain rows; `controls_markdown` puts them in words.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from fspo_lite.drivers.report.arms import pair_row
from fspo_lite.drivers.report.study import format_interval, interval_side, pair_differences

CONTROLS = ("random", "format")
"""The arms whose reward carries no information about the answer's truth."""
NEWER = ("ternary", "binary", "corver")
"""The published fixes for saying less (docs/methods.md)."""
REFERENCE, BASE = "fspo", "base"
"""Question (a) compares each control's change from the base model with FSPO's."""

MOVES = {"below": "down", "above": "up", "unresolved": "holds 0", "n/a": "n/a"}


def readings(judges: Sequence[str]) -> list[str]:
    """What question (a) reads: length first (the headline), accuracy, and per judge the rate and supported count."""
    return ["sentences_per_response", "accuracy",
            *[f"{kind}@{j}" for j in judges for kind in ("step_hallucination", "supported_per_response")]]


def move(row) -> str:
    """'down', 'up', 'holds 0' or 'n/a' for a difference row (its interval against 0)."""
    return "n/a" if row is None else MOVES[interval_side(float(row["low"]), float(row["high"]))]


def classify_reading(control_move: str, fspo_move: str, fspo_minus_control: str) -> str:
    """Question (a)'s answer on one reading, from where three intervals lie: C - base, FSPO - base, FSPO - C."""
    if fspo_move in ("holds 0", "n/a"):
        return "FSPO does not move it"
    if control_move == fspo_move:
        return {"holds 0": "all of it", fspo_move: "part of it"}.get(fspo_minus_control, "cannot tell")
    if fspo_minus_control == fspo_move:
        return "none of it"
    return "cannot tell"


def control_check(cells: pd.DataFrame, judges: Sequence[str], control: str, reference: str = REFERENCE,
                  base: str = BASE, **boot) -> dict:
    """Question (a) for one control: per reading, C - base, FSPO - base and FSPO - C with their intervals, the
    share (C - base) / (FSPO - base) of the point estimates and the rule's answer. 'n/a' when an arm is missing."""
    ran = set(cells["method"])
    if not {control, reference, base} <= ran:
        return {"control": control, "answer": "n/a", "readings": []}
    metrics = readings(judges)
    table = pd.concat([pair_differences(cells, metrics, control, base, **boot),
                       pair_differences(cells, metrics, reference, base, **boot),
                       pair_differences(cells, metrics, reference, control, **boot)], ignore_index=True)
    rows = []
    for metric in metrics:
        c, f, fc = (pair_row(table, metric, *pair) for pair in
                    ((control, base), (reference, base), (reference, control)))
        if c is None or f is None or fc is None:
            continue
        share = float(c["diff"]) / float(f["diff"]) if float(f["diff"]) else float("nan")
        rows.append({"metric": metric, "answer": classify_reading(move(c), move(f), move(fc)), "share": share,
                     **{f"{name}_{k}": float(row[k]) for name, row in (("control", c), ("fspo", f), ("gap", fc))
                        for k in ("diff", "low", "high")}})
    headline = rows[0]["answer"] if rows and rows[0]["metric"] == "sentences_per_response" else "n/a"
    return {"control": control, "answer": headline, "readings": rows}


def more_right_check(differences: pd.DataFrame, matched: pd.DataFrame, judges: Sequence[str],
                     arms: Sequence[str], trained_against: dict[str, str | None]) -> list[dict]:
    """Question (b): per arm, under each held-out judge (every judge but the arm's own training verifier), whether
    it is *more right* (step hallucination - GRPO moves down, supported sentences - GRPO does not) and whether it
    *says less* (supported sentences - GRPO moves down), and its answer: 'yes' (more right under >= 2 judges, says
    less under none, and no matched-length interval above 0), 'one judge', or 'no'."""
    out = []
    for arm in arms:
        rows = []
        for judge in judges:
            if judge == trained_against.get(arm):
                continue
            rate = pair_row(differences, f"step_hallucination@{judge}", arm, "grpo")
            supported = pair_row(differences, f"supported_per_response@{judge}", arm, "grpo")
            if rate is None or supported is None:
                continue
            same_length = matched[(matched["judge"] == judge) & (matched["method"] == arm)] if len(matched) else matched
            rows.append({"judge": judge, "rate": move(rate), "supported": move(supported),
                         "matched": move(None if same_length.empty else same_length.iloc[0]),
                         "more_right": move(rate) == "down" and move(supported) != "down",
                         "says_less": move(supported) == "down"})
        if not rows:
            continue
        right = sum(r["more_right"] for r in rows)
        less = any(r["says_less"] for r in rows)
        matched_up = any(r["matched"] == "up" for r in rows)
        answer = ("yes" if right >= 2 and not less and not matched_up else
                  "one judge" if right == 1 and not less else "no")
        out.append({"arm": arm, "answer": answer, "judges": rows})
    return out


def advantage_mass(training: pd.DataFrame, arms: Sequence[str], regions: Sequence[str]) -> pd.DataFrame:
    """Per arm, the mean over steps and seeds of the logged net push sum A / sum |A| on each region (the
    trainer's `adv_signed_share/<region>`): where the advantage went. Arms that did not log it are left out."""
    rows = []
    for arm in arms:
        runs = training[training["method"] == arm] if "method" in training else training.iloc[0:0]
        columns = [f"adv_signed_share/{r}" for r in regions]
        if runs.empty or not set(columns) <= set(runs.columns):
            continue
        by_seed = runs.groupby("seed")[columns].mean()
        rows.append({"arm": arm, **{r: float(by_seed[c].mean()) for r, c in zip(regions, columns)}})
    return pd.DataFrame(rows)


def three_axes_markdown(tables: dict, matched: pd.DataFrame, judges: Sequence[str], arms: Sequence[str],
                        baseline: str = "grpo", pct: str = "95%", matched_axes: Sequence[dict] = ()) -> list[str]:
    """One table per judge: every arm's accuracy, step hallucination and supported sentences per response, each with
    its interval and its difference to `baseline`, at natural length and (from `matched`, and `matched_axes` for
    accuracy and supported sentences) at matched length."""
    cell = tables["methods"].set_index(["metric", "method"])
    diff = tables["differences"]
    rates = matched.assign(metric="step_hallucination@" + matched["judge"]) if len(matched) else matched
    same_length = pd.concat([rates, pd.DataFrame(list(matched_axes))], ignore_index=True)
    lines = ["", "## Every arm on three axes: precision, detail, accuracy", "",
             f"Precision is step hallucination (lower is better), detail is supported reasoning sentences per "
             f"response (higher is better), accuracy is the share of correct answers. Mean [{pct} interval], then "
             f"the paired difference to {baseline}; `matched`: the difference at matched length (responses with the "
             "same number of reasoning sentences, so responses without one are left out). Bold: the interval "
             "excludes 0."]

    def value(metric, arm):
        return (format_interval(metric, *cell.loc[(metric, arm), ["mean", "low", "high"]])
                if (metric, arm) in cell.index else "")

    def shown(metric, row):
        if row is None:
            return ""
        low, high = float(row["low"]), float(row["high"])
        text = format_interval(metric, float(row["diff"]), low, high, signed=True)
        return f"**{text}**" if interval_side(low, high) in ("below", "above") else text

    def matched_row(metric, arm):
        if not len(same_length):
            return None
        rows = same_length[(same_length["metric"] == metric) & (same_length["method"] == arm)]
        return None if rows.empty else rows.iloc[0]

    for judge in judges:
        rate, supported = f"step_hallucination@{judge}", f"supported_per_response@{judge}"
        lines += ["", f"**{judge} judge**", "",
                  f"| arm | accuracy % | - {baseline} | - {baseline}, matched | step hallucination % | - {baseline} | "
                  f"- {baseline}, matched | supported per response | - {baseline} | - {baseline}, matched |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for arm in arms:
            if (rate, arm) not in cell.index:
                continue
            lines.append(f"| {arm} | {value('accuracy', arm)} | "
                         f"{shown('accuracy', pair_row(diff, 'accuracy', arm, baseline))} | "
                         f"{shown('accuracy', matched_row('accuracy', arm))} | "
                         f"{value(rate, arm)} | {shown(rate, pair_row(diff, rate, arm, baseline))} | "
                         f"{shown(rate, matched_row(rate, arm))} | {value(supported, arm)} | "
                         f"{shown(supported, pair_row(diff, supported, arm, baseline))} | "
                         f"{shown(supported, matched_row(supported, arm))} |")
    return lines


def reading_label(metric: str) -> str:
    name, _, judge = metric.partition("@")
    label = {"sentences_per_response": "reasoning sentences per response", "accuracy": "accuracy",
             "step_hallucination": "step hallucination", "supported_per_response": "supported sentences per response"}
    return label.get(name, name) + (f" ({judge} judge)" if judge else "")


def share_note(reading: dict) -> str:
    """' (share 0.59)' beside an answer that credits the control with some of FSPO's change, else ''."""
    return f" (share {reading['share']:.2f})" if reading["answer"] in ("all of it", "part of it") else ""


def control_lead(check: dict) -> str:
    """Question (a) for one control in one sentence: its answer on reasoning length (the headline), then the other
    readings FSPO moves, grouped by answer."""
    control = check["control"]
    if check["answer"] == "n/a":
        return f"{control}: not answered ({control}, {REFERENCE} or {BASE} was not evaluated)."
    others: dict[str, list[str]] = {}
    for r in check["readings"][1:]:
        if r["answer"] != "FSPO does not move it":
            others.setdefault(r["answer"], []).append(reading_label(r["metric"]) + share_note(r))
    rest = "; ".join(f"{answer} of its change in {', '.join(labels)}" for answer, labels in others.items())
    head = check["readings"][0]
    pairs = ((f"{control} - {BASE}", "control"), (f"{REFERENCE} - {BASE}", "fspo"))
    numbers = ", ".join(f"{who} " + format_interval(head["metric"], head[f"{k}_diff"], head[f"{k}_low"],
                                                    head[f"{k}_high"], True) for who, k in pairs)
    return (f"**{control}: {check['answer']}** of FSPO's change in reasoning length ({numbers} sentences per "
            "response)" + (f"; {rest}" if rest else "") + ".")


def control_headline(checks: list[dict]) -> str:
    """Question (a)'s headline for every control in one sentence: 'random: none of it, format: none of it of FSPO's
    change in reasoning length.'"""
    answered = [c for c in checks if c["answer"] != "n/a"]
    if not answered:
        return "not answered: no control was evaluated beside fspo and base."
    return ", ".join(f"{c['control']}: **{c['answer']}**" for c in answered) + " of FSPO's change in reasoning length."


def control_table(check: dict) -> list[str]:
    """Question (a) for one control as a table: every reading's three differences and the rule's answer."""
    control = check["control"]
    lines = [f"| reading | {control} - {BASE} | {REFERENCE} - {BASE} | {REFERENCE} - {control} | answer |",
             "|---|---|---|---|---|"]
    for r in check["readings"]:
        metric = r["metric"]
        cells = [format_interval(metric, r[f"{name}_diff"], r[f"{name}_low"], r[f"{name}_high"], True)
                 for name in ("control", "fspo", "gap")]
        lines.append(f"| {reading_label(metric)} | " + " | ".join(cells) + f" | {r['answer']}{share_note(r)} |")
    return lines


def more_right_lead(rows: list[dict], primary: str | None = None, holm_rows: Sequence[dict] | None = None) -> str:
    """Question (b)'s answer in one sentence: the rule's answer; with a primary judge, which arms are more right
    under each judge, primary first, and whether the answer changes with the judge; with `holm_rows`, which of the
    readings survive the seed-level check and Holm's correction."""
    if not rows:
        return "Not answered: no arm besides grpo was evaluated under a held-out judge."
    yes = [r["arm"] for r in rows if r["answer"] == "yes"]
    one = [r["arm"] for r in rows if r["answer"] == "one judge"]
    head = f"**Yes: {', '.join(yes)}.**" if yes else "**No arm does.**"
    text = head + (f" More right under one judge only: {', '.join(one)}." if one else "")
    if primary:
        judges = sorted(sorted({j["judge"] for r in rows for j in r["judges"]}), key=lambda j: j != primary)
        right = {j: [r["arm"] for r in rows for x in r["judges"] if x["judge"] == j and x["more_right"]]
                 for j in judges}
        text += " More right, judge by judge: " + "; ".join(
            f"{j} judge{' (primary)' if j == primary else ''}: {', '.join(arms) or 'none'}" for j, arms in right.items())
        text += (". The answer changes with the judge." if len({tuple(a) for a in right.values()}) > 1 else
                 ". Every judge gives the same answer.")
    text += " With this many arms and judges, about one reading in twenty falls outside its interval by chance."
    if holm_rows:
        both = [f"{r['arm']} ({r['judge']})" for r in holm_rows  # an interval that could not be formed (None) holds 0
            if r["high"] is not None and r["high"] < 0 and r["survives"] == "both"]
        held = [f"{r['arm']} ({r['judge']})" for r in holm_rows if r["holm"]]
        text += (f" Of the {len(holm_rows)} rate readings, these survive Welch's interval over seeds too: "
                 f"{', '.join(both) or 'none'}; these survive Holm's correction: {', '.join(held) or 'none'}.")
    return text


def more_right_table(rows: list[dict], judges: Sequence[str]) -> list[str]:
    """Question (b) as a table: per arm and held-out judge, where its step hallucination and its supported sentences
    per response lie against grpo, and the matched-length difference; '-' where the judge is its training verifier."""
    lines = ["| arm | answer | " + " | ".join(f"{j} judge: rate / supported / matched" for j in judges) + " |",
             "|---|---|" + "---|" * len(judges)]
    for r in rows:
        by_judge = {j["judge"]: j for j in r["judges"]}
        cells = [" / ".join(by_judge[j][k] for k in ("rate", "supported", "matched")) if j in by_judge else "-"
                 for j in judges]
        lines.append(f"| {r['arm']} | {r['answer']} | " + " | ".join(cells) + " |")
    return lines


def matched_detail_reading(matched_axes: Sequence[dict]) -> str:
    """Detail at matched length, in words: which arms write more or fewer supported sentences per response than the
    baseline among responses of the same length, under which judge; '' when none was computed."""
    rows = [r for r in matched_axes if r["metric"].startswith("supported_per_response@")]
    if not rows:
        return ""
    moved = [f"{r['method']} {move(r)} ({r['metric'].split('@', 1)[1]} judge)" for r in rows if move(r) != "holds 0"]
    baseline = rows[0]["baseline"]
    if not moved:
        return (f"At matched length no arm writes more or fewer supported sentences per response than {baseline} "
                "under any judge: where an arm writes fewer supported sentences, it is because it writes fewer "
                "sentences.")
    return (f"At matched length, supported sentences per response against {baseline} move for: "
            + ", ".join(moved) + "; every other arm and judge holds 0.")


def mass_reading(mass: Sequence[dict], more_right: list[dict], region: str = "unsupported") -> str:
    """Where the advantage went, in words: which arms push against unsupported sentences (a net push below 0 on
    them) and whether those write fewer supported sentences; whether the others lower step hallucination."""
    answers = {r["arm"]: r for r in more_right}
    against = [m["arm"] for m in mass if m.get(region, 0.0) < 0 and m["arm"] in answers]
    others = [m["arm"] for m in mass if m.get(region, 0.0) >= 0 and m["arm"] in answers]
    if not against and not others:
        return ""
    short = [a for a in against if any(j["says_less"] for j in answers[a]["judges"])]
    kept = [a for a in against if a not in short]
    lower = [a for a in others if any(j["rate"] == "down" for j in answers[a]["judges"])]
    parts = []
    if against:
        parts.append(f"The arms whose advantage pushes against unsupported sentences ({', '.join(against)}): "
                     f"{len(short)} of these {len(against)} write fewer supported sentences than grpo under at least "
                     "one held-out judge"
                     + (f" ({', '.join(kept)} {'does' if len(kept) == 1 else 'do'} not)" if kept else "") + ".")
    if others:
        parts.append(f"The other arms ({', '.join(others)}) push unsupported sentences up, or not at all; "
                     + (f"of these, only {', '.join(lower)} lowers step hallucination under any held-out judge."
                        if lower else "none of them lowers step hallucination under any held-out judge."))
    return " ".join(parts)


def readings_markdown(controls: dict) -> list[str]:
    """Where the advantage went and detail at matched length, each a paragraph in words (summary.md and README)."""
    reading = mass_reading(controls.get("advantage_mass") or [], controls["more_right"])
    detail = matched_detail_reading(controls.get("matched_axes") or [])
    return ((["", f"**Where the advantage went.** {reading}"] if reading else [])
            + (["", f"**Detail at matched length.** {detail}"] if detail else []))


def controls_markdown(controls: dict, tables: dict, matched: pd.DataFrame, judges: Sequence[str],
                      arms: Sequence[str], baseline: str = "grpo", pct: str = "95%") -> list[str]:
    """The summary's sections on the controls and the newer rewards, from `controls` (summary.json's
    statistics.controls: control_checks, more_right, advantage_mass) and the study's tables: every arm on the three
    axes, then both questions' answers and where the advantage went."""
    checks, more_right = controls["control_checks"], controls["more_right"]
    mass = controls.get("advantage_mass") or []
    lines = three_axes_markdown(tables, matched, judges, arms, baseline, pct, controls.get("matched_axes") or ())
    lines += ["", "## Controls and newer rewards: the two questions", "",
              "Rules fixed before these runs were read: docs/statistics.md, \"Controls and newer rewards\". A "
              f"difference *moves down* or *up* when its {pct} interval lies below or above 0, and *holds 0* "
              "otherwise.",
              "", "**(a) How much of FSPO's change does a reward without information produce?** Each control's change "
              f"from the base model beside FSPO's, and the gap between them. *all of it*: the control moves the "
              "reading the same way and FSPO - control holds 0; *part of it*: FSPO moves it further; *none of it*: "
              "the control does not move it that way while FSPO does. The share is the control's change over "
              "FSPO's (point estimates): *all of it* with a share below 1 means the interval of FSPO - control holds "
              "0, not that the two changes are equal."]
    for check in checks:
        lines += ["", f"- {control_lead(check)}"]
        if check["readings"]:
            lines += ["", *control_table(check)]
    lines += ["", "**(b) Does any arm lower step hallucination against grpo without writing fewer supported "
                  "sentences per response?** " + more_right_lead(more_right)]
    if more_right:
        lines += ["", f"*yes*: step hallucination moves down and supported sentences do not, under at least two "
                      "held-out judges, supported sentences move down under none, and no matched-length difference "
                      "moves up. Per judge, against grpo: the rate, the supported sentences, the rate at matched "
                      "length ('-': the arm's training verifier, not a held-out judge for it).", "",
                  *more_right_table(more_right, judges)]
    if mass:
        regions = [c for c in mass[0] if c != "arm"]
        lines += ["", "Where the advantage went (net push sum A / sum |A| per region of the sampled responses, mean "
                      "over steps and seeds; docs/gradient_mass.md):", "",
                  "| arm | " + " | ".join(regions) + " |", "|---|" + "---|" * len(regions)]
        lines += [f"| {row['arm']} | " + " | ".join(f"{row[r]:+.2f}" for r in regions) + " |" for row in mass]
    return lines + readings_markdown(controls)
