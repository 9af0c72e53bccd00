"""The quantities the evidence-in-the-prompt readings need beyond the study's metrics (docs/statistics.md, "Evidence
in the prompt, and the flip's escape closed"), each a pure function of one held-out record, and the cells they make.

Per response, with the primary judge's labels (kb):

- *padding*: judge-supported reasoning sentences that contain no gold answer alias (both normalised as the grader
  normalises, `fspo_lite.text.normalize_answer`, and matched as whole words): supported, but not the asked attribute;
- *copied*: reasoning sentences whose word set (lower-cased letters and digits, `fspo_lite.text.sentence_words`) has
  Jaccard similarity >= 0.8 with a sentence of the evidence the prompt showed;
- *bare name*: the response has no reasoning sentence the judge can check;
- *near-duplicates*: reasoning sentences that repeat an earlier one (`fspo_lite.text.near_duplicate_count`);
- *cut*: the response's generated tokens equal the run's `evaluation.max_new_tokens` (it hit the limit);
- *not checkable*: reasoning sentences the judge cannot check; *malformed*: the answer is not well-formed.

A record is read as the evaluation wrote it, but nothing in it is trusted: a field of the wrong type counts as absent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from fspo_lite.config_checks import ConfigError
from fspo_lite.config_load import read_config_mapping
from fspo_lite.evaluation.result_files import ResultFileError, read_heldout, read_json_file, read_records
from fspo_lite.text import (NEAR_DUPLICATE_JACCARD, near_duplicate_count, normalize_answer, sentence_spans,
                            sentence_words, word_jaccard)

COPY_JACCARD = NEAR_DUPLICATE_JACCARD
"""A reasoning sentence is copied from the evidence at this word-set Jaccard similarity or more (0.8)."""
EVIDENCE_OPEN, QUESTION_OPEN = "Evidence:\n", "\n\nQuestion:"
"""How the open-book user message frames the evidence (fspo_lite.data.prompts.user_message)."""
EXTRA_METRICS = ("padding_per_response@{j}", "copied_share", "bare_name@{j}", "near_duplicates_per_response",
                 "uncheckable_per_response@{j}", "malformed", "cut_at_limit")
"""The cells `evidence_cells` makes ({j}: the judge). near_duplicates_per_response is counted again from the
sentences, by the function the evaluation counts it with, so it equals the study's metric of that name."""


def evidence_sentences(prompt: Any) -> list[str]:
    """The sentences of the evidence shown in the prompt's last user message (between 'Evidence:' and
    'Question:'); [] for a closed-book prompt or anything that is not a string."""
    if not isinstance(prompt, str):
        return []
    start = prompt.rfind(EVIDENCE_OPEN)
    if start < 0:
        return []
    text = prompt[start + len(EVIDENCE_OPEN):]
    end = text.rfind(QUESTION_OPEN)
    if end < 0:
        return []
    text = text[:end]
    return [text[a:b] for a, b in sentence_spans(text)]


def reasoning_texts(record: Any) -> list[str]:
    """The text of each reasoning sentence of a record (output[start:end] of its sentence_spans); a span that is not
    two whole numbers inside the output is left out."""
    if not isinstance(record, dict):
        return []
    output, spans = record.get("output"), record.get("sentence_spans")
    if not isinstance(output, str) or not isinstance(spans, list):
        return []
    return [output[s[0]:s[1]] for s in spans if isinstance(s, (list, tuple)) and len(s) == 2
            and all(type(x) is int for x in s) and 0 <= s[0] <= s[1] <= len(output)]


def gold_aliases(gold: Any) -> list[str]:
    """The gold answers, normalised as the grader normalises, empty ones dropped: a string or a list of strings
    (anything else: none)."""
    golds = [gold] if isinstance(gold, str) else gold if isinstance(gold, list) else []
    return [n for n in (normalize_answer(g) for g in golds if isinstance(g, str)) if n]


def states_answer(sentence: str, aliases: Sequence[str]) -> bool:
    """Whether a sentence contains one of the normalised gold aliases as whole words ('o' is in 'symbol of O.',
    not in 'oxygen')."""
    words = f" {normalize_answer(sentence)} "
    return any(f" {alias} " in words for alias in aliases)


def padding_count(sentences: Sequence[str], labels: Sequence[int], aliases: Sequence[str]) -> int:
    """Supported sentences (label > 0) that state no gold alias: supported, but not the asked attribute."""
    return sum(1 for text, label in zip(sentences, labels) if label > 0 and not states_answer(text, aliases))


def copied_count(sentences: Sequence[str], evidence: Sequence[str], threshold: float = COPY_JACCARD) -> int:
    """Sentences whose word set has Jaccard similarity >= threshold with some evidence sentence's (a sentence
    without words copies nothing)."""
    sources = [w for w in (sentence_words(e) for e in evidence) if w]
    count = 0
    for text in sentences:
        words = sentence_words(text)
        count += bool(words) and any(word_jaccard(words, source) >= threshold for source in sources)
    return count


def is_bare(labels: Sequence[int]) -> bool:
    """True when no reasoning sentence is checkable (every label 0, or no sentence): a bare name or no reasoning."""
    return not any(labels)


def is_cut(response_tokens: Any, max_new_tokens: Any) -> float:
    """1.0 when the response's generated tokens equal the token limit, 0.0 when not, NaN when either is unknown
    (not a whole number)."""
    whole = [type(x) is int and x >= 0 for x in (response_tokens, max_new_tokens)]
    return float(response_tokens == max_new_tokens) if all(whole) and max_new_tokens > 0 else math.nan


def judge_of(record: dict, judge: str) -> list[int] | None:
    """The record's labels by `judge` (sentence_labels_by_judge), None when it has none or they are not labels."""
    labels = (record.get("sentence_labels_by_judge") or {}).get(judge) if isinstance(record, dict) else None
    if not isinstance(labels, list) or not all(type(x) is int and x in (-1, 0, 1) for x in labels):
        return None
    return labels


def response_quantities(record: dict, judge: str, max_new_tokens: Any = None) -> dict | None:
    """Every quantity above for one held-out record, counted with `judge`'s labels; None when the record carries no
    labels by that judge."""
    labels = judge_of(record, judge)
    if labels is None:
        return None
    texts = reasoning_texts(record)
    sentences = len(record.get("sentence_spans") or []) if isinstance(record.get("sentence_spans"), list) else 0
    sentences = max(sentences, len(labels))
    return {"sentences": sentences, "texts": len(texts), "checkable": sum(1 for x in labels if x),
            "padding": padding_count(texts, labels, gold_aliases(record.get("gold"))),
            "copied": copied_count(texts, evidence_sentences(record.get("prompt"))),
            "bare": float(is_bare(labels)), "near_duplicates": near_duplicate_count(texts),
            "uncheckable": sentences - sum(1 for x in labels if x),
            "malformed": float(record.get("format_ok") is not True),
            "cut": is_cut(record.get("response_tokens"), max_new_tokens)}


def run_settings(run: Path) -> dict:
    """From a run's config.yaml: max_new_tokens (evaluation.max_new_tokens, None when absent), evidence_in_prompt
    (data.evidence_in_prompt, False when absent: the training prompt) and heldout_evidence (whether the held-out
    prompts showed the evidence: evaluation.evidence_in_prompt when it is true or false, else as training's, as the
    harness builds them). A file that is not a YAML mapping, or a limit that is not a positive whole number, is
    refused in one line."""
    path = Path(run) / "config.yaml"
    if not path.exists():
        return {"max_new_tokens": None, "evidence_in_prompt": False, "heldout_evidence": False}
    try:
        config = read_config_mapping(path)
    except ConfigError as error:
        raise ResultFileError(str(error)) from None
    evaluation, data = (config.get(key) if isinstance(config.get(key), dict) else {} for key in ("evaluation", "data"))
    limit = evaluation.get("max_new_tokens")
    if limit is not None and not (type(limit) is int and limit > 0):
        raise ResultFileError(f"{path}: evaluation.max_new_tokens={limit!r} is not valid; valid: a whole number > 0")
    asked = evaluation.get("evidence_in_prompt")
    if asked is not None and not isinstance(asked, bool):
        raise ResultFileError(f"{path}: evaluation.evidence_in_prompt={asked!r} is not valid; valid: true, false or null")
    shown = data.get("evidence_in_prompt") is True
    return {"max_new_tokens": limit, "evidence_in_prompt": shown,
            "heldout_evidence": shown if asked is None else asked}


def other_prompt_arms(runs_dir: str | Path, reference: str) -> list[str]:
    """The arms whose held-out prompts differ from `reference`'s (the study's baseline arm; closed-book when it has
    no run) in showing the evidence (`run_settings`' heldout_evidence), sorted. The study's main tables compare
    arms asked the same way, so the report sets these aside for its evidence section. An arm whose runs were asked
    both ways is among them; the base model (no config.yaml of its own) is not."""
    shown: dict[str, set[bool]] = {}
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        method = read_heldout(path)["method"]
        if method != "base":
            shown.setdefault(method, set()).add(run_settings(path.parent)["heldout_evidence"])
    asked = shown.get(reference, {False})
    return sorted(method for method, flags in shown.items() if flags != asked)


def without_arms(frame: pd.DataFrame, arms: Sequence[str]) -> pd.DataFrame:
    """`frame` without the rows of `arms` (its "method" column); a frame without that column, as an empty training
    log, as it is."""
    return frame[~frame["method"].isin(arms)] if "method" in frame else frame


def evidence_responses(runs_dir: str | Path, arms: Sequence[str], judge: str = "kb", qa: str = "kbqa") -> pd.DataFrame:
    """One row per held-out `qa` response of every run of `arms`: method, seed, run, question, the quantities above
    (NaN where the record has no `judge` labels: column `judged` is 0 then), and the run's evidence_in_prompt and
    heldout_evidence (`run_settings`)."""
    rows = []
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        records = path.parent / "eval" / "records.jsonl"
        info = read_heldout(path)
        if info["method"] not in arms or not records.exists():
            continue
        settings = run_settings(path.parent)
        for record in read_records(records):
            if record.get("benchmark") != qa:
                continue
            found = response_quantities(record, judge, settings["max_new_tokens"])
            rows.append({"method": info["method"], "seed": -1 if info.get("seed") is None else int(info["seed"]),
                         "run": path.parent.name, "question": record.get("id"), "judged": float(found is not None),
                         "evidence_in_prompt": settings["evidence_in_prompt"],
                         "heldout_evidence": settings["heldout_evidence"], **(found or {})})
    columns = ["method", "seed", "run", "question", "judged", "evidence_in_prompt", "heldout_evidence", "sentences",
               "texts", "checkable", "padding", "copied", "bare", "near_duplicates", "uncheckable", "malformed", "cut"]
    return pd.DataFrame(rows).reindex(columns=columns)


def evidence_cells(responses: pd.DataFrame, judge: str = "kb") -> pd.DataFrame:
    """The EXTRA_METRICS as numerator and denominator per (method, seed, question) cell, the form the study's
    bootstrap reads (responses without `judge` labels are left out; a cut the limit of which is unknown too)."""
    keys = ["method", "seed", "question"]
    judged = responses[responses["judged"] > 0].assign(one=1.0)
    judged = judged.assign(known=judged["cut"].notna().astype(float), cut=judged["cut"].fillna(0.0))
    specs = {f"padding_per_response@{judge}": ("padding", "one"), "copied_share": ("copied", "texts"),
             f"bare_name@{judge}": ("bare", "one"), "near_duplicates_per_response": ("near_duplicates", "one"),
             f"uncheckable_per_response@{judge}": ("uncheckable", "one"), "malformed": ("malformed", "one"),
             "cut_at_limit": ("cut", "known")}
    if judged.empty:
        return pd.DataFrame(columns=["metric", *keys, "num", "den"])
    sums = judged.groupby(keys, sort=False)[["padding", "copied", "texts", "bare", "near_duplicates", "uncheckable",
                                             "malformed", "cut", "known", "one"]].sum()
    frames = [pd.DataFrame({"metric": metric, "num": sums[num], "den": sums[den]}).reset_index()
              for metric, (num, den) in specs.items()]
    return pd.concat(frames, ignore_index=True)[["metric", *keys, "num", "den"]]


def zero_spread(training: pd.DataFrame, arms: Sequence[str]) -> dict:
    """The share of training groups without reward spread (`frac_reward_zero_std`), mean over the steps and seeds of
    `arms` together ("pooled") and per arm; NaN where the logs carry none."""
    column = "frac_reward_zero_std"
    if training.empty or column not in training or "method" not in training:
        return {"pooled": math.nan, **{arm: math.nan for arm in arms}}
    values = pd.to_numeric(training[column], errors="coerce")
    values = values.where((values >= 0) & (values <= 1))  # a share; anything else is not read
    rows = training.assign(value=values)
    pooled = rows[rows["method"].isin(arms)]["value"].mean()
    return {"pooled": float(pooled), **{arm: float(rows[rows["method"] == arm]["value"].mean()) for arm in arms}}


def same_training(training: pd.DataFrame, arm: str, reference: str, column: str = "reward_mean") -> list[int]:
    """The seeds whose `arm` run logged the same `column` at every step as `reference`'s run of that seed (same
    steps, equal values): where a retrained arm repeated the other's training draw for draw. A seed either arm lacks,
    or logs without the column, is not among them."""
    if training.empty or not {"method", "seed", "step", column} <= set(training.columns):
        return []
    same = []
    for seed in sorted(training.loc[training["method"] == arm, "seed"].dropna().unique()):
        logs = [training[(training["method"] == m) & (training["seed"] == seed)].sort_values("step")
                for m in (arm, reference)]
        if all(len(x) for x in logs) and logs[0]["step"].tolist() == logs[1]["step"].tolist() and \
                logs[0][column].tolist() == logs[1][column].tolist():
            same.append(int(seed))
    return same


def read_preflight(path: str | Path) -> dict | None:
    """The pre-flight's reading (scripts/preflight_ctx.py writes it): share and counts of kb-supported second
    sentences, its interval and whether the gate passed; None when there is no file. A field of the wrong type or
    out of range is refused in one line."""
    path = Path(path)
    if not path.exists():
        return None
    found, _ = read_json_file(path)
    if not isinstance(found, dict):
        raise ResultFileError(f"{path}:1: not a pre-flight reading (a JSON object)")
    share, interval = found.get("second_supported_share"), found.get("interval_95")
    counts = [found.get(k) for k in ("second_supported", "second_sentences")]
    ok = (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1
          and all(type(c) is int and c >= 0 for c in counts) and counts[0] <= counts[1]
          and isinstance(interval, list) and len(interval) == 2
          and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in interval)
          and isinstance(found.get("passes"), bool))
    if not ok:
        raise ResultFileError(f"{path}: not a valid pre-flight reading; valid: second_supported_share and "
                              "interval_95 shares, second_supported <= second_sentences whole numbers, passes true/false")
    return {"share": float(share), "low": float(interval[0]), "high": float(interval[1]), "supported": counts[0],
            "sentences": counts[1], "passes": found["passes"],
            "gate": found["gate"] if type(found.get("gate")) is float and 0 <= found["gate"] <= 1 else None}
