"""The public functions on text (fspo_lite.scoring.by_text) by hand, and the README's Python API example run as
written."""

import contextlib
import io
import re
from pathlib import Path

import fspo_lite
from fspo_lite import group_token_advantages, split_reasoning, verify_reasoning

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = "Gold is a chemical element with the symbol Au and atomic number 79."
RESPONSES = ["<think>Gold has the symbol Au. Gold has atomic number 12.</think>\n<answer>Au</answer>",
             "<think>Gold has the symbol Ag.</think>\n<answer>Ag</answer>"]


def test_split_and_verify():
    assert split_reasoning(RESPONSES[0]) == ["Gold has the symbol Au.", "Gold has atomic number 12."]
    assert split_reasoning("no think block") == [] and split_reasoning("") == []
    assert verify_reasoning(RESPONSES[0], EVIDENCE) == [("Gold has the symbol Au.", 1),
                                                         ("Gold has atomic number 12.", -1)]


def test_group_advantages_grpo_and_fspo_by_hand(smol_tokenizer):
    """Rewards 1 (Au) and 0 (Ag): group-normalised advantages +0.707 and -0.707 (std with Bessel's correction,
    sqrt(0.5)). GRPO puts them on every token; FSPO flips the tokens of the right answer's unsupported sentence to
    -0.707 and none of the wrong answer's (its one sentence is unsupported and keeps its negative sign)."""
    grpo = group_token_advantages("What is the chemical symbol of gold?", ["Au"], EVIDENCE, RESPONSES, smol_tokenizer,
                                  "grpo")
    fspo = group_token_advantages("What is the chemical symbol of gold?", ["Au"], EVIDENCE, RESPONSES, smol_tokenizer,
                                  "fspo")
    assert [r.reward for r in grpo] == [1.0, 0.0] and [r.reward for r in fspo] == [1.0, 0.0]
    assert all(abs(a - 0.7071) < 1e-3 for a in grpo[0].advantages) and not any(grpo[0].flipped)
    assert fspo[0].sentence_labels == [1, -1] and fspo[1].sentence_labels == [-1]
    text = "".join(fspo[0].tokens)
    second = text.index("Gold has atomic")
    starts = [len("".join(fspo[0].tokens[:k])) for k in range(len(fspo[0].tokens))]
    positions = [k for k, start in enumerate(starts)  # tokens overlapping the second sentence
                 if start + len(fspo[0].tokens[k]) > second and start < text.index("</think>")]
    assert positions and all(fspo[0].flipped[k] and fspo[0].advantages[k] < 0 for k in positions)
    assert sum(fspo[0].flipped) == len(positions) and not any(fspo[1].flipped)


def test_the_readme_example_runs_as_written():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Python API"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "['Gold has the symbol Au.', 'Gold has atomic number 12.']"
    assert lines[2].startswith("grpo ") and lines[3].startswith("fspo ")
    assert "atomic+0.7" in lines[2] and "atomic-0.7" in lines[3]
    for name in ("split_reasoning", "verify_reasoning", "group_token_advantages", "load_tokenizer"):
        assert name in fspo_lite.__all__
