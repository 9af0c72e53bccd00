"""Classes of grading defects, each generalised by a table or a property (hypothesis), and the agreement with
Math-Verify's own regression cases (tests/math_verify_cases.json, a pinned copy, MIT licence notice inside).

Classes: thousands separators and implicit products ("1 000" is 1000, never 1*000), mixed numbers only for a
literal \\frac (2(1/2) = 1), Greek case (\\Delta != \\delta), degrees inside trigonometric functions, currency
signs as units (\\$5 != 5 cents), and \\boxed{} and other wrappers read the same by the training reward and the
evaluation (one function, fspo_lite.scoring.grading.grade_response).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from fspo_lite.config import Config
from fspo_lite.data.examples import QAExample
from fspo_lite.evaluation import harness
from fspo_lite.scoring.grading import final_answer, grade_response, math_answers_equal, outcome_reward
from fspo_lite.scoring.grading.latex_tokens import GREEK
from fspo_lite.scoring.grading.symbolic import default_checker
from fspo_lite.scoring.verifiers import LexicalVerifier

CASES = Path(__file__).with_name("math_verify_cases.json")

# ------------------------------------------------------------------ separators and implicit products

SEPARATORS = [",", " ", "{,}", "\\,", "\\ "]


@settings(max_examples=60, deadline=None)
@given(value=st.integers(min_value=1000, max_value=10**12), separator=st.sampled_from(SEPARATORS))
def test_thousands_separators_read_as_one_number(value, separator):
    written = f"{value:,}".replace(",", separator)
    assert math_answers_equal(written, str(value), symbolic=False)
    assert not math_answers_equal(written, str(value + 1), symbolic=False)


@settings(max_examples=60, deadline=None)
@given(left=st.integers(min_value=1, max_value=999), right=st.integers(min_value=0, max_value=999))
def test_digits_side_by_side_are_never_multiplied(left, right):
    text = f"{left} {right:03d}"
    if left * right != left * 1000 + right:
        assert not math_answers_equal(text, str(left * right))


@pytest.mark.parametrize("prediction, gold, equal", [
    ("1 000", "0", False), ("12 500", "6000", False), ("1 000", "1000", True), ("12 500", "12500", True),
    ("2(1/2)", "5/2", False), ("2(1/2)", "1", True), ("2\\frac{1}{2}", "5/2", True),
    ("-2\\frac{1}{2}", "\\frac{-2}{2}", False), ("-2\\frac{1}{2}", "-5/2", True), ("-2\\frac{1}{2}", "-2.5", True),
    ("2\\cdot\\frac{1}{2}", "1", True), ("2x", "x2", True),
])
def test_separator_and_mixed_number_table(prediction, gold, equal):
    assert math_answers_equal(prediction, gold) is equal
    assert math_answers_equal(gold, prediction) is equal


# ------------------------------------------------------------------ Greek case

CASED_GREEK = sorted(name for name in GREEK if name[0].isupper() and name.lower() in GREEK)


@pytest.mark.parametrize("upper", CASED_GREEK)
def test_greek_letters_keep_their_case(upper):
    lower = upper.lower()
    assert not math_answers_equal(f"\\{upper}", f"\\{lower}")
    assert not math_answers_equal(f"2\\{upper}", f"2\\{lower}")
    assert math_answers_equal(f"\\{upper}", f"\\{upper}") and math_answers_equal(f"\\{lower}", f"\\{lower}")


# ------------------------------------------------------------------ degrees and units

@pytest.mark.parametrize("function", ["sin", "cos", "tan", "cot", "sec", "csc"])
@pytest.mark.parametrize("angle", [30, 45, 60, 90])
def test_degrees_inside_a_function_are_not_dropped(function, angle):
    assert not math_answers_equal(f"\\{function} {angle}^\\circ", f"\\{function} {angle}")
    assert not math_answers_equal(f"\\{function}({angle}^{{\\circ}})", f"\\{function}({angle})")


@pytest.mark.parametrize("angle", ["30", "45", "90", "120.5"])
def test_a_bare_degree_sign_is_a_unit(angle):
    assert math_answers_equal(f"{angle}^\\circ", angle) and math_answers_equal(f"{angle}^{{\\circ}}", angle)


@pytest.mark.parametrize("prediction, gold, equal", [
    ("10 cm", "10", True), ("10 cm", "10 m", False), ("5 hours", "5 minutes", False), ("28 pct", "28\\%", True),
    ("28 percent", "28\\%", True), ("28 percentage", "0.28", True),
])
def test_unit_table(prediction, gold, equal):
    assert math_answers_equal(prediction, gold) is equal and math_answers_equal(gold, prediction) is equal


# ------------------------------------------------------------------ currency

SIGNS = {"\\$": "dollars", "$": "dollars", "€": "euros", "£": "pounds"}


@pytest.mark.parametrize("sign, word", sorted(SIGNS.items()))
@pytest.mark.parametrize("amount", ["5", "12.50", "1,000"])
def test_currency_sign_is_a_unit(sign, word, amount):
    money = f"{sign}{amount}"
    plain = amount.replace(",", "")
    assert math_answers_equal(money, plain) and math_answers_equal(money, f"{plain} {word}")
    assert not math_answers_equal(money, f"{plain} cents") and not math_answers_equal(f"{plain} cents", money)
    for other, other_word in SIGNS.items():
        if other_word != word:
            assert not math_answers_equal(money, f"{other}{amount}")


def test_math_delimiters_are_not_a_currency():
    assert math_answers_equal("$5$", "5 cents")  # $...$ is math: a bare 5, the unit on one side is ignored


# ------------------------------------------------------------------ wrappers: reward and evaluation agree

WRAPPERS = ["{}", "\\boxed{{{}}}", "\\boxed {{{}}}", "$\\boxed{{{}}}$", "\\boxed{{ {} }}"]
MATH_GOLDS = [("5", "5"), ("\\frac{1}{2}", "0.5"), ("1000", "1,000"), ("x^2+1", "1+x^2")]
QA_GOLDS = [("Paris", "Paris"), ("Au", "Au")]


class _Scripted:
    """A harness context whose model replies with fixed texts."""

    def __init__(self, replies):
        self.config = Config()
        self.config.evaluation.samples = 1
        self.ev, self.data = self.config.evaluation, self.config.data
        self.tokenizer = SimpleNamespace(chat_template=None)
        self.replies = list(replies)

    def generate(self, prompts, max_new_tokens=None, samples=None):
        assert len(self.replies) == len(prompts)
        return self.replies

    def verifiers(self):
        return [(LexicalVerifier(), "lexical")]

    @property
    def last_token_counts(self):
        return [1] * len(self.replies)


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_reward_and_evaluation_read_wrappers_alike(wrapper):
    math_items = [QAExample(f"m{i}", "q", [gold], task="math") for i, (gold, _) in enumerate(MATH_GOLDS)]
    math_texts = [f" ok.</think>\n<answer>{wrapper.format(answer)}</answer>" for _, answer in MATH_GOLDS]
    qa_items = [QAExample(f"q{i}", "q", [gold], evidence="e") for i, (gold, _) in enumerate(QA_GOLDS)]
    qa_texts = [f" ok.</think>\n<answer>{wrapper.format(answer)}</answer>" for _, answer in QA_GOLDS]
    _, math_records = harness.run_math(_Scripted(math_texts), "math", math_items)
    _, qa_records = harness.run_short_qa(_Scripted(qa_texts), "qa", qa_items)
    for item, text, record in [*zip(math_items, math_texts, math_records), *zip(qa_items, qa_texts, qa_records)]:
        full = "<think>" + text
        reward = outcome_reward(item, full)
        assert reward.format_ok and reward.correct and reward.reward == 1.0, (wrapper, text)
        assert record["grade"] == "CORRECT", (wrapper, text)
        assert record["answer"] == reward.answer == final_answer(full, item.task)


@settings(max_examples=40, deadline=None)
@given(value=st.integers(min_value=-10**6, max_value=10**6), wrapper=st.sampled_from(WRAPPERS),
       wrong=st.booleans())
def test_reward_pays_exactly_what_evaluation_counts(value, wrapper, wrong):
    answer = value + 1 if wrong else value
    example = QAExample("m", "q", [str(value)], task="math")
    text = f"<think>so.</think>\n<answer>{wrapper.format(answer)}</answer>"
    _, correct, _ = grade_response(example, text)
    reward = outcome_reward(example, text)
    assert correct is (not wrong) and reward.correct is correct and reward.reward == float(correct)


def test_final_answer_fallbacks():
    assert final_answer("The answer is $\\frac{1}{2}$.", "math") == "\\frac{1}{2}"
    assert final_answer("Cost: $ \\frac{1}{2} \\$ = \\frac{10}{9} $", "math") == "\\frac{1}{2} \\$ = \\frac{10}{9}"
    assert final_answer("so $x=\\boxed{255}$. Final Answer: The final answer is $10,455$. I hope", "math") == "10,455"
    assert final_answer("Final Answer: The largest $n$ is 34.", "math") == "34"
    assert final_answer("roots: \\[ \\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}. \\]", "math") == "-2, 1"
    assert final_answer("\\boxed{2} is wrong, the answer is \\boxed{3}", "math") == "3"
    assert final_answer("\\frac{10}{9}", "math") == "\\frac{10}{9}"
    assert final_answer("so the number is 10 which is 1,000.99m²", "math") == "100099/100"
    assert not math_answers_equal(final_answer("AZYUK2A", "math"), "2")  # a digit inside a word is no answer
    assert final_answer("no tags", "qa") is None
    assert final_answer("$" * 10_000, "math") is None and final_answer("\\(" * 10_000, "math") is None


# ------------------------------------------------------------------ Math-Verify's regression cases

EXCLUDED = {
    # decimal comma: 1,22 = 1.22 in Math-Verify; here "1,22" is a list and "1,000" is one thousand
    ("1000.99", "1000,99"), ("1,22", "1.22"), ("2.74", "Soucis : 2,74 $ a.."), ("0,111", "0.111"),
    # a line break inside $...$ or \(...\): Math-Verify's extraction ignores such a span, TeX does not
    ("$9$", "Answer $ \n 9 \n $"), ("$9$", "Answer \\( \n 9 \n \\)"),
}
OPTION_DEPENDENT = ("$x \\in [-2,7]$", "$-2 \\\\le x \\\\le 7$", False)
"""Math-Verify's suite expects "not equal" for this pair only with its option allow_set_relation_comp=False (and
"equal" with True: the same pair is a case of its own); here an interval equals the inequality it describes."""
AGREEMENT_FLOOR = 0.95
"""The issue's target: at least 95% of the counted cases agree with Math-Verify's expected verdicts."""


def test_math_verify_regression_cases(capsys, monkeypatch):
    """Graded as evaluation grades (grade_response, the default worker and its timeout). A check that ran out of
    time (the worker's timeout counts as "not equal") is graded again with a patient worker, so that a loaded
    machine does not change the verdict on the rules; how many needed it is printed."""
    from fspo_lite.scoring.grading import symbolic

    document = json.loads(CASES.read_text(encoding="utf-8"))
    assert "MIT License" in document["licence"] and len(document["commit"]) == 40
    cases = [c for c in document["cases"] if (c["gold"], c["prediction"]) not in EXCLUDED
             and (c["gold"], c["prediction"], c["allow_set_relation_comp"]) != OPTION_DEPENDENT]
    assert len(document["cases"]) == 192 and len(cases) == 185
    checker = default_checker()
    patient = symbolic.SymbolicChecker(timeout=20.0)
    verdicts, slow = [], []
    try:
        for case in cases:
            example = QAExample("mv", "q", [case["gold"]], task="math")
            timeouts = checker.stats["timeouts"]
            _, correct, _ = grade_response(example, case["prediction"])
            if checker.stats["timeouts"] != timeouts:
                slow.append(case)
                with monkeypatch.context() as patch:
                    patch.setattr(symbolic, "_default", patient)
                    _, correct, _ = grade_response(example, case["prediction"])
            verdicts.append((case, correct))
    finally:
        patient.close()
    agree = sum(correct is case["expected"] for case, correct in verdicts)
    false_equalities = [case for case, correct in verdicts if correct and not case["expected"]]
    missed = [f"{case['gold'][:40]!r} vs {case['prediction'][:40]!r}" for case, correct in verdicts
              if case["expected"] and not correct]
    with capsys.disabled():
        print(f"\nMath-Verify test_all.py cases: {agree}/{len(cases)} agree ({agree / len(cases):.1%}), "
              f"{len(false_equalities)} false equalities, {len(missed)} equalities missed; "
              f"{len(slow)} checks ran out of the default worker's time and were graded again with more")
        print("  missed: " + "\n  missed: ".join(missed))
    assert false_equalities == []
    assert agree / len(cases) >= AGREEMENT_FLOOR


def test_no_false_equality_on_the_hostile_corpus(tmp_path):
    """No hostile answer equals a small number (either direction); the hand-labelled unequal pairs are checked in
    tests/test_reliability.py."""
    from hostile_math import hostile_answers

    equal = [(name, gold) for name, answer in hostile_answers(tmp_path / "sentinel") for gold in ("0", "1", "2", "-2")
             if math_answers_equal(answer, gold) or math_answers_equal(gold, answer)]
    assert equal == []
    assert not (tmp_path / "sentinel").exists()


def test_hostile_grading_benchmark_runs():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, str(root / "bench" / "hostile_grading.py"), "--benign", "10",
                             "--cases", "12"], capture_output=True, text=True, timeout=600, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sentinel created: False" in result.stdout and "Math-Verify cases: 12 responses" in result.stdout


def test_math_verify_runs_under_the_worker_alarm():
    """Math-Verify's own signal timeouts are off in the worker: the worker's alarm stops a slow comparison
    (no kill, no restart) and the worker answers the next request."""
    from fspo_lite.scoring.grading.symbolic import SymbolicChecker

    checker = SymbolicChecker(timeout=1.0)
    try:
        slow = checker.equivalent_texts("$(a+b+c+d)^{60} = 0$", "$(a+b+c+d)^{60} = 1$")
        assert slow is None and checker.stats["timeouts"] == 1 and checker.stats["restarts"] == 0
        assert checker.equivalent_texts("$x \\geq 5$", "$5 \\leq x$") is True
        assert checker.equivalent_texts("$x \\geq 5$", "$x \\leq 5$") is False
    finally:
        checker.close()


def test_worker_guard_passes_numerals_only():
    """While Math-Verify runs, sympy's string parser takes a plain numeral and refuses any other text."""
    import importlib.util

    from fspo_lite.scoring.grading.symbolic import WORKER_SCRIPT

    spec = importlib.util.spec_from_file_location("symbolic_worker_under_test", WORKER_SCRIPT)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    verifier = worker.MathVerify()
    assert verifier.available
    guard = verifier.guarded[0][2]
    assert str(guard("100")) == "100" and str(guard("-2.5e3")) == "-2500.00000000000"
    for text in ("__import__('os').system('true')", "x", "1+1", "1" * 300):
        with pytest.raises(worker.Rejected):
            guard(text)
    # the originals are back once a call is over
    import sympy.parsing.sympy_parser as sympy_parser

    assert verifier.equal("$1$", "$1$") is True and sympy_parser.parse_expr is verifier.originals[1][2]


@pytest.mark.parametrize("decimal, exact, equal", [
    ("0.0833333333333333", "\\frac{1}{12}", True), ("4.123105625617661", "\\sqrt{17}", True),
    ("3.14159265358979", "\\pi", True), ("0.0833333333333999", "\\frac{1}{12}", False),
    ("1.41421356", "\\sqrt{2}", False), ("3.141592653", "\\pi", False), ("0.333", "\\frac{1}{3}", False),
    ("0.3333333333333333\\%", "\\frac{1}{3}", False),
])
def test_long_decimals_are_read_as_printed_values(decimal, exact, equal):
    assert math_answers_equal(decimal, exact) is equal and math_answers_equal(exact, decimal) is equal
