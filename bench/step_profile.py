"""Where one fspo-lite training step spends its CPU time: torch.profiler's operator table for one step.

The step is bench/grpo_step.py's (SmolLM2-135M, float32 LoRA r 16, 4 prompts x 4 responses x 64 forced tokens,
FSPO with the lexical verifier, micro-batches of 8). After `--warmup` unprofiled steps, one step runs under
torch.profiler; the script prints the step's phase times, the operators with the most self CPU time, and the
matrix products' share and rate (FLOPs counted by the profiler).

    python bench/step_profile.py                      # SmolLM2-135M, 2 threads
    python bench/step_profile.py --dtype bfloat16     # the base weights in bfloat16 (the adapter stays float32)
    python bench/step_profile.py --sampler-dtype bfloat16   # float32 policy, bfloat16 sampler copy
    python bench/step_profile.py --model tiny --warmup 0 --rows 5 --tokens 4    # smoke run

Profiling slows the step by a tenth or so; read the shares, not the absolute times.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)


def operator_rows(averages) -> list[dict]:
    """(name, self seconds, calls, flops) per operator of a profiler's key averages, most self time first."""
    rows = [{"name": a.key, "self_s": a.self_cpu_time_total / 1e6, "calls": a.count, "flops": a.flops or 0}
            for a in averages]
    return sorted(rows, key=lambda row: row["self_s"], reverse=True)


def matmul_share(rows: list[dict]) -> dict:
    """Self time, share of all self time and GFLOP/s of the matrix products (aten::mm, addmm, bmm)."""
    total = sum(row["self_s"] for row in rows)
    products = [row for row in rows if row["name"] in ("aten::mm", "aten::addmm", "aten::bmm")]
    seconds, flops = sum(row["self_s"] for row in products), sum(row["flops"] for row in products)
    return {"seconds": seconds, "share": seconds / total if total else 0.0,
            "gflops_per_s": flops / seconds / 1e9 if seconds else 0.0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--warmup", type=int, default=2, help="unprofiled steps first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="forced new tokens per response")
    parser.add_argument("--rows", type=int, default=15, help="operators to print")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="model.dtype of the base")
    parser.add_argument("--sampler-dtype", default="policy", choices=["policy", "bfloat16"],
                        help="rollout.sampler_dtype (bfloat16: a bfloat16 sampler copy, its log-probs as pi_old)")
    args = parser.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from grpo_step import BenchSettings, fspo_config, step_examples
    from fspo_lite.update.trainer import Trainer

    torch.set_num_threads(args.threads)
    settings = BenchSettings(model=args.model, max_new_tokens=args.tokens, threads=args.threads,
                             sampler_dtype=args.sampler_dtype)
    with tempfile.TemporaryDirectory() as output_dir:
        config = fspo_config(settings, output_dir, {"model.dtype": args.dtype})
        examples, _ = step_examples(config, 1)
        trainer = Trainer(config, train_examples=examples, progress=False)
        trainer.engine.generate_kwargs["min_new_tokens"] = args.tokens
        for _ in range(args.warmup):
            trainer.train_step()
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as profiler:
            metrics = trainer.train_step()
    rows = operator_rows(profiler.key_averages())
    total = sum(row["self_s"] for row in rows)
    print(f"step {metrics['step_time']:.2f} s (generation {metrics['generation_time']:.2f} s, "
          f"update {metrics['update_time']:.2f} s), profiled self time {total:.2f} s, {args.threads} threads, "
          f"{args.dtype}, sampler {args.sampler_dtype}")
    print(f"{'operator':<58} {'self s':>8} {'share':>6} {'calls':>7}")
    for row in rows[:args.rows]:
        print(f"{row['name'][:58]:<58} {row['self_s']:8.3f} {row['self_s'] / total:6.1%} {row['calls']:7d}")
    products = matmul_share(rows)
    print(f"MATMUL {products['seconds']:.2f} s, {products['share']:.1%} of the self time, "
          f"{products['gflops_per_s']:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
