"""The seed reward family beyond FSPO's outcome reward, one small module each.

- `caution`: factuality GRPO's group-aware caution reward (correct / process correct / "Unknown").
- `statements`: a response's sentences, their atomic statements and where each statement ends.
- `rlfh`: RLFH's statement-level truthfulness and informativeness rewards, placed on tokens.
- `klcf`: KLCF's checklist recall and claim precision rewards, and the offline checklist builder.

Each module holds pure functions of plain values; `fspo_lite.rewards.score_rollouts` wires them
to rollouts and `fspo_lite.algos` turns the rewards into advantages.
"""
