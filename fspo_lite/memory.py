"""Memory given back when a trainer ends (`release_memory`), so the next trainer in the process starts on a clean
machine. How the process's allocator keeps freed memory during training is a speed setting
(`fspo_lite.speed.allocator`, speed.keep_freed_memory)."""

from __future__ import annotations


def release_memory() -> None:
    """Collect garbage now and hand the GPU's cached blocks back to the driver (where CUDA is in use): after a trainer
    or an engine has been dropped, so that the next one in the process finds the memory free. vLLM measures the free
    GPU memory at start-up against its share, and torch's caching allocator would otherwise keep the dropped
    tensors' blocks for this process. Memory the CPU allocator was told to keep (speed.keep_freed_memory) stays
    kept."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.ipc_collect()
