"""Fuzzing: every parser of model output on many generated inputs; reports inputs tried, the
slowest call and any exception.

    nice -n 10 python bench/fuzz_parsers.py [--count 10000] [--seed 0] [--only NAME,...]

Inputs are built from a seeded generator that mixes random code points (lone surrogates and
control characters included) with the pieces that broke parsers before: tags, nested
\\boxed{, reference brackets with long digit runs ("ref.[" + digits), huge exponents (1e999999999,
10^{10^{10}}), LaTeX fractions, sets, percent and currency signs, thousands separators. Each
function is called on `--count` inputs; math_answers_equal grades each input against a fixed
gold answer and against another generated one (symbolic check on: a sandboxed worker).
Timings depend on the machine and its load: report them with both. tests/test_fuzz_parsers.py
runs a small seeded version.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fspo_lite.scoring.claims import RuleBasedClaimExtractor  # noqa: E402
from fspo_lite.data.examples import QAExample  # noqa: E402
from fspo_lite.scoring.grading import math_answers_equal  # noqa: E402
from fspo_lite.scoring.grading import outcome_reward  # noqa: E402
from fspo_lite.text import reasoning_sentences  # noqa: E402
from fspo_lite.text import extract_answer, hotpot_em_f1, parse_number, parse_response, sentence_spans  # noqa: E402

PIECES = [
    "<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "\\boxed[", "}", "]", "{", "[", "(", ")",
    "Paris", "Paris is the capital of France. ", "Dr. Smith", "See ref.", "ref.[", "[1]", "[12, 3-5]", "e.g.",
    "3.14", "1,234", "12{,}000", "1/2", "1/0", "-7", "$", "\\$", "€", "%", "\\%", "1e3", "3e", "1e999999999",
    "1e-999999999", "10^{10^{10}}", "9^9^9", "\\frac{", "\\frac{1}{2}", "\\sqrt{2}", "\\sqrt[", "x^2", "\\{", "\\}",
    "\\cup", "\\text{ cm}", " dollars", "2\\frac{1}{2}", "\\infty", "\\pi", "!", "Unknown", "I don't know",
    " ", "\n", "\n\n", ".", "?!", ";", ", and ", ", but ", ", which ", "東京は首都です。", "🚀", "\x00", "\ud800",
    "\u202e", "the", "a", "yes", "no",
]
DIGITS = "0123456789"


class Generator:
    """Seeded inputs: random characters, concatenated pieces, and long runs of one piece."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def char(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return chr(rng.randint(32, 126))
        if roll < 0.7:
            return rng.choice(DIGITS)
        if roll < 0.8:
            return chr(rng.randint(0, 31))
        return chr(rng.randint(0x80, 0x10FFFF))

    def text(self) -> str:
        rng = self.rng
        kind = rng.random()
        if kind < 0.3:
            return "".join(self.char() for _ in range(rng.randint(0, 200)))
        if kind < 0.8:
            parts = []
            for _ in range(rng.randint(1, 30)):
                parts.append(rng.choice(PIECES) if rng.random() < 0.7 else
                             "".join(self.char() for _ in range(rng.randint(1, 6))))
            return "".join(parts)
        if kind < 0.9:  # a long run: backtracking and quadratic scans show up here
            piece = rng.choice(PIECES + ["1", "11,", "1 ", "12 - "])
            return rng.choice(["", "See ref.[", "<think>", "\\frac{"]) + piece * rng.randint(10, 400)
        body = rng.choice(["", "See ref.[" + "1" * rng.randint(1, 60), "Paris is big. It is old."])
        return f"<think>{body}</think> <answer>{self.text_short()}</answer>"

    def text_short(self) -> str:
        return "".join(self.rng.choice(PIECES) for _ in range(self.rng.randint(1, 4)))


QA = QAExample("q", "What is the capital of France?", ["Paris"], "Paris is the capital of France.")
MATH = QAExample("m", "What is 1/2 + 1/4?", ["\\frac{3}{4}"], task="math")
EXTRACTOR = RuleBasedClaimExtractor()


def functions(generator: Generator) -> dict:
    return {
        "extract_answer": extract_answer,
        "parse_response": parse_response,
        "sentence_spans": sentence_spans,
        "reasoning_sentences": reasoning_sentences,
        "outcome_reward": lambda text: (outcome_reward(QA, text), outcome_reward(MATH, text)),
        "claim_splitting": lambda text: EXTRACTOR.extract([text]),
        "hotpot_em_f1": lambda text: hotpot_em_f1(text, ["Paris", text[:20]]),
        "parse_number": parse_number,
        "math_answers_equal": lambda text: (math_answers_equal(text, "\\frac{3}{4}"),
                                            math_answers_equal(text, generator.text_short())),
    }


def fuzz(count: int, seed: int, only: list[str] | None = None, out=sys.stdout) -> dict:
    """Run every function on `count` generated inputs; returns {name: {tried, slowest, slowest_input, exceptions}}."""
    results = {}
    for index, (name, function) in enumerate(functions(Generator(seed + 7919)).items()):
        if only and name not in only:
            continue
        generator = Generator(seed * 1000 + index)
        slowest, slowest_input, exceptions = 0.0, "", []
        started = time.perf_counter()
        for _ in range(count):
            text = generator.text()
            start = time.perf_counter()
            try:
                function(text)
            except Exception as error:  # the point: report, never stop
                exceptions.append((text, "".join(traceback.format_exception_only(type(error), error)).strip()))
            elapsed = time.perf_counter() - start
            if elapsed > slowest:
                slowest, slowest_input = elapsed, text
        total = time.perf_counter() - started
        results[name] = {"tried": count, "slowest": slowest, "slowest_input": slowest_input,
                         "exceptions": exceptions, "seconds": total}
        shown = repr(slowest_input[:60]) + ("..." if len(slowest_input) > 60 else "")
        print(f"{name:<20} tried {count:>6}  total {total:7.1f} s  slowest {slowest * 1000:8.1f} ms "
              f"(len {len(slowest_input)}: {shown})  exceptions {len(exceptions)}", file=out, flush=True)
        for text, error in exceptions[:3]:
            print(f"    {error} on {text[:80]!r}", file=out)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="inputs per function (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", help="comma-separated function names")
    args = parser.parse_args()
    results = fuzz(args.count, args.seed, args.only.split(",") if args.only else None)
    failures = sum(len(r["exceptions"]) for r in results.values())
    print(f"functions: {len(results)}; inputs: {sum(r['tried'] for r in results.values())}; "
          f"slowest call: {max(r['slowest'] for r in results.values()):.3f} s; exceptions: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
