"""The blind audit (fspo_lite.drivers.audit): the draw, the blinding, the scoring of a synthetic labeled file, the CLI."""

import json
from pathlib import Path

import pytest

from fspo_lite.drivers import audit
from fspo_lite.__main__ import main
from fspo_lite.data.labeling import load_items, save_items

QUESTIONS = {f"q{i}": (f"What is item {i}?", f"Item {i} is number {i}.") for i in range(6)}


def _runs(root):
    """grpo and fspo, two seeds each; every response holds two reasoning sentences per question."""
    (root).mkdir(parents=True)
    data = root / "questions.jsonl"
    data.write_text("\n".join(json.dumps({"id": q, "question": text, "answers": ["x"], "evidence": evidence})
                              for q, (text, evidence) in QUESTIONS.items()) + "\n")
    for method in ("grpo", "fspo"):
        for seed in (0, 1):
            run = root / f"{method}_s{seed}"
            (run / "eval").mkdir(parents=True)
            (run / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "judge": "lexical"}))
            (run / "eval" / "summary.json").write_text(json.dumps({"benchmarks": {"kbqa": {"source": str(data)}}}))
            records = []
            for q in QUESTIONS:
                output = f"<think>{method} says {q} one. {method} says {q} two.</think><answer>x</answer>"
                first = output.index(f"{method} says")
                second = output.index(f"{method} says", first + 1)
                spans = [[first, output.index(".", first) + 1], [second, output.index(".", second) + 1]]
                records.append({"benchmark": "kbqa", "id": q, "sample": 0, "output": output, "grade": "INCORRECT",
                                "sentence_labels": [1, -1], "sentence_spans": spans,
                                "sentence_labels_by_judge": {"lexical": [1, -1], "embedding": [1, 1]}})
            records.append({"benchmark": "truthfulqa_mc", "id": "t0", "mc1": 1.0, "mc2": 1.0, "grade": "CORRECT"})
            (run / "eval" / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return root


def test_draw_is_equal_seeded_shuffled_and_blind(tmp_path):
    runs = _runs(tmp_path / "runs")
    pools = audit.collect_sentences(runs, ["grpo", "fspo"])
    assert len(pools["grpo"]) == len(pools["fspo"]) == 6 * 2 * 2
    assert pools["fspo"][0]["sentence"] == "fspo says q0 one." and pools["fspo"][0]["judges"] == {
        "lexical": 1, "embedding": 1}
    drawn = audit.draw_audit(pools, 10, seed=3)
    assert drawn == audit.draw_audit(pools, 10, seed=3) and drawn != audit.draw_audit(pools, 10, seed=4)
    assert sum(d["method"] == "grpo" for d in drawn) == 5
    assert [d["method"] for d in drawn] != ["grpo"] * 5 + ["fspo"] * 5  # shuffled
    with pytest.raises(ValueError, match="split equally"):
        audit.draw_audit(pools, 9)
    with pytest.raises(ValueError, match="needs 30"):
        audit.draw_audit(pools, 60)
    out, key = audit.sample_command(str(runs), ["grpo", "fspo"], 10, 3, str(tmp_path / "items.jsonl"),
                                    str(tmp_path / "key.json"))
    items = load_items(out)
    assert len(items) == 10 and all(item.label is None for item in items)
    assert items[0].evidence == QUESTIONS[items[0].meta["example_id"]][1]
    labeling_file = out.read_text()
    # nothing in the file to label names the run, the seed or the judges (the method only inside the responses
    # of this synthetic data, which spell it out on purpose)
    for hidden in ('"method"', '"run"', '"seed"', "grpo_s", "fspo_s", '"judges"'):
        assert hidden not in labeling_file
    assert set(json.loads(key.read_text())["items"]) == {item.id for item in items}


def _label(items, key, unsupported_for):
    """Label every item: unsupported when its method is in unsupported_for, else supported; the second sentence of
    every response not checkable."""
    for item in items:
        entry = key["items"][item.id]
        if item.sentence.endswith("two."):
            item.label = "not_checkable"
        else:
            item.label = "unsupported" if entry["method"] in unsupported_for else "supported"
    return items


def test_score_by_hand(tmp_path):
    runs = _runs(tmp_path / "runs")
    out, key_path = audit.sample_command(str(runs), ["grpo", "fspo"], 24, 0, str(tmp_path / "items.jsonl"),
                                         str(tmp_path / "key.json"))
    key = json.loads(key_path.read_text())
    items = _label(load_items(out), key, unsupported_for={"grpo"})
    result = audit.score_audit(items, key["items"], key["methods"], n_resamples=200)
    checkable = {m: sum(1 for i in items if key["items"][i.id]["method"] == m and i.label != "not_checkable")
                 for m in ("grpo", "fspo")}
    assert result["counts"]["grpo"]["unsupported"] == checkable["grpo"] and result["counts"]["fspo"]["unsupported"] == 0
    assert result["unsupported_share"] == {"grpo": 1.0, "fspo": 0.0}
    # every checkable grpo sentence unsupported, every fspo one supported: -100 points in every resample
    assert (result["diff"], result["low"], result["high"]) == (-1.0, -1.0, -1.0)
    assert result["difference"] == "fspo - grpo"
    # the lexical judge says +1 on first sentences: agrees with fspo's labels, not grpo's
    agreement = result["judge_agreement"]["lexical"]
    assert agreement["n"] == sum(checkable.values())
    assert agreement["agree"] == pytest.approx(checkable["fspo"] / sum(checkable.values()))
    assert "fspo - grpo: -100.0 points [-100.0, -100.0]" in audit.audit_markdown(result)


def test_score_is_clustered_by_question():
    """Two questions, one sentence of each method per question; question 0: both unsupported, question 1: fspo
    supported. Clustered: resamples hold q0 twice (diff 0), q1 twice (-1) or both (-0.5)."""
    from fspo_lite.data.labeling import SentenceItem

    def item(i, label):
        return SentenceItem(id=f"a{i}", question="Q", evidence="E", response="S.", sentence="S.", span=(0, 2),
                            label=label)

    items = [item(0, "unsupported"), item(1, "unsupported"), item(2, "unsupported"), item(3, "supported")]
    key = {"a0": {"method": "grpo", "question_id": "q0"}, "a1": {"method": "fspo", "question_id": "q0"},
           "a2": {"method": "grpo", "question_id": "q1"}, "a3": {"method": "fspo", "question_id": "q1"}}
    result = audit.score_audit(items, key, ["grpo", "fspo"], n_resamples=4000)
    assert result["diff"] == -0.5 and (result["low"], result["high"]) == (-1.0, 0.0)


def test_score_refuses_unlabeled_items_and_a_wrong_key(tmp_path):
    runs = _runs(tmp_path / "runs")
    out, key_path = audit.sample_command(str(runs), ["grpo", "fspo"], 4, 0, str(tmp_path / "items.jsonl"),
                                         str(tmp_path / "key.json"))
    key = json.loads(key_path.read_text())
    items = load_items(out)
    with pytest.raises(ValueError, match="4 of 4 items are not labeled"):
        audit.score_audit(items, key["items"], key["methods"])
    items = _label(items, key, set())
    with pytest.raises(ValueError, match="not in the key"):
        audit.score_audit(items, {}, key["methods"])


def test_audit_command_line(tmp_path, capsys):
    runs = _runs(tmp_path / "runs")
    items_path, key_path = tmp_path / "items.jsonl", tmp_path / "key.json"
    assert main(["audit", "sample", "--runs", str(runs), "--methods", "grpo,fspo", "--n", "8", "--out",
                 str(items_path), "--key", str(key_path)]) == 0
    assert main(["audit", "score", "--items", str(items_path), "--key", str(key_path)]) == 2
    assert "not labeled yet" in capsys.readouterr().err
    key = json.loads(key_path.read_text())
    save_items(_label(load_items(items_path), key, {"fspo"}), items_path)
    assert main(["audit", "score", "--items", str(items_path), "--key", str(key_path), "--resamples", "50",
                 "--json", str(tmp_path / "audit.json")]) == 0
    assert "## Blind audit" in capsys.readouterr().out
    assert json.loads((tmp_path / "audit.json").read_text())["unsupported_share"]["fspo"] == 1.0
    assert main(["audit", "sample", "--runs", str(runs), "--methods", "grpo", "--n", "8", "--out",
                 str(items_path), "--key", str(key_path)]) == 2


def test_a_key_is_never_replaced_and_items_and_key_are_written_as_one(tmp_path, monkeypatch):
    """A second draw with the key of labeled items (kept at another --out) is refused, nothing written; when the key
    cannot be written, the items are not replaced either."""
    runs = _runs(tmp_path / "runs")
    key_path = tmp_path / "key.json"
    audit.sample_command(str(runs), ["grpo", "fspo"], 8, 0, str(tmp_path / "a.jsonl"), str(key_path))
    before = key_path.read_bytes()
    with pytest.raises(ValueError, match="earlier draw"):
        audit.sample_command(str(runs), ["grpo", "fspo"], 8, 1, str(tmp_path / "b.jsonl"), str(key_path))
    assert key_path.read_bytes() == before and not (tmp_path / "b.jsonl").exists()
    items_before = (tmp_path / "a.jsonl").read_bytes()

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        audit.sample_command(str(runs), ["grpo", "fspo"], 8, 2, str(tmp_path / "a.jsonl"), str(key_path),
                             overwrite_labels=True)
    assert (tmp_path / "a.jsonl").read_bytes() == items_before and key_path.read_bytes() == before


def test_stratified_draw_reads_every_method_on_the_same_questions(tmp_path):
    """--stratify question: one sentence per method from each drawn question, the same questions for every method,
    no question used twice before every question has been used once; seeded; blind; refusals."""
    runs = _runs(tmp_path / "runs")
    pools = audit.collect_sentences(runs, ["grpo", "fspo"])
    drawn = audit.draw_stratified(pools, 8, seed=1)
    assert drawn == audit.draw_stratified(pools, 8, seed=1) and drawn != audit.draw_stratified(pools, 8, seed=2)
    per_method = {m: sorted(d["question_id"] for d in drawn if d["method"] == m) for m in ("grpo", "fspo")}
    assert per_method["grpo"] == per_method["fspo"] and len(set(per_method["grpo"])) == 4  # 4 distinct questions
    # 6 questions, 16 per method: every question once, twice, then four of them a third time; never one sentence twice
    drawn = audit.draw_stratified(pools, 32, seed=0)
    counts = sorted(sum(1 for d in drawn if d["method"] == "grpo" and d["question_id"] == q) for q in QUESTIONS)
    assert counts == [2, 2, 3, 3, 3, 3]
    assert len({(d["run"], d["question_id"], tuple(d["span"])) for d in drawn if d["method"] == "fspo"}) == 16
    # 6 questions x 4 sentences per method (two seeds, two sentences): 24 per method at most
    with pytest.raises(ValueError, match="too few"):
        audit.draw_stratified(pools, 50)
    with pytest.raises(ValueError, match="split equally"):
        audit.draw_stratified(pools, 7)
    # a question only one method answered is never drawn
    pools["grpo"] = [e for e in pools["grpo"] if e["question_id"] != "q5"]
    assert "q5" not in {d["question_id"] for d in audit.draw_stratified(pools, 40, seed=0)}


def test_several_methods_scored_against_the_first(tmp_path):
    """Four methods (two real ones named twice over in the key): each later method minus the first, and each
    method's share with its interval; the item ids carry the prefix; the key records the stratification."""
    runs = _runs(tmp_path / "runs")
    for method in ("corver", "fspo+4x"):
        for seed in (0, 1):
            source = runs / f"fspo_s{seed}"
            target = runs / f"{method}_s{seed}"
            (target / "eval").mkdir(parents=True)
            for name in ("eval/summary.json", "eval/records.jsonl"):
                (target / name).write_text((source / name).read_text())
            (target / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "judge": "lexical"}))
    out, key_path = audit.sample_command(str(runs), ["grpo", "fspo", "corver", "fspo+4x"], 16, 0,
                                         str(tmp_path / "items.jsonl"), str(tmp_path / "key.json"),
                                         stratify="question", prefix="audit2")
    key = json.loads(key_path.read_text())
    assert key["stratify"] == "question" and all(i.startswith("audit2-") for i in key["items"])
    items = _label(load_items(out), key, unsupported_for={"grpo", "corver"})
    result = audit.score_audit(items, key["items"], key["methods"], n_resamples=200)
    assert result["unsupported_share"] == {"grpo": 1.0, "fspo": 0.0, "corver": 1.0, "fspo+4x": 0.0}
    assert result["differences"] == {"fspo - grpo": {"diff": -1.0, "low": -1.0, "high": -1.0},
                                     "corver - grpo": {"diff": 0.0, "low": 0.0, "high": 0.0},
                                     "fspo+4x - grpo": {"diff": -1.0, "low": -1.0, "high": -1.0}}
    assert result["unsupported_share_interval"]["corver"] == [1.0, 1.0]
    text = audit.audit_markdown(result)
    assert "4 per method" in text and "corver - grpo: +0.0 points [+0.0, +0.0]" in text
    with pytest.raises(ValueError, match="one of none, question"):
        audit.sample_command(str(runs), ["grpo", "fspo"], 4, 0, str(tmp_path / "x.jsonl"), str(tmp_path / "x.json"),
                             stratify="seed")
    with pytest.raises(ValueError, match="distinct"):
        audit.sample_command(str(runs), ["grpo", "grpo"], 4, 0, str(tmp_path / "x.jsonl"), str(tmp_path / "x.json"))


def test_the_audit_module_imports_first_in_a_fresh_interpreter():
    """`python -m fspo_lite` imports drivers.audit before the report package; the report's validity module reads the
    audit's scoring, so a module-level import there would be a cycle that breaks every command."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", "import fspo_lite.drivers.audit, fspo_lite.drivers.report.validity"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
