"""Judge held-out responses already on disk again with another step verifier, without retraining or regenerating:
the knowledge-base checker (verifier `kb`) as a held-out judge of the kbqa answers of every run.

    python -m fspo_lite.evaluation.rejudge --runs results/study/runs --judge kb

Each run's eval/records.jsonl keeps, per kbqa response, its text (`output`) and the character spans of its
reasoning sentences (`sentence_spans`); the judge labels those sentences against the question's evidence and the
labels are stored as `sentence_labels_by_judge[<judge>]`, where the study report (fspo_lite.drivers.report.study)
reads every judge. Adding evaluation.extra_step_verifiers would change every run's settings key and retrain the
finished runs; this leaves them as they are. Records of other benchmarks are left untouched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from fspo_lite.atomic import atomic_write_jsonl
from fspo_lite.evaluation.result_files import ResultFileError, read_records


def rejudge_records(records: list[dict], examples: dict, verifier, judge: str, threshold: float = 0.5,
                    qa: str = "kbqa") -> int:
    """Add `sentence_labels_by_judge[judge]` (+1/-1/0 per reasoning sentence) to every `qa` record, in place.
    `examples`: question id -> QAExample (question and evidence). Returns the number of records judged."""
    from fspo_lite.scoring.verifiers import labels_from_scores

    owners, evidence, sentences, questions = [], [], [], []
    for index, record in enumerate(records):
        if record.get("benchmark") != qa:
            continue
        example = examples.get(record["id"])
        if example is None:
            raise ValueError(f"question {record['id']!r} is not in the evaluation data; pass the file the runs "
                             "were evaluated on with --data")
        for start, end in record.get("sentence_spans") or []:
            owners.append(index)
            evidence.append(example.evidence)
            sentences.append(record["output"][start:end])
            questions.append(example.question)
    scores = verifier.score(evidence, sentences, questions) if owners else []
    labels = labels_from_scores(scores, threshold)
    judged = {i for i, r in enumerate(records) if r.get("benchmark") == qa}
    for index in judged:
        by_judge = records[index].setdefault("sentence_labels_by_judge", {})
        by_judge[judge] = []
    for owner, label in zip(owners, labels):
        records[owner]["sentence_labels_by_judge"][judge].append(label)
    return len(judged)


def rejudge_runs(runs_dir: str | Path, verifier, judge: str, data: str = "bundled:kbqa_test",
                 threshold: float = 0.5) -> dict[str, int]:
    """Rejudge every run's eval/records.jsonl under runs_dir (each read with its records checked, `read_records`,
    and replaced atomically: a failed write, a full disk included, leaves the old file whole); {run: records
    judged}."""
    from fspo_lite.data.examples import load_examples

    loaded = load_examples(data)
    examples = {e.id: e for e in loaded}
    if len(examples) != len(loaded):  # a sentence would be judged against another question's evidence
        seen: set = set()
        twice = next(e.id for e in loaded if e.id in seen or seen.add(e.id))
        raise ResultFileError(f"{data}: id {twice!r} is given to more than one question (item "
                              f"{[e.id for e in loaded].index(twice) + 1} and later); each question needs its own id")
    done = {}
    for path in sorted(Path(runs_dir).glob("*/eval/records.jsonl")):
        records = read_records(path)  # types and ranges checked before anything is rewritten
        done[path.parent.parent.name] = rejudge_records(records, examples, verifier, judge, threshold)
        atomic_write_jsonl(path, records, ensure_ascii=False)  # the old file stays whole until the new one is
    return done


def probability(text: str) -> float:
    """--threshold's value: a number from 0 to 1 (nan, inf and the rest are refused in one line)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:  # false for nan too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 0 to 1")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="folder of runs (each with eval/records.jsonl)")
    parser.add_argument("--judge", default="kb", help="a verifier name (fspo_lite.scoring.verifiers.VERIFIERS)")
    parser.add_argument("--data", default="bundled:kbqa_test", help="the kbqa file the runs were evaluated on")
    parser.add_argument("--threshold", type=probability, default=0.5,
                        help="the score from which a sentence counts as supported, from 0 to 1")
    args = parser.parse_args(argv)
    if not Path(args.runs).is_dir():
        parser.error(f"no runs folder {args.runs}")
    from fspo_lite.run_lock import RunLockError, run_lock

    try:
        from fspo_lite.config import VerifierConfig
        from fspo_lite.scoring.verifiers import build_verifier

        with run_lock(args.runs, ""):
            verifier = build_verifier(VerifierConfig(name=args.judge))
            done = rejudge_runs(args.runs, verifier, args.judge, args.data, args.threshold)
    except (RunLockError, ResultFileError) as error:
        print(f"rejudge: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # each run's records file is replaced atomically: judged whole, or left as it was
        print("rejudge: interrupted; the runs judged so far keep their new labels, the others are unchanged",
              file=sys.stderr)
        return 130
    for run, n in done.items():
        print(f"[rejudge] {run}: {n} kbqa records judged by {args.judge}")
    if not done:
        print(f"[rejudge] no eval/records.jsonl under {args.runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
