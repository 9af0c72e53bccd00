"""`python -m fspo_lite verifiers benchmark`: accuracy, balanced accuracy, AUROC and speed of each verifier.

Two test sets:

- HaluEval-QA: each row has a question, its evidence (`knowledge`) and one candidate answer,
  hallucinated or not. The verifier sees (evidence, claim) where the claim is the candidate
  turned into a statement together with the question (`halueval_claim`); the candidate is
  supported iff it is not the hallucinated one. Read from the data folder's full
  file when present (`python -m fspo_lite data prepare halueval_qa_test`), else from the bundled 200-row sample `data/halueval_qa_sample.jsonl`.
- The gold set `data/gold_sentences.jsonl`: SmolLM2-135M reasoning sentences labeled by hand
  (supported / unsupported / not checkable); the checkable ones are scored.

Accuracy is reported at the configured threshold and at the best threshold chosen on the
HaluEval train file (never on test). A reference row scores claims by shortness alone: HaluEval's
hallucinated answers are mostly full sentences and its right answers short spans, so length alone
separates them well; a verifier should be read against that row.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from fspo_lite.data.examples import DATA_DIR
from fspo_lite.data.files import local_path
from fspo_lite.scoring.verifiers.base import Verifier
from fspo_lite.scoring.verifiers.quality import (accuracy, auroc, balanced_accuracy, best_threshold, fit_logistic_1d,
                                                 predict)

HALUEVAL_SAMPLE = DATA_DIR / "halueval_qa_sample.jsonl"
GOLD_SET = DATA_DIR / "gold_sentences.jsonl"


@dataclass
class ClaimItem:
    """One (evidence, claim) pair with its gold label."""

    evidence: str
    claim: str
    supported: bool
    context: str = ""
    """The question: text the claim may restate without claiming anything (see Verifier.score)."""


def halueval_claim(question: str, candidate: str) -> str:
    """The statement a verifier checks for one HaluEval-QA candidate answer."""
    return f'The answer to the question "{question.strip()}" is: {candidate.strip()}'


def load_halueval(path: str | Path, limit: int | None = None) -> list[ClaimItem]:
    """HaluEval-QA rows (question, knowledge, candidate, candidate_is_hallucinated) as claim items."""
    items = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            items.append(ClaimItem(row["knowledge"], halueval_claim(row["question"], row["candidate"]),
                                   not bool(row["candidate_is_hallucinated"]), row["question"]))
            if limit and len(items) >= limit:
                break
    return items


def halueval_file(split: str) -> Path | None:
    """halueval_qa_<split>.jsonl of the data folder when present; for 'test', else the bundled sample."""
    full = local_path(f"halueval_qa_{split}")
    if full is not None:
        return full
    return HALUEVAL_SAMPLE if split == "test" and HALUEVAL_SAMPLE.exists() else None


def load_gold(path: str | Path = GOLD_SET) -> tuple[list[ClaimItem], int]:
    """(checkable gold sentences as claim items, number of sentences labeled not checkable)."""
    from fspo_lite.data.labeling import load_items

    items, not_checkable = [], 0
    for item in load_items(path):
        if item.label in ("supported", "unsupported"):
            items.append(ClaimItem(item.evidence, item.sentence, item.label == "supported", item.question))
        elif item.label == "not_checkable":
            not_checkable += 1
    return items, not_checkable


class ShortClaimBaseline(Verifier):
    """Reference only, not a verifier: P = 1 / (1 + words / 10), so shorter claims look more supported."""

    name = "baseline: shorter claim"

    def _score(self, evidence, sentences):
        return [1.0 / (1.0 + len(re.findall(r"\w+", s)) / 10) for s in sentences]


@dataclass
class VerifierResult:
    verifier: str
    dataset: str
    n: int
    abstained: int
    """Pairs the verifier called not checkable (scored as undecided: at the threshold)."""
    accuracy: float
    balanced_accuracy: float
    auroc: float
    best_threshold: float
    """Chosen on the HaluEval train file (NaN when it is absent)."""
    best_accuracy: float
    best_balanced_accuracy: float
    sentences_per_s: float


def scores_of(verifier: Verifier, items: list[ClaimItem], threshold: float) -> tuple[list[float], int, float]:
    """(scores with None replaced by the threshold, number of None, seconds spent)."""
    start = time.perf_counter()
    raw = verifier.score([i.evidence for i in items], [i.claim for i in items], [i.context for i in items])
    seconds = time.perf_counter() - start
    return [threshold if p is None else p for p in raw], sum(p is None for p in raw), seconds


def evaluate(verifier: Verifier, items: list[ClaimItem], dataset: str, threshold: float = 0.5,
             chosen_threshold: float = math.nan) -> VerifierResult:
    """All metrics of one verifier on one item list."""
    labels = [i.supported for i in items]
    scores, abstained, seconds = scores_of(verifier, items, threshold)
    best = predict(scores, chosen_threshold) if not math.isnan(chosen_threshold) else None
    return VerifierResult(
        verifier=verifier.name, dataset=dataset, n=len(items), abstained=abstained,
        accuracy=accuracy(predict(scores, threshold), labels),
        balanced_accuracy=balanced_accuracy(predict(scores, threshold), labels),
        auroc=auroc(scores, labels), best_threshold=chosen_threshold,
        best_accuracy=accuracy(best, labels) if best is not None else math.nan,
        best_balanced_accuracy=balanced_accuracy(best, labels) if best is not None else math.nan,
        sentences_per_s=len(items) / seconds if seconds > 0 else math.inf,
    )


def run_benchmark(verifiers: dict[str, Verifier], datasets: dict[str, list[ClaimItem]],
                  train_items: list[ClaimItem] | None = None, threshold: float = 0.5, log=print) -> list[VerifierResult]:
    """Evaluate each verifier on each dataset; the best threshold comes from `train_items`."""
    results = []
    for name, verifier in verifiers.items():
        chosen = math.nan
        if train_items:
            train_scores, _, _ = scores_of(verifier, train_items, threshold)
            chosen = best_threshold(train_scores, [i.supported for i in train_items])
        for dataset, items in datasets.items():
            result = evaluate(verifier, items, dataset, threshold, chosen)
            result.verifier = name
            log(f"[benchmark] {name} on {dataset}: AUROC {result.auroc:.3f}, {result.sentences_per_s:.1f} sentences/s")
            results.append(result)
    return results


def calibrate(verifier: Verifier, items: list[ClaimItem]) -> tuple[float, float]:
    """(midpoint, slope) of a logistic map from the verifier's raw score to P(supported), fitted on `items`.

    Only for verifiers with a raw score (`raw_scores`: embedding similarity, likelihood gain);
    their class attributes `midpoint` and `slope` hold the fitted values.
    """
    raw = verifier.raw_scores([i.evidence for i in items], [i.claim for i in items])
    pairs = [(r, i.supported) for r, i in zip(raw, items) if r is not None]
    return fit_logistic_1d([r for r, _ in pairs], [y for _, y in pairs])


def _cell(value) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.3f}" if value < 100 else f"{value:.0f}"
    return str(value)


def results_table(results: list[VerifierResult], threshold: float = 0.5) -> str:
    """A markdown table, one row per (verifier, dataset)."""
    header = ["verifier", "dataset", "n", "abstained", f"acc@{threshold:g}", f"bal.acc@{threshold:g}", "AUROC",
              "best thr (train)", "acc@best", "bal.acc@best", "sentences/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        values = [r.verifier, r.dataset, r.n, r.abstained, r.accuracy, r.balanced_accuracy, r.auroc,
                  r.best_threshold, r.best_accuracy, r.best_balanced_accuracy, r.sentences_per_s]
        lines.append("| " + " | ".join(_cell(v) for v in values) + " |")
    return "\n".join(lines)


def results_json(results: list[VerifierResult]) -> str:
    return json.dumps([asdict(r) for r in results], indent=2)
