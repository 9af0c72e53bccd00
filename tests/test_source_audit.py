"""Security rules checked on the package source (its syntax trees, so comments and docstrings
do not count) and, for the grader, on a live process.

- nothing evaluates text: no eval/exec/compile/__import__ calls, no sympify/parse_expr/parse_latex;
- every torch.load passes weights_only=True; no pickle/marshal/unsafe yaml loading;
- weights are saved as safetensors; trust_remote_code is never switched on in code;
- no shell=True, no os.system;
- server addresses (http:// or https://) appear only in config.py, i.e. come from the config
  (allowed elsewhere: example addresses in error messages, Colab links in notebook_tools.py);
- the symbolic worker imports only the standard library and sympy, and the main process never
  imports sympy while grading.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fspo_lite"
SOURCES = sorted(PACKAGE.rglob("*.py"))
EVALUATING = {"eval", "exec", "compile", "__import__"}
STRING_PARSERS = {"sympify", "parse_expr", "parse_latex", "lambdify", "S"}
UNSAFE_LOADERS = {("pickle", "load"), ("pickle", "loads"), ("marshal", "load"), ("marshal", "loads"),
                  ("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"), ("dill", "load")}


def calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
            yield node, owner, name


def keyword(node: ast.Call, name: str):
    for item in node.keywords:
        if item.arg == name:
            return item.value.value if isinstance(item.value, ast.Constant) else "<expression>"
    return None


def docstring_nodes(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
        if isinstance(node, (ast.Module, ast.ClassDef)):  # attribute docstrings: a string after an assignment
            for before, after in zip(node.body, node.body[1:]):
                if isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(after, ast.Expr) \
                        and isinstance(after.value, ast.Constant):
                    found.add(id(after.value))
    return found


@pytest.fixture(scope="module")
def trees():
    return {path.relative_to(PACKAGE.parent).as_posix(): ast.parse(path.read_text(), str(path)) for path in SOURCES}


def test_the_audit_sees_the_package(trees):
    assert "fspo_lite/scoring/grading/equivalence.py" in trees and "fspo_lite/scoring/grading/symbolic_worker.py" in trees
    assert len(trees) >= 20


def test_nothing_evaluates_text(trees):
    found = [f"{path}:{node.lineno} {owner or ''}.{name}" for path, tree in trees.items()
             for node, owner, name in calls(tree)
             if (name in EVALUATING and (isinstance(node.func, ast.Name) or owner == "builtins"))
             or name in STRING_PARSERS]
    assert found == []


def test_loading_is_safe(trees):
    problems = []
    for path, tree in trees.items():
        for node, owner, name in calls(tree):
            if owner == "torch" and name == "load" and keyword(node, "weights_only") is not True:
                problems.append(f"{path}:{node.lineno} torch.load without weights_only=True")
            if (owner, name) in UNSAFE_LOADERS:
                problems.append(f"{path}:{node.lineno} {owner}.{name}")
            if name == "save_pretrained" and "tokenizer" not in ast.unparse(node.func.value) \
                    and keyword(node, "safe_serialization") is not True:
                problems.append(f"{path}:{node.lineno} save_pretrained without safe_serialization=True")
            if keyword(node, "trust_remote_code") is True:
                problems.append(f"{path}:{node.lineno} trust_remote_code=True")
            if keyword(node, "shell") is True or (owner == "os" and name in ("system", "popen")):
                problems.append(f"{path}:{node.lineno} shell command")
    assert problems == []


def test_trust_remote_code_is_off_by_default():
    from fspo_lite.config import Config
    from fspo_lite.models.policy import load_tokenizer

    assert Config().model.trust_remote_code is False
    import inspect

    assert inspect.signature(load_tokenizer).parameters["trust_remote_code"].default is False


URLS_ALLOWED = {
    "fspo_lite/config.py": "the defaults of server addresses: this is where they belong",
    "fspo_lite/drivers/notebook_tools.py": "Colab badge and links written into notebooks, never contacted",
    "fspo_lite/models/cuda_stack.py": "PyTorch's wheel index in the install lines a refusal prints, never contacted",
}
ADDRESS_KEYWORDS = {"base_url", "api_base", "url", "endpoint", "server_url", "host"}


def is_url(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        "http://" in node.value or "https://" in node.value)


def test_server_addresses_come_only_from_config(trees):
    found = []
    for path, tree in trees.items():
        if path == "fspo_lite/config.py":
            continue
        skip = docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise):  # an example address in an error message is not contacted
                skip |= {id(inner) for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if is_url(node) and id(node) not in skip and path not in URLS_ALLOWED:
                found.append(f"{path}:{node.lineno} {node.value[:60]!r}")
        for node, _, _ in calls(tree):  # nowhere may a client be pointed at a literal address
            for item in node.keywords:
                if item.arg in ADDRESS_KEYWORDS and any(is_url(n) for n in ast.walk(item.value)):
                    found.append(f"{path}:{node.lineno} {item.arg}=<literal address>")
    assert found == []


def test_symbolic_worker_imports_only_stdlib_and_sympy(trees):
    imported = set()
    for node in ast.walk(trees["fspo_lite/scoring/grading/symbolic_worker.py"]):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0] if node.level == 0 else "<relative>")
    assert imported <= {"json", "logging", "re", "signal", "sys", "resource", "sympy", "math_verify"}, imported
    others = [path for path, tree in trees.items() if path != "fspo_lite/scoring/grading/symbolic_worker.py" and any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "sympy" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "sympy") for n in ast.walk(tree))]
    assert others == []


def test_grading_never_loads_sympy_in_the_main_process():
    code = (  # the package's __init__ is replaced by an empty package: it imports torch, which grading never needs
        "import sys, types\n"
        f"package = types.ModuleType('fspo_lite'); package.__path__ = [{str(PACKAGE)!r}]\n"
        "sys.modules['fspo_lite'] = package\n"
        "from fspo_lite.scoring.grading import math_answers_equal\n"
        "assert 'torch' not in sys.modules\n"
        "assert math_answers_equal('2\\\\sqrt{2}', '\\\\sqrt{8}')\n"
        "assert not math_answers_equal('(x+1)^2', 'x^2+1')\n"
        "print('sympy loaded' if 'sympy' in sys.modules else 'sympy absent')\n"
    )
    root = PACKAGE.parent
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "sympy absent"
