"""The sandboxed side of symbolic grading: a standalone script, run as its own process.

It is started by `fspo_lite.scoring.grading.symbolic` as `python -I symbolic_worker.py` (isolated mode: no
PYTHONPATH, no user site, not even this folder on sys.path) and imports only the standard
library and sympy, never fspo_lite. It reads one JSON request per line on stdin,
{"id": n, "a": tree, "b": tree} with trees from `fspo_lite.scoring.grading.latex_math`, and writes one
JSON reply per line, {"id": n, "equal": true | false | null, "error": text | null}. A request
{"id": n, "texts": [prediction, gold]} instead asks Math-Verify (the `math-verify` package, when installed)
to parse both LaTeX strings and compare them: only its LaTeX extraction is used (an ANTLR grammar that builds
sympy objects), never its plain-expression extraction, which hands text to sympy's parse_expr; that function
(and so sympy's string parsing behind sympify) is replaced here by one that passes a plain numeral (the grammar
builds numbers with sympy.Number("100")) and refuses any other text, so no text can reach eval.
Math-Verify's own timeouts (signal.alarm, which would cancel this worker's alarm) are switched off: the
per-request alarm below bounds its work like any other request.

Nothing it receives is evaluated: trees are checked node by node against a fixed table and
built into sympy objects with explicit constructors (no eval, exec, sympify or parse_expr).
Resource limits (address space, no file writes, no child processes, no core dumps) apply once
sympy is imported; a soft per-request alarm ends slow pure-Python work, and the parent kills
the whole process when a request overruns its hard timeout.
"""

import json
import signal
import sys

NAMES = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho "
    "sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Upsilon Phi Psi Omega".split()
) | frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
MAX_TREE_DEPTH = 200


class Rejected(ValueError):
    """The request is not a valid tree."""


class SoftTimeout(BaseException):
    """The per-request alarm fired (a BaseException, so that sympy's own `except Exception` cannot swallow it)."""


def limit_resources(memory_mb):
    """Apply OS limits to this process (POSIX only; elsewhere the parent's timeout still applies)."""
    try:
        import resource
    except ImportError:
        return
    limits = [("RLIMIT_FSIZE", 0), ("RLIMIT_CORE", 0), ("RLIMIT_NPROC", 0)]
    if memory_mb:
        limits.append(("RLIMIT_AS", memory_mb * 1024 * 1024))
    for name, value in limits:
        if hasattr(resource, name):
            try:
                resource.setrlimit(getattr(resource, name), (value, value))
            except (ValueError, OSError):
                pass  # some systems refuse a limit (e.g. RLIMIT_AS on macOS); the timeout remains


def build(tree, sympy, depth=0):
    """A sympy object from a syntax tree; Rejected for anything not in the table."""
    if depth > MAX_TREE_DEPTH or not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        raise Rejected("malformed tree")
    kind, args = tree[0], tree[1:]

    def sub(index):
        return build(args[index], sympy, depth + 1)

    if kind == "num":
        if len(args) != 2 or not all(type(a) is int for a in args) or args[1] <= 0:
            raise Rejected("malformed number")
        return sympy.Rational(args[0], args[1])
    if kind == "sym":
        if len(args) != 1 or args[0] not in NAMES:
            raise Rejected("unknown symbol")
        return sympy.Symbol(args[0])
    simple = {"pi": lambda: sympy.pi, "inf": lambda: sympy.oo}
    if kind in simple and not args:
        return simple[kind]()
    unary = {"neg": lambda a: -a, "fact": sympy.factorial, "sqrt": sympy.sqrt, "abs": sympy.Abs}
    if kind in unary and len(args) == 1:
        return unary[kind](sub(0))
    binary = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "root": sympy.root, "log": sympy.log,
    }
    if kind in binary and len(args) == 2:
        return binary[kind](sub(0), sub(1))
    functions = {
        "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec,
        "csc": sympy.csc, "arcsin": sympy.asin, "arccos": sympy.acos, "arctan": sympy.atan,
        "sinh": sympy.sinh, "cosh": sympy.cosh, "tanh": sympy.tanh, "log": sympy.log, "exp": sympy.exp,
    }
    if kind == "fn" and len(args) == 2 and args[0] in functions:
        return functions[args[0]](build(args[1], sympy, depth + 1))
    raise Rejected(f"unknown node {kind!r}")


SAMPLE_POINTS = ((3, 7), (5, 11), (13, 17))
"""Rationals substituted for every symbol to prove a difference non-zero without simplifying it."""


def nonzero_somewhere(difference, sympy):
    """True when a - b is clearly non-zero at one of the sample points (then a != b for sure);
    this skips the slow `simplify` for the common case, a wrong answer."""
    symbols = sorted(difference.free_symbols, key=str)
    for offset in range(len(SAMPLE_POINTS)):
        point = {
            symbol: sympy.Rational(*SAMPLE_POINTS[(offset + index) % len(SAMPLE_POINTS)]) * (index + 1)
            for index, symbol in enumerate(symbols)
        }
        value = sympy.N(difference.subs(point), 30)
        if value.is_number and value.is_finite and abs(value) > sympy.Rational(1, 10**12):
            return True
    return False


RELATIVE_TOLERANCE_DIGITS = 40
"""A constant difference counts as zero only when sympy cannot certify a single significant digit
of it at 60 digits of working precision and it is below 10^-40 times the larger of |a|, |b|
(magnitude-relative: 10^-50 and 0 differ, so do 1 + 10^-45 and 1)."""


def constant_difference_is_zero(a, b, difference, sympy):
    """For expressions without symbols: exact rationals compare exactly; otherwise the difference
    is evaluated with adaptive precision (evalf gives significant digits of the difference itself,
    however small it is), and only a difference with no certified digit that is also tiny relative
    to the operands counts as zero."""
    if difference.is_Rational:
        return difference == 0
    try:
        value = difference.evalf(30, strict=True, maxn=400)
    except Exception:  # PrecisionExhausted: no digit of the difference could be certified
        value = None
    if value is not None:
        return bool(value == 0)
    scale = max(abs(sympy.N(a, 60)), abs(sympy.N(b, 60)))
    residue = abs(sympy.N(difference, 60))
    if not (residue.is_number and scale.is_number):
        return False
    return bool(residue <= scale * sympy.Rational(1, 10**RELATIVE_TOLERANCE_DIGITS))


def expressions_equal(a, b, sympy):
    """Exact equivalence: a - b is 0 after expansion or simplification, or (no symbols) it is a
    constant that is zero to the precision rule of `constant_difference_is_zero`."""
    if any(x.has(sympy.nan, sympy.zoo) for x in (a, b)):
        return False
    if a.has(sympy.oo, -sympy.oo) or b.has(sympy.oo, -sympy.oo):
        return a == b
    difference = a - b
    if difference == 0 or sympy.expand(difference) == 0:
        return True
    if not difference.free_symbols and difference.is_Rational:
        return False
    if nonzero_somewhere(difference, sympy):
        return False
    if sympy.simplify(difference) == 0:
        return True
    if not difference.free_symbols:
        return constant_difference_is_zero(a, b, difference, sympy)
    return False


def _items_match(a_items, b_items, sympy):
    """Multiset equality of two item lists (each item of a matched to a distinct equal item of b)."""
    if len(a_items) != len(b_items):
        return False
    unused = list(b_items)
    for x in a_items:
        for index, y in enumerate(unused):
            if trees_equal(x, y, sympy):
                del unused[index]
                break
        else:
            return False
    return True


def _covers(a_items, b_items, sympy):
    """Every item of a equals some item of b."""
    return all(any(trees_equal(x, y, sympy) for y in b_items) for x in a_items)


def _items(tree):
    if len(tree) != 2 or not isinstance(tree[1], list):
        raise Rejected("malformed collection")
    return tree[1]


def trees_equal(a, b, sympy):
    """The collection rules, then expressions:

    - braced sets: equal as sets (order and repeats do not matter); a set and a bare list alike;
    - bare lists ("1, 2", "x = 2 or x = -3"): equal as multisets; a bare list equals a tuple in round brackets with
      the same items in the same order ("1, 2" = "(1, 2)", "2, 1" != "(1, 2)");
    - tuples and intervals: same brackets, same length, equal items in order; never equal to a braced set;
    - unions: equal items in any order.
    """
    kinds = {a[0], b[0]}
    if kinds & {"set", "list"} and kinds <= {"set", "list"}:
        a_items, b_items = _items(a), _items(b)
        if a[0] == b[0] == "list":
            return _items_match(a_items, b_items, sympy)
        return _covers(a_items, b_items, sympy) and _covers(b_items, a_items, sympy)
    if kinds == {"list", "tuple"}:
        listed, ordered = (a, b) if a[0] == "list" else (b, a)
        if len(ordered) != 4 or ordered[1:3] != ["(", ")"]:
            return False
        return len(_items(listed)) == len(ordered[3]) and all(
            trees_equal(x, y, sympy) for x, y in zip(_items(listed), ordered[3]))
    for kind in ("set", "list", "union"):
        if a[0] == kind or b[0] == kind:
            if a[0] != b[0]:
                return False
            return _items_match(_items(a), _items(b), sympy)
    a_tuple, b_tuple = a[0] == "tuple", b[0] == "tuple"
    if a_tuple or b_tuple:
        if not (a_tuple and b_tuple) or len(a) != 4 or len(b) != 4 or a[1:3] != b[1:3] or len(a[3]) != len(b[3]):
            return False
        return all(trees_equal(x, y, sympy) for x, y in zip(a[3], b[3]))
    return expressions_equal(build(a, sympy), build(b, sympy), sympy)


class MathVerify:
    """Math-Verify's parse and verify with LaTeX extraction only (None when the package is missing)."""

    def __init__(self):
        try:
            import math_verify
            from math_verify import parser as math_verify_parser
        except ImportError:
            self.available = False
            return
        import re

        import sympy.parsing
        import sympy.parsing.sympy_parser as sympy_parser

        original = sympy_parser.parse_expr
        number = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")

        def numbers_only(text, *args, **kwargs):
            """sympy.Number("100") goes through sympify and parse_expr: a numeral passes, any other text is refused."""
            if not isinstance(text, str) or not number.fullmatch(text) or len(text) > 200:
                raise Rejected("string parsing is refused in the worker")
            return original(text, *args, **kwargs)

        self.guarded = [(module, name, numbers_only) for module in (sympy.parsing, sympy_parser, math_verify_parser)
                        for name in ("parse_expr", "parse_expr_cached") if hasattr(module, name)]
        self.originals = [(module, name, getattr(module, name)) for module, name, _ in self.guarded]
        self.math_verify = math_verify
        self.targets = [math_verify.LatexExtractionConfig(boxed_match_priority=0)]
        self.available = True
        for gold, prediction in WARM_UP:  # fixed texts, before the guard: sympy's lazy imports parse their own strings
            self.verdict(gold, prediction)

    def verdict(self, prediction, gold):
        mv = self.math_verify
        gold_parsed = mv.parse(gold, self.targets, parsing_timeout=None)
        prediction_parsed = mv.parse(prediction, self.targets, parsing_timeout=None)
        if not gold_parsed or not prediction_parsed:
            return False
        return bool(mv.verify(gold_parsed, prediction_parsed, float_rounding=FLOAT_ROUNDING, timeout_seconds=None))

    def equal(self, prediction, gold):
        if not self.available:
            raise Rejected("math-verify is not installed")
        if not (isinstance(prediction, str) and isinstance(gold, str)):
            raise Rejected("texts must be strings")
        for module, name, function in self.guarded:  # only while Math-Verify runs (sympy's own code parses strings)
            setattr(module, name, function)
        try:
            return self.verdict(prediction, gold)
        finally:
            for module, name, function in self.originals:
                setattr(module, name, function)


WARM_UP = [("$y=2x+1$", "$2x-y+1=0$"), ("$x \\in [0, 1)$", "$0 \\le x < 1$"), ("$50\\%$", "$0.5$"),
           ("$\\{1, 2\\}$", "$\\{2, 1\\}$"), ("$\\begin{pmatrix}1 & 2\\end{pmatrix}$", "$\\begin{pmatrix}1 & 2\\end{pmatrix}$"),
           ("$10\\text{ cm}$", "$10$"), ("$\\sin^2 x + \\cos^2 x$", "$1$"), ("$1 \\pm \\sqrt{2}$", "$1+\\sqrt{2}, 1-\\sqrt{2}$")]
"""Pairs Math-Verify grades once at start-up, before string parsing is guarded (sympy imports its unit tables on
first use by parsing its own fixed strings)."""
FLOAT_ROUNDING = 6
"""Math-Verify's float_rounding (its default): decimals compared after rounding to 6 places. Only answers the
exact grammar cannot parse reach Math-Verify, so exact decimals elsewhere stay exact."""


def within(a, b, places, sympy):
    """A constant expression a and a long decimal b agree to `places` decimal places: |a - b| <= 10^-places (b is
    a or a rounded or cut after its last digit). Only for expressions without symbols."""
    if type(places) is not int or not 0 < places <= 60:
        raise Rejected("malformed places")
    a, b = build(a, sympy), build(b, sympy)
    if a.free_symbols or b.free_symbols or any(x.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo) for x in (a, b)):
        return False
    difference = sympy.N(a - b, places + 20)
    return bool(difference.is_number and abs(difference) <= sympy.Rational(1, 10**places))


def _on_alarm(signum, frame):
    raise SoftTimeout()


def serve(soft_timeout, memory_mb):
    import logging

    import sympy

    logging.disable(logging.WARNING)  # Math-Verify warns on every call that its own timeout is off
    math_verify = MathVerify()
    limit_resources(memory_mb)
    use_alarm = hasattr(signal, "setitimer")
    if use_alarm:
        signal.signal(signal.SIGALRM, _on_alarm)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        reply = {"id": None, "equal": None, "error": None}
        try:
            request = json.loads(line)
            reply["id"] = request.get("id")
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, soft_timeout)
            try:
                if "texts" in request:
                    reply["equal"] = math_verify.equal(*request["texts"][:2])
                elif "within" in request:
                    reply["equal"] = within(request["a"], request["b"], request["within"], sympy)
                else:
                    reply["equal"] = bool(trees_equal(request["a"], request["b"], sympy))
            finally:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except SoftTimeout:
            reply["error"] = "timeout"
        except (Rejected, MemoryError, RecursionError) as error:
            reply["error"] = type(error).__name__
        except Exception as error:  # sympy raises many types on odd input; the answer is then "not equal"
            reply["error"] = type(error).__name__
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    serve(soft_timeout=float(sys.argv[1]), memory_mb=int(sys.argv[2]))
