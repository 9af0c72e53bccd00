"""`python -m fspo_lite train ...` with a reward that varies, for tests/test_resume_after_kill.py.

The tiny random model never writes the answer format, so every real reward would be the
format penalty and every advantage zero; a resume test would then compare constants. Here the
reward (and the FSPO sentence mask) is a pure function of the sampled token ids, so it varies
from response to response and a resumed run recomputes exactly what the uninterrupted run saw.
"""

import sys

import torch

from fspo_lite.update import trainer
from fspo_lite.__main__ import main

real_score_rollouts = trainer.score_rollouts


def token_rewards(examples, rollout, tokenizer, config, verifier, **kwargs):
    scored = real_score_rollouts(examples, rollout, tokenizer, config, verifier, **kwargs)
    ids = rollout.completion_ids * rollout.completion_mask
    scored.rewards = (ids.sum(dim=1) % 101).to(torch.float32) / 100.0
    scored.metrics.update(reward_mean=scored.rewards.mean().item(), reward_std=scored.rewards.std().item())
    if scored.sentence_mask is not None:
        scored.sentence_mask = ((ids % 3) - 1).to(torch.float32) * rollout.completion_mask
    return scored


trainer.score_rollouts = token_rewards

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
