"""Smoke test of bench/hostile_inputs.py: its quick run (no alias bomb child, no 50 MB row, no training; the vLLM
server cases against a fake server; notebook parameters, result files and output folders from
bench/hostile_outside.py) refuses every hostile case in one line on the current code (docs/reliability.md reports
the full run)."""

import importlib.util
import io
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_probe_refuses_every_case():
    spec = importlib.util.spec_from_file_location("hostile_inputs", ROOT / "bench" / "hostile_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    totals = module.main(["--quick"], out=out)
    assert set(totals) == {"YAML files", "numeric keys x 5 values", "words and method names", "eval option shortcuts",
                           "data rows", "pysbd marker characters", "vLLM server answers", "notebook parameters",
                           "result files", "output folders"}
    assert totals["numeric keys x 5 values"]["refused"] + totals["numeric keys x 5 values"]["valid"] > 350
    bad = {group: {k: n for k, n in counts.items() if k in ("late", "silent", "raw", "lost") and n}
           for group, counts in totals.items()}
    assert not any(bad.values()), out.getvalue()
    assert "total:" in out.getvalue()
