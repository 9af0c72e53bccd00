"""The study's added arms and their two questions (issue "Why FSPO says less"): does a better training verifier
turn saying less into saying right (`fspo+kb` against `fspo`), and does longer training change the picture
(`fspo+4x` - `grpo+4x` against `fspo` - `grpo`)? The pairs' paired and matched-length differences
(`pairs_table`), the rule-based checks (`verifier_check`, `longer_check`; docs/statistics.md, "The added arms' two
questions") and their answers in words for the summary and the README.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from fspo_lite.drivers.report.study import (excludes_zero, format_interval, interval_side, matched_length,
                                            pair_differences)


VERIFIER_QUESTION = ("fspo+kb", "fspo", "grpo")
"""(arm, reference, baseline) of "does a better verifier turn saying less into saying right?": FSPO trained with
the knowledge-base verifier against FSPO with the lexical one, and where both stand against GRPO."""
LONGER_QUESTION = (("fspo", "grpo"), ("fspo+4x", "grpo+4x"))
"""(the budget's pair, the same pair trained 4x longer) of "does longer training change the picture?"."""


def question_metrics(judges: Sequence[str]) -> list[str]:
    """What the two questions read: accuracy, length, and per judge the rate and both sentence counts."""
    return ["accuracy", "sentences_per_response",
            *[f"{kind}@{j}" for j in judges
              for kind in ("step_hallucination", "supported_per_response", "unsupported_per_response")]]


def pairs_table(cells: pd.DataFrame, responses: pd.DataFrame, pairs: Sequence[tuple[str, str]],
                judges: Sequence[str], n_resamples: int = 2000, seed: int = 0, level: float = 0.95,
                seeds: pd.DataFrame | None = None) -> pd.DataFrame:
    """`method - baseline` for each pair on `question_metrics(judges)` (`pair_differences`) and on step
    hallucination at matched length per judge (`matched_length` over the pair's responses alone; metric
    `matched@<judge>`). Pairs with a method that was not run are left out. Rows: metric, method, baseline, diff,
    low, high and, with `seeds` (`sensitivity.seed_values`), Welch's interval over seed values beside each
    (welch_low, welch_high, welch_p; the matched-length rows carry theirs from `matched_length`)."""
    from fspo_lite.drivers.report.sensitivity import with_welch

    columns = ["metric", "method", "baseline", "diff", "low", "high", "welch_low", "welch_high", "welch_p"]
    ran = set(cells["method"])
    frames = []
    for method, baseline in pairs:
        if not {method, baseline} <= ran:
            continue
        paired = pair_differences(cells, question_metrics(judges), method, baseline, n_resamples, seed, level)
        frames.append(with_welch(paired, seeds, level) if seeds is not None and len(paired) else paired)
        matched = matched_length(responses[responses["method"].isin([method, baseline])], baseline,
                                 n_resamples=n_resamples, seed=seed, level=level)
        if len(matched):
            frames.append(matched.assign(metric="matched@" + matched["judge"]).reindex(columns=columns))
    return (pd.concat(frames, ignore_index=True).reindex(columns=columns) if frames
            else pd.DataFrame(columns=columns))


def pair_row(pairs: pd.DataFrame, metric: str, method: str, baseline: str) -> pd.Series | None:
    """The `pairs_table` row of `method - baseline` on `metric`, None when that pair or metric was not run."""
    rows = pairs[(pairs["metric"] == metric) & (pairs["method"] == method) & (pairs["baseline"] == baseline)]
    return None if rows.empty else rows.iloc[0]


def _side(pairs: pd.DataFrame, metric: str, method: str, baseline: str) -> str | None:
    row = pair_row(pairs, metric, method, baseline)
    return None if row is None else interval_side(float(row["low"]), float(row["high"]))


def verifier_check(pairs: pd.DataFrame, judges: Sequence[str], arm: str = VERIFIER_QUESTION[0],
                   reference: str = VERIFIER_QUESTION[1], baseline: str = VERIFIER_QUESTION[2],
                   trained_against: str | None = None) -> dict:
    """Does `arm` (a better training verifier) turn `reference`'s saying less into saying right? Per judge other
    than `trained_against` (the arm's own training verifier is not a held-out judge of it): the sides of
    arm - reference on supported and unsupported sentences per response, and of arm - baseline on supported
    ones. `more_right`: supported up against the reference (interval above 0) with unsupported not up;
    `says_less`: supported still below the baseline's. `answer`: 'yes' when every held-out judge sees the arm
    more right and not saying less than the baseline, 'partly' when some judge sees it more right, 'no' when none
    does."""
    rows = []
    for judge in judges:
        if judge == trained_against:
            continue
        sup, uns = f"supported_per_response@{judge}", f"unsupported_per_response@{judge}"
        sides = {"supported": _side(pairs, sup, arm, reference), "unsupported": _side(pairs, uns, arm, reference),
                 "supported_vs_baseline": _side(pairs, sup, arm, baseline)}
        if None in sides.values():
            continue
        rows.append({"judge": judge, **sides,
                     "more_right": sides["supported"] == "above" and sides["unsupported"] != "above",
                     "says_less": sides["supported_vs_baseline"] == "below"})
    right = [r for r in rows if r["more_right"] and not r["says_less"]]
    answer = ("n/a" if not rows else "yes" if len(right) == len(rows)
              else "partly" if any(r["more_right"] for r in rows) else "no")
    return {"arm": arm, "reference": reference, "baseline": baseline, "trained_against": trained_against,
            "judges": rows, "answer": answer}


def longer_check(pairs: pd.DataFrame, judges: Sequence[str], short: tuple[str, str] = LONGER_QUESTION[0],
                 long: tuple[str, str] = LONGER_QUESTION[1]) -> dict:
    """Does longer training change the picture? For each metric of `question_metrics(judges)` and each judge's
    matched-length rate: the side of 0 where short[0] - short[1]'s interval lies, and long[0] - long[1]'s. A
    metric `changed` when the two sides differ; `answer`: 'no' when none changed, 'yes' when one did, 'n/a'
    when a pair is missing."""
    rows = []
    for metric in [*question_metrics(judges), *[f"matched@{j}" for j in judges]]:
        before, after = _side(pairs, metric, *short), _side(pairs, metric, *long)
        if before is None or after is None:
            continue
        rows.append({"metric": metric, "short": before, "long": after, "changed": before != after})
    answer = "n/a" if not rows else "yes" if any(r["changed"] for r in rows) else "no"
    return {"short": list(short), "long": list(long), "metrics": rows, "answer": answer}


def question_label(metric: str) -> str:
    """A question metric in words: 'supported sentences per response (embedding)', ..."""
    name, _, judge = metric.partition("@")
    words = {"accuracy": "accuracy", "sentences_per_response": "reasoning sentences per response",
             "step_hallucination": "step hallucination", "supported_per_response": "supported sentences per response",
             "unsupported_per_response": "unsupported sentences per response",
             "matched": "step hallucination at matched length"}[name]
    return f"{words} ({judge})" if judge else words


def pair_text(pairs: pd.DataFrame, metric: str, method: str, baseline: str, bold: bool = False) -> str:
    """`method - baseline` on `metric` from a `pairs_table`, '+0.12 [-0.03, +0.27]' in the metric's unit (in bold,
    with `bold`, when the interval excludes 0)."""
    row = pair_row(pairs, metric, method, baseline)
    if row is None:
        return "n/a"
    scale_as = "step_hallucination@" + metric.split("@", 1)[1] if metric.startswith("matched@") else metric
    text = format_interval(scale_as, *(float(row[k]) for k in ("diff", "low", "high")), signed=True)
    return f"**{text}**" if bold and excludes_zero(row) else text


def verifier_answer(check: dict, pairs: pd.DataFrame) -> str:
    """The better-verifier question's answer and its evidence in words, from `verifier_check`."""
    arm, reference, baseline = check["arm"], check["reference"], check["baseline"]
    if check["answer"] == "n/a":
        return f"not answered: {arm} or {reference} was not run."
    right = [r["judge"] for r in check["judges"] if r["more_right"]]
    head = {"yes": f"yes: under every held-out judge {arm} writes more supported sentences per response than "
                   f"{reference}, not more unsupported ones, and not fewer supported ones than {baseline}",
            "partly": f"partly: {arm} writes more supported sentences per response than {reference} under "
                      f"{', '.join(right)}, not under the other held-out judges",
            "no": f"no: under no held-out judge does {arm} write more supported sentences per response than "
                  f"{reference} (no interval above 0)"}[check["answer"]]
    evidence = []
    for row in check["judges"]:
        j = row["judge"]
        evidence.append(f"{j} judge, {arm} - {reference}: supported "
                        f"{pair_text(pairs, f'supported_per_response@{j}', arm, reference)}, unsupported "
                        f"{pair_text(pairs, f'unsupported_per_response@{j}', arm, reference)}, step hallucination "
                        f"{pair_text(pairs, f'step_hallucination@{j}', arm, reference)} points; supported, {arm} - "
                        f"{baseline}: {pair_text(pairs, f'supported_per_response@{j}', arm, baseline)}")
    text = f"{head}. " + "; ".join(evidence) + "."
    if check.get("trained_against"):
        text += (f" The {check['trained_against']} judge is left out of the answer: {arm} was trained against it "
                 "(its numbers are in the table).")
    return text


def longer_answer(check: dict, pairs: pd.DataFrame, level: float = 0.95) -> str:
    """The longer-training question's answer and its evidence in words, from `longer_check`."""
    (s_method, s_base), (l_method, l_base) = check["short"], check["long"]
    if check["answer"] == "n/a":
        return f"not answered: {l_method} or {l_base} was not run."
    changed = [r for r in check["metrics"] if r["changed"]]
    if changed:
        head = (f"yes, in {len(changed)} of {len(check['metrics'])} readings: " + "; ".join(
            f"{question_label(r['metric'])} {r['short']} 0 -> {r['long']} 0".replace("unresolved 0", "holds 0")
            for r in changed) + f" ({s_method} - {s_base} -> {l_method} - {l_base}, {level:.0%} intervals; with "
            "this many readings, one changed side can be chance)")
    else:
        head = (f"no: each of {len(check['metrics'])} readings of {l_method} - {l_base} lies on the same side of 0 "
                f"as {s_method} - {s_base}'s, or holds 0 in both")
    shown = [m for m in (r["metric"] for r in check["metrics"])
             if m.split("@")[0] in ("sentences_per_response", "supported_per_response", "step_hallucination",
                                    "matched", "accuracy")]
    evidence = "; ".join(f"{question_label(m)} {pair_text(pairs, m, s_method, s_base)} -> "
                         f"{pair_text(pairs, m, l_method, l_base)}" for m in shown)
    longer = [f"{a} - {b} {pair_text(pairs, 'accuracy', a, b)}" for a, b in ((l_base, s_base), (l_method, s_method))
              if pair_row(pairs, "accuracy", a, b) is not None]
    text = f"{head}. {s_method} - {s_base} -> {l_method} - {l_base}: {evidence}."
    if longer:
        text += " What 4x the budget does to accuracy (points): " + "; ".join(longer) + "."
    return text


def questions_markdown(pairs: pd.DataFrame, verifier: dict, longer: dict, pct: str = "95%") -> list[str]:
    """The summary's section on the added arms: every pair's differences, then both questions' answers."""
    pair_names = list(dict.fromkeys(zip(pairs["method"], pairs["baseline"])))
    metrics = list(dict.fromkeys(pairs["metric"]))
    lines = ["", "## The added arms: a better verifier, a longer run", "",
             f"Paired differences on the same questions [{pct} interval]; `matched`: step hallucination at matched "
             "length (the pair's responses alone). Shares in points, counts per response. Bold: the interval "
             "excludes 0.", "",
             "| metric | " + " | ".join(f"{a} - {b}" for a, b in pair_names) + " |",
             "|---|" + "---|" * len(pair_names)]
    for metric in metrics:
        values = [pair_text(pairs, metric, a, b, bold=True) for a, b in pair_names]
        lines.append(f"| {question_label(metric)} | " + " | ".join(values) + " |")
    lines += ["", "- **Does a better verifier turn saying less into saying right?** "
                  + verifier_answer(verifier, pairs),
              f"- **Does longer training change the picture?** {longer_answer(longer, pairs, float(pct[:-1]) / 100)}"]
    return lines
