"""The evidence-in-the-prompt readings end to end, on hand-made run folders whose answers are known: every question,
sample and seed of an arm answers alike, so every interval is a point and each registered rule has one answer."""

import json
import shutil

import pytest

from fspo_lite.drivers.report import Bootstrap, Study, judges_of, load_responses, load_training, metric_cells
from fspo_lite.drivers.report.evidence_readings import evidence_section
from conftest import kbqa_record

EVIDENCE = "Paris was founded by the Parisii tribe. Its river is the Seine."
OPEN = f"<|im_start|>user\nEvidence:\n{EVIDENCE}\n\nQuestion: What is the capital of France?<|im_end|>\n"
CLOSED = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
S, U = 1, -1
CAPITAL, SEINE, PEOPLE, LOUVRE = ("Paris is the capital.", "Paris lies on the Seine.", "Paris has ten million people.",
                                  "Paris hosts the Louvre.")
COPIED = "Paris was founded by the Parisii tribe."           # an evidence sentence word for word
FACTS = [f"Paris fact number {i} is {w}." for i, w in enumerate("alpha beta gamma delta eps zeta eta theta".split())]
BOOT = {"n_resamples": 50, "seed": 0, "level": 0.95}


def _record(question, sample, texts, labels, prompt, tokens):
    return kbqa_record(texts, labels, id=f"q{question}", sample=sample, prompt=prompt, response_tokens=tokens)


def write_run(root, method, seed, responses, open_book=False, tokens=30, zero_std=0.0, asked=None):
    """One run: 4 questions x 2 samples; sample k answers with responses[k % len(responses)] = (texts, labels).
    `asked`: evaluation.evidence_in_prompt (None: the held-out prompt is training's)."""
    run = root / f"{method.replace('+', '_')}_s{seed}"
    (run / "eval").mkdir(parents=True)
    (run / "heldout.json").write_text(json.dumps({"method": method, "seed": seed, "judge": "embedding",
                                                  "train_verifier": "lexical", "metrics": {}}))
    (run / "config.yaml").write_text(f"data:\n  evidence_in_prompt: {str(open_book).lower()}\n"
                                     "evaluation:\n  max_new_tokens: 64\n"
                                     f"  evidence_in_prompt: {'null' if asked is None else str(asked).lower()}\n")
    shown = open_book if asked is None else asked
    rows = [_record(q, s, *responses[s % len(responses)], OPEN if shown else CLOSED, tokens)
            for q in range(4) for s in range(2)]
    (run / "eval" / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"step": k, "frac_reward_zero_std": zero_std})
                                                 for k in (1, 2)) + "\n")


def study(root, grpo_ctx, fspo_ctx, tokens=30, zero_std=0.0):
    """The 2x2 and the strict arm: the closed-book arms fixed, the open-book ones as given."""
    arms = {"grpo": ([([CAPITAL, PEOPLE], [S, U])], False), "fspo": ([([CAPITAL], [S]), (["Paris"], [0])], False),
            "fspo+strict": ([([CAPITAL, SEINE], [S, S])], False), "grpo+ctx": (grpo_ctx, True),
            "fspo+ctx": (fspo_ctx, True)}
    for method, (responses, open_book) in arms.items():
        for seed in range(5):
            write_run(root, method, seed, responses, open_book, tokens if open_book else 30,
                      zero_std if open_book else 0.0)
    return root


def section(root, preflight=None):
    responses = load_responses(root)
    return evidence_section(root, metric_cells(responses), responses, load_training(root),
                            judges_of(responses, "kb"), BOOT, preflight)


YES = ([([CAPITAL, SEINE, PEOPLE], [S, S, U])], [([CAPITAL, SEINE, LOUVRE], [S, S, S])])


@pytest.mark.parametrize("grpo_ctx, fspo_ctx, extra, answer, detail", [
    (*YES, {}, "yes", []),
    (YES[0], [([CAPITAL, SEINE, COPIED], [S, S, S])], {}, "yes by a guarded route", ["copying"]),
    (YES[0], [([CAPITAL], [S])], {}, "refuted", []),   # one supported sentence against two
    ([(FACTS[:7] + [PEOPLE], [S] * 7 + [U])], [(FACTS, [S] * 8)], {}, "inconclusive",
     ["grpo+ctx's kb step hallucination is 12.5%, below 15%: no room to fall"]),
    (*YES, {"tokens": 64}, "inconclusive",
     ["the ctx arms' share of held-out responses cut at the token limit is 100.0%, more than 20%"]),
    (*YES, {"zero_std": 0.75}, "inconclusive",
     ["the ctx arms' share of training groups without reward spread is 75%, more than 50%"]),
])
def test_h1_on_hand_made_runs(tmp_path, grpo_ctx, fspo_ctx, extra, answer, detail):
    found = section(study(tmp_path, grpo_ctx, fspo_ctx, **extra))
    h1 = found["h1"]
    assert h1["answer"] == answer
    assert (h1["guards_up"] if answer.startswith("yes") else h1["reasons"]) == detail
    if answer == "yes":
        assert h1["rows"]["step_hallucination@kb"]["diff"] == pytest.approx(-1 / 3)
        assert h1["matched"]["diff"] == pytest.approx(-1 / 3)        # both in the 3-sentence stratum
        # (0 - 1/3) - (0 - 1/2): the closed-book fspo's bare name carries no checkable sentence
        rate = next(r for r in found["interaction"] if r["metric"] == "step_hallucination@kb")
        assert rate["diff"] == pytest.approx(1 / 6) and rate["low"] == pytest.approx(1 / 6)
    # the strict arm: bare names gone (0 against fspo's half), two supported sentences against 0.5 and grpo's 1
    assert found["strict"]["answer"] == "restores supported sentences"
    assert found["strict"]["versus_fspo"]["bare_name@kb"]["diff"] == pytest.approx(-0.5)


def test_partial_arms_are_not_read(tmp_path):
    root = study(tmp_path, *YES)
    for name in ("fspo_ctx_s4", "fspo_strict_s2", "fspo_strict_s3", "fspo_strict_s4"):
        shutil.rmtree(root / name)
    found = section(root)
    assert "h1" not in found and "strict" not in found and "interaction" not in found
    assert found["h1_not_read"] == ["4 of 5 seeds of fspo+ctx in; not read yet"]
    assert found["strict_not_read"] == ["2 of 5 seeds of fspo+strict in; not read yet"]


def test_open_book_runs_without_the_evidence_or_the_judge_are_not_read(tmp_path):
    root = study(tmp_path, *YES)
    config = root / "grpo_ctx_s2" / "config.yaml"
    config.write_text(config.read_text().replace("true", "false"))
    records = root / "fspo_ctx_s1" / "eval" / "records.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    for row in rows[:3]:
        del row["sentence_labels_by_judge"]["kb"]
    records.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    strict = root / "fspo_strict_s0" / "config.yaml"
    strict.write_text(strict.read_text().replace("false", "true"))
    found = section(root)
    assert found["strict_not_read"] == [
        "fspo_strict_s0 (fspo+strict) had the evidence in the training prompt (data.evidence_in_prompt); not read"]
    assert "h1" not in found and found["h1_not_read"] == [
        "3 held-out responses of fspo+ctx carry no kb labels (label them with the kb judge first: `rejudge`); not read yet",
        "grpo_ctx_s2 (grpo+ctx) did not have the evidence in the training prompt (data.evidence_in_prompt); not read"]


def test_no_ctx_or_strict_run_no_section(tmp_path):
    for seed in range(2):
        write_run(tmp_path, "grpo", seed, [([CAPITAL], [S])])
        write_run(tmp_path, "fspo", seed, [([CAPITAL], [S])])
    assert section(tmp_path) == {}


def test_the_study_report_renders_the_answers(tmp_path):
    """study_report -> summary.json's statistics -> summary.md (as make report renders it)."""
    from fspo_lite.drivers.report import study_report
    from fspo_lite.drivers.report.render import summary_document

    runs = study(tmp_path / "runs", YES[0], [([CAPITAL, SEINE, COPIED], [S, S, S])])
    preflight = tmp_path / "runs" / ".." / "preflight_ctx"
    preflight.mkdir()
    (preflight / "preflight.json").write_text(json.dumps({
        "second_supported_share": 0.363, "second_supported": 33, "second_sentences": 91,
        "interval_95": [0.271, 0.465], "passes": True}))
    order = ["grpo", "fspo", "fspo+strict", "grpo+ctx", "fspo+ctx"]
    out = study_report(Study(runs, order, figures_dir=tmp_path / "figures", results_dir=tmp_path / "results",
                             primary_judge="kb"), Bootstrap(**{k: BOOT[k] for k in ("n_resamples", "seed")}))
    stats = json.loads(json.dumps({k: v for k, v in out.items() if k != "markdown"}))
    assert stats["evidence"]["h1"]["answer"] == "yes by a guarded route"
    text = summary_document({"statistics": stats, "report": {"order": order, "title": "t"}})
    top = text.split("## Main table")[0]
    assert ("- Evidence in the prompt: H1 (fspo+ctx - grpo+ctx) **yes by a guarded route**; closing the bare-name "
            "escape (fspo+strict) **restores supported sentences**.") in top
    assert ("**Yes by a guarded route**: with the evidence in the prompt, FSPO's step hallucination falls against "
            "GRPO's under kb, embedding and likelihood, and its kb-supported sentences per response do not fall") in text
    assert "But copying moves up against grpo+ctx" in text
    assert "33 of 91 second reasoning sentences kb-supported, 36.3% [27.1, 46.5] (gate 30%, point estimate: passed)" in text
    assert "The escape was closed (bare-name share, fspo+strict - fspo: -50.0 [-50.0, -50.0] (down))" in text
    assert "**Restores supported sentences**" in text
    assert "| copying: sentences copied from the evidence | 33.3 | 0.0 | +33.3 [+33.3, +33.3] (up) |" in text
    assert "What it can and cannot show: Open-book training measures faithfulness" in text
    assert "Multiplicity: These are about ten readings" in text
    assert "## Evidence in the prompt, and the flip's escape closed" in (tmp_path / "results" / "summary.md").read_text()


def test_a_seed_outside_the_registered_ones_is_not_read(tmp_path):
    root = study(tmp_path, *YES)
    write_run(root, "fspo+ctx", 5, [([CAPITAL], [S])], open_book=True)   # it would refute H1 if it were read
    found = section(root)
    assert found["h1"]["answer"] == "yes"
    assert found["h1"]["rows"]["supported_per_response@kb"]["diff"] == pytest.approx(1.0)


def with_control(root):
    """The evaluation-only control beside the 2x2: closed-book training, the evidence shown at test only."""
    for seed in range(5):
        write_run(root, "grpo+ctxeval", seed, [([CAPITAL, PEOPLE, SEINE], [S, U, S])], asked=True)
        write_run(root, "fspo+ctxeval", seed, [([CAPITAL, SEINE], [S, S])], asked=True)
    return root


def test_the_evaluation_only_control_is_described(tmp_path):
    found = section(with_control(study(tmp_path, *YES)))
    control = found["control"]
    assert control["arms"] == ["fspo", "grpo", "fspo+ctxeval", "grpo+ctxeval", "fspo+ctx", "grpo+ctx"]
    assert control["means"]["step_hallucination@kb"]["grpo+ctxeval"] == pytest.approx(1 / 3)
    assert control["means"]["supported_per_response@kb"]["fspo+ctxeval"] == pytest.approx(2.0)
    rows = {(p["arm"], p["reference"]): p["rows"] for p in control["pairs"]}
    assert rows[("fspo+ctxeval", "grpo+ctxeval")]["step_hallucination@kb"]["diff"] == pytest.approx(-1 / 3)
    assert rows[("grpo+ctxeval", "grpo")]["supported_per_response@kb"]["diff"] == pytest.approx(1.0)
    # fspo+ctx (three supported) against fspo+ctxeval (two)
    assert rows[("fspo+ctx", "fspo+ctxeval")]["supported_per_response@kb"]["diff"] == pytest.approx(1.0)
    assert found["h1"]["answer"] == "yes"                          # the registered readings do not move
    assert control["same_training"] == {"fspo+ctxeval": [], "grpo+ctxeval": []}   # no rewards logged: none the same


def test_a_control_run_asked_without_the_evidence_is_not_read(tmp_path):
    root = with_control(study(tmp_path, *YES))
    config = root / "grpo_ctxeval_s3" / "config.yaml"
    config.write_text(config.read_text().replace("evidence_in_prompt: true", "evidence_in_prompt: false"))
    trained = root / "fspo_ctxeval_s1" / "config.yaml"
    trained.write_text(trained.read_text().replace("evidence_in_prompt: false", "evidence_in_prompt: true", 1))
    shutil.rmtree(root / "fspo_ctxeval_s4")
    found = section(root)
    assert "control" not in found
    assert found["control_not_read"] == [
        "4 of 5 seeds of fspo+ctxeval in; not read yet",
        "grpo_ctxeval_s3 (grpo+ctxeval) did not have the evidence in the held-out prompt (evaluation.evidence_in_prompt); "
        "not read"]


def test_the_main_tables_leave_the_other_prompt_arms_out(tmp_path):
    """Arms asked with the evidence shown are set aside: the main tables' numbers are those of a runs folder
    without them, to the last digit, and the evidence section names them."""
    from fspo_lite.drivers.report import study_report
    from fspo_lite.drivers.report.render import summary_document

    order = ["grpo", "fspo", "fspo+strict"]
    boot = Bootstrap(**{k: BOOT[k] for k in ("n_resamples", "seed")})
    full = with_control(study(tmp_path / "full", *YES))
    bare = tmp_path / "bare"
    shutil.copytree(full, bare, ignore=shutil.ignore_patterns("*ctx*"))
    out = {name: study_report(Study(runs, order, figures_dir=tmp_path / name, primary_judge="kb"), boot)
           for name, runs in (("full", full), ("bare", bare))}
    for part in ("methods", "differences", "matched_length", "controls"):
        assert out["full"][part] == out["bare"][part]
    assert {row["method"] for row in out["full"]["methods"]} == {"grpo", "fspo", "fspo+strict"}
    assert out["full"]["evidence"]["set_aside"] == ["fspo+ctx", "fspo+ctxeval", "grpo+ctx", "grpo+ctxeval"]
    stats = json.loads(json.dumps({k: v for k, v in out["full"].items() if k != "markdown"}))
    text = summary_document({"statistics": stats, "report": {"order": order, "title": "t"}})
    assert "Not in the tables above, read here only: fspo+ctx, fspo+ctxeval, grpo+ctx, grpo+ctxeval" in text
    assert "### The evaluation-only control: closed-book adapters asked with the evidence shown" in text
    assert "| fspo+ctxeval - grpo+ctxeval | -33.3 [-33.3, -33.3] (down) |" in text
    assert "rewards step for step: fspo+ctxeval 0 of 5, grpo+ctxeval 0 of 5." in text


def test_an_own_arm_asked_open_book_is_named_without_the_study_arms(tmp_path):
    """No ctx, strict or control run: the set-aside arm is still named, and nothing else of the section is shown."""
    from fspo_lite.drivers.report import study_report
    from fspo_lite.drivers.report.evidence_text import evidence_lead, evidence_paragraph
    from fspo_lite.drivers.report.render import summary_document

    for seed in range(2):
        write_run(tmp_path, "grpo", seed, [([CAPITAL, PEOPLE], [S, U])])
        write_run(tmp_path, "fspo", seed, [([CAPITAL], [S])])
        write_run(tmp_path, "mine", seed, [([CAPITAL, SEINE], [S, S])], asked=True)
    out = study_report(Study(tmp_path, ["grpo", "fspo"], figures_dir=tmp_path / "figures", primary_judge="kb"),
                       Bootstrap(**{k: BOOT[k] for k in ("n_resamples", "seed")}))
    assert out["evidence"] == {"set_aside": ["mine"]}
    assert {row["method"] for row in out["methods"]} == {"grpo", "fspo"}
    stats = json.loads(json.dumps({k: v for k, v in out.items() if k != "markdown"}))
    text = summary_document({"statistics": stats, "report": {"order": ["grpo", "fspo"], "title": "t"}})
    assert "## Arms asked with another held-out prompt\n\nNot in the tables above: mine (their held-out" in text
    assert "Evidence in the prompt" not in text
    assert evidence_lead(out["evidence"]) == [] and evidence_paragraph(out["evidence"]) == ""
