"""A small seeded run of bench/fuzz_parsers.py (the benchmark runs 10,000 inputs per function)."""

import importlib.util
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("fuzz_parsers", ROOT / "bench" / "fuzz_parsers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seeded_fuzz_raises_nothing():
    out = io.StringIO()
    results = load_bench().fuzz(count=120, seed=1, out=out)
    assert set(results) == {"extract_answer", "parse_response", "sentence_spans", "reasoning_sentences",
                            "outcome_reward", "claim_splitting", "hotpot_em_f1", "parse_number",
                            "math_answers_equal"}
    assert all(r["tried"] == 120 for r in results.values())
    assert {name: r["exceptions"][:2] for name, r in results.items() if r["exceptions"]} == {}, out.getvalue()


def test_generator_is_seeded():
    bench = load_bench()
    first, second = bench.Generator(3), bench.Generator(3)
    assert [first.text() for _ in range(50)] == [second.text() for _ in range(50)]
