r"""Answer shapes a careful grader reads (docs/evaluation.md, "How math answers are graded"): sets and tuples,
several boxed answers, answers joined by "or", intervals and the inequalities that describe them, units, percent
signs and degree marks. Each rule has a table of equal and unequal pairs, each graded in both directions, and a
property over generated pairs that differ in one element, one bracket or one sign (no false equality), with every
call under the 2-second bound.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings, strategies as st

from fspo_lite.data.examples import QAExample
from fspo_lite.scoring.grading import final_answer, grade_response, math_answers_equal, outcome_reward
from fspo_lite.scoring.grading.outcome import every_box, gold_parts

BOUND_S = 2.0
"""No call may take longer, once the symbolic worker is up (its start-up, importing sympy, is paid once)."""


@pytest.fixture(autouse=True, scope="module")
def warm_worker():
    assert math_answers_equal("x + 1", "1 + x")  # starts the worker before any call is timed


def graded(prediction: str, gold: str) -> bool:
    """The verdict in both directions (they must agree), each call within the time bound."""
    verdicts = []
    for a, b in ((prediction, gold), (gold, prediction)):
        start = time.monotonic()
        verdicts.append(math_answers_equal(a, b))
        assert time.monotonic() - start < BOUND_S, (a, b)
    assert verdicts[0] == verdicts[1], (prediction, gold, verdicts)
    return verdicts[0]


# ------------------------------------------------------------------ sets, tuples and bare lists

@pytest.mark.parametrize("prediction, gold, equal", [
    (r"\{1, 2, 3\}", r"\{3, 1, 2\}", True),          # a set ignores order
    (r"\{1, 2, 2\}", r"\{1, 2\}", True),             # ... and repeats
    ("3, 1, 2", "1, 2, 3", True),                    # a bare list ignores order
    ("1, 2", r"\{2, 1\}", True),                     # a bare list of solutions is their set
    ("(1, 2)", "1, 2", True),                        # a bare list in the tuple's order
    ("(1, 2)", "(2, 1)", False),                     # an ordered tuple is not a set
    ("(1, 2)", "2, 1", False),
    ("(1, 2, 3)", "(1, 3, 2)", False),
    ("(1, 2)", r"\{1, 2\}", False),                  # a tuple never equals a braced set
    ("[1, 2]", "1, 2", False),                       # nor a closed interval a bare list
    ("2, 2", "2", False),                            # a bare list counts repeats
    (r"\{1, 2\}", r"\{1, 3\}", False),
    (r"\{1, 2\}", r"\{1, 2, 3\}", False),
    (r"\left(3, \frac{\pi}{2}\right)", r"(3, \pi/2)", True),
])
def test_sets_tuples_and_lists(prediction, gold, equal):
    assert graded(prediction, gold) is equal


# ------------------------------------------------------------------ alternatives joined by "or"

@pytest.mark.parametrize("prediction, gold, equal", [
    ("x = 2 or x = -3", "-3, 2", True),
    (r"x = 2 \text{ or } x = -3", "-3, 2", True),
    (r"x=2 \text{ and } x=-3", "2, -3", True),
    (r"x = 2 \quad x = -3", "-3, 2", True),
    ("2 or -3", r"\{-3, 2\}", True),
    ("2 or 3", "2", False),                          # two answers are not one
    ("x = 2 or x = 3", "2", False),
    ("x = 2 or x = -3", "2, 3", False),              # one sign
    ("x = 2 or x = -3", "-3, 2, 5", False),
])
def test_alternatives_joined_by_or(prediction, gold, equal):
    assert graded(prediction, gold) is equal


# ------------------------------------------------------------------ intervals and inequalities

@pytest.mark.parametrize("prediction, gold, equal", [
    ("[1, 2)", "[1, 2)", True),
    ("[1, 2)", "[1, 2]", False),                     # a bracket changes the set
    ("(1, 2]", "[1, 2]", False),
    (r"1 \le x < 2", "[1, 2)", True),
    (r"1 \leq x \leq 2", "[1, 2)", False),
    ("1 <= x < 2", "[1, 2)", True),
    (r"x \in [1, 2)", r"1 \le x < 2", True),
    ("x > 3", r"(3, \infty)", True),
    (r"x \geq 3", r"[3, \infty)", True),
    (r"x \ge 3", r"(3, \infty)", False),
    ("3 > x", r"(-\infty, 3)", True),
    (r"x \le 3", r"(-\infty, 3]", True),
    (r"x \le 3", r"(-\infty, 3)", False),
    (r"x \le -3", r"(-\infty, 3]", False),           # one sign
    (r"x < -1 \text{ or } x > 2", r"(-\infty, -1) \cup (2, \infty)", True),
    (r"x < -1 \text{ or } x > 2", r"(2, \infty) \cup (-\infty, -1)", True),
    (r"x < -1 \text{ or } x \ge 2", r"(-\infty, -1) \cup (2, \infty)", False),
    ("x > 1 and x < 3", "(1, 3)", True),
    (r"x > \sqrt{2}", r"(\sqrt{2}, \infty)", True),
    (r"x \geq 5", r"5 \leq x", True),
    (r"x \geq 5", r"x \leq 5", False),
])
def test_intervals_and_inequalities(prediction, gold, equal):
    assert graded(prediction, gold) is equal


# ------------------------------------------------------------------ units, percent signs, degree marks

@pytest.mark.parametrize("prediction, gold, equal", [
    ("10 cm", "10", True),                           # a unit on one side only is ignored
    ("10 cm", "10 m", False),                        # ... but two different units are compared
    (r"1\text{ m}", "100 cm", True),                 # units of one dimension compare after conversion
    (r"1\text{ m}", "10 cm", False),
    (r"1\text{ m}^2", "10000 cm^2", True),
    (r"1\text{ m}^2", "100 cm^2", False),            # squared units convert squared
    (r"5\text{ cm}^2", r"5\text{ cm}", False),
    ("2 hours", "120 minutes", True),
    ("2 hours", "2 minutes", False),
    ("3 feet", "36 inches", True),
    (r"\$0.50", "50 cents", True),
    (r"\$5", "5 cents", False),
    ("1.5 million", "1500000", True),                # a number word is a factor, not a unit
    ("5 thousand", "5", False),
    ("2 dozen", "24", True),
    ("1 month", "30 days", False),                   # no fixed conversion: different units differ
    (r"50\%", "0.5", True),
    (r"50\%", "50", True),
    (r"50\%", "5", False),
    (r"50\%", r"0.5\%", False),
    (r"90^\circ", "90", True),
    ("45°", "45", True),
    (r"30^\circ", "60", False),
    (r"\sin 30^\circ", r"\sin 30", False),
])
def test_units_percent_and_degrees(prediction, gold, equal):
    assert graded(prediction, gold) is equal


# ------------------------------------------------------------------ several boxed answers

def _graded_response(gold: str, text: str) -> tuple[str | None, bool]:
    example = QAExample("m", "q", [gold], task="math")
    answer, correct, _ = grade_response(example, text)
    full = f"<think>{text}</think>\n<answer>{text}</answer>"
    reward = outcome_reward(example, full)
    assert reward.correct is grade_response(example, full)[1]  # the reward pays what evaluation counts
    return answer, correct


@pytest.mark.parametrize("gold, text, answer, correct", [
    ("3", r"First \boxed{2}. That is wrong; the answer is \boxed{3}.", "3", True),      # the last box counts
    ("2", r"First \boxed{2}. That is wrong; the answer is \boxed{3}.", "3", False),     # an earlier one does not
    ("-2, 1", r"roots \boxed{-2} and \boxed{1}", "-2, 1", True),                        # one statement: a list
    ("-2, 1", r"roots \boxed{-2} and \boxed{3}", "-2, 3", False),
    ("3, 5", r"(a) \boxed{3} (b) \boxed{5}", "3, 5", True),                             # part labels join boxes
    ("3, 5", r"Part (a): so \boxed{3}. For part (b) the sum is \boxed{5}.", "3, 5", True),  # one box per part
    ("3, 5", r"Part (a): so \boxed{3}. For part (b) the sum is \boxed{6}.", "6", False),    # every part must match
    ("3, 5", r"so \boxed{5}.", "5", False),                                             # a part missing
    # more boxes than parts: the final answer alone (a careful reader might accept the first; this rule does not)
    ("3, 5", r"\boxed{1}. Redo: (a) gives \boxed{3}, and (b) gives \boxed{5}", "5", False),
    ("3, 5", r"\boxed{3}. No: \boxed{4}. Then (b) is \boxed{5}.", "5", False),
    ("5", r"(a) \boxed{3} (b) \boxed{5}", "3, 5", False),                               # a one-part gold
    # labelled parts far apart, also (i)/(ii), 1)/2) and Part A/Part B: one box per part, graded together
    ("3, 5", "(a) The area is $\\boxed{3}$.\n\n(b) The perimeter is $\\boxed{5}$.", "3, 5", True),
    ("3, 5", r"(i) we get \boxed{3} from the first equation. (ii) Then \boxed{5}.", "3, 5", True),
    ("3, 5", r"Part A: the answer is \boxed{3}. Part B: the answer is \boxed{5}.", "3, 5", True),
    ("3, 5", r"(1) gives \boxed{3}. Next, (2) gives \boxed{5}.", "3, 5", True),
    # exactly k boxes, but the text takes one back: the last box counts, never both
    ("2, 3", r"\boxed{2} is wrong, the answer is \boxed{3}", "3", False),
    ("2, 3", r"The answer is \boxed{2}, no wait, it is \boxed{3}.", "3", False),
    ("2, 3", r"So \boxed{2}. Correction: \boxed{3}.", "3", False),
    ("2, 3", r"So we get \boxed{2}. I made a mistake above; redoing it gives \boxed{3}.", "3", False),
    ("2, 3", r"\boxed{2}. Hmm, that is incorrect. The answer is \boxed{3}.", "3", False),
    ("2, 3", r"Part (a): \boxed{2}. Wait, part (a) is wrong. Part (a): \boxed{3}", "3", False),  # three boxes
    ("2, 3", r"(a) \boxed{2} is wrong. (b) So the answer is \boxed{3}.", "3", False),    # labelled, taken back
    ("2, 3", r"(a) \boxed{2}. Actually (a) is \boxed{3}.", "3", False),                  # a label twice
    ("2, 3", r"(b) \boxed{2}. Now the other one: (a) \boxed{3}.", "3", False),          # labels out of order
    ("2, 3", r"By f(1) = \boxed{2} we find f(2) = \boxed{3}.", "3", False),              # arguments, not labels
    # the price of that caution: a labelled answer with a word of doubt is graded on its last box alone
    ("3, 5", r"(a) \boxed{3}. I made an error in the units; (b) \boxed{5}", "5", False),
])
def test_several_boxes(gold, text, answer, correct):
    assert _graded_response(gold, text) == (answer, correct)


def test_box_helpers():
    assert gold_parts("3, 5") == 2 and gold_parts("x = 2 or x = -3") == 2 and gold_parts(r"\{1, 2\}") == 1
    assert gold_parts("(1, 2)") == 1 and gold_parts("7") == 1 and gold_parts("1/0, ") == 1
    assert every_box(r"(a) \boxed{1} (b) \boxed{2}", 2) == "1, 2"
    assert every_box(r"Part (a) is \boxed{1}; part (b) is \boxed{2}", 2) == "1, 2"
    assert every_box(r"a \boxed{1} b \boxed{2}", 2) is None  # no part labels
    assert every_box(r"(a) \boxed{1} (c) \boxed{2}", 2) is None  # a label skipped
    assert every_box(r"(a) \boxed{1} (b) \boxed{2}", 3) is None and every_box(r"(a) \boxed{1}", 1) is None
    assert every_box(r"(a) \boxed{1} (b) \boxed{2", 2) is None  # an unclosed box
    assert final_answer(r"Part (a): \boxed{3}; Part (b): \boxed{5}", "math") == "3, 5"


# ------------------------------------------------------------------ no false equality (properties)

NUMBERS = st.integers(min_value=-30, max_value=30)


@settings(max_examples=30, deadline=None)
@given(items=st.lists(NUMBERS, min_size=2, max_size=4, unique=True), data=st.data())
def test_sets_in_any_order_and_one_element_changed(items, data):
    shuffled = data.draw(st.permutations(items))
    render = lambda values: r"\{" + ", ".join(map(str, values)) + r"\}"
    assert graded(render(shuffled), render(items))
    assert graded(", ".join(map(str, shuffled)), ", ".join(map(str, items)))
    index = data.draw(st.integers(0, len(items) - 1))
    changed = list(items)
    changed[index] = data.draw(NUMBERS.filter(lambda value: value not in items))
    assert not graded(render(changed), render(items))
    assert not graded(", ".join(map(str, changed)), ", ".join(map(str, items)))


@settings(max_examples=30, deadline=None)
@given(items=st.lists(NUMBERS, min_size=2, max_size=4), data=st.data())
def test_tuples_keep_their_order(items, data):
    order = data.draw(st.permutations(items))
    tuple_ = lambda values: "(" + ", ".join(map(str, values)) + ")"
    assert graded(tuple_(order), tuple_(items)) is (list(order) == list(items))
    assert graded(", ".join(map(str, order)), tuple_(items)) is (list(order) == list(items))
    assert not graded(r"\{" + ", ".join(map(str, items)) + r"\}", tuple_(items))


BRACKETS = [("(", "<", ")", "<"), ("[", r"\le", "]", r"\le")]


@settings(max_examples=40, deadline=None)
@given(low=NUMBERS, width=st.integers(1, 20), left=st.sampled_from(BRACKETS), right=st.sampled_from(BRACKETS),
       change=st.sampled_from(["left bracket", "right bracket", "low sign", "high sign"]))
def test_intervals_differing_in_one_bracket_or_one_sign(low, width, left, right, change):
    high = low + width
    interval = f"{left[0]}{low}, {high}{right[2]}"
    inequality = f"{low} {left[1]} x {right[3]} {high}"
    assert graded(inequality, interval)
    flip = {"(": "[", "[": "(", ")": "]", "]": ")"}
    if change == "left bracket":
        other = f"{flip[left[0]]}{low}, {high}{right[2]}"
    elif change == "right bracket":
        other = f"{left[0]}{low}, {high}{flip[right[2]]}"
    elif change == "low sign":
        if low == 0 or -low >= high:
            return
        other = f"{left[0]}{-low}, {high}{right[2]}"
    else:
        if high == 0 or -high <= low:
            return
        other = f"{left[0]}{low}, {-high}{right[2]}"
    assert not graded(other, interval) and not graded(other, inequality)


@settings(max_examples=30, deadline=None)
@given(first=NUMBERS.filter(bool), second=NUMBERS.filter(bool))
def test_or_alternatives_differing_in_one_sign(first, second):
    spoken = f"x = {first} or x = {second}"
    assert graded(spoken, f"{second}, {first}")
    if -first != second and first != second:
        assert not graded(spoken, f"{second}, {-first}")
    assert not graded(spoken, str(first)) or first == second


@settings(max_examples=30, deadline=None)
@given(value=st.integers(1, 10_000), unit=st.sampled_from([("m", "cm", 100), ("hours", "minutes", 60),
                                                            ("kg", "grams", 1000), ("km", "meters", 1000)]))
def test_unit_conversions_differing_in_one_digit(value, unit):
    big, small, factor = unit
    written = rf"{value}\text{{ {big}}}"
    assert graded(written, f"{value * factor} {small}")
    assert not graded(written, f"{value * factor + 1} {small}")
    assert not graded(written, f"{value} {small}") or factor == 1
