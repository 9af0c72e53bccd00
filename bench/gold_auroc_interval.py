"""Gold-set AUROC of held-out judges with a 95% bootstrap interval (questions resampled as clusters), and their
speed: is a judge good enough (AUROC >= 0.8) for the study, and how sure is that with 21 supported sentences?

    python bench/gold_auroc_interval.py --verifiers lexical,embedding,likelihood [--resamples 2000]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fspo_lite.config import VerifierConfig  # noqa: E402
from fspo_lite.data.labeling import load_items  # noqa: E402
from fspo_lite.scoring.verifiers import build_verifier  # noqa: E402
from fspo_lite.scoring.verifiers.benchmark import GOLD_SET  # noqa: E402
from fspo_lite.scoring.verifiers.quality import auroc  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifiers", default="lexical,embedding,likelihood")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="verifier.model for the model-based judges (default: each one's own)")
    args = parser.parse_args(argv)

    items = [i for i in load_items(GOLD_SET) if i.label in ("supported", "unsupported")]
    questions = sorted({i.meta.get("example_id", i.question) for i in items})
    q_of = np.array([questions.index(i.meta.get("example_id", i.question)) for i in items])
    labels = np.array([i.label == "supported" for i in items])
    print(f"gold set: {len(items)} checkable sentences ({labels.sum()} supported) from {len(questions)} questions")
    for name in args.verifiers.split(","):
        verifier = build_verifier(VerifierConfig(name=name, model=args.model if name != "lexical" else None))
        start = time.perf_counter()
        scores = verifier.score([i.evidence for i in items], [i.sentence for i in items], [i.question for i in items])
        seconds = time.perf_counter() - start
        scores = np.array([0.5 if s is None else s for s in scores])
        rng = np.random.default_rng(args.seed)
        values = []
        for _ in range(args.resamples):
            drawn = rng.integers(0, len(questions), len(questions))
            index = np.concatenate([np.flatnonzero(q_of == q) for q in drawn])
            if 0 < labels[index].sum() < len(index):
                values.append(auroc(scores[index].tolist(), labels[index].tolist()))
        low, high = np.percentile(values, [2.5, 97.5])
        print(f"{name}: AUROC {auroc(scores.tolist(), labels.tolist()):.3f} [{low:.3f}, {high:.3f}] "
              f"(95% bootstrap over questions, {len(values)} resamples); {len(items) / seconds:.2f} sentences/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
