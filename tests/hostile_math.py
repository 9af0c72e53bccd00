"""A corpus of hostile math answers: code injection, LaTeX macros, resource exhaustion, odd bytes.

Shared by tests/test_safe_grading.py and bench/hostile_grading.py. Every entry that could run
code would create the `sentinel` file, so "nothing executed" is checked by its absence.
"""

from __future__ import annotations

from pathlib import Path


def hostile_answers(sentinel: Path) -> list[tuple[str, str]]:
    """(name, answer) pairs; at least 30 of them."""
    s = str(sentinel)
    touch = f"open({s!r}, 'w').write('pwned')"
    return [
        ("dunder import", f"__import__('os').system('touch {s}')"),
        ("exec call", f'exec("{touch}")'),
        ("eval call", f'eval("{touch}")'),
        ("compile call", f"compile('{touch}', 'x', 'exec')"),
        ("open builtin", touch),
        ("lambda", f"(lambda: {touch})()"),
        ("class bases", "().__class__.__bases__[0].__subclasses__()"),
        ("subclass walk", "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]('id')"),
        ("globals", "__builtins__.__dict__['ev'+'al']('1+1')"),
        ("getattr", "getattr(__builtins__, 'exec')('import os')"),
        ("sympy constructor", "Symbol('x').__class__.__init__.__globals__"),
        ("sympy function call", f"Function('f')(x) + __import__('os').system('touch {s}')"),
        ("os system", f"os.system('touch {s}')"),
        ("subprocess", f"subprocess.run(['touch', '{s}'])"),
        ("format string", "'{0.__class__.__mro__}'.format(1)"),
        ("pickle bytes", "cos\nsystem\n(S'id'\ntR."),
        ("latex input", "\\input{/etc/passwd}"),
        ("latex include", "\\include{/etc/shadow}"),
        ("latex write18", f"\\write18{{touch {s}}}"),
        ("latex immediate write18", f"\\immediate\\write18{{touch {s}}} 2"),
        ("latex def loop", "\\def\\x{\\x}\\x"),
        ("latex newcommand loop", "\\newcommand{\\a}{\\a\\a}\\a"),
        ("latex csname", "\\csname exec\\endcsname{1}"),
        ("latex catcode", "\\catcode`\\^=7 2^2"),
        ("operatorname exec", "\\operatorname{exec}(2)"),
        ("power tower", "9^9^9^9"),
        ("braced power tower", "9^{9^{9^{9}}}"),
        ("huge exponent", "10^{10^{10}}"),
        ("python power tower", "2**2**2**2**2**2"),
        ("long base and exponent", "9999999999^{9999999999}"),
        ("factorial tower", "1000000!!!!"),
        ("factorial of huge", "(10^{100})!"),
        ("symbolic expansion bomb", "(x+y+z+1)^{100000}"),
        ("expansion just under the size limit", "(a+b+c+d)^{400}"),
        ("trigonometric simplification", "\\sin^{300}(x)\\cos^{200}(y) + \\tan^{250}(x+y)"),
        ("deep parentheses", "(" * 10_000 + "1" + ")" * 10_000),
        ("deep braces", "{" * 10_000 + "2" + "}" * 10_000),
        ("deep sqrt", "\\sqrt{" * 5_000 + "2" + "}" * 5_000),
        ("deep frac", "\\frac{1}{" * 3_000 + "2" + "}" * 3_000),
        ("one megabyte sum", "1+" * 500_000 + "1"),
        ("one megabyte letters", "x" * 1_000_000),
        ("null bytes", "2\x00__import__('os')\x00"),
        ("only null bytes", "\x00" * 1000),
        ("lone surrogate", "2\ud800"),
        ("unicode lookalikes", "２\u2212１"),
        ("right-to-left override", "\u202e2+2"),
        ("huge float literal", "1e999999999"),
        ("long decimal", "0." + "9" * 100_000),
        ("division by zero", "\\frac{1}{0}"),
        ("boxed bomb", "\\boxed{" * 20_000),
        ("text bomb", "\\text{" * 20_000),
        ("spaces then a letter (the percent regex was cubic)", "1" + " " * 990 + "x"),
        ("spaces then half a percent word", "1" + " " * 990 + "percen"),
        ("spaces then half a unit", "1" + " " * 990 + "\\text{cm"),
        ("unclosed inline math", "\\(" * 400 + "$" * 100),
    ]
