"""A training run's logs: per-step metrics to JSON lines (metrics.jsonl, and TensorBoard when it is
installed and asked for), the trainer's per-step samples (samples.jsonl), and reading them back.

(Benchmark metrics, the numbers evaluation reports, are fspo_lite.evaluation.metrics.)

Rows are appended and fsynced one at a time, before any checkpoint of that step is written,
so a crash can leave at most rows *after* the newest checkpoint (which a resumed run drops
and rewrites) and, when killed mid-write, one torn last line (which readers skip).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from fspo_lite.atomic import atomic_write_text
from fspo_lite.jsonl import json_lines, read_jsonl


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Appends one JSON object per step to `<output_dir>/metrics.jsonl`."""

    def __init__(self, output_dir: str | Path, tensorboard: bool = False):
        self.path = Path(output_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(Path(output_dir) / "tensorboard"))
            except ImportError:
                print("[fspo_lite] tensorboard is not installed; logging to metrics.jsonl only")

    def log(self, metrics: dict) -> None:
        append_jsonl(self.path, {k: _clean(v) for k, v in metrics.items()})
        if self.writer is not None:
            step = metrics.get("step", 0)
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and key != "step" and math.isfinite(value):
                    self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def truncate_after(self, step: int) -> None:
        """Drop rows logged after `step` (a resumed run rewrites them)."""
        truncate_jsonl(self.path, step)

    def close(self) -> None:
        """Close the TensorBoard writer (its files and thread); metrics.jsonl needs nothing: each row is closed."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def sample_record(step: int, example, rollout, scored, token_advantages, tokenizer, advantage: float) -> dict:
    """Row 0 of a step, token by token, as samples.jsonl holds it (for plots): the question and gold answers of
    `example`, the response's text, tokens and offsets, its reward and group advantage before any flip
    (`advantage`), its token advantages after it, the verifier's sentence labels and spans, and the method's
    details and token rewards where the method has them (`scored` is a step's scored rollouts)."""
    length = int(rollout.completion_mask[0].sum())
    ids = rollout.completion_ids[0, :length].tolist()
    record = {
        "step": step, "question": example.question, "gold": example.answers,
        "response": scored.views[0].text, "reward": scored.rewards[0].item(),
        "tokens": tokenizer.convert_ids_to_tokens(ids), "offsets": scored.views[0].offsets,
        "advantage": advantage, "token_advantages": token_advantages[0, :length].tolist(),
        "sentence_labels": scored.verdicts[0].labels, "sentence_spans": scored.verdicts[0].spans,
        "method_details": scored.details[0] if scored.details else {},
    }
    if scored.token_rewards is not None:
        record["token_rewards"] = scored.token_rewards[0, :length].tolist()
    return bounded_sample(record)


MAX_SAMPLE_TOKENS = 2048
"""Tokens of a logged sample kept (its per-token lists, its text up to the last kept token): the paper's longest
responses fit; a longer one is cut where it is written and where it is read, so one runaway row cannot make the
report's plots take minutes."""

MAX_SAMPLE_CHARS = 20_000
"""Characters of a logged sample's question and response kept (the same reason)."""

TOKEN_FIELDS = ("tokens", "offsets", "token_advantages", "token_rewards")


def bounded_sample(record: dict) -> dict:
    """`record` (a samples.jsonl row) with its per-token lists cut to MAX_SAMPLE_TOKENS and its texts to
    MAX_SAMPLE_CHARS (sentence spans and labels past the cut left out), marked `"truncated": true` when cut."""
    tokens = record.get("tokens")
    response = record.get("response")
    long_lists = any(isinstance(record.get(k), list) and len(record[k]) > MAX_SAMPLE_TOKENS for k in TOKEN_FIELDS)
    long_text = any(isinstance(record.get(k), str) and len(record[k]) > MAX_SAMPLE_CHARS
                    for k in ("question", "response"))
    if not (long_lists or long_text):
        return record
    record = dict(record)
    for key in TOKEN_FIELDS:
        if isinstance(record.get(key), list):
            record[key] = record[key][:MAX_SAMPLE_TOKENS]
    end = MAX_SAMPLE_CHARS
    offsets = record.get("offsets")
    if isinstance(tokens, list) and len(tokens) > MAX_SAMPLE_TOKENS and isinstance(offsets, list) and offsets:
        last = offsets[-1]
        if isinstance(last, (list, tuple)) and len(last) == 2 and isinstance(last[1], int):
            end = min(end, last[1])
    if isinstance(response, str):
        record["response"] = response[:end]
    if isinstance(record.get("question"), str):
        record["question"] = record["question"][:MAX_SAMPLE_CHARS]
    spans, labels = record.get("sentence_spans"), record.get("sentence_labels")
    if isinstance(spans, list) and isinstance(labels, list) and len(spans) == len(labels):
        kept = [(span, label) for span, label in zip(spans, labels)
                if isinstance(span, (list, tuple)) and len(span) == 2 and isinstance(span[0], int) and span[0] < end]
        record["sentence_spans"] = [[span[0], min(span[1], end)] for span, _ in kept]
        record["sentence_labels"] = [label for _, label in kept]
    record["truncated"] = True
    return record


def read_samples(path: str | Path) -> list[dict]:
    """The rows of a samples.jsonl file (or of `<folder>/samples.jsonl`), each `bounded_sample` (a torn last line
    skipped, as `read_metrics`); a missing file has none."""
    path = Path(path)
    path = path / "samples.jsonl" if path.is_dir() else path
    if not path.exists():
        return []
    return [bounded_sample(row) if isinstance(row, dict) else row for row in read_jsonl(path, torn_tail=True)]


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one JSON line and fsync it, so it is on disk before a later checkpoint is; never through a link."""
    refuse_link(path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


class RunLogError(ValueError):
    """A run's metrics.jsonl or samples.jsonl cannot be trusted (a damaged row before the last one, a row without a
    step), or is a link: the message names the file, the line and what to do."""


def _parse_rows(path: Path) -> tuple[list[tuple[str, dict]], int]:
    """(line, row) pairs that parse, and the number of lines that do not (for `earlier_run`'s description only)."""
    rows, torn = [], 0
    for line in json_lines(path.read_text(encoding="utf-8", errors="replace")):
        try:
            rows.append((line, json.loads(line)))
        except json.JSONDecodeError:
            torn += 1
    return rows, torn


def step_lines(path: str | Path, step: int | None = None) -> list[tuple[int, str]]:
    """(step, line) for each row of a step-keyed JSON-lines file up to `step` (`checked_lines`)."""
    return checked_lines(path, step)[0]


def checked_lines(path: str | Path, step: int | None = None) -> tuple[list[tuple[int, str]], bool]:
    """(step, line) for each row of a step-keyed JSON-lines file (metrics.jsonl, samples.jsonl) up to `step` (all
    when None), each line as written. Only the last line may be torn (a process killed while appending it): it is
    left out. Any other line that is not UTF-8, not a JSON object, or has no whole-number step >= 1 is a RunLogError
    naming the file and line, since dropping it would lose a logged step; a missing file has no rows. Returns the
    rows and whether a torn last line was left out."""
    path = Path(path)
    if not path.exists():
        return [], False
    numbered = [(n, raw) for n, raw in enumerate(path.read_bytes().split(b"\n"), start=1) if raw.strip()]
    kept = []
    for index, (number, raw) in enumerate(numbered):
        problem = None
        try:
            line = raw.decode("utf-8")
            row = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            problem = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else f"not a JSON line ({error.msg})"
        else:
            value = row.get("step") if isinstance(row, dict) else None
            if not isinstance(row, dict):
                problem = "not a JSON object"
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problem = f"its step is {value!r}, not a whole number >= 1"
        if problem is not None:
            if index == len(numbered) - 1:  # torn by a kill: the row was never complete
                return kept, True
            raise RunLogError(f"{path}:{number}: {problem}; only a torn last line may be dropped, so resume stops "
                              "rather than lose this row: repair or remove the line (or train into another "
                              "train.output_dir)")
        if step is None or row["step"] <= step:
            kept.append((row["step"], line))
    return kept, False


def rows_digest(path: str | Path, step: int) -> str:
    """SHA-256 of the rows of steps <= `step` in a step-keyed JSON-lines file, as written: a checkpoint records it,
    and resume compares, so rows copied in from another run (or edited) are not continued as this run's."""
    return hashlib.sha256("".join(line + "\n" for _, line in step_lines(path, step)).encode("utf-8")).hexdigest()


def refuse_link(path: str | Path) -> None:
    """RunLogError when `path` (a file or folder a run writes) is a symbolic link: writing through it would change
    files outside the run folder (another run's rows or checkpoints, a user's file)."""
    path = Path(path)
    if path.is_symlink():
        raise RunLogError(f"{path} is a link (to {os.readlink(path)}); a run writes only inside its own folder, so "
                          "replace the link with a copy of what it points to, or train into another train.output_dir")


def truncate_jsonl(path: str | Path, step: int) -> None:
    """Keep the rows of a step-keyed JSON-lines file up to `step`; drop later rows and a torn last line
    (`step_lines`: a damaged row before the last is a RunLogError, nothing rewritten)."""
    path = Path(path)
    if not path.exists():
        return
    refuse_link(path)
    kept, torn = checked_lines(path, step)
    if torn:
        print(f"[fspo_lite] {path.name}: dropped a torn last line left by an interrupted run")
    atomic_write_text(path, "".join(line + "\n" for _, line in kept))


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a metrics.jsonl file (or of `<folder>/metrics.jsonl`); a torn last line, left by
    a run killed while writing it, is skipped."""
    path = Path(path)
    return read_jsonl(path / "metrics.jsonl" if path.is_dir() else path, torn_tail=True)


def earlier_run(output_dir: str | Path) -> str | None:
    """Why a new run (train.resume=false) must not start in `output_dir`: what an earlier run left there, which the
    new one would append to or mix with (metrics.jsonl logged steps 1, 2, 3 after 1, 2, 3), and what to do;
    None when the folder holds no logs or checkpoints."""
    output_dir = Path(output_dir)
    found = []
    metrics = output_dir / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size > 0:
        rows, torn = _parse_rows(metrics)
        steps = [row.get("step") for _, row in rows if isinstance(row, dict) and isinstance(row.get("step"), int)]
        found.append(f"metrics.jsonl with steps {min(steps)}-{max(steps)}" if steps
                     else f"metrics.jsonl with {len(rows) + torn} line(s)")
    checkpoints = sorted(p.name for p in (output_dir / "checkpoints").glob("step-*"))
    if checkpoints:
        found.append(f"checkpoints up to {checkpoints[-1]}")
    if not found:
        return None
    return (f"{output_dir} already holds a run ({' and '.join(found)}); set train.resume=true to continue it "
            "(without a checkpoint it starts over), or choose another train.output_dir (or remove the folder)")



NOT_MEASURED = {"kl": "off", "step_factuality": "none"}
"""How a metric that was not measured reads in printed output, in place of nan: the KL term is off (train.beta = 0,
no reference pass) and step factuality has no checked sentence (no evidence, malformed tags, or no verifier)."""


def metric_text(name: str, value, digits: int = 4) -> str:
    """A metric as printed in training output: `digits` significant digits, and NOT_MEASURED's word (else 'n/a')
    for a value that was not measured (None or NaN)."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return NOT_MEASURED.get(name, "n/a")
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)
