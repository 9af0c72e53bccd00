"""A decoding step's matrix products with torch's `F.linear` against MKL's packed weights (rollout.packed_weights).

    python bench/packed_linear.py [--rows 1,4,8,16,32] [--threads 2] [--rounds 5] [--layers 30]

At a decoding step every weight of the model is read once for a few rows of input, so the products run at the
speed the weights stream from memory. For each of SmolLM2-135M's decoding products (q, k and v joined, the output
projection, gate and up joined, the down projection, one layer's worth each, times `--layers` distinct copies so
that the set does not fit in the CPU's caches as the model's 0.54 GB does not; and the 49,152-word output layer)
it times `F.linear` and `mkl::_mkl_linear` on weights packed by `mkl::_mkl_reorder_linear_weight`, alternated round
after round, and prints the weight bytes streamed per second (median over the rounds), the packed / plain time
ratio, and whether the outputs are equal bit for bit (MKL may sum in another order at some row counts) with the
largest difference. The row counts: 16 is the benchmark's decoding batch (bench/grpo_step.py), 8 the lite job's.
Needs a torch built with MKL (x86).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {"qkv (576 -> 960)": (960, 576), "o (576 -> 576)": (576, 576), "gate+up (576 -> 3072)": (3072, 576),
          "down (1536 -> 576)": (576, 1536), "output layer (576 -> 49152)": (49152, 576)}
"""SmolLM2-135M's decoding products as fspo_lite.rollout.llama_step runs them: (out features, in features)."""


def timed(projections, x: torch.Tensor) -> float:
    """Seconds for one product of `x` with each projection, in turn."""
    started = time.perf_counter()
    for projection in projections:
        projection(x)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,8,16,32", help="rows of input per product (decoding batch sizes)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=30, help="distinct copies of each layer weight (SmolLM2: 30)")
    args = parser.parse_args(argv)

    from fspo_lite.rollout.llama_step import Projection, WeightPacks, mkl_packing_available

    if not mkl_packing_available():
        print("this torch has no MKL packed product (mkl::_mkl_linear): nothing to compare", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads, {args.rounds} rounds")
    rows_list = [int(r) for r in args.rows.split(",")]
    for name, (outer, inner) in SHAPES.items():
        copies = 1 if outer > 10_000 else args.layers
        weights = [torch.randn(outer, inner) * inner ** -0.5 for _ in range(copies)]
        streamed = sum(w.numel() * w.element_size() for w in weights)
        for rows in rows_list:
            packs = WeightPacks()
            packed = [Projection(weight, None, pack) for weight, pack in (packs.get([w], rows) for w in weights)]
            plain = [Projection(w, None) for w in weights]
            x = torch.randn(rows, inner)
            seconds: dict[str, list[float]] = {"plain": [], "packed": []}
            for projections in (plain, packed):  # warm-up
                timed(projections, x)
            for _ in range(args.rounds):
                for label, projections in (("plain", plain), ("packed", packed)):
                    seconds[label].append(timed(projections, x))
            median = {label: statistics.median(values) for label, values in seconds.items()}
            outputs = [(p(x), q(x)) for p, q in zip(plain[:3], packed[:3])]
            equal = all(torch.equal(a, b) for a, b in outputs)
            largest = max(float((a - b).abs().max()) for a, b in outputs)
            print(f"{name}, {rows} rows: plain {streamed / median['plain'] / 1e9:.1f} GB/s, packed "
                  f"{streamed / median['packed'] / 1e9:.1f} GB/s, packed / plain time "
                  f"{median['packed'] / median['plain']:.2f}; equal bit for bit: {equal} (largest difference "
                  f"{largest:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
