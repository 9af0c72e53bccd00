"""Each config key is described once: its range or its words are given where its field is (fspo_lite/config.py,
`ranged` and `one_of`), and every table, check and error message of the package reads them from there
(`NUMBER_RANGES`, `CHOICES`); and whether a Config is valid does not depend on which modules were imported.

The package's source is read as Python (ast), so a second statement of a key's range or words anywhere in it, in a
table or inline, fails here naming where it is.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from fspo_lite.config import CHOICES, NUMBER_RANGES, Config, ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fspo_lite"
RANGE_NAMES = {"Range", "COUNT", "INDEX", "SHARE", "WEIGHT", "NONNEGATIVE", "TIMEOUT", "SEED"}
"""The range type of fspo_lite.config_checks and its named ranges: a table value built from one states a range."""
FIELD_MAKERS = {"ranged", "one_of"}
"""The field functions that state what a key accepts where its field is."""


def section_classes() -> dict[str, str]:
    """Section class name -> section name ('RolloutConfig' -> 'rollout')."""
    return {cls.__name__: name for name, cls in typing.get_type_hints(Config).items()}


def config_keys() -> set[str]:
    sections = typing.get_type_hints(Config)
    return {f"{section.name}.{name.name}" for section in dataclasses.fields(Config)
            for name in dataclasses.fields(sections[section.name])}


def words(node: ast.AST) -> frozenset[str] | None:
    """The strings of a tuple, list or set literal, or of a one_of(...) call, of at least two string constants."""
    elements = node.args if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "one_of" else \
        node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
    if len(elements) >= 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elements):
        return frozenset(e.value for e in elements)
    return None


def describes(node: ast.AST) -> bool:
    """Whether a table value states a key's valid values: a range (Range(...), COUNT, ...) or a word list."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        node = ast.Name(node.attr)
    return (isinstance(node, ast.Name) and node.id in RANGE_NAMES) or (
        isinstance(node, (ast.Tuple, ast.List)) and bool(node.elts)
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts))


def package_sources(package: Path = PACKAGE):
    for path in sorted(package.rglob("*.py")):
        yield path.relative_to(package.parent).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def key_descriptions(sources) -> dict[str, list[str]]:
    """Config key -> where its range or words are stated ('file:line'): a section's field made by `ranged` or
    `one_of`, or a dict literal mapping the key to a range or a word list."""
    keys, sections, found = config_keys(), section_classes(), {}
    for where, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in sections:
                for line in node.body:
                    if (isinstance(line, ast.AnnAssign) and isinstance(line.value, ast.Call)
                            and getattr(line.value.func, "id", None) in FIELD_MAKERS):
                        found.setdefault(f"{sections[node.name]}.{line.target.id}", []).append(f"{where}:{line.lineno}")
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value in keys and describes(value):
                        found.setdefault(key.value, []).append(f"{where}:{key.lineno}")
    return found


def word_copies(sources) -> dict[str, list[str]]:
    """Config key -> where a literal (or a one_of call) holds exactly its words, in any order, in the package."""
    keys_of = {frozenset(choices): key for key, choices in CHOICES.items()}
    found = {}
    for where, tree in sources:
        for node in ast.walk(tree):
            key = keys_of.get(words(node))
            if key:
                found.setdefault(key, []).append(f"{where}:{node.lineno}")
    return found


def test_each_key_has_its_range_or_words_stated_once_where_its_field_is():
    found = key_descriptions(package_sources())
    twice = {key: places for key, places in found.items() if len(places) > 1}
    assert not twice, f"a key's range or words stated twice (state it on its field; read NUMBER_RANGES or CHOICES " \
                      f"elsewhere): {twice}"
    assert set(found) == set(NUMBER_RANGES) | set(CHOICES)
    assert {places[0].split(":")[0] for places in found.values()} == {"fspo_lite/config.py"}


def test_each_word_list_is_written_once():
    """The words of a key appear once in the package: on its field, or (train.loss_aggregation) in fspo_lite.algos,
    whose loss computes them and which the field reads."""
    found = word_copies(package_sources())
    assert set(found) == {key for key, choices in CHOICES.items() if len(choices) > 1}  # one word: no list to copy
    twice = {key: places for key, places in found.items() if len(places) > 1}
    assert not twice, f"a key's words written more than once (read fspo_lite.config.CHOICES instead): {twice}"
    assert found["train.loss_aggregation"][0].startswith("fspo_lite/algos.py:")
    assert found["rollout.engine"][0].startswith("fspo_lite/config.py:")


def test_the_scans_find_a_second_copy(tmp_path):
    """The two scans catch what they guard against: a module beside the schema holding copies of two keys' ranges
    and of one key's words (in another order)."""
    package = tmp_path / "fspo_lite"
    package.mkdir()
    (package / "config.py").write_text((PACKAGE / "config.py").read_text(encoding="utf-8"))
    (package / "copy.py").write_text('LIMITS = {"train.steps": COUNT, "rollout.top_p": Range(0, 1)}\n'
                                     'ENGINES = ("vllm-server", "transformers", "vllm")\n'
                                     'SLIDERS = {"rollout.temperature": (0.0, 2.0, 0.1)}\n')
    found = key_descriptions(package_sources(package))
    assert found["train.steps"][1:] == ["fspo_lite/copy.py:1"] and found["rollout.top_p"][1:] == ["fspo_lite/copy.py:1"]
    assert [place.split(":")[0] for place in found["rollout.temperature"]] == ["fspo_lite/config.py"]  # a slider's
    # span is the playground's layout, not a statement of what the key accepts
    assert [place.split(":")[0] for place in word_copies(package_sources(package))["rollout.engine"]] == \
        ["fspo_lite/config.py", "fspo_lite/copy.py"]


def test_the_modules_acting_on_a_word_read_the_config_table():
    from fspo_lite.algos import LOSS_AGGREGATIONS
    from fspo_lite.drivers import playground
    from fspo_lite.evaluation.judges import JUDGES
    from fspo_lite.models.policy import BACKENDS
    from fspo_lite.rollout.decoding import DRAWS
    from fspo_lite.rollout.engines import ROLLOUT_ENGINES
    from fspo_lite.scoring.methods.caution import VARIANTS
    from fspo_lite.scoring.methods.rlfh import GRANULARITIES

    for key, table in [("rollout.engine", ROLLOUT_ENGINES), ("evaluation.judge", JUDGES), ("model.backend", BACKENDS),
                       ("caution.variant", VARIANTS), ("rlfh.granularity", GRANULARITIES), ("rollout.draw", DRAWS),
                       ("rlfh.granularity", playground.CHOICES["rlfh.granularity"])]:
        assert table is CHOICES[key], key
    assert CHOICES["train.loss_aggregation"] == LOSS_AGGREGATIONS  # the field reads the words the loss computes
    assert playground.CHOICES["caution.variant"] == ("both", "fact", "caution")
    for key, (low, high, _) in playground.KNOBS.items():  # a slider's span: the playground's own, inside the range
        assert NUMBER_RANGES[key].holds(low) and NUMBER_RANGES[key].holds(high), key


BAD_VALUES = [("train.steps", 0), ("rollout.group_size", 1), ("rollout.engine", "vlm"), ("rollout.draw", "gumbel"),
              ("caution.variant", "both_"), ("train.loss_aggregation", "sum"), ("model.backend", "jax"),
              ("evaluation.judge", "human"), ("reward.method", "fspo2"), ("reward.method", "rlfh+fspo"),
              ("verifier.name", "lexicall"), ("train.seed", -1)]


def refusals() -> list[str]:
    lines = []
    for key, value in BAD_VALUES:
        try:
            load_config(overrides={key: value})
            lines.append(f"accepted {key}={value!r}")
        except ConfigError as error:
            lines.append(str(error))
    return lines


def test_a_config_is_valid_or_not_whatever_was_imported():
    """A fresh process with every layer above the config made unimportable (data, rollout, scoring, evaluation,
    models, speed, update, drivers, logs, and the package's __init__, which imports them) refuses the same values
    in the same words as this process, which has imported all of them; and the defaults pass in both."""
    from fspo_lite.drivers import experiment, playground  # noqa: F401  (everything above the config, imported)

    layers = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    assert {"rollout", "scoring", "speed", "drivers"} <= set(layers)
    code = (f"import sys, types\npackage = types.ModuleType('fspo_lite'); package.__path__ = [{str(PACKAGE)!r}]\n"
            "sys.modules['fspo_lite'] = package\n"
            f"for layer in {layers!r}:\n    sys.modules['fspo_lite.' + layer] = None\n"
            f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
            "from test_config_tables import refusals\nfrom fspo_lite.config import Config\nConfig()\n"
            "print('\\n'.join(refusals()))\n"
            "print(sorted(name for name in sys.modules if name.startswith('fspo_lite.') and sys.modules[name]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines = out.stdout.splitlines()
    assert lines[:-1] == refusals(), out.stdout + out.stderr
    assert not any(line.startswith("accepted") for line in lines)
    assert lines[-1] == "['fspo_lite.algos', 'fspo_lite.config', 'fspo_lite.config_checks', 'fspo_lite.config_load']"


@pytest.mark.parametrize("key, value", BAD_VALUES[:8])
def test_a_refusal_is_one_line_naming_the_key(key, value):
    with pytest.raises(ConfigError) as error:
        Config(**{key.split(".")[0]: {key.split(".")[1]: value}})
    assert len(str(error.value).splitlines()) == 1 and str(error.value).startswith(f"{key}={value!r} is out of range")
