"""The command line's help: a description and examples under every command, defaults shown, and the program
named as it was started (`fspo-lite` or `python -m fspo_lite`), and an error as one line (`error_line`).
`fspo_lite.__main__` builds the parsers and hands them to `document`."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; every option with a real default shows it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("%(default)" in text or "default:" in text or not action.option_strings
                or action.default in (None, False, [], argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


HELP = {
    "": ("", ["lite --profile quick", "lite", "train --config configs/smoke_smollm2.yaml --set reward.method=fspo",
              "COMMAND --help"]),
    "train": ("", ["train --config configs/smoke_smollm2.yaml --set train.steps=10 --set reward.method=grpo"]),
    "filter": ("Difficulty filter: sample every training question k times with the base model, grade the answers, "
               "and keep the questions whose success rate lies in a band (or the N most varied ones). Writes the "
               "kept question ids, the command and the per-question rates to a JSON file that training reads with "
               "--set data.filter_path=FILE (docs/methods.md, \"Difficulty filtering\").",
               ["filter --config configs/smoke_smollm2.yaml --set data.limit=60 --samples 8 "
                "--output results/filter.json --figure figures/filter.png"]),
    "sweep-prompts": ("System-prompt sweep: answer the same questions under several system prompts and plot the "
                      "share of correct answers against the share not attempted (\"Unknown\"); prompts on the "
                      "frontier are marked (docs/methods.md, \"System-prompt sweep\").",
                      ["sweep-prompts --config configs/smoke_smollm2.yaml --set data.limit=30 --samples 4"]),
    "klcf-checklist": ("KLCF checklists: for every training question, sample the base model k times, extract the "
                       "claims of each answer, keep those the verifier finds supported by the question's evidence, "
                       "de-duplicated: the facts KLCF's recall reward looks for (docs/algorithms.md section 5). "
                       "The file is a cache (reruns resume); train with --set klcf.checklist_path=FILE "
                       "--set reward.method=klcf.",
                       ["klcf-checklist --config configs/smoke_smollm2.yaml --samples 4"]),
    "eval": ("", ["eval --model smollm2-135m --benchmarks kbqa,truthfulqa_mc --limit 50",
                  "eval --adapter runs/default/checkpoints/step-000002 --samples 4 --temperature 0.7"]),
    "verifiers": ("Measure the step verifiers (docs/verifiers.md).", ["verifiers benchmark --verifiers lexical"]),
    "verifiers benchmark": ("", ["verifiers benchmark --verifiers lexical,embedding --limit 200"]),
    "verifiers calibrate": ("", ["verifiers calibrate --verifiers embedding --train-limit 500"]),
    "data": ("", ["data list", "data prepare truthfulqa halueval_qa_test"]),
    "data list": ("", ["data list"]),
    "data prepare": ("", ["data prepare truthfulqa", "data prepare --from /path/to/copies"]),
    "audit": ("", ["audit sample --runs results/study/runs", "audit score --json results/study/audit.json"]),
    "audit sample": ("", ["audit sample --runs results/study/runs --methods grpo,fspo --n 150"]),
    "audit score": ("", ["audit score --json results/study/audit.json"]),
    "env": ("", ["env"]),
    "list": ("", ["list methods", "list verifiers", "list benchmarks", "list profiles"]),
    "lite": ("", ["lite --profile quick", "lite --profile study --set 03.seeds=[0] --set 03.model=tiny",
                  "lite --set model.load_in_4bit=true"]),
}
"""Per command ("" the program, "verifiers benchmark" a subcommand): a description where add_parser gave none, and
examples shown under the help."""


def program_name(argv0: str | None = None) -> str:
    """'fspo-lite' when run through the installed script, else 'python -m fspo_lite'."""
    name = os.path.basename(argv0 if argv0 is not None else sys.argv[0])
    return "fspo-lite" if name.startswith("fspo-lite") else "python -m fspo_lite"


def document(parser: argparse.ArgumentParser, prog: str, path: str = "") -> None:
    """Give every (sub)parser the shared formatter, a description (its help line when HELP has none) and HELP's
    examples, walking the subcommands."""
    description, examples = HELP.get(path, ("", []))
    parser.formatter_class = HelpFormatter
    if description:
        parser.description = textwrap.fill(description, 100)
    elif parser.description and "\n" not in parser.description:
        parser.description = textwrap.fill(parser.description, 100)
    if examples:
        parser.epilog = ("examples:\n" if len(examples) > 1 else "example:\n") + "\n".join(
            f"  {prog} {example}" for example in examples)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and helps.get(name):
                    sub.description = textwrap.fill(helps[name][0].upper() + helps[name][1:] + ".", 100)
                document(sub, prog, f"{path} {name}".strip())


def parse_documented(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parser` (the program's, all commands added) given --version and its help (`document`), then the parsed
    `argv`."""
    from fspo_lite import __version__

    parser.add_argument("--version", action="version", version=f"fspo-lite {__version__}")
    document(parser, parser.prog)
    return parser.parse_args(argv)


class MissingFileError(FileNotFoundError):
    """A file the user named (a profile, a prompt list) does not exist; the message names it and what to give
    instead. A FileNotFoundError, so that code catching that still does."""


USER_ERRORS = ("ConfigError", "DataError", "CheckpointError", "TrainingError", "ModelLoadError", "LLMError",
               "RunLockError", "RunFolderError", "DiskFullError", "NotebookError",
               "ResultFileError", "OutputFolderError", "MissingFileError", "RunLogError")
"""Errors about the user's input (config, data, checkpoints, run state): their message is the whole story."""


def error_line(error: BaseException) -> str:
    """One line for an error: the message of a user error; type and message of anything else
    (file errors name their file), with a pointer to --debug."""
    message = " ".join(str(error).split()) or type(error).__name__
    if type(error).__name__ in USER_ERRORS:
        return f"fspo_lite: error: {message}"
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        message = f"{error.filename}: {error.strerror}"
    return f"fspo_lite: error: {type(error).__name__}: {message[:500]} (run with --debug for the traceback)"
