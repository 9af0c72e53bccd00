"""The likelihood verifier with and without one pass per evidence (share_evidence), and again with its kept states.

    python bench/likelihood_share.py [--repeats 2] [--limit N] [--model smollm2-135m]

The 157 labelled sentences of data/gold_sentences.jsonl (85 distinct evidence texts, in file order, so sentences
of one response sit together as they do in the harness), scored in the verifier's default batches of 32 by the
bundled SmolLM2-135M. Prints wall and process CPU seconds of each setting (median over the repeats), their ratio,
and the largest difference in the gains (float rounding only). Then the same sentences once more with the
share_evidence verifier's kept evidence states (`EvidenceStates`), as a study's next model meets them: only the
sentences run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"), ("OMP_WAIT_POLICY", "PASSIVE")):
    os.environ.setdefault(_name, _value)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--model", default="smollm2-135m", help="the judge model (the verifier's default: smollm2-135m)")
    args = parser.parse_args(argv)

    from fspo_lite.config import ModelConfig
    from fspo_lite.models.policy import load_model, load_tokenizer
    from fspo_lite.scoring.verifiers import LikelihoodVerifier
    from fspo_lite.jsonl import read_jsonl
    from fspo_lite.machine import machine_description

    rows = read_jsonl(ROOT / "data" / "gold_sentences.jsonl")
    rows = rows[: args.limit]
    evidence, sentences = [r["evidence"] for r in rows], [r["sentence"] for r in rows]
    model, tokenizer = load_model(ModelConfig(name=args.model, lora=False)), load_tokenizer(args.model)
    print(f"machine: {machine_description()}; load average {os.getloadavg()[0]:.1f}; {len(rows)} sentences, "
          f"{len(set(evidence))} distinct evidence texts")
    times: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    gains: dict[bool, list[float]] = {}
    verifiers: dict[bool, LikelihoodVerifier] = {}
    for repeat in range(args.repeats):
        for share in (False, True) if repeat % 2 == 0 else (True, False):
            verifier = LikelihoodVerifier(model, tokenizer, batch_size=args.batch_size, share_evidence=share)
            verifiers[share] = verifier
            wall, cpu = time.perf_counter(), cpu_seconds()
            gains[share] = verifier.gains(evidence, sentences)
            times[share].append((time.perf_counter() - wall, cpu_seconds() - cpu))
            print(f"repeat {repeat} share_evidence={share}: {times[share][-1][0]:.1f} s wall, "
                  f"{times[share][-1][1]:.1f} s CPU")
    wall, cpu = time.perf_counter(), cpu_seconds()
    again = verifiers[True].gains(evidence, sentences)
    print(f"again with the kept evidence states: {time.perf_counter() - wall:.1f} s wall, "
          f"{cpu_seconds() - cpu:.1f} s CPU; largest gain difference "
          f"{max(abs(a - b) for a, b in zip(again, gains[True])):.2e}")
    before = [statistics.median(t[i] for t in times[False]) for i in (0, 1)]
    after = [statistics.median(t[i] for t in times[True]) for i in (0, 1)]
    gap = max(abs(a - b) for a, b in zip(gains[False], gains[True]))
    print(f"without {before[0]:.1f} s wall / {before[1]:.1f} s CPU, with {after[0]:.1f} s wall / {after[1]:.1f} s "
          f"CPU; ratio (with / without) {after[0] / before[0]:.2f} wall, {after[1] / before[1]:.2f} CPU; "
          f"largest gain difference {gap:.2e}; load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
