"""Draw held-out reasoning sentences of several arms for hand labelling, blind to the arm and to every verifier.

    python scripts/draw_label_sample.py --runs results/study/runs --methods random,format,ternary,binary,corver \
        --n 120 --out results/study/kb_check_items.jsonl --key results/study/kb_check_key.json

The same number of sentences from each arm (all seeds pooled, seeded), shuffled, written as labelling items
(question, evidence, the whole response, the sentence; nothing that names the arm, run, seed or any judge's label)
and a separate key. Label the items (notebook 02's LabelingSession, or by hand in the file, with the protocol of
data/gold_sentences.md) before opening the key or scoring a verifier on them; then

    python -m fspo_lite.scoring.verifiers.hand_labels --verifiers kb,lexical,embedding \
        --labels results/study/kb_check_items.jsonl --out results/verifier_kb_out_of_sample.json

scores the verifiers on them (docs/verifiers.md, "Against every hand label"). The draw is the blind audit's
(fspo_lite.drivers.audit) over any number of arms.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fspo_lite.data.labeling import save_items
from fspo_lite.drivers.audit import blind_items, collect_sentences, draw_audit
from fspo_lite.evaluation.benchmarks import load_items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="runs folder (<run>/heldout.json and eval/records.jsonl)")
    parser.add_argument("--methods", required=True, help="comma-separated arms, drawn equally")
    parser.add_argument("--n", type=int, default=120, help="sentences in all; default: %(default)s")
    parser.add_argument("--seed", type=int, default=0, help="seeds the draw and the order; default: %(default)s")
    parser.add_argument("--data", default="bundled:kbqa_test", help="the evaluation data of the runs' kbqa records; "
                        "default: %(default)s")
    parser.add_argument("--prefix", default="kbcheck", help="item id prefix; default: %(default)s")
    parser.add_argument("--out", required=True, help="items to label (JSON lines)")
    parser.add_argument("--key", required=True, help="item -> arm key (JSON)")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    for path in (args.out, args.key):
        if Path(path).exists():
            parser.error(f"{path} exists: it may hold labels; move it away or choose another path")
    try:
        drawn = draw_audit(collect_sentences(args.runs, methods), args.n, args.seed)
        items, key = blind_items(drawn, {e.id: e for e in load_items("kbqa", args.data)}, args.prefix)
    except ValueError as error:
        print(f"draw_label_sample: {error}", file=sys.stderr)
        return 1
    save_items(items, args.out)
    Path(args.key).write_text(json.dumps({"methods": methods, "runs": str(args.runs), "n": args.n,
                                          "seed": args.seed, "items": key}, indent=1))
    print(f"{len(items)} sentences from {', '.join(methods)} -> {args.out} (key: {args.key})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
