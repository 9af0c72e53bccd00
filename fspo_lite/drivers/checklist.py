"""The offline KLCF checklist builder: `python -m fspo_lite klcf-checklist` (docs/algorithms.md section 5).

For every training question: sample the base model k times, extract the claims of each answer,
verify them against the question's evidence with the configured verifier, keep the supported
ones and de-duplicate them (fspo_lite.scoring.methods.klcf.build_checklist). The file caches every
question's checklist (and the sampled responses, for inspection), so reruns cost nothing and
an interrupted build resumes; point klcf.checklist_path at it to train with reward.method=klcf.
"""

from __future__ import annotations

from pathlib import Path

from fspo_lite.drivers.base_samples import (QuestionCache, base_engine, for_each_uncached, probe_settings,
                                            training_questions)
from fspo_lite.scoring.claims import build_claim_extractor
from fspo_lite.scoring.methods.klcf import CHECKLIST_KIND, build_checklist
from fspo_lite.scoring.verifiers import build_verifier
from fspo_lite.speed import judge_logprob_pass


def build_checklist_file(config, samples: int | None = None, output: str | None = None, progress: bool = True,
                         command: str = "") -> tuple[Path, dict[str, list[str]]]:
    """(path, {question id: checklist}) for the training questions, built or read from the cache."""
    klcf = config.klcf
    samples = samples or klcf.checklist_samples
    output = output or klcf.checklist_path or "results/klcf_checklist.json"
    settings = {**probe_settings(config, samples), "verifier": config.verifier.name,
                "extractor": config.reward.claim_extractor, "threshold": klcf.checklist_threshold,
                "dedup_overlap": klcf.dedup_overlap}
    examples = training_questions(config)
    cache = QuestionCache(output, CHECKLIST_KIND, settings, "--output or klcf.checklist_path")
    extractor = build_claim_extractor(config.reward.claim_extractor, config.verifier)
    verifier = build_verifier(config.verifier, judge_logprob_pass(config.speed))

    def checklist_of(example, texts):
        facts = build_checklist(texts, example.evidence, extractor, verifier, klcf.checklist_threshold,
                                klcf.dedup_overlap, example.question)
        return {"checklist": facts, "responses": texts}

    if any(e.id not in cache.questions for e in examples):
        engine, tokenizer = base_engine(config, progress)
        for_each_uncached(cache, engine, tokenizer, examples, config.data, samples, checklist_of, progress)
    cache.extra = {"command": command}
    cache.save()
    return cache.path, {e.id: cache.questions[e.id]["checklist"] for e in examples}
