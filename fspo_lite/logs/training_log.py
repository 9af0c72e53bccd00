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
from fspo_lite.jsonl import json_lines


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
        append_jsonl(self.path, finite_or_null(metrics))
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
    return bounded_sample(finite_or_null(record))


def finite_or_null(value):
    """`value` with every NaN or infinite number (in lists and objects too) replaced by None: logs write null for a
    number a step could not compute (a skipped step's reward), so a reader can refuse NaN as damage."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [finite_or_null(item) for item in value]
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    return value


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
    """The rows of a samples.jsonl file (or of `<folder>/samples.jsonl`), checked as `read_rows` (RunLogError naming
    file, line and field) and each `bounded_sample`; a missing file has none (a run that logs no samples)."""
    path = Path(path)
    path = path / "samples.jsonl" if path.is_dir() else path
    if not path.exists():
        return []
    return [bounded_sample(row) for row in read_rows(path)]


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


RESUME_ADVICE = ("only a torn last line may be dropped, so resume stops rather than lose this row: repair or remove "
                 "the line (or train into another train.output_dir)")
REPORT_ADVICE = ("the report reads only rows a run wrote (only a torn last line is dropped): repair or remove the "
                 "line, or leave the run out of the runs folder")


def checked_rows(path: str | Path, advice: str = RESUME_ADVICE) -> tuple[list[tuple[int, str, dict]], bool]:
    """(line number, line, row) for each row of a step-keyed JSON-lines file (metrics.jsonl, samples.jsonl), each
    line as written. Only the last line may be torn (a process killed while appending it): it is left out. Any other
    line that is not UTF-8, not a JSON object, or has no whole-number step >= 1 is a RunLogError naming the file and
    line, then `advice` (dropping it would lose a logged step); a missing file has no rows. Returns the rows and
    whether a torn last line was left out."""
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
            raise RunLogError(f"{path}:{number}: {problem}; {advice}")
        kept.append((number, line, row))
    return kept, False


def checked_lines(path: str | Path, step: int | None = None) -> tuple[list[tuple[int, str]], bool]:
    """(step, line) for each row of a step-keyed JSON-lines file up to `step` (all when None), as `checked_rows`
    reads them (a damaged row before the last one is a RunLogError); and whether a torn last line was left out."""
    rows, torn = checked_rows(path)
    return [(row["step"], line) for _, line, row in rows if step is None or row["step"] <= step], torn


def non_finite(value, name: str) -> str | None:
    """The first number in `value` (a row's field, lists and objects searched) that is NaN or infinite, as
    `name[3]=nan`; None when every number is finite (null marks a number the run could not compute)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name}={value}"
    if isinstance(value, list):
        if all(type(item) is int or type(item) is str for item in value):  # token ids and tokens: nothing to find
            return None
        for index, item in enumerate(value):
            found = non_finite(item, f"{name}[{index}]")
            if found:
                return found
    elif isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{name}.{key}")
            if found:
                return found
    return None


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a run's metrics.jsonl or samples.jsonl as the report reads them, each checked: UTF-8 JSON
    objects (`checked_rows`; only a torn last line dropped), a whole-number step >= 1 after the previous row's, and
    every number finite (the writers log a number they could not compute as null). A RunLogError names the file, the
    line and the field; an empty file (or one holding only a torn line) is one too, since a run that logged nothing
    has nothing to report."""
    path = Path(path)
    rows, torn = checked_rows(path, REPORT_ADVICE)
    if not rows:
        what = "only a torn line" if torn else "no rows"
        raise RunLogError(f"{path}: {what}; a run logs one row per step, so this run has nothing to report: "
                          "remove the run folder from the runs folder, or rerun it")
    previous = 0
    for number, _, row in rows:
        if row["step"] <= previous:
            raise RunLogError(f"{path}:{number}: step={row['step']} does not follow the previous row's step "
                              f"{previous} (steps only go up in a run's log); {REPORT_ADVICE}")
        previous = row["step"]
        for key, value in row.items():
            found = non_finite(value, key)
            if found:
                raise RunLogError(f"{path}:{number}: {found} is not a finite number (a run writes null for one it "
                                  f"could not compute); {REPORT_ADVICE}")
    return [row for _, _, row in rows]


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
    """The rows of a metrics.jsonl file (or of `<folder>/metrics.jsonl`), checked as `read_rows` (a torn last line,
    left by a run killed while writing it, is skipped; anything else wrong is a RunLogError naming file, line and
    field); a missing file is a RunLogError too."""
    path = Path(path)
    path = path / "metrics.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise RunLogError(f"{path}: no such file; a run logs its steps there, so this is not a run's folder")
    return read_rows(path)


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
