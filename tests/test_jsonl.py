"""The JSON-lines reader (fspo_lite.jsonl): records end at "\\n" only, broken lines are named, torn tails skipped.

The characters below are ones `str.splitlines()` breaks at but `json.dumps(..., ensure_ascii=False)` leaves raw
inside a string; a sampled answer holding U+2028 once broke notebook 04's report of a whole runs folder.
"""

import json

import pytest

from fspo_lite.jsonl import json_lines, read_jsonl

LINE_BREAKS_INSIDE_STRINGS = ["\u2028", "\u2029", "\x85"]
"""What str.splitlines() breaks at and json.dumps leaves raw (it escapes the control characters below U+0020)."""


def _write(path, rows, ensure_ascii=False):
    path.write_text("".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("char", LINE_BREAKS_INSIDE_STRINGS)
def test_a_record_is_not_cut_at_other_line_breaks(tmp_path, char):
    rows = [{"output": f"Paris{char}is the capital", "n": 1}, {"output": f"{char}{char}", "n": 2}]
    path = _write(tmp_path / "r.jsonl", rows)
    text = path.read_text(encoding="utf-8")
    assert char in text and len(text.splitlines()) > 2
    assert read_jsonl(path) == rows
    assert [json.loads(line) for line in json_lines(text)] == rows


def test_splitlines_would_have_failed_on_the_record_that_broke_the_report(tmp_path):
    path = _write(tmp_path / "r.jsonl", [{"output": "a\u2028b"}])
    with pytest.raises(json.JSONDecodeError):
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert read_jsonl(path) == [{"output": "a\u2028b"}]


def test_blank_lines_crlf_and_a_byte_order_mark(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n\n   \n{"a": 2}\r\n')
    assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    assert json_lines('{"a": 1}\n\n \t\n') == ['{"a": 1}']
    assert json_lines("") == [] and json_lines("\n\n") == []


def test_a_broken_line_is_named_by_file_and_number(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}\n\n{"a": \n{"a": 3}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"r\.jsonl:3: not a JSON line"):
        read_jsonl(path)
    with pytest.raises(ValueError, match=r"r\.jsonl:3: not a JSON line"):
        read_jsonl(path, torn_tail=True)  # only the last line may be torn


def test_a_torn_last_line_is_skipped_only_when_asked(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3, "text": "\xc3')  # killed mid-write, mid-character
    assert read_jsonl(path, torn_tail=True) == [{"step": 1}, {"step": 2}]
    with pytest.raises(ValueError, match="not UTF-8 text"):
        read_jsonl(path)
    path.write_text('{"step": 1}\n{"step": 2', encoding="utf-8")
    with pytest.raises(ValueError, match=r"m\.jsonl:2: not a JSON line"):
        read_jsonl(path)
    assert read_jsonl(path, torn_tail=True) == [{"step": 1}]


@pytest.mark.parametrize("garbage", [b"\x00\x00\x00", b"[1, 2", b"}{", b"NaNa", b"\xff\xfe{}"])
def test_garbage_raises_a_value_error(tmp_path, garbage):
    path = tmp_path / "g.jsonl"
    path.write_bytes(garbage + b"\n")
    with pytest.raises(ValueError, match="g.jsonl"):
        read_jsonl(path)


def test_records_need_not_be_objects(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_text('1\n"x"\n[1, 2]\nnull\n', encoding="utf-8")
    assert read_jsonl(path) == [1, "x", [1, 2], None]
