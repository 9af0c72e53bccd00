"""Step time and peak GPU memory of GRPO/FSPO with 4-bit LoRA on random-weight Qwen2.5 architectures.

No weights can be downloaded on the benchmark machine, so each model is built from the published
Qwen2.5 architecture numbers with random weights (the same parameter count and vocabulary, hence the
same memory and compute per token), saved once, and loaded through the normal 4-bit path. The
tokenizer is SmolLM2's, padded with unused special tokens to Qwen's 151,936 ids so that every id the
random model samples decodes. A random model never writes EOS early, so every response runs to
max_new_tokens: a fixed, worst-case workload. Rewards are seeded random values (a random model only
earns format penalties), as in tests/test_trainer.py, so the update does real work.

Every configuration runs in its own process (clean peak-memory counters, one vLLM per process):

    python scripts/bench_gpu.py --models qwen2.5-0.5b qwen2.5-1.5b --methods grpo fspo --engines transformers vllm
    python scripts/bench_gpu.py --models qwen2-test --no-4bit --steps 1 --max-new-tokens 4   # CPU smoke run

One JSON line per configuration goes to stdout (and --out); docs/gpu.md explains the columns.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ARCHITECTURES = {
    # the published config.json values of Qwen/Qwen2.5-0.5B-Instruct and Qwen/Qwen2.5-1.5B-Instruct
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                         max_position_embeddings=32768),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                         max_position_embeddings=32768),
    # a toy of the same family for a CPU smoke run of this script
    "qwen2-test": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6,
                       max_position_embeddings=4096),
}


def build_random_model(name: str, cache: Path) -> Path:
    """Save a random-weight model of architecture `name` (bfloat16) with a padded tokenizer, once."""
    folder = cache / name
    if (folder / "config.json").exists():
        return folder
    from transformers import AutoModelForCausalLM, Qwen2Config

    from fspo_lite.models.policy import load_tokenizer

    values = ARCHITECTURES[name]
    tokenizer = load_tokenizer("tiny")
    tokenizer.add_tokens([f"<|unused{i}|>" for i in range(values["vocab_size"] - len(tokenizer))],
                         special_tokens=True)
    config = Qwen2Config(**values, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    staging = folder.with_name(folder.name + ".partial")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)
    return folder


def process_tree(pid: int) -> set[int]:
    """`pid` and every process below it (Linux /proc): vLLM runs its engine core in a child process."""
    found, stack = set(), [pid]
    while stack:
        current = stack.pop()
        found.add(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            stack += [int(child) for child in task.read_text().split()]
    return found


def held_gib(smi_csv: str, pids: set[int]) -> float:
    """GiB of GPU memory held by `pids`, from `nvidia-smi --query-compute-apps=pid,used_memory
    --format=csv,noheader,nounits` (one 'pid, MiB' line per process on a GPU)."""
    rows = [line.split(",") for line in smi_csv.strip().splitlines() if line.strip()]
    return sum(int(mib) for pid, mib in rows if int(pid) in pids) / 1024


def gpu_memory_held_gib() -> float | None:
    """GPU memory that this process and its children hold now (torch's cache and vLLM's share included), as the
    driver counts it; None without nvidia-smi. After the measured steps it compares trainers whose vLLM engine
    runs in the same process (TRL's colocate mode) with those where it runs in a child (fspo-lite's vllm.LLM)."""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return held_gib(smi.stdout, process_tree(os.getpid())) if smi.returncode == 0 else None


def questions(count: int = 64):
    from fspo_lite.data.examples import QAExample

    return [QAExample(f"b{i}", f"What is the atomic number of element number {i}?", [str(i)],
                      f"Element number {i} has atomic number {i}. It is a chemical element.") for i in range(1, count + 1)]


def run_one(args) -> dict:
    """Train warm-up + measured steps of one configuration in this process; return the figures."""
    from fspo_lite.update import trainer as trainer_module
    from fspo_lite.config import load_config

    folder = build_random_model(args.models[0], Path(args.cache))
    overrides = [
        f"model.name={folder}", f"model.load_in_4bit={not args.no_4bit}", f"model.dtype={args.dtype}",
        "model.lora=true", "model.lora_r=16",
        "model.lora_alpha=32", f"reward.method={args.methods[0]}", f"rollout.engine={args.engines[0]}",
        f"rollout.group_size={args.group_size}", f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.temperature=1.0", f"rollout.generation_batch_size={args.prompts * args.group_size}",
        "rollout.vllm_gpu_memory_utilization=0.3", "data.few_shot=0", "data.max_prompt_tokens=256",
        f"train.prompts_per_step={args.prompts}", f"train.micro_batch_size={args.micro_batch}",
        f"train.steps={args.steps + 1}", f"train.beta={args.beta}", "train.learning_rate=1e-5",
        f"train.output_dir={Path(args.cache) / 'runs' / args.models[0]}",
    ]
    config = load_config(REPO / "configs" / "tiny.yaml", overrides)
    real = trainer_module.score_rollouts
    generator = torch.Generator().manual_seed(0)

    def random_rewards(examples, *args, **kwargs):
        scored = real(examples, *args, **kwargs)
        scored.rewards = torch.rand(len(examples), generator=generator)
        if scored.sentence_mask is not None:
            scored.sentence_mask = torch.randint(-1, 2, scored.sentence_mask.shape, generator=generator).float()
        return scored

    trainer_module.score_rollouts = random_rewards
    cuda = torch.cuda.is_available()
    loaded_at = time.perf_counter()
    trainer = trainer_module.Trainer(config, train_examples=questions(), progress=False)
    load_time = time.perf_counter() - loaded_at
    rows = []
    for step in range(args.steps + 1):
        if cuda and step == 1:
            torch.cuda.reset_peak_memory_stats()  # the warm-up step (compilation, allocator growth) is excluded
        rows.append(trainer.train_step())
    measured = rows[1:]
    mean = lambda key: sum(r[key] for r in measured) / len(measured)  # noqa: E731
    from fspo_lite.models.policy import trainable_parameter_count

    trainable, total = trainable_parameter_count(trainer.model)
    return {
        "model": args.models[0], "method": args.methods[0], "engine": args.engines[0], "four_bit": not args.no_4bit,
        "dtype": "bfloat16" if not args.no_4bit and cuda else args.dtype,
        "group_size": args.group_size, "prompts_per_step": args.prompts, "max_new_tokens": args.max_new_tokens,
        "micro_batch_size": args.micro_batch, "beta": args.beta, "measured_steps": len(measured),
        "step_time_s": mean("step_time"), "generation_time_s": mean("generation_time"),
        "update_time_s": mean("update_time"), "completion_length": mean("completion_length"),
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "gpu_memory_held_gib": gpu_memory_held_gib() if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "load_time_s": load_time, "trainable_parameters": trainable, "stored_parameters": total,
        "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
    }


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The step's workload and the run options, shared with scripts/bench_gpu_trl.py (the same work on both sides)."""
    parser.add_argument("--steps", type=int, default=3, help="measured steps after one warm-up step")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "fspo_lite" / "bench"))
    parser.add_argument("--out", help="append the JSON lines to this file too")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # internal: run one configuration


def workload_arguments(args: argparse.Namespace) -> list[str]:
    """add_workload_arguments' values as command-line arguments for the process that runs one configuration."""
    return ["--steps", str(args.steps), "--prompts", str(args.prompts), "--group-size", str(args.group_size),
            "--max-new-tokens", str(args.max_new_tokens), "--micro-batch", str(args.micro_batch), "--beta",
            str(args.beta), "--cache", args.cache]


def report_one(result: dict) -> int:
    """Print one configuration's figures as the RESULT line run_in_own_process reads; exit status 0."""
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def run_in_own_process(script: str, arguments: list[str], label: dict, out: str | None) -> bool:
    """Run `script --one arguments` in a new process (clean peak-memory counters, one vLLM engine per process); print
    its result line and append it to `out`, or print `label` with the error. True when it gave a result."""
    result = subprocess.run([sys.executable, script, "--one", *arguments], capture_output=True, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines = [line[7:] for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode or not lines:
        print(json.dumps({**label, "error": (result.stderr or result.stdout)[-3000:]}))
        return False
    print(lines[0], flush=True)
    if out:
        with open(out, "a") as handle:
            handle.write(lines[0] + "\n")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b"], choices=sorted(ARCHITECTURES))
    parser.add_argument("--methods", nargs="+", default=["grpo", "fspo"], choices=["grpo", "fspo"])
    parser.add_argument("--engines", nargs="+", default=["transformers"], choices=["transformers", "vllm"])
    add_workload_arguments(parser)
    parser.add_argument("--no-4bit", action="store_true", help="plain weights in --dtype instead of 4-bit")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="model.dtype of the plain (--no-4bit) weights; a 4-bit base computes in bfloat16 on GPUs")
    args = parser.parse_args()
    if args.one:  # the process run_in_own_process started: one configuration
        return report_one(run_one(args))
    failed = 0
    for model in args.models:
        for engine in args.engines:
            for method in args.methods:
                arguments = ["--models", model, "--methods", method, "--engines", engine, *workload_arguments(args),
                             "--dtype", args.dtype] + (["--no-4bit"] if args.no_4bit else [])
                label = {"model": model, "method": method, "engine": engine}
                failed |= not run_in_own_process(__file__, arguments, label, args.out)
    return failed


if __name__ == "__main__":
    sys.exit(main())
