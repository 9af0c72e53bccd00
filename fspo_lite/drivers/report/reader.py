"""What a reader of an RL paper expects to see, drawn from the committed runs (no new training): per-seed values
beside each mean, supported and unsupported sentences per response over the training steps, a few held-out
questions with every arm's reasoning and the judges' label of each sentence, the share supported by sentence
position, and the bare-name escape (responses whose reasoning has no sentence the claims judge can check).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from fspo_lite.drivers.report.study import judge_labels
from fspo_lite.evaluation.result_files import read_heldout
from fspo_lite.jsonl import read_jsonl

POSITIONS = 3
"""Sentence positions reported (1st, 2nd, 3rd)."""
LABEL_MARK = {1: "S", -1: "U", 0: "-", None: "-"}
"""A judge's label of one sentence in the examples table: supported, unsupported, not checkable."""


def per_seed(seeds: pd.DataFrame, metrics: Sequence[str], order: Sequence[str]) -> list[dict]:
    """{metric, method, values: [per seed, in seed order]} for the named metrics (seed_values' rows)."""
    out = []
    for metric in metrics:
        sub = seeds[seeds["metric"] == metric]
        for method in [m for m in order if m in set(sub["method"])]:
            rows = sub[sub["method"] == method].sort_values("seed")
            out.append({"metric": metric, "method": method, "seeds": [int(s) for s in rows["seed"]],
                        "values": [None if math.isnan(v) else float(v) for v in rows["value"]]})
    return out


def short_records(runs_dir: str | Path, qa: str = "kbqa"):
    """(method, seed, record) of every run's held-out short-QA records."""
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        records = path.parent / "eval" / "records.jsonl"
        if not records.exists():
            continue
        info = read_heldout(path)
        for record in read_jsonl(records):
            if record.get("benchmark") == qa:
                yield info["method"], info.get("seed"), judge_labels(record, info.get("judge", "judge")), record


def position_shares(runs_dir: str | Path, judge: str, qa: str = "kbqa", positions: int = POSITIONS) -> list[dict]:
    """Per method and sentence position (1st, 2nd, ...): the share of the sentences at that position that `judge`
    labels supported, of those it labels at all, all seeds pooled, with the count."""
    counts: dict[tuple[str, int], list[int]] = {}
    for method, _, labels, _ in short_records(runs_dir, qa):
        for k, label in enumerate((labels.get(judge) or [])[:positions]):
            if label:
                cell = counts.setdefault((method, k + 1), [0, 0])
                cell[0] += label > 0
                cell[1] += 1
    return [{"method": m, "position": k, "supported": s, "checkable": n, "share": s / n}
            for (m, k), (s, n) in sorted(counts.items())]


def reasoning_of(output: str) -> str:
    """The text inside <think> ... </think> (the whole output when there is none), on one line."""
    from fspo_lite.text import parse_response

    span = parse_response(output).think_span
    return " ".join((output[span[0]:span[1]] if span else output).split())


def examples(runs_dir: str | Path, questions: Sequence[str], order: Sequence[str], seed: int = 0,
             qa: str = "kbqa") -> list[dict]:
    """For each question, each arm's first held-out response (sample 0) of seed `seed`: its reasoning, every
    sentence with each judge's label, its answer and grade."""
    wanted = set(questions)
    found = {}
    for method, run_seed, labels, record in short_records(runs_dir, qa):
        if record["id"] in wanted and record.get("sample", 0) == 0 and (run_seed == seed or method == "base"):
            spans = record.get("sentence_spans") or []
            sentences = [{"text": record["output"][a:b], **{j: (v[k] if k < len(v) else None)
                                                           for j, v in labels.items()}}
                         for k, (a, b) in enumerate(spans)]
            found[(record["id"], method)] = {"question": record["id"], "method": method, "answer": record.get("answer"),
                                             "grade": record["grade"], "reasoning": reasoning_of(record["output"]),
                                             "sentences": sentences}
    return [found[(q, m)] for q in questions for m in order if (q, m) in found]


def pick_questions(responses: pd.DataFrame, claims_judge: str, arm: str = "fspo", n: int = 3) -> list[str]:
    """Held-out questions for the examples table: the one where `arm`'s seed-0 first answer has no sentence the
    claims judge can check and is shortest (a bare name) and, after it, the first n - 1 where every arm answered
    with at least one checkable sentence, so that arms' reasoning can be compared."""
    first = responses[(responses["sample"] == 0)]
    bare = first[(first["method"] == arm) & (first["seed"] == 0) & (first[f"checkable@{claims_judge}"] == 0)
                 & (first["sentences"] > 0)]
    picked = list(bare.sort_values(["response_tokens", "question"])["question"])[:1]  # the shortest: a bare name
    full = first[first["seed"].isin([0, -1])].groupby("question")[f"checkable@{claims_judge}"].min()
    picked += [q for q in sorted(full[full > 0].index) if q not in picked][:n - len(picked)]
    return picked


def examples_markdown(rows: Sequence[dict], judges: Sequence[str]) -> list[str]:
    """The examples table: one row per arm and question; each sentence followed by the judges' labels in brackets
    (S supported, U unsupported, - not checkable; judges in the order named)."""
    if not rows:
        return []
    lines = ["", "## Held-out questions as each arm answered them", "",
             f"Seed 0's first answer to each question (the base model: its only one). After each reasoning sentence, "
             f"the judges' labels in the order {', '.join(judges)} (S supported, U unsupported, - not checkable). A "
             "reasoning that is only a name has no sentence a judge of claims can check: the flip cannot act on it.",
             "", "| question | arm | reasoning, sentence by sentence [labels] | answer | grade |", "|---|---|---|---|---|"]
    for row in rows:
        text = " ".join(f"{s['text'].strip()} [{''.join(LABEL_MARK.get(s.get(j)) for j in judges)}]"
                        for s in row["sentences"]) or f"({row['reasoning'][:80] or 'no reasoning'})"
        lines.append(f"| {row['question']} | {row['method']} | {text.replace('|', '/')} | "
                     f"{str(row['answer']).replace('|', '/')} | {row['grade'].lower()} |")
    return lines


def training_panels(training: pd.DataFrame, path: str | Path | None, order: Sequence[str]):
    """Supported and unsupported sentences per response over the training steps (the training verifier's labels of
    the sampled responses, as the trainer logged them), one small panel per arm: mean over seeds with each seed
    faint. None when the logs carry no such columns."""
    from fspo_lite.drivers.report.plots import pyplot, save_figure

    need = {"supported_per_response", "unsupported_per_response", "step", "method"}
    if training.empty or not need <= set(training.columns):
        return None
    arms = [m for m in order if m in set(training["method"])]
    plt = pyplot()
    cols = 4
    rows = math.ceil(len(arms) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), sharey=True, squeeze=False)
    for ax, arm in zip(axes.flat, arms):
        runs = training[training["method"] == arm]
        for kind, color in (("supported_per_response", "tab:green"), ("unsupported_per_response", "tab:red")):
            for _, seed_rows in runs.groupby("seed"):
                ax.plot(seed_rows["step"], seed_rows[kind], color=color, alpha=0.2, linewidth=0.8)
            mean = runs.groupby("step")[kind].mean()
            ax.plot(mean.index, mean.values, color=color, linewidth=1.8, label=kind.split("_")[0])
        ax.set_title(arm, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    for ax in list(axes.flat)[len(arms):]:
        ax.axis("off")
    axes[0][0].set_ylabel("sentences per response")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Supported and unsupported sentences per sampled response during training (training verifier)")
    return save_figure(fig, path)


def per_seed_figure(rows: Sequence[dict], metrics: Sequence[str], labels: Sequence[str], path: str | Path | None,
                    order: Sequence[str]):
    """One panel per metric: each arm's seed values as dots beside their mean (a bar). None when there is none."""
    from fspo_lite.drivers.report.plots import pyplot, save_figure

    if not rows:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(metrics), 1, figsize=(10, 2.6 * len(metrics)), squeeze=False)
    for ax, metric, label in zip(axes[:, 0], metrics, labels):
        sub = [r for r in rows if r["metric"] == metric]
        arms = [m for m in order if any(r["method"] == m for r in sub)]
        scale = 100.0 if metric.startswith(("step_hallucination", "no_checkable")) else 1.0
        for x, arm in enumerate(arms):
            values = [v * scale for r in sub if r["method"] == arm for v in r["values"] if v is not None]
            if values:
                ax.hlines(sum(values) / len(values), x - 0.3, x + 0.3, color="black")
                ax.plot([x + 0.1 * (k - 2) for k in range(len(values))], values, "o", markersize=4, alpha=0.7)
        ax.set_xticks(range(len(arms)), arms, fontsize=8)
        ax.set_ylabel(label, fontsize=8)
    fig.suptitle("Each seed (dots) beside the mean over seeds (line)")
    return save_figure(fig, path)


def run_times(runs_dir: str | Path) -> list[dict]:
    """Each run's own measured time, as its files record it: training = the sum of its steps' step_time
    (metrics.jsonl; 0 for the base model, which is not trained), evaluation = the sum of its benchmarks' seconds
    (eval/summary.json). One row per <run>/heldout.json: run, method, steps, train_seconds, eval_seconds."""
    rows = []
    for info in sorted(Path(runs_dir).glob("*/heldout.json")):
        run = info.parent
        steps = list(read_jsonl(run / "metrics.jsonl")) if (run / "metrics.jsonl").exists() else []
        summary = run / "eval" / "summary.json"
        benchmarks = json.loads(summary.read_text()).get("benchmarks", {}) if summary.exists() else {}
        rows.append({"run": run.name, "method": json.loads(info.read_text()).get("method"), "steps": len(steps),
                     "train_seconds": float(sum(float(s.get("step_time") or 0.0) for s in steps)),
                     "eval_seconds": float(sum(float(b.get("seconds") or 0.0) for b in benchmarks.values()))})
    return rows


def time_totals(rows: Sequence[dict]) -> dict:
    """The runs' measured time in sums and per-run ranges: models (rows), trained (rows with a step), train and
    eval seconds summed, and the smallest and largest per run of training (trained runs only), evaluation and
    both together. {} without rows."""
    if not rows:
        return {}
    trained = [r["train_seconds"] for r in rows if r["steps"]]
    evals = [r["eval_seconds"] for r in rows]
    both = [r["train_seconds"] + r["eval_seconds"] for r in rows]
    return {"models": len(rows), "trained": len(trained), "train_seconds": sum(trained), "eval_seconds": sum(evals),
            "total_seconds": sum(both), "train_range": [min(trained), max(trained)] if trained else None,
            "eval_range": [min(evals), max(evals)], "run_range": [min(both), max(both)]}


def dumps(value) -> object:
    """JSON-safe copy (NaN as None)."""
    return json.loads(json.dumps(value, default=float).replace("NaN", "null"))


def reader_statistics(runs_dir: str | Path, responses: pd.DataFrame, seeds: pd.DataFrame, differences: pd.DataFrame,
                      more_right: Sequence[dict], training: pd.DataFrame, judges: Sequence[str],
                      order: Sequence[str], figure_path, qa: str = "kbqa") -> dict:
    """Everything above for summary.json's statistics.reader: per-seed values of the primary judge's readings, the
    Holm readings of question (b), the smallest resolvable difference in supported sentences per judge, the share
    supported by position, the examples, and the two figures (their paths, or why not drawn)."""
    from fspo_lite.drivers.report.sensitivity import holm_readings, resolvable

    primary = judges[0] if judges else None
    metrics = ["accuracy", *([f"step_hallucination@{primary}", f"supported_per_response@{primary}",
                              f"no_checkable@{primary}"] if primary else [])]
    seeds_rows = per_seed(seeds, metrics, order)
    figures, not_drawn = {}, {}
    for name, drawn, why in (
            ("per_seed", lambda p: per_seed_figure(seeds_rows, metrics, ["accuracy %", f"step halluc. % ({primary})",
                                                                          f"supported / response ({primary})",
                                                                          f"no checkable sentence % ({primary})"],
                                                   p, order), "no per-seed value"),
            ("training_sentences", lambda p: training_panels(training, p, order),
             "the training logs carry no supported_per_response / unsupported_per_response")):
        path = figure_path(name)
        if drawn(path) is not None:
            figures[name] = str(path)
        else:
            not_drawn[Path(path).name] = why
    claims = primary if primary and f"checkable@{primary}" in responses else None
    return dumps({
        "primary": primary, "per_seed": seeds_rows,
        "holm": holm_readings(differences, more_right) if len(differences) and "welch_p" in differences else [],
        "resolvable": {j: resolvable(differences, f"supported_per_response@{j}") for j in judges}
        if len(differences) else {},
        "positions": position_shares(runs_dir, primary, qa) if primary else [],
        "run_times": time_totals(run_times(runs_dir)),
        "examples": examples(runs_dir, pick_questions(responses, claims), order) if claims else [],
        "figures": figures, "figures_not_drawn": not_drawn})


def main_table_markdown(stats: dict, order: Sequence[str]) -> list[str]:
    """The primary judge's main table: per arm accuracy, step hallucination, the bare-name escape (responses with
    no checkable sentence) with each seed's value, supported and unsupported sentences per response, reasoning
    sentences; mean over seeds [95% interval]."""
    from fspo_lite.drivers.report.study import format_interval

    reader = stats.get("reader") or {}
    judge = reader.get("primary")
    if not judge:
        return []
    cells = {(r["metric"], r["method"]): r for r in stats.get("methods") or []}
    seeds = {r["method"]: r["values"] for r in reader.get("per_seed") or [] if r["metric"] == f"no_checkable@{judge}"}
    columns = [("accuracy", "accuracy %"), (f"step_hallucination@{judge}", "step hallucination %"),
               (f"no_checkable@{judge}", "no checkable sentence %"),
               (f"supported_per_response@{judge}", "supported / response"),
               (f"unsupported_per_response@{judge}", "unsupported / response"),
               ("sentences_per_response", "reasoning sentences / response")]
    lines = ["## Main table: the primary judge (" + judge + ")", "",
             f"Mean over seeds [95% interval]. *No checkable sentence*: responses whose reasoning has no sentence the "
             f"{judge} judge can check (a bare name such as `<think>Oxygen</think>`, or no reasoning): the flip cannot "
             "act on them, and a rate over checkable sentences does not see them. Its value per seed is beside it.", "",
             "| arm | " + " | ".join(label for _, label in columns) + " | no checkable sentence, per seed % |",
             "|---|" + "---|" * (len(columns) + 1)]
    for arm in [m for m in order if (columns[1][0], m) in cells]:
        values = [format_interval(metric, *(cells[(metric, arm)][k] for k in ("mean", "low", "high")))
                  if (metric, arm) in cells else "" for metric, _ in columns]
        per = ", ".join("n/a" if v is None else f"{100 * v:.0f}" for v in seeds.get(arm, []))
        lines.append(f"| {arm} | " + " | ".join(values) + f" | {per} |")
    return lines + [""]


def positions_markdown(rows: Sequence[dict], judge: str | None, order: Sequence[str]) -> list[str]:
    """The share supported by sentence position, per arm (all seeds pooled)."""
    if not rows:
        return []
    by = {(r["method"], r["position"]): r for r in rows}
    lines = ["", "## Share supported by sentence position", "",
             f"Of the reasoning sentences at each position that the {judge} judge can check, the share it finds "
             "supported (all seeds pooled; n in brackets).", "",
             "| arm | " + " | ".join(f"sentence {k}" for k in range(1, POSITIONS + 1)) + " |",
             "|---|" + "---|" * POSITIONS]
    for arm in [m for m in order if any((m, k) in by for k in range(1, POSITIONS + 1))]:
        lines.append(f"| {arm} | " + " | ".join(
            f"{100 * by[(arm, k)]['share']:.0f}% ({by[(arm, k)]['checkable']})" if (arm, k) in by else ""
            for k in range(1, POSITIONS + 1)) + " |")
    return lines


def figures_markdown(figures: dict) -> list[str]:
    """Where the reader's figures are, said in summary.md (none when they were not drawn)."""
    said = {"per_seed": "each seed (dots) beside its arm's mean, for accuracy and the primary judge's readings",
            "training_sentences": "supported and unsupported sentences per sampled response over the training steps, "
                                  "one panel per arm; these are the training verifier's labels as the trainer logged "
                                  "them (lexical for every arm but fspo+kb), not a held-out judge's"}
    shown = [f"`{figures[k]}`: {text}" for k, text in said.items() if k in figures]
    return ["", "Figures: " + "; ".join(shown) + "."] if shown else []
