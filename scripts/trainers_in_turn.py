"""Several trainers one after another in one process, as notebook 03 runs them: each ends its engine before the next.

    python scripts/trainers_in_turn.py --engine vllm --trainers 3 --out runs/in-turn
    python scripts/trainers_in_turn.py --engine vllm --trainers 2 --config configs/colab_t4.yaml ...   # a CUDA GPU

Each trainer trains --steps steps inside `with Trainer(...)` (what `fspo_lite.drivers.runs.train_and_evaluate`
does). While it runs, the processes this one has started are listed (vLLM's engine core and its workers); once it
has closed, none of them may be left. Python's own helper processes (multiprocessing's resource tracker, which
lives as long as this process) are not engine processes and are reported apart. On a CUDA GPU the free memory is
read before the first trainer and after each close: a closed trainer must give back all but --memory-slack-gib.

One JSON object goes to stdout (and --out's in_turn.json): per trainer the engine processes seen while it ran, those
left after its close and the free GPU memory; ok and the problems. The exit status is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)

SMALL = ["rollout.max_new_tokens=8", "rollout.group_size=2", "train.prompts_per_step=1", "train.micro_batch_size=2",
         "train.save_every=0"]
"""One prompt, two short responses: the engine's start and end are what is tested, not the training."""
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
"""Processes Python starts once for the whole process (they end with it), not with an engine."""


def child_processes() -> list[dict]:
    """The live processes below this one (zombies, dead and waiting to be reaped, left out): pid and command."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append({"pid": child.pid, "command": " ".join(child.cmdline()).strip()[:200] or child.name()})
        except psutil.NoSuchProcess:
            continue
    return found


def engine_processes(children: list[dict], before: set[int]) -> list[dict]:
    """The processes of `children` started since `before` (a set of pids) that are not Python's own helpers."""
    return [c for c in children if c["pid"] not in before and not any(h in c["command"] for h in HELPERS)]


def leftovers_after(before: set[int], wait: float = 15.0) -> list[dict]:
    """The engine processes still alive after up to `wait` seconds (a process told to end may take a moment)."""
    deadline = time.monotonic() + wait
    while True:
        left = engine_processes(child_processes(), before)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def free_gpu_gib() -> float | None:
    """Free memory of the current CUDA device in GiB, None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    return free / 1024**3


def in_turn_problems(trainers: list[dict], free_before: float | None, slack_gib: float,
                     next_engine_gib: float | None = None) -> list[str]:
    """What the per-trainer records show wrong: engine processes left after a close, free GPU memory after a close
    more than `slack_gib` below the free memory before the first trainer, or (`next_engine_gib`: the share of the GPU
    the next engine asks, rollout.vllm_gpu_memory_utilization x the GPU's memory) too little free for the next engine
    to start, which vLLM refuses."""
    problems = []
    for index, record in enumerate(trainers[:-1], start=1):
        free = record.get("free_gpu_gib_after_close")
        if next_engine_gib is not None and free is not None and free < next_engine_gib:
            problems.append(f"trainer {index}: {free:.1f} GiB free after close, the next engine asks "
                            f"{next_engine_gib:.1f} GiB")
    for index, record in enumerate(trainers, start=1):
        if record["left_after_close"]:
            pids = ", ".join(str(c["pid"]) for c in record["left_after_close"])
            problems.append(f"trainer {index}: processes left after close: {pids}")
        free = record.get("free_gpu_gib_after_close")
        if free_before is not None and free is not None and free < free_before - slack_gib:
            problems.append(f"trainer {index}: {free:.1f} GiB free after close, {free_before:.1f} GiB before the first")
    return problems


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="vllm", choices=("vllm", "vllm-server", "transformers"))
    parser.add_argument("--config", default=str(REPO / "configs" / "smoke_smollm2.yaml"))
    parser.add_argument("--trainers", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--memory-slack-gib", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True, help="a folder for the runs (one subfolder each)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from fspo_lite.config import load_config
    from fspo_lite.update.trainer import Trainer

    before = {c["pid"] for c in child_processes()}
    free_before = free_gpu_gib()
    started = time.perf_counter()
    trainers = []
    for index in range(1, args.trainers + 1):
        config = load_config(args.config, [*SMALL, f"rollout.engine={args.engine}", f"train.steps={args.steps}",
                                           f"train.output_dir={args.out / f'trainer{index}'}", *args.overrides])
        with Trainer(config, progress=False) as trainer:
            rows = [trainer.train_step() for _ in range(args.steps)]
            during = engine_processes(child_processes(), before)
        trainers.append({"steps": len(rows), "engine_processes_while_running": len(during),
                         "left_after_close": leftovers_after(before), "free_gpu_gib_after_close": free_gpu_gib()})
    next_engine = None
    if free_before is not None and args.engine == "vllm":
        import torch

        next_engine = config.rollout.vllm_gpu_memory_utilization * torch.cuda.mem_get_info()[1] / 1024**3
    problems = in_turn_problems(trainers, free_before, args.memory_slack_gib, next_engine)
    result = {"engine": args.engine, "ok": not problems, "problems": problems, "trainers": trainers,
              "free_gpu_gib_before": free_before, "next_engine_gib": next_engine, "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "in_turn.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
