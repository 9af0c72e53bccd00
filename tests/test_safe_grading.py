"""Safe math grading: symbolic equivalence without evaluating model output in this process.

The symbolic check runs in a sandboxed worker process (fspo_lite.scoring.grading.symbolic); these tests prove
that hostile answers execute nothing (a sentinel file and tripwires on eval/exec/compile and on
sympy's string parsers) and that every call returns within 2 seconds once the worker is up.
"""

import builtins
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from fspo_lite import math_answers_equal
from fspo_lite.scoring.grading.latex_math import MAX_DEPTH, ParseError, digits_bound, parse_math, tokenize
from fspo_lite.scoring.grading.symbolic import WORKER_SCRIPT, SymbolicChecker, default_checker
from hostile_math import hostile_answers


@pytest.fixture(scope="module")
def warm_checker():
    """Start the default worker once (about a second to import sympy) so timings measure grading."""
    checker = default_checker()
    assert checker.equivalent(["num", 1, 2], ["div", ["num", 1, 1], ["num", 2, 1]]) is True
    return checker


@pytest.mark.parametrize(
    "prediction, gold, equal",
    [
        ("\\frac{1}{2}", "0.5", True),
        ("2\\sqrt{2}", "\\sqrt{8}", True),
        ("\\sqrt 8", "x = 2\\sqrt{2}", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("x^2 + 2x + 1", "(x+1)^3", False),
        ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", True),
        ("\\sin^2 x + \\cos^2 x", "1", True),
        ("\\log_2 8", "3", True),
        ("2^{10}", "1024", True),
        ("3!", "6", True),
        ("\\sqrt[3]{27}", "3", True),
        ("10\\pi", "\\pi \\cdot 10", True),
        ("\\frac{\\pi}{3}", "60", False),
        ("\\frac{1}{3}", "0.333", False),  # exact, not approximate
        ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("[1, 2)", "[1, 2]", False),  # interval brackets matter
        ("(1, 2)", "(2, 1)", False),
        ("-\\infty", "\\infty", False),
        ("\\frac{1}{0}", "\\frac{1}{0}", False),  # a division by zero is malformed: equal to nothing
        ("\\frac{1}{0}", "\\frac{2}{0}", False),  # zoo is never equal to anything
        ("a+b", "b+a", True),
        ("2x", "x2", True),
        ("\\alpha + 1", "1+\\alpha", True),
    ],
)
def test_symbolic_equivalence(warm_checker, prediction, gold, equal):
    assert math_answers_equal(prediction, gold) is equal


def test_symbolic_check_can_be_turned_off():
    assert math_answers_equal("2\\sqrt{2}", "\\sqrt{8}", symbolic=False) is False


@pytest.mark.parametrize(
    "text, tree",
    [
        ("2\\sqrt{2}", ["mul", ["num", 2, 1], ["sqrt", ["num", 2, 1]]]),
        ("\\frac12", ["div", ["num", 1, 1], ["num", 2, 1]]),
        ("0.25", ["num", 1, 4]),
        ("2^3^2", ["pow", ["num", 2, 1], ["pow", ["num", 3, 1], ["num", 2, 1]]]),
        ("-x^2", ["neg", ["pow", ["sym", "x"], ["num", 2, 1]]]),
        ("x^2y", ["mul", ["pow", ["sym", "x"], ["num", 2, 1]], ["sym", "y"]]),
        ("|x|", ["abs", ["sym", "x"]]),
        ("(1, 2]", ["tuple", "(", "]", [["num", 1, 1], ["num", 2, 1]]]),
        ("1, 2", ["list", [["num", 1, 1], ["num", 2, 1]]]),
        ("\\{1, 2\\}", ["set", [["num", 1, 1], ["num", 2, 1]]]),
        ("1 \\le x < 2", ["tuple", "[", ")", [["num", 1, 1], ["num", 2, 1]]]),
        ("x > 3", ["tuple", "(", ")", [["num", 3, 1], ["inf"]]]),
        ("\\sin^2 x", ["pow", ["fn", "sin", ["sym", "x"]], ["num", 2, 1]]),
        ("\\ln(x)", ["fn", "log", ["sym", "x"]]),
        ("π−1", ["sub", ["pi"], ["num", 1, 1]]),
    ],
)
def test_parser_builds_trees(text, tree):
    assert parse_math(text) == tree


@pytest.mark.parametrize(
    "text",
    ["", "1+", "(1", "1)", "\\frac{1}", "\\input{x}", "x_1", "__import__('os')", "1 = 2 = 3", "\\{1,2",
     "x @ y", "2**3", "a.b", "((((" * 30 + "1" + "))))" * 30, "9" * 61, "10^{10^{10}}", "100001!"],
)
def test_parser_rejects_malformed_or_oversized(text):
    with pytest.raises(ParseError):
        parse_math(text)


def test_digits_bound_by_hand():
    assert digits_bound(parse_math("12 + 345")) == 2 + 3
    assert digits_bound(parse_math("12^{100}")) == 2 * 100
    assert digits_bound(parse_math("10!")) == pytest.approx(10 * 1 + 1)  # 10 log10(10) + 1


def test_nesting_limit_is_reached_before_python_recursion():
    depth_ok = "(" * 20 + "1" + ")" * 20
    assert parse_math(depth_ok) == ["num", 1, 1]
    with pytest.raises(ParseError, match=f"nested deeper than {MAX_DEPTH}"):
        parse_math("(" * 100 + "1" + ")" * 100)


def test_tokenizer_limits_long_input():
    with pytest.raises(ParseError, match="tokens"):
        tokenize("1+" * 1000)


@contextlib.contextmanager
def tripwires():
    """Inside the block, eval/exec/compile and sympy's string parsers raise in this process; the
    yielded list records any call. (Only around the grading calls: pytest itself needs them.)"""
    sympy = pytest.importorskip("sympy")
    import sympy.parsing.sympy_parser as sympy_parser

    calls = []

    def tripwire(name):
        def trap(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was called")
        return trap

    with pytest.MonkeyPatch.context() as patch:
        for name in ("eval", "exec", "compile"):
            patch.setattr(builtins, name, tripwire(name))
        patch.setattr(sympy, "sympify", tripwire("sympify"))
        patch.setattr(sympy, "parse_expr", tripwire("parse_expr"), raising=False)
        patch.setattr(sympy_parser, "parse_expr", tripwire("parse_expr"))
        yield calls


def test_hostile_answers_execute_nothing_and_return_quickly(tmp_path, warm_checker):
    sentinel = tmp_path / "pwned"
    corpus = hostile_answers(sentinel)
    assert len(corpus) >= 30
    timings, results = [], []
    with tripwires() as calls:
        for name, answer in corpus:
            for prediction, gold in ((answer, "2"), ("2", answer), (answer, answer[::-1])):
                started = time.perf_counter()
                results.append((name, math_answers_equal(prediction, gold)))
                timings.append((time.perf_counter() - started, name))
    assert calls == []
    assert not sentinel.exists()
    assert all(result in (True, False) for _, result in results)
    slowest, name = max(timings)
    print(f"slowest of {len(timings)} hostile calls: {slowest:.3f} s ({name})")
    assert slowest < 2.0, f"{name}: {slowest:.2f} s"


def test_worker_that_hangs_is_killed_and_replaced():
    checker = SymbolicChecker(timeout=0.5)
    try:
        assert checker.equivalent(["num", 1, 1], ["num", 1, 1]) is True
        stuck = checker._active.process
        os.kill(stuck.pid, signal.SIGSTOP)  # a worker that never answers
        started = time.perf_counter()
        assert checker.equivalent(["num", 2, 1], ["num", 2, 1]) is None
        assert time.perf_counter() - started < 2.0
        assert stuck.wait(timeout=5) == -signal.SIGKILL
        assert checker.stats["timeouts"] == 1 and checker.stats["restarts"] == 1
        assert checker.equivalent(["num", 3, 1], ["num", 3, 1]) is True  # the warm spare took over
    finally:
        checker.close()


def test_soft_timeout_answers_without_killing():
    checker = SymbolicChecker(timeout=0.3)
    try:
        assert checker.equivalent(["num", 1, 1], ["num", 1, 1]) is True
        worker = checker._active
        expansion = ["pow", ["add", ["add", ["sym", "x"], ["sym", "y"]], ["sym", "z"]], ["num", 400, 1]]
        started = time.perf_counter()
        assert checker.equivalent(expansion, ["num", 1, 1]) is None
        assert time.perf_counter() - started < 2.0 and checker.stats["timeouts"] == 1
        if checker.stats["restarts"] == 0:  # the in-worker alarm answered before the hard deadline
            assert checker._active is worker
        assert checker.equivalent(["num", 2, 1], ["num", 2, 1]) is True
    finally:
        checker.close()


def test_worker_rejects_trees_outside_the_table():
    checker = SymbolicChecker()
    try:
        for bad in (["sym", "__import__"], ["fn", "eval", ["num", 1, 1]], ["num", "1", 1], ["os.system", "id"],
                    "not a list", ["num", 1, 0]):
            assert checker.equivalent(bad, ["num", 1, 1]) is None
        assert checker.stats["errors"] == 6
    finally:
        checker.close()


def test_worker_that_cannot_start_disables_symbolic_checks(tmp_path, monkeypatch, capsys):
    import fspo_lite.scoring.grading.symbolic as symbolic

    broken = tmp_path / "worker.py"
    broken.write_text("import sys\nsys.exit(3)\n")  # what a missing sympy looks like from outside
    monkeypatch.setattr(symbolic, "WORKER_SCRIPT", broken)
    checker = SymbolicChecker()
    try:
        assert checker.equivalent(["num", 1, 1], ["num", 1, 1]) is None
        assert "exited during start-up (code 3)" in checker.unavailable
        assert "is sympy installed?" in capsys.readouterr().err
        started = time.perf_counter()
        assert checker.equivalent(["num", 2, 1], ["num", 2, 1]) is None  # no new start-up attempts
        assert time.perf_counter() - started < 0.1 and checker.stats["requests"] == 1
    finally:
        checker.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX resource limits")
def test_worker_limits_forbid_writing_files_and_starting_processes(tmp_path):
    target = tmp_path / "written"
    probe = (
        "import sys, runpy, os\n"
        "runpy.run_path(sys.argv[1])['limit_resources'](512)\n"
        "try:\n    pid = os.fork()\nexcept OSError:\n    print('fork refused')\nelse:\n"
        "    if pid == 0: os._exit(0)\n    print('fork allowed')\n"
        "try:\n    with open(sys.argv[2], 'w') as f: f.write('x' * 10)\n"
        "except OSError:\n    print('write refused')\n"
    )
    result = subprocess.run([sys.executable, "-I", "-c", probe, str(WORKER_SCRIPT), str(target)],
                            capture_output=True, text=True, timeout=60)
    assert "write refused" in result.stdout and (not target.exists() or target.stat().st_size == 0)
    assert "fork refused" in result.stdout or os.geteuid() == 0  # root is exempt from RLIMIT_NPROC


def test_worker_protocol_round_trip():
    """The worker speaks one JSON object per line and never echoes input it did not parse."""
    process = subprocess.Popen([sys.executable, "-I", str(WORKER_SCRIPT), "1.0", "1024"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(process.stdout.readline()) == {"ready": True}
        process.stdin.write('{"id": 7, "a": ["num", 4, 2], "b": ["num", 2, 1]}\nnot json\n')
        process.stdin.flush()
        assert json.loads(process.stdout.readline()) == {"id": 7, "equal": True, "error": None}
        assert json.loads(process.stdout.readline())["error"] == "JSONDecodeError"
    finally:
        process.stdin.close()
        assert process.wait(timeout=10) == 0
