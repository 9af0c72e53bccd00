"""rollout.engine=vllm-server under train.fsdp: every rank samples from one vLLM server the adapter all ranks hold.

Several GPUs the way TRL's server mode and verl do it: one GPU (or machine) runs `vllm serve` with runtime LoRA,
the others train under torchrun with FSDP2. Before each rollout, `ShardedServerRollout`:

1. gathers the LoRA weights from their shards (`gathered_adapter`: an all-gather per trainable parameter, in the
   same order on every rank; the base weights never move, they are the server's own);
2. on rank 0 only, writes them as a new adapter version (`AdapterVersions.save`: a hidden folder renamed into place,
   so the server never finds a half-written adapter) and registers it with the server under a new name, dropping
   the previous one (and, on the first call, those a killed run of this output folder left loaded);
3. broadcasts the served name, or rank 0's error, to every rank (`broadcast_object`, which is also the barrier):
   no rank samples before the new adapter is served, and every rank stops with one line when rank 0 could not
   register it (a server that cannot be reached, one without runtime LoRA);
4. each rank then sends its own share of the prompts (`Distributed.shard`) to the server under that name.

A resumed run publishes the resumed weights this way before its first rollout, as every step does. The server
must read the adapter folders rank 0 writes (train.output_dir/rollout_adapters/shared): the same machine, or a
shared file system (docs/gpu.md). What crosses the network per step is the adapter once (rank 0 to the server's
disk) and, between the ranks, one all-gather of the LoRA matrices.
"""

from __future__ import annotations

from pathlib import Path

import torch

from fspo_lite.config import RolloutConfig
from fspo_lite.rollout.vllm_rollout import AdapterVersions, new_run_id
from fspo_lite.rollout.vllm_server import VLLMServerRollout

SHARED_ADAPTERS = "shared"
"""The folder under train.output_dir/rollout_adapters that rank 0 writes the served adapter versions into."""


def gathered_adapter(model) -> dict[str, torch.Tensor]:
    """The model's trainable weights (the LoRA matrices) whole, on the CPU, by state-dict name. Collective when they
    are sharded (DTensor): every rank must call it; each gets the whole adapter."""
    from torch.distributed.tensor import DTensor

    weights = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            whole = parameter.full_tensor() if isinstance(parameter, DTensor) else parameter
            weights[name] = whole.detach().to("cpu", copy=True)
    return weights


def publish_outcome(register, weights: dict) -> tuple[str, str]:
    """("ok", served name) when `register(weights)` succeeds, else ("error", its one-line message): what rank 0
    broadcasts, so that every rank samples under the same name or stops with the same line."""
    try:
        return "ok", register(weights)
    except Exception as error:  # noqa: BLE001 (every failure is sent to the other ranks, then raised on rank 0)
        return "error", " ".join(str(error).split()) or type(error).__name__


def outcome_name(outcome, rank: int) -> str:
    """The served name from rank 0's broadcast outcome, or a RuntimeError naming rank 0's failure."""
    if not (isinstance(outcome, tuple) and len(outcome) == 2 and all(isinstance(x, str) for x in outcome)):
        raise RuntimeError(f"rank {rank}: rank 0 sent no adapter name ({outcome!r})")
    status, text = outcome
    if status == "ok":
        return text
    raise RuntimeError(text if rank == 0 else f"rank 0 could not serve the new adapter, so rank {rank} stops too: "
                       f"{text}")


class ShardedServerRollout(VLLMServerRollout):
    """`VLLMServerRollout` for ranks that shard the policy (train.fsdp): rank 0 publishes the gathered adapter, every
    rank samples its own prompts under the name rank 0 broadcasts (the module docstring gives the steps). `dist`:
    the run's `FSDPDistributed` (rank, is_main, device, broadcast_object)."""

    def __init__(self, policy, tokenizer, rollout: RolloutConfig, max_prompt_tokens: int, output_dir: str | Path,
                 dist):
        root = Path(output_dir).resolve() / "rollout_adapters" / SHARED_ADAPTERS
        super().__init__(policy, tokenizer, rollout, max_prompt_tokens, root, dist.device)
        self.dist = dist
        # one run id for every rank: the names rank 0 registers are the names the others send
        self.adapters = AdapterVersions(root, run_id=dist.broadcast_object(new_run_id() if dist.is_main else None))

    def save_and_register(self, weights: dict) -> str:
        """Rank 0: write `weights` as the next adapter version and register it with the server."""
        name, _, path = self.adapters.save(self.model, state_dict=weights)
        return self.register_adapter(name, path)

    def _publish_adapter(self) -> str:
        weights = gathered_adapter(self.model)  # collective: every rank, before anything can fail on rank 0 alone
        outcome = publish_outcome(self.save_and_register, weights) if self.dist.is_main else None
        outcome = self.dist.broadcast_object(outcome)  # also the barrier: nobody samples before the adapter is served
        self.served_adapter = outcome_name(outcome, self.dist.rank)
        return self.served_adapter
