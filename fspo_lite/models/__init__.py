"""The policy model: loading (bundled SmolLM2, hub ids, LoRA, 4-bit) and the reference log-prob pass."""
