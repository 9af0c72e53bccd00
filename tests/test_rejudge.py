"""Re-judging held-out records on disk with the kb verifier (fspo_lite/evaluation/rejudge.py)."""

from __future__ import annotations

import json

from fspo_lite.config import VerifierConfig
from fspo_lite.data.examples import load_examples
from fspo_lite.evaluation.rejudge import rejudge_runs
from fspo_lite.scoring.verifiers import build_verifier


def test_rejudge_adds_kb_labels_and_keeps_the_rest(tmp_path):
    example = next(e for e in load_examples("bundled:kbqa_test") if e.extra["category"] == "atomic_number")
    z = example.answers[0]
    text = f"<think>The atomic number is {z}. The atomic number is {int(z) + 1}. Hm.</think><answer>{z}</answer>"
    first = text.index("The")
    second = text.index("The", first + 1)
    spans = [[first, text.index(".", first) + 1], [second, text.index(".", second) + 1]]
    records = [{"benchmark": "kbqa", "id": example.id, "output": text, "sentence_spans": spans,
                "sentence_labels_by_judge": {"embedding": [1, 1]}},
               {"benchmark": "halueval", "id": "h1", "grade": "CORRECT"}]
    run = tmp_path / "fspo_s0" / "eval"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = rejudge_runs(tmp_path, build_verifier(VerifierConfig(name="kb")), "kb")
    assert done == {"fspo_s0": 1}
    back = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert back[0]["sentence_labels_by_judge"] == {"embedding": [1, 1], "kb": [1, -1]}
    assert back[1] == records[1]
