"""Reliability hardening (issue 18): no hang, no false equality, no duplicated row, no raw traceback.

Hang tests run the code in a child process with a time limit, so a regression fails the test
instead of hanging the suite (a big-integer power in C cannot be interrupted by a signal).
"""

import copy
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from fspo_lite import algos
from fspo_lite.__main__ import main as cli_main
from fspo_lite.update.checkpoint import CheckpointError, verify_checkpoint
from fspo_lite.config import ConfigError, load_config
from fspo_lite.data.examples import DataError, QAExample, load_examples
from fspo_lite.update.distributed import loss_normalisers
from fspo_lite.update.trainer import Trainer
from fspo_lite.data.training_set import load_training_examples

from fspo_lite.scoring.grading import (
    TOO_LARGE, Quantity, is_malformed, math_answers_equal, quantities_equal, read_quantity,
)
from fspo_lite.scoring.grading.latex_math import ParseError, decimal_value, parse_math
from fspo_lite.text import mask_for_segmenter, sentence_spans
from grading_pairs import EQUAL_PAIRS, UNEQUAL_PAIRS, labelled_pairs

ROOT = Path(__file__).resolve().parents[1]


def run_child(code: str, timeout: float) -> dict:
    """Run `code` in a fresh interpreter (this checkout on the path); it prints one JSON line."""
    env_path = str(ROOT)
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout,
            env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child process did not finish within {timeout} s (a hang)")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- 1. hangs

HUGE_NUMBERS = [
    (r"\frac{1e999999999}{1}", "1"), (r"\frac{1}{1e-999999999}", "1"), (r"\frac{1e10000000}{7}", "1"),
    ("1e999999999", "1e999999998"), ("10^{999999999}", "1"), (r"1.5\times10^{99999999}", "1"),
    ("1" + "0" * 5000, "1"), (r"12{,}000e99999999", "1"), ("2^{2^{2^{2^{2}}}}", "1"),
    ("-1E-0000000000000999999999", "0"), ("9" * 60 + "e400", "1"),
]


def test_huge_numbers_are_graded_quickly_in_the_main_process():
    """Each call under 2 s (the old parser built 10**999999999: never returned)."""
    result = run_child(f"""
        import json, time
        from fspo_lite.scoring.grading import math_answers_equal
        from fspo_lite.scoring.grading import outcome_reward
        from fspo_lite.data.examples import QAExample
        slowest, verdicts = 0.0, []
        for a, b in {HUGE_NUMBERS!r}:
            for x, y in ((a, b), (b, a)):
                start = time.perf_counter()
                verdicts.append(math_answers_equal(x, y, symbolic=False))
                slowest = max(slowest, time.perf_counter() - start)
        example = QAExample(id="h", question="q", answers=["1"], task="math")
        start = time.perf_counter()
        outcome_reward(example, "<think>t</think> <answer>\\\\frac{{1e100000000}}{{1}}</answer>")
        slowest = max(slowest, time.perf_counter() - start)
        print(json.dumps({{"slowest": slowest, "verdicts": verdicts}}))
    """, timeout=60)
    assert result["slowest"] < 2.0
    assert not any(result["verdicts"])


def test_exponents_are_checked_before_any_power_is_built():
    assert decimal_value("1.5e-3") == pytest.approx(0.0015)
    assert decimal_value("1e400") == 10**400
    for text in ("1e401", "1e999999999", "1e-0999999999999999999999", "1e" + "9" * 10_000):
        with pytest.raises(ParseError, match="exponent"):
            decimal_value(text)
    assert read_quantity("1e999999999").value is TOO_LARGE
    assert not quantities_equal(Quantity(TOO_LARGE), Quantity(TOO_LARGE))
    assert math_answers_equal("1e999999999", "1e999999999")  # the same string is still the same answer
    assert parse_math("1e3") == ["num", 1000, 1]
    assert parse_math("3e") == ["mul", ["num", 3, 1], ["sym", "e"]]


PYSBD_TRAPS = [
    "See ref.[" + "1" * 40,
    "See ref.[" + "1" * 40 + "] then more.",
    "See ref.[" + "11," * 40 + " then",
    "See ref.[" + "1 " * 60,
    "See ref.[" + "12 - " * 30 + "x",
    "Text.[1][" + "123" * 20 + " more",
    "<think>See ref.[" + "1" * 34 + "</think> <answer>Paris</answer>",
]


def test_sentence_splitting_never_hangs_on_reference_brackets():
    """The class of inputs that made pysbd backtrack exponentially (long digit runs after '[',
    with or without separators): every call under 2 s in a child process."""
    result = run_child(f"""
        import json, time
        from fspo_lite.text import sentence_spans
        from fspo_lite.text import reasoning_sentences
        slowest = 0.0
        for text in {PYSBD_TRAPS!r}:
            for function in (sentence_spans, reasoning_sentences):
                start = time.perf_counter()
                function(text)
                slowest = max(slowest, time.perf_counter() - start)
        print(json.dumps({{"slowest": slowest}}))
    """, timeout=60)
    assert result["slowest"] < 2.0


def test_masking_keeps_real_references_and_the_text_length():
    for text in ("Shown before.[12] Next one.", "As in ref.[1, 2, 5-7] This holds."):
        assert mask_for_segmenter(text) == text
    trap = "See ref.[" + "1" * 30
    masked = mask_for_segmenter(trap)
    assert len(masked) == len(trap) and masked == trap.replace("[", " ")
    spans = sentence_spans(trap)
    assert spans and all(0 <= a < b <= len(trap) for a, b in spans)
    assert sentence_spans("Shown before.[12] Next one.") == [(0, 17), (18, 27)]


# ---------------------------------------------------------------- 2. false / missed equalities


@pytest.fixture(scope="module")
def warm_worker():
    from fspo_lite.scoring.grading.symbolic import default_checker

    assert default_checker().equivalent(["num", 1, 1], ["num", 1, 1]) is True


def test_hand_labelled_table_is_graded_right_in_both_directions(warm_worker):
    """>= 40 equal and >= 40 unequal pairs, each graded both ways (the old code: 126/176)."""
    assert len(EQUAL_PAIRS) >= 40 and len(UNEQUAL_PAIRS) >= 40
    wrong = [(a, b, equal) for a, b, equal in labelled_pairs() if math_answers_equal(a, b) is not equal]
    assert wrong == []


def test_quantity_reader_by_hand():
    assert read_quantity(r"12{,}000") == Quantity(12000)
    assert read_quantity(r"\$1,234.50") == Quantity(Fraction(246900, 200), unit="dollar")  # the sign is a unit
    assert read_quantity("-$5") == Quantity(-5, unit="dollar")
    assert read_quantity("$5$") == Quantity(5)  # math delimiters, not a currency
    assert read_quantity("1 000") == Quantity(1000) and read_quantity("1 00") is None
    assert read_quantity(r"25\%") == Quantity(25, percent=True)
    assert read_quantity(r"10\text{ cm}^2") == Quantity(10, unit="cm^2")
    assert read_quantity("3 hours") == Quantity(3, unit="hour")
    assert read_quantity(r"2\frac{1}{2}") == Quantity(Fraction(5, 2))
    assert read_quantity(r"2\frac{3}{2}") is None  # not a mixed number: left to the symbolic check
    assert read_quantity("10m") is None  # a bare letter is a variable, not a unit
    assert read_quantity("x10^3") is None and read_quantity("2x10^3") == Quantity(2000)
    assert read_quantity("1,2") is None  # a list, not a thousands separator
    assert read_quantity(r"1.5 \cdot 10^{-2}") == Quantity(Fraction(3, 200))


@pytest.mark.parametrize("text", ["1/0", r"\frac{3}{0}", "2/0.0", "1/(0)", r"\frac{x}{00}", "5/-0"])
def test_division_by_zero_is_malformed(text):
    assert is_malformed(text)
    assert not math_answers_equal(text, text)


@pytest.mark.parametrize("text", ["1/2", "x/0.5", "1/05", "a/b", "10/(x)", "1/0x"])
def test_ordinary_divisions_are_not_malformed(text):
    assert not is_malformed(text)


def test_tolerance_is_relative_to_magnitude(warm_worker):
    assert not math_answers_equal("10^{-50}", "0")
    assert not math_answers_equal(r"\sqrt{2} + 10^{-45}", r"\sqrt{2}")
    assert not math_answers_equal(r"\pi \cdot 10^{-60}", "0")
    assert math_answers_equal(r"\sin(\pi/12)", r"\frac{\sqrt{6}-\sqrt{2}}{4}")  # a true identity still holds


# ---------------------------------------------------------------- 4. checkpoint integrity

TRAIN_EXAMPLES = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
                  QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]


def tiny_config(tmp_path, *overrides):
    return load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={tmp_path}", *overrides])


@pytest.mark.parametrize("name, damage", [
    ("model/adapter_model.safetensors", "flip"),  # same size, weights silently off before
    ("rng.pt", "random"),  # was: IndexError: pop from empty list
    ("trainer_state.json", "random"),  # was: a bare JSONDecodeError
    ("optimizer.pt", "flip"),
])
def test_same_size_corruption_is_one_clear_error_naming_the_file(tmp_path, tiny_policy, name, damage):
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    trainer = Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, TRAIN_EXAMPLES, progress=False)
    trainer.step_index = 1
    path = trainer.save()
    manifest = json.loads((path / "manifest.json").read_text())
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    file = path / name
    data = bytearray(file.read_bytes())
    if damage == "flip":
        middle = len(data) // 2
        data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    else:
        data = bytearray(os.urandom(len(data)))
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"corrupt: {name} does not match its SHA-256"):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, TRAIN_EXAMPLES, progress=False)


def test_manifests_with_sizes_only_are_refused(tmp_path, tiny_policy):
    """A manifest cut to sizes cannot vouch for the bytes: with 8 flipped weight bytes it loaded, and the run failed
    later with "probability tensor contains inf/nan". (Until this change size-only manifests were accepted.)"""
    model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
    trainer = Trainer(tiny_config(tmp_path, "train.steps=1"), model, tokenizer, TRAIN_EXAMPLES, progress=False)
    trainer.step_index = 1
    path = trainer.save()
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"] = {name: entry["size"] for name, entry in manifest["files"].items()}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="gives no size and SHA-256 for"):
        verify_checkpoint(path)
    with pytest.raises(CheckpointError, match="cannot vouch for the file"):
        Trainer(tiny_config(tmp_path, "train.resume=true"), model, tokenizer, TRAIN_EXAMPLES, progress=False)


# ---------------------------------------------------------------- 5. bad data, bad settings, loss edge cases


def test_nan_is_a_missing_value(tmp_path):
    """pandas writes a missing value as NaN (the TruthfulQA release has "source": NaN): it reads as null, so an
    unused field does not stop the load and a NaN answer is a missing answer."""
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "good", "answer": "yes", "source": NaN}\n{"question": "q", "answer": NaN}\n')
    with pytest.raises(DataError, match="rows.jsonl:2: no answer field"):
        load_examples(str(path))
    assert [e.question for e in load_examples(str(path), skip_bad_rows=True)] == ["good"]


@pytest.mark.parametrize("line, problem", [
    ("[" * 100_000, "nested too deeply"),
    ('{"question": "q", "answer": ' + "7" * 5000 + "}", "digit"),
    ('{"question": "q", "answer": Infinity}', "Infinity is not a valid JSON number"),
    ('{"question": "q", "answer": 1e400}', "out of range"),
    ('{"question": "q", "answer": "unterminated}', r"\(Invalid control character at column 43\)"),
    ('{"question": "q", "answer": }', r"\(Expecting value at column 29\)"),
])
def test_bad_rows_are_data_errors_or_skipped(tmp_path, line, problem):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"question": "good", "answer": "yes"}\n' + line + "\n")
    with pytest.raises(DataError, match=f"rows.jsonl:2: broken JSON.*{problem}"):
        load_examples(str(path))
    stats = {}
    assert [e.question for e in load_examples(str(path), skip_bad_rows=True, stats=stats)] == ["good"]
    assert stats["skipped"] == 1


def test_bom_folder_and_empty_file(tmp_path):
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + b'{"question": "first", "answer": "1"}\n')
    assert [e.question for e in load_examples(str(bom), skip_bad_rows=True)] == ["first"]
    folder = tmp_path / "x.jsonl"
    folder.mkdir()
    with pytest.raises(DataError, match="x.jsonl' is a folder"):
        load_examples(str(folder), skip_bad_rows=True)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.jsonl: the file holds no rows"):  # before: "no training examples", after the whole mixture
        load_training_examples(load_config(None, [f"data.train={empty}"]))


@pytest.mark.parametrize("override, key", [
    ("train.learning_rate=.inf", "train.learning_rate"),
    ("train.max_grad_norm=.nan", "train.max_grad_norm"),
    ("train.max_grad_norm=-1", "train.max_grad_norm"),
    ("train.steps=-3", "train.steps"),
    ("train.steps=0", "train.steps"),
    ("rollout.group_size=1", "rollout.group_size"),
    ("data.limit=-1", "data.limit"),
    ("data.limit=0", "data.limit"),
    ("train.epsilon_low=5", "train.epsilon_low"),
    ("train.max_bad_steps=0", "train.max_bad_steps"),
    ("train.entropy_coef=-0.1", "train.entropy_coef"),
    ("filter.band=[0.8]", "filter.band"),
    ("rollout.top_p=0", "rollout.top_p"),
])
def test_out_of_range_settings_are_refused(override, key):
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=.* is out of range; valid: "):
        load_config(str(ROOT / "configs" / "tiny.yaml"), [override])


def test_rlfh_may_use_single_responses():
    assert load_config(None, ["reward.method=rlfh", "rollout.group_size=1"]).rollout.group_size == 1


def test_huge_log_ratio_on_a_masked_token_gives_a_finite_loss_and_gradient():
    """log pi - log pi_old = 100 (float32): exp overflows to inf; 0 * inf made the loss NaN."""
    logp = torch.tensor([[0.0, 100.0]], requires_grad=True)
    old = torch.zeros(1, 2)
    mask = torch.tensor([[1.0, 0.0]])
    token_loss, _ = algos.clipped_surrogate(logp, old, torch.tensor([[1.0]]))
    loss = algos.aggregate_loss(token_loss, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)  # the one real token: -A * ratio = -1 * 1
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 1].item() == 0.0
    # unmasked, the ratio is clamped at exp(20): -A * min(exp(20), 1.2) = -1.2 (clipped side), finite
    token_loss, _ = algos.clipped_surrogate(logp.detach(), old, torch.tensor([[1.0]]))
    assert token_loss[0, 1].item() == pytest.approx(-1.2)


def test_loss_normaliser_is_not_floored_at_one():
    """2 ranks, 1 completion token in the step: each rank divides by 1/2 (global tokens / world size);
    the gradient average over ranks must equal the 1-process loss -1.0 (the floor at 1 gave -0.5)."""
    tokens, sequences = loss_normalisers(global_tokens=1.0, global_sequences=2, world_size=2)
    assert (tokens, sequences) == (0.5, 1.0)
    rank0 = algos.aggregate_loss(torch.tensor([[-1.0]]), torch.tensor([[1.0]]), total_tokens=tokens)
    rank1 = algos.aggregate_loss(torch.tensor([[5.0]]), torch.tensor([[0.0]]), total_tokens=tokens)
    assert (rank0.item() + rank1.item()) / 2 == pytest.approx(-1.0)
    assert algos.aggregate_loss(torch.tensor([[-1.0]]), torch.tensor([[1.0]])).item() == pytest.approx(-1.0)
    assert algos.aggregate_loss(torch.tensor([[3.0]]), torch.tensor([[0.0]]), total_tokens=0).item() == 0.0


# ---------------------------------------------------------------- 7. entropy bonus


def test_entropy_bonus_by_hand():
    """logits (0, ln 3): p = (1/4, 3/4), H = ln 4 - (3/4) ln 3 = 0.562335; dH/dz_i = -p_i (ln p_i + H)."""
    logits = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)
    entropy = algos.entropy_from_logits(logits)
    expected = math.log(4) - 0.75 * math.log(3)
    assert entropy.item() == pytest.approx(expected, abs=1e-6)
    loss = algos.entropy_bonus(torch.tensor([[1.0]]), entropy[0].unsqueeze(0)[0], 0.1).sum()
    assert loss.item() == pytest.approx(1.0 - 0.1 * expected, abs=1e-6)
    loss.backward()
    p = (0.25, 0.75)
    gradient = [-0.1 * -p[i] * (math.log(p[i]) + expected) for i in range(2)]  # d(-0.1 H)/dz_i
    assert logits.grad[0, 0].tolist() == pytest.approx(gradient, abs=1e-6)
    assert algos.entropy_bonus(torch.tensor([[1.0]]), torch.tensor([[9.0]]), 0.0).item() == 1.0


def test_entropy_coef_subtracts_coef_times_the_mean_entropy_from_the_loss(tmp_path, tiny_policy):
    """Same seed, same weights, same rollout: loss(coef) - loss(0) = -coef x the logged mean entropy."""
    losses = {}
    for coef in (0.0, 0.5):
        model, tokenizer = copy.deepcopy(tiny_policy[0]), tiny_policy[1]
        config = tiny_config(tmp_path / str(coef), "train.steps=1", f"train.entropy_coef={coef}",
                             "rollout.max_new_tokens=8", "train.prompts_per_step=1", "rollout.group_size=2")
        row = Trainer(config, model, tokenizer, TRAIN_EXAMPLES, progress=False).train()[0]
        losses[coef] = row
    assert losses[0.5]["entropy"] == pytest.approx(losses[0.0]["entropy"], rel=1e-5)
    assert losses[0.5]["loss"] - losses[0.0]["loss"] == pytest.approx(-0.5 * losses[0.0]["entropy"], rel=1e-4)


# ---------------------------------------------------------------- 6. command-line errors


@pytest.mark.parametrize("argv, message", [
    (["train", "--config", "missing.yaml"], "missing.yaml: no such config file"),
    (["train", "--config", "configs/tiny.yaml", "--set", "train.steps=-3"], "train.steps=-3 is out of range"),
    (["train", "--config", "configs/tiny.yaml", "--set", "rollout.group_size=1"], "rollout.group_size=1"),
    (["train", "--config", "configs/tiny.yaml", "--set", "train.nope=1"], "unknown config key 'train.nope'"),
    (["filter", "--config", "configs/tiny.yaml", "--band", "0.8"], "--band=[0.8] is out of range"),
    (["filter", "--config", "configs/tiny.yaml", "--band", "0.9,0.1"], "LOW <= HIGH"),
    (["train", "--config", "configs/tiny.yaml", "--set", "data.train=nowhere.jsonl"], "nowhere.jsonl"),
])
def test_user_errors_are_one_line_without_traceback(monkeypatch, capsys, no_model_loads, argv, message):
    monkeypatch.chdir(ROOT)
    assert cli_main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_yaml_errors_name_the_file_and_line(tmp_path, capsys, no_model_loads):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: 2\n  lr: [1, 2\n")
    assert cli_main(["train", "--config", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert f"{bad}:" in err and "invalid YAML" in err and len(err.splitlines()) == 1


def test_debug_shows_the_traceback(no_model_loads):
    with pytest.raises(ConfigError):
        cli_main(["train", "--config", "missing.yaml", "--debug"])
