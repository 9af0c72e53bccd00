"""The policy model: loading (bundled SmolLM2, hub ids, LoRA, 4-bit), the shared-prompt KV cache, token log-probabilities."""
