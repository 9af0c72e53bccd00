"""TruthfulQA MC scoring at the study's size: seconds of `PrefixScorer.score` and agreement with the direct
computation.

    python bench/truthfulqa_mc.py [--items 200] [--batch-size 64] [--check 60] [--data-dir DIR] [--model smollm2-135m]

Scores every (question, choice) pair of the first `--items` TruthfulQA MC items (the full release from the data
folder when it is there, else the bundled sample) with the bundled SmolLM2-135M, as the harness does, and prints
the wall and process CPU seconds. Then scores the first `--check` pairs again with `score_choices_direct` (one
full forward pass per pair, no cache) and prints the largest difference. Run it at two commits to compare
implementations; other jobs on the machine distort the timings.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--check", type=int, default=60, help="pairs compared with the direct computation")
    parser.add_argument("--data-dir", help="data folder with truthfulqa.jsonl (default: $FSPO_LITE_DATA, else the "
                                           "cache folder; absent: the bundled sample)")
    parser.add_argument("--model", default="smollm2-135m", help="the scoring model (the harness's: smollm2-135m)")
    args = parser.parse_args(argv)
    if args.data_dir:
        os.environ["FSPO_LITE_DATA"] = args.data_dir

    import torch

    from fspo_lite.config import ModelConfig
    from fspo_lite.evaluation.benchmarks import load_items, resolve
    from fspo_lite.evaluation.mc import QA_PRIMER, PrefixScorer, qa_context, score_choices_direct
    from fspo_lite.models.policy import load_policy

    source = resolve("truthfulqa_mc")
    items = load_items("truthfulqa_mc", source, limit=args.items, shuffle=True, seed=0)
    model, tokenizer = load_policy(ModelConfig(name=args.model, lora=False))
    model.eval()
    pairs = list(dict.fromkeys((qa_context(item.question), " " + choice) for item in items
                               for choice in [item.best_answer, *item.mc1_incorrect, *item.correct_answers,
                                              *item.incorrect_answers]))
    cpu, wall = time.process_time(), time.perf_counter()
    scores = PrefixScorer(model, tokenizer, QA_PRIMER + "\n\nQ:", batch_size=args.batch_size).score(pairs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{len(items)} items ({Path(source).name if not source.startswith(('bundled:', 'hf:')) else source}), "
          f"{len(pairs)} pairs, batch {args.batch_size}, torch threads "
          f"{torch.get_num_threads()}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    if args.check:
        direct = score_choices_direct(model, tokenizer, pairs[: args.check])
        print(f"largest difference from the direct computation over {len(direct)} pairs: "
              f"{max(abs(a - b) for a, b in zip(scores, direct)):.2e} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
