"""Generation with and without one rollout setting (default: the shared prompt start, rollout.share_prompt_prefix),
alternated on the same batch.

    python bench/prompt_prefix.py [--questions 16] [--samples 4] [--tokens 64] [--repeats 2]
                                  [--setting share_prompt_prefix|drop_ended_rows|preallocate_cache|fast_steps|draw|
                                             packed_weights]
                                  [--temperature 0]
                                  [--min-new-tokens 0] [--threads N]

The held-out knowledge-base prompts of the harness (system prompt, two demonstrations, the question: about 170
tokens, of which the first 152 are the same for every question) through TransformersRollout with the harness's
batch (all prompts x samples in one batch), greedy so both settings must give the same answers (checked), or
sampled at `--temperature` from the same seed (both settings keep the random draws in their places, so the
answers must match there too). Prints wall and process CPU seconds of each setting (median over the repeats)
and their ratio. `--setting drop_ended_rows` times `fspo_lite.rollout.decoding.decode` against `model.generate`; it
matters for sampled batches, which run until their longest answer ends. `--setting preallocate_cache` times
`decode` with its KV cache written in place against the concatenating cache. `--setting fast_steps` times `decode`'s
steps through `fspo_lite.rollout.llama_step` against the model's own forward pass (the same logits, so the same
answers, checked). `--setting draw` times `decode` drawing tokens by an exponential race on uniform numbers
(rollout.draw exponential_race, "with") against torch.multinomial (multinomial, "without"): other random numbers, so
other answers (use --min-new-tokens to keep the work equal); it reports the mean answer length of each.
`--setting packed_weights` times `decode`'s steps with their weights packed for MKL (rollout.packed_weights) against
`F.linear`'s: the logits move in their last bits, so a sampled answer can differ (reported, not required).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--setting", default="share_prompt_prefix", choices=["share_prompt_prefix", "drop_ended_rows",
                                                                                "preallocate_cache", "fast_steps",
                                                                                "draw", "packed_weights"])
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else sampled from seed 0")
    parser.add_argument("--min-new-tokens", type=int, default=0,
                        help="force at least this many tokens per answer (bench/grpo_step.py forces the full length)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)

    import torch

    from fspo_lite.config import Config, ModelConfig, RolloutConfig
    from fspo_lite.data.examples import load_examples
    from fspo_lite.models.policy import load_policy
    from fspo_lite.data.prompts import prompt_text
    from fspo_lite.rollout.transformers_rollout import TransformersRollout
    from fspo_lite.machine import machine_description

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(ModelConfig(name=args.model, lora=False))
    examples = load_examples("bundled:kbqa_test", limit=args.questions)
    prompts = [prompt_text(tokenizer, e, Config().data) for e in examples]
    batch = len(prompts) * args.samples
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    texts: dict[bool, list[str]] = {}
    lengths: dict[bool, list[float]] = {False: [], True: []}
    print(f"machine: {machine_description()}; load average {os.getloadavg()[0]:.1f}")
    for repeat in range(args.repeats):
        for share in (False, True) if repeat % 2 == 0 else (True, False):
            # share_prompt_prefix, drop_ended_rows and packed_weights are rollout-section switches, draw a word, the
            # other two engine arguments
            in_section = args.setting in ("share_prompt_prefix", "drop_ended_rows", "packed_weights")
            section = {args.setting: share} if in_section else {}
            if args.setting == "fast_steps":  # the model's own logits bit for bit: F.linear's products on both sides
                section = {"packed_weights": False}
            if args.setting == "draw":
                section = {"draw": "exponential_race" if share else "multinomial"}
            rollout = RolloutConfig(max_new_tokens=args.tokens, generation_batch_size=batch,
                                    temperature=args.temperature or 1.0, **section)
            engine = TransformersRollout(model, tokenizer, rollout,
                                         preallocate_cache=args.setting != "preallocate_cache" or share,
                                         fast_steps=args.setting != "fast_steps" or share,
                                         generate_kwargs={"min_new_tokens": args.min_new_tokens} if args.min_new_tokens
                                         else None)
            torch.manual_seed(0)
            wall, cpu = time.perf_counter(), cpu_seconds()
            with torch.no_grad():
                rollout = engine.generate(prompts, args.samples, do_sample=args.temperature > 0)
            times[share].append((time.perf_counter() - wall, cpu_seconds() - cpu))
            texts[share] = rollout.texts
            lengths[share].append(rollout.completion_lengths.float().mean().item())
            print(f"repeat {repeat} {args.setting}={share}: {times[share][-1][0]:.1f} s wall, "
                  f"{times[share][-1][1]:.1f} s CPU")
    before = [statistics.median(t[i] for t in times[False]) for i in (0, 1)]
    after = [statistics.median(t[i] for t in times[True]) for i in (0, 1)]
    print(f"{args.setting}, {len(prompts)} prompts x {args.samples} samples x {args.tokens} tokens, "
          f"{'temperature ' + str(args.temperature) if args.temperature else 'greedy'}: without {before[0]:.1f} s wall / "
          f"{before[1]:.1f} s CPU, with {after[0]:.1f} s wall / {after[1]:.1f} s CPU; ratio (with / without) "
          f"{after[0] / before[0]:.2f} wall, {after[1] / before[1]:.2f} CPU; "
          f"same answers: {texts[False] == texts[True]}; "
          f"mean answer tokens {statistics.mean(lengths[False]):.1f} without, {statistics.mean(lengths[True]):.1f} with; "
          f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
