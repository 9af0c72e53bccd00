"""The blind audit: held-out reasoning sentences of two methods, labeled by a person without knowing which model
wrote them, then unblinded and compared (docs/statistics.md, "The blind audit").

    python -m fspo_lite audit sample --runs results/study/runs --methods grpo,fspo --n 150 \
        --out results/study/audit_items.jsonl --key results/study/audit_key.json
    # label audit_items.jsonl (notebook 02's LabelingSession, data/gold_sentences.md's protocol), then
    python -m fspo_lite audit score --items results/study/audit_items.jsonl --key results/study/audit_key.json

    # the second audit: four methods, stratified by question (the same questions for every method)
    python -m fspo_lite audit sample --runs results/study/runs --methods grpo,fspo,corver,fspo+4x --n 160 \
        --stratify question --prefix audit2 --out results/study/audit2_items.jsonl --key results/study/audit2_key.json

`sample` draws the same number of sentences from each method's held-out records (all seeds pooled, seeded; with
`--stratify question`, one sentence per method from each of a seeded list of questions that every method
answered, so that every method is read on the same questions and no question weighs more than another),
shuffles them and writes two files: the items to label (labeling.SentenceItem lines: question, evidence,
the whole response, the sentence and its span; nothing that names the method, run or seed) and the key (item id
-> method, run, seed, question, sample, and the automatic judges' labels). `score` reads the labels, only then the
key, and reports each method's unsupported share of checkable sentences with a bootstrap interval clustered by
question, and every other method's difference from the first (the first pair's difference is the headline one). The functions are pure; the two commands are thin shells.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Sequence

from fspo_lite.atomic import atomic_path, atomic_write_text
from fspo_lite.data.labeling import LABEL_VALUES, SentenceItem, load_items, save_items
from fspo_lite.drivers.report.study import judge_labels
from fspo_lite.jsonl import read_jsonl


def collect_sentences(runs_dir: str | Path, methods: Sequence[str], qa: str = "kbqa") -> dict[str, list[dict]]:
    """Per method, every held-out reasoning sentence of its runs (<runs_dir>/<run>/heldout.json names the method;
    eval/records.jsonl holds the responses and the sentence spans the harness judged), with the judges' labels."""
    from fspo_lite.text import reasoning_sentences

    pools: dict[str, list[dict]] = {m: [] for m in methods}
    for path in sorted(Path(runs_dir).glob("*/heldout.json")):
        info = json.loads(path.read_text())
        if info.get("method") not in pools or not (path.parent / "eval" / "records.jsonl").exists():
            continue
        for record in read_jsonl(path.parent / "eval" / "records.jsonl"):
            if record.get("benchmark") != qa:
                continue
            spans = record.get("sentence_spans") or [list(s) for s in reasoning_sentences(record["output"])]
            labels = judge_labels(record, info.get("judge", "judge"))
            for k, (start, end) in enumerate(spans):
                pools[info["method"]].append({
                    "method": info["method"], "run": path.parent.name, "seed": info.get("seed"),
                    "question_id": record["id"], "sample": record.get("sample", 0), "response": record["output"],
                    "span": [start, end], "sentence": record["output"][start:end],
                    "judges": {j: (v[k] if k < len(v) else None) for j, v in labels.items()}})
    return pools


def draw_audit(pools: dict[str, list[dict]], n: int, seed: int = 0) -> list[dict]:
    """n sentences, n / len(pools) from each method drawn without replacement (seeded), in shuffled order."""
    per_method, remainder = divmod(n, len(pools))
    if remainder:
        raise ValueError(f"--n {n} does not split equally over {len(pools)} methods")
    rng = random.Random(seed)
    drawn = []
    for method, pool in pools.items():
        if len(pool) < per_method:
            raise ValueError(f"method {method!r} has {len(pool)} held-out reasoning sentences; the audit needs "
                             f"{per_method}")
        drawn += rng.sample(pool, per_method)
    rng.shuffle(drawn)
    return drawn


def draw_stratified(pools: dict[str, list[dict]], n: int, seed: int = 0) -> list[dict]:
    """n sentences stratified by question: n / len(pools) per method, one sentence per method from each question of
    a seeded shuffle of the questions every method has sentences on (a question is used again, with another
    sentence, only after every question has been used once); drawn without replacement, in shuffled order."""
    per_method, remainder = divmod(n, len(pools))
    if remainder:
        raise ValueError(f"--n {n} does not split equally over {len(pools)} methods")
    rng = random.Random(seed)
    by_question: dict[str, dict[str, list[dict]]] = {}
    for method, pool in pools.items():
        for entry in pool:
            by_question.setdefault(entry["question_id"], {m: [] for m in pools})[method].append(entry)
    questions = sorted(q for q, per in by_question.items() if all(per.values()))
    rng.shuffle(questions)
    left = {q: {m: rng.sample(entries, len(entries)) for m, entries in by_question[q].items()} for q in questions}
    drawn: list[dict] = []
    while len(drawn) < n:
        usable = [q for q in questions if all(left[q].values())]
        if not usable:
            raise ValueError(f"the methods share {len(questions)} questions with sentences, too few to draw "
                             f"{per_method} per method stratified by question")
        for question in usable[: per_method - len(drawn) // len(pools)]:
            drawn += [left[question][m].pop() for m in pools]
    rng.shuffle(drawn)
    return drawn


def blind_items(drawn: Sequence[dict], examples: dict, prefix: str = "audit") -> tuple[list[SentenceItem], dict]:
    """(items to label, key): unlabeled SentenceItems numbered in the drawn order, with the question and evidence of
    `examples` (question id -> QAExample) and no trace of the method; the key maps item ids to where each came from."""
    items, key = [], {}
    for number, entry in enumerate(drawn, start=1):
        example = examples.get(entry["question_id"])
        if example is None:
            raise ValueError(f"question {entry['question_id']!r} is not in the evaluation data; pass the file the "
                             "runs were evaluated on with --data")
        item_id = f"{prefix}-{number:04d}"
        items.append(SentenceItem(id=item_id, question=example.question, evidence=example.evidence,
                                  response=entry["response"], sentence=entry["sentence"], span=tuple(entry["span"]),
                                  meta={"example_id": entry["question_id"]}))
        key[item_id] = {k: entry[k] for k in ("method", "run", "seed", "question_id", "sample", "judges")}
    return items, key


def score_audit(items: Sequence[SentenceItem], key: dict, methods: Sequence[str], n_resamples: int = 2000,
                seed: int = 0, level: float = 0.95) -> dict:
    """Unblind labeled items with the key: per method the gold-label counts and the unsupported share of checkable
    sentences with a percentile bootstrap interval over questions as clusters; methods[1] - methods[0] (diff, low,
    high) and every later method minus methods[0] (differences), each resampling questions once for both methods;
    per automatic judge its agreement with the human labels on the checkable sentences. Every item must be
    labeled."""
    import numpy as np

    from fspo_lite import stats

    unlabeled = [item.id for item in items if item.label is None]
    if unlabeled:
        raise ValueError(f"{len(unlabeled)} of {len(items)} items are not labeled yet (first: {unlabeled[0]}); "
                         "label them all before unblinding")
    missing = [item.id for item in items if item.id not in key]
    if missing:
        raise ValueError(f"{len(missing)} items are not in the key (first: {missing[0]}): wrong key file?")
    if len(methods) < 2:
        raise ValueError(f"the audit compares at least two methods, got {list(methods)}")
    a, b = methods[0], methods[1]
    counts = {m: {"supported": 0, "unsupported": 0, "not_checkable": 0} for m in methods}
    questions = sorted({key[item.id]["question_id"] for item in items})
    q_index = {q: i for i, q in enumerate(questions)}
    num, den = {m: np.zeros((1, len(questions))) for m in methods}, {m: np.zeros((1, len(questions))) for m in methods}
    agreement: dict[str, list[int]] = {}
    for item in items:
        entry = key[item.id]
        method = entry["method"]
        if method not in counts:
            raise ValueError(f"item {item.id} comes from {method!r}, not one of {list(methods)}")
        counts[method][item.label] += 1
        value = LABEL_VALUES[item.label]
        if value:
            num[method][0, q_index[entry["question_id"]]] += value < 0
            den[method][0, q_index[entry["question_id"]]] += 1
            for judge, label in (entry.get("judges") or {}).items():
                agreement.setdefault(judge, []).append(int(label == value))
    share = {m: (c["unsupported"] / (c["supported"] + c["unsupported"]) if c["supported"] + c["unsupported"]
                 else float("nan")) for m, c in counts.items()}
    diff = stats.paired_difference(num[b], den[b], num[a], den[a], n_resamples,
                                   np.random.default_rng(seed), level)
    differences = {}
    for other in methods[1:]:
        pair = stats.paired_difference(num[other], den[other], num[a], den[a], n_resamples,
                                       np.random.default_rng(seed), level)
        differences[f"{other} - {a}"] = {"diff": pair["diff"], "low": pair["low"], "high": pair["high"]}
    share_interval = {}
    for m in methods:
        one = stats.bootstrap_mean(num[m], den[m], n_resamples, np.random.default_rng(seed), level)
        share_interval[m] = [one["low"], one["high"]]
    return {"methods": list(methods), "items": len(items), "questions": len(questions), "counts": counts,
            "unsupported_share": share, "unsupported_share_interval": share_interval,
            "difference": f"{b} - {a}", "diff": diff["diff"], "low": diff["low"],
            "high": diff["high"], "differences": differences, "level": level, "n_resamples": n_resamples,
            "seed": seed,
            "judge_agreement": {j: {"agree": sum(v) / len(v), "n": len(v)} for j, v in agreement.items()}}


def audit_markdown(result: dict) -> str:
    """The audit's numbers as a short markdown section."""
    a, b = result["methods"][:2]
    pct = f"{result['level']:.0%}"
    lines = ["## Blind audit", "",
             f"{result['items']} held-out reasoning sentences ({result['items'] // len(result['methods'])} per method, "
             f"{result['questions']} questions), labeled against the evidence with the gold-set protocol "
             "(data/gold_sentences.md) before unblinding.", "",
             "| method | supported | unsupported | not checkable | unsupported share of checkable |",
             "|---|---|---|---|---|"]
    for m in result["methods"]:
        c = result["counts"][m]
        lines.append(f"| {m} | {c['supported']} | {c['unsupported']} | {c['not_checkable']} | "
                     f"{100 * result['unsupported_share'][m]:.1f}% |")
    lines += ["", f"{b} - {a}: {100 * result['diff']:+.1f} points [{100 * result['low']:+.1f}, "
                  f"{100 * result['high']:+.1f}] ({pct} interval, bootstrap over questions as clusters, "
                  f"{result['n_resamples']} resamples)."]
    others = {name: d for name, d in (result.get("differences") or {}).items() if name != f"{b} - {a}"}
    if others:
        lines += ["", "; ".join(f"{name}: {100 * d['diff']:+.1f} points [{100 * d['low']:+.1f}, "
                                f"{100 * d['high']:+.1f}]" for name, d in others.items()) + "."]
    if result["judge_agreement"]:
        lines += ["", "Automatic judges against the audit labels (share of checkable sentences where they agree): "
                  + ", ".join(f"{j} {v['agree']:.1%} (n = {v['n']})" for j, v in result["judge_agreement"].items())
                  + "."]
    return "\n".join(lines) + "\n"


def _examples(runs_dir: str | Path, data: str | None, qa: str) -> dict:
    """Question id -> QAExample of the data the runs were evaluated on (--data, else the source recorded in a run's
    eval/summary.json)."""
    from fspo_lite.evaluation.benchmarks import load_items as load_benchmark

    if data is None:
        for summary in sorted(Path(runs_dir).glob("*/eval/summary.json")):
            source = json.loads(summary.read_text()).get("benchmarks", {}).get(qa, {}).get("source")
            if source:
                data = source
                break
    if data is None:
        raise ValueError(f"no {qa} source recorded under {runs_dir}; pass the evaluation data with --data")
    return {example.id: example for example in load_benchmark(qa, data)}


def labeled_count(items_path: str | Path) -> int:
    """How many items of an items file carry a label (0 when the file is missing); ValueError, naming the file,
    when it is not an items file (it may hold someone's work)."""
    path = Path(items_path)
    if not path.exists():
        return 0
    try:
        return sum(1 for item in load_items(path) if item.label is not None)
    except (ValueError, OSError) as error:
        raise ValueError(f"{path} is not an audit items file ({' '.join(str(error).split())[:120]}); it is left as "
                         "it is: choose another --out") from None


STRATA = ("none", "question")
"""--stratify: a uniform draw from each method's pool, or one sentence per method from each drawn question."""


def own_unlabeled_items(key_path: str | Path, out: str | Path) -> bool:
    """Whether `out` holds exactly the items of the key at `key_path`, none labeled: the one case in which drawing
    again over that key loses nothing (the key of items labeled at another --out is never replaced)."""
    try:
        key_ids = set(json.loads(Path(key_path).read_text(encoding="utf-8"))["items"])
        items = load_items(out)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return {item.id for item in items} == key_ids and all(item.label is None for item in items)


def sample_command(runs_dir: str, methods: Sequence[str], n: int, seed: int, out: str, key_path: str,
                   data: str | None = None, qa: str = "kbqa", overwrite_labels: bool = False,
                   stratify: str = "none", prefix: str = "audit") -> tuple[Path, Path]:
    """`audit sample`: draw, blind and write the items and the key, both staged before either replaces a file.
    Items already labeled at `out` (someone's work, which the key unblinds) and an existing key (which may unblind
    items labeled elsewhere; but for its own unlabeled items at `out`) are never replaced unless overwrite_labels is
    set: ValueError before anything is written."""
    if len(methods) < 2 or len(set(methods)) != len(methods):
        raise ValueError("the audit compares two or more distinct methods, e.g. --methods grpo,fspo")
    if stratify not in STRATA:
        raise ValueError(f"--stratify {stratify!r}: one of {', '.join(STRATA)}")
    labeled = 0 if overwrite_labels else labeled_count(out)
    if labeled:
        raise ValueError(f"{out} holds {labeled} labeled items; drawing again would replace them and their key "
                         f"{key_path}: score them (audit score), choose another --out and --key, or pass "
                         "--overwrite-labels to replace them")
    if not overwrite_labels and Path(key_path).exists() and not own_unlabeled_items(key_path, out):
        raise ValueError(f"{key_path} holds the key of an earlier draw, the only way to unblind its labels, wherever "
                         "its items are: choose another --key (and --out), or pass --overwrite-labels to replace it")
    pools = collect_sentences(runs_dir, methods, qa)
    drawn = (draw_stratified if stratify == "question" else draw_audit)(pools, n, seed)
    items, key = blind_items(drawn, _examples(runs_dir, data, qa), prefix)
    text = json.dumps({"methods": list(methods), "runs": str(runs_dir), "n": n, "seed": seed, "stratify": stratify,
                       "items": key}, indent=1)
    with atomic_path(key_path) as key_staging, atomic_path(out) as items_staging:  # both written, then both renamed
        save_items(items, items_staging)
        key_staging.write_text(text, encoding="utf-8")
    return Path(out), Path(key_path)


def score_command(items_path: str, key_path: str, n_resamples: int, seed: int) -> dict:
    """`audit score`: read the labeled items first, then the key, and score; ValueError naming a missing file and
    the option that gives it."""
    for path, option in ((items_path, "--items"), (key_path, "--key")):
        if not Path(path).is_file():
            raise ValueError(f"{option} {path}: no such file; `audit sample` writes the items (--out) and the key "
                             "(--key)")
    items = load_items(items_path)
    key = json.loads(Path(key_path).read_text())
    return score_audit(items, key["items"], key["methods"], n_resamples, seed)


def cmd_audit_sample(args) -> int:
    """`fspo-lite audit sample`: draw, blind and write; one line and exit code 2 on a refusal."""
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    try:
        items, key = sample_command(args.runs, methods, args.n, args.seed, args.out, args.key, args.data,
                                    args.benchmark, args.overwrite_labels, args.stratify, args.prefix)
    except ValueError as error:
        print(f"fspo_lite: error: audit sample: {error}", file=sys.stderr)
        return 2
    print(f"{args.n} sentences ({args.n // max(len(methods), 1)} per method) to label: {items}\n"
          f"key (keep it closed until every item is labeled): {key}")
    return 0


def cmd_audit_score(args) -> int:
    """`fspo-lite audit score`: unblind, score and print (and write --json); one line and exit code 2 on a refusal."""
    try:
        result = score_command(args.items, args.key, args.resamples, args.seed)
    except ValueError as error:
        print(f"fspo_lite: error: audit score: {error}", file=sys.stderr)
        return 2
    print(audit_markdown(result))
    if args.json:  # through a temporary file: a crash leaves the old file or the new one
        atomic_write_text(Path(args.json), json.dumps(result, indent=1))
    return 0
