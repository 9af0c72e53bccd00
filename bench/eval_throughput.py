"""Evaluation generation throughput: tokens/s of batched generation versus one question at a time.

Greedy answers to the first N bundled kbqa questions with the harness's prompt (few-shot chat, "<think>"
prefix), through the same transformers engine the harness uses. Both runs generate the same number of
new tokens per question (EOS is ignored), so tokens/s compares like with like.

    python bench/eval_throughput.py [--model smollm2-135m] [--questions 16] [--batch-size 16] [--tokens 256]

The defaults are the harness's (evaluation.batch_size 16, max_new_tokens 256). Prompt processing costs the same
in both runs (every prompt token is computed once either way), so the speed-up grows with the answer length.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fspo_lite.config import Config, RolloutConfig, SpeedConfig  # noqa: E402
from fspo_lite.data.examples import load_examples  # noqa: E402
from fspo_lite.evaluation import load_eval_model  # noqa: E402
from fspo_lite.data.prompts import prompt_text  # noqa: E402
from fspo_lite.speed import transformers_engine  # noqa: E402
from fspo_lite.machine import machine_description  # noqa: E402


def tokens_per_second(model, tokenizer, prompts: list[str], batch_size: int, tokens: int) -> tuple[float, int, float]:
    """(tokens/s, tokens generated, seconds) for greedy generation of exactly `tokens` new tokens per prompt."""
    rollout = RolloutConfig(max_new_tokens=tokens, generation_batch_size=batch_size)
    engine = transformers_engine(model, tokenizer, rollout, generate_kwargs={"min_new_tokens": tokens},
                                 speed=SpeedConfig())
    start = time.perf_counter()
    rollout = engine.generate(prompts, 1, do_sample=False)
    seconds = time.perf_counter() - start
    generated = int(rollout.completion_ids.numel())  # every row has exactly `tokens` tokens (min_new_tokens)
    return generated / seconds, generated, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256, help="new tokens per question")
    args = parser.parse_args()
    config = Config()
    config.model.name = args.model
    model, tokenizer = load_eval_model(config)
    prompts = [prompt_text(tokenizer, e, config.data) for e in load_examples("bundled:kbqa_test", limit=args.questions)]
    tokens_per_second(model, tokenizer, prompts[:2], 2, 4)  # warm-up
    print(f"machine: {machine_description()}, torch threads {torch.get_num_threads()}")
    print(f"model {args.model}, {len(prompts)} kbqa questions, {args.tokens} new tokens each, greedy")
    batched, n_batched, s_batched = tokens_per_second(model, tokenizer, prompts, args.batch_size, args.tokens)
    print(f"batched (batch {args.batch_size}): {n_batched} tokens in {s_batched:.1f} s = {batched:.1f} tokens/s")
    single, n_single, s_single = tokens_per_second(model, tokenizer, prompts, 1, args.tokens)
    print(f"one question at a time:  {n_single} tokens in {s_single:.1f} s = {single:.1f} tokens/s")
    print(f"speed-up batched / one at a time: {batched / single:.2f}x")


if __name__ == "__main__":
    main()
