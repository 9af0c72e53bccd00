"""Hostile inputs before anything runs: YAML bombs and oddities, every numeric config key out of range, misspelled
words and registry names, the CLI's option shortcuts, hostile data rows, and text holding pysbd's own markers.

Each is refused in one line (ConfigError / DataError naming the key or file:line) before any model loads; model
loaders are replaced by tripwires where a command would reach them.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo_lite.__main__ import main as cli_main
from fspo_lite.config import (CHOICES, NUMBER_RANGES, Config, ConfigError, load_config, numeric_keys,
                              validate_config)
from fspo_lite.data.examples import DataError, load_examples, read_rows
from fspo_lite.text import SEGMENTER_MARKERS, sentence_spans

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def one_line_error(capsys, argv) -> str:
    assert cli_main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------- YAML


def alias_bomb() -> str:
    """The "billion laughs" under a known key: 9 levels of 9 aliases each, 9^9 = 387 million strings once expanded
    (384 bytes); model.name expects a string, and the old error message printed the expanded list."""
    lines = ["model:", "  name:", '    - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        previous, current = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"    - &{current} [{','.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_in_one_short_line_without_expanding(tmp_path):
    """Before: 76 s, 2.1 GB on stderr and a MemoryError that printed the expanded value. In a child process with a
    60 s limit and a 2 GiB address space, so a regression fails instead of taking the machine."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb())
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            "from fspo_lite.__main__ import main; sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "train", "--config", str(bomb)], capture_output=True,
                            text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 1
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1 and len(err) < 300, err[:500]
    assert f"{bomb}:4:" in err and "aliases (*a) are not allowed" in err and "lol" not in err


@pytest.mark.parametrize("text, message", [
    ("train: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 20 levels"),
    ("train: " + "{a: " * 30 + "1" + "}" * 30 + "\n", "nested deeper than 20 levels"),
    ("train:\n  steps: 3\nmodel:\n  name: tiny\ntrain:\n  steps: 5\n", r":5:1: invalid YAML \(key 'train' appears twice "
                                                                      r"\(first on line 1\)"),
    ("train:\n  steps: 3\n  steps: 4\n", "key 'steps' appears twice"),
    ("base: &b {steps: 2}\ntrain: *b\n", r"aliases \(\*b\) are not allowed"),
    ("train:\n  <<: *x\n", "aliases"),
])
def test_yaml_oddities_are_one_line_naming_file_and_line(tmp_path, capsys, no_model_loads, text, message):
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    err = one_line_error(capsys, ["train", "--config", str(path)])
    assert re.search(message, err) and str(path) in err and len(err) < 300, err


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_an_empty_config_file_is_refused(tmp_path, text):
    """Before: an empty file ran with all defaults, as if the file had been forgotten."""
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="holds no settings .*leave out --config"):
        load_config(path)


def test_the_strict_loader_is_still_a_safe_loader(tmp_path):
    import yaml

    from fspo_lite.config import ConfigLoader, parse_yaml

    assert issubclass(ConfigLoader, yaml.SafeLoader)
    for text in ["train: !!python/object/apply:os.system ['true']", "train: !!python/name:os.system"]:
        with pytest.raises(yaml.YAMLError, match="could not determine a constructor"):
            parse_yaml(text)
    assert parse_yaml("train: {steps: 2, seed: 3}\nmodel: {name: tiny}") == {"train": {"steps": 2, "seed": 3},
                                                                               "model": {"name": "tiny"}}


def test_set_values_are_read_by_the_same_strict_loader():
    with pytest.raises(ConfigError, match=r"--set evaluation.benchmarks: the value is not valid YAML \(aliases"):
        load_config(None, ["evaluation.benchmarks=[&a kbqa, *a]"])
    with pytest.raises(ConfigError, match="nested deeper"):
        load_config(None, ["evaluation.benchmarks=" + "[" * 100 + "]" * 100])


def test_an_error_line_never_carries_a_huge_value():
    with pytest.raises(ConfigError) as error:
        load_config(None, ["model.name=" + "[" + ", ".join(["x"] * 100_000) + "]"])
    assert len(str(error.value)) < 300


# ---------------------------------------------------------------- every numeric key


def test_every_numeric_key_has_a_range_and_the_defaults_pass():
    keys = numeric_keys()
    assert len(keys) > 70 and set(keys) == set(NUMBER_RANGES)
    validate_config(Config())


HOSTILE_NUMBERS = [".nan", ".inf", "-.inf", "1e20", "-1e20", "-1", "1.0e+300"]


@pytest.mark.parametrize("key", sorted(numeric_keys()))
def test_every_numeric_key_refuses_non_finite_and_absurd_values(key):
    """Table-driven over every int/float field of the config dataclasses: NaN and infinities never pass; 1e20
    (absurd) never passes; -1 passes only where the key's range allows negative values."""
    integer, _ = numeric_keys()[key]
    bounds = NUMBER_RANGES[key]
    for raw in HOSTILE_NUMBERS:
        value = float(raw.replace(".nan", "nan").replace(".inf", "inf"))
        try:
            load_config(None, [f"{key}={raw}"])
        except ConfigError as error:
            assert str(error).startswith(f"{key}=") or f"'{key}'" in str(error) or key in str(error), str(error)
            assert len(str(error).splitlines()) == 1
            continue
        assert math.isfinite(value) and bounds.holds(value) and not (integer and not value.is_integer()), (key, raw)
        assert raw == "-1", (key, raw)  # only -1 may pass, and only on a key whose range holds it


@given(key=st.sampled_from(sorted(numeric_keys())),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**25, 10**25)))
@settings(max_examples=300, deadline=None)
def test_any_number_is_either_in_range_or_refused_by_name(key, value):
    config = Config()
    section, name = key.split(".")
    setattr(getattr(config, section), name, value)
    integer, _ = numeric_keys()[key]
    try:
        validate_config(config)
    except ConfigError as error:
        assert key in str(error)
        return
    assert NUMBER_RANGES[key].holds(value) and (not integer or isinstance(value, int))


@pytest.mark.parametrize("override, key", [  # the cases a hostile pass found running silently or failing late
    ("verifier.threshold=.nan", "verifier.threshold"),
    ("verifier.threshold=5", "verifier.threshold"),
    ("verifier.threshold=-0.1", "verifier.threshold"),
    ("reward.step_reward_lambda=.nan", "reward.step_reward_lambda"),
    ("rlfh.reward_clip=-1", "rlfh.reward_clip"),
    ("model.lora_alpha=0", "model.lora_alpha"),
    ("model.lora_r=0", "model.lora_r"),
    ("model.lora_dropout=1.5", "model.lora_dropout"),
    ("train.seed=1e20", "train.seed"),
    ("train.seed=-1", "train.seed"),
    ("evaluation.batch_size=0", "evaluation.batch_size"),
    ("evaluation.temperature=.nan", "evaluation.temperature"),
    ("rollout.vllm_gpu_memory_utilization=0", "rollout.vllm_gpu_memory_utilization"),
    ("caution.process_f1=2", "caution.process_f1"),
    ("rlfh.wrong_threshold=0.9", "rlfh.wrong_threshold"),
    ("evaluation.samples=3", "evaluation.samples"),
    ("model.dtype=int8", "model.dtype"),
    ("reward.answer_metric=bogus", "reward.answer_metric"),
    ("rollout.engine=vlm", "rollout.engine"),
    ("caution.variant=both_", "caution.variant"),
    ("rlfh.granularity=word", "rlfh.granularity"),
    ("reward.claim_extractor=gpt", "reward.claim_extractor"),
    ("evaluation.judge=human", "evaluation.judge"),
    ("model.backend=jax", "model.backend"),
    ("verifier.device=gpu0", "verifier.device"),
    ("evaluation.benchmarks=", "evaluation.benchmarks"),
])
def test_named_bad_values_are_refused(override, key):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=.* is out of range; valid: "):
        load_config(TINY, [override])


@pytest.mark.parametrize("override, message", [
    ("train.seed=" + "1" + "0" * 400, r"^train.seed=1000.*\(401 characters\) is out of range"),
    ("train.learning_rate=" + "1" + "0" * 400, r"^train.learning_rate=inf is out of range"),
    ("train.seed=" + "9" * 5000, r"the value is not valid YAML \(an integer with more digits than Python converts"),
])
def test_integers_beyond_float_and_beyond_the_digit_limit_are_one_line(override, message):
    """An integer over float's range made float() raise OverflowError; one over 4300 digits a bare ValueError."""
    with pytest.raises(ConfigError, match=message) as error:
        load_config(None, [override])
    assert len(str(error.value)) < 300


def test_word_choices_match_the_modules_that_read_them():
    from fspo_lite.rollout.engines import ROLLOUT_ENGINES
    from fspo_lite.evaluation.judges import JUDGES
    from fspo_lite.scoring.methods.caution import VARIANTS
    from fspo_lite.scoring.methods.rlfh import GRANULARITIES
    from fspo_lite.models.policy import BACKENDS

    # the modules read the config's one table (tests/test_config_tables.py: no word list is written twice)
    assert CHOICES["rollout.engine"] is ROLLOUT_ENGINES and CHOICES["evaluation.judge"] is JUDGES
    assert CHOICES["caution.variant"] is VARIANTS and CHOICES["rlfh.granularity"] is GRANULARITIES
    assert CHOICES["model.backend"] is BACKENDS


# ---------------------------------------------------------------- commands: before any model loads


@pytest.mark.parametrize("argv, message", [
    (["train", "--config", TINY, "--set", "reward.method=fpso"], "unknown reward.method 'fpso'"),
    (["train", "--config", TINY, "--set", "verifier.name=lexicon"], "unknown verifier.name 'lexicon'"),
    (["train", "--config", TINY, "--set", "model.lora_dropout=1.5"], "model.lora_dropout=1.5 is out of range"),
    (["eval", "--config", TINY, "--limit", "0"], "evaluation.limit=0 is out of range"),
    (["eval", "--config", TINY, "--limit", "-1"], "evaluation.limit=-1 is out of range"),
    (["eval", "--config", TINY, "--temperature", "nan"], "evaluation.temperature=nan is out of range"),
    (["eval", "--config", TINY, "--temperature", "inf"], "evaluation.temperature=inf is out of range"),
    (["eval", "--config", TINY, "--temperature", "-1"], "evaluation.temperature=-1.0 is out of range"),
    (["eval", "--config", TINY, "--samples", "0"], "evaluation.samples=0 is out of range"),
    (["eval", "--config", TINY, "--benchmarks", ""], "evaluation.benchmarks=[] is out of range"),
    (["eval", "--config", TINY, "--source", "kbqq=bundled:kbqa_test"], "no benchmark is called 'kbqq'"),
    (["eval", "--config", TINY, "--source", "kbqa="], "evaluation.sources.kbqa='': no data given"),
    (["eval", "--config", TINY, "--benchmarks", "kbqa", "--source", "kbqa=nowhere.jsonl"], "nowhere.jsonl"),
    (["filter", "--config", TINY, "--samples", "0"], "filter.samples=0 is out of range"),
    (["filter", "--config", TINY, "--top", "-2"], "filter.top=-2 is out of range"),
    (["klcf-checklist", "--config", TINY, "--samples", "-1"], "klcf.checklist_samples=-1 is out of range"),
])
def test_commands_refuse_bad_settings_in_one_line_before_any_model_loads(monkeypatch, capsys, no_model_loads,
                                                                        argv, message):
    monkeypatch.chdir(ROOT)
    err = one_line_error(capsys, argv)
    assert message in err, err


# ---------------------------------------------------------------- data rows


def test_a_lone_surrogate_is_refused_by_the_loader_naming_the_row(tmp_path):
    """Before: it passed the loader and crashed tokenization after the model loaded, when that row was sampled."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "fine", "answer": "yes"}\n{"question": "What is \\ud800?", "answer": "x"}\n')
    with pytest.raises(DataError, match=r"rows.jsonl:2: field 'question' holds a lone surrogate \(U\+D800 at "
                                        r"character 8\)"):
        load_examples(str(path))
    stats = {}
    assert [e.question for e in load_examples(str(path), skip_bad_rows=True, stats=stats)] == ["fine"]
    assert stats["skipped"] == 1
    for row in ['{"question": "q", "answer": "\\udfff"}', '{"question": "q", "answer": "a", "evidence": "\\ud83d"}',
                '{"question": "q", "answer": "a", "extra": {"note": ["\\udc00"]}}']:
        path.write_text(row + "\n")
        with pytest.raises(DataError, match="rows.jsonl:1: field .* holds a lone surrogate"):
            load_examples(str(path))
    path.write_text('{"question": "q", "mc1_targets": {"choices": ["a", "\\ud800"]}}\n')
    with pytest.raises(DataError, match=r"rows.jsonl:1: field 'mc1_targets.choices' holds a lone surrogate"):
        read_rows(str(path))


def test_an_empty_source_file_is_one_clear_line(tmp_path, capsys, no_model_loads, monkeypatch):
    """Before: "max() arg is an empty sequence" after the model had loaded."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.jsonl: the file holds no rows"):
        load_examples(str(empty))
    with pytest.raises(DataError, match="empty.jsonl: the file holds no rows"):
        read_rows(str(empty))
    monkeypatch.chdir(ROOT)
    err = one_line_error(capsys, ["eval", "--config", TINY, "--benchmarks", "kbqa", "--source", f"kbqa={empty}"])
    assert "empty.jsonl: the file holds no rows" in err


@pytest.mark.parametrize("field, size, limit", [("question", 1_000_000, "20,000"), ("answer", 50_000, "10,000"),
                                                ("evidence", 300_000, "200,000")])
def test_huge_fields_are_refused_naming_the_row(tmp_path, field, size, limit):
    """Before: a 50 MB question ran past 120 s (tokenized whole before the prompt was cut)."""
    row = {"question": "q", "answer": "a", field: "x" * size}
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=rf"huge.jsonl:1: field '{field}s?' has {size:,} characters; at most {limit}"):
        load_examples(str(path))


# ---------------------------------------------------------------- sentence splitting


def pysbd_characters() -> set[str]:
    """Every non-ASCII character in pysbd's source (its markers among them), plus '\\r' and '&' that its markers use."""
    import pysbd

    found = set()
    for folder, _, files in os.walk(os.path.dirname(pysbd.__file__)):
        for name in files:
            if name.endswith(".py"):
                found |= {c for c in Path(folder, name).read_text(encoding="utf-8") if ord(c) > 127}
    return found | {"\r", "&"}


def uncovered(text: str) -> list[int]:
    covered = [False] * len(text)
    for start, end in sentence_spans(text):
        covered[start:end] = [True] * (end - start)
    return [i for i, char in enumerate(text) if not char.isspace() and not covered[i]]


def test_the_marker_list_holds_every_symbol_pysbd_writes():
    """Each symbol of pysbd's source (Unicode category S*, or the Canadian syllabics and ȸ/ȹ it uses) is masked."""
    import unicodedata

    symbols = {c for c in pysbd_characters() if unicodedata.category(c).startswith("S") or "\u1400" <= c <= "\u167f"
               or c in "ȸȹƪ"} - set("«»°®²³µ")
    assert symbols <= set(SEGMENTER_MARKERS), sorted(symbols - set(SEGMENTER_MARKERS))


TEMPLATES = ["Paris is big{c}. It is old.", "It is {c}old. Dr. A{c} said so! Really? Yes.",
             "See 1. the {c} list 2. items. Then (a) x{c} (b) y.", "He said 'no{c}' and left. Ok{c}",
             "x &{c}& y. Next &{c}&.", "{c}{c}{c} A {c}? B{c}!"]


@pytest.mark.parametrize("char", sorted(pysbd_characters()))
def test_no_character_of_pysbd_drops_text_from_the_spans(char):
    """Before: 21 of these characters made pysbd drop 14-105 characters of these texts from every span."""
    for template in TEMPLATES:
        text = template.format(c=char)
        assert uncovered(text) == [], (text, uncovered(text))


@given(st.lists(st.one_of(st.sampled_from(sorted(pysbd_characters())), st.sampled_from([" ", ". ", "! ", "? ", "\n"]),
                          st.text(alphabet="abcXY1(). ", min_size=1, max_size=6)), max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_mix_of_markers_and_text_keeps_every_character_in_a_span(pieces):
    text = "".join(pieces)
    spans = sentence_spans(text)
    assert all(0 <= s < e <= len(text) for s, e in spans) and spans == sorted(spans)
    assert uncovered(text) == []
