"""Several processes (GPUs or CPU workers) training one policy, through `accelerate`.

Launch with `accelerate launch --num_processes N -m fspo_lite train ...` on GPUs, or on a CPU-only machine with
`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N ...` (gloo); a plain
`python -m fspo_lite train` is the one-process case of the same code. The plan per step:

- every rank draws the same global list of prompts and keeps a contiguous shard of it, so all
  G responses of a prompt are generated and scored on one rank (group advantages stay local);
- the loss normaliser (tokens or sequences of the whole step) is summed over ranks, so one
  N-process step computes the gradient of exactly the single-process loss on the same batch;
- gradients are averaged by DDP (LoRA or full weights); sharded training (FSDP2) is `train.fsdp`
  under torchrun, in fspo_lite/update/fsdp.py, with the same interface;
- metrics are averaged over ranks (counts and throughput summed); only the main process writes
  metrics, samples and checkpoints.

The pure helpers (`shard_bounds`, `loss_normalisers`, `combine_metrics`) hold the arithmetic
and are tested on their own; `Distributed` wraps an `accelerate.Accelerator` around them.
"""

from __future__ import annotations

import contextlib
import os
from typing import Mapping

import torch

SUMMED_METRICS = ("verified_sentences", "tokens_per_second", "rlfh_statements", "rlfh_unlocated", "rlfh_unplaced")
"""Metrics that add up over ranks; every other number is averaged (but those in LARGEST_METRICS)."""
LARGEST_METRICS = ("sampler_logprob_gap_max",)
"""Metrics whose value over ranks is the largest rank's (a maximum stays a maximum)."""


def shard_bounds(count: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, end) of rank's contiguous share of `count` items; every rank gets the same number.

    Equal shares keep the number of micro-batches equal on every rank (DDP needs the same
    number of backward passes everywhere) and make per-rank means average to the global mean.
    """
    if count % world_size:
        raise ValueError(
            f"train.prompts_per_step={count} must be a multiple of the number of processes ({world_size}) "
            "so that every rank trains on the same number of prompts"
        )
    share = count // world_size
    return rank * share, (rank + 1) * share


def loss_normalisers(global_tokens: float, global_sequences: int, world_size: int) -> tuple[float, float]:
    """(tokens, sequences) to divide a rank's summed loss by, given the counts of the whole step.

    Data parallelism averages the ranks' gradients (a division by world_size), so each rank
    divides by global_count / world_size: the average of the ranks' gradients is then the
    gradient of sum(loss over the whole batch) / global_count, the single-process loss.
    """
    return global_tokens / world_size, global_sequences / world_size


def combine_metrics(per_rank: list[dict], summed: tuple[str, ...] = SUMMED_METRICS,
                    largest: tuple[str, ...] = LARGEST_METRICS) -> dict:
    """One metrics dict from every rank's: means of numbers (sums for `summed` keys, the maximum for `largest`
    ones); other values (strings, None) are taken from rank 0."""
    combined = dict(per_rank[0])
    for key, value in per_rank[0].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        values = [rank[key] for rank in per_rank]
        total = sum(values)
        combined[key] = total if key in summed else max(values) if key in largest else total / len(values)
        if isinstance(value, int) and key not in summed and all(v == value for v in values):
            combined[key] = value  # identical integers (step, skipped updates) stay integers
    return combined


CPU_LAUNCH = "ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N -m fspo_lite train ..."
MPI_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launch_problem(env: Mapping[str, str], joined_processes: int) -> str | None:
    """Why this launch would silently train in one process instead of several, or None.

    Two traps of accelerate 1.x on CPU-only machines: `accelerate launch --cpu --num_processes N`
    starts N processes only through MPI (without --mpirun_hostfile it runs one), and
    `--multi_gpu` without ACCELERATE_USE_CPU=1 starts N processes that never join a group.
    """
    started = int(env.get("WORLD_SIZE", "1"))
    if started > 1 and joined_processes == 1:
        return (f"{started} processes were started but accelerate did not join them into one group "
                f"(on a machine without GPUs set ACCELERATE_USE_CPU=1): {CPU_LAUNCH}")
    cpu = env.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true")
    if cpu and "MASTER_ADDR" in env and "WORLD_SIZE" not in env and not any(v in env for v in MPI_SIZE_VARIABLES):
        return ("`accelerate launch --cpu --num_processes N` starts several processes only through MPI "
                f"(--mpirun_hostfile); without it only one runs. On one machine use: {CPU_LAUNCH}")
    return None


class Distributed:
    """This process's place in the run and the few collectives the trainer needs.

    With one process every collective is the identity, so the single-process path runs the
    same lines. The accelerator is created lazily from the environment `accelerate launch`
    sets (process group over NCCL on GPUs, gloo with --cpu).
    """

    def __init__(self, accelerator=None):
        if accelerator is None:
            from accelerate import Accelerator

            accelerator = Accelerator()
        problem = launch_problem(os.environ, accelerator.num_processes)
        if problem:
            raise RuntimeError(problem)
        self.accelerator = accelerator
        self.rank = accelerator.process_index
        self.world_size = accelerator.num_processes
        self.is_main = accelerator.is_main_process
        self.device = accelerator.device

        from accelerate.utils import DistributedType

        plugin = getattr(accelerator.state, "deepspeed_plugin", None)
        if accelerator.distributed_type == DistributedType.FSDP or (plugin is not None and plugin.zero_stage == 3):
            raise RuntimeError("fspo_lite does not use accelerate's sharding (FSDP, ZeRO-3): set train.fsdp=true and "
                               "launch with torchrun (docs/gpu.md)")

    shards_weights = False
    """Every rank holds the whole model here (data parallelism); fspo_lite.update.fsdp.FSDPDistributed shards it."""

    def prepare(self, model, optimizer):
        """(model for the training forward/backward, optimizer): DDP/FSDP-wrapped when launched on
        several processes, placed on this rank's device. Keep using the unwrapped model for
        generation, the reference pass and saving (`unwrap`)."""
        return self.accelerator.prepare(model, optimizer)

    def prepare_frozen(self, model):
        """A frozen model (the KL reference) on this rank's device."""
        return model.to(self.device)

    def unwrap(self, model):
        return self.accelerator.unwrap_model(model)

    def shard(self, items: list) -> list:
        start, end = shard_bounds(len(items), self.world_size, self.rank)
        return items[start:end]

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum of a list of numbers over ranks."""
        if self.world_size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        return self.accelerator.reduce(tensor, reduction="sum").tolist()

    def gather_metrics(self, metrics: dict) -> dict:
        """The step's metrics over all ranks (see `combine_metrics`)."""
        if self.world_size == 1:
            return metrics
        from accelerate.utils import gather_object

        return combine_metrics(gather_object([metrics]))

    def backward_sync(self, model, sync: bool):
        """Context for one micro-batch's backward: gradient all-reduce only when `sync` (the last
        micro-batch of an optimizer step), so accumulation costs one all-reduce per step."""
        return contextlib.nullcontext() if sync or self.world_size == 1 else self.accelerator.no_sync(model)

    def clip_grad_norm(self, parameters, max_norm: float) -> float:
        norm = self.accelerator.clip_grad_norm_(parameters, max_norm)
        return float(norm)

    def generation_kwargs(self) -> dict:
        """Extra `generate` arguments: none with whole models on every rank (FSDPDistributed syncs ranks)."""
        return {}

    def full_state_dict(self, model):
        """None: the unwrapped model can save itself (FSDPDistributed gathers its shards here)."""
        return None

    def wait(self) -> None:
        self.accelerator.wait_for_everyone()
