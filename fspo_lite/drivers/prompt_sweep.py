"""System-prompt sweep (docs/algorithms.md section 3.5): how the system prompt moves the trade-off between
answering correctly and declining ("Unknown").

Each prompt is evaluated on the same questions with k sampled answers per question; every answer
is CORRECT, NOT_ATTEMPTED (fspo_lite.text.is_unknown) or WRONG (an attempted wrong answer or no
answer). The plot puts not-attempted on x and correct on y; a prompt is on the frontier when no
other prompt has both more correct answers and more declines (i.e. fewer wrong ones).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

from fspo_lite.atomic import atomic_write_json
from fspo_lite.config import FORMAT_INSTRUCTION, DataConfig
from fspo_lite.config_checks import ConfigError
from fspo_lite.data.examples import portable_spec
from fspo_lite.drivers.base_samples import QuestionCache, base_engine, probe, probe_settings, training_questions
from fspo_lite.drivers.cli_help import MissingFileError
from fspo_lite.drivers.figures import headless_pyplot, save_and_close

BUILTIN_PROMPTS = {  # from cautious to bold
    "very_cautious": "You are a very careful assistant. Answer only if you are certain; if you have any doubt, the "
                     f"answer must be Unknown. {FORMAT_INSTRUCTION} Write <answer>Unknown</answer> when you are not "
                     "certain.",
    "cautious": "You are a careful assistant. Answer only when you are confident. If you are not sure, write "
                f"<answer>Unknown</answer>. {FORMAT_INSTRUCTION}",
    "balanced": "You are a hardworking assistant. Try your best to find the correct answer; if you really do not "
                f"know, write <answer>Unknown</answer>. {FORMAT_INSTRUCTION}",
    "default": DataConfig().system_prompt,
    "guess": "You are a hardworking assistant. Make an educated guess when you do not have complete information. "
             f"{FORMAT_INSTRUCTION}",
    "bold": "You are a confident expert. Always give a specific answer, never say you do not know. "
            f"{FORMAT_INSTRUCTION}",
}


def load_prompts(spec: str) -> dict[str, str]:
    """'builtin', or a file: .json ({name: prompt} or [{name, prompt}]) or text (one prompt per line)."""
    if spec == "builtin":
        return dict(BUILTIN_PROMPTS)
    path = Path(spec)
    if not path.exists():
        raise MissingFileError(f"prompt list {spec!r} not found; use 'builtin' or a .json/.txt file")
    try:
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            prompts = data if isinstance(data, dict) else {row["name"]: row["prompt"] for row in data}
        else:
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            prompts = {f"prompt{i + 1}": line for i, line in enumerate(lines)}
    except (ValueError, KeyError, TypeError) as error:  # not UTF-8, not JSON, or rows without name and prompt
        raise ConfigError(f"prompt list {spec!r}: not a JSON object {{name: prompt}}, a JSON list of {{name, prompt}} "
                          f"or a text file with one prompt per line ({type(error).__name__} {error})") from None
    if not prompts:
        raise ConfigError(f"prompt list {spec!r}: no prompts found; write one prompt per line, or use 'builtin'")
    return {str(name): str(text) for name, text in prompts.items()}


@dataclass
class PromptResult:
    name: str
    prompt: str
    answers: int
    correct_rate: float
    not_attempted_rate: float
    wrong_rate: float
    format_rate: float
    on_frontier: bool = False


def summarize(name: str, prompt: str, stats) -> PromptResult:
    """Pool the per-question counts of one prompt into answer-level rates."""
    total = sum(s.samples for s in stats) or 1
    correct, unknown = sum(s.correct for s in stats), sum(s.unknown for s in stats)
    return PromptResult(name, prompt, total, correct / total, unknown / total, (total - correct - unknown) / total,
                        sum(s.format_ok for s in stats) / total)


def mark_frontier(results: list[PromptResult]) -> list[PromptResult]:
    """Set on_frontier for the prompts that no other prompt beats on both correct and not-attempted."""
    for r in results:
        r.on_frontier = not any(
            o is not r and o.correct_rate >= r.correct_rate and o.not_attempted_rate >= r.not_attempted_rate
            and (o.correct_rate > r.correct_rate or o.not_attempted_rate > r.not_attempted_rate)
            for o in results
        )
    return results


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "prompt"


def run_sweep(config, prompts: dict[str, str], samples: int = 4, data: str | None = None,
              cache_dir: str | Path = "results/prompt_sweep", progress: bool = True) -> list[PromptResult]:
    """Evaluate every prompt on the same questions (each prompt's answers cached in cache_dir)."""
    examples = training_questions(config, data)
    engine = tokenizer = None
    results = []
    for name, prompt in prompts.items():
        data_config = dataclasses.replace(config.data, system_prompt=prompt)
        settings = {**probe_settings(config, samples, prompt), "train": portable_spec(data or config.data.train)}
        cache = QuestionCache(Path(cache_dir) / f"{_slug(name)}.json", "prompt-sweep", settings, "--cache-dir")
        if engine is None and any(e.id not in cache.questions for e in examples):
            engine, tokenizer = base_engine(config, progress)
        stats = probe(cache, engine, tokenizer, examples, data_config, samples, progress)
        results.append(summarize(name, prompt, list(stats.values())))
    return mark_frontier(results)


def save_sweep(results: list[PromptResult], path: str | Path, settings: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {**settings, "prompts": [dataclasses.asdict(r) for r in results]}, indent=1)
    return path


def plot_frontier(results: list[PromptResult], path: str | Path, title: str = "") -> Path:
    """Correct vs not-attempted per prompt, the frontier joined by a line."""
    plt = headless_pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    points: dict[tuple[float, float], list[PromptResult]] = {}
    for r in results:  # prompts with the same rates share one point and one label
        points.setdefault((round(r.not_attempted_rate, 6), round(r.correct_rate, 6)), []).append(r)
    for (x, y), group in points.items():
        ax.scatter(x, y, color="#2a7ab9" if group[0].on_frontier else "#999999", zorder=3)
        ax.annotate(", ".join(r.name for r in group), (x, y), textcoords="offset points", xytext=(5, 3), fontsize=8)
    frontier = sorted((r for r in results if r.on_frontier), key=lambda r: r.not_attempted_rate)
    ax.plot([r.not_attempted_rate for r in frontier], [r.correct_rate for r in frontier], color="#2a7ab9", zorder=2)
    ax.set_xlabel("not attempted (share of answers)")
    ax.set_ylabel("correct (share of answers)")
    ax.set_title(title or "system prompts: correct vs not attempted")
    ax.set_xlim(-0.02, max(0.2, max(r.not_attempted_rate for r in results) * 1.15))
    ax.set_ylim(-0.02, max(0.2, max(r.correct_rate for r in results) * 1.15))
    ax.grid(alpha=0.3)
    return save_and_close(fig, path)
