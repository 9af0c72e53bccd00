"""Notebook 01 runs top to bottom under papermill with the tiny model (the real-model timing is in docs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_measure_hallucination.ipynb"


def test_notebook_01_runs_with_tiny_settings(tmp_path, monkeypatch):
    papermill = pytest.importorskip("papermill")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    output = tmp_path / "out.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(output), cwd=str(NOTEBOOK.parent), progress_bar=False,
                               parameters={"model": "tiny", "limit": 1, "samples": 2, "max_new_tokens": 4,
                                           "output_dir": str(tmp_path / "runs")})
    cells = json.loads(output.read_text())["cells"]
    images = [o for c in cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2  # headline bars and the decomposition
    summary = json.loads((tmp_path / "runs" / "sampled" / "summary.json").read_text())
    assert summary["benchmarks"]["kbqa"]["items"] == 1 and summary["config"]["evaluation"]["samples"] == 2
