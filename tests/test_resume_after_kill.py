"""A run killed with SIGKILL right after a checkpoint and resumed reproduces the uninterrupted run.

Both runs are real `fspo_lite train` processes on the tiny model (tests/resume_run.py gives them a
reward that varies, so advantages and updates are not zero). The uninterrupted run and the run to
be killed start together; the second is killed as soon as `checkpoints/latest` exists (written
only once a checkpoint is complete), then resumed in a new process. Every metric of every step
(timings aside), every logged sample and the final adapter weights must agree to 1e-5, and each
step must be logged exactly once.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fspo_lite.data.examples import QAExample, save_examples
from fspo_lite.logs.training_log import read_metrics

ROOT = Path(__file__).resolve().parents[1]
STEPS = 5
TIMING_KEYS = {"tokens_per_second", "generation_time", "reward_time", "update_time", "step_time"}


def start_run(output_dir: Path, data: Path, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable, str(ROOT / "tests" / "resume_run.py"), "train", "--config", str(ROOT / "configs" / "tiny.yaml"),
        "--set", f"train.output_dir={output_dir}", "--set", f"data.train={data}", "--set", f"train.steps={STEPS}",
        "--set", "train.save_every=1", "--set", "reward.method=fspo", "--set", "rollout.max_new_tokens=12",
        "--set", "train.learning_rate=0.01", *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    output_dir.mkdir(parents=True, exist_ok=True)
    log = open(output_dir.parent / f"{output_dir.name}.log", "a")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen, output_dir: Path) -> None:
    code = process.wait(timeout=600)
    assert code == 0, (output_dir.parent / f"{output_dir.name}.log").read_text()[-3000:]


def assert_close(a, b, where: str) -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None and math.isclose(a, b, rel_tol=0, abs_tol=1e-5), f"{where}: {a} != {b}"
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{index}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def adapter(output_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(output_dir / "checkpoints" / f"step-{STEPS:06d}" / "model" / "adapter_model.safetensors"))


@pytest.mark.long  # a minute of real-model work: make test-long (CI runs it after make test)
def test_sigkill_after_checkpoint_then_resume_matches_uninterrupted_run(tmp_path):
    data = tmp_path / "questions.jsonl"
    save_examples([QAExample(f"q{i}", f"What is fact number {i}?", [f"answer {i}"], f"Fact {i} is answer {i}.")
                   for i in range(7)], data)
    reference_dir, killed_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    reference = start_run(reference_dir, data)
    victim = start_run(killed_dir, data)
    pointer = killed_dir / "checkpoints" / "latest"
    deadline = time.monotonic() + 300
    while not pointer.exists():
        assert victim.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.005)
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    checkpoint_step = int(pointer.read_text().strip().split("-")[1])
    assert 1 <= checkpoint_step < STEPS, "the run finished before it could be killed"

    resumed = start_run(killed_dir, data, "--set", "train.resume=true")
    finish(resumed, killed_dir)
    finish(reference, reference_dir)
    assert f"(step {checkpoint_step})" in (tmp_path / "killed.log").read_text()

    expected, got = read_metrics(reference_dir), read_metrics(killed_dir)
    assert [row["step"] for row in got] == list(range(1, STEPS + 1))  # no step missing or duplicated
    assert [row["step"] for row in expected] == list(range(1, STEPS + 1))
    assert any(row["loss"] != 0 for row in expected) and len({row["reward_mean"] for row in expected}) > 1
    for want, have in zip(expected, got):
        assert want.keys() == have.keys()
        for key in want.keys() - TIMING_KEYS:
            assert_close(want[key], have[key], f"step {want['step']} {key}")

    def samples(folder):
        return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]

    expected_samples, got_samples = samples(reference_dir), samples(killed_dir)
    assert [s["step"] for s in got_samples] == list(range(1, STEPS + 1))
    for want, have in zip(expected_samples, got_samples):
        for key in want:
            assert_close(want[key], have[key], f"sample step {want['step']} {key}")

    expected_weights, got_weights = adapter(reference_dir), adapter(killed_dir)
    assert expected_weights.keys() == got_weights.keys()
    for name, tensor in expected_weights.items():
        assert (tensor - got_weights[name]).abs().max().item() <= 1e-5, name
    assert any(tensor.abs().sum() > 0 for name, tensor in expected_weights.items() if "lora_B" in name)


@pytest.mark.parametrize("torn", ['{"step": 3, "loss": 0.', '\x00\x00'])
def test_torn_last_line_is_dropped_on_resume(tmp_path, torn):
    """A run killed while appending a row leaves a torn line; readers skip it, resume removes it."""
    from fspo_lite.logs.training_log import MetricsLogger

    logger = MetricsLogger(tmp_path)
    for step in (1, 2, 3):
        logger.log({"step": step, "loss": float(step)})
    with open(logger.path, "a") as handle:
        handle.write(torn)
    assert [row["step"] for row in read_metrics(tmp_path)] == [1, 2, 3]
    logger.truncate_after(2)
    logger.log({"step": 3, "loss": 3.5})
    assert read_metrics(tmp_path) == [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 2.0}, {"step": 3, "loss": 3.5}]


def test_corrupt_middle_line_is_an_error(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{broken\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        read_metrics(tmp_path)


@pytest.mark.long  # a minute of real-model work: make test-long (CI runs it after make test)
def test_sigkill_before_any_checkpoint_then_resume_logs_each_step_once(tmp_path):
    """Killed in step 4 of 6 with no checkpoint yet (and a torn row on top): the resumed run starts
    over and metrics.jsonl / samples.jsonl hold steps 1..6 once each (they held 1,2,3,1,2,...,6)."""
    data = tmp_path / "questions.jsonl"
    save_examples([QAExample(f"q{i}", f"What is fact number {i}?", [f"answer {i}"], f"Fact {i} is answer {i}.")
                   for i in range(7)], data)
    run_dir = tmp_path / "run"
    steps = ("--set", "train.steps=6", "--set", "train.save_every=0")
    victim = start_run(run_dir, data, *steps)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        assert victim.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no third step within 300 s"
        time.sleep(0.005)
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    assert not (run_dir / "checkpoints" / "latest").exists()
    before = read_metrics(run_dir)[:3]
    with open(metrics, "a") as handle:
        handle.write('{"step": 4, "loss": 0.')  # a row torn by the kill
    finish(start_run(run_dir, data, *steps, "--set", "train.resume=true"), run_dir)
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [sample["step"] for sample in samples] == [1, 2, 3, 4, 5, 6]
    assert any(row["loss"] != 0 for row in rows)  # a reward that moves the weights
    for want, have in zip(before, rows):  # the restart reproduces the killed attempt's first steps
        for key in want.keys() - TIMING_KEYS:
            assert_close(want[key], have[key], f"step {want['step']} {key}")
