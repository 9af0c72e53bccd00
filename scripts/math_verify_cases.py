"""Rebuild tests/math_verify_cases.json from Math-Verify's tests/test_all.py (its compare-strings cases).

    python scripts/math_verify_cases.py PATH/TO/Math-Verify/tests/test_all.py COMMIT > tests/math_verify_cases.json

The file's parametrize lists are read with `ast` (literals; the one f-string case is formatted with `math`
only), together with the options each test passes to its `compare_strings` helper (match types, rounding
precision, allow_set_relation_comp). The output is data: gold, prediction, the verdict Math-Verify's suite
expects, and those options, with the licence notice of the file they come from.
"""

from __future__ import annotations

import ast
import json
import math
import sys

NOTICE = """MIT License

Copyright (c) 2024 The HuggingFace Team

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE."""


def _value(node):
    """A literal, or an f-string whose fields are math.<function>(literal) with a literal format (nothing is
    evaluated: the function is looked up in `math` by name)."""
    if isinstance(node, ast.List):
        return [_value(item) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(item) for item in node.elts)
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(part.value)
                continue
            call = part.value
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and getattr(call.func.value, "id", "") == "math"):
                raise ValueError(f"unsupported f-string field: {ast.dump(call)}")
            number = getattr(math, call.func.attr)(*(ast.literal_eval(a) for a in call.args))
            parts.append(format(number, _value(part.format_spec) if part.format_spec else ""))
        return "".join(parts)
    return ast.literal_eval(node)


def cases(source: str) -> list[dict]:
    rows = []
    for function in ast.parse(source).body:
        if not isinstance(function, ast.FunctionDef):
            continue
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "compare_strings"]
        if not calls:
            continue
        call = calls[-1]
        options = {k.arg: _value(k.value) for k in call.keywords if not isinstance(k.value, ast.Name)}
        base = {"match_types": options.get("match_types", ["latex", "expr"]), "precision": options.get("precision", 6),
                "allow_set_relation_comp": options.get("allow_set_relation_comp", False)}
        decorators = [d for d in function.decorator_list if isinstance(d, ast.Call)]
        if not decorators:  # a literal assertion: compare_strings(gold, pred, ...) == 1
            gold, prediction = (_value(a) for a in call.args[:2])
            compare = next(n for n in ast.walk(function) if isinstance(n, ast.Compare) and n.left is call)
            rows.append({"test": function.name, "gold": gold, "prediction": prediction,
                         "expected": bool(_value(compare.comparators[0])), **base})
            continue
        names = [name.strip() for name in _value(decorators[0].args[0]).split(",")]
        for values in _value(decorators[0].args[1]):
            row = dict(zip(names, values))
            options = {**base, **{k: row[k] for k in ("precision", "allow_set_relation_comp") if k in row}}
            rows.append({"test": function.name, "gold": row["gold"], "prediction": row["pred"],
                         "expected": bool(row["expected"]), **options})
    return rows


def main() -> int:
    path, commit = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as handle:
        rows = cases(handle.read())
    document = {
        "source": "huggingface/Math-Verify, tests/test_all.py (the compare-strings cases)",
        "commit": commit,
        "licence": NOTICE,
        "fields": "gold, prediction, expected (Math-Verify's verdict), and the options its test passed",
        "cases": rows,
    }
    json.dump(document, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
