"""Reliability hardening (issue 18): no hang, no false equality, no duplicated row, no raw traceback.

Hang tests run the code in a child process with a time limit, so a regression fails the test
instead of hanging the suite (a big-integer power in C cannot be interrupted by a signal).
"""

import copy
import json
import os
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest

from fspo_lite.checkpoint import CheckpointError, verify_checkpoint
from fspo_lite.config import load_config
from fspo_lite.data import QAExample
from fspo_lite.trainer import Trainer

from fspo_lite.grading import (
    TOO_LARGE, Quantity, is_malformed, math_answers_equal, quantities_equal, read_quantity,
)
from fspo_lite.latex_math import ParseError, decimal_value, parse_math
from fspo_lite.text import mask_for_segmenter, sentence_spans
from grading_pairs import EQUAL_PAIRS, UNEQUAL_PAIRS, labelled_pairs

ROOT = Path(__file__).resolve().parents[1]


def run_child(code: str, timeout: float) -> dict:
    """Run `code` in a fresh interpreter (this checkout on the path); it prints one JSON line."""
    env_path = str(ROOT)
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout,
            env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child process did not finish within {timeout} s (a hang)")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- 1. hangs

HUGE_NUMBERS = [
    (r"\frac{1e999999999}{1}", "1"), (r"\frac{1}{1e-999999999}", "1"), (r"\frac{1e10000000}{7}", "1"),
    ("1e999999999", "1e999999998"), ("10^{999999999}", "1"), (r"1.5\times10^{99999999}", "1"),
    ("1" + "0" * 5000, "1"), (r"12{,}000e99999999", "1"), ("2^{2^{2^{2^{2}}}}", "1"),
    ("-1E-0000000000000999999999", "0"), ("9" * 60 + "e400", "1"),
]


def test_huge_numbers_are_graded_quickly_in_the_main_process():
    """Each call under 2 s (the old parser built 10**999999999: never returned)."""
    result = run_child(f"""
        import json, time
        from fspo_lite.grading import math_answers_equal
        from fspo_lite.rewards import outcome_reward
        from fspo_lite.data import QAExample
        slowest, verdicts = 0.0, []
        for a, b in {HUGE_NUMBERS!r}:
            for x, y in ((a, b), (b, a)):
                start = time.perf_counter()
                verdicts.append(math_answers_equal(x, y, symbolic=False))
                slowest = max(slowest, time.perf_counter() - start)
        example = QAExample(id="h", question="q", answers=["1"], task="math")
        start = time.perf_counter()
        outcome_reward(example, "<think>t</think> <answer>\\\\frac{{1e100000000}}{{1}}</answer>")
        slowest = max(slowest, time.perf_counter() - start)
        print(json.dumps({{"slowest": slowest, "verdicts": verdicts}}))
    """, timeout=60)
    assert result["slowest"] < 2.0
    assert not any(result["verdicts"])


def test_exponents_are_checked_before_any_power_is_built():
    assert decimal_value("1.5e-3") == pytest.approx(0.0015)
    assert decimal_value("1e400") == 10**400
    for text in ("1e401", "1e999999999", "1e-0999999999999999999999", "1e" + "9" * 10_000):
        with pytest.raises(ParseError, match="exponent"):
            decimal_value(text)
    assert read_quantity("1e999999999").value is TOO_LARGE
    assert not quantities_equal(Quantity(TOO_LARGE), Quantity(TOO_LARGE))
    assert math_answers_equal("1e999999999", "1e999999999")  # the same string is still the same answer
    assert parse_math("1e3") == ["num", 1000, 1]
    assert parse_math("3e") == ["mul", ["num", 3, 1], ["sym", "e"]]


PYSBD_TRAPS = [
    "See ref.[" + "1" * 40,
    "See ref.[" + "1" * 40 + "] then more.",
    "See ref.[" + "11," * 40 + " then",
    "See ref.[" + "1 " * 60,
    "See ref.[" + "12 - " * 30 + "x",
    "Text.[1][" + "123" * 20 + " more",
    "<think>See ref.[" + "1" * 34 + "</think> <answer>Paris</answer>",
]


def test_sentence_splitting_never_hangs_on_reference_brackets():
    """The class of inputs that made pysbd backtrack exponentially (long digit runs after '[',
    with or without separators): every call under 2 s in a child process."""
    result = run_child(f"""
        import json, time
        from fspo_lite.text import sentence_spans
        from fspo_lite.rewards import reasoning_sentences
        slowest = 0.0
        for text in {PYSBD_TRAPS!r}:
            for function in (sentence_spans, reasoning_sentences):
                start = time.perf_counter()
                function(text)
                slowest = max(slowest, time.perf_counter() - start)
        print(json.dumps({{"slowest": slowest}}))
    """, timeout=60)
    assert result["slowest"] < 2.0


def test_masking_keeps_real_references_and_the_text_length():
    for text in ("Shown before.[12] Next one.", "As in ref.[1, 2, 5-7] This holds."):
        assert mask_for_segmenter(text) == text
    trap = "See ref.[" + "1" * 30
    masked = mask_for_segmenter(trap)
    assert len(masked) == len(trap) and masked == trap.replace("[", " ")
    spans = sentence_spans(trap)
    assert spans and all(0 <= a < b <= len(trap) for a, b in spans)
    assert sentence_spans("Shown before.[12] Next one.") == [(0, 17), (18, 27)]


# ---------------------------------------------------------------- 2. false / missed equalities


@pytest.fixture(scope="module")
def warm_worker():
    from fspo_lite.symbolic import default_checker

    assert default_checker().equivalent(["num", 1, 1], ["num", 1, 1]) is True


def test_hand_labelled_table_is_graded_right_in_both_directions(warm_worker):
    """>= 40 equal and >= 40 unequal pairs, each graded both ways (the old code: 126/176)."""
    assert len(EQUAL_PAIRS) >= 40 and len(UNEQUAL_PAIRS) >= 40
    wrong = [(a, b, equal) for a, b, equal in labelled_pairs() if math_answers_equal(a, b) is not equal]
    assert wrong == []


def test_quantity_reader_by_hand():
    assert read_quantity(r"12{,}000") == Quantity(12000)
    assert read_quantity(r"\$1,234.50") == Quantity(Fraction(246900, 200))
    assert read_quantity("-$5") == Quantity(-5)
    assert read_quantity(r"25\%") == Quantity(25, percent=True)
    assert read_quantity(r"10\text{ cm}^2") == Quantity(10, unit="cm^2")
    assert read_quantity("3 hours") == Quantity(3, unit="hour")
    assert read_quantity(r"2\frac{1}{2}") == Quantity(Fraction(5, 2))
    assert read_quantity(r"2\frac{3}{2}") is None  # not a mixed number: left to the symbolic check
    assert read_quantity("10m") is None  # a bare letter is a variable, not a unit
    assert read_quantity("1,2") is None  # a list, not a thousands separator
    assert read_quantity(r"1.5 \cdot 10^{-2}") == Quantity(Fraction(3, 200))


@pytest.mark.parametrize("text", ["1/0", r"\frac{3}{0}", "2/0.0", "1/(0)", r"\frac{x}{00}", "5/-0"])
def test_division_by_zero_is_malformed(text):
    assert is_malformed(text)
    assert not math_answers_equal(text, text)


@pytest.mark.parametrize("text", ["1/2", "x/0.5", "1/05", "a/b", "10/(x)", "1/0x"])
def test_ordinary_divisions_are_not_malformed(text):
    assert not is_malformed(text)


def test_tolerance_is_relative_to_magnitude(warm_worker):
    assert not math_answers_equal("10^{-50}", "0")
    assert not math_answers_equal(r"\sqrt{2} + 10^{-45}", r"\sqrt{2}")
    assert not math_answers_equal(r"\pi \cdot 10^{-60}", "0")
    assert math_answers_equal(r"\sin(\pi/12)", r"\frac{\sqrt{6}-\sqrt{2}}{4}")  # a true identity still holds


# ---------------------------------------------------------------- 4. checkpoint integrity

TRAIN_EXAMPLES = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
                  QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]


def tiny_config(tmp_path, *overrides):
    return load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize("name, damage", [
    ("model/adapter_model.safetensors", "flip"),  # same size, weights silently off before
    ("rng.pt", "random"),  # was: IndexError: pop from empty list
    ("trainer_state.json", "random"),  # was: a bare JSONDecodeError
    ("optimizer.pt", "flip"),
])
def test_same_size_corruption_is_one_clear_error_naming_the_file(tmp_path, tiny_policy, name, damage):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    trainer = Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, TRAIN_EXAMPLES, progress=False)
    trainer.step_index = 1
    path = trainer.save()
    manifest = json.loads((path / "manifest.json").read_text())
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    file = path / name
    data = bytearray(file.read_bytes())
    if damage == "flip":
        middle = len(data) // 2
        data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    else:
        data = bytearray(os.urandom(len(data)))
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"corrupt: {name} does not match its SHA-256"):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, TRAIN_EXAMPLES, progress=False)


def test_manifests_with_sizes_only_still_load(tmp_path, tiny_policy):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    trainer = Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, TRAIN_EXAMPLES, progress=False)
    trainer.step_index = 1
    path = trainer.save()
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"] = {name: entry["size"] for name, entry in manifest["files"].items()}
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert verify_checkpoint(path)["step"] == 1
    (path / "trainer_state.json").write_text("{" + " " * (manifest["files"]["trainer_state.json"] - 1))
    with pytest.raises(CheckpointError, match="trainer_state.json is not valid JSON"):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, TRAIN_EXAMPLES, progress=False)
