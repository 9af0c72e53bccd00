"""Stage 2, rollout: prompts in, sampled completions out (transformers, vLLM in-process, a vLLM server)."""
