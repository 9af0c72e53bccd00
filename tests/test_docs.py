"""Docs that must agree with the code and the files: figures/README.md lists every figure; docs/algorithms.md
states the config keys it names (the entropy bonus is a setting, not absent); the forest plot has readable labels."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pandas as pd

from fspo_lite.config import Config
from fspo_lite.drivers.report.plots import metric_label, plot_forest

ROOT = Path(__file__).resolve().parents[1]


def test_figures_readme_lists_every_committed_figure():
    listed = (ROOT / "figures/README.md").read_text()
    missing = [p.name for p in sorted((ROOT / "figures").glob("*.png")) if f"`{p.name}`" not in listed]
    assert missing == []


def _keys(config, prefix=""):
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        name = f"{prefix}{field.name}"
        yield name
        if dataclasses.is_dataclass(value):
            yield from _keys(value, name + ".")


def test_algorithms_doc_names_only_train_keys_that_exist_and_the_entropy_bonus_setting():
    """The `train.*` keys docs/algorithms.md names (other prefixes there are also module names: caution.py, ...)."""
    text = (ROOT / "docs/algorithms.md").read_text()
    keys = set(_keys(Config()))
    named = set(re.findall(r"`(train\.[a-z_0-9]+)`", text))
    assert named and sorted(named - keys) == []
    assert "train.entropy_coef" in named
    assert "There is no\nentropy bonus" not in text and "There is no entropy bonus" not in text


def test_forest_plot_labels_are_words_and_it_has_a_title(tmp_path):
    assert metric_label("step_hallucination@embedding (matched length)") == \
        "step hallucination, embedding judge, matched length"
    assert metric_label("supported_per_response@likelihood") == "supported sentences, likelihood judge"
    rows = pd.DataFrame([{"metric": m, "method": k, "baseline": "grpo", "diff": 0.1, "low": 0.0, "high": 0.2}
                         for m in ("accuracy", "step_hallucination@embedding") for k in ("fspo", "caution")])
    fig = plot_forest(rows, ["accuracy", "step_hallucination@embedding"], tmp_path / "f.png", title="T")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["accuracy", "step hallucination, embedding judge"]
    assert fig._suptitle.get_text() == "T"
