"""Benchmark: safe math grading on hostile answers and on many ordinary ones.

    python bench/hostile_grading.py [--benign 2000] [--cases 192]

Prints the worker start-up time, the slowest hostile call (the issue asks for under 2 s each),
whether anything executed (a sentinel file), the throughput of ordinary answers that need
the symbolic worker, and the time per response graded on Math-Verify's regression cases
(tests/math_verify_cases.json, graded by grade_response as evaluation grades) with the agreement, and per part
how many checks ran out of the worker's time (a check that runs out counts as "not equal").
Timings depend on the machine and its load: report them with both.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import json  # noqa: E402

from fspo_lite.data.examples import QAExample  # noqa: E402
from fspo_lite.scoring.grading import grade_response, math_answers_equal  # noqa: E402
from fspo_lite.scoring.grading.symbolic import default_checker  # noqa: E402
from hostile_math import hostile_answers  # noqa: E402


def benign_pairs(count: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """Answers whose equality needs the symbolic check (half equal, half not)."""
    rng = random.Random(seed)
    pairs = []
    for index in range(count):
        a, b = rng.randint(1, 10**4), rng.randint(2, 10**3)
        equal = index % 2 == 0
        shift = 0 if equal else rng.randint(1, 3)
        kind = index % 4
        if kind in (0, 1):
            pairs.append((f"(x+{a})^2", f"x^2+{2 * a}x+{a * a + shift}", equal))
        else:
            pairs.append((f"{a}\\sqrt{{{b * b * 2}}}", f"{a * b + shift}\\sqrt{{2}}", equal))
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benign", type=int, default=2000, help="ordinary answer pairs to grade")
    parser.add_argument("--cases", type=int, default=192, help="Math-Verify regression cases to grade (0: none)")
    args = parser.parse_args()

    started = time.perf_counter()
    default_checker().equivalent(["num", 1, 1], ["num", 1, 1])
    print(f"worker start-up (first request, two workers importing sympy): {time.perf_counter() - started:.2f} s")

    with tempfile.TemporaryDirectory() as folder:
        sentinel = Path(folder) / "pwned"
        timings, timeouts = [], default_checker().stats["timeouts"]
        for name, answer in hostile_answers(sentinel):
            for prediction, gold in ((answer, "2"), ("2", answer), (answer, answer[::-1])):
                started = time.perf_counter()
                math_answers_equal(prediction, gold)
                timings.append((time.perf_counter() - started, name))
        timings.sort(reverse=True)
        print(f"hostile answers: {len(timings) // 3} answers, {len(timings)} calls; "
              f"slowest {timings[0][0]:.3f} s ({timings[0][1]}), median {timings[len(timings) // 2][0] * 1000:.2f} ms; "
              f"sentinel created: {sentinel.exists()}; worker timeouts: {default_checker().stats['timeouts'] - timeouts}")
        for seconds, name in timings[:5]:
            print(f"  {seconds:7.3f} s  {name}")

    pairs = benign_pairs(args.benign)
    timeouts = default_checker().stats["timeouts"]
    started = time.perf_counter()
    wrong = sum(math_answers_equal(p, g) != expected for p, g, expected in pairs)
    elapsed = time.perf_counter() - started
    print(f"ordinary answers: {len(pairs)} symbolic comparisons ({len(set(pairs))} distinct) in {elapsed:.2f} s "
          f"({len(pairs) / elapsed:.0f}/s, {1000 * elapsed / len(pairs):.2f} ms each); wrong verdicts: {wrong}; "
          f"worker timeouts: {default_checker().stats['timeouts'] - timeouts}")
    cases = json.loads((ROOT / "tests" / "math_verify_cases.json").read_text(encoding="utf-8"))["cases"][: args.cases]
    if cases:
        timings, agree, timeouts = [], 0, default_checker().stats["timeouts"]
        for case in cases:
            started = time.perf_counter()
            _, correct, _ = grade_response(QAExample("mv", "q", [case["gold"]], task="math"), case["prediction"])
            timings.append(time.perf_counter() - started)
            agree += correct is case["expected"]
        timings.sort()
        print(f"Math-Verify cases: {len(cases)} responses graded in {sum(timings):.2f} s; per response median "
              f"{timings[len(timings) // 2] * 1000:.1f} ms, slowest {timings[-1]:.3f} s; agree with its verdicts "
              f"{agree}/{len(cases)} (no case excluded here; worker timeouts, graded not equal: "
              f"{default_checker().stats['timeouts'] - timeouts})")
    print(f"worker stats: {default_checker().stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
