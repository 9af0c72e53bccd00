"""Deterministic tiny-model training for the multi-process tests (tests/test_distributed.py).

Run as `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 tests/dist_driver.py
OUTPUT_DIR STEPS METHOD [--set KEY=VALUE ...] [--and DIR:KEY=VALUE,...] [--then-cli DATA_FILE]`, under
torchrun with `--set train.fsdp=true` (FSDP2, tests/test_fsdp.py), or call `train(...)` in-process.
Completions and rewards are fixed functions of the prompt and the completion tokens, independent of
how prompts are batched or which rank holds them, so one 2-process step and one single-process step
see exactly the same global batch. After every
step each rank writes its LoRA weights (all weights with model.lora=false; under FSDP the main process
writes the gathered weights) to OUTPUT_DIR/weights-rank<R>-step<S>.pt; at the end
the trainer saves a checkpoint, and the main process records the launch in OUTPUT_DIR/launch.json.
"""

from __future__ import annotations

import contextlib
import json
import sys
import zlib
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fspo_lite.update import trainer as trainer_module  # noqa: E402
from fspo_lite.config import load_config  # noqa: E402
from fspo_lite.data.examples import QAExample  # noqa: E402
from fspo_lite.rollout.transformers_rollout import Rollout, completion_mask_from_ids, eos_ids  # noqa: E402

EXAMPLES = [
    QAExample(f"q{i}", f"Question number {i}: what is {i} plus {i}?", [str(2 * i)], f"{i} plus {i} is {2 * i}.")
    for i in range(8)
]


class FixedRollout:
    """Completions drawn from a generator seeded by the prompt text (crc32), lengths 3..9, EOS on some."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, prompts, num_samples=1, do_sample=True, max_new_tokens=None):
        eos = eos_ids(self.tokenizer)
        pad = self.tokenizer.pad_token_id
        encoded = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False,
                                 padding_side="left")
        rows = []
        for prompt in prompts:
            generator = torch.Generator().manual_seed(zlib.crc32(prompt.encode()))
            for sample in range(num_samples):
                length = int(torch.randint(3, 10, (1,), generator=generator))
                ids = torch.randint(100, 3000, (length,), generator=generator)
                if sample % 2 == 0:
                    ids[-1] = eos[0]
                rows.append(ids)
        width = max(len(r) for r in rows)
        completion_ids = torch.stack([torch.cat([r, torch.full((width - len(r),), pad)]) for r in rows])
        mask = completion_mask_from_ids(completion_ids, eos)
        mask[completion_ids == pad] = 0
        mask[:, 0] = 1
        prompt_ids = encoded["input_ids"].repeat_interleave(num_samples, 0)
        prompt_mask = encoded["attention_mask"].repeat_interleave(num_samples, 0)
        return Rollout(prompt_ids, prompt_mask, completion_ids.masked_fill(mask == 0, pad), mask, ["x"] * len(rows),
                       num_samples)


def _fixed_scores(real):
    def score(examples, rollout, tokenizer, config, verifier, **kwargs):
        scored = real(examples, rollout, tokenizer, config, verifier, **kwargs)
        ids = rollout.completion_ids * rollout.completion_mask
        scored.rewards = (ids.sum(dim=1) % 7).float() / 7.0
        if scored.sentence_mask is not None:
            scored.sentence_mask = ((ids % 3) - 1).float() * rollout.completion_mask
        return scored

    return score


@contextlib.contextmanager
def fixed_scoring():
    real = trainer_module.score_rollouts
    trainer_module.score_rollouts = _fixed_scores(real)
    try:
        yield
    finally:
        trainer_module.score_rollouts = real


def train(output_dir: str | Path, steps: int, method: str = "fspo", extra: list[str] = ()) -> trainer_module.Trainer:
    output_dir = Path(output_dir)
    config = load_config(REPO / "configs" / "tiny.yaml", [
        f"train.output_dir={output_dir}", f"train.steps={steps}", f"reward.method={method}",
        "train.prompts_per_step=4", "rollout.group_size=2", "train.micro_batch_size=2", *extra,
    ])
    with fixed_scoring():
        trainer = trainer_module.Trainer(config, train_examples=EXAMPLES, progress=False)
        accelerator = getattr(trainer.dist, "accelerator", None)
        if trainer.dist.is_main:
            (output_dir / "launch.json").write_text(json.dumps({
                "distributed_type": str(accelerator.distributed_type) if accelerator else type(trainer.dist).__name__,
                "world_size": trainer.dist.world_size, "shards_weights": trainer.dist.shards_weights}))
        trainer.engine = FixedRollout(trainer.tokenizer)
        for step in range(1, steps + 1):
            trainer.train_step()
            if trainer.dist.shards_weights:
                weights = trainer.dist.full_state_dict(trainer.train_model)  # collective; {} except on rank 0
            else:
                weights = dict(trainer.model.named_parameters())
            weights = {k: v.detach().cpu().clone() for k, v in weights.items() if "lora_" in k or not config.model.lora}
            if weights:
                torch.save(weights, output_dir / f"weights-rank{trainer.dist.rank}-step{step}.pt")
        trainer.save()
    return trainer


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir")
    parser.add_argument("steps", type=int)
    parser.add_argument("method")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--and", dest="also", action="append", default=[], metavar="OUTPUT_DIR:KEY=VALUE,...",
                        help="afterwards, in the same processes, another fixed-batch run into OUTPUT_DIR with these "
                             "overrides (comma-separated)")
    parser.add_argument("--then-cli", metavar="DATA_FILE",
                        help="afterwards, in the same (already started) processes, train 2 steps through the real "
                             "CLI on DATA_FILE into OUTPUT_DIR/cli: saves a second start of every process")
    args = parser.parse_args()
    Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    train(args.output_dir, args.steps, args.method, args.overrides)
    for also in args.also:
        folder, _, settings = also.partition(":")
        Path(folder).mkdir(parents=True, exist_ok=True)
        train(folder, args.steps, args.method, [*args.overrides, *filter(None, settings.split(","))])
    if args.then_cli:
        from fspo_lite.__main__ import main

        main(["train", "--config", str(REPO / "configs" / "tiny.yaml"), "--set", "train.steps=2",
              "--set", f"train.output_dir={Path(args.output_dir) / 'cli'}", "--set", f"data.train={args.then_cli}",
              *[item for override in args.overrides if override.startswith("train.fsdp")
                for item in ("--set", override)]])
