"""Sample the base model k times per question and grade the answers: shared by the difficulty
filter, the system-prompt sweep and the KLCF checklist builder.

Results are cached per question in one JSON file tagged with the settings that produced them
(model, data, prompt, sampling, k), so an interrupted command resumes where it stopped and a
rerun with the same settings costs nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

from fspo_lite.atomic import atomic_write_text
from fspo_lite.data.examples import QAExample, load_mixture, portable_spec
from fspo_lite.data.prompts import prompt_text
from fspo_lite.progress import progress_bar
from fspo_lite.run_lock import check_output_folder
from fspo_lite.scoring.grading import outcome_reward


@dataclass
class QuestionStats:
    """Outcomes of the k sampled answers to one question."""

    samples: int
    correct: int
    """Answers that match a gold answer (exact match after normalisation, or math equivalence), tags aside."""
    unknown: int
    """Answers that decline ("Unknown", "I don't know"): not attempted."""
    format_ok: int

    @property
    def success_rate(self) -> float:
        return self.correct / self.samples if self.samples else 0.0

    @property
    def unknown_rate(self) -> float:
        return self.unknown / self.samples if self.samples else 0.0


def grade_samples(example: QAExample, texts: Sequence[str]) -> QuestionStats:
    """Count correct, not-attempted and well-formed answers among one question's sampled responses."""
    outcomes = [outcome_reward(example, text) for text in texts]
    return QuestionStats(len(texts), sum(o.correct for o in outcomes), sum(o.unknown for o in outcomes),
                         sum(o.format_ok for o in outcomes))


def sample_texts(engine, tokenizer, examples: Sequence[QAExample], data_config, samples: int
                 ) -> Iterator[tuple[list[QAExample], list[list[str]]]]:
    """Yield (questions, their `samples` response texts each, response prefix included) batch by batch,
    as many questions per batch as fill the engine's generation batch."""
    size = max(1, engine.generation_batch_size // max(samples, 1))
    for start in range(0, len(examples), size):
        chunk = list(examples[start : start + size])
        rollout = engine.generate([prompt_text(tokenizer, e, data_config) for e in chunk], samples)
        texts = [data_config.response_prefix + t for t in rollout.texts]
        yield chunk, [texts[i * samples : (i + 1) * samples] for i in range(len(chunk))]


def training_questions(config, spec: str | None = None) -> list[QAExample]:
    """The questions the trainer would draw from (`data.train` or `spec`, seeded order, first `data.limit`),
    before any difficulty filter."""
    examples = load_mixture(spec or config.data.train, seed=config.train.seed)
    return examples[: config.data.limit] if config.data.limit else examples


def settings_key(settings: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class QuestionCache:
    """Per-question results in one JSON file, valid only for the settings that produced them. Its folder is checked
    before any sampling (OutputFolderError saying to choose another `option`), not at the first save."""

    def __init__(self, path: str | Path, kind: str, settings: dict[str, Any], option: str = "--output"):
        self.path = Path(path)
        check_output_folder(self.path.parent, f"choose another {option}")
        self.kind, self.settings, self.key = kind, settings, settings_key(settings)
        self.questions: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}
        if self.path.exists():
            stored = json.loads(self.path.read_text())
            if stored.get("kind") == kind and stored.get("key") == self.key:
                self.questions = stored.get("questions", {})
                self.extra = {k: v for k, v in stored.items() if k not in ("kind", "key", "settings", "questions")}
            else:
                print(f"[fspo_lite] {self.path} was made with other settings; recomputing it")

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        record = {"kind": self.kind, "key": self.key, "settings": self.settings, **self.extra,
                  "questions": self.questions}
        atomic_write_text(self.path, json.dumps(record, indent=1))


def probe_settings(config, samples: int, system_prompt: str | None = None) -> dict[str, Any]:
    """Everything that decides what the sampled answers look like."""
    data = config.data
    return {
        "model": config.model.name, "adapter": config.model.adapter_path, "train": portable_spec(data.train),
        "system_prompt": data.system_prompt if system_prompt is None else system_prompt,
        "few_shot": data.few_shot, "response_prefix": data.response_prefix,
        "evidence_in_prompt": data.evidence_in_prompt, "temperature": config.rollout.temperature,
        "top_p": config.rollout.top_p, "max_new_tokens": config.rollout.max_new_tokens, "samples": samples,
        "seed": config.train.seed,
    }


def for_each_uncached(cache: QuestionCache, engine, tokenizer, examples: Sequence[QAExample], data_config,
                      samples: int, handle: Callable[[QAExample, list[str]], Any], progress: bool = True) -> None:
    """Sample the questions the cache lacks, store `handle(example, texts)` for each, saving after every batch."""
    todo = [e for e in examples if e.id not in cache.questions]
    if not todo:
        return
    bar = progress_bar(total=len(todo), desc=f"{cache.kind}: sampling {samples} per question",
                       disable=not progress)
    for chunk, texts in sample_texts(engine, tokenizer, todo, data_config, samples):
        for example, responses in zip(chunk, texts):
            cache.questions[example.id] = handle(example, responses)
        cache.save()
        bar.update(len(chunk))
    bar.close()


def probe(cache: QuestionCache, engine, tokenizer, examples: Sequence[QAExample], data_config, samples: int,
          progress: bool = True) -> dict[str, QuestionStats]:
    """QuestionStats of every example (sampled now or read from the cache)."""
    for_each_uncached(cache, engine, tokenizer, examples, data_config, samples,
                      lambda e, texts: asdict(grade_samples(e, texts)), progress)
    return {e.id: QuestionStats(**cache.questions[e.id]) for e in examples}


def base_engine(config, progress: bool = False):
    """(engine, tokenizer) sampling from the base model of a config (no LoRA adapter is trained here)."""
    from fspo_lite.models.policy import adapter_source, load_model, load_tokenizer
    from fspo_lite.speed import transformers_engine

    torch.manual_seed(config.train.seed)
    tokenizer = load_tokenizer(config.model.name, config.model.trust_remote_code)
    model = load_model(config.model, seed=config.train.seed)
    if config.model.adapter_path:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_source(config.model.adapter_path))
    model.eval()
    engine = transformers_engine(model, tokenizer, config.rollout, config.data.max_prompt_tokens, progress,
                                 speed=config.speed)
    return engine, tokenizer
