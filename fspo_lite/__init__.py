"""fspo-lite: factuality-aware RL for LLMs (FSPO, GRPO and friends), small enough to read.

The folders follow one training step: data/ -> rollout/ -> scoring/ -> update/, with logs/ below the update that
writes them, evaluation/ and drivers/ on top; the math lives in pure functions (`algos`, `text`,
`scoring.align`), and the trainer and rollout engines are thin shells around them. docs/architecture.md gives
the layout and the FSPO path in reading order.
"""

from fspo_lite.algos import (aggregate_loss, clipped_surrogate, fspo_flip, group_advantages, kl_k3, reward_to_go,
                             step_score, token_advantages, token_reward_advantages)
from fspo_lite.config import Config, load_config
from fspo_lite.data.examples import QAExample, load_examples
from fspo_lite.models.policy import load_policy, load_tokenizer
from fspo_lite.scoring.by_text import ResponseAdvantages, group_token_advantages, split_reasoning, verify_reasoning
from fspo_lite.scoring.grading import math_answers_equal
from fspo_lite.scoring.plan import check_settings  # also registers the reward.method and verifier.name checks
from fspo_lite.text import extract_answer, hotpot_em_f1, is_unknown, parse_response, sentence_spans
from fspo_lite.update.trainer import Trainer  # model, train_dataset and reward_funcs of your own, as TRL's GRPOTrainer

__version__ = "0.1.0"

__all__ = [
    "split_reasoning", "verify_reasoning", "group_token_advantages", "ResponseAdvantages", "load_tokenizer",
    "Config", "QAExample", "aggregate_loss", "clipped_surrogate", "extract_answer", "fspo_flip",
    "group_advantages", "hotpot_em_f1", "is_unknown", "kl_k3", "load_config", "load_examples",
    "load_policy", "math_answers_equal", "parse_response", "reward_to_go", "sentence_spans", "step_score",
    "token_advantages", "token_reward_advantages", "check_settings", "Trainer",
]
