"""Verifiers against every hand label the project has: the gold set (data/gold_sentences.jsonl) and the blind
audit's labels (results/study/audit_items.jsonl).

    python -m fspo_lite.scoring.verifiers.hand_labels --verifiers kb,lexical,embedding,likelihood \
        --out results/verifier_hand_labels.json

Per verifier and item set (the kbqa items, where the kb verifier applies, and all items): AUROC of P(supported)
on the sentences labeled supported or unsupported (a None scored at the threshold); precision and recall of
"unsupported" (predicted: a score at or below the threshold; a None is not a prediction of unsupported); agreement
(the share of those sentences whose label the verifier gives; a None disagrees); coverage (the share it scores);
and agreement on all three labels (not checkable = None). Each with a 95% percentile bootstrap interval that
resamples questions as clusters (fspo_lite.stats.question_draws: how often each question is drawn; 2000
resamples, seed 0).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from fspo_lite.data.examples import DATA_DIR
from fspo_lite.scoring.verifiers.base import Verifier
from fspo_lite.scoring.verifiers.quality import auroc

GOLD = DATA_DIR / "gold_sentences.jsonl"
AUDIT = DATA_DIR.parent / "results" / "study" / "audit_items.jsonl"
LABEL = {"supported": 1, "unsupported": -1, "not_checkable": 0}


def load_hand_labels(paths: Sequence[str | Path]) -> list[dict]:
    """Labeled sentences of every file: question, evidence, sentence, label (+1/-1/0), source question id, file."""
    from fspo_lite.data.labeling import load_items

    rows = []
    for path in paths:
        for item in load_items(path):
            if item.label in LABEL:
                rows.append({"question": item.question, "evidence": item.evidence, "sentence": item.sentence,
                             "label": LABEL[item.label], "question_id": (item.meta or {}).get("example_id", item.id),
                             "file": Path(path).name})
    return rows


def metrics(labels: Sequence[int], scores: Sequence[float | None], threshold: float = 0.5) -> dict:
    """The measures of the module docstring on one list of (hand label, score) pairs."""
    checkable = [(y, s) for y, s in zip(labels, scores) if y != 0]
    predicted = [0 if s is None else (1 if s > threshold else -1) for _, s in checkable]
    truth = [y for y, _ in checkable]
    true_unsupported = sum(p == -1 and y == -1 for p, y in zip(predicted, truth))
    said_unsupported, unsupported = predicted.count(-1), truth.count(-1)
    both = [(y > 0, threshold if s is None else s) for y, s in checkable]
    three = [0 if s is None else (1 if s > threshold else -1) for s in scores]
    return {
        "n": len(checkable), "n_all": len(labels),
        "auroc": auroc([s for _, s in both], [y for y, _ in both]) if len({y for y, _ in both}) == 2 else math.nan,
        "precision_unsupported": true_unsupported / said_unsupported if said_unsupported else math.nan,
        "recall_unsupported": true_unsupported / unsupported if unsupported else math.nan,
        "agreement": sum(p == y for p, y in zip(predicted, truth)) / len(truth) if truth else math.nan,
        "coverage": sum(p != 0 for p in predicted) / len(truth) if truth else math.nan,
        "agreement_three_labels": sum(p == y for p, y in zip(three, labels)) / len(labels) if labels else math.nan,
    }


def bootstrap(rows: list[dict], scores: list[float | None], threshold: float = 0.5, n_resamples: int = 2000,
              seed: int = 0, level: float = 0.95) -> dict:
    """`metrics` with a percentile interval per measure, resampling questions as clusters."""
    from fspo_lite import stats

    point = metrics([r["label"] for r in rows], scores, threshold)
    questions = sorted({r["question_id"] for r in rows})
    members: dict[str, list[int]] = {q: [] for q in questions}
    for k, r in enumerate(rows):
        members[r["question_id"]].append(k)
    draws = stats.question_draws(len(questions), n_resamples, np.random.default_rng(seed))
    samples: dict[str, list[float]] = {key: [] for key in point if key not in ("n", "n_all")}
    for draw in draws:
        picked = [k for q, count in enumerate(draw) for _ in range(int(count)) for k in members[questions[q]]]
        m = metrics([rows[k]["label"] for k in picked], [scores[k] for k in picked], threshold)
        for key in samples:
            samples[key].append(m[key])
    result = {"n": point["n"], "n_all": point["n_all"], "questions": len(questions)}
    for key, values in samples.items():
        low, high = stats.interval(np.asarray(values, dtype=float), level)
        result[key] = {"value": point[key], "low": low, "high": high}
    return result


def evaluate(verifiers: dict[str, Verifier], rows: list[dict], threshold: float = 0.5, n_resamples: int = 2000,
             seed: int = 0) -> dict:
    """{item set: {verifier: bootstrap(...)}} for the kbqa items and for all items."""
    sets = {"kbqa": [r for r in rows if str(r["question_id"]).startswith("kbqa")], "all": rows}
    out: dict = {name: {} for name in sets}
    for verifier_name, verifier in verifiers.items():
        scores = verifier.score([r["evidence"] for r in rows], [r["sentence"] for r in rows],
                                [r["question"] for r in rows])
        by_row = {id(r): s for r, s in zip(rows, scores)}
        for set_name, subset in sets.items():
            out[set_name][verifier_name] = bootstrap(subset, [by_row[id(r)] for r in subset], threshold,
                                                     n_resamples, seed)
    return out


def markdown(result: dict) -> str:
    """One table per item set: value [interval] for every measure."""
    keys = ["auroc", "precision_unsupported", "recall_unsupported", "agreement", "coverage", "agreement_three_labels"]
    lines = []
    for set_name, by_verifier in result["sets"].items():
        first = next(iter(by_verifier.values()))
        lines += [f"**{set_name} items** ({first['n']} sentences labeled supported or unsupported, {first['n_all']} "
                  f"with not checkable, {first['questions']} questions)", "",
                  "| verifier | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for name, m in by_verifier.items():
            cells = [f"{m[k]['value']:.3f} [{m[k]['low']:.3f}, {m[k]['high']:.3f}]" for k in keys]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verifiers", default="kb,lexical")
    parser.add_argument("--labels", default=f"{GOLD},{AUDIT}", help="comma-separated labeled sentence files")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--out", help="write the result as JSON here (and the tables next to it as .md)")
    args = parser.parse_args(argv)
    from fspo_lite.config import VerifierConfig
    from fspo_lite.scoring.verifiers import build_verifier

    paths = [p for p in args.labels.split(",") if p]
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        parser.error(f"no labeled sentences at {', '.join(missing)}")
    rows = load_hand_labels(paths)
    verifiers = {name: build_verifier(VerifierConfig(name=name)) for name in args.verifiers.split(",") if name}
    result = {"labels": [Path(p).name for p in paths], "threshold": args.threshold, "resamples": args.resamples,
              "sets": evaluate(verifiers, rows, args.threshold, args.resamples)}
    text = markdown(result)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
