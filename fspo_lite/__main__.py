"""Command line: `python -m fspo_lite <command> ...` (also installed as `fspo-lite`)."""

from __future__ import annotations

import argparse
import sys


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (defaults are used for anything it leaves out)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.steps=2 (repeatable)")


def cmd_train(args) -> int:
    from .config import load_config
    from .trainer import Trainer, describe

    config = load_config(args.config, args.overrides)
    trainer = Trainer(config)
    report = print if trainer.dist.is_main else (lambda *_: None)  # one report under accelerate launch
    report(describe(trainer))
    history = trainer.train()
    keys = ("step", "reward_mean", "accuracy", "format_rate", "step_factuality", "flipped_token_share",
            "loss", "kl", "completion_length", "step_time")
    for row in history:
        report("  ".join(f"{k}={row[k]:.4g}" if isinstance(row[k], float) else f"{k}={row[k]}" for k in keys))
    report(f"metrics: {trainer.logger.path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fspo_lite", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a policy with GRPO/FSPO and friends")
    _add_config_arguments(train)
    train.set_defaults(run=cmd_train)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
