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


def cmd_verifiers_benchmark(args) -> int:
    from .config import load_config
    from .verifiers.cli import benchmark_command

    config = load_config(args.config, args.overrides)
    return benchmark_command(config, args.verifiers.split(","), args.limit, args.train_limit, args.gold, args.json)


def cmd_verifiers_calibrate(args) -> int:
    from .config import load_config
    from .verifiers.cli import calibrate_command

    return calibrate_command(load_config(args.config, args.overrides), args.verifiers.split(","), args.train_limit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fspo_lite", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a policy with GRPO/FSPO and friends")
    _add_config_arguments(train)
    train.set_defaults(run=cmd_train)
    verifiers = commands.add_parser("verifiers", help="measure the step verifiers").add_subparsers(
        dest="verifiers_command", required=True)
    benchmark = verifiers.add_parser(
        "benchmark", help="accuracy, balanced accuracy, AUROC and sentences/s on HaluEval-QA and the gold set")
    _add_config_arguments(benchmark)
    benchmark.add_argument("--verifiers", default="lexical,embedding",
                           help="comma-separated names (lexical, embedding, nli, hhem, llm); default: %(default)s")
    benchmark.add_argument("--limit", type=int, default=None, help="score only the first N HaluEval test rows")
    benchmark.add_argument("--train-limit", type=int, default=1000,
                           help="HaluEval train rows used to choose the best threshold (0: skip); default: %(default)s")
    benchmark.add_argument("--gold", default=None, help="gold sentence file (default: data/gold_sentences.jsonl)")
    benchmark.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    benchmark.set_defaults(run=cmd_verifiers_benchmark)
    calibrate = verifiers.add_parser(
        "calibrate", help="fit the score-to-probability map of the embedding/likelihood verifiers on HaluEval train")
    _add_config_arguments(calibrate)
    calibrate.add_argument("--verifiers", default="embedding,likelihood", help="default: %(default)s")
    calibrate.add_argument("--train-limit", type=int, default=1000, help="HaluEval train rows; default: %(default)s")
    calibrate.set_defaults(run=cmd_verifiers_calibrate)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
