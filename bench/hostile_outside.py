"""The probe's groups for what comes from outside the config (bench/hostile_inputs.py runs them; docs/reliability.md).

- `notebook parameters`: `lite --profile quick --set NB.PARAM=VALUE` with a bad value, the notebook runner replaced by
  a tripwire: `refused` by one line before any notebook starts, `late` when a notebook started; and a notebook that
  raises: `refused` when the console's last line is the notebook's own exception message, `raw` otherwise.
- `result files`: a hand-edited value in a run's heldout.json or eval/records.jsonl, or a results folder's summary.json,
  read as the report (notebook 04) and rejudge read them: `refused` by one line, `silent` when accepted.
- `eval --adapter checkpoints` (slow: trains the tiny model one step): a checkpoint with corrupted weight bytes or no
  manifest, given to `eval --adapter`: `refused` before the model loads, `late` when it loads; a plain adapter folder
  is `valid` when it reaches the model loader.
- `output folders`: `eval --output`, `train.output_dir` and `lite --out` with a name or path too long, a file in the
  way, a folder that cannot be written: `refused` by one line before the work starts.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOMB = "[&a [x,x,x,x,x,x,x,x,x]," + ",".join(f"&{b} [{','.join(['*' + a] * 9)}]"
                                              for a, b in zip("abcdefgh", "bcdefghi")) + "]"
"""The "billion laughs" in flow style, under 400 bytes as a --set value."""
NOTEBOOK_SETS = ["03.steps=-1", "03.seeds=0", "03.workers=0", "04.qa=../../etc", f"03.methods={BOMB}",
                 "03.seeds=[0, 0]", "03.steps=true", "03.learning_rate=.nan", "03.eval_limit=0", "03.group_size=0",
                 "04.prefix=../../x_", "04.n_resamples=0", "02.verifier_names=[lexicall]", "02.seed=-1",
                 "01.benchmarks=[kbqa]", "01.samples=0"]


@contextlib.contextmanager
def no_notebook(probe):
    """papermill.execute_notebook replaced by the probe's ModelLoaded tripwire (`probe`: bench/hostile_inputs.py)."""
    import papermill

    def started(*args, **kwargs):
        raise probe.ModelLoaded()
    saved = papermill.execute_notebook
    papermill.execute_notebook = started
    try:
        yield
    finally:
        papermill.execute_notebook = saved


def failing_notebook_verdict(folder: Path) -> tuple[str, str]:
    """A notebook raising ConfigError under papermill: refused when stderr's last line carries its message."""
    import papermill

    from fspo_lite.__main__ import main

    message = "train.steps=-1 is out of range; valid: an integer >= 1 " + "(the notebook's own message) " * 30

    def fails(source, output, **kwargs):
        raise papermill.PapermillExecutionError(4, 3, "run()", "ConfigError", message, ["Traceback"] * 40)
    saved, papermill.execute_notebook = papermill.execute_notebook, fails
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main(["lite", "--profile", "quick", "--out", str(folder / "failing")])
    finally:
        papermill.execute_notebook = saved
    last = (err.getvalue().strip().splitlines() or [""])[-1]
    kind = "refused" if " ".join(message.split()) in last else "raw"
    return kind, last[:110]


def bomb_verdict(folder: Path) -> tuple[str, str]:
    """`lite --set 03.methods=<bomb>` in a child process with a 2 GiB address space and 120 s (the expanded bomb
    does not fit), the notebook runner a tripwire that exits 99: refused by one short line and exit 1, late at 99."""
    import resource
    import subprocess
    import sys
    import time

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import papermill; "
            "papermill.execute_notebook = lambda *a, **k: sys.exit(99); "
            "from fspo_lite.__main__ import main; sys.exit(main(sys.argv[2:]))")
    started = time.perf_counter()
    try:
        child = subprocess.run([sys.executable, "-c", code, str(ROOT), "lite", "--profile", "quick", "--out",
                                str(folder / "bomb"), "--set", f"03.methods={BOMB}"], capture_output=True, cwd=ROOT,
                               timeout=120, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)))
    except subprocess.TimeoutExpired:
        return "raw", "ran past 120 s"
    lines = child.stderr.decode(errors="replace").strip().splitlines()
    last = lines[-1] if lines else ""
    kind = ("late" if child.returncode == 99 else "refused" if child.returncode == 1 and len(lines) == 1
            and "--debug" not in last else "raw")
    return kind, f"{time.perf_counter() - started:.1f} s, exit {child.returncode}: {last[:90]}"


def notebook_cases(folder: Path, probe, quick: bool) -> list[tuple[str, str, str]]:
    results = []
    with no_notebook(probe):
        for setting in NOTEBOOK_SETS:
            if BOMB not in setting:
                results.append((setting, *probe.cli_verdict(["lite", "--profile", "quick", "--out",
                                                             str(folder / "nb"), "--set", setting])))
    if not quick:
        results.append(("03.methods=<384-byte alias bomb> (child process)", *bomb_verdict(folder)))
    results.append(("a notebook raising ConfigError", *failing_notebook_verdict(folder)))
    return results


def copied_runs(folder: Path) -> Path:
    """The committed base and grpo_s0 runs (heldout.json, the first 6 records) copied into a fresh folder."""
    runs = Path(tempfile.mkdtemp(dir=folder))
    source = ROOT / "results" / "study" / "runs"
    for run in ("base", "grpo_s0"):
        (runs / run / "eval").mkdir(parents=True)
        shutil.copy(source / run / "heldout.json", runs / run / "heldout.json")
        lines = (source / run / "eval" / "records.jsonl").read_text(encoding="utf-8").split("\n")[:6]
        (runs / run / "eval" / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return runs


def edited(path: Path, change) -> None:
    """A JSON file (or a JSON-lines file's third record) changed by hand."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        change(rows[2])
        path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    else:
        value = json.loads(path.read_text())
        change(value)
        path.write_text(json.dumps(value, indent=2))


def result_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    from fspo_lite.drivers import report
    from fspo_lite.evaluation.rejudge import rejudge_runs

    def metric(name, value):
        return lambda record: record["metrics"].__setitem__(name, value)

    def field(name, value):
        return lambda row: row.__setitem__(name, value)

    heldout = {"accuracy 7.0 (700%)": metric("kbqa.correct", 7.0), "accuracy 1e308": metric("kbqa.correct", 1e308),
               "accuracy '0.9'": metric("kbqa.correct", "0.9"), "accuracy Infinity": metric("kbqa.correct", float("inf")),
               "accuracy -0.5": metric("kbqa.correct", -0.5), "mc2 true": metric("truthfulqa_mc.mc2", True),
               "decomposition 700%": metric("kbqa.decomp_all_correct", 700.0),
               "tokens per response -3": metric("kbqa.response_tokens", -3), "seed 'zero'": field("seed", "zero")}
    records = {"f1 7.0": field("f1", 7.0), "em '1'": field("em", "1"), "label 5": field("sentence_labels", [1, 5]),
               "span past the text": field("sentence_spans", [[0, 10**9]]), "response_tokens 1e308":
               field("response_tokens", 1e308), "judge labels a string": field("sentence_labels_by_judge", {"kb": "x"})}
    results = []
    for name, change in heldout.items():
        runs = copied_runs(folder)
        edited(runs / "grpo_s0" / "heldout.json", change)
        results.append((f"heldout.json {name}", *probe.verdict(lambda: report.summarize(report.load_heldout(runs)))))
    for name, change in records.items():
        runs = copied_runs(folder)
        edited(runs / "grpo_s0" / "eval" / "records.jsonl", change)
        results.append((f"records.jsonl {name} (report)", *probe.verdict(lambda: report.load_responses(runs))))
        results.append((f"records.jsonl {name} (rejudge)", *probe.verdict(lambda: rejudge_runs(runs, _Judge(), "probe"))))
    for name, value in {"accuracy 1e308": 1e308, "accuracy 7.0": 7.0, "accuracy 'high'": "high"}.items():
        summary = Path(tempfile.mkdtemp(dir=folder))
        shutil.copy(ROOT / "results" / "summary.json", summary / "summary.json")
        edited(summary / "summary.json", lambda s: s["methods"][next(iter(s["methods"]))].__setitem__("accuracy", value))
        results.append((f"summary.json {name}", *probe.verdict(lambda: report.write_summary(summary))))
    return results


class _Judge:
    """A stand-in verifier for rejudge: every sentence supported."""

    def score(self, evidence, sentences, questions=None):
        return [1.0] * len(sentences)


def adapter_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    from fspo_lite.config import ModelConfig, load_config
    from fspo_lite.data.examples import QAExample
    from fspo_lite.models.policy import load_policy
    from fspo_lite.update.checkpoint import latest_checkpoint
    from fspo_lite.update.trainer import Trainer

    examples = [QAExample("a", "What is the capital of France?", ["Paris"], "Paris is the capital of France."),
                QAExample("b", "What is the symbol of gold?", ["Au"], "Gold has the symbol Au.")]
    base = load_policy(ModelConfig(name="tiny", lora=True, lora_r=4, lora_alpha=8))
    tiny = str(ROOT / "configs" / "tiny.yaml")

    def checkpoint(name):
        config = load_config(tiny, [f"train.output_dir={folder / name}", "train.steps=1", "rollout.max_new_tokens=8"])
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = Trainer(config, copy.deepcopy(base[0]), base[1], examples, progress=False)
            trainer.step_index = 1
            trainer.save()
        return latest_checkpoint(folder / name)

    def flipped(path):
        weights = path / "model" / "adapter_model.safetensors"
        data = bytearray(weights.read_bytes())
        data[len(data) // 2:len(data) // 2 + 8] = bytes(b ^ 0xFF for b in data[len(data) // 2:len(data) // 2 + 8])
        weights.write_bytes(bytes(data))
        return path

    corrupted = flipped(checkpoint("corrupted"))
    unlisted = checkpoint("no-manifest")
    (unlisted / "manifest.json").unlink()
    plain = shutil.copytree(checkpoint("plain") / "model", folder / "plain-adapter")
    cases = {"weight bytes flipped": corrupted, "weight bytes flipped, its model/ folder": corrupted / "model",
             "no manifest": unlisted, "plain adapter folder (no manifest)": plain}
    results = []
    for name, adapter in cases.items():
        kind, message = probe.cli_verdict(["eval", "--config", tiny, "--adapter", str(adapter), "--benchmarks", "kbqa",
                                     "--limit", "1", "--output", str(folder / "eval")])
        if name.startswith("plain"):
            kind = "valid" if kind == "late" else kind  # a plain adapter is accepted: the model loads
        results.append((name, kind, message))
    return results


def unwritable() -> Path | None:
    """A folder this process cannot write into (root writes through permission bits): /sys/kernel in most places."""
    for folder in (Path("/sys/kernel"), Path("/proc/1")):
        try:
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError:
            return folder
    return None


def folder_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    (folder / "a-file").write_text("x")
    tiny = str(ROOT / "configs" / "tiny.yaml")
    places = {"a 300-byte folder name": folder / ("n" * 300) / "out",
              "a 4,000-character path": folder.joinpath(*["d" * 199] * 20), "a file in the way": folder / "a-file" / "out"}
    if unwritable() is not None:
        places["a folder that cannot be written"] = unwritable() / "out"
    commands = {"eval --output": lambda out: ["eval", "--config", tiny, "--benchmarks", "kbqa", "--limit", "1",
                                              "--output", str(out)],
                "train.output_dir": lambda out: ["train", "--config", tiny, "--set", f"train.output_dir={out}"],
                "lite --out": lambda out: ["lite", "--profile", "quick", "--out", str(out)]}
    results = []
    with no_notebook(probe):
        for command, argv in commands.items():
            for place, out in places.items():
                results.append((f"{command}: {place}", *probe.cli_verdict(argv(out))))
    return results


def groups(folder: Path, quick: bool, probe) -> dict:
    """The groups of this module by name (the slow one left out with `quick`); `probe` is bench/hostile_inputs.py,
    whose verdicts and tripwire exception they use (ModelLoaded, verdict, cli_verdict)."""
    found = {"notebook parameters": lambda: notebook_cases(folder, probe, quick),
             "result files": lambda: result_cases(folder, probe), "output folders": lambda: folder_cases(folder, probe)}
    if not quick:
        found["eval --adapter checkpoints"] = lambda: adapter_cases(folder, probe)
    return found

