"""How far each held-out judge can be trusted: its agreement with the hand labels (docs/statistics.md, "Judge
validity"), and whether the blind audit's draw is typical of the sentences it was drawn from.

Three hand-labelled sets lie beside the study: the blind audit (results/study/audit_items.jsonl with its key), the
kb judge's out-of-sample check (results/study/kb_check_items.jsonl with its key) and the second blind audit
(results/study/audit2_items.jsonl with its key: grpo, fspo, corver and fspo+4x, stratified by question, labelled
after the kb judge's rules were fixed). Each item is one held-out reasoning
sentence; its key names the run, question and sample it came from. The judges' labels are read from that run's
records today (the kb judge was added after the audit was drawn), and an item whose response is no longer in the
records (a run made again since) is left out and counted. For each judge: agreement with the hand labels on the
sentences a person found checkable, Cohen's kappa, and the constant baseline (every sentence 'unsupported'), each
with a bootstrap interval over questions. For the second audit also each arm's unsupported share by the hand
labels (`fspo_lite.drivers.audit.score_audit`) and each judge's agreement within each arm and over the arms that
train with FSPO's flip (fspo, corver, fspo+4x: the sentences a judge of FSPO must read).

    python -m fspo_lite.drivers.report.validity --runs results/study/runs --out results/study/judge_validity.json

The functions are pure but for the readers; the command writes the JSON the study report renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from fspo_lite import stats
from fspo_lite.atomic import atomic_write_text
from fspo_lite.data.labeling import LABEL_VALUES, load_items
from fspo_lite.drivers.report.study import judge_labels
from fspo_lite.jsonl import read_jsonl

SETS = (("audit", "audit_items.jsonl", "audit_key.json",
         "the blind audit (grpo and fspo; the kb judge's rules were written reading these labels: in-sample for kb)"),
        ("out of sample", "kb_check_items.jsonl", "kb_check_key.json",
         "120 sentences of random, format and ternary labelled after the kb rules were fixed"),
        ("second audit", "audit2_items.jsonl", "audit2_key.json",
         "grpo, fspo, corver and fspo+4x, stratified by question, labelled after the kb rules were fixed: out of "
         "sample for every judge"))
"""(name, items file, key file, what it is) of the hand-labelled sets, in results/study/."""
SCORED_SETS = ("second audit",)
"""Sets whose arms are compared by their hand labels (each arm's unsupported share, each judge within each arm)."""
FLIP_ARMS = ("fspo", "corver", "fspo+4x")
"""The arms trained with FSPO's flip: their pooled sentences are the FSPO-style ones a judge is read on."""
VALIDITY_FILE = "judge_validity.json"


def records_by_response(runs_dir: str | Path, runs: Sequence[str], qa: str = "kbqa") -> dict:
    """(run, question id, sample) -> (response text, {judge: labels}) of the named runs' short-QA records."""
    found = {}
    for run in sorted(set(runs)):
        path = Path(runs_dir) / run / "eval" / "records.jsonl"
        info_path = Path(runs_dir) / run / "heldout.json"
        if not path.exists() or not info_path.exists():
            continue
        judge = json.loads(info_path.read_text()).get("judge", "judge")
        for record in read_jsonl(path):
            if record.get("benchmark") == qa:
                spans = [tuple(s) for s in record.get("sentence_spans") or []]
                found[(run, record["id"], record.get("sample", 0))] = (record["output"], spans,
                                                                      judge_labels(record, judge))
    return found


def labelled_rows(items, key: dict, records: dict) -> tuple[list[dict], int]:
    """One row per hand-labelled item whose response is unchanged in today's records: question, method, hand value
    (+1 / -1 / 0) and each judge's label of that sentence; and how many items were left out (response changed or
    run missing). Unlabelled items are an error: the key is not read for a set that is not fully labelled."""
    unlabelled = [item.id for item in items if item.label is None]
    if unlabelled:
        raise ValueError(f"{len(unlabelled)} items are not labelled (first: {unlabelled[0]}): no judge is scored "
                         "against a set before it is fully labelled")
    rows, dropped = [], 0
    for item in items:
        entry = key.get(item.id)
        if entry is None:
            raise ValueError(f"item {item.id} is not in the key: wrong key file?")
        found = records.get((entry["run"], entry["question_id"], entry.get("sample", 0)))
        if found is None or found[0] != item.response or tuple(item.span) not in found[1]:
            dropped += 1
            continue
        position = found[1].index(tuple(item.span))
        judges = {j: (labels[position] if position < len(labels) else None) for j, labels in found[2].items()}
        rows.append({"id": item.id, "question": entry["question_id"], "method": entry["method"],
                     "human": LABEL_VALUES[item.label], "judges": judges})
    return rows, dropped


def judge_validity(rows: Sequence[dict], n_resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Per judge, on the rows a person labelled checkable: agreement, kappa and the constant baseline with
    intervals (`fspo_lite.stats.agreement_interval`, questions as clusters)."""
    checkable = [r for r in rows if r["human"] != 0]
    judges = sorted({j for r in checkable for j in r["judges"]})
    out = {}
    for judge in judges:
        out[judge] = stats.agreement_interval([r["question"] for r in checkable], [r["human"] for r in checkable],
                                              [r["judges"].get(judge) for r in checkable], n_resamples,
                                              np.random.default_rng([seed, len(judge)]), level)
    return out


def draw_check(rows: Sequence[dict], pool: dict[str, tuple[int, int]], judge: str = "kb") -> dict:
    """Is the audit's draw typical of its pools? Per method: the `judge`-supported sentences among the drawn ones
    the judge labels, the count the method's whole pool predicts (pool: method -> (supported, labelled by the
    judge)), and the probability of a count as far below (or above) it under a uniform draw without replacement
    (hypergeometric tail)."""
    from scipy.stats import hypergeom

    out = {}
    for method in sorted({r["method"] for r in rows}):
        labels = [r["judges"].get(judge) for r in rows if r["method"] == method]
        labelled = [x for x in labels if x]
        drawn, supported = len(labelled), sum(1 for x in labelled if x > 0)
        total, good = pool[method][1], pool[method][0]
        expected = drawn * good / total if total else float("nan")
        tail = (hypergeom.cdf(supported, total, good, drawn) if supported <= expected
                else hypergeom.sf(supported - 1, total, good, drawn))
        out[method] = {"drawn": drawn, "supported": supported, "expected": expected, "tail": float(tail),
                       "pool_share": good / total if total else float("nan")}
    return out


def arm_readings(items, key: dict, rows: Sequence[dict], methods: Sequence[str], n_resamples: int = 2000,
                 seed: int = 0) -> dict:
    """{"arms": score_audit's result (each arm's hand-label counts and unsupported share with its interval, every
    later arm minus the first), "by_arm": per arm, and over FLIP_ARMS pooled ("flip arms"), each judge's
    agreement, kappa and constant baseline (judge_validity on that arm's rows)}."""
    from fspo_lite.drivers.audit import score_audit  # here: drivers.audit imports the report package

    arms = score_audit(items, key, methods, n_resamples, seed)
    arms.pop("judge_agreement", None)  # the judges' labels as drawn; judge_validity reads today's records
    groups = {m: [m] for m in methods}
    flip = [m for m in FLIP_ARMS if m in methods]
    if flip:
        groups["flip arms"] = flip
    return {"arms": arms, "by_arm": {name: {"methods": members, "checkable": sum(
        1 for r in rows if r["method"] in members and r["human"] != 0), "judges": judge_validity(
        [r for r in rows if r["method"] in members], n_resamples, seed)} for name, members in groups.items()}}


def pool_counts(runs_dir: str | Path, methods: Sequence[str], judge: str = "kb", qa: str = "kbqa") -> dict:
    """method -> (sentences the judge labels supported, sentences it labels at all) over all its runs today."""
    counts = {m: [0, 0] for m in methods}
    for info_path in sorted(Path(runs_dir).glob("*/heldout.json")):
        info = json.loads(info_path.read_text())
        records = info_path.parent / "eval" / "records.jsonl"
        if info.get("method") not in counts or not records.exists():
            continue
        for record in read_jsonl(records):
            if record.get("benchmark") == qa:
                labels = judge_labels(record, info.get("judge", "judge")).get(judge) or []
                counts[info["method"]][0] += sum(1 for x in labels if x and x > 0)
                counts[info["method"]][1] += sum(1 for x in labels if x)
    return {m: tuple(c) for m, c in counts.items()}


def validity_report(runs_dir: str | Path, folder: str | Path, n_resamples: int = 2000, seed: int = 0) -> dict:
    """Every hand-labelled set found in `folder`: its size, the items left out, each judge's validity; and the
    audit's draw check under the kb judge."""
    report = {"sets": {}, "n_resamples": n_resamples, "level": 0.95}
    for name, items_name, key_name, what in SETS:
        items_path, key_path = Path(folder) / items_name, Path(folder) / key_name
        if not (items_path.exists() and key_path.exists()):
            continue
        items = load_items(items_path)
        key = json.loads(key_path.read_text())["items"]
        records = records_by_response(runs_dir, [e["run"] for e in key.values()])
        rows, dropped = labelled_rows(items, key, records)
        entry = {"what": what, "items": len(items), "left_out": dropped,
                 "checkable": sum(1 for r in rows if r["human"] != 0),
                 "questions": len({r["question"] for r in rows if r["human"] != 0}),
                 "judges": judge_validity(rows, n_resamples, seed)}
        if name == "audit":
            methods = sorted({r["method"] for r in rows})
            entry["draw"] = draw_check(rows, pool_counts(runs_dir, methods))
        if name in SCORED_SETS:
            entry.update(arm_readings(items, key, rows, json.loads(key_path.read_text())["methods"], n_resamples,
                                      seed))
        report["sets"][name] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fspo_lite.drivers.report.validity",
                                     description="Score every held-out judge against the study's hand labels.")
    parser.add_argument("--runs", default="results/study/runs", help="the runs folder; default: %(default)s")
    parser.add_argument("--labels", default="results/study", help="folder of the labelled sets; default: %(default)s")
    parser.add_argument("--out", default=f"results/study/{VALIDITY_FILE}", help="JSON written; default: %(default)s")
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args(argv)
    try:
        report = validity_report(args.runs, args.labels, args.resamples)
    except ValueError as error:
        print(f"fspo_lite: error: validity: {error}", file=sys.stderr)
        return 2
    if not report["sets"]:
        print(f"fspo_lite: error: validity: no labelled set under {args.labels}", file=sys.stderr)
        return 2
    atomic_write_text(Path(args.out), json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def pct_interval(row: dict, name: str, places: int = 0) -> str:
    """'94% [90, 98]' for agreement-like shares; kappa as '0.77 [0.59, 0.91]'."""
    if name == "kappa":
        return f"{row['kappa']:.2f} [{row['kappa_low']:.2f}, {row['kappa_high']:.2f}]"
    return f"{100 * row[name]:.{places}f}% [{100 * row[name + '_low']:.{places}f}, {100 * row[name + '_high']:.{places}f}]"


def validity_reading(validity: dict, primary: str | None = None) -> str:
    """One plain sentence on what the judges' agreement means for the numbers below it: which judges agree with
    people more often than the constant 'unsupported' answer does (agreement's interval above the constant's point)
    on every set, and which agree less often (point below)."""
    sets = validity.get("sets") or {}
    judges = sorted(sorted({j for s in sets.values() for j in s["judges"]}), key=lambda j: j != primary)
    better = [j for j in judges if all(s["judges"][j]["agree_low"] > s["judges"][j]["constant"]
                                       for s in sets.values() if j in s["judges"])]
    worse = [j for j in judges if all(s["judges"][j]["agree"] < s["judges"][j]["constant"]
                                      for s in sets.values() if j in s["judges"])]
    parts = []
    if better:
        parts.append(f"Only the {' and '.join(better)} judge{'s' if len(better) > 1 else ''} agree"
                     f"{'' if len(better) > 1 else 's'} with the hand labels more often than a constant "
                     "'unsupported' would")
    if worse:
        parts.append(f"the {' and '.join(worse)} judge{'s' if len(worse) > 1 else ''} agree"
                     f"{'' if len(worse) > 1 else 's'} less often than that constant, so "
                     f"{'their' if len(worse) > 1 else 'its'} rates below measure something other than support "
                     "(topicality, fluency) and are secondary readings")
    if not parts:
        return "No judge agrees with the hand labels more often than a constant 'unsupported' would."
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def validity_markdown(validity: dict, primary: str | None = None) -> list[str]:
    """The first-screen table: per judge and labelled set, agreement, Cohen's kappa and the constant baseline with
    their 95% intervals, then the plain reading."""
    sets = validity.get("sets") or {}
    if not sets:
        return []
    judges = sorted(sorted({j for s in sets.values() for j in s["judges"]}), key=lambda j: j != primary)
    head = " | ".join(f"{name} (n = {s['checkable']}): agreement / kappa / constant" for name, s in sets.items())
    lines = [f"| judge | {head} |", "|---|" + "---|" * len(sets)]
    for judge in judges:
        cells = [" / ".join(pct_interval(s["judges"][judge], k) for k in ("agree", "kappa", "constant"))
                 if judge in s["judges"] else "" for s in sets.values()]
        lines.append(f"| {judge}{' (primary)' if judge == primary else ''} | " + " | ".join(cells) + " |")
    notes = "; ".join(f"{name}: {s['what']}" + (f", {s['left_out']} items left out (their response changed when a run "
                                                "was made again)" if s["left_out"] else "")
                      for name, s in sets.items())
    return [*lines, "", f"Hand-labelled checkable sentences, 95% intervals over questions ({notes}). "
            + validity_reading(validity, primary)]


def draw_reading(validity: dict, judge: str = "kb") -> str:
    """The audit draw check in one sentence ('' without one): the method whose drawn half is furthest from its pool,
    and how likely a count that far is under the audit's own uniform draw."""
    draw = ((validity.get("sets") or {}).get("audit") or {}).get("draw") or {}
    if not draw:
        return ""
    method, row = min(draw.items(), key=lambda kv: kv[1]["tail"])
    typical = row["tail"] >= 0.01
    return (f"its {method} half holds {row['supported']} {judge}-supported sentences of {row['drawn']} where "
            f"{method}'s whole pool predicts {row['expected']:.1f} (a count this far off has probability "
            f"{row['tail']:.4f} under the audit's uniform draw)"
            + ("" if typical else ": the draw stands as drawn, but it is not typical of what fspo writes"))


def points(d: dict) -> str:
    """'-6.2 [-20.6, +7.9]' for a difference of shares given as fractions."""
    return f"{100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def second_audit_reading(validity: dict, judge: str = "kb") -> str:
    """The second audit in one sentence ('' without one): each arm's unsupported share by the hand labels, every arm
    against the first, whether any interval excludes 0, and `judge`'s agreement on the arms trained with the flip."""
    entry = (validity.get("sets") or {}).get("second audit") or {}
    arms = entry.get("arms")
    if not arms:
        return ""
    shares = ", ".join(f"{m} {100 * arms['unsupported_share'][m]:.0f}% "
                       f"[{100 * arms['unsupported_share_interval'][m][0]:.0f}, "
                       f"{100 * arms['unsupported_share_interval'][m][1]:.0f}]" for m in arms["methods"])
    pairs = arms.get("differences") or {}
    resolved = [name for name, d in pairs.items() if d["high"] < 0 or d["low"] > 0]
    text = (f"Second blind audit ({arms['items']} sentences, {arms['questions']} questions, stratified by question, "
            f"labelled blind to arm and judge): unsupported share of checkable sentences {shares}; "
            + "; ".join(f"{name} {points(d)} points" for name, d in pairs.items()) + " ("
            + (f"resolved: {', '.join(resolved)}" if resolved else "no interval excludes 0") + ")")
    flip = ((entry.get("by_arm") or {}).get("flip arms") or {})
    row = (flip.get("judges") or {}).get(judge)
    if row:
        text += (f"; the {judge} judge agrees with it on {pct_interval(row, 'agree')} of the {flip['checkable']} "
                 f"checkable sentences of {', '.join(flip['methods'])} (kappa {pct_interval(row, 'kappa')}, out of "
                 "sample" + (f"; no disagreement to resample, exact lower bound {all_agree_bound(row):.1%}"
                             if row["agree"] == 1 else "") + ")")
    return text + "."


def all_agree_bound(row: dict, level: float = 0.95) -> float:
    """For a judge that agrees on every one of row['n'] sentences (its bootstrap interval is then [1, 1]): the
    Clopper-Pearson lower bound of its agreement, sentences taken as independent (`fspo_lite.stats.exact_lower`)."""
    return stats.exact_lower(row["n"], row["n"], level)


def second_audit_markdown(validity: dict, primary: str | None = None) -> list[str]:
    """summary.md's section on the second audit: each arm's hand-label counts and unsupported share, the
    differences from the first arm, and each judge's agreement within each arm and over the flip arms."""
    entry = (validity.get("sets") or {}).get("second audit") or {}
    arms = entry.get("arms")
    if not arms:
        return []
    lines = ["## Second blind audit", "",
             f"{arms['items']} held-out reasoning sentences ({arms['items'] // len(arms['methods'])} per arm) from "
             f"{arms['questions']} questions: one sentence of each arm from each question of a seeded draw, shuffled, "
             "labelled by hand from the question, the evidence and the response only (docs/statistics.md, \"The "
             "second audit\").", "",
             "| arm | supported | unsupported | not checkable | unsupported share of checkable [95% interval] |",
             "|---|---|---|---|---|"]
    for m in arms["methods"]:
        c, (low, high) = arms["counts"][m], arms["unsupported_share_interval"][m]
        lines.append(f"| {m} | {c['supported']} | {c['unsupported']} | {c['not_checkable']} | "
                     f"{100 * arms['unsupported_share'][m]:.1f}% [{100 * low:.1f}, {100 * high:.1f}] |")
    lines += ["", "Differences (points, bootstrap over questions as clusters): "
              + "; ".join(f"{name} {points(d)}" for name, d in (arms.get("differences") or {}).items()) + ".", ""]
    by_arm = entry.get("by_arm") or {}
    judges = sorted(sorted({j for g in by_arm.values() for j in g["judges"]}), key=lambda j: j != primary)
    lines += ["Each judge against these labels, within each arm (agreement / kappa / constant 'unsupported'):", "",
              "| judge | " + " | ".join(f"{name} (n = {g['checkable']})" for name, g in by_arm.items()) + " |",
              "|---|" + "---|" * len(by_arm)]
    for judge in judges:
        lines.append(f"| {judge}{' (primary)' if judge == primary else ''} | " + " | ".join(
            " / ".join(pct_interval(g["judges"][judge], k) for k in ("agree", "kappa", "constant"))
            if judge in g["judges"] else "" for g in by_arm.values()) + " |")
    perfect = [f"{judge} on {name} ({all_agree_bound(g['judges'][judge]):.1%})" for name, g in by_arm.items()
               for judge in judges if g["judges"].get(judge, {}).get("agree") == 1]
    if perfect:
        lines += ["", "Where a judge agrees on every sentence the bootstrap has no disagreement to resample and its "
                  "interval is [100, 100]; the exact (Clopper-Pearson) 95% lower bound, sentences taken as "
                  "independent: " + "; ".join(perfect) + "."]
    return [*lines, ""]
