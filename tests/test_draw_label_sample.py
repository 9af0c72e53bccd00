"""scripts/draw_label_sample.py: held-out sentences of several arms drawn equally, blind to the arm and the judges,
and a file that may hold labels is never replaced."""

import json
import subprocess
import sys
from pathlib import Path

from fspo_lite.data.examples import load_examples
from fspo_lite.data.labeling import load_items

ROOT = Path(__file__).resolve().parents[1]


def _runs(root, methods):
    examples = load_examples("bundled:kbqa_test")[:3]
    for method in methods:
        run = root / f"{method}_s0"
        (run / "eval").mkdir(parents=True)
        (run / "heldout.json").write_text(json.dumps({"method": method, "seed": 0, "judge": "embedding"}))
        rows = []
        for example in examples:
            output = f"<think>{method} thinks one thing. {method} thinks another.</think>\n<answer>x</answer>"
            first = 7 + len(method) + 17
            rows.append({"benchmark": "kbqa", "id": example.id, "sample": 0, "output": output,
                         "sentence_spans": [[7, first], [first + 1, output.index("</think>")]],
                         "sentence_labels_by_judge": {"embedding": [1, -1]}})
        (run / "eval" / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "draw_label_sample.py"), *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_draws_equally_and_blind(tmp_path):
    runs = _runs(tmp_path / "runs", ["alpha", "beta", "gamma"])
    out, key = tmp_path / "items.jsonl", tmp_path / "key.json"
    done = run("--runs", str(runs), "--methods", "alpha,beta,gamma", "--n", "6", "--out", str(out), "--key", str(key))
    assert done.returncode == 0, done.stderr
    items = load_items(out)
    assert len(items) == 6 and all(item.label is None for item in items)
    text = out.read_text()
    assert "embedding" not in text and '"method"' not in text  # no judge labels and no arm field in the items
    mapping = json.loads(key.read_text())["items"]
    assert sorted(entry["method"] for entry in mapping.values()) == ["alpha"] * 2 + ["beta"] * 2 + ["gamma"] * 2
    assert all(item.evidence and item.question for item in items)
    # a second draw never replaces a file that may hold labels
    again = run("--runs", str(runs), "--methods", "alpha,beta,gamma", "--n", "6", "--out", str(out), "--key",
                str(tmp_path / "other.json"))
    assert again.returncode == 2 and "exists" in again.stderr and out.read_text() == text


def test_too_few_sentences_is_one_line(tmp_path):
    runs = _runs(tmp_path / "runs", ["alpha", "beta"])
    done = run("--runs", str(runs), "--methods", "alpha,beta", "--n", "40", "--out", str(tmp_path / "i.jsonl"),
               "--key", str(tmp_path / "k.json"))
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "needs 20" in done.stderr
