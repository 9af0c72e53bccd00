"""The evidence-in-the-prompt pre-flight (docs/statistics.md, "Evidence in the prompt, and the flip's escape closed").

Reads one evaluation's records.jsonl (the base model evaluated with `data.evidence_in_prompt=true` on the study's
held-out kbqa questions, its sentences labelled by the kb judge) and writes the registered reading: the share of
second reasoning sentences (responses with at least two) that the judge labels supported, over all second sentences,
with a Wilson 95% interval, and whether it reaches the gate (30%, on the point estimate). Also, described and read by
no rule: the share of responses with no checkable sentence, the share cut at the token limit, the format rate.

    fspo-lite eval --model smollm2-135m --benchmarks kbqa --limit 200 --samples 4 --temperature 0.7 \\
        --set "data.system_prompt=<the study's prompt>" --set data.evidence_in_prompt=true \\
        --set evaluation.max_new_tokens=64 --set evaluation.step_verifier=kb --set evaluation.batch_size=64 \\
        --output results/study/preflight_ctx
    python scripts/preflight_ctx.py --records results/study/preflight_ctx/records.jsonl \\
        --out results/study/preflight_ctx/preflight.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

GATE = 0.30


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval of a binomial share; (nan, nan) when n is 0."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def labels_of(record: dict, judge: str) -> list[int]:
    by_judge = record.get("sentence_labels_by_judge") or {}
    labels = by_judge.get(judge, record.get("sentence_labels") if not by_judge else None)
    if not isinstance(labels, list) or any(label not in (-1, 0, 1) for label in labels):
        raise ValueError(f"record {record.get('id')!r} sample {record.get('sample')!r}: no {judge} labels "
                         f"(a list of -1/0/1) in sentence_labels_by_judge")
    return labels


def preflight(records: list[dict], judge: str = "kb", max_new_tokens: int = 64) -> dict:
    """The registered reading and the described shares over the kbqa records."""
    records = [r for r in records if r.get("benchmark") == "kbqa"]
    if not records:
        raise ValueError("no kbqa record: the pre-flight reads the held-out kbqa answers")
    second = [labels_of(r, judge)[1] for r in records if len(labels_of(r, judge)) >= 2]
    supported = sum(label == 1 for label in second)
    share = supported / len(second) if second else float("nan")
    low, high = wilson(supported, len(second))
    return {
        "judge": judge, "responses": len(records), "second_sentences": len(second),
        "second_supported": supported, "second_supported_share": share, "interval_95": [low, high],
        "gate": GATE, "passes": bool(second) and share >= GATE,
        "no_checkable_share": sum(not any(labels_of(r, judge)) for r in records) / len(records),
        "cut_at_token_limit_share": sum(int(r.get("response_tokens", 0)) >= max_new_tokens for r in records)
        / len(records),
        "format_rate": sum(bool(r.get("format_ok")) for r in records) / len(records),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", required=True, help="the evaluation's records.jsonl")
    parser.add_argument("--judge", default="kb")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="the evaluation's evaluation.max_new_tokens")
    parser.add_argument("--out", help="write the reading here as JSON")
    args = parser.parse_args(argv)
    records = []
    for number, line in enumerate(Path(args.records).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise SystemExit(f"{args.records}:{number}: not a JSON line ({error.msg})") from None
    try:
        reading = preflight(records, args.judge, args.max_new_tokens)
    except ValueError as error:
        raise SystemExit(f"{args.records}: {error}") from None
    text = json.dumps(reading, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return reading


if __name__ == "__main__":
    main()
