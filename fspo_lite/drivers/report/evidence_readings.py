"""The registered readings of docs/statistics.md, "Evidence in the prompt, and the flip's escape closed": H1 on
fspo+ctx - grpo+ctx (with its refutation, its inconclusive conditions and its guards), the interaction of the 2x2
(fspo+ctx - grpo+ctx) - (fspo - grpo), and what closing the bare-name escape does (fspo+strict - fspo).

A reading is made only when every registered seed of every arm it needs is in (and, for the open-book arms, every
run was made with the evidence in the prompt and every response carries the primary judge's labels); otherwise it
is one line, "k of 5 seeds of ARM in; not read yet". The answers are pure functions of the difference rows
(`h1_answer`, `strict_answer`); `evidence_section` makes those rows from the study's cells with the study's paired
bootstrap and Welch's interval over seed values beside it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from fspo_lite import stats
from fspo_lite.drivers.report.arms import pair_row
from fspo_lite.drivers.report.controls import move
from fspo_lite.drivers.report.evidence import (evidence_cells, evidence_responses, read_preflight, same_training,
                                               zero_spread)
from fspo_lite.drivers.report.reader import dumps
from fspo_lite.drivers.report.sensitivity import seed_values, survives, with_welch
from fspo_lite.drivers.report.study import cell_arrays, matched_length, metric_rng, pair_differences

CTX = ("fspo+ctx", "grpo+ctx")
CLOSED = ("fspo", "grpo")
STRICT = "fspo+strict"
CTXEVAL = ("fspo+ctxeval", "grpo+ctxeval")
"""The evaluation-only control: closed-book grpo and fspo, asked their held-out questions with the evidence shown."""
CONTROL_PAIRS = (("fspo+ctxeval", "grpo+ctxeval"), ("grpo+ctxeval", "grpo"), ("fspo+ctxeval", "fspo"),
                 ("grpo+ctx", "grpo+ctxeval"), ("fspo+ctx", "fspo+ctxeval"))
"""The control's described differences: FSPO against GRPO with the prompt at test only; what the prompt does to each
closed-book adapter; what training with the evidence adds over showing it at test only."""
SEEDS = (0, 1, 2, 3, 4)
"""The registered seeds: a reading waits until all of them are in for every arm it reads."""
PRIMARY, SECONDARY = "kb", ("embedding", "likelihood")
ROOM, NO_SPREAD, CUT = 0.15, 0.5, 0.20
"""The inconclusive conditions: grpo+ctx's step hallucination below ROOM, more than NO_SPREAD of the ctx arms'
training groups without reward spread, more than CUT of their held-out responses cut at the token limit."""
PREFLIGHT = Path("preflight_ctx") / "preflight.json"
"""Where the pre-flight's reading lies, beside the runs folder (results/study/preflight_ctx/preflight.json)."""


def guards(judge: str = PRIMARY) -> dict[str, str]:
    """The guards that turn a yes into 'yes by a guarded route' when they move up: {metric: name}."""
    return {f"padding_per_response@{judge}": "padding", "copied_share": "copying", f"bare_name@{judge}": "bare name"}


def pressure(judge: str = PRIMARY) -> dict[str, str]:
    """Where closing the escape may move the pressure (each read as fspo+strict - fspo moving up): {metric: name}."""
    return {"not_attempted": "not-attempted share", "malformed": "malformed answers",
            "near_duplicates_per_response": "near-duplicate sentences",
            f"uncheckable_per_response@{judge}": "sentences the judge cannot check"}


def seeds_line(arm: str, present: Sequence[int], seeds: Sequence[int] = SEEDS) -> str | None:
    """None when every registered seed of `arm` is in, else the line the report shows instead of a reading."""
    have = len(set(seeds) & {int(s) for s in present})
    return None if have == len(seeds) else f"{have} of {len(seeds)} seeds of {arm} in; not read yet"


def h1_answer(rows: dict[str, dict | None], matched: dict | None, room: float, spread: float, cut: float,
              judge: str = PRIMARY, others: Sequence[str] = SECONDARY) -> dict:
    """H1's answer from fspo+ctx - grpo+ctx rows ({metric: row with low, high}, None where missing), kb's
    matched-length row, grpo+ctx's kb step hallucination (seed mean), the ctx arms' share of groups without reward
    spread and their share of responses cut at the token limit. Order of the registered rules: inconclusive (any of
    its conditions; NaN counts as not measured, hence inconclusive), refuted (kb-supported sentences move down), yes
    (step hallucination down and supported not down under kb and at least one other judge, kb's matched difference
    not above 0), turned into 'yes by a guarded route' by any guard that moves up; no otherwise."""
    per_judge = {}
    for j in (judge, *others):
        rate, supported = rows.get(f"step_hallucination@{j}"), rows.get(f"supported_per_response@{j}")
        if rate is not None and supported is not None:
            per_judge[j] = {"rate": move(rate), "supported": move(supported),
                            "more_right": move(rate) == "down" and move(supported) != "down"}
    reasons = []
    for value, bad, name, text in (
            (room, lambda v: v < ROOM, f"grpo+ctx's {judge} step hallucination",
             f"is {{:.1%}}, below {ROOM:.0%}: no room to fall"),
            (spread, lambda v: v > NO_SPREAD, "the ctx arms' share of training groups without reward spread",
             f"is {{:.0%}}, more than {NO_SPREAD:.0%}"),
            (cut, lambda v: v > CUT, "the ctx arms' share of held-out responses cut at the token limit",
             f"is {{:.1%}}, more than {CUT:.0%}")):
        if value is None or math.isnan(value):
            reasons.append(f"{name} was not measured")
        elif bad(value):
            reasons.append(f"{name} {text.format(value)}")
    supported = move(rows.get(f"supported_per_response@{judge}"))
    up = [name for metric, name in guards(judge).items() if move(rows.get(metric)) == "up"]
    right = per_judge.get(judge, {}).get("more_right", False)
    second = [j for j in others if per_judge.get(j, {}).get("more_right")]
    matched_move = move(matched)
    if reasons:
        answer = "inconclusive"
    elif supported == "down":
        answer = "refuted"
    elif right and second and matched_move != "up":
        answer = "yes by a guarded route" if up else "yes"
    else:
        answer = "no"
    why = []
    if not right:
        why.append(f"under {judge}, step hallucination {per_judge.get(judge, {}).get('rate', 'n/a')} and supported "
                   f"sentences {per_judge.get(judge, {}).get('supported', 'n/a')}")
    elif not second:
        why.append(f"under {judge} only, not under {' or '.join(others)}")
    if right and second and matched_move == "up":
        why.append(f"{judge}'s matched-length difference lies above 0")
    return {"answer": answer, "reasons": reasons, "guards_up": up, "per_judge": per_judge, "matched_move": matched_move,
            "supported": supported, "second_judges": second, "why_not": why}


def strict_answer(versus_fspo: dict[str, dict | None], versus_grpo: dict[str, dict | None],
                  judge: str = PRIMARY) -> dict:
    """fspo+strict's answer from its rows against fspo and against grpo ({metric: row}): escape closed (bare-name
    share moves down against fspo); restores supported sentences (kb-supported per response up against fspo and not
    down against grpo); moves the pressure elsewhere (any of `pressure` up against fspo). 'the escape was not closed'
    when it was not (the two readings then described only), else the readings that hold, or 'neither'."""
    closed = move(versus_fspo.get(f"bare_name@{judge}")) == "down"
    supported = f"supported_per_response@{judge}"
    restores = move(versus_fspo.get(supported)) == "up" and move(versus_grpo.get(supported)) not in ("down", "n/a")
    moved = [name for metric, name in pressure(judge).items() if move(versus_fspo.get(metric)) == "up"]
    held = (["restores supported sentences"] if restores else []) + (["moves the pressure elsewhere"] if moved else [])
    answer = "the escape was not closed" if not closed else " and ".join(held) if held else "neither"
    return {"answer": answer, "closed": closed, "restores": restores, "moved_to": moved}


def row_dict(row) -> dict | None:
    """A difference row as a plain dict (NaN for missing numbers), with 'move' and 'survives' (Welch beside it)."""
    if row is None:
        return None
    out = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in dict(row).items()}
    out["move"] = move(out)
    if "welch_low" in out:
        out["survives"] = survives({k: math.nan if out.get(k) is None else out[k]
                                    for k in ("low", "high", "welch_low", "welch_high")})
    return out


def interaction(cells: pd.DataFrame, metrics: Sequence[str], arms: Sequence[str], n_resamples: int = 2000,
                seed: int = 0, level: float = 0.95) -> list[dict]:
    """(a - b) - (c - d) for each metric, arms = (a, b, c, d), one question draw for the four arms
    (`stats.interaction_difference`)."""
    out = []
    for metric in metrics:
        sub = cells[cells["metric"] == metric]
        if not all((sub["method"] == arm).any() for arm in arms):
            continue
        questions = sorted(sub["question"].unique())
        result = stats.interaction_difference([cell_arrays(sub, arm, questions) for arm in arms], n_resamples,
                                              metric_rng(seed, f"{metric}:interaction:{':'.join(arms)}"), level)
        out.append({"metric": metric, "arms": list(arms), **result, "move": move(result)})
    return out


PROMPTS = {"evidence_in_prompt": "in the training prompt (data.evidence_in_prompt)",
           "heldout_evidence": "in the held-out prompt (evaluation.evidence_in_prompt)"}
"""The two places a run can show the evidence (evidence_responses' columns), as the report names them."""


def missing_lines(responses: pd.DataFrame, extra: pd.DataFrame, arms: Sequence[str], open_book: Sequence[str],
                  judge: str = PRIMARY, column: str = "evidence_in_prompt") -> list[str]:
    """Why a reading over `arms` cannot be made yet: seeds missing, responses without `judge`'s labels, runs of an
    arm in `open_book` made without the evidence in the prompt `column` names (PROMPTS), runs of any other arm made
    with it. [] when it can."""
    lines = []
    for arm in arms:
        line = seeds_line(arm, responses.loc[responses["method"] == arm, "seed"].unique())
        if line:
            lines.append(line)
            continue
        rows = extra[extra["method"] == arm]
        unjudged = int((rows["judged"] == 0).sum())
        if unjudged:
            lines.append(f"{unjudged} held-out responses of {arm} carry no {judge} labels (label them with the {judge} "
                         "judge first: `rejudge`); not read yet")
        shown = rows[column].astype(bool)
        wrong = sorted(set(rows.loc[~shown if arm in open_book else shown, "run"]))
        if wrong:
            lines.append(f"{', '.join(wrong)} ({arm}) {'did not have' if arm in open_book else 'had'} the evidence "
                         f"{PROMPTS[column]}; not read")
    return lines


def evidence_section(runs_dir: str | Path, cells: pd.DataFrame, responses: pd.DataFrame, training: pd.DataFrame,
                     judges: Sequence[str], boot: dict, preflight: str | Path | None = None,
                     aside: Sequence[str] = ()) -> dict:
    """The registered readings as summary.json's statistics.evidence (plain numbers and words; rendered by
    `fspo_lite.drivers.report.evidence_text`), and the evaluation-only control described; {} when no run of the
    ctx, strict or control arms exists. `cells`, `responses`, `training`: the study report's, every arm's;
    `preflight`: the pre-flight's reading (default: PREFLIGHT beside the runs folder); `aside`: the arms the main
    tables leave out (`evidence.other_prompt_arms`), named in the section."""
    ran = set(responses["method"])
    if not ran & {*CTX, STRICT, *CTXEVAL}:
        return {}
    arms = [a for a in (*CTX, *CLOSED, STRICT, *CTXEVAL) if a in ran]
    extra = evidence_responses(runs_dir, arms, PRIMARY)
    extra = extra[extra["seed"].isin(SEEDS)]  # the registered seeds only: another seed of an arm is not read
    cells, responses = (frame[frame["seed"].isin(SEEDS)] for frame in (cells, responses))
    wanted = [*[f"{k}@{j}" for j in judges for k in ("step_hallucination", "supported_per_response")], "accuracy",
              "not_attempted", "sentences_per_response"]
    mine = evidence_cells(extra, PRIMARY)
    both = pd.concat([cells[cells["metric"].isin(wanted) & cells["method"].isin(arms)], mine], ignore_index=True)
    values = seed_values(both)

    def pairs(a: str, b: str, metrics: Sequence[str]) -> dict[str, dict | None]:
        table = with_welch(pair_differences(both, metrics, a, b, **boot), values, boot.get("level", 0.95))
        return {m: row_dict(pair_row(table, m, a, b)) if len(table) else None for m in metrics}

    means = values.groupby(["metric", "method"])["value"].mean()  # over seeds, NaN left out: stats.seed_mean

    def mean(metric: str, arm: str) -> float:
        return float(means.get((metric, arm), math.nan))

    path = Path(preflight) if preflight is not None else Path(runs_dir).parent / PREFLIGHT
    out = {"preflight": read_preflight(path), "preflight_path": str(path), "seeds": list(SEEDS), "judge": PRIMARY,
           "arms": {a: sorted(int(s) for s in responses.loc[responses["method"] == a, "seed"].unique())
                    for a in (*CTX, *CLOSED, STRICT, *CTXEVAL)}, "set_aside": list(aside)}
    blocked = missing_lines(responses, extra, CTX, CTX)
    out["h1_not_read"] = blocked
    if not blocked:
        metrics = [*wanted[:-3], *guards(PRIMARY), "accuracy", "sentences_per_response"]
        rows = pairs(*CTX, metrics)
        ctx = responses[responses["method"].isin(CTX)]
        matched = matched_length(ctx, CTX[1], **boot)
        kb = matched[(matched["judge"] == PRIMARY)] if len(matched) else matched
        matched_row = row_dict(kb.iloc[0].drop(labels=["weights"])) if len(kb) else None
        cut_rows = mine[(mine["metric"] == "cut_at_limit") & mine["method"].isin(CTX)]
        cut = float(cut_rows["num"].sum() / cut_rows["den"].sum()) if cut_rows["den"].sum() else math.nan
        spread = zero_spread(training, CTX)
        room = mean(f"step_hallucination@{PRIMARY}", CTX[1])
        out["h1"] = {"rows": rows, "matched": matched_row, "room": room, "spread": spread, "cut": cut,
                     "cut_per_arm": {a: mean("cut_at_limit", a) for a in CTX},
                     "means": {m: {a: mean(m, a) for a in CTX} for m in metrics},
                     **h1_answer(rows, matched_row, room, spread["pooled"], cut)}
        closed_lines = missing_lines(responses, extra, CLOSED, ())
        out["interaction_not_read"] = closed_lines
        if not closed_lines:
            out["interaction"] = interaction(both, [f"step_hallucination@{PRIMARY}",
                                                    f"supported_per_response@{PRIMARY}"], (*CTX, *CLOSED), **boot)
    strict_blocked = missing_lines(responses, extra, (STRICT, *CLOSED), ())
    out["strict_not_read"] = strict_blocked
    if not strict_blocked:
        metrics = [f"bare_name@{PRIMARY}", f"supported_per_response@{PRIMARY}", *pressure(PRIMARY)]
        versus_fspo, versus_grpo = pairs(STRICT, "fspo", metrics), pairs(STRICT, "grpo", metrics[1:2])
        out["strict"] = {"versus_fspo": versus_fspo, "versus_grpo": versus_grpo,
                         "means": {m: {a: mean(m, a) for a in (STRICT, *CLOSED)} for m in metrics},
                         **strict_answer(versus_fspo, versus_grpo)}
    control_blocked = list(dict.fromkeys([*missing_lines(responses, extra, (*CTXEVAL, *CLOSED), ()),
                                          *missing_lines(responses, extra, CTXEVAL, CTXEVAL, column="heldout_evidence")]))
    out["control_not_read"] = control_blocked
    if not control_blocked:  # described, read by no rule
        metrics = [f"step_hallucination@{PRIMARY}", f"supported_per_response@{PRIMARY}", "accuracy",
                   f"bare_name@{PRIMARY}", "cut_at_limit"]
        shown = [a for a in (*CLOSED, *CTXEVAL, *CTX) if a in ran]
        out["control"] = {"arms": shown, "means": {m: {a: mean(m, a) for a in shown} for m in metrics},
                          "same_training": {a: same_training(training, a, b) for a, b in zip(CTXEVAL, CLOSED)},
                          "pairs": [{"arm": a, "reference": b, "rows": pairs(a, b, metrics[:3])}
                                    for a, b in CONTROL_PAIRS if a in ran and b in ran]}
    return dumps(out)  # JSON-safe: NaN as null
