"""The second blind audit in the report: the exact lower bound of a share with no failure, each arm's share and
the judges within each arm from hand labels, the reading and the verdict's headline over two audits."""

from __future__ import annotations

import math

import pytest

from fspo_lite import stats
from fspo_lite.data.labeling import SentenceItem
from fspo_lite.drivers.report.render import audit_states, verdict
from fspo_lite.drivers.report.validity import arm_readings, second_audit_markdown, second_audit_reading


def test_exact_lower_bound_by_hand():
    # every one of n agrees: the bound solves p ** n = 0.025, i.e. 0.025 ** (1 / n)
    assert stats.exact_lower(107, 107) == pytest.approx(0.025 ** (1 / 107)) == pytest.approx(0.96611, abs=1e-5)
    assert stats.exact_lower(1, 1) == pytest.approx(0.025)
    # 5 of 10: the textbook Clopper-Pearson interval [0.187, 0.813]
    assert stats.exact_lower(5, 10) == pytest.approx(0.1871, abs=1e-4)
    assert stats.exact_lower(0, 10) == 0.0 and math.isnan(stats.exact_lower(0, 0))


def _item(i, label):
    return SentenceItem(id=f"b-{i}", question="Q", evidence="E", response="S.", sentence="S.", span=(0, 2),
                        label=label)


def test_arm_readings_by_hand():
    """Two questions; grpo: both unsupported; fspo: q0 supported, q1 unsupported; corver: q0 not checkable, q1
    supported. The kb judge says -1 everywhere but fspo's q0 (+1)."""
    labels = {("grpo", "q0"): "unsupported", ("grpo", "q1"): "unsupported", ("fspo", "q0"): "supported",
              ("fspo", "q1"): "unsupported", ("corver", "q0"): "not_checkable", ("corver", "q1"): "supported"}
    items, key, rows = [], {}, []
    for i, ((method, question), label) in enumerate(labels.items()):
        items.append(_item(i, label))
        key[f"b-{i}"] = {"method": method, "question_id": question}
        human = {"supported": 1, "unsupported": -1, "not_checkable": 0}[label]
        rows.append({"id": f"b-{i}", "question": question, "method": method, "human": human,
                     "judges": {"kb": 1 if (method, question) == ("fspo", "q0") else -1}})
    result = arm_readings(items, key, rows, ["grpo", "fspo", "corver"], n_resamples=400)
    arms = result["arms"]
    assert arms["unsupported_share"] == {"grpo": 1.0, "fspo": 0.5, "corver": 0.0}
    assert arms["differences"]["fspo - grpo"]["diff"] == pytest.approx(-0.5)
    assert arms["differences"]["corver - grpo"]["diff"] == pytest.approx(-1.0)
    assert "judge_agreement" not in arms
    # kb: right on grpo (2 of 2) and fspo (2 of 2), wrong on corver's one checkable sentence
    assert result["by_arm"]["grpo"]["judges"]["kb"]["agree"] == 1.0
    assert result["by_arm"]["corver"]["checkable"] == 1 and result["by_arm"]["corver"]["judges"]["kb"]["agree"] == 0
    flip = result["by_arm"]["flip arms"]
    assert flip["methods"] == ["fspo", "corver"] and flip["checkable"] == 3
    assert flip["judges"]["kb"]["agree"] == pytest.approx(2 / 3)


def _validity(fspo_pair=(-0.06, -0.2, 0.08), kb_flip=1.0):
    row = {"agree": kb_flip, "agree_low": kb_flip, "agree_high": kb_flip, "kappa": 1.0, "kappa_low": 1.0,
           "kappa_high": 1.0, "constant": 0.7, "constant_low": 0.6, "constant_high": 0.8, "n": 107}
    arms = {"methods": ["grpo", "fspo"], "items": 80, "questions": 40,
            "counts": {"grpo": {"supported": 6, "unsupported": 34, "not_checkable": 0},
                       "fspo": {"supported": 7, "unsupported": 26, "not_checkable": 7}},
            "unsupported_share": {"grpo": 0.85, "fspo": 26 / 33},
            "unsupported_share_interval": {"grpo": [0.72, 0.95], "fspo": [0.64, 0.91]},
            "differences": {"fspo - grpo": dict(zip(("diff", "low", "high"), fspo_pair))}}
    return {"sets": {"second audit": {"arms": arms, "by_arm": {
        "grpo": {"methods": ["grpo"], "checkable": 40, "judges": {"kb": {**row, "agree": 0.9, "n": 40}}},
        "flip arms": {"methods": ["fspo"], "checkable": 107, "judges": {"kb": row}}}}}}


def test_second_audit_reading_and_section_come_from_the_numbers():
    text = second_audit_reading(_validity())
    assert "grpo 85% [72, 95], fspo 79% [64, 91]" in text and "fspo - grpo -6.0 [-20.0, +8.0] points" in text
    assert "no interval excludes 0" in text and "exact lower bound 96.6%" in text
    assert "resolved: fspo - grpo" in second_audit_reading(_validity((-0.3, -0.5, -0.1)))
    assert "exact lower bound" not in second_audit_reading(_validity(kb_flip=0.95))
    assert second_audit_reading({"sets": {}}) == "" and second_audit_markdown({}) == []
    section = "\n".join(second_audit_markdown(_validity(), "kb"))
    assert "| fspo | 7 | 26 | 7 | 78.8% [64.0, 91.0] |" in section
    assert "kb on flip arms (96.6%)" in section and "kb on grpo" not in section


def test_the_headline_reads_both_audits():
    summary = {"report": {"order": ["grpo", "fspo"]}, "statistics": {
        "judges": ["embedding"],
        "differences": [{"metric": "step_hallucination@embedding", "method": "fspo", "baseline": "grpo",
                         "diff": -0.1, "low": -0.15, "high": -0.05}],
        "matched_length": [{"judge": "embedding", "method": "fspo", "diff": 0.01, "low": -0.05, "high": 0.07}]},
        "methods": {"grpo": {"seeds": 1}, "fspo": {"seeds": 1}}}
    first = {"items": 10, "difference": "fspo - grpo", "diff": 0.1, "low": -0.03, "high": 0.24}
    assert audit_states(first, _validity(), "fspo - grpo") == ["unresolved", "unresolved"]
    assert audit_states(None, _validity(), "corver - grpo") == []
    result = verdict(summary, first, _validity())
    assert result["headline"].endswith("and neither blind audit confirms it.")
    assert any(line.startswith("Second blind audit (80 sentences") for line in result["lines"])
    below = verdict(summary, first, _validity((-0.3, -0.5, -0.1)))["headline"]
    assert below.endswith("and the blind audits disagree.")
    assert verdict(summary, first)["headline"].endswith("and the blind audit does not confirm it.")
