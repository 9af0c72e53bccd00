r"""Hand-labelled math answer pairs: what a careful human grader says, graded in both directions.

Used by tests/test_reliability.py (every pair must be graded right) and by
bench/fuzz_parsers.py. Labels follow the rules in docs/reliability.md: exact values (no
rounding: 1/3 != 0.333), a percentage equals its number or its fraction (25\% = 25 = 0.25), a
unit on one side only is ignored, different units differ, sets and unions ignore order, tuples
and intervals do not, a division by zero is equal to nothing.
"""

EQUAL_PAIRS = [
    (r"\frac{1}{2}", "0.5"),
    (r"2\sqrt{2}", r"\sqrt{8}"),
    ("(x+1)^2", "x^2+2x+1"),
    ("1e3", "1000"),
    ("1.5e-3", "0.0015"),
    (r"1.5\times10^{3}", "1500"),
    (r"12{,}000", "12000"),
    ("12,000", "12000"),
    ("1,234,567", "1234567"),
    (r"25\%", "0.25"),
    (r"25\%", "25"),
    ("50%", r"\frac{1}{2}"),
    (r"\$5", "5"),
    ("$5.00", "5"),
    (r"10 \text{ cm}", "10"),
    (r"10\text{ cm}", "10 cm"),
    ("5 dollars", "5"),
    (r"2\frac{1}{2}", r"\frac{5}{2}"),
    ("2 1/2", "2.5"),
    (r"\{1, 2\}", r"\{2, 1\}"),
    ("1, 2, 3", "3, 1, 2"),
    (r"(0,1)\cup(2,3)", r"(2,3)\cup(0,1)"),
    ("x = 5", "5"),
    (r"\dfrac{3}{4}", "0.75"),
    (r"-\frac{1}{2}", "-0.5"),
    (r"\frac12", "0.5"),
    (r"90^\circ", "90"),
    (r"\sin^2 x + \cos^2 x", "1"),
    (r"\log_2 8", "3"),
    ("2^{10}", "1024"),
    ("3!", "6"),
    (r"\sqrt[3]{27}", "3"),
    ("10^{-3}", "0.001"),
    (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}"),
    ("a+b", "b+a"),
    (r"(3, \pi/2)", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"\sin(\pi/12)", r"\frac{\sqrt{6}-\sqrt{2}}{4}"),
    ("0.1", ".1"),
    ("1.50", "1.5"),
    ("4.", "4"),
    ("1000000", "10^6"),
    ("€20", "20"),
    ("3 hours", "3"),
    (r"\pi r^2", r"r^2\pi"),
    ("1 000", "1000"),
    (r"\$5", "5 dollars"),
    ("28 pct", r"28\%"),
    ("0.0833333333333333", r"\frac{1}{12}"),
    (r"-2\frac{1}{2}", "-2.5"),
]

UNEQUAL_PAIRS = [
    ("10^{-50}", "0"),
    ("1+10^{-45}", "1"),
    (r"\frac{1}{10^{41}}", "0"),
    (r"\sqrt[10^{59}]{2}", "1"),
    (r"2\frac{1}{2}", "1"),
    ("1e3", "3e"),
    ("1/0", "1/0"),
    (r"\frac{1}{0}", r"\frac{2}{0}"),
    (r"\frac{1}{3}", "0.333"),
    ("(1, 2)", "(2, 1)"),
    ("[1, 2)", "[1, 2]"),
    (r"-\infty", r"\infty"),
    (r"25\%", r"0.25\%"),
    ("25", "0.25"),
    (r"10 \text{ cm}", r"10 \text{ m}"),
    (r"\$5", "50"),
    ("12,000", "12"),
    ("1,2", "12"),
    ("x^2 + 2x + 1", "(x+1)^3"),
    (r"\frac{\pi}{3}", "60"),
    ("1e999999999", "1"),
    (r"\frac{1e999999999}{1}", "1"),
    (r"\frac{1}{1e-999999999}", "1"),
    ("2", "-2"),
    (r"\sqrt{2}", "1.41421356"),
    (r"\pi", "3.14159"),
    ("1.5e3", "1.5"),
    (r"\{1, 2\}", r"\{1, 2, 3\}"),
    ("1, 2", "1, 1, 2"),
    (r"(0,1)\cup(2,3)", r"(0,1)\cup(2,4)"),
    ("2 1/2", "21/2"),
    ("x", "y"),
    ("a-b", "b-a"),
    ("5", "5x"),
    ("3!", "3"),
    ("10^{3}", "30"),
    ("1000", "100"),
    ("0.1", "0.01"),
    (r"\sin x", r"\cos x"),
    ("1e-3", "1e3"),
    ("50%", "0.05"),
    ("2^{100}", "2^{100}+1"),
    (r"\frac{1}{2}", r"\frac{1}{2}x"),
    ("5 hours", "5 minutes"),
    ("1 000", "0"),
    ("12 500", "6000"),
    ("2(1/2)", "5/2"),
    (r"\Delta", r"\delta"),
    (r"\sin 30^\circ", r"\sin 30"),
    (r"\$5", "5 cents"),
    (r"-2\frac{1}{2}", r"\frac{-2}{2}"),
]


def labelled_pairs() -> list[tuple[str, str, bool]]:
    """Every pair in both directions: (prediction, gold, equal)."""
    rows = []
    for pairs, equal in ((EQUAL_PAIRS, True), (UNEQUAL_PAIRS, False)):
        for a, b in pairs:
            rows.append((a, b, equal))
            rows.append((b, a, equal))
    return rows
