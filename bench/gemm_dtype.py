"""float32 against bfloat16 matrix products on this CPU, at a decoding step's and an update's row counts.

    python bench/gemm_dtype.py [--rows 16,512] [--threads 2] [--rounds 5] [--seconds 0.5]

One SmolLM2-135M MLP projection (576 -> 1536, `torch.nn.functional.linear`) at each row count; the dtypes are
timed in alternation, round after round, so a load change on the machine hits both, and each figure is the median
over the rounds. Prints GFLOP/s per dtype and the bfloat16 / float32 speed ratio, with torch's CPU capability
(AVX512, AVX2, ...). To see what an AVX2-only laptop gets on an AVX-512 machine, cap the libraries:

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python bench/gemm_dtype.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def gflops(rows: int, dtype: torch.dtype, seconds: float, inner: int = 576, outer: int = 1536) -> float:
    """GFLOP/s of repeated (rows x inner) @ (inner x outer) products for about `seconds`."""
    a, w = torch.randn(rows, inner, dtype=dtype), torch.randn(outer, inner, dtype=dtype)
    torch.nn.functional.linear(a, w)
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        torch.nn.functional.linear(a, w)
        count += 1
    return 2 * rows * inner * outer * count / elapsed / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="16,512", help="row counts (16: a decoding step of 16 sequences)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="per dtype, row count and round")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    for rows in [int(r) for r in args.rows.split(",")]:
        rates: dict[str, list[float]] = {name: [] for name in DTYPES}
        for _ in range(args.rounds):
            for name, dtype in DTYPES.items():
                rates[name].append(gflops(rows, dtype, args.seconds))
        median = {name: statistics.median(values) for name, values in rates.items()}
        print(f"{rows} rows: float32 {median['float32']:.1f} GFLOP/s, bfloat16 {median['bfloat16']:.1f} GFLOP/s, "
              f"bfloat16 / float32 speed {median['bfloat16'] / median['float32']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
