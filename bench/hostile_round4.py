"""The probe's `round four` group (bench/hostile_inputs.py runs it; docs/reliability.md): what earlier groups left
out, each case `refused` (one line, nothing written or sent), `valid` or `silent`/`lost`/`leak`/`hang`:

- empty and root-like output folders (`lite --out ""`, `train.output_dir` "", "/", "~");
- an audit key drawn over again for another --out (the labeled items' key);
- config.yaml through a link to a user's file;
- credentials in a server URL: config.yaml and the console's error line;
- an LLM judge server that drips its answer (verifier.request_timeout=1) and one that redirects the API key to
  another origin;
- a `train` into a folder inside a folder another process holds;
- resume into a run that must not be continued: a damaged middle row of metrics.jsonl, a finished run without its
  checkpoints, its data file changed under the same path, a checkpoint copied in from another run, `checkpoints/`
  linked into another run (a real 2-step tiny run, resumed with the model loader as a tripwire);
- files the report reads: a 300k-token samples.jsonl row (read and plotted in a child process, 60 s allowed),
  audit.json with low above high, +inf and a script tag, evaluation data giving one id to two questions and
  `rejudge --threshold nan`, metrics.jsonl with a NaN reward, an empty file, bytes that are not UTF-8 and a step
  that goes backwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = "PLANTED-PASSWORD"


def served(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Judge(BaseHTTPRequestHandler):
    """/drip/models drips its answer, /redirect/models sends the client to `target`; others record the headers."""

    target, seen = "", []

    def do_GET(self):
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.target + "/record/models")
            self.end_headers()
            return
        Judge.seen.append(dict(self.headers))
        body = json.dumps({"data": [{"id": "m"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for byte in body:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            if self.path.startswith("/drip"):
                time.sleep(0.2)

    def log_message(self, *args):
        pass


def judge_cases() -> list[tuple[str, str, str]]:
    from fspo_lite.scoring.llm import LLMError, OpenAICompatibleChatModel

    server = served(Judge)
    url = f"http://127.0.0.1:{server.server_port}"
    results = []
    try:
        started = time.monotonic()
        try:
            OpenAICompatibleChatModel(url + "/drip", timeout=1.0)
            kind, line = "silent", "answered"
        except LLMError as error:
            kind, line = "refused", str(error)[:110]
        seconds = time.monotonic() - started
        results.append(("LLM judge: a dripping server", kind if seconds < 3 else "hang", f"{seconds:.1f} s: {line}"))
        Judge.target, Judge.seen = f"http://localhost:{server.server_port}", []
        OpenAICompatibleChatModel(url + "/redirect", api_key=SECRET, timeout=10.0)
        leaked = any(SECRET in json.dumps(headers) for headers in Judge.seen)
        results.append(("LLM judge: a redirect to another origin", "leak" if leaked else "valid",
                        "the key reached the other origin" if leaked else "the key stayed with the first origin"))
    finally:
        server.shutdown()
    return results


def secret_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    from fspo_lite.config import load_config

    url = f"http://me:{SECRET}@127.0.0.1:9/"
    load_config(None, {"rollout.vllm_server_url": url}).save(folder / "config.yaml")
    kind = "leak" if SECRET in (folder / "config.yaml").read_text() else "valid"
    results = [("a password in rollout.vllm_server_url: config.yaml", kind, "redacted" if kind == "valid" else "kept")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-m", "fspo_lite", "eval", "--config", str(ROOT / "configs" / "tiny.yaml"),
                          "--set", f"verifier.server_url={url}v1", "--set", "verifier.name=llm", "--limit", "1",
                          "--output", str(folder / "eval-secret")], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    printed = run.stdout + run.stderr
    results.append(("a password in verifier.server_url: the console", "leak" if SECRET in printed else "valid",
                    " ".join(printed.strip().splitlines()[-1:])[:110]))
    return results


def folder_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    tiny = str(ROOT / "configs" / "tiny.yaml")
    results = []
    summary = ROOT / "results" / "summary.json"
    before = summary.read_bytes() if summary.exists() else None
    from hostile_outside import no_notebook

    with no_notebook(probe):
        kind, line = probe.cli_verdict(["lite", "--profile", "quick", "--out", ""])
    if (summary.read_bytes() if summary.exists() else None) != before:
        kind = "lost"
    results.append(('lite --out ""', kind, line))
    for value in ("", "/", "~"):
        results.append((f"train.output_dir={value!r}", *probe.cli_verdict(
            ["train", "--config", tiny, "--set", f"train.output_dir={value}"])))
    precious = folder / "precious.txt"
    precious.write_text("mine")
    (folder / "linked").mkdir()
    (folder / "linked" / "config.yaml").symlink_to(precious)
    from fspo_lite.config import Config

    Config().save(folder / "linked" / "config.yaml")
    results.append(("config.yaml linked to a user's file", "lost" if precious.read_text() != "mine" else "valid",
                    "the linked file " + ("overwritten" if precious.read_text() != "mine" else "kept")))
    return results


def audit_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    from fspo_lite.drivers import audit

    runs = ROOT / "results" / "study" / "runs"
    key = folder / "audit_key.json"
    if not runs.is_dir():
        return []
    audit.sample_command(str(runs), ["grpo", "fspo"], 4, 0, str(folder / "a.jsonl"), str(key))
    before = key.read_bytes()
    kind, line = probe.verdict(lambda: audit.sample_command(str(runs), ["grpo", "fspo"], 4, 1,
                                                            str(folder / "b.jsonl"), str(key)))
    if key.read_bytes() != before:
        kind = "lost"
    elif line.startswith("ValueError") and "earlier draw" in line:  # the command's one-line refusal
        kind = "refused"
    return [("audit sample: the key of labeled items drawn over", kind, line)]


HOLD = ("import sys, time\nfrom fspo_lite.run_lock import run_lock\nwith run_lock(sys.argv[1]):\n"
        "    print('HOLDING', flush=True)\n    time.sleep(300)\n")


def lock_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FSPO_LITE_RUN_LOCKS", None)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(folder / "X" / "runs")], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        tiny = str(ROOT / "configs" / "tiny.yaml")
        kind, line = probe.cli_verdict(["train", "--config", tiny, "--set",
                                        f"train.output_dir={folder / 'X' / 'runs' / 'grpo_s0'}"])
        return [("train inside a folder another process holds",
                 "refused" if line.startswith("RunLockError") else kind, line)]
    finally:
        holder.kill()
        holder.wait(timeout=60)
        holder.stdout.close()


def tiny_run(folder: Path, data: Path, seed: int) -> Path:
    """A finished 2-step tiny run in `folder` (checkpoints at steps 1 and 2) on the questions in `data`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env.pop("FSPO_LITE_RUN_LOCKS", None)
    subprocess.run([sys.executable, "-m", "fspo_lite", "train", "--config", str(ROOT / "configs" / "tiny.yaml"),
                    *[arg for value in (f"train.output_dir={folder}", "train.save_every=1", f"data.train={data}",
                                        "rollout.max_new_tokens=4", f"train.seed={seed}") for arg in ("--set", value)]],
                   env=env, cwd=ROOT, check=True, capture_output=True, timeout=900)
    return folder


def resume_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    import shutil

    from fspo_lite.data.examples import QAExample, save_examples

    data = folder / "questions.jsonl"
    examples = [QAExample(f"q{i}", f"What is fact {i}?", [f"answer {i}"], f"Fact {i} is answer {i}.") for i in range(4)]
    save_examples(examples, data)
    first, other = tiny_run(folder / "run_a", data, 0), tiny_run(folder / "run_b", data, 1)

    def copy(name: str) -> Path:
        target = folder / f"resume_{name}"
        shutil.copytree(first, target, symlinks=True)
        return target

    damaged = copy("damaged")
    lines = (damaged / "metrics.jsonl").read_text().splitlines()
    (damaged / "metrics.jsonl").write_text("\n".join(["{broken", *lines[1:]]) + "\n")
    bare = copy("bare")
    shutil.rmtree(bare / "checkpoints")
    changed = copy("changed")
    copied = copy("copied")
    shutil.rmtree(copied / "checkpoints")
    shutil.copytree(other / "checkpoints", copied / "checkpoints")
    linked = copy("linked")
    shutil.rmtree(linked / "checkpoints")
    (linked / "checkpoints").symlink_to(other / "checkpoints")
    changed_data = folder / "changed.jsonl"
    save_examples(examples, changed_data)
    results = []
    for what, run, source in (("a damaged middle row of metrics.jsonl", damaged, data),
                              ("a finished run without its checkpoints", bare, data),
                              ("a checkpoint copied in from another run", copied, data),
                              ("checkpoints/ linked into another run", linked, data),
                              ("its data file changed under the same path", changed, changed_data)):
        if run is changed:
            save_examples([*examples[:3], QAExample("q3", "What is fact 3?", ["other"], "Fact 3 is other.")],
                          changed_data)
        results.append((f"resume: {what}", *probe.cli_verdict(
            ["train", "--config", str(ROOT / "configs" / "tiny.yaml"), "--set", f"train.output_dir={run}",
             "--set", "train.resume=true", "--set", "train.save_every=1", "--set", f"data.train={source}",
             "--set", "rollout.max_new_tokens=4"])))
    return results


RUNAWAY = """
import json, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
tokens = 300_000
row = {"step": 1, "question": "q?", "gold": ["a"], "response": "ab" * tokens, "reward": 0.5, "tokens": ["ab"] * tokens,
       "offsets": [[2 * i, 2 * i + 2] for i in range(tokens)], "advantage": 0.5,
       "token_advantages": [(-0.5 if i % 3 else 0.5) for i in range(tokens)], "sentence_labels": [1, 0],
       "sentence_spans": [[0, 10], [5000, 2 * tokens]], "method_details": {}}
(folder / "samples.jsonl").write_text(json.dumps(row) + "\\n")
from fspo_lite.drivers.report import flip_example, plot_flip
try:
    from fspo_lite.logs.training_log import read_samples
except ImportError:  # before samples were bounded: notebook 04 read the rows as they are
    from fspo_lite.jsonl import read_jsonl
    def read_samples(folder):
        return read_jsonl(folder / "samples.jsonl", torn_tail=True)
started = time.monotonic()
plot_flip(flip_example(read_samples(folder)), folder / "flip.png")
print(f"{time.monotonic() - started:.1f}")
"""


def report_file_cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    import shutil

    from fspo_lite.data.examples import QAExample, save_examples
    from fspo_lite.drivers.report import load_training
    from fspo_lite.drivers.report.render import write_summary
    from fspo_lite.evaluation import rejudge

    results = []
    runaway = folder / "runaway"
    runaway.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    try:
        run = subprocess.run([sys.executable, "-c", RUNAWAY, str(runaway)], env=env, cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
        line = f"read and plotted in {run.stdout.strip()} s" if run.returncode == 0 else run.stderr.strip()[-110:]
        results.append(("samples.jsonl: a 300k-token row", "valid" if run.returncode == 0 else "raw", line))
    except subprocess.TimeoutExpired:
        results.append(("samples.jsonl: a 300k-token row", "hang", "not plotted within 60 s"))
    study = ROOT / "results" / "study"
    if (study / "audit.json").exists():
        for what, field, value in (("low above high", "low", 0.5), ("+inf", "high", float("inf")),
                                   ("a script tag", "methods", ["grpo", "<script>alert(1)</script>"])):
            target = folder / f"audit_{field}"
            target.mkdir()
            shutil.copyfile(study / "summary.json", target / "summary.json")
            audit = json.loads((study / "audit.json").read_text())
            audit[field] = value
            (target / "audit.json").write_text(json.dumps(audit))
            kind, line = probe.verdict(lambda: write_summary(target))
            if kind == "silent" and "<script>" in (target / "summary.md").read_text():
                kind = "leak"
            results.append((f"audit.json: {what}", kind, line))
    data = folder / "kbqa.jsonl"
    save_examples([QAExample("q1", "Who?", ["A"], "A did it."), QAExample("q1", "Where?", ["B"], "In B.")], data)
    (folder / "rejudge_runs").mkdir()
    results.append(("rejudge: one id given to two questions", *probe.verdict(
        lambda: rejudge.rejudge_runs(folder / "rejudge_runs", verifier=None, judge="kb", data=str(data)))))
    try:
        rejudge.main(["--runs", str(folder / "rejudge_runs"), "--threshold", "nan"])
        results.append(("rejudge --threshold nan", "silent", "accepted"))
    except SystemExit as stop:
        results.append(("rejudge --threshold nan", "refused" if stop.code == 2 else "raw", f"exit {stop.code}"))
    except Exception as error:  # noqa: BLE001 - the kind of error is what is measured
        results.append(("rejudge --threshold nan", "raw", f"{type(error).__name__}: {str(error)[:100]}"))
    for what, body in (("a NaN reward", b'{"step": 1, "reward": 0.5}\n{"step": 2, "reward": NaN}\n'),
                       ("an empty file", b""),
                       ("bytes that are not UTF-8", b'{"step": 1, "note": "\xff"}\n{"step": 2}\n'),
                       ("a step that goes backwards", b'{"step": 1}\n{"step": 2}\n{"step": 1}\n{"step": 2}\n')):
        runs = folder / f"log_{len(results)}"
        (runs / "grpo_s0").mkdir(parents=True)
        (runs / "grpo_s0" / "metrics.jsonl").write_bytes(body)
        results.append((f"metrics.jsonl: {what}", *probe.verdict(lambda: load_training(runs))))
    return results


def cases(folder: Path, probe) -> list[tuple[str, str, str]]:
    return [*folder_cases(folder, probe), *audit_cases(folder, probe), *secret_cases(folder, probe), *judge_cases(),
            *lock_cases(folder, probe), *resume_cases(folder, probe), *report_file_cases(folder, probe)]
