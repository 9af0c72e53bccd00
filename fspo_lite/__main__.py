"""fspo-lite: factuality-aware RL for LLMs (FSPO, GRPO, caution reward, RLFH, KLCF); also `python -m fspo_lite`."""

from __future__ import annotations

import argparse
import os
import sys

from fspo_lite.drivers.job_control import Terminated, whole_job
from fspo_lite.run_lock import command_lock


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (defaults are used for anything it leaves out)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set train.steps=2 (repeatable)")


def describe(trainer) -> str:
    """The run in one line: model, trainable and total parameters, training questions, method."""
    from fspo_lite.models.policy import trainable_parameter_count
    trainable, total = trainable_parameter_count(trainer.model)
    return (f"{trainer.config.model.name}: {trainable:,} trainable of {total:,} parameters; "
            f"{len(trainer.examples)} training questions; method {trainer.config.reward.method}")


def cmd_train(args) -> int:
    from fspo_lite.config import load_config
    from fspo_lite.logs.training_log import metric_text
    from fspo_lite.update.trainer import Trainer

    config = load_config(args.config, args.overrides)
    with command_lock([config.train.output_dir], "choose another train.output_dir", _command_line(), every_rank=False):
        with whole_job(), Trainer(config) as trainer:  # what the run started ends before the lock goes, on a signal too
            report = print if trainer.dist.is_main else (lambda *_: None)  # one report under accelerate launch
            report(describe(trainer))
            history = trainer.train()
    keys = ("step", "reward_mean", "accuracy", "format_rate", "step_factuality", "flipped_token_share", "loss", "kl",
            "completion_length", "step_time")
    for row in history:
        report("  ".join(f"{k}={metric_text(k, row[k])}" for k in keys))  # kl=off, not kl=nan, when beta is 0
    report(f"metrics: {trainer.logger.path}")
    return 0


def _command_line() -> str:
    """The command as typed, recorded next to the results it produced."""
    import shlex

    from fspo_lite.config_load import redacted
    return redacted("python -m fspo_lite " + " ".join(shlex.quote(_portable_argument(a)) for a in sys.argv[1:]))


def _portable_argument(argument: str) -> str:
    """An argument with its path (whole, or the VALUE of KEY=VALUE) made portable (fspo_lite.data.examples.portable_spec):
    recorded commands must run from any checkout's root, so they hold no absolute paths into this one."""
    from fspo_lite.data.examples import portable_spec
    key, equals, value = argument.partition("=")
    if equals and not key.startswith(("/", "~")):
        return f"{key}={portable_spec(value)}"
    return portable_spec(argument)


def parse_band(text: str) -> list[float]:
    """'0.2,0.8' -> [0.2, 0.8]; ConfigError for anything but two numbers 0 <= LOW <= HIGH <= 1."""
    from fspo_lite.config_checks import ConfigError, validate_band

    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError(f"--band={text!r} is not two numbers; valid: LOW,HIGH with 0 <= LOW <= HIGH <= 1, "
                          "e.g. 0.2,0.8") from None
    return validate_band(values)


def cmd_filter(args) -> int:
    from fspo_lite.config import load_config
    from fspo_lite.config_load import apply_shortcuts
    from fspo_lite.drivers.filtering import plot_filter, run_filter

    band = parse_band(args.band) if args.band else None  # checked before the config, the model or any sampling
    config = apply_shortcuts(load_config(args.config, args.overrides), {"filter.samples": args.samples,
                                                                       "filter.top": args.top})
    result = run_filter(config, args.samples, args.top, band, args.output, command=_command_line())
    print(f"kept {len(result.kept_ids)} of {len(result.stats)} questions ({result.kept_share:.1%}); "
          f"{result.next_step()}")
    if args.figure:
        title = (f"{config.model.name}, {len(result.stats)} questions x {args.samples or config.filter.samples}: "
                 f"kept {result.kept_share:.0%}")
        print(f"figure: {plot_filter(result, args.figure, title)}")
    return 0


def cmd_sweep_prompts(args) -> int:
    from fspo_lite.config import load_config
    from fspo_lite.data.examples import portable_spec
    from fspo_lite.drivers.prompt_sweep import load_prompts, plot_frontier, run_sweep, save_sweep

    config = load_config(args.config, args.overrides)
    results = run_sweep(config, load_prompts(args.prompts), args.samples, args.data, args.cache_dir)
    settings = {"command": _command_line(), "data": portable_spec(args.data or config.data.train),
                "limit": config.data.limit, "samples": args.samples, "model": config.model.name,
                "temperature": config.rollout.temperature}
    print(f"{'prompt':<16}{'correct':>9}{'unknown':>9}{'wrong':>9}{'format':>9}  frontier")
    for r in results:
        print(f"{r.name:<16}{r.correct_rate:>9.3f}{r.not_attempted_rate:>9.3f}{r.wrong_rate:>9.3f}"
              f"{r.format_rate:>9.3f}  {'*' if r.on_frontier else ''}")
    print(f"results: {save_sweep(results, args.results, settings)}")
    title = (f"{config.model.name} on {settings['data'].split('/')[-1]}: {results[0].answers} answers per prompt"
             if results else "")
    print(f"figure: {plot_frontier(results, args.figure, title)}")
    return 0


def cmd_klcf_checklist(args) -> int:
    from fspo_lite.drivers.checklist import build_checklist_file
    from fspo_lite.config import load_config
    from fspo_lite.config_load import apply_shortcuts

    config = apply_shortcuts(load_config(args.config, args.overrides), {"klcf.checklist_samples": args.samples})
    path, checklists = build_checklist_file(config, args.samples, args.output, command=_command_line())
    facts = [len(c) for c in checklists.values()]
    print(f"{len(facts)} questions, {sum(facts)} checklist facts ({sum(facts) / max(len(facts), 1):.2f} per question, "
          f"{sum(1 for f in facts if not f)} empty); train with --set klcf.checklist_path={path}")
    return 0


def cmd_eval(args) -> int:
    from fspo_lite.config import load_config
    from fspo_lite.config_load import apply_shortcuts
    from fspo_lite.evaluation import evaluate

    shortcuts = {"model.name": args.model, "model.adapter_path": args.adapter, "evaluation.benchmarks": args.benchmarks,
                 "evaluation.limit": args.limit, "evaluation.samples": args.samples,
                 "evaluation.temperature": args.temperature, "evaluation.output_dir": args.output}
    for item in args.source:  # NAME=DATA; evaluate checks the name and reads the data before the model loads
        name, _, spec = item.partition("=")
        shortcuts[f"evaluation.sources.{name.strip()}"] = spec.strip()
    config = apply_shortcuts(load_config(args.config, args.overrides), shortcuts)  # the range checks of --set
    chosen = args.model or any(item.split("=", 1)[0].strip() == "model.name" for item in args.overrides)
    if args.adapter and not chosen:  # the model the checkpoint was trained on, as its own config.yaml names it
        from fspo_lite.models.adapter_origin import trained_model_name

        trained = trained_model_name(args.adapter)
        if trained and trained != config.model.name:
            config = apply_shortcuts(config, {"model.name": trained})
            print(f"[fspo_lite] model.name={trained} (the model {args.adapter} was trained on)", file=sys.stderr)
    with command_lock([config.evaluation.output_dir], "choose another --output", _command_line()):  # before the model
        result = evaluate(config, progress=not args.quiet)
        result.summary["command"] = _command_line()
        result.save(config.evaluation.output_dir)
    table = result.table
    percent = table["by"].astype(str).str.startswith("percent")  # one unit per table: shares, then percentages
    print(table[~percent].drop(columns="by").to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if percent.any():
        print("\nanswer decomposition, percent of questions:")
        print(table[percent].drop(columns="by").to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    seconds = {name: b["seconds"] for name, b in result.summary["benchmarks"].items()}
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()))
    print(f"results: {config.evaluation.output_dir}/(summary.json, table.csv, records.jsonl)")
    return 0


def cmd_verifiers_benchmark(args) -> int:
    from fspo_lite.config import load_config
    from fspo_lite.scoring.verifiers.cli import benchmark_command

    config = load_config(args.config, args.overrides)
    return benchmark_command(config, args.verifiers.split(","), args.limit, args.train_limit, args.gold, args.json)


def cmd_verifiers_calibrate(args) -> int:
    from fspo_lite.config import load_config
    from fspo_lite.scoring.verifiers.cli import calibrate_command

    return calibrate_command(load_config(args.config, args.overrides), args.verifiers.split(","), args.train_limit)


def cmd_data_list(args) -> int:
    from fspo_lite.data.files import DATA_ENV, DATA_FILES, data_dir, local_path

    folder = data_dir()
    print(f"data folder: {folder} (set ${DATA_ENV} to move it)")
    for entry in DATA_FILES.values():
        path = local_path(entry.name, folder)
        state = "present" if path else "missing"
        origin = f"hf:{entry.hub}" if entry.hub else "local copy only (--from DIR)"
        print(f"  {entry.name:<22}{state:<9}{origin:<38}{entry.description}")
    return 0


def cmd_data_prepare(args) -> int:
    from fspo_lite.data.files import DATA_FILES, DataFolderError, prepare

    names = args.names or [name for name, entry in DATA_FILES.items() if entry.hub or args.source]
    failed = 0
    for name in names:
        try:
            path, rows, origin = prepare(name, args.source, force=args.force)
        except DataFolderError as error:
            print(f"fspo_lite: error: {name}: {error}", file=sys.stderr)
            failed = 1
            continue
        print(f"{name}: {rows} rows, {origin} -> {path}")
    return failed


def cmd_lite(args) -> int:
    from fspo_lite.config import parse_overrides
    from fspo_lite.drivers.experiment import (check_profile, closing_lines, job_folders, load_profile, only_notebooks,
                                              output_root, override_parameters, run_profile, with_training_overrides)

    # NB.PARAM=VALUE sets a parameter of notebook NB (number or name); KEY=VALUE a config key of the training runs
    notebook_sets = [item for item in args.overrides if item[:2].isdigit()]
    config_sets = [item for item in args.overrides if not item[:2].isdigit()]
    profile = only_notebooks(override_parameters(load_profile(args.profile), notebook_sets), args.only)
    profile = with_training_overrides(profile, parse_overrides(config_sets))
    check_profile(profile)  # every notebook parameter, before the lock and before any notebook runs
    folders = job_folders(profile, args.out)  # the results folder first: written file by file, its lock is shallow
    with command_lock(folders, "choose another --out", _command_line(), shallow=folders[:1]), whole_job():
        summary = run_profile(profile, args.out, not args.quiet, args.data_dir, command=_command_line())
    print(*closing_lines(profile, output_root(profile, args.out), summary), sep="\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    from fspo_lite.drivers.cli_help import error_line, parse_documented, program_name
    from fspo_lite.drivers.audit import cmd_audit_sample, cmd_audit_score
    from fspo_lite.drivers.environment import cmd_env
    from fspo_lite.drivers.listing import KINDS, cmd_list
    parser = argparse.ArgumentParser(prog=program_name(), description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    commands = parser.add_subparsers(dest="command", required=True)
    from fspo_lite.evaluation.benchmarks import BENCHMARKS
    from fspo_lite.drivers.experiment import profile_names
    from fspo_lite.scoring.methods import REWARD_METHODS
    from fspo_lite.scoring.verifiers import VERIFIERS

    train = commands.add_parser(
        "train", help="train a policy with GRPO/FSPO and friends",
        description=f"Train with reward.method one of {', '.join(REWARD_METHODS)} (docs/methods.md) and "
                    f"verifier.name one of {', '.join(VERIFIERS)}; every config key is in fspo_lite/config.py.")
    _add_config_arguments(train)
    train.set_defaults(run=cmd_train)

    filter_ = commands.add_parser("filter", help="difficulty filter: sample each training question k times, keep "
                                  "the ones with varied outcomes")
    _add_config_arguments(filter_)
    filter_.add_argument("--samples", type=int, help="k samples per question (default: filter.samples)")
    choice = filter_.add_mutually_exclusive_group()
    choice.add_argument("--top", type=int, help="keep the N most varied questions (default: filter.top)")
    choice.add_argument("--band", help="keep success rates in LOW,HIGH, e.g. 0.2,0.8 (default: filter.band)")
    filter_.add_argument("--output", help="the cache / kept-ids file (default: filter.output)")
    filter_.add_argument("--figure", help="save a histogram of success rates here (e.g. figures/filter.png)")
    filter_.set_defaults(run=cmd_filter)

    sweep = commands.add_parser("sweep-prompts", help="evaluate system prompts and plot correct vs not attempted")
    _add_config_arguments(sweep)
    sweep.add_argument("--prompts", default="builtin", help="'builtin' (cautious to bold) or a .json/.txt file")
    sweep.add_argument("--samples", type=int, default=4, help="answers sampled per question and prompt")
    sweep.add_argument("--data", help="questions to use (default: data.train; data.limit applies)")
    sweep.add_argument("--results", default="results/prompt_sweep.json", help="where the numbers go")
    sweep.add_argument("--figure", default="figures/prompt_frontier.png", help="where the plot goes")
    sweep.add_argument("--cache-dir", default="results/prompt_sweep", help="per-prompt answer caches")
    sweep.set_defaults(run=cmd_sweep_prompts)

    checklist = commands.add_parser("klcf-checklist", help="build the KLCF checklists from base-model samples")
    _add_config_arguments(checklist)
    checklist.add_argument("--samples", type=int, help="responses per question (default: klcf.checklist_samples)")
    checklist.add_argument("--output", help="checklist file (default: klcf.checklist_path or "
                           "results/klcf_checklist.json)")
    checklist.set_defaults(run=cmd_klcf_checklist)

    eval_ = commands.add_parser("eval", help="measure hallucination on benchmarks (docs/evaluation.md)")
    _add_config_arguments(eval_)
    eval_.add_argument("--model", help="model name, hub id or folder (model.name)")
    eval_.add_argument("--adapter", help="a checkpoint (<run>/checkpoints/step-NNNNNN) or LoRA adapter folder to "
                       "evaluate, on the model its config.yaml (or adapter_config.json) names unless --model or --set "
                       "model.name says otherwise")
    eval_.add_argument("--benchmarks", help=f"comma-separated names (evaluation.benchmarks): {', '.join(BENCHMARKS)}; "
                       "docs/evaluation.md says what each measures and where its data comes from")
    eval_.add_argument("--limit", type=int, help="first N items of each benchmark (evaluation.limit)")
    eval_.add_argument("--samples", type=int, help="k answers per question (evaluation.samples; k > 1: --temperature > 0)")
    eval_.add_argument("--temperature", type=float, help="0 greedy (default), above 0 sampling")
    eval_.add_argument("--source", action="append", default=[], metavar="NAME=DATA",
                       help="data for one benchmark: a file, bundled:<name>, data:<name> (the data folder) or hf:<id> (repeatable)")
    eval_.add_argument("--output", help="output folder (evaluation.output_dir)")
    eval_.add_argument("--quiet", action="store_true", help="no progress bars")
    eval_.set_defaults(run=cmd_eval)

    verifiers = commands.add_parser("verifiers", help="measure the step verifiers").add_subparsers(
        dest="verifiers_command", required=True)
    benchmark = verifiers.add_parser(
        "benchmark", help="accuracy, balanced accuracy, AUROC and sentences/s on HaluEval-QA and the gold set")
    _add_config_arguments(benchmark)
    benchmark.add_argument("--verifiers", default="lexical,embedding",
                           help=f"comma-separated names ({', '.join(VERIFIERS)}); default: %(default)s")
    benchmark.add_argument("--limit", type=int, default=None, help="score only the first N HaluEval test rows")
    benchmark.add_argument("--train-limit", type=int, default=1000,
                           help="HaluEval train rows used to choose the best threshold (0: skip); default: %(default)s")
    benchmark.add_argument("--gold", default=None, help="gold sentence file (default: data/gold_sentences.jsonl)")
    benchmark.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    benchmark.set_defaults(run=cmd_verifiers_benchmark)
    calibrate = verifiers.add_parser(
        "calibrate", help="fit the score-to-probability map of the embedding/likelihood verifiers on HaluEval train")
    _add_config_arguments(calibrate)
    calibrate.add_argument("--verifiers", default="embedding,likelihood",
                           help="comma-separated names of verifiers with a raw score (embedding, likelihood); "
                           "default: %(default)s")
    calibrate.add_argument("--train-limit", type=int, default=1000, help="HaluEval train rows; default: %(default)s")
    calibrate.set_defaults(run=cmd_verifiers_calibrate)

    from fspo_lite.data.files import DATA_FILES

    data = commands.add_parser("data", help="the benchmark and training files that are not bundled: list them, or "
                               "prepare them in the data folder ($FSPO_LITE_DATA)").add_subparsers(
        dest="data_command", required=True)
    data.add_parser("list", help="where the data folder is and which files it holds").set_defaults(run=cmd_data_list)
    prepare = data.add_parser("prepare", help="download and convert files from the hub, or copy local copies (--from)")
    prepare.add_argument("names", nargs="*", metavar="NAME",
                         help=f"files to prepare: {', '.join(DATA_FILES)} (default: every file the hub has, or every "
                         "file when --from is given)")
    prepare.add_argument("--from", dest="source", metavar="DIR", help="a folder holding <name>.jsonl files to copy "
                         "(checked row by row) instead of downloading")
    prepare.add_argument("--force", action="store_true", help="replace files already in the data folder")
    prepare.set_defaults(run=cmd_data_prepare)

    audit = commands.add_parser("audit", help="blind audit of held-out reasoning sentences of two or more methods "
                                "(docs/statistics.md)").add_subparsers(dest="audit_command", required=True)
    sample = audit.add_parser("sample", help="draw sentences equally from the methods, hide the method, shuffle")
    sample.add_argument("--runs", required=True, help="runs folder (<run>/heldout.json and eval/records.jsonl)")
    sample.add_argument("--methods", default="grpo,fspo", help="two or more methods; the score is each later one "
                        "minus the first; default: %(default)s")
    sample.add_argument("--stratify", default="none", choices=["none", "question"], help="question: one sentence "
                        "per method from each of a seeded draw of the questions they share; default: %(default)s")
    sample.add_argument("--prefix", default="audit", help="item id prefix (audit2 -> audit2-0001); "
                        "default: %(default)s")
    sample.add_argument("--n", type=int, default=150, help="sentences in all, split equally; default: %(default)s")
    sample.add_argument("--seed", type=int, default=0, help="seeds the draw and the order; default: %(default)s")
    sample.add_argument("--out", default="results/audit_items.jsonl", help="items to label; default: %(default)s")
    sample.add_argument("--key", default="results/audit_key.json", help="item -> method key; default: %(default)s")
    sample.add_argument("--data", help="evaluation data of the runs (default: the source in their eval/summary.json)")
    sample.add_argument("--benchmark", default="kbqa", help="short-QA benchmark of the records; default: %(default)s")
    sample.add_argument("--overwrite-labels", action="store_true", help="replace items already labeled (and the key)")
    sample.set_defaults(run=cmd_audit_sample)
    score = audit.add_parser("score", help="unblind the labeled items and compare the methods")
    score.add_argument("--items", default="results/audit_items.jsonl", help="the labeled items; default: %(default)s")
    score.add_argument("--key", default="results/audit_key.json", help="the key; default: %(default)s")
    score.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples; default: %(default)s")
    score.add_argument("--seed", type=int, default=0, help="seeds the bootstrap; default: %(default)s")
    score.add_argument("--json", help="also write the result as JSON here")
    score.set_defaults(run=cmd_audit_score)

    lite = commands.add_parser("lite", help="the lite reproduction: notebooks 01-04 under papermill, then the "
                               "results table (results/summary.md) and figures (figures/lite_*.png)")
    lite.add_argument("--profile", default="lite", help="a profile YAML file or one of: " + "; ".join(
        f"{name} ({description})" for name, description in profile_names().items()) + "; default: %(default)s")
    lite.add_argument("--out", help="output root for results/, figures/ and runs/ (default: the profile's 'out')")
    lite.add_argument("--set", dest="overrides", action="append", default=[], metavar="[NB.]KEY=VALUE",
                      help="KEY=VALUE: a config key of the training runs (notebook 03's `overrides`), e.g. --set "
                      "model.load_in_4bit=true; NB.PARAM=VALUE: a notebook parameter, NB the notebook's number or "
                      "name, e.g. --set 03.seeds=[0] (repeatable)")
    lite.add_argument("--data-dir", help="the data folder the profile's local_data benchmarks read their full copies "
                      "from (default: $FSPO_LITE_DATA, else ~/.cache/fspo-lite/data; absent files: the bundled "
                      "samples)")
    lite.add_argument("--only", type=lambda t: t.split(","), metavar="NB[,NB]", help="run only these notebooks, e.g. 04")
    lite.add_argument("--quiet", action="store_true", help="no papermill progress bars")
    lite.set_defaults(run=cmd_lite)
    commands.add_parser("env", help="python, package versions, the device and the dtype each GPU path will use: "
                        "paste it into a bug report").set_defaults(run=cmd_env)
    listing = commands.add_parser("list", help="the reward methods, verifiers, benchmarks or lite profiles, one "
                                  "line each")
    listing.add_argument("kind", choices=KINDS, help="what to list")
    listing.set_defaults(run=cmd_list)
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the line, also after the command
    args = parse_documented(parser, [a for a in argv if a != "--debug"])  # also --version, examples, defaults
    if debug:
        return args.run(args)
    try:
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at the interpreter's exit
        return code
    except Terminated as stop:
        print(f"fspo_lite: stopped by {stop}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print("fspo_lite: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`fspo-lite list methods | head`): stop quietly, as `ls | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as error:  # one line per error; --debug shows the traceback
        from fspo_lite.config_load import redacted
        print(redacted(error_line(error)), file=sys.stderr)  # a server's address may carry a password
        return 1


if __name__ == "__main__":
    sys.exit(main())
