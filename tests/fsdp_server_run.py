"""A few training steps sampled from a vLLM server, in one process or under torchrun with FSDP
(tests/test_vllm_fsdp_server.py):

    python tests/fsdp_server_run.py OUT --server-url URL [--steps 3] [--stale-from K] [--save-every 1] [--resume]
    torchrun --nproc_per_node 2 tests/fsdp_server_run.py OUT --server-url URL --fsdp ...

The settings are scripts/adapter_freshness.py's (SMALL: a learning rate at which one update moves the log-probs far
more than the server's rounding, rollout.use_sampler_logprobs, so every row logs the sampler/trainer log-prob gap).
Each rank appends its own metrics (before they are averaged over ranks) to OUT/ranks/rank<R>.jsonl.

Two test hooks, both named by their flag:
- --stale-from K skips the adapter refresh from step K on (`skip_adapter_refresh`: the server keeps serving the
  previous adapter), the failure the gap check must catch;
- every completions request carries the seed 1000 + (steps done), so that a prompt is sampled alike whichever
  rank or request holds it: the one-process and the 2-rank run then see the same completions and their metrics can
  be compared number for number. fspo-lite itself sends no seed (the server's sampling is not reproducible).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from adapter_freshness import SMALL, skip_adapter_refresh  # noqa: E402

REQUEST_SEED = 1000


def seed_requests(trainer) -> None:
    """Every completions request of the trainer's engine gets the seed REQUEST_SEED + the steps done so far."""
    engine = trainer.engine
    build = engine.completion_request
    engine.completion_request = lambda *args, **kwargs: {**build(*args, **kwargs),
                                                         "seed": REQUEST_SEED + trainer.step_index}


def record_rank_rows(trainer, folder: Path) -> None:
    """Append this rank's own metrics row to folder/rank<R>.jsonl before the rows are combined over ranks."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{trainer.dist.rank}.jsonl"
    gather = trainer.dist.gather_metrics

    def spy(metrics: dict) -> dict:
        with open(path, "a") as out:
            out.write(json.dumps({k: v for k, v in metrics.items() if isinstance(v, (int, float))}) + "\n")
        return gather(metrics)

    trainer.dist.gather_metrics = spy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--server-url", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--stale-from", type=int, default=None)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    from fspo_lite.config import load_config
    from fspo_lite.update.trainer import Trainer

    overrides = [*SMALL, "rollout.engine=vllm-server", f"rollout.vllm_server_url={args.server_url}",
                 f"train.steps={args.steps}", f"train.output_dir={args.out}", f"train.save_every={args.save_every}",
                 f"train.fsdp={str(args.fsdp).lower()}", f"train.resume={str(args.resume).lower()}"]
    config = load_config(REPO / "configs" / "smoke_smollm2.yaml", overrides)
    with Trainer(config, progress=False) as trainer:
        seed_requests(trainer)
        record_rank_rows(trainer, args.out / "ranks")
        if trainer.dist.is_main:
            config.save(args.out / "config.yaml")
        while trainer.step_index < args.steps:
            if args.stale_from is not None and trainer.step_index + 1 == args.stale_from:
                skip_adapter_refresh(trainer.engine)
            trainer.train_step()
            if args.save_every and trainer.step_index % args.save_every == 0:
                trainer.save()


if __name__ == "__main__":
    main()
