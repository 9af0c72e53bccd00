"""Gold labels for reasoning sentences: the records, a labeling session, and an HTML view.

A `SentenceItem` is one reasoning sentence of one response, with the question and evidence it
should be checked against and a gold label: supported (the evidence states or directly entails
it), unsupported (it makes a factual claim the evidence does not back, or contradicts), or
not_checkable (no factual content: "Let me think.", a restated question). The gold set
`data/gold_sentences.jsonl` is a list of these; notebook 02 edits one through `LabelingSession`
(the widgets only call its methods, so everything here is testable without a browser).
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from fspo_lite.text import reasoning_sentences

GOLD_LABELS = ("supported", "unsupported", "not_checkable")
LABEL_VALUES = {"supported": 1, "unsupported": -1, "not_checkable": 0}
"""Gold labels as the verifiers' +1 / -1 / 0 (labels_from_scores)."""


@dataclass
class SentenceItem:
    id: str
    question: str
    evidence: str
    response: str
    sentence: str
    span: tuple[int, int]
    """Character span of the sentence in `response`."""
    label: str | None = None
    """One of GOLD_LABELS, or None while unlabeled."""
    notes: str = ""
    meta: dict = field(default_factory=dict)
    """Where it came from: example id, data source, generation settings."""

    def __post_init__(self):
        self.span = (int(self.span[0]), int(self.span[1]))
        if self.label is not None and self.label not in GOLD_LABELS:
            raise ValueError(f"item {self.id}: label {self.label!r} is not one of {GOLD_LABELS}")
        if self.response[self.span[0] : self.span[1]] != self.sentence:
            raise ValueError(f"item {self.id}: span {self.span} does not hold the sentence {self.sentence!r}")

    @classmethod
    def from_dict(cls, row: dict) -> "SentenceItem":
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(row) - known
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)} in a gold record; expected {sorted(known)}")
        return cls(**row)


def items_from_responses(examples: Sequence, responses: Sequence[str], id_prefix: str = "s",
                         meta: dict | None = None) -> list[SentenceItem]:
    """One unlabeled item per reasoning sentence (inside <think>) of each response."""
    items = []
    for r, (example, response) in enumerate(zip(examples, responses)):
        for k, (start, end) in enumerate(reasoning_sentences(response)):
            items.append(SentenceItem(
                id=f"{id_prefix}{r:03d}-{k:02d}", question=example.question, evidence=example.evidence,
                response=response, sentence=response[start:end], span=(start, end),
                meta={"example_id": example.id, "source": example.source, **(meta or {})},
            ))
    return items


def save_items(items: Sequence[SentenceItem], path: str | Path) -> None:
    """Write JSON lines atomically (a crash never leaves a half-written gold file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        for item in items:
            row = asdict(item)
            row["span"] = list(item.span)
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(staging, path)


def lost_labels(path: str | Path, items: Sequence[SentenceItem]) -> list[str]:
    """Ids of the labeled items in the file at `path` that `items` lacks or leaves unlabeled (the labels writing
    `items` there would lose); [] when there is no file. A file that is not an items file raises ValueError."""
    if not Path(path).exists():
        return []
    kept = {item.id for item in items if item.label is not None}
    return [item.id for item in load_items(path) if item.label is not None and item.id not in kept]


def load_items(path: str | Path) -> list[SentenceItem]:
    """Read a gold file; a malformed line raises ValueError naming the file and line."""
    items = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                items.append(SentenceItem.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, ValueError) as error:
                raise ValueError(f"{path}:{number}: {error}") from None
    return items


class LabelingSession:
    """Items being labeled, a cursor, and save/load. The notebook's widgets drive this object."""

    def __init__(self, items: Sequence[SentenceItem]):
        ids = [item.id for item in items]
        if len(set(ids)) != len(ids):
            raise ValueError("item ids must be unique")
        self.items = list(items)
        self.position = 0

    @classmethod
    def load(cls, path: str | Path) -> "LabelingSession":
        return cls(load_items(path))

    def save(self, path: str | Path, replace_labels: bool = False) -> None:
        """Write the items to `path`; ValueError (nothing written) when that would drop labels the file holds (a
        labeled item missing from this session or unlabeled in it), unless replace_labels. Relabeling passes."""
        lost = 0 if replace_labels else len(lost_labels(path, self.items))
        if lost:
            raise ValueError(f"{path} holds {lost} labeled items this session would drop; save elsewhere, or save "
                             "with replace_labels=True to replace them")
        save_items(self.items, path)

    @property
    def current(self) -> SentenceItem:
        return self.items[self.position]

    def label(self, label: str, notes: str | None = None, index: int | None = None) -> SentenceItem:
        """Set (or correct) the label of the item at `index` (default: the current one)."""
        if label not in GOLD_LABELS:
            raise ValueError(f"label must be one of {GOLD_LABELS}, got {label!r}")
        item = self.items[self.position if index is None else index]
        item.label = label
        if notes is not None:
            item.notes = notes
        return item

    def move(self, step: int) -> SentenceItem:
        """Move the cursor by `step`, clamped to the list."""
        self.position = max(0, min(len(self.items) - 1, self.position + step))
        return self.current

    def next_unlabeled(self) -> SentenceItem | None:
        """Move to the first unlabeled item after the cursor (wrapping around); None when all are done."""
        n = len(self.items)
        for step in range(1, n + 1):
            index = (self.position + step) % n
            if self.items[index].label is None:
                self.position = index
                return self.current
        return None

    def add(self, items: Sequence[SentenceItem]) -> int:
        """Append items whose id is new; returns how many were added."""
        known = {item.id for item in self.items}
        fresh = [item for item in items if item.id not in known]
        self.items.extend(fresh)
        return len(fresh)

    def counts(self) -> dict[str, int]:
        result = {label: 0 for label in GOLD_LABELS}
        result["unlabeled"] = 0
        for item in self.items:
            result[item.label or "unlabeled"] += 1
        return result


class LabelingTool:
    """The labeling widgets of notebook 02 (ipywidgets), driving a `LabelingSession`.

    Pick a label (the sentence is recoloured at once), type an optional note (kept with the item as you
    type), move with prev / next / next unlabeled, and Save writes `out_file` (JSON lines, gold format).
    Moving never copies one item's label or note onto another. Display `tool.widget`.
    """

    def __init__(self, session: LabelingSession, out_file: str | Path):
        import ipywidgets as widgets

        self.session, self.out_file = session, Path(out_file)
        self.view = widgets.HTML()
        self.choice = widgets.ToggleButtons(options=list(GOLD_LABELS), value=None, description="label")
        self.notes = widgets.Text(description="notes", placeholder="optional note")
        self.status = widgets.Label()
        self.back, self.forward, self.next_open, self.save = (
            widgets.Button(description=d) for d in ("< prev", "next >", "next unlabeled", "Save"))
        self._showing = False
        self.choice.observe(self._on_label, names="value")
        self.notes.observe(self._on_notes, names="value")
        self.back.on_click(lambda _: self.go(self.session.move, -1))
        self.forward.on_click(lambda _: self.go(self.session.move, 1))
        self.next_open.on_click(lambda _: self.go(self.session.next_unlabeled))
        self.save.on_click(lambda _: self.save_file())
        self.widget = widgets.VBox([self.view, self.choice, self.notes,
                                    widgets.HBox([self.back, self.forward, self.next_open, self.save]), self.status])
        self.show()

    def show(self) -> None:
        """Render the current item and set the label and note boxes to its values (without relabeling it)."""
        if not self.session.items:
            self.view.value, self.status.value = "no sentences to label", ""
            return
        item = self.session.current
        self.view.value = (f"<b>{self.session.position + 1}/{len(self.session.items)}</b> "
                           f"Q: {html.escape(item.question)}<br>"
                           f"<details><summary>evidence</summary>{html.escape(item.evidence)}</details>"
                           + highlight_html(item.response, [item.span], [LABEL_VALUES.get(item.label)]))
        self._showing = True
        try:
            self.choice.value, self.notes.value = item.label, item.notes
        finally:
            self._showing = False
        self.status.value = ", ".join(f"{k}: {v}" for k, v in self.session.counts().items())

    def go(self, move, *args) -> None:
        move(*args)
        self.show()

    def save_file(self) -> None:
        try:
            self.session.save(self.out_file)
        except (OSError, ValueError) as error:
            self.status.value = f"not saved: {error}"
            return
        done = sum(item.label is not None for item in self.session.items)
        self.status.value = f"saved {len(self.session.items)} items ({done} labeled) to {shown_path(self.out_file)}"

    def _on_label(self, change) -> None:
        if self._showing or change["new"] is None or not self.session.items:
            return
        self.session.label(change["new"])
        self.show()

    def _on_notes(self, change) -> None:
        if not self._showing and self.session.items:
            self.session.current.notes = change["new"]


def shown_path(path: str | Path) -> str:
    """The path relative to the working directory when it lies at most one level above it (a notebook's folder
    and its repository root), else absolute: what a person can find again."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return absolute if relative.startswith(os.path.join("..", "..")) else relative


LABEL_COLOURS = {1: "#c8f7c5", -1: "#f7c5c5", 0: "#e6e6e6", None: "#e6e6e6"}


def highlight_html(text: str, spans: Sequence[tuple[int, int]], labels: Sequence[int | None],
                   titles: Sequence[str] | None = None) -> str:
    """The text as HTML with each span coloured by its label (+1 green, -1 red, 0/None grey).

    Spans must be sorted and disjoint (as sentence spans are); `titles` become hover text.
    """
    parts, cursor = [], 0
    for k, ((start, end), label) in enumerate(zip(spans, labels)):
        parts.append(html.escape(text[cursor:start]))
        title = f' title="{html.escape(titles[k])}"' if titles else ""
        parts.append(f'<span style="background:{LABEL_COLOURS.get(label, "#e6e6e6")}"{title}>'
                     f"{html.escape(text[start:end])}</span>")
        cursor = end
    parts.append(html.escape(text[cursor:]))
    return '<div style="white-space:pre-wrap;font-family:monospace">' + "".join(parts) + "</div>"


def examples_from_items(items: Sequence[SentenceItem]) -> list:
    """The distinct (question, evidence) pairs of labeled items as QA examples, e.g. to generate new
    responses to the gold set's questions. Answers are unknown here, so each gets an empty list."""
    from fspo_lite.data.examples import QAExample

    seen, examples = set(), []
    for item in items:
        key = (item.question, item.evidence)
        if key not in seen:
            seen.add(key)
            examples.append(QAExample(id=item.meta.get("example_id", item.id), question=item.question, answers=[],
                                      evidence=item.evidence, source=item.meta.get("source", "gold")))
    return examples
