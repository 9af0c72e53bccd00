"""Probe: hostile settings, data, text, checkpoints and servers, tried as a hostile user would (docs/reliability.md).

    python bench/hostile_inputs.py [--quick] [--group WORD]

Each case ends in one of: `refused` (one clear line, a ConfigError / DataError / CheckpointError / TrainingError,
before any model loads where a command would load one; for text: no character lost), `valid` (-1 accepted where a
negative value means something: reward values and weights), `late` (refused, but only after a model loaded), `silent`
(accepted and run), `raw` (another exception: a traceback for the user), `lost` (sentence splitting dropped
characters). A server case (rollout.engine=vllm-server against a fake server on 127.0.0.1, tests/fake_vllm_server.py)
is `refused` only by a one-line error naming the server within rollout.vllm_server_timeout (+ 2 s), `late` by one
after that, `raw` by anything else.

It prints one line per case group and a total; `--quick` skips the slow cases (the alias bomb in a child process, the
50 MB question, the checkpoint cases that train the tiny model); `--group WORD` runs only the groups whose name holds
WORD (`--group server`). The script imports the package of the checkout it sits in, so a copy of it (with
tests/fake_vllm_server.py) in an older checkout measures that code.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from fspo_lite import config as config_module  # noqa: E402
from fspo_lite.config import Config, load_config  # noqa: E402
from fspo_lite.jsonl import read_jsonl  # noqa: E402

import hostile_outside  # noqa: E402  (bench/: notebook parameters, result files, adapters, output folders)
import hostile_round4  # noqa: E402  (bench/: folders, keys, links, secrets, judge deadlines, nested locks)

USER_ERRORS = ("ConfigError", "DataError", "CheckpointError", "TrainingError", "ResultFileError", "OutputFolderError",
               "RunLogError")
HOSTILE_NUMBERS = [".nan", ".inf", "-.inf", "1e20", "-1"]
ALWAYS_SHOWN = ("alias bomb (child process)", "03.methods=<384-byte alias bomb> (child process)", "50 MB question", "1 MB question", "drip headers", "huge streamed")
"""Cases whose line is printed whatever their verdict (their time and size are figures docs/reliability.md quotes)."""
KINDS = ("refused", "valid", "late", "silent", "raw", "lost", "leak", "hang")
WORD_KEYS = ["model.dtype", "model.backend", "rollout.engine", "reward.answer_metric", "reward.claim_extractor",
             "reward.method", "caution.variant", "rlfh.granularity", "verifier.name", "verifier.device",
             "train.loss_aggregation", "evaluation.judge"]


class ModelLoaded(Exception):
    """Raised by the tripwires that replace the model loaders: the command got as far as loading a model."""


def numeric_keys() -> dict[str, bool]:
    """Every int/float config key -> whether it is an integer, read off the dataclasses."""
    keys = {}
    sections = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        for name, annotation in typing.get_type_hints(sections[section.name]).items():
            args = typing.get_args(annotation) or (annotation,)
            numeric = [a for a in args if a in (int, float)]
            if numeric:
                keys[f"{section.name}.{name}"] = numeric[0] is int
    return keys


def verdict(call) -> tuple[str, str]:
    """(refused | late | silent | raw, first line of the message) for a call."""
    try:
        call()
    except ModelLoaded:
        return "late", "reached the model loader"
    except Exception as error:  # noqa: BLE001 - the kind of error is what is measured
        message = " ".join(str(error).split())[:110]
        kind = "refused" if type(error).__name__ in USER_ERRORS else "raw"
        return kind, f"{type(error).__name__}: {message}"
    return "silent", "accepted"


@contextlib.contextmanager
def tripwires():
    """The model loaders of train and eval replaced by ModelLoaded."""
    from fspo_lite.update import trainer
    from fspo_lite.evaluation import harness

    def loaded(*args, **kwargs):
        raise ModelLoaded()

    saved = trainer.load_policy, harness.load_eval_model
    trainer.load_policy = harness.load_eval_model = loaded
    try:
        yield
    finally:
        trainer.load_policy, harness.load_eval_model = saved


def cli_verdict(argv: list[str]) -> tuple[str, str]:
    """A command run in process (model loaders as tripwires): refused if it exits 1 with one line and no model."""
    from fspo_lite.__main__ import main

    err = io.StringIO()
    with tripwires(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv + ["--debug"])
        except ModelLoaded:
            return "late", "reached the model loader"
        except Exception as error:  # noqa: BLE001
            kind = "refused" if type(error).__name__ in USER_ERRORS else "raw"
            return kind, f"{type(error).__name__}: {' '.join(str(error).split())[:110]}"
    return ("silent" if code == 0 else "raw"), f"exit {code}: {err.getvalue().strip()[:110]}"


def report(group: str, results: list[tuple[str, str, str]], out, show: int = 3) -> dict[str, int]:
    counts = {kind: sum(1 for _, k, _ in results if k == kind) for kind in KINDS}
    show = len(results) if len(results) <= 12 else show
    shown = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    print(f"{group:<28} cases {len(results):>4}: {shown}", file=out)
    shown_cases = [r for r in results if r[1] not in ("refused", "valid")][:show] + [
        r for r in results if r[0] in ALWAYS_SHOWN and r[1] in ("refused", "valid")]
    for case, kind, message in shown_cases:
        print(f"    {kind:<7} {case}: {message}", file=out)
    return counts


def yaml_cases(folder: Path, quick: bool) -> list[tuple[str, str, str]]:
    files = {
        "deep nesting (5000 [)": "train: " + "[" * 5000 + "]" * 5000 + "\n",
        "train: twice": "train:\n  steps: 3\nmodel:\n  name: tiny\ntrain:\n  steps: 5\n",
        "key twice in a section": "train:\n  steps: 3\n  steps: 4\n",
        "empty file": "",
        "only a comment": "# settings\n",
        "one alias": "base: &b {steps: 2}\ntrain: *b\n",
    }
    results = []
    for name, text in files.items():
        path = folder / "case.yaml"
        path.write_text(text)
        results.append((name, *verdict(lambda: load_config(path))))
    if not quick:
        results.append(("alias bomb (child process)", *alias_bomb(folder)))
    return results


def alias_bomb(folder: Path) -> tuple[str, str]:
    """The "billion laughs" as --config, in a child process with a 2 GiB address space and 120 s; stderr is counted,
    not kept."""
    lines = ["model:", "  name:", '    - &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        previous, current = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"    - &{current} [{','.join(['*' + previous] * 9)}]")
    bomb = folder / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from fspo_lite.__main__ import main; "
         "sys.exit(main(sys.argv[2:]))", str(ROOT), "train", "--config", str(bomb)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)))
    size, head = 0, b""
    try:
        while chunk := child.stderr.read(1 << 20):
            size += len(chunk)
            head = head or chunk[:200]
            if time.perf_counter() - started > 120:
                child.kill()
                break
    finally:
        child.wait()
    seconds = time.perf_counter() - started
    first = head.decode(errors="replace").strip().splitlines()[0][:90] if head else ""
    # a user error is one line without a type name; anything else says "(run with --debug for the traceback)"
    user_error = size < 1000 and "lol" not in first and "--debug" not in head.decode(errors="replace")
    kind = "refused" if child.returncode == 1 and user_error else "raw"
    return kind, f"{seconds:.1f} s, {size:,} bytes on stderr, exit {child.returncode}: {first}"


def value_cases() -> list[tuple[str, str, str]]:
    results = []
    for key in numeric_keys():
        for raw in HOSTILE_NUMBERS:
            results.append((f"{key}={raw}", *verdict(lambda: load_config(None, [f"{key}={raw}"]))))
    return results


SIGNED = ("reward.format_penalty", "reward.step_reward_lambda", "caution.correct_reward", "caution.process_reward",
          "caution.unknown_reward", "rlfh.truth_", "rlfh.info_", "rlfh.outcome_weight", "klcf.recall_weight",
          "klcf.precision_weight", "klcf.reward_model_weight", "klcf.outcome_weight", "detail.relevance_weight")
"""Keys where a negative value is meaningful (reward values and weights): -1 accepted there is `valid`."""


def signed_are_valid(results):
    return [(case, "valid" if kind == "silent" and case.endswith("=-1") and case[:-3].startswith(SIGNED) else kind,
             message) for case, kind, message in results]


def word_cases() -> list[tuple[str, str, str]]:
    tiny = str(ROOT / "configs" / "tiny.yaml")
    results = [(f"{key}=bogus", *cli_verdict(["train", "--config", tiny, "--set", f"{key}=bogus"])) for key in WORD_KEYS]
    results.append(("reward.method=fpso", *cli_verdict(["train", "--config", tiny, "--set", "reward.method=fpso"])))
    return results


def shortcut_cases() -> list[tuple[str, str, str]]:
    tiny = str(ROOT / "configs" / "tiny.yaml")
    cases = {"eval --limit 0": ["--limit", "0"], "eval --limit -1": ["--limit", "-1"],
             "eval --temperature nan": ["--temperature", "nan"], "eval --temperature inf": ["--temperature", "inf"],
             "eval --temperature -1": ["--temperature", "-1"], "eval --samples 0": ["--samples", "0"],
             "eval --benchmarks ''": ["--benchmarks", ""], "eval --source kbqq=...": ["--source",
                                                                                      "kbqq=bundled:kbqa_test"],
             "eval --source kbqa=": ["--source", "kbqa="]}
    return [(name, *cli_verdict(["eval", "--config", tiny, "--benchmarks", "kbqa", *argv] if "--benchmarks" not in argv
                                else ["eval", "--config", tiny, *argv])) for name, argv in cases.items()]


def data_cases(folder: Path, quick: bool) -> list[tuple[str, str, str]]:
    from fspo_lite.data.examples import load_examples

    rows = {"lone surrogate question": '{"question": "What is \\ud800?", "answer": "x"}\n',
            "lone surrogate evidence": '{"question": "q", "answer": "a", "evidence": "\\udfff"}\n',
            "empty file": "", "1 MB question": json.dumps({"question": "x" * 1_000_000, "answer": "a"}) + "\n"}
    if not quick:
        rows["50 MB question"] = json.dumps({"question": "Why " + "x" * 50_000_000 + "?", "answer": "a"}) + "\n"
    results = []
    for name, text in rows.items():
        path = folder / "rows.jsonl"
        path.write_text(text)
        started = time.perf_counter()
        kind, message = verdict(lambda: load_examples(str(path)))
        if kind == "silent" and name == "empty file":
            kind, message = "silent", "no rows, no error"
        results.append((name, kind, f"{message} ({time.perf_counter() - started:.2f} s)"))
    return results


def marker_cases(seed: int = 0) -> list[tuple[str, str, str]]:
    import pysbd

    from fspo_lite.text import sentence_spans

    chars = set()
    for directory, _, files in os.walk(os.path.dirname(pysbd.__file__)):
        for name in files:
            if name.endswith(".py"):
                chars |= {c for c in Path(directory, name).read_text(encoding="utf-8") if ord(c) > 127}
    chars |= {"\r", "&"}
    templates = ["Paris is big{c}. It is old.", "It is {c}old. Dr. A{c} said so! Really? Yes.",
                 "See 1. the {c} list 2. items. Then (a) x{c} (b) y.", "He said 'no{c}' and left. Ok{c}",
                 "x &{c}& y. Next &{c}&."]

    def lost(text: str) -> int:
        covered = [False] * len(text)
        for start, end in sentence_spans(text):
            covered[start:end] = [True] * (end - start)
        return sum(1 for i, char in enumerate(text) if not char.isspace() and not covered[i])

    results = []
    for char in sorted(chars):
        missing = sum(lost(t.format(c=char)) for t in templates)
        results.append((f"U+{ord(char):04X}", "lost" if missing else "refused", f"{missing} characters dropped"))
    rng = random.Random(seed)
    pool = sorted(chars) + list("abc XY.!?()1\n")
    for index in range(30):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(10, 80)))
        missing = lost(text)
        results.append((f"random {index}", "lost" if missing else "refused", f"{missing} characters dropped"))
    return results


def checkpoint_cases(folder: Path) -> list[tuple[str, str, str]]:
    from fspo_lite.update.checkpoint import latest_checkpoint
    from fspo_lite.config import ModelConfig
    from fspo_lite.data.examples import QAExample
    from fspo_lite.models.policy import load_policy
    from fspo_lite.update.trainer import Trainer

    examples = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
                QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]
    base = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))

    def config(run, *overrides):
        return load_config(str(ROOT / "configs" / "tiny.yaml"), [f"train.output_dir={run}", "train.steps=1",
                                                                 "rollout.max_new_tokens=8", *overrides])

    def saved(name):
        run = folder / name
        trainer = Trainer(config(run), copy.deepcopy(base[0]), base[1], examples, progress=False)
        trainer.step_index = 1
        trainer.save()
        return run

    def resume(run, *overrides, model=None):
        quiet = io.StringIO()
        with contextlib.redirect_stdout(quiet):
            Trainer(config(run, "train.resume=true", *overrides), model or copy.deepcopy(base[0]), base[1], examples,
                    progress=False)

    results = []
    for override in ["reward.method=grpo", "train.learning_rate=0.002", "train.seed=7",
                     "data.train=bundled:multihop_train"]:
        run = saved(f"other-{override.split('=')[0]}")
        kind, message = verdict(lambda: resume(run, override))
        results.append((f"checkpoint of a run with {override}", kind, message))
    run = saved("rank")
    other_rank = load_policy(ModelConfig(name="tiny", lora=True, lora_r=8, lora_alpha=8))[0]
    results.append(("another LoRA rank", *verdict(lambda: resume(run, "model.lora_r=8", model=other_rank))))
    for cut in ("emptied", "cut to sizes"):
        run = saved(f"manifest-{cut}")
        path = latest_checkpoint(run)
        weights = path / "model" / "adapter_model.safetensors"
        data = bytearray(weights.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
        weights.write_bytes(bytes(data))
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["files"] = {} if cut == "emptied" else {n: e["size"] for n, e in manifest["files"].items()}
        (path / "manifest.json").write_text(json.dumps(manifest))
        results.append((f"manifest {cut}, weight bytes flipped", *verdict(lambda: resume(run))))
    other, mine = saved("pointer-other"), saved("pointer-mine")
    (mine / "checkpoints" / "latest").write_text("../../pointer-other/checkpoints/step-000001")
    results.append(("latest -> ../../other run", *verdict(lambda: resume(mine))))
    run = folder / "twice"
    Trainer(config(run, "train.steps=2"), copy.deepcopy(base[0]), base[1], examples, progress=False).train()

    def second_run():
        with contextlib.redirect_stdout(io.StringIO()):
            Trainer(config(run, "train.steps=2"), copy.deepcopy(base[0]), base[1], examples, progress=False).train()
        steps = [row["step"] for row in read_jsonl(run / "metrics.jsonl")]
        if len(steps) != len(set(steps)):
            raise AssertionError(f"metrics.jsonl steps {steps}")

    kind, message = verdict(second_run)
    results.append(("train twice into one folder", "silent" if kind == "raw" and "steps" in message else kind,
                    message))
    return results


SERVER_TIMEOUT = 1.0
"""rollout.vllm_server_timeout of the server cases: short, so the cases that wait it out stay quick."""


def server_verdict(call, url: str) -> tuple[str, str]:
    """(refused | late | silent | raw, first line of the message) for a call that talks to the server at `url`."""
    started = time.perf_counter()
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the kind of error is what is measured
        seconds, text = time.perf_counter() - started, str(error)
        named = isinstance(error, (RuntimeError, ValueError)) and "\n" not in text and url in text
        kind = "raw" if not named else "late" if seconds > SERVER_TIMEOUT + 2 else "refused"
        message = " ".join(text.split()).replace(url, "<server>")[:110]
        return kind, f"{type(error).__name__}: {message} ({seconds:.1f} s)"
    return "silent", f"accepted ({time.perf_counter() - started:.1f} s)"


def set_token(position: int, value):
    """An edit of the well-formed choices: completion 0's token `position` replaced by `value`."""
    return lambda choices: choices[0]["token_ids"].__setitem__(position, value)


def set_logprob(value):
    """An edit of the well-formed choices: completion 1's first log-prob replaced by `value`."""
    return lambda choices: choices[1]["logprobs"]["token_logprobs"].__setitem__(0, value)


def tokens(count: int):
    """An edit of the well-formed choices: completion 1 holds `count` tokens, with as many log-probs."""
    return lambda choices: choices[1].update(token_ids=[300] * count, logprobs={"token_logprobs": [-0.1] * count})


def server_cases(folder: Path) -> list[tuple[str, str, str]]:
    """The vllm-server engine (max_new_tokens 5, sampler log-probs, 2 prompts x 2 samples) against a fake server
    whose /v1/completions misbehaves in one way per case; it drips for at most 10 s."""
    from fake_vllm_server import HostileVLLMServer, serving
    from fspo_lite.config import ModelConfig, RolloutConfig
    from fspo_lite.models.policy import load_policy
    from fspo_lite.rollout.vllm_server import VLLMServerRollout

    model, tokenizer = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))
    edits = {"6 tokens for max_tokens=5": tokens(6), "10,000 tokens": tokens(10_000), "empty completion": tokens(0),
             "token id = vocabulary size": set_token(1, len(tokenizer)), "token id -3": set_token(0, -3),
             "token id 2**80": set_token(0, 2**80), "token id 2.0": set_token(2, 2.0),
             "token id '2'": set_token(2, "2"), "token id [2]": set_token(2, [2]), "token id null": set_token(2, None),
             "token id true": set_token(2, True),
             "short log-probs": lambda choices: choices[1]["logprobs"]["token_logprobs"].pop(),
             "NaN log-prob": set_logprob(math.nan), "inf log-prob": set_logprob(math.inf),
             "log-prob 5.0": set_logprob(5.0), "3 choices for 4": lambda choices: choices.pop(),
             "5 choices for 4": lambda choices: choices.append(dict(choices[0], index=4)),
             "index 1 twice": lambda choices: choices[0].update(index=1)}
    modes = ["hang", "drip headers", "drip body", "huge announced", "huge streamed", "deep JSON", "long integer"]
    cases = [(mode, mode, None) for mode in modes] + [(name, "edit", change) for name, change in edits.items()]
    HostileVLLMServer.stop, HostileVLLMServer.drip_for = threading.Event(), 10.0
    results = []
    with serving(HostileVLLMServer, HostileVLLMServer.stop) as url:
        rollout = RolloutConfig(vllm_server_url=url, max_new_tokens=5, use_sampler_logprobs=True,
                                vllm_server_timeout=SERVER_TIMEOUT)
        engine = VLLMServerRollout(model, tokenizer, rollout, adapter_root=folder / "adapters")
        for name, mode, change in cases:
            HostileVLLMServer.mode = mode
            HostileVLLMServer.change = staticmethod(change or (lambda choices: None))
            results.append((name, *server_verdict(lambda: engine.generate(["Hello?", "Where is Rome?"], num_samples=2),
                                                  url.rstrip("/"))))
    return results


def main(argv: list[str] | None = None, out=sys.stdout) -> dict[str, dict[str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the slow cases (for the smoke test)")
    parser.add_argument("--group", default="", help="run only the case groups whose name holds this word")
    args = parser.parse_args(argv)
    totals = {}
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        groups = {"YAML files": lambda: yaml_cases(folder, args.quick),
                  "numeric keys x 5 values": lambda: signed_are_valid(value_cases()),
                  "words and method names": word_cases, "eval option shortcuts": shortcut_cases,
                  "data rows": lambda: data_cases(folder, args.quick), "pysbd marker characters": marker_cases,
                  "vLLM server answers": lambda: server_cases(folder)}
        if not args.quick:
            groups["checkpoints and reruns"] = lambda: checkpoint_cases(folder)
        probe = types.SimpleNamespace(ModelLoaded=ModelLoaded, verdict=verdict, cli_verdict=cli_verdict)
        groups.update(hostile_outside.groups(folder, args.quick, probe))
        if not args.quick:
            groups["round four"] = lambda: hostile_round4.cases(folder, probe)
        groups = {name: cases for name, cases in groups.items() if args.group.lower() in name.lower()}
        for group, cases in groups.items():
            started = time.perf_counter()
            totals[group] = report(group, cases(), out)
            print(f"    ({time.perf_counter() - started:.1f} s)", file=out)
    summed = {kind: sum(t[kind] for t in totals.values()) for kind in KINDS}
    print(f"total: {sum(summed.values())} cases; " + ", ".join(f"{k} {v}" for k, v in summed.items()), file=out)
    print(f"config module: {'has' if hasattr(config_module, 'NUMBER_RANGES') else 'has no'} NUMBER_RANGES", file=out)
    return totals


if __name__ == "__main__":
    main()
    sys.exit(0)
