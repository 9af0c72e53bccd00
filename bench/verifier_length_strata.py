"""Lexical verifier AUROC on HaluEval-QA within bins of candidate-answer length (is it only the length artifact?).

    python bench/verifier_length_strata.py [--data-file FILE] [--limit N]

Reads the full HaluEval-QA test file from the data folder ($FSPO_LITE_DATA, else ~/.cache/fspo-lite/data;
`python -m fspo_lite data prepare halueval_qa_test`) when it is there, else the bundled 200-row sample
(data/halueval_qa_sample.jsonl), and says which it read.
"""
from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fspo_lite.data.files import local_path  # noqa: E402
from fspo_lite.jsonl import read_jsonl  # noqa: E402
from fspo_lite.scoring.verifiers.benchmark import halueval_claim  # noqa: E402
from fspo_lite.scoring.verifiers.lexical import LexicalVerifier  # noqa: E402
from fspo_lite.scoring.verifiers.quality import auroc  # noqa: E402

BINS = ("1-2", "3-5", "6-9", "10+")


def length_bin(answer: str) -> str:
    words = len(answer.split())
    return "1-2" if words <= 2 else "3-5" if words <= 5 else "6-9" if words <= 9 else "10+"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-file", help="a HaluEval-QA JSONL file (default: the data folder's, else the sample)")
    parser.add_argument("--limit", type=int, help="only the first N rows")
    args = parser.parse_args(argv)
    path = Path(args.data_file) if args.data_file else (local_path("halueval_qa_test")
                                                         or ROOT / "data" / "halueval_qa_sample.jsonl")
    rows = read_jsonl(path)[: args.limit]
    print(f"{len(rows)} rows of {path.name}")
    scores = LexicalVerifier().score([r["knowledge"] for r in rows],
                                     [halueval_claim(r["question"], r["candidate"]) for r in rows],
                                     [r["question"] for r in rows])
    bins = collections.defaultdict(list)
    for row, score in zip(rows, scores):
        bins[length_bin(row["candidate"])].append((0.5 if score is None else score, not row["candidate_is_hallucinated"]))
    for name in BINS:
        pairs = bins[name]
        supported = sum(label for _, label in pairs)
        value = (round(auroc([s for s, _ in pairs], [label for _, label in pairs]), 3)
                 if 0 < supported < len(pairs) else None)
        print(name, len(pairs), "supported", supported, "AUROC", value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
