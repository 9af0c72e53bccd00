"""The package's import graph, checked statically (the `ast` of every module; nothing is imported).

Both module-level and function-level (lazy) imports are edges: a lazy import still ties two
modules together, it only hides the tie until the function runs. The checks:

- no import cycle (each one is reported as a chain of imports with their lines);
- no private name (`_x`) imported from, or read off, another module of the package;
- no import that climbs back up a layer: `LAYERS` lists the architecture, lowest layer first, and a
  module may import its own layer and the layers below it;
- every module belongs to a layer, and modules over `MAX_LINES` lines are the listed exceptions.

`python -m pytest -q -s tests/test_architecture.py` also prints the module line counts and the
lazy internal imports. The checker itself is tested on small throw-away packages, so each rule is
seen to fail.

One check imports the package: the FSPO path (rollout -> verdicts -> mask -> flip -> loss), stated as
the list of functions a reader follows, must read in at most five files, each function called by an
earlier one on the path (no hop through a file the list leaves out).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "fspo_lite"

LAYERS: list[tuple[str, list[str]]] = [
    # lowest first; a name is a module or a package (all of its modules but those listed elsewhere). The stages
    # are folders: data -> rollout -> scoring -> update, with logs below the update that writes them.
    ("core: the config (its schema, loading and checks), the pure math and text functions, memory given back, the "
     "machine's description, JSON lines, run-folder locks, atomic writes, progress bars",
     ["config", "config_load", "config_checks", "algos", "text", "stats", "memory", "machine", "jsonl", "run_lock",
      "atomic", "progress"]),
    ("data: examples, the data folder, the training set, prompts, gold labels", ["data"]),
    ("models: the policy and the reference log-prob pass", ["models"]),
    ("rollout: prompts in, sampled completions out (the reference transformers engine)", ["rollout"]),
    ("scoring: grading, verification, rewards, advantages", ["scoring"]),
    ("speed: the fast rollout engine and log-prob pass behind the two seams, and the factories that pick them",
     ["speed"]),
    ("logs: a run's metrics and samples", ["logs"]),
    ("update: the training loop, checkpoints, processes, sharding", ["update"]),
    ("evaluation", ["evaluation"]),
    ("experiment drivers, tools and CLI", ["", "__main__", "drivers", "scoring.verifiers.cli"]),
]
"""The architecture, one way from data to metrics ("" is the package's __init__, the public facade)."""

MAX_LINES = 400
OVER_LIMIT: dict[str, str] = {}
"""Modules allowed over MAX_LINES, with the reason (a new module over the limit fails the test)."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    names: tuple[str, ...]
    lazy: bool
    """Inside a function (or class body) rather than at module level."""

    def where(self, root: Path) -> str:
        return f"{module_path(self.source, root)}:{self.line}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(name: str, root: Path) -> str:
    path = root / Path(*name.split("."))
    return (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).relative_to(root).as_posix()


def parse_package(root: Path, package: str) -> dict[str, ast.Module]:
    """{dotted module name: syntax tree} for every .py file of `root/package`."""
    return {module_name(path, root): ast.parse(path.read_text(encoding="utf-8"), str(path))
            for path in sorted((root / package).rglob("*.py"))}


def _is_package(name: str, root: Path) -> bool:
    return (root / Path(*name.split("."))).is_dir()


def _scoped_nodes(tree: ast.AST):
    """(node, lazy) for every node, lazy when it sits inside a function or class."""
    stack = [(child, False) for child in ast.iter_child_nodes(tree)]
    while stack:
        node, lazy = stack.pop()
        yield node, lazy
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def import_graph(trees: dict[str, ast.Module], root: Path, package: str):
    """(edges, private uses): internal imports, and private names taken from another module.

    `from .x import name` is an edge to x.name when that is a module, else to x; a private use is
    `from x import _name` or `module._name` on a name bound to an internal module."""
    edges, private = [], []
    for source, tree in trees.items():
        here = source if _is_package(source, root) else source.rpartition(".")[0]
        bound = {}  # local name -> internal module it is bound to
        for node, lazy in _scoped_nodes(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == package or alias.name.startswith(package + "."):
                        edges.append(Edge(source, alias.name, node.lineno, (), lazy))
                        if alias.asname:
                            bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not (target == package or target.startswith(package + ".")):
                    continue
                for alias in node.names:
                    submodule = f"{target}.{alias.name}"
                    if submodule in trees:
                        edges.append(Edge(source, submodule, node.lineno, (), lazy))
                        bound[alias.asname or alias.name] = submodule
                        continue
                    edges.append(Edge(source, target, node.lineno, (alias.name,), lazy))
                    if _private(alias.name) and target != source:
                        private.append((source, node.lineno, f"from {target} import {alias.name}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound \
                    and _private(node.attr) and bound[node.value.id] != source:
                private.append((source, node.lineno, f"{bound[node.value.id]}.{node.attr}"))
    return edges, private


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def cycles(edges: list[Edge]) -> list[list[Edge]]:
    """One shortest cycle through each strongly connected group of modules (Tarjan), as a chain of edges."""
    graph = defaultdict(dict)
    for edge in edges:
        if edge.source != edge.target:
            graph[edge.source].setdefault(edge.target, edge)
    index, low, on_stack, stack, groups, counter = {}, {}, set(), [], [], [0]

    def visit(node):  # recursion depth is bounded by the number of modules
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(list(graph)):
        if node not in index:
            visit(node)
    found = []
    for group in groups:
        start = min(group)
        paths, seen, queue = {start: []}, {start}, [start]
        while queue:  # breadth first from start back to start, inside the group
            node = queue.pop(0)
            for target, edge in sorted(graph[node].items()):
                if target == start:
                    found.append(paths[node] + [edge])
                    queue = []
                    break
                if target in group and target not in seen:
                    seen.add(target)
                    paths[target] = paths[node] + [edge]
                    queue.append(target)
    return found


def layer_of(module: str, package: str, layers=LAYERS) -> int | None:
    """Index of the layer whose longest listed name is `module` or a package holding it."""
    best, best_length = None, -1
    for number, (_, names) in enumerate(layers):
        for name in names:
            full = f"{package}.{name}" if name else package
            matches = module == full or (name and module.startswith(full + "."))
            if matches and len(full) > best_length:
                best, best_length = number, len(full)
    return best


def upward_imports(edges: list[Edge], package: str, layers=LAYERS) -> list[Edge]:
    return [edge for edge in edges
            if layer_of(edge.target, package, layers) is not None and layer_of(edge.source, package, layers) is not None
            and layer_of(edge.target, package, layers) > layer_of(edge.source, package, layers)]


def describe_cycle(chain: list[Edge], root: Path) -> str:
    return " -> ".join([chain[0].source] + [f"{edge.target} ({edge.where(root)})" for edge in chain])


def describe_edge(edge: Edge, root: Path, package: str, layers=LAYERS) -> str:
    source, target = layer_of(edge.source, package, layers), layer_of(edge.target, package, layers)
    names = f" ({', '.join(edge.names)})" if edge.names else ""
    return (f"{edge.where(root)}: {edge.source} [{layers[source][0]}] imports {edge.target}{names} "
            f"[{layers[target][0]}]{' lazily' if edge.lazy else ''}")


# --- the package ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def package():
    trees = parse_package(ROOT, PACKAGE)
    edges, private = import_graph(trees, ROOT, PACKAGE)
    return trees, edges, private


def test_the_graph_sees_the_package(package):
    trees, edges, _ = package
    assert len(trees) >= 40 and len(edges) >= 100
    assert any(edge.source == "fspo_lite.update.trainer" and edge.target == "fspo_lite.algos" for edge in edges)
    assert any(edge.lazy for edge in edges)


def test_no_import_cycle(package):
    _, edges, _ = package
    found = [describe_cycle(chain, ROOT) for chain in cycles(edges)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_private_name_across_modules(package):
    _, _, private = package
    found = [f"{module_path(source, ROOT)}:{line}: {what}" for source, line, what in private]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_every_module_has_a_layer(package):
    trees, _, _ = package
    assert [name for name in trees if layer_of(name, PACKAGE) is None] == []


def test_no_import_climbs_a_layer(package):
    _, edges, _ = package
    found = [describe_edge(edge, ROOT, PACKAGE) for edge in upward_imports(edges, PACKAGE)]
    assert not found, "imports that climb back up a layer:\n" + "\n".join(found)


def test_the_speed_wing_sits_above_the_stages_it_speeds_up(package):
    """Nothing of data, models, rollout or scoring imports fspo_lite.speed: the reference path runs without it, and
    speed.mode=off runs no speed code (a judge model scores through the log-prob seam it is given)."""
    _, edges, _ = package
    speed = layer_of(f"{PACKAGE}.speed", PACKAGE)
    assert speed > layer_of(f"{PACKAGE}.scoring.verifiers.likelihood", PACKAGE) > layer_of(f"{PACKAGE}.rollout",
                                                                                             PACKAGE)
    below = [describe_edge(edge, ROOT, PACKAGE) for edge in edges if edge.target.startswith(f"{PACKAGE}.speed")
             and layer_of(edge.source, PACKAGE) < speed]
    assert below == []
    leak = Edge(f"{PACKAGE}.scoring.verifiers.likelihood", f"{PACKAGE}.speed.logprobs", 1, (), False)
    assert upward_imports([leak], PACKAGE) == [leak]  # such an import is refused


def test_module_sizes(package):
    trees, edges, _ = package
    lines = {name: len((ROOT / module_path(name, ROOT)).read_text(encoding="utf-8").splitlines()) for name in trees}
    print(f"\n{'lines':>6}  module (layer)")
    for name, count in sorted(lines.items(), key=lambda item: -item[1]):
        print(f"{count:6d}  {name} ({LAYERS[layer_of(name, PACKAGE)][0]}){'  > limit' if count > MAX_LINES else ''}")
    lazy = sorted({(edge.source, edge.target) for edge in edges if edge.lazy})
    print(f"{len(lazy)} lazy internal imports:", ", ".join(f"{s} -> {t}" for s, t in lazy))
    over = sorted(name for name, count in lines.items() if count > MAX_LINES and name not in OVER_LIMIT)
    assert over == [], f"modules over {MAX_LINES} lines: {over} (split them, or list a data table in OVER_LIMIT)"


# --- the FSPO path --------------------------------------------------------------------------------

FSPO_PATH: list[str] = [
    "fspo_lite.update.trainer:Trainer.train_step",  # one step
    "fspo_lite.update.trainer:Trainer.rollout",
    "fspo_lite.rollout.transformers_rollout:TransformersRollout.generate",  # rollout: G responses per prompt
    "fspo_lite.scoring.rewards:score_rollouts",  # scoring, in the order of the run's scoring plan
    "fspo_lite.scoring.verdicts:response_views",
    "fspo_lite.scoring.verdicts:verify_sentences",  # verdicts: the verifier's label on each reasoning sentence
    "fspo_lite.scoring.verdicts:sentence_mask",  # mask: +1 / -1 / 0 per completion token
    "fspo_lite.scoring.rewards:advantages_from_scores",
    "fspo_lite.algos:token_advantages",
    "fspo_lite.algos:fspo_flip",  # flip
    "fspo_lite.update.trainer:Trainer.update",
    "fspo_lite.algos:clipped_surrogate",  # loss
    "fspo_lite.algos:aggregate_loss",
]
"""The FSPO path (rollout -> verdicts -> mask -> flip -> loss), in reading order, as "module:qualified name"."""

MAX_PATH_FILES = 5


def resolve(name: str):
    """The function (or method) named "module:qualified.name", imported."""
    import importlib

    module, _, qualified = name.partition(":")
    target = importlib.import_module(module)
    for part in qualified.split("."):
        target = getattr(target, part)
    return target


def path_files(path: list[str]) -> list[str]:
    """The distinct source files of a path's functions, in order of first appearance."""
    import inspect

    files = [Path(inspect.getsourcefile(inspect.unwrap(resolve(name)))).resolve().relative_to(ROOT).as_posix()
             for name in path]
    return list(dict.fromkeys(files))


def called_names(function) -> set[str]:
    """The names a function calls: `f(...)`, `x.f(...)` and `self.f(...)` all give "f"."""
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(function))))
    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))}


def unreached(path: list[str]) -> list[str]:
    """The path's functions (after the first) that no earlier function on the path calls: a hop the path hides."""
    return [name for index, name in enumerate(path[1:], 1)
            if not any(name.partition(":")[2].rpartition(".")[2] in called_names(resolve(earlier))
                       for earlier in path[:index])]


def test_the_fspo_path_reads_in_at_most_five_files():
    files = path_files(FSPO_PATH)
    assert len(files) <= MAX_PATH_FILES, f"the FSPO path spans {len(files)} files: {files}"
    assert unreached(FSPO_PATH) == [], "functions on the FSPO path that no earlier one calls"


HARDWARE_WORDS = ("GenuineIntel", "AuthenticAMD", "cpu_vendor", "mallopt", "malloc", "os.environ", "getenv",
                  "TRANSFORMERS_SDPA", "MKL", "_mkl", "fused_lora", "prompt_cache", "llama_step", "allocator",
                  "keep_freed_memory")
"""What no file of the FSPO path may name: a CPU vendor, an allocator, an environment variable, or one of the speed
wing's modules (the trainer reaches those only through `fspo_lite.speed`'s factories)."""


def hardware_words(text: str) -> list[str]:
    return [word for word in HARDWARE_WORDS if word in text]


def test_the_fspo_path_names_no_hardware_trick(package):
    _, edges, _ = package
    files = path_files(FSPO_PATH)
    found = {name: hardware_words((ROOT / name).read_text(encoding="utf-8")) for name in files}
    assert {name: words for name, words in found.items() if words} == {}
    speed = sorted({edge.target for edge in edges if edge.source in {module_name(ROOT / f, ROOT) for f in files}
                    and edge.target.startswith(f"{PACKAGE}.speed")})
    assert speed == [f"{PACKAGE}.speed"]  # the factories of the package itself, none of its modules
    assert hardware_words("x = os.environ['A']  # mallopt") == ["mallopt", "os.environ"]  # the check can fail


def test_the_path_checker_fails_on_a_longer_or_broken_path():
    longer = [*FSPO_PATH[:4], "fspo_lite.scoring.plan:scoring_plan", *FSPO_PATH[4:]]
    assert len(path_files(longer)) == MAX_PATH_FILES + 1
    assert "fspo_lite/scoring/plan.py" in path_files(longer)
    assert unreached(["fspo_lite.algos:token_advantages", "fspo_lite.scoring.verdicts:sentence_mask"]) == \
        ["fspo_lite.scoring.verdicts:sentence_mask"]
    assert unreached(["fspo_lite.algos:token_advantages", "fspo_lite.algos:fspo_flip"]) == []


# --- the checker, on throw-away packages ------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    trees = parse_package(tmp_path, "pkg")
    return trees, *import_graph(trees, tmp_path, "pkg")


def test_checker_finds_cycles_through_lazy_imports(tmp_path):
    trees, edges, _ = _package(tmp_path, {
        "__init__.py": "", "a.py": "from .b import f\n", "c.py": "import os\n",
        "b.py": "def f():\n    from . import a\n    from .sub.d import g\n",
        "sub/__init__.py": "", "sub/d.py": "from ..c import x\n",
    })
    found = cycles(edges)
    assert [[(e.source, e.target, e.lazy) for e in chain] for chain in found] == \
        [[("pkg.a", "pkg.b", False), ("pkg.b", "pkg.a", True)]]
    assert "pkg/b.py:2" in describe_cycle(found[0], tmp_path)
    assert ("pkg.sub.d", "pkg.c") in {(e.source, e.target) for e in edges}
    assert cycles([e for e in edges if not e.lazy]) == []


def test_checker_finds_private_names(tmp_path):
    _, _, private = _package(tmp_path, {
        "__init__.py": "__version__ = '1'\n",
        "a.py": "def _helper():\n    pass\n\ndef public():\n    return _helper()\n",
        "b.py": "from .a import _helper, public\nfrom . import a\nfrom . import __version__\nx = a._helper\ny = a.public\n",
        "c.py": "import pkg.a as m\nfrom os import _exit\nz = m._helper\n",
    })
    assert sorted((source, line) for source, line, _ in private) == [("pkg.b", 1), ("pkg.b", 4), ("pkg.c", 3)]


def test_checker_finds_imports_that_climb(tmp_path):
    layers = [("low", ["", "a"]), ("high", ["b", "sub"]), ("top", ["sub.d"])]
    trees, edges, _ = _package(tmp_path, {
        "__init__.py": "", "a.py": "def f():\n    from .sub import e\n", "b.py": "from .a import f\n",
        "sub/__init__.py": "", "sub/e.py": "from ..b import f\nfrom .d import g\n", "sub/d.py": "from .e import h\n",
    })
    assert layer_of("pkg.sub.d", "pkg", layers) == 2 and layer_of("pkg.sub.e", "pkg", layers) == 1
    assert layer_of("pkg", "pkg", layers) == 0 and layer_of("pkg.other", "pkg", layers) is None
    found = {(e.source, e.target) for e in upward_imports(edges, "pkg", layers)}
    assert found == {("pkg.a", "pkg.sub.e"), ("pkg.sub.e", "pkg.sub.d")}
