"""Where the gradient goes at the start of training: GRPO, FSPO (lexical) and FSPO (kb) on the SAME rollouts.

    python bench/advantage_mass.py --batches 2 --out results/advantage_mass_start.json

Samples `--batches` batches of `--prompts` training questions x `--group` responses from the base policy (the
study's prompt and sampling settings), then scores the same responses under each arm and computes the advantages
the first update would use and their mass per region (fspo_lite.scoring.advantage_mass): no update is made, so the arms
differ only in how they turn the same rewards into token advantages. Prints one table (mean over batches) and
writes the JSON. A training run logs the same numbers per step in metrics.jsonl.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fspo_lite.config import apply_overrides, load_config  # noqa: E402
from fspo_lite.drivers.prompt_sweep import BUILTIN_PROMPTS  # noqa: E402
from fspo_lite.scoring.advantage_mass import REGIONS, advantage_mass, token_regions  # noqa: E402
from fspo_lite.scoring.rewards import advantages_from_scores, score_rollouts  # noqa: E402
from fspo_lite.scoring.verifiers import build_verifier  # noqa: E402
from fspo_lite.update.trainer import Trainer  # noqa: E402

STUDY_PROMPT = BUILTIN_PROMPTS["cautious"]  # the study's system prompt (configs/lite/study.yaml)
ARMS = {"grpo": ("grpo", "lexical"), "fspo": ("fspo", "lexical"), "fspo+kb": ("fspo", "kb")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(argv)
    shared = {"model.name": args.model, "rollout.group_size": args.group, "rollout.max_new_tokens": args.max_new_tokens,
              "rollout.temperature": 0.7, "train.prompts_per_step": args.prompts, "train.seed": args.seed,
              "data.system_prompt": STUDY_PROMPT, "reward.method": "fspo", "verifier.name": "lexical"}
    config = load_config(None, shared)
    trainer = Trainer(config, progress=False)
    verifiers = {name: build_verifier(apply_overrides(load_config(None, shared), {"verifier.name": name}).verifier)
                 for name in {v for _, v in ARMS.values()}}
    per_arm: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    started = time.perf_counter()
    for batch in range(args.batches):
        examples = [trainer.examples[i] for i in trainer.sampler.next(args.prompts)]
        rollout = trainer.rollout(examples)
        per_response = [e for e in examples for _ in range(args.group)]
        for arm, (method, verifier_name) in ARMS.items():
            arm_config = load_config(None, {**shared, "reward.method": method, "verifier.name": verifier_name})
            scored = score_rollouts(per_response, rollout, trainer.tokenizer, arm_config, verifiers[verifier_name])
            advantages, _ = advantages_from_scores(scored, rollout.completion_mask, arm_config.rollout.group_size,
                                                   arm_config.train.scale_by_std)
            regions = token_regions(scored.views, scored.verdicts, advantages.shape[1])
            per_arm[arm].append({"batch": batch, "reward_mean": float(scored.rewards.mean()),
                                 **advantage_mass(advantages, regions, rollout.completion_mask)})
        print(f"[advantage_mass] batch {batch + 1}/{args.batches} done after {time.perf_counter() - started:.0f} s",
              flush=True)
    keys = [f"{kind}/{r}" for kind in ("token_share", "adv_abs_share", "adv_signed_share") for r in REGIONS]
    means = {arm: {k: sum(row[k] for row in rows) / len(rows) for k in keys} for arm, rows in per_arm.items()}
    print("| arm | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for arm, m in means.items():
        print(f"| {arm} | " + " | ".join(f"{m[k]:+.3f}" for k in keys) + " |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"settings": vars(args), "means": means, "batches": per_arm}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
