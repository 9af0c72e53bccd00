"""The training set: which questions a run trains on, and the seeded order it draws them in.

`load_training_examples` reads config.data.train (a mixture spec, fspo_lite.data.examples.load_mixture), keeps
the ids a difficulty filter kept (data.filter_path) and applies data.limit. `ExampleSampler` hands the
trainer its prompts step by step: endless seeded reshuffles whose whole state is (epoch, position), so
a resumed run draws the same questions as an uninterrupted one.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from fspo_lite.config import Config
from fspo_lite.data.examples import DATA_DIR, WHEEL_DATA, DataError, QAExample, load_mixture


def bundled_or_given(path: str | Path) -> Path:
    """`path` as given when it exists (or is absolute); else, for a relative path such as notebook 03's default
    `results/filter_kbqa_smollm2.json`, the file of that name bundled in an installed wheel when there is one."""
    given = Path(path)
    if given.exists() or given.is_absolute():
        return given
    bundled = DATA_DIR / given.name
    return bundled if DATA_DIR == WHEEL_DATA and bundled.is_file() else given


def filter_kept_ids(path: str | Path) -> set[str]:
    """The question ids a difficulty-filter file (data.filter_path, written by `fspo-lite filter`) kept; DataError in
    one line naming the key when the file is missing or is not such a file."""
    given = bundled_or_given(path)
    if not given.is_file():
        raise DataError(f"data.filter_path={str(path)!r}: no such file; write it with `fspo-lite filter --output "
                        f"{path}` or leave data.filter_path unset")
    try:
        return set(json.loads(given.read_text(encoding="utf-8"))["kept_ids"])
    except (ValueError, KeyError, TypeError) as error:
        raise DataError(f"data.filter_path={str(path)!r}: not a difficulty-filter file (JSON with kept_ids, as "
                        f"`fspo-lite filter` writes): {type(error).__name__} {error}") from None


@dataclass
class ExampleSampler:
    """Endless seeded reshuffles of the training set; (epoch, position) is its whole state."""

    size: int
    seed: int = 0
    epoch: int = 0
    position: int = 0
    order: list[int] = field(default_factory=list)

    def __post_init__(self):
        if self.size <= 0:
            raise ValueError("the training set is empty")
        self._shuffle()

    def _shuffle(self) -> None:
        self.order = list(range(self.size))
        random.Random(self.seed * 100_003 + self.epoch).shuffle(self.order)

    def next(self, count: int) -> list[int]:
        picked = []
        while len(picked) < count:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._shuffle()
            picked.append(self.order[self.position])
            self.position += 1
        return picked

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._shuffle()


def load_training_examples(config: Config, order_seed: int | None = None) -> list[QAExample]:
    """The training questions, restricted to a difficulty filter's kept ids when one is configured, shuffled with
    `order_seed` (default: train.seed). A fixed order_seed gives every run of a study the same questions in the
    same order, whatever its own seed and whichever other runs share its invocation."""
    stats = {"skipped": 0}
    seed = config.train.seed if order_seed is None else order_seed
    examples = load_mixture(config.data.train, seed=seed, skip_bad_rows=config.data.skip_bad_rows,
                            stats=stats)
    if stats["skipped"]:
        print(f"[fspo_lite] {config.data.train}: skipped {stats['skipped']} malformed rows (data.skip_bad_rows)")
    if config.data.filter_path:
        kept = filter_kept_ids(config.data.filter_path)
        examples = [e for e in examples if e.id in kept]
        if not examples:
            raise DataError(f"{config.data.filter_path}: none of its kept ids is in {config.data.train}")
    if not examples:
        raise DataError(f"{config.data.train}: no training examples (the file has no usable rows)")
    return examples[: config.data.limit] if config.data.limit else examples
