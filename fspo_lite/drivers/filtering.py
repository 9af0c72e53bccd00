"""Difficulty filtering (docs/algorithms.md section 3.4): keep the questions whose sampled outcomes vary.

A question the base model always answers correctly, or never does, gives every response of a
GRPO group the same reward, hence no gradient. `python -m fspo_lite filter` samples each training
question k times (default 16), records its success rate (correct answers, tags aside) and its
not-attempted rate, and keeps the most varied questions; `data.filter_path` then restricts
training to the kept ids.

Selection, in this order of precedence:
- `band=[low, high]`: success rate within [low, high];
- `top=N`: the N questions with the largest success variance p(1-p), ties broken by the
  not-attempted variance u(1-u) (so among never-correct questions, those where the model
  sometimes declines come first: they still teach the caution reward), then by data order;
- neither: every question with 0 < p < 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from fspo_lite.drivers.base_samples import (QuestionCache, QuestionStats, base_engine, probe, probe_settings,
                                            training_questions)
from fspo_lite.drivers.figures import headless_pyplot, save_and_close

FILTER_KIND = "difficulty-filter"


def select_questions(stats: dict[str, QuestionStats], top: int | None = None,
                     band: Sequence[float] | None = None) -> list[str]:
    """Ids of the kept questions, in data order (see the module docstring for the rule)."""
    ids = list(stats)
    if band is not None:
        if len(band) != 2 or band[0] > band[1]:
            raise ValueError(f"band must be [low, high] with low <= high, got {band}")
        return [i for i in ids if band[0] <= stats[i].success_rate <= band[1]]
    if top is not None:
        def variety(position: int) -> tuple[float, float, int]:
            s = stats[ids[position]]
            p, u = s.success_rate, s.unknown_rate
            return (-p * (1 - p), -u * (1 - u), position)

        chosen = sorted(sorted(range(len(ids)), key=variety)[:top])
        return [ids[position] for position in chosen]
    return [i for i in ids if 0.0 < stats[i].success_rate < 1.0]


@dataclass
class FilterResult:
    path: Path
    stats: dict[str, QuestionStats]
    kept_ids: list[str]

    @property
    def kept_share(self) -> float:
        return len(self.kept_ids) / len(self.stats) if self.stats else 0.0

    def next_step(self) -> str:
        """What to do with the result, for the command line's last line."""
        if self.kept_ids:
            return f"train on them with --set data.filter_path={self.path}"
        return ("nothing to train on: widen --band or probe more questions (--set data.limit; the probes made "
                "are cached and reused)")


def run_filter(config, samples: int | None = None, top: int | None = None, band: Sequence[float] | None = None,
               output: str | None = None, progress: bool = True, command: str = "") -> FilterResult:
    """Probe every training question (cached in `output`), select the varied ones and record the kept ids."""
    samples = samples or config.filter.samples
    top = top if top is not None else config.filter.top
    band = band if band is not None else config.filter.band
    examples = training_questions(config)
    cache = QuestionCache(output or config.filter.output, FILTER_KIND, probe_settings(config, samples),
                          "--output or filter.output")
    needs_model = any(e.id not in cache.questions for e in examples)
    engine, tokenizer = base_engine(config, progress) if needs_model else (None, None)
    stats = probe(cache, engine, tokenizer, examples, config.data, samples, progress)
    kept = select_questions(stats, top, band)
    cache.extra = {"command": command, "selection": {"top": top, "band": band}, "questions_probed": len(stats),
                   "kept_share": len(kept) / len(stats) if stats else 0.0, "kept_ids": kept}
    cache.save()
    return FilterResult(cache.path, stats, kept)


def plot_filter(result: FilterResult, path: str | Path, title: str = "") -> Path:
    """Histogram of per-question success rates, kept questions highlighted."""
    plt = headless_pyplot()
    kept = set(result.kept_ids)
    rates_kept = [s.success_rate for i, s in result.stats.items() if i in kept]
    rates_dropped = [s.success_rate for i, s in result.stats.items() if i not in kept]
    samples = max((s.samples for s in result.stats.values()), default=1)
    bins = [(k - 0.5) / samples for k in range(samples + 2)]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist([rates_dropped, rates_kept], bins=bins, stacked=True, color=["#bbbbbb", "#2a7ab9"],
            label=[f"dropped ({len(rates_dropped)})", f"kept ({len(rates_kept)})"])
    ax.set_xlabel(f"success rate over {samples} samples")
    ax.set_ylabel("questions")
    ax.set_title(title or f"difficulty filter: kept {result.kept_share:.0%} of {len(result.stats)} questions")
    ax.legend()
    return save_and_close(fig, path)
