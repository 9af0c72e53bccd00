"""Sharded training with torch FSDP2 (`fully_shard`) over the launcher's process group, the same on CPUs and GPUs.

Launch with torchrun (`train.fsdp: true`):

    torchrun --nproc_per_node N -m fspo_lite train --config ... --set train.fsdp=true

The process group is gloo on a CPU and NCCL on GPUs (one GPU per process, LOCAL_RANK). `fully_shard`
goes on every decoder layer and then on the causal LM as the root (not on a peft wrapper: the root must
own the embedding, or `generate` mixes plain tensors and DTensors). Every parameter, gradient and
optimizer state is then split over the ranks (LoRA matrices too, by rows); each forward pass all-gathers
a layer's weights and frees them after it, and gradients are reduce-scattered (averaged). On GPUs float32 weights
compute in the dtype of fspo_lite.models.precision (bfloat16 where native, else float16 with the trainer's loss
scaling), gradients reduced in float32; on a CPU everything is float32.
4-bit bases are not sharded (bitsandbytes' packed weights are not DTensors): QLoRA runs data-parallel.

`FSDPDistributed` has the interface of `fspo_lite.update.distributed.Distributed` (rank, collectives,
`prepare`, ...), so the trainer runs the same lines; generation uses `synced_gpus` (every rank keeps
stepping until all are done, since each forward pass needs every rank). Checkpoints hold both the
gathered weights (loadable in one process, as any other checkpoint) and, in `sharded/`, the sharded
model and optimizer state written by every rank with `torch.distributed.checkpoint` plus each rank's
RNG state, from which `train.resume` continues exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch

from fspo_lite.models.precision import fsdp_compute_dtype
from fspo_lite.update.checkpoint import rng_state, set_rng_state, verify_checkpoint
from fspo_lite.update.distributed import combine_metrics, shard_bounds

SHARDED_DIR = "sharded"
"""The folder of a checkpoint holding the torch.distributed.checkpoint files and per-rank RNG states."""
LAUNCH = "torchrun --nproc_per_node N -m fspo_lite train --config ... --set train.fsdp=true"


def causal_lm(model):
    """The transformers causal LM inside a peft model (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model) -> list[torch.nn.Module]:
    """The transformer blocks of a causal LM: the ModuleList `model.layers` of Llama/Qwen/Mistral-style models."""
    inner = getattr(causal_lm(model), "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise ValueError("train.fsdp: found no decoder layers at model.model.layers in "
                         f"{type(causal_lm(model)).__name__}")
    return list(layers)


def mixed_precision_policy(compute_dtype: torch.dtype | None):
    """FSDP2's MixedPrecisionPolicy: parameters cast to compute_dtype for the forward and backward passes and
    gradients reduced in float32 (the sharded master weights stay float32), or no casting at all for None."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if compute_dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)


def shard_model(model, mesh=None, reshard_after_forward: bool = True, compute_dtype: torch.dtype | None = None):
    """fully_shard every decoder layer, then the causal LM as the root; the model's parameters become DTensors
    in place (rebuild or rebind optimizers afterwards). Returns the same model object."""
    from torch.distributed.fsdp import fully_shard

    bad = sorted({str(p.dtype) for p in model.parameters() if not p.dtype.is_floating_point})
    if bad:
        raise ValueError(f"train.fsdp shards floating-point weights only, this model has {', '.join(bad)} ones "
                         "(a 4-bit base?): train 4-bit QLoRA data-parallel (accelerate launch, docs/gpu.md)")
    policy = mixed_precision_policy(compute_dtype)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    fully_shard(causal_lm(model), mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    return model


def init_process_group() -> torch.device:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT); gloo on a CPU, NCCL
    with one GPU per process on CUDA machines. Returns this process's device."""
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise RuntimeError(f"train.fsdp needs a launcher that sets RANK and WORLD_SIZE: {LAUNCH}")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return device


class FSDPDistributed:
    """This process's place in an FSDP2 run and the collectives the trainer needs (see the module docstring)."""

    shards_weights = True

    def __init__(self):
        import torch.distributed as dist

        self.device = init_process_group()
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.is_main = self.rank == 0
        self.mesh = None

    def prepare(self, model, optimizer):
        """Shard the model (on this rank's device) and point the optimizer at the sharded parameters."""
        from torch.distributed.device_mesh import init_device_mesh

        if any(optimizer.state.values()):
            raise RuntimeError("train.fsdp: the optimizer must be prepared before its first step")
        self.mesh = init_device_mesh(self.device.type, (self.world_size,))
        model.to(self.device)
        dtype = fsdp_compute_dtype(self.device, next(model.parameters()).dtype)
        shard_model(model, mesh=self.mesh, compute_dtype=dtype)
        trainable = [p for p in model.parameters() if p.requires_grad]
        if len(optimizer.param_groups) != 1:
            raise RuntimeError("train.fsdp: expected one optimizer parameter group")
        optimizer.param_groups[0]["params"] = trainable
        return model, optimizer

    def prepare_frozen(self, model):
        """A frozen model (the KL reference of full fine-tuning), sharded like the policy."""
        model.to(self.device)
        dtype = fsdp_compute_dtype(self.device, next(model.parameters()).dtype)
        return shard_model(model, mesh=self.mesh, compute_dtype=dtype)

    def unwrap(self, model):
        return model

    def shard(self, items: list) -> list:
        start, end = shard_bounds(len(items), self.world_size, self.rank)
        return items[start:end]

    def sum(self, values: list[float]) -> list[float]:
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def gather_metrics(self, metrics: dict) -> dict:
        import torch.distributed as dist

        gathered = [None] * self.world_size
        dist.all_gather_object(gathered, metrics)
        return combine_metrics(gathered)

    def backward_sync(self, model, sync: bool):
        """Reduce-scatter the gradients only in the last micro-batch's backward (FSDP2 accumulates the
        unsharded gradients before that)."""
        @contextlib.contextmanager
        def context():
            causal_lm(model).set_requires_gradient_sync(sync)
            try:
                yield
            finally:
                causal_lm(model).set_requires_gradient_sync(True)

        return context()

    def clip_grad_norm(self, parameters, max_norm: float) -> float:
        """Clip by the global norm over every rank's shard (DTensor arithmetic does the all-reduce)."""
        from torch.distributed.tensor import DTensor

        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
        return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

    def generation_kwargs(self) -> dict:
        return {"synced_gpus": True}

    def full_state_dict(self, model) -> dict:
        """The whole model's weights gathered on the main process (collective; other ranks get {})."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def wait(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def broadcast_object(self, value):
        """Rank 0's `value` (any picklable object) on every rank; collective, so also a barrier."""
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # ---- sharded checkpoints ----------------------------------------------------------
    def save_sharded(self, folder: Path, model, optimizer) -> Path:
        """Every rank writes its shards of the model and optimizer state (torch.distributed.checkpoint) and its
        RNG state into `folder` (created fresh). Collective."""
        import shutil

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        folder = Path(folder)
        if self.is_main:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        self.wait()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))
        torch.save(rng_state(), folder / f"rng-rank{self.rank}.pt")
        self.wait()
        return folder

    def load_checkpoint(self, path: Path, model, optimizer) -> dict:
        """Restore the sharded model and optimizer state and this rank's RNG from a verified checkpoint
        written with the same number of processes; returns the trainer state."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        path = Path(path)
        verify_checkpoint(path)
        folder = path / SHARDED_DIR
        rng_file = folder / f"rng-rank{self.rank}.pt"
        if not rng_file.exists():
            raise RuntimeError(f"checkpoint {path} was not written by an FSDP run of {self.world_size} processes "
                               f"({rng_file.name} is missing); resume it with the launch that wrote it")
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        set_rng_state(torch.load(rng_file, weights_only=True))
        return json.loads((path / "trainer_state.json").read_text())
