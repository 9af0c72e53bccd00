"""The evidence-in-the-prompt readings (docs/statistics.md, "Evidence in the prompt, and the flip's escape closed"):
each new per-response quantity by hand and on hostile records, the registered rules on hand-made difference rows,
the interaction's shared question draw, and the whole report on hand-made run folders whose answers are known."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from fspo_lite import stats
from fspo_lite.drivers.report.evidence import (copied_count, evidence_cells, evidence_sentences, gold_aliases,
                                               is_bare, is_cut, other_prompt_arms, padding_count, read_preflight,
                                               response_quantities, run_settings, same_training, states_answer,
                                               zero_spread)
from fspo_lite.drivers.report.evidence_readings import h1_answer, seeds_line, strict_answer
from fspo_lite.evaluation.result_files import ResultFileError
from conftest import kbqa_record

EVIDENCE = "Paris was founded by the Parisii tribe. Its river is the Seine."
PROMPT = f"<|im_start|>user\nEvidence:\n{EVIDENCE}\n\nQuestion: What is the capital of France?<|im_end|>\n"


def test_evidence_sentences_are_read_from_the_last_user_message():
    assert evidence_sentences(PROMPT) == ["Paris was founded by the Parisii tribe.", "Its river is the Seine."]
    # a few-shot turn earlier in the prompt holds no evidence; the last one is read
    assert evidence_sentences("Evidence:\nOld. \n\nQuestion: a\n" + PROMPT)[0].startswith("Paris was founded")
    for closed in ("Question: What is the capital of France?", "", None, 7, ["Evidence:\nx\n\nQuestion: y"],
                   "Evidence:\nno question follows"):
        assert evidence_sentences(closed) == []


def test_gold_aliases_are_normalised_as_the_grader_normalises():
    assert gold_aliases(["The Pacific Ocean!", "", "A", 7, None]) == ["pacific ocean"]  # "A" is an article: empty
    assert gold_aliases("O") == ["o"]
    for hostile in (None, 5, {"a": 1}, [[["Paris"]]]):
        assert gold_aliases(hostile) == []


def test_a_sentence_states_the_answer_only_as_whole_words():
    assert states_answer("Oxygen has the chemical symbol of O.", ["o"])
    assert not states_answer("Oxygen is a chemical element.", ["o"])     # 'o' inside 'oxygen' does not count
    assert states_answer("The largest is the Pacific  Ocean.", ["pacific ocean"])
    assert not states_answer("Anything", [])


def test_padding_by_hand():
    sentences = ["Fluorine has atomic number 9.", "Fluorine is a halogen.", "It is in period 2.", "Nine is it."]
    # supported: 1st (states 9: not padding), 2nd (no 9: padding), 4th ('nine' is not the alias '9': padding);
    # the 3rd is unsupported and never padding
    assert padding_count(sentences, [1, 1, -1, 1], ["9"]) == 2
    assert padding_count(sentences, [1, 1], ["9"]) == 1          # labels shorter than sentences: the rest unlabelled
    assert padding_count([], [1, 1], ["9"]) == 0


def test_copying_by_hand():
    evidence = ["Fluorine is a chemical element with the symbol F and atomic number 9."]
    # 12 of the evidence's 13 words, nothing else: Jaccard 12/13 = 0.92 >= 0.8
    assert copied_count(["Fluorine is a chemical element with symbol F and atomic number 9"], evidence) == 1
    assert copied_count(["Fluorine is a halogen."], evidence) == 0                   # 3 / 14
    assert copied_count(["a b c d"], ["a b c d e"]) == 1                              # exactly 4 / 5 = 0.8
    assert copied_count(["a b c"], ["a b c d"]) == 0                                  # 3 / 4 = 0.75
    assert copied_count(["...", "!"], ["...", "a"]) == 0                              # no words: copies nothing
    assert copied_count(["a b c d"], []) == 0


def test_bare_name_and_cut_at_the_token_limit_by_hand():
    assert is_bare([]) and is_bare([0, 0]) and not is_bare([0, -1]) and not is_bare([1])
    assert is_cut(64, 64) == 1.0 and is_cut(63, 64) == 0.0
    for tokens, limit in ((None, 64), (64, None), (True, 64), ("64", 64), (-1, 64), (64, 0), (64.0, 64)):
        assert math.isnan(is_cut(tokens, limit))


def _record(sentences, labels, **extra):
    return kbqa_record(sentences, labels, prompt=PROMPT, **extra)


def test_one_response_by_hand():
    record = _record(["Paris is big.", "paris is BIG", "Paris was founded by the Parisii tribe.", "Lyon is big."],
                     [1, 0, 1, 1], response_tokens=64)
    q = response_quantities(record, "kb", 64)
    # padding: 'Lyon is big.' (supported, no 'paris'); copied: the 3rd; near-duplicates: the 2nd repeats the 1st
    assert q == {"sentences": 4, "texts": 4, "checkable": 3, "padding": 1, "copied": 1, "bare": 0.0,
                 "near_duplicates": 1, "uncheckable": 1, "malformed": 0.0, "cut": 1.0}
    assert response_quantities(record, "nobody") is None


@pytest.mark.parametrize("damage", [
    {"output": 7}, {"output": None}, {"sentence_spans": "0-5"}, {"sentence_spans": [[0, 10 ** 9], [3], ["a", 2]]},
    {"gold": {"x": 1}}, {"gold": None}, {"prompt": ["Evidence:\n"]}, {"format_ok": "yes"}, {"response_tokens": "64"},
    {"sentence_labels_by_judge": {"kb": [1, 0], "embedding": "S"}},
])
def test_hostile_records_count_what_they_can_and_never_raise(damage):
    record = {**_record(["Paris is big.", "Lyon is big."], [1, 0]), **damage}
    q = response_quantities(record, "kb", 64)
    assert q["checkable"] == 1 and q["bare"] == 0.0 and q["sentences"] >= 2
    assert q["malformed"] == (0.0 if damage.get("format_ok", True) is True else 1.0)


@pytest.mark.parametrize("labels", [None, "1,0", [1, 2], [1, "1"], [True], {"a": 1}])
def test_records_whose_labels_are_not_labels_are_not_counted(labels):
    record = {**_record(["Paris is big."], [1]), "sentence_labels_by_judge": {"kb": labels}}
    assert response_quantities(record, "kb", 64) is None
    assert response_quantities("not a record", "kb", 64) is None


def test_cells_by_hand():
    rows = pd.DataFrame([
        {"method": "m", "seed": 0, "question": "q", "judged": 1.0, "sentences": 2, "texts": 2, "checkable": 2,
         "padding": 1, "copied": 1, "bare": 0.0, "near_duplicates": 0, "uncheckable": 0, "malformed": 0.0, "cut": 1.0},
        {"method": "m", "seed": 0, "question": "q", "judged": 1.0, "sentences": 0, "texts": 0, "checkable": 0,
         "padding": 0, "copied": 0, "bare": 1.0, "near_duplicates": 0, "uncheckable": 0, "malformed": 1.0,
         "cut": math.nan},
        {"method": "m", "seed": 0, "question": "q", "judged": 0.0}])       # no kb labels: left out
    cells = evidence_cells(rows).set_index("metric")
    assert tuple(cells.loc["padding_per_response@kb", ["num", "den"]]) == (1, 2)
    assert tuple(cells.loc["copied_share", ["num", "den"]]) == (1, 2)        # over reasoning sentences
    assert tuple(cells.loc["bare_name@kb", ["num", "den"]]) == (1, 2)
    assert tuple(cells.loc["malformed", ["num", "den"]]) == (1, 2)
    assert tuple(cells.loc["cut_at_limit", ["num", "den"]]) == (1, 1)        # the unknown limit is left out


def test_zero_spread_pooled_and_per_arm():
    training = pd.DataFrame({"method": ["a", "a", "b", "c", "b", "b"],
                             "frac_reward_zero_std": [0.0, 1.0, 0.5, 1.0, "x", 7.0]})  # 'x' and 7.0 are not shares
    assert zero_spread(training, ["a", "b"]) == {"pooled": 0.5, "a": 0.5, "b": 0.5}
    assert all(math.isnan(v) for v in zero_spread(pd.DataFrame(), ["a"]).values())


def test_run_settings_and_their_hostile_forms(tmp_path):
    closed = {"max_new_tokens": None, "evidence_in_prompt": False, "heldout_evidence": False}
    assert run_settings(tmp_path) == closed
    (tmp_path / "config.yaml").write_text("data:\n  evidence_in_prompt: true\nevaluation:\n  max_new_tokens: 64\n")
    assert run_settings(tmp_path) == {"max_new_tokens": 64, "evidence_in_prompt": True, "heldout_evidence": True}
    # the held-out prompt follows training's unless evaluation.evidence_in_prompt says otherwise
    (tmp_path / "config.yaml").write_text("data:\n  evidence_in_prompt: false\nevaluation:\n  evidence_in_prompt: true\n")
    assert run_settings(tmp_path) == {**closed, "heldout_evidence": True}
    (tmp_path / "config.yaml").write_text("data:\n  evidence_in_prompt: true\nevaluation:\n  evidence_in_prompt: false\n")
    assert run_settings(tmp_path) == {**closed, "evidence_in_prompt": True}
    (tmp_path / "config.yaml").write_text("data:\n  evidence_in_prompt: 'yes'\nevaluation: 3\n")
    assert run_settings(tmp_path) == closed
    for text in ("- a\n- b\n", "a: [unclosed\n", "evaluation:\n  max_new_tokens: '64'\n",
                 "evaluation:\n  max_new_tokens: 0\n", "evaluation:\n  max_new_tokens: true\n",
                 "evaluation:\n  evidence_in_prompt: 'yes'\n", "evaluation:\n  evidence_in_prompt: 1\n"):
        (tmp_path / "config.yaml").write_text(text)
        with pytest.raises(ResultFileError, match="config.yaml"):
            run_settings(tmp_path)


def test_arms_asked_with_another_prompt_are_set_aside(tmp_path):
    def run(name, method, config=None):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "heldout.json").write_text(json.dumps({"method": method, "seed": 0, "metrics": {}}))
        if config is not None:
            (folder / "config.yaml").write_text(config)

    run("base", "base")
    run("grpo_s0", "grpo", "data:\n  evidence_in_prompt: false\n")
    run("fspo_s0", "fspo", "evaluation:\n  evidence_in_prompt: null\n")
    run("grpo_ctx_s0", "grpo+ctx", "data:\n  evidence_in_prompt: true\n")
    run("grpo_ctxeval_s0", "grpo+ctxeval", "evaluation:\n  evidence_in_prompt: true\n")
    run("mixed_s0", "mixed", "data:\n  evidence_in_prompt: false\n")
    run("mixed_s1", "mixed", "evaluation:\n  evidence_in_prompt: true\n")
    assert other_prompt_arms(tmp_path, "grpo") == ["grpo+ctx", "grpo+ctxeval", "mixed"]
    # an open-book baseline: the closed-book arms are the other ones
    assert other_prompt_arms(tmp_path, "grpo+ctx") == ["fspo", "grpo", "mixed"]
    # no run of the reference: closed-book is the reference
    assert other_prompt_arms(tmp_path, "absent") == ["grpo+ctx", "grpo+ctxeval", "mixed"]


def test_the_preflight_reading_and_its_hostile_forms(tmp_path):
    path = tmp_path / "preflight.json"
    assert read_preflight(path) is None
    good = {"second_supported_share": 0.363, "second_supported": 33, "second_sentences": 91,
            "interval_95": [0.271, 0.465], "passes": True, "gate": 0.3}
    path.write_text(json.dumps(good))
    assert read_preflight(path) == {"share": 0.363, "low": 0.271, "high": 0.465, "supported": 33, "sentences": 91,
                                    "passes": True, "gate": 0.3}
    for bad in ({"second_supported_share": 1.5}, {"second_supported": 92}, {"interval_95": [0.2]},
                {"passes": "yes"}, {"second_sentences": -1}, {"second_supported_share": True}):
        path.write_text(json.dumps({**good, **bad}))
        with pytest.raises(ResultFileError, match="pre-flight"):
            read_preflight(path)
    for text in ("[1, 2]", "{not json"):
        path.write_text(text)
        with pytest.raises(ResultFileError):
            read_preflight(path)


def test_interaction_by_hand():
    def arm(rate):  # one seed, two questions, the same rate in both
        return np.array([[rate, rate]]), np.array([[1.0, 1.0]])

    result = stats.interaction_difference([arm(0.5), arm(0.25), arm(0.4), arm(0.3)], 200)
    assert result["diff"] == pytest.approx(0.15)
    assert (result["low"], result["high"]) == pytest.approx((0.15, 0.15))
    # a = c and b = d with values that differ by question: one question draw for all four arms makes every
    # replicate exactly 0 (a draw per pair would spread it)
    a, b = (np.array([[1.0, 0.0, 3.0]]), np.ones((1, 3))), (np.array([[0.0, 2.0, 1.0]]), np.ones((1, 3)))
    shared = stats.interaction_difference([a, b, a, b], 500)
    assert shared["diff"] == 0 and shared["low"] == 0 and shared["high"] == 0
    with pytest.raises(ValueError, match="four arms"):
        stats.interaction_difference([a, b, a], 10)
    with pytest.raises(ValueError, match="same questions"):
        stats.interaction_difference([a, b, a, arm(0.1)], 10)


def _row(low, high):
    return {"diff": (low + high) / 2, "low": low, "high": high}


DOWN, UP, ZERO = _row(-0.2, -0.1), _row(0.1, 0.2), _row(-0.1, 0.1)


def _h1_rows(kb=DOWN, embedding=DOWN, likelihood=ZERO, supported=ZERO, **guards):
    rows = {"step_hallucination@kb": kb, "step_hallucination@embedding": embedding,
            "step_hallucination@likelihood": likelihood, "supported_per_response@kb": supported,
            "supported_per_response@embedding": ZERO, "supported_per_response@likelihood": ZERO}
    names = {"padding": "padding_per_response@kb", "copying": "copied_share", "bare": "bare_name@kb"}
    return {**rows, **{names[k]: v for k, v in guards.items()}}


@pytest.mark.parametrize("rows, matched, room, spread, cut, answer", [
    (_h1_rows(), ZERO, 0.3, 0.2, 0.1, "yes"),
    (_h1_rows(), DOWN, 0.15, 0.5, 0.2, "yes"),                       # each condition exactly at its limit: not met
    (_h1_rows(copying=UP, padding=ZERO), ZERO, 0.3, 0.2, 0.1, "yes by a guarded route"),
    (_h1_rows(supported=_row(-0.3, -0.01)), ZERO, 0.3, 0.2, 0.1, "refuted"),   # whatever the rate does
    (_h1_rows(supported=_row(-0.3, -0.01)), ZERO, 0.1, 0.2, 0.1, "inconclusive"),  # inconclusive comes first
    (_h1_rows(), ZERO, 0.149, 0.2, 0.1, "inconclusive"),
    (_h1_rows(), ZERO, 0.3, 0.51, 0.1, "inconclusive"),
    (_h1_rows(), ZERO, 0.3, 0.2, 0.21, "inconclusive"),
    (_h1_rows(), ZERO, 0.3, math.nan, 0.1, "inconclusive"),          # not measured: cannot be ruled out
    (_h1_rows(embedding=ZERO), ZERO, 0.3, 0.2, 0.1, "no"),            # kb alone
    (_h1_rows(kb=ZERO), ZERO, 0.3, 0.2, 0.1, "no"),
    (_h1_rows(), UP, 0.3, 0.2, 0.1, "no"),                           # kb's matched-length difference above 0
    (_h1_rows(), None, 0.3, 0.2, 0.1, "yes"),                        # no stratum in common: no matched reading
])
def test_h1_rule_by_hand(rows, matched, room, spread, cut, answer):
    assert h1_answer(rows, matched, room, spread, cut)["answer"] == answer


def test_h1_names_its_reasons_and_guards():
    result = h1_answer(_h1_rows(copying=UP, bare=UP, padding=DOWN), ZERO, 0.3, 0.2, 0.1)
    assert result["guards_up"] == ["copying", "bare name"] and result["second_judges"] == ["embedding"]
    reasons = h1_answer(_h1_rows(), ZERO, 0.12, 0.75, math.nan)["reasons"]
    assert reasons == ["grpo+ctx's kb step hallucination is 12.0%, below 15%: no room to fall",
                       "the ctx arms' share of training groups without reward spread is 75%, more than 50%",
                       "the ctx arms' share of held-out responses cut at the token limit was not measured"]
    assert h1_answer(_h1_rows(embedding=ZERO), ZERO, 0.3, 0.2, 0.1)["why_not"] == [
        "under kb only, not under embedding or likelihood"]


def _strict(bare=DOWN, supported=ZERO, versus_grpo=ZERO, **places):
    names = {"unknown": "not_attempted", "malformed": "malformed", "duplicates": "near_duplicates_per_response",
             "uncheckable": "uncheckable_per_response@kb"}
    fspo = {"bare_name@kb": bare, "supported_per_response@kb": supported, **{names[k]: v for k, v in places.items()}}
    return fspo, {"supported_per_response@kb": versus_grpo}


@pytest.mark.parametrize("case, answer, moved", [
    (_strict(bare=ZERO, supported=UP), "the escape was not closed", []),
    (_strict(supported=UP), "restores supported sentences", []),
    (_strict(supported=UP, versus_grpo=DOWN), "neither", []),          # more than fspo, still fewer than grpo
    (_strict(malformed=UP, unknown=ZERO), "moves the pressure elsewhere", ["malformed answers"]),
    (_strict(supported=UP, uncheckable=UP, duplicates=UP),
     "restores supported sentences and moves the pressure elsewhere",
     ["near-duplicate sentences", "sentences the judge cannot check"]),
    (_strict(malformed=DOWN), "neither", []),
])
def test_strict_rule_by_hand(case, answer, moved):
    result = strict_answer(*case)
    assert result["answer"] == answer and result["moved_to"] == moved


def test_a_partial_arm_is_never_read():
    assert seeds_line("grpo+ctx", [0, 1, 2]) == "3 of 5 seeds of grpo+ctx in; not read yet"
    assert seeds_line("grpo+ctx", [5, 6, 7, 8, 9]) == "0 of 5 seeds of grpo+ctx in; not read yet"
    assert seeds_line("grpo+ctx", np.array([4, 3, 2, 1, 0, 5])) is None


def _words_h1(answer, **extra):
    rows = {"step_hallucination@kb": {**DOWN, "move": "down"}, "supported_per_response@kb": {**ZERO, "move": "holds 0"}}
    return {"answer": answer, "rows": rows, "reasons": [], "guards_up": [], "second_judges": ["embedding"],
            "why_not": [], "matched": None, **extra}


def test_the_answers_in_plain_words():
    from fspo_lite.drivers.report.evidence_text import evidence_lead, evidence_markdown, h1_words, strict_words

    assert h1_words(_words_h1("yes")).startswith("**Yes**: with the evidence in the prompt, FSPO's step hallucination "
                                                 "falls against GRPO's under kb and embedding, and its kb-supported")
    assert "kb at matched length: n/a" in h1_words(_words_h1("yes"))
    guarded = h1_words(_words_h1("yes by a guarded route", guards_up=["padding", "bare name"]))
    assert guarded.startswith("**Yes by a guarded route**") and "But padding and bare name move up" in guarded
    assert h1_words(_words_h1("inconclusive", reasons=["a", "b"])).startswith("**Inconclusive**, as registered: a; b.")
    assert h1_words(_words_h1("refuted")).startswith("**Refuted**: with the evidence in the prompt, FSPO still writes")
    assert h1_words(_words_h1("no", why_not=["under kb only"])).startswith("**No**: H1's rule is not met (under kb only)")
    bare = {"diff": -0.1, "low": -0.2, "high": 0.05, "move": "holds 0", "welch_low": -0.3, "welch_high": 0.1}
    text = strict_words({"versus_fspo": {"bare_name@kb": bare}, "versus_grpo": {}, "closed": False,
                         "answer": "the escape was not closed", "moved_to": ["malformed answers"]})
    assert text == ("**The escape was not closed** (bare-name share, fspo+strict - fspo: -10.0 [-20.0, +5.0] (holds 0; "
                    "seeds, Welch [-30.0, +10.0])). Described only: kb-supported sentences per response n/a against "
                    "fspo, n/a against grpo; pressure elsewhere: malformed answers.")
    assert evidence_lead(None) == [] and evidence_markdown({}) == []
    waiting = {"h1_not_read": ["0 of 5 seeds of fspo+ctx in; not read yet"], "seeds": [0],
               "strict_not_read": ["2 of 5 seeds of fspo+strict in; not read yet"]}
    assert evidence_lead(waiting) == [
        "- Evidence in the prompt: H1 (fspo+ctx - grpo+ctx) **0 of 5 seeds of fspo+ctx in; not read yet**; closing the "
        "bare-name escape (fspo+strict) **2 of 5 seeds of fspo+strict in; not read yet**. One reading in twenty can "
        "fall outside its interval by chance."]
    assert "- 0 of 5 seeds of fspo+ctx in; not read yet." in evidence_markdown(waiting)


def test_the_readme_paragraph():
    from fspo_lite.drivers.report.evidence_text import CAVEAT, evidence_paragraph

    assert evidence_paragraph(None) == "" and evidence_paragraph({}) == ""
    text = evidence_paragraph({"h1_not_read": ["3 of 5 seeds of grpo+ctx in; not read yet"],
                               "strict_not_read": ["2 of 5 seeds of fspo+strict in; not read yet"]})
    assert text.startswith("**Evidence in the prompt (H1, fspo+ctx - grpo+ctx).** 3 of 5 seeds of grpo+ctx in; not "
                           "read yet. **Closing the bare-name escape (fspo+strict - fspo).** 2 of 5 seeds of "
                           "fspo+strict in; not read yet. These are about ten readings")
    assert text.endswith(CAVEAT)


def test_the_words_beside_h1():
    from fspo_lite.drivers.report.evidence_text import h1_context

    assert h1_context({}) == ""
    h1 = {"room": 0.43, "spread": {"pooled": 0.159}, "cut": 0.191, "supported": "holds 0"}
    up = {"metric": "supported_per_response@kb", "diff": 0.18, "low": 0.06, "high": 0.31, "move": "up"}
    text = h1_context({"h1": h1, "interaction": [up]})
    assert text == ("Inconclusive lines: grpo+ctx's kb step hallucination 43.0% (line 15%), groups without reward "
                    "spread 15.9% (line 50%), responses cut at the token limit 19.1% (line 20%). Described, read by "
                    "no rule: the 2x2 interaction in kb-supported sentences per response, (fspo+ctx - grpo+ctx) - "
                    "(fspo - grpo), is +0.18 [+0.06, +0.31] (up): with the evidence shown, FSPO gives up fewer "
                    "supported sentences against GRPO than it does closed-book; open-book, FSPO's supported "
                    "sentences do not fall against GRPO's.")
    # the interaction up while open-book FSPO still loses supported sentences: the second half is not said
    text = h1_context({"h1": {**h1, "supported": "down"}, "interaction": [up]})
    assert text.endswith("than it does closed-book.")
    text = h1_context({"h1": h1, "interaction": [{**up, "low": -0.01, "move": "holds 0"}]})
    assert "gives up about as many supported sentences against GRPO as it does closed-book." in text
    assert h1_context({"h1": h1}).endswith("(line 20%).")     # no interaction read: the lines only


def test_same_training_compares_the_logged_rewards_step_for_step():
    def log(method, seed, rewards, column="reward_mean"):
        return [{"method": method, "seed": seed, "step": k + 1, column: r} for k, r in enumerate(rewards)]

    training = pd.DataFrame(log("grpo", 0, [0.1, 0.2]) + log("grpo+ctxeval", 0, [0.1, 0.2])        # the same
                            + log("grpo", 1, [0.1, 0.2]) + log("grpo+ctxeval", 1, [0.1, 0.3])      # one step apart
                            + log("grpo", 2, [0.1, 0.2]) + log("grpo+ctxeval", 2, [0.1])           # a step short
                            + log("grpo+ctxeval", 3, [0.1, 0.2])                                   # no grpo run
                            + log("grpo", 4, [0.2, 0.1])[::-1] + log("grpo+ctxeval", 4, [0.1, 0.2])[::-1])  # rows
    # in reverse step order: sorted by step first, so seed 4 differs (0.2, 0.1 against 0.1, 0.2)
    assert same_training(training, "grpo+ctxeval", "grpo") == [0]
    rows = log("grpo", 0, [0.1, 0.2]) + log("grpo+ctxeval", 0, [0.1, 0.2])
    assert same_training(pd.DataFrame(rows), "grpo+ctxeval", "grpo") == [0]
    assert same_training(pd.DataFrame(rows), "grpo+ctxeval", "grpo", column="loss") == []
    assert same_training(pd.DataFrame(), "grpo+ctxeval", "grpo") == []


def test_the_control_in_words():
    from fspo_lite.drivers.report.evidence_text import control_words

    assert control_words({}) == "" and control_words({"control_not_read": ["1 of 5 seeds"]}) == ""

    def row(diff, low, high, move):
        return {"diff": diff, "low": low, "high": high, "move": move}

    rate, supported = "step_hallucination@kb", "supported_per_response@kb"
    control = {"means": {"cut_at_limit": {"grpo+ctxeval": 0.515, "fspo+ctxeval": 0.301}}, "pairs": [
        {"arm": "grpo+ctxeval", "reference": "grpo", "rows": {rate: row(-0.328, -0.386, -0.26, "down")}},
        {"arm": "fspo+ctxeval", "reference": "fspo", "rows": {rate: row(-0.355, -0.43, -0.282, "down")}},
        {"arm": "grpo+ctx", "reference": "grpo+ctxeval", "rows": {supported: row(0.34, 0.21, 0.47, "up")}}]}
    assert control_words({"control": control}) == (
        "The evaluation-only control (described, no rule): shown the evidence at test only, the closed-book adapters' "
        "kb step hallucination changes by -32.8 [-38.6, -26.0] (down) points (grpo) and -35.5 [-43.0, -28.2] (down) "
        "(fspo), with 51.5% and 30.1% of their responses cut at the token limit; training with the evidence changes "
        "kb-supported sentences per response by +0.34 [+0.21, +0.47] (up) (grpo) and n/a (fspo) over showing it at "
        "test only.")


def test_without_arms_drops_their_rows_and_leaves_a_frame_without_methods():
    from fspo_lite.drivers.report.evidence import without_arms

    frame = pd.DataFrame({"method": ["grpo", "grpo+ctx", "fspo"], "value": [1, 2, 3]})
    assert without_arms(frame, ["grpo+ctx"])["value"].tolist() == [1, 3]
    assert without_arms(frame, [])["value"].tolist() == [1, 2, 3]
    assert without_arms(pd.DataFrame(), ["grpo+ctx"]).empty
