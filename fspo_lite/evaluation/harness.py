"""The evaluation harness: load (or take) a model, run each configured benchmark, tabulate, save.

Generation goes through `rollout.TransformersRollout` (left padding, KV cache, batches of
`evaluation.batch_size` sequences, k samples per question); TruthfulQA MC through the shared-primer
log-likelihood scorer (`mc.PrefixScorer`). Every number carries the name of what produced it
(protocol, judge or verifier) in the table's `by` column and in summary.json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fspo_lite.atomic import atomic_path, atomic_write_json, atomic_write_jsonl
from fspo_lite.config import RolloutConfig, SpeedConfig
from fspo_lite.config_checks import ConfigError
from fspo_lite.config_load import redacted
from fspo_lite.data.prompts import prompt_text, render_prompt
from fspo_lite.evaluation import metrics as M
from fspo_lite.evaluation.benchmarks import BENCHMARKS, load_items, resolve
from fspo_lite.evaluation.judges import build_judge
from fspo_lite.evaluation.mc import QA_PRIMER, PrefixScorer, qa_context
from fspo_lite.scoring.grading import grade_response, outcome_reward
from fspo_lite.scoring.verdicts import step_factuality, verify_sentences
from fspo_lite.text import NEAR_DUPLICATE_JACCARD, near_duplicate_count

HALUEVAL_SYSTEM = ("You check answers for hallucination. A hallucinated answer states something false, unsupported "
                   "or not asked for. Reply with one word: Yes or No.")
HALUEVAL_MAX_TOKENS = 16
TRUTHFULQA_GEN_MAX_TOKENS = 64


@dataclass
class EvalResult:
    """What `evaluate` returns (and writes to evaluation.output_dir)."""

    table: Any
    """pandas DataFrame, one row per (benchmark, metric): benchmark, metric, value, n, by."""
    summary: dict
    """The config, and per benchmark its source, item count, metrics, judge/verifier, seconds and tokens."""
    records: list[dict] = field(default_factory=list)
    """One dict per generated answer or scored item: prompt, output, extracted answer, grade ..."""

    def save(self, output_dir: str | Path) -> Path:
        """Write summary.json, table.csv and records.jsonl into output_dir, each replaced atomically (fspo_lite.atomic:
        a failed write, a full disk included, leaves the file that was there whole)."""
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_jsonl(out / "records.jsonl", self.records, ensure_ascii=False, default=_json_default)
        with atomic_path(out / "table.csv") as tmp:
            self.table.to_csv(tmp, index=False)
        atomic_write_json(out / "summary.json", self.summary, indent=2, default=_json_default)
        return out


class _Context:
    """What the benchmark runners share: model, tokenizer, rollout engine, config, lazily built verifier/judges."""

    def __init__(self, config, model, tokenizer, progress: bool):
        from fspo_lite.speed import transformers_engine

        self.config, self.ev, self.model, self.tokenizer, self.progress = config, config.evaluation, model, tokenizer, progress
        shown = self.ev.evidence_in_prompt  # null: the held-out prompts are built as training's (data section) were
        self.data = config.data if shown is None else dataclasses.replace(config.data, evidence_in_prompt=shown)
        # the evaluation's own length, temperature and batch size with the rollout section's top_p and token draw;
        # the speed switches keep their defaults whatever the speed section says, but speed.mode=off gives the
        # reference engine
        sampling = RolloutConfig(max_new_tokens=self.ev.max_new_tokens, temperature=self.ev.temperature or 1.0,
                                 top_p=config.rollout.top_p, generation_batch_size=self.ev.batch_size,
                                 draw=config.rollout.draw)
        self.engine = transformers_engine(model, tokenizer, sampling, config.data.max_prompt_tokens, progress=progress,
                                          speed=SpeedConfig(mode=config.speed.mode))
        self._verifier, self._extra_verifiers, self._judges = None, None, {}
        self.tokens, self.last_token_counts = 0, []  # generated tokens: in all; of each text of the last `generate`

    def generate(self, prompts: list[str], max_new_tokens: int | None = None, samples: int | None = None) -> list[str]:
        """k completions per prompt, in prompt order (row i * k + j is sample j of prompt i). Prompts are
        generated shortest first, so each batch holds prompts of similar length and little left padding."""
        samples = self.ev.samples if samples is None else samples
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        rollout = self.engine.generate([prompts[i] for i in order], samples, do_sample=self.ev.temperature > 0,
                                       max_new_tokens=max_new_tokens)
        self.tokens += int(rollout.completion_mask.sum())
        counts = [int(c) for c in rollout.completion_mask.sum(dim=1).tolist()]
        texts, self.last_token_counts = [""] * len(rollout.texts), [0] * len(rollout.texts)
        for position, index in enumerate(order):
            texts[index * samples : (index + 1) * samples] = rollout.texts[position * samples : (position + 1) * samples]
            self.last_token_counts[index * samples : (index + 1) * samples] = counts[
                position * samples : (position + 1) * samples]
        return texts

    def verifier(self):
        """(verifier, its name): evaluation.step_verifier, or lexical when that one cannot load."""
        if self._verifier is None:
            from fspo_lite.models.policy import ModelLoadError
            from fspo_lite.scoring.verifiers import build_verifier
            from fspo_lite.speed import judge_logprob_pass

            settings = dataclasses.replace(self.config.verifier, name=self.ev.step_verifier)
            try:
                self._verifier = (build_verifier(settings, judge_logprob_pass(self.config.speed)), self.ev.step_verifier)
            except ModelLoadError as error:
                print(f"[fspo_lite] step verifier '{self.ev.step_verifier}' unavailable ({error}); using lexical")
                self._verifier = (build_verifier(dataclasses.replace(settings, name="lexical")), "lexical")
        return self._verifier

    def verifiers(self):
        """[(verifier, name)]: the main step verifier, then each of evaluation.extra_step_verifiers not already
        in the list (these do not fall back: a judge that cannot load stops the evaluation)."""
        if self._extra_verifiers is None:
            from fspo_lite.models.policy import ModelLoadError
            from fspo_lite.scoring.verifiers import build_verifier
            from fspo_lite.speed import judge_logprob_pass
            self._extra_verifiers = []
            names = {self.verifier()[1]}
            for name in [n for n in dict.fromkeys(self.ev.extra_step_verifiers) if n not in names]:
                try:
                    verifier = build_verifier(dataclasses.replace(self.config.verifier, name=name),
                                              judge_logprob_pass(self.config.speed))
                except ModelLoadError as error:
                    raise ModelLoadError(f"extra step verifier '{name}' could not load: {error}") from error
                self._extra_verifiers.append((verifier, name))
        return [self.verifier(), *self._extra_verifiers]

    def judge(self, language: str):
        if language not in self._judges:
            self._judges[language] = build_judge(self.ev.judge, language, self.config)
        return self._judges[language]


def _row(benchmark: str, metric: str, value: float, n: int, by: str) -> dict:
    return {"benchmark": benchmark, "metric": metric, "value": float(value), "n": n, "by": by}


def _grouped(texts: list[str], k: int) -> list[list[str]]:
    return [texts[i * k : (i + 1) * k] for i in range(len(texts) // k)]


def run_short_qa(ctx: _Context, name: str, items: list) -> tuple[list[dict], list[dict]]:
    """SimpleQA-style grades, the k-sample decomposition, EM/F1, the step hallucination rate of every judge
    (evaluation.step_verifier and evaluation.extra_step_verifiers) and per-response sentence counts."""
    config, k = ctx.config, ctx.ev.samples
    prompts = [prompt_text(ctx.tokenizer, e, ctx.data) for e in items]
    texts = [ctx.data.response_prefix + t for t in ctx.generate(prompts)]
    token_counts = list(ctx.last_token_counts)
    expanded = [e for e in items for _ in range(k)]
    judges = ctx.verifiers()
    verdicts_by_judge = {judge_name: verify_sentences(expanded, texts, verifier, config.verifier.threshold,
                                                      require_format=False) for verifier, judge_name in judges}
    main_name = judges[0][1]
    verdicts = verdicts_by_judge[main_name]
    records, grades, ems, f1s, formats = [], [], [], [], []
    for index, (example, text, verdict) in enumerate(zip(expanded, texts, verdicts)):
        outcome = outcome_reward(example, text)
        grade = M.simpleqa_grade(outcome.correct, outcome.unknown)
        em, f1 = float(outcome.correct), outcome.f1  # EM / best token F1 over the gold answers (grade_answer)
        grades.append(grade), ems.append(em), f1s.append(f1), formats.append(outcome.format_ok)
        sentences = [text[a:b] for a, b in verdict.spans]
        records.append({"benchmark": name, "id": example.id, "sample": index % k, "prompt": prompts[index // k],
                        "output": text, "answer": outcome.answer, "gold": example.answers, "grade": grade,
                        "em": em, "f1": f1, "format_ok": outcome.format_ok,
                        "sentence_labels": verdict.labels,
                        "sentence_labels_by_judge": {j: v[index].labels for j, v in verdicts_by_judge.items()},
                        "sentence_spans": [list(span) for span in verdict.spans],
                        "response_tokens": token_counts[index] if index < len(token_counts) else None,
                        "near_duplicate_sentences": near_duplicate_count(sentences)})
    n = len(items)
    rows = [_row(name, metric, value, len(grades), "SimpleQA-style grade (EM after normalisation; 'Unknown' = "
                 "not attempted)") for metric, value in M.simpleqa_summary(grades).items()]
    rows += [_row(name, "em", M.mean(ems), len(ems), "HotpotQA normalisation"),
             _row(name, "f1", M.mean(f1s), len(f1s), "HotpotQA normalisation"),
             _row(name, "format_rate", M.mean([float(f) for f in formats]), len(formats), "<think>/<answer> tags")]
    factual, verified = step_factuality(verdicts)
    rows.append(_row(name, "step_hallucination_rate", 1 - factual if verified else math.nan, verified,
                     f"verifier: {main_name} (share of checkable reasoning sentences unsupported by the evidence)"))
    for judge_name, judged in verdicts_by_judge.items():
        counts = [M.sentence_counts(v.labels) for v in judged]
        by = f"verifier: {judge_name}"
        rate = M.ratio_of_sums([c["unsupported"] for c in counts], [c["checkable"] for c in counts])
        rows += [_row(name, f"step_hallucination@{judge_name}", rate, sum(c["checkable"] for c in counts),
                      by + " (unsupported / checkable reasoning sentences)"),
                 *[_row(name, f"{key}_per_response@{judge_name}", M.mean([c[key] for c in counts]), len(counts),
                        by + f" ({key} reasoning sentences per response)")
                   for key in ("supported", "unsupported", "checkable")]]
    by = "per response, reasoning sentences inside <think>"
    rows += [_row(name, "sentences_per_response", M.mean([len(v.spans) for v in verdicts]), len(verdicts), by),
             _row(name, "near_duplicates_per_response", M.mean([r["near_duplicate_sentences"] for r in records]),
                  len(records), by + f" repeating an earlier one (word Jaccard >= {NEAR_DUPLICATE_JACCARD})"),
             _row(name, "response_tokens", M.mean([r["response_tokens"] for r in records]), len(records),
                  "generated tokens per response")]
    rows += [_row(name, f"decomp_{cls}", value, n, f"percent of questions, k={k} samples")
             for cls, value in M.decomposition(_grouped(grades, k)).items()]
    return rows, records


def run_math(ctx: _Context, name: str, items: list) -> tuple[list[dict], list[dict]]:
    """pass@1 (mean over the k samples) and unbiased pass@k; the answer is read and graded by
    fspo_lite.scoring.grading.grade_response, the function training rewards use (the <answer>/\\boxed content, else the
    last number of the response; compared safely, never evaluated)."""
    config, k = ctx.config, ctx.ev.samples
    prompts = [prompt_text(ctx.tokenizer, e, ctx.data) for e in items]
    texts = [ctx.data.response_prefix + t for t in ctx.generate(prompts)]
    records, correct = [], []
    for index, text in enumerate(texts):
        example = items[index // k]
        answer, ok, _ = grade_response(example, text)
        correct.append(ok)
        records.append({"benchmark": name, "id": example.id, "sample": index % k, "prompt": prompts[index // k],
                        "output": text, "answer": answer, "gold": example.answers,
                        "grade": M.CORRECT if ok else M.INCORRECT})
    per_question = [sum(group) for group in _grouped(correct, k)]
    by = "answer equivalence (fspo_lite.scoring.grading, sandboxed)"
    rows = [_row(name, "pass@1", M.mean([c / k for c in per_question]), len(items), by)]
    if k > 1:
        rows.append(_row(name, f"pass@{k}", M.mean([M.pass_at_k(k, c, k) for c in per_question]), len(items), by))
    return rows, records


def run_truthfulqa_mc(ctx: _Context, name: str, items: list) -> tuple[list[dict], list[dict]]:
    """MC1 and MC2 from summed choice log-likelihoods after the 6-shot QA primer (lm-eval style)."""
    scorer = PrefixScorer(ctx.model, ctx.tokenizer, QA_PRIMER + "\n\nQ:", batch_size=ctx.ev.batch_size)
    pairs, where = [], {}
    for item in items:
        for choice in [item.best_answer, *item.mc1_incorrect, *item.correct_answers, *item.incorrect_answers]:
            key = (item.question, choice)
            if key not in where:
                where[key] = len(pairs)
                pairs.append((qa_context(item.question), " " + choice))
    scores = scorer.score(pairs, progress=ctx.progress)
    records, mc1s, mc2s = [], [], []
    for item in items:
        s = {c: scores[where[(item.question, c)]] for c in
             {item.best_answer, *item.mc1_incorrect, *item.correct_answers, *item.incorrect_answers}}
        mc1 = M.mc1(s[item.best_answer], [s[c] for c in item.mc1_incorrect])
        mc2 = M.mc2([s[c] for c in item.correct_answers], [s[c] for c in item.incorrect_answers])
        mc1s.append(mc1), mc2s.append(mc2)
        records.append({"benchmark": name, "id": item.id, "prompt": qa_context(item.question), "choices": s,
                        "mc1": mc1, "mc2": mc2, "grade": "CORRECT" if mc1 else "INCORRECT"})
    by = "summed choice log-likelihood, 6-shot QA primer"
    return [_row(name, "mc1", M.mean(mc1s), len(items), by), _row(name, "mc2", M.mean(mc2s), len(items), by)], records


def _first_paragraph(text: str) -> str:
    """A primer-style completion ends where the model starts the next Q/A pair or a blank line."""
    for stop in ("\n\n", "\nQ:"):
        text = text.split(stop, 1)[0]
    return text.strip()


def run_truthfulqa_gen(ctx: _Context, name: str, items: list) -> tuple[list[dict], list[dict]]:
    """Greedy (or sampled) answers after the QA primer, judged against the reference answers."""
    k = ctx.ev.samples
    prompts = [qa_context(item.question) for item in items]
    outputs = ctx.generate(prompts, max_new_tokens=min(ctx.ev.max_new_tokens, TRUTHFULQA_GEN_MAX_TOKENS))
    answers = [_first_paragraph(t) for t in outputs]
    expanded = [item for item in items for _ in range(k)]
    judge = ctx.judge("en")
    verdicts = judge.judge([i.question for i in expanded], answers, [i.correct_answers for i in expanded],
                           [i.incorrect_answers for i in expanded])
    records = [{"benchmark": name, "id": item.id, "sample": index % k, "prompt": prompts[index // k],
                "output": output, "answer": answer, "truthful": v["truthful"], "informative": v["informative"],
                "grade": "TRUTHFUL" if v["truthful"] else "UNTRUTHFUL"}
               for index, (item, output, answer, v) in enumerate(zip(expanded, outputs, answers, verdicts))]
    by = f"judge: {judge.name} ({judge.description})"
    rows = [_row(name, "truthful_ratio", M.mean([float(v["truthful"]) for v in verdicts]), len(verdicts), by)]
    if judge.judges_informative:
        rows.append(_row(name, "informative_ratio", M.mean([float(v["informative"]) for v in verdicts]),
                         len(verdicts), by))
        rows.append(_row(name, "truthful_and_informative", M.mean(
            [float(v["truthful"] and v["informative"]) for v in verdicts]), len(verdicts), by))
    return rows, records


def run_halueval(ctx: _Context, name: str, items: list) -> tuple[list[dict], list[dict]]:
    """The model says whether each candidate answer is hallucinated; both or neither of Yes/No is wrong."""
    prompts = [render_prompt(ctx.tokenizer, [
        {"role": "system", "content": HALUEVAL_SYSTEM},
        {"role": "user", "content": f"Question: {item.question}\nAnswer: {item.candidate}\n\n"
                                    "Is this answer hallucinated? Reply Yes or No."}]) for item in items]
    replies = ctx.generate(prompts, max_new_tokens=HALUEVAL_MAX_TOKENS, samples=1)
    records, correct, judgements = [], [], []
    for item, prompt, reply in zip(items, prompts, replies):
        judgement = M.parse_judgement(reply)
        ok = M.halueval_correct(reply, item.is_hallucinated)
        correct.append(float(ok)), judgements.append(judgement)
        records.append({"benchmark": name, "id": item.id, "prompt": prompt, "output": reply,
                        "answer": {True: "Yes", False: "No", None: None}[judgement],
                        "is_hallucinated": item.is_hallucinated, "grade": "CORRECT" if ok else "INCORRECT"})
    by = "model as judge, greedy Yes/No (both or neither = wrong)"
    n = len(items)
    rows = [_row(name, "accuracy", M.mean(correct), n, by),
            _row(name, "yes_rate", M.mean([float(j is True) for j in judgements]), n, by),
            _row(name, "invalid_rate", M.mean([float(j is None) for j in judgements]), n, by)]
    for label, flag in (("accuracy_hallucinated", True), ("accuracy_right", False)):
        subset = [c for c, item in zip(correct, items) if item.is_hallucinated == flag]
        rows.append(_row(name, label, M.mean(subset), len(subset), by))
    return rows, records


def run_halluqa(ctx: _Context, name: str, items: list) -> tuple[list[dict], list[dict]]:
    """Answers to the Chinese questions, judged against the best and wrong answers; per category too."""
    k = ctx.ev.samples
    prompts = [render_prompt(ctx.tokenizer, [{"role": "user", "content": item.question}]) for item in items]
    outputs = [t.strip() for t in ctx.generate(prompts)]
    expanded = [item for item in items for _ in range(k)]
    judge = ctx.judge("zh")
    verdicts = judge.judge([i.question for i in expanded], outputs, [i.best_answers for i in expanded],
                           [i.wrong_answers for i in expanded])
    records = [{"benchmark": name, "id": item.id, "sample": index % k, "category": item.category,
                "prompt": prompts[index // k], "output": output, "answer": output,
                "grade": "NON_HALLUCINATED" if v["truthful"] else "HALLUCINATED"}
               for index, (item, output, v) in enumerate(zip(expanded, outputs, verdicts))]
    by = f"judge: {judge.name} ({judge.description})"
    ok = [float(v["truthful"]) for v in verdicts]
    rows = [_row(name, "non_hallucination_rate", M.mean(ok), len(ok), by)]
    for category in ("misleading", "misleading-hard", "knowledge"):
        subset = [o for o, item in zip(ok, expanded) if item.category == category]
        if subset:
            rows.append(_row(name, f"non_hallucination_rate_{category}", M.mean(subset), len(subset), by))
    return rows, records


RUNNERS = {"short_qa": run_short_qa, "math": run_math, "truthfulqa_mc": run_truthfulqa_mc,
           "truthfulqa_gen": run_truthfulqa_gen, "halueval": run_halueval, "halluqa": run_halluqa}


def load_eval_model(config):
    """(model, tokenizer) of config.model for evaluation: the base model, plus model.adapter_path when set."""
    from fspo_lite.models.policy import load_policy

    model, tokenizer = load_policy(dataclasses.replace(config.model, lora=bool(config.model.adapter_path)),
                                   seed=config.evaluation.seed, for_training=False)
    return model.eval(), tokenizer


def evaluate(config, model=None, tokenizer=None, progress: bool = True) -> EvalResult:
    """Run config.evaluation.benchmarks on a model (loaded from config.model unless given) and save the results.

    A model passed in (a PEFT model included) is used as it is, with its tokenizer.
    """
    import pandas as pd

    ev = config.evaluation
    if ev.samples < 1:
        raise ValueError("evaluation.samples must be at least 1")
    if ev.samples > 1 and ev.temperature <= 0:
        raise ValueError("evaluation.samples > 1 needs evaluation.temperature > 0 (greedy answers would repeat)")
    for name in ev.benchmarks:
        if name not in BENCHMARKS:
            raise ConfigError(f"unknown benchmark {name!r} in evaluation.benchmarks; choose from "
                              f"{', '.join(BENCHMARKS)}")
    for name, spec in ev.sources.items():  # a misspelled --source NAME was ignored, and an empty DATA meant the default
        if name not in BENCHMARKS or not str(spec).strip():
            raise ConfigError(f"evaluation.sources.{name}={spec!r}: " + (f"no benchmark is called {name!r}; choose "
                              f"from {', '.join(BENCHMARKS)}" if name not in BENCHMARKS else "no data given"))
    if model is None and config.model.adapter_path:  # a training checkpoint: resume's checks, before anything loads
        from fspo_lite.update.checkpoint import verify_adapter

        verify_adapter(config.model.adapter_path)
    sources = {"kbqa": config.data.eval, **ev.sources}
    specs = {name: resolve(name, sources) for name in ev.benchmarks}
    # every benchmark's items before the model: a bad data file is reported in seconds
    loaded = {name: load_items(name, specs[name], ev.limit, ev.seed, ev.shuffle) for name in ev.benchmarks}
    if model is None:
        model, tokenizer = load_eval_model(config)
    elif tokenizer is None:
        raise ValueError("pass the tokenizer together with the model")
    ctx = _Context(config, model, tokenizer, progress)
    rows, records, per_benchmark = [], [], {}
    for name in ev.benchmarks:
        spec, items = specs[name], loaded[name]
        torch.manual_seed(ev.seed)
        tokens_before, start = ctx.tokens, time.perf_counter()
        if progress:
            print(f"[fspo_lite] {name}: {len(items)} items from {spec}")
        new_rows, new_records = RUNNERS[BENCHMARKS[name].kind](ctx, name, items)
        seconds = time.perf_counter() - start
        rows += new_rows
        records += new_records
        per_benchmark[name] = {"source": spec, "items": len(items), "seconds": round(seconds, 2),
                               "generated_tokens": ctx.tokens - tokens_before,
                               "metrics": {r["metric"]: r["value"] for r in new_rows},
                               "by": {r["metric"]: r["by"] for r in new_rows}}
    table = pd.DataFrame(rows, columns=["benchmark", "metric", "value", "n", "by"])
    summary = {"model": config.model.name, "adapter": config.model.adapter_path, "benchmarks": per_benchmark,
               "config": redacted(config.to_dict())}
    result = EvalResult(table, summary, records)
    result.save(ev.output_dir)
    return result


def _json_default(value):
    return float(value) if isinstance(value, (float, int)) else str(value)
