"""The evidence-in-the-prompt pre-flight reading (scripts/preflight_ctx.py), by hand."""

from __future__ import annotations

import json

import pytest

from conftest import load_script

preflight_ctx = load_script("preflight_ctx")


def record(labels, tokens=10, ok=True, benchmark="kbqa"):
    return {"benchmark": benchmark, "id": "q", "sample": 0, "sentence_labels_by_judge": {"kb": labels},
            "response_tokens": tokens, "format_ok": ok}


def test_the_second_sentence_share_by_hand():
    records = [record([1, 1]), record([-1, 0, 1]), record([0, -1], tokens=64, ok=False), record([1]),
               record([0]), record([1, 1], benchmark="halueval")]
    reading = preflight_ctx.preflight(records)
    # second sentences of the kbqa records: 1, 0, -1 -> 1 supported of 3
    assert (reading["second_sentences"], reading["second_supported"]) == (3, 1)
    assert reading["second_supported_share"] == pytest.approx(1 / 3) and reading["passes"]
    assert reading["no_checkable_share"] == pytest.approx(1 / 5)          # [0] only
    assert reading["cut_at_token_limit_share"] == pytest.approx(1 / 5)
    assert reading["format_rate"] == pytest.approx(4 / 5)
    assert not preflight_ctx.preflight([record([1, -1]), record([1, -1, 1])])["passes"]   # 0 of 2


def test_wilson_by_hand():
    # 33 of 91: p = 0.36264, z^2 = 3.8415; centre (p + z^2/182) / (1 + z^2/91) = 0.383747 / 1.042214 = 0.36820;
    # half 1.96 x sqrt(p(1-p)/91 + z^2/(4 x 91^2)) / 1.042214 = 1.96 x sqrt(0.0025399 + 0.0001160) / 1.042214 = 0.09692
    low, high = preflight_ctx.wilson(33, 91)
    assert low == pytest.approx(0.27128, abs=2e-4) and high == pytest.approx(0.46512, abs=2e-4)
    assert all(x != x for x in preflight_ctx.wilson(0, 0))


def test_malformed_records_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="no kbqa record"):
        preflight_ctx.preflight([record([1, 1], benchmark="halueval")])
    with pytest.raises(ValueError, match="no kb labels"):
        preflight_ctx.preflight([{"benchmark": "kbqa", "sentence_labels_by_judge": {"embedding": [1]}}])
    with pytest.raises(ValueError, match="no kb labels"):
        preflight_ctx.preflight([record([1, "yes"])])
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(record([1, 1])) + "\n{not json\n")
    with pytest.raises(SystemExit, match=r"records.jsonl:2: not a JSON line"):
        preflight_ctx.main(["--records", str(path)])
